/* internal.h — what the API layer, the planner, the backends, the reference and the tests share. */
#ifndef FDEC_INTERNAL_H
#define FDEC_INTERNAL_H

#include "flashdec.h"
#include "state.h"

#include <stddef.h>
#include <stdint.h>

/* A validated call: every field checked, defaults resolved, strides in elements. */
typedef struct {
    uint32_t D, H, G, R;    /* head_dim, q heads, kv heads, q heads per kv head */
    float scale;            /* resolved: 0 became 1/sqrt(head_dim) */
    uint32_t seq_len;
    uint32_t lo;            /* first attended position */
    uint32_t ring;          /* 0 or ring capacity */
    fdec_dtype qt, kvt, ot;
    size_t ps, hs;          /* position and head strides, elements */
} fdec_problem;

/* Split geometry (plan.c), the same rule for every backend given its parallelism. */
typedef struct {
    uint32_t lo, hi;        /* attended range */
    uint32_t num_chunks, chunk_len;
} fdec_split;

typedef struct fdec_backend_ops {
    void (*destroy)(void *impl);
    fdec_status (*reserve)(void *impl, const fdec_problem *p);
    fdec_status (*decode)(void *impl, const fdec_problem *p, const void *q, const void *k, const void *v,
                          void *out, float *lse);
    void (*plan)(void *impl, const fdec_problem *p, fdec_plan_info *info);
    /* Optional: checks that the pointers are usable by this backend (device pointers on CUDA). */
    fdec_status (*check_ptrs)(void *impl, const void *q, const void *k, const void *v, const void *out,
                              const float *lse);
    /* fdec_merge, arguments checked; NULL: not available on this backend yet */
    fdec_status (*merge)(void *impl, uint32_t n, uint32_t H, uint32_t D, fdec_dtype t, const void *const *outs,
                         const float *const *lses, void *out, float *lse);
} fdec_backend_ops;

/* api.c: records this thread's error message; returns `st` for tail calls. */
fdec_status fdec_set_error(fdec_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* api.c: turns a layer + seq_len into a problem, or an error with a message. */
fdec_status fdec_problem_init(const fdec_layer *layer, uint32_t seq_len, fdec_problem *p);

/* plan.c: split rule. `lanes` is the parallelism available (CPU threads, or GPU "slots"); `min_chunk` the
 * shortest chunk worth a separate partial state. */
fdec_split fdec_make_split(const fdec_problem *p, uint32_t lanes, uint32_t min_chunk, uint32_t max_chunks);
/* The most chunks fdec_make_split gives, with the same arguments, any call of p's shape whose attended range is
 * no longer than p's: what a reserve must hold. The count is not monotone in the length (a chunk's length is
 * rounded up to CHUNK_ALIGN, which can leave a longer call fewer chunks), so this is the count before rounding. */
uint32_t fdec_split_bound(const fdec_problem *p, uint32_t lanes, uint32_t min_chunk, uint32_t max_chunks);

/* Element size of a dtype. */
static inline size_t fdec_dtype_size(fdec_dtype t) { return t == FDEC_F32 ? 4 : 2; }

/* Scalar conversions (exact for f16/bf16 -> f32; round-to-nearest-even for f32 -> f16/bf16). */
float fdec_f16_to_f32(uint16_t h);
uint16_t fdec_f32_to_f16(float f);
float fdec_bf16_to_f32(uint16_t h);
uint16_t fdec_f32_to_bf16(float f);
float fdec_load_elem(const void *base, size_t i, fdec_dtype t);
void fdec_store_elem(void *base, size_t i, fdec_dtype t, float x);

/* Row index of position t in the cache. */
static inline uint64_t fdec_row(const fdec_problem *p, uint64_t t) { return p->ring ? t % p->ring : t; }

/* ref.c: float64 reference. out_f64 [H][D], lse_f64 [H] (may be NULL). */
void fdec_reference(const fdec_problem *p, const void *q, const void *k, const void *v, double *out_f64,
                    double *lse_f64);

/* Backends. */
fdec_status fdec_cpu_create(const fdec_options *o, void **impl, const fdec_backend_ops **ops);
fdec_status fdec_cuda_create(const fdec_options *o, void **impl, const fdec_backend_ops **ops);

/* cpu: features of this CPU (bitmask of 1 << FDEC_CPU_AVX2, FDEC_CPU_AVX512 or FDEC_CPU_NEON; scalar always). */
unsigned fdec_cpu_features(void);
const char *fdec_cpu_path_name(fdec_cpu_path p);
/* the last value of fdec_cpu_path: the option check, the name parser and the tests' loop over the paths end there */
#define FDEC_CPU_PATH_LAST FDEC_CPU_NEON
/* The path named name ("auto", "scalar", "avx2", "avx512", "neon") into out: 1, or 0 where the name is none of them. */
int fdec_cpu_path_parse(const char *name, fdec_cpu_path *out);

#endif

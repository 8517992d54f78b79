/* internal.h — what the API layer, the planner, the backends, the reference and the tests share. */
#ifndef FDEC_INTERNAL_H
#define FDEC_INTERNAL_H

#include "dtype.h"
#include "flashdec.h"
#include "kv.h"
#include "logits.h"
#include "state.h"

#include <stddef.h>
#include <stdint.h>

/* A validated call: every field checked, defaults resolved, strides in elements. */
typedef struct {
    uint32_t D, H, G, R;    /* head_dim, q heads, kv heads, q heads per kv head */
    fdec_logits logits;     /* the scale (resolved: 0 became 1/sqrt(head_dim)) and the variant */
    uint32_t seq_len;
    uint32_t lo;            /* first attended position (of the first query token) */
    uint32_t qpos;          /* the last query token's position, from which ALiBi counts (seq_len - 1 but in a shard's
                               call) */
    uint32_t nq;            /* query tokens, 1..FDEC_MAX_Q_LEN: q, out and lse hold nq rows of H heads */
    uint32_t window;        /* the layer's window (0: none), for the tokens' ranges (fdec_token_lo) */
    fdec_dtype qt, kvt, ot;
    fdec_kv_layout kv;      /* where the K/V rows are (kv.h) */
    fdec_kv_scales scales;  /* fp8 caches' scales (kv.h) */
} fdec_problem;

static inline uint64_t fdec_token_pos(const fdec_problem *p, uint32_t i) { return fdec_tok_pos(p->qpos, p->nq, i); }
static inline uint64_t fdec_token_lo(const fdec_problem *p, uint32_t i) {
    return fdec_tok_lo(fdec_token_pos(p, i), p->window);
}

/* A checked batch (api.c): the layer's problem at the batch's largest shape (max_seq_len positions, max_q_len tokens),
 * which fixes the plan and the scratch, and the caller's batch. */
typedef struct {
    fdec_problem p;
    const fdec_batch *b;
} fdec_batch_problem;

/* api.c: sequence i's problem (its length, tokens, first position, page-table row) and the element offset of its
 * cache from k and v (a contiguous cache's i * kv_seq_stride; 0 with pages). */
void fdec_batch_seq(const fdec_batch_problem *bp, uint32_t i, fdec_problem *p, size_t *kv_off);

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
    fdec_status (*plan)(void *impl, const fdec_problem *p, fdec_plan_info *info); /* refuses what decode would */
    /* Checks that a pointer is usable by this backend (a device pointer on CUDA; NULL passes). NULL where the
     * backend takes host pointers: then api.c checks the values of the layer's arrays before the call. */
    fdec_status (*check_ptr)(void *impl, const char *name, const void *ptr);
    /* fdec_merge, arguments checked; NULL: not available on this backend yet */
    fdec_status (*merge)(void *impl, uint32_t n, uint32_t H, uint32_t D, fdec_dtype t, const void *const *outs,
                         const float *const *lses, void *out, float *lse);
    /* fdec_decode_batch, arguments checked (on a host backend every value); NULL: not on this backend yet */
    fdec_status (*decode_batch)(void *impl, const fdec_batch_problem *bp, const void *q, const void *k, const void *v,
                                void *out, float *lse);
    /* fdec_context_reserve_batch where the batch's scratch is not that of its largest sequence (CUDA: every
     * sequence's chunk states at once); NULL: reserve(bp->p) */
    fdec_status (*reserve_batch)(void *impl, const fdec_batch_problem *bp);
    /* fdec_kv_write, arguments checked; p is the layer's problem with the cache's page geometry in p->kv */
    fdec_status (*kv_write)(void *impl, const fdec_problem *p, const fdec_kv_slots *s, const void *k_src,
                            const void *v_src, void *k, void *v);
    /* fdec_plan_batch where a batch is not planned as its largest sequence's call (CUDA: a batch's own split and
     * scratch); NULL: plan(bp->p) */
    fdec_status (*plan_batch)(void *impl, const fdec_batch_problem *bp, fdec_plan_info *info);
} fdec_backend_ops;

/* api.c: records this thread's error message; returns `st` for tail calls. Exported (FDEC_API), with
 * fdec_problem_init, for libflashdec_nccl, which checks layers and reports errors through this library; not API. */
FDEC_API fdec_status fdec_set_error(fdec_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* api.c: turns a layer + seq_len into a problem, or an error with a message. */
FDEC_API fdec_status fdec_problem_init(const fdec_layer *layer, uint32_t seq_len, fdec_problem *p);

/* api.c: fdec_decode with the query at position qpos >= seq_len - 1 of the cache's positions (ALiBi's distances):
 * libflashdec_nccl's call over one shard, whose query lies past the shard's end. Not API. */
FDEC_API fdec_status fdec_decode_at(fdec_context *ctx, const fdec_layer *layer, uint32_t seq_len, uint32_t qpos,
                                    const void *q, const void *k, const void *v, void *out, float *lse);

/* plan.c: split rule. `lanes` is the parallelism available (CPU threads, or GPU "slots"); `min_chunk` the
 * shortest chunk worth a separate partial state. */
fdec_split fdec_make_split(const fdec_problem *p, uint32_t lanes, uint32_t min_chunk, uint32_t max_chunks);
/* One item of a call's work: positions [t0, t1) of sequence seq, KV heads [g0, g1) with all their query heads, into
 * one partial state (state.h) per query head. */
typedef struct {
    uint64_t t0, t1;
    uint32_t seq, g0, g1;
} fdec_work;

/* plan.c: the work list of sequence seq's split s, dealt to `runs` runs (the CPU's threads): run i takes the split's
 * chunks [i n / runs, (i + 1) n / runs) as items over all G KV heads, and where there are more chunks than runs its
 * last chunk is cut into `cut` items of whole blocks of `align` positions, so that the end of a call is shared out
 * in small pieces (while the list stays within max_items). Fills w[0 .. count) and first[0 .. runs] (run i is items
 * [first[i], first[i + 1])) where not NULL; returns the count. Consecutive items are adjacent in position. */
uint32_t fdec_work_list(const fdec_split *s, uint32_t seq, uint32_t G, uint32_t runs, uint32_t cut, uint32_t align,
                        uint32_t max_items, fdec_work *w, uint32_t *first);
/* The most chunks fdec_make_split gives, with the same arguments, any call of p's shape whose attended range is
 * no longer than p's: what a reserve must hold. The count is not monotone in the length (a chunk's length is
 * rounded up to CHUNK_ALIGN, which can leave a longer call fewer chunks), so this is the count before rounding. */
uint32_t fdec_split_bound(const fdec_problem *p, uint32_t lanes, uint32_t min_chunk, uint32_t max_chunks);

/* ref.c: float64 reference. out_f64 [nq][H][D], lse_f64 [nq][H] (may be NULL). */
void fdec_reference(const fdec_problem *p, const void *q, const void *k, const void *v, double *out_f64,
                    double *lse_f64);

/* Settings that only the tests and the fuzz driver use: a kernel or a split the library would not pick, so that
 * every kernel is checked on every shape. Zero fields keep the library's rule. */
typedef struct {
    int cuda_simt_only;             /* CUDA: the SIMT kernel for every shape */
    uint32_t cuda_min_chunk;        /* CUDA: the shortest chunk of the split */
    uint32_t cuda_d512_strided_min; /* CUDA: head_dim 512's strided steps from chunks of this length */
} fdec_test_options;

/* api.c: fdec_context_create with test settings (t may be NULL). */
fdec_status fdec_context_create_test(fdec_backend backend, const fdec_options *opts, const fdec_test_options *t,
                                     fdec_context **out);

/* The CUDA backend is a module loaded at run time (cuda/loader.c): the loading library hands it this table, and the
 * module's fdec_cuda_module_create (cuda/module.c) creates the backend. FDEC_CUDA_MODULE_ABI changes with the table,
 * fdec_backend_ops, fdec_problem or fdec_test_options, so that a module of another version is refused. */
#define FDEC_CUDA_MODULE_ABI 4
typedef struct {
    int abi;
    void (*set_error)(fdec_status st, const char *msg); /* the loading library's fdec_set_error */
} fdec_cuda_host;
typedef fdec_status (*fdec_cuda_module_create_fn)(const fdec_cuda_host *h, const fdec_options *o,
                                                  const fdec_test_options *t, void **impl,
                                                  const fdec_backend_ops **ops);

/* Backends. */
fdec_status fdec_cpu_create(const fdec_options *o, void **impl, const fdec_backend_ops **ops);
fdec_status fdec_cuda_create(const fdec_options *o, const fdec_test_options *t, void **impl,
                             const fdec_backend_ops **ops);

/* cpu: features of this CPU (bitmask of 1 << FDEC_CPU_AVX2, FDEC_CPU_AVX512 or FDEC_CPU_NEON; scalar always). */
unsigned fdec_cpu_features(void);
const char *fdec_cpu_path_name(fdec_cpu_path p);
/* the last value of fdec_cpu_path: the option check, the name parser and the tests' loop over the paths end there */
#define FDEC_CPU_PATH_LAST FDEC_CPU_NEON
/* The path named name ("auto", "scalar", "avx2", "avx512", "neon") into out: 1, or 0 where the name is none of them. */
int fdec_cpu_path_parse(const char *name, fdec_cpu_path *out);

#endif

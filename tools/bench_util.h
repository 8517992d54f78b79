/* bench_util.h — what the tool (tools/flashdec.c) and the test runner (tests/test_main.c) share: random
 * problems with poisoned padding, the check against the float64 reference, timers and the machine's ceilings. */
#ifndef FDEC_BENCH_UTIL_H
#define FDEC_BENCH_UTIL_H

#include "../src/internal.h"

#include <stddef.h>
#include <stdint.h>

typedef struct { uint64_t s; } fd_rng;
uint64_t fd_rand(fd_rng *r);
double fd_uniform(fd_rng *r); /* [0, 1) */

double fd_now(void); /* seconds, monotonic */

/* Layouts the tests and the tool build. */
typedef enum { FD_DENSE = 0, FD_POS_PADDED, FD_HEAD_MAJOR, FD_NUM_LAYOUTS } fd_layout;
const char *fd_layout_name(fd_layout l);

/* One problem with its host buffers. Every K/V element outside the attended vectors (other rows, padding) is
 * NaN, so a kernel that reads where it should not produces NaN and fails the check. */
typedef struct {
    fdec_layer layer;
    uint32_t seq_len;
    fd_layout layout;
    void *q, *k, *v;
    size_t kv_elems; /* elements in each of k and v */
    fdec_problem p;
    double max_logit; /* largest |scale * q.k| over the attended range, set by fd_reference */
    double v_scale;   /* the largest V scale (fp8 caches; else 1), set by fd_reference: out's size */
    float *sinks, *alibi; /* the layer's variant arrays, owned here (fd_problem_set_variants) */
} fd_problem;

/* Logit variants for a problem: softcap (0: off); sinks: 0 none, 1 random (a mix of -inf, values among the logits
 * and one that outweighs them all), 2 one fixed value (sink_value) for every head; alibi: 0 none, 1 the standard
 * slopes 2^(-8 (h + 1) / H) times alibi_scale (1 when 0). */
typedef struct {
    float softcap;
    int sinks;
    float sink_value;
    int alibi;
    float alibi_scale;
} fd_variants;
/* Sets pr's layer to v's variants with arrays of its own (freed by fd_problem_free) and re-derives pr->p. 0 on
 * success. */
int fd_problem_set_variants(fd_problem *pr, const fd_variants *v, fd_rng *rng);
/* ALiBi's standard slopes, out[h] = scale * 2^(-8 (h + 1) / H) (BLOOM's geometric series). */
void fd_alibi_slopes(float *out, uint32_t H, double scale);
/* perm[0 .. n) a random permutation of 0 .. n (pages dealt in a shuffled order, as an engine's allocator leaves them). */
void fd_shuffle(uint32_t *perm, uint32_t n, fd_rng *r);
/* Draws variants for a random configuration: none half the time, else a random mix. */
void fd_random_variants(fd_rng *r, fd_variants *v);
/* "softcap 30 sinks alibi" or "plain" into buf. */
const char *fd_variants_name(const fdec_layer *L, char *buf, size_t n);

/* Draws a random valid configuration: head_dim from 1 to 512 (odd ones too), GQA ratio 1..16, every dtype (a
 * quantised K/V type a quarter of the time, fp8 with scales),
 * windows below/at/above seq_len, rings wrapped many times (seq_len up to 4e9), all layouts, scale 0, 1 or
 * other. The attended work (heads x head_dim x positions) is capped at about 3e6 so a sweep stays quick. */
void fd_random_config(fd_rng *r, fdec_layer *L, uint32_t *seq_len, fd_layout *layout);

/* A random batch for fdec_decode_batch with its buffers: B sequences, paged (page size P, the pages shuffled in the
 * pool, sequence 1 sharing sequence 0's first pages, -1 entries below the window and past the end, head-major pages
 * or not) or contiguous (with a ring when ring), 1..16 tokens a sequence when tokens, logit variants now and then when
 * variants; rows never attended are NaN. */
typedef struct {
    fdec_layer L;
    fdec_batch b;
    uint32_t *seq_lens, *q_lens;
    int32_t *table;
    void *k, *v, *q;
    size_t kv_elems, rows;
    float *sinks, *alibi;
    size_t pos_stride_pool; /* elements between a page's (or a sequence's) rows */
} fd_batch_case;
int fd_batch_make(fd_batch_case *c, fd_rng *r, uint32_t B, uint32_t P, int head_major, int ring, int tokens,
                  int variants);
void fd_batch_free(fd_batch_case *c);
/* The float64 reference of sequence i (its rows from row0 of q) into out [q_len][H][D] and lse [q_len][H]: its attended
 * rows gathered into a dense cache by the test's own arithmetic, not the library's address rule. Returns the
 * tolerance. */
double fd_batch_reference(const fd_batch_case *c, uint32_t i, size_t row0, double *out, double *lse);

/* Allocates and fills the buffers. `amp` scales q (large amp -> large logits). Returns 0 on success. */
int fd_problem_make(fd_problem *pr, const fdec_layer *layer, uint32_t seq_len, fd_layout layout, float amp,
                    fd_rng *rng);
void fd_problem_free(fd_problem *pr);

/* Memory for a K or V cache: 2 MiB aligned; with FDEC_BENCH_HUGEPAGES set, backed by transparent huge pages
 * where the kernel allows (madvise), as engines that allocate their caches that way get. free() releases it. */
void *fd_alloc_kv(size_t bytes);

/* The reference for a problem: out [H*D], lse [H], and pr->max_logit. */
void fd_reference(fd_problem *pr, double *out, double *lse);

/* Allowed error for an out dtype and the problem's logit size (see the test's comment). */
double fd_tolerance(const fd_problem *pr);

/* Allowed lse error (relative to 1 + |lse|): f32 rounding plus the logit-size term of fd_tolerance. */
double fd_lse_tolerance(const fd_problem *pr);

/* The same two for a call described by its out dtype, head_dim and largest |logit| (fuzz/fuzz_decode_cuda.c, which
 * has no fd_problem). */
double fd_tolerance_of(fdec_dtype out_dtype, uint32_t D, double max_logit);
double fd_lse_tolerance_of(double max_logit);

/* Largest |out - ref| (NaN/unwritten elements give +inf) and the largest lse error (lse may be NULL). */
double fd_out_error(const fd_problem *pr, const void *out, const double *ref);
double fd_lse_error(const fd_problem *pr, const float *lse, const double *ref_lse);

/* The machine's ceilings, measured now: streaming-read bandwidth in GB/s over `bytes` with `threads` threads,
 * and f32 FMA peak in GFLOP/s (2 flops per FMA) with `threads` threads (the best of FD_FMA_TRIALS runs). */
#define FD_FMA_TRIALS 5
double fd_read_bandwidth(size_t bytes, uint32_t threads);
double fd_fma_peak(uint32_t threads);
/* The vector width fd_fma_peak measures with: 512 where the CPU has AVX-512 (the CPU kernel's widest path), 256
 * with AVX2 + FMA, 0 elsewhere (the peak is then 0 and only the memory floor counts). */
int fd_fma_width(void);
/* The size in bytes of the largest cache that Linux reports for CPU 0 (the L3), 0 if it cannot be read. */
size_t fd_l3_bytes(void);

/* KV bytes a call reads: 2 * attended positions * kv heads * head_dim * element size. */
double fd_kv_bytes(const fdec_problem *p);

/* Median of n doubles (sorts in place). */
double fd_median(double *x, int n);

#endif

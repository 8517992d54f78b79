/* harness.h — what the test files share: the check counter, the contexts of every path, a decode into a poisoned
 * and guarded output, and one case run on every context against the float64 reference. */
#ifndef FDEC_TEST_HARNESS_H
#define FDEC_TEST_HARNESS_H

#include "../tools/bench_util.h"
#include "../tools/devmem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int n_pass, n_fail;
extern int g_cuda;     /* --cuda: the backend under test is CUDA */
extern void *g_stream; /* a non-default stream for one of the CUDA contexts */

/* Counts a check; prints the message (printf-style) when it failed. */
void check(int ok, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Bytes either side of an output that must stay as poisoned. */
#define GUARD 64
typedef struct {
    unsigned char *out_raw, *lse_raw;
    void *out;
    float *lse;
    size_t out_bytes, lse_bytes;
} outbuf;

/* A problem's inputs where the backend reads them: the host buffers, or device copies under --cuda. */
typedef struct {
    const void *q, *k, *v;
    const float *sinks, *alibi;   /* the layer's variant arrays (NULL where off) */
    const float *kscales, *vscales; /* an fp8 cache's per-KV-head scales (NULL where off) */
    void *dq, *dk, *dv, *dsinks, *dalibi, *dks, *dvs; /* device copies to free */
} inputs;

typedef struct {
    fdec_context *ctx;
    char name[32];
} path_ctx;

/* An output buffer for p's out and lse with GUARD poisoned bytes either side. */
void outbuf_init(outbuf *b, const fdec_problem *p);
void outbuf_poison(outbuf *b);
int guards_ok(const outbuf *b);
void outbuf_free(outbuf *b);
char *describe(const fd_problem *pr, char *buf, size_t n);
int inputs_make(inputs *in, const fd_problem *pr);
void inputs_free(inputs *in);
fdec_status decode_into(fdec_context *ctx, const fd_problem *pr, const inputs *in, outbuf *b, int with_lse);
/* One decode on ctx against the reference (ref, ref_lse): counts its checks, returns the worst error; bytes (or
 * NULL) receives the output's bytes. */
double run_check_bytes(fdec_context *ctx, const char *who, const fd_problem *pr, const inputs *in, const double *ref,
                       const double *ref_lse, int with_lse, void *bytes);
double run_and_check(fdec_context *ctx, const char *who, fd_problem *pr, const inputs *in, const double *ref,
                     const double *ref_lse, int with_lse);
/* The contexts of every path this machine has (or the CUDA contexts under --cuda) into pc; returns how many. */
int make_path_contexts(path_ctx *pc);
/* pr on every context against the reference, with lse; prints the worst error. */
void check_problem(path_ctx *pc, int npc, const char *name, fd_problem *pr);
/* A random problem of layer L (q's elements of size amp) through check_problem. */
void one_case(path_ctx *pc, int npc, const char *name, fdec_layer L, uint32_t seq_len, float amp, uint64_t seed);
/* The same with the logit variants v (NULL: none). */
void one_case_variants(path_ctx *pc, int npc, const char *name, fdec_layer L, uint32_t seq_len, float amp,
                       uint64_t seed, const fd_variants *v);
fdec_layer layer_of(uint32_t D, uint32_t H, uint32_t G, uint32_t window, uint32_t ring, fdec_dtype kv, float scale);

/* The test groups (tests/test_*.c), run by test_main.c. */
void test_sweep(path_ctx *pc, int npc, int configs, uint64_t seed);
void test_decode_cases(path_ctx *pc, int npc, int short_run);
void test_variant_cases(path_ctx *pc, int npc, int short_run);
void test_drift(path_ctx *pc, int npc);
void test_numerics(path_ctx *pc, int npc);
void test_nonfinite(path_ctx *pc, int npc);
void test_contract(path_ctx *pc, int npc);
void test_conversions(void);
void test_merge(void);
void test_bad_input(void);
void test_split_bound(void);
void test_readme_example(const char *path);
void test_version(void);
void test_cuda_absent(void);
void test_determinism_threads(void);
void test_work_stealing(void);
void test_concurrency(void);
void test_cuda_graph(void);
void test_cuda_reserve_bound(void);
void test_batch(path_ctx *pc, int npc, int configs, uint64_t seed);
void test_batch_bad(void);
void test_kv_write(path_ctx *pc, int npc);
void test_batch_device_checks(path_ctx *pc);
void test_batch_graph(void);
void test_quant_blocks(path_ctx *pc, int npc);
void test_quant_nmse(path_ctx *pc, int npc);
void test_quant_scales(path_ctx *pc, int npc);

#endif

/* test_main.c — the test suite, one runner. Every kernel result is compared with the float64 reference on
 * fresh random inputs; outputs are poisoned first and guarded on both sides; K/V outside the attended range
 * is NaN, so a read out of range shows. The last line is "N passed, N failed".
 *
 * With --cuda every context is a CUDA one and inputs and outputs live on the device (make test-cuda); the
 * same checks run, plus CUDA graph capture and replay.
 *
 *   build/tests/run_tests [--cuda] [--seed N] [--configs N] [--readme-example PATH] [--quick]
 */
#include "../tools/bench_util.h"
#include "../tools/devmem.h"
#include "../src/cpu/cpu.h" /* the CPU paths' vector conversions (test_conversions) */
#include "../fuzz/fuzz_input.h" /* the corpus drift input's reading and filling (test_drift) */

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;
static int g_cuda; /* --cuda: the backend under test is CUDA */

static void check(int ok, const char *fmt, ...) {
    if (ok) {
        n_pass++;
        return;
    }
    n_fail++;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* ---- a decode with poisoned, guarded output ---- */

#define GUARD 64
typedef struct {
    unsigned char *out_raw, *lse_raw;
    void *out;
    float *lse;
    size_t out_bytes, lse_bytes;
} outbuf;

static void outbuf_init(outbuf *b, const fdec_problem *p) {
    b->out_bytes = (size_t)p->H * p->D * fdec_dtype_size(p->ot);
    b->lse_bytes = (size_t)p->H * sizeof(float);
    b->out_raw = malloc(b->out_bytes + 2 * GUARD);
    b->lse_raw = malloc(b->lse_bytes + 2 * GUARD);
    b->out = b->out_raw + GUARD;
    b->lse = (float *)(b->lse_raw + GUARD);
}
static void outbuf_poison(outbuf *b) {
    memset(b->out_raw, 0xA5, b->out_bytes + 2 * GUARD);
    memset(b->lse_raw, 0xA5, b->lse_bytes + 2 * GUARD);
    memset(b->out, 0xff, b->out_bytes); /* NaN in every dtype */
    memset(b->lse, 0xff, b->lse_bytes);
}
static int guards_ok(const outbuf *b) {
    for (int i = 0; i < GUARD; i++)
        if (b->out_raw[i] != 0xA5 || b->out_raw[GUARD + b->out_bytes + i] != 0xA5 || b->lse_raw[i] != 0xA5 ||
            b->lse_raw[GUARD + b->lse_bytes + i] != 0xA5)
            return 0;
    return 1;
}
static void outbuf_free(outbuf *b) {
    free(b->out_raw);
    free(b->lse_raw);
}

static char *describe(const fd_problem *pr, char *buf, size_t n) {
    const fdec_layer *L = &pr->layer;
    static const char *dt[] = {"f32", "f16", "bf16"};
    snprintf(buf, n, "D=%u H=%u G=%u L=%u win=%u ring=%u q/kv/out=%s/%s/%s %s scale=%g", L->head_dim,
             L->num_q_heads, L->num_kv_heads, pr->seq_len, L->window, L->ring_capacity, dt[L->q_dtype],
             dt[L->kv_dtype], dt[L->out_dtype], fd_layout_name(pr->layout), (double)L->scale);
    return buf;
}

/* A problem's inputs where the backend reads them: the host buffers, or device copies under --cuda. */
typedef struct {
    const void *q, *k, *v;
    void *dq, *dk, *dv; /* device copies to free */
} inputs;

static int inputs_make(inputs *in, const fd_problem *pr) {
    memset(in, 0, sizeof *in);
    if (!g_cuda) {
        in->q = pr->q, in->k = pr->k, in->v = pr->v;
        return 0;
    }
    size_t qb = (size_t)pr->p.H * pr->p.D * fdec_dtype_size(pr->p.qt), kb = pr->kv_elems * fdec_dtype_size(pr->p.kvt);
    in->dq = fd_dev_alloc(qb), in->dk = fd_dev_alloc(kb), in->dv = fd_dev_alloc(kb);
    if (!in->dq || !in->dk || !in->dv || fd_h2d(in->dq, pr->q, qb) || fd_h2d(in->dk, pr->k, kb) ||
        fd_h2d(in->dv, pr->v, kb))
        return -1;
    in->q = in->dq, in->k = in->dk, in->v = in->dv;
    return 0;
}

static void inputs_free(inputs *in) {
    fd_dev_free(in->dq);
    fd_dev_free(in->dk);
    fd_dev_free(in->dv);
}

/* Poisons b, runs the decode (on the device under --cuda, with the guards and poison copied there and the
 * whole guarded region copied back) and leaves the result in b. */
static fdec_status decode_into(fdec_context *ctx, const fd_problem *pr, const inputs *in, outbuf *b, int with_lse) {
    outbuf_poison(b);
    if (!g_cuda)
        return fdec_decode(ctx, &pr->layer, pr->seq_len, in->q, in->k, in->v, b->out, with_lse ? b->lse : NULL);
    size_t ob = b->out_bytes + 2 * GUARD, lb = b->lse_bytes + 2 * GUARD;
    unsigned char *dout = fd_dev_alloc(ob), *dlse = fd_dev_alloc(lb);
    fdec_status st = FDEC_EBACKEND;
    if (dout && dlse && !fd_h2d(dout, b->out_raw, ob) && !fd_h2d(dlse, b->lse_raw, lb)) {
        st = fdec_decode(ctx, &pr->layer, pr->seq_len, in->q, in->k, in->v, dout + GUARD,
                         with_lse ? (float *)(dlse + GUARD) : NULL);
        if (fd_dev_sync() || fd_d2h(b->out_raw, dout, ob) || fd_d2h(b->lse_raw, dlse, lb)) st = FDEC_EBACKEND;
    }
    fd_dev_free(dout);
    fd_dev_free(dlse);
    return st;
}

/* Runs ctx on pr and checks against the reference (ref/ref_lse). Returns the error; with `bytes` (not NULL) also the
 * output's bytes there. */
static double run_check_bytes(fdec_context *ctx, const char *who, const fd_problem *pr, const inputs *in,
                              const double *ref, const double *ref_lse, int with_lse, void *bytes) {
    outbuf b;
    outbuf_init(&b, &pr->p);
    char desc[256];
    fdec_status st = decode_into(ctx, pr, in, &b, with_lse);
    double err = INFINITY, tol = fd_tolerance(pr);
    if (st != FDEC_OK) {
        check(0, "%s: %s: status %s: %s", who, describe(pr, desc, sizeof desc), fdec_status_string(st),
              fdec_last_error());
    } else {
        err = fd_out_error(pr, b.out, ref);
        double lerr = with_lse ? fd_lse_error(pr, b.lse, ref_lse) : 0;
        int lse_untouched = with_lse || ((unsigned char *)b.lse)[0] == 0xff;
        check(err <= tol && lerr <= fd_lse_tolerance(pr) && guards_ok(&b) && lse_untouched,
              "%s: %s: out err %.3g (tol %.3g), lse err %.3g, guards %s", who, describe(pr, desc, sizeof desc),
              err, tol, lerr, guards_ok(&b) ? "ok" : "WRITTEN");
    }
    if (bytes) memcpy(bytes, b.out, b.out_bytes);
    outbuf_free(&b);
    return err;
}
static double run_and_check(fdec_context *ctx, const char *who, fd_problem *pr, const inputs *in, const double *ref,
                            const double *ref_lse, int with_lse) {
    return run_check_bytes(ctx, who, pr, in, ref, ref_lse, with_lse, NULL);
}

/* ---- contexts for every path this CPU has ---- */

typedef struct {
    fdec_context *ctx;
    char name[32];
} path_ctx;

static void *g_stream; /* a non-default stream for one of the CUDA contexts */

static int make_path_contexts(path_ctx *pc) {
    int n = 0;
    /* the default stream, a stream of our own, the SIMT kernel alone, and chunks of 32 positions: more chunks than
     * steps, so that with strided chunks (mma.cuh) some blocks get none, and head_dim 512's strided instance at every
     * chunk length (cuda.cu) */
    if (g_cuda) {
        static const char *const names[] = {"default-stream", "stream", "simt", "chunk32"};
        for (int i = 0; i < 4; i++) {
            fdec_options o = fdec_default_options();
            o.cuda_stream = i ? g_stream : NULL;
            fdec_test_options t = {0, 0, 0};
            if (i == 2) t.cuda_simt_only = 1;
            if (i == 3) t.cuda_min_chunk = 32, t.cuda_d512_strided_min = 32;
            fdec_status st = fdec_context_create_test(FDEC_BACKEND_CUDA, &o, &t, &pc[n].ctx);
            if (st != FDEC_OK) {
                check(0, "create CUDA context: %s", fdec_last_error());
                continue;
            }
            snprintf(pc[n].name, sizeof pc[n].name, "cuda/%s", names[i]);
            n++;
        }
        return n;
    }
    unsigned f = fdec_cpu_features();
    for (int path = FDEC_CPU_SCALAR; path <= FDEC_CPU_PATH_LAST; path++) {
        if (!((f >> path) & 1)) {
            printf("skip: the %s path (this CPU lacks it)\n", fdec_cpu_path_name((fdec_cpu_path)path));
            continue;
        }
        fdec_options o = fdec_default_options();
        o.cpu_path = (fdec_cpu_path)path;
        o.threads = 2;
        if (fdec_context_create(FDEC_BACKEND_CPU, &o, &pc[n].ctx) != FDEC_OK) {
            check(0, "create %s context: %s", fdec_cpu_path_name((fdec_cpu_path)path), fdec_last_error());
            continue;
        }
        snprintf(pc[n].name, sizeof pc[n].name, "%s/2t", fdec_cpu_path_name((fdec_cpu_path)path));
        n++;
    }
    fdec_options o = fdec_default_options();
    o.threads = 1;
    if (fdec_context_create(FDEC_BACKEND_CPU, &o, &pc[n].ctx) == FDEC_OK) {
        snprintf(pc[n].name, sizeof pc[n].name, "auto/1t");
        n++;
    }
    return n;
}

/* ---- 1. the randomized sweep ---- */

static void test_sweep(path_ctx *pc, int npc, int configs, uint64_t seed) {
    fd_rng r = {seed};
    int done = 0;
    double worst = 0;
    for (int i = 0; i < configs; i++) {
        fdec_layer L;
        uint32_t seq_len;
        fd_layout layout;
        fd_random_config(&r, &L, &seq_len, &layout);
        fd_problem pr;
        if (fd_problem_make(&pr, &L, seq_len, layout, 1.0f, &r)) {
            check(0, "sweep config %d could not be built: %s", i, fdec_last_error());
            continue;
        }
        double *ref = malloc(sizeof(double) * pr.p.H * pr.p.D), *ref_lse = malloc(sizeof(double) * pr.p.H);
        fd_reference(&pr, ref, ref_lse);
        inputs in;
        if (inputs_make(&in, &pr)) check(0, "sweep config %d: inputs could not be copied to the device", i);
        else
            for (int c = 0; c < npc; c++) {
                double e = run_and_check(pc[c].ctx, pc[c].name, &pr, &in, ref, ref_lse, (int)(fd_rand(&r) % 5) != 0);
                if (e / fd_tolerance(&pr) > worst) worst = e / fd_tolerance(&pr);
            }
        inputs_free(&in);
        free(ref);
        free(ref_lse);
        fd_problem_free(&pr);
        done++;
    }
    printf("sweep: %d random configurations x %d contexts, worst error %.2f of tolerance\n", done, npc, worst);
}

/* ---- 2. the seed shapes and 3. numerics ---- */

/* pr on every context against the float64 reference, with lse; prints the worst error */
static void check_problem(path_ctx *pc, int npc, const char *name, fd_problem *pr) {
    double *ref = malloc(sizeof(double) * pr->p.H * pr->p.D), *ref_lse = malloc(sizeof(double) * pr->p.H);
    fd_reference(pr, ref, ref_lse);
    double worst = 0;
    inputs in;
    if (inputs_make(&in, pr)) check(0, "%s: inputs could not be copied to the device", name);
    else
        for (int c = 0; c < npc; c++) {
            double e = run_and_check(pc[c].ctx, pc[c].name, pr, &in, ref, ref_lse, 1);
            if (e > worst) worst = e;
        }
    inputs_free(&in);
    printf("%-40s worst error %.3g (tol %.3g)\n", name, worst, fd_tolerance(pr));
    free(ref);
    free(ref_lse);
}

static void one_case(path_ctx *pc, int npc, const char *name, fdec_layer L, uint32_t seq_len, float amp,
                     uint64_t seed) {
    fd_rng r = {seed};
    fd_problem pr;
    if (fd_problem_make(&pr, &L, seq_len, FD_DENSE, amp, &r)) {
        check(0, "%s: could not build: %s", name, fdec_last_error());
        return;
    }
    check_problem(pc, npc, name, &pr);
    fd_problem_free(&pr);
}

static fdec_layer layer_of(uint32_t D, uint32_t H, uint32_t G, uint32_t window, uint32_t ring, fdec_dtype kv,
                           float scale) {
    fdec_layer L;
    memset(&L, 0, sizeof L);
    L.head_dim = D;
    L.num_q_heads = H;
    L.num_kv_heads = G;
    L.window = window;
    L.ring_capacity = ring;
    L.kv_dtype = kv;
    L.scale = scale;
    return L;
}

static void test_seed_shapes(path_ctx *pc, int npc) {
    one_case(pc, npc, "gemma4 sliding 256/16/8 w1024 ring L=5000", layer_of(256, 16, 8, 1024, 1024, FDEC_F16, 1.0f),
             5000, 0.1f, 11);
    one_case(pc, npc, "gemma4 sliding 256/16/8 w1024 ring L=700", layer_of(256, 16, 8, 1024, 1024, FDEC_F16, 1.0f),
             700, 0.1f, 12);
    one_case(pc, npc, "gemma4 full 512/16/2 L=3000", layer_of(512, 16, 2, 0, 0, FDEC_F16, 1.0f), 3000, 0.05f, 13);
    one_case(pc, npc, "lfm2 64/32/8 (group 4) L=4096", layer_of(64, 32, 8, 0, 0, FDEC_F16, 0), 4096, 1.0f, 14);
    one_case(pc, npc, "llama3-8b 128/32/8 L=2048 bf16", layer_of(128, 32, 8, 0, 0, FDEC_BF16, 0), 2048, 1.0f, 15);
    /* long bf16 calls of the tensor-core kernel at head_dim 64 and 128: a build whose ptxas dropped the copies' L2
     * policy failed bf16 Llama-3-8B 32k on the H200 and no shorter case (tools/sass_check.py finds that hazard) */
    one_case(pc, npc, "llama3-8b 128/32/8 L=32768 bf16", layer_of(128, 32, 8, 0, 0, FDEC_BF16, 0), 32768, 1.0f, 16);
    one_case(pc, npc, "lfm2 64/32/8 L=32768 bf16", layer_of(64, 32, 8, 0, 0, FDEC_BF16, 0), 32768, 1.0f, 17);
}

/* Positions at the end of the 32-bit range (seq_len up to 2^32 - 1, in a ring): the last chunk of a split ends past
 * 2^32. The CUDA kernels once worked the chunk's end out in 32 bits, so that it wrapped to a small number and the
 * chunk's positions were left out (fuzz_decode_cuda found it at 10/2/1, window 110, seq_len 4294967295). The shapes
 * take the SIMT kernel (odd head_dim, f32; every head_dim in the cuda/simt context) and the tensor-core kernel (64 to
 * 512; its chunks at 64 and 128 are position-strided and end at seq_len). On the H200 the code before the fix failed
 * the first two everywhere and the next two on the SIMT kernel. In the last two the tensor-core kernel's last chunk too
 * ends past 2^32 (at 256: 16 chunks of 64 over 1,000 positions). */
static void test_position_end(path_ctx *pc, int npc) {
    const uint32_t M = UINT32_MAX;
    one_case(pc, npc, "32-bit end: 10/2/1 w110 ring256 f16", layer_of(10, 2, 1, 110, 256, FDEC_F16, 0), M, 1.0f, 21);
    one_case(pc, npc, "32-bit end: 9/4/2 w333 ring400 f32", layer_of(9, 4, 2, 333, 400, FDEC_F32, 0), M - 5, 1.0f, 22);
    one_case(pc, npc, "32-bit end: 64/8/2 w1000 ring1024 f16", layer_of(64, 8, 2, 1000, 1024, FDEC_F16, 0), M - 3,
             1.0f, 23);
    one_case(pc, npc, "32-bit end: 128/32/8 w700 ring1024 bf16", layer_of(128, 32, 8, 700, 1024, FDEC_BF16, 0), M,
             1.0f, 24);
    one_case(pc, npc, "32-bit end: 256/16/8 w1000 ring1024 f16", layer_of(256, 16, 8, 1000, 1024, FDEC_F16, 1.0f), M,
             0.1f, 25);
    one_case(pc, npc, "32-bit end: 512/16/2 w3000 ring4096 f16", layer_of(512, 16, 2, 3000, 4096, FDEC_F16, 1.0f), M,
             0.05f, 26);
}

/* Long chunks for the CUDA SIMT kernel: in each call a lane group sums more than FDEC_CUDA_SUM_MIN_TERMS (128) rows
 * of its chunk, so the kernel adds its block sums (kernels.cuh). On an H200 the split gives 1/28/1 19 chunks of 3,616
 * positions (904 rows a lane group), 128/8/1 128 chunks of 1,024 (256) and 100/32/8 17 chunks of 1,952 (488). The
 * input that showed the drift of one running sum there, nearly the same V everywhere, is the corpus's
 * cuda-f32-drift-d1-h28-68k, which `make test` replays on a GPU machine. */
static void test_long_sums(path_ctx *pc, int npc) {
    one_case(pc, npc, "long sums 1/28/1 L=68244 f32", layer_of(1, 28, 1, 0, 0, FDEC_F32, 0), 68244, 1.0f, 41);
    one_case(pc, npc, "long sums 128/8/1 L=131072 f32", layer_of(128, 8, 1, 0, 0, FDEC_F32, 0), 131072, 1.0f, 42);
    one_case(pc, npc, "long sums 100/32/8 L=32768 f16", layer_of(100, 32, 8, 0, 0, FDEC_F16, 0), 32768, 1.0f, 43);
}

/* The corpus drift input (fuzz/corpus/cuda-f32-drift-d1-h28-68k: head_dim 1, 28 heads on one KV head, f32) with
 * seq_len 4,194,304, read and filled by the fuzz harnesses' own code (fuzz/fuzz_input.h), then V times 128 (exact) so
 * that it is ~0.6 and the absolute tolerance bites. Nearly equal weights over nearly equal V: a running f32 sum of
 * like terms drifts. The CPU's group totals were such a sum, one term a group of 1,024 positions: one thread (one
 * chunk) came out 2.7e-5 off relative, two threads 5.8e-6, against the tolerance's 2e-6; in double 1e-7. The CUDA SIMT kernel sums 55k rows a lane group here (block sums of 256 steps). */
static void test_drift(path_ctx *pc, int npc) {
    static const uint8_t bytes[] = {0x32, 0x00, 0x01, 0xd3, 0x00, 0x1c, 0x00, 0xfa, 0x00, 0x1c, 0x20,
                                    0xfa, 0x02, 0x2e, 0x6e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                    0x00, 0xe7, 0x00, 0x40, 0x00, 0x00, 0xb5, 0x66, 0x94, 0xff};
    reader rd = {bytes, sizeof bytes};
    fuzz_case fc;
    fuzz_max_kv = (size_t)1 << 22;
    if (!fuzz_case_read(&rd, &fc) || !fc.finite || fc.seq_len != 4194304) {
        check(0, "drift input: the fuzz bytes do not read as the case they were written for");
        return;
    }
    fd_rng r = {44};
    fd_problem pr;
    if (fd_problem_make(&pr, &fc.L, fc.seq_len, FD_DENSE, 1.0f, &r)) {
        check(0, "drift input: could not build: %s", fdec_last_error());
        return;
    }
    fuzz_fill_inputs(&rd, &fc, pr.q, pr.k, pr.v); /* the dense layout: the same element counts as the fuzz case's */
    for (size_t i = 0; i < pr.kv_elems; i++) ((float *)pr.v)[i] *= 128.0f;
    check_problem(pc, npc, "drift input 1/28/1 L=4194304 f32", &pr);
    fd_problem_free(&pr);
}

/* Lengths whose CUDA split (132 SMs, one KV head, one head tile: min(264, L / 64) chunks) lands on each side of
 * the merge kernels' limits: 16 and 17 chunks (fdec_chunk_merge_small<16> / <32>), 32 and 33 (<32> / <64>), 64 and
 * 65 (<64> / the split merge), 256 (the most). On the CPU they are seven more shapes. */
static void test_merge_paths(path_ctx *pc, int npc) {
    static const uint32_t lens[] = {1024, 1088, 2048, 2112, 4096, 4160, 16384};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "merge paths 128/8/1 L=%u", (unsigned)lens[i]);
        one_case(pc, npc, name, layer_of(128, 8, 1, 0, 0, FDEC_F16, 0), lens[i], 1.0f, 30 + i);
    }
}

static void test_numerics(path_ctx *pc, int npc) {
    /* logits around 1e4: scale 1, |q| large. The softmax is then nearly one-hot; output must still be right. */
    one_case(pc, npc, "large logits (~1e4) 128/8/2 f32", layer_of(128, 8, 2, 0, 0, FDEC_F32, 1.0f), 1000, 150.0f,
             21);
    one_case(pc, npc, "large logits (~1e4) 64/4/4 f16", layer_of(64, 4, 4, 0, 0, FDEC_F16, 1.0f), 500, 300.0f, 22);
    /* window 1 returns V of the last position exactly (f32 out, f32 kv) */
    fd_rng r = {23};
    fdec_layer L = layer_of(33, 6, 3, 1, 0, FDEC_F32, 0);
    fd_problem pr;
    fd_problem_make(&pr, &L, 77, FD_DENSE, 1.0f, &r);
    inputs in;
    inputs_make(&in, &pr);
    for (int c = 0; c < npc; c++) {
        outbuf b;
        outbuf_init(&b, &pr.p);
        fdec_status st = decode_into(pc[c].ctx, &pr, &in, &b, 1);
        int ok = st == FDEC_OK;
        for (uint32_t h = 0; ok && h < 6; h++)
            for (uint32_t d = 0; d < 33; d++)
                ok &= ((float *)b.out)[h * 33 + d] == ((float *)pr.v)[76 * 3 * 33 + (h / 2) * 33 + d];
        check(ok, "%s: window 1 must return V of the last position exactly", pc[c].name);
        outbuf_free(&b);
    }
    inputs_free(&in);
    fd_problem_free(&pr);
    /* The same V at every position: out = V whatever the weights, so its error is the summation's alone. A running
     * sum of like terms in f32 drifts (the rounding errors of adding a like term to a growing sum do not cancel): one
     * sum from position to position was 1.3e-6 to 1.5e-6 off at 1,000 positions and 5e-6 at 16k with one thread;
     * found by fuzz/fuzz_decode_cuda.c, the CUDA backend against the CPU's. */
    for (int kv = 0; kv < 4; kv++) {
        fdec_layer Lv = layer_of(64, 4, 2, 0, 0, kv & 1 ? FDEC_F16 : FDEC_F32, 0);
        fd_rng rv = {24};
        fd_problem pv;
        const uint32_t n = kv < 2 ? 1000 : 16384;
        if (fd_problem_make(&pv, &Lv, n, FD_DENSE, 1.0f, &rv)) {
            check(0, "constant V: could not build: %s", fdec_last_error());
            continue;
        }
        const size_t row = 2 * 64, es = kv & 1 ? 2 : 4;
        for (uint32_t t = 1; t < n; t++) memcpy((char *)pv.v + t * row * es, pv.v, row * es);
        inputs_make(&in, &pv);
        for (int c = 0; c < npc; c++) {
            outbuf b;
            outbuf_init(&b, &pv.p);
            fdec_status st = decode_into(pc[c].ctx, &pv, &in, &b, 0);
            double worst = st == FDEC_OK ? 0 : INFINITY;
            for (uint32_t h = 0; h < 4; h++)
                for (uint32_t d = 0; d < 64; d++) {
                    const double x = ((float *)b.out)[h * 64 + d];
                    const double y = fdec_load_elem(pv.v, (h / 2) * 64 + d, Lv.kv_dtype);
                    const double e = fabs(x - y) / fabs(y);
                    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
                }
            check(worst <= 1e-6, "%s: V the same at all %u positions (%s): out must equal it, relative error %.3g",
                  pc[c].name, n, kv & 1 ? "f16" : "f32", worst);
            outbuf_free(&b);
        }
        inputs_free(&in);
        fd_problem_free(&pv);
    }
}

/* NaN or inf in q, K or V of the attended range: the affected heads come out NaN (every element, and lse),
 * the other heads stay right. Cases 18-23 are long: head_dim 9 over 40,000 positions, where the CUDA SIMT
 * kernel's lane groups sum 152 rows each and so take its block sums (on an H200: 66 chunks of 608 positions). Cases
 * 24-29 have 8 Q heads on 1 KV head, head_dim 512 and f16 K/V in whole blocks, the one shape whose AVX-512 output pass
 * goes by Strassen's product (kern.h pv_strassen), whose weights mix heads i and i + 4: a NaN or inf in one head's q
 * must still leave the other seven right (CPU log rows 73 and 74). */
static void test_nonfinite(path_ctx *pc, int npc) {
    static const char *what[] = {"inf in K", "-inf in V", "NaN in q", "NaN in K", "-inf in q", "inf in V"};
    for (int c = 0; c < 30; c++) { /* the six cases with f32, f16 and bf16 K/V (the tensor-core kernel on CUDA), long,
                                    * 8 heads a KV head */
        fd_rng r = {61 + (uint64_t)c};
        const int lng = c >= 18 && c < 24, wide = c >= 24;
        const fdec_dtype kvt = lng ? FDEC_F32 : wide ? FDEC_F16 : (fdec_dtype)(c / 6);
        const uint32_t D = lng ? 9 : wide ? 512 : 64, n = lng ? 40000 : wide ? 200 : 90, G = wide ? 1 : 4, R = 8 / G;
        fdec_layer L = layer_of(D, 8, G, 0, 0, kvt, 0); /* 2 (or 8) Q heads per KV head; q and out f32 */
        fd_problem pr;
        fd_problem_make(&pr, &L, n, FD_DENSE, 1.0f, &r);
        double *ref = malloc(sizeof(double) * 8 * D), rl[8];
        fd_reference(&pr, ref, rl); /* before the poison: the unaffected heads must match this */
        const uint32_t g = (1 + (uint32_t)c % 3) % G, t = 17 + (lng ? 6007 : 11) * (uint32_t)(c % 6), d = 5;
        const int w = c % 6;
        const float bad = w == 0 || w == 5 ? INFINITY : w == 1 || w == 4 ? -INFINITY : NAN;
        uint32_t affected_lo = R * g, affected_hi = R * g + R; /* the Q heads of KV head g */
        if (w == 2 || w == 4) { /* q: only that head */
            ((float *)pr.q)[(R * g + 1) * D + d] = bad;
            affected_lo = R * g + 1, affected_hi = R * g + 2;
        } else
            fdec_store_elem(w == 1 || w == 5 ? pr.v : pr.k, (size_t)t * pr.p.kv.ps + g * D + d, kvt, bad);
        inputs in;
        inputs_make(&in, &pr);
        for (int x = 0; x < npc; x++) {
            outbuf b;
            outbuf_init(&b, &pr.p);
            fdec_status st = decode_into(pc[x].ctx, &pr, &in, &b, 1);
            int ok = st == FDEC_OK;
            for (uint32_t h = 0; ok && h < 8; h++) {
                const int hit = h >= affected_lo && h < affected_hi;
                ok &= hit ? isnan(b.lse[h]) : fabs(b.lse[h] - rl[h]) < 1e-4;
                for (uint32_t e = 0; ok && e < D; e++) {
                    float o = ((float *)b.out)[h * D + e];
                    ok &= hit ? isnan(o) : fabs(o - ref[h * D + e]) < 1e-5;
                }
            }
            check(ok, "%s: %s (K/V %s, head_dim %u, %u positions): the affected heads must be NaN and the others right",
                  pc[x].name, what[w], kvt == FDEC_F32 ? "f32" : kvt == FDEC_F16 ? "f16" : "bf16", D, n);
            outbuf_free(&b);
        }
        inputs_free(&in);
        free(ref);
        fd_problem_free(&pr);
    }
    printf("non-finite inputs: 30 cases, affected heads NaN, others right\n");
}

/* fdec_merge: random shard splits of one problem (empty and single-position shards too; one case of 100
 * shards, more than one CUDA launch takes), each shard decoded on its own rows, merged, against the reference
 * of the whole range and against the unsharded call. Under --cuda every buffer is on the device. */
static void test_merge(void) {
    fdec_context *ctx;
    if (fdec_context_create(g_cuda ? FDEC_BACKEND_CUDA : FDEC_BACKEND_CPU, NULL, &ctx) != FDEC_OK) {
        check(0, "merge: create context: %s", fdec_last_error());
        return;
    }
    int cases = 0;
    for (int c = 0; c < 41; c++) {
        fd_rng r = {71 + (uint64_t)c};
        const int many = c == 40;
        const uint32_t D = many ? 128 : (uint32_t)(1 + fd_rand(&r) % 200), G = 1 + (uint32_t)(fd_rand(&r) % 4);
        const uint32_t H = G * (1 + (uint32_t)(fd_rand(&r) % 4));
        const uint32_t L = many ? 300 : 1 + (uint32_t)(fd_rand(&r) % 1500);
        fdec_layer lay = layer_of(D, H, G, 0, 0, many ? FDEC_F16 : (fdec_dtype)(fd_rand(&r) % 3), 0);
        lay.out_dtype = many ? FDEC_F32 : (fdec_dtype)(fd_rand(&r) % 3);
        fd_problem pr;
        fd_problem_make(&pr, &lay, L, FD_DENSE, 1.0f, &r);
        double *ref = malloc(sizeof(double) * H * D), *rl = malloc(sizeof(double) * H);
        fd_reference(&pr, ref, rl);
        inputs in;
        int ok = inputs_make(&in, &pr) == 0;
        /* cut [0, L) at random points (repeats make empty shards) */
        enum { MAXS = 100 };
        uint32_t cut[MAXS + 1], ns = many ? MAXS : 1 + (uint32_t)(fd_rand(&r) % 9);
        cut[0] = 0, cut[ns] = L;
        for (uint32_t i = 1; i < ns; i++) cut[i] = (uint32_t)(fd_rand(&r) % (L + 1));
        for (uint32_t i = 1; i < ns; i++) /* sort */
            for (uint32_t j = i; j > 1 && cut[j - 1] > cut[j]; j--) { uint32_t x = cut[j]; cut[j] = cut[j - 1]; cut[j - 1] = x; }
        const size_t es = fdec_dtype_size(lay.out_dtype), kes = fdec_dtype_size(lay.kv_dtype);
        const size_t ob = (size_t)H * D * es, lb = H * sizeof(float);
        void *outs[MAXS];
        float *lses[MAXS], *hl = malloc(lb);
        for (uint32_t i = 0; i < ns; i++) {
            outs[i] = g_cuda ? fd_dev_alloc(ob) : malloc(ob);
            lses[i] = g_cuda ? fd_dev_alloc(lb) : malloc(lb);
            if (!outs[i] || !lses[i]) { ok = 0; ns = i + 1; break; }
            /* NaN: an empty shard's out must be ignored */
            if (g_cuda) fd_dev_memset(outs[i], 0xff, ob);
            else memset(outs[i], 0xff, ob);
            if (cut[i + 1] == cut[i]) {
                for (uint32_t h = 0; h < H; h++) hl[h] = -INFINITY;
                if (g_cuda) fd_h2d(lses[i], hl, lb);
                else memcpy(lses[i], hl, lb);
                continue;
            }
            const size_t off = (size_t)cut[i] * pr.p.kv.ps * kes;
            ok &= fdec_decode(ctx, &lay, cut[i + 1] - cut[i], in.q, (const char *)in.k + off,
                              (const char *)in.v + off, outs[i], lses[i]) == FDEC_OK;
        }
        void *out = g_cuda ? fd_dev_alloc(ob) : malloc(ob), *whole = g_cuda ? fd_dev_alloc(ob) : malloc(ob);
        float *lse = g_cuda ? fd_dev_alloc(lb) : malloc(lb);
        ok &= fdec_merge(ctx, ns, H, D, lay.out_dtype, (const void *const *)outs, (const float *const *)lses, out,
                         lse) == FDEC_OK;
        ok &= fdec_decode(ctx, &lay, L, in.q, in.k, in.v, whole, NULL) == FDEC_OK;
        void *hout = malloc(ob), *hwhole = malloc(ob);
        if (g_cuda) ok &= !fd_dev_sync() && !fd_d2h(hout, out, ob) && !fd_d2h(hwhole, whole, ob) && !fd_d2h(hl, lse, lb);
        else memcpy(hout, out, ob), memcpy(hwhole, whole, ob), memcpy(hl, lse, lb);
        /* the shards' outputs are rounded to the out dtype before the merge: twice the rounding allowance */
        const double err = fd_out_error(&pr, hout, ref), tol = 2 * fd_tolerance(&pr);
        double diff = 0;
        for (size_t i = 0; i < (size_t)H * D; i++) {
            double d = fabs((double)fdec_load_elem(hout, i, lay.out_dtype) - fdec_load_elem(hwhole, i, lay.out_dtype));
            if (!(d <= diff)) diff = isnan(d) ? INFINITY : d;
        }
        check(ok && err <= tol && diff <= 2 * tol && fd_lse_error(&pr, hl, rl) <= 1e-5,
              "merge of %u shards (D=%u H=%u G=%u L=%u): err %.3g, against the unsharded call %.3g, tol %.3g: %s", ns,
              D, H, G, L, err, diff, tol, fdec_last_error());
        cases++;
        for (uint32_t i = 0; i < ns; i++) {
            if (g_cuda) fd_dev_free(outs[i]), fd_dev_free(lses[i]);
            else free(outs[i]), free(lses[i]);
        }
        if (g_cuda) fd_dev_free(out), fd_dev_free(whole), fd_dev_free(lse);
        else free(out), free(whole), free(lse);
        free(hout), free(hwhole), free(hl), free(ref), free(rl);
        inputs_free(&in);
        fd_problem_free(&pr);
    }
    if (g_cuda) { /* the argument checks are the API's, tested on the CPU; here: host pointers are refused */
        float o1[4], l1[1] = {-INFINITY}, out[4];
        const void *outs[1] = {o1};
        const float *lses[1] = {l1};
        check(fdec_merge(ctx, 1, 1, 4, FDEC_F32, outs, lses, out, NULL) == FDEC_EINVAL &&
                  strstr(fdec_last_error(), "outs[0]"),
              "cuda merge of host pointers: %s", fdec_last_error());
        fdec_context_destroy(ctx);
        printf("merge: %d random shard splits against the reference and the unsharded call, host pointers\n", cases);
        return;
    }
    /* every shard empty: out 0, lse -inf; bad arguments are refused */
    float o1[4] = {NAN, NAN, NAN, NAN}, l1[1] = {-INFINITY}, out[4], lse[1];
    const void *outs[1] = {o1};
    const float *lses[1] = {l1};
    check(fdec_merge(ctx, 1, 1, 4, FDEC_F32, outs, lses, out, lse) == FDEC_OK && out[0] == 0 && out[3] == 0 &&
              lse[0] == -INFINITY,
          "merge of empty shards: out 0, lse -inf");
    check(fdec_merge(ctx, 0, 1, 4, FDEC_F32, outs, lses, out, lse) == FDEC_EINVAL && strstr(fdec_last_error(), "n (0)"),
          "merge with n 0: %s", fdec_last_error());
    check(fdec_merge(ctx, 1, 1, 4, FDEC_F32, NULL, lses, out, lse) == FDEC_EINVAL &&
              strstr(fdec_last_error(), "outs must not be NULL"),
          "merge with NULL outs: %s", fdec_last_error());
    check(fdec_merge(ctx, 1, 1, 600, FDEC_F32, outs, lses, out, lse) == FDEC_EINVAL, "merge with head_dim 600");
    fdec_context_destroy(ctx);
    printf("merge: %d random shard splits against the reference, empty shards, bad arguments\n", cases);
}

/* ---- 4. bad input ---- */

typedef struct {
    const char *what;
    fdec_layer L;
    uint32_t seq_len;
    int null_arg; /* 0 none, 1 q, 2 k, 3 v, 4 out, 5 ctx, 6 layer, 7 misaligned k, 8 host k (CUDA) */
    fdec_status want;
    const char *msg; /* substring the message must contain */
} bad_case;

static void test_bad_input(void) {
    fdec_context *ctx;
    if (fdec_context_create(g_cuda ? FDEC_BACKEND_CUDA : FDEC_BACKEND_CPU, NULL, &ctx) != FDEC_OK) {
        check(0, "create default context: %s", fdec_last_error());
        return;
    }
    const fdec_layer good = layer_of(64, 8, 2, 0, 0, FDEC_F16, 0);
    bad_case cases[64];
    int n = 0;
#define BAD(WHAT, FIELD_EXPR, SEQ, NUL, WANT, MSG)                                                              \
    do {                                                                                                        \
        bad_case *bc = &cases[n++];                                                                             \
        bc->what = WHAT;                                                                                        \
        bc->L = good;                                                                                           \
        { fdec_layer *l = &bc->L; (void)l; FIELD_EXPR; }                                                        \
        bc->seq_len = SEQ;                                                                                      \
        bc->null_arg = NUL;                                                                                     \
        bc->want = WANT;                                                                                        \
        bc->msg = MSG;                                                                                          \
    } while (0)
    BAD("head_dim 0", l->head_dim = 0, 10, 0, FDEC_EINVAL, "head_dim (0) must be in 1..512");
    BAD("head_dim 513", l->head_dim = 513, 10, 0, FDEC_EINVAL, "head_dim (513)");
    BAD("num_q_heads 0", l->num_q_heads = 0, 10, 0, FDEC_EINVAL, "num_q_heads (0)");
    BAD("num_kv_heads 0", l->num_kv_heads = 0, 10, 0, FDEC_EINVAL, "num_kv_heads (0)");
    BAD("gqa not a multiple", (l->num_q_heads = 12, l->num_kv_heads = 8), 10, 0, FDEC_EINVAL,
        "num_q_heads (12) must be a multiple of num_kv_heads (8)");
    BAD("NaN scale", l->scale = NAN, 10, 0, FDEC_EINVAL, "scale");
    BAD("inf scale", l->scale = INFINITY, 10, 0, FDEC_EINVAL, "must be finite");
    BAD("bad q_dtype", l->q_dtype = (fdec_dtype)7, 10, 0, FDEC_EINVAL, "q_dtype (7)");
    BAD("bad kv_dtype", l->kv_dtype = (fdec_dtype)-1, 10, 0, FDEC_EINVAL, "kv_dtype (-1)");
    BAD("bad out_dtype", l->out_dtype = (fdec_dtype)3, 10, 0, FDEC_EINVAL, "out_dtype (3)");
    BAD("ring without window", l->ring_capacity = 64, 10, 0, FDEC_EINVAL, "needs a window");
    BAD("ring < window", (l->window = 100, l->ring_capacity = 50), 10, 0, FDEC_EINVAL,
        "ring_capacity (50) must be at least window (100)");
    BAD("seq_len 0", (void)0, 0, 0, FDEC_EINVAL, "seq_len (0)");
    BAD("overlapping heads", l->kv_head_stride = 32, 10, 0, FDEC_EINVAL, "overlap");
    BAD("overlapping rows", l->kv_pos_stride = 100, 10, 0, FDEC_EINVAL, "overlap");
    BAD("pos stride < head_dim (head-major)", (l->kv_pos_stride = 63, l->kv_head_stride = 10000), 10, 0,
        FDEC_EINVAL, "overlap");
    BAD("huge strides", (l->kv_pos_stride = SIZE_MAX / 4, l->kv_head_stride = 64), 10, 0, FDEC_EINVAL,
        "too large");
    BAD("NULL q", (void)0, 10, 1, FDEC_EINVAL, "q must not be NULL");
    BAD("NULL k", (void)0, 10, 2, FDEC_EINVAL, "k must not be NULL");
    BAD("NULL v", (void)0, 10, 3, FDEC_EINVAL, "v must not be NULL");
    BAD("NULL out", (void)0, 10, 4, FDEC_EINVAL, "out must not be NULL");
    BAD("NULL ctx", (void)0, 10, 5, FDEC_EINVAL, "ctx must not be NULL");
    BAD("NULL layer", (void)0, 10, 6, FDEC_EINVAL, "layer must not be NULL");
    BAD("misaligned k", (void)0, 10, 7, FDEC_EINVAL, "aligned");
    if (g_cuda) BAD("host pointer for k", (void)0, 10, 8, FDEC_EINVAL, "k (");
#undef BAD
    /* buffers big enough for the good layer at seq_len 10; on CUDA q, k, v (and the good call's out) are on the
     * device, and out / lse of the table stay on the host, where "untouched" is checked */
    float *q = calloc(8 * 64, 4); /* the good layer's q is f32 */
    uint16_t *k = calloc(10 * 2 * 64 + 1, 2), *v = calloc(10 * 2 * 64, 2);
    void *dq = q, *dk = k, *dv = v, *dout = NULL;
    unsigned char out[8 * 64 * 4], lse[8 * 4];
    if (g_cuda) {
        dq = fd_dev_alloc(8 * 64 * 4), dk = fd_dev_alloc(10 * 2 * 64 * 2 + 16), dv = fd_dev_alloc(10 * 2 * 64 * 2);
        dout = fd_dev_alloc(sizeof out + sizeof lse);
        fd_h2d(dq, q, 8 * 64 * 4), fd_h2d(dk, k, 10 * 2 * 64 * 2), fd_h2d(dv, v, 10 * 2 * 64 * 2);
    }
    for (int i = 0; i < n; i++) {
        bad_case *bc = &cases[i];
        memset(out, 0x5a, sizeof out);
        memset(lse, 0x5a, sizeof lse);
        const void *qa = bc->null_arg == 1 ? NULL : dq, *ka = bc->null_arg == 2 ? NULL : dk;
        if (bc->null_arg == 7) ka = (const char *)dk + 1;
        if (bc->null_arg == 8) ka = k;
        fdec_status st = fdec_decode(bc->null_arg == 5 ? NULL : ctx, bc->null_arg == 6 ? NULL : &bc->L, bc->seq_len,
                                     qa, ka, bc->null_arg == 3 ? NULL : dv, bc->null_arg == 4 ? NULL : out,
                                     (float *)lse);
        int untouched = 1;
        for (size_t j = 0; j < sizeof out; j++) untouched &= out[j] == 0x5a;
        for (size_t j = 0; j < sizeof lse; j++) untouched &= lse[j] == 0x5a;
        check(st == bc->want && strstr(fdec_last_error(), bc->msg) && untouched,
              "bad input '%s': got %s \"%s\", want %s containing \"%s\"%s", bc->what, fdec_status_string(st),
              fdec_last_error(), fdec_status_string(bc->want), bc->msg, untouched ? "" : " (out WRITTEN)");
        /* fdec_plan applies the same rules to the layer */
        if (bc->null_arg == 0) {
            fdec_plan_info info;
            check(fdec_plan(ctx, &bc->L, bc->seq_len, &info) == bc->want, "plan with bad input '%s' accepted",
                  bc->what);
        }
    }
    /* a good call on the same buffers works, so the table above failed for the stated reason */
    void *gout = g_cuda ? dout : (void *)out;
    float *glse = g_cuda ? (float *)((char *)dout + sizeof out) : (float *)lse;
    check(fdec_decode(ctx, &good, 10, dq, dk, dv, gout, glse) == FDEC_OK && (!g_cuda || !fd_dev_sync()),
          "good call after the bad ones: %s", fdec_last_error());
    if (g_cuda) fd_dev_free(dq), fd_dev_free(dk), fd_dev_free(dv), fd_dev_free(dout);
    /* context creation errors */
    fdec_context *c2 = (fdec_context *)1;
    check(fdec_context_create((fdec_backend)9, NULL, &c2) == FDEC_EINVAL && c2 == NULL &&
              strstr(fdec_last_error(), "backend (9)"),
          "unknown backend: %s", fdec_last_error());
    fdec_options o = fdec_default_options();
    o.cpu_path = (fdec_cpu_path)42;
    check(fdec_context_create(FDEC_BACKEND_CPU, &o, &c2) == FDEC_EINVAL && strstr(fdec_last_error(), "cpu_path (42)"),
          "bad cpu_path: %s", fdec_last_error());
    check(fdec_context_create(FDEC_BACKEND_CPU, NULL, NULL) == FDEC_EINVAL, "NULL out pointer to create");
    /* a path of the other architecture: a clear EUNSUPPORTED that names it */
#ifdef FDEC_ARM64
    o.cpu_path = FDEC_CPU_AVX2;
#else
    o.cpu_path = FDEC_CPU_NEON;
#endif
    check(fdec_context_create(FDEC_BACKEND_CPU, &o, &c2) == FDEC_EUNSUPPORTED && c2 == NULL &&
              strstr(fdec_last_error(), fdec_cpu_path_name(o.cpu_path)),
          "a path this CPU lacks: %s", fdec_last_error());
    /* without CUDA compiled in, or without a device: a clear EUNSUPPORTED */
    fdec_status cst = fdec_context_create(FDEC_BACKEND_CUDA, NULL, &c2);
    if (cst == FDEC_OK) fdec_context_destroy(c2);
    else
        check(cst == FDEC_EUNSUPPORTED && c2 == NULL && strstr(fdec_last_error(), "CUDA"),
              "CUDA context without CUDA: %s %s", fdec_status_string(cst), fdec_last_error());
    check(fdec_plan(ctx, &good, 10, NULL) == FDEC_EINVAL, "plan with NULL info");
    check(strcmp(fdec_status_string(FDEC_EINVAL), "invalid argument") == 0 &&
              strcmp(fdec_status_string((fdec_status)77), "unknown status") == 0,
          "status strings");
    fdec_context_destroy(NULL);
    fdec_context_destroy(ctx);
    free(q);
    free(k);
    free(v);
    printf("bad input: %d cases\n", n);
}

/* ---- 5. determinism, threads, plan, parallel_for ---- */

static void serial_for(void *user, fdec_task_fn fn, void *task, uint32_t n) {
    (*(int *)user)++;
    for (uint32_t i = n; i-- > 0;) fn(task, i, n); /* reverse order: the result must not care */
}

static void test_determinism_threads(void) {
    fd_rng r = {31};
    fdec_layer L = layer_of(128, 32, 8, 0, 0, FDEC_F16, 0);
    const uint32_t n = 20000;
    fd_problem pr;
    fd_problem_make(&pr, &L, n, FD_DENSE, 1.0f, &r);
    double *ref = malloc(sizeof(double) * pr.p.H * pr.p.D), *ref_lse = malloc(sizeof(double) * pr.p.H);
    fd_reference(&pr, ref, ref_lse);
    fdec_context *c1, *c2;
    fdec_options o = fdec_default_options();
    o.threads = 1;
    fdec_context_create(FDEC_BACKEND_CPU, &o, &c1);
    o.threads = 2;
    fdec_context_create(FDEC_BACKEND_CPU, &o, &c2);
    size_t bytes = (size_t)pr.p.H * pr.p.D * 4;
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    fdec_decode(c2, &L, n, pr.q, pr.k, pr.v, a, NULL);
    memset(b, 0xff, bytes);
    fdec_decode(c2, &L, n, pr.q, pr.k, pr.v, b, NULL);
    check(memcmp(a, b, bytes) == 0, "two calls on one context must give identical bytes");
    fdec_decode(c1, &L, n, pr.q, pr.k, pr.v, c, NULL);
    double diff = 0;
    for (size_t i = 0; i < bytes / 4; i++) diff = fmax(diff, fabs((double)a[i] - c[i]));
    check(diff <= 2e-6, "1 and 2 threads must agree within 2e-6 (got %.3g)", diff);
    printf("determinism: identical bytes; 1 vs 2 threads differ by %.3g\n", diff);

    fdec_plan_info info;
    memset(&info, 0, sizeof info);
    const fdec_status pst = fdec_plan(c2, &L, n, &info);
    /* chunk_len is the longest chunk: on the CPU the last chunk of each thread's run is cut shorter (cpu.c) */
    check(pst == FDEC_OK && info.num_chunks > 1 && info.kv_start == 0 && info.kv_end == n &&
              (uint64_t)info.chunk_len * info.num_chunks >= n && info.chunk_len < n && info.grouped == 1 &&
              info.scratch_bytes > 0,
          "plan geometry: %u chunks of at most %u", info.num_chunks, info.chunk_len);
    fdec_layer W = L;
    W.window = 1000;
    check(fdec_plan(c2, &W, n, &info) == FDEC_OK && info.kv_start == n - 1000 && info.kv_end == n,
          "plan window range: [%u, %u)", info.kv_start, info.kv_end);

    /* a caller-supplied parallel-for is used, and gives the same bytes */
    int calls = 0;
    o.parallel_for = serial_for;
    o.parallel_user = &calls;
    fdec_context *c3;
    check(fdec_context_create(FDEC_BACKEND_CPU, &o, &c3) == FDEC_OK, "create with parallel_for");
    memset(b, 0xff, bytes);
    fdec_decode(c3, &L, n, pr.q, pr.k, pr.v, b, NULL);
    /* twice a call of several chunks: the chunks, then the merge by heads (flashdec.h) */
    check(calls == 2 && memcmp(a, b, bytes) == 0, "parallel_for: called %d times, same bytes: %d", calls,
          memcmp(a, b, bytes) == 0);
    check(fd_out_error(&pr, b, ref) <= fd_tolerance(&pr), "parallel_for result against the reference");
    fdec_context_destroy(c1);
    fdec_context_destroy(c2);
    fdec_context_destroy(c3);
    free(a);
    free(b);
    free(c);
    free(ref);
    free(ref_lse);
    fd_problem_free(&pr);
}

/* ---- 5b. work stealing (cpu.c): each chunk in its own state, so the same bytes whoever runs which part ---- */

/* Runs the tasks on the caller and on a second thread that starts late (a few hundred microseconds, so the caller runs
 * out of its own run first and steals from the other's), both taking task numbers from a shared counter in reverse
 * order. */
typedef struct {
    fdec_task_fn fn;
    void *task;
    uint32_t n;
    _Atomic uint32_t next;
} racing_job;

static void racing_take(racing_job *j) {
    for (uint32_t i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) j->fn(j->task, j->n - 1 - i, j->n);
}
static void *racing_late(void *x) {
    const double t0 = fd_now();
    while (fd_now() - t0 < 3e-4) {
    }
    racing_take(x);
    return NULL;
}
static void racing_for(void *user, fdec_task_fn fn, void *task, uint32_t n) {
    (*(int *)user)++;
    racing_job j = {fn, task, n, 0};
    pthread_t t;
    int started = pthread_create(&t, NULL, racing_late, &j) == 0;
    racing_take(&j);
    if (started) pthread_join(t, NULL);
}

static void test_work_stealing(void) {
    /* 3 threads (runs of uneven length) through the pool, a caller's serial loop in reverse order (the last task works
     * through its own run and then takes every other run's chunks before their tasks start) and racing_for */
    int calls = 0;
    fdec_options o = fdec_default_options();
    o.threads = 3;
    fdec_context *pool, *rev, *race;
    fdec_context_create(FDEC_BACKEND_CPU, &o, &pool);
    o.parallel_for = serial_for;
    o.parallel_user = &calls;
    fdec_context_create(FDEC_BACKEND_CPU, &o, &rev);
    o.parallel_for = racing_for;
    fdec_context_create(FDEC_BACKEND_CPU, &o, &race);
    fd_rng r = {0x57ea1};
    int cases = 0, same = 0, multi = 0;
    double worst = 0;
    for (int i = 0; i < 42; i++) {
        fdec_layer L;
        uint32_t seq_len;
        fd_layout layout = FD_DENSE;
        if (i < 40) fd_random_config(&r, &L, &seq_len, &layout);
        else if (i == 40) /* 64 MiB of K/V or more: 8 chunks a thread (cpu.c, FDEC_CPU_STEAL_CHUNKS), LFM2's geometry */
            L = layer_of(64, 32, 8, 0, 0, FDEC_F16, 0), seq_len = 65536;
        else /* and an odd head_dim in a bf16 ring wrapped three times, a window of 50,000 */
            L = layer_of(100, 12, 4, 50000, 50037, FDEC_BF16, 0), seq_len = 3 * 50037 + 12345;
        fd_problem pr;
        if (fd_problem_make(&pr, &L, seq_len, layout, 1.0f, &r)) {
            check(0, "work stealing config %d could not be built: %s", i, fdec_last_error());
            continue;
        }
        fdec_plan_info info;
        fdec_plan(pool, &L, seq_len, &info);
        multi += info.num_chunks > 3;
        double *ref = malloc(sizeof(double) * pr.p.H * pr.p.D), *ref_lse = malloc(sizeof(double) * pr.p.H);
        fd_reference(&pr, ref, ref_lse);
        const size_t ob = (size_t)pr.p.H * pr.p.D * fdec_dtype_size(pr.p.ot);
        unsigned char *a = malloc(ob), *b = malloc(ob), *c = malloc(ob);
        inputs in;
        inputs_make(&in, &pr);
        double e = run_check_bytes(pool, "pool/3t", &pr, &in, ref, ref_lse, 1, a);
        e = fmax(e, run_check_bytes(rev, "reverse/3t", &pr, &in, ref, ref_lse, 1, b));
        e = fmax(e, run_check_bytes(race, "racing/3t", &pr, &in, ref, ref_lse, 1, c));
        inputs_free(&in);
        if (e / fd_tolerance(&pr) > worst) worst = e / fd_tolerance(&pr);
        char desc[256];
        const int ok = !memcmp(a, b, ob) && !memcmp(a, c, ob);
        check(ok, "work stealing: %s: pool, reverse and racing runs must give the same bytes", describe(&pr, desc, sizeof desc));
        same += ok;
        cases++;
        free(a), free(b), free(c), free(ref), free(ref_lse);
        fd_problem_free(&pr);
    }
    check(multi >= 2, "work stealing: %d of %d configurations have more chunks than threads", multi, cases);
    printf("work stealing: %d configurations (%d with more chunks than threads), %d the same bytes on 3 schedules, worst "
           "error %.2f of tolerance\n", cases, multi, same, worst);
    fdec_context_destroy(pool);
    fdec_context_destroy(rev);
    fdec_context_destroy(race);
}

/* One context used by two threads at once: a call made while the other thread's runs is refused with a clear
 * status (FDEC_EBACKEND, "busy"), never a race. Each thread makes 50 calls, retrying a refused one until it runs,
 * so every call runs in the end and the last result of each thread is checked against the reference. (Counting
 * only the first attempts, at least 50 of the 100 need not run: one thread can be refused many times during a
 * single call of the other, which on a loaded machine made an earlier version of this test fail.) */
typedef struct {
    fdec_context *ctx;
    fd_problem *pr;
    int busy, ok, other;
    float *out;
} conc_arg;

static void *conc_thread(void *x) {
    conc_arg *a = x;
    for (int i = 0; i < 50; i++)
        for (long tries = 0;; tries++) {
            fdec_status st =
                fdec_decode(a->ctx, &a->pr->layer, a->pr->seq_len, a->pr->q, a->pr->k, a->pr->v, a->out, NULL);
            if (st == FDEC_OK) {
                a->ok++;
                break;
            }
            if (st != FDEC_EBACKEND || !strstr(fdec_last_error(), "busy") || tries == 10000000) {
                a->other++;
                break;
            }
            a->busy++;
        }
    return NULL;
}

static void test_concurrency(void) {
    fd_rng r = {41};
    fdec_layer L = layer_of(64, 8, 2, 0, 0, FDEC_F16, 0);
    fd_problem pr;
    fd_problem_make(&pr, &L, 4000, FD_DENSE, 1.0f, &r);
    const size_t n = (size_t)pr.p.H * pr.p.D;
    double *ref = malloc(sizeof(double) * n), *ref_lse = malloc(sizeof(double) * pr.p.H);
    fd_reference(&pr, ref, ref_lse);
    fdec_context *ctx;
    fdec_options o = fdec_default_options();
    o.threads = 1;
    fdec_context_create(FDEC_BACKEND_CPU, &o, &ctx);
    conc_arg a[2] = {{ctx, &pr, 0, 0, 0, malloc(n * 4)}, {ctx, &pr, 0, 0, 0, malloc(n * 4)}};
    pthread_t t;
    pthread_create(&t, NULL, conc_thread, &a[1]);
    conc_thread(&a[0]);
    pthread_join(t, NULL);
    double err = 0;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < n; i++) {
            const double e = fabs((double)a[k].out[i] - ref[i]);
            if (!(e <= err)) err = e; /* a NaN stays */
        }
    check(a[0].ok == 50 && a[1].ok == 50 && a[0].other == 0 && a[1].other == 0 && err <= fd_tolerance(&pr),
          "shared context: every call ran or was refused as busy and then ran (%d+%d ok, %d+%d busy refusals, "
          "%d+%d other statuses), results within tolerance (error %.3g, tolerance %.3g)",
          a[0].ok, a[1].ok, a[0].busy, a[1].busy, a[0].other, a[1].other, err, fd_tolerance(&pr));
    fdec_context_destroy(ctx);
    free(a[0].out);
    free(a[1].out);
    free(ref);
    free(ref_lse);
    fd_problem_free(&pr);
}

/* ---- CUDA: determinism, graph capture and replay ---- */

typedef struct {
    fdec_context *ctx;
    const fd_problem *pr;
    const inputs *in;
    void *out;
    float *lse;
    fdec_status st;
} graph_arg;

static void graph_call(void *x, int i) {
    (void)i;
    graph_arg *a = x;
    a->st = fdec_decode(a->ctx, &a->pr->layer, a->pr->seq_len, a->in->q, a->in->k, a->in->v, a->out, a->lse);
}

static void test_cuda_graph(void) {
    fd_rng r = {51};
    fdec_layer L = layer_of(128, 32, 8, 0, 0, FDEC_F16, 0);
    const uint32_t n = 30000;
    fd_problem pa, pb;
    fd_problem_make(&pa, &L, n, FD_DENSE, 1.0f, &r);
    fd_problem_make(&pb, &L, n, FD_DENSE, 1.0f, &r);
    double *ra = malloc(sizeof(double) * 32 * 128), *rb = malloc(sizeof(double) * 32 * 128), rl[32];
    fd_reference(&pa, ra, rl);
    fd_reference(&pb, rb, rl);
    inputs in;
    inputs_make(&in, &pa);
    size_t ob = 32 * 128 * 4;
    void *dout = fd_dev_alloc(ob), *dout2 = fd_dev_alloc(ob);
    float *host = malloc(ob), *host2 = malloc(ob);
    fdec_options o = fdec_default_options();
    o.cuda_stream = g_stream;
    fdec_context *ctx;
    fdec_context_create(FDEC_BACKEND_CUDA, &o, &ctx);

    /* determinism: two calls, identical bytes */
    graph_arg ga = {ctx, &pa, &in, dout, NULL, FDEC_OK};
    graph_call(&ga, 0);
    ga.out = dout2;
    graph_call(&ga, 0);
    fd_dev_sync();
    fd_d2h(host, dout, ob), fd_d2h(host2, dout2, ob);
    check(ga.st == FDEC_OK && memcmp(host, host2, ob) == 0, "cuda: two calls must give identical bytes");

    /* capture before the scratch is big enough: refused with a clear message, not a broken graph */
    fdec_context *fresh;
    fdec_context_create(FDEC_BACKEND_CUDA, &o, &fresh);
    graph_arg gf = {fresh, &pa, &in, dout, NULL, FDEC_OK};
    void *gr = fd_dev_graph_capture(g_stream, graph_call, &gf, 1);
    check(gf.st == FDEC_EINVAL && strstr(fdec_last_error(), "reserve"), "capture without reserve: %s %s",
          fdec_status_string(gf.st), fdec_last_error());
    fd_dev_graph_destroy(gr);
    fdec_context_destroy(fresh);

    /* reserve, capture, replay; then new data in the same buffers, replay again */
    check(fdec_context_reserve(ctx, &L, n) == FDEC_OK, "reserve: %s", fdec_last_error());
    fd_dev_memset(dout, 0xff, ob);
    ga.out = dout;
    gr = fd_dev_graph_capture(g_stream, graph_call, &ga, 1);
    check(gr != NULL && ga.st == FDEC_OK, "capture fdec_decode into a CUDA graph: %s", fdec_last_error());
    if (gr) {
        fd_dev_graph_replay(gr, g_stream);
        fd_dev_sync();
        fd_d2h(host, dout, ob);
        check(fd_out_error(&pa, host, ra) <= fd_tolerance(&pa), "graph replay, first data: err %.3g",
              fd_out_error(&pa, host, ra));
        size_t kb = pa.kv_elems * 2;
        fd_h2d(in.dq, pb.q, 32 * 128 * 4), fd_h2d(in.dk, pb.k, kb), fd_h2d(in.dv, pb.v, kb);
        fd_dev_memset(dout, 0xff, ob);
        fd_dev_graph_replay(gr, g_stream);
        fd_dev_sync();
        fd_d2h(host, dout, ob);
        check(fd_out_error(&pb, host, rb) <= fd_tolerance(&pb), "graph replay, new data: err %.3g",
              fd_out_error(&pb, host, rb));
        fd_dev_graph_destroy(gr);
    }
    printf("cuda graph: capture and replay checked\n");
    fdec_context_destroy(ctx);
    inputs_free(&in);
    fd_dev_free(dout), fd_dev_free(dout2);
    free(host), free(host2), free(ra), free(rb);
    fd_problem_free(&pa), fd_problem_free(&pb);
}

/* The split's reserve bound (plan.c, fdec_split_bound): for every length n' <= n, fdec_make_split gives at most
 * fdec_split_bound(n) chunks, for the lanes, shortest chunks and caps the backends use. The chunk count itself is
 * not monotone in the length (a chunk's length is rounded up to 32 positions): the test also asserts that such a
 * case occurs, so that it checks the case the bound is for. */
/* The CPU paths' conversions of q in and out out (fdec_cpu_cvt_in / _out, kern.h) against the scalar element
 * functions, bit for bit: every f16 and bf16 pattern in, and out random f32 patterns, every f16 value and the midpoints
 * between neighbours (the rounding ties), subnormals, the overflow edge, infinities and NaNs (a NaN must stay a NaN of
 * the same sign; its payload may differ), at lengths and offsets that leave tails of every size. */
static int same_out(uint16_t a, uint16_t b, fdec_dtype t) {
    if (a == b) return 1;
    const int nan_a = t == FDEC_F16 ? (a & 0x7c00) == 0x7c00 && (a & 0x3ff) : (a & 0x7f80) == 0x7f80 && (a & 0x7f);
    const int nan_b = t == FDEC_F16 ? (b & 0x7c00) == 0x7c00 && (b & 0x3ff) : (b & 0x7f80) == 0x7f80 && (b & 0x7f);
    return nan_a && nan_b && (a & 0x8000) == (b & 0x8000);
}
/* how many of got[0 .. n) are not fdec_store_elem's conversion of src (same_out) */
static uint32_t out_mismatches(const uint16_t *got, const float *src, uint32_t n, fdec_dtype t) {
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint16_t want;
        fdec_store_elem(&want, 0, t, src[i]);
        bad += !same_out(got[i], want, t);
    }
    return bad;
}
static void test_conversions(void) {
    typedef struct {
        const char *name;
        fdec_cpu_cvt_in_fn in;
        fdec_cpu_cvt_out_fn out;
        int ok; /* this CPU has the path */
    } cvt_path;
    cvt_path path[4] = {{"scalar", fdec_cpu_cvt_in_scalar, fdec_cpu_cvt_out_scalar, 1}};
    int np = 1;
#ifdef FDEC_X86
    const unsigned f = fdec_cpu_features();
    path[np++] = (cvt_path){"avx2", fdec_cpu_cvt_in_avx2, fdec_cpu_cvt_out_avx2, (int)(f >> FDEC_CPU_AVX2 & 1)};
    path[np++] = (cvt_path){"avx512", fdec_cpu_cvt_in_avx512, fdec_cpu_cvt_out_avx512, (int)(f >> FDEC_CPU_AVX512 & 1)};
#endif
#ifdef FDEC_ARM64
    path[np++] = (cvt_path){"neon", fdec_cpu_cvt_in_neon, fdec_cpu_cvt_out_neon, 1};
#endif
    enum { N = 3 * 65536 + 37 };
    uint32_t *x = malloc(N * sizeof *x);
    uint16_t *h = malloc(65536 * sizeof *h), *got = malloc((N + 64) * sizeof *got);
    float *fx = malloc((N + 64) * sizeof *fx), *fin = malloc((N + 64) * sizeof *fin);
    fd_rng rng = {0x9e3779b97f4a7c15ull};
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    /* f32 for the out direction: every f16 value exactly, the midpoint above it, random patterns */
    for (uint32_t i = 0; i < 65536; i++) {
        const float v = fdec_f16_to_f32((uint16_t)i);
        memcpy(&x[i], &v, 4);
        x[65536 + i] = x[i] + ((i & 0x7c00) == 0x7c00 ? 0 : 0x1000); /* half an f16 ulp up (normal f16 range) */
    }
    for (uint32_t i = 2 * 65536; i < N; i++) x[i] = (uint32_t)(fd_rand(&rng) >> 32);
    x[N - 1] = 0x477ff000u, x[N - 2] = 0x477fefffu, x[N - 3] = 0x33000000u, x[N - 4] = 0x33000001u; /* the edges */
    x[N - 5] = 0x7f800001u, x[N - 6] = 0xffc00000u, x[N - 7] = 0x7fc00000u, x[N - 8] = 0x00000001u;
    memcpy(fx, x, N * sizeof *x);
    for (int pi = 0; pi < np; pi++) {
        if (!path[pi].ok) continue;
        for (int ti = 0; ti < 2; ti++) {
            const fdec_dtype t = ti ? FDEC_BF16 : FDEC_F16;
            const char *tn = ti ? "bf16" : "f16";
            /* in: every pattern, scaled by 1 and by 0.37, from an offset of 0 and of 3 elements */
            for (int k = 0; k < 4; k++) {
                const float sc = k & 1 ? 0.37f : 1.0f;
                const uint32_t off = k & 2 ? 3 : 0, n = 65536 - off;
                path[pi].in(fin, h + off, n, t, sc);
                uint32_t bad = 0;
                for (uint32_t i = 0; i < n; i++) {
                    const float want = fdec_load_elem(h + off, i, t) * sc;
                    bad += memcmp(&want, &fin[i], 4) != 0 && !(isnan(want) && isnan(fin[i]));
                }
                check(!bad, "%s %s in (scale %g, offset %u): %u of %u elements differ from the scalar conversion",
                      path[pi].name, tn, sc, off, bad, n);
            }
            /* out: lengths 1..40 at offsets 0..3 (from around the last f16 values and the first midpoints), with
             * guards on both sides, then all N */
            uint32_t bad = 0, total = N;
            for (uint32_t len = 1; len <= 40; len++)
                for (uint32_t off = 0; off < 4; off++, total += len) {
                    const float *src = fx + 65536 - 20 + len;
                    for (uint32_t i = 0; i < len + 8; i++) got[i] = 0xabcd;
                    path[pi].out(got + off, src, len, t);
                    bad += out_mismatches(got + off, src, len, t);
                    for (uint32_t i = 0; i < off; i++) bad += got[i] != 0xabcd;
                    for (uint32_t i = off + len; i < len + 8; i++) bad += got[i] != 0xabcd; /* nothing past the end */
                }
            path[pi].out(got, fx, N, t);
            bad += out_mismatches(got, fx, N, t);
            check(!bad, "%s %s out: %u mismatches in %u elements against the scalar conversion", path[pi].name, tn,
                  bad, total);
        }
    }
    free(x), free(h), free(got), free(fx), free(fin);
}

static void test_split_bound(void) {
    static const uint32_t lanes[] = {1, 2, 3, 8, 16, 33, 64, 66, 128, 132};
    static const uint32_t mins[] = {1, 32, 64, 100, 512};
    static const uint32_t caps[] = {64, 128};
    int bad = 0, dips = 0;
    long checked = 0;
    fdec_problem p;
    memset(&p, 0, sizeof p);
    for (size_t li = 0; li < sizeof lanes / sizeof lanes[0]; li++)
        for (size_t mi = 0; mi < sizeof mins / sizeof mins[0]; mi++)
            for (size_t ci = 0; ci < sizeof caps / sizeof caps[0]; ci++) {
                uint32_t most = 0, prev = 0;
                for (uint32_t n = 1; n <= 40000; n += n < 5000 ? 1 : 97) {
                    p.lo = n % 7 == 0 ? 1000 : 0; /* a window's start too */
                    p.seq_len = p.lo + n;
                    const fdec_split s = fdec_make_split(&p, lanes[li], mins[mi], caps[ci]);
                    if (s.num_chunks < prev) dips++;
                    prev = s.num_chunks;
                    if (s.num_chunks > most) most = s.num_chunks;
                    const uint32_t b = fdec_split_bound(&p, lanes[li], mins[mi], caps[ci]);
                    if (b < most || b > caps[ci]) {
                        if (!bad++)
                            check(0, "split bound: lanes %u, min %u, cap %u, n %u: bound %u below %u chunks of a "
                                     "shorter call (or above the cap)", lanes[li], mins[mi], caps[ci], n, b, most);
                    }
                    checked++;
                }
            }
    check(bad == 0, "split bound: %d lengths with a shorter call above the bound", bad);
    check(dips > 0, "split bound: the chunk count never fell with a longer call, so the bound went untested");
    printf("split bound: %ld lengths, %d where a longer call takes fewer chunks, bound %s\n", checked, dips,
           bad ? "FAILED" : "held");
}

/* A reserve covers every shorter call of the layer, not only one of its length: after fdec_context_reserve(n) each
 * call of n' <= n captures into a CUDA graph (a call that needed more scratch would be refused during capture).
 * The split's rules can give a shorter call more chunks than a longer one (at head_dim 512 up to 64 chunks of 32
 * positions where a longer call takes 33 of 64), which a reserve of only n's own split would miss. */
static void test_cuda_reserve_bound(void) {
    static const uint32_t shapes[][3] = {{512, 8, 1}, {512, 16, 2}, {64, 32, 8}, {128, 32, 8}, {256, 16, 8}};
    static const uint32_t maxes[] = {2100, 4100};
    fd_rng r = {77};
    int checked = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t mi = 0; mi < sizeof maxes / sizeof maxes[0]; mi++) {
            const uint32_t D = shapes[si][0], H = shapes[si][1], G = shapes[si][2], n = maxes[mi];
            fdec_layer L = layer_of(D, H, G, 0, 0, FDEC_F16, 0);
            fd_problem pr;
            if (fd_problem_make(&pr, &L, n, FD_DENSE, 1.0f, &r)) {
                check(0, "reserve bound: no memory");
                continue;
            }
            inputs in;
            if (inputs_make(&in, &pr)) {
                check(0, "reserve bound: inputs could not be copied to the device");
                fd_problem_free(&pr);
                continue;
            }
            void *dout = fd_dev_alloc((size_t)H * D * 4);
            fdec_options o = fdec_default_options();
            o.cuda_stream = g_stream;
            fdec_context *ctx;
            if (!dout || fdec_context_create(FDEC_BACKEND_CUDA, &o, &ctx) != FDEC_OK) {
                check(0, "reserve bound: context or output buffer: %s", fdec_last_error());
                fd_dev_free(dout);
                inputs_free(&in);
                fd_problem_free(&pr);
                continue;
            }
            check(fdec_context_reserve(ctx, &L, n) == FDEC_OK, "reserve bound: reserve: %s", fdec_last_error());
            const uint32_t lens[] = {n, n - 20, n * 3 / 4, n / 2, 2080, 2048, 1100, 1024, 500, 64, 1};
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                if (lens[li] > n || lens[li] < 1) continue;
                fd_problem call = pr;
                call.seq_len = lens[li];
                graph_arg ga = {ctx, &call, &in, dout, NULL, FDEC_OK};
                void *gr = fd_dev_graph_capture(g_stream, graph_call, &ga, 1);
                check(gr != NULL && ga.st == FDEC_OK, "reserve bound: D %u, %u/%u heads, reserve %u, call %u: %s %s",
                      D, H, G, n, lens[li], fdec_status_string(ga.st), fdec_last_error());
                if (gr) fd_dev_graph_destroy(gr);
                checked++;
            }
            fdec_context_destroy(ctx);
            fd_dev_free(dout);
            inputs_free(&in);
            fd_problem_free(&pr);
        }
    printf("reserve bound: %d calls up to a reserve's length checked under graph capture\n", checked);
}

/* ---- 6. the README example ---- */

static void test_readme_example(const char *path) {
    if (!path) return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s > /dev/null", path);
    int rc = system(cmd);
    check(rc == 0, "README example (%s) exited with %d", path, rc);
    printf("README example: %s\n", rc == 0 ? "ran" : "FAILED");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* line by line, also into a pipe */
    uint64_t seed = 0x5eed;
    int configs = 1100;
    const char *readme[4] = {NULL};
    int nreadme = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--configs") && i + 1 < argc) configs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--readme-example") && i + 1 < argc && nreadme < 4) readme[nreadme++] = argv[++i];
        else if (!strcmp(argv[i], "--quick")) configs = 100;
        else if (!strcmp(argv[i], "--cuda")) g_cuda = 1;
        else {
            fprintf(stderr, "run_tests: unknown argument '%s' (--cuda, --seed N, --configs N, --quick, "
                            "--readme-example PATH)\n", argv[i]);
            return 2;
        }
    }
    if (g_cuda && !fd_dev_available()) {
        printf("CUDA tests: skipped (%s)\n", fdec_backend_available(FDEC_BACKEND_CUDA) ? "no CUDA device here"
                                                                                     : "this build has no CUDA backend");
        printf("0 passed, 0 failed\n");
        return 0;
    }
    double t0 = fd_now();
    if (g_cuda) g_stream = fd_dev_stream_create();
    path_ctx pc[8];
    int npc = make_path_contexts(pc);
    printf("backend %s; contexts:", g_cuda ? fd_dev_name() : "cpu");
    for (int i = 0; i < npc; i++) printf(" %s", pc[i].name);
    printf("; seed %llu\n", (unsigned long long)seed);
    test_bad_input();
    test_seed_shapes(pc, npc);
    test_position_end(pc, npc);
    test_long_sums(pc, npc);
    test_drift(pc, npc);
    test_merge_paths(pc, npc);
    test_numerics(pc, npc);
    test_nonfinite(pc, npc);
    test_merge();
    test_split_bound();
    if (!g_cuda) test_conversions();
    if (g_cuda) {
        test_cuda_graph();
        test_cuda_reserve_bound();
    } else {
        test_determinism_threads();
        test_work_stealing();
        test_concurrency();
    }
    test_sweep(pc, npc, configs, seed);
    for (int i = 0; i < nreadme; i++) test_readme_example(readme[i]);
    if (!g_cuda)
        printf("CUDA tests: skipped here (%s)\n", fdec_backend_available(FDEC_BACKEND_CUDA)
                                                     ? "CUDA compiled in; `make test-cuda` runs them on a GPU machine"
                                                     : "this build has no CUDA backend");
    for (int i = 0; i < npc; i++) fdec_context_destroy(pc[i].ctx);
    if (g_cuda) fd_dev_stream_destroy(g_stream);
    printf("time %.1f s\n", fd_now() - t0);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}

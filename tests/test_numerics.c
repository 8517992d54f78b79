/* test_numerics.c — numerics: summation drift, large logits, windows of one, non-finite inputs, the q and out
 * conversions. */
#include "harness.h"
#include "../src/cpu/cpu.h" /* the CPU paths' vector conversions */
#include "../fuzz/fuzz_input.h" /* the corpus drift input's reading and filling */

#include <math.h>

/* The corpus drift input (fuzz/corpus/cuda-f32-drift-d1-h28-68k: head_dim 1, 28 heads on one KV head, f32) with
 * seq_len 4,194,304, read and filled by the fuzz harnesses' own code (fuzz/fuzz_input.h), then V times 128 (exact) so
 * that it is ~0.6 and the absolute tolerance bites. Nearly equal weights over nearly equal V: a running f32 sum of
 * like terms drifts. The CPU's group totals were such a sum, one term a group of 1,024 positions: one thread (one
 * chunk) came out 2.7e-5 off relative, two threads 5.8e-6, against the tolerance's 2e-6; in double 1e-7. The CUDA SIMT
 * kernel sums 55k rows a lane group here (block sums of 256 steps). */
void test_drift(path_ctx *pc, int npc) {
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

void test_numerics(path_ctx *pc, int npc) {
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
 * must still leave the other seven right. */
void test_nonfinite(path_ctx *pc, int npc) {
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
                  pc[x].name, what[w], fdec_dtype_name(kvt), D, n);
            outbuf_free(&b);
        }
        inputs_free(&in);
        free(ref);
        fd_problem_free(&pr);
    }
    printf("non-finite inputs: 30 cases, affected heads NaN, others right\n");
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
void test_conversions(void) {
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


/* The header's contract at the edges of f32 and of the output type, and its aliasing rule, on every context:
 * - q = K = 1e20 (f32): every logit's f32 dot product overflows, so every head is NaN (out and lse) and the call
 *   returns FDEC_OK;
 * - V = 1e5 with f16 out: out is +inf (past f16's 65504), not a wrapped or saturated value;
 * - out on the same memory as q (f32 both): the same bytes as with out apart. */
void test_contract(path_ctx *pc, int npc) {
    for (int c = 0; c < npc; c++) {
        for (int what = 0; what < 3; what++) {
            fdec_layer L = layer_of(16, 4, 2, 0, 0, FDEC_F32, 0);
            if (what == 1) L.out_dtype = FDEC_F16;
            fd_rng r = {60 + (uint64_t)what};
            fd_problem pr;
            if (fd_problem_make(&pr, &L, 50, FD_DENSE, 1.0f, &r)) {
                check(0, "contract: could not build: %s", fdec_last_error());
                continue;
            }
            const size_t qn = (size_t)pr.p.H * pr.p.D;
            if (what == 0) {
                for (size_t i = 0; i < qn; i++) ((float *)pr.q)[i] = 1e20f;
                for (size_t i = 0; i < pr.kv_elems; i++) ((float *)pr.k)[i] = 1e20f;
            }
            if (what == 1)
                for (size_t i = 0; i < pr.kv_elems; i++) ((float *)pr.v)[i] = 1e5f;
            inputs in;
            outbuf b;
            outbuf_init(&b, &pr.p);
            int ok = !inputs_make(&in, &pr) && decode_into(pc[c].ctx, &pr, &in, &b, 1) == FDEC_OK;
            if (what == 0) {
                for (size_t i = 0; ok && i < qn; i++) ok = isnan(((float *)b.out)[i]);
                for (uint32_t h = 0; ok && h < pr.p.H; h++) ok = isnan(b.lse[h]);
                check(ok, "%s: an f32 logit that overflows must make its head NaN with FDEC_OK", pc[c].name);
            } else if (what == 1) {
                for (size_t i = 0; ok && i < qn; i++) ok = ((uint16_t *)b.out)[i] == 0x7c00;
                check(ok, "%s: an out value past f16's range must become +inf", pc[c].name);
            } else { /* out = q's own memory (a writable copy of it) */
                const size_t qb = qn * sizeof(float);
                float *alias = malloc(qb);
                void *dq = g_cuda ? fd_dev_alloc(qb) : alias;
                memcpy(alias, pr.q, qb);
                ok = ok && alias && dq && (!g_cuda || !fd_h2d(dq, pr.q, qb)) &&
                     fdec_decode(pc[c].ctx, &pr.layer, pr.seq_len, dq, in.k, in.v, dq, NULL) == FDEC_OK &&
                     (!g_cuda || (!fd_dev_sync() && !fd_d2h(alias, dq, qb)));
                ok = ok && !memcmp(alias, b.out, qb);
                check(ok, "%s: out on q's memory must give the bytes of out apart", pc[c].name);
                if (g_cuda) fd_dev_free(dq);
                free(alias);
            }
            outbuf_free(&b);
            inputs_free(&in);
            fd_problem_free(&pr);
        }
    }
    printf("contract: f32 overflow, f16 out range and out on q checked on %d contexts\n", npc);
}

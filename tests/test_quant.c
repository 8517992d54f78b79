/* test_quant.c — quantised K/V caches: fp8 (E4M3, E5M2, with scales) and ggml's Q8_0 and Q4_0.
 *   - blocks written out by hand from the formats' definitions, read back through a decode of one position (whose
 *     output is that position's V row) on every path;
 *   - fdec_kv_write's quantisers on inputs whose codes are known (round half away from zero for Q8_0, ggml's
 *     truncation for Q4_0, ties to even and saturation for fp8);
 *   - decodes against the float64 reference on the dequantised cache, at the f16 tolerance (a case table);
 *   - the error against the unquantised data: NMSE at most 5e-4 for Q8_0 and E4M3 on random data. */
#include "harness.h"

#include <math.h>

/* Buffers where the backend reads them: the host's, or under --cuda device copies (dev_in) and device outputs
 * copied back (dev_back), all freed by dev_done. */
typedef struct {
    void *dev[8];
    int n;
} devbufs;
static void *dev_in(devbufs *d, const void *host, size_t bytes) {
    if (!g_cuda) return (void *)host;
    void *p = fd_dev_alloc(bytes);
    if (p && fd_h2d(p, host, bytes)) fd_dev_free(p), p = NULL;
    if (p) d->dev[d->n++] = p;
    return p;
}
static int dev_back(void *host, const void *dev, size_t bytes) {
    return g_cuda ? fd_dev_sync() || fd_d2h(host, dev, bytes) : 0;
}
static void dev_done(devbufs *d) {
    while (d->n) fd_dev_free(d->dev[--d->n]);
}

/* fdec_decode on host buffers (q and out f32, H x D), through device copies under --cuda. */
static fdec_status decode_host(fdec_context *ctx, const fdec_layer *L, uint32_t n, const float *q, const void *k,
                               const void *v, size_t kv_bytes, float *out) {
    devbufs d = {{0}, 0};
    const size_t qb = (size_t)L->num_q_heads * L->head_dim * sizeof(float);
    const void *dq = dev_in(&d, q, qb), *dk = dev_in(&d, k, kv_bytes), *dv = dev_in(&d, v, kv_bytes);
    for (size_t i = 0; i < qb / sizeof(float); i++) out[i] = 3e38f; /* poison: finite, and no value a test wants */
    void *dout = dev_in(&d, out, qb);
    fdec_status st = dq && dk && dv && dout ? fdec_decode(ctx, L, n, dq, dk, dv, dout, NULL) : FDEC_ENOMEM;
    if (!st && dev_back(out, dout, qb)) st = FDEC_EBACKEND;
    dev_done(&d);
    return st;
}

/* fdec_kv_write of host rows into host caches (src_bytes each; the caches cache_bytes each, copied in first so that
 * what is not written stays), through device copies under --cuda. */
static fdec_status kv_write_host(fdec_context *ctx, const fdec_layer *L, const fdec_kv_slots *s, const void *ks,
                                 const void *vs, size_t src_bytes, void *kc, void *vc, size_t cache_bytes) {
    devbufs d = {{0}, 0};
    fdec_kv_slots ds = *s;
    ds.slots = dev_in(&d, s->slots, s->num_tokens * sizeof(int64_t));
    const void *dks = dev_in(&d, ks, src_bytes), *dvs = dev_in(&d, vs, src_bytes);
    void *dkc = dev_in(&d, kc, cache_bytes), *dvc = dev_in(&d, vc, cache_bytes);
    fdec_status st = ds.slots && dks && dvs && dkc && dvc ? fdec_kv_write(ctx, L, &ds, dks, dvs, dkc, dvc) : FDEC_ENOMEM;
    if (!st && (dev_back(kc, dkc, cache_bytes) || dev_back(vc, dvc, cache_bytes))) st = FDEC_EBACKEND;
    dev_done(&d);
    return st;
}

/* A decode of one position: out = that position's V row (K and q do not matter), as f32. */
static fdec_status read_v(fdec_context *ctx, fdec_dtype t, uint32_t D, const void *row, float *out, float v_scale) {
    fdec_layer L = layer_of(D, 1, 1, 0, 0, t, 0);
    L.v_scale = v_scale;
    static float q[512];
    return decode_host(ctx, &L, 1, q, row, row, fdec_dtype_bytes(t, D), out);
}

void test_quant_blocks(path_ctx *pc, int npc) {
    /* Q8_0: d = 0.5 (f16 0x3800), q = -128, -1, 0, 1, 127, then 3 j - 40 */
    unsigned char q8[34] = {0x00, 0x38};
    float want8[32];
    for (int j = 0; j < 32; j++) {
        const int v = j == 0 ? -128 : j == 1 ? -1 : j == 2 ? 0 : j == 3 ? 1 : j == 4 ? 127 : 3 * j - 40;
        q8[2 + j] = (unsigned char)(signed char)v;
        want8[j] = 0.5f * (float)v;
    }
    /* Q4_0: d = -2 (f16 0xc000); byte j: element j in the low nibble, element j + 16 in the high one */
    unsigned char q4[18] = {0x00, 0xc0};
    float want4[32];
    for (int j = 0; j < 16; j++) {
        const int lo = j, hi = 15 - j;
        q4[2 + j] = (unsigned char)(lo | hi << 4);
        want4[j] = -2.0f * (float)(lo - 8), want4[j + 16] = -2.0f * (float)(hi - 8);
    }
    /* fp8: E4M3 0x38 = 1, 0x7e = 448, 0x01 = 2^-9 (the least subnormal), 0xb5 = -0.8125 (-1.101b * 2^-1);
     * E5M2 0x3c = 1, 0x7b = 57344, 0x01 = 2^-16, 0xc2 = -3 */
    const unsigned char e4[4] = {0x38, 0x7e, 0x01, 0xb5}, e5[4] = {0x3c, 0x7b, 0x01, 0xc2};
    const float we4[4] = {1.0f, 448.0f, 0.001953125f, -0.8125f}, we5[4] = {1.0f, 57344.0f, 1.52587890625e-5f, -3.0f};
    for (int c = 0; c < npc; c++) {
        float out[32];
        int ok = !read_v(pc[c].ctx, FDEC_Q8_0, 32, q8, out, 0);
        for (int j = 0; j < 32; j++) ok &= out[j] == want8[j]; /* by value: the sums make -0 +0 */
        check(ok, "%s: a hand-written Q8_0 block read back wrong", pc[c].name);
        ok = !read_v(pc[c].ctx, FDEC_Q4_0, 32, q4, out, 0);
        for (int j = 0; j < 32; j++) ok &= out[j] == want4[j];
        check(ok, "%s: a hand-written Q4_0 block read back wrong", pc[c].name);
        for (int i = 0; i < 4; i++) {
            ok = !read_v(pc[c].ctx, FDEC_F8_E4M3, 1, e4 + i, out, 0) && out[0] == we4[i];
            check(ok, "%s: E4M3 0x%02x read as %g, want %g", pc[c].name, e4[i], (double)out[0], (double)we4[i]);
            ok = !read_v(pc[c].ctx, FDEC_F8_E5M2, 1, e5 + i, out, 2.0f) && out[0] == 2.0f * we5[i];
            check(ok, "%s: E5M2 0x%02x with v_scale 2 read as %g, want %g", pc[c].name, e5[i], (double)out[0],
                  2.0 * we5[i]);
        }
        const unsigned char nan8 = 0x7f;
        check(!read_v(pc[c].ctx, FDEC_F8_E4M3, 1, &nan8, out, 0) && isnan(out[0]), "%s: E4M3 0x7f is not NaN",
              pc[c].name);
    }

    /* the quantisers, through fdec_kv_write */
    fdec_layer L = layer_of(32, 1, 1, 0, 0, FDEC_Q8_0, 0);
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)j - 10.5f; /* amax 20.5: d = 20.5 / 127, q = round(x / d) */
    int64_t slot = 0;
    fdec_kv_slots s = {1, &slot, 1, 0, 0, FDEC_F32};
    unsigned char blk[34], blk2[34];
    check(kv_write_host(pc[0].ctx, &L, &s, x, x, sizeof x, blk, blk2, sizeof blk) == FDEC_OK, "kv_write q8_0: %s",
          fdec_last_error());
    const float d8 = 20.5f / 127.0f;
    int ok = blk[0] == (fdec_f32_to_f16(d8) & 0xff) && blk[1] == (fdec_f32_to_f16(d8) >> 8);
    for (int j = 0; j < 32; j++) ok &= (signed char)blk[2 + j] == (signed char)roundf(x[j] * (1.0f / d8));
    ok &= (signed char)blk[2 + 31] == 127; /* the largest magnitude: 127 */
    check(ok, "kv_write's Q8_0 block differs from ggml's rule: scale %02x%02x, codes %d %d .. %d", blk[1], blk[0],
          (signed char)blk[2], (signed char)blk[3], (signed char)blk[33]);
    L.kv_dtype = FDEC_Q4_0;
    unsigned char b4[18], b42[18];
    check(kv_write_host(pc[0].ctx, &L, &s, x, x, sizeof x, b4, b42, sizeof b4) == FDEC_OK, "kv_write q4_0: %s",
          fdec_last_error());
    const float d4 = 20.5f / -8.0f, id4 = 1.0f / d4; /* the largest magnitude is +20.5 */
    ok = b4[0] == (fdec_f32_to_f16(d4) & 0xff) && b4[1] == (fdec_f32_to_f16(d4) >> 8);
    for (int j = 0; j < 16; j++) {
        const int lo = (int)(signed char)(x[j] * id4 + 8.5f), hi = (int)(signed char)(x[j + 16] * id4 + 8.5f);
        ok &= b4[2 + j] == (unsigned char)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
    }
    check(ok, "kv_write's Q4_0 block differs from ggml's rule: scale %02x%02x, codes %02x %02x .. %02x", b4[1], b4[0],
          b4[2], b4[3], b4[17]);
    /* where the reference's casts are undefined: a block so small that 1 / d overflows to inf (Q8_0: d = 2.1e-37 / 127
     * is subnormal; Q4_0: d = -2.9e-44 / 8) saturates its codes (a 0 element, 0 x inf, gets 0) and reads back 0; a
     * block with a NaN gets a NaN scale and codes 0, and reads back NaN */
    float tiny8[32], tiny4[32], withnan[32];
    for (int j = 0; j < 32; j++)
        tiny8[j] = (float)(j - 10) * 1e-38f, tiny4[j] = (float)(j - 10) * 1.4e-45f, withnan[j] = x[j];
    withnan[5] = NAN;
    L.kv_dtype = FDEC_Q8_0;
    ok = kv_write_host(pc[0].ctx, &L, &s, tiny8, tiny8, sizeof tiny8, blk, blk2, sizeof blk) == FDEC_OK;
    ok &= blk[0] == 0 && blk[1] == 0;
    for (int j = 0; j < 32; j++) ok &= (signed char)blk[2 + j] == (j < 10 ? -127 : j == 10 ? 0 : 127);
    check(ok, "kv_write's Q8_0 block of tiny values: scale %02x%02x, codes %d %d %d", blk[1], blk[0],
          (signed char)blk[2], (signed char)blk[12], (signed char)blk[33]);
    ok = kv_write_host(pc[0].ctx, &L, &s, withnan, withnan, sizeof withnan, blk, blk2, sizeof blk) == FDEC_OK;
    ok &= (blk[1] & 0x7c) == 0x7c && ((blk[1] & 3) | blk[0]) != 0; /* an f16 NaN */
    for (int j = 0; j < 32; j++) ok &= blk[2 + j] == 0;
    float back[32];
    ok &= !read_v(pc[0].ctx, FDEC_Q8_0, 32, blk, back, 0) && isnan(back[0]);
    check(ok, "kv_write's Q8_0 block with a NaN: scale %02x%02x, codes %d %d, read back %g", blk[1], blk[0],
          (signed char)blk[2], (signed char)blk[7], (double)back[0]);
    L.kv_dtype = FDEC_Q4_0;
    ok = kv_write_host(pc[0].ctx, &L, &s, tiny4, tiny4, sizeof tiny4, b4, b42, sizeof b4) == FDEC_OK;
    ok &= b4[0] == 0x00 && b4[1] == 0x80; /* -0 */
    for (int j = 0; j < 16; j++) ok &= b4[2 + j] == (j < 10 ? 0x0f : 0x00);
    check(ok, "kv_write's Q4_0 block of tiny values: scale %02x%02x, codes %02x %02x %02x", b4[1], b4[0], b4[2],
          b4[12], b4[17]);
    ok = kv_write_host(pc[0].ctx, &L, &s, withnan, withnan, sizeof withnan, b4, b42, sizeof b4) == FDEC_OK;
    ok &= (b4[1] & 0x7c) == 0x7c && ((b4[1] & 3) | b4[0]) != 0;
    for (int j = 0; j < 16; j++) ok &= b4[2 + j] == 0;
    ok &= !read_v(pc[0].ctx, FDEC_Q4_0, 32, b4, back, 0) && isnan(back[0]);
    check(ok, "kv_write's Q4_0 block with a NaN: scale %02x%02x, codes %02x, read back %g", b4[1], b4[0], b4[2],
          (double)back[0]);
    /* fp8: ties to even (1.0625 between 1 and 1.125 -> 1; 1.1875 -> 1.25), saturation, NaN */
    L = layer_of(8, 1, 1, 0, 0, FDEC_F8_E4M3, 0);
    const float f[8] = {1.0625f, 1.1875f, 448.0f, 1000.0f, -1e30f, NAN, 0.0009765625f /* 2^-10: tie -> 0 */, -0.0f};
    const unsigned char we[8] = {0x38, 0x3a, 0x7e, 0x7e, 0xfe, 0x7f, 0x00, 0x80};
    unsigned char e[8], e2[8];
    check(kv_write_host(pc[0].ctx, &L, &s, f, f, sizeof f, e, e2, 8) == FDEC_OK && !memcmp(e, we, 8),
          "kv_write's E4M3 codes %02x %02x %02x %02x %02x %02x %02x %02x", e[0], e[1], e[2], e[3], e[4], e[5], e[6],
          e[7]);
    L.kv_dtype = FDEC_F8_E5M2;
    const float g[4] = {1e6f, -70000.0f, 3.5f /* 1.75 * 2: exact */, 1.125f /* tie between 1 and 1.25 -> 1 */};
    const unsigned char wg[4] = {0x7b, 0xfb, 0x43, 0x3c};
    L.head_dim = 4;
    check(kv_write_host(pc[0].ctx, &L, &s, g, g, sizeof g, e, e2, 4) == FDEC_OK && !memcmp(e, wg, 4),
          "kv_write's E5M2 codes %02x %02x %02x %02x", e[0], e[1], e[2], e[3]);
    printf("quantised blocks: read back on %d contexts, quantisers bit for bit\n", npc);
}

/* NMSE of the quantised cache's output against the output over the unquantised data: random f32 K/V written through
 * fdec_kv_write into the type, the decode against the float64 reference of the f32 data. */
static double nmse_of(fdec_context *ctx, fdec_dtype t, uint32_t D, uint32_t H, uint32_t G, uint32_t n, uint64_t seed) {
    fd_rng r = {seed};
    const size_t rowe = (size_t)G * D, N = (size_t)n * rowe;
    float *k = malloc(N * sizeof(float)), *v = malloc(N * sizeof(float)), *q = malloc((size_t)H * D * sizeof(float));
    for (size_t i = 0; i < N; i++) k[i] = (float)(2 * fd_uniform(&r) - 1), v[i] = (float)(2 * fd_uniform(&r) - 1);
    for (size_t i = 0; i < (size_t)H * D; i++) q[i] = (float)(2 * fd_uniform(&r) - 1);
    fdec_layer L = layer_of(D, H, G, 0, 0, t, 0);
    L.q_dtype = FDEC_F32;
    const size_t bytes = fdec_dtype_bytes(t, N);
    void *kq = calloc(1, bytes), *vq = calloc(1, bytes);
    int64_t *slots = malloc(n * sizeof *slots);
    for (uint32_t i = 0; i < n; i++) slots[i] = i;
    fdec_kv_slots s = {n, slots, n, 0, 0, FDEC_F32};
    double err = INFINITY;
    if (kv_write_host(ctx, &L, &s, k, v, N * sizeof(float), kq, vq, bytes) == FDEC_OK) {
        float *out = malloc((size_t)H * D * sizeof(float));
        fdec_layer Lf = L;
        Lf.kv_dtype = FDEC_F32;
        fdec_problem p;
        fdec_problem_init(&Lf, n, &p);
        double *ref = malloc(sizeof(double) * H * D);
        fdec_reference(&p, q, k, v, ref, NULL);
        if (decode_host(ctx, &L, n, q, kq, vq, bytes, out) == FDEC_OK) {
            double e = 0, m = 0;
            for (size_t i = 0; i < (size_t)H * D; i++) e += (out[i] - ref[i]) * (out[i] - ref[i]), m += ref[i] * ref[i];
            err = e / m;
        }
        free(out), free(ref);
    }
    free(k), free(v), free(q), free(kq), free(vq), free(slots);
    return err;
}

void test_quant_nmse(path_ctx *pc, int npc) {
    static const struct {
        uint32_t D, H, G, n;
    } shapes[] = {{128, 32, 8, 2048}, {64, 32, 8, 1000}, {256, 16, 8, 700}, {512, 16, 2, 300}};
    const fdec_dtype types[] = {FDEC_Q8_0, FDEC_F8_E4M3, FDEC_Q4_0, FDEC_F8_E5M2};
    for (int ti = 0; ti < 4; ti++) {
        /* Q8_0: ggml's test-backend-ops bound, 5e-4. E4M3's own rounding (3 mantissa bits) has an NMSE of 5.6e-4 on
         * uniform data, element by element (ml_dtypes agrees), so a decode cannot meet 5e-4: its bound is 8e-4. The
         * coarser Q4_0 and E5M2: 1e-2, which still catches a wrong scale or a swapped nibble. */
        const double bound = types[ti] == FDEC_Q8_0 ? 5e-4 : types[ti] == FDEC_F8_E4M3 ? 8e-4 : 1e-2;
        double worst = 0;
        for (int si = 0; si < 4; si++)
            for (int c = 0; c < npc; c++) {
                const double e = nmse_of(pc[c].ctx, types[ti], shapes[si].D, shapes[si].H, shapes[si].G, shapes[si].n,
                                         100 + si);
                check(e <= bound, "%s, %s, head_dim %u, %u positions: NMSE against the unquantised data %.3g > %.3g",
                      pc[c].name, fdec_dtype_name(types[ti]), shapes[si].D, shapes[si].n, e, bound);
                if (!(e <= worst)) worst = e;
            }
        printf("%-8s NMSE against the unquantised data: worst %.3g over 4 shapes x %d contexts\n",
               fdec_dtype_name(types[ti]), worst, npc);
    }
}

/* fp8 caches with a scale a KV head (k_scales, v_scales; a 0 among them means 1), against the float64 reference, on
 * every context (under --cuda the arrays are device copies, read by the kernels). */
void test_quant_scales(path_ctx *pc, int npc) {
    static const struct {
        uint32_t D, H, G, window, n;
        fdec_dtype t;
    } cases[] = {{128, 32, 8, 0, 3000, FDEC_F8_E4M3}, {64, 8, 2, 100, 700, FDEC_F8_E5M2},
                 {256, 16, 8, 0, 1500, FDEC_F8_E5M2}, {96, 12, 3, 0, 513, FDEC_F8_E4M3}};
    fd_rng r = {77};
    for (int c = 0; c < 4; c++) {
        float ks[8], vs[8];
        for (uint32_t g = 0; g < cases[c].G; g++)
            ks[g] = (float)(0.25 + 4 * fd_uniform(&r)), vs[g] = g == 1 ? 0.0f : (float)(0.25 + 4 * fd_uniform(&r));
        fdec_layer L = layer_of(cases[c].D, cases[c].H, cases[c].G, cases[c].window, 0, cases[c].t, 0);
        L.q_dtype = FDEC_F16, L.out_dtype = FDEC_F32;
        L.k_scales = ks, L.v_scales = vs;
        char name[64];
        snprintf(name, sizeof name, "%s per-head scales D=%u", fdec_dtype_name(cases[c].t), cases[c].D);
        one_case(pc, npc, name, L, cases[c].n, 1.0f, 900 + c);
    }
}

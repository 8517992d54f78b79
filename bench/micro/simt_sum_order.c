/* simt_sum_order.c — the CUDA SIMT kernel's f32 summation order, emulated on the CPU, to see how far a lane group's
 * running sum drifts with the number of rows it sums, with and without the kernel's block sums (bench/NOTES.md, CUDA
 * log row 72). It reads a fuzz input (fuzz/fuzz_input.h; a dense layout with f32 q, K and V, like row 71's
 * fuzz/corpus/cuda-f32-drift-d1-h28-68k), splits the positions into chunks of a given length as the kernel's split
 * would, and gives each of a chunk's 4 warps every 4th row (the generic path: one row a warp a step) with the
 * kernel's online softmax in f32 (fmaf where nvcc contracts), the block sums every SSO_STEPS steps (by default the
 * kernel's own period: 64, more for lane groups of more than 4,096 steps). The states of the warps and chunks are
 * then merged in double, so that the error is the lane sums' alone. It prints the largest error of any output element
 * against the float64 softmax, relative to the largest |V|.
 *   cc -O2 -Iinclude -Ifuzz bench/micro/simt_sum_order.c -lm -o /tmp/sso
 *   [SSO_STEPS=16] [SSO_U=4] [SSO_BY_ROWS=1] /tmp/sso fuzz/corpus/cuda-f32-drift-d1-h28-68k [rows-a-lane ...]
 * SSO_U: rows a lane takes a step (the kernel's U; 4 at f32 head_dim 128); SSO_BY_ROWS: the kernel's period rule on
 * rows instead of steps (bench/results/simt-sum-order-u4-s30.txt).
 * (CPU's exp2f stands in for the GPU's: the figures say how the drift grows, not the GPU's exact values.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_input.h"

#define NW 4    /* warps a block */
static int STEPS = 0; /* block sum period: SSO_STEPS=N in the environment; 0, the default, the kernel's rule */
static int U = 1;     /* rows a lane takes a step (the kernel's fdec_shape U: 1, 2 or 4); SSO_U=N */
static int BY_ROWS;   /* SSO_BY_ROWS=1: the kernel's rule applied to rows, the period in steps that rule / U */
static int COMP;      /* SSO_COMP=1: each block goes into the totals by a compensated add (Fast2Sum), its rounding
                       * error left in the block as the next one's start (the tensor-core kernel's form, CUDA row 75) */

/* the kernel's period in steps for a lane group of `rows` rows, `rows / U` steps (kernels.cuh, fdec_sum_period): 64,
 * or the power of two whose square reaches the steps where that is more */
static int period_of(uint64_t rows) {
    if (STEPS) return STEPS;
    const uint64_t n = BY_ROWS ? rows : (rows + U - 1) / U;
    uint64_t per = 64;
    while (per * per < n) per <<= 1;
    return BY_ROWS ? (int)(per / U > 0 ? per / U : 1) : (int)per;
}

static float w2(float mi, float m) { return mi == -INFINITY ? 0.f : exp2f(mi - m); }

/* one lane group's rows [first, end) by stride NW: its state (m in log2 units, l, o[D]) */
static void lane(const float *s, const float *v, size_t vs, uint32_t D, uint64_t first, uint64_t end, int sums,
                 double *M, double *L, double *O) { /* sums: the block sum period, 0 for one running sum */
    float m = -INFINITY, l = 0.f, mt = -INFINITY, lt = 0.f;
    float *o = calloc(D, sizeof(float)), *ot = calloc(D, sizeof(float));
    int n = 0;
    for (uint64_t t = first; t < end; t += (uint64_t)NW * U) { /* one step: rows t, t + NW, ... (U of them) */
        float smax = m, p[4];
        for (int u = 0; u < U; u++)
            if (t + (uint64_t)u * NW < end) smax = fmaxf(smax, s[t + (uint64_t)u * NW]);
        const float alpha = w2(m, smax);
        float psum = 0.f;
        for (int u = 0; u < U; u++) {
            p[u] = t + (uint64_t)u * NW < end ? exp2f(s[t + (uint64_t)u * NW] - smax) : 0.f;
            psum += p[u];
        }
        l = fmaf(l, alpha, psum);
        m = smax;
        for (uint32_t d = 0; d < D; d++) o[d] *= alpha;
        for (int u = 0; u < U; u++)
            if (t + (uint64_t)u * NW < end)
                for (uint32_t d = 0; d < D; d++) o[d] = fmaf(p[u], v[(t + (uint64_t)u * NW) * vs + d], o[d]);
        if (sums && ++n % sums == 0) {
            const float w = w2(mt, m);
            if (COMP) {
                float a = lt * w, t2 = a + l;
                l = (a - t2) + l, lt = t2;
                for (uint32_t d = 0; d < D; d++) a = ot[d] * w, t2 = a + o[d], o[d] = (a - t2) + o[d], ot[d] = t2;
            } else {
                lt = fmaf(lt, w, l), l = 0.f;
                for (uint32_t d = 0; d < D; d++) ot[d] = fmaf(ot[d], w, o[d]), o[d] = 0.f;
            }
            mt = m;
        }
    }
    if (sums) {
        const float w = w2(mt, m);
        l = fmaf(lt, w, l);
        for (uint32_t d = 0; d < D; d++) o[d] = fmaf(ot[d], w, o[d]);
    }
    *M = m, *L = l;
    for (uint32_t d = 0; d < D; d++) O[d] = o[d];
    free(o);
    free(ot);
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: [SSO_STEPS=N] %s FUZZ_INPUT [rows-per-lane ...]\n", argv[0]), 2;
    if (getenv("SSO_STEPS")) STEPS = atoi(getenv("SSO_STEPS")) > 0 ? atoi(getenv("SSO_STEPS")) : 0;
    if (getenv("SSO_U")) U = atoi(getenv("SSO_U")) == 2 || atoi(getenv("SSO_U")) == 4 ? atoi(getenv("SSO_U")) : 1;
    BY_ROWS = getenv("SSO_BY_ROWS") && atoi(getenv("SSO_BY_ROWS"));
    COMP = getenv("SSO_COMP") && atoi(getenv("SSO_COMP"));
    fuzz_max_kv = (size_t)1 << 28; /* hand-made inputs (fuzz/findings) reach more than a fuzzer's case */
    FILE *f = fopen(argv[1], "rb");
    if (!f) return perror(argv[1]), 1;
    static uint8_t buf[1 << 16];
    const size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    reader r = {buf, n};
    fuzz_case c;
    if (!fuzz_case_read(&r, &c) || c.L.q_dtype != FDEC_F32 || c.L.kv_dtype != FDEC_F32 || c.L.window ||
        c.L.ring_capacity || c.L.kv_pos_stride || c.L.kv_head_stride || !c.finite)
        return fprintf(stderr, "%s: not a dense all-f32 case with finite inputs\n", argv[1]), 1;
    const uint32_t D = c.L.head_dim, H = c.L.num_q_heads, G = c.L.num_kv_heads ? c.L.num_kv_heads : 1, R = H / G;
    const uint64_t Lq = c.seq_len;
    float *q = malloc(c.qe * 4), *k = malloc(c.kv_elems * 4), *v = malloc(c.kv_elems * 4);
    fuzz_fill_inputs(&r, &c, (uint8_t *)q, (uint8_t *)k, (uint8_t *)v);
    const float scale = c.L.scale != 0 ? c.L.scale : 1.0f / sqrtf((float)D);
    double vmax = 0;
    for (size_t i = 0; i < c.kv_elems; i++) vmax = fmax(vmax, fabs(v[i]));
    printf("%s: D=%u H=%u G=%u seq_len=%llu, max |V| %.4g\n", argv[1], D, H, G, (unsigned long long)Lq, vmax);
    static const unsigned deflt[] = {32, 64, 128, 256, 512, 904, 2048, 8192};
    const int nr = argc > 2 ? argc - 2 : (int)(sizeof deflt / sizeof deflt[0]);
    float *s = malloc(Lq * sizeof(float));
    double *sd = malloc(Lq * sizeof(double)), *ref = malloc(sizeof(double) * D), *O = malloc(sizeof(double) * D),
           *acc = malloc(sizeof(double) * D), *worst = calloc(2 * (size_t)nr, sizeof(double)); /* [rows][sums] */
    for (uint32_t h = 0; h < H; h++) {
        const uint32_t g = h / R;
        const float *vg = v + (size_t)g * D;
        /* scores in log2 units, f32 as the kernel (q pre-scaled by scale * log2 e), and in double */
        for (uint64_t t = 0; t < Lq; t++) {
            float a = 0.f;
            double ad = 0;
            for (uint32_t d = 0; d < D; d++) {
                a = fmaf(q[h * D + d] * (scale * 1.4426950408889634f), k[t * G * D + g * D + d], a);
                ad += (double)q[h * D + d] * k[t * G * D + g * D + d];
            }
            s[t] = a, sd[t] = ad * scale;
        }
        double mx = -INFINITY, den = 0;
        for (uint64_t t = 0; t < Lq; t++) mx = fmax(mx, sd[t]);
        for (uint32_t d = 0; d < D; d++) ref[d] = 0;
        for (uint64_t t = 0; t < Lq; t++) {
            const double p = exp(sd[t] - mx);
            den += p;
            for (uint32_t d = 0; d < D; d++) ref[d] += p * vg[t * G * D + d];
        }
        for (int ri = 0; ri < nr; ri++)
            for (int sums = 0; sums < 2; sums++) {
                const uint64_t rows = argc > 2 ? strtoull(argv[2 + ri], NULL, 10) : deflt[ri], clen = rows * NW;
                double Mx = -INFINITY, Lt = 0;
                for (uint32_t d = 0; d < D; d++) acc[d] = 0;
                /* every lane group's state, merged in double (log2 units) */
                for (uint64_t c0 = 0; c0 < Lq; c0 += clen) {
                    const uint64_t c1 = c0 + clen < Lq ? c0 + clen : Lq;
                    for (int w = 0; w < NW; w++) {
                        double m, l;
                        lane(s, vg, (size_t)G * D, D, c0 + w, c1, sums ? period_of(rows) : 0, &m, &l, O);
                        if (m == -INFINITY) continue;
                        const double mn = fmax(Mx, m), a = Mx == -INFINITY ? 0 : exp2(Mx - mn), b = exp2(m - mn);
                        Lt = Lt * a + l * b;
                        for (uint32_t d = 0; d < D; d++) acc[d] = acc[d] * a + O[d] * b;
                        Mx = mn;
                    }
                }
                for (uint32_t d = 0; d < D; d++)
                    worst[2 * ri + sums] = fmax(worst[2 * ri + sums], fabs(acc[d] / Lt - ref[d] / den) / vmax);
            }
    }
    printf("rows a lane  chunk_len  error/max|V| one sum   with block sums   period (steps)\n");
    for (int ri = 0; ri < nr; ri++) {
        const unsigned long long rows = argc > 2 ? strtoull(argv[2 + ri], NULL, 10) : deflt[ri];
        printf("%10llu %10llu %12.3g %17.3g %16d\n", rows, rows * NW, worst[2 * ri], worst[2 * ri + 1],
               period_of(rows));
    }
    free(q), free(k), free(v), free(s), free(sd), free(ref), free(O), free(acc), free(worst);
    return 0;
}

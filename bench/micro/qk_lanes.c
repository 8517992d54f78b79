/* qk_lanes.c — the Gemma 4 full layer's score pass (8 query heads a KV head, head_dim 512, f16 K, 32-row blocks,
 * 2048-byte rows) with the 8 heads in the lanes of a 256-bit vector, against kern.h's score tile (bench/NOTES.md, CPU
 * log row 78).
 *
 * kern.h's tile keeps dimensions in the lanes: 16 accumulators (8 heads x 2 positions) of 16 partial sums each, which
 * simd.h's transposed reduction folds into 16 scores (~5% of the layer's samples in row 74's profile, on the shuffle
 * and add pipes). Here each position's accumulator holds the 8 heads' scores themselves: acc[p] += qT[d] x K[p][d] for
 * every dimension d, qT[d] the 8 heads' q at d (a 256-bit load, made once a call) and K[p][d] broadcast by the FMA's
 * own memory operand ({1to8}, which takes no FP pipe: row 23), so there is no reduction at all, and the scores come out
 * as rows of 8 heads a position, the layout in which the softmax runs the 8 heads as lanes (row 74's fused block).
 * The broadcast needs K in f32 in memory: a tile of P rows is converted first into a scratch of P x 2 KiB (512-bit
 * conversions and stores, beside no FMAs), then U accumulators a position (dimensions d mod U) take its values.
 * The FMA count is kern.h's (8192 512-bit FMAs a block as 16384 256-bit ones, which Zen 4 runs at the same rate);
 * each takes a 4-byte load, and a 256-bit q load goes with every P of them.
 * Forms, alternated round by round:
 *   F  FMAs alone in registers, as many as kern.h's tile (8192 a block)
 *   A  kern.h's qk_tile at 8 heads (qk_tiles.h, as in qk_strassen.c)
 *   Hp.u  heads in lanes, P positions a tile, U accumulators a position
 * Prints the largest error of each against float64 and us a block, medians of 15 rounds. Argument: bytes of K
 * cycled through (1 MiB: L2).
 *
 *   gcc -O3 -march=native -Iinclude bench/micro/qk_lanes.c -lm -o /tmp/qk_lanes && /tmp/qk_lanes 1048576
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "qk_tiles.h" /* S, CV, qk_kern (A), qk_fma (F), cmpd, h2d */

/* F and A behind this file's signature (kf unused) */
static void f_fma(const char *k, const float *q, float *out, float *kf) { (void)kf, qk_fma(k, q, out); }
static void f_kern(const char *k, const float *q, float *out, float *kf) { (void)kf, qk_kern(k, q, out); }

/* H: qT[d * 8 + h] = q[h][d]; out[j * 8 + h] */
#define HLANES(P, U)                                                                                            \
    __attribute__((noinline)) static void qk_lanes_##P##_##U(const char *k, const float *qT, float *out,        \
                                                               float *kf) {                                     \
        for (int j0 = 0; j0 < 32; j0 += (P)) {                                                                  \
            for (int p = 0; p < (P); p++)                                                                       \
                for (int d = 0; d < 512; d += 16)                                                               \
                    _mm512_store_ps(kf + p * 512 + d, CV(k + (size_t)(j0 + p) * S + d * 2));                    \
            __m256 acc[P][U];                                                                                   \
            for (int p = 0; p < (P); p++)                                                                       \
                for (int u = 0; u < (U); u++) acc[p][u] = _mm256_setzero_ps();                                  \
            for (int d = 0; d < 512; d += (U))                                                                  \
                _Pragma("GCC unroll 8") for (int u = 0; u < (U); u++) {                                         \
                    const __m256 qv = _mm256_load_ps(qT + (d + u) * 8);                                         \
                    _Pragma("GCC unroll 16") for (int p = 0; p < (P); p++) acc[p][u] =                          \
                        _mm256_fmadd_ps(qv, _mm256_broadcast_ss(kf + p * 512 + d + u), acc[p][u]);              \
                }                                                                                               \
            for (int p = 0; p < (P); p++) {                                                                     \
                __m256 s = acc[p][0];                                                                           \
                for (int u = 1; u < (U); u++) s = _mm256_add_ps(s, acc[p][u]);                                  \
                _mm256_storeu_ps(out + (j0 + p) * 8, s);                                                        \
            }                                                                                                   \
        }                                                                                                       \
    }
HLANES(4, 2)
HLANES(4, 4)
HLANES(8, 2)
HLANES(2, 4)

typedef void form_fn(const char *k, const float *q, float *out, float *kf);

int main(int argc, char **argv) {
    enum { NF = 6, ROUNDS = 15, CALLS = 4000 };
    static const struct {
        form_fn *fn;
        int lay; /* out's layout: 0 A's, 1 [j][h], -1 no scores */
        int qt;  /* takes qT */
        const char *name;
    } F[NF] = {{f_fma, -1, 0, "F (8192 FMAs)"},      {f_kern, 0, 0, "A (kern.h's tile)"},
               {qk_lanes_4_2, 1, 1, "H4.2 (heads in lanes)"}, {qk_lanes_4_4, 1, 1, "H4.4"},
               {qk_lanes_8_2, 1, 1, "H8.2"},           {qk_lanes_2_4, 1, 1, "H2.4"}};
    const size_t span = argc > 1 ? (size_t)atol(argv[1]) : 1 << 20;
    const int nblk = span / (S * 32) > 0 ? (int)(span / (S * 32)) : 1;
    char *k = aligned_alloc(64, (size_t)S * 32 * nblk);
    float *q = aligned_alloc(64, 8 * 512 * 4), *qT = aligned_alloc(64, 8 * 512 * 4);
    float *out = aligned_alloc(64, NF * 256 * 4), *kf = aligned_alloc(64, 8 * 512 * 4);
    if (!k || !q || !qT || !out || !kf) return 1;
    fill_inputs(k, nblk, q);
    for (int h = 0; h < 8; h++)
        for (int d = 0; d < 512; d++) qT[d * 8 + h] = q[h * 512 + d];
    double err[NF] = {0}, mx = 0;
    for (int f = 0; f < NF; f++) F[f].fn(k, F[f].qt ? qT : q, out + f * 256, kf);
    for (int h = 0; h < 8; h++)
        for (int p = 0; p < 32; p++) {
            const double r = ref_score(k, q, h, p);
            mx = fmax(mx, fabs(r));
            const int at[2] = {(p / 2) * 16 + h * 2 + p % 2, p * 8 + h};
            for (int f = 0; f < NF; f++)
                if (F[f].lay >= 0) err[f] = fmax(err[f], fabs(out[f * 256 + at[F[f].lay]] - r));
        }
    printf("largest error against float64 (scores up to %.3g):", mx);
    for (int f = 1; f < NF; f++) printf(" %s %.3g", F[f].name, err[f]);
    printf("\n");
    double t[NF][ROUNDS];
    for (int r = 0; r < ROUNDS; r++)
        for (int f = 0; f < NF; f++) {
            const float *qq = F[f].qt ? qT : q;
            const double t0 = now();
            for (int c = 0; c < CALLS; c++) F[f].fn(k + (size_t)(c % nblk) * S * 32, qq, out + f * 256, kf);
            t[f][r] = (now() - t0) / CALLS * 1e6;
        }
    for (int f = 0; f < NF; f++) {
        qsort(t[f], ROUNDS, sizeof(double), cmpd);
        printf("%-26s %.3f us a block (min %.3f, max %.3f)\n", F[f].name, t[f][ROUNDS / 2], t[f][0], t[f][ROUNDS - 1]);
    }
    for (int f = 2; f < NF; f++) printf("%s/A %.3f  ", F[f].name, t[f][ROUNDS / 2] / t[1][ROUNDS / 2]);
    printf("\n");
    return out[0] == 12345.f; /* keep the results */
}

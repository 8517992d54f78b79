/* qk_tiles.h — what the score-pass micro-benchmarks share (qk_strassen.c, qk_lanes.c; bench/NOTES.md, CPU log rows
 * 75, 77 and 78): the Gemma 4 full layer's block (8 query heads a KV head, head_dim 512, f16 K, 32 rows of 2048 bytes),
 * kern.h's score tile at 8 heads in either vector width, the FMAs alone, and two helpers of the checks and timings. */
#ifndef FDEC_BENCH_QK_TILES_H
#define FDEC_BENCH_QK_TILES_H

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#include "fma16.h" /* now() */
#define FDEC_ISA 2
#include "../../src/cpu/simd.h" /* vreduce_vec: kern.h's transposed reduction */

#define S 2048 /* bytes a row: 2 KV heads x 512 f16 */
#define NBR 32 /* rows a block */
#define CV(p) _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(p)))

/* A: out[t * 16 + h * 2 + p] = score of head h, position 2t + p. The tile is written once for both vector widths:
 * A in 512-bit vectors, B (row 77's control) in 256-bit ones, with their own conversion and reduction. */
#define CVY(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define KERN_TILE(VT, W, LOADU, CVT, FMA, ZERO, REDUCE_STORE)                                                  \
    for (int t = 0; t < 16; t++) {                                                                              \
        VT acc[16];                                                                                             \
        for (int i = 0; i < 16; i++) acc[i] = ZERO();                                                           \
        const char *k0 = k + (size_t)(2 * t) * S, *k1 = k0 + S;                                                 \
        for (int d = 0; d < 512; d += W) {                                                                      \
            VT qv[8];                                                                                           \
            for (int h = 0; h < 8; h++) {                                                                       \
                qv[h] = LOADU(q + h * 512 + d);                                                                 \
                __asm__("" : "+v"(qv[h])); /* kern.h's vpin */                                                  \
            }                                                                                                   \
            const VT kv0 = CVT(k0 + d * 2), kv1 = CVT(k1 + d * 2);                                              \
            for (int h = 0; h < 8; h++) {                                                                       \
                acc[h * 2] = FMA(kv0, qv[h], acc[h * 2]);                                                       \
                acc[h * 2 + 1] = FMA(kv1, qv[h], acc[h * 2 + 1]);                                               \
            }                                                                                                   \
        }                                                                                                       \
        REDUCE_STORE(acc, out + t * 16);                                                                        \
    }
#define STORE_Z(acc, o) _mm512_storeu_ps((o), vreduce_vec(acc))
__attribute__((noinline)) static void qk_kern(const char *k, const float *q, float *out) {
    KERN_TILE(__m512, 16, _mm512_loadu_ps, CV, _mm512_fmadd_ps, _mm512_setzero_ps, STORE_Z)
}

/* as many FMAs as qk_kern's (8192), 16 chains in registers */
__attribute__((noinline)) static void qk_fma(const char *k, const float *q, float *out) {
    (void)k;
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_loadu_ps(out + i * 16);
    const __m512 b = _mm512_set1_ps(q[0]), c = _mm512_set1_ps(q[1]);
    for (int n = 0; n < 16 * 32; n++) _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) a[i] =
        _mm512_fmadd_ps(a[i], b, c);
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(out + i * 16, a[i]);
}

static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double h2d(uint16_t h) { return (double)_cvtsh_ss(h); }

/* The same inputs in every file: nblk blocks of K, f16 in +-[0.5, 1), and q of 8 heads in +-0.05 */
static void fill_inputs(char *k, int nblk, float *q) {
    srand(1);
    for (size_t i = 0; i < (size_t)S * NBR * nblk; i += 2)
        *(uint16_t *)(k + i) = (uint16_t)(0x3800 | (rand() & 0x3ff) | ((rand() & 1) << 15));
    for (int i = 0; i < 8 * 512; i++) q[i] = ((float)(rand() & 0xffffff) / 16777216.0f - 0.5f) * 0.1f;
}

/* The float64 score of head h at position p of the block at k */
static double ref_score(const char *k, const float *q, int h, int p) {
    double r = 0;
    for (int d = 0; d < 512; d++) r += (double)q[h * 512 + d] * h2d(*(const uint16_t *)(k + (size_t)p * S + d * 2));
    return r;
}

#endif

/* qk_strassen.c — the Gemma 4 full layer's score pass (8 query heads a KV head, head_dim 512, f16 K, 32-row blocks,
 * 2048-byte rows) by one level of Strassen's product against kern.h's score tile (bench/NOTES.md, CPU log row 75).
 *
 * The pass is S[8 x 32] = Q[8 x 512] K^T[512 x 32] for each block; Strassen's 2 x 2 scheme does it in 7 block products
 * instead of 8. Blocks: heads 0-3 / 4-7 (A rows i, i + 4), dimensions in even / odd 16-wide vectors (so a step's two
 * loads of a K row use one whole line), positions 0-15 / 16-31 (B columns j, j + 16). The 7 combinations of q (A side)
 * are fixed for a call and made once; the 5 of K (B side) are adds of converted K vectors, a step at a time. Each
 * M_k is a dot product over 256 dimensions, 16 lanes wide, so the 28 sums of a tile are combined into 16 before the
 * reduction.
 * Forms, alternated round by round:
 *   F  FMAs alone in registers, as many as kern.h's tile (8192 a block)
 *   A  kern.h's qk_tile at 8 heads: 8 heads x 2 positions, 16 accumulators, q's 8 vectors a step loaded once and used
 *      for both positions, simd.h's transposed reduction (vreduce_vec), one store of the 16 sums
 *   S  the Strassen tile: 4 head rows x 1 position pair, 28 accumulators, each FMA's q combination from memory (the
 *      28 KiB of combinations a KV head), 4 K loads and conversions and 5 adds a step; 7168 FMAs a block
 * Prints the largest error of A and S against float64 and us a block, medians of 15 rounds. Argument: bytes of K
 * cycled through (1 MiB: L2).
 *
 *   gcc -O3 -march=native -Iinclude bench/micro/qk_strassen.c -lm -o /tmp/qk_strassen && /tmp/qk_strassen 1048576
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fma16.h" /* now() */
#define FDEC_ISA 2
#include "../../src/cpu/simd.h" /* vreduce_vec: kern.h's transposed reduction */

#define S 2048 /* bytes a row: 2 KV heads x 512 f16 */
#define NBR 32 /* rows a block */
#define CV(p) _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(p)))

/* A: out[t * 16 + h * 2 + p] = score of head h, position 2t + p */
__attribute__((noinline)) static void qk_kern(const char *k, const float *q, float *out) {
    for (int t = 0; t < 16; t++) {
        __m512 acc[16];
        for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
        const char *k0 = k + (size_t)(2 * t) * S, *k1 = k0 + S;
        for (int d = 0; d < 512; d += 16) {
            __m512 qv[8];
            for (int h = 0; h < 8; h++) {
                qv[h] = _mm512_loadu_ps(q + h * 512 + d);
                __asm__("" : "+v"(qv[h])); /* kern.h's vpin */
            }
            const __m512 kv0 = CV(k0 + d * 2), kv1 = CV(k1 + d * 2);
            for (int h = 0; h < 8; h++) {
                acc[h * 2] = _mm512_fmadd_ps(kv0, qv[h], acc[h * 2]);
                acc[h * 2 + 1] = _mm512_fmadd_ps(kv1, qv[h], acc[h * 2 + 1]);
            }
        }
        _mm512_storeu_ps(out + t * 16, vreduce_vec(acc));
    }
}

/* q's 7 combinations, qc[((s * 7 + c) * 4 + i) * 16]: step s (dimensions 32 s + [0, 16) even, + [16, 32) odd), product
 * c, head row i: A11 + A22, A21 + A22, A11, A22, A11 + A12, A21 - A11, A12 - A22 with A11 = q[i] even, A12 = q[i] odd,
 * A21 = q[i + 4] even, A22 = q[i + 4] odd */
static void q_combos(const float *q, float *qc) {
    for (int s = 0; s < 16; s++)
        for (int i = 0; i < 4; i++) {
            const __m512 a11 = _mm512_loadu_ps(q + i * 512 + s * 32), a12 = _mm512_loadu_ps(q + i * 512 + s * 32 + 16);
            const __m512 a21 = _mm512_loadu_ps(q + (i + 4) * 512 + s * 32),
                         a22 = _mm512_loadu_ps(q + (i + 4) * 512 + s * 32 + 16);
            const __m512 c[7] = {_mm512_add_ps(a11, a22), _mm512_add_ps(a21, a22), a11, a22,
                                 _mm512_add_ps(a11, a12), _mm512_sub_ps(a21, a11), _mm512_sub_ps(a12, a22)};
            for (int k = 0; k < 7; k++) _mm512_store_ps(qc + ((s * 7 + k) * 4 + i) * 16, c[k]);
        }
}

#define QF4(c, b) m##c##0 = _mm512_fmadd_ps(_mm512_load_ps(a + (c * 4 + 0) * 16), (b), m##c##0), \
                  m##c##1 = _mm512_fmadd_ps(_mm512_load_ps(a + (c * 4 + 1) * 16), (b), m##c##1), \
                  m##c##2 = _mm512_fmadd_ps(_mm512_load_ps(a + (c * 4 + 2) * 16), (b), m##c##2), \
                  m##c##3 = _mm512_fmadd_ps(_mm512_load_ps(a + (c * 4 + 3) * 16), (b), m##c##3)
/* S: out[j * 16 + ...] = for position pair j (positions j, j + 16): heads 0-3 at j, 0-3 at j + 16, 4-7 at j, 4-7 at
 * j + 16 */
__attribute__((noinline)) static void qk_strassen(const char *k, const float *qc, float *out) {
    for (int j = 0; j < 16; j++) {
        const __m512 z = _mm512_setzero_ps();
        __m512 m00 = z, m01 = z, m02 = z, m03 = z, m10 = z, m11 = z, m12 = z, m13 = z, m20 = z, m21 = z, m22 = z,
               m23 = z, m30 = z, m31 = z, m32 = z, m33 = z, m40 = z, m41 = z, m42 = z, m43 = z, m50 = z, m51 = z,
               m52 = z, m53 = z, m60 = z, m61 = z, m62 = z, m63 = z;
        const char *r1 = k + (size_t)j * S, *r2 = r1 + 16 * S;
        const float *a = qc;
        for (int s = 0; s < 16; s++, a += 7 * 4 * 16, r1 += 64, r2 += 64) {
            const __m512 ke1 = CV(r1), ko2 = CV(r2 + 32);
            QF4(0, _mm512_add_ps(ke1, ko2)); /* B11 + B22 */
            QF4(1, ke1);                     /* B11 */
            QF4(4, ko2);                     /* B22 */
            const __m512 ko1 = CV(r1 + 32);
            QF4(6, _mm512_add_ps(ko1, ko2)); /* B21 + B22 */
            QF4(3, _mm512_sub_ps(ko1, ke1)); /* B21 - B11 */
            const __m512 ke2 = CV(r2);
            QF4(2, _mm512_sub_ps(ke2, ko2)); /* B12 - B22 */
            QF4(5, _mm512_add_ps(ke1, ke2)); /* B11 + B12 */
        }
        const __m512 M[7][4] = {{m00, m01, m02, m03}, {m10, m11, m12, m13}, {m20, m21, m22, m23},
                                {m30, m31, m32, m33}, {m40, m41, m42, m43}, {m50, m51, m52, m53},
                                {m60, m61, m62, m63}};
        __m512 c[16];
        for (int i = 0; i < 4; i++) {
            c[i] = _mm512_add_ps(_mm512_sub_ps(_mm512_add_ps(M[0][i], M[3][i]), M[4][i]), M[6][i]); /* C11 */
            c[4 + i] = _mm512_add_ps(M[2][i], M[4][i]);                                              /* C12 */
            c[8 + i] = _mm512_add_ps(M[1][i], M[3][i]);                                              /* C21 */
            c[12 + i] = _mm512_add_ps(_mm512_add_ps(_mm512_sub_ps(M[0][i], M[1][i]), M[2][i]), M[5][i]); /* C22 */
        }
        _mm512_storeu_ps(out + j * 16, vreduce_vec(c));
    }
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

int main(int argc, char **argv) {
    const size_t span = argc > 1 ? (size_t)atol(argv[1]) : 1 << 20;
    const int nblk = span / (S * NBR) > 0 ? (int)(span / (S * NBR)) : 1;
    char *k = aligned_alloc(64, (size_t)S * NBR * nblk);
    float *q = aligned_alloc(64, 8 * 512 * 4), *qc = aligned_alloc(64, 16 * 7 * 4 * 16 * 4);
    float *oa = aligned_alloc(64, 256 * 4), *os = aligned_alloc(64, 256 * 4);
    if (!k || !q || !qc || !oa || !os) return 1;
    srand(1);
    for (size_t i = 0; i < (size_t)S * NBR * nblk; i += 2) /* f16 in +-[0.5, 1) */
        *(uint16_t *)(k + i) = (uint16_t)(0x3800 | (rand() & 0x3ff) | ((rand() & 1) << 15));
    for (int i = 0; i < 8 * 512; i++) q[i] = ((float)(rand() & 0xffffff) / 16777216.0f - 0.5f) * 0.1f;
    q_combos(q, qc);
    /* errors against float64, block 0 */
    qk_kern(k, q, oa);
    qk_strassen(k, qc, os);
    double ea = 0, es = 0, mx = 0;
    for (int h = 0; h < 8; h++)
        for (int p = 0; p < 32; p++) {
            double r = 0;
            for (int d = 0; d < 512; d++)
                r += (double)q[h * 512 + d] * h2d(*(const uint16_t *)(k + (size_t)p * S + d * 2));
            const double a = oa[(p / 2) * 16 + h * 2 + p % 2];
            const int j = p % 16, hi = h >= 4, pi = p >= 16;
            const double s = os[j * 16 + (hi * 2 + pi) * 4 + h % 4];
            ea = fmax(ea, fabs(a - r)), es = fmax(es, fabs(s - r)), mx = fmax(mx, fabs(r));
        }
    printf("largest error against float64 (scores up to %.3g): A %.3g, S %.3g\n", mx, ea, es);
    enum { ROUNDS = 15, CALLS = 4000 };
    double t[3][ROUNDS];
    for (int r = 0; r < ROUNDS; r++)
        for (int f = 0; f < 3; f++) {
            const double t0 = now();
            for (int c = 0; c < CALLS; c++) {
                const char *kb = k + (size_t)(c % nblk) * S * NBR;
                if (f == 0) qk_fma(kb, q, oa);
                else if (f == 1) qk_kern(kb, q, oa);
                else qk_strassen(kb, qc, os);
            }
            t[f][r] = (now() - t0) / CALLS * 1e6;
        }
    const char *name[3] = {"F (8192 FMAs)", "A (kern.h's tile)", "S (Strassen, 7168 FMAs)"};
    for (int f = 0; f < 3; f++) {
        qsort(t[f], ROUNDS, sizeof(double), cmpd);
        printf("%-26s %.3f us a block (min %.3f, max %.3f)\n", name[f], t[f][ROUNDS / 2], t[f][0], t[f][ROUNDS - 1]);
    }
    printf("S/A %.3f\n", t[2][ROUNDS / 2] / t[1][ROUNDS / 2]);
    return oa[0] == 12345.f && os[0] == 54321.f; /* keep the results */
}

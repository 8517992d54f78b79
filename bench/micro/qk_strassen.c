/* qk_strassen.c — the Gemma 4 full layer's score pass (8 query heads a KV head, head_dim 512, f16 K, 32-row blocks,
 * 2048-byte rows) by one level of Strassen's product against kern.h's score tile (bench/NOTES.md, CPU log rows 75
 * and 77).
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
 *   T  (row 77) the 7 products one at a time, each a tile of 4 head rows x 4 position pairs (q's 4 combinations a step
 *      pinned), its K side converted afresh for each product (12 conversions a position pair and step, not 4)
 *   U  (row 77) the products in groups that share their K conversions: {M2, M4}, {M5, M7}, {M1, M3} as tiles of
 *      2 products x 4 head rows x 2 position pairs, M6 as T's tile; each tile reduced, the C blocks added at the end
 *   V  (row 77) U with each tile's sums added unreduced into the C blocks' vectors in memory and 16 reductions at the
 *      end, as A has
 *   W  (row 77) U with the block's K converted to f32 once (64 KiB) and every tile loading it
 *   Y  (row 77) T in 256-bit vectors (a 256-bit vcvtph2ps is nearly free beside the FMAs where a 512-bit one is not:
 *      cvt_cost.c)
 *   Z  (row 77) U in 256-bit vectors
 *   B  (row 77) A in 256-bit vectors, a control for Y and Z
 * Prints the largest error of each against float64 and us a block, medians of 15 rounds. Argument: bytes of K
 * cycled through (1 MiB: L2). Timing-only flags, wrong on purpose: -DT_ONECV (T's and Y's tiles, and M6's in U, V
 * and W, with one conversion a K side), -DU_NOM6 (U and W without M6), -DU_ALL13 (U's and W's pair tiles all as
 * {M2, M4}).
 *
 *   gcc -O3 -march=native -Iinclude bench/micro/qk_strassen.c -lm -o /tmp/qk_strassen && /tmp/qk_strassen 1048576
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qk_tiles.h" /* S, NBR, CV, CVY, KERN_TILE, qk_kern (A), qk_fma (F), cmpd, h2d */

#define AI static inline __attribute__((always_inline))
#define ALL7(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6)
/* which of e1, o1, e2, o2 (bits 0-3) product c's K side needs */
AI int raws_of(int c) { return (int[]){1 | 8, 1, 4 | 8, 1 | 2, 8, 1 | 4, 2 | 8}[c]; }

/* C11 = M1 + M4 - M5 + M7, C12 = M3 + M5, C21 = M2 + M4, C22 = M1 - M2 + M3 + M6 from r[k] = M(k + 1) */
AI void cquads(const __m512 *r, __m512 *c) {
    c[0] = _mm512_add_ps(_mm512_sub_ps(_mm512_add_ps(r[0], r[3]), r[4]), r[6]);
    c[1] = _mm512_add_ps(r[2], r[4]);
    c[2] = _mm512_add_ps(r[1], r[3]);
    c[3] = _mm512_add_ps(_mm512_add_ps(_mm512_sub_ps(r[0], r[1]), r[2]), r[5]);
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
        for (int i = 0; i < 4; i++) { /* c[4 q + i]: quadrant q (C11, C12, C21, C22) of head row i */
            const __m512 r[7] = {M[0][i], M[1][i], M[2][i], M[3][i], M[4][i], M[5][i], M[6][i]};
            __m512 cq[4];
            cquads(r, cq);
            for (int q = 0; q < 4; q++) c[4 * q + i] = cq[q];
        }
        _mm512_storeu_ps(out + j * 16, vreduce_vec(c));
    }
}

/* Forms T, U, V, W, Y, Z (row 77). q's combinations product-major: qt[((c * 16 + s) * 4 + i) * 16]. Their K side
 * comes from kb, the block's f16 rows (f32 = 0: S bytes a row, as for A and S) or W's f32 copy (f32 = 1: 512 floats a
 * row). At step s, position pair j: e1 = B11 (row j, dimension vector 2 s), o1 = B21 (row j, 2 s + 1), e2 = B12 (row
 * j + 16, 2 s), o2 = B22 (row j + 16, 2 s + 1). m[(c * 4 + i) * 16 + j]: product c's sum for head row i, position
 * pair j. */
static void q_combos_t(const float *qc, float *qt) {
    for (int s = 0; s < 16; s++)
        for (int c = 0; c < 7; c++)
            for (int i = 0; i < 4; i++)
                memcpy(qt + ((c * 16 + s) * 4 + i) * 16, qc + ((s * 7 + c) * 4 + i) * 16, 64);
}

/* C from the products: out[h * 32 + p] */
static void combine(const float *m, float *out) {
    for (int i = 0; i < 4; i++) {
        __m512 r[7], c[4];
        for (int k = 0; k < 7; k++) r[k] = _mm512_loadu_ps(m + (k * 4 + i) * 16);
        cquads(r, c);
        _mm512_storeu_ps(out + i * 32, c[0]), _mm512_storeu_ps(out + i * 32 + 16, c[1]);
        _mm512_storeu_ps(out + (4 + i) * 32, c[2]), _mm512_storeu_ps(out + (4 + i) * 32 + 16, c[3]);
    }
}

/* 16 vectors of 8 lanes -> the 16 sums, lane k of the two results = sum of a[k], a[8 + k] (the tree of simd.h's AVX2
 * vreduce_all, for 16 vectors) */
AI void reduce16_y(const __m256 *a, __m256 *z) {
    __m256 w[8], u[4];
    for (int i = 0; i < 8; i++)
        w[i] = _mm256_add_ps(_mm256_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 4; i++)
        u[i] = _mm256_add_ps(_mm256_shuffle_ps(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int i = 0; i < 2; i++)
        z[i] = _mm256_add_ps(_mm256_permute2f128_ps(u[2 * i], u[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(u[2 * i], u[2 * i + 1], 0x31));
}
/* a tile's 16 sums as four quarters, quarter q holding the sums of acc[4 q .. 4 q + 3] */
AI void quarters_z(const __m512 *acc, __m128 *qd) {
    const __m512 v = vreduce_vec(acc);
    qd[0] = _mm512_castps512_ps128(v), qd[1] = _mm512_extractf32x4_ps(v, 1);
    qd[2] = _mm512_extractf32x4_ps(v, 2), qd[3] = _mm512_extractf32x4_ps(v, 3);
}
AI void quarters_y(const __m256 *acc, __m128 *qd) {
    __m256 z[2];
    reduce16_y(acc, z);
    qd[0] = _mm256_castps256_ps128(z[0]), qd[1] = _mm256_extractf128_ps(z[0], 1);
    qd[2] = _mm256_castps256_ps128(z[1]), qd[3] = _mm256_extractf128_ps(z[1], 1);
}
/* T's tile (acc[i * 4 + jj]) into m: quarter i is head row i, position pairs 4 jg .. 4 jg + 3 */
AI void store_t(float *m, int c, int jg, const __m128 *qd) {
    for (int i = 0; i < 4; i++) _mm_storeu_ps(m + (c * 4 + i) * 16 + 4 * jg, qd[i]);
}
/* U's tile (acc[g * 8 + i * 2 + p]) into m: quarter q holds product g = q / 2's head rows 2 (q % 2) and + 1 */
AI void store_pair(float *m, int c1, int c2, int j, const __m128 *qd) {
    for (int q = 0; q < 4; q++) {
        float *o = m + ((q < 2 ? c1 : c2) * 4 + 2 * (q % 2)) * 16 + j;
        _mm_storel_pi((__m64 *)o, qd[q]), _mm_storeh_pi((__m64 *)(o + 16), qd[q]);
    }
}

/* The tiles of T and U, written once for both vector widths: _z in 512-bit vectors (T, U, V, W), _y in 256-bit ones
 * (Y, Z: a 256-bit vcvtph2ps is nearly free beside the FMAs where a 512-bit one is not, cvt_cost.c; two 256-bit FMAs
 * do the work of one 512-bit FMA on Zen 4). Step s, part hh (16 / LW parts of LW dimensions each): q's combinations
 * at qt + c * 1024 + 64 s + LW hh (+ 16 i for head row i), e1 / e2 at element 32 s + LW hh of rows j / j + 16, o1 / o2
 * 16 further.
 *   ld:    the LW elements from element e of row `row` of kb, f16 (f32 = 0, S bytes a row) or f32 (f32 = 1, W's copy)
 *   kside: product c's K side for position pair j at element e
 *   t_acc: T's tile, product c, head rows 0-3, position pairs 4 jg .. 4 jg + 3; acc[i * 4 + jj]
 *   pair_acc: U's tile, products c1 (g = 0) and c2 (g = 1) sharing their K conversions, head rows 0-3, position
 *          pairs j, j + 1; acc[g * 8 + i * 2 + p] */
#define TILES(SFX, VT, LW, LOADF, CVT, ADD, SUB, FMA, ZERO)                                                     \
    AI VT ld##SFX(const void *kb, int f32, int row, int e) {                                                    \
        if (f32) return LOADF((const float *)kb + row * 512 + e);                                               \
        return CVT((const char *)kb + (size_t)row * S + e * 2);                                                 \
    }                                                                                                           \
    AI VT kcomb##SFX(VT e1, VT o1, VT e2, VT o2, int c) {                                                       \
        switch (c) {                                                                                            \
        case 0: return ADD(e1, o2); /* B11 + B22 */                                                             \
        case 1: return e1;          /* B11 */                                                                   \
        case 2: return SUB(e2, o2); /* B12 - B22 */                                                             \
        case 3: return SUB(o1, e1); /* B21 - B11 */                                                             \
        case 4: return o2;          /* B22 */                                                                   \
        case 5: return ADD(e1, e2); /* B11 + B12 */                                                             \
        default: return ADD(o1, o2); /* B21 + B22 */                                                            \
        }                                                                                                       \
    }                                                                                                           \
    AI VT raws##SFX(const void *kb, int f32, int raws, int c, int j, int e) {                                   \
        const VT z = ZERO();                                                                                    \
        return kcomb##SFX(raws & 1 ? ld##SFX(kb, f32, j, e) : z, raws & 2 ? ld##SFX(kb, f32, j, e + 16) : z,    \
                          raws & 4 ? ld##SFX(kb, f32, j + 16, e) : z, raws & 8 ? ld##SFX(kb, f32, j + 16, e + 16) : z, \
                          c);                                                                                   \
    }                                                                                                           \
    AI VT kside##SFX(const void *kb, int f32, int c, int j, int e) {                                            \
        if (T_ONECV) return ld##SFX(kb, f32, j, e); /* timing only, wrong on purpose */                         \
        return raws##SFX(kb, f32, raws_of(c), c, j, e);                                                         \
    }                                                                                                           \
    AI void t_acc##SFX(const void *kb, int f32, const float *qt, int c, int jg, VT *acc) {                     \
        for (int i = 0; i < 16; i++) acc[i] = ZERO();                                                           \
        for (int s = 0; s < 16; s++)                                                                            \
            for (int hh = 0; hh < 16 / LW; hh++) {                                                              \
                VT qv[4];                                                                                       \
                for (int i = 0; i < 4; i++) {                                                                   \
                    qv[i] = LOADF(qt + c * 1024 + s * 64 + hh * LW + i * 16);                                   \
                    __asm__("" : "+v"(qv[i]));                                                                  \
                }                                                                                               \
                for (int jj = 0; jj < 4; jj++) {                                                                \
                    const VT b = kside##SFX(kb, f32, c, 4 * jg + jj, s * 32 + hh * LW);                         \
                    for (int i = 0; i < 4; i++) acc[i * 4 + jj] = FMA(qv[i], b, acc[i * 4 + jj]);               \
                }                                                                                               \
            }                                                                                                   \
    }                                                                                                           \
    AI void pair_acc##SFX(const void *kb, int f32, const float *qt, int c1, int c2, int j, VT *acc) {               \
        const int raws = raws_of(c1) | raws_of(c2);                                                                 \
        for (int i = 0; i < 16; i++) acc[i] = ZERO();                                                               \
        for (int s = 0; s < 16; s++)                                                                                \
            for (int hh = 0; hh < 16 / LW; hh++) {                                                                  \
                VT qv[8];                                                                                           \
                for (int i = 0; i < 4; i++) {                                                                       \
                    qv[i] = LOADF(qt + c1 * 1024 + s * 64 + hh * LW + i * 16);                                      \
                    qv[4 + i] = LOADF(qt + c2 * 1024 + s * 64 + hh * LW + i * 16);                                  \
                    __asm__("" : "+v"(qv[i]), "+v"(qv[4 + i]));                                                     \
                }                                                                                                   \
                for (int p = 0; p < 2; p++) {                                                                       \
                    const int e = s * 32 + hh * LW;                                                                 \
                    const VT z = ZERO();                                                                            \
                    const VT e1 = raws & 1 ? ld##SFX(kb, f32, j + p, e) : z;                                        \
                    const VT o1 = raws & 2 ? ld##SFX(kb, f32, j + p, e + 16) : z;                                   \
                    const VT e2 = raws & 4 ? ld##SFX(kb, f32, j + p + 16, e) : z;                                   \
                    const VT o2 = raws & 8 ? ld##SFX(kb, f32, j + p + 16, e + 16) : z;                              \
                    const VT b1 = kcomb##SFX(e1, o1, e2, o2, c1), b2 = kcomb##SFX(e1, o1, e2, o2, c2);              \
                    for (int i = 0; i < 4; i++) {                                                                   \
                        acc[i * 2 + p] = FMA(qv[i], b1, acc[i * 2 + p]);                                            \
                        acc[8 + i * 2 + p] = FMA(qv[4 + i], b2, acc[8 + i * 2 + p]);                                \
                    }                                                                                               \
                }                                                                                                   \
            }                                                                                                       \
    }                                                                                                               \
    /* T (Y): the 7 products one at a time, each product's K side converted afresh; c a constant in each call, so  \
     * that kcomb's switch folds */                                                                             \
    AI void strassen_turns##SFX(const char *k, const float *qt, float *out, float *m) {                        \
        VT acc[16];                                                                                             \
        __m128 qd[4];                                                                                           \
        for (int jg = 0; jg < 4; jg++) {                                                                        \
            ALL7(T_ONE##SFX)                                                                                    \
        }                                                                                                       \
        combine(m, out);                                                                                        \
    }                                                                                                           \
    /* U, W (Z): the products in groups that share their converted K vectors, so that no tile converts more than 3 \
     * K vectors for 16 FMAs: {M2, M4} (B11, B21), {M5, M7} (B21, B22), {M1, M3} (B11, B12, B22) as pair tiles, M6 \
     * (B11, B12) as T's tile; each tile reduced, the C blocks added at the end */                              \
    AI void strassen_groups##SFX(const void *kb, int f32, const float *qt, float *out, float *m) {            \
        VT acc[16];                                                                                             \
        __m128 qd[4];                                                                                           \
        for (int j = 0; j < 16; j += 2) {                                                                       \
            if (U_ALL13) /* timing only: every pair tile as {M2, M4} */                                         \
                for (int g = 0; g < 3; g++)                                                                     \
                    pair_acc##SFX(kb, f32, qt, 1, 3, j, acc), quarters##SFX(acc, qd), store_pair(m, 1, 3, j, qd); \
            else {                                                                                              \
                pair_acc##SFX(kb, f32, qt, 1, 3, j, acc), quarters##SFX(acc, qd), store_pair(m, 1, 3, j, qd);   \
                pair_acc##SFX(kb, f32, qt, 4, 6, j, acc), quarters##SFX(acc, qd), store_pair(m, 4, 6, j, qd);   \
                pair_acc##SFX(kb, f32, qt, 0, 2, j, acc), quarters##SFX(acc, qd), store_pair(m, 0, 2, j, qd);   \
            }                                                                                                   \
        }                                                                                                       \
        if (!U_NOM6) /* timing only: without M6 */                                                              \
            for (int jg = 0; jg < 4; jg++)                                                                      \
                t_acc##SFX(kb, f32, qt, 5, jg, acc), quarters##SFX(acc, qd), store_t(m, 5, jg, qd);             \
        combine(m, out);                                                                                        \
    }
#define T_ONE_z(c) t_acc_z(k, 0, qt, c, jg, acc), quarters_z(acc, qd), store_t(m, c, jg, qd);
#define T_ONE_y(c) t_acc_y(k, 0, qt, c, jg, acc), quarters_y(acc, qd), store_t(m, c, jg, qd);
#ifndef T_ONECV
#define T_ONECV 0
#endif
#ifndef U_ALL13
#define U_ALL13 0
#endif
#ifndef U_NOM6
#define U_NOM6 0
#endif
TILES(_z, __m512, 16, _mm512_load_ps, CV, _mm512_add_ps, _mm512_sub_ps, _mm512_fmadd_ps, _mm512_setzero_ps)
TILES(_y, __m256, 8, _mm256_load_ps, CVY, _mm256_add_ps, _mm256_sub_ps, _mm256_fmadd_ps, _mm256_setzero_ps)

__attribute__((noinline)) static void qk_strassen_t(const char *k, const float *qt, float *out, float *m) {
    strassen_turns_z(k, qt, out, m);
}
__attribute__((noinline)) static void qk_strassen_u(const char *k, const float *qt, float *out, float *m) {
    strassen_groups_z(k, 0, qt, out, m);
}
/* W: U with the block's K converted to f32 once (kf, 32 rows x 512, 64 KiB) and every tile loading it */
__attribute__((noinline)) static void qk_strassen_w(const char *k, const float *qt, float *out, float *m, float *kf) {
    for (int j = 0; j < 32; j++)
        for (int d = 0; d < 512; d += 16) _mm512_store_ps(kf + j * 512 + d, CV(k + (size_t)j * S + d * 2));
    strassen_groups_z(kf, 1, qt, out, m);
}
__attribute__((noinline)) static void qk_strassen_y(const char *k, const float *qt, float *out, float *m) {
    strassen_turns_y(k, qt, out, m);
}
__attribute__((noinline)) static void qk_strassen_z(const char *k, const float *qt, float *out, float *m) {
    strassen_groups_y(k, 0, qt, out, m);
}

/* V: U's tiles, but each tile's 16 sums go unreduced into the C blocks' vectors in memory (cv[h][p], 8 heads x 32
 * positions of 16 lanes, 16 KiB), stored by the first product that reaches a block and added to by the rest, and the
 * 256 vectors reduced at the end as kern.h's tile reduces its registers: 16 reductions a block, as A, not U's 28.
 * out[t * 16 + h * 2 + p] as A's. */
#define VST(h, p, x) _mm512_store_ps(cv + ((h) * 32 + (p)) * 16, (x))
#define VADD(h, p, x) VST(h, p, _mm512_add_ps(_mm512_load_ps(cv + ((h) * 32 + (p)) * 16), (x)))
__attribute__((noinline)) static void qk_strassen_v(const char *k, const float *qt, float *out, float *cv) {
    __m512 acc[16];
    for (int j = 0; j < 16; j += 2)
        for (int g = 0; g < 3; g++) {
            /* each call with constant products, so that kcomb's switch folds */
            if (g == 0) pair_acc_z(k, 0, qt, 1, 3, j, acc);
            else if (g == 1) pair_acc_z(k, 0, qt, 4, 6, j, acc);
            else pair_acc_z(k, 0, qt, 0, 2, j, acc);
            for (int i = 0; i < 4; i++)
                for (int p = 0; p < 2; p++) {
                    const __m512 x = acc[i * 2 + p], y = acc[8 + i * 2 + p];
                    const int q = j + p;
                    if (g == 0) { /* M2, M4: C21 = M2 + M4, C22 = -M2, C11 = M4 */
                        VST(4 + i, q, _mm512_add_ps(x, y));
                        VST(4 + i, 16 + q, _mm512_sub_ps(_mm512_setzero_ps(), x));
                        VST(i, q, y);
                    } else if (g == 1) { /* M5, M7: C11 += M7 - M5, C12 = M5 */
                        VADD(i, q, _mm512_sub_ps(y, x));
                        VST(i, 16 + q, x);
                    } else { /* M1, M3: C11 += M1, C22 += M1 + M3, C12 += M3 */
                        VADD(i, q, x);
                        VADD(4 + i, 16 + q, _mm512_add_ps(x, y));
                        VADD(i, 16 + q, y);
                    }
                }
        }
    for (int jg = 0; jg < 4; jg++) { /* M6: C22 += M6 */
        t_acc_z(k, 0, qt, 5, jg, acc);
        for (int i = 0; i < 4; i++)
            for (int jj = 0; jj < 4; jj++) VADD(4 + i, 16 + 4 * jg + jj, acc[i * 4 + jj]);
    }
    for (int t = 0; t < 16; t++) {
        __m512 a[16];
        for (int h = 0; h < 8; h++)
            for (int p = 0; p < 2; p++) a[h * 2 + p] = _mm512_load_ps(cv + (h * 32 + 2 * t + p) * 16);
        _mm512_storeu_ps(out + t * 16, vreduce_vec(a));
    }
}



/* B: kern.h's tile (A) in 256-bit vectors: 16 accumulators of 8 lanes, 256-bit conversions; out as A's */
#define STORE_Y(acc, o)                                                                                         \
    do {                                                                                                        \
        __m256 z_[2];                                                                                           \
        reduce16_y(acc, z_);                                                                                    \
        _mm256_storeu_ps((o), z_[0]), _mm256_storeu_ps((o) + 8, z_[1]);                                         \
    } while (0)
__attribute__((noinline)) static void qk_kern_y(const char *k, const float *q, float *out) {
    KERN_TILE(__m256, 8, _mm256_loadu_ps, CVY, _mm256_fmadd_ps, _mm256_setzero_ps, STORE_Y)
}

/* every form behind one signature: scr holds m (2 KiB) and, 2 KiB on, W's f32 K or V's C vectors */
typedef void form_fn(const char *k, const float *q, const float *qc, const float *qt, float *out, float *scr);
static void f_f(const char *k, const float *q, const float *qc, const float *qt, float *out, float *scr) {
    (void)qc, (void)qt, (void)scr, qk_fma(k, q, out);
}
static void f_a(const char *k, const float *q, const float *qc, const float *qt, float *out, float *scr) {
    (void)qc, (void)qt, (void)scr, qk_kern(k, q, out);
}
static void f_b(const char *k, const float *q, const float *qc, const float *qt, float *out, float *scr) {
    (void)qc, (void)qt, (void)scr, qk_kern_y(k, q, out);
}
static void f_s(const char *k, const float *q, const float *qc, const float *qt, float *out, float *scr) {
    (void)q, (void)qt, (void)scr, qk_strassen(k, qc, out);
}
#define FORM(x)                                                                                                 \
    static void f_##x(const char *k, const float *q, const float *qc, const float *qt, float *out, float *scr) { \
        (void)q, (void)qc, qk_strassen_##x(k, qt, out, scr);                                                     \
    }
FORM(t)
FORM(u)
FORM(y)
FORM(z)
static void f_v(const char *k, const float *q, const float *qc, const float *qt, float *out, float *scr) {
    (void)q, (void)qc, qk_strassen_v(k, qt, out, scr + 512);
}
static void f_w(const char *k, const float *q, const float *qc, const float *qt, float *out, float *scr) {
    (void)q, (void)qc, qk_strassen_w(k, qt, out, scr, scr + 512);
}

int main(int argc, char **argv) {
    enum { NF = 10, ROUNDS = 15, CALLS = 4000 };
    static const struct {
        form_fn *fn;
        int lay; /* out's layout: 0 A's (t * 16 + h * 2 + p), 1 S's, 2 [h][p]; -1 no scores */
        const char *name;
    } F[NF] = {{f_f, -1, "F (8192 FMAs)"},
               {f_a, 0, "A (kern.h's tile)"},
               {f_s, 1, "S (Strassen, 7168 FMAs)"},
               {f_t, 2, "T (products in turn)"},
               {f_u, 2, "U (products in groups)"},
               {f_v, 0, "V (U, C unreduced)"},
               {f_w, 2, "W (U, K converted once)"},
               {f_y, 2, "Y (T in 256-bit vectors)"},
               {f_z, 2, "Z (U in 256-bit vectors)"},
               {f_b, 0, "B (A in 256-bit vectors)"}};
    const size_t span = argc > 1 ? (size_t)atol(argv[1]) : 1 << 20;
    const int nblk = span / (S * NBR) > 0 ? (int)(span / (S * NBR)) : 1;
    char *k = aligned_alloc(64, (size_t)S * NBR * nblk);
    float *q = aligned_alloc(64, 8 * 512 * 4), *qc = aligned_alloc(64, 16 * 7 * 4 * 16 * 4);
    float *qt = aligned_alloc(64, 16 * 7 * 4 * 16 * 4), *out = aligned_alloc(64, NF * 256 * 4);
    float *scr = aligned_alloc(64, (512 + 32 * 512) * 4);
    if (!k || !q || !qc || !qt || !out || !scr) return 1;
    fill_inputs(k, nblk, q);
    q_combos(q, qc);
    q_combos_t(qc, qt);
    /* errors against float64, block 0 */
    double err[NF] = {0}, mx = 0;
    for (int f = 0; f < NF; f++) F[f].fn(k, q, qc, qt, out + f * 256, scr);
    for (int h = 0; h < 8; h++)
        for (int p = 0; p < 32; p++) {
            const double r = ref_score(k, q, h, p);
            mx = fmax(mx, fabs(r));
            const int at[3] = {(p / 2) * 16 + h * 2 + p % 2, (p % 16) * 16 + ((h >= 4) * 2 + (p >= 16)) * 4 + h % 4,
                               h * 32 + p};
            for (int f = 0; f < NF; f++)
                if (F[f].lay >= 0) err[f] = fmax(err[f], fabs(out[f * 256 + at[F[f].lay]] - r));
        }
    printf("largest error against float64 (scores up to %.3g):", mx);
    for (int f = 1; f < NF; f++) printf(" %c %.3g", F[f].name[0], err[f]);
    printf("\n");
    double t[NF][ROUNDS];
    for (int r = 0; r < ROUNDS; r++)
        for (int f = 0; f < NF; f++) {
            const double t0 = now();
            for (int c = 0; c < CALLS; c++) F[f].fn(k + (size_t)(c % nblk) * S * NBR, q, qc, qt, out + f * 256, scr);
            t[f][r] = (now() - t0) / CALLS * 1e6;
        }
    for (int f = 0; f < NF; f++) {
        qsort(t[f], ROUNDS, sizeof(double), cmpd);
        printf("%-26s %.3f us a block (min %.3f, max %.3f)\n", F[f].name, t[f][ROUNDS / 2], t[f][0], t[f][ROUNDS - 1]);
    }
    for (int f = 2; f < NF; f++)
        printf("%c/A %.3f%s", F[f].name[0], t[f][ROUNDS / 2] / t[1][ROUNDS / 2], f + 1 < NF ? " " : "\n");
    return out[0] == 12345.f; /* keep the results */
}

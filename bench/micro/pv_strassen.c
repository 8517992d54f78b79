/* pv_strassen.c — the Gemma 4 full layer's output pass (8 heads a KV head, head_dim 512, f16 V, 32-row blocks,
 * 2048-byte rows) by one level of Strassen's product against kern.h's tile (bench/NOTES.md, CPU log row 71).
 *
 * The pass is O[8 x 512] += P[8 x 32] V[32 x 512]: a small matrix product, which Strassen's 2 x 2 scheme does in 7 block
 * products instead of 8, i.e. 7/8 of the FMAs, for 5 adds of V blocks (the add pipes, free beside the FMAs on Zen 4:
 * row 60) and 5 adds of P blocks (once a block, 8 x 32 weights). The blocks: heads 0-3 / 4-7, rows 0-15 / 16-31, and the
 * dimensions in even / odd 16-wide vectors (so the four V loads of a step use two whole lines). Tile: the 4 head rows x
 * 7 products = 28 accumulators, one 16-wide vector of each dimension half, over the block's 16 row pairs; the weights
 * come in by each FMA's broadcast ({1to16}) as kern.h's do. Forms:
 *   F  FMAs alone in registers, as many as kern.h's tile (8192 a block)
 *   A  kern.h's pv_tile: 8 heads x 2 vectors, the block's sums from zero, added to o at the end
 *   S  the Strassen tile (7168 FMAs a block)
 * PV_ABLATE (for where S's time goes; its results are then wrong on purpose): 1 leaves out each tile's end (the 28
 * sums combined into 16 outputs and added to o), 2 the weights' combinations (ac is left as it was), 3 both, 4 stores
 * the combinations to o without reading o first (CPU log row 76).
 * PV_END, other forms of S's tile end (row 76): 1 o loaded into the product sums at the tile's start (M3 = C12,
 * M4 = C21, M6 = C22 - C12, M7 = C11 - C21, the others 0), so that the end's combinations are o's new value and are
 * stored without a read (correct); 2 the 28 sums added into rows of their own (product space, 28 KiB), to be combined
 * once later, which this program leaves out (wrong on purpose). PV_OPITCH: S's o row pitch in floats (512; more pads
 * the rows, against 4 KiB aliasing with V's 2 KiB rows).
 * Prints the largest error of A and S against float64 (unnormalised o: the sum of 32 weights in [0, 1) times V in
 * +-[0.5, 1)) and us a block, medians of 15 rounds. Argument: bytes of V cycled through (1 MiB: L2).
 *
 *   gcc -O3 -march=native bench/micro/pv_strassen.c -lm -o /tmp/pv_strassen && /tmp/pv_strassen 1048576   (the library's -O3)
 *   clang -O2 -march=native bench/micro/pv_strassen.c -lm -o /tmp/pv_strassen_cl && /tmp/pv_strassen_cl 1048576
 *   (gcc -O2 the same way; -DPV_ABLATE=1, 2, 3 or 4, -DPV_END=1 or 2, -DPV_OPITCH=528 for the variants)
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fma16.h" /* now() */

#define S 2048 /* bytes a row: 2 KV heads x 512 f16 */
#define NBR 32 /* rows a block */
#ifndef PV_ABLATE
#define PV_ABLATE 0
#endif
#ifndef PV_END
#define PV_END 0
#endif
#ifndef PV_OPITCH
#define PV_OPITCH 512
#endif
#define OP PV_OPITCH

/* acc += broadcast(*p) * v, the weight from memory as kern.h's vfma_bcast */
static inline __m512 fb(const float *p, __m512 v, __m512 acc) {
    __asm__("vfmadd231ps %1%{1to16%}, %2, %0" : "+v"(acc) : "m"(*p), "v"(v));
    return acc;
}
#define CV(p) _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(p)))

__attribute__((noinline)) static void pv_kern(const char *v, const float *sT, float *o) {
    for (int t0 = 0; t0 < 16; t0++) {
        __m512 a[8][2];
        _Pragma("GCC unroll 8") for (int h = 0; h < 8; h++) a[h][0] = a[h][1] = _mm512_setzero_ps();
        for (int j = 0; j < NBR; j++) {
            const char *r = v + (size_t)j * S + t0 * 64;
            const __m512 v0 = CV(r), v1 = CV(r + 32);
            _Pragma("GCC unroll 8") for (int h = 0; h < 8; h++) {
                a[h][0] = fb(sT + h * 32 + j, v0, a[h][0]);
                a[h][1] = fb(sT + h * 32 + j, v1, a[h][1]);
            }
        }
        _Pragma("GCC unroll 8") for (int h = 0; h < 8; h++) _Pragma("GCC unroll 2") for (int t = 0; t < 2; t++) {
            float *op = o + h * 512 + t0 * 32 + t * 16;
            _mm512_storeu_ps(op, _mm512_add_ps(_mm512_loadu_ps(op), a[h][t]));
        }
    }
}

/* The weights' 7 block combinations, ac[(k * 4 + i) * 16 + j] for product k, head row i (heads i and i + 4) and row
 * pair j (rows j, j + 16), a vector of the 16 pairs at a time: A11 + A22, A21 + A22, A11, A22, A11 + A12, A21 - A11,
 * A12 - A22 */
static void combos(const float *sT, float *ac) {
    for (int i = 0; i < 4; i++) {
        const __m512 a11 = _mm512_loadu_ps(sT + i * 32), a12 = _mm512_loadu_ps(sT + i * 32 + 16),
                     a21 = _mm512_loadu_ps(sT + (i + 4) * 32), a22 = _mm512_loadu_ps(sT + (i + 4) * 32 + 16);
        const __m512 c[7] = {_mm512_add_ps(a11, a22), _mm512_add_ps(a21, a22), a11, a22,
                             _mm512_add_ps(a11, a12), _mm512_sub_ps(a21, a11), _mm512_sub_ps(a12, a22)};
        for (int k = 0; k < 7; k++) _mm512_store_ps(ac + (k * 4 + i) * 16, c[k]);
    }
}

#define FB4(k, b) m##k##0 = fb(a + k * 64 + 0, b, m##k##0), m##k##1 = fb(a + k * 64 + 16, b, m##k##1), \
                  m##k##2 = fb(a + k * 64 + 32, b, m##k##2), m##k##3 = fb(a + k * 64 + 48, b, m##k##3)
__attribute__((noinline)) static void pv_strassen(const char *v, const float *sT, float *o) {
    static float ac[7 * 4 * 16] __attribute__((aligned(64)));
    if (!(PV_ABLATE & 2)) combos(sT, ac);
    for (int dv = 0; dv < 16; dv++) { /* dimensions dv * 32 + [0, 16) (the first half) and + [16, 32) (the second) */
        const __m512 z = _mm512_setzero_ps();
        __m512 m00 = z, m01 = z, m02 = z, m03 = z, m10 = z, m11 = z, m12 = z, m13 = z, m20 = z, m21 = z, m22 = z,
               m23 = z, m30 = z, m31 = z, m32 = z, m33 = z, m40 = z, m41 = z, m42 = z, m43 = z, m50 = z, m51 = z,
               m52 = z, m53 = z, m60 = z, m61 = z, m62 = z, m63 = z;
        if (PV_END == 1) { /* o into the product sums: with M1 = M2 = M5 = 0 the end's combinations give o back */
#define OL(i, h, half) _mm512_loadu_ps(o + ((i) + (h)) * OP + dv * 32 + (half) * 16)
            m20 = OL(0, 0, 1), m21 = OL(1, 0, 1), m22 = OL(2, 0, 1), m23 = OL(3, 0, 1);
            m30 = OL(0, 4, 0), m31 = OL(1, 4, 0), m32 = OL(2, 4, 0), m33 = OL(3, 4, 0);
            m50 = _mm512_sub_ps(OL(0, 4, 1), m20), m51 = _mm512_sub_ps(OL(1, 4, 1), m21);
            m52 = _mm512_sub_ps(OL(2, 4, 1), m22), m53 = _mm512_sub_ps(OL(3, 4, 1), m23);
            m60 = _mm512_sub_ps(OL(0, 0, 0), m30), m61 = _mm512_sub_ps(OL(1, 0, 0), m31);
            m62 = _mm512_sub_ps(OL(2, 0, 0), m32), m63 = _mm512_sub_ps(OL(3, 0, 0), m33);
#undef OL
        }
        const float *a = ac;
        const char *r1 = v + dv * 64;
        for (int j = 0; j < 16; j++, a++, r1 += S) {
            const char *r2 = r1 + 16 * S;
            const __m512 v11 = CV(r1), v22 = CV(r2 + 32);
            FB4(0, _mm512_add_ps(v11, v22));
            FB4(1, v11);
            FB4(4, v22);
            const __m512 v12 = CV(r1 + 32);
            FB4(2, _mm512_sub_ps(v12, v22));
            FB4(5, _mm512_add_ps(v11, v12));
            const __m512 v21 = CV(r2);
            FB4(3, _mm512_sub_ps(v21, v11));
            FB4(6, _mm512_add_ps(v21, v22));
        }
        const __m512 M[7][4] = {{m00, m01, m02, m03}, {m10, m11, m12, m13}, {m20, m21, m22, m23},
                                {m30, m31, m32, m33}, {m40, m41, m42, m43}, {m50, m51, m52, m53},
                                {m60, m61, m62, m63}};
        if (PV_ABLATE & 1) { /* no tile end: one lane of each sum kept, so that the loop is not dropped */
            for (int k = 0; k < 7; k++)
                for (int i = 0; i < 4; i++) o[k * 64 + i * 16] = _mm512_cvtss_f32(M[k][i]);
            continue;
        }
        if (PV_END == 2) { /* the sums into their own rows, product k's head row i at (k * 4 + i) * 256 */
            static float mo[7 * 4 * 256] __attribute__((aligned(64)));
            for (int k = 0; k < 7; k++)
                for (int i = 0; i < 4; i++) {
                    float *mp = mo + (k * 4 + i) * 256 + dv * 16;
                    _mm512_store_ps(mp, _mm512_add_ps(_mm512_load_ps(mp), M[k][i]));
                }
            if (dv == 15) o[0] += mo[7]; /* keeps them live */
            continue;
        }
        for (int i = 0; i < 4; i++) {
            const __m512 c11 = _mm512_add_ps(_mm512_sub_ps(_mm512_add_ps(M[0][i], M[3][i]), M[4][i]), M[6][i]);
            const __m512 c12 = _mm512_add_ps(M[2][i], M[4][i]);
            const __m512 c21 = _mm512_add_ps(M[1][i], M[3][i]);
            const __m512 c22 = _mm512_add_ps(_mm512_add_ps(_mm512_sub_ps(M[0][i], M[1][i]), M[2][i]), M[5][i]);
            float *o1 = o + i * OP + dv * 32, *o2 = o + (i + 4) * OP + dv * 32;
            if (PV_END == 1 || PV_ABLATE & 4) { /* stored without a read of o */
                _mm512_storeu_ps(o1, c11), _mm512_storeu_ps(o1 + 16, c12);
                _mm512_storeu_ps(o2, c21), _mm512_storeu_ps(o2 + 16, c22);
                continue;
            }
            _mm512_storeu_ps(o1, _mm512_add_ps(_mm512_loadu_ps(o1), c11));
            _mm512_storeu_ps(o1 + 16, _mm512_add_ps(_mm512_loadu_ps(o1 + 16), c12));
            _mm512_storeu_ps(o2, _mm512_add_ps(_mm512_loadu_ps(o2), c21));
            _mm512_storeu_ps(o2 + 16, _mm512_add_ps(_mm512_loadu_ps(o2 + 16), c22));
        }
    }
}

/* as many FMAs as pv_kern's (8192), 16 chains in registers */
__attribute__((noinline)) static void pv_fma(const char *v, const float *sT, float *o) {
    (void)v;
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_loadu_ps(o + i * 16);
    const __m512 b = _mm512_set1_ps(sT[0]), c = _mm512_set1_ps(sT[1]);
    for (int n = 0; n < 16 * NBR; n++) _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) a[i] =
        _mm512_fmadd_ps(a[i], b, c);
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(o + i * 16, a[i]);
}

static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const size_t span = argc > 1 ? (size_t)atol(argv[1]) : 1 << 20;
    const int nblk = span / (S * NBR) > 0 ? (int)(span / (S * NBR)) : 1;
    char *v = aligned_alloc(64, (size_t)S * NBR * nblk);
    float *sT = aligned_alloc(64, 8 * 32 * 4), *o = aligned_alloc(64, 8 * 512 * 4), *o2 = aligned_alloc(64, 8 * OP * 4);
    if (!v || !sT || !o || !o2) return 1;
    srand(1);
    for (size_t i = 0; i < (size_t)S * NBR * nblk; i += 2) /* f16 in +-[0.5, 1) */
        *(uint16_t *)(v + i) = (uint16_t)(0x3800 | (rand() & 0x3ff) | ((rand() & 1) << 15));
    for (int i = 0; i < 256; i++) sT[i] = (float)(rand() & 0xffffff) / 16777216.0f;
    double ea = 0, es = 0, mx = 0;
    memset(o, 0, 8 * 512 * 4), memset(o2, 0, 8 * OP * 4);
    pv_kern(v, sT, o), pv_strassen(v, sT, o2);
    for (int h = 0; h < 8; h++)
        for (int d = 0; d < 512; d++) {
            double r = 0;
            for (int j = 0; j < NBR; j++) r += (double)sT[h * 32 + j] * _cvtsh_ss(*(const uint16_t *)(v + (size_t)j * S + d * 2));
            ea = fmax(ea, fabs(o[h * 512 + d] - r)), es = fmax(es, fabs(o2[h * OP + d] - r)), mx = fmax(mx, fabs(r));
        }
    printf("largest error against float64: kern.h %.3g, Strassen %.3g (largest |o| %.3g)\n", ea, es, mx);
    void (*const fn[3])(const char *, const float *, float *) = {pv_fma, pv_kern, pv_strassen};
    const char *name[3] = {"F FMAs alone (8192)", "A kern.h's tile (8192)", "S Strassen (7168)"};
    enum { ROUNDS = 15, CALLS = 20000 };
    double tm[3][ROUNDS];
    for (int r = 0; r < ROUNDS; r++)
        for (int m = 0; m < 3; m++) {
            const double t = now();
            for (long i = 0; i < CALLS; i++) fn[m](v + (i % nblk) * S * NBR, sT, m == 2 ? o2 : o);
            tm[m][r] = now() - t;
        }
    for (int m = 0; m < 3; m++) {
        qsort(tm[m], ROUNDS, sizeof(double), cmpd);
        printf("%-24s %.3f us a block (FMAs alone / this %.3f)\n", name[m], tm[m][ROUNDS / 2] / CALLS * 1e6,
               tm[0][ROUNDS / 2] / tm[m][ROUNDS / 2]);
    }
    return o[5] == 12345.0f && o2[5] == 12345.0f; /* keeps the results live */
}

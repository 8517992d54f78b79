/* strassen.h — the AVX-512 output pass by one level of Strassen's product, for kern.h's STRASSEN_SHAPE (head_dim 512,
 * f16 V, 8 query heads a KV head). Included by kern.h where FDEC_ISA == 2, in the vocabulary of simd.h. */
/* The output pass of 8 heads over a whole block of f16 V by one level of Strassen's product (AVX-512 only): the block
 * is O[8 x D] += P[8 x NB] V[NB x D], and Strassen's 2 x 2 scheme does it in 7 block products instead of 8, i.e. 7/8
 * of the FMAs, for 5 adds of V a step (on Zen 4's add pipes, free beside the FMAs) and
 * 5 vector adds of the weights a block. Blocks: heads 0-3 / 4-7 (A rows), rows 0 .. NB/2 / NB/2 .. NB, dimensions in
 * even / odd 16-wide vectors (so a step's four V loads fill two whole lines). A tile is the 4 head rows x 7 products =
 * 28 accumulators for one vector of each dimension half over the block's NB/2 row pairs; its end combines them into
 * the 16 output vectors and adds them to o. It needs the 28 accumulators in registers (gcc -O3, the Makefile's, or
 * clang; gcc -O2 spills them). Used for f16 V only (two f16 values add without overflow in f32), and, since the
 * weights' combinations mix heads i and i + 4, only for blocks whose weights are all finite (l finite after the
 * softmax), so that a NaN stays in its own head. */
#define SP_FB4(k, b)                                                                                            \
    (m##k##0 = vfma_bcast(a + (k) * 4 * NP + 0 * NP, (b), m##k##0),                                              \
     m##k##1 = vfma_bcast(a + (k) * 4 * NP + 1 * NP, (b), m##k##1),                                              \
     m##k##2 = vfma_bcast(a + (k) * 4 * NP + 2 * NP, (b), m##k##2),                                              \
     m##k##3 = vfma_bcast(a + (k) * 4 * NP + 3 * NP, (b), m##k##3))
ALWAYS_INLINE void pv_strassen(const char *vb, size_t vstride, const float *sT, float *o, uint32_t Dp,
                               const char *vn, uint32_t nn, const uint32_t D, const char *kx) {
    enum { NP = NB / 2 };
    _Static_assert(NP == VW, "a vector of the weights' combinations holds one per row pair");
    /* ac[(k * 4 + i) * NP + j]: product k's weight for head row i (heads i, i + 4) and row pair j (rows j, j + NP):
     * A11 + A22, A21 + A22, A11, A22, A11 + A12, A21 - A11, A12 - A22 */
    float ac[7 * 4 * NP] __attribute__((aligned(64)));
    for (uint32_t i = 0; i < 4; i++) {
        const V a11 = vloadf(sT + i * NB), a12 = vloadf(sT + i * NB + NP), a21 = vloadf(sT + (i + 4) * NB),
                a22 = vloadf(sT + (i + 4) * NB + NP);
        const V c[7] = {vadd(a11, a22), vadd(a21, a22), a11, a22, vadd(a11, a12), vsub(a21, a11), vsub(a12, a22)};
        for (uint32_t k = 0; k < 7; k++) vstoref(ac + (k * 4 + i) * NP, c[k]);
    }
    for (uint32_t d0 = 0; d0 < D; d0 += 2 * VW) { /* dimensions d0 .. d0 + 16 (D1) and d0 + 16 .. d0 + 32 (D2) */
        const V z = vzero();
        V m00 = z, m01 = z, m02 = z, m03 = z, m10 = z, m11 = z, m12 = z, m13 = z, m20 = z, m21 = z, m22 = z, m23 = z,
          m30 = z, m31 = z, m32 = z, m33 = z, m40 = z, m41 = z, m42 = z, m43 = z, m50 = z, m51 = z, m52 = z, m53 = z,
          m60 = z, m61 = z, m62 = z, m63 = z;
        const float *a = ac;
        const char *r1 = vb + (size_t)d0 * 2, *p1 = vn + (size_t)d0 * 2;
        const uintptr_t dk = (uintptr_t)kx - (uintptr_t)vn; /* V row -> K row of the next block */
        for (uint32_t j = 0; j < NP; j++, a++, r1 += vstride, p1 += vstride) {
            /* this strip's line of the next block's rows j and j + NP (as pv_tile asks for its strip's), and with kx
             * the same lines of its K rows a second time (CROSS_SHAPE) */
            if (j < nn) PF_LINE(p1);
            if (j + NP < nn) PF_LINE(p1 + NP * vstride);
            if (kx && j < nn) PF_LINE((const char *)((uintptr_t)p1 + dk));
            if (kx && j + NP < nn) PF_LINE((const char *)((uintptr_t)p1 + NP * vstride + dk));
            const char *r2 = r1 + NP * vstride;
            const V v11 = vload_kv(r1, FDEC_F16), v22 = vload_kv(r2 + 2 * VW, FDEC_F16);
            SP_FB4(0, vadd(v11, v22));
            SP_FB4(1, v11);
            SP_FB4(4, v22);
            const V v12 = vload_kv(r1 + 2 * VW, FDEC_F16);
            SP_FB4(2, vsub(v12, v22));
            SP_FB4(5, vadd(v11, v12));
            const V v21 = vload_kv(r2, FDEC_F16);
            SP_FB4(3, vsub(v21, v11));
            SP_FB4(6, vadd(v21, v22));
        }
        const V M[7][4] = {{m00, m01, m02, m03}, {m10, m11, m12, m13}, {m20, m21, m22, m23}, {m30, m31, m32, m33},
                           {m40, m41, m42, m43}, {m50, m51, m52, m53}, {m60, m61, m62, m63}};
        for (uint32_t i = 0; i < 4; i++) {
            /* C11 = M1 + M4 - M5 + M7, C12 = M3 + M5, C21 = M2 + M4, C22 = M1 - M2 + M3 + M6 */
            const V c11 = vadd(vsub(vadd(M[0][i], M[3][i]), M[4][i]), M[6][i]), c12 = vadd(M[2][i], M[4][i]);
            const V c21 = vadd(M[1][i], M[3][i]), c22 = vadd(vadd(vsub(M[0][i], M[1][i]), M[2][i]), M[5][i]);
            float *o1 = o + (size_t)i * Dp + d0, *o2 = o + (size_t)(i + 4) * Dp + d0;
            vstoref(o1, vadd(vloadf(o1), c11));
            vstoref(o1 + VW, vadd(vloadf(o1 + VW), c12));
            vstoref(o2, vadd(vloadf(o2), c21));
            vstoref(o2 + VW, vadd(vloadf(o2 + VW), c22));
        }
    }
}
#undef SP_FB4

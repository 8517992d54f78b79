/* kern.h — the CPU decode-attention kernel, written once in the vocabulary of simd.h and compiled once per
 * instruction set (kern_scalar.c, kern_avx2.c, kern_avx512.c, kern_neon.c).
 *
 * What it computes: the partial state (state.h) of every query head over one chunk [t0, t1) of positions.
 *
 * How. Positions are taken in blocks of NB rows. For each block and each KV head g (so the dense
 * [pos][head][dim] cache is streamed block by block, all heads of a row together) it
 *   1. scores the block against the R query heads of g: each K element is loaded and converted once and used
 *      for all R heads (tiles of HT heads x P positions held in registers);
 *   2. updates the running max / sum per head and turns scores into weights p = exp(s - m) (vexp);
 *   3. accumulates o[h] += p[h][j] * V[j] for the block, each V element loaded once for the HT heads of a
 *      tile, the HT x DT output accumulators held in registers across the whole block.
 * o and l are summed in three levels: a block's positions, the blocks of a group of FDEC_CPU_GROUP_BLOCKS, the groups
 * (cpu.h).
 * Where a KV head's part of a row is 512 bytes or more and feeds at most 4 query heads, step 1 runs first for every
 * KV head, JR rows at a time (qk_rowmajor), so that a block's K rows are read in address order; steps 2 and 3 then
 * run head by head (FDEC_CPU_ROWMAJOR).
 * head_dim and the K/V type are compile-time constants in the specialised copies (the switch at the bottom);
 * everything else works for any value.
 */
#include "cpu.h"
#include "simd.h"

#include <string.h>

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define FN(name) CAT(name, ISA_NAME)

/* The padding row count of the score buffer. */
#define NB FDEC_CPU_NB
/* How many blocks ahead the rows are prefetched: a->pf_blocks, set per call by cpu.c (pf_distance: the machine's,
 * fdec_cpu_pf_blocks, or 1 from head_dim FDEC_CPU_PF_ONE_D). */

/* A chunk's first two blocks come before the loop's prefetch (which asks for block b + pf_blocks during block b)
 * can ask for them. 1: the first block's KV head g + 1 and the second block's head g are asked for while the first
 * block's head g computes; 0: the first block all at once, the second never (the code before session 6). 1 is 1-3%
 * faster at 1k with one thread, ~1% with two (bench/NOTES.md, CPU row 25). */
#ifndef FDEC_CPU_RAMP
#define FDEC_CPU_RAMP 1
#endif

/* Blocks past the prefetched block whose 4 KiB pages each get one line asked for early (0: none). */
#ifndef FDEC_CPU_PAGE_AHEAD
#define FDEC_CPU_PAGE_AHEAD 2
#endif

/* One software prefetch of the line at p into L2 (prefetcht1). FDEC_CPU_PF_HINT and FDEC_CPU_PF_OFF change it for
 * experiments (bench/NOTES.md, CPU log row 36). */
#ifndef FDEC_CPU_PF_HINT
#define FDEC_CPU_PF_HINT 2
#endif
#if FDEC_CPU_PF_OFF
#define PF_LINE(p) ((void)(p))
#else
#define PF_LINE(p) __builtin_prefetch((p), 0, FDEC_CPU_PF_HINT)
#endif

/* Asks for one row of `bytes` bytes to be brought into L2. A dense cache walked one KV head at a time strides
 * over the other heads' rows, which the hardware prefetchers do not follow; asking for the next block's rows
 * a few at a time while this block computes keeps the memory busy without stalling the core on a burst of
 * misses (bench/NOTES.md). */
ALWAYS_INLINE void prefetch_row(const char *p, size_t bytes) {
    for (size_t b = 0; b < bytes; b += 64) PF_LINE(p + b);
}

/* All of one KV head's rows of a block at once: nb rows of K and of V from byte offset off, rstride apart. */
ALWAYS_INLINE void prefetch_head(const char *k, const char *v, size_t off, uint64_t nb, size_t rstride, size_t bytes) {
    for (uint64_t j = 0; j < nb; j++, off += rstride) {
        prefetch_row(k + off, bytes);
        prefetch_row(v + off, bytes);
    }
}

/* ---- 1. scores: sT[h][j] = dot(q[h], K[j]) for HT heads from h0, all j < nb ---- */
ALWAYS_INLINE void qk_tile(const char *kb, size_t kstride, uint32_t nb, const float *q, uint32_t Dp, float *sT,
                           const char *kn, uint32_t nn, const uint32_t D, const fdec_dtype T, const uint32_t HT,
                           const char *vx) {
    const uint32_t P = NACC / HT; /* HT divides NACC: P * HT == NACC accumulators, one transposed reduction */
    const size_t es = fdec_dtype_size(T);
    const int spread = D % VW == 0 && D * es >= 512;
    for (uint32_t j0 = 0; j0 < nb; j0 += P) {
        /* the next block's rows j0 .. j0 + P: with rows of 8 lines or more, one line of each as the d loop
         * crosses each 64-byte line of a row (spread over the FMAs, not in a burst: Gemma 4 full -28% from DRAM,
         * bench/NOTES.md, CPU row 17); shorter rows at once (spread, LFM2's 2-line rows lost 7% in cache) */
        const uint32_t npf = j0 + P < nn ? P : nn > j0 ? nn - j0 : 0;
        if (!spread)
            for (uint32_t p = 0; p < npf; p++) prefetch_row(kn + (size_t)(j0 + p) * kstride, D * es);
        V acc[NACC];
        const char *kr[NACC];
        for (uint32_t p = 0; p < P; p++) {
            uint32_t j = j0 + p < nb ? j0 + p : nb - 1; /* past the end: recompute the last row, discarded */
            kr[p] = kb + (size_t)j * kstride;
        }
        for (uint32_t i = 0; i < NACC; i++) acc[i] = vzero();
        const uintptr_t dv = (uintptr_t)vx - (uintptr_t)kb; /* K row -> V row: one register, not another pointer */
        uint32_t d = 0;
        for (; d + VW <= D; d += VW) {
            if (spread && (d * es) % 64 == 0) {
                for (uint32_t p = 0; p < npf; p++) PF_LINE(kn + (size_t)(j0 + p) * kstride + d * es);
                if (vx) /* the second ask for this block's V rows (see FDEC_CPU_CROSS) */
                    for (uint32_t p = 0; p < P; p++)
                        if (j0 + p < nb) PF_LINE((const char *)((uintptr_t)kr[p] + d * es + dv));
            }
            V qv[8];
            for (uint32_t h = 0; h < HT; h++) {
                qv[h] = vloadf(q + (size_t)h * Dp + d);
#ifndef FDEC_CPU_NO_PIN
                /* one load per head, not one per (head, position); only where the NACC accumulators, the HT q
                 * vectors and a K vector fit in the registers: AVX2's 16 at 8 heads a tile would spill an
                 * accumulator to the stack in every d step (Gemma 4 full on Zen 1: bench/NOTES.md, CPU log row 40) */
                if (NACC + HT + 1 <= NVREG) vpin(&qv[h]);
#endif
            }
            for (uint32_t p = 0; p < P; p++) {
                V kv = vload_kv(kr[p] + d * es, T);
                for (uint32_t h = 0; h < HT; h++) acc[h * P + p] = vfma(kv, qv[h], acc[h * P + p]);
            }
        }
        if (d < D) { /* q is zero-padded to Dp, so only K needs a short load */
            for (uint32_t p = 0; p < P; p++) {
                V kv = vload_kv_n(kr[p] + d * es, D - d, T);
                for (uint32_t h = 0; h < HT; h++)
                    acc[h * P + p] = vfma(kv, vloadf(q + (size_t)h * Dp + d), acc[h * P + p]);
            }
        }
        const uint32_t np = nb - j0 < P ? nb - j0 : P;
        if (np == P) vreduce_rows(acc, sT + j0, NB, P);
        else { /* the block's last, partial tile */
            float sums[NACC];
            vreduce_all(acc, sums);
            for (uint32_t h = 0; h < HT; h++)
                for (uint32_t p = 0; p < np; p++) sT[(size_t)h * NB + j0 + p] = sums[h * P + p];
        }
    }
}

/* ---- 2. online softmax over the block for one head: returns the weights in s[0..nb) ---- */
/* The block's scores stay in registers (NV vectors: NB / VW for a whole block, a compile-time count). Whether the
 * block raises the running max is one vector compare and a branch, which the CPU predicts (after a chunk's first
 * blocks a new max comes about ln(L / NB) times a head); only then is the horizontal max worked out. So e^(s - m)
 * starts from the running max in memory without waiting for this block's scores to be reduced: the step was a
 * ~110-cycle chain of dependent operations (store, reload, a horizontal max, the broadcast, e^x, a horizontal sum)
 * that took 18% of LFM2's time in L3 (bench/NOTES.md, CPU log row 41). The weights are the same as with the
 * horizontal max every block (the step before that row). */
ALWAYS_INLINE void softmax_regs(float *s, uint32_t nb, const uint32_t NV, float *m, float *l, float *o, uint32_t Dp) {
    V x[NB / VW > 0 ? NB / VW : 1];
    V mx = vset1(-INFINITY);
    for (uint32_t i = 0; i < NV; i++) {
        const V v = vloadf(s + i * VW);
        x[i] = vfma(vzero(), v, v); /* a score of +-inf (an inf in q or K) becomes NaN (0 * inf): the head is NaN */
    }
    if (nb < NV * VW) { /* a partial last vector: lanes past nb get -inf (weight 0), after the fix-up above */
        vstoref(s + (NV - 1) * VW, x[NV - 1]);
        for (uint32_t j = nb; j < NV * VW; j++) s[j] = -INFINITY;
        x[NV - 1] = vloadf(s + (NV - 1) * VW);
    }
    for (uint32_t i = 0; i < NV; i++) mx = vmax(mx, x[i]);
    float mn = *m;
    if (vany_gt(mx, vset1(mn))) { /* a new running max (a NaN score alone does not get here: it makes l NaN) */
        const float bm = vhmax(mx);
        mn = bm > mn ? bm : mn;
        if (isnan(bm)) mn = bm;
    }
    const V vmn = vset1(mn);
    V sum = vzero();
    for (uint32_t i = 0; i < NV; i++) {
        const V e = vexp(vsub(x[i], vmn));
        vstoref(s + i * VW, e);
        sum = vadd(sum, e);
    }
    /* the running max unchanged (most blocks after the first few): alpha = e^0 = 1 without a call to expf, one
     * per head and block (LFM2 and Llama in L3 -3%, CPU log row 21) */
    const float alpha = mn == *m ? 1.0f : fdec_state_weight(*m, mn);
    *l = *l * alpha + vhsum(sum);
    *m = mn;
    if (alpha != 1.0f) {
        const V va = vset1(alpha);
        for (uint32_t d = 0; d < Dp; d += VW) vstoref(o + d, vmul(vloadf(o + d), va));
    }
}
ALWAYS_INLINE void softmax_step(float *s, uint32_t nb, float *m, float *l, float *o, uint32_t Dp) {
    if (nb == NB) softmax_regs(s, nb, NB / VW, m, l, o, Dp);
    else softmax_regs(s, nb, (nb + VW - 1) / VW, m, l, o, Dp);
}

/* ---- 3. o[h][d0 .. d0 + DT*VW) += sum_j p[h][j] * V[j][...] for HT heads ---- */
ALWAYS_INLINE void pv_tile(const char *vb, size_t vstride, uint32_t nb, const float *sT, float *o, uint32_t Dp,
                           uint32_t d0, const char *vn, uint32_t nn, const uint32_t D, const fdec_dtype T,
                           const uint32_t HT, const uint32_t DT) {
    V acc[8][8];
    for (uint32_t h = 0; h < HT; h++)
        for (uint32_t t = 0; t < DT; t++) acc[h][t] = vzero(); /* the block's sums, added to o at the end */
    const size_t es = fdec_dtype_size(T);
    /* the lines of the next block's rows that begin in this tile's strip of dimensions: every tile asks for its
     * own, so the prefetches are spread over the tiles (bench/NOTES.md, CPU row 17), and a line shared by several
     * narrow strips (AVX2's 16- and 32-byte strips of f16) is asked for once, not once a strip (CPU log row 40) */
    const size_t se0 = (size_t)(d0 + DT * VW) * es, se = se0 < D * es ? se0 : D * es;
    const size_t pf0 = ((size_t)d0 * es + 63) & ~(size_t)63;
    for (uint32_t j = 0; j < nb; j++) {
        if (j < nn)
            for (size_t b = pf0; b < se; b += 64) PF_LINE(vn + (size_t)j * vstride + b);
        const char *vr = vb + (size_t)j * vstride + d0 * es;
        V vv[8];
        for (uint32_t t = 0; t < DT; t++)
            vv[t] = (D % VW && d0 + (t + 1) * VW > D) ? vload_kv_n(vr + t * VW * es, D - d0 - t * VW, T)
                                                       : vload_kv(vr + t * VW * es, T);
        for (uint32_t h = 0; h < HT; h++) /* p[h][j] broadcast by each FMA (vfma_bcast: CPU log row 23) */
            for (uint32_t t = 0; t < DT; t++) acc[h][t] = vfma_bcast(sT + (size_t)h * NB + j, vv[t], acc[h][t]);
    }
    for (uint32_t h = 0; h < HT; h++)
        for (uint32_t t = 0; t < DT; t++) {
            float *op = o + (size_t)h * Dp + d0 + t * VW;
            vstoref(op, vadd(vloadf(op), acc[h][t]));
        }
}

/* All d-vectors of HT heads, in register tiles of DT vectors (largest first). */
ALWAYS_INLINE void pv_heads(const char *vb, size_t vstride, uint32_t nb, const float *sT, float *o, uint32_t Dp,
                            const char *vn, uint32_t nn, const uint32_t D, const fdec_dtype T, const uint32_t HT) {
    const uint32_t nvec = (D + VW - 1) / VW;
    uint32_t i = 0;
    /* each tile also prefetches its strip of the next block's V rows */
#define PV_TILES(DT)                                                                                            \
    if ((DT) * HT <= NACC || (DT) == 1)                                                                         \
        for (; i + (DT) <= nvec; i += (DT))                                                                     \
            pv_tile(vb, vstride, nb, sT, o, Dp, i * VW, vn, nn, D, T, HT, (DT));
    PV_TILES(8)
    PV_TILES(4)
    PV_TILES(2)
    PV_TILES(1)
#undef PV_TILES
}

#ifndef FDEC_CPU_STRASSEN
#define FDEC_CPU_STRASSEN 1
#endif
/* The shape whose whole blocks of finite weights take pv_strassen (block_out) and whose passes ask twice for their
 * lines (FDEC_CPU_CROSS): measured there only (CPU log rows 73 and 80). */
#if FDEC_ISA == 2 && FDEC_CPU_STRASSEN
#define STRASSEN_SHAPE(D, T, R) ((D) == 512 && (T) == FDEC_F16 && (R) == 8)
#else
#define STRASSEN_SHAPE(D, T, R) 0
#endif
#if FDEC_ISA == 2 && FDEC_CPU_STRASSEN
/* The output pass of 8 heads over a whole block of f16 V by one level of Strassen's product (AVX-512 only): the block
 * is O[8 x D] += P[8 x NB] V[NB x D], and Strassen's 2 x 2 scheme does it in 7 block products instead of 8, i.e. 7/8
 * of the FMAs, for 5 adds of V a step (on Zen 4's add pipes, free beside the FMAs: bench/NOTES.md, CPU log row 60) and
 * 5 vector adds of the weights a block. Blocks: heads 0-3 / 4-7 (A rows), rows 0 .. NB/2 / NB/2 .. NB, dimensions in
 * even / odd 16-wide vectors (so a step's four V loads fill two whole lines). A tile is the 4 head rows x 7 products =
 * 28 accumulators for one vector of each dimension half over the block's NB/2 row pairs; its end combines them into
 * the 16 output vectors and adds them to o. bench/micro/pv_strassen.c: 7-8% faster than pv_tile's tiles in L2 where
 * the compiler keeps the 28 accumulators in registers (gcc -O3, the Makefile's, and clang; gcc -O2 spills them; CPU
 * log row 71). In the kernel the Gemma 4 full layer is 2-6% faster in cache and 0-5% from DRAM with 2 threads (paired
 * in both orders, row 73); FDEC_CPU_STRASSEN=0 keeps pv_tile's tiles everywhere. Used for f16 V only (two f16 values
 * add without overflow in f32), and, since the weights' combinations mix heads i and i + 4, only for blocks whose
 * weights are all finite (l finite after the softmax), so that a NaN stays in its own head. */
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
             * the same lines of its K rows a second time (FDEC_CPU_CROSS) */
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
#endif

/* 1: at STRASSEN_SHAPE, where the output pass is pv_strassen's, each pass asks a second time for the lines that the
 * other pass reads next: the score pass for this block's V rows (first asked for in the last block's output pass),
 * the output pass for the next block's K rows (first asked for in this block's score pass). A line already in L2
 * costs the second ask little; a first ask that did not bring its line gets another, half a block ahead (Zen 4 has
 * been measured to drop some prefetcht1 asks, arXiv 2411.02814; the gain fits that, which is not proven here). The
 * Gemma 4 full layer from DRAM with 2 threads 2.4-2.9% faster at 32k (medians of three sets), 1.6-2.9% at 131k,
 * 2.4-2.9% at 1k, 3.4% with one thread; even in L2 (paired both ways; bench/NOTES.md, CPU log row 80). The score
 * pass's ask alone was even, the output pass's alone 2.0% faster. Not taken elsewhere: with bf16 V at head_dim 512
 * (pv_tile's output pass) pv_tile's ask made the call 4% slower, and the Gemma 4 sliding geometry (row-major scores)
 * came out 2.3-4.4% faster from DRAM but 2.2-8.7% slower in L2, where its tiles would ask for a line every 2 FMAs.
 * Measured on Zen 4 only; FDEC_CPU_CROSS=0 leaves the second asks out. */
#ifndef FDEC_CPU_CROSS
#define FDEC_CPU_CROSS 1
#endif
#define CROSS_SHAPE(D, T, R) (FDEC_CPU_CROSS && STRASSEN_SHAPE(D, T, R))

/* Splits R heads into register tiles of 8, 4, 2 and 1 and runs `step` on each. */
#define FOR_HEAD_TILES(R, h0, HT, step)                                                                         \
    do {                                                                                                        \
        uint32_t h0 = 0;                                                                                        \
        for (; h0 + 8 <= (R); h0 += 8) { const uint32_t HT = 8; step; }                                        \
        if (h0 + 4 <= (R)) { const uint32_t HT = 4; step; h0 += 4; }                                           \
        if (h0 + 2 <= (R)) { const uint32_t HT = 2; step; h0 += 2; }                                           \
        if (h0 + 1 <= (R)) { const uint32_t HT = 1; step; h0 += 1; }                                           \
    } while (0)

/* One block of nb <= NB rows, one KV head: kb, vb point at row 0's vector; kn, vn at the next block's (same
 * head), nn rows of them, which the first head tile asks for while it computes (see prefetch_row). State for
 * the R heads of g. */
/* Steps 2 and 3 of a block for the R heads of one KV head, whose scores are in sT (R rows of NB). */
ALWAYS_INLINE void block_out(const char *vb, size_t rstride, uint32_t nb, const char *vn, uint32_t nn, uint32_t R,
                             uint32_t Dp, float *m, float *l, float *o, float *sT, const uint32_t D,
                             const fdec_dtype T, const char *kx) {
    for (uint32_t h = 0; h < R; h++) softmax_step(sT + (size_t)h * NB, nb, m + h, l + h, o + (size_t)h * Dp, Dp);
#if FDEC_ISA == 2 && FDEC_CPU_STRASSEN
    /* head_dim 512 only, the one shape it was measured on: compiled into the other head_dims' copies, it cost
     * Llama-3-8B (R = 4, which never takes it) 1-4% paired by changing their code (CPU log row 73) */
    if (STRASSEN_SHAPE(D, T, R) && nb == NB) {
        int finite = 1;
        for (uint32_t h = 0; h < 8; h++) finite &= isfinite(l[h]) != 0;
        if (finite) {
            pv_strassen(vb, rstride, sT, o, Dp, vn, nn, D, kx);
            return;
        }
    }
#else
    (void)kx;
#endif
    FOR_HEAD_TILES(R, h0, HT,
                   pv_heads(vb, rstride, nb, sT + (size_t)h0 * NB, o + (size_t)h0 * Dp, Dp, vn, h0 ? 0 : nn, D, T, HT));
}

ALWAYS_INLINE void block(const char *kb, const char *vb, size_t rstride, uint32_t nb, const char *kn,
                         const char *vn, uint32_t nn, const float *q, uint32_t R, uint32_t Dp, float *m, float *l,
                         float *o, float *sT, const uint32_t D, const fdec_dtype T) {
    const int cross = CROSS_SHAPE(D, T, R);
    FOR_HEAD_TILES(R, h0, HT,
                   qk_tile(kb, rstride, nb, q + (size_t)h0 * Dp, Dp, sT + (size_t)h0 * NB, kn, h0 ? 0 : nn, D, T, HT,
                           cross && !h0 ? vb : NULL));
    block_out(vb, rstride, nb, vn, nn, R, Dp, m, l, o, sT, D, T, cross ? kn : NULL);
}

/* The earlier groups' totals of each head, in double, Dp + 16 apart in tot: o's in the first Dp, then l and the
 * running max m they are relative to, like a chunk's partial state; a group is merged into them as states are
 * (state.h), each side weighted by e^(its max - m). into_tot (a group ends): tot = tot + (o, l), or a copy of them
 * when first; o and l start again from zero. Otherwise (the chunk ends): o, l = tot + (o, l), the chunk's state.
 * Double, because the totals are themselves a running sum, one term a group: in f32, one thread's chunk of 4M
 * positions (4,096 groups) came out 2.7e-5 off (CPU log row 64); the adds cost Dp double FMAs a head a group of
 * 1,024 positions. The weight is state.h's fdec_state_weight in double. Not inlined: once a group, and inlined into
 * the decode loop it cost the Gemma 4 full layer ~2%. */
static __attribute__((noinline)) void add_groups(double *tot, float *o, float *l, const float *m, uint32_t H,
                                                 uint32_t Dp, int first, int into_tot) {
    for (uint32_t h = 0; h < H; h++) {
        float *oh = o + (size_t)h * Dp;
        double *th = tot + (size_t)h * (Dp + 16);
        /* first: a copy (the totals' memory holds whatever it held, maybe a NaN, which 0 x would keep) */
        const double w = first || th[Dp + 1] == m[h] ? 1.0 : th[Dp + 1] == -INFINITY ? 0.0 : exp(th[Dp + 1] - m[h]);
        if (into_tot) {
            for (uint32_t d = 0; d < Dp; d++) th[d] = first ? oh[d] : th[d] * w + oh[d], oh[d] = 0.0f;
            th[Dp] = first ? l[h] : th[Dp] * w + l[h], th[Dp + 1] = m[h], l[h] = 0.0f;
        } else {
            for (uint32_t d = 0; d < Dp; d++) oh[d] = (float)(th[d] * w + oh[d]);
            l[h] = (float)(th[Dp] * w + l[h]);
        }
    }
}

/* 1: when a KV head's part of a row is 512 bytes or more and it feeds at most 4 query heads (the Gemma 4 sliding
 * geometry, not the Gemma 4 full layer's 8), a block's scores are worked out JR rows at a time for every KV head
 * (qk_rowmajor) before its softmax and output passes run head by head, so that the K reads of a block go through
 * its rows in address order. 2 threads, 32k: Gemma 4 sliding-full 8678 -> 8107 us (87.8 -> 95.0% of the floor), the
 * window 287.7 -> 279.0; slower for Llama (head_dim 128, 4 heads a KV head), LFM2 and the Gemma 4 full layer, which
 * keep the head-by-head order (bench/NOTES.md, CPU log row 30). 0: head by head everywhere. */
#ifndef FDEC_CPU_ROWMAJOR
#define FDEC_CPU_ROWMAJOR 1
#endif
#ifndef FDEC_CPU_ROWMAJOR_MIN_BYTES
#define FDEC_CPU_ROWMAJOR_MIN_BYTES 512
#endif
#ifndef FDEC_CPU_ROWMAJOR_MAX_R
#define FDEC_CPU_ROWMAJOR_MAX_R 4
#endif
#ifndef FDEC_CPU_JR
#define FDEC_CPU_JR 8 /* rows a row-major group */
#endif
#define JR FDEC_CPU_JR
/* the scores of every KV head of a block, JR rows at a time, the next block's K rows of the group asked for as it
 * goes; sT holds G * R rows of NB scores */
ALWAYS_INLINE void qk_rowmajor(const char *kb, size_t rstride, size_t hstride, uint32_t nb, const char *kn, uint32_t nn,
                               const float *q, uint32_t G, uint32_t R, uint32_t Dp, float *sT, const uint32_t D,
                               const fdec_dtype T) {
    for (uint32_t j0 = 0; j0 < nb; j0 += JR) {
        const uint32_t jn = nb - j0 < JR ? nb - j0 : JR;
        const uint32_t pn = nn > j0 ? (nn - j0 < jn ? nn - j0 : jn) : 0;
        for (uint32_t g = 0; g < G; g++) {
            const char *kg = kb + g * hstride + (size_t)j0 * rstride, *kng = kn + g * hstride + (size_t)j0 * rstride;
            const size_t hq = (size_t)g * R;
            FOR_HEAD_TILES(R, h0, HT,
                           qk_tile(kg, rstride, jn, q + (hq + h0) * Dp, Dp, sT + (hq + h0) * NB + j0, kng, h0 ? 0 : pn,
                                   D, T, HT, NULL));
        }
    }
}

ALWAYS_INLINE void chunk_impl(const fdec_cpu_args *a, const fdec_cpu_range *rg, float *m, float *l, float *o,
                              float *sT, const uint32_t D, const fdec_dtype T, const int rowmajor) {
    const uint64_t t0 = rg->t0, t1 = rg->t1, pf_end = rg->pf_end;
    /* Dp from the compile-time D of the specialised copies: with the pitch a run-time value the fully unrolled
     * score tile of head_dim 64 kept its 32 q addresses on the stack under AVX2 (LFM2 in L3 on Zen 1
     * 1013 -> 998 us, bench/NOTES.md, CPU log row 40) */
    const uint32_t Dp = fdec_cpu_padded_dim(D), R = a->R;
    const size_t es = fdec_dtype_size(T), rstride = a->ps * es, hstride = a->hs * es;
    /* o and l are the sums of the current group of FDEC_CPU_GROUP_BLOCKS blocks; tot holds the earlier groups' (see
     * add_groups), untouched in a chunk of one group (1,024 positions) */
    double *const tot = (double *)(sT + (size_t)a->H * NB); /* 8-byte aligned: H x NB floats on from sT */
    uint32_t nblk = 0, ngroups = 0; /* blocks of the current group done; groups in tot */
    /* rg->own: the sums go to the work area's copy of the state, after the totals, and m, l and o only at the end (an
     * empty chunk writes its state in place) */
    const int own = rg->own && t0 < t1;
    float *const m_out = m, *const l_out = l, *const o_out = o;
    if (own) {
        o = (float *)(tot + (size_t)a->H * (Dp + 16));
        m = o + (size_t)a->H * Dp;
        l = m + a->H;
    }
    for (uint32_t h = 0; h < a->H; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
        for (uint32_t d = 0; d < Dp; d++) o[(size_t)h * Dp + d] = 0.0f;
    }
    /* block geometry: rows [row, row + nb) of positions [t, t + nb), none from end on; a block never wraps around the
     * ring */
#define BLOCK_IN(t, end, row, nb)                                                                               \
    uint64_t row = a->ring ? (t) % a->ring : (t);                                                               \
    uint64_t nb = (t) >= (end) ? 0 : (end) - (t) < NB ? (end) - (t) : NB;                                       \
    if (a->ring && a->ring - row < nb) nb = a->ring - row;
#define BLOCK_AT(t, row, nb) BLOCK_IN(t, t1, row, nb)
    const char *kc = (const char *)a->k, *vc = (const char *)a->v;
    const size_t hb = D * es; /* bytes of one KV head's part of a row */
    if (t0 >= t1) return;
    if (rg->ramp) { /* the chunk's first block: all of it at once, or with FDEC_CPU_RAMP its first KV head */
        BLOCK_AT(t0, row, nb)
        for (uint32_t g = 0; g < (FDEC_CPU_RAMP ? 1 : a->G); g++)
            prefetch_head(kc, vc, row * rstride + g * hstride, nb, rstride, hb);
    }
    for (uint64_t t = t0; t < t1;) {
        BLOCK_AT(t, row, nb)
        /* the block to prefetch, which may lie past t1 in the positions the thread goes on to (up to pf_end) */
        const uint64_t tp = t + nb + (uint64_t)(a->pf_blocks - 1) * NB;
        BLOCK_IN(tp, pf_end, nrow, nnb)
        const char *kb = kc + row * rstride, *vb = vc + row * rstride;
        const char *kn = kc + nrow * rstride, *vn = vc + nrow * rstride;
#if FDEC_CPU_PAGE_AHEAD
        { /* one line of every 4 KiB page of the block FDEC_CPU_PAGE_AHEAD blocks past the prefetched one: 4-7% faster
           * calls from DRAM at head_dim 64 and 128 (bench/NOTES.md, CPU log row 46) */
            const uint64_t tw = tp + (uint64_t)FDEC_CPU_PAGE_AHEAD * NB;
            if (tw < pf_end) {
                BLOCK_IN(tw, pf_end, wrow, wnb)
                const size_t span = wnb * rstride; /* bytes the block's rows of one KV head span */
                /* heads apart (e.g. [head][pos][dim]): a span each; else (dense rows) one span holds every head */
                const uint32_t ng = hstride >= span ? a->G : 1;
                for (uint32_t g = 0; g < ng; g++) {
                    const size_t at = wrow * rstride + g * hstride;
                    for (size_t b = 0; b < span; b += 4096) PF_LINE(kc + at + b), PF_LINE(vc + at + b);
                }
            }
        }
#endif
        const int ramp = FDEC_CPU_RAMP && rg->ramp && t == t0; /* a cold chunk's first block asks for the rest of
                                                                 * itself and the second block head by head */
        uint64_t rrow = 0, rnb = 0;
        if (ramp && t + nb < t1) {
            BLOCK_AT(t + nb, r2, n2)
            rrow = r2, rnb = n2;
        }
        /* the ramp's asks that go with KV head g: the first block's head g + 1 and the second block's head g */
#define RAMP_HEAD(g)                                                                                            \
    do {                                                                                                        \
        if ((g) + 1 < a->G) prefetch_head(kc, vc, row * rstride + ((g) + 1) * hstride, nb, rstride, hb);       \
        prefetch_head(kc, vc, rrow * rstride + (g) * hstride, rnb, rstride, hb);                                \
    } while (0)
        if (rowmajor) {
            if (ramp) /* all at once: the scores need every head of the first block first */
                for (uint32_t g = 0; g < a->G; g++) RAMP_HEAD(g);
            qk_rowmajor(kb, rstride, hstride, (uint32_t)nb, kn, (uint32_t)nnb, a->q, a->G, R, Dp, sT, D, T);
            for (uint32_t g = 0; g < a->G; g++) {
                const size_t hq = (size_t)g * R;
                block_out(vb + g * hstride, rstride, (uint32_t)nb, vn + g * hstride, (uint32_t)nnb, R, Dp, m + hq,
                          l + hq, o + hq * Dp, sT + hq * NB, D, T, NULL);
            }
        } else
            for (uint32_t g = 0; g < a->G; g++) {
                const size_t hq = (size_t)g * R;
                if (ramp) RAMP_HEAD(g);
                block(kb + g * hstride, vb + g * hstride, rstride, (uint32_t)nb, kn + g * hstride, vn + g * hstride,
                      (uint32_t)nnb, a->q + hq * Dp, R, Dp, m + hq, l + hq, o + hq * Dp, sT, D, T);
            }
#undef RAMP_HEAD
        t += nb;
        if (++nblk == FDEC_CPU_GROUP_BLOCKS && t < t1) { /* the group into the totals; o and l start again */
            nblk = 0;
            add_groups(tot, o, l, m, a->H, Dp, ngroups++ == 0, 1);
        }
    }
    if (ngroups) add_groups(tot, o, l, m, a->H, Dp, 0, 0); /* the state: the totals and the last group */
    if (own) {
        memcpy(o_out, o, (size_t)a->H * Dp * sizeof(float));
        memcpy(m_out, m, a->H * sizeof(float));
        memcpy(l_out, l, a->H * sizeof(float));
    }
#undef BLOCK_AT
#undef BLOCK_IN
}

/* The specialised copies: head_dim x K/V type x order (_rm: qk_rowmajor; its own copies, so that the head-by-head
 * copies compile as they did without it: sharing one function cost the Gemma 4 full layer 9%). head_dim 64 never
 * has 512-byte rows. */
#define SPEC(Dc, Tc, RM, sfx)                                                                                   \
    static void FN(chunk_##Dc##_##Tc##sfx)(const fdec_cpu_args *a, const fdec_cpu_range *r, float *m, float *l, \
                                           float *o, float *sT) {                                               \
        chunk_impl(a, r, m, l, o, sT, (Dc) ? (Dc) : a->D, FDEC_##Tc, RM);                                       \
    }
#define SPEC_T(Dc) SPEC(Dc, F16, 0, ) SPEC(Dc, BF16, 0, ) SPEC(Dc, F32, 0, )
#define SPEC_RM(Dc) SPEC(Dc, F16, 1, _rm) SPEC(Dc, BF16, 1, _rm) SPEC(Dc, F32, 1, _rm)
SPEC_T(0)
SPEC_T(64)
SPEC_T(128)
SPEC_T(256)
SPEC_T(512)
#if FDEC_CPU_ROWMAJOR
#if FDEC_CPU_ROWMAJOR_MIN_BYTES <= 128
SPEC_RM(64)
#endif
SPEC_RM(0)
SPEC_RM(128)
SPEC_RM(256)
SPEC_RM(512)
#endif

void FN(fdec_cpu_chunk)(const fdec_cpu_args *a, const fdec_cpu_range *r, float *m, float *l, float *o,
                        float *sT) {
#define PICK1(Dc, sfx)                                                                                          \
    (a->kvt == FDEC_F16    ? FN(chunk_##Dc##_F16##sfx)                                                          \
     : a->kvt == FDEC_BF16 ? FN(chunk_##Dc##_BF16##sfx)                                                         \
                           : FN(chunk_##Dc##_F32##sfx))
#if FDEC_CPU_ROWMAJOR
    const int rm = (size_t)a->D * fdec_dtype_size(a->kvt) >= FDEC_CPU_ROWMAJOR_MIN_BYTES &&
                   a->R <= FDEC_CPU_ROWMAJOR_MAX_R;
#define PICK(Dc) (rm ? PICK1(Dc, _rm) : PICK1(Dc, ))
#else
#define PICK(Dc) PICK1(Dc, )
#endif
    fdec_cpu_chunk_fn f;
    switch (a->D) {
#if FDEC_CPU_ROWMAJOR && FDEC_CPU_ROWMAJOR_MIN_BYTES <= 128
    case 64: f = PICK(64); break;
#else
    case 64: f = PICK1(64, ); break;
#endif
    case 128: f = PICK(128); break;
    case 256: f = PICK(256); break;
    case 512: f = PICK(512); break;
    default: f = PICK(0); break;
    }
#undef PICK
#undef PICK1
    f(a, r, m, l, o, sT);
}

/* ---- q (and fdec_merge's input rows) converted to f32, and out from f32, a vector at a time ----
 * One element at a time through fdec_f16_to_f32 / fdec_f32_to_f16 these took ~115 us of a 1k call of the Gemma 4 full
 * layer with f16 q and out (455 against 338 us with f32: bench/NOTES.md, CPU log row 59). The results are the scalar
 * functions' bits: the hardware f16 conversions round to nearest even as they do (a NaN's payload aside, which
 * flashdec's outputs never carry), and bf16 is rounded by the same integer steps. */
void FN(fdec_cpu_cvt_in)(float *dst, const void *src, size_t n, fdec_dtype t, float scale) {
    const size_t es = fdec_dtype_size(t);
    size_t i = 0;
    const V s = vset1(scale);
    for (; i + VW <= n; i += VW) vstoref(dst + i, vmul(vload_kv((const char *)src + i * es, t), s));
    for (; i < n; i++) dst[i] = fdec_load_elem(src, i, t) * scale;
}

void FN(fdec_cpu_cvt_out)(void *dst, const float *src, size_t n, fdec_dtype t) {
    if (t == FDEC_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    size_t i = 0;
#if FDEC_ISA >= 1
    uint16_t *h = dst;
#endif
#if FDEC_ISA == 2
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(src + i);
        __m256i r;
        if (t == FDEC_F16) r = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        else { /* fdec_f32_to_bf16: x + 0x7fff + (bit 16 of x), the high half; a NaN's high half with the quiet bit */
            const __m512i b = _mm512_castps_si512(x);
            const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
            __m512i w = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
            const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)),
                                                          _mm512_set1_epi32(0x7f800000));
            w = _mm512_mask_mov_epi32(w, nan, _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40)));
            r = _mm512_cvtepi32_epi16(w);
        }
        _mm256_storeu_si256((__m256i *)(h + i), r);
    }
#elif FDEC_ISA == 1
    if (t == FDEC_F16)
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(h + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif FDEC_ISA == 3
    if (t == FDEC_F16) /* fcvtn rounds as FPCR says: to nearest even, unless the caller's thread changed it */
        for (; i + 4 <= n; i += 4) vst1_u16(h + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
#endif
    for (; i < n; i++) fdec_store_elem(dst, i, t, src[i]);
}

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
 * Between steps 1 and 2 the logits hook (logits.h) applies the layer's variants to the block's scores.
 * o and l are summed in three levels: a block's positions, the blocks of a group of FDEC_CPU_GROUP_BLOCKS, the groups
 * (cpu.h).
 * Where a KV head's part of a row is 512 bytes or more (from pages, also 128 bytes or less) and feeds at most 4 query
 * heads, step 1 runs first for every KV head, JR rows at a time (qk_rowmajor), so that a block's K rows are read in
 * address order; steps 2 and 3 then run head by head.
 * Rows are found by the address rule (kv.h): a block is a run of rows ps apart that never crosses the ring's end.
 * head_dim and the K/V type are compile-time constants in the specialised copies (the switch at the bottom);
 * everything else works for any value. The tuned numbers here are in docs/TUNING.md.
 */
#include "cpu.h"
#include "simd.h"

#include <float.h>
#include <string.h>

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define FN(name) CAT(name, ISA_NAME)

/* Rows a block (the score buffer's row pitch). */
#define NB FDEC_CPU_NB
/* The rows are asked for a->pf_blocks blocks ahead (cpu.c's pf_distance). */

/* Blocks past the prefetched block whose 4 KiB pages each get one line asked for early, so that the page walk is
 * done before the rows are wanted. */
#define PAGE_AHEAD 2

/* One software prefetch of the line at p into L2 (prefetcht1: L1 is too small for the distance). */
#define PF_LINE(p) __builtin_prefetch((p), 0, 2)

/* Asks for one row of `bytes` bytes to be brought into L2. A dense cache walked one KV head at a time strides
 * over the other heads' rows, which the hardware prefetchers do not follow; asking for the next block's rows
 * a few at a time while this block computes keeps the memory busy without stalling the core on a burst of
 * misses. */
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
    const size_t rowb = fdec_dtype_bytes(T, D); /* bytes of a head's row (whole blocks of a block type) */
    const int spread = D % VW == 0 && rowb >= 512;
    for (uint32_t j0 = 0; j0 < nb; j0 += P) {
        /* the next block's rows j0 .. j0 + P: with rows of 8 lines or more, one line of each as the d loop
         * crosses each 64-byte line of a row (spread over the FMAs, not in a burst); shorter rows at once */
        const uint32_t npf = j0 + P < nn ? P : nn > j0 ? nn - j0 : 0;
        if (!spread)
            for (uint32_t p = 0; p < npf; p++) prefetch_row(kn + (size_t)(j0 + p) * kstride, rowb);
        V acc[NACC];
        const char *kr[NACC];
        for (uint32_t p = 0; p < P; p++) {
            uint32_t j = j0 + p < nb ? j0 + p : nb - 1; /* past the end: recompute the last row, discarded */
            kr[p] = kb + (size_t)j * kstride;
        }
        for (uint32_t i = 0; i < NACC; i++) acc[i] = vzero();
        const uintptr_t dv = (uintptr_t)vx - (uintptr_t)kb; /* K row -> V row: one register, not another pointer */
        /* line: the byte offset of a line of the rows to ask for */
#define QK_PREFETCH(line)                                                                                       \
    do {                                                                                                        \
        for (uint32_t p = 0; p < npf; p++) PF_LINE(kn + (size_t)(j0 + p) * kstride + (line));                   \
        if (vx) /* the second ask for this block's V rows (CROSS_SHAPE) */                                       \
            for (uint32_t p = 0; p < P; p++)                                                                    \
                if (j0 + p < nb) PF_LINE((const char *)((uintptr_t)kr[p] + (line) + dv));                      \
    } while (0)
        /* a step: one vector, or a block type's whole block (SV vectors, its scale converted once a row) */
        const uint32_t SV = fdec_dtype_table[T].block > 1 ? 32 / VW : 1;
        uint32_t d = 0;
        for (; d + SV * VW <= D; d += SV * VW) {
            if (spread && SV == 1 && fdec_dtype_bytes(T, d) % 64 == 0) QK_PREFETCH(fdec_dtype_bytes(T, d));
            if (spread && SV > 1) { /* the lines that begin in this block's bytes */
                const size_t b0 = fdec_dtype_bytes(T, d), b1 = fdec_dtype_bytes(T, d + 32);
                for (size_t ln = (b0 + 63) & ~(size_t)63; ln < b1; ln += 64) QK_PREFETCH(ln);
            }
            V qv[32 / VW][8]; /* SV x HT of them (a compile-time bound: no variable-length array) */
            for (uint32_t sv = 0; sv < SV; sv++)
                for (uint32_t h = 0; h < HT; h++) {
                    qv[sv][h] = vloadf(q + (size_t)h * Dp + d + sv * VW);
                    /* one load per head, not one per (head, position); only where the NACC accumulators, the q
                     * vectors and the K vectors fit in the registers (AVX2's 16 at 8 heads a tile would spill) */
                    if (NACC + SV * (HT + 1) <= NVREG) vpin(&qv[sv][h]);
                }
            for (uint32_t p = 0; p < P; p++) {
                if (SV == 1) {
                    V kv = vload_row(kr[p], d, T);
                    for (uint32_t h = 0; h < HT; h++) acc[h * P + p] = vfma(kv, qv[0][h], acc[h * P + p]);
                } else {
                    const uint8_t *b = (const uint8_t *)kr[p] + fdec_dtype_bytes(T, d);
                    const V sc = vblock_scale(b, T);
                    for (uint32_t sv = 0; sv < SV; sv++) {
                        V kv = vload_block(b, sv * VW, T, sc);
                        for (uint32_t h = 0; h < HT; h++) acc[h * P + p] = vfma(kv, qv[sv][h], acc[h * P + p]);
                    }
                }
            }
        }
#undef QK_PREFETCH
        if (d < D) { /* q is zero-padded to Dp, so only K needs a short load */
            for (uint32_t p = 0; p < P; p++) {
                V kv = vload_kv_n(kr[p] + fdec_dtype_bytes(T, d), D - d, T); /* plain types: block types have no tail */
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

/* ---- the logits hook (logits.h) over a block's scores of the R rows of KV head g, positions t .. t + nb ----
 * the variants of logits.h (fdec_logit2's formulas in base e) a vector at a time, over whole vectors (lanes past nb
 * are the softmax's -inf later). An ALiBi bias past f32's range leaves -FLT_MAX, a weight of 0, where the softmax
 * would turn -inf into NaN.
 * The scores are scaled already (q carries the scale); an infinite one becomes NaN first (0 * inf), as the softmax
 * would make it, so that the soft-cap's clamp cannot turn it finite. With several query tokens, a row's positions
 * outside its token's range [lo, its position] (the causal mask and the token's window) get -FLT_MAX: a weight of 0
 * once any attended position is merged in (every token attends its own position), and no NaN where a block or a
 * chunk holds none. All rows before any softmax step: their chains of dependent steps (the soft-cap's exponential
 * and reciprocal) then overlap, where row by row, right before each softmax step, they waited on each other. Not
 * inlined: it runs once a block, and inlined into the decode loop it made the plain call of head_dim 512 2-3% slower
 * by changing that loop's code. */
static const float iota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static __attribute__((noinline)) void logits_hook(const fdec_cpu_args *a, float *sT, uint32_t nb, uint32_t g,
                                                  uint64_t t) {
    const fdec_logits *L = a->logits;
    /* with several tokens and no variant, only a block past the first token's position or, with a window, below the
     * last token's range has anything to mask */
    if (L->variant == FDEC_LOGITS_PLAIN && t + nb - 1 <= fdec_tok_pos(a->qpos, a->nq, 0) &&
        t >= fdec_tok_lo(a->qpos, a->window))
        return;
    const int cap = L->variant & FDEC_LOGITS_SOFTCAP, alibi = L->variant & FDEC_LOGITS_ALIBI;
    /* 1 / softcap, at most FLT_MAX: a cap below 1 / FLT_MAX made it inf, and 0 x inf a NaN */
    const V c = vset1(cap ? L->softcap : 1.0f), ic = vset1(cap ? fminf(1.0f / L->softcap, FLT_MAX) : 1.0f);
    const uint32_t R0 = a->R / a->nq; /* the layer's query heads a KV head */
    for (uint32_t h = 0; h < a->R; h++) {
        float *s = sT + (size_t)h * NB;
        const uint32_t tok = h / R0, head = g * R0 + h % R0;
        const uint64_t qpos = fdec_tok_pos(a->qpos, a->nq, tok), lo = fdec_tok_lo(qpos, a->window);
        if (cap || alibi) {
            const V nslope = vset1(alibi ? -L->alibi[head] : 0.0f);
            /* qpos - (t + j) for the first vector's lanes (negative past the token: masked below) */
            V dist = vsub(vset1((float)((int64_t)qpos - (int64_t)t)), vloadf(iota));
            for (uint32_t j = 0; j < nb; j += VW, dist = vsub(dist, vset1((float)VW))) {
                V x = vloadf(s + j);
                x = vfma(vzero(), x, x);
                if (cap) x = vmul(c, vtanh(vmul(x, ic)));
                if (alibi) x = vmax(vset1(-FLT_MAX), vfma(nslope, dist, x)); /* a bias past f32: weight 0, not NaN */
                vstoref(s + j, x);
            }
        }
        if (a->nq > 1 && (t < lo || t + nb - 1 > qpos))
            for (uint32_t j = 0; j < nb; j++)
                if (t + j < lo || t + j > qpos) s[j] = -FLT_MAX;
    }
}

/* ---- 2. online softmax over the block for one head: returns the weights in s[0..nb) ---- */
/* The block's scores stay in registers (NV vectors: NB / VW for a whole block, a compile-time count). Whether the
 * block raises the running max is one vector compare and a branch, which the CPU predicts (after a chunk's first
 * blocks a new max comes about ln(L / NB) times a head); only then is the horizontal max worked out, so e^(s - m)
 * does not wait for a horizontal reduction of this block's scores. */
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
    /* the running max unchanged (most blocks after the first few): alpha = e^0 = 1 without a call to expf */
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
    /* the lines of the next block's rows that begin in this tile's strip of dimensions: every tile asks for its
     * own, so the prefetches are spread over the tiles, and a line shared by several narrow strips (AVX2's 16- and
     * 32-byte strips of f16) is asked for once, not once a strip */
    const size_t se0 = fdec_dtype_bytes(T, d0 + DT * VW), se = se0 < fdec_dtype_bytes(T, D) ? se0 : fdec_dtype_bytes(T, D);
    const size_t pf0 = (fdec_dtype_bytes(T, d0) + 63) & ~(size_t)63;
    for (uint32_t j = 0; j < nb; j++) {
        if (j < nn)
            for (size_t b = pf0; b < se; b += 64) PF_LINE(vn + (size_t)j * vstride + b);
        const char *vr = vb + (size_t)j * vstride;
        V vv[8], sc = vzero();
        for (uint32_t t = 0; t < DT; t++) {
            const uint32_t dd = d0 + t * VW;
            if (fdec_dtype_table[T].block > 1) { /* a block's scale converted once for its vectors of the tile */
                const uint8_t *b = (const uint8_t *)vr + fdec_dtype_bytes(T, dd);
                if (t == 0 || dd % 32 == 0) sc = vblock_scale(b, T);
                vv[t] = vload_block(b, dd % 32, T, sc);
            } else
                vv[t] = (D % VW && dd + VW > D) ? vload_kv_n(vr + fdec_dtype_bytes(T, dd), D - dd, T)
                                                : vload_row(vr, dd, T);
        }
        for (uint32_t h = 0; h < HT; h++) /* p[h][j] broadcast by each FMA (vfma_bcast) */
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

/* The shape whose whole blocks of finite weights take pv_strassen (block_out) and whose passes ask twice for their
 * lines (CROSS_SHAPE): AVX-512, head_dim 512, f16, 8 query heads a KV head, the one shape both were measured on. */
#if FDEC_ISA == 2
#define STRASSEN_SHAPE(D, T, R) ((D) == 512 && (T) == FDEC_F16 && (R) == 8)
#else
#define STRASSEN_SHAPE(D, T, R) 0
#endif
#if FDEC_ISA == 2
#include "strassen.h"
#endif

/* At STRASSEN_SHAPE each pass asks a second time for the lines that the other pass reads next: the score pass for this
 * block's V rows (first asked for in the last block's output pass), the output pass for the next block's K rows
 * (first asked for in this block's score pass). A line already in L2 costs the second ask little; a first ask that
 * did not bring its line (Zen 4 drops some prefetcht1 asks) gets another, half a block ahead. Slower at the other
 * shapes tried (TUNING.md). */
#define CROSS_SHAPE(D, T, R) STRASSEN_SHAPE(D, T, R)

/* Splits R heads into register tiles of 8, 4, 2 and 1 and runs `step` on each. */
#define FOR_HEAD_TILES(R, h0, HT, step)                                                                         \
    do {                                                                                                        \
        uint32_t h0 = 0;                                                                                        \
        for (; h0 + 8 <= (R); h0 += 8) { const uint32_t HT = 8; step; }                                        \
        if (h0 + 4 <= (R)) { const uint32_t HT = 4; step; h0 += 4; }                                           \
        if (h0 + 2 <= (R)) { const uint32_t HT = 2; step; h0 += 2; }                                           \
        if (h0 + 1 <= (R)) { const uint32_t HT = 1; step; h0 += 1; }                                           \
    } while (0)

/* One block's rows of one KV head: nb rows of K and V from k and v, `stride` bytes apart, for positions t .. t + nb;
 * and the next block's nn rows from kn and vn, which the block asks for while it computes (prefetch_row). */
typedef struct {
    const char *k, *v, *kn, *vn;
    size_t stride;
    uint32_t nb, nn;
    uint64_t t;
} kv_rows;

/* Steps 2 and 3 of a block for the R heads hq .. hq + R of one KV head, whose scores are in sT (R rows of NB); the
 * state is m[R], l[R], o[R][Dp]. kx: the next block's K rows, asked for a second time (CROSS_SHAPE), or NULL. */
ALWAYS_INLINE void block_out(const fdec_cpu_args *a, const kv_rows *b, uint32_t hq, float *m, float *l, float *o,
                             float *sT, const uint32_t D, const fdec_dtype T, const char *kx) {
    const uint32_t R = a->R, Dp = fdec_cpu_padded_dim(D);
    if (a->hook) logits_hook(a, sT, b->nb, hq / R, b->t); /* a variant, or several query tokens */
    for (uint32_t h = 0; h < R; h++) softmax_step(sT + (size_t)h * NB, b->nb, m + h, l + h, o + (size_t)h * Dp, Dp);
#if FDEC_ISA == 2
    /* in the head_dim 512 copies only: compiled into the others, it made them slower by changing their code */
    if (STRASSEN_SHAPE(D, T, R) && b->nb == NB) {
        int finite = 1;
        for (uint32_t h = 0; h < 8; h++) finite &= isfinite(l[h]) != 0;
        if (finite) {
            pv_strassen(b->v, b->stride, sT, o, Dp, b->vn, b->nn, D, kx);
            return;
        }
    }
#else
    (void)kx;
#endif
    FOR_HEAD_TILES(R, h0, HT,
                   pv_heads(b->v, b->stride, b->nb, sT + (size_t)h0 * NB, o + (size_t)h0 * Dp, Dp, b->vn,
                            h0 ? 0 : b->nn, D, T, HT));
}

/* Steps 1 to 3 of a block for the R heads hq .. of one KV head, q their rows of the scaled q. */
ALWAYS_INLINE void block(const fdec_cpu_args *a, const kv_rows *b, uint32_t hq, float *m, float *l, float *o,
                         float *sT, const uint32_t D, const fdec_dtype T) {
    const uint32_t R = a->R, Dp = fdec_cpu_padded_dim(D);
    const float *q = a->q + (size_t)hq * Dp;
    const int cross = CROSS_SHAPE(D, T, R);
    FOR_HEAD_TILES(R, h0, HT,
                   qk_tile(b->k, b->stride, b->nb, q + (size_t)h0 * Dp, Dp, sT + (size_t)h0 * NB, b->kn,
                           h0 ? 0 : b->nn, D, T, HT, cross && !h0 ? b->v : NULL));
    block_out(a, b, hq, m, l, o, sT, D, T, cross ? b->kn : NULL);
}

/* The earlier groups' totals of each head, in double, Dp + 16 apart in tot: o's in the first Dp, then l and the
 * running max m they are relative to, like a chunk's partial state; a group is merged into them as states are
 * (state.h), each side weighted by e^(its max - m). into_tot (a group ends): tot = tot + (o, l), or a copy of them
 * when first; o and l start again from zero. Otherwise (the chunk ends): o, l = tot + (o, l), the chunk's state.
 * Double, because the totals are themselves a running sum, one term a group (in f32 a chunk of 4M positions drifted
 * 2.7e-5); the adds cost Dp double FMAs a head a group of 1,024 positions. Not inlined: it runs once a group, and
 * inlined into the decode loop it made the loop slower. */
static __attribute__((noinline)) void add_groups(double *tot, float *o, float *l, const float *m, uint32_t H,
                                                 uint32_t Dp, int first, int into_tot) {
    for (uint32_t h = 0; h < H; h++) {
        float *oh = o + (size_t)h * Dp;
        double *th = tot + (size_t)h * (Dp + 16);
        /* first: a copy (the totals' memory holds whatever it held, maybe a NaN, which 0 x would keep) */
        const double w = first || th[Dp + 1] == m[h] ? 1.0 : fdec_state_weight_d(th[Dp + 1], m[h]);
        if (into_tot) {
            for (uint32_t d = 0; d < Dp; d++) th[d] = first ? oh[d] : th[d] * w + oh[d], oh[d] = 0.0f;
            th[Dp] = first ? l[h] : th[Dp] * w + l[h], th[Dp + 1] = m[h], l[h] = 0.0f;
        } else {
            for (uint32_t d = 0; d < Dp; d++) oh[d] = (float)(th[d] * w + oh[d]);
            l[h] = (float)(th[Dp] * w + l[h]);
        }
    }
}

/* The row-major order: where a KV head's part of a row is ROWMAJOR_MIN_BYTES or more and it feeds at most
 * ROWMAJOR_MAX_R query heads (the Gemma 4 sliding geometry, not the Gemma 4 full layer's 8), a block's scores are
 * worked out JR rows at a time for every KV head (qk_rowmajor) before its softmax and output passes run head by
 * head, so that the K reads of a block go through its rows in address order. Slower at the other presets, which keep
 * the head-by-head order (TUNING.md). */
#define ROWMAJOR_MIN_BYTES 512
#define ROWMAJOR_MAX_R 4
/* From a paged cache whose rows hold every KV head ([slot][kv_head][dim]), parts of at most this many bytes (LFM2's
 * head_dim 64 in f16) take the row-major order too: a page's K rows are read through in address order, not as one
 * head's short pieces a row apart, head by head, which is slow from pages scattered over the pool (TUNING.md). */
#define ROWMAJOR_PAGED_MAX_BYTES 128
#define JR 8 /* rows a row-major group */
/* the scores of every KV head of a block (b: KV head 0's rows; hstride bytes between heads), JR rows at a time, the
 * next block's K rows of the group asked for as it goes; sT holds G * R rows of NB scores */
ALWAYS_INLINE void qk_rowmajor(const fdec_cpu_args *a, const kv_rows *b, size_t hstride, float *sT, const uint32_t D,
                               const fdec_dtype T) {
    const uint32_t R = a->R, Dp = fdec_cpu_padded_dim(D), nb = b->nb, nn = b->nn;
    const size_t rstride = b->stride;
    for (uint32_t j0 = 0; j0 < nb; j0 += JR) {
        const uint32_t jn = nb - j0 < JR ? nb - j0 : JR;
        const uint32_t pn = nn > j0 ? (nn - j0 < jn ? nn - j0 : jn) : 0;
        for (uint32_t g = 0; g < a->G; g++) {
            const char *kg = b->k + g * hstride + (size_t)j0 * rstride, *kng = b->kn + g * hstride + (size_t)j0 * rstride;
            const size_t hq = (size_t)g * R;
            FOR_HEAD_TILES(R, h0, HT,
                           qk_tile(kg, rstride, jn, a->q + (hq + h0) * Dp, Dp, sT + (hq + h0) * NB + j0, kng,
                                   h0 ? 0 : pn, D, T, HT, NULL));
        }
    }
}

/* Block geometry: the rows of positions [t, t + nb), none from `end` on, from element offset off (KV head 0); a block
 * is a run of the address rule (kv.h), so it never crosses the ring's end or a page's. */
typedef struct {
    size_t off;
    uint64_t nb;
} block_span;
ALWAYS_INLINE block_span block_at(const fdec_cpu_args *a, uint64_t t, uint64_t end) {
    const uint64_t n = t >= end ? 0 : end - t < NB ? end - t : NB;
    const block_span b = {n ? fdec_kv_pos(&a->kv, t) : 0, n ? fdec_kv_run(&a->kv, t, n) : 0};
    return b;
}

/* All of one block's rows of KV head g asked for at once (a cold chunk's first block, head by head). */
ALWAYS_INLINE void prefetch_block_head(const fdec_cpu_args *a, block_span b, uint32_t g, size_t rstride,
                                       size_t hstride, size_t hb) {
    prefetch_head((const char *)a->k, (const char *)a->v, fdec_dtype_bytes(a->kvt, b.off) + g * hstride, b.nb, rstride,
                  hb);
}

ALWAYS_INLINE void chunk_impl(const fdec_cpu_args *a, const fdec_cpu_range *rg, float *m, float *l, float *o,
                              float *sT, const uint32_t D, const fdec_dtype T, const int rowmajor) {
    const uint64_t t0 = rg->t0, t1 = rg->t1, pf_end = rg->pf_end;
    /* Dp from the compile-time D of the specialised copies: with the pitch a run-time value the fully unrolled
     * score tile of head_dim 64 kept its 32 q addresses on the stack under AVX2 */
    const uint32_t Dp = fdec_cpu_padded_dim(D), R = a->R;
    const size_t rstride = fdec_dtype_bytes(T, a->kv.ps), hstride = fdec_dtype_bytes(T, a->kv.hs);
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
    const char *kc = (const char *)a->k, *vc = (const char *)a->v;
    const size_t hb = fdec_dtype_bytes(T, D); /* bytes of one KV head's part of a row */
    if (t0 >= t1) return;
    if (rg->ramp) prefetch_block_head(a, block_at(a, t0, t1), 0, rstride, hstride, hb); /* a cold chunk's first rows */
    for (uint64_t t = t0; t < t1;) {
        const block_span cur = block_at(a, t, t1);
        /* the block to prefetch, which may lie past t1 in the positions the thread goes on to (up to pf_end) */
        const uint64_t tp = t + cur.nb + (uint64_t)(a->pf_blocks - 1) * NB;
        const block_span nxt = block_at(a, tp, pf_end);
        { /* one line of every 4 KiB page of the block PAGE_AHEAD blocks past the prefetched one */
            const uint64_t tw = tp + (uint64_t)PAGE_AHEAD * NB;
            if (tw < pf_end) {
                const block_span w = block_at(a, tw, pf_end);
                /* the bytes the block's rows of one KV head span (not nb strides: a stride may be far larger than
                 * the cache where a page holds one row) */
                const size_t rows = (w.nb - 1) * rstride + hb;
                /* heads apart (e.g. [head][pos][dim]): a span each; else (dense rows) one span holds every head */
                const uint32_t ng = hstride >= rows ? a->G : 1;
                const size_t span = ng > 1 ? rows : rows + (a->G - 1) * hstride;
                for (uint32_t g = 0; g < ng; g++) {
                    const size_t at = fdec_dtype_bytes(T, w.off) + g * hstride;
                    for (size_t b = 0; b < span; b += 4096) PF_LINE(kc + at + b), PF_LINE(vc + at + b);
                }
            }
        }
        /* a cold chunk's first block asks for the rest of itself and for the second block head by head (the ramp):
         * with KV head g it asks for the first block's head g + 1 and the second block's head g */
        const int ramp = rg->ramp && t == t0;
        const block_span second = ramp && t + cur.nb < t1 ? block_at(a, t + cur.nb, t1) : (block_span){0, 0};
#define RAMP_HEAD(g)                                                                                            \
    do {                                                                                                        \
        if ((g) + 1 < a->G) prefetch_block_head(a, cur, (g) + 1, rstride, hstride, hb);                         \
        prefetch_block_head(a, second, (g), rstride, hstride, hb);                                              \
    } while (0)
        kv_rows b = {kc + fdec_dtype_bytes(T, cur.off), vc + fdec_dtype_bytes(T, cur.off), kc + fdec_dtype_bytes(T, nxt.off),
                     vc + fdec_dtype_bytes(T, nxt.off),
                     rstride, (uint32_t)cur.nb, (uint32_t)nxt.nb, t};
        if (rowmajor) {
            if (ramp) /* all at once: the scores need every head of the first block first */
                for (uint32_t g = 0; g < a->G; g++) RAMP_HEAD(g);
            qk_rowmajor(a, &b, hstride, sT, D, T);
            for (uint32_t g = 0; g < a->G; g++) {
                const size_t hq = (size_t)g * R;
                const kv_rows bg = {b.k + g * hstride, b.v + g * hstride, b.kn + g * hstride, b.vn + g * hstride,
                                    rstride, b.nb, b.nn, t};
                block_out(a, &bg, (uint32_t)hq, m + hq, l + hq, o + hq * Dp, sT + hq * NB, D, T, NULL);
            }
        } else
            for (uint32_t g = 0; g < a->G; g++) {
                const size_t hq = (size_t)g * R;
                if (ramp) RAMP_HEAD(g);
                const kv_rows bg = {b.k + g * hstride, b.v + g * hstride, b.kn + g * hstride, b.vn + g * hstride,
                                    rstride, b.nb, b.nn, t};
                block(a, &bg, (uint32_t)hq, m + hq, l + hq, o + hq * Dp, sT, D, T);
            }
#undef RAMP_HEAD
        t += cur.nb;
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
}

/* The specialised copies: head_dim x K/V type x order (_rm: the row-major order, in copies of its own so that the
 * head-by-head copies compile as they do without it). */
#define SPEC(Dc, Tc, RM, sfx)                                                                                   \
    static void FN(chunk_##Dc##_##Tc##sfx)(const fdec_cpu_args *a, const fdec_cpu_range *r, float *m, float *l, \
                                           float *o, float *sT) {                                               \
        chunk_impl(a, r, m, l, o, sT, (Dc) ? (Dc) : a->D, FDEC_##Tc, RM);                                       \
    }
#define SPEC_T(Dc)                                                                                              \
    SPEC(Dc, F16, 0, ) SPEC(Dc, BF16, 0, ) SPEC(Dc, F32, 0, ) SPEC(Dc, F8_E4M3, 0, ) SPEC(Dc, F8_E5M2, 0, )       \
        SPEC(Dc, Q8_0, 0, ) SPEC(Dc, Q4_0, 0, )
#define SPEC_RM(Dc)                                                                                             \
    SPEC(Dc, F16, 1, _rm) SPEC(Dc, BF16, 1, _rm) SPEC(Dc, F32, 1, _rm) SPEC(Dc, F8_E4M3, 1, _rm)                  \
        SPEC(Dc, F8_E5M2, 1, _rm) SPEC(Dc, Q8_0, 1, _rm) SPEC(Dc, Q4_0, 1, _rm)
SPEC_T(0)
SPEC_T(64)
SPEC_T(128)
SPEC_T(256)
SPEC_T(512)
SPEC_RM(0)
SPEC_RM(64)
SPEC_RM(128)
SPEC_RM(256)
SPEC_RM(512)

void FN(fdec_cpu_chunk)(const fdec_cpu_args *a, const fdec_cpu_range *r, float *m, float *l, float *o,
                        float *sT) {
#define PICK1(Dc, sfx)                                                                                          \
    (a->kvt == FDEC_F16       ? FN(chunk_##Dc##_F16##sfx)                                                       \
     : a->kvt == FDEC_BF16    ? FN(chunk_##Dc##_BF16##sfx)                                                      \
     : a->kvt == FDEC_F8_E4M3 ? FN(chunk_##Dc##_F8_E4M3##sfx)                                                   \
     : a->kvt == FDEC_F8_E5M2 ? FN(chunk_##Dc##_F8_E5M2##sfx)                                                   \
     : a->kvt == FDEC_Q8_0    ? FN(chunk_##Dc##_Q8_0##sfx)                                                      \
     : a->kvt == FDEC_Q4_0    ? FN(chunk_##Dc##_Q4_0##sfx)                                                      \
                              : FN(chunk_##Dc##_F32##sfx))
    const size_t part = fdec_dtype_bytes(a->kvt, a->D);
    const int paged_short = a->kv.page_size && a->kv.hs < a->kv.ps && part <= ROWMAJOR_PAGED_MAX_BYTES;
    const int rm = (part >= ROWMAJOR_MIN_BYTES || paged_short) && a->R <= ROWMAJOR_MAX_R;
#define PICK(Dc) (rm ? PICK1(Dc, _rm) : PICK1(Dc, ))
    fdec_cpu_chunk_fn f;
    switch (a->D) {
    case 64: f = PICK(64); break;
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
 * (one element at a time they were a third of a short call with 16-bit q and out). The results are the scalar
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

/* simd.h — the small vector vocabulary the CPU kernel (kern.h) is written in, one section per instruction set.
 * The including file defines FDEC_ISA as 0 (portable C), 1 (AVX2 + FMA + F16C), 2 (AVX-512 F/BW/VL/DQ) or 3 (AArch64
 * NEON) and is compiled with the matching -m flags; the run-time dispatcher (cpu.c) calls only what the CPU supports.
 *
 *   V, VW             vector of VW floats
 *   NACC              independent accumulators a tile keeps in registers (half the register file)
 *   NVREG             vector registers the ISA has (what a tile's accumulators, q vectors and K vector must fit in)
 *   vzero, vset1, vloadf, vstoref, vfma(a,b,c)=a*b+c, vfma_bcast(p,b,c)=*p*b+c, vmul, vadd, vsub, vmax, vmin,
 *   vhsum, vhmax
 *   vany_gt(a, b)     whether a > b in any lane (false where either is NaN)
 *   vload_kv(p, T)    VW elements of a plain K/V type T (f32, f16, bf16, fp8) at p, as f32
 *   vload_kv_n(p,n,T) the first n < VW elements, zeros after (never reads past p + n)
 *   vload_row(r,d,T)  elements d .. d + VW of the K/V row at r, any type (a block type's VW elements lie in one
 *                     block: d is a multiple of VW); written once, below the sections
 *   vblock_scale(b, T), vload_block(b, j, T, s)   what a Q8_0 / Q4_0 block's vectors share (its scale in every
 *                     lane; AVX-512's Q4_0: its 16 values, d (n - 8) for n = 0..15), and its elements j .. j + VW from
 *                     it: a kernel makes s once for all of a block's vectors
 *   vreduce_all(a, o) o[i] = sum of the lanes of a[i] for the NACC vectors a[0..NACC)
 *   vreduce_rows(a, o, pitch, P)   the same sums as NACC / P rows of P, pitch floats apart
 *   vround(x), vldexp(p, n)   round to nearest integer; p * 2^n (the two ISA-specific steps of vexp)
 *   vexp(x)           e^x, relative error < 2e-7, NaN in gives NaN out (written once, below the sections)
 *   vpin(&x)          keeps x in a register: stops the compiler from folding its load into every FMA that uses
 *                     it (which turns one load into one per use)
 */
#ifndef FDEC_SIMD_H
#define FDEC_SIMD_H

#include "../internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if FDEC_ISA == 1 || FDEC_ISA == 2
#include <immintrin.h>
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Portable conversions, inlined. Written apart from api.c's on purpose: the reference converts with those, so
 * the scalar path's agreement with the reference checks both. */
ALWAYS_INLINE float h2f(uint16_t h) {
    /* f16 -> f32 by exponent re-bias, with subnormals via a float multiply (exact). */
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, em = h & 0x7fff, bits;
    float f;
    if (em >= 0x7c00) bits = sign | 0x7f800000u | ((uint32_t)(em & 0x3ff) << 13);
    else if (em >= 0x0400) bits = sign | ((em + (112u << 10)) << 13);
    else {
        f = (float)em * 5.9604644775390625e-8f; /* 2^-24 */
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    memcpy(&f, &bits, 4);
    return f;
}
ALWAYS_INLINE float b2f(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
ALWAYS_INLINE float load1(const void *p, size_t i, fdec_dtype T) {
    if (T == FDEC_F32) return ((const float *)p)[i];
    if (T == FDEC_F16) return h2f(((const uint16_t *)p)[i]);
    if (T == FDEC_BF16) return b2f(((const uint16_t *)p)[i]);
    return fdec_load_elem(p, i, T); /* fp8 and the block types: the type table's, exact */
}
/* A Q8_0 / Q4_0 block's f16 scale (the x86 paths look it up in fdec_cpu_f16_table: the portable conversion cost more
 * than the rest of a vector's load, and F16C's took the vector pipes' time). */
ALWAYS_INLINE float block_d(const uint8_t *b) {
#if FDEC_ISA == 1 || FDEC_ISA == 2
    uint16_t h;
    memcpy(&h, b, 2);
    return fdec_cpu_f16_table[h];
#else
    return h2f((uint16_t)(b[0] | b[1] << 8));
#endif
}

/* Cephes expf polynomial on r in [-ln2/2, ln2/2]; exp(x) = 2^n * p(r), x = n ln2 + r. */
#define EXP_HI 88.3762626647949f
#define EXP_LO -87.3365447504f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define EXP_P0 1.9875691500E-4f
#define EXP_P1 1.3981999507E-3f
#define EXP_P2 8.3334519073E-3f
#define EXP_P3 4.1665795894E-2f
#define EXP_P4 1.6666665459E-1f
#define EXP_P5 5.0000001201E-1f

#if FDEC_ISA == 2
#include <immintrin.h>
typedef __m512 V;
#define VW 16
#define NACC 16
#define NVREG 32
#define ISA_NAME avx512
ALWAYS_INLINE V vzero(void) { return _mm512_setzero_ps(); }
ALWAYS_INLINE V vset1(float x) { return _mm512_set1_ps(x); }
ALWAYS_INLINE V vloadf(const float *p) { return _mm512_loadu_ps(p); }
ALWAYS_INLINE void vstoref(float *p, V x) { _mm512_storeu_ps(p, x); }
ALWAYS_INLINE V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
/* *p * b + c with the broadcast of *p done by the FMA's memory operand ({1to16}), which the load unit does: a
 * separate vbroadcastss takes a slot of the FP pipes that the FMAs need (16 FMAs with 8 broadcasts ran 17% slower
 * than 16 FMAs alone, with embedded broadcasts as fast). Written in asm because
 * the compilers keep a broadcast used twice in a register. */
ALWAYS_INLINE V vfma_bcast(const float *p, V b, V c) {
    __asm__("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(c) : "v"(b), "m"(*p));
    return c;
}
ALWAYS_INLINE V vmul(V a, V b) { return _mm512_mul_ps(a, b); }
ALWAYS_INLINE V vadd(V a, V b) { return _mm512_add_ps(a, b); }
ALWAYS_INLINE V vsub(V a, V b) { return _mm512_sub_ps(a, b); }
ALWAYS_INLINE V vmax(V a, V b) { return _mm512_max_ps(a, b); } /* NaN in b is returned */
ALWAYS_INLINE V vmin(V a, V b) { return _mm512_min_ps(a, b); }
ALWAYS_INLINE float vhsum(V x) { return _mm512_reduce_add_ps(x); }
ALWAYS_INLINE float vhmax(V x) { return _mm512_reduce_max_ps(x); }
ALWAYS_INLINE int vany_gt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ) != 0; }
/* 16 fp8 values (bytes b) as f32: E5M2 is an f16's top byte; E4M3 moved into an f16's bits (sign, then exponent and
 * mantissa 3 bits lower) is the value times 2^-8, and S.1111.111 is its NaN */
ALWAYS_INLINE V fp8_to_ps(__m128i b, fdec_dtype T) {
    const __m256i w = _mm256_cvtepu8_epi16(b);
    if (T == FDEC_F8_E5M2) return _mm512_cvtph_ps(_mm256_slli_epi16(w, 8));
    const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7f));
    const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8),
                                      _mm256_slli_epi16(mag, 7));
    const V f = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
    return _mm512_mask_mov_ps(f, _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7f)), _mm512_set1_ps(NAN));
}
ALWAYS_INLINE V vload_kv(const void *p, fdec_dtype T) {
    if (T == FDEC_F32) return _mm512_loadu_ps(p);
    if (T == FDEC_F8_E4M3 || T == FDEC_F8_E5M2) return fp8_to_ps(_mm_loadu_si128((const __m128i *)p), T);
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (T == FDEC_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
ALWAYS_INLINE V vload_kv_n(const void *p, uint32_t n, fdec_dtype T) {
    __mmask16 m = (__mmask16)((1u << n) - 1);
    if (T == FDEC_F32) return _mm512_maskz_loadu_ps(m, p);
    if (T == FDEC_F8_E4M3 || T == FDEC_F8_E5M2)
        return _mm512_maskz_mov_ps(m, fp8_to_ps(_mm_maskz_loadu_epi8(m, p), T));
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (T == FDEC_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
/* What a block's vectors share: Q8_0's scale in every lane; Q4_0's 16 values d (n - 8), lane n, so that a vector of
 * its elements is one permute of them by the nibbles (the products are the ones d * (n - 8) would give) */
ALWAYS_INLINE V vblock_scale(const uint8_t *b, fdec_dtype T) {
    const V d = _mm512_set1_ps(block_d(b));
    if (T == FDEC_Q8_0) return d;
    return _mm512_mul_ps(d, _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7));
}
/* Elements j .. j + 16 (j 0 or 16) of a Q8_0 / Q4_0 block at b, s from vblock_scale */
ALWAYS_INLINE V vload_block(const uint8_t *b, uint32_t j, fdec_dtype T, V s) {
    if (T == FDEC_Q8_0) return _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2 + j)))));
    __m128i x = _mm_loadu_si128((const __m128i *)(b + 2));
    if (j) x = _mm_srli_epi16(x, 4); /* the high nibbles down; the permute reads an index's low 4 bits only */
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(x), s);
}
/* out[i] = sum of a[i]'s lanes for the 16 vectors a[0..15], by a transposing add tree: 45 shuffles and adds for 16
 * sums instead of 16 separate reductions of 8 steps. The tree works inside the 128-bit lanes first (24 vshufps) and
 * crosses them only in its last two stages (6 vshuff32x4), which leaves the sums in order. Beside the score pass's
 * f16 conversions a lane-crossing vshuff32x4 takes FP-pipe time and a vshufps does not (on Zen 4: 16 FMAs + 4
 * conversions 4.55 ns, + 8 vshufps 4.5, + 8 vshuff32x4 5.6). */
ALWAYS_INLINE V vreduce_vec(const V *a) {
    V w[8], u[4], z[2];
    for (int i = 0; i < 8; i++) /* per 128-bit lane: [x0 + x2, x1 + x3, y0 + y2, y1 + y3] of x = a[2i], y = a[2i+1] */
        w[i] = vadd(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                    _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 4; i++) /* per 128-bit lane: that lane's part of the sums of a[4i .. 4i + 3], in order */
        u[i] = vadd(_mm512_shuffle_ps(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_shuffle_ps(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int i = 0; i < 2; i++) /* the four 128-bit lanes of u[2i] and u[2i+1] added in pairs */
        z[i] = vadd(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                    _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane block q: the sums of a[4q .. 4q + 3] */
    return vadd(_mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                _mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
}
ALWAYS_INLINE void vreduce_all(const V *a, float *out) { _mm512_storeu_ps(out, vreduce_vec(a)); }
ALWAYS_INLINE void vpin(V *x) { __asm__("" : "+v"(*x)); }
ALWAYS_INLINE V vround(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
ALWAYS_INLINE V vldexp(V p, V n) { return _mm512_scalef_ps(p, n); } /* p * 2^n */

#elif FDEC_ISA == 1
#include <immintrin.h>
typedef __m256 V;
#define VW 8
#define NACC 8
#define NVREG 16
#define ISA_NAME avx2
ALWAYS_INLINE void vpin(V *x) { __asm__("" : "+x"(*x)); }
ALWAYS_INLINE V vzero(void) { return _mm256_setzero_ps(); }
ALWAYS_INLINE V vset1(float x) { return _mm256_set1_ps(x); }
ALWAYS_INLINE V vloadf(const float *p) { return _mm256_loadu_ps(p); }
ALWAYS_INLINE void vstoref(float *p, V x) { _mm256_storeu_ps(p, x); }
ALWAYS_INLINE V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
ALWAYS_INLINE V vfma_bcast(const float *p, V b, V c) { return _mm256_fmadd_ps(_mm256_set1_ps(*p), b, c); }
ALWAYS_INLINE V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
ALWAYS_INLINE V vadd(V a, V b) { return _mm256_add_ps(a, b); }
ALWAYS_INLINE V vsub(V a, V b) { return _mm256_sub_ps(a, b); }
ALWAYS_INLINE V vmax(V a, V b) { return _mm256_max_ps(a, b); }
ALWAYS_INLINE V vmin(V a, V b) { return _mm256_min_ps(a, b); }
ALWAYS_INLINE float vhsum(V x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
ALWAYS_INLINE float vhmax(V x) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
ALWAYS_INLINE int vany_gt(V a, V b) { return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ)) != 0; }
ALWAYS_INLINE V vload_kv(const void *p, fdec_dtype T) {
    if (T == FDEC_F32) return _mm256_loadu_ps(p);
    if (T == FDEC_F8_E4M3 || T == FDEC_F8_E5M2) { /* as the AVX-512 section's fp8_to_ps, 8 at a time */
        const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p));
        if (T == FDEC_F8_E5M2) return _mm256_cvtph_ps(_mm_slli_epi16(w, 8));
        const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7f));
        const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8), _mm_slli_epi16(mag, 7));
        const V f = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
        const __m256i nan = _mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f)));
        return _mm256_blendv_ps(f, _mm256_set1_ps(NAN), _mm256_castsi256_ps(nan));
    }
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (T == FDEC_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
/* A Q8_0 / Q4_0 block's scale in every lane */
ALWAYS_INLINE V vblock_scale(const uint8_t *b, fdec_dtype T) {
    (void)T;
    return _mm256_set1_ps(block_d(b));
}
/* Elements j .. j + 8 (j a multiple of 8 below 32) of a Q8_0 / Q4_0 block at b, d its scale (vblock_scale) */
ALWAYS_INLINE V vload_block(const uint8_t *b, uint32_t j, fdec_dtype T, V d) {
    if (T == FDEC_Q8_0) return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + j)))));
    __m128i x = _mm_loadl_epi64((const __m128i *)(b + 2 + j % 16));
    if (j >= 16) x = _mm_srli_epi16(x, 4);
    const __m256i q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_and_si128(x, _mm_set1_epi8(15))), _mm256_set1_epi32(8));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(q));
}
/* out[i] = sum of a[i]'s lanes for the 8 vectors a[0..7]: a transposing add tree that stays inside the 128-bit
 * lanes until its last step (shufps and adds), where each group of four sums is its low lane plus its high lane.
 * A cross-lane vperm2f128 costs ~2.4 cycles of the FP pipes on Zen 1, where a tree that began with four of them took
 * 6% of Llama's in-cache time. */
ALWAYS_INLINE void vreduce_all(const V *a, float *out) {
    V u[4], t[2];
    for (int i = 0; i < 4; i++) /* per lane: [a0 + a2, a1 + a3] of a[2i], then the same of a[2i + 1] */
        u[i] = vadd(_mm256_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                    _mm256_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int k = 0; k < 2; k++) /* per lane: the lane's part of the sums of a[4k .. 4k + 3], in order */
        t[k] = vadd(_mm256_shuffle_ps(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm256_shuffle_ps(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int k = 0; k < 2; k++)
        _mm_storeu_ps(out + 4 * k, _mm_add_ps(_mm256_castps256_ps128(t[k]), _mm256_extractf128_ps(t[k], 1)));
}
ALWAYS_INLINE V vround(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
ALWAYS_INLINE V vldexp(V p, V n) { /* p * 2^n, n in [-127, 128] after vexp's clamp: two factors stay finite */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    V s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    V s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return vmul(vmul(p, s1), s2);
}

#elif FDEC_ISA == 3
/* AArch64 Advanced SIMD (NEON): 4 lanes, 32 registers. f16 and the f32 FMAs are in every AArch64 core's base set. */
#include <arm_neon.h>
typedef float32x4_t V;
#define VW 4
#define NACC 16
#define NVREG 32
#define ISA_NAME neon
ALWAYS_INLINE void vpin(V *x) { __asm__("" : "+w"(*x)); }
ALWAYS_INLINE V vzero(void) { return vdupq_n_f32(0.0f); }
ALWAYS_INLINE V vset1(float x) { return vdupq_n_f32(x); }
ALWAYS_INLINE V vloadf(const float *p) { return vld1q_f32(p); }
ALWAYS_INLINE void vstoref(float *p, V x) { vst1q_f32(p, x); }
ALWAYS_INLINE V vfma(V a, V b, V c) { return vfmaq_f32(c, a, b); }
ALWAYS_INLINE V vfma_bcast(const float *p, V b, V c) { return vfmaq_n_f32(c, b, *p); }
ALWAYS_INLINE V vmul(V a, V b) { return vmulq_f32(a, b); }
ALWAYS_INLINE V vadd(V a, V b) { return vaddq_f32(a, b); }
ALWAYS_INLINE V vsub(V a, V b) { return vsubq_f32(a, b); }
ALWAYS_INLINE V vmax(V a, V b) { return vmaxq_f32(a, b); } /* a NaN in either is returned */
ALWAYS_INLINE V vmin(V a, V b) { return vminq_f32(a, b); }
ALWAYS_INLINE float vhsum(V x) { return vaddvq_f32(x); }
ALWAYS_INLINE float vhmax(V x) { return vmaxvq_f32(x); }
ALWAYS_INLINE int vany_gt(V a, V b) { return vmaxvq_u32(vcgtq_f32(a, b)) != 0; }
ALWAYS_INLINE V vload_kv(const void *p, fdec_dtype T) {
    if (T == FDEC_F32) return vld1q_f32(p);
    if (T == FDEC_F8_E4M3 || T == FDEC_F8_E5M2) { /* element by element (the AArch64 speed is not measured here) */
        float buf[4];
        for (int i = 0; i < 4; i++) buf[i] = load1(p, (size_t)i, T);
        return vld1q_f32(buf);
    }
    const uint16x4_t h = vld1_u16(p);
    if (T == FDEC_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}
/* out[i] = sum of a[i]'s lanes for the 16 vectors a[0..15]: pairwise adds, 12 for 16 sums */
ALWAYS_INLINE void vreduce_all(const V *a, float *out) {
    for (int g = 0; g < 4; g++)
        vst1q_f32(out + 4 * g, vpaddq_f32(vpaddq_f32(a[4 * g], a[4 * g + 1]), vpaddq_f32(a[4 * g + 2], a[4 * g + 3])));
}
ALWAYS_INLINE V vround(V x) { return vrndnq_f32(x); }
ALWAYS_INLINE V vldexp(V p, V n) { /* p * 2^n, n in [-127, 128] after vexp's clamp: two factors stay finite */
    const int32x4_t ni = vcvtnq_s32_f32(n), n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
    const V s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, vdupq_n_s32(127)), 23));
    const V s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, vdupq_n_s32(127)), 23));
    return vmul(vmul(p, s1), s2);
}

#else /* portable C: one lane; the compiler may still vectorise the loops around it */
typedef float V;
#define VW 1
#define NACC 8
#define NVREG 16
#define ISA_NAME scalar
ALWAYS_INLINE void vpin(V *x) { (void)x; }
ALWAYS_INLINE V vzero(void) { return 0.0f; }
ALWAYS_INLINE V vset1(float x) { return x; }
ALWAYS_INLINE V vloadf(const float *p) { return *p; }
ALWAYS_INLINE void vstoref(float *p, V x) { *p = x; }
ALWAYS_INLINE V vfma(V a, V b, V c) { return a * b + c; }
ALWAYS_INLINE V vfma_bcast(const float *p, V b, V c) { return *p * b + c; }
ALWAYS_INLINE V vmul(V a, V b) { return a * b; }
ALWAYS_INLINE V vadd(V a, V b) { return a + b; }
ALWAYS_INLINE V vsub(V a, V b) { return a - b; }
ALWAYS_INLINE V vmax(V a, V b) { return (isnan(b) || b > a) ? b : a; }
ALWAYS_INLINE V vmin(V a, V b) { return (isnan(b) || b < a) ? b : a; }
ALWAYS_INLINE float vhsum(V x) { return x; }
ALWAYS_INLINE float vhmax(V x) { return x; }
ALWAYS_INLINE int vany_gt(V a, V b) { return a > b; }
ALWAYS_INLINE V vload_kv(const void *p, fdec_dtype T) { return load1(p, 0, T); }
ALWAYS_INLINE V vload_kv_n(const void *p, uint32_t n, fdec_dtype T) {
    (void)p, (void)n, (void)T;
    return 0.0f; /* never called: VW == 1 has no tails */
}
ALWAYS_INLINE void vreduce_all(const V *a, float *out) {
    for (int i = 0; i < NACC; i++) out[i] = a[i];
}
ALWAYS_INLINE V vexp(V x) { return expf(x); }
#endif

/* vreduce_rows(a, out, pitch, P): the NACC sums of vreduce_all written as NACC / P rows of P, the sums of
 * a[h P .. h P + P) to out + h * pitch. Through memory where an ISA has nothing better: */
ALWAYS_INLINE void vreduce_rows_mem(const V *a, float *out, size_t pitch, const uint32_t P) {
    float sums[NACC];
    vreduce_all(a, sums);
    for (uint32_t h = 0; h < NACC / P; h++) memcpy(out + h * pitch, sums + h * P, P * sizeof(float));
}
#if FDEC_ISA == 2
/* With AVX-512 the rows of 4, 8 and 16 go straight from the register. Through the 64-byte array of vreduce_rows_mem,
 * copied 16 bytes at a time, the first copy's load waited on the 64-byte store. */
ALWAYS_INLINE void vreduce_rows(const V *a, float *out, size_t pitch, const uint32_t P) {
    if (P < 4) {
        vreduce_rows_mem(a, out, pitch, P);
        return;
    }
    const V r = vreduce_vec(a);
    if (P == 16) _mm512_storeu_ps(out, r);
    else if (P == 8) {
        _mm256_storeu_ps(out, _mm512_castps512_ps256(r));
        _mm256_storeu_ps(out + pitch, _mm512_extractf32x8_ps(r, 1));
    } else {
        _mm_storeu_ps(out, _mm512_castps512_ps128(r));
        _mm_storeu_ps(out + pitch, _mm512_extractf32x4_ps(r, 1));
        _mm_storeu_ps(out + 2 * pitch, _mm512_extractf32x4_ps(r, 2));
        _mm_storeu_ps(out + 3 * pitch, _mm512_extractf32x4_ps(r, 3));
    }
}
#else
ALWAYS_INLINE void vreduce_rows(const V *a, float *out, size_t pitch, const uint32_t P) {
    vreduce_rows_mem(a, out, pitch, P);
}
#endif

#if FDEC_ISA == 0 || FDEC_ISA == 3
/* Elements j .. j + VW of a Q8_0 / Q4_0 block at b, d its scale (vblock_scale): the codes element by element */
ALWAYS_INLINE V vload_block(const uint8_t *b, uint32_t j, fdec_dtype T, V d) {
    float buf[VW];
    for (uint32_t i = 0; i < VW; i++) buf[i] = (float)fdec_block_code(b, j + i, T);
    return vmul(vloadf(buf), d);
}
/* A Q8_0 / Q4_0 block's scale in every lane */
ALWAYS_INLINE V vblock_scale(const uint8_t *b, fdec_dtype T) {
    (void)T;
    return vset1(block_d(b));
}
#endif

/* Elements d .. d + VW of a K/V row at r: a plain type's at r + d elements, a block type's from its block */
ALWAYS_INLINE V vload_row(const char *r, uint32_t d, fdec_dtype T) {
    if (T == FDEC_Q8_0 || T == FDEC_Q4_0) {
        const uint8_t *b = (const uint8_t *)r + fdec_dtype_bytes(T, d);
        return vload_block(b, d % 32, T, vblock_scale(b, T));
    }
    return vload_kv(r + (size_t)d * fdec_dtype_size(T), T);
}

#if FDEC_ISA == 1 || FDEC_ISA == 3
/* AVX2 and NEON have no masked 16-bit load: a row's last, partial vector through a zeroed buffer */
ALWAYS_INLINE V vload_kv_n(const void *p, uint32_t n, fdec_dtype T) {
    float buf[VW] = {0};
    for (uint32_t i = 0; i < n; i++) buf[i] = load1(p, i, T);
    return vloadf(buf);
}
#endif

#if VW > 1
/* e^x = 2^n * p(r) with x = n ln2 + r, |r| <= ln2/2: the Cephes expf polynomial, shared by the vector ISAs. */
ALWAYS_INLINE V vexp(V x) {
    x = vmax(vset1(EXP_LO), vmin(vset1(EXP_HI), x)); /* operands in this order so that NaN stays NaN */
    V n = vround(vmul(x, vset1(LOG2E)));
    V r = vfma(n, vset1(-LN2_HI), x);
    r = vfma(n, vset1(-LN2_LO), r);
    V p = vset1(EXP_P0);
    p = vfma(p, r, vset1(EXP_P1));
    p = vfma(p, r, vset1(EXP_P2));
    p = vfma(p, r, vset1(EXP_P3));
    p = vfma(p, r, vset1(EXP_P4));
    p = vfma(p, r, vset1(EXP_P5));
    p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
    return vldexp(p, n);
}
#endif

/* 1 / x for x >= 1: the hardware's estimate and Newton steps (a division's slow issue otherwise), to about 2^-22. */
ALWAYS_INLINE V vrecip(V x) {
#if FDEC_ISA == 2
    V r = _mm512_rcp14_ps(x);
#elif FDEC_ISA == 1
    V r = _mm256_rcp_ps(x);
    r = vmul(r, vfma(vsub(vzero(), x), r, vset1(2.0f)));
#elif FDEC_ISA == 3
    V r = vrecpeq_f32(x);
    r = vmulq_f32(r, vrecpsq_f32(x, r));
#else
    return 1.0f / x;
#endif
#if FDEC_ISA != 0
    return vmul(r, vfma(vsub(vzero(), x), r, vset1(2.0f)));
#endif
}

/* logits.h's fdec_softcap_tanh a vector at a time: 1 - 2 / (e^2x + 1), x clamped to [-9, 9]; a NaN stays NaN. */
ALWAYS_INLINE V vtanh(V x) {
    x = vmax(vset1(-9.0f), vmin(vset1(9.0f), x)); /* operands in this order so that NaN stays NaN */
    return vfma(vset1(-2.0f), vrecip(vadd(vexp(vadd(x, x)), vset1(1.0f))), vset1(1.0f));
}

#endif

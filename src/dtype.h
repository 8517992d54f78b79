/* dtype.h — the element types: one row each, the one place that knows a type's size and how its values convert
 * to and from f32. The checks, the reference, the tools and the backends' host code ask here; a kernel has its own
 * loader per instruction set (cpu/simd.h, cuda/common.cuh) for each K/V type. A new type is a row here plus those
 * loaders. */
#ifndef FDEC_DTYPE_H
#define FDEC_DTYPE_H

#include "flashdec.h"
#include "hd.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

float fdec_f16_to_f32(uint16_t h);
uint16_t fdec_f32_to_f16(float f); /* round to nearest even; overflow to inf */
float fdec_bf16_to_f32(uint16_t h);
uint16_t fdec_f32_to_bf16(float f); /* round to nearest even; NaN stays a quiet NaN */
float fdec_e4m3_to_f32(uint8_t x);
uint8_t fdec_f32_to_e4m3(float f); /* round to nearest even, saturating at +-448; NaN stays NaN */
float fdec_e5m2_to_f32(uint8_t x);
uint8_t fdec_f32_to_e5m2(float f); /* round to nearest even, saturating at +-57344; NaN stays NaN */

typedef struct {
    const char *name;            /* as messages and the tool spell it */
    uint32_t block, block_bytes; /* elements a block and its bytes (1 and the element's size for plain types) */
    uint32_t align;              /* the alignment an array of it needs */
    int kv_only;                 /* a K/V type only (q and out are f32, f16 or bf16) */
    float (*load)(const void *base, size_t i);     /* element i as f32, exactly */
    /* elements [i, i + n) from f32 (i and n whole blocks): rounded to nearest even, or quantised as ggml's reference
     * quantiser does */
    void (*store)(void *base, size_t i, const float *x, size_t n);
} fdec_dtype_info;

float fdec_load_f32(const void *base, size_t i);
float fdec_load_f16(const void *base, size_t i);
float fdec_load_bf16(const void *base, size_t i);
float fdec_load_e4m3(const void *base, size_t i);
float fdec_load_e5m2(const void *base, size_t i);
float fdec_load_q8_0(const void *base, size_t i);
float fdec_load_q4_0(const void *base, size_t i);
void fdec_store_f32(void *base, size_t i, const float *x, size_t n);
void fdec_store_f16(void *base, size_t i, const float *x, size_t n);
void fdec_store_bf16(void *base, size_t i, const float *x, size_t n);
void fdec_store_e4m3(void *base, size_t i, const float *x, size_t n);
void fdec_store_e5m2(void *base, size_t i, const float *x, size_t n);
void fdec_store_q8_0(void *base, size_t i, const float *x, size_t n);
void fdec_store_q4_0(void *base, size_t i, const float *x, size_t n);

#define FDEC_DTYPE_LAST FDEC_Q4_0
/* Indexed by fdec_dtype. In the header, so that a kernel's fdec_dtype_size(T) of a constant T is a constant. */
static const fdec_dtype_info fdec_dtype_table[FDEC_DTYPE_LAST + 1] = {
    /* FDEC_F32     */ {"f32", 1, 4, 4, 0, fdec_load_f32, fdec_store_f32},
    /* FDEC_F16     */ {"f16", 1, 2, 2, 0, fdec_load_f16, fdec_store_f16},
    /* FDEC_BF16    */ {"bf16", 1, 2, 2, 0, fdec_load_bf16, fdec_store_bf16},
    /* FDEC_F8_E4M3 */ {"f8_e4m3", 1, 1, 1, 1, fdec_load_e4m3, fdec_store_e4m3},
    /* FDEC_F8_E5M2 */ {"f8_e5m2", 1, 1, 1, 1, fdec_load_e5m2, fdec_store_e5m2},
    /* FDEC_Q8_0    */ {"q8_0", 32, 34, 2, 1, fdec_load_q8_0, fdec_store_q8_0},
    /* FDEC_Q4_0    */ {"q4_0", 32, 18, 2, 1, fdec_load_q4_0, fdec_store_q4_0},
};
/* ggml's code of element j (< 32) of a Q8_0 or Q4_0 block at b, whose f16 scale is b[0..1]: Q8_0 a signed byte;
 * Q4_0 a nibble minus 8, elements 0..15 in the low nibbles of the 16 code bytes and 16..31 in their high ones. The
 * element's value is the scale times its code. */
static inline int fdec_block_code(const uint8_t *b, uint32_t j, fdec_dtype t) {
    if (t == FDEC_Q8_0) return (int8_t)b[2 + j];
    return (int)(j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4) - 8;
}
/* ggml's reference quantisers' codes (quantize_row_q8_0_ref, quantize_row_q4_0_ref; dtype.c and the CUDA kv_write
 * kernel), from v = x / d for Q8_0 (round half away from zero) and from v = x / d + 8.5 for Q4_0 (truncated, at most
 * 15), defined for every float: the reference's casts are undefined where v is not finite (1 / d overflows for a
 * tiny block, or x is inf or NaN), which gives 0 for a NaN and the nearest code for an infinity here. */
FDEC_HD int fdec_q8_0_code(float v) {
    return v != v ? 0 : v >= 127.0f ? 127 : v <= -127.0f ? -127 : (int)roundf(v);
}
FDEC_HD int fdec_q4_0_code(float v) { return v != v || v < 0.0f ? 0 : v >= 15.0f ? 15 : (int)v; }
/* The block's scale d from m = max |x| (Q8_0: d = m / 127) or the element of largest magnitude (Q4_0: d = m / -8); a
 * block with a NaN gets a NaN scale, so that it reads back NaN as a 16-bit cache would. */
FDEC_HD float fdec_quant_scale(float m, int nan, int q4) { return nan ? NAN : q4 ? m / -8.0f : m / 127.0f; }

/* fp8: a scale applies (fdec_layer's k_scale...) */
static inline int fdec_dtype_is_fp8(fdec_dtype t) { return t == FDEC_F8_E4M3 || t == FDEC_F8_E5M2; }

/* Bytes of one element of a plain (unblocked) type; the alignment of any. */
static inline size_t fdec_dtype_size(fdec_dtype t) { return fdec_dtype_table[t].block_bytes; }
static inline size_t fdec_dtype_align(fdec_dtype t) { return fdec_dtype_table[t].align; }
/* Bytes of n elements (n a multiple of the type's block). */
static inline size_t fdec_dtype_bytes(fdec_dtype t, size_t n) {
    return n / fdec_dtype_table[t].block * fdec_dtype_table[t].block_bytes;
}
static inline const char *fdec_dtype_name(fdec_dtype t) {
    return (unsigned)t <= FDEC_DTYPE_LAST ? fdec_dtype_table[t].name : "?";
}
/* Element i of an array of type t as f32, and back. */
static inline float fdec_load_elem(const void *base, size_t i, fdec_dtype t) {
    return fdec_dtype_table[t].load(base, i);
}
static inline void fdec_store_elem(void *base, size_t i, fdec_dtype t, float x) { /* a plain type's */
    fdec_dtype_table[t].store(base, i, &x, 1);
}
/* Elements [i, i + n) of type t from f32 (whole blocks of a block type). */
static inline void fdec_store_row(void *base, size_t i, fdec_dtype t, const float *x, size_t n) {
    fdec_dtype_table[t].store(base, i, x, n);
}

#endif

/* dtype.h — the element types: one row each, the one place that knows a type's size and how its values convert
 * to and from f32. The checks, the reference, the tools and the backends' host code ask here; a kernel has its own
 * loader per instruction set (cpu/simd.h, cuda/common.cuh) for each K/V type. A new type is a row here plus those
 * loaders. */
#ifndef FDEC_DTYPE_H
#define FDEC_DTYPE_H

#include "flashdec.h"

#include <stddef.h>
#include <stdint.h>

float fdec_f16_to_f32(uint16_t h);
uint16_t fdec_f32_to_f16(float f); /* round to nearest even; overflow to inf */
float fdec_bf16_to_f32(uint16_t h);
uint16_t fdec_f32_to_bf16(float f); /* round to nearest even; NaN stays a quiet NaN */

typedef struct {
    const char *name;            /* as messages and the tool spell it */
    uint32_t block, block_bytes; /* elements a block and its bytes (1 and the element's size for plain types) */
    float (*load)(const void *base, size_t i);     /* element i as f32, exactly */
    void (*store)(void *base, size_t i, float x);  /* element i from f32, rounded to nearest even */
} fdec_dtype_info;

float fdec_load_f32(const void *base, size_t i);
float fdec_load_f16(const void *base, size_t i);
float fdec_load_bf16(const void *base, size_t i);
void fdec_store_f32(void *base, size_t i, float x);
void fdec_store_f16(void *base, size_t i, float x);
void fdec_store_bf16(void *base, size_t i, float x);

#define FDEC_DTYPE_LAST FDEC_BF16
/* Indexed by fdec_dtype. In the header, so that a kernel's fdec_dtype_size(T) of a constant T is a constant. */
static const fdec_dtype_info fdec_dtype_table[FDEC_DTYPE_LAST + 1] = {
    /* FDEC_F32  */ {"f32", 1, 4, fdec_load_f32, fdec_store_f32},
    /* FDEC_F16  */ {"f16", 1, 2, fdec_load_f16, fdec_store_f16},
    /* FDEC_BF16 */ {"bf16", 1, 2, fdec_load_bf16, fdec_store_bf16},
};

/* Bytes of one element of a plain (unblocked) type. */
static inline size_t fdec_dtype_size(fdec_dtype t) { return fdec_dtype_table[t].block_bytes; }
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
static inline void fdec_store_elem(void *base, size_t i, fdec_dtype t, float x) {
    fdec_dtype_table[t].store(base, i, x);
}

#endif

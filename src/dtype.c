/* dtype.c — the element conversions behind dtype.h's table: exact for f16/bf16 -> f32, round to nearest even for
 * f32 -> f16/bf16, in integer steps so that every platform gives the same bits. */
#include "dtype.h"

#include <string.h>

float fdec_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13); /* inf / nan */
    else if (exp) bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man) bits = sign;
    else { /* subnormal: normalise */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t fdec_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) { /* below f16 normal range: subnormal or zero, round to nearest even */
        if (ax < 0x33000000u) return (uint16_t)sign;
        /* value = man * 2^(E-150) and the f16 subnormal unit is 2^-24, so r = man >> (126 - E) */
        uint32_t man = (ax & 0x7fffff) | 0x800000, shift = 126 - (ax >> 23);
        uint32_t r = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((ax - 0x38000000u) >> 13), rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

float fdec_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t fdec_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}


float fdec_load_f32(const void *base, size_t i) { return ((const float *)base)[i]; }
float fdec_load_f16(const void *base, size_t i) { return fdec_f16_to_f32(((const uint16_t *)base)[i]); }
float fdec_load_bf16(const void *base, size_t i) { return fdec_bf16_to_f32(((const uint16_t *)base)[i]); }
void fdec_store_f32(void *base, size_t i, float x) { ((float *)base)[i] = x; }
void fdec_store_f16(void *base, size_t i, float x) { ((uint16_t *)base)[i] = fdec_f32_to_f16(x); }
void fdec_store_bf16(void *base, size_t i, float x) { ((uint16_t *)base)[i] = fdec_f32_to_bf16(x); }

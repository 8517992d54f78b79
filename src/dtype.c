/* dtype.c — the element conversions behind dtype.h's table: exact for f16/bf16 -> f32, round to nearest even for
 * f32 -> f16/bf16, in integer steps so that every platform gives the same bits. */
#include "dtype.h"

#include <math.h>
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
void fdec_store_f32(void *base, size_t i, const float *x, size_t n) { memcpy((float *)base + i, x, n * sizeof(float)); }
void fdec_store_f16(void *base, size_t i, const float *x, size_t n) {
    for (size_t j = 0; j < n; j++) ((uint16_t *)base)[i + j] = fdec_f32_to_f16(x[j]);
}
void fdec_store_bf16(void *base, size_t i, const float *x, size_t n) {
    for (size_t j = 0; j < n; j++) ((uint16_t *)base)[i + j] = fdec_f32_to_bf16(x[j]);
}

/* ---- fp8 (OCP): E4M3 (bias 7, no inf, NaN S.1111.111) and E5M2 (the top byte of an f16) ---- */

float fdec_e4m3_to_f32(uint8_t x) {
    const uint32_t s = x >> 7, e = (x >> 3) & 15, m = x & 7;
    float v;
    if (e == 15 && m == 7) v = NAN;
    else if (e) v = ldexpf(1.0f + m / 8.0f, (int)e - 7);
    else v = ldexpf(m / 8.0f, -6);
    return s ? -v : v;
}

/* f to the nearest of n-bit-mantissa fp8 values with exponent bias `bias` (E4M3: 3 bits, 7; E5M2: 2, 15), ties to
 * even, saturating at the largest finite `maxv`; returns the magnitude's bits (the sign is the caller's). */
static uint8_t fp8_bits(float a, int mbits, int bias, float maxv, uint8_t maxbits) {
    if (a >= maxv) return maxbits; /* saturate (also +inf) */
    if (a == 0.0f) return 0;
    int e;
    frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1): the exponent of a is e - 1 */
    int E = e - 1 + bias;
    if (E < 1) E = 0; /* subnormal: the unit is 2^(1 - bias - mbits) */
    const float unit = ldexpf(1.0f, (E ? E - bias : 1 - bias) - mbits);
    float q = a / unit; /* exact: a power-of-two division */
    float r = rintf(q);   /* ties to even under the default rounding mode */
    uint32_t mant = (uint32_t)r;
    if (E == 0) { /* subnormal, maybe rounded up into the first normal */
        return (uint8_t)mant; /* mant up to 2^mbits, which is exponent 1, mantissa 0: the same bits */
    }
    /* normal: mant in [2^mbits, 2^(mbits + 1)]; a carry moves to the next exponent */
    if (mant == (1u << (mbits + 1))) mant >>= 1, E++;
    const uint32_t bits = ((uint32_t)E << mbits) | (mant & ((1u << mbits) - 1));
    return bits > maxbits ? maxbits : (uint8_t)bits;
}

uint8_t fdec_f32_to_e4m3(float f) {
    if (f != f) return 0x7f;
    const uint8_t s = signbit(f) ? 0x80 : 0;
    return s | fp8_bits(fabsf(f), 3, 7, 448.0f, 0x7e);
}

float fdec_e5m2_to_f32(uint8_t x) { return fdec_f16_to_f32((uint16_t)((uint16_t)x << 8)); }

uint8_t fdec_f32_to_e5m2(float f) {
    if (f != f) return 0x7e;
    const uint8_t s = signbit(f) ? 0x80 : 0;
    return s | fp8_bits(fabsf(f), 2, 15, 57344.0f, 0x7b);
}

float fdec_load_e4m3(const void *base, size_t i) { return fdec_e4m3_to_f32(((const uint8_t *)base)[i]); }
float fdec_load_e5m2(const void *base, size_t i) { return fdec_e5m2_to_f32(((const uint8_t *)base)[i]); }
void fdec_store_e4m3(void *base, size_t i, const float *x, size_t n) {
    for (size_t j = 0; j < n; j++) ((uint8_t *)base)[i + j] = fdec_f32_to_e4m3(x[j]);
}
void fdec_store_e5m2(void *base, size_t i, const float *x, size_t n) {
    for (size_t j = 0; j < n; j++) ((uint8_t *)base)[i + j] = fdec_f32_to_e5m2(x[j]);
}

/* ---- ggml's Q8_0 and Q4_0 blocks: an f16 scale d, then the 32 elements' codes ---- */

static float block_scale(const uint8_t *b) { return fdec_f16_to_f32((uint16_t)(b[0] | b[1] << 8)); }
static void set_scale(uint8_t *b, float d) {
    const uint16_t h = fdec_f32_to_f16(d);
    b[0] = (uint8_t)h, b[1] = (uint8_t)(h >> 8);
}

float fdec_load_q8_0(const void *base, size_t i) {
    const uint8_t *b = (const uint8_t *)base + i / 32 * 34;
    return block_scale(b) * (float)fdec_block_code(b, (uint32_t)(i % 32), FDEC_Q8_0);
}

float fdec_load_q4_0(const void *base, size_t i) {
    const uint8_t *b = (const uint8_t *)base + i / 32 * 18;
    return block_scale(b) * (float)fdec_block_code(b, (uint32_t)(i % 32), FDEC_Q4_0);
}

/* As ggml's quantize_row_q8_0_ref: d = max |x| / 127, q = round(x / d) (half away from zero); a NaN: dtype.h. */
void fdec_store_q8_0(void *base, size_t i, const float *x, size_t n) {
    for (size_t k = 0; k < n; k += 32, x += 32) {
        uint8_t *b = (uint8_t *)base + (i + k) / 32 * 34;
        float amax = 0.0f;
        int nan = 0;
        for (int j = 0; j < 32; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax, nan |= x[j] != x[j];
        const float d = fdec_quant_scale(amax, nan, 0), id = d != 0.0f ? 1.0f / d : 0.0f;
        set_scale(b, d);
        for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)fdec_q8_0_code(x[j] * id);
    }
}

/* As ggml's quantize_row_q4_0_ref: the element of largest magnitude m (its sign kept), d = m / -8, code =
 * min(15, (int)(x / d + 8.5)); a NaN: dtype.h. */
void fdec_store_q4_0(void *base, size_t i, const float *x, size_t n) {
    for (size_t k = 0; k < n; k += 32, x += 32) {
        uint8_t *b = (uint8_t *)base + (i + k) / 32 * 18;
        float amax = 0.0f, mx = 0.0f;
        int nan = 0;
        for (int j = 0; j < 32; j++) {
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), mx = x[j];
            nan |= x[j] != x[j];
        }
        const float d = fdec_quant_scale(mx, nan, 1), id = d != 0.0f ? 1.0f / d : 0.0f;
        set_scale(b, d);
        for (int j = 0; j < 16; j++)
            b[2 + j] = (uint8_t)(fdec_q4_0_code(x[j] * id + 8.5f) | fdec_q4_0_code(x[j + 16] * id + 8.5f) << 4);
    }
}

/* fuzz_input.h — reading a fuzzer's bytes as numbers, shared by the harnesses. */
#ifndef FDEC_FUZZ_INPUT_H
#define FDEC_FUZZ_INPUT_H

#include "flashdec.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *p;
    size_t n;
} reader;

/* The next `bytes` bytes, big-endian; zeros once the input runs out. */
static inline uint32_t take(reader *r, unsigned bytes) {
    uint32_t x = 0;
    for (unsigned i = 0; i < bytes; i++) x = x << 8 | (r->n ? (r->n--, *r->p++) : 0);
    return x;
}

/* Small values most of the time, anything now and then: keeps most inputs valid and cheap. */
static inline uint32_t pick(reader *r, uint32_t small) {
    uint32_t sel = take(r, 1);
    if (sel < 200) return take(r, 2) % (small + 1);
    if (sel < 250) return take(r, 2);
    return take(r, 4);
}

/* A stride over size_t's whole range: 0 (dense) half the time, small ones, 32- and 64-bit ones, and the edges
 * (near 2^32, SIZE_MAX / 2 and SIZE_MAX), where size arithmetic wraps. */
static inline size_t pick_stride(reader *r) {
    const uint32_t sel = take(r, 1);
    if (sel < 128) return 0;
    if (sel < 210) return pick(r, 5000);
    if (sel < 230) return take(r, 4);
    if (sel < 240) return (size_t)take(r, 4) << 32 | take(r, 4);
    const size_t off = take(r, 1);
    switch (sel % 4) {
    case 0: return SIZE_MAX - off;
    case 1: return SIZE_MAX / 2 + off - 128;
    case 2: return ((size_t)1 << 32) + off - 128;
    default: return SIZE_MAX / (off + 2);
    }
}

/* Elements of a cache of `rows` rows of G heads of D elements, (rows - 1) ps + (G - 1) hs + D, into *end: computed
 * here, not by the library's kv.h, so that the harnesses size their buffers by their own arithmetic; 0 where there
 * are no rows or the sum wraps. */
static inline int fuzz_extent(size_t rows, size_t ps, size_t G, size_t hs, size_t D, size_t *end) {
    size_t a, b;
    return rows && !__builtin_mul_overflow(rows - 1, ps, &a) && !__builtin_mul_overflow(G - 1, hs, &b) &&
           !__builtin_add_overflow(a, b, end) && !__builtin_add_overflow(*end, D, end);
}

/* The harnesses' CPU contexts, made on first use: one thread, or (second) two. */
static inline fdec_context *fuzz_cpu_context(int second) {
    static fdec_context *ctx[2];
    if (!ctx[second]) {
        fdec_options o = fdec_default_options();
        o.threads = second ? 2 : 1;
        if (fdec_context_create(FDEC_BACKEND_CPU, &o, &ctx[second])) abort();
    }
    return ctx[second];
}

/* 4 for f32, 1 for fp8, else 2 (a dtype out of range too) */
static inline size_t fuzz_elem_size(uint32_t t) {
    return t == FDEC_F32 ? 4 : t == FDEC_F8_E4M3 || t == FDEC_F8_E5M2 ? 1 : 2;
}

/* One fdec_decode call read from the fuzz bytes (fuzz_decode.c, fuzz_decode_cuda.c): arbitrary layer fields (dtypes
 * out of range too), seq_len and strides, and the sizes the contract gives its buffers. */
typedef struct {
    fdec_layer L;
    uint32_t seq_len;
    int second;                   /* run it on the harness's second context */
    int finite;                   /* inputs made small and finite (fuzz_fill_inputs) */
    int must_refuse;              /* the cache's last byte lies past the address space: the call must fail */
    size_t qe, kv_elems;          /* elements of q and out, and of K and V up to the last one the strides reach */
    size_t qes, kes, oes;         /* element sizes (2 for a dtype out of range) */
    unsigned variants;            /* 1: softcap set (any bits), 2: sinks, 4: ALiBi slopes (arrays the harness fills) */
} fuzz_case;

/* The most K (or V) elements a case may reach: 2^18 for the fuzzers (and cache rows x position stride at most 1e6,
 * a bound that grows with this one); fuzz_decode_cuda's driver (-max-kv) and the tests take a larger one to read long
 * hand-made inputs. */
static size_t fuzz_max_kv = (size_t)1 << 18;

/* Reads a case; 0 when its buffers would be too large for a fuzzer to spend its time on (the call is valid but slow,
 * or, like 65536 heads of head_dim 1, needs 100s of MB of scratch). */
static inline int fuzz_case_read(reader *r, fuzz_case *c) {
    fdec_layer *L = &c->L;
    memset(c, 0, sizeof *c);
    L->head_dim = pick(r, 520);
    L->num_q_heads = pick(r, 16);
    L->num_kv_heads = pick(r, 8);
    uint32_t sc = take(r, 4);
    memcpy(&L->scale, &sc, 4);
    if (take(r, 1) < 128) L->scale = 0;
    L->window = pick(r, 300);
    L->ring_capacity = take(r, 1) < 128 ? 0 : pick(r, 300);
    L->q_dtype = (fdec_dtype)(take(r, 1) % 4); /* 3 is out of range on purpose */
    { /* K/V: the plain types, fp8 (one byte an element) and one out of range (ggml's block types, with their
       * blocks of 32, are the tests' and not drawn here) */
        static const int kvt[6] = {FDEC_F32, FDEC_F16, FDEC_BF16, FDEC_F8_E4M3, FDEC_F8_E5M2, 9};
        L->kv_dtype = (fdec_dtype)kvt[take(r, 1) % 6];
    }
    L->out_dtype = (fdec_dtype)(take(r, 1) % 4);
    L->kv_pos_stride = pick_stride(r);
    L->kv_head_stride = pick_stride(r);
    c->seq_len = take(r, 1) < 200 ? pick(r, 600) : take(r, 4);
    c->second = take(r, 1) & 1;
    const size_t D = L->head_dim, H = L->num_q_heads, G = L->num_kv_heads ? L->num_kv_heads : 1;
    const size_t hs = L->kv_head_stride ? L->kv_head_stride : D, rows = L->ring_capacity ? L->ring_capacity : c->seq_len;
    size_t ps = L->kv_pos_stride, end, bytes;
    /* the extent in bytes, checked for wrapping here as the library must: where it does not fit a size_t, the call
     * must be refused, and it gets buffers of one element, so that a read past them shows */
    int wraps = !ps && __builtin_mul_overflow(G, hs, &ps);
    wraps = wraps || (rows && D && (!fuzz_extent(rows, ps, G, hs, D, &end) ||
                                    __builtin_mul_overflow(end, fuzz_elem_size(L->kv_dtype), &bytes)));
    c->must_refuse = wraps;
    c->kv_elems = wraps ? 1 : rows && D ? end : 1;
    c->qe = H * D != 0 ? H * D : 1;
    if (!wraps && (c->kv_elems > fuzz_max_kv || (double)rows * ps > 1e6 * ((double)fuzz_max_kv / (1 << 18))))
        return 0;
    if (c->qe > ((size_t)1 << 16) || H > 1024) return 0;
    c->kes = fuzz_elem_size(L->kv_dtype), c->qes = fuzz_elem_size(L->q_dtype), c->oes = fuzz_elem_size(L->out_dtype);
    c->finite = take(r, 1) < 200;
    c->variants = take(r, 1) & 7;
    if (c->variants & 1) {
        const uint32_t cb = take(r, 4);
        memcpy(&L->softcap, &cb, 4);
        if (take(r, 1) < 160) L->softcap = 0.5f + (float)(cb % 1000) / 10.0f; /* mostly a valid cap */
    }
    return 1;
}

/* Fills dst with the remaining fuzz bytes, repeated (or a pattern when there are none). */
static inline void fuzz_fill(uint8_t *dst, size_t n, const uint8_t *src, size_t sn, uint8_t salt) {
    if (!sn) {
        for (size_t i = 0; i < n; i++) dst[i] = (uint8_t)(i * 13 + salt);
        return;
    }
    for (size_t i = 0; i < n; i += sn) memcpy(dst + i, src, n - i < sn ? n - i : sn);
    for (size_t i = 0; i < n; i += 61) dst[i] ^= salt; /* K and V differ */
}

/* n bytes of elements of es bytes from the rest of the fuzz bytes (r is not moved); with `finite`, bytes that decode
 * to small finite values (below 4) in every plain and fp8 type: the top byte of each element has its exponent's top
 * bits cleared. */
static inline void fuzz_fill_elems(const reader *r, uint8_t *dst, size_t n, uint8_t salt, int finite, size_t es) {
    fuzz_fill(dst, n, r->p, r->n, salt);
    if (finite)
        for (size_t i = es - 1; i < n; i += es) dst[i] &= 0x3b;
}

/* q, K and V of a case from the rest of the fuzz bytes (r is not moved), small and finite with c->finite. */
static inline void fuzz_fill_inputs(const reader *r, const fuzz_case *c, uint8_t *q, uint8_t *k, uint8_t *v) {
    fuzz_fill_elems(r, q, c->qe * c->qes, 1, c->finite, c->qes);
    fuzz_fill_elems(r, k, c->kv_elems * c->kes, 2, c->finite, c->kes);
    fuzz_fill_elems(r, v, c->kv_elems * c->kes, 3, c->finite, c->kes);
}

#endif

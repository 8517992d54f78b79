/* kv.h — the K/V address rule: where the vector of position t and KV head g lives. Every reader of a cache (the
 * reference, the CPU kernels, the CUDA kernels, the tools) asks here.
 *
 *     element offset = seq * ss + pos(t) + g * hs
 *     pos(t) = row(t) * ps,  row(t) = ring ? t % ring : t                       (a contiguous cache)
 *     pos(t) = pages[t / page_size] * page_stride + (t % page_size) * ps       (a paged cache)
 *
 * ps, hs: the layer's position and head strides (elements); ss: elements between the caches of the sequences of a
 * batch (0 for a single call or a paged cache); ring: the ring capacity (0: contiguous); pages: the sequence's row of
 * the page table. Rows of consecutive positions are ps apart up to the ring's end or the page's (fdec_kv_run), which
 * is what the kernels stream. The positions a query token attends are here too (fdec_tok_pos, fdec_tok_lo). */
#ifndef FDEC_KV_H
#define FDEC_KV_H

#include "hd.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t ps, hs, ss;    /* position, head and sequence strides, elements */
    uint32_t ring;        /* 0 or the ring capacity */
    uint32_t page_size;   /* 0 (contiguous) or the positions of a page */
    /* page_size a power of two above 1: page_size - 1 and its log2, so that the rule shifts instead of dividing (a
     * division is ~20 instructions on the GPU, for every row a kernel copies); else 0 (fdec_kv_set_pages sets them) */
    uint32_t page_mask, page_shift;
    size_t page_stride;   /* elements between pages */
    const int32_t *pages; /* a paged cache: the sequence's page ids, position t in pages[t / page_size] */
} fdec_kv_layout;

/* Overflow-checked size arithmetic, for every sum and product of strides, rows and offsets: 1 and *r = a * b (a + b),
 * or 0 where the result would wrap. */
FDEC_HD int fdec_size_mul(size_t a, size_t b, size_t *r) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *r = a * b;
    return 1;
}
FDEC_HD int fdec_size_add(size_t a, size_t b, size_t *r) {
    if (b > SIZE_MAX - a) return 0;
    *r = a + b;
    return 1;
}

/* The elements a cache spans: one past the last element of the vectors (t, g), t < rows, g < G, of D elements,
 * (rows - 1) ps + (G - 1) hs + D, into *end; 0 where that does not fit a size_t. */
FDEC_HD int fdec_kv_extent(const fdec_kv_layout *L, uint64_t rows, uint32_t G, uint32_t D, size_t *end) {
    size_t a, b, ab;
    if (rows < 1 || G < 1 || rows - 1 > SIZE_MAX) return 0;
    return fdec_size_mul((size_t)(rows - 1), L->ps, &a) && fdec_size_mul((size_t)G - 1, L->hs, &b) &&
           fdec_size_add(a, b, &ab) && fdec_size_add(ab, D, end);
}

/* Positions are below 2^32 (seq_len is a uint32_t): the divisions below are 32-bit ones, several times cheaper
 * than 64-bit ones on the GPU, where they run for every row a copy reads from a page. */

/* The cache row of position t. */
FDEC_HD uint64_t fdec_kv_row(const fdec_kv_layout *L, uint64_t t) { return L->ring ? (uint32_t)t % L->ring : t; }

/* The row of position lo + d of a ring whose position lo is in row lo_row, for d < ring: one compare and
 * subtraction instead of a division (the GPU kernels' form, fdec_cache_row). */
FDEC_HD uint32_t fdec_kv_ring_row(uint32_t ring, uint32_t lo_row, uint32_t d) {
    const uint32_t row = lo_row + d;
    return row >= ring ? row - ring : row;
}

/* How many of the n positions from t have rows ps apart, starting at pos(t): n, or fewer where the ring or the page
 * ends. The kernels stream such runs. */
FDEC_HD uint64_t fdec_kv_run(const fdec_kv_layout *L, uint64_t t, uint64_t n) {
    const uint64_t left = L->page_size ? L->page_size - (L->page_mask ? (uint32_t)t & L->page_mask
                                                                      : (uint32_t)t % L->page_size)
                                       : L->ring ? L->ring - (uint32_t)t % L->ring : n;
    return left < n ? left : n;
}

/* A paged layout: pages of page_size positions, page_stride elements apart. */
FDEC_HD void fdec_kv_set_pages(fdec_kv_layout *L, uint32_t page_size, size_t page_stride) {
    L->page_size = page_size, L->page_stride = page_stride;
    L->page_mask = L->page_shift = 0;
    if (page_size > 1 && (page_size & (page_size - 1)) == 0) {
        L->page_mask = page_size - 1;
        while (1u << L->page_shift != page_size) L->page_shift++;
    }
}

/* The element offset of position t's vector of KV head 0. */
FDEC_HD size_t fdec_kv_pos(const fdec_kv_layout *L, uint64_t t) {
    if (L->page_size) {
        const uint32_t pg = L->page_mask ? (uint32_t)t >> L->page_shift : (uint32_t)t / L->page_size;
        return (size_t)L->pages[pg] * L->page_stride + (size_t)((uint32_t)t - pg * L->page_size) * L->ps;
    }
    return (size_t)fdec_kv_row(L, t) * L->ps;
}

/* The element offset of slot s's vector of KV head 0 (fdec_kv_write's slot mapping): a paged cache's page
 * s / page_size, row s % page_size; a contiguous cache's row s. */
FDEC_HD size_t fdec_kv_slot(const fdec_kv_layout *L, uint64_t s) {
    if (L->page_size) return (size_t)(s / L->page_size) * L->page_stride + (size_t)(s % L->page_size) * L->ps;
    return (size_t)s * L->ps;
}

/* An fp8 cache's scales (flashdec.h: K = k_scale * fp8, V likewise), per KV head where ks / vs are given (host arrays
 * on the CPU, device arrays read by the CUDA kernels): the CPU kernels fold them into q and the output, the CUDA
 * kernels into q and the chunk's o. k and v hold 1 where the layer's are 0; 1 for every other K/V type. */
typedef struct {
    float k, v;
    const float *ks, *vs;
} fdec_kv_scales;

/* KV head g's scale of K (which 0) or V (1); an array's 0 means 1. */
FDEC_HD float fdec_kv_scale_at(const fdec_kv_scales *s, uint32_t g, int which) {
    const float *a = which ? s->vs : s->ks;
    const float x = a ? a[g] : which ? s->v : s->k;
    return x != 0.0f ? x : 1.0f;
}

/* Query token i's position and the first position it attends (flashdec.h, "Rows"): token nq - 1 is at qpos, the
 * ones before it one position earlier each, and each attends [lo, its position] (causal among the new tokens). */
FDEC_HD uint64_t fdec_tok_pos(uint64_t qpos, uint32_t nq, uint32_t i) { return qpos - (nq - 1 - i); }
FDEC_HD uint64_t fdec_tok_lo(uint64_t pos, uint32_t window) { return window && pos + 1 > window ? pos + 1 - window : 0; }

/* The element offset of position t, KV head g, of sequence seq. */
FDEC_HD size_t fdec_kv_offset(const fdec_kv_layout *L, uint32_t seq, uint64_t t, uint32_t g) {
    return (size_t)seq * L->ss + fdec_kv_pos(L, t) + (size_t)g * L->hs;
}

#endif

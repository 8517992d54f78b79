/* fuzz_batch.c — libFuzzer harness: arbitrary batches into fdec_decode_batch, fdec_plan_batch and
 * fdec_context_reserve_batch, and arbitrary slot mappings into fdec_kv_write, on the CPU backend, built with
 * AddressSanitizer and UndefinedBehaviorSanitizer (make fuzz).
 *
 * Buffers are exactly as large as the contract says (flashdec.h, "batches"): q and out one row per query token, a
 * contiguous sequence b's cache up to the last element of its rows at b * kv_seq_stride, a page pool up to the last
 * element of its last page; so a read or write past them is a bug the sanitizer reports. A call that fails must
 * leave out and lse (or the caches, for fdec_kv_write) untouched and say why; a decode that succeeds on finite inputs
 * gives finite outputs within the range of V; a write changes the bytes of the slots it names and no others.
 */
#include "flashdec.h"
#include "fuzz_input.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The most K (or V) elements, and query rows x heads x head_dim, a case may take. */
#define MAX_KV ((size_t)1 << 18)
#define MAX_Q ((size_t)1 << 16)

/* Bytes of n elements of K/V type t, rounded up to whole blocks; 2 a element for a type out of range. */
static size_t kv_bytes(uint32_t t, size_t n) {
    if (t == FDEC_Q8_0) return (n + 31) / 32 * 34;
    if (t == FDEC_Q4_0) return (n + 31) / 32 * 18;
    return n * fuzz_elem_size(t);
}

/* n items `stride` apart, the last spanning `one`: (n - 1) stride + one into *end; 0 where it wraps. */
static int span(size_t n, size_t stride, size_t one, size_t *end) {
    return n && !__builtin_mul_overflow(n - 1, stride, end) && !__builtin_add_overflow(*end, one, end);
}

/* A stride: mostly `valid` (the smallest that works) or a little more, now and then anything (pick_stride). */
static size_t pick_near(reader *r, size_t valid) {
    const uint32_t sel = take(r, 1);
    if (sel < 160) return valid;
    if (sel < 220) return valid + pick(r, 64);
    return pick_stride(r);
}

static void *alloc(size_t bytes) { return malloc(bytes ? bytes : 1); }


/* One fdec_kv_write into caches of its own, sized by its slots' contract. */
static void fuzz_write(reader *r, fdec_context *ctx, fdec_layer L, size_t ps, size_t hs, uint32_t page_size) {
    const size_t D = L.head_dim, G = L.num_kv_heads;
    fdec_kv_slots s = {0};
    s.num_tokens = pick(r, 24);
    s.num_slots = pick(r, 300);
    s.page_size = page_size;
    s.src_dtype = (fdec_dtype)(take(r, 1) % 4);
    size_t one, pst = 0, end, ok;
    ok = fuzz_extent(s.page_size ? s.page_size : s.num_slots, ps, G, hs, D, &one);
    if (s.page_size) {
        ok = ok && !__builtin_mul_overflow((size_t)s.page_size, ps, &pst);
        s.kv_page_stride = pick_near(r, pst);
        if (s.kv_page_stride) pst = s.kv_page_stride;
        ok = ok && span((s.num_slots + s.page_size - 1) / s.page_size, pst, one, &end);
    } else
        end = one;
    if (!ok || end > MAX_KV || s.num_tokens > 4096 || (size_t)s.num_tokens * G * D > MAX_Q) return;
    const size_t kb = kv_bytes(L.kv_dtype, end), sb = (size_t)s.num_tokens * G * D * fuzz_elem_size(s.src_dtype);
    int64_t *slots = alloc(s.num_tokens * sizeof(int64_t));
    for (uint32_t i = 0; i < s.num_tokens; i++) {
        const uint32_t sel = take(r, 1);
        slots[i] = sel < 200 ? (int64_t)(take(r, 2) % (s.num_slots ? s.num_slots : 1))
                   : sel < 230 ? -1
                               : (int64_t)(int32_t)take(r, 4);
    }
    s.slots = take(r, 1) < 250 ? slots : NULL;
    uint8_t *ksrc = alloc(sb), *vsrc = alloc(sb), *k = alloc(kb), *v = alloc(kb), *k0 = alloc(kb), *v0 = alloc(kb);
    fuzz_fill_elems(r, ksrc, sb, 4, 1, fuzz_elem_size(s.src_dtype));
    fuzz_fill_elems(r, vsrc, sb, 5, 1, fuzz_elem_size(s.src_dtype));
    memset(k, 0x5a, kb), memset(v, 0xa5, kb), memcpy(k0, k, kb), memcpy(v0, v, kb);
    const fdec_status st = fdec_kv_write(ctx, &L, &s, ksrc, vsrc, k, v);
    if (st != FDEC_OK) {
        if (memcmp(k, k0, kb) || memcmp(v, v0, kb)) abort(); /* a refused write wrote */
        if (!fdec_last_error()[0]) abort();
    } else if (s.num_tokens) {
        /* the bytes of the named slots' vectors may change, no others (offsets are whole blocks of a block type) */
        uint8_t *mine = calloc(kb ? kb : 1, 1);
        for (uint32_t i = 0; i < s.num_tokens; i++) {
            if (slots[i] < 0) continue;
            const uint64_t t = (uint64_t)slots[i];
            const size_t row = s.page_size ? (size_t)(t / s.page_size) * pst + (size_t)(t % s.page_size) * ps
                                           : (size_t)t * ps;
            for (size_t g = 0; g < G; g++)
                memset(mine + kv_bytes(L.kv_dtype, row + g * hs), 1, kv_bytes(L.kv_dtype, D));
        }
        for (size_t i = 0; i < kb; i++)
            if (!mine[i] && (k[i] != k0[i] || v[i] != v0[i])) abort(); /* wrote outside its slots */
        free(mine);
    }
    free(slots), free(ksrc), free(vsrc), free(k), free(v), free(k0), free(v0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    const int write = take(&r, 1) < 64; /* fdec_kv_write, else the batch calls */
    uint32_t page_size; /* the batch's or the write's: read early, so that short inputs take both kinds of cache */
    {
        static const uint32_t sizes[8] = {1, 2, 3, 5, 8, 16, 32, 64};
        const uint32_t sel = take(&r, 1);
        page_size = sel < 100 ? 0 : sel < 240 ? sizes[sel % 8] : pick(&r, 100);
    }
    fdec_layer L;
    memset(&L, 0, sizeof L);
    L.head_dim = pick(&r, 160);
    L.num_kv_heads = pick(&r, 8);
    L.num_q_heads = take(&r, 1) < 230 ? L.num_kv_heads * (1 + take(&r, 1) % 8) : pick(&r, 16); /* mostly a GQA group */
    const uint32_t sc = take(&r, 4);
    memcpy(&L.scale, &sc, 4);
    if (take(&r, 1) < 128) L.scale = 0;
    L.window = take(&r, 1) < 128 ? 0 : pick(&r, 300);
    L.ring_capacity = take(&r, 1) < (write ? 240 : 200) ? 0 : pick(&r, 300);
    L.q_dtype = (fdec_dtype)(take(&r, 1) % 4);
    {
        static const int kvt[8] = {FDEC_F32, FDEC_F16, FDEC_BF16, FDEC_F8_E4M3, FDEC_F8_E5M2, FDEC_Q8_0, FDEC_Q4_0, 9};
        L.kv_dtype = (fdec_dtype)kvt[take(&r, 1) % 8];
    }
    L.out_dtype = (fdec_dtype)(take(&r, 1) % 4);
    if (take(&r, 1) < 40) L.softcap = 0.5f + (float)(take(&r, 2) % 1000) / 10.0f;
    L.kv_pos_stride = pick_stride(&r);
    L.kv_head_stride = pick_stride(&r);
    const size_t D = L.head_dim, H = L.num_q_heads, G = L.num_kv_heads ? L.num_kv_heads : 1;
    const size_t hs = L.kv_head_stride ? L.kv_head_stride : D;
    size_t ps = L.kv_pos_stride;
    if (!ps && __builtin_mul_overflow(G, hs, &ps)) return 0; /* fuzz_decode covers strides past the address space */
    fdec_context *ctx = fuzz_cpu_context(take(&r, 1) & 1);
    if (write) {
        fuzz_write(&r, ctx, L, ps, hs, page_size);
        return 0;
    }

    /* the batch: lengths, tokens, and a contiguous or a paged cache */
    fdec_batch b = {0};
    b.page_size = page_size;
    b.num_seqs = pick(&r, 6);
    if (b.num_seqs > 64) return 0;
    const uint32_t B = b.num_seqs;
    uint32_t lens[64], qls[64], maxlen = 0;
    for (uint32_t i = 0; i < B; i++) {
        lens[i] = take(&r, 1) < 250 ? 1 + pick(&r, 300) : pick(&r, 2);
        qls[i] = take(&r, 1) < 240 ? 1 + take(&r, 1) % 4 : pick(&r, 20);
        if (qls[i] > lens[i] && take(&r, 1) < 200) qls[i] = lens[i];
        if (lens[i] > maxlen) maxlen = lens[i];
    }
    b.seq_lens = take(&r, 1) < 250 ? lens : NULL;
    b.q_lens = take(&r, 1) < 100 ? NULL : qls;
    b.max_seq_len = take(&r, 1) < 230 ? maxlen : pick(&r, 400);
    b.max_q_len = take(&r, 1) < 230 ? 4 : pick(&r, 20);
    size_t end = 0, one;
    int32_t *table = NULL;
    if (b.page_size) {
        b.num_pages = take(&r, 1) < 240 ? 1 + take(&r, 1) % 12 : pick(&r, 12);
        const uint32_t need = (b.max_seq_len + b.page_size - 1) / b.page_size;
        b.max_pages = take(&r, 1) < 230 ? need : pick(&r, 64);
        if ((size_t)B * b.max_pages > 4096) return 0;
        table = alloc((size_t)B * b.max_pages * sizeof(int32_t));
        for (size_t i = 0; i < (size_t)B * b.max_pages; i++) {
            const uint32_t sel = take(&r, 1);
            table[i] = sel < 240 ? (int32_t)(take(&r, 1) % (b.num_pages ? b.num_pages : 1))
                       : sel < 250 ? -1
                                   : (int32_t)take(&r, 4);
        }
        b.page_table = take(&r, 1) < 250 ? table : NULL;
        size_t pst;
        if (!fuzz_extent(b.page_size, ps, G, hs, D, &one) || __builtin_mul_overflow((size_t)b.page_size, ps, &pst)) {
            free(table);
            return 0;
        }
        b.kv_page_stride = pick_near(&r, pst);
        if (b.kv_page_stride) pst = b.kv_page_stride;
        if (!span(b.num_pages ? b.num_pages : 1, pst, one, &end)) end = SIZE_MAX;
    } else {
        const size_t ring = L.ring_capacity;
        if (!fuzz_extent(ring ? ring : b.max_seq_len ? b.max_seq_len : 1, ps, G, hs, D, &one)) return 0;
        b.kv_seq_stride = B > 1 ? pick_near(&r, one) : take(&r, 1) < 200 ? 0 : pick_stride(&r);
        for (uint32_t i = 0; i < B && end != SIZE_MAX; i++) { /* sequence i: its own rows at i * kv_seq_stride */
            const size_t rows = ring ? ring : lens[i] ? lens[i] : 1;
            size_t e, off;
            if (!fuzz_extent(rows, ps, G, hs, D, &e) || __builtin_mul_overflow((size_t)i, b.kv_seq_stride, &off) ||
                __builtin_add_overflow(off, e, &e))
                end = SIZE_MAX;
            else if (e > end)
                end = e;
        }
    }
    size_t rows = 0;
    for (uint32_t i = 0; i < B; i++) rows += b.q_lens ? (qls[i] < FDEC_MAX_Q_LEN ? qls[i] : FDEC_MAX_Q_LEN) : 1;
    const size_t qe = rows * H * D;
    if (end > MAX_KV || qe > MAX_Q || H > 1024) {
        free(table);
        return 0;
    }
    const int finite = take(&r, 1) < 220;
    const size_t qes = fuzz_elem_size(L.q_dtype), oes = fuzz_elem_size(L.out_dtype);
    const size_t kb = kv_bytes(L.kv_dtype, end ? end : 1), ob = (qe ? qe : 1) * oes, lb = (rows ? rows : 1) * H * 4;
    uint8_t *q = alloc(qe * qes), *k = alloc(kb), *v = alloc(kb), *out = alloc(ob), *lse = alloc(lb);
    const int with_lse = take(&r, 1) & 1;
    fuzz_fill_elems(&r, q, qe * qes, 1, finite, qes);
    fuzz_fill_elems(&r, k, kb, 2, finite, fuzz_elem_size(L.kv_dtype));
    fuzz_fill_elems(&r, v, kb, 3, finite, fuzz_elem_size(L.kv_dtype));
    if (L.kv_dtype == FDEC_Q8_0 || L.kv_dtype == FDEC_Q4_0) /* each block's f16 scale small and finite */
        for (size_t i = 0; i + 1 < kb; i += L.kv_dtype == FDEC_Q8_0 ? 34 : 18) k[i + 1] &= 0x3b, v[i + 1] &= 0x3b;
    memset(out, 0x5a, ob), memset(lse, 0x5a, lb);

    const fdec_status st = fdec_decode_batch(ctx, &L, &b, q, k, v, out, with_lse ? (float *)lse : NULL);
    if (st != FDEC_OK) {
        for (size_t i = 0; i < ob; i++)
            if (out[i] != 0x5a) abort(); /* a failed call wrote out */
        for (size_t i = 0; i < lb; i++)
            if (lse[i] != 0x5a) abort();
        if (!fdec_last_error()[0]) abort(); /* and said nothing */
    } else if (finite && L.out_dtype == FDEC_F32 && fabsf(L.scale) <= 1e3f) {
        /* out is a weighted mean of V's rows: V's elements are below 4 in size, a block type's below 128 (codes up to
         * 127 times a scale below 1) */
        const float vmax = L.kv_dtype == FDEC_Q8_0 || L.kv_dtype == FDEC_Q4_0 ? 128.0f : 4.0f;
        for (size_t i = 0; i < qe; i++)
            if (!isfinite(((float *)out)[i]) || fabsf(((float *)out)[i]) > vmax) abort();
    }
    fdec_plan_info info;
    const fdec_status sp = fdec_plan_batch(ctx, &L, &b, &info);
    const fdec_status sr = fdec_context_reserve_batch(ctx, &L, &b);
    if (st == FDEC_OK && (sp != FDEC_OK || sr != FDEC_OK)) abort(); /* plan and reserve refuse what decode ran */
    if ((sp == FDEC_OK) != (sr == FDEC_OK || sr == FDEC_ENOMEM)) abort(); /* plan and reserve agree */
    free(table), free(q), free(k), free(v), free(out), free(lse);
    return 0;
}

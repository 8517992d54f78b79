/* fuzz_decode.c — libFuzzer harness: arbitrary layer fields, seq_len, strides and buffers into fdec_decode and
 * fdec_plan on the CPU backend, built with AddressSanitizer and UndefinedBehaviorSanitizer (make fuzz).
 *
 * The buffers are allocated exactly as large as the contract says for the layer as given (q and out
 * num_q_heads x head_dim, K and V up to the last element the strides and rows reach), so any read or write
 * past them is a bug the sanitizer reports. A call that fails must leave out and lse untouched; one that
 * succeeds on finite inputs must give finite outputs within the range of V.
 */
#include "flashdec.h"
#include "fuzz_input.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Small values most of the time, anything now and then: keeps most inputs valid and cheap. */
static uint32_t pick(reader *r, uint32_t small) {
    uint32_t sel = take(r, 1);
    if (sel < 200) return take(r, 2) % (small + 1);
    if (sel < 250) return take(r, 2);
    return take(r, 4);
}

static size_t elem_size(uint32_t t) { return t == FDEC_F32 ? 4 : 2; }

/* Fills dst with the remaining fuzz bytes, repeated (or a pattern when there are none). */
static void fill(uint8_t *dst, size_t n, const uint8_t *src, size_t sn, uint8_t salt) {
    if (!sn) {
        for (size_t i = 0; i < n; i++) dst[i] = (uint8_t)(i * 13 + salt);
        return;
    }
    for (size_t i = 0; i < n; i += sn) memcpy(dst + i, src, n - i < sn ? n - i : sn);
    for (size_t i = 0; i < n; i += 61) dst[i] ^= salt; /* K and V differ */
}

static fdec_context *ctx1, *ctx2;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!ctx1) {
        fdec_options o = fdec_default_options();
        o.threads = 1;
        if (fdec_context_create(FDEC_BACKEND_CPU, &o, &ctx1)) abort();
        o.threads = 2;
        if (fdec_context_create(FDEC_BACKEND_CPU, &o, &ctx2)) abort();
    }
    reader r = {data, size};
    fdec_layer L;
    memset(&L, 0, sizeof L);
    L.head_dim = pick(&r, 520);
    L.num_q_heads = pick(&r, 16);
    L.num_kv_heads = pick(&r, 8);
    uint32_t sc = take(&r, 4);
    memcpy(&L.scale, &sc, 4);
    if (take(&r, 1) < 128) L.scale = 0;
    L.window = pick(&r, 300);
    L.ring_capacity = take(&r, 1) < 128 ? 0 : pick(&r, 300);
    L.q_dtype = (fdec_dtype)(take(&r, 1) % 4); /* 3 is out of range on purpose */
    L.kv_dtype = (fdec_dtype)(take(&r, 1) % 4);
    L.out_dtype = (fdec_dtype)(take(&r, 1) % 4);
    L.kv_pos_stride = take(&r, 1) < 128 ? 0 : pick(&r, 5000);
    L.kv_head_stride = take(&r, 1) < 128 ? 0 : pick(&r, 5000);
    uint32_t seq_len = take(&r, 1) < 200 ? pick(&r, 600) : take(&r, 4);
    fdec_context *ctx = take(&r, 1) & 1 ? ctx2 : ctx1;

    /* the sizes the contract gives for this layer (clamped so that a huge request is simply not called) */
    const size_t D = L.head_dim, H = L.num_q_heads, G = L.num_kv_heads ? L.num_kv_heads : 1;
    const size_t hs = L.kv_head_stride ? L.kv_head_stride : D, ps = L.kv_pos_stride ? L.kv_pos_stride : G * hs;
    const size_t rows = L.ring_capacity ? L.ring_capacity : seq_len;
    const size_t kv_elems = rows && D ? (rows - 1) * ps + (G - 1) * hs + D : 1;
    const size_t qe = H * D ? H * D : 1;
    /* a call past these sizes is valid but slow (or, like 65536 heads of head_dim 1, needs 100s of MB of
     * scratch): not what a fuzzer should spend its time on */
    if (kv_elems > ((size_t)1 << 18) || qe > ((size_t)1 << 16) || H > 1024 || (double)rows * ps > 1e6) return 0;
    const size_t kes = L.kv_dtype <= FDEC_BF16 ? elem_size(L.kv_dtype) : 2;
    const size_t qes = L.q_dtype <= FDEC_BF16 ? elem_size(L.q_dtype) : 2;
    const size_t oes = L.out_dtype <= FDEC_BF16 ? elem_size(L.out_dtype) : 2;
    uint8_t *q = malloc(qe * qes), *k = malloc(kv_elems * kes), *v = malloc(kv_elems * kes);
    uint8_t *out = malloc(qe * oes);
    float *lse = malloc((H ? H : 1) * sizeof(float));
    /* inputs: the rest of the fuzz data repeated, or small finite numbers */
    int finite = take(&r, 1) < 200;
    fill(q, qe * qes, r.p, r.n, 1);
    fill(k, kv_elems * kes, r.p, r.n, 2);
    fill(v, kv_elems * kes, r.p, r.n, 3);
    if (finite) { /* bytes that decode to small finite values in every dtype: clear the exponent's top bits */
        for (size_t i = 0; i < qe * qes; i++) q[i] &= (i % qes == qes - 1) ? 0x3b : 0xff;
        for (size_t i = 0; i < kv_elems * kes; i++)
            if (i % kes == kes - 1) k[i] &= 0x3b, v[i] &= 0x3b;
    }
    memset(out, 0x5a, qe * oes);
    memset(lse, 0x5a, (H ? H : 1) * sizeof(float));
    fdec_status st = fdec_decode(ctx, &L, seq_len, q, k, v, out, take(&r, 1) & 1 ? lse : NULL);
    if (st != FDEC_OK) {
        for (size_t i = 0; i < qe * oes; i++)
            if (out[i] != 0x5a) abort(); /* a failed call wrote out */
        for (size_t i = 0; i < (H ? H : 1) * sizeof(float); i++)
            if (((uint8_t *)lse)[i] != 0x5a) abort();
        if (!fdec_last_error()[0]) abort(); /* and said nothing */
    } else if (finite && L.out_dtype == FDEC_F32 && fabsf(L.scale) <= 1e3f) {
        for (size_t i = 0; i < H * D; i++)
            if (!isfinite(((float *)out)[i]) || fabsf(((float *)out)[i]) > 4.0f) abort();
    }
    fdec_plan_info info;
    fdec_status sp = fdec_plan(ctx, &L, seq_len, &info);
    if ((sp == FDEC_OK) != (st == FDEC_OK || st == FDEC_ENOMEM)) abort(); /* plan and decode agree on the layer */
    free(q), free(k), free(v), free(out), free(lse);
    return 0;
}

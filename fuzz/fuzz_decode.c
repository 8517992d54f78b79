/* fuzz_decode.c — libFuzzer harness: arbitrary layer fields, seq_len, strides and buffers into fdec_decode and
 * fdec_plan on the CPU backend (the logit variants' arrays too), built with AddressSanitizer and UndefinedBehaviorSanitizer (make fuzz).
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    fuzz_case c;
    if (!fuzz_case_read(&r, &c)) return 0;
    const uint32_t seq_len = c.seq_len;
    fdec_context *ctx = fuzz_cpu_context(c.second);
    const size_t D = c.L.head_dim, H = c.L.num_q_heads, qe = c.qe, qes = c.qes, oes = c.oes;
    uint8_t *q = malloc(qe * qes), *k = malloc(c.kv_elems * c.kes), *v = malloc(c.kv_elems * c.kes);
    uint8_t *out = malloc(qe * oes);
    float *lse = malloc((H ? H : 1) * sizeof(float));
    fuzz_fill_inputs(&r, &c, q, k, v);
    /* sinks and ALiBi slopes: exactly num_q_heads floats (a read past them shows), any bits, or with c.finite small
     * finite values (a sink may be -inf: no sink) */
    float *sinks = c.variants & 2 ? malloc((H ? H : 1) * sizeof(float)) : NULL;
    float *alibi = c.variants & 4 ? malloc((H ? H : 1) * sizeof(float)) : NULL;
    for (size_t h = 0; h < (H ? H : 1); h++) {
        uint32_t b = (uint32_t)take(&r, 4);
        float x;
        memcpy(&x, &b, 4);
        if (c.finite) x = (float)(b % 2001) / 100.0f - 10.0f;
        if (sinks) sinks[h] = c.finite && b % 7 == 0 ? -INFINITY : x;
        if (alibi) alibi[h] = c.finite ? fabsf(x) / 10.0f : x;
    }
    fdec_layer L = c.L;
    L.sinks = sinks, L.alibi_slopes = alibi;
    const int finite = c.finite && (!(c.variants & 1) || (L.softcap > 0 && isfinite(L.softcap)));
    memset(out, 0x5a, qe * oes);
    memset(lse, 0x5a, (H ? H : 1) * sizeof(float));
    fdec_status st = fdec_decode(ctx, &L, seq_len, q, k, v, out, take(&r, 1) & 1 ? lse : NULL);
    if (c.must_refuse && st == FDEC_OK) abort(); /* accepted a cache past the address space */
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
    free(q), free(k), free(v), free(out), free(lse), free(sinks), free(alibi);
    return 0;
}

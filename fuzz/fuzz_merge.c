/* fuzz_merge.c — libFuzzer harness for fdec_merge on the CPU backend, with ASan and UBSan (make fuzz).
 *
 * Arbitrary n (0 too), num_heads, head_dim, dtype (out of range too), NULL and misaligned pointers, lse values
 * from the fuzz bytes (-inf, NaN, huge), out aliasing outs[0] now and then. Every buffer is exactly as large as
 * the contract says, so a read or write past one is a bug the sanitizer reports. A failed call must leave out
 * and lse untouched and say why. A successful f32 merge of finite shards must give, element by element, a
 * value between the smallest and the largest of the non-empty shards' values (it is a weighted mean), and
 * lse >= every shard's lse.
 */
#include "flashdec.h"
#include "fuzz_input.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static fdec_context *ctx;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!ctx && fdec_context_create(FDEC_BACKEND_CPU, NULL, &ctx)) abort();
    reader r = {data, size};
    const uint32_t n = take(&r, 1) % 72, H = take(&r, 1) % 20, D = take(&r, 2) % 530;
    const uint32_t t = take(&r, 1) % 4; /* 3 is out of range on purpose */
    const uint32_t flags = take(&r, 1);
    const size_t es = t == FDEC_F32 ? 4 : 2, ob = (size_t)H * D * es, lb = H * sizeof(float);
    if (ob > (1u << 20)) return 0;
    uint8_t **outs = calloc(n ? n : 1, sizeof *outs);
    float **lses = calloc(n ? n : 1, sizeof *lses);
    const int finite = take(&r, 1) < 180;
    for (uint32_t i = 0; i < n; i++) {
        outs[i] = malloc(ob ? ob : 1);
        lses[i] = malloc(lb ? lb : 1);
        for (size_t b = 0; b < ob; b++) outs[i][b] = (uint8_t)take(&r, 1) ^ (uint8_t)(b * 7 + i);
        if (finite && t <= FDEC_BF16) /* small finite values in every dtype: clear the exponent's top bits */
            for (size_t b = es - 1; b < ob; b += es) outs[i][b] &= 0x3b;
        for (uint32_t h = 0; h < H; h++) {
            const uint32_t sel = take(&r, 1);
            uint32_t bits = take(&r, 4);
            float x;
            memcpy(&x, &bits, 4);
            lses[i][h] = sel < 40 ? -INFINITY : finite || sel < 200 ? (float)((int32_t)bits % 2000) / 16.0f : x;
        }
    }
    uint8_t *out = malloc(ob ? ob : 1);
    float *lse = malloc(lb ? lb : 1);
    memset(out, 0x5a, ob);
    memset(lse, 0x5a, lb);
    const void **po = calloc(n ? n : 1, sizeof *po); /* what the call gets: outs and lses, some replaced */
    const float **pl = calloc(n ? n : 1, sizeof *pl);
    for (uint32_t i = 0; i < n; i++) po[i] = outs[i], pl[i] = lses[i];
    void *dst = out;
    if (n && (flags & 3) == 1) po[take(&r, 1) % n] = NULL;
    if (n && (flags & 3) == 2) pl[take(&r, 1) % n] = NULL;
    if ((flags & 12) == 4) dst = NULL;
    if ((flags & 12) == 8 && ob > 1) dst = out + 1; /* misaligned for f16/bf16/f32 (and 1 byte short: refused) */
    const int alias = n && (flags & 48) == 16 && dst == out && po[0];
    if (alias) { /* out aliases outs[0]: the same values in out's buffer */
        memcpy(out, outs[0], ob);
        po[0] = out;
    }
    fdec_status st = fdec_merge(ctx, n, H, D, (fdec_dtype)t, n ? po : NULL, n ? pl : NULL, dst,
                                flags & 64 ? NULL : lse);
    if (st != FDEC_OK) {
        if (!fdec_last_error()[0]) abort();
        for (size_t b = 0; b < ob && !alias; b++)
            if (out[b] != 0x5a) abort();
        for (size_t b = 0; b < lb; b++)
            if (((uint8_t *)lse)[b] != 0x5a) abort();
    } else if (finite && t == FDEC_F32) {
        for (uint32_t h = 0; h < H; h++) {
            float mx = -INFINITY;
            for (uint32_t d = 0; d < D; d++) {
                float lo = INFINITY, hi = -INFINITY;
                for (uint32_t i = 0; i < n; i++) {
                    if (lses[i][h] == -INFINITY) continue;
                    const float x = ((const float *)outs[i])[(size_t)h * D + d];
                    lo = x < lo ? x : lo, hi = x > hi ? x : hi;
                }
                const float y = ((float *)out)[(size_t)h * D + d];
                if (lo == INFINITY) { /* every shard empty */
                    if (y != 0.0f) abort();
                } else {
                    const float slack = 1e-5f * fmaxf(fabsf(lo), fabsf(hi)) + 1e-30f;
                    if (!(y >= lo - slack && y <= hi + slack)) abort();
                }
            }
            for (uint32_t i = 0; i < n; i++) mx = lses[i][h] > mx ? lses[i][h] : mx;
            if (!(flags & 64) && !(lse[h] >= mx - 1e-4f * fabsf(mx))) abort();
        }
    }
    for (uint32_t i = 0; i < n; i++) free(outs[i]), free(lses[i]);
    free(outs), free(lses), free(po), free(pl), free(out), free(lse);
    return 0;
}

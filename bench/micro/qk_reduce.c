/* qk_reduce.c — what the score tile's reduction costs at the Gemma 4 full layer's geometry (bench/NOTES.md, CPU log
 * row 55). One tile as kern.h runs it at head_dim 512 and 8 heads a KV head: 32 d steps of 8 q loads (pinned), 2 f16 K
 * conversions and 16 FMAs, then the 16 accumulators' sums stored, by
 *   0  no reduction (each accumulator's lane 0 stored: the FMA loop alone)
 *   1  vreduce_vec, simd.h's transposing tree (24 vshufps, 6 vshuff32x4, 15 adds)
 *   2  the same sums with its first two levels as two blends and one in-lane permute per pair (bit-identical: checked)
 * 64 positions in L1, ns per tile and per 16 FMAs, three rounds. On Zen 4 (session 25), medians of 9: 159.7 / 167.6 / 168.3 ns:
 * the tree costs ~5% of the tile, the blends no less.
 *
 *   cc -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c -Isrc -Iinclude \
 *      bench/micro/qk_reduce.c -o /tmp/qk_reduce -lm && /tmp/qk_reduce */
#define FDEC_ISA 2
#include "cpu/simd.h"
#include <stdio.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static float q[8 * 512] __attribute__((aligned(64)));
static uint16_t k[64 * 512] __attribute__((aligned(64)));
static float sT[8 * 32 * 64] __attribute__((aligned(64)));

/* blend variant: same sums, level 1 and 2 with two blends and one in-lane permute */
static inline V red_blend(const V *a) {
    V w[8], u[4], z[2];
    for (int i = 0; i < 8; i++) { /* [x0+x2, x1+x3, y0+y2, y1+y3] per lane */
        V b1 = _mm512_mask_blend_ps(0xCCCC, a[2*i], a[2*i+1]);       /* [x0,x1,y2,y3] */
        V b2 = _mm512_mask_blend_ps(0xCCCC, a[2*i+1], a[2*i]);       /* [y0,y1,x2,x3] */
        w[i] = _mm512_add_ps(_mm512_permute_ps(b2, _MM_SHUFFLE(1,0,3,2)), b1); /* [x2+x0, x3+x1, y0+y2, y1+y3] */
    }
    for (int i = 0; i < 4; i++) { /* w = [a0,a1,b0,b1] (a,b pairs) ; want [A, B, C, D] = [w0_0+w0_1, w0_2+w0_3, w1_0+w1_1, w1_2+w1_3] */
        V b1 = _mm512_mask_blend_ps(0xAAAA, w[2*i], w[2*i+1]);       /* [x0,y1,x2,y3] */
        V b2 = _mm512_mask_blend_ps(0xAAAA, w[2*i+1], w[2*i]);       /* [y0,x1,y2,x3] */
        V s = _mm512_add_ps(_mm512_permute_ps(b2, _MM_SHUFFLE(2,3,0,1)), b1); /* [x1+x0, y0+y1, x3+x2, y2+y3] */
        u[i] = _mm512_permute_ps(s, _MM_SHUFFLE(3,1,2,0)); /* [x0+x1, x2+x3, y0+y1, y2+y3] */
    }
    for (int i = 0; i < 2; i++)
        z[i] = vadd(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                    _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return vadd(_mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                _mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

__attribute__((noinline)) static void run(int mode, int reps) {
    for (int r = 0; r < reps; r++)
    for (int j0 = 0; j0 < 64; j0 += 2) {
        V acc[16];
        for (int i = 0; i < 16; i++) acc[i] = vzero();
        const uint16_t *k0 = k + (size_t)j0 * 512, *k1 = k0 + 512;
        for (int d = 0; d < 512; d += 16) {
            V qv[8];
            for (int h = 0; h < 8; h++) { qv[h] = vloadf(q + h * 512 + d); vpin(&qv[h]); }
            V a = vload_kv(k0 + d, FDEC_F16), b = vload_kv(k1 + d, FDEC_F16);
            for (int h = 0; h < 8; h++) acc[h * 2] = vfma(a, qv[h], acc[h * 2]);
            for (int h = 0; h < 8; h++) acc[h * 2 + 1] = vfma(b, qv[h], acc[h * 2 + 1]);
        }
        float *o = sT + (size_t)(j0 / 2) * 16;
        if (mode == 0) for (int i = 0; i < 16; i++) memcpy(o + i, &acc[i], 4);
        else if (mode == 1) _mm512_storeu_ps(o, vreduce_vec(acc));
        else _mm512_storeu_ps(o, red_blend(acc));
    }
}
int main() {
    for (int i = 0; i < 8 * 512; i++) q[i] = (i % 7) * 0.01f;
    for (int i = 0; i < 64 * 512; i++) k[i] = 0x3c00 + (i % 5);
    /* check: blend and tree give the same bytes */
    V a[16]; for (int i = 0; i < 16; i++) { float t[16]; for (int l = 0; l < 16; l++) t[l] = (float)(i * 16 + l) * 1.37f + 1.0f / (l + 1); a[i] = _mm512_loadu_ps(t); }
    float x[16], y[16]; _mm512_storeu_ps(x, vreduce_vec(a)); _mm512_storeu_ps(y, red_blend(a));
    printf("same bytes: %s\n", memcmp(x, y, 64) ? "NO" : "yes");
    const char *nm[] = {"lane 0 (no reduction)", "vreduce_vec (tree)", "blend tree"};
    for (int round = 0; round < 3; round++)
        for (int m = 0; m < 3; m++) { double t = now(); run(m, 20000); t = now() - t; printf("%-24s %.1f ns a tile (%.3f ns per 16 FMAs)\n", nm[m], t / 20000 / 32 * 1e9, t / 20000 / 32 / 32 * 1e9); }
}

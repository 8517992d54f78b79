/* fma_mix_avx2.c — how the FP pipes of an AVX2 CPU take a mix of FMAs and other vector instructions: the AVX2
 * counterpart of fma_mix.c (bench/NOTES.md, CPU log row 40). Each variant is one asm block of 8 independent ymm
 * FMAs with:
 *   0  nothing else (the FMA rate)
 *   1  2 f16 -> f32 conversions from memory (vcvtph2ps ymm): the output pass's 16 dimensions a row
 *   2  the same as 4 conversions of 4 elements (vcvtph2ps xmm)
 *   3  4 broadcasts from memory (vbroadcastss ymm): the output pass's weights
 *   4  4 ymm loads: the score pass's q vectors
 *   5  the output pass at 4 heads: 2 conversions and 4 broadcasts feeding the 8 FMAs
 *   6  the bf16 widening kern.h does (vpmovzxwd + vpslld, 2 of them)
 *   7  f16 -> f32 by integer steps instead (vpmovzxwd, vpslld, vpsrad, vpand, 2 of them; normal numbers only)
 *   8  bf16 widening by unpacking with zeros (2 loads, 4 vpunpck[lh]wd xmm)
 *   9  8 vperm2f128 (the cross-lane step of a transposing reduction)
 *  10  8 vextractf128 + 8 xmm adds (the same step folded through 128-bit halves)
 * and prints ns per 8 FMAs, the best of three runs each. On the AMD EPYC (Zen 1) of session 15: 3.2-3.3, 4.9-5.1,
 * 4.9, 3.3, 3.2-3.3, 4.9-5.2, 4.1-4.2, 5.3-5.4, 3.2-3.3, 11.1-11.8, 5.8-6.2: a conversion takes FP pipe slots worth ~2 FMAs
 * (as integer steps too), loads, broadcasts and unpacks take none, a vperm2f128 ~2.4 cycles, an extract and an add ~0.8.
 *
 *   cc -O2 -mavx2 -mfma -mf16c bench/micro/fma_mix_avx2.c -o /tmp/fma_mix_avx2 && /tmp/fma_mix_avx2
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
float pbuf[64] __attribute__((aligned(64)));
uint16_t hbuf[64] __attribute__((aligned(64)));
#define F8                                                                                                      \
    "vfmadd231ps %%ymm0,%%ymm1,%%ymm8\n vfmadd231ps %%ymm0,%%ymm1,%%ymm9\n vfmadd231ps %%ymm0,%%ymm1,%%ymm10\n"  \
    "vfmadd231ps %%ymm0,%%ymm1,%%ymm11\n vfmadd231ps %%ymm0,%%ymm1,%%ymm12\n vfmadd231ps %%ymm0,%%ymm1,%%ymm13\n" \
    "vfmadd231ps %%ymm0,%%ymm1,%%ymm14\n vfmadd231ps %%ymm0,%%ymm1,%%ymm15\n"
#define CLOB "xmm0", "xmm1", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory"
#define PV_HEAD(r, off, a, b) "vbroadcastss " off "(%1),%%ymm" r "\n vfmadd231ps %%ymm0,%%ymm" r ",%%ymm" a "\n vfmadd231ps %%ymm1,%%ymm" r ",%%ymm" b "\n"
static void body(int v, const uint16_t *h, const float *p) {
    switch (v) {
    case 0: __asm__ volatile(F8 ::"r"(h), "r"(p) : CLOB); break;
    case 1: __asm__ volatile("vcvtph2ps (%0),%%ymm4\n vcvtph2ps 16(%0),%%ymm5\n" F8 ::"r"(h), "r"(p) : CLOB); break;
    case 2:
        __asm__ volatile("vcvtph2ps (%0),%%xmm4\n vcvtph2ps 8(%0),%%xmm5\n vcvtph2ps 16(%0),%%xmm6\n"
                         "vcvtph2ps 24(%0),%%xmm7\n" F8 ::"r"(h), "r"(p) : CLOB);
        break;
    case 3:
        __asm__ volatile("vbroadcastss (%1),%%ymm4\n vbroadcastss 4(%1),%%ymm5\n vbroadcastss 8(%1),%%ymm6\n"
                         "vbroadcastss 12(%1),%%ymm7\n" F8 ::"r"(h), "r"(p) : CLOB);
        break;
    case 4:
        __asm__ volatile("vmovups (%1),%%ymm4\n vmovups 32(%1),%%ymm5\n vmovups 64(%1),%%ymm6\n vmovups 96(%1),%%ymm7\n" F8 ::"r"(h),
                         "r"(p) : CLOB);
        break;
    case 5:
        __asm__ volatile("vcvtph2ps (%0),%%ymm0\n vcvtph2ps 16(%0),%%ymm1\n" PV_HEAD("4", "0", "8", "9")
                             PV_HEAD("5", "4", "10", "11") PV_HEAD("6", "8", "12", "13") PV_HEAD("7", "12", "14", "15")::"r"(h),
                         "r"(p) : CLOB);
        break;
    case 6:
        __asm__ volatile("vpmovzxwd (%0),%%ymm4\n vpslld $16,%%ymm4,%%ymm4\n vpmovzxwd 16(%0),%%ymm5\n"
                         "vpslld $16,%%ymm5,%%ymm5\n" F8 ::"r"(h), "r"(p) : CLOB);
        break;
    case 7:
        __asm__ volatile("vpmovzxwd (%0),%%ymm4\n vpslld $16,%%ymm4,%%ymm4\n vpsrad $3,%%ymm4,%%ymm4\n vpand %%ymm1,%%ymm4,%%ymm4\n"
                         "vpmovzxwd 16(%0),%%ymm5\n vpslld $16,%%ymm5,%%ymm5\n vpsrad $3,%%ymm5,%%ymm5\n vpand %%ymm1,%%ymm5,%%ymm5\n" F8 ::"r"(h),
                         "r"(p) : CLOB);
        break;
    case 8:
        __asm__ volatile("vmovdqu (%0),%%xmm4\n vpunpcklwd %%xmm4,%%xmm1,%%xmm5\n vpunpckhwd %%xmm4,%%xmm1,%%xmm6\n"
                         "vmovdqu 16(%0),%%xmm4\n vpunpcklwd %%xmm4,%%xmm1,%%xmm7\n vpunpckhwd %%xmm4,%%xmm1,%%xmm4\n" F8 ::"r"(h),
                         "r"(p) : CLOB);
        break;
    case 9:
        __asm__ volatile("vperm2f128 $0x31,%%ymm0,%%ymm1,%%ymm4\n vperm2f128 $0x31,%%ymm0,%%ymm1,%%ymm5\n"
                         "vperm2f128 $0x31,%%ymm0,%%ymm1,%%ymm6\n vperm2f128 $0x31,%%ymm0,%%ymm1,%%ymm7\n"
                         "vperm2f128 $0x20,%%ymm0,%%ymm1,%%ymm4\n vperm2f128 $0x20,%%ymm0,%%ymm1,%%ymm5\n"
                         "vperm2f128 $0x20,%%ymm0,%%ymm1,%%ymm6\n vperm2f128 $0x20,%%ymm0,%%ymm1,%%ymm7\n" F8 ::"r"(h),
                         "r"(p) : CLOB);
        break;
    default:
        __asm__ volatile("vextractf128 $1,%%ymm0,%%xmm4\n vextractf128 $1,%%ymm1,%%xmm5\n vextractf128 $1,%%ymm0,%%xmm6\n"
                         "vextractf128 $1,%%ymm1,%%xmm7\n vaddps %%xmm4,%%xmm0,%%xmm4\n vaddps %%xmm5,%%xmm1,%%xmm5\n"
                         "vaddps %%xmm6,%%xmm0,%%xmm6\n vaddps %%xmm7,%%xmm0,%%xmm7\n"
                         "vextractf128 $1,%%ymm0,%%xmm4\n vextractf128 $1,%%ymm1,%%xmm5\n vextractf128 $1,%%ymm0,%%xmm6\n"
                         "vextractf128 $1,%%ymm1,%%xmm7\n vaddps %%xmm4,%%xmm0,%%xmm4\n vaddps %%xmm5,%%xmm1,%%xmm5\n"
                         "vaddps %%xmm6,%%xmm0,%%xmm6\n vaddps %%xmm7,%%xmm0,%%xmm7\n" F8 ::"r"(h),
                         "r"(p) : CLOB);
        break;
    }
}
int main(void) {
    const char *names[] = {"8 FMAs",
                           "+ 2 vcvtph2ps ymm",
                           "+ 4 vcvtph2ps xmm",
                           "+ 4 vbroadcastss",
                           "+ 4 ymm loads",
                           "output pass, 4 heads",
                           "+ 2 bf16 widenings (shift)",
                           "+ 2 f16 by integer steps",
                           "+ 2 bf16 widenings (unpack)",
                           "+ 8 vperm2f128",
                           "+ 8 vextractf128 + 8 addps xmm"};
    const long N = 20000000;
    for (int v = 0; v < 11; v++) {
        double best = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            double t = now();
            for (long i = 0; i < N; i++) body(v, hbuf, pbuf);
            t = (now() - t) / N * 1e9;
            if (t < best) best = t;
        }
        printf("%2d %-32s %.3f ns per 8 FMAs\n", v, names[v], best);
    }
    return 0;
}

/* fma16.h — what the FMA-loop micro-benchmarks share (pf_cost.c, clock_probe.c, fetch_order.c): a monotonic clock
 * and one step of 16 independent zmm FMAs on registers (zmm8-23 accumulate zmm0-2; one 512-bit FMA a cycle on Zen 4,
 * so 16 cycles a step), with the registers it writes for an asm statement's clobber list. */
#ifndef FDEC_BENCH_FMA16_H
#define FDEC_BENCH_FMA16_H

#include <time.h>

static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define FMA16                                                                                                   \
    "vfmadd231ps %%zmm0,%%zmm1,%%zmm8\n vfmadd231ps %%zmm1,%%zmm0,%%zmm9\n"                                     \
    "vfmadd231ps %%zmm0,%%zmm1,%%zmm10\n vfmadd231ps %%zmm1,%%zmm0,%%zmm11\n"                                   \
    "vfmadd231ps %%zmm0,%%zmm1,%%zmm12\n vfmadd231ps %%zmm1,%%zmm0,%%zmm13\n"                                   \
    "vfmadd231ps %%zmm0,%%zmm1,%%zmm14\n vfmadd231ps %%zmm1,%%zmm0,%%zmm15\n"                                   \
    "vfmadd231ps %%zmm0,%%zmm2,%%zmm16\n vfmadd231ps %%zmm1,%%zmm2,%%zmm17\n"                                   \
    "vfmadd231ps %%zmm0,%%zmm2,%%zmm18\n vfmadd231ps %%zmm1,%%zmm2,%%zmm19\n"                                   \
    "vfmadd231ps %%zmm0,%%zmm2,%%zmm20\n vfmadd231ps %%zmm1,%%zmm2,%%zmm21\n"                                   \
    "vfmadd231ps %%zmm0,%%zmm2,%%zmm22\n vfmadd231ps %%zmm1,%%zmm2,%%zmm23\n"
#define FMA16_CLOB                                                                                              \
    "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19",   \
        "xmm20", "xmm21", "xmm22", "xmm23"

#endif

/* clock_probe.c — whether the core's clock or its pipeline gives way while it asks DRAM for lines (bench/NOTES.md,
 * CPU log row 67). A chain of C dependent integer adds a step (C cycles at any clock, one ALU of four, no memory)
 * is timed alone and with one prefetcht1 every e-th step into a stream walked as the Gemma 4 full layer's kernel
 * asks for it (1 KiB of every 2 KiB of a dense cache of 2 KV heads) or contiguously; the stream is 1 GiB (DRAM) or
 * 2 MiB (L2/L3). Nothing in the chain waits on the prefetch: if a step takes longer with it, either the clock fell
 * or the prefetch held up retirement (a full reorder buffer behind a prefetch that has no miss buffer yet). With
 * C = 64 one line is asked every 64 cycles (~3.6 GB/s); with C = 16, every 16 cycles, the layer's rate per core.
 * Then a chain of 24 adds a step beside 16 independent zmm FMAs (the FP pipes two thirds busy, the chain still what
 * sets the step), with and without one prefetch a step from the 1 GiB or an 8 MiB (L3) stream, strided.
 *
 *   cc -O2 -mavx512f bench/micro/clock_probe.c -o /tmp/clock_probe && /tmp/clock_probe
 *
 * Prints ns per step and C / ns (the clock, GHz, where nothing stalls), three rounds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "fma16.h"

#define A4 "add $1,%%rax\n add $1,%%rax\n add $1,%%rax\n add $1,%%rax\n"
#define A16 A4 A4 A4 A4
#define A64 A16 A16 A16 A16
#define A24 A16 A4 A4

static char *buf;

/* every: a prefetch every that many steps (0: none); span: the stream's bytes; strided: 1 KiB of every 2 KiB */
#define STEPS(CHAIN, C)                                                                                         \
    static double run##C(int every, size_t span, int strided, long steps) {                                     \
        uint64_t x = 0;                                                                                         \
        size_t off = 0;                                                                                         \
        int k = 0;                                                                                              \
        double t = now();                                                                                       \
        for (long s = 0; s < steps; s++) {                                                                      \
            __asm__ volatile(CHAIN : "+a"(x));                                                                  \
            if (every && ++k == every) {                                                                        \
                k = 0;                                                                                          \
                __builtin_prefetch(buf + off, 0, 2);                                                            \
                off += 64;                                                                                      \
                if (strided && (off & 1023) == 0) off += 1024;                                                  \
                if (off >= span) off = 0;                                                                       \
            }                                                                                                   \
        }                                                                                                       \
        t = now() - t;                                                                                          \
        if (x == 1) printf("!");                                                                                \
        return t / steps * 1e9;                                                                                 \
    }
STEPS(A64, 64)
STEPS(A16, 16)

/* 24 chained adds and 16 FMAs a step; a strided prefetch a step into `span` bytes if pf */
static double run_fma(int pf, size_t span, long steps) {
    uint64_t x = 0;
    size_t off = 0;
    double t = now();
    for (long s = 0; s < steps; s++) {
        __asm__ volatile(A24 FMA16 : "+a"(x)::FMA16_CLOB);
        if (pf) {
            __builtin_prefetch(buf + off, 0, 2);
            off += 64;
            if ((off & 1023) == 0) off += 1024;
            if (off >= span) off = 0;
        }
    }
    t = now() - t;
    if (x == 1) printf("!");
    return t / steps * 1e9;
}

int main(void) {
    const size_t big = (size_t)1 << 30, small = (size_t)2 << 20;
    buf = mmap(0, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return 1;
    memset(buf, 1, big);
    __asm__ volatile("vxorps %%zmm0,%%zmm0,%%zmm0\n vxorps %%zmm1,%%zmm1,%%zmm1\n vxorps %%zmm2,%%zmm2,%%zmm2" ::
                         : "xmm0", "xmm1", "xmm2");
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 2; c++) {
            const int C = c ? 16 : 64;
            const long steps = c ? 40000000 : 10000000;
            double (*run)(int, size_t, int, long) = c ? run16 : run64;
            double t0 = run(0, big, 0, steps), ts = run(1, big, 1, steps), tc = run(1, big, 0, steps);
            double t2 = run(2, big, 1, steps), tl = run(1, small, 1, steps), t1 = run(0, big, 0, steps);
            printf("round %d C=%2d ns/step (C/ns): alone %.2f (%.2f) | DRAM strided %.2f (%.2f) contiguous %.2f "
                   "(%.2f) strided every 2nd %.2f (%.2f) | 2 MiB strided %.2f (%.2f) | alone %.2f (%.2f)\n",
                   r, C, t0, C / t0, ts, C / ts, tc, C / tc, t2, C / t2, tl, C / tl, t1, C / t1);
        }
        const long n = 10000000;
        double f0 = run_fma(0, big, n), fd = run_fma(1, big, n), fl = run_fma(1, 8 << 20, n);
        printf("round %d C=24 with 16 FMAs a step, ns/step (24/ns): no prefetch %.2f (%.2f) | DRAM strided %.2f (%.2f) | "
               "8 MiB strided %.2f (%.2f)\n",
               r, f0, 24 / f0, fd, 24 / fd, fl, 24 / fl);
    }
    return 0;
}

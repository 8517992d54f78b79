/* pf_cost.c — what a software prefetch that goes to DRAM costs the FMAs beside it (bench/NOTES.md, CPU log row 66).
 * Each step is 16 independent zmm FMAs on registers (one FMA a cycle on Zen 4) plus, by variant:
 *   none          nothing else (the FMA rate)
 *   t1 L3         a prefetcht1 of the next line of a 2 MiB stream (L3-resident)
 *   t1 DRAM /e    a prefetcht1 of the next line of a 1 GiB stream, every e-th step (e = 1: the kernel's rate at the
 *                 Gemma 4 full layer, one 64-byte line of K or V per 16 FMAs)
 *   t0 DRAM       the same with prefetcht0
 *   load DRAM     a demand load of the line (vmovdqa64) instead of a prefetch
 *   cvt L2 (+t1)  a vcvtph2ps of 32 bytes from a 512 KiB stream (L2-resident, the kernel's K and V loads), with and
 *                 without the DRAM prefetch
 * The streams are walked either as a dense cache of 2 KV heads read one head at a time (1 KiB of every 2 KiB:
 * "strided", what the kernel asks for) or contiguously. PF_HUGE=1 backs the 1 GiB stream with transparent huge pages.
 *
 *   cc -O2 -mavx512f bench/micro/pf_cost.c -o /tmp/pf_cost && /tmp/pf_cost
 *
 * PF_SPANS=1 instead times prefetcht1 every step by the stream's size (8, 24, 64 MiB, 1 GiB; contiguous and strided):
 * which of the cost is the DRAM line and which the page walk (CPU log row 67).
 *
 * Prints ns per step (16 FMAs), three rounds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "fma16.h"

#define CLOB "xmm2", "xmm31", FMA16_CLOB

enum { NONE, T1, T0, LOAD };
static char *big, *l2;
static const size_t BIG = (size_t)1 << 30, L3SPAN = 2 << 20, L2SPAN = 512 << 10;

/* steps of 16 FMAs; op on the stream of `span` bytes every `every` steps; cvt: the L2 conversions too */
static double run(long steps, int op, size_t span, int every, int strided, int cvt) {
    __asm__ volatile("vxorps %%zmm0,%%zmm0,%%zmm0\n vxorps %%zmm1,%%zmm1,%%zmm1\n vxorps %%zmm2,%%zmm2,%%zmm2" ::
                         : "xmm0", "xmm1", "xmm2");
    size_t off = 0, loff = 0;
    const double t = now();
    for (long i = 0; i < steps; i++) {
        const char *p = big + off, *q = l2 + loff;
        const int o = i % every == 0 ? op : NONE;
        if (o != NONE) {
            off += 64;
            if (strided && (off & 1023) == 0) off += 1024; /* skip the other KV head's KiB */
            if (off >= span) off = 0;
        }
        loff += 32;
        if ((loff & 1023) == 0) loff += 1024;
        if (loff >= L2SPAN) loff = 0;
        if (cvt) __asm__ volatile("vcvtph2ps (%0), %%zmm2" ::"r"(q) : "xmm2");
        switch (o) {
        case NONE: __asm__ volatile(FMA16 ::: CLOB); break;
        case T1: __asm__ volatile("prefetcht1 (%0)\n" FMA16 ::"r"(p) : CLOB); break;
        case T0: __asm__ volatile("prefetcht0 (%0)\n" FMA16 ::"r"(p) : CLOB); break;
        case LOAD: __asm__ volatile("vmovdqa64 (%0), %%zmm31\n" FMA16 ::"r"(p) : CLOB); break;
        }
    }
    return (now() - t) / steps * 1e9;
}

int main(void) {
    big = aligned_alloc(2 << 20, BIG);
    l2 = aligned_alloc(4096, L2SPAN);
    if (!big || !l2) return 1;
    madvise(big, BIG, getenv("PF_HUGE") && atoi(getenv("PF_HUGE")) ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memset(big, 1, BIG);
    memset(l2, 0, L2SPAN);
    const long n = 4000000;
    printf("ns per 16 FMAs (PF_HUGE=%s)\n", getenv("PF_HUGE") ? getenv("PF_HUGE") : "0");
    if (getenv("PF_SPANS") && atoi(getenv("PF_SPANS"))) { /* prefetcht1 every step, by the stream's size (row 67) */
        for (int r = 0; r < 3; r++)
            printf("round %d: none %.3f | contiguous 8 MiB %.3f 24 MiB %.3f 64 MiB %.3f 1 GiB %.3f | strided 8 MiB %.3f "
                   "24 MiB %.3f 64 MiB %.3f 1 GiB %.3f | none %.3f\n",
                   r, run(n, NONE, 0, 1, 1, 0), run(n, T1, 8 << 20, 1, 0, 0), run(n, T1, 24 << 20, 1, 0, 0),
                   run(n, T1, 64 << 20, 1, 0, 0), run(n, T1, BIG, 1, 0, 0), run(n, T1, 8 << 20, 1, 1, 0),
                   run(n, T1, 24 << 20, 1, 1, 0), run(n, T1, 64 << 20, 1, 1, 0), run(n, T1, BIG, 1, 1, 0),
                   run(n, NONE, 0, 1, 1, 0));
        return 0;
    }
    for (int r = 0; r < 3; r++) {
        printf("round %d: none %.3f | strided: t1 L3 %.3f, t1 DRAM /1 %.3f /2 %.3f /4 %.3f, t0 DRAM %.3f, load DRAM "
               "%.3f | contiguous: t1 DRAM %.3f, t0 DRAM %.3f, load DRAM %.3f | cvt L2 %.3f, cvt L2 + t1 DRAM %.3f\n",
               r, run(n, NONE, 0, 1, 1, 0), run(n, T1, L3SPAN, 1, 1, 0), run(n, T1, BIG, 1, 1, 0),
               run(n, T1, BIG, 2, 1, 0), run(n, T1, BIG, 4, 1, 0), run(n, T0, BIG, 1, 1, 0),
               run(n, LOAD, BIG, 1, 1, 0), run(n, T1, BIG, 1, 0, 0), run(n, T0, BIG, 1, 0, 0),
               run(n, LOAD, BIG, 1, 0, 0), run(n, NONE, 0, 1, 1, 1), run(n, T1, BIG, 1, 1, 1));
    }
    return 0;
}

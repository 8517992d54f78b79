/* fetch_order.c — what fetching a dense cache's lines costs an FMA-bound core, by the order they are asked for in
 * (bench/NOTES.md, CPU log row 67). Each step: 16 independent zmm FMAs on registers (one FMA a cycle on Zen 4, the
 * Gemma 4 full layer's rate of one K or V line per 16 FMAs) and one demand load (a vaddps from memory) of the next line
 * of a 1 GiB "dense cache" of 2 KV heads (rows of 2 KiB: head 0's KiB, then head 1's), block by block (32 rows, 64
 * KiB). Variants: L2                      the kernel's order over a 512 KiB cache (L2-resident), with its prefetch: the
 * in-cache rate pf head order           within a block head 0's 32 rows then head 1's (the kernel's order), each step
 * also one prefetcht1 of the next block's line in the same order (what kern.h does) pf address order        the same,
 * the next block's lines asked for in address order (CPU log row 63 f) demand in address order the loads themselves in
 * address order, no software prefetch (the hardware prefetchers) zmm / byte touch        the kernel's order and,
 * instead of the prefetch, a demand load of the next block's line in address order (a zmm add or a byte read)
 *
 *   cc -O2 -mavx512f bench/micro/fetch_order.c -o /tmp/fetch_order && /tmp/fetch_order
 *
 * Prints ns per step, three rounds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "fma16.h"
#define CLOB "xmm24", FMA16_CLOB
#define M1(i, a) "vfmadd231ps " #i "*64(%0),%%zmm0,%%zmm" #a "\n"
#define MEM16                                                                                                          \
    M1(0, 8)                                                                                                           \
    M1(1, 9)                                                                                                           \
    M1(2, 10) M1(3, 11) M1(4, 12) M1(5, 13) M1(6, 14) M1(7, 15) M1(8, 16) M1(9, 17) M1(10, 18) M1(11, 19) M1(12, 20)   \
        M1(13, 21) M1(14, 22) M1(15, 23)
static char *buf;
static const size_t BIG = (size_t)1 << 30;
/* line i (0..1023) of a block in head order -> byte offset in the block */
static inline size_t head_order(unsigned i) {
    unsigned g = i >> 9, r = (i >> 4) & 31, l = i & 15;
    return (size_t)r * 2048 + g * 1024 + l * 64;
}
/* R rows at a time, their lines interleaved (row j line l, row j + 1 line l, ...), head 0's KiB then head 1's: the
 * order of score tiles of R positions (kern.h's have 2 at 8 heads a KV head) run for both KV heads row group by row
 * group */
static inline __attribute__((always_inline)) size_t group_order(unsigned i, const unsigned R) {
    unsigned per = R * 32; /* lines of a group: R rows x 2 heads x 16 lines */
    unsigned grp = i / per, k = i % per, g = k / (R * 16), m = k % (R * 16), l = m / R, r = m % R;
    return (size_t)(grp * R + r) * 2048 + g * 1024 + l * 64;
}
static uint64_t x;
/* mode 0: no prefetch; 1: pf head order; 2: pf address order; 3: demand in address order; 4, 5: the touches;
 * 6, 7, 8: rows 2, 4 or 1 at a time (group_order), no prefetch */
static double run(int mode, size_t span, long steps) {
    size_t blk = 0;
    unsigned i = 0;
    double t = now();
    for (long s = 0; s < steps; s++) {
        size_t at; /* the line this step loads, in the block */
        switch (mode) {
        case 3:
            at = (size_t)i * 64;
            break;
        case 6:
            at = group_order(i, 2);
            break;
        case 7:
            at = group_order(i, 4);
            break;
        case 8:
            at = group_order(i, 1);
            break;
        default:
            at = head_order(i);
        }
        const char *p = buf + blk + at;
        size_t nb = blk + 65536;
        if (nb >= span)
            nb = 0;
        const char *q = buf + nb + (mode == 2 || mode == 4 || mode == 5 ? (size_t)i * 64 : head_order(i));
        if (mode == 4)
            __asm__ volatile("vaddps (%1),%%zmm25,%%zmm25\n vaddps (%0),%%zmm24,%%zmm24\n" FMA16 ::"r"(p), "r"(q)
                             : CLOB, "xmm25");
        else if (mode == 5) {
            __asm__ volatile("vaddps (%0),%%zmm24,%%zmm24\n" FMA16 ::"r"(p) : CLOB);
            x += *(volatile const char *)q;
        } else if (mode == 1 || mode == 2)
            __asm__ volatile("prefetcht1 (%1)\n vaddps (%0),%%zmm24,%%zmm24\n" FMA16 ::"r"(p), "r"(q) : CLOB);
        else
            __asm__ volatile("vaddps (%0),%%zmm24,%%zmm24\n" FMA16 ::"r"(p) : CLOB);
        if (++i == 1024) {
            i = 0;
            blk = nb;
        }
    }
    return (now() - t) / steps * 1e9;
}
int main(void) {
    buf = mmap(0, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return 1;
    memset(buf, 0, BIG);
    __asm__ volatile("vxorps %%zmm0,%%zmm0,%%zmm0\n vxorps %%zmm1,%%zmm1,%%zmm1\n vxorps %%zmm2,%%zmm2,%%zmm2\n vxorps "
                     "%%zmm24,%%zmm24,%%zmm24" ::
                         : "xmm0", "xmm1", "xmm2", "xmm24");
    long n = 8000000;
    for (int r = 0; r < 3; r++)
        printf("round %d ns/step: L2 (512 KiB) %.3f | DRAM: pf head order %.3f | pf address order %.3f | demand in "
               "address order, no pf %.3f | zmm touch in address order %.3f | byte touch %.3f\n",
               r, run(1, 512 << 10, n), run(1, BIG, n), run(2, BIG, n), run(3, BIG, n), run(4, BIG, n), run(5, BIG, n));
    for (int r = 0; r < 3; r++)
        printf(
            "round %d ns/step, no prefetch: rows 1 at a time (head 0's KiB, head 1's) %.3f | 2 at a time %.3f | 4 at "
            "a time %.3f | address order %.3f\n",
            r, run(8, BIG, n), run(6, BIG, n), run(7, BIG, n), run(3, BIG, n));
    /* a score tile of one row feeds each FMA a q vector of its own: 16 FMAs each with a 64-byte operand from L1 */
    static float q[4096] __attribute__((aligned(64)));
    for (int r = 0; r < 3; r++) {
        const long m = 20000000;
        double t = now();
        for (long s = 0; s < m; s++) {
            const float *a = q + (s & 63) * 64;
            __asm__ volatile(MEM16 ::"r"(a) : CLOB);
        }
        const double tm = (now() - t) / m * 1e9;
        t = now();
        for (long s = 0; s < m; s++)
            __asm__ volatile(FMA16 ::: CLOB);
        const double tr = (now() - t) / m * 1e9;
        printf("round %d ns per 16 FMAs: each with a 64-byte L1 operand %.3f, on registers %.3f\n", r, tm, tr);
    }
}

/* pf_order.c — how fast one core can read a dense [pos][head][dim] cache in the order the CPU kernel walks it
 * (bench/NOTES.md, CPU log row 27). A block is NB positions (32, as kern.h); each variant loads every 64-byte line of a block
 * once (one 512-bit load a line, summed so the loads are not dropped) and, while it does, asks for the lines of
 * the block two ahead with prefetcht1, as kern.h does:
 *   0  the kernel's order: head by head, in each head its 32 rows (a stride of a whole position row)
 *   1  the same loads, but the prefetches of block b + 2 in address order (all heads of a row, row by row)
 *   2  loads and prefetches both in address order
 *   3  address order, no software prefetch (the hardware prefetchers alone)
 *   4  K and V in two halves: K read in tiles of 4 rows x every head (address order, 4 rows at a time), V head
 *      by head with the kernel's prefetch of V
 *   5  as 4, with the kernel's prefetch of K too
 *   6  the kernel's order, with the prefetches of variant 1 replaced by real loads of one float a line (a
 *      "touch" in address order, which the hardware prefetchers follow)
 *   7, 8  as 1, with a prefetch every 2nd / 4th line only (for the hardware prefetchers to fill in)
 * Geometry: head_dim D, G KV heads, f16 (row of a head: 2 D bytes); the cache is far larger than the L3 and the
 * threads read disjoint halves. Prints GB/s per variant, three rounds.
 *
 *   cc -O2 -mavx512f -pthread bench/micro/pf_order.c -o /tmp/pf_order && /tmp/pf_order [D G threads NB]
 *   (defaults 64 8 1 32: LFM2; 256 8: Gemma 4 sliding; 512 2: Gemma 4 full)
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t NB = 32; /* positions a block (argument 4) */
static size_t D = 64, G = 8, ROWS;
static int VARIANT, THREADS = 1;
static char *buf;
static volatile double sink[64]; /* volatile: the sums must be kept */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void *run(void *arg) {
    const int id = (int)(intptr_t)arg;
    const size_t rb = G * D * 2, hb = D * 2; /* bytes of a position row, of one head's part of it */
    const size_t r0 = ROWS / THREADS * id, r1 = r0 + ROWS / THREADS;
    __m512 acc = _mm512_setzero_ps();
    if (VARIANT == 4 || VARIANT == 5) { /* K and V, each half of the buffer */
        const char *K = buf, *V = buf + ROWS / 2 * rb;
        for (size_t b = r0 / 2; b < r1 / 2; b += NB) {
            const size_t pb = b + 2 * NB;
            const int pf = pb + NB <= r1 / 2;
            /* score pass: K in tiles of 4 rows x every head, i.e. address order 4 rows at a time */
            for (size_t j0 = 0; j0 < NB; j0 += 4)
                for (size_t g = 0; g < G; g++)
                    for (size_t j = j0; j < j0 + 4; j++)
                        for (size_t c = 0; c < hb; c += 64) acc = _mm512_add_ps(acc, _mm512_load_ps(K + (b + j) * rb + g * hb + c));
            /* output pass: V head by head, the V rows of block b + 2 asked for as the kernel does (and with
             * variant 5, the K rows of block b + 2 too) */
            for (size_t g = 0; g < G; g++) {
                if (pf)
                    for (size_t j = 0; j < NB; j++)
                        for (size_t c = 0; c < hb; c += 64) {
                            _mm_prefetch(V + (pb + j) * rb + g * hb + c, _MM_HINT_T1);
                            if (VARIANT == 5) _mm_prefetch(K + (pb + j) * rb + g * hb + c, _MM_HINT_T1);
                        }
                for (size_t j = 0; j < NB; j++)
                    for (size_t c = 0; c < hb; c += 64) acc = _mm512_add_ps(acc, _mm512_load_ps(V + (b + j) * rb + g * hb + c));
            }
        }
        sink[id * 8] = _mm512_reduce_add_ps(acc);
        return NULL;
    }
    for (size_t b = r0; b < r1; b += NB) {
        const size_t pb = b + 2 * NB; /* the block to prefetch */
        const int pf = VARIANT != 3 && pb + NB <= r1;
        if (VARIANT == 0 || VARIANT == 1 || VARIANT >= 6) {
            for (size_t g = 0; g < G; g++) {
                /* this head's share of the prefetches: the kernel's (head g of every row) or 1/G of the block's
                 * bytes in address order */
                if (pf && VARIANT == 0)
                    for (size_t j = 0; j < NB; j++)
                        for (size_t c = 0; c < hb; c += 64) _mm_prefetch(buf + (pb + j) * rb + g * hb + c, _MM_HINT_T1);
                if (pf && VARIANT == 1) {
                    const size_t lo = NB * rb / G * g, hi = lo + NB * rb / G;
                    for (size_t c = lo; c < hi; c += 64) _mm_prefetch(buf + pb * rb + c, _MM_HINT_T1);
                }
                if (pf && (VARIANT == 7 || VARIANT == 8)) { /* address order, every 2nd / 4th line */
                    const size_t lo = NB * rb / G * g, hi = lo + NB * rb / G, step = VARIANT == 7 ? 128 : 256;
                    for (size_t c = lo; c < hi; c += step) _mm_prefetch(buf + pb * rb + c, _MM_HINT_T1);
                }
                if (pf && VARIANT == 6) { /* touch: a real load of each line, in address order */
                    const size_t lo = NB * rb / G * g, hi = lo + NB * rb / G;
                    __m128 t = _mm_setzero_ps();
                    for (size_t c = lo; c < hi; c += 64) t = _mm_add_ss(t, _mm_load_ss((const float *)(buf + pb * rb + c)));
                    sink[id * 8 + 1] += _mm_cvtss_f32(t);
                }
                for (size_t j = 0; j < NB; j++)
                    for (size_t c = 0; c < hb; c += 64) acc = _mm512_add_ps(acc, _mm512_load_ps(buf + (b + j) * rb + g * hb + c));
            }
        } else {
            for (size_t c = 0; c < NB * rb; c += 64) {
                if (pf) _mm_prefetch(buf + pb * rb + c, _MM_HINT_T1);
                acc = _mm512_add_ps(acc, _mm512_load_ps(buf + b * rb + c));
            }
        }
    }
    sink[id * 8] = _mm512_reduce_add_ps(acc);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) D = (size_t)atoi(argv[1]);
    if (argc > 2) G = (size_t)atoi(argv[2]);
    if (argc > 3) THREADS = atoi(argv[3]);
    if (argc > 4) NB = (size_t)atoi(argv[4]);
    const size_t bytes = (size_t)1 << 30, rb = G * D * 2;
    ROWS = bytes / rb / (2 * NB * THREADS) * (2 * NB * THREADS);
    if (D * 2 % 64 || posix_memalign((void **)&buf, 1 << 21, bytes)) return 1;
    for (size_t i = 0; i < bytes / 8; i++) ((uint64_t *)buf)[i] = i * 0x9e3779b97f4a7c15ull; /* not zeros: a VM
                                                                                             * may share zero pages */
    printf("D %zu, G %zu, %d thread(s), blocks of %zu, %zu MiB\n", D, G, THREADS, NB, ROWS * rb >> 20);
    for (int round = 0; round < 3; round++)
        for (VARIANT = 0; VARIANT < 9; VARIANT++) {
            pthread_t t[8];
            double t0 = now();
            for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, run, (void *)(intptr_t)i);
            for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
            double s = now() - t0;
            printf("round %d variant %d: %.1f GB/s\n", round, VARIANT, ROWS * rb / s / 1e9);
        }
    return 0;
}

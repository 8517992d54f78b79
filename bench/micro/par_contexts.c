/* par_contexts.c — what splitting one call over two threads costs against two threads that never meet
 * (bench/NOTES.md, CPU log row 69). The Gemma 4 full layer (head_dim 512, 16 query heads, 2 KV heads, f16 K/V, f32 q
 * and out) at L positions, every call from DRAM (two caches, each far larger than the L3, taken in turn). Four ways to
 * run the calls, alternated round by round:
 *   A  one context of 2 threads (fdec_decode as an engine calls it: the call split in chunks over both threads, the
 *      threads meeting at its end and sharing its merge);
 *   B  two threads pinned to CPUs 0 and 1, each with its own 1-thread context and its own cache, each making whole
 *      calls;
 *   H  the same two contexts, each making calls over its half of the positions of both caches (the split of A without
 *      its meeting points);
 *   S  one of those threads alone, whole calls on both caches in turn (the other CPU idle);
 *   M  H with a meeting after every call: neither thread starts its half of call i + 1 before both have ended their
 *      halves of call i (a spin on a shared count; CPU log row 72): what waiting for the slower half costs, without
 *      A's chunks, stealing and merge.
 * Each way makes 2 x calls calls (or as many halves' worth) a round. Prints, per round, ms a call (the round's wall
 * time over 2 x calls) and % of the 2-thread FMA floor (4 H L D flops at the FMA peak of 2 threads, measured at the
 * start as flashdec bench does), for S % of the 1-thread floor; and the medians at the end.
 *
 *   make && cc -O2 -Iinclude -Itools bench/micro/par_contexts.c tools/bench_util.c -Lbuild -lflashdec \
 *      -Wl,-rpath,$PWD/build -lpthread -lm -o /tmp/par_contexts && /tmp/par_contexts 32768 10 16 [shift]
 */
#define _GNU_SOURCE
#include "bench_util.h"
#include "flashdec.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { D = 512, H = 16, G = 2 };
static uint32_t L = 32768;
static int calls = 10, mode;
static size_t shift; /* bytes the caches start past a 2 MiB boundary: 16 is where malloc puts a large block */
static fdec_layer ly;
static uint16_t *K[2], *V[2];
static float *Q, *O[2];
static fdec_context *one[2];
static pthread_barrier_t bar;
static _Atomic unsigned meet_count; /* mode 3's spin meeting after every half-call */

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* One thread of mode `mode`: pinned to CPU id, its calls between two waits on the barrier (B: whole calls on its own
 * cache; H and M: calls over its half of the positions of both caches, M meeting the other thread after each; S: whole
 * calls on both caches in turn). */
static void *side(void *x) {
    const int id = (int)(intptr_t)x;
    pin(id);
    pthread_barrier_wait(&bar);
    for (int i = 0; i < (mode == 0 ? calls : 2 * calls); i++) {
        const int half = mode == 1 || mode == 3;
        const size_t off = half ? (size_t)id * (L / 2) * G * D : 0;
        const int c = mode == 0 ? id : i & 1;
        fdec_decode(one[id], &ly, half ? L / 2 : L, Q, K[c] + off, V[c] + off, O[id], NULL);
        if (mode == 3) { /* both halves of call i done before either starts call i + 1 */
            atomic_fetch_add(&meet_count, 1);
            while (atomic_load(&meet_count) < 2u * (unsigned)(i + 1)) __builtin_ia32_pause();
        }
    }
    pthread_barrier_wait(&bar);
    return NULL;
}

/* ms a call of mode m (0: B, 1: H, 3: H meeting after every call, both threads; 2: S, thread 0 alone) */
static double sides(int m) {
    const int n = m == 2 ? 1 : 2;
    mode = m;
    atomic_store(&meet_count, 0);
    pthread_barrier_init(&bar, NULL, (unsigned)n + 1);
    pthread_t t[2];
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, side, (void *)(intptr_t)i);
    pthread_barrier_wait(&bar);
    const double t0 = fd_now();
    pthread_barrier_wait(&bar);
    const double dt = fd_now() - t0;
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&bar);
    return dt * 1e3 / (2 * calls);
}

int main(int argc, char **argv) {
    if (argc > 1) L = (uint32_t)atoi(argv[1]) & ~1u;
    if (argc > 2) calls = atoi(argv[2]);
    const int rounds = argc > 3 ? atoi(argv[3]) : 12;
    if (argc > 4) shift = (size_t)atoi(argv[4]) & ~(size_t)1;
    if (L < 2 || calls < 1 || rounds < 1 || rounds > 1000)
        return fprintf(stderr, "usage: par_contexts [L calls rounds shift]\n"), 2;
    ly = (fdec_layer){0};
    ly.head_dim = D, ly.num_q_heads = H, ly.num_kv_heads = G;
    ly.q_dtype = FDEC_F32, ly.kv_dtype = FDEC_F16, ly.out_dtype = FDEC_F32;
    fdec_options o = fdec_default_options();
    fdec_context *two;
    o.threads = 1;
    for (int i = 0; i < 2; i++)
        if (fdec_context_create(FDEC_BACKEND_CPU, &o, &one[i])) return fprintf(stderr, "%s\n", fdec_last_error()), 1;
    o.threads = 2;
    if (fdec_context_create(FDEC_BACKEND_CPU, &o, &two)) return fprintf(stderr, "%s\n", fdec_last_error()), 1;
    const size_t n = (size_t)L * G * D;
    fd_rng rng = {12345};
    for (int j = 0; j < 2; j++) {
        K[j] = fd_alloc_kv(n * 2 + shift), V[j] = fd_alloc_kv(n * 2 + shift), O[j] = malloc(H * D * 4);
        if (!K[j] || !V[j] || !O[j]) return fprintf(stderr, "out of memory\n"), 1;
        K[j] = (uint16_t *)((char *)K[j] + shift), V[j] = (uint16_t *)((char *)V[j] + shift);
        for (size_t i = 0; i < n; i++) { /* f16 in +-[0.125, 0.25) */
            K[j][i] = (uint16_t)(0x3000 + (fd_rand(&rng) & 0x7ff) + ((fd_rand(&rng) & 1) << 15));
            V[j][i] = (uint16_t)(0x3000 + (fd_rand(&rng) & 0x7ff) + ((fd_rand(&rng) & 1) << 15));
        }
    }
    Q = malloc(H * D * 4);
    for (int i = 0; i < H * D; i++) Q[i] = (float)(fd_uniform(&rng) * 2 - 1);
    const double peak = fd_fma_peak(2), peak1 = fd_fma_peak(1); /* GFLOP/s */
    const double floor_ms = 4e-6 * H * L * D / peak, floor1_ms = 4e-6 * H * L * D / peak1; /* 4 H L D flops */
    printf("L %u, caches %zu bytes past 2 MiB, %d calls a thread a round; FMA peak %.0f GFLOP/s (2 threads), %.0f (1), "
           "floors %.3f and %.3f ms\n",
           L, shift, calls, peak, peak1, floor_ms, floor1_ms);
    double *ta = malloc(rounds * sizeof *ta), *tb = malloc(rounds * sizeof *tb), *th = malloc(rounds * sizeof *th);
    double *ts = malloc(rounds * sizeof *ts), *rb = malloc(rounds * sizeof *rb), *rh = malloc(rounds * sizeof *rh);
    double *tm = malloc(rounds * sizeof *tm), *rm = malloc(rounds * sizeof *rm);
    for (int r = 0; r < rounds; r++) {
        const double t0 = fd_now();
        for (int i = 0; i < 2 * calls; i++) fdec_decode(two, &ly, L, Q, K[i & 1], V[i & 1], O[0], NULL);
        ta[r] = (fd_now() - t0) * 1e3 / (2 * calls);
        tb[r] = sides(0), th[r] = sides(1), ts[r] = sides(2), tm[r] = sides(3);
        rb[r] = tb[r] / ta[r], rh[r] = th[r] / ta[r], rm[r] = tm[r] / ta[r];
        printf("round %2d: A %.3f ms (%.1f%%)  B %.3f (%.1f%%)  H %.3f (%.1f%%)  S %.3f (%.1f%%)  M %.3f (%.1f%%)  "
               "B/A %.3f  H/A %.3f  M/A %.3f\n",
               r, ta[r], 100 * floor_ms / ta[r], tb[r], 100 * floor_ms / tb[r], th[r], 100 * floor_ms / th[r], ts[r],
               100 * floor1_ms / ts[r], tm[r], 100 * floor_ms / tm[r], rb[r], rh[r], rm[r]);
        fflush(stdout);
    }
    const double ma = fd_median(ta, rounds), mb = fd_median(tb, rounds), mh = fd_median(th, rounds),
                 ms = fd_median(ts, rounds), mm = fd_median(tm, rounds);
    printf("medians: A %.3f ms (%.1f%%)  B %.3f (%.1f%%)  H %.3f (%.1f%%)  S %.3f (%.1f%%)  M %.3f (%.1f%%)  B/A %.3f  "
           "H/A %.3f  M/A %.3f\n",
           ma, 100 * floor_ms / ma, mb, 100 * floor_ms / mb, mh, 100 * floor_ms / mh, ms, 100 * floor1_ms / ms, mm,
           100 * floor_ms / mm, fd_median(rb, rounds), fd_median(rh, rounds), fd_median(rm, rounds));
    return 0;
}

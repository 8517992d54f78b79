/* pool_gap.c — how far apart the threads of a call finish (bench/NOTES.md, CPU log row 52). Two threads through a
 * caller-supplied parallel-for (fdec_options.parallel_for) that hands out task numbers from a shared counter, as
 * the library's pool does; each call records when each thread ran out of tasks. The caches rotate over three copies
 * (each call from DRAM at these sizes). Prints the median call time and the median, 25th and 75th percentiles of
 * |end of thread 0 - end of thread 1| / call time: how long one thread waited for the other at the end of a call; and
 * the median time from the later thread's end to the call's (the merge tasks and their dispatch; CPU log row 76).
 *
 *   make && cc -O2 -Iinclude bench/micro/pool_gap.c -Lbuild -lflashdec -Wl,-rpath,build -lm -pthread -o /tmp/pool_gap
 *   /tmp/pool_gap L D H G calls        e.g. 32768 64 32 8 100 (LFM2), 32768 512 16 2 60 (Gemma 4 full)
 */
#define _GNU_SOURCE
#include "flashdec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static _Atomic int gen, done;
static _Atomic uint32_t ticket;
static fdec_task_fn gfn;
static void *gtask;
static uint32_t gn;
static double t_end[2];
/* a decode of several chunks calls the parallel-for twice, for its chunks and then for the merge: the gap is the
 * chunks' (the function of the first call) */
static fdec_task_fn chunk_fn;

static void work(int id) {
    for (uint32_t i; (i = atomic_fetch_add(&ticket, 1)) < gn;) gfn(gtask, i, gn);
    if (gfn == chunk_fn) t_end[id] = now();
}
static void *helper(void *x) {
    (void)x;
    for (int seen = 0;;) {
        int g;
        while ((g = atomic_load(&gen)) == seen) {
        }
        seen = g;
        if (g < 0) return NULL;
        work(1);
        atomic_fetch_add(&done, 1);
    }
}
static void pfor(void *u, fdec_task_fn fn, void *task, uint32_t n) {
    (void)u;
    gfn = fn, gtask = task, gn = n;
    if (!chunk_fn) chunk_fn = fn;
    atomic_store(&ticket, 0);
    atomic_store(&done, 0);
    atomic_fetch_add(&gen, 1);
    work(0);
    while (atomic_load(&done) == 0) {
    }
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: pool_gap L D H G calls\n");
        return 2;
    }
    const int L = atoi(argv[1]), D = atoi(argv[2]), H = atoi(argv[3]), G = atoi(argv[4]), N = atoi(argv[5]);
    fdec_layer ly = {0};
    ly.head_dim = D, ly.num_q_heads = H, ly.num_kv_heads = G, ly.kv_dtype = FDEC_F16;
    fdec_options o = fdec_default_options();
    o.threads = 2, o.parallel_for = pfor;
    fdec_context *c;
    if (N < 1 || fdec_context_create(FDEC_BACKEND_CPU, &o, &c)) return 1;
    const size_t n = (size_t)L * G * D;
    uint16_t *k[3], *v[3];
    for (int j = 0; j < 3; j++) {
        k[j] = malloc(n * 2), v[j] = malloc(n * 2);
        if (!k[j] || !v[j]) return 1;
        for (size_t i = 0; i < n; i++) k[j][i] = 0x3000 + (rand() & 0x3ff), v[j][i] = 0x3000 + (rand() & 0x3ff);
    }
    float *q = malloc(sizeof(float) * H * D), *out = malloc(sizeof(float) * H * D);
    for (int i = 0; i < H * D; i++) q[i] = (rand() % 1000) / 1000.0f - 0.5f;
    pthread_t th;
    pthread_create(&th, NULL, helper, NULL);
    double *tc = malloc(sizeof(double) * N), *gap = malloc(sizeof(double) * N), *after = malloc(sizeof(double) * N);
    for (int it = -3; it < N; it++) {
        const int j = (it + 3) % 3;
        const double t0 = now();
        fdec_decode(c, &ly, L, q, k[j], v[j], out, NULL);
        const double t1 = now();
        if (it >= 0) {
            tc[it] = t1 - t0, gap[it] = (t_end[0] > t_end[1] ? t_end[0] - t_end[1] : t_end[1] - t_end[0]) / tc[it];
            after[it] = t1 - (t_end[0] > t_end[1] ? t_end[0] : t_end[1]);
        }
    }
    qsort(tc, N, sizeof *tc, cmp);
    qsort(gap, N, sizeof *gap, cmp);
    qsort(after, N, sizeof *after, cmp);
    printf("L%d D%d H%d G%d: call median %.1f us; |end gap| / call median %.3f, p25 %.3f, p75 %.3f; after the later "
           "end median %.1f us\n",
           L, D, H, G, tc[N / 2], gap[N / 2], gap[N / 4], gap[3 * N / 4], after[N / 2]);
    atomic_store(&gen, -1);
    pthread_join(th, NULL);
    return 0;
}

/* ab_dram.c — two builds of libflashdec compared call for call in one process, on caches that miss the L3: the
 * paired comparison that a shared, noisy machine needs (CPU log rows from session 13 on, bench/NOTES.md). Each
 * build is loaded by dlopen (RTLD_LOCAL, so the two keep their own symbols); the calls alternate A B B A ... over
 * rotating copies of an f16 (or bf16) cache covering twice the L3, so that every call reads from DRAM and a drift of the
 * machine's speed falls on both builds alike.
 *
 *   cc -O2 -Iinclude bench/micro/ab_dram.c -ldl -lm -pthread -o build/ab_dram
 *   build/ab_dram libA.so libB.so D H G L threads pairs [f16|bf16]     e.g. ... 128 32 8 32768 2 40
 *
 * Prints each build's median us per call and GB/s and the median of the pairs' time ratios B/A (< 1: B faster).
 *
 * AB_HUGEPAGES=1: each build reads its own copies, A's in 4 KiB pages (MADV_NOHUGEPAGE) and B's in transparent huge
 * pages (MADV_HUGEPAGE); with the same library as A and B this measures what huge pages under the cache are worth.
 * AB_SHIFT=N: each build reads its own copies, 2 MiB-aligned, B's starting N bytes past that (N rounded down to
 * even, so the 16-bit elements stay aligned; 16: where glibc's malloc puts a large block; with the same library as A
 * and B this measures what the cache's placement costs).
 * AB_COPIES=N: N copies instead of enough to cover twice the L3 (1: the same cache every call, kept in L2/L3).
 * AB_HELPER=1 (2 threads): both builds run their tasks through one caller-supplied parallel-for (the even tasks on the
 * caller, the odd ones on one spinning helper thread) instead of a pool each, whose idle worker would spin into the
 * other build's calls (300 us, pool.c): what short calls in cache need.
 * AB_QT=f16 or bf16: q and out in that type instead of f32 (CPU log row 59). */
#define _GNU_SOURCE
#include "flashdec.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef fdec_status (*create_fn)(fdec_backend, const fdec_options *, fdec_context **);
typedef fdec_status (*decode_fn)(fdec_context *, const fdec_layer *, uint32_t, const void *, const void *,
                                 const void *, void *, float *);
typedef fdec_options (*defopts_fn)(void);

typedef struct {
    decode_fn decode;
    fdec_context *ctx;
} build;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* AB_HELPER's parallel-for: the caller runs the even tasks, the helper the odd ones */
static _Atomic int h_gen, h_done;
static fdec_task_fn h_fn;
static void *h_task;
static uint32_t h_n;
static void *helper(void *x) {
    (void)x;
    for (int seen = 0;;) {
        int g;
        while ((g = atomic_load(&h_gen)) == seen) {
        }
        seen = g;
        for (uint32_t i = 1; i < h_n; i += 2) h_fn(h_task, i, h_n);
        atomic_store(&h_done, g);
    }
    return NULL;
}
static void helper_pfor(void *u, fdec_task_fn fn, void *task, uint32_t n) {
    (void)u;
    h_fn = fn, h_task = task, h_n = n;
    const int g = atomic_fetch_add(&h_gen, 1) + 1;
    for (uint32_t i = 0; i < n; i += 2) fn(task, i, n);
    while (atomic_load(&h_done) != g) {
    }
}

static int load(const char *path, uint32_t threads, build *b) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return fprintf(stderr, "%s\n", dlerror()), 1;
    create_fn create = (create_fn)dlsym(h, "fdec_context_create");
    defopts_fn defopts = (defopts_fn)dlsym(h, "fdec_default_options");
    b->decode = (decode_fn)dlsym(h, "fdec_decode");
    if (!create || !defopts || !b->decode) return fprintf(stderr, "%s: not a flashdec library\n", path), 1;
    fdec_options o = defopts();
    o.threads = threads;
    if (getenv("AB_HELPER") && atoi(getenv("AB_HELPER"))) o.parallel_for = helper_pfor;
    return create(FDEC_BACKEND_CPU, &o, &b->ctx) != FDEC_OK;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static size_t l3_bytes(void) {
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    unsigned long v = 32768;
    if (f) {
        if (fscanf(f, "%lu", &v) != 1) v = 32768;
        fclose(f);
    }
    return (size_t)v << 10;
}

/* bytes of cache memory from shift bytes past a 2 MiB boundary, in huge pages or not (advice 1 or 0, given before the
 * first touch) or as the kernel's default has it (-1) */
static void *cache_alloc(size_t bytes, int advice, size_t shift) {
    const size_t al = (size_t)2 << 20, sz = (bytes + shift + al - 1) / al * al;
    char *p = NULL;
    if (posix_memalign((void **)&p, al, sz)) return NULL;
    if (advice >= 0) madvise(p, sz, advice ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    return p + shift;
}

/* the process's memory in transparent huge pages, kB (-1 if unknown) */
static long anon_huge_kb(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    if (argc != 9 && argc != 10) {
        fprintf(stderr, "usage: %s libA.so libB.so head_dim q_heads kv_heads seq_len threads pairs [f16|bf16]\n",
                argv[0]);
        return 2;
    }
    const int bf16 = argc == 10 && !strcmp(argv[9], "bf16");
    if (argc == 10 && !bf16 && strcmp(argv[9], "f16")) return fprintf(stderr, "the K/V type is f16 or bf16\n"), 2;
    const uint32_t D = (uint32_t)atoi(argv[3]), H = (uint32_t)atoi(argv[4]), G = (uint32_t)atoi(argv[5]),
                   L = (uint32_t)atoi(argv[6]), threads = (uint32_t)atoi(argv[7]);
    const int pairs = atoi(argv[8]);
    if (!D || !H || !G || H % G || !L || !threads || pairs < 1) {
        fprintf(stderr, "head_dim, the heads (q_heads a multiple of kv_heads), seq_len, threads and pairs must be "
                        "positive\n");
        return 2;
    }
    build b[2];
    pthread_t ht;
    if (getenv("AB_HELPER") && atoi(getenv("AB_HELPER")) && pthread_create(&ht, NULL, helper, NULL))
        return fprintf(stderr, "no helper thread\n"), 1;
    if (load(argv[1], threads, &b[0]) || load(argv[2], threads, &b[1])) return 1;
    fdec_layer ly = {0};
    ly.head_dim = D, ly.num_q_heads = H, ly.num_kv_heads = G;
    const char *qt = getenv("AB_QT"); /* q's and out's type: f32 (default), f16 or bf16 */
    const fdec_dtype qd = qt && !strcmp(qt, "f16") ? FDEC_F16 : qt && !strcmp(qt, "bf16") ? FDEC_BF16 : FDEC_F32;
    ly.q_dtype = qd, ly.kv_dtype = bf16 ? FDEC_BF16 : FDEC_F16, ly.out_dtype = qd;
    const size_t n = (size_t)L * G * D, bytes = 2 * n * 2;
    int ncopy = (int)((2 * l3_bytes() + bytes - 1) / bytes) + 1;
    if (ncopy < 3) ncopy = 3;
    if (getenv("AB_COPIES") && atoi(getenv("AB_COPIES")) > 0) ncopy = atoi(getenv("AB_COPIES"));
    const int hp = getenv("AB_HUGEPAGES") && atoi(getenv("AB_HUGEPAGES"));
    const size_t shift = getenv("AB_SHIFT") ? (size_t)atoi(getenv("AB_SHIFT")) & ~(size_t)1 : 0;
    const int own = hp || getenv("AB_SHIFT"); /* each build its own copies */
    uint16_t **k[2], **v[2];
    float *q = malloc((size_t)H * D * 4), *out = malloc((size_t)H * D * 4);
    srand(1);
    for (int w = 0; w < 1 + own; w++) {
        k[w] = calloc((size_t)ncopy, sizeof *k[w]), v[w] = calloc((size_t)ncopy, sizeof *v[w]);
        for (int c = 0; c < ncopy; c++) {
            const int adv = hp ? w : -1;
            const size_t sh = w ? shift : 0;
            k[w][c] = own ? cache_alloc(n * 2, adv, sh) : malloc(n * 2);
            v[w][c] = own ? cache_alloc(n * 2, adv, sh) : malloc(n * 2);
            if (!k[w][c] || !v[w][c]) return fprintf(stderr, "out of memory\n"), 1;
            for (size_t i = 0; i < n; i++) { /* values in [1, 2) for K, [0.5, 1) for V */
                k[w][c][i] = (uint16_t)(bf16 ? 0x3f80 | (rand() & 0x7f) : 0x3c00 | (rand() & 0x3ff));
                v[w][c][i] = (uint16_t)(bf16 ? 0x3f00 | (rand() & 0x7f) : 0x3800 | (rand() & 0x3ff));
            }
        }
    }
    if (!own) k[1] = k[0], v[1] = v[0];
    for (size_t i = 0; i < (size_t)H * D; i++) q[i] = (float)(rand() % 1000) / 1000.f;
    if (qd != FDEC_F32) /* the same kind of values in q's 16-bit type: [0.5, 1) */
        for (size_t i = 0; i < (size_t)H * D; i++)
            ((uint16_t *)q)[i] = (uint16_t)(qd == FDEC_BF16 ? 0x3f00 | (rand() & 0x7f) : 0x3800 | (rand() & 0x3ff));
    double *t[2] = {malloc(sizeof(double) * pairs), malloc(sizeof(double) * pairs)};
    double *r = malloc(sizeof(double) * pairs);
    int c = 0, cw[2] = {0, 0}; /* with AB_HUGEPAGES or AB_SHIFT each build rotates over its own copies */
    for (int i = -2; i < pairs; i++) { /* two pairs of warm-up */
        for (int s = 0; s < 2; s++) {
            const int w = (i & 1) ? 1 - s : s; /* A B, then B A */
            const double t0 = now();
            const int cc = own ? cw[w] : c;
            if (b[w].decode(b[w].ctx, &ly, L, q, k[w][cc], v[w][cc], out, NULL))
                return fprintf(stderr, "decode failed\n"), 1;
            const double dt = now() - t0;
            if (i >= 0) t[w][i] = dt;
            c = (c + 1) % ncopy, cw[w] = (cw[w] + 1) % ncopy;
        }
        if (i >= 0) r[i] = t[1][i] / t[0][i];
    }
    const double ra = median(r, pairs), ta = median(t[0], pairs), tb = median(t[1], pairs);
    printf("D%u H%u G%u L%u threads %u, %d pairs over %d copies: A %.1f us (%.2f GB/s), B %.1f us (%.2f GB/s), "
           "B/A %.3f\n",
           D, H, G, L, threads, pairs, ncopy, ta * 1e6, bytes / ta / 1e9, tb * 1e6, bytes / tb / 1e9, ra);
    if (own && !hp) printf("  AB_SHIFT: A's copies 2 MiB-aligned, B's %zu bytes past\n", shift);
    if (hp) printf("  AB_HUGEPAGES: B's copies in huge pages; the process holds %ld MiB of them\n", anon_huge_kb() >> 10);
    return 0;
}

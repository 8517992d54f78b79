/* sp_bench.c — `flashdec bench --gpus N`: sequence-parallel decode over N GPUs (flashdec_nccl.h).
 *
 * The tool forks one process per GPU (rank r on device r). Rank 0 makes the NCCL id and passes it down a pipe
 * to every other rank. Each rank holds positions [r L / N, (r + 1) L / N) of one sequence (random f16 rows,
 * built from a 4096-row tile keyed by the global position, so every rank's rows are the rows a single GPU
 * would hold). Rank 0 also holds the whole cache and times the plain single-GPU fdec_decode on it, alone,
 * while the others wait; then all ranks time fdec_sp_decode (partial, NCCL all-gather, merge), and rank 0
 * compares the sharded result with the single-GPU one.
 *
 * libflashdec_nccl is opened with dlopen, so the tool (and the core library) need NCCL only in this mode. */
#include "sp_bench.h"

#include "bench_util.h"

#include "devmem.h"
#include "flashdec_nccl.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    fdec_status (*unique_id)(unsigned char *);
    fdec_status (*create)(fdec_context *, void *, int, int, const unsigned char *, fdec_sp **);
    void (*destroy)(fdec_sp *);
    fdec_status (*decode)(fdec_sp *, const fdec_layer *, uint32_t, uint32_t, uint32_t, const void *, const void *,
                          const void *, void *, float *);
} sp_api;

/* Opens libflashdec_nccl.so: beside the tool first, then the library search path. */
static int sp_open(sp_api *api, const char *self) {
    char path[4096];
    void *h = NULL;
    const char *slash = strrchr(self, '/');
    if (slash) {
        snprintf(path, sizeof path, "%.*s/libflashdec_nccl.so", (int)(slash - self), self);
        h = dlopen(path, RTLD_NOW);
        if (!h) { /* an installed tool: ../lib */
            snprintf(path, sizeof path, "%.*s/../lib/libflashdec_nccl.so", (int)(slash - self), self);
            h = dlopen(path, RTLD_NOW);
        }
    }
    if (!h) h = dlopen("libflashdec_nccl.so", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "flashdec bench --gpus: cannot load libflashdec_nccl.so (%s); it is built when nvcc and "
                        "nccl.h are found\n", dlerror());
        return -1;
    }
    *(void **)&api->unique_id = dlsym(h, "fdec_sp_unique_id");
    *(void **)&api->create = dlsym(h, "fdec_sp_create");
    *(void **)&api->destroy = dlsym(h, "fdec_sp_destroy");
    *(void **)&api->decode = dlsym(h, "fdec_sp_decode");
    if (!api->unique_id || !api->create || !api->destroy || !api->decode) {
        fprintf(stderr, "flashdec bench --gpus: libflashdec_nccl.so lacks a symbol: %s\n", dlerror());
        return -1;
    }
    return 0;
}

enum { TILE = 4096 };

static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float unif(uint64_t *s) { return (float)((mix(s) >> 40) * (2.0 / 16777216.0) - 1.0); }

/* rows [lo, hi) of the sequence into dst (row-major, `row` bytes a row), from the tile */
static int fill_rows(char *dst, const char *tile, size_t row, uint64_t lo, uint64_t hi) {
    for (uint64_t t = lo; t < hi;) {
        uint64_t n = TILE - t % TILE;
        if (n > hi - t) n = hi - t;
        if (fd_h2d(dst + (t - lo) * row, tile + (t % TILE) * row, n * row)) return -1;
        t += n;
    }
    return 0;
}

typedef struct {
    const sp_api *api;
    fdec_sp *sp;
    fdec_context *ctx;
    const fdec_layer *lay;
    uint32_t L, lo, len;
    const void *q, *k, *v;
    void *out;
    float *lse;
    int st;
} call_args;

static void call_sp(void *a_, int i) {
    (void)i;
    call_args *a = a_;
    fdec_status st = a->api->decode(a->sp, a->lay, a->L, a->lo, a->len, a->q, a->k, a->v, a->out, a->lse);
    if (st) a->st = st;
}
static void call_one(void *a_, int i) {
    (void)i;
    call_args *a = a_;
    fdec_status st = fdec_decode(a->ctx, a->lay, a->L, a->q, a->k, a->v, a->out, a->lse);
    if (st) a->st = st;
}

/* One rank's whole life; returns its exit code. Rank 0 prints the result line. */
static int rank_main(const sp_api *api, int n, int rank, int idfd_in, const int *idfd_out, const sp_bench_args *b,
                     uint32_t L) {
    unsigned char id[FDEC_SP_ID_BYTES];
    if (fd_dev_set(rank)) return fprintf(stderr, "rank %d: cudaSetDevice failed\n", rank), 1;
    if (rank == 0) {
        if (api->unique_id(id)) return fprintf(stderr, "rank 0: %s\n", fdec_last_error()), 1;
        for (int r = 1; r < n; r++)
            if (write(idfd_out[r], id, sizeof id) != (ssize_t)sizeof id) return fprintf(stderr, "rank 0: pipe\n"), 1;
    } else if (read(idfd_in, id, sizeof id) != (ssize_t)sizeof id)
        return fprintf(stderr, "rank %d: no id from rank 0\n", rank), 1;
    void *stream = fd_dev_stream_create();
    fdec_options o = fdec_default_options();
    o.cuda_device = rank;
    o.cuda_stream = stream;
    fdec_context *ctx = NULL;
    fdec_sp *sp = NULL;
    if (fdec_context_create(FDEC_BACKEND_CUDA, &o, &ctx) || api->create(ctx, stream, n, rank, id, &sp))
        return fprintf(stderr, "rank %d: %s\n", rank, fdec_last_error()), 1;

    fdec_layer lay;
    memset(&lay, 0, sizeof lay);
    lay.head_dim = b->D, lay.num_q_heads = b->H, lay.num_kv_heads = b->G, lay.window = b->window;
    lay.kv_dtype = FDEC_F16, lay.q_dtype = FDEC_F32, lay.out_dtype = FDEC_F32, lay.scale = b->scale;
    lay.softcap = b->softcap;
    /* sinks and ALiBi slopes, the same on every rank, on the device */
    float hv[2][1024];
    float *dv[2] = {NULL, NULL};
    for (int a = 0; a < 2; a++) {
        if (!(a ? b->alibi : b->sinks) || b->H > 1024) continue;
        if (a) fd_alibi_slopes(hv[a], b->H, 1.0);
        else
            for (uint32_t h = 0; h < b->H; h++) hv[a][h] = 2.0f * h / b->H; /* sinks */
        if (!(dv[a] = fd_dev_alloc(sizeof(float) * b->H)) || fd_h2d(dv[a], hv[a], sizeof(float) * b->H))
            return fprintf(stderr, "rank %d: copying the variants' arrays failed\n", rank), 1;
    }
    lay.sinks = dv[0], lay.alibi_slopes = dv[1];
    const size_t row = (size_t)b->G * b->D * 2;
    /* the tile and q: the same on every rank (fixed seeds) */
    char *tile = malloc(TILE * row * 2);
    float *hq = malloc(sizeof(float) * b->H * b->D);
    uint64_t s = 0xfeed;
    for (size_t i = 0; i < (size_t)TILE * row; i++) /* f16 in [-1, 1]: exponent <= 15 */
        ((uint16_t *)tile)[i] = fdec_f32_to_f16(unif(&s));
    for (size_t i = 0; i < (size_t)b->H * b->D; i++) hq[i] = unif(&s);
    const uint32_t lo = (uint32_t)((uint64_t)L * rank / n), hi = (uint32_t)((uint64_t)L * (rank + 1) / n);
    /* V rows are K rows of a shifted tile: different data without a second tile */
    char *k = fd_dev_alloc((size_t)(hi - lo) * row + 1), *v = fd_dev_alloc((size_t)(hi - lo) * row + 1);
    float *q = fd_dev_alloc(sizeof(float) * b->H * b->D), *out = fd_dev_alloc(sizeof(float) * b->H * b->D);
    float *lse = fd_dev_alloc(sizeof(float) * b->H);
    int bad = !tile || !hq || !k || !v || !q || !out || !lse || fd_h2d(q, hq, sizeof(float) * b->H * b->D) ||
              fill_rows(k, tile, row, lo, hi) || fill_rows(v, tile + row * 7, row, lo, hi);
    if (bad) return fprintf(stderr, "rank %d: allocation or copy of the shard (%u rows) failed\n", rank, hi - lo), 1;

    double t1 = 0, diff = 0;
    float *single = NULL;
    call_args ca = {api, sp, ctx, &lay, L, lo, hi - lo, q, k, v, out, lse, 0};
    if (rank == 0) { /* the single-GPU baseline on the whole cache, alone on the machine */
        char *K = fd_dev_alloc((size_t)L * row), *V = fd_dev_alloc((size_t)L * row);
        float *o1 = fd_dev_alloc(sizeof(float) * b->H * b->D);
        if (!K || !V || !o1 || fill_rows(K, tile, row, 0, L) || fill_rows(V, tile + row * 7, row, 0, L))
            return fprintf(stderr, "rank 0: the whole cache (%u rows) does not fit one GPU\n", L), 1;
        call_args c1 = {api, sp, ctx, &lay, L, 0, L, q, K, V, o1, NULL, 0};
        fdec_context_reserve(ctx, &lay, L);
        t1 = fd_dev_time_graph(stream, call_one, &c1, 4, b->reps);
        single = malloc(sizeof(float) * b->H * b->D);
        if (t1 < 0 || c1.st || fd_dev_stream_sync(stream) || fd_d2h(single, o1, sizeof(float) * b->H * b->D))
            return fprintf(stderr, "rank 0: single-GPU run failed: %s\n", fdec_last_error()), 1;
        fd_dev_free(K), fd_dev_free(V), fd_dev_free(o1);
    }
    /* every rank: the sharded call (its first call also waits for rank 0's baseline, through NCCL) */
    const double tn = fd_dev_time_events(stream, call_sp, &ca, 4, b->reps);
    if (tn < 0 || ca.st || fd_dev_stream_sync(stream))
        return fprintf(stderr, "rank %d: sharded run failed: %s\n", rank, fdec_last_error()), 1;
    if (rank == 0) {
        float *h = malloc(sizeof(float) * b->H * b->D);
        if (fd_d2h(h, out, sizeof(float) * b->H * b->D)) return 1;
        for (size_t i = 0; i < (size_t)b->H * b->D; i++) {
            double d = fabs((double)h[i] - single[i]);
            if (!(d <= diff)) diff = isnan(d) ? INFINITY : d;
        }
        const double kvb = 2.0 * (double)(L - (b->window && b->window < L ? L - b->window : 0)) * row;
        const double tol = 2e-5;
        printf("%-20s %9u %4d %12.1f %12.1f %8.2f %8.2f %10.2e %s\n", b->name, L, n, t1 * 1e6, tn * 1e6, t1 / tn,
               kvb / tn / 1e12, diff, diff <= tol ? "ok" : "MISMATCH");
        fflush(stdout);
        free(h);
        bad = !(diff <= tol);
    }
    api->destroy(sp);
    fdec_context_destroy(ctx);
    fd_dev_free(k), fd_dev_free(v), fd_dev_free(q), fd_dev_free(out), fd_dev_free(lse);
    fd_dev_free(dv[0]), fd_dev_free(dv[1]);
    fd_dev_stream_destroy(stream);
    free(tile), free(hq), free(single);
    return bad;
}

int fd_sp_bench(const sp_bench_args *b, const char *self) {
    sp_api api;
    if (sp_open(&api, self)) return 3;
    const int n = b->gpus;
    /* the parent must not touch CUDA before fork: count the devices in a child */
    pid_t cp = fork();
    if (cp == 0) _exit(fd_dev_count() >= n ? 0 : 3);
    int cst = 0;
    waitpid(cp, &cst, 0);
    if (!WIFEXITED(cst) || WEXITSTATUS(cst)) {
        fprintf(stderr, "flashdec bench --gpus %d: fewer than %d CUDA devices here\n", n, n);
        return 3;
    }
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* no NVLink multicast unless the caller says otherwise */
    printf("flashdec bench --gpus %d: one process a GPU, NCCL all-gather of (out, lse), fdec_merge; f16 K/V "
           "[pos][head][dim], f32 q/out; times: medians of %d rounds of 4 calls (single GPU: CUDA-graph replay)\n",
           n, b->reps);
    printf("%-20s %9s %4s %12s %12s %8s %8s %10s\n", "shape", "L", "gpus", "1 GPU us", "N GPUs us", "speedup",
           "TB/s", "max diff");
    fflush(stdout);
    int fail = 0;
    for (int c = 0; c < b->nctx; c++) {
        int fds[64][2];
        for (int r = 1; r < n; r++)
            if (pipe(fds[r])) return perror("pipe"), 1;
        int outs[64] = {0};
        for (int r = 1; r < n; r++) outs[r] = fds[r][1];
        pid_t pid[64];
        for (int r = 0; r < n; r++) {
            pid[r] = fork();
            if (pid[r] < 0) return perror("fork"), 1;
            if (pid[r] == 0) _exit(rank_main(&api, n, r, r ? fds[r][0] : -1, outs, b, b->ctx[c]));
        }
        for (int r = 1; r < n; r++) close(fds[r][0]), close(fds[r][1]);
        for (int r = 0; r < n; r++) {
            int st = 0;
            waitpid(pid[r], &st, 0);
            if (!WIFEXITED(st) || WEXITSTATUS(st)) fail = 1;
        }
    }
    if (fail) printf("a rank FAILED (see its message above)\n");
    return fail;
}

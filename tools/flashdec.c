/* flashdec — the command-line tool: demo, bench, verify, info.
 *
 *   flashdec demo                 the model presets at 1k..32k on the CPU, checked and timed
 *   flashdec bench [options]      timing table against this machine's ceilings, optional JSON
 *   flashdec verify [options]     random sweep against the float64 reference
 *   flashdec info                 CPU features, chosen path, threads, measured ceilings
 *
 * Every subcommand takes --help. A wrong flag is a one-line error and exit code 2.
 */
#include "bench_util.h"
#include "devmem.h"
#include "batch_bench.h"
#include "sp_bench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- presets ---- */

typedef struct {
    const char *name;
    uint32_t D, H, G, window, ring;
    float scale;
} preset;

static const preset presets[] = {
    {"llama3-8b", 128, 32, 8, 0, 0, 0},
    {"lfm2", 64, 32, 8, 0, 0, 0},
    {"gemma4-sliding-full", 256, 16, 8, 0, 0, 1.0f}, /* the sliding layer's geometry run as full attention */
    {"gemma4-full", 512, 16, 2, 0, 0, 1.0f},
    {"gemma4-sliding", 256, 16, 8, 1024, 1024, 1.0f}, /* window 1024 in a ring of 1024 */
};
#define NPRESETS (int)(sizeof presets / sizeof presets[0])

static const preset *find_preset(const char *name) {
    for (int i = 0; i < NPRESETS; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return NULL;
}

static int usage_error(const char *cmd, const char *fmt, const char *arg) {
    fprintf(stderr, "flashdec %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see flashdec %s --help)\n", cmd);
    return 2;
}

/* A type by the table's name (f32, f16, bf16, f8_e4m3, f8_e5m2, q8_0, q4_0); kv: whether a K/V-only type will do. */
static int parse_dtype_kv(const char *s, fdec_dtype *t, int kv) {
    for (int i = 0; i <= FDEC_DTYPE_LAST; i++)
        if (!strcmp(s, fdec_dtype_table[i].name) && (kv || !fdec_dtype_table[i].kv_only)) return *t = (fdec_dtype)i, 0;
    return -1;
}
static int parse_dtype(const char *s, fdec_dtype *t) { return parse_dtype_kv(s, t, 0); }


/* A whole number in [lo, hi] (decimal, or 0x hex) into *out: 0, or -1 for anything else (a sign, trailing
 * characters, an empty string, a value out of range). */
static int parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    if (!s || !*s || *s == '-' || *s == '+' || *s == ' ') return -1;
    char *end;
    errno = 0;
    const unsigned long long x = strtoull(s, &end, 0);
    if (errno || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

/* Parses "1024,4096,32k" into list, each at least lo; returns the count or -1. */
static int parse_list(const char *s, uint32_t *list, int max, double lo) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        double x = strtod(s, &end);
        if (end == s || !(x >= 0)) return -1;
        if (*end == 'k' || *end == 'K') x *= 1024, end++;
        else if (*end == 'm' || *end == 'M') x *= 1048576, end++;
        if (x > 4294967295.0 || x < lo || x != (double)(uint32_t)x) return -1;
        list[n++] = (uint32_t)x;
        if (*end == ',') end++;
        else if (*end) return -1;
        s = end;
    }
    return n;
}

/* ---- timing one case ---- */

typedef struct {
    const char *name;
    uint32_t ctx_len, threads;
    double us, gbs, floor_us, pct_floor, err, tol, bw, gflops;
    fdec_dtype kvt;
    uint32_t chunks;
    char logits[48]; /* the logit variants timed: "plain", "softcap 30 sinks"... */
} result;

typedef struct {
    fdec_backend backend;
    fdec_cpu_path path;
    fdec_dtype qt, kvt, ot;
    int reps;
    int check;
    size_t rotate_bytes; /* rotate among copies of the cache until this many bytes are covered */
    fd_variants var;     /* the logit variants of the case being timed */
} bench_opts;

static int time_case_cuda(const preset *ps, uint32_t L, const bench_opts *bo, double bw, result *res);

/* A result row: seconds per call, KV bytes per call, the floor in seconds and the ceilings it came from. */
static void fill_result(result *r, const preset *ps, uint32_t L, uint32_t threads, double sec, double bytes,
                        double floor_s, double bw, double gfl, fdec_dtype kvt, uint32_t chunks) {
    r->name = ps->name;
    r->ctx_len = L;
    r->threads = threads;
    r->us = sec * 1e6;
    r->gbs = bytes / sec / 1e9;
    r->floor_us = floor_s * 1e6;
    r->pct_floor = 100.0 * floor_s / sec;
    r->bw = bw;
    r->gflops = gfl;
    r->kvt = kvt;
    r->chunks = chunks;
}

/* A plain f32 layer of head_dim D, H query and G KV heads (the probes of the plan). */
static fdec_layer layer_of(uint32_t D, uint32_t H, uint32_t G) {
    fdec_layer layer;
    memset(&layer, 0, sizeof layer);
    layer.head_dim = D, layer.num_q_heads = H, layer.num_kv_heads = G;
    return layer;
}

static fdec_layer layer_of_preset(const preset *ps, const bench_opts *bo) {
    fdec_layer layer;
    memset(&layer, 0, sizeof layer);
    layer.head_dim = ps->D;
    layer.num_q_heads = ps->H;
    layer.num_kv_heads = ps->G;
    layer.window = ps->window;
    layer.ring_capacity = ps->ring;
    layer.scale = ps->scale;
    layer.q_dtype = bo->qt;
    layer.kv_dtype = bo->kvt;
    layer.out_dtype = bo->ot;
    return layer;
}

/* Times `reps` calls of one case, each on a cache copy not read since the last round. */
static int time_case(const preset *ps, uint32_t L, uint32_t threads, const bench_opts *bo, double bw, double gfl,
                     result *res) {
    fdec_layer layer = layer_of_preset(ps, bo);
    if (bo->backend == FDEC_BACKEND_CUDA) return time_case_cuda(ps, L, bo, bw, res);
    fd_rng rng = {0xbe7c4 + L};
    fd_problem pr;
    if (fd_problem_make(&pr, &layer, L, FD_DENSE, 1.0f, &rng) || fd_problem_set_variants(&pr, &bo->var, &rng)) {
        fprintf(stderr, "flashdec: cannot build %s at %u: %s\n", ps->name, L, fdec_last_error());
        fd_problem_free(&pr);
        return -1;
    }
    layer = pr.layer; /* with the variants' arrays */
    fdec_options o = fdec_default_options();
    o.threads = threads;
    o.cpu_path = bo->path;
    fdec_context *ctx;
    if (fdec_context_create(bo->backend, &o, &ctx) != FDEC_OK) {
        fprintf(stderr, "flashdec: %s\n", fdec_last_error());
        fd_problem_free(&pr);
        return -1;
    }
    const size_t H = pr.p.H, D = pr.p.D, kvb = fdec_dtype_bytes(pr.p.kvt, pr.kv_elems);
    void *out = malloc(H * D * 4);
    float *lse = malloc(H * 4);
    /* copies of K/V so that each call reads memory the previous calls did not leave in the cache */
    int ncopy = (int)((bo->rotate_bytes + 2 * kvb - 1) / (2 * kvb));
    if (ncopy < 1) ncopy = 1;
    if (ncopy > 256) ncopy = 256;
    void **ks = calloc((size_t)ncopy, sizeof *ks), **vs = calloc((size_t)ncopy, sizeof *vs);
    ks[0] = pr.k;
    vs[0] = pr.v;
    for (int i = 1; i < ncopy; i++) {
        ks[i] = fd_alloc_kv(kvb);
        vs[i] = fd_alloc_kv(kvb);
        if (!ks[i] || !vs[i]) {
            ncopy = i;
            break;
        }
        memcpy(ks[i], pr.k, kvb);
        memcpy(vs[i], pr.v, kvb);
    }
    res->err = 0;
    res->tol = 0;
    if (bo->check) {
        double *ref = malloc(sizeof(double) * H * D), *rl = malloc(sizeof(double) * H);
        fd_reference(&pr, ref, rl);
        fdec_status st = fdec_decode(ctx, &layer, L, pr.q, pr.k, pr.v, out, lse);
        res->err = st == FDEC_OK ? fd_out_error(&pr, out, ref) : INFINITY;
        res->tol = fd_tolerance(&pr);
        free(ref);
        free(rl);
    }
    /* A window in a contiguous cache reads a small part of a large buffer: slide the window (seq_len) over
     * copies of the attended rows, so that each call reads rows the last calls did not leave in the L3. */
    uint32_t nslide = 1;
    const uint32_t wrows = L - pr.p.lo;
    if (layer.window && !layer.ring_capacity) {
        const size_t region = fdec_dtype_bytes(pr.p.kvt, (size_t)wrows * pr.p.kv.ps);
        nslide = (uint32_t)(bo->rotate_bytes / (2 * region));
        if (nslide > L / wrows) nslide = L / wrows;
        if (nslide < 1) nslide = 1;
        for (uint32_t k = 1; k < nslide; k++) {
            const size_t from = fdec_dtype_bytes(pr.p.kvt, (size_t)pr.p.lo * pr.p.kv.ps);
            const size_t to = from - (size_t)k * region;
            memcpy((char *)pr.k + to, (const char *)pr.k + from, region);
            memcpy((char *)pr.v + to, (const char *)pr.v + from, region);
        }
    }
    int reps = bo->reps < 1 ? 1 : bo->reps;
    int calls = reps * ncopy * (int)nslide < 20 ? 20 : reps * ncopy * (int)nslide; /* at least 20 timed calls */
    double *t = malloc(sizeof(double) * (size_t)calls);
    for (int i = 0; i < ncopy; i++) fdec_decode(ctx, &layer, L, pr.q, ks[i], vs[i], out, NULL); /* warm up */
    for (int i = 0; i < calls; i++) {
        const uint32_t seq = L - (uint32_t)((i / ncopy) % nslide) * wrows;
        double t0 = fd_now();
        fdec_decode(ctx, &layer, seq, pr.q, ks[i % ncopy], vs[i % ncopy], out, NULL);
        t[i] = fd_now() - t0;
    }
    double sec = fd_median(t, calls);
    fdec_plan_info info;
    fdec_plan(ctx, &layer, L, &info);
    double bytes = fd_kv_bytes(&pr.p);
    double flops = 4.0 * H * ((double)L - pr.p.lo) * D;
    double floor_s = fmax(bytes / (bw * 1e9), gfl > 0 ? flops / (gfl * 1e9) : 0);
    fill_result(res, ps, L, threads, sec, bytes, floor_s, bw, gfl, bo->kvt, info.num_chunks);
    fd_variants_name(&layer, res->logits, sizeof res->logits);
    for (int i = 1; i < ncopy; i++) free(ks[i]), free(vs[i]);
    free(ks);
    free(vs);
    free(t);
    free(out);
    free(lse);
    fdec_context_destroy(ctx);
    fd_problem_free(&pr);
    return 0;
}

/* ---- the same on the GPU: device copies, CUDA-graph replay of calls over rotating caches ---- */

typedef struct {
    fdec_context *ctx;
    const fdec_layer *layer;
    uint32_t L;
    const void *q;
    void **ks, **vs;
    void *out;
    int ncopy;
    fdec_status st;
} cuda_call;

static void cuda_call_fn(void *x, int i) {
    cuda_call *c = x;
    fdec_status st = fdec_decode(c->ctx, c->layer, c->L, c->q, c->ks[i % c->ncopy], c->vs[i % c->ncopy], c->out, NULL);
    if (st) c->st = st;
}

static int time_case_cuda(const preset *ps, uint32_t L, const bench_opts *bo, double bw, result *res) {
    fdec_layer layer = layer_of_preset(ps, bo);
    fd_rng rng = {0xbe7c4 + L};
    fd_problem pr;
    if (fd_problem_make(&pr, &layer, L, FD_DENSE, 1.0f, &rng) || fd_problem_set_variants(&pr, &bo->var, &rng)) {
        fprintf(stderr, "flashdec: cannot build %s at %u: %s\n", ps->name, L, fdec_last_error());
        fd_problem_free(&pr);
        return -1;
    }
    layer = pr.layer; /* the variants' arrays: device copies below */
    void *stream = fd_dev_stream_create();
    fdec_options o = fdec_default_options();
    o.cuda_stream = stream;
    fdec_context *ctx;
    if (!stream || fdec_context_create(FDEC_BACKEND_CUDA, &o, &ctx) != FDEC_OK) {
        fprintf(stderr, "flashdec: %s\n", stream ? fdec_last_error() : "cannot create a CUDA stream");
        fd_problem_free(&pr);
        return -1;
    }
    const size_t H = pr.p.H, D = pr.p.D, kvb = fdec_dtype_bytes(pr.p.kvt, pr.kv_elems);
    const size_t qb = H * D * fdec_dtype_size(pr.p.qt), ob = H * D * fdec_dtype_size(pr.p.ot);
    /* copies covering well over the 60 MB L2 of an H200 (rotate_bytes), at most 256 */
    int ncopy = (int)((bo->rotate_bytes + 2 * kvb - 1) / (2 * kvb));
    if (ncopy < 1) ncopy = 1;
    if (ncopy > 256) ncopy = 256;
    void **ks = calloc((size_t)ncopy, sizeof *ks), **vs = calloc((size_t)ncopy, sizeof *vs);
    void *dq = fd_dev_alloc(qb), *dout = fd_dev_alloc(ob), *dlse = fd_dev_alloc(H * 4), *hout = malloc(ob);
    void *dsinks = pr.sinks ? fd_dev_alloc(H * 4) : NULL, *dalibi = pr.alibi ? fd_dev_alloc(H * 4) : NULL;
    int ok = dq && dout && dlse && hout && !fd_h2d(dq, pr.q, qb) && (!pr.sinks || (dsinks && !fd_h2d(dsinks, pr.sinks, H * 4))) &&
             (!pr.alibi || (dalibi && !fd_h2d(dalibi, pr.alibi, H * 4)));
    layer.sinks = dsinks, layer.alibi_slopes = dalibi;
    for (int i = 0; ok && i < ncopy; i++) {
        ks[i] = fd_dev_alloc(kvb), vs[i] = fd_dev_alloc(kvb);
        ok = ks[i] && vs[i] && !fd_h2d(ks[i], pr.k, kvb) && !fd_h2d(vs[i], pr.v, kvb);
    }
    res->err = res->tol = 0;
    double sec = -1;
    if (ok && bo->check) {
        double *ref = malloc(sizeof(double) * H * D), *rl = malloc(sizeof(double) * H);
        fd_reference(&pr, ref, rl);
        fdec_status st = fdec_decode(ctx, &layer, L, dq, ks[0], vs[0], dout, dlse);
        fd_dev_sync();
        res->err = st == FDEC_OK && !fd_d2h(hout, dout, ob) ? fd_out_error(&pr, hout, ref) : INFINITY;
        res->tol = fd_tolerance(&pr);
        free(ref), free(rl);
    }
    if (ok) {
        fdec_context_reserve(ctx, &layer, L);
        cuda_call cc = {ctx, &layer, L, dq, ks, vs, dout, ncopy, FDEC_OK};
        int n = ncopy < 8 ? 8 : ncopy; /* calls per graph */
        sec = fd_dev_time_graph(stream, cuda_call_fn, &cc, n, bo->reps < 5 ? 5 : bo->reps * 4);
        if (cc.st) fprintf(stderr, "flashdec: %s\n", fdec_last_error()), sec = -1;
    } else fprintf(stderr, "flashdec: device allocation or copy failed for %s at %u\n", ps->name, L);
    fdec_plan_info info;
    fdec_plan(ctx, &layer, L, &info);
    double bytes = fd_kv_bytes(&pr.p);
    fill_result(res, ps, L, 0, sec, bytes, bytes / (bw * 1e9), bw, 0, bo->kvt, info.num_chunks);
    fd_variants_name(&layer, res->logits, sizeof res->logits);
    for (int i = 0; i < ncopy; i++) fd_dev_free(ks[i]), fd_dev_free(vs[i]);
    free(ks), free(vs), free(hout);
    fd_dev_free(dq), fd_dev_free(dout), fd_dev_free(dlse), fd_dev_free(dsinks), fd_dev_free(dalibi);
    fdec_context_destroy(ctx);
    fd_dev_stream_destroy(stream);
    fd_problem_free(&pr);
    return sec > 0 ? 0 : -1;
}

static void print_header(void) {
    printf("%-20s %-18s %7s %3s %4s %10s %8s %8s %10s %8s %6s %9s\n", "shape", "logits", "context", "thr", "kv",
           "us/call", "GB/s", "ceil GB/s", "floor us", "% floor", "chunks", "max err");
}
static void print_row(const result *r) {
    printf("%-20s %-18s %7u %3u %4s %10.1f %8.2f %9.1f %10.1f %7.1f%% %6u %9.2g%s\n", r->name, r->logits, r->ctx_len,
           r->threads,
           fdec_dtype_name(r->kvt), r->us, r->gbs, r->bw, r->floor_us, r->pct_floor, r->chunks, r->err,
           r->tol > 0 && !(r->err <= r->tol) ? " FAIL" : "");
}

/* 0, or -1 (said on stderr) where the file cannot be written */
static int write_json(const char *path, const result *r, int n, double bw1, double bw2, double gf) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "flashdec: cannot write %s\n", path);
        return -1;
    }
    char host[128] = "";
    gethostname(host, sizeof host - 1);
    fprintf(f, "{\n  \"host\": \"%s\",\n  \"read_bandwidth_gbs\": %.3f,\n  \"read_bandwidth_1t_gbs\": %.3f,\n"
               "  \"fma_peak_gflops\": %.2f,\n  \"cases\": [\n",
            host, bw2, bw1, gf);
    for (int i = 0; i < n; i++)
        fprintf(f,
                "    {\"shape\": \"%s\", \"logits\": \"%s\", \"context\": %u, \"threads\": %u, \"kv_dtype\": \"%s\", \"us\": %.3f, "
                "\"gbs\": %.3f, \"floor_us\": %.3f, \"pct_floor\": %.2f, \"bw_ceiling_gbs\": %.3f, "
                "\"fma_ceiling_gflops\": %.2f, \"chunks\": %u, \"max_err\": %.3g}%s\n",
                r[i].name, r[i].logits, r[i].ctx_len, r[i].threads, fdec_dtype_name(r[i].kvt), r[i].us, r[i].gbs, r[i].floor_us,
                r[i].pct_floor, r[i].bw, r[i].gflops, r[i].chunks, r[i].err, i + 1 < n ? "," : "");
    fprintf(f, "  ]\n}\n");
    if (fclose(f)) {
        fprintf(stderr, "flashdec: cannot write %s\n", path);
        return -1;
    }
    printf("wrote %s\n", path);
    return 0;
}

/* Streaming-read bandwidth over a buffer far larger than the L3: 1 GiB, or four times the L3 where that is more
 * (a 300 MiB L3 has been seen on these machines). */
#define BW_BYTES (fd_l3_bytes() * 4 > ((size_t)1 << 30) ? fd_l3_bytes() * 4 : ((size_t)1 << 30))
/* The default span of the rotating cache copies: 256 MiB, or twice the L3 where that is more, so that each call
 * reads memory the calls before it did not leave in the L3. */
static size_t default_rotate_bytes(void) {
    const size_t l3 = fd_l3_bytes(), lo = (size_t)256 << 20;
    return 2 * l3 > lo ? 2 * l3 : lo;
}

static long online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

/* ---- bench ---- */

static const char *bench_help =
    "usage: flashdec bench [options]\n"
    "  --preset NAMES|all    comma-separated: llama3-8b, lfm2, gemma4-sliding-full, gemma4-full, gemma4-sliding (default all)\n"
    "  --shape D,H,G         explicit head_dim, q heads, kv heads (instead of --preset)\n"
    "  --window N            sliding window for --shape (0: full)\n"
    "  --ring N              ring capacity for --shape (0: contiguous)\n"
    "  --ctx LIST            context lengths, e.g. 1024,4096,32k (default 1024,4096,32768,131072)\n"
    "  --threads LIST        thread counts (default: all online CPUs)\n"
    "  --kv TYPE             K/V dtype (also --kv-dtype): f16 (default), bf16, f32, f8_e4m3, f8_e5m2, q8_0,\n"
    "                        q4_0; --q, --out\n"
    "                        likewise for q and out (f32, f16, bf16; default f32)\n"
    "  --backend cpu|cuda    (default cpu)\n"
    "  --path auto|scalar|avx2|avx512|neon   CPU kernel path (default auto)\n"
    "  --reps N              timed rounds over the rotating caches (default 5; median reported)\n"
    "  --rotate-mb N         rotate among cache copies covering N MiB (default 256, or twice the L3 where\n"
    "                        that is more: each call misses the L3); 0 times one cache over and over\n"
    "                        (in-cache speed)\n"
    "  --softcap X           soft-cap the logits at X (Gemma 2: 50)\n"
    "  --sinks               a sink logit per head (gpt-oss), random values\n"
    "  --alibi               ALiBi biases with the standard slopes 2^(-8 (h + 1) / H)\n"
    "  --variants LIST       time each case once per entry, side by side: plain, softcap, sinks, alibi, all\n"
    "                        (softcap: --softcap's cap, 30 without it)\n"
    "  --batch B             one step of B sequences (fdec_decode_batch) instead of single calls: with\n"
    "  --lens MIN-MAX        sequence lengths uniform in [MIN, MAX] (default 512-8192)\n"
    "  --page-size LIST      0 (contiguous caches) and page sizes, timed side by side (default 0,16)\n"
    "  --q-len N             query tokens a sequence, 1..16 (default 1)\n"
    "  --no-check            skip the reference check (faster at long contexts)\n"
    "  --json FILE           also write the results as JSON\n"
    "  --gpus N              sequence-parallel decode over N GPUs (libflashdec_nccl, one process a GPU):\n"
    "                        each holds L/N positions; prints the single-GPU and N-GPU times, the speedup and\n"
    "                        the largest difference between the two results (default --ctx 4194304); with\n"
    "                        --softcap, --sinks or --alibi, of calls with those logit variants\n";

static const char *g_argv0 = "flashdec"; /* to find libflashdec_nccl.so beside the tool */

static int cmd_bench(int argc, char **argv, int demo) {
    uint32_t ctxs[32] = {1024, 4096, 32768, 131072}, thr[8] = {(uint32_t)online_cpus()};
    int nctx = 4, nthr = 1;
    const preset *sel[NPRESETS + 1];
    int nsel = 0;
    preset custom = {"custom", 0, 0, 0, 0, 0, 0};
    bench_opts bo = {FDEC_BACKEND_CPU, FDEC_CPU_AUTO, FDEC_F32, FDEC_F16, FDEC_F32, 5, 1, default_rotate_bytes(), {0, 0, 0, 0, 0}};
    fd_variants vars[8]; /* --variants: each case timed once per entry; else the one of --softcap/--sinks/--alibi */
    int nvar = 0;
    float cap = 0;
    int sinks = 0, alibi = 0;
    uint32_t batch = 0, lens[2] = {512, 8192}, page_sizes[8] = {0, 16}, qlen = 1;
    int npage = 2;
    const char *json = NULL, *cmd = demo ? "demo" : "bench";
    int gpus = 0, ctx_given = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(demo ? "usage: flashdec demo\n  The Gemma 4 pair, LFM2 and Llama-3-8B at 1k..32k on the CPU: checked "
                         "against the float64 reference and timed.\n"
                       : bench_help,
                  stdout);
            return 0;
        }
        if (demo) return usage_error(cmd, "unknown option '%s'", a);
        if (!strcmp(a, "--no-check")) { bo.check = 0; continue; }
        if (!strcmp(a, "--sinks")) { sinks = 1; continue; }
        if (!strcmp(a, "--alibi")) { alibi = 1; continue; }
        static const char *const valued[] = {"--preset", "--shape", "--window", "--ring", "--ctx", "--threads", "--kv",
                                             "--kv-dtype", "--q", "--out", "--backend", "--path", "--reps",
                                             "--rotate-mb", "--json", "--gpus", "--softcap", "--variants", "--batch",
                                             "--lens", "--page-size", "--q-len"};
        int known = 0;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= !strcmp(a, valued[k]);
        if (!known) return usage_error(cmd, "unknown option '%s'", a);
        if (!val) return usage_error(cmd, "option '%s' needs a value", a);
        i++;
        if (!strcmp(a, "--preset")) { /* a name, a comma-separated list of names, or all */
            if (!strcmp(val, "all")) continue;
            char names[256];
            snprintf(names, sizeof names, "%s", val);
            for (char *tok = strtok(names, ","); tok; tok = strtok(NULL, ",")) {
                const preset *p = find_preset(tok);
                if (!p) return usage_error(cmd, "unknown preset '%s'", tok);
                if (nsel < NPRESETS) sel[nsel++] = p;
            }
        } else if (!strcmp(a, "--shape")) {
            uint32_t v[3];
            if (parse_list(val, v, 3, 1) != 3) return usage_error(cmd, "--shape wants D,H,G, got '%s'", val);
            custom.D = v[0], custom.H = v[1], custom.G = v[2];
        } else if (!strcmp(a, "--window") || !strcmp(a, "--ring")) {
            uint64_t x;
            if (parse_uint(val, 0, UINT32_MAX, &x))
                return usage_error(cmd, a[2] == 'w' ? "--window must be a whole number in 0..4294967295, got '%s'"
                                                    : "--ring must be a whole number in 0..4294967295, got '%s'",
                                   val);
            *(a[2] == 'w' ? &custom.window : &custom.ring) = (uint32_t)x;
        } else if (!strcmp(a, "--ctx")) {
            if ((nctx = parse_list(val, ctxs, 32, 1)) < 1)
                return usage_error(cmd, "--ctx wants contexts of 1..4294967295 positions (1024,32k,...), got '%s'",
                                   val);
            ctx_given = 1;
        } else if (!strcmp(a, "--threads")) {
            if ((nthr = parse_list(val, thr, 8, 1)) < 1) return usage_error(cmd, "bad --threads list '%s'", val);
        } else if (!strcmp(a, "--kv") || !strcmp(a, "--kv-dtype")) {
            if (parse_dtype_kv(val, &bo.kvt, 1))
                return usage_error(cmd, "bad K/V dtype '%s' (f32, f16, bf16, f8_e4m3, f8_e5m2, q8_0, q4_0)", val);
        } else if (!strcmp(a, "--q")) {
            if (parse_dtype(val, &bo.qt)) return usage_error(cmd, "bad dtype '%s' (f32, f16, bf16)", val);
        } else if (!strcmp(a, "--out")) {
            if (parse_dtype(val, &bo.ot)) return usage_error(cmd, "bad dtype '%s' (f32, f16, bf16)", val);
        } else if (!strcmp(a, "--backend")) {
            if (!strcmp(val, "cpu")) bo.backend = FDEC_BACKEND_CPU;
            else if (!strcmp(val, "cuda")) bo.backend = FDEC_BACKEND_CUDA;
            else return usage_error(cmd, "unknown backend '%s' (cpu, cuda)", val);
        } else if (!strcmp(a, "--path")) {
            if (!fdec_cpu_path_parse(val, &bo.path))
                return usage_error(cmd, "unknown path '%s' (auto, scalar, avx2, avx512, neon)", val);
        } else if (!strcmp(a, "--reps")) {
            uint64_t x;
            if (parse_uint(val, 1, 1000000, &x)) return usage_error(cmd, "--reps must be in 1..1000000, got '%s'", val);
            bo.reps = (int)x;
        } else if (!strcmp(a, "--rotate-mb")) {
            uint64_t x;
            if (parse_uint(val, 0, 1 << 20, &x))
                return usage_error(cmd, "--rotate-mb must be in 0..1048576, got '%s'", val);
            bo.rotate_bytes = (size_t)x << 20;
        } else if (!strcmp(a, "--json")) {
            FILE *f = fopen(val, "a"); /* writable, before minutes of measurement */
            if (!f) return usage_error(cmd, "--json: cannot write '%s'", val);
            fclose(f);
            json = val;
        } else if (!strcmp(a, "--softcap")) {
            char *end;
            cap = strtof(val, &end);
            if (*end || !(cap > 0) || !isfinite(cap))
                return usage_error(cmd, "--softcap must be a positive number, got '%s'", val);
        } else if (!strcmp(a, "--variants")) {
            char names[256];
            snprintf(names, sizeof names, "%s", val);
            nvar = 0;
            for (char *tok = strtok(names, ","); tok; tok = strtok(NULL, ",")) {
                const int all = !strcmp(tok, "all");
                if (strcmp(tok, "plain") && strcmp(tok, "softcap") && strcmp(tok, "sinks") && strcmp(tok, "alibi") &&
                    !all)
                    return usage_error(cmd, "unknown variant '%s' (plain, softcap, sinks, alibi, all)", tok);
                if (nvar == 8) return usage_error(cmd, "--variants takes at most 8 entries, got '%s'", val);
                fd_variants *v = &vars[nvar++];
                memset(v, 0, sizeof *v);
                if (all || !strcmp(tok, "softcap")) v->softcap = -1; /* the cap, once --softcap is read */
                if (all || !strcmp(tok, "sinks")) v->sinks = 1;
                if (all || !strcmp(tok, "alibi")) v->alibi = 1;
            }
        } else if (!strcmp(a, "--batch")) {
            uint64_t x;
            if (parse_uint(val, 1, 65536, &x)) return usage_error(cmd, "--batch must be in 1..65536, got '%s'", val);
            batch = (uint32_t)x;
        } else if (!strcmp(a, "--lens")) {
            unsigned long long lo, hi;
            char tail;
            if (sscanf(val, "%llu-%llu%c", &lo, &hi, &tail) != 2 || lo < 1 || hi < lo || hi > UINT32_MAX)
                return usage_error(cmd, "--lens wants MIN-MAX with 1 <= MIN <= MAX, got '%s'", val);
            lens[0] = (uint32_t)lo, lens[1] = (uint32_t)hi;
        } else if (!strcmp(a, "--page-size")) {
            if ((npage = parse_list(val, page_sizes, 8, 0)) < 1)
                return usage_error(cmd, "--page-size wants a list of page sizes (0: contiguous), got '%s'", val);
        } else if (!strcmp(a, "--q-len")) {
            uint64_t x;
            if (parse_uint(val, 1, FDEC_MAX_Q_LEN, &x)) return usage_error(cmd, "--q-len must be in 1..16, got '%s'", val);
            qlen = (uint32_t)x;
        } else if (!strcmp(a, "--gpus")) {
            uint64_t x;
            if (parse_uint(val, 1, 64, &x)) return usage_error(cmd, "--gpus must be in 1..64, got '%s'", val);
            gpus = (int)x;
        }
        else return usage_error(cmd, "unknown option '%s'", a);
    }
    if (nvar && (sinks || alibi))
        return usage_error(cmd, "%s", "--variants names the variants itself: leave out --sinks and --alibi "
                                      "(--softcap sets its cap)");
    for (int i = 0; i < nvar; i++)
        if (vars[i].softcap < 0) vars[i].softcap = cap ? cap : 30.0f;
    if (!nvar) {
        memset(&vars[0], 0, sizeof vars[0]);
        vars[0].softcap = cap, vars[0].sinks = sinks, vars[0].alibi = alibi, nvar = 1;
    }
    if (custom.D) sel[nsel++] = &custom;
    if (!nsel)
        for (int i = 0; i < NPRESETS; i++) sel[nsel++] = &presets[i];
    if (gpus && nvar > 1) return usage_error(cmd, "%s", "--gpus takes one set of logit variants, not --variants");
    if (gpus) { /* sequence-parallel mode: f16 K/V, f32 q/out, contiguous cache (a preset's ring is dropped) */
        if (!ctx_given) ctxs[0] = 4194304, nctx = 1;
        int rc = 0;
        for (int i = 0; i < nsel; i++) {
            sp_bench_args sb = {sel[i]->name, sel[i]->D, sel[i]->H, sel[i]->G, sel[i]->window, sel[i]->scale,
                                ctxs, nctx, gpus, bo.reps, vars[0].softcap, vars[0].sinks, vars[0].alibi};
            const int r = fd_sp_bench(&sb, g_argv0);
            if (r == 3) return 1; /* cannot run here at all: said once */
            rc |= r;
        }
        return rc;
    }
    if (batch) { /* one step of a batch of sequences, per preset and page size (batch_bench.c) */
        if (nvar > 1) return usage_error(cmd, "%s", "--batch takes one set of logit variants, not --variants");
        const int cuda = bo.backend == FDEC_BACKEND_CUDA;
        if (cuda && !fd_dev_available()) {
            fprintf(stderr, "flashdec %s: no CUDA device (or no CUDA in this build)\n", cmd);
            return 1;
        }
        const double cuda_bw = cuda ? fd_dev_copy_bandwidth((size_t)2 << 30) : 0; /* as the single calls' ceiling */
        printf("flashdec %s: batch of %u sequences, lengths %u-%u, %u query token(s) each, K/V %s; %s backend%s\n", cmd,
               batch, lens[0], lens[1], qlen, fdec_dtype_name(bo.kvt), cuda ? "CUDA" : "CPU",
               cuda ? " (ceiling: the device-to-device copy rate, read + write; CUDA-graph replays)" : "");
        fd_batch_bench_header();
        int rc = 0;
        for (int i = 0; i < nsel; i++) {
            fd_batch_args ba;
            memset(&ba, 0, sizeof ba);
            ba.name = sel[i]->name;
            ba.layer = layer_of_preset(sel[i], &bo);
            ba.layer.ring_capacity = 0; /* a window over the whole cache: pages take no ring */
            float *arr = malloc(2 * sizeof(float) * sel[i]->H);
            for (uint32_t h = 0; h < sel[i]->H; h++) arr[h] = (float)(h % 5) - 2.0f; /* sinks */
            fd_alibi_slopes(arr + sel[i]->H, sel[i]->H, 1.0);
            ba.layer.softcap = vars[0].softcap;
            ba.layer.sinks = vars[0].sinks ? arr : NULL;
            ba.layer.alibi_slopes = vars[0].alibi ? arr + sel[i]->H : NULL;
            ba.batch = batch, ba.len_lo = lens[0], ba.len_hi = lens[1], ba.q_len = qlen;
            ba.pages = page_sizes, ba.npages = npage, ba.threads = thr, ba.nthreads = nthr, ba.reps = bo.reps;
            ba.rotate_bytes = cuda ? (size_t)1 << 30 : bo.rotate_bytes, ba.bw_bytes = BW_BYTES;
            ba.cuda = cuda, ba.cuda_bw = cuda_bw;
            float *darr = NULL; /* the per-head arrays where the CUDA backend reads them */
            if (cuda && (ba.layer.sinks || ba.layer.alibi_slopes)) {
                darr = fd_dev_alloc(2 * sizeof(float) * sel[i]->H);
                if (!darr || fd_h2d(darr, arr, 2 * sizeof(float) * sel[i]->H)) return 1;
                ba.layer.sinks = ba.layer.sinks ? darr : NULL;
                ba.layer.alibi_slopes = ba.layer.alibi_slopes ? darr + sel[i]->H : NULL;
            }
            rc |= fd_batch_bench(&ba);
            free(arr), fd_dev_free(darr);
        }
        return rc;
    }
    if (demo) {
        static const uint32_t demo_ctx[] = {1024, 4096, 16384, 32768};
        nctx = 4;
        memcpy(ctxs, demo_ctx, sizeof demo_ctx);
        bo.reps = 3;
        sel[0] = find_preset("gemma4-sliding"), sel[1] = find_preset("gemma4-full"), sel[2] = find_preset("lfm2");
        sel[3] = find_preset("llama3-8b");
        nsel = 4;
    }
    double bw[8], gf[8];
    if (bo.backend == FDEC_BACKEND_CUDA) {
        if (!fd_dev_available()) {
            fprintf(stderr, "flashdec %s: no CUDA device (or no CUDA in this build)\n", cmd);
            return 1;
        }
        nthr = 1;
        thr[0] = 0;
        bo.rotate_bytes = (size_t)1 << 30; /* well past the L2 */
        bw[0] = fd_dev_copy_bandwidth((size_t)2 << 30);
        gf[0] = 0;
        printf("flashdec %s: CUDA backend on %s; device-to-device copy %.0f GB/s (read + write, 2 GiB); "
               "times are CUDA-graph replays over rotating caches\n", cmd, fd_dev_name(), bw[0]);
    } else {
        fdec_context *probe;
        fdec_options po = fdec_default_options();
        po.cpu_path = bo.path;
        if (fdec_context_create(FDEC_BACKEND_CPU, &po, &probe) != FDEC_OK) {
            fprintf(stderr, "flashdec %s: %s\n", cmd, fdec_last_error());
            return 1;
        }
        fdec_layer pl = layer_of(64, 1, 1);
        fdec_plan_info pinfo;
        fdec_plan(probe, &pl, 1, &pinfo);
        printf("flashdec %s: CPU backend, path %s, %ld online CPUs\n", cmd, pinfo.path, online_cpus());
        fdec_context_destroy(probe);
        /* ceilings, measured in this run, per thread count */
        for (int t = 0; t < nthr; t++) {
            bw[t] = fd_read_bandwidth(BW_BYTES, thr[t]);
            gf[t] = fd_fma_peak(thr[t]);
            printf("ceilings with %u thread(s): streaming read %.1f GB/s (%zu MiB buffer; measured again before each "
                   "case: column 'ceil'), f32 FMA peak %.0f GFLOP/s (%d-bit FMAs, best of %d runs)\n",
                   thr[t], bw[t], (size_t)(BW_BYTES >> 20), gf[t], fd_fma_width(), FD_FMA_TRIALS);
        }
    }
    print_header();
    result *res = calloc((size_t)nsel * nctx * nthr * nvar, sizeof *res);
    int nres = 0, bad = 0;
    for (int s = 0; s < nsel; s++)
        for (int c = 0; c < nctx; c++)
            for (int t = 0; t < nthr; t++)
                for (int w = 0; w < nvar; w++) { /* the variants of a case one after another: side by side */
                    /* the shared machine's bandwidth moves between cases: measure it again right before each */
                    double bwc = bo.backend == FDEC_BACKEND_CPU ? fd_read_bandwidth(BW_BYTES, thr[t]) : bw[t];
                    bo.var = vars[w];
                    if (time_case(sel[s], ctxs[c], thr[t], &bo, bwc, gf[t], &res[nres]) == 0) {
                        print_row(&res[nres]);
                        bad += res[nres].tol > 0 && !(res[nres].err <= res[nres].tol);
                        nres++;
                    } else bad++;
                    fflush(stdout);
                }
    if (json && write_json(json, res, nres, nthr > 1 ? bw[0] : 0, bw[nthr - 1], gf[nthr - 1])) return 1;
    free(res);
    if (bad) printf("%d case(s) FAILED the reference check\n", bad);
    return bad ? 1 : 0;
}

/* ---- verify ---- */

static int cmd_verify(int argc, char **argv) {
    uint64_t seed = 1;
    int configs = 500;
    fdec_cpu_path path = FDEC_CPU_AUTO;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            puts("usage: flashdec verify [--seed N] [--configs N] [--path auto|scalar|avx2|avx512|neon]\n"
                 "  Random configurations (every dtype, head_dim 1..512, GQA 1..16, windows, rings, strided\n"
                 "  layouts, logit variants), then a tenth as many random batches (paged and contiguous caches,\n"
                 "  1..16 query tokens), against the float64 reference. Exit code 1 if any fails.");
            return 0;
        }
        if (strcmp(a, "--seed") && strcmp(a, "--configs") && strcmp(a, "--path"))
            return usage_error("verify", "unknown option '%s'", a);
        if (!val) return usage_error("verify", "option '%s' needs a value", a);
        i++;
        uint64_t x;
        if (!strcmp(a, "--seed")) {
            if (parse_uint(val, 0, UINT64_MAX, &seed))
                return usage_error("verify", "--seed must be a whole number, got '%s'", val);
        } else if (!strcmp(a, "--configs")) {
            if (parse_uint(val, 1, 100000000, &x))
                return usage_error("verify", "--configs must be in 1..100000000, got '%s'", val);
            configs = (int)x;
        }
        else if (!strcmp(a, "--path")) {
            if (!fdec_cpu_path_parse(val, &path))
                return usage_error("verify", "unknown path '%s' (auto, scalar, avx2, avx512, neon)", val);
        } else return usage_error("verify", "unknown option '%s'", a);
    }
    fdec_options o = fdec_default_options();
    o.cpu_path = path;
    fdec_context *ctx;
    if (fdec_context_create(FDEC_BACKEND_CPU, &o, &ctx) != FDEC_OK) {
        fprintf(stderr, "flashdec verify: %s\n", fdec_last_error());
        return 1;
    }
    fd_rng r = {seed};
    int fails = 0;
    double worst = 0;
    for (int i = 0; i < configs; i++) {
        fdec_layer L;
        uint32_t n;
        fd_layout lay;
        fd_random_config(&r, &L, &n, &lay);
        fd_variants var;
        fd_random_variants(&r, &var);
        fd_problem pr;
        if (fd_problem_make(&pr, &L, n, lay, 1.0f, &r) || fd_problem_set_variants(&pr, &var, &r)) {
            fd_problem_free(&pr);
            fails++;
            continue;
        }
        size_t HD = (size_t)pr.p.H * pr.p.D;
        double *ref = malloc(HD * sizeof(double)), *rl = malloc(pr.p.H * sizeof(double));
        void *out = malloc(HD * 4);
        float *lse = malloc(pr.p.H * 4);
        memset(out, 0xff, HD * 4);
        fd_reference(&pr, ref, rl);
        fdec_status st = fdec_decode(ctx, &pr.layer, n, pr.q, pr.k, pr.v, out, lse);
        double e = st == FDEC_OK ? fd_out_error(&pr, out, ref) : INFINITY, tol = fd_tolerance(&pr);
        double le = st == FDEC_OK ? fd_lse_error(&pr, lse, rl) : INFINITY;
        if (!(e <= tol) || !(le <= fd_lse_tolerance(&pr))) {
            fails++;
            char vn[48];
            printf("FAIL config %d: D=%u H=%u G=%u L=%u window=%u ring=%u layout=%s logits=%s: err %.3g (tol %.3g) lse "
                   "%.3g%s%s\n",
                   i, L.head_dim, L.num_q_heads, L.num_kv_heads, n, L.window, L.ring_capacity, fd_layout_name(lay),
                   fd_variants_name(&pr.layer, vn, sizeof vn), e, tol, le, st ? ": " : "", st ? fdec_last_error() : "");
        }
        if (e / tol > worst) worst = e / tol;
        free(ref), free(rl), free(out), free(lse);
        fd_problem_free(&pr);
    }
    /* batches (fdec_decode_batch): paged and contiguous, 1..16 tokens, variants; a tenth as many */
    const int nb = configs / 10 + 1;
    static const uint32_t pages[] = {0, 0, 1, 3, 16, 32, 64, 128};
    for (int i = 0; i < nb; i++) {
        fd_batch_case c;
        fd_batch_make(&c, &r, 1 + (uint32_t)(fd_rand(&r) % 6), pages[fd_rand(&r) % 8], (int)(fd_rand(&r) % 2),
                      (int)(fd_rand(&r) % 3 == 0), (int)(fd_rand(&r) % 4 != 0), 1);
        const uint32_t H = c.L.num_q_heads, D = c.L.head_dim;
        void *out = malloc(c.rows * H * D * 4);
        fdec_status st = fdec_decode_batch(ctx, &c.L, &c.b, c.q, c.k, c.v, out, NULL);
        double e = st ? INFINITY : 0, tol = 1;
        size_t row = 0;
        for (uint32_t s = 0; !st && s < c.b.num_seqs; s++) {
            const uint32_t nq = c.q_lens[s];
            double *ref = malloc(sizeof(double) * nq * H * D), *rl = malloc(sizeof(double) * nq * H);
            const double t = fd_batch_reference(&c, s, row, ref, rl);
            for (size_t x = 0; x < (size_t)nq * H * D; x++) {
                const double d = fabs(fdec_load_elem(out, row * H * D + x, c.L.out_dtype) - ref[x]) / t;
                if (!(d <= e)) e = isnan(d) ? INFINITY : d;
            }
            free(ref), free(rl);
            row += nq;
        }
        if (!(e <= tol)) {
            fails++;
            printf("FAIL batch %d: B=%u D=%u H=%u G=%u page=%u max_len=%u max_q=%u window=%u: err %.3g of tolerance%s%s\n",
                   i, c.b.num_seqs, D, H, c.L.num_kv_heads, c.b.page_size, c.b.max_seq_len, c.b.max_q_len, c.L.window,
                   e, st ? ": " : "", st ? fdec_last_error() : "");
        }
        if (e > worst) worst = e;
        free(out);
        fd_batch_free(&c);
    }
    fdec_context_destroy(ctx);
    printf("verify: %d configurations and %d batches, seed %llu, %d failed, worst error %.2f of tolerance\n", configs,
           nb, (unsigned long long)seed, fails, worst);
    return fails ? 1 : 0;
}

/* ---- info ---- */

static int cmd_info(int argc, char **argv) {
    if (argc > 0) {
        if (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
            puts("usage: flashdec info\n  CPU features, the kernel path chosen, threads, and the measured "
                 "streaming-read bandwidth and FMA peak.");
            return 0;
        }
        return usage_error("info", "unknown option '%s'", argv[0]);
    }
    unsigned f = fdec_cpu_features();
    printf("flashdec %s\n", fdec_version());
    printf("cpu paths available: scalar%s%s%s\n", (f >> FDEC_CPU_AVX2) & 1 ? " avx2" : "",
           (f >> FDEC_CPU_AVX512) & 1 ? " avx512" : "", (f >> FDEC_CPU_NEON) & 1 ? " neon" : "");
    fdec_context *ctx;
    if (fdec_context_create(FDEC_BACKEND_CPU, NULL, &ctx) != FDEC_OK) {
        fprintf(stderr, "flashdec info: %s\n", fdec_last_error());
        return 1;
    }
    fdec_layer pl = layer_of(64, 1, 1);
    fdec_plan_info pinfo;
    fdec_plan(ctx, &pl, 1, &pinfo);
    fdec_context_destroy(ctx);
    long n = online_cpus();
    printf("chosen path: %s (override with FDEC_CPU_PATH=scalar|avx2|avx512|neon)\n", pinfo.path);
    printf("threads: %ld (all online CPUs; fdec_options.threads sets it)\n", n);
    printf("cuda backend: %s\n", fdec_backend_available(FDEC_BACKEND_CUDA) ? "compiled in" : "not compiled in");
    if (fd_dev_available()) printf("cuda device: %s\n", fd_dev_name());
    for (long t = 1; t <= n && t <= 64; t = t == n ? n + 1 : (t * 2 > n ? n : t * 2))
        printf("streaming read, %ld thread(s): %.1f GB/s; f32 FMA peak %.0f GFLOP/s (%d-bit FMAs)\n", t,
               fd_read_bandwidth(BW_BYTES, (uint32_t)t), fd_fma_peak((uint32_t)t), fd_fma_width());
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* line by line, also into a pipe */
    g_argv0 = argv[0];
    const char *help = "usage: flashdec <command> [options]\n"
                       "  demo     the model presets at 1k..32k on the CPU, checked and timed (about a minute)\n"
                       "  bench    timing table against this machine's ceilings (--help for options)\n"
                       "  verify   random sweep against the float64 reference\n"
                       "  info     CPU features, kernel path, threads, measured bandwidth\n";
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(help, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("flashdec %s\n", fdec_version());
        return 0;
    }
    if (!strcmp(argv[1], "demo")) return cmd_bench(argc - 2, argv + 2, 1);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 2, argv + 2, 0);
    if (!strcmp(argv[1], "verify")) return cmd_verify(argc - 2, argv + 2);
    if (!strcmp(argv[1], "info")) return cmd_info(argc - 2, argv + 2);
    fprintf(stderr, "flashdec: unknown command '%s' (demo, bench, verify, info; see flashdec --help)\n", argv[1]);
    return 2;
}

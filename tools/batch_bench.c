/* batch_bench.c — `flashdec bench --batch B` on the CPU or CUDA: one step of B sequences of lengths uniform in [lo, hi] with
 * q_len query tokens each, from contiguous caches (page size 0) or a paged pool (pages dealt in a shuffled order, as
 * an engine's allocator leaves them), each page size of the list timed side by side on the same batch. */
#include "batch_bench.h"

#include "bench_util.h"
#include "devmem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The caches of one layout: pool (or per-sequence caches) of K and V, and the page table. */
typedef struct {
    fdec_batch b;
    int32_t *table;
    void *k, *v;
    size_t bytes; /* of each of k and v */
} layout;

static void layout_free(layout *l) {
    free(l->table), free(l->k), free(l->v);
    memset(l, 0, sizeof *l);
}

/* Fills position t of sequence i with values of (i, t, g, d) alone, so that every layout holds the same batch. */
static float value(uint32_t i, uint64_t t, uint32_t g, uint32_t d, int which) {
    fd_rng r = {((((uint64_t)i * 1000003 + t) * 131 + g) * 977 + d) * 2 + (uint64_t)which + 1};
    return (float)(2 * fd_uniform(&r) - 1);
}

static int layout_make(layout *l, const fdec_layer *L, const uint32_t *lens, const uint32_t *ql, uint32_t B,
                       uint32_t maxlen, uint32_t P, fd_rng *r) {
    memset(l, 0, sizeof *l);
    const uint32_t D = L->head_dim, G = L->num_kv_heads;
    const fdec_dtype T = L->kv_dtype;
    const size_t row = (size_t)G * D; /* elements; whole blocks of a block type (the presets' head_dims) */
    fdec_batch *b = &l->b;
    b->num_seqs = B, b->seq_lens = lens, b->q_lens = ql, b->max_seq_len = maxlen;
    uint32_t mq = 1;
    for (uint32_t i = 0; i < B; i++) mq = ql[i] > mq ? ql[i] : mq;
    b->max_q_len = mq;
    if (P) {
        b->page_size = P;
        b->max_pages = (maxlen + P - 1) / P;
        uint32_t pages = 0;
        for (uint32_t i = 0; i < B; i++) pages += (lens[i] + P - 1) / P;
        b->num_pages = pages;
        uint32_t *perm = malloc(pages * sizeof *perm);
        l->table = malloc((size_t)B * b->max_pages * sizeof(int32_t));
        if (!perm || !l->table) return free(perm), -1;
        fd_shuffle(perm, pages, r);
        uint32_t next = 0;
        for (uint32_t i = 0; i < B; i++)
            for (uint32_t pg = 0; pg < b->max_pages; pg++)
                l->table[(size_t)i * b->max_pages + pg] = (uint64_t)pg * P < lens[i] ? (int32_t)perm[next++] : -1;
        free(perm);
        b->page_table = l->table;
        l->bytes = fdec_dtype_bytes(T, (size_t)pages * P * row);
    } else {
        b->kv_seq_stride = (size_t)maxlen * row;
        l->bytes = fdec_dtype_bytes(T, (size_t)B * b->kv_seq_stride);
    }
    l->k = fd_alloc_kv(l->bytes), l->v = fd_alloc_kv(l->bytes);
    float *kx = malloc(D * sizeof(float)), *vx = malloc(D * sizeof(float));
    if (!l->k || !l->v || !kx || !vx) return free(kx), free(vx), -1;
    for (uint32_t i = 0; i < B; i++)
        for (uint64_t t = 0; t < lens[i]; t++) {
            size_t at = P ? (size_t)l->table[(size_t)i * b->max_pages + t / P] * P * row + (size_t)(t % P) * row
                          : (size_t)i * b->kv_seq_stride + (size_t)t * row;
            for (uint32_t g = 0; g < G; g++) {
                for (uint32_t d = 0; d < D; d++) kx[d] = value(i, t, g, d, 0), vx[d] = value(i, t, g, d, 1);
                fdec_store_row(l->k, at + (size_t)g * D, T, kx, D);
                fdec_store_row(l->v, at + (size_t)g * D, T, vx, D);
            }
        }
    free(kx), free(vx);
    return 0;
}

/* CUDA: the layout's arrays in device memory, K/V copied to rotate past the L2, timed as CUDA-graph replays of one
 * step after another. Returns the seconds of a step (negative on a failure) and the first step's out in hout. */
typedef struct {
    fdec_context *ctx;
    const fdec_layer *L;
    fdec_batch b;
    const void *q;
    void **ks, **vs;
    void *out;
    int ncopy;
    fdec_status st;
} cuda_step;

static void cuda_step_fn(void *x, int i) {
    cuda_step *c = x;
    const fdec_status st = fdec_decode_batch(c->ctx, c->L, &c->b, c->q, c->ks[i % c->ncopy], c->vs[i % c->ncopy],
                                             c->out, NULL);
    if (st) c->st = st;
}

static double cuda_time(fdec_context *ctx, void *stream, const fdec_layer *L, const layout *lay, const void *q,
                        size_t qb, size_t ob, size_t rotate, int reps, void *hout) {
    const fdec_batch *hb = &lay->b;
    const size_t B = hb->num_seqs, tb = hb->page_size ? B * hb->max_pages * sizeof(int32_t) : 0;
    int ncopy = (int)((rotate + 2 * lay->bytes - 1) / (2 * lay->bytes));
    ncopy = ncopy < 1 ? 1 : ncopy > 64 ? 64 : ncopy;
    void **ks = calloc((size_t)ncopy, sizeof *ks), **vs = calloc((size_t)ncopy, sizeof *vs);
    void *dq = fd_dev_alloc(qb), *dout = fd_dev_alloc(ob), *dl = fd_dev_alloc(B * 4), *dql = fd_dev_alloc(B * 4);
    void *dt = tb ? fd_dev_alloc(tb) : NULL;
    int ok = ks && vs && dq && dout && dl && dql && (dt || !tb) && !fd_h2d(dq, q, qb) &&
             !fd_h2d(dl, hb->seq_lens, B * 4) && !fd_h2d(dql, hb->q_lens, B * 4) && (!tb || !fd_h2d(dt, hb->page_table, tb));
    for (int c = 0; ok && c < ncopy; c++) {
        ks[c] = fd_dev_alloc(lay->bytes), vs[c] = fd_dev_alloc(lay->bytes);
        ok = ks[c] && vs[c] && !fd_h2d(ks[c], lay->k, lay->bytes) && !fd_h2d(vs[c], lay->v, lay->bytes);
    }
    cuda_step cs = {ctx, L, *hb, dq, ks, vs, dout, ncopy, FDEC_OK};
    cs.b.seq_lens = dl, cs.b.q_lens = dql, cs.b.page_table = dt;
    double sec = -1;
    if (ok && !fdec_context_reserve_batch(ctx, L, &cs.b)) {
        cuda_step_fn(&cs, 0);
        if (!cs.st && !fd_dev_sync() && !fd_d2h(hout, dout, ob))
            sec = fd_dev_time_graph(stream, cuda_step_fn, &cs, ncopy < 4 ? 4 : ncopy, reps < 5 ? 5 : reps * 2);
    }
    if (cs.st || !ok) fprintf(stderr, "flashdec: %s\n", cs.st ? fdec_last_error() : "device allocation or copy failed");
    for (int c = 0; c < ncopy && ks && vs; c++) fd_dev_free(ks[c]), fd_dev_free(vs[c]);
    free(ks), free(vs);
    fd_dev_free(dq), fd_dev_free(dout), fd_dev_free(dl), fd_dev_free(dql), fd_dev_free(dt);
    return cs.st ? -1 : sec;
}

int fd_batch_bench(const fd_batch_args *a) {
    const fdec_layer *L = &a->layer;
    fd_rng r = {0xba7c4 + a->batch};
    uint32_t *lens = malloc(a->batch * sizeof *lens), *ql = malloc(a->batch * sizeof *ql);
    uint32_t maxlen = 1;
    size_t rows = 0;
    for (uint32_t i = 0; i < a->batch; i++) {
        lens[i] = a->len_lo + (uint32_t)(fd_rand(&r) % ((uint64_t)a->len_hi - a->len_lo + 1));
        ql[i] = a->q_len < lens[i] ? a->q_len : lens[i];
        rows += ql[i];
        if (lens[i] > maxlen) maxlen = lens[i];
    }
    const uint32_t H = L->num_q_heads, D = L->head_dim;
    void *q = malloc(rows * H * D * fdec_dtype_size(L->q_dtype));
    void *out = malloc(rows * H * D * fdec_dtype_size(L->out_dtype));
    float *first_out = malloc(rows * H * D * sizeof(float));
    for (size_t i = 0; i < rows * H * D; i++) fdec_store_elem(q, i, L->q_dtype, (float)(2 * fd_uniform(&r) - 1));
    /* the bytes a step reads: every sequence's attended positions, K and V */
    double kv_bytes = 0;
    for (uint32_t i = 0; i < a->batch; i++) {
        fdec_problem s;
        memset(&s, 0, sizeof s);
        s.qpos = lens[i] - 1, s.nq = ql[i], s.window = L->window;
        kv_bytes += 2.0 * (double)(lens[i] - fdec_token_lo(&s, 0)) * L->num_kv_heads *
                    (double)fdec_dtype_bytes(L->kv_dtype, D);
    }
    int rc = 0;
    const size_t qb = rows * H * D * fdec_dtype_size(L->q_dtype), ob = rows * H * D * fdec_dtype_size(L->out_dtype);
    for (int t = 0; t < (a->cuda ? 1 : a->nthreads); t++) {
        fdec_options o = fdec_default_options();
        o.threads = a->cuda ? 0 : a->threads[t];
        void *stream = a->cuda ? fd_dev_stream_create() : NULL;
        o.cuda_stream = stream;
        fdec_context *ctx;
        if (fdec_context_create(a->cuda ? FDEC_BACKEND_CUDA : FDEC_BACKEND_CPU, &o, &ctx)) {
            fprintf(stderr, "flashdec: %s\n", fdec_last_error());
            fd_dev_stream_destroy(stream);
            rc = 1;
            break;
        }
        const double bw = a->cuda ? a->cuda_bw : fd_read_bandwidth(a->bw_bytes, a->threads[t]);
        int first = 1;
        for (int pi = 0; pi < a->npages; pi++) {
            layout lay;
            if (layout_make(&lay, L, lens, ql, a->batch, maxlen, a->pages[pi], &r)) {
                fprintf(stderr, "flashdec: cannot allocate the batch's caches\n");
                layout_free(&lay);
                rc = 1;
                continue;
            }
            double sec = 0;
            fdec_status st = FDEC_OK;
            if (a->cuda) {
                sec = cuda_time(ctx, stream, L, &lay, q, qb, ob, a->rotate_bytes, a->reps, out);
                if (sec <= 0) st = FDEC_EBACKEND;
            } else {
                fdec_context_reserve_batch(ctx, L, &lay.b);
                st = fdec_decode_batch(ctx, L, &lay.b, q, lay.k, lay.v, out, NULL);
            }
            if (st) {
                fprintf(stderr, "flashdec: %s\n", fdec_last_error());
                layout_free(&lay);
                rc = 1;
                continue;
            }
            /* the same batch in every layout: the largest difference from the first layout's result (a page's end
             * ends a block of positions, so the sums round differently) */
            double diff = 0;
            for (size_t x = 0; x < rows * H * D; x++) {
                const float y = fdec_load_elem(out, x, L->out_dtype);
                if (first) first_out[x] = y;
                const double d = fabs((double)y - first_out[x]);
                if (!(d <= diff)) diff = isnan(d) ? INFINITY : d;
            }
            first = 0;
            const int same = diff <= 1e-2;
            if (a->cuda) {
                printf("%-20s %5u %5u-%-5u %5u %5u %4s %10.1f %8.1f %9.0f %7.1f%% %9.2g%s\n", a->name, a->batch,
                       a->len_lo, a->len_hi, a->q_len, a->pages[pi], "gpu", sec * 1e6, kv_bytes / sec / 1e9, bw,
                       100.0 * kv_bytes / sec / 1e9 / bw, diff, same ? "" : "  DIFFERS from the first layout");
                if (!same) rc = 1;
                fflush(stdout);
                layout_free(&lay);
                continue;
            }
            /* calls over a cache copied to reach past the L3: one pool and its copies rotate */
            const int reps = a->reps < 1 ? 1 : a->reps;
            int ncopy = (int)((a->rotate_bytes + 2 * lay.bytes - 1) / (2 * lay.bytes));
            if (ncopy < 1) ncopy = 1;
            if (ncopy > 64) ncopy = 64;
            void **ks = calloc((size_t)ncopy, sizeof *ks), **vs = calloc((size_t)ncopy, sizeof *vs);
            ks[0] = lay.k, vs[0] = lay.v;
            for (int c = 1; c < ncopy; c++) {
                ks[c] = fd_alloc_kv(lay.bytes), vs[c] = fd_alloc_kv(lay.bytes);
                if (!ks[c] || !vs[c]) {
                    free(ks[c]), free(vs[c]);
                    ncopy = c;
                    break;
                }
                memcpy(ks[c], lay.k, lay.bytes), memcpy(vs[c], lay.v, lay.bytes);
            }
            const int calls = reps * ncopy < 10 ? 10 : reps * ncopy;
            double *tm = malloc(sizeof(double) * (size_t)calls);
            for (int c = 0; c < calls; c++) {
                const double t0 = fd_now();
                fdec_decode_batch(ctx, L, &lay.b, q, ks[c % ncopy], vs[c % ncopy], out, NULL);
                tm[c] = fd_now() - t0;
            }
            sec = fd_median(tm, calls);
            printf("%-20s %5u %5u-%-5u %5u %5u %4u %10.1f %8.2f %9.1f %7.1f%% %9.2g%s\n", a->name, a->batch, a->len_lo,
                   a->len_hi, a->q_len, a->pages[pi], a->threads[t], sec * 1e6, kv_bytes / sec / 1e9, bw,
                   100.0 * kv_bytes / sec / 1e9 / bw, diff, same ? "" : "  DIFFERS from the first layout");
            if (!same) rc = 1;
            fflush(stdout);
            for (int c = 1; c < ncopy; c++) free(ks[c]), free(vs[c]);
            free(ks), free(vs), free(tm);
            layout_free(&lay);
        }
        fdec_context_destroy(ctx);
        fd_dev_stream_destroy(stream);
    }
    free(lens), free(ql), free(q), free(out), free(first_out);
    return rc;
}

void fd_batch_bench_header(void) {
    printf("%-20s %5s %11s %5s %5s %4s %10s %8s %9s %8s %9s\n", "shape", "batch", "lengths", "q_len", "page", "thr",
           "us/step", "GB/s", "ceil GB/s", "% ceil", "vs first");
}

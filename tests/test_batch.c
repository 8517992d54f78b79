/* test_batch.c — fdec_decode_batch and fdec_kv_write against the float64 reference: random batches of contiguous
 * and paged caches (shuffled page tables, pages shared by two sequences, -1 entries outside a window, both page
 * layouts), 1..16 query tokens, sequences of length 1 and q_len = seq_len, the logit variants; batch invariance; every
 * bad input refused with nothing written.
 *
 * The reference does not share the batch's address rule: the test gathers each sequence's rows from the pool by its
 * own arithmetic into a dense cache, and runs the float64 reference on that. */
#include "harness.h"

#include <math.h>

/* On the CUDA backend a case's arrays are mirrored in device memory (dev_case) and each call translates its host
 * pointers into the mirror (batch_call), so that the checks below read host memory either way. */
typedef struct {
    unsigned char *q, *k, *v, *lens, *qls, *table, *sinks, *alibi;
} dev_case;

static void *dev_copy(const void *src, size_t bytes) {
    void *d = src && bytes ? fd_dev_alloc(bytes) : NULL;
    if (d && fd_h2d(d, src, bytes)) fd_dev_free(d), d = NULL;
    return d;
}

static int dev_case_make(dev_case *d, const fd_batch_case *c) {
    const fdec_layer *L = &c->L;
    const size_t H = L->num_q_heads, B = c->b.num_seqs;
    memset(d, 0, sizeof *d);
    d->q = dev_copy(c->q, c->rows * H * L->head_dim * fdec_dtype_size(L->q_dtype));
    d->k = dev_copy(c->k, fdec_dtype_bytes(L->kv_dtype, c->kv_elems));
    d->v = dev_copy(c->v, fdec_dtype_bytes(L->kv_dtype, c->kv_elems));
    d->lens = dev_copy(c->seq_lens, B * sizeof(uint32_t));
    d->qls = dev_copy(c->q_lens, B * sizeof(uint32_t));
    d->table = c->b.page_size ? dev_copy(c->table, B * c->b.max_pages * sizeof(int32_t)) : NULL;
    d->sinks = L->sinks ? dev_copy(L->sinks, H * sizeof(float)) : NULL;
    d->alibi = L->alibi_slopes ? dev_copy(L->alibi_slopes, H * sizeof(float)) : NULL;
    return d->q && d->k && d->v && d->lens && d->qls && (d->table || !c->b.page_size) && (d->sinks || !L->sinks) &&
                   (d->alibi || !L->alibi_slopes)
               ? 0
               : -1;
}

static void dev_case_free(dev_case *d) {
    unsigned char *all[] = {d->q, d->k, d->v, d->lens, d->qls, d->table, d->sinks, d->alibi};
    for (int i = 0; i < 8; i++) fd_dev_free(all[i]);
}

/* p (inside host array hb) as the same place in the device array db */
static const void *xl(const void *p, const void *hb, const unsigned char *db) {
    return p ? db + ((const unsigned char *)p - (const unsigned char *)hb) : NULL;
}

/* fdec_decode_batch of batch b (host arrays of c, or parts of them) into out (ob bytes) and lse (lb bytes, or NULL):
 * directly on the CPU; on CUDA through the mirror d, with out and lse and `pad` bytes either side (the guards) copied
 * in and back. */
static fdec_status batch_call(fdec_context *ctx, const fd_batch_case *c, const dev_case *d, const fdec_batch *b,
                              const void *q, const void *k, const void *v, unsigned char *out, size_t ob,
                              unsigned char *lse, size_t lb, size_t pad) {
    if (!g_cuda) return fdec_decode_batch(ctx, &c->L, b, q, k, v, out, (float *)lse);
    fdec_layer L = c->L;
    L.sinks = (const float *)xl(L.sinks, c->L.sinks, d->sinks);
    L.alibi_slopes = (const float *)xl(L.alibi_slopes, c->L.alibi_slopes, d->alibi);
    fdec_batch db = *b;
    db.seq_lens = (const uint32_t *)xl(b->seq_lens, c->seq_lens, d->lens);
    db.q_lens = (const uint32_t *)xl(b->q_lens, c->q_lens, d->qls);
    db.page_table = (const int32_t *)xl(b->page_table, c->table, d->table);
    unsigned char *dout = dev_copy(out - pad, ob + 2 * pad), *dlse = lse ? dev_copy(lse - pad, lb + 2 * pad) : NULL;
    fdec_status st = !dout || (lse && !dlse)
                         ? FDEC_ENOMEM
                         : fdec_decode_batch(ctx, &L, &db, xl(q, c->q, d->q), xl(k, c->k, d->k), xl(v, c->v, d->v),
                                             dout + pad, dlse ? (float *)(dlse + pad) : NULL);
    if (!st && (fd_dev_sync() || fd_d2h(out - pad, dout, ob + 2 * pad) || (lse && fd_d2h(lse - pad, dlse, lb + 2 * pad))))
        st = FDEC_EBACKEND;
    fd_dev_free(dout), fd_dev_free(dlse);
    return st;
}

/* Runs c on ctx and checks every sequence's rows against its reference and the guards; with `alone`, also each
 * sequence as a batch of its own, which must give the same bytes (batch invariance). */
static double batch_check(fdec_context *ctx, const char *who, fd_batch_case *c, int alone) {
    const fdec_layer *L = &c->L;
    const uint32_t H = L->num_q_heads, D = L->head_dim;
    const size_t ob = c->rows * H * D * fdec_dtype_size(L->out_dtype), lb = c->rows * H * sizeof(float);
    unsigned char *out = malloc(ob + 2 * GUARD), *lse = malloc(lb + 2 * GUARD);
    memset(out, 0xa5, ob + 2 * GUARD), memset(lse, 0xa5, lb + 2 * GUARD);
    dev_case dc;
    memset(&dc, 0, sizeof dc);
    if (g_cuda && dev_case_make(&dc, c)) {
        check(0, "%s: device memory for a batch", who);
        dev_case_free(&dc), free(out), free(lse);
        return INFINITY;
    }
    fdec_status st = batch_call(ctx, c, &dc, &c->b, c->q, c->k, c->v, out + GUARD, ob, lse + GUARD, lb, GUARD);
    double worst = 0;
    char desc[200];
    snprintf(desc, sizeof desc, "B=%u D=%u H=%u G=%u max_len=%u max_q=%u win=%u ring=%u page=%u %s/%s/%s%s%s%s",
             c->b.num_seqs, D, H, L->num_kv_heads, c->b.max_seq_len, c->b.max_q_len, L->window, L->ring_capacity,
             c->b.page_size, fdec_dtype_name(L->q_dtype), fdec_dtype_name(L->kv_dtype), fdec_dtype_name(L->out_dtype),
             L->softcap > 0 ? " softcap" : "", L->sinks ? " sinks" : "", L->alibi_slopes ? " alibi" : "");
    if (st) {
        check(0, "%s: batch %s: %s", who, desc, fdec_last_error());
        dev_case_free(&dc), free(out), free(lse);
        return INFINITY;
    }
    int guards = 1;
    for (size_t i = 0; i < GUARD; i++)
        guards &= out[i] == 0xa5 && out[GUARD + ob + i] == 0xa5 && lse[i] == 0xa5 && lse[GUARD + lb + i] == 0xa5;
    check(guards, "%s: batch %s: wrote outside out or lse", who, desc);
    /* the plan: chunks that cover the longest sequence's range, and on CUDA scratch for every row's chunk states */
    fdec_plan_info pi;
    memset(&pi, 0, sizeof pi);
    const int planned = fdec_plan_batch(ctx, L, &c->b, &pi) == FDEC_OK;
    const uint32_t mq = c->b.max_q_len < c->b.max_seq_len ? c->b.max_q_len : c->b.max_seq_len; /* a row a token */
    const uint64_t states = (uint64_t)c->b.num_seqs * mq * H * pi.num_chunks;
    check(planned && pi.kv_end == c->b.max_seq_len && pi.kv_start < pi.kv_end && pi.num_chunks >= 1 && pi.path &&
              (uint64_t)pi.num_chunks * pi.chunk_len >= pi.kv_end - pi.kv_start && pi.scratch_bytes > 0 &&
              (!g_cuda || pi.scratch_bytes >= states * (2 + D) * sizeof(float)),
          "%s: batch %s: plan %s: %u..%u, %u chunks of %u, %zu bytes of scratch", who, desc,
          planned ? "" : fdec_last_error(), pi.kv_start, pi.kv_end, pi.num_chunks, pi.chunk_len, pi.scratch_bytes);
    size_t row = 0;
    for (uint32_t i = 0; i < c->b.num_seqs; i++) {
        const uint32_t nq = c->q_lens[i];
        double *ref = malloc(sizeof(double) * nq * H * D), *rl = malloc(sizeof(double) * nq * H);
        const double tol = fd_batch_reference(c, i, row, ref, rl);
        double e = 0, le = 0;
        for (size_t x = 0; x < (size_t)nq * H * D; x++) {
            const double y = fdec_load_elem(out + GUARD, row * H * D + x, L->out_dtype), d = fabs(y - ref[x]);
            if (!(d <= e)) e = isnan(d) ? INFINITY : d;
        }
        for (size_t x = 0; x < (size_t)nq * H; x++) {
            const double y = ((float *)(lse + GUARD))[row * H + x], d = fabs(y - rl[x]) / (1 + fabs(rl[x]));
            if (!(d <= le)) le = isnan(d) ? INFINITY : d;
        }
        check(e <= tol && le <= 2e-5, "%s: batch %s: sequence %u (len %u, %u tokens): out err %.3g (tol %.3g), lse err "
                                      "%.3g", who, desc, i, c->seq_lens[i], nq, e, tol, le);
        if (e / tol > worst) worst = e / tol;
        if (alone) { /* the sequence as a batch of its own: the same bytes */
            fdec_batch one = c->b;
            one.num_seqs = 1, one.seq_lens = c->seq_lens + i, one.q_lens = c->b.q_lens ? c->q_lens + i : NULL;
            const void *k = c->k, *v = c->v;
            if (c->b.page_size) one.page_table = c->table + (size_t)i * c->b.max_pages;
            else {
                const size_t off = fdec_dtype_bytes(L->kv_dtype, (size_t)i * c->b.kv_seq_stride);
                k = (const char *)c->k + off, v = (const char *)c->v + off, one.kv_seq_stride = 0;
            }
            const size_t qrow = (size_t)H * D * fdec_dtype_size(L->q_dtype), orow = (size_t)H * D * fdec_dtype_size(L->out_dtype);
            unsigned char *o1 = malloc(nq * orow);
            st = batch_call(ctx, c, &dc, &one, (const char *)c->q + row * qrow, k, v, o1, nq * orow, NULL, 0, 0);
            check(st == FDEC_OK && !memcmp(o1, out + GUARD + row * orow, nq * orow),
                  "%s: batch %s: sequence %u alone differs from the batch (%s)", who, desc, i,
                  st ? fdec_last_error() : "other bytes");
            free(o1);
        }
        free(ref), free(rl);
        row += nq;
    }
    dev_case_free(&dc), free(out), free(lse);
    return worst;
}

void test_batch(path_ctx *pc, int npc, int configs, uint64_t seed) {
    fd_rng r = {seed ^ 0xba7c4};
    double worst = 0;
    int n = 0;
    static const uint32_t pages[] = {0, 0, 1, 3, 16, 32, 64, 128};
    for (int i = 0; i < configs; i++) {
        fd_batch_case c;
        const uint32_t B = 1 + (uint32_t)(fd_rand(&r) % 6), P = pages[fd_rand(&r) % 8];
        fd_batch_make(&c, &r, B, P, (int)(fd_rand(&r) % 2), (int)(fd_rand(&r) % 3 == 0), (int)(fd_rand(&r) % 4 != 0), 1);
        const int ctx = (int)(fd_rand(&r) % (uint64_t)npc);
        const double e = batch_check(pc[ctx].ctx, pc[ctx].name, &c, i % 4 == 0);
        if (e > worst) worst = e;
        fd_batch_free(&c);
        n++;
    }
    /* Pages of one row with one KV head: the position and head strides never move an address, so any value is valid,
     * SIZE_MAX / 4 too. The CPU kernel once took a block's span as rows x position stride and looped over it 4 KiB at
     * a time (for ever); the case must give the reference's result. */
    for (int i = 0, made = 0; made < 4 && i < 1000; i++) {
        fd_batch_case c;
        fd_batch_make(&c, &r, 1 + (uint32_t)(fd_rand(&r) % 3), 1, 0, 0, (int)(fd_rand(&r) % 2), 0);
        if (c.L.num_kv_heads == 1 && c.b.max_seq_len > 100) {
            if (!c.b.kv_page_stride) c.b.kv_page_stride = c.L.kv_pos_stride;
            const size_t huge = SIZE_MAX / 4 / 64 * 64; /* whole blocks of a block type */
            c.L.kv_pos_stride = c.L.kv_head_stride = huge;
            const int ctx = (int)(fd_rand(&r) % (uint64_t)npc);
            const double e = batch_check(pc[ctx].ctx, pc[ctx].name, &c, 0);
            if (e > worst) worst = e;
            made++, n++;
        }
        fd_batch_free(&c);
    }
    printf("batches: %d random batches (paged and contiguous, 1..16 tokens, variants), worst error %.2f of tolerance\n",
           n, worst);
}

/* Bad input: each refused with a message, nothing written. */
void test_batch_bad(void) {
    if (g_cuda) return;
    fdec_context *ctx;
    if (fdec_context_create(FDEC_BACKEND_CPU, NULL, &ctx)) {
        check(0, "create: %s", fdec_last_error());
        return;
    }
    const fdec_layer good = layer_of(16, 4, 2, 0, 0, FDEC_F16, 0);
    uint32_t lens[3] = {40, 7, 1}, ql[3] = {2, 3, 1};
    int32_t table[3 * 4] = {0, 1, 2, -1, 3, -1, -1, -1, 4, -1, -1, -1};
    const fdec_batch paged = {3, lens, ql, 40, 4, 0, 16, table, 4, 5, 0};
    static uint16_t kv[5 * 16 * 2 * 16]; /* 5 pages of 16 slots, 2 heads of 16 */
    static float q[6 * 4 * 16];
    static unsigned char out[6 * 4 * 16 * 4];
    static uint32_t lens_bad[3], ql_bad[3];
    static int32_t table_bad[12];
    typedef struct {
        const char *what, *want;
        fdec_layer L;
        fdec_batch b;
    } bad;
    bad cases[32];
    int n = 0;
#define BADB(WHAT, EXPR, WANT)                                                                                  \
    do {                                                                                                        \
        bad *c = &cases[n++];                                                                                   \
        c->what = WHAT, c->want = WANT, c->L = good, c->b = paged;                                              \
        memcpy(lens_bad, lens, sizeof lens), memcpy(ql_bad, ql, sizeof ql), memcpy(table_bad, table, sizeof table); \
        { fdec_layer *L = &c->L; fdec_batch *b = &c->b; (void)L, (void)b; EXPR; }                               \
    } while (0)
    /* each case's arrays are set up when it runs (the shared _bad arrays), see below */
    BADB("num_seqs 0", b->num_seqs = 0, "num_seqs (0)");
    BADB("NULL seq_lens", b->seq_lens = NULL, "seq_lens must not be NULL");
    BADB("max_seq_len 0", b->max_seq_len = 0, "max_seq_len (0)");
    BADB("max_q_len 17", b->max_q_len = 17, "max_q_len (17) must be in 1..16");
    BADB("seq_len 0", (b->seq_lens = lens_bad, lens_bad[1] = 0), "seq_lens[1] (0) must be in 1..max_seq_len");
    BADB("seq_len past max", (b->seq_lens = lens_bad, lens_bad[0] = 41), "seq_lens[0] (41)");
    BADB("q_len > seq_len", (b->q_lens = ql_bad, b->seq_lens = lens_bad, lens_bad[2] = 1, ql_bad[2] = 2),
         "q_lens[2] (2) must be at most seq_lens[2] (1)");
    BADB("q_len past max_q_len", (b->q_lens = ql_bad, ql_bad[0] = 5), "q_lens[0] (5) must be in 1..max_q_len (4)");
    BADB("q_len 0", (b->q_lens = ql_bad, ql_bad[1] = 0), "q_lens[1] (0)");
    BADB("page id past the pool", (b->page_table = table_bad, table_bad[1] = 5), "page_table[0][1] (5)");
    BADB("page id -1 where attended", (b->page_table = table_bad, table_bad[2] = -1), "page_table[0][2] (-1)");
    BADB("table too narrow", b->max_pages = 2, "max_pages (2) is too narrow");
    BADB("NULL page_table", b->page_table = NULL, "page_table must not be NULL");
    BADB("num_pages 0", b->num_pages = 0, "num_pages (0)");
    BADB("ring with pages", (L->window = 8, L->ring_capacity = 16), "must be 0 with a paged cache");
    BADB("overlapping pages", b->kv_page_stride = 100, "kv_page_stride (100) must be at least a page's extent");
    BADB("contiguous caches overlap", (b->page_size = 0, b->kv_seq_stride = 10), "kv_seq_stride (10) must be at least");
    BADB("bad layer in a batch", L->num_kv_heads = 3, "num_q_heads (4) must be a multiple of num_kv_heads (3)");
#undef BADB
    for (int i = 0; i < n; i++) {
        bad *c = &cases[i];
        /* the shared _bad arrays hold this case's values again (the macro set them for the last case only) */
        memcpy(lens_bad, lens, sizeof lens), memcpy(ql_bad, ql, sizeof ql), memcpy(table_bad, table, sizeof table);
        if (!strcmp(c->what, "seq_len 0")) lens_bad[1] = 0;
        if (!strcmp(c->what, "seq_len past max")) lens_bad[0] = 41;
        if (!strcmp(c->what, "q_len > seq_len")) lens_bad[2] = 1, ql_bad[2] = 2;
        if (!strcmp(c->what, "q_len past max_q_len")) ql_bad[0] = 5;
        if (!strcmp(c->what, "q_len 0")) ql_bad[1] = 0;
        if (!strcmp(c->what, "page id past the pool")) table_bad[1] = 5;
        if (!strcmp(c->what, "page id -1 where attended")) table_bad[2] = -1;
        memset(out, 0x5a, sizeof out);
        const fdec_status st = fdec_decode_batch(ctx, &c->L, &c->b, q, kv, kv, out, NULL);
        int untouched = 1;
        for (size_t j = 0; j < sizeof out; j++) untouched &= out[j] == 0x5a;
        check(st == FDEC_EINVAL && untouched && strstr(fdec_last_error(), c->want),
              "batch bad input '%s': status %d, message '%s' (want '%s'), out %s", c->what, (int)st, fdec_last_error(),
              c->want, untouched ? "untouched" : "WRITTEN");
        /* a plan and a reserve read the bounds alone: they refuse bad bounds and missing arrays, and take any values */
        const int in_arrays = (c->b.seq_lens && c->b.seq_lens != paged.seq_lens) || c->b.q_lens != paged.q_lens ||
                              (c->b.page_table && c->b.page_table != paged.page_table);
        fdec_plan_info info;
        const fdec_status want = in_arrays ? FDEC_OK : FDEC_EINVAL;
        check(fdec_plan_batch(ctx, &c->L, &c->b, &info) == want, "plan_batch %s '%s'",
              in_arrays ? "refused" : "accepted", c->what);
        check(fdec_context_reserve_batch(ctx, &c->L, &c->b) == want, "reserve_batch %s '%s'",
              in_arrays ? "refused" : "accepted", c->what);
    }
    /* the good batch runs, and a -1 entry outside the window is never read */
    memset(out, 0x5a, sizeof out);
    check(fdec_decode_batch(ctx, &good, &paged, q, kv, kv, out, NULL) == FDEC_OK, "the good batch: %s",
          fdec_last_error());
    printf("batch bad input: %d cases refused\n", n);

    /* fdec_kv_write: a bad slot refuses the whole call, nothing written */
    int64_t slots[3] = {0, 79, 80};
    fdec_kv_slots ks = {3, slots, 80, 16, 0, FDEC_F32};
    static float src[3 * 2 * 16];
    memset(kv, 0x11, sizeof kv);
    fdec_status st = fdec_kv_write(ctx, &good, &ks, src, src, kv, kv);
    int untouched = 1;
    for (size_t j = 0; j < sizeof kv / 2; j++) untouched &= kv[j] == 0x1111;
    check(st == FDEC_EINVAL && untouched && strstr(fdec_last_error(), "slots[2] (80)"),
          "kv_write with slot 80 of 80: status %d, '%s', cache %s", (int)st, fdec_last_error(),
          untouched ? "untouched" : "WRITTEN");
    slots[2] = -2;
    check(fdec_kv_write(ctx, &good, &ks, src, src, kv, kv) == FDEC_EINVAL, "kv_write accepted slot -2");
    fdec_context_destroy(ctx);
}

/* 1 where sequence i's rows of out (from row `row`) are within the tolerance of its reference */
static int seq_rows_ok(const fd_batch_case *c, uint32_t i, size_t row, const unsigned char *out) {
    const size_t H = c->L.num_q_heads, D = c->L.head_dim, n = (size_t)c->q_lens[i] * H * D;
    double *ref = malloc(sizeof(double) * n);
    const double tol = fd_batch_reference(c, i, row, ref, NULL);
    int ok = 1;
    for (size_t x = 0; x < n; x++) ok &= fabs(fdec_load_elem(out, row * H * D + x, c->L.out_dtype) - ref[x]) <= tol;
    free(ref);
    return ok;
}

/* CUDA: lengths, token counts and page ids are read on the device. A bad one makes its sequence's rows NaN, the
 * other sequences come out right, and nothing outside the arrays is read (compute-sanitizer's memcheck runs this). */
void test_batch_device_checks(path_ctx *pc) {
    if (!g_cuda) return;
    fd_rng r = {4242};
    static const char *what[] = {"seq_len past max_seq_len", "seq_len 0", "q_len past seq_len", "page id past the pool",
                                 "page id -1"};
    int n = 0;
    for (int kind = 0; kind < 5; kind++)
        for (int tries = 0; tries < 50; tries++) {
            fd_batch_case c;
            fd_batch_make(&c, &r, 3, kind >= 3 ? 1 + (uint32_t)(fd_rand(&r) % 16) : 0, 0, 0, 1, 0);
            uint32_t *len = &c.seq_lens[1];
            const int usable = kind == 2 ? c.q_lens[1] >= 2 : kind >= 3 ? *len > 1 : 1;
            if (!usable) {
                fd_batch_free(&c);
                continue;
            }
            if (kind == 0) *len = c.b.max_seq_len + 7;
            else if (kind == 1) *len = 0;
            else if (kind == 2) *len = c.q_lens[1] - 1;
            else c.table[c.b.max_pages + (*len - 1) / c.b.page_size] = kind == 3 ? (int32_t)c.b.num_pages + 100 : -1;
            const fdec_layer *L = &c.L;
            const uint32_t H = L->num_q_heads, D = L->head_dim;
            const size_t ob = c.rows * H * D * fdec_dtype_size(L->out_dtype), lb = c.rows * H * sizeof(float);
            unsigned char *out = malloc(ob), *lse = malloc(lb);
            memset(out, 0, ob), memset(lse, 0, lb);
            dev_case d;
            fdec_status st = dev_case_make(&d, &c) ? FDEC_ENOMEM
                                                   : batch_call(pc[0].ctx, &c, &d, &c.b, c.q, c.k, c.v, out, ob, lse, lb, 0);
            int ok = st == FDEC_OK;
            size_t row = 0;
            for (uint32_t i = 0; ok && i < 3; i++) {
                const uint32_t nq = c.q_lens[i];
                if (i == 1) { /* every element NaN */
                    for (size_t x = 0; x < (size_t)nq * H * D; x++) ok &= isnan(fdec_load_elem(out, row * H * D + x, L->out_dtype));
                    for (size_t x = 0; x < (size_t)nq * H; x++) ok &= isnan(((float *)lse)[row * H + x]);
                } else
                    ok &= seq_rows_ok(&c, i, row, out);
                row += nq;
            }
            check(ok, "CUDA batch with %s: %s", what[kind], st ? fdec_last_error() : "rows not as they should be");
            dev_case_free(&d), free(out), free(lse), fd_batch_free(&c);
            n++;
            break;
        }
    printf("batches with bad values on the device: %d kinds, NaN rows for the bad sequence\n", n);
}

/* CUDA: one captured graph serves every step while the lengths change between replays (they are read on the device):
 * a paged batch captured once, replayed, its lengths cut and replayed again, each against the reference. */
typedef struct {
    fdec_context *ctx;
    const fdec_layer *L;
    const fdec_batch *b;
    const void *q, *k, *v;
    void *out;
    fdec_status st;
} graph_call;

static void graph_call_fn(void *x, int i) {
    (void)i;
    graph_call *g = x;
    const fdec_status st = fdec_decode_batch(g->ctx, g->L, g->b, g->q, g->k, g->v, g->out, NULL);
    if (st) g->st = st;
}

void test_batch_graph(void) {
    if (!g_cuda) return;
    fd_rng r = {9090};
    fd_batch_case c;
    do /* no window: positions below an old window's start hold -1 pages */
        fd_batch_make(&c, &r, 4, 16, 0, 0, 1, 1);
    while (c.L.window && (fd_batch_free(&c), 1));
    const fdec_layer *L = &c.L;
    const size_t H = L->num_q_heads, D = L->head_dim, ob = c.rows * H * D * fdec_dtype_size(L->out_dtype);
    dev_case d;
    memset(&d, 0, sizeof d);
    void *stream = fd_dev_stream_create(), *dout = fd_dev_alloc(ob);
    unsigned char *out = malloc(ob);
    fdec_options o = fdec_default_options();
    o.cuda_stream = stream;
    fdec_context *ctx = NULL;
    int ok = stream && dout && !dev_case_make(&d, &c) && !fdec_context_create(FDEC_BACKEND_CUDA, &o, &ctx);
    fdec_layer dl = *L;
    dl.sinks = (const float *)xl(L->sinks, L->sinks, d.sinks);
    dl.alibi_slopes = (const float *)xl(L->alibi_slopes, L->alibi_slopes, d.alibi);
    fdec_batch db = c.b;
    db.seq_lens = (const uint32_t *)d.lens, db.q_lens = (const uint32_t *)d.qls, db.page_table = (const int32_t *)d.table;
    graph_call gc = {ctx, &dl, &db, d.q, d.k, d.v, dout, FDEC_OK};
    void *graph = ok && !fdec_context_reserve_batch(ctx, &dl, &db) ? fd_dev_graph_capture(stream, graph_call_fn, &gc, 1)
                                                                   : NULL;
    ok = ok && graph && !gc.st;
    for (int step = 0; ok && step < 2; step++) {
        if (step) { /* every sequence cut to about half its length (at least its new tokens), on the device only */
            for (uint32_t i = 0; i < c.b.num_seqs; i++) {
                const uint32_t half = c.seq_lens[i] / 2;
                c.seq_lens[i] = half > c.q_lens[i] ? half : c.q_lens[i];
            }
            ok = !fd_h2d(d.lens, c.seq_lens, c.b.num_seqs * sizeof(uint32_t));
        }
        ok = ok && !fd_dev_graph_replay(graph, stream) && !fd_dev_stream_sync(stream) && !fd_d2h(out, dout, ob);
        size_t row = 0;
        for (uint32_t i = 0; ok && i < c.b.num_seqs; i++) {
            ok &= seq_rows_ok(&c, i, row, out);
            row += c.q_lens[i];
        }
        check(ok, "CUDA batch graph, replay %d: %s", step, gc.st ? fdec_last_error() : "rows not as they should be");
    }
    if (graph) fd_dev_graph_destroy(graph);
    fdec_context_destroy(ctx);
    dev_case_free(&d), fd_dev_free(dout), free(out), fd_batch_free(&c);
    fd_dev_stream_destroy(stream);
    printf("batches in a CUDA graph: captured once, replayed with new lengths\n");
}

/* fdec_kv_write: rows land where the slot says, converted, in paged and contiguous caches of both page layouts. On
 * CUDA the slots are read on the device: one outside the cache writes nothing. */
void test_kv_write(path_ctx *pc, int npc) {
    (void)npc;
    fd_rng r = {77};
    int n = 0, bad = 0;
    for (int it = 0; it < 60; it++) {
        const uint32_t D = 1 + (uint32_t)(fd_rand(&r) % 70), G = 1 + (uint32_t)(fd_rand(&r) % 3);
        const uint32_t P = (uint32_t)(fd_rand(&r) % 3) ? 1 + (uint32_t)(fd_rand(&r) % 20) : 0;
        fdec_layer L = layer_of(D, G, G, 0, 0, (fdec_dtype)(fd_rand(&r) % 3), 0);
        const int head_major = (int)(fd_rand(&r) % 2);
        const uint64_t nslots = 1 + fd_rand(&r) % 200;
        fdec_kv_slots s;
        memset(&s, 0, sizeof s);
        s.num_slots = nslots, s.page_size = P, s.src_dtype = (fdec_dtype)(fd_rand(&r) % 3);
        const uint64_t rows = P ? P : nslots, pages = P ? (nslots + P - 1) / P : 1;
        if (head_major) L.kv_pos_stride = D, L.kv_head_stride = rows * D + 3;
        else L.kv_head_stride = D + 1, L.kv_pos_stride = G * (D + 1);
        const size_t one = (rows - 1) * L.kv_pos_stride + (G - 1) * (L.kv_head_stride ? L.kv_head_stride : D) + D;
        if (P) s.kv_page_stride = one + (size_t)(fd_rand(&r) % 4);
        const size_t total = P ? (pages - 1) * s.kv_page_stride + one : one, es = fdec_dtype_size(L.kv_dtype);
        s.num_tokens = 1 + (uint32_t)(fd_rand(&r) % 12);
        int64_t *slot = malloc(s.num_tokens * sizeof *slot);
        for (uint32_t i = 0; i < s.num_tokens; i++) /* distinct slots (a later write would overwrite), some -1 */
            slot[i] = fd_rand(&r) % 5 == 0 ? -1 : (int64_t)((fd_rand(&r) % (nslots / s.num_tokens + 1)) * s.num_tokens + i) % (int64_t)nslots;
        for (uint32_t i = 0; i < s.num_tokens; i++)
            for (uint32_t j = 0; j < i; j++)
                if (slot[i] == slot[j]) slot[i] = -1;
        s.slots = slot;
        const size_t sn = (size_t)s.num_tokens * G * D, ses = fdec_dtype_size(s.src_dtype);
        void *ks = malloc(sn * ses), *vs = malloc(sn * ses), *k = malloc(total * es), *v = malloc(total * es);
        for (size_t i = 0; i < sn; i++) {
            fdec_store_elem(ks, i, s.src_dtype, (float)(4 * fd_uniform(&r) - 2));
            fdec_store_elem(vs, i, s.src_dtype, (float)(4 * fd_uniform(&r) - 2));
        }
        memset(k, 0x3c, total * es), memset(v, 0x3c, total * es);
        fdec_status st;
        if (g_cuda) { /* the same through device copies, and one more token whose slot is past the cache */
            int64_t *slot2 = malloc((s.num_tokens + 1) * sizeof *slot2);
            memcpy(slot2, slot, s.num_tokens * sizeof *slot2);
            slot2[s.num_tokens] = (int64_t)nslots + (int64_t)(fd_rand(&r) % 1000);
            unsigned char *dk = dev_copy(k, total * es), *dv = dev_copy(v, total * es),
                          *dsl = dev_copy(slot2, (s.num_tokens + 1) * sizeof *slot2);
            unsigned char *dks2 = fd_dev_alloc((sn + (size_t)G * D) * ses), *dvs2 = fd_dev_alloc((sn + (size_t)G * D) * ses);
            fdec_kv_slots s2 = s;
            s2.slots = (const int64_t *)dsl, s2.num_tokens = s.num_tokens + 1;
            st = !dk || !dv || !dsl || !dks2 || !dvs2 || fd_dev_memset(dks2, 0x40, (sn + (size_t)G * D) * ses) ||
                         fd_dev_memset(dvs2, 0x40, (sn + (size_t)G * D) * ses) || fd_h2d(dks2, ks, sn * ses) ||
                         fd_h2d(dvs2, vs, sn * ses)
                     ? FDEC_ENOMEM
                     : fdec_kv_write(pc[0].ctx, &L, &s2, dks2, dvs2, dk, dv);
            if (!st && (fd_dev_sync() || fd_d2h(k, dk, total * es) || fd_d2h(v, dv, total * es))) st = FDEC_EBACKEND;
            unsigned char *all[] = {dk, dv, dsl, dks2, dvs2};
            for (int i = 0; i < 5; i++) fd_dev_free(all[i]);
            free(slot2);
        } else
            st = fdec_kv_write(pc[0].ctx, &L, &s, ks, vs, k, v);
        int ok = st == FDEC_OK;
        for (uint32_t i = 0; ok && i < s.num_tokens; i++) {
            if (slot[i] < 0) continue;
            const uint64_t sl = (uint64_t)slot[i];
            const size_t at = P ? (size_t)(sl / P) * s.kv_page_stride + (size_t)(sl % P) * L.kv_pos_stride
                                : (size_t)sl * L.kv_pos_stride;
            for (uint32_t g = 0; g < G; g++)
                for (uint32_t d = 0; d < D; d++) {
                    const size_t from = ((size_t)i * G + g) * D + d, to = at + (size_t)g * L.kv_head_stride + d;
                    /* the value converted as the type table does, bit for bit */
                    unsigned char want[4], got[4];
                    fdec_store_elem(want, 0, L.kv_dtype, fdec_load_elem(ks, from, s.src_dtype));
                    memcpy(got, (char *)k + to * es, es);
                    ok &= !memcmp(want, got, es);
                    fdec_store_elem(want, 0, L.kv_dtype, fdec_load_elem(vs, from, s.src_dtype));
                    memcpy(got, (char *)v + to * es, es);
                    ok &= !memcmp(want, got, es);
                }
        }
        /* nothing else written: count the bytes still 0x3c against what the written rows cover */
        size_t changed = 0;
        for (size_t i = 0; i < total * es; i++) changed += ((unsigned char *)k)[i] != 0x3c;
        size_t written = 0;
        for (uint32_t i = 0; i < s.num_tokens; i++) written += slot[i] >= 0 ? (size_t)G * D * es : 0;
        ok &= changed <= written;
        if (!ok) bad++;
        check(ok, "kv_write D=%u G=%u page=%u head_major=%d slots=%llu %s->%s: %s", D, G, P, head_major,
              (unsigned long long)nslots, fdec_dtype_name(s.src_dtype), fdec_dtype_name(L.kv_dtype),
              st ? fdec_last_error() : "wrong bytes");
        free(slot), free(ks), free(vs), free(k), free(v);
        n++;
    }
    printf("kv_write: %d random writes (paged and contiguous, both layouts, every type pair), %d wrong\n", n, bad);
}

/* harness.c — the shared machinery of the test suite (harness.h). */
#include "harness.h"

#include <math.h>
#include <stdarg.h>

int n_pass, n_fail;
int g_cuda;

void check(int ok, const char *fmt, ...) {
    if (ok) {
        n_pass++;
        return;
    }
    n_fail++;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* ---- a decode with poisoned, guarded output ---- */


void outbuf_init(outbuf *b, const fdec_problem *p) {
    b->out_bytes = (size_t)p->H * p->D * fdec_dtype_size(p->ot);
    b->lse_bytes = (size_t)p->H * sizeof(float);
    b->out_raw = malloc(b->out_bytes + 2 * GUARD);
    b->lse_raw = malloc(b->lse_bytes + 2 * GUARD);
    b->out = b->out_raw + GUARD;
    b->lse = (float *)(b->lse_raw + GUARD);
}
void outbuf_poison(outbuf *b) {
    memset(b->out_raw, 0xA5, b->out_bytes + 2 * GUARD);
    memset(b->lse_raw, 0xA5, b->lse_bytes + 2 * GUARD);
    memset(b->out, 0xff, b->out_bytes); /* NaN in every dtype */
    memset(b->lse, 0xff, b->lse_bytes);
}
int guards_ok(const outbuf *b) {
    for (int i = 0; i < GUARD; i++)
        if (b->out_raw[i] != 0xA5 || b->out_raw[GUARD + b->out_bytes + i] != 0xA5 || b->lse_raw[i] != 0xA5 ||
            b->lse_raw[GUARD + b->lse_bytes + i] != 0xA5)
            return 0;
    return 1;
}
void outbuf_free(outbuf *b) {
    free(b->out_raw);
    free(b->lse_raw);
}

char *describe(const fd_problem *pr, char *buf, size_t n) {
    const fdec_layer *L = &pr->layer;
    char var[64];
    snprintf(buf, n, "D=%u H=%u G=%u L=%u win=%u ring=%u q/kv/out=%s/%s/%s %s scale=%g %s", L->head_dim,
             L->num_q_heads, L->num_kv_heads, pr->seq_len, L->window, L->ring_capacity, fdec_dtype_name(L->q_dtype),
             fdec_dtype_name(L->kv_dtype), fdec_dtype_name(L->out_dtype), fd_layout_name(pr->layout),
             (double)L->scale, fd_variants_name(L, var, sizeof var));
    return buf;
}


/* *a (n floats, or NULL) replaced by a device copy, which *keep holds for inputs_free; -1 where that fails */
static int dev_array(const float **a, void **keep, size_t n) {
    if (!*a) return 0;
    if (!(*keep = fd_dev_alloc(n * sizeof(float))) || fd_h2d(*keep, *a, n * sizeof(float))) return -1;
    *a = *keep;
    return 0;
}

int inputs_make(inputs *in, const fd_problem *pr) {
    memset(in, 0, sizeof *in);
    in->sinks = pr->layer.sinks, in->alibi = pr->layer.alibi_slopes;
    in->kscales = pr->layer.k_scales, in->vscales = pr->layer.v_scales;
    if (!g_cuda) {
        in->q = pr->q, in->k = pr->k, in->v = pr->v;
        return 0;
    }
    size_t qb = (size_t)pr->p.H * pr->p.D * fdec_dtype_size(pr->p.qt), kb = fdec_dtype_bytes(pr->p.kvt, pr->kv_elems);
    in->dq = fd_dev_alloc(qb), in->dk = fd_dev_alloc(kb), in->dv = fd_dev_alloc(kb);
    if (!in->dq || !in->dk || !in->dv || fd_h2d(in->dq, pr->q, qb) || fd_h2d(in->dk, pr->k, kb) ||
        fd_h2d(in->dv, pr->v, kb))
        return -1;
    in->q = in->dq, in->k = in->dk, in->v = in->dv;
    return dev_array(&in->sinks, &in->dsinks, pr->p.H) || dev_array(&in->alibi, &in->dalibi, pr->p.H) ||
                   dev_array(&in->kscales, &in->dks, pr->p.G) || dev_array(&in->vscales, &in->dvs, pr->p.G)
               ? -1
               : 0;
}

void inputs_free(inputs *in) {
    fd_dev_free(in->dq);
    fd_dev_free(in->dk);
    fd_dev_free(in->dv);
    fd_dev_free(in->dsinks);
    fd_dev_free(in->dalibi);
    fd_dev_free(in->dks);
    fd_dev_free(in->dvs);
}

/* Poisons b, runs the decode (on the device under --cuda, with the guards and poison copied there and the
 * whole guarded region copied back) and leaves the result in b. */
fdec_status decode_into(fdec_context *ctx, const fd_problem *pr, const inputs *in, outbuf *b, int with_lse) {
    outbuf_poison(b);
    fdec_layer L = pr->layer; /* the variant arrays where the backend reads them */
    L.sinks = in->sinks, L.alibi_slopes = in->alibi, L.k_scales = in->kscales, L.v_scales = in->vscales;
    if (!g_cuda) return fdec_decode(ctx, &L, pr->seq_len, in->q, in->k, in->v, b->out, with_lse ? b->lse : NULL);
    size_t ob = b->out_bytes + 2 * GUARD, lb = b->lse_bytes + 2 * GUARD;
    unsigned char *dout = fd_dev_alloc(ob), *dlse = fd_dev_alloc(lb);
    fdec_status st = FDEC_EBACKEND;
    if (dout && dlse && !fd_h2d(dout, b->out_raw, ob) && !fd_h2d(dlse, b->lse_raw, lb)) {
        st = fdec_decode(ctx, &L, pr->seq_len, in->q, in->k, in->v, dout + GUARD,
                         with_lse ? (float *)(dlse + GUARD) : NULL);
        if (fd_dev_sync() || fd_d2h(b->out_raw, dout, ob) || fd_d2h(b->lse_raw, dlse, lb)) st = FDEC_EBACKEND;
    }
    fd_dev_free(dout);
    fd_dev_free(dlse);
    return st;
}

/* Runs ctx on pr and checks against the reference (ref/ref_lse). Returns the error; with `bytes` (not NULL) also the
 * output's bytes there. */
double run_check_bytes(fdec_context *ctx, const char *who, const fd_problem *pr, const inputs *in,
                              const double *ref, const double *ref_lse, int with_lse, void *bytes) {
    outbuf b;
    outbuf_init(&b, &pr->p);
    char desc[256];
    fdec_status st = decode_into(ctx, pr, in, &b, with_lse);
    double err = INFINITY, tol = fd_tolerance(pr);
    if (st != FDEC_OK) {
        check(0, "%s: %s: status %s: %s", who, describe(pr, desc, sizeof desc), fdec_status_string(st),
              fdec_last_error());
    } else {
        err = fd_out_error(pr, b.out, ref);
        double lerr = with_lse ? fd_lse_error(pr, b.lse, ref_lse) : 0;
        int lse_untouched = with_lse || ((unsigned char *)b.lse)[0] == 0xff;
        check(err <= tol && lerr <= fd_lse_tolerance(pr) && guards_ok(&b) && lse_untouched,
              "%s: %s: out err %.3g (tol %.3g), lse err %.3g, guards %s", who, describe(pr, desc, sizeof desc),
              err, tol, lerr, guards_ok(&b) ? "ok" : "WRITTEN");
    }
    if (bytes) memcpy(bytes, b.out, b.out_bytes);
    outbuf_free(&b);
    return err;
}
double run_and_check(fdec_context *ctx, const char *who, fd_problem *pr, const inputs *in, const double *ref,
                            const double *ref_lse, int with_lse) {
    return run_check_bytes(ctx, who, pr, in, ref, ref_lse, with_lse, NULL);
}

/* ---- contexts for every path this CPU has ---- */


void *g_stream;

int make_path_contexts(path_ctx *pc) {
    int n = 0;
    /* the default stream, a stream of our own, the SIMT kernel alone, and chunks of 32 positions: more chunks than
     * steps, so that with strided chunks (mma.cuh) some blocks get none, and head_dim 512's strided instance at every
     * chunk length (cuda.cu) */
    if (g_cuda) {
        static const char *const names[] = {"default-stream", "stream", "simt", "chunk32"};
        for (int i = 0; i < 4; i++) {
            fdec_options o = fdec_default_options();
            o.cuda_stream = i ? g_stream : NULL;
            fdec_test_options t = {0, 0, 0};
            if (i == 2) t.cuda_simt_only = 1;
            if (i == 3) t.cuda_min_chunk = 32, t.cuda_d512_strided_min = 32;
            fdec_status st = fdec_context_create_test(FDEC_BACKEND_CUDA, &o, &t, &pc[n].ctx);
            if (st != FDEC_OK) {
                check(0, "create CUDA context: %s", fdec_last_error());
                continue;
            }
            snprintf(pc[n].name, sizeof pc[n].name, "cuda/%s", names[i]);
            n++;
        }
        return n;
    }
    unsigned f = fdec_cpu_features();
    for (int path = FDEC_CPU_SCALAR; path <= FDEC_CPU_PATH_LAST; path++) {
        if (!((f >> path) & 1)) {
            printf("skip: the %s path (this CPU lacks it)\n", fdec_cpu_path_name((fdec_cpu_path)path));
            continue;
        }
        fdec_options o = fdec_default_options();
        o.cpu_path = (fdec_cpu_path)path;
        o.threads = 2;
        if (fdec_context_create(FDEC_BACKEND_CPU, &o, &pc[n].ctx) != FDEC_OK) {
            check(0, "create %s context: %s", fdec_cpu_path_name((fdec_cpu_path)path), fdec_last_error());
            continue;
        }
        snprintf(pc[n].name, sizeof pc[n].name, "%s/2t", fdec_cpu_path_name((fdec_cpu_path)path));
        n++;
    }
    fdec_options o = fdec_default_options();
    o.threads = 1;
    if (fdec_context_create(FDEC_BACKEND_CPU, &o, &pc[n].ctx) == FDEC_OK) {
        snprintf(pc[n].name, sizeof pc[n].name, "auto/1t");
        n++;
    }
    return n;
}

/* ---- 2. the seed shapes and 3. numerics ---- */

/* pr on every context against the float64 reference, with lse; prints the worst error */
void check_problem(path_ctx *pc, int npc, const char *name, fd_problem *pr) {
    double *ref = malloc(sizeof(double) * pr->p.H * pr->p.D), *ref_lse = malloc(sizeof(double) * pr->p.H);
    fd_reference(pr, ref, ref_lse);
    double worst = 0;
    inputs in;
    if (inputs_make(&in, pr)) check(0, "%s: inputs could not be copied to the device", name);
    else
        for (int c = 0; c < npc; c++) {
            double e = run_and_check(pc[c].ctx, pc[c].name, pr, &in, ref, ref_lse, 1);
            if (e > worst) worst = e;
        }
    inputs_free(&in);
    printf("%-40s worst error %.3g (tol %.3g)\n", name, worst, fd_tolerance(pr));
    free(ref);
    free(ref_lse);
}

void one_case(path_ctx *pc, int npc, const char *name, fdec_layer L, uint32_t seq_len, float amp,
                     uint64_t seed) {
    one_case_variants(pc, npc, name, L, seq_len, amp, seed, NULL);
}

void one_case_variants(path_ctx *pc, int npc, const char *name, fdec_layer L, uint32_t seq_len, float amp,
                       uint64_t seed, const fd_variants *v) {
    fd_rng r = {seed};
    fd_problem pr;
    if (fd_problem_make(&pr, &L, seq_len, FD_DENSE, amp, &r) || (v && fd_problem_set_variants(&pr, v, &r))) {
        check(0, "%s: could not build: %s", name, fdec_last_error());
        fd_problem_free(&pr);
        return;
    }
    check_problem(pc, npc, name, &pr);
    fd_problem_free(&pr);
}

fdec_layer layer_of(uint32_t D, uint32_t H, uint32_t G, uint32_t window, uint32_t ring, fdec_dtype kv,
                           float scale) {
    fdec_layer L;
    memset(&L, 0, sizeof L);
    L.head_dim = D;
    L.num_q_heads = H;
    L.num_kv_heads = G;
    L.window = window;
    L.ring_capacity = ring;
    L.kv_dtype = kv;
    L.scale = scale;
    return L;
}


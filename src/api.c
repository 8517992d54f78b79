/* api.c — the public entry points: argument checks with messages, then dispatch to a backend.
 * Every rule of the contract is checked here, before any backend sees the call, so that bad input never
 * reaches a kernel and never touches `out`. */
#include "internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fdec_context {
    fdec_backend backend;
    const fdec_backend_ops *ops;
    atomic_flag busy; /* one call at a time */
    void *impl;       /* backend state */
};

static _Thread_local char err_buf[512];

fdec_status fdec_set_error(fdec_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    return st;
}

const char *fdec_last_error(void) { return err_buf; }

#define FDEC_STR_(x) #x
#define FDEC_STR(x) FDEC_STR_(x)
const char *fdec_version(void) {
    return FDEC_STR(FDEC_VERSION_MAJOR) "." FDEC_STR(FDEC_VERSION_MINOR) "." FDEC_STR(FDEC_VERSION_PATCH);
}

const char *fdec_status_string(fdec_status s) {
    switch (s) {
    case FDEC_OK: return "ok";
    case FDEC_EINVAL: return "invalid argument";
    case FDEC_EUNSUPPORTED: return "unsupported";
    case FDEC_ENOMEM: return "out of memory";
    case FDEC_EBACKEND: return "backend error";
    }
    return "unknown status";
}

fdec_options fdec_default_options(void) {
    fdec_options o;
    memset(&o, 0, sizeof o);
    return o;
}

int fdec_backend_available(fdec_backend b) {
    if (b == FDEC_BACKEND_CPU) return 1;
#ifdef FDEC_HAVE_CUDA
    if (b == FDEC_BACKEND_CUDA) return 1;
#endif
    return 0;
}

/* A dtype in the table (dtype.h); the message lists the table's types, so a new row needs no edit here. */
static fdec_status check_dtype(const char *name, fdec_dtype t) {
    if ((unsigned)t <= (unsigned)FDEC_DTYPE_LAST) return FDEC_OK;
    char list[128] = "";
    for (int i = 0; i <= FDEC_DTYPE_LAST; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", fdec_dtype_table[i].name);
    return fdec_set_error(FDEC_EINVAL, "%s (%d) must be a dtype of the table: %s", name, (int)t, list);
}

/* A type of q, out and the rows written into a cache: in the table, and not a K/V type only (fp8, Q8_0, Q4_0). */
static fdec_status check_plain_dtype(const char *name, fdec_dtype t) {
    fdec_status st = check_dtype(name, t);
    if (!st && (unsigned)t <= FDEC_DTYPE_LAST && fdec_dtype_table[t].kv_only) /* (the bound for the compiler) */
        st = fdec_set_error(FDEC_EINVAL, "%s (%s) must be f32, f16 or bf16: %s is a K/V type only", name,
                            fdec_dtype_name(t), fdec_dtype_name(t));
    return st;
}

/* Whether n elements of type t (rounded up to whole blocks) have a byte count that fits a size_t. The round-up
 * adds one block only where n is not a whole number of them: n / block + 1 wraps to 0 at n = SIZE_MAX. */
static int bytes_fit(fdec_dtype t, size_t n) {
    const size_t blk = fdec_dtype_table[t].block;
    size_t bytes;
    return fdec_size_mul(n / blk + (n % blk != 0), fdec_dtype_table[t].block_bytes, &bytes);
}

/* K/V vectors (t, g) for t < rows, g < G span [t*ps + g*hs, +D); no two may overlap, and the last element's
 * byte offset must fit in size_t. */
static fdec_status check_strides(const fdec_problem *p, uint64_t rows) {
    const size_t D = p->D, G = p->G, ps = p->kv.ps, hs = p->kv.hs;
    int ok;
    if (G == 1 && rows == 1) ok = 1;
    else if (G == 1) ok = ps >= D;
    else if (rows == 1) ok = hs >= D;
    else {
        /* a row's heads side by side within the position stride, or a head's rows within the head stride */
        size_t x, heads_end, rows_end;
        int pos_major = hs >= D && fdec_size_mul(G - 1, hs, &x) && fdec_size_add(x, D, &heads_end) && ps >= heads_end;
        int head_major = ps >= D && fdec_size_mul((size_t)(rows - 1), ps, &x) && fdec_size_add(x, D, &rows_end) &&
                         hs >= rows_end;
        ok = pos_major || head_major;
    }
    if (!ok)
        return fdec_set_error(FDEC_EINVAL,
                              "kv strides overlap: kv_pos_stride (%zu) and kv_head_stride (%zu) must place the "
                              "%u x %u vectors of head_dim (%u) elements without overlap (e.g. pos_stride >= "
                              "num_kv_heads * head_stride and head_stride >= head_dim)",
                              ps, hs, (unsigned)rows, (unsigned)G, (unsigned)D);
    size_t end;
    if (!fdec_kv_extent(&p->kv, rows, p->G, p->D, &end) || !bytes_fit(p->kvt, end))
        return fdec_set_error(FDEC_EINVAL, "kv strides too large: the cache's last element lies beyond the "
                                           "address space");
    return FDEC_OK;
}

/* fdec_problem_init with the rows the strides must place without overlap given: a ring's, a call's positions, a
 * page's. */
static fdec_status problem_init_rows(const fdec_layer *L, uint32_t seq_len, uint64_t rows, fdec_problem *p) {
    fdec_status st;
    if (!L) return fdec_set_error(FDEC_EINVAL, "layer must not be NULL");
    if (L->head_dim < 1 || L->head_dim > FDEC_MAX_HEAD_DIM)
        return fdec_set_error(FDEC_EINVAL, "head_dim (%u) must be in 1..%d", L->head_dim, FDEC_MAX_HEAD_DIM);
    if (L->num_q_heads < 1) return fdec_set_error(FDEC_EINVAL, "num_q_heads (0) must be at least 1");
    if (L->num_kv_heads < 1) return fdec_set_error(FDEC_EINVAL, "num_kv_heads (0) must be at least 1");
    if (L->num_q_heads % L->num_kv_heads)
        return fdec_set_error(FDEC_EINVAL, "num_q_heads (%u) must be a multiple of num_kv_heads (%u)",
                              L->num_q_heads, L->num_kv_heads);
    if (!isfinite(L->scale)) return fdec_set_error(FDEC_EINVAL, "scale (%g) must be finite", (double)L->scale);
    if ((st = check_plain_dtype("q_dtype", L->q_dtype)) || (st = check_dtype("kv_dtype", L->kv_dtype)) ||
        (st = check_plain_dtype("out_dtype", L->out_dtype)))
        return st;
    const uint32_t blk = fdec_dtype_table[L->kv_dtype].block;
    if (blk > 1 && (L->head_dim % blk || L->kv_pos_stride % blk || L->kv_head_stride % blk))
        return fdec_set_error(FDEC_EINVAL, "%s caches come in blocks of %u elements: head_dim (%u), kv_pos_stride (%zu) "
                                           "and kv_head_stride (%zu) must be multiples of %u",
                              fdec_dtype_name(L->kv_dtype), blk, L->head_dim, L->kv_pos_stride, L->kv_head_stride, blk);
    if (L->ring_capacity && !L->window)
        return fdec_set_error(FDEC_EINVAL, "ring_capacity (%u) needs a window: a ring cache serves sliding-window "
                                           "layers only (window is 0)", L->ring_capacity);
    if (L->ring_capacity && L->ring_capacity < L->window)
        return fdec_set_error(FDEC_EINVAL, "ring_capacity (%u) must be at least window (%u)", L->ring_capacity,
                              L->window);
    if (seq_len == 0) return fdec_set_error(FDEC_EINVAL, "seq_len (0) must be at least 1");
    if (!(L->softcap >= 0.0f) || !isfinite(L->softcap))
        return fdec_set_error(FDEC_EINVAL, "softcap (%g) must be 0 (off) or a positive finite number",
                              (double)L->softcap);
    if (!fdec_dtype_is_fp8(L->kv_dtype) && (L->k_scale != 0.0f || L->v_scale != 0.0f || L->k_scales || L->v_scales))
        return fdec_set_error(FDEC_EINVAL, "k_scale, v_scale, k_scales and v_scales apply to fp8 caches only; "
                                           "kv_dtype is %s", fdec_dtype_name(L->kv_dtype));
    if (!(L->k_scale >= 0.0f) || !isfinite(L->k_scale) || !(L->v_scale >= 0.0f) || !isfinite(L->v_scale))
        return fdec_set_error(FDEC_EINVAL, "%s (%g) must be finite and not negative (0 means 1)",
                              !(L->k_scale >= 0.0f) || !isfinite(L->k_scale) ? "k_scale" : "v_scale",
                              (double)(!(L->k_scale >= 0.0f) || !isfinite(L->k_scale) ? L->k_scale : L->v_scale));

    memset(p, 0, sizeof *p);
    p->D = L->head_dim;
    p->H = L->num_q_heads;
    p->G = L->num_kv_heads;
    p->R = p->H / p->G;
    p->logits.scale = L->scale != 0.0f ? L->scale : (float)(1.0 / sqrt((double)L->head_dim));
    p->logits.variant = (L->softcap > 0.0f ? FDEC_LOGITS_SOFTCAP : 0) | (L->alibi_slopes ? FDEC_LOGITS_ALIBI : 0);
    p->logits.softcap = L->softcap;
    p->logits.alibi = L->alibi_slopes;
    p->logits.sinks = L->sinks;
    p->scales.k = L->k_scale != 0.0f ? L->k_scale : 1.0f, p->scales.v = L->v_scale != 0.0f ? L->v_scale : 1.0f;
    p->scales.ks = L->k_scales, p->scales.vs = L->v_scales;
    p->seq_len = seq_len;
    p->qpos = seq_len - 1;
    p->nq = 1;
    p->window = L->window;
    p->lo = (L->window && seq_len > L->window) ? seq_len - L->window : 0;
    p->kv.ring = L->ring_capacity;
    p->qt = L->q_dtype;
    p->kvt = L->kv_dtype;
    p->ot = L->out_dtype;
    p->kv.hs = L->kv_head_stride ? L->kv_head_stride : p->D;
    if (L->kv_pos_stride) p->kv.ps = L->kv_pos_stride;
    else if (!fdec_size_mul(p->kv.hs, p->G, &p->kv.ps))
        return fdec_set_error(FDEC_EINVAL, "kv_head_stride (%zu) too large", p->kv.hs);
    return check_strides(p, rows ? rows : p->kv.ring ? p->kv.ring : seq_len);
}

fdec_status fdec_problem_init(const fdec_layer *L, uint32_t seq_len, fdec_problem *p) {
    return problem_init_rows(L, seq_len, 0, p);
}

static fdec_status check_ptr(const char *name, const void *ptr, size_t align) {
    if (!ptr) return fdec_set_error(FDEC_EINVAL, "%s must not be NULL", name);
    if ((uintptr_t)ptr % align)
        return fdec_set_error(FDEC_EINVAL, "%s (%p) must be aligned to its element size (%zu bytes)", name, ptr,
                              align);
    return FDEC_OK;
}

fdec_status fdec_context_create(fdec_backend backend, const fdec_options *opts, fdec_context **out) {
    return fdec_context_create_test(backend, opts, NULL, out);
}

fdec_status fdec_context_create_test(fdec_backend backend, const fdec_options *opts, const fdec_test_options *t,
                                     fdec_context **out) {
    if (!out) return fdec_set_error(FDEC_EINVAL, "out (the context pointer) must not be NULL");
    *out = NULL;
    fdec_options o = opts ? *opts : fdec_default_options();
    if ((unsigned)o.cpu_path > (unsigned)FDEC_CPU_PATH_LAST)
        return fdec_set_error(FDEC_EINVAL, "cpu_path (%d) must be one of FDEC_CPU_AUTO..FDEC_CPU_NEON",
                              (int)o.cpu_path);
    fdec_context *c = calloc(1, sizeof *c);
    if (!c) return fdec_set_error(FDEC_ENOMEM, "out of memory creating a context");
    atomic_flag_clear(&c->busy);
    c->backend = backend;
    fdec_status st;
    switch (backend) {
    case FDEC_BACKEND_CPU: st = fdec_cpu_create(&o, &c->impl, &c->ops); break;
    case FDEC_BACKEND_CUDA: st = fdec_cuda_create(&o, t, &c->impl, &c->ops); break;
    default:
        st = fdec_set_error(FDEC_EINVAL, "backend (%d) must be FDEC_BACKEND_CPU or FDEC_BACKEND_CUDA",
                            (int)backend);
    }
    if (st != FDEC_OK) {
        free(c);
        return st;
    }
    *out = c;
    return FDEC_OK;
}

void fdec_context_destroy(fdec_context *c) {
    if (!c) return;
    c->ops->destroy(c->impl);
    free(c);
}

/* Enters a call on ctx: one at a time. */
static fdec_status enter(fdec_context *c) {
    if (!c) return fdec_set_error(FDEC_EINVAL, "ctx must not be NULL");
    if (atomic_flag_test_and_set_explicit(&c->busy, memory_order_acquire))
        return fdec_set_error(FDEC_EBACKEND, "context is busy: another thread is inside a call on it (use one "
                                             "context per thread)");
    return FDEC_OK;
}

static fdec_status leave(fdec_context *c, fdec_status st) {
    atomic_flag_clear_explicit(&c->busy, memory_order_release);
    return st;
}

/* The layer's per-head arrays (sinks, ALiBi slopes): aligned; on a backend of host pointers, their values too. */
static fdec_status check_head_array(const fdec_context *c, const char *name, const float *a, uint32_t H, int sink) {
    if (!a) return FDEC_OK;
    if ((uintptr_t)a % sizeof(float))
        return fdec_set_error(FDEC_EINVAL, "%s (%p) must be aligned to 4 bytes", name, (const void *)a);
    if (c->ops->check_ptr) return c->ops->check_ptr(c->impl, name, a);
    for (uint32_t h = 0; h < H; h++) /* kind 1: a sink (-inf allowed); 2: a scale (not negative) */
        if ((!isfinite(a[h]) && !(sink == 1 && a[h] == -INFINITY)) || (sink == 2 && !(a[h] >= 0.0f)))
            return fdec_set_error(FDEC_EINVAL, "%s[%u] (%g) must be finite%s", name, h, (double)a[h],
                                  sink == 1 ? " or -inf (no sink)" : sink == 2 ? " and not negative (0 means 1)" : "");
    return FDEC_OK;
}

/* The layer's arrays (sinks, ALiBi slopes, fp8 scales a KV head): aligned, and where c reads them on the host, their
 * values. */
static fdec_status check_arrays(const fdec_context *c, const fdec_problem *p) {
    fdec_status st;
    if ((st = check_head_array(c, "sinks", p->logits.sinks, p->H, 1)) ||
        (st = check_head_array(c, "alibi_slopes", p->logits.alibi, p->H, 0)) ||
        (st = check_head_array(c, "k_scales", p->scales.ks, p->G, 2)) ||
        (st = check_head_array(c, "v_scales", p->scales.vs, p->G, 2)))
        return st;
    return FDEC_OK;
}

/* The problem of a call on c: the layer's checks, then its arrays' where c reads them on the host. */
static fdec_status problem_on(const fdec_context *c, const fdec_layer *layer, uint32_t seq_len, fdec_problem *p) {
    fdec_status st = fdec_problem_init(layer, seq_len, p);
    if (!st) st = check_arrays(c, p);
    return st;
}

fdec_status fdec_context_reserve(fdec_context *c, const fdec_layer *layer, uint32_t max_seq_len) {
    fdec_status st = enter(c);
    if (st) return st;
    fdec_problem p;
    st = problem_on(c, layer, max_seq_len, &p);
    if (st == FDEC_OK) st = c->ops->reserve(c->impl, &p);
    return leave(c, st);
}

/* A call's buffers: not NULL (lse may be), aligned to their types, and where the backend says so, its memory. */
static fdec_status check_call_ptrs(const fdec_context *c, const fdec_problem *p, const void *q, const void *k,
                                   const void *v, const void *out, const float *lse) {
    fdec_status st;
    if ((st = check_ptr("q", q, fdec_dtype_size(p->qt))) || (st = check_ptr("k", k, fdec_dtype_align(p->kvt))) ||
        (st = check_ptr("v", v, fdec_dtype_align(p->kvt))) || (st = check_ptr("out", out, fdec_dtype_size(p->ot))))
        return st;
    if (lse && (uintptr_t)lse % sizeof(float))
        return fdec_set_error(FDEC_EINVAL, "lse (%p) must be aligned to 4 bytes", (const void *)lse);
    if (c->ops->check_ptr) {
        const char *names[] = {"q", "k", "v", "out", "lse"};
        const void *ptrs[] = {q, k, v, out, lse};
        for (int i = 0; i < 5; i++)
            if ((st = c->ops->check_ptr(c->impl, names[i], ptrs[i]))) return st;
    }
    return FDEC_OK;
}

static fdec_status decode_problem(fdec_context *c, const fdec_problem *p, const void *q, const void *k, const void *v,
                                  void *out, float *lse) {
    fdec_status st = check_call_ptrs(c, p, q, k, v, out, lse);
    return st ? st : c->ops->decode(c->impl, p, q, k, v, out, lse);
}

fdec_status fdec_decode(fdec_context *c, const fdec_layer *layer, uint32_t seq_len, const void *q, const void *k,
                        const void *v, void *out, float *lse) {
    fdec_status st = enter(c);
    if (st) return st;
    fdec_problem p;
    if ((st = problem_on(c, layer, seq_len, &p))) return leave(c, st);
    return leave(c, decode_problem(c, &p, q, k, v, out, lse));
}

fdec_status fdec_decode_at(fdec_context *c, const fdec_layer *layer, uint32_t seq_len, uint32_t qpos, const void *q,
                           const void *k, const void *v, void *out, float *lse) {
    fdec_status st = enter(c);
    if (st) return st;
    fdec_problem p;
    if ((st = problem_on(c, layer, seq_len, &p))) return leave(c, st);
    if (qpos < p.qpos)
        return leave(c, fdec_set_error(FDEC_EINVAL, "qpos (%u) must be at least seq_len - 1 (%u)", qpos, p.qpos));
    p.qpos = qpos;
    return leave(c, decode_problem(c, &p, q, k, v, out, lse));
}

fdec_status fdec_plan(fdec_context *c, const fdec_layer *layer, uint32_t seq_len, fdec_plan_info *info) {
    fdec_status st = enter(c);
    if (st) return st;
    fdec_problem p;
    if (!info) return leave(c, fdec_set_error(FDEC_EINVAL, "info must not be NULL"));
    if ((st = problem_on(c, layer, seq_len, &p))) return leave(c, st);
    memset(info, 0, sizeof *info);
    return leave(c, c->ops->plan(c->impl, &p, info));
}

fdec_status fdec_merge(fdec_context *c, uint32_t n, uint32_t H, uint32_t D, fdec_dtype t, const void *const *outs,
                       const float *const *lses, void *out, float *lse) {
    fdec_status st = enter(c);
    if (st) return st;
    if (n < 1) return leave(c, fdec_set_error(FDEC_EINVAL, "n (0) must be at least 1"));
    if (H < 1) return leave(c, fdec_set_error(FDEC_EINVAL, "num_heads (0) must be at least 1"));
    if (D < 1 || D > FDEC_MAX_HEAD_DIM)
        return leave(c, fdec_set_error(FDEC_EINVAL, "head_dim (%u) must be in 1..%d", D, FDEC_MAX_HEAD_DIM));
    if ((st = check_plain_dtype("dtype", t))) return leave(c, st);
    if (!outs || !lses) return leave(c, fdec_set_error(FDEC_EINVAL, "%s must not be NULL", outs ? "lses" : "outs"));
    for (uint32_t i = 0; i < n; i++) {
        if (!outs[i]) return leave(c, fdec_set_error(FDEC_EINVAL, "outs[%u] must not be NULL", i));
        if (!lses[i]) return leave(c, fdec_set_error(FDEC_EINVAL, "lses[%u] must not be NULL", i));
        if ((uintptr_t)outs[i] % fdec_dtype_size(t) || (uintptr_t)lses[i] % sizeof(float))
            return leave(c, fdec_set_error(FDEC_EINVAL, "outs[%u] and lses[%u] must be aligned to their element size",
                                           i, i));
    }
    if ((st = check_ptr("out", out, fdec_dtype_size(t)))) return leave(c, st);
    if (lse && (uintptr_t)lse % sizeof(float))
        return leave(c, fdec_set_error(FDEC_EINVAL, "lse (%p) must be aligned to 4 bytes", (void *)lse));
    if (!c->ops->merge)
        return leave(c, fdec_set_error(FDEC_EUNSUPPORTED, "fdec_merge is not available on this backend"));
    return leave(c, c->ops->merge(c->impl, n, H, D, t, outs, lses, out, lse));
}

/* ---- batches (flashdec.h, "batches") ---- */

/* The elements n items `stride` apart span, each spanning `one`, into *end: (n - 1) stride + one; 0 where it does not
 * fit a size_t (or its bytes do not). */
static int span_fits(uint64_t n, size_t stride, size_t one, fdec_dtype t) {
    size_t a, end;
    return n >= 1 && n - 1 <= SIZE_MAX && fdec_size_mul((size_t)(n - 1), stride, &a) && fdec_size_add(a, one, &end) &&
           bytes_fit(t, end);
}

/* A pool of npages pages of ps rows (kv_page_stride apart, 0: ps * kv_pos_stride) into p->kv: checked not to overlap
 * and to fit the address space. `what` names the caller's struct in messages. */
static fdec_status set_pages(fdec_problem *p, uint32_t ps, size_t kv_page_stride, uint64_t npages, const char *what) {
    size_t one = 0, pstride = kv_page_stride;
    fdec_kv_extent(&p->kv, ps, p->G, p->D, &one); /* fits: checked with the layer */
    if (!pstride && !fdec_size_mul(ps, p->kv.ps, &pstride))
        return fdec_set_error(FDEC_EINVAL, "page_size (%u) x kv_pos_stride (%zu) too large", ps, p->kv.ps);
    if (npages > 1 && pstride < one)
        return fdec_set_error(FDEC_EINVAL, "%s->kv_page_stride (%zu) must be at least a page's extent (%zu elements): "
                                           "pages must not overlap", what, pstride, one);
    if (!span_fits(npages, pstride, one, p->kvt))
        return fdec_set_error(FDEC_EINVAL, "the page pool (%llu pages, %zu elements apart) lies beyond the address space",
                              (unsigned long long)npages, pstride);
    fdec_kv_set_pages(&p->kv, ps, pstride);
    return FDEC_OK;
}

/* Checks a batch and its layer into *bp. With arrays, its arrays too: where c takes host pointers every length and
 * page id, else that they are device memory. Without (a plan or a reserve), its bounds, and that the arrays are given. */
static fdec_status batch_init(const fdec_context *c, const fdec_layer *L, const fdec_batch *b, int arrays,
                              fdec_batch_problem *bp) {
    fdec_status st;
    if (!b) return fdec_set_error(FDEC_EINVAL, "batch must not be NULL");
    if (b->num_seqs < 1) return fdec_set_error(FDEC_EINVAL, "batch->num_seqs (0) must be at least 1");
    if (!b->seq_lens) return fdec_set_error(FDEC_EINVAL, "batch->seq_lens must not be NULL");
    if (b->max_seq_len < 1) return fdec_set_error(FDEC_EINVAL, "batch->max_seq_len (0) must be at least 1");
    const uint32_t mq = b->max_q_len ? b->max_q_len : 1, ps = b->page_size;
    if (mq > FDEC_MAX_Q_LEN)
        return fdec_set_error(FDEC_EINVAL, "batch->max_q_len (%u) must be in 1..%d", mq, FDEC_MAX_Q_LEN);
    if (L && ps && L->ring_capacity)
        return fdec_set_error(FDEC_EINVAL, "ring_capacity (%u) must be 0 with a paged cache (page_size %u)",
                              L->ring_capacity, ps);
    if ((st = problem_init_rows(L, b->max_seq_len, ps ? ps : 0, &bp->p))) return st;
    fdec_problem *p = &bp->p;
    const uint32_t blk = fdec_dtype_table[p->kvt].block;
    if (b->kv_seq_stride % blk || b->kv_page_stride % blk)
        return fdec_set_error(FDEC_EINVAL, "batch->kv_seq_stride (%zu) and kv_page_stride (%zu) must be multiples of "
                                           "%u for %s caches", b->kv_seq_stride, b->kv_page_stride, blk,
                              fdec_dtype_name(p->kvt));
    p->nq = mq < b->max_seq_len ? mq : b->max_seq_len;
    p->lo = (uint32_t)fdec_token_lo(p, 0);
    if (ps) {
        if (!b->page_table) return fdec_set_error(FDEC_EINVAL, "batch->page_table must not be NULL (page_size %u)", ps);
        const uint64_t need = ((uint64_t)b->max_seq_len + ps - 1) / ps;
        if (b->max_pages < need)
            return fdec_set_error(FDEC_EINVAL, "batch->max_pages (%u) is too narrow: max_seq_len %u needs %llu pages of "
                                               "%u", b->max_pages, b->max_seq_len, (unsigned long long)need, ps);
        if (b->num_pages < 1) return fdec_set_error(FDEC_EINVAL, "batch->num_pages (0) must be at least 1");
        if ((st = set_pages(p, ps, b->kv_page_stride, b->num_pages, "batch"))) return st;
    } else if (b->num_seqs > 1) {
        size_t one = 0;
        fdec_kv_extent(&p->kv, p->kv.ring ? p->kv.ring : b->max_seq_len, p->G, p->D, &one);
        if (b->kv_seq_stride < one)
            return fdec_set_error(FDEC_EINVAL, "batch->kv_seq_stride (%zu) must be at least one sequence's cache extent "
                                               "(%zu elements) with %u sequences", b->kv_seq_stride, one, b->num_seqs);
        if (!span_fits(b->num_seqs, b->kv_seq_stride, one, p->kvt))
            return fdec_set_error(FDEC_EINVAL, "the caches of %u sequences, %zu elements apart, lie beyond the address "
                                               "space", b->num_seqs, b->kv_seq_stride);
    }
    bp->b = b;
    if (!arrays) return FDEC_OK;
    if (c->ops->check_ptr) /* device memory: the kernels check the values */
        return (st = c->ops->check_ptr(c->impl, "batch->seq_lens", b->seq_lens)) ||
                       (st = c->ops->check_ptr(c->impl, "batch->q_lens", b->q_lens)) ||
                       (st = c->ops->check_ptr(c->impl, "batch->page_table", ps ? b->page_table : NULL))
                   ? st
                   : FDEC_OK;
    for (uint32_t i = 0; i < b->num_seqs; i++) {
        const uint32_t n = b->seq_lens[i], nq = b->q_lens ? b->q_lens[i] : 1;
        if (n < 1 || n > b->max_seq_len)
            return fdec_set_error(FDEC_EINVAL, "batch->seq_lens[%u] (%u) must be in 1..max_seq_len (%u)", i, n,
                                  b->max_seq_len);
        if (nq < 1 || nq > mq)
            return fdec_set_error(FDEC_EINVAL, "batch->q_lens[%u] (%u) must be in 1..max_q_len (%u)", i, nq, mq);
        if (nq > n)
            return fdec_set_error(FDEC_EINVAL, "batch->q_lens[%u] (%u) must be at most seq_lens[%u] (%u): the new "
                                               "tokens are in the cache", i, nq, i, n);
        if (!ps) continue;
        fdec_problem s;
        size_t off;
        fdec_batch_seq(bp, i, &s, &off);
        for (uint64_t pg = s.lo / ps; pg <= (n - 1) / ps; pg++) {
            const int32_t id = s.kv.pages[pg];
            if (id < 0 || (uint32_t)id >= b->num_pages)
                return fdec_set_error(FDEC_EINVAL, "batch->page_table[%u][%llu] (%d) must be a page of the pool, "
                                                   "0..%u: sequence %u attends positions in it", i,
                                      (unsigned long long)pg, id, b->num_pages - 1, i);
        }
    }
    return FDEC_OK;
}

void fdec_batch_seq(const fdec_batch_problem *bp, uint32_t i, fdec_problem *p, size_t *kv_off) {
    const fdec_batch *b = bp->b;
    *p = bp->p;
    p->seq_len = b->seq_lens[i];
    p->nq = b->q_lens ? b->q_lens[i] : 1;
    p->qpos = p->seq_len - 1;
    p->lo = (uint32_t)fdec_token_lo(p, 0);
    if (b->page_size) p->kv.pages = b->page_table + (size_t)i * b->max_pages, *kv_off = 0;
    else *kv_off = (size_t)i * b->kv_seq_stride;
}

fdec_status fdec_decode_batch(fdec_context *c, const fdec_layer *layer, const fdec_batch *batch, const void *q,
                              const void *k, const void *v, void *out, float *lse) {
    fdec_status st = enter(c);
    if (st) return st;
    fdec_batch_problem bp;
    if ((st = batch_init(c, layer, batch, 1, &bp)) || (st = check_arrays(c, &bp.p))) return leave(c, st);
    if ((st = check_call_ptrs(c, &bp.p, q, k, v, out, lse))) return leave(c, st);
    if (!c->ops->decode_batch)
        return leave(c, fdec_set_error(FDEC_EUNSUPPORTED, "fdec_decode_batch is not available on this backend yet"));
    return leave(c, c->ops->decode_batch(c->impl, &bp, q, k, v, out, lse));
}

fdec_status fdec_plan_batch(fdec_context *c, const fdec_layer *layer, const fdec_batch *batch, fdec_plan_info *info) {
    fdec_status st = enter(c);
    if (st) return st;
    if (!info) return leave(c, fdec_set_error(FDEC_EINVAL, "info must not be NULL"));
    fdec_batch_problem bp;
    if ((st = batch_init(c, layer, batch, 0, &bp))) return leave(c, st);
    memset(info, 0, sizeof *info);
    return leave(c, c->ops->plan_batch ? c->ops->plan_batch(c->impl, &bp, info) : c->ops->plan(c->impl, &bp.p, info));
}

fdec_status fdec_context_reserve_batch(fdec_context *c, const fdec_layer *layer, const fdec_batch *batch) {
    fdec_status st = enter(c);
    if (st) return st;
    fdec_batch_problem bp;
    if ((st = batch_init(c, layer, batch, 0, &bp))) return leave(c, st);
    return leave(c, c->ops->reserve_batch ? c->ops->reserve_batch(c->impl, &bp) : c->ops->reserve(c->impl, &bp.p));
}

fdec_status fdec_kv_write(fdec_context *c, const fdec_layer *layer, const fdec_kv_slots *s, const void *k_src,
                          const void *v_src, void *k, void *v) {
    fdec_status st = enter(c);
    if (st) return st;
    if (!s) return leave(c, fdec_set_error(FDEC_EINVAL, "slots must not be NULL"));
    if (s->num_slots < 1) return leave(c, fdec_set_error(FDEC_EINVAL, "slots->num_slots (0) must be at least 1"));
    if ((st = check_plain_dtype("slots->src_dtype", s->src_dtype))) return leave(c, st);
    const uint32_t ps = s->page_size;
    if (layer && layer->ring_capacity)
        return leave(c, fdec_set_error(FDEC_EINVAL, "ring_capacity (%u) must be 0 for fdec_kv_write: a slot names its "
                                                    "row", layer->ring_capacity));
    fdec_problem p;
    const uint64_t rows = ps ? ps : s->num_slots;
    if ((st = problem_init_rows(layer, 1, rows, &p))) return leave(c, st);
    if (s->kv_page_stride % fdec_dtype_table[p.kvt].block)
        return leave(c, fdec_set_error(FDEC_EINVAL, "slots->kv_page_stride (%zu) must be a multiple of %u for %s caches",
                                       s->kv_page_stride, fdec_dtype_table[p.kvt].block, fdec_dtype_name(p.kvt)));
    if (ps && (st = set_pages(&p, ps, s->kv_page_stride, (s->num_slots + ps - 1) / ps, "slots"))) return leave(c, st);
    if (s->num_tokens == 0) return leave(c, FDEC_OK);
    if (!s->slots) return leave(c, fdec_set_error(FDEC_EINVAL, "slots->slots must not be NULL"));
    if ((st = check_ptr("k_src", k_src, fdec_dtype_size(s->src_dtype))) ||
        (st = check_ptr("v_src", v_src, fdec_dtype_size(s->src_dtype))) ||
        (st = check_ptr("k", k, fdec_dtype_align(p.kvt))) || (st = check_ptr("v", v, fdec_dtype_align(p.kvt))))
        return leave(c, st);
    if (c->ops->check_ptr) {
        const char *names[] = {"slots->slots", "k_src", "v_src", "k", "v"};
        const void *ptrs[] = {s->slots, k_src, v_src, k, v};
        for (int i = 0; i < 5; i++)
            if ((st = c->ops->check_ptr(c->impl, names[i], ptrs[i]))) return leave(c, st);
    } else
        for (uint32_t i = 0; i < s->num_tokens; i++)
            if (s->slots[i] < -1 || (s->slots[i] >= 0 && (uint64_t)s->slots[i] >= s->num_slots))
                return leave(c, fdec_set_error(FDEC_EINVAL, "slots->slots[%u] (%lld) must be -1 (skip) or a slot of the "
                                                            "cache, 0..%llu", i, (long long)s->slots[i],
                                               (unsigned long long)s->num_slots - 1));
    if (!c->ops->kv_write)
        return leave(c, fdec_set_error(FDEC_EUNSUPPORTED, "fdec_kv_write is not available on this backend yet"));
    return leave(c, c->ops->kv_write(c->impl, &p, s, k_src, v_src, k, v));
}

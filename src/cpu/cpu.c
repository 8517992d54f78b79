/* cpu.c — the CPU backend: picks the instruction-set path, owns the thread pool and the scratch, runs the split-KV
 * chunks (kern.h) as one run of chunks a task, with work stealing between the runs, and merges the chunks' partial
 * states (state.h) into out and lse. */
#include "cpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Chunks a thread for calls that read at least LONG_CALL_BYTES: more than one, dealt to the threads as runs with
 * work stealing (below), so that a thread slowed by other work on a shared machine does not hold up the call; each
 * chunk costs one partial state and its share of the merge. Shorter calls take one chunk a thread (every extra chunk
 * starts cold). TUNING.md has the figures of these constants. */
#define CHUNKS_PER_THREAD 8
#define LONG_CALL_BYTES ((size_t)64 << 20)
/* Head_dim from which the rows are prefetched one block ahead rather than fdec_cpu_pf_blocks(): a block of 32 rows is
 * 128-256 KiB of K and V there, and two of them ahead of the one in use crowd a 1 MiB L2. */
#define PF_ONE_D 256
/* Scratch bound on the split: 64 chunks. */
#define MAX_CHUNKS 64
/* With several chunks a thread, the last chunk of each thread's run is cut into CUT_PARTS items (whole blocks), so
 * that the end of a call is shared out in small pieces (fdec_work_list). At most MAX_STATES partial states in all. */
#define CUT_PARTS 4
#define MAX_STATES (2 * MAX_CHUNKS)
/* Work stealing. A call's items are dealt to its threads as contiguous runs, one a thread. A thread works through
 * its run item by item, asking for the next item's first rows while it finishes the one before (as within an item);
 * when its run is used up it takes the back half (by positions, in whole items) of the run with the most positions
 * left and goes on there. Each item is still worked through by one thread into its own partial state, and the states
 * are merged in item order, so the result does not depend on which thread took which item: the same bytes every
 * call. Without it a call waits for its slowest thread. */
/* A chunk should read at least this many bytes of K/V so that waking a thread for it pays off: 256 KiB takes about
 * 16 us at the rate one thread reads K/V, several wake-ups' worth. */
#define MIN_CHUNK_BYTES (256u << 10)

typedef struct {
    fdec_pool *pool;
    fdec_parallel_for_fn pfor;
    void *puser;
    uint32_t threads;
    fdec_cpu_path path;
    fdec_cpu_chunk_fn chunk;
    fdec_cpu_cvt_in_fn cvt_in;   /* q and fdec_merge's rows in, the path's vector conversions */
    fdec_cpu_cvt_out_fn cvt_out; /* out */
    uint32_t pf_blocks;
    void *scratch;
    size_t cap;
} cpu_impl;

#ifdef FDEC_X86
#include <cpuid.h>
/* OS-enabled register state (XCR0), read with xgetbv. */
static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}
#endif

uint32_t fdec_cpu_pf_blocks(void) {
#ifdef FDEC_X86
    unsigned a = 0, b = 0, c = 0, d = 0; /* zeroed: -O1 cannot see that __get_cpuid sets them */
    if (__get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu)
        return 1; /* "GenuineIntel" */
#endif
    return 2;
}

/* The prefetch distance of a call of head_dim D: one block from PF_ONE_D on, the machine's below it. */
static uint32_t pf_distance(const cpu_impl *c, uint32_t D) { return D >= PF_ONE_D ? 1 : c->pf_blocks; }

/* By cpuid and xgetbv rather than __builtin_cpu_supports, whose feature names differ between compilers. */
unsigned fdec_cpu_features(void) {
    unsigned f = 1u << FDEC_CPU_SCALAR;
#ifdef FDEC_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const int fma = c >> 12 & 1, osxsave = c >> 27 & 1, avx = c >> 28 & 1, f16c = c >> 29 & 1;
    if (!osxsave || !avx) return f;
    const uint64_t xs = xcr0();
    if ((xs & 0x6) != 0x6) return f; /* the OS saves no AVX state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    const int avx2 = b >> 5 & 1, avx512f = b >> 16 & 1, avx512dq = b >> 17 & 1, avx512bw = b >> 30 & 1,
              avx512vl = b >> 31 & 1;
    if (avx2 && fma && f16c) f |= 1u << FDEC_CPU_AVX2;
    if ((f >> FDEC_CPU_AVX2 & 1) && avx512f && avx512dq && avx512bw && avx512vl && (xs & 0xe0) == 0xe0)
        f |= 1u << FDEC_CPU_AVX512;
#endif
#ifdef FDEC_ARM64
    f |= 1u << FDEC_CPU_NEON; /* Advanced SIMD, with its f16 conversions, is in every AArch64 core */
#endif
    return f;
}

const char *fdec_cpu_path_name(fdec_cpu_path p) {
    switch (p) {
    case FDEC_CPU_SCALAR: return "scalar";
    case FDEC_CPU_AVX2: return "avx2";
    case FDEC_CPU_AVX512: return "avx512";
    case FDEC_CPU_NEON: return "neon";
    default: return "auto";
    }
}

int fdec_cpu_path_parse(const char *name, fdec_cpu_path *out) {
    for (int p = FDEC_CPU_AUTO; p <= FDEC_CPU_PATH_LAST; p++)
        if (!strcmp(name, fdec_cpu_path_name((fdec_cpu_path)p))) return *out = (fdec_cpu_path)p, 1;
    return 0;
}

/* The path's kernel and conversions into c. */
static void path_functions(fdec_cpu_path p, cpu_impl *c) {
    switch (p) {
#ifdef FDEC_X86
    case FDEC_CPU_AVX2:
        c->chunk = fdec_cpu_chunk_avx2, c->cvt_in = fdec_cpu_cvt_in_avx2, c->cvt_out = fdec_cpu_cvt_out_avx2;
        break;
    case FDEC_CPU_AVX512:
        c->chunk = fdec_cpu_chunk_avx512, c->cvt_in = fdec_cpu_cvt_in_avx512, c->cvt_out = fdec_cpu_cvt_out_avx512;
        break;
#endif
#ifdef FDEC_ARM64
    case FDEC_CPU_NEON:
        c->chunk = fdec_cpu_chunk_neon, c->cvt_in = fdec_cpu_cvt_in_neon, c->cvt_out = fdec_cpu_cvt_out_neon;
        break;
#endif
    default: c->chunk = fdec_cpu_chunk_scalar, c->cvt_in = fdec_cpu_cvt_in_scalar, c->cvt_out = fdec_cpu_cvt_out_scalar;
    }
}

static fdec_status choose_path(fdec_cpu_path want, fdec_cpu_path *out) {
    unsigned f = fdec_cpu_features();
    if (want == FDEC_CPU_AUTO) {
        const char *env = getenv("FDEC_CPU_PATH");
        if (env && *env) {
            if (!fdec_cpu_path_parse(env, &want))
                return fdec_set_error(FDEC_EINVAL,
                                      "FDEC_CPU_PATH (\"%s\") must be auto, scalar, avx2, avx512 or neon", env);
        }
    }
    if (want == FDEC_CPU_AUTO) {
        *out = (f >> FDEC_CPU_AVX512) & 1 ? FDEC_CPU_AVX512
               : (f >> FDEC_CPU_AVX2) & 1 ? FDEC_CPU_AVX2
               : (f >> FDEC_CPU_NEON) & 1 ? FDEC_CPU_NEON
                                          : FDEC_CPU_SCALAR;
        return FDEC_OK;
    }
    if (!((f >> want) & 1))
        return fdec_set_error(FDEC_EUNSUPPORTED, "cpu_path %s is not supported by this CPU or build",
                              fdec_cpu_path_name(want));
    *out = want;
    return FDEC_OK;
}

/* ---- geometry and scratch ---- */

/* bound (may be NULL): the most chunks of any call of p's shape up to p's length, for a reserve's scratch
 * (fdec_split_bound; the lanes only grow with the length). */
static fdec_split cpu_split(const cpu_impl *c, const fdec_problem *p, uint32_t *bound) {
    size_t bytes_per_pos = 2 * (size_t)p->G * fdec_dtype_bytes(p->kvt, p->D);
    size_t min_chunk = MIN_CHUNK_BYTES / bytes_per_pos;
    if (min_chunk < FDEC_CPU_NB) min_chunk = FDEC_CPU_NB;
    const uint32_t mc = (uint32_t)(min_chunk > UINT32_MAX ? UINT32_MAX : min_chunk);
    const size_t call_bytes = (size_t)(p->seq_len - p->lo) * bytes_per_pos; /* the attended positions */
    uint32_t lanes = c->threads > 1 ? c->threads * (call_bytes >= LONG_CALL_BYTES ? CHUNKS_PER_THREAD : 1) : 1;
    if (bound) *bound = fdec_split_bound(p, lanes, mc, MAX_CHUNKS);
    return fdec_make_split(p, lanes, mc, MAX_CHUNKS);
}

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

typedef struct {
    size_t q, m, l, o, s, total; /* byte offsets into the scratch */
} layout;

/* The kernel's rows of a call (cpu.h): every query token's heads. */
static uint32_t rows_of(const fdec_problem *p) { return p->H * p->nq; }

/* The call's row (token i, head h: i H + h, as q, out and lse hold them) of the kernel's row x (cpu.h's order). */
static size_t call_row(const fdec_problem *p, uint32_t x) {
    const uint32_t Rq = p->R * p->nq, g = x / Rq, tok = (x % Rq) / p->R, r = x % p->R;
    return (size_t)tok * p->H + (size_t)g * p->R + r;
}

/* nc partial states; nq copies of q and nq kernel work areas, one each a run (run_task) */
static layout scratch_layout(const fdec_problem *p, uint32_t nc, uint32_t nq) {
    const size_t Dp = fdec_cpu_padded_dim(p->D), F = sizeof(float), H = rows_of(p);
    layout L;
    L.q = 0;
    L.m = ALIGN64(L.q + (size_t)nq * H * Dp * F);
    L.l = ALIGN64(L.m + (size_t)nc * H * F);
    L.o = ALIGN64(L.l + (size_t)nc * H * F);
    L.s = ALIGN64(L.o + (size_t)nc * H * Dp * F);
    L.total = ALIGN64(L.s + (size_t)nq * fdec_cpu_work_floats((uint32_t)H, p->D) * F);
    return L;
}

/* The work list of a call split as s over `runs` threads' runs (fdec_work_list with the CPU's cut). */
static uint32_t cpu_work(const fdec_problem *p, const fdec_split *s, uint32_t runs, fdec_work *w, uint32_t *first) {
    return fdec_work_list(s, 0, p->G, runs, CUT_PARTS, FDEC_CPU_NB, MAX_STATES, w, first);
}

static uint32_t call_runs(const cpu_impl *c, const fdec_split *s) {
    return c->threads < s->num_chunks ? c->threads : s->num_chunks;
}

static fdec_status ensure_scratch(cpu_impl *c, size_t bytes) {
    if (bytes <= c->cap) return FDEC_OK;
    void *s = NULL;
    if (posix_memalign(&s, 64, bytes)) return fdec_set_error(FDEC_ENOMEM, "out of memory: %zu bytes of scratch", bytes);
    free(c->scratch);
    c->scratch = s;
    c->cap = bytes;
    return FDEC_OK;
}

/* ---- one call ---- */

/* A run of items [front, back) in one word (front << 32 | back): its thread moves the front, a thief the back. One
 * a cache line, so that two threads' claims do not share one. */
typedef struct {
    _Alignas(64) _Atomic uint64_t w;
} run_word;

typedef struct {
    const fdec_cpu_args *a; /* all but q, which each run converts into its own copy */
    const fdec_problem *p;
    const void *q;          /* the caller's q */
    float *qs;              /* runs copies of q, H x Dp floats each */
    const cpu_impl *c;      /* the path's kernel and conversions */
    float *m, *l, *o;       /* the items' partial states */
    float *work;            /* the kernel's work area, one a run (fdec_cpu_work_floats) */
    uint32_t runs;          /* tasks: one run of items each */
    run_word *run;
    const fdec_work *item;  /* the work list (adjacent in position) */
    uint32_t nc;            /* items (partial states), merged into out and lse (merge_task) */
    void *out;
    float *lse;
} run_ctx;

/* Positions of items [f, b), b > f. */
static uint64_t span(const run_ctx *r, uint64_t f, uint64_t b) { return r->item[b - 1].t1 - r->item[f].t0; }

/* Item c into its partial state, with the work area of the run that runs it; the rows of the positions up to pf_end
 * may be asked for ahead. */
static void run_one(const run_ctx *r, const fdec_cpu_args *a, uint32_t c, uint64_t pf_end, int ramp, float *work) {
    /* With one item a run (the calls under LONG_CALL_BYTES) on several threads the item sums into its run's work area
     * and writes its state once, at its end: the state's lines were read by the other thread in the last call's
     * merge, and summing into them block by block waited on them (TUNING.md). */
    const fdec_work *w = &r->item[c];
    const fdec_cpu_range rg = {w->t0, w->t1, pf_end, ramp, r->runs > 1 && r->nc == r->runs};
    r->c->chunk(a, &rg, r->m + (size_t)c * a->H, r->l + (size_t)c * a->H,
                r->o + (size_t)c * a->H * fdec_cpu_padded_dim(a->D), work);
}

static uint64_t run_pack(uint64_t front, uint64_t back) { return front << 32 | back; }

/* Moves the back of the run with the most positions left to run `self`: the last items that hold at most half of
 * them, at least one. 0: none left. */
static int steal(const run_ctx *r, uint32_t self) {
    for (;;) {
        uint32_t best = r->runs;
        uint64_t bw = 0, most = 0;
        for (uint32_t i = 0; i < r->runs; i++) {
            const uint64_t w = atomic_load_explicit(&r->run[i].w, memory_order_relaxed);
            const uint64_t f = w >> 32, b = w & 0xffffffffu;
            if (i != self && b > f && span(r, f, b) > most) best = i, bw = w, most = span(r, f, b);
        }
        if (best == r->runs) return 0;
        const uint64_t b = bw & 0xffffffffu, f = bw >> 32;
        uint64_t take = 1;
        while (b - take > f && 2 * span(r, b - take - 1, b) <= most) take++;
        if (atomic_compare_exchange_strong_explicit(&r->run[best].w, &bw, run_pack(f, b - take),
                                                    memory_order_relaxed, memory_order_relaxed)) {
            atomic_store_explicit(&r->run[self].w, run_pack(b - take, b), memory_order_relaxed);
            return 1;
        }
    }
}

/* q [nq][H][D] of type qt into qs [rows][Dp] f32 in the kernel's row order, times scale, zero-padded */
static void load_q(const fdec_problem *p, const void *q, float *qs, fdec_cpu_cvt_in_fn cvt) {
    const uint32_t Dp = fdec_cpu_padded_dim(p->D);
    for (uint32_t x = 0; x < rows_of(p); x++) {
        /* the scale, and an fp8 cache's K scale of the row's KV head (scores are q . K) */
        cvt(qs + (size_t)x * Dp, (const char *)q + fdec_dtype_bytes(p->qt, call_row(p, x) * p->D), p->D, p->qt,
            p->logits.scale * fdec_kv_scale_at(&p->scales, x / (p->R * p->nq), 0));
        for (uint32_t d = p->D; d < Dp; d++) qs[(size_t)x * Dp + d] = 0.0f;
    }
}

/* Task i: run i's items, front first, then whatever it can steal. Each item is claimed by moving its run's front
 * past it; the rows asked for ahead reach to the end of the run as it stands. */
static void run_task(void *arg, uint32_t i, uint32_t n) {
    (void)n;
    const run_ctx *r = arg;
    /* q, scaled and padded, in this run's own copy, written by the thread that reads it: one copy written by the caller
     * and read by every thread had its lines move between the cores each call */
    fdec_cpu_args a = *r->a;
    float *qs = r->qs + (size_t)i * a.H * fdec_cpu_padded_dim(a.D);
    load_q(r->p, r->q, qs, r->c->cvt_in);
    a.q = qs;
    float *work = r->work + (size_t)i * fdec_cpu_work_floats(a.H, a.D); /* each item it runs, stolen ones too */
    _Atomic uint64_t *me = &r->run[i].w;
    uint64_t w = atomic_load_explicit(me, memory_order_relaxed);
    /* the item after the last one this thread ran, and the end of the rows asked for ahead then (an item index):
     * that item starts warm if it lies within them */
    uint64_t next = UINT64_MAX, asked = 0;
    for (;;) {
        const uint64_t f = w >> 32, b = w & 0xffffffffu;
        if (f >= b) {
            if (!steal(r, i)) return;
            w = atomic_load_explicit(me, memory_order_relaxed);
            continue;
        }
        if (!atomic_compare_exchange_weak_explicit(me, &w, run_pack(f + 1, b), memory_order_relaxed,
                                                   memory_order_relaxed))
            continue; /* a thief moved the back: w holds the word now */
        run_one(r, &a, (uint32_t)f, r->item[b - 1].t1, f != next || f >= asked, work);
        next = f + 1, asked = b;
        w = atomic_load_explicit(me, memory_order_relaxed);
    }
}

/* Writes a merged head from acc = sum_c w_c o_c (scaled in place by 1 / L): a non-finite value anywhere in it
 * (from a NaN or inf in the head's inputs) makes the whole head NaN (flashdec.h); a head whose states are all
 * empty (fdec_merge of empty shards only: a decode attends at least one position) is 0 with lse -inf. */
static void finish_row(float *acc, uint32_t D, float M, float L, void *out, fdec_dtype ot, float *lse,
                       fdec_cpu_cvt_out_fn cvt) {
    if (L == 0.0f && M == -INFINITY) {
        for (uint32_t d = 0; d < D; d++) acc[d] = 0.0f;
        cvt(out, acc, D, ot);
        if (lse) *lse = -INFINITY;
        return;
    }
    const float inv = 1.0f / L;
    for (uint32_t d = 0; d < D; d++) acc[d] *= inv;
    int bad = !isfinite(M) || !isfinite(L);
    for (uint32_t d = 0; d < D; d++) bad |= !isfinite(acc[d]);
    if (bad)
        for (uint32_t d = 0; d < D; d++) acc[d] = NAN;
    cvt(out, acc, D, ot);
    if (lse) *lse = bad ? NAN : fdec_state_lse(M, L);
}

/* Merge task i of n: merges the r->nc partial states (state.h) of heads [i H / n, (i + 1) H / n) and writes out
 * (converted) and lse; each head's sums are the same whichever thread does them. The merged row is built in state 0's
 * o, which is not needed afterwards. On the threads of the call, not the caller alone: half the states were written
 * by the other core. */
static void merge_task(void *arg, uint32_t i, uint32_t n) {
    const run_ctx *r = arg;
    const fdec_problem *p = r->p;
    const uint32_t H = rows_of(p), nc = r->nc, h0 = (uint32_t)((uint64_t)i * H / n), h1 = (uint32_t)((uint64_t)(i + 1) * H / n);
    const size_t Dp = fdec_cpu_padded_dim(p->D);
    for (uint32_t h = h0; h < h1; h++) {
        float w[MAX_STATES], L;
        const size_t row = call_row(p, h); /* the token's row of q, out and lse */
        float M = fdec_merge_weights(nc, r->m + h, H, r->l + h, H, w, &L);
        const uint32_t head = (uint32_t)(row % p->H);
        /* the sink's share, once; and an fp8 cache's V scale, on the weights (not on L) */
        const float f = fdec_state_sink(&M, &L, fdec_logit_sink(&p->logits, head)) *
                        fdec_kv_scale_at(&p->scales, head / p->R, 1);
        if (f != 1.0f)
            for (uint32_t c = 0; c < nc; c++) w[c] *= f;
        float *acc = r->o + (size_t)h * Dp;
        for (uint32_t c = 0; c < nc; c++) fdec_state_add(acc, r->o + ((size_t)c * H + h) * Dp, w[c], p->D, c == 0);
        finish_row(acc, p->D, M, L, (char *)r->out + fdec_dtype_bytes(p->ot, row * p->D), p->ot,
                   r->lse ? r->lse + row : NULL, r->c->cvt_out);
    }
}

/* fn(task, i, n) for i < n on the call's threads: the caller's parallel_for or the pool */
static void run_tasks(const cpu_impl *c, fdec_task_fn fn, void *task, uint32_t n) {
    if (n == 1) fn(task, 0, 1);
    else if (c->pfor) c->pfor(c->puser, fn, task, n);
    else fdec_pool_run(c->pool, fn, task, n);
}

/* fdec_merge: the same merge (fdec_merge_weights) over normalised (out, lse) results. Shards of weight 0 (an
 * empty range, lse = -inf) are skipped, not multiplied, so whatever their out holds does not matter; when all
 * are empty the result is out = 0, lse = -inf. */
static fdec_status cpu_merge(void *impl, uint32_t n, uint32_t H, uint32_t D, fdec_dtype t, const void *const *outs,
                             const float *const *lses, void *out, float *lse) {
    cpu_impl *c = impl;
    fdec_status st = ensure_scratch(c, (2 * (size_t)n + D) * sizeof(float));
    if (st) return st;
    float *a = c->scratch, *w = a + n, *acc = w + n, row[FDEC_MAX_HEAD_DIM];
    for (uint32_t h = 0; h < H; h++) {
        for (uint32_t i = 0; i < n; i++) a[i] = lses[i][h];
        float L;
        const float M = fdec_merge_weights(n, a, 1, NULL, 0, w, &L);
        for (uint32_t d = 0; d < D; d++) acc[d] = 0.0f;
        for (uint32_t i = 0; i < n; i++) {
            if (w[i] == 0.0f) continue;
            c->cvt_in(row, (const char *)outs[i] + fdec_dtype_bytes(t, (size_t)h * D), D, t, 1.0f);
            fdec_state_add(acc, row, w[i], D, 0);
        }
        finish_row(acc, D, M, L, (char *)out + fdec_dtype_bytes(t, (size_t)h * D), t, lse ? lse + h : NULL, c->cvt_out);
    }
    return FDEC_OK;
}

static fdec_status cpu_reserve(void *impl, const fdec_problem *p) {
    cpu_impl *c = impl;
    uint32_t most = 0;
    cpu_split(c, p, &most);
    /* a call of n <= most chunks keeps n states, or n + (CUT_PARTS - 1) runs with runs <= min(threads, n)
     * (fdec_work_list), and a copy of q a run */
    const uint32_t runs = c->threads < most ? c->threads : most;
    uint32_t states = most + (CUT_PARTS - 1) * runs;
    return ensure_scratch(c, scratch_layout(p, states < MAX_STATES ? states : MAX_STATES, runs).total);
}

static fdec_status cpu_decode(void *impl, const fdec_problem *p, const void *q, const void *k, const void *v,
                              void *out, float *lse) {
    cpu_impl *c = impl;
    fdec_split s = cpu_split(c, p, NULL);
    fdec_work item[MAX_STATES];
    uint32_t first[MAX_CHUNKS + 1];
    run_word run[MAX_CHUNKS]; /* on this stack: the call returns only when every task has */
    const uint32_t runs = call_runs(c, &s), nc = cpu_work(p, &s, runs, item, first);
    layout L = scratch_layout(p, nc, runs);
    fdec_status st = ensure_scratch(c, L.total);
    if (st) return st;
    char *base = c->scratch;
    fdec_cpu_args a = {p->D,    rows_of(p), p->G,     p->R * p->nq,         p->kv, p->kvt, k, v, NULL, &p->logits,
                       p->qpos, pf_distance(c, p->D), p->nq, p->window,
                       p->logits.variant != FDEC_LOGITS_PLAIN || p->nq > 1};
    run_ctx r = {&a, p, q, (float *)(base + L.q), c, (float *)(base + L.m), (float *)(base + L.l), (float *)(base + L.o),
                 (float *)(base + L.s), runs, run, item, nc, out, lse};
    for (uint32_t i = 0; i < runs; i++) atomic_init(&run[i].w, run_pack(first[i], first[i + 1]));
    run_tasks(c, run_task, &r, runs);
    run_tasks(c, merge_task, &r, runs < a.H ? runs : a.H); /* a one-chunk call has one run: one task */
    return FDEC_OK;
}

/* A batch: its sequences one after another, each as its own call (so that a sequence's bits do not depend on the
 * rest of the batch), with the scratch of the largest reserved first (no allocation, and so no failure, halfway). */
static fdec_status cpu_decode_batch(void *impl, const fdec_batch_problem *bp, const void *q, const void *k,
                                    const void *v, void *out, float *lse) {
    fdec_status st = cpu_reserve(impl, &bp->p);
    if (st) return st;
    const fdec_problem *P = &bp->p;
    const size_t qrow = fdec_dtype_bytes(P->qt, (size_t)P->H * P->D), orow = fdec_dtype_bytes(P->ot, (size_t)P->H * P->D);
    size_t row = 0;
    for (uint32_t i = 0; i < bp->b->num_seqs; i++) {
        fdec_problem p;
        size_t off;
        fdec_batch_seq(bp, i, &p, &off);
        const size_t kvb = fdec_dtype_bytes(p.kvt, off);
        if ((st = cpu_decode(impl, &p, (const char *)q + row * qrow, (const char *)k + kvb, (const char *)v + kvb,
                             (char *)out + row * orow, lse ? lse + row * p.H : NULL)))
            return st;
        row += p.nq;
    }
    return FDEC_OK;
}

/* fdec_kv_write: each token's rows converted element by element through the type table. */
static fdec_status cpu_kv_write(void *impl, const fdec_problem *p, const fdec_kv_slots *s, const void *k_src,
                                const void *v_src, void *k, void *v) {
    (void)impl;
    for (uint32_t i = 0; i < s->num_tokens; i++) {
        if (s->slots[i] < 0) continue;
        const uint64_t slot = (uint64_t)s->slots[i];
        const size_t at = fdec_kv_slot(&p->kv, slot);
        float row[FDEC_MAX_HEAD_DIM];
        for (uint32_t g = 0; g < p->G; g++) /* a head's row at once: a block type quantises whole blocks */
            for (int which = 0; which < 2; which++) {
                const size_t from = ((size_t)i * p->G + g) * p->D;
                for (uint32_t d = 0; d < p->D; d++) row[d] = fdec_load_elem(which ? v_src : k_src, from + d, s->src_dtype);
                fdec_store_row(which ? v : k, at + (size_t)g * p->kv.hs, p->kvt, row, p->D);
            }
    }
    return FDEC_OK;
}

static fdec_status cpu_plan(void *impl, const fdec_problem *p, fdec_plan_info *info) {
    cpu_impl *c = impl;
    fdec_split s = cpu_split(c, p, NULL);
    info->kv_start = s.lo;
    info->kv_end = s.hi;
    const uint32_t runs = call_runs(c, &s), nc = cpu_work(p, &s, runs, NULL, NULL);
    info->num_chunks = nc;
    info->chunk_len = s.chunk_len; /* the longest; the cut ones are shorter (fdec_work_list) */
    info->grouped = 1;
    info->scratch_bytes = scratch_layout(p, nc, runs).total;
    info->path = fdec_cpu_path_name(c->path);
    return FDEC_OK;
}

static void cpu_destroy(void *impl) {
    cpu_impl *c = impl;
    fdec_pool_destroy(c->pool);
    free(c->scratch);
    free(c);
}

/* a batch's sequences are calls of their own: its plan is its largest sequence's (plan_batch NULL) */
static const fdec_backend_ops cpu_ops = {cpu_destroy, cpu_reserve,      cpu_decode, cpu_plan,     NULL,
                                         cpu_merge,   cpu_decode_batch, NULL,       cpu_kv_write, NULL};

float fdec_cpu_f16_table[1 << 16];
static pthread_once_t f16_table_once = PTHREAD_ONCE_INIT;
static void f16_table_fill(void) {
    for (uint32_t h = 0; h < (1u << 16); h++) fdec_cpu_f16_table[h] = fdec_f16_to_f32((uint16_t)h);
}

fdec_status fdec_cpu_create(const fdec_options *o, void **impl, const fdec_backend_ops **ops) {
    pthread_once(&f16_table_once, f16_table_fill);
    fdec_cpu_path path = FDEC_CPU_SCALAR;
    fdec_status st = choose_path(o->cpu_path, &path);
    if (st) return st;
    cpu_impl *c = calloc(1, sizeof *c);
    if (!c) return fdec_set_error(FDEC_ENOMEM, "out of memory creating the CPU backend");
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    c->threads = o->threads ? o->threads : (online > 0 ? (uint32_t)online : 1);
    if (c->threads > 1024)
        return free(c), fdec_set_error(FDEC_EINVAL, "threads (%u) must be at most 1024", o->threads);
    c->path = path;
    path_functions(path, c);
    c->pf_blocks = fdec_cpu_pf_blocks();
    c->pfor = o->parallel_for;
    c->puser = o->parallel_user;
    if (!c->pfor && !(c->pool = fdec_pool_create(c->threads))) {
        uint32_t n = c->threads;
        free(c);
        return fdec_set_error(FDEC_ENOMEM, "could not start %u threads", n);
    }
    *impl = c;
    *ops = &cpu_ops;
    return FDEC_OK;
}

/* bench_util.c — random problems, the reference check, timers and the machine's ceilings (bench_util.h). */
#include "bench_util.h"

#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

uint64_t fd_rand(fd_rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
double fd_uniform(fd_rng *r) { return (double)(fd_rand(r) >> 11) * 0x1.0p-53; }

double fd_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *fd_layout_name(fd_layout l) {
    static const char *n[] = {"dense", "pos-padded", "head-major"};
    return l < FD_NUM_LAYOUTS ? n[l] : "?";
}

static void fill_nan(void *buf, size_t n, fdec_dtype t) {
    /* all-ones is a NaN in every type: f32, f16, bf16, both fp8s, and a block's f16 scale */
    memset(buf, 0xff, fdec_dtype_bytes(t, n));
}

/* x rounded up to a multiple of the K/V type's block (strides of block types) */
static size_t blk_up(size_t x, fdec_dtype t) {
    const size_t b = fdec_dtype_table[t].block;
    return (x + b - 1) / b * b;
}

int fd_problem_make(fd_problem *pr, const fdec_layer *layer, uint32_t seq_len, fd_layout layout, float amp,
                    fd_rng *rng) {
    memset(pr, 0, sizeof *pr);
    pr->layer = *layer;
    pr->seq_len = seq_len;
    pr->layout = layout;
    const size_t D = layer->head_dim, G = layer->num_kv_heads;
    const size_t rows = layer->ring_capacity ? layer->ring_capacity : seq_len;
    switch (layout) {
    case FD_DENSE: pr->layer.kv_pos_stride = pr->layer.kv_head_stride = 0; break;
    case FD_POS_PADDED: /* [pos][head][dim] with padded heads and rows */
        pr->layer.kv_head_stride = blk_up(D + 1 + fd_rand(rng) % 8, layer->kv_dtype);
        pr->layer.kv_pos_stride = blk_up(G * pr->layer.kv_head_stride + fd_rand(rng) % 5, layer->kv_dtype);
        break;
    case FD_HEAD_MAJOR: /* [head][pos][dim], rows padded, room for more rows than used */
        pr->layer.kv_pos_stride = blk_up(D + fd_rand(rng) % 4, layer->kv_dtype);
        pr->layer.kv_head_stride = (rows + fd_rand(rng) % 3) * pr->layer.kv_pos_stride;
        break;
    default: return -1;
    }
    if (fdec_problem_init(&pr->layer, seq_len, &pr->p) != FDEC_OK) return -1;
    const fdec_problem *p = &pr->p;
    fdec_kv_extent(&p->kv, rows, (uint32_t)G, (uint32_t)D, &pr->kv_elems); /* fits: the layer was checked */
    size_t qn = (size_t)p->H * D, kvb = fdec_dtype_bytes(p->kvt, pr->kv_elems);
    pr->q = malloc(qn * fdec_dtype_size(p->qt));
    pr->k = fd_alloc_kv(kvb);
    pr->v = fd_alloc_kv(kvb);
    if (!pr->q || !pr->k || !pr->v) return fd_problem_free(pr), -1;
    for (size_t i = 0; i < qn; i++) fdec_store_elem(pr->q, i, p->qt, (float)(amp * (2 * fd_uniform(rng) - 1)));
    fill_nan(pr->k, pr->kv_elems, p->kvt);
    fill_nan(pr->v, pr->kv_elems, p->kvt);
    float kr[FDEC_MAX_HEAD_DIM], vr[FDEC_MAX_HEAD_DIM];
    for (uint64_t t = p->lo; t < p->seq_len; t++)
        for (size_t g = 0; g < G; g++) { /* a head's row at once: a block type quantises whole blocks */
            size_t base = fdec_kv_offset(&p->kv, 0, t, (uint32_t)g);
            for (size_t d = 0; d < D; d++) {
                kr[d] = (float)(2 * fd_uniform(rng) - 1);
                vr[d] = (float)(2 * fd_uniform(rng) - 1);
            }
            fdec_store_row(pr->k, base, p->kvt, kr, D);
            fdec_store_row(pr->v, base, p->kvt, vr, D);
        }
    return 0;
}

void *fd_alloc_kv(size_t bytes) {
    void *p = NULL;
    const size_t huge = (size_t)2 << 20;
    if (posix_memalign(&p, huge, bytes ? bytes : 1)) return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= huge && getenv("FDEC_BENCH_HUGEPAGES")) madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

void fd_problem_free(fd_problem *pr) {
    free(pr->q);
    free(pr->k);
    free(pr->v);
    free(pr->sinks);
    free(pr->alibi);
    pr->q = pr->k = pr->v = NULL;
    pr->sinks = pr->alibi = NULL;
}

int fd_problem_set_variants(fd_problem *pr, const fd_variants *v, fd_rng *rng) {
    const uint32_t H = pr->layer.num_q_heads;
    free(pr->sinks);
    free(pr->alibi);
    pr->sinks = pr->alibi = NULL;
    pr->layer.softcap = v->softcap;
    if (v->sinks) {
        if (!(pr->sinks = malloc(H * sizeof(float)))) return -1;
        /* the logits are about |q|_1 / sqrt(D) in size at most: sinks from below to well above them */
        const double big = 4.0 + 2.0 * sqrt((double)pr->layer.head_dim);
        for (uint32_t h = 0; h < H; h++) {
            const uint32_t kind = (uint32_t)(fd_rand(rng) % 6);
            pr->sinks[h] = v->sinks == 2 ? v->sink_value
                           : kind == 0   ? -INFINITY
                           : kind == 1   ? (float)(big + 20.0) /* outweighs every position */
                                         : (float)(big * (2 * fd_uniform(rng) - 1));
        }
    }
    if (v->alibi) {
        if (!(pr->alibi = malloc(H * sizeof(float)))) return -1;
        fd_alibi_slopes(pr->alibi, H, v->alibi_scale ? v->alibi_scale : 1.0);
    }
    pr->layer.sinks = pr->sinks;
    pr->layer.alibi_slopes = pr->alibi;
    return fdec_problem_init(&pr->layer, pr->seq_len, &pr->p) == FDEC_OK ? 0 : -1;
}

void fd_alibi_slopes(float *out, uint32_t H, double scale) {
    for (uint32_t h = 0; h < H; h++) out[h] = (float)(scale * pow(2.0, -8.0 * (h + 1) / H));
}

void fd_shuffle(uint32_t *perm, uint32_t n, fd_rng *r) {
    for (uint32_t i = 0; i < n; i++) perm[i] = i;
    for (uint32_t i = n; i > 1; i--) {
        const uint32_t j = (uint32_t)(fd_rand(r) % i), t = perm[i - 1];
        perm[i - 1] = perm[j], perm[j] = t;
    }
}

void fd_random_variants(fd_rng *r, fd_variants *v) {
    memset(v, 0, sizeof *v);
    if (fd_rand(r) % 2) return;
    const uint32_t k = (uint32_t)(fd_rand(r) % 7) + 1; /* a non-empty subset of the three */
    if (k & 1) v->softcap = (float)(0.5 + 30.0 * fd_uniform(r));
    if (k & 2) v->sinks = 1;
    if (k & 4) v->alibi = 1, v->alibi_scale = (float)(0.001 + fd_uniform(r));
}

const char *fd_variants_name(const fdec_layer *L, char *buf, size_t n) {
    snprintf(buf, n, "%s", "");
    if (L->softcap > 0) snprintf(buf + strlen(buf), n - strlen(buf), "softcap %g ", (double)L->softcap);
    if (L->sinks) snprintf(buf + strlen(buf), n - strlen(buf), "sinks ");
    if (L->alibi_slopes) snprintf(buf + strlen(buf), n - strlen(buf), "alibi ");
    if (!*buf) snprintf(buf, n, "plain");
    else buf[strlen(buf) - 1] = 0;
    return buf;
}

void fd_reference(fd_problem *pr, double *out, double *lse) {
    const fdec_problem *p = &pr->p;
    fdec_reference(p, pr->q, pr->k, pr->v, out, lse);
    /* largest |logit|: for the tolerance */
    double mx = 0;
    for (uint32_t h = 0; h < p->H; h++) {
        double qn = 0;
        for (uint32_t d = 0; d < p->D; d++) qn += fabs(fdec_load_elem(pr->q, (size_t)h * p->D + d, p->qt));
        if (qn > mx) mx = qn; /* |K| <= 1, so |q.k| <= sum |q| */
    }
    /* an fp8 cache's scales make K and V that much larger than the values drawn in [-1, 1] */
    double ks = 1, vs = 1;
    for (uint32_t g = 0; g < p->G; g++) {
        ks = fmax(ks, fdec_kv_scale_at(&p->scales, g, 0));
        vs = fmax(vs, fdec_kv_scale_at(&p->scales, g, 1));
    }
    pr->max_logit = mx * fabs(p->logits.scale) * ks;
    /* a soft-cap computes logits of up to its size in f32 (tanh's argument and product), whatever q's size */
    if (p->logits.variant & FDEC_LOGITS_SOFTCAP && p->logits.softcap > pr->max_logit) pr->max_logit = p->logits.softcap;
    pr->v_scale = vs;
}

/* Tolerance, in absolute terms (V is uniform in [-1, 1]):
 *  - the output's own rounding: 2^-11 for f16 and 2^-8 for bf16, twice; f32 accumulation 2e-6;
 *  - a logit of size S computed in f32 carries an error of about S * 2^-24 * sqrt(head_dim) which moves
 *    the weights by that much relatively: 3e-8 * S * sqrt(D) covers it (measured: under a tenth of that). */
double fd_tolerance_of(fdec_dtype out_dtype, uint32_t D, double max_logit) {
    double base = out_dtype == FDEC_F32 ? 2e-6 : out_dtype == FDEC_F16 ? 1.0e-3 : 8.0e-3;
    return base + 3e-8 * max_logit * sqrt((double)D);
}

double fd_lse_tolerance_of(double max_logit) { return 1e-5 + 1e-7 * max_logit; }

double fd_tolerance(const fd_problem *pr) {
    return fd_tolerance_of(pr->p.ot, pr->p.D, pr->max_logit) * (pr->v_scale > 1 ? pr->v_scale : 1);
}

double fd_lse_tolerance(const fd_problem *pr) { return fd_lse_tolerance_of(pr->max_logit); }

double fd_out_error(const fd_problem *pr, const void *out, const double *ref) {
    double e = 0;
    size_t n = (size_t)pr->p.H * pr->p.D;
    for (size_t i = 0; i < n; i++) {
        double x = fdec_load_elem(out, i, pr->p.ot), d = fabs(x - ref[i]);
        if (!(d <= e)) e = isnan(d) ? INFINITY : d; /* NaN or unwritten: fails */
    }
    return e;
}

double fd_lse_error(const fd_problem *pr, const float *lse, const double *ref) {
    double e = 0;
    for (uint32_t h = 0; h < pr->p.H; h++) {
        double d = fabs((double)lse[h] - ref[h]) / (1.0 + fabs(ref[h]));
        if (!(d <= e)) e = isnan(d) ? INFINITY : d;
    }
    return e;
}

double fd_kv_bytes(const fdec_problem *p) {
    return 2.0 * ((double)p->seq_len - p->lo) * p->G * (double)fdec_dtype_bytes(p->kvt, p->D);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
double fd_median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* ---- random configurations (the test sweep and `flashdec verify`) ---- */

static const uint32_t dims[] = {1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 80, 96, 100, 112, 127,
                                128, 129, 160, 192, 255, 256, 257, 320, 384, 511, 512};

static uint32_t rand_range(fd_rng *r, uint32_t lo, uint32_t hi) { return lo + (uint32_t)(fd_rand(r) % (hi - lo + 1)); }

/* Draws a random configuration. Cost (H * D * attended positions) is bounded so the sweep stays fast. */
void fd_random_config(fd_rng *r, fdec_layer *L, uint32_t *seq_len, fd_layout *layout) {
    memset(L, 0, sizeof *L);
    L->head_dim = dims[fd_rand(r) % (sizeof dims / sizeof dims[0])];
    uint32_t R = rand_range(r, 1, 16), G = rand_range(r, 1, fd_rand(r) % 3 ? 4 : 8);
    L->num_kv_heads = G;
    L->num_q_heads = G * R;
    L->q_dtype = (fdec_dtype)(fd_rand(r) % 3);
    L->kv_dtype = (fdec_dtype)(fd_rand(r) % 3);
    L->out_dtype = (fdec_dtype)(fd_rand(r) % 3);
    uint32_t sc = (uint32_t)(fd_rand(r) % 10);
    L->scale = sc < 5 ? 0.0f : sc < 7 ? 1.0f : (float)(0.01 + 0.5 * fd_uniform(r));
    /* attended length: log-uniform up to 40000, capped by cost */
    double budget = 3e6 / ((double)L->num_q_heads * L->head_dim);
    uint32_t n = (uint32_t)exp(fd_uniform(r) * log(40000.0));
    if (n < 1) n = 1;
    if (n > budget) n = (uint32_t)budget + 1;
    uint32_t kind = (uint32_t)(fd_rand(r) % 10);
    if (kind < 4) { /* full attention */
        *seq_len = n;
    } else if (kind < 7) { /* window below, at or above seq_len */
        L->window = n;
        uint32_t w = (uint32_t)(fd_rand(r) % 3);
        *seq_len = w == 0 ? n + rand_range(r, 1, 3 * n) : w == 1 ? n : (n > 1 ? rand_range(r, 1, n - 1) : 1);
    } else { /* ring: wrapped many times, or only partly filled */
        L->window = n;
        L->ring_capacity = n + (fd_rand(r) % 2 ? 0 : rand_range(r, 1, n));
        uint32_t w = (uint32_t)(fd_rand(r) % 4);
        *seq_len = w == 0 ? rand_range(r, 1, L->ring_capacity)
                 : w == 1 ? L->ring_capacity * rand_range(r, 2, 50) + rand_range(r, 0, L->ring_capacity)
                 : w == 2 ? 4000000000u - rand_range(r, 0, 1000000)
                          : rand_range(r, n, 1000000);
    }
    *layout = (fd_layout)(fd_rand(r) % FD_NUM_LAYOUTS);
    if (fd_rand(r) % 4 == 0) { /* a quantised cache: fp8 (with scales now and then) or a block type */
        L->kv_dtype = (fdec_dtype)(FDEC_F8_E4M3 + fd_rand(r) % 4);
        if (fdec_dtype_table[L->kv_dtype].block > 1) {
            const uint32_t b = fdec_dtype_table[L->kv_dtype].block;
            L->head_dim = (L->head_dim + b - 1) / b * b;
        } else if (fd_rand(r) % 2) {
            L->k_scale = (float)(0.25 + 4 * fd_uniform(r));
            L->v_scale = fd_rand(r) % 3 ? (float)(0.25 + 4 * fd_uniform(r)) : 0.0f;
        }
    }
}

/* ---- ceilings ---- */

typedef struct {
    const uint64_t *buf;
    size_t n;
    uint64_t sink;
    pthread_barrier_t *bar;
    int reps;
} bw_arg;

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 12)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t o[4];
    _mm256_storeu_si256((__m256i *)o, a0);
    return o[0] + o[1] + o[2] + o[3];
}
#endif

static uint64_t sum_plain(const uint64_t *p, size_t n) {
    uint64_t a[8] = {0};
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) a[j] += p[i + j];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

static uint64_t sum_slice(const uint64_t *p, size_t n) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) return sum_avx2(p, n);
#endif
    return sum_plain(p, n);
}

/* Every thread reads its slice, reps times, between barriers; thread 0 times each round. */
static void *bw_thread(void *x) {
    bw_arg *a = x;
    for (int r = 0; r < a->reps; r++) {
        pthread_barrier_wait(a->bar);
        a->sink += sum_slice(a->buf, a->n);
        pthread_barrier_wait(a->bar);
    }
    return NULL;
}

/* The buffer is kept between calls (allocating and touching 1 GiB costs more than reading it), so that a
 * benchmark can measure the ceiling again right before each case. */
static uint64_t *bw_buf;
static size_t bw_cap;

double fd_read_bandwidth(size_t bytes, uint32_t threads) {
    if (threads < 1) threads = 1;
    if (bytes > bw_cap) {
        free(bw_buf);
        bw_buf = NULL, bw_cap = 0;
        if (posix_memalign((void **)&bw_buf, 64, bytes)) return 0;
        for (size_t i = 0; i < bytes / 8; i++) bw_buf[i] = i * 2654435761u; /* touch every page, not zeros */
        bw_cap = bytes;
    }
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, threads);
    bw_arg *a = calloc(threads, sizeof *a);
    pthread_t *th = calloc(threads, sizeof *th);
    const size_t per = bytes / 8 / threads / 16 * 16;
    enum { REPS = 5 };
    for (uint32_t i = 0; i < threads; i++) {
        a[i] = (bw_arg){bw_buf + i * per, per, 0, &bar, REPS};
        if (i) pthread_create(&th[i], NULL, bw_thread, &a[i]);
    }
    double times[REPS];
    for (int r = 0; r < REPS; r++) { /* a round: first start to last finish */
        pthread_barrier_wait(&bar);
        double t0 = fd_now();
        a[0].sink += sum_slice(a[0].buf, per);
        pthread_barrier_wait(&bar);
        times[r] = fd_now() - t0;
    }
    for (uint32_t i = 1; i < threads; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    volatile uint64_t sink = 0;
    for (uint32_t i = 0; i < threads; i++) sink += a[i].sink;
    (void)sink;
    free(a);
    free(th);
    return (double)per * 8 * threads / fd_median(times, REPS) / 1e9;
}

typedef struct {
    double gflops;
} fma_arg;

#if defined(__x86_64__)
/* iters rounds of 12 independent chains of FMAs on vectors of type VT (W floats), compiled for `isa`. Two widths:
 * 512 bits where the CPU has AVX-512 (the CPU kernel's widest path), 256 with AVX2. On Intel server cores, with two
 * 512-bit FMA units, the 512-bit loop does twice the flops of the 256-bit one (Xeon, 2026-12: 165 against 85
 * GFLOP/s a thread); on AMD Zen 4, which splits a 512-bit FMA in two, both give the same figure. */
#define FMA_LOOP(name, isa, VT, W, SET1, FMADD)                                                                    \
    __attribute__((target(isa))) static double name(long iters) {                                              \
        VT acc[12], x = SET1(0.999999f), y = SET1(1e-7f);                                                      \
        for (int i = 0; i < 12; i++) acc[i] = SET1((float)i);                                                  \
        double t0 = fd_now();                                                                                  \
        for (long it = 0; it < iters; it++) {                                                                  \
            _Pragma("GCC unroll 12") /* the chains in registers at any -O level */                             \
            for (int i = 0; i < 12; i++) acc[i] = FMADD(acc[i], x, y);                                         \
        }                                                                                                      \
        double t = fd_now() - t0;                                                                              \
        VT tot = acc[0]; /* the chains' sum kept live, in registers (GCC/Clang vector arithmetic) */            \
        for (int i = 1; i < 12; i++) tot += acc[i];                                                            \
        volatile float sink = tot[0];                                                                          \
        (void)sink;                                                                                            \
        return (double)iters * 12 * (W) * 2 / t / 1e9;                                                         \
    }
FMA_LOOP(fma_loop256, "avx2,fma", __m256, 8, _mm256_set1_ps, _mm256_fmadd_ps)
FMA_LOOP(fma_loop512, "avx512f", __m512, 16, _mm512_set1_ps, _mm512_fmadd_ps)
#undef FMA_LOOP
#endif

int fd_fma_width(void) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) return 512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 256;
#endif
    return 0;
}

static void *fma_thread(void *x) {
    fma_arg *a = x;
    a->gflops = 0;
#if defined(__x86_64__)
    const int w = fd_fma_width();
    if (w) {
        double (*loop)(long) = w == 512 ? fma_loop512 : fma_loop256;
        loop(2000000); /* warm up the clocks */
        a->gflops = loop(20000000);
    }
#endif
    return NULL;
}

/* The best of FD_FMA_TRIALS (bench_util.h) runs of `threads` threads at once: a peak is what the machine can do, and on
 * a shared host one run can read low (194 GFLOP/s against 229-232 in the runs before it, which would put the Gemma 4
 * full layer at 96% of its FMA floor instead of ~80%). */
double fd_fma_peak(uint32_t threads) {
    if (threads < 1) threads = 1;
    fma_arg *a = calloc(threads, sizeof *a);
    pthread_t *th = calloc(threads, sizeof *th);
    double best = 0;
    for (int trial = 0; trial < FD_FMA_TRIALS && a && th; trial++) {
        for (uint32_t i = 1; i < threads; i++) pthread_create(&th[i], NULL, fma_thread, &a[i]);
        fma_thread(&a[0]);
        double tot = a[0].gflops;
        for (uint32_t i = 1; i < threads; i++) {
            pthread_join(th[i], NULL);
            tot += a[i].gflops;
        }
        if (tot > best) best = tot;
    }
    free(a);
    free(th);
    return best;
}

size_t fd_l3_bytes(void) {
    static size_t known; /* read once: the bench asks before every case */
    if (known) return known;
    size_t best = 0;
    char path[96];
    for (int i = 0; i < 8; i++) { /* the largest cache cpu0 reports */
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        unsigned long v = 0;
        char unit = 0;
        if (fscanf(f, "%lu%c", &v, &unit) >= 1) {
            size_t b = v;
            if (unit == 'K') b <<= 10;
            else if (unit == 'M') b <<= 20;
            if (b > best) best = b;
        }
        fclose(f);
    }
    return known = best;
}

/* ---- random batches (the tests and `flashdec verify`) ---- */

void fd_batch_free(fd_batch_case *c) {
    free(c->seq_lens), free(c->q_lens), free(c->table), free(c->k), free(c->v), free(c->q), free(c->sinks),
        free(c->alibi);
    memset(c, 0, sizeof *c);
}

/* The element offset of position t, KV head g, of sequence i, by the test's own arithmetic. */
static size_t batch_where(const fd_batch_case *c, uint32_t i, uint64_t t, uint32_t g) {
    const size_t ps = c->L.kv_pos_stride, hs = c->L.kv_head_stride;
    if (c->b.page_size) {
        const uint32_t P = c->b.page_size;
        const int32_t page = c->table[(size_t)i * c->b.max_pages + t / P];
        const size_t pstride = c->b.kv_page_stride ? c->b.kv_page_stride : (size_t)P * ps;
        return (size_t)page * pstride + (size_t)(t % P) * ps + (size_t)g * hs;
    }
    const uint64_t row = c->L.ring_capacity ? t % c->L.ring_capacity : t;
    return (size_t)i * c->b.kv_seq_stride + (size_t)row * ps + (size_t)g * hs;
}

/* A random batch: B sequences, paged (page size P) or contiguous (with a ring when ring), head-major pages or not. */
int fd_batch_make(fd_batch_case *c, fd_rng *r, uint32_t B, uint32_t P, int head_major, int ring, int tokens,
                      int variants) {
    memset(c, 0, sizeof *c);
    static const uint32_t bdims[] = {1, 7, 32, 64, 100, 128, 256, 512};
    uint32_t D = bdims[fd_rand(r) % 8];
    /* up to 8 query heads a KV head: with several tokens, up to 128 rows of a sequence (the CUDA kernel's tiles) */
    const uint32_t G = 1 + (uint32_t)(fd_rand(r) % 3), R = 1 + (uint32_t)(fd_rand(r) % 8);
    fdec_layer *L = &c->L;
    L->q_dtype = (fdec_dtype)(fd_rand(r) % 3), L->kv_dtype = (fdec_dtype)(fd_rand(r) % 3);
    L->out_dtype = (fdec_dtype)(fd_rand(r) % 3);
    if (fd_rand(r) % 3 == 0) { /* a quantised cache: fp8 (with scales now and then) or a block type */
        const fdec_dtype t = (fdec_dtype)(FDEC_F8_E4M3 + fd_rand(r) % 4);
        L->kv_dtype = t;
        if (fdec_dtype_is_fp8(t) && fd_rand(r) % 2)
            L->k_scale = (float)(0.25 + 4 * fd_uniform(r)), L->v_scale = (float)(0.25 + 4 * fd_uniform(r));
    }
    const fdec_dtype T = L->kv_dtype; /* every size and stride below in whole blocks of a block type */
    D = (uint32_t)blk_up(D, T);
    L->head_dim = D, L->num_kv_heads = G, L->num_q_heads = G * R;
    const uint32_t maxlen = 1 + (uint32_t)(fd_rand(r) % 600);
    L->window = fd_rand(r) % 3 == 0 ? 1 + (uint32_t)(fd_rand(r) % maxlen) : 0;
    if (ring && !P) {
        if (!L->window) L->window = 1 + (uint32_t)(fd_rand(r) % maxlen);
        L->ring_capacity = L->window + FDEC_MAX_Q_LEN + (uint32_t)(fd_rand(r) % 8);
    }
    fdec_batch *b = &c->b;
    b->num_seqs = B;
    b->max_seq_len = maxlen;
    b->max_q_len = tokens ? 1 + (uint32_t)(fd_rand(r) % FDEC_MAX_Q_LEN) : 1;
    c->seq_lens = malloc(B * sizeof(uint32_t));
    c->q_lens = malloc(B * sizeof(uint32_t));
    for (uint32_t i = 0; i < B; i++) {
        const uint32_t kind = (uint32_t)(fd_rand(r) % 8);
        uint32_t n = kind == 0 ? 1 : kind == 1 ? maxlen : 1 + (uint32_t)(fd_rand(r) % maxlen);
        if (L->ring_capacity && n > L->ring_capacity && fd_rand(r) % 2) n = maxlen; /* wrapped */
        c->seq_lens[i] = n;
        const uint32_t mq = b->max_q_len < n ? b->max_q_len : n;
        c->q_lens[i] = fd_rand(r) % 4 == 0 ? mq : 1 + (uint32_t)(fd_rand(r) % mq); /* q_len = seq_len too */
        c->rows += c->q_lens[i];
    }
    b->seq_lens = c->seq_lens;
    b->q_lens = tokens ? c->q_lens : NULL;
    if (!tokens)
        for (uint32_t i = 0; i < B; i++) c->q_lens[i] = 1;
    if (!tokens) c->rows = B;
    if (P) {
        b->page_size = P;
        b->max_pages = (maxlen + P - 1) / P + (uint32_t)(fd_rand(r) % 3);
        /* pages: each sequence's own, shuffled in the pool, and the first pages of sequence 1 those of sequence 0 (a
         * shared prefix) */
        uint32_t need = 0;
        for (uint32_t i = 0; i < B; i++) need += (c->seq_lens[i] + P - 1) / P;
        b->num_pages = need + 1 + (uint32_t)(fd_rand(r) % 4);
        uint32_t *perm = malloc(b->num_pages * sizeof *perm);
        fd_shuffle(perm, b->num_pages, r);
        c->table = malloc((size_t)B * b->max_pages * sizeof(int32_t));
        uint32_t next = 0;
        for (uint32_t i = 0; i < B; i++) {
            fdec_problem s;
            memset(&s, 0, sizeof s);
            s.qpos = c->seq_lens[i] - 1, s.nq = c->q_lens[i], s.window = L->window;
            const uint64_t lo = fdec_token_lo(&s, 0);
            for (uint32_t pg = 0; pg < b->max_pages; pg++) {
                int32_t *e = &c->table[(size_t)i * b->max_pages + pg];
                if ((uint64_t)pg * P >= c->seq_lens[i]) *e = fd_rand(r) % 2 ? -1 : 12345678; /* past the end */
                else if ((uint64_t)(pg + 1) * P <= lo) *e = -1;                             /* below the window */
                else if (i == 1 && pg < 2 && (uint64_t)pg * P < c->seq_lens[0] && c->table[pg] >= 0)
                    *e = c->table[pg]; /* shared with sequence 0 */
                else *e = (int32_t)perm[next++];
            }
        }
        free(perm);
        if (head_major) { /* [page][kv_head][slot][dim] */
            L->kv_pos_stride = blk_up(D + (uint32_t)(fd_rand(r) % 3), T);
            L->kv_head_stride = blk_up((size_t)P * L->kv_pos_stride + (uint32_t)(fd_rand(r) % 5), T);
            b->kv_page_stride = G * L->kv_head_stride;
        } else { /* [page][slot][kv_head][dim] */
            L->kv_head_stride = blk_up(D + (uint32_t)(fd_rand(r) % 3), T);
            L->kv_pos_stride = blk_up(G * L->kv_head_stride + (uint32_t)(fd_rand(r) % 3), T);
            b->kv_page_stride = fd_rand(r) % 2 ? 0 : blk_up((size_t)P * L->kv_pos_stride + 8, T);
        }
        const size_t pstride = b->kv_page_stride ? b->kv_page_stride : (size_t)P * L->kv_pos_stride;
        c->kv_elems = (size_t)b->num_pages * pstride + (size_t)G * L->kv_head_stride;
        b->page_table = c->table;
    } else {
        L->kv_head_stride = D, L->kv_pos_stride = (size_t)G * D;
        const size_t rows = L->ring_capacity ? L->ring_capacity : maxlen;
        b->kv_seq_stride = blk_up(rows * L->kv_pos_stride + (fd_rand(r) % 2 ? 0 : 16), T);
        c->kv_elems = (size_t)B * b->kv_seq_stride;
    }
    const size_t kvb = fdec_dtype_bytes(T, c->kv_elems);
    c->k = malloc(kvb), c->v = malloc(kvb);
    /* NaN where a type has it (a block type: scale 0xffff, an f16 NaN): a row read that should not be shows */
    memset(c->k, 0xff, kvb);
    memset(c->v, 0xff, kvb);
    float *rk = malloc(D * sizeof(float)), *rv_ = malloc(D * sizeof(float));
    for (uint32_t i = 0; i < B; i++) { /* every attended row of every sequence (a shared page twice: same values) */
        fdec_problem s;
        memset(&s, 0, sizeof s);
        s.qpos = c->seq_lens[i] - 1, s.nq = c->q_lens[i], s.window = L->window;
        for (uint64_t t = fdec_token_lo(&s, 0); t < c->seq_lens[i]; t++)
            for (uint32_t g = 0; g < G; g++) {
                const size_t at = batch_where(c, i, t, g);
                for (uint32_t d = 0; d < D; d++) {
                    /* a shared page holds the same positions in both sequences: the value a function of them */
                    fd_rng rv = {(t * 131 + g) * 977 + d + (P && i == 1 && t < 2 * P ? 0 : (uint64_t)i << 40)};
                    rk[d] = (float)(2 * fd_uniform(&rv) - 1), rv_[d] = (float)(2 * fd_uniform(&rv) - 1);
                }
                fdec_store_row(c->k, at, T, rk, D);
                fdec_store_row(c->v, at, T, rv_, D);
            }
    }
    free(rk), free(rv_);
    const size_t qn = c->rows * L->num_q_heads * D;
    c->q = malloc(qn * fdec_dtype_size(L->q_dtype));
    for (size_t i = 0; i < qn; i++) fdec_store_elem(c->q, i, L->q_dtype, (float)(2 * fd_uniform(r) - 1));
    if (variants && fd_rand(r) % 2) {
        L->softcap = fd_rand(r) % 2 ? (float)(1 + 10 * fd_uniform(r)) : 0;
        c->sinks = malloc(L->num_q_heads * sizeof(float)), c->alibi = malloc(L->num_q_heads * sizeof(float));
        for (uint32_t h = 0; h < L->num_q_heads; h++)
            c->sinks[h] = (float)(4 * fd_uniform(r) - 2), c->alibi[h] = (float)(0.05 * fd_uniform(r));
        L->sinks = fd_rand(r) % 2 ? c->sinks : NULL;
        L->alibi_slopes = fd_rand(r) % 2 ? c->alibi : NULL;
    }
    return 0;
}

/* The reference of sequence i into out / lse (its rows): its attended rows gathered into a dense cache by where(),
 * then the float64 reference with the sequence's tokens. Returns the tolerance. */
double fd_batch_reference(const fd_batch_case *c, uint32_t i, size_t row0, double *out, double *lse) {
    const fdec_layer *L = &c->L;
    const uint32_t D = L->head_dim, G = L->num_kv_heads, n = c->seq_lens[i];
    fdec_layer dense = *L;
    dense.kv_pos_stride = dense.kv_head_stride = 0, dense.ring_capacity = 0, dense.window = L->window;
    fdec_problem p;
    if (fdec_problem_init(&dense, n, &p)) return -1;
    p.nq = c->q_lens[i];
    p.lo = (uint32_t)fdec_token_lo(&p, 0);
    const fdec_dtype T = L->kv_dtype;
    const size_t rowb = fdec_dtype_bytes(T, D); /* offsets below are whole blocks of a block type */
    char *k = malloc((size_t)n * G * rowb), *v = malloc((size_t)n * G * rowb);
    for (uint64_t t = p.lo; t < n; t++)
        for (uint32_t g = 0; g < G; g++) {
            memcpy(k + (t * G + g) * rowb, (const char *)c->k + fdec_dtype_bytes(T, batch_where(c, i, t, g)), rowb);
            memcpy(v + (t * G + g) * rowb, (const char *)c->v + fdec_dtype_bytes(T, batch_where(c, i, t, g)), rowb);
        }
    const size_t qrow = (size_t)L->num_q_heads * D * fdec_dtype_size(L->q_dtype);
    const char *q = (const char *)c->q + row0 * qrow;
    fdec_reference(&p, q, k, v, out, lse);
    double mx = 0;
    for (size_t h = 0; h < (size_t)p.nq * p.H; h++) {
        double qn = 0;
        for (uint32_t d = 0; d < D; d++) qn += fabs(fdec_load_elem(q, h * D + d, L->q_dtype));
        if (qn > mx) mx = qn;
    }
    free(k), free(v);
    double vs = 1; /* an fp8 cache's V scale scales the output and its error (as fd_tolerance) */
    for (uint32_t g = 0; g < G; g++) vs = fmax(vs, fdec_kv_scale_at(&p.scales, g, 1));
    return (fd_tolerance_of(L->out_dtype, D, mx * fabs(p.logits.scale)) + (L->alibi_slopes || L->softcap ? 1e-6 : 0)) * vs;
}

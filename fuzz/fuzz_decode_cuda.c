/* fuzz_decode_cuda.c — fdec_decode and fdec_plan on the CUDA backend, fed the same arbitrary layers, seq_lens,
 * strides and buffers as fuzz_decode.c, each call checked against the CPU backend's on the same inputs
 * (make fuzz-cuda).
 *
 * The device buffers are allocated exactly as large as the contract says for the layer as given, so that under
 * compute-sanitizer memcheck a read or write past one is reported. For every input:
 *   - the CUDA and the CPU backend accept or refuse the layer alike (FDEC_ENOMEM aside), and fdec_plan agrees;
 *   - a refused call leaves the device's out and lse as they were (poisoned) and says why;
 *   - an accepted call leaves no CUDA error behind, and on finite inputs its out and lse match the CPU's within
 *     the tests' tolerance for the logit size (tools/bench_util.c: fd_tolerance), doubled for two backends' errors,
 *     which an element left unwritten (the poison, ~1.5e16) never meets.
 * Any failure aborts with a line that says what, as libFuzzer expects.
 *
 * Two builds of this file (make fuzz-cuda): with -fsanitize=fuzzer, a libFuzzer target; with -DFDEC_FUZZ_DRIVER, a
 * plain program that runs the files named on its command line, then random inputs for -seconds S (default 30) from
 * -seed N, so that it can run under compute-sanitizer; -max-kv N, before the files, lets a case reach N K elements
 * (default 2^18), for long hand-made inputs; -simt (the SIMT kernel for every shape) and -min-chunk N (chunks of N
 * positions), before the files, check a kernel or split the library would not pick there. It ends with the worst error of the compared elements, as a share of
 * the tolerance. Without a CUDA device both print a line and exit 0.
 * -DFDEC_FUZZ_HOST rehearses the checks without a GPU (below).
 */
#include "flashdec.h"
#include "../src/internal.h" /* fdec_load_elem */
#include "../tools/bench_util.h" /* fd_tolerance_of, fd_lse_tolerance_of */
#include "fuzz_input.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FDEC_FUZZ_HOST
/* A rehearsal of the harness on a machine without a GPU: "device" memory is host memory and the two "CUDA" contexts
 * are CPU contexts on other paths (2 threads AVX2, 1 thread scalar), so that the checks themselves can be tried
 * here. */
typedef int cudaError_t;
typedef void *cudaStream_t;
enum { cudaSuccess = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaStreamNonBlocking = 1 };
static cudaError_t cudaGetDeviceCount(int *n) { return *n = 1, 0; }
static cudaError_t cudaGetLastError(void) { return 0; }
static const char *cudaGetErrorString(cudaError_t e) { return e ? "error" : "no error"; }
static cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, int f) { return (void)f, *s = NULL, 0; }
static cudaError_t cudaMalloc(void **p, size_t n) { return (*p = malloc(n)) ? 0 : 2; }
static cudaError_t cudaFree(void *p) { return free(p), 0; }
static cudaError_t cudaMemcpy(void *d, const void *s, size_t n, int k) { return (void)k, memcpy(d, s, n), 0; }
static cudaError_t cudaMemset(void *p, int b, size_t n) { return memset(p, b, n), 0; }
static cudaError_t cudaDeviceSynchronize(void) { return 0; }
#define FDEC_BACKEND_CUDA FDEC_BACKEND_CPU
#else
#include <cuda_runtime_api.h>
#endif

static fdec_context *gpu, *gpu2, *cpu;
static int no_device;
static long n_refused, n_accepted, n_compared; /* inputs that got this far, for the driver's summary */
static double worst;                           /* the largest |GPU - CPU| / tolerance of a compared element */

#define FAIL(...) (fprintf(stderr, "fuzz_decode_cuda: " __VA_ARGS__), fputc('\n', stderr), abort())
#define CK(call)                                                                                                \
    do {                                                                                                        \
        cudaError_t e_ = (call);                                                                                \
        if (e_ != cudaSuccess) FAIL("%s: %s", #call, cudaGetErrorString(e_));                                   \
    } while (0)

/* The driver's -simt and -min-chunk N (before the files): the SIMT kernel alone, or chunks of N positions. */
static fdec_test_options topts;

static void setup(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        no_device = 1;
        return;
    }
    fdec_options o = fdec_default_options();
#ifdef FDEC_FUZZ_HOST
    o.threads = 2;
    o.cpu_path = FDEC_CPU_AVX2;
    if (fdec_context_create_test(FDEC_BACKEND_CUDA, &o, &topts, &gpu)) FAIL("CUDA context: %s", fdec_last_error());
    o.threads = 1;
    o.cpu_path = FDEC_CPU_SCALAR;
#else
    if (fdec_context_create_test(FDEC_BACKEND_CUDA, &o, &topts, &gpu)) FAIL("CUDA context: %s", fdec_last_error());
#endif
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    o.cuda_stream = s; /* the second context works on a stream of its own */
    if (fdec_context_create_test(FDEC_BACKEND_CUDA, &o, &topts, &gpu2)) FAIL("CUDA context 2: %s", fdec_last_error());
    o = fdec_default_options();
    o.threads = 1;
    if (fdec_context_create(FDEC_BACKEND_CPU, &o, &cpu)) FAIL("CPU context: %s", fdec_last_error());
}

/* A bound on the largest |logit| (fd_tolerance takes the largest itself, from the reference): max over heads of
 * |scale| * sum_d |q| * max |K|. */
static double logit_size(const fuzz_case *c, const uint8_t *q, const uint8_t *k) {
    const fdec_layer *L = &c->L;
    double kmax = 0, mx = 0;
    for (size_t i = 0; i < c->kv_elems; i++) kmax = fmax(kmax, fabs(fdec_load_elem(k, i, L->kv_dtype)));
    for (size_t h = 0; h < L->num_q_heads; h++) {
        double s = 0;
        for (size_t d = 0; d < L->head_dim; d++) s += fabs(fdec_load_elem(q, h * L->head_dim + d, L->q_dtype));
        mx = fmax(mx, s);
    }
    const double scale = L->scale != 0 ? fabs((double)L->scale) : 1 / sqrt((double)L->head_dim);
    return mx * kmax * scale;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!gpu && !no_device) setup();
    if (no_device) return 0;
    reader r = {data, size};
    fuzz_case c;
    if (!fuzz_case_read(&r, &c)) return 0;
    if (c.L.kv_dtype == FDEC_F8_E4M3 || c.L.kv_dtype == FDEC_F8_E5M2) return 0; /* not on the CUDA backend yet */
    const fdec_layer L = c.L;
    const size_t H = L.num_q_heads ? L.num_q_heads : 1, qb = c.qe * c.qes, kvb = c.kv_elems * c.kes,
                 ob = c.qe * c.oes, lb = H * sizeof(float);
    uint8_t *q = malloc(qb), *k = malloc(kvb), *v = malloc(kvb), *out = malloc(ob), *cout = malloc(ob);
    float *lse = malloc(lb), *clse = malloc(lb);
    fuzz_fill_inputs(&r, &c, q, k, v);
    const int want_lse = take(&r, 1) & 1;
    void *dq, *dk, *dv, *dout, *dlse;
    CK(cudaMalloc(&dq, qb));
    CK(cudaMalloc(&dk, kvb));
    CK(cudaMalloc(&dv, kvb));
    CK(cudaMalloc(&dout, ob));
    CK(cudaMalloc(&dlse, lb));
    CK(cudaMemcpy(dq, q, qb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dk, k, kvb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv, v, kvb, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0x5a, ob));
    CK(cudaMemset(dlse, 0x5a, lb));
    CK(cudaDeviceSynchronize()); /* the copies and poison are on the legacy stream, which gpu2's does not wait for */

    fdec_context *ctx = c.second ? gpu2 : gpu;
    const fdec_status st = fdec_decode(ctx, &L, c.seq_len, dq, dk, dv, dout, want_lse ? dlse : NULL);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st == FDEC_OK ? "" : fdec_last_error());
    CK(cudaDeviceSynchronize()); /* a kernel that faulted leaves its error here */
    CK(cudaGetLastError());
    CK(cudaMemcpy(out, dout, ob, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse, dlse, lb, cudaMemcpyDeviceToHost));
    memset(cout, 0x5a, ob);
    const fdec_status cst = fdec_decode(cpu, &L, c.seq_len, q, k, v, cout, want_lse ? clse : NULL);
    char cmsg[512];
    snprintf(cmsg, sizeof cmsg, "%s", cst == FDEC_OK ? "" : fdec_last_error());
    if (c.must_refuse && (st == FDEC_OK || cst == FDEC_OK)) FAIL("a cache past the address space was accepted");
    fdec_plan_info info;
    const fdec_status sp = fdec_plan(ctx, &L, c.seq_len, &info);

    char layer_desc[256];
    snprintf(layer_desc, sizeof layer_desc,
             "D=%u H=%u G=%u seq_len=%u window=%u ring=%u q/kv/out %d/%d/%d strides %zu/%zu",
             L.head_dim, L.num_q_heads, L.num_kv_heads, c.seq_len, L.window, L.ring_capacity, (int)L.q_dtype,
             (int)L.kv_dtype, (int)L.out_dtype, L.kv_pos_stride, L.kv_head_stride);
    if (st != FDEC_ENOMEM && cst != FDEC_ENOMEM && (st == FDEC_OK) != (cst == FDEC_OK))
        FAIL("%s: CUDA status %d (%s), CPU status %d (%s)", layer_desc, st, msg, cst, cmsg);
    if ((sp == FDEC_OK) != (st == FDEC_OK || st == FDEC_ENOMEM))
        FAIL("%s: fdec_plan %d against fdec_decode %d", layer_desc, sp, st);
    if (st != FDEC_OK) {
        for (size_t i = 0; i < ob; i++)
            if (out[i] != 0x5a) FAIL("%s: refused (%s) but wrote out", layer_desc, msg);
        for (size_t i = 0; i < lb; i++)
            if (((uint8_t *)lse)[i] != 0x5a) FAIL("%s: refused (%s) but wrote lse", layer_desc, msg);
        if (!msg[0]) FAIL("%s: refused with no message", layer_desc);
        n_refused++;
    } else if (n_accepted++, c.finite && cst == FDEC_OK && fabsf(L.scale) <= 1e3f) { /* larger: a logit may overflow */
        n_compared++;
        /* V's largest element bounds out; the tolerance of tools/bench_util.c relative to it, twice */
        double vmax = 0;
        for (size_t i = 0; i < c.kv_elems; i++) vmax = fmax(vmax, fabs(fdec_load_elem(v, i, L.kv_dtype)));
        const double S = logit_size(&c, q, k);
        const double tol = 2 * fd_tolerance_of(L.out_dtype, L.head_dim, S) * fmax(vmax, 1e-30) + 1e-30;
        for (size_t i = 0; i < (size_t)L.num_q_heads * L.head_dim; i++) {
            const double a = fdec_load_elem(out, i, L.out_dtype), b = fdec_load_elem(cout, i, L.out_dtype);
            if (!(fabs(a - b) <= tol) && !(isnan(a) && isnan(b))) {
                /* which of the two is off: the float64 reference (src/ref.c) */
                fdec_problem pr;
                double *ref = malloc(sizeof(double) * L.num_q_heads * L.head_dim);
                const int have_ref = ref && fdec_problem_init(&L, c.seq_len, &pr) == FDEC_OK;
                if (have_ref) fdec_reference(&pr, q, k, v, ref, NULL);
                FAIL("%s: out[%zu] = %.9g on the GPU, %.9g on the CPU, %.9g in float64 (tolerance %.3g)", layer_desc,
                     i, a, b, have_ref ? ref[i] : NAN, tol);
            }
            if (fabs(a - b) / tol > worst) worst = fabs(a - b) / tol;
        }
        if (want_lse)
            for (size_t h = 0; h < L.num_q_heads; h++)
                if (!(fabs((double)lse[h] - clse[h]) <= 2 * (1 + fabs((double)clse[h])) * fd_lse_tolerance_of(S)) &&
                    !(isnan(lse[h]) && isnan(clse[h])))
                    FAIL("%s: lse[%zu] = %.9g on the GPU, %.9g on the CPU", layer_desc, h, lse[h], clse[h]);
    }
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(dlse);
    free(q), free(k), free(v), free(out), free(cout), free(lse), free(clse);
    return 0;
}

#ifdef FDEC_FUZZ_DRIVER
#include <time.h>

static uint64_t xorshift(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
    double seconds = 30;
    uint64_t seed = 1;
    long files = 0, runs = 0;
    static uint8_t seeds[64][256]; /* the files' first 256 bytes: half the random inputs are one of them, mutated */
    static size_t seed_len[64];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
            continue;
        }
        if (!strcmp(argv[i], "-seed") && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
            continue;
        }
        if (!strcmp(argv[i], "-simt")) { /* before the files */
            topts.cuda_simt_only = 1;
            continue;
        }
        if (!strcmp(argv[i], "-min-chunk") && i + 1 < argc) {
            topts.cuda_min_chunk = (uint32_t)strtoul(argv[++i], NULL, 10);
            continue;
        }
        if (!strcmp(argv[i], "-max-kv") && i + 1 < argc) { /* before the files it applies to */
            fuzz_max_kv = strtoull(argv[++i], NULL, 10);
            continue;
        }
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "fuzz_decode_cuda: cannot open %s\n", argv[i]);
            return 2;
        }
        uint8_t *b = seeds[files % 64];
        const size_t n = fread(b, 1, 256, f);
        fclose(f);
        LLVMFuzzerTestOneInput(b, n);
        seed_len[files % 64] = n;
        files++;
    }
    if (!gpu && !no_device) setup();
    if (no_device) {
        printf("fuzz_decode_cuda: skipped (no CUDA device)\n");
        return 0;
    }
    const double end = now_s() + seconds;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    uint8_t buf[256];
    while (now_s() < end) {
#define NEXT() xorshift(&x)
        size_t n = 1 + (size_t)(NEXT() % sizeof buf);
        const long from = files && NEXT() % 2 ? (long)(NEXT() % (uint64_t)(files < 64 ? files : 64)) : -1;
        if (from >= 0 && seed_len[from]) { /* a seed with 1 to 4 of its bytes replaced */
            n = seed_len[from];
            memcpy(buf, seeds[from], n);
            for (int m = 1 + (int)(NEXT() % 4); m > 0; m--) buf[NEXT() % n] = (uint8_t)(NEXT() >> 24);
        } else
            for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(NEXT() >> 24);
#undef NEXT
        LLVMFuzzerTestOneInput(buf, n);
        runs++;
    }
    printf("fuzz_decode_cuda: %ld files and %ld random inputs (seed %llu): %ld calls refused alike by both backends, "
           "%ld accepted, %ld of them compared with the CPU's result (worst error %.3g of the tolerance); no failure\n",
           files, runs, (unsigned long long)seed, n_refused, n_accepted, n_compared, worst);
    return 0;
}
#endif

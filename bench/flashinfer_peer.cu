// flashinfer_peer.cu — flashdec's fdec_decode_batch beside FlashInfer's batch decode over the same paged cache, on
// one NVIDIA GPU: the same pool of pages ([page][slot][kv_head][dim], f16), the same page tables, lengths and q,
// one query token a sequence. Each side is one call captured in a CUDA graph and replayed; medians of the rounds'
// mean time a call. The outputs are compared (largest difference), so both compute the same attention.
//
//   build/flashinfer_peer [--preset llama3-8b,lfm2,gemma4-sliding,gemma4-full] [--batch 1,8,32,128]
//                         [--len 1024,8192,32768] [--page-size 16] [--reps 7]
//
// Lengths are uniform in [L/2, 3L/2]. FlashInfer is built from the headers of the flashinfer-python wheel (its
// decode kernels are header-only: include/flashinfer and the CCCL headers in the wheel's data/): `make
// bench-peer-gpu` downloads it and builds this program. FlashInfer's window is window_left = window - 1.
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "flashdec.h"

#define CK(x)                                                                                               \
    do {                                                                                                    \
        cudaError_t e_ = (x);                                                                               \
        if (e_ != cudaSuccess) {                                                                            \
            fprintf(stderr, "flashinfer_peer: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)

namespace fi = flashinfer;
using IdType = int32_t;
using Params = fi::BatchDecodeParams<half, half, half, IdType>;

struct Preset {
    const char *name;
    uint32_t H, G, D, window;
};
static const Preset PRESETS[] = {{"llama3-8b", 32, 8, 128, 0},
                                 {"lfm2", 32, 8, 64, 0},
                                 {"gemma4-sliding", 16, 8, 256, 1024},
                                 {"gemma4-full", 16, 2, 512, 0}};

// One batch in device memory, for both libraries.
struct Batch {
    uint32_t B, P, num_pages, max_pages;
    std::vector<uint32_t> lens;
    std::vector<int32_t> table;                 // [B][max_pages], -1 past a sequence's pages
    std::vector<IdType> indptr, indices, last; // FlashInfer's CSR of the same pages
    half *q = nullptr, *k = nullptr, *v = nullptr, *out_fi = nullptr, *out_fd = nullptr;
    uint32_t *d_lens = nullptr;
    int32_t *d_table = nullptr;
    IdType *d_indptr = nullptr, *d_indices = nullptr, *d_last = nullptr;
    double bytes = 0; // K and V bytes a step reads (each sequence's attended positions)
};

static __global__ void fill_random(half *x, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        x[i] = __float2half((float)(z >> 40) / (float)(1ull << 24) * 2.f - 1.f);
    }
}

static Batch make_batch(const Preset &ps, uint32_t B, uint32_t L, uint32_t P, uint64_t seed) {
    Batch b;
    b.B = B, b.P = P;
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<uint32_t> len(std::max(1u, L / 2), L + L / 2);
    std::vector<uint32_t> pages(B);
    uint32_t total = 0;
    b.max_pages = 0;
    for (uint32_t i = 0; i < B; i++) {
        b.lens.push_back(len(rng));
        pages[i] = (b.lens[i] + P - 1) / P;
        total += pages[i];
        b.max_pages = std::max(b.max_pages, pages[i]);
        const uint32_t lo = ps.window && b.lens[i] > ps.window ? b.lens[i] - ps.window : 0;
        b.bytes += 2.0 * (b.lens[i] - lo) * ps.G * ps.D * sizeof(half);
    }
    b.num_pages = total;
    std::vector<int32_t> perm(total);
    for (uint32_t i = 0; i < total; i++) perm[i] = (int32_t)i;
    std::shuffle(perm.begin(), perm.end(), rng); // pages in no order, as a serving engine's pool has them
    b.table.assign((size_t)B * b.max_pages, -1);
    b.indptr.push_back(0);
    for (uint32_t i = 0, at = 0; i < B; i++) {
        for (uint32_t j = 0; j < pages[i]; j++, at++) b.table[(size_t)i * b.max_pages + j] = perm[at], b.indices.push_back(perm[at]);
        b.indptr.push_back((IdType)b.indices.size());
        b.last.push_back((IdType)(b.lens[i] - (pages[i] - 1) * P));
    }
    const size_t pool = (size_t)total * P * ps.G * ps.D, qn = (size_t)B * ps.H * ps.D;
    CK(cudaMalloc(&b.k, pool * sizeof(half)));
    CK(cudaMalloc(&b.v, pool * sizeof(half)));
    CK(cudaMalloc(&b.q, qn * sizeof(half)));
    CK(cudaMalloc(&b.out_fi, qn * sizeof(half)));
    CK(cudaMalloc(&b.out_fd, qn * sizeof(half)));
    fill_random<<<1024, 256>>>(b.k, pool, seed * 3 + 1);
    fill_random<<<1024, 256>>>(b.v, pool, seed * 3 + 2);
    fill_random<<<256, 256>>>(b.q, qn, seed * 3 + 3);
    CK(cudaMalloc(&b.d_lens, B * sizeof(uint32_t)));
    CK(cudaMalloc(&b.d_table, b.table.size() * sizeof(int32_t)));
    CK(cudaMalloc(&b.d_indptr, b.indptr.size() * sizeof(IdType)));
    CK(cudaMalloc(&b.d_indices, b.indices.size() * sizeof(IdType)));
    CK(cudaMalloc(&b.d_last, b.last.size() * sizeof(IdType)));
    CK(cudaMemcpy(b.d_lens, b.lens.data(), B * sizeof(uint32_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.d_table, b.table.data(), b.table.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.d_indptr, b.indptr.data(), b.indptr.size() * sizeof(IdType), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.d_indices, b.indices.data(), b.indices.size() * sizeof(IdType), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.d_last, b.last.data(), b.last.size() * sizeof(IdType), cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    return b;
}

static void free_batch(Batch &b) {
    for (void *p : {(void *)b.q, (void *)b.k, (void *)b.v, (void *)b.out_fi, (void *)b.out_fd, (void *)b.d_lens,
                    (void *)b.d_table, (void *)b.d_indptr, (void *)b.d_indices, (void *)b.d_last})
        cudaFree(p);
}

// Median over rounds of the mean time of one replay of graph g, in seconds.
static double time_graph(cudaGraphExec_t g, cudaStream_t s, int reps) {
    cudaEvent_t a, e;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&e));
    for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(g, s));
    std::vector<double> t;
    const int per = 20;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(a, s));
        for (int i = 0; i < per; i++) CK(cudaGraphLaunch(g, s));
        CK(cudaEventRecord(e, s));
        CK(cudaEventSynchronize(e));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, e));
        t.push_back(ms * 1e-3 / per);
    }
    std::sort(t.begin(), t.end());
    cudaEventDestroy(a), cudaEventDestroy(e);
    return t[t.size() / 2];
}

template <typename F>
static cudaGraphExec_t capture(cudaStream_t s, F &&call) {
    cudaGraph_t g;
    cudaGraphExec_t x;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    call();
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&x, g, 0));
    cudaGraphDestroy(g);
    return x;
}

// FlashInfer's plan and one run, set up as its Python wrapper does for a CUDA graph (enable_cuda_graph).
template <uint32_t D, uint32_t GROUP, bool WINDOW>
static double run_flashinfer(const Preset &ps, Batch &b, cudaStream_t s, int reps) {
    using Variant = fi::DefaultAttention</*custom mask*/ false, WINDOW, /*soft-cap*/ false, /*alibi*/ false>;
    const size_t float_ws = 256u << 20, int_ws = 8u << 20;
    void *fbuf, *ibuf, *hbuf;
    CK(cudaMalloc(&fbuf, float_ws));
    CK(cudaMalloc(&ibuf, int_ws));
    CK(cudaMallocHost(&hbuf, int_ws));
    fi::DecodePlanInfo plan;
    auto estimate = fi::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<GROUP, D, fi::PosEncodingMode::kNone,
                                                                            Variant, Params>;
    CK((fi::DecodePlan<D, fi::PosEncodingMode::kNone, Variant, Params>(
        fbuf, float_ws, ibuf, hbuf, int_ws, plan, b.indptr.data(), b.B, ps.H, b.P, /*enable_cuda_graph=*/true, s,
        estimate)));
    fi::paged_kv_t<half, IdType> kv(ps.G, b.P, D, b.B, fi::QKVLayout::kNHD, b.k, b.v, b.d_indices, b.d_indptr,
                                    b.d_last);
    Params p;
    memset(&p, 0, sizeof p);
    p.q = b.q, p.paged_kv = kv, p.o = b.out_fi, p.lse = nullptr, p.maybe_alibi_slopes = nullptr;
    p.num_qo_heads = ps.H, p.q_stride_n = ps.H * D, p.q_stride_h = D;
    p.window_left = ps.window ? (int32_t)ps.window - 1 : -1;
    p.logits_soft_cap = 0.f, p.sm_scale = 1.f / sqrtf((float)D), p.rope_rcp_scale = 1.f, p.rope_rcp_theta = 1e-4f;
    p.request_indices = fi::GetPtrFromBaseOffset<IdType>(ibuf, plan.request_indices_offset);
    p.kv_tile_indices = fi::GetPtrFromBaseOffset<IdType>(ibuf, plan.kv_tile_indices_offset);
    p.o_indptr = fi::GetPtrFromBaseOffset<IdType>(ibuf, plan.o_indptr_offset);
    p.kv_chunk_size_ptr = fi::GetPtrFromBaseOffset<IdType>(ibuf, plan.kv_chunk_size_ptr_offset);
    half *tmp_v = nullptr;
    float *tmp_s = nullptr;
    if (plan.split_kv) {
        tmp_v = fi::GetPtrFromBaseOffset<half>(fbuf, plan.v_offset);
        tmp_s = fi::GetPtrFromBaseOffset<float>(fbuf, plan.s_offset);
        p.block_valid_mask = fi::GetPtrFromBaseOffset<bool>(ibuf, plan.block_valid_mask_offset);
    }
    p.padded_batch_size = plan.padded_batch_size;
    p.partition_kv = false;
    auto call = [&] {
        CK((fi::BatchDecodeWithPagedKVCacheDispatched<D, fi::PosEncodingMode::kNone, Variant>(p, tmp_v, tmp_s,
                                                                                              false, s)));
    };
    call();
    CK(cudaStreamSynchronize(s));
    cudaGraphExec_t g = capture(s, call);
    const double sec = time_graph(g, s, reps);
    cudaGraphExecDestroy(g);
    cudaFree(fbuf), cudaFree(ibuf), cudaFreeHost(hbuf);
    return sec;
}

static double run_flashdec(const Preset &ps, Batch &b, cudaStream_t s, int reps) {
    fdec_options o = fdec_default_options();
    o.cuda_stream = s;
    fdec_context *ctx;
    fdec_layer L;
    memset(&L, 0, sizeof L);
    L.head_dim = ps.D, L.num_q_heads = ps.H, L.num_kv_heads = ps.G, L.window = ps.window;
    L.q_dtype = L.kv_dtype = L.out_dtype = FDEC_F16;
    fdec_batch bt;
    memset(&bt, 0, sizeof bt);
    bt.num_seqs = b.B, bt.seq_lens = b.d_lens, bt.max_seq_len = *std::max_element(b.lens.begin(), b.lens.end());
    bt.max_q_len = 1, bt.page_size = b.P, bt.page_table = b.d_table, bt.max_pages = b.max_pages;
    bt.num_pages = b.num_pages;
    if (fdec_context_create(FDEC_BACKEND_CUDA, &o, &ctx) || fdec_context_reserve_batch(ctx, &L, &bt)) {
        fprintf(stderr, "flashinfer_peer: flashdec: %s\n", fdec_last_error());
        exit(1);
    }
    auto call = [&] {
        if (fdec_decode_batch(ctx, &L, &bt, b.q, b.k, b.v, b.out_fd, nullptr)) {
            fprintf(stderr, "flashinfer_peer: flashdec: %s\n", fdec_last_error());
            exit(1);
        }
    };
    call();
    CK(cudaStreamSynchronize(s));
    cudaGraphExec_t g = capture(s, call);
    const double sec = time_graph(g, s, reps);
    cudaGraphExecDestroy(g);
    fdec_context_destroy(ctx);
    return sec;
}

static double max_diff(const Batch &b, size_t n) {
    std::vector<half> x(n), y(n);
    CK(cudaMemcpy(x.data(), b.out_fi, n * sizeof(half), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y.data(), b.out_fd, n * sizeof(half), cudaMemcpyDeviceToHost));
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)__half2float(x[i]) - (double)__half2float(y[i]));
        if (!(e <= d)) d = e == e ? e : INFINITY; /* a NaN on either side: infinite */
    }
    return d;
}

static std::vector<std::string> split(const char *s) {
    std::vector<std::string> r;
    std::string cur;
    for (const char *c = s;; c++) {
        if (*c == ',' || !*c) {
            if (!cur.empty()) r.push_back(cur);
            cur.clear();
            if (!*c) break;
        } else
            cur += *c;
    }
    return r;
}

int main(int argc, char **argv) {
    const char *presets = "llama3-8b,lfm2,gemma4-sliding,gemma4-full", *batches = "1,8,32,128",
               *lens = "1024,8192,32768";
    uint32_t P = 16;
    int reps = 7;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : nullptr;
        if (!val) {
            fprintf(stderr, "flashinfer_peer: %s needs a value\n", a.c_str());
            return 2;
        }
        if (a == "--preset") presets = val;
        else if (a == "--batch") batches = val;
        else if (a == "--len") lens = val;
        else if (a == "--page-size") P = (uint32_t)atoi(val);
        else if (a == "--reps") reps = atoi(val);
        else {
            fprintf(stderr, "flashinfer_peer: unknown option %s (see the top of bench/flashinfer_peer.cu)\n", a.c_str());
            return 2;
        }
        i++;
    }
    if (P != 16 && P != 32 && P != 64 && P != 128) {
        fprintf(stderr, "flashinfer_peer: --page-size must be 16, 32, 64 or 128\n");
        return 2;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    size_t free_b, total_b;
    CK(cudaMemGetInfo(&free_b, &total_b));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    printf("%s: flashdec %s beside FlashInfer's BatchDecodeWithPagedKVCache, f16, pages of %u, one token a sequence; "
           "graph replays, medians of %d rounds\n", prop.name, fdec_version(), P, reps);
    printf("%-16s %5s %7s %10s %10s %8s %9s %9s %9s\n", "preset", "batch", "len", "fi us", "fdec us", "fdec/fi",
           "fi GB/s", "fdec GB/s", "max diff");
    for (const std::string &pn : split(presets)) {
        const Preset *ps = nullptr;
        for (const Preset &x : PRESETS)
            if (pn == x.name) ps = &x;
        if (!ps) {
            fprintf(stderr, "flashinfer_peer: unknown preset %s\n", pn.c_str());
            return 2;
        }
        for (const std::string &bs : split(batches))
            for (const std::string &ls : split(lens)) {
                const uint32_t B = (uint32_t)atoi(bs.c_str()), L = (uint32_t)atoi(ls.c_str());
                // the pool (K and V) must fit, with room for the workspaces
                const double need = 2.0 * B * (L + L / 2 + P) * ps->G * ps->D * sizeof(half);
                if (need > 0.8 * (double)free_b) {
                    printf("%-16s %5u %7u   (skipped: %.0f GB of cache)\n", ps->name, B, L, need / 1e9);
                    continue;
                }
                Batch b = make_batch(*ps, B, L, P, 0x5eed + B * 131 + L);
                double fi_s = -1;
                switch (ps->D) {
                case 128: fi_s = run_flashinfer<128, 4, false>(*ps, b, s, reps); break;
                case 64: fi_s = run_flashinfer<64, 4, false>(*ps, b, s, reps); break;
                case 256: fi_s = run_flashinfer<256, 2, true>(*ps, b, s, reps); break;
                case 512: fi_s = run_flashinfer<512, 8, false>(*ps, b, s, reps); break;
                }
                const double fd_s = run_flashdec(*ps, b, s, reps);
                const double diff = max_diff(b, (size_t)B * ps->H * ps->D);
                printf("%-16s %5u %7u %10.1f %10.1f %8.2f %9.0f %9.0f %9.2g%s\n", ps->name, B, L, fi_s * 1e6,
                       fd_s * 1e6, fd_s / fi_s, b.bytes / fi_s / 1e9, b.bytes / fd_s / 1e9, diff,
                       diff <= 2e-2 ? "" : "  DIFFER");
                fflush(stdout);
                free_batch(b);
            }
    }
    return 0;
}

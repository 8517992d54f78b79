/* gpu_read.cu — how fast can a decode kernel's copies read a KV cache on this GPU, by copy method and pattern?
 *
 * No attention here: each kernel only brings K and V rows into shared memory (or registers) and touches them, the
 * way a split-KV decode kernel's ring does, so that the rate of each way of reading shows without the compute.
 * The cache is the Llama-3-8B (8 KV heads, 256-byte rows, head_dim 128) or LFM2 (128-byte rows) geometry at
 * 131072 positions, 512 or 256 MiB of K and V together, far past the 60 MB L2. Per case: blocks (chunks x KV heads;
 * a block reads its chunk of one KV head), rows a step (P), stages of the ring (S), threads, and
 *   ldg      each thread loads 16 bytes at a time straight to registers (a plain streaming read, no ring);
 *   cpasync  the block's threads copy a step's K and V rows 16 bytes a thread (cp.async), S - 1 steps in flight;
 *   bulkrow  one bulk copy (cp.async.bulk) per row of K and of V, lane i of each warp row i, an mbarrier a stage;
 *   bulkbig  (head-major only: a KV head's rows are contiguous) one bulk copy for the step's K rows, one for V;
 * and the layout: dense [pos][kv_head][row] (a head's rows 8 rows apart) or head-major [kv_head][pos][row];
 * "strided" chunks take steps c, c + nc, ... so that the blocks of a head read one contiguous range at any time.
 * The time is the median of 7 timings of 10 back-to-back launches (events); the device-to-device copy rate of a
 * 1 GiB cudaMemcpy (read + write) is measured in the same run.
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o gpu_read bench/micro/gpu_read.cu && ./gpu_read
 *   ./gpu_read short     (short calls read by a few blocks: short_cases)
 *   ./gpu_read floor     (the fastest plain read of each preset's K/V bytes, back to back: floor_cases) */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "graph_timing.cuh"


enum { LDG, CPASYNC, BULKROW, BULKBIG };
static const char *mode_name[] = {"ldg", "cpasync", "bulkrow", "bulkbig"};

struct Args {
    const unsigned char *k, *v;
    unsigned *sink;
    long long L;   /* positions */
    int G, RB;     /* KV heads, row bytes */
    int hm;        /* head-major */
    int nc, P, S;  /* chunks a head, rows a step, stages */
    int strided;
};

__device__ __forceinline__ size_t row_off(const Args &a, int g, long long pos) {
    return a.hm ? ((size_t)g * a.L + pos) * a.RB : ((size_t)pos * a.G + g) * a.RB;
}

/* steps of the block's chunk: contiguous chunk c = [c * len, (c + 1) * len), or strided: steps c, c + nc, ... */
__device__ __forceinline__ long long step_pos(const Args &a, int c, int i, long long steps_per_chunk) {
    return a.strided ? ((long long)i * a.nc + c) * a.P : ((long long)c * steps_per_chunk + i) * a.P;
}

__global__ void k_ldg(const uint4 *__restrict__ x, size_t n16, unsigned *sink) {
    unsigned acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 a = __ldcs(x + i), b = __ldcs(x + i + stride), c = __ldcs(x + i + 2 * stride), d = __ldcs(x + i + 3 * stride);
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < n16; i += stride) acc ^= __ldcs(x + i).x;
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

__device__ __forceinline__ void cp16(void *s, const void *g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((unsigned)__cvta_generic_to_shared(s)), "l"(g));
}
__device__ __forceinline__ void bulk(void *s, const void *g, int bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(s)),
                 "l"(g), "r"(bytes), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned par) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n .reg .pred q;\n mbarrier.try_wait.parity.shared.b64 q, [%1], %2;\n selp.u32 %0, 1, 0, q;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(par)
                     : "memory");
}

template <int N>
__device__ __forceinline__ void wait_n() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
/* wait until at most n of this thread's copy groups are pending (n is at most 10 here) */
__device__ __forceinline__ void wait_group(int n) {
    switch (n) {
    case 0: wait_n<0>(); break;
    case 1: wait_n<1>(); break;
    case 2: wait_n<2>(); break;
    case 3: wait_n<3>(); break;
    case 4: wait_n<4>(); break;
    case 5: wait_n<5>(); break;
    case 6: wait_n<6>(); break;
    case 7: wait_n<7>(); break;
    case 8: wait_n<8>(); break;
    case 9: wait_n<9>(); break;
    default: wait_n<10>(); break;
    }
}

template <int MODE>
__global__ void k_ring(Args a) {
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ __align__(8) unsigned long long bars[8];
    const int g = blockIdx.x % a.G, c = blockIdx.x / a.G;
    const long long nsteps_all = a.L / a.P, spc = nsteps_all / a.nc; /* steps a chunk (L divides evenly here) */
    const int stage_bytes = 2 * a.P * a.RB;
    unsigned acc = 0;
    if (MODE != CPASYNC) {
        if (threadIdx.x == 0) {
            for (int s = 0; s < a.S; s++)
                asm volatile("mbarrier.init.shared.b64 [%0], 1;\n" ::"r"((unsigned)__cvta_generic_to_shared(&bars[s])));
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        }
        __syncthreads();
    }
    auto issue = [&](long long i) {
        const int s = (int)(i % a.S);
        unsigned char *ks = sm + (size_t)s * stage_bytes, *vs = ks + a.P * a.RB;
        const long long p0 = step_pos(a, c, (int)i, spc);
        if (MODE == CPASYNC) {
            const int per_row = a.RB / 16, n = a.P * per_row;
            for (int j = threadIdx.x; j < n; j += blockDim.x) {
                const int r = j / per_row, q = j % per_row;
                const size_t off = row_off(a, g, p0 + r) + q * 16;
                cp16(ks + j * 16, a.k + off);
                cp16(vs + j * 16, a.v + off);
            }
            asm volatile("cp.async.commit_group;\n" ::);
        } else {
            const unsigned bar = (unsigned)__cvta_generic_to_shared(&bars[s]);
            if (threadIdx.x == 0)
                asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" ::"r"(bar), "r"(stage_bytes) : "memory");
            if (MODE == BULKBIG) {
                if (threadIdx.x == 0) {
                    const size_t off = row_off(a, g, p0);
                    bulk(ks, a.k + off, a.P * a.RB, bar);
                    bulk(vs, a.v + off, a.P * a.RB, bar);
                }
            } else { /* rows spread over the warps, lane i of a warp row i */
                for (int r = threadIdx.x; r < a.P; r += blockDim.x) {
                    const size_t off = row_off(a, g, p0 + r);
                    bulk(ks + r * a.RB, a.k + off, a.RB, bar);
                    bulk(vs + r * a.RB, a.v + off, a.RB, bar);
                }
            }
        }
    };
    for (int i = 0; i < a.S - 1 && i < spc; i++) issue(i);
    for (long long i = 0; i < spc; i++) {
        const int s = (int)(i % a.S);
        if (MODE == CPASYNC) {
            /* groups committed: min(spc, i + S - 1); wait until step i's has landed */
            const long long pending = spc - 1 - i < a.S - 2 ? spc - 1 - i : a.S - 2;
            wait_group((int)pending);
            __syncthreads();
        } else {
            bar_wait((unsigned)__cvta_generic_to_shared(&bars[s]), (unsigned)(i / a.S) & 1u);
        }
        const uint4 *st = reinterpret_cast<const uint4 *>(sm + (size_t)s * stage_bytes);
        for (int j = threadIdx.x; j < stage_bytes / 16; j += blockDim.x * 8) acc ^= st[j].x; /* touch it */
        __syncthreads(); /* stage i - 1's readers are done: it may be overwritten */
        if (i + a.S - 1 < spc) issue(i + a.S - 1);
    }
    if (acc == 0x9e3779b9u) a.sink[0] = acc;
}

struct Case {
    int mode, hm, RB, blocks_per_sm, P, S, threads, strided;
};

/* `gpu_read short`: how fast a few blocks stream a short call's cache on their own, for the question whether a short
 * call could skip the merge kernel by giving each KV head one block (or a handful): contexts of 1k and 4k positions,
 * 8 KV heads in the dense layout, rows of 128 (LFM2), 256 (Llama-3-8B) or 512 bytes (Gemma 4 sliding), 1-16 chunks a
 * head, rings of S stages of 32 KiB; bulkbig (one bulk copy a step for K and one for V) on the head-major layout of the same
 * bytes. Each launch reads another copy of the cache (up to 64 copies in 256 MiB, far past the L2), and
 * 32 launches are timed as one CUDA graph (median of 7 replays), the way the library's calls are timed; "empty" is
 * the same grid with no rows to read (start-up and launch alone). */
static void short_cases(unsigned char *k, unsigned char *v, size_t maxb, unsigned *sink) {
    CK(cudaFuncSetAttribute(k_ring<CPASYNC>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    CK(cudaFuncSetAttribute(k_ring<BULKROW>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    CK(cudaFuncSetAttribute(k_ring<BULKBIG>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int G = 8, NL = 32;
    printf("%-8s %4s %5s %3s %6s %4s %2s %4s %8s %8s %9s %9s\n", "mode", "rowB", "ctx", "nc", "blocks", "P", "S", "thr",
           "us", "empty", "GB/s/blk", "TB/s");
    for (int RB : {256, 128, 512})
        for (long long L : {1024LL, 4096LL})
            for (int nc : {1, 2, 4, 8, 16})
                for (int mode : {BULKROW, CPASYNC, BULKBIG})
                    for (int S : {2, 3, 4, 6}) {
                        const int P = 32768 / 2 / RB;
                        const long long spc = L / P / nc;
                        if (spc < 1 || (mode == CPASYNC && S > 4)) continue;
                        const size_t cache = (size_t)L * G * RB, ncopy = std::min<size_t>(64, maxb / cache);
                        const int thr = 128, blocks = nc * G;
                        const size_t smem = (size_t)S * 2 * P * RB;
                        float res[2];
                        for (int empty = 0; empty < 2; empty++)
                            res[empty] = captured_median_us(st, NL, 7, [&](int i) {
                                const size_t off = (size_t)(i % ncopy) * cache;
                                /* bulkbig reads the head-major layout (a head's rows contiguous), the others the dense one */
                                const Args a{k + off, v + off, sink, empty ? 0 : L, G, RB, mode == BULKBIG, nc, P, S, 0};
                                if (mode == CPASYNC) k_ring<CPASYNC><<<blocks, thr, smem, st>>>(a);
                                else if (mode == BULKBIG) k_ring<BULKBIG><<<blocks, thr, smem, st>>>(a);
                                else k_ring<BULKROW><<<blocks, thr, smem, st>>>(a);
                            });
                        const double blk_bytes = 2.0 * (double)cache / blocks;
                        printf("%-8s %4d %5lld %3d %6d %4d %2d %4d %8.2f %8.2f %9.1f %9.3f\n", mode_name[mode], RB, L, nc,
                               blocks, P, S, thr, res[0], res[1], blk_bytes / (res[0] - res[1]) / 1e3,
                               2.0 * cache / res[0] / 1e6);
                        fflush(stdout);
                    }
}

/* `gpu_read floor`: about the least time a kernel can take to read a call's K/V bytes once on this GPU (the fastest of
 * the plain reads below), for #4's targets at 32k (4.0 TB/s) and the short calls: each preset's bytes (1k to 131k positions, and the Gemma 4 sliding window of
 * 1024) as one contiguous range read by k_ldg (16-byte streaming loads, grid-stride, 4 loads in flight a thread;
 * blocks of 256 to 1024 threads, 1 to 8 a multiprocessor: the best of them is printed), 32 launches a CUDA graph
 * (median of 7 replays, as the library's calls are timed), each launch on another copy of the bytes in a 2 GiB pool so
 * that every read comes from HBM; "empty" is the same launch with nothing to read. No attention, no merge, no
 * scatter of rows: a lower bound for a decode call, not a kernel design. */
static void floor_cases(int sms, unsigned *sink) {
    const size_t pool = (size_t)2 << 30;
    unsigned char *x;
    CK(cudaMalloc(&x, pool));
    CK(cudaMemset(x, 5, pool));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int NL = 32;
    struct P { const char *name; int G, D; } presets[] = {{"llama3-8b", 8, 128}, {"lfm2", 8, 64},
                                                         {"gemma4-sliding-full", 8, 256}, {"gemma4-full", 2, 512}};
    printf("%-20s %7s %10s %8s %8s %6s %6s %8s\n", "shape", "context", "KV MB", "us", "empty", "thr", "bps", "TB/s");
    auto run = [&](const char *name, long long L, int G, int D) {
        const size_t bytes = (size_t)L * G * D * 2 * 2, ncopy = std::min<size_t>(NL, pool / bytes);
        float best = 1e30f, best_empty = 0;
        int bt = 0, bb = 0;
        for (int thr : {256, 512, 1024})
            for (int bps : {1, 2, 4, 8}) {
                if (thr * bps > 2048) continue;
                float res[2];
                for (int empty = 0; empty < 2; empty++)
                    res[empty] = captured_median_us(st, NL, 7, [&](int i) {
                        k_ldg<<<sms * bps, thr, 0, st>>>((const uint4 *)(x + (i % ncopy) * bytes), empty ? 0 : bytes / 16,
                                                         sink);
                    });
                if (res[0] < best) best = res[0], best_empty = res[1], bt = thr, bb = bps;
            }
        printf("%-20s %7lld %10.1f %8.2f %8.2f %6d %6d %8.3f\n", name, L, bytes / 1e6, best, best_empty, bt, bb,
               bytes / best / 1e6);
        fflush(stdout);
    };
    for (const P &p : presets)
        for (long long L : {1024LL, 4096LL, 32768LL, 131072LL}) run(p.name, L, p.G, p.D);
    run("gemma4-sliding w1024", 1024, 8, 256);
    CK(cudaStreamDestroy(st));
    CK(cudaFree(x));
}

int main(int argc, char **argv) {
    int dev = 0;
    CK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    const int sms = prop.multiProcessorCount;
    const long long L = 131072;
    const int G = 8;
    const size_t maxb = (size_t)L * G * 256;
    unsigned char *k, *v;
    unsigned *sink;
    CK(cudaMalloc(&k, maxb));
    CK(cudaMalloc(&v, maxb));
    CK(cudaMalloc(&sink, 64));
    CK(cudaMemset(k, 1, maxb));
    CK(cudaMemset(v, 2, maxb));
    if (argc > 1 && !strcmp(argv[1], "short")) {
        short_cases(k, v, maxb, sink);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "floor")) {
        CK(cudaFree(k));
        CK(cudaFree(v));
        floor_cases(sms, sink);
        return 0;
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    auto timeit = [&](auto launch) {
        for (int i = 0; i < 3; i++) launch();
        CK(cudaDeviceSynchronize());
        std::vector<float> t;
        for (int r = 0; r < 7; r++) {
            CK(cudaEventRecord(e0));
            for (int i = 0; i < 10; i++) launch();
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            t.push_back(ms * 1e3f / 10);
        }
        std::sort(t.begin(), t.end());
        return t[3];
    };
    { /* the copy ceiling, read + write */
        const size_t n = (size_t)1 << 30;
        unsigned char *a, *b;
        CK(cudaMalloc(&a, n));
        CK(cudaMalloc(&b, n));
        CK(cudaMemset(a, 3, n));
        float us = timeit([&] { CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice)); });
        printf("%s, %d SMs; device-to-device copy of 1 GiB: %.1f us, %.0f GB/s (read + write)\n", prop.name, sms, us,
               2.0 * n / us / 1e3);
        CK(cudaFree(a));
        CK(cudaFree(b));
    }
    CK(cudaFuncSetAttribute(k_ring<CPASYNC>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    CK(cudaFuncSetAttribute(k_ring<BULKROW>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    CK(cudaFuncSetAttribute(k_ring<BULKBIG>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    std::vector<Case> cases;
    const char *only = argc > 1 ? argv[1] : nullptr;
    for (int RB : {256, 128}) {
        for (int bps : {1, 2, 4}) cases.push_back({LDG, 1, RB, bps, 0, 0, 512, 0});
        for (int hm : {1, 0})
            for (int strided : {0, 1}) {
                if (hm && strided) continue;
                /* cp.async: FA2-like (one block of 128 threads an SM, a 32 KiB step, 1 and 2 steps in flight), ours */
                for (int S : {2, 3, 4}) cases.push_back({CPASYNC, hm, RB, 1, 32768 / 2 / RB, S, 128, strided});
                cases.push_back({CPASYNC, hm, RB, 2, 32768 / 2 / RB, 3, 128, strided});
                cases.push_back({CPASYNC, hm, RB, 2, 16384 / 2 / RB, 6, 128, strided});
                cases.push_back({CPASYNC, hm, RB, 1, 16384 / 2 / RB, 12, 128, strided});
                for (int S : {3, 4}) cases.push_back({BULKROW, hm, RB, 2, 32768 / 2 / RB, S, 128, strided});
                for (int S : {3, 6}) cases.push_back({BULKROW, hm, RB, 1, 32768 / 2 / RB, S, 128, strided});
                if (hm)
                    for (int bps : {1, 2})
                        for (int S : {2, 3, 4}) cases.push_back({BULKBIG, hm, RB, bps, 32768 / 2 / RB, S, 128, 0});
                if (hm) cases.push_back({BULKBIG, hm, RB, 1, 65536 / 2 / RB, 3, 128, 0});
            }
    }
    printf("%-8s %-6s %4s %4s %6s %4s %3s %4s %-8s %9s %7s\n", "mode", "layout", "rowB", "bps", "blocks", "P", "S",
           "thr", "chunks", "us", "TB/s");
    for (const Case &cs : cases) {
        if (only && strcmp(only, mode_name[cs.mode])) continue;
        const size_t bytes = 2 * (size_t)L * G * cs.RB; /* K and V */
        float us;
        int blocks;
        int nc = 0;
        if (cs.mode == LDG) {
            blocks = sms * cs.blocks_per_sm;
            /* K then V: one launch over each */
            us = timeit([&] {
                k_ldg<<<blocks, cs.threads>>>((const uint4 *)k, bytes / 2 / 16, sink);
                k_ldg<<<blocks, cs.threads>>>((const uint4 *)v, bytes / 2 / 16, sink);
            });
        } else {
            nc = sms * cs.blocks_per_sm / G;
            while ((L / cs.P) % nc) nc--; /* chunks that divide the steps evenly */
            blocks = nc * G;
            Args a{k, v, sink, L, G, cs.RB, cs.hm, nc, cs.P, cs.S, cs.strided};
            const size_t smem = (size_t)cs.S * 2 * cs.P * cs.RB;
            auto launch = [&] {
                if (cs.mode == CPASYNC) k_ring<CPASYNC><<<blocks, cs.threads, smem>>>(a);
                else if (cs.mode == BULKROW) k_ring<BULKROW><<<blocks, cs.threads, smem>>>(a);
                else k_ring<BULKBIG><<<blocks, cs.threads, smem>>>(a);
            };
            launch();
            CK(cudaGetLastError());
            us = timeit(launch);
        }
        printf("%-8s %-6s %4d %4d %6d %4d %3d %4d %-8s %9.1f %7.3f\n", mode_name[cs.mode], cs.hm ? "head" : "dense",
               cs.RB, cs.blocks_per_sm, blocks, cs.P, cs.S, cs.threads,
               cs.mode == LDG ? "-" : cs.strided ? "strided" : "contig", us, bytes / us / 1e6);
        fflush(stdout);
    }
    return 0;
}

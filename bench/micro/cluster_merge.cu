/* cluster_merge.cu — what a short decode call's merge costs on this GPU, by way of merging, with no attention.
 *
 * A "call" here is G = 8 KV heads x C chunks of blocks that each hold one chunk state (R = 4 heads x D = 128
 * floats of o, and m and l per head), as flashdec's tensor-core kernel has after its loop, and that must end as
 * out[32][128] = sum_c w_c o_c / L (the chunk merge). Each block first spins for WORK ns (globaltimer), standing in
 * for the call's streaming. Ways of merging:
 *   none     the decode grid alone: it writes its states and stops (the floor: no merge at all)
 *   kernel   the decode grid writes its states to global memory; a second kernel (a block per head, a thread per
 *            dimension, launched as a programmatic dependent on sm_90, griddepcontrol.wait at its start) merges
 *            them: flashdec's shape since CUDA log row 7
 *   clusterN the C = N blocks of a KV head are one thread-block cluster: each keeps its state in shared memory,
 *            the cluster waits at a barrier, each block merges 1/N of the head's outputs from every block's shared
 *            memory (distributed shared memory), and a second barrier keeps the memory alive until all have read
 * Each way is timed as a CUDA graph of 200 calls, replayed 15 times after 3 warm-up replays; the median per call.
 * The decode blocks run with 4 bytes or 100 KiB of dynamic shared memory (the decode kernel's ring).
 * Results and what came of them: bench/NOTES.md, CUDA log row 62 (bench/results/cluster-merge-h200-s20.log).
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o cluster_merge bench/micro/cluster_merge.cu
 *   ./cluster_merge */
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "graph_timing.cuh"

namespace cg = cooperative_groups;


enum { G = 8, R = 4, D = 128, H = G * R, THREADS = 128 };

struct P {
    float *so, *sm, *sl; /* states: [H][C][D], [H][C], [H][C] */
    float *out;          /* [H][D] */
    int C;
    unsigned work_ns;
};

__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void spin(unsigned ns) {
    const unsigned long long t0 = gtime();
    while (gtime() - t0 < ns) {
    }
}
/* a block's state, made up from its place so that nothing folds away */
__device__ __forceinline__ float st_o(int h, int c, int d) { return (float)((h * 7 + c * 3 + d) & 31) * 0.01f; }
__device__ __forceinline__ float st_m(int h, int c) { return (float)((h + c) & 7) * 0.1f; }

/* grid (C, G): block (c, g) is chunk c of KV head g */
__global__ void __launch_bounds__(THREADS) dec_global(const P p) {
    const int c = blockIdx.x, g = blockIdx.y;
    spin(p.work_ns);
    for (int i = threadIdx.x; i < R * D; i += THREADS) {
        const int h = g * R + i / D, d = i % D;
        p.so[((size_t)h * p.C + c) * D + d] = st_o(h, c, d);
    }
    if (threadIdx.x < R) {
        const int h = g * R + threadIdx.x;
        p.sm[h * p.C + c] = st_m(h, c), p.sl[h * p.C + c] = 1.f;
    }
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* grid H blocks, a thread a dimension, all C loads issued before any use */
template <int CMAX>
__global__ void __launch_bounds__(THREADS) merge_kernel(const P p) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int h = blockIdx.x, d = threadIdx.x;
    float m[CMAX], l[CMAX], o[CMAX];
#pragma unroll
    for (int c = 0; c < CMAX; c++) {
        const int cc = c < p.C ? c : p.C - 1;
        m[c] = p.sm[h * p.C + cc], l[c] = p.sl[h * p.C + cc], o[c] = p.so[((size_t)h * p.C + cc) * D + d];
    }
    float M = -INFINITY;
#pragma unroll
    for (int c = 0; c < CMAX; c++) M = c < p.C ? fmaxf(M, m[c]) : M;
    float L = 0.f, O = 0.f;
#pragma unroll
    for (int c = 0; c < CMAX; c++) {
        const float w = c < p.C ? __expf(m[c] - M) : 0.f;
        L += w * l[c], O += w * o[c];
    }
    p.out[h * D + d] = O / L;
}

/* grid (C, G), cluster (C, 1): the C blocks of KV head g merge through distributed shared memory */
template <int C>
__global__ void __launch_bounds__(THREADS) dec_cluster(const P p) {
    __shared__ float so[R * D], sm[R];
    cg::cluster_group cl = cg::this_cluster();
    const int c = blockIdx.x, g = blockIdx.y;
    spin(p.work_ns);
    for (int i = threadIdx.x; i < R * D; i += THREADS) so[i] = st_o(g * R + i / D, c, i % D);
    if (threadIdx.x < R) sm[threadIdx.x] = st_m(g * R + threadIdx.x, c);
    cl.sync();
    /* this block's share of the head group's R x D outputs: R * D / C of them, a thread each */
    constexpr int E = R * D / C;
    if (threadIdx.x < E) {
        const int i = c * E + threadIdx.x, r = i / D;
        float m[C], o[C];
#pragma unroll
        for (int j = 0; j < C; j++) {
            const float *rso = cl.map_shared_rank(so, j), *rsm = cl.map_shared_rank(sm, j);
            m[j] = rsm[r], o[j] = rso[i];
        }
        float M = -INFINITY;
#pragma unroll
        for (int j = 0; j < C; j++) M = fmaxf(M, m[j]);
        float L = 0.f, O = 0.f;
#pragma unroll
        for (int j = 0; j < C; j++) {
            const float w = __expf(m[j] - M);
            L += w, O += w * o[j];
        }
        p.out[(g * R + r) * D + i % D] = O / L;
    }
    cl.sync();
}

static float graph_time(cudaStream_t s, void (*call)(cudaStream_t, const P &), const P &p) {
    return captured_median_us(s, 200, 15, [&](int) { call(s, p); });
}

static size_t g_dyn;
static void call_none(cudaStream_t s, const P &p) { dec_global<<<dim3(p.C, G), THREADS, g_dyn, s>>>(p); }
template <int CMAX>
static void call_kernel(cudaStream_t s, const P &p) {
    dec_global<<<dim3(p.C, G), THREADS, g_dyn, s>>>(p);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(H), cfg.blockDim = dim3(THREADS), cfg.stream = s, cfg.attrs = at, cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, merge_kernel<CMAX>, p));
}
template <int C>
static void call_cluster(cudaStream_t s, const P &p) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = C, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(C, G), cfg.blockDim = dim3(THREADS), cfg.dynamicSmemBytes = g_dyn, cfg.stream = s;
    cfg.attrs = at, cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, dec_cluster<C>, p));
}
template <int C>
static int max_clusters() {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = C, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(C, G), cfg.blockDim = dim3(THREADS), cfg.dynamicSmemBytes = g_dyn;
    cfg.attrs = at, cfg.numAttrs = 1;
    int n = -1;
    if (cudaOccupancyMaxActiveClusters(&n, dec_cluster<C>, &cfg) != cudaSuccess) n = -1;
    cudaGetLastError();
    return n;
}

int main() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    P p;
    CK(cudaMalloc(&p.so, (size_t)H * 16 * D * 4));
    CK(cudaMalloc(&p.sm, H * 16 * 4));
    CK(cudaMalloc(&p.sl, H * 16 * 4));
    CK(cudaMalloc(&p.out, H * D * 4));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const size_t dyns[] = {4, 100 << 10};
    CK(cudaFuncSetAttribute(dec_global, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10));
    CK(cudaFuncSetAttribute(dec_cluster<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10));
    CK(cudaFuncSetAttribute(dec_cluster<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10));
    CK(cudaFuncSetAttribute(dec_cluster<16>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    printf("%-9s %6s %4s %8s %10s %10s %10s\n", "way", "dynsm", "C", "work ns", "us/call", "-none", "clusters");
    for (size_t dyn : dyns)
        for (unsigned work : {0u, 2000u}) {
            g_dyn = dyn;
            p.work_ns = work;
            for (int C : {8, 16}) {
                p.C = C;
                const float t0 = graph_time(s, call_none, p);
                const float tk = graph_time(s, C == 8 ? call_kernel<8> : call_kernel<16>, p);
                const float tc = graph_time(s, C == 8 ? call_cluster<8> : call_cluster<16>, p);
                const int mc = C == 8 ? max_clusters<8>() : max_clusters<16>();
                printf("%-9s %6zu %4d %8u %10.2f\n", "none", dyn, C, work, t0);
                printf("%-9s %6zu %4d %8u %10.2f %10.2f\n", "kernel", dyn, C, work, tk, tk - t0);
                printf("cluster%-2d %6zu %4d %8u %10.2f %10.2f %10d\n", C, dyn, C, work, tc, tc - t0, mc);
            }
        }
    CK(cudaDeviceSynchronize());
    return 0;
}

/* graph_timing.cuh — what the CUDA micro-benchmarks here (gpu_read.cu, cluster_merge.cu) share: a CUDA call check
 * that stops with CUDA's message, and the timing of a run of launches captured as one CUDA graph, the way the library's
 * calls are timed (CUDA-graph replays, the median). Included from the same folder, so each benchmark still builds with one nvcc. */
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                         \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* us a call: the median of `reps` timed replays (events on s) of graph ge, which holds `calls` calls, after 3
 * replays of warm-up */
static float graph_median_us(cudaGraphExec_t ge, cudaStream_t s, int calls, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(ge, s));
    std::vector<float> t;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1e3f / calls);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

/* us a call of the `calls` calls that launch(i) makes on s for i = 0 .. calls - 1, captured as one CUDA graph and timed
 * by graph_median_us (`reps` replays) */
template <class F>
static float captured_median_us(cudaStream_t s, int calls, int reps, F launch) {
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < calls; i++) launch(i);
    CK(cudaStreamEndCapture(s, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    const float us = graph_median_us(ge, s, calls, reps);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(gr));
    return us;
}

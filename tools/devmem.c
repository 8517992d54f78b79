/* devmem.c — see devmem.h. */
#include "devmem.h"

#include <stdlib.h>

#ifdef FDEC_HAVE_CUDA
#include <cuda_runtime_api.h>

int fd_dev_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n > 0;
}

const char *fd_dev_name(void) {
    static struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "?";
    return prop.name;
}

void *fd_dev_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) return NULL;
    return p;
}
void fd_dev_free(void *p) {
    if (p) cudaFree(p);
}
/* A copy from pageable memory (and a memset) may return before the device has written the bytes, and a kernel on a
 * non-blocking stream (the tests' own stream) is not ordered after it: both wait until it is done. */
int fd_h2d(void *dst, const void *src, size_t n) {
    return cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess;
}
int fd_d2h(void *dst, const void *src, size_t n) { return cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost) != cudaSuccess; }
int fd_dev_memset(void *p, int b, size_t n) {
    return cudaMemset(p, b, n) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess;
}
int fd_dev_sync(void) { return cudaDeviceSynchronize() != cudaSuccess; }
int fd_dev_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return cudaGetLastError(), 0;
    return n;
}
int fd_dev_set(int d) { return cudaSetDevice(d) != cudaSuccess; }
int fd_dev_stream_sync(void *s) { return cudaStreamSynchronize((cudaStream_t)s) != cudaSuccess; }
void *fd_dev_stream_create(void) {
    cudaStream_t s = NULL;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return NULL;
    return s;
}
void fd_dev_stream_destroy(void *s) {
    if (s) cudaStreamDestroy((cudaStream_t)s);
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median milliseconds of `reps` rounds of round(arg), each timed with events on stream s; negative if CUDA
 * reported an error. The caller warms up first. */
static double median_ms(cudaStream_t s, void (*round)(void *), void *arg, int reps) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float *ms = malloc(sizeof(float) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(e0, s);
        round(arg);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms[r], e0, e1);
    }
    const int bad = cudaGetLastError() != cudaSuccess;
    qsort(ms, (size_t)reps, sizeof *ms, cmp_f);
    const double t = ms[reps / 2];
    free(ms);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return bad ? -1 : t;
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} copy_args;
static void copy_round(void *a_) {
    copy_args *a = a_;
    cudaMemcpyAsync(a->dst, a->src, a->bytes, cudaMemcpyDeviceToDevice, 0);
}

double fd_dev_copy_bandwidth(size_t bytes) {
    void *a = fd_dev_alloc(bytes), *b = fd_dev_alloc(bytes);
    if (!a || !b) return fd_dev_free(a), fd_dev_free(b), -1;
    cudaMemset(a, 1, bytes);
    copy_args ca = {b, a, bytes};
    copy_round(&ca); /* warm up */
    const double ms = median_ms(0, copy_round, &ca, 5);
    fd_dev_free(a);
    fd_dev_free(b);
    return ms > 0 ? 2.0 * (double)bytes / (ms * 1e-3) / 1e9 : -1;
}

typedef struct {
    cudaGraph_t g;
    cudaGraphExec_t ge;
} fd_graph;

void *fd_dev_graph_capture(void *stream, void (*fn)(void *, int), void *arg, int n) {
    fd_graph *gr = calloc(1, sizeof *gr);
    if (!gr) return NULL;
    cudaStream_t s = (cudaStream_t)stream;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return free(gr), NULL;
    for (int i = 0; i < n; i++) fn(arg, i);
    if (cudaStreamEndCapture(s, &gr->g) != cudaSuccess) return cudaGetLastError(), free(gr), NULL;
    if (cudaGraphInstantiate(&gr->ge, gr->g, 0) != cudaSuccess) {
        cudaGraphDestroy(gr->g);
        cudaGetLastError();
        free(gr);
        return NULL;
    }
    return gr;
}

int fd_dev_graph_replay(void *graph, void *stream) {
    return cudaGraphLaunch(((fd_graph *)graph)->ge, (cudaStream_t)stream) != cudaSuccess;
}

void fd_dev_graph_destroy(void *graph) {
    fd_graph *gr = graph;
    if (!gr) return;
    cudaGraphExecDestroy(gr->ge);
    cudaGraphDestroy(gr->g);
    free(gr);
}

typedef struct {
    void *graph, *stream;
    void (*fn)(void *, int);
    void *arg;
    int n;
} round_args;
static void graph_round(void *a_) {
    round_args *a = a_;
    fd_dev_graph_replay(a->graph, a->stream);
}
static void calls_round(void *a_) {
    round_args *a = a_;
    for (int i = 0; i < a->n; i++) a->fn(a->arg, i);
}

double fd_dev_time_graph(void *stream, void (*fn)(void *, int), void *arg, int n, int reps) {
    round_args ra = {fd_dev_graph_capture(stream, fn, arg, n), stream, fn, arg, n};
    if (!ra.graph) return -1;
    graph_round(&ra); /* warm up */
    graph_round(&ra);
    const double ms = median_ms((cudaStream_t)stream, graph_round, &ra, reps);
    fd_dev_graph_destroy(ra.graph);
    return ms < 0 ? -4 : ms * 1e-3 / n;
}

double fd_dev_time_events(void *stream, void (*fn)(void *, int), void *arg, int n, int reps) {
    round_args ra = {NULL, stream, fn, arg, n};
    calls_round(&ra); /* warm up */
    const double ms = median_ms((cudaStream_t)stream, calls_round, &ra, reps);
    return ms < 0 ? -4 : ms * 1e-3 / n;
}

#else /* no CUDA in this build */
int fd_dev_available(void) { return 0; }
const char *fd_dev_name(void) { return "none"; }
void *fd_dev_alloc(size_t bytes) { (void)bytes; return NULL; }
void fd_dev_free(void *p) { (void)p; }
int fd_h2d(void *d, const void *s, size_t n) { (void)d, (void)s, (void)n; return 1; }
int fd_d2h(void *d, const void *s, size_t n) { (void)d, (void)s, (void)n; return 1; }
int fd_dev_memset(void *p, int b, size_t n) { (void)p, (void)b, (void)n; return 1; }
int fd_dev_sync(void) { return 1; }
int fd_dev_count(void) { return 0; }
int fd_dev_set(int d) { (void)d; return 1; }
int fd_dev_stream_sync(void *s) { (void)s; return 1; }
double fd_dev_time_events(void *s, void (*fn)(void *, int), void *a, int n, int r) {
    (void)s, (void)fn, (void)a, (void)n, (void)r;
    return -1;
}
void *fd_dev_stream_create(void) { return NULL; }
void fd_dev_stream_destroy(void *s) { (void)s; }
double fd_dev_copy_bandwidth(size_t bytes) { (void)bytes; return -1; }
void *fd_dev_graph_capture(void *s, void (*fn)(void *, int), void *a, int n) {
    (void)s, (void)fn, (void)a, (void)n;
    return NULL;
}
int fd_dev_graph_replay(void *g, void *s) { (void)g, (void)s; return 1; }
void fd_dev_graph_destroy(void *g) { (void)g; }
double fd_dev_time_graph(void *s, void (*fn)(void *, int), void *a, int n, int r) {
    (void)s, (void)fn, (void)a, (void)n, (void)r;
    return -1;
}
#endif

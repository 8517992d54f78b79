/* sp.c — libflashdec_nccl: sequence-parallel decode over NCCL (flashdec_nccl.h).
 *
 * Per call: this rank's partial (out, lse) over its part of the attended range goes into a send buffer
 * [out bytes | lse] (fdec_decode writes it there directly), one ncclAllGather collects every rank's buffer,
 * and fdec_merge (the CUDA backend's merge, the one its split-KV combine uses) merges them into out and lse.
 * Three operations on one stream; no host synchronisation. */
#include "flashdec_nccl.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"

/* NCCL and the CUDA runtime are loaded when first needed, not linked: the companion loads on any machine, and where
 * either is missing its calls are FDEC_EUNSUPPORTED with a message that names it. The functions it uses: */
#define SP_CUDA_FNS(X)                                                                                          \
    X(cudaFree) X(cudaGetErrorString) X(cudaGetLastError) X(cudaMalloc) X(cudaMemcpy) X(cudaMemcpyAsync)
#define SP_NCCL_FNS(X) X(ncclAllGather) X(ncclCommDestroy) X(ncclCommInitRank) X(ncclGetErrorString) X(ncclGetUniqueId)
static struct {
#define SP_PTR(f) __typeof__(&f) f;
    SP_CUDA_FNS(SP_PTR) SP_NCCL_FNS(SP_PTR)
#undef SP_PTR
} dep;
static char dep_error[400];
static pthread_once_t dep_once = PTHREAD_ONCE_INIT;

static void load_deps(void) {
    void *cuda = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    void *nccl = cuda ? dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!cuda || !nccl) {
        snprintf(dep_error, sizeof dep_error, "%s", dlerror());
        return;
    }
#define SP_LOAD_CUDA(f) if (!(*(void **)&dep.f = dlsym(cuda, #f)) && !dep_error[0]) \
        snprintf(dep_error, sizeof dep_error, "libcudart.so.13 has no %s", #f);
#define SP_LOAD_NCCL(f) if (!(*(void **)&dep.f = dlsym(nccl, #f)) && !dep_error[0]) \
        snprintf(dep_error, sizeof dep_error, "libnccl.so.2 has no %s", #f);
    SP_CUDA_FNS(SP_LOAD_CUDA)
    SP_NCCL_FNS(SP_LOAD_NCCL)
#undef SP_LOAD_CUDA
#undef SP_LOAD_NCCL
}

/* FDEC_OK where NCCL and the CUDA runtime are loaded; else FDEC_EUNSUPPORTED, said */
static fdec_status deps(void) {
    pthread_once(&dep_once, load_deps);
    if (!dep_error[0]) return FDEC_OK;
    return fdec_set_error(FDEC_EUNSUPPORTED, "libflashdec_nccl needs NCCL (libnccl.so.2) and the CUDA runtime "
                                             "(libcudart.so.13): %s", dep_error);
}
#define cudaFree dep.cudaFree
#define cudaGetErrorString dep.cudaGetErrorString
#define cudaGetLastError dep.cudaGetLastError
#define cudaMalloc dep.cudaMalloc
#define cudaMemcpy dep.cudaMemcpy
#define cudaMemcpyAsync dep.cudaMemcpyAsync
#define ncclAllGather dep.ncclAllGather
#define ncclCommDestroy dep.ncclCommDestroy
#define ncclCommInitRank dep.ncclCommInitRank
#define ncclGetErrorString dep.ncclGetErrorString
#define ncclGetUniqueId dep.ncclGetUniqueId

struct fdec_sp {
    fdec_context *ctx;
    cudaStream_t stream;
    ncclComm_t comm;
    int nranks, rank;
    unsigned char *buf; /* send [slot] then receive [nranks][slot], slot = out bytes + lse, 16-byte aligned,
                           then cap_heads floats of -inf (the lse of an empty partial) */
    size_t cap;         /* bytes of one slot the buffer was sized for */
    uint32_t cap_heads; /* -inf values after the slots */
    const void **outs;  /* [nranks] pointers into the receive buffer, for fdec_merge */
    const float **lses;
};

static fdec_status nccl_err(ncclResult_t r, const char *what) {
    return fdec_set_error(FDEC_EBACKEND, "NCCL error in %s: %s", what, ncclGetErrorString(r));
}
static fdec_status cuda_err(cudaError_t e, const char *what) {
    return fdec_set_error(FDEC_EBACKEND, "CUDA error in %s: %s", what, cudaGetErrorString(e));
}

fdec_status fdec_sp_unique_id(unsigned char id[FDEC_SP_ID_BYTES]) {
    if (!id) return fdec_set_error(FDEC_EINVAL, "id must not be NULL");
    fdec_status st = deps();
    if (st) return st;
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) return nccl_err(r, "ncclGetUniqueId");
    memcpy(id, u.internal, FDEC_SP_ID_BYTES);
    return FDEC_OK;
}

fdec_status fdec_sp_create(fdec_context *ctx, void *stream, int nranks, int rank,
                           const unsigned char id[FDEC_SP_ID_BYTES], fdec_sp **out) {
    if (!out) return fdec_set_error(FDEC_EINVAL, "out must not be NULL");
    *out = NULL;
    if (!ctx || !id) return fdec_set_error(FDEC_EINVAL, "%s must not be NULL", ctx ? "id" : "ctx");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return fdec_set_error(FDEC_EINVAL, "rank (%d) must be in 0..nranks-1 and nranks (%d) at least 1", rank, nranks);
    fdec_status dst = deps();
    if (dst) return dst;
    fdec_sp *sp = calloc(1, sizeof *sp);
    if (!sp) return fdec_set_error(FDEC_ENOMEM, "out of memory creating the sequence-parallel handle");
    sp->outs = calloc((size_t)nranks, sizeof *sp->outs);
    sp->lses = calloc((size_t)nranks, sizeof *sp->lses);
    if (!sp->outs || !sp->lses) {
        fdec_sp_destroy(sp);
        return fdec_set_error(FDEC_ENOMEM, "out of memory creating the sequence-parallel handle");
    }
    sp->ctx = ctx, sp->stream = (cudaStream_t)stream, sp->nranks = nranks, sp->rank = rank;
    ncclUniqueId u;
    memcpy(u.internal, id, FDEC_SP_ID_BYTES);
    ncclResult_t r = ncclCommInitRank(&sp->comm, nranks, u, rank);
    if (r != ncclSuccess) {
        sp->comm = NULL;
        fdec_sp_destroy(sp);
        return nccl_err(r, "ncclCommInitRank");
    }
    *out = sp;
    return FDEC_OK;
}

void fdec_sp_destroy(fdec_sp *sp) {
    if (!sp) return;
    if (sp->comm) ncclCommDestroy(sp->comm);
    if (sp->buf) cudaFree(sp->buf);
    free(sp->outs);
    free(sp->lses);
    free(sp);
}

fdec_status fdec_sp_decode(fdec_sp *sp, const fdec_layer *layer, uint32_t seq_len, uint32_t shard_lo,
                           uint32_t shard_len, const void *q, const void *k, const void *v, void *out, float *lse) {
    if (!sp) return fdec_set_error(FDEC_EINVAL, "sp must not be NULL");
    fdec_problem p;
    fdec_status st = fdec_problem_init(layer, seq_len, &p);
    if (st) return st;
    if (p.kv.ring)
        return fdec_set_error(FDEC_EINVAL, "ring_capacity (%u) must be 0 for a sharded cache: a shard is a "
                                           "contiguous run of positions", p.kv.ring);
    if ((uint64_t)shard_lo + shard_len > seq_len)
        return fdec_set_error(FDEC_EINVAL, "the shard [%u, %llu) must lie inside [0, seq_len = %u)", shard_lo,
                              (unsigned long long)shard_lo + shard_len, seq_len);
    /* out bytes rounded up to 16, so that the lse after them is aligned */
    const size_t ob = ((size_t)p.H * p.D * fdec_dtype_size(p.ot) + 15) / 16 * 16;
    const size_t slot = (ob + p.H * sizeof(float) + 15) / 16 * 16;
    if (slot > sp->cap || p.H > sp->cap_heads) {
        if (sp->buf) cudaFree(sp->buf), sp->buf = NULL, sp->cap = 0, sp->cap_heads = 0;
        const size_t bytes = slot * (size_t)(sp->nranks + 1) + p.H * sizeof(float);
        float *ninf = malloc(p.H * sizeof(float));
        cudaError_t e = ninf ? cudaMalloc((void **)&sp->buf, bytes) : cudaErrorMemoryAllocation;
        if (e == cudaSuccess) {
            for (uint32_t h = 0; h < p.H; h++) ninf[h] = -INFINITY;
            e = cudaMemcpy(sp->buf + slot * (size_t)(sp->nranks + 1), ninf, p.H * sizeof(float),
                           cudaMemcpyHostToDevice);
        }
        free(ninf);
        if (e != cudaSuccess) {
            cudaGetLastError();
            if (sp->buf) cudaFree(sp->buf);
            sp->buf = NULL;
            return fdec_set_error(FDEC_ENOMEM, "allocating %zu bytes for the exchange failed: %s", bytes,
                                  cudaGetErrorString(e));
        }
        sp->cap = slot, sp->cap_heads = p.H;
    }
    unsigned char *send = sp->buf, *recv = sp->buf + slot;
    /* this rank's part of the attended range [p.lo, seq_len) */
    const uint32_t a = shard_lo > p.lo ? shard_lo : p.lo, b = shard_lo + shard_len;
    if (a < b) {
        fdec_layer part = *layer;
        part.window = 0;
        /* the sink counts once: in the shard that holds the query's own position, never empty (flashdec.h) */
        if (b != seq_len) part.sinks = NULL;
        const size_t off = fdec_dtype_bytes(p.kvt, (size_t)(a - shard_lo) * p.kv.ps);
        /* positions a.. of the call are its 0..; ALiBi counts from the query at seq_len - 1, past its end */
        st = fdec_decode_at(sp->ctx, &part, b - a, seq_len - 1 - a, q, (const char *)k + off, (const char *)v + off,
                            send, (float *)(send + ob));
        if (st) return st;
    } else { /* nothing of the range here: an empty partial (lse -inf; its out is ignored by the merge) */
        const unsigned char *ninf = sp->buf + sp->cap * (size_t)(sp->nranks + 1);
        cudaError_t e = cudaMemcpyAsync(send + ob, ninf, p.H * sizeof(float), cudaMemcpyDeviceToDevice, sp->stream);
        if (e != cudaSuccess) return cuda_err(e, "cudaMemcpyAsync");
    }
    ncclResult_t r = ncclAllGather(send, recv, slot, ncclUint8, sp->comm, sp->stream);
    if (r != ncclSuccess) return nccl_err(r, "ncclAllGather");
    for (int i = 0; i < sp->nranks; i++) {
        sp->outs[i] = recv + (size_t)i * slot;
        sp->lses[i] = (const float *)(recv + (size_t)i * slot + ob);
    }
    return fdec_merge(sp->ctx, (uint32_t)sp->nranks, p.H, p.D, p.ot, sp->outs, sp->lses, out, lse);
}

/* cuda.cu — the CUDA backend: device and stream, scratch, the GPU's split rule, kernel choice and launch. The
 * kernels are in simt.cuh, mma.cuh and merge.cuh. Built into the module libflashdec_cuda.so (module.c is its entry,
 * loader.c in libflashdec loads it).
 *
 * A call launches two kernels on the context's stream (the decode, then the merge of its chunks) and nothing
 * else: no allocation once the scratch is large enough (fdec_context_reserve, or the first call of the largest
 * shape), no copy, no synchronisation, so it can be captured into a CUDA graph. The decode's grid is the call's work
 * list (plan.c) laid out densely: block (head tile, chunk, KV head). The tuned numbers are in docs/TUNING.md. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.cuh"
#include "mma.cuh"
#include "simt.cuh"
extern "C" {
#include "../internal.h"
}

/* Shortest chunk: one step of a block (4 warps x up to 8 rows), below which blocks only add merge work. */
#define MIN_CHUNK 64
/* Shortest chunk at head_dim 512 while the merge stays at FDEC_MERGE_SMALL_MAX chunks or fewer: more blocks for
 * short calls. */
#define D512_MIN_CHUNK 32
/* A batch's shortest chunk: its blocks read a chunk of one sequence each, and the many sequences fill the GPU where
 * one call's chunks must; longer chunks carry a block's fixed costs (q's rows, the tail, the merge's states) over more
 * positions. Fixed, not taken from the batch's size: a sequence's split may depend only on the plan's bounds (batch
 * invariance). docs/TUNING.md. */
#ifndef FDEC_BATCH_MIN_CHUNK
#define FDEC_BATCH_MIN_CHUNK 256
#endif
/* Most chunks per head: bounds the scratch and the merge's loop. */
#define MAX_CHUNKS FDEC_CUDA_MAX_CHUNKS
/* The SIMT kernel's tiles of 4 heads at 16 elements a lane (head_dim 512), whose block sums keep their totals in
 * shared memory (fdec_sums_in_smem), only for calls that attend to at least this many positions: shorter calls wait
 * on their few steps' latency rather than on memory, and their smaller tiles are faster. */
#define WIDE_TILE_MIN 8192
/* Bounds the static shared memory of a tensor-core kernel (its tail's arrays, a few hundred bytes),
 * for the check of a kernel's shared memory against the device's limit (choose_kernel). */
#define FDEC_CUDA_STATIC_SMEM_MAX 2048
#define FDEC_CUDA_CONF_MAX 32 /* kernels a context remembers as configured (a model uses a few) */

typedef struct {
    int device, sms, cc_major;
    size_t smem_optin; /* the most shared memory a block may ask for (cudaDevAttrMaxSharedMemoryPerBlockOptin) */
    uint32_t min_chunk;
    uint32_t d512_strided_min; /* head_dim 512 chunks at least this long take strided steps (mma.cuh) */
    int simt_only;             /* never the tensor-core kernel (fdec_test_options) */
    cudaStream_t stream;
    const void *conf_fn[FDEC_CUDA_CONF_MAX]; /* kernels whose attributes configure() has set */
    size_t conf_smem[FDEC_CUDA_CONF_MAX];    /* and the dynamic shared memory each may use */
    int nconf;
    float *scratch; /* partial states [part_o][part_m][part_l], or fdec_merge's accumulator */
    size_t fcap;    /* floats the scratch holds */
} cuda_impl;

static fdec_status cuda_err(cudaError_t e, const char *what) {
    return fdec_set_error(FDEC_EBACKEND, "CUDA error in %s: %s (%s)", what, cudaGetErrorString(e),
                          cudaGetErrorName(e));
}

/* ---- the kernel instances ---- */

typedef void (*partial_fn)(const fdec_cuda_params);

/* The SIMT instance of RT heads for chunks of chunk_len rows: with block sums (fdec_simt_kernel's SUMS) where a lane
 * group sums more than FDEC_CUDA_SUM_MIN_TERMS of them (a block's warps x GROUPS lane groups each take every
 * (warps x GROUPS)-th row) and where they are compiled (fdec_sums_ok) */
template <typename KT, int D, int RT>
static partial_fn pick_sums(uint32_t chunk_len) {
    if constexpr (fdec_sums_ok<KT, D, RT>)
        if (chunk_len > (uint64_t)FDEC_CUDA_SUM_MIN_TERMS * FDEC_CUDA_WARPS * fdec_shape<KT, D>::GROUPS)
            return fdec_simt_kernel<KT, D, RT, true>;
    return fdec_simt_kernel<KT, D, RT, false>;
}

template <typename KT, int D>
static partial_fn pick_rt(int rt, uint32_t chunk_len) {
    /* only the tile sizes heads_per_block can ask for are compiled */
    constexpr int cap = fdec_simt_max_rt(D != 0);
    static_assert(fdec_sums_ok<KT, D, cap>, "heads_per_block's tiles have room for the block sums");
    switch (rt) {
    case 1: return pick_sums<KT, D, 1>(chunk_len);
    case 2: return pick_sums<KT, D, 2>(chunk_len);
    }
    return pick_sums<KT, D, cap>(chunk_len); /* rt = cap = 4 */
}

template <typename KT>
static partial_fn pick_d(uint32_t D, int fast, int rt, uint32_t chunk_len) {
    if (fast) switch (D) {
        case 64: return pick_rt<KT, 64>(rt, chunk_len);
        case 128: return pick_rt<KT, 128>(rt, chunk_len);
        case 256: return pick_rt<KT, 256>(rt, chunk_len);
        case 512: return pick_rt<KT, 512>(rt, chunk_len);
        }
    return pick_rt<KT, 0>(rt, chunk_len);
}

/* f(std::integral_constant<int, D>()) for a tensor-core head_dim (64, 128, 256 or 512, use_mma's): the one place a
 * run-time head_dim becomes a tensor-core instance */
template <typename F>
static auto with_mma_dim(uint32_t D, F f) {
    switch (D) {
    case 64: return f(std::integral_constant<int, 64>());
    case 128: return f(std::integral_constant<int, 128>());
    case 256: return f(std::integral_constant<int, 256>());
    default: return f(std::integral_constant<int, 512>());
    }
}

/* The tensor-core instance for head_dim D; strided: head_dim 512's instance with strided steps (sm_90, where it was
 * measured) */
template <typename KT>
static partial_fn pick_mma(uint32_t D, int cc, int strided) {
    return with_mma_dim(D, [&](auto d) -> partial_fn {
        constexpr int Dc = decltype(d)::value;
        if constexpr (Dc == 512)
            if (strided && cc >= 9) return fdec_mma_kernel<KT, 512, true>;
        return fdec_mma_kernel<KT, Dc>;
    });
}

/* f(std::integral_constant<int, NG>()) for ng (1, 2 or 4, batch_tiles's) tiles of 8 rows a tensor-core block at head_dim
 * D: the one place a run-time tile count becomes an instance */
template <int D, typename F>
static auto with_tiles(int ng, F f) {
    if constexpr (fdec_mma_max_tiles(D) >= 4)
        if (ng == 4) return f(std::integral_constant<int, 4>());
    if (ng == 2) return f(std::integral_constant<int, 2>());
    return f(std::integral_constant<int, 1>());
}

/* The tensor-core kernel's block for head_dim D, a cache of ES bytes an element (2, or 1: fp8) and ng tiles a block:
 * its shared memory and threads (mma.cuh's fdec_mma_shape) */
typedef struct {
    size_t smem;
    int threads;
} mma_block;
template <int D, int ES, int NG>
static mma_block mma_block_of() {
    return mma_block{fdec_mma_smem_bytes<D, ES, NG>(), fdec_mma_shape<D, ES, NG>::NW * 32};
}
static mma_block mma_block_for(const fdec_problem *p, int ng) {
    const bool fp8 = fdec_dtype_size(p->kvt) == 1;
    return with_mma_dim(p->D, [&](auto d) {
        constexpr int Dc = decltype(d)::value;
        return with_tiles<Dc>(ng, [&](auto t) {
            constexpr int NG = decltype(t)::value;
            return fp8 ? mma_block_of<Dc, 1, NG>() : mma_block_of<Dc, 2, NG>();
        });
    });
}
static size_t mma_smem(const fdec_problem *p) { return mma_block_for(p, 1).smem; }

/* ---- the plan of a call ---- */

typedef struct {
    partial_fn fn;
    int rt, tiles, fast, mma, threads;
    int one_per_sm;   /* the split aims at one block an SM */
    size_t smem, pipe;
    uint32_t lanes;   /* the split's parallelism */
    fdec_split split;
} launch_plan;

/* Heads per block: the group size rounded up to a power of two, capped by fdec_simt_max_rt (simt.cuh), and at 2
 * where a tile of 4 would keep its block sums' totals in shared memory (fdec_sums_smem_bytes) and the call attends to
 * fewer than WIDE_TILE_MIN positions or the device cannot give a block that memory beside the ring (pipe bytes). A
 * longer span never takes more tiles than a shorter one, so a reserved plan's chunk bound (from more lanes) holds for
 * the shorter calls it serves. Larger groups take several head tiles, whose blocks read the same rows at about the
 * same time, so the repeats come from L2. */
static int heads_per_block(const cuda_impl *c, const fdec_problem *p, int fast, int elems_per_lane, size_t pipe) {
    int cap = fdec_simt_max_rt(fast), rt = 1;
    while (cap > 2 && fdec_sums_smem_bytes(cap, elems_per_lane) &&
           ((uint64_t)p->seq_len - p->lo < WIDE_TILE_MIN ||
            pipe + fdec_sums_smem_bytes(cap, elems_per_lane) + FDEC_CUDA_STATIC_SMEM_MAX > c->smem_optin))
        cap /= 2;
    while (rt < (int)p->R && rt < cap) rt *= 2;
    return rt;
}

/* The fast shapes: head_dim 64, 128, 256 or 512 with every row 16-byte aligned (the caches at kaddr and vaddr, the
 * position and head strides, and a batch's sequence or page stride `seq`, 0 for a single call), of a plain type (f32,
 * 16-bit or fp8). */
static int fast_rows(const fdec_problem *p, size_t seq, uint64_t kaddr, uint64_t vaddr) {
    const size_t es = fdec_dtype_size(p->kvt);
    if (fdec_dtype_table[p->kvt].block > 1) return 0; /* ggml's blocks: the generic path */
    return (p->D == 64 || p->D == 128 || p->D == 256 || p->D == 512) && (p->kv.ps * es) % 16 == 0 &&
           (p->kv.hs * es) % 16 == 0 && (seq * es) % 16 == 0 && kaddr % 16 == 0 && vaddr % 16 == 0;
}

/* Whether the tensor-core kernel serves a call (or a batch) of this shape: 16-bit or fp8 K/V on the fast shapes
 * (head_dim 64-512, 16-byte aligned rows: `fast`) where the device lets a block have its shared memory, unless the
 * tests ask for the SIMT kernel. */
static int use_mma(const cuda_impl *c, const fdec_problem *p, int fast) {
    return fast && (fdec_dtype_size(p->kvt) == 2 || fdec_dtype_is_fp8(p->kvt)) && !c->simt_only &&
           mma_smem(p) + FDEC_CUDA_STATIC_SMEM_MAX <= c->smem_optin;
}

/* Which kernel family serves the call and its head tiles: the tensor-core kernel (8 heads a tile) for 16-bit and fp8
 * K/V on the fast shapes (head_dim 64-512, 16-byte aligned rows) where the device lets a block have its shared memory
 * (every instance fits an A100's 163 KiB; a card of 99 KiB takes the head_dims up to 128); the SIMT kernel otherwise. */
static void choose_kernel(const cuda_impl *c, const fdec_problem *p, uint64_t kaddr, uint64_t vaddr, launch_plan *lp) {
    lp->fast = fast_rows(p, 0, kaddr, vaddr);
    const uint32_t vec = lp->fast ? (uint32_t)(16 / fdec_dtype_size(p->kvt)) : 1,
                   lanes_per_row = p->D / vec < 32 ? p->D / vec : 32;
    const int elems = lp->fast ? (int)(p->D / lanes_per_row) : FDEC_MAX_HEAD_DIM / 32; /* as fdec_shape */
    lp->mma = use_mma(c, p, lp->fast);
    /* every fast SIMT shape's ring is the same size (4 loads a lane a step): take it from one of them; the block sums'
     * totals follow it where they are kept in shared memory (every instance of that tile gets the room) */
    lp->pipe = lp->mma ? mma_smem(p) : lp->fast ? fdec_pipe_bytes<__half, 128>() : 0;
    lp->rt = lp->mma ? 8 : heads_per_block(c, p, lp->fast, elems, lp->pipe);
    if (!lp->mma && lp->fast) lp->pipe += fdec_sums_smem_bytes(lp->rt, elems);
    lp->tiles = (int)((p->R + lp->rt - 1) / lp->rt);
    lp->threads = FDEC_CUDA_WARPS * 32;
}

/* The split: FDEC_CUDA_BLOCKS_PER_SM blocks for every SM in one wave, or for the tensor-core kernel at head_dim 512 and
 * at 64 with a 16-bit cache one block an SM and at most FDEC_MERGE_SMALL_MAX chunks where that leaves at most 1/16 of
 * the SMs idle (an fp8 cache at head_dim 64 carries twice the positions a byte, which one block's warps cannot keep
 * up with); at head_dim 512 shorter chunks (D512_MIN_CHUNK) while the merge stays within FDEC_MERGE_SMALL_MAX. */
static void choose_split(const cuda_impl *c, const fdec_problem *p, launch_plan *lp) {
    const uint32_t per_chunk_blocks = p->G * (uint32_t)lp->tiles;
    uint32_t lanes = (uint32_t)(c->sms * FDEC_CUDA_BLOCKS_PER_SM + per_chunk_blocks - 1) / per_chunk_blocks;
    lp->one_per_sm = lp->mma && (p->D >= 512 || (p->D == 64 && fdec_dtype_size(p->kvt) == 2));
    if (lp->one_per_sm) {
        lanes = (uint32_t)c->sms / per_chunk_blocks; /* at most one block an SM */
        if (lanes < 1) lanes = 1;
        if (lanes > FDEC_MERGE_SMALL_MAX && (uint64_t)FDEC_MERGE_SMALL_MAX * per_chunk_blocks * 16 >= (uint64_t)c->sms * 15)
            lanes = FDEC_MERGE_SMALL_MAX;
    }
    lp->lanes = lanes;
    lp->split = fdec_make_split(p, lanes, c->min_chunk, MAX_CHUNKS);
    if (c->min_chunk == MIN_CHUNK && p->D >= 512) {
        const fdec_split s2 = fdec_make_split(p, lanes, D512_MIN_CHUNK, MAX_CHUNKS);
        if (s2.num_chunks <= FDEC_MERGE_SMALL_MAX && s2.num_chunks > lp->split.num_chunks) lp->split = s2;
    }
}

/* The most chunks of any call of p's shape up to p's length (the chunk count is not monotone in the length:
 * fdec_split_bound), also of one that takes the head_dim 512 rule where p's length does not: a reserve's bound. */
static uint32_t reserve_bound(const cuda_impl *c, const fdec_problem *p, const launch_plan *lp) {
    uint32_t b = fdec_split_bound(p, lp->lanes, c->min_chunk, MAX_CHUNKS);
    if (c->min_chunk == MIN_CHUNK && p->D >= 512) {
        uint32_t b2 = fdec_split_bound(p, lp->lanes, D512_MIN_CHUNK, MAX_CHUNKS);
        if (b2 > FDEC_MERGE_SMALL_MAX) b2 = FDEC_MERGE_SMALL_MAX; /* taken only up to that */
        if (b < b2) b = b2;
    }
    return b > lp->split.num_chunks ? b : lp->split.num_chunks;
}

/* The plan of a call (kaddr, vaddr: the caches' addresses, for the alignment rule; 0 for a reserve or fdec_plan).
 * reserve: num_chunks bounds every call of p's shape up to p's length, not only this one's. */
static launch_plan make_plan(const cuda_impl *c, const fdec_problem *p, uint64_t kaddr, uint64_t vaddr, int reserve) {
    launch_plan lp;
    choose_kernel(c, p, kaddr, vaddr, &lp);
    choose_split(c, p, &lp);
    if (lp.mma) { /* head_dim 512's strided instance where chunks are long (pick_mma) */
        const int strided = c->d512_strided_min && lp.split.num_chunks > 1 && lp.split.chunk_len >= c->d512_strided_min;
        lp.fn = p->kvt == FDEC_F16       ? pick_mma<__half>(p->D, c->cc_major, strided)
                : p->kvt == FDEC_BF16    ? pick_mma<__nv_bfloat16>(p->D, c->cc_major, strided)
                : p->kvt == FDEC_F8_E4M3 ? pick_mma<__nv_fp8_e4m3>(p->D, c->cc_major, strided)
                                         : pick_mma<__nv_fp8_e5m2>(p->D, c->cc_major, strided);
    } else { /* the SIMT instance, with block sums where the chunks are long (pick_sums) */
        const uint32_t cl = lp.split.chunk_len;
        switch (p->kvt) {
        case FDEC_F16: lp.fn = pick_d<__half>(p->D, lp.fast, lp.rt, cl); break;
        case FDEC_BF16: lp.fn = pick_d<__nv_bfloat16>(p->D, lp.fast, lp.rt, cl); break;
        case FDEC_F8_E4M3: lp.fn = pick_d<__nv_fp8_e4m3>(p->D, lp.fast, lp.rt, cl); break;
        case FDEC_F8_E5M2: lp.fn = pick_d<__nv_fp8_e5m2>(p->D, lp.fast, lp.rt, cl); break;
        case FDEC_Q8_0: lp.fn = pick_rt<fdec_q8_0_t, 0>(lp.rt, cl); break;
        case FDEC_Q4_0: lp.fn = pick_rt<fdec_q4_0_t, 0>(lp.rt, cl); break;
        default: lp.fn = pick_d<float>(p->D, lp.fast, lp.rt, cl); break;
        }
    }
    if (reserve) lp.split.num_chunks = reserve_bound(c, p, &lp);
    /* shared memory: the warps' states [2 + D] per head, in the ring's memory after the loop (the tensor-core
     * kernel's tail takes one state a position group, at most FDEC_CUDA_WARPS of them) */
    lp.smem = (2 * FDEC_CUDA_WARPS * lp.rt + (size_t)FDEC_CUDA_WARPS * lp.rt * p->D) * sizeof(float);
    if (lp.smem < lp.pipe) lp.smem = lp.pipe;
    /* A split of one block an SM also asks for more than half an SM's shared memory, so that no SM takes two of its
     * blocks: with the programmatic launch (the decode is launched while the merge before it runs) the block scheduler
     * may otherwise put two on one SM and leave others idle. */
    if (lp.one_per_sm && lp.smem <= c->smem_optin / 2) lp.smem = c->smem_optin / 2 + 16;
    return lp;
}

/* Scratch a call needs: m, l and o of every (head, chunk). */
static size_t state_floats(const fdec_problem *p, uint32_t nc) { return (size_t)p->H * nc * (2 + (size_t)p->D); }

static fdec_status ensure_scratch(cuda_impl *c, size_t floats) {
    if (floats <= c->fcap) return FDEC_OK;
    const size_t bytes = floats * sizeof(float);
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(c->stream, &cs);
    if (cs != cudaStreamCaptureStatusNone)
        return fdec_set_error(FDEC_EINVAL, "the call needs %zu bytes of scratch, more than the context has, and "
                                           "the stream is being captured: call fdec_context_reserve before capture",
                              bytes);
    float *s = NULL;
    cudaError_t e = cudaMalloc((void **)&s, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fdec_set_error(FDEC_ENOMEM, "cudaMalloc of %zu bytes of scratch failed: %s", bytes,
                              cudaGetErrorString(e));
    }
    if (c->scratch) cudaFree(c->scratch); /* synchronises with work still using it */
    c->scratch = s;
    c->fcap = floats;
    return FDEC_OK;
}

static fdec_status cuda_reserve(void *impl, const fdec_problem *p) {
    cuda_impl *c = (cuda_impl *)impl;
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) return cuda_err(e, "cudaSetDevice");
    launch_plan lp = make_plan(c, p, 0, 0, 1);
    /* the split does not depend on alignment, only the kernel does */
    return ensure_scratch(c, state_floats(p, lp.split.num_chunks));
}

/* Kernel attributes, set once per kernel and context rather than on every call: the dynamic shared memory a
 * kernel may use (raised when a call needs more), and the largest shared-memory carveout for both the decode
 * kernels and the merge, so that the SMs need no reconfiguration (an L1 flush) between the two. */
static fdec_status configure(cuda_impl *c, const void *fn, size_t smem) {
    int i = 0;
    while (i < c->nconf && c->conf_fn[i] != fn) i++;
    if (i < c->nconf && c->conf_smem[i] >= smem) return FDEC_OK;
    cudaError_t e = cudaSuccess;
    /* past 48 KiB with the static shared memory a launch needs the opt-in */
    if (smem + FDEC_CUDA_STATIC_SMEM_MAX > 48 * 1024 &&
        (e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) != cudaSuccess)
        return cuda_err(e, "cudaFuncSetAttribute");
    if (i == c->nconf) { /* first time: the carveout (a hint; its failure is harmless) */
        cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
        if (!c->nconf) {
            const void *merges[] = {(const void *)fdec_chunk_merge_kernel<false>,
                                    (const void *)fdec_chunk_merge_kernel<true>,
                                    (const void *)fdec_chunk_merge_small<16>, (const void *)fdec_chunk_merge_small<32>,
                                    (const void *)fdec_chunk_merge_small<64>};
            for (const void *m : merges) cudaFuncSetAttribute(m, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
        }
        if (c->nconf == FDEC_CUDA_CONF_MAX) return FDEC_OK; /* the table is full: set again next time */
        c->conf_fn[i] = fn;
        c->nconf++;
    }
    c->conf_smem[i] = smem;
    return FDEC_OK;
}

/* The kernels' parameters for a call of p planned as lp. */
static fdec_cuda_params call_params(const cuda_impl *c, const fdec_problem *p, const launch_plan *lp, const void *q,
                                    const void *k, const void *v, void *out, float *lse) {
    const uint32_t nc = lp->split.num_chunks;
    fdec_cuda_params prm;
    memset(&prm, 0, sizeof prm);
    prm.q = q, prm.k = k, prm.v = v, prm.out = out, prm.lse = lse;
    prm.part_o = c->scratch; /* 16-byte aligned: cudaMalloc */
    prm.part_m = prm.part_o + (size_t)p->H * nc * p->D;
    prm.part_l = prm.part_m + (size_t)p->H * nc;
    prm.D = p->D, prm.H = p->H, prm.G = p->G, prm.R = p->R;
    prm.lo = lp->split.lo, prm.hi = lp->split.hi;
    prm.ring = p->kv.ring, prm.ring_lo = (uint32_t)fdec_kv_row(&p->kv, p->lo);
    prm.nc = nc, prm.chunk_len = lp->split.chunk_len;
    prm.ps = p->kv.ps, prm.hs = p->kv.hs;
    prm.scale_log2 = p->logits.scale * 1.4426950408889634f;
    prm.qt = (int)p->qt, prm.ot = (int)p->ot;
    prm.logits = p->logits;
    prm.qpos = p->qpos;
    prm.sc = p->scales;
    return prm;
}

/* The merge of nc chunk states: the one-round-trip kernel of 16, 32 or 64 states up to FDEC_MERGE_SMALL_MAX chunks
 * (small: blocks of FDEC_MERGE_THREADS dimensions, no dynamic shared memory), else `big` with its shared memory (a
 * single call's and a batch's merges alike) */
template <typename P>
using merge_fn = void (*)(const P);
template <typename P>
struct merge_pick {
    merge_fn<P> fn;
    bool small;
    size_t smem;
};
template <typename P>
static merge_pick<P> pick_merge(uint32_t nc, merge_fn<P> s16, merge_fn<P> s32, merge_fn<P> s64, merge_fn<P> big) {
    static_assert(FDEC_MERGE_SMALL_MAX == 64, "the largest small merge is of 64 states");
    const bool small = nc <= FDEC_MERGE_SMALL_MAX;
    return {nc <= 16 ? s16 : nc <= 32 ? s32 : small ? s64 : big, small, small ? 0 : fdec_merge_smem_bytes(nc)};
}

static fdec_status cuda_decode(void *impl, const fdec_problem *p, const void *q, const void *k, const void *v,
                               void *out, float *lse) {
    cuda_impl *c = (cuda_impl *)impl;
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) return cuda_err(e, "cudaSetDevice");
    launch_plan lp = make_plan(c, p, (uint64_t)(uintptr_t)k, (uint64_t)(uintptr_t)v, 0);
    const uint32_t nc = lp.split.num_chunks;
    fdec_status st = ensure_scratch(c, state_floats(p, nc));
    if (st) return st;
    const fdec_cuda_params prm = call_params(c, p, &lp, q, k, v, out, lse);
    if ((st = configure(c, (const void *)lp.fn, lp.smem))) return st;
    /* on sm_90 both kernels are programmatic dependent launches (cudaLaunchAttributeProgrammaticStreamSerialization):
     * each may be launched while the kernel before it runs, and waits for its end and writes (fdec_grid_wait) before
     * touching memory */
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3((unsigned)lp.tiles, nc, p->G);
    cfg.blockDim = dim3((unsigned)lp.threads, 1, 1);
    cfg.dynamicSmemBytes = lp.smem;
    cfg.stream = c->stream;
    cfg.attrs = attr;
    cfg.numAttrs = c->cc_major >= 9 ? 1 : 0;
    if ((e = cudaLaunchKernelEx(&cfg, lp.fn, prm)) != cudaSuccess) return cuda_err(e, "the kernel launch");
    /* the merge: a block per (head, slice of the dimensions). Up to 64 chunks, fdec_chunk_merge_small (slices of
     * 128, one L2 round trip); more, slices of 32 with each slice's chunks split among the block's threads */
    const merge_pick<fdec_cuda_params> merge =
        pick_merge<fdec_cuda_params>(nc, fdec_chunk_merge_small<16>, fdec_chunk_merge_small<32>,
                                     fdec_chunk_merge_small<64>,
                                     nc > FDEC_MERGE_SPLIT_CHUNKS ? fdec_chunk_merge_kernel<true>
                                                                  : fdec_chunk_merge_kernel<false>);
    const uint32_t slice = merge.small || nc <= FDEC_MERGE_SPLIT_CHUNKS ? 128 : 32;
    cfg.gridDim = dim3(p->H, (p->D + slice - 1) / slice, 1);
    cfg.blockDim = dim3(FDEC_MERGE_THREADS, 1, 1);
    cfg.dynamicSmemBytes = merge.smem;
    if ((e = cudaLaunchKernelEx(&cfg, merge.fn, prm)) != cudaSuccess)
        return cuda_err(e, "the merge kernel launch");
    return FDEC_OK;
}

/* fdec_plan_info of a call's or a batch's split, scratch and kernel family */
static fdec_status plan_info(fdec_plan_info *info, const fdec_split *s, size_t scratch_floats, int mma, int fast) {
    info->kv_start = s->lo;
    info->kv_end = s->hi;
    info->num_chunks = s->num_chunks;
    info->chunk_len = s->chunk_len;
    info->grouped = 1;
    info->scratch_bytes = scratch_floats * sizeof(float);
    info->path = mma ? "cuda-mma" : fast ? "cuda-vec16" : "cuda-generic";
    return FDEC_OK;
}

static fdec_status cuda_plan(void *impl, const fdec_problem *p, fdec_plan_info *info) {
    const launch_plan lp = make_plan((const cuda_impl *)impl, p, 0, 0, 0);
    return plan_info(info, &lp.split, state_floats(p, lp.split.num_chunks), lp.mma, lp.fast);
}

static fdec_status check_one(const char *name, const void *ptr) {
    if (!ptr) return FDEC_OK;
    cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, ptr);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fdec_set_error(FDEC_EINVAL, "%s (%p) is not a pointer CUDA knows: %s", name, ptr, cudaGetErrorString(e));
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
        return fdec_set_error(FDEC_EINVAL, "%s (%p) is a host pointer; the CUDA backend needs device memory", name,
                              ptr);
    return FDEC_OK;
}

static fdec_status cuda_check_ptr(void *impl, const char *name, const void *ptr) {
    (void)impl;
    return check_one(name, ptr);
}

static void cuda_destroy(void *impl) {
    cuda_impl *c = (cuda_impl *)impl;
    if (c->scratch) {
        cudaSetDevice(c->device);
        cudaFree(c->scratch);
    }
    free(c);
}

/* fdec_merge: fdec_merge_kernel (merge.cuh, the merge code the decode's chunks go through) over up to
 * FDEC_CUDA_MERGE_MAX shards a launch; more shards go through an f32 accumulator in the scratch, which each
 * further launch takes as its shard 0. Asynchronous on the context's stream, like fdec_decode. */
static fdec_status cuda_merge(void *impl, uint32_t n, uint32_t H, uint32_t D, fdec_dtype t, const void *const *outs,
                              const float *const *lses, void *out, float *lse) {
    cuda_impl *c = (cuda_impl *)impl;
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) return cuda_err(e, "cudaSetDevice");
    fdec_status st;
    char name[32];
    for (uint32_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, "outs[%u]", i);
        if ((st = check_one(name, outs[i]))) return st;
        snprintf(name, sizeof name, "lses[%u]", i);
        if ((st = check_one(name, lses[i]))) return st;
    }
    if ((st = check_one("out", out)) || (st = check_one("lse", lse))) return st;
    float *acc = NULL;
    if (n > FDEC_CUDA_MERGE_MAX) {
        if ((st = ensure_scratch(c, (size_t)H * (D + 1)))) return st;
        acc = c->scratch;
    }
    fdec_merge_params mp;
    memset(&mp, 0, sizeof mp);
    mp.H = H, mp.D = D;
    for (uint32_t i = 0; i < n;) {
        const int first = i == 0;
        uint32_t k = 0;
        if (!first) mp.outs[k] = acc, mp.lses[k] = acc + (size_t)H * D, k++;
        while (k < FDEC_CUDA_MERGE_MAX && i < n) mp.outs[k] = outs[i], mp.lses[k] = lses[i], k++, i++;
        const int last = i == n;
        mp.n = k;
        mp.out = last ? out : acc;
        mp.lse = last ? lse : acc + (size_t)H * D;
        mp.ot = last ? (int)t : (int)FDEC_F32;
        /* the shards' dtype and slot 0's (an f32 accumulator after the first launch) */
        void (*kern)(const fdec_merge_params) =
            t == FDEC_F32   ? fdec_merge_kernel<0, 0>
            : t == FDEC_F16 ? (first ? fdec_merge_kernel<1, 1> : fdec_merge_kernel<1, 0>)
                            : (first ? fdec_merge_kernel<2, 2> : fdec_merge_kernel<2, 0>);
        kern<<<(H + 7) / 8, FDEC_CUDA_WARPS * 32, 0, c->stream>>>(mp);
        if ((e = cudaGetLastError()) != cudaSuccess) return cuda_err(e, "the merge kernel launch");
    }
    return FDEC_OK;
}

/* ---- batches (batch.cuh) ---- */

typedef void (*batch_fn)(const fdec_batch_params);

/* The batch kernel's instance: head tiles of 4 rows with 16-byte loads on the fast shapes, 2 rows on the generic. */
template <typename KT>
static batch_fn pick_batch(uint32_t D, int fast) {
    if (fast) switch (D) {
        case 64: return fdec_batch_kernel<KT, 64, 4>;
        case 128: return fdec_batch_kernel<KT, 128, 4>;
        case 256: return fdec_batch_kernel<KT, 256, 4>;
        case 512: return fdec_batch_kernel<KT, 512, 4>;
        }
    return fdec_batch_kernel<KT, 0, 2>;
}

/* The tensor-core instance for a batch (mma.cuh over fdec_mma_work<fdec_batch_params>): ng tiles of 8 rows a block
 * (batch_tiles). */
template <typename KT>
static batch_fn pick_batch_mma(uint32_t D, int ng) {
    return with_mma_dim(D, [&](auto d) {
        constexpr int Dc = decltype(d)::value;
        return with_tiles<Dc>(ng, [&](auto t) {
            return (batch_fn)fdec_mma_kernel<KT, Dc, false, fdec_batch_params, decltype(t)::value>;
        });
    });
}

/* Tiles of 8 rows a tensor-core block of a batch: enough for a sequence's rows (nq x R), up to fdec_mma_max_tiles, so
 * that K/V is read once for all its tokens. */
static int batch_tiles(const fdec_problem *p) {
    const int most = fdec_mma_max_tiles((int)p->D);
    int ng = 1;
    while (ng < most && 8u * ng < p->nq * p->R) ng *= 2;
    return ng;
}

typedef struct {
    batch_fn fn;
    int rt, threads;
    uint32_t tiles, rows; /* head tiles a KV head; rows the scratch holds (num_seqs x max_q_len) */
    size_t smem;
    fdec_split split;     /* of the longest attended range the batch's bounds allow */
    int mma, fast;        /* the kernel family (fdec_plan_info's path) */
} batch_plan;

/* A batch's plan: the kernel by the shape and alignment (kaddr, vaddr: the caches; 0 for a reserve) as a single
 * call's (use_mma: the tensor-core kernel for 16-bit and fp8 caches on its shapes, else the SIMT one), the split of
 * the batch's largest problem (bp->p: max_seq_len positions, max_q_len tokens) for FDEC_CUDA_BLOCKS_PER_SM blocks an
 * SM as if it were alone. Nothing depends on num_seqs but the rows, so a sequence's chunks, and bits, are its own. */
static batch_plan make_batch_plan(const cuda_impl *c, const fdec_batch_problem *bp, uint64_t kaddr, uint64_t vaddr) {
    const fdec_problem *p = &bp->p;
    const fdec_batch *b = bp->b;
    const int fast = fast_rows(p, b->page_size ? p->kv.page_stride : b->kv_seq_stride, kaddr, vaddr);
    batch_plan bl;
    const int mma = use_mma(c, p, fast);
    int ng = mma ? batch_tiles(p) : 1;
    mma_block mb = mma_block_for(p, ng);
    while (ng > 1 && mb.smem + FDEC_CUDA_STATIC_SMEM_MAX > c->smem_optin) mb = mma_block_for(p, ng /= 2);
    switch (p->kvt) {
    case FDEC_F16: bl.fn = mma ? pick_batch_mma<__half>(p->D, ng) : pick_batch<__half>(p->D, fast); break;
    case FDEC_BF16: bl.fn = mma ? pick_batch_mma<__nv_bfloat16>(p->D, ng) : pick_batch<__nv_bfloat16>(p->D, fast); break;
    case FDEC_F8_E4M3: bl.fn = mma ? pick_batch_mma<__nv_fp8_e4m3>(p->D, ng) : pick_batch<__nv_fp8_e4m3>(p->D, fast); break;
    case FDEC_F8_E5M2: bl.fn = mma ? pick_batch_mma<__nv_fp8_e5m2>(p->D, ng) : pick_batch<__nv_fp8_e5m2>(p->D, fast); break;
    case FDEC_Q8_0: bl.fn = fdec_batch_kernel<fdec_q8_0_t, 0, 2>; break;
    case FDEC_Q4_0: bl.fn = fdec_batch_kernel<fdec_q4_0_t, 0, 2>; break;
    default: bl.fn = pick_batch<float>(p->D, fast); break;
    }
    bl.rt = mma ? 8 * ng : fast ? 4 : 2;
    bl.threads = mma ? mb.threads : FDEC_CUDA_WARPS * 32;
    bl.tiles = (p->nq * p->R + bl.rt - 1) / bl.rt;
    bl.rows = b->num_seqs * p->nq;
    const uint32_t per_chunk = p->G * bl.tiles;
    const uint32_t lanes = (uint32_t)(c->sms * FDEC_CUDA_BLOCKS_PER_SM + per_chunk - 1) / per_chunk;
    bl.split = fdec_make_split(p, lanes, c->min_chunk == MIN_CHUNK ? FDEC_BATCH_MIN_CHUNK : c->min_chunk, MAX_CHUNKS);
    bl.smem = mma ? mb.smem : fdec_batch_smem(bl.rt, p->D);
    bl.mma = mma, bl.fast = fast;
    return bl;
}

/* Scratch of a batch: every (row, head)'s chunk states, then num_seqs + 1 sequence records and a row's chunk count
 * (batch.cuh). */
static size_t batch_floats(const fdec_batch_problem *bp, const batch_plan *bl) {
    return (size_t)bl->rows * bp->p.H * bl->split.num_chunks * (2 + (size_t)bp->p.D) +
           (bp->b->num_seqs + 1) * (sizeof(fdec_batch_seq_info) / sizeof(float)) + bl->rows;
}

/* fdec_plan_batch: the batch's own split (its largest sequence's chunks) and the scratch of all its sequences */
static fdec_status cuda_plan_batch(void *impl, const fdec_batch_problem *bp, fdec_plan_info *info) {
    const batch_plan bl = make_batch_plan((const cuda_impl *)impl, bp, 0, 0);
    return plan_info(info, &bl.split, batch_floats(bp, &bl), bl.mma, bl.fast);
}

static fdec_status cuda_reserve_batch(void *impl, const fdec_batch_problem *bp) {
    cuda_impl *c = (cuda_impl *)impl;
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) return cuda_err(e, "cudaSetDevice");
    const batch_plan bl = make_batch_plan(c, bp, 0, 0);
    return ensure_scratch(c, batch_floats(bp, &bl));
}

static fdec_status cuda_decode_batch(void *impl, const fdec_batch_problem *bp, const void *q, const void *k,
                                     const void *v, void *out, float *lse) {
    cuda_impl *c = (cuda_impl *)impl;
    const fdec_problem *p = &bp->p;
    const fdec_batch *b = bp->b;
    if (b->num_seqs > 65535)
        return fdec_set_error(FDEC_EINVAL, "batch->num_seqs (%u) must be at most 65535 on the CUDA backend",
                              b->num_seqs);
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) return cuda_err(e, "cudaSetDevice");
    const batch_plan bl = make_batch_plan(c, bp, (uint64_t)(uintptr_t)k, (uint64_t)(uintptr_t)v);
    fdec_status st = ensure_scratch(c, batch_floats(bp, &bl));
    if (st || (st = configure(c, (const void *)bl.fn, bl.smem))) return st;
    const uint32_t nc = bl.split.num_chunks;
    const size_t states = (size_t)bl.rows * p->H * nc;
    fdec_batch_params prm;
    memset(&prm, 0, sizeof prm);
    prm.q = q, prm.k = k, prm.v = v, prm.out = out, prm.lse = lse;
    prm.seq_lens = b->seq_lens, prm.q_lens = b->q_lens;
    prm.kv = p->kv;
    prm.kv.pages = b->page_size ? b->page_table : NULL;
    prm.kv.ss = b->page_size || b->num_seqs == 1 ? 0 : b->kv_seq_stride;
    prm.max_pages = b->max_pages, prm.num_pages = b->num_pages;
    prm.part_o = c->scratch;
    prm.part_m = prm.part_o + states * p->D;
    prm.part_l = prm.part_m + states;
    prm.info = reinterpret_cast<fdec_batch_seq_info *>(prm.part_l + states);
    prm.row_chunks = reinterpret_cast<uint32_t *>(prm.info + b->num_seqs + 1);
    prm.B = b->num_seqs, prm.max_seq_len = b->max_seq_len, prm.max_q_len = p->nq;
    prm.D = p->D, prm.H = p->H, prm.G = p->G, prm.R = p->R, prm.window = p->window;
    prm.nc = nc, prm.chunk_len = bl.split.chunk_len, prm.tiles = bl.tiles;
    prm.scale_log2 = p->logits.scale * 1.4426950408889634f;
    prm.qt = (int)p->qt, prm.ot = (int)p->ot;
    prm.logits = p->logits;
    prm.sc = p->scales;
    /* three programmatic dependent launches on sm_90, as cuda_decode's: the check, the decode, the merge */
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.stream = c->stream;
    cfg.attrs = attr;
    cfg.numAttrs = c->cc_major >= 9 ? 1 : 0;
    cfg.gridDim = dim3(b->num_seqs, 1, 1);
    cfg.blockDim = dim3(FDEC_BATCH_CHECK_THREADS, 1, 1);
    if ((e = cudaLaunchKernelEx(&cfg, fdec_batch_check, prm)) != cudaSuccess) return cuda_err(e, "the check launch");
    cfg.gridDim = dim3(bl.tiles * p->G, nc, b->num_seqs);
    cfg.blockDim = dim3(bl.threads, 1, 1);
    cfg.dynamicSmemBytes = bl.smem;
    if ((e = cudaLaunchKernelEx(&cfg, bl.fn, prm)) != cudaSuccess) return cuda_err(e, "the batch kernel launch");
    /* the merge: a block per (row, head), and per slice of FDEC_MERGE_THREADS dimensions up to 64 chunks */
    const merge_pick<fdec_batch_params> merge =
        pick_merge<fdec_batch_params>(nc, fdec_batch_merge_small<16>, fdec_batch_merge_small<32>,
                                      fdec_batch_merge_small<64>, fdec_batch_merge);
    cfg.gridDim = dim3((unsigned)((size_t)bl.rows * p->H),
                       merge.small ? (p->D + FDEC_MERGE_THREADS - 1) / FDEC_MERGE_THREADS : 1, 1);
    cfg.blockDim = dim3(FDEC_MERGE_THREADS, 1, 1);
    cfg.dynamicSmemBytes = merge.smem;
    if ((e = cudaLaunchKernelEx(&cfg, merge.fn, prm)) != cudaSuccess) return cuda_err(e, "the batch merge launch");
    return FDEC_OK;
}

/* fdec_kv_write: a block per (token, KV head), the slots checked on the device (batch.cuh). */
static fdec_status cuda_kv_write(void *impl, const fdec_problem *p, const fdec_kv_slots *s, const void *k_src,
                                 const void *v_src, void *k, void *v) {
    cuda_impl *c = (cuda_impl *)impl;
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) return cuda_err(e, "cudaSetDevice");
    fdec_kv_write_params prm;
    memset(&prm, 0, sizeof prm);
    prm.ks = k_src, prm.vs = v_src, prm.k = k, prm.v = v;
    prm.slots = s->slots, prm.num_slots = s->num_slots;
    prm.kv = p->kv;
    prm.n = s->num_tokens, prm.G = p->G, prm.D = p->D;
    prm.st = (int)s->src_dtype, prm.ct = (int)p->kvt;
    if (p->G > 65535) return fdec_set_error(FDEC_EINVAL, "num_kv_heads (%u) must be at most 65535 here", p->G);
    fdec_kv_write_kernel<<<dim3(s->num_tokens, p->G, 1), 128, 0, c->stream>>>(prm);
    if ((e = cudaGetLastError()) != cudaSuccess) return cuda_err(e, "the kv_write launch");
    return FDEC_OK;
}

static const fdec_backend_ops cuda_ops = {cuda_destroy, cuda_reserve,      cuda_decode,        cuda_plan,
                                          cuda_check_ptr, cuda_merge,      cuda_decode_batch,  cuda_reserve_batch,
                                          cuda_kv_write,  cuda_plan_batch};

extern "C" fdec_status fdec_cuda_create(const fdec_options *o, const fdec_test_options *t, void **impl,
                                        const fdec_backend_ops **ops) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        return fdec_set_error(FDEC_EUNSUPPORTED, "no CUDA device is available%s%s", e != cudaSuccess ? ": " : "",
                              e != cudaSuccess ? cudaGetErrorString(e) : "");
    }
    if (o->cuda_device < 0 || o->cuda_device >= n)
        return fdec_set_error(FDEC_EINVAL, "cuda_device (%d) must be in 0..%d", o->cuda_device, n - 1);
    int sms = 0;
    if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, o->cuda_device)) != cudaSuccess)
        return cuda_err(e, "cudaDeviceGetAttribute");
    cuda_impl *c = (cuda_impl *)calloc(1, sizeof *c);
    if (!c) return fdec_set_error(FDEC_ENOMEM, "out of memory creating the CUDA backend");
    c->device = o->cuda_device;
    c->sms = sms;
    cudaDeviceGetAttribute(&c->cc_major, cudaDevAttrComputeCapabilityMajor, o->cuda_device);
    int optin = 48 * 1024;
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, o->cuda_device);
    c->smem_optin = (size_t)optin;
    c->min_chunk = t && t->cuda_min_chunk ? t->cuda_min_chunk : MIN_CHUNK;
    c->d512_strided_min = t && t->cuda_d512_strided_min ? t->cuda_d512_strided_min : FDEC_MMA_D512_STRIDED_MIN;
    c->simt_only = t && t->cuda_simt_only;
    c->stream = (cudaStream_t)o->cuda_stream;
    *impl = c;
    *ops = &cuda_ops;
    return FDEC_OK;
}

/* cuda.cu — the CUDA backend: device and stream, scratch, the split rule for the GPU, kernel choice and
 * launch. The kernel is in kernels.cuh.
 *
 * A call launches two kernels on the context's stream (the decode, then the merge of its chunks) and nothing
 * else: no allocation once
 * the scratch is large enough (fdec_context_reserve, or the first call of the largest shape), no copy, no
 * synchronisation, so it can be captured into a CUDA graph. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "../internal.h"
}
#include "kernels.cuh"
#include "mma.cuh"

/* Blocks per SM the split aims at: FDEC_CUDA_BLOCKS_PER_SM (kernels.cuh), also the tensor-core kernel's launch
 * bounds. */
/* Shortest chunk: one step of a block (4 warps x up to 8 rows), below which blocks only add merge work.
 * FDEC_CUDA_MIN_CHUNK overrides it, for benchmarking the split (bench/NOTES.md). */
#define MIN_CHUNK 64
/* Shortest chunk at head_dim 512 while the merge stays at 64 chunks or fewer (0: MIN_CHUNK). Gemma 4 full 1k
 * 12.3 -> 10.0 us, 2k 12.9 -> 12.1, 4k on unchanged (bench/NOTES.md, CUDA log row 25). */
#ifndef D512_MIN_CHUNK
#define D512_MIN_CHUNK 32
#endif
/* 1: at head_dim 512 the split aims at one block per SM instead of FDEC_CUDA_BLOCKS_PER_SM, and at no more chunks
 * than the one-round-trip merge takes (FDEC_MERGE_SMALL_MAX, 64) where that still leaves at most 1/16 of the SMs
 * idle: one block of head_dim 512 an SM streams as fast as two, and the merge of 64 chunks costs less than that of
 * 128. Gemma 4 full (2 KV heads: 128 -> 64 chunks) 8k 22.0 -> 18.9 us, 16k 31.3 -> 27.5, 32k 48.0 -> 44.0, 64k
 * 80.5 -> 76.4, 131k 143.8 -> 141.3; 32 chunks (half the SMs) was 1.3-1.9x slower (bench/NOTES.md, CUDA log row
 * 32). 0: the rule of the other head_dims. */
#ifndef D512_ONE_BLOCK_PER_SM
#define D512_ONE_BLOCK_PER_SM 1
#endif
/* 1: the same at head_dim 64 (8 KV heads: 33 -> 16 chunks): LFM2 2k 6.1 -> 5.9 us, 8k 9.3 -> 8.9, 32k 21.4 -> 21.1,
 * 64k 37.6 -> 36.5, 131k 69.4 -> 66.6 (head-major 70.4 -> 67.6), 1k even; at head_dim 128 and 256 one block an SM
 * was 1.2-1.6x slower (bench/NOTES.md, CUDA log row 32). */
#ifndef D64_ONE_BLOCK_PER_SM
#define D64_ONE_BLOCK_PER_SM 1
#endif
/* 1: those splits make sure of one block an SM by their shared memory (make_plan) */
#ifndef FDEC_CUDA_ONE_BLOCK_SMEM
#define FDEC_CUDA_ONE_BLOCK_SMEM 1
#endif
/* Most chunks per head: bounds the scratch and the merge's loop. */
#define MAX_CHUNKS FDEC_CUDA_MAX_CHUNKS

/* 1: the decode kernel too is a programmatic dependent launch on sm_90 (cuda_decode): its blocks may be placed while
 * the kernel before it in the stream ends, and wait in fdec_grid_wait, before their first access to memory, until
 * that kernel has finished and its writes are visible. Behind flashdec's own merge, which lets it launch at its start
 * (FDEC_MERGE_TRIGGER, kernels.cuh), back to back calls (torch_peer, us): LFM2 1k 5.49 -> 4.76, 4k 7.4 -> 6.6,
 * Llama 1k 5.93 -> 5.73-5.80, 4k 10.1-10.2 -> 9.4-9.6, the window 7.4 -> 6.7; `flashdec bench`: Llama 1k 5.5 -> 5.6,
 * Gemma 4 full 4k 10.7 -> 10.9. Behind a PyTorch add between the calls (an engine's own kernel, which does not
 * trigger): Llama 1k 6.96 -> 6.76, LFM2 1k 6.50 -> 6.34, the window 8.5 -> 8.4, 32k even (bench/NOTES.md, CUDA log
 * row 66; session 5's kernels had lost 0.3-0.6 us with it, row 21). */
#ifndef FDEC_CUDA_PDL_DECODE
#define FDEC_CUDA_PDL_DECODE 1
#endif
/* A measurement build (results wrong on purpose): no merge launch, so that the decode kernel's own time shows
 * (bench/NOTES.md, CUDA log row 28). */
#ifndef FDEC_CUDA_MEASURE_NO_MERGE
#define FDEC_CUDA_MEASURE_NO_MERGE 0
#endif
/* Bounds the static shared memory of a tensor-core kernel (its mbarriers and the tail's arrays: 1,248-1,376 bytes in
 * the sm_90 build, 128-224 in the sm_80 one), for the check of a kernel's shared memory against the device's limit
 * (make_plan). */
#define FDEC_CUDA_STATIC_SMEM_MAX 2048
#define FDEC_CUDA_CONF_MAX 32 /* kernels a context remembers as configured (a model uses a few) */

typedef struct {
    int device, sms, cc_major;
    size_t smem_optin; /* the most shared memory a block may ask for (cudaDevAttrMaxSharedMemoryPerBlockOptin) */
    uint32_t min_chunk;
    uint32_t d512_strided_min; /* FDEC_MMA_D512_STRIDED_MIN, or FDEC_CUDA_D512_STRIDED_MIN from the environment */
    int simt_only; /* FDEC_CUDA_KERNEL=simt: never the tensor-core kernel (for comparisons and tests) */
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

/* ---- kernel choice ---- */

typedef void (*partial_fn)(const fdec_cuda_params);

/* The instance of RT heads for chunks of chunk_len rows: with block sums (fdec_decode_kernel's SUMS) where a lane
 * group sums more than FDEC_CUDA_SUM_MIN_TERMS of them (a block's warps x GROUPS lane groups each take every
 * (warps x GROUPS)-th row) and where they are compiled (fdec_sums_ok) */
template <typename KT, int D, int RT>
static partial_fn pick_sums(uint32_t chunk_len) {
    if constexpr (fdec_sums_ok<KT, D, RT>)
        if (chunk_len > (uint64_t)FDEC_CUDA_SUM_MIN_TERMS * FDEC_CUDA_WARPS * fdec_shape<KT, D>::GROUPS)
            return fdec_decode_kernel<KT, D, RT, true>;
    return fdec_decode_kernel<KT, D, RT, false>;
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

/* The tensor-core kernel for head_dim D on a device of compute capability major cc, and its dynamic shared memory:
 * the instance with fdec_mma_warps(D, cc) warps (8 at head_dim 512 on sm_90 in a build with bulk copies,
 * FDEC_MMA_TMA; 4 elsewhere), whose ring has padded rows where bulk copies run */
template <typename KT, int D>
static partial_fn mma_fn(int cc) {
    return cc >= 9 ? fdec_mma_kernel<KT, D, fdec_mma_warps(D, 9)> : fdec_mma_kernel<KT, D, fdec_mma_warps(D, 8)>;
}
template <int D>
static size_t mma_smem_d(int cc) {
    return cc >= 9 ? fdec_mma_smem_bytes<D, fdec_mma_warps(D, 9)>(true)
                   : fdec_mma_smem_bytes<D, fdec_mma_warps(D, 8)>(false);
}

/* strided: head_dim 512's instance with strided steps (FDEC_MMA_D512_STRIDED_MIN, mma.cuh; sm_90) */
template <typename KT>
static partial_fn pick_mma(uint32_t D, int cc, int strided) {
    switch (D) {
    case 64: return mma_fn<KT, 64>(cc);
    case 128: return mma_fn<KT, 128>(cc);
    case 256: return mma_fn<KT, 256>(cc);
    default:
#if FDEC_MMA_STRIDED_CHUNKS
        if (strided && cc >= 9) return fdec_mma_kernel<KT, 512, fdec_mma_warps(512, 9), true>;
#endif
        (void)strided;
        return mma_fn<KT, 512>(cc);
    }
}

static size_t mma_smem(uint32_t D, int cc) {
    switch (D) {
    case 64: return mma_smem_d<64>(cc);
    case 128: return mma_smem_d<128>(cc);
    case 256: return mma_smem_d<256>(cc);
    default: return mma_smem_d<512>(cc);
    }
}

typedef struct {
    partial_fn fn;
    int rt, tiles, fast, mma, threads;
    size_t smem, pipe;
    fdec_split split;
} launch_plan;

/* The SIMT kernel's tiles of 4 heads at 16 elements a lane (head_dim 512), whose block sums keep their totals in
 * shared memory (kernels.cuh, fdec_sums_in_smem), only for calls that attend to at least this many positions. On an
 * H200 they took Gemma 4 full layers (8 heads a KV head) from 43.8 to 41.4 us at 8k and 620.6 to 505.8 at 131k with
 * f32 K/V, 29.9 to 27.3 and 388.3 to 303.2 with the SIMT kernel forced on f16; but shorter calls, whose blocks wait on
 * their few steps' latency rather than on memory, from 9.8 to 12.6 us at 1k and 24.2 to 24.8 at 4k (bench/NOTES.md,
 * CUDA log row 83). */
#ifndef FDEC_CUDA_WIDE_TILE_MIN
#define FDEC_CUDA_WIDE_TILE_MIN 8192
#endif

/* Heads per block: the group size rounded up to a power of two, capped by fdec_simt_max_rt (kernels.cuh), and at 2
 * where a tile of 4 would keep its block sums' totals in shared memory (fdec_sums_smem_bytes) and the call attends to
 * fewer than FDEC_CUDA_WIDE_TILE_MIN positions or the device cannot give a block that memory beside the ring (pipe
 * bytes). A longer span never takes more tiles than a shorter one, so a reserved plan's chunk bound (from more
 * lanes) holds for the shorter calls it serves. Larger groups take several head tiles, whose blocks read the same
 * rows at about the same time, so the repeats come from L2. */
static int heads_per_block(const cuda_impl *c, const fdec_problem *p, int fast, int elems_per_lane, size_t pipe) {
    int cap = fdec_simt_max_rt(fast), rt = 1;
    while (cap > 2 && fdec_sums_smem_bytes(cap, elems_per_lane) &&
           ((uint64_t)p->seq_len - p->lo < FDEC_CUDA_WIDE_TILE_MIN ||
            pipe + fdec_sums_smem_bytes(cap, elems_per_lane) + FDEC_CUDA_STATIC_SMEM_MAX > c->smem_optin))
        cap /= 2;
    while (rt < (int)p->R && rt < cap) rt *= 2;
    return rt;
}

/* reserve: num_chunks bounds every call of p's shape up to p's length (the scratch of fdec_context_reserve), not
 * only this one's. */
static launch_plan make_plan(const cuda_impl *c, const fdec_problem *p, uint64_t kaddr, uint64_t vaddr, int reserve) {
    launch_plan lp;
    const size_t es = fdec_dtype_size(p->kvt);
    const int dfast = p->D == 64 || p->D == 128 || p->D == 256 || p->D == 512;
    lp.fast = dfast && (p->kv.ps * es) % 16 == 0 && (p->kv.hs * es) % 16 == 0 && kaddr % 16 == 0 && vaddr % 16 == 0;
    uint32_t vec = (uint32_t)(16 / es), lanes_per_row = p->D / vec < 32 ? p->D / vec : 32;
    int elems = lp.fast ? (int)(p->D / lanes_per_row) : FDEC_MAX_HEAD_DIM / 32; /* as fdec_shape */
    /* 16-bit K/V on the fast shapes: the tensor-core kernel (mma.cuh), 8 heads a tile */
    lp.mma = lp.fast && es == 2 && !c->simt_only;
    /* ... where the device lets a block have the kernel's shared memory (the static part, under 2 KiB, on top): every
     * instance fits an A100's 163 KiB and even the 99 KiB of an sm_86/89 card, where the rows come by cp.async; a
     * device with less runs the SIMT kernel */
    if (lp.mma && mma_smem(p->D, c->cc_major) + FDEC_CUDA_STATIC_SMEM_MAX > c->smem_optin) lp.mma = 0;
    /* every fast SIMT shape's ring is the same size (4 loads a lane a step): take it from one of them; the block sums'
     * totals follow it where they are kept in shared memory (every instance of that tile gets the room) */
    lp.pipe = lp.mma ? mma_smem(p->D, c->cc_major) : lp.fast ? fdec_pipe_bytes<__half, 128>() : 0;
    lp.rt = lp.mma ? 8 : heads_per_block(c, p, lp.fast, elems, lp.pipe);
    if (!lp.mma && lp.fast) lp.pipe += fdec_sums_smem_bytes(lp.rt, elems);
    lp.tiles = (int)((p->R + lp.rt - 1) / lp.rt);
    lp.threads = (lp.mma ? fdec_mma_warps((int)p->D, c->cc_major) : FDEC_CUDA_WARPS) * 32;
    /* split: FDEC_CUDA_BLOCKS_PER_SM blocks for every SM (one at head_dim 64 and 512: D64_ONE_BLOCK_PER_SM,
     * D512_ONE_BLOCK_PER_SM), one wave (2 and 4 waves of shorter chunks were 2-34% slower, also with the decode
     * loop's compute compiled out: CUDA log row 24) */
    uint32_t per_chunk_blocks = p->G * (uint32_t)lp.tiles;
    uint32_t lanes = (uint32_t)(c->sms * FDEC_CUDA_BLOCKS_PER_SM + per_chunk_blocks - 1) / per_chunk_blocks;
    const int one_per_sm = lp.mma && ((D512_ONE_BLOCK_PER_SM && p->D >= 512) || (D64_ONE_BLOCK_PER_SM && p->D == 64));
    if (one_per_sm) {
        lanes = (uint32_t)c->sms / per_chunk_blocks; /* at most one block an SM */
        if (lanes < 1) lanes = 1;
        if (lanes > FDEC_MERGE_SMALL_MAX && (uint64_t)FDEC_MERGE_SMALL_MAX * per_chunk_blocks * 16 >= (uint64_t)c->sms * 15)
            lanes = FDEC_MERGE_SMALL_MAX;
    }
    lp.split = fdec_make_split(p, lanes, c->min_chunk, MAX_CHUNKS);
#if D512_MIN_CHUNK
    /* head_dim 512 (4 times the bytes a row of head_dim 128): shorter chunks while that keeps the merge at 64
     * chunks or fewer (fdec_chunk_merge_small), so that short calls have more blocks (CUDA log row 23: Gemma 4
     * full 1k 13.1 -> 10.5 us with 32 everywhere, but 4k 16.0 -> 18.3 with its 128 chunks) */
    if (c->min_chunk == MIN_CHUNK && p->D >= 512) {
        const fdec_split s2 = fdec_make_split(p, lanes, D512_MIN_CHUNK, MAX_CHUNKS);
        if (s2.num_chunks <= FDEC_MERGE_SMALL_MAX && s2.num_chunks > lp.split.num_chunks) lp.split = s2;
    }
#endif
    if (lp.mma) { /* head_dim 512's strided instance where chunks are long (pick_mma) */
        const int strided = c->d512_strided_min && lp.split.num_chunks > 1 && lp.split.chunk_len >= c->d512_strided_min;
        lp.fn = p->kvt == FDEC_F16 ? pick_mma<__half>(p->D, c->cc_major, strided)
                                   : pick_mma<__nv_bfloat16>(p->D, c->cc_major, strided);
    } else { /* the SIMT instance, with block sums where the chunks are long (pick_sums) */
        const uint32_t cl = lp.split.chunk_len;
        switch (p->kvt) {
        case FDEC_F16: lp.fn = pick_d<__half>(p->D, lp.fast, lp.rt, cl); break;
        case FDEC_BF16: lp.fn = pick_d<__nv_bfloat16>(p->D, lp.fast, lp.rt, cl); break;
        default: lp.fn = pick_d<float>(p->D, lp.fast, lp.rt, cl); break;
        }
    }
    if (reserve) {
        /* every call up to p's length (the chunk count is not monotone in the length: fdec_split_bound), also one
         * that takes the head_dim 512 rule above where p's length does not (up to 64 chunks where a longer call
         * takes 33) */
        uint32_t b = fdec_split_bound(p, lanes, c->min_chunk, MAX_CHUNKS);
#if D512_MIN_CHUNK
        if (c->min_chunk == MIN_CHUNK && p->D >= 512) {
            uint32_t b2 = fdec_split_bound(p, lanes, D512_MIN_CHUNK, MAX_CHUNKS);
            if (b2 > FDEC_MERGE_SMALL_MAX) b2 = FDEC_MERGE_SMALL_MAX; /* taken only up to that */
            if (b < b2) b = b2;
        }
#endif
        if (b > lp.split.num_chunks) lp.split.num_chunks = b;
    }
    /* shared memory: the warps' states [2 + D] per head, in the ring's memory after the loop */
    lp.smem = (2 * FDEC_CUDA_WARPS * lp.rt + (size_t)FDEC_CUDA_WARPS * lp.rt * p->D) * sizeof(float);
    /* (the tensor-core kernel's tail takes one state a position group, at most FDEC_CUDA_WARPS of them) */
    if (lp.smem < lp.pipe) lp.smem = lp.pipe;
    /* A split of one block an SM also asks for more than half an SM's shared memory, so that no SM takes two of its
     * blocks: the grid has fewer blocks than the device has SMs, and with the programmatic launch (the decode is
     * launched while the merge before it runs) the block scheduler may put two on one SM and leave others idle (what
     * the figures below point to; the placement itself was not observed). bf16 LFM2 (head_dim 64) lost 24% without
     * this: 32k 23.1 -> 28.4 us, 131k 78.4 -> 97.5, at 153 or 166 registers a thread against 151 (alone under ncu
     * the 151 and 153 builds took the same time; without the programmatic launch the 166 one ran at 23.5 and 78.0)
     * (bench/NOTES.md, CUDA log row 79). */
    if (FDEC_CUDA_ONE_BLOCK_SMEM && one_per_sm && lp.smem <= c->smem_optin / 2) lp.smem = c->smem_optin / 2 + 16;
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
    /* past 48 KiB with the static shared memory a launch needs the opt-in (a build with a head_dim 64 ring of three
     * 16 KiB stages, exactly 48 KiB, failed every launch without it: bench/NOTES.md, CUDA log row 40) */
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

static fdec_status cuda_decode(void *impl, const fdec_problem *p, const void *q, const void *k, const void *v,
                               void *out, float *lse) {
    cuda_impl *c = (cuda_impl *)impl;
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) return cuda_err(e, "cudaSetDevice");
    launch_plan lp = make_plan(c, p, (uint64_t)(uintptr_t)k, (uint64_t)(uintptr_t)v, 0);
    const uint32_t nc = lp.split.num_chunks;
    fdec_status st = ensure_scratch(c, state_floats(p, nc));
    if (st) return st;
    fdec_cuda_params prm;
    memset(&prm, 0, sizeof prm);
    prm.q = q, prm.k = k, prm.v = v, prm.out = out, prm.lse = lse;
    prm.part_o = c->scratch; /* 16-byte aligned: cudaMalloc */
    prm.part_m = prm.part_o + (size_t)p->H * nc * p->D;
    prm.part_l = prm.part_m + (size_t)p->H * nc;
    prm.D = p->D, prm.H = p->H, prm.G = p->G, prm.R = p->R;
    prm.lo = lp.split.lo, prm.hi = lp.split.hi, prm.ring = p->kv.ring, prm.ring_lo = (uint32_t)fdec_kv_row(p->kv.ring, p->lo);
    prm.nc = nc, prm.chunk_len = lp.split.chunk_len;
    prm.ps = p->kv.ps, prm.hs = p->kv.hs;
    prm.scale_log2 = p->logits.scale * 1.4426950408889634f;
    prm.qt = (int)p->qt, prm.ot = (int)p->ot;
    if ((st = configure(c, (const void *)lp.fn, lp.smem))) return st;
    /* on sm_90 both kernels are programmatic dependent launches (cudaLaunchAttributeProgrammaticStreamSerialization):
     * each may be launched while the kernel before it runs, and waits for its end and writes (fdec_grid_wait) before
     * touching memory (the decode with FDEC_CUDA_PDL_DECODE, CUDA log row 66). */
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
    cfg.numAttrs = c->cc_major >= 9 && FDEC_CUDA_PDL_DECODE ? 1 : 0;
    if ((e = cudaLaunchKernelEx(&cfg, lp.fn, prm)) != cudaSuccess) return cuda_err(e, "the kernel launch");
    /* the merge: a block per (head, slice of the dimensions). Up to 64 chunks, fdec_chunk_merge_small (slices of
     * 128, one L2 round trip: CUDA log row 21); more, slices of 32 with each slice's chunks split among the block's
     * threads (CUDA log row 17) */
    if (FDEC_CUDA_MEASURE_NO_MERGE) return FDEC_OK;
    const int small = FDEC_MERGE_SMALL && nc <= FDEC_MERGE_SMALL_MAX;
    const uint32_t slice = small || nc <= FDEC_MERGE_SPLIT_CHUNKS ? 128 : 32;
    cfg.gridDim = dim3(p->H, (p->D + slice - 1) / slice, 1);
    cfg.blockDim = dim3(FDEC_MERGE_THREADS, 1, 1);
    cfg.dynamicSmemBytes = small ? 0 : (nc + 3 + FDEC_MERGE_THREADS) * sizeof(float);
    cfg.numAttrs = c->cc_major >= 9 ? 1 : 0;
    void (*merge)(const fdec_cuda_params) = small && nc <= 16             ? fdec_chunk_merge_small<16>
                                            : small && nc <= 32           ? fdec_chunk_merge_small<32>
                                            : small && nc <= 64           ? fdec_chunk_merge_small<64>
                                            : nc > FDEC_MERGE_SPLIT_CHUNKS ? fdec_chunk_merge_kernel<true>
                                                                           : fdec_chunk_merge_kernel<false>;
    if ((e = cudaLaunchKernelEx(&cfg, merge, prm)) != cudaSuccess)
        return cuda_err(e, "the merge kernel launch");
    return FDEC_OK;
}

static void cuda_plan(void *impl, const fdec_problem *p, fdec_plan_info *info) {
    cuda_impl *c = (cuda_impl *)impl;
    launch_plan lp = make_plan(c, p, 0, 0, 0);
    info->kv_start = lp.split.lo;
    info->kv_end = lp.split.hi;
    info->num_chunks = lp.split.num_chunks;
    info->chunk_len = lp.split.chunk_len;
    info->grouped = 1;
    info->scratch_bytes = state_floats(p, lp.split.num_chunks) * sizeof(float);
    info->path = lp.mma ? "cuda-mma" : lp.fast ? "cuda-vec16" : "cuda-generic";
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

static fdec_status cuda_check_ptrs(void *impl, const void *q, const void *k, const void *v, const void *out,
                                   const float *lse) {
    (void)impl;
    fdec_status st;
    if ((st = check_one("q", q)) || (st = check_one("k", k)) || (st = check_one("v", v)) ||
        (st = check_one("out", out)) || (st = check_one("lse", lse)))
        return st;
    return FDEC_OK;
}

static void cuda_destroy(void *impl) {
    cuda_impl *c = (cuda_impl *)impl;
#if FDEC_CUDA_TIMELINE
    const char *tl_out = getenv("FDEC_TL_OUT");
    unsigned tl_n = 0;
    fdec_tl_rec *tl = tl_out ? (fdec_tl_rec *)malloc(sizeof(fdec_tl_rec) * FDEC_TL_N) : NULL;
    FILE *tl_f = tl_out && tl ? fopen(tl_out, "a") : NULL;
    if (tl_f && cudaMemcpyFromSymbol(&tl_n, fdec_tl_n, sizeof tl_n) == cudaSuccess &&
        cudaMemcpyFromSymbol(tl, fdec_tl, sizeof(fdec_tl_rec) * FDEC_TL_N) == cudaSuccess) {
        const unsigned n = tl_n < FDEC_TL_N ? tl_n : FDEC_TL_N;
        fprintf(tl_f, "# dump %u records (of %u)\n", n, tl_n);
        for (unsigned i = 0; i < n; i++) {
            const fdec_tl_rec *r = &tl[(tl_n - n + i) & (FDEC_TL_N - 1)];
            fprintf(tl_f, "%u %u %u %u %llu %llu %llu %llu %lld %lld %lld\n", r->kind, r->block, r->nblocks, r->sm,
                    r->t[0], r->t[1], r->t[2], r->t[3], r->c[0], r->c[1], r->c[2]);
        }
        const unsigned zero = 0;
        cudaMemcpyToSymbol(fdec_tl_n, &zero, sizeof zero);
    }
    if (tl_f) fclose(tl_f);
    free(tl);
#endif
    if (c->scratch) {
        cudaSetDevice(c->device);
        cudaFree(c->scratch);
    }
    free(c);
}

/* fdec_merge: fdec_merge_kernel (kernels.cuh, the merge the decode's last block uses) over up to
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

static const fdec_backend_ops cuda_ops = {cuda_destroy, cuda_reserve, cuda_decode, cuda_plan, cuda_check_ptrs,
                                          cuda_merge};

extern "C" fdec_status fdec_cuda_create(const fdec_options *o, void **impl, const fdec_backend_ops **ops) {
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
    const char *mc = getenv("FDEC_CUDA_MIN_CHUNK");
    c->min_chunk = mc && atoi(mc) > 0 ? (uint32_t)atoi(mc) : MIN_CHUNK;
    const char *sm = getenv("FDEC_CUDA_D512_STRIDED_MIN"); /* for tests and measurements (bench/NOTES.md) */
    c->d512_strided_min = sm && atoi(sm) >= 0 ? (uint32_t)atoi(sm) : FDEC_MMA_D512_STRIDED_MIN;
    const char *kern = getenv("FDEC_CUDA_KERNEL");
    c->simt_only = kern && !strcmp(kern, "simt");
    c->stream = (cudaStream_t)o->cuda_stream;
    *impl = c;
    *ops = &cuda_ops;
    return FDEC_OK;
}

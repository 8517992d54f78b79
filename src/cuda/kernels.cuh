/* kernels.cuh — the SIMT decode-attention kernel (f32 K/V, unaligned and odd shapes, and FDEC_CUDA_KERNEL=simt),
 * the block tail both decode kernels share, and the merge of partial states (split-KV combine and fdec_merge).
 *
 * Block (head tile x, chunk y, KV head z) computes the partial state (state.h) of up to RT query heads of KV
 * head z over the chunk's positions, so each K/V row is read from memory once for all the heads of its group.
 * A row (one position's K or V vector) is read by T lanes, VEC elements per load (16 bytes on the fast
 * paths), E elements per lane; a warp covers GROUPS = 32/T rows at once and U of those row sets per step, and
 * loads the next step's rows before it computes this one (two steps in flight). Each lane group runs its own
 * online softmax; groups merge by shuffles, warps through shared memory, and the block writes one (m, l, o)
 * per head into the scratch; a merge kernel launched right after (fdec_chunk_merge_small, or
 * fdec_chunk_merge_kernel for more than 64 chunks) merges the chunks' states into out and lse.
 *
 * Inside the kernel scores are in base 2 (q is pre-multiplied by scale * log2 e); states in the scratch are in
 * natural-log units so that the merge is the one of state.h.
 *
 * Template parameters only specialise shapes: KT the K/V element type, D the head_dim (0: any, read with
 * scalar loads), RT the most query heads per block.
 */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "../state.h"

#define FDEC_CUDA_WARPS 4     /* warps per block */
#define FDEC_CUDA_MAX_CHUNKS 256
/* The SIMT kernel's block sums (fdec_decode_kernel's SUMS), in calls where a lane group sums more than
 * FDEC_CUDA_SUM_MIN_TERMS rows of a chunk (cuda.cu's pick_sums): a lane sums a period of steps from zero before it
 * adds them to its totals. The period is FDEC_CUDA_SUM_STEPS, or where a lane takes more than the square of that in
 * steps in a chunk, the power of two whose square reaches them (fdec_sum_period), so that neither level of sums holds
 * many more terms than the other. 64 rather than 16: as fast on an H200 (within 1%, 16 faster in no case), and more
 * exact where a lane group sums thousands of rows: on the corpus input cuda-f32-drift-d1-h28-68k with chunks of 32k
 * and 68k positions (8k and 17k rows a lane group) the H200's worst error was 0.40 and 0.73 of the fuzz tolerance
 * with 16 steps, 0.075 and 0.45 with 64. In bench/micro/simt_sum_order.c's emulation, which predicted that, a fixed
 * 64 drifts again at 64k rows (1.1e-5 of V's size, the bug's size), the growing period stays under 1e-6 there
 * (bench/NOTES.md, CUDA log rows 72 and 73). A power of two. That rule counts steps, and a step is U rows, up to 4,
 * so there a block held up to 4 times the rows and an f32 chunk of 131k positions drifted again (CUDA log row 74):
 * the instances of more than one row a step use FDEC_CUDA_SUM_COMP_STEPS instead (below). */
#ifndef FDEC_CUDA_SUM_STEPS
#define FDEC_CUDA_SUM_STEPS 64
#endif
static_assert(FDEC_CUDA_SUM_STEPS > 0 && (FDEC_CUDA_SUM_STEPS & (FDEC_CUDA_SUM_STEPS - 1)) == 0,
              "FDEC_CUDA_SUM_STEPS is a power of two");
/* In the instances of more than one row a step (fdec_shape's U > 1: f32 head_dim 64, 128 and 256, and the 16-bit
 * ones), a block goes into the totals by a compensated add (Fast2Sum: the add's rounding error stays in
 * the block as the next one's start), so the totals do not drift however many blocks they take, and the period is
 * this fixed number of steps, which bounds the block's own sum. The f32 head_dim 128 drift input as one chunk of 131k
 * positions (fuzz/corpus/cuda-drift-d128-h32-g8-f32-131072, FDEC_CUDA_MIN_CHUNK=131072) failed with the growing
 * period (1.29 times the tolerance) and passes at 0.176 of it with 16, 32 or 64 steps on an H200; f32 Llama-3-8B and
 * LFM2 ran as fast. The instances of one row a step keep the growing period and the plain add: there the compensated
 * form cost the f32 Gemma 4 full layer 4-5% (bench/NOTES.md, CUDA log rows 80 and 81). A power of two. */
#ifndef FDEC_CUDA_SUM_COMP_STEPS
#define FDEC_CUDA_SUM_COMP_STEPS 16
#endif
static_assert(FDEC_CUDA_SUM_COMP_STEPS > 0 && (FDEC_CUDA_SUM_COMP_STEPS & (FDEC_CUDA_SUM_COMP_STEPS - 1)) == 0,
              "FDEC_CUDA_SUM_COMP_STEPS is a power of two");
/* The block sum period for a lane that takes `steps` steps: FDEC_CUDA_SUM_STEPS, or the power of two whose square
 * reaches the steps where that is more */
__host__ __device__ constexpr uint32_t fdec_sum_period(uint32_t steps) {
    uint32_t per = FDEC_CUDA_SUM_STEPS;
    while ((uint64_t)per * per < steps) per <<= 1;
    return per;
}
#ifndef FDEC_CUDA_SUM_MIN_TERMS
#define FDEC_CUDA_SUM_MIN_TERMS 128
#endif
/* Blocks per SM: the split's aim (cuda.cu) and the tensor-core kernel's launch bounds (mma.cuh). Two is measured
 * best on the H200 at long contexts: for the SIMT kernel the occupancy calculator's three gave 131k contexts 20-30%
 * slower; for the tensor-core kernel one block of six stages instead of two of three ran Llama 131k 28% slower,
 * three blocks of four 16 KiB stages at head_dim 64 6% slower (bench/NOTES.md, CUDA log rows 4, 9 and 24). */
#ifndef FDEC_CUDA_BLOCKS_PER_SM
#define FDEC_CUDA_BLOCKS_PER_SM 2
#endif

struct fdec_cuda_params {
    const void *q, *k, *v;
    void *out;
    float *lse;
    float *part_m, *part_l, *part_o; /* [H][nc], [H][nc], [H][nc][D]; part_o 16-byte aligned */
    uint32_t D, H, G, R;
    uint32_t lo, hi, ring, ring_lo; /* attended [lo, hi); ring_lo = lo % ring */
    uint32_t nc, chunk_len;
    size_t ps, hs;    /* element strides */
    float scale_log2; /* scale * log2(e) */
    int qt, ot;
};

/* The cache row of attended position t (lo <= t < lo + ring when there is a ring): t itself, or in a ring of
 * `ring` rows t mod ring, from ring_lo = lo mod ring by one conditional subtraction. */
__device__ __forceinline__ uint32_t fdec_cache_row(const fdec_cuda_params &p, uint64_t t) {
    if (!p.ring) return (uint32_t)t;
    const uint32_t row = p.ring_lo + (uint32_t)(t - p.lo);
    return row >= p.ring ? row - p.ring : row;
}

/* FDEC_CUDA_TIMELINE (a measurement build, off): thread 0 of every tensor-core decode block and merge block records
 * the global timer at its entry, after its grid wait, before its tail (merge: before its sums' end) and at its end,
 * with its SM and clock64 deltas, into a ring of FDEC_TL_N records that cuda_destroy appends to the file named by
 * FDEC_TL_OUT; bench/timeline.py splits them into calls (bench/NOTES.md, CUDA log row 45). The record costs one
 * atomic a block: a timeline build's short calls take ~1 us longer. */
#ifndef FDEC_CUDA_TIMELINE
#define FDEC_CUDA_TIMELINE 0
#endif
#if FDEC_CUDA_TIMELINE
struct fdec_tl_rec {
    unsigned long long t[4];
    unsigned kind, block, sm, nblocks;
    long long c[3]; /* clock64 from the entry to marks 1 and 2 and to the end */
};
#define FDEC_TL_N (1u << 16)
__device__ fdec_tl_rec fdec_tl[FDEC_TL_N];
__device__ unsigned fdec_tl_n;
__device__ __forceinline__ unsigned long long fdec_gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define FDEC_TL_DECL                                                                                            \
    unsigned long long fdec_tl_t[3] = {0, 0, 0};                                                                \
    long long fdec_tl_c[3] = {0, 0, 0};
#define FDEC_TL_MARK(i)                                                                                         \
    if (threadIdx.x == 0) fdec_tl_t[i] = fdec_gtime(), fdec_tl_c[i] = clock64();
#define FDEC_TL_END(k)                                                                                          \
    if (threadIdx.x == 0) {                                                                                     \
        unsigned sm_;                                                                                           \
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_));                                                      \
        const unsigned long long te_ = fdec_gtime();                                                            \
        const long long c_ = clock64();                                                                         \
        const unsigned slot = atomicAdd(&fdec_tl_n, 1u) & (FDEC_TL_N - 1);                                     \
        fdec_tl_rec r_;                                                                                         \
        r_.t[0] = fdec_tl_t[0], r_.t[1] = fdec_tl_t[1], r_.t[2] = fdec_tl_t[2], r_.t[3] = te_;                  \
        r_.kind = (k), r_.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), r_.sm = sm_;  \
        r_.nblocks = gridDim.x * gridDim.y * gridDim.z;                                                         \
        r_.c[0] = fdec_tl_c[1] - fdec_tl_c[0], r_.c[1] = fdec_tl_c[2] - fdec_tl_c[0], r_.c[2] = c_ - fdec_tl_c[0]; \
        fdec_tl[slot] = r_;                                                                                     \
    }
#else
#define FDEC_TL_DECL
#define FDEC_TL_MARK(i)
#define FDEC_TL_END(k)
#endif

/* A kernel launched as a programmatic dependent (sm_90; cuda.cu) may start while the grid before it in the stream
 * is still running: it waits here, before its first read or write of memory the earlier grid may touch, until that
 * grid has finished and its writes are visible. Elsewhere a no-op. */
__device__ __forceinline__ void fdec_grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
/* Lets the next grid in the stream launch now (sm_90), so that a kernel launched after it as a programmatic
 * dependent (flashdec's next decode: FDEC_CUDA_PDL_DECODE, cuda.cu, whose comment has the figures; or an engine's own
 * kernel) has its blocks resident and waiting in fdec_grid_wait when this grid ends, instead of launching then. The
 * first act of the merges of at most FDEC_MERGE_TRIGGER chunks (0: none): with the trigger in every merge, the Gemma 4
 * full layer's 64-chunk merge made its 4k call slower (10.7 -> 11.2 us; bench/NOTES.md, CUDA log row 66). */
#ifndef FDEC_MERGE_TRIGGER
#define FDEC_MERGE_TRIGGER 32
#endif
template <int C>
__device__ __forceinline__ void fdec_merge_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (C <= FDEC_MERGE_TRIGGER) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ float fdec_to_f32(float x) { return x; }
__device__ __forceinline__ float fdec_to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float fdec_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

/* Element i of an array of dtype T (0 f32, 1 f16, 2 bf16) as f32, the type known at compile time. */
template <int T>
__device__ __forceinline__ float fdec_ld(const void *p, size_t i) {
    using E = typename std::conditional<T == 0, float,
                                        typename std::conditional<T == 1, __half, __nv_bfloat16>::type>::type;
    return fdec_to_f32(((const E *)p)[i]);
}

/* Calls f(ld) once, with ld(i) = element i of p as f32 for p of runtime dtype t: the branch on the type is taken
 * once for all of f's loads, so that nothing branches between them and they go out together. With a branch around
 * each element's load (on the head being in the tile, then on the dtype) each load waited for the one before it:
 * q's 32 loads a lane cost ~3 us of every call (bench/NOTES.md, CUDA log row 16). Every index f passes must be in
 * bounds: select after the load, not around it. */
template <class F>
__device__ __forceinline__ void fdec_with_loader(const void *p, int t, F &&f) {
    if (t == 0) f([p](size_t i) { return fdec_ld<0>(p, i); });
    else if (t == 1) f([p](size_t i) { return fdec_ld<1>(p, i); });
    else f([p](size_t i) { return fdec_ld<2>(p, i); });
}

__device__ __forceinline__ void fdec_store_any(void *p, size_t i, int t, float x) {
    if (t == 0) ((float *)p)[i] = x;
    else if (t == 1) ((__half *)p)[i] = __float2half_rn(x);
    else ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x);
}

/* Shape constants of one specialisation. */
template <typename KT, int D>
struct fdec_shape {
    static constexpr int VEC = D ? 16 / (int)sizeof(KT) : 1;         /* elements per load */
    static constexpr int T = D ? (D / VEC < 32 ? D / VEC : 32) : 32; /* lanes per row */
    static constexpr int E = D ? D / T : FDEC_MAX_HEAD_DIM / 32;     /* elements per lane */
    static constexpr int NL = E / VEC;                               /* loads per row per lane */
    static constexpr int GROUPS = 32 / T;                            /* rows per warp at once */
    static constexpr int U = NL >= 4 ? 1 : NL == 2 ? 2 : 4;          /* row sets per step: 4 loads a lane */
    static constexpr bool ASYNC = D && VEC * sizeof(KT) == 16;      /* 16-byte rows: cp.async pipeline */
    static constexpr int STAGES = 4;                                 /* steps in shared memory (3 in flight) */
};

/* hi += blk, and blk = the add's rounding error (Fast2Sum: exact where |hi| >= |blk|, else a rounding of hi's size,
 * which happens while the total is about one block's size, not over the chunk): the compensated flush of both
 * kernels' block sums (fdec_decode_kernel's COMP instances, the tensor-core kernel's FDEC_MMA_BLOCK_SUMS) */
__device__ __forceinline__ void fdec_flush_block(float &hi, float &blk) {
    const float s = hi + blk;
    blk = (hi - s) + blk;
    hi = s;
}

/* The SIMT kernel's largest head tile (heads_per_block in cuda.cu picks from it, pick_rt compiles up to it): 4 heads
 * on the fast shapes, 2 on the scalar-load generic path (fast = 0). q, o and two steps of rows stay in registers;
 * the block sums' totals too where they fit (fdec_sums_fit), else, at 16 elements a lane (head_dim 512), in shared
 * memory beside the ring (fdec_sums_in_smem). Until session 33 the 16-bit rows took 8 heads, a tile with no room for
 * the totals, whose one running sum a lane failed a drift input (fuzz/corpus/cuda-drift-d128-h64-g8-f16-131072 with
 * FDEC_CUDA_KERNEL=simt; bench/NOTES.md, CUDA log row 82); from then to session 34 head_dim 512 took 2 (row 83). */
__host__ __device__ constexpr int fdec_simt_max_rt(bool fast) { return fast ? 4 : 2; }

/* Where fdec_decode_kernel's block sums (SUMS) keep their totals, RT x E floats a lane: in registers where that is
 * at most 32 floats (more spilled under ptxas -v: bench/NOTES.md, CUDA log row 72); else in shared memory after the
 * cp.async ring, RT x E floats a thread (fdec_sums_smem_bytes), which the totals touch only once a block of steps.
 * fdec_sums_ok: SUMS can be compiled (cuda.cu's pick_rt asserts it for every tile heads_per_block asks for). */
__host__ __device__ constexpr bool fdec_sums_in_regs(int rt, int elems_per_lane) { return rt * elems_per_lane <= 32; }
template <typename KT, int D, int RT>
constexpr bool fdec_sums_fit = fdec_sums_in_regs(RT, fdec_shape<KT, D>::E);
template <typename KT, int D, int RT>
constexpr bool fdec_sums_in_smem = !fdec_sums_fit<KT, D, RT> && fdec_shape<KT, D>::ASYNC;
template <typename KT, int D, int RT>
constexpr bool fdec_sums_ok = fdec_sums_fit<KT, D, RT> || fdec_sums_in_smem<KT, D, RT>;
/* the shared-memory totals' bytes for RT heads of E elements a lane (0 where they fit the registers) */
__host__ __device__ constexpr size_t fdec_sums_smem_bytes(int rt, int elems_per_lane) {
    return fdec_sums_in_regs(rt, elems_per_lane) ? 0
                                                  : (size_t)rt * elems_per_lane * FDEC_CUDA_WARPS * 32 * sizeof(float);
}

/* Shared memory the cp.async pipeline needs per block: STAGES x U x NL x (K, V) x 16 bytes per thread. */
template <typename KT, int D>
__host__ __device__ constexpr size_t fdec_pipe_bytes() {
    using S = fdec_shape<KT, D>;
    return S::ASYNC ? (size_t)S::STAGES * S::U * S::NL * 2 * 16 * FDEC_CUDA_WARPS * 32 : 0;
}

/* FDEC_CP_L2_PREFETCH = 64, 128 or 256: the 16-byte copies ask L2 to fetch that many bytes around each miss
 * (cp.async's .L2::NB qualifier; 0: no qualifier). 128 took LFM2 131k 74.2 -> 71.6 us (dense) and 76.3 -> 72.1
 * (head-major), 32k 22.6 -> 21.5; 256 the same at head_dim 64 but Gemma 4 full 131k 155.7 -> 159.3 (bench/NOTES.md,
 * CUDA log row 28). Without it at head_dim 128 and more alone, Llama-3-8B 131k took 153-155 us against 127-129.5
 * (row 53). */
#ifndef FDEC_CP_L2_PREFETCH
#define FDEC_CP_L2_PREFETCH 128
#endif
#if FDEC_CP_L2_PREFETCH == 64
#define FDEC_CP_L2 ".L2::64B"
#elif FDEC_CP_L2_PREFETCH == 128
#define FDEC_CP_L2 ".L2::128B"
#elif FDEC_CP_L2_PREFETCH == 256
#define FDEC_CP_L2 ".L2::256B"
#else
#define FDEC_CP_L2 ""
#endif

/* 1: the K/V copies carry an L2 evict-first policy (`createpolicy.fractional.L2::evict_first`, made beside each copy),
 * so that the rows each call streams once leave L2 before the chunk states, q and the output do. Faster at every
 * preset and length on the H200, two alternated rounds (us): Llama-3-8B 1k 5.75 -> 5.6, 32k 36.6 -> 35.95, 131k
 * 126.95 -> 125.7; LFM2 32k 20.9 -> 20.3; Gemma 4 full 32k 38.6 -> 37.15 (3.61 TB/s); Gemma sliding-full 32k 67.5 ->
 * 66.0; the window 7.05 -> 6.9; head-major against SDPA (torch_peer) LFM2 1k 6.26 -> 5.76 us (SDPA 6.3), 32k 22.6 ->
 * 21.5 (22.2). A policy made once a thread and kept in a register made some launches fail with an illegal instruction
 * (bench/NOTES.md, CUDA log row 53). 0: no policy.
 * A hazard: the ptxas of early CUDA 13 releases can drop the `createpolicy` and leave a copy reading an unset
 * register as its policy, which the GPU traps as an illegal instruction, or not, by what the register held (a known
 * ptxas bug, fixed in 13.4). With CUDA 13.0 two changes to the decode block's tail did it to the head_dim 128 kernel,
 * also with the policy passed in as a kernel parameter (CUDA log rows 61-63); session 30's rounded sums did it to the
 * bf16 kernels at head_dim 64 and 128 (bf16 Llama-3-8B 32k failed on the H200 with the policy, passed without), and
 * session 31's block sums to the f16 ones (row 76). So the Makefile sets it only with CUDA 13.5 (CUDA_L2_POLICY; rows
 * 68-69, and tools/sass_check.py finds no dropped policy in this code built by its ptxas), and `make check-sass`
 * looks for the hazard in a build's SASS. Without the policy the presets are 0-5% slower (row 76). Only the sm_90
 * code takes it: the sm_80 code (A100, and the sm_86 / sm_89 cards that run it) has never run on a GPU here, so it
 * has no policy rather than an unchecked one. */
#ifndef FDEC_CP_EVICT_FIRST
#define FDEC_CP_EVICT_FIRST 1
#endif

/* A 16-byte copy to shared memory that reads src bytes of it (16, or 0: zero fill, nothing read) */
__device__ __forceinline__ void fdec_cp_async16_zfill(void *smem, const void *gmem, unsigned src) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
#if FDEC_CP_EVICT_FIRST && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
    asm volatile("cp.async.cg.shared.global.L2::cache_hint" FDEC_CP_L2 " [%0], [%1], 16, %2, %3;\n" ::"r"(s), "l"(gmem),
                 "r"(src), "l"(pol));
#else
    asm volatile("cp.async.cg.shared.global" FDEC_CP_L2 " [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src));
#endif
}
__device__ __forceinline__ void fdec_cp_async16(void *smem, const void *gmem) { fdec_cp_async16_zfill(smem, gmem, 16u); }
__device__ __forceinline__ void fdec_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void fdec_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* A load's worth of K/V kept as it came from memory (converted to f32 only when used: half the registers). */
template <typename KT, int VEC>
struct fdec_raw {
    typedef typename std::conditional<VEC * sizeof(KT) == 16, uint4, KT>::type type;
};

template <typename KT, int VEC>
__device__ __forceinline__ void raw_to_f32(const typename fdec_raw<KT, VEC>::type &r, float *x) {
    const KT *e = reinterpret_cast<const KT *>(&r);
#pragma unroll
    for (int i = 0; i < VEC; i++) x[i] = fdec_to_f32(e[i]);
}


/* ---- the merge of partial states: one piece of code for the split-KV combine and for fdec_merge ---- */

/* Most states one merge takes: the weights' loads are unrolled over this many (8 per lane). */
#define FDEC_MERGE_MAX_STATES 256
static_assert(FDEC_CUDA_MAX_CHUNKS <= FDEC_MERGE_MAX_STATES, "a decode's chunks must fit one merge");

/* The chunk states of a decode in the scratch (m in natural-log units, l, o unnormalised), seen from a merge
 * block that writes dimensions [d0, d0 + width) of head h0. */
struct fdec_chunk_src {
    const float *m, *l, *o;
    uint32_t n, D;
    size_t h0;
    int d0;
    __device__ float mv(int r, uint32_t c) const { return __ldcg(m + (h0 + r) * n + c); }
    __device__ float lv(int r, uint32_t c) const { return __ldcg(l + (h0 + r) * n + c); }
    __device__ float ov(int r, uint32_t c, int d) const { return __ldcg(o + ((h0 + r) * n + c) * D + d0 + d); }
};

/* The merge weights of a warp's states, J a lane (state lane + 32 j; a lane past the last state holds m = -inf,
 * l = 0): M the NaN-sticky max over the warp, w[j] = fdec_state_weight(mr[j], M), and L = sum w l over the warp
 * with the states of weight 0 skipped (their l may be NaN). Every lane gets the same M and L. */
template <int J>
__device__ __forceinline__ void fdec_warp_weights(const float (&mr)[J], const float (&lr)[J], float (&w)[J], float &M,
                                                  float &L) {
    M = -INFINITY, L = 0.f;
#pragma unroll
    for (int j = 0; j < J; j++) M = fdec_max_nan(M, mr[j]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) M = fdec_max_nan(M, __shfl_xor_sync(0xffffffffu, M, off));
#pragma unroll
    for (int j = 0; j < J; j++) {
        w[j] = fdec_state_weight(mr[j], M);
        if (w[j] != 0.f) L += w[j] * lr[j];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) L += __shfl_xor_sync(0xffffffffu, L, off);
}

/* sum_c w_c o_c(r, d) over the states [cb, ce) of n, B states at a time: their loads are issued together (every
 * address is valid), so L2's latency is paid once per B; a state of weight 0 is dropped by a select, not
 * multiplied (its o may be NaN). B = 64 took 3.7 us off the Gemma 4 full layer's 128-chunk merge at 32k but made
 * 16-chunk merges 1 us slower than B = 16 (bench/NOTES.md, CUDA log row 13). */
template <int B, class Src>
__device__ __forceinline__ float fdec_merge_o(const Src &src, int r, int d, uint32_t n, uint32_t cb, uint32_t ce,
                                              const float *sw) {
    float O = 0.f;
    for (uint32_t c0 = cb; c0 < ce; c0 += B) {
        float x[B];
#pragma unroll
        for (int j = 0; j < B; j++)
            if (c0 + j < ce) x[j] = src.ov(r, c0 + j, d);
#pragma unroll
        for (int j = 0; j < B; j++) {
            const float w = c0 + j < ce ? sw[r * n + c0 + j] : 0.f;
            O += w != 0.f ? w * x[j] : 0.f;
        }
    }
    return O;
}

/* Merges n <= FDEC_MERGE_MAX_STATES states of each of nh heads with the whole block: M = max m_c,
 * w_c = exp(m_c - M), L = sum w_c l_c, out = sum w_c o_c / L, lse = M + log L (state.h's fdec_merge_weights rule,
 * NaN-sticky max included; states of weight 0 are skipped, not multiplied, so an empty state's o does not
 * matter; all empty: out 0, lse -inf). A non-finite value in a merged row makes the row NaN (flashdec.h). sw
 * holds nh * n floats of shared memory, sx 3 * nh. With SPLIT, sp holds blockDim.x floats (NULL without): when the
 * block has at least twice as many threads as output elements, each element's states are split into blockDim.x /
 * (nh Dr) contiguous ranges, summed by different threads and added in range order, so that more loads are in
 * flight. Each output element is written by a thread after every read of it (reads, barrier, write), so out may
 * alias a state's o. Output element (r, d) is out[out0 + r * Dr + d]; lse is NULL or the first head's lse. */
template <bool SPLIT = false, class Src>
__device__ void fdec_merge_heads(const Src &src, int nh, uint32_t n, int Dr, float *sw, float *sx, float *sp,
                                 void *out, size_t out0, int ot, float *lse) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float *sM = sx, *sL = sx + nh;
    int *sbad = reinterpret_cast<int *>(sx + 2 * nh);
    for (int r = warp; r < nh; r += nw) {
        /* m and l of every state in registers, loaded together: one round trip */
        constexpr int J = FDEC_MERGE_MAX_STATES / 32;
        float mr[J], lr[J], w[J], M, L;
#pragma unroll
        for (int j = 0; j < J; j++) {
            const uint32_t c = lane + 32 * j;
            mr[j] = c < n ? src.mv(r, c) : -INFINITY;
            lr[j] = c < n ? src.lv(r, c) : 0.f;
        }
        fdec_warp_weights(mr, lr, w, M, L);
#pragma unroll
        for (int j = 0; j < J; j++)
            if ((uint32_t)lane + 32 * j < n) sw[r * n + lane + 32 * j] = w[j];
        if (lane == 0) sM[r] = M, sL[r] = L, sbad[r] = !isfinite(M) && M != -INFINITY;
    }
    __syncthreads();
    auto finish = [&](int idx, float O) {
        const int r = idx / Dr;
        const float y = sL[r] == 0.f && sM[r] == -INFINITY ? 0.f : O / sL[r];
        if (!isfinite(y)) sbad[r] = 1;
        fdec_store_any(out, out0 + idx, ot, y);
    };
    const int E = nh * Dr, S = 2 * E <= (int)blockDim.x ? (int)blockDim.x / E : 1;
    if (!SPLIT || S == 1) { /* one thread an element, all states (the merges of up to 32 chunks: row 17) */
        for (int idx = threadIdx.x; idx < E; idx += blockDim.x) {
            const int r = idx / Dr, d = idx - r * Dr;
            finish(idx, n > 32 ? fdec_merge_o<64>(src, r, d, n, 0, n, sw) : fdec_merge_o<16>(src, r, d, n, 0, n, sw));
        }
    } else { /* range s of element idx's states in thread s * E + idx, added in range order */
        const int s = threadIdx.x / E, idx = threadIdx.x - s * E;
        if (s < S) {
            const uint32_t cb = (uint32_t)((uint64_t)n * s / S), ce = (uint32_t)((uint64_t)n * (s + 1) / S);
            const int r = idx / Dr, d = idx - r * Dr;
            sp[threadIdx.x] = ce - cb > 32   ? fdec_merge_o<64>(src, r, d, n, cb, ce, sw)
                              : ce - cb > 16 ? fdec_merge_o<32>(src, r, d, n, cb, ce, sw)
                                             : fdec_merge_o<16>(src, r, d, n, cb, ce, sw);
        }
        __syncthreads();
        if (s == 0) {
            float O = sp[idx];
            for (int j = 1; j < S; j++) O += sp[j * E + idx];
            finish(idx, O);
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nh * Dr; idx += blockDim.x)
        if (sbad[idx / Dr]) fdec_store_any(out, out0 + idx, ot, NAN);
    if (lse)
        for (int r = threadIdx.x; r < nh; r += blockDim.x)
            lse[r] = sbad[r] ? NAN : sL[r] == 0.f && sM[r] == -INFINITY ? -INFINITY : fdec_state_lse(sM[r], sL[r]);
}

/* The end of a decode block: merges its NS partial states (in shared memory: m[NS][RT] in base 2, l[NS][RT],
 * o[NS][RT][D]) into the chunk's state in the scratch (m in natural-log units). A chunk whose o came out
 * non-finite (an inf in V, a NaN anywhere) gets m = l = NaN, so that the merge makes its head NaN. The states
 * are merged by the merge kernel launched right after this kernel.
 * Each (state, head)'s weight is taken once, before the loop over the elements, and where D is a compile-time
 * multiple of 4 a thread moves 4 elements a pass (16-byte loads and stores). Before session 10 it took an exp2 per
 * state and element, one element at a time: every short call is faster now, Llama-3-8B 1k 7.2 -> 6.1 us, 4k 10.6 ->
 * 9.9, Gemma 4 full 1k 10.1 -> 7.7, 32k 43.85 -> 41.35; LFM2 131k 66.55 -> 67.05 (bench/NOTES.md, CUDA log row 34). */
template <int D, int RT, int NS>
__device__ void fdec_block_tail(const fdec_cuda_params &p, float *smem, int nh, uint32_t h0, uint32_t chunk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); /* the merge kernel may start launching */
#endif
    const int Dr = D ? D : (int)p.D;
    const float *sm_m = smem, *sm_l = smem + NS * RT, *sm_o = smem + 2 * NS * RT;
    const float ln2 = 0.69314718055994531f;
    __shared__ float sm_L[RT], sm_M[RT];
    __shared__ int sm_bad[RT];
    __shared__ float sm_w[NS][RT]; /* state w's weight in head r's sum */
    if (threadIdx.x < RT) {
        const int r = threadIdx.x;
        sm_bad[r] = 0;
        if (r < nh) {
            float M = -INFINITY, L = 0.f;
#pragma unroll
            for (int w = 0; w < NS; w++) M = fmaxf(M, sm_m[w * RT + r]);
#pragma unroll
            for (int w = 0; w < NS; w++) {
                const float wt = fdec_state_weight2(sm_m[w * RT + r], M);
                sm_w[w][r] = wt;
                L += wt * sm_l[w * RT + r];
            }
            sm_M[r] = M * ln2, sm_L[r] = L;
        }
    }
    __syncthreads();
    constexpr int V = D && D % 4 == 0 ? 4 : 1; /* elements a thread and pass */
    static_assert(V == 1 || NS * RT % 2 == 0, "o's rows start 16-byte aligned");
    for (int idx = threadIdx.x * V; idx < nh * Dr; idx += blockDim.x * V) {
        const int r = idx / Dr, d = idx - r * Dr;
        float O[V];
#pragma unroll
        for (int e = 0; e < V; e++) O[e] = 0.f;
#pragma unroll
        for (int w = 0; w < NS; w++) {
            const float wt = sm_w[w][r];
            const float *x = sm_o + (w * RT + r) * Dr + d;
            if constexpr (V == 4) {
                const float4 x4 = *reinterpret_cast<const float4 *>(x);
                O[0] += wt * x4.x, O[1] += wt * x4.y, O[2] += wt * x4.z, O[3] += wt * x4.w;
            } else
                O[0] += wt * x[0];
        }
        float *dst = p.part_o + ((size_t)(h0 + r) * p.nc + chunk) * Dr + d;
        bool fin = true;
#pragma unroll
        for (int e = 0; e < V; e++) fin = fin && isfinite(O[e]);
        if constexpr (V == 4) *reinterpret_cast<float4 *>(dst) = make_float4(O[0], O[1], O[2], O[3]);
        else dst[0] = O[0];
        if (!fin) sm_bad[r] = 1;
    }
    __syncthreads();
    if (threadIdx.x < nh) {
        const size_t hc = (size_t)(h0 + threadIdx.x) * p.nc + chunk;
        const bool bad = sm_bad[threadIdx.x] || sm_L[threadIdx.x] != sm_L[threadIdx.x];
        p.part_m[hc] = bad ? NAN : sm_M[threadIdx.x];
        p.part_l[hc] = bad ? NAN : sm_L[threadIdx.x];
    }
}

/* Merges the decode's chunk states into out and lse when fdec_chunk_merge_small (below) does not: more than 64
 * chunks (or FDEC_MERGE_SMALL=0). A block of FDEC_MERGE_THREADS threads per (head, slice of the dimensions), the
 * slice ceil(D / gridDim.y) wide (the host's choice, cuda.cu). With slices of 128 a thread merges one dimension over
 * all chunks; with slices of 32, used for more than FDEC_MERGE_SPLIT_CHUNKS chunks, each dimension's chunks are
 * split four ways (fdec_merge_heads), so that four times the blocks and loads are in flight: the Gemma 4 full
 * layer's 128-chunk merge, 32k 51.1 -> 49.4 us, 131k 156 -> 154 (bench/NOTES.md, CUDA log rows 17, 20 and 21). On
 * sm_90 it is launched as a programmatic dependent of the decode kernel and waits for it here. */
#define FDEC_MERGE_THREADS 128
#define FDEC_MERGE_SPLIT_CHUNKS 32
template <bool SPLIT>
__global__ void __launch_bounds__(FDEC_MERGE_THREADS) fdec_chunk_merge_kernel(const fdec_cuda_params p) {
    FDEC_TL_DECL
    FDEC_TL_MARK(0)
    fdec_grid_wait();
    FDEC_TL_MARK(1)
    FDEC_TL_MARK(2) /* no mark of its own inside fdec_merge_heads: mark 2 is mark 1 here */
    extern __shared__ float msm[]; /* [nc] weights, 3, [FDEC_MERGE_THREADS] partial sums */
    const uint32_t h = blockIdx.x;
    const int slice = (int)((p.D + gridDim.y - 1) / gridDim.y);
    const int d0 = blockIdx.y * slice, width = min(slice, (int)p.D - d0);
    const fdec_chunk_src src = {p.part_m, p.part_l, p.part_o, p.nc, p.D, h, d0};
    fdec_merge_heads<SPLIT>(src, 1, p.nc, width, msm, msm + p.nc, msm + p.nc + 3, p.out, (size_t)h * p.D + d0, p.ot,
                     p.lse && blockIdx.y == 0 ? p.lse + h : NULL);
    FDEC_TL_END(3)
}

/* The merge of a decode's chunk states when there are at most C of them (16, 32 or 64: every preset's merge but the
 * Gemma 4 full layer's at long contexts): block (head, slice of FDEC_MERGE_THREADS dimensions), a thread per
 * dimension. Every load of a thread (m and l of chunks lane + 32 j, o of every chunk at its dimension) goes out before
 * any is used: one L2 round trip, where fdec_merge_heads takes two with a block barrier between them. Each warp
 * computes the weights itself and passes them around by shuffles: no shared memory. The sums are those of
 * fdec_merge_heads in the same order (same bits), and a row is NaN under the same rule. Llama-3-8B 1k 7.9 -> 6.9 us,
 * 4k 12.8 -> 11.4, the Gemma 4 sliding window 9.4 -> 8.4 (bench/NOTES.md, CUDA log row 21); FDEC_MERGE_SMALL=0 turns
 * it off. Every load is unconditional: a state or dimension past the last loads the last one (always in bounds) and a
 * select after the load drops it, so that no branch stands between the loads (each load in its own branch, as
 * `c < n ? load : 0` compiles, is what serialised q's loads in CUDA log row 16); with that and an instance for up to
 * 16 states the Llama 1k merge's sums take 1,496 cycles instead of 2,720: Llama 1k 5.6 -> 5.5 us, LFM2 1k 5.1 -> 4.8,
 * 4k 6.9 -> 6.6, the window 6.9 -> 6.7, Gemma 4 full 4k 11.2 -> 10.7, 32k 37.15 -> 36.7 (CUDA log row 59). */
#ifndef FDEC_MERGE_SMALL
#define FDEC_MERGE_SMALL 1
#endif
#define FDEC_MERGE_SMALL_MAX 64 /* chunks it merges at most: fdec_chunk_merge_small<64> */
template <int C>
__global__ void __launch_bounds__(FDEC_MERGE_THREADS) fdec_chunk_merge_small(const fdec_cuda_params p) {
    FDEC_TL_DECL
    FDEC_TL_MARK(0)
    fdec_merge_trigger<C>();
    fdec_grid_wait();
    FDEC_TL_MARK(1)
    constexpr int J = (C + 31) / 32;
    const uint32_t h = blockIdx.x, n = p.nc;
    const int lane = threadIdx.x & 31;
    const uint32_t d = blockIdx.y * FDEC_MERGE_THREADS + threadIdx.x;
    const bool act = d < p.D;
    const size_t hn = (size_t)h * n;
    float mr[J], lr[J], x[C];
    const uint32_t last = n - 1, dd = act ? d : p.D - 1; /* n >= 1 */
#pragma unroll
    for (int j = 0; j < J; j++) {
        const uint32_t c = lane + 32 * j;
        mr[j] = __ldcg(p.part_m + hn + min(c, last));
        lr[j] = __ldcg(p.part_l + hn + min(c, last));
    }
#pragma unroll
    for (int c = 0; c < C; c++) x[c] = __ldcg(p.part_o + (hn + min((uint32_t)c, last)) * p.D + dd);
#pragma unroll
    for (int j = 0; j < J; j++) { /* the states past the last: weight 0 */
        const bool in = lane + 32 * j < n;
        mr[j] = in ? mr[j] : -INFINITY;
        lr[j] = in ? lr[j] : 0.f;
    }
    float w[J], M, L;
    fdec_warp_weights(mr, lr, w, M, L);
    float O = 0.f;
#pragma unroll
    for (int c = 0; c < C; c++) {
        const float wc = __shfl_sync(0xffffffffu, w[c / 32], c % 32);
        O += (uint32_t)c < n && wc != 0.f ? wc * x[c] : 0.f;
    }
    FDEC_TL_MARK(2)
    const bool empty = L == 0.f && M == -INFINITY;
    const float y = empty ? 0.f : O / L;
    const bool bad = __syncthreads_or(act && !isfinite(y)) || (!isfinite(M) && M != -INFINITY);
    if (act) fdec_store_any(p.out, (size_t)h * p.D + d, p.ot, bad ? NAN : y);
    if (p.lse && blockIdx.y == 0 && threadIdx.x == 0)
        p.lse[h] = bad ? NAN : empty ? -INFINITY : fdec_state_lse(M, L);
    FDEC_TL_END(2)
}

/* fdec_merge on the device: up to FDEC_CUDA_MERGE_MAX (out_i, lse_i) pairs per launch, a block per tile of 8
 * heads. Slot 0 may be an f32 accumulator of an earlier launch (ot0). */
#define FDEC_CUDA_MERGE_MAX 64
static_assert(FDEC_CUDA_MERGE_MAX <= FDEC_MERGE_MAX_STATES, "a launch's shards must fit one merge");
struct fdec_merge_params {
    const void *outs[FDEC_CUDA_MERGE_MAX];
    const float *lses[FDEC_CUDA_MERGE_MAX];
    void *out;
    float *lse;
    uint32_t n, H, D;
    int ot; /* dtype of out (the shards' dtypes are the kernel's template arguments) */
};
/* the shards of a merge of dtype T; slot 0 of dtype T0 (an f32 accumulator of an earlier launch when T0 != T):
 * with the types fixed per instance the loads of a batch carry no branch and go out together */
template <int T, int T0>
struct fdec_pair_src {
    const fdec_merge_params *p;
    uint32_t h0;
    __device__ float mv(int r, uint32_t c) const { return p->lses[c][h0 + r]; }
    __device__ float lv(int, uint32_t) const { return 1.f; }
    __device__ float ov(int r, uint32_t c, int d) const {
        const size_t i = (size_t)(h0 + r) * p->D + d;
        if constexpr (T == T0) return fdec_ld<T>(p->outs[c], i);
        else return c ? fdec_ld<T>(p->outs[c], i) : fdec_ld<T0>(p->outs[c], i);
    }
};
template <int T, int T0>
__global__ void __launch_bounds__(FDEC_CUDA_WARPS * 32) fdec_merge_kernel(const fdec_merge_params p) {
    __shared__ float sw[8 * FDEC_CUDA_MERGE_MAX], sx[3 * 8];
    const uint32_t h0 = blockIdx.x * 8;
    const int nh = min(8, (int)(p.H - h0));
    const fdec_pair_src<T, T0> src = {&p, h0};
    fdec_merge_heads(src, nh, p.n, (int)p.D, sw, sx, NULL, p.out, (size_t)h0 * p.D, p.ot, p.lse ? p.lse + h0 : NULL);
}

template <typename KT, int D, int RT, bool SUMS>
__global__ void __launch_bounds__(FDEC_CUDA_WARPS * 32) fdec_decode_kernel(const fdec_cuda_params p) {
    using S = fdec_shape<KT, D>;
    using raw_t = typename fdec_raw<KT, S::VEC>::type;
    constexpr int VEC = S::VEC, T = S::T, E = S::E, NL = S::NL, GROUPS = S::GROUPS, U = S::U;
    constexpr int NW = FDEC_CUDA_WARPS;
    const int Dr = D ? D : (int)p.D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int grp = lane / T, lin = lane % T;
    const uint32_t g = blockIdx.z, chunk = blockIdx.y, tile = blockIdx.x, h0 = g * p.R + tile * RT;
    const int nh = min(RT, (int)(p.R - tile * RT)); /* heads of this tile */
    fdec_grid_wait();

    /* this lane's element i: load l = i / VEC covers [lin*VEC + l*T*VEC, +VEC) */
    auto elem = [&](int i) { return lin * VEC + (i / VEC) * T * VEC + (i % VEC); };

    float q[RT][E];
    fdec_with_loader(p.q, p.qt, [&](auto ld) {
#pragma unroll
        for (int r = 0; r < RT; r++)
#pragma unroll
            for (int i = 0; i < E; i++) {
                const int d = elem(i);
                const bool ok = r < nh && d < Dr;
                const float x = ld(ok ? (size_t)(h0 + r) * Dr + d : (size_t)h0 * Dr); /* in bounds either way */
                q[r][i] = ok ? x * p.scale_log2 : 0.f;
            }
    });
    /* m, l, o: the running state of the steps since the last block sum (l, o relative to m). With SUMS, lt
     * and ot are the totals, relative to mt: every sum_mask + 1 steps (64, more in chunks of over 4,096 steps a
     * lane; FDEC_CUDA_SUM_COMP_STEPS where COMP), and after the last, l and o are added into them and restart from
     * zero, so that no f32 sum runs over many more than the square root of a lane's terms (64 up to 4,096 of them). One
     * running sum over a long chunk drifted 7.7e-6 of V's size from the float64 value (head_dim 1, 28 heads on 1
     * KV head, 68k positions, f32: ~900 terms a lane), where the tests allow 2e-6 (bench/NOTES.md, CUDA log row
     * 72). The totals cost registers (the generic path's 159 -> 217) and, on an H200, time: -1.6% to +5% on the
     * fast shapes, +23-25% on the generic path's f16 and head_dim 1 calls (-17% on an f32 one); the period that
     * grows with the chunk (sum_mask) then another +1.4-2.2% on the f32 fast shapes, -0.3 to -2.1% on the 16-bit and
     * generic ones (row 73, against row 72's 16 steps). So the host asks for
     * them (SUMS) only where a lane group sums more than FDEC_CUDA_SUM_MIN_TERMS rows, and they are compiled only
     * where they have room (fdec_sums_ok: the registers, or shared memory after the ring). */
    static_assert(!SUMS || fdec_sums_ok<KT, D, RT>, "block sums compiled where their totals have no room");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr bool TOT_SMEM = SUMS && fdec_sums_in_smem<KT, D, RT>;
    static_assert(!TOT_SMEM || (2 + (size_t)D) * NW * RT * sizeof(float) <= fdec_pipe_bytes<KT, D>(),
                  "the block's tail (warps' states from offset 0) stays clear of the totals after the ring");
    float m[RT], l[RT], o[RT][E];
    float mt[SUMS ? RT : 1], lt[SUMS ? RT : 1], ot_reg[SUMS && !TOT_SMEM ? RT : 1][SUMS && !TOT_SMEM ? E : 1];
    /* the totals of o: element (r, i) of this thread, threads side by side (no bank conflicts) */
    [[maybe_unused]] float *const ot_sm = reinterpret_cast<float *>(smem_raw + fdec_pipe_bytes<KT, D>());
    auto ot = [&](int r, int i) -> float & {
        if constexpr (TOT_SMEM) return ot_sm[(r * E + i) * (NW * 32) + threadIdx.x];
        else return ot_reg[r][i];
    };
#pragma unroll
    for (int r = 0; r < RT; r++) {
        m[r] = -INFINITY;
        l[r] = 0.f;
#pragma unroll
        for (int i = 0; i < E; i++) o[r][i] = 0.f;
        if constexpr (SUMS) {
            mt[r] = -INFINITY;
            lt[r] = 0.f;
#pragma unroll
            for (int i = 0; i < E; i++) ot(r, i) = 0.f;
        }
    }
    /* more than one row a step: the compensated add and the fixed period (FDEC_CUDA_SUM_COMP_STEPS) */
    constexpr bool COMP = SUMS && U > 1;
    /* l and o into the totals (a no-op without SUMS); then m, l, o are the totals' state again */
    auto add_block = [&](bool last) {
        if constexpr (SUMS) {
#pragma unroll
            for (int r = 0; r < RT; r++) {
                const float w = fdec_state_weight2(mt[r], m[r]); /* m >= mt: the block's max includes the totals' */
                /* the block's sum b into the total t, weighted by w; b restarts (or is the state, last) */
                auto add = [&](float &t, float &b) {
                    if constexpr (COMP) { /* compensated: b keeps the add's rounding error, the next block's start */
                        t *= w;
                        fdec_flush_block(t, b);
                        if (last) b += t;
                    } else {
                        t = fmaf(t, w, b);
                        b = last ? t : 0.f;
                    }
                };
                add(lt[r], l[r]);
#pragma unroll
                for (int i = 0; i < E; i++) add(ot(r, i), o[r][i]);
                mt[r] = m[r];
            }
        }
    };

    /* in 64 bits: a chunk near the end of the 32-bit positions (seq_len up to 2^32 - 1) ends past 2^32
     * (fuzz_decode_cuda found it: seq_len 4294967295, window 110, one chunk's end wrapped to 1 and its positions were
     * left out; bench/NOTES.md, CUDA log row 70) */
    const uint64_t c0 = (uint64_t)p.lo + (uint64_t)chunk * p.chunk_len,
                   c1 = c0 + p.chunk_len < p.hi ? c0 + p.chunk_len : (uint64_t)p.hi;
    const KT *kbase = (const KT *)p.k + (size_t)g * p.hs, *vbase = (const KT *)p.v + (size_t)g * p.hs;
    const uint32_t step = NW * GROUPS * U;
    /* the block sums' period, less one (a power of two): fixed with COMP, else from chunk_len / step steps a lane,
     * rounded up */
    [[maybe_unused]] const uint32_t sum_mask =
        COMP ? FDEC_CUDA_SUM_COMP_STEPS - 1
             : SUMS ? fdec_sum_period((uint32_t)((p.chunk_len + (uint64_t)step - 1) / step)) - 1 : 0;

    auto valid_at = [&](uint64_t base, int u) { return base + u * NW * GROUPS + grp < c1; };

    /* the online-softmax update for one step's rows, given as raw loads (rows past c1 are masked) */
    auto compute_step = [&](uint64_t base, const raw_t (&kr)[U][NL], const raw_t (&vr)[U][NL]) {
        float s[U][RT];
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[E];
#pragma unroll
            for (int j = 0; j < NL; j++) raw_to_f32<KT, VEC>(kr[u][j], &kf[j * VEC]);
            const bool valid = valid_at(base, u);
#pragma unroll
            for (int r = 0; r < RT; r++) {
                float acc = 0.f;
#pragma unroll
                for (int i = 0; i < E; i++) acc = fmaf(q[r][i], kf[i], acc);
#pragma unroll
                for (int off = T / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
                s[u][r] = valid ? fmaf(0.f, acc, acc) : -INFINITY; /* +-inf -> NaN: the head comes out NaN */
            }
        }
#pragma unroll
        for (int r = 0; r < RT; r++) {
            float smax = m[r];
#pragma unroll
            for (int u = 0; u < U; u++) smax = fmaxf(smax, s[u][r]);
            const float alpha = fdec_state_weight2(m[r], smax);
            float psum = 0.f;
#pragma unroll
            for (int u = 0; u < U; u++) {
                s[u][r] = s[u][r] == -INFINITY ? 0.f : exp2f(s[u][r] - smax); /* now the weight */
                psum += s[u][r];
            }
            l[r] = l[r] * alpha + psum;
            m[r] = smax;
#pragma unroll
            for (int i = 0; i < E; i++) o[r][i] *= alpha;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (!valid_at(base, u)) continue; /* its V was never loaded */
            float vf[E];
#pragma unroll
            for (int j = 0; j < NL; j++) raw_to_f32<KT, VEC>(vr[u][j], &vf[j * VEC]);
#pragma unroll
            for (int r = 0; r < RT; r++)
#pragma unroll
                for (int i = 0; i < E; i++) o[r][i] = fmaf(s[u][r], vf[i], o[r][i]);
        }
    };

    const uint64_t first = (uint64_t)c0 + warp * GROUPS; /* warp-uniform loop: the shuffles need every lane */
    if constexpr (S::ASYNC) {
        /* STAGES-deep ring of steps in shared memory, filled by cp.async; a lane reads back only the 16-byte
         * pieces it copied itself, so waiting for its own copies is all the synchronisation needed */
        uint4 *ring = reinterpret_cast<uint4 *>(smem_raw);
        auto slot = [&](int stage, int u, int j, int kv) -> uint4 * {
            return ring + ((((stage * U + u) * NL + j) * 2 + kv) * (NW * 32) + threadIdx.x);
        };
        auto issue = [&](uint64_t base, int stage) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (!valid_at(base, u)) continue;
                const uint32_t row = fdec_cache_row(p, base + u * NW * GROUPS + grp);
                const KT *kp = kbase + (size_t)row * p.ps, *vp = vbase + (size_t)row * p.ps;
#pragma unroll
                for (int j = 0; j < NL; j++) {
                    const int d = lin * VEC + j * T * VEC;
                    fdec_cp_async16(slot(stage, u, j, 0), kp + d);
                    fdec_cp_async16(slot(stage, u, j, 1), vp + d);
                }
            }
        };
        constexpr int SG = S::STAGES;
        static_assert(S::U * S::NL == 4, "the host sizes every ring for 4 loads a lane a step");
#pragma unroll
        for (int st = 0; st < SG - 1; st++) { /* prologue: the first SG-1 steps */
            uint64_t b = first + (uint64_t)st * step;
            if (b < c1) issue(b, st);
            fdec_cp_async_commit();
        }
        int stage = 0;
        [[maybe_unused]] uint32_t nstep = 0; /* steps since the block sum */
        for (uint64_t base = first; base < c1; base += step) {
            const uint64_t ahead = base + (uint64_t)(SG - 1) * step;
            if (ahead < c1) issue(ahead, (stage + SG - 1) % SG);
            fdec_cp_async_commit();                 /* one group per step, empty or not */
            fdec_cp_async_wait<SG - 1>();           /* this step's group has landed */
            raw_t kr[U][NL], vr[U][NL];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const bool valid = valid_at(base, u); /* rows past c1 were not copied: do not read them */
#pragma unroll
                for (int j = 0; j < NL; j++) {
                    kr[u][j] = valid ? *reinterpret_cast<const raw_t *>(slot(stage, u, j, 0)) : raw_t{};
                    vr[u][j] = valid ? *reinterpret_cast<const raw_t *>(slot(stage, u, j, 1)) : raw_t{};
                }
            }
            compute_step(base, kr, vr);
            if constexpr (SUMS)
                if ((++nstep & sum_mask) == 0) add_block(false);
            stage = stage + 1 == SG ? 0 : stage + 1;
        }
        fdec_cp_async_wait<0>();
        __syncthreads(); /* the ring's memory is reused below */
    } else {
        /* scalar loads into registers, the next step's loads issued before this step computes */
        auto load_step = [&](uint64_t base, raw_t (&kr)[U][NL], raw_t (&vr)[U][NL]) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                const bool valid = valid_at(base, u);
                const uint32_t row = valid ? fdec_cache_row(p, base + u * NW * GROUPS + grp) : 0;
                const KT *kp = kbase + (size_t)row * p.ps, *vp = vbase + (size_t)row * p.ps;
#pragma unroll
                for (int j = 0; j < NL; j++) {
                    const int d = lin * VEC + j * T * VEC;
                    if (valid && (D || d < Dr)) {
                        kr[u][j] = __ldg(reinterpret_cast<const raw_t *>(kp + d));
                        vr[u][j] = __ldg(reinterpret_cast<const raw_t *>(vp + d));
                    } else {
                        memset(&kr[u][j], 0, sizeof(raw_t));
                        memset(&vr[u][j], 0, sizeof(raw_t));
                    }
                }
            }
        };
        raw_t kr[U][NL], vr[U][NL];
        if (first < c1) load_step(first, kr, vr);
        [[maybe_unused]] uint32_t nstep = 0; /* steps since the block sum */
        for (uint64_t base = first; base < c1; base += step) {
            raw_t kn[U][NL], vn[U][NL];
            if (base + step < c1) load_step(base + step, kn, vn);
            compute_step(base, kr, vr);
            if constexpr (SUMS)
                if ((++nstep & sum_mask) == 0) add_block(false);
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int j = 0; j < NL; j++) kr[u][j] = kn[u][j], vr[u][j] = vn[u][j];
        }
    }

    add_block(true);

    /* merge the lane groups of a warp (same lin, different grp) */
#pragma unroll
    for (int off = T; off < 32; off <<= 1) {
#pragma unroll
        for (int r = 0; r < RT; r++) {
            float mo = __shfl_xor_sync(0xffffffffu, m[r], off), lo_ = __shfl_xor_sync(0xffffffffu, l[r], off);
            float mn = fmaxf(m[r], mo);
            float wa = fdec_state_weight2(m[r], mn), wb = fdec_state_weight2(mo, mn);
            l[r] = l[r] * wa + lo_ * wb;
#pragma unroll
            for (int i = 0; i < E; i++) o[r][i] = o[r][i] * wa + __shfl_xor_sync(0xffffffffu, o[r][i], off) * wb;
            m[r] = mn;
        }
    }

    /* the warps' states into shared memory, for the block's tail */
    float *smem = reinterpret_cast<float *>(smem_raw);
    float *sm_m = smem, *sm_l = smem + NW * RT, *sm_o = smem + 2 * NW * RT; /* sm_o: [NW][RT][Dr] */
    if (grp == 0) {
#pragma unroll
        for (int r = 0; r < RT; r++) {
            if (lin == 0) sm_m[warp * RT + r] = m[r], sm_l[warp * RT + r] = l[r];
#pragma unroll
            for (int i = 0; i < E; i++) {
                int d = elem(i);
                if (D || d < Dr) sm_o[(warp * RT + r) * Dr + d] = o[r][i];
            }
        }
    }
    __syncthreads();
    fdec_block_tail<D, RT, NW>(p, smem, nh, h0, chunk);
}

/* mma.cuh — the tensor-core kernel for 16-bit K/V at head_dim 64, 128, 256 and 512.
 *
 * Why: the SIMT kernel (kernels.cuh) issues about 75 instructions per K/V row and warp at 4 Q heads per KV
 * head, which caps it near 2.2 TB/s on the H200 (bench/NOTES.md). Here each block stages K and V rows in
 * shared memory with cp.async and computes S = Q K^T and O += P V with mma.sync m16n8k16 (f16 or bf16 in, f32
 * accumulate), reading the rows back with ldmatrix: a few instructions per 16-byte piece of a row.
 *
 * The MMA's 16 rows (its M) are query heads: rows 0..7 carry up to 8 heads of one KV head, and rows 8..15
 * carry a second term of the same 8 heads, so that the f32 inputs lose nothing to the 16-bit rounding:
 *   - q (f32, pre-scaled) = hi + lo, hi = round16(q), lo = round16(q - hi): rows 0..7 get hi, rows 8..15 lo,
 *     and a score is C[g] + C[g + 8] (both in the same lane). For bf16 a third term goes through a second MMA.
 *   - p (the softmax weight, f32) is split the same way for P V: O[g] + O[g + 8] is the head's output.
 * The products are exact in f32, so a score carries the error of f32 accumulation, as on the SIMT path.
 * q is first multiplied by a power of two per head (exact) so that its 16-bit terms neither overflow nor
 * lose digits to subnormals; p by 2^15 for f16 for the same reason (l carries the same factor).
 *
 * Block = 4 warps (8 at D = 512 with bulk copies, FDEC_MMA_D512_WARPS). A warp owns DW = min(D, 128) dimensions
 * (q fragments and the O accumulator, 64 registers) and PW positions of each staged step: at D = 256 two warps, at
 * D = 512 four warps share a position group and add their partial scores through shared memory (each group on its
 * own named barrier, FDEC_MMA_GROUP_BARRIERS). A stage holds NP = 32 KiB / (4 D) positions of K and V for each group
 * of four warps (rows XOR-swizzled by 16-byte piece, so ldmatrix and cp.async meet no bank conflicts);
 * FDEC_MMA_STAGES stages are in flight. Built with FDEC_MMA_TMA = 1 (off by default since session 17: slower on the
 * H200 and the H100), at head_dim 128, 256 and 512 on sm_90 the rows come by bulk copies instead (FDEC_MMA_TMA_WIDE),
 * one per row, completing on an mbarrier per warp and stage, into rows padded by 16 bytes (at head_dim 128 issued
 * with warp-uniform operands, FDEC_MMA_UNIFORM_ISSUE).
 * At D <= 128 each warp copies and waits for its own rows, with no block barrier in the loop (at D = 64 a warp's
 * rows are every fourth position of the step, FDEC_MMA_INTERLEAVE); at D >= 256 with bulk copies each warp copies
 * its share of its group's rows and waits for all of them (with cp.async, the default, the whole block
 * copies the step and waits for it, and the rows FDEC_MMA_PREFETCH steps ahead can be prefetched into L2). At D =
 * 64 and 128 a block's steps are every nc-th of the attended range (FDEC_MMA_STRIDED_CHUNKS, FDEC_MMA_STRIDED_D64),
 * elsewhere one contiguous chunk. After the loop each position group is one partial state, and the block's tail
 * (kernels.cuh, fdec_block_tail) merges them and writes the chunk state; the merge kernel (kernels.cuh) merges the
 * chunks.
 */
#pragma once
#include "kernels.cuh"

#ifndef FDEC_MMA_STAGE_BYTES
#define FDEC_MMA_STAGE_BYTES 32768
#endif
/* Steps in shared memory: two blocks of 3 x 32 KiB fill an SM's 228 KiB. One block of 6 stages (more bytes in
 * flight, half the warps) was 28% slower at Llama 131k (bench/NOTES.md, CUDA log row 9). */
#ifndef FDEC_MMA_STAGES
#define FDEC_MMA_STAGES 3
#endif
/* The same at head_dim 64 (stage bytes and stages; settable from the compiler's command line): stages of 16 KiB
 * (64 positions), so that a 64-row chunk is one step (LFM2 1k 5.6 -> 5.2 us against 32 KiB stages, CUDA log row
 * 24). Four of them in the one block an SM (three steps in flight, 48 KiB) against six: LFM2 131k 70.0-70.1 ->
 * 66.7-68.0 us (up to 4.02 TB/s), head-major 70.2-70.5 -> 68.0-68.3 (SDPA 66.3-67.9), 32k 22.5-22.8 -> 22.0-22.2
 * (SDPA 22.3-22.8); five between, eight as slow as six, twelve slower (bench/NOTES.md, CUDA log rows 33 a and 40).
 * Three blocks an SM of four stages: 131k 6% slower (row 24). */
#ifndef FDEC_MMA_D64_STAGE_BYTES
#define FDEC_MMA_D64_STAGE_BYTES 16384
#endif
#ifndef FDEC_MMA_D64_STAGES
#define FDEC_MMA_D64_STAGES 4
#endif
/* Warps a block at head_dim 512 on sm_90 with bulk copies (fdec_mma_warps), where one block runs on an SM
 * (D512_ONE_BLOCK_PER_SM, cuda.cu): 8, two position groups of four warps, each group 16 positions of a 64 KiB stage
 * of 32 (with FDEC_MMA_GROUP_BARRIERS each group on its own rows and barriers), instead of 4 warps and one group on
 * stages of 32 KiB: Gemma 4 full 32k 41.35 -> 40.8 us, 131k 137.55 -> 133.65, head-major 32k 44.3 -> 41.7 with the
 * fast tail (bench/NOTES.md, CUDA log row 34). With cp.async (the default since row 49) 8 warps were 1-4% slower than
 * 4 (row 50 a). */
#ifndef FDEC_MMA_D512_WARPS
#define FDEC_MMA_D512_WARPS 8
#endif
/* The stages at head_dim 512 (settable for measurements; by default 32 KiB a group of four warps). With one group:
 * 5 or 6 stages of 32 KiB were 2-5% slower at 32k, 3 of 64 KiB even, 2 of 64 KiB 3% faster at 131k in the dense
 * layout but 3% slower at 32k (bench/NOTES.md, CUDA log row 33). */
#ifndef FDEC_MMA_D512_STAGE_BYTES
#define FDEC_MMA_D512_STAGE_BYTES 0 /* 0: FDEC_MMA_STAGE_BYTES a position group */
#endif
#ifndef FDEC_MMA_D512_STAGES
#define FDEC_MMA_D512_STAGES FDEC_MMA_STAGES
#endif
/* 1: with bulk copies, where a block has several position groups of several warps (head_dim 256, and 512 with 8
 * warps), each group's warps copy the group's own rows, wait only for them and meet on the group's own named
 * barrier (1 + group) instead of the block's, so that the groups drift apart as the warps of head_dim <= 128 do.
 * Gemma 4 sliding-full 4k 14.1 -> 13.9 us, 32k 71.9 -> 71.35, the window 7.2 -> 7.1 (bench/NOTES.md, CUDA log
 * row 34). */
#ifndef FDEC_MMA_GROUP_BARRIERS
#define FDEC_MMA_GROUP_BARRIERS 1
#endif
/* 1: at head_dim 64 (cp.async, each warp its own rows) the four warps' rows of a step interleave (warp w takes
 * positions w, w + 4, ...), so that the block reads one contiguous range of a step together rather than each warp
 * its own quarter at its own pace. Head-major LFM2 131k 82.0/83.5 -> 74.8/75.1 us, the dense layout even
 * (bench/NOTES.md, CUDA log row 27). */
#ifndef FDEC_MMA_INTERLEAVE
#define FDEC_MMA_INTERLEAVE 1
#endif
/* 1: at head_dim 128 a block takes every nc-th step of the attended range (steps chunk, chunk + nc, ...) instead of a
 * contiguous chunk, so that at any time the blocks of a KV head read one contiguous range together rather than nc
 * ranges a chunk apart (the chunk states merge alike; only the rounding differs). Llama-3-8B 131k 131.7 -> 128.65 us
 * (4.17 TB/s), head-major 135.0 -> 130.6; 32k even, 1k 6.1 -> 6.25. At head_dim 64 and 512 even or slower then
 * (bench/NOTES.md, CUDA log row 35). */
#ifndef FDEC_MMA_STRIDED_CHUNKS
#define FDEC_MMA_STRIDED_CHUNKS 1
#endif
/* 1: strided steps at head_dim 64 too. Measured again with cp.async's evict-first policy (CUDA log row 55), two
 * alternated rounds on the H200: LFM2 131k 66.2 -> 64.8 us (4.14 TB/s), head-major (torch_peer) 67.1-68.0 -> 65.6-65.8
 * against SDPA's 66.2-66.5, 32k 20.35 -> 20.0 (head-major 21.3 -> 20.8-21.0, SDPA 22.3-22.7); 1k and 4k even. */
#ifndef FDEC_MMA_STRIDED_D64
#define FDEC_MMA_STRIDED_D64 1
#endif
/* At head_dim 512 on sm_90 the strided steps (an instance of their own, fdec_mma_kernel<..., true>) where a chunk is
 * at least this many positions (0: never; FDEC_CUDA_D512_STRIDED_MIN in the environment overrides it), so that calls
 * whose chunks are a few steps keep the plain instance (strided everywhere cost 1k 7.8 -> 8.1 us, CUDA log row 35 c).
 * Gemma 4 full, three alternated rounds: 131k 136.4-136.8 -> 134.3-134.5 us (4.0 TB/s), 64k 72.8-73.2 -> 72.1-72.3;
 * from 512 or 256 rows no better, and 32k (512-row chunks) even (bench/NOTES.md, CUDA log row 39). */
#ifndef FDEC_MMA_D512_STRIDED_MIN
#define FDEC_MMA_D512_STRIDED_MIN 1024
#endif
/* A measurement build (results wrong on purpose): the loop only waits for and copies the rows, so that the
 * ring's own streaming rate shows (bench/NOTES.md, CUDA log row 24). */
#ifndef FDEC_MMA_MEASURE_COPY_ONLY
#define FDEC_MMA_MEASURE_COPY_ONLY 0
#endif
/* 1: each step's P V products summed from zero by the MMA, then added to o by an FP32 add, instead of accumulated
 * in o by the MMA itself. The tensor cores add into their accumulator without rounding to nearest (their sums are
 * truncated), so a long chunk's o drifts low: on hand-made inputs whose weights and V are nearly the same everywhere
 * (fuzz/corpus/cuda-drift-*-f16-131072) the GPU was up to 1.2e-5 of V's size low at 131k positions (head_dim 512;
 * 6 times the tests' f32 tolerance) and 1.1e-3 as one chunk (bench/NOTES.md, CUDA log row 74). */
#ifndef FDEC_MMA_ROUNDED_SUMS
#define FDEC_MMA_ROUNDED_SUMS 1
#endif
/* 1 (with FDEC_MMA_ROUNDED_SUMS): o and l are summed in blocks of FDEC_MMA_SUM_STEPS steps. Rounded adds alone still
 * drift over a long chunk (the same hand-made inputs: 3.6-6.6e-6 of V's size off at the library's split, 2.7e-5 to
 * 2.6e-4 as one chunk of 131,072 positions), and the kernel has no registers for a second o. So each step's two
 * MMA rows (p's high and low terms) are added together and into the registers of the low row, which hold the
 * block's sum; every FDEC_MMA_SUM_STEPS steps the block goes into o by a compensated add (Fast2Sum), whose rounding
 * error stays in the block registers as the next block's start. The same adds a step as the rounded sums, one more
 * register (l's block). A compensated add every step instead (three more adds an element) cost up to 9% (LFM2
 * 131k) (bench/NOTES.md, CUDA log row 75). bf16 LFM2 (head_dim 64) measured 24% slower with them, but not for the
 * sums: the loss went with one block an SM asked for by shared memory, and without the programmatic launch (cuda.cu,
 * FDEC_CUDA_ONE_BLOCK_SMEM; CUDA log row 79). */
#ifndef FDEC_MMA_BLOCK_SUMS
#define FDEC_MMA_BLOCK_SUMS 1
#endif
#ifndef FDEC_MMA_SUM_STEPS
#define FDEC_MMA_SUM_STEPS 16 /* a power of two */
#endif
#if FDEC_MMA_BLOCK_SUMS && !FDEC_MMA_ROUNDED_SUMS
#error "FDEC_MMA_BLOCK_SUMS needs FDEC_MMA_ROUNDED_SUMS"
#endif

/* Steps prefetched into L2 ahead of the ring at head_dim >= 256 (0: none). With cp.async there, 2 measured best
 * (4 lost 25-35%, CUDA log row 11); with the bulk copies of FDEC_MMA_TMA_WIDE none is best: Gemma 4 full 131k
 * 164.7 -> 141.3 us, 32k 53.1 -> 47.4, Gemma sliding-full 131k 304 -> 255.4 (bench/NOTES.md, CUDA log row 30). */
#ifndef FDEC_MMA_PREFETCH
#define FDEC_MMA_PREFETCH 0
#endif

/* Bulk copies at head_dim 128 on sm_90: each warp's rows are copied by the bulk copy engine (cp.async.bulk, one
 * copy per 256-byte row of K or V) completing on an mbarrier per warp and stage, into rows padded by 16 bytes
 * instead of XOR-swizzled. Llama-3-8B 131k 165 -> 140 us (3.25 -> 3.84 TB/s), 32k 46.7 -> 45.8 us; at head_dim
 * 64 (128-byte rows, twice the copies) it lost 30-40%, so there cp.async stays (bench/NOTES.md, CUDA log row 15).
 * Off since session 17 (CUDA log row 49): on the current kernel cp.async is faster at every head_dim and length, in
 * alternated rounds on an H200: Llama-3-8B 32k 38.0 -> 36.7 us, 131k 130.9 -> 127.2, 1k 6.2 -> 5.75; Gemma 4 full
 * 32k 41.5 -> 38.7, 131k 134.5 -> 128.5; Gemma sliding-full 131k 262 -> 246; LFM2 and the window even; on an H100
 * Llama 131k 189.5 -> 180.4, Gemma 4 full 32k 55.4 -> 51.65 (CUDA log row 52). A microbenchmark
 * (bench/micro/gpu_read.cu short) shows why: a block of per-row bulk copies streams ~15 GB/s, a block of cp.async
 * ~30 GB/s, at 3 stages or more alike. 1 brings the bulk copies back (with FDEC_MMA_TMA_WIDE at 256 and 512). */
#ifndef FDEC_MMA_TMA
#define FDEC_MMA_TMA 0
#endif
/* 1: at head_dim 128 a warp's bulk copies are issued row after row with warp-uniform operands (fdec_bulk_copy_elect)
 * instead of each lane its own rows, which the compiler serialises over the lanes (9 instructions and 4 moves to
 * uniform registers a copy). Llama-3-8B 4k 11.0 -> 10.7 us, 32k 39.3 -> 38.9 (head-major 41.2 -> 40.4), 131k even,
 * 1k 7.1 -> 7.3; at head_dim 256 and 512 it was 2-17% slower (bench/NOTES.md, CUDA log row 33; `UNI` in the issue
 * code below limits it to head_dim 128). */
#ifndef FDEC_MMA_UNIFORM_ISSUE
#define FDEC_MMA_UNIFORM_ISSUE 1
#endif
/* 1: bulk copies at head_dim 256 and 512 too (rows of 512 and 1024 bytes), the block's step split among its four
 * warps, each warp's rows on its own mbarrier, every warp waiting for all four. Gemma 4 full 131k 178 -> 166 us,
 * 32k 55.8 -> 53.5, Gemma sliding-full 131k 326 -> 307, 32k 88.6 -> 84.3; 4k at head_dim 512 0.4 us slower
 * (bench/NOTES.md, CUDA log row 29). 0: cp.async at head_dim 256 and 512. */
#ifndef FDEC_MMA_TMA_WIDE
#define FDEC_MMA_TMA_WIDE 1
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && FDEC_MMA_TMA
#define FDEC_MMA_TMA_ARCH 1
#else
#define FDEC_MMA_TMA_ARCH 0
#endif

/* Warps a block of the kernel for head_dim D on a device of compute capability major cc (the host's choice,
 * cuda.cu): at head_dim 512 FDEC_MMA_D512_WARPS where bulk copies run (sm_90), whose stages need more shared memory
 * than an A100 block may have; 4 elsewhere. */
constexpr int fdec_mma_warps(int D, int cc) {
    return D == 512 && cc >= 9 && FDEC_MMA_TMA && FDEC_MMA_TMA_WIDE ? FDEC_MMA_D512_WARPS : FDEC_CUDA_WARPS;
}

template <int D, int NW_>
struct fdec_mma_shape {
    static constexpr int DW = D < 128 ? D : 128;                    /* dimensions per warp */
    static constexpr int WD = D / DW;                               /* warps per position group: 1, 1, 2, 4 */
    static constexpr int NW = NW_;                                  /* warps a block */
    static constexpr int MINB = NW > FDEC_CUDA_WARPS ? 1 : FDEC_CUDA_BLOCKS_PER_SM; /* blocks an SM (launch bounds) */
    static constexpr int WP = NW / WD;                              /* position groups */
    static constexpr int STAGE_BYTES = D == 64 ? FDEC_MMA_D64_STAGE_BYTES
                                      : D == 512 ? (FDEC_MMA_D512_STAGE_BYTES ? FDEC_MMA_D512_STAGE_BYTES
                                                                              : FDEC_MMA_STAGE_BYTES * WP)
                                                 : FDEC_MMA_STAGE_BYTES;
    static constexpr int STAGES = D == 64    ? FDEC_MMA_D64_STAGES
                                 : D == 512 ? FDEC_MMA_D512_STAGES
                                            : FDEC_MMA_STAGES;
    static constexpr int NP = STAGE_BYTES / (4 * D);                /* positions per stage: 128, 64, 32, 16 */
    static constexpr int PW = NP / WP;                              /* positions per warp per stage */
    static constexpr int NT = PW / 8;                               /* score tiles (8 positions) per warp */
    static constexpr int KS = DW / 16;                              /* k-steps of Q K^T per warp */
    static constexpr int OT = DW / 8;                               /* output tiles (8 dimensions) per warp */
    static constexpr int CH = D / 8;                                /* 16-byte pieces per row */
    /* who copies a step's rows: at D <= 128 (WD = 1) each warp its own PW rows, so a warp depends on no other
     * warp in the loop (no block barrier); else the whole block all NP rows */
    static constexpr int CT = WD == 1 ? 32 : NW * 32;               /* copying threads */
    static constexpr int CR = WD == 1 ? PW : NP;                    /* rows they copy */
    static constexpr int ROWS_PER_PASS = CT / CH;                   /* rows one cp.async pass covers */
    static_assert(NT % 2 == 0 && PW % 16 == 0, "P V takes positions 16 at a time");
    static_assert(CH >= 8, "the swizzle needs 8 pieces per row");
    static_assert(WP <= FDEC_CUDA_WARPS, "the host sizes the tail's shared memory for at most that many states");
    /* the bulk-copy layout: rows padded to RP bytes (16 more than a row, so ldmatrix meets no bank conflicts) */
    static constexpr int RP = D * 2 + 16;
    static constexpr int TSB = 2 * NP * RP; /* bytes of a stage of K and V rows */
    /* whether D takes bulk copies where the architecture has them (the host sizes shared memory by it) */
    static constexpr bool BULK = FDEC_MMA_TMA && (D == 128 || (FDEC_MMA_TMA_WIDE && D >= 256));
};

/* The dynamic shared memory of the kernel: the ring (padded rows where bulk copies run, sm_90: `tma`), and at D > 128
 * the partial scores the warps of a group exchange */
template <int D, int NW>
constexpr size_t fdec_mma_smem_bytes(bool tma) {
    using S = fdec_mma_shape<D, NW>;
    return (size_t)S::STAGES * (S::BULK && tma ? (size_t)S::TSB : (size_t)S::STAGE_BYTES) +
           (S::WD > 1 ? (size_t)NW * 32 * S::NT * 2 * sizeof(float) : 0);
}

__device__ __forceinline__ void fdec_ldsm_x4(unsigned (&r)[4], const void *smem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void fdec_ldsm_x4_t(unsigned (&r)[4], const void *smem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

/* A bulk copy of bytes (a multiple of 16) from global to shared memory that completes on the mbarrier at bar
 * (a shared address); sm_90. */
__device__ __forceinline__ void fdec_bulk_copy(void *smem, const void *gmem, int bytes, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(smem)),
                 "l"(gmem), "r"(bytes), "r"(bar)
                 : "memory");
#else
    (void)smem, (void)gmem, (void)bytes, (void)bar;
#endif
}

/* The same issued by one elected lane of a converged warp whose every lane passes the same (warp-uniform) operands,
 * so that they can stay in uniform registers: no loop over the lanes' distinct values. */
__device__ __forceinline__ void fdec_bulk_copy_elect(unsigned smem, const void *gmem, int bytes, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("{\n .reg .pred e;\n elect.sync _|e, 0xffffffff;\n"
                 " @e cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n}\n" ::"r"(
                     smem),
                 "l"(gmem), "r"(bytes), "r"(bar)
                 : "memory");
#else
    (void)smem, (void)gmem, (void)bytes, (void)bar;
#endif
}

/* D += A B, m16n8k16, f32 accumulate */
template <typename KT>
__device__ __forceinline__ void fdec_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if constexpr (std::is_same<KT, __half>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Rounds x to the 16-bit type and back; packs two 16-bit values into an MMA register (first in the low half). */
template <typename KT>
__device__ __forceinline__ float fdec_round16(float x) {
    if constexpr (std::is_same<KT, __half>::value) return __half2float(__float2half_rn(x));
    else return __bfloat162float(__float2bfloat16_rn(x));
}
template <typename KT>
__device__ __forceinline__ unsigned fdec_pack16(float a, float b) {
    /* a and b are already representable (outputs of fdec_round16), so the conversion is exact */
    if constexpr (std::is_same<KT, __half>::value) {
        __half2 h = __floats2half2_rn(a, b);
        return *reinterpret_cast<unsigned *>(&h);
    } else {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<unsigned *>(&h);
    }
}

/* The terms of x: x = t[0] + t[1] (+ t[2] for bf16), each representable in KT. */
template <typename KT>
struct fdec_split_terms {
    static constexpr int N = std::is_same<KT, __half>::value ? 2 : 3;
};
template <typename KT>
__device__ __forceinline__ void fdec_split16(float x, float (&t)[3]) {
    t[0] = fdec_round16<KT>(x);
    float r = x - t[0]; /* exact */
    t[1] = fdec_round16<KT>(r);
    t[2] = fdec_split_terms<KT>::N == 3 ? fdec_round16<KT>(r - t[1]) : 0.f;
}

template <typename KT, int D, int NW, bool STR = false>
__global__ void __launch_bounds__(NW * 32, fdec_mma_shape<D, NW>::MINB) fdec_mma_kernel(const fdec_cuda_params p) {
    FDEC_TL_DECL
    FDEC_TL_MARK(0)
    using S = fdec_mma_shape<D, NW>;
    constexpr int NSTAGE = S::STAGES;
    constexpr int DW = S::DW, WD = S::WD, WP = S::WP, NP = S::NP, PW = S::PW, NT = S::NT, KS = S::KS, OT = S::OT,
                  CH = S::CH;
    constexpr int NTERM = fdec_split_terms<KT>::N, RT = 8;
    /* q is brought to [2^(QEXP-1), 2^QEXP) per head and warp: 2^15 keeps f16 products below 2^31 with
     * subnormals 2^-40 of the largest term; bf16 has f32's exponent range and needs no room */
    constexpr int QEXP = std::is_same<KT, __half>::value ? 15 : 1;
    constexpr float PSCALE = std::is_same<KT, __half>::value ? 32768.f : 1.f;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gq = lane >> 2, cq = lane & 3; /* the MMA fragment's row group and column pair */
    const int pg = warp / WD, ds = (warp % WD) * DW;
    const uint32_t g = blockIdx.z, chunk = blockIdx.y, tile = blockIdx.x, h0 = g * p.R + tile * RT;
    const int nh = min(RT, (int)(p.R - tile * RT));

    float m = -INFINITY, l = 0.f; /* state of head gq (base 2; l in units of PSCALE), per lane: l is partial */
    float lb = 0.f;               /* l's block (FDEC_MMA_BLOCK_SUMS) */
    float o[OT][4];
#pragma unroll
    for (int j = 0; j < OT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

    /* the chunk's steps: positions [c0, c1) in steps of NP, or with FDEC_MMA_STRIDED_CHUNKS every nc-th step of
     * [lo, hi) from step `chunk` on (c0 = lo, c1 = hi): at head_dim 128, at 64 (FDEC_MMA_STRIDED_D64), and in the STR
     * instance at 512 */
    constexpr bool STRIDED = FDEC_MMA_STRIDED_CHUNKS && (D == 128 || STR || (D == 64 && FDEC_MMA_STRIDED_D64));
    /* in 64 bits, as in the SIMT kernel: the last chunk's end may lie past 2^32 */
    const uint64_t c0 = STRIDED ? (uint64_t)p.lo : (uint64_t)p.lo + (uint64_t)chunk * p.chunk_len,
                   c1 = STRIDED || c0 + p.chunk_len >= p.hi ? (uint64_t)p.hi : c0 + p.chunk_len;
    const KT *kbase = (const KT *)p.k + (size_t)g * p.hs, *vbase = (const KT *)p.v + (size_t)g * p.hs;
    const uint32_t total = c1 > c0 ? (uint32_t)((c1 - c0 + NP - 1) / NP) : 0; /* steps of [c0, c1) */
    const int nsteps = !STRIDED ? (int)total : total > chunk ? (int)((total - chunk + p.nc - 1) / p.nc) : 0;
    auto step_base = [&](int step) {
        return (uint64_t)c0 + ((uint64_t)step * (STRIDED ? p.nc : 1) + (STRIDED ? chunk : 0)) * NP;
    };

    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr bool TMA = FDEC_MMA_TMA_ARCH && S::BULK;
    constexpr int SB = TMA ? S::TSB : S::STAGE_BYTES;
    /* group barriers (FDEC_MMA_GROUP_BARRIERS): with bulk copies warp w copies rows w WR .. of a step, which are its
     * own position group's (WR WD = PW), so a group depends on no other group in the loop */
    constexpr bool GB = FDEC_MMA_GROUP_BARRIERS && TMA && WD > 1 && WP > 1;
    static_assert(!GB || (NP / S::NW) * WD == PW, "a group's warps copy the group's rows");
    /* stage s: K rows then V rows, [NP][CH] pieces of 16 bytes, piece c of row r at r * CH + (c ^ (r & 7)); with
     * bulk copies, at byte r * RP + 16 c */
    auto kst = [&](int s) { return reinterpret_cast<uint4 *>(smem_raw + (size_t)s * SB); };
    auto vst = [&](int s) {
        return TMA ? reinterpret_cast<uint4 *>(smem_raw + (size_t)s * SB + NP * S::RP) : kst(s) + NP * CH;
    };
    auto piece = [&](const uint4 *st, int r, int c) {
        return TMA ? reinterpret_cast<const uint4 *>(reinterpret_cast<const unsigned char *>(st) + r * S::RP) + c
                   : st + r * CH + (c ^ (r & 7));
    };
    float *xs = reinterpret_cast<float *>(smem_raw + (size_t)NSTAGE * SB);
#if FDEC_MMA_TMA_ARCH
    __shared__ __align__(8) uint64_t bars[S::NW][NSTAGE]; /* a warp's stages' arrivals (bulk copies) */
    if constexpr (TMA) {
        if (lane == 0) {
            for (int i = 0; i < NSTAGE; i++) {
                unsigned b = (unsigned)__cvta_generic_to_shared(&bars[warp][i]);
                asm volatile("mbarrier.init.shared.b64 [%0], 1;\n" ::"r"(b));
            }
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        }
        __syncwarp();
    }
#endif
    fdec_grid_wait(); /* nothing above touches memory an earlier grid may use */
    FDEC_TL_MARK(1)

    /* q's loads go out first and are used after the first steps' copies are issued: their latency hides behind
     * the copies' issue. When they went out after the copies, the wait on them was 13% of the Llama 1k decode
     * kernel's stall samples and 32% of the window's (bench/NOTES.md, CUDA log row 22). */
    float qv[KS][4]; /* q fragments (A operand, row-major 16 x 16 per k-step): rows gq (term 0) and gq + 8 (term 1) */
    const bool qok = gq < nh;
    {
        const size_t qrow = (size_t)(h0 + (qok ? gq : 0)) * D; /* rows past the tile's heads load head h0 */
        fdec_with_loader(p.q, p.qt, [&](auto ld) {
#pragma unroll
            for (int ks = 0; ks < KS; ks++)
#pragma unroll
                for (int j = 0; j < 4; j++) qv[ks][j] = ld(qrow + ds + ks * 16 + 2 * cq + (j & 1) + (j >> 1) * 8);
        });
    }

    /* this thread's piece of each row it copies: fixed column, rows row0 + id / CH + i * ROWS_PER_PASS */
    const int cp_id = WD == 1 ? lane : (int)threadIdx.x;
    const int cp_c = cp_id % CH, cp_r = (WD == 1 ? pg * PW : 0) + cp_id / CH;
    /* FDEC_MMA_INTERLEAVE (cp.async with each warp its own rows): warp pg's slot i of a step holds the step's
     * position i * WP + pg instead of pg * PW + i. Positions only matter for the mask below (src_row). */
    constexpr bool IL = FDEC_MMA_INTERLEAVE && WD == 1 && !TMA; /* with bulk copies at 128: even (CUDA log row 28) */
    auto src_row = [&](int r) { return IL ? (r % PW) * WP + r / PW : r; };
    const size_t pass_stride = (size_t)S::ROWS_PER_PASS * (IL ? WP : 1) * p.ps; /* elements between this thread's rows */
    auto issue = [&](int step, int s) {
        const uint64_t base = step_base(step);
        uint4 *ks_ = kst(s), *vs_ = vst(s);
#if FDEC_MMA_TMA_ARCH
        if constexpr (TMA) { /* this warp's WR rows: lane i copies rows r0 + i, + 32, ... */
            constexpr int WR = WD == 1 ? PW : NP / S::NW; /* at D >= 256 a warp's share of the block's step */
            const int r0 = WD == 1 ? pg * PW : warp * WR;
            const uint64_t lim = c1 > base + r0 ? c1 - (base + r0) : 0; /* rows in order (no interleave here) */
            const int nvalid = lim < (uint64_t)WR ? (int)lim : WR;
            const unsigned bar = (unsigned)__cvta_generic_to_shared(&bars[warp][s]);
            if (lane == 0)
                asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" ::"r"(bar),
                             "r"(nvalid * 2 * D * (int)sizeof(KT)) : "memory");
            __syncwarp();
            constexpr bool UNI = FDEC_MMA_UNIFORM_ISSUE && WD == 1;
            if constexpr (UNI) {
                /* the warp's values through a shuffle from lane 0, so that the compiler knows they are warp-uniform */
                const int r0u = __shfl_sync(0xffffffffu, r0, 0), nv = __shfl_sync(0xffffffffu, nvalid, 0);
                const unsigned kd0 = (unsigned)__cvta_generic_to_shared(ks_) + r0u * S::RP,
                               vd0 = (unsigned)__cvta_generic_to_shared(vs_) + r0u * S::RP,
                               baru = __shfl_sync(0xffffffffu, bar, 0);
                for (int i = 0; i < nv; i++) {
                    const uint32_t row = fdec_cache_row(p, base + r0u + i);
                    fdec_bulk_copy_elect(kd0 + i * S::RP, kbase + (size_t)row * p.ps, D * (int)sizeof(KT), baru);
                    fdec_bulk_copy_elect(vd0 + i * S::RP, vbase + (size_t)row * p.ps, D * (int)sizeof(KT), baru);
                }
            }
            for (int i = (UNI ? nvalid : 0) + lane; i < WR; i += 32) { /* with UNI only the rows past the chunk */
                const int r = r0 + i;
                unsigned char *kd = reinterpret_cast<unsigned char *>(ks_) + r * S::RP,
                              *vd = reinterpret_cast<unsigned char *>(vs_) + r * S::RP;
                if (i < nvalid) {
                    const uint32_t row = fdec_cache_row(p, base + r);
                    const KT *ks = kbase + (size_t)row * p.ps, *vs = vbase + (size_t)row * p.ps;
                    fdec_bulk_copy(kd, ks, D * (int)sizeof(KT), bar);
                    fdec_bulk_copy(vd, vs, D * (int)sizeof(KT), bar);
                } else { /* rows past the chunk: zeros (their weight is 0, and 0 * a stale inf would be NaN) */
                    for (int c = 0; c < CH; c++)
                        reinterpret_cast<uint4 *>(kd)[c] = make_uint4(0, 0, 0, 0),
                        reinterpret_cast<uint4 *>(vd)[c] = make_uint4(0, 0, 0, 0);
                    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* before later bulk copies */
                }
            }
            return;
        }
#endif
        if (!p.ring && base + NP <= c1) { /* every row of the step there and contiguous: pointer steps */
            const KT *kp = kbase + (size_t)(base + src_row(cp_r)) * p.ps + cp_c * 8, *vp = vbase + (kp - kbase);
#pragma unroll
            for (int i = 0; i < S::CR / S::ROWS_PER_PASS; i++) {
                const int r = cp_r + i * S::ROWS_PER_PASS, at = r * CH + (cp_c ^ (r & 7));
                fdec_cp_async16(ks_ + at, kp + i * pass_stride);
                fdec_cp_async16(vs_ + at, vp + i * pass_stride);
            }
            return;
        }
#pragma unroll
        for (int i = 0; i < S::CR / S::ROWS_PER_PASS; i++) {
            const int r = cp_r + i * S::ROWS_PER_PASS;
            const uint64_t t = base + src_row(r);
            const bool ok = t < c1;
            const uint32_t row = ok ? fdec_cache_row(p, t) : 0;
            const size_t off = (size_t)row * p.ps + cp_c * 8;
            const int at = r * CH + (cp_c ^ (r & 7));
            fdec_cp_async16_zfill(ks_ + at, kbase + off, ok ? 16u : 0u); /* rows past c1: zero-filled, not read */
            fdec_cp_async16_zfill(vs_ + at, vbase + off, ok ? 16u : 0u);
        }
    };

#pragma unroll
    for (int s = 0; s < NSTAGE - 1; s++) {
        if (s < nsteps) issue(s, s);
        fdec_cp_async_commit();
    }
    /* q's 16-bit terms while the first steps' rows are on their way */
    unsigned qa[KS][4], qa3[NTERM == 3 ? KS : 1][2];
    float qinv;
    {
        float amax = 0.f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                qv[ks][j] = qok ? qv[ks][j] * p.scale_log2 : 0.f;
                amax = fmaxf(amax, fabsf(qv[ks][j])); /* NaN is dropped here and caught by the products */
            }
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        int ex = 0;
        if (amax > 0.f && amax <= 3.4e38f) frexpf(amax, &ex);
        const int k = max(-100, min(100, QEXP - ex));
        const float qsc = ldexpf(1.f, k);
        qinv = ldexpf(1.f, -k);
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            float t[4][3];
#pragma unroll
            for (int j = 0; j < 4; j++) fdec_split16<KT>(qv[ks][j] * qsc, t[j]);
            qa[ks][0] = fdec_pack16<KT>(t[0][0], t[1][0]); /* row gq,     k 2cq    */
            qa[ks][1] = fdec_pack16<KT>(t[0][1], t[1][1]); /* row gq + 8, k 2cq    */
            qa[ks][2] = fdec_pack16<KT>(t[2][0], t[3][0]); /* row gq,     k 2cq + 8 */
            qa[ks][3] = fdec_pack16<KT>(t[2][1], t[3][1]); /* row gq + 8, k 2cq + 8 */
            if constexpr (NTERM == 3) {
                qa3[ks][0] = fdec_pack16<KT>(t[0][2], t[1][2]);
                qa3[ks][1] = fdec_pack16<KT>(t[2][2], t[3][2]);
            }
        }
    }

    /* L2 prefetch of the rows FDEC_MMA_PREFETCH steps beyond the last one in shared memory: more bytes on their
     * way from HBM than the ring holds (shared memory caps the ring at 3 steps), one bulk prefetch per row of K
     * or V; sm_90 only. At head_dim 256 and 512 only: with cp.async there it gained 8% and 6% at 131k; at 64
     * (128-byte rows, twice the prefetches) it lost 24%, at 128 it was even; with bulk copies at 256 and 512 it
     * costs 14-16% at 131k, so it is off (bench/NOTES.md, CUDA log rows 11 and 30). */
    constexpr int PFS = D >= 256 ? FDEC_MMA_PREFETCH : 0;
    auto prefetch = [&](int step) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        const uint64_t base = step_base(step);
        const int row0 = WD == 1 ? pg * PW : 0;
        for (int j = cp_id; j < S::CR * 2; j += S::CT) {
            const uint64_t t = base + row0 + (j >> 1);
            if (t >= c1) break;
            const uint32_t row = fdec_cache_row(p, t);
            const KT *src = ((j & 1) ? vbase : kbase) + (size_t)row * p.ps;
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(D * (int)sizeof(KT)) : "memory");
        }
#else
        (void)step;
#endif
    };
    for (int st = NSTAGE - 1; st < NSTAGE - 1 + PFS && st < nsteps; st++) prefetch(st);

    const int prow = pg * PW; /* this warp's first position in a stage */
    /* the barrier of the warps that share a position group's rows and scores: the block's, or with GB the group's */
    auto sync_group = [&]() {
        if constexpr (GB) asm volatile("bar.sync %0, %1;\n" ::"r"(1 + pg), "r"(WD * 32) : "memory");
        else __syncthreads();
    };
    for (int it = 0; it < nsteps; it++) {
#if FDEC_MMA_TMA_ARCH
        if constexpr (TMA) { /* wait for step it's rows (the mbarriers' phase it / NSTAGE): at D <= 128 this warp's
                                * own, else every warp's */
            const unsigned par = (unsigned)(it / NSTAGE) & 1u;
#pragma unroll
            for (int w = 0; w < (WD == 1 ? 1 : GB ? WD : S::NW); w++) {
                const unsigned bar =
                    (unsigned)__cvta_generic_to_shared(&bars[WD == 1 ? warp : GB ? pg * WD + w : w][it % NSTAGE]);
                unsigned done = 0;
                while (!done)
                    asm volatile("{\n .reg .pred q;\n mbarrier.try_wait.parity.shared.b64 q, [%1], %2;\n"
                                 " selp.u32 %0, 1, 0, q;\n}\n"
                                 : "=r"(done)
                                 : "r"(bar), "r"(par)
                                 : "memory");
            }
        } else
#endif
        fdec_cp_async_wait<NSTAGE - 2>();
        /* stage it has landed for every copying thread; stage it - 1 is free */
        if constexpr (WD == 1) __syncwarp();
        else sync_group();
        if (it + NSTAGE - 1 < nsteps) issue(it + NSTAGE - 1, (it + NSTAGE - 1) % NSTAGE);
        fdec_cp_async_commit();
        if (PFS && it + NSTAGE - 1 + PFS < nsteps) prefetch(it + NSTAGE - 1 + PFS);
        if (FDEC_MMA_MEASURE_COPY_ONLY) continue;
        const int s = it % NSTAGE;
        const uint4 *K = kst(s), *V = vst(s);

        /* S^T tiles: rows = heads (two terms), columns = 8 positions */
        /* two accumulators per tile (even and odd k-steps): half the chain of dependent MMAs */
        float sc[NT][4], sd[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int j = 0; j < 4; j++) sc[nt][j] = sd[nt][j] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KS / 2; kk++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int r = prow + nt * 8 + (lane & 7), c = ds / 8 + kk * 4 + (lane >> 3);
                unsigned b[4];
                fdec_ldsm_x4(b, piece(K, r, c));
                fdec_mma<KT>(sc[nt], qa[2 * kk], b[0], b[1]);
                fdec_mma<KT>(sd[nt], qa[2 * kk + 1], b[2], b[3]);
                if constexpr (NTERM == 3) {
                    const unsigned a0[4] = {qa3[2 * kk][0], 0u, qa3[2 * kk][1], 0u};
                    const unsigned a1[4] = {qa3[2 * kk + 1][0], 0u, qa3[2 * kk + 1][1], 0u};
                    fdec_mma<KT>(sc[nt], a0, b[0], b[1]);
                    fdec_mma<KT>(sd[nt], a1, b[2], b[3]);
                }
            }
        float sv[NT][2]; /* head gq at positions prow + nt * 8 + 2 cq + {0, 1} */
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            sv[nt][0] = ((sc[nt][0] + sd[nt][0]) + (sc[nt][2] + sd[nt][2])) * qinv;
            sv[nt][1] = ((sc[nt][1] + sd[nt][1]) + (sc[nt][3] + sd[nt][3])) * qinv;
        }
        if constexpr (WD > 1) { /* add the partial scores of the group's warps, in warp order in every warp */
            float *mine = xs + ((size_t)warp * 32 + lane) * NT * 2;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) mine[nt * 2] = sv[nt][0], mine[nt * 2 + 1] = sv[nt][1];
            sync_group();
#pragma unroll
            for (int nt = 0; nt < NT; nt++) sv[nt][0] = sv[nt][1] = 0.f;
#pragma unroll
            for (int w = 0; w < WD; w++) {
                const float *x = xs + ((size_t)(pg * WD + w) * 32 + lane) * NT * 2;
#pragma unroll
                for (int nt = 0; nt < NT; nt++) sv[nt][0] += x[nt * 2], sv[nt][1] += x[nt * 2 + 1];
            }
        }
        const uint64_t pbase = step_base(it);
        float smax = m;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float x = sv[nt][e];
                x = fmaf(0.f, x, x); /* +-inf -> NaN: the head comes out NaN */
                x = pbase + src_row(prow + nt * 8 + 2 * cq + e) < c1 ? x : -INFINITY;
                sv[nt][e] = x;
                smax = fmaxf(smax, x);
            }
        smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 1));
        smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 2));
        const float alpha = fdec_state_weight2(m, smax);
        m = smax;
        if (__any_sync(0xffffffffu, alpha != 1.f)) {
            l *= alpha, lb *= alpha;
#pragma unroll
            for (int j = 0; j < OT; j++) o[j][0] *= alpha, o[j][1] *= alpha, o[j][2] *= alpha, o[j][3] *= alpha;
        }
        /* P as the A operand: rows gq / gq + 8 = the terms of p, columns = 16 positions */
        float ls = 0.f; /* this step's weights */
#pragma unroll
        for (int kp = 0; kp < NT / 2; kp++) {
            float t[4][3];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float x = sv[2 * kp + (j >> 1)][j & 1];
                const float w = x == -INFINITY ? 0.f : exp2f(x - smax) * PSCALE;
                fdec_split16<KT>(w, t[j]);
                ls += (t[j][0] + t[j][1]) + t[j][2]; /* the weight the MMA applies */
            }
            const unsigned pa[4] = {fdec_pack16<KT>(t[0][0], t[1][0]), fdec_pack16<KT>(t[0][1], t[1][1]),
                                    fdec_pack16<KT>(t[2][0], t[3][0]), fdec_pack16<KT>(t[2][1], t[3][1])};
            unsigned pa3[4] = {0u, 0u, 0u, 0u};
            if constexpr (NTERM == 3)
                pa3[0] = fdec_pack16<KT>(t[0][2], t[1][2]), pa3[2] = fdec_pack16<KT>(t[2][2], t[3][2]);
#pragma unroll
            for (int np = 0; np < OT / 2; np++) {
                const int r = prow + kp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), c = ds / 8 + np * 2 + (lane >> 4);
                unsigned b[4];
                fdec_ldsm_x4_t(b, piece(V, r, c));
#if FDEC_MMA_ROUNDED_SUMS
                /* this step's 16 positions from zero, then added to o in the FP32 pipe (rounded to nearest) */
                float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
#else
                float(&d0)[4] = o[2 * np];
                float(&d1)[4] = o[2 * np + 1];
#endif
                fdec_mma<KT>(d0, pa, b[0], b[1]);
                fdec_mma<KT>(d1, pa, b[2], b[3]);
                if constexpr (NTERM == 3) {
                    fdec_mma<KT>(d0, pa3, b[0], b[1]);
                    fdec_mma<KT>(d1, pa3, b[2], b[3]);
                }
#if FDEC_MMA_BLOCK_SUMS
#pragma unroll
                for (int e = 0; e < 2; e++) { /* elements 0, 1: p's high terms; 2, 3: its low terms (the rows g + 8) */
                    o[2 * np][e + 2] += d0[e] + d0[e + 2];
                    o[2 * np + 1][e + 2] += d1[e] + d1[e + 2];
                }
#elif FDEC_MMA_ROUNDED_SUMS
#pragma unroll
                for (int e = 0; e < 4; e++) o[2 * np][e] += d0[e], o[2 * np + 1][e] += d1[e];
#endif
            }
        }
#if FDEC_MMA_BLOCK_SUMS
        lb += ls;
        if ((it & (FDEC_MMA_SUM_STEPS - 1)) == FDEC_MMA_SUM_STEPS - 1) { /* the block into o and l */
#pragma unroll
            for (int j = 0; j < OT; j++) fdec_flush_block(o[j][0], o[j][2]), fdec_flush_block(o[j][1], o[j][3]);
            fdec_flush_block(l, lb);
        }
#else
        l += ls;
#endif
    }
    fdec_cp_async_wait<0>();
    __syncthreads(); /* the ring's memory is reused below */

    /* this position group's state: l summed over the row's four lanes; O = term rows added, PSCALE removed */
    l += lb;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    float *smem = reinterpret_cast<float *>(smem_raw);
    float *sm_m = smem, *sm_l = smem + WP * RT, *sm_o = smem + 2 * WP * RT; /* sm_o: [WP][RT][D] */
    if (gq < nh) {
        if (warp % WD == 0 && cq == 0) sm_m[pg * RT + gq] = m, sm_l[pg * RT + gq] = l * (1.f / PSCALE);
#pragma unroll
        for (int j = 0; j < OT; j++) {
            const int d = ds + j * 8 + 2 * cq;
            /* with FDEC_MMA_BLOCK_SUMS o[j][2..3] are the last block (an inf in o makes it NaN, inf - inf: non-finite
             * either way, and the tail makes the head NaN, flashdec.h) */
            sm_o[(pg * RT + gq) * D + d] = (o[j][0] + o[j][2]) * (1.f / PSCALE);
            sm_o[(pg * RT + gq) * D + d + 1] = (o[j][1] + o[j][3]) * (1.f / PSCALE);
        }
    }
    __syncthreads();
    FDEC_TL_MARK(2)
    fdec_block_tail<D, RT, WP>(p, smem, nh, h0, chunk);
    FDEC_TL_END(1)
}

/* common.cuh — what the CUDA kernels share: the launch parameters, the cache row (kv.h's rule), the element loaders
 * and stores, the cp.async copies and the programmatic-launch wait. The kernels: simt.cuh (any shape), mma.cuh
 * (tensor cores), merge.cuh (the block tails and the merges of partial states); cuda.cu launches them.
 *
 * Inside a decode kernel scores are in base 2 (q is pre-multiplied by scale * log2 e); states in the scratch are in
 * natural-log units so that the merges are state.h's. */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "flashdec.h"

#include "../kv.h"
#include "../logits.h"
#include "../state.h"

#define FDEC_CUDA_WARPS 4 /* warps per block */
#define FDEC_CUDA_MAX_CHUNKS 256
/* Blocks per SM: the split's aim (cuda.cu) and the tensor-core kernel's launch bounds (TUNING.md). */
#define FDEC_CUDA_BLOCKS_PER_SM 2

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
    fdec_logits logits; /* the variants (logits.h): the kernels' fdec_logit2, the chunk merges' sink */
    uint32_t qpos;      /* the query's position */
    fdec_kv_scales sc;  /* fp8 caches' scales (kv.h) */
};

/* The cache row of attended position t (lo <= t < lo + ring when there is a ring): kv.h's rule, from ring_lo =
 * lo mod ring by one conditional subtraction. */
__device__ __forceinline__ uint32_t fdec_cache_row(const fdec_cuda_params &p, uint64_t t) {
    if (!p.ring) return (uint32_t)t;
    return fdec_kv_ring_row(p.ring, p.ring_lo, (uint32_t)(t - p.lo));
}

/* A kernel launched as a programmatic dependent (sm_90; cuda.cu) may start while the grid before it in the stream
 * is still running: it waits here, before its first read or write of memory the earlier grid may touch, until that
 * grid has finished and its writes are visible. Elsewhere a no-op. */
__device__ __forceinline__ void fdec_grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* The K/V element types of the kernels' template parameter KT: float, __half, __nv_bfloat16, the fp8 types
 * (__nv_fp8_e4m3, __nv_fp8_e5m2: one byte, read 16 at a time on the fast shapes like the others) and tags for ggml's
 * blocks (fdec_q8_0_t, fdec_q4_0_t: read element by element, dequantised as loaded, on the generic path only). */
struct fdec_q8_0_t {};
struct fdec_q4_0_t {};
template <typename KT>
constexpr bool fdec_is_block = std::is_same<KT, fdec_q8_0_t>::value || std::is_same<KT, fdec_q4_0_t>::value;
template <typename KT>
constexpr bool fdec_is_fp8 = std::is_same<KT, __nv_fp8_e4m3>::value || std::is_same<KT, __nv_fp8_e5m2>::value;

__device__ __forceinline__ float fdec_to_f32(float x) { return x; }
__device__ __forceinline__ float fdec_to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float fdec_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
/* fp8 -> f16 is exact (E4M3's 0x7f / 0xff: NaN) */
__device__ __forceinline__ float fdec_to_f32(__nv_fp8_e4m3 x) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(x.__x, __NV_E4M3)));
}
__device__ __forceinline__ float fdec_to_f32(__nv_fp8_e5m2 x) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(x.__x, __NV_E5M2)));
}

/* Element i of a cache of ggml's block type KT as f32: its block's f16 scale times its code (dtype.c's rule). */
template <typename KT>
__device__ __forceinline__ float fdec_block_ld(const void *base, size_t i) {
    static_assert(fdec_is_block<KT>, "a block type");
    if constexpr (std::is_same<KT, fdec_q8_0_t>::value) {
        const unsigned char *b = (const unsigned char *)base + i / 32 * 34;
        const float d = __half2float(__ushort_as_half((unsigned short)(__ldg(b) | __ldg(b + 1) << 8)));
        return d * (float)(signed char)__ldg(b + 2 + i % 32);
    } else {
        const unsigned char *b = (const unsigned char *)base + i / 32 * 18;
        const float d = __half2float(__ushort_as_half((unsigned short)(__ldg(b) | __ldg(b + 1) << 8)));
        const uint32_t j = i % 32, x = __ldg(b + 2 + (j & 15));
        return d * (float)((int)(j < 16 ? x & 15 : x >> 4) - 8);
    }
}

/* Element i of an array of dtype T (0 f32, 1 f16, 2 bf16) as f32, the type known at compile time. */
template <int T>
__device__ __forceinline__ float fdec_ld(const void *p, size_t i) {
    using E = typename std::conditional<T == 0, float,
                                        typename std::conditional<T == 1, __half, __nv_bfloat16>::type>::type;
    return fdec_to_f32(((const E *)p)[i]);
}

/* Calls f(ld) once, with ld(i) = element i of p as f32 for p of runtime dtype t: the branch on the type is taken
 * once for all of f's loads, so that nothing branches between them and they go out together (with a branch around
 * each load, each waited for the one before it). Every index f passes must be in bounds: select after the load, not
 * around it. */
template <class F>
__device__ __forceinline__ void fdec_with_loader(const void *p, int t, F &&f) {
    if (t == 0) f([p](size_t i) { return fdec_ld<0>(p, i); });
    else if (t == 1) f([p](size_t i) { return fdec_ld<1>(p, i); });
    else f([p](size_t i) { return fdec_ld<2>(p, i); });
}

/* x into element i of an array of dtype t: f32, f16, bf16 (rounded to nearest even), or fp8 (t 3: E4M3, 4: E5M2;
 * to nearest even, saturated to the largest finite value; NaN as dtype.c writes it) */
__device__ __forceinline__ void fdec_store_any(void *p, size_t i, int t, float x) {
    if (t == 0) ((float *)p)[i] = x;
    else if (t == 1) ((__half *)p)[i] = __float2half_rn(x);
    else if (t == 2) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x);
    else
        ((unsigned char *)p)[i] = x != x ? (t == 3 ? 0x7f : 0x7e)
                                         : __nv_cvt_float_to_fp8(x, __NV_SATFINITE, t == 3 ? __NV_E4M3 : __NV_E5M2);
}


/* hi += blk, and blk = the add's rounding error (Fast2Sum: exact where |hi| >= |blk|, else a rounding of hi's size,
 * which happens while the total is about one block's size, not over the chunk): the compensated flush of both
 * kernels' block sums (fdec_decode_kernel's COMP instances, the tensor-core kernel's FDEC_MMA_BLOCK_SUMS) */
__device__ __forceinline__ void fdec_flush_block(float &hi, float &blk) {
    const float s = hi + blk;
    blk = (hi - s) + blk;
    hi = s;
}


/* The K/V copies ask L2 to fetch the 128 bytes around each miss (cp.async's .L2::128B: TUNING.md). */
#define FDEC_CP_L2 ".L2::128B"

/* FDEC_CP_EVICT_FIRST (the Makefile's CUDA_L2_POLICY): the K/V copies carry an L2 evict-first policy
 * (`createpolicy.fractional.L2::evict_first`, made beside each copy), so that the rows each call streams once leave
 * L2 before the chunk states, q and the output do (0-5% a call on the H200). A policy made once a thread and kept in a
 * register made some launches fail with an illegal instruction. The ptxas of early CUDA 13 releases can drop the
 * `createpolicy` and leave a copy reading an unset register, which traps or not by what it held, so the Makefile sets
 * it only with the compiler release it was checked on, and `make check-sass` looks for the hazard. Only the sm_90
 * code takes it: the sm_80 code has never run on a GPU here. */
#ifndef FDEC_CP_EVICT_FIRST
#define FDEC_CP_EVICT_FIRST 0
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

/* A load's worth of K/V kept as it came from memory (converted to f32 only when used: fewer registers); a block
 * type's element is kept as its f32 value. */
template <typename KT, int VEC>
struct fdec_raw {
    typedef typename std::conditional<
        fdec_is_block<KT>, float, typename std::conditional<VEC * sizeof(KT) == 16, uint4, KT>::type>::type type;
};

template <typename KT, int VEC>
__device__ __forceinline__ void raw_to_f32(const typename fdec_raw<KT, VEC>::type &r, float *x) {
    if constexpr (fdec_is_block<KT>) {
        x[0] = r;
    } else if constexpr (fdec_is_fp8<KT> && VEC % 2 == 0) { /* two at a time: one cvt.f16x2 on sm_89 and later */
        const __nv_fp8x2_storage_t *e = reinterpret_cast<const __nv_fp8x2_storage_t *>(&r);
        constexpr __nv_fp8_interpretation_t I = std::is_same<KT, __nv_fp8_e4m3>::value ? __NV_E4M3 : __NV_E5M2;
#pragma unroll
        for (int i = 0; i < VEC / 2; i++) {
            const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(e[i], I)));
            x[2 * i] = f.x, x[2 * i + 1] = f.y;
        }
    } else {
        const KT *e = reinterpret_cast<const KT *>(&r);
#pragma unroll
        for (int i = 0; i < VEC; i++) x[i] = fdec_to_f32(e[i]);
    }
}

/* The generic path's load of element i of a K/V array (one element: VEC = 1), as raw_to_f32 takes it. */
template <typename KT>
__device__ __forceinline__ typename fdec_raw<KT, 1>::type fdec_kv_raw1(const void *base, size_t i) {
    if constexpr (fdec_is_block<KT>) return fdec_block_ld<KT>(base, i);
    else if constexpr (fdec_is_fp8<KT>) {
        KT x;
        x.__x = __ldg((const unsigned char *)base + i);
        return x;
    } else return __ldg((const KT *)base + i);
}



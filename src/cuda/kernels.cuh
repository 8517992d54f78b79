/* kernels.cuh — the CUDA decode-attention kernels: split-KV partial + combine.
 *
 * partial: block (head tile x, chunk y, KV head z) computes the partial state (state.h) of RT query heads of KV
 * head z over the chunk's positions. Each row (one position's K or V vector) is read by T lanes, VEC
 * elements per load (16 bytes on the fast paths), E elements per lane; a warp holds 32/T rows at once and
 * each warp keeps U rows per lane group in flight. Every lane group runs its own online softmax over the rows
 * it reads; the groups and the warps merge at the end, and the block writes one (m, l, o) per head.
 * combine: block h merges the chunks' states of query head h into out and lse.
 *
 * Template parameters only specialise shapes: KT the K/V element type, D the head_dim (0: any, read with
 * scalar loads), RT the most query heads per block.
 */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "../state.h"

#define FDEC_CUDA_WARPS 4 /* warps per partial block */

struct fdec_cuda_params {
    const void *q, *k, *v;
    void *out;
    float *lse;
    float *part_m, *part_l, *part_o; /* [H][nc], [H][nc], [H][nc][D] */
    uint32_t D, H, G, R;
    uint32_t lo, hi, ring, ring_lo; /* attended [lo, hi); ring_lo = lo % ring */
    uint32_t nc, chunk_len;
    size_t ps, hs; /* element strides */
    float scale_log2; /* scale * log2(e): scores are kept in base 2 inside the kernel */
    int qt, ot;
};

__device__ __forceinline__ float fdec_to_f32(float x) { return x; }
__device__ __forceinline__ float fdec_to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float fdec_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

__device__ __forceinline__ float fdec_load_any(const void *p, size_t i, int t) {
    if (t == 0) return ((const float *)p)[i];
    if (t == 1) return __half2float(((const __half *)p)[i]);
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

__device__ __forceinline__ void fdec_store_any(void *p, size_t i, int t, float x) {
    if (t == 0) ((float *)p)[i] = x;
    else if (t == 1) ((__half *)p)[i] = __float2half_rn(x);
    else ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x);
}

/* VEC elements of type KT at p (16-byte aligned when VEC * sizeof(KT) == 16), as floats. */
template <typename KT, int VEC>
__device__ __forceinline__ void load_vec(const KT *p, float *x) {
    if constexpr (VEC * sizeof(KT) == 16) {
        uint4 raw = __ldg(reinterpret_cast<const uint4 *>(p));
        const KT *e = reinterpret_cast<const KT *>(&raw);
#pragma unroll
        for (int i = 0; i < VEC; i++) x[i] = fdec_to_f32(e[i]);
    } else {
#pragma unroll
        for (int i = 0; i < VEC; i++) x[i] = fdec_to_f32(p[i]);
    }
}

/* Shape constants of one specialisation. */
template <typename KT, int D>
struct fdec_shape {
    static constexpr int VEC = D ? 16 / (int)sizeof(KT) : 1;                    /* elements per load */
    static constexpr int T = D ? (D / VEC < 32 ? D / VEC : 32) : 32;            /* lanes per row */
    static constexpr int E = D ? D / T : FDEC_MAX_HEAD_DIM / 32;                /* elements per lane */
    static constexpr int GROUPS = 32 / T;                                       /* rows per warp at once */
    static constexpr int U = E >= 16 ? 2 : 4;                                   /* rows in flight per group */
};

template <typename KT, int D, int RT>
__global__ void __launch_bounds__(FDEC_CUDA_WARPS * 32)
    fdec_partial_kernel(const fdec_cuda_params p) {
    using S = fdec_shape<KT, D>;
    constexpr int VEC = S::VEC, T = S::T, E = S::E, GROUPS = S::GROUPS, U = S::U, NW = FDEC_CUDA_WARPS;
    const int Dr = D ? D : (int)p.D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int grp = lane / T, lin = lane % T;
    const uint32_t g = blockIdx.z, chunk = blockIdx.y, h0 = g * p.R + blockIdx.x * RT;
    const int nh = min(RT, (int)(p.R - blockIdx.x * RT)); /* heads of this tile */

    /* element index of this lane's i-th element: load k = i / VEC covers [lin*VEC + k*T*VEC, +VEC) */
    auto elem = [&](int i) { return lin * VEC + (i / VEC) * T * VEC + (i % VEC); };

    /* q, scaled into base 2, in registers */
    float q[RT][E];
#pragma unroll
    for (int r = 0; r < RT; r++)
#pragma unroll
        for (int i = 0; i < E; i++) {
            int d = elem(i);
            q[r][i] = (r < nh && d < Dr) ? fdec_load_any(p.q, (size_t)(h0 + r) * Dr + d, p.qt) * p.scale_log2 : 0.f;
        }

    float m[RT], l[RT], o[RT][E];
#pragma unroll
    for (int r = 0; r < RT; r++) {
        m[r] = -INFINITY;
        l[r] = 0.f;
#pragma unroll
        for (int i = 0; i < E; i++) o[r][i] = 0.f;
    }

    const uint32_t c0 = p.lo + chunk * p.chunk_len, c1 = min(p.hi, c0 + p.chunk_len);
    const KT *kbase = (const KT *)p.k + (size_t)g * p.hs, *vbase = (const KT *)p.v + (size_t)g * p.hs;
    const uint32_t step = NW * GROUPS * U;
    /* the loop bound is uniform across the warp (shuffles below need every lane); rows past c1 are masked */
    for (uint64_t base = c0 + warp * GROUPS; base < c1; base += step) { /* 64 bits: seq_len may be near 2^32 */
        float kx[U][E], vx[U][E];
        bool valid[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            uint64_t t = base + u * NW * GROUPS + grp;
            valid[u] = t < c1;
            uint32_t row = valid[u] ? (uint32_t)t : p.lo;
            if (p.ring) { /* t - lo < ring, so one conditional subtraction maps it */
                row = p.ring_lo + (uint32_t)(valid[u] ? t - p.lo : 0);
                if (row >= p.ring) row -= p.ring;
            }
            const KT *kr = kbase + (size_t)row * p.ps, *vr = vbase + (size_t)row * p.ps;
#pragma unroll
            for (int i = 0; i < E; i += VEC) {
                int d = elem(i);
                if (valid[u] && (D || d < Dr)) {
                    load_vec<KT, VEC>(kr + d, &kx[u][i]);
                    load_vec<KT, VEC>(vr + d, &vx[u][i]);
                } else {
#pragma unroll
                    for (int j = 0; j < VEC; j++) kx[u][i + j] = vx[u][i + j] = 0.f;
                }
            }
        }
#pragma unroll
        for (int r = 0; r < RT; r++) {
            float s[U], smax = m[r];
#pragma unroll
            for (int u = 0; u < U; u++) {
                float acc = 0.f;
#pragma unroll
                for (int i = 0; i < E; i++) acc = fmaf(q[r][i], kx[u][i], acc);
#pragma unroll
                for (int off = T / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
                s[u] = valid[u] ? acc : -INFINITY;
                smax = fmaxf(smax, s[u]);
            }
            const float alpha = m[r] == -INFINITY ? 0.f : exp2f(m[r] - smax);
            float psum = 0.f, pw[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                pw[u] = valid[u] ? exp2f(s[u] - smax) : 0.f;
                psum += pw[u];
            }
            l[r] = l[r] * alpha + psum;
            m[r] = smax;
#pragma unroll
            for (int i = 0; i < E; i++) {
                float acc = o[r][i] * alpha;
#pragma unroll
                for (int u = 0; u < U; u++) acc = fmaf(pw[u], vx[u][i], acc);
                o[r][i] = acc;
            }
        }
    }

    /* merge the lane groups of a warp (same lin, different grp) */
#pragma unroll
    for (int off = T; off < 32; off <<= 1) {
#pragma unroll
        for (int r = 0; r < RT; r++) {
            float mo = __shfl_xor_sync(0xffffffffu, m[r], off), lo_ = __shfl_xor_sync(0xffffffffu, l[r], off);
            float mn = fmaxf(m[r], mo); /* NaN travels in l and o, m stays ordered */
            float wa = fdec_state_weight(m[r], mn), wb = fdec_state_weight(mo, mn);
            l[r] = l[r] * wa + lo_ * wb;
#pragma unroll
            for (int i = 0; i < E; i++) {
                float oo = __shfl_xor_sync(0xffffffffu, o[r][i], off);
                o[r][i] = o[r][i] * wa + oo * wb;
            }
            m[r] = mn;
        }
    }

    /* merge the warps through shared memory and write the block's state */
    extern __shared__ float smem[];
    float *sm_m = smem, *sm_l = smem + NW * RT, *sm_o = smem + 2 * NW * RT; /* sm_o: [NW][RT][Dr] */
    if (grp == 0) {
#pragma unroll
        for (int r = 0; r < RT; r++) {
            if (lin == 0) {
                sm_m[warp * RT + r] = m[r];
                sm_l[warp * RT + r] = l[r];
            }
#pragma unroll
            for (int i = 0; i < E; i++) {
                int d = elem(i);
                if (D || d < Dr) sm_o[((size_t)warp * RT + r) * Dr + d] = o[r][i];
            }
        }
    }
    __syncthreads();
    const float ln2 = 0.69314718055994531f;
    for (int idx = threadIdx.x; idx < nh * Dr; idx += NW * 32) {
        int r = idx / Dr, d = idx % Dr;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; w++) M = fmaxf(M, sm_m[w * RT + r]);
        float L = 0.f, O = 0.f;
#pragma unroll
        for (int w = 0; w < NW; w++) {
            float wt = sm_m[w * RT + r] == -INFINITY ? 0.f : exp2f(sm_m[w * RT + r] - M);
            L += wt * sm_l[w * RT + r];
            O += wt * sm_o[((size_t)w * RT + r) * Dr + d];
        }
        size_t hc = (size_t)(h0 + r) * p.nc + chunk;
        p.part_o[hc * Dr + d] = O;
        if (d == 0) {
            p.part_m[hc] = M * ln2; /* back to natural log for the shared merge */
            p.part_l[hc] = L;
        }
    }
}

/* Merges the nc partial states of query head blockIdx.x (state.h) into out and lse. Dynamic shared memory:
 * nc floats of weights. */
__global__ void fdec_combine_kernel(const fdec_cuda_params p) {
    extern __shared__ float w[];
    __shared__ float sh_M, sh_L;
    const uint32_t h = blockIdx.x;
    const float *pm = p.part_m + (size_t)h * p.nc, *pl = p.part_l + (size_t)h * p.nc;
    if (threadIdx.x < 32) { /* the first warp finds the max and the weights */
        float M = -INFINITY, L = 0.f;
        for (uint32_t c = threadIdx.x; c < p.nc; c += 32) M = fmaxf(M, pm[c]);
        for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
        for (uint32_t c = threadIdx.x; c < p.nc; c += 32) L += (w[c] = fdec_state_weight(pm[c], M)) * pl[c];
        for (int off = 16; off > 0; off >>= 1) L += __shfl_xor_sync(0xffffffffu, L, off);
        if (threadIdx.x == 0) sh_M = M, sh_L = L;
    }
    __syncthreads();
    const float inv = 1.f / sh_L;
    for (uint32_t d = threadIdx.x; d < p.D; d += blockDim.x) {
        float O = 0.f;
        for (uint32_t c = 0; c < p.nc; c++) O += w[c] * p.part_o[((size_t)h * p.nc + c) * p.D + d];
        fdec_store_any(p.out, (size_t)h * p.D + d, p.ot, O * inv);
    }
    if (threadIdx.x == 0 && p.lse) p.lse[h] = fdec_state_lse(sh_M, sh_L);
}

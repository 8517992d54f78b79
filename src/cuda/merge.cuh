/* merge.cuh — the merges of partial states on the GPU, one piece of code for the decode blocks' tails, the
 * split-KV combine of a decode's chunks and fdec_merge; every weight is state.h's rule. */
#pragma once
#include "common.cuh"

/* Lets the next grid in the stream launch now (sm_90), so that a kernel launched after it as a programmatic
 * dependent (flashdec's next decode, or an engine's own kernel) has its blocks resident and waiting in fdec_grid_wait
 * when this grid ends, instead of launching then. The first act of the merges of at most FDEC_MERGE_TRIGGER chunks:
 * in larger merges it made the call slower (TUNING.md). */
#define FDEC_MERGE_TRIGGER 32
template <int C>
__device__ __forceinline__ void fdec_merge_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (C <= FDEC_MERGE_TRIGGER) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
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
    const fdec_logits *logits; /* the sinks, merged once here (state.h's fdec_state_sink) */
    __device__ float sink(int r) const { return fdec_logit_sink(logits, (uint32_t)(h0 + r)); }
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
 * multiplied (its o may be NaN). The callers take B = 64 for long merges and 16 for short ones. */
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
        const float f = fdec_state_sink(&M, &L, src.sink(r)); /* the sink's share (none: f = 1) */
#pragma unroll
        for (int j = 0; j < J; j++)
            if ((uint32_t)lane + 32 * j < n) sw[r * n + lane + 32 * j] = w[j] * f;
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
    if (!SPLIT || S == 1) { /* one thread an element, all states (the merges of up to 32 chunks) */
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

/* The end of a decode block (the SIMT and tensor-core kernels'): merges its NS partial states (in shared memory:
 * m[NS][RT] in base 2, l[NS][RT], o[NS][RT][Dr], Dr = D or, for D = 0, the call's head_dim) into the chunk state of
 * each row r < nh, at index state(r) of the scratch's part_* arrays (m in natural-log units). A chunk whose o came out
 * non-finite (an inf in V, a NaN anywhere), or whose work is bad (a batch's sequence the check kernel refused), gets
 * m = l = NaN, so that the merge makes its row NaN. The merge kernel launched right after this one merges the states.
 * Each (state, head)'s weight is taken once, before the loop over the elements, and where D is a compile-time
 * multiple of 4 a thread moves 4 elements a pass (16-byte loads and stores). */
template <int D, int RT, int NS, typename StateIndex>
__device__ void fdec_block_tail(StateIndex state, bool bad_work, float *part_o, float *part_m, float *part_l,
                                float *smem, int nh, int Dr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); /* the merge kernel may start launching */
#endif
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
        float *dst = part_o + state(r) * Dr + d;
        bool fin = true;
#pragma unroll
        for (int e = 0; e < V; e++) fin = fin && isfinite(O[e]);
        if constexpr (V == 4) *reinterpret_cast<float4 *>(dst) = make_float4(O[0], O[1], O[2], O[3]);
        else dst[0] = O[0];
        if (!fin) sm_bad[r] = 1;
    }
    __syncthreads();
    if (threadIdx.x < nh) {
        const size_t hc = state(threadIdx.x);
        const bool bad = bad_work || sm_bad[threadIdx.x] || sm_L[threadIdx.x] != sm_L[threadIdx.x];
        part_m[hc] = bad ? NAN : sm_M[threadIdx.x];
        part_l[hc] = bad ? NAN : sm_L[threadIdx.x];
    }
}

/* Merges the decode's chunk states into out and lse when fdec_chunk_merge_small (below) does not: more than 64
 * chunks. A block of FDEC_MERGE_THREADS threads per (head, slice of the dimensions), the
 * slice ceil(D / gridDim.y) wide (the host's choice, cuda.cu). With slices of 128 a thread merges one dimension over
 * all chunks; with slices of 32, used for more than FDEC_MERGE_SPLIT_CHUNKS chunks, each dimension's chunks are
 * split four ways (fdec_merge_heads), so that four times the blocks and loads are in flight. On sm_90 it is launched as a programmatic dependent of the decode kernel and waits for it here. */
#define FDEC_MERGE_THREADS 128
#define FDEC_MERGE_SPLIT_CHUNKS 32
/* The dynamic shared memory of a merge of nc states by fdec_merge_heads (this kernel's and fdec_batch_merge's): [nc]
 * weights, 3, [FDEC_MERGE_THREADS] partial sums */
constexpr size_t fdec_merge_smem_bytes(uint32_t nc) { return (nc + 3 + (size_t)FDEC_MERGE_THREADS) * sizeof(float); }
template <bool SPLIT>
__global__ void __launch_bounds__(FDEC_MERGE_THREADS) fdec_chunk_merge_kernel(const fdec_cuda_params p) {
    fdec_grid_wait();
    extern __shared__ float msm[]; /* laid out and sized by fdec_merge_smem_bytes */
    const uint32_t h = blockIdx.x;
    const int slice = (int)((p.D + gridDim.y - 1) / gridDim.y);
    const int d0 = blockIdx.y * slice, width = min(slice, (int)p.D - d0);
    const fdec_chunk_src src = {p.part_m, p.part_l, p.part_o, p.nc, p.D, h, d0, &p.logits};
    fdec_merge_heads<SPLIT>(src, 1, p.nc, width, msm, msm + p.nc, msm + p.nc + 3, p.out, (size_t)h * p.D + d0, p.ot,
                     p.lse && blockIdx.y == 0 ? p.lse + h : NULL);
}

/* The merge of at most C chunk states (16, 32 or 64: every preset's merge but the Gemma 4 full layer's at long
 * contexts) of one state row, states [s0, s0 + n) of the scratch's part_m and part_l (o: [.][D]), into out[out0 ..]
 * (dtype ot) and *lse: block (row, slice of FDEC_MERGE_THREADS dimensions), a thread per dimension. Every load of a
 * thread (m and l of chunks lane + 32 j, o of every chunk at its dimension) goes out before any is used: one L2 round
 * trip, where fdec_merge_heads takes two with a block barrier between them. Each warp computes the weights itself and
 * passes them around by shuffles: no shared memory. The sums are those of fdec_merge_heads in the same order (same
 * bits), and a row is NaN under the same rule. Every load is unconditional: a state or dimension past the last loads
 * the last one (always in bounds) and a select after the load drops it, so that no branch stands between the loads (a
 * load in its own branch, as `c < n ? load : 0` compiles, waits for the one before it). */
#define FDEC_MERGE_SMALL_MAX 64 /* chunks it merges at most: fdec_merge_small<64> */
template <int C>
__device__ __forceinline__ void fdec_merge_small(const float *part_m, const float *part_l, const float *part_o,
                                                 size_t s0, uint32_t n, uint32_t D, float sink, void *out, size_t out0,
                                                 int ot, float *lse) {
    constexpr int J = (C + 31) / 32;
    const int lane = threadIdx.x & 31;
    const uint32_t d = blockIdx.y * FDEC_MERGE_THREADS + threadIdx.x;
    const bool act = d < D;
    float mr[J], lr[J], x[C];
    const uint32_t last = n - 1, dd = act ? d : D - 1; /* n >= 1 */
#pragma unroll
    for (int j = 0; j < J; j++) {
        const uint32_t c = lane + 32 * j;
        mr[j] = __ldcg(part_m + s0 + min(c, last));
        lr[j] = __ldcg(part_l + s0 + min(c, last));
    }
#pragma unroll
    for (int c = 0; c < C; c++) x[c] = __ldcg(part_o + (s0 + min((uint32_t)c, last)) * D + dd);
#pragma unroll
    for (int j = 0; j < J; j++) { /* the states past the last: weight 0 */
        const bool in = lane + 32 * j < n;
        mr[j] = in ? mr[j] : -INFINITY;
        lr[j] = in ? lr[j] : 0.f;
    }
    float w[J], M, L;
    fdec_warp_weights(mr, lr, w, M, L);
    const float f = fdec_state_sink(&M, &L, sink); /* the sink's share (none: f = 1) */
#pragma unroll
    for (int j = 0; j < J; j++) w[j] *= f;
    float O = 0.f;
#pragma unroll
    for (int c = 0; c < C; c++) {
        const float wc = __shfl_sync(0xffffffffu, w[c / 32], c % 32);
        O += (uint32_t)c < n && wc != 0.f ? wc * x[c] : 0.f;
    }
    const bool empty = L == 0.f && M == -INFINITY;
    const float y = empty ? 0.f : O / L;
    const bool bad = __syncthreads_or(act && !isfinite(y)) || (!isfinite(M) && M != -INFINITY);
    if (act) fdec_store_any(out, out0 + d, ot, bad ? NAN : y);
    if (lse && blockIdx.y == 0 && threadIdx.x == 0) *lse = bad ? NAN : empty ? -INFINITY : fdec_state_lse(M, L);
}

/* A decode's chunks merged when there are at most C of them: block (head, slice of the dimensions). */
template <int C>
__global__ void __launch_bounds__(FDEC_MERGE_THREADS) fdec_chunk_merge_small(const fdec_cuda_params p) {
    fdec_merge_trigger<C>();
    fdec_grid_wait();
    const uint32_t h = blockIdx.x;
    fdec_merge_small<C>(p.part_m, p.part_l, p.part_o, (size_t)h * p.nc, p.nc, p.D, fdec_logit_sink(&p.logits, h),
                        p.out, (size_t)h * p.D, p.ot, p.lse ? p.lse + h : NULL);
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
    __device__ float sink(int) const { return -INFINITY; } /* fdec_merge's shards carry their sinks themselves */
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


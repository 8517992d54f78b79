/* simt.cuh — the SIMT decode kernel: f32 K/V, ggml's Q8_0 / Q4_0 blocks, unaligned and odd shapes, and any shape the
 * tensor-core kernel (mma.cuh) does not take.
 *
 * Block (head tile x, chunk y, KV head z) computes the partial state (state.h) of up to RT query heads of KV
 * head z over the chunk's positions, so each K/V row is read from memory once for all the heads of its group.
 * A row (one position's K or V vector) is read by T lanes, VEC elements per load (16 bytes on the fast
 * paths), E elements per lane; a warp covers GROUPS = 32/T rows at once and U of those row sets per step, and
 * loads the next step's rows before it computes this one (two steps in flight, or a cp.async ring of STAGES steps
 * for 16-byte rows). Each lane group runs its own online softmax; groups merge by shuffles, warps through shared
 * memory (fdec_block_tail), and the block writes one (m, l, o) per head into the scratch; a merge kernel
 * (merge.cuh) merges the chunks' states into out and lse.
 *
 * Template parameters only specialise shapes: KT the K/V element type, D the head_dim (0: any, read with
 * scalar loads), RT the most query heads per block, SUMS the block sums (below).
 */
#pragma once
#include "common.cuh"
#include "merge.cuh"

/* The SIMT kernel's block sums (fdec_simt_kernel's SUMS), in calls where a lane group sums more than
 * FDEC_CUDA_SUM_MIN_TERMS rows of a chunk (cuda.cu's pick_sums): a lane sums a period of steps from zero before it
 * adds them to its totals, so that no f32 sum of like terms grows long enough to drift. The period is
 * FDEC_CUDA_SUM_STEPS, or where a lane takes more than the square of that in steps in a chunk, the power of two whose
 * square reaches them (fdec_sum_period), so that neither level of sums holds many more terms than the other.
 * The instances of more than one row a step (fdec_shape's U > 1: f32 head_dim 64, 128 and 256, and the 16-bit ones)
 * hold up to 4 times the rows a step, so there a block goes into the totals by a compensated add (Fast2Sum: the add's
 * rounding error stays in the block as the next one's start), and the period is FDEC_CUDA_SUM_COMP_STEPS, which bounds
 * the block's own sum. The instances of one row a step keep the growing period and the plain add, which is faster
 * there. Both powers of two (TUNING.md has the figures). */
#define FDEC_CUDA_SUM_STEPS 64
#define FDEC_CUDA_SUM_COMP_STEPS 16
#define FDEC_CUDA_SUM_MIN_TERMS 128
static_assert(FDEC_CUDA_SUM_STEPS > 0 && (FDEC_CUDA_SUM_STEPS & (FDEC_CUDA_SUM_STEPS - 1)) == 0,
              "FDEC_CUDA_SUM_STEPS is a power of two");
static_assert(FDEC_CUDA_SUM_COMP_STEPS > 0 && (FDEC_CUDA_SUM_COMP_STEPS & (FDEC_CUDA_SUM_COMP_STEPS - 1)) == 0,
              "FDEC_CUDA_SUM_COMP_STEPS is a power of two");
/* The block sum period for a lane that takes `steps` steps: FDEC_CUDA_SUM_STEPS, or the power of two whose square
 * reaches the steps where that is more */
__host__ __device__ constexpr uint32_t fdec_sum_period(uint32_t steps) {
    uint32_t per = FDEC_CUDA_SUM_STEPS;
    while ((uint64_t)per * per < steps) per <<= 1;
    return per;
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


/* The SIMT kernel's largest head tile (heads_per_block in cuda.cu picks from it, pick_rt compiles up to it): 4 heads
 * on the fast shapes, 2 on the scalar-load generic path (fast = 0). q, o and two steps of rows stay in registers;
 * the block sums' totals too where they fit (fdec_sums_fit), else, at 16 elements a lane (head_dim 512), in shared
 * memory beside the ring (fdec_sums_in_smem). A tile of 8 heads has no room for the totals, and its one running sum
 * a lane failed a drift input (fuzz/corpus/cuda-drift-d128-h64-g8-f16-131072 with the SIMT kernel forced). */
__host__ __device__ constexpr int fdec_simt_max_rt(bool fast) { return fast ? 4 : 2; }

/* Where fdec_simt_kernel's block sums (SUMS) keep their totals, RT x E floats a lane: in registers where that is
 * at most 32 floats (more spilled under ptxas -v); else in shared memory after the
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


/* One online-softmax step of a lane group over U rows for its RT query rows (the SIMT kernels': this one and
batch.cuh's): the scores s[u][r] (base 2, -inf where masked) become the weights, l and o move to the new running max
m. */
template <int U, int RT, int E>
__device__ __forceinline__ void fdec_softmax_step(float (&s)[U][RT], float (&m)[RT], float (&l)[RT], float (&o)[RT][E]) {
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
}

/* The lane groups of a warp (groups of T lanes: same lane in the group, another group) merged by shuffles; every
 * lane ends with the warp's state. */
template <int T, int RT, int E>
__device__ __forceinline__ void fdec_merge_lane_groups(float (&m)[RT], float (&l)[RT], float (&o)[RT][E]) {
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
}

template <typename KT, int D, int RT, bool SUMS>
/* Block (head tile x, chunk y, KV head z). One function of ~280 lines: the loads, the online-softmax step and the block
 * sums are lambdas over the same registers (q, o, the state, the totals), which the compiler keeps in registers. */
__global__ void __launch_bounds__(FDEC_CUDA_WARPS * 32) fdec_simt_kernel(const fdec_cuda_params p) {
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
    /* an fp8 cache's K scale goes into q, its V scale into the chunk's o (before the tail) */
    const float qscale = fdec_is_fp8<KT> ? p.scale_log2 * fdec_kv_scale_at(&p.sc, g, 0) : p.scale_log2,
                vscale = fdec_is_fp8<KT> ? fdec_kv_scale_at(&p.sc, g, 1) : 1.f;
    fdec_with_loader(p.q, p.qt, [&](auto ld) {
#pragma unroll
        for (int r = 0; r < RT; r++)
#pragma unroll
            for (int i = 0; i < E; i++) {
                const int d = elem(i);
                const bool ok = r < nh && d < Dr;
                const float x = ld(ok ? (size_t)(h0 + r) * Dr + d : (size_t)h0 * Dr); /* in bounds either way */
                q[r][i] = ok ? x * qscale : 0.f;
            }
    });
    /* m, l, o: the running state of the steps since the last block sum (l, o relative to m). With SUMS, lt
     * and ot are the totals, relative to mt: every sum_mask + 1 steps (64, more in chunks of over 4,096 steps a
     * lane; FDEC_CUDA_SUM_COMP_STEPS where COMP), and after the last, l and o are added into them and restart from
     * zero, so that no f32 sum runs over many more than the square root of a lane's terms (64 up to 4,096 of them).
     * The totals cost registers and time (up to a quarter on the generic path), so the host asks for them (SUMS) only
     * where a lane group sums more than FDEC_CUDA_SUM_MIN_TERMS rows, and they are compiled only where they have room
     * (fdec_sums_ok: the registers, or shared memory after the ring). */
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

    /* in 64 bits: a chunk near the end of the 32-bit positions (seq_len up to 2^32 - 1) ends past 2^32 */
    const uint64_t c0 = (uint64_t)p.lo + (uint64_t)chunk * p.chunk_len,
                   c1 = c0 + p.chunk_len < p.hi ? c0 + p.chunk_len : (uint64_t)p.hi;
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
                /* the logits hook (logits.h); a row past the tile's heads asks for head h0's variant */
                acc = fdec_logit2(&p.logits, acc, r < nh ? h0 + r : h0, base + u * NW * GROUPS + grp, p.qpos);
                s[u][r] = valid ? fmaf(0.f, acc, acc) : -INFINITY; /* +-inf -> NaN: the head comes out NaN */
            }
        }
        fdec_softmax_step(s, m, l, o);
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
        const KT *kbase = (const KT *)p.k + (size_t)g * p.hs, *vbase = (const KT *)p.v + (size_t)g * p.hs;
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
        /* scalar loads into registers (element offsets: a block type has no element pointers), the next step's loads
         * issued before this step computes */
        static_assert(VEC == 1, "only the generic shape loads element by element");
        auto load_step = [&](uint64_t base, raw_t (&kr)[U][NL], raw_t (&vr)[U][NL]) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                const bool valid = valid_at(base, u);
                const uint32_t row = valid ? fdec_cache_row(p, base + u * NW * GROUPS + grp) : 0;
                const size_t off = (size_t)g * p.hs + (size_t)row * p.ps;
#pragma unroll
                for (int j = 0; j < NL; j++) {
                    const int d = lin * VEC + j * T * VEC;
                    if (valid && (D || d < Dr)) {
                        kr[u][j] = fdec_kv_raw1<KT>(p.k, off + d);
                        vr[u][j] = fdec_kv_raw1<KT>(p.v, off + d);
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

    fdec_merge_lane_groups<T>(m, l, o);

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
                if (D || d < Dr) sm_o[(warp * RT + r) * Dr + d] = o[r][i] * vscale;
            }
        }
    }
    __syncthreads();
    fdec_block_tail<D, RT, NW>([&](int r) { return (size_t)(h0 + r) * p.nc + chunk; }, false, p.part_o, p.part_m,
                               p.part_l, smem, nh, Dr);
}


/* mma.cuh — the tensor-core decode kernel for 16-bit and fp8 K/V at head_dim 64, 128, 256 and 512, for fdec_decode and
 * for a batch's sequences (what a block works on is fdec_mma_work's, below).
 *
 * Why: the SIMT kernel (simt.cuh) issues about 75 instructions per K/V row and warp at 4 Q heads per KV head, which
 * caps it near 2.2 TB/s on the H200. Here each block stages K and V rows in shared memory with cp.async and computes
 * S = Q K^T and O += P V with mma.sync m16n8k16 (f16 or bf16 in, f32 accumulate), reading the rows back with
 * ldmatrix: a few instructions per 16-byte piece of a row.
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
 * Block = 4 warps (8 for two tiles at D = 512, below). A warp owns DW = min(D, 128) dimensions (q fragments and the O
 * accumulator, 64 registers) and PW = 16 positions of each staged step: at D = 256 two warps, at D = 512 four warps
 * share a position group and add their partial scores through shared memory. A block of a batch may take NG = 2 or 4
 * tiles of 8 rows (a sequence's tokens x heads: up to 4 at D <= 128, 2 above), the block's warps split among them,
 * so that the K/V rows are read once for all. A stage holds NP = 16 WP positions of K and V (rows XOR-swizzled by
 * 16-byte piece, so ldmatrix and cp.async meet no bank conflicts); NSTAGE stages are in flight. At D <= 128 with one
 * tile each warp copies and waits for its own rows, with no block barrier in the loop (from a contiguous cache a
 * warp's rows are every fourth position of the step); otherwise the whole block copies the step and waits for it. At
 * D = 64 and 128 (and 512 for long chunks: the STR instance) a single call's block takes every nc-th step of the
 * attended range, so that the blocks of a KV head read one range together; elsewhere, and in a batch (where a sequence
 * shorter than the batch's bound then fills fewer chunks: fewer blocks and states), one contiguous chunk (a batch's
 * blocks past a sequence's chunks return at once: its work's skip()). After the loop each position group is one
 * partial state, and the block's tail (merge.cuh, fdec_block_tail) merges them and writes the
 * chunk state; the merge kernel merges the chunks. The tuned numbers are in docs/TUNING.md.
 *
 * fp8 caches (E4M3, E5M2) take the f16 MMA: both convert to f16 exactly. Their rows are staged as they are (a stage
 * is half the bytes of a 16-bit one, so more are in flight) and converted in registers as the fragments are loaded:
 * an ldmatrix of fp8 rows read as 16-bit pairs gives each lane 4 consecutive dimensions of a K row (q's fragments are
 * loaded in that dimension order), and ldmatrix.trans gives 2 dimensions of 2 V rows, which a byte permute sorts into
 * one MMA's even and one's odd output dimensions. The K scale goes into q, the V scale into the chunk's o.
 */
#pragma once
#include "common.cuh"
#include "merge.cuh"

/* o and l are summed in blocks of this many steps: each step's two MMA rows (p's high and low terms) are added
 * together into the registers of the low row, which hold the block's sum, and every MMA_SUM_STEPS steps the block
 * goes into o by a compensated add (Fast2Sum). The tensor cores truncate their sums, so o summed by the MMA itself
 * over a long chunk drifts low; summed in rounded f32 steps alone it still drifts. A power of two. */
#define FDEC_MMA_SUM_STEPS 16
/* The position of a head_dim 512 chunk from which its steps are strided (the STR instance): shorter chunks are a few
 * steps, where strided steps cost more than they gain. */
#define FDEC_MMA_D512_STRIDED_MIN 1024

/* The most tiles of 8 rows a block takes at head_dim D: its warps split the head_dim in 128s, 4 or 8 warps a block */
constexpr int fdec_mma_max_tiles(int D) { return D <= 128 ? 4 : 2; }

/* ES: the cache's bytes an element, 2 or 1 (fp8); NG: tiles of 8 rows a block, each K/V fragment feeding all of them */
template <int D, int ES = 2, int NG = 1>
struct fdec_mma_shape {
    static_assert(NG == 1 || NG == 2 || (NG == 4 && fdec_mma_max_tiles(D) >= 4), "1, 2 or 4 tiles a block");
    static constexpr int DW = D < 128 ? D : 128;                    /* dimensions per warp */
    static constexpr int WD = D / DW;                               /* warps per position group: 1, 1, 2, 4 */
    /* warps a block: FDEC_CUDA_WARPS, or 8 for two tiles at D = 512 (one block an SM) */
    static constexpr int NW = WD * NG > FDEC_CUDA_WARPS ? WD * NG : FDEC_CUDA_WARPS;
    static constexpr int WP = NW / WD / NG;                         /* position groups a tile */
    static constexpr int RB = 8 * NG;                               /* rows a block */
    /* a warp's share of a step is 16 positions (2 score tiles: the registers allow no more beside o and q), so a
     * stage holds 16 WP positions; the ring is 64 KiB at head_dim 64 (one block an SM for 16-bit caches), else 96 KiB
     * (two blocks fill an SM's 228 KiB): 4 stages of 16 KiB and 3 of 32 KiB with one tile a block. Several tiles (a
     * batch's sequence of several tokens) at head_dim 128 take 64 KiB and three blocks an SM (THREE), at 64 48 KiB and
     * four (FOUR): their warps wait on the latency of several tiles' MMAs a position, and more warps hide it. */
    static constexpr bool THREE = NG > 1 && D == 128, FOUR = NG > 1 && D == 64;
    static constexpr int BLOCKS = NW > FDEC_CUDA_WARPS ? 1 : THREE ? 3 : FOUR ? 4 : FDEC_CUDA_BLOCKS_PER_SM; /* an SM */
    static constexpr int PW = 16;                                   /* positions per warp per stage */
    static constexpr int NP = PW * WP;                              /* positions per stage: 64, 64, 32, 16 (1 tile) */
    static constexpr int STAGE_BYTES = NP * 4 * D;                  /* K and V rows of 16 bits */
    static constexpr int RING_BYTES = FOUR ? 49152 : D == 64 || THREE ? 65536 : 98304;
    static constexpr int NT = PW / 8;                               /* score tiles (8 positions) per warp */
    static constexpr int KS = DW / 16;                              /* k-steps of Q K^T per warp */
    static constexpr int OT = DW / 8;                               /* output tiles (8 dimensions) per warp */
    /* who copies a step's rows: at D <= 128 with one tile (WD = NG = 1) each warp its own PW rows, so a warp depends
     * on no other warp in the loop (no block barrier); else the whole block all NP rows (warps of several tiles, or
     * of one position group, read the same rows) */
    static constexpr bool OWN = WD == 1 && NG == 1;
    static constexpr int CT = OWN ? 32 : NW * 32;                   /* copying threads */
    static constexpr int CR = OWN ? PW : NP;                        /* rows they copy */
    /* the ring: a stage holds the step's K rows and V rows as they are in the cache, RP 16-byte pieces a row; fp8
     * (CVT) stages are half the bytes of 16-bit ones, so more of them are in flight */
    static constexpr bool CVT = ES == 1;
    static constexpr int RP = D * ES / 16;                          /* 16-byte pieces a row */
    static constexpr int RPP = CT / RP;                             /* rows one cp.async pass covers */
    static constexpr int RSTAGE_BYTES = STAGE_BYTES * ES / 2;      /* bytes of a stage of this cache type */
    /* stages in the ring (fp8: twice as many), at most 16 (two tiles at D = 64 with fp8: 4 KiB stages) */
    static constexpr int NSTAGE = RING_BYTES / RSTAGE_BYTES < 16 ? RING_BYTES / RSTAGE_BYTES : 16;
    static constexpr int NPASS = (CR + RPP - 1) / RPP;             /* cp.async passes (rows a copying thread) */
    static_assert(CT % RP == 0 && (CR % RPP == 0 || (NPASS == 1 && CR < RPP)), "whole rows a pass, whole passes");
    static_assert(NT % 2 == 0 && PW % 16 == 0, "P V takes positions 16 at a time");
    static_assert(RP >= 4 && DW % 32 == 0, "the swizzle needs 4 pieces a row; fp8 fragments take 32 dimensions");
    static_assert(WP >= 1 && WP * WD * NG == NW && NSTAGE >= 3, "every warp a tile's; three stages at least");
    static_assert(WP <= FDEC_CUDA_WARPS, "the host sizes the tail's shared memory for at most that many states");
    /* the tail's states ([WP][RB] m and l, [WP][RB][D] o) fit in the ring's memory */
    static_assert((size_t)WP * RB * (2 + D) * 4 <= (size_t)NSTAGE * RSTAGE_BYTES, "the tail's states fit the ring");
};

/* What a block of fdec_mma_kernel works on, by its parameters' type: its rows (rb of them, 8 a tile: each tile's are
 * the MMA's rows 0..7), the positions it reads and where they are, and where its chunk states go. This one: a call
 * of fdec_decode, block (head tile x, chunk y, KV head z), its rows query heads h0.. of KV head g, every one attending
 * every position of [lo, hi). A batch's blocks (batch.cuh) take a sequence's (token, query head) rows, each with its
 * own range. */
template <typename P>
struct fdec_mma_work;

template <>
struct fdec_mma_work<fdec_cuda_params> {
    static constexpr bool OWN_RANGES = false; /* rows attend positions of their own (first(r)..pos(r)) */
    static constexpr bool FROM_MEMORY = false; /* the description is read from memory an earlier grid writes */
    const fdec_cuda_params &p;
    uint32_t g, chunk, h0;
    int nh; /* the tile's rows */
    __device__ fdec_mma_work(const fdec_cuda_params &p_, int rb)
        : p(p_), g(blockIdx.z), chunk(blockIdx.y), h0(blockIdx.z * p_.R + blockIdx.x * rb),
          nh(min(rb, (int)(p_.R - blockIdx.x * rb))) {}
    __device__ bool bad() const { return false; }
    __device__ uint64_t lo() const { return p.lo; }
    __device__ uint64_t hi() const { return p.hi; }
    __device__ size_t ps() const { return p.ps; }
    __device__ bool paged() const { return false; }
    __device__ size_t kv_base() const { return (size_t)g * p.hs; } /* from k (v) to the block's KV head */
    /* position t's row (from kv_base), 0 where !ok */
    __device__ size_t pos_off(bool ok, uint64_t t) const { return (size_t)(ok ? fdec_cache_row(p, t) : 0) * p.ps; }
    /* the n positions from t are in [.., c1) and ps apart */
    __device__ bool run(uint64_t t, uint64_t n, uint64_t c1) const { return !p.ring && t + n <= c1; }
    __device__ size_t run_off(uint64_t t, int i) const { return (size_t)(t + i) * p.ps; } /* position t + i's */
    __device__ size_t q_row(int r) const { return h0 + r; } /* q's row of D elements */
    __device__ uint32_t head(int r) const { return h0 + r; }
    __device__ uint64_t pos(int) const { return p.qpos; }
    __device__ uint64_t first(int) const { return 0; }
    __device__ size_t state(int r) const { return (size_t)(h0 + r) * p.nc + chunk; }
};

/* The dynamic shared memory of the kernel: the ring, and at D > 128 the partial scores the warps of a group exchange */
template <int D, int ES = 2, int NG = 1>
constexpr size_t fdec_mma_smem_bytes() {
    using S = fdec_mma_shape<D, ES, NG>;
    return (size_t)S::NSTAGE * S::RSTAGE_BYTES + (S::WD > 1 ? (size_t)S::NW * 32 * S::NT * 2 * sizeof(float) : 0);
}

/* The MMA's input type for a cache of KT: the 16-bit types themselves, f16 for fp8 (exact). */
template <typename KT>
struct fdec_mma_elem {
    using type = typename std::conditional<fdec_is_fp8<KT>, __half, KT>::type;
};

/* Two fp8 values (bytes lo and hi of w) as an f16 pair, exactly: E5M2 is the high byte of its f16, so a byte permute
 * alone; E4M3 a conversion of the two bytes. lo and hi are constants where it is inlined (one prmt's selector). */
template <typename KT>
__device__ __forceinline__ unsigned fdec_fp8x2_to_f16x2(unsigned w, unsigned lo, unsigned hi) {
    if constexpr (std::is_same<KT, __nv_fp8_e5m2>::value) {
        return __byte_perm(w, 0u, 0x0404u | lo << 4 | hi << 12); /* bytes {0, lo, 0, hi} */
    } else {
        const unsigned pair = __byte_perm(w, 0u, 0x4400u | lo | hi << 4); /* bytes {lo, hi, 0, 0} */
        const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)pair, __NV_E4M3);
        return (unsigned)h.x | (unsigned)h.y << 16;
    }
}

/* The MMA's B fragment (b0, b1) number i of an ldmatrix.x4 of a stage's rows of cache type KT (16-byte pieces of 8
 * 16-bit or 16 fp8 elements).
 * K (fdec_k_frag, k-step i): 16-bit rows give 2 k-steps, registers 2i and 2i + 1; fp8 rows 4, register i, whose bytes
 * are 4 consecutive dimensions of the lane's row (q's fragments are loaded in that order).
 * V (fdec_v_frag, output tile i, ldmatrix.trans): 16-bit rows give 2 tiles, registers 2i and 2i + 1; fp8 rows 4:
 * registers 2h and 2h + 1 (h = i / 2) hold 2 dimensions of 2 rows each, and tile i takes the even (i even) or odd
 * dimensions (fdec_mma_dim). */
template <typename KT>
__device__ __forceinline__ void fdec_k_frag(const unsigned (&x)[4], int i, unsigned &b0, unsigned &b1) {
    if constexpr (fdec_is_fp8<KT>) b0 = fdec_fp8x2_to_f16x2<KT>(x[i], 0, 1), b1 = fdec_fp8x2_to_f16x2<KT>(x[i], 2, 3);
    else b0 = x[2 * i], b1 = x[2 * i + 1];
}
template <typename KT>
__device__ __forceinline__ void fdec_v_frag(const unsigned (&x)[4], int i, unsigned &b0, unsigned &b1) {
    if constexpr (fdec_is_fp8<KT>) {
        const unsigned e = i & 1, h = i >> 1;
        b0 = fdec_fp8x2_to_f16x2<KT>(x[2 * h], e, e + 2), b1 = fdec_fp8x2_to_f16x2<KT>(x[2 * h + 1], e, e + 2);
    } else
        b0 = x[2 * i], b1 = x[2 * i + 1];
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

/* The 16-bit terms of this lane's q fragments (qv, f32, pre-scaled), brought to [2^(QEXP-1), 2^QEXP) per head:
 * qa the A operands of terms 0 and 1 (rows gq, gq + 8), qa3 the third term's for bf16; *qinv undoes the power of
 * two on the scores. */
template <typename KT, int KS, int NTERM>
__device__ __forceinline__ void fdec_mma_q_terms(float (&qv)[KS][4], bool qok, float scale_log2, unsigned (&qa)[KS][4],
                                                 unsigned (&qa3)[NTERM == 3 ? KS : 1][2], float *qinv) {
    /* 2^15 keeps f16 products below 2^31 with subnormals 2^-40 of the largest term; bf16 has f32's exponent range */
    constexpr int QEXP = std::is_same<KT, __half>::value ? 15 : 1;
    float amax = 0.f;
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            qv[ks][j] = qok ? qv[ks][j] * scale_log2 : 0.f;
            amax = fmaxf(amax, fabsf(qv[ks][j])); /* NaN is dropped here and caught by the products */
        }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    int ex = 0;
    if (amax > 0.f && amax <= 3.4e38f) frexpf(amax, &ex);
    const int k = max(-100, min(100, QEXP - ex));
    const float qsc = ldexpf(1.f, k);
    *qinv = ldexpf(1.f, -k);
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

/* The dimension (from the warp's first) of element e of output tile j in lane (., cq): tile j is dimensions 8j.. for
 * 16-bit caches; for fp8 (V's fragments, above) tiles 2i and 2i + 1 are the even and odd dimensions of 16i.. */
template <bool CVT>
__device__ __forceinline__ int fdec_mma_dim(int j, int e, int cq) {
    return CVT ? 16 * (j >> 1) + 4 * cq + 2 * e + (j & 1) : 8 * j + 2 * cq + e;
}

/* A block's work is fdec_mma_work<P>'s. One function of ~230 lines: the copy, score, softmax and output steps are
 * lambdas over the same registers (q's terms, o, the state), which the compiler keeps in registers across the loop.
 * NG tiles of 8 rows a block (a batch's sequences of several tokens): the warps of tile tg = warp / (WP WD) compute its
 * rows from the same staged K/V as the other tiles', so that a step's rows are read from memory once for all. */
template <typename KT, int D, bool STR = false, typename P = fdec_cuda_params, int NG = 1>
__global__ void __launch_bounds__(fdec_mma_shape<D, sizeof(KT), NG>::NW * 32, fdec_mma_shape<D, sizeof(KT), NG>::BLOCKS)
    fdec_mma_kernel(const P p) {
    using MT = typename fdec_mma_elem<KT>::type; /* the MMA's type */
    using S = fdec_mma_shape<D, (int)sizeof(KT), NG>;
    constexpr bool CVT = S::CVT;
    constexpr int NSTAGE = S::NSTAGE;
    constexpr int DW = S::DW, WD = S::WD, WP = S::WP, NP = S::NP, PW = S::PW, NT = S::NT, KS = S::KS, OT = S::OT,
                  RP = S::RP, RB = S::RB;
    constexpr int NTERM = fdec_split_terms<MT>::N;
    /* dimensions a 16-byte piece of a row holds; k-steps (K) and output tiles (V) an ldmatrix.x4 of the stage gives */
    constexpr int DPP = 16 / (int)sizeof(KT), KG = CVT ? 4 : 2, VG = CVT ? 4 : 2;
    constexpr float PSCALE = std::is_same<MT, __half>::value ? 32768.f : 1.f;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gq = lane >> 2, cq = lane & 3; /* the MMA fragment's row group and column pair */
    /* the warp's tile, its position group in the tile, and its first dimension */
    const int tg = warp / (WP * WD), pg = warp % (WP * WD) / WD, ds = (warp % WD) * DW;
    using W = fdec_mma_work<P>;
    if constexpr (W::FROM_MEMORY) fdec_grid_wait();
    const W w(p, RB);
    const uint32_t chunk = w.chunk;
    const int nh = w.nh;
    if constexpr (W::OWN_RANGES)
        if (nh <= 0 || w.skip()) return; /* a head tile past a sequence's rows, a chunk past its positions */

    float m = -INFINITY, l = 0.f; /* state of head gq (base 2; l in units of PSCALE), per lane: l is partial */
    float lb = 0.f;               /* l's block (FDEC_MMA_SUM_STEPS) */
    float o[OT][4];
#pragma unroll
    for (int j = 0; j < OT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

    /* the chunk's steps: positions [c0, c1) in steps of NP, or strided: every nc-th step of [lo, hi) from step
     * `chunk` on (c0 = lo, c1 = hi) */
    constexpr bool STRIDED = ((D == 128 || D == 64) && !W::OWN_RANGES) || STR;
    /* in 64 bits: the last chunk's end may lie past 2^32 */
    const uint64_t c0 = STRIDED ? w.lo() : w.lo() + (uint64_t)chunk * p.chunk_len,
                   c1 = STRIDED || c0 + p.chunk_len >= w.hi() ? w.hi() : c0 + p.chunk_len;
    const KT *kbase = (const KT *)p.k + w.kv_base(), *vbase = (const KT *)p.v + w.kv_base();
    const uint32_t total = c1 > c0 ? (uint32_t)((c1 - c0 + NP - 1) / NP) : 0; /* steps of [c0, c1) */
    const int nsteps = !STRIDED ? (int)total : total > chunk ? (int)((total - chunk + p.nc - 1) / p.nc) : 0;
    auto step_base = [&](int step) {
        return (uint64_t)c0 + ((uint64_t)step * (STRIDED ? p.nc : 1) + (STRIDED ? chunk : 0)) * NP;
    };

    extern __shared__ __align__(16) unsigned char smem_raw[];
    /* stage s: K rows then V rows, [NP][RP] pieces of 16 bytes, piece c of row r at r * RP + (c ^ swz(r)), swz(r) =
     * r & 7 for rows of 8 pieces or more, (r >> 1) & 3 for rows of 4 (fp8 at D = 64): the 8 rows an ldmatrix reads
     * (and a cp.async pass writes) meet no bank conflicts */
    auto kst = [&](int s) { return reinterpret_cast<uint4 *>(smem_raw + (size_t)s * S::RSTAGE_BYTES); };
    auto vst = [&](int s) { return kst(s) + NP * RP; };
    auto piece = [&](uint4 *st, int r, int c) { return st + r * RP + (c ^ (RP >= 8 ? r & 7 : (r >> 1) & 3)); };
    float *xs = reinterpret_cast<float *>(smem_raw + (size_t)NSTAGE * S::RSTAGE_BYTES);
    if constexpr (!W::FROM_MEMORY) fdec_grid_wait(); /* nothing above touches memory an earlier grid may use */

    /* q's loads go out first and are used after the first steps' copies are issued: their latency hides behind
     * the copies' issue */
    /* q fragments (A operand, row-major 16 x 16 per k-step): rows gq (term 0) and gq + 8 (term 1), lane (gq, cq) at
     * k = 2 cq + {0, 1, 8, 9}: for 16-bit caches dimensions 2 cq + {0, 1, 8, 9} of the k-step, for fp8 4 cq + {0..3},
     * the order in which the K fragments come from fp8 rows (below) */
    float qv[KS][4];
    const int row = tg * 8 + gq; /* the lane's row of the block */
    const bool qok = row < nh;
    const int rq = qok ? row : 0; /* rows past the block's load (and mask as) its first row */
    const uint32_t qhead = w.head(rq);
    const uint64_t qpos = w.pos(rq), qfirst = w.first(rq);
    {
        const size_t qrow = w.q_row(rq) * D;
        fdec_with_loader(p.q, p.qt, [&](auto ld) {
#pragma unroll
            for (int ks = 0; ks < KS; ks++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    qv[ks][j] = ld(qrow + ds + ks * 16 + (CVT ? 4 * cq + j : 2 * cq + (j & 1) + (j >> 1) * 8));
        });
    }

    /* this thread's piece of each row it copies: fixed column cp_c, NPASS consecutive rows of the stage from cp_r (a
     * pass writes RPP rows, NPASS apart; a partial last pass leaves threads idle) */
    const int cp_id = S::OWN ? lane : (int)threadIdx.x;
    const int cp_c = cp_id % RP, cp_r = (S::OWN ? pg * PW : 0) + cp_id / RP * S::NPASS;
    constexpr int EPP = 16 / (int)sizeof(KT); /* elements a piece */
    /* with each warp its own rows (S::OWN), warp pg's slot i of a step holds the step's position i * WP + pg
     * instead of pg * PW + i, so that the block reads one contiguous range of a step together (il); but not from
     * pages, where a thread's rows are consecutive positions, in one page for pages of NPASS or more from an aligned
     * start, found by one page-table read. Positions only matter for the mask below (src_row). */
    const bool il = S::OWN && !w.paged();
    auto src_row = [&](int r) { return il ? (r % PW) * WP + r / PW : r; };
    const size_t row_stride = (size_t)(il ? WP : 1) * w.ps(); /* elements between this thread's rows */
    auto issue = [&](int step, int s) {
        const uint64_t base = step_base(step), t0 = base + src_row(cp_r);
        uint4 *ks_ = kst(s), *vs_ = vst(s);
        if (S::CR % S::RPP == 0 || cp_id / RP < S::CR) { /* not one of a partial pass's idle threads */
            /* every row of the step (il) or of this thread there and ps apart: pointer steps */
            if (il ? w.run(base, NP, c1) : w.run(t0, S::NPASS, c1)) {
                const KT *kp = kbase + w.run_off(t0, 0) + cp_c * EPP, *vp = vbase + (kp - kbase);
#pragma unroll
                for (int i = 0; i < S::NPASS; i++) {
                    fdec_cp_async16(piece(ks_, cp_r + i, cp_c), kp + i * row_stride);
                    fdec_cp_async16(piece(vs_, cp_r + i, cp_c), vp + i * row_stride);
                }
                return;
            }
#pragma unroll
            for (int i = 0; i < S::NPASS; i++) {
                const uint64_t t = base + src_row(cp_r + i);
                const bool ok = t < c1;
                const size_t off = w.pos_off(ok, t) + cp_c * EPP;
                /* rows past c1: zero-filled, not read */
                fdec_cp_async16_zfill(piece(ks_, cp_r + i, cp_c), kbase + off, ok ? 16u : 0u);
                fdec_cp_async16_zfill(piece(vs_, cp_r + i, cp_c), vbase + off, ok ? 16u : 0u);
            }
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
    /* an fp8 cache's K scale goes into q (its V scale into o, at the end) */
    const float qscale = CVT ? p.scale_log2 * fdec_kv_scale_at(&p.sc, w.g, 0) : p.scale_log2;
    fdec_mma_q_terms<MT, KS, NTERM>(qv, qok, qscale, qa, qa3, &qinv);

    const int prow = pg * PW; /* this warp's first position in a stage */
    for (int it = 0; it < nsteps; it++) {
        fdec_cp_async_wait<NSTAGE - 2>();
        /* stage it has landed for every copying thread; stage it - 1 is free */
        if constexpr (S::OWN) __syncwarp();
        else __syncthreads();
        if (it + NSTAGE - 1 < nsteps) issue(it + NSTAGE - 1, (it + NSTAGE - 1) % NSTAGE);
        fdec_cp_async_commit();
        const int s = it % NSTAGE;
        uint4 *K = kst(s), *V = vst(s);

        /* S^T tiles: rows = heads (two terms), columns = 8 positions */
        /* two accumulators per tile (even and odd k-steps): half the chain of dependent MMAs */
        float sc[NT][4], sd[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int j = 0; j < 4; j++) sc[nt][j] = sd[nt][j] = 0.f;
        /* an ldmatrix.x4 of 8 rows' 4 pieces is KG k-steps (fdec_k_frag); even k-steps into sc, odd into sd */
#pragma unroll
        for (int kg = 0; kg < KS / KG; kg++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int r = prow + nt * 8 + (lane & 7), c = ds / DPP + kg * 4 + (lane >> 3);
                unsigned x[4], b[KG][2];
                fdec_ldsm_x4(x, piece(K, r, c));
#pragma unroll
                for (int i = 0; i < KG; i++) {
                    fdec_k_frag<KT>(x, i, b[i][0], b[i][1]);
                    fdec_mma<MT>(i & 1 ? sd[nt] : sc[nt], qa[kg * KG + i], b[i][0], b[i][1]);
                }
                if constexpr (NTERM == 3)
#pragma unroll
                    for (int i = 0; i < KG; i++) {
                        const unsigned a[4] = {qa3[kg * KG + i][0], 0u, qa3[kg * KG + i][1], 0u};
                        fdec_mma<MT>(i & 1 ? sd[nt] : sc[nt], a, b[i][0], b[i][1]);
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
            __syncthreads();
#pragma unroll
            for (int nt = 0; nt < NT; nt++) sv[nt][0] = sv[nt][1] = 0.f;
#pragma unroll
            for (int w = 0; w < WD; w++) {
                const float *x = xs + ((size_t)((tg * WP + pg) * WD + w) * 32 + lane) * NT * 2;
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
                const uint64_t t = pbase + src_row(prow + nt * 8 + 2 * cq + e);
                /* the logits hook (logits.h) */
                float x = fdec_logit2(&p.logits, sv[nt][e], qhead, t, qpos);
                x = fmaf(0.f, x, x); /* +-inf -> NaN: the head comes out NaN */
                if constexpr (W::OWN_RANGES) x = t < c1 && t >= qfirst && t <= qpos ? x : -INFINITY;
                else x = t < c1 ? x : -INFINITY;
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
                fdec_split16<MT>(w, t[j]);
                ls += (t[j][0] + t[j][1]) + t[j][2]; /* the weight the MMA applies */
            }
            const unsigned pa[4] = {fdec_pack16<MT>(t[0][0], t[1][0]), fdec_pack16<MT>(t[0][1], t[1][1]),
                                    fdec_pack16<MT>(t[2][0], t[3][0]), fdec_pack16<MT>(t[2][1], t[3][1])};
            unsigned pa3[4] = {0u, 0u, 0u, 0u};
            if constexpr (NTERM == 3)
                pa3[0] = fdec_pack16<MT>(t[0][2], t[1][2]), pa3[2] = fdec_pack16<MT>(t[2][2], t[3][2]);
            /* an ldmatrix.x4.trans of 16 rows' 2 pieces is VG output tiles (fdec_v_frag); each tile's 16 positions from
             * zero, then added in the FP32 pipe (rounded to nearest) */
#pragma unroll
            for (int vg = 0; vg < OT / VG; vg++) {
                const int r = prow + kp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), c = ds / DPP + vg * 2 + (lane >> 4);
                unsigned x[4], b[VG][2];
                fdec_ldsm_x4_t(x, piece(V, r, c));
                float d[VG][4];
#pragma unroll
                for (int i = 0; i < VG; i++) {
                    fdec_v_frag<KT>(x, i, b[i][0], b[i][1]);
                    d[i][0] = d[i][1] = d[i][2] = d[i][3] = 0.f;
                    fdec_mma<MT>(d[i], pa, b[i][0], b[i][1]);
                }
                if constexpr (NTERM == 3)
#pragma unroll
                    for (int i = 0; i < VG; i++) fdec_mma<MT>(d[i], pa3, b[i][0], b[i][1]);
#pragma unroll
                for (int e = 0; e < 2; e++) /* elements 0, 1: p's high terms; 2, 3: its low terms (the rows g + 8) */
#pragma unroll
                    for (int i = 0; i < VG; i++) o[vg * VG + i][e + 2] += d[i][e] + d[i][e + 2];
            }
        }
        lb += ls;
        if ((it & (FDEC_MMA_SUM_STEPS - 1)) == FDEC_MMA_SUM_STEPS - 1) { /* the block into o and l */
#pragma unroll
            for (int j = 0; j < OT; j++) fdec_flush_block(o[j][0], o[j][2]), fdec_flush_block(o[j][1], o[j][3]);
            fdec_flush_block(l, lb);
        }
    }
    fdec_cp_async_wait<0>();
    __syncthreads(); /* the ring's memory is reused below */

    /* this position group's state: l summed over the row's four lanes; O = term rows added, PSCALE removed */
    l += lb;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    float *smem = reinterpret_cast<float *>(smem_raw);
    float *sm_m = smem, *sm_l = smem + WP * RB, *sm_o = smem + 2 * WP * RB; /* sm_o: [WP][RB][D] */
    if (qok) {
        if (warp % WD == 0 && cq == 0) sm_m[pg * RB + row] = m, sm_l[pg * RB + row] = l * (1.f / PSCALE);
        const float osc = CVT ? fdec_kv_scale_at(&p.sc, w.g, 1) / PSCALE : 1.f / PSCALE; /* fp8: the V scale */
#pragma unroll
        for (int j = 0; j < OT; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                /* o[j][2..3] are the last block (an inf in o makes it NaN, inf - inf: non-finite either way, and the
                 * tail makes the head NaN, flashdec.h) */
                sm_o[(pg * RB + row) * D + ds + fdec_mma_dim<CVT>(j, e, cq)] = (o[j][e] + o[j][e + 2]) * osc;
            }
    }
    __syncthreads();
    fdec_block_tail<D, RB, WP>([&](int r) { return w.state(r); }, w.bad(), p.part_o, p.part_m, p.part_l, smem, nh, D);
}

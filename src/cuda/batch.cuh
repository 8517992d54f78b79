/* batch.cuh — fdec_decode_batch and fdec_kv_write on the GPU (flashdec.h, "batches"): sequences of their own
 * lengths and 1..FDEC_MAX_Q_LEN query tokens, over contiguous caches (a ring too) or a paged one, with the lengths,
 * the token counts and the page table in device memory. cuda.cu launches three kernels a call:
 *
 *   fdec_batch_check  block b checks sequence b (its length, its token count, the page ids of the positions it
 *                     attends) and finds its first row, the sum of the token counts before it. A sequence that fails
 *                     gets NaN rows and none of its cache is read; a bad token count takes min(count, max_q_len) rows,
 *                     so the rows never pass the sum of the counts given.
 *   the decode       block (KV head and head tile, chunk, sequence) computes the partial states (state.h) of a tile
 *                     of the sequence's (token, query head) rows of one KV head over one chunk of its positions, each
 *                     K/V row read once for all of them: mma.cuh's tensor-core kernel (tiles of 8 rows, up to 4 a
 *                     block, over fdec_mma_work<fdec_batch_params> below) for 16-bit and fp8 caches on its shapes,
 *                     fdec_batch_kernel (SIMT, RT rows) for the others. A sequence's chunks are chunk_len
 *                     positions from its first attended position, chunk_len fixed by the batch's bounds (max_seq_len,
 *                     max_q_len), never by the other sequences: batch invariance. The blocks of chunks past a
 *                     sequence's end return at once (fdec_batch_chunks).
 *   fdec_batch_merge  merges each (row, head)'s chunk states, its sequence's chunks only, into out and lse
 *                     (merge.cuh's fdec_merge_heads, the sink included; fdec_batch_merge_small, in one round trip, for
 *                     up to FDEC_MERGE_SMALL_MAX chunks).
 *
 * Positions are found by kv.h's address rule (fdec_kv_offset over the sequence's layout), a token's range by
 * fdec_tok_pos / fdec_tok_lo, the logits by fdec_logit2: the same rules as every other kernel. */
#pragma once
#include "../dtype.h"
#include "common.cuh"
#include "merge.cuh"
#include "mma.cuh"
#include "simt.cuh"

/* A sequence as the check kernel found it (in the scratch, after the chunk states). */
struct fdec_batch_seq_info {
    uint32_t row0; /* its first row of q, out and lse; entry num_seqs: the rows in all */
    uint32_t n;    /* its length */
    uint32_t nq;   /* its rows: min(q_len, max_q_len) */
    uint32_t ok;   /* 0: a bad length, token count or page id: NaN rows */
};

struct fdec_batch_params {
    const void *q, *k, *v;
    void *out;
    float *lse;
    const uint32_t *seq_lens, *q_lens; /* q_lens NULL: one token a sequence */
    fdec_kv_layout kv;                 /* ps, hs, ss (contiguous), ring, page_size, page_stride; pages: the table */
    uint32_t max_pages, num_pages;
    fdec_batch_seq_info *info;         /* [B + 1] */
    uint32_t *row_chunks;              /* [rows]: the chunks a row's sequence fills (fdec_batch_chunks) */
    float *part_m, *part_l, *part_o;   /* [rows_max * H][nc], likewise, [rows_max * H][nc][D] */
    uint32_t B, max_seq_len, max_q_len;
    uint32_t D, H, G, R, window;
    uint32_t nc, chunk_len, tiles;     /* chunks a sequence, positions a chunk, head tiles a KV head */
    float scale_log2;
    int qt, ot;
    fdec_logits logits;
    fdec_kv_scales sc; /* fp8 caches' scales (kv.h) */
};

/* The first position a sequence of n positions and nq new tokens attends: its first token's window's (<= n - 1). */
__device__ __forceinline__ uint64_t fdec_batch_first(const fdec_batch_params &p, uint32_t n, uint32_t nq) {
    return fdec_tok_lo(fdec_tok_pos(n - 1, nq, 0), p.window);
}

/* The chunks of sequence si that hold states: chunk c is positions [lo + c chunk_len, ..) of its attended range
 * [lo, n), and the chunks past its end are neither computed nor merged, so that a sequence costs blocks and merge
 * loads by its own length, not by the batch's bound. A sequence the check kernel refused has one, its NaN state. */
__device__ __forceinline__ uint32_t fdec_batch_chunks(const fdec_batch_params &p, const fdec_batch_seq_info &si) {
    return si.ok ? (uint32_t)((si.n - fdec_batch_first(p, si.n, si.nq) + p.chunk_len - 1) / p.chunk_len) : 1;
}

/* The work of a tensor-core block of a batch (mma.cuh's fdec_mma_work): block (KV head g and head tile, chunk,
 * sequence b), its rows the tile's rb of the sequence's nq * R (token-major: row r is token r / R, query head
 * g * R + r % R), each attending [fdec_tok_lo(its position), its position]. A sequence the check kernel refused is
 * bad: no position is read and its states are NaN. */
template <>
struct fdec_mma_work<fdec_batch_params> {
    static constexpr bool OWN_RANGES = true, FROM_MEMORY = true;
    const fdec_batch_params &p;
    fdec_batch_seq_info si;
    fdec_kv_layout kv; /* the sequence's: its page-table row */
    uint32_t g, r0, chunk, b; /* r0: the tile's first row */
    int nh;
    uint64_t lo_, hi_; /* the sequence's attended range: its first token's first position, its length */
    __device__ fdec_mma_work(const fdec_batch_params &p_, int rb)
        : p(p_), si(p_.info[blockIdx.z]), kv(p_.kv), g(blockIdx.x / p_.tiles), r0(blockIdx.x % p_.tiles * rb),
          chunk(blockIdx.y), b(blockIdx.z) {
        nh = min(rb, (int)(si.nq * p.R) - (int)r0);
        kv.pages = kv.page_size ? p.kv.pages + (size_t)b * p.max_pages : NULL;
        lo_ = si.ok ? fdec_batch_first(p, si.n, si.nq) : 0;
        hi_ = si.ok ? si.n : 0;
    }
    __device__ bool bad() const { return !si.ok; }
    __device__ bool skip() const { return chunk >= fdec_batch_chunks(p, si); }
    __device__ uint64_t lo() const { return lo_; }
    __device__ uint64_t hi() const { return hi_; }
    __device__ size_t ps() const { return kv.ps; }
    __device__ bool paged() const { return kv.page_size != 0; }
    __device__ size_t kv_base() const { return (size_t)b * kv.ss + (size_t)g * kv.hs; }
    __device__ size_t pos_off(bool ok, uint64_t t) const { return ok ? fdec_kv_pos(&kv, t) : 0; }
    __device__ bool run(uint64_t t, uint64_t n, uint64_t c1) const { return t + n <= c1 && fdec_kv_run(&kv, t, n) == n; }
    __device__ size_t run_off(uint64_t t, int i) const { return fdec_kv_pos(&kv, t) + (size_t)i * kv.ps; }
    __device__ uint32_t tok(int r) const { return (r0 + r) / p.R; }
    __device__ uint32_t head(int r) const { return g * p.R + (r0 + r) % p.R; }
    __device__ size_t q_row(int r) const { return (size_t)(si.row0 + tok(r)) * p.H + head(r); }
    __device__ uint64_t pos(int r) const { return fdec_tok_pos(si.n - 1, si.nq, tok(r)); }
    __device__ uint64_t first(int r) const { return fdec_tok_lo(pos(r), p.window); }
    __device__ size_t state(int r) const { return q_row(r) * p.nc + chunk; }
};

#define FDEC_BATCH_CHECK_THREADS 128

__global__ void __launch_bounds__(FDEC_BATCH_CHECK_THREADS) fdec_batch_check(const fdec_batch_params p) {
    fdec_grid_wait();
    const uint32_t b = blockIdx.x;
    __shared__ uint32_t s_rows[FDEC_BATCH_CHECK_THREADS / 32];
    __shared__ int s_bad;
    auto rows_of = [&](uint32_t i) { return p.q_lens ? min(p.q_lens[i], p.max_q_len) : 1u; };
    uint32_t before = 0;
    for (uint32_t i = threadIdx.x; i < b; i += blockDim.x) before += rows_of(i);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) before += __shfl_xor_sync(0xffffffffu, before, off);
    if ((threadIdx.x & 31) == 0) s_rows[threadIdx.x >> 5] = before;
    if (threadIdx.x == 0) s_bad = 0;
    __syncthreads();
    const uint32_t n = p.seq_lens[b], nq = p.q_lens ? p.q_lens[b] : 1;
    const bool ok = n >= 1 && n <= p.max_seq_len && nq >= 1 && nq <= p.max_q_len && nq <= n;
    if (ok && p.kv.page_size) { /* the pages of [lo of the first token, n): every id a page of the pool */
        const uint64_t lo = fdec_batch_first(p, n, nq), last = (n - 1) / p.kv.page_size;
        const int32_t *row = p.kv.pages + (size_t)b * p.max_pages;
        bool bad = false;
        /* U ids a thread a round trip, every load issued before any is used (an id past the last reads the last) */
        constexpr int U = 8;
        for (uint64_t pg = lo / p.kv.page_size + threadIdx.x; pg <= last; pg += U * blockDim.x) {
            int32_t id[U];
#pragma unroll
            for (int j = 0; j < U; j++) id[j] = __ldg(row + min(pg + (uint64_t)j * blockDim.x, last));
#pragma unroll
            for (int j = 0; j < U; j++) bad |= id[j] < 0 || (uint32_t)id[j] >= p.num_pages;
        }
        if (bad) s_bad = 1;
    }
    __syncthreads();
    uint32_t row0 = 0;
    for (int w = 0; w < FDEC_BATCH_CHECK_THREADS / 32; w++) row0 += s_rows[w];
    const fdec_batch_seq_info si = {row0, n, rows_of(b), ok && !s_bad};
    if (threadIdx.x == 0) {
        p.info[b] = si;
        if (b == p.B - 1) p.info[p.B] = {row0 + si.nq, 0, 0, 0};
    }
    const uint32_t chunks = fdec_batch_chunks(p, si);
    for (uint32_t i = threadIdx.x; i < si.nq; i += blockDim.x) p.row_chunks[row0 + i] = chunks;
}

/* Block (KV head g and head tile, chunk, sequence b). The rows of the tile are rows tile * RT .. of the sequence's
 * nq * R (token-major: row r is token r / R, query head g * R + r % R). A row (position t's K or V vector of head g) is
 * read by T lanes, VEC elements a load, E elements a lane (simt.cuh's fdec_shape); a warp takes GROUPS rows at once
 * and U such sets a step, loading the next step's rows before it computes this one. Each lane group keeps its own
 * online softmax in base 2; groups merge by shuffles, warps through shared memory. */
/* Blocks an SM the batch kernel's registers must allow (launch bounds; docs/TUNING.md). */
#ifndef FDEC_BATCH_BLOCKS_PER_SM
#define FDEC_BATCH_BLOCKS_PER_SM 3
#endif

template <typename KT, int D, int RT>
__global__ void __launch_bounds__(FDEC_CUDA_WARPS * 32, FDEC_BATCH_BLOCKS_PER_SM)
    fdec_batch_kernel(const fdec_batch_params p) {
    using S = fdec_shape<KT, D>;
    using raw_t = typename fdec_raw<KT, S::VEC>::type;
    constexpr int VEC = S::VEC, T = S::T, E = S::E, NL = S::NL, GROUPS = S::GROUPS, U = S::U, NW = FDEC_CUDA_WARPS;
    const int Dr = D ? D : (int)p.D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, grp = lane / T, lin = lane % T;
    const uint32_t g = blockIdx.x / p.tiles, tile = blockIdx.x % p.tiles, chunk = blockIdx.y, b = blockIdx.z;
    fdec_grid_wait();
    const fdec_batch_seq_info si = p.info[b];
    const int nrows = (int)(si.nq * p.R) - (int)(tile * RT), nh = min(RT, nrows); /* this tile's rows */
    if (nh <= 0 || chunk >= fdec_batch_chunks(p, si)) return;

    /* row r of the tile: its token, query head, position, first attended position, and state index */
    uint32_t head[RT];
    uint64_t pos[RT], lo[RT];
    size_t st[RT];
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const uint32_t rr = tile * RT + (r < nh ? r : 0), tok = rr / p.R;
        head[r] = g * p.R + rr % p.R;
        pos[r] = si.ok ? fdec_tok_pos(si.n - 1, si.nq, tok) : 0;
        lo[r] = fdec_tok_lo(pos[r], p.window);
        st[r] = ((size_t)(si.row0 + tok) * p.H + head[r]) * p.nc + chunk;
    }
    /* the chunk: [c0, c1) of the sequence's attended [lo of its first token, n) */
    const uint64_t first = si.ok ? fdec_batch_first(p, si.n, si.nq) : 0,
                   c0 = first + (uint64_t)chunk * p.chunk_len,
                   c1 = si.ok ? min(c0 + p.chunk_len, (uint64_t)si.n) : 0;
    if (c0 >= c1) { /* a bad sequence's chunk 0: a NaN state */
        for (int i = threadIdx.x; i < nh * Dr; i += blockDim.x) p.part_o[st[i / Dr] * Dr + i % Dr] = 0.f;
        if (threadIdx.x < nh) {
            p.part_m[st[threadIdx.x]] = si.ok ? -INFINITY : NAN;
            p.part_l[st[threadIdx.x]] = si.ok ? 0.f : NAN;
        }
        return;
    }

    auto elem = [&](int i) { return lin * VEC + (i / VEC) * T * VEC + (i % VEC); };
    float q[RT][E];
    /* an fp8 cache's K scale goes into q, its V scale into the chunk's o */
    const float qscale = fdec_is_fp8<KT> ? p.scale_log2 * fdec_kv_scale_at(&p.sc, g, 0) : p.scale_log2,
                vscale = fdec_is_fp8<KT> ? fdec_kv_scale_at(&p.sc, g, 1) : 1.f;
    fdec_with_loader(p.q, p.qt, [&](auto ld) {
#pragma unroll
        for (int r = 0; r < RT; r++) {
            const size_t qrow = (st[r] - chunk) / p.nc; /* (row, head): q's row of the tile's row r */
#pragma unroll
            for (int i = 0; i < E; i++) {
                const int d = elem(i);
                const bool ok = r < nh && d < Dr;
                const float x = ld(ok ? qrow * Dr + d : qrow * Dr); /* in bounds either way */
                q[r][i] = ok ? x * qscale : 0.f;
            }
        }
    });
    float m[RT], l[RT], o[RT][E];
#pragma unroll
    for (int r = 0; r < RT; r++) {
        m[r] = -INFINITY, l[r] = 0.f;
#pragma unroll
        for (int i = 0; i < E; i++) o[r][i] = 0.f;
    }

    fdec_kv_layout kv = p.kv;
    kv.pages = p.kv.page_size ? p.kv.pages + (size_t)b * p.max_pages : NULL;
    const uint32_t step = NW * GROUPS * U;
    auto valid_at = [&](uint64_t base, int u) { return base + u * NW * GROUPS + grp < c1; };
    auto load_step = [&](uint64_t base, raw_t (&kr)[U][NL], raw_t (&vr)[U][NL]) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const bool valid = valid_at(base, u);
            const size_t off = valid ? fdec_kv_offset(&kv, b, base + u * NW * GROUPS + grp, g) : 0;
#pragma unroll
            for (int j = 0; j < NL; j++) {
                const int d = lin * VEC + j * T * VEC;
                if (valid && (D || d < Dr)) {
                    if constexpr (VEC == 1) { /* element offsets: a block type has no element pointers */
                        kr[u][j] = fdec_kv_raw1<KT>(p.k, off + d);
                        vr[u][j] = fdec_kv_raw1<KT>(p.v, off + d);
                    } else {
                        kr[u][j] = __ldg(reinterpret_cast<const raw_t *>((const KT *)p.k + off + d));
                        vr[u][j] = __ldg(reinterpret_cast<const raw_t *>((const KT *)p.v + off + d));
                    }
                } else {
                    memset(&kr[u][j], 0, sizeof(raw_t));
                    memset(&vr[u][j], 0, sizeof(raw_t));
                }
            }
        }
    };
    auto compute_step = [&](uint64_t base, const raw_t (&kr)[U][NL], const raw_t (&vr)[U][NL]) {
        float s[U][RT];
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[E];
#pragma unroll
            for (int j = 0; j < NL; j++) raw_to_f32<KT, VEC>(kr[u][j], &kf[j * VEC]);
            const uint64_t t = base + u * NW * GROUPS + grp;
            const bool valid = valid_at(base, u);
#pragma unroll
            for (int r = 0; r < RT; r++) {
                float acc = 0.f;
#pragma unroll
                for (int i = 0; i < E; i++) acc = fmaf(q[r][i], kf[i], acc);
#pragma unroll
                for (int off = T / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
                acc = fdec_logit2(&p.logits, acc, head[r], t, pos[r]);
                /* the row's own range: causal among the new tokens, and its window */
                s[u][r] = valid && t >= lo[r] && t <= pos[r] ? fmaf(0.f, acc, acc) : -INFINITY;
            }
        }
        fdec_softmax_step(s, m, l, o);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (!valid_at(base, u)) continue;
            float vf[E];
#pragma unroll
            for (int j = 0; j < NL; j++) raw_to_f32<KT, VEC>(vr[u][j], &vf[j * VEC]);
#pragma unroll
            for (int r = 0; r < RT; r++)
#pragma unroll
                for (int i = 0; i < E; i++) o[r][i] = fmaf(s[u][r], vf[i], o[r][i]);
        }
    };

    const uint64_t begin = c0 + warp * GROUPS; /* warp-uniform loop: the shuffles need every lane */
    raw_t kr[U][NL], vr[U][NL];
    if (begin < c1) load_step(begin, kr, vr);
    for (uint64_t base = begin; base < c1; base += step) {
        raw_t kn[U][NL], vn[U][NL];
        if (base + step < c1) load_step(base + step, kn, vn);
        compute_step(base, kr, vr);
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int j = 0; j < NL; j++) kr[u][j] = kn[u][j], vr[u][j] = vn[u][j];
    }

    fdec_merge_lane_groups<T>(m, l, o);
    /* the warps, through shared memory: [NW][RT] m and l, [NW][RT][Dr] o */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float *sm_m = reinterpret_cast<float *>(smem_raw), *sm_l = sm_m + NW * RT, *sm_o = sm_l + NW * RT;
    if (grp == 0) {
#pragma unroll
        for (int r = 0; r < RT; r++) {
            if (lin == 0) sm_m[warp * RT + r] = m[r], sm_l[warp * RT + r] = l[r];
#pragma unroll
            for (int i = 0; i < E; i++)
                if (D || elem(i) < Dr) sm_o[(warp * RT + r) * Dr + elem(i)] = o[r][i] * vscale;
        }
    }
    __syncthreads();
    __shared__ float sw[NW][RT], sM[RT], sL[RT];
    __shared__ int sbad[RT];
    if (threadIdx.x < nh) {
        const int r = threadIdx.x;
        float M = -INFINITY, L = 0.f;
        for (int w = 0; w < NW; w++) M = fmaxf(M, sm_m[w * RT + r]);
        for (int w = 0; w < NW; w++) {
            sw[w][r] = fdec_state_weight2(sm_m[w * RT + r], M);
            L += sw[w][r] * sm_l[w * RT + r];
        }
        sM[r] = M * 0.69314718055994531f, sL[r] = L, sbad[r] = L != L;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nh * Dr; i += blockDim.x) {
        const int r = i / Dr, d = i - r * Dr;
        float O = 0.f;
        for (int w = 0; w < NW; w++) O += sw[w][r] * sm_o[(w * RT + r) * Dr + d];
        p.part_o[st[r] * Dr + d] = O;
        if (!isfinite(O)) sbad[r] = 1; /* a benign race: every writer writes 1 */
    }
    __syncthreads();
    if (threadIdx.x < nh) { /* a chunk whose o is not finite (an inf in V, a NaN): NaN, the row comes out NaN */
        p.part_m[st[threadIdx.x]] = sbad[threadIdx.x] ? NAN : sM[threadIdx.x];
        p.part_l[st[threadIdx.x]] = sbad[threadIdx.x] ? NAN : sL[threadIdx.x];
    }
}

/* Shared memory of fdec_batch_kernel<.., RT>: the warps' states */
__host__ __device__ constexpr size_t fdec_batch_smem(int rt, uint32_t D) {
    return (size_t)FDEC_CUDA_WARPS * rt * (2 + D) * sizeof(float);
}

/* The chunk states of (row, head) idx: merge.cuh's source, the sink that of query head idx % H. */
struct fdec_batch_src : fdec_chunk_src {
    uint32_t H;
    __device__ float sink(int r) const { return fdec_logit_sink(logits, (uint32_t)((h0 + r) % H)); }
};

/* Block (row, head): its chunk states into out and lse; blocks past the rows the check kernel counted return. */
__global__ void __launch_bounds__(FDEC_MERGE_THREADS) fdec_batch_merge(const fdec_batch_params p) {
    fdec_grid_wait();
    extern __shared__ float msm[]; /* laid out and sized by fdec_merge_smem_bytes */
    const uint32_t idx = blockIdx.x;
    if (idx >= (size_t)p.info[p.B].row0 * p.H) return;
    const uint32_t n = p.row_chunks[idx / p.H]; /* the states of the row's sequence, of p.nc a row */
    fdec_batch_src src;
    src.m = p.part_m, src.l = p.part_l, src.o = p.part_o, src.n = p.nc, src.D = p.D, src.h0 = idx, src.d0 = 0;
    src.logits = &p.logits, src.H = p.H;
    fdec_merge_heads<true>(src, 1, n, (int)p.D, msm, msm + p.nc, msm + p.nc + 3, p.out, (size_t)idx * p.D, p.ot,
                           p.lse ? p.lse + idx : NULL);
}

/* Block (row, head), slice of the dimensions: fdec_batch_merge's work where a row has at most C chunks, in one round
 * trip (merge.cuh's fdec_merge_small; the same bits). */
template <int C>
__global__ void __launch_bounds__(FDEC_MERGE_THREADS) fdec_batch_merge_small(const fdec_batch_params p) {
    fdec_merge_trigger<C>();
    fdec_grid_wait();
    const uint32_t idx = blockIdx.x;
    if (idx >= (size_t)p.info[p.B].row0 * p.H) return;
    fdec_merge_small<C>(p.part_m, p.part_l, p.part_o, (size_t)idx * p.nc, p.row_chunks[idx / p.H], p.D,
                        fdec_logit_sink(&p.logits, idx % p.H), p.out, (size_t)idx * p.D, p.ot,
                        p.lse ? p.lse + idx : NULL);
}

/* ---- fdec_kv_write: token i's K and V rows ([num_tokens][G][D] of the source type) into slot slots[i] ---- */

struct fdec_kv_write_params {
    const void *ks, *vs; /* the new rows */
    void *k, *v;         /* the caches */
    const int64_t *slots;
    uint64_t num_slots;
    fdec_kv_layout kv;   /* ps, hs; page_size and page_stride for a paged cache (slot s: page s / page_size) */
    uint32_t n, G, D;
    int st, ct;          /* source dtype (f32, f16, bf16) and the cache's (any fdec_dtype) */
};

/* ggml's reference quantisers (dtype.c's fdec_store_q8_0 / fdec_store_q4_0, step for step and with every product and
 * sum rounded on its own, no fused multiply-add, so that the codes are the CPU's): the 32 elements ld(at ..) into the
 * block at b. */
template <class LD>
__device__ __forceinline__ void fdec_quantise_block(unsigned char *b, LD &&ld, size_t at, bool q4) {
    float amax = 0.0f, mx = 0.0f;
    bool nan = false;
    for (int j = 0; j < 32; j++) {
        const float x = ld(at + j);
        if (fabsf(x) > amax) amax = fabsf(x), mx = x;
        nan |= x != x;
    }
    const float d = fdec_quant_scale(q4 ? mx : amax, nan, q4), id = d != 0.0f ? __frcp_rn(d) : 0.0f;
    /* the scale as one 16-bit store (a block starts 2-byte aligned): byte stores of the f16 register wrote 0 for its
     * low byte on the H100 and the H200 */
    *reinterpret_cast<__half *>(b) = __float2half_rn(d);
    if (!q4)
        for (int j = 0; j < 32; j++) b[2 + j] = (unsigned char)(signed char)fdec_q8_0_code(__fmul_rn(ld(at + j), id));
    else
        for (int j = 0; j < 16; j++)
            b[2 + j] = (unsigned char)(fdec_q4_0_code(__fadd_rn(__fmul_rn(ld(at + j), id), 8.5f)) |
                                       fdec_q4_0_code(__fadd_rn(__fmul_rn(ld(at + j + 16), id), 8.5f)) << 4);
}

/* Block (token, KV head): its D elements; a slot outside the cache (found here, on the device) writes nothing. A block
 * type's 32-element blocks are a thread's each. */
__global__ void fdec_kv_write_kernel(const fdec_kv_write_params p) {
    fdec_grid_wait();
    const uint32_t i = blockIdx.x, g = blockIdx.y;
    const int64_t s = p.slots[i];
    if (s < 0 || (uint64_t)s >= p.num_slots) return; /* -1: skipped; other values: bad, nothing written */
    const size_t off = fdec_kv_slot(&p.kv, (uint64_t)s) + (size_t)g * p.kv.hs;
    const size_t src = ((size_t)i * p.G + g) * p.D;
    for (int which = 0; which < 2; which++) {
        void *cache = which ? p.v : p.k;
        fdec_with_loader(which ? p.vs : p.ks, p.st, [&](auto ld) {
            if (p.ct == FDEC_Q8_0 || p.ct == FDEC_Q4_0) { /* off and D are whole blocks (the API's checks) */
                const size_t bb = p.ct == FDEC_Q8_0 ? 34 : 18;
                for (uint32_t d = threadIdx.x * 32; d < p.D; d += blockDim.x * 32)
                    fdec_quantise_block((unsigned char *)cache + (off + d) / 32 * bb, ld, src + d, p.ct == FDEC_Q4_0);
            } else
                for (uint32_t d = threadIdx.x; d < p.D; d += blockDim.x)
                    fdec_store_any(cache, off + d, p.ct, ld(src + d));
        });
    }
}

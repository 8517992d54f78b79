/* cpu.h — what the CPU backend's driver (cpu.c) and its per-ISA kernels (kern.h) share. */
#ifndef FDEC_CPU_H
#define FDEC_CPU_H

#include "../internal.h"

/* Positions per kernel block: 32 rows of K and V per head stay in L1 between the score and the output pass
 * (32 x 512 x 2 B = 32 KiB at the largest head_dim in f16), and 32 weights fill two AVX-512 vectors (TUNING.md). */
#define FDEC_CPU_NB 32

/* head_dim rounded up to 16: the row pitch of q and o. */
static inline uint32_t fdec_cpu_padded_dim(uint32_t D) { return (D + 15) / 16 * 16; }

/* o and l are summed in three levels: a block's positions (from zero in the output tile's registers), the blocks of a
 * group of FDEC_CPU_GROUP_BLOCKS, then the groups, so that no f32 sum of like terms grows long enough to drift
 * (TUNING.md). */
#define FDEC_CPU_GROUP_BLOCKS 32

/* Floats of work (sT) one kernel call needs for H heads: a block's scores of every head (H x NB), then for each head
 * the totals of the groups before the current one in double (Dp of o, then l and their max, padded to Dp + 16), then
 * room for a chunk's own state (o, m, l; fdec_cpu_range.own), a multiple of 16 floats in all. */
static inline size_t fdec_cpu_work_floats(uint32_t H, uint32_t D) {
    const size_t Dp = fdec_cpu_padded_dim(D);
    return (size_t)H * (FDEC_CPU_NB + 2 * (Dp + 16)) + (size_t)H * Dp + (2 * (size_t)H + 15) / 16 * 16;
}

/* The kernel's rows: the nq query tokens' heads, grouped by KV head: row g R + i (R / nq) + r is token i's query head
 * g (R / nq) + r. H and R count rows (nq times the layer's heads). */
typedef struct {
    uint32_t D, H, G, R;     /* Dp below: fdec_cpu_padded_dim(D), the row pitch of q and o */
    fdec_kv_layout kv;       /* the address rule (kv.h) */
    fdec_dtype kvt;
    const void *k, *v;       /* the sequence's cache (kv.ss already applied) */
    const float *q;          /* [H][Dp] f32, pre-multiplied by scale, zero-padded */
    const fdec_logits *logits;
    uint64_t qpos;           /* the last query token's position (the logits hook's) */
    uint32_t pf_blocks;      /* blocks ahead the kernel prefetches rows (>= 1): pf_distance (cpu.c) */
    uint32_t nq, window;     /* query tokens; the window, for each token's range (fdec_token_lo) */
    int hook;                /* the logits hook runs on each block: a logit variant, or several query tokens */
} fdec_cpu_args;

/* The prefetch distance in blocks for this machine: 1 on Intel processors, 2 elsewhere (TUNING.md). */
uint32_t fdec_cpu_pf_blocks(void);

/* Every f16 value as f32 (256 KiB), filled once by the first CPU context: a Q8_0 / Q4_0 block's scale is one table
 * load and a broadcast from memory, no work for the vector pipes the block's FMAs need. */
extern float fdec_cpu_f16_table[1 << 16];

/* A kernel call's positions [t0, t1). The rows it asks for ahead of use may run on to pf_end (>= t1): the positions
 * the same thread goes on to next, whose first rows are then on their way when it gets there. ramp: the call starts
 * cold (nothing of its first blocks asked for yet) and asks for them first. */
typedef struct {
    uint64_t t0, t1, pf_end;
    int ramp;
    /* 1: the chunk sums into its own copy of the state in the work area and writes m, l and o once, at its end (cpu.c:
     * where each thread runs one chunk a call) */
    int own;
} fdec_cpu_range;

/* Partial state of all H heads over the positions of r: m[H], l[H], o[H][Dp]. sT: fdec_cpu_work_floats(H, D) floats
 * of work (the scores of a block, every KV head's in the row-major order, the earlier groups' totals and, with r->own,
 * the chunk's own copy of its state: kern.h). */
typedef void (*fdec_cpu_chunk_fn)(const fdec_cpu_args *a, const fdec_cpu_range *r, float *m, float *l, float *o,
                                  float *sT);

void fdec_cpu_chunk_scalar(const fdec_cpu_args *, const fdec_cpu_range *, float *, float *, float *, float *);
void fdec_cpu_chunk_avx2(const fdec_cpu_args *, const fdec_cpu_range *, float *, float *, float *, float *);
void fdec_cpu_chunk_avx512(const fdec_cpu_args *, const fdec_cpu_range *, float *, float *, float *, float *);
void fdec_cpu_chunk_neon(const fdec_cpu_args *, const fdec_cpu_range *, float *, float *, float *, float *);

/* dst[i] = src[i] of type t (f32, f16, bf16) times scale, for i < n; the same bits as fdec_load_elem(src, i, t) * scale */
typedef void (*fdec_cpu_cvt_in_fn)(float *dst, const void *src, size_t n, fdec_dtype t, float scale);
/* dst[i] = src[i] in type t for i < n; the same bits as fdec_store_elem (a NaN's payload aside) */
typedef void (*fdec_cpu_cvt_out_fn)(void *dst, const float *src, size_t n, fdec_dtype t);
void fdec_cpu_cvt_in_scalar(float *, const void *, size_t, fdec_dtype, float);
void fdec_cpu_cvt_in_avx2(float *, const void *, size_t, fdec_dtype, float);
void fdec_cpu_cvt_in_avx512(float *, const void *, size_t, fdec_dtype, float);
void fdec_cpu_cvt_in_neon(float *, const void *, size_t, fdec_dtype, float);
void fdec_cpu_cvt_out_scalar(void *, const float *, size_t, fdec_dtype);
void fdec_cpu_cvt_out_avx2(void *, const float *, size_t, fdec_dtype);
void fdec_cpu_cvt_out_avx512(void *, const float *, size_t, fdec_dtype);
void fdec_cpu_cvt_out_neon(void *, const float *, size_t, fdec_dtype);

/* pool.c: a fixed set of worker threads. run() calls fn(task, i, n) for i in [0, n) across the workers and
 * the calling thread and returns when all are done. */
typedef struct fdec_pool fdec_pool;
fdec_pool *fdec_pool_create(uint32_t threads);
void fdec_pool_destroy(fdec_pool *p);
void fdec_pool_run(fdec_pool *p, fdec_task_fn fn, void *task, uint32_t n);

#endif

/*
 * flashdec.h — decode attention for LLM inference, on the CPU and on NVIDIA GPUs.
 *
 * One call computes, for one sequence whose KV cache holds `seq_len` positions (the new token's own K/V
 * already written) and for every query head h with KV head g = h / (num_q_heads / num_kv_heads):
 *
 *     lo     = window ? max(0, seq_len - window) : 0      positions attended: [lo, seq_len)
 *     s_t    = scale * dot(q[h], K[t][g])                  scale 0 means 1/sqrt(head_dim)
 *     out[h] = sum_t softmax(s)_t * V[t][g]
 *     lse[h] = log(sum_t exp(s_t))                         natural log; optional
 *
 * Layouts. q and out are [num_q_heads][head_dim], dense. K and V share one layout: the vector of position
 * (row) t and KV head g starts at element t * kv_pos_stride + g * kv_head_stride and holds head_dim contiguous
 * elements. Strides of 0 mean dense [position][kv_head][head_dim]. With ring_capacity C > 0 (sliding-window
 * layers only, C >= window) position t lives in row t % C.
 *
 * Numerics. Accumulation is in f32. Results are deterministic: the same inputs and the same context give
 * bit-identical output. The result does not depend on how the work is split beyond rounding. A NaN or inf in
 * a head's q, or in the K or V rows it attends to, makes every element of that head's output and its lse NaN;
 * the other heads are not affected. Rows outside the attended range are never read. Logits of any size that f32
 * holds are handled (the softmax is computed relative to the running maximum); a logit whose f32 computation
 * overflows (|scale * q.k| past ~3.4e38, e.g. q = K = 1e20) counts as an inf: its head is NaN, and the call still
 * returns FDEC_OK. out is rounded to nearest even into out_dtype; a value past that type's range (65504 for f16)
 * becomes an inf of its sign.
 *
 * Logit variants. The layer's softcap, alibi_slopes and sinks change the logits (Gemma 2, BLOOM-style ALiBi,
 * gpt-oss). With all three, for query position P = seq_len - 1 (the new token's):
 *
 *     s_t    = softcap * tanh(scale * dot(q[h], K[t][g]) / softcap) - alibi_slopes[h] * (P - t)
 *     out[h] = sum_t exp(s_t) V[t][g] / (exp(sinks[h]) + sum_t exp(s_t))
 *     lse[h] = log(exp(sinks[h]) + sum_t exp(s_t))
 *
 * The sink is a logit without a value: it takes weight from the positions and is counted in lse. On the CUDA
 * backend sinks and alibi_slopes are device pointers, read by the kernels and not checked on the host.
 * Sharding a sequence (fdec_merge, libflashdec_nccl): the sink belongs to one shard only, one whose range is not
 * empty (e.g. the shard holding position P); pass sinks = NULL for the others, and the merged result is exact.
 * ALiBi counts distances from the call's last position, so a shard of positions [a, b) of a longer sequence,
 * computed by a call of its own, must have -alibi_slopes[h] * (seq_len - b) added to its lse[h] before the merge
 * (its out is right as it is). libflashdec_nccl does both.
 *
 * Aliasing. out and lse may overlap q: every read of q comes before the first write of out or lse. They must not
 * overlap k, v or each other.
 *
 * Errors. Every function that can fail returns an fdec_status. Bad input never crashes and never writes to
 * `out` or `lse`: the call returns FDEC_EINVAL (or FDEC_EUNSUPPORTED) and fdec_last_error() gives a message
 * that names the argument and the rule, e.g. "num_q_heads (12) must be a multiple of num_kv_heads (8)".
 *
 * Threads. A context may be used by one thread at a time; a call made while another thread is inside a call on
 * the same context returns FDEC_EBACKEND ("context is busy") and does nothing. Different contexts are
 * independent and may be used concurrently.
 */
#ifndef FLASHDEC_H
#define FLASHDEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the shared library exports: the declarations below, and nothing else of its own. */
#if defined(__GNUC__) || defined(__clang__)
#define FDEC_API __attribute__((visibility("default")))
#else
#define FDEC_API
#endif

/* The version, defined here only: the build, the package files and the Python package read it from these lines. */
#define FDEC_VERSION_MAJOR 0
#define FDEC_VERSION_MINOR 2
#define FDEC_VERSION_PATCH 0

/* The shared library's ABI: its SONAME is libflashdec.so.<FDEC_ABI_VERSION>. Raised whenever a change breaks programs
 * built against an earlier header (a field appended to fdec_layer does). */
#define FDEC_ABI_VERSION 1

/* Largest head_dim supported. */
#define FDEC_MAX_HEAD_DIM 512

typedef enum {
    FDEC_OK = 0,       /* success */
    FDEC_EINVAL,       /* an argument breaks the contract; fdec_last_error() says which */
    FDEC_EUNSUPPORTED, /* valid request this build or machine cannot serve (e.g. CUDA not compiled in) */
    FDEC_ENOMEM,       /* an allocation failed */
    FDEC_EBACKEND      /* the backend failed (CUDA error, busy context); the message has the details */
} fdec_status;

/* Element types. q and out are f32, f16 or bf16; K/V also any of the quantised types below:
 *   FDEC_F8_E4M3, FDEC_F8_E5M2: one byte an element (OCP fp8; E4M3 has no inf, its NaN is S.1111.111); the value is
 *     k_scale (or k_scales[g]) times the fp8 number, v_scale likewise (fdec_layer).
 *   FDEC_Q8_0, FDEC_Q4_0: ggml's block formats bit for bit, 32 elements a block: an f16 scale d, then Q8_0's 32 int8
 *     q (x = d q, 34 bytes) or Q4_0's 16 bytes of nibbles (x = d (nibble - 8); byte j holds element j in its low
 *     nibble and element j + 16 in its high one; 18 bytes). head_dim and the strides must be multiples of 32 (strides
 *     count elements; a row of D elements is D / 32 blocks), and the cache 2-byte aligned. */
typedef enum { FDEC_F32 = 0, FDEC_F16, FDEC_BF16, FDEC_F8_E4M3, FDEC_F8_E5M2, FDEC_Q8_0, FDEC_Q4_0 } fdec_dtype;

typedef enum { FDEC_BACKEND_CPU = 0, FDEC_BACKEND_CUDA } fdec_backend;

/* Instruction-set path of the CPU backend. AUTO picks the best the CPU has; the others force one (a path the
 * CPU lacks is FDEC_EUNSUPPORTED). AVX2 (with FMA and F16C) and AVX512 are x86-64's, NEON (Advanced SIMD) is
 * AArch64's. The environment variable FDEC_CPU_PATH=scalar|avx2|avx512|neon overrides AUTO. */
typedef enum { FDEC_CPU_AUTO = 0, FDEC_CPU_SCALAR, FDEC_CPU_AVX2, FDEC_CPU_AVX512, FDEC_CPU_NEON } fdec_cpu_path;

/* One model layer's attention. Zero-initialise, then set fields. */
typedef struct {
    uint32_t head_dim;      /* 1..512 */
    uint32_t num_q_heads;   /* >= 1, a multiple of num_kv_heads */
    uint32_t num_kv_heads;  /* >= 1 */
    float scale;            /* logit scale; 0 means 1/sqrt(head_dim); must be finite */
    uint32_t window;        /* 0: full attention; else attend to the last `window` positions */
    uint32_t ring_capacity; /* 0: contiguous cache; else rows of a ring, needs window > 0 and >= window */
    fdec_dtype q_dtype, kv_dtype, out_dtype;
    size_t kv_pos_stride;  /* elements between positions (rows); 0: num_kv_heads * head_dim (dense) */
    size_t kv_head_stride; /* elements between KV heads; 0: head_dim (dense) */
    /* Logit variants (0 / NULL: off), applied in this order to the scaled logit s_t of query head h (Gemma 2's
     * soft-cap, BLOOM's ALiBi, gpt-oss's sinks; see "Logit variants" at the top of this file): */
    float softcap;             /* > 0: s_t = softcap * tanh(s_t / softcap); must be 0 or positive and finite */
    const float *sinks;        /* [num_q_heads]: one more logit per head, in the softmax's denominator only;
                                  -inf is no sink; on the CPU each must be finite or -inf */
    const float *alibi_slopes; /* [num_q_heads]: s_t += -alibi_slopes[h] * (query position - t); finite */
    /* Scales of fp8 caches (0: 1; finite, not negative): K = k_scale * fp8, V = v_scale * fp8; k_scales and v_scales
     * ([num_kv_heads], a device pointer on CUDA) override them per KV head. Must be 0 / NULL with other K/V types. */
    float k_scale, v_scale;
    const float *k_scales, *v_scales;
} fdec_layer;

/* The work callback flashdec hands to a caller-supplied parallel-for: call fn(task, i, n) once for every
 * i in [0, n), in any order and on any threads, and return when all calls have returned. The CPU backend's tasks
 * share the call's work among themselves (a task that runs out takes over part of another's), so any schedule gives
 * the same bytes; only tasks that run at the same time make the call faster. A CPU decode cut into several chunks
 * calls the parallel-for twice: once for the chunks, then once to merge their partial states, a share of the heads
 * a task. */
typedef void (*fdec_task_fn)(void *task, uint32_t i, uint32_t n);
typedef void (*fdec_parallel_for_fn)(void *user, fdec_task_fn fn, void *task, uint32_t n);

typedef struct {
    uint32_t threads;               /* CPU: worker threads incl. the caller; 0: all online CPUs */
    fdec_cpu_path cpu_path;         /* CPU: instruction-set path; FDEC_CPU_AUTO by default */
    fdec_parallel_for_fn parallel_for; /* CPU: if set, used instead of the internal thread pool, which is
                                          then not created; `threads` still sets how many tasks a call
                                          is cut into (at most that many) */
    void *parallel_user;            /* passed to parallel_for as `user` */
    int cuda_device;                /* CUDA: device ordinal */
    void *cuda_stream;              /* CUDA: cudaStream_t to work on; NULL: the default stream */
} fdec_options;

/* How a call would split its work (see fdec_plan). */
typedef struct {
    uint32_t kv_start;     /* first attended position */
    uint32_t kv_end;       /* one past the last attended position (= seq_len) */
    uint32_t num_chunks;   /* split-KV chunks, merged by log-sum-exp */
    uint32_t chunk_len;    /* positions per chunk (the last may be shorter); on the CPU, where a call has more chunks
                            * than threads, the last chunk of each thread's share is cut into shorter ones, counted in
                            * num_chunks; in a single call the CUDA tensor-core kernel at head_dim 64 and 128, and at
                            * 512 where chunk_len is 1024 or more, gives a chunk every num_chunks-th step of the range
                            * instead of one contiguous run, about as many positions */
    int grouped;           /* 1: each work item owns a KV head and all its Q heads (K/V read once) */
    size_t scratch_bytes;  /* scratch the context needs for this shape */
    const char *path;      /* kernel path: "scalar", "avx2", "avx512", "neon", "cuda-mma", "cuda-vec16",
                            * "cuda-generic" */
} fdec_plan_info;

typedef struct fdec_context fdec_context;

/* Returns default options: threads 0 (all CPUs), cpu_path AUTO, no parallel_for, cuda device 0, default
 * stream. */
FDEC_API fdec_options fdec_default_options(void);

/* Creates a context for `backend`. opts NULL means fdec_default_options(). The CPU backend starts its thread
 * pool here (not per call). On success *out holds the context; on failure *out is NULL. FDEC_EUNSUPPORTED if
 * the backend is not compiled in or no device is present. */
FDEC_API fdec_status fdec_context_create(fdec_backend backend, const fdec_options *opts, fdec_context **out);

/* Destroys a context and its thread pool and scratch. NULL is a no-op. */
FDEC_API void fdec_context_destroy(fdec_context *ctx);

/* Reserves scratch for every call of `layer` with seq_len up to max_seq_len, so that later calls of that
 * size never allocate (on CUDA: can be captured into a CUDA graph). Optional: a call reserves what it needs
 * itself the first time it meets a larger shape. */
FDEC_API fdec_status fdec_context_reserve(fdec_context *ctx, const fdec_layer *layer, uint32_t max_seq_len);

/* Computes decode attention for one query token (see the top of this file).
 *   q    [num_q_heads][head_dim] of layer->q_dtype
 *   k, v the cache, layer->kv_dtype, layout given by the layer's strides and ring
 *   out  [num_q_heads][head_dim] of layer->out_dtype
 *   lse  [num_q_heads] f32, or NULL to skip
 * On the CUDA backend all pointers are device pointers and the call is asynchronous on the context's stream.
 * On sm_90 and newer its kernels are programmatic dependent launches: the first may start while the kernel before
 * it in the stream ends and waits for that kernel's writes before it reads anything; the last lets the next
 * kernel launch early, which matters only to a kernel you launch with programmatic stream serialization, and
 * such a kernel must wait (cudaGridDependencySynchronize) before it reads out or lse, as that attribute requires.
 * On error nothing is written. */
FDEC_API fdec_status fdec_decode(fdec_context *ctx, const fdec_layer *layer, uint32_t seq_len, const void *q,
                                 const void *k, const void *v, void *out, float *lse);

/* Fills *info with the split that fdec_decode would use for this layer and seq_len. Checks the layer like
 * fdec_decode does. */
FDEC_API fdec_status fdec_plan(fdec_context *ctx, const fdec_layer *layer, uint32_t seq_len, fdec_plan_info *info);

/* ---- batches: many sequences, paged caches, several query tokens a sequence ----
 *
 * One call serves a step of a serving engine: num_seqs sequences, each with its own length and 1..FDEC_MAX_Q_LEN new
 * query tokens (speculative decoding verifies a draft of several), from contiguous caches or from a paged cache.
 *
 * Rows. q, out and lse hold one row per query token: the sequences in order, each sequence's tokens in order
 * ([rows][num_q_heads][head_dim], rows = the sum of q_lens). Token i of a sequence with q_len tokens sits at
 * position p = seq_len - q_len + i (its own K/V and those of the tokens before it already written) and attends
 * [lo, p] with lo = window ? max(0, p + 1 - window) : 0: causal among the new tokens. A single fdec_decode is a
 * batch of one sequence and one token.
 *
 * Caches. Within a page (or a sequence's contiguous cache) the layer's kv_pos_stride and kv_head_stride apply, so
 * pages may be [slot][kv_head][dim] or [kv_head][slot][dim]. page_size 0: sequence b's cache starts at
 * k + b * kv_seq_stride (elements), rows as in fdec_decode (a ring too). page_size > 0: position t of sequence b is
 * slot t % page_size of page page_table[b * max_pages + t / page_size], which starts at k + page * kv_page_stride.
 * Page entries of positions a sequence does not attend are never read (they may be -1). A ring with pages is bad
 * input.
 *
 * The K/V of a GQA group are read once per sequence for all its query heads and all its tokens. Batch invariance: a
 * sequence's output bits do not depend on the other sequences of the batch, nor on num_seqs.
 *
 * On the CPU every pointer is a host pointer and every value (lengths, page ids) is checked before anything is
 * written. On CUDA seq_lens, q_lens and page_table are device arrays read by the kernels, so the lengths and pages may
 * change between replays of a captured graph (reserve with fdec_context_reserve_batch for the largest batch first);
 * a sequence whose length, token count or attended page id is bad gets NaN rows and none of its cache is read (a bad
 * token count takes min(q_len, max_q_len) rows). */
#define FDEC_MAX_Q_LEN 16

typedef struct {
    uint32_t num_seqs;
    const uint32_t *seq_lens;   /* [num_seqs]: positions in each sequence's cache, its new tokens included */
    const uint32_t *q_lens;     /* NULL: one query token a sequence; else [num_seqs], 1..max_q_len, <= seq_len */
    uint32_t max_seq_len;       /* bounds seq_lens; with max_q_len it fixes the plan */
    uint32_t max_q_len;         /* bounds q_lens, 1..FDEC_MAX_Q_LEN (0 means 1) */
    size_t kv_seq_stride;       /* page_size 0: elements between the sequences' caches (0 with one sequence) */
    uint32_t page_size;         /* > 0: a paged cache */
    const int32_t *page_table;  /* [num_seqs][max_pages] page ids */
    uint32_t max_pages, num_pages; /* the table's width; pages in the pool (ids must be below) */
    size_t kv_page_stride;      /* elements between pages; 0: page_size * kv_pos_stride */
} fdec_batch;

/* Decode attention for a batch (above): q [rows][num_q_heads][head_dim] of q_dtype, out likewise of out_dtype, lse
 * [rows][num_q_heads] f32 or NULL; k and v the caches' base. On error nothing is written. */
FDEC_API fdec_status fdec_decode_batch(fdec_context *ctx, const fdec_layer *layer, const fdec_batch *batch,
                                       const void *q, const void *k, const void *v, void *out, float *lse);

/* The split a sequence of max_seq_len positions and max_q_len tokens of this batch would use (a shorter sequence
 * takes the first of its chunks), and the scratch the whole batch needs. Reads the batch's bounds alone (num_seqs,
 * max_seq_len, max_q_len, page_size, max_pages, num_pages, strides): its arrays must be given but are not read (on
 * CUDA they may still be host memory, or not yet filled). */
FDEC_API fdec_status fdec_plan_batch(fdec_context *ctx, const fdec_layer *layer, const fdec_batch *batch,
                                     fdec_plan_info *info);

/* Reserves scratch for every batch of this layer within the batch's bounds (num_seqs, max_seq_len, max_q_len; its
 * arrays must be given but are not read, as for fdec_plan_batch). */
FDEC_API fdec_status fdec_context_reserve_batch(fdec_context *ctx, const fdec_layer *layer, const fdec_batch *batch);

/* Where fdec_kv_write puts new tokens' K/V rows: vLLM's slot mapping over a paged or a contiguous cache. */
typedef struct {
    uint32_t num_tokens;    /* rows to write */
    const int64_t *slots;   /* [num_tokens]: token i's slot; -1 skips the token (padding) */
    uint64_t num_slots;     /* slots the cache holds: every slot must be below */
    uint32_t page_size;     /* 0: slot s is row s of the cache (kv_pos_stride apart); > 0: slot s is slot s % page_size
                               of page s / page_size */
    size_t kv_page_stride;  /* elements between pages; 0: page_size * kv_pos_stride */
    fdec_dtype src_dtype;   /* of k_src and v_src */
} fdec_kv_slots;

/* Writes num_tokens new tokens' K and V rows, k_src and v_src [num_tokens][num_kv_heads][head_dim] dense (f32, f16 or
 * bf16), into the caches k and v (the layer's kv_dtype and strides) at the slots, converting the type: round to
 * nearest even (fp8 saturating at its largest finite value), Q8_0 and Q4_0 quantised block by block as ggml's
 * reference quantiser does (a block with a NaN gets a NaN scale, so it reads back NaN). The layer's fp8 scales are not applied (k_src is written as it is). On the CPU every slot
 * is checked before anything is written. On CUDA the slots are a device array read by the kernel: a token whose slot
 * is outside the cache writes nothing. */
FDEC_API fdec_status fdec_kv_write(fdec_context *ctx, const fdec_layer *layer, const fdec_kv_slots *slots,
                                   const void *k_src, const void *v_src, void *k, void *v);

/* Merges n partial results of the same query over disjoint position ranges (e.g. shards of a cache held by
 * different devices, each computed with fdec_decode(..., lse)) into the result over their union, exactly:
 *     M = max_i lse_i,  w_i = exp(lse_i - M),  out = sum_i w_i out_i / sum_i w_i,  lse = M + log(sum_i w_i)
 *   outs[i]  [num_heads][head_dim] of `dtype` (the partial outputs); lses[i] [num_heads] f32
 *   out      [num_heads][head_dim] of `dtype`; lse [num_heads] f32 or NULL
 * A shard with lse = -inf is empty and ignored, whatever its out holds; if every shard is empty for a head,
 * its out is 0 and its lse -inf. A NaN in a head's inputs makes the head NaN. out may alias outs[0].
 * On the CUDA backend every pointer (outs[i], lses[i], out, lse) is a device pointer and the call is
 * asynchronous on the context's stream. */
FDEC_API fdec_status fdec_merge(fdec_context *ctx, uint32_t n, uint32_t num_heads, uint32_t head_dim,
                                fdec_dtype dtype, const void *const *outs, const float *const *lses, void *out,
                                float *lse);

/* The library's version as "MAJOR.MINOR.PATCH", of the library linked at run time (the macros above are the
 * header's). */
FDEC_API const char *fdec_version(void);

/* A static English name for a status, e.g. "invalid argument". */
FDEC_API const char *fdec_status_string(fdec_status status);

/* This thread's message for its last failed call; "" if none failed yet. Valid until this thread's next call. */
FDEC_API const char *fdec_last_error(void);

/* 1 if the backend is compiled into this build (CUDA may still find no device at context creation). */
FDEC_API int fdec_backend_available(fdec_backend backend);

#ifdef __cplusplus
}
#endif
#endif /* FLASHDEC_H */

/* flashdec_nccl.h — sequence-parallel decode attention over several GPUs (companion library
 * libflashdec_nccl, which links NCCL; the core libflashdec does not).
 *
 * A sequence's KV cache is cut by position into contiguous shards, one per GPU and process ("rank"). For each
 * new token every rank computes the attention of q over the part of its shard that the layer attends (its
 * partial (out, lse), with fdec_decode on its CUDA context), the ranks exchange the partials with one NCCL
 * all-gather, and every rank merges them with fdec_merge, so each ends with the result over the whole
 * sequence (flashdec.h's merge: exact up to rounding). A rank whose shard holds none of the attended positions
 * (a sliding window that ends elsewhere) reads no K/V and sends an empty partial (lse = -inf).
 *
 * Use, one process per GPU (rank r on device r; see tools/flashdec.c `bench --gpus` for a complete launcher
 * that forks one process per GPU and passes the id down a pipe):
 *
 *     unsigned char id[FDEC_SP_ID_BYTES];
 *     if (rank == 0) fdec_sp_unique_id(id);        // then send id to every rank (pipe, socket, file, MPI)
 *     fdec_options o = fdec_default_options(); o.cuda_device = rank; o.cuda_stream = stream;
 *     fdec_context_create(FDEC_BACKEND_CUDA, &o, &ctx);
 *     fdec_sp_create(ctx, stream, nranks, rank, id, &sp);
 *     per token: fdec_sp_decode(sp, &layer, seq_len, shard_lo, shard_len, q, k, v, out, lse);
 *
 * Every rank must call fdec_sp_decode for every token with the same layer, seq_len and q (it is a collective
 * call). Shards may have any lengths (zero too) and need not follow rank order, but together they must cover
 * the attended positions exactly once. Keep NCCL_NVLS_ENABLE=0 where the machine's owners ask for it.
 */
#ifndef FLASHDEC_NCCL_H
#define FLASHDEC_NCCL_H

#include "flashdec.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FDEC_SP_ID_BYTES 128 /* the size of an NCCL unique id */

typedef struct fdec_sp fdec_sp;

/* Makes a new NCCL unique id (on one rank; every rank of the group passes the same id to fdec_sp_create). */
FDEC_API fdec_status fdec_sp_unique_id(unsigned char id[FDEC_SP_ID_BYTES]);

/* Joins the group of `nranks` ranks as `rank` (collective: returns when every rank has joined). `ctx` is a CUDA
 * context of this rank's device and `stream` the cudaStream_t it was created with (NULL: the default stream);
 * the handle uses both and does not own them. On failure *out is NULL. */
FDEC_API fdec_status fdec_sp_create(fdec_context *ctx, void *stream, int nranks, int rank,
                                    const unsigned char id[FDEC_SP_ID_BYTES], fdec_sp **out);

/* Leaves the group and frees the handle's buffers. NULL is a no-op. */
FDEC_API void fdec_sp_destroy(fdec_sp *sp);

/* One token's attention over the whole sequence, of which this rank holds positions
 * [shard_lo, shard_lo + shard_len): k and v point to the row of position shard_lo in the layer's layout
 * (ring_capacity must be 0: a shard is a contiguous run of positions). The layer attends
 * [seq_len - window, seq_len) as in fdec_decode. q, out and lse (may be NULL) are device pointers of this
 * rank, the same shapes as in fdec_decode; every rank gets the whole result. Asynchronous on the stream.
 * For 16-bit out the partials are rounded to the out dtype before the merge (one extra rounding).
 * The logit variants work as in fdec_decode (sinks and alibi_slopes device pointers): the rank whose shard holds
 * position seq_len - 1 counts the sinks, and every rank counts ALiBi's distances from that position. */
FDEC_API fdec_status fdec_sp_decode(fdec_sp *sp, const fdec_layer *layer, uint32_t seq_len, uint32_t shard_lo,
                                    uint32_t shard_len, const void *q, const void *k, const void *v, void *out,
                                    float *lse);

#ifdef __cplusplus
}
#endif
#endif /* FLASHDEC_NCCL_H */

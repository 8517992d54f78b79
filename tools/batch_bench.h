/* batch_bench.h — `flashdec bench --batch B` (batch_bench.c). */
#ifndef FDEC_BATCH_BENCH_H
#define FDEC_BATCH_BENCH_H

#include "../src/internal.h"

typedef struct {
    const char *name;         /* the preset */
    fdec_layer layer;         /* its layer, dtypes and variants set */
    uint32_t batch, len_lo, len_hi, q_len;
    const uint32_t *pages;    /* page sizes to time side by side (0: contiguous caches) */
    int npages;
    const uint32_t *threads;
    int nthreads, reps;
    size_t rotate_bytes, bw_bytes;
    int cuda;                 /* on the CUDA backend: device copies, CUDA-graph replays, ceiling cuda_bw */
    double cuda_bw;           /* GB/s */
} fd_batch_args;

/* Prints one line per (threads, page size) (on CUDA, one per page size): time per step, GB/s of K/V read, the read ceiling and its share. Every
 * layout's output is compared with the first's (the same batch: the same bytes). 0, or 1 on a failure. */
int fd_batch_bench(const fd_batch_args *a);
void fd_batch_bench_header(void);

#endif

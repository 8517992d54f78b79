/* sp_bench.h — `flashdec bench --gpus N` (sp_bench.c). */
#ifndef FDEC_SP_BENCH_H
#define FDEC_SP_BENCH_H

#include "../src/internal.h"

typedef struct {
    const char *name;
    uint32_t D, H, G, window;
    float scale;
    const uint32_t *ctx;
    int nctx, gpus, reps;
    float softcap;    /* the logit variants (0: off): the sharded result must match the single-GPU one with them */
    int sinks, alibi;
} sp_bench_args;

/* Runs the multi-GPU table (one line per context length); `self` is argv[0], to find libflashdec_nccl.so
 * beside the tool. Returns 0, 1 (a rank failed or the results differ) or 3 (it cannot run here: no companion
 * library or too few GPUs; the message is printed). */
int fd_sp_bench(const sp_bench_args *b, const char *self);

#endif

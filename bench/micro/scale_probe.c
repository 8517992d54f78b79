/* scale_probe.c — does the size of the logits change the CPU kernel's speed? (bench/NOTES.md, CPU log row 80 (d))
 * A checker or an engine may call with any q and scale. With large logits most softmax weights are tiny (down to
 * e^-87, the smallest normal float, where vexp clamps), and their products with V, o's rescales and the Strassen
 * tile's weight combinations can be subnormal, which some FPUs handle slowly. This times one cache, kept in the
 * caches (no DRAM in the way), with q scaled by amp = 1, 10, 100 and 1000 (fd_problem_make: largest |logit| from about
 * 3 to several thousand), rounds alternated, and prints the median us a call of each and its largest |logit|.
 *
 *   make && cc -O2 -Iinclude -Itools bench/micro/scale_probe.c tools/bench_util.c -Lbuild -lflashdec \
 *      -Wl,-rpath,$PWD/build -lpthread -lm -o /tmp/scale_probe && /tmp/scale_probe 512 16 2 2048 1 100
 */
#include "bench_util.h"
#include "flashdec.h"

#include <stdio.h>
#include <stdlib.h>

#define NAMP 4
#define ROUNDS 3

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s D H G L threads calls\n", argv[0]);
        return 2;
    }
    fdec_layer layer = {0};
    layer.head_dim = (uint32_t)atoi(argv[1]);
    layer.num_q_heads = (uint32_t)atoi(argv[2]);
    layer.num_kv_heads = (uint32_t)atoi(argv[3]);
    layer.q_dtype = FDEC_F32, layer.kv_dtype = FDEC_F16, layer.out_dtype = FDEC_F32;
    const uint32_t L = (uint32_t)atoi(argv[4]), threads = (uint32_t)atoi(argv[5]);
    const int calls = atoi(argv[6]);
    const float amps[NAMP] = {1, 10, 100, 1000};
    if (calls < 1) return 2;
    fd_problem pr[NAMP];
    for (int a = 0; a < NAMP; a++) {
        fd_rng rng = {12345}; /* the same K and V for every amp; only q's size differs */
        if (fd_problem_make(&pr[a], &layer, L, FD_DENSE, amps[a], &rng)) {
            fprintf(stderr, "fd_problem_make failed\n");
            return 1;
        }
    }
    fdec_options o = fdec_default_options();
    o.threads = threads;
    fdec_context *ctx = NULL;
    if (fdec_context_create(FDEC_BACKEND_CPU, &o, &ctx) != FDEC_OK) {
        fprintf(stderr, "context: %s\n", fdec_last_error());
        return 1;
    }
    float *out = malloc((size_t)layer.num_q_heads * layer.head_dim * sizeof(float));
    double *t = malloc((size_t)calls * sizeof(double)), med[ROUNDS][NAMP];
    if (!out || !t) return 1;
    for (int r = 0; r < ROUNDS; r++)
        for (int a = 0; a < NAMP; a++) {
            for (int c = 0; c < calls; c++) {
                const double t0 = fd_now();
                if (fdec_decode(ctx, &layer, L, pr[a].q, pr[a].k, pr[a].v, out, NULL) != FDEC_OK) {
                    fprintf(stderr, "decode: %s\n", fdec_last_error());
                    return 1;
                }
                t[c] = fd_now() - t0;
            }
            med[r][a] = fd_median(t, calls) * 1e6;
        }
    for (int a = 0; a < NAMP; a++) {
        double *ref = malloc((size_t)layer.num_q_heads * layer.head_dim * sizeof(double));
        double *lse = malloc(layer.num_q_heads * sizeof(double));
        if (!ref || !lse) return 1;
        fd_reference(&pr[a], ref, lse);
        printf("amp %6.0f  largest |logit| %9.1f  us a call:", amps[a], pr[a].max_logit);
        for (int r = 0; r < ROUNDS; r++) printf(" %8.1f", med[r][a]);
        printf("\n");
        free(ref), free(lse);
        fd_problem_free(&pr[a]);
    }
    free(out), free(t);
    fdec_context_destroy(ctx);
    return 0;
}

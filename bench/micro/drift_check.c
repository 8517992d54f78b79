/* drift_check.c — a fuzz input (fuzz/fuzz_input.h's format, e.g. the drift inputs of fuzz/corpus and fuzz/findings)
 * decoded on the CPU backend at the given thread counts, against the float64 reference (src/ref.c): the first output
 * element and the worst absolute error, with its share of that output (bench/results/cpu-double-totals-s30.txt).
 *   cc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Ifuzz bench/micro/drift_check.c build/libflashdec.a -lm -pthread \
 *      -o /tmp/drift_check      (with CUDA=1 builds, add -L$CUDA_HOME/lib64 -lcudart -lstdc++)
 *   /tmp/drift_check fuzz/findings/cuda-drift-d512-h16-g2-f16-131072 1 2 */
#include "flashdec.h"
#include "../src/internal.h"
#include "fuzz_input.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 3) return fprintf(stderr, "usage: %s FUZZ_INPUT THREADS...\n", argv[0]), 2;
    fuzz_max_kv = 300000000;
    static uint8_t buf[256];
    FILE *f = fopen(argv[1], "rb");
    if (!f) return perror(argv[1]), 1;
    const size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    reader r = {buf, n};
    fuzz_case c;
    if (!fuzz_case_read(&r, &c) || !c.finite) return fprintf(stderr, "%s: not a finite case this reads\n", argv[1]), 1;
    const fdec_layer L = c.L;
    uint8_t *q = malloc(c.qe * c.qes), *k = malloc(c.kv_elems * c.kes), *v = malloc(c.kv_elems * c.kes);
    const size_t no = (size_t)L.num_q_heads * L.head_dim;
    double *ref = malloc(sizeof(double) * no);
    float *out = malloc(sizeof(float) * no);
    fdec_problem pr;
    if (!q || !k || !v || !ref || !out || fdec_problem_init(&L, c.seq_len, &pr) != FDEC_OK || L.out_dtype != FDEC_F32)
        return fprintf(stderr, "%s: cannot run (memory, or not an f32-out layer)\n", argv[1]), 1;
    fuzz_fill_inputs(&r, &c, q, k, v);
    fdec_reference(&pr, q, k, v, ref, NULL);
    for (int ti = 2; ti < argc; ti++) {
        fdec_options o = fdec_default_options();
        o.threads = atoi(argv[ti]);
        fdec_context *ctx;
        fdec_plan_info info;
        if (fdec_context_create(FDEC_BACKEND_CPU, &o, &ctx) != FDEC_OK || fdec_plan(ctx, &L, c.seq_len, &info) ||
            fdec_decode(ctx, &L, c.seq_len, q, k, v, out, NULL))
            return fprintf(stderr, "%s\n", fdec_last_error()), 1;
        double worst = 0;
        size_t wi = 0;
        for (size_t i = 0; i < no; i++)
            if (fabs(out[i] - ref[i]) > worst) worst = fabs(out[i] - ref[i]), wi = i;
        printf("threads %2d: chunks %u of %u: out[0] %.9g float64 %.9g; worst |err| %.3g at %zu (rel %.3g)\n",
               o.threads, info.num_chunks, info.chunk_len, out[0], ref[0], worst, wi, worst / fabs(ref[wi]));
        fdec_context_destroy(ctx);
    }
    free(q), free(k), free(v), free(ref), free(out);
    return 0;
}

/* decode_loop.c — fdec_decode of one f16 cache over and over on the CPU backend: its in-cache speed (the cache
 * stays in L2/L3 when it is small enough), without flashdec bench's cache rotation, ceilings and reference check.
 * Used for the CPU log rows measured in L3 (bench/NOTES.md) through bench/micro/cpu_variants.sh.
 *
 *   cc -O2 -Iinclude bench/micro/decode_loop.c -Lbuild -lflashdec -Wl,-rpath,$PWD/build -lpthread -lm \
 *      -o build/decode_loop
 *   build/decode_loop D H G L threads calls     e.g. 64 32 8 4096 1 300 (LFM2 geometry, 4k positions)
 *
 * Prints the best of 5 rounds of `calls` calls: us per call and K/V GB/s. */
#include "flashdec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s head_dim q_heads kv_heads seq_len threads calls\n", argv[0]);
        return 2;
    }
    const uint32_t D = (uint32_t)atoi(argv[1]), H = (uint32_t)atoi(argv[2]), G = (uint32_t)atoi(argv[3]),
                   L = (uint32_t)atoi(argv[4]), threads = (uint32_t)atoi(argv[5]);
    const int calls = atoi(argv[6]);
    fdec_layer ly = {0};
    ly.head_dim = D, ly.num_q_heads = H, ly.num_kv_heads = G;
    ly.q_dtype = FDEC_F32, ly.kv_dtype = FDEC_F16, ly.out_dtype = FDEC_F32;
    fdec_options o = fdec_default_options();
    o.threads = threads;
    fdec_context *c;
    if (fdec_context_create(FDEC_BACKEND_CPU, &o, &c)) return fprintf(stderr, "%s\n", fdec_last_error()), 1;
    const size_t n = (size_t)L * G * D;
    /* 64 bytes of room past the rows: bench/patches/cpu-ablation.patch's ABL_NOCVT reads f16 rows as f32 words */
    uint16_t *k = malloc(n * 2 + 64), *v = malloc(n * 2 + 64);
    float *q = malloc((size_t)H * D * 4), *out = malloc((size_t)H * D * 4);
    if (!k || !v || !q || !out) return fprintf(stderr, "out of memory\n"), 1;
    srand(1);
    for (size_t i = 0; i < n; i++) { /* f16 values in [1, 2) for K, [0.5, 1) for V */
        k[i] = (uint16_t)(0x3c00 | (rand() & 0x3ff));
        v[i] = (uint16_t)(0x3800 | (rand() & 0x3ff));
    }
    for (size_t i = 0; i < (size_t)H * D; i++) q[i] = (float)(rand() % 1000) / 1000.f;
    for (int i = 0; i < 10; i++) /* warm up: pool, scratch, caches */
        if (fdec_decode(c, &ly, L, q, k, v, out, NULL)) return fprintf(stderr, "%s\n", fdec_last_error()), 1;
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t = now();
        for (int i = 0; i < calls; i++) fdec_decode(c, &ly, L, q, k, v, out, NULL);
        t = (now() - t) / calls;
        if (t < best) best = t;
    }
    printf("D%u H%u G%u L%u threads %u: %.1f us, %.1f GB/s\n", D, H, G, L, threads, best * 1e6,
           2.0 * n * 2 / best / 1e9);
    fdec_context_destroy(c);
    free(k), free(v), free(q), free(out);
    return 0;
}

/* test_main.c — the test suite, one runner. Every kernel result is compared with the float64 reference on
 * fresh random inputs; outputs are poisoned first and guarded on both sides; K/V outside the attended range
 * is NaN, so a read out of range shows. The last line is "N passed, N failed".
 *
 * With --cuda every context is a CUDA one and inputs and outputs live on the device (make test-cuda); the
 * same checks run, plus CUDA graph capture and replay.
 *
 *   build/tests/run_tests [--cuda] [--seed N] [--configs N] [--readme-example PATH] [--quick] [--short]
 * --quick: a sweep of 100 configurations; --short: 30, and none of the long calls (for runs under emulation).
 */
#include "harness.h"

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* line by line, also into a pipe */
    uint64_t seed = 0x5eed;
    int configs = 1100;
    const char *readme[4] = {NULL};
    int nreadme = 0;
    int short_run = 0; /* --short: the fast subset (emulated runs): no long calls, a small sweep */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--configs") && i + 1 < argc) configs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--readme-example") && i + 1 < argc && nreadme < 4) readme[nreadme++] = argv[++i];
        else if (!strcmp(argv[i], "--quick")) configs = 100;
        else if (!strcmp(argv[i], "--short")) configs = 30, short_run = 1;
        else if (!strcmp(argv[i], "--cuda")) g_cuda = 1;
        else {
            fprintf(stderr, "run_tests: unknown argument '%s' (--cuda, --seed N, --configs N, --quick, --short, "
                            "--readme-example PATH)\n", argv[i]);
            return 2;
        }
    }
    if (g_cuda && !fd_dev_available()) {
        printf("CUDA tests: skipped (%s)\n", fdec_backend_available(FDEC_BACKEND_CUDA) ? "no CUDA device here"
                                                                                     : "this build has no CUDA backend");
        printf("0 passed, 0 failed\n");
        return 0;
    }
    double t0 = fd_now();
    if (g_cuda) g_stream = fd_dev_stream_create();
    path_ctx pc[8];
    int npc = make_path_contexts(pc);
    printf("backend %s; contexts:", g_cuda ? fd_dev_name() : "cpu");
    for (int i = 0; i < npc; i++) printf(" %s", pc[i].name);
    printf("; seed %llu\n", (unsigned long long)seed);
/* each group's time after its own lines, so that a slow step shows where it is */
#define STEP(call)                                                                                              \
    do {                                                                                                        \
        const double t_ = fd_now();                                                                             \
        call;                                                                                                   \
        printf("  [%s: %.1f s]\n", #call, fd_now() - t_);                                                        \
    } while (0)
    STEP(test_version());
    if (!g_cuda) STEP(test_cuda_absent());
    STEP(test_bad_input());
    STEP(test_decode_cases(pc, npc, short_run));
    STEP(test_variant_cases(pc, npc, short_run));
    if (!short_run) STEP(test_drift(pc, npc));
    STEP(test_numerics(pc, npc));
    STEP(test_nonfinite(pc, npc));
    STEP(test_contract(pc, npc));
    STEP(test_merge());
    STEP(test_split_bound());
    if (!g_cuda) STEP(test_conversions());
    if (g_cuda) {
        STEP(test_cuda_graph());
        STEP(test_cuda_reserve_bound());
    } else {
        STEP(test_determinism_threads());
        if (!short_run) STEP(test_work_stealing());
        STEP(test_concurrency());
    }
    STEP(test_quant_blocks(pc, npc));
    STEP(test_quant_nmse(pc, npc));
    STEP(test_quant_scales(pc, npc));
    STEP(test_batch_bad());
    STEP(test_kv_write(pc, npc));
    STEP(test_batch_device_checks(pc));
    STEP(test_batch_graph());
    STEP(test_batch(pc, npc, configs / 4 + 20, seed));
    STEP(test_sweep(pc, npc, configs, seed));
    for (int i = 0; i < nreadme; i++) test_readme_example(readme[i]);
    if (!g_cuda)
        printf("CUDA tests: skipped here (%s)\n", fdec_backend_available(FDEC_BACKEND_CUDA)
                                                     ? "CUDA compiled in; `make test-cuda` runs them on a GPU machine"
                                                     : "this build has no CUDA backend");
    for (int i = 0; i < npc; i++) fdec_context_destroy(pc[i].ctx);
    if (g_cuda) fd_dev_stream_destroy(g_stream);
    printf("time %.1f s\n", fd_now() - t0);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}


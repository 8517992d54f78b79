/* test_decode.c — the decode against the float64 reference, on every context: one table of fixed cases (model
 * shapes, positions at the end of the 32-bit range, long sums, the merge kernels' limits) and the random sweep. A
 * new shape or feature is a row here. */
#include "harness.h"

#define M32 UINT32_MAX

typedef struct {
    const char *name;
    uint32_t D, H, G, window, ring;
    fdec_dtype kv;
    float scale; /* 0: 1/sqrt(head_dim) */
    uint32_t seq_len;
    float amp;     /* size of q's elements */
    uint64_t seed;
} decode_case;

static const decode_case CASES[] = {
    /* the models' shapes */
    {"gemma4 sliding 256/16/8 w1024 ring L=5000", 256, 16, 8, 1024, 1024, FDEC_F16, 1.0f, 5000, 0.1f, 11},
    {"gemma4 sliding 256/16/8 w1024 ring L=700", 256, 16, 8, 1024, 1024, FDEC_F16, 1.0f, 700, 0.1f, 12},
    {"gemma4 full 512/16/2 L=3000", 512, 16, 2, 0, 0, FDEC_F16, 1.0f, 3000, 0.05f, 13},
    {"lfm2 64/32/8 (group 4) L=4096", 64, 32, 8, 0, 0, FDEC_F16, 0, 4096, 1.0f, 14},
    {"llama3-8b 128/32/8 L=2048 bf16", 128, 32, 8, 0, 0, FDEC_BF16, 0, 2048, 1.0f, 15},
    /* long bf16 calls of the tensor-core kernel at head_dim 64 and 128: a build whose ptxas dropped the copies' L2
     * policy failed bf16 Llama-3-8B 32k on the H200 and no shorter case (tools/sass_check.py finds that hazard) */
    {"llama3-8b 128/32/8 L=32768 bf16", 128, 32, 8, 0, 0, FDEC_BF16, 0, 32768, 1.0f, 16},
    {"lfm2 64/32/8 L=32768 bf16", 64, 32, 8, 0, 0, FDEC_BF16, 0, 32768, 1.0f, 17},
    /* Positions at the end of the 32-bit range (seq_len up to 2^32 - 1, in a ring): the last chunk of a split ends
     * past 2^32. The CUDA kernels once worked the chunk's end out in 32 bits, so that it wrapped and the chunk's
     * positions were left out (fuzz_decode_cuda found it at 10/2/1, window 110, seq_len 4294967295). The shapes take
     * the SIMT kernel (odd head_dim, f32; every head_dim in the cuda/simt context) and the tensor-core kernel (64 to
     * 512; its chunks at 64 and 128 are position-strided and end at seq_len); in the last two the tensor-core
     * kernel's last chunk too ends past 2^32. */
    {"32-bit end: 10/2/1 w110 ring256 f16", 10, 2, 1, 110, 256, FDEC_F16, 0, M32, 1.0f, 21},
    {"32-bit end: 9/4/2 w333 ring400 f32", 9, 4, 2, 333, 400, FDEC_F32, 0, M32 - 5, 1.0f, 22},
    {"32-bit end: 64/8/2 w1000 ring1024 f16", 64, 8, 2, 1000, 1024, FDEC_F16, 0, M32 - 3, 1.0f, 23},
    {"32-bit end: 128/32/8 w700 ring1024 bf16", 128, 32, 8, 700, 1024, FDEC_BF16, 0, M32, 1.0f, 24},
    {"32-bit end: 256/16/8 w1000 ring1024 f16", 256, 16, 8, 1000, 1024, FDEC_F16, 1.0f, M32, 0.1f, 25},
    {"32-bit end: 512/16/2 w3000 ring4096 f16", 512, 16, 2, 3000, 4096, FDEC_F16, 1.0f, M32, 0.05f, 26},
    /* Long chunks for the CUDA SIMT kernel: in each call a lane group sums more than FDEC_CUDA_SUM_MIN_TERMS (128)
     * rows of its chunk, so the kernel adds its block sums (simt.cuh). On an H200 the split gives 1/28/1 19 chunks of
     * 3,616 positions (904 rows a lane group), 128/8/1 128 chunks of 1,024 (256) and 100/32/8 17 chunks of 1,952
     * (488). */
    {"long sums 1/28/1 L=68244 f32", 1, 28, 1, 0, 0, FDEC_F32, 0, 68244, 1.0f, 41},
    {"long sums 128/8/1 L=131072 f32", 128, 8, 1, 0, 0, FDEC_F32, 0, 131072, 1.0f, 42},
    {"long sums 100/32/8 L=32768 f16", 100, 32, 8, 0, 0, FDEC_F16, 0, 32768, 1.0f, 43},
    /* Lengths whose CUDA split (132 SMs, one KV head, one head tile: min(264, L / 64) chunks) lands on each side of
     * the merge kernels' limits: 16 and 17 chunks (fdec_chunk_merge_small<16> / <32>), 32 and 33 (<32> / <64>), 64
     * and 65 (<64> / the split merge), 256 (the most). */
    {"merge paths 128/8/1 L=1024", 128, 8, 1, 0, 0, FDEC_F16, 0, 1024, 1.0f, 30},
    {"merge paths 128/8/1 L=1088", 128, 8, 1, 0, 0, FDEC_F16, 0, 1088, 1.0f, 31},
    {"merge paths 128/8/1 L=2048", 128, 8, 1, 0, 0, FDEC_F16, 0, 2048, 1.0f, 32},
    {"merge paths 128/8/1 L=2112", 128, 8, 1, 0, 0, FDEC_F16, 0, 2112, 1.0f, 33},
    {"merge paths 128/8/1 L=4096", 128, 8, 1, 0, 0, FDEC_F16, 0, 4096, 1.0f, 34},
    {"merge paths 128/8/1 L=4160", 128, 8, 1, 0, 0, FDEC_F16, 0, 4160, 1.0f, 35},
    {"merge paths 128/8/1 L=16384", 128, 8, 1, 0, 0, FDEC_F16, 0, 16384, 1.0f, 36},
};

void test_decode_cases(path_ctx *pc, int npc, int short_run) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const decode_case *c = &CASES[i];
        /* short: no call that attends to more than 8,192 positions */
        const uint64_t attended = c->window && c->window < c->seq_len ? c->window : c->seq_len;
        if (short_run && attended > 8192) continue;
        one_case(pc, npc, c->name, layer_of(c->D, c->H, c->G, c->window, c->ring, c->kv, c->scale), c->seq_len,
                 c->amp, c->seed);
    }
}

/* ---- the logit variants (flashdec.h, "Logit variants") ---- */

typedef struct {
    const char *name;
    uint32_t D, H, G, window, ring;
    fdec_dtype kv;
    float scale;
    uint32_t seq_len;
    float amp;
    uint64_t seed;
    fd_variants v; /* softcap, sinks (0 none, 1 random, 2 sink_value), sink_value, alibi, alibi_scale */
} variant_case;

#define NINF (-INFINITY)
static const variant_case VARIANT_CASES[] = {
    /* soft-caps small enough to bite: logits of up to ~30 capped at 1.5 and 5 */
    {"softcap 1.5 llama 128/32/8 L=3000", 128, 32, 8, 0, 0, FDEC_F16, 1.0f, 3000, 1.0f, 101, {1.5f, 0, 0, 0, 0}},
    {"softcap 5 gemma4 256/16/8 w1024 ring", 256, 16, 8, 1024, 1024, FDEC_BF16, 1.0f, 5000, 1.0f, 102, {5, 0, 0, 0, 0}},
    {"softcap 50 gemma2 256/16/8 L=2000", 256, 16, 8, 0, 0, FDEC_F16, 0, 2000, 1.0f, 103, {50, 0, 0, 0, 0}},
    {"softcap 2 odd 33/6/3 L=999 f32", 33, 6, 3, 0, 0, FDEC_F32, 1.0f, 999, 1.0f, 104, {2, 0, 0, 0, 0}},
    /* a cap below 1 / FLT_MAX: its reciprocal overflows (the fuzzer found 0 x inf there) */
    {"softcap 1.8e-39 45/1/1 w48", 45, 1, 1, 48, 0, FDEC_F16, 0, 35, 1.0f, 105, {1.8e-39f, 0, 0, 1, 1.0f}},
    /* sinks: none (-inf), random, one that outweighs every position, the gpt-oss geometry (64/64/8, window 128) */
    {"sinks -inf = plain 64/32/8 L=1500", 64, 32, 8, 0, 0, FDEC_F16, 0, 1500, 1.0f, 111, {0, 2, NINF, 0, 0}},
    {"sinks random gpt-oss 64/64/8 w128", 64, 64, 8, 128, 0, FDEC_BF16, 0, 4000, 1.0f, 112, {0, 1, 0, 0, 0}},
    {"sinks random gpt-oss 64/64/8 full", 64, 64, 8, 0, 0, FDEC_BF16, 0, 6000, 1.0f, 113, {0, 1, 0, 0, 0}},
    {"sinks dominate 128/8/1 L=2112", 128, 8, 1, 0, 0, FDEC_F16, 0, 2112, 1.0f, 114, {0, 2, 40.0f, 0, 0}},
    {"sinks random 512/16/2 L=3000", 512, 16, 2, 0, 0, FDEC_F16, 1.0f, 3000, 0.05f, 115, {0, 1, 0, 0, 0}},
    {"sinks random 7/12/4 L=300 f32", 7, 12, 4, 0, 0, FDEC_F32, 0, 300, 1.0f, 116, {0, 1, 0, 0, 0}},
    /* ALiBi: full, windows, a ring wrapped many times, the end of the 32-bit range, slopes that reach far back */
    {"alibi bloom 128/32/32 L=2048", 128, 32, 32, 0, 0, FDEC_F16, 0, 2048, 1.0f, 121, {0, 0, 0, 1, 1.0f}},
    {"alibi weak 128/32/8 L=16384", 128, 32, 8, 0, 0, FDEC_F16, 0, 16384, 1.0f, 122, {0, 0, 0, 1, 0.001f}},
    {"alibi 64/8/2 w1000 ring1024", 64, 8, 2, 1000, 1024, FDEC_F16, 0, 1024 * 37 + 5, 1.0f, 123, {0, 0, 0, 1, 0.01f}},
    {"alibi 32-bit end 128/32/8 w700 ring", 128, 32, 8, 700, 1024, FDEC_BF16, 0, M32, 1.0f, 124, {0, 0, 0, 1, 0.01f}},
    {"alibi 100/10/5 w333 L=4000 f32", 100, 10, 5, 333, 0, FDEC_F32, 0, 4000, 1.0f, 125, {0, 0, 0, 1, 0.05f}},
    /* all three at once */
    {"all llama 128/32/8 L=4160", 128, 32, 8, 0, 0, FDEC_F16, 1.0f, 4160, 1.0f, 131, {3, 1, 0, 1, 0.01f}},
    {"all gemma4 256/16/8 w1024 ring", 256, 16, 8, 1024, 1024, FDEC_F16, 1.0f, 77777, 0.3f, 132, {20, 1, 0, 1, 0.1f}},
    {"all 512/16/2 L=9000 bf16", 512, 16, 2, 0, 0, FDEC_BF16, 1.0f, 9000, 0.05f, 133, {10, 1, 0, 1, 0.002f}},
    {"all odd 65/15/5 w50 L=700", 65, 15, 5, 50, 0, FDEC_F16, 0, 700, 1.0f, 134, {4, 1, 0, 1, 0.3f}},
};

void test_variant_cases(path_ctx *pc, int npc, int short_run) {
    for (size_t i = 0; i < sizeof VARIANT_CASES / sizeof VARIANT_CASES[0]; i++) {
        const variant_case *c = &VARIANT_CASES[i];
        const uint64_t attended = c->window && c->window < c->seq_len ? c->window : c->seq_len;
        if (short_run && attended > 8192) continue;
        one_case_variants(pc, npc, c->name, layer_of(c->D, c->H, c->G, c->window, c->ring, c->kv, c->scale),
                          c->seq_len, c->amp, c->seed, &c->v);
    }
}

/* ---- 1. the randomized sweep ---- */

void test_sweep(path_ctx *pc, int npc, int configs, uint64_t seed) {
    fd_rng r = {seed};
    int done = 0;
    double worst = 0;
    char worst_desc[256] = "";
    for (int i = 0; i < configs; i++) {
        fdec_layer L;
        uint32_t seq_len;
        fd_layout layout;
        fd_random_config(&r, &L, &seq_len, &layout);
        fd_problem pr;
        fd_variants var;
        fd_random_variants(&r, &var);
        if (fd_problem_make(&pr, &L, seq_len, layout, 1.0f, &r) || fd_problem_set_variants(&pr, &var, &r)) {
            check(0, "sweep config %d could not be built: %s", i, fdec_last_error());
            fd_problem_free(&pr);
            continue;
        }
        double *ref = malloc(sizeof(double) * pr.p.H * pr.p.D), *ref_lse = malloc(sizeof(double) * pr.p.H);
        fd_reference(&pr, ref, ref_lse);
        inputs in;
        if (inputs_make(&in, &pr)) check(0, "sweep config %d: inputs could not be copied to the device", i);
        else
            for (int c = 0; c < npc; c++) {
                double e = run_and_check(pc[c].ctx, pc[c].name, &pr, &in, ref, ref_lse, (int)(fd_rand(&r) % 5) != 0);
                if (e / fd_tolerance(&pr) > worst) {
                    worst = e / fd_tolerance(&pr);
                    describe(&pr, worst_desc, sizeof worst_desc);
                }
            }
        inputs_free(&in);
        free(ref);
        free(ref_lse);
        fd_problem_free(&pr);
        done++;
    }
    printf("sweep: %d random configurations x %d contexts, worst error %.2f of tolerance (%s)\n", done, npc, worst,
           worst_desc);
}


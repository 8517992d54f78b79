/* llamacpp_peer.c — flashdec's batch decode against llama.cpp's CPU ggml_flash_attn_ext on the same batch, in one
 * process, the two alternated call by call (make bench-peer-cpu builds ggml from llama-cpp-python's source).
 *
 * llama.cpp's way: one unified cache of every sequence's cells ([cell][kv_head][dim]: f16, or ggml's q8_0 / q4_0
 * blocks with --kv), q [head_dim, tokens, heads], and a mask [cells, tokens] that is 0 on the cells each token
 * attends and -inf elsewhere. flashdec's way: the same bytes (flashdec reads ggml's blocks as they are) as one
 * contiguous cache a sequence, or as pages of 16 cells (fdec_decode_batch). Prints the medians, the ratio and the
 * largest difference between the two results.
 *
 *   llamacpp_peer --shape D,H,G --batch B --lens MIN-MAX [--q-len N] [--threads T] [--reps R] [--kv f16|q8_0|q4_0]
 *                 [--name NAME] */
#include "../tools/bench_util.h"

#include "ggml-cpu.h"
#include "ggml.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double median_of(double *x, int n) { return fd_median(x, n); }

int main(int argc, char **argv) {
    uint32_t D = 128, H = 32, G = 8, B = 4, lo = 512, hi = 8192, ql = 1, threads = 2, reps = 7, P = 16;
    const char *name = "llama3-8b", *kv = "f16";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--shape")) sscanf(argv[i + 1], "%u,%u,%u", &D, &H, &G);
        else if (!strcmp(argv[i], "--batch")) B = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--lens")) sscanf(argv[i + 1], "%u-%u", &lo, &hi);
        else if (!strcmp(argv[i], "--q-len")) ql = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--page-size")) P = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--name")) name = argv[i + 1];
        else if (!strcmp(argv[i], "--kv")) kv = argv[i + 1];
        else return fprintf(stderr, "llamacpp_peer: unknown option %s\n", argv[i]), 2;
    }
    /* the batch: lengths as `flashdec bench --batch` draws them */
    fd_rng r = {0xba7c4 + B};
    uint32_t *lens = malloc(B * sizeof *lens), *qls = malloc(B * sizeof *qls), *cell0 = malloc(B * sizeof *cell0);
    uint32_t maxlen = 1, cells = 0, rows = 0;
    for (uint32_t i = 0; i < B; i++) {
        lens[i] = lo + (uint32_t)(fd_rand(&r) % ((uint64_t)hi - lo + 1));
        qls[i] = ql < lens[i] ? ql : lens[i];
        cell0[i] = cells, cells += lens[i], rows += qls[i];
        if (lens[i] > maxlen) maxlen = lens[i];
    }
    const float scale = 1.0f / sqrtf((float)D);
    const size_t row = (size_t)G * D;
    const enum ggml_type gt = !strcmp(kv, "q8_0") ? GGML_TYPE_Q8_0 : !strcmp(kv, "q4_0") ? GGML_TYPE_Q4_0 : GGML_TYPE_F16;
    const fdec_dtype ft = gt == GGML_TYPE_Q8_0 ? FDEC_Q8_0 : gt == GGML_TYPE_Q4_0 ? FDEC_Q4_0 : FDEC_F16;
    if (gt == GGML_TYPE_F16 && strcmp(kv, "f16")) return fprintf(stderr, "llamacpp_peer: --kv f16, q8_0 or q4_0\n"), 2;
    const size_t rowb = ggml_row_size(gt, (int64_t)row); /* bytes of a cell's K (or V): G heads of D elements */

    /* ggml: the unified cache, q, the mask and the graph */
    ggml_cpu_init();
    const size_t mem = (size_t)cells * rowb * 2 + (size_t)rows * H * D * 4 * 2 + (size_t)cells * rows * 2 +
                       ((size_t)64 << 20);
    struct ggml_init_params ip = {mem, NULL, false};
    struct ggml_context *gc = ggml_init(ip);
    struct ggml_tensor *kc = ggml_new_tensor_3d(gc, gt, D, G, cells); /* [cell][kv_head][dim] */
    struct ggml_tensor *vc = ggml_new_tensor_3d(gc, gt, D, G, cells);
    struct ggml_tensor *q = ggml_new_tensor_4d(gc, GGML_TYPE_F32, D, rows, H, 1);
    struct ggml_tensor *mask = ggml_new_tensor_4d(gc, GGML_TYPE_F16, cells, rows, 1, 1);
    struct ggml_tensor *k = ggml_permute(gc, kc, 0, 2, 1, 3), *v = ggml_permute(gc, vc, 0, 2, 1, 3); /* [D, cells, G] */
    struct ggml_tensor *att = ggml_flash_attn_ext(gc, q, k, v, mask, scale, 0.0f, 0.0f);
    struct ggml_cgraph *gf = ggml_new_graph(gc);
    ggml_build_forward_expand(gf, att);
    struct ggml_cplan plan = ggml_graph_plan(gf, (int)threads, NULL);
    uint8_t *work = malloc(plan.work_size ? plan.work_size : 1);
    plan.work_data = work;

    /* the same values in both: K/V rows of sequence i at its cells; q rows token-major in flashdec, [D, row, H] in
     * ggml */
    unsigned char *kd = kc->data, *vd = vc->data;
    {
        float *kf = malloc((size_t)cells * row * sizeof(float)), *vf = malloc((size_t)cells * row * sizeof(float));
        for (size_t x = 0; x < (size_t)cells * row; x++) {
            kf[x] = (float)(2 * fd_uniform(&r) - 1);
            vf[x] = (float)(2 * fd_uniform(&r) - 1);
        }
        ggml_quantize_chunk(gt, kf, kd, 0, (int64_t)cells * G, D, NULL); /* f16: a conversion */
        ggml_quantize_chunk(gt, vf, vd, 0, (int64_t)cells * G, D, NULL);
        free(kf), free(vf);
    }
    float *qf = malloc((size_t)rows * H * D * sizeof(float)); /* flashdec's [row][head][dim] */
    for (size_t x = 0; x < (size_t)rows * H * D; x++) qf[x] = (float)(2 * fd_uniform(&r) - 1);
    for (uint32_t t = 0; t < rows; t++)
        for (uint32_t h = 0; h < H; h++)
            memcpy((float *)q->data + ((size_t)h * rows + t) * D, qf + ((size_t)t * H + h) * D, D * sizeof(float));
    uint16_t *md = mask->data;
    const uint16_t ninf = 0xfc00, zero = 0;
    uint32_t t = 0;
    for (uint32_t i = 0; i < B; i++)
        for (uint32_t j = 0; j < qls[i]; j++, t++) /* token j of sequence i at position lens - qls + j: causal */
            for (uint32_t c = 0; c < cells; c++) {
                const int in = c >= cell0[i] && c <= cell0[i] + lens[i] - qls[i] + j;
                md[(size_t)t * cells + c] = in ? zero : ninf;
            }

    /* flashdec: the same rows as contiguous caches (a sequence at a time) and as shuffled pages of P cells */
    fdec_options o = fdec_default_options();
    o.threads = threads;
    fdec_context *ctx;
    if (fdec_context_create(FDEC_BACKEND_CPU, &o, &ctx)) return fprintf(stderr, "%s\n", fdec_last_error()), 1;
    fdec_layer L;
    memset(&L, 0, sizeof L);
    L.head_dim = D, L.num_q_heads = H, L.num_kv_heads = G, L.kv_dtype = ft;
    unsigned char *kfc = fd_alloc_kv((size_t)B * maxlen * rowb), *vfc = fd_alloc_kv((size_t)B * maxlen * rowb);
    for (uint32_t i = 0; i < B; i++) {
        memcpy(kfc + (size_t)i * maxlen * rowb, kd + (size_t)cell0[i] * rowb, (size_t)lens[i] * rowb);
        memcpy(vfc + (size_t)i * maxlen * rowb, vd + (size_t)cell0[i] * rowb, (size_t)lens[i] * rowb);
    }
    fdec_batch bc;
    memset(&bc, 0, sizeof bc);
    bc.num_seqs = B, bc.seq_lens = lens, bc.q_lens = qls, bc.max_seq_len = maxlen, bc.max_q_len = ql;
    bc.kv_seq_stride = (size_t)maxlen * row;
    uint32_t npages = 0;
    for (uint32_t i = 0; i < B; i++) npages += (lens[i] + P - 1) / P;
    const uint32_t maxp = (maxlen + P - 1) / P;
    int32_t *table = malloc((size_t)B * maxp * sizeof(int32_t));
    uint32_t *perm = malloc(npages * sizeof *perm);
    fd_shuffle(perm, npages, &r);
    unsigned char *kp = fd_alloc_kv((size_t)npages * P * rowb), *vp = fd_alloc_kv((size_t)npages * P * rowb);
    uint32_t next = 0;
    for (uint32_t i = 0; i < B; i++)
        for (uint32_t pg = 0; pg < maxp; pg++) {
            if ((uint64_t)pg * P >= lens[i]) {
                table[(size_t)i * maxp + pg] = -1;
                continue;
            }
            const uint32_t id = perm[next++], n = lens[i] - pg * P < P ? lens[i] - pg * P : P;
            table[(size_t)i * maxp + pg] = (int32_t)id;
            memcpy(kp + (size_t)id * P * rowb, kd + ((size_t)cell0[i] + (size_t)pg * P) * rowb, (size_t)n * rowb);
            memcpy(vp + (size_t)id * P * rowb, vd + ((size_t)cell0[i] + (size_t)pg * P) * rowb, (size_t)n * rowb);
        }
    fdec_batch bp = bc;
    bp.kv_seq_stride = 0, bp.page_size = P, bp.page_table = table, bp.max_pages = maxp, bp.num_pages = npages;
    float *of = malloc((size_t)rows * H * D * sizeof(float)), *op = malloc((size_t)rows * H * D * sizeof(float));
    fdec_context_reserve_batch(ctx, &L, &bc);

    /* alternated: ggml, flashdec contiguous, flashdec paged */
    double *tg = malloc(reps * sizeof(double)), *tc = malloc(reps * sizeof(double)), *tp = malloc(reps * sizeof(double));
    ggml_graph_compute(gf, &plan); /* warm up */
    for (uint32_t i = 0; i < reps; i++) {
        double t0 = fd_now();
        ggml_graph_compute(gf, &plan);
        tg[i] = fd_now() - t0;
        t0 = fd_now();
        if (fdec_decode_batch(ctx, &L, &bc, qf, kfc, vfc, of, NULL)) return fprintf(stderr, "%s\n", fdec_last_error()), 1;
        tc[i] = fd_now() - t0;
        t0 = fd_now();
        if (fdec_decode_batch(ctx, &L, &bp, qf, kp, vp, op, NULL)) return fprintf(stderr, "%s\n", fdec_last_error()), 1;
        tp[i] = fd_now() - t0;
    }
    /* the results side by side: att is [D, H, rows] */
    double diff = 0;
    for (uint32_t x = 0; x < rows; x++)
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t d = 0; d < D; d++) {
                const double a = ((float *)att->data)[((size_t)x * H + h) * D + d], b = of[((size_t)x * H + h) * D + d];
                if (!(fabs(a - b) <= diff)) diff = fabs(a - b);
            }
    double bytes = 0;
    for (uint32_t i = 0; i < B; i++) bytes += 2.0 * lens[i] * rowb;
    const double g = median_of(tg, (int)reps), c = median_of(tc, (int)reps), p = median_of(tp, (int)reps);
    printf("%-20s %5u %5u-%-5u %5u %4u %12.1f %12.1f %12.1f %8.2fx %8.3f %9.2f %9.2g\n", name, B, lo, hi, ql, threads,
           g * 1e6, c * 1e6, p * 1e6, g / c, p / c, bytes / c / 1e9, diff);
    return 0;
}

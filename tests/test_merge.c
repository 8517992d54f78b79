/* test_merge.c — fdec_merge against the reference and the unsharded call. */
#include "harness.h"

#include <math.h>

/* fdec_merge: random shard splits of one problem (empty and single-position shards too; one case of 100
 * shards, more than one CUDA launch takes), each shard decoded on its own rows, merged, against the reference
 * of the whole range and against the unsharded call. Under --cuda every buffer is on the device. */
void test_merge(void) {
    fdec_context *ctx;
    if (fdec_context_create(g_cuda ? FDEC_BACKEND_CUDA : FDEC_BACKEND_CPU, NULL, &ctx) != FDEC_OK) {
        check(0, "merge: create context: %s", fdec_last_error());
        return;
    }
    int cases = 0;
    for (int c = 0; c < 41; c++) {
        fd_rng r = {71 + (uint64_t)c};
        const int many = c == 40;
        const uint32_t D = many ? 128 : (uint32_t)(1 + fd_rand(&r) % 200), G = 1 + (uint32_t)(fd_rand(&r) % 4);
        const uint32_t H = G * (1 + (uint32_t)(fd_rand(&r) % 4));
        const uint32_t L = many ? 300 : 1 + (uint32_t)(fd_rand(&r) % 1500);
        fdec_layer lay = layer_of(D, H, G, 0, 0, many ? FDEC_F16 : (fdec_dtype)(fd_rand(&r) % 3), 0);
        lay.out_dtype = many ? FDEC_F32 : (fdec_dtype)(fd_rand(&r) % 3);
        fd_problem pr;
        fd_problem_make(&pr, &lay, L, FD_DENSE, 1.0f, &r);
        double *ref = malloc(sizeof(double) * H * D), *rl = malloc(sizeof(double) * H);
        fd_reference(&pr, ref, rl);
        inputs in;
        int ok = inputs_make(&in, &pr) == 0;
        /* cut [0, L) at random points (repeats make empty shards) */
        enum { MAXS = 100 };
        uint32_t cut[MAXS + 1], ns = many ? MAXS : 1 + (uint32_t)(fd_rand(&r) % 9);
        cut[0] = 0, cut[ns] = L;
        for (uint32_t i = 1; i < ns; i++) cut[i] = (uint32_t)(fd_rand(&r) % (L + 1));
        for (uint32_t i = 1; i < ns; i++) /* sort */
            for (uint32_t j = i; j > 1 && cut[j - 1] > cut[j]; j--) { uint32_t x = cut[j]; cut[j] = cut[j - 1]; cut[j - 1] = x; }
        const size_t es = fdec_dtype_size(lay.out_dtype), kes = fdec_dtype_size(lay.kv_dtype);
        const size_t ob = (size_t)H * D * es, lb = H * sizeof(float);
        void *outs[MAXS];
        float *lses[MAXS], *hl = malloc(lb);
        for (uint32_t i = 0; i < ns; i++) {
            outs[i] = g_cuda ? fd_dev_alloc(ob) : malloc(ob);
            lses[i] = g_cuda ? fd_dev_alloc(lb) : malloc(lb);
            if (!outs[i] || !lses[i]) { ok = 0; ns = i + 1; break; }
            /* NaN: an empty shard's out must be ignored */
            if (g_cuda) fd_dev_memset(outs[i], 0xff, ob);
            else memset(outs[i], 0xff, ob);
            if (cut[i + 1] == cut[i]) {
                for (uint32_t h = 0; h < H; h++) hl[h] = -INFINITY;
                if (g_cuda) fd_h2d(lses[i], hl, lb);
                else memcpy(lses[i], hl, lb);
                continue;
            }
            const size_t off = (size_t)cut[i] * pr.p.kv.ps * kes;
            ok &= fdec_decode(ctx, &lay, cut[i + 1] - cut[i], in.q, (const char *)in.k + off,
                              (const char *)in.v + off, outs[i], lses[i]) == FDEC_OK;
        }
        void *out = g_cuda ? fd_dev_alloc(ob) : malloc(ob), *whole = g_cuda ? fd_dev_alloc(ob) : malloc(ob);
        float *lse = g_cuda ? fd_dev_alloc(lb) : malloc(lb);
        ok &= fdec_merge(ctx, ns, H, D, lay.out_dtype, (const void *const *)outs, (const float *const *)lses, out,
                         lse) == FDEC_OK;
        ok &= fdec_decode(ctx, &lay, L, in.q, in.k, in.v, whole, NULL) == FDEC_OK;
        void *hout = malloc(ob), *hwhole = malloc(ob);
        if (g_cuda) ok &= !fd_dev_sync() && !fd_d2h(hout, out, ob) && !fd_d2h(hwhole, whole, ob) && !fd_d2h(hl, lse, lb);
        else memcpy(hout, out, ob), memcpy(hwhole, whole, ob), memcpy(hl, lse, lb);
        /* the shards' outputs are rounded to the out dtype before the merge: twice the rounding allowance */
        const double err = fd_out_error(&pr, hout, ref), tol = 2 * fd_tolerance(&pr);
        double diff = 0;
        for (size_t i = 0; i < (size_t)H * D; i++) {
            double d = fabs((double)fdec_load_elem(hout, i, lay.out_dtype) - fdec_load_elem(hwhole, i, lay.out_dtype));
            if (!(d <= diff)) diff = isnan(d) ? INFINITY : d;
        }
        check(ok && err <= tol && diff <= 2 * tol && fd_lse_error(&pr, hl, rl) <= 1e-5,
              "merge of %u shards (D=%u H=%u G=%u L=%u): err %.3g, against the unsharded call %.3g, tol %.3g: %s", ns,
              D, H, G, L, err, diff, tol, fdec_last_error());
        cases++;
        for (uint32_t i = 0; i < ns; i++) {
            if (g_cuda) fd_dev_free(outs[i]), fd_dev_free(lses[i]);
            else free(outs[i]), free(lses[i]);
        }
        if (g_cuda) fd_dev_free(out), fd_dev_free(whole), fd_dev_free(lse);
        else free(out), free(whole), free(lse);
        free(hout), free(hwhole), free(hl), free(ref), free(rl);
        inputs_free(&in);
        fd_problem_free(&pr);
    }
    if (g_cuda) { /* the argument checks are the API's, tested on the CPU; here: host pointers are refused */
        float o1[4], l1[1] = {-INFINITY}, out[4];
        const void *outs[1] = {o1};
        const float *lses[1] = {l1};
        check(fdec_merge(ctx, 1, 1, 4, FDEC_F32, outs, lses, out, NULL) == FDEC_EINVAL &&
                  strstr(fdec_last_error(), "outs[0]"),
              "cuda merge of host pointers: %s", fdec_last_error());
        fdec_context_destroy(ctx);
        printf("merge: %d random shard splits against the reference and the unsharded call, host pointers\n", cases);
        return;
    }
    /* every shard empty: out 0, lse -inf; bad arguments are refused */
    float o1[4] = {NAN, NAN, NAN, NAN}, l1[1] = {-INFINITY}, out[4], lse[1];
    const void *outs[1] = {o1};
    const float *lses[1] = {l1};
    check(fdec_merge(ctx, 1, 1, 4, FDEC_F32, outs, lses, out, lse) == FDEC_OK && out[0] == 0 && out[3] == 0 &&
              lse[0] == -INFINITY,
          "merge of empty shards: out 0, lse -inf");
    check(fdec_merge(ctx, 0, 1, 4, FDEC_F32, outs, lses, out, lse) == FDEC_EINVAL && strstr(fdec_last_error(), "n (0)"),
          "merge with n 0: %s", fdec_last_error());
    check(fdec_merge(ctx, 1, 1, 4, FDEC_F32, NULL, lses, out, lse) == FDEC_EINVAL &&
              strstr(fdec_last_error(), "outs must not be NULL"),
          "merge with NULL outs: %s", fdec_last_error());
    check(fdec_merge(ctx, 1, 1, 600, FDEC_F32, outs, lses, out, lse) == FDEC_EINVAL, "merge with head_dim 600");
    fdec_context_destroy(ctx);
    printf("merge: %d random shard splits against the reference, empty shards, bad arguments\n", cases);
}


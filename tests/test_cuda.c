/* test_cuda.c — CUDA only: graph capture and replay, the reserve bound under capture. */
#include "harness.h"

#include <math.h>

/* ---- CUDA: determinism, graph capture and replay ---- */

typedef struct {
    fdec_context *ctx;
    const fd_problem *pr;
    const inputs *in;
    void *out;
    float *lse;
    fdec_status st;
} graph_arg;

static void graph_call(void *x, int i) {
    (void)i;
    graph_arg *a = x;
    a->st = fdec_decode(a->ctx, &a->pr->layer, a->pr->seq_len, a->in->q, a->in->k, a->in->v, a->out, a->lse);
}

void test_cuda_graph(void) {
    fd_rng r = {51};
    fdec_layer L = layer_of(128, 32, 8, 0, 0, FDEC_F16, 0);
    const uint32_t n = 30000;
    fd_problem pa, pb;
    fd_problem_make(&pa, &L, n, FD_DENSE, 1.0f, &r);
    fd_problem_make(&pb, &L, n, FD_DENSE, 1.0f, &r);
    double *ra = malloc(sizeof(double) * 32 * 128), *rb = malloc(sizeof(double) * 32 * 128), rl[32];
    fd_reference(&pa, ra, rl);
    fd_reference(&pb, rb, rl);
    inputs in;
    inputs_make(&in, &pa);
    size_t ob = 32 * 128 * 4;
    void *dout = fd_dev_alloc(ob), *dout2 = fd_dev_alloc(ob);
    float *host = malloc(ob), *host2 = malloc(ob);
    fdec_options o = fdec_default_options();
    o.cuda_stream = g_stream;
    fdec_context *ctx;
    fdec_context_create(FDEC_BACKEND_CUDA, &o, &ctx);

    /* determinism: two calls, identical bytes */
    graph_arg ga = {ctx, &pa, &in, dout, NULL, FDEC_OK};
    graph_call(&ga, 0);
    ga.out = dout2;
    graph_call(&ga, 0);
    fd_dev_sync();
    fd_d2h(host, dout, ob), fd_d2h(host2, dout2, ob);
    check(ga.st == FDEC_OK && memcmp(host, host2, ob) == 0, "cuda: two calls must give identical bytes");

    /* capture before the scratch is big enough: refused with a clear message, not a broken graph */
    fdec_context *fresh;
    fdec_context_create(FDEC_BACKEND_CUDA, &o, &fresh);
    graph_arg gf = {fresh, &pa, &in, dout, NULL, FDEC_OK};
    void *gr = fd_dev_graph_capture(g_stream, graph_call, &gf, 1);
    check(gf.st == FDEC_EINVAL && strstr(fdec_last_error(), "reserve"), "capture without reserve: %s %s",
          fdec_status_string(gf.st), fdec_last_error());
    fd_dev_graph_destroy(gr);
    fdec_context_destroy(fresh);

    /* reserve, capture, replay; then new data in the same buffers, replay again */
    check(fdec_context_reserve(ctx, &L, n) == FDEC_OK, "reserve: %s", fdec_last_error());
    fd_dev_memset(dout, 0xff, ob);
    ga.out = dout;
    gr = fd_dev_graph_capture(g_stream, graph_call, &ga, 1);
    check(gr != NULL && ga.st == FDEC_OK, "capture fdec_decode into a CUDA graph: %s", fdec_last_error());
    if (gr) {
        fd_dev_graph_replay(gr, g_stream);
        fd_dev_sync();
        fd_d2h(host, dout, ob);
        check(fd_out_error(&pa, host, ra) <= fd_tolerance(&pa), "graph replay, first data: err %.3g",
              fd_out_error(&pa, host, ra));
        size_t kb = pa.kv_elems * 2;
        fd_h2d(in.dq, pb.q, 32 * 128 * 4), fd_h2d(in.dk, pb.k, kb), fd_h2d(in.dv, pb.v, kb);
        fd_dev_memset(dout, 0xff, ob);
        fd_dev_graph_replay(gr, g_stream);
        fd_dev_sync();
        fd_d2h(host, dout, ob);
        check(fd_out_error(&pb, host, rb) <= fd_tolerance(&pb), "graph replay, new data: err %.3g",
              fd_out_error(&pb, host, rb));
        fd_dev_graph_destroy(gr);
    }
    printf("cuda graph: capture and replay checked\n");
    fdec_context_destroy(ctx);
    inputs_free(&in);
    fd_dev_free(dout), fd_dev_free(dout2);
    free(host), free(host2), free(ra), free(rb);
    fd_problem_free(&pa), fd_problem_free(&pb);
}

/* A reserve covers every shorter call of the layer, not only one of its length: after fdec_context_reserve(n) each
 * call of n' <= n captures into a CUDA graph (a call that needed more scratch would be refused during capture).
 * The split's rules can give a shorter call more chunks than a longer one (at head_dim 512 up to 64 chunks of 32
 * positions where a longer call takes 33 of 64), which a reserve of only n's own split would miss. */
void test_cuda_reserve_bound(void) {
    static const uint32_t shapes[][3] = {{512, 8, 1}, {512, 16, 2}, {64, 32, 8}, {128, 32, 8}, {256, 16, 8}};
    static const uint32_t maxes[] = {2100, 4100};
    fd_rng r = {77};
    int checked = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t mi = 0; mi < sizeof maxes / sizeof maxes[0]; mi++) {
            const uint32_t D = shapes[si][0], H = shapes[si][1], G = shapes[si][2], n = maxes[mi];
            fdec_layer L = layer_of(D, H, G, 0, 0, FDEC_F16, 0);
            fd_problem pr;
            if (fd_problem_make(&pr, &L, n, FD_DENSE, 1.0f, &r)) {
                check(0, "reserve bound: no memory");
                continue;
            }
            inputs in;
            if (inputs_make(&in, &pr)) {
                check(0, "reserve bound: inputs could not be copied to the device");
                fd_problem_free(&pr);
                continue;
            }
            void *dout = fd_dev_alloc((size_t)H * D * 4);
            fdec_options o = fdec_default_options();
            o.cuda_stream = g_stream;
            fdec_context *ctx;
            if (!dout || fdec_context_create(FDEC_BACKEND_CUDA, &o, &ctx) != FDEC_OK) {
                check(0, "reserve bound: context or output buffer: %s", fdec_last_error());
                fd_dev_free(dout);
                inputs_free(&in);
                fd_problem_free(&pr);
                continue;
            }
            check(fdec_context_reserve(ctx, &L, n) == FDEC_OK, "reserve bound: reserve: %s", fdec_last_error());
            const uint32_t lens[] = {n, n - 20, n * 3 / 4, n / 2, 2080, 2048, 1100, 1024, 500, 64, 1};
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                if (lens[li] > n || lens[li] < 1) continue;
                fd_problem call = pr;
                call.seq_len = lens[li];
                graph_arg ga = {ctx, &call, &in, dout, NULL, FDEC_OK};
                void *gr = fd_dev_graph_capture(g_stream, graph_call, &ga, 1);
                check(gr != NULL && ga.st == FDEC_OK, "reserve bound: D %u, %u/%u heads, reserve %u, call %u: %s %s",
                      D, H, G, n, lens[li], fdec_status_string(ga.st), fdec_last_error());
                if (gr) fd_dev_graph_destroy(gr);
                checked++;
            }
            fdec_context_destroy(ctx);
            fd_dev_free(dout);
            inputs_free(&in);
            fd_problem_free(&pr);
        }
    printf("reserve bound: %d calls up to a reserve's length checked under graph capture\n", checked);
}


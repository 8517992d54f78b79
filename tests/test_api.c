/* test_api.c — the contract at the API: bad input, the split's reserve bound, the README example. */
#include "harness.h"

#include <math.h>

/* ---- 4. bad input ---- */

typedef struct {
    const char *what;
    fdec_layer L;
    uint32_t seq_len;
    int null_arg; /* 0 none, 1 q, 2 k, 3 v, 4 out, 5 ctx, 6 layer, 7 misaligned k, 8 host k (CUDA) */
    fdec_status want;
    const char *msg; /* substring the message must contain */
} bad_case;

void test_bad_input(void) {
    fdec_context *ctx;
    if (fdec_context_create(g_cuda ? FDEC_BACKEND_CUDA : FDEC_BACKEND_CPU, NULL, &ctx) != FDEC_OK) {
        check(0, "create default context: %s", fdec_last_error());
        return;
    }
    const fdec_layer good = layer_of(64, 8, 2, 0, 0, FDEC_F16, 0);
    bad_case cases[64];
    int n = 0;
#define BAD(WHAT, FIELD_EXPR, SEQ, NUL, WANT, MSG)                                                              \
    do {                                                                                                        \
        bad_case *bc = &cases[n++];                                                                             \
        bc->what = WHAT;                                                                                        \
        bc->L = good;                                                                                           \
        { fdec_layer *l = &bc->L; (void)l; FIELD_EXPR; }                                                        \
        bc->seq_len = SEQ;                                                                                      \
        bc->null_arg = NUL;                                                                                     \
        bc->want = WANT;                                                                                        \
        bc->msg = MSG;                                                                                          \
    } while (0)
    BAD("head_dim 0", l->head_dim = 0, 10, 0, FDEC_EINVAL, "head_dim (0) must be in 1..512");
    BAD("head_dim 513", l->head_dim = 513, 10, 0, FDEC_EINVAL, "head_dim (513)");
    BAD("num_q_heads 0", l->num_q_heads = 0, 10, 0, FDEC_EINVAL, "num_q_heads (0)");
    BAD("num_kv_heads 0", l->num_kv_heads = 0, 10, 0, FDEC_EINVAL, "num_kv_heads (0)");
    BAD("gqa not a multiple", (l->num_q_heads = 12, l->num_kv_heads = 8), 10, 0, FDEC_EINVAL,
        "num_q_heads (12) must be a multiple of num_kv_heads (8)");
    BAD("NaN scale", l->scale = NAN, 10, 0, FDEC_EINVAL, "scale");
    BAD("inf scale", l->scale = INFINITY, 10, 0, FDEC_EINVAL, "must be finite");
    BAD("bad q_dtype", l->q_dtype = (fdec_dtype)7, 10, 0, FDEC_EINVAL, "q_dtype (7)");
    BAD("bad kv_dtype", l->kv_dtype = (fdec_dtype)-1, 10, 0, FDEC_EINVAL, "kv_dtype (-1)");
    BAD("bad out_dtype", l->out_dtype = (fdec_dtype)9, 10, 0, FDEC_EINVAL, "out_dtype (9)");
    BAD("fp8 q", l->q_dtype = FDEC_F8_E4M3, 10, 0, FDEC_EINVAL, "q_dtype (f8_e4m3) must be f32, f16 or bf16");
    BAD("q8_0 out", l->out_dtype = FDEC_Q8_0, 10, 0, FDEC_EINVAL, "out_dtype (q8_0) must be f32, f16 or bf16");
    BAD("q4_0 head_dim 48", (l->kv_dtype = FDEC_Q4_0, l->head_dim = 48), 10, 0, FDEC_EINVAL,
        "must be multiples of 32");
    BAD("q8_0 stride 80", (l->kv_dtype = FDEC_Q8_0, l->kv_pos_stride = 200), 10, 0, FDEC_EINVAL,
        "must be multiples of 32");
    BAD("negative k_scale", (l->kv_dtype = FDEC_F8_E4M3, l->k_scale = -1), 10, 0, FDEC_EINVAL,
        "k_scale (-1) must be finite and not negative");
    BAD("NaN v_scale", (l->kv_dtype = FDEC_F8_E5M2, l->v_scale = NAN), 10, 0, FDEC_EINVAL, "v_scale (");
    BAD("inf k_scale", (l->kv_dtype = FDEC_F8_E5M2, l->k_scale = INFINITY), 10, 0, FDEC_EINVAL, "k_scale (inf)");
    BAD("scale with q8_0", (l->kv_dtype = FDEC_Q8_0, l->v_scale = 2), 10, 0, FDEC_EINVAL, "fp8 caches only");
    BAD("ring without window", l->ring_capacity = 64, 10, 0, FDEC_EINVAL, "needs a window");
    BAD("ring < window", (l->window = 100, l->ring_capacity = 50), 10, 0, FDEC_EINVAL,
        "ring_capacity (50) must be at least window (100)");
    BAD("seq_len 0", (void)0, 0, 0, FDEC_EINVAL, "seq_len (0)");
    BAD("overlapping heads", l->kv_head_stride = 32, 10, 0, FDEC_EINVAL, "overlap");
    BAD("overlapping rows", l->kv_pos_stride = 100, 10, 0, FDEC_EINVAL, "overlap");
    BAD("pos stride < head_dim (head-major)", (l->kv_pos_stride = 63, l->kv_head_stride = 10000), 10, 0,
        FDEC_EINVAL, "overlap");
    /* the extent's sum wrapped past SIZE_MAX and the call read before the cache (fixed: kv.h's fdec_kv_extent) */
    BAD("head stride near SIZE_MAX", (l->num_q_heads = 2, l->kv_pos_stride = 64, l->kv_head_stride = SIZE_MAX - 8), 100,
        0, FDEC_EINVAL, "too large");
    BAD("huge strides", (l->kv_pos_stride = SIZE_MAX / 4, l->kv_head_stride = 64), 10, 0, FDEC_EINVAL,
        "too large");
    /* a cache of exactly SIZE_MAX elements: its bytes' round-up to whole blocks wrapped to 0 (fixed: api.c's
     * bytes_fit) */
    BAD("SIZE_MAX elements", (l->kv_pos_stride = 128, l->kv_head_stride = SIZE_MAX - 64), 1, 0, FDEC_EINVAL,
        "too large");
    BAD("NULL q", (void)0, 10, 1, FDEC_EINVAL, "q must not be NULL");
    BAD("NULL k", (void)0, 10, 2, FDEC_EINVAL, "k must not be NULL");
    BAD("NULL v", (void)0, 10, 3, FDEC_EINVAL, "v must not be NULL");
    BAD("NULL out", (void)0, 10, 4, FDEC_EINVAL, "out must not be NULL");
    BAD("NULL ctx", (void)0, 10, 5, FDEC_EINVAL, "ctx must not be NULL");
    BAD("NULL layer", (void)0, 10, 6, FDEC_EINVAL, "layer must not be NULL");
    BAD("misaligned k", (void)0, 10, 7, FDEC_EINVAL, "aligned");
    if (g_cuda) BAD("host pointer for k", (void)0, 10, 8, FDEC_EINVAL, "k (");
    /* the logit variants: their numbers on the host (CPU), device pointers on CUDA (a host array is refused) */
    static float nan_sinks[8] = {0, 0, 0, NAN, 0, 0, 0, 0}, inf_sinks[8] = {0, 0, 0, 0, 0, 0, 0, INFINITY},
                 bad_alibi[8] = {0.5f, 0.25f, -INFINITY, 0, 0, 0, 0, 0}, fine[9];
    BAD("negative softcap", l->softcap = -1, 10, 0, FDEC_EINVAL, "softcap (-1) must be 0 (off) or a positive");
    BAD("NaN softcap", l->softcap = NAN, 10, 0, FDEC_EINVAL, "softcap (");
    BAD("inf softcap", l->softcap = INFINITY, 10, 0, FDEC_EINVAL, "softcap (inf)");
    BAD("NaN sink", l->sinks = nan_sinks, 10, 0, FDEC_EINVAL, g_cuda ? "sinks (" : "sinks[3]");
    BAD("+inf sink", l->sinks = inf_sinks, 10, 0, FDEC_EINVAL, g_cuda ? "sinks (" : "sinks[7] (inf) must be finite or -inf");
    BAD("-inf ALiBi slope", l->alibi_slopes = bad_alibi, 10, 0, FDEC_EINVAL,
        g_cuda ? "alibi_slopes (" : "alibi_slopes[2] (-inf) must be finite");
    BAD("misaligned sinks", l->sinks = (const float *)((const char *)fine + 1), 10, 0, FDEC_EINVAL, "sinks (");
    BAD("k_scale with f16", l->k_scale = 2, 10, 0, FDEC_EINVAL, "apply to fp8 caches only; kv_dtype is f16");
    BAD("v_scales with f16", l->v_scales = fine, 10, 0, FDEC_EINVAL, "apply to fp8 caches only");
#undef BAD
    /* buffers big enough for the good layer at seq_len 10; on CUDA q, k, v (and the good call's out) are on the
     * device, and out / lse of the table stay on the host, where "untouched" is checked */
    float *q = calloc(8 * 64, 4); /* the good layer's q is f32 */
    uint16_t *k = calloc(10 * 2 * 64 + 1, 2), *v = calloc(10 * 2 * 64, 2);
    void *dq = q, *dk = k, *dv = v, *dout = NULL;
    unsigned char out[8 * 64 * 4], lse[8 * 4];
    if (g_cuda) {
        dq = fd_dev_alloc(8 * 64 * 4), dk = fd_dev_alloc(10 * 2 * 64 * 2 + 16), dv = fd_dev_alloc(10 * 2 * 64 * 2);
        dout = fd_dev_alloc(sizeof out + sizeof lse);
        fd_h2d(dq, q, 8 * 64 * 4), fd_h2d(dk, k, 10 * 2 * 64 * 2), fd_h2d(dv, v, 10 * 2 * 64 * 2);
    }
    for (int i = 0; i < n; i++) {
        bad_case *bc = &cases[i];
        memset(out, 0x5a, sizeof out);
        memset(lse, 0x5a, sizeof lse);
        const void *qa = bc->null_arg == 1 ? NULL : dq, *ka = bc->null_arg == 2 ? NULL : dk;
        if (bc->null_arg == 7) ka = (const char *)dk + 1;
        if (bc->null_arg == 8) ka = k;
        fdec_status st = fdec_decode(bc->null_arg == 5 ? NULL : ctx, bc->null_arg == 6 ? NULL : &bc->L, bc->seq_len,
                                     qa, ka, bc->null_arg == 3 ? NULL : dv, bc->null_arg == 4 ? NULL : out,
                                     (float *)lse);
        int untouched = 1;
        for (size_t j = 0; j < sizeof out; j++) untouched &= out[j] == 0x5a;
        for (size_t j = 0; j < sizeof lse; j++) untouched &= lse[j] == 0x5a;
        check(st == bc->want && strstr(fdec_last_error(), bc->msg) && untouched,
              "bad input '%s': got %s \"%s\", want %s containing \"%s\"%s", bc->what, fdec_status_string(st),
              fdec_last_error(), fdec_status_string(bc->want), bc->msg, untouched ? "" : " (out WRITTEN)");
        /* fdec_plan applies the same rules to the layer */
        if (bc->null_arg == 0) {
            fdec_plan_info info;
            check(fdec_plan(ctx, &bc->L, bc->seq_len, &info) == bc->want, "plan with bad input '%s' accepted",
                  bc->what);
        }
    }
    /* a good call on the same buffers works, so the table above failed for the stated reason */
    void *gout = g_cuda ? dout : (void *)out;
    float *glse = g_cuda ? (float *)((char *)dout + sizeof out) : (float *)lse;
    check(fdec_decode(ctx, &good, 10, dq, dk, dv, gout, glse) == FDEC_OK && (!g_cuda || !fd_dev_sync()),
          "good call after the bad ones: %s", fdec_last_error());
    if (g_cuda) fd_dev_free(dq), fd_dev_free(dk), fd_dev_free(dv), fd_dev_free(dout);
    /* context creation errors */
    fdec_context *c2 = (fdec_context *)1;
    check(fdec_context_create((fdec_backend)9, NULL, &c2) == FDEC_EINVAL && c2 == NULL &&
              strstr(fdec_last_error(), "backend (9)"),
          "unknown backend: %s", fdec_last_error());
    fdec_options o = fdec_default_options();
    o.cpu_path = (fdec_cpu_path)42;
    check(fdec_context_create(FDEC_BACKEND_CPU, &o, &c2) == FDEC_EINVAL && strstr(fdec_last_error(), "cpu_path (42)"),
          "bad cpu_path: %s", fdec_last_error());
    check(fdec_context_create(FDEC_BACKEND_CPU, NULL, NULL) == FDEC_EINVAL, "NULL out pointer to create");
    /* a path of the other architecture: a clear EUNSUPPORTED that names it */
#ifdef FDEC_ARM64
    o.cpu_path = FDEC_CPU_AVX2;
#else
    o.cpu_path = FDEC_CPU_NEON;
#endif
    check(fdec_context_create(FDEC_BACKEND_CPU, &o, &c2) == FDEC_EUNSUPPORTED && c2 == NULL &&
              strstr(fdec_last_error(), fdec_cpu_path_name(o.cpu_path)),
          "a path this CPU lacks: %s", fdec_last_error());
    /* without CUDA compiled in, or without a device: a clear EUNSUPPORTED */
    fdec_status cst = fdec_context_create(FDEC_BACKEND_CUDA, NULL, &c2);
    if (cst == FDEC_OK) fdec_context_destroy(c2);
    else
        check(cst == FDEC_EUNSUPPORTED && c2 == NULL && strstr(fdec_last_error(), "CUDA"),
              "CUDA context without CUDA: %s %s", fdec_status_string(cst), fdec_last_error());
    check(fdec_plan(ctx, &good, 10, NULL) == FDEC_EINVAL, "plan with NULL info");
    check(strcmp(fdec_status_string(FDEC_EINVAL), "invalid argument") == 0 &&
              strcmp(fdec_status_string((fdec_status)77), "unknown status") == 0,
          "status strings");
    fdec_context_destroy(NULL);
    fdec_context_destroy(ctx);
    free(q);
    free(k);
    free(v);
    printf("bad input: %d cases\n", n);
}

void test_split_bound(void) {
    static const uint32_t lanes[] = {1, 2, 3, 8, 16, 33, 64, 66, 128, 132};
    static const uint32_t mins[] = {1, 32, 64, 100, 512};
    static const uint32_t caps[] = {64, 128};
    int bad = 0, dips = 0;
    long checked = 0;
    fdec_problem p;
    memset(&p, 0, sizeof p);
    for (size_t li = 0; li < sizeof lanes / sizeof lanes[0]; li++)
        for (size_t mi = 0; mi < sizeof mins / sizeof mins[0]; mi++)
            for (size_t ci = 0; ci < sizeof caps / sizeof caps[0]; ci++) {
                uint32_t most = 0, prev = 0;
                for (uint32_t n = 1; n <= 40000; n += n < 5000 ? 1 : 97) {
                    p.lo = n % 7 == 0 ? 1000 : 0; /* a window's start too */
                    p.seq_len = p.lo + n;
                    const fdec_split s = fdec_make_split(&p, lanes[li], mins[mi], caps[ci]);
                    if (s.num_chunks < prev) dips++;
                    prev = s.num_chunks;
                    if (s.num_chunks > most) most = s.num_chunks;
                    const uint32_t b = fdec_split_bound(&p, lanes[li], mins[mi], caps[ci]);
                    if (b < most || b > caps[ci]) {
                        if (!bad++)
                            check(0, "split bound: lanes %u, min %u, cap %u, n %u: bound %u below %u chunks of a "
                                     "shorter call (or above the cap)", lanes[li], mins[mi], caps[ci], n, b, most);
                    }
                    checked++;
                }
            }
    check(bad == 0, "split bound: %d lengths with a shorter call above the bound", bad);
    check(dips > 0, "split bound: the chunk count never fell with a longer call, so the bound went untested");
    printf("split bound: %ld lengths, %d where a longer call takes fewer chunks, bound %s\n", checked, dips,
           bad ? "FAILED" : "held");
}

/* ---- 6. the README example ---- */

/* Without a CUDA device (or without the CUDA module or runtime), a CUDA context is FDEC_EUNSUPPORTED with a message
 * that says what is missing, and nothing is created. */
void test_cuda_absent(void) {
    if (fd_dev_available()) return;
    fdec_context *ctx = (fdec_context *)&ctx;
    const fdec_status st = fdec_context_create(FDEC_BACKEND_CUDA, NULL, &ctx);
    check(st == FDEC_EUNSUPPORTED && !ctx && strlen(fdec_last_error()) > 10,
          "a CUDA context without a device: status %d, message '%s'", (int)st, fdec_last_error());
    printf("CUDA context here: %s\n", fdec_last_error());
}

/* fdec_version() is the header's version, as the build and the packages read it. */
void test_version(void) {
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", FDEC_VERSION_MAJOR, FDEC_VERSION_MINOR, FDEC_VERSION_PATCH);
    check(!strcmp(fdec_version(), want), "fdec_version() is '%s', the header says %s", fdec_version(), want);
}

void test_readme_example(const char *path) {
    if (!path) return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s > /dev/null", path);
    int rc = system(cmd);
    check(rc == 0, "README example (%s) exited with %d", path, rc);
    printf("README example: %s\n", rc == 0 ? "ran" : "FAILED");
}


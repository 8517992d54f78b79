/* test_threads.c — determinism, threads, the plan, a caller's parallel_for, work stealing, a shared context. */
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

/* ---- 5. determinism, threads, plan, parallel_for ---- */

static void serial_for(void *user, fdec_task_fn fn, void *task, uint32_t n) {
    (*(int *)user)++;
    for (uint32_t i = n; i-- > 0;) fn(task, i, n); /* reverse order: the result must not care */
}

void test_determinism_threads(void) {
    fd_rng r = {31};
    fdec_layer L = layer_of(128, 32, 8, 0, 0, FDEC_F16, 0);
    const uint32_t n = 20000;
    fd_problem pr;
    fd_problem_make(&pr, &L, n, FD_DENSE, 1.0f, &r);
    double *ref = malloc(sizeof(double) * pr.p.H * pr.p.D), *ref_lse = malloc(sizeof(double) * pr.p.H);
    fd_reference(&pr, ref, ref_lse);
    fdec_context *c1, *c2;
    fdec_options o = fdec_default_options();
    o.threads = 1;
    fdec_context_create(FDEC_BACKEND_CPU, &o, &c1);
    o.threads = 2;
    fdec_context_create(FDEC_BACKEND_CPU, &o, &c2);
    size_t bytes = (size_t)pr.p.H * pr.p.D * 4;
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    fdec_decode(c2, &L, n, pr.q, pr.k, pr.v, a, NULL);
    memset(b, 0xff, bytes);
    fdec_decode(c2, &L, n, pr.q, pr.k, pr.v, b, NULL);
    check(memcmp(a, b, bytes) == 0, "two calls on one context must give identical bytes");
    fdec_decode(c1, &L, n, pr.q, pr.k, pr.v, c, NULL);
    double diff = 0;
    for (size_t i = 0; i < bytes / 4; i++) diff = fmax(diff, fabs((double)a[i] - c[i]));
    check(diff <= 2e-6, "1 and 2 threads must agree within 2e-6 (got %.3g)", diff);
    printf("determinism: identical bytes; 1 vs 2 threads differ by %.3g\n", diff);

    fdec_plan_info info;
    memset(&info, 0, sizeof info);
    const fdec_status pst = fdec_plan(c2, &L, n, &info);
    /* chunk_len is the longest chunk: on the CPU the last chunk of each thread's run is cut shorter (cpu.c) */
    check(pst == FDEC_OK && info.num_chunks > 1 && info.kv_start == 0 && info.kv_end == n &&
              (uint64_t)info.chunk_len * info.num_chunks >= n && info.chunk_len < n && info.grouped == 1 &&
              info.scratch_bytes > 0,
          "plan geometry: %u chunks of at most %u", info.num_chunks, info.chunk_len);
    fdec_layer W = L;
    W.window = 1000;
    check(fdec_plan(c2, &W, n, &info) == FDEC_OK && info.kv_start == n - 1000 && info.kv_end == n,
          "plan window range: [%u, %u)", info.kv_start, info.kv_end);

    /* a caller-supplied parallel-for is used, and gives the same bytes */
    int calls = 0;
    o.parallel_for = serial_for;
    o.parallel_user = &calls;
    fdec_context *c3;
    check(fdec_context_create(FDEC_BACKEND_CPU, &o, &c3) == FDEC_OK, "create with parallel_for");
    memset(b, 0xff, bytes);
    fdec_decode(c3, &L, n, pr.q, pr.k, pr.v, b, NULL);
    /* twice a call of several chunks: the chunks, then the merge by heads (flashdec.h) */
    check(calls == 2 && memcmp(a, b, bytes) == 0, "parallel_for: called %d times, same bytes: %d", calls,
          memcmp(a, b, bytes) == 0);
    check(fd_out_error(&pr, b, ref) <= fd_tolerance(&pr), "parallel_for result against the reference");
    fdec_context_destroy(c1);
    fdec_context_destroy(c2);
    fdec_context_destroy(c3);
    free(a);
    free(b);
    free(c);
    free(ref);
    free(ref_lse);
    fd_problem_free(&pr);
}

/* ---- 5b. work stealing (cpu.c): each chunk in its own state, so the same bytes whoever runs which part ---- */

/* Runs the tasks on the caller and on a second thread that starts late (a few hundred microseconds, so the caller runs
 * out of its own run first and steals from the other's), both taking task numbers from a shared counter in reverse
 * order. */
typedef struct {
    fdec_task_fn fn;
    void *task;
    uint32_t n;
    _Atomic uint32_t next;
} racing_job;

static void racing_take(racing_job *j) {
    for (uint32_t i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) j->fn(j->task, j->n - 1 - i, j->n);
}
static void *racing_late(void *x) {
    const double t0 = fd_now();
    while (fd_now() - t0 < 3e-4) {
    }
    racing_take(x);
    return NULL;
}
static void racing_for(void *user, fdec_task_fn fn, void *task, uint32_t n) {
    (*(int *)user)++;
    racing_job j = {fn, task, n, 0};
    pthread_t t;
    int started = pthread_create(&t, NULL, racing_late, &j) == 0;
    racing_take(&j);
    if (started) pthread_join(t, NULL);
}

void test_work_stealing(void) {
    /* 3 threads (runs of uneven length) through the pool, a caller's serial loop in reverse order (the last task works
     * through its own run and then takes every other run's chunks before their tasks start) and racing_for */
    int calls = 0;
    fdec_options o = fdec_default_options();
    o.threads = 3;
    fdec_context *pool, *rev, *race;
    fdec_context_create(FDEC_BACKEND_CPU, &o, &pool);
    o.parallel_for = serial_for;
    o.parallel_user = &calls;
    fdec_context_create(FDEC_BACKEND_CPU, &o, &rev);
    o.parallel_for = racing_for;
    fdec_context_create(FDEC_BACKEND_CPU, &o, &race);
    fd_rng r = {0x57ea1};
    int cases = 0, same = 0, multi = 0;
    double worst = 0;
    for (int i = 0; i < 42; i++) {
        fdec_layer L;
        uint32_t seq_len;
        fd_layout layout = FD_DENSE;
        if (i < 40) fd_random_config(&r, &L, &seq_len, &layout);
        else if (i == 40) /* 64 MiB of K/V or more: 8 chunks a thread (cpu.c, FDEC_CPU_STEAL_CHUNKS), LFM2's geometry */
            L = layer_of(64, 32, 8, 0, 0, FDEC_F16, 0), seq_len = 65536;
        else /* and an odd head_dim in a bf16 ring wrapped three times, a window of 50,000 */
            L = layer_of(100, 12, 4, 50000, 50037, FDEC_BF16, 0), seq_len = 3 * 50037 + 12345;
        fd_problem pr;
        if (fd_problem_make(&pr, &L, seq_len, layout, 1.0f, &r)) {
            check(0, "work stealing config %d could not be built: %s", i, fdec_last_error());
            continue;
        }
        fdec_plan_info info;
        fdec_plan(pool, &L, seq_len, &info);
        multi += info.num_chunks > 3;
        double *ref = malloc(sizeof(double) * pr.p.H * pr.p.D), *ref_lse = malloc(sizeof(double) * pr.p.H);
        fd_reference(&pr, ref, ref_lse);
        const size_t ob = (size_t)pr.p.H * pr.p.D * fdec_dtype_size(pr.p.ot);
        unsigned char *a = malloc(ob), *b = malloc(ob), *c = malloc(ob);
        inputs in;
        inputs_make(&in, &pr);
        double e = run_check_bytes(pool, "pool/3t", &pr, &in, ref, ref_lse, 1, a);
        e = fmax(e, run_check_bytes(rev, "reverse/3t", &pr, &in, ref, ref_lse, 1, b));
        e = fmax(e, run_check_bytes(race, "racing/3t", &pr, &in, ref, ref_lse, 1, c));
        inputs_free(&in);
        if (e / fd_tolerance(&pr) > worst) worst = e / fd_tolerance(&pr);
        char desc[256];
        const int ok = !memcmp(a, b, ob) && !memcmp(a, c, ob);
        check(ok, "work stealing: %s: pool, reverse and racing runs must give the same bytes", describe(&pr, desc, sizeof desc));
        same += ok;
        cases++;
        free(a), free(b), free(c), free(ref), free(ref_lse);
        fd_problem_free(&pr);
    }
    check(multi >= 2, "work stealing: %d of %d configurations have more chunks than threads", multi, cases);
    printf("work stealing: %d configurations (%d with more chunks than threads), %d the same bytes on 3 schedules, worst "
           "error %.2f of tolerance\n", cases, multi, same, worst);
    fdec_context_destroy(pool);
    fdec_context_destroy(rev);
    fdec_context_destroy(race);
}

/* One context used by two threads at once: a call made while the other thread's runs is refused with a clear
 * status (FDEC_EBACKEND, "busy"), never a race. Each thread makes 50 calls, retrying a refused one until it runs,
 * so every call runs in the end and the last result of each thread is checked against the reference. (Counting
 * only the first attempts, at least 50 of the 100 need not run: one thread can be refused many times during a
 * single call of the other, which on a loaded machine made an earlier version of this test fail.) */
typedef struct {
    fdec_context *ctx;
    fd_problem *pr;
    int busy, ok, other;
    float *out;
} conc_arg;

static void *conc_thread(void *x) {
    conc_arg *a = x;
    for (int i = 0; i < 50; i++)
        for (long tries = 0;; tries++) {
            fdec_status st =
                fdec_decode(a->ctx, &a->pr->layer, a->pr->seq_len, a->pr->q, a->pr->k, a->pr->v, a->out, NULL);
            if (st == FDEC_OK) {
                a->ok++;
                break;
            }
            if (st != FDEC_EBACKEND || !strstr(fdec_last_error(), "busy") || tries == 10000000) {
                a->other++;
                break;
            }
            a->busy++;
        }
    return NULL;
}

void test_concurrency(void) {
    fd_rng r = {41};
    fdec_layer L = layer_of(64, 8, 2, 0, 0, FDEC_F16, 0);
    fd_problem pr;
    fd_problem_make(&pr, &L, 4000, FD_DENSE, 1.0f, &r);
    const size_t n = (size_t)pr.p.H * pr.p.D;
    double *ref = malloc(sizeof(double) * n), *ref_lse = malloc(sizeof(double) * pr.p.H);
    fd_reference(&pr, ref, ref_lse);
    fdec_context *ctx;
    fdec_options o = fdec_default_options();
    o.threads = 1;
    fdec_context_create(FDEC_BACKEND_CPU, &o, &ctx);
    conc_arg a[2] = {{ctx, &pr, 0, 0, 0, malloc(n * 4)}, {ctx, &pr, 0, 0, 0, malloc(n * 4)}};
    pthread_t t;
    pthread_create(&t, NULL, conc_thread, &a[1]);
    conc_thread(&a[0]);
    pthread_join(t, NULL);
    double err = 0;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < n; i++) {
            const double e = fabs((double)a[k].out[i] - ref[i]);
            if (!(e <= err)) err = e; /* a NaN stays */
        }
    check(a[0].ok == 50 && a[1].ok == 50 && a[0].other == 0 && a[1].other == 0 && err <= fd_tolerance(&pr),
          "shared context: every call ran or was refused as busy and then ran (%d+%d ok, %d+%d busy refusals, "
          "%d+%d other statuses), results within tolerance (error %.3g, tolerance %.3g)",
          a[0].ok, a[1].ok, a[0].busy, a[1].busy, a[0].other, a[1].other, err, fd_tolerance(&pr));
    fdec_context_destroy(ctx);
    free(a[0].out);
    free(a[1].out);
    free(ref);
    free(ref_lse);
    fd_problem_free(&pr);
}


/* pool.c — the CPU backend's thread pool: n-1 workers made once per context, plus the calling thread.
 *
 * A run publishes (fn, task, n) and a ticket = (generation << 32 | next index). Every participant takes
 * indices by compare-and-swap on the ticket until they run out, so work is shared without locks; a run ends by
 * closing its ticket, so that a worker that wakes late can never take an index of a later run (drain). Workers spin briefly after a run (the next layer's
 * call usually follows within microseconds), then sleep on a condition variable. */
#include "cpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ volatile("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long a worker spins for the next run before it sleeps. A futex wake-up costs tens of microseconds on the
 * VMs measured here, as much as a whole 1k-context call, while the next layer's call usually comes within
 * this (TUNING.md). Counted in time, not iterations: a pause lasts 8 to 140 cycles across x86 cores. */
#define SPIN_NS 300000

struct fdec_pool {
    uint32_t nworkers;
    pthread_t *threads;
    _Atomic uint64_t ticket;
    _Atomic(fdec_task_fn) fn;
    _Atomic(void *) task;
    _Atomic uint32_t n;
    _Atomic uint32_t done;
    _Atomic uint32_t sleepers;
    _Atomic int quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* The ticket of a run whose indices are all taken: its generation with the index past any n, so that no late
 * participant can take an index from it, whatever n it read. */
static uint64_t closed(uint32_t gen) { return (uint64_t)gen << 32 | UINT32_MAX; }

/* Takes and runs indices of generation `gen` until none are left.
 *
 * Why a late worker never runs a task of another run with this run's values: fn, task and n are loaded after the
 * ticket showed generation gen (worker()), and fdec_pool_run stores a run's fn, task and n before its ticket, so the
 * values read are gen's or a later run's. A later run's are stored only after gen's run has ended, and a run ends by
 * closing its ticket (closed(gen)) before the next run's stores. So if the values read are a later run's, every
 * ticket this drain can read afterwards is closed(gen) or of another generation, and the compare-and-swap below
 * (which takes an index only from a ticket of generation gen with an index below n) never succeeds: indices are
 * taken only while the ticket is open, and an open ticket of generation gen means the values read are gen's. Each
 * index taken is counted once in `done`, so fdec_pool_run's wait ends only after every task of its run returned. */
static void drain(fdec_pool *p, uint32_t gen) {
    fdec_task_fn fn = atomic_load_explicit(&p->fn, memory_order_acquire);
    void *task = atomic_load_explicit(&p->task, memory_order_acquire);
    uint32_t n = atomic_load_explicit(&p->n, memory_order_acquire);
    uint64_t t = atomic_load(&p->ticket);
    while ((uint32_t)(t >> 32) == gen && (uint32_t)t < n) {
        if (atomic_compare_exchange_weak(&p->ticket, &t, t + 1)) {
            fn(task, (uint32_t)t, n);
            atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
            t = atomic_load(&p->ticket);
        }
    }
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *worker(void *arg) {
    fdec_pool *p = arg;
    uint32_t seen = 0;
    for (;;) {
        uint32_t gen;
        unsigned spins = 0;
        int64_t until = now_ns() + SPIN_NS;
        while ((gen = (uint32_t)(atomic_load(&p->ticket) >> 32)) == seen && !atomic_load(&p->quit)) {
            if (++spins % 64 || now_ns() < until) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((uint32_t)(atomic_load(&p->ticket) >> 32) == seen && !atomic_load(&p->quit))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = gen;
        drain(p, gen);
    }
}

static void wake_all(fdec_pool *p) {
    if (atomic_load(&p->sleepers) == 0) return;
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

fdec_pool *fdec_pool_create(uint32_t threads) {
    fdec_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->nworkers = threads > 1 ? threads - 1 : 0;
    atomic_init(&p->ticket, closed(0));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc(p->nworkers ? p->nworkers : 1, sizeof *p->threads);
    if (!p->threads) {
        fdec_pool_destroy(p);
        return NULL;
    }
    for (uint32_t i = 0; i < p->nworkers; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p)) {
            p->nworkers = i;
            fdec_pool_destroy(p);
            return NULL;
        }
    }
    return p;
}

void fdec_pool_destroy(fdec_pool *p) {
    if (!p) return;
    atomic_store(&p->quit, 1);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t i = 0; i < p->nworkers; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

void fdec_pool_run(fdec_pool *p, fdec_task_fn fn, void *task, uint32_t n) {
    if (p->nworkers == 0 || n <= 1) {
        for (uint32_t i = 0; i < n; i++) fn(task, i, n);
        return;
    }
    uint32_t gen = (uint32_t)(atomic_load(&p->ticket) >> 32) + 1;
    atomic_store(&p->fn, fn);
    atomic_store(&p->task, task);
    atomic_store(&p->n, n);
    atomic_store(&p->done, 0);
    atomic_store(&p->ticket, (uint64_t)gen << 32);
    wake_all(p);
    drain(p, gen);
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n) CPU_RELAX();
    atomic_store(&p->ticket, closed(gen)); /* before the next run's fn, task and n (drain) */
}

/*
 * threadpool.c — a fixed pool of worker threads that run one function on all
 * threads at once, fork-join style: kvb_threadpool_run(tp, fn, arg) calls
 * fn(ith, nth, arg) on every thread (the caller is ith 0) and returns when all
 * have finished. Ops split their rows by (ith, nth) themselves; the pool knows
 * no math.
 *
 * Dispatch latency matters: a decode step calls run() once per layer, so a
 * 32-layer model dispatches ~32 times per token. Workers therefore spin on an
 * atomic generation counter for a short while (~50 us) before sleeping on a
 * condition variable; the caller spins on an atomic completion count.
 */
#include "core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERS 20000

struct kvb_threadpool {
    int32_t n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint_fast64_t generation; /* bumped per run */
    atomic_int n_done;
    atomic_bool stop;
    void (*fn)(int32_t, int32_t, void *);
    void *arg;
    struct worker_arg *args; /* [n_threads], owned by the pool: a worker touches no allocator */
};

struct worker_arg {
    struct kvb_threadpool *tp;
    int32_t ith;
};

static void *worker_main(void *p) {
    const struct worker_arg wa = *(const struct worker_arg *)p;
    struct kvb_threadpool *tp = wa.tp;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen &&
               !atomic_load(&tp->stop)) {
            if (++spins < SPIN_ITERS) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&tp->mu);
            while (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = g;
        tp->fn(wa.ith, tp->n_threads, tp->arg);
        atomic_fetch_add_explicit(&tp->n_done, 1, memory_order_acq_rel);
    }
}

kvb_status kvb_threadpool_init(int32_t n_threads, struct kvb_threadpool **out) {
    if (n_threads < 1 || n_threads > 1024)
        return kvb_fail(KVB_ERR_INVALID, "threadpool: n_threads must be in 1..1024, got %d", (int)n_threads);
    struct kvb_threadpool *tp = kvb_calloc(1, sizeof *tp);
    if (!tp) return kvb_fail(KVB_ERR_NOMEM, "threadpool: out of memory");
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->n_done, 0);
    atomic_init(&tp->stop, false);
    if (n_threads > 1) {
        tp->threads = kvb_calloc((size_t)n_threads, sizeof(pthread_t));
        tp->args = kvb_calloc((size_t)n_threads, sizeof(struct worker_arg));
        if (!tp->threads || !tp->args) {
            kvb_free(tp->threads);
            kvb_free(tp->args);
            pthread_mutex_destroy(&tp->mu);
            pthread_cond_destroy(&tp->cv);
            kvb_free(tp);
            return kvb_fail(KVB_ERR_NOMEM, "threadpool: out of memory");
        }
        for (int32_t i = 1; i < n_threads; i++) {
            tp->args[i].tp = tp;
            tp->args[i].ith = i;
            if (pthread_create(&tp->threads[i], NULL, worker_main, &tp->args[i]) != 0) {
                tp->n_threads = i; /* workers 1..i-1 are running: join them */
                kvb_threadpool_free(tp);
                return kvb_fail(KVB_ERR_NOMEM, "threadpool: cannot start %d threads", (int)n_threads);
            }
        }
    }
    *out = tp;
    return KVB_OK;
}

void kvb_threadpool_free(struct kvb_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, true);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int32_t i = 1; i < tp->n_threads; i++) pthread_join(tp->threads[i], NULL);
    kvb_free(tp->threads);
    kvb_free(tp->args);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    kvb_free(tp);
}

int32_t kvb_threadpool_n_threads(const struct kvb_threadpool *tp) { return tp ? tp->n_threads : 1; }

void kvb_threadpool_run(struct kvb_threadpool *tp, void (*fn)(int32_t, int32_t, void *), void *arg) {
    if (!tp || tp->n_threads == 1) {
        fn(0, 1, arg);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store(&tp->n_done, 0);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    fn(0, tp->n_threads, arg);
    int spins = 0;
    while (atomic_load_explicit(&tp->n_done, memory_order_acquire) < tp->n_threads - 1) {
        if (++spins < SPIN_ITERS) CPU_RELAX();
        else sched_yield();
    }
}

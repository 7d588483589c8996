/*
 * threadpool.c — a fixed pool of worker threads that run one function on all
 * threads at once, fork-join style: kvb_threadpool_run(tp, fn, arg) calls
 * fn(ith, nth, arg) on every thread (the caller is ith 0) and returns when all
 * have finished. Ops split their rows by (ith, nth) themselves; the pool knows
 * no math. One thread at a time calls run.
 *
 * Dispatch latency matters: a decode step runs the pool several times per
 * layer (~110 runs per token for a 22-layer model), so both waits spin
 * first, for a bounded time, and then sleep:
 *
 *   - a worker waiting for the next run spins on the generation word for
 *     WORKER_SPIN_NS, then sleeps on it (a futex on Linux); the caller sends
 *     a wake only when some worker sleeps;
 *   - the caller waiting for the join spins for JOIN_SPIN_NS, then sleeps;
 *     the last worker to leave wakes it.
 *
 * The bounds are in time, not iterations (a pause costs 10 to 140 cycles
 * depending on the core), and time spent descheduled counts against them.
 * Every YIELD_NS of spinning the thread calls sched_yield: on a busy machine
 * the scheduler often puts both of our threads on one core (a neighbour
 * holds the other), and a spinning thread would hold that core from the
 * thread it waits for until the next tick (4 ms at HZ=250). On a quiet
 * machine the spins cover the gaps between runs, so no syscall is made.
 *
 * kvb_threadpool_run_shared (core.h) is the run for work that threads claim
 * from counters (the matmuls): there a worker takes part only if it comes
 * before the caller's own fn has returned, and the caller waits only for
 * the workers that came. A worker that is descheduled, or queued behind
 * another process, when the run is posted then costs nothing; with a fixed
 * split its share would wait for it. The run word holds the run's tag (its
 * generation), whether it is exact or shared, whether a shared run has
 * closed, and how many workers are inside fn; a worker enters a shared run
 * by a compare-and-swap that fails once the caller has closed it.
 *
 * Without futexes (not Linux, or KVB_POOL_CONDVAR defined) the sleeps are on
 * one mutex and condition variable; the protocol is the same.
 */
#if defined(__linux__) && !defined(KVB_POOL_CONDVAR)
#define _DEFAULT_SOURCE /* syscall */
#define KVB_POOL_FUTEX 1
#else
#define KVB_POOL_FUTEX 0
#endif

#include "core.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#if KVB_POOL_FUTEX
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

#define WORKER_SPIN_NS 100000 /* a worker's spin for the next run before it sleeps */
#define JOIN_SPIN_NS 50000    /* the caller's spin for the join before it sleeps */
#define SPIN_CHECK 32         /* pauses between looks at the clock */
#define YIELD_NS 5000         /* spinning between sched_yield calls */

_Static_assert(sizeof(atomic_uint) == sizeof(uint32_t), "a futex word is 32 bits");

/* The run word: which run it is (a tag of its generation), whether it is
 * an exact run (every worker takes part) or a shared one, whether a shared
 * run is closed to newcomers, and how many workers are inside fn. */
#define ACTIVE_MASK 0x7ffu /* up to 2047 workers inside fn */
#define CLOSED 0x800u
#define EXACT 0x1000u
#define TAG_SHIFT 13
#define TAG(g) ((unsigned)(g) << TAG_SHIFT)
#define TAG_OF(s) ((s) & ~((1u << TAG_SHIFT) - 1))

struct kvb_threadpool {
    int32_t n_threads;
    pthread_t *threads;
    struct worker_arg *args; /* [n_threads], owned by the pool: a worker touches no allocator */
    void (*fn)(int32_t, int32_t, void *);
    void *arg;
    char pad0[64];
    atomic_uint generation; /* bumped per run (and at free); workers wait on it */
    atomic_int n_sleeping;  /* workers asleep on generation, or about to be */
    atomic_bool stop;
    char pad1[64];
    atomic_uint run;        /* the run word (above); the caller waits on it for a shared run */
    atomic_uint pending;    /* an exact run's workers not yet done; the caller waits on it */
    atomic_int caller_asleep;
    char pad2[64];
#if !KVB_POOL_FUTEX
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
};

struct worker_arg {
    struct kvb_threadpool *tp;
    int32_t ith;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Sleeps while *w == v (it may return early: callers look again). */
static void word_wait(struct kvb_threadpool *tp, atomic_uint *w, unsigned v) {
#if KVB_POOL_FUTEX
    (void)tp;
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
#else
    pthread_mutex_lock(&tp->mu);
    while (atomic_load(w) == v) pthread_cond_wait(&tp->cv, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
#endif
}

/* Wakes the sleepers on w (after *w changed). */
static void word_wake(struct kvb_threadpool *tp, atomic_uint *w) {
#if KVB_POOL_FUTEX
    (void)tp;
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)w;
    pthread_mutex_lock(&tp->mu); /* a waiter is either before its look (and sees the change) or in cond_wait */
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
#endif
}

/* A bounded spin: pauses, a look at the clock every SPIN_CHECK of them, a
 * sched_yield every YIELD_NS (a thread of ours that shares this core and is
 * runnable gets it at once); false once ns have passed. */
struct spin {
    int64_t t0, ty;
    int i;
};
static bool spin_on(struct spin *sp, int64_t ns) {
    CPU_RELAX();
    if (++sp->i % SPIN_CHECK) return true;
    const int64_t t = now_ns();
    if (!sp->t0) sp->t0 = sp->ty = t;
    if (t - sp->t0 > ns) return false;
    if (t - sp->ty > YIELD_NS) {
        sched_yield();
        sp->ty = t;
    }
    return true;
}

/* The caller's wait until (*w & mask) == 0: a spin, then sleeps, woken by
 * the worker that makes it 0 (it sees caller_asleep). */
static void join_wait(struct kvb_threadpool *tp, atomic_uint *w, unsigned mask) {
    unsigned x;
    struct spin sp = {0, 0, 0};
    while (((x = atomic_load_explicit(w, memory_order_acquire)) & mask) && spin_on(&sp, JOIN_SPIN_NS)) {}
    if (!(x & mask)) return;
    /* announce the sleep before the last look: a worker leaves (changes *w)
     * before it reads caller_asleep (both seq_cst), so either it sees this
     * and wakes us or the look below sees its change */
    atomic_store(&tp->caller_asleep, 1);
    while ((x = atomic_load(w)) & mask) word_wait(tp, w, x);
    atomic_store(&tp->caller_asleep, 0);
}

static void *worker_main(void *p) {
    const struct worker_arg wa = *(const struct worker_arg *)p;
    struct kvb_threadpool *tp = wa.tp;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        struct spin sp = {0, 0, 0};
        while ((g = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen && spin_on(&sp, WORKER_SPIN_NS)) {}
        if (g == seen) {
            /* the same pairing: the caller bumps the generation before it
             * reads n_sleeping, this sleeper counts itself before its look */
            atomic_fetch_add(&tp->n_sleeping, 1);
            while ((g = atomic_load(&tp->generation)) == seen) word_wait(tp, &tp->generation, seen);
            atomic_fetch_sub(&tp->n_sleeping, 1);
        }
        seen = g;
        if (atomic_load_explicit(&tp->stop, memory_order_acquire)) return NULL;
        /* the run word as it was while the generation was still g: g's, or
         * the next run's being posted (then its generation follows) */
        unsigned s = atomic_load_explicit(&tp->run, memory_order_acquire);
        if (TAG_OF(s) != TAG(g) || atomic_load_explicit(&tp->generation, memory_order_acquire) != g) continue;
        if (s & EXACT) { /* the caller waits for this worker: fn and arg stay put */
            tp->fn(wa.ith, tp->n_threads, tp->arg);
            if (atomic_fetch_sub(&tp->pending, 1) == 1 && atomic_load(&tp->caller_asleep)) word_wake(tp, &tp->pending);
            continue;
        }
        /* a shared run: come in unless it has closed (or moved on) */
        while (TAG_OF(s) == TAG(g) && !(s & CLOSED) &&
               !atomic_compare_exchange_weak_explicit(&tp->run, &s, s + 1, memory_order_acquire, memory_order_acquire)) {}
        if (TAG_OF(s) != TAG(g) || (s & CLOSED)) continue;
        tp->fn(wa.ith, tp->n_threads, tp->arg);
        s = atomic_fetch_sub(&tp->run, 1);
        if ((s & ACTIVE_MASK) == 1 && (s & CLOSED) && atomic_load(&tp->caller_asleep)) word_wake(tp, &tp->run);
    }
}

kvb_status kvb_threadpool_init(int32_t n_threads, struct kvb_threadpool **out) {
    if (n_threads < 1 || n_threads > 1024)
        return kvb_fail(KVB_ERR_INVALID, "threadpool: n_threads must be in 1..1024, got %d", (int)n_threads);
    struct kvb_threadpool *tp = kvb_calloc(1, sizeof *tp);
    if (!tp) return kvb_fail(KVB_ERR_NOMEM, "threadpool: out of memory");
    tp->n_threads = n_threads;
#if !KVB_POOL_FUTEX
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
#endif
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->n_sleeping, 0);
    atomic_init(&tp->stop, false);
    atomic_init(&tp->run, 0);
    atomic_init(&tp->pending, 0);
    atomic_init(&tp->caller_asleep, 0);
    if (n_threads > 1) {
        tp->threads = kvb_calloc((size_t)n_threads, sizeof(pthread_t));
        tp->args = kvb_calloc((size_t)n_threads, sizeof(struct worker_arg));
        if (!tp->threads || !tp->args) {
            tp->n_threads = 1; /* no workers to stop */
            kvb_threadpool_free(tp);
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
    atomic_store_explicit(&tp->stop, true, memory_order_release);
    atomic_fetch_add(&tp->generation, 1); /* a run that is no run: workers see stop and leave */
    word_wake(tp, &tp->generation);
    for (int32_t i = 1; i < tp->n_threads; i++) pthread_join(tp->threads[i], NULL);
    kvb_free(tp->threads);
    kvb_free(tp->args);
#if !KVB_POOL_FUTEX
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
#endif
    kvb_free(tp);
}

int32_t kvb_threadpool_n_threads(const struct kvb_threadpool *tp) { return tp ? tp->n_threads : 1; }

/* Publishes a run (fn, arg and the run word before the generation) and
 * wakes the workers that sleep. */
static void post(struct kvb_threadpool *tp, void (*fn)(int32_t, int32_t, void *), void *arg, bool exact) {
    tp->fn = fn;
    tp->arg = arg;
    const unsigned g = atomic_load_explicit(&tp->generation, memory_order_relaxed) + 1; /* only the caller bumps it */
    if (exact) atomic_store_explicit(&tp->pending, (unsigned)(tp->n_threads - 1), memory_order_relaxed);
    atomic_store_explicit(&tp->run, TAG(g) | (exact ? EXACT : 0), memory_order_release);
    atomic_store(&tp->generation, g);
    if (atomic_load(&tp->n_sleeping) > 0) word_wake(tp, &tp->generation);
}

void kvb_threadpool_run(struct kvb_threadpool *tp, void (*fn)(int32_t, int32_t, void *), void *arg) {
    if (!tp || tp->n_threads == 1) {
        fn(0, 1, arg);
        return;
    }
    post(tp, fn, arg, true);
    fn(0, tp->n_threads, arg);
    join_wait(tp, &tp->pending, UINT_MAX);
}

void kvb_threadpool_run_shared(struct kvb_threadpool *tp, void (*fn)(int32_t, int32_t, void *), void *arg) {
    if (!tp || tp->n_threads == 1) {
        fn(0, 1, arg);
        return;
    }
    post(tp, fn, arg, false);
    fn(0, tp->n_threads, arg); /* returns when nothing is left to claim */
    if (atomic_fetch_or(&tp->run, CLOSED) & ACTIVE_MASK) join_wait(tp, &tp->run, ACTIVE_MASK);
}

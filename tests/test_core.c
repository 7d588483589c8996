/* test_core.c — f16 conversion, CRC-32, status strings, thread pool. */
#include "testing.h"
#include "core/core.h"
#include "ops/ops.h"

#include <stdatomic.h>
#include <time.h>

TEST(f16_roundtrip_every_half) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kvb_f16_to_f32((uint16_t)h);
        uint16_t back = kvb_f32_to_f16(f);
        if (f != f) { /* NaN stays NaN */
            CHECK((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
            continue;
        }
        if (back != h) FAILF("half 0x%04x -> %g -> 0x%04x", h, (double)f, back);
    }
}

TEST(f16_known_values) {
    CHECK_EQ_INT(kvb_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ_INT(kvb_f32_to_f16(-2.0f), 0xc000);
    CHECK_EQ_INT(kvb_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ_INT(kvb_f32_to_f16(65520.0f), 0x7c00);      /* rounds to inf */
    CHECK_EQ_INT(kvb_f32_to_f16(5.960464477539063e-8f), 0x0001); /* smallest subnormal */
    CHECK_EQ_INT(kvb_f32_to_f16(2.98023223876953125e-8f), 0x0000); /* half of it: ties to even -> 0 */
    CHECK_EQ_INT(kvb_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie -> even */
    CHECK_EQ_INT(kvb_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02); /* tie -> even (up) */
    CHECK_NEAR(kvb_f16_to_f32(0x3555), 0.333251953125, 0);
}

/* Every kernel family's f16 conversion equals the scalar one, bit for bit. */
TEST(f16_kernels_match_scalar) {
    const struct kvb_kernels *fams[3] = {&kvb_kernels_ref, NULL, NULL};
#if defined(__x86_64__)
    if (kvb_cpu_has_avx2()) fams[1] = &kvb_kernels_avx2;
    if (kvb_cpu_has_avx512()) fams[2] = &kvb_kernels_avx512;
#endif
    unsigned long long rs = 7;
    enum { N = 4099 };
    static float src[N], back[N];
    static uint16_t h[N];
    for (int i = 0; i < N; i++) {
        float scale = (float)pow(2.0, (double)((int)(t_rng_next(&rs) % 40) - 28));
        src[i] = t_randf(&rs) * scale;
    }
    for (int f = 0; f < 3; f++) {
        if (!fams[f]) continue;
        fams[f]->to_f16(src, h, N);
        for (int i = 0; i < N; i++)
            if (h[i] != kvb_f32_to_f16(src[i])) FAILF("%s to_f16(%g) = 0x%04x, scalar 0x%04x", fams[f]->name, (double)src[i], h[i], kvb_f32_to_f16(src[i]));
        fams[f]->from_f16(h, back, N);
        for (int i = 0; i < N; i++)
            if (back[i] != kvb_f16_to_f32(h[i])) FAILF("%s from_f16 mismatch at %d", fams[f]->name, i);
    }
}

TEST(crc32_check_value) {
    CHECK_EQ_INT(kvb_crc32(0, "123456789", 9), 0xCBF43926u);
    uint32_t part = kvb_crc32(0, "12345", 5);
    CHECK_EQ_INT(kvb_crc32(part, "6789", 4), 0xCBF43926u);
}

TEST(status_strings) {
    CHECK(strcmp(kvb_status_str(KVB_OK), "ok") == 0);
    CHECK(strcmp(kvb_status_str(KVB_ERR_CORRUPT), "corrupt input") == 0);
    CHECK(strcmp(kvb_status_str((kvb_status)-99), "unknown status") == 0);
    CHECK_STATUS(kvb_threadpool_init(0, NULL), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "n_threads") != NULL);
}

struct tp_arg {
    atomic_int seen[8];
    atomic_int calls;
};
static void tp_fn(int32_t ith, int32_t nth, void *p) {
    struct tp_arg *a = p;
    if (nth == 3 && ith < 8) atomic_fetch_add(&a->seen[ith], 1);
    atomic_fetch_add(&a->calls, 1);
}

TEST(threadpool_runs_every_thread) {
    struct kvb_threadpool *tp;
    CHECK_OK(kvb_threadpool_init(3, &tp));
    struct tp_arg a;
    memset(&a, 0, sizeof a);
    for (int r = 0; r < 1000; r++) kvb_threadpool_run(tp, tp_fn, &a);
    kvb_threadpool_free(tp);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(atomic_load(&a.seen[i]), 1000);
    CHECK_EQ_INT(atomic_load(&a.calls), 3000);
    kvb_threadpool_run(NULL, tp_fn, &a); /* NULL pool runs inline */
    CHECK_EQ_INT(atomic_load(&a.calls), 3001);
}

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of every thread of the process. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {}
}

/* One thread (slow) sleeps in fn; every thread records that it ran and
 * that it finished, so a join that returns early leaves a 0 in done. */
struct tp_slow {
    int32_t slow, nth, ms;
    atomic_int ran[8], done[8], bad_nth;
};
static void tp_slow_fn(int32_t ith, int32_t nth, void *p) {
    struct tp_slow *a = p;
    if (nth != a->nth || ith < 0 || ith >= nth) { atomic_fetch_add(&a->bad_nth, 1); return; }
    atomic_fetch_add(&a->ran[ith], 1);
    if (ith == a->slow) sleep_ms(a->ms);
    atomic_store(&a->done[ith], 1);
}

/* A run waits for a thread that sleeps 50 ms (a worker, or the caller
 * itself), each thread runs once per run, and the caller does not burn a
 * core while it waits: the process's CPU time over a run whose worker sleeps
 * 200 ms stays far below the wall time (a join that spins uses ~100%). */
TEST(threadpool_joins_a_sleeping_thread) {
    for (int32_t nth = 2; nth <= 4; nth += 2) {
        struct kvb_threadpool *tp;
        CHECK_OK(kvb_threadpool_init(nth, &tp));
        for (int32_t slow = 0; slow < nth; slow++) {
            struct tp_slow a;
            memset(&a, 0, sizeof a);
            a.slow = slow;
            a.nth = nth;
            a.ms = 50;
            const double w0 = wall_s();
            kvb_threadpool_run(tp, tp_slow_fn, &a);
            const double w = wall_s() - w0;
            for (int32_t i = 0; i < nth; i++) {
                if (atomic_load(&a.ran[i]) != 1 || atomic_load(&a.done[i]) != 1)
                    FAILF("nth %d, slow %d: thread %d ran %d times, done %d", (int)nth, (int)slow, (int)i, atomic_load(&a.ran[i]),
                          atomic_load(&a.done[i]));
            }
            CHECK_EQ_INT(atomic_load(&a.bad_nth), 0);
            if (w < 0.049) FAILF("a run with a 50 ms thread returned after %.4f s", w);
        }
        /* the join sleeps: worker nth-1 sleeps 200 ms, everyone else is idle */
        struct tp_slow a;
        memset(&a, 0, sizeof a);
        a.slow = nth - 1;
        a.nth = nth;
        a.ms = 200;
        const double c0 = cpu_s(), w0 = wall_s();
        kvb_threadpool_run(tp, tp_slow_fn, &a);
        const double c = cpu_s() - c0, w = wall_s() - w0;
        for (int32_t i = 0; i < nth; i++) CHECK_EQ_INT(atomic_load(&a.done[i]), 1);
        if (c > 0.25 * w) FAILF("nth %d: %.3f s of CPU over a %.3f s join", (int)nth, c, w);
        kvb_threadpool_free(tp);
    }
}

/* Between runs the workers sleep: 300 ms after a run the process has used
 * a small part of one core, whatever the number of workers. */
TEST(threadpool_idle_workers_sleep) {
    struct kvb_threadpool *tp;
    CHECK_OK(kvb_threadpool_init(4, &tp));
    struct tp_arg a;
    memset(&a, 0, sizeof a);
    kvb_threadpool_run(tp, tp_fn, &a);
    const double c0 = cpu_s(), w0 = wall_s();
    sleep_ms(300);
    const double c = cpu_s() - c0, w = wall_s() - w0;
    if (c > 0.25 * w) FAILF("%.3f s of CPU over %.3f s idle with 3 workers", c, w);
    kvb_threadpool_run(tp, tp_fn, &a); /* and they wake for the next run */
    CHECK_EQ_INT(atomic_load(&a.calls), 8);
    kvb_threadpool_free(tp);
}

/* Many runs back to back, some with idle gaps long enough for the workers
 * to fall asleep: each writes its rows of y with the run's number and the
 * caller reads every row right after the join. */
struct tp_rows {
    int64_t r;
    int32_t y[1000];
};
static void tp_rows_fn(int32_t ith, int32_t nth, void *p) {
    struct tp_rows *a = p;
    const int32_t per = (1000 + nth - 1) / nth;
    for (int32_t i = per * ith; i < per * (ith + 1) && i < 1000; i++) a->y[i] = (int32_t)(a->r * 7 + i);
}

TEST(threadpool_rapid_runs_see_all_rows) {
    static struct tp_rows a;
    for (int32_t nth = 2; nth <= 5; nth += 3) {
        struct kvb_threadpool *tp;
        CHECK_OK(kvb_threadpool_init(nth, &tp));
        for (a.r = 0; a.r < 3000; a.r++) {
            if (a.r % 1000 == 999) sleep_ms(5); /* the workers fall asleep */
            kvb_threadpool_run(tp, tp_rows_fn, &a);
            for (int32_t i = 0; i < 1000; i++)
                if (a.y[i] != (int32_t)(a.r * 7 + i)) FAILF("nth %d, run %lld: y[%d] = %d", (int)nth, (long long)a.r, (int)i, (int)a.y[i]);
        }
        kvb_threadpool_free(tp);
    }
    /* a pool freed at once, and one freed with its workers asleep */
    struct kvb_threadpool *tp;
    CHECK_OK(kvb_threadpool_init(3, &tp));
    kvb_threadpool_free(tp);
    CHECK_OK(kvb_threadpool_init(3, &tp));
    sleep_ms(20);
    kvb_threadpool_free(tp);
}

/* A shared run: threads claim items from a counter. open is set only while
 * the caller is inside kvb_threadpool_run_shared, so a thread that entered
 * fn after the run returned (a late worker let in) would be seen. */
struct tp_claim {
    atomic_int next, open, inside, late, bad, calls, slow_ith;
    atomic_int by[8];
    int32_t nth;
    unsigned char done[4096];
};
static void tp_claim_fn(int32_t ith, int32_t nth, void *p) {
    struct tp_claim *a = p;
    atomic_fetch_add(&a->inside, 1);
    if (!atomic_load(&a->open)) atomic_fetch_add(&a->late, 1);
    if (nth != a->nth || ith < 0 || ith >= nth || atomic_fetch_add(&a->by[ith], 1) != 0) atomic_fetch_add(&a->bad, 1);
    atomic_fetch_add(&a->calls, 1);
    for (int i; (i = atomic_fetch_add(&a->next, 1)) < 4096;) {
        if (ith == atomic_load(&a->slow_ith) && i % 512 == 0) sleep_ms(2); /* a slow thread holds its item */
        a->done[i]++;
    }
    atomic_fetch_sub(&a->inside, 1);
}

/* Shared runs, alternated with exact ones: every item done exactly once,
 * each thread in fn at most once per run (and the caller always), no
 * thread inside fn when the run returns, none let in afterwards; an exact
 * run still runs every thread once. */
TEST(threadpool_shared_runs) {
    static struct tp_claim a;
    for (int32_t nth = 2; nth <= 4; nth += 2) {
        struct kvb_threadpool *tp;
        CHECK_OK(kvb_threadpool_init(nth, &tp));
        int workers_came = 0;
        for (int r = 0; r < 2000; r++) {
            memset(&a, 0, sizeof a);
            a.nth = nth;
            atomic_store(&a.slow_ith, r % 50 == 0 ? r / 50 % nth : -1);
            if (r % 500 == 499) sleep_ms(5); /* the workers fall asleep */
            atomic_store(&a.open, 1);
            kvb_threadpool_run_shared(tp, tp_claim_fn, &a);
            atomic_store(&a.open, 0);
            CHECK_EQ_INT(atomic_load(&a.inside), 0);
            CHECK_EQ_INT(atomic_load(&a.bad), 0);
            CHECK_EQ_INT(atomic_load(&a.by[0]), 1);
            for (int i = 0; i < 4096; i++)
                if (a.done[i] != 1) FAILF("nth %d, run %d: item %d done %d times", (int)nth, r, i, a.done[i]);
            workers_came += atomic_load(&a.calls) > 1;
            struct tp_arg e;
            memset(&e, 0, sizeof e);
            kvb_threadpool_run(tp, tp_fn, &e);
            CHECK_EQ_INT(atomic_load(&e.calls), nth);
        }
        sleep_ms(20); /* a worker still on its way to a closed run must not enter it */
        CHECK_EQ_INT(atomic_load(&a.late), 0);
        CHECK_EQ_INT(atomic_load(&a.inside), 0);
        kvb_threadpool_free(tp);
        CHECK(workers_came > 0); /* the workers do take part */
    }
    memset(&a, 0, sizeof a); /* no pool: inline, nth 1 */
    a.nth = 1;
    atomic_store(&a.slow_ith, -1);
    atomic_store(&a.open, 1);
    kvb_threadpool_run_shared(NULL, tp_claim_fn, &a);
    CHECK_EQ_INT(atomic_load(&a.calls), 1);
    CHECK_EQ_INT(a.done[4095], 1);
}

int main(void) {
    RUN(f16_roundtrip_every_half);
    RUN(f16_known_values);
    RUN(f16_kernels_match_scalar);
    RUN(crc32_check_value);
    RUN(status_strings);
    RUN(threadpool_runs_every_thread);
    RUN(threadpool_joins_a_sleeping_thread);
    RUN(threadpool_idle_workers_sleep);
    RUN(threadpool_rapid_runs_see_all_rows);
    RUN(threadpool_shared_runs);
    return test_summary();
}

/* test_core.c — f16 conversion, CRC-32, status strings, thread pool, the
 * string builder and its JSON string writer. */
#include "testing.h"
#include "families.h"
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
    const struct kvb_kernels *fams[5] = {&kvb_kernels_ref, NULL, NULL, NULL, NULL};
    const struct kvb_family *fam[4];
    for (int i = 0, n = t_fast_families(fam, 4); i < n; i++) fams[1 + i] = fam[i]->attn;
    unsigned long long rs = 7;
    enum { N = 4099 };
    static float src[N], back[N];
    static uint16_t h[N];
    for (int i = 0; i < N; i++) {
        float scale = (float)pow(2.0, (double)((int)(t_rng_next(&rs) % 40) - 28));
        src[i] = t_randf(&rs) * scale;
    }
    for (int f = 0; f < 5; f++) {
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


/* ---- the string builder (kvb_str) ---- */

TEST(str_builder_grows_and_stays_terminated) {
    struct kvb_str b = {0};
    CHECK(b.p == NULL);
    kvb_str_put(&b, "", 0); /* an empty append still gives a string */
    CHECK(b.p != NULL && b.n == 0 && b.p[0] == 0);
    char want[5001];
    for (int i = 0; i < 5000; i++) {
        const char c = (char)('a' + i % 26);
        if (i % 3 == 0) kvb_str_putc(&b, c);
        else if (i % 3 == 1) kvb_str_put(&b, &c, 1);
        else { char s[2] = {c, 0}; kvb_str_puts(&b, s); }
        want[i] = c;
    }
    want[5000] = 0;
    CHECK_EQ_INT(kvb_str_error(&b), KVB_OK);
    CHECK_EQ_INT(b.n, 5000);
    CHECK(b.cap > b.n && strcmp(b.p, want) == 0);
    size_t len = 1;
    char *t = kvb_str_finish(&b, &len);
    CHECK(t && len == 5000 && !strcmp(t, want));
    CHECK(b.p == NULL && b.n == 0 && b.cap == 0);
    kvb_buffer_free(t);
    t = kvb_str_finish(&b, &len); /* an empty builder hands over "" */
    CHECK(t && len == 0 && t[0] == 0);
    kvb_buffer_free(t);
}

TEST(str_printf_past_1kib) {
    struct kvb_str b = {0};
    kvb_str_printf(&b, "%d-%s", 42, "x");
    CHECK(!strcmp(b.p, "42-x"));
    char big[3000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = 0;
    kvb_str_printf(&b, "[%s|%05d]", big, 7); /* past the room, and past 1 KiB */
    CHECK_EQ_INT(kvb_str_error(&b), KVB_OK);
    CHECK_EQ_INT(b.n, 4 + 1 + 2999 + 7);
    CHECK(!memcmp(b.p + 5, big, 2999) && !strcmp(b.p + 5 + 2999, "|00007]"));
    kvb_str_printf(&b, "%s", ""); /* nothing, and still terminated */
    CHECK_EQ_INT(b.n, 4 + 1 + 2999 + 7);
    kvb_str_free(&b);
    CHECK(b.p == NULL && b.n == 0);
}

TEST(str_limit_recorded_once) {
    struct kvb_str b = {.limit = 10};
    kvb_str_put(&b, "0123456789", 10); /* exactly the limit */
    CHECK_EQ_INT(kvb_str_error(&b), KVB_OK);
    kvb_str_putc(&b, 'x');
    CHECK_EQ_INT(kvb_str_error(&b), KVB_ERR_INVALID);
    CHECK(b.n == 10 && !strcmp(b.p, "0123456789"));
    b.limit = 0; /* even with room again, a failed builder takes nothing */
    kvb_str_puts(&b, "more");
    kvb_str_printf(&b, "%d", 5);
    CHECK(b.n == 10 && !strcmp(b.p, "0123456789"));
    struct kvb_str c = {.limit = 8};
    kvb_str_puts(&c, "ab");
    kvb_str_printf(&c, "%s", "cdefghij"); /* fits the room, not the limit */
    CHECK_EQ_INT(kvb_str_error(&c), KVB_ERR_INVALID);
    CHECK(c.n == 2 && !strcmp(c.p, "ab"));
    CHECK(kvb_str_finish(&c, NULL) == NULL && c.p == NULL && c.err == KVB_OK && c.limit == 8);
    kvb_str_free(&b);
}

static long g_str_allocs, g_str_fail_at, g_str_live;
static void *str_malloc(size_t n, void *u) {
    (void)u;
    if (++g_str_allocs == g_str_fail_at) return NULL;
    g_str_live++;
    return malloc(n);
}
static void str_free(void *p, void *u) {
    (void)u;
    g_str_live--;
    free(p);
}

/* Every allocation failing in turn: the error is recorded once, later
 * appends are no-ops, the text written before stays, nothing leaks. */
TEST(str_allocation_failure_recorded_once) {
    struct kvb_allocator a = {str_malloc, str_free, NULL};
    kvb_allocator_set(&a);
    bool any_failed = false;
    for (long fail_at = 1; fail_at <= 12; fail_at++) {
        g_str_allocs = 0;
        g_str_fail_at = fail_at;
        g_str_live = 0;
        struct kvb_str b = {0};
        size_t last_ok = 0;
        for (int i = 0; i < 200; i++) {
            kvb_str_printf(&b, "line %03d of the text\n", i);
            if (!kvb_str_error(&b)) last_ok = b.n;
        }
        kvb_str_json(&b, "tail", 4, 0);
        const kvb_status st = kvb_str_error(&b);
        const long allocs = g_str_allocs;
        if (st != KVB_OK) {
            any_failed = true;
            if (st != KVB_ERR_NOMEM || b.n != last_ok || (b.p && strlen(b.p) != b.n)) {
                kvb_allocator_set(NULL);
                FAILF("fail_at %ld: status %d, n %zu, last good %zu", fail_at, (int)st, b.n, last_ok);
            }
            if (allocs != fail_at) { kvb_allocator_set(NULL); FAILF("fail_at %ld: %ld allocations (retried after failing)", fail_at, allocs); }
            if (b.n && memcmp(b.p, "line 000", 8)) { kvb_allocator_set(NULL); FAILF("fail_at %ld: text lost", fail_at); }
        }
        char *t = kvb_str_finish(&b, NULL);
        if ((t == NULL) != (st != KVB_OK)) { kvb_allocator_set(NULL); FAILF("fail_at %ld: finish %p with status %d", fail_at, (void *)t, (int)st); }
        kvb_buffer_free(t);
        if (g_str_live) { kvb_allocator_set(NULL); FAILF("fail_at %ld: %ld blocks leaked", fail_at, g_str_live); }
    }
    kvb_allocator_set(NULL);
    CHECK(any_failed);
}

/* An arena's allocator: blocks the builder must not free. */
static char g_arena[4096];
static size_t g_arena_used;
static void *arena_take(void *ctx, size_t n) {
    (void)ctx;
    if (n > sizeof g_arena - g_arena_used) return NULL;
    void *p = g_arena + g_arena_used;
    g_arena_used += n;
    return p;
}

TEST(str_arena_allocator) {
    g_arena_used = 0;
    struct kvb_str b = {.alloc = arena_take};
    for (int i = 0; i < 100; i++) kvb_str_puts(&b, "0123456789");
    CHECK_EQ_INT(kvb_str_error(&b), KVB_OK);
    CHECK(b.p >= g_arena && b.p < g_arena + sizeof g_arena && b.n == 1000);
    for (int i = 0; i < 300; i++) kvb_str_puts(&b, "0123456789"); /* the arena runs out */
    CHECK_EQ_INT(kvb_str_error(&b), KVB_ERR_NOMEM);
    CHECK(b.n < 4096 && b.n % 10 == 0 && strlen(b.p) == b.n);
    kvb_str_free(&b); /* frees nothing of the arena (the allocator would abort) */
    CHECK(b.alloc == arena_take && b.p == NULL);
}

static const char *json_of(struct kvb_str *b, const char *s, size_t n, unsigned flags) {
    kvb_str_free(b);
    kvb_str_json(b, s, n, flags);
    return b->p;
}

/* Every control byte, quote, backslash, DEL and UTF-8 under each flag:
 * none (the server's bodies, the schema compiler's literals), Python's
 * (tojson), and the tool-call parser's (short \n \r \t, DEL escaped). */
TEST(str_json_escapes_every_control_byte) {
    struct kvb_str b = {0};
    static const char *py_short[32] = {[8] = "\\b", [9] = "\\t", [10] = "\\n", [12] = "\\f", [13] = "\\r"};
    for (unsigned c = 0; c < 0x20; c++) {
        const char s[1] = {(char)c};
        char u[16];
        snprintf(u, sizeof u, "\"\\u%04x\"", c);
        CHECK(!strcmp(json_of(&b, s, 1, 0), u));
        char want[16];
        if (py_short[c]) snprintf(want, sizeof want, "\"%s\"", py_short[c]);
        else snprintf(want, sizeof want, "%s", u);
        CHECK(!strcmp(json_of(&b, s, 1, KVB_JSON_PYTHON), want));
        if (c == 8 || c == 12) snprintf(want, sizeof want, "%s", u);
        CHECK(!strcmp(json_of(&b, s, 1, KVB_JSON_SHORT_NRT | KVB_JSON_DEL), want));
    }
    CHECK(!strcmp(json_of(&b, "\x1f", 1, 0), "\"\\u001f\"")); /* lowercase hex */
    CHECK(!strcmp(json_of(&b, "a\"b\\c/d", 7, KVB_JSON_PYTHON), "\"a\\\"b\\\\c/d\""));
    CHECK(!strcmp(json_of(&b, "\x7f", 1, KVB_JSON_PYTHON), "\"\x7f\""));
    CHECK(!strcmp(json_of(&b, "\x7f", 1, KVB_JSON_DEL), "\"\\u007f\""));
    const char utf8[] = "h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xff"; /* é € 😀 and a stray byte: copied */
    CHECK(!strcmp(json_of(&b, utf8, sizeof utf8 - 1, KVB_JSON_PYTHON), "\"h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xff\""));
    CHECK(!strcmp(json_of(&b, "a\0b", 3, 0), "\"a\\u0000b\"")); /* a NUL inside is a character */
    CHECK(!strcmp(json_of(&b, "", 0, 0), "\"\""));
    CHECK(!strcmp(json_of(&b, "x\ny", 3, KVB_JSON_PYTHON), "\"x\\ny\""));
    kvb_str_free(&b);
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
    RUN(str_builder_grows_and_stays_terminated);
    RUN(str_printf_past_1kib);
    RUN(str_limit_recorded_once);
    RUN(str_allocation_failure_recorded_once);
    RUN(str_arena_allocator);
    RUN(str_json_escapes_every_control_byte);
    return test_summary();
}

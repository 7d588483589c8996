/*
 * testing.h — a small test harness in the spirit of Redis' testhelp.h and
 * libuv's ASSERT_EQ: checks print both values on failure, a test case stops
 * at its first failed check, and main() prints "cases: P passed, F failed,
 * S skipped". A skipped case (SKIP_CASE, NEED_SHARED) is never a pass.
 *
 *   TEST(name) { CHECK_EQ_INT(a, b); CHECK_NEAR(x, y, tol); ... }
 *   int main(void) { RUN(name); ...; return test_summary(); }
 *
 * KVB_TEST_CASES=a,b,c runs only the cases of those names (the others are
 * neither run nor counted): CI's qemu runs pick the cases that cover each
 * ARM kernel (.ci/run).
 */
#ifndef KVB_TESTING_H
#define KVB_TESTING_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_passed, t_failed, t_skipped, t_case_failed, t_case_skipped;
static const char *t_case;

/* Whether KVB_TEST_CASES (a comma-separated list; unset: every case) names the case. */
static inline int t_case_selected(const char *name) {
    const char *list = getenv("KVB_TEST_CASES"), *p = list;
    if (!list || !*list) return 1;
    const size_t n = strlen(name);
    while (*p) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

#define TEST(name) static void test_##name(void)
#define RUN(name)                                                                 \
    do {                                                                          \
        if (!t_case_selected(#name)) break;                                       \
        t_case = #name;                                                           \
        t_case_failed = 0;                                                        \
        t_case_skipped = 0;                                                       \
        test_##name();                                                            \
        if (t_case_failed) { t_failed++; printf("FAIL %s\n", #name); }            \
        else if (t_case_skipped) { t_skipped++; printf("skip %s\n", #name); }     \
        else { t_passed++; printf("ok   %s\n", #name); }                          \
        fflush(stdout);                                                           \
    } while (0)

#define FAILF(...)                                                                \
    do {                                                                          \
        printf("  %s:%d: ", __FILE__, __LINE__);                                  \
        printf(__VA_ARGS__);                                                      \
        printf("\n");                                                             \
        t_case_failed = 1;                                                        \
        return;                                                                   \
    } while (0)

/* Skips the current case with a reason (counted as skipped, not passed). */
#define SKIP_CASE(...)                                                            \
    do {                                                                          \
        printf("  skip: ");                                                       \
        printf(__VA_ARGS__);                                                      \
        printf("\n");                                                             \
        t_case_skipped = 1;                                                       \
        return;                                                                   \
    } while (0)

#define CHECK(c) do { if (!(c)) FAILF("check failed: %s", #c); } while (0)
#define CHECK_EQ_INT(a, b)                                                        \
    do {                                                                          \
        long long _a = (long long)(a), _b = (long long)(b);                       \
        if (_a != _b) FAILF("%s == %s: %lld != %lld", #a, #b, _a, _b);            \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                     \
    do {                                                                          \
        double _a = (double)(a), _b = (double)(b);                                \
        if (!(fabs(_a - _b) <= (tol))) FAILF("%s ~ %s: %.9g vs %.9g (tol %g)", #a, #b, _a, _b, (double)(tol)); \
    } while (0)
#define CHECK_OK(expr)                                                            \
    do {                                                                          \
        kvb_status _s = (expr);                                                   \
        if (_s != KVB_OK) FAILF("%s returned %d (%s): %s", #expr, (int)_s, kvb_status_str(_s), kvb_last_error()); \
    } while (0)
#define CHECK_STATUS(expr, want)                                                  \
    do {                                                                          \
        kvb_status _s = (expr);                                                   \
        if (_s != (want)) FAILF("%s returned %d (%s), want %d", #expr, (int)_s, kvb_status_str(_s), (int)(want)); \
    } while (0)

static inline int test_summary(void) {
    printf("cases: %d passed, %d failed, %d skipped\n", t_passed, t_failed, t_skipped);
    return t_failed ? 1 : 0;
}

/* Deterministic generator for test data (splitmix64). */
static inline unsigned long long t_rng_next(unsigned long long *s) {
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float t_randf(unsigned long long *s) { /* uniform [-1, 1) */
    return (float)((double)(t_rng_next(s) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

#endif

/* ---- shared test data (../shared/data, or $KVB_SHARED_DATA) ---- */
#include <unistd.h>

/* Full path of a file under the shared data folder, or NULL if absent. */
static inline const char *t_shared(const char *rel) {
    static char buf[8][1024];
    static int k;
    const char *root = getenv("KVB_SHARED_DATA");
    char *b = buf[k++ & 7];
    snprintf(b, sizeof buf[0], "%s/%s", root && *root ? root : "../shared/data", rel);
    return access(b, R_OK) == 0 ? b : NULL;
}

/* Skips the current case (printing why) when shared data is missing, or
 * fails it under KVB_REQUIRE_SHARED=1 (CI). */
#define NEED_SHARED(path_var, rel)                                                      \
    const char *path_var = t_shared(rel);                                               \
    if (!path_var) {                                                                    \
        const char *_req = getenv("KVB_REQUIRE_SHARED");                                \
        if (_req && strcmp(_req, "1") == 0) FAILF("shared data missing: %s", rel);      \
        SKIP_CASE("shared data missing: %s", rel);                                      \
    }

/* Reads a whole file (malloc); NULL on error. */
static inline char *t_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    if (b) { b[n] = 0; if (len) *len = (size_t)n; }
    return b;
}

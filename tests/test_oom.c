/*
 * test_oom.c — allocation-failure injection (after SQLite's OOM tests): a
 * scenario (pool, cache, prefill, decode, compress, save, load, free; with
 * recall too) runs
 * once to count its allocations, then once more for every N with the N-th
 * allocation failing. Each call must succeed or return KVB_ERR_NOMEM; a
 * failed call must leave the cache byte-identical; nothing may leak.
 */
#include "testing.h"
#include "kvbound.h"

#include <pthread.h>
#include <stdbool.h>

static long g_calls, g_fail_at, g_live;
static bool g_suspend;

/* The counting allocator takes a lock: the library may allocate on any of
 * its threads. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void *t_malloc(size_t n, void *u) {
    (void)u;
    pthread_mutex_lock(&g_mu);
    void *p = NULL;
    if (g_suspend || ++g_calls != g_fail_at) {
        p = malloc(n);
        if (p) g_live++;
    }
    pthread_mutex_unlock(&g_mu);
    return p;
}
static void t_free(void *p, void *u) {
    (void)u;
    if (!p) return;
    pthread_mutex_lock(&g_mu);
    g_live--;
    pthread_mutex_unlock(&g_mu);
    free(p);
}

enum { L = 2, HK = 2, G = 2, D = 32, P = 24 };
/* the pages of a scenario: f16, or q8_0 K with q4_0 V; and with recall
 * (its cold tier, index and areas allocate; images hold them) */
static bool g_quant, g_recall;

/* On NOMEM from a mutating call, the cache must be as it was. */
static int same_as(struct kvb_cache *c, void *img, size_t len) {
    g_suspend = true;
    void *b;
    size_t n;
    int ok = kvb_cache_save(c, &b, &n) == KVB_OK && n == len && memcmp(b, img, n) == 0;
    if (ok) kvb_buffer_free(b);
    g_suspend = false;
    return ok;
}

static int snapshot(struct kvb_cache *c, void **img, size_t *len) {
    g_suspend = true;
    int ok = kvb_cache_save(c, img, len) == KVB_OK;
    g_suspend = false;
    return ok;
}

#define EXPECT(expr, what)                                                          \
    do {                                                                            \
        kvb_status _s = (expr);                                                     \
        if (_s != KVB_OK && _s != KVB_ERR_NOMEM) { printf("  N=%ld %s: status %d\n", g_fail_at, what, (int)_s); bad = 1; } \
    } while (0)

/* Returns 0 if every invariant held. */
static int scenario(enum kvb_policy_id pid) {
    int bad = 0;
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.kv.max_distance = 24; /* lminfinite (positions capped): short, so the cap is exercised */
    cp.n_layer = L; cp.n_kv_head = HK; cp.head_dim = D; cp.kv.kv_dtype = g_quant ? KVB_DTYPE_Q8_0 : KVB_DTYPE_F16; cp.kv.block_size = 4;
    cp.kv.kv_dtype_v = g_quant ? KVB_DTYPE_Q4_0 : KVB_DTYPE_AS_K;
    cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, D, 10000.0f, 1.0f, NULL};
    cp.kv.policy = kvb_policy_default_params(pid);
    if (pid != KVB_POLICY_FULL) cp.kv.policy.budget = 12;
    if (pid == KVB_POLICY_SNAPKV || pid == KVB_POLICY_PYRAMIDKV || pid == KVB_POLICY_ADAKV) cp.kv.policy.obs_window = 4;
    if (g_recall) cp.kv.recall = (struct kvb_recall_params){2, 1, (size_t)1 << 20, NULL, KVB_RECALL_BOUNDS};
    struct kvb_pool_params pp = kvb_pool_default_params();
    pp.page_bytes = kvb_cache_page_bytes(&cp);
    pp.capacity_bytes = 1 << 22;
    pp.pages_per_slab = 4; /* many slab allocations */
    struct kvb_pool *pool = NULL;
    struct kvb_cache *c = NULL, *r = NULL;
    struct kvb_threadpool *tp = NULL;
    if (kvb_pool_init(&pp, &pool) != KVB_OK) goto done;
    if (kvb_cache_init(pool, &cp, &c) != KVB_OK) goto done;
    if (kvb_threadpool_init(2, &tp) != KVB_OK) tp = NULL; /* fine: run inline */
    static float q[P * HK * G * D], k[P * HK * D], v[P * HK * D], o[P * HK * G * D];
    unsigned long long rs = 3;
    for (size_t i = 0; i < sizeof q / sizeof *q; i++) q[i] = t_randf(&rs);
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) { k[i] = t_randf(&rs); v[i] = t_randf(&rs); }
    void *img;
    size_t len;
    for (int l = 0; l < L; l++) {
        if (!snapshot(c, &img, &len)) { bad = 1; goto done; }
        kvb_status st = kvb_cache_prefill(c, l, P, q, HK * G, k, v, o, tp);
        EXPECT(st, "prefill");
        if (st != KVB_OK && !same_as(c, img, len)) { printf("  N=%ld: failed prefill changed the cache\n", g_fail_at); bad = 1; }
        g_suspend = true; kvb_buffer_free(img); g_suspend = false;
    }
    kvb_cache_compress(c, NULL);
    for (int s = 0; s < 20; s++)
        for (int l = 0; l < L; l++) {
            if (!snapshot(c, &img, &len)) { bad = 1; goto done; }
            kvb_status st = kvb_cache_decode(c, l, q + s * HK * G * D, HK * G, k + s * HK * D, v + s * HK * D, o, tp);
            EXPECT(st, "decode");
            if (st != KVB_OK && !same_as(c, img, len)) { printf("  N=%ld: failed decode changed the cache\n", g_fail_at); bad = 1; }
            g_suspend = true; kvb_buffer_free(img); g_suspend = false;
        }
    void *buf = NULL;
    size_t blen = 0;
    kvb_status st = kvb_cache_save(c, &buf, &blen);
    EXPECT(st, "save");
    if (st == KVB_OK) {
        st = kvb_cache_load(pool, buf, blen, 0, &r);
        EXPECT(st, "load");
        kvb_buffer_free(buf);
    }
done:
    kvb_cache_free(r);
    kvb_cache_free(c);
    if (pool) {
        struct kvb_pool_stats ps;
        kvb_pool_get_stats(pool, &ps);
        if (ps.pages_in_use) { printf("  N=%ld: %lld pages still in use\n", g_fail_at, (long long)ps.pages_in_use); bad = 1; }
    }
    kvb_pool_free(pool);
    kvb_threadpool_free(tp);
    return bad;
}

TEST(fail_every_allocation_every_policy) {
    struct kvb_allocator a = {t_malloc, t_free, NULL};
    kvb_allocator_set(&a);
    for (int run = 0; run < KVB_POLICY_COUNT + 6; run++) { /* every policy on f16 pages, three on quantized ones, three with recall */
        static const enum kvb_policy_id more_pids[3] = {KVB_POLICY_H2O, KVB_POLICY_STREAMING, KVB_POLICY_SNAPKV};
        g_quant = run >= KVB_POLICY_COUNT && run < KVB_POLICY_COUNT + 3;
        g_recall = run >= KVB_POLICY_COUNT + 3;
        const int pid = run >= KVB_POLICY_COUNT ? (int)more_pids[(run - KVB_POLICY_COUNT) % 3] : run;
        g_calls = 0; g_fail_at = 0; g_live = 0;
        if (scenario((enum kvb_policy_id)pid)) FAILF("clean run of %s failed", kvb_policy_name((enum kvb_policy_id)pid));
        long total = g_calls;
        if (g_live != 0) FAILF("%s: %ld allocations leaked on the clean run", kvb_policy_name((enum kvb_policy_id)pid), g_live);
        for (long n = 1; n <= total; n++) {
            g_calls = 0; g_fail_at = n; g_live = 0;
            if (scenario((enum kvb_policy_id)pid)) FAILF("%s: failing allocation %ld of %ld broke an invariant", kvb_policy_name((enum kvb_policy_id)pid), n, total);
            if (g_live != 0) FAILF("%s: failing allocation %ld leaked %ld blocks", kvb_policy_name((enum kvb_policy_id)pid), n, g_live);
        }
        if (pid == 0 || g_recall)
            printf("  (%s%s scenario: %ld allocations, each failed once)\n", kvb_policy_name((enum kvb_policy_id)pid), g_recall ? " with recall" : "", total);
    }
    kvb_allocator_set(NULL);
}

int main(void) {
    RUN(fail_every_allocation_every_policy);
    return test_summary();
}

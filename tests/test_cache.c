/*
 * test_cache.c — randomized streams for every policy and many seeds, with the
 * invariants checked after every step (cache_helpers.h), on f32, f16 and
 * quantized (q8_0/q4_0 K with q4_0/q8_0/f16/bf16 V) pages: budgets, sinks,
 * positions, byte accounting, compaction; no page leaks after free; an
 * exhausted pool returns KVB_ERR_NOMEM and leaves the cache byte-identical.
 */
#include "cache_helpers.h"

enum { D = 8 };

static void fill(unsigned long long *rs, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = t_randf(rs);
}

static int random_stream(enum kvb_policy_id pid, unsigned long long seed) {
    unsigned long long rs = seed * 7919 + (unsigned long long)pid;
    const int L = 2, HK = 2, G = 1 + (int)(t_rng_next(&rs) % 3);
    /* seeds past 12: quantized pages (whole blocks of 32), K and V in different types */
    static const enum kvb_dtype kq[] = {KVB_DTYPE_Q8_0, KVB_DTYPE_Q4_0}, vq[] = {KVB_DTYPE_Q4_0, KVB_DTYPE_Q8_0, KVB_DTYPE_F16, KVB_DTYPE_BF16};
    const int d = seed > 12 ? 32 : D;
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.kv.max_distance = 24; /* lminfinite (positions capped): short, so the cap is exercised */
    cp.n_layer = L; cp.n_kv_head = HK; cp.head_dim = d;
    cp.kv.kv_dtype = seed > 12 ? kq[seed % 2] : seed & 1 ? KVB_DTYPE_F16 : KVB_DTYPE_F32;
    cp.kv.kv_dtype_v = seed > 12 ? vq[(seed / 2) % 4] : KVB_DTYPE_AS_K;
    cp.kv.block_size = seed & 2 ? 4 : 16;
    cp.kv.pos_mode = (enum kvb_pos_mode)(t_rng_next(&rs) % 3);
    if (pid == KVB_POLICY_KVZIP) cp.kv.pos_mode = KVB_POS_ORIGINAL; /* the only one it takes (refused by name otherwise) */
    cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, d, 10000.0f, 1.0f, NULL};
    cp.kv.policy = kvb_policy_default_params(pid);
    cp.kv.policy.budget = pid == KVB_POLICY_FULL ? 0 : 10 + (int)(t_rng_next(&rs) % 40);
    if (pid == KVB_POLICY_SNAPKV || pid == KVB_POLICY_PYRAMIDKV || pid == KVB_POLICY_ADAKV)
        cp.kv.policy.obs_window = 2 + (int)(t_rng_next(&rs) % 6);
    if (cp.kv.policy.budget && cp.kv.policy.budget <= cp.kv.policy.n_sink) cp.kv.policy.budget = cp.kv.policy.n_sink + 1;
    struct kvb_pool_params pp = kvb_pool_default_params();
    pp.page_bytes = kvb_cache_page_bytes(&cp);
    pp.capacity_bytes = (size_t)64 << 20;
    pp.pages_per_slab = 8;
    struct kvb_pool *pool;
    struct kvb_cache *c;
    if (kvb_pool_init(&pp, &pool) != KVB_OK || kvb_cache_init(pool, &cp, &c) != KVB_OK) {
        printf("  init: %s\n", kvb_last_error());
        return 1;
    }
    float *q = malloc(sizeof(float) * 64 * HK * G * d), *k = malloc(sizeof(float) * 64 * HK * d);
    float *v = malloc(sizeof(float) * 64 * HK * d), *o = malloc(sizeof(float) * 64 * HK * G * d);
    char where[128];
    int bad = 0;
    int chunks = 1 + (int)(t_rng_next(&rs) % 4);
    for (int ch = 0; ch < chunks && !bad; ch++) {
        int C = 1 + (int)(t_rng_next(&rs) % 60);
        for (int l = 0; l < L && !bad; l++) {
            fill(&rs, q, (size_t)C * HK * G * d); fill(&rs, k, (size_t)C * HK * d); fill(&rs, v, (size_t)C * HK * d);
            if (kvb_cache_prefill(c, l, C, q, HK * G, k, v, o, NULL) != KVB_OK) { printf("  prefill: %s\n", kvb_last_error()); bad = 1; }
            snprintf(where, sizeof where, "%s seed %llu prefill chunk %d layer %d", kvb_policy_name(pid), seed, ch, l);
            bad = bad || check_invariants(c, pool, where);
        }
    }
    kvb_cache_compress(c, NULL);
    snprintf(where, sizeof where, "%s seed %llu after compress", kvb_policy_name(pid), seed);
    bad = bad || check_invariants(c, pool, where);
    for (int step = 0; step < 120 && !bad; step++) {
        for (int l = 0; l < L && !bad; l++) {
            fill(&rs, q, (size_t)HK * G * d); fill(&rs, k, (size_t)HK * d); fill(&rs, v, (size_t)HK * d);
            if (kvb_cache_decode(c, l, q, HK * G, k, v, o, NULL) != KVB_OK) { printf("  decode: %s\n", kvb_last_error()); bad = 1; }
            for (int i = 0; i < HK * G * d; i++)
                if (!isfinite(o[i])) { printf("  non-finite output\n"); bad = 1; break; }
            snprintf(where, sizeof where, "%s seed %llu step %d layer %d", kvb_policy_name(pid), seed, step, l);
            bad = bad || check_invariants(c, pool, where);
        }
        if (step == 60 && pid != KVB_POLICY_FULL) { /* shrink every budget: memory must come back */
            struct kvb_cache_stats before, after;
            kvb_cache_get_stats(c, &before);
            int nb = cp.kv.policy.n_sink + 2;
            if (kvb_cache_set_budget(c, -1, -1, nb) != KVB_OK) { printf("  set_budget: %s\n", kvb_last_error()); bad = 1; }
            for (int l = 0; l < L; l++) kvb_cache_evict(c, l);
            kvb_cache_get_stats(c, &after);
            snprintf(where, sizeof where, "%s seed %llu after shrinking to %d", kvb_policy_name(pid), seed, nb);
            bad = bad || check_invariants(c, pool, where);
            if (!bad && after.slots_max > nb) { printf("  %s: slots_max %d > %d\n", where, after.slots_max, nb); bad = 1; }
            /* every stream now holds nb slots: under two pages of holes each */
            long long max_pages = (long long)L * HK * ((nb + cp.kv.block_size - 1) / cp.kv.block_size + 1);
            if (!bad && after.pages_in_use > max_pages) {
                printf("  %s: %lld pages after shrinking (max %lld, before %lld)\n", where, (long long)after.pages_in_use, max_pages, (long long)before.pages_in_use);
                bad = 1;
            }
        }
    }
    kvb_cache_free(c);
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(pool, &ps);
    if (!bad && ps.pages_in_use != 0) { printf("  %s seed %llu: %lld pages leaked after free\n", kvb_policy_name(pid), seed, (long long)ps.pages_in_use); bad = 1; }
    kvb_pool_free(pool);
    free(q); free(k); free(v); free(o);
    return bad;
}

TEST(randomized_streams_every_policy) {
    for (int pid = 0; pid < KVB_POLICY_COUNT; pid++)
        for (unsigned long long seed = 1; seed <= 20; seed++)
            if (random_stream((enum kvb_policy_id)pid, seed)) FAILF("policy %s seed %llu", kvb_policy_name((enum kvb_policy_id)pid), seed);
}

static int images_equal(const struct kvb_cache *c, const void *img, size_t len) {
    void *b;
    size_t n;
    if (kvb_cache_save(c, &b, &n) != KVB_OK) return 0;
    int eq = n == len && memcmp(b, img, n) == 0;
    kvb_buffer_free(b);
    return eq;
}

TEST(exhausted_pool_leaves_cache_unchanged) {
    for (int pid = 0; pid < KVB_POLICY_COUNT; pid++) {
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.kv.max_distance = 24; /* lminfinite (positions capped): short, so the cap is exercised */
        cp.n_layer = 2; cp.n_kv_head = 2; cp.head_dim = D; cp.kv.kv_dtype = KVB_DTYPE_F16; cp.kv.block_size = 4;
        cp.kv.policy = kvb_policy_default_params((enum kvb_policy_id)pid);
        if (pid != KVB_POLICY_FULL) cp.kv.policy.budget = 40;
        cp.pool_bytes = kvb_cache_page_bytes(&cp) * 30; /* 30 pages: < 4 streams x 11 pages */
        struct kvb_cache *c;
        CHECK_OK(kvb_cache_init(NULL, &cp, &c));
        unsigned long long rs = 11;
        float q[2 * D], k[2 * D], v[2 * D], o[2 * D];
        int failed_at = -1;
        for (int step = 0; step < 200 && failed_at < 0; step++)
            for (int l = 0; l < 2; l++) {
                fill(&rs, q, 2 * D); fill(&rs, k, 2 * D); fill(&rs, v, 2 * D);
                void *img;
                size_t len;
                CHECK_OK(kvb_cache_save(c, &img, &len));
                kvb_status st = kvb_cache_decode(c, l, q, 2, k, v, o, NULL);
                if (st == KVB_ERR_NOMEM) {
                    failed_at = step;
                    int same = images_equal(c, img, len);
                    kvb_buffer_free(img);
                    if (!same) FAILF("policy %s: cache changed by a failed decode", kvb_policy_name((enum kvb_policy_id)pid));
                    CHECK(strstr(kvb_last_error(), "pool exhausted") != NULL);
                    /* a failed prefill is just as clean */
                    float qq[6 * 2 * D], kk[6 * 2 * D], vv[6 * 2 * D], oo[6 * 2 * D];
                    fill(&rs, qq, sizeof qq / sizeof *qq); fill(&rs, kk, sizeof kk / sizeof *kk); fill(&rs, vv, sizeof vv / sizeof *vv);
                    CHECK_OK(kvb_cache_save(c, &img, &len));
                    CHECK_STATUS(kvb_cache_prefill(c, l, 6, qq, 2, kk, vv, oo, NULL), KVB_ERR_NOMEM);
                    same = images_equal(c, img, len);
                    kvb_buffer_free(img);
                    if (!same) FAILF("policy %s: cache changed by a failed prefill", kvb_policy_name((enum kvb_policy_id)pid));
                    break;
                }
                kvb_buffer_free(img);
                if (st != KVB_OK) FAILF("decode: %s", kvb_last_error());
            }
        /* only the unbounded policy can exhaust 30 pages with budget 40... */
        if (pid == KVB_POLICY_FULL) CHECK(failed_at >= 0);
        kvb_cache_free(c);
    }
}

TEST(bounded_policies_fit_in_their_pages) {
    /* ...while every bounded policy at budget 40 runs 200 steps in 4 x 11 pages */
    for (int pid = 1; pid < KVB_POLICY_COUNT; pid++) {
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.kv.max_distance = 24; /* lminfinite (positions capped): short, so the cap is exercised */
        cp.n_layer = 2; cp.n_kv_head = 2; cp.head_dim = D; cp.kv.block_size = 4;
        cp.kv.policy = kvb_policy_default_params((enum kvb_policy_id)pid);
        cp.kv.policy.budget = 40;
        cp.pool_bytes = kvb_cache_page_bytes(&cp) * 4 * 11;
        struct kvb_cache *c;
        CHECK_OK(kvb_cache_init(NULL, &cp, &c));
        unsigned long long rs = 12;
        float q[2 * D], k[2 * D], v[2 * D], o[2 * D];
        for (int step = 0; step < 200; step++)
            for (int l = 0; l < 2; l++) {
                fill(&rs, q, 2 * D); fill(&rs, k, 2 * D); fill(&rs, v, 2 * D);
                kvb_status st = kvb_cache_decode(c, l, q, 2, k, v, o, NULL);
                if (st != KVB_OK) FAILF("%s step %d: %s", kvb_policy_name((enum kvb_policy_id)pid), step, kvb_last_error());
            }
        kvb_cache_free(c);
    }
}

/* The one sizing rule, kvb_kv_seq_bytes, holds for every policy: a cache
 * whose pool has exactly the bytes the rule gives reads a prompt of P tokens
 * in chunks of C, compresses it and decodes, never runs out of pages, and
 * never holds more than the rule. Then the rule against a formula written
 * here (full: n_ctx; snapkv family and expected-attention with compress_prompt:
 * the whole prompt, or prefill_budget; the
 * others: the budget; plus a chunk, two pages and the recall area). */
static int sized_run(enum kvb_policy_id pid, unsigned long long seed) {
    unsigned long long rs = seed * 104729 + (unsigned long long)pid;
    /* every third seed: 40 dims and pages of 1 or 2 tokens, whose bytes are no multiple of the pool's 64 */
    const int L = 2, HK = 2, G = 2, d = seed % 3 == 0 ? 40 : 8, steps = 80;
    struct kvb_kv_params kv = kvb_kv_default_params();
    kv.policy = kvb_policy_default_params(pid);
    kv.kv_dtype = seed & 1 ? KVB_DTYPE_F16 : KVB_DTYPE_F32;
    kv.block_size = d == 40 ? (seed & 2 ? 1 : 2) : seed & 2 ? 4 : 16;
    kv.max_distance = 64;
    if (pid != KVB_POLICY_FULL) kv.policy.budget = kv.policy.n_sink + 8 + (int)(t_rng_next(&rs) % 40);
    const bool compresses = kvb_policy_compresses(pid);
    if (compresses) {
        kv.policy.obs_window = 2 + (int)(t_rng_next(&rs) % 4);
        if (seed % 3 == 1 && pid != KVB_POLICY_KVZIP) kv.policy.prefill_budget = kv.policy.budget + (int)(t_rng_next(&rs) % 20); /* kvzip reads the context whole */
        if (seed % 3 == 2) kv.policy.decode_budget = 1 + (int)(t_rng_next(&rs) % 30);
        if (seed % 5 == 4) kv.policy.budget_frac = 0.3f;
    }
    const bool ea_prompt = pid == KVB_POLICY_EXPECTED_ATTENTION && seed % 2 == 0; /* expected-attention compressing prompts */
    if (ea_prompt) {
        kv.policy.compress_prompt = 1;
        if (seed % 3 == 1) kv.policy.prefill_budget = kv.policy.budget + (int)(t_rng_next(&rs) % 20);
        if (seed % 5 == 4) kv.policy.budget_frac = 0.3f;
    }
    if (seed % 4 == 3 && pid != KVB_POLICY_FULL && pid != KVB_POLICY_STREAMING) kv.recall.pages = 2;
    const int P = 5 + (int)(t_rng_next(&rs) % 200), C = 1 + (int)(t_rng_next(&rs) % 64);
    const size_t rule = kvb_kv_seq_bytes(&kv, L, HK, d, (int64_t)P + steps, P, C);
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = L; cp.n_kv_head = HK; cp.head_dim = d;
    cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, d, 10000.0f, 1.0f, NULL};
    cp.kv = kv;
    struct kvb_pool_params pp = kvb_pool_default_params();
    pp.page_bytes = kvb_cache_page_bytes(&cp);
    pp.capacity_bytes = rule;
    pp.pages_per_slab = 1;
    struct kvb_pool *pool;
    struct kvb_cache *c;
    const size_t pool_page = (pp.page_bytes + 63) & ~(size_t)63; /* the pool's pages are 64-byte aligned */
    if (!rule || rule % pool_page) { printf("  %s seed %llu: rule %zu is not whole pages of %zu\n", kvb_policy_name(pid), seed, rule, pp.page_bytes); return 1; }
    if (kvb_pool_init(&pp, &pool) != KVB_OK || kvb_cache_init(pool, &cp, &c) != KVB_OK) { printf("  init: %s\n", kvb_last_error()); return 1; }
    float *q = malloc(sizeof(float) * 64 * HK * G * d), *k = malloc(sizeof(float) * 64 * HK * d);
    float *v = malloc(sizeof(float) * 64 * HK * d), *o = malloc(sizeof(float) * 64 * HK * G * d);
    int bad = 0;
    for (int at = 0; at < P && !bad; at += C) {
        const int n = P - at < C ? P - at : C;
        for (int l = 0; l < L && !bad; l++) {
            fill(&rs, q, (size_t)n * HK * G * d); fill(&rs, k, (size_t)n * HK * d); fill(&rs, v, (size_t)n * HK * d);
            if (kvb_cache_prefill(c, l, n, q, HK * G, k, v, o, NULL) != KVB_OK) {
                printf("  %s seed %llu: prefill at %d of %d (chunk %d): %s\n", kvb_policy_name(pid), seed, at, P, C, kvb_last_error());
                bad = 1;
            }
        }
    }
    kvb_cache_compress(c, NULL);
    for (int step = 0; step < steps && !bad; step++)
        for (int l = 0; l < L && !bad; l++) {
            fill(&rs, q, (size_t)HK * G * d); fill(&rs, k, (size_t)HK * d); fill(&rs, v, (size_t)HK * d);
            if (kvb_cache_decode(c, l, q, HK * G, k, v, o, NULL) != KVB_OK) {
                printf("  %s seed %llu: decode step %d (prompt %d, chunk %d): %s\n", kvb_policy_name(pid), seed, step, P, C, kvb_last_error());
                bad = 1;
            }
        }
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(c, &cs);
    if (!bad && cs.bytes_peak > rule) { printf("  %s seed %llu: peak %zu > rule %zu\n", kvb_policy_name(pid), seed, cs.bytes_peak, rule); bad = 1; }
    /* the rule, written again here */
    const long long B = kv.block_size, page = (long long)pool_page;
    long long tokens = kv.policy.budget;
    if (pid == KVB_POLICY_FULL) tokens = (long long)P + steps;
    else if (compresses) {
        long long b = kv.policy.budget_frac > 0 ? (long long)(kv.policy.budget_frac * P) : kv.policy.budget;
        if (b < kv.policy.n_sink + 1) b = kv.policy.n_sink + 1;
        const long long after = b + (kv.policy.decode_budget ? kv.policy.decode_budget : b), reading = kv.policy.prefill_budget ? kv.policy.prefill_budget : P;
        tokens = after > reading ? after : reading;
        if (pid == KVB_POLICY_KVZIP) { /* the context and one reconstruction pass (its chunk and repeat prompt) */
            const long long pass = (P < KVB_KVZIP_CHUNK ? P : KVB_KVZIP_CHUNK) + KVB_KVZIP_PROMPT_MAX;
            tokens = after > P + pass ? after : P + pass;
        }
    } else if (ea_prompt) { /* the prompt read whole (or prefill_budget), then the budget: no decode_budget */
        long long b = kv.policy.budget_frac > 0 ? (long long)(kv.policy.budget_frac * P) : kv.policy.budget;
        if (b < kv.policy.n_sink + 1) b = kv.policy.n_sink + 1;
        const long long reading = kv.policy.prefill_budget ? kv.policy.prefill_budget : P;
        tokens = b > reading ? b : reading;
    }
    const long long chunk = C < P ? C : P;
    const long long want = ((tokens + chunk + B - 1) / B + 2 + (pid == KVB_POLICY_FULL ? 0 : kv.recall.pages)) * L * HK * page;
    if (!bad && (long long)rule != want) { printf("  %s seed %llu: rule %zu, written here %lld\n", kvb_policy_name(pid), seed, rule, want); bad = 1; }
    kvb_cache_free(c);
    kvb_pool_free(pool);
    free(q); free(k); free(v); free(o);
    return bad;
}

TEST(sizing_rule_holds_every_policy) {
    for (int pid = 0; pid < KVB_POLICY_COUNT; pid++)
        for (unsigned long long seed = 1; seed <= 24; seed++)
            if (sized_run((enum kvb_policy_id)pid, seed)) FAILF("policy %s seed %llu", kvb_policy_name((enum kvb_policy_id)pid), seed);
    /* bad arguments: 0, never a guess */
    struct kvb_kv_params kv = kvb_kv_default_params();
    CHECK(kvb_kv_seq_bytes(&kv, 2, 2, 8, 100, 10, 4) > 0);
    CHECK(kvb_kv_seq_bytes(NULL, 2, 2, 8, 100, 10, 4) == 0);
    CHECK(kvb_kv_seq_bytes(&kv, 0, 2, 8, 100, 10, 4) == 0);
    kv.block_size = 12;
    CHECK(kvb_kv_seq_bytes(&kv, 2, 2, 8, 100, 10, 4) == 0);
    kv = kvb_kv_default_params();
    kv.kv_dtype = KVB_DTYPE_Q8_0; /* 8 dims: not a block of 32 */
    CHECK(kvb_kv_seq_bytes(&kv, 2, 2, 8, 100, 10, 4) == 0);
    kv = kvb_kv_default_params();
    kv.policy.id = (enum kvb_policy_id)99;
    CHECK(kvb_kv_seq_bytes(&kv, 2, 2, 8, 100, 10, 4) == 0);
}

/* The sizing rule counts the query statistics of a policy that keeps them
 * (expected-attention): kvb_kv_query_stats_bytes is (G + 1) x (d + d^2)
 * floats a stream, written here, on every layer but a window layer; 0 for
 * another policy or a bad head count; and a cache that has read a prompt and
 * decoded holds exactly that (its stats' query_stats_bytes, inside
 * bytes_reserved). */
TEST(sizing_counts_query_statistics) {
    enum { L = 3, HK = 2, G = 4, d = 8 };
    struct kvb_kv_params kv = kvb_kv_default_params();
    kv.policy = kvb_policy_default_params(KVB_POLICY_EXPECTED_ATTENTION);
    kv.policy.budget = 12;
    kv.kv_dtype = KVB_DTYPE_F32;
    kv.block_size = 4;
    const size_t want = (size_t)L * HK * (G + 1) * (d + d * d) * sizeof(float);
    CHECK_EQ_INT((long long)kvb_kv_query_stats_bytes(&kv, L, HK, HK * G, d), (long long)want);
    CHECK_EQ_INT((long long)kvb_kv_query_stats_bytes(&kv, L, HK, HK * G + 1, d), 0);
    struct kvb_kv_layer win = {1, kvb_policy_default_params(KVB_POLICY_WINDOW)};
    win.policy.n_sink = 0; /* a model's window: the window policy without sinks */
    win.policy.budget = 8;
    struct kvb_kv_params kw = kv;
    kw.layers = &win;
    kw.n_layers = 1;
    CHECK_EQ_INT((long long)kvb_kv_query_stats_bytes(&kw, L, HK, HK * G, d), (long long)(want / L * (L - 1)));
    struct kvb_kv_params kd = kv;
    kd.policy = kvb_policy_default_params(KVB_POLICY_KEYDIFF);
    CHECK_EQ_INT((long long)kvb_kv_query_stats_bytes(&kd, L, HK, HK * G, d), 0);
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = L; cp.n_kv_head = HK; cp.head_dim = d;
    cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, d, 10000.0f, 1.0f, NULL};
    cp.kv = kv;
    struct kvb_cache *c = NULL;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    unsigned long long rs = 7;
    static float q[20 * HK * G * d], k[20 * HK * d], v[20 * HK * d], o[20 * HK * G * d];
    fill(&rs, q, sizeof q / sizeof *q); fill(&rs, k, sizeof k / sizeof *k); fill(&rs, v, sizeof v / sizeof *v);
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(c, &cs);
    CHECK_EQ_INT((long long)cs.query_stats_bytes, 0); /* none before the first query */
    for (int l = 0; l < L; l++) CHECK_OK(kvb_cache_prefill(c, l, 20, q, HK * G, k, v, o, NULL));
    for (int l = 0; l < L; l++) CHECK_OK(kvb_cache_decode(c, l, q, HK * G, k, v, o, NULL));
    kvb_cache_get_stats(c, &cs);
    CHECK_EQ_INT((long long)cs.query_stats_bytes, (long long)want);
    CHECK(cs.bytes_reserved >= cs.bytes_used + cs.query_stats_bytes);
    kvb_cache_free(c);
}

TEST(bad_params_are_named) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    struct kvb_cache *c = NULL;
    cp.head_dim = 0;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "head_dim") != NULL);
    cp = kvb_cache_default_params();
    cp.kv.block_size = 12;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "block_size") != NULL);
    cp = kvb_cache_default_params();
    cp.kv.kv_dtype = KVB_DTYPE_Q8_0; /* quantized rows need whole blocks of 32 */
    cp.head_dim = 40;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "head_dim 40") != NULL && strstr(kvb_last_error(), "q8_0") != NULL);
    cp = kvb_cache_default_params();
    cp.kv.kv_dtype_v = (enum kvb_dtype)9;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "dtype_v") != NULL);
    cp = kvb_cache_default_params();
    const struct kvb_kv_layer other = {0, kvb_policy_default_params(KVB_POLICY_H2O)};
    cp.kv.layers = &other; /* per-layer overrides other than a model's window: refused (test_windows has the rest) */
    cp.kv.n_layers = 1;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_UNSUPPORTED);
    CHECK(strstr(kvb_last_error(), "kv.layers[0].policy") != NULL);
    cp = kvb_cache_default_params();
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_H2O);
    cp.kv.policy.budget = 3; /* <= 4 sinks */
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "n_sink") != NULL);
    cp.kv.policy.budget = 0;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "budget") != NULL);
    cp = kvb_cache_default_params();
    cp.rope.type = KVB_ROPE_NEOX;
    cp.rope.n_dims = 7;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "n_dims") != NULL);
    CHECK(c == NULL);
    /* a shared pool of the wrong page size is refused */
    cp = kvb_cache_default_params();
    struct kvb_pool_params pp = kvb_pool_default_params();
    pp.page_bytes = 1000;
    pp.capacity_bytes = 1 << 20;
    struct kvb_pool *pool;
    CHECK_OK(kvb_pool_init(&pp, &pool));
    CHECK_STATUS(kvb_cache_init(pool, &cp, &c), KVB_ERR_INVALID);
    kvb_pool_free(pool);
    enum kvb_policy_id id;
    CHECK_STATUS(kvb_policy_from_name("h3o", &id), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "h3o") != NULL);
    CHECK_OK(kvb_policy_from_name("block-h2o", &id));
    CHECK_EQ_INT(id, KVB_POLICY_BLOCK_H2O);
}

/* A cache of 2 layers x 2 KV heads x 64 dims, q8_0 K and q4_0 V in pages of
 * 16, holding 100 tokens: 112 slots x (68 + 36) bytes per stream, 46592 in
 * all: the figure `kvbound mem --layers 2 --kv-heads 2 --head-dim 64 --ctx 100
 * --dtype-k q8_0 --dtype-v q4_0 --block-size 16` prints (test_kvquant_cli.sh). */
TEST(quantized_pages_hold_what_mem_predicts) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 2; cp.n_kv_head = 2; cp.head_dim = 64; cp.kv.block_size = 16;
    cp.kv.kv_dtype = KVB_DTYPE_Q8_0; cp.kv.kv_dtype_v = KVB_DTYPE_Q4_0;
    CHECK_EQ_INT(kvb_cache_page_bytes(&cp), 16 * (68 + 36));
    struct kvb_cache *c;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    static float q[100 * 2 * 64], k[100 * 2 * 64], v[100 * 2 * 64], o[100 * 2 * 64];
    unsigned long long rs = 11;
    fill(&rs, q, sizeof q / sizeof *q); fill(&rs, k, sizeof k / sizeof *k); fill(&rs, v, sizeof v / sizeof *v);
    for (int l = 0; l < 2; l++) CHECK_OK(kvb_cache_prefill(c, l, 100, q, 2, k, v, o, NULL));
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(c, &cs);
    CHECK_EQ_INT((long long)cs.bytes_used, 46592);
    /* and a stored row reads back as its quantized value: within q8_0's step of the original K (after RoPE: none here) */
    float kr[64], vr[64];
    kvb_cache_read_slot(c, 1, 1, 37, kr, vr);
    double ek = 0, ev = 0, nk = 0, nv = 0;
    for (int i = 0; i < 64; i++) {
        ek += fabs(kr[i] - k[(37 * 2 + 1) * 64 + i]); nk += fabs(k[(37 * 2 + 1) * 64 + i]);
        ev += fabs(vr[i] - v[(37 * 2 + 1) * 64 + i]); nv += fabs(v[(37 * 2 + 1) * 64 + i]);
    }
    CHECK(ek > 0 && ek < 0.01 * nk); /* q8_0: about 0.4% */
    CHECK(ev > ek && ev < 0.15 * nv); /* q4_0: coarser */
    kvb_cache_free(c);
}

TEST(gqa_rows_stored_once_per_kv_head) {
    /* 32 query heads over 8 KV heads: bytes are those of 8 heads, not 32 */
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = 8; cp.head_dim = 64; cp.kv.kv_dtype = KVB_DTYPE_F16; cp.kv.block_size = 16;
    struct kvb_cache *c;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    static float q[32 * 64], k[8 * 64], v[8 * 64], o[32 * 64];
    for (int t = 0; t < 32; t++) CHECK_OK(kvb_cache_decode(c, 0, q, 32, k, v, o, NULL));
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(c, &cs);
    CHECK_EQ_INT(cs.bytes_used, 8 * 2 * (2 * 16 * 64 * 2)); /* 8 streams x 2 pages x page bytes */
    CHECK_EQ_INT(cs.slots, 8 * 32);
    kvb_cache_free(c);
}

int main(void) {
    RUN(randomized_streams_every_policy);
    RUN(exhausted_pool_leaves_cache_unchanged);
    RUN(bounded_policies_fit_in_their_pages);
    RUN(sizing_rule_holds_every_policy);
    RUN(sizing_counts_query_statistics);
    RUN(bad_params_are_named);
    RUN(gqa_rows_stored_once_per_kv_head);
    RUN(quantized_pages_hold_what_mem_predicts);
    return test_summary();
}

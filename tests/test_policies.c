/*
 * test_policies.c — decisions computed by hand, fed through the same
 * append/observe/evict interface the engine and the lab use.
 */
#include "cache_helpers.h"

static struct kvb_cache *bookkeeping_cache(enum kvb_policy_id id, int budget, int n_sink, int n_kv, int block) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.max_distance = 24; /* lminfinite (positions capped): short, so the cap is exercised */
    cp.n_layer = 1; cp.n_kv_head = n_kv; cp.head_dim = 4; cp.dtype = KVB_DTYPE_F32; cp.block_size = block;
    cp.policy = kvb_policy_default_params(id);
    cp.policy.budget = budget;
    cp.policy.n_sink = n_sink;
    cp.pool_bytes = 1 << 20;
    struct kvb_cache *c = NULL;
    if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) printf("  init: %s\n", kvb_last_error());
    return c;
}

/* Feeds tokens with fixed scores: each token's score is observed once, when it arrives. */
static void feed_trace(struct kvb_cache *c, const float *scores, int n) {
    for (int t = 0; t < n; t++) {
        kvb_cache_append(c, 0, NULL, NULL);
        int m = kvb_cache_n_slots(c, 0, 0);
        float w[64] = {0};
        w[m - 1] = scores[t];
        kvb_cache_observe(c, 0, 0, w, m);
        kvb_cache_evict(c, 0);
    }
}

static void kept(const struct kvb_cache *c, int head, long long *pos, int *n) {
    *n = kvb_cache_n_slots(c, 0, head);
    for (int j = 0; j < *n; j++) {
        struct kvb_slot_info si;
        kvb_cache_slot_info(c, 0, head, j, &si);
        pos[j] = si.pos_original;
    }
}

#define CHECK_KEPT(c, head, ...)                                                   \
    do {                                                                           \
        const long long _want[] = {__VA_ARGS__};                                   \
        long long _got[256];                                                       \
        int _n;                                                                    \
        kept(c, head, _got, &_n);                                                  \
        int _nw = (int)(sizeof _want / sizeof _want[0]);                           \
        int _ok = _n == _nw;                                                       \
        for (int _i = 0; _ok && _i < _n; _i++) _ok = _got[_i] == _want[_i];        \
        if (!_ok) {                                                                \
            printf("  kept:");                                                     \
            for (int _i = 0; _i < _n; _i++) printf(" %lld", _got[_i]);             \
            printf("  want:");                                                     \
            for (int _i = 0; _i < _nw; _i++) printf(" %lld", _want[_i]);           \
            FAILF("retained set differs");                                         \
        }                                                                          \
    } while (0)

/* <s> System: import PostgresDB as db def query():
 * 0.95 0.85 0.10 0.90 0.05 0.20 0.15 0.75, capacity 6, 2 sinks, heavy half
 * of the rest: H2O keeps <s> System: PostgresDB db def query(). */
static const float trace_scores[8] = {0.95f, 0.85f, 0.10f, 0.90f, 0.05f, 0.20f, 0.15f, 0.75f};

TEST(h2o_trace_keeps_heavy_hitters) {
    struct kvb_cache *c = bookkeeping_cache(KVB_POLICY_H2O, 6, 2, 1, 4);
    feed_trace(c, trace_scores, 8);
    CHECK_KEPT(c, 0, 0, 1, 3, 5, 6, 7);
    kvb_cache_free(c);
}

TEST(streaming_trace_keeps_sinks_and_window) {
    struct kvb_cache *c = bookkeeping_cache(KVB_POLICY_STREAMING, 6, 2, 1, 4);
    feed_trace(c, trace_scores, 8);
    CHECK_KEPT(c, 0, 0, 1, 4, 5, 6, 7);
    CHECK_EQ_INT(kvb_cache_pos_mode(c), KVB_POS_CONTIGUOUS);
    kvb_cache_free(c);
}

TEST(window_keeps_most_recent) {
    struct kvb_cache *c = bookkeeping_cache(KVB_POLICY_WINDOW, 3, 0, 1, 4);
    feed_trace(c, trace_scores, 8);
    CHECK_KEPT(c, 0, 5, 6, 7);
    kvb_cache_free(c);
}

TEST(tova_evicts_lowest_current_attention) {
    struct kvb_cache *c = bookkeeping_cache(KVB_POLICY_TOVA, 3, 0, 1, 4);
    for (int t = 0; t < 3; t++) kvb_cache_append(c, 0, NULL, NULL);
    kvb_cache_append(c, 0, NULL, NULL); /* 4 slots: 0 1 2 3 */
    float w1[4] = {0.1f, 0.5f, 0.05f, 0.35f};
    CHECK_OK(kvb_cache_observe(c, 0, 0, w1, 4));
    kvb_cache_evict(c, 0);
    CHECK_KEPT(c, 0, 0, 1, 3);
    kvb_cache_append(c, 0, NULL, NULL); /* 0 1 3 4 */
    float w2[4] = {0.4f, 0.1f, 0.3f, 0.2f}; /* only the current step counts: 1 goes now */
    CHECK_OK(kvb_cache_observe(c, 0, 0, w2, 4));
    kvb_cache_evict(c, 0);
    CHECK_KEPT(c, 0, 0, 3, 4);
    kvb_cache_free(c);
}

TEST(knorm_evicts_largest_key_norm) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = 4; cp.dtype = KVB_DTYPE_F32; cp.block_size = 4;
    cp.policy = kvb_policy_default_params(KVB_POLICY_KNORM);
    cp.policy.budget = 3;
    struct kvb_cache *c;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    const float norms[6] = {1, 5, 2, 0.5f, 3, 0.1f};
    for (int t = 0; t < 6; t++) {
        float k[4] = {norms[t], 0, 0, 0}, v[4] = {0};
        CHECK_OK(kvb_cache_append(c, 0, k, v));
        kvb_cache_evict(c, 0);
    }
    CHECK_KEPT(c, 0, 0, 3, 5); /* norms 1, 0.5, 0.1 */
    kvb_cache_free(c);
}

TEST(scissorhands_evicts_persistently_unimportant) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = 4; cp.block_size = 4;
    cp.policy = kvb_policy_default_params(KVB_POLICY_SCISSORHANDS);
    cp.policy.budget = 5; cp.policy.n_sink = 1; cp.policy.history = 4; cp.policy.threshold = 3; cp.policy.n_recent = 1;
    struct kvb_cache *c;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    for (int t = 0; t < 5; t++) kvb_cache_append(c, 0, NULL, NULL);
    /* 4 steps: slot 2 always below average (1/5), slot 3 below twice, 1 never */
    const float rows[4][5] = {{0.3f, 0.3f, 0.05f, 0.1f, 0.25f}, {0.3f, 0.3f, 0.05f, 0.3f, 0.05f},
                              {0.3f, 0.3f, 0.05f, 0.1f, 0.25f}, {0.3f, 0.3f, 0.05f, 0.3f, 0.05f}};
    for (int s = 0; s < 4; s++) CHECK_OK(kvb_cache_observe(c, 0, 0, rows[s], 5));
    kvb_cache_append(c, 0, NULL, NULL); /* 6 slots > 5 */
    kvb_cache_evict(c, 0);
    CHECK_KEPT(c, 0, 0, 1, 3, 4, 5);
    kvb_cache_free(c);
}

/* SnapKV through real attention: one prompt key matches what the last
 * queries look for; after compress it survives and distant filler goes. */
TEST(snapkv_keeps_the_needle) {
    enum { P = 200, D = 16, NEEDLE = 40 };
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = D; cp.dtype = KVB_DTYPE_F32; cp.block_size = 16;
    cp.policy = kvb_policy_default_params(KVB_POLICY_SNAPKV);
    cp.policy.budget = 48; cp.policy.obs_window = 16;
    struct kvb_cache *c;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    static float q[P][D], k[P][D], v[P][D], o[P][D];
    unsigned long long rs = 5;
    for (int t = 0; t < P; t++)
        for (int i = 0; i < D; i++) {
            q[t][i] = t_randf(&rs) * 0.1f;
            k[t][i] = t_randf(&rs) * 0.1f;
            v[t][i] = t_randf(&rs);
        }
    for (int i = 0; i < D; i++) k[NEEDLE][i] = 2.0f;               /* the needle key */
    for (int t = P - 16; t < P; t++)
        for (int i = 0; i < D; i++) q[t][i] = 2.0f;                /* window queries look for it */
    CHECK_OK(kvb_cache_prefill(c, 0, 120, &q[0][0], 1, &k[0][0], &v[0][0], &o[0][0], NULL));
    CHECK_OK(kvb_cache_prefill(c, 0, P - 120, &q[120][0], 1, &k[120][0], &v[120][0], &o[120][0], NULL));
    kvb_cache_compress(c, NULL);
    CHECK_EQ_INT(kvb_cache_n_slots(c, 0, 0), 48);
    long long pos[64];
    int n;
    kept(c, 0, pos, &n);
    int found = 0;
    for (int j = 0; j < n; j++) found |= pos[j] == NEEDLE;
    CHECK(found);
    CHECK_EQ_INT(pos[n - 16], P - 16); /* the window is kept whole */
    kvb_cache_free(c);
}

TEST(pyramidkv_layer_budgets) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 5; cp.n_kv_head = 2; cp.head_dim = 4;
    cp.policy = kvb_policy_default_params(KVB_POLICY_PYRAMIDKV);
    cp.policy.budget = 100; cp.policy.obs_window = 20; cp.policy.pyramid_beta = 20;
    struct kvb_cache *c;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    /* room 80: min 4, max 156, step 38 -> 176 138 100 62 24 (average 100) */
    const int want[5] = {176, 138, 100, 62, 24};
    for (int l = 0; l < 5; l++)
        for (int h = 0; h < 2; h++) CHECK_EQ_INT(kvb_cache_get_budget(c, l, h), want[l]);
    kvb_cache_free(c);
}

/* AdaKV: a head whose attention is concentrated needs few tokens, a diffuse
 * head gets the rest of the layer's budget; the total is kept. */
TEST(adakv_allocates_across_heads) {
    enum { P = 256, D = 8 };
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = 2; cp.head_dim = D; cp.dtype = KVB_DTYPE_F32; cp.block_size = 16;
    cp.policy = kvb_policy_default_params(KVB_POLICY_ADAKV);
    cp.policy.budget = 64; cp.policy.obs_window = 8; cp.policy.pool_kernel = 1;
    struct kvb_cache *c;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    static float q[P][2][D], k[P][2][D], v[P][2][D], o[P][2][D];
    unsigned long long rs = 9;
    for (int t = 0; t < P; t++)
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < D; i++) {
                v[t][h][i] = t_randf(&rs);
                k[t][h][i] = h == 0 ? (t % 37 == 0 ? 3.0f : -1.0f) : t_randf(&rs) * 0.01f; /* head 0: 7 spikes */
                q[t][h][i] = h == 0 ? 1.0f : t_randf(&rs) * 0.01f;
            }
    CHECK_OK(kvb_cache_prefill(c, 0, P, &q[0][0][0], 2, &k[0][0][0], &v[0][0][0], &o[0][0][0], NULL));
    kvb_cache_compress(c, NULL);
    int b0 = kvb_cache_get_budget(c, 0, 0), b1 = kvb_cache_get_budget(c, 0, 1);
    CHECK_EQ_INT(b0 + b1, 128);
    CHECK(b1 > b0);
    CHECK(b0 < 64);
    CHECK_EQ_INT(kvb_cache_n_slots(c, 0, 0), b0);
    CHECK_EQ_INT(kvb_cache_n_slots(c, 0, 1), b1);
    /* head 0 kept its spikes */
    long long pos[128];
    int n;
    kept(c, 0, pos, &n);
    int spikes = 0;
    for (int j = 0; j < n; j++) spikes += pos[j] % 37 == 0;
    CHECK_EQ_INT(spikes, 7);
    /* the memory follows the lengths: pages of head 0 < pages of head 1 */
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(c, &cs);
    CHECK(cs.pages_in_use <= (b0 + 15) / 16 + (b1 + 15) / 16 + 2);
    kvb_cache_free(c);
}

TEST(block_h2o_evicts_whole_pages) {
    struct kvb_cache *c = bookkeeping_cache(KVB_POLICY_BLOCK_H2O, 24, 4, 1, 4);
    /* scores: page 2 (slots 8..11) is the lightest among the eligible pages */
    for (int t = 0; t < 25; t++) {
        kvb_cache_append(c, 0, NULL, NULL);
        int m = kvb_cache_n_slots(c, 0, 0);
        float w[64] = {0};
        w[m - 1] = (t >= 8 && t < 12) ? 0.01f : 0.5f;
        kvb_cache_observe(c, 0, 0, w, m);
        kvb_cache_evict(c, 0);
    }
    CHECK_EQ_INT(kvb_cache_n_slots(c, 0, 0), 21);
    long long pos[64];
    int n;
    kept(c, 0, pos, &n);
    for (int j = 0; j < n; j++) CHECK(pos[j] < 8 || pos[j] >= 12);
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(c, &cs);
    CHECK_EQ_INT(cs.pages_in_use, 6); /* 21 slots in 4-slot pages, the freed page returned */
    kvb_cache_free(c);
}

int main(void) {
    RUN(h2o_trace_keeps_heavy_hitters);
    RUN(streaming_trace_keeps_sinks_and_window);
    RUN(window_keeps_most_recent);
    RUN(tova_evicts_lowest_current_attention);
    RUN(knorm_evicts_largest_key_norm);
    RUN(scissorhands_evicts_persistently_unimportant);
    RUN(snapkv_keeps_the_needle);
    RUN(pyramidkv_layer_budgets);
    RUN(adakv_allocates_across_heads);
    RUN(block_h2o_evicts_whole_pages);
    return test_summary();
}

/*
 * test_policies.c — decisions computed by hand, fed through the same
 * append/observe/evict interface the engine and the lab use.
 */
#include "cache_helpers.h"

static struct kvb_cache *bookkeeping_cache(enum kvb_policy_id id, int budget, int n_sink, int n_kv, int block) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.kv.max_distance = 24; /* lminfinite (positions capped): short, so the cap is exercised */
    cp.n_layer = 1; cp.n_kv_head = n_kv; cp.head_dim = 4; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = block;
    cp.kv.policy = kvb_policy_default_params(id);
    cp.kv.policy.budget = budget;
    cp.kv.policy.n_sink = n_sink;
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
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = 4; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 4;
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_KNORM);
    cp.kv.policy.budget = 3;
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
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = 4; cp.kv.block_size = 4;
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_SCISSORHANDS);
    cp.kv.policy.budget = 5; cp.kv.policy.n_sink = 1; cp.kv.policy.history = 4; cp.kv.policy.threshold = 3; cp.kv.policy.n_recent = 1;
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
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = D; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 16;
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_SNAPKV);
    cp.kv.policy.budget = 48; cp.kv.policy.obs_window = 16;
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

/* A multi-layer, multi-head bookkeeping cache holding a P-token prompt
 * (appended, no votes), then compressed. */
static struct kvb_cache *prompt_cache(enum kvb_policy_id id, int L, int H, int B, int W, int P) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = L; cp.n_kv_head = H; cp.head_dim = 4; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 4;
    cp.kv.policy = kvb_policy_default_params(id);
    cp.kv.policy.budget = B; cp.kv.policy.obs_window = W; cp.kv.policy.pyramid_beta = 20;
    cp.pool_bytes = 8 << 20;
    struct kvb_cache *c = NULL;
    if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) { printf("  init: %s\n", kvb_last_error()); return NULL; }
    for (int l = 0; l < L; l++)
        for (int t = 0; t < P; t++) kvb_cache_append(c, l, NULL, NULL);
    kvb_cache_compress(c, NULL);
    return c;
}

TEST(pyramidkv_layer_budgets) {
    /* P >> B, room 80: min 4, max 156, step 38 -> 176 138 100 62 24 (average 100) */
    struct kvb_cache *c = prompt_cache(KVB_POLICY_PYRAMIDKV, 5, 2, 100, 20, 1000);
    const int want[5] = {176, 138, 100, 62, 24};
    for (int l = 0; l < 5; l++)
        for (int h = 0; h < 2; h++) {
            CHECK_EQ_INT(kvb_cache_n_slots(c, l, h), want[l]);
            CHECK_EQ_INT(kvb_cache_budget(c, l, h), want[l] + 100); /* + decode_budget (= budget) */
        }
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(c, &cs);
    CHECK(cs.pages_in_use <= 2 * (44 + 35 + 25 + 16 + 6) + 20); /* the pages follow the budgets */
    kvb_cache_free(c);
    /* P just above B: max clamps to P - W = 90, min = 2 * 80 - 90 = 70 */
    c = prompt_cache(KVB_POLICY_PYRAMIDKV, 5, 2, 100, 20, 110);
    const int want2[5] = {110, 105, 100, 95, 90};
    for (int l = 0; l < 5; l++) CHECK_EQ_INT(kvb_cache_n_slots(c, l, 1), want2[l]);
    kvb_cache_free(c);
}

/* The review's case: 4 layers, B 64, W 8, P 40 gave 40 56 72 88 bottom to
 * top. A prompt no longer than B is kept whole; for every P the budgets never
 * increase toward the top and never sum above L x B. */
TEST(pyramidkv_short_and_long_prompts) {
    for (int P = 8; P <= 400; P += 8) {
        struct kvb_cache *c = prompt_cache(KVB_POLICY_PYRAMIDKV, 4, 2, 64, 8, P);
        if (!c) FAILF("init");
        int sum = 0, prev = 1 << 30;
        for (int l = 0; l < 4; l++) {
            int n = kvb_cache_n_slots(c, l, 0);
            CHECK_EQ_INT(kvb_cache_n_slots(c, l, 1), n);
            if (P <= 64) CHECK_EQ_INT(n, P);
            if (n > prev) FAILF("P %d: layer %d keeps %d > layer below %d", P, l, n, prev);
            if (n > P) FAILF("P %d: layer %d keeps %d", P, l, n);
            prev = n;
            sum += n;
        }
        if (P > 64 && sum > 4 * 64) FAILF("P %d: layers keep %d > %d", P, sum, 4 * 64);
        kvb_cache_free(c);
    }
}

/* AdaKV with P < B, P = B and P >> B: a short prompt is kept whole in every
 * head (the review's repro held obs_window tokens), a long one is cut to
 * H x B per layer. */
TEST(adakv_short_and_long_prompts) {
    const int Ps[4] = {4, 64, 65, 600};
    for (int i = 0; i < 4; i++) {
        const int P = Ps[i];
        struct kvb_cache *c = prompt_cache(KVB_POLICY_ADAKV, 3, 4, 64, 8, P);
        if (!c) FAILF("init");
        for (int l = 0; l < 3; l++) {
            int sum = 0;
            for (int h = 0; h < 4; h++) {
                int n = kvb_cache_n_slots(c, l, h);
                sum += n;
                if (P <= 64) CHECK_EQ_INT(n, P);
                CHECK_EQ_INT(kvb_cache_budget(c, l, h), n + 64);
            }
            if (P > 64) CHECK_EQ_INT(sum, 4 * 64);
        }
        kvb_cache_free(c);
    }
}

/* SnapKV's vote against an independent double-precision reference written
 * here: causal softmax rows of the last W queries (no RoPE), summed, averaged
 * over the G query heads, max- or avg-pooled (kernel 3, padding counted as
 * zero for avg) over [0, P - W), top B - W plus the window. */
static void snapkv_reference(const float *q, const float *k, int P, int G, int D, int W, int B, bool avg, int *keep) {
    double *vote = calloc((size_t)P, sizeof(double)), *pooled = calloc((size_t)P, sizeof(double)), *s = malloc(sizeof(double) * (size_t)P);
    for (int i = P - W; i < P; i++)
        for (int g = 0; g < G; g++) {
            double mx = -1e300, z = 0;
            for (int j = 0; j <= i; j++) {
                double a = 0;
                for (int x = 0; x < D; x++) a += (double)q[((size_t)i * G + g) * D + x] * k[(size_t)j * D + x];
                s[j] = a / sqrt((double)D);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j <= i; j++) z += exp(s[j] - mx);
            for (int j = 0; j <= i; j++) vote[j] += exp(s[j] - mx) / z / G;
        }
    const int m = P - W;
    for (int j = 0; j < m; j++) {
        double acc = avg ? 0 : -1e300;
        for (int t = j - 1; t <= j + 1; t++) {
            if (t < 0 || t >= m) continue;
            if (avg) acc += vote[t];
            else acc = vote[t] > acc ? vote[t] : acc;
        }
        pooled[j] = avg ? acc / 3 : acc;
    }
    for (int j = 0; j < P; j++) keep[j] = j >= m;
    for (int r = 0; r < B - W; r++) { /* highest first; ties: the newer wins (the older is evicted first) */
        int best = -1;
        for (int j = 0; j < m; j++)
            if (!keep[j] && (best < 0 || pooled[j] >= pooled[best])) best = j;
        keep[best] = 1;
    }
    free(vote); free(pooled); free(s);
}

static struct kvb_cache *snap_cache(int D, int B, int W, bool avg, int prefill_budget) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = D; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 8;
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_SNAPKV);
    cp.kv.policy.budget = B; cp.kv.policy.obs_window = W; cp.kv.policy.pool_kernel = 3;
    cp.kv.policy.pool_mode = avg ? KVB_POOL_AVG : KVB_POOL_MAX;
    cp.kv.policy.prefill_budget = prefill_budget;
    cp.kv.policy.decode_budget = 5;
    cp.pool_bytes = 4 << 20;
    struct kvb_cache *c = NULL;
    if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) printf("  init: %s\n", kvb_last_error());
    return c;
}

/* Default mode: chunked prefill (a last chunk shorter than the window, so
 * the voting queries span two chunks) keeps exactly the reference's set, and
 * so the same set as one whole-prompt prefill; max and avg pooling. Then the
 * compressed prompt stays frozen while generated tokens come and go. */
TEST(snapkv_vote_matches_reference_chunked_or_whole) {
    enum { P = 90, G = 2, D = 8, W = 10, B = 30 };
    static float q[P][G][D], k[P][D], v[P][D], o[P][G][D];
    unsigned long long rs = 17;
    for (int t = 0; t < P; t++)
        for (int x = 0; x < D; x++) {
            k[t][x] = t_randf(&rs) * 2.0f;
            v[t][x] = t_randf(&rs);
            for (int g = 0; g < G; g++) q[t][g][x] = t_randf(&rs) * 2.0f;
        }
    for (int avg = 0; avg < 2; avg++) {
        int keep[P];
        snapkv_reference(&q[0][0][0], &k[0][0], P, G, D, W, B, avg, keep);
        const int cuts[2][4] = {{P, 0, 0, 0}, {40, 30, 16, 4}};
        for (int cc = 0; cc < 2; cc++) {
            struct kvb_cache *c = snap_cache(D, B, W, avg, 0);
            if (!c) FAILF("init");
            int at = 0;
            for (int i = 0; i < 4 && cuts[cc][i]; i++) {
                CHECK_OK(kvb_cache_prefill(c, 0, cuts[cc][i], &q[at][0][0], G, &k[at][0], &v[at][0], &o[at][0][0], NULL));
                at += cuts[cc][i];
            }
            CHECK_EQ_INT(kvb_cache_n_slots(c, 0, 0), P); /* nothing leaves while the prompt is read */
            kvb_cache_compress(c, NULL);
            long long pos[P];
            int n;
            kept(c, 0, pos, &n);
            CHECK_EQ_INT(n, B);
            for (int j = 0; j < n; j++)
                if (!keep[pos[j]]) FAILF("%s pooling, cuts %d: kept %lld, which the reference drops", avg ? "avg" : "max", cc, pos[j]);
            for (int t = 0; t < 12; t++) {
                float qq[G][D], kk[D], vv[D], oo[G][D];
                for (int x = 0; x < D; x++) { kk[x] = t_randf(&rs); vv[x] = t_randf(&rs); qq[0][x] = qq[1][x] = t_randf(&rs); }
                CHECK_OK(kvb_cache_decode(c, 0, &qq[0][0], G, kk, vv, &oo[0][0], NULL));
            }
            long long pos2[P];
            int n2;
            kept(c, 0, pos2, &n2);
            CHECK_EQ_INT(n2, B + 5);                    /* + decode_budget */
            for (int j = 0; j < B; j++) CHECK(pos2[j] == pos[j]);
            CHECK(pos2[B] == P + 12 - 5);              /* the oldest generated left */
            kvb_cache_free(c);
        }
    }
}

/* --prefill-budget: votes accumulate over chunks instead of being replaced.
 * Chunk 1's window looks for key A (pos 10), chunk 2's for key B (pos 150);
 * both survive eviction between chunks and the compress. */
TEST(snapkv_prefill_budget_accumulates_votes) {
    enum { P = 200, D = 8, W = 8 };
    static float q[P][D], k[P][D], v[P][D], o[P][D];
    unsigned long long rs = 3;
    for (int t = 0; t < P; t++)
        for (int x = 0; x < D; x++) { q[t][x] = t_randf(&rs) * 0.1f; k[t][x] = t_randf(&rs) * 0.1f; v[t][x] = t_randf(&rs); }
    for (int x = 0; x < D; x++) {
        k[10][x] = x < 4 ? 3.0f : 0.0f;
        k[150][x] = x < 4 ? 0.0f : 3.0f;
        for (int t = 100 - W; t < 100; t++) q[t][x] = x < 4 ? 3.0f : 0.0f;
        for (int t = P - W; t < P; t++) q[t][x] = x < 4 ? 0.0f : 3.0f;
    }
    struct kvb_cache *c = snap_cache(D, 24, W, false, 40);
    if (!c) FAILF("init");
    CHECK_OK(kvb_cache_prefill(c, 0, 100, &q[0][0], 1, &k[0][0], &v[0][0], &o[0][0], NULL));
    CHECK(kvb_cache_n_slots(c, 0, 0) <= 40);
    CHECK_OK(kvb_cache_prefill(c, 0, 100, &q[100][0], 1, &k[100][0], &v[100][0], &o[100][0], NULL));
    kvb_cache_compress(c, NULL);
    long long pos[64];
    int n, a = 0, b = 0;
    kept(c, 0, pos, &n);
    CHECK_EQ_INT(n, 24);
    for (int j = 0; j < n; j++) { a |= pos[j] == 10; b |= pos[j] == 150; }
    CHECK(a);
    CHECK(b);
    kvb_cache_free(c);
}

/* TOVA by hand, two KV heads. Head 0 weights {0.1 0.5 0.05 0.35}, head 1
 * {0.3 0.1 0.4 0.2}: the layer mean {0.2 0.3 0.225 0.275} drops token 0 from
 * both heads; the head scope drops token 2 from head 0 and token 1 from head 1. */
TEST(tova_layer_and_head_scopes_by_hand) {
    const float w0[4] = {0.1f, 0.5f, 0.05f, 0.35f}, w1[4] = {0.3f, 0.1f, 0.4f, 0.2f};
    for (int scope = 0; scope < 2; scope++) {
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.n_layer = 1; cp.n_kv_head = 2; cp.head_dim = 4; cp.kv.block_size = 4;
        cp.kv.policy = kvb_policy_default_params(KVB_POLICY_TOVA);
        cp.kv.policy.budget = 3;
        cp.kv.policy.tova_scope = scope ? KVB_TOVA_HEAD : KVB_TOVA_LAYER;
        struct kvb_cache *c;
        CHECK_OK(kvb_cache_init(NULL, &cp, &c));
        for (int t = 0; t < 4; t++) CHECK_OK(kvb_cache_append(c, 0, NULL, NULL));
        CHECK_OK(kvb_cache_observe(c, 0, 0, w0, 4));
        CHECK_OK(kvb_cache_observe(c, 0, 1, w1, 4));
        kvb_cache_evict(c, 0);
        if (scope == 0) {
            CHECK_KEPT(c, 0, 1, 2, 3);
            CHECK_KEPT(c, 1, 1, 2, 3);
        } else {
            CHECK_KEPT(c, 0, 0, 1, 3);
            CHECK_KEPT(c, 1, 0, 2, 3);
        }
        kvb_cache_free(c);
    }
}

/* AdaKV: a head whose attention is concentrated needs few tokens, a diffuse
 * head gets the rest of the layer's budget; the total is kept. */
TEST(adakv_allocates_across_heads) {
    enum { P = 256, D = 8 };
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = 2; cp.head_dim = D; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 16;
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_ADAKV);
    cp.kv.policy.budget = 64; cp.kv.policy.obs_window = 8; cp.kv.policy.pool_kernel = 1;
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
    int b0 = kvb_cache_n_slots(c, 0, 0), b1 = kvb_cache_n_slots(c, 0, 1);
    CHECK_EQ_INT(b0 + b1, 128);
    CHECK(b1 > b0);
    CHECK(b0 < 64);
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

/* kvb_cache_compress is a true no-op for a decode-time policy and keeps a
 * budget set with kvb_cache_set_budget; for snapkv that budget is the
 * stream's compression budget. */
TEST(compress_keeps_set_budgets) {
    struct kvb_cache *c = bookkeeping_cache(KVB_POLICY_WINDOW, 20, 0, 2, 4);
    for (int t = 0; t < 12; t++) CHECK_OK(kvb_cache_append(c, 0, NULL, NULL));
    CHECK_OK(kvb_cache_set_budget(c, 0, 1, 10));
    void *a, *b;
    size_t la, lb;
    CHECK_OK(kvb_cache_save(c, &a, &la));
    kvb_cache_compress(c, NULL);
    CHECK_OK(kvb_cache_save(c, &b, &lb));
    CHECK(la == lb && memcmp(a, b, la) == 0); /* byte-identical */
    CHECK_EQ_INT(kvb_cache_budget(c, 0, 0), 20);
    CHECK_EQ_INT(kvb_cache_budget(c, 0, 1), 10);
    kvb_buffer_free(a);
    kvb_buffer_free(b);
    kvb_cache_free(c);
    c = bookkeeping_cache(KVB_POLICY_SNAPKV, 20, 0, 2, 4);
    CHECK_OK(kvb_cache_set_budget(c, 0, 1, 8));
    for (int t = 0; t < 30; t++) CHECK_OK(kvb_cache_append(c, 0, NULL, NULL));
    CHECK_EQ_INT(kvb_cache_n_slots(c, 0, 1), 30); /* the prompt is read whole */
    kvb_cache_compress(c, NULL);
    CHECK_EQ_INT(kvb_cache_n_slots(c, 0, 0), 20);
    CHECK_EQ_INT(kvb_cache_n_slots(c, 0, 1), 8);
    kvb_cache_free(c);
}

/* ---- the pinned span (kv.keep) ---- */

static float keep_rand(unsigned *st) {
    *st = *st * 1664525u + 1013904223u;
    return (float)((*st >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* A real cache (3 layers, 2 KV heads, 4 query heads, d 8, pages of 4) under
 * policy id with budget 8 and the span kv.keep; a 40-token prompt read in
 * chunks of 8 (compressed after, for the snapkv family), then n_dec decode
 * steps of random q, k, v. After the prompt and after every step, every
 * stream must hold positions 0..keep-1 as its first slots, and at most
 * keep + its budget tokens. Returns the failures' count (printed). */
static int keep_run(enum kvb_policy_id id, int keep, int n_dec, struct kvb_cache **out_c) {
    enum { L = 3, H = 2, NH = 4, D = 8, P = 40, CH = 8 };
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = L; cp.n_kv_head = H; cp.head_dim = D; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 4;
    cp.rope.type = KVB_ROPE_NEOX; cp.rope.n_dims = D;
    cp.kv.policy = kvb_policy_default_params(id);
    if (id != KVB_POLICY_FULL) cp.kv.policy.budget = 8;
    if (cp.kv.policy.n_sink >= 8) cp.kv.policy.n_sink = 2;
    if (id == KVB_POLICY_SNAPKV || id == KVB_POLICY_PYRAMIDKV || id == KVB_POLICY_ADAKV) cp.kv.policy.obs_window = 2;
    if (id == KVB_POLICY_LMINFINITE) cp.kv.max_distance = 16;
    cp.kv.keep = keep;
    cp.pool_bytes = 8 << 20;
    struct kvb_cache *c = NULL;
    if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) { printf("  %s: init: %s\n", kvb_policy_name(id), kvb_last_error()); return 1; }
    unsigned st = 12345u + (unsigned)id;
    static float q[CH * NH * D], k[CH * H * D], v[CH * H * D], o[CH * NH * D];
    int bad = 0;
    for (int step = -P / CH; step < n_dec && !bad; step++) {
        const int n = step < 0 ? CH : 1;
        for (int l = 0; l < L; l++) {
            for (int i = 0; i < n * NH * D; i++) q[i] = keep_rand(&st);
            for (int i = 0; i < n * H * D; i++) { k[i] = keep_rand(&st); v[i] = keep_rand(&st); }
            kvb_status s = step < 0 ? kvb_cache_prefill(c, l, n, q, NH, k, v, o, NULL) : kvb_cache_decode(c, l, q, NH, k, v, o, NULL);
            if (s != KVB_OK) { printf("  %s: step %d: %s\n", kvb_policy_name(id), step, kvb_last_error()); bad++; }
        }
        if (step == -1) kvb_cache_compress(c, NULL);
        const long long past = kvb_cache_n_past(c, 0);
        for (int l = 0; l < L && !bad; l++)
            for (int h = 0; h < H && !bad; h++) {
                const int m = kvb_cache_n_slots(c, l, h), budget = kvb_cache_budget(c, l, h);
                const long long span = past < keep ? past : keep;
                for (int j = 0; j < span && !bad; j++) {
                    struct kvb_slot_info si;
                    if (kvb_cache_slot_info(c, l, h, j, &si) != KVB_OK || si.pos_original != j) {
                        printf("  %s: step %d stream (%d,%d): pinned position %d gone (slot %d holds %lld)\n", kvb_policy_name(id), step, l,
                               h, j, j, (long long)si.pos_original);
                        bad++;
                    }
                }
                if (budget > 0 && m - span > budget) {
                    printf("  %s: step %d stream (%d,%d): %d tokens > keep %lld + budget %d\n", kvb_policy_name(id), step, l, h, m, span, budget);
                    bad++;
                }
            }
    }
    if (out_c) *out_c = c;
    else kvb_cache_free(c);
    return bad;
}

/* Under every policy a stream read far past its budget (40 prompt tokens and
 * 60 decode steps, budget 8) keeps every one of its first keep positions and
 * holds at most keep + budget tokens; the snapkv family's compression keeps
 * the span; the pool bytes never exceed the sizing rule's (which counts keep). */
TEST(pinned_span_kept_under_every_policy) {
    int lost = 0;
    for (int id = 0; id < KVB_POLICY_COUNT; id++) { /* every policy reports, not only the first that fails */
        if (keep_run((enum kvb_policy_id)id, 10, 60, NULL)) {
            printf("  policy %s lost its pinned span\n", kvb_policy_name((enum kvb_policy_id)id));
            lost++;
        }
    }
    if (lost) FAILF("%d policies lost their pinned span", lost);
    for (int id = 0; id < KVB_POLICY_COUNT; id++) {
        struct kvb_cache *c = NULL;
        if (keep_run((enum kvb_policy_id)id, 10, 60, &c)) FAILF("policy %s lost its pinned span", kvb_policy_name((enum kvb_policy_id)id));
        struct kvb_cache_params got;
        kvb_cache_get_params(c, &got);
        CHECK_EQ_INT(got.kv.keep, 10);
        if (id != KVB_POLICY_FULL) { /* the span sits on top: the conversation still has its budget */
            int held = 0;
            for (int h = 0; h < 2; h++) held += kvb_cache_n_slots(c, 0, h);
            if (held <= 2 * 10) FAILF("%s: %d tokens held in layer 0: the span ate the budget", kvb_policy_name((enum kvb_policy_id)id), held);
        }
        struct kvb_cache_stats cs;
        kvb_cache_get_stats(c, &cs);
        const size_t rule = kvb_kv_seq_bytes(&got.kv, 3, 2, 8, 100, 40, 8);
        if (cs.bytes_peak > rule)
            FAILF("%s: peak %zu bytes > the sizing rule's %zu", kvb_policy_name((enum kvb_policy_id)id), cs.bytes_peak, rule);
        kvb_cache_free(c);
    }
}

/* StreamingLLM with a span: the span is the attention sink, so kept = the
 * span + the budget's most recent tokens (n_sink 4 <= keep 10: subsumed);
 * with keep 2 < n_sink 4, positions 2 and 3 stay as the sinks after the
 * span, inside the budget. */
TEST(pinned_span_subsumes_streaming_sinks) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = 4; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 4;
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_STREAMING);
    cp.kv.policy.budget = 6;
    cp.kv.policy.n_sink = 4;
    cp.kv.keep = 10;
    struct kvb_cache *c = NULL;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    for (int t = 0; t < 30; t++) { CHECK_OK(kvb_cache_append(c, 0, NULL, NULL)); kvb_cache_evict(c, 0); }
    CHECK_KEPT(c, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 24, 25, 26, 27, 28, 29);
    kvb_cache_free(c);
    cp.kv.keep = 2;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    for (int t = 0; t < 30; t++) { CHECK_OK(kvb_cache_append(c, 0, NULL, NULL)); kvb_cache_evict(c, 0); }
    CHECK_KEPT(c, 0, 0, 1, 2, 3, 26, 27, 28, 29);
    kvb_cache_free(c);
    cp.kv.keep = -1; /* the library has no "whole instruction span": refused by name */
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "kv.keep") != NULL);
    cp.kv.keep = KVB_KEEP_MAX + 1;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
}

/* The sizing rule counts the span on top of an evicting policy's peak (whole
 * pages of keep more tokens per stream); full already holds the context. */
TEST(pinned_span_counted_by_sizing_rule) {
    struct kvb_kv_params kv = kvb_kv_default_params();
    kv.policy = kvb_policy_default_params(KVB_POLICY_H2O);
    kv.policy.budget = 64;
    const size_t page = (size_t)16 * 2 * kvb_dtype_row_bytes(KVB_DTYPE_F16, 64);
    const size_t b0 = kvb_kv_seq_bytes(&kv, 4, 2, 64, 4096, 512, 32);
    kv.keep = 160;
    const size_t b1 = kvb_kv_seq_bytes(&kv, 4, 2, 64, 4096, 512, 32);
    CHECK_EQ_INT((long long)(b1 - b0), (long long)(4 * 2 * 10 * page)); /* 160 tokens: 10 pages per stream */
    kv.keep = 10000; /* never more than the context */
    CHECK_EQ_INT((long long)kvb_kv_seq_bytes(&kv, 4, 2, 64, 4096, 512, 32) - (long long)b0, (long long)(4 * 2 * 256 * page));
    kv.policy = kvb_policy_default_params(KVB_POLICY_FULL);
    kv.keep = 0;
    const size_t f0 = kvb_kv_seq_bytes(&kv, 4, 2, 64, 4096, 512, 32);
    kv.keep = 160;
    CHECK_EQ_INT((long long)kvb_kv_seq_bytes(&kv, 4, 2, 64, 4096, 512, 32), (long long)f0);
}

/* ---- keydiff: a float64 reference of the paper's rule ---- */

/* KeyDiff's rule in double precision on one stream of D-dim keys k[t]
 * (pre-RoPE, token t at position t): tokens arrive in blocks (block[b]
 * tokens each); after each block, while more than B are held, the anchor
 * a = mean of the held keys' unit vectors (rotated by r: the cache's keys;
 * r NULL: the keys as they arrived; raw: the mean of the keys themselves)
 * scores s_j = cos(k_j, a) once and the n - B largest among [n_sink,
 * n - n_recent) leave (ties: the older). kept[] gets the positions held;
 * returns their count. */
enum { KD_D = 8, KD_MAXT = 96 };
static int keydiff_ref(const struct kvb_rope *r, bool raw, float k[][KD_D], int T, const int *block, int B, int n_sink,
                       int n_recent, long long *kept) {
    int n = 0, t = 0;
    for (int b = 0; t < T; b++) {
        for (int i = 0; i < block[b] && t < T; i++) kept[n++] = t++;
        if (n <= B) continue;
        double rk[KD_MAXT][KD_D], a[KD_D] = {0}, sc[KD_MAXT];
        for (int j = 0; j < n; j++) {
            if (r) ref_rope(r, k[kept[j]], KD_D, kept[j], rk[j]);
            else for (int i = 0; i < KD_D; i++) rk[j][i] = k[kept[j]][i];
            double n2 = 0;
            for (int i = 0; i < KD_D; i++) n2 += rk[j][i] * rk[j][i];
            for (int i = 0; i < KD_D; i++) a[i] += rk[j][i] / (raw ? 1.0 : sqrt(n2)) / n;
        }
        double an = 0;
        for (int i = 0; i < KD_D; i++) an += a[i] * a[i];
        for (int j = 0; j < n; j++) {
            double dot = 0, n2 = 0;
            for (int i = 0; i < KD_D; i++) { dot += rk[j][i] * a[i]; n2 += rk[j][i] * rk[j][i]; }
            sc[j] = dot / sqrt(n2 * an);
        }
        int over = n - B, hi = n - n_recent;
        bool gone[KD_MAXT] = {false};
        for (int v = 0; v < over; v++) { /* the largest cosine among the candidates, the older on ties */
            int best = -1;
            for (int j = n_sink; j < hi; j++)
                if (!gone[j] && (best < 0 || sc[j] > sc[best])) best = j;
            gone[best] = true;
        }
        int m = 0;
        for (int j = 0; j < n; j++)
            if (!gone[j]) kept[m++] = kept[j];
        n = m;
    }
    return n;
}

/* One case: the cache's kept set after the same blocks equals the
 * reference's; the reference's variants (keys before RoPE, the raw mean as
 * the anchor) keep other sets, so the check tells them apart. */
static int keydiff_case(enum kvb_rope_type rt, int B, int n_sink, int n_recent, const int *block, unsigned seed) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = KD_D; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 4;
    cp.rope = (struct kvb_rope){rt, KD_D, 10000.0f, 1.0f, NULL};
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_KEYDIFF);
    cp.kv.policy.budget = B; cp.kv.policy.n_sink = n_sink; cp.kv.policy.n_recent = n_recent;
    struct kvb_cache *c = NULL;
    if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) { printf("  init: %s\n", kvb_last_error()); return 1; }
    enum { T = 60 };
    float k[T][KD_D];
    unsigned x = seed;
    for (int t = 0; t < T; t++) /* a shared direction plus noise: similar keys, some much more than others */
        for (int i = 0; i < KD_D; i++) {
            x = x * 1103515245u + 12345u;
            k[t][i] = (i < 2 ? 1.0f : 0.3f) + (float)((x >> 8) & 0xffff) / 65536.0f - 0.5f;
        }
    int t = 0, bad = 0;
    for (int b = 0; t < T; b++) {
        for (int i = 0; i < block[b] && t < T; i++, t++) {
            float v[KD_D] = {0};
            if (kvb_cache_append(c, 0, k[t], v) != KVB_OK) bad = 1;
        }
        kvb_cache_evict(c, 0);
    }
    long long want[KD_MAXT], pre[KD_MAXT], raw[KD_MAXT], got[256];
    const int nw = keydiff_ref(&cp.rope, false, k, T, block, B, n_sink, n_recent, want);
    const int np = keydiff_ref(NULL, false, k, T, block, B, n_sink, n_recent, pre);
    const int nr = keydiff_ref(&cp.rope, true, k, T, block, B, n_sink, n_recent, raw);
    int ng;
    kept(c, 0, got, &ng);
    bad |= ng != nw;
    for (int j = 0; !bad && j < ng; j++) bad = got[j] != want[j];
    if (bad) {
        printf("  keydiff kept:");
        for (int j = 0; j < ng; j++) printf(" %lld", got[j]);
        printf("  reference:");
        for (int j = 0; j < nw; j++) printf(" %lld", want[j]);
        printf("\n");
    }
    if (np == nw && !memcmp(pre, want, sizeof(long long) * (size_t)nw)) { printf("  keys before RoPE keep the same set: the case cannot tell\n"); bad = 1; }
    if (nr == nw && !memcmp(raw, want, sizeof(long long) * (size_t)nw)) { printf("  the raw mean keeps the same set: the case cannot tell\n"); bad = 1; }
    kvb_cache_free(c);
    return bad;
}

/* KeyDiff (keydiff): the kept set equals the float64 reference of the
 * paper's rule (cosine to the mean unit key, rotated keys as cached, the
 * most similar leave), at decode (one token per step) and block-wise
 * prefill (a block of 20, then 7s, then single tokens), with interleaved and
 * NeoX RoPE, with and without sinks and a protected recent window. */
TEST(keydiff_matches_float64_reference) {
    int ones[KD_MAXT], blocks[KD_MAXT];
    for (int i = 0; i < KD_MAXT; i++) ones[i] = blocks[i] = 1;
    blocks[0] = 20; blocks[1] = blocks[2] = 7;
    CHECK(keydiff_case(KVB_ROPE_INTERLEAVED, 12, 0, 0, ones, 1) == 0);
    CHECK(keydiff_case(KVB_ROPE_NEOX, 12, 0, 0, blocks, 2) == 0);
    CHECK(keydiff_case(KVB_ROPE_INTERLEAVED, 16, 2, 3, blocks, 3) == 0);
    CHECK(keydiff_case(KVB_ROPE_NEOX, 10, 1, 2, ones, 4) == 0);
}

/* ---- expected-attention: a float64 reference of the paper's closed form ---- */

enum { EA_D = 8, EA_G = 2, EA_T = 48, EA_FUT = 512 };
struct ea_variant { bool cov, vnorm, turn; }; /* the covariance term, the value norm, the future rotation */

/* Expected Attention in double precision on one stream: tokens (positions
 * 0..T-1; query rows q[t][g], pre-RoPE key k[t], value v[t]) arrive in
 * blocks; after each block, while more than B are held: mu, S = the mean
 * and population covariance of every query so far at positions >= n_sink;
 * Rbar = the mean rotation of positions [now, now + 512) (now = the last
 * position + 1); per head z_j = (Rbar mu).k_j / sqrt(d) + k_j^T Rbar S
 * Rbar^T k_j / (2d) over the held keys after the sinks (rotated at their
 * positions), softmax, mean over the heads, times ||v_j||; the n - B lowest
 * among [n_sink, n - n_recent) leave (ties: the older). */
/* The float64 scores sc[j] (j in [n_sink, n)) of held tokens kept[0..n)
 * once the first t tokens are in: the statistics of the queries q[u] for u
 * in [n_sink, t), the rotation averaged from the position after kept[n - 1]. */
static void ea_ref_scores(const struct kvb_rope *r, struct ea_variant var, float q[][EA_G][EA_D], float k[][EA_D], float v[][EA_D], int t,
                          const long long *kept, int n, int n_sink, double *sc) {
    const long long now = kept[n - 1] + 1;
    double cb[EA_D / 2], sb[EA_D / 2];
    for (int i = 0; i < EA_D / 2; i++) {
        cb[i] = var.turn ? 0 : 1;
        sb[i] = 0;
        for (int f = 0; var.turn && f < EA_FUT; f++) {
            const double th = (double)(now + f) * pow((double)r->base, -2.0 * i / r->n_dims);
            cb[i] += cos(th) / EA_FUT;
            sb[i] += sin(th) / EA_FUT;
        }
    }
    double R[EA_D][EA_D] = {{0}};
    for (int i = 0; i < EA_D / 2; i++) {
        const int a = r->type == KVB_ROPE_INTERLEAVED ? 2 * i : i, c2 = r->type == KVB_ROPE_INTERLEAVED ? 2 * i + 1 : i + EA_D / 2;
        R[a][a] = cb[i]; R[a][c2] = -sb[i]; R[c2][a] = sb[i]; R[c2][c2] = cb[i];
    }
    for (int j = 0; j < EA_T; j++) sc[j] = 0;
    for (int g = 0; g < EA_G; g++) {
        double mu[EA_D] = {0}, S[EA_D][EA_D] = {{0}}, m = 0;
        for (int u = n_sink; u < t; u++, m++)
            for (int a = 0; a < EA_D; a++) mu[a] += q[u][g][a];
        for (int a = 0; a < EA_D; a++) mu[a] /= m;
        for (int u = n_sink; u < t; u++)
            for (int a = 0; a < EA_D; a++)
                for (int c2 = 0; c2 < EA_D; c2++) S[a][c2] += (q[u][g][a] - mu[a]) * (q[u][g][c2] - mu[c2]) / m;
        double mb[EA_D] = {0}, RS[EA_D][EA_D] = {{0}}, Sb[EA_D][EA_D] = {{0}};
        for (int a = 0; a < EA_D; a++)
            for (int c2 = 0; c2 < EA_D; c2++) mb[a] += R[a][c2] * mu[c2];
        for (int a = 0; a < EA_D; a++)
            for (int c2 = 0; c2 < EA_D; c2++)
                for (int e = 0; e < EA_D; e++) RS[a][c2] += R[a][e] * S[e][c2];
        for (int a = 0; a < EA_D; a++)
            for (int c2 = 0; c2 < EA_D; c2++)
                for (int e = 0; e < EA_D; e++) Sb[a][c2] += RS[a][e] * R[c2][e];
        double z[EA_T], mx = -1e300, sum = 0;
        for (int j = n_sink; j < n; j++) {
            double kr[EA_D], lin = 0, quad = 0;
            ref_rope(r, k[kept[j]], EA_D, kept[j], kr);
            for (int a = 0; a < EA_D; a++) {
                lin += mb[a] * kr[a];
                for (int c2 = 0; c2 < EA_D; c2++) quad += kr[a] * Sb[a][c2] * kr[c2];
            }
            z[j] = lin / sqrt((double)EA_D) + (var.cov ? quad / (2.0 * EA_D) : 0);
            if (z[j] > mx) mx = z[j];
        }
        for (int j = n_sink; j < n; j++) sum += exp(z[j] - mx);
        for (int j = n_sink; j < n; j++) sc[j] += exp(z[j] - mx) / sum / EA_G;
    }
    for (int j = n_sink; j < n && var.vnorm; j++) {
        double n2 = 0;
        for (int a = 0; a < EA_D; a++) n2 += (double)v[kept[j]][a] * v[kept[j]][a];
        sc[j] *= sqrt(n2);
    }
}

static int ea_ref_mode(const struct kvb_rope *r, struct ea_variant var, float q[][EA_G][EA_D], float k[][EA_D], float v[][EA_D], const int *block,
                       const bool *compress_after, int B, int n_sink, int n_recent, long long *kept) {
    int n = 0, t = 0;
    for (int b = 0; t < EA_T; b++) {
        for (int i = 0; i < block[b] && t < EA_T; i++) kept[n++] = t++;
        if (n <= B) continue;
        if (compress_after && block[b] > 1 && !compress_after[b]) continue; /* a prompt still read: nothing leaves */
        double sc[EA_T];
        ea_ref_scores(r, var, q, k, v, t, kept, n, n_sink, sc);
        int over = n - B, hi = n - n_recent;
        bool gone[EA_T] = {false};
        for (int x = 0; x < over; x++) {
            int best = -1;
            for (int j = n_sink; j < hi; j++)
                if (!gone[j] && (best < 0 || sc[j] < sc[best])) best = j;
            gone[best] = true;
        }
        int m2 = 0;
        for (int j = 0; j < n; j++)
            if (!gone[j]) kept[m2++] = kept[j];
        n = m2;
    }
    return n;
}

static int ea_ref(const struct kvb_rope *r, struct ea_variant var, float q[][EA_G][EA_D], float k[][EA_D], float v[][EA_D], const int *block,
                  int B, int n_sink, int n_recent, long long *kept) {
    return ea_ref_mode(r, var, q, k, v, block, NULL, B, n_sink, n_recent, kept);
}

/* One case through kvb_cache_prefill (blocks longer than one token) and
 * kvb_cache_decode (single tokens); returns 0 when the kept set equals the
 * reference's, and sets *told for each variant that keeps another set. */
static int ea_case_mode(enum kvb_rope_type rt, float base, int B, int n_sink, int n_recent, const int *block, const bool *compress_after,
                        unsigned seed, int *told) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = EA_D; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 4;
    cp.rope = (struct kvb_rope){rt, EA_D, base, 1.0f, NULL};
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_EXPECTED_ATTENTION);
    cp.kv.policy.budget = B; cp.kv.policy.n_sink = n_sink; cp.kv.policy.n_recent = n_recent;
    cp.kv.policy.compress_prompt = compress_after != NULL;
    struct kvb_cache *c = NULL;
    if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) { printf("  init: %s\n", kvb_last_error()); return 1; }
    static float q[EA_T][EA_G][EA_D], k[EA_T][EA_D], v[EA_T][EA_D];
    unsigned x = seed;
#define EA_RND() (x = x * 1103515245u + 12345u, (float)((x >> 8) & 0xffff) / 65536.0f - 0.5f)
    for (int t = 0; t < EA_T; t++) {
        const float vs = 0.5f + 2.0f * (EA_RND() + 0.5f); /* values of different norms */
        const float qa = 6.0f * EA_RND(); /* queries along a shared direction in slowly turning dims: a covariance worth having */
        for (int i = 0; i < EA_D; i++) {
            const bool slow = i == 3 || i == 6 || i == 7;
            k[t][i] = (slow ? 3.0f : 1.5f) * EA_RND() + (i == 1 ? 0.7f : 0.0f);
            v[t][i] = vs * EA_RND();
            for (int g = 0; g < EA_G; g++) /* the first 4 queries are outliers, as a sequence's first queries are */
                q[t][g][i] = (slow ? qa : 0.0f) * (g ? -1.0f : 1.0f) + EA_RND() + (i == 7 ? (g ? 4.0f : 0.8f) : 0.0f) + (t < 4 && i == 6 ? 12.0f : 0.0f);
        }
    }
#undef EA_RND
    int t = 0, bad = 0;
    float out[EA_T * EA_G * EA_D];
    for (int b = 0; t < EA_T; b++) {
        const int C = block[b] < EA_T - t ? block[b] : EA_T - t;
        if (C == 1) bad |= kvb_cache_decode(c, 0, &q[t][0][0], EA_G, k[t], v[t], out, NULL) != KVB_OK;
        else bad |= kvb_cache_prefill(c, 0, C, &q[t][0][0], EA_G, k[t], v[t], out, NULL) != KVB_OK;
        if (compress_after && compress_after[b]) kvb_cache_compress(c, NULL);
        t += C;
    }
    if (bad) printf("  decode/prefill: %s\n", kvb_last_error());
    long long want[EA_T], other[EA_T], got[256];
    const int nw = ea_ref_mode(&cp.rope, (struct ea_variant){true, true, true}, q, k, v, block, compress_after, B, n_sink, n_recent, want);
    const struct ea_variant vars[3] = {{false, true, true}, {true, false, true}, {true, true, false}};
    for (int i = 0; i < 3; i++) {
        const int no = ea_ref_mode(&cp.rope, vars[i], q, k, v, block, compress_after, B, n_sink, n_recent, other);
        if (no != nw || memcmp(other, want, sizeof(long long) * (size_t)nw)) told[i] = 1;
    }
    if (compress_after) { /* the prompt compressed chunk by chunk keeps another set: told[3] */
        const int no = ea_ref(&cp.rope, (struct ea_variant){true, true, true}, q, k, v, block, B, n_sink, n_recent, other);
        if (no != nw || memcmp(other, want, sizeof(long long) * (size_t)nw)) told[3] = 1;
    }
    int ng;
    kept(c, 0, got, &ng);
    bad |= ng != nw;
    for (int j = 0; !bad && j < ng; j++) bad = got[j] != want[j];
    if (bad) {
        printf("  expected-attention kept:");
        for (int j = 0; j < ng; j++) printf(" %lld", got[j]);
        printf("  reference:");
        for (int j = 0; j < nw; j++) printf(" %lld", want[j]);
        printf("\n");
    }
    kvb_cache_free(c);
    return bad;
}

static int ea_case(enum kvb_rope_type rt, float base, int B, int n_sink, int n_recent, const int *block, unsigned seed, int *told) {
    return ea_case_mode(rt, base, B, n_sink, n_recent, block, NULL, seed, told);
}

/* Expected Attention (expected-attention): the kept set equals the float64
 * reference of the paper's closed form (running query mean and covariance
 * per query head, the rotation averaged over the next 512 positions, the
 * softmax of the expected logits averaged over the group, times the value
 * norm) at decode and after prefill blocks, with interleaved and NeoX RoPE,
 * sinks and a recent window; the reference's variants without the
 * covariance term, without the value norm and without the future rotation
 * each keep another set in some case, so the check tells them apart. */
TEST(expected_attention_matches_float64_reference) {
    int ones[EA_T], blocks[EA_T], told[3] = {0};
    for (int i = 0; i < EA_T; i++) ones[i] = blocks[i] = 1;
    blocks[0] = 16; blocks[1] = blocks[2] = 5;
    CHECK(ea_case(KVB_ROPE_INTERLEAVED, 10000.0f, 12, 0, 0, ones, 1, told) == 0);
    CHECK(ea_case(KVB_ROPE_NEOX, 100.0f, 12, 2, 0, blocks, 2, told) == 0);
    CHECK(ea_case(KVB_ROPE_INTERLEAVED, 100.0f, 16, 4, 3, blocks, 3, told) == 0);
    CHECK(ea_case(KVB_ROPE_NEOX, 10000.0f, 10, 1, 2, ones, 4, told) == 0);
    if (!told[0] || !told[1] || !told[2]) FAILF("a variant keeps the same sets in every case (covariance %d, value norm %d, rotation %d)", told[0], told[1], told[2]);
}

/* expected-attention as a prompt compressor (compress_prompt 1, kvpress's
 * press): the prompt's blocks are read with nothing evicted, and at
 * kvb_cache_compress the whole prompt is scored at once (the statistics of
 * all its queries after the sinks, the rotation averaged from the position
 * after it) and cut to the budget; decode steps then evict at the budget;
 * a second turn's prompt is compressed at its own kvb_cache_compress. The
 * kept set equals the float64 reference's in each case; the reference
 * evicting after each block (the default mode) keeps another set in some
 * case, as do the variants without covariance, value norm and rotation. */
TEST(expected_attention_compresses_the_whole_prompt_at_once) {
    int blocks[EA_T], told[4] = {0};
    bool at[EA_T] = {false};
    for (int i = 0; i < EA_T; i++) blocks[i] = 1;
    blocks[0] = 14; blocks[1] = 13; blocks[2] = 11; at[2] = true; /* a prompt of 38 tokens in three chunks */
    blocks[7] = 6; at[7] = true;                                    /* four decode steps, then a second turn of 6 */
    CHECK(ea_case_mode(KVB_ROPE_NEOX, 100.0f, 12, 2, 0, blocks, at, 2, told) == 0);
    CHECK(ea_case_mode(KVB_ROPE_INTERLEAVED, 10000.0f, 10, 4, 2, blocks, at, 5, told) == 0);
    CHECK(ea_case_mode(KVB_ROPE_INTERLEAVED, 100.0f, 16, 1, 3, blocks, at, 3, told) == 0);
    CHECK(ea_case_mode(KVB_ROPE_NEOX, 10000.0f, 9, 0, 0, blocks, at, 7, told) == 0);
    if (!told[0] || !told[1] || !told[2] || !told[3])
        FAILF("a variant keeps the same sets in every case (covariance %d, value norm %d, rotation %d, chunk by chunk %d)", told[0], told[1],
              told[2], told[3]);
    /* the mode is expected-attention's: another policy refuses it by name; budget_frac is a prompt compressor's */
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = EA_D; cp.kv.block_size = 4;
    struct kvb_cache *c = NULL;
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_H2O);
    cp.kv.policy.compress_prompt = 1;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "compress_prompt") != NULL);
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_EXPECTED_ATTENTION);
    cp.kv.policy.budget_frac = 0.5f;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    cp.kv.policy.compress_prompt = 3;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    cp.kv.policy.compress_prompt = 1;
    CHECK(kvb_policy_params_compress(&cp.kv.policy) && !kvb_policy_compresses(KVB_POLICY_EXPECTED_ATTENTION));
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    /* a cache image keeps the mode (flags 8192): the restored cache reads it back */
    void *buf = NULL;
    size_t len = 0;
    struct kvb_cache *r = NULL;
    struct kvb_cache_params rp;
    CHECK_OK(kvb_cache_save(c, &buf, &len));
    CHECK_OK(kvb_cache_load(NULL, buf, len, (size_t)1 << 20, &r));
    kvb_cache_get_params(r, &rp);
    CHECK_EQ_INT(rp.kv.policy.compress_prompt, 1);
    kvb_buffer_free(buf);
    kvb_cache_free(r);
    kvb_cache_free(c);
}

/* One head's data as ea_case makes it (seeded). */
static void ea_data(unsigned seed, float q[][EA_G][EA_D], float k[][EA_D], float v[][EA_D]) {
    unsigned x = seed;
#define EA_RND() (x = x * 1103515245u + 12345u, (float)((x >> 8) & 0xffff) / 65536.0f - 0.5f)
    for (int t = 0; t < EA_T; t++) {
        const float vs = 0.5f + 2.0f * (EA_RND() + 0.5f), qa = 6.0f * EA_RND();
        for (int i = 0; i < EA_D; i++) {
            const bool slow = i == 3 || i == 6 || i == 7;
            k[t][i] = (slow ? 3.0f : 1.5f) * EA_RND() + (i == 1 ? 0.7f : 0.0f);
            v[t][i] = vs * EA_RND();
            for (int g = 0; g < EA_G; g++)
                q[t][g][i] = (slow ? qa : 0.0f) * (g ? -1.0f : 1.0f) + EA_RND() + (i == 7 ? (g ? 4.0f : 0.8f) : 0.0f) + (t < 4 && i == 6 ? 12.0f : 0.0f);
        }
    }
#undef EA_RND
}

static int cmp_desc_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* One AdaKV case: two KV heads, a prompt of 20 + 16 tokens compressed at
 * once; returns 0 when each head keeps the reference's set (and then holds
 * its budget through a decode step); *uneven set when the heads' budgets
 * differ. */
static int ea_ada_case(enum kvb_rope_type rt, float base, int B, int n_sink, int n_recent, unsigned seed, float v1_scale, int *uneven,
                       int *floored) {
    enum { H = 2, P = 36 };
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = H; cp.head_dim = EA_D; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 4;
    cp.rope = (struct kvb_rope){rt, EA_D, base, 1.0f, NULL};
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_EXPECTED_ATTENTION);
    cp.kv.policy.budget = B; cp.kv.policy.n_sink = n_sink; cp.kv.policy.n_recent = n_recent;
    cp.kv.policy.compress_prompt = 2;
    struct kvb_cache *c = NULL;
    if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) { printf("  init: %s\n", kvb_last_error()); return 1; }
    static float q[H][EA_T][EA_G][EA_D], k[H][EA_T][EA_D], v[H][EA_T][EA_D];
    static float Q[EA_T][H * EA_G][EA_D], K[EA_T][H][EA_D], V[EA_T][H][EA_D], out[EA_T * H * EA_G * EA_D];
    for (int h = 0; h < H; h++) ea_data(seed + 7919u * (unsigned)h, q[h], k[h], v[h]);
    for (int t = 0; t < EA_T; t++) /* head 1's values scaled: its scores too, so its floor may bind */
        for (int i = 0; i < EA_D; i++) v[1][t][i] *= v1_scale;
    for (int t = 0; t < EA_T; t++)
        for (int h = 0; h < H; h++) {
            memcpy(K[t][h], k[h][t], sizeof K[t][h]);
            memcpy(V[t][h], v[h][t], sizeof V[t][h]);
            for (int g = 0; g < EA_G; g++) memcpy(Q[t][h * EA_G + g], q[h][t][g], sizeof Q[t][0]);
        }
    int bad = kvb_cache_prefill(c, 0, 20, &Q[0][0][0], H * EA_G, &K[0][0][0], &V[0][0][0], out, NULL) != KVB_OK;
    bad |= kvb_cache_prefill(c, 0, P - 20, &Q[20][0][0], H * EA_G, &K[20][0][0], &V[20][0][0], out, NULL) != KVB_OK;
    kvb_cache_compress(c, NULL);
    /* the reference: scores per head, each keeps its floor, the rest of H x (B - sinks - window) by score across heads */
    const int W = n_recent, share = B - W - n_sink, floor_n = (int)((double)0.2f * share);
    long long all[EA_T];
    for (int j = 0; j < P; j++) all[j] = j;
    double sc[H][EA_T], sorted[H][EA_T];
    int cnt[H], got[H];
    long long pool = (long long)H * (share - floor_n);
    for (int h = 0; h < H; h++) {
        ea_ref_scores(&cp.rope, (struct ea_variant){true, true, true}, q[h], k[h], v[h], P, all, P, n_sink, sc[h]);
        cnt[h] = P - W - n_sink;
        memcpy(sorted[h], sc[h] + n_sink, sizeof(double) * (size_t)cnt[h]);
        qsort(sorted[h], (size_t)cnt[h], sizeof(double), cmp_desc_d);
        got[h] = floor_n < cnt[h] ? floor_n : cnt[h];
        pool += floor_n - got[h];
    }
    for (; pool > 0; pool--) {
        int best = -1;
        for (int h = 0; h < H; h++)
            if (got[h] < cnt[h] && (best < 0 || sorted[h][got[h]] > sorted[best][got[best]])) best = h;
        if (best < 0) break;
        got[best]++;
    }
    if (got[0] != got[1]) *uneven = 1;
    if (got[0] == floor_n || got[1] == floor_n) *floored = 1;
    for (int h = 0; h < H && !bad; h++) {
        long long want[EA_T], gotp[256];
        int nw = 0, ng;
        for (int j = 0; j < P; j++) {
            bool keep = j < n_sink || j >= P - W;
            if (!keep) { /* among the head's got[h] highest candidates */
                int above = 0;
                for (int i = n_sink; i < P - W; i++) above += sc[h][i] > sc[h][j];
                keep = above < got[h];
            }
            if (keep) want[nw++] = j;
        }
        kept(c, h, gotp, &ng);
        bad = ng != nw;
        for (int j = 0; !bad && j < ng; j++) bad = gotp[j] != want[j];
        if (bad) {
            printf("  adakv head %d kept:", h);
            for (int j = 0; j < ng; j++) printf(" %lld", gotp[j]);
            printf("  reference (%d + %d + %d):", n_sink, got[h], W);
            for (int j = 0; j < nw; j++) printf(" %lld", want[j]);
            printf("\n");
        }
    }
    /* a decode step: each head evicts back to its own budget */
    bad |= kvb_cache_decode(c, 0, &Q[P][0][0], H * EA_G, &K[P][0][0], &V[P][0][0], out, NULL) != KVB_OK;
    for (int h = 0; h < H && !bad; h++)
        if (kvb_cache_n_slots(c, 0, h) != n_sink + W + got[h]) {
            printf("  adakv head %d holds %d after a decode step, budget %d\n", h, kvb_cache_n_slots(c, 0, h), n_sink + W + got[h]);
            bad = 1;
        }
    kvb_cache_free(c);
    return bad;
}

/* expected-attention with AdaKV's allocation (compress_prompt 2, kvpress's
 * AdaKVPress around ExpectedAttentionPress): at the prompt's compression a
 * layer's KV heads share H x B by score, each keeping its sinks, window and
 * the top ada_floor (0.2) of its share; each head's kept set equals the
 * float64 reference's, the budgets are uneven in some case (so uniform
 * budgets would fail it), a head of small values is held at its floor in
 * one (so no floor would fail it), and a decode step keeps each head at its
 * own budget. */
TEST(expected_attention_adakv_shares_the_layer_budget) {
    int uneven = 0, floored = 0;
    CHECK(ea_ada_case(KVB_ROPE_NEOX, 100.0f, 12, 2, 2, 11, 1.0f, &uneven, &floored) == 0);
    CHECK(ea_ada_case(KVB_ROPE_INTERLEAVED, 10000.0f, 16, 4, 0, 12, 1.0f, &uneven, &floored) == 0);
    CHECK(ea_ada_case(KVB_ROPE_NEOX, 10000.0f, 10, 1, 3, 13, 1.0f, &uneven, &floored) == 0);
    CHECK(ea_ada_case(KVB_ROPE_INTERLEAVED, 100.0f, 16, 2, 2, 14, 0.05f, &uneven, &floored) == 0);
    if (!uneven) FAILF("the heads' budgets are even in every case: the allocation is not told from uniform budgets");
    if (!floored) FAILF("no head is held at its floor in any case: the safeguard is not checked");
}

/* ---- kvzip: a float64 reference of the reconstruction score ---- */

enum { KZ_D = 8, KZ_G = 2, KZ_H = 2, KZ_L = 2, KZ_N = 40, KZ_CH = 16, KZ_P = 3, KZ_NC = 3 };
/* the reference's variants: 0 the paper's; 1 the mean over the group and
 * the pass's tokens instead of the max; 2 the pass's own keys left out of
 * the softmax; 3 the last chunk's pass dropped */
static void kz_ref(const struct kvb_rope *r, int variant, int ns, float kc[][KZ_D], float qp[][KZ_P + KZ_CH][KZ_G][KZ_D],
                   float kp[][KZ_P + KZ_CH][KZ_D], double *score) {
    for (int j = 0; j < KZ_N; j++) score[j] = 0;
    for (int ch = 0; ch < KZ_NC - (variant == 3); ch++) {
        const int lo = ch * KZ_CH, hi = lo + KZ_CH < KZ_N ? lo + KZ_CH : KZ_N, T = KZ_P + (hi - lo), nsk = ns < lo ? ns : lo;
        double sum[KZ_N] = {0};
        for (int i = 0; i < T; i++)
            for (int g = 0; g < KZ_G; g++) {
                double qr[KZ_D], kr[KZ_D], lg[KZ_N + KZ_P + KZ_CH], mx = -1e300, z = 0;
                int key[KZ_N + KZ_P + KZ_CH], m = 0; /* key >= 0: a context position; < 0: -(own index) - 1 */
                ref_rope(r, qp[ch][i][g], KZ_D, KZ_N + i, qr);
                for (int j = 0; j < nsk; j++) key[m++] = j;
                for (int j = lo; j < hi; j++) key[m++] = j;
                for (int u = 0; u <= i && variant != 2; u++) key[m++] = -u - 1;
                for (int a = 0; a < m; a++) {
                    if (key[a] >= 0) ref_rope(r, kc[key[a]], KZ_D, key[a], kr);
                    else ref_rope(r, kp[ch][-key[a] - 1], KZ_D, KZ_N - key[a] - 1, kr);
                    double x = 0;
                    for (int t = 0; t < KZ_D; t++) x += qr[t] * kr[t];
                    lg[a] = x / sqrt((double)KZ_D);
                    if (lg[a] > mx) mx = lg[a];
                }
                for (int a = 0; a < m; a++) z += exp(lg[a] - mx);
                for (int a = nsk; a < nsk + (hi - lo); a++) {
                    const double w = exp(lg[a] - mx) / z;
                    if (variant == 1) sum[key[a]] += w / (T * KZ_G);
                    else if (w > score[key[a]]) score[key[a]] = w;
                }
            }
        for (int j = lo; j < hi && variant == 1; j++) score[j] = sum[j];
    }
}

/* KVzip (kvzip): a context of 40 tokens in 2 layers x 2 KV heads (2 query
 * heads each) is scored by three reconstruction passes (chunks [0,16),
 * [16,32), [32,40), each after 3 repeat-prompt tokens, read in two
 * prefills); every token's score equals the float64 reference (the max
 * softmax weight over the group and the pass's tokens, the softmax over the
 * sinks, the chunk and the pass's own keys, causal) and not its variants
 * (the mean, the own keys left out, the last chunk dropped); each pass's rows
 * leave (slots and positions as before it); compress keeps the highest
 * scores of all four streams (non-uniform budgets summing to 4 x budget),
 * never a pass's row. */
TEST(kvzip_reconstruction_matches_float64_reference) {
    const int ns = 2, B = 20;
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = KZ_L; cp.n_kv_head = KZ_H; cp.head_dim = KZ_D; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 4;
    cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, KZ_D, 100.0f, 1.0f, NULL};
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_KVZIP);
    cp.kv.policy.budget = B; cp.kv.policy.n_sink = ns;
    struct kvb_cache *c = NULL;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    if (!c) return;
    enum { NQ = KZ_H * KZ_G };
    static float q[KZ_L][KZ_N][NQ][KZ_D], k[KZ_L][KZ_N][KZ_H][KZ_D], v[KZ_L][KZ_N][KZ_H][KZ_D];
    static float qp[KZ_L][KZ_NC][KZ_P + KZ_CH][NQ][KZ_D], kp[KZ_L][KZ_NC][KZ_P + KZ_CH][KZ_H][KZ_D];
    static float out[(KZ_P + KZ_CH) * NQ * KZ_D];
    unsigned x = 7;
#define KZ_RND() (x = x * 1103515245u + 12345u, 2.0f * ((float)((x >> 8) & 0xffff) / 65536.0f - 0.5f))
    for (int l = 0; l < KZ_L; l++) {
        for (int t = 0; t < KZ_N; t++)
            for (int i = 0; i < KZ_D; i++) {
                for (int h = 0; h < NQ; h++) q[l][t][h][i] = KZ_RND();
                for (int h = 0; h < KZ_H; h++) { k[l][t][h][i] = 2.0f * KZ_RND(); v[l][t][h][i] = KZ_RND(); }
            }
        for (int ch = 0; ch < KZ_NC; ch++)
            for (int t = 0; t < KZ_P + KZ_CH; t++)
                for (int i = 0; i < KZ_D; i++) {
                    for (int h = 0; h < NQ; h++) qp[l][ch][t][h][i] = 2.0f * KZ_RND();
                    for (int h = 0; h < KZ_H; h++) kp[l][ch][t][h][i] = 2.0f * KZ_RND();
                }
    }
#undef KZ_RND
    for (int l = 0; l < KZ_L; l++) /* the context in blocks of 16, 16, 8 */
        for (int t = 0; t < KZ_N; t += 16)
            CHECK_OK(kvb_cache_prefill(c, l, t + 16 <= KZ_N ? 16 : KZ_N - t, &q[l][t][0][0], NQ, &k[l][t][0][0], &v[l][t][0][0], out, NULL));
    for (int ch = 0; ch < KZ_NC; ch++) {
        const int lo = ch * KZ_CH, hi = lo + KZ_CH < KZ_N ? lo + KZ_CH : KZ_N, T = KZ_P + (hi - lo), T1 = T / 2;
        CHECK_OK(kvb_cache_recon_begin(c, lo, hi));
        for (int l = 0; l < KZ_L; l++) { /* the pass's own keys span two prefills: the second's queries see the first's */
            CHECK_OK(kvb_cache_prefill(c, l, T1, &qp[l][ch][0][0][0], NQ, &kp[l][ch][0][0][0], &kp[l][ch][0][0][0], out, NULL));
            CHECK_OK(kvb_cache_prefill(c, l, T - T1, &qp[l][ch][T1][0][0], NQ, &kp[l][ch][T1][0][0], &kp[l][ch][T1][0][0], out, NULL));
        }
        CHECK_EQ_INT((int)kvb_cache_n_slots(c, 1, 1), KZ_N + T);
        kvb_cache_recon_end(c);
        for (int l = 0; l < KZ_L; l++) {
            CHECK_EQ_INT((int)kvb_cache_n_past(c, l), KZ_N);
            for (int h = 0; h < KZ_H; h++) CHECK_EQ_INT((int)kvb_cache_n_slots(c, l, h), KZ_N);
        }
    }
    CHECK_STATUS(kvb_cache_recon_begin(c, 0, KZ_N + 1), KVB_ERR_INVALID); /* beyond what was read */
    int told[4] = {0}, bad = 0;
    static double ref[4][KZ_L][KZ_H][KZ_N];
    float got[KZ_L][KZ_H][KZ_N];
    for (int l = 0; l < KZ_L; l++)
        for (int h = 0; h < KZ_H; h++) {
            static float qh[KZ_NC][KZ_P + KZ_CH][KZ_G][KZ_D], kh[KZ_NC][KZ_P + KZ_CH][KZ_D], kc[KZ_N][KZ_D];
            for (int t = 0; t < KZ_N; t++) memcpy(kc[t], k[l][t][h], sizeof kc[t]);
            for (int ch = 0; ch < KZ_NC; ch++)
                for (int t = 0; t < KZ_P + KZ_CH; t++) {
                    memcpy(kh[ch][t], kp[l][ch][t][h], sizeof kh[ch][t]);
                    for (int g = 0; g < KZ_G; g++) memcpy(qh[ch][t][g], qp[l][ch][t][h * KZ_G + g], sizeof qh[ch][t][g]);
                }
            for (int var = 0; var < 4; var++) kz_ref(&cp.rope, var, ns, kc, qh, kh, ref[var][l][h]);
            for (int j = 0; j < KZ_N; j++) {
                struct kvb_slot_info si;
                CHECK_OK(kvb_cache_slot_info(c, l, h, j, &si));
                got[l][h][j] = si.score;
                if (fabs(si.score - ref[0][l][h][j]) > 1e-5 * (1 + ref[0][l][h][j])) bad++;
                for (int var = 1; var < 4; var++) told[var] |= fabs(si.score - ref[var][l][h][j]) > 1e-3 * (1 + ref[var][l][h][j]);
            }
        }
    if (bad) FAILF("%d scores differ from the float64 reference (layer 0 head 0 slot 20: %g, want %g)", bad, (double)got[0][0][20], ref[0][0][0][20]);
    if (!told[1] || !told[2] || !told[3]) FAILF("a variant matches the scores (mean %d, own keys left out %d, last chunk dropped %d)", told[1], told[2], told[3]);
    /* compress: the highest 4 x (B - ns) candidates of all streams stay */
    double all[KZ_L * KZ_H * KZ_N];
    int na = 0;
    for (int l = 0; l < KZ_L; l++)
        for (int h = 0; h < KZ_H; h++)
            for (int j = ns; j < KZ_N; j++) all[na++] = got[l][h][j];
    const int keep = KZ_L * KZ_H * (B - ns);
    double thr = 0; /* the keep-th highest */
    for (int a = 0; a < na; a++) {
        int above = 0;
        for (int b = 0; b < na; b++) above += all[b] > all[a];
        if (above == keep - 1) thr = all[a];
    }
    kvb_cache_compress(c, NULL);
    int total = 0, uneven = 0;
    for (int l = 0; l < KZ_L; l++)
        for (int h = 0; h < KZ_H; h++) {
            const int n = kvb_cache_n_slots(c, l, h);
            total += n - ns;
            uneven |= n != B;
            int j = 0;
            for (int t = 0; t < KZ_N; t++) {
                const bool want = t < ns || got[l][h][t] >= thr;
                struct kvb_slot_info si;
                const bool have = j < n && kvb_cache_slot_info(c, l, h, j, &si) == KVB_OK && si.pos_original == t;
                if (have) j++;
                if (want != have) { FAILF("layer %d head %d position %d: kept %d, want %d (score %g, threshold %g)", l, h, t, have, want, (double)got[l][h][t], thr); break; }
            }
        }
    CHECK_EQ_INT(total, keep);
    CHECK(uneven); /* the budgets follow the scores, not B per stream */
    kvb_cache_free(c);
}

/* expected-attention's evidence is the queries: the low-level append (no
 * queries) is refused by name and leaves the cache empty, where it would
 * otherwise rank keys by their value norms alone. */
TEST(expected_attention_refuses_the_low_level_path) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = EA_D; cp.kv.block_size = 4;
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_EXPECTED_ATTENTION);
    cp.kv.policy.budget = 8;
    struct kvb_cache *c = NULL;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    CHECK_STATUS(kvb_cache_append(c, 0, NULL, NULL), KVB_ERR_UNSUPPORTED);
    CHECK(strstr(kvb_last_error(), "expected-attention") != NULL);
    CHECK_EQ_INT((int)kvb_cache_n_past(c, 0), 0);
    kvb_cache_free(c);
}

int main(void) {
    RUN(compress_keeps_set_budgets);
    RUN(pinned_span_kept_under_every_policy);
    RUN(pinned_span_subsumes_streaming_sinks);
    RUN(pinned_span_counted_by_sizing_rule);
    RUN(h2o_trace_keeps_heavy_hitters);
    RUN(streaming_trace_keeps_sinks_and_window);
    RUN(window_keeps_most_recent);
    RUN(tova_evicts_lowest_current_attention);
    RUN(knorm_evicts_largest_key_norm);
    RUN(keydiff_matches_float64_reference);
    RUN(expected_attention_matches_float64_reference);
    RUN(expected_attention_refuses_the_low_level_path);
    RUN(expected_attention_compresses_the_whole_prompt_at_once);
    RUN(expected_attention_adakv_shares_the_layer_budget);
    RUN(kvzip_reconstruction_matches_float64_reference);
    RUN(scissorhands_evicts_persistently_unimportant);
    RUN(snapkv_keeps_the_needle);
    RUN(pyramidkv_layer_budgets);
    RUN(pyramidkv_short_and_long_prompts);
    RUN(adakv_short_and_long_prompts);
    RUN(snapkv_vote_matches_reference_chunked_or_whole);
    RUN(snapkv_prefill_budget_accumulates_votes);
    RUN(tova_layer_and_head_scopes_by_hand);
    RUN(adakv_allocates_across_heads);
    RUN(block_h2o_evicts_whole_pages);
    return test_summary();
}

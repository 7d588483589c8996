/*
 * test_shared_kv.c — KV-shared layers (kvb_cache_params.kv_source; Gemma 4's
 * last layers read an earlier layer's K/V). A reader attends over its
 * source's tokens as the source's own query saw them: given the source's
 * query it gives the source's output bit for bit, for every policy, in
 * prefill chunks longer than a window and in decode, because the source's
 * eviction waits until its last reader has attended. Readers hold no pages;
 * an image taken between steps restores them; a fork waits for the readers;
 * bad sources are refused by name. Per-layer KV heads (kv_heads; Gemma 4
 * 26B/31B: fewer on global layers): a layer of 2 heads in a cache of 4 gives
 * the outputs of a cache of 2, bit for bit, under every policy.
 */
#include "testing.h"
#include "kvbound.h"

#include <string.h>

enum { L = 4, HK = 2, G = 2, NH = HK * G, D = 16 };
/* layer 0 a window layer, 1 global; 2 reads 0 (a window reader), 3 reads 1 */
static const int32_t k_src[L] = {-1, -1, 0, 1};

static unsigned long long g_rs = 88172645463325252ull;
static float rnd(void) {
    g_rs ^= g_rs << 13; g_rs ^= g_rs >> 7; g_rs ^= g_rs << 17;
    return (float)((double)(g_rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static struct kvb_kv_layer g_win[2];

static struct kvb_cache_params params(enum kvb_policy_id pid, int W) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = L;
    cp.n_kv_head = HK;
    cp.head_dim = D;
    cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, D, 1000000.0f, 1.0f, NULL};
    cp.rope_swa = (struct kvb_rope){KVB_ROPE_NEOX, D / 2, 10000.0f, 1.0f, NULL}; /* the window heads' own (fewer) dims */
    cp.kv.kv_dtype = KVB_DTYPE_F32;
    cp.kv.block_size = 4;
    cp.kv.policy = kvb_policy_default_params(pid);
    if (pid != KVB_POLICY_FULL) cp.kv.policy.budget = 12;
    cp.kv.max_distance = 64; /* lminfinite's cap */
    g_win[0] = (struct kvb_kv_layer){0, kvb_policy_default_params(KVB_POLICY_WINDOW)};
    g_win[0].policy.n_sink = 0;
    g_win[0].policy.budget = W;
    g_win[1] = g_win[0];
    g_win[1].layer = 2;
    cp.kv.layers = g_win;
    cp.kv.n_layers = 2;
    cp.kv_source = k_src;
    cp.pool_bytes = 4 << 20;
    return cp;
}

/* One step of C tokens (C == 1 and !prompt: decode) through every layer; each reader gets its
 * source's query, so its output must be the source's. Returns 0 or 1 (printed). */
static int step(struct kvb_cache *c, int C, bool prompt, float *outs /* [L][C][NH][D] */) {
    static float q[64 * NH * D], k[64 * HK * D], v[64 * HK * D];
    static float lq[L][64 * NH * D];
    for (int l = 0; l < L; l++) {
        const int src = k_src[l] >= 0 ? k_src[l] : l;
        if (k_src[l] < 0) {
            for (int i = 0; i < C * NH * D; i++) lq[l][i] = rnd();
            for (int i = 0; i < C * HK * D; i++) { k[i] = rnd(); v[i] = rnd(); }
        }
        memcpy(q, lq[src], sizeof(float) * (size_t)C * NH * D);
        float *o = outs + (size_t)l * C * NH * D;
        const float *kk = k_src[l] >= 0 ? NULL : k, *vv = k_src[l] >= 0 ? NULL : v;
        kvb_status st = C == 1 && !prompt ? kvb_cache_decode(c, l, q, NH, kk, vv, o, NULL) : kvb_cache_prefill(c, l, C, q, NH, kk, vv, o, NULL);
        if (st != KVB_OK) {
            printf("  layer %d: %s\n", l, kvb_last_error());
            return 1;
        }
    }
    for (int l = 0; l < L; l++)
        if (k_src[l] >= 0 && memcmp(outs + (size_t)l * C * NH * D, outs + (size_t)k_src[l] * C * NH * D, sizeof(float) * (size_t)C * NH * D)) {
            printf("  reader %d's output differs from its source %d's (C %d)\n", l, (int)k_src[l], C);
            return 1;
        }
    return 0;
}

TEST(readers_see_what_their_source_saw_every_policy) {
    static float outs[L * 64 * NH * D];
    for (int pid = 0; pid < KVB_POLICY_COUNT; pid++) {
        if (pid == KVB_POLICY_WINDOW) continue; /* the model's windows are window layers already */
        struct kvb_cache_params cp = params((enum kvb_policy_id)pid, 5);
        struct kvb_cache *c = NULL;
        CHECK_OK(kvb_cache_init(NULL, &cp, &c));
        /* a prompt in chunks longer than the window, then decode */
        int bad = step(c, 11, true, outs) || step(c, 9, true, outs);
        kvb_cache_compress(c, NULL);
        for (int t = 0; t < 30 && !bad; t++) bad = step(c, 1, false, outs);
        if (bad) FAILF("policy %s", kvb_policy_name((enum kvb_policy_id)pid));
        for (int h = 0; h < HK; h++) {
            CHECK_EQ_INT(kvb_cache_n_slots(c, 2, h), 0); /* readers hold nothing */
            CHECK_EQ_INT(kvb_cache_n_slots(c, 3, h), 0);
            CHECK(kvb_cache_n_slots(c, 0, h) <= 5);       /* the window, evicted after its reader */
        }
        CHECK_EQ_INT((int)kvb_cache_n_past(c, 3), 50);
        kvb_cache_free(c);
        if (t_case_failed) return;
    }
}

TEST(images_and_forks_of_a_cache_with_readers) {
    static float a[L * 64 * NH * D], b[L * 64 * NH * D];
    struct kvb_cache_params cp = params(KVB_POLICY_H2O, 6);
    struct kvb_cache *c = NULL, *r = NULL;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    CHECK(step(c, 13, true, a) == 0);
    for (int t = 0; t < 5; t++) CHECK(step(c, 1, false, a) == 0);
    void *buf = NULL;
    size_t len = 0;
    CHECK_OK(kvb_cache_save(c, &buf, &len));
    CHECK_OK(kvb_cache_load(NULL, buf, len, 4 << 20, &r));
    struct kvb_cache_params rp;
    kvb_cache_get_params(r, &rp);
    CHECK(rp.kv_source && rp.kv_source[2] == 0 && rp.kv_source[3] == 1 && rp.rope_swa.n_dims == D / 2);
    /* both continue the same: same random inputs, same outputs */
    const unsigned long long keep = g_rs;
    for (int t = 0; t < 8; t++) CHECK(step(c, 1, false, a) == 0);
    g_rs = keep;
    for (int t = 0; t < 8; t++) CHECK(step(r, 1, false, b) == 0);
    CHECK(memcmp(a, b, sizeof(float) * L * NH * D) == 0);
    kvb_buffer_free(buf);
    kvb_cache_free(r);
    kvb_cache_free(c);
    /* a fork waits for the readers of the step under way */
    struct kvb_pool_params pp = kvb_pool_default_params();
    pp.page_bytes = kvb_cache_page_bytes(&cp);
    pp.capacity_bytes = (size_t)4 << 20;
    struct kvb_pool *pool = NULL;
    CHECK_OK(kvb_pool_init(&pp, &pool));
    CHECK_OK(kvb_cache_init(pool, &cp, &c));
    CHECK(step(c, 7, true, a) == 0);
    float q[NH * D] = {0}, k[HK * D] = {0}, v[HK * D] = {0}, o[NH * D];
    CHECK_OK(kvb_cache_decode(c, 0, q, NH, k, v, o, NULL)); /* the source's step; its reader has not run */
    struct kvb_cache *f = NULL;
    CHECK_STATUS(kvb_cache_fork(c, &f), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "readers") != NULL);
    CHECK_OK(kvb_cache_decode(c, 1, q, NH, k, v, o, NULL));
    CHECK_OK(kvb_cache_decode(c, 2, q, NH, NULL, NULL, o, NULL));
    CHECK_OK(kvb_cache_decode(c, 3, q, NH, NULL, NULL, o, NULL));
    CHECK_OK(kvb_cache_fork(c, &f));
    kvb_cache_free(f);
    kvb_cache_free(c);
    kvb_pool_free(pool);
}

TEST(readers_hold_no_pages_and_bad_sources_are_refused) {
    static float a[L * 64 * NH * D];
    struct kvb_cache_params cp = params(KVB_POLICY_FULL, 5);
    struct kvb_cache *c = NULL;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    CHECK(step(c, 20, true, a) == 0);
    struct kvb_cache_stats st;
    kvb_cache_get_stats(c, &st);
    /* layer 1 holds 20 tokens (5 pages a head), layer 0 its window's last 4 (1 or 2 pages a head); the readers none */
    CHECK(st.pages_in_use >= HK * (5 + 1) && st.pages_in_use <= HK * (5 + 2));
    CHECK_EQ_INT((int)st.slots, HK * (20 + 4));
    float q[NH * D] = {0}, k[HK * D] = {0}, v[HK * D] = {0}, o[NH * D];
    CHECK_STATUS(kvb_cache_decode(c, 2, q, NH, NULL, NULL, o, NULL), KVB_ERR_INVALID); /* its source has not taken the token */
    CHECK(strstr(kvb_last_error(), "kv_source") != NULL);
    CHECK_STATUS(kvb_cache_append(c, 3, k, v), KVB_ERR_INVALID);
    CHECK_STATUS(kvb_cache_decode(c, 0, q, NH, NULL, NULL, o, NULL), KVB_ERR_INVALID); /* a source needs its k and v */
    kvb_cache_free(c);
    static const int32_t later[L] = {-1, 3, -1, -1}, chain[L] = {-1, -1, 0, 2}, mism[L] = {-1, -1, 1, -1};
    const int32_t *bad[3] = {later, chain, mism};
    const char *why[3] = {"earlier layer", "itself a reader", "window"};
    for (int i = 0; i < 3; i++) {
        cp = params(KVB_POLICY_FULL, 5);
        cp.kv_source = bad[i];
        CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
        CHECK(strstr(kvb_last_error(), why[i]) != NULL);
    }
    cp = params(KVB_POLICY_STREAMING, 5);
    cp.kv.recall.pages = 1;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_UNSUPPORTED);
}

/* Layer 1 of a cache with kv_heads {4, 2} against a one-layer cache of 2 heads fed the same inputs. */
TEST(per_layer_kv_heads_equal_a_cache_of_that_many) {
    enum { HA = 4, HB = 2, NQ = 8, DD = 16, C0 = 9 };
    static const int32_t heads[2] = {HA, HB};
    static float q[C0 * NQ * DD], k[C0 * HA * DD], v[C0 * HA * DD], oa[C0 * NQ * DD], ob[C0 * NQ * DD];
    for (int pid = 0; pid < KVB_POLICY_COUNT; pid++) {
        if (pid == KVB_POLICY_PYRAMIDKV) continue; /* its budgets depend on the layer's place: the caches differ in layers */
        struct kvb_cache_params a = kvb_cache_default_params();
        a.n_layer = 2; a.n_kv_head = HA; a.head_dim = DD;
        a.rope = (struct kvb_rope){KVB_ROPE_NEOX, DD, 10000.0f, 1.0f, NULL};
        a.kv.kv_dtype = KVB_DTYPE_F32; a.kv.block_size = 4; a.kv.max_distance = 64;
        a.kv.policy = kvb_policy_default_params((enum kvb_policy_id)pid);
        if (pid != KVB_POLICY_FULL) a.kv.policy.budget = 14;
        a.kv_heads = heads;
        a.pool_bytes = 4 << 20;
        struct kvb_cache_params b = a;
        b.n_layer = 1; b.n_kv_head = HB; b.kv_heads = NULL;
        struct kvb_cache *ca = NULL, *cb = NULL;
        CHECK_OK(kvb_cache_init(NULL, &a, &ca));
        CHECK_OK(kvb_cache_init(NULL, &b, &cb));
        for (int step = 0; step < 20 && !t_case_failed; step++) {
            const int C = step == 0 ? C0 : 1; /* a prompt, then decode */
            for (int i = 0; i < C * NQ * DD; i++) q[i] = rnd();
            for (int i = 0; i < C * HA * DD; i++) { k[i] = rnd(); v[i] = rnd(); }
            if (C > 1) {
                CHECK_OK(kvb_cache_prefill(ca, 0, C, q, NQ, k, v, oa, NULL)); /* layer 0: 4 heads */
                CHECK_OK(kvb_cache_prefill(ca, 1, C, q, NQ, k, v, oa, NULL)); /* layer 1: k, v read as [C][2][DD] */
                CHECK_OK(kvb_cache_prefill(cb, 0, C, q, NQ, k, v, ob, NULL));
            } else {
                CHECK_OK(kvb_cache_decode(ca, 0, q, NQ, k, v, oa, NULL));
                CHECK_OK(kvb_cache_decode(ca, 1, q, NQ, k, v, oa, NULL));
                CHECK_OK(kvb_cache_decode(cb, 0, q, NQ, k, v, ob, NULL));
            }
            if (step == 0) { kvb_cache_compress(ca, NULL); kvb_cache_compress(cb, NULL); }
            if (memcmp(oa, ob, sizeof(float) * (size_t)C * NQ * DD)) FAILF("policy %s, step %d: the 2-head layer differs from a 2-head cache",
                                                                           kvb_policy_name((enum kvb_policy_id)pid), step);
        }
        for (int h = HB; h < HA; h++) CHECK_EQ_INT(kvb_cache_n_slots(ca, 1, h), 0); /* its other streams hold nothing */
        /* an image keeps the heads */
        void *buf = NULL;
        size_t len = 0;
        struct kvb_cache *r = NULL;
        CHECK_OK(kvb_cache_save(ca, &buf, &len));
        CHECK_OK(kvb_cache_load(NULL, buf, len, 4 << 20, &r));
        struct kvb_cache_params rp;
        kvb_cache_get_params(r, &rp);
        CHECK(rp.kv_heads && rp.kv_heads[0] == HA && rp.kv_heads[1] == HB);
        kvb_buffer_free(buf);
        kvb_cache_free(r);
        kvb_cache_free(ca);
        kvb_cache_free(cb);
        if (t_case_failed) return;
    }
    /* refusals */
    struct kvb_cache_params a = params(KVB_POLICY_FULL, 5);
    static const int32_t zero[L] = {2, 0, 2, 2}, mism[L] = {2, 1, 1, 2};
    struct kvb_cache *c = NULL;
    a.kv_heads = zero;
    CHECK_STATUS(kvb_cache_init(NULL, &a, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "kv_heads[1]") != NULL);
    a.kv_heads = mism; /* layer 2 reads layer 0 with another head count */
    CHECK_STATUS(kvb_cache_init(NULL, &a, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "source's heads") != NULL);
}

int main(void) {
    RUN(readers_see_what_their_source_saw_every_policy);
    RUN(images_and_forks_of_a_cache_with_readers);
    RUN(readers_hold_no_pages_and_bad_sources_are_refused);
    RUN(per_layer_kv_heads_equal_a_cache_of_that_many);
    return test_summary();
}

/*
 * test_windows.c — a model's sliding-window layers (kv.layers windows, as
 * Gemma 2/3 have them): against an independent double-precision reference,
 * a window layer's query at p sees exactly the keys at p - W + 1 .. p, per
 * row inside a prefill chunk and at every decode step, rotated by the
 * layer's own RoPE (rope_swa) and with the attention softcap when one is
 * set; the global layers keep following kv.policy. After every step a window
 * stream holds the W - 1 positions the next query can see and no more (its
 * pages go back to the pool), a cache image restores to the same bits, and
 * a pool of exactly the sizing rule's bytes never runs out. Overrides the
 * cache does not apply are refused by name.
 */
#include "cache_helpers.h"

enum { L = 3, HK = 2, G = 2, D = 16, MAXT = 420 };

static float K[L][MAXT][HK][D], V[L][MAXT][HK][D];

/* Reference: query q (pre-RoPE) at position pq over the keys of (l, h) at
 * positions lo .. pq, each rotated at its own position by r; scores scaled
 * 1/sqrt(D), then cap * tanh(s / cap) when cap > 0, softmax, values. */
static void ref_row(const struct kvb_rope *r, const float *q, long long pq, int l, int h, long long lo, double cap, double *out) {
    double qr[D], kr[D], s[MAXT];
    ref_rope(r, q, D, pq, qr);
    double mx = -1e300;
    for (long long p = lo; p <= pq; p++) {
        ref_rope(r, K[l][p][h], D, p, kr);
        double a = 0;
        for (int i = 0; i < D; i++) a += qr[i] * kr[i];
        a /= sqrt((double)D);
        if (cap > 0) a = cap * tanh(a / cap);
        s[p - lo] = a;
        if (a > mx) mx = a;
    }
    double sum = 0;
    for (long long p = lo; p <= pq; p++) sum += (s[p - lo] = exp(s[p - lo] - mx));
    for (int i = 0; i < D; i++) out[i] = 0;
    for (long long p = lo; p <= pq; p++)
        for (int i = 0; i < D; i++) out[i] += s[p - lo] / sum * V[l][p][h][i];
}

struct wcase {
    enum kvb_policy_id global;
    int budget, W, block;
    float softcap;
    bool own_rope, save_mid;
    bool swa_half; /* the window layers' RoPE rotates half the dims (Gemma 4's window heads padded to the global size) */
};

static bool window_layer(int l) { return l != 1; } /* layers 0 and 2 windowed, 1 global */

static struct kvb_cache_params case_params(const struct wcase *wc, struct kvb_kv_layer *ov) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = L; cp.n_kv_head = HK; cp.head_dim = D;
    cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = wc->block;
    cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, D, 1000000.0f, 0.125f, NULL};
    if (wc->own_rope) cp.rope_swa = (struct kvb_rope){KVB_ROPE_NEOX, wc->swa_half ? D / 2 : D, 10000.0f, 1.0f, NULL};
    cp.attn_softcap = wc->softcap;
    cp.kv.policy = kvb_policy_default_params(wc->global);
    if (wc->budget) cp.kv.policy.budget = wc->budget;
    int n = 0;
    for (int l = 0; l < L; l++)
        if (window_layer(l)) {
            ov[n].layer = l;
            ov[n].policy = kvb_policy_default_params(KVB_POLICY_WINDOW);
            ov[n].policy.n_sink = 0;
            ov[n].policy.budget = wc->W;
            n++;
        }
    cp.kv.layers = ov;
    cp.kv.n_layers = n;
    return cp;
}

/* Window streams after a step: positions past - W + 1 .. past - 1, in order. */
static int check_windows(const struct kvb_cache *c, int W, const char *where) {
    struct kvb_cache_stats st;
    kvb_cache_get_stats(c, &st);
    long long slots = 0, pages = 0;
    for (int l = 0; l < L; l++) {
        if (!window_layer(l)) continue;
        const long long past = kvb_cache_n_past(c, l);
        const long long want = past < W - 1 ? past : W - 1;
        for (int h = 0; h < HK; h++) {
            const int n = kvb_cache_n_slots(c, l, h);
            if (n != want) { printf("  %s: window stream (%d,%d) holds %d tokens, want %lld\n", where, l, h, n, want); return 1; }
            for (int j = 0; j < n; j++) {
                struct kvb_slot_info si;
                kvb_cache_slot_info(c, l, h, j, &si);
                if (si.pos_original != past - want + j) { printf("  %s: (%d,%d) slot %d at %lld\n", where, l, h, j, (long long)si.pos_original); return 1; }
            }
            slots += n;
        }
    }
    (void)pages;
    if (st.window_layers != 2 || st.window_slots != slots) {
        printf("  %s: stats say %d window layers, %lld slots; want 2, %lld\n", where, (int)st.window_layers, (long long)st.window_slots, slots);
        return 1;
    }
    return 0;
}

static int run_case(const struct wcase *wc, unsigned long long seed) {
    struct kvb_kv_layer ov[L];
    struct kvb_cache_params cp = case_params(wc, ov);
    const int T = 5 * wc->W + 40, maxc = 2 * wc->W + 3;
    cp.pool_bytes = kvb_kv_seq_bytes(&cp.kv, L, HK, D, T + 1, T, maxc); /* exactly the rule's bytes */
    struct kvb_cache *c, *twin = NULL;
    if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) { printf("  init: %s\n", kvb_last_error()); return 1; }
    struct kvb_cache_params got;
    kvb_cache_get_params(c, &got);
    const struct kvb_rope *glob = &got.rope, *loc = wc->own_rope ? &got.rope_swa : &got.rope;
    unsigned long long rs = seed;
    static float q[MAXT][HK * G][D], out[MAXT][HK * G][D], out2[MAXT][HK * G][D], kk[MAXT][HK][D], vv[MAXT][HK][D];
    int fails = 0;
    long long t = 0;
    bool saved = false;
    while (t < T && !fails) {
        int C = 1 + (int)(t_rng_next(&rs) % (unsigned)maxc);
        if (t_rng_next(&rs) % 3 == 0) C = 1;
        if (t + C > T) C = (int)(T - t);
        for (int l = 0; l < L && !fails; l++) {
            for (int i = 0; i < C; i++)
                for (int h = 0; h < HK; h++)
                    for (int x = 0; x < D; x++) {
                        kk[i][h][x] = K[l][t + i][h][x] = t_randf(&rs);
                        vv[i][h][x] = V[l][t + i][h][x] = t_randf(&rs);
                    }
            for (int i = 0; i < C; i++)
                for (int h = 0; h < HK * G; h++)
                    for (int x = 0; x < D; x++) q[i][h][x] = 2.0f * t_randf(&rs);
            kvb_status st = C == 1 ? kvb_cache_decode(c, l, &q[0][0][0], HK * G, &kk[0][0][0], &vv[0][0][0], &out[0][0][0], NULL)
                                   : kvb_cache_prefill(c, l, C, &q[0][0][0], HK * G, &kk[0][0][0], &vv[0][0][0], &out[0][0][0], NULL);
            if (st != KVB_OK) { printf("  t %lld layer %d chunk %d: %s\n", t, l, C, kvb_last_error()); fails++; break; }
            if (twin) {
                st = C == 1 ? kvb_cache_decode(twin, l, &q[0][0][0], HK * G, &kk[0][0][0], &vv[0][0][0], &out2[0][0][0], NULL)
                            : kvb_cache_prefill(twin, l, C, &q[0][0][0], HK * G, &kk[0][0][0], &vv[0][0][0], &out2[0][0][0], NULL);
                if (st != KVB_OK || memcmp(out, out2, sizeof(float) * (size_t)C * HK * G * D) != 0) {
                    printf("  restored cache differs at t %lld layer %d\n", t, l);
                    fails++;
                    break;
                }
            }
            const bool exact = window_layer(l) || wc->global == KVB_POLICY_FULL;
            for (int i = 0; i < C && exact && !fails; i++)
                for (int hq = 0; hq < HK * G; hq++) {
                    const long long pq = t + i, lo = window_layer(l) ? (pq - wc->W + 1 > 0 ? pq - wc->W + 1 : 0) : 0;
                    double ref[D];
                    ref_row(window_layer(l) ? loc : glob, q[i][hq], pq, l, hq / G, lo, wc->softcap, ref);
                    for (int x = 0; x < D; x++)
                        if (fabs(out[i][hq][x] - ref[x]) > 2e-5) {
                            printf("  t %lld (chunk %d) layer %d row %d head %d dim %d: %.8f vs %.8f\n", t, C, l, i, hq, x,
                                   (double)out[i][hq][x], ref[x]);
                            fails++;
                            break;
                        }
                    if (fails) break;
                }
        }
        t += C;
        if (!fails) fails += check_windows(c, wc->W, "after step");
        if (wc->save_mid && !saved && t > 2 * wc->W) {
            void *img;
            size_t len;
            if (kvb_cache_save(c, &img, &len) != KVB_OK || kvb_cache_load(NULL, img, len, cp.pool_bytes, &twin) != KVB_OK) {
                printf("  save/load: %s\n", kvb_last_error());
                fails++;
            }
            free(img);
            saved = true;
            if (twin) {
                struct kvb_cache_params tp;
                kvb_cache_get_params(twin, &tp);
                if (tp.kv.n_layers != 2 || tp.kv.layers[1].policy.budget != wc->W || tp.attn_softcap != wc->softcap ||
                    tp.rope_swa.base != cp.rope_swa.base || (cp.rope_swa.base > 0 && tp.rope_swa.n_dims != cp.rope_swa.n_dims)) {
                    printf("  restored params lost the windows, rope_swa or softcap\n");
                    fails++;
                }
                fails += check_windows(twin, wc->W, "restored");
            }
        }
    }
    struct kvb_cache_stats st;
    kvb_cache_get_stats(c, &st);
    const long long win_pages_max = 2LL * HK * ((wc->W - 1 + maxc + wc->block - 1) / wc->block + 2);
    if (!fails && st.window_pages > win_pages_max) {
        printf("  window layers hold %lld pages, more than %lld\n", (long long)st.window_pages, win_pages_max);
        fails++;
    }
    kvb_cache_free(twin);
    kvb_cache_free(c);
    return fails;
}

TEST(window_layers_exact_against_reference) {
    static const struct wcase cases[] = {
        {KVB_POLICY_FULL, 0, 8, 4, 0.0f, true, true, false},        /* Gemma 3: own RoPE on window layers */
        {KVB_POLICY_FULL, 0, 13, 16, 3.0f, false, true, false},     /* Gemma 2: softcap, one RoPE */
        {KVB_POLICY_FULL, 0, 1, 1, 0.0f, true, false, false},       /* a window of one: each query sees itself */
        {KVB_POLICY_H2O, 24, 9, 4, 0.0f, true, true, false},        /* a bounded policy on the global layer */
        {KVB_POLICY_SNAPKV, 24, 7, 2, 2.5f, true, true, false},     /* prompt compression skips window layers */
        {KVB_POLICY_STREAMING, 16, 11, 8, 0.0f, false, false, false},
        {KVB_POLICY_TOVA, 20, 6, 4, 0.0f, true, false, false},      /* a layer-wide policy */
        {KVB_POLICY_FULL, 0, 8, 4, 0.0f, true, true, true},  /* Gemma 4: window layers rotate their own (fewer) dims */
        {KVB_POLICY_H2O, 24, 9, 4, 0.0f, true, true, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (unsigned long long seed = 1; seed <= 3; seed++) {
            if (run_case(&cases[i], seed * 7919 + i)) FAILF("case %zu (policy %s, window %d), seed %llu", i,
                                                             kvb_policy_name(cases[i].global), cases[i].W, seed);
        }
}

TEST(softcap_on_global_layers_exact) {
    /* no windows: the softcap alone, against the reference, prefill and decode */
    struct wcase wc = {KVB_POLICY_FULL, 0, 1000, 4, 1.5f, false, false, false};
    (void)wc;
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = HK; cp.head_dim = D; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 4;
    cp.rope = (struct kvb_rope){KVB_ROPE_INTERLEAVED, D, 10000.0f, 1.0f, NULL};
    cp.attn_softcap = 1.5f;
    cp.pool_bytes = 1 << 22;
    struct kvb_cache *c;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    unsigned long long rs = 99;
    static float q[64][HK * G][D], out[64][HK * G][D], kk[64][HK][D], vv[64][HK][D];
    for (int i = 0; i < 40; i++)
        for (int h = 0; h < HK; h++)
            for (int x = 0; x < D; x++) { kk[i][h][x] = K[0][i][h][x] = 3.0f * t_randf(&rs); vv[i][h][x] = V[0][i][h][x] = t_randf(&rs); }
    for (int i = 0; i < 40; i++)
        for (int h = 0; h < HK * G; h++)
            for (int x = 0; x < D; x++) q[i][h][x] = 3.0f * t_randf(&rs);
    CHECK_OK(kvb_cache_prefill(c, 0, 39, &q[0][0][0], HK * G, &kk[0][0][0], &vv[0][0][0], &out[0][0][0], NULL));
    CHECK_OK(kvb_cache_decode(c, 0, &q[39][0][0], HK * G, &kk[39][0][0], &vv[39][0][0], &out[39][0][0], NULL));
    double worst = 0, ref[D], plain[D];
    for (int i = 0; i < 40; i++)
        for (int hq = 0; hq < HK * G; hq++) {
            ref_row(&cp.rope, q[i][hq], i, 0, hq / G, 0, 1.5, ref);
            for (int x = 0; x < D; x++) worst = fmax(worst, fabs(out[i][hq][x] - ref[x]));
        }
    CHECK(worst < 2e-5);
    /* the cap changes the result: the same rows without it differ */
    ref_row(&cp.rope, q[39][0], 39, 0, 0, 0, 0.0, plain);
    double diff = 0;
    for (int x = 0; x < D; x++) diff = fmax(diff, fabs(out[39][0][x] - plain[x]));
    CHECK(diff > 1e-3);
    kvb_cache_free(c);
}

TEST(window_overrides_refused_by_name) {
    struct kvb_kv_layer ov[2];
    struct wcase wc = {KVB_POLICY_FULL, 0, 8, 4, 0.0f, true, false, false};
    struct kvb_cache_params cp = case_params(&wc, ov);
    struct kvb_cache *c;
    ov[0].policy = kvb_policy_default_params(KVB_POLICY_H2O);
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_UNSUPPORTED);
    CHECK(strstr(kvb_last_error(), "kv.layers[0].policy") != NULL);
    cp = case_params(&wc, ov);
    ov[1].policy.n_sink = 4;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_UNSUPPORTED);
    cp = case_params(&wc, ov);
    ov[1].layer = 0;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "both name layer 0") != NULL);
    cp = case_params(&wc, ov);
    ov[1].layer = L;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "kv.layers[1].layer") != NULL);
    cp = case_params(&wc, ov);
    ov[0].policy.budget = 0;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    cp = case_params(&wc, ov);
    cp.rope_swa.n_dims = D + 2; /* more than a head has (fewer is Gemma 4's window heads: exact above) */
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "rope_swa") != NULL);
    cp = case_params(&wc, ov);
    cp.attn_softcap = -1.0f;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "attn_softcap") != NULL);
    /* a window layer's budget is the model's; the global layers' can be set */
    cp = case_params(&wc, ov);
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    CHECK_STATUS(kvb_cache_set_budget(c, 0, -1, 64), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "sliding-window layer") != NULL);
    CHECK_OK(kvb_cache_set_budget(c, -1, -1, 0));
    CHECK_EQ_INT(kvb_cache_budget(c, 0, 0), 8);
    kvb_cache_free(c);
}

TEST(sizing_rule_counts_windows) {
    struct kvb_kv_layer ov[L];
    struct wcase wc = {KVB_POLICY_FULL, 0, 64, 16, 0.0f, true, false, false};
    struct kvb_cache_params cp = case_params(&wc, ov);
    const size_t with = kvb_kv_seq_bytes(&cp.kv, L, HK, D, 32768, 512, 512);
    struct kvb_kv_params plain = cp.kv;
    plain.layers = NULL;
    plain.n_layers = 0;
    const size_t without = kvb_kv_seq_bytes(&plain, L, HK, D, 32768, 512, 512);
    /* pages of 16 f32 rows of 16 dims, K and V: 2048 bytes; per stream: the
     * global layer (32768 + 512) / 16 + 2 pages, each window layer
     * (63 + 512 + 15) / 16 + 2 */
    const size_t page = 16 * 2 * D * 4;
    CHECK_EQ_INT((long long)with, (long long)(HK * page * ((32768 + 512) / 16 + 2 + 2 * ((63 + 512 + 15) / 16 + 2))));
    CHECK_EQ_INT((long long)without, (long long)(L * HK * page * ((32768 + 512) / 16 + 2)));
    ov[0].policy.budget = 0;
    CHECK(kvb_kv_seq_bytes(&cp.kv, L, HK, D, 32768, 512, 512) == 0);
}

/* Gemma 3 1B's geometry (26 layers, one KV head of 256, window 512 on the
 * layers with il % 6 < 5): 32K tokens of context under full hold exactly
 * (4 global layers x 32768 + 22 window layers x 511) rows, in pages, and
 * less under streaming with a budget of 1024; the sizing rule covers both. */
static int gemma3_at_32k(enum kvb_policy_id pid, int budget, long long *rows_out, size_t *bytes_out, size_t *rule_out) {
    enum { GL = 26, GD = 256, GW = 512, T = 32768 };
    struct kvb_kv_layer ov[GL];
    int nw = 0;
    for (int l = 0; l < GL; l++)
        if (l % 6 < 5) {
            ov[nw] = (struct kvb_kv_layer){l, kvb_policy_default_params(KVB_POLICY_WINDOW)};
            ov[nw].policy.n_sink = 0;
            ov[nw].policy.budget = GW;
            nw++;
        }
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = GL; cp.n_kv_head = 1; cp.head_dim = GD;
    cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, GD, 1000000.0f, 1.0f, NULL};
    cp.rope_swa = (struct kvb_rope){KVB_ROPE_NEOX, GD, 10000.0f, 1.0f, NULL};
    cp.kv.policy = kvb_policy_default_params(pid);
    if (budget) cp.kv.policy.budget = budget;
    cp.kv.layers = ov;
    cp.kv.n_layers = nw;
    cp.pool_bytes = *rule_out = kvb_kv_seq_bytes(&cp.kv, GL, 1, GD, T, 1, 1);
    struct kvb_cache *c;
    if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) { printf("  init: %s\n", kvb_last_error()); return 1; }
    static float k[GD], v[GD];
    for (int i = 0; i < GD; i++) { k[i] = (float)(i % 7) - 3; v[i] = (float)(i % 5); }
    for (int t = 0; t < T; t++)
        for (int l = 0; l < GL; l++) {
            if (kvb_cache_append(c, l, k, v) != KVB_OK) { printf("  t %d layer %d: %s\n", t, l, kvb_last_error()); kvb_cache_free(c); return 1; }
            kvb_cache_evict(c, l);
        }
    struct kvb_cache_stats st;
    kvb_cache_get_stats(c, &st);
    *rows_out = st.slots;
    *bytes_out = st.bytes_used;
    kvb_cache_free(c);
    if (nw != 22 || st.window_layers != 22 || st.window_slots != 22LL * (GW - 1)) {
        printf("  %d window layers hold %lld rows, want 22 x %d\n", (int)st.window_layers, (long long)st.window_slots, GW - 1);
        return 1;
    }
    return 0;
}

TEST(gemma3_1b_geometry_at_32k) {
    long long rows_full, rows_stream;
    size_t bytes_full, bytes_stream, rule_full, rule_stream;
    CHECK(gemma3_at_32k(KVB_POLICY_FULL, 0, &rows_full, &bytes_full, &rule_full) == 0);
    CHECK_EQ_INT(rows_full, 4LL * 32768 + 22LL * 511);
    /* f16 rows of 256: 512 bytes K + 512 V per token; pages of 16 */
    CHECK_EQ_INT((long long)bytes_full, (4LL * (32768 / 16) + 22LL * ((511 + 15) / 16)) * 16 * 1024);
    CHECK(rule_full >= bytes_full && rule_full < bytes_full + (size_t)26 * 4 * 16 * 1024);
    CHECK(gemma3_at_32k(KVB_POLICY_STREAMING, 1024, &rows_stream, &bytes_stream, &rule_stream) == 0);
    CHECK_EQ_INT(rows_stream, 4LL * 1024 + 22LL * 511);
    CHECK(bytes_stream < bytes_full / 8); /* the window layers now dominate */
    CHECK(rule_stream >= bytes_stream);
    printf("  gemma3-1b geometry at 32768 tokens: full %lld rows, %zu bytes (rule %zu); streaming 1024: %lld rows, %zu bytes (rule %zu)\n",
           rows_full, bytes_full, rule_full, rows_stream, bytes_stream, rule_stream);
}

int main(void) {
    RUN(window_layers_exact_against_reference);
    RUN(softcap_on_global_layers_exact);
    RUN(window_overrides_refused_by_name);
    RUN(sizing_rule_counts_windows);
    RUN(gemma3_1b_geometry_at_32k);
    return test_summary();
}

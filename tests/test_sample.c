/*
 * test_sample.c — the sampler's logit bias and penalties against a float64
 * reference written here from their definitions (llama.cpp's repetition
 * penalty, OpenAI's presence and frequency penalties), bans never drawn,
 * the draw split into adjust + pick equal to one sample call, and
 * kvb_logprobs against a sorted float64 log-softmax.
 */
#include "kvbound.h"
#include "testing.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 88172645463325252ull;
static double urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* The reference: bias, then over the last `last_n` history tokens: each
 * distinct token's logit divided (> 0) or multiplied by rp, minus
 * count * freq + presence. */
static void ref_adjust(double *l, int V, const struct kvb_logit_bias *b, int nb, const int32_t *h, int nh, int last_n, double rp, double pres,
                       double freq) {
    for (int i = 0; i < nb; i++) l[b[i].token] += b[i].bias;
    const int from = nh > last_n ? nh - last_n : 0;
    for (int t = 0; t < V; t++) {
        int c = 0;
        for (int i = from; i < nh; i++) c += h[i] == t;
        if (!c) continue;
        if (rp != 1.0) l[t] = l[t] > 0 ? l[t] / rp : l[t] * rp;
        l[t] -= c * freq + pres;
    }
}

TEST(bias_and_penalties_match_reference) {
    enum { V = 97 };
    for (int trial = 0; trial < 200; trial++) {
        struct kvb_sampler_params p = kvb_sampler_default_params();
        p.repeat_penalty = trial % 3 ? (float)(0.5 + 1.5 * urand()) : 1.0f;
        p.presence_penalty = trial % 4 ? (float)(4 * urand() - 2) : 0.0f;
        p.frequency_penalty = trial % 5 ? (float)(4 * urand() - 2) : 0.0f;
        p.repeat_last_n = (int32_t)(urand() * 40);
        struct kvb_logit_bias bias[6];
        const int nb = (int)(urand() * 6);
        for (int i = 0; i < nb; i++) bias[i] = (struct kvb_logit_bias){(int32_t)(urand() * V), (float)(20 * urand() - 10)};
        p.logit_bias = bias;
        p.n_logit_bias = nb;
        struct kvb_sampler *s = NULL;
        CHECK_OK(kvb_sampler_init(&p, V, &s));
        struct kvb_logit_bias given[6];
        memcpy(given, bias, sizeof given);
        for (int i = 0; i < nb; i++) bias[i].bias = 1e9f; /* changed after init: the sampler kept its own copy */
        int32_t hist[50];
        const int nh = (int)(urand() * 50);
        for (int i = 0; i < nh; i++) hist[i] = (int32_t)(urand() * 12); /* repeats */
        float lg[V];
        double ref[V];
        for (int i = 0; i < V; i++) ref[i] = lg[i] = (float)(8 * urand() - 4);
        kvb_sampler_adjust(s, lg, hist, nh);
        memcpy(bias, given, sizeof given);
        ref_adjust(ref, V, bias, nb, hist, nh, p.repeat_last_n, p.repeat_penalty, p.presence_penalty, p.frequency_penalty);
        for (int i = 0; i < V; i++) CHECK_NEAR(lg[i], ref[i], 1e-4 * (1 + fabs(ref[i])));
        /* twice in a row: the count scratch is clean between calls */
        float lg2[V];
        for (int i = 0; i < V; i++) lg2[i] = 0;
        kvb_sampler_adjust(s, lg2, hist, nh);
        double ref2[V];
        for (int i = 0; i < V; i++) ref2[i] = 0;
        ref_adjust(ref2, V, bias, nb, hist, nh, p.repeat_last_n, p.repeat_penalty, p.presence_penalty, p.frequency_penalty);
        for (int i = 0; i < V; i++) CHECK_NEAR(lg2[i], ref2[i], 1e-4 * (1 + fabs(ref2[i])));
        kvb_sampler_free(s);
    }
}

TEST(bans_are_never_drawn_and_sample_is_adjust_then_pick) {
    enum { V = 300 };
    struct kvb_logit_bias ban[150];
    for (int i = 0; i < 150; i++) ban[i] = (struct kvb_logit_bias){2 * i, -INFINITY};
    for (int trial = 0; trial < 40; trial++) {
        struct kvb_sampler_params p = kvb_sampler_default_params();
        p.temp = trial % 4 == 0 ? 0.0f : (float)(0.2 + 2 * urand());
        p.top_k = trial % 3 ? 0 : 5;
        p.top_p = trial % 2 ? 1.0f : 0.9f;
        p.min_p = trial % 5 ? 0.0f : 0.1f;
        p.seed = (uint64_t)trial;
        p.logit_bias = ban;
        p.n_logit_bias = 150;
        struct kvb_sampler *a = NULL, *b = NULL;
        CHECK_OK(kvb_sampler_init(&p, V, &a));
        CHECK_OK(kvb_sampler_init(&p, V, &b));
        for (int step = 0; step < 50; step++) {
            float la[V], lb[V];
            for (int i = 0; i < V; i++) la[i] = lb[i] = (float)(6 * urand() - 3) + (i % 2 == 0 ? 5.0f : 0.0f); /* banned ones are the likeliest */
            const int32_t ta = kvb_sampler_sample(a, la, NULL, 0);
            kvb_sampler_adjust(b, lb, NULL, 0);
            const int32_t tb = kvb_sampler_pick(b, lb);
            CHECK_EQ_INT(ta, tb);
            CHECK(ta % 2 == 1);
        }
        kvb_sampler_free(a);
        kvb_sampler_free(b);
    }
}

/* issue 48 survivor 9 (the library's half; the server's -100 is tested in
 * test_serve_cli.sh serve_logit_bias_minus_100_bans): a ban is -INFINITY,
 * never a large subtraction. Token 7 leads the rest by 1000: a bias of -100
 * leaves it the pick, -INFINITY never draws it, greedy or sampled. */
TEST(logit_bias_ban_is_not_a_subtraction_of_100) {
    enum { V = 50 };
    for (int trial = 0; trial < 8; trial++) {
        struct kvb_sampler_params p = kvb_sampler_default_params();
        p.temp = trial == 0 ? 0.0f : (float)(0.5 * trial);
        p.seed = (uint64_t)trial;
        struct kvb_logit_bias b = {7, -100.0f};
        p.logit_bias = &b;
        p.n_logit_bias = 1;
        struct kvb_sampler *sub = NULL, *ban = NULL;
        CHECK_OK(kvb_sampler_init(&p, V, &sub));
        b.bias = -INFINITY;
        CHECK_OK(kvb_sampler_init(&p, V, &ban));
        for (int step = 0; step < 20; step++) {
            float l1[V], l2[V];
            for (int i = 0; i < V; i++) l1[i] = l2[i] = (float)(2 * urand() - 1) + (i == 7 ? 1000.0f : 0.0f);
            CHECK_EQ_INT(kvb_sampler_sample(sub, l1, NULL, 0), 7); /* 900 above the rest: still the pick */
            CHECK(kvb_sampler_sample(ban, l2, NULL, 0) != 7);
        }
        kvb_sampler_free(sub);
        kvb_sampler_free(ban);
    }
}

TEST(bad_bias_is_refused_by_name) {
    struct kvb_sampler_params p = kvb_sampler_default_params();
    struct kvb_logit_bias b = {100, 1.0f};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    struct kvb_sampler *s = NULL;
    CHECK_STATUS(kvb_sampler_init(&p, 100, &s), KVB_ERR_INVALID);
    CHECK(s == NULL);
    CHECK(strstr(kvb_last_error(), "token 100") != NULL);
    b = (struct kvb_logit_bias){3, NAN};
    CHECK_STATUS(kvb_sampler_init(&p, 100, &s), KVB_ERR_INVALID);
    p.n_logit_bias = 0;
    p.presence_penalty = INFINITY;
    CHECK_STATUS(kvb_sampler_init(&p, 100, &s), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "presence_penalty") != NULL);
}

static int cmp_desc(const void *x, const void *y) {
    const double *a = x, *b = y;
    if (a[0] != b[0]) return a[0] < b[0] ? 1 : -1;
    return (a[1] > b[1]) - (a[1] < b[1]);
}

TEST(logprobs_match_sorted_log_softmax) {
    enum { V = 1000 };
    static float lg[V];
    static double pairs[V][2];
    for (int trial = 0; trial < 30; trial++) {
        for (int i = 0; i < V; i++) {
            lg[i] = (float)(30 * urand() - 15);
            if (i % 97 == 3) lg[i] = lg[i - 1]; /* ties: broken by id */
        }
        double mx = -INFINITY, z = 0;
        for (int i = 0; i < V; i++) mx = fmax(mx, lg[i]);
        for (int i = 0; i < V; i++) z += exp(lg[i] - mx);
        for (int i = 0; i < V; i++) {
            pairs[i][0] = lg[i];
            pairs[i][1] = i;
        }
        qsort(pairs, V, sizeof pairs[0], cmp_desc);
        const int k = trial % 21;
        int32_t ids[64];
        float lp[64];
        const int32_t tok = (int32_t)(urand() * V);
        const float l = kvb_logprobs(lg, V, tok, k, ids, lp);
        CHECK_NEAR(l, lg[tok] - mx - log(z), 1e-4);
        for (int i = 0; i < k; i++) {
            CHECK_EQ_INT(ids[i], (int32_t)pairs[i][1]);
            CHECK_NEAR(lp[i], pairs[i][0] - mx - log(z), 1e-4);
        }
    }
    /* probabilities sum to one */
    double tot = 0;
    for (int i = 0; i < V; i++) tot += exp(kvb_logprobs(lg, V, i, 0, NULL, NULL));
    CHECK_NEAR(tot, 1.0, 1e-3);
}

/* issue 48 survivor 8: k at and past the internal top array (KVB_LOGPROBS_MAX_K = 64) is clamped as the header says:
 * min(k, 64, n_vocab) entries written, equal to the sorted reference, and nothing past them (a canary after the
 * caller's arrays; under ASan the internal array too). Without the clamp, k = 65 wrote past both. */
TEST(logprobs_k_at_and_past_limit_clamped) { /* issue 48 survivor 8 */
    enum { V = 1000, CAN = 16 };
    static float lg[V];
    static double pairs[V][2];
    for (int i = 0; i < V; i++) {
        lg[i] = (float)(30 * urand() - 15);
        pairs[i][0] = lg[i];
        pairs[i][1] = i;
    }
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < V; i++) mx = fmax(mx, lg[i]);
    for (int i = 0; i < V; i++) z += exp(lg[i] - mx);
    qsort(pairs, V, sizeof pairs[0], cmp_desc);
    CHECK_EQ_INT(KVB_LOGPROBS_MAX_K, 64);
    static const struct {
        int32_t v, k;
    } cases[] = {{V, 64}, {V, 65}, {V, 1000}, {V, INT32_MAX}, {50, 65}, {50, 50}, {70, 69}, {V, 0}, {V, -1}, {V, INT32_MIN}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int32_t nv = cases[c].v, k = cases[c].k;
        int32_t ids[KVB_LOGPROBS_MAX_K + CAN];
        float lp[KVB_LOGPROBS_MAX_K + CAN];
        for (int i = 0; i < KVB_LOGPROBS_MAX_K + CAN; i++) ids[i] = -7, lp[i] = 77.0f;
        const float l = kvb_logprobs(lg, nv, 3, k, ids, lp);
        /* the reference over the first nv logits */
        double m2 = -INFINITY, z2 = 0;
        for (int i = 0; i < nv; i++) m2 = fmax(m2, lg[i]);
        for (int i = 0; i < nv; i++) z2 += exp(lg[i] - m2);
        CHECK_NEAR(l, lg[3] - m2 - log(z2), 1e-4);
        int want = k < 0 ? 0 : k;
        if (want > KVB_LOGPROBS_MAX_K) want = KVB_LOGPROBS_MAX_K;
        if (want > nv) want = nv;
        int n = 0; /* the top entries: the sorted reference restricted to ids below nv */
        for (int i = 0; i < V && n < want; i++) {
            if (pairs[i][1] >= nv) continue;
            if (ids[n] != (int32_t)pairs[i][1]) FAILF("v %d, k %d: top %d is id %d, want %d", nv, k, n, ids[n], (int)pairs[i][1]);
            CHECK_NEAR(lp[n], pairs[i][0] - m2 - log(z2), 1e-4);
            n++;
        }
        for (int i = want; i < KVB_LOGPROBS_MAX_K + CAN; i++)
            if (ids[i] != -7 || lp[i] != 77.0f) FAILF("v %d, k %d: entry %d written (only %d may be)", nv, k, i, want);
    }
    /* k <= 0 takes NULL arrays */
    CHECK_NEAR(kvb_logprobs(lg, V, 5, 0, NULL, NULL), lg[5] - mx - log(z), 1e-4);
    CHECK_NEAR(kvb_logprobs(lg, V, 5, -3, NULL, NULL), lg[5] - mx - log(z), 1e-4);
    CHECK(kvb_logprobs(lg, V, V, 0, NULL, NULL) == -INFINITY);
    CHECK(kvb_logprobs(lg, V, -1, 0, NULL, NULL) == -INFINITY);
}

int main(void) {
    RUN(bias_and_penalties_match_reference);
    RUN(bans_are_never_drawn_and_sample_is_adjust_then_pick);
    RUN(logit_bias_ban_is_not_a_subtraction_of_100); /* issue 48 survivor 9 */
    RUN(bad_bias_is_refused_by_name);
    RUN(logprobs_match_sorted_log_softmax);
    RUN(logprobs_k_at_and_past_limit_clamped);
    return test_summary();
}

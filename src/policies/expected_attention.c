/*
 * expected_attention.c — Expected Attention (Devoto et al. 2025, arXiv
 * 2510.00636; kvpress's ExpectedAttentionPress): a key's worth is the
 * attention future queries are expected to pay it. Future queries are
 * modelled as a Gaussian: the running mean mu and covariance S of the
 * layer's pre-RoPE queries, per query head (the cache feeds every query of
 * the stream's group to on_queries; the first n_sink positions, whose
 * queries are outliers, are left out, as the paper's code leaves them out).
 * RoPE turns a query at future position t by R(t); the paper averages the
 * rotation over the next T = 512 positions, Rbar = (1/T) sum R(t) for t in
 * [now, now + T), and takes mubar = Rbar mu, Sbar = Rbar S Rbar^T. For a
 * key k (as cached: rotated at its position) exp(q.k/sqrt(d)) with q ~
 * N(mubar, Sbar) has the expectation exp(mubar.k/sqrt(d) + k^T Sbar k/(2d)),
 * so each head's expected attention is the softmax over the stream's keys
 * after the sinks of
 *     z_j = mubar . k_j / sqrt(d) + k_j^T Sbar k_j / (2 d),
 * the group's heads are averaged, and the score is that times ||v_j|| (a
 * key's share of the output also scales with its value). The lowest score
 * outside the sinks and the protected recent window leaves.
 *
 * State: state[j] = the score of the last eviction (shown as the slot's
 * score); the statistics live in the view's qstat, per query head g:
 * [mu (d) | M2 (d x d)] (Welford: S = M2 / n), then one block of scratch.
 * Cost per eviction: O(n G d^2) for the quadratic forms plus O(T d) for
 * the mean rotation; per query token O(G d^2) for the statistics.
 *
 * When. By default after each prefill chunk and at every decode step at the
 * budget. With params.compress_prompt (KVB_PF_COMPRESS_OPTIONAL) a prompt is
 * read whole, its every query (after the sinks) feeding the statistics, and
 * kvb_cache_compress evicts it to the budget in one select: the whole prompt
 * scored at once from the statistics of all its queries and the rotation
 * averaged from the position after it, kvpress's ExpectedAttentionPress at
 * prefill exactly; decoding then evicts at every step as before.
 * compress_prompt 2 adds AdaKV's allocation across a layer's KV heads at
 * that compression (ea_budgets), as kvpress pairs them.
 */
#include "policy.h"

#include <math.h>
#include <stdlib.h>

#define EA_FUTURE 512 /* future positions the rotation is averaged over (the paper's n_future_positions) */

static void ea_defaults(struct kvb_policy_params *p) { p->n_sink = 4; }

static void ea_on_queries(const struct kvb_policy *p, struct kvb_stream_view *s, const float *q, int32_t n_tok, int32_t G, size_t stride,
                          int64_t pos0) {
    const int32_t d = s->head_dim;
    const size_t blk = (size_t)d + (size_t)d * d;
    float delta[KVB_POLICY_MAX_DIM];
    for (int32_t i = 0; i < n_tok; i++) {
        if (pos0 + i < p->params.n_sink) continue; /* the sinks' queries are outliers */
        const double n = (double)++*s->qstat_n;
        for (int32_t g = 0; g < G; g++) {
            float *mu = s->qstat + (size_t)g * blk, *m2 = mu + d;
            const float *x = q + (size_t)i * stride + (size_t)g * d;
            for (int32_t a = 0; a < d; a++) {
                delta[a] = x[a] - mu[a];
                mu[a] += (float)(delta[a] / n);
            }
            for (int32_t a = 0; a < d; a++) /* M2 += (x - mu_old)(x - mu_new)^T */
                for (int32_t b = 0; b < d; b++) m2[(size_t)a * d + b] += delta[a] * (x[b] - mu[b]);
        }
    }
}

/* In place: x (d x d, row-major) = Rbar x Rbar^T, Rbar given by its table cs. */
static void rotate_both_sides(const struct kvb_stream_view *s, const float *cs, float *x, int32_t d) {
    for (int32_t a = 0; a < d; a++) s->rope_apply(s, cs, x + (size_t)a * d); /* x Rbar^T: each row turned */
    for (int32_t a = 0; a < d; a++)
        for (int32_t b = a + 1; b < d; b++) {
            const float t = x[(size_t)a * d + b];
            x[(size_t)a * d + b] = x[(size_t)b * d + a];
            x[(size_t)b * d + a] = t;
        }
    for (int32_t a = 0; a < d; a++) s->rope_apply(s, cs, x + (size_t)a * d); /* (Rbar (x Rbar^T)^T)... = Rbar x Rbar^T, symmetric */
}

/* The scores of the view's slots after the sinks into s->state[lo, n)
 * (fscratch: scratch); returns lo, the first slot after the sinks. */
static int32_t ea_score(const struct kvb_policy *p, struct kvb_stream_view *s) {
    const int32_t lo = KVB_MIN(p->params.n_sink, s->n);
    const int32_t d = s->head_dim, G = s->qstat && *s->qstat_n > 0 ? s->qstat_g : 0; /* no query yet: the value norm alone */
    const size_t blk = (size_t)d + (size_t)d * d;
    float *score = s->state, *w = s->fscratch;
    for (int32_t j = 0; j < s->n; j++) score[j] = 0;
    if (s->n > lo && G > 0) {
        const double N = (double)*s->qstat_n;
        float cs[KVB_POLICY_MAX_DIM], k[KVB_POLICY_MAX_DIM];
        const int64_t now = (int64_t)s->pos[s->order[s->n - 1]] + 1; /* the next query's position */
        s->rope_mean(s, now, EA_FUTURE, cs);
        float *mubar = s->qstat + (size_t)G * blk, *sbar = mubar + d; /* scratch */
        for (int32_t g = 0; g < G; g++) {
            const float *mu = s->qstat + (size_t)g * blk, *m2 = mu + d;
            memcpy(mubar, mu, sizeof(float) * (size_t)d);
            s->rope_apply(s, cs, mubar);
            for (size_t i = 0; i < (size_t)d * d; i++) sbar[i] = N > 0 ? (float)(m2[i] / N) : 0.0f;
            rotate_both_sides(s, cs, sbar, d);
            double mx = -HUGE_VAL;
            for (int32_t j = lo; j < s->n; j++) {
                s->rows(s, j, k, NULL);
                double lin = 0, quad = 0;
                for (int32_t a = 0; a < d; a++) {
                    double r = 0;
                    const float *row = sbar + (size_t)a * d;
                    for (int32_t b = 0; b < d; b++) r += (double)row[b] * k[b];
                    quad += r * k[a];
                    lin += (double)mubar[a] * k[a];
                }
                const double z = lin / sqrt((double)d) + quad / (2.0 * d);
                w[j] = (float)z;
                mx = z > mx ? z : mx;
            }
            double sum = 0;
            for (int32_t j = lo; j < s->n; j++) sum += exp((double)w[j] - mx);
            for (int32_t j = lo; j < s->n; j++) score[j] += (float)(exp((double)w[j] - mx) / sum / G);
        }
    }
    for (int32_t j = lo; j < s->n; j++) { /* times the value's norm */
        float v[KVB_POLICY_MAX_DIM];
        s->rows(s, j, NULL, v);
        double n2 = 0;
        for (int32_t i = 0; i < s->value_dim; i++) n2 += (double)v[i] * v[i];
        score[j] = G > 0 ? (float)(score[j] * sqrt(n2)) : (float)sqrt(n2);
    }
    return lo;
}

static int32_t ea_select(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims) {
    const int32_t lo = ea_score(p, s);
    const int32_t hi = KVB_MAX(lo, s->n - kvb_policy_recent(p, s->budget));
    return kvb_pick_lowest(s, s->state, lo, hi, n_over, victims);
}

static int cmp_desc(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* compress_prompt 2 (kvpress's AdaKVPress around its ExpectedAttentionPress):
 * at kvb_cache_compress the layer's H x B tokens are shared by its KV heads
 * by score. Each head keeps its sinks and recent window and the top
 * floor(ada_floor x share) of its own candidates (share = B - sinks -
 * window; the paper's safeguard alpha = 0.2, ada_floor's default); the rest
 * of the layer's room goes to the highest scores of any head (a greedy merge
 * of the heads' sorted scores). select then keeps each head's top within its
 * budget, which is the same set. A prompt no longer than B is kept whole. */
static void ea_budgets(const struct kvb_policy *p, struct kvb_stream_view *const *streams, int32_t H, int32_t layer, int32_t n_layer,
                       int32_t B, int32_t P) {
    (void)layer; (void)n_layer;
    if (p->params.compress_prompt != 2 || B <= 0 || P <= B) return;
    const int32_t W = kvb_policy_recent(p, B), S = p->params.n_sink, share = B - W - S;
    if (share <= 0) return;
    const int32_t floor_n = (int32_t)(p->params.ada_floor * (double)share);
    int64_t pool = (int64_t)H * (share - floor_n);
    int32_t cnt[KVB_MAX_KV_HEADS], got[KVB_MAX_KV_HEADS];
    for (int32_t h = 0; h < H; h++) {
        struct kvb_stream_view *s = streams[h];
        const int32_t lo = ea_score(p, s), hi = KVB_MAX(lo, s->n - W);
        cnt[h] = hi - lo;
        memcpy(s->fscratch, s->state + lo, sizeof(float) * (size_t)cnt[h]);
        if (cnt[h] > 1) qsort(s->fscratch, (size_t)cnt[h], sizeof(float), cmp_desc);
        got[h] = KVB_MIN(floor_n, cnt[h]);
        pool += floor_n - got[h]; /* a head too short for its floor leaves the rest to others */
    }
    while (pool > 0) { /* the best next score of any head wins */
        int32_t best = -1;
        for (int32_t h = 0; h < H; h++)
            if (got[h] < cnt[h] && (best < 0 || streams[h]->fscratch[got[h]] > streams[best]->fscratch[got[best]])) best = h;
        if (best < 0) break;
        got[best]++;
        pool--;
    }
    for (int32_t h = 0; h < H; h++) streams[h]->budget = KVB_MAX((int32_t)KVB_MIN((int64_t)S + W + got[h], (int64_t)INT32_MAX), S + 1);
}

/* compress_prompt: the prompt read whole (or prefill_budget of it between
 * chunks) before its compression, then the budget (of the prompt with
 * budget_frac, as kvb_cache_compress resolves it); else the budget. */
static int64_t ea_peak_tokens(const struct kvb_policy_params *p, int64_t n_prompt) {
    if (!p->compress_prompt) return p->budget;
    int64_t B = p->budget;
    if (p->budget_frac > 0) B = KVB_MAX((int64_t)floor((double)p->budget_frac * (double)n_prompt), (int64_t)p->n_sink + 1);
    return KVB_MAX(B, p->prefill_budget ? (int64_t)p->prefill_budget : n_prompt);
}

const struct kvb_policy_i kvb_policy_expected_attention = {
    .name = "expected-attention",
    .describe = "Expected Attention: the softmax of each key's expected logit under a Gaussian of future queries (the running mean and covariance of the queries, RoPE averaged over the next 512 positions), times its value's norm; the lowest leaves. params: budget=256 n_sink=4 n_recent=0 compress_prompt=0 (1: the prompt read whole and compressed at its end, then prefill_budget, budget_frac apply; 2: and the layer's budget shared by its KV heads by score, AdaKV, ada_floor=0.2)",
    .flags = KVB_PF_QUERY_STATS | KVB_PF_COMPRESS_OPTIONAL,
    .n_state = 1,
    .default_pos = KVB_POS_ORIGINAL,
    .defaults = ea_defaults,
    .on_queries = ea_on_queries,
    .select = ea_select,
    .budgets = ea_budgets,
    .peak_tokens = ea_peak_tokens,
};

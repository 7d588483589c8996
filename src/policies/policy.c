/*
 * policy.c — helpers shared by the policies: the protected-recent rule, the
 * k-smallest picker (ties go to the older slot, so decisions depend only on
 * logical order and state), and SnapKV's observation-window scoring, which
 * snapkv, pyramidkv and adakv share.
 */
#include "policy.h"

#include <float.h>
#include <math.h>

int32_t kvb_policy_recent(const struct kvb_policy *p, int32_t budget) {
    const struct kvb_policy_params *pp = &p->params;
    const int32_t room = KVB_MAX(budget - pp->n_sink, 0);
    const int32_t r = pp->n_recent >= 0 ? pp->n_recent : p->iface->recent ? p->iface->recent(pp, room) : 0;
    return KVB_MIN(KVB_MAX(r, 0), room);
}

int32_t kvb_recent_all(const struct kvb_policy_params *p, int32_t room) {
    (void)p;
    return room;
}

int32_t kvb_recent_heavy(const struct kvb_policy_params *p, int32_t room) {
    return room - (int32_t)(p->heavy_ratio * (double)room);
}

int32_t kvb_recent_obs_window(const struct kvb_policy_params *p, int32_t room) {
    (void)room;
    return p->obs_window;
}

int32_t kvb_prefill_obs_window(const struct kvb_policy_params *p) { return p->obs_window; }

int64_t kvb_snapkv_peak_tokens(const struct kvb_policy_params *p, int64_t n_prompt) {
    int64_t B = p->budget; /* the budget kvb_cache_compress resolves (budget_frac: of the prompt) */
    if (p->budget_frac > 0) B = KVB_MAX((int64_t)floor((double)p->budget_frac * (double)n_prompt), (int64_t)p->n_sink + 1);
    const int64_t after = B + (p->decode_budget ? p->decode_budget : B); /* compressed prompt + generated tokens */
    const int64_t reading = p->prefill_budget ? p->prefill_budget : n_prompt; /* whole, or evicted between chunks */
    return KVB_MAX(after, reading);
}

static inline bool key_less(const float *key, int32_t a, int32_t b) {
    return key[a] < key[b] || (key[a] == key[b] && a < b);
}

/* Rearranges idx[0..m) so that its first k entries are the k smallest by
 * (key, index). Iterative quickselect, median-of-three pivots. */
static void select_k(int32_t *idx, int32_t m, int32_t k, const float *key) {
    int32_t lo = 0, hi = m - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (key_less(key, idx[mid], idx[lo])) { int32_t t = idx[mid]; idx[mid] = idx[lo]; idx[lo] = t; }
        if (key_less(key, idx[hi], idx[lo])) { int32_t t = idx[hi]; idx[hi] = idx[lo]; idx[lo] = t; }
        if (key_less(key, idx[hi], idx[mid])) { int32_t t = idx[hi]; idx[hi] = idx[mid]; idx[mid] = t; }
        int32_t pivot = idx[mid];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (key_less(key, idx[i], pivot)) i++;
            while (key_less(key, pivot, idx[j])) j--;
            if (i <= j) {
                int32_t t = idx[i]; idx[i] = idx[j]; idx[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

int32_t kvb_pick_lowest(struct kvb_stream_view *s, const float *key, int32_t lo, int32_t hi, int32_t k, int32_t *victims) {
    if (hi - lo < k) hi = s->n;
    if (hi - lo < k) k = hi - lo;
    if (k <= 0) return 0;
    if (k == 1) {
        int32_t best = lo;
        for (int32_t j = lo + 1; j < hi; j++)
            if (key[j] < key[best]) best = j;
        victims[0] = best;
        return 1;
    }
    int32_t m = hi - lo;
    int32_t *idx = s->iscratch;
    for (int32_t i = 0; i < m; i++) idx[i] = lo + i;
    select_k(idx, m, k, key);
    memcpy(victims, idx, sizeof(int32_t) * (size_t)k);
    return k;
}

int32_t kvb_pick_oldest(struct kvb_stream_view *s, int32_t lo, int32_t k, int32_t *victims) {
    if (lo + k > s->n) k = s->n - lo;
    for (int32_t i = 0; i < k; i++) victims[i] = lo + i;
    return KVB_MAX(k, 0);
}

int32_t kvb_select_oldest_after_sinks(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims) {
    return kvb_pick_oldest(s, KVB_MIN(p->params.n_sink, s->n), n_over, victims);
}

void kvb_snapkv_observe(const struct kvb_policy *p, struct kvb_stream_view *s, const float *w, int32_t n, bool prefill) {
    (void)p;
    if (!prefill) return; /* frozen at the prompt: decoding adds no evidence */
    for (int32_t j = 0; j < n; j++) s->state[j] += w[j];
}

void kvb_snapkv_pooled(const struct kvb_policy *p, const struct kvb_stream_view *s, int32_t m, float *out) {
    const int32_t K = p->params.pool_kernel, half = K / 2;
    const bool avg = p->params.pool_mode == KVB_POOL_AVG;
    for (int32_t j = 0; j < m; j++) {
        const int32_t a = KVB_MAX(0, j - half), b = KVB_MIN(m - 1, j + half);
        if (avg) {
            double sum = 0;
            for (int32_t t = a; t <= b; t++) sum += s->state[t];
            out[j] = (float)(sum / K);
        } else {
            float mx = s->state[a];
            for (int32_t t = a + 1; t <= b; t++) mx = s->state[t] > mx ? s->state[t] : mx;
            out[j] = mx; /* max pooling ignores the padding, as PyTorch's */
        }
    }
}

int32_t kvb_snapkv_select(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims) {
    const int32_t lo = KVB_MIN(p->params.n_sink, s->n);
    float *key = s->fscratch;
    if (s->prompt_end >= 0) { /* frozen prompt: generated tokens leave, oldest first */
        int32_t g = s->n; /* first generated logical slot */
        while (g > lo && s->pos[s->order[g - 1]] >= s->prompt_end) g--;
        int32_t k = KVB_MIN(n_over, s->n - g);
        for (int32_t i = 0; i < k; i++) victims[i] = g + i;
        if (k == n_over || g <= lo) return k;
        /* a budget lowered below the frozen prompt: lowest pooled vote */
        kvb_snapkv_pooled(p, s, g, key);
        for (int32_t j = g; j < s->n; j++) key[j] = FLT_MAX;
        return k + kvb_pick_lowest(s, key, lo, g, n_over - k, victims + k);
    }
    const int32_t hi = KVB_MAX(lo, s->n - kvb_policy_recent(p, s->budget ? s->budget : s->target));
    kvb_snapkv_pooled(p, s, hi, key);
    for (int32_t j = hi; j < s->n; j++) key[j] = FLT_MAX; /* the window yields last, oldest first */
    return kvb_pick_lowest(s, key, lo, hi, n_over, victims);
}

/* ---- the highest scores of several streams (kvzip, compress-on-park) ---- */

/* Non-negative floats order as their bit patterns. */
static inline uint32_t score_bits(float x) { return x > 0 ? kvb_state_bits(&x) : 0u; }

/* How many candidates of every stream have a score of at least bits b. */
static int64_t count_at_least(struct kvb_stream_view *const *v, int32_t n, int32_t n_sink, uint32_t b) {
    int64_t cnt = 0;
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = KVB_MIN(n_sink, v[i]->n); j < v[i]->n; j++) cnt += score_bits(v[i]->state[j]) >= b;
    return cnt;
}

void kvb_global_top_budgets(struct kvb_stream_view *const *v, int32_t n, int32_t ns, int64_t total) {
    /* the smallest bit pattern b with count(>= b) <= total */
    uint32_t lo = 0, hi = 0x7f800001u; /* count(>= hi) = 0 */
    if (count_at_least(v, n, ns, 0) <= total) hi = 0;
    while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (count_at_least(v, n, ns, mid) <= total) hi = mid;
        else lo = mid + 1;
    }
    const uint32_t b = hi;
    int64_t left = total - count_at_least(v, n, ns, b);
    uint32_t below = 0; /* the highest score under b: the ties that fill what is left */
    for (int32_t i = 0; i < n && b > 0; i++)
        for (int32_t j = KVB_MIN(ns, v[i]->n); j < v[i]->n; j++) {
            const uint32_t x = score_bits(v[i]->state[j]);
            if (x < b && x > below) below = x;
        }
    for (int32_t i = 0; i < n; i++) {
        const int32_t s0 = KVB_MIN(ns, v[i]->n);
        int32_t keep = 0;
        for (int32_t j = s0; j < v[i]->n; j++) {
            const uint32_t x = score_bits(v[i]->state[j]);
            if (x >= b) keep++;
            else if (b > 0 && x == below && left > 0) {
                keep++;
                left--;
            }
        }
        v[i]->budget = ns + KVB_MAX(keep, 1);
    }
}

/*
 * keydiff.c — KeyDiff (Park et al. 2025, arXiv 2504.15364): keys unlike the
 * others draw distinctive attention, so a stream keeps the keys least
 * similar to its anchor, the mean of its unit keys, and evicts the most
 * similar. Query-free: it reads no attention, only the keys, as the cache
 * holds them (rotated at their original positions, dequantized: the keys
 * the paper's cache and kvpress's KeyDiffPress score). Per stream (layer,
 * KV head). For the n slots of the view:
 *     a   = (1/n) sum_i k_i / |k_i|          (a zero key adds nothing)
 *     s_j = cos(k_j, a) = k_j . a / (|k_j| |a|)
 * and the victims are the largest s_j among the slots outside the sinks and
 * the protected recent window (ties: the older leaves first). The anchor
 * moves as keys come and go, so select computes it afresh: two passes over
 * the view's keys, O(n d), at each eviction; no per-slot state. Prefill
 * chunks evict at the budget after each chunk, the paper's block-wise
 * prefill (the anchor over the cache and the new block).
 */
#include "policy.h"

#include <math.h>

/* A key of the view into k; its squared norm. */
static double load_key(const struct kvb_stream_view *s, int32_t j, float *k) {
    s->rows(s, j, k, NULL);
    double n2 = 0;
    for (int32_t i = 0; i < s->head_dim; i++) n2 += (double)k[i] * k[i];
    return n2;
}

static int32_t keydiff_select(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims) {
    const int32_t lo = KVB_MIN(p->params.n_sink, s->n);
    const int32_t hi = KVB_MAX(lo, s->n - kvb_policy_recent(p, s->budget));
    const int32_t d = s->head_dim;
    float k[KVB_POLICY_MAX_DIM]; /* head_dim <= KVB_POLICY_MAX_DIM (kvb_cache_init) */
    double a[KVB_POLICY_MAX_DIM];
    for (int32_t i = 0; i < d; i++) a[i] = 0;
    for (int32_t j = 0; j < s->n; j++) {
        const double n2 = load_key(s, j, k);
        if (n2 <= 0) continue;
        const double inv = 1.0 / sqrt(n2);
        for (int32_t i = 0; i < d; i++) a[i] += k[i] * inv;
    }
    double an2 = 0;
    for (int32_t i = 0; i < d; i++) an2 += a[i] * a[i]; /* the 1/n of the mean cancels in the cosine */
    float *key = s->fscratch; /* the lowest leaves: minus the cosine */
    for (int32_t j = lo; j < s->n; j++) {
        const double n2 = load_key(s, j, k);
        double dot = 0;
        for (int32_t i = 0; i < d; i++) dot += k[i] * a[i];
        key[j] = n2 > 0 && an2 > 0 ? (float)(-dot / sqrt(n2 * an2)) : 0.0f;
    }
    return kvb_pick_lowest(s, key, lo, hi, n_over, victims);
}

const struct kvb_policy_i kvb_policy_keydiff = {
    .name = "keydiff",
    .describe = "KeyDiff: evict the keys most similar (cosine) to the mean of the stream's unit keys (rotated, as cached); needs no attention. params: budget=256 n_sink=0 n_recent=0",
    .flags = 0,
    .n_state = 0,
    .default_pos = KVB_POS_ORIGINAL,
    .select = keydiff_select,
};

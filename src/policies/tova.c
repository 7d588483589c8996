/*
 * tova.c — Token Omission Via Attention (Oren et al. 2024): evict the slot
 * with the lowest attention at the current step. state[0] = the latest
 * weights (prefill: the chunk's last query), the mean over the query heads
 * of the KV head. In the default layer scope (the paper and its authors'
 * code) `combine` then averages them over the layer's KV heads, so every
 * head holds the layer's score (the mean over all query heads) and drops
 * the same token; the head scope keeps the per-KV-head scores. No sinks or
 * window by default, as in the paper.
 */
#include "policy.h"

static void tova_observe(const struct kvb_policy *p, struct kvb_stream_view *s, const float *w, int32_t n, bool prefill) {
    (void)p; (void)prefill;
    memcpy(s->state, w, sizeof(float) * (size_t)n);
}

static void tova_combine(const struct kvb_policy *p, struct kvb_stream_view *const *streams, int32_t H) {
    if (p->params.tova_scope != KVB_TOVA_LAYER || H < 2) return;
    const int32_t n = streams[0]->n;
    for (int32_t h = 1; h < H; h++)
        if (streams[h]->n != n) return; /* per-head budgets made the heads differ: scores stay per head */
    for (int32_t j = 0; j < n; j++) {
        double sum = 0;
        for (int32_t h = 0; h < H; h++) sum += streams[h]->state[j];
        const float mean = (float)(sum / H);
        for (int32_t h = 0; h < H; h++) streams[h]->state[j] = mean;
    }
}

static int32_t tova_select(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims) {
    const int32_t lo = KVB_MIN(p->params.n_sink, s->n);
    const int32_t hi = KVB_MAX(lo, s->n - kvb_policy_recent(p, s->budget));
    return kvb_pick_lowest(s, s->state, lo, hi, n_over, victims); /* state is the key */
}

static int32_t tova_prefill_queries(const struct kvb_policy_params *p) {
    (void)p;
    return 1; /* the chunk's last query: the current step */
}

const struct kvb_policy_i kvb_policy_tova = {
    .name = "tova",
    .describe = "TOVA: evict the lowest attention at the current step, averaged over all query heads of the layer (one victim for every KV head; tova_scope=head: per KV head). params: budget=256 tova_scope=layer n_sink=0 n_recent=0",
    .flags = KVB_PF_DECODE_ATTN | KVB_PF_PREFILL_MASS,
    .n_state = 1,
    .prefill_queries = tova_prefill_queries,
    .default_pos = KVB_POS_ORIGINAL,
    .observe = tova_observe,
    .combine = tova_combine,
    .select = tova_select,
};

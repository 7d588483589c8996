/*
 * tova.c — Token Omission Via Attention (Oren et al. 2024): evict the slot
 * with the lowest attention at the current step, averaged over the query
 * heads sharing the KV head. state[0] = the latest weight (prefill: the last
 * query's). No sinks or window by default, as in the paper.
 */
#include "policy.h"

static void tova_observe(const struct kvb_policy *p, struct kvb_stream *s, const float *w, int32_t n, bool prefill) {
    (void)p; (void)prefill;
    memcpy(s->state, w, sizeof(float) * (size_t)n);
}

static int32_t tova_select(const struct kvb_policy *p, struct kvb_stream *s, int32_t n_over, int32_t *victims) {
    const int32_t lo = KVB_MIN(p->params.n_sink, s->n);
    const int32_t hi = KVB_MAX(lo, s->n - kvb_policy_recent(p, s->budget));
    return kvb_pick_lowest(s, s->state, lo, hi, n_over, victims); /* state is the key */
}

const struct kvb_policy_i kvb_policy_tova = {
    .name = "tova",
    .describe = "TOVA: evict the lowest attention at the current step (mean over the group's query heads). params: budget=256 n_sink=0 n_recent=0",
    .flags = KVB_PF_DECODE_ATTN | KVB_PF_PREFILL_MASS,
    .n_state = 1,
    .default_pos = KVB_POS_ORIGINAL,
    .observe = tova_observe,
    .select = tova_select,
};

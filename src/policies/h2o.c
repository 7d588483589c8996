/*
 * h2o.c — Heavy-Hitter Oracle (Zhang et al. 2023): keep sinks, the heavy
 * hitters by attention accumulated while decoding (and from prefill), and a
 * recent window. Budget split: heavy_ratio of (budget - n_sink) for heavy
 * hitters, the rest recent. state[0] = accumulated attention (mean over the
 * query heads of the KV head). Cost per step: O(n) accumulate + O(n) scan.
 */
#include "policy.h"

static void h2o_defaults(struct kvb_policy_params *p) { p->n_sink = 4; }

void kvb_h2o_observe(const struct kvb_policy *p, struct kvb_stream_view *s, const float *w, int32_t n, bool prefill) {
    (void)p; (void)prefill;
    float *st = s->state;
    for (int32_t j = 0; j < n; j++) st[j] += w[j];
}

static int32_t h2o_select(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims) {
    const int32_t lo = KVB_MIN(p->params.n_sink, s->n);
    const int32_t hi = KVB_MAX(lo, s->n - kvb_policy_recent(p, s->budget));
    return kvb_pick_lowest(s, s->state, lo, hi, n_over, victims); /* state is the key */
}

const struct kvb_policy_i kvb_policy_h2o = {
    .name = "h2o",
    .describe = "H2O: sinks + heavy hitters by accumulated attention + recent window. params: budget=256 n_sink=4 heavy_ratio=0.5 n_recent=-1 (rest of budget)",
    .flags = KVB_PF_DECODE_ATTN | KVB_PF_PREFILL_MASS,
    .n_state = 1,
    .recent = kvb_recent_heavy,
    .default_pos = KVB_POS_ORIGINAL,
    .defaults = h2o_defaults,
    .observe = kvb_h2o_observe,
    .select = h2o_select,
};

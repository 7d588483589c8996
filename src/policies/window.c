/* window.c — sliding window: keep the most recent `budget` tokens. */
#include "policy.h"

static int32_t window_select(const struct kvb_policy *p, struct kvb_stream *s, int32_t n_over, int32_t *victims) {
    return kvb_pick_oldest(s, KVB_MIN(p->params.n_sink, s->n), n_over, victims);
}

const struct kvb_policy_i kvb_policy_window = {
    .name = "window",
    .describe = "most recent tokens only. params: budget=256 n_sink=0",
    .flags = 0,
    .n_state = 0,
    .default_pos = KVB_POS_ORIGINAL,
    .select = window_select,
};

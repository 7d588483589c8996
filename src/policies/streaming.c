/* streaming.c — StreamingLLM (Xiao et al. 2023): n_sink attention sinks plus
 * a rolling window; positions re-indexed inside the cache by default. */
#include "policy.h"

static void streaming_defaults(struct kvb_policy_params *p) { p->n_sink = 4; }

static int32_t streaming_select(const struct kvb_policy *p, struct kvb_stream *s, int32_t n_over, int32_t *victims) {
    return kvb_pick_oldest(s, KVB_MIN(p->params.n_sink, s->n), n_over, victims);
}

const struct kvb_policy_i kvb_policy_streaming = {
    .name = "streaming",
    .describe = "StreamingLLM: sinks + rolling window, contiguous positions. params: budget=256 n_sink=4",
    .flags = 0,
    .n_state = 0,
    .default_pos = KVB_POS_CONTIGUOUS,
    .defaults = streaming_defaults,
    .select = streaming_select,
};

/* streaming.c — StreamingLLM (Xiao et al. 2023): n_sink attention sinks plus
 * a rolling window; positions re-indexed inside the cache by default. */
#include "policy.h"

static void streaming_defaults(struct kvb_policy_params *p) { p->n_sink = 4; }

const struct kvb_policy_i kvb_policy_streaming = {
    .name = "streaming",
    .describe = "StreamingLLM: sinks + rolling window, contiguous positions. params: budget=256 n_sink=4",
    .flags = 0,
    .n_state = 0,
    .recent = kvb_recent_all,
    .default_pos = KVB_POS_CONTIGUOUS,
    .defaults = streaming_defaults,
    .select = kvb_select_oldest_after_sinks,
};

/* window.c — sliding window: keep the most recent `budget` tokens. */
#include "policy.h"

const struct kvb_policy_i kvb_policy_window = {
    .name = "window",
    .describe = "most recent tokens only. params: budget=256 n_sink=0",
    .flags = 0,
    .n_state = 0,
    .recent = kvb_recent_all,
    .default_pos = KVB_POS_ORIGINAL,
    .select = kvb_select_oldest_after_sinks,
};

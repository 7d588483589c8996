/* full.c — no eviction: the quality baseline. Memory grows with the sequence. */
#include "policy.h"

static int32_t full_select(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims) {
    (void)p; (void)s; (void)n_over; (void)victims;
    return 0;
}

const struct kvb_policy_i kvb_policy_full = {
    .name = "full",
    .describe = "no eviction; memory grows with the sequence (quality baseline). params: none",
    .flags = KVB_PF_NEVER_EVICT,
    .n_state = 0,
    .default_pos = KVB_POS_ORIGINAL,
    .select = full_select,
};

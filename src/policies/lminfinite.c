/*
 * lminfinite.c — LM-Infinite (Han et al. 2023): a Λ-shaped attention, the
 * first n_sink tokens (n_global in the paper) plus the most recent
 * budget - n_sink (n_local), with every relative distance capped at the
 * trained length, so the model never sees a distance it was not trained on
 * and no position is re-indexed. Eviction is the sinks + window rule; the
 * distance cap is the cache's KVB_POS_CAPPED position mode (cache.c), which
 * this policy selects by default. A position mode rather than a streaming
 * option because the cap is about what attention sees, not which tokens are
 * kept: any policy can run with --positions capped.
 */
#include "policy.h"

static void lminfinite_defaults(struct kvb_policy_params *p) { p->n_sink = 10; }

const struct kvb_policy_i kvb_policy_lminfinite = {
    .name = "lminfinite",
    .describe = "LM-Infinite: n_sink global tokens + the most recent, original positions with every distance capped at the trained length (positions capped). params: budget=256 n_sink=10 max_distance=trained length",
    .flags = 0,
    .n_state = 0,
    .recent = kvb_recent_all,
    .default_pos = KVB_POS_CAPPED,
    .defaults = lminfinite_defaults,
    .select = kvb_select_oldest_after_sinks,
};

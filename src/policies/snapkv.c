/*
 * snapkv.c — SnapKV (Li et al. 2024): at the end of the prompt, the last
 * obs_window queries vote; the per-key mass is max-pooled (kernel 7) and each
 * KV head keeps its top-k plus the window. During decoding it is frozen at the
 * prompt: new tokens append, and the oldest generated token outside the
 * recent window leaves first (see kvb_snapkv_select in policy.c).
 */
#include "policy.h"

const struct kvb_policy_i kvb_policy_snapkv = {
    .name = "snapkv",
    .describe = "SnapKV: prompt observation window votes, max-pool, per-KV-head top-k; decode keeps a recent window. params: budget=256 obs_window=32 pool_kernel=7 n_sink=0",
    .flags = KVB_PF_PREFILL_MASS,
    .n_state = 1,
    .default_pos = KVB_POS_ORIGINAL,
    .observe = kvb_snapkv_observe,
    .select = kvb_snapkv_select,
};

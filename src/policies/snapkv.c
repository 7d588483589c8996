/*
 * snapkv.c — SnapKV (Li et al. 2024). At the end of the prompt
 * (kvb_cache_compress) the last obs_window queries vote over the earlier
 * positions; the votes are pooled (kernel 7, max or avg) and each KV head
 * keeps its top (budget - window) positions plus the window. The compressed
 * prompt is then frozen; up to decode_budget generated tokens follow it,
 * oldest out first. The scoring and both phases are in policy.c
 * (kvb_snapkv_*), shared with pyramidkv and adakv.
 */
#include "policy.h"

const struct kvb_policy_i kvb_policy_snapkv = {
    .name = "snapkv",
    .describe = "SnapKV: at the end of the prompt its last obs_window queries vote, pooled, per-KV-head top-k + window; the compressed prompt is frozen and up to decode_budget generated tokens follow it. params: budget=256 obs_window=32 pool_kernel=7 pool=max decode_budget=budget prefill_budget=0 (exact) n_sink=0",
    .flags = KVB_PF_PREFILL_MASS | KVB_PF_COMPRESS,
    .n_state = 1,
    .recent = kvb_recent_obs_window,
    .prefill_queries = kvb_prefill_obs_window,
    .default_pos = KVB_POS_ORIGINAL,
    .observe = kvb_snapkv_observe,
    .select = kvb_snapkv_select,
    .peak_tokens = kvb_snapkv_peak_tokens,
};

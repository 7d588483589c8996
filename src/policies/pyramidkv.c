/*
 * pyramidkv.c — PyramidKV (Cai et al. 2024): SnapKV scoring with per-layer
 * budgets decreasing linearly from bottom to top, computed at
 * kvb_cache_compress from the prompt length P. With W = obs_window, the
 * average budget B and L layers (as in the authors' KVCache-Factory code):
 *     P <= B: no compression (every layer keeps the whole prompt)
 *     min = (B - W) / beta,  max = 2 (B - W) - min,
 *     if max > P - W: max = P - W, min = 2 (B - W) - max
 *     budget(l) = floor(W + max - l * (max - min) / (L - 1))
 * P > B makes P - W > B - W, so min <= B - W <= max: budgets never increase
 * toward the top, and they average at most B. The top layer keeps
 * (B - W) / beta + W when the prompt is long.
 */
#include "policy.h"

#include <math.h>

static void pyramid_budgets(const struct kvb_policy *p, struct kvb_stream_view *const *streams, int32_t n_streams,
                            int32_t layer, int32_t n_layer, int32_t B, int32_t P) {
    if (B <= 0 || P <= B) return; /* short prompt: streams keep their target (>= P): nothing leaves */
    const double W = p->params.obs_window;
    double room = (double)B - W;
    if (room <= 0) return; /* window alone fills the budget: uniform */
    double mn = room / p->params.pyramid_beta, mx = 2 * room - mn;
    if (mx > (double)P - W) {
        mx = (double)P - W;
        mn = 2 * room - mx;
    }
    double b = n_layer > 1 ? mx - (double)layer * (mx - mn) / (double)(n_layer - 1) : room;
    double bw = floor(b + W);
    int32_t budget = bw >= (double)INT32_MAX ? INT32_MAX : bw <= 0 ? 0 : (int32_t)bw;
    budget = KVB_MAX(budget, p->params.n_sink + 1);
    for (int32_t h = 0; h < n_streams; h++) streams[h]->budget = budget;
}

static kvb_status pyramid_validate(const struct kvb_policy_params *pp) {
    if (!(pp->pyramid_beta >= 1.0f) || !isfinite(pp->pyramid_beta)) return kvb_fail(KVB_ERR_INVALID, "policy pyramidkv: pyramid_beta must be >= 1, got %g", (double)pp->pyramid_beta);
    return KVB_OK;
}

const struct kvb_policy_i kvb_policy_pyramidkv = {
    .name = "pyramidkv",
    .describe = "PyramidKV: SnapKV scoring, per-layer budgets decreasing linearly bottom to top, set from the prompt length at compress. params: budget=256 (layer average) obs_window=32 pool_kernel=7 pool=max pyramid_beta=20 decode_budget=budget prefill_budget=0 n_sink=0",
    .flags = KVB_PF_PREFILL_MASS | KVB_PF_COMPRESS,
    .n_state = 1,
    .recent = kvb_recent_obs_window,
    .prefill_queries = kvb_prefill_obs_window,
    .default_pos = KVB_POS_ORIGINAL,
    .observe = kvb_snapkv_observe,
    .validate = pyramid_validate,
    .select = kvb_snapkv_select,
    .peak_tokens = kvb_snapkv_peak_tokens,
    .budgets = pyramid_budgets,
};

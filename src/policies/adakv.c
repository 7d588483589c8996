/*
 * adakv.c — AdaKV (Feng et al. 2024): one budget per layer, B x n_kv_head,
 * shared by its KV heads and allocated by score, so heads keep different
 * lengths and the memory they give up returns to the pool. At compress, when
 * the prompt is longer than B (a shorter one is kept whole): every head keeps
 * its sinks and window, plus a floor of ada_floor x its share; the rest of
 * the layer's budget goes to the highest pooled SnapKV votes across all heads
 * (greedy merge of the heads' sorted votes). Eviction within a head is
 * SnapKV's.
 */
#include "policy.h"

#include <stdlib.h>

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static void ada_budgets(const struct kvb_policy *p, struct kvb_stream_view *const *streams, int32_t H, int32_t layer,
                        int32_t n_layer, int32_t B, int32_t P) {
    (void)layer; (void)n_layer;
    if (B <= 0 || P <= B) return; /* short prompt: kept whole */
    const int32_t W = kvb_policy_recent(p, B), S = p->params.n_sink;
    const int32_t share = B - W - S;          /* per-head room for selected tokens */
    if (share <= 0) return;
    const int32_t floor_n = (int32_t)(p->params.ada_floor * (double)share);
    int64_t pool = (int64_t)H * (share - floor_n); /* what the heads compete for */
    int32_t cnt[KVB_MAX_KV_HEADS], got[KVB_MAX_KV_HEADS], pos[KVB_MAX_KV_HEADS];
    for (int32_t h = 0; h < H; h++) {
        struct kvb_stream_view *s = streams[h];
        int32_t lo = KVB_MIN(S, s->n), hi = KVB_MAX(lo, s->n - W);
        kvb_snapkv_pooled(p, s, hi, s->fscratch);
        cnt[h] = hi - lo;
        memmove(s->fscratch, s->fscratch + lo, sizeof(float) * (size_t)cnt[h]);
        if (cnt[h] > 1) qsort(s->fscratch, (size_t)cnt[h], sizeof(float), cmp_desc);
        got[h] = KVB_MIN(floor_n, cnt[h]);
        pos[h] = got[h];
        pool += floor_n - got[h]; /* a head too short for its floor leaves the rest to others */
    }
    while (pool > 0) { /* greedy merge: the best next score of any head wins */
        int32_t best = -1;
        for (int32_t h = 0; h < H; h++)
            if (pos[h] < cnt[h] && (best < 0 || streams[h]->fscratch[pos[h]] > streams[best]->fscratch[pos[best]])) best = h;
        if (best < 0) break;
        pos[best]++;
        got[best]++;
        pool--;
    }
    for (int32_t h = 0; h < H; h++) streams[h]->budget = (int32_t)KVB_MIN((int64_t)S + W + got[h], (int64_t)INT32_MAX);
    /* a stream shorter than its budget simply keeps everything */
    for (int32_t h = 0; h < H; h++)
        if (streams[h]->budget <= S) streams[h]->budget = S + 1;
}

static kvb_status ada_validate(const struct kvb_policy_params *pp) {
    if (!(pp->ada_floor >= 0.0f && pp->ada_floor <= 1.0f)) return kvb_fail(KVB_ERR_INVALID, "policy adakv: ada_floor must be in [0, 1], got %g", (double)pp->ada_floor);
    return KVB_OK;
}

const struct kvb_policy_i kvb_policy_adakv = {
    .name = "adakv",
    .describe = "AdaKV: SnapKV scoring; at compress one budget per layer (budget x heads) allocated across KV heads by vote. params: budget=256 (head average) obs_window=32 pool_kernel=7 pool=max ada_floor=0.2 decode_budget=budget prefill_budget=0 n_sink=0",
    .flags = KVB_PF_PREFILL_MASS | KVB_PF_COMPRESS,
    .n_state = 1,
    .recent = kvb_recent_obs_window,
    .prefill_queries = kvb_prefill_obs_window,
    .default_pos = KVB_POS_ORIGINAL,
    .observe = kvb_snapkv_observe,
    .validate = ada_validate,
    .select = kvb_snapkv_select,
    .peak_tokens = kvb_snapkv_peak_tokens,
    .budgets = ada_budgets,
};

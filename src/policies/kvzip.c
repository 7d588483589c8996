/*
 * kvzip.c — KVzip (Kim et al. 2025, arXiv 2505.23416): a cached token
 * matters as much as the model needs it to reconstruct the context. After
 * the context is read, the engine runs a reconstruction pass per chunk of
 * KVB_KVZIP_CHUNK context tokens (the repeat prompt, then the chunk again,
 * teacher-forced, over the whole cache); the cache scores each token of the
 * chunk by the largest attention any query of the pass gives it (cache.c,
 * attend.c kvb_attend_recon_score), and drops the pass's own rows:
 *     S[l,h,i] = max over g < G, t < n_in of softmax_t(q_{l,h,g,t} . K)[i]
 * where the softmax runs over the sinks, the chunk and the pass's own keys
 * (causal) — the paper's chunked scoring. This file only keeps and uses the
 * scores: state[0] is S. Budgets are the paper's main method, non-uniform
 * across heads and layers (budgets_global): every stream's budget adds up to
 * the same total, which goes to the highest scores of the whole model. The
 * compressed prompt is then frozen like snapkv's: generated tokens follow it
 * (decode_budget), oldest out first. Scores survive a later prompt: the
 * next reconstruction scores only the tokens read since.
 */
#include "policy.h"

#include <float.h>

/* Lowest score first among the candidates after the sinks; a frozen prompt
 * lets its generated tokens go first, oldest first. */
static int32_t kvzip_select(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims) {
    const int32_t lo = KVB_MIN(p->params.n_sink, s->n);
    float *key = s->fscratch;
    int32_t g = s->n, k = 0;
    if (s->prompt_end >= 0) {
        while (g > lo && s->pos[s->order[g - 1]] >= s->prompt_end) g--;
        k = KVB_MIN(n_over, s->n - g);
        for (int32_t i = 0; i < k; i++) victims[i] = g + i;
        if (k == n_over || g <= lo) return k;
    }
    const int32_t hi = KVB_MAX(lo, g - kvb_policy_recent(p, s->budget ? s->budget : s->target));
    for (int32_t j = 0; j < s->n; j++) key[j] = j < hi ? s->state[j] : FLT_MAX; /* the recent window yields last */
    return k + kvb_pick_lowest(s, key, lo, hi, n_over - k, victims + k);
}

/* The paper's non-uniform head budgets: the streams' budgets (a budget of
 * 0, or past the stream's length: all of it) sum to the tokens kept, the
 * highest scores of all streams (kvb_global_top_budgets). */
static void kvzip_budgets_global(const struct kvb_policy *p, struct kvb_stream_view *const *v, int32_t n) {
    const int32_t ns = p->params.n_sink;
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t b = v[i]->budget ? v[i]->budget : v[i]->n;
        total += KVB_MAX(0, KVB_MIN(b, v[i]->n) - KVB_MIN(ns, v[i]->n));
    }
    kvb_global_top_budgets(v, n, ns, total);
}

static kvb_status kvzip_validate(const struct kvb_policy_params *p) {
    if (p->prefill_budget)
        return kvb_fail(KVB_ERR_INVALID, "policy kvzip: prefill_budget must be 0 (kvzip scores the context once it is read whole), got %d",
                        (int)p->prefill_budget);
    return KVB_OK;
}

/* snapkv's peak, or the context plus one reconstruction pass (a chunk and
 * its repeat prompt) while the pass reads. */
static int64_t kvzip_peak_tokens(const struct kvb_policy_params *p, int64_t n_prompt) {
    const int64_t pass = KVB_MIN(n_prompt, (int64_t)KVB_KVZIP_CHUNK) + KVB_KVZIP_PROMPT_MAX;
    return KVB_MAX(kvb_snapkv_peak_tokens(p, n_prompt), n_prompt + pass);
}

const struct kvb_policy_i kvb_policy_kvzip = {
    .name = "kvzip",
    .describe = "KVzip: after the prompt, the model repeats it (\"Repeat the previous context exactly.\", chunks of 2048); each token "
                "scores the most attention any repeat query gives it; the highest scores of all heads and layers stay (non-uniform "
                "head budgets), the pass's own rows are dropped; the compressed prompt is frozen and up to decode_budget generated "
                "tokens follow it. params: budget=256 decode_budget=budget n_sink=0 (sinks also join each chunk's softmax)",
    .flags = KVB_PF_COMPRESS | KVB_PF_RECONSTRUCT,
    .n_state = 1,
    .default_pos = KVB_POS_ORIGINAL,
    .validate = kvzip_validate,
    .select = kvzip_select,
    .budgets_global = kvzip_budgets_global,
    .peak_tokens = kvzip_peak_tokens,
};

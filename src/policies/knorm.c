/*
 * knorm.c — key-norm eviction (Devoto et al. 2024): keys with a low L2 norm
 * attract attention, so keep those and evict the highest norm. Needs no
 * attention at all. state[0] = ||k|| (pre-RoPE; RoPE preserves norms).
 */
#include "policy.h"

#include <math.h>

static void knorm_on_append(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t j, const float *k, int32_t d) {
    (void)p;
    float n2 = 0;
    if (k)
        for (int32_t i = 0; i < d; i++) n2 += k[i] * k[i];
    s->state[j] = sqrtf(n2);
}

static int32_t knorm_select(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims) {
    const int32_t lo = KVB_MIN(p->params.n_sink, s->n);
    const int32_t hi = KVB_MAX(lo, s->n - kvb_policy_recent(p, s->budget));
    float *key = s->fscratch;
    for (int32_t j = lo; j < s->n; j++) key[j] = -s->state[j];
    return kvb_pick_lowest(s, key, lo, hi, n_over, victims);
}

const struct kvb_policy_i kvb_policy_knorm = {
    .name = "knorm",
    .describe = "Knorm: keep the keys with the lowest L2 norm; needs no attention. params: budget=256 n_sink=0 n_recent=0",
    .flags = 0,
    .n_state = 1,
    .default_pos = KVB_POS_ORIGINAL,
    .on_append = knorm_on_append,
    .select = knorm_select,
};

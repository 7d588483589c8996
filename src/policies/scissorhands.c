/*
 * scissorhands.c — persistence of importance (Liu et al. 2023). A slot is
 * "unimportant" at a step when its attention is below the average 1/n. Over
 * the last `history` steps (a bitmask, state[1]) a slot unimportant at least
 * `threshold` times is evicted first; among equals, the one unimportant most
 * often, then the lowest accumulated attention (state[0]), then the oldest.
 * The most recent `history` tokens are protected: they have not been judged.
 */
#include "policy.h"

/* Set bits of x, inline (SWAR): __builtin_popcount compiles to a libgcc call
 * per slot without -mpopcnt, which cost ~5% of a decode step. */
static inline int32_t bit_count(uint32_t x) {
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    x = (x + (x >> 4)) & 0x0F0F0F0Fu;
    return (int32_t)((x * 0x01010101u) >> 24);
}

static void scissorhands_defaults(struct kvb_policy_params *p) { p->n_sink = 4; }

static void sh_observe(const struct kvb_policy *p, struct kvb_stream_view *s, const float *w, int32_t n, bool prefill) {
    const uint32_t mask = p->params.history >= 32 ? 0xffffffffu : (1u << p->params.history) - 1;
    const float avg = n > 0 ? 1.0f / (float)n : 0.0f;
    for (int32_t j = 0; j < n; j++) {
        float *st = &s->state[(size_t)j * 2];
        st[0] += w[j];
        if (!prefill) kvb_state_set_bits(&st[1], ((kvb_state_bits(&st[1]) << 1) | (w[j] < avg ? 1u : 0u)) & mask);
    }
}

static int32_t sh_select(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims) {
    const int32_t lo = KVB_MIN(p->params.n_sink, s->n);
    const int32_t hi = KVB_MAX(lo, s->n - kvb_policy_recent(p, s->budget));
    float *key = s->fscratch;
    for (int32_t j = lo; j < s->n; j++) {
        const float *st = &s->state[(size_t)j * 2];
        int32_t low = bit_count(kvb_state_bits(&st[1]));
        float acc = st[0];
        key[j] = (low >= p->params.threshold ? 0.0f : 64.0f) + (float)(32 - low) + acc / (1.0f + acc);
    }
    return kvb_pick_lowest(s, key, lo, hi, n_over, victims);
}

static int32_t scissorhands_recent(const struct kvb_policy_params *p, int32_t room) {
    (void)room;
    return p->history; /* the last `history` tokens are not yet judged */
}

static kvb_status scissorhands_validate(const struct kvb_policy_params *pp) {
    if (pp->history < 1 || pp->history > 32) return kvb_fail(KVB_ERR_INVALID, "policy scissorhands: history must be in 1..32, got %d", (int)pp->history);
    if (pp->threshold < 1 || pp->threshold > pp->history) return kvb_fail(KVB_ERR_INVALID, "policy scissorhands: threshold must be in 1..history (%d), got %d", (int)pp->history, (int)pp->threshold);
    return KVB_OK;
}

const struct kvb_policy_i kvb_policy_scissorhands = {
    .name = "scissorhands",
    .describe = "Scissorhands: evict slots below average attention >= threshold times in the last history steps. params: budget=256 n_sink=4 history=16 threshold=8 n_recent=-1 (history)",
    .flags = KVB_PF_DECODE_ATTN | KVB_PF_PREFILL_MASS,
    .n_state = 2,
    .recent = scissorhands_recent,
    .default_pos = KVB_POS_ORIGINAL,
    .defaults = scissorhands_defaults,
    .observe = sh_observe,
    .validate = scissorhands_validate,
    .select = sh_select,
};

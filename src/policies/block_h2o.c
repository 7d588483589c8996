/*
 * block_h2o.c — block-level H2O (PagedAttention-style eviction): H2O scores
 * summed per page, and whole pages evicted, so memory returns to the pool a
 * page at a time and no page is left partly used. A page holding a sink, a
 * protected recent slot or a slot the view does not show (the cache's pinned
 * span) is not eligible; if no page is eligible, single slots
 * go by H2O's rule. Ties: the lower page index (the physical layout is saved
 * and restored exactly, so this stays deterministic across restarts).
 */
#include "policy.h"

#include <math.h>


static void block_defaults(struct kvb_policy_params *p) { p->n_sink = 4; }

static int32_t block_select(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims) {
    const int32_t B = p->block_size;
    const int32_t lo = KVB_MIN(p->params.n_sink, s->n);
    const int32_t hi = KVB_MAX(lo, s->n - kvb_policy_recent(p, s->budget));
    int32_t *rank_of = s->iscratch; /* physical slot -> logical index */
    float *page_sum = s->fscratch;  /* [n_pages], then per-page flags below */
    for (int32_t pg = 0; pg < s->n_pages; pg++) page_sum[pg] = 0;
    for (int32_t slot = 0; slot < s->n_pages * B; slot++) rank_of[slot] = -1;
    for (int32_t j = 0; j < s->n; j++) {
        int32_t slot = s->order[j];
        rank_of[slot] = j;
        int32_t pg = slot / B;
        if (j < lo || j >= hi) page_sum[pg] = INFINITY; /* holds a protected slot */
        else if (page_sum[pg] != INFINITY) page_sum[pg] += s->state[j];
    }
    for (int32_t slot = 0; slot < s->n_pages * B; slot++) /* holds a slot the view does not show (the pinned span) */
        if (s->pos[slot] >= 0 && rank_of[slot] < 0) page_sum[slot / B] = INFINITY;
    int32_t k = 0;
    while (k < n_over) {
        int32_t best = -1;
        for (int32_t pg = 0; pg < s->n_pages; pg++)
            if (s->page_live[pg] > 0 && page_sum[pg] != INFINITY && (best < 0 || page_sum[pg] < page_sum[best])) best = pg;
        if (best < 0) break;
        for (int32_t i = 0; i < B; i++) {
            int32_t slot = best * B + i;
            if (s->pos[slot] >= 0) victims[k++] = rank_of[slot];
        }
        page_sum[best] = INFINITY;
    }
    if (k < n_over) { /* no whole page can go: single slots by H2O score */
        float *key = s->fscratch;
        bool taken_any = k > 0;
        for (int32_t j = lo; j < s->n; j++) key[j] = s->state[j];
        if (taken_any)
            for (int32_t i = 0; i < k; i++) key[victims[i]] = INFINITY;
        k += kvb_pick_lowest(s, key, lo, hi, n_over - k, victims + k);
    }
    return k;
}

const struct kvb_policy_i kvb_policy_block_h2o = {
    .name = "block-h2o",
    .describe = "block H2O: H2O scores summed per page, whole pages evicted. params: budget=256 n_sink=4 heavy_ratio=0.5 n_recent=-1 block_size=16 (cache)",
    .flags = KVB_PF_DECODE_ATTN | KVB_PF_PREFILL_MASS | KVB_PF_WHOLE_PAGES,
    .n_state = 1,
    .recent = kvb_recent_heavy,
    .default_pos = KVB_POS_ORIGINAL,
    .defaults = block_defaults,
    .observe = kvb_h2o_observe,
    .select = block_select,
};

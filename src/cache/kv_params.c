/*
 * kv_params.c — the KV configuration (struct kvb_kv_params) and the one
 * sizing rule. Every params struct that makes a cache embeds a kvb_kv_params,
 * and everything that sizes a pool for a sequence (the CLI, batch admission,
 * ppl, needle, the server) asks kvb_kv_seq_bytes: per stream, the policy's
 * peak (kvb_policy_peak_tokens, a vtable slot), one chunk read before
 * eviction, two pages of compaction slack and the recall area, in pages of
 * the configuration's page size, plus the pinned span (kv.keep), which sits
 * on top of the budget. A model's sliding-window layers (kv.layers)
 * count their window instead of the policy's peak, and no recall area.
 * Latent rows (kvb_cache_params.head_dim_v > 0, multi-head latent
 * attention) are sized by kvb_kv_seq_bytes_latent: pages of K rows only.
 */
#include "cache_impl.h"

struct kvb_kv_params kvb_kv_default_params(void) {
    struct kvb_kv_params kv;
    memset(&kv, 0, sizeof kv);
    kv.policy = kvb_policy_baseline_params(); /* full */
    kv.pos_mode = KVB_POS_POLICY_DEFAULT;
    kv.kv_dtype = KVB_DTYPE_F16;
    kv.kv_dtype_v = KVB_DTYPE_AS_K;
    kv.block_size = 16;
    return kv;
}

enum kvb_dtype kvb_kv_v_type(const struct kvb_kv_params *kv) {
    return kv->kv_dtype_v == KVB_DTYPE_AS_K ? kv->kv_dtype : kv->kv_dtype_v;
}

size_t kvb_kv_query_stats_bytes(const struct kvb_kv_params *kv, int32_t n_layer, int32_t n_kv_head, int32_t n_head, int32_t head_dim) {
    const struct kvb_policy_i *pi = kv ? kvb_policy_iface(kv->policy.id) : NULL;
    if (!pi || !(pi->flags & KVB_PF_QUERY_STATS) || n_layer < 1 || n_kv_head < 1 || n_head < n_kv_head || n_head % n_kv_head || head_dim < 1 ||
        kv->n_layers < 0 || kv->n_layers > n_layer)
        return 0;
    const double d = head_dim, G = n_head / n_kv_head; /* as qstat_reserve: (G + 1) blocks of d + d^2 floats a stream */
    const double bytes = (double)(n_layer - kv->n_layers) * n_kv_head * (G + 1) * (d + d * d) * sizeof(float); /* window layers keep none */
    return bytes >= (double)SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

size_t kvb_kv_seq_bytes(const struct kvb_kv_params *kv, int32_t n_layer, int32_t n_kv_head, int32_t head_dim, int64_t n_ctx,
                        int64_t n_prompt, int32_t chunk) {
    return kvb_kv_seq_bytes_latent(kv, n_layer, n_kv_head, head_dim, 0, n_ctx, n_prompt, chunk);
}

size_t kvb_kv_seq_bytes_latent(const struct kvb_kv_params *kv, int32_t n_layer, int32_t n_kv_head, int32_t head_dim, int32_t head_dim_v,
                               int64_t n_ctx, int64_t n_prompt, int32_t chunk) {
    if (!kv || n_layer < 1 || n_kv_head < 1 || head_dim < 1 || head_dim_v < 0 || head_dim_v > head_dim || !kvb_policy_iface(kv->policy.id)) return 0;
    const int64_t B = kv->block_size;
    if (B < 1 || B > 4096 || (B & (B - 1))) return 0;
    if (kv->kv_dtype < KVB_DTYPE_F32 || kv->kv_dtype > KVB_DTYPE_BF16 || kv->kv_dtype_v < KVB_DTYPE_AS_K || kv->kv_dtype_v > KVB_DTYPE_BF16)
        return 0;
    const size_t rk = kvb_dtype_row_bytes(kv->kv_dtype, head_dim), rv = head_dim_v ? 0 : kvb_dtype_row_bytes(kvb_kv_v_type(kv), head_dim);
    if (!rk || (!rv && !head_dim_v)) return 0; /* latent rows (head_dim_v > 0): K rows only, as kvb_cache_page_bytes */
    const size_t page = ((size_t)B * (rk + rv) + 63) & ~(size_t)63; /* as the pool holds a page: 64-byte aligned (pool.c) */
    const bool full = kvb_policy_iface(kv->policy.id)->flags & KVB_PF_NEVER_EVICT;
    const int64_t tokens = KVB_MIN(KVB_MAX(kvb_policy_peak_tokens(&kv->policy, KVB_MIN(n_prompt, (int64_t)1 << 40), KVB_MIN(n_ctx, (int64_t)1 << 40)),
                                           (int64_t)0), (int64_t)1 << 40); /* no overflow below for any argument */
    /* the pinned span (kv.keep) sits on top of the budget: an evicting
     * policy's stream holds it besides its peak (at most the context) */
    const int64_t keep = full || kv->keep < 0 ? 0 : KVB_MIN((int64_t)kv->keep, KVB_MAX(KVB_MIN(n_ctx, (int64_t)1 << 40), (int64_t)0));
    const int64_t c = KVB_MIN((int64_t)KVB_MAX(chunk, 1), KVB_MAX(n_prompt, (int64_t)1)); /* a chunk read before eviction */
    const int64_t area = full ? 0 : KVB_MAX(kv->recall.pages, 0);                        /* taken with the hot pages */
    /* sliding-window layers (kv.layers): W - 1 tokens between steps, the
     * chunk, the slack; no recall area (nothing of theirs goes cold) */
    int32_t n_win = 0;
    double win_pages = 0;
    if (kv->n_layers < 0 || kv->n_layers > n_layer) return 0;
    for (int32_t i = 0; kv->layers && i < kv->n_layers; i++) {
        const struct kvb_kv_layer *o = &kv->layers[i];
        if (o->layer < 0 || o->layer >= n_layer || !kvb_policy_is_layer_window(&o->policy) || o->policy.budget < 1) return 0;
        const int64_t held = KVB_MIN((int64_t)o->policy.budget - 1, KVB_MAX(KVB_MIN(n_ctx, (int64_t)1 << 40), (int64_t)0));
        win_pages += (double)((held + c + B - 1) / B + 2);
        n_win++;
    }
    const double pages = (double)((tokens + keep + c + B - 1) / B + 2 + area) * (double)(n_layer - n_win) + win_pages;
    const double bytes = pages * (double)n_kv_head * (double)page;
    return bytes >= (double)SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

/*
 * registry.c — the policy table, indexed by enum kvb_policy_id, with lookup
 * by name for the CLI, the defaults every policy starts from, the parameter
 * checks and each policy's peak tokens for the sizing rule.
 */
#include "policy.h"

#include <math.h>

static const struct kvb_policy_i *const g_table[KVB_POLICY_COUNT] = {
    [KVB_POLICY_FULL] = &kvb_policy_full,
    [KVB_POLICY_WINDOW] = &kvb_policy_window,
    [KVB_POLICY_STREAMING] = &kvb_policy_streaming,
    [KVB_POLICY_H2O] = &kvb_policy_h2o,
    [KVB_POLICY_TOVA] = &kvb_policy_tova,
    [KVB_POLICY_SCISSORHANDS] = &kvb_policy_scissorhands,
    [KVB_POLICY_SNAPKV] = &kvb_policy_snapkv,
    [KVB_POLICY_PYRAMIDKV] = &kvb_policy_pyramidkv,
    [KVB_POLICY_ADAKV] = &kvb_policy_adakv,
    [KVB_POLICY_KNORM] = &kvb_policy_knorm,
    [KVB_POLICY_BLOCK_H2O] = &kvb_policy_block_h2o,
    [KVB_POLICY_LMINFINITE] = &kvb_policy_lminfinite,
    [KVB_POLICY_KEYDIFF] = &kvb_policy_keydiff,
    [KVB_POLICY_EXPECTED_ATTENTION] = &kvb_policy_expected_attention,
    [KVB_POLICY_KVZIP] = &kvb_policy_kvzip,
};

const struct kvb_policy_i *kvb_policy_iface(enum kvb_policy_id id) {
    return id >= 0 && id < KVB_POLICY_COUNT ? g_table[id] : NULL;
}

struct kvb_policy_params kvb_policy_default_params(enum kvb_policy_id id) {
    struct kvb_policy_params p;
    memset(&p, 0, sizeof p);
    p.id = id;
    p.budget = id == KVB_POLICY_FULL ? 0 : 256;
    p.budget_frac = 0;
    p.n_sink = 0;
    p.n_recent = -1;
    p.heavy_ratio = 0.5f;
    p.obs_window = 32;
    p.pool_kernel = 7;
    p.pyramid_beta = 20.0f;
    p.ada_floor = 0.2f;
    p.history = 16;
    p.threshold = 8;
    p.pool_mode = KVB_POOL_MAX;
    p.decode_budget = 0;
    p.prefill_budget = 0;
    p.tova_scope = KVB_TOVA_LAYER;
    const struct kvb_policy_i *pi = kvb_policy_iface(id);
    if (pi && pi->defaults) pi->defaults(&p);
    return p;
}

struct kvb_policy_params kvb_policy_baseline_params(void) { return kvb_policy_default_params(KVB_POLICY_FULL); }

struct kvb_policy_params kvb_policy_layer_window(int32_t window) {
    struct kvb_policy_params p = kvb_policy_default_params(KVB_POLICY_WINDOW);
    p.n_sink = 0;
    p.budget = window;
    return p;
}

bool kvb_policy_is_layer_window(const struct kvb_policy_params *p) { return p->id == KVB_POLICY_WINDOW && p->n_sink == 0; }

const char *kvb_policy_name(enum kvb_policy_id id) {
    const struct kvb_policy_i *pi = kvb_policy_iface(id);
    return pi ? pi->name : "?";
}

kvb_status kvb_policy_from_name(const char *name, enum kvb_policy_id *out) {
    for (int i = 0; i < KVB_POLICY_COUNT; i++)
        if (name && strcmp(name, g_table[i]->name) == 0) {
            *out = (enum kvb_policy_id)i;
            return KVB_OK;
        }
    return kvb_fail(KVB_ERR_INVALID, "unknown policy '%s' (see 'kvbound policies')", name ? name : "(null)");
}

const char *kvb_policy_describe(enum kvb_policy_id id) {
    const struct kvb_policy_i *pi = kvb_policy_iface(id);
    return pi ? pi->describe : "?";
}

bool kvb_policy_compresses(enum kvb_policy_id id) {
    const struct kvb_policy_i *pi = kvb_policy_iface(id);
    return pi && (pi->flags & KVB_PF_COMPRESS);
}

bool kvb_policy_params_compress(const struct kvb_policy_params *p) {
    const struct kvb_policy_i *pi = p ? kvb_policy_iface(p->id) : NULL;
    return pi && ((pi->flags & KVB_PF_COMPRESS) || ((pi->flags & KVB_PF_COMPRESS_OPTIONAL) && p->compress_prompt >= 1));
}

bool kvb_policy_needs_attention(enum kvb_policy_id id) {
    const struct kvb_policy_i *pi = kvb_policy_iface(id);
    return pi && (pi->flags & KVB_PF_DECODE_ATTN);
}

kvb_status kvb_policy_validate(const struct kvb_policy_params *pp) {
    if (!pp) return kvb_fail(KVB_ERR_INVALID, "policy: params must not be NULL");
    const struct kvb_policy_i *pi = kvb_policy_iface(pp->id);
    if (!pi) return kvb_fail(KVB_ERR_INVALID, "policy: unknown policy id %d", (int)pp->id);
    const char *pn = pi->name;
    if (pp->n_sink < 0 || pp->n_sink > (1 << 20)) return kvb_fail(KVB_ERR_INVALID, "policy %s: n_sink must be in 0..1048576, got %d", pn, (int)pp->n_sink);
    if (pp->n_recent < -1) return kvb_fail(KVB_ERR_INVALID, "policy %s: n_recent must be >= -1, got %d", pn, (int)pp->n_recent);
    if (pp->budget < 0) return kvb_fail(KVB_ERR_INVALID, "policy %s: budget must be >= 0, got %d", pn, (int)pp->budget);
    if (!(pp->budget_frac >= 0.0f && pp->budget_frac <= 1.0f)) return kvb_fail(KVB_ERR_INVALID, "policy %s: budget_frac must be in [0, 1], got %g", pn, (double)pp->budget_frac);
    if (!(pi->flags & KVB_PF_NEVER_EVICT)) {
        if (pp->budget == 0 && pp->budget_frac == 0.0f)
            return kvb_fail(KVB_ERR_INVALID, "policy %s: needs a budget (tokens or fraction of the prompt)", pn);
        if (pp->budget && pp->budget <= pp->n_sink)
            return kvb_fail(KVB_ERR_INVALID, "policy %s: budget (%d) must exceed n_sink (%d)", pn, (int)pp->budget, (int)pp->n_sink);
    }
    if (!(pp->heavy_ratio >= 0.0f && pp->heavy_ratio <= 1.0f)) return kvb_fail(KVB_ERR_INVALID, "policy %s: heavy_ratio must be in [0, 1], got %g", pn, (double)pp->heavy_ratio);
    if (pp->obs_window < 1 || pp->obs_window > (1 << 16)) return kvb_fail(KVB_ERR_INVALID, "policy %s: obs_window must be in 1..65536, got %d", pn, (int)pp->obs_window);
    if (pp->pool_kernel < 1 || pp->pool_kernel > 255 || !(pp->pool_kernel & 1)) return kvb_fail(KVB_ERR_INVALID, "policy %s: pool_kernel must be odd and in 1..255, got %d", pn, (int)pp->pool_kernel);
    if (pp->pool_mode != KVB_POOL_MAX && pp->pool_mode != KVB_POOL_AVG) return kvb_fail(KVB_ERR_INVALID, "policy %s: pool_mode must be max (0) or avg (1), got %d", pn, (int)pp->pool_mode);
    if (pp->tova_scope != KVB_TOVA_LAYER && pp->tova_scope != KVB_TOVA_HEAD) return kvb_fail(KVB_ERR_INVALID, "policy %s: tova_scope must be layer (0) or head (1), got %d", pn, (int)pp->tova_scope);
    if (pp->decode_budget < 0) return kvb_fail(KVB_ERR_INVALID, "policy %s: decode_budget must be >= 0, got %d", pn, (int)pp->decode_budget);
    if (pp->prefill_budget < 0 || (pp->prefill_budget && pp->prefill_budget <= pp->n_sink))
        return kvb_fail(KVB_ERR_INVALID, "policy %s: prefill_budget must be 0 (no eviction while a prompt is read) or exceed n_sink (%d), got %d", pn, (int)pp->n_sink, (int)pp->prefill_budget);
    if (pp->compress_prompt < 0 || pp->compress_prompt > 2)
        return kvb_fail(KVB_ERR_INVALID, "policy %s: compress_prompt must be 0, 1 (uniform) or 2 (adakv), got %d", pn, (int)pp->compress_prompt);
    if (pp->compress_prompt && !(pi->flags & KVB_PF_COMPRESS_OPTIONAL))
        return kvb_fail(KVB_ERR_INVALID, "policy %s: compress_prompt applies only to expected-attention (the snapkv family and kvzip always compress)", pn);
    if (pp->compress_prompt && pp->decode_budget > 0)
        return kvb_fail(KVB_ERR_INVALID, "policy %s: decode_budget does not apply with compress_prompt (every decode step evicts to the budget), got %d", pn,
                        (int)pp->decode_budget);
    if (!(pp->ada_floor >= 0.0f && pp->ada_floor <= 1.0f)) /* adakv's, and expected-attention's with compress_prompt 2 */
        return kvb_fail(KVB_ERR_INVALID, "policy %s: ada_floor must be in [0, 1], got %g", pn, (double)pp->ada_floor);
    if (pp->budget_frac > 0 && !kvb_policy_params_compress(pp))
        return kvb_fail(KVB_ERR_INVALID, "policy %s: budget_frac applies only to prompt compression (snapkv, pyramidkv, adakv, kvzip; expected-attention with compress_prompt)", pn);
    return pi->validate ? pi->validate(pp) : KVB_OK;
}

int64_t kvb_policy_peak_tokens(const struct kvb_policy_params *p, int64_t n_prompt, int64_t n_ctx) {
    const struct kvb_policy_i *pi = kvb_policy_iface(p->id);
    if (!pi) return 0;
    if (pi->flags & KVB_PF_NEVER_EVICT) return KVB_MAX(n_ctx, (int64_t)0);
    return pi->peak_tokens ? pi->peak_tokens(p, KVB_MAX(n_prompt, (int64_t)0)) : (int64_t)p->budget;
}

struct kvb_policy kvb_policy_make(const struct kvb_policy_params *params, int32_t block_size) {
    struct kvb_policy p;
    memset(&p, 0, sizeof p);
    p.iface = kvb_policy_iface(params->id);
    p.params = *params;
    p.block_size = block_size;
    p.flags = p.iface ? p.iface->flags | (kvb_policy_params_compress(params) ? KVB_PF_COMPRESS : 0u) : 0u;
    /* prefill evidence: the policy says how many of a chunk's last queries (0 = all) */
    p.obs_last = p.iface && p.iface->prefill_queries ? p.iface->prefill_queries(params) : 0;
    return p;
}

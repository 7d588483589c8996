/*
 * registry.c — the policy table, indexed by enum kvb_policy_id, with lookup
 * by name for the CLI and the defaults every policy starts from.
 */
#include "policy.h"

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

bool kvb_policy_needs_attention(enum kvb_policy_id id) {
    const struct kvb_policy_i *pi = kvb_policy_iface(id);
    return pi && (pi->flags & KVB_PF_DECODE_ATTN);
}

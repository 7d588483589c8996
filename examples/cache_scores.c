/*
 * cache_scores.c — the cache and a policy driven by your own attention
 * scores, no model: a one-layer, one-head H2O cache of 6 tokens with 2
 * sinks, fed the scores of "<s> System: import PostgresDB as db def
 * query():" one token at a time (the H2O paper's example). What it keeps:
 * "<s> System: PostgresDB db def query():".
 *
 *   cc cache_scores.c $(pkg-config --cflags --libs kvbound) -o cache_scores
 */
#include <kvbound.h>

#include <stdio.h>

int main(void) {
    static const char *const words[8] = {"<s>", "System:", "import", "PostgresDB", "as", "db", "def", "query():"};
    static const float scores[8] = {0.95f, 0.85f, 0.10f, 0.90f, 0.05f, 0.20f, 0.15f, 0.75f};
    struct kvb_cache_params cp = kvb_cache_default_params(); /* 1 layer, 1 KV head */
    cp.head_dim = 4;
    cp.kv.block_size = 4;
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_H2O);
    cp.kv.policy.budget = 6;
    cp.kv.policy.n_sink = 2;
    cp.pool_bytes = 1 << 20;
    struct kvb_cache *cache;
    if (kvb_cache_init(NULL, &cp, &cache) != KVB_OK) {
        fprintf(stderr, "%s\n", kvb_last_error());
        return 1;
    }
    for (int t = 0; t < 8; t++) {
        /* bookkeeping only: no K/V rows; the token's score arrives with it */
        if (kvb_cache_append(cache, 0, NULL, NULL) != KVB_OK) return 1;
        int32_t n = kvb_cache_n_slots(cache, 0, 0);
        float w[8] = {0};
        w[n - 1] = scores[t];
        if (kvb_cache_observe(cache, 0, 0, w, n) != KVB_OK) return 1;
        kvb_cache_evict(cache, 0);
    }
    printf("kept:");
    for (int32_t j = 0; j < kvb_cache_n_slots(cache, 0, 0); j++) {
        struct kvb_slot_info si;
        kvb_cache_slot_info(cache, 0, 0, j, &si);
        printf(" %s", words[si.pos_original]);
    }
    printf("\n");
    kvb_cache_free(cache);
    return 0;
}

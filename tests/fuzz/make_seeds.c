/* make_seeds.c — writes small valid cache images (every policy) as a fuzzing
 * seed corpus: make_seeds DIR */
#include "kvbound.h"

#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    for (int id = 0; id < KVB_POLICY_COUNT; id++) {
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.n_layer = 2; cp.n_kv_head = 2; cp.head_dim = 4; cp.block_size = 4;
        cp.dtype = id & 1 ? KVB_DTYPE_F16 : KVB_DTYPE_F32;
        cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, 4, 10000.0f, 1.0f, NULL};
        cp.policy = kvb_policy_default_params((enum kvb_policy_id)id);
        if (id) cp.policy.budget = 6;
        if (cp.policy.n_sink >= 6) cp.policy.n_sink = 2;
        cp.policy.obs_window = 2;
        cp.pool_bytes = 1 << 20;
        struct kvb_cache *c;
        if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) return 1;
        float q[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8}, k[2 * 4] = {1, 0, 1, 0, 0, 1, 0, 1}, v[2 * 4] = {1, 1, 1, 1, 2, 2, 2, 2}, o[8];
        for (int t = 0; t < 9; t++)
            for (int l = 0; l < 2; l++) {
                k[0] = (float)t;
                kvb_cache_decode(c, l, q, 2, k, v, o, NULL);
            }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.kvb", argv[1], kvb_policy_name((enum kvb_policy_id)id));
        if (kvb_cache_save_file(c, path) != KVB_OK) return 1;
        kvb_cache_free(c);
    }
    return 0;
}

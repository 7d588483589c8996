/*
 * test_positions.c — the position scheme (keys stored rotated at their
 * original position, queries rotated once per run of equal delta) equals
 * re-applying RoPE from scratch at the cache positions, within 1e-5, at every
 * decode step and for every prefill row; for ORIGINAL and CONTIGUOUS modes,
 * both RoPE pairings, scaling, and policies that leave one gap (streaming) or
 * many (h2o, tova with contiguous positions); and CAPPED mode (LM-Infinite),
 * where a key farther than the cap is seen at exactly the cap, against keys
 * re-rotated at max(p_j, p_q - cap).
 */
#include "cache_helpers.h"

enum { L = 2, HK = 2, G = 2, D = 16, MAXT = 600 };

struct history { float k[L][MAXT][HK][D], v[L][MAXT][HK][D]; };

static int run_case(enum kvb_policy_id pid, enum kvb_pos_mode pm, enum kvb_rope_type rt, int budget, int steps,
                    int prefill, unsigned long long seed, const float *ff, int cap) {
    static struct history hist;
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = L; cp.n_kv_head = HK; cp.head_dim = D; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 4;
    cp.kv.pos_mode = pm;
    cp.kv.max_distance = cap;
    cp.rope = (struct kvb_rope){rt, D, 10000.0f, ff ? 0.5f : 1.0f, ff};
    cp.kv.policy = kvb_policy_default_params(pid);
    cp.kv.policy.budget = budget;
    cp.pool_bytes = 1 << 22;
    struct kvb_cache *c;
    if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) { printf("  init: %s\n", kvb_last_error()); return 1; }
    struct kvb_cache_params got;
    kvb_cache_get_params(c, &got);
    const struct kvb_rope *rope = &got.rope;
    const bool contiguous = kvb_cache_pos_mode(c) == KVB_POS_CONTIGUOUS;
    unsigned long long rs = seed;
    static float q[MAXT][HK * G][D], out[MAXT][HK * G][D];
    int fails = 0;
    /* prefill */
    for (int l = 0; l < L; l++) {
        for (int t = 0; t < prefill; t++)
            for (int h = 0; h < HK; h++)
                for (int i = 0; i < D; i++) {
                    hist.k[l][t][h][i] = t_randf(&rs);
                    hist.v[l][t][h][i] = t_randf(&rs);
                }
        for (int t = 0; t < prefill; t++)
            for (int h = 0; h < HK * G; h++)
                for (int i = 0; i < D; i++) q[t][h][i] = t_randf(&rs);
        static float kk[MAXT][HK][D], vv[MAXT][HK][D];
        memcpy(kk, hist.k[l], sizeof(float) * (size_t)prefill * HK * D);
        memcpy(vv, hist.v[l], sizeof(float) * (size_t)prefill * HK * D);
        if (kvb_cache_prefill(c, l, prefill, &q[0][0][0], HK * G, &kk[0][0][0], &vv[0][0][0], &out[0][0][0], NULL) != KVB_OK) {
            printf("  prefill: %s\n", kvb_last_error());
            return 1;
        }
        for (int t = 0; t < prefill && !fails; t++)
            for (int hq = 0; hq < HK * G; hq++) {
                int h = hq / G;
                const float *kp[MAXT], *vp[MAXT];
                long long kpos[MAXT];
                for (int j = 0; j <= t; j++) {
                    kp[j] = hist.k[l][j][h]; vp[j] = hist.v[l][j][h];
                    kpos[j] = cap && t - j > cap ? t - cap : j;
                }
                double ref[D];
                ref_attend(rope, D, q[t][hq], t, kp, vp, kpos, t + 1, ref);
                for (int i = 0; i < D; i++)
                    if (fabs(out[t][hq][i] - ref[i]) > 1e-5) {
                        printf("  prefill l%d t%d head %d dim %d: %.8f vs %.8f\n", l, t, hq, i, (double)out[t][hq][i], ref[i]);
                        fails++;
                        break;
                    }
            }
    }
    /* decode */
    for (int step = 0; step < steps && !fails; step++) {
        for (int l = 0; l < L && !fails; l++) {
            long long t = kvb_cache_n_past(c, l);
            /* retained set before this token */
            long long kpos_orig[HK][MAXT];
            int nret[HK];
            for (int h = 0; h < HK; h++) {
                nret[h] = kvb_cache_n_slots(c, l, h);
                for (int j = 0; j < nret[h]; j++) {
                    struct kvb_slot_info si;
                    kvb_cache_slot_info(c, l, h, j, &si);
                    kpos_orig[h][j] = si.pos_original;
                }
                kpos_orig[h][nret[h]] = t;
            }
            float kk[HK][D], vv[HK][D], qq[HK * G][D], oo[HK * G][D];
            for (int h = 0; h < HK; h++)
                for (int i = 0; i < D; i++) {
                    kk[h][i] = hist.k[l][t][h][i] = t_randf(&rs);
                    vv[h][i] = hist.v[l][t][h][i] = t_randf(&rs);
                }
            for (int h = 0; h < HK * G; h++)
                for (int i = 0; i < D; i++) qq[h][i] = t_randf(&rs);
            if (kvb_cache_decode(c, l, &qq[0][0], HK * G, &kk[0][0], &vv[0][0], &oo[0][0], NULL) != KVB_OK) {
                printf("  decode: %s\n", kvb_last_error());
                return 1;
            }
            for (int hq = 0; hq < HK * G && !fails; hq++) {
                int h = hq / G, n = nret[h] + 1;
                const float *kp[MAXT], *vp[MAXT];
                long long kpos[MAXT];
                for (int j = 0; j < n; j++) {
                    kp[j] = hist.k[l][kpos_orig[h][j]][h];
                    vp[j] = hist.v[l][kpos_orig[h][j]][h];
                    kpos[j] = contiguous ? j : kpos_orig[h][j];
                    if (cap && t - kpos[j] > cap) kpos[j] = t - cap;
                }
                double ref[D];
                ref_attend(rope, D, qq[hq], contiguous ? n - 1 : t, kp, vp, kpos, n, ref);
                for (int i = 0; i < D; i++)
                    if (fabs(oo[hq][i] - ref[i]) > 1e-5) {
                        printf("  %s step %d l%d head %d dim %d: %.8f vs %.8f\n", kvb_policy_name(pid), step, l, hq, i, (double)oo[hq][i], ref[i]);
                        fails++;
                        break;
                    }
            }
        }
    }
    kvb_cache_free(c);
    return fails;
}

TEST(streaming_contiguous_two_runs) {
    CHECK(run_case(KVB_POLICY_STREAMING, KVB_POS_CONTIGUOUS, KVB_ROPE_INTERLEAVED, 12, 300, 20, 1, NULL, 0) == 0);
    CHECK(run_case(KVB_POLICY_STREAMING, KVB_POS_CONTIGUOUS, KVB_ROPE_NEOX, 9, 200, 3, 2, NULL, 0) == 0);
}

TEST(scattered_evictions_contiguous_many_runs) {
    CHECK(run_case(KVB_POLICY_H2O, KVB_POS_CONTIGUOUS, KVB_ROPE_INTERLEAVED, 16, 250, 30, 3, NULL, 0) == 0);
    CHECK(run_case(KVB_POLICY_TOVA, KVB_POS_CONTIGUOUS, KVB_ROPE_NEOX, 10, 250, 12, 4, NULL, 0) == 0);
    CHECK(run_case(KVB_POLICY_BLOCK_H2O, KVB_POS_CONTIGUOUS, KVB_ROPE_INTERLEAVED, 20, 200, 25, 5, NULL, 0) == 0);
}

TEST(original_positions) {
    CHECK(run_case(KVB_POLICY_H2O, KVB_POS_ORIGINAL, KVB_ROPE_INTERLEAVED, 16, 200, 30, 6, NULL, 0) == 0);
    CHECK(run_case(KVB_POLICY_STREAMING, KVB_POS_ORIGINAL, KVB_ROPE_NEOX, 12, 200, 5, 7, NULL, 0) == 0);
    CHECK(run_case(KVB_POLICY_FULL, KVB_POS_ORIGINAL, KVB_ROPE_INTERLEAVED, 0, 120, 40, 8, NULL, 0) == 0);
}

TEST(capped_distances_lminfinite) {
    /* lminfinite: 4 sinks far behind the window; prefill longer than the cap */
    struct kvb_policy_params d = kvb_policy_default_params(KVB_POLICY_LMINFINITE);
    CHECK_EQ_INT(d.n_sink, 10);
    CHECK(run_case(KVB_POLICY_LMINFINITE, KVB_POS_POLICY_DEFAULT, KVB_ROPE_INTERLEAVED, 24, 300, 60, 11, NULL, 16) == 0);
    CHECK(run_case(KVB_POLICY_LMINFINITE, KVB_POS_CAPPED, KVB_ROPE_NEOX, 30, 200, 45, 12, NULL, 20) == 0);
    /* any policy with positions capped: h2o keeps scattered old tokens */
    CHECK(run_case(KVB_POLICY_H2O, KVB_POS_CAPPED, KVB_ROPE_INTERLEAVED, 16, 200, 30, 13, NULL, 10) == 0);
    CHECK(run_case(KVB_POLICY_FULL, KVB_POS_CAPPED, KVB_ROPE_NEOX, 0, 60, 40, 14, NULL, 25) == 0);
}

TEST(scaled_rope_with_freq_factors) {
    float ff[D / 2];
    for (int i = 0; i < D / 2; i++) ff[i] = 1.0f + (float)i * 0.5f;
    CHECK(run_case(KVB_POLICY_STREAMING, KVB_POS_CONTIGUOUS, KVB_ROPE_INTERLEAVED, 12, 100, 10, 9, ff, 0) == 0);
    CHECK(run_case(KVB_POLICY_KNORM, KVB_POS_CONTIGUOUS, KVB_ROPE_NEOX, 12, 100, 10, 10, ff, 0) == 0);
}

/* The attention weights a policy receives at decode (TOVA keeps exactly the
 * latest row as its score) equal the mean over the group's query heads of a
 * naive softmax, and sum to one. */
TEST(decode_weights_fed_to_policy) {
    for (int dt = 0; dt < 2; dt++) {
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = D; cp.kv.kv_dtype = dt ? KVB_DTYPE_F16 : KVB_DTYPE_F32; cp.kv.block_size = 4;
        cp.rope = (struct kvb_rope){KVB_ROPE_INTERLEAVED, D, 10000.0f, 1.0f, NULL};
        cp.kv.policy = kvb_policy_default_params(KVB_POLICY_TOVA);
        cp.kv.policy.budget = 1000;
        struct kvb_cache *c;
        CHECK_OK(kvb_cache_init(NULL, &cp, &c));
        struct kvb_cache_params got;
        kvb_cache_get_params(c, &got);
        const struct kvb_rope *rope = &got.rope;
        static float ks[200][D], vs[200][D];
        unsigned long long rs = 21;
        for (int t = 0; t < 150; t++) {
            float q[3][D], o[3][D];
            for (int i = 0; i < D; i++) { ks[t][i] = t_randf(&rs); vs[t][i] = t_randf(&rs); }
            for (int g = 0; g < 3; g++) for (int i = 0; i < D; i++) q[g][i] = t_randf(&rs) * 2;
            CHECK_OK(kvb_cache_decode(c, 0, &q[0][0], 3, ks[t], vs[t], &o[0][0], NULL));
            /* reference weights from the rows as stored (f16-rounded keys) */
            int n = t + 1;
            double w[200] = {0}, sum = 0;
            for (int g = 0; g < 3; g++) {
                double qr[D], s[200], mx = -1e300, z = 0;
                ref_rope(rope, q[g], D, t, qr);
                for (int j = 0; j < n; j++) {
                    float kst[D];
                    CHECK_OK(kvb_cache_read_slot(c, 0, 0, j, kst, NULL)); /* stored: rotated at j */
                    s[j] = 0;
                    for (int i = 0; i < D; i++) s[j] += qr[i] * kst[i];
                    s[j] /= sqrt((double)D);
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j < n; j++) { s[j] = exp(s[j] - mx); z += s[j]; }
                for (int j = 0; j < n; j++) w[j] += s[j] / z / 3;
            }
            for (int j = 0; j < n; j++) {
                struct kvb_slot_info si;
                CHECK_OK(kvb_cache_slot_info(c, 0, 0, j, &si));
                sum += si.score;
                if (fabs(si.score - w[j]) > 1e-5) FAILF("%s step %d slot %d: weight %.8f vs %.8f", kvb_dtype_name(cp.kv.kv_dtype), t, j, (double)si.score, w[j]);
            }
            if (fabs(sum - 1.0) > 1e-5) FAILF("weights sum to %.8f", sum);
        }
        kvb_cache_free(c);
    }
}

int main(void) {
    RUN(decode_weights_fed_to_policy);
    RUN(streaming_contiguous_two_runs);
    RUN(scattered_evictions_contiguous_many_runs);
    RUN(original_positions);
    RUN(capped_distances_lminfinite);
    RUN(scaled_rope_with_freq_factors);
    return test_summary();
}

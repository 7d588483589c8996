/*
 * deltanet.c — the scalar reference of the Gated DeltaNet kernels
 * (deltanet.h) and the helpers every family
 * shares (the convolution's history, SiLU over rows). The entry points
 * (deltanet.h's static inlines) and kvb_gdn_kernels() go through dispatch.c,
 * which calls into this file, never the other way.
 *
 * What llama.cpp does around these kernels (/work/llama-peer-g: ggml-cpu
 * ops.cpp ggml_compute_forward_gated_delta_net, _l2_norm, _ssm_conv;
 * src/models/qwen35.cpp, delta-net-base.cpp), which the forward pass
 * must reproduce:
 *   - l2 norm (ggml_l2_norm(x, eps), eps = the model's rms_norm_eps):
 *     sum = sum_i x_i^2 accumulated in double from float products, then
 *     y = x * (1.0f / fmaxf(sqrtf((float)sum), eps)): the eps bounds the
 *     norm from below (max, not sqrt(sum + eps)).
 *   - heads when Hv > Hk: v head h reads q/k head h % Hk (tiled, not
 *     h / (Hv/Hk)). ggml_repeat_4d tiles the Hk heads Hv/Hk times
 *     (qwen35.cpp, when the fused op is off) and the fused op reads
 *     iq1 = iv1 % neq1, ik1 = iv1 % nek1; both agree.
 *   - the fused op scales q inside (o = (S^T q) / sqrt(Dv)), the unfused
 *     graphs scale q first (ggml_scale(q, 1/sqrt(S_k))); here q comes
 *     already scaled (the spec's form). Per token: S *= exp(g); kv = S^T k;
 *     d = beta (v - kv); S += k d^T; o = S^T q. ggml keeps each head's
 *     state transposed (row j of its S_v x S_v block is v column j); ours
 *     is Dk rows of Dv (row i = k index i): the same numbers, another order.
 *   - ssm_conv: y[t][c] = sum_{j<K} w[c][j] * xe[t+j][c] in float, taps in
 *     order, with xe = [conv state (K-1 rows); the new rows]; SiLU comes
 *     after (ggml_silu); the conv state becomes xe's last K-1 rows.
 *   - prompts: chunks of 64 tokens (CS = 64 for a scalar gate), as here.
 *
 * Operation order (the law the x86 families follow, see deltanet.h):
 * every sum is a sequential fmaf chain starting from 0; this file is built
 * with -ffp-contract=off so no other product is fused. Recurrent, per
 * token and column j: pass 1 over rows i: s = S[i][j] * e^g, kv = fmaf(s,
 * k_i, kv); d = beta (v_j - kv); pass 2: s = fmaf(k_i, d, S[i][j]), o =
 * fmaf(s, q_i, o). Chunked: see chunk_ref.
 */
#include "deltanet.h"
#include "ops.h"

#include <math.h>
#include <string.h>

#define COLS 64 /* the reference's column tile: its kv, d and o live on the stack */

static void recurrent_cols(float *const *S, int32_t Dk, int32_t j0, int32_t nj, int32_t T, const float *q, int64_t ldq, const float *k,
                           int64_t ldk, const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o, int64_t ldo) {
    float kv[COLS], d[COLS], ov[COLS];
    for (int32_t t = 0; t < T; t++) {
        const float *qt = q + t * ldq, *kt = k + t * ldk, *vt = v + t * ldv + j0;
        const float e = expf(g[t * ldgb]), b = beta[t * ldgb];
        for (int32_t j = 0; j < nj; j++) kv[j] = 0.0f;
        for (int32_t i = 0; i < Dk; i++) {
            float *row = S[i] + j0;
            const float ki = kt[i];
            for (int32_t j = 0; j < nj; j++) {
                const float s = row[j] * e;
                row[j] = s;
                kv[j] = fmaf(s, ki, kv[j]);
            }
        }
        for (int32_t j = 0; j < nj; j++) {
            d[j] = b * (vt[j] - kv[j]);
            ov[j] = 0.0f;
        }
        for (int32_t i = 0; i < Dk; i++) {
            float *row = S[i] + j0;
            const float ki = kt[i], qi = qt[i];
            for (int32_t j = 0; j < nj; j++) {
                const float s = fmaf(ki, d[j], row[j]);
                row[j] = s;
                ov[j] = fmaf(s, qi, ov[j]);
            }
        }
        memcpy(o + t * ldo + j0, ov, (size_t)nj * sizeof(float));
    }
}

static void recurrent_ref(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k, int64_t ldk,
                          const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o, int64_t ldo) {
    for (int32_t j0 = 0; j0 < Dv; j0 += COLS)
        recurrent_cols(S, Dk, j0, Dv - j0 < COLS ? Dv - j0 : COLS, T, q, ldq, k, ldk, v, ldv, g, beta, ldgb, o, ldo);
}

size_t kvb_gdn_scratch_floats(int32_t Dk, int32_t Dv) {
    const size_t N = KVB_GDN_CHUNK;
    return 4 * N + 2 * N * N + N * ((size_t)Dk + (size_t)Dv);
}

/* One chunk of L <= KVB_GDN_CHUNK tokens. Scratch (N = KVB_GDN_CHUNK):
 * G, gam, cdec (N each, then N spare), nA and Qd (N x N, row t at t*N),
 * Kt (Dk x N: the x86 families' transposed keys; unused here), D (N x Dv).
 *   G[t] = g_0 + ... + g_t (in order), gam[t] = expf(G[t]),
 *   cdec[s] = expf(G[L-1] - G[s]); with e = expf(G[t] - G[s]) and the
 *   chains kk = k_t.k_s, qk = q_t.k_s over i in order:
 *   Qd[t][s] = e * qk (s <= t), nA[t][s] = -((beta_t * e) * kk) (s < t).
 *   D[t][j] = beta_t * (v_t[j] - gam[t] * kv), o_t[j] = gam[t] * ov, with
 *     kv, ov the chains over i of fmaf(k_t[i], S[i][j], .), fmaf(q_t[i], S[i][j], .);
 *   then for t in order: D[t][j] = fmaf(nA[t][s], D[s][j], D[t][j]) for s < t in order,
 *     o_t[j] = fmaf(Qd[t][s], D[s][j], o_t[j]) for s <= t in order;
 *   S[i][j] = S[i][j] * gam[L-1], then fmaf(cdec[s] * k_s[i], D[s][j], .) for s in order. */
static void chunk_ref(float *const *S, int32_t Dk, int32_t Dv, int32_t L, const float *q, int64_t ldq, const float *k, int64_t ldk,
                      const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o, int64_t ldo, float *scratch) {
    enum { N = KVB_GDN_CHUNK };
    float *G = scratch, *gam = G + N, *cdec = gam + N, *nA = cdec + 2 * N, *Qd = nA + N * N, *D = Qd + N * N + (size_t)Dk * N;
    kvb_gdn_chunk_decays(g, ldgb, L, G, gam, cdec);
    for (int32_t t = 0; t < L; t++) {
        const float *qt = q + t * ldq, *kt = k + t * ldk, bt = beta[t * ldgb];
        for (int32_t s = 0; s <= t; s++) {
            const float *ks = k + s * ldk;
            float kk = 0.0f, qk = 0.0f;
            for (int32_t i = 0; i < Dk; i++) {
                kk = fmaf(kt[i], ks[i], kk);
                qk = fmaf(qt[i], ks[i], qk);
            }
            const float e = expf(G[t] - G[s]);
            Qd[t * N + s] = e * qk;
            if (s < t) nA[t * N + s] = -((bt * e) * kk);
        }
    }
    for (int32_t t = 0; t < L; t++) {
        const float *qt = q + t * ldq, *kt = k + t * ldk, *vt = v + t * ldv, bt = beta[t * ldgb];
        float *ot = o + t * ldo, *Dt = D + (size_t)t * Dv; /* the chains kv, ov accumulate in Dt, ot */
        for (int32_t j = 0; j < Dv; j++) Dt[j] = ot[j] = 0.0f;
        for (int32_t i = 0; i < Dk; i++) {
            const float *row = S[i];
            for (int32_t j = 0; j < Dv; j++) {
                Dt[j] = fmaf(kt[i], row[j], Dt[j]);
                ot[j] = fmaf(qt[i], row[j], ot[j]);
            }
        }
        for (int32_t j = 0; j < Dv; j++) {
            Dt[j] = bt * (vt[j] - gam[t] * Dt[j]);
            ot[j] = gam[t] * ot[j];
        }
    }
    for (int32_t t = 0; t < L; t++) {
        float *ot = o + t * ldo, *Dt = D + (size_t)t * Dv;
        for (int32_t s = 0; s < t; s++)
            for (int32_t j = 0; j < Dv; j++) Dt[j] = fmaf(nA[t * N + s], D[(size_t)s * Dv + j], Dt[j]);
        for (int32_t s = 0; s <= t; s++)
            for (int32_t j = 0; j < Dv; j++) ot[j] = fmaf(Qd[t * N + s], D[(size_t)s * Dv + j], ot[j]);
    }
    for (int32_t i = 0; i < Dk; i++) {
        float *row = S[i];
        for (int32_t j = 0; j < Dv; j++) row[j] = row[j] * gam[L - 1];
        for (int32_t s = 0; s < L; s++) {
            const float c = cdec[s] * k[s * ldk + i];
            for (int32_t j = 0; j < Dv; j++) row[j] = fmaf(c, D[(size_t)s * Dv + j], row[j]);
        }
    }
}

static void chunked_ref(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k, int64_t ldk,
                        const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o, int64_t ldo, float *scratch) {
    for (int32_t t0 = 0; t0 < T; t0 += KVB_GDN_CHUNK)
        chunk_ref(S, Dk, Dv, T - t0 < KVB_GDN_CHUNK ? T - t0 : KVB_GDN_CHUNK, q + t0 * ldq, ldq, k + t0 * ldk, ldk, v + t0 * ldv, ldv,
                  g + t0 * ldgb, beta + t0 * ldgb, ldgb, o + t0 * ldo, ldo, scratch);
}

void kvb_ssm_conv_hist(float *hist, int32_t C, int32_t K, const float *x, int64_t ldx, int32_t T) {
    const int32_t H = K - 1;
    if (H <= 0 || T <= 0) return;
    if (T < H) memmove(hist, hist + (size_t)T * C, (size_t)(H - T) * C * sizeof(float));
    for (int32_t r = T < H ? H - T : 0; r < H; r++) memcpy(hist + (size_t)r * C, x + (T - H + r) * ldx, (size_t)C * sizeof(float));
}

void kvb_gdn_silu_rows(void (*vexp)(float *, int32_t), float *y, int64_t ldy, int32_t C, int32_t T) {
    float e[256];
    for (int32_t t = 0; t < T; t++)
        for (int32_t c0 = 0; c0 < C; c0 += 256) {
            float *yc = y + t * ldy + c0;
            const int32_t n = C - c0 < 256 ? C - c0 : 256;
            for (int32_t c = 0; c < n; c++) e[c] = -yc[c];
            vexp(e, n);
            for (int32_t c = 0; c < n; c++) yc[c] = yc[c] / (1.0f + e[c]);
        }
}

static void conv_ref(float *hist, const float *w, int32_t C, int32_t K, const float *x, int64_t ldx, int32_t T, float *y, int64_t ldy,
                     bool silu) {
    const int32_t H = K - 1;
    for (int32_t t = 0; t < T; t++) {
        float *yt = y + t * ldy;
        for (int32_t c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int32_t j = 0; j < K; j++) {
                const float *xr = t + j < H ? hist + (size_t)(t + j) * C : x + (t + j - H) * ldx;
                acc = fmaf(w[(size_t)c * K + j], xr[c], acc);
            }
            yt[c] = acc;
        }
    }
    if (silu) kvb_gdn_silu_rows(kvb_kernels_ref.vexp, y, ldy, C, T);
    kvb_ssm_conv_hist(hist, C, K, x, ldx, T);
}

const struct kvb_gdn_kernels kvb_gdn_ref = {
    .name = "ref",
    .recurrent = recurrent_ref,
    .chunked = chunked_ref,
    .conv = conv_ref,
};

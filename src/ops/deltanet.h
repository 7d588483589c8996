/*
 * deltanet.h — the Gated DeltaNet kernels (Qwen3.5 / Qwen3.6 recurrent
 * layers): the gated delta rule over one v head, in its recurrent form
 * (decode) and its chunked form (prompts), and the short causal depthwise
 * convolution in front of it. They know nothing about caches: the state is
 * reached through row pointers (the rows live in pool pages).
 *
 * How callers get them: call kvb_gdn_recurrent, kvb_gdn_chunked and
 * kvb_ssm_conv (static inlines below): each runs the kernel family in
 * use, kvb_gdn_kernels() (dispatch.h: the same choice as attention and
 * matmul, KVB_REF / KVB_KERNELS). The families' tables (kvb_gdn_ref,
 * kvb_gdn_avx2, kvb_gdn_avx512) are for tests. The scalar reference (deltanet.c) is the law:
 *   - every reduction is a sequential fmaf chain in a fixed order (the
 *     state rows i = 0..Dk-1, the chunk's tokens in order, the taps
 *     j = 0..K-1), and the x86 families vectorize only across the
 *     independent index (Dv, the channels, the chunk's keys), so they give
 *     the reference's bits: recurrent and chunked bit for bit, the
 *     convolution bit for bit before SiLU (SiLU uses the family's vexp,
 *     ref: expf);
 *   - the recurrent form is bit-identical however T is split into calls
 *     (each token is the same operations on the same values); the chunked
 *     form equals it up to float rounding (its chunks start at each call's
 *     first token, so its bits depend on the split).
 *
 * One v head's state S is Dk rows of Dv floats: S[i] is row i (k index i),
 * contiguous; rows need not be adjacent. Outputs must not overlap inputs.
 */
#ifndef KVB_DELTANET_H
#define KVB_DELTANET_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVB_GDN_CHUNK 64 /* tokens per chunk of kvb_gdn_chunked */

/* One v head over T tokens (T >= 0; Dk, Dv >= 1). Rows t of q, k: Dk
 * floats at q + t*ldq, k + t*ldk; v, o: Dv floats at v + t*ldv, o + t*ldo;
 * g, beta: one float per token at g[t*ldgb], beta[t*ldgb]. q is already
 * l2-normed and scaled by 1/sqrt(Dk), k l2-normed, g = log of the decay
 * (<= 0 in the models), beta in (0, 1). Per token:
 *     S *= exp(g);  kv = S^T k;  d = beta (v - kv);  S += k d^T;  o = S^T q.
 * S is updated in place; o must not overlap S, q, k, v, g or beta. */
static inline void kvb_gdn_recurrent(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k,
                                     int64_t ldk, const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o,
                                     int64_t ldo);

/* The same result by the chunked (WY / UT-transform) form, chunks of
 * KVB_GDN_CHUNK tokens from the call's first token (any T, the last chunk
 * short): per chunk, with G the cumulative g and D the rows d_t,
 *     (I + A) D = beta (V - diag(e^G) K S0),  A[t][s] = beta_t e^(G_t - G_s) k_t.k_s (s < t)
 * solved by forward substitution; o_t = e^(G_t) S0^T q_t + sum_{s<=t}
 * e^(G_t - G_s) (q_t.k_s) d_s; S = e^(G_last) S0 + sum_s e^(G_last - G_s) k_s d_s^T.
 * Equal to kvb_gdn_recurrent up to float rounding. scratch: at least
 * kvb_gdn_scratch_floats(Dk, Dv) floats, any alignment. */
static inline void kvb_gdn_chunked(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k,
                                   int64_t ldk, const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o,
                                   int64_t ldo, float *scratch);
size_t kvb_gdn_scratch_floats(int32_t Dk, int32_t Dv);

/* Causal depthwise convolution, C channels, K taps (K >= 1): hist is
 * [K-1][C] (the previous K-1 input rows, oldest first), w is [C][K] (ggml's
 * ssm_conv1d.weight, ne {K, C}), x rows of C at x + t*ldx, y rows at
 * y + t*ldy. With xe = [hist rows; x rows],
 *     y[t][c] = sum_{j<K} w[c][j] * xe[t+j][c]   (then y = y / (1 + e^-y) when silu)
 * and hist becomes the last K-1 rows of xe. y must not overlap x or hist. */
static inline void kvb_ssm_conv(float *hist, const float *w, int32_t C, int32_t K, const float *x, int64_t ldx, int32_t T, float *y,
                                int64_t ldy, bool silu);

/* A chunk's decays, the one computation every family's chunked form starts
 * from: G[t] the cumulative g (summed in order), gam[t] = e^G[t], and
 * cdec[s] = e^(G[L-1] - G[s]) for the L tokens of the chunk. */
static inline void kvb_gdn_chunk_decays(const float *g, int64_t ldgb, int32_t L, float *G, float *gam, float *cdec) {
    float acc = 0.0f;
    for (int32_t t = 0; t < L; t++) {
        acc += g[t * ldgb];
        G[t] = acc;
        gam[t] = expf(acc);
    }
    for (int32_t s = 0; s < L; s++) cdec[s] = expf(G[L - 1] - G[s]);
}

/* A family's kernels (the signatures above). */
struct kvb_gdn_kernels {
    const char *name;
    void (*recurrent)(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k, int64_t ldk,
                      const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o, int64_t ldo);
    void (*chunked)(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k, int64_t ldk,
                    const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o, int64_t ldo, float *scratch);
    void (*conv)(float *hist, const float *w, int32_t C, int32_t K, const float *x, int64_t ldx, int32_t T, float *y, int64_t ldy,
                 bool silu);
};

extern const struct kvb_gdn_kernels kvb_gdn_ref;
#if defined(__x86_64__)
extern const struct kvb_gdn_kernels kvb_gdn_avx2, kvb_gdn_avx512;
#endif
/* The family in use's (kvb_family()->gdn; dispatch.c). */
const struct kvb_gdn_kernels *kvb_gdn_kernels(void);

static inline void kvb_gdn_recurrent(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k,
                                     int64_t ldk, const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o,
                                     int64_t ldo) {
    kvb_gdn_kernels()->recurrent(S, Dk, Dv, T, q, ldq, k, ldk, v, ldv, g, beta, ldgb, o, ldo);
}
static inline void kvb_gdn_chunked(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k,
                                   int64_t ldk, const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o,
                                   int64_t ldo, float *scratch) {
    kvb_gdn_kernels()->chunked(S, Dk, Dv, T, q, ldq, k, ldk, v, ldv, g, beta, ldgb, o, ldo, scratch);
}
static inline void kvb_ssm_conv(float *hist, const float *w, int32_t C, int32_t K, const float *x, int64_t ldx, int32_t T, float *y,
                                int64_t ldy, bool silu) {
    kvb_gdn_kernels()->conv(hist, w, C, K, x, ldx, T, y, ldy, silu);
}

/* The convolution's history update (every family's): hist becomes the
 * last K-1 rows of [hist; x rows]. */
void kvb_ssm_conv_hist(float *hist, int32_t C, int32_t K, const float *x, int64_t ldx, int32_t T);
/* y = y / (1 + vexp(-y)) over T rows of C (the convolution's SiLU, with
 * the family's vexp). */
void kvb_gdn_silu_rows(void (*vexp)(float *, int32_t), float *y, int64_t ldy, int32_t C, int32_t T);

#endif

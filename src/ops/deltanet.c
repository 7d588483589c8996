/* deltanet.c — TEMPORARY lead stub (replaced by the kernels branch). */
#include "deltanet.h"
#include <math.h>
void kvb_gdn_recurrent(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k, int64_t ldk,
                       const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o, int64_t ldo) {
    float kv[1024];
    for (int32_t t = 0; t < T; t++) {
        const float *qt = q + t * ldq, *kt = k + t * ldk, *vt = v + t * ldv;
        const float e = expf(g[t * ldgb]), b = beta[t * ldgb];
        for (int32_t j = 0; j < Dv; j++) kv[j] = 0;
        for (int32_t i = 0; i < Dk; i++)
            for (int32_t j = 0; j < Dv; j++) { S[i][j] *= e; kv[j] += S[i][j] * kt[i]; }
        for (int32_t j = 0; j < Dv; j++) kv[j] = b * (vt[j] - kv[j]);
        float *ot = o + t * ldo;
        for (int32_t j = 0; j < Dv; j++) ot[j] = 0;
        for (int32_t i = 0; i < Dk; i++)
            for (int32_t j = 0; j < Dv; j++) { S[i][j] += kt[i] * kv[j]; ot[j] += S[i][j] * qt[i]; }
    }
}
void kvb_gdn_chunked(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k, int64_t ldk,
                     const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o, int64_t ldo, float *scratch) {
    (void)scratch;
    kvb_gdn_recurrent(S, Dk, Dv, T, q, ldq, k, ldk, v, ldv, g, beta, ldgb, o, ldo);
}
size_t kvb_gdn_scratch_floats(int32_t Dk, int32_t Dv) { return (size_t)Dk * Dv; }
void kvb_ssm_conv(float *hist, const float *w, int32_t C, int32_t K, const float *x, int64_t ldx, int32_t T, float *y, int64_t ldy, bool silu) {
    for (int32_t t = 0; t < T; t++) {
        for (int32_t c = 0; c < C; c++) {
            float a = 0;
            for (int32_t j = 0; j < K; j++) {
                const int32_t r = t + j; /* row of xe = [hist (K-1), x] */
                const float xv = r < K - 1 ? hist[(size_t)r * C + c] : x[(r - (K - 1)) * ldx + c];
                a += w[(size_t)c * K + j] * xv;
            }
            y[t * ldy + c] = silu ? a / (1.0f + expf(-a)) : a;
        }
    }
    /* the last K-1 rows of xe */
    for (int32_t r = 0; r < K - 1; r++) {
        const int32_t src = T + r; /* row of xe */
        for (int32_t c = 0; c < C; c++) {
            const float xv = src < K - 1 ? hist[(size_t)src * C + c] : x[(src - (K - 1)) * ldx + c];
            hist[(size_t)r * C + c] = xv;
        }
    }
}

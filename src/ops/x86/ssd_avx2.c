/* ssd_avx2.c — the Mamba-2 scan with AVX2 (ssd.h), both forms giving the
 * reference's bits. Recurrent: 8 state values a step (the update unfused as
 * there, the dot's 8 lanes by fma in the same order), the tail and the
 * lanes' sum as the reference computes them. Chunked: the reference's fmaf
 * chains run 8 side by side, each lane one chain in the reference's order:
 * C_t . B_s with lanes over s (B transposed to [N][L] in the scratch), S0[i]
 * . C_t and the chunk's terms with lanes over t (C transposed, W stored by
 * column, zero past the diagonal: fmaf(0, x, v) = v), the state's update
 * with lanes over n; every exp by expf, every product in the reference's
 * order. Compiled with -mavx2 -mfma -ffp-contract=off. */
#include "../ssd.h"

#include <immintrin.h>
#include <math.h>

static void recurrent_avx2(float *const *S, int32_t P, int32_t N, int32_t T, const float *x, int64_t ldx, const float *B, const float *C,
                           int64_t ldbc, const float *dt, int64_t lddt, float A, float D, float *y, int64_t ldy) {
    const int32_t N8 = N & ~7;
    for (int32_t t = 0; t < T; t++) {
        const float d = dt[t * lddt], dA = expf(d * A);
        const float *xt = x + t * ldx, *bt = B + t * ldbc, *ct = C + t * ldbc;
        float *yt = y + t * ldy;
        const __m256 vdA = _mm256_set1_ps(dA);
        for (int32_t i = 0; i < P; i++) {
            float *s = S[i];
            const float xd = xt[i] * d;
            const __m256 vxd = _mm256_set1_ps(xd);
            __m256 acc = _mm256_setzero_ps();
            for (int32_t n = 0; n < N8; n += 8) {
                const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(s + n), vdA), _mm256_mul_ps(_mm256_loadu_ps(bt + n), vxd));
                _mm256_storeu_ps(s + n, v);
                acc = _mm256_fmadd_ps(v, _mm256_loadu_ps(ct + n), acc);
            }
            float a[8];
            _mm256_storeu_ps(a, acc);
            for (int32_t n = N8; n < N; n++) {
                const float v = s[n] * dA + bt[n] * xd;
                s[n] = v;
                a[n & 7] = fmaf(v, ct[n], a[n & 7]);
            }
            yt[i] = kvb_ssd_lanes_sum(a) + D * xt[i];
        }
    }
}

#define LC KVB_SSD_CHUNK

static void chunked_avx2(float *const *S, int32_t P, int32_t N, int32_t T, const float *x, int64_t ldx, const float *B, const float *C,
                         int64_t ldbc, const float *dt, int64_t lddt, float A, float D, float *y, int64_t ldy, float *scratch) {
    /* a[LC], dec[LC], g[LC], Wt[LC][LC] (Wt[s][t] = the reference's W[t][s]), Bt[N][LC], Ct[N][LC] */
    float *a = scratch, *dec = a + LC, *g = dec + LC, *Wt = g + LC, *Bt = Wt + LC * LC, *Ct = Bt + (size_t)N * LC;
    const int32_t N8 = N & ~7;
    for (int32_t t0 = 0; t0 < T; t0 += LC) {
        const int32_t L = T - t0 < LC ? T - t0 : LC, L8 = (L + 7) & ~7;
        float acc = 0.0f;
        for (int32_t t = 0; t < L; t++) {
            acc += dt[(t0 + t) * lddt] * A;
            a[t] = acc;
            g[t] = expf(a[t]);
        }
        for (int32_t t = 0; t < L8; t++) /* B and C of the chunk by column, zero past L */
            for (int32_t n = 0; n < N; n++) {
                Bt[(size_t)n * LC + t] = t < L ? B[(t0 + t) * ldbc + n] : 0.0f;
                Ct[(size_t)n * LC + t] = t < L ? C[(t0 + t) * ldbc + n] : 0.0f;
            }
        /* Wt[s][t] = e^(a_t - a_s) (C_t . B_s) dt_s for s <= t, else 0; the dots 8 values of s at a time */
        for (int32_t t = 0; t < L; t++) {
            const float *ct = C + (t0 + t) * ldbc;
            for (int32_t s8 = 0; s8 <= t; s8 += 8) {
                __m256 cb = _mm256_setzero_ps();
                for (int32_t n = 0; n < N; n++) cb = _mm256_fmadd_ps(_mm256_set1_ps(ct[n]), _mm256_loadu_ps(Bt + (size_t)n * LC + s8), cb);
                float v[8];
                _mm256_storeu_ps(v, cb);
                for (int32_t j = 0; j < 8 && s8 + j <= t; j++)
                    Wt[(s8 + j) * LC + t] = expf(a[t] - a[s8 + j]) * v[j] * dt[(t0 + s8 + j) * lddt];
            }
            for (int32_t s = t + 1; s < L; s++) Wt[s * LC + t] = 0.0f;
        }
        for (int32_t s = 0; s < L; s++)
            for (int32_t t = L; t < L8; t++) Wt[s * LC + t] = 0.0f;
        /* y, 8 tokens at a time: g_t (S0[i] . C_t), then the chunk's terms, then + D x_t[i] */
        for (int32_t t8 = 0; t8 < L; t8 += 8) {
            const int32_t s_end = t8 + 8 < L ? t8 + 8 : L;
            const __m256 vg = _mm256_loadu_ps(g + t8);
            for (int32_t i = 0; i < P; i++) {
                const float *s0 = S[i];
                __m256 h = _mm256_setzero_ps();
                for (int32_t n = 0; n < N; n++) h = _mm256_fmadd_ps(_mm256_set1_ps(s0[n]), _mm256_loadu_ps(Ct + (size_t)n * LC + t8), h);
                __m256 v = _mm256_mul_ps(vg, h);
                for (int32_t s = 0; s < s_end; s++)
                    v = _mm256_fmadd_ps(_mm256_loadu_ps(Wt + s * LC + t8), _mm256_set1_ps(x[(t0 + s) * ldx + i]), v);
                float out[8];
                _mm256_storeu_ps(out, v);
                for (int32_t j = 0; j < 8 && t8 + j < L; j++) y[(t0 + t8 + j) * ldy + i] = out[j] + D * x[(t0 + t8 + j) * ldx + i];
            }
        }
        /* the state after the chunk, 8 values of n at a time */
        const float gL = expf(a[L - 1]);
        for (int32_t s = 0; s < L; s++) dec[s] = expf(a[L - 1] - a[s]) * dt[(t0 + s) * lddt];
        const __m256 vgL = _mm256_set1_ps(gL);
        for (int32_t i = 0; i < P; i++) {
            float *st = S[i];
            for (int32_t n = 0; n < N8; n += 8) {
                __m256 v = _mm256_mul_ps(_mm256_loadu_ps(st + n), vgL);
                for (int32_t s = 0; s < L; s++)
                    v = _mm256_fmadd_ps(_mm256_set1_ps(dec[s] * x[(t0 + s) * ldx + i]), _mm256_loadu_ps(B + (t0 + s) * ldbc + n), v);
                _mm256_storeu_ps(st + n, v);
            }
            for (int32_t n = N8; n < N; n++) {
                float v = st[n] * gL;
                for (int32_t s = 0; s < L; s++) v = fmaf(dec[s] * x[(t0 + s) * ldx + i], B[(t0 + s) * ldbc + n], v);
                st[n] = v;
            }
        }
    }
}

const struct kvb_ssd_kernels kvb_ssd_avx2 = {"avx2", recurrent_avx2, chunked_avx2};

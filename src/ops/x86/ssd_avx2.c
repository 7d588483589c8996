/* ssd_avx2.c — the Mamba-2 scan's recurrent form with AVX2 (ssd.h): the
 * reference's bits, 8 state values a step (the update unfused as there, the
 * dot's 8 lanes by fma in the same order), the tail and the lanes' sum as the
 * reference computes them. Compiled with -mavx2 -mfma -ffp-contract=off. */
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

const struct kvb_ssd_kernels kvb_ssd_avx2 = {"avx2", recurrent_avx2};

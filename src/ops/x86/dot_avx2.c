/* dot_avx2.c — AVX2 + FMA + F16C dot products, scalar tail. */
#include "../matmul.h"

#include <immintrin.h>

static inline float hsum(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static float dot_f32_avx2(const void *row, const float *x, int64_t n) {
    const float *w = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    }
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += w[i] * x[i];
    return s;
}

static float dot_f16_avx2(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i))), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8))), _mm256_loadu_ps(x + i + 8), a1);
    }
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += kvb_f16_to_f32(w[i]) * x[i];
    return s;
}

/* Quantized types fall back to the reference on AVX2 machines for now. */
const struct kvb_dot_kernels kvb_dot_avx2 = {
    .name = "avx2",
    .dot = {[GGML_TYPE_F32] = dot_f32_avx2, [GGML_TYPE_F16] = dot_f16_avx2},
};

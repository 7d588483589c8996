/*
 * attn_avx512.c — AVX-512 (F, BW, VL) + F16C primitives. Compiled with
 * -mavx512f -mavx512bw -mavx512vl -mf16c -mfma; only called after the runtime
 * check in dispatch.c. Any head_dim works: the last chunk of 16 is masked.
 *
 * scores: each K row is loaded and converted once per tile and dotted with
 *   every query row (the G heads of a KV head share the load).
 * accum: V is walked in chunks of 64 floats (4 zmm) per group of up to 4
 *   rows, so 16 accumulators stay in registers across the whole tile.
 * vexp: range reduction x = n ln2 + r, degree-6 polynomial, scalef by n.
 */
#include "../ops.h"

#include <immintrin.h>

static inline __m512 load16(enum kvb_dtype dt, const void *row, int32_t i, __mmask16 m) {
    if (dt == KVB_DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i));
    return _mm512_maskz_loadu_ps(m, (const float *)row + i);
}

static inline __mmask16 tail_mask(int32_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

static inline __attribute__((always_inline)) void scores_t(const struct kvb_kv_view *v, const float *q, int32_t n_rows,
                                                           int32_t j0, int32_t nt, float *s, enum kvb_dtype dt) {
    const int32_t d = v->head_dim;
    const int32_t nc = (d + 15) / 16;
    __m512 kc[32]; /* head_dim <= 512 */
    for (int32_t t = 0; t < nt; t++) {
        const void *k = kvb_view_k(v, j0 + t);
        for (int32_t c = 0; c < nc; c++) kc[c] = load16(dt, k, c * 16, tail_mask(d - c * 16));
        int32_t r = 0;
        for (; r + 2 <= n_rows; r += 2) {
            const float *q0 = q + (size_t)r * d, *q1 = q0 + d;
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
            for (int32_t c = 0; c < nc; c++) {
                __mmask16 m = tail_mask(d - c * 16);
                a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q0 + c * 16), kc[c], a0);
                a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q1 + c * 16), kc[c], a1);
            }
            s[r * KVB_ATTN_TILE + t] = _mm512_reduce_add_ps(a0);
            s[(r + 1) * KVB_ATTN_TILE + t] = _mm512_reduce_add_ps(a1);
        }
        for (; r < n_rows; r++) {
            const float *q0 = q + (size_t)r * d;
            __m512 a0 = _mm512_setzero_ps();
            for (int32_t c = 0; c < nc; c++)
                a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail_mask(d - c * 16), q0 + c * 16), kc[c], a0);
            s[r * KVB_ATTN_TILE + t] = _mm512_reduce_add_ps(a0);
        }
    }
}

static void scores_avx512(const struct kvb_kv_view *v, const float *q, int32_t n_rows, int32_t j0, int32_t nt, float *s) {
    if (v->dtype == KVB_DTYPE_F16) scores_t(v, q, n_rows, j0, nt, s, KVB_DTYPE_F16);
    else scores_t(v, q, n_rows, j0, nt, s, KVB_DTYPE_F32);
}

static inline __attribute__((always_inline)) void accum_t(const struct kvb_kv_view *v, const float *e, int32_t n_rows,
                                                          int32_t j0, int32_t nt, float *acc, enum kvb_dtype dt) {
    const int32_t d = v->head_dim;
    for (int32_t r0 = 0; r0 < n_rows; r0 += 4) {
        const int32_t nr = KVB_MIN(4, n_rows - r0);
        for (int32_t c0 = 0; c0 < d; c0 += 64) {
            const int32_t nc = KVB_MIN(4, (d - c0 + 15) / 16);
            __mmask16 mk[4];
            __m512 a[4][4];
            for (int32_t c = 0; c < nc; c++) mk[c] = tail_mask(d - c0 - c * 16);
            for (int32_t r = 0; r < nr; r++)
                for (int32_t c = 0; c < nc; c++)
                    a[r][c] = _mm512_maskz_loadu_ps(mk[c], acc + (size_t)(r0 + r) * d + c0 + c * 16);
            for (int32_t t = 0; t < nt; t++) {
                const void *vr = kvb_view_v(v, j0 + t);
                __m512 vc[4];
                for (int32_t c = 0; c < nc; c++) vc[c] = load16(dt, vr, c0 + c * 16, mk[c]);
                for (int32_t r = 0; r < nr; r++) {
                    __m512 w = _mm512_set1_ps(e[(r0 + r) * KVB_ATTN_TILE + t]);
                    for (int32_t c = 0; c < nc; c++) a[r][c] = _mm512_fmadd_ps(w, vc[c], a[r][c]);
                }
            }
            for (int32_t r = 0; r < nr; r++)
                for (int32_t c = 0; c < nc; c++)
                    _mm512_mask_storeu_ps(acc + (size_t)(r0 + r) * d + c0 + c * 16, mk[c], a[r][c]);
        }
    }
}

static void accum_avx512(const struct kvb_kv_view *v, const float *e, int32_t n_rows, int32_t j0, int32_t nt, float *acc) {
    if (v->dtype == KVB_DTYPE_F16) accum_t(v, e, n_rows, j0, nt, acc, KVB_DTYPE_F16);
    else accum_t(v, e, n_rows, j0, nt, acc, KVB_DTYPE_F32);
}

static inline __m512 exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(88.37626f);
    __mmask16 zero = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps((__mmask16)~zero, p, n);
}

static void vexp_avx512(float *x, int32_t n) {
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, exp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

static void to_f16_avx512(const float *src, uint16_t *dst, int32_t n) {
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = kvb_f32_to_f16(src[i]);
}

static void from_f16_avx512(const uint16_t *src, float *dst, int32_t n) {
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = kvb_f16_to_f32(src[i]);
}

const struct kvb_kernels kvb_kernels_avx512 = {
    .name = "avx512",
    .scores = scores_avx512,
    .accum = accum_avx512,
    .vexp = vexp_avx512,
    .to_f16 = to_f16_avx512,
    .from_f16 = from_f16_avx512,
};

/*
 * attn_avx2.c — AVX2 + FMA + F16C primitives, the same structure as the
 * AVX-512 file with 8-wide vectors. head_dim that is not a multiple of 8 takes
 * the scalar tail. Compiled with -mavx2 -mfma -mf16c. The f16 and q8_0 row
 * conversions are attn_width.h's bodies at 8 lanes (AVX-512 has them at 16).
 */
#include "../ops.h"
#include "prefetch_kv.h"
#include "x86_kernels.h"

#include <immintrin.h>
#include <math.h>

#define KVB_W 8
#include "attn_width.h" /* to_f16_avx2, from_f16_avx2, from_q8_0_avx2 */

static inline __m256 load8(enum kvb_dtype dt, const void *row, int32_t i) {
    if (dt == KVB_DTYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
    return _mm256_loadu_ps((const float *)row + i);
}

static inline float load1(enum kvb_dtype dt, const void *row, int32_t i) {
    return dt == KVB_DTYPE_F16 ? kvb_f16_to_f32(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

static inline __attribute__((always_inline)) void scores_t(const struct kvb_kv_view *v, const float *q, int32_t n_rows,
                                                           int32_t j0, int32_t nt, float *s, enum kvb_dtype dt) {
    const int32_t d = v->head_dim, d8 = d & ~7;
    for (int32_t t = 0; t < nt; t++) {
        const void *k = kvb_view_k(v, j0 + t);
        for (int32_t r = 0; r < n_rows; r++) {
            const float *qr = q + (size_t)r * d;
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            int32_t i = 0;
            for (; i + 16 <= d8; i += 16) {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + i), load8(dt, k, i), a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + i + 8), load8(dt, k, i + 8), a1);
            }
            for (; i < d8; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + i), load8(dt, k, i), a0);
            float sum = kvb_hsum8(_mm256_add_ps(a0, a1));
            for (; i < d; i++) sum += qr[i] * load1(dt, k, i);
            s[r * KVB_ATTN_TILE + t] = sum;
        }
    }
}

/* Scores of four keys against one row at a time: four accumulators, one
 * reduction of all four (two hadd levels and one add of the halves) instead
 * of four horizontal sums. Rows of f32/f16 keys are read from the pages;
 * with d a multiple of 8. */
static inline __attribute__((always_inline)) void scores4_rows(const void *const k[4], enum kvb_dtype dt, const float *q, int32_t n_rows,
                                                               int32_t d, float *s) {
    for (int32_t r = 0; r < n_rows; r++) {
        const float *qr = q + (size_t)r * d;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int32_t i = 0; i < d; i += 8) {
            const __m256 qv = _mm256_loadu_ps(qr + i);
            a0 = _mm256_fmadd_ps(qv, load8(dt, k[0], i), a0);
            a1 = _mm256_fmadd_ps(qv, load8(dt, k[1], i), a1);
            a2 = _mm256_fmadd_ps(qv, load8(dt, k[2], i), a2);
            a3 = _mm256_fmadd_ps(qv, load8(dt, k[3], i), a3);
        }
        const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
        _mm_storeu_ps(s + r * KVB_ATTN_TILE, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
    }
}

/* d * (q - 8): element i < 16 the low nibble of byte i, i >= 16 the high
 * nibble of byte i - 16; each 16-byte half in two steps of 8 (the AVX-512
 * version takes it in one, so the two are not one body). */
static void from_q4_0_avx2(const void *src, float *dst, int32_t n) {
    const uint8_t *b = src;
    const __m128i m4 = _mm_set1_epi8(0xF), k8 = _mm_set1_epi8(8);
    for (int32_t i = 0; i < n; i += 32, b += 18, dst += 32) {
        uint16_t h;
        memcpy(&h, b, 2);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
        const __m128i raw = _mm_loadu_si128((const __m128i *)(b + 2));
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, m4), k8), hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), k8);
        _mm256_storeu_ps(dst, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
        _mm256_storeu_ps(dst + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
        _mm256_storeu_ps(dst + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
        _mm256_storeu_ps(dst + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
    }
}

/* A q8_0, q4_0 or f16 row of d elements into f32. */
static inline void row_to_f32(enum kvb_dtype dt, const void *src, float *dst, int32_t d) {
    if (dt == KVB_DTYPE_Q8_0) from_q8_0_avx2(src, dst, d);
    else if (dt == KVB_DTYPE_Q4_0) from_q4_0_avx2(src, dst, d);
    else from_f16_avx2((const uint16_t *)src, dst, d);
}

/* K and V rows are prefetched this many keys ahead (prefetch_kv.h): 24 by
 * the f16/f32 scores, 16 by the integer ones. */
#define PREFETCH_AHEAD 24
#define PREFETCH_AHEAD_I8 16

/* Keys in groups of four (the rest one at a time). Quantized rows (q8_0,
 * q4_0) are dequantized once per key into a small L1 buffer that every row
 * then reads: the pages are read once, as f16 pages are. */
static void scores_avx2(const struct kvb_kv_view *v, const float *q, int32_t n_rows, int32_t j0, int32_t nt, float *s) {
    const int32_t d = v->head_dim;
    const enum kvb_dtype dt = v->dtype;
    const bool quant = dt == KVB_DTYPE_Q8_0 || dt == KVB_DTYPE_Q4_0;
    if (!quant && (d & 7)) { /* scalar tails: the per-key kernel */
        if (dt == KVB_DTYPE_F16) scores_t(v, q, n_rows, j0, nt, s, KVB_DTYPE_F16);
        else scores_t(v, q, n_rows, j0, nt, s, KVB_DTYPE_F32);
        return;
    }
    _Alignas(32) float kf[4][KVB_ATTN_MAX_DIM];
    /* f16 keys read by several rows: converted once per key too (one vcvtph2ps per 8 instead of one per row) */
    const bool to_f32 = quant || (dt == KVB_DTYPE_F16 && n_rows > 1);
    int32_t t = 0;
    for (; t + 4 <= nt; t += 4) {
        const void *k[4];
        kvb_prefetch_kv_keys(v, j0 + t + PREFETCH_AHEAD, 4);
        for (int u = 0; u < 4; u++) {
            k[u] = kvb_view_k(v, j0 + t + u);
            if (to_f32) {
                row_to_f32(dt, k[u], kf[u], d);
                k[u] = kf[u];
            }
        }
        if (dt == KVB_DTYPE_F16 && !to_f32) scores4_rows(k, KVB_DTYPE_F16, q, n_rows, d, s + t);
        else scores4_rows(k, KVB_DTYPE_F32, q, n_rows, d, s + t);
    }
    if (t < nt) { /* the last 1-3 keys of a tile: the group of four's arithmetic (the last key repeated), so a key's
                   * score does not depend on how many keys its call reads (a prompt read in pieces, or whole, gets the
                   * same bits); the repeats' scores land past nt, in the tile's row, and are not read */
        const void *k[4];
        for (int u = 0; u < 4; u++) {
            k[u] = kvb_view_k(v, j0 + KVB_MIN(t + u, nt - 1));
            if (to_f32) {
                row_to_f32(dt, k[u], kf[u], d);
                k[u] = kf[u];
            }
        }
        if (dt == KVB_DTYPE_F16 && !to_f32) scores4_rows(k, KVB_DTYPE_F16, q, n_rows, d, s + t);
        else scores4_rows(k, KVB_DTYPE_F32, q, n_rows, d, s + t);
    }
}

#define KVB_I8FN(name) name##_avx2
#define I8_SUM4(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
#include "attn_i8_avx2.h" /* kvb_scores_i8_avx2 */

static inline __attribute__((always_inline)) void accum_t(const struct kvb_kv_view *v, const float *e, int32_t n_rows,
                                                          int32_t j0, int32_t nt, float *acc, enum kvb_dtype dt) {
    const int32_t d = kvb_view_dv(v), d8 = d & ~7;
    for (int32_t r0 = 0; r0 < n_rows; r0 += 2) {
        const int32_t nr = KVB_MIN(2, n_rows - r0);
        for (int32_t c0 = 0; c0 < d8; c0 += 32) {
            const int32_t nc = KVB_MIN(4, (d8 - c0) / 8);
            __m256 a[2][4];
            for (int32_t r = 0; r < nr; r++)
                for (int32_t c = 0; c < nc; c++) a[r][c] = _mm256_loadu_ps(acc + (size_t)(r0 + r) * d + c0 + c * 8);
            for (int32_t t = 0; t < nt; t++) {
                const void *vr = kvb_view_v(v, j0 + t);
                __m256 vc[4];
                for (int32_t c = 0; c < nc; c++) vc[c] = load8(dt, vr, c0 + c * 8);
                for (int32_t r = 0; r < nr; r++) {
                    __m256 w = _mm256_set1_ps(e[(r0 + r) * KVB_ATTN_TILE + t]);
                    for (int32_t c = 0; c < nc; c++) a[r][c] = _mm256_fmadd_ps(w, vc[c], a[r][c]);
                }
            }
            for (int32_t r = 0; r < nr; r++)
                for (int32_t c = 0; c < nc; c++) _mm256_storeu_ps(acc + (size_t)(r0 + r) * d + c0 + c * 8, a[r][c]);
        }
        if (d8 < d) {
            for (int32_t t = 0; t < nt; t++) {
                const void *vr = kvb_view_v(v, j0 + t);
                for (int32_t r = 0; r < nr; r++) {
                    float w = e[(r0 + r) * KVB_ATTN_TILE + t];
                    for (int32_t i = d8; i < d; i++) acc[(size_t)(r0 + r) * d + i] += w * load1(dt, vr, i);
                }
            }
        }
    }
}

/* Quantized V rows (and f16 ones that several row pairs read): eight keys at
 * a time converted into an L1 buffer, then accumulated as f32 rows (acc
 * read and written once per eight keys). d: whole blocks of 32. */
static void accum_q(const struct kvb_kv_view *v, const float *e, int32_t n_rows, int32_t j0, int32_t nt, float *acc) {
    const int32_t d = kvb_view_dv(v);
    _Alignas(32) float vf[8][KVB_ATTN_MAX_DIM];
    for (int32_t t0 = 0; t0 < nt; t0 += 8) {
        const int32_t ng = KVB_MIN(8, nt - t0);
        for (int32_t u = 0; u < ng; u++) row_to_f32(v->dtype_v, kvb_view_v(v, j0 + t0 + u), vf[u], d);
        for (int32_t r0 = 0; r0 < n_rows; r0 += 2) {
            const int32_t nr = KVB_MIN(2, n_rows - r0);
            for (int32_t c0 = 0; c0 < d; c0 += 32) { /* d is whole blocks of 32 */
                __m256 a[2][4];
                for (int32_t r = 0; r < nr; r++)
                    for (int32_t c = 0; c < 4; c++) a[r][c] = _mm256_loadu_ps(acc + (size_t)(r0 + r) * d + c0 + c * 8);
                for (int32_t u = 0; u < ng; u++) {
                    __m256 vc[4];
                    for (int32_t c = 0; c < 4; c++) vc[c] = _mm256_load_ps(vf[u] + c0 + c * 8);
                    for (int32_t r = 0; r < nr; r++) {
                        const __m256 w = _mm256_set1_ps(e[(r0 + r) * KVB_ATTN_TILE + t0 + u]);
                        for (int32_t c = 0; c < 4; c++) a[r][c] = _mm256_fmadd_ps(w, vc[c], a[r][c]);
                    }
                }
                for (int32_t r = 0; r < nr; r++)
                    for (int32_t c = 0; c < 4; c++) _mm256_storeu_ps(acc + (size_t)(r0 + r) * d + c0 + c * 8, a[r][c]);
            }
        }
    }
}

static void accum_avx2(const struct kvb_kv_view *v, const float *e, int32_t n_rows, int32_t j0, int32_t nt, float *acc) {
    if (v->dtype_v == KVB_DTYPE_Q8_0 || v->dtype_v == KVB_DTYPE_Q4_0 || (v->dtype_v == KVB_DTYPE_F16 && n_rows > 2 && !(kvb_view_dv(v) & 31)))
        accum_q(v, e, n_rows, j0, nt, acc); /* f16 rows read by several row pairs: converted once per key */
    else if (v->dtype == KVB_DTYPE_F16) accum_t(v, e, n_rows, j0, nt, acc, KVB_DTYPE_F16);
    else accum_t(v, e, n_rows, j0, nt, acc, KVB_DTYPE_F32);
}

static inline __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(88.37626f);
    __m256 zero = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n for n in [-126, 127]; n = 128 (x near hi) is split as 2^(n-1) * 2 */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i big = _mm256_cmpgt_epi32(ni, _mm256_set1_epi32(127));
    ni = _mm256_sub_epi32(ni, _mm256_and_si256(big, _mm256_set1_epi32(1)));
    __m256 pw = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23));
    p = _mm256_mul_ps(p, pw);
    p = _mm256_blendv_ps(p, _mm256_add_ps(p, p), _mm256_castsi256_ps(big));
    return _mm256_andnot_ps(zero, p);
}

static void vexp_avx2(float *x, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float tmp[8];
        for (int32_t k = 0; k < 8; k++) tmp[k] = i + k < n ? x[i + k] : 0.0f;
        _mm256_storeu_ps(tmp, exp8(_mm256_loadu_ps(tmp)));
        for (int32_t k = 0; i + k < n; k++) x[i + k] = tmp[k];
    }
}

/* Page bounds. max(q lo, q hi) = max(q, 0) hi + min(q, 0) lo, as lo <= hi:
 * two FMAs per 8 channels with the split rows made once per call (up to 8
 * rows at a time, on the stack). Pages are streamed once per 8 rows; tails
 * (d % 8) in scalar. */
void kvb_page_bounds_avx2(const float *q, int32_t n_rows, const float *lohi, int64_t n_pages, int32_t d, float *out) {
    const int32_t d8 = d & ~7;
    float qp[8 * KVB_ATTN_MAX_DIM], qn[8 * KVB_ATTN_MAX_DIM];
    for (int64_t p = 0; p < n_pages; p++) out[p] = -INFINITY;
    for (int32_t r0 = 0; r0 < n_rows; r0 += 8) {
        const int32_t nr = n_rows - r0 < 8 ? n_rows - r0 : 8;
        for (int32_t r = 0; r < nr; r++)
            for (int32_t c = 0; c < d; c++) {
                const float x = q[(size_t)(r0 + r) * d + c];
                qp[r * d + c] = x > 0 ? x : 0;
                qn[r * d + c] = x < 0 ? x : 0;
            }
        for (int64_t p = 0; p < n_pages; p++) {
            const float *lo = lohi + (size_t)p * 2 * (size_t)d, *hi = lo + d;
            _mm_prefetch((const char *)(lo + 8 * (size_t)d), _MM_HINT_T0); /* four pages ahead */
            float best = out[p];
            for (int32_t r = 0; r < nr; r += 4) { /* 4 rows: 8 independent FMA chains */
                const int32_t k = nr - r < 4 ? nr - r : 4;
                __m256 ah[4], al[4];
                for (int32_t i = 0; i < 4; i++) ah[i] = al[i] = _mm256_setzero_ps();
                for (int32_t c = 0; c < d8; c += 8) {
                    const __m256 h = _mm256_loadu_ps(hi + c), l = _mm256_loadu_ps(lo + c);
                    for (int32_t i = 0; i < k; i++) {
                        ah[i] = _mm256_fmadd_ps(_mm256_loadu_ps(qp + (r + i) * d + c), h, ah[i]);
                        al[i] = _mm256_fmadd_ps(_mm256_loadu_ps(qn + (r + i) * d + c), l, al[i]);
                    }
                }
                for (int32_t i = 0; i < k; i++) {
                    const __m256 acc = _mm256_add_ps(ah[i], al[i]);
                    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
                    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
                    s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
                    float sum = _mm_cvtss_f32(s4);
                    const float *a = qp + (r + i) * d, *b = qn + (r + i) * d;
                    for (int32_t c = d8; c < d; c++) sum += a[c] * hi[c] + b[c] * lo[c];
                    best = sum > best ? sum : best;
                }
            }
            out[p] = best;
        }
    }
}

/* The avx2 and avxvnni families' primitives: the same but for the integer
 * scores (attn_i8_avx2.h, built by each family: avxvnni's in attn_avxvnni.c). */
#define AVX2_ATTN_TABLE(NAME, ISA)                                                                                                       \
    {                                                                                                                                  \
        .quant_rows = true, .page_bounds = kvb_page_bounds_avx2, .from_q8_0 = from_q8_0_avx2, .from_q4_0 = from_q4_0_avx2,            \
        .name = NAME, .scores = scores_avx2, .scores_i8 = kvb_scores_i8_##ISA, .accum = accum_avx2, .vexp = vexp_avx2,                 \
        .to_f16 = to_f16_avx2, .from_f16 = from_f16_avx2,                                                                              \
    }
const struct kvb_kernels kvb_kernels_avx2 = AVX2_ATTN_TABLE("avx2", avx2);
const struct kvb_kernels kvb_kernels_avxvnni = AVX2_ATTN_TABLE("avxvnni", avxvnni);
#undef AVX2_ATTN_TABLE

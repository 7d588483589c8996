/* kquant_tile512.h — the K-quant tiles of the AVX-512 families (matmul.h,
 * kvb_q8_tile_fn, kq_tile): nr rows x up to KQ_TILE_TOKENS tokens, a row at
 * a time. Per block the weight side of dot_avx512.c's integer dots (q4_K/q5_K's nibbles and fifth bits, the scales and
 * mins, q6_K's high bits and scales, their scale lanes) is unpacked once;
 * each token then takes only its own side (maddubs and madd against its
 * activations, its mins or offset part, the block's FMA into its own
 * accumulators). Every int32 lane of a block's sum holds the same integer
 * the lone kernel's lane holds (integer sums are exact in any order), and
 * the float steps (conversion, d_w * d_x, the FMAs in block order, the final
 * reduction) are the lone kernel's, so each pair has its dot_q8 bits
 * whatever the tile's shape (test_quant checks every shape). With 8 tokens
 * decoding, a block's unpacking is paid once instead of 8 times.
 *
 * Included by dot_avx512.c and dot_vnni.c, each with KQ_SUFFIX (the tiles'
 * names), KQ_STORAGE (static, or nothing for x86_kernels.h's) and KQ_ACC(sumi, p, sl), which adds the int16 pairs p times the
 * scale lanes sl into sumi: madd + add, or VNNI's vpdpwssd (the same int32
 * lanes: no product or sum comes near overflow). No include guard: each
 * includer gets its own copy, built with its own flags. */
#include "../matmul.h"
#include "../quant.h"
#include "kquant_block.h"
#include "kquant_lanes512.h"
#include "prefetch.h"

#include <immintrin.h>

#define KQ_TILE_TOKENS 8

/* The end of a q4_K/q5_K row's sum: as dot_q4_K_q8_avx512 ends. */
static inline __attribute__((always_inline)) float q4k_finish(__m512 acc, __m128 accm) {
    __m128 m = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm512_reduce_add_ps(acc) - _mm_cvtss_f32(m);
}

/* One q4_K (Q5 false) or q5_K (Q5 true) row against NT tokens. */
static inline __attribute__((always_inline)) void q45k_row_tile(const void *row, const struct kvb_q8_act *x, int64_t n, float *out, int64_t ldo,
                                                                 const int NT, const bool first, const bool Q5) {
    const __m512i m4 = _mm512_set1_epi8(0xF), k16 = _mm512_set1_epi8(16);
    const size_t bsz = Q5 ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    __m512 acc[KQ_TILE_TOKENS];
    __m128 accm[KQ_TILE_TOKENS];
    for (int t = 0; t < NT; t++) {
        acc[t] = _mm512_setzero_ps();
        accm[t] = _mm_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *bp = (const uint8_t *)row + (size_t)i * bsz;
        const struct block_q4_K *b4 = (const struct block_q4_K *)(const void *)bp; /* q5_K starts as q4_K: d, dmin, scales */
        const uint8_t *qs = Q5 ? ((const struct block_q5_K *)(const void *)bp)->qs : b4->qs;
        if (first) prefetch_ahead(bp, (int)bsz);
        __m128i mins;
        const __m512i sc16 = _mm512_castsi128_si512(q4k_scales_mins(b4, &mins));
        __m512i qh = _mm512_setzero_si512();
        if (Q5) {
            const __m256i qh256 = _mm256_loadu_si256((const __m256i *)((const struct block_q5_K *)(const void *)bp)->qh);
            qh = _mm512_inserti64x4(_mm512_castsi256_si512(qh256), _mm256_srli_epi16(qh256, 2), 1);
        }
        __m512i u[4], sl[4];
        for (int h = 0; h < 2; h++) {
            const __m512i q = _mm512_loadu_si512((const void *)(qs + 64 * h));
            __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            if (Q5) {
                lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16(qh, 4), k16));
                hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_slli_epi16(qh, 3), k16));
                qh = _mm512_srli_epi16(qh, 4);
            }
            u[2 * h] = _mm512_shuffle_i64x2(lo, hi, 0x44);
            u[2 * h + 1] = _mm512_shuffle_i64x2(lo, hi, 0xEE);
            const int s = 4 * h;
            sl[2 * h] = scale_lanes(sc16, s, s, s + 1, s + 1);
            sl[2 * h + 1] = scale_lanes(sc16, s + 2, s + 2, s + 3, s + 3);
        }
        const float dw = _cvtsh_ss(b4->d), dmw = _cvtsh_ss(b4->dmin);
        for (int t = 0; t < NT; t++) {
            const int8_t *xq = x[t].q + i * QK_K;
            __m512i sumi = _mm512_setzero_si512();
            for (int k = 0; k < 4; k++)
                sumi = KQ_ACC(sumi, _mm512_maddubs_epi16(u[k], _mm512_loadu_si512((const void *)(xq + 64 * k))), sl[k]);
            const float dx = x[t].d[i];
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(dw * dx), acc[t]);
            accm[t] = _mm_fmadd_ps(q4k_mins_part(mins, x[t].s + i * 16), _mm_set1_ps(dmw * dx), accm[t]);
        }
    }
    for (int t = 0; t < NT; t++) out[(size_t)t * (size_t)ldo] = q4k_finish(acc[t], accm[t]);
}

/* One q6_K row against NT tokens. */
static inline __attribute__((always_inline)) void q6k_row_tile(const void *row, const struct kvb_q8_act *x, int64_t n, float *out, int64_t ldo,
                                                                const int NT, const bool first) {
    const struct block_q6_K *b = row;
    const __m512i m4 = _mm512_set1_epi8(0xF), m2 = _mm512_set1_epi8(3);
    __m512 acc[KQ_TILE_TOKENS];
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct block_q6_K *bk = &b[i];
        if (first) prefetch_ahead(bk, sizeof *bk);
        const __m256i sc16y = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)bk->scales)); /* as q6k_block_scales */
        const __m512i sc16 = _mm512_castsi256_si512(sc16y);
        __m512i u[4], sl[4];
        for (int h = 0; h < 2; h++) {
            const __m512i a = _mm512_loadu_si512((const void *)(bk->ql + 64 * h));
            const __m256i hv = _mm256_loadu_si256((const __m256i *)(bk->qh + 32 * h));
            const __m512i h12 = _mm512_inserti64x4(_mm512_castsi256_si512(hv), _mm256_srli_epi16(hv, 2), 1);
            const __m512i h34 = _mm512_srli_epi16(h12, 4);
            u[2 * h] = _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_slli_epi16(_mm512_and_si512(h12, m2), 4));
            u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), m4), _mm512_slli_epi16(_mm512_and_si512(h34, m2), 4));
            const int s = 8 * h;
            sl[2 * h] = scale_lanes(sc16, s, s + 1, s + 2, s + 3);
            sl[2 * h + 1] = scale_lanes(sc16, s + 4, s + 5, s + 6, s + 7);
        }
        const float dw = _cvtsh_ss(bk->d);
        for (int t = 0; t < NT; t++) {
            const int8_t *xq = x[t].q + i * QK_K;
            __m512i sumi = _mm512_inserti64x4(_mm512_castsi256_si512(q6k_offset_part(sc16y, x[t].s + i * 16)), _mm256_setzero_si256(), 1);
            for (int k = 0; k < 4; k++)
                sumi = KQ_ACC(sumi, _mm512_maddubs_epi16(u[k], _mm512_loadu_si512((const void *)(xq + 64 * k))), sl[k]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(dw * x[t].d[i]), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) out[(size_t)t * (size_t)ldo] = _mm512_reduce_add_ps(acc[t]);
}

/* The tiles: rows one after another, the token count a constant (the
 * accumulators live in registers). */
#define KQ_CASES(CALL)                                                                                                                \
    switch (nt * 2 + (first ? 1 : 0)) {                                                                                               \
        KQ_CASE(CALL, 1) KQ_CASE(CALL, 2) KQ_CASE(CALL, 3) KQ_CASE(CALL, 4)                                                           \
        KQ_CASE(CALL, 5) KQ_CASE(CALL, 6) KQ_CASE(CALL, 7) KQ_CASE(CALL, 8)                                                           \
    default: break;                                                                                                                   \
    }
#define KQ_CASE(CALL, T)                                                                                                              \
    case T * 2: CALL(T, false); break;                                                                                                \
    case T * 2 + 1: CALL(T, true); break;

/* A tile function: its rows one after another, each through CALL (row, r, x, n, out, ldo in scope). */
#define KQ_TILE_DEF(NAME, CALL)                                                                                                       \
    KQ_STORAGE void KQ_SUFFIX(NAME)(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n,          \
                                    float *out, int64_t ldo, bool first) {                                                            \
        for (int r = 0; r < nr; r++) {                                                                                                \
            const void *row = (const uint8_t *)rows + (size_t)r * row_bytes;                                                          \
            KQ_CASES(CALL)                                                                                                            \
        }                                                                                                                             \
    }
#define Q4K_CALL(T, F) q45k_row_tile(row, x, n, out + r, ldo, T, F, false)
#define Q5K_CALL(T, F) q45k_row_tile(row, x, n, out + r, ldo, T, F, true)
#define Q6K_CALL(T, F) q6k_row_tile(row, x, n, out + r, ldo, T, F)
KQ_TILE_DEF(q4_K_tile, Q4K_CALL)
KQ_TILE_DEF(q5_K_tile, Q5K_CALL)
KQ_TILE_DEF(q6_K_tile, Q6K_CALL)
#undef Q4K_CALL
#undef Q5K_CALL
#undef Q6K_CALL
#undef KQ_TILE_DEF
#undef KQ_CASE
#undef KQ_CASES
#undef KQ_SUFFIX
#undef KQ_STORAGE
#undef KQ_ACC

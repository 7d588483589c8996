/* kquant_block.h — the per-block preambles of the K-quant integer dots
 * (AVX2 and AVX-512 share them). q4_K: the 8 six-bit sub-block scales as
 * int16, and the mins' part of the block's sum, min_j * (sum of x over
 * sub-block j) for j = 0..7 folded into 4 floats (summed with the block's
 * dmin * d_x). q6_K: the 16 scales as int16 and the offset's part,
 * -32 * scale_j * (sum of x over the 16 of sub-block j), in 8 int32 lanes.
 * Each comes split in its weight part (once per block) and its token part,
 * so the K-quant tiles decode a block's scales once for all their tokens. */
#ifndef KVB_X86_KQUANT_BLOCK_H
#define KVB_X86_KQUANT_BLOCK_H

#include "../quant.h"

#include <immintrin.h>
#include <string.h>

/* The 8 scales (returned) and mins (*mins) of a q4_K block as int16. */
static inline __m128i q4k_scales_mins(const struct block_q4_K *bk, __m128i *mins) {
    uint32_t u[3];
    memcpy(u, bk->scales, 12);
    /* the 8 scales and mins as bytes (kvb_q4k_scale_min, four at a time) */
    const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, mn_lo = u[1] & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    const uint32_t mn_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    *mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)mn_hi, (int)mn_lo));
    return _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo));
}

/* The mins' part of a block's sum for one token (x's sums per 16). */
static inline __m128 q4k_mins_part(__m128i mins, const int16_t *xsum16) {
    const __m128i bsum = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xsum16), _mm_loadu_si128((const __m128i *)(xsum16 + 8))); /* per 32 */
    return _mm_cvtepi32_ps(_mm_madd_epi16(mins, bsum));
}

static inline __m128i q4k_block_scales(const struct block_q4_K *bk, const int16_t *xsum16, __m128 *mins_part) {
    __m128i mins;
    const __m128i sc = q4k_scales_mins(bk, &mins);
    *mins_part = q4k_mins_part(mins, xsum16);
    return sc;
}

/* q6_K's offset part for one token, from the block's 16 scales as int16. */
static inline __m256i q6k_offset_part(__m256i sc16, const int16_t *xsum16) {
    const __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)xsum16));
    return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
}

static inline __m256i q6k_block_scales(const struct block_q6_K *bk, const int16_t *xsum16, __m256i *offset_part) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)bk->scales));
    *offset_part = q6k_offset_part(sc16, xsum16);
    return sc16;
}

#endif

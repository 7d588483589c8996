/*
 * transpose_avx512.h — the register transpose the int8 tiles share: 16 rows'
 * 32 bytes (a 32-element block) as 8 dwords each, turned so that register k
 * holds dword k of every row, lane j row j (dot_vnni.c's weight rows,
 * attn_vnni.c's keys). AVX-512F only.
 */
#ifndef KVB_TRANSPOSE_AVX512_H
#define KVB_TRANSPOSE_AVX512_H

#include <immintrin.h>

/* z[0..7], each 16 dwords (rows j in the low half and j + 8 in the high
 * half, dwords 0-7 of each), to z[k] = dword k of rows 0..15. */
static inline __attribute__((always_inline)) void kvb_transpose_8x8_halves(__m512i z[8]) {
    const __m512i a0 = _mm512_unpacklo_epi32(z[0], z[1]), a1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i a2 = _mm512_unpacklo_epi32(z[2], z[3]), a3 = _mm512_unpackhi_epi32(z[2], z[3]);
    const __m512i a4 = _mm512_unpacklo_epi32(z[4], z[5]), a5 = _mm512_unpackhi_epi32(z[4], z[5]);
    const __m512i a6 = _mm512_unpacklo_epi32(z[6], z[7]), a7 = _mm512_unpackhi_epi32(z[6], z[7]);
    const __m512i b0 = _mm512_unpacklo_epi64(a0, a2), b1 = _mm512_unpackhi_epi64(a0, a2);
    const __m512i b2 = _mm512_unpacklo_epi64(a1, a3), b3 = _mm512_unpackhi_epi64(a1, a3);
    const __m512i b4 = _mm512_unpacklo_epi64(a4, a6), b5 = _mm512_unpackhi_epi64(a4, a6);
    const __m512i b6 = _mm512_unpacklo_epi64(a5, a7), b7 = _mm512_unpackhi_epi64(a5, a7);
    /* 128-bit lanes [x0, y0, x2, y2] and [x1, y1, x3, y3] */
    const __m512i lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0), hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    z[0] = _mm512_permutex2var_epi64(b0, lo, b4);
    z[4] = _mm512_permutex2var_epi64(b0, hi, b4);
    z[1] = _mm512_permutex2var_epi64(b1, lo, b5);
    z[5] = _mm512_permutex2var_epi64(b1, hi, b5);
    z[2] = _mm512_permutex2var_epi64(b2, lo, b6);
    z[6] = _mm512_permutex2var_epi64(b2, hi, b6);
    z[3] = _mm512_permutex2var_epi64(b3, lo, b7);
    z[7] = _mm512_permutex2var_epi64(b3, hi, b7);
}

#endif

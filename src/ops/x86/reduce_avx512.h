/*
 * reduce_avx512.h — the 16-way transpose-reduction shared by the AVX-512
 * attention and dot kernels (include only from files built with -mavx512f).
 */
#ifndef KVB_REDUCE_AVX512_H
#define KVB_REDUCE_AVX512_H

#include <immintrin.h>

/* Sums each of 16 vectors: returns E with E[4*l + e] = sum(A[4*e + l]).
 * Four levels of lane shuffles and adds (45 ops for 16 dot products instead
 * of 16 separate horizontal reductions). */
static inline __attribute__((always_inline)) __m512 kvb_reduce16_avx512(const __m512 *A) {
    __m512 B[8], C[4];
    for (int k = 0; k < 8; k++)
        B[k] = _mm512_add_ps(_mm512_shuffle_f32x4(A[2 * k], A[2 * k + 1], 0x44), _mm512_shuffle_f32x4(A[2 * k], A[2 * k + 1], 0xEE));
    for (int m = 0; m < 4; m++)
        C[m] = _mm512_add_ps(_mm512_shuffle_f32x4(B[2 * m], B[2 * m + 1], 0x88), _mm512_shuffle_f32x4(B[2 * m], B[2 * m + 1], 0xDD));
    __m512 D0 = _mm512_add_ps(_mm512_shuffle_ps(C[0], C[1], 0x44), _mm512_shuffle_ps(C[0], C[1], 0xEE));
    __m512 D1 = _mm512_add_ps(_mm512_shuffle_ps(C[2], C[3], 0x44), _mm512_shuffle_ps(C[2], C[3], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(D0, D1, 0x88), _mm512_shuffle_ps(D0, D1, 0xDD));
}

#endif

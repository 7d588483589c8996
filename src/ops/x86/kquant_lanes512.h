/* kquant_lanes512.h — the scale lanes of the AVX-512 K-quant dots and
 * tiles (dot_avx512.c, kquant_tile512.h): int16 lanes, 8 each of the
 * sub-block scales a, b, c, d, for vpmaddwd against 32 int16 pair sums. */
#ifndef KVB_X86_KQUANT_LANES512_H
#define KVB_X86_KQUANT_LANES512_H

#include <immintrin.h>

static inline __m512i scale_lanes(__m512i sc16, int a, int b, int c, int d) { /* int16 lanes: 8 each of a, b, c, d */
    const __m512i idx = _mm512_set_epi16(d, d, d, d, d, d, d, d, c, c, c, c, c, c, c, c, b, b, b, b, b, b, b, b, a, a, a, a, a, a, a, a);
    return _mm512_permutexvar_epi16(idx, sc16);
}

#endif

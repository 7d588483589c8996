/*
 * simd_width.h — one set of names for the vector operations of the kernel
 * bodies AVX2 and AVX-512 share (attn_width.h, dot_width.h). A file defines
 * KVB_W, the f32 lanes of a vector — 8 (AVX2, __m256) or 16 (AVX-512,
 * __m512) — and includes this after <immintrin.h>; a shared body then
 * names its vectors VF and VI, its operations V_*, and its functions
 * KVB_WFN(name): name_avx2 or name_avx512.
 *
 * Each name stands for exactly the intrinsic the family's own copy of the
 * body called, so a body compiles to the family's former instructions and
 * its results keep their bits. V_HSUM is each family's own reduction order
 * (AVX2: halves, then pairs, then the last two; AVX-512: the compiler's
 * _mm512_reduce_add_ps), not a common one.
 */
#ifndef KVB_X86_SIMD_WIDTH_H
#define KVB_X86_SIMD_WIDTH_H

#include <immintrin.h>

#define KVB_WCAT_(a, b) a##_##b
#define KVB_WCAT(a, b) KVB_WCAT_(a, b)
#define KVB_WFN(name) KVB_WCAT(name, KVB_W_ISA)

#if KVB_W == 8

/* The sum of a's 8 lanes: halves, then pairs, then the last two. */
static inline float kvb_hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#define KVB_W_ISA avx2
#define VF __m256
#define VI __m256i
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STOREU(p, v) _mm256_storeu_ps(p, v)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_FMADD(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_HSUM(v) kvb_hsum8(v)
#define V_CVT_I32(v) _mm256_cvtepi32_ps(v)
/* W halves at p to f32, and back (stored at p) */
#define V_LOAD_PH(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define V_STORE_PH(p, v) _mm_storeu_si128((__m128i *)(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT))
/* W bytes at p as int32 lanes: signed, unsigned; and the signed ones as f32 */
#define VI_LOAD_I8(p) _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
#define VI_LOAD_U8(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
#define V_LOAD_I8(p) _mm256_cvtepi32_ps(VI_LOAD_I8(p))
#define VI_SET1_32(x) _mm256_set1_epi32(x)
#define VI_AND(a, b) _mm256_and_si256(a, b)
#define VI_OR(a, b) _mm256_or_si256(a, b)
#define VI_SUB32(a, b) _mm256_sub_epi32(a, b)
#define VI_SLL32(a, n) _mm256_slli_epi32(a, n)
#define VI_SRL32(a, n) _mm256_srli_epi32(a, n)

#elif KVB_W == 16

#define KVB_W_ISA avx512
#define VF __m512
#define VI __m512i
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STOREU(p, v) _mm512_storeu_ps(p, v)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_FMADD(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_HSUM(v) _mm512_reduce_add_ps(v)
#define V_CVT_I32(v) _mm512_cvtepi32_ps(v)
#define V_LOAD_PH(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define V_STORE_PH(p, v) _mm256_storeu_si256((__m256i *)(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT))
#define VI_LOAD_I8(p) _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p)))
#define VI_LOAD_U8(p) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p)))
#define V_LOAD_I8(p) _mm512_cvtepi32_ps(VI_LOAD_I8(p))
#define VI_SET1_32(x) _mm512_set1_epi32(x)
#define VI_AND(a, b) _mm512_and_si512(a, b)
#define VI_OR(a, b) _mm512_or_si512(a, b)
#define VI_SUB32(a, b) _mm512_sub_epi32(a, b)
#define VI_SLL32(a, n) _mm512_slli_epi32(a, n)
#define VI_SRL32(a, n) _mm512_srli_epi32(a, n)

#else
#error "simd_width.h: define KVB_W as 8 (AVX2) or 16 (AVX-512)"
#endif

#endif

/*
 * dot_vnni.c — Q8_0 rows against int8 activations with AVX-512 VNNI
 * (vpdpbusd on 256-bit vectors: u8 x s8 -> s32). The activation's sign is
 * moved onto the weights (sign_epi8) so the unsigned operand is |x|. One
 * 32-element block per step: d_w * d_x * sum(w * x). Compiled with
 * -mavx512vnni -mavx512vl; used (through kvb_dot_avx512vnni in
 * dot_avx512.c) only when CPUID reports AVX512_VNNI.
 */
#include "../matmul.h"
#include "../quant.h"

#include "prefetch.h"

#include <immintrin.h>

float kvb_dot_q8_0_q8_vnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q8_0_q8_vnni(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q8_0 *b = row;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        prefetch_ahead(&b[i], 1); /* the row streams from memory: 4 KB ahead */
        __m256i w = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i a = _mm256_loadu_si256((const __m256i *)(x->q + i * QK8_0));
        __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(a, a), _mm256_sign_epi8(w, a));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(_cvtsh_ss(b[i].d) * x->d[i]), acc);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}


/*
 * dot_vnni.c — Q8_0 rows against int8 activations with AVX-512 VNNI
 * (vpdpbusd: u8 x s8 -> s32): the activations offset to unsigned, two
 * 32-element blocks per 512-bit step (q8_tile_fixed below). The
 * lone dot is the 1 x 1 case of the batched-decode tile. Compiled with
 * -mavx512vnni -mavx512vl; used (through kvb_dot_avx512vnni in
 * dot_avx512.c) only when CPUID reports AVX512_VNNI.
 */
#include "../matmul.h"
#include "../quant.h"

#include "prefetch.h"

#include <immintrin.h>

/* The block pair's two values in lanes 0-7 and 8-15. */
static inline __m512 pair_lanes(__m128 v) {
    const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

/* NR <= 4 rows x NT <= 4 tokens, two 32-element blocks per 512-bit step
 * (lanes 0-7 block i, 8-15 block i + 1; an odd last block runs with the
 * upper half zero). The activations are offset to unsigned (x + 128, an
 * xor) so vpdpbusd takes the weights as they are; each row's lanes start
 * from -128 * sum(w), computed once per row and step, so the int32 lane
 * sums are exactly sum(w * x). Per pair and step: one vpdpbusd, one
 * conversion, one multiply for d_w * d_x (the IEEE product a scalar would
 * give, lane-wise) and one FMA; 16 accumulators fit the 32 registers. Each
 * weight block is loaded once for the tile's tokens, each activation block
 * once for its rows. Every pair runs the same operations in the same order
 * whatever the tile's shape, and the lone dot is the 1 x 1 tile, so a
 * token's result does not depend on the tile it shares: batch equals single. */
static inline __attribute__((always_inline)) void q8_tile_fixed(const void *rows, size_t row_bytes, const struct kvb_q8_act *x, int64_t n,
                                                                 float *out, int64_t ldo, const int NR, const int NT, const bool first) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc[4][4];
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
    const int64_t nb = n / QK8_0;
    for (int64_t i = 0; i < nb; i += 2) {
        const bool two = i + 1 < nb;
        __m512i xu[4];
        __m512 dx[4];
        for (int t = 0; t < NT; t++) {
            const int8_t *q = x[t].q + i * QK8_0;
            const __m512i raw = two ? _mm512_loadu_si512((const void *)q) : _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)q));
            xu[t] = _mm512_xor_si512(raw, flip);
            if (!two) xu[t] = _mm512_inserti64x4(xu[t], _mm256_setzero_si256(), 1);
            dx[t] = pair_lanes(two ? _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(x[t].d + i))) : _mm_load_ss(x[t].d + i));
        }
        for (int r = 0; r < NR; r++) {
            const struct block_q8_0 *b = (const struct block_q8_0 *)((const uint8_t *)rows + (size_t)r * row_bytes) + i;
            if (NR == 1) prefetch_ahead(b, 68); /* the rows stream from memory: 4 KB ahead */
            else if (first) { /* the next tile's rows at this offset */
                _mm_prefetch((const char *)b + (size_t)NR * row_bytes, _MM_HINT_T0);
                _mm_prefetch((const char *)b + (size_t)NR * row_bytes + 64, _MM_HINT_T0);
            }
            __m512i w = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[0].qs));
            w = _mm512_inserti64x4(w, two ? _mm256_loadu_si256((const __m256i *)b[1].qs) : _mm256_setzero_si256(), 1);
            const __m512i base = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, w));
            const uint32_t dd = (uint32_t)b[0].d | (two ? (uint32_t)b[1].d << 16 : 0u);
            const __m512 dw = pair_lanes(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dd)));
            for (int t = 0; t < NT; t++) {
                const __m512i s = _mm512_dpbusd_epi32(base, xu[t], w);
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, dx[t]), acc[r][t]);
            }
        }
    }
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < NR; r++) out[(size_t)t * (size_t)ldo + (size_t)r] = _mm512_reduce_add_ps(acc[r][t]);
}

void kvb_q8_tile_vnni(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                      bool first);
void kvb_q8_tile_vnni(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                      bool first) {
    switch (nr * 8 + nt) { /* constant shapes: the accumulators live in registers */
#define Q8_CASE(R, T) case R * 8 + T: q8_tile_fixed(rows, row_bytes, x, n, out, ldo, R, T, first); break;
    Q8_CASE(1, 1) Q8_CASE(1, 2) Q8_CASE(1, 3) Q8_CASE(1, 4) Q8_CASE(2, 1) Q8_CASE(2, 2) Q8_CASE(2, 3) Q8_CASE(2, 4)
    Q8_CASE(3, 1) Q8_CASE(3, 2) Q8_CASE(3, 3) Q8_CASE(3, 4) Q8_CASE(4, 1) Q8_CASE(4, 2) Q8_CASE(4, 3) Q8_CASE(4, 4)
#undef Q8_CASE
    default: break;
    }
}

float kvb_dot_q8_0_q8_vnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q8_0_q8_vnni(const void *row, const struct kvb_q8_act *x, int64_t n) {
    float out;
    q8_tile_fixed(row, 0, x, n, &out, 1, 1, 1, false);
    return out;
}

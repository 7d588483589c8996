/*
 * dot_avx512.c — AVX-512 dot products of weight rows with f32 x. Quantized
 * blocks are expanded in registers (int8/nibbles -> int32 -> f32) and
 * multiplied with x by FMA; per-block scales are applied once per block.
 * Every row loop prefetches PREFETCH_AHEAD bytes ahead (prefetch.h): on
 * Intel (Emerald Rapids) the f16 dot without it read 14 GB/s of the 25 a
 * decode can (F16 decode 6.6 -> 9.5 tok/s, docs/BENCHMARKS.md). The q8_0
 * and q6_K dots are dot_width.h's bodies at 16 lanes (AVX2 has them at 8).
 * The K-quant integer dots (q4_K, q5_K, q6_K against int8 activations)
 * come with tiles (kq_tile) for batched decode: several tokens share one
 * unpacking of each weight block, each pair keeping the lone dot's bits.
 */
#include "../matmul.h"
#include "../quant.h"

#include "prefetch.h"
#include "kquant_block.h"
#include "kquant_lanes512.h"
#include "reduce_avx512.h"
#include "x86_kernels.h"

#include <immintrin.h>
#include <string.h>

#define KVB_W 16
#include "dot_width.h" /* dot_q8_0_avx512, dot_q6_K_avx512 */

static inline __mmask16 tmask(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

static float dot_f32_avx512(const void *row, const float *x, int64_t n) {
    const float *w = row;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        prefetch_ahead(w + i, 256);
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 32), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 48), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i < n; i += 16) {
        __mmask16 m = tmask(n - i);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_maskz_loadu_ps(m, x + i), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

static float dot_f16_avx512(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        prefetch_ahead(w + i, 64);
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i))), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i + 16))), _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = tmask(n - i);
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + i)), _mm512_maskz_loadu_ps(m, x + i), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static inline __m512 bf16x16(const uint16_t *p, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

static float dot_bf16_avx512(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        prefetch_ahead(w + i, 64);
        a0 = _mm512_fmadd_ps(bf16x16(w + i, 0xffff), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(bf16x16(w + i + 16, 0xffff), _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = tmask(n - i);
        a0 = _mm512_fmadd_ps(bf16x16(w + i, m), _mm512_maskz_loadu_ps(m, x + i), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static float dot_q4_0_avx512(const void *row, const float *x, int64_t n) {
    const struct block_q4_0 *b = row;
    const __m512i eight = _mm512_set1_epi32(8), lo4 = _mm512_set1_epi32(0xF);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)b[i].qs));
        __m512 lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(q, lo4), eight));
        __m512 hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight));
        __m512 p = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(x)));
        acc = _mm512_fmadd_ps(p, _mm512_set1_ps(kvb_f16_to_f32(b[i].d)), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static float dot_q4_K_avx512(const void *row, const float *x, int64_t n) {
    const struct block_q4_K *b = row;
    const __m512i lo4 = _mm512_set1_epi32(0xF);
    float total = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = kvb_f16_to_f32(b[i].d), dmin = kvb_f16_to_f32(b[i].dmin);
        __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
        const uint8_t *q = b[i].qs;
        for (int j = 0; j < 4; j++, q += 32, x += 64) {
            uint8_t s1, m1, s2, m2;
            kvb_q4k_scale_min(2 * j, b[i].scales, &s1, &m1);
            kvb_q4k_scale_min(2 * j + 1, b[i].scales, &s2, &m2);
            for (int h = 0; h < 2; h++) { /* 16 bytes of qs: 16 low-nibble and 16 high-nibble elements */
                __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + 16 * h)));
                __m512 xl = _mm512_loadu_ps(x + 16 * h), xh = _mm512_loadu_ps(x + 32 + 16 * h);
                __m512 ql = _mm512_cvtepi32_ps(_mm512_and_si512(v, lo4)), qh = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
                acc = _mm512_fmadd_ps(_mm512_mul_ps(ql, _mm512_set1_ps(d * s1)), xl, acc);
                acc = _mm512_fmadd_ps(_mm512_mul_ps(qh, _mm512_set1_ps(d * s2)), xh, acc);
                accm = _mm512_fmadd_ps(_mm512_set1_ps(dmin * m1), xl, accm);
                accm = _mm512_fmadd_ps(_mm512_set1_ps(dmin * m2), xh, accm);
            }
        }
        total += _mm512_reduce_add_ps(_mm512_sub_ps(acc, accm));
    }
    return total;
}

/* The prefill micro-kernel (matmul.h, kvb_panel_fn): the panel's 32 rows
 * in two vectors times up to 12 tokens, 24 accumulators; per k two loads,
 * one broadcast per token and two FMAs per token. Each lane is the
 * contract's single FMA chain over k. */
#define TILE_TOKENS 12
static inline __attribute__((always_inline)) void panel_tile(const float *wp, int64_t n, const float *x, int64_t ldx, float *y,
                                                             int64_t ldy, __mmask16 m0, __mmask16 m1, const int NT) {
    __m512 a0[TILE_TOKENS], a1[TILE_TOKENS];
    for (int t = 0; t < NT; t++) a0[t] = a1[t] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k++) {
        const __m512 w0 = _mm512_loadu_ps(wp + k * KVB_PANEL_ROWS), w1 = _mm512_loadu_ps(wp + k * KVB_PANEL_ROWS + 16);
        for (int t = 0; t < NT; t++) {
            const __m512 b = _mm512_set1_ps(x[t * ldx + k]);
            a0[t] = _mm512_fmadd_ps(w0, b, a0[t]);
            a1[t] = _mm512_fmadd_ps(w1, b, a1[t]);
        }
    }
    for (int t = 0; t < NT; t++) {
        _mm512_mask_storeu_ps(y + t * ldy, m0, a0[t]);
        _mm512_mask_storeu_ps(y + t * ldy + 16, m1, a1[t]);
    }
}

static void panel_avx512(const float *wp, int64_t n, const float *x, int64_t ldx, int nt, float *y, int64_t ldy, int nr) {
    const __mmask16 m0 = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? (__mmask16)0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
    int t = 0;
    for (; t + TILE_TOKENS <= nt; t += TILE_TOKENS) panel_tile(wp, n, x + t * ldx, ldx, y + t * ldy, ldy, m0, m1, TILE_TOKENS);
    switch (nt - t) { /* constant shapes: the accumulators stay in registers */
#define TAIL(T) case T: panel_tile(wp, n, x + t * ldx, ldx, y + t * ldy, ldy, m0, m1, T); break;
    TAIL(1) TAIL(2) TAIL(3) TAIL(4) TAIL(5) TAIL(6) TAIL(7) TAIL(8) TAIL(9) TAIL(10) TAIL(11)
#undef TAIL
    default: break;
    }
}

/* q4_K and q6_K rows against int8 activations in Q8_K form (matmul.h), 64
 * bytes at a time (AVX-512BW): the nibbles of 32 bytes of q4_K, low then
 * high, are the 64 elements of two sub-blocks in x's order, so one maddubs
 * (u8 weights x s8 activations: at most 2 * 63 * 127, no saturation) and
 * one madd against the sub-blocks' int16 scales (vpermw) give 16 int32
 * partial sums. Mins and q6_K's offset of 32 come from x's sums per 16,
 * as in the AVX2 kernels; the block's sum takes one FMA with d_w * d_x. */

static float dot_q4_K_q8_avx512(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q4_K *b = row;
    const __m512i m4 = _mm512_set1_epi8(0xF);
    __m512 acc = _mm512_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct block_q4_K *bk = &b[i];
        const int8_t *xq = x->q + i * QK_K;
        prefetch_ahead(bk, sizeof *bk);
        __m128 summ;
        const __m512i sc16 = _mm512_castsi128_si512(q4k_block_scales(bk, x->s + i * 16, &summ)); /* the 8 scales as int16 */
        __m512i sumi = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) { /* 64 bytes of qs: sub-blocks 4h .. 4h + 3 */
            const __m512i q = _mm512_loadu_si512((const void *)(bk->qs + 64 * h));
            const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            const __m512i u0 = _mm512_shuffle_i64x2(lo, hi, 0x44), u1 = _mm512_shuffle_i64x2(lo, hi, 0xEE);
            const __m512i p0 = _mm512_maddubs_epi16(u0, _mm512_loadu_si512((const void *)(xq + 128 * h)));
            const __m512i p1 = _mm512_maddubs_epi16(u1, _mm512_loadu_si512((const void *)(xq + 128 * h + 64)));
            const int s = 4 * h;
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p0, scale_lanes(sc16, s, s, s + 1, s + 1)));
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p1, scale_lanes(sc16, s + 2, s + 2, s + 3, s + 3)));
        }
        const float dx = x->d[i];
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(_cvtsh_ss(bk->d) * dx), acc);
        accm = _mm_fmadd_ps(summ, _mm_set1_ps(_cvtsh_ss(bk->dmin) * dx), accm);
    }
    __m128 m = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm512_reduce_add_ps(acc) - _mm_cvtss_f32(m);
}

/* q5_K: q4_K's kernel with the fifth bits: the 64 bytes of qs hold sub-blocks
 * 4h, 4h + 2 in their low nibbles and 4h + 1, 4h + 3 in their high ones, so
 * qh (bits 4h.., the low 256 bits) and qh >> 2 (the high) give both halves'
 * bits at once, moved to 16. */
static float dot_q5_K_q8_avx512(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q5_K *b = row;
    const __m512i m4 = _mm512_set1_epi8(0xF), k16 = _mm512_set1_epi8(16);
    __m512 acc = _mm512_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct block_q5_K *bk = &b[i];
        const int8_t *xq = x->q + i * QK_K;
        prefetch_ahead(bk, sizeof *bk);
        __m128 summ;
        const __m512i sc16 = _mm512_castsi128_si512(q4k_block_scales((const struct block_q4_K *)(const void *)bk, x->s + i * 16, &summ));
        const __m256i qh256 = _mm256_loadu_si256((const __m256i *)bk->qh);
        __m512i qh = _mm512_inserti64x4(_mm512_castsi256_si512(qh256), _mm256_srli_epi16(qh256, 2), 1);
        __m512i sumi = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) { /* 64 bytes of qs: sub-blocks 4h .. 4h + 3 */
            const __m512i q = _mm512_loadu_si512((const void *)(bk->qs + 64 * h));
            const __m512i lo = _mm512_or_si512(_mm512_and_si512(q, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), k16));
            const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4), _mm512_and_si512(_mm512_slli_epi16(qh, 3), k16));
            qh = _mm512_srli_epi16(qh, 4);
            const __m512i u0 = _mm512_shuffle_i64x2(lo, hi, 0x44), u1 = _mm512_shuffle_i64x2(lo, hi, 0xEE);
            const __m512i p0 = _mm512_maddubs_epi16(u0, _mm512_loadu_si512((const void *)(xq + 128 * h)));
            const __m512i p1 = _mm512_maddubs_epi16(u1, _mm512_loadu_si512((const void *)(xq + 128 * h + 64)));
            const int s = 4 * h;
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p0, scale_lanes(sc16, s, s, s + 1, s + 1)));
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p1, scale_lanes(sc16, s + 2, s + 2, s + 3, s + 3)));
        }
        const float dx = x->d[i];
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(_cvtsh_ss(bk->d) * dx), acc);
        accm = _mm_fmadd_ps(summ, _mm_set1_ps(_cvtsh_ss(bk->dmin) * dx), accm);
    }
    __m128 m = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm512_reduce_add_ps(acc) - _mm_cvtss_f32(m);
}

/* iq4_xs: two sub-blocks of 32 per 64 bytes: their 32 bytes of nibbles as
 * lanes (low, high) of each, the values by vpshufb from the table in every
 * lane, then the sign trick (no vpsignb here: the activations' signs as a
 * mask negate the values), maddubs (at most 2 * 127 * 127) and madd give 8
 * int32 per sub-block, times its ls - 32 in integers; one FMA per 256. */
static float dot_iq4_xs_q8_avx512(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_iq4_xs *b = row;
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kvb_kvalues_iq4nl));
    const __m512i m4 = _mm512_set1_epi8(0xF), ones = _mm512_set1_epi16(1);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct block_iq4_xs *bk = &b[i];
        const int8_t *xq = x->q + i * QK_K;
        prefetch_ahead(bk, sizeof *bk);
        __m512i sumi = _mm512_setzero_si512();
        for (int k = 0; k < 4; k++) { /* sub-blocks 2k, 2k + 1 */
            const __m256i r = _mm256_loadu_si256((const __m256i *)(bk->qs + 32 * k));
            const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(r), _mm256_srli_epi16(r, 4), 1); /* lanes r0, r1, r0>>4, r1>>4 */
            const __m512i nib = _mm512_and_si512(_mm512_shuffle_i64x2(both, both, 0xD8), m4);               /* r0, r0>>4, r1, r1>>4 */
            const __m512i w = _mm512_shuffle_epi8(table, nib);
            const __m512i a = _mm512_loadu_si512((const void *)(xq + 64 * k));
            const __mmask64 neg = _mm512_movepi8_mask(a);
            const __m512i ws = _mm512_mask_sub_epi8(w, neg, _mm512_setzero_si512(), w);
            const __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(a), ws), ones);
            const __m512i sc = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(kvb_iq4xs_ls(bk, 2 * k) - 32),
                                                       _mm512_set1_epi32(kvb_iq4xs_ls(bk, 2 * k + 1) - 32));
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(p, sc));
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(_cvtsh_ss(bk->d) * x->d[i]), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static float dot_q6_K_q8_avx512(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q6_K *b = row;
    const __m512i m4 = _mm512_set1_epi8(0xF), m2 = _mm512_set1_epi8(3);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct block_q6_K *bk = &b[i];
        const int8_t *xq = x->q + i * QK_K;
        prefetch_ahead(bk, sizeof *bk);
        __m256i offset;
        const __m256i sc16y = q6k_block_scales(bk, x->s + i * 16, &offset);
        __m512i sumi = _mm512_inserti64x4(_mm512_castsi256_si512(offset), _mm256_setzero_si256(), 1); /* from q6_K's offset of 32 */
        const __m512i sc16 = _mm512_castsi256_si512(sc16y);
        for (int h = 0; h < 2; h++) { /* 128 elements: ql 64 bytes, qh 32 */
            const __m512i a = _mm512_loadu_si512((const void *)(bk->ql + 64 * h));
            const __m256i hv = _mm256_loadu_si256((const __m256i *)(bk->qh + 32 * h));
            const __m512i h12 = _mm512_inserti64x4(_mm512_castsi256_si512(hv), _mm256_srli_epi16(hv, 2), 1);
            const __m512i h34 = _mm512_srli_epi16(h12, 4);
            const __m512i q12 = _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_slli_epi16(_mm512_and_si512(h12, m2), 4));
            const __m512i q34 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), m4), _mm512_slli_epi16(_mm512_and_si512(h34, m2), 4));
            const __m512i p12 = _mm512_maddubs_epi16(q12, _mm512_loadu_si512((const void *)(xq + 128 * h)));
            const __m512i p34 = _mm512_maddubs_epi16(q34, _mm512_loadu_si512((const void *)(xq + 128 * h + 64)));
            const int s = 8 * h;
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p12, scale_lanes(sc16, s, s + 1, s + 2, s + 3)));
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p34, scale_lanes(sc16, s + 4, s + 5, s + 6, s + 7)));
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(_cvtsh_ss(bk->d) * x->d[i]), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* K-quant tiles: kquant_tile512.h's bodies with madd + add (dot_vnni.c has
 * them with vpdpwssd, the same integers). */
#define KQ_SUFFIX(name) name##_avx512
#define KQ_STORAGE static
#define KQ_ACC(sumi, p, sl) _mm512_add_epi32(sumi, _mm512_madd_epi16(p, sl))
#include "kquant_tile512.h" /* q4_K_tile_avx512, q5_K_tile_avx512, q6_K_tile_avx512 */


/* kvb_quant_block_fn, 16 lanes at a time: as kvb_quant_block_avx2 (max_ps
 * skips NaNs as the reference does; vpmovdb keeps the low byte, a NaN's 0). */
static void quant_block_avx512(const float *x, int len, float *d, int8_t *q) {
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < len; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), m);
    const float amax = _mm512_reduce_max_ps(m);
    const float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0.0f;
    *d = s;
    const __m512 vinv = _mm512_set1_ps(inv);
    for (int i = 0; i < len; i += 16)
        _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv))));
}

/* The avx512 and avx512vnni families' weight kernels. The packing and the
 * q4_0 integer dot (and Q8_0's without VNNI) are AVX2's, dot_avx2.c (AVX2
 * runs on every AVX-512 CPU; 512-bit versions are not written: no machine
 * here to test them); with VNNI, Q8_0 goes a row per lane (dot_vnni.c). */
const struct kvb_dot_kernels kvb_dot_avx512 = {
    .panel = panel_avx512,
    .pack = kvb_pack_panel_avx2,
    .name = "avx512",
    .quant_block = quant_block_avx512,
    .kq_tile = {[GGML_TYPE_Q4_K] = q4_K_tile_avx512, [GGML_TYPE_Q5_K] = q5_K_tile_avx512, [GGML_TYPE_Q6_K] = q6_K_tile_avx512},
    .kq_tile_rows = 4, /* a row at a time: any count */
    .kq_tile_tokens = KQ_TILE_TOKENS,
    .kq_tile_prompts = true, /* Q4_K_M prefill at 256-token chunks 0.96x the panels', at 4 6.6x (Zen 4, 2026-12-07) */
    .dot_q8 = {
        [GGML_TYPE_Q8_0] = kvb_dot_q8_0_q8_avx2, [GGML_TYPE_Q4_0] = kvb_dot_q4_0_q8_avx2, [GGML_TYPE_Q5_0] = kvb_dot_q5_0_q8_avx2, [GGML_TYPE_Q4_K] = dot_q4_K_q8_avx512,
        [GGML_TYPE_Q4_1] = kvb_dot_q4_1_q8_avx2, [GGML_TYPE_Q5_1] = kvb_dot_q5_1_q8_avx2,
        [GGML_TYPE_IQ4_NL] = kvb_dot_iq4_nl_q8_avx2, [GGML_TYPE_IQ4_XS] = dot_iq4_xs_q8_avx512, [GGML_TYPE_MXFP4] = kvb_dot_mxfp4_q8_avx2,
        [GGML_TYPE_Q5_K] = dot_q5_K_q8_avx512, [GGML_TYPE_Q6_K] = dot_q6_K_q8_avx512,
    },
    .dot = {
        [GGML_TYPE_F32] = dot_f32_avx512, [GGML_TYPE_F16] = dot_f16_avx512, [GGML_TYPE_BF16] = dot_bf16_avx512,
        [GGML_TYPE_Q8_0] = dot_q8_0_avx512, [GGML_TYPE_Q4_0] = dot_q4_0_avx512, [GGML_TYPE_Q5_0] = kvb_dot_q5_0_ref, [GGML_TYPE_Q4_K] = dot_q4_K_avx512,
        [GGML_TYPE_Q4_1] = kvb_dot_q4_1_ref, [GGML_TYPE_Q5_1] = kvb_dot_q5_1_ref,
        [GGML_TYPE_IQ4_NL] = kvb_dot_iq4_nl_ref, [GGML_TYPE_IQ4_XS] = kvb_dot_iq4_xs_ref, [GGML_TYPE_MXFP4] = kvb_dot_mxfp4_ref,
        [GGML_TYPE_Q5_K] = kvb_dot_q5_K_ref, [GGML_TYPE_Q6_K] = dot_q6_K_avx512,
    },
};

const struct kvb_dot_kernels kvb_dot_avx512vnni = {
    .panel = panel_avx512,
    .pack = kvb_pack_panel_avx2,
    .name = "avx512-vnni",
    .quant_block = quant_block_avx512,
    .q8_tile = kvb_q8_tile_vnni,
    .q8_tile_rows = 16,     /* a row per lane */
    .q8_tile_rows_one = 16, /* one token too: the bits are the tile's (dot_vnni.c) */
    .q8_tile_tokens = 16,
    .q8_tile_prompts = true,
    .kq_tile = {[GGML_TYPE_Q4_K] = kvb_q4_K_tile_vnni, [GGML_TYPE_Q5_K] = kvb_q5_K_tile_vnni, [GGML_TYPE_Q6_K] = kvb_q6_K_tile_vnni}, /* dot_vnni.c */
    .kq_tile_rows = 4,
    .kq_tile_tokens = KQ_TILE_TOKENS,
    .kq_tile_prompts = true, /* Q4_K_M prefill at 256-token chunks 1.07x the panels', at 4 7x (Zen 4, 2026-12-07) */
    .dot_q8 = {
        [GGML_TYPE_Q8_0] = kvb_dot_q8_0_q8_vnni, [GGML_TYPE_Q4_0] = kvb_dot_q4_0_q8_avx2, [GGML_TYPE_Q5_0] = kvb_dot_q5_0_q8_vnni, [GGML_TYPE_Q4_K] = dot_q4_K_q8_avx512,
        [GGML_TYPE_Q4_1] = kvb_dot_q4_1_q8_avx2, [GGML_TYPE_Q5_1] = kvb_dot_q5_1_q8_avx2,
        [GGML_TYPE_IQ4_NL] = kvb_dot_iq4_nl_q8_vnni, [GGML_TYPE_IQ4_XS] = dot_iq4_xs_q8_avx512, [GGML_TYPE_MXFP4] = kvb_dot_mxfp4_q8_vnni,
        [GGML_TYPE_Q5_K] = dot_q5_K_q8_avx512, [GGML_TYPE_Q6_K] = dot_q6_K_q8_avx512,
    },
    .dot = {
        [GGML_TYPE_F32] = dot_f32_avx512, [GGML_TYPE_F16] = dot_f16_avx512, [GGML_TYPE_BF16] = dot_bf16_avx512,
        [GGML_TYPE_Q8_0] = dot_q8_0_avx512, [GGML_TYPE_Q4_0] = dot_q4_0_avx512, [GGML_TYPE_Q5_0] = kvb_dot_q5_0_ref, [GGML_TYPE_Q4_K] = dot_q4_K_avx512,
        [GGML_TYPE_Q4_1] = kvb_dot_q4_1_ref, [GGML_TYPE_Q5_1] = kvb_dot_q5_1_ref,
        [GGML_TYPE_IQ4_NL] = kvb_dot_iq4_nl_ref, [GGML_TYPE_IQ4_XS] = kvb_dot_iq4_xs_ref, [GGML_TYPE_MXFP4] = kvb_dot_mxfp4_ref,
        [GGML_TYPE_Q5_K] = kvb_dot_q5_K_ref, [GGML_TYPE_Q6_K] = dot_q6_K_avx512,
    },
};

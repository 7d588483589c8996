/*
 * dot_i8_avx2.h — the 256-bit integer dots and tiles (weight rows against
 * int8 activations), written once for two families: dot_avx2.c includes it
 * with AVX2's integer steps, dot_avxvnni.c with AVX-VNNI's (Intel client
 * CPUs since Alder Lake, and Zen 5: 256-bit vpdpbusd/vpdpwssd, no AVX-512).
 * The includer defines, before including it (after simd_width.h at 8 lanes):
 *   KVB_I8FN(name)          the family's name: name_avx2, name_avxvnni;
 *   KVB_I8_TILE_STORAGE     the tiles' storage (static, or extern for a table
 *                           in another file);
 *   I8_SUM4(u, s)           int32 lanes, each the sum of four u8 x s8
 *                           products (AVX2: maddubs, then madd with ones;
 *                           AVX-VNNI: one vpdpbusd from zero);
 *   I16_ADD2(acc, a, b)     acc plus a x b's int16 products summed in pairs
 *                           (AVX2: madd, then add; AVX-VNNI: one vpdpwssd);
 *   I16_ADD2X2(acc, a, b, c, d)  acc plus both pairs' sums.
 * Every caller keeps maddubs's pairs below 2^15 (the bounds are in the
 * comments), so both forms compute the same exact integers; the float steps
 * are written once here, so the avxvnni family has the avx2 family's bits
 * (test_quant checks every type and tile shape against both).
 */
#ifndef KVB_X86_DOT_I8_AVX2_H
#define KVB_X86_DOT_I8_AVX2_H

#if !defined(KVB_W) || KVB_W != 8
#error "dot_i8_avx2.h: include simd_width.h with KVB_W 8 first"
#endif

#include "../matmul.h"
#include "../quant.h"
#include "kquant_block.h"
#include "prefetch.h"

#include <immintrin.h>
#include <string.h>

/* Q8_0 rows against int8 activations (as dot_vnni.c, without VNNI): the
 * activation's sign moves onto the weights so maddubs multiplies |x| (u8) by
 * sign(w, x) (s8) into pairs of int16 (at most 2 * 127 * 127: q8_0 holds
 * -127..127, no saturation), madd sums them to int32, and each 32-block adds
 * cvt(sum) * (d_w * d_x) to the pair's accumulator with one FMA.
 *
 * A tile is nr <= 4 rows x nt <= 2 tokens (8 accumulators): every weight
 * block is loaded once for the tile's tokens and every activation block
 * once for its rows. Each (row, token) pair runs the same operations in the
 * same order whatever the tile's shape, so a row's result against a token
 * does not depend on which other rows and tokens share the tile: a batch of
 * decode tokens gets the bits each token gets alone. */
static inline __attribute__((always_inline)) void q8_tile_fixed(const void *rows, size_t row_bytes, const struct kvb_q8_act *x,
                                                                 int64_t n, float *out, int64_t ldo, const int NR, const int NT) {
    __m256 acc[4][2]; /* 8 accumulators: with the operands, 16 registers and no spills */
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i sa[2];
        for (int t = 0; t < NT; t++) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(x[t].q + i * QK8_0));
            sa[t] = _mm256_sign_epi8(a, a);
        }
        for (int r = 0; r < NR; r++) {
            const struct block_q8_0 *w = (const struct block_q8_0 *)((const uint8_t *)rows + (size_t)r * row_bytes) + i;
            if (NT == 1) prefetch_ahead(w, 1); /* decode: the stream runs ahead of the loads */
            const __m256i wr = _mm256_loadu_si256((const __m256i *)w->qs);
            const __m256 dw = _mm256_set1_ps(_cvtsh_ss(w->d));
            for (int t = 0; t < NT; t++) { /* the scale d_w * d_x: the same IEEE product, lane-wise */
                const __m256i a = _mm256_loadu_si256((const __m256i *)(x[t].q + i * QK8_0)); /* from L1 */
                const __m256i p = I8_SUM4(sa[t], _mm256_sign_epi8(wr, a));
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dw, _mm256_broadcast_ss(&x[t].d[i])), acc[r][t]);
            }
        }
    }
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < NR; r++) out[(size_t)t * (size_t)ldo + (size_t)r] = kvb_hsum8(acc[r][t]);
}

/* The full 4 x 2 tile with every value named. Per block the four rows'
 * f16 scales are converted in one vcvtph2ps and multiplied by each token's
 * scale in one vmulps (d_w * d_x: the same IEEE products as the lone dot's,
 * lane-wise), and each pair takes its product with one in-lane shuffle;
 * the tokens' int8 blocks are read from L1 as memory operands. So the 8
 * accumulators, |x| of both tokens, the two scale vectors, AVX2's ones, the
 * weight block and a temporary fit the 16 registers. The operations that
 * make a pair's value (sign, I8_SUM4, cvt, one FMA with d_w * d_x) are
 * those of q8_tile_fixed, in the same order. */
static inline __attribute__((always_inline)) void q8_tile_4x2_with(const void *rows, size_t rb, const struct kvb_q8_act *x, int64_t n,
                                                                    float *out, int64_t ldo, const bool first) {
    const uint8_t *base = rows;
    const struct block_q8_0 *w0 = (const void *)base, *w1 = (const void *)(base + rb), *w2 = (const void *)(base + 2 * rb),
                            *w3 = (const void *)(base + 3 * rb);
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    const int8_t *q0 = x[0].q, *q1 = x[1].q;
    const float *d0 = x[0].d, *d1 = x[1].d;
    const size_t next = 4 * rb; /* the next tile's rows, at this offset: they stream from memory while these are reused */
    for (int64_t i = 0; i < n / QK8_0; i++) {
        if (first) { /* later token groups find these rows in cache */
            _mm_prefetch((const char *)&w0[i] + next, _MM_HINT_T0);
            _mm_prefetch((const char *)&w1[i] + next, _MM_HINT_T0);
            _mm_prefetch((const char *)&w2[i] + next, _MM_HINT_T0);
            _mm_prefetch((const char *)&w3[i] + next, _MM_HINT_T0);
        }
        const uint64_t packed = (uint64_t)w0[i].d | (uint64_t)w1[i].d << 16 | (uint64_t)w2[i].d << 32 | (uint64_t)w3[i].d << 48;
        const __m128 dw4 = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)packed));
        const __m256 dw8 = _mm256_insertf128_ps(_mm256_castps128_ps256(dw4), dw4, 1); /* the 4 row scales in both halves */
        const __m256 sc0 = _mm256_mul_ps(dw8, _mm256_broadcast_ss(&d0[i])), sc1 = _mm256_mul_ps(dw8, _mm256_broadcast_ss(&d1[i]));
        const __m256i a0 = _mm256_loadu_si256((const __m256i *)(q0 + i * QK8_0)), a1 = _mm256_loadu_si256((const __m256i *)(q1 + i * QK8_0));
        const __m256i s0 = _mm256_sign_epi8(a0, a0), s1 = _mm256_sign_epi8(a1, a1);
#define Q8_ROW(W, R, C0, C1)                                                                                                \
    do {                                                                                                                    \
        const __m256i wr = _mm256_loadu_si256((const __m256i *)W[i].qs);                                                   \
        __m256i p = I8_SUM4(s0, _mm256_sign_epi8(wr, _mm256_loadu_si256((const __m256i *)(q0 + i * QK8_0)))); \
        C0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_shuffle_ps(sc0, sc0, (R) * 0x55), C0);                           \
        p = I8_SUM4(s1, _mm256_sign_epi8(wr, _mm256_loadu_si256((const __m256i *)(q1 + i * QK8_0)))); \
        C1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_shuffle_ps(sc1, sc1, (R) * 0x55), C1);                           \
    } while (0)
        Q8_ROW(w0, 0, c00, c01);
        Q8_ROW(w1, 1, c10, c11);
        Q8_ROW(w2, 2, c20, c21);
        Q8_ROW(w3, 3, c30, c31);
#undef Q8_ROW
    }
    out[0] = kvb_hsum8(c00); out[1] = kvb_hsum8(c10); out[2] = kvb_hsum8(c20); out[3] = kvb_hsum8(c30);
    out[ldo] = kvb_hsum8(c01); out[ldo + 1] = kvb_hsum8(c11); out[ldo + 2] = kvb_hsum8(c21); out[ldo + 3] = kvb_hsum8(c31);
}

static void q8_tile_4x2(const void *rows, size_t rb, const struct kvb_q8_act *x, int64_t n, float *out, int64_t ldo, bool first) {
    if (first) q8_tile_4x2_with(rows, rb, x, n, out, ldo, true);
    else q8_tile_4x2_with(rows, rb, x, n, out, ldo, false);
}

KVB_I8_TILE_STORAGE void KVB_I8FN(kvb_q8_tile)(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out,
                         int64_t ldo, bool first) {
    if (nr == 4 && nt == 2) {
        q8_tile_4x2(rows, row_bytes, x, n, out, ldo, first);
        return;
    }
    switch (nr * 4 + nt) { /* constant shapes: the accumulators live in registers */
#define Q8_CASE(R, T) case R * 4 + T: q8_tile_fixed(rows, row_bytes, x, n, out, ldo, R, T); break;
    Q8_CASE(1, 1) Q8_CASE(1, 2) Q8_CASE(2, 1) Q8_CASE(2, 2) Q8_CASE(3, 1) Q8_CASE(3, 2) Q8_CASE(4, 1) Q8_CASE(4, 2)
#undef Q8_CASE
    default: break;
    }
}

float KVB_I8FN(kvb_dot_q8_0_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    float out;
    KVB_I8FN(kvb_q8_tile)(row, 0, 1, x, 1, n, &out, 1, false);
    return out;
}

/* ---- the other quantized types against int8 activations ----
 * Weights unpack to bytes in registers and multiply int8 activations with
 * maddubs (u8 x s8 -> pairs of int16, at most 2 * 63 * 127: no saturation).
 * Q4_0 (activations in blocks of 32, as Q8_0): weights shifted to -8..7 and
 * the sign trick of the Q8_0 kernel; one FMA with d_w * d_x per block.
 * Q4_K and Q6_K (activations in blocks of 256, sums per 16): the sub-block
 * scales multiply in integers (madd with the scale in every int16 lane), a
 * super-block's sum stays int32 (|sum| < 2^29), and one FMA with d * d_x per
 * 256 weights. The K-types' offsets (Q4_K's mins, Q6_K's 32) come from the
 * activation sums per 16: one madd per super-block. */

/* One block of 32 signed weight codes w (|w| <= 16: maddubs cannot
 * saturate) against 32 int8 activations, the sign trick of the Q8_0 kernel,
 * added to acc times the block's d_w * d_x. */
static inline __m256 small_codes_block(__m256i w, const int8_t *xq, float scale, __m256 acc) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)xq);
    const __m256i p = I8_SUM4(_mm256_sign_epi8(a, a), _mm256_sign_epi8(w, a));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(scale), acc);
}

float KVB_I8FN(kvb_dot_q4_0_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q4_0 *b = row;
    const __m256i m4 = _mm256_set1_epi8(0xF), k8 = _mm256_set1_epi8(8);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    const int64_t nb = n / QK4_0;
#define Q4_0_BLOCK(I, ACC)                                                                                                 \
    do {                                                                                                                  \
        const __m128i raw = _mm_loadu_si128((const __m128i *)b[I].qs);                                                   \
        const __m256i w = _mm256_sub_epi8(_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4), k8);     \
        ACC = small_codes_block(w, x->q + (I) * QK4_0, _cvtsh_ss(b[I].d) * x->d[I], ACC);                               \
    } while (0)
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        Q4_0_BLOCK(i, acc0);
        Q4_0_BLOCK(i + 1, acc1);
    }
    if (i < nb) Q4_0_BLOCK(i, acc0);
#undef Q4_0_BLOCK
    return kvb_hsum8(_mm256_add_ps(acc0, acc1));
}

/* Q5_0: Q4_0's nibbles with the fifth bit from qh: qh broadcast to the 32
 * bytes (byte k gets qh's byte k / 8), tested against bit k % 8, and 16 where
 * set; weights -16..15, then Q4_0's sign trick (|w| <= 16: no saturation). */
float KVB_I8FN(kvb_dot_q5_0_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q5_0 *b = row;
    const __m256i m4 = _mm256_set1_epi8(0xF), k16 = _mm256_set1_epi8(16);
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    const int64_t nb = n / QK5_0;
#define Q5_0_BLOCK(I, ACC)                                                                                                 \
    do {                                                                                                                  \
        uint32_t qh;                                                                                                      \
        memcpy(&qh, b[I].qh, 4);                                                                                          \
        const __m256i hb = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread), bit);               \
        const __m256i hi = _mm256_and_si256(_mm256_cmpeq_epi8(hb, bit), k16);                                            \
        const __m128i raw = _mm_loadu_si128((const __m128i *)b[I].qs);                                                   \
        const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);                         \
        const __m256i w = _mm256_sub_epi8(_mm256_or_si256(nib, hi), k16);                                                \
        ACC = small_codes_block(w, x->q + (I) * QK5_0, _cvtsh_ss(b[I].d) * x->d[I], ACC);                               \
    } while (0)
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        Q5_0_BLOCK(i, acc0);
        Q5_0_BLOCK(i + 1, acc1);
    }
    if (i < nb) Q5_0_BLOCK(i, acc0);
#undef Q5_0_BLOCK
    return kvb_hsum8(_mm256_add_ps(acc0, acc1));
}

/* Q4_1 and Q5_1: unsigned codes (0..31) straight into maddubs (at most
 * 2 * 31 * 127), one FMA with d_w * d_x per block; the min's part,
 * m * d_x * (sum of the block's activations), summed in a second vector. */
static inline __m256 unsigned_codes_block(__m256i w, const int8_t *xq, float scale, __m256 acc) {
    const __m256i p = I8_SUM4(w, _mm256_loadu_si256((const __m256i *)xq));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(scale), acc);
}

float KVB_I8FN(kvb_dot_q4_1_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q4_1 *b = row;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        const __m128i raw = _mm_loadu_si128((const __m128i *)b[i].qs);
        const __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
        acc = unsigned_codes_block(w, x->q + i * QK4_1, _cvtsh_ss(b[i].d) * x->d[i], acc);
        accm += _cvtsh_ss(b[i].m) * x->d[i] * (float)x->s[i];
    }
    return kvb_hsum8(acc) + accm;
}

float KVB_I8FN(kvb_dot_q5_1_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q5_1 *b = row;
    const __m256i m4 = _mm256_set1_epi8(0xF), k16 = _mm256_set1_epi8(16);
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        uint32_t qh;
        memcpy(&qh, b[i].qh, 4);
        const __m256i hb = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread), bit);
        const __m256i hi = _mm256_and_si256(_mm256_cmpeq_epi8(hb, bit), k16);
        const __m128i raw = _mm_loadu_si128((const __m128i *)b[i].qs);
        const __m256i w = _mm256_or_si256(_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4), hi);
        acc = unsigned_codes_block(w, x->q + i * QK5_1, _cvtsh_ss(b[i].d) * x->d[i], acc);
        accm += _cvtsh_ss(b[i].m) * x->d[i] * (float)x->s[i];
    }
    return kvb_hsum8(acc) + accm;
}

/* IQ4_NL and MXFP4: the nibbles index their 16 values with one byte shuffle
 * (the table in both 128-bit lanes), then Q4_0's sign trick (|w| <= 127:
 * maddubs at most 2 * 127 * 127, no saturation); one FMA per block with its
 * scale times d_x. IQ4_XS: the same codes per 32 of a super-block, their
 * int32 sums times the sub-block's ls - 32 in integers, one FMA with
 * d * d_x per 256 (|sum| < 8 * 32 * 32 * 127 * 127 < 2^28). */
static inline __m256i kv_codes(const uint8_t *qs, __m256i table) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0xF)));
}

float KVB_I8FN(kvb_dot_iq4_nl_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_iq4_nl *b = row;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvb_kvalues_iq4nl));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK4_NL; i++)
        acc = small_codes_block(kv_codes(b[i].qs, table), x->q + i * QK4_NL, _cvtsh_ss(b[i].d) * x->d[i], acc);
    return kvb_hsum8(acc);
}

float KVB_I8FN(kvb_dot_mxfp4_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_mxfp4 *b = row;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvb_kvalues_mxfp4));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_MXFP4; i++)
        acc = small_codes_block(kv_codes(b[i].qs, table), x->q + i * QK_MXFP4, kvb_e8m0_half(b[i].e) * x->d[i], acc);
    return kvb_hsum8(acc);
}

float KVB_I8FN(kvb_dot_iq4_xs_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_iq4_xs *b = row;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvb_kvalues_iq4nl));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *xq = x->q + i * QK_K;
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const __m256i w = kv_codes(b[i].qs + 16 * ib, table), a = _mm256_loadu_si256((const __m256i *)(xq + 32 * ib));
            const __m256i p = I8_SUM4(_mm256_sign_epi8(a, a), _mm256_sign_epi8(w, a));
            sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(p, _mm256_set1_epi32(kvb_iq4xs_ls(&b[i], ib) - 32)));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(_cvtsh_ss(b[i].d) * x->d[i]), acc);
    }
    return kvb_hsum8(acc);
}

/* shuffle_epi8 masks: int16 lane j of a 128-bit vector in every lane */
#define LANE16(j) _mm256_set1_epi16((short)((2 * (j)) | ((2 * (j) + 1) << 8)))

float KVB_I8FN(kvb_dot_q4_K_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q4_K *b = row;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct block_q4_K *bk = &b[i];
        const int8_t *xq = x->q + i * QK_K;
        prefetch_ahead(bk, sizeof *bk);
        __m128 summ;
        const __m256i sc = _mm256_broadcastsi128_si256(q4k_block_scales(bk, x->s + i * 16, &summ));
        __m256i sumi = _mm256_setzero_si256();
#define Q4K_PAIR(K)                                                                                                            \
    do {                                                                                                                       \
        const __m256i q = _mm256_loadu_si256((const __m256i *)(bk->qs + 32 * (K)));                                           \
        const __m256i lo = _mm256_maddubs_epi16(_mm256_and_si256(q, m4), _mm256_loadu_si256((const __m256i *)(xq + 64 * (K))));  \
        const __m256i hi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),                               \
                                                _mm256_loadu_si256((const __m256i *)(xq + 64 * (K) + 32)));                  \
        sumi = I16_ADD2X2(sumi, lo, _mm256_shuffle_epi8(sc, LANE16(2 * (K))), hi, _mm256_shuffle_epi8(sc, LANE16(2 * (K) + 1))); \
    } while (0)
        Q4K_PAIR(0);
        Q4K_PAIR(1);
        Q4K_PAIR(2);
        Q4K_PAIR(3);
#undef Q4K_PAIR
        const float dx = x->d[i];
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(_cvtsh_ss(bk->d) * dx), acc);
        accm = _mm_fmadd_ps(summ, _mm_set1_ps(_cvtsh_ss(bk->dmin) * dx), accm);
    }
    __m128 m = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return kvb_hsum8(acc) - _mm_cvtss_f32(m);
}

/* Q5_K: Q4_K's kernel with the fifth bit of sub-block j from bit j of qh[l]
 * (l = the element within its 32): qh's 32 bytes shifted right by 2 per pair
 * of sub-blocks, bit 0 and bit 1 moved to 16 (codes 0..31: maddubs at most
 * 2 * 31 * 127, the block's int32 sum below 2^27). */
float KVB_I8FN(kvb_dot_q5_K_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q5_K *b = row;
    const __m256i m4 = _mm256_set1_epi8(0xF), k16 = _mm256_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct block_q5_K *bk = &b[i];
        const int8_t *xq = x->q + i * QK_K;
        prefetch_ahead(bk, sizeof *bk);
        __m128 summ;
        const __m256i sc = _mm256_broadcastsi128_si256(q4k_block_scales((const struct block_q4_K *)(const void *)bk, x->s + i * 16, &summ));
        __m256i sumi = _mm256_setzero_si256();
        __m256i qh = _mm256_loadu_si256((const __m256i *)bk->qh);
#define Q5K_PAIR(K)                                                                                                            \
    do {                                                                                                                       \
        const __m256i q = _mm256_loadu_si256((const __m256i *)(bk->qs + 32 * (K)));                                           \
        const __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(qh, 4), k16);                                                 \
        const __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(qh, 3), k16);                                                 \
        const __m256i lo = _mm256_maddubs_epi16(_mm256_or_si256(_mm256_and_si256(q, m4), h0),                                \
                                                _mm256_loadu_si256((const __m256i *)(xq + 64 * (K))));                       \
        const __m256i hi = _mm256_maddubs_epi16(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1),         \
                                                _mm256_loadu_si256((const __m256i *)(xq + 64 * (K) + 32)));                  \
        sumi = I16_ADD2X2(sumi, lo, _mm256_shuffle_epi8(sc, LANE16(2 * (K))), hi, _mm256_shuffle_epi8(sc, LANE16(2 * (K) + 1))); \
        qh = _mm256_srli_epi16(qh, 2);                                                                                        \
    } while (0)
        Q5K_PAIR(0);
        Q5K_PAIR(1);
        Q5K_PAIR(2);
        Q5K_PAIR(3);
#undef Q5K_PAIR
        const float dx = x->d[i];
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(_cvtsh_ss(bk->d) * dx), acc);
        accm = _mm_fmadd_ps(summ, _mm_set1_ps(_cvtsh_ss(bk->dmin) * dx), accm);
    }
    __m128 m = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return kvb_hsum8(acc) - _mm_cvtss_f32(m);
}

float KVB_I8FN(kvb_dot_q6_K_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q6_K *b = row;
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct block_q6_K *bk = &b[i];
        const int8_t *xq = x->q + i * QK_K;
        prefetch_ahead(bk, sizeof *bk);
        __m256i sumi; /* from q6_K's offset of 32 */
        (void)q6k_block_scales(bk, x->s + i * 16, &sumi);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = bk->ql + 64 * h, *qh = bk->qh + 32 * h;
            const int8_t *xh = xq + 128 * h;
            const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(bk->scales + 8 * h))));
            const __m256i hv = _mm256_loadu_si256((const __m256i *)qh);
            const __m256i a = _mm256_loadu_si256((const __m256i *)ql), c = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i q1 = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi16(_mm256_and_si256(hv, m2), 4));
            const __m256i q2 = _mm256_or_si256(_mm256_and_si256(c, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 2), m2), 4));
            const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 4), m2), 4));
            const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 6), m2), 4));
            /* 32 elements of group g: scale 2g in the low 16, 2g + 1 in the high 16 */
#define Q6K_GROUP(Q, G)                                                                                                         \
    sumi = I16_ADD2(sumi, _mm256_maddubs_epi16(Q, _mm256_loadu_si256((const __m256i *)(xh + 32 * (G)))), \
                                                    _mm256_shuffle_epi8(sc, _mm256_set_m128i(_mm256_castsi256_si128(LANE16(2 * (G) + 1)), \
                                                                                             _mm256_castsi256_si128(LANE16(2 * (G))))))
            Q6K_GROUP(q1, 0);
            Q6K_GROUP(q2, 1);
            Q6K_GROUP(q3, 2);
            Q6K_GROUP(q4, 3);
#undef Q6K_GROUP
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(_cvtsh_ss(bk->d) * x->d[i]), acc);
    }
    return kvb_hsum8(acc);
}

/* K-quant tiles (matmul.h, kq_tile): nr rows x up to KQ_TILE_TOKENS tokens,
 * a row at a time. Per block the weight side of the three kernels above
 * (q4_K/q5_K's nibbles and fifth bits, q6_K's high bits, the scales, mins
 * and their lane shuffles) is unpacked once, a pair of sub-blocks (q4_K,
 * q5_K) or a group of 32 (q6_K) at a time, and each token adds its own
 * maddubs/madd into its own int32 sum: every lane holds the lone kernel's
 * integer, and the float steps (conversion, d_w * d_x, the FMAs in block
 * order, kvb_hsum8, the mins) are the lone kernel's, so each pair has its
 * dot_q8 bits whatever the tile's shape (test_quant checks every shape). */
#define KQ_TILE_TOKENS 4

/* One q4_K (Q5 false) or q5_K (Q5 true) row against NT tokens. */
static inline __attribute__((always_inline)) void q45k_row_tile(const void *row, const struct kvb_q8_act *x, int64_t n, float *out, int64_t ldo,
                                                                 const int NT, const bool first, const bool Q5) {
    const __m256i m4 = _mm256_set1_epi8(0xF), k16 = _mm256_set1_epi8(16);
    const size_t bsz = Q5 ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    __m256 acc[KQ_TILE_TOKENS];
    __m128 accm[KQ_TILE_TOKENS];
    for (int t = 0; t < NT; t++) {
        acc[t] = _mm256_setzero_ps();
        accm[t] = _mm_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *bp = (const uint8_t *)row + (size_t)i * bsz;
        const struct block_q4_K *b4 = (const struct block_q4_K *)(const void *)bp; /* q5_K starts as q4_K: d, dmin, scales */
        const uint8_t *qs = Q5 ? ((const struct block_q5_K *)(const void *)bp)->qs : b4->qs;
        if (first) prefetch_ahead(bp, (int)bsz);
        __m128i mins;
        const __m256i sc = _mm256_broadcastsi128_si256(q4k_scales_mins(b4, &mins));
        __m256i qh = Q5 ? _mm256_loadu_si256((const __m256i *)((const struct block_q5_K *)(const void *)bp)->qh) : _mm256_setzero_si256();
        __m256i sumi[KQ_TILE_TOKENS];
        for (int t = 0; t < NT; t++) sumi[t] = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (Q5) {
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), k16));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), k16));
                qh = _mm256_srli_epi16(qh, 2);
            }
            const __m256i slo = _mm256_shuffle_epi8(sc, LANE16(2 * k)), shi = _mm256_shuffle_epi8(sc, LANE16(2 * k + 1));
            for (int t = 0; t < NT; t++) {
                const int8_t *xq = x[t].q + i * QK_K + 64 * k;
                const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xq));
                const __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq + 32)));
                sumi[t] = I16_ADD2X2(sumi[t], pl, slo, ph, shi);
            }
        }
        const float dw = _cvtsh_ss(b4->d), dmw = _cvtsh_ss(b4->dmin);
        for (int t = 0; t < NT; t++) {
            const float dx = x[t].d[i];
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]), _mm256_set1_ps(dw * dx), acc[t]);
            accm[t] = _mm_fmadd_ps(q4k_mins_part(mins, x[t].s + i * 16), _mm_set1_ps(dmw * dx), accm[t]);
        }
    }
    for (int t = 0; t < NT; t++) { /* as the lone kernels end */
        __m128 m = _mm_add_ps(accm[t], _mm_movehl_ps(accm[t], accm[t]));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        out[(size_t)t * (size_t)ldo] = kvb_hsum8(acc[t]) - _mm_cvtss_f32(m);
    }
}

/* One q6_K row against NT tokens. */
static inline __attribute__((always_inline)) void q6k_row_tile(const void *row, const struct kvb_q8_act *x, int64_t n, float *out, int64_t ldo,
                                                                const int NT, const bool first) {
    const struct block_q6_K *b = row;
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
    __m256 acc[KQ_TILE_TOKENS];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct block_q6_K *bk = &b[i];
        if (first) prefetch_ahead(bk, sizeof *bk);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)bk->scales)); /* as q6k_block_scales */
        __m256i sumi[KQ_TILE_TOKENS]; /* from q6_K's offset of 32 */
        for (int t = 0; t < NT; t++) sumi[t] = q6k_offset_part(sc16, x[t].s + i * 16);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = bk->ql + 64 * h, *qhp = bk->qh + 32 * h;
            const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(bk->scales + 8 * h))));
            const __m256i hv = _mm256_loadu_si256((const __m256i *)qhp);
            const __m256i a = _mm256_loadu_si256((const __m256i *)ql), c = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi16(_mm256_and_si256(hv, m2), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(c, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 2), m2), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 4), m2), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 6), m2), 4));
            for (int g = 0; g < 4; g++) { /* 32 elements of group g: scale 2g in the low 16, 2g + 1 in the high 16 */
                const __m256i sg = _mm256_shuffle_epi8(sc, _mm256_set_m128i(_mm256_castsi256_si128(LANE16(2 * g + 1)), _mm256_castsi256_si128(LANE16(2 * g))));
                for (int t = 0; t < NT; t++) {
                    const int8_t *xq = x[t].q + i * QK_K + 128 * h + 32 * g;
                    sumi[t] = I16_ADD2(sumi[t], _mm256_maddubs_epi16(q[g], _mm256_loadu_si256((const __m256i *)xq)), sg);
                }
            }
        }
        const float dw = _cvtsh_ss(bk->d);
        for (int t = 0; t < NT; t++) acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]), _mm256_set1_ps(dw * x[t].d[i]), acc[t]);
    }
    for (int t = 0; t < NT; t++) out[(size_t)t * (size_t)ldo] = kvb_hsum8(acc[t]);
}

/* The tiles: rows one after another, the token count a constant. */
#define KQ_CASE(CALL, T)                                                                                                              \
    case T * 2: CALL(T, false); break;                                                                                                \
    case T * 2 + 1: CALL(T, true); break;
#define KQ_TILE_FN(NAME, CALL)                                                                                                        \
    KVB_I8_TILE_STORAGE void NAME(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo, \
                     bool first) {                                                                                                    \
        for (int r = 0; r < nr; r++) {                                                                                                \
            const void *row = (const uint8_t *)rows + (size_t)r * row_bytes;                                                          \
            switch (nt * 2 + (first ? 1 : 0)) {                                                                                       \
                KQ_CASE(CALL, 1) KQ_CASE(CALL, 2) KQ_CASE(CALL, 3) KQ_CASE(CALL, 4)                                                   \
            default: break;                                                                                                           \
            }                                                                                                                         \
        }                                                                                                                             \
    }
#define Q4K_CALL(T, F) q45k_row_tile(row, x, n, out + r, ldo, T, F, false)
#define Q5K_CALL(T, F) q45k_row_tile(row, x, n, out + r, ldo, T, F, true)
#define Q6K_CALL(T, F) q6k_row_tile(row, x, n, out + r, ldo, T, F)
KQ_TILE_FN(KVB_I8FN(kvb_q4_K_tile), Q4K_CALL)
KQ_TILE_FN(KVB_I8FN(kvb_q5_K_tile), Q5K_CALL)
KQ_TILE_FN(KVB_I8FN(kvb_q6_K_tile), Q6K_CALL)
#undef Q4K_CALL
#undef Q5K_CALL
#undef Q6K_CALL
#undef KQ_TILE_FN
#undef KQ_CASE
#undef LANE16

#endif

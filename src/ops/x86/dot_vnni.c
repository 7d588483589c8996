/*
 * dot_vnni.c — Q8_0 rows against int8 activations with AVX-512 VNNI
 * (vpdpbusd: u8 x s8 -> s32), a row per lane.
 *
 * A tile is 16 rows x up to 16 tokens. Per 32-element block the 16 rows'
 * 32 code bytes are transposed in registers (an 8 x 8 dword transpose in
 * each 256-bit half), so register k holds bytes 4k..4k+3 of every row, lane
 * j row j; the codes are offset to unsigned (w + 128, an xor) once for all
 * the tile's tokens. Each token then takes eight vpdpbusd against its own
 * four bytes broadcast from memory, starting from -128 * sum(x) (the
 * activations' block sum, kvb_q8_act.s), so lane j ends with exactly
 * sum(w_j * x), and one conversion, one multiply (d_w * d_x, the IEEE
 * product) and one FMA add the block to the token's accumulator — 11
 * instructions for 16 rows x 32 elements, where a lane per block pair needs
 * four per pair. No horizontal sums: the accumulator is the 16 outputs.
 *
 * The value of (row j, token t) is therefore the FMA chain
 *     acc = 0; for each block b: acc = fma((float)isum_jb, d_w * d_x, acc)
 * in block order, whatever the tile's shape or which lane holds the row:
 * the lone dot is the 1 x 1 tile, so batch equals single bit for bit, and
 * test_quant checks the chain against fmaf in C.
 *
 * The first token group prefetches the next 16 rows (contiguous after
 * these) into L2, a slice per block, so one token's decode streams ahead
 * of the 16 rows it reads in lockstep. Compiled with -mavx512vnni
 * -mavx512vl; the avx512vnni family's (kvb_dot_avx512vnni in
 * dot_avx512.c), which dispatch.c chooses only when CPUID reports
 * AVX512_VNNI. The end of the file builds the family's K-quant tiles
 * (kquant_tile512.h) with vpdpwssd.
 */
#include "../matmul.h"
#include "../quant.h"
#include "transpose_avx512.h"
#include "x86_kernels.h"

#include <immintrin.h>

#define TILE_ROWS 16

/* nr <= 16 rows x NT <= 16 tokens. Lanes past nr repeat the last row and
 * are not stored. */
static inline __attribute__((always_inline)) void q8_tile_fixed(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x,
                                                                 int64_t n, float *out, int64_t ldo, const int NT, const bool first) {
    const uint8_t *base = rows, *rp[TILE_ROWS];
    int32_t off[TILE_ROWS];
    for (int j = 0; j < TILE_ROWS; j++) {
        const int r = j < nr ? j : nr - 1;
        rp[j] = base + (size_t)r * row_bytes;
        off[j] = (int32_t)((size_t)r * row_bytes); /* < 16 * 17 KB (n <= 16384) */
    }
    const __m512i vidx = _mm512_loadu_si512((const void *)off);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const uint8_t *next = base + (size_t)TILE_ROWS * row_bytes; /* the next tile's rows, contiguous */
    __m512 acc[KVB_Q8_TILE_TOKENS_MAX];
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    const int64_t nb = n / QK8_0;
    for (int64_t b = 0; b < nb; b++) {
        const size_t bo = (size_t)b * sizeof(struct block_q8_0);
        if (first) /* 16 blocks' worth of the next rows per block: 544 bytes */
            for (int l = 0; l < 9; l++) _mm_prefetch((const char *)next + bo * TILE_ROWS + (size_t)l * 64, _MM_HINT_T1);
        __m512i z[8];
        for (int j = 0; j < 8; j++)
            z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(rp[j] + bo + 2))),
                                      _mm256_loadu_si256((const __m256i *)(rp[j + 8] + bo + 2)), 1);
        kvb_transpose_8x8_halves(z);
        for (int k = 0; k < 8; k++) z[k] = _mm512_xor_si512(z[k], flip);
        /* the 16 rows' f16 scales: the dword at each block's start, low half */
        const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(vidx, (const void *)(base + bo), 1)));
        for (int t = 0; t < NT; t++) {
            const int8_t *xq = x[t].q + b * QK8_0;
            __m512i s = _mm512_set1_epi32(-128 * (int32_t)x[t].s[b]);
            for (int k = 0; k < 8; k++) {
                int32_t four;
                __builtin_memcpy(&four, xq + 4 * k, sizeof four);
                s = _mm512_dpbusd_epi32(s, z[k], _mm512_set1_epi32(four));
            }
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(x[t].d[b])), acc[t]);
        }
    }
    const __mmask16 m = (__mmask16)((1u << nr) - 1u);
    for (int t = 0; t < NT; t++) _mm512_mask_storeu_ps(out + (size_t)t * (size_t)ldo, m, acc[t]);
}

void kvb_q8_tile_vnni(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                      bool first) {
    if (nr < 1 || nr > TILE_ROWS) return;
    switch (nt * 2 + (first ? 1 : 0)) { /* constant token counts: the accumulators live in registers */
#define Q8_CASE(T)                                                                                                                    \
    case T * 2: q8_tile_fixed(rows, row_bytes, nr, x, n, out, ldo, T, false); break;                                                  \
    case T * 2 + 1: q8_tile_fixed(rows, row_bytes, nr, x, n, out, ldo, T, true); break;
    Q8_CASE(1) Q8_CASE(2) Q8_CASE(3) Q8_CASE(4) Q8_CASE(5) Q8_CASE(6) Q8_CASE(7) Q8_CASE(8)
    Q8_CASE(9) Q8_CASE(10) Q8_CASE(11) Q8_CASE(12) Q8_CASE(13) Q8_CASE(14) Q8_CASE(15) Q8_CASE(16)
#undef Q8_CASE
    default: break;
    }
}

float kvb_dot_q8_0_q8_vnni(const void *row, const struct kvb_q8_act *x, int64_t n) {
    float out;
    kvb_q8_tile_vnni(row, 0, 1, x, 1, n, &out, 1, false);
    return out;
}

/* Q5_0 rows against int8 activations, two blocks per 512 bits: the codes
 * stay unsigned (0..31: the nibble, plus 16 where qh's bit is set, a byte
 * mask straight from qh), so one vpdpbusd takes code x activation; lane 0 of
 * each block's eight starts at -16 x the block's activation sum (x->s), so
 * the block's lanes add up to exactly sum((code - 16) * x). Then one
 * conversion and one FMA with d_w * d_x per lane. An odd last block goes
 * through the AVX2 kernel. */
float kvb_dot_q5_0_q8_vnni(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q5_0 *b = row;
    const __m512i m4 = _mm512_set1_epi8(0xF), k16 = _mm512_set1_epi8(16);
    __m512 acc = _mm512_setzero_ps();
    const int64_t nb = n / QK5_0;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m128i r0 = _mm_loadu_si128((const __m128i *)b[i].qs), r1 = _mm_loadu_si128((const __m128i *)b[i + 1].qs);
        const __m256i n0 = _mm256_set_m128i(_mm_srli_epi16(r0, 4), r0), n1 = _mm256_set_m128i(_mm_srli_epi16(r1, 4), r1);
        const __m512i nib = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(n0), n1, 1), m4);
        uint32_t h0, h1;
        memcpy(&h0, b[i].qh, 4);
        memcpy(&h1, b[i + 1].qh, 4);
        const __m512i code = _mm512_mask_add_epi8(nib, (__mmask64)h0 | ((__mmask64)h1 << 32), nib, k16);
        __m512i init = _mm512_maskz_set1_epi32(0x0001, -16 * (int32_t)x->s[i]);
        init = _mm512_mask_set1_epi32(init, 0x0100, -16 * (int32_t)x->s[i + 1]);
        const __m512i dot = _mm512_dpbusd_epi32(init, code, _mm512_loadu_si512((const void *)(x->q + i * QK5_0)));
        const float s0 = _cvtsh_ss(b[i].d) * x->d[i], s1 = _cvtsh_ss(b[i + 1].d) * x->d[i + 1];
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(s0), _mm512_set1_ps(s1)), acc);
    }
    float out = _mm512_reduce_add_ps(acc);
    if (i < nb) {
        const struct kvb_q8_act t = {x->d + i, x->q + i * QK5_0, x->s + i};
        out += kvb_dot_q5_0_q8_avx2(b + i, &t, QK5_0);
    }
    return out;
}

/* IQ4_NL and MXFP4 rows, two blocks per 512 bits as Q5_0's: the nibbles
 * index the 16 values plus an offset that makes them unsigned (IQ4_NL +128:
 * 1..241; MXFP4 +12: 0..24) by one byte shuffle per 128-bit lane, and lane 0
 * of each block's eight starts at -offset x the block's activation sum, so
 * the lanes add up to exactly sum(kv[q] * x). One FMA per lane with the
 * block's scale times d_x; an odd last block goes through the AVX2 kernel. */
static inline __m512i kv_pair_vnni(const uint8_t *qs0, const uint8_t *qs1, __m512i table, int32_t off, const struct kvb_q8_act *x, int64_t i) {
    const __m128i r0 = _mm_loadu_si128((const __m128i *)qs0), r1 = _mm_loadu_si128((const __m128i *)qs1);
    const __m256i n0 = _mm256_set_m128i(_mm_srli_epi16(r0, 4), r0), n1 = _mm256_set_m128i(_mm_srli_epi16(r1, 4), r1);
    const __m512i nib = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(n0), n1, 1), _mm512_set1_epi8(0xF));
    __m512i init = _mm512_maskz_set1_epi32(0x0001, -off * (int32_t)x->s[i]);
    init = _mm512_mask_set1_epi32(init, 0x0100, -off * (int32_t)x->s[i + 1]);
    return _mm512_dpbusd_epi32(init, _mm512_shuffle_epi8(table, nib), _mm512_loadu_si512((const void *)(x->q + i * 32)));
}

static inline __m512i kv_table_vnni(const int8_t *kv, int off) {
    uint8_t t[16];
    for (int k = 0; k < 16; k++) t[k] = (uint8_t)(kv[k] + off);
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t));
}

float kvb_dot_iq4_nl_q8_vnni(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_iq4_nl *b = row;
    const __m512i table = kv_table_vnni(kvb_kvalues_iq4nl, 128);
    __m512 acc = _mm512_setzero_ps();
    const int64_t nb = n / QK4_NL;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m512i dot = kv_pair_vnni(b[i].qs, b[i + 1].qs, table, 128, x, i);
        const float s0 = _cvtsh_ss(b[i].d) * x->d[i], s1 = _cvtsh_ss(b[i + 1].d) * x->d[i + 1];
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(s0), _mm512_set1_ps(s1)), acc);
    }
    float out = _mm512_reduce_add_ps(acc);
    if (i < nb) {
        const struct kvb_q8_act t = {x->d + i, x->q + i * QK4_NL, x->s + i};
        out += kvb_dot_iq4_nl_q8_avx2(b + i, &t, QK4_NL);
    }
    return out;
}

float kvb_dot_mxfp4_q8_vnni(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_mxfp4 *b = row;
    const __m512i table = kv_table_vnni(kvb_kvalues_mxfp4, 12);
    __m512 acc = _mm512_setzero_ps();
    const int64_t nb = n / QK_MXFP4;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m512i dot = kv_pair_vnni(b[i].qs, b[i + 1].qs, table, 12, x, i);
        const float s0 = kvb_e8m0_half(b[i].e) * x->d[i], s1 = kvb_e8m0_half(b[i + 1].e) * x->d[i + 1];
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(s0), _mm512_set1_ps(s1)), acc);
    }
    float out = _mm512_reduce_add_ps(acc);
    if (i < nb) {
        const struct kvb_q8_act t = {x->d + i, x->q + i * QK_MXFP4, x->s + i};
        out += kvb_dot_mxfp4_q8_avx2(b + i, &t, QK_MXFP4);
    }
    return out;
}

/* The K-quant tiles of the avx512vnni family: kquant_tile512.h's bodies
 * with vpdpwssd adding each token's int16 pairs times the scale lanes into
 * its int32 sums (madd + add in one instruction, the same integers), so each
 * pair keeps the bits of the family's dot_q8 (dot_avx512.c's kernels). */
#define KQ_SUFFIX(name) kvb_##name##_vnni
#define KQ_STORAGE
#define KQ_ACC(sumi, p, sl) _mm512_dpwssd_epi32(sumi, p, sl)
#include "kquant_tile512.h" /* kvb_q4_K_tile_vnni, kvb_q5_K_tile_vnni, kvb_q6_K_tile_vnni */

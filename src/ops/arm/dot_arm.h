/*
 * dot_arm.h — the body of the ARM families' weight kernels, included once
 * per family: dot_neon.c (ARMv8.0 AdvSIMD: products by SMULL/SADALP),
 * dot_dotprod.c (ARMv8.2 SDOT) and dot_i8mm.c (SDOT, and SMMLA for the
 * Q8_0 tiles). The SDOT families also get K-quant tiles: dotprod this
 * file's (SDOT, at the end), i8mm its own (SMMLA). Before including it a file defines ARM_SDOT (0 or 1) and
 * ARM_FAM(name), which suffixes every static name with the family's.
 *
 * Integer dots (weights against int8 activations, kvb_act_form): each
 * block's (or sub-block's) integer sum is exact in int32 lanes, whatever
 * the instruction that forms it, and the blocks are scaled and summed in
 * double in block order exactly as the scalar reference does
 * (ref/dot_ref.c): these kernels return the reference's bits, so an ARM
 * build decodes quantized weights to the reference's logits. The double
 * multiply-add per 32 (or 256) weights is a few percent of a block's work.
 *
 * Float rows (f32, f16, bf16 against f32) keep four float32x4 partial sums
 * (the x86 families' order of error, within test_quant's bound). The prefill
 * panel is matmul.h's contract exactly: one fused multiply-add chain per
 * (row, token) in k order, across the panel's 32 rows in 8 vectors, so its
 * bits are kvb_panel_ref's.
 */
#ifndef ARM_FAM
#error "define ARM_FAM and ARM_SDOT before including dot_arm.h"
#endif

#include "arm_kernels.h"
#include "../quant.h"

#include <arm_neon.h>

/* acc += the 4 sums of 4 products of a and b's int8 lanes. */
static inline int32x4_t ARM_FAM(dot16)(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if ARM_SDOT
    return vdotq_s32(acc, a, b);
#else
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

/* The exact integer dot of 32 codes w with 32 activations x. */
static inline int32_t ARM_FAM(dot32)(int8x16_t w0, int8x16_t w1, const int8_t *x) {
    int32x4_t acc = ARM_FAM(dot16)(vdupq_n_s32(0), w0, vld1q_s8(x));
    acc = ARM_FAM(dot16)(acc, w1, vld1q_s8(x + 16));
    return vaddvq_s32(acc);
}

static float ARM_FAM(dot_q8_0_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q8_0 *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const int32_t s = ARM_FAM(dot32)(vld1q_s8(b[i].qs), vld1q_s8(b[i].qs + 16), x->q + i * QK8_0);
        acc += (double)s * ((double)kvb_f16_to_f32(b[i].d) * (double)x->d[i]);
    }
    return (float)acc;
}

static float ARM_FAM(dot_q4_0_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q4_0 *b = row;
    const uint8x16_t m4 = vdupq_n_u8(0xF);
    const int8x16_t k8 = vdupq_n_s8(8);
    double acc = 0;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const uint8x16_t v = vld1q_u8(b[i].qs);
        const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, m4)), k8), hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), k8);
        const int32_t s = ARM_FAM(dot32)(lo, hi, x->q + i * QK4_0);
        acc += (double)s * ((double)kvb_f16_to_f32(b[i].d) * (double)x->d[i]);
    }
    return (float)acc;
}

/* The 32 codes of a block of nibbles (code j: j < 16 the low nibble of
 * byte j, else the high one of byte j - 16) as two vectors of 0..15. */
static inline void ARM_FAM(nibbles)(const uint8_t *qs, uint8x16_t *lo, uint8x16_t *hi) {
    const uint8x16_t v = vld1q_u8(qs);
    *lo = vandq_u8(v, vdupq_n_u8(0xF));
    *hi = vshrq_n_u8(v, 4);
}

/* Bit 4 of the 32 codes of a Q5 block: bit j of qh (little-endian) as 0x10
 * in byte j of the two vectors. */
static inline void ARM_FAM(q5_high)(const uint8_t *qh4, uint8x16_t *h0, uint8x16_t *h1) {
    static const uint8_t rep0[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint8_t q[16] = {qh4[0], qh4[1], qh4[2], qh4[3]};
    const uint8x16_t qv = vld1q_u8(q), r0 = vld1q_u8(rep0), m = vld1q_u8(bits), k16 = vdupq_n_u8(0x10);
    *h0 = vandq_u8(vtstq_u8(vqtbl1q_u8(qv, r0), m), k16);
    *h1 = vandq_u8(vtstq_u8(vqtbl1q_u8(qv, vaddq_u8(r0, vdupq_n_u8(2))), m), k16);
}

/* Q5_0: codes less 16; the reference's per-block double sum. */
static float ARM_FAM(dot_q5_0_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q5_0 *b = row;
    const int8x16_t k16 = vdupq_n_s8(16);
    double acc = 0;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        uint8x16_t lo, hi, h0, h1;
        ARM_FAM(nibbles)(b[i].qs, &lo, &hi);
        ARM_FAM(q5_high)(b[i].qh, &h0, &h1);
        const int8x16_t c0 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, h0)), k16), c1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(hi, h1)), k16);
        const int32_t s = ARM_FAM(dot32)(c0, c1, x->q + i * QK5_0);
        acc += (double)s * ((double)kvb_f16_to_f32(b[i].d) * (double)x->d[i]);
    }
    return (float)acc;
}

/* Q4_1 and Q5_1: unsigned codes, d_x * (d * sum(q * qx) + m * sum(qx)). */
static float ARM_FAM(dot_q4_1_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q4_1 *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        uint8x16_t lo, hi;
        ARM_FAM(nibbles)(b[i].qs, &lo, &hi);
        const int32_t s = ARM_FAM(dot32)(vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), x->q + i * QK4_1);
        acc += (double)x->d[i] * ((double)kvb_f16_to_f32(b[i].d) * (double)s + (double)kvb_f16_to_f32(b[i].m) * (double)x->s[i]);
    }
    return (float)acc;
}

static float ARM_FAM(dot_q5_1_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q5_1 *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        uint8x16_t lo, hi, h0, h1;
        ARM_FAM(nibbles)(b[i].qs, &lo, &hi);
        ARM_FAM(q5_high)(b[i].qh, &h0, &h1);
        const int32_t s = ARM_FAM(dot32)(vreinterpretq_s8_u8(vorrq_u8(lo, h0)), vreinterpretq_s8_u8(vorrq_u8(hi, h1)), x->q + i * QK5_1);
        acc += (double)x->d[i] * ((double)kvb_f16_to_f32(b[i].d) * (double)s + (double)kvb_f16_to_f32(b[i].m) * (double)x->s[i]);
    }
    return (float)acc;
}

/* IQ4_NL and MXFP4: the codes index 16 int8 values (one TBL). */
static float ARM_FAM(dot_iq4_nl_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_iq4_nl *b = row;
    const int8x16_t kv = vld1q_s8(kvb_kvalues_iq4nl);
    double acc = 0;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        uint8x16_t lo, hi;
        ARM_FAM(nibbles)(b[i].qs, &lo, &hi);
        const int32_t s = ARM_FAM(dot32)(vqtbl1q_s8(kv, lo), vqtbl1q_s8(kv, hi), x->q + i * QK4_NL);
        acc += (double)s * ((double)kvb_f16_to_f32(b[i].d) * (double)x->d[i]);
    }
    return (float)acc;
}

static float ARM_FAM(dot_mxfp4_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_mxfp4 *b = row;
    const int8x16_t kv = vld1q_s8(kvb_kvalues_mxfp4);
    double acc = 0;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        uint8x16_t lo, hi;
        ARM_FAM(nibbles)(b[i].qs, &lo, &hi);
        const int32_t s = ARM_FAM(dot32)(vqtbl1q_s8(kv, lo), vqtbl1q_s8(kv, hi), x->q + i * QK_MXFP4);
        acc += (double)s * ((double)kvb_e8m0_half(b[i].e) * (double)x->d[i]);
    }
    return (float)acc;
}

/* Q4_K: per super-block, sum over its 8 sub-blocks of scale * (codes . x)
 * and of min * (the activations' sums), in int64 as the reference. */
static float ARM_FAM(dot_q4_K_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q4_K *b = row;
    const uint8x16_t m4 = vdupq_n_u8(0xF);
    double acc = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *xq = x->q + i * QK_K;
        int64_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; j += 2) {
            uint8_t sc0, m0, sc1, m1;
            kvb_q4k_scale_min(j, b[i].scales, &sc0, &m0);
            kvb_q4k_scale_min(j + 1, b[i].scales, &sc1, &m1);
            const uint8_t *q = b[i].qs + (j / 2) * 32;
            const uint8x16_t v0 = vld1q_u8(q), v1 = vld1q_u8(q + 16);
            const int32_t s0 = ARM_FAM(dot32)(vreinterpretq_s8_u8(vandq_u8(v0, m4)), vreinterpretq_s8_u8(vandq_u8(v1, m4)), xq + j * 32);
            const int32_t s1 = ARM_FAM(dot32)(vreinterpretq_s8_u8(vshrq_n_u8(v0, 4)), vreinterpretq_s8_u8(vshrq_n_u8(v1, 4)), xq + j * 32 + 32);
            sumi += (int64_t)sc0 * s0 + (int64_t)sc1 * s1;
            summ += (int64_t)m0 * (x->s[i * 16 + 2 * j] + x->s[i * 16 + 2 * j + 1]);
            summ += (int64_t)m1 * (x->s[i * 16 + 2 * j + 2] + x->s[i * 16 + 2 * j + 3]);
        }
        const double dx = x->d[i];
        acc += dx * ((double)kvb_f16_to_f32(b[i].d) * (double)sumi - (double)kvb_f16_to_f32(b[i].dmin) * (double)summ);
    }
    return (float)acc;
}

/* Q5_K: Q4_K's sums with bit j of qh[l] as the fifth bit of sub-block j's
 * code l (qh read once per super-block). */
static float ARM_FAM(dot_q5_K_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q5_K *b = row;
    const uint8x16_t m4 = vdupq_n_u8(0xF), one = vdupq_n_u8(1);
    double acc = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *xq = x->q + i * QK_K;
        const uint8x16_t qh0 = vld1q_u8(b[i].qh), qh1 = vld1q_u8(b[i].qh + 16);
        int64_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kvb_q4k_scale_min(j, b[i].scales, &sc, &m);
            const uint8_t *q = b[i].qs + (j / 2) * 32;
            uint8x16_t l0 = vld1q_u8(q), l1 = vld1q_u8(q + 16);
            l0 = j % 2 ? vshrq_n_u8(l0, 4) : vandq_u8(l0, m4);
            l1 = j % 2 ? vshrq_n_u8(l1, 4) : vandq_u8(l1, m4);
            const int8x16_t sh = vdupq_n_s8((int8_t)-j);
            const uint8x16_t h0 = vshlq_n_u8(vandq_u8(vshlq_u8(qh0, sh), one), 4), h1 = vshlq_n_u8(vandq_u8(vshlq_u8(qh1, sh), one), 4);
            const int32_t s = ARM_FAM(dot32)(vreinterpretq_s8_u8(vorrq_u8(l0, h0)), vreinterpretq_s8_u8(vorrq_u8(l1, h1)), xq + j * 32);
            sumi += (int64_t)sc * s;
            summ += (int64_t)m * (x->s[i * 16 + 2 * j] + x->s[i * 16 + 2 * j + 1]);
        }
        const double dx = x->d[i];
        acc += dx * ((double)kvb_f16_to_f32(b[i].d) * (double)sumi - (double)kvb_f16_to_f32(b[i].dmin) * (double)summ);
    }
    return (float)acc;
}

/* IQ4_XS: per super-block, d * d_x * sum over its 8 sub-blocks of
 * (ls - 32) * (values . x), the values by one TBL. */
static float ARM_FAM(dot_iq4_xs_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_iq4_xs *b = row;
    const int8x16_t kv = vld1q_s8(kvb_kvalues_iq4nl);
    double acc = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *xq = x->q + i * QK_K;
        int64_t sumi = 0;
        for (int ib = 0; ib < 8; ib++) {
            uint8x16_t lo, hi;
            ARM_FAM(nibbles)(b[i].qs + 16 * ib, &lo, &hi);
            const int32_t s = ARM_FAM(dot32)(vqtbl1q_s8(kv, lo), vqtbl1q_s8(kv, hi), xq + ib * 32);
            sumi += (int64_t)(kvb_iq4xs_ls(&b[i], ib) - 32) * s;
        }
        acc += (double)kvb_f16_to_f32(b[i].d) * (double)x->d[i] * (double)sumi;
    }
    return (float)acc;
}

/* Q6_K: each half h of 128 weights is four groups g of 32, codes from the
 * low or high nibbles of ql[64h + 32(g & 1) ..] and bits 2g of qh[32h ..],
 * less 32; a scale per 16 (scales[8h + 2g + l / 16]). */
static float ARM_FAM(dot_q6_K_q8)(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q6_K *b = row;
    const uint8x16_t m4 = vdupq_n_u8(0xF), m3 = vdupq_n_u8(3);
    const int8x16_t k32 = vdupq_n_s8(32);
    double acc = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *xq = x->q + i * QK_K;
        int64_t sumi = 0;
        for (int h = 0; h < 2; h++) {
            const uint8x16_t qh0 = vld1q_u8(b[i].qh + 32 * h), qh1 = vld1q_u8(b[i].qh + 32 * h + 16);
            for (int g = 0; g < 4; g++) {
                const uint8_t *ql = b[i].ql + 64 * h + (g & 1) * 32;
                uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16);
                l0 = g < 2 ? vandq_u8(l0, m4) : vshrq_n_u8(l0, 4);
                l1 = g < 2 ? vandq_u8(l1, m4) : vshrq_n_u8(l1, 4);
                const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * g));
                const uint8x16_t h0 = vandq_u8(vshlq_u8(qh0, sh), m3), h1 = vandq_u8(vshlq_u8(qh1, sh), m3);
                const int8x16_t c0 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l0, vshlq_n_u8(h0, 4))), k32);
                const int8x16_t c1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l1, vshlq_n_u8(h1, 4))), k32);
                const int8_t *xg = xq + 128 * h + 32 * g;
                const int32_t s0 = vaddvq_s32(ARM_FAM(dot16)(vdupq_n_s32(0), c0, vld1q_s8(xg)));
                const int32_t s1 = vaddvq_s32(ARM_FAM(dot16)(vdupq_n_s32(0), c1, vld1q_s8(xg + 16)));
                sumi += (int64_t)b[i].scales[8 * h + 2 * g] * s0 + (int64_t)b[i].scales[8 * h + 2 * g + 1] * s1;
            }
        }
        acc += (double)kvb_f16_to_f32(b[i].d) * (double)x->d[i] * (double)sumi;
    }
    return (float)acc;
}

/* ---- float rows ---- */

static inline float ARM_FAM(sum4)(float32x4_t a, float32x4_t b, float32x4_t c, float32x4_t d) {
    return vaddvq_f32(vaddq_f32(vaddq_f32(a, b), vaddq_f32(c, d)));
}

static float ARM_FAM(dot_f32)(const void *row, const float *x, int64_t n) {
    const float *w = row;
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, vld1q_f32(w + i), vld1q_f32(x + i));
        a1 = vfmaq_f32(a1, vld1q_f32(w + i + 4), vld1q_f32(x + i + 4));
        a2 = vfmaq_f32(a2, vld1q_f32(w + i + 8), vld1q_f32(x + i + 8));
        a3 = vfmaq_f32(a3, vld1q_f32(w + i + 12), vld1q_f32(x + i + 12));
    }
    float s = ARM_FAM(sum4)(a0, a1, a2, a3);
    for (; i < n; i++) s += w[i] * x[i];
    return s;
}

static inline float32x4_t ARM_FAM(f16x4)(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
static inline float32x4_t ARM_FAM(bf16x4)(const uint16_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }

static float ARM_FAM(dot_f16)(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, ARM_FAM(f16x4)(w + i), vld1q_f32(x + i));
        a1 = vfmaq_f32(a1, ARM_FAM(f16x4)(w + i + 4), vld1q_f32(x + i + 4));
        a2 = vfmaq_f32(a2, ARM_FAM(f16x4)(w + i + 8), vld1q_f32(x + i + 8));
        a3 = vfmaq_f32(a3, ARM_FAM(f16x4)(w + i + 12), vld1q_f32(x + i + 12));
    }
    float s = ARM_FAM(sum4)(a0, a1, a2, a3);
    for (; i < n; i++) s += kvb_f16_to_f32(w[i]) * x[i];
    return s;
}

static float ARM_FAM(dot_bf16)(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, ARM_FAM(bf16x4)(w + i), vld1q_f32(x + i));
        a1 = vfmaq_f32(a1, ARM_FAM(bf16x4)(w + i + 4), vld1q_f32(x + i + 4));
        a2 = vfmaq_f32(a2, ARM_FAM(bf16x4)(w + i + 8), vld1q_f32(x + i + 8));
        a3 = vfmaq_f32(a3, ARM_FAM(bf16x4)(w + i + 12), vld1q_f32(x + i + 12));
    }
    float s = ARM_FAM(sum4)(a0, a1, a2, a3);
    for (; i < n; i++) s += kvb_bf16_to_f32(w[i]) * x[i];
    return s;
}

/* The prefill panel (matmul.h): two tokens at a time, 32 rows in 8 vectors
 * each, one vfmaq (fused) per k and row: kvb_panel_ref's bits. */
static void ARM_FAM(panel)(const float *wp, int64_t n, const float *x, int64_t ldx, int nt, float *y, int64_t ldy, int nr) {
    int t = 0;
    for (; t < nt; t += 2) {
        const bool two = t + 1 < nt;
        const float *x0 = x + (size_t)t * (size_t)ldx, *x1 = two ? x0 + ldx : x0;
        float32x4_t a[8], c[8];
        for (int r = 0; r < 8; r++) a[r] = c[r] = vdupq_n_f32(0);
        for (int64_t k = 0; k < n; k++) {
            const float *wk = wp + (size_t)k * KVB_PANEL_ROWS;
            const float32x4_t s0 = vdupq_n_f32(x0[k]), s1 = vdupq_n_f32(x1[k]);
            for (int r = 0; r < 8; r++) {
                const float32x4_t w = vld1q_f32(wk + 4 * r);
                a[r] = vfmaq_f32(a[r], w, s0);
                c[r] = vfmaq_f32(c[r], w, s1);
            }
        }
        float o[2][KVB_PANEL_ROWS];
        for (int r = 0; r < 8; r++) { vst1q_f32(o[0] + 4 * r, a[r]); vst1q_f32(o[1] + 4 * r, c[r]); }
        for (int u = 0; u < (two ? 2 : 1); u++)
            memcpy(y + (size_t)(t + u) * (size_t)ldy, o[u], sizeof(float) * (size_t)nr);
    }
}

#if ARM_SDOT
/* ---- K-quant tiles (matmul.h's kq_tile: q4_K, q5_K, q6_K; SDOT) ----
 *
 * Up to ARM_KQ_ROWS rows x ARM_KQ_TOKENS tokens: a row at a time, each
 * sub-block of a super-block unpacked once into two int8 vectors (nibbles,
 * the fifth or the high two bits, less 32 for q6_K) and its scale read once,
 * then for every token of the tile two SDOTs and one MLA by the scale into
 * that token's int32 lanes (q6_K, a scale per 16: an SDOT and an MLA per 16). These sums are exact: the
 * largest |scale * sum| over a super-block is below 2^28 (q6_K: 16 scales of
 * |s| <= 128 times 16 codes |c| <= 32 and |x| <= 128), so the lanes' total
 * is the lone dot's int64 sumi; the mins' part (q4_K, q5_K) is the same
 * integer by pairwise adds of the token's sums per 16 and a widening
 * multiply by the mins. Each token's double then takes the lone dot's
 * expression in block order: the bits of dot_q8[type] for every pair,
 * whatever the tile's shape (test_quant). The token count is a constant in
 * each of the bodies the switch picks, so the lanes stay in registers.
 *
 * The dotprod family's; i8mm's are SMMLA tiles of the same contract
 * (dot_i8mm.c, which defines ARM_KQ_BY_SMMLA), sharing kq_mins. */
#define ARM_KQ_ROWS 4
#define ARM_KQ_TOKENS 4

/* isum += sc * (c . x) over 16 codes. */
static inline int32x4_t ARM_FAM(sdot16_scaled)(int32x4_t isum, int8x16_t c, const int8_t *x, int32_t sc) {
    return vmlaq_n_s32(isum, vdotq_s32(vdupq_n_s32(0), c, vld1q_s8(x)), sc);
}

/* isum += sc * (c0, c1 . x) over 32 codes (one sub-block scale). */
static inline int32x4_t ARM_FAM(sdot32_scaled)(int32x4_t isum, int8x16_t c0, int8x16_t c1, const int8_t *x, int32_t sc) {
    return vmlaq_n_s32(isum, vdotq_s32(vdotq_s32(vdupq_n_s32(0), c0, vld1q_s8(x)), c1, vld1q_s8(x + 16)), sc);
}

/* sum over sub-blocks j of mins[j] * (x's sum over sub-block j's 32). */
static inline int32_t ARM_FAM(kq_mins)(int16x8_t mins, const int16_t *xs16) {
    const int16x8_t per32 = vpaddq_s16(vld1q_s16(xs16), vld1q_s16(xs16 + 8));
    return vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(mins), vget_low_s16(per32)), mins, per32));
}

static inline __attribute__((always_inline)) void ARM_FAM(kq_tile_body)(const uint32_t type, const void *rows, size_t row_bytes, int nr,
                                                                       const struct kvb_q8_act *x, const int nt, int64_t n, float *out,
                                                                       int64_t ldo) {
    const uint8x16_t m4 = vdupq_n_u8(0xF), m3 = vdupq_n_u8(3), one = vdupq_n_u8(1);
    const int8x16_t k32 = vdupq_n_s8(32);
    for (int r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)rows + (size_t)r * row_bytes;
        double acc[ARM_KQ_TOKENS] = {0};
        for (int64_t i = 0; i < n / QK_K; i++) {
            int32x4_t isum[ARM_KQ_TOKENS];
            for (int t = 0; t < nt; t++) isum[t] = vdupq_n_s32(0);
            if (type == GGML_TYPE_Q6_K) {
                const struct block_q6_K *b = (const struct block_q6_K *)(const void *)row + i;
                for (int h = 0; h < 2; h++) {
                    const uint8x16_t qh0 = vld1q_u8(b->qh + 32 * h), qh1 = vld1q_u8(b->qh + 32 * h + 16);
                    for (int g = 0; g < 4; g++) {
                        const uint8_t *ql = b->ql + 64 * h + (g & 1) * 32;
                        uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16);
                        l0 = g < 2 ? vandq_u8(l0, m4) : vshrq_n_u8(l0, 4);
                        l1 = g < 2 ? vandq_u8(l1, m4) : vshrq_n_u8(l1, 4);
                        const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * g));
                        const uint8x16_t h0 = vandq_u8(vshlq_u8(qh0, sh), m3), h1 = vandq_u8(vshlq_u8(qh1, sh), m3);
                        const int8x16_t c0 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l0, vshlq_n_u8(h0, 4))), k32);
                        const int8x16_t c1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l1, vshlq_n_u8(h1, 4))), k32);
                        const int32_t s0 = b->scales[8 * h + 2 * g], s1 = b->scales[8 * h + 2 * g + 1];
                        const int64_t o = i * QK_K + 128 * h + 32 * g;
                        for (int t = 0; t < nt; t++) {
                            isum[t] = ARM_FAM(sdot16_scaled)(isum[t], c0, x[t].q + o, s0);
                            isum[t] = ARM_FAM(sdot16_scaled)(isum[t], c1, x[t].q + o + 16, s1);
                        }
                    }
                }
                for (int t = 0; t < nt; t++) {
                    const int64_t sumi = vaddvq_s32(isum[t]);
                    acc[t] += (double)kvb_f16_to_f32(b->d) * (double)x[t].d[i] * (double)sumi;
                }
                continue;
            }
            /* q4_K, q5_K: sub-blocks j, j + 1 are the low and high nibbles of qs[16 j ..] */
            const struct block_q4_K *b4 = (const struct block_q4_K *)(const void *)row + i;
            const struct block_q5_K *b5 = (const struct block_q5_K *)(const void *)row + i;
            const bool five = type == GGML_TYPE_Q5_K;
            const uint8_t *scales = five ? b5->scales : b4->scales, *qs = five ? b5->qs : b4->qs;
            uint8x16_t qh0 = vdupq_n_u8(0), qh1 = qh0;
            if (five) {
                qh0 = vld1q_u8(b5->qh);
                qh1 = vld1q_u8(b5->qh + 16);
            }
            uint8_t mn[8];
            for (int j = 0; j < 8; j += 2) {
                uint8_t sc0, sc1;
                kvb_q4k_scale_min(j, scales, &sc0, &mn[j]);
                kvb_q4k_scale_min(j + 1, scales, &sc1, &mn[j + 1]);
                const uint8x16_t v0 = vld1q_u8(qs + 16 * j), v1 = vld1q_u8(qs + 16 * j + 16);
                uint8x16_t a0 = vandq_u8(v0, m4), a1 = vandq_u8(v1, m4), c0 = vshrq_n_u8(v0, 4), c1 = vshrq_n_u8(v1, 4);
                if (five) { /* bit j of qh[l]: sub-block j's fifth bit; bit j + 1: the next one's */
                    a0 = vorrq_u8(a0, vshlq_n_u8(vandq_u8(qh0, one), 4));
                    a1 = vorrq_u8(a1, vshlq_n_u8(vandq_u8(qh1, one), 4));
                    c0 = vorrq_u8(c0, vshlq_n_u8(vandq_u8(vshrq_n_u8(qh0, 1), one), 4));
                    c1 = vorrq_u8(c1, vshlq_n_u8(vandq_u8(vshrq_n_u8(qh1, 1), one), 4));
                    qh0 = vshrq_n_u8(qh0, 2);
                    qh1 = vshrq_n_u8(qh1, 2);
                }
                const int64_t o = i * QK_K + 32 * j;
                for (int t = 0; t < nt; t++) {
                    isum[t] = ARM_FAM(sdot32_scaled)(isum[t], vreinterpretq_s8_u8(a0), vreinterpretq_s8_u8(a1), x[t].q + o, sc0);
                    isum[t] = ARM_FAM(sdot32_scaled)(isum[t], vreinterpretq_s8_u8(c0), vreinterpretq_s8_u8(c1), x[t].q + o + 32, sc1);
                }
            }
            const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
            const uint16_t dh = five ? b5->d : b4->d, dminh = five ? b5->dmin : b4->dmin;
            for (int t = 0; t < nt; t++) {
                const int64_t sumi = vaddvq_s32(isum[t]), summ = ARM_FAM(kq_mins)(mins, x[t].s + i * 16);
                const double dx = x[t].d[i];
                acc[t] += dx * ((double)kvb_f16_to_f32(dh) * (double)sumi - (double)kvb_f16_to_f32(dminh) * (double)summ);
            }
        }
        for (int t = 0; t < nt; t++) out[(size_t)t * (size_t)ldo + (size_t)r] = (float)acc[t];
    }
}

/* A tile of type: the body with the token count a constant. first: no
 * prefetch (it would change no value). */
#define ARM_KQ_TILE(tname, TYPE)                                                                                                      \
    static void ARM_FAM(tname)(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, \
                               int64_t ldo, bool first) {                                                                         \
        (void)first;                                                                                                              \
        switch (nt) {                                                                                                             \
        case 1: ARM_FAM(kq_tile_body)(TYPE, rows, row_bytes, nr, x, 1, n, out, ldo); break;                                       \
        case 2: ARM_FAM(kq_tile_body)(TYPE, rows, row_bytes, nr, x, 2, n, out, ldo); break;                                       \
        case 3: ARM_FAM(kq_tile_body)(TYPE, rows, row_bytes, nr, x, 3, n, out, ldo); break;                                       \
        default: ARM_FAM(kq_tile_body)(TYPE, rows, row_bytes, nr, x, ARM_KQ_TOKENS, n, out, ldo); break;                          \
        }                                                                                                                         \
    }
#ifndef ARM_KQ_BY_SMMLA /* the i8mm family has its own (dot_i8mm.c) */
ARM_KQ_TILE(kq_tile_q4_K, GGML_TYPE_Q4_K)
ARM_KQ_TILE(kq_tile_q5_K, GGML_TYPE_Q5_K)
ARM_KQ_TILE(kq_tile_q6_K, GGML_TYPE_Q6_K)
#endif
#undef ARM_KQ_TILE
#endif

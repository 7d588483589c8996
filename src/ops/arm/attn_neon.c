/*
 * attn_neon.c — the ARM families' attention primitives (ops.h): scores and
 * value accumulation over f32 and f16 KV rows with NEON (f16 rows widened
 * by FCVTL, part of every AArch64 CPU); q8_0 and q4_0 keys scored from int8
 * queries with exact integer block sums and the reference's fmaf chain (its
 * bits are every family's contract); many query rows over f16 pages get an f32 tile (f16_tile_rows);
 * other rows reach these kernels as f32 tiles (quant_rows is
 * false: the driver dequantizes a tile at a time); exp by the avx2
 * family's polynomial (its bits). The f16 conversions, the row loaders
 * and recall's page bounds are the reference's. The NEON families share this
 * body but for the dotprod and i8mm families' integer scores
 * (attn_dotprod.c, SDOT); the name differs, so bench JSON reports the
 * family in use. The sve family's table is here too: its scores and accum
 * are attn_sve.c's, its integer scores SDOT's, the rest these.
 */
#include "arm_kernels.h"
#include "../quant.h"

#include <arm_neon.h>
#include <math.h>

static inline float32x4_t kv4(const void *row, enum kvb_dtype t, int32_t i) {
    if (t == KVB_DTYPE_F16) return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)row + i)));
    return vld1q_f32((const float *)row + i);
}
static inline float kv1(const void *row, enum kvb_dtype t, int32_t i) {
    return t == KVB_DTYPE_F16 ? kvb_f16_to_f32(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

static void scores_neon(const struct kvb_kv_view *v, const float *q, int32_t n_rows, int32_t j0, int32_t nt, float *s) {
    const int32_t d = v->head_dim;
    for (int32_t t = 0; t < nt; t++) {
        const void *k = kvb_view_k(v, j0 + t);
        for (int32_t r = 0; r < n_rows; r++) {
            const float *qr = q + (size_t)r * d;
            float32x4_t a0 = vdupq_n_f32(0), a1 = a0;
            int32_t i = 0;
            for (; i + 8 <= d; i += 8) {
                a0 = vfmaq_f32(a0, vld1q_f32(qr + i), kv4(k, v->dtype, i));
                a1 = vfmaq_f32(a1, vld1q_f32(qr + i + 4), kv4(k, v->dtype, i + 4));
            }
            float sum = vaddvq_f32(vaddq_f32(a0, a1));
            for (; i < d; i++) sum += qr[i] * kv1(k, v->dtype, i);
            s[r * KVB_ATTN_TILE + t] = sum;
        }
    }
}

static void accum_neon(const struct kvb_kv_view *v, const float *e, int32_t n_rows, int32_t j0, int32_t nt, float *acc) {
    const int32_t d = kvb_view_dv(v);
    for (int32_t t = 0; t < nt; t++) {
        const void *vr = kvb_view_v(v, j0 + t);
        for (int32_t r = 0; r < n_rows; r++) {
            const float w = e[r * KVB_ATTN_TILE + t];
            if (w == 0) continue;
            float *ar = acc + (size_t)r * d;
            const float32x4_t wv = vdupq_n_f32(w);
            int32_t i = 0;
            for (; i + 4 <= d; i += 4) vst1q_f32(ar + i, vfmaq_f32(vld1q_f32(ar + i), wv, kv4(vr, v->dtype_v, i)));
            for (; i < d; i++) ar[i] += w * kv1(vr, v->dtype_v, i);
        }
    }
}

/* exp of 4 lanes: x = n ln2 + r (ln2 in two parts), a degree-6 polynomial,
 * times 2^n built in the exponent bits; below -87.34 exactly 0 (so -inf
 * gives 0). The same operations in the same order as the avx2 family's
 * exp8 (x86/attn_avx2.c), FMA for FMA: the same bits as AVX2's vexp. */
static inline float32x4_t exp4(float32x4_t x) {
    const float32x4_t lo = vdupq_n_f32(-87.33654f), hi = vdupq_n_f32(88.37626f);
    const uint32x4_t zero = vcltq_f32(x, lo);
    x = vminnmq_f32(vmaxnmq_f32(x, lo), hi);
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.0f / 720);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    /* 2^n for n in [-126, 127]; n = 128 (x near hi) is split as 2^(n-1) * 2 */
    int32x4_t ni = vcvtq_s32_f32(n);
    const uint32x4_t big = vcgtq_s32(ni, vdupq_n_s32(127));
    ni = vsubq_s32(ni, vreinterpretq_s32_u32(vandq_u32(big, vdupq_n_u32(1))));
    const float32x4_t pw = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(ni, vdupq_n_s32(127)), 23));
    p = vmulq_f32(p, pw);
    p = vbslq_f32(big, vaddq_f32(p, p), p);
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(p), zero));
}

static void vexp_neon(float *x, int32_t n) {
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(x + i, exp4(vld1q_f32(x + i)));
    if (i < n) {
        float tmp[4] = {0};
        for (int32_t k = 0; i + k < n; k++) tmp[k] = x[i + k];
        vst1q_f32(tmp, exp4(vld1q_f32(tmp)));
        for (int32_t k = 0; i + k < n; k++) x[i + k] = tmp[k];
    }
}
static void to_f16_arm(const float *src, uint16_t *dst, int32_t n) { kvb_kernels_ref.to_f16(src, dst, n); }
static void from_f16_arm(const uint16_t *src, float *dst, int32_t n) { kvb_kernels_ref.from_f16(src, dst, n); }
static void from_q8_0_arm(const void *src, float *dst, int32_t n) { kvb_kernels_ref.from_q8_0(src, dst, n); }
static void from_q4_0_arm(const void *src, float *dst, int32_t n) { kvb_kernels_ref.from_q4_0(src, dst, n); }
/* Integer scores (ops.h's contract, the reference's bits): per block the
 * exact integer dot (SMULL/SADALP; q4_0 nibbles less 8 first), then the
 * same fmaf chain over the blocks in order as scores_i8_ref. */
static void scores_i8_neon(const struct kvb_kv_view *v, const struct kvb_q8_rows *q, int32_t n_rows, int32_t j0, int32_t nt, float *s) {
    const int32_t d = v->head_dim, nb = d / 32;
    const bool q8 = v->dtype == KVB_DTYPE_Q8_0;
    const uint8x16_t m4 = vdupq_n_u8(0xF);
    const int8x16_t k8 = vdupq_n_s8(8);
    for (int32_t t = 0; t < nt; t++) {
        const void *k = kvb_view_k(v, j0 + t);
        const struct block_q8_0 *b8 = k;
        const struct block_q4_0 *b4 = k;
        for (int32_t r = 0; r < n_rows; r++) {
            const int8_t *qr = q->q + (size_t)r * d;
            float acc = 0;
            for (int32_t b = 0; b < nb; b++) {
                int8x16_t w0, w1;
                if (q8) {
                    w0 = vld1q_s8(b8[b].qs);
                    w1 = vld1q_s8(b8[b].qs + 16);
                } else {
                    const uint8x16_t u = vld1q_u8(b4[b].qs);
                    w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(u, m4)), k8);
                    w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(u, 4)), k8);
                }
                const int8x16_t x0 = vld1q_s8(qr + b * 32), x1 = vld1q_s8(qr + b * 32 + 16);
                int32x4_t p = vpadalq_s16(vdupq_n_s32(0), vmull_s8(vget_low_s8(w0), vget_low_s8(x0)));
                p = vpadalq_s16(p, vmull_high_s8(w0, x0));
                p = vpadalq_s16(p, vmull_s8(vget_low_s8(w1), vget_low_s8(x1)));
                p = vpadalq_s16(p, vmull_high_s8(w1, x1));
                const float dk = kvb_f16_to_f32(q8 ? b8[b].d : b4[b].d);
                acc = fmaf((float)vaddvq_s32(p), dk * q->d[(size_t)r * nb + b], acc);
            }
            s[r * KVB_ATTN_TILE + t] = acc;
        }
    }
}
static void page_bounds_arm(const float *q, int32_t n_rows, const float *lohi, int64_t n_pages, int32_t d, float *out) {
    kvb_kernels_ref.page_bounds(q, n_rows, lohi, n_pages, d, out);
}

/* From this many query rows over f16 pages the driver hands an f32 tile:
 * scores_neon widens a K row once per query row, so a tile (each row
 * widened once) saves work from two rows on; the bits are the same (FCVTL
 * is exact and the f32 path runs the same FMAs: test_attn). 8, until an
 * ARM machine measures the crossover. */
#define ARM_F16_TILE_ROWS 8

#define ARM_ATTN(fam, scores_fn, accum_fn, i8)                                                                                 \
    {                                                                                                                          \
        .name = fam, .scores = scores_fn, .accum = accum_fn, .vexp = vexp_neon, .to_f16 = to_f16_arm, .from_f16 = from_f16_arm, \
        .from_q8_0 = from_q8_0_arm, .from_q4_0 = from_q4_0_arm, .quant_rows = false, .f16_tile_rows = ARM_F16_TILE_ROWS, .scores_i8 = i8, \
        .page_bounds = page_bounds_arm,                                                                                        \
    }

const struct kvb_kernels kvb_kernels_neon = ARM_ATTN("neon", scores_neon, accum_neon, scores_i8_neon);
const struct kvb_kernels kvb_kernels_dotprod = ARM_ATTN("dotprod", scores_neon, accum_neon, kvb_scores_i8_sdot);
const struct kvb_kernels kvb_kernels_i8mm = ARM_ATTN("i8mm", scores_neon, accum_neon, kvb_scores_i8_sdot);
/* sve: its own f32/f16 scores and accumulation (attn_sve.c), SDOT integer scores, the rest these */
const struct kvb_kernels kvb_kernels_sve = ARM_ATTN("sve", kvb_scores_sve, kvb_accum_sve, kvb_scores_i8_sdot);

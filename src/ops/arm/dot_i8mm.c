/*
 * dot_i8mm.c — the i8mm family's weight kernels: dot_arm.h with SDOT, and
 * Q8_0 and K-quant tiles by SMMLA (ARMv8.6 int8 matrix multiply: a 2 x 8
 * by 8 x 2 int8 product added to a 2 x 2 int32 tile). A Q8_0 tile of up to
 * 4 rows x 4 tokens takes each block of 32 as four 8-wide steps over 2 x 2
 * pairs of (row, token); each pair's block sum is exact, then scaled and
 * summed in double in block order: the bits of dot_q8[Q8_0] (and of the
 * scalar reference) for every pair, whatever the tile's shape (matmul.h).
 * The K-quant tiles (below) do the same per group of 32 codes.
 */
#include <string.h>

#define ARM_SDOT 1
#define ARM_KQ_BY_SMMLA 1 /* the K-quant tiles below, not dot_arm.h's SDOT ones */
#define ARM_FAM(name) name##_i8mm
#include "dot_arm.h"

#define TILE 4 /* rows and tokens */

static void q8_tile_i8mm(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                         bool first) {
    (void)first; /* no prefetch: the values are the same */
    const struct block_q8_0 *w[TILE];
    const struct kvb_q8_act *a[TILE];
    for (int r = 0; r < TILE; r++) w[r] = (const struct block_q8_0 *)((const uint8_t *)rows + (size_t)(r < nr ? r : nr - 1) * row_bytes);
    for (int t = 0; t < TILE; t++) a[t] = &x[t < nt ? t : nt - 1];
    double acc[TILE][TILE] = {{0}};
    for (int64_t b = 0; b < n / QK8_0; b++) {
        for (int r = 0; r < nr; r += 2)
            for (int t = 0; t < nt; t += 2) {
                const int8_t *w0 = w[r][b].qs, *w1 = w[r + 1][b].qs;
                const int8_t *x0 = a[t]->q + b * QK8_0, *x1 = a[t + 1]->q + b * QK8_0;
                int32x4_t s = vdupq_n_s32(0);
                for (int c = 0; c < QK8_0; c += 8)
                    s = vmmlaq_s32(s, vcombine_s8(vld1_s8(w0 + c), vld1_s8(w1 + c)), vcombine_s8(vld1_s8(x0 + c), vld1_s8(x1 + c)));
                /* s = [r.t, r.t+1, r+1.t, r+1.t+1] */
                int32_t si[4];
                vst1q_s32(si, s);
                for (int u = 0; u < 2; u++)
                    for (int v = 0; v < 2; v++)
                        acc[r + u][t + v] +=
                            (double)si[2 * u + v] * ((double)kvb_f16_to_f32(w[r + u][b].d) * (double)a[t + v]->d[b]);
            }
    }
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) out[(size_t)t * (size_t)ldo + (size_t)r] = (float)acc[r][t];
}

/* ---- K-quant tiles by SMMLA (matmul.h's kq_tile: q4_K, q5_K, q6_K) ----
 *
 * Up to 4 rows x 4 tokens as 2 x 2 pairs of (row pair, token pair). Per
 * super-block and group of 32 codes (a q4_K/q5_K sub-block; a q6_K group,
 * two scales of 16): each row's 32 codes unpacked once (codes32), a row
 * pair's interleaved 8 bytes at a time by ZIP1/ZIP2 (4 vectors) and a token
 * pair's the same (once for both row pairs); then per (row pair, token
 * pair) 4 SMMLA and one MLA by the scale vector [s_r, s_r, s_r+1, s_r+1]
 * (q6_K: 2 SMMLA and an MLA per 16). Lane 2u + v of a pair's int32 vector
 * is then (row 2p + u, token 2q + v)'s exact scaled sum over the
 * super-block (below 2^28 in magnitude: dot_arm.h), the lone dot's int64
 * sumi; the mins' part and the double tail are the lone dot's expression.
 * So every pair has dot_q8[type]'s bits whatever the tile's shape
 * (test_quant); rows and tokens past nr and nt repeat the last (their
 * results are dropped), and the pair counts are constants in each body.
 * Per 4 x 4 and 32 codes: 4 x 2 LD and 4 x 2 unpack ops (q4_K) of the rows,
 * 8 ZIP of rows, 8 LD + 8 ZIP of tokens, 16 SMMLA, 4 MLA: the SDOT tile's
 * 32 SDOT and 16 MLA, 32 activation loads and a per-token ADDV a block
 * become about two thirds as many instructions. */

/* The 32 codes of group j (0..7) of a block of type, as int8. */
static inline __attribute__((always_inline)) void kq_codes32(const uint32_t type, const uint8_t *blk, int j, int8x16_t *c0, int8x16_t *c1) {
    const uint8x16_t m4 = vdupq_n_u8(0xF);
    if (type == GGML_TYPE_Q6_K) { /* h = j / 4, g = j % 4: dot_q6_K_q8's unpack */
        const struct block_q6_K *b = (const struct block_q6_K *)(const void *)blk;
        const int h = j / 4, g = j % 4;
        const uint8_t *ql = b->ql + 64 * h + (g & 1) * 32;
        uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16);
        l0 = g < 2 ? vandq_u8(l0, m4) : vshrq_n_u8(l0, 4);
        l1 = g < 2 ? vandq_u8(l1, m4) : vshrq_n_u8(l1, 4);
        const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * g));
        const uint8x16_t m3 = vdupq_n_u8(3);
        const uint8x16_t h0 = vandq_u8(vshlq_u8(vld1q_u8(b->qh + 32 * h), sh), m3), h1 = vandq_u8(vshlq_u8(vld1q_u8(b->qh + 32 * h + 16), sh), m3);
        *c0 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l0, vshlq_n_u8(h0, 4))), vdupq_n_s8(32));
        *c1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l1, vshlq_n_u8(h1, 4))), vdupq_n_s8(32));
        return;
    }
    const bool five = type == GGML_TYPE_Q5_K;
    const uint8_t *qs = five ? ((const struct block_q5_K *)(const void *)blk)->qs : ((const struct block_q4_K *)(const void *)blk)->qs;
    uint8x16_t l0 = vld1q_u8(qs + 32 * (j / 2)), l1 = vld1q_u8(qs + 32 * (j / 2) + 16);
    l0 = j % 2 ? vshrq_n_u8(l0, 4) : vandq_u8(l0, m4);
    l1 = j % 2 ? vshrq_n_u8(l1, 4) : vandq_u8(l1, m4);
    if (five) { /* bit j of qh[l] as 0x10 */
        const uint8_t *qh = ((const struct block_q5_K *)(const void *)blk)->qh;
        const int8x16_t sh = vdupq_n_s8((int8_t)-j);
        const uint8x16_t one = vdupq_n_u8(1);
        l0 = vorrq_u8(l0, vshlq_n_u8(vandq_u8(vshlq_u8(vld1q_u8(qh), sh), one), 4));
        l1 = vorrq_u8(l1, vshlq_n_u8(vandq_u8(vshlq_u8(vld1q_u8(qh + 16), sh), one), 4));
    }
    *c0 = vreinterpretq_s8_u8(l0);
    *c1 = vreinterpretq_s8_u8(l1);
}

/* a's and b's first 8 bytes, and their second 8 (an SMMLA operand each). */
static inline int8x16_t zip_lo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
static inline int8x16_t zip_hi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* s += the 2 x 2 dots of rows (ra: 16 codes of each row interleaved as zip_lo, zip_hi) with tokens (xa likewise). */
static inline int32x4_t mm16(int32x4_t s, const int8x16_t ra[2], const int8x16_t xa[2]) {
    return vmmlaq_s32(vmmlaq_s32(s, ra[0], xa[0]), ra[1], xa[1]);
}

static inline __attribute__((always_inline)) void kq_tile_mm(const uint32_t type, const void *rows, size_t row_bytes, int nr,
                                                            const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                                                            const int RP, const int TP) {
    const size_t bsz = type == GGML_TYPE_Q6_K ? sizeof(struct block_q6_K) : type == GGML_TYPE_Q5_K ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    const uint8_t *w[TILE];
    const struct kvb_q8_act *a[TILE];
    for (int r = 0; r < TILE; r++) w[r] = (const uint8_t *)rows + (size_t)(r < nr ? r : nr - 1) * row_bytes;
    for (int t = 0; t < TILE; t++) a[t] = &x[t < nt ? t : nt - 1];
    double acc[TILE][TILE] = {{0}};
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *blk[TILE];
        for (int r = 0; r < 2 * RP; r++) blk[r] = w[r] + (size_t)i * bsz;
        int32x4_t s[2][2];
        for (int p = 0; p < RP; p++)
            for (int q = 0; q < TP; q++) s[p][q] = vdupq_n_s32(0);
        /* scales (per 32 or, q6_K, per 16) and mins of the tile's rows */
        int32_t sc[TILE][16];
        uint8_t mn[TILE][8];
        for (int r = 0; r < 2 * RP; r++) {
            if (type == GGML_TYPE_Q6_K) {
                for (int k = 0; k < 16; k++) sc[r][k] = ((const struct block_q6_K *)(const void *)blk[r])->scales[k];
                continue;
            }
            const uint8_t *scales = type == GGML_TYPE_Q5_K ? ((const struct block_q5_K *)(const void *)blk[r])->scales
                                                           : ((const struct block_q4_K *)(const void *)blk[r])->scales;
            for (int j = 0; j < 8; j++) {
                uint8_t c;
                kvb_q4k_scale_min(j, scales, &c, &mn[r][j]);
                sc[r][j] = c;
            }
        }
        for (int j = 0; j < 8; j++) {
            int8x16_t xz[2][4]; /* token pair q's 32 activations of group j, interleaved */
            for (int q = 0; q < TP; q++) {
                const int8_t *x0 = a[2 * q]->q + i * QK_K + 32 * j, *x1 = a[2 * q + 1]->q + i * QK_K + 32 * j;
                const int8x16_t u0 = vld1q_s8(x0), u1 = vld1q_s8(x0 + 16), v0 = vld1q_s8(x1), v1 = vld1q_s8(x1 + 16);
                xz[q][0] = zip_lo(u0, v0);
                xz[q][1] = zip_hi(u0, v0);
                xz[q][2] = zip_lo(u1, v1);
                xz[q][3] = zip_hi(u1, v1);
            }
            for (int p = 0; p < RP; p++) {
                int8x16_t c00, c01, c10, c11;
                kq_codes32(type, blk[2 * p], j, &c00, &c01);
                kq_codes32(type, blk[2 * p + 1], j, &c10, &c11);
                const int8x16_t rz[4] = {zip_lo(c00, c10), zip_hi(c00, c10), zip_lo(c01, c11), zip_hi(c01, c11)};
                if (type == GGML_TYPE_Q6_K) { /* scales 2j, 2j + 1 (scales[8h + 2g + l / 16]) */
                    const int32x4_t sv0 = vcombine_s32(vdup_n_s32(sc[2 * p][2 * j]), vdup_n_s32(sc[2 * p + 1][2 * j]));
                    const int32x4_t sv1 = vcombine_s32(vdup_n_s32(sc[2 * p][2 * j + 1]), vdup_n_s32(sc[2 * p + 1][2 * j + 1]));
                    for (int q = 0; q < TP; q++) {
                        s[p][q] = vmlaq_s32(s[p][q], mm16(vdupq_n_s32(0), rz, xz[q]), sv0);
                        s[p][q] = vmlaq_s32(s[p][q], mm16(vdupq_n_s32(0), rz + 2, xz[q] + 2), sv1);
                    }
                } else {
                    const int32x4_t sv = vcombine_s32(vdup_n_s32(sc[2 * p][j]), vdup_n_s32(sc[2 * p + 1][j]));
                    for (int q = 0; q < TP; q++) s[p][q] = vmlaq_s32(s[p][q], mm16(mm16(vdupq_n_s32(0), rz, xz[q]), rz + 2, xz[q] + 2), sv);
                }
            }
        }
        for (int p = 0; p < RP; p++)
            for (int q = 0; q < TP; q++) {
                int32_t si[4];
                vst1q_s32(si, s[p][q]);
                for (int u = 0; u < 2; u++)
                    for (int v = 0; v < 2; v++) {
                        const int r = 2 * p + u, t = 2 * q + v;
                        if (r >= nr || t >= nt) continue;
                        const int64_t sumi = si[2 * u + v];
                        if (type == GGML_TYPE_Q6_K) {
                            acc[r][t] += (double)kvb_f16_to_f32(((const struct block_q6_K *)(const void *)blk[r])->d) * (double)a[t]->d[i] * (double)sumi;
                            continue;
                        }
                        const struct block_q4_K *b4 = (const struct block_q4_K *)(const void *)blk[r]; /* d, dmin lead both */
                        const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn[r])));
                        const int64_t summ = ARM_FAM(kq_mins)(mins, a[t]->s + i * 16);
                        const double dx = a[t]->d[i];
                        acc[r][t] += dx * ((double)kvb_f16_to_f32(b4->d) * (double)sumi - (double)kvb_f16_to_f32(b4->dmin) * (double)summ);
                    }
            }
    }
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) out[(size_t)t * (size_t)ldo + (size_t)r] = (float)acc[r][t];
}

#define KQ_TILE_MM(tname, TYPE)                                                                                                       \
    static void tname(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out,       \
                      int64_t ldo, bool first) {                                                                                  \
        (void)first; /* no prefetch: the values are the same */                                                                   \
        const int rp = (nr + 1) / 2, tp = (nt + 1) / 2;                                                                           \
        if (rp == 1 && tp == 1) kq_tile_mm(TYPE, rows, row_bytes, nr, x, nt, n, out, ldo, 1, 1);                                  \
        else if (rp == 1) kq_tile_mm(TYPE, rows, row_bytes, nr, x, nt, n, out, ldo, 1, 2);                                        \
        else if (tp == 1) kq_tile_mm(TYPE, rows, row_bytes, nr, x, nt, n, out, ldo, 2, 1);                                        \
        else kq_tile_mm(TYPE, rows, row_bytes, nr, x, nt, n, out, ldo, 2, 2);                                                     \
    }
KQ_TILE_MM(kq_mm_q4_K, GGML_TYPE_Q4_K)
KQ_TILE_MM(kq_mm_q5_K, GGML_TYPE_Q5_K)
KQ_TILE_MM(kq_mm_q6_K, GGML_TYPE_Q6_K)
#undef KQ_TILE_MM

const struct kvb_dot_kernels kvb_dot_i8mm = {
    .name = "i8mm",
    .panel = panel_i8mm,
    .dot_q8 = {ARM_DOT_Q8(i8mm)},
    .kq_tile = {[GGML_TYPE_Q4_K] = kq_mm_q4_K, [GGML_TYPE_Q5_K] = kq_mm_q5_K, [GGML_TYPE_Q6_K] = kq_mm_q6_K},
    .kq_tile_rows = TILE,
    .kq_tile_tokens = TILE,
    .dot = {[GGML_TYPE_F32] = dot_f32_i8mm, [GGML_TYPE_F16] = dot_f16_i8mm, [GGML_TYPE_BF16] = dot_bf16_i8mm},
    .q8_tile = q8_tile_i8mm,
    .q8_tile_rows = TILE,
    .q8_tile_rows_one = TILE,
    .q8_tile_tokens = TILE,
    .q8_tile_prompts = true, /* and the K-quants' (kq_tile_prompts): ARM_INT8_PROMPTS, arm_kernels.h */
    .kq_tile_prompts = true,
};

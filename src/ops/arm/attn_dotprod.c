/*
 * attn_dotprod.c — the dotprod and i8mm families' integer attention scores
 * (ops.h's scores_i8: int8 query rows against q8_0 or q4_0 keys), built
 * with SDOT (-march=armv8.2-a+dotprod; dispatch.c picks these families
 * only where the CPU has it). The rest of their attention table is the
 * neon family's (attn_neon.c).
 *
 * A key at a time and four query rows per pass: per block the key's 32
 * codes are read (q4_0: nibbles less 8) once for the four rows, each row's
 * block sum is two SDOTs (exact in int32: |k| <= 128, |q| <= 127), the four
 * rows' sums are reduced together by pairwise adds into one vector, and the
 * four chains take one fused multiply-add: lane r computes
 * fmaf((float)isum_r, d_k * d_q[r], acc_r) in block order, the reference's
 * operations exactly, so its bits (test_attn compares every family).
 * Per block and four rows: 2 loads (+ 4 for q4_0's unpack) of the key, 8
 * loads and 8 SDOTs of the rows, 3 ADDPs, SCVTF, FMUL, FMLA.
 */
#include "arm_kernels.h"
#include "../quant.h"

#include <arm_neon.h>
#include <string.h>

void kvb_scores_i8_sdot(const struct kvb_kv_view *v, const struct kvb_q8_rows *q, int32_t n_rows, int32_t j0, int32_t nt, float *s) {
    const int32_t d = v->head_dim, nb = d / 32;
    const bool q8 = v->dtype == KVB_DTYPE_Q8_0;
    /* [block][row]: the rows' scales, four at a load (0 past the last row) */
    float dqt[KVB_ATTN_MAX_DIM / 32][KVB_ATTN_MAX_ROWS + 4];
    for (int32_t b = 0; b < nb; b++)
        for (int32_t r = 0; r < n_rows + 4; r++) dqt[b][r] = r < n_rows ? q->d[(size_t)r * nb + b] : 0.0f;
    const uint8x16_t m4 = vdupq_n_u8(0xF);
    const int8x16_t k8 = vdupq_n_s8(8);
    for (int32_t t = 0; t < nt; t++) {
        const uint8_t *k = kvb_view_k(v, j0 + t);
        for (int32_t r0 = 0; r0 < n_rows; r0 += 4) {
            const int32_t nr = KVB_MIN(4, n_rows - r0);
            /* rows past the last read row r0 (their sums are scaled by 0) */
            const int8_t *qr[4];
            for (int32_t i = 0; i < 4; i++) qr[i] = q->q + (size_t)(r0 + (i < nr ? i : 0)) * d;
            float32x4_t acc = vdupq_n_f32(0);
            for (int32_t b = 0; b < nb; b++) {
                int8x16_t w0, w1;
                uint16_t h;
                if (q8) {
                    const uint8_t *blk = k + (size_t)b * sizeof(struct block_q8_0);
                    memcpy(&h, blk, sizeof h);
                    w0 = vld1q_s8((const int8_t *)blk + 2);
                    w1 = vld1q_s8((const int8_t *)blk + 18);
                } else {
                    const uint8_t *blk = k + (size_t)b * sizeof(struct block_q4_0);
                    memcpy(&h, blk, sizeof h);
                    const uint8x16_t u = vld1q_u8(blk + 2);
                    w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(u, m4)), k8);
                    w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(u, 4)), k8);
                }
                int32x4_t p[4];
                for (int32_t i = 0; i < 4; i++) {
                    const int8_t *x = qr[i] + b * 32;
                    p[i] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(x)), w1, vld1q_s8(x + 16));
                }
                /* lane i: row r0 + i's block sum */
                const int32x4_t isum = vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3]));
                const float32x4_t scale = vmulq_n_f32(vld1q_f32(&dqt[b][r0]), kvb_f16_to_f32(h));
                acc = vfmaq_f32(acc, vcvtq_f32_s32(isum), scale);
            }
            float out[4];
            vst1q_f32(out, acc);
            for (int32_t i = 0; i < nr; i++) s[(size_t)(r0 + i) * KVB_ATTN_TILE + t] = out[i];
        }
    }
}

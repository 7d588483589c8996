/*
 * dot_i8mm.c — the i8mm family's weight kernels: dot_arm.h with SDOT (its
 * K-quant tiles too), and Q8_0 tiles by SMMLA (ARMv8.6 int8 matrix multiply: a 2 x 8 by 8 x 2
 * int8 product added to a 2 x 2 int32 tile). A tile of up to 4 rows x 4
 * tokens takes each block of 32 as four 8-wide steps over 2 x 2 pairs of
 * (row, token); each pair's block sum is exact, then scaled and summed in
 * double in block order: the bits of dot_q8[Q8_0] (and of the scalar
 * reference) for every pair, whatever the tile's shape (matmul.h).
 */
#include <string.h>

#define ARM_SDOT 1
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

const struct kvb_dot_kernels kvb_dot_i8mm = {
    .name = "i8mm",
    .panel = panel_i8mm,
    .dot_q8 = {ARM_DOT_Q8(i8mm)},
    ARM_KQ_TILES(i8mm),
    .dot = {[GGML_TYPE_F32] = dot_f32_i8mm, [GGML_TYPE_F16] = dot_f16_i8mm, [GGML_TYPE_BF16] = dot_bf16_i8mm},
    .q8_tile = q8_tile_i8mm,
    .q8_tile_rows = TILE,
    .q8_tile_rows_one = TILE,
    .q8_tile_tokens = TILE,
    .q8_tile_prompts = false, /* prompts through the f32 panels, as on x86 until a machine says otherwise */
};

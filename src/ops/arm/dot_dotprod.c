/*
 * dot_dotprod.c — the dotprod family's weight kernels: dot_arm.h with SDOT
 * (ARMv8.2 dot product: four int8 products summed into each int32 lane),
 * its Q8_0 tile and its K-quant tiles (q4_K, q5_K, q6_K), for decode,
 * batches and prompts.
 * The sve family's table is here too: its float rows and Q8_0/Q4_0 int8
 * dots are dot_sve.c's, every other slot this family's (the sve family
 * needs dotprod, dispatch.c), the K-quant tiles and the Q8_0 tile included,
 * but one token reads Q8_0 rows through the SVE dot (q8_tile_rows_one 0): it
 * has the tile's bits, the reference's, so a sequence decoding alone and
 * one in a batch agree.
 *
 * The Q8_0 tile (dotprod): up to 4 rows x 4 tokens. Per block each row's 32
 * codes are loaded and its scale converted once for the tile's tokens, each
 * token's 32 activations once for its rows; per pair two SDOTs make the
 * block's int32 lanes, and the four rows' lanes are summed by three ADDPs
 * (one vector of the four exact block sums, where the lone dot has an ADDV
 * each). Each pair then takes the lone dot's double step in block order:
 * every pair has dot_q8_0_q8_dotprod's bits (the reference's), whatever the
 * tile's shape (test_quant). A row block's first token group (`first`)
 * prefetches the next block's rows as it goes, as matmul.c's lone-dot loop
 * prefetched the next row: decode streams the rows from memory.
 */
#include <string.h>

#define ARM_SDOT 1
#define ARM_FAM(name) name##_dotprod
#include "dot_arm.h"

#define Q8T 4 /* the Q8_0 tile's rows and tokens */

static inline __attribute__((always_inline)) void q8_tile_body(const void *rows, size_t row_bytes, const struct kvb_q8_act *x, int64_t n,
                                                              float *out, int64_t ldo, const int NR, const int NT, const bool first) {
    const size_t next = (size_t)NR * row_bytes; /* the next row block, at this offset (a prefetch past the matrix is harmless) */
    const struct block_q8_0 *w[Q8T];
    for (int r = 0; r < Q8T; r++) w[r] = (const struct block_q8_0 *)((const uint8_t *)rows + (size_t)(r < NR ? r : 0) * row_bytes);
    double acc[Q8T][Q8T] = {{0}};
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int8x16_t lo[Q8T], hi[Q8T];
        float dw[Q8T];
        for (int r = 0; r < NR; r++) {
            if (first) __builtin_prefetch((const char *)&w[r][i] + next);
            lo[r] = vld1q_s8(w[r][i].qs);
            hi[r] = vld1q_s8(w[r][i].qs + 16);
            dw[r] = kvb_f16_to_f32(w[r][i].d);
        }
        for (int t = 0; t < NT; t++) {
            const int8x16_t x0 = vld1q_s8(x[t].q + i * QK8_0), x1 = vld1q_s8(x[t].q + i * QK8_0 + 16);
            int32x4_t s[Q8T];
            for (int r = 0; r < Q8T; r++) s[r] = r < NR ? vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo[r], x0), hi[r], x1) : vdupq_n_s32(0);
            int32_t si[Q8T];
            vst1q_s32(si, vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]))); /* lane r: row r's exact block sum */
            const double dx = (double)x[t].d[i];
            for (int r = 0; r < NR; r++) acc[r][t] += (double)si[r] * ((double)dw[r] * dx);
        }
    }
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < NR; r++) out[(size_t)t * (size_t)ldo + (size_t)r] = (float)acc[r][t];
}

static void q8_tile_dotprod(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                            bool first) {
    switch (nr * 8 + nt) { /* constant shapes: the lanes stay in registers; `first` only prefetches */
#define Q8_CASE(R, T) case R * 8 + T: q8_tile_body(rows, row_bytes, x, n, out, ldo, R, T, first); break;
    Q8_CASE(1, 1) Q8_CASE(1, 2) Q8_CASE(1, 3) Q8_CASE(1, 4) Q8_CASE(2, 1) Q8_CASE(2, 2) Q8_CASE(2, 3) Q8_CASE(2, 4)
    Q8_CASE(3, 1) Q8_CASE(3, 2) Q8_CASE(3, 3) Q8_CASE(3, 4) Q8_CASE(4, 1) Q8_CASE(4, 2) Q8_CASE(4, 3) Q8_CASE(4, 4)
#undef Q8_CASE
    default: break;
    }
}

const struct kvb_dot_kernels kvb_dot_dotprod = {
    .name = "dotprod",
    .panel = panel_dotprod,
    .dot_q8 = {ARM_DOT_Q8(dotprod)},
    ARM_KQ_TILES(dotprod),
    .q8_tile = q8_tile_dotprod,
    .q8_tile_rows = Q8T,
    .q8_tile_rows_one = Q8T, /* decode: one load of the token's block for 4 rows, one ADDP tree for their sums */
    .q8_tile_tokens = Q8T,
    .q8_tile_prompts = true, /* ARM_INT8_PROMPTS, arm_kernels.h */
    .dot = {[GGML_TYPE_F32] = dot_f32_dotprod, [GGML_TYPE_F16] = dot_f16_dotprod, [GGML_TYPE_BF16] = dot_bf16_dotprod},
};

const struct kvb_dot_kernels kvb_dot_sve = {
    .name = "sve",
    .panel = panel_dotprod,
    .dot_q8 = {[GGML_TYPE_Q8_0] = kvb_dot_q8_0_q8_sve, [GGML_TYPE_Q4_0] = kvb_dot_q4_0_q8_sve, [GGML_TYPE_Q4_K] = dot_q4_K_q8_dotprod,
               [GGML_TYPE_Q6_K] = dot_q6_K_q8_dotprod, [GGML_TYPE_Q5_0] = dot_q5_0_q8_dotprod, [GGML_TYPE_Q4_1] = dot_q4_1_q8_dotprod,
               [GGML_TYPE_Q5_1] = dot_q5_1_q8_dotprod, [GGML_TYPE_IQ4_NL] = dot_iq4_nl_q8_dotprod, [GGML_TYPE_MXFP4] = dot_mxfp4_q8_dotprod,
               [GGML_TYPE_IQ4_XS] = dot_iq4_xs_q8_dotprod, [GGML_TYPE_Q5_K] = dot_q5_K_q8_dotprod},
    ARM_KQ_TILES(dotprod), /* the K-quant dots are dotprod's, so are their tiles */
    .q8_tile = q8_tile_dotprod, /* two tokens or more, and prompts (ARM_INT8_PROMPTS) */
    .q8_tile_rows = Q8T,
    .q8_tile_rows_one = 0, /* one token: kvb_dot_q8_0_q8_sve (SVE's SDOT over a whole block), the same bits */
    .q8_tile_tokens = Q8T,
    .q8_tile_prompts = true,
    .dot = {[GGML_TYPE_F32] = kvb_dot_f32_sve, [GGML_TYPE_F16] = kvb_dot_f16_sve, [GGML_TYPE_BF16] = kvb_dot_bf16_sve},
};

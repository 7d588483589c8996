/*
 * dot_dotprod.c — the dotprod family's weight kernels: dot_arm.h with SDOT
 * (ARMv8.2 dot product: four int8 products summed into each int32 lane),
 * and its K-quant tiles for batched decode (q4_K, q5_K, q6_K).
 * The sve family's table is here too: its float rows and Q8_0/Q4_0 int8
 * dots are dot_sve.c's, every other slot this family's (the sve family
 * needs dotprod, dispatch.c), the K-quant tiles included. No Q8_0 tile:
 * decode reads Q8_0 rows through the SVE dot (matmul.c takes q8_tile over
 * dot_q8 where a family has one).
 */
#include <string.h>

#define ARM_SDOT 1
#define ARM_FAM(name) name##_dotprod
#include "dot_arm.h"

const struct kvb_dot_kernels kvb_dot_dotprod = {
    .name = "dotprod",
    .panel = panel_dotprod,
    .dot_q8 = {ARM_DOT_Q8(dotprod)},
    ARM_KQ_TILES(dotprod),
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
    .dot = {[GGML_TYPE_F32] = kvb_dot_f32_sve, [GGML_TYPE_F16] = kvb_dot_f16_sve, [GGML_TYPE_BF16] = kvb_dot_bf16_sve},
};

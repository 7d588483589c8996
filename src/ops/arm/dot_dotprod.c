/*
 * dot_dotprod.c — the dotprod family's weight kernels: dot_arm.h with SDOT
 * (ARMv8.2 dot product: four int8 products summed into each int32 lane),
 * and its K-quant tiles for batched decode (q4_K, q5_K, q6_K).
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

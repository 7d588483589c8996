/*
 * dot_dotprod.c — the dotprod family's weight kernels: dot_arm.h with SDOT
 * (ARMv8.2 dot product: four int8 products summed into each int32 lane).
 */
#include <string.h>

#define ARM_SDOT 1
#define ARM_FAM(name) name##_dotprod
#include "dot_arm.h"

const struct kvb_dot_kernels kvb_dot_dotprod = {
    .name = "dotprod",
    .panel = panel_dotprod,
    .dot_q8 = {[GGML_TYPE_Q8_0] = dot_q8_0_q8_dotprod, [GGML_TYPE_Q4_0] = dot_q4_0_q8_dotprod, [GGML_TYPE_Q4_K] = dot_q4_K_q8_dotprod,
               [GGML_TYPE_Q6_K] = dot_q6_K_q8_dotprod, ARM_REF_DOT_Q8},
    .dot = {[GGML_TYPE_F32] = dot_f32_dotprod, [GGML_TYPE_F16] = dot_f16_dotprod, [GGML_TYPE_BF16] = dot_bf16_dotprod},
};

/*
 * dot_neon.c — the neon family's weight kernels: dot_arm.h with products
 * by SMULL/SADALP (ARMv8.0 AdvSIMD, on every AArch64 CPU).
 */
#include <string.h>

#define ARM_SDOT 0
#define ARM_FAM(name) name##_neon
#include "dot_arm.h"

const struct kvb_dot_kernels kvb_dot_neon = {
    .name = "neon",
    .panel = panel_neon,
    .dot_q8 = {[GGML_TYPE_Q8_0] = dot_q8_0_q8_neon, [GGML_TYPE_Q4_0] = dot_q4_0_q8_neon, [GGML_TYPE_Q4_K] = dot_q4_K_q8_neon,
               [GGML_TYPE_Q6_K] = dot_q6_K_q8_neon, ARM_REF_DOT_Q8},
    .dot = {[GGML_TYPE_F32] = dot_f32_neon, [GGML_TYPE_F16] = dot_f16_neon, [GGML_TYPE_BF16] = dot_bf16_neon},
};

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
    .dot_q8 = {ARM_DOT_Q8(neon)},
    .dot = {[GGML_TYPE_F32] = dot_f32_neon, [GGML_TYPE_F16] = dot_f16_neon, [GGML_TYPE_BF16] = dot_bf16_neon},
};

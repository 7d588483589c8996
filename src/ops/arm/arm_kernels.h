/*
 * arm_kernels.h — the ARM (AArch64) families' tables and the pieces one
 * file defines and another's table uses. Plain C declarations: any file
 * may include it; only the dispatch table (dispatch.c) decides which run.
 *
 * Families, each needing the one before it (dispatch.c reads the features
 * with getauxval): neon (AdvSIMD, every AArch64 CPU), dotprod (and SDOT,
 * HWCAP_ASIMDDP), i8mm (and SMMLA, HWCAP2_I8MM). Their attention
 * primitives are one NEON body (attn_neon.c) but for the dotprod, i8mm
 * and sve families' integer scores (attn_dotprod.c, SDOT); their weight
 * kernels one body (dot_arm.h) built three times with the family's
 * instructions.
 *
 * sve (dot_sve.c, attn_sve.c): SVE with vectors wider than 128 bits, and
 * dotprod (i8mm not needed); its own kernels are the decode hot paths
 * (f32/f16/bf16 rows, the Q8_0 and Q4_0 int8 dots, f32/f16 attention
 * scores and accumulation), every other slot the dotprod family's (its
 * tables: dot_dotprod.c, attn_neon.c). Only built on AArch64.
 */
#ifndef KVB_ARM_KERNELS_H
#define KVB_ARM_KERNELS_H

#include "../matmul.h"

/* attn_neon.c: the attention primitives, one table per family (the same
 * kernels; the name is the family's, as bench JSON reports it). */
extern const struct kvb_kernels kvb_kernels_neon, kvb_kernels_dotprod, kvb_kernels_i8mm, kvb_kernels_sve;
/* attn_dotprod.c: scores_i8 by SDOT (the dotprod, i8mm and sve tables'). */
void kvb_scores_i8_sdot(const struct kvb_kv_view *v, const struct kvb_q8_rows *q, int32_t n_rows, int32_t j0, int32_t nt, float *s);
/* dot_neon.c, dot_dotprod.c (and the sve family's table), dot_i8mm.c */
extern const struct kvb_dot_kernels kvb_dot_neon, kvb_dot_dotprod, kvb_dot_i8mm, kvb_dot_sve;

/* The sve family's own kernels (SVE instructions: reached only through its
 * tables, on a CPU that has SVE). dot_sve.c: */
float kvb_dot_q8_0_q8_sve(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q4_0_q8_sve(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_f32_sve(const void *row, const float *x, int64_t n);
float kvb_dot_f16_sve(const void *row, const float *x, int64_t n);
float kvb_dot_bf16_sve(const void *row, const float *x, int64_t n);
/* attn_sve.c: ops.h's scores and accum */
struct kvb_kv_view;
void kvb_scores_sve(const struct kvb_kv_view *v, const float *q, int32_t n_rows, int32_t j0, int32_t nt, float *s);
void kvb_accum_sve(const struct kvb_kv_view *v, const float *e, int32_t n_rows, int32_t j0, int32_t nt, float *acc);

/* Every family's int8 dots (dot_arm.h, suffixed with its name): every
 * quantized weight type kvbound loads. */
#define ARM_DOT_Q8(fam)                                                                                                          \
    [GGML_TYPE_Q8_0] = dot_q8_0_q8_##fam, [GGML_TYPE_Q4_0] = dot_q4_0_q8_##fam, [GGML_TYPE_Q4_K] = dot_q4_K_q8_##fam,        \
    [GGML_TYPE_Q6_K] = dot_q6_K_q8_##fam, [GGML_TYPE_Q5_0] = dot_q5_0_q8_##fam, [GGML_TYPE_Q4_1] = dot_q4_1_q8_##fam,        \
    [GGML_TYPE_Q5_1] = dot_q5_1_q8_##fam, [GGML_TYPE_IQ4_NL] = dot_iq4_nl_q8_##fam, [GGML_TYPE_MXFP4] = dot_mxfp4_q8_##fam, \
    [GGML_TYPE_IQ4_XS] = dot_iq4_xs_q8_##fam, [GGML_TYPE_Q5_K] = dot_q5_K_q8_##fam

/* The SDOT families' K-quant tiles (dot_arm.h) and their shape; K-quant
 * prompts go through them too (kq_tile_prompts; ARM_INT8_PROMPTS). */
#define ARM_KQ_TILES(fam)                                                                                                             \
    .kq_tile = {[GGML_TYPE_Q4_K] = kq_tile_q4_K_##fam, [GGML_TYPE_Q5_K] = kq_tile_q5_K_##fam, [GGML_TYPE_Q6_K] = kq_tile_q6_K_##fam}, \
    .kq_tile_rows = ARM_KQ_ROWS, .kq_tile_tokens = ARM_KQ_TOKENS, .kq_tile_prompts = true

/* ARM_INT8_PROMPTS: why prompts take the int8 tiles where a family has
 * them (K-quants and Q8_0 on dotprod, sve and i8mm), though no ARM
 * machine has timed it. The f32 panels expand every weight of a call to
 * floats (for TinyLlama a fixed ~300 ms on x86, whatever the piece), so a
 * stall-free step's few prompt rows cost a chunk's worth; the tiles cost
 * their rows. On AVX2 the K-quant tiles read a 256-token chunk as fast as
 * the panels and 4 rows 5.7x faster (docs/BENCHMARKS.md, "AVX2's K-quant
 * prompts"), with maddubs carrying 2x an FMA's products; SDOT carries 4x an
 * FMLA's, SMMLA 8x. Each row keeps one path whatever the piece, so a batch
 * still has the lone context's bits, and every pair has dot_q8's. */

#endif

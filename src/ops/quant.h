/*
 * quant.h — ggml weight formats: block layouts, reference (scalar)
 * dequantizers and quantizers. Layouts (bytes per block of elements):
 *
 *   Q8_0  32 el, 34 B: f16 d; int8 q[32];                x = d * q
 *   Q4_0  32 el, 18 B: f16 d; u8 qs[16] (el i: low nibble of qs[i] for
 *                      i < 16, high nibble of qs[i-16]);  x = d * (q - 8)
 *   Q4_1  32 el, 20 B: f16 d, m; u8 qs[16] nibbles as Q4_0's;  x = d * q + m
 *   Q5_1  32 el, 24 B: f16 d, m; u8 qh[4], u8 qs[16] as Q5_0's; x = d * q + m
 *   Q5_0  32 el, 22 B: f16 d; u8 qh[4] (bit i, little-endian: the fifth bit
 *                      of el i); u8 qs[16] nibbles as Q4_0's;  x = d * (q - 16)
 *   Q4_K 256 el, 144 B: f16 d, dmin; u8 scales[12] (8 x 6-bit scale and
 *                      min); u8 qs[128]. Per 64 elements, 32 bytes of qs:
 *                      low nibbles are sub-block 2k, high nibbles 2k+1;
 *                      x = d * sc_j * q - dmin * m_j
 *   Q5_K 256 el, 176 B: f16 d, dmin; u8 scales[12] as Q4_K's; u8 qh[32]
 *                      (el l of sub-block j: bit j of qh[l]); u8 qs[128]
 *                      nibbles as Q4_K's; x = d * sc_j * (q + 16 h) - dmin * m_j
 *   IQ4_NL 32 el, 18 B: f16 d; u8 qs[16] nibbles as Q4_0's; x = d * kv[q]
 *                      (kv: kvb_kvalues_iq4nl, 16 values -127..113)
 *   IQ4_XS 256 el, 136 B: f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128];
 *                      per 32 (ib): 6-bit ls from nibble ib of scales_l and
 *                      bits 2ib.. of scales_h, 16 bytes of nibbles as IQ4_NL's;
 *                      x = d * (ls - 32) * kv[q]
 *   MXFP4 32 el, 17 B: u8 e (E8M0); u8 qs[16] nibbles as Q4_0's;
 *                      x = 2^(e-128) * kv[q] (kv: kvb_kvalues_mxfp4, the E2M1
 *                      values doubled, -12..12; e < 2 gives the subnormal 2^(e-128))
 *   Q6_K 256 el, 210 B: u8 ql[128] (low 4 bits), u8 qh[64] (high 2 bits),
 *                      int8 scales[16] (one per 16 el), f16 d;
 *                      x = d * scale * (q - 32)
 *   BF16  1 el, 2 B:   the upper half of an f32
 * The quantizers are simple and exact to their formats (round to nearest,
 * scales from the block's range); they serve mkmodel and tests, not quality.
 */
#ifndef KVB_QUANT_H
#define KVB_QUANT_H

#include "../core/core.h"

#define QK8_0 32
#define QK4_0 32
#define QK5_0 32
#define QK4_1 32
#define QK5_1 32
#define QK_K 256
#define QK4_NL 32
#define QK_MXFP4 32

struct block_q8_0 { uint16_t d; int8_t qs[QK8_0]; };
struct block_q4_0 { uint16_t d; uint8_t qs[QK4_0 / 2]; };
struct block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
struct block_q4_1 { uint16_t d, m; uint8_t qs[QK4_1 / 2]; };
struct block_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct block_q4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; };
struct block_q5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct block_iq4_nl { uint16_t d; uint8_t qs[QK4_NL / 2]; };
struct block_iq4_xs { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
struct block_mxfp4 { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; };
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };

_Static_assert(sizeof(struct block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(struct block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(struct block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(struct block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(struct block_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(struct block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(struct block_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(struct block_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(struct block_iq4_nl) == 18, "iq4_nl block");
_Static_assert(sizeof(struct block_iq4_xs) == 136, "iq4_xs block");
_Static_assert(sizeof(struct block_mxfp4) == 17, "mxfp4 block");

/* The 16 values of IQ4_NL / IQ4_XS and of MXFP4 codes (quant_ref.c). */
extern const int8_t kvb_kvalues_iq4nl[16], kvb_kvalues_mxfp4[16];

/* 2^(e - 128): half the E8M0 scale e (MXFP4 codes are doubled E2M1 values). */
static inline float kvb_e8m0_half(uint8_t e) {
    const uint32_t u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The 6-bit scale (0..63; the factor is ls - 32) of sub-block ib of an IQ4_XS block. */
static inline int kvb_iq4xs_ls(const struct block_iq4_xs *b, int ib) {
    return ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b->scales_h >> (2 * ib)) & 3) << 4);
}

static inline float kvb_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t kvb_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* quiet nan */
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);           /* round to nearest even */
}

/* Code j (0..31) of a block of 32 five-bit codes (Q5_0, Q5_1): 0..31. */
static inline int kvb_q5_code(const uint8_t *qh4, const uint8_t *qs, int j) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    const int nib = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
    return nib | (int)(((qh >> j) & 1u) << 4);
}
/* Code j of a Q5_0 block (the value is d * (code - 16)). */
static inline int kvb_q5_0_code(const struct block_q5_0 *b, int j) { return kvb_q5_code(b->qh, b->qs, j); }
/* Code j (0..15) of a block of 32 nibbles (Q4_0, Q4_1, IQ4_NL, MXFP4). */
static inline int kvb_nib_code(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }

/* 6-bit scale and min j of a Q4_K block */
static inline void kvb_q4k_scale_min(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Code e (0..255) of a Q5_K block, 0..31, and its sub-block e / 32. */
static inline int kvb_q5k_code(const struct block_q5_K *b, int e) {
    const int j = e / 32, l = e % 32;
    const uint8_t byte = b->qs[(j / 2) * 32 + l];
    return (j % 2 ? byte >> 4 : byte & 0xF) | (((b->qh[l] >> j) & 1) << 4);
}

/* y[0..n) = dequantized row; n must be a multiple of the block size. */
void kvb_dequantize_row(uint32_t type, const void *row, float *y, int64_t n);
/* row = quantized x[0..n). Returns false for unsupported types. */
bool kvb_quantize_row(uint32_t type, const float *x, void *row, int64_t n);

#endif

/*
 * attn_width.h — the KV row conversions AVX2 and AVX-512 had as copies of
 * each other at 8 and 16 lanes: f32 to f16 and back, and q8_0 rows to f32
 * (d * q per block of 32, the scalar dequantizer's product: f16 scale to
 * f32, int8 to f32, one multiply). Written once over simd_width.h's names;
 * attn_avx2.c includes it with KVB_W 8 (to_f16_avx2, from_f16_avx2,
 * from_q8_0_avx2), attn_avx512.c with KVB_W 16 (the _avx512 ones). Tails
 * (n not a multiple of the width) are scalar, as they were in both.
 */
#ifndef KVB_X86_ATTN_WIDTH_H
#define KVB_X86_ATTN_WIDTH_H

#include "../ops.h"
#include "simd_width.h"

static void KVB_WFN(to_f16)(const float *src, uint16_t *dst, int32_t n) {
    int32_t i = 0;
    for (; i + KVB_W <= n; i += KVB_W) V_STORE_PH(dst + i, V_LOADU(src + i));
    for (; i < n; i++) dst[i] = kvb_f32_to_f16(src[i]);
}

static void KVB_WFN(from_f16)(const uint16_t *src, float *dst, int32_t n) {
    int32_t i = 0;
    for (; i + KVB_W <= n; i += KVB_W) V_STOREU(dst + i, V_LOAD_PH(src + i));
    for (; i < n; i++) dst[i] = kvb_f16_to_f32(src[i]);
}

static void KVB_WFN(from_q8_0)(const void *src, float *dst, int32_t n) {
    const uint8_t *b = src;
    for (int32_t i = 0; i < n; i += 32, b += 34, dst += 32) {
        uint16_t h;
        memcpy(&h, b, 2);
        const VF d = V_SET1(_cvtsh_ss(h));
        for (int k = 0; k < 32 / KVB_W; k++) V_STOREU(dst + KVB_W * k, V_MUL(d, V_LOAD_I8(b + 2 + KVB_W * k)));
    }
}

#endif

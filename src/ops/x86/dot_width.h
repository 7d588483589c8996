/*
 * dot_width.h — the dot kernels (weight row x f32 activations) AVX2 and
 * AVX-512 had as copies of each other at 8 and 16 lanes, written once over
 * simd_width.h's names; dot_avx2.c includes it with KVB_W 8
 * (dot_q8_0_avx2, dot_q6_K_avx2), dot_avx512.c with KVB_W 16 (the _avx512
 * ones). The lanes' sums and the final reduction (V_HSUM) are each
 * family's own, so each keeps its bits.
 *
 * q8_0: per block of 32, the codes times x in one product chain over the
 * block's W-lane steps, scaled by d in one FMA into the accumulator.
 * q6_K: per half of 128 elements, W of each of its four groups of 32 at a
 * time, each weight d * scale * (q - 32) multiplied into one accumulator.
 */
#ifndef KVB_X86_DOT_WIDTH_H
#define KVB_X86_DOT_WIDTH_H

#include "../matmul.h"
#include "../quant.h"
#include "simd_width.h"

static float KVB_WFN(dot_q8_0)(const void *row, const float *x, int64_t n) {
    const struct block_q8_0 *b = row;
    VF acc = V_ZERO();
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        VF p = V_MUL(V_LOAD_I8(b[i].qs), V_LOADU(x));
        for (int k = KVB_W; k < QK8_0; k += KVB_W) p = V_FMADD(V_LOAD_I8(b[i].qs + k), V_LOADU(x + k), p);
        acc = V_FMADD(p, V_SET1(kvb_f16_to_f32(b[i].d)), acc);
    }
    return V_HSUM(acc);
}

static float KVB_WFN(dot_q6_K)(const void *row, const float *x, int64_t n) {
    const struct block_q6_K *b = row;
    const VI m4 = VI_SET1_32(0xF), m2 = VI_SET1_32(3), k32 = VI_SET1_32(32);
    float total = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = kvb_f16_to_f32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        VF acc = V_ZERO();
        for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, x += 128) {
            for (int l = 0; l < 32; l += KVB_W) {
                const int is = l / 16;
                VI a = VI_LOAD_U8(ql + l);
                VI c = VI_LOAD_U8(ql + l + 32);
                VI h = VI_LOAD_U8(qh + l);
                VI q1 = VI_SUB32(VI_OR(VI_AND(a, m4), VI_SLL32(VI_AND(h, m2), 4)), k32);
                VI q2 = VI_SUB32(VI_OR(VI_AND(c, m4), VI_SLL32(VI_AND(VI_SRL32(h, 2), m2), 4)), k32);
                VI q3 = VI_SUB32(VI_OR(VI_SRL32(a, 4), VI_SLL32(VI_AND(VI_SRL32(h, 4), m2), 4)), k32);
                VI q4 = VI_SUB32(VI_OR(VI_SRL32(c, 4), VI_SLL32(VI_AND(VI_SRL32(h, 6), m2), 4)), k32);
                acc = V_FMADD(V_MUL(V_CVT_I32(q1), V_SET1(d * sc[is])), V_LOADU(x + l), acc);
                acc = V_FMADD(V_MUL(V_CVT_I32(q2), V_SET1(d * sc[is + 2])), V_LOADU(x + l + 32), acc);
                acc = V_FMADD(V_MUL(V_CVT_I32(q3), V_SET1(d * sc[is + 4])), V_LOADU(x + l + 64), acc);
                acc = V_FMADD(V_MUL(V_CVT_I32(q4), V_SET1(d * sc[is + 6])), V_LOADU(x + l + 96), acc);
            }
        }
        total += V_HSUM(acc);
    }
    return total;
}

#endif

/* quant_ref.c — reference dequantizers and quantizers (see quant.h). */
#include "../quant.h"
#include "../../core/ggml_types.h"

#include <math.h>

static void deq_q8_0(const struct block_q8_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = kvb_f16_to_f32(b[i].d);
        for (int k = 0; k < QK8_0; k++) y[i * QK8_0 + k] = d * b[i].qs[k];
    }
}

static void deq_q4_0(const struct block_q4_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = kvb_f16_to_f32(b[i].d);
        for (int k = 0; k < 16; k++) {
            y[i * 32 + k] = d * ((b[i].qs[k] & 0xF) - 8);
            y[i * 32 + 16 + k] = d * ((b[i].qs[k] >> 4) - 8);
        }
    }
}

static void deq_q5_0(const struct block_q5_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = kvb_f16_to_f32(b[i].d);
        for (int k = 0; k < QK5_0; k++) y[i * QK5_0 + k] = d * (float)(kvb_q5_0_code(&b[i], k) - 16);
    }
}

/* As ggml: code * d + m. */
static void deq_q4_1(const struct block_q4_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = kvb_f16_to_f32(b[i].d), m = kvb_f16_to_f32(b[i].m);
        for (int k = 0; k < QK4_1; k++) y[i * QK4_1 + k] = (float)kvb_nib_code(b[i].qs, k) * d + m;
    }
}

static void deq_q5_1(const struct block_q5_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = kvb_f16_to_f32(b[i].d), m = kvb_f16_to_f32(b[i].m);
        for (int k = 0; k < QK5_1; k++) y[i * QK5_1 + k] = (float)kvb_q5_code(b[i].qh, b[i].qs, k) * d + m;
    }
}

const int8_t kvb_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t kvb_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static void deq_iq4_nl(const struct block_iq4_nl *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = kvb_f16_to_f32(b[i].d);
        for (int k = 0; k < QK4_NL; k++) y[i * QK4_NL + k] = d * (float)kvb_kvalues_iq4nl[kvb_nib_code(b[i].qs, k)];
    }
}

static void deq_iq4_xs(const struct block_iq4_xs *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = kvb_f16_to_f32(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float dl = d * (float)(kvb_iq4xs_ls(&b[i], ib) - 32);
            for (int k = 0; k < 32; k++) y[i * QK_K + ib * 32 + k] = dl * (float)kvb_kvalues_iq4nl[kvb_nib_code(b[i].qs + 16 * ib, k)];
        }
    }
}

static void deq_mxfp4(const struct block_mxfp4 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = kvb_e8m0_half(b[i].e);
        for (int k = 0; k < QK_MXFP4; k++) y[i * QK_MXFP4 + k] = (float)kvb_kvalues_mxfp4[kvb_nib_code(b[i].qs, k)] * d;
    }
}

static void deq_q4_K(const struct block_q4_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = kvb_f16_to_f32(b[i].d), dmin = kvb_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int j = 0; j < 4; j++) { /* 4 x 64 elements */
            uint8_t s1, m1, s2, m2;
            kvb_q4k_scale_min(2 * j, b[i].scales, &s1, &m1);
            kvb_q4k_scale_min(2 * j + 1, b[i].scales, &s2, &m2);
            for (int l = 0; l < 32; l++) {
                y[l] = d * s1 * (q[l] & 0xF) - dmin * m1;
                y[32 + l] = d * s2 * (q[l] >> 4) - dmin * m2;
            }
            q += 32;
            y += 64;
        }
    }
}

/* As ggml: (d * sc) * q - dmin * m, q the nibble plus 16 times its qh bit. */
static void deq_q5_K(const struct block_q5_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK_K) {
        const float d = kvb_f16_to_f32(b[i].d), dmin = kvb_f16_to_f32(b[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kvb_q4k_scale_min(j, b[i].scales, &sc, &m);
            const float dj = d * sc, mj = dmin * m;
            for (int l = 0; l < 32; l++) y[j * 32 + l] = dj * (float)kvb_q5k_code(&b[i], j * 32 + l) - mj;
        }
    }
}

static void deq_q6_K(const struct block_q6_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = kvb_f16_to_f32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int half = 0; half < 2; half++) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void kvb_dequantize_row(uint32_t type, const void *row, float *y, int64_t n) {
    switch (type) {
    case GGML_TYPE_F32: memcpy(y, row, sizeof(float) * (size_t)n); break;
    case GGML_TYPE_F16: for (int64_t i = 0; i < n; i++) y[i] = kvb_f16_to_f32(((const uint16_t *)row)[i]); break;
    case GGML_TYPE_BF16: for (int64_t i = 0; i < n; i++) y[i] = kvb_bf16_to_f32(((const uint16_t *)row)[i]); break;
    case GGML_TYPE_Q8_0: deq_q8_0(row, y, n / QK8_0); break;
    case GGML_TYPE_Q4_0: deq_q4_0(row, y, n / QK4_0); break;
    case GGML_TYPE_Q5_0: deq_q5_0(row, y, n / QK5_0); break;
    case GGML_TYPE_Q4_1: deq_q4_1(row, y, n / QK4_1); break;
    case GGML_TYPE_Q5_1: deq_q5_1(row, y, n / QK5_1); break;
    case GGML_TYPE_IQ4_NL: deq_iq4_nl(row, y, n / QK4_NL); break;
    case GGML_TYPE_IQ4_XS: deq_iq4_xs(row, y, n / QK_K); break;
    case GGML_TYPE_MXFP4: deq_mxfp4(row, y, n / QK_MXFP4); break;
    case GGML_TYPE_Q4_K: deq_q4_K(row, y, n / QK_K); break;
    case GGML_TYPE_Q5_K: deq_q5_K(row, y, n / QK_K); break;
    case GGML_TYPE_Q6_K: deq_q6_K(row, y, n / QK_K); break;
    default: memset(y, 0, sizeof(float) * (size_t)n); break;
    }
}

static int nearest(float x) { return (int)lrintf(x); }

static void q_q8_0(const float *x, struct block_q8_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float amax = 0;
        for (int k = 0; k < 32; k++) { /* fmaxf's result (a NaN is skipped) without its libm call */
            const float a = fabsf(x[i * 32 + k]);
            amax = a > amax ? a : amax;
        }
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        b[i].d = kvb_f32_to_f16(d);
        for (int k = 0; k < 32; k++) b[i].qs[k] = (int8_t)nearest(x[i * 32 + k] * id);
    }
}

/* The value of largest magnitude among x[0..32), with its sign (the first
 * such): Q4_0 and Q5_0 map it to their lowest code. */
static float signed_absmax32(const float *x) {
    float mx = 0, amax = 0;
    for (int k = 0; k < 32; k++)
        if (fabsf(x[k]) > amax) { amax = fabsf(x[k]); mx = x[k]; }
    return mx;
}

static void q_q4_0(const float *x, struct block_q4_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = signed_absmax32(x + i * 32) / -8.0f, id = d ? 1.0f / d : 0.0f;
        b[i].d = kvb_f32_to_f16(d);
        for (int k = 0; k < 16; k++) {
            int lo = KVB_MIN(15, KVB_MAX(0, nearest(x[i * 32 + k] * id) + 8));
            int hi = KVB_MIN(15, KVB_MAX(0, nearest(x[i * 32 + 16 + k] * id) + 8));
            b[i].qs[k] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* As Q4_0's rule: the value of largest magnitude maps to code 0 (-16 d). */
static void q_q5_0(const float *x, struct block_q5_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = signed_absmax32(x + i * 32) / -16.0f, id = d ? 1.0f / d : 0.0f;
        b[i].d = kvb_f32_to_f16(d);
        uint32_t qh = 0;
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int k = 0; k < 32; k++) {
            const int q = KVB_MIN(31, KVB_MAX(0, nearest(x[i * 32 + k] * id) + 16));
            b[i].qs[k & 15] |= (uint8_t)((q & 0xF) << (k < 16 ? 0 : 4));
            qh |= (uint32_t)(q >> 4) << k;
        }
        memcpy(b[i].qh, &qh, 4);
    }
}

/* Q4_1 (nmax 15) and Q5_1 (31) as ggml's reference: m = the block's min,
 * d = range / nmax, codes (x - m) / d rounded to nearest. */
static void q_min_range(const float *x, int nmax, uint16_t *dh, uint16_t *mh, int q[32]) {
    float lo = x[0], hi = x[0];
    for (int k = 1; k < 32; k++) { lo = fminf(lo, x[k]); hi = fmaxf(hi, x[k]); }
    const float d = (hi - lo) / (float)nmax, id = d ? 1.0f / d : 0.0f;
    *dh = kvb_f32_to_f16(d);
    *mh = kvb_f32_to_f16(lo);
    for (int k = 0; k < 32; k++) q[k] = KVB_MIN(nmax, KVB_MAX(0, nearest((x[k] - lo) * id)));
}

static void q_q4_1(const float *x, struct block_q4_1 *b, int64_t nb) {
    int q[32];
    for (int64_t i = 0; i < nb; i++) {
        q_min_range(x + i * 32, 15, &b[i].d, &b[i].m, q);
        for (int k = 0; k < 16; k++) b[i].qs[k] = (uint8_t)(q[k] | (q[k + 16] << 4));
    }
}

static void q_q5_1(const float *x, struct block_q5_1 *b, int64_t nb) {
    int q[32];
    for (int64_t i = 0; i < nb; i++) {
        q_min_range(x + i * 32, 31, &b[i].d, &b[i].m, q);
        uint32_t qh = 0;
        for (int k = 0; k < 16; k++) b[i].qs[k] = (uint8_t)((q[k] & 0xF) | ((q[k + 16] & 0xF) << 4));
        for (int k = 0; k < 32; k++) qh |= (uint32_t)(q[k] >> 4) << k;
        memcpy(b[i].qh, &qh, 4);
    }
}

/* The index of the value of kv[16] nearest v (the first of equals). */
static int nearest_kv(const int8_t *kv, float v) {
    int best = 0;
    for (int k = 1; k < 16; k++)
        if (fabsf(v - (float)kv[k]) < fabsf(v - (float)kv[best])) best = k;
    return best;
}

/* IQ4_NL: the value of largest magnitude maps to kv[0] = -127 (ggml's first
 * guess, without its search for a better scale); codes the nearest values. */
static void q_iq4_nl(const float *x, struct block_iq4_nl *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        b[i].d = kvb_f32_to_f16(signed_absmax32(x + i * 32) / -127.0f);
        const float d = kvb_f16_to_f32(b[i].d), id = d ? 1.0f / d : 0.0f;
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int k = 0; k < 32; k++) b[i].qs[k & 15] |= (uint8_t)(nearest_kv(kvb_kvalues_iq4nl, x[i * 32 + k] * id) << (k < 16 ? 0 : 4));
    }
}

/* IQ4_XS: per 32, the scale IQ4_NL's rule gives; d = the largest of them in
 * magnitude / -32 (that sub-block gets ls - 32 = -32), the others rounded. */
static void q_iq4_xs(const float *x, struct block_iq4_xs *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float sc[8], smax = 0;
        for (int ib = 0; ib < 8; ib++) {
            sc[ib] = signed_absmax32(x + ib * 32) / -127.0f;
            if (fabsf(sc[ib]) > fabsf(smax)) smax = sc[ib];
        }
        b[i].d = kvb_f32_to_f16(smax / -32.0f);
        const float d = kvb_f16_to_f32(b[i].d);
        b[i].scales_h = 0;
        memset(b[i].scales_l, 0, sizeof b[i].scales_l);
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int ib = 0; ib < 8; ib++) {
            const int l = KVB_MIN(31, KVB_MAX(-32, d ? nearest(sc[ib] / d) : 0));
            const int ls = l + 32;
            b[i].scales_l[ib / 2] |= (uint8_t)((ls & 0xF) << (4 * (ib % 2)));
            b[i].scales_h |= (uint16_t)((ls >> 4) << (2 * ib));
            const float dl = d * (float)l, idl = dl ? 1.0f / dl : 0.0f;
            for (int k = 0; k < 32; k++)
                b[i].qs[16 * ib + (k & 15)] |= (uint8_t)(nearest_kv(kvb_kvalues_iq4nl, x[ib * 32 + k] * idl) << (k < 16 ? 0 : 4));
        }
    }
}

/* MXFP4 as ggml's reference: e = floor(log2(amax)) - 2 + 127 (the largest
 * E2M1 value, 6, is 2^2 * 1.5), codes the nearest doubled values. */
static void q_mxfp4(const float *x, struct block_mxfp4 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float amax = 0;
        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(x[i * 32 + k]));
        const int e = amax > 0 ? KVB_MIN(254, KVB_MAX(1, (int)floorf(log2f(amax)) - 2 + 127)) : 0;
        b[i].e = (uint8_t)e;
        const float d = kvb_e8m0_half((uint8_t)e), id = 1.0f / d;
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int k = 0; k < 32; k++) b[i].qs[k & 15] |= (uint8_t)(nearest_kv(kvb_kvalues_mxfp4, x[i * 32 + k] * id) << (k < 16 ? 0 : 4));
    }
}

/* One K-quant super-block of 256 (Q4_K: nmax 15, Q5_K: 31): per sub-block of
 * 32, a scale (range / nmax) and a min (clamped at 0: x = s*q - m with
 * m >= 0), both as 6-bit multiples of the f16 d and dmin; codes q[256] in
 * 0..nmax rounded to nearest. */
static void kquant_block(const float *x, int nmax, uint16_t *dh, uint16_t *dminh, uint8_t scales[12], int q[QK_K]) {
    float scale[8], mins[8], max_s = 0, max_m = 0;
    for (int j = 0; j < 8; j++) {
        float lo = 0, hi = 0;
        for (int l = 0; l < 32; l++) { lo = fminf(lo, x[j * 32 + l]); hi = fmaxf(hi, x[j * 32 + l]); }
        scale[j] = (hi - lo) / (float)nmax;
        mins[j] = -lo;
        max_s = fmaxf(max_s, scale[j]);
        max_m = fmaxf(max_m, mins[j]);
    }
    *dh = kvb_f32_to_f16(max_s / 63.0f);
    *dminh = kvb_f32_to_f16(max_m / 63.0f);
    const float d = kvb_f16_to_f32(*dh), dmin = kvb_f16_to_f32(*dminh);
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)KVB_MIN(63, KVB_MAX(0, d ? nearest(scale[j] / d) : 0));
        lm[j] = (uint8_t)KVB_MIN(63, KVB_MAX(0, dmin ? nearest(mins[j] / dmin) : 0));
    }
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) { /* inverse of kvb_q4k_scale_min */
        if (j < 4) {
            scales[j] |= ls[j] & 63;
            scales[j + 4] |= lm[j] & 63;
        } else {
            scales[j + 4] |= (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            scales[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            scales[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
    for (int j = 0; j < 8; j++) {
        const float sd = d * ls[j], sm = dmin * lm[j];
        for (int l = 0; l < 32; l++) q[j * 32 + l] = KVB_MIN(nmax, KVB_MAX(0, sd ? nearest((x[j * 32 + l] + sm) / sd) : 0));
    }
}

static void q_q4_K(const float *x, struct block_q4_K *b, int64_t nb) {
    int q[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        kquant_block(x, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
        for (int k = 0; k < 128; k++) /* byte (j / 2) * 32 + l: sub-block j even low nibble, odd high */
            b[i].qs[k] = (uint8_t)(q[(k / 32) * 64 + k % 32] | (q[(k / 32) * 64 + 32 + k % 32] << 4));
    }
}

static void q_q5_K(const float *x, struct block_q5_K *b, int64_t nb) {
    int q[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        kquant_block(x, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int k = 0; k < 128; k++) {
            const int lo = q[(k / 32) * 64 + k % 32], hi = q[(k / 32) * 64 + 32 + k % 32];
            b[i].qs[k] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
        }
        for (int e = 0; e < QK_K; e++) b[i].qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
    }
}

static void q_q6_K(const float *x, struct block_q6_K *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float sc[16], max_sc = 0;
        for (int s = 0; s < 16; s++) {
            float amax = 0;
            for (int l = 0; l < 16; l++) amax = fmaxf(amax, fabsf(x[s * 16 + l]));
            sc[s] = amax / 31.0f;
            max_sc = fmaxf(max_sc, sc[s]);
        }
        float d = max_sc / 127.0f;
        b[i].d = kvb_f32_to_f16(d);
        d = kvb_f16_to_f32(b[i].d);
        int q[QK_K];
        for (int s = 0; s < 16; s++) {
            int is = KVB_MIN(127, KVB_MAX(-128, d ? nearest(sc[s] / d) : 0));
            b[i].scales[s] = (int8_t)is;
            float step = d * is;
            for (int l = 0; l < 16; l++) q[s * 16 + l] = KVB_MIN(31, KVB_MAX(-32, step ? nearest(x[s * 16 + l] / step) : 0)) + 32;
        }
        memset(b[i].ql, 0, sizeof b[i].ql);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int half = 0; half < 2; half++) { /* inverse of the Q6_K unpacking */
            uint8_t *ql = b[i].ql + 64 * half, *qh = b[i].qh + 32 * half;
            const int *qq = q + 128 * half;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((qq[l] & 0xF) | ((qq[l + 64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((qq[l + 32] & 0xF) | ((qq[l + 96] & 0xF) << 4));
                qh[l] = (uint8_t)((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
            }
        }
    }
}

bool kvb_quantize_row(uint32_t type, const float *x, void *row, int64_t n) {
    switch (type) {
    case GGML_TYPE_F32: memcpy(row, x, sizeof(float) * (size_t)n); return true;
    case GGML_TYPE_F16: for (int64_t i = 0; i < n; i++) ((uint16_t *)row)[i] = kvb_f32_to_f16(x[i]); return true;
    case GGML_TYPE_BF16: for (int64_t i = 0; i < n; i++) ((uint16_t *)row)[i] = kvb_f32_to_bf16(x[i]); return true;
    case GGML_TYPE_Q8_0: if (n % QK8_0) return false; q_q8_0(x, row, n / QK8_0); return true;
    case GGML_TYPE_Q4_0: if (n % QK4_0) return false; q_q4_0(x, row, n / QK4_0); return true;
    case GGML_TYPE_Q5_0: if (n % QK5_0) return false; q_q5_0(x, row, n / QK5_0); return true;
    case GGML_TYPE_Q4_1: if (n % QK4_1) return false; q_q4_1(x, row, n / QK4_1); return true;
    case GGML_TYPE_Q5_1: if (n % QK5_1) return false; q_q5_1(x, row, n / QK5_1); return true;
    case GGML_TYPE_IQ4_NL: if (n % QK4_NL) return false; q_iq4_nl(x, row, n / QK4_NL); return true;
    case GGML_TYPE_IQ4_XS: if (n % QK_K) return false; q_iq4_xs(x, row, n / QK_K); return true;
    case GGML_TYPE_MXFP4: if (n % QK_MXFP4) return false; q_mxfp4(x, row, n / QK_MXFP4); return true;
    case GGML_TYPE_Q4_K: if (n % QK_K) return false; q_q4_K(x, row, n / QK_K); return true;
    case GGML_TYPE_Q5_K: if (n % QK_K) return false; q_q5_K(x, row, n / QK_K); return true;
    case GGML_TYPE_Q6_K: if (n % QK_K) return false; q_q6_K(x, row, n / QK_K); return true;
    default: return false;
    }
}

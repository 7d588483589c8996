/*
 * dot_ref.c — scalar reference dot products of a weight row with f32 x:
 * dequantize one block at a time (kvb_dequantize_row), then a plain sum.
 */
#include "../matmul.h"
#include "../quant.h"

#include <math.h>

static float dot_f32_ref(const void *row, const float *x, int64_t n) {
    const float *w = row;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += w[i] * x[i];
    return s;
}

static float dot_blocks(uint32_t type, const void *row, const float *x, int64_t n) {
    const int64_t bs = kvb_ggml_blck_size(type);
    const size_t tb = kvb_ggml_type_size(type);
    float buf[QK_K], s = 0;
    for (int64_t b = 0; b < n / bs; b++) {
        kvb_dequantize_row(type, (const uint8_t *)row + (size_t)b * tb, buf, bs);
        for (int64_t i = 0; i < bs; i++) s += buf[i] * x[b * bs + i];
    }
    return s;
}

static float dot_f16_ref(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += kvb_f16_to_f32(w[i]) * x[i];
    return s;
}

static float dot_bf16_ref(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += kvb_bf16_to_f32(w[i]) * x[i];
    return s;
}

static float dot_q8_0_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_Q8_0, row, x, n); }
float kvb_dot_q8_0_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q8_0 *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int32_t s = 0;
        for (int j = 0; j < QK8_0; j++) s += (int32_t)b[i].qs[j] * (int32_t)x->q[i * QK8_0 + j];
        acc += (double)s * ((double)kvb_f16_to_f32(b[i].d) * (double)x->d[i]);
    }
    return (float)acc;
}

float kvb_dot_q4_0_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q4_0 *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++) {
            s += ((int32_t)(b[i].qs[j] & 0xF) - 8) * (int32_t)x->q[i * QK4_0 + j];
            s += ((int32_t)(b[i].qs[j] >> 4) - 8) * (int32_t)x->q[i * QK4_0 + 16 + j];
        }
        acc += (double)s * ((double)kvb_f16_to_f32(b[i].d) * (double)x->d[i]);
    }
    return (float)acc;
}

float kvb_dot_q5_0_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q5_0 *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        int32_t s = 0;
        for (int j = 0; j < QK5_0; j++) s += (int32_t)(kvb_q5_0_code(&b[i], j) - 16) * (int32_t)x->q[i * QK5_0 + j];
        acc += (double)s * ((double)kvb_f16_to_f32(b[i].d) * (double)x->d[i]);
    }
    return (float)acc;
}

/* Q4_1 and Q5_1 against Q8_0-form activations: per block,
 * d_x * (d * sum(q * qx) + m * sum(qx)), sum(qx) the activations' s. */
float kvb_dot_q4_1_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q4_1 *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        int32_t s = 0;
        for (int j = 0; j < QK4_1; j++) s += (int32_t)kvb_nib_code(b[i].qs, j) * (int32_t)x->q[i * QK4_1 + j];
        acc += (double)x->d[i] * ((double)kvb_f16_to_f32(b[i].d) * (double)s + (double)kvb_f16_to_f32(b[i].m) * (double)x->s[i]);
    }
    return (float)acc;
}

float kvb_dot_q5_1_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q5_1 *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        int32_t s = 0;
        for (int j = 0; j < QK5_1; j++) s += (int32_t)kvb_q5_code(b[i].qh, b[i].qs, j) * (int32_t)x->q[i * QK5_1 + j];
        acc += (double)x->d[i] * ((double)kvb_f16_to_f32(b[i].d) * (double)s + (double)kvb_f16_to_f32(b[i].m) * (double)x->s[i]);
    }
    return (float)acc;
}

/* IQ4_NL and MXFP4 against Q8_0-form activations: per block,
 * scale * d_x * sum(kv[q] * qx) (IQ4_NL: the f16 d; MXFP4: 2^(e-128)). */
float kvb_dot_iq4_nl_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_iq4_nl *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        int32_t s = 0;
        for (int j = 0; j < QK4_NL; j++) s += (int32_t)kvb_kvalues_iq4nl[kvb_nib_code(b[i].qs, j)] * (int32_t)x->q[i * QK4_NL + j];
        acc += (double)s * ((double)kvb_f16_to_f32(b[i].d) * (double)x->d[i]);
    }
    return (float)acc;
}

float kvb_dot_mxfp4_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_mxfp4 *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        int32_t s = 0;
        for (int j = 0; j < QK_MXFP4; j++) s += (int32_t)kvb_kvalues_mxfp4[kvb_nib_code(b[i].qs, j)] * (int32_t)x->q[i * QK_MXFP4 + j];
        acc += (double)s * ((double)kvb_e8m0_half(b[i].e) * (double)x->d[i]);
    }
    return (float)acc;
}

/* IQ4_XS against Q8_K-form activations: per super-block,
 * d * d_x * sum over sub-blocks of (ls - 32) * sum(kv[q] * qx). */
float kvb_dot_iq4_xs_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_iq4_xs *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *xq = x->q + i * QK_K;
        int64_t sumi = 0;
        for (int ib = 0; ib < 8; ib++) {
            int32_t s = 0;
            for (int j = 0; j < 32; j++) s += (int32_t)kvb_kvalues_iq4nl[kvb_nib_code(b[i].qs + 16 * ib, j)] * xq[ib * 32 + j];
            sumi += (int64_t)(kvb_iq4xs_ls(&b[i], ib) - 32) * s;
        }
        acc += (double)kvb_f16_to_f32(b[i].d) * (double)x->d[i] * (double)sumi;
    }
    return (float)acc;
}

/* Q4_K against Q8_K-form activations: per super-block,
 * d_x * (d * sum_j sc_j * sum(q * qx) - dmin * sum_j m_j * sum(qx)). */
float kvb_dot_q4_K_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q4_K *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *xq = x->q + i * QK_K;
        int64_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kvb_q4k_scale_min(j, b[i].scales, &sc, &m);
            int32_t s = 0;
            for (int l = 0; l < 32; l++) {
                const uint8_t byte = b[i].qs[(j / 2) * 32 + l];
                s += (int32_t)(j % 2 ? byte >> 4 : byte & 0xF) * xq[j * 32 + l];
            }
            sumi += (int64_t)sc * s;
            summ += (int64_t)m * (x->s[i * 16 + 2 * j] + x->s[i * 16 + 2 * j + 1]);
        }
        const double dx = x->d[i];
        acc += dx * ((double)kvb_f16_to_f32(b[i].d) * (double)sumi - (double)kvb_f16_to_f32(b[i].dmin) * (double)summ);
    }
    return (float)acc;
}

/* Q5_K against Q8_K-form activations: Q4_K's sum with 5-bit codes. */
float kvb_dot_q5_K_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q5_K *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *xq = x->q + i * QK_K;
        int64_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kvb_q4k_scale_min(j, b[i].scales, &sc, &m);
            int32_t s = 0;
            for (int l = 0; l < 32; l++) s += (int32_t)kvb_q5k_code(&b[i], j * 32 + l) * xq[j * 32 + l];
            sumi += (int64_t)sc * s;
            summ += (int64_t)m * (x->s[i * 16 + 2 * j] + x->s[i * 16 + 2 * j + 1]);
        }
        const double dx = x->d[i];
        acc += dx * ((double)kvb_f16_to_f32(b[i].d) * (double)sumi - (double)kvb_f16_to_f32(b[i].dmin) * (double)summ);
    }
    return (float)acc;
}

/* Q6_K against Q8_K-form activations: per super-block,
 * d * d_x * sum over 16-element sub-blocks of sc * sum((q - 32) * qx). */
float kvb_dot_q6_K_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q6_K *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *xq = x->q + i * QK_K;
        int64_t sumi = 0;
        for (int e0 = 0; e0 < QK_K; e0 += 16) {
            int32_t s = 0;
            int sc = 0;
            for (int e = e0; e < e0 + 16; e++) {
                const int h = e / 128, g = (e % 128) / 32, l = e % 32;
                const uint8_t lo = b[i].ql[64 * h + l + (g & 1) * 32];
                const int q = (g < 2 ? lo & 0xF : lo >> 4) | (((b[i].qh[32 * h + l] >> (2 * g)) & 3) << 4);
                s += (q - 32) * xq[e];
                sc = b[i].scales[8 * h + l / 16 + 2 * g];
            }
            sumi += (int64_t)sc * s;
        }
        acc += (double)kvb_f16_to_f32(b[i].d) * (double)x->d[i] * (double)sumi;
    }
    return (float)acc;
}

kvb_dot_q8_fn kvb_dot_q8_ref(uint32_t type) {
    switch (type) {
    case GGML_TYPE_Q8_0: return kvb_dot_q8_0_q8_ref;
    case GGML_TYPE_Q4_0: return kvb_dot_q4_0_q8_ref;
    case GGML_TYPE_Q5_0: return kvb_dot_q5_0_q8_ref;
    case GGML_TYPE_Q4_1: return kvb_dot_q4_1_q8_ref;
    case GGML_TYPE_Q5_1: return kvb_dot_q5_1_q8_ref;
    case GGML_TYPE_IQ4_NL: return kvb_dot_iq4_nl_q8_ref;
    case GGML_TYPE_IQ4_XS: return kvb_dot_iq4_xs_q8_ref;
    case GGML_TYPE_MXFP4: return kvb_dot_mxfp4_q8_ref;
    case GGML_TYPE_Q4_K: return kvb_dot_q4_K_q8_ref;
    case GGML_TYPE_Q5_K: return kvb_dot_q5_K_q8_ref;
    case GGML_TYPE_Q6_K: return kvb_dot_q6_K_q8_ref;
    default: return NULL;
    }
}

static float dot_q4_0_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_Q4_0, row, x, n); }
float kvb_dot_q5_0_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_Q5_0, row, x, n); }
static float dot_q4_K_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_Q4_K, row, x, n); }
float kvb_dot_q5_K_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_Q5_K, row, x, n); }
float kvb_dot_q4_1_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_Q4_1, row, x, n); }
float kvb_dot_q5_1_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_Q5_1, row, x, n); }
float kvb_dot_iq4_nl_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_IQ4_NL, row, x, n); }
float kvb_dot_iq4_xs_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_IQ4_XS, row, x, n); }
float kvb_dot_mxfp4_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_MXFP4, row, x, n); }
static float dot_q6_K_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_Q6_K, row, x, n); }

/* The prefill contract (matmul.h): one fmaf chain per (row, token) in k
 * order. fmaf rounds once, as the SIMD FMA lanes do, so this is bit-exact. */
void kvb_panel_ref(const float *wp, int64_t n, const float *x, int64_t ldx, int nt, float *y, int64_t ldy, int nr) {
    for (int t = 0; t < nt; t++) {
        float acc[KVB_PANEL_ROWS] = {0};
        const float *xt = x + (size_t)t * (size_t)ldx;
        for (int64_t k = 0; k < n; k++) {
            const float *wk = wp + (size_t)k * KVB_PANEL_ROWS;
            for (int r = 0; r < nr; r++) acc[r] = fmaf(wk[r], xt[k], acc[r]);
        }
        for (int r = 0; r < nr; r++) y[(size_t)t * (size_t)ldy + (size_t)r] = acc[r];
    }
}

const struct kvb_dot_kernels kvb_dot_ref = {
    .panel = kvb_panel_ref,
    .name = "ref",
    .dot = {
        [GGML_TYPE_F32] = dot_f32_ref, [GGML_TYPE_F16] = dot_f16_ref, [GGML_TYPE_BF16] = dot_bf16_ref,
        [GGML_TYPE_Q8_0] = dot_q8_0_ref, [GGML_TYPE_Q4_0] = dot_q4_0_ref, [GGML_TYPE_Q5_0] = kvb_dot_q5_0_ref,
        [GGML_TYPE_Q4_1] = kvb_dot_q4_1_ref, [GGML_TYPE_Q5_1] = kvb_dot_q5_1_ref,
        [GGML_TYPE_IQ4_NL] = kvb_dot_iq4_nl_ref, [GGML_TYPE_IQ4_XS] = kvb_dot_iq4_xs_ref, [GGML_TYPE_MXFP4] = kvb_dot_mxfp4_ref,
        [GGML_TYPE_Q4_K] = dot_q4_K_ref, [GGML_TYPE_Q5_K] = kvb_dot_q5_K_ref, [GGML_TYPE_Q6_K] = dot_q6_K_ref,
    },
};

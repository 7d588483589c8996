/*
 * dot_ref.c — scalar reference dot products of a weight row with f32 x:
 * dequantize one block at a time (kvb_dequantize_row), then a plain sum.
 */
#include "../matmul.h"
#include "../quant.h"

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

static float dot_q4_0_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_Q4_0, row, x, n); }
static float dot_q4_K_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_Q4_K, row, x, n); }
static float dot_q6_K_ref(const void *row, const float *x, int64_t n) { return dot_blocks(GGML_TYPE_Q6_K, row, x, n); }

const struct kvb_dot_kernels kvb_dot_ref = {
    .name = "ref",
    .dot = {
        [GGML_TYPE_F32] = dot_f32_ref, [GGML_TYPE_F16] = dot_f16_ref, [GGML_TYPE_BF16] = dot_bf16_ref,
        [GGML_TYPE_Q8_0] = dot_q8_0_ref, [GGML_TYPE_Q4_0] = dot_q4_0_ref, [GGML_TYPE_Q4_K] = dot_q4_K_ref,
        [GGML_TYPE_Q6_K] = dot_q6_K_ref,
    },
};

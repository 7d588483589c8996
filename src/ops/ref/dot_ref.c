/* dot_ref.c — scalar reference dot products of a weight row with f32 x. */
#include "../matmul.h"

static float dot_f32_ref(const void *row, const float *x, int64_t n) {
    const float *w = row;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += w[i] * x[i];
    return s;
}

static float dot_f16_ref(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += kvb_f16_to_f32(w[i]) * x[i];
    return s;
}

const struct kvb_dot_kernels kvb_dot_ref = {dot_f32_ref, dot_f16_ref};

/*
 * rope.c — rotary position embedding. Angles are computed in double so that
 * positions in the millions keep full float precision (pos * inv_freq).
 * Interleaved pairs (2i, 2i+1) are llama/llama2.c; NeoX pairs are (i, i+n/2).
 */
#include "ops.h"

#include <math.h>

void kvb_rope_inv_freq(const struct kvb_rope *r, const float *ff, double *inv_freq) {
    int32_t n_pairs = r->n_dims / 2;
    double scale = r->freq_scale > 0 ? r->freq_scale : 1.0;
    for (int32_t i = 0; i < n_pairs; i++) {
        double f = pow((double)r->base, -2.0 * i / (double)r->n_dims) * scale;
        if (ff && ff[i] != 0) f /= ff[i];
        inv_freq[i] = f;
    }
}

void kvb_rope_cos_sin(const double *inv_freq, int32_t n_pairs, int64_t pos, float *cs) {
    for (int32_t i = 0; i < n_pairs; i++) {
        double a = (double)pos * inv_freq[i];
        cs[i] = (float)cos(a);
        cs[n_pairs + i] = (float)sin(a);
    }
}

void kvb_rope_apply(enum kvb_rope_type type, int32_t n_dims, const float *cs, float *x) {
    int32_t n_pairs = n_dims / 2;
    const float *c = cs, *s = cs + n_pairs;
    if (type == KVB_ROPE_INTERLEAVED) {
        for (int32_t i = 0; i < n_pairs; i++) {
            float x0 = x[2 * i], x1 = x[2 * i + 1];
            x[2 * i] = x0 * c[i] - x1 * s[i];
            x[2 * i + 1] = x0 * s[i] + x1 * c[i];
        }
    } else if (type == KVB_ROPE_NEOX) {
        for (int32_t i = 0; i < n_pairs; i++) {
            float x0 = x[i], x1 = x[i + n_pairs];
            x[i] = x0 * c[i] - x1 * s[i];
            x[i + n_pairs] = x0 * s[i] + x1 * c[i];
        }
    }
}

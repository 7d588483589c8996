/*
 * attn_ref.c — scalar reference primitives. Always built; the law that the
 * SIMD versions are tested against. Plain loops, sequential sums.
 */
#include "../ops.h"
#include "../quant.h"
#include "../../core/ggml_types.h"

#include <math.h>

/* Element i of a row of type t, as kvb_dequantize_row gives it. */
static inline float load_elem_t(enum kvb_dtype t, const void *row, int32_t i) {
    const uint8_t *b = row;
    if (t == KVB_DTYPE_Q8_0) {
        const struct block_q8_0 *blk = (const struct block_q8_0 *)b + i / 32;
        return kvb_f16_to_f32(blk->d) * blk->qs[i % 32];
    }
    if (t == KVB_DTYPE_Q4_0) {
        const struct block_q4_0 *blk = (const struct block_q4_0 *)b + i / 32;
        const int j = i % 32;
        return kvb_f16_to_f32(blk->d) * ((j < 16 ? blk->qs[j] & 0xF : blk->qs[j - 16] >> 4) - 8);
    }
    return t == KVB_DTYPE_F16 ? kvb_f16_to_f32(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}
static inline float load_elem(const struct kvb_kv_view *v, const void *row, int32_t i) { return load_elem_t(v->dtype, row, i); }

static void scores_ref(const struct kvb_kv_view *v, const float *q, int32_t n_rows, int32_t j0, int32_t nt, float *s) {
    const int32_t d = v->head_dim;
    for (int32_t t = 0; t < nt; t++) {
        const void *k = kvb_view_k(v, j0 + t);
        for (int32_t r = 0; r < n_rows; r++) {
            const float *qr = q + (size_t)r * d;
            float sum = 0;
            for (int32_t i = 0; i < d; i++) sum += qr[i] * load_elem(v, k, i);
            s[r * KVB_ATTN_TILE + t] = sum;
        }
    }
}

/* Code i of a q8_0/q4_0 row: ggml's q, or q4_0's nibble less 8. */
static inline int32_t code_at(enum kvb_dtype t, const struct block_q8_0 *b8, const struct block_q4_0 *b4, int32_t i) {
    if (t == KVB_DTYPE_Q8_0) return b8[i / 32].qs[i % 32];
    const int j = i % 32;
    return (j < 16 ? b4[i / 32].qs[j] & 0xF : b4[i / 32].qs[j - 16] >> 4) - 8;
}

static void scores_i8_ref(const struct kvb_kv_view *v, const struct kvb_q8_rows *q, int32_t n_rows, int32_t j0, int32_t nt, float *s) {
    const int32_t d = v->head_dim, nb = d / 32;
    for (int32_t t = 0; t < nt; t++) {
        const void *k = kvb_view_k(v, j0 + t);
        const struct block_q8_0 *b8 = k;
        const struct block_q4_0 *b4 = k;
        for (int32_t r = 0; r < n_rows; r++) {
            const int8_t *qr = q->q + (size_t)r * d;
            float acc = 0;
            for (int32_t b = 0; b < nb; b++) {
                int32_t isum = 0;
                for (int32_t i = b * 32; i < b * 32 + 32; i++) isum += code_at(v->dtype, b8, b4, i) * (int32_t)qr[i];
                const float dk = kvb_f16_to_f32(v->dtype == KVB_DTYPE_Q8_0 ? b8[b].d : b4[b].d);
                acc = fmaf((float)isum, dk * q->d[(size_t)r * nb + b], acc);
            }
            s[r * KVB_ATTN_TILE + t] = acc;
        }
    }
}

static void accum_ref(const struct kvb_kv_view *v, const float *e, int32_t n_rows, int32_t j0, int32_t nt, float *acc) {
    const int32_t d = kvb_view_dv(v);
    for (int32_t t = 0; t < nt; t++) {
        const void *vr = kvb_view_v(v, j0 + t);
        for (int32_t r = 0; r < n_rows; r++) {
            float w = e[r * KVB_ATTN_TILE + t];
            if (w == 0) continue;
            float *ar = acc + (size_t)r * d;
            for (int32_t i = 0; i < d; i++) ar[i] += w * load_elem_t(v->dtype_v, vr, i);
        }
    }
}

static void vexp_ref(float *x, int32_t n) {
    for (int32_t i = 0; i < n; i++) x[i] = expf(x[i]);
}

static void to_f16_ref(const float *src, uint16_t *dst, int32_t n) {
    for (int32_t i = 0; i < n; i++) dst[i] = kvb_f32_to_f16(src[i]);
}

static void from_f16_ref(const uint16_t *src, float *dst, int32_t n) {
    for (int32_t i = 0; i < n; i++) dst[i] = kvb_f16_to_f32(src[i]);
}

static void from_q8_0_ref(const void *src, float *dst, int32_t n) { kvb_dequantize_row(GGML_TYPE_Q8_0, src, dst, n); }
static void from_q4_0_ref(const void *src, float *dst, int32_t n) { kvb_dequantize_row(GGML_TYPE_Q4_0, src, dst, n); }

float kvb_page_bound_ref(const float *q, const float *lo, const float *hi, int32_t d) {
    float s = 0;
    for (int32_t c = 0; c < d; c++) {
        const float a = q[c] * lo[c], b = q[c] * hi[c];
        s += a > b ? a : b;
    }
    return s;
}

static void page_bounds_ref(const float *q, int32_t n_rows, const float *lohi, int64_t n_pages, int32_t d, float *out) {
    for (int64_t p = 0; p < n_pages; p++) {
        const float *lo = lohi + (size_t)p * 2 * (size_t)d;
        float best = -INFINITY;
        for (int32_t r = 0; r < n_rows; r++) {
            const float b = kvb_page_bound_ref(q + (size_t)r * d, lo, lo + d, d);
            best = b > best ? b : best;
        }
        out[p] = best;
    }
}

const struct kvb_kernels kvb_kernels_ref = {
    .quant_rows = true,
    .page_bounds = page_bounds_ref,
    .from_q8_0 = from_q8_0_ref,
    .from_q4_0 = from_q4_0_ref,
    .name = "ref",
    .scores = scores_ref,
    .scores_i8 = scores_i8_ref,
    .accum = accum_ref,
    .vexp = vexp_ref,
    .to_f16 = to_f16_ref,
    .from_f16 = from_f16_ref,
};

/*
 * kv_rows.c — KV rows in their storage types, and attention over views the
 * per-arch primitives cannot read directly.
 *
 * A row is stored once, when its token is appended: f16 and bf16 round to
 * nearest even, q8_0 and q4_0 quantize in ggml's block layouts (quant.h),
 * one f16 scale per 32 elements. Loading dequantizes (the quantized types
 * with the dispatched dequantizers of the weight kernels, which the kernel
 * tests hold to the scalar reference).
 *
 * Attention over pages the primitives do not read directly (bf16, mixed
 * K/V types) goes a tile of KVB_ATTN_TILE keys at a time: the tile's K rows
 * (those not scored from int8 queries, attn.c) and V rows are loaded into
 * per-thread f32 scratch and the primitives run on an f32 view of it.
 * Each row is then read from the pages once per call, as in the direct
 * path, so the driver's probabilities for policies come out of the same
 * pass; the cost is one dequantization per row per call.
 */
#include "ops.h"
#include "quant.h"
#include "../core/ggml_types.h"

void kvb_kv_row_store(enum kvb_dtype t, const float *src, void *dst, int32_t d) {
    switch (t) {
    case KVB_DTYPE_F16: kvb_kernels()->to_f16(src, (uint16_t *)dst, d); break;
    case KVB_DTYPE_BF16:
        for (int32_t i = 0; i < d; i++) ((uint16_t *)dst)[i] = kvb_f32_to_bf16(src[i]);
        break;
    case KVB_DTYPE_Q8_0: kvb_quantize_row(GGML_TYPE_Q8_0, src, dst, d); break;
    case KVB_DTYPE_Q4_0: kvb_quantize_row(GGML_TYPE_Q4_0, src, dst, d); break;
    default: memcpy(dst, src, sizeof(float) * (size_t)d); break;
    }
}

void kvb_kv_row_load(enum kvb_dtype t, const void *src, float *dst, int32_t d) {
    switch (t) {
    case KVB_DTYPE_F16: kvb_kernels()->from_f16((const uint16_t *)src, dst, d); break;
    case KVB_DTYPE_BF16:
        for (int32_t i = 0; i < d; i++) dst[i] = kvb_bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    case KVB_DTYPE_Q8_0: kvb_kernels()->from_q8_0(src, dst, d); break;
    case KVB_DTYPE_Q4_0: kvb_kernels()->from_q4_0(src, dst, d); break;
    default: memcpy(dst, src, sizeof(float) * (size_t)d); break;
    }
}

static const int32_t k_ident[KVB_ATTN_TILE] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
_Static_assert(KVB_ATTN_TILE == 64, "k_ident and the tile view's block_shift assume 64 keys per tile");

#define KV_MAX_D 512
static _Thread_local float t_tile[2 * KVB_ATTN_TILE * KV_MAX_D];
static _Thread_local uint8_t *t_page;

struct kvb_kv_view kvb_kv_tile_view(const struct kvb_kv_view *v, int32_t jt, int32_t nt, bool with_k, bool with_v) {
    const int32_t d = v->head_dim;
    float *kb = t_tile, *vb = t_tile + (size_t)KVB_ATTN_TILE * (size_t)d;
    for (int32_t t = 0; t < nt; t++) {
        if (with_k) kvb_kv_row_load(v->dtype, kvb_view_k(v, jt + t), kb + (size_t)t * (size_t)d, d);
        if (with_v) kvb_kv_row_load(v->dtype_v, kvb_view_v(v, jt + t), vb + (size_t)t * (size_t)d, d);
    }
    t_page = (uint8_t *)t_tile;
    struct kvb_kv_view f;
    f.pages = &t_page;
    f.slots = k_ident;
    f.n = nt;
    f.block_shift = 6;
    f.head_dim = d;
    f.row_bytes = f.row_bytes_v = sizeof(float) * (size_t)d;
    f.v_offset = sizeof(float) * (size_t)KVB_ATTN_TILE * (size_t)d;
    f.dtype = f.dtype_v = KVB_DTYPE_F32;
    f.softcap = v->softcap;
    return f;
}

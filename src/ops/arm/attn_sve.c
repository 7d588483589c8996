/*
 * attn_sve.c — the sve family's own attention primitives (its table, whose
 * other slots are the NEON families' primitives, is in attn_neon.c): scores
 * and value accumulation over f32 and f16 KV rows, vector-length-agnostic
 * with the ACLE (arm_sve.h), built with -march=armv8.2-a+sve and only on
 * AArch64 (CMakeLists.txt). f16 rows are loaded as halfwords zero-extended
 * into 32-bit lanes (LD1H) and widened by FCVT (exact), so an f16 row and
 * its f32 tile (f16_tile_rows) run the same FMAs: the same bits.
 *
 * scores: two predicated FMA chains of a vector each per (key, query row),
 * summed by FADDV (NEON's order of error, test_attn's bounds). accum: one
 * fused multiply-add per element, acc + w * v, as accum_neon: its bits.
 */
#include "arm_kernels.h"
#include "../quant.h"

#include <arm_sve.h>

/* Elements [i, i + lanes) of a K or V row of type t (predicate pg) as f32. */
static inline svfloat32_t kv_sve(const void *row, enum kvb_dtype t, int32_t i, svbool_t pg) {
    if (t == KVB_DTYPE_F16) return svcvt_f32_f16_x(pg, svreinterpret_f16_u32(svld1uh_u32(pg, (const uint16_t *)row + i)));
    return svld1_f32(pg, (const float *)row + i);
}

void kvb_scores_sve(const struct kvb_kv_view *v, const float *q, int32_t n_rows, int32_t j0, int32_t nt, float *s) {
    const int32_t d = v->head_dim, vl = (int32_t)svcntw();
    const svbool_t all = svptrue_b32();
    for (int32_t t = 0; t < nt; t++) {
        const void *k = kvb_view_k(v, j0 + t);
        for (int32_t r = 0; r < n_rows; r++) {
            const float *qr = q + (size_t)r * d;
            svfloat32_t a0 = svdup_n_f32(0), a1 = a0;
            for (int32_t i = 0; i < d; i += 2 * vl) {
                const svbool_t p0 = svwhilelt_b32_s32(i, d), p1 = svwhilelt_b32_s32(i + vl, d);
                a0 = svmla_f32_m(p0, a0, svld1_f32(p0, qr + i), kv_sve(k, v->dtype, i, p0));
                a1 = svmla_f32_m(p1, a1, svld1_f32(p1, qr + i + vl), kv_sve(k, v->dtype, i + vl, p1));
            }
            s[r * KVB_ATTN_TILE + t] = svaddv_f32(all, svadd_f32_x(all, a0, a1));
        }
    }
}

void kvb_accum_sve(const struct kvb_kv_view *v, const float *e, int32_t n_rows, int32_t j0, int32_t nt, float *acc) {
    const int32_t d = kvb_view_dv(v), vl = (int32_t)svcntw();
    for (int32_t t = 0; t < nt; t++) {
        const void *vr = kvb_view_v(v, j0 + t);
        for (int32_t r = 0; r < n_rows; r++) {
            const float w = e[r * KVB_ATTN_TILE + t];
            if (w == 0) continue;
            float *ar = acc + (size_t)r * d;
            const svfloat32_t wv = svdup_n_f32(w);
            for (int32_t i = 0; i < d; i += vl) {
                const svbool_t pg = svwhilelt_b32_s32(i, d);
                svst1_f32(pg, ar + i, svmla_f32_x(pg, svld1_f32(pg, ar + i), kv_sve(vr, v->dtype_v, i, pg), wv));
            }
        }
    }
}

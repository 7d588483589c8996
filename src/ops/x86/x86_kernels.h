/*
 * x86_kernels.h — the x86 kernels that one file defines and another
 * family's table (or kernel) uses: the defining file includes this header
 * too, so prototype and definition are checked against each other. Plain C
 * declarations: any file may include it, whatever its -m flags; only the
 * dispatch table decides which run.
 */
#ifndef KVB_X86_KERNELS_H
#define KVB_X86_KERNELS_H

#include "../matmul.h"

/* attn_avx2.c: the avx512 family's integer scores, and both AVX-512
 * families' page bounds. */
void kvb_scores_i8_avx2(const struct kvb_kv_view *v, const struct kvb_q8_rows *q, int32_t n_rows, int32_t j0, int32_t nt, float *s);
void kvb_page_bounds_avx2(const float *q, int32_t n_rows, const float *lohi, int64_t n_pages, int32_t d, float *out);

/* attn_avxvnni.c: the avxvnni family's integer scores (avx2's bits). */
void kvb_scores_i8_avxvnni(const struct kvb_kv_view *v, const struct kvb_q8_rows *q, int32_t n_rows, int32_t j0, int32_t nt, float *s);

/* attn_vnni.c: the avx512vnni family's integer scores. */
void kvb_scores_i8_vnni(const struct kvb_kv_view *v, const struct kvb_q8_rows *q, int32_t n_rows, int32_t j0, int32_t nt, float *s);

/* dot_avx2.c: the panel packing and the integer dots, which the AVX-512
 * families use too (AVX2 runs on every AVX-512 CPU). */
void kvb_pack_panel_avx2(const struct kvb_mat *w, int64_t r0, int nr, float *wp, float *scratch);
float kvb_dot_q8_0_q8_avx2(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q4_0_q8_avx2(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q5_0_q8_avx2(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q5_0_q8_vnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_iq4_nl_q8_vnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_mxfp4_q8_vnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q4_1_q8_avx2(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q5_1_q8_avx2(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_iq4_nl_q8_avx2(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_iq4_xs_q8_avx2(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_mxfp4_q8_avx2(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q4_K_q8_avx2(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q5_K_q8_avx2(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q6_K_q8_avx2(const void *row, const struct kvb_q8_act *x, int64_t n);

/* dot_vnni.c: Q8_0 rows against int8 tokens, a row per lane. */
void kvb_q8_tile_vnni(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                      bool first);
float kvb_dot_q8_0_q8_vnni(const void *row, const struct kvb_q8_act *x, int64_t n);
/* dot_vnni.c: the K-quant tiles (kq_tile) with vpdpwssd. */
void kvb_q4_K_tile_vnni(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                        bool first);
void kvb_q5_K_tile_vnni(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                        bool first);
void kvb_q6_K_tile_vnni(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                        bool first);

/* dot_avxvnni.c: the avxvnni family's integer dots and tiles (dot_i8_avx2.h
 * with AVX-VNNI), which the table kvb_dot_avxvnni (dot_avx2.c) names. */
float kvb_dot_q8_0_q8_avxvnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q4_0_q8_avxvnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q5_0_q8_avxvnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q4_1_q8_avxvnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q5_1_q8_avxvnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_iq4_nl_q8_avxvnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_iq4_xs_q8_avxvnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_mxfp4_q8_avxvnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q4_K_q8_avxvnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q5_K_q8_avxvnni(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q6_K_q8_avxvnni(const void *row, const struct kvb_q8_act *x, int64_t n);
void kvb_q8_tile_avxvnni(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                         bool first);
void kvb_q4_K_tile_avxvnni(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                           bool first);
void kvb_q5_K_tile_avxvnni(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                           bool first);
void kvb_q6_K_tile_avxvnni(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out, int64_t ldo,
                           bool first);

#endif

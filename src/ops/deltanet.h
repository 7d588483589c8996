/* deltanet.h — TEMPORARY lead stub (replaced by the kernels branch). */
#ifndef KVB_DELTANET_H
#define KVB_DELTANET_H
#include "../core/core.h"
void kvb_gdn_recurrent(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k, int64_t ldk,
                       const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o, int64_t ldo);
void kvb_gdn_chunked(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k, int64_t ldk,
                     const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o, int64_t ldo, float *scratch);
size_t kvb_gdn_scratch_floats(int32_t Dk, int32_t Dv);
void kvb_ssm_conv(float *hist, const float *w, int32_t C, int32_t K, const float *x, int64_t ldx, int32_t T, float *y, int64_t ldy, bool silu);
#endif

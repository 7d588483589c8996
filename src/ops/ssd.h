/*
 * ssd.h — the Mamba-2 selective scan (Granite 4.0-H, Nemotron-H recurrent
 * layers) over one head, as ggml's ssm_scan computes it for a scalar A per
 * head, in its recurrent form (decode) and its chunked form (SSD, state-space
 * duality: prompts). They know nothing about caches: the state is reached
 * through row pointers (rows in pool pages).
 *
 * One head's state S is P rows (the head's channels) of N floats (d_state).
 * Per token t, with dt_t already softplus'd (dt_t = softplus(raw + dt_bias))
 * and A < 0 the head's decay rate:
 *     S[i] = e^(dt_t A) S[i] + dt_t x_t[i] B_t;   y_t[i] = S[i] . C_t + D x_t[i]
 * The chunked form, chunks of KVB_SSD_CHUNK tokens from the call's first
 * token, a_t the cumulative sum of dt A over the chunk:
 *     y_t[i] = e^(a_t) S0[i] . C_t + sum_{s<=t} e^(a_t - a_s) (C_t . B_s) dt_s x_s[i] + D x_t[i]
 *     S[i]   = e^(a_L) S0[i] + sum_s e^(a_L - a_s) dt_s x_s[i] B_s
 * equal to the recurrent form up to float rounding. Reductions are
 * sequential chains in a fixed order (the scalar reference is the law).
 */
#ifndef KVB_SSD_H
#define KVB_SSD_H

#include <stddef.h>
#include <stdint.h>

#define KVB_SSD_CHUNK 64 /* tokens per chunk of kvb_ssd_chunked */

/* The 8 lanes' sum of the recurrent form's dot, in the law's order. */
static inline float kvb_ssd_lanes_sum(const float *a) {
    const float t0 = a[0] + a[4], t1 = a[1] + a[5], t2 = a[2] + a[6], t3 = a[3] + a[7];
    return (t0 + t2) + (t1 + t3);
}

/* One head over T tokens (T >= 0; P, N >= 1): x rows of P floats at x + t*ldx,
 * B and C rows of N at B + t*ldbc, C + t*ldbc, dt at dt[t*lddt], y rows of P
 * at y + t*ldy. S is updated in place; y must not overlap the inputs. The
 * family in use's kernel (kvb_ssd_kernels). */
void kvb_ssd_recurrent(float *const *S, int32_t P, int32_t N, int32_t T, const float *x, int64_t ldx, const float *B, const float *C,
                       int64_t ldbc, const float *dt, int64_t lddt, float A, float D, float *y, int64_t ldy);
/* The same by chunks; scratch: at least kvb_ssd_scratch_floats(N) floats. The family in use's kernel. */
void kvb_ssd_chunked(float *const *S, int32_t P, int32_t N, int32_t T, const float *x, int64_t ldx, const float *B, const float *C,
                     int64_t ldbc, const float *dt, int64_t lddt, float A, float D, float *y, int64_t ldy, float *scratch);
size_t kvb_ssd_scratch_floats(int32_t N);

/* The kernels of a family: the scalar reference (the law: the recurrent form's
 * dot S[i] . C_t runs as 8 lanes, lane j summing n = j mod 8 by a sequential
 * fmaf chain, then (a_j + a_j+4), (t_0 + t_2) + (t_1 + t_3)), and AVX2, which
 * gives the reference's bits (the state update s dA + b (x dt) unfused, the
 * lanes' fmas in the same order). The chunked form's law: every dot a
 * sequential fmaf chain over its index (C_t . B_s over n, S0[i] . C_t over n,
 * the chunk's terms over s), each exp by expf, products in the written order;
 * AVX2 runs those chains side by side (lanes over s, t or n, B and C
 * transposed into the scratch), each lane's chain in the same order, so it
 * gives the reference's bits too (a lane past t adds fmaf(0, x, v) = v).
 * kvb_ssd_kernels(): the family in use's (dispatch.h: KVB_REF and
 * KVB_KERNELS choose it, as attention and matmul). */
struct kvb_ssd_kernels {
    const char *name;
    void (*recurrent)(float *const *S, int32_t P, int32_t N, int32_t T, const float *x, int64_t ldx, const float *B, const float *C,
                      int64_t ldbc, const float *dt, int64_t lddt, float A, float D, float *y, int64_t ldy);
    void (*chunked)(float *const *S, int32_t P, int32_t N, int32_t T, const float *x, int64_t ldx, const float *B, const float *C,
                    int64_t ldbc, const float *dt, int64_t lddt, float A, float D, float *y, int64_t ldy, float *scratch);
};
extern const struct kvb_ssd_kernels kvb_ssd_ref;
#if defined(__x86_64__)
extern const struct kvb_ssd_kernels kvb_ssd_avx2;
#endif
const struct kvb_ssd_kernels *kvb_ssd_kernels(void);

#endif

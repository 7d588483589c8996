/*
 * deltanet_width.h — the Gated DeltaNet kernels (deltanet.h) for AVX2 and
 * AVX-512, written once over simd_width.h's names: deltanet_avx2.c
 * includes it with KVB_W 8 (kvb_gdn_avx2), deltanet_avx512.c with KVB_W 16
 * (kvb_gdn_avx512).
 *
 * Every kernel vectorizes only across an index whose elements are
 * independent (state columns j, conv channels c, the chunk's keys s) and
 * runs each reduction as the reference's fmaf chain, in its order, one
 * lane per element: the results are the reference's bits (deltanet.c's
 * note; test_deltanet checks it). Columns past the last full vector go
 * through masked loads and stores, never a scalar tail.
 *
 * recurrent: a block of REC_NB vectors of state columns at a time, all T
 *   tokens per block (columns are independent, so the block stays in L1
 *   across tokens); per token two passes over the rows, each reading and
 *   writing the block once: pass 1 decays and accumulates kv, pass 2
 *   adds k d^T and accumulates o, kv/d/o in registers; the next rows are
 *   prefetched (state rows are in pool pages, not adjacent).
 * chunked: the chunk's keys transposed once (Kt[i][s]) so k_t.k_s and
 *   q_t.k_s run a lane per s; then per block of CH_NB vectors of columns:
 *   S0^T k_t and S0^T q_t, the forward substitution with the output's
 *   chain beside it, and the state update.
 * conv: a vector of channels at a time, its K taps gathered once; SiLU
 *   through the family's vexp.
 */
#ifndef KVB_X86_DELTANET_WIDTH_H
#define KVB_X86_DELTANET_WIDTH_H

#include "../deltanet.h"
#include "../ops.h"
#include "simd_width.h"

#include <math.h>

#if KVB_W == 8
#define DN_MASK __m256i
#define DN_MASK_N(n) _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define DN_MASK_ALL() _mm256_set1_epi32(-1)
#define DN_LOADM(p, m) _mm256_maskload_ps(p, m)
#define DN_STOREM(p, m, v) _mm256_maskstore_ps(p, m, v)
#define DN_SUB(a, b) _mm256_sub_ps(a, b)
#define DN_VEXP (kvb_kernels_avx2.vexp)
#define DN_NAME "avx2"
#define REC_NB 4 /* 32 columns: kv, d, o in 12 registers */
#define CH_NB 4
#else
#define DN_MASK __mmask16
#define DN_MASK_N(n) ((__mmask16)((1u << (n)) - 1u))
#define DN_MASK_ALL() ((__mmask16)0xFFFF)
#define DN_LOADM(p, m) _mm512_maskz_loadu_ps(m, p)
#define DN_STOREM(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define DN_SUB(a, b) _mm512_sub_ps(a, b)
#define DN_VEXP (kvb_kernels_avx512.vexp)
#define DN_NAME "avx512"
#define REC_NB 8 /* 128 columns: kv, d, o in 24 registers */
#define CH_NB 4
#endif
#define DN_NBMAX 8
#define DN_INLINE static inline __attribute__((always_inline))

/* Vector u of a block of nb at p: masked when it is the block's last and
 * the block is a tail (masked is a constant after inlining). */
#define DN_LD(p, u) ((masked && (u) == nb - 1) ? DN_LOADM(p, m) : V_LOADU(p))
#define DN_ST(p, u, x)                                         \
    do {                                                       \
        if (masked && (u) == nb - 1) DN_STOREM(p, m, x);       \
        else V_STOREU(p, x);                                   \
    } while (0)

DN_INLINE void KVB_WFN(gdn_rec_block)(float *const *S, int32_t Dk, int32_t j0, int32_t T, const float *q, int64_t ldq, const float *k,
                                      int64_t ldk, const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o,
                                      int64_t ldo, const int nb, const bool masked, const DN_MASK m) {
    VF kv[DN_NBMAX], d[DN_NBMAX], ov[DN_NBMAX];
    for (int32_t t = 0; t < T; t++) {
        const float *qt = q + t * ldq, *kt = k + t * ldk, *vt = v + t * ldv + j0;
        const VF e = V_SET1(expf(g[t * ldgb])), b = V_SET1(beta[t * ldgb]);
        for (int u = 0; u < nb; u++) kv[u] = V_ZERO();
        for (int32_t i = 0; i < Dk; i++) {
            float *row = S[i] + j0;
            if (i + 4 < Dk)
                for (int u = 0; u < nb * KVB_W; u += 16) _mm_prefetch((const char *)(S[i + 4] + j0 + u), _MM_HINT_T0);
            const VF ki = V_SET1(kt[i]);
            for (int u = 0; u < nb; u++) {
                const VF s = V_MUL(DN_LD(row + u * KVB_W, u), e);
                DN_ST(row + u * KVB_W, u, s);
                kv[u] = V_FMADD(s, ki, kv[u]);
            }
        }
        for (int u = 0; u < nb; u++) {
            d[u] = V_MUL(b, DN_SUB(DN_LD(vt + u * KVB_W, u), kv[u]));
            ov[u] = V_ZERO();
        }
        for (int32_t i = 0; i < Dk; i++) {
            float *row = S[i] + j0;
            const VF ki = V_SET1(kt[i]), qi = V_SET1(qt[i]);
            for (int u = 0; u < nb; u++) {
                const VF s = V_FMADD(ki, d[u], DN_LD(row + u * KVB_W, u));
                DN_ST(row + u * KVB_W, u, s);
                ov[u] = V_FMADD(s, qi, ov[u]);
            }
        }
        float *ot = o + t * ldo + j0;
        for (int u = 0; u < nb; u++) DN_ST(ot + u * KVB_W, u, ov[u]);
    }
}

static void KVB_WFN(gdn_recurrent)(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k,
                                   int64_t ldk, const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o,
                                   int64_t ldo) {
    int32_t j0 = 0;
    for (; j0 + REC_NB * KVB_W <= Dv; j0 += REC_NB * KVB_W)
        KVB_WFN(gdn_rec_block)(S, Dk, j0, T, q, ldq, k, ldk, v, ldv, g, beta, ldgb, o, ldo, REC_NB, false, DN_MASK_ALL());
    for (; j0 + KVB_W <= Dv; j0 += KVB_W)
        KVB_WFN(gdn_rec_block)(S, Dk, j0, T, q, ldq, k, ldk, v, ldv, g, beta, ldgb, o, ldo, 1, false, DN_MASK_ALL());
    if (j0 < Dv) KVB_WFN(gdn_rec_block)(S, Dk, j0, T, q, ldq, k, ldk, v, ldv, g, beta, ldgb, o, ldo, 1, true, DN_MASK_N(Dv - j0));
}

/* The chunk's columns [j0, j0 + nb vectors): deltanet.c's chunk_ref steps
 * after the shared part (G, gam, cdec, nA, Qd, Kt), in its order. */
DN_INLINE void KVB_WFN(gdn_chunk_block)(float *const *S, int32_t Dk, int32_t Dv, int32_t L, int32_t j0, const float *q, int64_t ldq,
                                        const float *k, int64_t ldk, const float *v, int64_t ldv, const float *beta, int64_t ldgb,
                                        float *o, int64_t ldo, const float *gam, const float *cdec, const float *nA, const float *Qd,
                                        const float *Kt, float *D, const int nb, const bool masked, const DN_MASK m) {
    enum { N = KVB_GDN_CHUNK };
    VF a0[DN_NBMAX], a1[DN_NBMAX];
    for (int32_t t = 0; t < L; t++) {
        const float *qt = q + t * ldq, *kt = k + t * ldk, *vt = v + t * ldv + j0;
        for (int u = 0; u < nb; u++) a0[u] = a1[u] = V_ZERO();
        for (int32_t i = 0; i < Dk; i++) {
            const float *row = S[i] + j0;
            const VF ki = V_SET1(kt[i]), qi = V_SET1(qt[i]);
            for (int u = 0; u < nb; u++) {
                const VF r = DN_LD(row + u * KVB_W, u);
                a0[u] = V_FMADD(ki, r, a0[u]);
                a1[u] = V_FMADD(qi, r, a1[u]);
            }
        }
        const VF bt = V_SET1(beta[t * ldgb]), gt = V_SET1(gam[t]);
        float *Dt = D + (size_t)t * Dv + j0, *ot = o + t * ldo + j0;
        for (int u = 0; u < nb; u++) {
            DN_ST(Dt + u * KVB_W, u, V_MUL(bt, DN_SUB(DN_LD(vt + u * KVB_W, u), V_MUL(gt, a0[u]))));
            DN_ST(ot + u * KVB_W, u, V_MUL(gt, a1[u]));
        }
    }
    for (int32_t t = 0; t < L; t++) {
        float *Dt = D + (size_t)t * Dv + j0, *ot = o + t * ldo + j0;
        for (int u = 0; u < nb; u++) {
            a0[u] = DN_LD(Dt + u * KVB_W, u);
            a1[u] = DN_LD(ot + u * KVB_W, u);
        }
        for (int32_t s = 0; s < t; s++) {
            const float *Ds = D + (size_t)s * Dv + j0;
            const VF na = V_SET1(nA[t * N + s]), qd = V_SET1(Qd[t * N + s]);
            for (int u = 0; u < nb; u++) {
                const VF x = DN_LD(Ds + u * KVB_W, u);
                a0[u] = V_FMADD(na, x, a0[u]);
                a1[u] = V_FMADD(qd, x, a1[u]);
            }
        }
        const VF qd = V_SET1(Qd[t * N + t]);
        for (int u = 0; u < nb; u++) {
            DN_ST(Dt + u * KVB_W, u, a0[u]);
            DN_ST(ot + u * KVB_W, u, V_FMADD(qd, a0[u], a1[u]));
        }
    }
    const VF gl = V_SET1(gam[L - 1]);
    for (int32_t i = 0; i < Dk; i++) {
        float *row = S[i] + j0;
        for (int u = 0; u < nb; u++) a0[u] = V_MUL(DN_LD(row + u * KVB_W, u), gl);
        for (int32_t s = 0; s < L; s++) {
            const float *Ds = D + (size_t)s * Dv + j0;
            const VF c = V_SET1(cdec[s] * Kt[(size_t)i * N + s]);
            for (int u = 0; u < nb; u++) a0[u] = V_FMADD(c, DN_LD(Ds + u * KVB_W, u), a0[u]);
        }
        for (int u = 0; u < nb; u++) DN_ST(row + u * KVB_W, u, a0[u]);
    }
}

static void KVB_WFN(gdn_chunk)(float *const *S, int32_t Dk, int32_t Dv, int32_t L, const float *q, int64_t ldq, const float *k,
                               int64_t ldk, const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o,
                               int64_t ldo, float *scratch) {
    enum { N = KVB_GDN_CHUNK };
    float *G = scratch, *gam = G + N, *cdec = gam + N, *nA = cdec + 2 * N, *Qd = nA + N * N, *Kt = Qd + N * N, *D = Kt + (size_t)Dk * N;
    kvb_gdn_chunk_decays(g, ldgb, L, G, gam, cdec);
    const int32_t Lp = (L + KVB_W - 1) / KVB_W * KVB_W;
    for (int32_t i = 0; i < Dk; i++) {
        float *kr = Kt + (size_t)i * N;
        for (int32_t s = 0; s < L; s++) kr[s] = k[s * ldk + i];
        for (int32_t s = L; s < Lp; s++) kr[s] = 0.0f;
    }
    float kk[N], qk[N];
    for (int32_t t = 0; t < L; t++) {
        const float *qt = q + t * ldq, *kt = k + t * ldk, bt = beta[t * ldgb];
        const int32_t nv = t / KVB_W + 1; /* vectors of keys s <= t */
        for (int32_t v0 = 0; v0 < nv; v0 += 4) {
            VF ak[4], aq[4];
            const int32_t nw = nv - v0 < 4 ? nv - v0 : 4;
            for (int w = 0; w < 4; w++) ak[w] = aq[w] = V_ZERO();
            for (int32_t i = 0; i < Dk; i++) {
                const float *kr = Kt + (size_t)i * N + v0 * KVB_W;
                const VF ki = V_SET1(kt[i]), qi = V_SET1(qt[i]);
                for (int w = 0; w < 4; w++)
                    if (w < nw) {
                        const VF x = V_LOADU(kr + w * KVB_W);
                        ak[w] = V_FMADD(ki, x, ak[w]);
                        aq[w] = V_FMADD(qi, x, aq[w]);
                    }
            }
            for (int w = 0; w < nw; w++) {
                V_STOREU(kk + (v0 + w) * KVB_W, ak[w]);
                V_STOREU(qk + (v0 + w) * KVB_W, aq[w]);
            }
        }
        for (int32_t s = 0; s <= t; s++) {
            const float e = expf(G[t] - G[s]);
            Qd[t * N + s] = e * qk[s];
            if (s < t) nA[t * N + s] = -((bt * e) * kk[s]);
        }
    }
    int32_t j0 = 0;
    for (; j0 + CH_NB * KVB_W <= Dv; j0 += CH_NB * KVB_W)
        KVB_WFN(gdn_chunk_block)(S, Dk, Dv, L, j0, q, ldq, k, ldk, v, ldv, beta, ldgb, o, ldo, gam, cdec, nA, Qd, Kt, D, CH_NB, false,
                                 DN_MASK_ALL());
    for (; j0 + KVB_W <= Dv; j0 += KVB_W)
        KVB_WFN(gdn_chunk_block)(S, Dk, Dv, L, j0, q, ldq, k, ldk, v, ldv, beta, ldgb, o, ldo, gam, cdec, nA, Qd, Kt, D, 1, false,
                                 DN_MASK_ALL());
    if (j0 < Dv)
        KVB_WFN(gdn_chunk_block)(S, Dk, Dv, L, j0, q, ldq, k, ldk, v, ldv, beta, ldgb, o, ldo, gam, cdec, nA, Qd, Kt, D, 1, true,
                                 DN_MASK_N(Dv - j0));
}

static void KVB_WFN(gdn_chunked)(float *const *S, int32_t Dk, int32_t Dv, int32_t T, const float *q, int64_t ldq, const float *k,
                                 int64_t ldk, const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb, float *o,
                                 int64_t ldo, float *scratch) {
    for (int32_t t0 = 0; t0 < T; t0 += KVB_GDN_CHUNK)
        KVB_WFN(gdn_chunk)(S, Dk, Dv, T - t0 < KVB_GDN_CHUNK ? T - t0 : KVB_GDN_CHUNK, q + t0 * ldq, ldq, k + t0 * ldk, ldk, v + t0 * ldv,
                           ldv, g + t0 * ldgb, beta + t0 * ldgb, ldgb, o + t0 * ldo, ldo, scratch);
}

#define DN_KMAX 16 /* taps kept in registers; more go to the reference (the same bits) */

DN_INLINE void KVB_WFN(gdn_conv_block)(const float *hist, const float *w, int32_t C, int32_t K, int32_t c0, const float *x, int64_t ldx,
                                       int32_t T, float *y, int64_t ldy, const bool masked, const DN_MASK m) {
    const int nb = 1;
    const int32_t H = K - 1, n = masked ? C - c0 : KVB_W;
    VF wv[DN_KMAX];
    for (int32_t j = 0; j < K; j++) {
        float tmp[KVB_W] = {0};
        for (int32_t l = 0; l < n; l++) tmp[l] = w[(size_t)(c0 + l) * K + j];
        wv[j] = V_LOADU(tmp);
    }
    for (int32_t t = 0; t < T; t++) {
        VF acc = V_ZERO();
        for (int32_t j = 0; j < K; j++) {
            const float *xr = t + j < H ? hist + (size_t)(t + j) * C : x + (t + j - H) * ldx;
            acc = V_FMADD(wv[j], DN_LD(xr + c0, 0), acc);
        }
        DN_ST(y + t * ldy + c0, 0, acc);
    }
}

static void KVB_WFN(gdn_conv)(float *hist, const float *w, int32_t C, int32_t K, const float *x, int64_t ldx, int32_t T, float *y,
                              int64_t ldy, bool silu) {
    if (K > DN_KMAX) {
        kvb_gdn_ref.conv(hist, w, C, K, x, ldx, T, y, ldy, silu);
        return;
    }
    int32_t c0 = 0;
    for (; c0 + KVB_W <= C; c0 += KVB_W) KVB_WFN(gdn_conv_block)(hist, w, C, K, c0, x, ldx, T, y, ldy, false, DN_MASK_ALL());
    if (c0 < C) KVB_WFN(gdn_conv_block)(hist, w, C, K, c0, x, ldx, T, y, ldy, true, DN_MASK_N(C - c0));
    if (silu) kvb_gdn_silu_rows(DN_VEXP, y, ldy, C, T);
    kvb_ssm_conv_hist(hist, C, K, x, ldx, T);
}

const struct kvb_gdn_kernels KVB_WFN(kvb_gdn) = {
    .name = DN_NAME,
    .recurrent = KVB_WFN(gdn_recurrent),
    .chunked = KVB_WFN(gdn_chunked),
    .conv = KVB_WFN(gdn_conv),
};

#endif

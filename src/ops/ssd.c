/* ssd.c — the Mamba-2 scan's recurrent and chunked forms (ssd.h), scalar. */
#include "ssd.h"
#include "dispatch.h"

#include <math.h>

static void recurrent_ref(float *const *S, int32_t P, int32_t N, int32_t T, const float *x, int64_t ldx, const float *B, const float *C,
                          int64_t ldbc, const float *dt, int64_t lddt, float A, float D, float *y, int64_t ldy) {
    for (int32_t t = 0; t < T; t++) {
        const float d = dt[t * lddt], dA = expf(d * A);
        const float *xt = x + t * ldx, *bt = B + t * ldbc, *ct = C + t * ldbc;
        float *yt = y + t * ldy;
        for (int32_t i = 0; i < P; i++) {
            float *s = S[i];
            const float xd = xt[i] * d;
            float a[8] = {0};
            for (int32_t n = 0; n < N; n++) {
                const float v = s[n] * dA + bt[n] * xd;
                s[n] = v;
                a[n & 7] = fmaf(v, ct[n], a[n & 7]);
            }
            yt[i] = kvb_ssd_lanes_sum(a) + D * xt[i];
        }
    }
}


const struct kvb_ssd_kernels *kvb_ssd_kernels(void) {
#if defined(__x86_64__)
    if (kvb_family()->needs & KVB_CPU_AVX2) return &kvb_ssd_avx2;
#endif
    return &kvb_ssd_ref;
}

void kvb_ssd_recurrent(float *const *S, int32_t P, int32_t N, int32_t T, const float *x, int64_t ldx, const float *B, const float *C,
                       int64_t ldbc, const float *dt, int64_t lddt, float A, float D, float *y, int64_t ldy) {
    kvb_ssd_kernels()->recurrent(S, P, N, T, x, ldx, B, C, ldbc, dt, lddt, A, D, y, ldy);
}

/* a[L], dec[L], W[L][L]; AVX2 also g[L] and B, C transposed ([N][L] each) */
size_t kvb_ssd_scratch_floats(int32_t N) { return (size_t)KVB_SSD_CHUNK * (KVB_SSD_CHUNK + 3) + 2 * (size_t)KVB_SSD_CHUNK * (size_t)(N > 0 ? N : 1); }

static void chunked_ref(float *const *S, int32_t P, int32_t N, int32_t T, const float *x, int64_t ldx, const float *B, const float *C,
                     int64_t ldbc, const float *dt, int64_t lddt, float A, float D, float *y, int64_t ldy, float *scratch) {
    float *a = scratch, *dec = scratch + KVB_SSD_CHUNK, *W = scratch + 2 * KVB_SSD_CHUNK; /* a[L], dec[L], W[L][L] */
    for (int32_t t0 = 0; t0 < T; t0 += KVB_SSD_CHUNK) {
        const int32_t L = T - t0 < KVB_SSD_CHUNK ? T - t0 : KVB_SSD_CHUNK;
        float acc = 0.0f;
        for (int32_t t = 0; t < L; t++) {
            acc += dt[(t0 + t) * lddt] * A;
            a[t] = acc;
        }
        /* W[t][s] = e^(a_t - a_s) (C_t . B_s) dt_s, s <= t */
        for (int32_t t = 0; t < L; t++) {
            const float *ct = C + (t0 + t) * ldbc;
            for (int32_t s = 0; s <= t; s++) {
                const float *bs = B + (t0 + s) * ldbc;
                float cb = 0.0f;
                for (int32_t n = 0; n < N; n++) cb = fmaf(ct[n], bs[n], cb);
                W[t * KVB_SSD_CHUNK + s] = expf(a[t] - a[s]) * cb * dt[(t0 + s) * lddt];
            }
        }
        /* y: the state before the chunk, then the chunk's own tokens */
        for (int32_t t = 0; t < L; t++) {
            const float *ct = C + (t0 + t) * ldbc, *xt = x + (t0 + t) * ldx;
            const float g = expf(a[t]);
            float *yt = y + (t0 + t) * ldy;
            for (int32_t i = 0; i < P; i++) {
                const float *s0 = S[i];
                float h = 0.0f;
                for (int32_t n = 0; n < N; n++) h = fmaf(s0[n], ct[n], h);
                float v = g * h;
                for (int32_t s = 0; s <= t; s++) v = fmaf(W[t * KVB_SSD_CHUNK + s], x[(t0 + s) * ldx + i], v);
                yt[i] = v + D * xt[i];
            }
        }
        /* the state after the chunk */
        const float gL = expf(a[L - 1]);
        for (int32_t s = 0; s < L; s++) dec[s] = expf(a[L - 1] - a[s]) * dt[(t0 + s) * lddt];
        for (int32_t i = 0; i < P; i++) {
            float *st = S[i];
            for (int32_t n = 0; n < N; n++) st[n] *= gL;
            for (int32_t s = 0; s < L; s++) {
                const float w = dec[s] * x[(t0 + s) * ldx + i];
                const float *bs = B + (t0 + s) * ldbc;
                for (int32_t n = 0; n < N; n++) st[n] = fmaf(w, bs[n], st[n]);
            }
        }
    }
}

const struct kvb_ssd_kernels kvb_ssd_ref = {"ref", recurrent_ref, chunked_ref};

void kvb_ssd_chunked(float *const *S, int32_t P, int32_t N, int32_t T, const float *x, int64_t ldx, const float *B, const float *C,
                     int64_t ldbc, const float *dt, int64_t lddt, float A, float D, float *y, int64_t ldy, float *scratch) {
    kvb_ssd_kernels()->chunked(S, P, N, T, x, ldx, B, C, ldbc, dt, lddt, A, D, y, ldy, scratch);
}

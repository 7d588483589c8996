/*
 * attn_avx512.c — AVX-512 (F, BW, VL) + F16C primitives. Compiled with
 * -mavx512f -mavx512bw -mavx512vl -mf16c -mfma; only called after the runtime
 * check in dispatch.c. Any head_dim works: the last chunk of 16 is masked.
 *
 * scores: 4 keys x up to 4 query rows at a time, 16 accumulators in
 *   registers, finished by one 16-way transpose-reduction (kvb_reduce16_avx512, reduce_avx512.h); each K
 *   row is converted once per group of 4 rows (GQA heads share the load).
 * accum: V is walked in chunks of 64 floats (4 zmm) per group of up to 4
 *   rows, so 16 accumulators stay in registers across the whole tile.
 * q8_0/q4_0 pages: each row dequantized once into an L1 buffer that the
 *   same f32 tiles read (4 keys for scores, 16 V rows for accum).
 * Many query rows (prefill blocks: 64): scores and accum convert each f16
 *   chunk once per group of 4 rows, 16 times per key at 64 rows, so from 48
 *   rows up (f16_tile_rows) the driver converts the tile to f32 once and the
 *   f32 path, the same FMAs on the same values, runs on it (prefill of
 *   4,096 tokens about 10% faster, docs/BENCHMARKS.md).
 * Shapes are compile-time (switch on the row count) so nothing spills;
 * figures per key and shape in docs/BENCHMARKS.md.
 * vexp: range reduction x = n ln2 + r, degree-6 polynomial, scalef by n.
 * The f16 and q8_0 row conversions are attn_width.h's bodies at 16 lanes
 * (AVX2 has them at 8).
 */
#include "../ops.h"

#include "prefetch_kv.h"
#include "reduce_avx512.h"
#include "x86_kernels.h"

#include <immintrin.h>

#define KVB_W 16
#include "attn_width.h" /* to_f16_avx512, from_f16_avx512, from_q8_0_avx512 */

static inline __m512 load16(enum kvb_dtype dt, const void *row, int32_t i, __mmask16 m) {
    if (dt == KVB_DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i));
    return _mm512_maskz_loadu_ps(m, (const float *)row + i);
}

static inline __m512 load16_full(enum kvb_dtype dt, const void *row, int32_t i) {
    if (dt == KVB_DTYPE_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)));
    return _mm512_loadu_ps((const float *)row + i);
}

static inline __mmask16 tail_mask(int32_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

/* One chunk of 16 dims of NR (1..4) query rows against 4 keys: accumulator
 * A[4*r + t] holds row r x key t. */
static inline __attribute__((always_inline)) void scores_step(enum kvb_dtype dt, int NR, const float *q, int32_t d,
                                                              const void *const *k, __m512 *A, int32_t c, __mmask16 m, bool masked) {
    __m512 k0, k1, k2, k3;
    if (masked) {
        k0 = load16(dt, k[0], c, m); k1 = load16(dt, k[1], c, m); k2 = load16(dt, k[2], c, m); k3 = load16(dt, k[3], c, m);
    } else {
        k0 = load16_full(dt, k[0], c); k1 = load16_full(dt, k[1], c); k2 = load16_full(dt, k[2], c); k3 = load16_full(dt, k[3], c);
    }
    for (int r = 0; r < NR; r++) {
        __m512 qr = masked ? _mm512_maskz_loadu_ps(m, q + (size_t)r * d + c) : _mm512_loadu_ps(q + (size_t)r * d + c);
        A[4 * r + 0] = _mm512_fmadd_ps(qr, k0, A[4 * r + 0]);
        A[4 * r + 1] = _mm512_fmadd_ps(qr, k1, A[4 * r + 1]);
        A[4 * r + 2] = _mm512_fmadd_ps(qr, k2, A[4 * r + 2]);
        A[4 * r + 3] = _mm512_fmadd_ps(qr, k3, A[4 * r + 3]);
    }
}

/* Scores of NR (1..4) query rows against 4 keys at once. Accumulator
 * A[4*r + t] holds row r x key t. kvb_reduce16_avx512 applies the same
 * tree to every vector, so handing it the accumulators key-major (A[4*t +
 * r] in its input order) changes no bit and puts row r's 4 sums in lanes
 * 4r..4r+3: one 128-bit store per row (s[r * KVB_ATTN_TILE + t], t < kt)
 * instead of a scalar scatter. Full 16-wide chunks use plain loads (masked
 * loads in the loop cost 2x). */
static inline __attribute__((always_inline)) void scores_4keys(enum kvb_dtype dt, int NR, const float *q, int32_t d,
                                                               const void *const *k, int32_t kt, float *s) {
    __m512 A[16];
    for (int i = 0; i < 16; i++) A[i] = _mm512_setzero_ps();
    int32_t c = 0;
    for (; c + 16 <= d; c += 16) scores_step(dt, NR, q, d, k, A, c, 0xffff, false);
    if (c < d) scores_step(dt, NR, q, d, k, A, c, tail_mask(d - c), true);
    __m512 T[16];
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < 4; t++) T[4 * t + r] = A[4 * r + t];
    const __m512 E = kvb_reduce16_avx512(T); /* E[4*r + t]: row r, key t */
    const __mmask8 m = (__mmask8)((1u << kt) - 1);
    _mm_mask_storeu_ps(s, m, _mm512_castps512_ps128(E));
    if (NR > 1) _mm_mask_storeu_ps(s + KVB_ATTN_TILE, m, _mm512_extractf32x4_ps(E, 1));
    if (NR > 2) _mm_mask_storeu_ps(s + 2 * KVB_ATTN_TILE, m, _mm512_extractf32x4_ps(E, 2));
    if (NR > 3) _mm_mask_storeu_ps(s + 3 * KVB_ATTN_TILE, m, _mm512_extractf32x4_ps(E, 3));
}

/* Every row group (4 at a time) against the 4 keys k (kt of them real):
 * s[r * KVB_ATTN_TILE + t] for t < kt. */
static inline __attribute__((always_inline)) void scores_rows(enum kvb_dtype dt, const float *q, int32_t n_rows, int32_t d,
                                                              const void *const *k, int32_t kt, float *s) {
    for (int32_t r0 = 0; r0 < n_rows; r0 += 4) {
        const int32_t nr = KVB_MIN(4, n_rows - r0);
        const float *qr = q + (size_t)r0 * d;
        float *sr = s + (size_t)r0 * KVB_ATTN_TILE;
        switch (nr) {
        case 4: scores_4keys(dt, 4, qr, d, k, kt, sr); break;
        case 3: scores_4keys(dt, 3, qr, d, k, kt, sr); break;
        case 2: scores_4keys(dt, 2, qr, d, k, kt, sr); break;
        default: scores_4keys(dt, 1, qr, d, k, kt, sr); break;
        }
    }
}

/* Pages hold block_size rows, so the hardware prefetcher loses the stream at
 * every page boundary. Two software prefetches stand in: each K and V row
 * PREFETCH_NEAR keys ahead (kvb_prefetch_kv_keys), and the first two lines
 * of both halves (K, V) of the page PREFETCH_FAR keys ahead, which starts
 * the L2 streamer on that page early. Against the row prefetch alone at 24
 * keys the pair is 5% faster from DRAM (docs/BENCHMARKS.md, 2026-12-03).
 * always_inline, as every prefetch helper (prefetch_kv.h). */
#define PREFETCH_NEAR 8
#define PREFETCH_FAR 32

/* The page of key j, if it is not *last: its K and V halves' first lines. */
static inline __attribute__((always_inline)) void prefetch_page_start(const struct kvb_kv_view *v, int32_t j, const uint8_t **last) {
    if (j >= v->n) return;
    const uint8_t *pg = v->pages[v->slots[j] >> v->block_shift];
    if (pg == *last) return;
    *last = pg;
    const char *kp = (const char *)pg, *vp = (const char *)pg + v->v_offset;
    _mm_prefetch(kp, _MM_HINT_T0);
    _mm_prefetch(kp + 64, _MM_HINT_T0);
    _mm_prefetch(vp, _MM_HINT_T0);
    _mm_prefetch(vp + 64, _MM_HINT_T0);
}

static inline __attribute__((always_inline)) void scores_t(const struct kvb_kv_view *v, const float *q, int32_t n_rows,
                                                           int32_t j0, int32_t nt, float *s, enum kvb_dtype dt) {
    const int32_t d = v->head_dim;
    const uint8_t *last = NULL;
    for (int32_t t0 = 0; t0 < nt; t0 += 4) {
        const int32_t kt = KVB_MIN(4, nt - t0);
        kvb_prefetch_kv_keys(v, j0 + t0 + PREFETCH_NEAR, 4);
        prefetch_page_start(v, j0 + t0 + PREFETCH_FAR, &last);
        const void *k[4];
        if (kt == 4 && kvb_view_run(v, j0 + t0, 4)) { /* adjacent rows: one page lookup */
            const uint8_t *k0 = kvb_view_k(v, j0 + t0);
            for (int32_t t = 0; t < 4; t++) k[t] = k0 + (size_t)t * v->row_bytes;
        } else {
            for (int32_t t = 0; t < 4; t++) k[t] = kvb_view_k(v, j0 + t0 + (t < kt ? t : kt - 1));
        }
        scores_rows(dt, q, n_rows, d, k, kt, s + t0);
    }
}

/* d * (q - 8): element i < 16 the low nibble of byte i, i >= 16 the high
 * nibble of byte i - 16; each 16-byte half in one step of 16. */
static void from_q4_0_avx512(const void *src, float *dst, int32_t n) {
    const uint8_t *b = src;
    const __m128i m4 = _mm_set1_epi8(0xF), k8 = _mm_set1_epi8(8);
    for (int32_t i = 0; i < n; i += 32, b += 18, dst += 32) {
        uint16_t h;
        memcpy(&h, b, 2);
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(h));
        const __m128i raw = _mm_loadu_si128((const __m128i *)(b + 2));
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, m4), k8), hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), k8);
        _mm512_storeu_ps(dst, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo))));
        _mm512_storeu_ps(dst + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi))));
    }
}

/* Quantized pages (q8_0, q4_0; d whole blocks of 32): each row is
 * dequantized once (exactly as the scalar dequantizer) into an L1 buffer,
 * which the f32 register tiles then read: 4 keys for scores, 16 V rows for
 * the accumulation. */
static inline void quant_row_f32(enum kvb_dtype dt, const void *src, float *dst, int32_t d) {
    if (dt == KVB_DTYPE_Q8_0) from_q8_0_avx512(src, dst, d);
    else from_q4_0_avx512(src, dst, d);
}

static void scores_quant(const struct kvb_kv_view *v, const float *q, int32_t n_rows, int32_t j0, int32_t nt, float *s) {
    const int32_t d = v->head_dim;
    _Alignas(64) float kf[4][KVB_ATTN_MAX_DIM];
    for (int32_t t0 = 0; t0 < nt; t0 += 4) {
        const int32_t kt = KVB_MIN(4, nt - t0);
        const void *k[4];
        for (int32_t t = 0; t < kt; t++) quant_row_f32(v->dtype, kvb_view_k(v, j0 + t0 + t), kf[t], d);
        for (int32_t t = 0; t < 4; t++) k[t] = kf[t < kt ? t : kt - 1];
        scores_rows(KVB_DTYPE_F32, q, n_rows, d, k, kt, s + t0);
    }
}

static void scores_avx512(const struct kvb_kv_view *v, const float *q, int32_t n_rows, int32_t j0, int32_t nt, float *s) {
    if (v->dtype == KVB_DTYPE_Q8_0 || v->dtype == KVB_DTYPE_Q4_0) scores_quant(v, q, n_rows, j0, nt, s);
    else if (v->dtype == KVB_DTYPE_F16) scores_t(v, q, n_rows, j0, nt, s, KVB_DTYPE_F16);
    else scores_t(v, q, n_rows, j0, nt, s, KVB_DTYPE_F32);
}

/* acc[r] += sum_t e[r][t] V[t] for NR (1..4) rows and one 64-float chunk of
 * the head dim: 4 x NR accumulators live in registers across the tile. */
static inline __attribute__((always_inline)) void accum_chunk(const struct kvb_kv_view *v, enum kvb_dtype dt, int NR,
                                                              const float *e, int32_t j0, int32_t nt, float *acc,
                                                              int32_t d, int32_t c0, bool full) {
    __mmask16 mk[4];
    __m512 a[4][4];
    for (int c = 0; c < 4; c++) {
        int32_t left = d - c0 - c * 16;
        mk[c] = left <= 0 ? (__mmask16)0 : tail_mask(left);
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < 4; c++) a[r][c] = _mm512_maskz_loadu_ps(mk[c], acc + (size_t)r * d + c0 + c * 16);
    for (int32_t t = 0; t < nt; t++) {
        const void *vr = kvb_view_v(v, j0 + t);
        __m512 vc[4];
        for (int c = 0; c < 4; c++) vc[c] = full ? load16_full(dt, vr, c0 + c * 16) : load16(dt, vr, c0 + c * 16, mk[c]);
        for (int r = 0; r < NR; r++) {
            __m512 w = _mm512_set1_ps(e[r * KVB_ATTN_TILE + t]);
            for (int c = 0; c < 4; c++) a[r][c] = _mm512_fmadd_ps(w, vc[c], a[r][c]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < 4; c++) _mm512_mask_storeu_ps(acc + (size_t)r * d + c0 + c * 16, mk[c], a[r][c]);
}

static inline __attribute__((always_inline)) void accum_t(const struct kvb_kv_view *v, const float *e, int32_t n_rows,
                                                          int32_t j0, int32_t nt, float *acc, enum kvb_dtype dt) {
    const int32_t d = kvb_view_dv(v);
    for (int32_t r0 = 0; r0 < n_rows; r0 += 4) {
        const int32_t nr = KVB_MIN(4, n_rows - r0);
        const float *er = e + r0 * KVB_ATTN_TILE;
        float *ar = acc + (size_t)r0 * d;
        for (int32_t c0 = 0; c0 < d; c0 += 64) {
            const bool full = d - c0 >= 64;
            if (full) {
                switch (nr) {
                case 4: accum_chunk(v, dt, 4, er, j0, nt, ar, d, c0, true); break;
                case 3: accum_chunk(v, dt, 3, er, j0, nt, ar, d, c0, true); break;
                case 2: accum_chunk(v, dt, 2, er, j0, nt, ar, d, c0, true); break;
                default: accum_chunk(v, dt, 1, er, j0, nt, ar, d, c0, true); break;
                }
            } else {
                switch (nr) {
                case 4: accum_chunk(v, dt, 4, er, j0, nt, ar, d, c0, false); break;
                case 3: accum_chunk(v, dt, 3, er, j0, nt, ar, d, c0, false); break;
                case 2: accum_chunk(v, dt, 2, er, j0, nt, ar, d, c0, false); break;
                default: accum_chunk(v, dt, 1, er, j0, nt, ar, d, c0, false); break;
                }
            }
        }
    }
}

#define QUANT_V_GROUP 16 /* V rows dequantized at a time: 8 KB of f32 at d = 128 */

static void accum_quant(const struct kvb_kv_view *v, const float *e, int32_t n_rows, int32_t j0, int32_t nt, float *acc) {
    static const int32_t ident[QUANT_V_GROUP] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const int32_t d = kvb_view_dv(v); /* the V rows' width: fv's rows are V rows only */
    _Alignas(64) float vf[QUANT_V_GROUP * KVB_ATTN_MAX_DIM];
    uint8_t *page = (uint8_t *)vf;
    struct kvb_kv_view fv = {&page, ident, QUANT_V_GROUP, 4, d, sizeof(float) * (size_t)d, sizeof(float) * (size_t)d, 0,
                             KVB_DTYPE_F32, KVB_DTYPE_F32, 0.0f, d};
    for (int32_t t0 = 0; t0 < nt; t0 += QUANT_V_GROUP) {
        const int32_t ng = KVB_MIN(QUANT_V_GROUP, nt - t0);
        for (int32_t u = 0; u < ng; u++) quant_row_f32(v->dtype_v, kvb_view_v(v, j0 + t0 + u), vf + (size_t)u * d, d);
        fv.n = ng;
        accum_t(&fv, e + t0, n_rows, 0, ng, acc, KVB_DTYPE_F32);
    }
}

static void accum_avx512(const struct kvb_kv_view *v, const float *e, int32_t n_rows, int32_t j0, int32_t nt, float *acc) {
    if (v->dtype_v == KVB_DTYPE_Q8_0 || v->dtype_v == KVB_DTYPE_Q4_0) accum_quant(v, e, n_rows, j0, nt, acc);
    else if (v->dtype == KVB_DTYPE_F16) accum_t(v, e, n_rows, j0, nt, acc, KVB_DTYPE_F16);
    else accum_t(v, e, n_rows, j0, nt, acc, KVB_DTYPE_F32);
}

static inline __m512 exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(88.37626f);
    __mmask16 zero = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps((__mmask16)~zero, p, n);
}

static void vexp_avx512(float *x, int32_t n) {
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, exp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* The avx512 and avx512vnni families' primitives: the same but for the
 * integer scores, AVX2's (attn_avx2.c) or a key per lane with VNNI
 * (attn_vnni.c). Both are named "avx512" (kvb_kernels_name). */
const struct kvb_kernels kvb_kernels_avx512 = {
    .quant_rows = true,
    .f16_tile_rows = 48, /* prefill blocks (64 rows): see the file's note */
    .page_bounds = kvb_page_bounds_avx2, /* bandwidth-bound: AVX2 suffices */
    .from_q8_0 = from_q8_0_avx512,
    .from_q4_0 = from_q4_0_avx512,
    .name = "avx512",
    .scores = scores_avx512,
    .scores_i8 = kvb_scores_i8_avx2,
    .accum = accum_avx512,
    .vexp = vexp_avx512,
    .to_f16 = to_f16_avx512,
    .from_f16 = from_f16_avx512,
};

const struct kvb_kernels kvb_kernels_avx512vnni = {
    .quant_rows = true,
    .f16_tile_rows = 48,
    .page_bounds = kvb_page_bounds_avx2,
    .from_q8_0 = from_q8_0_avx512,
    .from_q4_0 = from_q4_0_avx512,
    .name = "avx512",
    .scores = scores_avx512,
    .scores_i8 = kvb_scores_i8_vnni,
    .accum = accum_avx512,
    .vexp = vexp_avx512,
    .to_f16 = to_f16_avx512,
    .from_f16 = from_f16_avx512,
};

/* dot_avx2.c — AVX2 + FMA + F16C dot products of every weight type (8-wide
 * versions of dot_avx512.c; scalar tail for f32/f16/bf16). The q8_0 and
 * q6_K dots with f32 activations are dot_width.h's bodies at 8 lanes
 * (AVX-512 has them at 16); the others differ from AVX-512's in more than
 * width (accumulators, tails, prefetch, integer schemes). The K-quant
 * integer dots have tiles (kq_tile) for batched decode: 4 tokens share one
 * unpacking of each weight block, each pair keeping the lone dot's bits. */
#include "../matmul.h"
#include "../quant.h"

#include "prefetch.h"
#include "kquant_block.h"
#include "x86_kernels.h"

#include <immintrin.h>
#include <string.h>

#define KVB_W 8
#include "dot_width.h" /* dot_q8_0_avx2, dot_q6_K_avx2; kvb_hsum8 */

/* The f32 dot keeps one accumulator over steps of 8, then the scalar tail
 * (f32 weights are rare and memory-bound in decode). */
static float dot_f32_avx2(const void *row, const float *x, int64_t n) {
    const float *w = row;
    __m256 a0 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    float s = kvb_hsum8(a0);
    for (; i < n; i++) s += w[i] * x[i];
    return s;
}

static float dot_f16_avx2(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) { /* a cache line of weights per step, prefetched 1 KB ahead */
        prefetch_ahead(w + i, 64);
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i))), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8))), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 16))), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 24))), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i))), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8))), _mm256_loadu_ps(x + i + 8), a1);
    }
    float s = kvb_hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) s += kvb_f16_to_f32(w[i]) * x[i];
    return s;
}

static float dot_bf16_avx2(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    __m256 a0 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + i))), 16));
        a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), a0);
    }
    float s = kvb_hsum8(a0);
    for (; i < n; i++) s += kvb_bf16_to_f32(w[i]) * x[i];
    return s;
}

/* The prefill micro-kernel (matmul.h, kvb_panel_fn): 16 of the panel's
 * rows in two vectors times up to 6 tokens, 12 accumulators (with the two
 * weight vectors and a broadcast, 15 of the 16 registers); the panel's two
 * halves are separate passes. Each lane is the contract's single FMA chain.
 *
 * The chain is cut into blocks of PANEL_KC k's, and every tile of a group of
 * PANEL_TG tokens passes over a block before the next: a half's block
 * (16 rows x 256 k's, 16 KB) stays in L1 while the group's tiles read it,
 * where one tile's pass over the whole panel (32 x n floats: 720 KB for
 * TinyLlama's down projection, past Zen 3's 512 KB L2) streamed it from L3
 * for every tile. Between blocks a tile's accumulators wait in acc (f32, as
 * in the registers), so each pair is the same chain and the same bits. */
#define TILE_TOKENS 6
#define PANEL_KC 256
#define PANEL_TG 96 /* tokens of a group (a multiple of TILE_TOKENS): acc is 12 KB */
static inline __attribute__((always_inline)) void panel_tile(const float *wp, int64_t n, const float *x, int64_t ldx, float *acc,
                                                             bool first, const int NT) {
    __m256 a0[TILE_TOKENS], a1[TILE_TOKENS];
    for (int t = 0; t < NT; t++) {
        a0[t] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + t * KVB_PANEL_ROWS);
        a1[t] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + t * KVB_PANEL_ROWS + 8);
    }
    for (int64_t k = 0; k < n; k++) {
        const __m256 w0 = _mm256_loadu_ps(wp + k * KVB_PANEL_ROWS), w1 = _mm256_loadu_ps(wp + k * KVB_PANEL_ROWS + 8);
        for (int t = 0; t < NT; t++) {
            const __m256 b = _mm256_broadcast_ss(x + t * ldx + k);
            a0[t] = _mm256_fmadd_ps(w0, b, a0[t]);
            a1[t] = _mm256_fmadd_ps(w1, b, a1[t]);
        }
    }
    for (int t = 0; t < NT; t++) {
        _mm256_storeu_ps(acc + t * KVB_PANEL_ROWS, a0[t]);
        _mm256_storeu_ps(acc + t * KVB_PANEL_ROWS + 8, a1[t]);
    }
}

/* The full tile with every accumulator named (GCC spills the arrays of
 * panel_tile at this size): the same operations in the same order. Its
 * offsets into acc are token t's at t * 32. */
_Static_assert(KVB_PANEL_ROWS == 32, "panel_tile6's accumulator offsets assume 32-row panels");
static void panel_tile6(const float *wp, int64_t n, const float *x, int64_t ldx, float *acc, bool first) {
    __m256 a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51;
    if (first) {
        a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = a40 = a41 = a50 = a51 = _mm256_setzero_ps();
    } else {
        a00 = _mm256_loadu_ps(acc), a01 = _mm256_loadu_ps(acc + 8);
        a10 = _mm256_loadu_ps(acc + 32), a11 = _mm256_loadu_ps(acc + 40);
        a20 = _mm256_loadu_ps(acc + 64), a21 = _mm256_loadu_ps(acc + 72);
        a30 = _mm256_loadu_ps(acc + 96), a31 = _mm256_loadu_ps(acc + 104);
        a40 = _mm256_loadu_ps(acc + 128), a41 = _mm256_loadu_ps(acc + 136);
        a50 = _mm256_loadu_ps(acc + 160), a51 = _mm256_loadu_ps(acc + 168);
    }
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx, *x4 = x + 4 * ldx, *x5 = x + 5 * ldx;
    for (int64_t k = 0; k < n; k++) {
        const __m256 w0 = _mm256_loadu_ps(wp + k * KVB_PANEL_ROWS), w1 = _mm256_loadu_ps(wp + k * KVB_PANEL_ROWS + 8);
        __m256 b = _mm256_broadcast_ss(x0 + k);
        a00 = _mm256_fmadd_ps(w0, b, a00);
        a01 = _mm256_fmadd_ps(w1, b, a01);
        b = _mm256_broadcast_ss(x1 + k);
        a10 = _mm256_fmadd_ps(w0, b, a10);
        a11 = _mm256_fmadd_ps(w1, b, a11);
        b = _mm256_broadcast_ss(x2 + k);
        a20 = _mm256_fmadd_ps(w0, b, a20);
        a21 = _mm256_fmadd_ps(w1, b, a21);
        b = _mm256_broadcast_ss(x3 + k);
        a30 = _mm256_fmadd_ps(w0, b, a30);
        a31 = _mm256_fmadd_ps(w1, b, a31);
        b = _mm256_broadcast_ss(x4 + k);
        a40 = _mm256_fmadd_ps(w0, b, a40);
        a41 = _mm256_fmadd_ps(w1, b, a41);
        b = _mm256_broadcast_ss(x5 + k);
        a50 = _mm256_fmadd_ps(w0, b, a50);
        a51 = _mm256_fmadd_ps(w1, b, a51);
    }
    _mm256_storeu_ps(acc, a00), _mm256_storeu_ps(acc + 8, a01);
    _mm256_storeu_ps(acc + 32, a10), _mm256_storeu_ps(acc + 40, a11);
    _mm256_storeu_ps(acc + 64, a20), _mm256_storeu_ps(acc + 72, a21);
    _mm256_storeu_ps(acc + 96, a30), _mm256_storeu_ps(acc + 104, a31);
    _mm256_storeu_ps(acc + 128, a40), _mm256_storeu_ps(acc + 136, a41);
    _mm256_storeu_ps(acc + 160, a50), _mm256_storeu_ps(acc + 168, a51);
}

static void panel_avx2(const float *wp, int64_t n, const float *x, int64_t ldx, int nt, float *y, int64_t ldy, int nr) {
    _Alignas(32) float acc[PANEL_TG * KVB_PANEL_ROWS]; /* acc[t * 32 + r]: token t of the group, row r */
    if (n <= 0) { /* an empty chain is 0, as the reference's */
        for (int t = 0; t < nt; t++) memset(y + (int64_t)t * ldy, 0, sizeof(float) * (size_t)nr);
        return;
    }
    for (int g = 0; g < nt; g += PANEL_TG) {
        const int ng = nt - g < PANEL_TG ? nt - g : PANEL_TG;
        const float *xg = x + (int64_t)g * ldx;
        for (int64_t k0 = 0; k0 < n; k0 += PANEL_KC) {
            const int64_t kn = n - k0 < PANEL_KC ? n - k0 : PANEL_KC;
            const bool first = k0 == 0;
            for (int h = 0; h < KVB_PANEL_ROWS && h < nr; h += 16) {
                const float *wk = wp + k0 * KVB_PANEL_ROWS + h;
                int t = 0;
                for (; t + TILE_TOKENS <= ng; t += TILE_TOKENS) panel_tile6(wk, kn, xg + t * ldx + k0, ldx, acc + t * KVB_PANEL_ROWS + h, first);
                switch (ng - t) { /* constant shapes: the accumulators stay in registers */
#define TAIL(T) case T: panel_tile(wk, kn, xg + t * ldx + k0, ldx, acc + t * KVB_PANEL_ROWS + h, first, T); break;
                TAIL(1) TAIL(2) TAIL(3) TAIL(4) TAIL(5)
#undef TAIL
                default: break;
                }
            }
        }
        for (int t = 0; t < ng; t++) memcpy(y + (int64_t)(g + t) * ldy, acc + t * KVB_PANEL_ROWS, sizeof(float) * (size_t)nr);
    }
}

/* Packing a panel (matmul.h, kvb_pack_fn): 8 rows x 8 columns at a time,
 * loaded as 8 vectors (f16 through vcvtph2ps, bf16 by a shift, f32 as is;
 * other types from rows kvb_dequantize_row wrote to scratch), transposed
 * in registers (unpack, shuffle, 128-bit permute) and stored as 8 columns
 * of the k-major panel. The values are those of kvb_dequantize_row. */
static inline __attribute__((always_inline)) void transpose8(__m256 v[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        v[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

static inline __attribute__((always_inline)) __m256 load8_as(const void *src, int64_t k, const uint32_t form) {
    if (form == GGML_TYPE_F32) return _mm256_loadu_ps((const float *)src + k);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + k));
    if (form == GGML_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) float load1_as(const void *src, int64_t k, const uint32_t form) {
    if (form == GGML_TYPE_F32) return ((const float *)src)[k];
    if (form == GGML_TYPE_F16) return kvb_f16_to_f32(((const uint16_t *)src)[k]);
    return kvb_bf16_to_f32(((const uint16_t *)src)[k]);
}

/* 8 rows (src[i], NULL: zero) into columns g .. g + 7 of the panel. */
static inline __attribute__((always_inline)) void pack8_as(const void *const src[8], int64_t n, float *wp, int g, const uint32_t form) {
    const int esz = form == GGML_TYPE_F32 ? 4 : 2;
    const bool full = src[7] != NULL; /* rows are filled from the first */
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 v[8];
        if ((k & 31) == 0) /* the weights stream in: 1 KB ahead */
            for (int i = 0; i < 8; i++)
                if (full || src[i]) _mm_prefetch((const char *)src[i] + (k + 1024 / esz) * esz, _MM_HINT_T0);
        for (int i = 0; i < 8; i++) v[i] = full || src[i] ? load8_as(src[i], k, form) : _mm256_setzero_ps();
        transpose8(v);
        for (int j = 0; j < 8; j++) _mm256_storeu_ps(wp + (size_t)(k + j) * KVB_PANEL_ROWS + g, v[j]);
    }
    for (; k < n; k++)
        for (int i = 0; i < 8; i++) wp[(size_t)k * KVB_PANEL_ROWS + g + i] = src[i] ? load1_as(src[i], k, form) : 0.0f;
}

void kvb_pack_panel_avx2(const struct kvb_mat *w, int64_t r0, int nr, float *wp, float *scratch) {
    const int64_t n = w->n_in;
    const uint32_t type = w->type;
    const bool direct = type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16;
    for (int g = 0; g < KVB_PANEL_ROWS; g += 8) {
        const int gr = nr - g < 0 ? 0 : nr - g > 8 ? 8 : nr - g;
        const void *src[8] = {0};
        for (int i = 0; i < gr; i++) {
            const uint8_t *row = w->data + (size_t)(r0 + g + i) * w->row_bytes;
            if (direct) src[i] = row;
            else {
                kvb_dequantize_row(type, row, scratch + (size_t)i * (size_t)n, n);
                src[i] = scratch + (size_t)i * (size_t)n;
            }
        }
        const uint32_t form = direct ? type : GGML_TYPE_F32;
        if (form == GGML_TYPE_F16) pack8_as(src, n, wp, g, GGML_TYPE_F16);
        else if (form == GGML_TYPE_BF16) pack8_as(src, n, wp, g, GGML_TYPE_BF16);
        else pack8_as(src, n, wp, g, GGML_TYPE_F32);
    }
}

static float dot_q4_0_avx2(const void *row, const float *x, int64_t n) {
    const struct block_q4_0 *b = row;
    const __m256i lo4 = _mm256_set1_epi32(0xF), eight = _mm256_set1_epi32(8);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        __m256 p = _mm256_setzero_ps();
        for (int h = 0; h < 16; h += 8) {
            __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b[i].qs + h)));
            __m256 lo = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(q, lo4), eight));
            __m256 hi = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight));
            p = _mm256_fmadd_ps(lo, _mm256_loadu_ps(x + h), p);
            p = _mm256_fmadd_ps(hi, _mm256_loadu_ps(x + 16 + h), p);
        }
        acc = _mm256_fmadd_ps(p, _mm256_set1_ps(kvb_f16_to_f32(b[i].d)), acc);
    }
    return kvb_hsum8(acc);
}

static float dot_q4_K_avx2(const void *row, const float *x, int64_t n) {
    const struct block_q4_K *b = row;
    const __m256i lo4 = _mm256_set1_epi32(0xF);
    float total = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = kvb_f16_to_f32(b[i].d), dmin = kvb_f16_to_f32(b[i].dmin);
        __m256 acc = _mm256_setzero_ps();
        const uint8_t *q = b[i].qs;
        for (int j = 0; j < 4; j++, q += 32, x += 64) {
            uint8_t s1, m1, s2, m2;
            kvb_q4k_scale_min(2 * j, b[i].scales, &s1, &m1);
            kvb_q4k_scale_min(2 * j + 1, b[i].scales, &s2, &m2);
            const __m256 sc1 = _mm256_set1_ps(d * s1), sc2 = _mm256_set1_ps(d * s2);
            const __m256 mn1 = _mm256_set1_ps(dmin * m1), mn2 = _mm256_set1_ps(dmin * m2);
            for (int h = 0; h < 32; h += 8) {
                __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + h)));
                __m256 wl = _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, lo4)), sc1, mn1);
                __m256 wh = _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)), sc2, mn2);
                acc = _mm256_fmadd_ps(wl, _mm256_loadu_ps(x + h), acc);
                acc = _mm256_fmadd_ps(wh, _mm256_loadu_ps(x + 32 + h), acc);
            }
        }
        total += kvb_hsum8(acc);
    }
    return total;
}

/* The integer dots and tiles (kvb_dot_*_q8_avx2, kvb_q8_tile_avx2,
 * kvb_q*_K_tile_avx2) with AVX2's integer steps; dot_avxvnni.c builds the same
 * bodies with AVX-VNNI's. */
#define KVB_I8FN(name) name##_avx2
#define KVB_I8_TILE_STORAGE static
#define I8_SUM4(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
#define I16_ADD2(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#define I16_ADD2X2(acc, a, b, c, d) _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(a, b), _mm256_madd_epi16(c, d)))
#include "dot_i8_avx2.h"

/* kvb_quant_block_fn (the reference's bits): the amax by max_ps, which keeps
 * its second operand when the first is NaN (the reference skips NaNs the
 * same way; the order of a max does not matter); cvtps_epi32 rounds in
 * MXCSR's mode as lrintf does; the int8 is the low byte of the int32
 * (a NaN's 0x80000000 gives 0, as the reference's NaN rule). */
static void quant_block_avx2(const float *x, int len, float *d, int8_t *q) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < len; i += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), magnitude), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    const float amax = _mm_cvtss_f32(h);
    const float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0.0f;
    *d = s;
    const __m256 vinv = _mm256_set1_ps(inv);
    /* the low byte of each int32 to byte 4k + j of its 128-bit lane, for the
     * k-th of four vectors; then the dwords back in element order */
    const __m256i low0 = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int i = 0; i < len; i += 32) {
        const __m256i v0 = _mm256_shuffle_epi8(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv)), low0);
        const __m256i v1 = _mm256_shuffle_epi8(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), vinv)), low0);
        const __m256i v2 = _mm256_shuffle_epi8(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 16), vinv)), low0);
        const __m256i v3 = _mm256_shuffle_epi8(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 24), vinv)), low0);
        const __m256i b = _mm256_or_si256(_mm256_or_si256(v0, _mm256_slli_si256(v1, 4)), _mm256_or_si256(_mm256_slli_si256(v2, 8), _mm256_slli_si256(v3, 12)));
        _mm256_storeu_si256((__m256i *)(q + i), _mm256_permutevar8x32_epi32(b, order));
    }
}

/* The avx2 and avxvnni families' tables: the same kernels but for the
 * integer dots and tiles (dot_i8_avx2.h), which each family builds with its
 * own integer steps (ISA: avx2, or avxvnni from dot_avxvnni.c). avxvnni is
 * for the Intel client CPUs since Alder Lake and Zen 5; its bits are avx2's. */
#define AVX2_DOT_TABLE(NAME, ISA)                                                                                                        \
    {                                                                                                                                  \
        .name = NAME, .panel = panel_avx2, .pack = kvb_pack_panel_avx2,                                                                \
        .dot_q8 = {                                                                                                                    \
            [GGML_TYPE_Q8_0] = kvb_dot_q8_0_q8_##ISA, [GGML_TYPE_Q4_0] = kvb_dot_q4_0_q8_##ISA, [GGML_TYPE_Q5_0] = kvb_dot_q5_0_q8_##ISA, \
            [GGML_TYPE_Q4_1] = kvb_dot_q4_1_q8_##ISA, [GGML_TYPE_Q5_1] = kvb_dot_q5_1_q8_##ISA,                                          \
            [GGML_TYPE_IQ4_NL] = kvb_dot_iq4_nl_q8_##ISA, [GGML_TYPE_IQ4_XS] = kvb_dot_iq4_xs_q8_##ISA,                                  \
            [GGML_TYPE_MXFP4] = kvb_dot_mxfp4_q8_##ISA, [GGML_TYPE_Q4_K] = kvb_dot_q4_K_q8_##ISA, [GGML_TYPE_Q5_K] = kvb_dot_q5_K_q8_##ISA, \
            [GGML_TYPE_Q6_K] = kvb_dot_q6_K_q8_##ISA,                                                                                  \
        },                                                                                                                             \
        .q8_tile = kvb_q8_tile_##ISA, .q8_tile_rows = 4, .q8_tile_rows_one = 1, .q8_tile_tokens = 2,                                   \
        .kq_tile = {[GGML_TYPE_Q4_K] = kvb_q4_K_tile_##ISA, [GGML_TYPE_Q5_K] = kvb_q5_K_tile_##ISA, [GGML_TYPE_Q6_K] = kvb_q6_K_tile_##ISA}, \
        .kq_tile_rows = 4, .kq_tile_tokens = KQ_TILE_TOKENS,                                                                           \
        /* Q8_0 and K-quant prompts through the int8 tiles: as fast as the f32 panels at 256-token chunks, Q4_K_M 5.7x at 4       \
         * (Zen 4, forced, 2026-12-07; docs/BENCHMARKS.md, "AVX2's K-quant prompts"): a stall-free step's few rows cost their own */ \
        .q8_tile_prompts = true, .kq_tile_prompts = true, .quant_block = quant_block_avx2,                                           \
        .dot = {                                                                                                                       \
            [GGML_TYPE_F32] = dot_f32_avx2, [GGML_TYPE_F16] = dot_f16_avx2, [GGML_TYPE_BF16] = dot_bf16_avx2,                          \
            [GGML_TYPE_Q8_0] = dot_q8_0_avx2, [GGML_TYPE_Q4_0] = dot_q4_0_avx2, [GGML_TYPE_Q5_0] = kvb_dot_q5_0_ref,                   \
            [GGML_TYPE_Q4_1] = kvb_dot_q4_1_ref, [GGML_TYPE_Q5_1] = kvb_dot_q5_1_ref,                                                  \
            [GGML_TYPE_IQ4_NL] = kvb_dot_iq4_nl_ref, [GGML_TYPE_IQ4_XS] = kvb_dot_iq4_xs_ref, [GGML_TYPE_MXFP4] = kvb_dot_mxfp4_ref,    \
            [GGML_TYPE_Q4_K] = dot_q4_K_avx2, [GGML_TYPE_Q5_K] = kvb_dot_q5_K_ref, [GGML_TYPE_Q6_K] = dot_q6_K_avx2,                   \
        },                                                                                                                             \
    }
const struct kvb_dot_kernels kvb_dot_avx2 = AVX2_DOT_TABLE("avx2", avx2);
const struct kvb_dot_kernels kvb_dot_avxvnni = AVX2_DOT_TABLE("avxvnni", avxvnni);
#undef AVX2_DOT_TABLE

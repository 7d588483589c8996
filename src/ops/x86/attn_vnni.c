/*
 * attn_vnni.c — scores of int8 query rows against q8_0/q4_0 keys with
 * AVX-512 VNNI (vpdpbusd: u8 x s8 -> s32), a key per lane: the weight
 * tile's scheme (dot_vnni.c) with keys for weight rows and query heads for
 * tokens.
 *
 * Keys go 16 at a time. Per 32-element block, the 16 keys' codes (q4_0's
 * nibbles unpacked to bytes first) are transposed in registers so that
 * register k holds bytes 4k..4k+3 of every key, lane j key j, and made
 * unsigned: q8_0's code + 128 (an xor), q4_0's nibble as it is (code + 8).
 * They wait in an L1 buffer with the keys' 16 scales while every query row
 * takes, per block, eight vpdpbusd against its own four bytes broadcast,
 * starting from -128 (or -8) times the row's block sum, so that lane j holds
 * exactly the block's integer dot with key j; one conversion, one multiply
 * (d_k * d_q) and one FMA then add the block to the row's 16 scores. That is
 * the reference's chain bit for bit (attn_ref.c), no horizontal sum is
 * taken, and the result is already the driver's s[row][key] layout.
 *
 * Compiled with -mavx512vnni; the avx512vnni family's scores_i8
 * (kvb_kernels_avx512vnni, attn_avx512.c), which dispatch.c chooses only
 * when CPUID reports AVX512_VNNI.
 */
#include "../ops.h"

#include "prefetch_kv.h"
#include "transpose_avx512.h"
#include "x86_kernels.h"

#include <immintrin.h>

#define GROUP 16         /* keys per lane group */
#define ROWS_AT_ONCE 8   /* query rows whose dependent chains run together */
#define PREFETCH_KEYS 32 /* K and V rows are fetched this many keys ahead */

struct keys16 {
    __m512i z[KVB_ATTN_MAX_DIM / 32][8]; /* per block: dword k of the 16 keys, unsigned */
    __m512 dk[KVB_ATTN_MAX_DIM / 32];    /* per block: the 16 keys' scales */
};

/* A q4_0 block's 16 bytes as its 32 nibbles in element order (elements
 * 0-15 the low nibbles, 16-31 the high ones), one per byte. */
static inline __m256i q4_nibbles(const uint8_t *qs) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(0xF);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(raw, m4)), _mm_and_si128(_mm_srli_epi16(raw, 4), m4), 1);
}

static void load_keys(const uint8_t *const kp[GROUP], bool q8, int32_t nb, struct keys16 *K) {
    const size_t bsz = q8 ? 34 : 18;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int32_t b = 0; b < nb; b++) {
        const size_t bo = (size_t)b * bsz;
        __m512i z[8];
        for (int j = 0; j < 8; j++) {
            const __m256i lo = q8 ? _mm256_loadu_si256((const __m256i *)(kp[j] + bo + 2)) : q4_nibbles(kp[j] + bo + 2);
            const __m256i hi = q8 ? _mm256_loadu_si256((const __m256i *)(kp[j + 8] + bo + 2)) : q4_nibbles(kp[j + 8] + bo + 2);
            z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
        kvb_transpose_8x8_halves(z);
        for (int k = 0; k < 8; k++) K->z[b][k] = q8 ? _mm512_xor_si512(z[k], flip) : z[k];
        _Alignas(32) uint16_t h[GROUP];
        for (int j = 0; j < GROUP; j++) memcpy(&h[j], kp[j] + bo, sizeof h[j]);
        K->dk[b] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)h));
    }
}

/* Rows r0 .. r0 + NR - 1 against the 16 keys: their scores (lanes in m) at
 * s[r * KVB_ATTN_TILE]. */
static inline __attribute__((always_inline)) void rows_fixed(const struct keys16 *K, int32_t nb, int32_t d, const struct kvb_q8_rows *q,
                                                             int32_t r0, const int NR, int32_t off, __mmask16 m, float *s) {
    __m512 acc[ROWS_AT_ONCE];
    for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();
    for (int32_t b = 0; b < nb; b++) {
        __m512i si[ROWS_AT_ONCE];
        for (int r = 0; r < NR; r++) si[r] = _mm512_set1_epi32(-off * (int32_t)q->s[(size_t)(r0 + r) * nb + b]);
        for (int k = 0; k < 8; k++) {
            const __m512i z = K->z[b][k];
            for (int r = 0; r < NR; r++) {
                int32_t four;
                memcpy(&four, q->q + (size_t)(r0 + r) * d + b * 32 + 4 * k, sizeof four);
                si[r] = _mm512_dpbusd_epi32(si[r], z, _mm512_set1_epi32(four));
            }
        }
        for (int r = 0; r < NR; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si[r]), _mm512_mul_ps(K->dk[b], _mm512_set1_ps(q->d[(size_t)(r0 + r) * nb + b])),
                                     acc[r]);
    }
    for (int r = 0; r < NR; r++) _mm512_mask_storeu_ps(s + (size_t)(r0 + r) * KVB_ATTN_TILE, m, acc[r]);
}

void kvb_scores_i8_vnni(const struct kvb_kv_view *v, const struct kvb_q8_rows *q, int32_t n_rows, int32_t j0, int32_t nt, float *s) {
    const int32_t d = v->head_dim, nb = d / 32;
    const bool q8 = v->dtype == KVB_DTYPE_Q8_0;
    const int32_t off = q8 ? 128 : 8;
    struct keys16 K;
    for (int32_t t0 = 0; t0 < nt; t0 += GROUP) {
        const int32_t kt = KVB_MIN(GROUP, nt - t0);
        for (int32_t t = 0; t < GROUP; t += 4) kvb_prefetch_kv_keys(v, j0 + t0 + t + PREFETCH_KEYS, 4);
        const uint8_t *kp[GROUP]; /* lanes past kt repeat the last key and are not stored */
        for (int j = 0; j < GROUP; j++) kp[j] = kvb_view_k(v, j0 + t0 + (j < kt ? j : kt - 1));
        load_keys(kp, q8, nb, &K);
        const __mmask16 m = (__mmask16)(kt == GROUP ? 0xffffu : (1u << kt) - 1u);
        float *st = s + t0;
        for (int32_t r0 = 0; r0 < n_rows; r0 += ROWS_AT_ONCE) {
            switch (KVB_MIN(ROWS_AT_ONCE, n_rows - r0)) {
            case 8: rows_fixed(&K, nb, d, q, r0, 8, off, m, st); break;
            case 7: rows_fixed(&K, nb, d, q, r0, 7, off, m, st); break;
            case 6: rows_fixed(&K, nb, d, q, r0, 6, off, m, st); break;
            case 5: rows_fixed(&K, nb, d, q, r0, 5, off, m, st); break;
            case 4: rows_fixed(&K, nb, d, q, r0, 4, off, m, st); break;
            case 3: rows_fixed(&K, nb, d, q, r0, 3, off, m, st); break;
            case 2: rows_fixed(&K, nb, d, q, r0, 2, off, m, st); break;
            default: rows_fixed(&K, nb, d, q, r0, 1, off, m, st); break;
            }
        }
    }
}

/*
 * attn_i8_avx2.h — the 256-bit integer attention scores (q8_0 / q4_0 keys
 * against int8 query rows: the scores_i8 contract, ops.h), written once for
 * the avx2 family (attn_avx2.c, vpmaddubsw + vpmaddwd) and the avxvnni
 * family (attn_avxvnni.c, vpdpbusd). The includer defines KVB_I8FN(name)
 * and I8_SUM4(u, s) as dot_i8_avx2.h describes, and PREFETCH_AHEAD_I8.
 */
#ifndef KVB_X86_ATTN_I8_AVX2_H
#define KVB_X86_ATTN_I8_AVX2_H

#include "../ops.h"
#include "prefetch_kv.h"

#include <immintrin.h>
#include <string.h>

/* Lane i: the sum of p[i]'s eight int32 (exact; integer sums in any order). */
static inline __m256i sum8_epi32(const __m256i p[8]) {
    const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* Integer scores (the scores_i8 contract, ops.h), a key at a time and up to
 * eight query rows per pass: per block the key's 32 codes are read once,
 * their magnitudes multiplied with each row's codes carrying the key's
 * signs (vpmaddubsw: |k| <= 128 and |q| <= 127, so no pair saturates), the
 * eight rows' block sums reduced together, and each row's chain takes one
 * FMA of 8 lanes. Also the avx512 family's (avx512vnni's are attn_vnni.c's);
 * the avxvnni family's is this body with vpdpbusd (attn_avxvnni.c): the
 * same integers, so the same bits. */
void KVB_I8FN(kvb_scores_i8)(const struct kvb_kv_view *v, const struct kvb_q8_rows *q, int32_t n_rows, int32_t j0, int32_t nt, float *s) {
    const int32_t d = v->head_dim, nb = d / 32;
    const bool q8 = v->dtype == KVB_DTYPE_Q8_0;
    _Alignas(32) float dqt[KVB_ATTN_MAX_DIM / 32][KVB_ATTN_MAX_ROWS + 8]; /* [block][row]: the rows' scales, 8 at a load */
    for (int32_t b = 0; b < nb; b++)
        for (int32_t r = 0; r < n_rows + 8; r++) dqt[b][r] = r < n_rows ? q->d[(size_t)r * nb + b] : 0.0f;
    const __m256i m4 = _mm256_set1_epi8(0xF), k8 = _mm256_set1_epi8(8);
    for (int32_t t = 0; t < nt; t++) {
        const uint8_t *k = kvb_view_k(v, j0 + t);
        kvb_prefetch_kv_rows(v, j0 + t + PREFETCH_AHEAD_I8);
        for (int32_t r0 = 0; r0 < n_rows; r0 += 8) {
            const int32_t nr = KVB_MIN(8, n_rows - r0);
            __m256 acc = _mm256_setzero_ps();
            for (int32_t b = 0; b < nb; b++) {
                __m256i kc;
                uint16_t h;
                if (q8) {
                    const uint8_t *blk = k + (size_t)b * 34;
                    memcpy(&h, blk, sizeof h);
                    kc = _mm256_loadu_si256((const __m256i *)(blk + 2));
                } else {
                    const uint8_t *blk = k + (size_t)b * 18;
                    memcpy(&h, blk, sizeof h);
                    const __m128i raw = _mm_loadu_si128((const __m128i *)(blk + 2));
                    const __m256i two = _mm256_inserti128_si256(_mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1);
                    kc = _mm256_sub_epi8(_mm256_and_si256(two, m4), k8);
                }
                const __m256i ak = _mm256_abs_epi8(kc);
                __m256i p[8];
                for (int i = 0; i < 8; i++) {
                    if (i >= nr) {
                        p[i] = _mm256_setzero_si256();
                        continue;
                    }
                    const __m256i qc = _mm256_loadu_si256((const __m256i *)(q->q + (size_t)(r0 + i) * d + b * 32));
                    p[i] = I8_SUM4(ak, _mm256_sign_epi8(qc, kc));
                }
                const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h)), _mm256_loadu_ps(&dqt[b][r0]));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum8_epi32(p)), scale, acc);
            }
            _Alignas(32) float out[8];
            _mm256_store_ps(out, acc);
            for (int32_t i = 0; i < nr; i++) s[(size_t)(r0 + i) * KVB_ATTN_TILE + t] = out[i];
        }
    }
}

#endif

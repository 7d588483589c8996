/*
 * attn_avxvnni.c — the avxvnni family's integer attention scores:
 * attn_i8_avx2.h's body with one vpdpbusd where AVX2 takes vpmaddubsw and
 * vpmaddwd (|k| <= 128 and |q| <= 127: no AVX2 pair saturates, so the
 * integers and the bits are avx2's). Compiled with -mavxvnni; named by
 * kvb_kernels_avxvnni (attn_avx2.c).
 */
#include "x86_kernels.h"

#include <immintrin.h>

#define PREFETCH_AHEAD_I8 16 /* as attn_avx2.c */
#define KVB_I8FN(name) name##_avxvnni
#define I8_SUM4(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s)
#include "attn_i8_avx2.h" /* kvb_scores_i8_avxvnni */

/*
 * dot_avxvnni.c — the integer dots and tiles of the avxvnni family:
 * dot_i8_avx2.h's bodies with AVX-VNNI's 256-bit integer steps (Intel
 * client CPUs since Alder Lake, and AMD Zen 5, where AVX-512 is absent or
 * off). Where AVX2 spends vpmaddubsw + vpmaddwd (+ vpaddd) on four u8 x s8
 * products per int32 lane, vpdpbusd does it in one instruction, and
 * vpdpwssd folds the K-quants' scale madd into its add. The integers are
 * the same (no AVX2 pair saturates: dot_i8_avx2.h), so the family keeps
 * avx2's bits. Compiled with -mavxvnni; dispatch.c chooses the family
 * only when CPUID reports AVX-VNNI (leaf 7, subleaf 1, EAX bit 4), and
 * KVB_KERNELS=avxvnni forces it. Its table is kvb_dot_avxvnni
 * (dot_avx2.c), with avx2's float kernels.
 */
#include "x86_kernels.h"

#include <immintrin.h>

#define KVB_W 8
#include "simd_width.h" /* kvb_hsum8 */

#define KVB_I8FN(name) name##_avxvnni
#define KVB_I8_TILE_STORAGE
#define I8_SUM4(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s)
#define I16_ADD2(acc, a, b) _mm256_dpwssd_avx_epi32(acc, a, b)
#define I16_ADD2X2(acc, a, b, c, d) _mm256_dpwssd_avx_epi32(_mm256_dpwssd_avx_epi32(acc, a, b), c, d)
#include "dot_i8_avx2.h"

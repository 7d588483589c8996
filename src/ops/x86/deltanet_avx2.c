/*
 * deltanet_avx2.c — the Gated DeltaNet kernels at 8 lanes (AVX2 + FMA):
 * deltanet_width.h's bodies, the table kvb_gdn_avx2. Compiled with -mavx2
 * -mfma -mf16c -ffp-contract=off; only run after dispatch.c's check.
 */
#include "../deltanet.h"

#define KVB_W 8
#include "deltanet_width.h"

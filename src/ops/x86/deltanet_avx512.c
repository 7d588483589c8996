/*
 * deltanet_avx512.c — the Gated DeltaNet kernels at 16 lanes (AVX-512 F;
 * masked tails): deltanet_width.h's bodies, the table kvb_gdn_avx512 (the
 * avx512 and avx512vnni families). Compiled with -mavx512f -mavx512bw
 * -mavx512vl -mavx2 -mfma -mf16c -ffp-contract=off; only run after
 * dispatch.c's check.
 */
#include "../deltanet.h"

#define KVB_W 16
#include "deltanet_width.h"

/*
 * dispatch.c — picks the kernel family once: avx512 if the CPU has F, BW, VL
 * and F16C; else avx2 with FMA and F16C; else the scalar reference.
 * KVB_REF=1 forces the reference; KVB_KERNELS=avx2 caps the choice (tests use
 * it to compare every family available on the machine).
 */
#include "ops.h"

#include <stdlib.h>

static const struct kvb_kernels *g_kernels;

static const struct kvb_kernels *choose(void) {
    const char *ref = getenv("KVB_REF");
    if (ref && ref[0] && strcmp(ref, "0") != 0) return &kvb_kernels_ref;
#if defined(__x86_64__) && defined(__GNUC__)
    const char *cap = getenv("KVB_KERNELS");
    __builtin_cpu_init();
    bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    bool has_avx512 = has_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl");
    if (cap && strcmp(cap, "ref") == 0) return &kvb_kernels_ref;
    if (has_avx512 && !(cap && strcmp(cap, "avx2") == 0)) return &kvb_kernels_avx512;
    if (has_avx2) return &kvb_kernels_avx2;
#endif
    return &kvb_kernels_ref;
}

const struct kvb_kernels *kvb_kernels(void) {
    if (!g_kernels) g_kernels = choose(); /* idempotent: a race writes the same pointer */
    return g_kernels;
}

const char *kvb_kernels_name(void) { return kvb_kernels()->name; }

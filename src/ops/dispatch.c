/*
 * dispatch.c — picks the kernel family once: avx512 if the CPU has F, BW, VL
 * (and AVX2/FMA/F16C) and the OS saves ZMM state; else avx2 with FMA and
 * F16C; else the scalar reference. Features come from CPUID and XGETBV
 * directly (compilers disagree on __builtin_cpu_supports names).
 * KVB_REF=1 forces the reference; KVB_KERNELS=avx2|ref caps the choice.
 */
#include "ops.h"

#include <stdlib.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

static const struct kvb_kernels *g_kernels;

#if defined(__x86_64__)
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void features(bool *avx2, bool *avx512) {
    unsigned a, b, c, d;
    *avx2 = *avx512 = false;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29), avx = c & (1u << 28);
    if (!osxsave || !avx) return;
    uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    *avx2 = (b & (1u << 5)) && fma && f16c;
    bool f = b & (1u << 16), bw = b & (1u << 30), vl = b & (1u << 31);
    *avx512 = *avx2 && f && bw && vl && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM hi256, hi16 ZMM */
}
#endif

bool kvb_cpu_has_avx2(void) {
#if defined(__x86_64__)
    bool a, b;
    features(&a, &b);
    return a;
#else
    return false;
#endif
}

bool kvb_cpu_has_avx512vnni(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!kvb_cpu_has_avx512() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (c >> 11) & 1; /* AVX512_VNNI */
#else
    return false;
#endif
}

bool kvb_cpu_has_avx512(void) {
#if defined(__x86_64__)
    bool a, b;
    features(&a, &b);
    return b;
#else
    return false;
#endif
}

static const struct kvb_kernels *choose(void) {
    const char *ref = getenv("KVB_REF");
    if (ref && ref[0] && strcmp(ref, "0") != 0) return &kvb_kernels_ref;
#if defined(__x86_64__)
    const char *cap = getenv("KVB_KERNELS");
    if (cap && strcmp(cap, "ref") == 0) return &kvb_kernels_ref;
    if (kvb_cpu_has_avx512() && !(cap && strcmp(cap, "avx2") == 0)) return &kvb_kernels_avx512;
    if (kvb_cpu_has_avx2()) return &kvb_kernels_avx2;
#endif
    return &kvb_kernels_ref;
}

const struct kvb_kernels *kvb_kernels(void) {
    if (!g_kernels) g_kernels = choose(); /* idempotent: a race writes the same pointer */
    return g_kernels;
}

const char *kvb_kernels_name(void) { return kvb_kernels()->name; }

void kvb_matmul_redispatch(void); /* matmul.c */

void kvb_kernels_force_ref(bool ref) {
    g_kernels = ref ? &kvb_kernels_ref : choose();
    kvb_matmul_redispatch();
}

/*
 * families.h — the kernel families a test compares with the scalar
 * reference: each family of the dispatch table (ops/dispatch.h) past the
 * reference that this CPU runs, up to and including the one in use. An
 * unforced run tests every family the CPU has (x86: avx2, avxvnni, avx512,
 * avx512vnni; AArch64: neon, dotprod, i8mm, and sve where SVE is wider
 * than 128 bits); KVB_KERNELS=<tier> that tier
 * and those below it (make test-aarch64 runs each tier so under qemu);
 * KVB_KERNELS=ref (or KVB_REF=1) none.
 */
#ifndef KVB_TEST_FAMILIES_H
#define KVB_TEST_FAMILIES_H

#include "ops/dispatch.h"

/* Up to max such families into out, lowest first; returns how many. */
static inline int t_fast_families(const struct kvb_family **out, int max) {
    const int use = (int)(kvb_family() - kvb_families);
    const unsigned have = kvb_cpu_features();
    int n = 0;
    for (int i = 1; i <= use && n < max; i++)
        if ((kvb_families[i].needs & ~have) == 0) out[n++] = &kvb_families[i];
    return n;
}

#endif

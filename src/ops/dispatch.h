/*
 * dispatch.h — the kernel families in one table. A family is everything one
 * instruction set level runs: its attention primitives and KV row
 * conversions (struct kvb_kernels, ops.h) and its weight kernels — dots,
 * int8 dots and tiles, prefill panels, the activation quantizer (struct
 * kvb_dot_kernels, matmul.h) — and its Gated DeltaNet kernels (struct
 * kvb_gdn_kernels, deltanet.h). Each family is one entry of kvb_families,
 * ordered from the scalar reference (always built, always first) up, each
 * needing every CPU feature of the one before it, but for avx512, which
 * does not need avxvnni's AVX-VNNI. dispatch.c chooses the
 * entry once (CPU features, KVB_REF, KVB_KERNELS); kvb_kernels(),
 * kvb_dot_kernels() and kvb_gdn_kernels() are the chosen entry's parts, so
 * attention, matmul and the DeltaNet layers never disagree on the family.
 */
#ifndef KVB_DISPATCH_H
#define KVB_DISPATCH_H

#include "matmul.h"

/* CPU features a family needs (as dispatch.c reads them: CPUID and XGETBV). */
enum kvb_cpu_feature {
    KVB_CPU_AVX2 = 1 << 0,       /* AVX2, FMA, F16C; the OS saves YMM */
    KVB_CPU_AVX512 = 1 << 1,     /* and AVX-512 F, BW, VL; the OS saves ZMM and opmasks */
    KVB_CPU_AVX512VNNI = 1 << 2, /* and AVX512_VNNI */
    /* AArch64, from getauxval(AT_HWCAP / AT_HWCAP2) on Linux (none elsewhere: the reference runs) */
    KVB_CPU_NEON = 1 << 3,       /* AdvSIMD (HWCAP_ASIMD; every AArch64 CPU) */
    KVB_CPU_DOTPROD = 1 << 4,    /* SDOT/UDOT (HWCAP_ASIMDDP) */
    KVB_CPU_I8MM = 1 << 5,       /* SMMLA (HWCAP2_I8MM) */
    KVB_CPU_FP16 = 1 << 6,       /* f16 arithmetic (HWCAP_FPHP and HWCAP_ASIMDHP) */
    KVB_CPU_BF16 = 1 << 7,       /* BFDOT/BFMMLA (HWCAP2_BF16) */
    KVB_CPU_SVE = 1 << 8,        /* SVE (HWCAP_SVE): its vector length is kvb_cpu_sve_bytes() */
    KVB_CPU_AVXVNNI = 1 << 9,    /* x86: AVX-VNNI (VEX vpdpbusd/vpdpwssd), with AVX2 */
    KVB_CPU_SVE_WIDE = 1 << 10,  /* SVE whose vectors (this thread's, kvb_cpu_sve_bytes) are wider than NEON's 128 bits */
};

struct kvb_gdn_kernels; /* deltanet.h */

struct kvb_family {
    const char *name;                  /* its KVB_KERNELS name */
    unsigned needs;                    /* the kvb_cpu_feature bits it runs on */
    const struct kvb_kernels *attn;    /* attention primitives, KV row conversions */
    const struct kvb_dot_kernels *dot; /* weight rows: dots, int8 dots and tiles, panels */
    const struct kvb_gdn_kernels *gdn; /* Gated DeltaNet: delta rule (recurrent, chunked), short conv */
};

/* Every family built, the reference first, then each needing more. */
extern const struct kvb_family kvb_families[];
extern const int kvb_n_families;

/* The CPU's kvb_cpu_feature bits. */
unsigned kvb_cpu_features(void);
/* The SVE vector length in bytes this thread runs with (0: no SVE, or not Linux/AArch64). */
int kvb_cpu_sve_bytes(void);
/* The family in use: chosen on first call, again by kvb_kernels_force_ref. */
const struct kvb_family *kvb_family(void);

#endif

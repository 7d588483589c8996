/*
 * dispatch.c — the kernel family table (dispatch.h) and the one place a
 * family is chosen. Families, best last: ref (scalar, always built); avx2
 * (AVX2, FMA, F16C); avxvnni (and AVX-VNNI: 256-bit vpdpbusd/vpdpwssd for
 * the integer weight dots, the Intel client CPUs without AVX-512); avx512
 * (AVX2 and AVX-512 F, BW, VL with ZMM state saved by the OS); avx512vnni
 * (and AVX512_VNNI: the int8 weight tiles and integer attention scores).
 * Features come from CPUID and XGETBV directly (compilers disagree on
 * __builtin_cpu_supports names).
 *
 * The choice is the last family whose needs the CPU meets, at or below a
 * cap: KVB_REF=1 caps at ref; KVB_KERNELS=<name> (ref, avx2, avxvnni,
 * avx512, avx512vnni) caps at that family, so KVB_KERNELS=avx2 runs avx2 on
 * an AVX-512 machine, KVB_KERNELS=avxvnni the AVX-VNNI kernels where the
 * CPU has them (avx2 where not), and KVB_KERNELS=avx512 the AVX-512 kernels
 * without VNNI (on a CPU without AVX-512, the best family below); an
 * unknown name caps nothing. avxvnni sits below avx512 because every
 * AVX-512 family is faster where it runs, and avx512 does not need AVX-VNNI.
 *
 * On AArch64 the families are ref, neon (AdvSIMD), dotprod (and SDOT),
 * i8mm (and SMMLA), sve (arm/arm_kernels.h), capped alike by
 * KVB_KERNELS=ref|neon|dotprod|i8mm|sve; features come from getauxval
 * (AT_HWCAP, AT_HWCAP2) on Linux, and elsewhere only NEON is assumed (every
 * AArch64 CPU has it). sve needs dotprod and SVE whose vector length
 * (prctl PR_SVE_GET_VL, read at run time) is wider than NEON's 128 bits:
 * Graviton 3 / Neoverse V1's 256 bits. With 128-bit SVE (Graviton 4,
 * Neoverse V2, most phones) an SVE vector holds what a NEON one does, and
 * the NEON tiers stay (i8mm where it is; KVB_KERNELS=sve there gives
 * i8mm). It needs no i8mm yet sits above it (on AArch64 the one family not
 * needing all of the one before, as avx512 and avxvnni on x86): where SVE
 * is wide its own kernels read twice NEON's bytes an instruction, while
 * i8mm's own kernels are its SMMLA tiles, Q8_0 and K-quant (KVB_KERNELS=i8mm
 * keeps them; dotprod's SDOT Q8_0 tile stays with KVB_KERNELS=dotprod).
 * A64FX (512-bit SVE, no dotprod) stays on neon. The length is the
 * choosing thread's (Linux gives a new thread its creator's); the SVE
 * kernels are right at any length, so one that differs changes no value's
 * correctness, only the speed. The choice is made once, on first use (a race
 * stores the same pointer), and again by kvb_kernels_force_ref. Nothing
 * else in the library tests the CPU or a family's name to pick a kernel.
 */
#include "dispatch.h"
#include "deltanet.h"

#include <stdatomic.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__)
#include "arm/arm_kernels.h"
#if defined(__linux__)
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif
#endif

const struct kvb_family kvb_families[] = {
    {"ref", 0, &kvb_kernels_ref, &kvb_dot_ref, &kvb_gdn_ref},
#if defined(__x86_64__)
    {"avx2", KVB_CPU_AVX2, &kvb_kernels_avx2, &kvb_dot_avx2, &kvb_gdn_avx2},
    {"avxvnni", KVB_CPU_AVX2 | KVB_CPU_AVXVNNI, &kvb_kernels_avxvnni, &kvb_dot_avxvnni, &kvb_gdn_avx2},
    {"avx512", KVB_CPU_AVX2 | KVB_CPU_AVX512, &kvb_kernels_avx512, &kvb_dot_avx512, &kvb_gdn_avx512},
    {"avx512vnni", KVB_CPU_AVX2 | KVB_CPU_AVX512 | KVB_CPU_AVX512VNNI, &kvb_kernels_avx512vnni, &kvb_dot_avx512vnni, &kvb_gdn_avx512},
#endif
#if defined(__aarch64__)
    {"neon", KVB_CPU_NEON, &kvb_kernels_neon, &kvb_dot_neon, &kvb_gdn_ref},
    {"dotprod", KVB_CPU_NEON | KVB_CPU_DOTPROD, &kvb_kernels_dotprod, &kvb_dot_dotprod, &kvb_gdn_ref},
    {"i8mm", KVB_CPU_NEON | KVB_CPU_DOTPROD | KVB_CPU_I8MM, &kvb_kernels_i8mm, &kvb_dot_i8mm, &kvb_gdn_ref},
    {"sve", KVB_CPU_NEON | KVB_CPU_DOTPROD | KVB_CPU_SVE_WIDE, &kvb_kernels_sve, &kvb_dot_sve, &kvb_gdn_ref},
#endif
};
const int kvb_n_families = (int)(sizeof kvb_families / sizeof kvb_families[0]);

#if defined(__x86_64__)
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

#if defined(__aarch64__) && defined(__linux__)
/* This thread's SVE vector length in bytes (0 where the kernel cannot say);
 * asked only of a CPU with HWCAP_SVE. */
static int sve_bytes(void) {
#if defined(PR_SVE_GET_VL)
    const int vl = prctl(PR_SVE_GET_VL, 0, 0, 0, 0);
    return vl < 0 ? 0 : vl & PR_SVE_VL_LEN_MASK;
#else
    return 0;
#endif
}
#endif

unsigned kvb_cpu_features(void) {
    unsigned have = 0;
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29), avx = c & (1u << 28);
    if (!osxsave || !avx) return 0;
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return 0; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if ((b & (1u << 5)) && fma && f16c) have |= KVB_CPU_AVX2;
    const bool f = b & (1u << 16), bw = b & (1u << 30), vl = b & (1u << 31);
    if ((have & KVB_CPU_AVX2) && f && bw && vl && (xcr0 & 0xe0) == 0xe0) /* opmask, ZMM hi256, hi16 ZMM */
        have |= KVB_CPU_AVX512;
    if ((have & KVB_CPU_AVX512) && ((c >> 11) & 1)) have |= KVB_CPU_AVX512VNNI;
    if ((have & KVB_CPU_AVX2) && a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 4) & 1)) have |= KVB_CPU_AVXVNNI;
#elif defined(__aarch64__) && defined(__linux__)
    /* the kernel's hwcap bits (arch/arm64/include/uapi/asm/hwcap.h) */
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    if (hw & (1ul << 1)) have |= KVB_CPU_NEON; /* HWCAP_ASIMD */
    if ((have & KVB_CPU_NEON) && (hw & (1ul << 20))) have |= KVB_CPU_DOTPROD; /* HWCAP_ASIMDDP */
    if ((have & KVB_CPU_NEON) && (hw2 & (1ul << 13))) have |= KVB_CPU_I8MM; /* HWCAP2_I8MM */
    if ((hw & (1ul << 9)) && (hw & (1ul << 10))) have |= KVB_CPU_FP16; /* HWCAP_FPHP, HWCAP_ASIMDHP */
    if (hw2 & (1ul << 14)) have |= KVB_CPU_BF16; /* HWCAP2_BF16 */
    if (hw & (1ul << 22)) have |= KVB_CPU_SVE; /* HWCAP_SVE */
    if ((have & KVB_CPU_SVE) && sve_bytes() > 16) have |= KVB_CPU_SVE_WIDE;
#elif defined(__aarch64__)
    have |= KVB_CPU_NEON; /* AdvSIMD is part of AArch64; the rest is not assumed */
#endif
    return have;
}

int kvb_cpu_sve_bytes(void) {
#if defined(__aarch64__) && defined(__linux__)
    return (kvb_cpu_features() & KVB_CPU_SVE) ? sve_bytes() : 0;
#else
    return 0;
#endif
}

bool kvb_cpu_has_avx2(void) { return kvb_cpu_features() & KVB_CPU_AVX2; }
bool kvb_cpu_has_avx512(void) { return kvb_cpu_features() & KVB_CPU_AVX512; }
bool kvb_cpu_has_avx512vnni(void) { return kvb_cpu_features() & KVB_CPU_AVX512VNNI; }
bool kvb_cpu_has_avxvnni(void) { return kvb_cpu_features() & KVB_CPU_AVXVNNI; }

/* The highest family the environment allows (an index into kvb_families). */
static int env_cap(void) {
    const char *ref = getenv("KVB_REF");
    if (ref && ref[0] && strcmp(ref, "0") != 0) return 0;
    const char *cap = getenv("KVB_KERNELS");
    for (int i = 0; cap && i < kvb_n_families; i++)
        if (strcmp(cap, kvb_families[i].name) == 0) return i;
    return kvb_n_families - 1;
}

static const struct kvb_family *choose(void) {
    const unsigned have = kvb_cpu_features();
    for (int i = env_cap(); i > 0; i--)
        if ((kvb_families[i].needs & ~have) == 0) return &kvb_families[i];
    return &kvb_families[0];
}

static _Atomic(const struct kvb_family *) g_family;

const struct kvb_family *kvb_family(void) {
    const struct kvb_family *f = atomic_load_explicit(&g_family, memory_order_relaxed);
    if (!f) {
        f = choose();
        atomic_store_explicit(&g_family, f, memory_order_relaxed);
    }
    return f;
}

const struct kvb_kernels *kvb_kernels(void) { return kvb_family()->attn; }
const struct kvb_dot_kernels *kvb_dot_kernels(void) { return kvb_family()->dot; }
const struct kvb_gdn_kernels *kvb_gdn_kernels(void) { return kvb_family()->gdn; }
const char *kvb_kernels_name(void) { return kvb_family()->attn->name; }

void kvb_kernels_force_ref(bool ref) { atomic_store_explicit(&g_family, ref ? &kvb_families[0] : choose(), memory_order_relaxed); }

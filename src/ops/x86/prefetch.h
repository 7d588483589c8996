/* prefetch.h — software prefetch for the decode kernels. Weights stream
 * from memory once per token: the cache lines of the `bytes` at p are
 * requested PREFETCH_AHEAD bytes ahead of the loads. 4 KB measured best on
 * Zen 5 (Q4_K_M decode 53 -> 57 tok/s against 1 KB, 8 KB no better); on Zen 3
 * 512 B, 1 KB and 2 KB measured alike (docs/BENCHMARKS.md). */
#ifndef KVB_X86_PREFETCH_H
#define KVB_X86_PREFETCH_H

#include <immintrin.h>

#define PREFETCH_AHEAD 4096
static inline __attribute__((always_inline)) void prefetch_ahead(const void *p, int bytes) {
    for (int off = 0; off < bytes; off += 64) _mm_prefetch((const char *)p + PREFETCH_AHEAD + off, _MM_HINT_T0);
}

#endif

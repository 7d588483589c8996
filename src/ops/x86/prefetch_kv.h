/* prefetch_kv.h — software prefetch of K and V rows for the attention
 * kernels: pages hold block_size rows, so the hardware prefetcher loses the
 * stream at every page boundary, and each family fetches rows some keys
 * ahead with this one helper (its distance is the family's).
 *
 * always_inline, as every prefetch helper must be: GCC finds a function of
 * prefetches alone free of side effects and deletes its calls (the AVX-512
 * attention issued no prefetch until 2026-12-03; tests/test_codegen_cli.sh
 * now checks the built kernels). */
#ifndef KVB_X86_PREFETCH_KV_H
#define KVB_X86_PREFETCH_KV_H

#include "../ops.h"

#include <immintrin.h>

/* Every cache line that bytes n at p touch, into L1; four lines per
 * iteration, so that the loop's own adds and branches (which share ports
 * with the FMAs) stay a small part of a row's cost. */
static inline __attribute__((always_inline)) void kvb_prefetch_span(const void *p, size_t n) {
    const uintptr_t end = (uintptr_t)p + n;
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)63;
    for (; a + 192 < end; a += 256) {
        _mm_prefetch((const char *)a, _MM_HINT_T0);
        _mm_prefetch((const char *)a + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)a + 128, _MM_HINT_T0);
        _mm_prefetch((const char *)a + 192, _MM_HINT_T0);
    }
    for (; a < end; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T0);
}

/* Key j's K row and V row, when j is a key of the view. */
static inline __attribute__((always_inline)) void kvb_prefetch_kv_rows(const struct kvb_kv_view *v, int32_t j) {
    if (j >= v->n) return;
    kvb_prefetch_span(kvb_view_k(v, j), v->row_bytes);
    kvb_prefetch_span(kvb_view_v(v, j), v->row_bytes_v);
}

/* Keys j..j+n-1 that are keys of the view, K and V rows: one span each
 * when they are a run of one page (kvb_view_run), else row by row. */
static inline __attribute__((always_inline)) void kvb_prefetch_kv_keys(const struct kvb_kv_view *v, int32_t j, int32_t n) {
    if (j + n <= v->n && kvb_view_run(v, j, n)) {
        kvb_prefetch_span(kvb_view_k(v, j), (size_t)n * v->row_bytes);
        kvb_prefetch_span(kvb_view_v(v, j), (size_t)n * v->row_bytes_v);
        return;
    }
    for (int32_t t = 0; t < n; t++) kvb_prefetch_kv_rows(v, j + t);
}

#endif

/*
 * membw.c — measures the machine's read bandwidth the way decode reads the
 * KV cache: every thread streams its share of a buffer far larger than the
 * caches with the widest vector loads the CPU has (AVX-512, else AVX2, else
 * scalar), summing so the loads cannot be elided. Best of `reps` passes.
 * membw_page_read_gbs reads the same way but page by page in a shuffled
 * order, as paged attention walks a stream whose pages lie anywhere in the
 * pool: the most paged attention can hope to read. Both buffers are 2 MiB
 * aligned and advised for transparent huge pages, as the pool's slabs are:
 * with 4 KiB pages, shuffled 8 KiB pages read 15-20% slower from TLB misses
 * alone (measured 2026-12-03), which understated the page ceiling.
 */
#define _DEFAULT_SOURCE /* madvise(MADV_HUGEPAGE) */
#include "cli.h"

#include <sys/mman.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

struct bw_job {
    const float *buf;
    size_t n;
    const uint32_t *order; /* page order (page reads), or NULL: one sequential read */
    size_t page_floats, n_pages;
    double sink[64];
    int isa; /* 2 = avx512, 1 = avx2, 0 = scalar */
};

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static double sum512(const float *p, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}
__attribute__((target("avx2"))) static double sum256(const float *p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    float t[8];
    _mm256_storeu_ps(t, s);
    return (double)t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#endif

static double sum_scalar(const float *p, size_t n) {
    float a[8] = {0};
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += p[i + k];
    return (double)a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

static double sum_any(int isa, const float *p, size_t n) {
#if defined(__x86_64__)
    if (isa == 2) return sum512(p, n);
    if (isa == 1) return sum256(p, n);
#endif
    (void)isa;
    return sum_scalar(p, n);
}

static void bw_worker(int32_t ith, int32_t nth, void *arg) {
    struct bw_job *j = arg;
    if (j->order) { /* thread ith reads pages ith, ith + nth, ... of the shuffled order */
        double s = 0;
        for (size_t i = (size_t)ith; i < j->n_pages; i += (size_t)nth)
            s += sum_any(j->isa, j->buf + (size_t)j->order[i] * j->page_floats, j->page_floats);
        j->sink[ith % 64] += s;
        return;
    }
    size_t per = (j->n / (size_t)nth) & ~(size_t)63;
    j->sink[ith % 64] += sum_any(j->isa, j->buf + per * (size_t)ith, per);
}

/* Runs job j on every thread of tp `reps` times with the widest loads the
 * CPU has; the best rate in GB/s for `read` bytes per run. */
static double best_gbs(struct kvb_threadpool *tp, struct bw_job *j, double read, int reps) {
#if defined(__x86_64__)
    j->isa = kvb_cpu_has_avx512() ? 2 : kvb_cpu_has_avx2() ? 1 : 0;
#endif
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = cli_now_sec();
        kvb_threadpool_run(tp, bw_worker, j);
        double gbs = read / (cli_now_sec() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

/* A buffer of at least `bytes`, laid out as the pool's slabs are (2 MiB
 * aligned, advised for huge pages); free() releases it. */
static float *bw_alloc(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    const size_t n = (bytes + huge - 1) & ~(huge - 1); /* aligned_alloc: a multiple of the alignment */
    float *p = aligned_alloc(huge, n);
#if defined(MADV_HUGEPAGE)
    if (p) madvise(p, n, MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
    return p;
}

double membw_read_gbs(struct kvb_threadpool *tp, size_t bytes, int reps) {
    size_t n = bytes / sizeof(float);
    float *buf = bw_alloc(n * sizeof(float));
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    struct bw_job j;
    memset(&j, 0, sizeof j);
    j.buf = buf;
    j.n = n;
    int32_t nth = kvb_threadpool_n_threads(tp);
    size_t read = ((n / (size_t)nth) & ~(size_t)63) * (size_t)nth * sizeof(float);
    double best = best_gbs(tp, &j, (double)read, reps);
    free(buf);
    return best;
}

double membw_page_read_gbs(struct kvb_threadpool *tp, size_t bytes, size_t page_bytes, int reps) {
    if (page_bytes < 256) page_bytes = 256;
    const size_t pf = (page_bytes / sizeof(float)) & ~(size_t)63; /* whole 256-byte steps of the loads */
    const size_t n_pages = bytes / (pf * sizeof(float));
    if (n_pages < 2 || n_pages > UINT32_MAX) return 0;
    float *buf = bw_alloc(n_pages * pf * sizeof(float));
    uint32_t *order = malloc(sizeof(uint32_t) * n_pages);
    if (!buf || !order) {
        free(buf);
        free(order);
        return 0;
    }
    for (size_t i = 0; i < n_pages * pf; i++) buf[i] = (float)(i & 7);
    for (size_t i = 0; i < n_pages; i++) order[i] = (uint32_t)i;
    uint64_t r = 0x9e3779b97f4a7c15ull; /* Fisher-Yates with a fixed xorshift: the same order every run */
    for (size_t i = n_pages - 1; i > 0; i--) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        size_t k = (size_t)(r % (i + 1));
        uint32_t t = order[i]; order[i] = order[k]; order[k] = t;
    }
    struct bw_job j;
    memset(&j, 0, sizeof j);
    j.buf = buf;
    j.order = order;
    j.page_floats = pf;
    j.n_pages = n_pages;
    double best = best_gbs(tp, &j, (double)n_pages * (double)pf * sizeof(float), reps);
    free(order);
    free(buf);
    return best;
}

/*
 * cache_helpers.h — shared by the cache tests: an independent RoPE and
 * attention reference (double precision, written here, not the library's),
 * a token history, and the invariant checker run after every step.
 */
#ifndef KVB_CACHE_HELPERS_H
#define KVB_CACHE_HELPERS_H

#include "testing.h"
#include "kvbound.h"

/* x (d values) rotated to position pos, in double. */
static inline void ref_rope(const struct kvb_rope *r, const float *x, int d, long long pos, double *y) {
    for (int i = 0; i < d; i++) y[i] = x[i];
    if (r->type == KVB_ROPE_NONE) return;
    int np = r->n_dims / 2;
    for (int i = 0; i < np; i++) {
        double th = (double)pos * r->freq_scale * pow((double)r->base, -2.0 * i / r->n_dims);
        if (r->freq_factors) th /= r->freq_factors[i];
        double c = cos(th), s = sin(th);
        int a = r->type == KVB_ROPE_INTERLEAVED ? 2 * i : i, b = r->type == KVB_ROPE_INTERLEAVED ? 2 * i + 1 : i + np;
        double x0 = x[a], x1 = x[b];
        y[a] = x0 * c - x1 * s;
        y[b] = x0 * s + x1 * c;
    }
}

/* Softmax attention of query q (pre-RoPE, at cache position qpos) over n keys
 * (pre-RoPE rows k[j] at cache positions kpos[j]) with values v[j]. */
static inline void ref_attend(const struct kvb_rope *r, int d, const float *q, long long qpos, const float *const *k,
                       const float *const *v, const long long *kpos, int n, double *out) {
    double qr[512], kr[512];
    double *s = malloc(sizeof(double) * (size_t)n);
    ref_rope(r, q, d, qpos, qr);
    double mx = -1e300;
    for (int j = 0; j < n; j++) {
        ref_rope(r, k[j], d, kpos[j], kr);
        double a = 0;
        for (int i = 0; i < d; i++) a += qr[i] * kr[i];
        s[j] = a / sqrt((double)d);
        if (s[j] > mx) mx = s[j];
    }
    double sum = 0;
    for (int j = 0; j < n; j++) { s[j] = exp(s[j] - mx); sum += s[j]; }
    for (int i = 0; i < d; i++) out[i] = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < d; i++) out[i] += s[j] / sum * v[j][i];
    free(s);
}

/* Checks the invariants of every stream; returns 0 or prints and returns 1. */
static inline int check_invariants(const struct kvb_cache *c, struct kvb_pool *pool, const char *where) {
    struct kvb_cache_params got;
    kvb_cache_get_params(c, &got);
    const struct kvb_cache_params *p = &got;
    const enum kvb_pos_mode pm = kvb_cache_pos_mode(c);
    long long expect_pages_max = 0;
    for (int l = 0; l < p->n_layer; l++) {
        long long past = kvb_cache_n_past(c, l);
        for (int h = 0; h < p->n_kv_head; h++) {
            int n = kvb_cache_n_slots(c, l, h), budget = kvb_cache_budget(c, l, h);
            const int span = (int)(past < p->kv.keep ? past : p->kv.keep); /* the pinned span sits on top of the budget */
            for (int j = 0; j < span && j < n; j++) {
                struct kvb_slot_info si;
                if (kvb_cache_slot_info(c, l, h, j, &si) != KVB_OK || si.pos_original != j) { printf("  %s: (%d,%d) pinned position %d evicted\n", where, l, h, j); return 1; }
            }
            if (budget > 0 && n - span > budget) { printf("  %s: stream (%d,%d) holds %d > keep %d + budget %d\n", where, l, h, n, span, budget); return 1; }
            long long prev = -1;
            for (int j = 0; j < n; j++) {
                struct kvb_slot_info si;
                if (kvb_cache_slot_info(c, l, h, j, &si) != KVB_OK) { printf("  %s: slot_info failed\n", where); return 1; }
                if (si.pos_original <= prev || si.pos_original >= past) { printf("  %s: (%d,%d) slot %d pos %lld after %lld (past %lld)\n", where, l, h, j, (long long)si.pos_original, prev, past); return 1; }
                prev = si.pos_original;
                if (pm == KVB_POS_CONTIGUOUS ? si.pos_cache != j : si.pos_cache != si.pos_original) { printf("  %s: (%d,%d) slot %d cache pos %lld\n", where, l, h, j, (long long)si.pos_cache); return 1; }
                if (j < p->kv.policy.n_sink && past > j && si.pos_original != j) { printf("  %s: (%d,%d) sink %d evicted (slot holds %lld)\n", where, l, h, j, (long long)si.pos_original); return 1; }
            }
            expect_pages_max += (n + p->kv.block_size - 1) / p->kv.block_size + 1; /* < 2 pages of holes */
        }
    }
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(c, &cs);
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(pool, &ps);
    if (cs.bytes_used != (size_t)cs.pages_in_use * ps.page_bytes) { printf("  %s: bytes_used %zu != pages %lld x %zu\n", where, cs.bytes_used, (long long)cs.pages_in_use, ps.page_bytes); return 1; }
    if (ps.pages_in_use != cs.pages_in_use) { printf("  %s: pool says %lld pages in use, cache %lld\n", where, (long long)ps.pages_in_use, (long long)cs.pages_in_use); return 1; }
    expect_pages_max += (long long)(cs.recall_bytes / ps.page_bytes); /* recall areas */
    if (cs.pages_in_use > expect_pages_max) { printf("  %s: %lld pages for the slots held (max %lld): compaction failed\n", where, (long long)cs.pages_in_use, expect_pages_max); return 1; }
    if (cs.bytes_peak < cs.bytes_used) { printf("  %s: peak below current\n", where); return 1; }
    return 0;
}

#endif

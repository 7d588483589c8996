/*
 * pool.c — the page pool, after SQLite's pcache1: fixed-size pages from one
 * free list, obtained from the allocator in slabs and kept until the pool is
 * freed. Slabs are about 2 MiB, aligned and advised for transparent huge
 * pages: decode walks hundreds of MB of pages, and 4 KiB TLB entries cost
 * more than the arithmetic (measured in docs/BENCHMARKS.md). Exact accounting: in_use pages are what caches hold; reserved pages
 * are what the allocator gave us; capacity is a hard limit in bytes.
 *
 * take() is all-or-nothing: either n pages come off the list or nothing
 * changes (KVB_ERR_NOMEM). Growing the free-list array happens before a slab
 * is allocated, so a failure at any point leaves the pool as it was.
 * A mutex guards take/give: caches on several threads may share a pool.
 */
#include "pool.h"

struct kvb_pool_params kvb_pool_default_params(void) {
    struct kvb_pool_params p = {0};
    p.page_bytes = 0;
    p.capacity_bytes = 0;
    p.pages_per_slab = 0; /* auto: about 2 MiB per slab */
    return p;
}

kvb_status kvb_pool_init(const struct kvb_pool_params *params, struct kvb_pool **out) {
    if (!params || !out) return kvb_fail(KVB_ERR_INVALID, "pool: params and out must not be NULL");
    if (params->page_bytes == 0) return kvb_fail(KVB_ERR_INVALID, "pool: page_bytes must be > 0");
    if (params->capacity_bytes < params->page_bytes)
        return kvb_fail(KVB_ERR_INVALID, "pool: capacity_bytes (%zu) is smaller than one page (%zu)",
                        params->capacity_bytes, params->page_bytes);
    if (params->pages_per_slab < 0 || params->pages_per_slab > (1 << 20))
        return kvb_fail(KVB_ERR_INVALID, "pool: pages_per_slab must be in 0..1048576, got %d", (int)params->pages_per_slab);
    struct kvb_pool *p = kvb_calloc(1, sizeof *p);
    if (!p) return kvb_fail(KVB_ERR_NOMEM, "pool: out of memory");
    p->page_bytes = (params->page_bytes + 63) & ~(size_t)63;
    p->cap_pages = (int64_t)(params->capacity_bytes / p->page_bytes);
    if (p->cap_pages < 1) p->cap_pages = 1;
    p->pages_per_slab = params->pages_per_slab;
    if (p->pages_per_slab == 0) { /* auto: slabs of about 2 MiB, so huge pages can back them */
        size_t per = ((size_t)2 << 20) / p->page_bytes;
        p->pages_per_slab = (int32_t)KVB_MIN(KVB_MAX(per, (size_t)1), (size_t)(1 << 20));
    }
    pthread_mutex_init(&p->mu, NULL);
    *out = p;
    return KVB_OK;
}

void kvb_pool_free(struct kvb_pool *pool) {
    if (!pool) return;
    for (int64_t i = 0; i < pool->n_slabs; i++) kvb_aligned_free(pool->slabs[i]);
    kvb_free(pool->slabs);
    kvb_free(pool->free_list);
    pthread_mutex_destroy(&pool->mu);
    kvb_free(pool);
}

void kvb_pool_get_stats(const struct kvb_pool *pool, struct kvb_pool_stats *o) {
    memset(o, 0, sizeof *o);
    if (!pool) return;
    pthread_mutex_lock((pthread_mutex_t *)&pool->mu);
    o->page_bytes = pool->page_bytes;
    o->pages_capacity = pool->cap_pages;
    o->pages_reserved = pool->reserved;
    o->pages_in_use = pool->in_use;
    o->pages_free = pool->cap_pages - pool->in_use;
    o->pages_peak = pool->peak;
    pthread_mutex_unlock((pthread_mutex_t *)&pool->mu);
    o->bytes_used = (size_t)o->pages_in_use * o->page_bytes;
    o->bytes_reserved = (size_t)o->pages_reserved * o->page_bytes;
    o->bytes_peak = (size_t)o->pages_peak * o->page_bytes;
}

/* Adds one slab (up to pages_per_slab pages, within capacity). Unchanged on failure. */
static kvb_status add_slab(struct kvb_pool *p, int64_t want) {
    int64_t n = KVB_MAX(want, (int64_t)p->pages_per_slab);
    n = KVB_MIN(n, p->cap_pages - p->reserved);
    if (n <= 0) return KVB_ERR_NOMEM;
    if (kvb_grow((void **)&p->free_list, &p->free_cap, p->reserved + n, sizeof(uint8_t *)) != KVB_OK) return KVB_ERR_NOMEM;
    if (kvb_grow((void **)&p->slabs, &p->slabs_cap, p->n_slabs + 1, sizeof(void *)) != KVB_OK) return KVB_ERR_NOMEM;
    if ((uint64_t)n > SIZE_MAX / p->page_bytes) return KVB_ERR_NOMEM;
    uint8_t *mem = kvb_huge_alloc((size_t)n * p->page_bytes);
    if (!mem) return KVB_ERR_NOMEM;
    p->slabs[p->n_slabs++] = mem;
    for (int64_t i = n - 1; i >= 0; i--) p->free_list[p->n_free++] = mem + (size_t)i * p->page_bytes;
    p->reserved += n;
    return KVB_OK;
}

kvb_status kvb_pool_take(struct kvb_pool *p, int64_t n, uint8_t **out) {
    if (n <= 0) return KVB_OK;
    pthread_mutex_lock(&p->mu);
    if (n > p->cap_pages - p->in_use) {
        pthread_mutex_unlock(&p->mu);
        return kvb_fail(KVB_ERR_NOMEM, "pool exhausted: need %lld pages, %lld of %lld free",
                        (long long)n, (long long)(p->cap_pages - p->in_use), (long long)p->cap_pages);
    }
    while (p->n_free < n) {
        if (add_slab(p, n - p->n_free) != KVB_OK) {
            pthread_mutex_unlock(&p->mu);
            return kvb_fail(KVB_ERR_NOMEM, "pool: cannot reserve %lld more pages of %zu bytes",
                            (long long)(n - p->n_free), p->page_bytes);
        }
    }
    for (int64_t i = 0; i < n; i++) out[i] = p->free_list[--p->n_free];
    p->in_use += n;
    if (p->in_use > p->peak) p->peak = p->in_use;
    pthread_mutex_unlock(&p->mu);
    return KVB_OK;
}

void kvb_pool_give(struct kvb_pool *p, uint8_t *const *pages, int64_t n) {
    if (n <= 0) return;
    pthread_mutex_lock(&p->mu);
    for (int64_t i = 0; i < n; i++) p->free_list[p->n_free++] = pages[i];
    p->in_use -= n;
    pthread_mutex_unlock(&p->mu);
}

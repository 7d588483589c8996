/*
 * pool.h — the page pool's private layout (pool.c) and the two calls the
 * streams use: take pages all or nothing, give them back.
 */
#ifndef KVB_POOL_H
#define KVB_POOL_H

#include "../core/core.h"

#include <pthread.h>

struct kvb_pool {
    size_t page_bytes;
    int64_t cap_pages;
    int32_t pages_per_slab;
    pthread_mutex_t mu;
    void **slabs;          /* aligned blocks of pages_per_slab pages */
    int64_t n_slabs, slabs_cap;
    uint8_t **free_list;   /* stack of free pages; capacity >= reserved */
    int64_t n_free, free_cap;
    int64_t reserved, in_use, peak;
};

/* Takes n pages, all or nothing. KVB_ERR_NOMEM leaves the pool unchanged. */
kvb_status kvb_pool_take(struct kvb_pool *pool, int64_t n, uint8_t **out);
/* Returns n pages to the free list. Cannot fail. */
void kvb_pool_give(struct kvb_pool *pool, uint8_t *const *pages, int64_t n);

#endif /* KVB_POOL_H */

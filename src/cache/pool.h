/*
 * pool.h — the page pool's private layout (pool.c) and the calls the
 * streams use: take pages all or nothing (for one stream, or for many at
 * once, each near its own last page), give them back.
 */
#ifndef KVB_POOL_H
#define KVB_POOL_H

#include "../core/core.h"

#include <pthread.h>

#define KVB_POOL_RUN_BYTES ((size_t)256 << 10) /* an extent: the run a long stream's pages lie in */
#define KVB_POOL_MAX_EXTENT 64                 /* pages of one extent (its free bits are one word) */

enum { KVB_EXT_NONE = 0, KVB_EXT_FREE, KVB_EXT_OPEN, KVB_EXT_RUN }; /* which list an extent is on */

struct kvb_pool_slab {
    uint8_t *base;
    int64_t n_pages;
    int64_t ext0; /* its first extent */
};

/* size consecutive pages of one slab; bit i of free_bits: page first + i is free. */
struct kvb_pool_extent {
    uint64_t free_bits;
    int64_t prev, next; /* on the list `list` (-1 ends) */
    int32_t slab, first;
    uint8_t size, n_free;
    uint8_t list;       /* KVB_EXT_*: NONE when no page is free */
    bool claimed;       /* a long stream's run: others take from it only when nothing else is left */
    uint16_t refs[KVB_POOL_MAX_EXTENT]; /* holders of page first + i beyond its first (copy-on-write sharing) */
};

struct kvb_pool {
    size_t page_bytes;
    int64_t cap_pages;
    int32_t pages_per_slab;
    int32_t extent_pages;  /* pages per extent (KVB_POOL_RUN_BYTES, at most KVB_POOL_MAX_EXTENT) */
    int32_t long_pages;    /* a stream holding this many pages takes its next ones in runs */
    pthread_mutex_t mu;
    struct kvb_pool_slab *slabs; /* in address order */
    int64_t n_slabs, slabs_cap;
    struct kvb_pool_extent *ext;
    int64_t n_ext, ext_cap;
    int64_t head[4];       /* list heads by KVB_EXT_* (NONE unused) */
    int64_t n_free;        /* free pages in slabs */
    int64_t reserved, in_use, peak;
    int64_t shared;        /* pages in use with more than one holder */
};

/* One stream's request: n pages, for a stream that holds `held` pages, the
 * last of which is `tail` (NULL: none). A stream that will hold at least
 * long_pages takes its pages in runs: the page after tail if it is free,
 * else the first page of an extent no one uses, so that its pages lie in
 * 256 KiB runs that attention reads as one stream. */
struct kvb_pool_req {
    int64_t n;
    int64_t held;
    const uint8_t *tail;
};

/* Takes reqs[i].n pages for each request, written to out in request order,
 * all or nothing: KVB_ERR_NOMEM (capacity, or the allocator) leaves every
 * page where it was. */
kvb_status kvb_pool_take_reqs(struct kvb_pool *pool, const struct kvb_pool_req *reqs, int64_t n_reqs, uint8_t **out);
/* Takes n pages for one new holder (kvb_pool_take_reqs with held 0, no tail). */
kvb_status kvb_pool_take(struct kvb_pool *pool, int64_t n, uint8_t **out);
/* Returns n pages to the pool: a page with other holders (kvb_pool_share)
 * loses one holder and stays in use. Cannot fail. */
void kvb_pool_give(struct kvb_pool *pool, uint8_t *const *pages, int64_t n);
/* Adds one holder to each of n pages in use (a cache forked from another
 * holds the same pages; each holder gives them back once). All or nothing:
 * KVB_ERR_NOMEM when a page already has KVB_POOL_MAX_REFS holders, or
 * KVB_ERR_INVALID for a pointer that is not one of the pool's pages. */
#define KVB_POOL_MAX_REFS 65535
kvb_status kvb_pool_share(struct kvb_pool *pool, uint8_t *const *pages, int64_t n);
/* Whether a page in use has another holder than its caller, so that the
 * caller must copy it before writing into it (copy-on-write). */
bool kvb_pool_is_shared(struct kvb_pool *pool, const uint8_t *page);
/* Checks the pool's lists and counts against its extents (tests); NULL or what is wrong. */
const char *kvb_pool_check(struct kvb_pool *pool);

#endif /* KVB_POOL_H */

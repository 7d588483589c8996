/*
 * pool.c — the page pool, after SQLite's pcache1: fixed-size pages obtained
 * from the allocator in slabs and kept until the pool is freed. Slabs are
 * about 2 MiB, aligned and advised for transparent huge pages: decode walks
 * hundreds of MB of pages, and 4 KiB TLB entries cost more than the
 * arithmetic (measured in docs/BENCHMARKS.md). Exact accounting: in_use
 * pages are what caches hold; reserved pages are what the allocator gave
 * us; capacity is a hard limit in bytes on both.
 *
 * Where a page lies matters as much as how many there are. Attention reads
 * a stream's pages in order, and the hardware prefetchers follow a read
 * only within contiguous memory: 8 KiB pages scattered through the pool
 * read at about half the rate of the same pages in runs of 256 KiB (bench
 * cache, docs/BENCHMARKS.md, 2026-12-04). Caches grow all their streams in
 * lockstep, so a plain free list hands one stream's consecutive pages out
 * 2 MiB apart. So slabs are cut into extents of KVB_POOL_RUN_BYTES (at most
 * 64 pages), each on one of three lists:
 *
 *   FREE   every page free, no owner;
 *   OPEN   shared: short streams' pages, packed together;
 *   RUN    claimed by one long stream, which takes its pages in order.
 *
 * A stream that holds long_pages (half an extent) or more asks with its
 * last page: it gets the next page of that page's RUN extent if free, else
 * claims a FREE extent (a new slab when there is none and the capacity
 * allows), and the run it leaves, if not full, becomes OPEN. Other requests
 * take from OPEN extents first, then FREE ones, then new slabs. Only when
 * the capacity allows no new slab do they take from other streams' RUN
 * extents (from their top, away from the owner's next page). So no request
 * fails while a page is free, as before; what runs cost is memory reserved
 * and not in use: at most one partly used RUN extent per long stream (less
 * than 256 KiB each, and never past the capacity).
 *
 * Pages can have several holders (kvb_cache_fork: copy-on-write sharing):
 * each extent counts, per page, the holders beyond the first; giving back a
 * page with holders left only drops one, so in_use counts a shared page
 * once. Writers ask kvb_pool_is_shared before writing and copy first.
 *
 * take is all-or-nothing: capacity is checked first, and if the allocator
 * fails part way the pages taken are given back. Metadata grows before a
 * slab is allocated. A mutex guards take/give: caches on several threads
 * may share a pool.
 */
#include "pool.h"

#include <limits.h>

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
    size_t e = KVB_POOL_RUN_BYTES / p->page_bytes;
    e = KVB_MIN(KVB_MAX(e, (size_t)1), (size_t)KVB_POOL_MAX_EXTENT);
    p->extent_pages = (int32_t)KVB_MIN(e, (size_t)p->pages_per_slab);
    p->long_pages = p->extent_pages >= 2 ? KVB_MAX(p->extent_pages / 2, 2) : INT32_MAX; /* runs of one page: no runs */
    for (int i = 0; i < 4; i++) p->head[i] = -1;
    pthread_mutex_init(&p->mu, NULL);
    *out = p;
    return KVB_OK;
}

void kvb_pool_free(struct kvb_pool *pool) {
    if (!pool) return;
    for (int64_t i = 0; i < pool->n_slabs; i++) kvb_aligned_free(pool->slabs[i].base);
    kvb_free(pool->slabs);
    kvb_free(pool->ext);
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
    o->pages_shared = pool->shared;
    pthread_mutex_unlock((pthread_mutex_t *)&pool->mu);
    o->bytes_used = (size_t)o->pages_in_use * o->page_bytes;
    o->bytes_reserved = (size_t)o->pages_reserved * o->page_bytes;
    o->bytes_peak = (size_t)o->pages_peak * o->page_bytes;
}

/* ---- extent lists ---- */

static void list_remove(struct kvb_pool *p, int64_t x) {
    struct kvb_pool_extent *e = &p->ext[x];
    if (e->list == KVB_EXT_NONE) return;
    if (e->prev >= 0) p->ext[e->prev].next = e->next;
    else p->head[e->list] = e->next;
    if (e->next >= 0) p->ext[e->next].prev = e->prev;
    e->prev = e->next = -1;
    e->list = KVB_EXT_NONE;
}

static void list_push(struct kvb_pool *p, int64_t x, uint8_t list) {
    struct kvb_pool_extent *e = &p->ext[x];
    e->list = list;
    e->prev = -1;
    e->next = p->head[list];
    if (e->next >= 0) p->ext[e->next].prev = x;
    p->head[list] = x;
}

/* The list an extent belongs on, from its counts and owner. */
static void relist(struct kvb_pool *p, int64_t x) {
    struct kvb_pool_extent *e = &p->ext[x];
    uint8_t want = KVB_EXT_NONE;
    if (e->n_free == e->size) {
        e->claimed = false;
        want = KVB_EXT_FREE;
    } else if (e->n_free > 0) {
        want = e->claimed ? KVB_EXT_RUN : KVB_EXT_OPEN;
    }
    if (want == e->list) return;
    list_remove(p, x);
    if (want != KVB_EXT_NONE) list_push(p, x, want);
}

static uint8_t *page_at(const struct kvb_pool *p, int64_t x, int i) {
    const struct kvb_pool_extent *e = &p->ext[x];
    return p->slabs[e->slab].base + (size_t)(e->first + i) * p->page_bytes;
}

/* Takes page i (free) of extent x. */
static uint8_t *take_page(struct kvb_pool *p, int64_t x, int i) {
    struct kvb_pool_extent *e = &p->ext[x];
    e->free_bits &= ~((uint64_t)1 << i);
    e->n_free--;
    p->n_free--;
    relist(p, x);
    return page_at(p, x, i);
}

static int lowest_free(const struct kvb_pool_extent *e) { return __builtin_ctzll(e->free_bits); }
static int highest_free(const struct kvb_pool_extent *e) { return 63 - __builtin_clzll(e->free_bits); }

/* Extent and page index of a page of this pool, or -1 when it is not one. */
static int64_t find_page(const struct kvb_pool *p, const uint8_t *pg, int *idx) {
    int64_t lo = 0, hi = p->n_slabs - 1, s = -1;
    while (lo <= hi) { /* the last slab whose base is <= pg */
        const int64_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)p->slabs[mid].base <= (uintptr_t)pg) { s = mid; lo = mid + 1; }
        else hi = mid - 1;
    }
    if (s < 0) return -1;
    const size_t off = (size_t)((uintptr_t)pg - (uintptr_t)p->slabs[s].base);
    const int64_t page = (int64_t)(off / p->page_bytes);
    if (off % p->page_bytes || page >= p->slabs[s].n_pages) return -1;
    const int64_t x = p->slabs[s].ext0 + page / p->extent_pages;
    *idx = (int)(page % p->extent_pages);
    return x;
}

/* Adds one slab (up to pages_per_slab pages, within capacity) as FREE
 * extents. Unchanged on failure (array capacities may grow). */
static kvb_status add_slab(struct kvb_pool *p, int64_t want) {
    int64_t n = KVB_MAX(want, (int64_t)p->pages_per_slab);
    n = KVB_MIN(n, p->cap_pages - p->reserved);
    if (n <= 0) return KVB_ERR_NOMEM;
    const int64_t n_ext = (n + p->extent_pages - 1) / p->extent_pages;
    if (n_ext > INT32_MAX || p->n_slabs >= INT32_MAX) return KVB_ERR_NOMEM;
    if (kvb_grow((void **)&p->ext, &p->ext_cap, p->n_ext + n_ext, sizeof(struct kvb_pool_extent)) != KVB_OK) return KVB_ERR_NOMEM;
    if (kvb_grow((void **)&p->slabs, &p->slabs_cap, p->n_slabs + 1, sizeof(struct kvb_pool_slab)) != KVB_OK) return KVB_ERR_NOMEM;
    if ((uint64_t)n > SIZE_MAX / p->page_bytes) return KVB_ERR_NOMEM;
    uint8_t *mem = kvb_huge_alloc((size_t)n * p->page_bytes);
    if (!mem) return KVB_ERR_NOMEM;
    int64_t at = p->n_slabs; /* keep the slabs in address order (find_page) */
    while (at > 0 && (uintptr_t)p->slabs[at - 1].base > (uintptr_t)mem) at--;
    memmove(&p->slabs[at + 1], &p->slabs[at], sizeof(struct kvb_pool_slab) * (size_t)(p->n_slabs - at));
    p->n_slabs++;
    for (int64_t s = at + 1; s < p->n_slabs; s++) /* extents keep their slab's number up to date */
        for (int64_t x = p->slabs[s].ext0, end = x + (p->slabs[s].n_pages + p->extent_pages - 1) / p->extent_pages; x < end; x++)
            p->ext[x].slab = (int32_t)s;
    p->slabs[at] = (struct kvb_pool_slab){mem, n, p->n_ext};
    for (int64_t i = n_ext - 1; i >= 0; i--) { /* pushed last first: the lowest address is taken first */
        const int64_t x = p->n_ext + i;
        struct kvb_pool_extent *e = &p->ext[x];
        const int64_t size = KVB_MIN((int64_t)p->extent_pages, n - i * p->extent_pages);
        memset(e, 0, sizeof *e);
        e->slab = (int32_t)at;
        e->first = (int32_t)(i * p->extent_pages);
        e->size = (uint8_t)size;
        e->n_free = (uint8_t)size;
        e->free_bits = size == 64 ? ~(uint64_t)0 : (((uint64_t)1 << size) - 1);
        e->list = KVB_EXT_NONE;
        list_push(p, x, KVB_EXT_FREE);
    }
    p->n_ext += n_ext;
    p->n_free += n;
    p->reserved += n;
    return KVB_OK;
}

/* One page for a request that does not run: OPEN, FREE, a new slab, then
 * other streams' runs (from the top). NULL: nothing free and no slab. */
static uint8_t *take_shared(struct kvb_pool *p) {
    int64_t x = p->head[KVB_EXT_OPEN];
    if (x >= 0) return take_page(p, x, lowest_free(&p->ext[x]));
    if (p->head[KVB_EXT_FREE] < 0) add_slab(p, 1);
    x = p->head[KVB_EXT_FREE];
    if (x >= 0) return take_page(p, x, 0);
    x = p->head[KVB_EXT_RUN];
    if (x >= 0) return take_page(p, x, highest_free(&p->ext[x]));
    return NULL;
}

/* The next page of a long stream whose last page is tail (or NULL). */
static uint8_t *take_run(struct kvb_pool *p, const uint8_t *tail) {
    int i = 0;
    const int64_t x = tail ? find_page(p, tail, &i) : -1;
    if (x >= 0 && p->ext[x].claimed) {
        struct kvb_pool_extent *e = &p->ext[x];
        if (i + 1 < e->size && (e->free_bits >> (i + 1) & 1)) return take_page(p, x, i + 1);
        e->claimed = false; /* the stream moves on: what is left of its run is shared */
        relist(p, x);
    }
    if (p->head[KVB_EXT_FREE] < 0) add_slab(p, 1);
    const int64_t y = p->head[KVB_EXT_FREE];
    if (y < 0) return take_shared(p);
    p->ext[y].claimed = true;
    return take_page(p, y, 0);
}

static void give_locked(struct kvb_pool *p, uint8_t *const *pages, int64_t n) {
    int64_t freed = 0;
    for (int64_t k = 0; k < n; k++) {
        int i = 0;
        const int64_t x = find_page(p, pages[k], &i);
        if (x < 0) continue; /* not ours: nothing to do (callers never do this) */
        struct kvb_pool_extent *e = &p->ext[x];
        if (e->refs[i] > 0) { /* another holder keeps it */
            if (--e->refs[i] == 0) p->shared--;
            continue;
        }
        e->free_bits |= (uint64_t)1 << i;
        e->n_free++;
        p->n_free++;
        freed++;
        relist(p, x);
    }
    p->in_use -= freed;
}

kvb_status kvb_pool_take_reqs(struct kvb_pool *p, const struct kvb_pool_req *reqs, int64_t n_reqs, uint8_t **out) {
    int64_t total = 0;
    for (int64_t r = 0; r < n_reqs; r++) total += reqs[r].n > 0 ? reqs[r].n : 0;
    if (total <= 0) return KVB_OK;
    pthread_mutex_lock(&p->mu);
    if (total > p->cap_pages - p->in_use) {
        pthread_mutex_unlock(&p->mu);
        return kvb_fail(KVB_ERR_NOMEM, "pool exhausted: need %lld pages, %lld of %lld free",
                        (long long)total, (long long)(p->cap_pages - p->in_use), (long long)p->cap_pages);
    }
    int64_t got = 0;
    for (int64_t r = 0; r < n_reqs; r++) {
        const struct kvb_pool_req *q = &reqs[r];
        const bool runs = q->n > 0 && q->held + q->n >= p->long_pages;
        const uint8_t *tail = q->tail;
        for (int64_t i = 0; i < q->n; i++) {
            uint8_t *pg = runs ? take_run(p, tail) : take_shared(p);
            if (!pg) { /* the allocator failed: every page back where it was */
                p->in_use += got;
                give_locked(p, out, got);
                pthread_mutex_unlock(&p->mu);
                return kvb_fail(KVB_ERR_NOMEM, "pool: cannot reserve %lld more pages of %zu bytes",
                                (long long)(total - got), p->page_bytes);
            }
            out[got++] = pg;
            tail = pg;
        }
    }
    p->in_use += total;
    if (p->in_use > p->peak) p->peak = p->in_use;
    pthread_mutex_unlock(&p->mu);
    return KVB_OK;
}

kvb_status kvb_pool_take(struct kvb_pool *p, int64_t n, uint8_t **out) {
    const struct kvb_pool_req q = {n, 0, NULL};
    return kvb_pool_take_reqs(p, &q, 1, out);
}

void kvb_pool_give(struct kvb_pool *p, uint8_t *const *pages, int64_t n) {
    if (n <= 0) return;
    pthread_mutex_lock(&p->mu);
    give_locked(p, pages, n);
    pthread_mutex_unlock(&p->mu);
}

kvb_status kvb_pool_share(struct kvb_pool *p, uint8_t *const *pages, int64_t n) {
    if (n <= 0) return KVB_OK;
    pthread_mutex_lock(&p->mu);
    for (int64_t k = 0; k < n; k++) { /* every page checked before any changes */
        int i = 0;
        const int64_t x = find_page(p, pages[k], &i);
        const char *why = x < 0 ? "not a page of this pool" : (p->ext[x].free_bits >> i & 1) ? "a free page" : NULL;
        if (why) {
            pthread_mutex_unlock(&p->mu);
            return kvb_fail(KVB_ERR_INVALID, "pool_share: page %lld of %lld is %s", (long long)k, (long long)n, why);
        }
        if (p->ext[x].refs[i] >= KVB_POOL_MAX_REFS) { /* (pages listed twice count once here: bounded below too) */
            pthread_mutex_unlock(&p->mu);
            return kvb_fail(KVB_ERR_NOMEM, "pool_share: a page already has %d holders", KVB_POOL_MAX_REFS + 1);
        }
    }
    int64_t k = 0;
    for (; k < n; k++) {
        int i = 0;
        struct kvb_pool_extent *e = &p->ext[find_page(p, pages[k], &i)];
        if (e->refs[i] >= KVB_POOL_MAX_REFS) break; /* the same page twice in pages, at its limit */
        if (e->refs[i]++ == 0) p->shared++;
    }
    if (k < n) { /* undo: all or nothing */
        give_locked(p, pages, k);
        pthread_mutex_unlock(&p->mu);
        return kvb_fail(KVB_ERR_NOMEM, "pool_share: a page already has %d holders", KVB_POOL_MAX_REFS + 1);
    }
    pthread_mutex_unlock(&p->mu);
    return KVB_OK;
}

bool kvb_pool_is_shared(struct kvb_pool *p, const uint8_t *page) {
    pthread_mutex_lock(&p->mu);
    int i = 0;
    const int64_t x = find_page(p, page, &i);
    const bool shared = x >= 0 && p->ext[x].refs[i] > 0;
    pthread_mutex_unlock(&p->mu);
    return shared;
}

const char *kvb_pool_check(struct kvb_pool *p) {
    const char *why = NULL;
    pthread_mutex_lock(&p->mu);
    int64_t free_pages = 0, pages = 0, on_lists = 0, shared_pages = 0;
    for (int64_t s = 0; s < p->n_slabs && !why; s++) {
        pages += p->slabs[s].n_pages;
        if (s > 0 && (uintptr_t)p->slabs[s - 1].base >= (uintptr_t)p->slabs[s].base) why = "slabs out of address order";
    }
    for (int64_t x = 0; x < p->n_ext && !why; x++) {
        const struct kvb_pool_extent *e = &p->ext[x];
        if (e->slab < 0 || e->slab >= p->n_slabs) { why = "an extent's slab is out of range"; break; }
        if (e->size < 1 || e->size > p->extent_pages || e->first + e->size > p->slabs[e->slab].n_pages) { why = "an extent outside its slab"; break; }
        if (__builtin_popcountll(e->free_bits) != e->n_free) { why = "an extent's free count disagrees with its bits"; break; }
        for (int i = 0; i < e->size && !why; i++) {
            if (e->refs[i] && (e->free_bits >> i & 1)) why = "a free page has holders";
            shared_pages += e->refs[i] > 0;
        }
        if (why) break;
        if (e->size < 64 && (e->free_bits >> e->size)) { why = "free bits past an extent's end"; break; }
        free_pages += e->n_free;
        const uint8_t want = e->n_free == e->size ? KVB_EXT_FREE : e->n_free == 0 ? KVB_EXT_NONE : e->claimed ? KVB_EXT_RUN : KVB_EXT_OPEN;
        if (e->list != want) why = "an extent is on the wrong list";
        if (e->list == KVB_EXT_FREE && e->claimed) why = "a free extent is claimed";
    }
    for (int l = KVB_EXT_FREE; l <= KVB_EXT_RUN && !why; l++)
        for (int64_t x = p->head[l], prev = -1; x >= 0 && !why; prev = x, x = p->ext[x].next) {
            if (p->ext[x].list != l || p->ext[x].prev != prev) why = "a list's links are broken";
            if (++on_lists > p->n_ext) why = "a list loops";
        }
    if (!why) {
        int64_t listed = 0;
        for (int64_t x = 0; x < p->n_ext; x++) listed += p->ext[x].list != KVB_EXT_NONE;
        if (listed != on_lists) why = "an extent is listed but not reachable";
        else if (free_pages != p->n_free) why = "free pages differ from the extents'";
        else if (pages != p->reserved) why = "reserved pages differ from the slabs'";
        else if (p->reserved - p->n_free != p->in_use) why = "pages in use differ from reserved less free";
        else if (p->reserved > p->cap_pages) why = "reserved past the capacity";
        else if (shared_pages != p->shared) why = "shared pages differ from the extents' holders";
    }
    pthread_mutex_unlock(&p->mu);
    return why;
}

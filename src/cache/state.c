/*
 * state.c — the recurrent state of a hybrid model's cache.
 *
 * A layer marked in params.recurrent (Gated DeltaNet) keeps no K/V: its
 * memory is a fixed-size state that every token rewrites whole. Each such
 * layer's state is params.state_rows rows of params.state_row_floats floats;
 * the rows are packed into pages of the cache's pool (rows_per_page to a
 * page, a row never split), so the state is counted, bounded and shared like
 * K/V pages, and a kernel reaches it through one pointer per row.
 *
 * Lifecycle: a fresh or reset cache holds no state pages (the state is
 * zero); the first write takes them all at once (zeroed). A fork shares
 * them (kvb_pool_share) and marks both caches copy-on-write: before the
 * next write each shared page is copied into a page of its own, so a fork
 * continues bit for bit as its source would. Taking pages happens in
 * kvb_state_prepare (from kvb_cache_reserve, or from kvb_cache_state when
 * nothing was reserved), all or nothing; a write never fails.
 *
 * Calls: pool.c only (cache.c and cache_io.c call this file).
 */
#include "cache_impl.h"
#include "pool.h"

static int32_t rows_per_page(const struct kvb_cache *c) {
    return (int32_t)(c->page_bytes / ((size_t)c->params.state_row_floats * sizeof(float)));
}

int64_t kvb_state_layer_pages(const struct kvb_cache_params *p, size_t page_bytes) {
    if (!p->recurrent || p->state_rows <= 0 || p->state_row_floats <= 0) return 0;
    const size_t row = (size_t)p->state_row_floats * sizeof(float);
    if (row > page_bytes) return -1;
    const int64_t rpp = (int64_t)(page_bytes / row);
    return (p->state_rows + rpp - 1) / rpp;
}

kvb_status kvb_state_validate(const struct kvb_cache_params *p, size_t page_bytes) {
    if (!p->recurrent) return KVB_OK;
    int32_t n = 0;
    for (int32_t l = 0; l < p->n_layer; l++) {
        if (p->recurrent[l] > 1) return kvb_fail(KVB_ERR_INVALID, "cache: recurrent[%d] must be 0 or 1, got %d", (int)l, (int)p->recurrent[l]);
        n += p->recurrent[l];
    }
    if (n == 0) return KVB_OK;
    if (p->state_rows < 1 || p->state_rows > (1 << 24))
        return kvb_fail(KVB_ERR_INVALID, "cache: state_rows must be in 1..16777216 with recurrent layers, got %d", (int)p->state_rows);
    if (p->state_row_floats < 1 || p->state_row_floats > (1 << 20))
        return kvb_fail(KVB_ERR_INVALID, "cache: state_row_floats must be in 1..1048576 with recurrent layers, got %d", (int)p->state_row_floats);
    if (kvb_state_layer_pages(p, page_bytes) < 0)
        return kvb_fail(KVB_ERR_INVALID, "cache: a recurrent state row of %zu bytes (state_row_floats %d) does not fit a page of %zu bytes; raise kv.block_size",
                        (size_t)p->state_row_floats * sizeof(float), (int)p->state_row_floats, page_bytes);
    if (p->kv.recall.pages > 0)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "cache: recall (kv.recall.pages %d) on a model with recurrent layers: not implemented", (int)p->kv.recall.pages);
    for (int32_t i = 0; i < p->kv.n_layers; i++)
        if (p->kv.layers && p->kv.layers[i].layer >= 0 && p->kv.layers[i].layer < p->n_layer && p->recurrent[p->kv.layers[i].layer])
            return kvb_fail(KVB_ERR_INVALID, "cache: layer %d is both recurrent and a window layer (kv.layers[%d])", (int)p->kv.layers[i].layer, (int)i);
    return KVB_OK;
}

kvb_status kvb_state_init(struct kvb_cache *c, const struct kvb_cache_params *params) {
    c->params.recurrent = NULL;
    if (!params->recurrent) return KVB_OK;
    int32_t n = 0;
    for (int32_t l = 0; l < params->n_layer; l++) n += params->recurrent[l] != 0;
    if (n == 0) return KVB_OK;
    const int32_t L = params->n_layer;
    if (!(c->recurrent = kvb_malloc((size_t)L)) || !(c->rec_slot = kvb_malloc(sizeof(int32_t) * (size_t)L)))
        return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
    memcpy(c->recurrent, params->recurrent, (size_t)L);
    c->params.recurrent = c->recurrent;
    for (int32_t l = 0, r = 0; l < L; l++) c->rec_slot[l] = c->recurrent[l] ? r++ : -1;
    c->n_rec = n;
    c->state_ppl = (int32_t)kvb_state_layer_pages(params, c->page_bytes);
    const size_t n_pages = (size_t)n * (size_t)c->state_ppl, n_rows = (size_t)n * (size_t)params->state_rows;
    if ((int64_t)n_pages > c->pool->cap_pages) /* before the tables: a hostile image cannot make them huge */
        return kvb_fail(KVB_ERR_INVALID, "cache: the recurrent state (%zu pages of %zu bytes, %d layers of %d rows) does not fit the pool (%lld pages)",
                        n_pages, c->page_bytes, (int)n, (int)params->state_rows, (long long)c->pool->cap_pages);
    if (!(c->state_pages = kvb_calloc(n_pages, sizeof(uint8_t *))) || !(c->state_rows = kvb_calloc(n_rows, sizeof(float *))))
        return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for the recurrent state's tables");
    return KVB_OK;
}

static int64_t n_state_pages(const struct kvb_cache *c) { return (int64_t)c->n_rec * c->state_ppl; }

int64_t kvb_state_pages_held(const struct kvb_cache *c) { return c->n_rec && c->state_pages[0] ? n_state_pages(c) : 0; }

/* The row pointers of the pages held (rows packed page by page, each layer's own pages). */
static void point_rows(struct kvb_cache *c) {
    const int32_t R = c->params.state_rows, rpp = rows_per_page(c);
    const size_t rb = (size_t)c->params.state_row_floats * sizeof(float);
    for (int32_t r = 0; r < c->n_rec; r++)
        for (int32_t i = 0; i < R; i++)
            c->state_rows[(size_t)r * R + i] = (float *)(void *)(c->state_pages[(size_t)r * c->state_ppl + i / rpp] + (size_t)(i % rpp) * rb);
}

void kvb_state_release(struct kvb_cache *c) {
    if (!c->n_rec || !c->state_pages[0]) return;
    kvb_pool_give(c->pool, c->state_pages, n_state_pages(c));
    memset(c->state_pages, 0, sizeof(uint8_t *) * (size_t)n_state_pages(c));
    memset(c->state_rows, 0, sizeof(float *) * (size_t)c->n_rec * (size_t)c->params.state_rows);
    c->state_cow = false;
}

void kvb_state_free(struct kvb_cache *c) {
    if (c->pool && c->state_pages) kvb_state_release(c);
    kvb_free(c->state_pages);
    kvb_free(c->state_rows);
    kvb_free(c->recurrent);
    kvb_free(c->rec_slot);
}

/* Pages a write needs first: all of them without a state, else one per page shared with a fork. */
static int64_t pages_needed(const struct kvb_cache *c) {
    if (!c->n_rec) return 0;
    if (!c->state_pages[0]) return n_state_pages(c);
    if (!c->state_cow) return 0;
    int64_t n = 0;
    for (int64_t i = 0; i < n_state_pages(c); i++) n += kvb_pool_is_shared(c->pool, c->state_pages[i]);
    return n;
}

kvb_status kvb_state_prepare(struct kvb_cache *c) {
    const int64_t n = pages_needed(c);
    if (n == 0) {
        c->state_cow = false;
        return KVB_OK;
    }
    uint8_t *stack[32];
    uint8_t **got = n <= 32 ? stack : kvb_malloc(sizeof(uint8_t *) * (size_t)n);
    if (!got) return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
    kvb_status st = kvb_pool_take(c->pool, n, got);
    if (st != KVB_OK) {
        if (got != stack) kvb_free(got);
        return st;
    }
    const size_t used = (size_t)rows_per_page(c) * (size_t)c->params.state_row_floats * sizeof(float);
    if (!c->state_pages[0]) { /* the state begins at zero */
        for (int64_t i = 0; i < n; i++) {
            memset(got[i], 0, used);
            c->state_pages[i] = got[i];
        }
    } else { /* copy on write: the shared pages for pages of its own */
        for (int64_t i = 0, k = 0; i < n_state_pages(c); i++)
            if (kvb_pool_is_shared(c->pool, c->state_pages[i])) {
                uint8_t *old = c->state_pages[i];
                memcpy(got[k], old, used);
                c->state_pages[i] = got[k++];
                kvb_pool_give(c->pool, &old, 1);
            }
    }
    if (got != stack) kvb_free(got);
    c->state_cow = false;
    point_rows(c);
    return KVB_OK;
}

kvb_status kvb_state_fork(const struct kvb_cache *src, struct kvb_cache *dst) {
    if (!src->n_rec || !src->state_pages[0]) return KVB_OK;
    kvb_status st = kvb_pool_share(dst->pool, src->state_pages, n_state_pages(src));
    if (st != KVB_OK) return st;
    memcpy(dst->state_pages, src->state_pages, sizeof(uint8_t *) * (size_t)n_state_pages(src));
    point_rows(dst);
    dst->state_cow = true;
    return KVB_OK;
}

void kvb_state_mark_shared(struct kvb_cache *c) {
    if (c->n_rec && c->state_pages[0]) c->state_cow = true;
}

float *const *kvb_state_layer_rows(const struct kvb_cache *c, int32_t layer) {
    if (!c->n_rec || layer < 0 || layer >= c->params.n_layer || c->rec_slot[layer] < 0 || !c->state_pages[0]) return NULL;
    return c->state_rows + (size_t)c->rec_slot[layer] * (size_t)c->params.state_rows;
}

kvb_status kvb_state_restore(struct kvb_cache *c, const void *rows) {
    if (!c->n_rec) return KVB_OK;
    kvb_state_release(c);
    kvb_status st = kvb_state_prepare(c);
    if (st != KVB_OK) return st;
    const size_t rb = (size_t)c->params.state_row_floats * sizeof(float);
    for (size_t i = 0; i < (size_t)c->n_rec * (size_t)c->params.state_rows; i++) memcpy(c->state_rows[i], (const uint8_t *)rows + i * rb, rb);
    return KVB_OK;
}

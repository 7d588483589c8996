/*
 * cache_impl.h — private layout of pools, streams and caches, shared by the
 * cache module and the policies (which read and write slot state, and pick
 * victims by logical index; only the cache evicts).
 *
 * A stream is the retained tokens of one (layer, KV head):
 *
 *   pages[0..n_pages)        page p holds physical slots p*B .. p*B+B-1
 *                            layout: K rows [B][row_bytes] then V rows [B][row_bytes]
 *   pos[slot]                original position, -1 = free slot (a hole)
 *   state[j*n_state + i]     policy scores of LOGICAL slot j (kept in logical order so
 *                            policies scan contiguous floats; state[j*n_state] is the
 *                            primary score)
 *   order[j], j < n          physical slot of logical slot j; logical order is
 *                            increasing original position (oldest first)
 *   runs[r]                  contiguous mode: maximal ranges of logical slots
 *                            sharing delta = pos - j (see cache.c, "positions")
 *
 * Holes left by eviction are refilled by the next appends, so a steady
 * evict-one/append-one stream never moves a row. When a stream has two pages
 * worth of holes, compaction moves live rows from the last pages into holes
 * and returns pages to the pool (see compact_stream in cache.c).
 */
#ifndef KVB_CACHE_IMPL_H
#define KVB_CACHE_IMPL_H

#include "../core/core.h"
#include "../ops/ops.h"

#include <pthread.h>

#define KVB_MAX_KV_HEADS 1024 /* kvb_cache_params.n_kv_head limit */

/* ---- pool ---- */
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

#define POOL_PAGES_AVAILABLE(pl) ((pl)->cap_pages - (pl)->in_use)

/* Takes n pages, all or nothing. KVB_ERR_NOMEM leaves the pool unchanged. */
kvb_status kvb_pool_take(struct kvb_pool *pool, int64_t n, uint8_t **out);
/* Returns n pages to the free list. Cannot fail. */
void kvb_pool_give(struct kvb_pool *pool, uint8_t *const *pages, int64_t n);

/* ---- stream ---- */
struct kvb_run {
    int32_t j0;    /* first logical slot of the run */
    int32_t delta; /* pos - j for every slot of the run */
};

struct kvb_stream {
    uint8_t **pages;
    int32_t *page_live;    /* live slots per page */
    int32_t n_pages;
    int64_t pages_cap;

    int32_t *pos;          /* [slot_cap] */
    float *state;          /* [slot_cap * n_state], logical order */
    int32_t *free_slots;   /* stack of holes, [slot_cap] */
    int32_t n_free;
    int32_t *order;        /* [slot_cap] logical -> physical */
    int32_t n;             /* live slots */
    int64_t slot_cap;      /* capacity of the per-slot arrays */

    struct kvb_run *runs;
    int32_t n_runs;
    int64_t runs_cap;

    int32_t budget;        /* limit in force; 0 = unbounded */
    int32_t target;        /* the policy's budget for this stream (kvb_cache_set_budget); the
                            * snapkv family compresses to it, the others keep budget == target */
    int32_t prompt_end;    /* snapkv family: -1 while a prompt is read; after kvb_cache_compress,
                            * the original position where the frozen prompt ends */
    float *fscratch;       /* [slot_cap] policy scratch (keys, masses) */
    int32_t *iscratch;     /* [slot_cap] policy scratch (indices) */
    int32_t *victims;      /* [slot_cap] selection output */
};

/* Bit patterns kept in a float state word (scissorhands' history mask). */
static inline uint32_t kvb_state_bits(const float *w) {
    uint32_t u;
    memcpy(&u, w, 4);
    return u;
}
static inline void kvb_state_set_bits(float *w, uint32_t u) { memcpy(w, &u, 4); }

/* ---- policy instance ---- */
struct kvb_policy_i;
struct kvb_policy {
    const struct kvb_policy_i *iface;
    struct kvb_policy_params params;
    int32_t block_size;
    int32_t obs_last;      /* prefill mass from the last obs_last queries of a chunk; 0 = all */
};


/* ---- cache ---- */
struct kvb_head_scratch; /* cache.c */

struct kvb_cache {
    struct kvb_cache_params params; /* params.rope.freq_factors points at freq_factors */
    float *freq_factors;
    double *inv_freq;
    int32_t n_pairs;
    enum kvb_pos_mode pos_mode;
    struct kvb_pool *pool;
    bool own_pool;
    struct kvb_policy policy;
    int32_t block_shift;
    size_t row_bytes, page_bytes;
    struct kvb_stream *streams;      /* [n_layer * n_kv_head] */
    int64_t *n_past;                 /* [n_layer] next original position */
    struct kvb_head_scratch *scratch;/* [n_kv_head] */
    int64_t pages_peak;
    const struct kvb_kernels *kr;
    kvb_attn_observer_fn observer;
    void *observer_user;
    /* snapkv family, prefill_budget 0: the open prompt's last obs_window
     * queries per layer, pre-RoPE, [ring_cap][ring_heads][head_dim], oldest
     * first; they vote at kvb_cache_compress. Not saved in cache images. */
    float **ring_q;                  /* [n_layer] */
    int32_t *ring_n;                 /* [n_layer] queries held */
    int32_t *ring_heads;             /* [n_layer] query heads per recorded token */
};

static inline struct kvb_stream *kvb_cache_stream(const struct kvb_cache *c, int32_t layer, int32_t head) {
    return &c->streams[(size_t)layer * (size_t)c->params.n_kv_head + (size_t)head];
}

/* Restore hooks (cache.c): reserve arrays for a stream of n slots in n_pages
 * pages; then, once pages, pos and order are filled, rebuild the derived
 * state (live counts, holes, runs). */
kvb_status kvb_stream_reserve(struct kvb_cache *c, struct kvb_stream *s, int32_t n_pages, int32_t n);
void kvb_stream_finish_restore(struct kvb_cache *c, struct kvb_stream *s);
void kvb_cache_note_peak(struct kvb_cache *c);

#endif /* KVB_CACHE_IMPL_H */

/*
 * stream.h — one stream: the retained tokens of one (layer, KV head), their
 * slots in pages from the pool, and the invariants that keep them exact:
 *
 *   pages[0..n_pages)        page p holds physical slots p*B .. p*B+B-1
 *                            layout: K rows [B][row_bytes] then V rows [B][row_bytes_v]
 *   v.pos[slot]              original position, -1 = free slot (a hole)
 *   v.state[j*n_state + i]   policy scores of LOGICAL slot j (logical order,
 *                            so policies scan contiguous floats)
 *   v.order[j], j < v.n      physical slot of logical slot j; logical order is
 *                            increasing original position (oldest first)
 *   v.page_live[p]           live slots of page p
 *   free_slots[0..n_free)    the holes, a stack (the next append pops the top)
 *   runs[r]                  contiguous positions: maximal ranges of logical
 *                            slots sharing delta = pos - j (see cache.c)
 *
 * Holes left by eviction are refilled by the next appends, so a steady
 * evict-one/append-one stream never moves a row. When a stream holds two
 * pages worth of holes, compaction moves live rows from the last pages into
 * holes and returns pages to the pool (kvb_stream_remove); a page other
 * caches also hold (copy-on-write, `cow`) never receives a row. Rows move
 * only out of the last page into holes and an empty page trades places with
 * the last, so a page full of never-evicted slots (a pinned span, at the
 * stream's lowest pages) is never written or moved. The module knows
 * rows only as bytes; it does not know attention, RoPE or policies, and is
 * unit-tested alone (tests/test_stream.c).
 */
#ifndef KVB_STREAM_H
#define KVB_STREAM_H

#include "../policies/policy.h"
#include "pool.h"

/* The geometry every stream of a cache shares. */
struct kvb_stream_geom {
    int32_t block_size;  /* slots per page, a power of two */
    int32_t block_shift; /* log2(block_size) */
    size_t row_bytes;    /* one K row */
    size_t row_bytes_v;  /* one V row */
    size_t v_offset;     /* V rows start this far into a page (block_size * row_bytes) */
    int32_t n_state;     /* policy words per slot */
    bool runs;           /* keep runs (contiguous positions) */
};

struct kvb_run {
    int32_t j0;    /* first logical slot of the run */
    int32_t delta; /* pos - j for every slot of the run */
};

struct kvb_stream {
    struct kvb_stream_view v; /* what policies see */
    uint8_t **pages;
    int64_t pages_cap;
    int32_t *free_slots;      /* [slot_cap] */
    int32_t n_free;
    int64_t slot_cap;         /* capacity of the per-slot arrays */
    struct kvb_run *runs;
    int32_t n_runs;
    int64_t runs_cap;
    int32_t *victims;         /* [slot_cap] selection output */
    bool no_rope;             /* its layer rotates neither keys nor queries (a NoPE layer) */
    bool no_kv;               /* its layer keeps no K/V of its own (recurrent, or a reader of another layer's): it holds nothing */
    int32_t window;           /* > 0: its layer is a model's sliding window of this many positions */
    bool rope_swa;            /* its keys and queries turn by the cache's rope_swa (a window layer's) */
    const float *sink;        /* its query heads' sink logits (the cache's copy), or NULL */
    float *qstat;             /* the policy's query statistics (KVB_PF_QUERY_STATS), qstat_words floats, or NULL */
    int64_t qstat_n;          /* tokens that fed them */
    int32_t qstat_g;          /* query heads they are for */
    size_t qstat_words;
    bool cow;                 /* its pages may have other holders (a forked cache): it writes
                               * only into pages it alone holds (kvb_pool_is_shared), so
                               * compaction never moves a row into a shared page and may
                               * leave more than two pages of holes */
};

/* K row of a physical slot. */
static inline uint8_t *kvb_stream_row(const struct kvb_stream_geom *g, const struct kvb_stream *s, int32_t slot) {
    return s->pages[slot >> g->block_shift] + (size_t)(slot & (g->block_size - 1)) * g->row_bytes;
}
/* V row of a physical slot. */
static inline uint8_t *kvb_stream_vrow(const struct kvb_stream_geom *g, const struct kvb_stream *s, int32_t slot) {
    return s->pages[slot >> g->block_shift] + g->v_offset + (size_t)(slot & (g->block_size - 1)) * g->row_bytes_v;
}

/* Pages the stream needs beyond its holes to take n_new more tokens. */
int64_t kvb_stream_pages_needed(const struct kvb_stream_geom *g, const struct kvb_stream *s, int64_t n_new);

/* Grows the arrays of s for n_pages pages (all their slots) and n_runs runs.
 * All or nothing: KVB_ERR_NOMEM leaves s as it was (capacities may grow). */
kvb_status kvb_stream_reserve(const struct kvb_stream_geom *g, struct kvb_stream *s, int64_t n_pages, int64_t n_runs);

/* Attaches np pages (reserved) as holes; the lowest new slot pops first. */
void kvb_stream_attach(const struct kvb_stream_geom *g, struct kvb_stream *s, uint8_t *const *pages, int64_t np);

/* Undoes the last kvb_stream_attach of np pages when nothing happened since:
 * the last np pages (all holes) leave s, their slots leave the hole stack,
 * and they are written to pages[0..np). */
void kvb_stream_detach(const struct kvb_stream_geom *g, struct kvb_stream *s, uint8_t **pages, int64_t np);

/* Takes a hole for a token at original position pos (greater than every
 * live position) as the new last logical slot, state zeroed; returns its
 * physical slot. A hole must exist. The caller writes the rows. */
int32_t kvb_stream_push(const struct kvb_stream_geom *g, struct kvb_stream *s, int32_t pos);

/* Sorts victims[0..k) ascending and drops duplicates; returns the count. */
int32_t kvb_stream_sort_victims(int32_t *victims, int32_t k);

/* Removes logical slots victims[0..k) (distinct, ascending), then compacts:
 * pages that empty go back to pool. Cannot fail. */
void kvb_stream_remove(const struct kvb_stream_geom *g, struct kvb_stream *s, struct kvb_pool *pool,
                       const int32_t *victims, int32_t k);

/* Removes the last k logical slots, leaving their slots as holes in the
 * order they were taken (the next pushes take the same slots again) and
 * their pages attached: no compaction, nothing goes to the pool (kvzip's
 * reconstruction pass, whose next chunk takes them again). Streams
 * without runs only. Cannot fail. */
void kvb_stream_pop(const struct kvb_stream_geom *g, struct kvb_stream *s, int32_t k);

/* After v.pos, v.order, v.n and the pages were filled (a restore): rebuilds
 * page_live, the holes and the runs. */
void kvb_stream_rebuild(const struct kvb_stream_geom *g, struct kvb_stream *s);

/* Returns every page to pool and empties s (arrays kept). */
void kvb_stream_clear(struct kvb_stream *s, struct kvb_pool *pool);

/* Frees the arrays of an empty (cleared) stream. */
void kvb_stream_free(struct kvb_stream *s);

/* Bytes of metadata held by s (its arrays). */
size_t kvb_stream_meta_bytes(const struct kvb_stream_geom *g, const struct kvb_stream *s);

/* Checks every invariant above; returns NULL or what is broken (tests). */
const char *kvb_stream_check(const struct kvb_stream_geom *g, const struct kvb_stream *s);

#endif /* KVB_STREAM_H */

/*
 * cache_impl.h — private layout of a cache, shared by its modules:
 *   stream.c   slots, holes, runs, victims, compaction (stream.h)
 *   attend.c   the attention workers: rows, RoPE, runs as a query sees them
 *   cache.c    the public cache API: params, prepare/apply, eviction by policy,
 *              prompt compression
 *   cache_io.c images (save/restore)
 *   recall.c   reversible eviction: evicted rows to the cold tier (cold.c),
 *              page summaries, scoring, the recall area
 *   state.c    the recurrent state of a hybrid model's layers (params.recurrent):
 *              fixed-size rows in pool pages, shared copy-on-write by forks
 * A cache is n_layer x n_kv_head streams (layer-major) sharing one geometry.
 *
 * Files call one way (tests/src_layers.py): cache_io.c -> cache.c ->
 * attend.c -> recall.c -> cold.c; cache.c also calls stream.c, pool.c,
 * recall.c, cold.c, state.c and kv_params.c (which calls none of them);
 * cache_io.c also calls state.c; stream.c -> pool.c; state.c -> pool.c. All of them read the layout below, but none calls a file above
 * it: cache.c prepares what the workers need (slots, scratch, recall pages)
 * before attend.c runs, attend.c reaches recall only through
 * kvb_recall_area and kvb_recall_refresh, and recall.c takes from the cache
 * only this header's inline kvb_cache_stream_index.
 */
#ifndef KVB_CACHE_IMPL_H
#define KVB_CACHE_IMPL_H

#include "../ops/ops.h"
#include "cold.h"
#include "stream.h"

/* ---- recall (recall.c) ---- */

/* One stream's part of the cold tier and its recall area. Touched only by
 * the worker that owns the stream (and serially by prepare). */
struct kvb_recall_stream {
    uint8_t *stage;       /* the cold page being filled: a record (cold.h) */
    int32_t n_stage;
    float *stage_lohi;    /* [3][d] per-channel min, max, sum of the staged keys */
    int64_t n_cold, cap;  /* sealed cold pages of this stream */
    int64_t *rec;         /* [cap] their record ids */
    float *lohi;          /* [cap][2][d] their summaries: per-channel key min, max */
    float *sums;          /* [cap][d] per-channel key sums (centroid scoring) */
    float *score;         /* [cap + 1] scratch: bounds of the last scoring */
    uint8_t **pages;      /* [R] recall-area pages from the pool, NULL until taken */
    int64_t *loaded;      /* [R] cold page held by each area page; -1 none, -2 the staged one */
    int32_t *pos;         /* [R * B] original position per area slot, -1 unused */
    int32_t *order;       /* [R * B] area slots by increasing position */
    int32_t n;            /* tokens in the area */
    bool no_rope;         /* the stream's layer rotates nothing: its shadow keys are not rotated back */
    float *shadow;        /* capped positions: f32 copies of the area's rows, K rotated back to
                           * position 0 (pre-RoPE), [2^shadow_shift][d] K then as many V rows */
    int32_t shadow_shift;
    int32_t since;        /* attention calls since the last choice */
    bool reserved;        /* pages taken by the last kvb_cache_reserve */
    int64_t scorings, loads, score_ns, load_ns, lost;
};

/* ---- cache ---- */
struct kvb_head_scratch; /* attend.c */

struct kvb_cache {
    struct kvb_cache_params params; /* params.rope.freq_factors points at freq_factors */
    float *freq_factors;
    uint8_t *no_rope;               /* [n_layer] copy of params.no_rope, or NULL */
    float *sinks;                   /* [n_layer][n_sink_heads] copy of params.sinks, or NULL */
    double *inv_freq;
    double *inv_freq_swa;           /* [n_pairs]: rope_swa's, when params.rope_swa.base > 0 */
    float *freq_factors_swa;
    int32_t *window;                /* [n_layer]: each layer's sliding window, 0 = global (kv.layers) */
    struct kvb_kv_layer *layers;    /* copy of params.kv.layers */
    int32_t n_pairs;
    enum kvb_pos_mode pos_mode;
    struct kvb_pool *pool;
    bool own_pool;
    struct kvb_policy policy;
    struct kvb_stream_geom geom;     /* every stream's: page size, row bytes, state words, runs */
    size_t page_bytes;
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
    /* kvb_cache_reserve: pages attached to each stream by the last reserve,
     * while nothing has happened since (has_reserve), so unreserve can undo it */
    int32_t *reserved;               /* [n_layer * n_kv_head] */
    bool has_reserve;
    /* recall: params.recall.pages > 0 */
    struct kvb_recall_stream *recall; /* [n_layer * n_kv_head] */
    struct kvb_cold *cold;
    struct kvb_cold_geom cold_geom;
    bool recall_paused;               /* kvb_cache_set_recall(false): evictions still go cold */
    float *recall_cs_step;            /* capped: cos/sin of -k * inv_freq, k < block_size ([B][2 * n_pairs]) */
    /* recurrent state (state.c): params.recurrent layers keep no K/V (their
     * streams stay empty) but state_rows rows of state_row_floats floats each */
    uint8_t *recurrent;               /* [n_layer] copy of params.recurrent, or NULL */
    int32_t *rec_slot;                /* [n_layer] index among the recurrent layers, -1 for the others */
    int32_t n_rec;                    /* recurrent layers (0: none) */
    int32_t state_ppl;                /* pages per recurrent layer */
    uint8_t **state_pages;            /* [n_rec * state_ppl]: all NULL while the state is zero */
    float **state_rows;               /* [n_rec * state_rows] each row's address in its page */
    bool state_cow;                   /* pages may be shared with a fork: copy before writing */
    bool state_reserved;              /* the last kvb_cache_reserve took the state's first pages (unreserve gives them back) */
    /* KV-shared layers (params.kv_source): a reader attends over its source's streams */
    int32_t *kv_src;                  /* [n_layer] copy of params.kv_source, or NULL */
    int32_t *last_reader;             /* [n_layer] a source's last reader, -1 for the others */
    bool *evict_pending;              /* [n_layer] a source's eviction waits for its last reader */
    int32_t n_pairs_swa;              /* rope_swa.n_dims / 2 (window layers), n_pairs without rope_swa */
    int32_t *kvh;                     /* [n_layer] the KV heads each layer holds (params.kv_heads, or n_kv_head) */
    int32_t min_kvh;                  /* the fewest of them */
    size_t v_in_k;                    /* head_dim_v > 0 (latent rows): the value's byte offset within a K row */
    /* kvzip (KVB_PF_RECONSTRUCT): a reconstruction pass between kvb_cache_recon_begin and _end scores
     * positions [recon_lo, recon_hi); recon_ctx[l] is layer l's next position when it began (its rows
     * from there are the pass's, dropped at the end); recon_buf the scoring's keys and logits; gviews,
     * gptrs: every stream's view for budgets_global */
    bool recon;
    int64_t recon_lo, recon_hi;
    int64_t *recon_ctx;               /* [n_layer] */
    float *recon_buf;
    size_t recon_cap;                 /* floats */
    struct kvb_stream_view *gviews;   /* [n_layer * n_kv_head] */
    struct kvb_stream_view **gptrs;
    /* compress-on-park (kvb_cache_park_begin .. end): the passes' scores go to pscore[stream][logical
     * slot] instead of the policy's state, whatever the policy */
    float **pscore;                   /* [n_layer * n_kv_head], NULL when not parking */
};

/* The most query heads per KV head (DeepSeek-V3: 128 over one latent row);
 * more than KVB_ATTN_MAX_ROWS attend in groups of that many (attend.c). */
#define KVB_CACHE_MAX_GROUP 1024
#define KVB_QSTAT_MAX_WORDS (((size_t)64 << 20) / sizeof(float)) /* a stream's query statistics (expected-attention): 64 MiB */

/* The width of a token's value (out's rows): head_dim_v for latent rows, else head_dim. */
static inline int32_t kvb_cache_dv(const struct kvb_cache *c) {
    return c->params.head_dim_v > 0 ? c->params.head_dim_v : c->params.head_dim;
}

static inline bool kvb_cache_is_recurrent(const struct kvb_cache *c, int32_t layer) {
    return c->recurrent && c->recurrent[layer];
}
/* A KV-shared layer: it reads its source's streams, its own stay empty. */
static inline bool kvb_cache_is_reader(const struct kvb_cache *c, int32_t layer) {
    return c->kv_src && c->kv_src[layer] >= 0;
}
/* Whether the layer's own streams hold K/V (not recurrent, not a reader). */
static inline bool kvb_cache_holds_kv(const struct kvb_cache *c, int32_t layer) {
    return !kvb_cache_is_recurrent(c, layer) && !kvb_cache_is_reader(c, layer);
}

/* state.c */
/* Pages one recurrent layer's state takes at page_bytes (0 without; -1: a row exceeds a page). */
int64_t kvb_state_layer_pages(const struct kvb_cache_params *p, size_t page_bytes);
kvb_status kvb_state_validate(const struct kvb_cache_params *p, size_t page_bytes);
/* The cache's tables (no pages: the state starts at zero); kvb_state_free releases all. */
kvb_status kvb_state_init(struct kvb_cache *c, const struct kvb_cache_params *params);
void kvb_state_free(struct kvb_cache *c);
/* Back to zero: the pages go back to the pool. */
void kvb_state_release(struct kvb_cache *c);
/* Makes the state writable: takes its pages (zeroed) or copies the ones a
 * fork shares, all or nothing (KVB_ERR_NOMEM: unchanged). */
kvb_status kvb_state_prepare(struct kvb_cache *c);
/* dst (fresh, same params and pool) holds src's state pages too; both copy on write. */
kvb_status kvb_state_fork(const struct kvb_cache *src, struct kvb_cache *dst);
void kvb_state_mark_shared(struct kvb_cache *c);
int64_t kvb_state_pages_held(const struct kvb_cache *c);
/* A recurrent layer's rows (NULL while the state is zero or for another layer). */
float *const *kvb_state_layer_rows(const struct kvb_cache *c, int32_t layer);
/* The state from an image: n_rec * state_rows rows of state_row_floats floats, packed. */
kvb_status kvb_state_restore(struct kvb_cache *c, const void *rows);

static inline struct kvb_stream *kvb_cache_stream(const struct kvb_cache *c, int32_t layer, int32_t head) {
    return &c->streams[(size_t)layer * (size_t)c->params.n_kv_head + (size_t)head];
}

void kvb_cache_note_peak(struct kvb_cache *c);

/* The pinned span (kv.keep) of stream s: how many of its first logical
 * slots hold an original position below keep. They are never evicted, so
 * they lead the logical order; 0 for a sliding-window layer (the model's
 * window bounds it, not a policy). O(log keep): positions increase. */
static inline int32_t kvb_cache_pinned(const struct kvb_cache *c, const struct kvb_stream *s) {
    const int32_t keep = c->params.kv.keep;
    if (keep <= 0 || s->window) return 0;
    int32_t lo = 0, hi = KVB_MIN(s->v.n, keep); /* distinct positions >= 0: at most keep lie below keep */
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (s->v.pos[s->v.order[mid]] < keep) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* What the policy sees of s: its slots after the pinned span (their state,
 * order and count), everything else as s's own view; returns the span's
 * length, the view's logical slot j being s's slot j + span. The policy
 * never sees, scores or chooses a pinned slot; the view's budget is s's,
 * which so bounds the tokens after the span. With keep 0 it is s->v. */
void kvb_attend_view_rows(const struct kvb_stream_view *v, int32_t j, float *k, float *val);
void kvb_attend_view_rope_mean(const struct kvb_stream_view *v, int64_t from, int32_t T, float *cs);
void kvb_attend_view_rope_apply(const struct kvb_stream_view *v, const float *cs, float *x);
static inline int32_t kvb_cache_policy_view(const struct kvb_cache *c, const struct kvb_stream *s, struct kvb_stream_view *v) {
    const int32_t pin = kvb_cache_pinned(c, s);
    *v = s->v;
    v->rows = kvb_attend_view_rows; /* the view's slot j is the stream's j + pin */
    v->rows_at[0] = c;
    v->rows_at[1] = s;
    v->rows_pin = pin;
    v->head_dim = c->params.head_dim;
    v->value_dim = c->params.head_dim_v ? c->params.head_dim_v : c->params.head_dim;
    v->qstat = s->qstat; /* the policy updates the stream's statistics through the view (on_queries) */
    v->qstat_n = (int64_t *)&((struct kvb_stream *)s)->qstat_n;
    v->qstat_g = s->qstat_g;
    v->rope_mean = kvb_attend_view_rope_mean;
    v->rope_apply = kvb_attend_view_rope_apply;
    if (pin) {
        v->n -= pin;
        v->order += pin;
        if (c->geom.n_state) v->state += (size_t)pin * (size_t)c->geom.n_state;
    }
    return pin;
}

static inline size_t kvb_cache_stream_index(const struct kvb_cache *c, const struct kvb_stream *s) {
    return (size_t)(s - c->streams);
}

/* recall.c */
kvb_status kvb_recall_init(struct kvb_cache *c);
void kvb_recall_free(struct kvb_cache *c);
/* Empties the cold tier and recall areas (area pages back to the pool). */
void kvb_recall_reset(struct kvb_cache *c);
/* Area pages stream i must take before its next attention (0 or R). */
int32_t kvb_recall_pages_needed(const struct kvb_cache *c, size_t i);
void kvb_recall_attach(struct kvb_cache *c, size_t i, uint8_t *const *pages, bool reserve);
/* Gives back the pages the last reserve attached. */
void kvb_recall_unreserve(struct kvb_cache *c, size_t i);
/* Victims (logical slots of s, ascending) leave for the cold tier. */
void kvb_recall_evicted(struct kvb_cache *c, struct kvb_stream *s, const int32_t *victims, int32_t k);
/* Chooses and loads stream s's recalled pages for the n_rows rotated, scaled
 * query rows qrot (unless reused: recall.every). */
void kvb_recall_refresh(struct kvb_cache *c, const struct kvb_stream *s, const float *qrot, int32_t n_rows);
/* Restoring an image (cache_io.c). Record bodies are the positions, K rows
 * and V rows of block_size tokens (a cold record without its header). */
size_t kvb_recall_body_bytes(const struct kvb_cache *c);
/* Stream i's next sealed page, rec a record with its body filled: to the
 * cold tier and its index, the summary rebuilt (KVB_ERR_NOMEM). */
kvb_status kvb_recall_restore_page(struct kvb_cache *c, size_t i, uint8_t *rec);
/* Stream i's staged page: its first n tokens written into the stage record. */
void kvb_recall_restore_stage(struct kvb_cache *c, size_t i, int32_t n);
/* Stream i's recall area: its pages taken from the pool, to be filled (rows,
 * pos, loaded) and then finished by kvb_recall_area_done (shadows, order). */
kvb_status kvb_recall_restore_area(struct kvb_cache *c, size_t i);
void kvb_recall_area_done(struct kvb_cache *c, size_t i);
/* Tokens held by area page a of r: its leading slots with a position
 * (load_page fills a prefix and marks the rest -1). */
int32_t kvb_recall_area_rows(const struct kvb_recall_stream *r, int32_t a, int32_t B);
/* The recall area of s: its view and logical positions (NULL, n 0 without). */
const struct kvb_recall_stream *kvb_recall_area(const struct kvb_cache *c, const struct kvb_stream *s);
/* Upper bound of q . k for keys within lohi ([2][d]: per-channel min, max). */
float kvb_recall_bound(const float *q, const float *lohi, int32_t d);
/* Area pages held by the cache. */
int64_t kvb_recall_pages_held(const struct kvb_cache *c);
/* Host bytes of the cold index and staging (metadata). */
size_t kvb_recall_meta_bytes(const struct kvb_cache *c);

/* ---- attention (attend.c) ---- */

struct kvb_head_scratch *kvb_head_scratch_new_array(int32_t n);
void kvb_head_scratch_free_array(struct kvb_head_scratch *h, int32_t n);
struct kvb_head_scratch *kvb_head_scratch_at(struct kvb_head_scratch *arr, int32_t i);
/* Scratch of one KV-head worker for streams of up to n keys and G query heads. */
kvb_status kvb_head_scratch_reserve(const struct kvb_cache *c, struct kvb_head_scratch *h, int64_t n, int32_t G);
/* The column-mass / weights row of a worker's scratch ([n] floats). */
float *kvb_head_scratch_col(struct kvb_head_scratch *h);

/* Appends one token (k, v: pre-RoPE rows of this head, or NULL) at original
 * position pos into a prepared hole; the key is stored rotated. Calls the
 * policy's on_append. */
void kvb_attend_append(struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *h, const float *k,
                       const float *v, int32_t pos);

/* Attention of the G query heads (q rows, pre-RoPE) of the token just
 * appended (original position pq) over stream s; writes out. With w, also the
 * mean probability of each logical slot over the G heads. */
void kvb_attend_decode(struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *h, const float *q, int32_t G,
                       int64_t pq, float *out, float *w);

/* Causal attention of C query tokens (q [C][n_head][d], pre-RoPE; token i at
 * original position p0 + i and logical slot n_prev + i, already appended) of
 * KV head h's group over stream s. Writes the group's output rows into out
 * ([C][n_head][d]) unless NULL. With col, adds the column mass of tokens
 * [obs_from, C) — their softmax rows, scaled 1/G so that the G query heads
 * average — into col[0..s->v.n). Prefill and the compress vote both use it. */
void kvb_attend_tokens(struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *hs, int32_t h,
                       const float *q, int32_t n_head, int32_t G, int32_t C, int32_t n_prev, int64_t p0, float *out,
                       int32_t obs_from, float *col);

/* kvzip's reconstruction score (kvb_cache_recon_begin): the C pass tokens
 * of q (as kvb_attend_tokens: token i at position p0 + i, logical slot
 * n_prev + i, already appended) score stream s's logical slots [lo, hi):
 * score[j * stride] = max(itself, the largest softmax weight slot j gets from any
 * of the G query heads of KV head h at any token), each softmax over the
 * slots [0, n_sink) (those before lo), [lo, hi) and the pass's own [own,
 * n_prev + i]. buf: room for that many keys and logits ([K][d + 1] floats). */
void kvb_attend_recon_score(const struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *hs, int32_t h, const float *q,
                            int32_t n_head, int32_t G, int32_t C, int32_t n_prev, int64_t p0, int32_t n_sink, int32_t lo, int32_t hi,
                            int32_t own, float *buf, float *score, size_t stride);

/* Reads logical slot j's K and V rows (either may be NULL) as floats. */
void kvb_attend_read_slot(const struct kvb_cache *c, const struct kvb_stream *s, int32_t j, float *k, float *v);

#endif /* KVB_CACHE_IMPL_H */

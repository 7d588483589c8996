/*
 * policy.h — the policy vtable, and the narrow view of a stream a policy sees.
 * The cache asks, the policy answers: it keeps per-slot score words, reads
 * attention evidence, and chooses victims by logical index; the cache does
 * all eviction, compaction and page management. Policies include only core:
 * they never see pages, the pool, the cache or its threads.
 *
 * Slots (all optional but select; NULL means the default in brackets):
 *   on_append  new slot at logical j with its pre-RoPE key k (may be NULL)
 *              [state zeroed]
 *   observe    one attention row w[0..n) over the stream's logical slots:
 *              decode weights (mean over the query heads of the KV head) or a
 *              prefill chunk's column mass; `prefill` says which [ignored]
 *   select     choose at least n_over victims (logical indexes, any order,
 *              never a sink) into victims; returns how many
 *   combine    after every stream of a layer has observed a decode row or a
 *              prefill chunk, before eviction: layer-wide scores (tova's
 *              layer scope) [none]
 *   budgets    at kvb_cache_compress: set s->budget of every stream of a
 *              layer to what its compressed prompt keeps (pyramidkv, adakv),
 *              from the prompt length P [each stream keeps its target]
 *   peak_tokens  the most tokens a stream holds between steps for a prompt of
 *              P tokens (a chunk read before eviction not counted), for the
 *              one sizing rule, kvb_kv_seq_bytes [the budget]
 *   recent, prefill_queries, validate: see the struct.
 *
 * Victim choice must depend only on logical order, positions and state, never
 * on physical slot numbers: a restored cache has another physical layout and
 * must continue bit-identically. (block-h2o reads page geometry, which a
 * cache image saves exactly.) Adding a policy: one file with its vtable, one
 * line in registry.c, one enum value in kvbound.h.
 *
 * Files call one way (tests/src_layers.py): registry.c (the table, and what
 * is asked by policy id: defaults, names, checks, peak tokens) -> each
 * policy's file -> policy.c (helpers shared by the policies, which call
 * nothing else of the folder).
 */
#ifndef KVB_POLICY_H
#define KVB_POLICY_H

#include "../core/core.h"

/* What a policy sees of one stream (the retained tokens of one layer and KV
 * head after its pinned span, kv.keep: the cache offers only those, so a
 * policy never sees, scores or names a pinned token, and the budget bounds
 * the tokens after the span). The cache owns the arrays; a policy writes
 * only state, the scratch arrays and (in `budgets`) budget.
 *   n            live slots, logical order = increasing original position
 *   state        [n * n_state] score words of logical slot j at j*n_state
 *   pos[slot]    original position of physical slot `slot`, -1 = a hole; a
 *                page may also hold slots the view does not show (the pinned
 *                span): a policy that takes whole pages must leave those pages
 *   order[j]     physical slot of logical slot j
 *   page_live    live slots of each of the n_pages pages (page = slot / block_size)
 *   budget       limit in force (0 = unbounded); target: the budget set for
 *                the stream; prompt_end: snapkv family, -1 while a prompt is
 *                read, else the original position where the frozen prompt ends
 *   fscratch, iscratch   [capacity] scratch for select/observe */
/* The widest row a policy may be shown: the cache's head_dim bound (core.h) */
#define KVB_POLICY_MAX_DIM KVB_MAX_ROW_DIM

struct kvb_stream_view {
    int32_t n;
    float *state;
    int32_t *pos;
    int32_t *order;
    int32_t *page_live;
    int32_t n_pages;
    int32_t budget, target, prompt_end;
    float *fscratch;
    int32_t *iscratch;
    /* The rows of the view's logical slot j as attention reads them: the key
     * rotated at its original position (head_dim floats) and the value
     * (value_dim), dequantized, at most KVB_POLICY_MAX_DIM each (k or v may be NULL), for policies that score keys or
     * values (keydiff). Set by the cache on every view it offers; rows_at is
     * the cache's own context (the stream, the pinned span). */
    void (*rows)(const struct kvb_stream_view *s, int32_t j, float *k, float *v);
    const void *rows_at[2];
    int32_t rows_pin, head_dim;
    int32_t value_dim; /* floats of a value row: head_dim, or a latent cache's head_dim_v (the K row's tail) */
    /* KVB_PF_QUERY_STATS (expected-attention): what the cache keeps for the
     * policy of the queries of the stream's qstat_g query heads, qstat
     * ([qstat_g + 1][head_dim + head_dim^2] floats, the policy's layout; the
     * last block is scratch) and the count of tokens that fed them
     * (*qstat_n); qstat NULL before the first query. rope_mean writes the
     * mean of the rotation tables of positions [from, from + T) into cs
     * ([head_dim] floats), rope_apply applies such a table to x in place:
     * the cache's own rotation of the stream's layer (none on a layer
     * without RoPE). */
    float *qstat;
    int64_t *qstat_n;
    int32_t qstat_g;
    void (*rope_mean)(const struct kvb_stream_view *s, int64_t from, int32_t T, float *cs);
    void (*rope_apply)(const struct kvb_stream_view *s, const float *cs, float *x);
};

/* Bit patterns kept in a float state word (scissorhands' history mask). */
static inline uint32_t kvb_state_bits(const float *w) {
    uint32_t u;
    memcpy(&u, w, 4);
    return u;
}
static inline void kvb_state_set_bits(float *w, uint32_t u) { memcpy(w, &u, 4); }

/* A policy instance: its vtable, parameters and the cache's page size. */
struct kvb_policy_i;
struct kvb_policy {
    const struct kvb_policy_i *iface;
    struct kvb_policy_params params;
    int32_t block_size;
    int32_t obs_last;      /* prefill mass from the last obs_last queries of a chunk; 0 = all */
    uint32_t flags;        /* the vtable's flags, and KVB_PF_COMPRESS where params.compress_prompt turns it on */
};

#define KVB_PF_DECODE_ATTN 1u   /* wants decode attention weights */
#define KVB_PF_PREFILL_MASS 2u  /* wants prefill column mass */
#define KVB_PF_NEVER_EVICT 4u   /* full */
#define KVB_PF_COMPRESS 8u      /* prompt compression at kvb_cache_compress (snapkv family) */
#define KVB_PF_WHOLE_PAGES 16u  /* evicts whole pages: up to a page less one more than the budget asks (block-h2o) */
#define KVB_PF_QUERY_STATS 32u  /* the cache keeps statistics of the queries for it (qstat, on_queries) */
/* params.compress_prompt 1 makes it a prompt compressor (expected-attention):
 * a prompt is read as the snapkv family's (whole, or to prefill_budget between
 * chunks; no queries recorded, no votes) and kvb_cache_compress evicts it to
 * the budget with select; the budget then stays the target and every decode
 * step evicts by select again (no frozen prompt, no decode_budget) */
#define KVB_PF_COMPRESS_OPTIONAL 64u
#define KVB_PF_RECONSTRUCT 128u /* kvzip: scores come from the engine's reconstruction pass (kvb_cache_recon_begin), not a vote */

struct kvb_policy_i {
    const char *name;
    const char *describe;     /* one line: rule; parameters with defaults */
    uint32_t flags;
    int32_t n_state;          /* 32-bit words per slot */
    enum kvb_pos_mode default_pos;
    void (*defaults)(struct kvb_policy_params *p);
    /* protected most recent tokens of a stream with `room` = budget - n_sink
     * slots when params.n_recent is -1 [0] */
    int32_t (*recent)(const struct kvb_policy_params *p, int32_t room);
    /* how many of a prefill chunk's last queries give evidence (0 = all) [0] */
    int32_t (*prefill_queries)(const struct kvb_policy_params *p);
    /* parameter checks of this policy beyond kvb_policy_validate's ranges;
     * fails through kvb_fail naming the parameter [none] */
    kvb_status (*validate)(const struct kvb_policy_params *p);
    void (*on_append)(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t j, const float *k, int32_t d);
    void (*observe)(const struct kvb_policy *p, struct kvb_stream_view *s, const float *w, int32_t n, bool prefill);
    /* KVB_PF_QUERY_STATS: the pre-RoPE queries of n_tok tokens (original
     * positions pos0, pos0 + 1, ...) of the stream's G query heads: token
     * i's head g at q[i * stride + g * head_dim], before any eviction of the
     * step or chunk; updates s->qstat [none] */
    void (*on_queries)(const struct kvb_policy *p, struct kvb_stream_view *s, const float *q, int32_t n_tok, int32_t G, size_t stride,
                       int64_t pos0);
    int32_t (*select)(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims);
    void (*combine)(const struct kvb_policy *p, struct kvb_stream_view *const *streams, int32_t n_streams);
    void (*budgets)(const struct kvb_policy *p, struct kvb_stream_view *const *streams, int32_t n_streams, int32_t layer,
                    int32_t n_layer, int32_t base_budget, int32_t prompt_len);
    int64_t (*peak_tokens)(const struct kvb_policy_params *p, int64_t n_prompt);
    /* at kvb_cache_compress, before any layer evicts: set s->budget of every
     * stream of every layer whose prompt compresses at once, from their
     * budgets as the layer would set them (kvzip's non-uniform head budgets)
     * [per layer: budgets] */
    void (*budgets_global)(const struct kvb_policy *p, struct kvb_stream_view *const *streams, int32_t n_streams);
};

extern const struct kvb_policy_i kvb_policy_full, kvb_policy_window, kvb_policy_streaming, kvb_policy_h2o,
    kvb_policy_tova, kvb_policy_scissorhands, kvb_policy_snapkv, kvb_policy_pyramidkv, kvb_policy_adakv,
    kvb_policy_knorm, kvb_policy_block_h2o, kvb_policy_lminfinite, kvb_policy_keydiff, kvb_policy_expected_attention,
    kvb_policy_kvzip;

const struct kvb_policy_i *kvb_policy_iface(enum kvb_policy_id id);

/* Checks every parameter of p (ranges, then the policy's own validate), and
 * that a budget exists where the policy needs one. KVB_ERR_INVALID names the
 * policy and parameter. */
kvb_status kvb_policy_validate(const struct kvb_policy_params *p);

/* A policy instance for params (already validated) in a cache of pages of
 * block_size slots. */
struct kvb_policy kvb_policy_make(const struct kvb_policy_params *params, int32_t block_size);

/* The most tokens a stream of policy p holds between steps for a prompt
 * of n_prompt tokens: n_ctx for a policy that never evicts, else the
 * vtable's peak_tokens, else the budget. */
int64_t kvb_policy_peak_tokens(const struct kvb_policy_params *p, int64_t n_prompt, int64_t n_ctx);

/* ---- helpers shared by policies (policy.c) ---- */

/* Protected recent tokens for a stream with this budget under p's rule
 * (params.n_recent, else the vtable's `recent`), at most budget - n_sink. */
int32_t kvb_policy_recent(const struct kvb_policy *p, int32_t budget);

/* Picks the k logical slots with the smallest key[j] among candidates
 * [lo, hi) (ties: older first) into victims; widens hi to s->n if the range
 * is too small (the recent window yields before sinks do). Returns the count. */
int32_t kvb_pick_lowest(struct kvb_stream_view *s, const float *key, int32_t lo, int32_t hi, int32_t k, int32_t *victims);

/* Oldest-first eviction of k slots from [lo, ...): window and streaming. */
int32_t kvb_pick_oldest(struct kvb_stream_view *s, int32_t lo, int32_t k, int32_t *victims);
/* The select of window, streaming and lminfinite: the oldest after the sinks. */
int32_t kvb_select_oldest_after_sinks(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims);

/* SnapKV scoring shared by snapkv, pyramidkv and adakv:
 *   observe: state[0] += the observation queries' votes (raw, unpooled);
 *   select:  prompt open (prompt_end < 0): lowest pooled vote among the
 *            candidates outside sinks and the last obs_window; prompt frozen:
 *            the oldest generated tokens (pos >= prompt_end), then, only if
 *            a budget was lowered below the prompt, lowest pooled vote.
 *   kvb_snapkv_pooled: the pooled votes of logical slots [0, m) into out
 *            (kernel pool_kernel, stride 1, same padding; avg divides by
 *            the kernel, padding counted as zero). */
void kvb_snapkv_observe(const struct kvb_policy *p, struct kvb_stream_view *s, const float *w, int32_t n, bool prefill);
int32_t kvb_snapkv_select(const struct kvb_policy *p, struct kvb_stream_view *s, int32_t n_over, int32_t *victims);
void kvb_snapkv_pooled(const struct kvb_policy *p, const struct kvb_stream_view *s, int32_t m, float *out);

/* `recent` rules shared by several policies. */
int32_t kvb_recent_all(const struct kvb_policy_params *p, int32_t room);        /* window, streaming, lminfinite */
int32_t kvb_recent_heavy(const struct kvb_policy_params *p, int32_t room);      /* h2o, block-h2o */
int32_t kvb_recent_obs_window(const struct kvb_policy_params *p, int32_t room); /* the snapkv family */
/* The snapkv family's peak: the prompt read whole (or prefill_budget
 * between chunks), then the compressed prompt plus decode_budget generated
 * tokens; per-layer and per-head budgets (pyramidkv, adakv) average the
 * budget over a layer's or the model's streams, which the pool sums. */
int64_t kvb_snapkv_peak_tokens(const struct kvb_policy_params *p, int64_t n_prompt);
int32_t kvb_prefill_obs_window(const struct kvb_policy_params *p);              /* the snapkv family */

/* kvzip's non-uniform budgets: of the candidates of n streams (each one's
 * logical slots after its first n_sink), the `total` with the highest
 * state[j] (non-negative) stay; each stream's budget becomes n_sink plus its
 * share, at least one. Ties at the threshold go to the streams in order. */
void kvb_global_top_budgets(struct kvb_stream_view *const *v, int32_t n, int32_t n_sink, int64_t total);

/* The policy a default cache runs (full). */
struct kvb_policy_params kvb_policy_baseline_params(void);
/* The one per-layer override a cache applies (kv.layers): a model's sliding
 * window of `window` tokens, i.e. the window policy without sinks. */
struct kvb_policy_params kvb_policy_layer_window(int32_t window);
/* Whether p is such a window (any budget); its width is p->budget. */
bool kvb_policy_is_layer_window(const struct kvb_policy_params *p);

/* H2O accumulation: state[0] += w[j]. Shared with block-h2o. */
void kvb_h2o_observe(const struct kvb_policy *p, struct kvb_stream_view *s, const float *w, int32_t n, bool prefill);

#endif /* KVB_POLICY_H */

/*
 * kvbound.h — the one public header of libkvbound.
 *
 * kvbound is a bounded-memory KV cache for LLM inference. The library owns:
 *   - a page pool (fixed-size pages from one free list, bytes accounted exactly);
 *   - caches: one per sequence, n_layer x n_kv_head streams, each holding the
 *     retained K/V rows of one KV head in pages from the pool;
 *   - attention over the retained rows (decode and chunked prefill), which can
 *     return the attention each retained slot received, at no extra pass;
 *   - eviction policies (a registry of vtables) that choose victims; only the
 *     cache evicts.
 *
 * Usage summary (decode loop of an engine):
 *
 *     struct kvb_cache_params cp = kvb_cache_default_params();
 *     cp.n_layer = 22; cp.n_kv_head = 4; cp.head_dim = 64;
 *     cp.rope = (struct kvb_rope){ .type = KVB_ROPE_INTERLEAVED, .n_dims = 64, .base = 10000, .freq_scale = 1 };
 *     cp.kv.policy = kvb_policy_default_params(KVB_POLICY_STREAMING);
 *     cp.kv.policy.budget = 1024;
 *     struct kvb_cache *c; if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) ...;
 *     for each token, for each layer l:
 *         kvb_cache_decode(c, l, q, n_head, k, v, out, tp);   // q, k before RoPE
 *
 * Conventions
 *   - Every function returning kvb_status returns KVB_OK (0) on success and a
 *     negative error otherwise. On error, the objects passed in are unchanged
 *     (prepare-then-apply), and kvb_last_error() describes the failure.
 *   - The library never prints and never exits; it reports through the log
 *     callback set with kvb_log_set().
 *   - *_free(NULL) is a no-op.
 *   - A cache is not thread-safe: one thread drives it, and may hand a
 *     kvb_threadpool to the calls that parallelise over KV heads. A pool may
 *     be shared by caches driven from different threads.
 */
#ifndef KVBOUND_H
#define KVBOUND_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exports: libkvbound is built with -fvisibility=hidden, and everything this
 * header declares (and nothing else) is exported from the shared library. */
#if defined(__GNUC__) && !defined(KVB_NO_VISIBILITY)
#pragma GCC visibility push(default)
#endif

/* Version. While the major version is 0, the minor version is the ABI
 * (soname libkvbound.so.0.MINOR); docs/API.md has the rule. */
#define KVB_VERSION_MAJOR 0
#define KVB_VERSION_MINOR 2
#define KVB_VERSION_PATCH 0
#define KVB_VERSION_STRING "0.2.0"
/* The library's version at run time ("0.2.0"), to compare with the header's. */
const char *kvb_version(void);
/* sizeof of a public struct by name ("kvb_cache_params", ...), 0 if unknown:
 * bindings (python/kvbound) check their layouts against the library's. */
size_t kvb_abi_sizeof(const char *struct_name);

/* ------------------------------------------------------------------------ */
/* Status, logging, allocation                                              */
/* ------------------------------------------------------------------------ */

typedef enum kvb_status {
    KVB_FALLBACK = 1,         /* success with a documented fallback (not an error; nothing logged) */
    KVB_OK = 0,
    KVB_ERR_NOMEM = -1,       /* allocation failed or the page pool is exhausted */
    KVB_ERR_IO = -2,          /* open/read/write failed */
    KVB_ERR_CORRUPT = -3,     /* malformed input: bad magic, checksum, bounds */
    KVB_ERR_INVALID = -4,     /* bad argument or parameter */
    KVB_ERR_UNSUPPORTED = -5, /* valid request that this build cannot do */
} kvb_status;

/* Text for any status value; never NULL. */
const char *kvb_status_str(kvb_status s);

/* The message of the last failure on the calling thread ("" if none). It names
 * the parameter, field or file involved. Valid until the next failing call. */
const char *kvb_last_error(void);

enum kvb_log_level {
    KVB_LOG_ERROR = 0,
    KVB_LOG_WARN = 1,
    KVB_LOG_INFO = 2,
    KVB_LOG_DEBUG = 3,
};
typedef void (*kvb_log_fn)(enum kvb_log_level level, const char *msg, void *user);

/* Route library messages to fn (NULL: silence, the default). Not thread-safe
 * against concurrent library calls; set it once at start-up. */
void kvb_log_set(kvb_log_fn fn, void *user);

/* Replaceable allocator, used for every allocation the library makes. Tests
 * use it to fail the N-th allocation. NULL restores libc. Set it while no
 * library object is alive. */
struct kvb_allocator {
    void *(*malloc_fn)(size_t size, void *user);
    void (*free_fn)(void *ptr, void *user);
    void *user;
};
void kvb_allocator_set(const struct kvb_allocator *a);

/* String builder (modelled on SQLite's sqlite3_str). Appends never fail in
 * the caller's face: the first failure is recorded in err, every later
 * append is a no-op, and the caller checks kvb_str_error once at the end.
 * Start from a zeroed struct (set limit, and alloc/ctx, before the first
 * append if wanted). After any append, even of no bytes, that succeeded, p
 * is a NUL-terminated string of n bytes. The library's own text (chat
 * templates, the tool-call parser, the Jinja engine, the JSON Schema
 * compiler) is built with it, and so are kvbound serve's bodies. */
struct kvb_str {
    char *p;        /* the text, NUL-terminated; NULL before the first append */
    size_t n;       /* its length in bytes */
    size_t cap;     /* bytes allocated at p */
    size_t limit;   /* the most bytes the text may hold (0: no bound); an
                     * append that would pass it fails with KVB_ERR_INVALID */
    kvb_status err; /* KVB_OK, or the first failure: KVB_ERR_NOMEM (the
                     * allocator said no), KVB_ERR_INVALID (the limit; a
                     * format vsnprintf refused). A caller may set it too. */
    /* NULL: the library allocator (kvb_allocator_set), and the builder frees
     * what it outgrows. Else every block comes from alloc(ctx, bytes) (NULL:
     * KVB_ERR_NOMEM) and the builder never frees one (an arena's). */
    void *(*alloc)(void *ctx, size_t size);
    void *ctx;
};
/* Appends s[0..n). Fails (recorded in b->err, text unchanged) when memory
 * runs out or the text would pass b->limit. */
void kvb_str_put(struct kvb_str *b, const char *s, size_t n);
/* The same for a NUL-terminated s, and for one byte. */
void kvb_str_puts(struct kvb_str *b, const char *s);
void kvb_str_putc(struct kvb_str *b, char c);
/* Appends printf's text of fmt, of any length. Fails as kvb_str_put, and
 * with KVB_ERR_INVALID when vsnprintf refuses the format. An argument must
 * not point into b's own text (the text may move as it grows). */
void kvb_str_printf(struct kvb_str *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* kvb_str_json's flags. With none, '"' and '\\' take a backslash, every
 * byte below 0x20 is written \u00xx (lowercase hex), and every other byte
 * (DEL, UTF-8, invalid UTF-8) is copied as it is: the text must be valid
 * UTF-8 for the result to be valid JSON. */
#define KVB_JSON_SHORT_NRT 1u /* \n \r \t as two-character escapes */
#define KVB_JSON_SHORT_BF 2u  /* \b \f as two-character escapes */
#define KVB_JSON_DEL 4u       /* DEL (0x7f) as \u007f */
/* Python's json.dumps(s, ensure_ascii=False), the tojson of chat templates */
#define KVB_JSON_PYTHON (KVB_JSON_SHORT_NRT | KVB_JSON_SHORT_BF)
/* Appends s[0..n) as a JSON string: quoted, escaped as flags say. Fails as
 * kvb_str_put (the text is then cut anywhere in the string). */
void kvb_str_json(struct kvb_str *b, const char *s, size_t n, unsigned flags);
/* KVB_OK, or the builder's first failure. */
kvb_status kvb_str_error(const struct kvb_str *b);
/* Hands the text over: with the library allocator, the caller frees it with
 * kvb_buffer_free (an empty builder gives an allocated ""); *len (may be
 * NULL) gets its length. Returns NULL when an append failed (or the
 * allocation of "" did), with the text freed; b is emptied either way
 * (limit, alloc and ctx kept). */
char *kvb_str_finish(struct kvb_str *b, size_t *len);
/* Frees the text (not an arena's) and empties b: p NULL, n 0, err KVB_OK;
 * limit, alloc and ctx are kept, so b can be used again. */
void kvb_str_free(struct kvb_str *b);

/* ------------------------------------------------------------------------ */
/* Thread pool: ops take (ith, nth) and split work themselves               */
/* ------------------------------------------------------------------------ */

struct kvb_threadpool;

/* n_threads >= 1 (the caller's thread counts as one). */
kvb_status kvb_threadpool_init(int32_t n_threads, struct kvb_threadpool **out);
void kvb_threadpool_free(struct kvb_threadpool *tp);
int32_t kvb_threadpool_n_threads(const struct kvb_threadpool *tp);
/* Runs fn(ith, nth, arg) on every thread (ith = 0 on the caller) and returns
 * when all are done. tp == NULL runs fn(0, 1, arg) inline. */
void kvb_threadpool_run(struct kvb_threadpool *tp, void (*fn)(int32_t ith, int32_t nth, void *arg), void *arg);

/* ------------------------------------------------------------------------ */
/* Storage types, positions, RoPE                                           */
/* ------------------------------------------------------------------------ */

/* KV row storage. The quantized types are ggml's block layouts (blocks of
 * 32 elements: q8_0 = f16 scale + 32 int8, 34 bytes; q4_0 = f16 scale + 16
 * bytes of nibbles, 18 bytes), so head_dim must be a multiple of 32. A row
 * is quantized once, when its token is appended; eviction and compaction
 * move its bytes. */
enum kvb_dtype {
    KVB_DTYPE_AS_K = -1, /* V rows only: the K rows' type (the default) */
    KVB_DTYPE_F32 = 0,
    KVB_DTYPE_F16 = 1,
    KVB_DTYPE_Q8_0 = 2,
    KVB_DTYPE_Q4_0 = 3,
    KVB_DTYPE_BF16 = 4,
};
const char *kvb_dtype_name(enum kvb_dtype t);
kvb_status kvb_dtype_from_name(const char *name, enum kvb_dtype *out);
/* Bytes of one row of n elements, 0 if the type cannot hold n elements. */
size_t kvb_dtype_row_bytes(enum kvb_dtype t, int32_t n);

enum kvb_pos_mode {
    KVB_POS_POLICY_DEFAULT = 0, /* contiguous for streaming, original otherwise */
    KVB_POS_ORIGINAL = 1,       /* keys keep absolute positions; gaps allowed */
    KVB_POS_CONTIGUOUS = 2,     /* retained tokens re-indexed 0..n-1 (StreamingLLM) */
    KVB_POS_CAPPED = 3,         /* original positions, but a query never sees a relative
                                 * distance above kvb_kv_params.max_distance
                                 * (LM-Infinite): farther keys are seen at that distance */
};
const char *kvb_pos_mode_name(enum kvb_pos_mode m);

enum kvb_rope_type {
    KVB_ROPE_NONE = 0,        /* no rotary embedding */
    KVB_ROPE_INTERLEAVED = 1, /* pairs (2i, 2i+1): llama, llama2.c */
    KVB_ROPE_NEOX = 2,        /* pairs (i, i + n_dims/2): qwen2, NeoX */
};

/* RoPE parameters; the model fills this in. Pair i of the first n_dims
 * dimensions rotates by angle pos * freq_scale * base^(-2i/n_dims) / ff[i],
 * with ff = freq_factors (n_dims/2 values, copied by the cache) or 1. */
struct kvb_rope {
    enum kvb_rope_type type;
    int32_t n_dims;             /* rotated dims, even, <= head_dim */
    float base;                 /* e.g. 10000 */
    float freq_scale;           /* linear scaling: 1/factor; 1 = none */
    const float *freq_factors;  /* Llama-3 style per-pair divisors, or NULL */
};

/* ------------------------------------------------------------------------ */
/* Page pool                                                                */
/* ------------------------------------------------------------------------ */

struct kvb_pool;

struct kvb_pool_params {
    size_t page_bytes;       /* bytes per page (see kvb_cache_page_bytes) */
    size_t capacity_bytes;   /* hard limit; pages beyond it fail with KVB_ERR_NOMEM */
    int32_t pages_per_slab;  /* pages reserved from the allocator at a time (0 = about 2 MiB) */
};
struct kvb_pool_params kvb_pool_default_params(void);

struct kvb_pool_stats {
    size_t page_bytes;
    int64_t pages_capacity;  /* capacity_bytes / page_bytes */
    int64_t pages_reserved;  /* pages obtained from the allocator so far (never past capacity);
                              * beyond pages_in_use by at most a slab plus less than 256 KiB per
                              * long stream, the rest of its current run of pages */
    int64_t pages_in_use;
    int64_t pages_free;      /* pages_capacity - pages_in_use */
    int64_t pages_peak;      /* max pages_in_use ever */
    size_t bytes_used;       /* pages_in_use * page_bytes */
    size_t bytes_reserved;   /* pages_reserved * page_bytes */
    size_t bytes_peak;       /* pages_peak * page_bytes */
    int64_t pages_shared;    /* pages in use held by more than one cache (kvb_cache_fork):
                              * each counts once in pages_in_use */
};

/* Creates a pool. Returns KVB_ERR_INVALID for zero sizes, KVB_ERR_NOMEM. */
kvb_status kvb_pool_init(const struct kvb_pool_params *params, struct kvb_pool **out);
/* Frees the pool. Every cache using it must have been freed first. */
void kvb_pool_free(struct kvb_pool *pool);
void kvb_pool_get_stats(const struct kvb_pool *pool, struct kvb_pool_stats *out);

/* ------------------------------------------------------------------------ */
/* Policies                                                                 */
/* ------------------------------------------------------------------------ */

enum kvb_policy_id {
    KVB_POLICY_FULL = 0,
    KVB_POLICY_WINDOW,
    KVB_POLICY_STREAMING,
    KVB_POLICY_H2O,
    KVB_POLICY_TOVA,
    KVB_POLICY_SCISSORHANDS,
    KVB_POLICY_SNAPKV,
    KVB_POLICY_PYRAMIDKV,
    KVB_POLICY_ADAKV,
    KVB_POLICY_KNORM,
    KVB_POLICY_BLOCK_H2O,
    KVB_POLICY_LMINFINITE,
    KVB_POLICY_KEYDIFF,
    KVB_POLICY_EXPECTED_ATTENTION,
    KVB_POLICY_KVZIP,
    KVB_POLICY_COUNT
};

/* SnapKV-family pooling of the observation votes (kernel pool_kernel, stride
 * 1, same padding): max as in the seed's formulation, or average as in the
 * authors' repository (divides by the kernel; padding counts as zero). */
enum kvb_pool_mode { KVB_POOL_MAX = 0, KVB_POOL_AVG = 1 };
/* TOVA's scope: LAYER (the paper and its reference code: one score per layer,
 * the mean over all query heads, one victim dropped from every KV head) or
 * HEAD (each KV head scores with its own query heads and drops its own). */
enum kvb_tova_scope { KVB_TOVA_LAYER = 0, KVB_TOVA_HEAD = 1 };

/* Every field has a meaning for every policy; a policy ignores what it does
 * not use (kvb_policy_describe says which it uses).
 *
 * Prompt compression (snapkv, pyramidkv, adakv), the semantics in full
 * (docs/POLICIES.md, "Prompt compression"):
 *   - A prompt is what kvb_cache_prefill appends between two
 *     kvb_cache_compress calls. With prefill_budget 0 (the default, exact to
 *     the papers) nothing is evicted while it is read.
 *   - kvb_cache_compress ends it: the last obs_window queries of the prompt
 *     vote (each a causal softmax row over every key it sees), votes are summed
 *     over those queries and averaged over the query heads of the KV head,
 *     pooled, and each stream keeps its top (budget - obs_window) positions
 *     plus the last obs_window. A prompt no longer than the budget is kept
 *     whole. pyramidkv and adakv derive per-layer / per-head budgets from the
 *     actual prompt length here.
 *   - The compressed prompt is then frozen. Up to decode_budget generated
 *     tokens are kept after it; past that the oldest generated token leaves.
 *     The next prefill opens a new prompt over everything retained.
 *   - prefill_budget > 0 (a prompt longer than memory): every prefill chunk's
 *     last obs_window queries vote, votes accumulate over the chunks, and each
 *     stream is evicted down to prefill_budget between chunks (a departure
 *     from the papers, which see the whole prompt). */
struct kvb_policy_params {
    enum kvb_policy_id id;
    int32_t budget;          /* retained tokens per stream; 0 = unbounded (full only) */
    float budget_frac;       /* > 0: budget = frac * prompt tokens, set at kvb_cache_compress */
    int32_t n_sink;          /* pinned first tokens, never evicted */
    int32_t n_recent;        /* protected most-recent tokens; -1 = policy's rule */
    float heavy_ratio;       /* h2o, block-h2o: share of (budget - n_sink) for heavy hitters */
    int32_t obs_window;      /* snapkv family: L_obs, last prompt queries that vote */
    int32_t pool_kernel;     /* snapkv family: 1-D max-pooling kernel (odd) */
    float pyramid_beta;      /* pyramidkv: top layer gets (budget - window) / beta */
    float ada_floor;         /* adakv: each head keeps >= floor * per-head share */
    int32_t history;         /* scissorhands: history window delta (1..32 steps) */
    int32_t threshold;       /* scissorhands: low-importance count that marks a victim */
    enum kvb_pool_mode pool_mode;   /* snapkv family: max (default) or avg */
    int32_t decode_budget;   /* snapkv family: generated tokens kept after the compressed prompt; 0 = budget */
    int32_t prefill_budget;  /* snapkv family: evict to this between prefill chunks; 0 = never (exact) */
    enum kvb_tova_scope tova_scope; /* tova: layer (default, the paper) or head */
    int32_t compress_prompt; /* expected-attention: 1 = each prompt is read whole (or to prefill_budget between
                              * chunks) and compressed to the budget at kvb_cache_compress from the statistics of
                              * all its queries, as kvpress's press (budget_frac allowed), then every decode step
                              * evicts at the budget; 2 = the same with AdaKV's allocation (the layer's budget x
                              * n_kv_head shared by its KV heads by score, ada_floor the safeguard); 0 (default) =
                              * evicted to the budget after each prefill chunk. The snapkv family always
                              * compresses (1 or 2 change nothing); others refuse them */
};

/* Defaults of policy id (budget 0 for full, 256 otherwise). */
struct kvb_policy_params kvb_policy_default_params(enum kvb_policy_id id);
const char *kvb_policy_name(enum kvb_policy_id id);
/* Looks a policy up by name ("h2o", "block-h2o", ...). KVB_ERR_INVALID if unknown. */
kvb_status kvb_policy_from_name(const char *name, enum kvb_policy_id *out);
/* One line: the rule, then the parameters it uses with their defaults. */
const char *kvb_policy_describe(enum kvb_policy_id id);
/* Whether the policy compresses prompts at kvb_cache_compress (snapkv family). */
bool kvb_policy_compresses(enum kvb_policy_id id);
/* The same for these parameters: the snapkv family, or expected-attention
 * with compress_prompt. */
bool kvb_policy_params_compress(const struct kvb_policy_params *p);
/* Whether decode attention weights are fed to the policy. */
bool kvb_policy_needs_attention(enum kvb_policy_id id);

/* ------------------------------------------------------------------------ */
/* Cache                                                                    */
/* ------------------------------------------------------------------------ */

struct kvb_cache;

/* Reversible eviction (docs/RECALL.md). With pages > 0, every token a
 * policy evicts goes to a cold tier instead of being dropped: evicted tokens
 * are gathered per stream into cold pages of block_size tokens (K rows, V
 * rows as stored, original positions), kept in host memory up to
 * cold_mem_bytes and then appended to a memory-mapped file under cold_dir.
 * Each cold page keeps, per channel, the min and max of its keys, from which
 * an upper bound on any query's logit over the page follows. At every
 * attention call (a decode step, or a prefill chunk scored with its last
 * token) each stream scores its cold pages with the query rows of its KV head
 * and copies the `pages` best (highest bound over the group's rows) into its
 * recall area: `pages` pages from the same pool, attended together with the
 * hot cache. The hot cache keeps exactly its budget; attended tokens per
 * stream <= budget + pages * block_size. Positions: recall needs ORIGINAL
 * or CAPPED positions; a policy whose default is CONTIGUOUS (streaming) gets
 * CAPPED at max_distance instead (ORIGINAL when max_distance is 0). */
#define KVB_RECALL_MAX_PAGES 64
enum kvb_recall_summary {
    KVB_RECALL_BOUNDS = 0,   /* Quest: per-channel key min/max; the score is an upper bound on
                              * the page's logits (the default) */
    KVB_RECALL_CENTROID = 1, /* one representative key, the page's mean (InfLLM-like, cheaper,
                              * not a bound) */
    KVB_RECALL_EXACT = 2,    /* the page's true largest logit, reading every cold key: a
                              * reference for measuring the summaries, not for speed */
};
struct kvb_recall_params {
    int32_t pages;          /* cold pages recalled per stream, 0 = recall off (0..64) */
    int32_t every;          /* choose the recalled pages every N attention calls, reusing them
                             * in between (default 1 when pages > 0) */
    size_t cold_mem_bytes;  /* host memory for cold pages before the file (0: none) */
    const char *cold_dir;   /* directory for the cold file, or NULL: beyond cold_mem_bytes,
                             * evicted pages are forgotten (counted in the stats) */
    enum kvb_recall_summary summary; /* how pages are scored (default bounds) */
};

/* A per-layer override of the KV configuration: layer `layer` keeps its
 * own policy instead of kv.policy. The one override applied is a model's
 * sliding-window layer (Gemma 2/3): policy.id KVB_POLICY_WINDOW, n_sink 0,
 * budget W. Such a layer is exact, not an approximation: a query at
 * position p sees the keys at positions p - W + 1 .. p (itself included,
 * per query inside a prefill chunk, as llama.cpp's sliding-window mask), and
 * a token is freed once no later query can see it. kv.policy, its budgets,
 * prompt compression and recall govern the other (global) layers only. Any
 * other override, a layer out of range or given twice is refused by name
 * (KVB_ERR_UNSUPPORTED / KVB_ERR_INVALID). A model's cache gets its model's
 * windows (kvb_model_cache_params); a context or batch refuses kv.layers
 * from the caller. */
struct kvb_kv_layer {
    int32_t layer;
    struct kvb_policy_params policy;
};

/* The KV configuration: what a cache keeps and how it stores it. One
 * struct, embedded as `kv` in every params struct that makes a cache
 * (kvb_cache_params, kvb_context_params, kvb_seq_params, kvb_ppl_params,
 * kvb_needle_params) and in kvb_batch_params, whose pool's page it sets.
 * kvb_kv_default_params: full, positions the policy's, f16 rows, pages of
 * 16 tokens, no recall, no overrides. */
struct kvb_kv_params {
    struct kvb_policy_params policy;
    enum kvb_pos_mode pos_mode;
    int32_t max_distance;        /* KVB_POS_CAPPED (lminfinite's default): the largest relative
                                  * distance attention sees; > 0 for a bare cache, 0 = the
                                  * model's trained length for a context, sequence, ppl, needle */
    enum kvb_dtype kv_dtype, kv_dtype_v; /* K rows (any type but AS_K); V rows (KVB_DTYPE_AS_K: as K) */
    int32_t block_size;          /* tokens per page, a power of two in 1..4096 */
    struct kvb_recall_params recall; /* reversible eviction: off when pages is 0 */
    const struct kvb_kv_layer *layers; /* per-layer overrides (n_layers of them), or NULL */
    int32_t n_layers;
    int32_t keep;                /* the pinned span: the first `keep` positions of a sequence (its
                                  * instructions) are never evicted by any policy, never go cold,
                                  * and sit ON TOP of the budget, which bounds the tokens after
                                  * them; the policy's sinks are the positions 0..n_sink-1, so the
                                  * span subsumes them (n_sink - keep sinks remain after it).
                                  * 0..KVB_KEEP_MAX; 0 = none (the default); a sliding-window
                                  * layer's window still bounds that layer */
};
#define KVB_KEEP_MAX (1 << 20) /* the largest kvb_kv_params.keep */
struct kvb_kv_params kvb_kv_default_params(void);
/* The V rows' type in effect (KVB_DTYPE_AS_K resolved to the K rows'). */
enum kvb_dtype kvb_kv_v_type(const struct kvb_kv_params *kv);
/* The sizing rule, the one every user of the pool asks (the CLI, batches,
 * ppl, needle, the server): the pool bytes one sequence's cache needs at
 * its peak, for a model of n_layer x n_kv_head streams of head_dim. Per
 * stream: the tokens the policy holds at most (full: n_ctx; the others:
 * their peak for a prompt of n_prompt tokens, e.g. the snapkv family reads
 * a prompt whole before compressing it), one prompt chunk read before
 * eviction (at most the prompt), two pages of compaction slack, and the
 * recall area, plus the pinned span (kv.keep) of every evicting policy's
 * stream; in pages of kvb_kv_params' page size. A sliding-window
 * layer of kv.layers holds its window less one plus the chunk, and no recall
 * area (a model's: kvb_model_kv_seq_bytes). 0 for a bad argument
 * (unknown policy or dtype, block_size or geometry out of range). */
size_t kvb_kv_seq_bytes(const struct kvb_kv_params *kv, int32_t n_layer, int32_t n_kv_head, int32_t head_dim, int64_t n_ctx,
                        int64_t n_prompt, int32_t chunk);
/* The same rule for a cache of latent rows (kvb_cache_params.head_dim_v,
 * multi-head latent attention): pages hold K rows of head_dim only, so the
 * bytes are those of kvb_kv_seq_bytes with no V rows. head_dim_v 0 is
 * kvb_kv_seq_bytes itself; 0 for a bad argument (head_dim_v outside
 * 0..head_dim, or as kvb_kv_seq_bytes). */
size_t kvb_kv_seq_bytes_latent(const struct kvb_kv_params *kv, int32_t n_layer, int32_t n_kv_head, int32_t head_dim, int32_t head_dim_v,
                               int64_t n_ctx, int64_t n_prompt, int32_t chunk);
/* The host bytes of the query statistics a policy that keeps them
 * (expected-attention) holds for one sequence of n_layer x n_kv_head streams
 * of head_dim with n_head query heads: per stream (G + 1) x (head_dim +
 * head_dim^2) floats, G = n_head / n_kv_head (a mean and a covariance per
 * query head, one block of scratch), on every layer but a sliding-window
 * layer of kv.layers; what the cache's stats call query_stats_bytes once
 * every layer has seen a query. Not pool pages: kvb_kv_seq_bytes leaves them
 * out, kvb_model_kv_seq_bytes counts them. 0 under a policy that keeps none,
 * and for a bad argument (n_head not a multiple of n_kv_head). */
size_t kvb_kv_query_stats_bytes(const struct kvb_kv_params *kv, int32_t n_layer, int32_t n_kv_head, int32_t n_head, int32_t head_dim);

struct kvb_cache_params {
    int32_t n_layer;
    int32_t n_kv_head;
    int32_t head_dim;           /* 1..576 (DeepSeek-V3's latent row: 64 rotary + 512 latent) */
    struct kvb_rope rope;
    const uint8_t *no_rope;     /* [n_layer]: 1 where a layer's keys and queries are not rotated (NoPE
                                 * layers, SmolLM3's every fourth), or NULL; copied */
    size_t pool_bytes;          /* private pool size when kvb_cache_init gets pool == NULL */
    struct kvb_kv_params kv;    /* policy, positions, row types, page size, recall */
    struct kvb_rope rope_swa;   /* the sliding-window layers' rotation (kv.layers windows) when
                                 * rope_swa.base > 0: rope's type, its own n_dims (even, <=
                                 * rope.n_dims: Gemma 4's window heads rotate their 256 dims, which
                                 * lead rows padded to the global 512), base, freq_scale and
                                 * freq_factors (n_dims / 2 of them; Gemma 3: 10000, unscaled);
                                 * base 0: those layers use rope */
    float attn_softcap;         /* > 0: every attention score s (q.k scaled) becomes
                                 * cap * tanh(s / cap) before the mask and softmax (Gemma 2's 50);
                                 * 0: off */
    const float *sinks;         /* [n_layer][n_sink_heads] learned sink logits (gpt-oss): query head
                                 * h's softmax has one more logit, sinks[l][h], whose value row is
                                 * zero, so the kept keys share 1 - its mass; copied; NULL: none.
                                 * Then decode and prefill take n_head == n_sink_heads. */
    int32_t n_sink_heads;
    const uint8_t *recurrent;   /* [n_layer]: 1 where a layer keeps a fixed-size recurrent state
                                 * instead of K/V (a hybrid model's Gated DeltaNet layers), or NULL;
                                 * copied. Its streams stay empty: no policy, budget or sizing rule
                                 * sees it, decode/prefill/append refuse it (kvb_cache_state) */
    int32_t state_rows;         /* rows of one recurrent layer's state (with recurrent layers) */
    int32_t state_row_floats;   /* floats per row; a row lies within one page of the pool, so
                                 * state_row_floats * 4 <= kvb_cache_page_bytes */
    const int32_t *kv_source;   /* [n_layer]: -1 where a layer keeps its own K/V, else the EARLIER
                                 * layer whose K/V it reads (Gemma 4's KV-shared layers), or NULL;
                                 * copied. A source keeps its own K/V, is neither recurrent nor a
                                 * reader, and has the reader's window (kv.layers). A reader holds
                                 * no pages: kvb_cache_decode/prefill on it take k = v = NULL and
                                 * attend over the source's tokens as they stand after the
                                 * source's call of the same step (the source runs first; its
                                 * eviction waits until its last reader has attended), at the
                                 * reader's own position; its queries feed no policy (the
                                 * source's decisions hold for it). No recall with readers. */
    const int32_t *kv_heads;    /* [n_layer]: the KV heads each layer holds, 1..n_kv_head (the
                                 * largest), or NULL: n_kv_head everywhere; copied. A layer with
                                 * fewer uses its first kv_heads[l] streams: kvb_cache_decode/
                                 * prefill on it take k, v as [n_tok][kv_heads[l]][head_dim] and
                                 * n_head a multiple of kv_heads[l] (query head h reads KV head
                                 * h / (n_head / kv_heads[l])). Gemma 4 26B/31B: 8 or 16 heads on
                                 * window layers, 2 or 4 on global ones. A reader has its
                                 * source's; no sinks or recall with it. */
    int32_t head_dim_v;         /* 0: every token keeps a V row of head_dim beside its K row (as
                                 * always). > 0: multi-head latent attention (DeepSeek-V2/V3,
                                 * Kimi-K2): no V rows are stored (pages hold K rows only) and a
                                 * token's value is the LAST head_dim_v entries of its K row, read
                                 * where the key is (an absorbed MLA row [k_pe | c_kv] with
                                 * head_dim_v = kv_lora_rank). Needs rope.n_dims + head_dim_v <=
                                 * head_dim (rope_swa's n_dims likewise: values are never rotated),
                                 * kv.kv_dtype_v KVB_DTYPE_AS_K or kv.kv_dtype, and for q8_0/q4_0
                                 * rows head_dim - head_dim_v a multiple of 32 (whole blocks).
                                 * Then kvb_cache_decode/prefill/append take v = NULL and write out
                                 * as [n_tok][n_head][head_dim_v]; kvb_cache_read_slot's v gets
                                 * head_dim_v floats; eviction, recall, forks and images move the
                                 * one row. head_dim is 1..576 in any case (576: DeepSeek's 64
                                 * rotated dims and 512-dim latent). */
};
struct kvb_cache_params kvb_cache_default_params(void);

/* Page size the cache needs: block_size * (K row bytes + V row bytes), K
 * rows then V rows; block_size * K row bytes with head_dim_v > 0. */
size_t kvb_cache_page_bytes(const struct kvb_cache_params *params);
/* Pages of the pool a cache's recurrent state takes, all its recurrent
 * layers (rows packed whole into pages); 0 without; -1 when a row does not
 * fit a page (kvb_cache_init refuses those params). */
int64_t kvb_cache_state_pages(const struct kvb_cache_params *params);

/* Creates an empty cache. pool == NULL gives the cache a private pool of
 * params->pool_bytes. A shared pool's page_bytes must equal
 * kvb_cache_page_bytes(params). Errors: KVB_ERR_INVALID (names the field),
 * KVB_ERR_UNSUPPORTED (dtype), KVB_ERR_NOMEM. */
kvb_status kvb_cache_init(struct kvb_pool *pool, const struct kvb_cache_params *params, struct kvb_cache **out);
void kvb_cache_free(struct kvb_cache *cache);
/* Drops every token and returns all pages to the pool; budgets reset to the policy's. */
void kvb_cache_reset(struct kvb_cache *cache);
/* A second cache that continues exactly as src would (same parameters,
 * positions, retained tokens, policy scores, holes and page layout), made
 * without copying a row: the two hold the same pages of the pool, copy on
 * write. A cache copies a shared page before it writes into it (a token's
 * rows into a hole; compaction moves rows only into pages it alone holds),
 * and a page goes back to the pool when its last holder lets it go, so
 * sessions that begin with the same tokens hold those tokens' pages once
 * (kvb_pool_stats.pages_shared). A step that may compact copies every page
 * it shares first, except the pages of the pinned span (kv.keep) whose
 * every slot is pinned: nothing writes into those, so forks share them for
 * as long as they live, past their budgets (the page holding the span's
 * end is copied like any other). Copies are taken in the same all-or-
 * nothing request as the step's pages, so a step that cannot copy fails
 * with KVB_ERR_NOMEM and leaves the cache unchanged, as for any page.
 * src must use a pool given to kvb_cache_init (KVB_ERR_INVALID: its own),
 * have no recall (KVB_ERR_UNSUPPORTED: the cold tier is per cache), no
 * reservation pending and no snapkv-family prompt open (KVB_ERR_INVALID).
 * The caches may then be used and freed in any order, on different threads
 * (the pool locks). KVB_ERR_NOMEM (metadata): src unchanged. */
kvb_status kvb_cache_fork(struct kvb_cache *src, struct kvb_cache **out);
/* A copy of the cache's parameters (rope.freq_factors points into the cache). */
void kvb_cache_get_params(const struct kvb_cache *cache, struct kvb_cache_params *out);
/* Position mode in effect (the policy default resolved). */
enum kvb_pos_mode kvb_cache_pos_mode(const struct kvb_cache *cache);

/* Takes now, for every layer, what the next n_new tokens (n_head query
 * heads) need: pages from the pool (attached as free slots), slot arrays and
 * attention scratch. The next prefill or decode of up to n_new tokens per
 * layer then cannot run out of memory; a batch reserves every sequence
 * before a step so that a step either runs whole or changes nothing.
 * KVB_ERR_NOMEM (pool exhausted), KVB_ERR_INVALID, KVB_ERR_UNSUPPORTED:
 * the cache is unchanged. */
kvb_status kvb_cache_reserve(struct kvb_cache *cache, int32_t n_new, int32_t n_head);
/* Gives back the pages of the last kvb_cache_reserve if no other call has
 * touched the cache since (then the cache is byte-identical to before the
 * reserve); otherwise does nothing. */
void kvb_cache_unreserve(struct kvb_cache *cache);

/* One decode step of one layer, all of its KV heads:
 *   q   [n_head][head_dim]     query of the new token, before RoPE
 *   k,v [n_kv_head][head_dim]  key (before RoPE) and value of the new token
 *                              (latent rows, head_dim_v > 0: v is NULL)
 *   out [n_head][head_dim]     attention output ([n_head][head_dim_v] with latent rows)
 * Appends k/v at the layer's next original position, attends (query head h
 * uses KV head h / (n_head / n_kv_head)), feeds the attention weights to the
 * policy if it wants them, and evicts down to each stream's budget.
 * Returns KVB_ERR_NOMEM (pool exhausted) or KVB_ERR_INVALID (n_head not a
 * multiple of n_kv_head); the cache is unchanged on error, except that a
 * snapkv-family prompt left open on this layer is compressed first (as
 * kvb_cache_compress would have done). tp may be NULL. */
kvb_status kvb_cache_decode(struct kvb_cache *cache, int32_t layer, const float *q, int32_t n_head,
                            const float *k, const float *v, float *out, struct kvb_threadpool *tp);

/* Chunked prefill of n_tok tokens in one layer, with causal masking:
 *   q   [n_tok][n_head][head_dim], k,v [n_tok][n_kv_head][head_dim], out like q
 *   (latent rows: v NULL, out [n_tok][n_head][head_dim_v]).
 * Decode-time policies receive per-key attention mass summed over the
 * chunk's queries (tova: its last query) and evict down to budget after the
 * chunk. The snapkv family reads a prompt (see struct kvb_policy_params):
 * with prefill_budget 0 it keeps every token and records the chunk's last
 * obs_window queries for the vote at kvb_cache_compress; with prefill_budget
 * > 0 the chunk's last obs_window queries vote (added to earlier chunks'
 * votes) and streams are evicted to prefill_budget. The first prefill after a
 * compress opens a new prompt. Errors as kvb_cache_decode. */
kvb_status kvb_cache_prefill(struct kvb_cache *cache, int32_t layer, int32_t n_tok, const float *q,
                             int32_t n_head, const float *k, const float *v, float *out,
                             struct kvb_threadpool *tp);

/* End of prompt, every layer. For the snapkv family: resolves budget_frac
 * against the prompt length, computes the vote of the prompt's last
 * obs_window queries (or uses the votes fed through kvb_cache_observe_prefill
 * when the cache recorded no queries, as in the lab), lets pyramidkv / adakv
 * set per-layer / per-head budgets from the actual prompt length, evicts down
 * to them (a prompt no longer than a stream's budget is kept whole), returns
 * freed pages, and freezes the result: afterwards each stream holds its
 * compressed prompt plus up to decode_budget generated tokens, oldest
 * generated first out. Budgets set with kvb_cache_set_budget are the
 * per-stream budgets of snapkv here (pyramidkv and adakv derive theirs from
 * kv.policy.budget). A layer whose prompt is still open when kvb_cache_decode
 * runs is compressed first. For every other policy it does nothing at all.
 * Cannot fail. */
void kvb_cache_compress(struct kvb_cache *cache, struct kvb_threadpool *tp);
/* Whether a prompt-compressing cache (the snapkv family, kvzip,
 * expected-attention with compress_prompt) holds a prompt that its next
 * kvb_cache_compress, or its next decode, will compress. */
bool kvb_cache_prompt_pending(const struct kvb_cache *cache);

/* KVzip's context reconstruction (policy kvzip; docs/POLICIES.md). The
 * engine reads a context, then, per chunk of at most KVB_KVZIP_CHUNK of its
 * tokens (original positions [lo, hi)), calls kvb_cache_recon_begin, runs
 * the repeat prompt and the chunk through the model (kvb_cache_prefill as
 * usual: the pass attends over the whole cache and its own tokens), and
 * kvb_cache_recon_end. While the pass reads, every stream scores its tokens
 * at positions [lo, hi): a token's score becomes the largest attention any
 * query head of its group gives it at any token of the pass, the softmax
 * taken over the stream's first n_sink tokens, the chunk and the pass's own
 * tokens (causal), as the paper's chunked scoring; nothing is evicted and
 * no vote is recorded. kvb_cache_recon_end drops every row the pass appended
 * and moves each layer's next position back, so the cache is as before but
 * for the scores; kvb_cache_compress then keeps the highest. A pass that
 * fails (KVB_ERR_NOMEM) must still be ended. kvb_cache_recon_begin:
 * KVB_ERR_INVALID (not kvzip nor parking, a pass already begun, a bad
 * range, layers at different positions). A kvzip cache is refused at init
 * (KVB_ERR_UNSUPPORTED) on recurrent layers and positions other than
 * original: the pass could not give back what it changes. Sliding-window
 * layers evict nothing during a pass and are not scored (their window
 * bounds them). Scores are read with kvb_cache_slot_info. */
#define KVB_KVZIP_CHUNK 2048      /* context tokens one reconstruction pass repeats */
#define KVB_KVZIP_PROMPT_MAX 64   /* the most tokens of a pass's repeat prompt */
kvb_status kvb_cache_recon_begin(struct kvb_cache *cache, int64_t lo, int64_t hi);
void kvb_cache_recon_end(struct kvb_cache *cache);
/* Compress-on-park (serve --park-compress kvzip): any cache, whatever its
 * policy, scored by kvzip's reconstruction and cut once. park_begin gives
 * the cache a score per retained token (zero), which reconstruction passes
 * (kvb_cache_recon_begin .. end) then raise instead of the policy's state;
 * park_end(keep) keeps floor(keep x the tokens held) tokens in all, the
 * pinned span and the policy's sinks first, the rest the highest scores
 * over every stream (kvzip's non-uniform budgets), evicting the others as
 * the policy would (to the cold tier with recall), and forgets the
 * scores; keep outside (0, 1) drops nothing (an abandoned park). Budgets
 * and the policy's state of the tokens kept are unchanged. park_begin:
 * KVB_ERR_INVALID (a prompt open, a park or pass begun), KVB_ERR_UNSUPPORTED
 * (as kvzip: recurrent layers, positions not original),
 * KVB_ERR_NOMEM; park_end: KVB_ERR_NOMEM (nothing dropped). */
kvb_status kvb_cache_park_begin(struct kvb_cache *cache);
kvb_status kvb_cache_park_end(struct kvb_cache *cache, double keep);

/* Low-level steps, for the lab and for engines that compute attention
 * themselves. kvb_cache_decode == append + attention + observe + evict.
 * append: k, v as in decode; NULL means zero rows (bookkeeping-only caches);
 * v must be NULL with latent rows. KVB_ERR_UNSUPPORTED under
 * expected-attention (its evidence is the queries: decode and prefill only).
 * Errors: KVB_ERR_NOMEM, cache unchanged. */
kvb_status kvb_cache_append(struct kvb_cache *cache, int32_t layer, const float *k, const float *v);
/* Feeds one attention row to the policy of stream (layer, head): w[j] is the
 * weight of logical slot j (0..n_slots-1, oldest first), as received by the
 * newest query. KVB_ERR_INVALID on a bad index or n != n_slots. */
kvb_status kvb_cache_observe(struct kvb_cache *cache, int32_t layer, int32_t head, const float *w, int32_t n);
/* Feeds prefill evidence to the policy of stream (layer, head): mass[j] is
 * the attention logical slot j received from the observing queries of the
 * chunk just appended (summed over those queries, averaged over the query
 * heads of the KV head). Which queries observe: the last
 * kvb_cache_prefill_obs_queries() of the chunk, or all of them if 0 — the
 * same evidence kvb_cache_prefill computes itself. KVB_ERR_INVALID on a bad
 * index or n != n_slots. */
kvb_status kvb_cache_observe_prefill(struct kvb_cache *cache, int32_t layer, int32_t head, const float *mass, int32_t n);
int32_t kvb_cache_prefill_obs_queries(const struct kvb_cache *cache);
/* Measurement hook: fn(user, layer, head, w, n) receives every decode
 * attention row (w[j] for logical slot j, mean over the group's query heads)
 * of every stream, from worker threads (different heads concurrently).
 * NULL removes it. Decode computes weights while it is set. */
typedef void (*kvb_attn_observer_fn)(void *user, int32_t layer, int32_t head, const float *w, int32_t n);
void kvb_cache_set_observer(struct kvb_cache *cache, kvb_attn_observer_fn fn, void *user);

/* Evicts every stream of the layer down to its budget. Cannot fail. */
void kvb_cache_evict(struct kvb_cache *cache, int32_t layer);

/* The recurrent state of a recurrent layer (params.recurrent), for its next
 * n_tok tokens: *rows receives params.state_rows row addresses, each row
 * state_row_floats floats, writable in place (zero for a fresh or reset
 * cache), and the layer's original position advances by n_tok. The state
 * takes its pages from the pool at the first write, or copies the pages a
 * fork shares (kvb_cache_reserve takes them ahead of a step). Errors:
 * KVB_ERR_INVALID (not a recurrent layer, n_tok < 1), KVB_ERR_NOMEM (pool
 * exhausted): the cache unchanged. The rows stay valid until the next call
 * that takes or gives pages. */
kvb_status kvb_cache_state(struct kvb_cache *cache, int32_t layer, int32_t n_tok, float *const **rows);

/* Per-stream budget in tokens (0 = unbounded, full only). Takes effect at the
 * next evict/decode. For the snapkv family it is also the stream's budget at
 * the next kvb_cache_compress, and while a prompt is open it waits for that
 * compress (the limit in force, kvb_cache_budget, is then prefill_budget,
 * 0 = none; after a compress it is the compressed prompt plus decode_budget
 * until this call lowers it: generated tokens leave first, then the lowest
 * votes). head = -1 sets every head of the layer; layer = -1 every layer.
 * kvb_cache_reset restores the policy's. */
kvb_status kvb_cache_set_budget(struct kvb_cache *cache, int32_t layer, int32_t head, int32_t tokens);
int32_t kvb_cache_budget(const struct kvb_cache *cache, int32_t layer, int32_t head);
int32_t kvb_cache_n_slots(const struct kvb_cache *cache, int32_t layer, int32_t head);
/* Next original position of the layer (tokens appended so far). */
int64_t kvb_cache_n_past(const struct kvb_cache *cache, int32_t layer);

struct kvb_slot_info {
    int64_t pos_original;  /* position in the sequence */
    int64_t pos_cache;     /* position attention sees (== original in ORIGINAL mode) */
    float score;           /* policy's primary score (accumulated attention, ...) */
    int32_t page;          /* physical page index within the stream */
};
/* Info of logical slot j (0 = oldest retained). KVB_ERR_INVALID if out of range. */
kvb_status kvb_cache_slot_info(const struct kvb_cache *cache, int32_t layer, int32_t head, int32_t j,
                               struct kvb_slot_info *out);
/* Reads K (after RoPE at its original position) and V of logical slot j as
 * f32: head_dim floats each, or for latent rows V's head_dim_v (K's tail). */
kvb_status kvb_cache_read_slot(const struct kvb_cache *cache, int32_t layer, int32_t head, int32_t j,
                               float *k, float *v);

struct kvb_cache_stats {
    size_t bytes_used;      /* pages held by this cache * page_bytes */
    size_t bytes_reserved;  /* bytes_used plus metadata (positions, scores, page tables) */
    size_t bytes_peak;      /* max bytes_used over the cache's life */
    int64_t pages_in_use;   /* pages held by this cache */
    int64_t pages_free;     /* pages still available in its pool */
    int64_t slots;          /* retained tokens summed over streams */
    int32_t slots_max;      /* longest stream */
    int32_t slots_min;      /* shortest stream */
    /* recall (all zero without it) */
    size_t recall_bytes;        /* recall-area pages held, included in bytes_used and bytes_peak */
    int64_t cold_pages;         /* evicted pages kept in the cold tier (memory + file) */
    size_t cold_mem_bytes;      /* host memory those pages take (records, not counting the index) */
    size_t cold_file_bytes;     /* size of the cold file */
    int64_t cold_staged_tokens; /* evicted tokens filling their stream's next cold page (recallable) */
    int64_t cold_dropped_pages; /* pages the cold tier could not keep: forgotten */
    int64_t recall_scorings;    /* times a stream scored its cold pages */
    int64_t recall_loads;       /* cold pages copied into recall areas */
    double recall_score_s;      /* worker time scoring cold pages, summed over streams */
    double recall_load_s;       /* worker time copying recalled pages */
    /* sliding-window layers (kv.layers windows; all zero without): their part of the totals above */
    int32_t window_layers;      /* layers bounded by the model's window */
    int64_t window_slots;       /* retained tokens of their streams */
    int64_t window_pages;       /* pages they hold */
    /* recurrent layers (params.recurrent; all zero without): their state, included in
     * bytes_used and pages_in_use; slots, slots_max and slots_min count K/V streams only */
    int32_t state_layers;       /* recurrent layers */
    int64_t state_pages;        /* pages their state holds (0 while it is zero) */
    size_t state_bytes;         /* state_pages * page bytes */
    /* a KVB_PF_QUERY_STATS policy's (expected-attention) query statistics: host memory beside the
     * pages, included in bytes_reserved (0 under other policies, and before the first query) */
    size_t query_stats_bytes;
};
void kvb_cache_get_stats(const struct kvb_cache *cache, struct kvb_cache_stats *out);
/* Original positions of the tokens in a stream's recall area (attended
 * besides its retained slots), increasing; returns how many (at most max are
 * written), 0 without recall, -1 for a bad layer or head. */
int32_t kvb_cache_recalled(const struct kvb_cache *cache, int32_t layer, int32_t head, int32_t *pos, int32_t max);

/* Pauses (on = false) or resumes recall of a cache made with it: while
 * paused, attention sees the hot slots only, and evicted tokens still go to
 * the cold tier, so resuming can recall them. KVB_ERR_INVALID for a cache
 * without recall. */
kvb_status kvb_cache_set_recall(struct kvb_cache *cache, bool on);

/* The directory a cache with recall spills cold pages to once its memory is
 * full, for a cache that has no cold file yet: a cache restored from an
 * image (images hold the cold tier but name no file; the restored tier is
 * in memory, its pages plus cold_mem_bytes more). KVB_ERR_INVALID without
 * recall, for an empty path or when the cache already writes a file;
 * KVB_ERR_NOMEM. The cache is unchanged on failure. */
kvb_status kvb_cache_set_cold_dir(struct kvb_cache *cache, const char *dir);

/* A cold-tier file (kvb_recall_params.cold_dir) checked: header, geometry,
 * and every committed page's checksum, sequence, stream, count and
 * positions. A file cut short of its committed pages, or any bad field, is
 * KVB_ERR_CORRUPT naming the file and the page or field; bytes after the
 * committed pages (a write a crash cut) are reported as tail_bytes. */
struct kvb_cold_file_info {
    int64_t pages;          /* committed pages, all verified */
    int64_t tokens;         /* tokens in them */
    int64_t tail_bytes;     /* uncommitted bytes after them */
    int64_t pos_min, pos_max;
    int32_t n_streams, block_size, head_dim;
    enum kvb_dtype dtype, dtype_v;
};
kvb_status kvb_cold_file_check(const char *path, struct kvb_cold_file_info *out);

/* Save and restore. The format is versioned and checksummed (CRC-32); a
 * corrupt or truncated image gives KVB_ERR_CORRUPT and nothing else happens.
 * A restored cache continues bit-identically to one that never stopped. A
 * cache with recall saves its cold tier and recall areas too (version 4):
 * restored, its cold pages are in host memory (kvb_cache_set_cold_dir for
 * a file beyond it). A cache under expected-attention also saves the
 * query statistics its policy keeps (flags bit 4096), and its
 * compress_prompt when set (flags bit 8192); older builds refuse such an
 * image by its flags.
 * kvb_cache_save allocates *buf with the library allocator; release it with
 * kvb_buffer_free. */
kvb_status kvb_cache_save(const struct kvb_cache *cache, void **buf, size_t *len);
kvb_status kvb_cache_load(struct kvb_pool *pool, const void *buf, size_t len, size_t pool_bytes,
                          struct kvb_cache **out);
kvb_status kvb_cache_save_file(const struct kvb_cache *cache, const char *path);
kvb_status kvb_cache_load_file(struct kvb_pool *pool, const char *path, size_t pool_bytes,
                               struct kvb_cache **out);
void kvb_buffer_free(void *buf);

/* ------------------------------------------------------------------------ */
/* Models and inference contexts                                            */
/* ------------------------------------------------------------------------ */

struct kvb_model;
struct kvb_context;

struct kvb_model_params {
    const char *tokenizer_path; /* llama2.c tokenizer.bin, for .bin checkpoints */
    bool no_mmap;               /* read the weights into memory (anonymous, advised to
                                 * transparent huge pages) instead of mapping the file:
                                 * fewer TLB misses, faster prefill; costs the file's size
                                 * in RSS and a read at load (default false) */
};
struct kvb_model_params kvb_model_default_params(void);

/* Loads a GGUF file (llama, qwen2) or a llama2.c checkpoint (.bin, with
 * params->tokenizer_path). Weights are mmapped, never copied, unless
 * params->no_mmap. Errors name the file and the key or tensor: KVB_ERR_IO,
 * KVB_ERR_CORRUPT, KVB_ERR_UNSUPPORTED, KVB_ERR_INVALID (missing key or
 * tokenizer), KVB_ERR_NOMEM. */
kvb_status kvb_model_load(const char *path, const struct kvb_model_params *params, struct kvb_model **out);
void kvb_model_free(struct kvb_model *model);

struct kvb_model_info {
    char arch[16];            /* "llama", "qwen2", "qwen3", "qwen3moe", "granite", "granitemoe", "mistral3", "smollm3", "olmo2", "phi3",
                               * "gemma2", "gemma3", "gpt-oss", "qwen2moe", "deepseek", "olmoe", "qwen35", "qwen35moe",
                               * "gemma4", "lfm2", "lfm2moe", "glm4moe", "deepseek2" */
    char source[16];          /* "gguf", "llama2.c" */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    float rms_eps, rope_base, rope_freq_scale;
    int32_t rope_dims;
    enum kvb_rope_type rope_type;
    bool tied_output, has_qkv_bias;
    uint32_t weight_type;     /* ggml type of the attention weights */
    size_t weight_bytes;      /* all weights */
    size_t kv_bytes_per_token_f16;
    char features[512];       /* what the family adds to a plain llama layer, in words ("q/k norms per
                               * head", "YaRN x4 from 8", ...); empty for none */
    int32_t sliding_window;   /* tokens a sliding-window layer sees (Gemma 2/3), 0 without */
    int32_t n_swa_layers;     /* layers with that window; the other n_layer - n_swa_layers are global */
    int32_t n_expert;         /* mixture of experts: experts per MoE layer, 0 for a dense model */
    int32_t n_expert_used;    /* experts each token is routed to */
    int32_t n_ff_exp;         /* an expert's FFN width */
    int32_t n_moe_layers;     /* layers with experts (the others are dense) */
    size_t expert_bytes_per_token; /* weight bytes of the experts one token reads (n_expert_used of each MoE layer) */
    int32_t n_ff_shexp;       /* the shared experts' FFN width (run on every token of an MoE layer), 0 without */
    int32_t n_rec_layers;     /* Gated DeltaNet layers (recurrent state, no KV cache) among the n_layer */
    int32_t ssm_conv, ssm_state, ssm_groups, ssm_heads; /* their conv taps K, head size Dk (= Dv), key heads Hk,
                               * value heads Hv; 0 without */
    int32_t n_nextn_layers;   /* multi-token-prediction layers in the file (beyond n_layer): loaded, not run */
    bool shortconv;           /* LFM2 (lfm2, lfm2moe): the n_rec_layers are short convolutions, not Gated DeltaNet:
                               * y = out_proj(C * conv_K(B * x)), K = ssm_conv taps (shortconv.l_cache) over
                               * n_embd channels; ssm_state, ssm_groups, ssm_heads 0 (in the padding before
                               * state_bytes: the offsets of the fields around it are unchanged) */
    bool mamba2;              /* Granite 4.0-H, Nemotron-H: the n_rec_layers are Mamba-2 (selective state space,
                               * SSD) layers: ssm_heads heads of ssm_inner / ssm_heads channels, ssm_groups groups
                               * of B/C of ssm_state each, conv ssm_conv taps (in the padding, as shortconv) */
    size_t state_bytes;       /* one sequence's recurrent state over all its recurrent layers: per Gated DeltaNet
                               * layer 4 x (Hv Dk Dv + (K - 1) C) bytes, C = 2 Hk Dk + Hv Dv; per short-conv
                               * layer 4 x (K - 1) n_embd (its last K - 1 inputs B*x); 0 without */
    bool attn_gated;             /* attention output times sigmoid(a gate the query projection yields) (qwen35) */
    int32_t head_dim_swa;        /* Gemma 4: the window layers' head size (head_dim is the global layers', which
                                  * the cache holds: window heads padded with zeros to it); 0: head_dim */
    int32_t n_kv_shared;         /* Gemma 4: the last layers, which read an earlier layer's K/V and hold none */
    int32_t n_embd_per_layer;    /* Gemma 4: per-layer token embedding dims (PLE), 0 without */
    int32_t n_head_kv_swa, n_head_kv_global; /* Gemma 4 26B-A4B, 31B: the KV heads of the window layers and of the global
                                  * ones where they differ by layer (n_head_kv is the largest; the cache holds each
                                  * layer's own); 0 and 0: n_head_kv on every layer */
    int32_t n_kv_shared_swa;     /* Gemma 4: of the n_kv_shared layers, the window ones (they count in n_swa_layers) */
    int32_t kv_lora_rank;        /* multi-head latent attention (deepseek2): the latent's width; the cache holds one row per
                                  * token, [rotated key (rope_dims) | latent (kv_lora_rank)] = head_dim, n_head_kv 1; 0 without */
    int32_t q_lora_rank;         /* deepseek2: the query's low-rank width (attn_q_a/attn_q_b), 0: one attn_q (V2-Lite) */
    int32_t head_dim_k_mla, head_dim_v_mla; /* deepseek2: a head's key (no-RoPE part + rope_dims) and value sizes as the
                                  * per-head K/V the latent replaces (key_length_mla, value_length_mla); 0 without */
    int32_t n_expert_groups, n_expert_groups_used; /* group-limited routing (deepseek2): experts in n_expert_groups groups,
                                  * a token's experts chosen among its n_expert_groups_used best groups; 0: none */
    int32_t ssm_inner;           /* Mamba-2 (mamba2): the inner width d_inner (ssm.inner_size); 0 otherwise */
};
void kvb_model_get_info(const struct kvb_model *model, struct kvb_model_info *out);
/* The sizing rule (kvb_kv_seq_bytes) for this model's caches: its geometry,
 * and its sliding-window layers at their window (plus a chunk) whatever kv's
 * policy; plus, under a policy that keeps query statistics
 * (expected-attention), their host bytes (kvb_kv_query_stats_bytes with the
 * model's query heads), so that what admits a sequence (batch, serve) counts
 * them. 0 for a bad argument. */
size_t kvb_model_kv_seq_bytes(const struct kvb_model *model, const struct kvb_kv_params *kv, int64_t n_ctx, int64_t n_prompt,
                              int32_t chunk);

/* The model's tokenizer is its vocabulary (kvb_model_vocab, below): one
 * token API for models and vocab-only files. */

/* ---- Tokenizers on their own (vocab-only GGUF files work) ----
 * The model's vocabulary, or one loaded from any GGUF with tokenizer.ggml.*
 * metadata: SentencePiece ("llama"), byte-level BPE ("gpt2" with pre
 * gpt-2, default, llama-bpe, qwen2, deepseek-r1-qwen, smollm, refact,
 * starcoder, dbrx, smaug-bpe, gpt-4o (also llama4, kanana2: o200k), tekken or qwen35), Gemma 4's
 * BPE over raw UTF-8 ("gemma4": pre "gemma4"), or none ("no_vocab": ids
 * only, tokenizing refused). Ids match llama.cpp's. */
struct kvb_vocab;
enum kvb_special_token { KVB_SPECIAL_BOS, KVB_SPECIAL_EOS, KVB_SPECIAL_EOT, KVB_SPECIAL_PAD };

/* Reads only the metadata. Errors name the file and key: KVB_ERR_IO,
 * KVB_ERR_CORRUPT, KVB_ERR_UNSUPPORTED (tokenizer model or pre), KVB_ERR_NOMEM;
 * *out untouched on failure. */
kvb_status kvb_vocab_load(const char *path, struct kvb_vocab **out);
void kvb_vocab_free(struct kvb_vocab *vocab);
/* The model's vocabulary; owned by the model. */
const struct kvb_vocab *kvb_model_vocab(const struct kvb_model *model);
int32_t kvb_vocab_size(const struct kvb_vocab *vocab);
struct kvb_vocab_info {
    bool bpe;                  /* BPE with merges: byte-level, or pre "gemma4" (else SentencePiece) */
    char pre[32];              /* BPE pre-tokenizer ("llama-bpe", ..., "gemma4") */
    int32_t n_tokens, n_merges;
    bool add_space_prefix, ignore_merges, add_bos;
    int32_t bos, eos, eot;     /* -1: none */
    const char *chat_template; /* the file's tokenizer.chat_template (owned by the vocabulary), or NULL */
};
void kvb_vocab_get_info(const struct kvb_vocab *vocab, struct kvb_vocab_info *out);
/* Id of a special token, or -1 when the vocabulary has none. EOT is the
 * end-of-turn token (<|eot_id|>, <|im_end|>, Gemma 4's <turn|>); it falls back to EOS. */
int32_t kvb_vocab_special(const struct kvb_vocab *vocab, enum kvb_special_token which);
/* Whether a token ends generation: EOS, EOT, or a control token that is a
 * family's end-of-turn or end-of-text marker (<|endoftext|>, <|eom_id|>,
 * <|return|>, <|call|>, <turn|>, ...), as llama.cpp's end-of-generation set. Batches
 * end a sequence on it; grammars allow it where they may end. */
bool kvb_vocab_is_eog(const struct kvb_vocab *vocab, int32_t id);
/* Tokenizes text[0..len): add_special adds BOS/EOS as the vocabulary asks;
 * parse_special turns control-token text ("<|im_start|>") into its id.
 * *ids allocated (kvb_buffer_free), even when *n_ids is 0. KVB_ERR_NOMEM. */
kvb_status kvb_vocab_tokenize(const struct kvb_vocab *vocab, const char *text, size_t len, bool add_special, bool parse_special,
                              int32_t **ids, int32_t *n_ids);
/* Client text for a prompt that is tokenized with parse_special (a chat
 * message's content through the template), marked so that its control-token
 * text stays text: each control token's text (one parse_special alone turns
 * into the token, e.g. "<|im_end|>") is wrapped in U+FDD0 ... U+FDD1, a
 * literal U+FDD0 becomes U+FDD0 U+FDD1, and all else is unchanged (text
 * with neither is copied as is). *out NUL-terminated (kvb_buffer_free).
 * KVB_ERR_NOMEM. */
kvb_status kvb_vocab_mark_plain(const struct kvb_vocab *vocab, const char *text, size_t len, char **out, size_t *out_len);
/* kvb_vocab_tokenize with parse_special, except that the text
 * kvb_vocab_mark_plain marked is plain text (tokens as without
 * parse_special, within its fragment) and the marks are gone: so only the
 * text around it (the template's) can be control tokens. A U+FDD0 followed
 * by neither form is text as written. */
kvb_status kvb_vocab_tokenize_marked(const struct kvb_vocab *vocab, const char *text, size_t len, bool add_special, int32_t **ids,
                                     int32_t *n_ids);
/* Bytes of one token; control tokens give nothing unless render_special.
 * Returns the full length, writing at most cap bytes. */
size_t kvb_vocab_token_bytes(const struct kvb_vocab *vocab, int32_t id, bool render_special, char *buf, size_t cap);

/* Streaming decoder: whole UTF-8 characters only, an incomplete tail held
 * back until the token that completes it (or kvb_detok_flush). */
struct kvb_detok {
    char held[4];
    int n_held;
};
/* Appends token id. Returns the bytes now ready; if that exceeds cap,
 * nothing is written and *d is unchanged (call again with a larger buffer). */
size_t kvb_detok_push(const struct kvb_vocab *vocab, struct kvb_detok *d, int32_t id, bool render_special, char *buf, size_t cap);
/* The held bytes (an unfinished character at the end of the stream). */
size_t kvb_detok_flush(struct kvb_detok *d, char *buf, size_t cap);

/* ---- Chat templates ----
 * The Jinja tokenizer.chat_template is recognized by its signature, as
 * llama.cpp does, and rendered by built-in code for that family. */
/* KVB_CHAT_PLAIN is no template: "System: ...\n", "User: ...\n",
 * "Assistant: ...\n" lines and an "Assistant:" header, for base models. */
/* KVB_CHAT_GEMMA: <start_of_turn>user\n...<end_of_turn>\n, the assistant as "model", a
 * system message prefixed to the first user turn (Gemma 2/3). */
enum kvb_chat_style { KVB_CHAT_CHATML, KVB_CHAT_LLAMA3, KVB_CHAT_LLAMA2, KVB_CHAT_MISTRAL, KVB_CHAT_PLAIN, KVB_CHAT_GEMMA };
struct kvb_chat_message {
    const char *role; /* "system", "user" or "assistant" */
    const char *content;
};
const char *kvb_chat_style_name(enum kvb_chat_style style);
/* KVB_OK with *style set when a known signature matches; KVB_FALLBACK with
 * *style = KVB_CHAT_CHATML when none does (callers say so to the user);
 * KVB_ERR_INVALID for NULL. */
kvb_status kvb_chat_detect(const char *tmpl, enum kvb_chat_style *style);
kvb_status kvb_chat_style_from_name(const char *name, enum kvb_chat_style *style);
/* The system message a ChatML template inserts when the conversation has
 * none (Qwen2.5: "You are Qwen, created by Alibaba Cloud. ..."), read from
 * its literal '<|im_start|>system\n...<|im_end|>' text with the Jinja
 * escapes undone. Returns its length (0: none), writing at most cap - 1
 * bytes and a NUL. */
size_t kvb_chat_default_system(const char *tmpl, char *buf, size_t cap);
/* The conversation as the template renders it, minus the leading BOS text
 * (tokenize with add_special adds it), ending with the assistant header when
 * add_assistant. *out is NUL-terminated (kvb_buffer_free). KVB_ERR_INVALID
 * (unknown role, NULL content), KVB_ERR_NOMEM. */
kvb_status kvb_chat_format(enum kvb_chat_style style, const struct kvb_chat_message *msgs, int32_t n, bool add_assistant, char **out,
                           size_t *len);
/* A control token the style's markup needs that the vocabulary lacks (as
 * its text), or NULL (llama2 and mistral write [INST] as text; plain has
 * none). */
const char *kvb_chat_missing_token(const struct kvb_vocab *vocab, enum kvb_chat_style style);
/* The style to talk to a model in: its template as detected, plain when it
 * has none. KVB_FALLBACK when it had to guess or give up: an unrecognized
 * template (ChatML tried), or a style whose control tokens the vocabulary
 * lacks (plain instead, so the model is never fed markup it never saw);
 * *why (may be NULL) then says which, for the user. */
kvb_status kvb_chat_style_for_vocab(const struct kvb_vocab *vocab, enum kvb_chat_style *style, const char **why);
/* The text that continues a conversation with the user's next message
 * (system only when first): the template's rendering of it after a previous
 * exchange, preceded by what the template writes after the stop token the
 * model ended its answer with (stop_text: that token's text, e.g. ChatML's
 * "<|im_end|>" -> "\n"), or, when the answer was cut short (stop_text "" or
 * NULL), by the template's whole closing of an assistant message. Ends with
 * the assistant header. *out: kvb_buffer_free. */
kvb_status kvb_chat_turn_text(enum kvb_chat_style style, const char *system, const char *user, bool first, const char *stop_text,
                              char **out, size_t *len);

/* ---- Jinja chat templates ----
 * kvb_chat_apply renders a Jinja chat template (a GGUF's
 * tokenizer.chat_template, or any template text) over a conversation, as
 * transformers' apply_chat_template does: jinja2 with trim_blocks and
 * lstrip_blocks, raise_exception, strftime_now, and tojson as json.dumps
 * (ensure_ascii=False). The template sees messages, tools (null when none),
 * documents (null), add_generation_prompt, bos_token / eos_token (from the
 * vocabulary, when one is given) and the extra variables. Templates are
 * untrusted: each render is bounded in output, memory, nesting (of the
 * template, of macro calls, and of values: every comparison, print and
 * tojson counts its depth, at most 200), work (1,000,000 steps: a step is a
 * loop iteration or call, or 256 bytes scanned by `in`, find, count, split,
 * replace and the like, or 256 values compared or written; substring search
 * is linear) and wall-clock time (deadline_ms). Past a limit the render
 * fails with KVB_ERR_NOMEM naming it, never a crash. */
struct kvb_chat_apply_params {
    const char *template_text;     /* Jinja source; NULL: the vocabulary's tokenizer.chat_template */
    const struct kvb_vocab *vocab; /* NULL, or where bos_token / eos_token (and a NULL template_text) come from */
    const char *messages_json;     /* a JSON array of messages: {"role": "system" | "developer" | "user" |
                                      "assistant" | "tool", "content": string or list of parts, "tool_calls",
                                      "reasoning_content", "name", "tool_call_id", ...} (required) */
    const char *tools_json;        /* NULL, or a JSON array of tool definitions */
    const char *vars_json;         /* NULL, or a JSON object of extra variables ({"enable_thinking": false}) */
    bool add_generation_prompt;
    bool fallback;                 /* when there is no template, or it fails with KVB_ERR_UNSUPPORTED, render the
                                      messages (roles system/user/assistant, text content) with the signature
                                      family (kvb_chat_detect, kvb_chat_format) and return KVB_FALLBACK */
    size_t max_output;             /* bytes; 0: 16 MiB */
    int32_t deadline_ms;           /* wall-clock limit of the render; 0: 2000 ms; < 0: none (the step budget still holds) */
    bool strip_bos;                /* drop the vocabulary's BOS text where the prompt starts with it, when the
                                      vocabulary adds BOS itself (a template writes bos_token; tokenizing with
                                      add_special adds BOS again); a vocabulary that adds none keeps it */
    char *why;                     /* NULL, or a buffer that receives the reason for a fallback */
    size_t why_cap;
};
struct kvb_chat_apply_params kvb_chat_apply_default_params(void);
/* *out: the rendered prompt, NUL-terminated (kvb_buffer_free); *len its
 * bytes. KVB_OK; KVB_FALLBACK (see fallback); KVB_ERR_INVALID (bad JSON,
 * named with line and column; a template syntax or evaluation error, or its
 * raise_exception, named with the template line; no template);
 * KVB_ERR_UNSUPPORTED (a construct outside the interpreter's subset, named
 * with its line); KVB_ERR_NOMEM (a limit, named: output, memory, nesting,
 * step budget, deadline; or the allocator). */
kvb_status kvb_chat_apply(const struct kvb_chat_apply_params *params, char **out, size_t *len);

/* ---- What a chat model wrote: content, reasoning and tool calls ----
 * kvb_chat_parser turns generated text into OpenAI's assistant message,
 * incrementally for streaming. Formats:
 *   KVB_TOOLS_HERMES  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, several in a row, after
 *                     prose too (Qwen2.5/3, QwQ, Hermes 2/3 Pro, Granite 4.0); templates of XML calls
 *                     (<function=f> of Qwen3-Coder / Qwen3.5, GLM's <arg_key>) are detected as none
 *   KVB_TOOLS_LLAMA3  the whole output (after white space) {"name": "f", "parameters"|"arguments": {...}}, calls
 *                     separated by ';'; <|python_tag|> (anywhere) then such JSON or a builtin
 *                     name.call(k="v", n=1) (other code after it stays content)
 *   KVB_TOOLS_MISTRAL [TOOL_CALLS][{"name", "arguments", "id"?}, ...] or [TOOL_CALLS]name[CALL_ID]id?[ARGS]{...},
 *                     repeated; reasoning in [THINK]...[/THINK]; ids of 9 alphanumerics
 *   KVB_TOOLS_HARMONY gpt-oss: <|channel|>analysis<|message|>...<|end|> reasoning, final -> content,
 *                     commentary to=functions.f [<|constrain|>json]<|message|>{...}<|call|> a call (the
 *                     recipient may be in the role part: <|start|>assistant to=functions.f<|channel|>...)
 *   KVB_TOOLS_GRANITE <|tool_call|>[{"name", "arguments"}, ...] (Granite 3.x), <tool_call> as Hermes;
 *                     <response> and </response> dropped
 * Reasoning (think): <think>...</think> at the start of the output (after white space); unterminated at
 * final, it is all reasoning. Content and reasoning are trimmed of white space at both ends (content
 * is null when empty); invalid UTF-8 becomes U+FFFD. A call is taken only whole: its JSON closed and parsed, a string "name",
 * arguments an object (or a string holding one); its arguments string is that object as compact JSON
 * (white space outside strings dropped). A call whose JSON never closes by final, does not parse, is
 * longer than 1 MiB or nested deeper than 64 stays content as written (its marker and text); at most
 * 256 calls per message. Ids: "call_" + 24 alphanumerics (9 for Mistral), deterministic per parser
 * (kvb_chat_parser_seed); an id the model wrote is kept when it fits (up to 64 of [A-Za-z0-9_-]; for
 * Mistral 9 alphanumerics). gpt-oss: text before the first <|message|> is held (up to 1 KiB) as the
 * rest of the header the prompt's "<|start|>assistant" opened. */
enum kvb_tool_format { KVB_TOOLS_NONE, KVB_TOOLS_HERMES, KVB_TOOLS_LLAMA3, KVB_TOOLS_MISTRAL, KVB_TOOLS_HARMONY, KVB_TOOLS_GRANITE };
struct kvb_chat_syntax {
    enum kvb_tool_format tools; /* how the model writes a call */
    bool think;                 /* <think>...</think> (or the family's own markers) go to reasoning_content */
    bool think_open;            /* the prompt already opened the reasoning block (it ends with "<think>\n"), so output starts inside it */
};
const char *kvb_tool_format_name(enum kvb_tool_format f); /* "none","hermes","llama3","mistral","harmony","granite" */
kvb_status kvb_tool_format_from_name(const char *name, enum kvb_tool_format *out);
/* From a chat template's text (its signatures, e.g. "<tool_call>", "<|python_tag|>"/"ipython", "[TOOL_CALLS]", "<|channel|>",
 * "<|tool_call|>", "<think>"): the syntax its model writes (template_text NULL: none). rendered_prompt (may be NULL): the prompt as
 * rendered, to set think_open. */
kvb_status kvb_chat_syntax_detect(const char *template_text, const char *rendered_prompt, struct kvb_chat_syntax *out);
struct kvb_chat_parser;
kvb_status kvb_chat_parser_new(const struct kvb_chat_syntax *syn, struct kvb_chat_parser **out);
void kvb_chat_parser_free(struct kvb_chat_parser *p);
/* Sets the syntax anew, as kvb_chat_parser_new would (before the first feed; declared tools are kept): a parser with its tools
 * declared ahead of time, whose think_open is known only once the prompt is rendered. */
kvb_status kvb_chat_parser_syntax(struct kvb_chat_parser *p, const struct kvb_chat_syntax *syn);
/* The seed of the parser's call ids (default 0); call before the first feed. */
void kvb_chat_parser_seed(struct kvb_chat_parser *p, uint64_t seed);
/* Feeds generated text (any split, even inside a UTF-8 character or a marker). *delta_json: NULL when nothing new can be shown yet,
 * else one JSON object, the chat.completion.chunk `delta` for what became certain: {"content":"..."}, {"reasoning_content":"..."},
 * {"tool_calls":[{"index":0,"id":"call_...","type":"function","function":{"name":"f","arguments":"..."}}]}
 * (several keys at once allowed). A call is shown once whole, so its first delta carries the whole arguments
 * string; argument pieces {"tool_calls":[{"index":0,"function":{"arguments":"..."}}]} may follow in later
 * versions (a client concatenates arguments by index). Text that might start a marker is held back until
 * decided. final: the generation ended: flush everything (an unterminated call: its text stays content, or a call
 * whose JSON is incomplete is refused -> see kvb_chat_parser_message); text fed after it is KVB_ERR_INVALID.
 * Errors (KVB_ERR_NOMEM) leave the parser as it was. *delta_json: kvb_buffer_free. */
kvb_status kvb_chat_parser_feed(struct kvb_chat_parser *p, const char *text, size_t n, bool final, char **delta_json);
/* The whole message as OpenAI's: {"role":"assistant","content":"..." or null,"reasoning_content":"..." (only when any),
 * "tool_calls":[{"id","type":"function","function":{"name","arguments": a JSON string}}] (only when any)}. Before the final
 * feed: what is decided so far. *message_json: kvb_buffer_free. */
kvb_status kvb_chat_parser_message(const struct kvb_chat_parser *p, char **message_json);
/* Declares the tools a call may name (tools_json: OpenAI's "tools" array; call before the first feed). A call to a function not
 * declared, or whose arguments do not match its "parameters" schema (compiled as kvb_json_schema_to_gbnf does, object keys
 * judged in the schema's order whatever order they were written in), is refused as a malformed call is: its marker and text
 * stay content. A schema kvb_json_schema_to_gbnf refuses (a keyword it does not implement) checks the name only. Without this, any call is taken.
 * Every tool's schema is parsed and compiled here, once (a call then costs one match): declare the tools on the thread that may
 * spend that time. KVB_ERR_INVALID (not an array of functions, or nested deeper than 64), KVB_ERR_NOMEM. */
kvb_status kvb_chat_parser_tools(struct kvb_chat_parser *p, const char *tools_json, size_t len);
/* Says the text ends cut short (max_tokens) in a call the caller forced (tool_choice required or named): at the final feed,
 * a call still open is kept as a call instead of content: its name as far as written (name, when given, where the text has
 * not finished one), its arguments the text written after "arguments": (which may not parse; OpenAI does the same, with
 * finish_reason "length"). JSON call forms and gpt-oss's. Call before the final feed. */
void kvb_chat_parser_cut(struct kvb_chat_parser *p, const char *name);
/* The number of tool calls taken so far (at the end: finish_reason "tool_calls" when > 0). */
int32_t kvb_chat_parser_n_calls(const struct kvb_chat_parser *p);

struct kvb_context_params {
    struct kvb_kv_params kv;         /* the cache (kvb_kv_default_params) */
    size_t kv_pool_bytes;            /* default 1 GiB */
    int32_t n_threads;               /* default 1 */
    int32_t n_ctx;                   /* token limit for the full policy; 0 = the model's trained length */
    int32_t chunk;                   /* prefill chunk (default 256) */
};
struct kvb_context_params kvb_context_default_params(void);

kvb_status kvb_context_init(const struct kvb_model *model, const struct kvb_context_params *params, struct kvb_context **out);
void kvb_context_free(struct kvb_context *ctx);
/* Runs n tokens at the next positions (prefill in chunks when n > 1, a decode
 * step when n == 1). logits: NULL, or n_vocab floats for the last token, or
 * n x n_vocab for every token when all_logits. Errors: KVB_ERR_INVALID (bad
 * token id; n_ctx reached with the full policy: message says so),
 * KVB_ERR_NOMEM (pool exhausted); tokens already evaluated stay evaluated. */
kvb_status kvb_context_eval(struct kvb_context *ctx, const int32_t *tokens, int32_t n, float *logits, bool all_logits);
/* Runs a prompt: like kvb_context_eval, but every chunk is prefill (a
 * one-token prompt too), and at its end the cache's prompt compression runs
 * (kvb_cache_compress: snapkv, pyramidkv and adakv select here; other
 * policies are unaffected). run, chat (each turn's new text), ppl --prompt
 * and needle end their prompts through it. Errors as kvb_context_eval; on
 * error nothing is compressed. */
kvb_status kvb_context_prompt(struct kvb_context *ctx, const int32_t *tokens, int32_t n, float *logits, bool all);
void kvb_context_reset(struct kvb_context *ctx);
struct kvb_cache *kvb_context_cache(struct kvb_context *ctx);
/* Saves the context's cache (kvb_cache_save_file), or replaces it with one
 * loaded from a file; the loaded cache must fit the model (KVB_ERR_INVALID
 * otherwise) and the context is unchanged on any error. */
kvb_status kvb_context_save(const struct kvb_context *ctx, const char *path);
kvb_status kvb_context_load(struct kvb_context *ctx, const char *path);
int64_t kvb_context_n_past(const struct kvb_context *ctx);
/* Mixture of experts: the expert weight bytes this context's evaluations
 * have read so far (each routed expert once per chunk; 0 for a dense model).
 * Against kvb_model_info.expert_bytes_per_token, the ideal of one token. */
int64_t kvb_context_expert_bytes_read(const struct kvb_context *ctx);
/* kvzip's extra prefill (kvb_context_prompt runs it): the tokens its
 * reconstruction passes read, and the context tokens they scored, since the
 * context was made (their ratio is kvzip's prefill cost; 0 for others). */
void kvb_context_kvzip_cost(const struct kvb_context *ctx, int64_t *pass_tokens, int64_t *context_tokens);

/* ------------------------------------------------------------------------ */
/* Sampling                                                                 */
/* ------------------------------------------------------------------------ */

struct kvb_logit_bias {
    int32_t token;
    float bias;
};
struct kvb_sampler_params {
    float temp;            /* <= 0: greedy (argmax) */
    int32_t top_k;         /* 0: off */
    float top_p;           /* 1: off */
    float min_p;           /* 0: off; keep tokens with p >= min_p * p_max */
    float repeat_penalty;  /* 1: off; logits of recent tokens divided (positive) or multiplied (negative) */
    int32_t repeat_last_n; /* window of recent tokens for the penalties (repeat, presence, frequency) */
    uint64_t seed;
    float presence_penalty;  /* 0: off; subtracted once from the logit of every token in the window (OpenAI's) */
    float frequency_penalty; /* 0: off; subtracted per occurrence in the window (OpenAI's) */
    const struct kvb_logit_bias *logit_bias; /* NULL, or n_logit_bias (token, bias) pairs added to the logits
                                              * first (-INFINITY bans a token); kvb_sampler_init copies them */
    int32_t n_logit_bias;
};
struct kvb_sampler_params kvb_sampler_default_params(void);
struct kvb_sampler;
kvb_status kvb_sampler_init(const struct kvb_sampler_params *params, int32_t n_vocab, struct kvb_sampler **out);
void kvb_sampler_free(struct kvb_sampler *s);
/* Picks a token from logits (modified in place: logit bias, then the
 * penalties); history = tokens so far. Same seed and same logits give the
 * same choices. KVB_ERR_INVALID from init: a bias token outside the
 * vocabulary or a NaN bias (named), more than 65536 biases. */
int32_t kvb_sampler_sample(struct kvb_sampler *s, float *logits, const int32_t *history, int32_t n_history);
/* The logits a sample is drawn from after bias and penalties, without
 * drawing: what a caller that constrains the choice (a grammar) masks
 * before kvb_sampler_pick. */
void kvb_sampler_adjust(const struct kvb_sampler *s, float *logits, const int32_t *history, int32_t n_history);
/* The draw of kvb_sampler_sample on logits already adjusted. */
int32_t kvb_sampler_pick(struct kvb_sampler *s, const float *logits);
/* Log-probabilities (natural log) of the distribution softmax(logits) at
 * temperature 1: of token (returned; -INFINITY outside the vocabulary), and
 * the top k tokens, most likely first, ties by id, into top_ids/top_lp. k is
 * clamped to KVB_LOGPROBS_MAX_K and to n_vocab: min(k, KVB_LOGPROBS_MAX_K,
 * n_vocab) entries are written and none past them (none for k <= 0, when
 * top_ids/top_lp may be NULL). */
#define KVB_LOGPROBS_MAX_K 64
float kvb_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t k, int32_t *top_ids, float *top_lp);

/* ---- Grammars: constrained decoding ----
 * A grammar is compiled once (kvb_grammar_parse) and shared; each sequence
 * has its own matcher (its position in the grammar), which masks the logits
 * of tokens the grammar cannot take next and advances by the token sampled.
 * Matching is on the UTF-8 bytes each token decodes to (kvb_vocab_token_bytes
 * without render_special), so a character may be split across tokens.
 * Limits on untrusted grammars: 16 MiB of text, 16,384 rules, 2,000,000
 * compiled elements, 64 nested parentheses, repetition counts up to 10,000,
 * matcher stacks 2,048 deep (deeper nesting is refused, not grown). A grammar
 * so ambiguous that more than 4,096 parses are alive at once makes the matcher
 * calls fail with KVB_ERR_UNSUPPORTED (the position unchanged). */
struct kvb_grammar;   /* a compiled GBNF grammar: immutable once built, shareable across threads */
/* Parses llama.cpp's GBNF (rules `name ::= ...`, literals "..." with \n \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes, char classes [a-z] [^...],
 * '.', grouping ( ), alternation |, repetition * + ? {m} {m,} {m,n}, comments #). root: the start rule's name (NULL: "root").
 * KVB_ERR_INVALID with the line and column / the undefined or left-recursive rule named; KVB_ERR_NOMEM. */
kvb_status kvb_grammar_parse(const char *gbnf, size_t len, const char *root, struct kvb_grammar **out);
void kvb_grammar_free(struct kvb_grammar *g);
/* JSON Schema -> GBNF text. Every rule it writes starts with rule_prefix (NULL or "": none); the schema's value is the rule
 * `<prefix>root`. schema_json NULL or "{}" : any JSON value; json_object mode = {"type":"object"}.
 * Objects: properties in the schema's order, optional ones may be left out; with "properties" (even empty: a tool
 * without arguments is {}) and no "additionalProperties" no other key is allowed (as if it were false: say true to allow them); an extra key may not
 * be a declared property's name. Arrays: items, prefixItems, minItems, maxItems (up to 10,000). Strings: minLength,
 * maxLength, pattern (a regular-expression subset: classes, groups, alternation, quantifiers; ^ and $ only at the
 * ends), format date, time, date-time, uuid. Integers: minimum, maximum, exclusiveMinimum, exclusiveMaximum (|bound|
 * < 10^15, as digit ranges). Numbers: no bounds, no multipleOf (refused). enum and const of any JSON value, anyOf and
 * oneOf as alternatives (oneOf's exclusivity is not enforced), allOf of objects (merged), $ref to #/$defs/... and
 * #/definitions/... (recursion allowed), type lists, nullable. Annotations (title, description, default, examples,
 * $schema, $id, $comment, readOnly, writeOnly, deprecated) are ignored.
 * Whitespace between tokens is bounded (none, one space, or a newline and up to 20 spaces or tabs).
 * KVB_ERR_UNSUPPORTED names a keyword it does not implement (never silently ignored: e.g. "patternProperties", "not", "if");
 * KVB_ERR_INVALID a malformed schema (with the JSON pointer of the bad node), or one past a size limit, named: more than 16,384
 * object keys and array items (enum values included, counted on the text before it is read), a grammar of more than
 * 16,384 rules or 8 MiB of text. *gbnf: kvb_buffer_free. */
kvb_status kvb_json_schema_to_gbnf(const char *schema_json, size_t len, const char *rule_prefix, char **gbnf, size_t *gbnf_len);
/* The same, with flags: KVB_SCHEMA_COMPACT allows no white space between tokens (a forced tool call: a weak model cannot
 * spend its tokens on white space between values). */
#define KVB_SCHEMA_COMPACT 1u
kvb_status kvb_json_schema_to_gbnf_flags(const char *schema_json, size_t len, const char *rule_prefix, unsigned flags, char **gbnf, size_t *gbnf_len);
struct kvb_grammar_vocab; /* a vocabulary's tokens as bytes, precomputed once (token trie...), immutable, shareable */
kvb_status kvb_grammar_vocab_new(const struct kvb_vocab *vocab, struct kvb_grammar_vocab **out);
void kvb_grammar_vocab_free(struct kvb_grammar_vocab *gv);
struct kvb_matcher; /* one sequence's position in a grammar (not for concurrent use: it keeps a cache of states) */
/* gv NULL: a byte-level matcher (kvb_matcher_accept_bytes and the queries; token calls refuse). g and gv must outlive it. */
kvb_status kvb_matcher_new(const struct kvb_grammar *g, const struct kvb_grammar_vocab *gv, struct kvb_matcher **out);
void kvb_matcher_free(struct kvb_matcher *m);
/* Sets to -INFINITY the logits (n_vocab) of every token the grammar cannot take next. End-of-generation tokens stay allowed only
 * where the grammar may end (and are the only ones allowed when it must end); other control tokens are never allowed. */
kvb_status kvb_matcher_mask(struct kvb_matcher *m, float *logits);
/* Whether one token may come next (cheap: the sampler tries its pick first and masks only when refused). */
bool kvb_matcher_allows(const struct kvb_matcher *m, int32_t token);
/* Advances by the token; KVB_ERR_INVALID (state unchanged) when it is not allowed. After an end-of-generation token
 * nothing more is allowed. */
kvb_status kvb_matcher_accept(struct kvb_matcher *m, int32_t token);
bool kvb_matcher_can_end(const struct kvb_matcher *m);  /* the text so far is a complete sentence */
bool kvb_matcher_must_end(const struct kvb_matcher *m); /* ... and nothing may follow */
/* Byte-level, for tests and tools: advance by raw bytes (KVB_ERR_INVALID, unchanged, when refused). */
kvb_status kvb_matcher_accept_bytes(struct kvb_matcher *m, const char *s, size_t n);
/* Back to the grammar's start (a matcher may be reused for the next sequence). */
void kvb_matcher_reset(struct kvb_matcher *m);
/* A new matcher at m's position (its own caches start empty): n > 1 samples of one prompt, look-ahead. */
kvb_status kvb_matcher_clone(const struct kvb_matcher *m, struct kvb_matcher **out);

/* ------------------------------------------------------------------------ */
/* Batches: many sequences, one forward pass per step, one page pool        */
/* ------------------------------------------------------------------------ */
/* Every sequence has its own cache (policy, budget, sinks, positions) and
 * sampler; all caches draw pages from the batch's one pool. kvb_batch_step
 * advances every active sequence at once: each decoding sequence feeds its
 * last sampled token (one row), and sequences still reading their prompt
 * join with a chunk while the step's token budget lasts (chunked-prefill
 * continuous batching, first come first served). The weights are read once
 * per step for all decode rows. A sequence's logits equal what a lone
 * kvb_context with the same settings gives (prompt through
 * kvb_context_prompt in chunks of `chunk`, then one kvb_context_eval per
 * token), whatever shares its steps. */
struct kvb_batch;
struct kvb_batch_params {
    struct kvb_kv_params kv;   /* the sequences' KV configuration: its row types and block
                                * size make the pool's page, and every sequence's kv must
                                * have the same three; kvb_batch_seq_default_params gives
                                * sequences this whole kv (kvb_kv_default_params) */
    size_t kv_pool_bytes;    /* the pool every sequence draws from (default 1 GiB) */
    int32_t n_threads;       /* default 1 */
    int32_t max_seqs;        /* sequences at once, 1..4096 (default 64) */
    int32_t step_tokens;     /* rows per step: decode tokens + prompt chunks (default 512) */
    int32_t chunk;           /* prompts join in chunks of this many tokens, <= step_tokens (default 256) */
    /* Stall-free steps (Sarathi-Serve): a step that carries decode rows takes
     * prompt rows only while its predicted time stays under a target, so a
     * prompt no longer pauses every decoder for a whole chunk. The step's
     * time is predicted from the batch's own measured steps
     * (kvb_step_cost). Both 0 (default): off, today's steps (prompts join
     * while step_tokens lasts). A step with no decode rows stalls nobody
     * and still takes prompts up to step_tokens. */
    float step_target_ms;    /* > 0: the target, milliseconds */
    float step_target_x;     /* > 0 (step_target_ms 0): the target is x times the measured
                              * decode-only step */
    int32_t prompt_min_rows; /* with a target: the oldest waiting prompt reads at least this many
                              * rows a step (1..chunk, default 16), so no prompt starves however
                              * small the budget; a prompt may then be read in pieces smaller
                              * than `chunk` (see kvb_batch_step) */
    /* With a target: the largest share of the decoders' inter-token gaps
     * that steps carrying prompt rows may make, counted over recent steps
     * (each step's decoders weigh 0.9 less per later step). A step that
     * would push the share past it carries its decoders alone, so the
     * median gap stays the decode-only step while prompts are waiting
     * (their rows go into the other steps, each still under the target).
     * 0 (default) or 1: every step with decoders may carry prompt rows;
     * otherwise in (0, 1) (KVB_ERR_INVALID outside 0..1 or NaN). */
    float prompt_step_share;
};
struct kvb_batch_params kvb_batch_default_params(void);

/* The step-cost model behind step_target_*: a step's time t is fitted as
 * a + r * R (R = all rows of the step, decode and prompt: in one pass a
 * decode row costs about what a prompt row does; a = the rest, mostly the
 * weights' read) by least squares over recent steps, weighted
 * exponentially (each step's weight decays by 0.9 per later step). The
 * decode-only step of n decoders is then a + r * n. Pure functions; the
 * batch keeps one and observes each of its steps but the first (which
 * pages the weights in). */
struct kvb_step_cost {
    double w, sp, st, spp, spt;  /* decayed sums: weight, R, t, R^2, R*t */
    double a_ms, r_ms;           /* the fit (a >= 0, r > 0); r 0: none yet */
};
/* Folds in one step of n_rows rows that took ms. */
void kvb_step_cost_observe(struct kvb_step_cost *c, int32_t n_rows, double ms);
/* The predicted time of a step of n_rows rows, a + r * n_rows; 0 while
 * there is no fit. */
double kvb_step_cost_predict(const struct kvb_step_cost *c, int32_t n_rows);
/* Rows a step may have to stay under target_ms: (target - a) / r, clamped
 * to [min_rows, max_rows]; min_rows while there is no fit yet. */
int32_t kvb_step_cost_budget(const struct kvb_step_cost *c, double target_ms, int32_t min_rows, int32_t max_rows);

struct kvb_seq_params {
    struct kvb_kv_params kv;         /* the sequence's cache: its row types and block_size
                                      * must be the batch's (KVB_ERR_INVALID names the field);
                                      * recall's area counts in the sequence's minimum, and
                                      * kvb_batch_seq_load takes kv from the image but
                                      * recall.cold_dir from here */
    int32_t n_ctx;                   /* token limit under full; 0 = the model's trained length */
    struct kvb_sampler_params sampler;
    int32_t max_tokens;              /* tokens to generate; 0 = no limit */
    bool ignore_eos;                 /* default false: end-of-sequence ends the sequence */
    int32_t prompt_split;            /* 0 (default), or a point in the prompt (kvb_batch_add, or
                                      * the turn's tokens in kvb_batch_continue) no chunk crosses:
                                      * its tokens before and after are each read in chunks of
                                      * `chunk` from their start, as if the prompt were two turns
                                      * (where a shared prefix ends: a sequence forked after reading
                                      * the first part then reads the same chunks) */
};
/* Defaults: kv = kvb_kv_default_params (f16 rows, pages of 16, full). */
struct kvb_seq_params kvb_seq_default_params(void);
/* kvb_seq_default_params with the batch's kv: its row types, page size,
 * and policy, positions and recall as defaults. */
struct kvb_seq_params kvb_batch_seq_default_params(const struct kvb_batch *batch);

enum kvb_seq_state { KVB_SEQ_PROMPT, KVB_SEQ_DECODE, KVB_SEQ_DONE };
struct kvb_seq_info {
    enum kvb_seq_state state;
    int32_t n_prompt, n_prompt_done;
    int32_t n_generated;   /* tokens sampled so far */
    int32_t last_token;    /* sampled by the last step that advanced it, or -1 */
    int64_t n_past;        /* tokens the cache has seen */
    const char *stop;      /* DONE: "eos", "length", "context", "stop" (kvb_batch_finish), "restored" or "forked"; else NULL */
    size_t kv_bytes;       /* pages the sequence holds now */
};

kvb_status kvb_batch_init(const struct kvb_model *model, const struct kvb_batch_params *params, struct kvb_batch **out);
void kvb_batch_free(struct kvb_batch *batch);
/* Bytes the pool must hold for a sequence at its smallest: kvb_kv_seq_bytes
 * for the batch's model and chunk, with n_ctx the sequence's context under
 * full (prompt + max_tokens if smaller). */
size_t kvb_batch_seq_min_bytes(const struct kvb_batch *batch, const struct kvb_seq_params *params, int32_t n_prompt);
/* Whether the pool can hold one more sequence at its minimum next to what
 * every admitted sequence needs at its own (pages forks share counted
 * once): KVB_OK, or KVB_ERR_NOMEM saying how many bytes are missing.
 * Admission control; kvb_batch_add does not ask. */
kvb_status kvb_batch_can_admit(const struct kvb_batch *batch, const struct kvb_seq_params *params, int32_t n_prompt);
/* Adds a sequence that starts reading prompt[0..n_prompt) at the next step
 * (n_prompt >= 1). *seq_id names it until kvb_batch_remove. KVB_ERR_INVALID
 * (bad token or parameter: named), KVB_ERR_NOMEM (max_seqs reached, or
 * memory): the batch is unchanged. */
kvb_status kvb_batch_add(struct kvb_batch *batch, const struct kvb_seq_params *params, const int32_t *prompt, int32_t n_prompt,
                         int32_t *seq_id);
/* Removes a sequence at once, finished or not (cancel): its pages go back to
 * the pool now. KVB_ERR_INVALID for an unknown id. */
kvb_status kvb_batch_remove(struct kvb_batch *batch, int32_t seq_id);
/* Replaces the token a decoding sequence feeds next (its last sampled one):
 * teacher forcing, or a caller's own sampling from kvb_batch_logits. */
kvb_status kvb_batch_set_token(struct kvb_batch *batch, int32_t seq_id, int32_t token);
/* One step. With a step target (kvb_batch_params.step_target_*), prompt
 * rows beyond prompt_min_rows join only while the predicted step time
 * stays under it, and a prompt may be read in a piece smaller than `chunk`
 * when that cannot change its logits: while its cache cannot evict before
 * the prompt ends (policy full, or every token of the prompt within the
 * policy's budget, and no per-layer windows); otherwise it waits for room
 * for a whole chunk (the oldest prompt always gets one), so a sequence's
 * logits still equal a lone context's with chunks of `chunk` (bit for bit
 * where no piece is cut; within float rounding, 1e-4 in test_batch, where
 * one is).
 * Returns the number of sequences it advanced in *n_advanced
 * (0: nothing to do). KVB_ERR_NOMEM when the pool cannot give a sequence
 * the pages the step needs: *failed_seq names it and no cache changed
 * (remove or wait for a sequence, then step again). */
kvb_status kvb_batch_step(struct kvb_batch *batch, int32_t *n_advanced, int32_t *failed_seq);
kvb_status kvb_batch_seq_info(const struct kvb_batch *batch, int32_t seq_id, struct kvb_seq_info *out);
/* The logits (n_vocab) the sequence's last sample was drawn from, before
 * sampling changed them; NULL before its prompt is done. Valid until its
 * next step. */
const float *kvb_batch_logits(const struct kvb_batch *batch, int32_t seq_id);
/* The sequence's cache: for stats and saving, or to fill it with keys and
 * values of its own (kvb_cache_append) before its first step. */
struct kvb_cache *kvb_batch_seq_cache(struct kvb_batch *batch, int32_t seq_id);
/* Sessions. A sequence that finished its turn (DONE) can take another:
 * kvb_batch_continue reads tokens[0..n) as its next prompt on the same
 * cache and then samples with p's sampler, max_tokens and ignore_eos (its
 * policy, positions and n_ctx stay; the sampler restarts from p's seed).
 * The token it sampled last is not in its cache: pass it first in tokens
 * to keep it (kvb_seq_info.last_token), or leave it out to drop it.
 * KVB_ERR_INVALID (not DONE, bad token, past n_ctx under full),
 * KVB_ERR_NOMEM: the sequence is unchanged. */
kvb_status kvb_batch_continue(struct kvb_batch *batch, int32_t seq_id, const struct kvb_seq_params *params, const int32_t *tokens,
                              int32_t n);
/* Constrains the sequence's sampling by a grammar from now until its turn
 * ends (kvb_batch_continue clears it) or m is NULL: each sampled token is
 * one the matcher allows (the sampler's own pick when allowed, else a pick
 * among the allowed after kvb_matcher_mask) and is accepted into it. The
 * caller owns m and keeps it until it clears it or removes the sequence.
 * KVB_ERR_INVALID for an unknown id. */
struct kvb_matcher;
kvb_status kvb_batch_set_matcher(struct kvb_batch *batch, int32_t seq_id, struct kvb_matcher *m);
/* Ends a decoding sequence's turn now (a stop string seen by the caller):
 * DONE with stop "stop"; its last sampled token stays pending. */
kvb_status kvb_batch_finish(struct kvb_batch *batch, int32_t seq_id);
/* A DONE sequence as a session image: its cache image (kvb_cache_save),
 * its token history, its pending token and n_ctx, CRC-32 checked.
 * *buf: kvb_buffer_free. KVB_ERR_INVALID when the sequence is mid-turn. */
kvb_status kvb_batch_seq_save(const struct kvb_batch *batch, int32_t seq_id, void **buf, size_t *len);
/* Adds a sequence from a session image, DONE (stop "restored"), ready for
 * kvb_batch_continue; it continues exactly as the saved one would have.
 * params gives its sampler (policy and positions come from the image).
 * KVB_ERR_CORRUPT / KVB_ERR_UNSUPPORTED (bad image, named), KVB_ERR_INVALID
 * (the image's cache does not fit the model, kv dtype or block size),
 * KVB_ERR_NOMEM (no slot, or the pool cannot hold it): the batch is
 * unchanged. */
kvb_status kvb_batch_seq_load(struct kvb_batch *batch, const struct kvb_seq_params *params, const void *buf, size_t len, int32_t *seq_id);
/* Adds a sequence that shares a DONE sequence's cache, copy on write
 * (kvb_cache_fork): the same tokens seen, history and pending token, DONE
 * (stop "forked"), ready for kvb_batch_continue, which it then continues
 * exactly as the source would. Sessions that begin with the same prompt
 * (a system prompt, few-shot examples) read it once: one sequence reads it
 * and finishes (max_tokens 1), each session forks it and continues with
 * its own tokens, leaving the pending token out. Their pages are held once
 * until a sequence writes into them or compacts (kvb_pool_stats.pages_shared);
 * the whole pages of a pinned span (kv.keep) stay shared for good.
 * p gives the sampler, max_tokens and ignore_eos; the cache's configuration
 * and n_ctx are the source's. KVB_ERR_INVALID (unknown or not DONE),
 * KVB_ERR_UNSUPPORTED (recall), KVB_ERR_NOMEM (no slot, memory): the batch
 * is unchanged. */
kvb_status kvb_batch_seq_fork(struct kvb_batch *batch, int32_t src_seq, const struct kvb_seq_params *params, int32_t *seq_id);
/* Compress-on-park: a DONE sequence's cache is compressed query-agnostically
 * before it is stored (serve --park-compress), keeping (1 - ratio) of the
 * tokens it holds (ratio = the fraction removed, kvpress's compression
 * ratio, 0 < ratio < 1). how: KVB_POLICY_KVZIP (kvb_cache_park_begin, a
 * reconstruction pass over every token the sequence read, in chunks,
 * kvb_cache_park_end); the sequence's own policy goes on from what is
 * kept, and the next turn continues from it. Costs a prefill of its
 * history (kvb_batch_stats.kvzip_pass_tokens). KVB_ERR_INVALID (unknown or
 * not DONE, ratio outside (0, 1)), KVB_ERR_UNSUPPORTED (another `how`, named;
 * recurrent layers), KVB_ERR_NOMEM (the pool cannot hold
 * a pass: the sequence is as before). */
kvb_status kvb_batch_seq_park(struct kvb_batch *batch, int32_t seq_id, enum kvb_policy_id how, double ratio);
struct kvb_batch_stats {
    int32_t n_seqs, n_active;    /* held; not DONE */
    int64_t steps, rows;         /* steps run, rows processed */
    size_t pool_bytes_in_use, pool_bytes_peak, pool_bytes_capacity;
    size_t page_bytes;           /* one page of the pool */
    int64_t expert_bytes_read;   /* mixture of experts: expert weight bytes the steps read (each
                                  * routed expert once per step for all its rows); 0 for a dense model */
    size_t pool_bytes_shared;    /* pages in use held by more than one sequence (kvb_batch_seq_fork),
                                  * each counted once in pool_bytes_in_use */
    struct kvb_step_cost step_cost; /* the step-cost fit the next step's budget will use (stall-free
                                     * steps: kvb_step_cost_predict / kvb_step_cost_budget) */
    int64_t kvzip_pass_tokens;   /* tokens kvzip's reconstruction passes read (prompts that end, parks) */
};
void kvb_batch_get_stats(const struct kvb_batch *batch, struct kvb_batch_stats *out);

/* ------------------------------------------------------------------------ */
/* Evaluation                                                               */
/* ------------------------------------------------------------------------ */

/* The llama2.c-style corpus preparation of ../shared/data/README.md: split
 * text on blank lines ("\n\n"), turn remaining newlines into spaces, and
 * concatenate [BOS] + tokens of each non-empty paragraph. *ids is allocated
 * (free with kvb_buffer_free). */
kvb_status kvb_eval_tokenize_paragraphs(const struct kvb_model *model, const char *text, size_t len, int32_t **ids, int64_t *n);

/* Full-attention windowed perplexity: the stream is cut into non-overlapping
 * windows of `window` tokens (the last may be shorter), the cache is reset at
 * each window, and every next-token prediction inside a window is scored.
 * Adds to *sum_nll (nats) and *count. max_windows > 0 stops early. */
kvb_status kvb_eval_window_nll(const struct kvb_model *model, const int32_t *ids, int64_t n, int32_t window, int32_t n_threads,
                               int64_t max_windows, double *sum_nll, int64_t *count);

/* Quality of a policy on a token stream (docs/EVALUATION.md, "kvbound ppl").
 * Tokens are fed in order, `chunk` per step with eviction between steps;
 * every next-token prediction from position 1 on is scored. kv.policy.budget is
 * B, the most tokens any query attends to, the current one included: the
 * cache keeps B - chunk between steps. */
enum kvb_baseline {
    KVB_BASELINE_NONE = 0,
    KVB_BASELINE_FULL = 1,      /* no eviction: also gives KL(full || policy) and top-1 agreement */
    KVB_BASELINE_RECOMPUTE = 2, /* StreamingLLM's oracle: the last B tokens recomputed at 0..B-1 */
};

struct kvb_ppl_params {
    struct kvb_kv_params kv;    /* the policy's cache: streaming and f32 rows by default, to
                                 * measure the policy, not KV rounding. The full baseline is
                                 * always f32, so --policy full --kv-dtype q8_0 isolates the bits */
    int32_t chunk;              /* tokens per step (1) */
    enum kvb_baseline baseline;
    bool mass;                  /* retained share of full attention (needs chunk 1; runs the full model too) */
    int32_t n_threads;
    int32_t segment;            /* predictions per curve point (256) */
    int32_t prompt;             /* > 0: the kvpress protocol. The first `prompt` tokens (BOS
                                 * included) are a prompt, read through kvb_context_prompt (the
                                 * snapkv family compresses it to kv.policy.budget per stream and
                                 * keeps up to decode_budget continuation tokens after it);
                                 * decode-time policies are fed it `chunk` tokens per step and
                                 * hold B - chunk throughout. Only the continuation is scored,
                                 * from the prediction of token `prompt` (out of the prompt's
                                 * last logits) on. Not with --mass or the recompute baseline. */
    void (*progress)(int64_t done, int64_t total, void *user);
    void *user;
};
struct kvb_ppl_params kvb_ppl_default_params(void);

struct kvb_ppl_result {
    int64_t tokens;             /* scored predictions */
    double nll, ppl;
    bool has_baseline;
    double base_nll, base_ppl;
    bool has_kl;
    double kl, top1;
    bool has_mass;
    double mass;                /* mean over (attention) layers, heads and queries */
    double *mass_layer;         /* [n_layer]; NaN for a layer without attention (a hybrid's Gated DeltaNet layers) */
    int32_t n_layer;
    double sink_mass;           /* with mass: full attention on position 0, mean over (attention) layers */
    double *sink_mass_layer;    /* [n_layer]; NaN as mass_layer */
    size_t kv_bytes_peak;       /* with recall: recall areas included (recall_bytes of it) */
    size_t recall_bytes;        /* recall: the areas' pages at the end */
    int64_t cold_pages;         /* recall: pages in the cold tier at the end */
    double recall_score_s, recall_load_s; /* recall: worker time scoring cold pages, copying recalled ones */
    double prompt_kept;         /* with prompt: prompt tokens kept per stream after it (mean over the attention layers' streams) */
    int32_t prompt_kept_min, prompt_kept_max;
    double tok_per_s;
    double *nll_tok;            /* [tokens] */
    double *base_nll_tok;       /* [tokens] or NULL */
    int32_t n_seg;
    double *seg_ppl;            /* [n_seg] */
    int64_t kvzip_pass_tokens, kvzip_context_tokens; /* with prompt, kvzip: its reconstruction's cost (kvb_context_kvzip_cost) */
};

kvb_status kvb_eval_ppl(const struct kvb_model *model, const int32_t *ids, int64_t n, const struct kvb_ppl_params *params,
                        struct kvb_ppl_result *out);
void kvb_ppl_result_free(struct kvb_ppl_result *r);

/* Needle retrieval through eviction (docs/EVALUATION.md, "kvbound needle").
 * A haystack of `length` tokens: filler text with the sentence "The pass key
 * is NNNNN. Remember it." inserted at `depth` (0..1, at a sentence
 * boundary), then "What is the pass key? The pass key is". The model answers
 * greedily; `correct` is an exact match of the five digits. `retained` is the
 * share of (layer, KV head) streams that still hold every token of the
 * passkey when the question has been read. */
struct kvb_needle_params {
    struct kvb_kv_params kv;   /* the cache (kvb_needle_default_params: full, f16 rows) */
    int32_t length;        /* haystack tokens, question included */
    double depth;          /* 0 = start, 1 = end */
    uint32_t key;          /* 10000..99999 */
    const char *filler;    /* text to repeat; NULL = built-in */
    int32_t chunk;         /* prefill chunk (256) */
    int32_t n_threads;
    /* Several passkeys (0 or 1 = the single passkey above). With passkeys
     * = N > 1 or ask_after, N needle sentences "The pass key number I is K.
     * Remember it." (I = 1..N; K distinct, drawn from `key`) go in at depths
     * depth + (I-1)/N (mod 1), at sentence boundaries. Without ask_after each
     * passkey is asked in a prompt of its own, its question ending the
     * compressed prompt; with ask_after the haystack alone is the prompt (it
     * is compressed before any question), then one turn per passkey in the
     * same context: the question's tokens, then up to 8 greedy tokens. */
    int32_t passkeys;      /* 0..64 */
    bool ask_after;
};
struct kvb_needle_params kvb_needle_default_params(void);
struct kvb_needle_result {
    bool correct;
    double retained;       /* with recall: the passkey counts as held when every token is
                            * retained or in the stream's recall area (the attended set) */
    double retained_hot;   /* the same for the retained slots alone */
    int32_t prompt_tokens, needle_pos;
    char answer[64];       /* several passkeys: the last passkey's answer */
    int32_t passkeys;      /* passkeys asked (1 for the single passkey) */
    int32_t n_correct;     /* of them, answered exactly; correct = all of them. With several,
                            * retained and retained_hot are averaged over the passkeys */
    int64_t kvzip_pass_tokens, kvzip_context_tokens; /* kvzip: its reconstruction passes' tokens and the
                            * context tokens they scored (kvb_context_kvzip_cost; 0 for other policies) */
};
kvb_status kvb_eval_needle(const struct kvb_model *model, const struct kvb_needle_params *params, struct kvb_needle_result *out);

/* RULER's synthetic tasks (docs/EVALUATION.md, "RULER"; arXiv 2404.06654),
 * generated as NVIDIA/RULER's synthetic.yaml and data/synthetic scripts define
 * them: 11 of its 13 tasks (qa_1 and qa_2 need SQuAD and HotpotQA, which
 * kvbound does not ship: kvb_ruler_task_from_name names them as absent).
 * A corpus holds the sources: an essay text (the haystack of the essay
 * tasks; Project Gutenberg's "*** START OF" / "*** END OF" lines are cut
 * off) and a word list, one word a line (Debian's wamerican; only lines of
 * 3..12 lowercase ASCII letters are used). Both are copied. */
#define KVB_RULER_TASKS 11
#define KVB_RULER_MAX_ANSWERS 16
/* Task i's name as RULER spells it (i in 0..KVB_RULER_TASKS-1), NULL past. */
const char *kvb_ruler_task_name(int32_t i);
/* KVB_ERR_INVALID for an unknown name, and for qa_1 / qa_2 (named absent). */
kvb_status kvb_ruler_task_from_name(const char *name, int32_t *task);
/* Whether RULER scores the task with string_match_part (the QA tasks) or
 * string_match_all (the 11 here): always false here, kept for the QA tasks. */
bool kvb_ruler_task_part(int32_t task);
struct kvb_ruler_corpus;
/* essay or words may be NULL (len 0): then the tasks that need them are
 * refused by kvb_ruler_generate, naming the missing source. KVB_ERR_NOMEM. */
kvb_status kvb_ruler_corpus_new(const char *essay, size_t essay_len, const char *words, size_t words_len, struct kvb_ruler_corpus **out);
void kvb_ruler_corpus_free(struct kvb_ruler_corpus *c);
/* Words of the list kept, words of the essay. */
void kvb_ruler_corpus_size(const struct kvb_ruler_corpus *c, int64_t *n_words, int64_t *n_essay_words);
/* A sample's input is context + question + answer_prefix: context is the
 * task text through its haystack (what --ask-after compresses before the
 * question is read), question the rest of the user's message, answer_prefix
 * RULER's answer prefix (written after the chat template's assistant
 * header). answers are the strings the output is searched for. */
struct kvb_ruler_sample {
    char *context, *question, *answer_prefix;
    char *answers[KVB_RULER_MAX_ANSWERS];
    int32_t n_answers;
    int32_t tokens_to_generate; /* RULER's: niah 128, vt 30, cwe 120, fwe 50 */
    int64_t units;              /* the haystack's size in the task's unit (essay words, noise paragraphs,
                                 * distractor needles, listed words, coded words) */
    int64_t tokens;             /* count() of the three parts */
};
/* Tokens of a sample's input (its three parts) as the evaluation will read
 * it (kvb_ruler_count_model); negative on failure. */
typedef int64_t (*kvb_ruler_count_fn)(void *ud, const char *context, const char *question, const char *answer_prefix);
/* Sample of task for seed (the same seed, the same sample), its haystack as
 * large as fits: count(input) + tokens_to_generate <= length, as RULER
 * sizes it. KVB_ERR_INVALID: bad task, length outside 64..16M, a source the
 * task needs is missing, or its smallest input does not fit (named).
 * KVB_ERR_NOMEM. *out: kvb_ruler_sample_free. */
kvb_status kvb_ruler_generate(const struct kvb_ruler_corpus *c, int32_t task, uint64_t seed, int64_t length, kvb_ruler_count_fn count,
                              void *ud, struct kvb_ruler_sample *out);
void kvb_ruler_sample_free(struct kvb_ruler_sample *s);
/* RULER's string match of one output, in 0..1: all = the share of answers
 * found in it, part = 1 if any is (case-insensitive substrings). */
double kvb_ruler_match(const char *output, const char *const *answers, int32_t n, bool part);
/* The sample's tokens as kvb_eval_ruler reads them: *context = BOS when
 * the vocabulary adds one, the chat template's opening and the context
 * (what ask_after compresses alone); *rest = the question, the template's
 * closing of the user's turn and assistant header, then the answer prefix.
 * Without a template in the vocabulary, the plain text. Text of the sample
 * is never read as control tokens. Both kvb_buffer_free. KVB_ERR_INVALID,
 * KVB_ERR_NOMEM. */
kvb_status kvb_ruler_tokens(const struct kvb_vocab *vocab, const struct kvb_ruler_sample *s, int32_t **context, int32_t *n_context,
                            int32_t **rest, int32_t *n_rest);
/* A kvb_ruler_count_fn: ud is a const struct kvb_model *; the tokens
 * kvb_eval_ruler reads (kvb_ruler_tokens: the chat template, BOS). -1 on
 * failure. */
int64_t kvb_ruler_count_model(void *ud, const char *context, const char *question, const char *answer_prefix);
struct kvb_ruler_params {
    struct kvb_kv_params kv; /* the cache (kvb_ruler_default_params: full, f16 rows) */
    double ratio;            /* > 0: kvpress's compression ratio, the fraction of the compressed
                              * prompt's tokens removed: the policy's budget is set to the rest
                              * (at least 8) for each sample; 0: kv.policy.budget as given */
    bool ask_after;          /* the context alone is the prompt, compressed before the question
                              * and the answer prefix are read (kvpress's query-agnostic mode) */
    int32_t chunk;           /* prefill chunk (256) */
    int32_t n_threads;
};
struct kvb_ruler_params kvb_ruler_default_params(void);
struct kvb_ruler_result {
    double score;            /* kvb_ruler_match of the output, 0..1 */
    char output[2048];       /* the greedy answer (up to tokens_to_generate tokens, EOG ends it) */
    int32_t prompt_tokens;   /* the whole input */
    int32_t compressed_tokens; /* the prompt the policy compressed (ask_after: the context) */
    int32_t budget;          /* the policy's budget used (0: full) */
};
/* One sample through the model: the model's chat template when its
 * vocabulary has one (one user message: context + question, then the
 * assistant header and answer_prefix), else the plain text; greedy answer;
 * RULER's score. Errors as kvb_eval_needle's (a budget too small for the
 * policy: KVB_ERR_INVALID). */
kvb_status kvb_eval_ruler(const struct kvb_model *model, const struct kvb_ruler_params *params, int32_t task,
                          const struct kvb_ruler_sample *sample, struct kvb_ruler_result *out);

/* ------------------------------------------------------------------------ */
/* Synthetic attention laboratory                                           */
/* ------------------------------------------------------------------------ */

/* A deterministic synthetic attention stream: a prompt of `prompt` tokens
 * followed by `steps` generated tokens. The attention row of query position q
 * over keys [0, q] mixes sink mass, exponentially decaying recency mass, old
 * fact tokens (salient throughout, strongly queried at given steps), an
 * observation window at the end of the prompt that reveals some facts, and a
 * diffuse background. Rows are non-negative and sum to one. */
struct kvb_lab_stream;

/* Scenarios: "chat", "needle", "diffuse", "drift" (see docs/LAB.md).
 * Errors: KVB_ERR_INVALID (unknown name, sizes out of 16..1048576). */
kvb_status kvb_lab_stream_init(const char *scenario, int32_t prompt, int32_t steps, uint64_t seed,
                               struct kvb_lab_stream **out);
void kvb_lab_stream_free(struct kvb_lab_stream *st);
const char *kvb_lab_scenario_describe(const char *scenario);
int32_t kvb_lab_prompt_len(const struct kvb_lab_stream *st);
int32_t kvb_lab_steps(const struct kvb_lab_stream *st);
/* Writes the row of query position q (0 <= q < prompt + steps) into
 * row[0..q]. */
void kvb_lab_row(const struct kvb_lab_stream *st, int64_t q, double *row);

struct kvb_lab_fact {
    int32_t pos;       /* position in the prompt */
    int32_t group;     /* 0: revealed by the observation window ("A"), 1: not ("B") */
};
int32_t kvb_lab_n_facts(const struct kvb_lab_stream *st);
struct kvb_lab_fact kvb_lab_fact(const struct kvb_lab_stream *st, int32_t i);
/* Facts queried at generated step t: writes up to max fact indexes, returns the count. */
int32_t kvb_lab_active_facts(const struct kvb_lab_stream *st, int32_t t, int32_t *facts, int32_t max);

/* Audit of every row: largest |sum - 1| and smallest entry. */
void kvb_lab_check_rows(const struct kvb_lab_stream *st, double *max_sum_err, double *min_entry);

struct kvb_lab_result {
    double mass_mean, mass_min;   /* retained attention mass R_t over generated steps */
    double *mass;                 /* [steps] R_t */
    int32_t fact_queries[2];      /* fact-query events per group (A, B) */
    int32_t fact_hits[2];         /* ... whose fact was retained when queried */
    int32_t peak_slots;           /* most slots held at once (during a step) */
    int32_t budget_violations;    /* steps ending with more slots than the budget */
    int32_t mass_out_of_range;    /* steps with R_t outside [0, 1] */
    int32_t n_snap;               /* snapshots of the retained set at requested steps */
    int32_t *snap_n;              /* [n_snap] retained slots */
    int64_t *snap_pos;            /* [n_snap][budget cap] their original positions */
    int32_t snap_stride;
};

/* Runs one policy (the library's real policy object, in a one-stream cache)
 * over the stream: prefill in chunks of `chunk` tokens (0 = whole prompt)
 * with the policy's prefill evidence, kvb_cache_compress, then one step per
 * generated token: append, observe the row renormalised over the retained
 * slots, evict. Snapshots the retained positions after attending at the
 * generated steps snap_steps[0..n_snap). Free with kvb_lab_result_free.
 * Errors: those of kvb_cache_init; KVB_ERR_NOMEM; KVB_ERR_UNSUPPORTED for
 * expected-attention (its evidence is queries, which a lab stream lacks). */
kvb_status kvb_lab_run(const struct kvb_lab_stream *st, const struct kvb_policy_params *policy, int32_t chunk,
                       const int32_t *snap_steps, int32_t n_snap, struct kvb_lab_result *out);
void kvb_lab_result_free(struct kvb_lab_result *r);
/* kvb_lab_run with reversible eviction: evicted tokens go to cold pages of 16
 * in eviction order (as the cache's cold tier groups them), and at each
 * generated step the recall_pages (1..64) pages holding the largest
 * attention weight of the row are attended besides the retained slots. The
 * lab has no keys, so a page's score is that exact weight: what the cache's
 * key bounds estimate (docs/RECALL.md). Fact hits count recalled facts; R_t
 * and the policy's evidence are over retained plus recalled tokens. */
kvb_status kvb_lab_run_recall(const struct kvb_lab_stream *st, const struct kvb_policy_params *policy, int32_t chunk, int32_t recall_pages,
                              const int32_t *snap_steps, int32_t n_snap, struct kvb_lab_result *out);

/* ------------------------------------------------------------------------ */
/* Kernels                                                                  */
/* ------------------------------------------------------------------------ */

/* Which kernel family is in use: "ref", "avx2", "avxvnni" or "avx512" (with
 * or without VNNI). KVB_REF=1 in the environment forces "ref"; KVB_KERNELS=NAME
 * caps the choice at that family (ref, avx2, avxvnni, avx512, avx512vnni). */
const char *kvb_kernels_name(void);
/* What the CPU offers (CPUID and the OS's saved state), whatever KVB_REF says. */
bool kvb_cpu_has_avx2(void);
bool kvb_cpu_has_avx512(void);
bool kvb_cpu_has_avx512vnni(void);
bool kvb_cpu_has_avxvnni(void); /* AVX-VNNI: 256-bit VNNI (Alder Lake and later clients, Zen 5) */

/* ------------------------------------------------------------------------ */
/* Tensor types and model files                                             */
/* ------------------------------------------------------------------------ */

/* Weight types, numbered as in GGML / GGUF: the ones kvbound reads and writes. */
enum kvb_type {
    KVB_TYPE_F32 = 0, KVB_TYPE_F16 = 1, KVB_TYPE_Q4_0 = 2, KVB_TYPE_Q4_1 = 3, KVB_TYPE_Q5_0 = 6, KVB_TYPE_Q5_1 = 7, KVB_TYPE_Q8_0 = 8,
    KVB_TYPE_Q4_K = 12, KVB_TYPE_Q5_K = 13, KVB_TYPE_Q6_K = 14, KVB_TYPE_IQ4_NL = 20, KVB_TYPE_IQ4_XS = 23, KVB_TYPE_BF16 = 30,
    KVB_TYPE_MXFP4 = 39
};
/* "q8_0", ...; "?" for a number kvbound does not know. */
const char *kvb_type_name(uint32_t type);
/* Case-insensitive name of one of the types above; KVB_ERR_INVALID
 * (naming them) otherwise. */
kvb_status kvb_type_from_name(const char *name, uint32_t *type);
/* Bytes of n values of the type (blocks included); 0 when n is not a whole
 * number of blocks or the type is unknown. */
size_t kvb_type_row_bytes(uint32_t type, int64_t n);

/* The tensors of a GGUF file (metadata only, bounds-checked as when loading). */
struct kvb_tensor_info {
    char name[96];
    uint32_t type;       /* enum kvb_type (or another GGML type number) */
    int32_t n_dims;
    int64_t ne[4];       /* ne[0] innermost; unused dims are 1 */
    uint64_t bytes;
};
/* *out is allocated (kvb_buffer_free), *n tensors. Errors as the GGUF reader's. */
kvb_status kvb_gguf_tensors(const char *path, struct kvb_tensor_info **out, int64_t *n);

/* Writes any loaded model as GGUF with its 2-D weights in `type` (rows that
 * cannot hold that type's blocks fall back to q8_0, then f16); the tokenizer
 * and hyperparameters go with it. progress (may be NULL) gets (done, total)
 * per layer. The file appears atomically (rename). */
kvb_status kvb_model_write_gguf(const struct kvb_model *model, const char *path, uint32_t type,
                                void (*progress)(int32_t done, int32_t total, void *user), void *user);
/* A random-weight model of a real shape ("tiny", "tinyllama-1.1b", ...:
 * kvb_model_shapes()), in memory (F32), seeded; vocab_path (may be NULL)
 * copies a real tokenizer from a GGUF. Free with kvb_model_make_free. */
kvb_status kvb_model_make(const char *shape, uint64_t seed, const char *vocab_path, struct kvb_model **out, void **owned);
void kvb_model_make_free(struct kvb_model *model, void *owned);
const char *kvb_model_shapes(void);
/* Bytes of the token-embedding matrix (one row is read per token). */
size_t kvb_model_token_embd_bytes(const struct kvb_model *model);

#if defined(__GNUC__) && !defined(KVB_NO_VISIBILITY)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* KVBOUND_H */

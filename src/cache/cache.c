/*
 * cache.c — one sequence's KV cache: n_layer x n_kv_head streams of pages
 * from a pool, attention over the retained slots, eviction by policy.
 *
 * Prepare, then apply. Every mutating call first reserves what it needs
 * (array capacity, scratch, pages from the pool) serially; that step may fail
 * and then changes nothing observable. The apply step writes rows, runs
 * attention and evicts, per KV head in parallel (ops split heads by (ith,
 * nth)), and cannot fail. Eviction only frees.
 *
 * Positions. Keys are stored rotated at their ORIGINAL position p and never
 * rewritten. Attention sees cache positions c: c = p in ORIGINAL mode, and
 * c = j (logical index) in CONTIGUOUS mode. RoPE is relative, so
 *     R(c_q)q . R(c_j)k = R(c_q + p_j - c_j)q . R(p_j)k,
 * i.e. the stored key is used as is and the QUERY is rotated by
 * c_q + delta_j with delta_j = p_j - c_j. Slots with equal delta form runs
 * (maximal ranges of logical slots); the query is rotated once per run.
 *   - ORIGINAL mode: one run, delta 0.
 *   - CONTIGUOUS, streaming: two runs (sinks, delta 0; window, one delta).
 *   - CONTIGUOUS with scattered evictions: one run per gap.
 *   - CAPPED (LM-Infinite): c = p, except that a key farther than
 *     max_distance from the query is seen at that distance: each such key
 *     is its own run (query at p_j + max_distance), the rest one run. Only
 *     the sinks are that far under lminfinite's budgets.
 * Per-step cost: O(runs * d) query rotations + O(runs) bookkeeping per
 * eviction, against O(n * d) for re-rotating every cached key each step (the
 * StreamingLLM reference code) — and no key is ever rewritten, so F16 keys
 * do not drift. Worst case (a gap after every slot) equals the re-rotation
 * cost; docs/ARCHITECTURE.md has the numbers.
 *
 * Prompts (snapkv family). A prompt is read without eviction (unless
 * prefill_budget), its last obs_window queries are kept pre-RoPE per layer
 * (ring_q), and kvb_cache_compress has them vote over the whole stream with
 * the same attention code as prefill; see compress_layer.
 */
#include "cache_impl.h"
#include "../policies/policy.h"

#include <math.h>
#include <stdlib.h>

#define ROPE_MEMO 16 /* capped positions: the global tokens keep their rotations across steps */

struct kvb_head_scratch {
    float *acc;      /* [MAX_ROWS][d] */
    float *qrot;     /* [MAX_ROWS][d] */
    float *out;      /* [MAX_ROWS][d] */
    float *lse;      /* [MAX_ROWS] */
    int32_t *limit;  /* [MAX_ROWS] */
    float *krow;     /* [d] */
    float *p;        /* [G][cap] decode probabilities */
    float *col;      /* [cap] prefill column mass / mean weights */
    int32_t *seg_j;  /* [seg_cap] */
    float *seg_m;    /* [seg_cap][MAX_ROWS] */
    int64_t cap, seg_cap, p_rows;
    int64_t memo_pos[ROPE_MEMO];
    float *memo_cs;  /* [ROPE_MEMO][2*n_pairs] */
    int32_t memo_next;
    struct kvb_run *cruns; /* [cap + 1] runs of one query in CAPPED mode */
};

/* ------------------------------------------------------------------------ */
/* params                                                                   */
/* ------------------------------------------------------------------------ */

struct kvb_cache_params kvb_cache_default_params(void) {
    struct kvb_cache_params p;
    memset(&p, 0, sizeof p);
    p.n_layer = 1;
    p.n_kv_head = 1;
    p.head_dim = 64;
    p.dtype = KVB_DTYPE_F16;
    p.block_size = 16;
    p.pos_mode = KVB_POS_POLICY_DEFAULT;
    p.rope.type = KVB_ROPE_NONE;
    p.rope.base = 10000.0f;
    p.rope.freq_scale = 1.0f;
    p.policy = kvb_policy_baseline_params();
    p.pool_bytes = (size_t)1 << 30;
    return p;
}

size_t kvb_cache_page_bytes(const struct kvb_cache_params *p) {
    size_t row = kvb_dtype_row_bytes(p->dtype, p->head_dim);
    if (!row || p->block_size <= 0) return 0;
    return 2 * (size_t)p->block_size * row;
}

static kvb_status validate_params(const struct kvb_cache_params *p) {
    if (p->n_layer < 1 || p->n_layer > 4096) return kvb_fail(KVB_ERR_INVALID, "cache: n_layer must be in 1..4096, got %d", (int)p->n_layer);
    if (p->n_kv_head < 1 || p->n_kv_head > KVB_MAX_KV_HEADS)
        return kvb_fail(KVB_ERR_INVALID, "cache: n_kv_head must be in 1..%d, got %d", KVB_MAX_KV_HEADS, (int)p->n_kv_head);
    if (p->head_dim < 1 || p->head_dim > 512) return kvb_fail(KVB_ERR_INVALID, "cache: head_dim must be in 1..512, got %d", (int)p->head_dim);
    if (p->dtype == KVB_DTYPE_Q8_0) return kvb_fail(KVB_ERR_UNSUPPORTED, "cache: dtype q8_0 is reserved and not yet supported (use f32 or f16)");
    if (p->dtype != KVB_DTYPE_F32 && p->dtype != KVB_DTYPE_F16) return kvb_fail(KVB_ERR_INVALID, "cache: unknown dtype %d", (int)p->dtype);
    if (p->block_size < 1 || p->block_size > 4096 || (p->block_size & (p->block_size - 1)))
        return kvb_fail(KVB_ERR_INVALID, "cache: block_size must be a power of two in 1..4096, got %d", (int)p->block_size);
    if (p->pos_mode < KVB_POS_POLICY_DEFAULT || p->pos_mode > KVB_POS_CAPPED) return kvb_fail(KVB_ERR_INVALID, "cache: unknown pos_mode %d", (int)p->pos_mode);
    if (p->max_distance < 0) return kvb_fail(KVB_ERR_INVALID, "cache: max_distance must be >= 0, got %d", (int)p->max_distance);
    if (p->rope.type < KVB_ROPE_NONE || p->rope.type > KVB_ROPE_NEOX) return kvb_fail(KVB_ERR_INVALID, "cache: unknown rope.type %d", (int)p->rope.type);
    if (p->rope.type != KVB_ROPE_NONE) {
        if (p->rope.n_dims < 2 || p->rope.n_dims > p->head_dim || (p->rope.n_dims & 1))
            return kvb_fail(KVB_ERR_INVALID, "cache: rope.n_dims must be even and in 2..head_dim (%d), got %d", (int)p->head_dim, (int)p->rope.n_dims);
        if (!(p->rope.base > 1.0f) || !isfinite(p->rope.base)) return kvb_fail(KVB_ERR_INVALID, "cache: rope.base must be > 1, got %g", (double)p->rope.base);
        if (!(p->rope.freq_scale > 0.0f) || !isfinite(p->rope.freq_scale)) return kvb_fail(KVB_ERR_INVALID, "cache: rope.freq_scale must be > 0, got %g", (double)p->rope.freq_scale);
    }
    const struct kvb_policy_params *pp = &p->policy;
    const struct kvb_policy_i *pi = kvb_policy_iface(pp->id);
    if (!pi) return kvb_fail(KVB_ERR_INVALID, "cache: unknown policy id %d", (int)pp->id);
    const char *pn = pi->name;
    if (pp->n_sink < 0 || pp->n_sink > (1 << 20)) return kvb_fail(KVB_ERR_INVALID, "policy %s: n_sink must be in 0..1048576, got %d", pn, (int)pp->n_sink);
    if (pp->n_recent < -1) return kvb_fail(KVB_ERR_INVALID, "policy %s: n_recent must be >= -1, got %d", pn, (int)pp->n_recent);
    if (pp->budget < 0) return kvb_fail(KVB_ERR_INVALID, "policy %s: budget must be >= 0, got %d", pn, (int)pp->budget);
    if (!(pp->budget_frac >= 0.0f && pp->budget_frac <= 1.0f)) return kvb_fail(KVB_ERR_INVALID, "policy %s: budget_frac must be in [0, 1], got %g", pn, (double)pp->budget_frac);
    if (!(pi->flags & KVB_PF_NEVER_EVICT)) {
        if (pp->budget == 0 && pp->budget_frac == 0.0f)
            return kvb_fail(KVB_ERR_INVALID, "policy %s: needs a budget (tokens or fraction of the prompt)", pn);
        if (pp->budget && pp->budget <= pp->n_sink)
            return kvb_fail(KVB_ERR_INVALID, "policy %s: budget (%d) must exceed n_sink (%d)", pn, (int)pp->budget, (int)pp->n_sink);
    }
    if (!(pp->heavy_ratio >= 0.0f && pp->heavy_ratio <= 1.0f)) return kvb_fail(KVB_ERR_INVALID, "policy %s: heavy_ratio must be in [0, 1], got %g", pn, (double)pp->heavy_ratio);
    if (pp->obs_window < 1 || pp->obs_window > (1 << 16)) return kvb_fail(KVB_ERR_INVALID, "policy %s: obs_window must be in 1..65536, got %d", pn, (int)pp->obs_window);
    if (pp->pool_kernel < 1 || pp->pool_kernel > 255 || !(pp->pool_kernel & 1)) return kvb_fail(KVB_ERR_INVALID, "policy %s: pool_kernel must be odd and in 1..255, got %d", pn, (int)pp->pool_kernel);
    if (!(pp->pyramid_beta >= 1.0f) || !isfinite(pp->pyramid_beta)) return kvb_fail(KVB_ERR_INVALID, "policy %s: pyramid_beta must be >= 1, got %g", pn, (double)pp->pyramid_beta);
    if (!(pp->ada_floor >= 0.0f && pp->ada_floor <= 1.0f)) return kvb_fail(KVB_ERR_INVALID, "policy %s: ada_floor must be in [0, 1], got %g", pn, (double)pp->ada_floor);
    if (pp->history < 1 || pp->history > 32) return kvb_fail(KVB_ERR_INVALID, "policy %s: history must be in 1..32, got %d", pn, (int)pp->history);
    if (pp->threshold < 1 || pp->threshold > pp->history) return kvb_fail(KVB_ERR_INVALID, "policy %s: threshold must be in 1..history (%d), got %d", pn, (int)pp->history, (int)pp->threshold);
    if (pp->pool_mode != KVB_POOL_MAX && pp->pool_mode != KVB_POOL_AVG) return kvb_fail(KVB_ERR_INVALID, "policy %s: pool_mode must be max (0) or avg (1), got %d", pn, (int)pp->pool_mode);
    if (pp->tova_scope != KVB_TOVA_LAYER && pp->tova_scope != KVB_TOVA_HEAD) return kvb_fail(KVB_ERR_INVALID, "policy %s: tova_scope must be layer (0) or head (1), got %d", pn, (int)pp->tova_scope);
    if (pp->decode_budget < 0) return kvb_fail(KVB_ERR_INVALID, "policy %s: decode_budget must be >= 0, got %d", pn, (int)pp->decode_budget);
    if (pp->prefill_budget < 0 || (pp->prefill_budget && pp->prefill_budget <= pp->n_sink))
        return kvb_fail(KVB_ERR_INVALID, "policy %s: prefill_budget must be 0 (no eviction while a prompt is read) or exceed n_sink (%d), got %d", pn, (int)pp->n_sink, (int)pp->prefill_budget);
    if (pp->budget_frac > 0 && !(pi->flags & KVB_PF_COMPRESS))
        return kvb_fail(KVB_ERR_INVALID, "policy %s: budget_frac applies only to prompt compression (snapkv, pyramidkv, adakv)", pn);
    enum kvb_pos_mode pm = p->pos_mode == KVB_POS_POLICY_DEFAULT ? pi->default_pos : p->pos_mode;
    if (pm == KVB_POS_CAPPED && p->max_distance < 1)
        return kvb_fail(KVB_ERR_INVALID, "cache: positions capped (policy %s) need max_distance > 0 (the trained length)", pn);
    return KVB_OK;
}

/* ------------------------------------------------------------------------ */
/* capacity (prepare)                                                       */
/* ------------------------------------------------------------------------ */

static int32_t n_state(const struct kvb_cache *c) { return c->policy.iface->n_state; }

/* Grows every per-slot array of s to hold at least need slots. All or nothing. */
static kvb_status grow_slots(const struct kvb_cache *c, struct kvb_stream *s, int64_t need) {
    if (need <= s->slot_cap) return KVB_OK;
    int64_t cap = s->slot_cap ? s->slot_cap : 64;
    while (cap < need) cap *= 2;
    const int32_t ns = KVB_MAX(n_state(c), 1);
    int32_t *pos = kvb_malloc(sizeof(int32_t) * (size_t)cap);
    float *state = kvb_calloc((size_t)cap * (size_t)ns, sizeof(float));
    int32_t *fr = kvb_malloc(sizeof(int32_t) * (size_t)cap);
    int32_t *order = kvb_malloc(sizeof(int32_t) * (size_t)cap);
    float *fs = kvb_calloc((size_t)cap, sizeof(float));
    int32_t *is = kvb_calloc((size_t)cap, sizeof(int32_t));
    int32_t *vic = kvb_calloc((size_t)cap, sizeof(int32_t));
    if (!pos || !state || !fr || !order || !fs || !is || !vic) {
        kvb_free(pos); kvb_free(state); kvb_free(fr); kvb_free(order); kvb_free(fs); kvb_free(is); kvb_free(vic);
        return KVB_ERR_NOMEM;
    }
    size_t old = (size_t)s->slot_cap;
    if (old) {
        memcpy(pos, s->pos, sizeof(int32_t) * old);
        memcpy(state, s->state, sizeof(float) * old * (size_t)ns);
        memcpy(fr, s->free_slots, sizeof(int32_t) * old);
        memcpy(order, s->order, sizeof(int32_t) * old);
    }
    for (int64_t i = (int64_t)old; i < cap; i++) pos[i] = -1;
    kvb_free(s->pos); kvb_free(s->state); kvb_free(s->free_slots); kvb_free(s->order);
    kvb_free(s->fscratch); kvb_free(s->iscratch); kvb_free(s->victims);
    s->pos = pos; s->state = state; s->free_slots = fr; s->order = order; s->fscratch = fs; s->iscratch = is;
    s->victims = vic;
    s->slot_cap = cap;
    return KVB_OK;
}

static kvb_status grow_pages(struct kvb_stream *s, int64_t need) {
    if (need <= s->pages_cap) return KVB_OK;
    int64_t cap = s->pages_cap ? s->pages_cap : 8;
    while (cap < need) cap *= 2;
    uint8_t **pages = kvb_calloc((size_t)cap, sizeof(uint8_t *));
    int32_t *live = kvb_calloc((size_t)cap, sizeof(int32_t));
    if (!pages || !live) {
        kvb_free(pages); kvb_free(live);
        return KVB_ERR_NOMEM;
    }
    if (s->n_pages) {
        memcpy(pages, s->pages, sizeof(uint8_t *) * (size_t)s->n_pages);
        memcpy(live, s->page_live, sizeof(int32_t) * (size_t)s->n_pages);
    }
    kvb_free(s->pages); kvb_free(s->page_live);
    s->pages = pages; s->page_live = live; s->pages_cap = cap;
    return KVB_OK;
}

static void free_scratch(struct kvb_head_scratch *h) {
    kvb_free(h->acc); kvb_free(h->qrot); kvb_free(h->out); kvb_free(h->lse); kvb_free(h->limit); kvb_free(h->krow);
    kvb_free(h->p); kvb_free(h->col); kvb_free(h->seg_j); kvb_free(h->seg_m); kvb_free(h->memo_cs);
    kvb_free(h->cruns);
    memset(h, 0, sizeof *h);
}

/* Scratch of one KV-head worker for streams of up to n keys and G query heads. */
static kvb_status grow_scratch(const struct kvb_cache *c, struct kvb_head_scratch *h, int64_t n, int32_t G) {
    const size_t d = (size_t)c->params.head_dim;
    if (!h->acc) {
        struct kvb_head_scratch t = {0};
        t.acc = kvb_malloc(sizeof(float) * KVB_ATTN_MAX_ROWS * d);
        t.qrot = kvb_malloc(sizeof(float) * KVB_ATTN_MAX_ROWS * d);
        t.out = kvb_malloc(sizeof(float) * KVB_ATTN_MAX_ROWS * d);
        t.lse = kvb_malloc(sizeof(float) * KVB_ATTN_MAX_ROWS);
        t.limit = kvb_malloc(sizeof(int32_t) * KVB_ATTN_MAX_ROWS);
        t.krow = kvb_malloc(sizeof(float) * d * 2);
        t.memo_cs = kvb_malloc(sizeof(float) * ROPE_MEMO * 2 * (size_t)KVB_MAX(c->n_pairs, 1));
        if (!t.acc || !t.qrot || !t.out || !t.lse || !t.limit || !t.krow || !t.memo_cs) {
            free_scratch(&t);
            return KVB_ERR_NOMEM;
        }
        for (int i = 0; i < ROPE_MEMO; i++) t.memo_pos[i] = INT64_MIN;
        *h = t;
    }
    if (n > h->cap || G > h->p_rows) {
        int64_t cap = KVB_MAX(h->cap, 64);
        while (cap < n) cap *= 2;
        int64_t rows = KVB_MAX(h->p_rows, (int64_t)G);
        int64_t seg_cap = cap / KVB_ATTN_TILE + cap + 2; /* runs <= keys */
        float *p = kvb_malloc(sizeof(float) * (size_t)(cap * rows));
        float *col = kvb_malloc(sizeof(float) * (size_t)cap);
        int32_t *sj = kvb_malloc(sizeof(int32_t) * (size_t)seg_cap);
        float *sm = kvb_malloc(sizeof(float) * (size_t)seg_cap * KVB_ATTN_MAX_ROWS);
        struct kvb_run *cr = kvb_malloc(sizeof(struct kvb_run) * (size_t)(cap + 1));
        if (!p || !col || !sj || !sm || !cr) {
            kvb_free(p); kvb_free(col); kvb_free(sj); kvb_free(sm); kvb_free(cr);
            return KVB_ERR_NOMEM;
        }
        kvb_free(h->p); kvb_free(h->col); kvb_free(h->seg_j); kvb_free(h->seg_m); kvb_free(h->cruns);
        h->p = p; h->col = col; h->seg_j = sj; h->seg_m = sm; h->cruns = cr;
        h->cap = cap; h->seg_cap = seg_cap; h->p_rows = rows;
    }
    return KVB_OK;
}

/* Reserves room for n_new tokens in every stream of the layer, plus scratch
 * for G query heads. Takes the pages from the pool and attaches them as free
 * slots. On failure nothing observable changed (only capacities grew). */
static kvb_status prepare_layer(struct kvb_cache *c, int32_t layer, int32_t n_new, int32_t G) {
    const int32_t H = c->params.n_kv_head, B = c->params.block_size;
    int64_t total = 0, n_max = 0;
    for (int32_t h = 0; h < H; h++) {
        struct kvb_stream *s = kvb_cache_stream(c, layer, h);
        int64_t need = (int64_t)n_new - s->n_free;
        int64_t np = need > 0 ? (need + B - 1) / B : 0;
        if (grow_pages(s, s->n_pages + np) != KVB_OK ||
            grow_slots(c, s, (s->n_pages + np) * (int64_t)B) != KVB_OK)
            return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for slot metadata (layer %d)", (int)layer);
        if (s->runs_cap < (int64_t)s->n + n_new + 1 &&
            kvb_grow((void **)&s->runs, &s->runs_cap, (int64_t)s->n + n_new + 1, sizeof(struct kvb_run)) != KVB_OK)
            return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for runs (layer %d)", (int)layer);
        total += np;
        n_max = KVB_MAX(n_max, (int64_t)s->n + n_new);
    }
    for (int32_t h = 0; h < H; h++)
        if (grow_scratch(c, &c->scratch[h], n_max, G) != KVB_OK)
            return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for attention scratch");
    if (total == 0) return KVB_OK;
    uint8_t *stack[64];
    uint8_t **got = total <= 64 ? stack : kvb_malloc(sizeof(uint8_t *) * (size_t)total);
    if (!got) return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
    kvb_status st = kvb_pool_take(c->pool, total, got);
    if (st != KVB_OK) {
        if (got != stack) kvb_free(got);
        return st;
    }
    int64_t k = 0;
    for (int32_t h = 0; h < H; h++) {
        struct kvb_stream *s = kvb_cache_stream(c, layer, h);
        int64_t need = (int64_t)n_new - s->n_free;
        int64_t np = need > 0 ? (need + B - 1) / B : 0;
        for (int64_t i = 0; i < np; i++) { /* new slots go on top of the hole stack, lowest popping first */
            int32_t pg = s->n_pages++;
            s->pages[pg] = got[k++];
            s->page_live[pg] = 0;
        }
        for (int64_t sl = (int64_t)s->n_pages * B - 1; sl >= (int64_t)(s->n_pages - np) * B; sl--)
            s->free_slots[s->n_free++] = (int32_t)sl;
    }
    if (got != stack) kvb_free(got);
    return KVB_OK;
}

/* ------------------------------------------------------------------------ */
/* runs (contiguous positions)                                              */
/* ------------------------------------------------------------------------ */

static void runs_append(struct kvb_stream *s, int32_t j, int32_t pos) {
    int32_t delta = pos - j;
    if (s->n_runs > 0 && s->runs[s->n_runs - 1].delta == delta) return;
    s->runs[s->n_runs].j0 = j;
    s->runs[s->n_runs].delta = delta;
    s->n_runs++;
}

/* Logical slot je is being removed: later slots move down one rank, so their
 * delta grows by one. The run holding je splits at je. */
static void runs_remove(struct kvb_stream *s, int32_t je, int32_t n_before) {
    int32_t r = s->n_runs - 1;
    while (r > 0 && s->runs[r].j0 > je) r--;
    int32_t end = r + 1 < s->n_runs ? s->runs[r + 1].j0 : n_before;
    for (int32_t q = r + 1; q < s->n_runs; q++) {
        s->runs[q].j0--;
        s->runs[q].delta++;
    }
    if (end - s->runs[r].j0 == 1) { /* the run was just je: drop it */
        memmove(&s->runs[r], &s->runs[r + 1], sizeof(struct kvb_run) * (size_t)(s->n_runs - r - 1));
        s->n_runs--;
    } else if (je == s->runs[r].j0) {
        s->runs[r].delta++;
    } else if (je < end - 1) { /* interior: split */
        memmove(&s->runs[r + 2], &s->runs[r + 1], sizeof(struct kvb_run) * (size_t)(s->n_runs - r - 1));
        s->runs[r + 1].j0 = je;
        s->runs[r + 1].delta = s->runs[r].delta + 1;
        s->n_runs++;
    } /* else: je was the run's last slot; nothing after it in this run */
}

/* Rebuilds runs from positions (after a restore). */
static void runs_rebuild(struct kvb_stream *s) {
    s->n_runs = 0;
    for (int32_t j = 0; j < s->n; j++) runs_append(s, j, s->pos[s->order[j]]);
}

/* ------------------------------------------------------------------------ */
/* rows and RoPE                                                            */
/* ------------------------------------------------------------------------ */

static inline uint8_t *slot_k(const struct kvb_cache *c, const struct kvb_stream *s, int32_t slot) {
    return s->pages[slot >> c->block_shift] + (size_t)(slot & (c->params.block_size - 1)) * c->row_bytes;
}

static const float *rope_cs(const struct kvb_cache *c, struct kvb_head_scratch *h, int64_t pos) {
    const size_t w = 2 * (size_t)c->n_pairs;
    for (int i = 0; i < ROPE_MEMO; i++)
        if (h->memo_pos[i] == pos) return h->memo_cs + (size_t)i * w;
    int i = h->memo_next;
    h->memo_next = (i + 1) % ROPE_MEMO;
    h->memo_pos[i] = pos;
    kvb_rope_cos_sin(c->inv_freq, c->n_pairs, pos, h->memo_cs + (size_t)i * w);
    return h->memo_cs + (size_t)i * w;
}

static void rotate(const struct kvb_cache *c, struct kvb_head_scratch *h, float *x, int64_t pos) {
    if (c->params.rope.type == KVB_ROPE_NONE) return;
    kvb_rope_apply(c->params.rope.type, c->params.rope.n_dims, rope_cs(c, h, pos), x);
}

static void store_row(const struct kvb_cache *c, uint8_t *dst, const float *src) {
    if (c->params.dtype == KVB_DTYPE_F16) c->kr->to_f16(src, (uint16_t *)dst, c->params.head_dim);
    else memcpy(dst, src, c->row_bytes);
}

static void load_row(const struct kvb_cache *c, const uint8_t *src, float *dst) {
    if (c->params.dtype == KVB_DTYPE_F16) c->kr->from_f16((const uint16_t *)src, dst, c->params.head_dim);
    else memcpy(dst, src, c->row_bytes);
}

/* Appends one token (k, v: pre-RoPE rows of this head, or NULL) at original
 * position pos. A free slot must have been prepared. */
static void append_token(struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *h, const float *k,
                         const float *v, int32_t pos) {
    const int32_t d = c->params.head_dim;
    int32_t slot = s->free_slots[--s->n_free];
    uint8_t *kd = slot_k(c, s, slot);
    if (k) {
        memcpy(h->krow, k, sizeof(float) * (size_t)d);
        rotate(c, h, h->krow, pos);
        store_row(c, kd, h->krow);
    } else {
        memset(kd, 0, c->row_bytes);
    }
    if (v) store_row(c, kd + c->page_bytes / 2, v);
    else memset(kd + c->page_bytes / 2, 0, c->row_bytes);
    s->pos[slot] = pos;
    s->page_live[slot >> c->block_shift]++;
    int32_t j = s->n++;
    s->order[j] = slot;
    if (c->pos_mode == KVB_POS_CONTIGUOUS) runs_append(s, j, pos);
    const int32_t ns = n_state(c);
    if (ns) memset(s->state + (size_t)j * (size_t)ns, 0, sizeof(float) * (size_t)ns);
    if (c->policy.iface->on_append) c->policy.iface->on_append(&c->policy, s, j, k, d);
}

/* Whether queries at original positions up to pq_max see a capped distance
 * in stream s (then every query needs its own runs). */
static bool capped_far(const struct kvb_cache *c, const struct kvb_stream *s, int64_t pq_max) {
    return c->pos_mode == KVB_POS_CAPPED && s->n > 0 && pq_max - s->pos[s->order[0]] > c->params.max_distance;
}

/* Runs as seen by a query at original position pq: contiguous mode uses the
 * stream's runs, original mode a single run with delta 0, capped mode one run
 * per key farther than max_distance (delta p_j + max_distance - pq, so the
 * query is rotated to sit exactly max_distance after it) and then one run
 * with delta 0. The query is rotated at (CONTIGUOUS ? its cache position : pq)
 * + delta. */
static int32_t attn_runs(const struct kvb_cache *c, const struct kvb_stream *s, struct kvb_head_scratch *hs, int64_t pq,
                         const struct kvb_run **out) {
    static const struct kvb_run one = {0, 0};
    if (c->pos_mode == KVB_POS_CONTIGUOUS) {
        *out = s->runs;
        return s->n_runs;
    }
    *out = &one;
    if (!capped_far(c, s, pq)) return 1;
    const int64_t L = c->params.max_distance;
    int32_t nr = 0, j = 0;
    for (; j < s->n && pq - s->pos[s->order[j]] > L; j++)
        hs->cruns[nr++] = (struct kvb_run){j, (int32_t)(s->pos[s->order[j]] + L - pq)};
    if (j < s->n) hs->cruns[nr++] = (struct kvb_run){j, 0};
    *out = hs->cruns;
    return nr;
}

static struct kvb_kv_view stream_view(const struct kvb_cache *c, const struct kvb_stream *s) {
    struct kvb_kv_view v;
    v.pages = s->pages;
    v.slots = s->order;
    v.n = s->n;
    v.block_shift = c->block_shift;
    v.head_dim = c->params.head_dim;
    v.row_bytes = c->row_bytes;
    v.v_offset = c->page_bytes / 2;
    v.dtype = c->params.dtype;
    return v;
}

/* ------------------------------------------------------------------------ */
/* eviction and compaction                                                  */
/* ------------------------------------------------------------------------ */

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void move_slot(struct kvb_cache *c, struct kvb_stream *s, int32_t *rank_of, int32_t src, int32_t dst, bool copy_rows) {
    if (copy_rows) {
        memcpy(slot_k(c, s, dst), slot_k(c, s, src), c->row_bytes);
        memcpy(slot_k(c, s, dst) + c->page_bytes / 2, slot_k(c, s, src) + c->page_bytes / 2, c->row_bytes);
    }
    s->pos[dst] = s->pos[src];
    s->pos[src] = -1;
    int32_t j = rank_of[src];
    s->order[j] = dst;
    rank_of[dst] = j;
}

/* Returns whole pages to the pool. An empty page goes back at once (pointer
 * moves only: it is swapped with the last page). Moving live rows out of the
 * last page into holes waits until the stream holds two pages worth of holes,
 * then runs until it holds less than one. The hysteresis matters: with a
 * budget that is a multiple of the page size, compacting at one page of
 * holes would take and return a page at every step (measured: ~4% of a
 * decode step). So a stream wastes less than two pages. Cannot fail. */
static void compact_stream(struct kvb_cache *c, struct kvb_stream *s) {
    const int32_t B = c->params.block_size;
    if (s->n_free < B) return; /* no page can be empty */
    const bool move_rows = s->n_free >= 2 * B;
    if (!move_rows) {
        bool any_empty = false;
        for (int32_t pg = 0; pg < s->n_pages && !any_empty; pg++) any_empty = s->page_live[pg] == 0;
        if (!any_empty) return;
    }
    int32_t *rank_of = s->iscratch; /* physical -> logical, for the moved slots */
    for (int32_t j = 0; j < s->n; j++) rank_of[s->order[j]] = j;
    uint8_t *give[64];
    int32_t n_give = 0;
    int32_t hole = 0; /* cursor over physical slots looking for holes */
    int32_t n_free = s->n_free;
    while (n_free >= B) {
        int32_t L = s->n_pages - 1;
        if (s->page_live[L] != 0) {
            int32_t e = -1;
            for (int32_t pg = 0; pg < L; pg++)
                if (s->page_live[pg] == 0) { e = pg; break; }
            if (e >= 0) { /* swap the empty page e with the last page: no row copies */
                uint8_t *tp = s->pages[e];
                s->pages[e] = s->pages[L];
                s->pages[L] = tp;
                s->page_live[e] = s->page_live[L];
                s->page_live[L] = 0;
                for (int32_t i = 0; i < B; i++) {
                    int32_t src = L * B + i, dst = e * B + i;
                    if (s->pos[src] >= 0) move_slot(c, s, rank_of, src, dst, false);
                }
            } else if (!move_rows) {
                break;
            } else { /* move the last page's live rows into holes */
                for (int32_t i = 0; i < B; i++) {
                    int32_t src = L * B + i;
                    if (s->pos[src] < 0) continue;
                    while (s->pos[hole] >= 0) hole++;
                    move_slot(c, s, rank_of, src, hole, true);
                    s->page_live[hole / B]++;
                    s->page_live[L]--;
                }
            }
        }
        give[n_give++] = s->pages[L];
        s->pages[L] = NULL;
        s->n_pages--;
        n_free -= B;
        if (n_give == 64) {
            kvb_pool_give(c->pool, give, n_give);
            n_give = 0;
        }
    }
    kvb_pool_give(c->pool, give, n_give);
    int32_t nf = 0;
    for (int64_t sl = (int64_t)s->n_pages * B - 1; sl >= 0; sl--)
        if (s->pos[sl] < 0) s->free_slots[nf++] = (int32_t)sl;
    s->n_free = nf;
}

/* Removes logical slots victims[0..k) (distinct, sorted ascending). */
static void remove_victims(struct kvb_cache *c, struct kvb_stream *s, const int32_t *victims, int32_t k) {
    if (k <= 0) return;
    const int32_t n_before = s->n;
    if (c->pos_mode == KVB_POS_CONTIGUOUS)
        for (int32_t i = k - 1; i >= 0; i--) runs_remove(s, victims[i], n_before - (k - 1 - i));
    for (int32_t i = 0; i < k; i++) {
        int32_t slot = s->order[victims[i]];
        s->pos[slot] = -1;
        s->page_live[slot >> c->block_shift]--;
        s->free_slots[s->n_free++] = slot;
    }
    const size_t ns = (size_t)n_state(c);
    int32_t w = victims[0];
    for (int32_t j = victims[0], vi = 0; j < n_before; j++) {
        if (vi < k && victims[vi] == j) {
            vi++;
            continue;
        }
        s->order[w] = s->order[j];
        if (ns) memcpy(s->state + (size_t)w * ns, s->state + (size_t)j * ns, sizeof(float) * ns);
        w++;
    }
    s->n = w;
    compact_stream(c, s);
}

/* Evicts stream s down to its budget. Cannot fail. */
static void evict_stream(struct kvb_cache *c, struct kvb_stream *s) {
    const struct kvb_policy_i *pi = c->policy.iface;
    int32_t *victims = s->victims;
    if (!s->budget || s->n <= s->budget || (pi->flags & KVB_PF_NEVER_EVICT)) return;
    int32_t n_over = s->n - s->budget;
    int32_t k = pi->select(&c->policy, s, n_over, victims);
    if (k > 1) {
        if (k < 16) { /* insertion sort: k is 1 in steady state */
            for (int32_t i = 1; i < k; i++) {
                int32_t x = victims[i], j = i - 1;
                while (j >= 0 && victims[j] > x) { victims[j + 1] = victims[j]; j--; }
                victims[j + 1] = x;
            }
        } else {
            qsort(victims, (size_t)k, sizeof(int32_t), cmp_i32);
        }
        int32_t u = 1; /* dedupe */
        for (int32_t i = 1; i < k; i++)
            if (victims[i] != victims[u - 1]) victims[u++] = victims[i];
        k = u;
    }
    remove_victims(c, s, victims, k);
}

static void update_peak(struct kvb_cache *c) {
    int64_t pages = 0;
    const int64_t n = (int64_t)c->params.n_layer * c->params.n_kv_head;
    for (int64_t i = 0; i < n; i++) pages += c->streams[i].n_pages;
    if (pages > c->pages_peak) c->pages_peak = pages;
}

/* ------------------------------------------------------------------------ */
/* init / free                                                              */
/* ------------------------------------------------------------------------ */

/* Budgets of a fresh or reset cache: every stream's target is the policy's
 * budget; the snapkv family starts reading a prompt (prefill_budget). */
static void init_budgets(struct kvb_cache *c) {
    const size_t n_streams = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    const bool compress = c->policy.iface->flags & KVB_PF_COMPRESS;
    for (size_t i = 0; i < n_streams; i++) {
        struct kvb_stream *s = &c->streams[i];
        s->target = c->params.policy.budget;
        s->budget = compress ? c->params.policy.prefill_budget : c->params.policy.budget;
        s->prompt_end = -1;
    }
    for (int32_t l = 0; l < c->params.n_layer; l++) c->ring_n[l] = 0;
}

kvb_status kvb_cache_init(struct kvb_pool *pool, const struct kvb_cache_params *params, struct kvb_cache **out) {
    if (!params || !out) return kvb_fail(KVB_ERR_INVALID, "cache: params and out must not be NULL");
    kvb_status st = validate_params(params);
    if (st != KVB_OK) return st;
    struct kvb_cache *c = kvb_calloc(1, sizeof *c);
    if (!c) return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
    c->params = *params;
    c->kr = kvb_kernels();
    c->policy.iface = kvb_policy_iface(params->policy.id);
    c->policy.params = params->policy;
    c->policy.block_size = params->block_size;
    /* prefill evidence: the policy says how many of a chunk's last queries (0 = all) */
    c->policy.obs_last = c->policy.iface->prefill_queries ? c->policy.iface->prefill_queries(&params->policy) : 0;
    c->pos_mode = params->pos_mode == KVB_POS_POLICY_DEFAULT ? c->policy.iface->default_pos : params->pos_mode;
    c->block_shift = 0;
    while ((1 << c->block_shift) < params->block_size) c->block_shift++;
    c->row_bytes = kvb_dtype_row_bytes(params->dtype, params->head_dim);
    c->page_bytes = kvb_cache_page_bytes(params);
    c->n_pairs = params->rope.type == KVB_ROPE_NONE ? 0 : params->rope.n_dims / 2;
    const size_t n_streams = (size_t)params->n_layer * (size_t)params->n_kv_head;
    c->streams = kvb_calloc(n_streams, sizeof(struct kvb_stream));
    c->n_past = kvb_calloc((size_t)params->n_layer, sizeof(int64_t));
    c->scratch = kvb_calloc((size_t)params->n_kv_head, sizeof(struct kvb_head_scratch));
    c->inv_freq = kvb_calloc((size_t)KVB_MAX(c->n_pairs, 1), sizeof(double));
    c->ring_q = kvb_calloc((size_t)params->n_layer, sizeof(float *));
    c->ring_n = kvb_calloc((size_t)params->n_layer, sizeof(int32_t));
    c->ring_heads = kvb_calloc((size_t)params->n_layer, sizeof(int32_t));
    if (c->n_pairs && params->rope.freq_factors) {
        c->freq_factors = kvb_malloc(sizeof(float) * (size_t)c->n_pairs);
        if (c->freq_factors) memcpy(c->freq_factors, params->rope.freq_factors, sizeof(float) * (size_t)c->n_pairs);
        else goto nomem;
        for (int32_t i = 0; i < c->n_pairs; i++)
            if (!(c->freq_factors[i] > 0) || !isfinite(c->freq_factors[i])) {
                kvb_cache_free(c);
                return kvb_fail(KVB_ERR_INVALID, "cache: rope.freq_factors[%d] must be finite and > 0", (int)i);
            }
    }
    c->params.rope.freq_factors = c->freq_factors;
    if (!c->streams || !c->n_past || !c->scratch || !c->inv_freq || !c->ring_q || !c->ring_n || !c->ring_heads) goto nomem;
    if (c->n_pairs) kvb_rope_inv_freq(&c->params.rope, c->freq_factors, c->inv_freq);
    if (pool) {
        size_t need = (c->page_bytes + 63) & ~(size_t)63;
        if (pool->page_bytes != need) {
            kvb_cache_free(c);
            return kvb_fail(KVB_ERR_INVALID, "cache: pool page_bytes %zu does not match the cache's page size %zu",
                            pool->page_bytes, need);
        }
        c->pool = pool;
    } else {
        struct kvb_pool_params pp = kvb_pool_default_params();
        pp.page_bytes = c->page_bytes;
        pp.capacity_bytes = params->pool_bytes;
        st = kvb_pool_init(&pp, &c->pool);
        if (st != KVB_OK) {
            kvb_cache_free(c);
            return st;
        }
        c->own_pool = true;
    }
    init_budgets(c);
    *out = c;
    return KVB_OK;
nomem:
    kvb_cache_free(c);
    return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
}

static void release_stream_pages(struct kvb_cache *c, struct kvb_stream *s) {
    if (s->n_pages && c->pool) kvb_pool_give(c->pool, s->pages, s->n_pages);
    s->n_pages = 0;
}

void kvb_cache_free(struct kvb_cache *c) {
    if (!c) return;
    const size_t n_streams = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    if (c->streams) {
        for (size_t i = 0; i < n_streams; i++) {
            struct kvb_stream *s = &c->streams[i];
            release_stream_pages(c, s);
            kvb_free(s->pages); kvb_free(s->page_live); kvb_free(s->pos); kvb_free(s->state);
            kvb_free(s->free_slots); kvb_free(s->order); kvb_free(s->runs); kvb_free(s->fscratch); kvb_free(s->iscratch); kvb_free(s->victims);
        }
    }
    if (c->scratch)
        for (int32_t h = 0; h < c->params.n_kv_head; h++) free_scratch(&c->scratch[h]);
    if (c->own_pool) kvb_pool_free(c->pool);
    if (c->ring_q)
        for (int32_t l = 0; l < c->params.n_layer; l++) kvb_free(c->ring_q[l]);
    kvb_free(c->ring_q); kvb_free(c->ring_n); kvb_free(c->ring_heads);
    kvb_free(c->streams); kvb_free(c->n_past); kvb_free(c->scratch); kvb_free(c->inv_freq); kvb_free(c->freq_factors);
    kvb_free(c);
}

void kvb_cache_reset(struct kvb_cache *c) {
    if (!c) return;
    const size_t n_streams = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    for (size_t i = 0; i < n_streams; i++) {
        struct kvb_stream *s = &c->streams[i];
        release_stream_pages(c, s);
        for (int64_t k = 0; k < s->slot_cap; k++) s->pos[k] = -1;
        s->n = 0; s->n_free = 0; s->n_runs = 0;
    }
    for (int32_t l = 0; l < c->params.n_layer; l++) c->n_past[l] = 0;
    init_budgets(c);
}

const struct kvb_cache_params *kvb_cache_get_params(const struct kvb_cache *c) { return &c->params; }
enum kvb_pos_mode kvb_cache_pos_mode(const struct kvb_cache *c) { return c->pos_mode; }

/* ------------------------------------------------------------------------ */
/* decode                                                                   */
/* ------------------------------------------------------------------------ */

static bool prompt_open(const struct kvb_cache *c, int32_t layer);
static void compress_layer(struct kvb_cache *c, int32_t l, struct kvb_threadpool *tp);
static void combine_and_evict(struct kvb_cache *c, int32_t layer, struct kvb_threadpool *tp);

struct decode_job {
    struct kvb_cache *c;
    int32_t layer, n_head, G;
    const float *q, *k, *v;
    float *out;
    bool attend;
};

/* Rotates the query rows of tokens [i0, i1) of KV head h's group for run
 * delta and scales them; q is [*][n_head][d], row r = (i - i0) * G + g.
 * Token i sits at original position p0 + i and logical slot n_prev + i. */
static void rotate_rows(struct kvb_cache *c, struct kvb_head_scratch *hs, const float *q, int32_t n_head, int32_t G,
                        int32_t h, int32_t i0, int32_t i1, int32_t n_prev, int64_t p0, int32_t delta) {
    const int32_t d = c->params.head_dim;
    const float scale = 1.0f / sqrtf((float)d);
    for (int32_t i = i0; i < i1; i++) {
        int64_t qpos = (c->pos_mode == KVB_POS_CONTIGUOUS ? (int64_t)n_prev + i : p0 + i) + delta;
        for (int32_t g = 0; g < G; g++) {
            float *qr = hs->qrot + (size_t)((i - i0) * G + g) * d;
            memcpy(qr, q + ((size_t)i * n_head + (size_t)h * G + g) * d, sizeof(float) * (size_t)d);
            rotate(c, hs, qr, qpos);
            for (int32_t x = 0; x < d; x++) qr[x] *= scale;
        }
    }
}

/* Attention of the G query heads of stream s (rows q, pre-RoPE) of the token
 * just appended (original position pq); writes out rows. If
 * w is set, also the mean probability of each logical slot over the G heads. */
static void attend_decode(struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *h, const float *q,
                          int32_t G, int64_t pq, float *out, float *w) {
    const int32_t d = c->params.head_dim;
    const struct kvb_run *runs;
    int32_t nr = attn_runs(c, s, h, pq, &runs);
    struct kvb_kv_view view = stream_view(c, s);
    struct kvb_attn_state st;
    kvb_attn_begin(&st, G, d, h->acc, w ? h->p : NULL, s->n, h->seg_j, h->seg_m, (int32_t)h->seg_cap);
    for (int32_t r = 0; r < nr; r++) {
        int32_t j0 = runs[r].j0, j1 = r + 1 < nr ? runs[r + 1].j0 : s->n;
        /* one token: the new one, at logical slot s->n - 1 and position pq */
        rotate_rows(c, h, q, G, G, 0, 0, 1, s->n - 1, pq, runs[r].delta);
        kvb_attn_run(c->kr, &view, h->qrot, NULL, j0, j1, &st);
    }
    if (w) kvb_attn_end_mean(&st, out, w, s->n);
    else kvb_attn_end(&st, out, NULL);
}

static void decode_worker(int32_t ith, int32_t nth, void *arg) {
    struct decode_job *jb = arg;
    struct kvb_cache *c = jb->c;
    const int32_t H = c->params.n_kv_head, d = c->params.head_dim;
    const bool policy_w = (c->policy.iface->flags & KVB_PF_DECODE_ATTN) && c->policy.iface->observe;
    const bool want_w = policy_w || c->observer;
    for (int32_t h = ith; h < H; h += nth) {
        struct kvb_stream *s = kvb_cache_stream(c, jb->layer, h);
        struct kvb_head_scratch *hs = &c->scratch[h];
        const int32_t pos = (int32_t)c->n_past[jb->layer];
        append_token(c, s, hs, jb->k ? jb->k + (size_t)h * d : NULL, jb->v ? jb->v + (size_t)h * d : NULL, pos);
        if (jb->attend) {
            attend_decode(c, s, hs, jb->q + (size_t)h * jb->G * d, jb->G, pos, jb->out + (size_t)h * jb->G * d,
                          want_w ? hs->col : NULL);
            if (c->observer) c->observer(c->observer_user, jb->layer, h, hs->col, s->n);
            if (policy_w) c->policy.iface->observe(&c->policy, s, hs->col, s->n, false);
            if (!c->policy.iface->combine) evict_stream(c, s); /* else after every head: combine_and_evict */
        }
    }
}

static kvb_status check_layer(const struct kvb_cache *c, int32_t layer) {
    if (!c) return kvb_fail(KVB_ERR_INVALID, "cache is NULL");
    if (layer < 0 || layer >= c->params.n_layer)
        return kvb_fail(KVB_ERR_INVALID, "cache: layer %d out of range 0..%d", (int)layer, (int)c->params.n_layer - 1);
    return KVB_OK;
}

static kvb_status check_heads(const struct kvb_cache *c, int32_t n_head) {
    if (n_head < c->params.n_kv_head || n_head % c->params.n_kv_head != 0)
        return kvb_fail(KVB_ERR_INVALID, "cache: n_head (%d) must be a positive multiple of n_kv_head (%d)",
                        (int)n_head, (int)c->params.n_kv_head);
    if (n_head / c->params.n_kv_head > KVB_ATTN_MAX_ROWS)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "cache: more than %d query heads per KV head", KVB_ATTN_MAX_ROWS);
    return KVB_OK;
}

static kvb_status check_pos(const struct kvb_cache *c, int32_t layer, int64_t n_new) {
    if (c->n_past[layer] + n_new > INT32_MAX)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "cache: positions beyond 2^31-1 in layer %d", (int)layer);
    return KVB_OK;
}

kvb_status kvb_cache_decode(struct kvb_cache *c, int32_t layer, const float *q, int32_t n_head, const float *k,
                            const float *v, float *out, struct kvb_threadpool *tp) {
    kvb_status st = check_layer(c, layer);
    if (st != KVB_OK) return st;
    if ((st = check_heads(c, n_head)) != KVB_OK) return st;
    if (!q || !k || !v || !out) return kvb_fail(KVB_ERR_INVALID, "cache_decode: q, k, v and out must not be NULL");
    if ((st = check_pos(c, layer, 1)) != KVB_OK) return st;
    const int32_t G = n_head / c->params.n_kv_head;
    if (prompt_open(c, layer)) compress_layer(c, layer, tp); /* the prompt ended without kvb_cache_compress */
    if ((st = prepare_layer(c, layer, 1, G)) != KVB_OK) return st;
    struct decode_job jb = {c, layer, n_head, G, q, k, v, out, true};
    kvb_threadpool_run(tp, decode_worker, &jb);
    c->n_past[layer]++;
    update_peak(c);
    /* serial: one O(n) pick per stream costs less than waking the pool again */
    if (c->policy.iface->combine) combine_and_evict(c, layer, NULL);
    return KVB_OK;
}

kvb_status kvb_cache_append(struct kvb_cache *c, int32_t layer, const float *k, const float *v) {
    kvb_status st = check_layer(c, layer);
    if (st != KVB_OK) return st;
    if ((st = check_pos(c, layer, 1)) != KVB_OK) return st;
    if ((st = prepare_layer(c, layer, 1, 1)) != KVB_OK) return st;
    struct decode_job jb = {c, layer, c->params.n_kv_head, 1, NULL, k, v, NULL, false};
    decode_worker(0, 1, &jb);
    c->n_past[layer]++;
    update_peak(c);
    return KVB_OK;
}

static kvb_status observe_common(struct kvb_cache *c, int32_t layer, int32_t head, const float *w, int32_t n, bool prefill) {
    kvb_status st = check_layer(c, layer);
    if (st != KVB_OK) return st;
    if (head < 0 || head >= c->params.n_kv_head)
        return kvb_fail(KVB_ERR_INVALID, "cache: head %d out of range 0..%d", (int)head, (int)c->params.n_kv_head - 1);
    struct kvb_stream *s = kvb_cache_stream(c, layer, head);
    if (!w || n != s->n) return kvb_fail(KVB_ERR_INVALID, "cache_observe: row has %d weights, stream has %d slots", (int)n, (int)s->n);
    const struct kvb_policy_i *pi = c->policy.iface;
    if (pi->observe && (pi->flags & (prefill ? KVB_PF_PREFILL_MASS : KVB_PF_DECODE_ATTN))) pi->observe(&c->policy, s, w, n, prefill);
    return KVB_OK;
}

kvb_status kvb_cache_observe_prefill(struct kvb_cache *c, int32_t layer, int32_t head, const float *mass, int32_t n) {
    return observe_common(c, layer, head, mass, n, true);
}

int32_t kvb_cache_prefill_obs_queries(const struct kvb_cache *c) { return c ? c->policy.obs_last : 0; }

kvb_status kvb_cache_observe(struct kvb_cache *c, int32_t layer, int32_t head, const float *w, int32_t n) {
    return observe_common(c, layer, head, w, n, false);
}

void kvb_cache_set_observer(struct kvb_cache *c, kvb_attn_observer_fn fn, void *user) {
    c->observer = fn;
    c->observer_user = user;
}

void kvb_cache_evict(struct kvb_cache *c, int32_t layer) {
    if (check_layer(c, layer) != KVB_OK) return;
    combine_and_evict(c, layer, NULL);
    update_peak(c);
}

/* ------------------------------------------------------------------------ */
/* prefill                                                                  */
/* ------------------------------------------------------------------------ */

/* Causal attention of C query tokens (q [C][n_head][d], pre-RoPE; token i at
 * original position p0 + i and logical slot n_prev + i, already appended) of
 * KV head h's group over stream s. Writes the group's output rows into out
 * ([C][n_head][d]) unless NULL. With col, adds the column mass of tokens
 * [obs_from, C) — their softmax rows, scaled 1/G so that the G query heads
 * average — into col[0..s->n). Prefill and the compress vote both use it. */
static void attend_tokens(struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *hs, int32_t h,
                          const float *q, int32_t n_head, int32_t G, int32_t C, int32_t n_prev, int64_t p0,
                          float *out, int32_t obs_from, float *col) {
    const int32_t d = c->params.head_dim;
    struct kvb_kv_view view = stream_view(c, s);
    /* capped positions with far keys: every token has its own runs */
    const int32_t tb = capped_far(c, s, p0 + C - 1) ? 1 : KVB_MAX(1, KVB_ATTN_MAX_ROWS / G);
    for (int32_t i0 = 0; i0 < C; i0 += tb) {
        const int32_t i1 = KVB_MIN(C, i0 + tb), R = (i1 - i0) * G;
        const struct kvb_run *runs;
        const int32_t nr = attn_runs(c, s, hs, p0 + i0, &runs);
        for (int32_t i = i0; i < i1; i++)
            for (int32_t g = 0; g < G; g++) hs->limit[(i - i0) * G + g] = n_prev + i + 1;
        const int32_t jmax = n_prev + i1;
        struct kvb_attn_state st;
        kvb_attn_begin(&st, R, d, hs->acc, NULL, 0, NULL, NULL, 0);
        for (int32_t r = 0; r < nr; r++) {
            int32_t j0 = runs[r].j0, j1 = KVB_MIN(r + 1 < nr ? runs[r + 1].j0 : s->n, jmax);
            if (j0 >= j1) break;
            rotate_rows(c, hs, q, n_head, G, h, i0, i1, n_prev, p0, runs[r].delta);
            kvb_attn_run(c->kr, &view, hs->qrot, hs->limit, j0, j1, &st);
        }
        kvb_attn_end(&st, hs->out, hs->lse);
        if (out)
            for (int32_t i = i0; i < i1; i++)
                memcpy(out + ((size_t)i * n_head + (size_t)h * G) * d, hs->out + (size_t)(i - i0) * G * d,
                       sizeof(float) * (size_t)G * d);
        if (col && i1 > obs_from) {
            const int32_t a = KVB_MAX(i0, obs_from); /* observed tokens of this block: [a, i1) */
            const int32_t off = (a - i0) * G, Ro = (i1 - a) * G;
            for (int32_t r = 0; r < nr; r++) {
                int32_t j0 = runs[r].j0, j1 = KVB_MIN(r + 1 < nr ? runs[r + 1].j0 : s->n, jmax);
                if (j0 >= j1) break;
                rotate_rows(c, hs, q, n_head, G, h, i0, i1, n_prev, p0, runs[r].delta);
                kvb_attn_colmass(c->kr, &view, hs->qrot + (size_t)off * d, hs->limit + off, hs->lse + off, Ro,
                                 1.0f / (float)G, j0, j1, col, st.s);
            }
        }
    }
}

struct prefill_job {
    struct kvb_cache *c;
    int32_t layer, n_tok, n_head, G;
    const float *q, *k, *v;
    float *out;
    bool mass; /* feed the chunk's column mass to the policy */
};

static void prefill_worker(int32_t ith, int32_t nth, void *arg) {
    struct prefill_job *jb = arg;
    struct kvb_cache *c = jb->c;
    const int32_t H = c->params.n_kv_head, d = c->params.head_dim, C = jb->n_tok;
    const int32_t obs_from = c->policy.obs_last > 0 ? KVB_MAX(0, C - c->policy.obs_last) : 0;
    const int64_t p0 = c->n_past[jb->layer];
    for (int32_t h = ith; h < H; h += nth) {
        struct kvb_stream *s = kvb_cache_stream(c, jb->layer, h);
        struct kvb_head_scratch *hs = &c->scratch[h];
        const int32_t n_prev = s->n;
        for (int32_t i = 0; i < C; i++)
            append_token(c, s, hs, jb->k + ((size_t)i * H + h) * d, jb->v + ((size_t)i * H + h) * d, (int32_t)(p0 + i));
        if (jb->mass) memset(hs->col, 0, sizeof(float) * (size_t)s->n);
        attend_tokens(c, s, hs, h, jb->q, jb->n_head, jb->G, C, n_prev, p0, jb->out, obs_from, jb->mass ? hs->col : NULL);
        if (jb->mass) c->policy.iface->observe(&c->policy, s, hs->col, s->n, true);
    }
}

struct layer_job {
    struct kvb_cache *c;
    int32_t layer;
};

static void evict_worker(int32_t ith, int32_t nth, void *arg) {
    struct layer_job *jb = arg;
    for (int32_t h = ith; h < jb->c->params.n_kv_head; h += nth)
        evict_stream(jb->c, kvb_cache_stream(jb->c, jb->layer, h));
}

/* The streams of a layer, for the policy hooks that see a whole layer. */
static int32_t layer_streams(struct kvb_cache *c, int32_t layer, struct kvb_stream **ptrs) {
    for (int32_t h = 0; h < c->params.n_kv_head; h++) ptrs[h] = kvb_cache_stream(c, layer, h);
    return c->params.n_kv_head;
}

/* Layer-wide scores (tova's layer scope), then eviction of every stream
 * (over tp's threads; tp NULL: serially). */
static void combine_and_evict(struct kvb_cache *c, int32_t layer, struct kvb_threadpool *tp) {
    if (c->policy.iface->combine) {
        struct kvb_stream *ptrs[KVB_MAX_KV_HEADS];
        int32_t H = layer_streams(c, layer, ptrs);
        c->policy.iface->combine(&c->policy, ptrs, H);
    }
    struct layer_job ej = {c, layer};
    kvb_threadpool_run(tp, evict_worker, &ej);
}

/* ---- prompts (snapkv family) ---- */

/* Room for the layer's recorded queries ([obs_window][n_head][d]); before any
 * change, so a failure leaves the cache as it was. */
static kvb_status ring_reserve(struct kvb_cache *c, int32_t layer, int32_t n_head) {
    if (c->ring_q[layer] && c->ring_heads[layer] == n_head) return KVB_OK;
    float *r = kvb_malloc(sizeof(float) * (size_t)c->params.policy.obs_window * (size_t)n_head * (size_t)c->params.head_dim);
    if (!r) return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for the observation window's queries (layer %d)", (int)layer);
    kvb_free(c->ring_q[layer]);
    c->ring_q[layer] = r;
    c->ring_heads[layer] = n_head;
    c->ring_n[layer] = 0;
    return KVB_OK;
}

/* Keeps the last obs_window of the recorded queries plus q's C tokens. */
static void ring_push(struct kvb_cache *c, int32_t layer, const float *q, int32_t C) {
    const int32_t W = c->params.policy.obs_window;
    const size_t row = (size_t)c->ring_heads[layer] * (size_t)c->params.head_dim;
    float *ring = c->ring_q[layer];
    if (C >= W) {
        memcpy(ring, q + (size_t)(C - W) * row, sizeof(float) * (size_t)W * row);
        c->ring_n[layer] = W;
        return;
    }
    const int32_t keep = KVB_MIN(c->ring_n[layer], W - C);
    memmove(ring, ring + (size_t)(c->ring_n[layer] - keep) * row, sizeof(float) * (size_t)keep * row);
    memcpy(ring + (size_t)keep * row, q, sizeof(float) * (size_t)C * row);
    c->ring_n[layer] = keep + C;
}

/* A new prompt on a layer whose last one was compressed: every retained token
 * is a candidate again, votes start from zero, streams hold prefill_budget. */
static void open_prompt(struct kvb_cache *c, int32_t layer) {
    const size_t ns = (size_t)n_state(c);
    for (int32_t h = 0; h < c->params.n_kv_head; h++) {
        struct kvb_stream *s = kvb_cache_stream(c, layer, h);
        s->prompt_end = -1;
        s->budget = c->params.policy.prefill_budget;
        if (ns) memset(s->state, 0, sizeof(float) * (size_t)s->n * ns);
    }
    c->ring_n[layer] = 0;
}

/* The recorded queries (the last ring_n tokens appended) vote over the whole
 * stream: their column mass replaces the streams' votes. */
static void vote_worker(int32_t ith, int32_t nth, void *arg) {
    struct layer_job *jb = arg;
    struct kvb_cache *c = jb->c;
    const int32_t l = jb->layer, H = c->params.n_kv_head, r = c->ring_n[l], n_head = c->ring_heads[l];
    const int64_t p0 = c->n_past[l] - r;
    const size_t ns = (size_t)n_state(c);
    for (int32_t h = ith; h < H; h += nth) {
        struct kvb_stream *s = kvb_cache_stream(c, l, h);
        struct kvb_head_scratch *hs = &c->scratch[h];
        if (s->n < r || s->pos[s->order[s->n - r]] != p0) continue; /* not the tokens recorded: keep the votes */
        memset(hs->col, 0, sizeof(float) * (size_t)s->n);
        attend_tokens(c, s, hs, h, c->ring_q[l], n_head, n_head / H, r, s->n - r, p0, NULL, 0, hs->col);
        memset(s->state, 0, sizeof(float) * (size_t)s->n * ns);
        c->policy.iface->observe(&c->policy, s, hs->col, s->n, true);
    }
}

/* A stream's compression budget: its target (kvb_cache_set_budget), or the
 * layer's base when budget_frac resolves it or no target is set. */
static int32_t stream_target(const struct kvb_policy_params *pp, const struct kvb_stream *s, int32_t base) {
    return pp->budget_frac > 0 || !s->target ? base : s->target;
}

/* Ends the open prompt of a layer: vote, budgets from the prompt length,
 * eviction, then the frozen prompt plus decode_budget. Cannot fail. */
static void compress_layer(struct kvb_cache *c, int32_t l, struct kvb_threadpool *tp) {
    const struct kvb_policy_params *pp = &c->params.policy;
    struct kvb_stream *ptrs[KVB_MAX_KV_HEADS];
    const int32_t H = layer_streams(c, l, ptrs);
    struct layer_job jb = {c, l};
    if (c->ring_n[l] > 0) kvb_threadpool_run(tp, vote_worker, &jb);
    const int64_t prompt = c->n_past[l];
    int32_t base = pp->budget, P = 0;
    if (pp->budget_frac > 0) {
        double b = floor((double)pp->budget_frac * (double)prompt);
        base = KVB_MAX((int32_t)KVB_MIN(b, (double)INT32_MAX), pp->n_sink + 1);
    }
    for (int32_t h = 0; h < H; h++) {
        ptrs[h]->budget = stream_target(pp, ptrs[h], base);
        P = KVB_MAX(P, ptrs[h]->n);
    }
    if (c->policy.iface->budgets) c->policy.iface->budgets(&c->policy, ptrs, H, l, c->params.n_layer, base, P);
    kvb_threadpool_run(tp, evict_worker, &jb);
    for (int32_t h = 0; h < H; h++) {
        struct kvb_stream *s = ptrs[h];
        const int64_t dec = pp->decode_budget ? pp->decode_budget : stream_target(pp, s, base);
        s->prompt_end = (int32_t)prompt;
        s->budget = (int32_t)KVB_MIN((int64_t)s->n + dec, (int64_t)INT32_MAX);
    }
    c->ring_n[l] = 0;
}

static bool prompt_open(const struct kvb_cache *c, int32_t layer) {
    return (c->policy.iface->flags & KVB_PF_COMPRESS) && kvb_cache_stream(c, layer, 0)->prompt_end < 0;
}

kvb_status kvb_cache_prefill(struct kvb_cache *c, int32_t layer, int32_t n_tok, const float *q, int32_t n_head,
                             const float *k, const float *v, float *out, struct kvb_threadpool *tp) {
    kvb_status st = check_layer(c, layer);
    if (st != KVB_OK) return st;
    if ((st = check_heads(c, n_head)) != KVB_OK) return st;
    if (n_tok < 1 || n_tok > (1 << 20)) return kvb_fail(KVB_ERR_INVALID, "cache_prefill: n_tok must be in 1..1048576, got %d", (int)n_tok);
    if (!q || !k || !v || !out) return kvb_fail(KVB_ERR_INVALID, "cache_prefill: q, k, v and out must not be NULL");
    if ((st = check_pos(c, layer, n_tok)) != KVB_OK) return st;
    const struct kvb_policy_i *pi = c->policy.iface;
    const bool compress = pi->flags & KVB_PF_COMPRESS;
    const bool exact = compress && c->params.policy.prefill_budget == 0;
    const int32_t G = n_head / c->params.n_kv_head;
    if (exact && (st = ring_reserve(c, layer, n_head)) != KVB_OK) return st;
    if ((st = prepare_layer(c, layer, n_tok, G)) != KVB_OK) return st;
    if (compress && !prompt_open(c, layer)) open_prompt(c, layer);
    struct prefill_job jb = {c, layer, n_tok, n_head, G, q, k, v, out,
                             !exact && pi->observe && (pi->flags & KVB_PF_PREFILL_MASS)};
    kvb_threadpool_run(tp, prefill_worker, &jb);
    if (exact) ring_push(c, layer, q, n_tok);
    c->n_past[layer] += n_tok;
    update_peak(c); /* peak includes the whole chunk before eviction */
    combine_and_evict(c, layer, tp);
    return KVB_OK;
}

void kvb_cache_compress(struct kvb_cache *c, struct kvb_threadpool *tp) {
    if (!c || !(c->policy.iface->flags & KVB_PF_COMPRESS)) return;
    for (int32_t l = 0; l < c->params.n_layer; l++)
        if (prompt_open(c, l)) compress_layer(c, l, tp);
    update_peak(c);
}

/* ------------------------------------------------------------------------ */
/* budgets, introspection, stats                                            */
/* ------------------------------------------------------------------------ */

kvb_status kvb_cache_set_budget(struct kvb_cache *c, int32_t layer, int32_t head, int32_t tokens) {
    if (!c) return kvb_fail(KVB_ERR_INVALID, "cache is NULL");
    if (layer < -1 || layer >= c->params.n_layer) return kvb_fail(KVB_ERR_INVALID, "set_budget: layer %d out of range", (int)layer);
    if (head < -1 || head >= c->params.n_kv_head) return kvb_fail(KVB_ERR_INVALID, "set_budget: head %d out of range", (int)head);
    if (tokens < 0) return kvb_fail(KVB_ERR_INVALID, "set_budget: tokens must be >= 0, got %d", (int)tokens);
    if (tokens != 0 && tokens <= c->params.policy.n_sink)
        return kvb_fail(KVB_ERR_INVALID, "set_budget: %d tokens do not exceed n_sink (%d)", (int)tokens, (int)c->params.policy.n_sink);
    if (tokens == 0 && !(c->policy.iface->flags & KVB_PF_NEVER_EVICT))
        return kvb_fail(KVB_ERR_INVALID, "set_budget: policy %s needs a budget > 0", kvb_policy_name(c->params.policy.id));
    const bool compress = c->policy.iface->flags & KVB_PF_COMPRESS;
    for (int32_t l = 0; l < c->params.n_layer; l++)
        for (int32_t h = 0; h < c->params.n_kv_head; h++)
            if ((layer < 0 || l == layer) && (head < 0 || h == head)) {
                struct kvb_stream *s = kvb_cache_stream(c, l, h);
                s->target = tokens;
                /* an open snapkv-family prompt keeps prefill_budget until its compress */
                if (!compress || s->prompt_end >= 0) s->budget = tokens;
            }
    return KVB_OK;
}

static bool stream_ok(const struct kvb_cache *c, int32_t layer, int32_t head) {
    return c && layer >= 0 && layer < c->params.n_layer && head >= 0 && head < c->params.n_kv_head;
}

int32_t kvb_cache_get_budget(const struct kvb_cache *c, int32_t layer, int32_t head) {
    return stream_ok(c, layer, head) ? kvb_cache_stream(c, layer, head)->budget : -1;
}

int32_t kvb_cache_n_slots(const struct kvb_cache *c, int32_t layer, int32_t head) {
    return stream_ok(c, layer, head) ? kvb_cache_stream(c, layer, head)->n : -1;
}

int64_t kvb_cache_n_past(const struct kvb_cache *c, int32_t layer) {
    return c && layer >= 0 && layer < c->params.n_layer ? c->n_past[layer] : -1;
}

kvb_status kvb_cache_slot_info(const struct kvb_cache *c, int32_t layer, int32_t head, int32_t j, struct kvb_slot_info *o) {
    if (!stream_ok(c, layer, head) || !o) return kvb_fail(KVB_ERR_INVALID, "slot_info: bad cache, layer or head");
    const struct kvb_stream *s = kvb_cache_stream(c, layer, head);
    if (j < 0 || j >= s->n) return kvb_fail(KVB_ERR_INVALID, "slot_info: slot %d out of range 0..%d", (int)j, (int)s->n - 1);
    int32_t slot = s->order[j];
    o->pos_original = s->pos[slot];
    o->pos_cache = c->pos_mode == KVB_POS_CONTIGUOUS ? j : s->pos[slot];
    o->score = n_state(c) ? s->state[(size_t)j * n_state(c)] : 0.0f;
    o->page = slot >> c->block_shift;
    return KVB_OK;
}

kvb_status kvb_cache_read_slot(const struct kvb_cache *c, int32_t layer, int32_t head, int32_t j, float *k, float *v) {
    if (!stream_ok(c, layer, head)) return kvb_fail(KVB_ERR_INVALID, "read_slot: bad cache, layer or head");
    const struct kvb_stream *s = kvb_cache_stream(c, layer, head);
    if (j < 0 || j >= s->n) return kvb_fail(KVB_ERR_INVALID, "read_slot: slot %d out of range 0..%d", (int)j, (int)s->n - 1);
    const uint8_t *kd = slot_k(c, s, s->order[j]);
    if (k) load_row(c, kd, k);
    if (v) load_row(c, kd + c->page_bytes / 2, v);
    return KVB_OK;
}

void kvb_cache_get_stats(const struct kvb_cache *c, struct kvb_cache_stats *o) {
    memset(o, 0, sizeof *o);
    if (!c) return;
    const size_t n_streams = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    const size_t pb = c->pool->page_bytes;
    size_t meta = sizeof *c + n_streams * sizeof(struct kvb_stream);
    o->slots_min = INT32_MAX;
    for (size_t i = 0; i < n_streams; i++) {
        const struct kvb_stream *s = &c->streams[i];
        o->pages_in_use += s->n_pages;
        o->slots += s->n;
        o->slots_max = KVB_MAX(o->slots_max, s->n);
        o->slots_min = KVB_MIN(o->slots_min, s->n);
        meta += (size_t)s->slot_cap * (sizeof(int32_t) * 5 + sizeof(float) * (1 + (size_t)KVB_MAX(n_state(c), 1)));
        meta += (size_t)s->pages_cap * (sizeof(uint8_t *) + sizeof(int32_t)) + (size_t)s->runs_cap * sizeof(struct kvb_run);
    }
    o->bytes_used = (size_t)o->pages_in_use * pb;
    o->bytes_reserved = o->bytes_used + meta;
    o->bytes_peak = (size_t)KVB_MAX(c->pages_peak, o->pages_in_use) * pb;
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(c->pool, &ps);
    o->pages_free = ps.pages_free;
}

/* ------------------------------------------------------------------------ */
/* hooks for cache_io.c (restore)                                           */
/* ------------------------------------------------------------------------ */

kvb_status kvb_stream_reserve(struct kvb_cache *c, struct kvb_stream *s, int32_t n_pages, int32_t n) {
    if (grow_pages(s, n_pages) != KVB_OK || grow_slots(c, s, (int64_t)n_pages * c->params.block_size) != KVB_OK ||
        kvb_grow((void **)&s->runs, &s->runs_cap, (int64_t)n + 1, sizeof(struct kvb_run)) != KVB_OK)
        return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory restoring a stream of %d slots", (int)n);
    return KVB_OK;
}

void kvb_stream_finish_restore(struct kvb_cache *c, struct kvb_stream *s) {
    const int32_t B = c->params.block_size;
    for (int32_t pg = 0; pg < s->n_pages; pg++) s->page_live[pg] = 0;
    for (int32_t j = 0; j < s->n; j++) s->page_live[s->order[j] / B]++;
    int32_t nf = 0;
    for (int64_t sl = (int64_t)s->n_pages * B - 1; sl >= 0; sl--)
        if (s->pos[sl] < 0) s->free_slots[nf++] = (int32_t)sl;
    s->n_free = nf;
    if (c->pos_mode == KVB_POS_CONTIGUOUS) runs_rebuild(s);
}

void kvb_cache_note_peak(struct kvb_cache *c) { update_peak(c); }

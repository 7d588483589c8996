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
 *
 * The pinned span (kv.keep). A stream's first keep positions lead its
 * logical order and are never evicted: every policy hook gets the view
 * after them (kvb_cache_policy_view, cache_impl.h), the victims it names are
 * shifted back, and the budget bounds the tokens after the span. The
 * policy's own n_sink is what the span leaves of its sinks (n_sink - keep).
 */
#include "cache_impl.h"

#include <math.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* params                                                                   */
/* ------------------------------------------------------------------------ */

struct kvb_cache_params kvb_cache_default_params(void) {
    struct kvb_cache_params p;
    memset(&p, 0, sizeof p);
    p.n_layer = 1;
    p.n_kv_head = 1;
    p.head_dim = 64;
    p.rope.type = KVB_ROPE_NONE;
    p.rope.base = 10000.0f;
    p.rope.freq_scale = 1.0f;
    p.pool_bytes = (size_t)1 << 30;
    p.kv = kvb_kv_default_params();
    return p;
}

static enum kvb_dtype v_dtype(const struct kvb_cache_params *p) { return kvb_kv_v_type(&p->kv); }

size_t kvb_cache_page_bytes(const struct kvb_cache_params *p) {
    const size_t rk = kvb_dtype_row_bytes(p->kv.kv_dtype, p->head_dim), rv = kvb_dtype_row_bytes(v_dtype(p), p->head_dim);
    if (!rk || (!rv && p->head_dim_v <= 0) || p->kv.block_size <= 0) return 0;
    return (size_t)p->kv.block_size * (rk + (p->head_dim_v > 0 ? 0 : rv)); /* latent rows: K rows only */
}

/* head_dim_v > 0 (multi-head latent attention): the value is the K row's
 * last head_dim_v entries, so they must never be rotated (every rotation
 * turns a row's FIRST n_dims), begin on a whole block of the row type, and
 * there is no V type of its own. */
static kvb_status validate_latent(const struct kvb_cache_params *p) {
    const int32_t dv = p->head_dim_v;
    if (dv == 0) return KVB_OK;
    if (dv < 0 || dv > p->head_dim)
        return kvb_fail(KVB_ERR_INVALID, "cache: head_dim_v must be in 0..head_dim (%d), got %d", (int)p->head_dim, (int)dv);
    if (p->rope.type != KVB_ROPE_NONE && p->rope.n_dims + dv > p->head_dim)
        return kvb_fail(KVB_ERR_INVALID, "cache: head_dim_v %d: rope.n_dims %d + head_dim_v exceeds head_dim %d (the value, a K row's last "
                        "head_dim_v entries, would be rotated)", (int)dv, (int)p->rope.n_dims, (int)p->head_dim);
    if (p->kv.kv_dtype_v != KVB_DTYPE_AS_K && p->kv.kv_dtype_v != p->kv.kv_dtype)
        return kvb_fail(KVB_ERR_INVALID, "cache: head_dim_v %d stores no V rows: kv_dtype_v must be as K (%s), got %s", (int)dv,
                        kvb_dtype_name(p->kv.kv_dtype), kvb_dtype_name(p->kv.kv_dtype_v));
    if (p->head_dim > dv && !kvb_dtype_row_bytes(p->kv.kv_dtype, p->head_dim - dv))
        return kvb_fail(KVB_ERR_INVALID, "cache: head_dim_v %d: the value starts at entry %d, not on a block of 32 of %s rows", (int)dv,
                        (int)(p->head_dim - dv), kvb_dtype_name(p->kv.kv_dtype));
    return KVB_OK;
}

static kvb_status validate_params(const struct kvb_cache_params *p) {
    kvb_status st_rec;
    if (p->n_layer < 1 || p->n_layer > 4096) return kvb_fail(KVB_ERR_INVALID, "cache: n_layer must be in 1..4096, got %d", (int)p->n_layer);
    if (p->n_kv_head < 1 || p->n_kv_head > KVB_MAX_KV_HEADS)
        return kvb_fail(KVB_ERR_INVALID, "cache: n_kv_head must be in 1..%d, got %d", KVB_MAX_KV_HEADS, (int)p->n_kv_head);
    if (p->head_dim < 1 || p->head_dim > KVB_ATTN_MAX_DIM)
        return kvb_fail(KVB_ERR_INVALID, "cache: head_dim must be in 1..%d, got %d", KVB_ATTN_MAX_DIM, (int)p->head_dim);
    if (p->kv.kv_dtype < KVB_DTYPE_F32 || p->kv.kv_dtype > KVB_DTYPE_BF16) return kvb_fail(KVB_ERR_INVALID, "cache: unknown dtype %d", (int)p->kv.kv_dtype);
    if (p->kv.kv_dtype_v < KVB_DTYPE_AS_K || p->kv.kv_dtype_v > KVB_DTYPE_BF16) return kvb_fail(KVB_ERR_INVALID, "cache: unknown dtype_v %d", (int)p->kv.kv_dtype_v);
    if (!kvb_dtype_row_bytes(p->kv.kv_dtype, p->head_dim) || !kvb_dtype_row_bytes(v_dtype(p), p->head_dim))
        return kvb_fail(KVB_ERR_INVALID, "cache: head_dim %d does not fill whole blocks of 32 (K %s, V %s need it)", (int)p->head_dim,
                        kvb_dtype_name(p->kv.kv_dtype), kvb_dtype_name(v_dtype(p)));
    if (p->kv.block_size < 1 || p->kv.block_size > 4096 || (p->kv.block_size & (p->kv.block_size - 1)))
        return kvb_fail(KVB_ERR_INVALID, "cache: block_size must be a power of two in 1..4096, got %d", (int)p->kv.block_size);
    if (p->kv.pos_mode < KVB_POS_POLICY_DEFAULT || p->kv.pos_mode > KVB_POS_CAPPED) return kvb_fail(KVB_ERR_INVALID, "cache: unknown pos_mode %d", (int)p->kv.pos_mode);
    if (p->kv.max_distance < 0) return kvb_fail(KVB_ERR_INVALID, "cache: max_distance must be >= 0, got %d", (int)p->kv.max_distance);
    if (p->kv.keep < 0 || p->kv.keep > KVB_KEEP_MAX)
        return kvb_fail(KVB_ERR_INVALID, "cache: kv.keep (the pinned span) must be in 0..%d, got %d", KVB_KEEP_MAX, (int)p->kv.keep);
    if (p->no_rope) {
        for (int32_t l = 0; l < p->n_layer; l++)
            if (p->no_rope[l] > 1) return kvb_fail(KVB_ERR_INVALID, "cache: no_rope[%d] is %d, not 0 or 1", (int)l, (int)p->no_rope[l]);
    }
    if ((p->kv.n_layers > 0 && !p->kv.layers) || p->kv.n_layers < 0 || p->kv.n_layers > p->n_layer)
        return kvb_fail(KVB_ERR_INVALID, "cache: kv.n_layers must be in 0..n_layer (%d) with kv.layers set, got %d", (int)p->n_layer,
                        (int)p->kv.n_layers);
    for (int32_t i = 0; i < p->kv.n_layers; i++) {
        const struct kvb_kv_layer *o = &p->kv.layers[i];
        if (o->layer < 0 || o->layer >= p->n_layer)
            return kvb_fail(KVB_ERR_INVALID, "cache: kv.layers[%d].layer %d out of range 0..%d", (int)i, (int)o->layer, (int)p->n_layer - 1);
        for (int32_t j = 0; j < i; j++)
            if (p->kv.layers[j].layer == o->layer)
                return kvb_fail(KVB_ERR_INVALID, "cache: kv.layers[%d] and kv.layers[%d] both name layer %d", (int)j, (int)i, (int)o->layer);
        if (!kvb_policy_is_layer_window(&o->policy))
            return kvb_fail(KVB_ERR_UNSUPPORTED,
                            "cache: kv.layers[%d].policy: %s with %d sinks; the one per-layer override applied is a sliding window "
                            "(policy window, n_sink 0)", (int)i, kvb_policy_name(o->policy.id), (int)o->policy.n_sink);
        if (o->policy.budget < 1)
            return kvb_fail(KVB_ERR_INVALID, "cache: kv.layers[%d].policy.budget (the window) must be >= 1, got %d", (int)i, (int)o->policy.budget);
    }
    if (p->sinks) {
        if (p->n_sink_heads < p->n_kv_head || p->n_sink_heads % p->n_kv_head || p->n_sink_heads / p->n_kv_head > KVB_ATTN_MAX_ROWS)
            return kvb_fail(KVB_ERR_INVALID, "cache: n_sink_heads %d must be a multiple of n_kv_head %d (at most %d per KV head)", (int)p->n_sink_heads,
                            (int)p->n_kv_head, KVB_ATTN_MAX_ROWS);
        for (int64_t i = 0; i < (int64_t)p->n_layer * p->n_sink_heads; i++)
            if (!isfinite(p->sinks[i])) return kvb_fail(KVB_ERR_INVALID, "cache: sinks[%lld] is not finite", (long long)i);
    }
    if ((st_rec = kvb_state_validate(p, kvb_cache_page_bytes(p))) != KVB_OK) return st_rec;
    if (p->kv_heads) {
        for (int32_t l = 0; l < p->n_layer; l++)
            if (p->kv_heads[l] < 1 || p->kv_heads[l] > p->n_kv_head)
                return kvb_fail(KVB_ERR_INVALID, "cache: kv_heads[%d] is %d, not in 1..n_kv_head (%d)", (int)l, (int)p->kv_heads[l], (int)p->n_kv_head);
        if (p->sinks) return kvb_fail(KVB_ERR_UNSUPPORTED, "cache: per-layer KV heads (kv_heads) with learned sinks: not implemented");
        if (p->kv.recall.pages > 0)
            return kvb_fail(KVB_ERR_UNSUPPORTED, "cache: recall (kv.recall.pages %d) with per-layer KV heads (kv_heads): not implemented", (int)p->kv.recall.pages);
        for (int32_t l = 0; p->kv_source && l < p->n_layer; l++)
            if (p->kv_source[l] >= 0 && p->kv_source[l] < l && p->kv_heads[l] != p->kv_heads[p->kv_source[l]])
                return kvb_fail(KVB_ERR_INVALID, "cache: layer %d (%d KV heads) reads layer %d (%d): a reader has its source's heads", (int)l,
                                (int)p->kv_heads[l], (int)p->kv_source[l], (int)p->kv_heads[p->kv_source[l]]);
    }
    if (p->kv_source) {
        int32_t w_reader = 0, w_source = 0;
        for (int32_t l = 0; l < p->n_layer; l++) {
            const int32_t src = p->kv_source[l];
            if (src == -1) continue;
            if (src < 0 || src >= l)
                return kvb_fail(KVB_ERR_INVALID, "cache: kv_source[%d] is %d: a reader reads an earlier layer (0..%d) or -1", (int)l, (int)src, (int)l - 1);
            if (p->kv_source[src] != -1)
                return kvb_fail(KVB_ERR_INVALID, "cache: kv_source[%d] is %d, itself a reader (of %d)", (int)l, (int)src, (int)p->kv_source[src]);
            if (p->recurrent && (p->recurrent[l] || p->recurrent[src]))
                return kvb_fail(KVB_ERR_INVALID, "cache: kv_source[%d] = %d: a recurrent layer neither reads nor is read", (int)l, (int)src);
            w_reader = w_source = 0;
            for (int32_t i = 0; i < p->kv.n_layers && p->kv.layers; i++) {
                if (p->kv.layers[i].layer == l) w_reader = p->kv.layers[i].policy.budget;
                if (p->kv.layers[i].layer == src) w_source = p->kv.layers[i].policy.budget;
            }
            if (w_reader != w_source)
                return kvb_fail(KVB_ERR_INVALID, "cache: layer %d (window %d) reads layer %d (window %d): a reader has its source's window", (int)l,
                                (int)w_reader, (int)src, (int)w_source);
        }
        if (p->kv.recall.pages > 0)
            return kvb_fail(KVB_ERR_UNSUPPORTED, "cache: recall (kv.recall.pages %d) with KV-shared layers (kv_source): not implemented", (int)p->kv.recall.pages);
    }
    if (!(p->attn_softcap >= 0.0f) || !isfinite(p->attn_softcap))
        return kvb_fail(KVB_ERR_INVALID, "cache: attn_softcap must be finite and >= 0 (0: off), got %g", (double)p->attn_softcap);
    if (p->rope_swa.base != 0.0f) {
        if (p->rope_swa.type != p->rope.type || p->rope_swa.n_dims < 2 || p->rope_swa.n_dims > p->rope.n_dims || p->rope_swa.n_dims % 2)
            return kvb_fail(KVB_ERR_INVALID, "cache: rope_swa must have rope's type (%d) and an even n_dims in 2..rope.n_dims (%d), got %d, %d",
                            (int)p->rope.type, (int)p->rope.n_dims, (int)p->rope_swa.type, (int)p->rope_swa.n_dims);
        if (!(p->rope_swa.base > 1.0f) || !isfinite(p->rope_swa.base))
            return kvb_fail(KVB_ERR_INVALID, "cache: rope_swa.base must be > 1 (or 0: as rope), got %g", (double)p->rope_swa.base);
        if (!(p->rope_swa.freq_scale > 0.0f) || !isfinite(p->rope_swa.freq_scale))
            return kvb_fail(KVB_ERR_INVALID, "cache: rope_swa.freq_scale must be > 0, got %g", (double)p->rope_swa.freq_scale);
    }
    if (p->rope.type < KVB_ROPE_NONE || p->rope.type > KVB_ROPE_NEOX) return kvb_fail(KVB_ERR_INVALID, "cache: unknown rope.type %d", (int)p->rope.type);
    if (p->rope.type != KVB_ROPE_NONE) {
        if (p->rope.n_dims < 2 || p->rope.n_dims > p->head_dim || (p->rope.n_dims & 1))
            return kvb_fail(KVB_ERR_INVALID, "cache: rope.n_dims must be even and in 2..head_dim (%d), got %d", (int)p->head_dim, (int)p->rope.n_dims);
        if (!(p->rope.base > 1.0f) || !isfinite(p->rope.base)) return kvb_fail(KVB_ERR_INVALID, "cache: rope.base must be > 1, got %g", (double)p->rope.base);
        if (!(p->rope.freq_scale > 0.0f) || !isfinite(p->rope.freq_scale)) return kvb_fail(KVB_ERR_INVALID, "cache: rope.freq_scale must be > 0, got %g", (double)p->rope.freq_scale);
    }
    kvb_status st = validate_latent(p);
    if (st != KVB_OK) return st;
    if ((st = kvb_policy_validate(&p->kv.policy)) != KVB_OK) return st;
    const struct kvb_policy_i *pi = kvb_policy_iface(p->kv.policy.id);
    const char *pn = pi->name;
    enum kvb_pos_mode pm = p->kv.pos_mode == KVB_POS_POLICY_DEFAULT ? pi->default_pos : p->kv.pos_mode;
    if (pm == KVB_POS_CAPPED && p->kv.max_distance < 1)
        return kvb_fail(KVB_ERR_INVALID, "cache: positions capped (policy %s) need max_distance > 0 (the trained length)", pn);
    const struct kvb_recall_params *rp = &p->kv.recall;
    if (rp->pages < 0 || rp->pages > KVB_RECALL_MAX_PAGES)
        return kvb_fail(KVB_ERR_INVALID, "cache: recall.pages must be in 0..%d, got %d", KVB_RECALL_MAX_PAGES, (int)rp->pages);
    if (rp->pages > 0) {
        if (rp->every < 0) return kvb_fail(KVB_ERR_INVALID, "cache: recall.every must be >= 1, got %d", (int)rp->every);
        if (rp->summary < KVB_RECALL_BOUNDS || rp->summary > KVB_RECALL_EXACT)
            return kvb_fail(KVB_ERR_INVALID, "cache: unknown recall.summary %d", (int)rp->summary);
        if ((int64_t)rp->pages * p->kv.block_size > 65536)
            return kvb_fail(KVB_ERR_INVALID, "cache: recall area of %d pages of %d tokens exceeds 65536 tokens", (int)rp->pages, (int)p->kv.block_size);
        if (p->kv.pos_mode == KVB_POS_CONTIGUOUS)
            return kvb_fail(KVB_ERR_INVALID, "cache: recall needs original or capped positions (recalled tokens keep theirs), not contiguous");
    }
    return KVB_OK;
}

/* ------------------------------------------------------------------------ */
/* capacity (prepare)                                                       */
/* ------------------------------------------------------------------------ */

static kvb_status ring_reserve(struct kvb_cache *c, int32_t layer, int32_t n_head);

/* Whether the step of n_new tokens may move rows within stream s when it
 * evicts (compaction moves rows once two pages of holes are free; see
 * stream.c): an upper bound on what it evicts, from the budget or, for a
 * window layer, from the positions that leave the window. Prompt
 * compression (the snapkv family) rewrites the stream: always while a
 * prompt is open or a chunk opens one. block-h2o takes whole pages: up to
 * a page less one more than the budget says. */
static bool prompt_open(const struct kvb_cache *c, int32_t layer);
static kvb_status recon_reserve(struct kvb_cache *c, int32_t layer, int32_t n_tok);
static void recon_worker(int32_t ith, int32_t nth, void *arg);
static bool may_compact(const struct kvb_cache *c, const struct kvb_stream *s, int32_t layer, int32_t n_new) {
    if ((c->policy.flags & KVB_PF_COMPRESS) && !s->window && (n_new > 1 || prompt_open(c, layer))) return true; /* a prompt to compress */
    int64_t k = 0;
    if (s->window) {
        const int64_t next = c->n_past[layer] + n_new;
        while (k < s->v.n && next - s->v.pos[s->v.order[k]] >= s->window) k++;
        k += KVB_MAX(0, (int64_t)n_new - s->window + 1);
    } else if (s->v.budget > 0 && !(c->policy.flags & KVB_PF_NEVER_EVICT)) {
        k = KVB_MAX(0, (int64_t)s->v.n - kvb_cache_pinned(c, s) + n_new - s->v.budget); /* the span is never evicted */
        if (k > 0 && (c->policy.flags & KVB_PF_WHOLE_PAGES)) k += c->geom.block_size - 1;
    }
    if (k == 0) return false;
    const int64_t B = c->geom.block_size;
    const int64_t np = kvb_stream_pages_needed(&c->geom, s, n_new);
    return s->n_free + np * B - n_new + k >= 2 * B;
}

/* Whether page pg of stream s is never written again: every slot of it
 * holds a pinned position (kv.keep; a window layer pins nothing). A pinned
 * slot is never evicted, so the page has no hole for an append and none
 * for compaction to move a row into; the pinned pages are the stream's
 * lowest (the span's positions come first, into a fresh stream's lowest
 * slots, and a page below them never empties), so compaction never moves
 * their rows out either. Forks share such pages for as long as they live.
 * The page holding the span's end and the conversation's start is not one
 * of them: it follows the copy-on-write rules (a fork copies it before it
 * writes or compacts), so a fork copies at most that one page of the span
 * and its layout stays the unforked cache's. O(block_size). */
static bool page_never_written(const struct kvb_cache *c, const struct kvb_stream *s, int32_t pg) {
    const int32_t keep = c->params.kv.keep, B = c->geom.block_size;
    if (keep < B || s->window || s->v.page_live[pg] != B) return false;
    for (int32_t t = 0; t < B; t++) {
        const int32_t pos = s->v.pos[pg * B + t];
        if (pos < 0 || pos >= keep) return false;
    }
    return true;
}

/* Whether stream s, asking for np more pages, turns long with them (pool.c:
 * it then holds half an extent or more) and moves the pages it holds into
 * the start of its first run. A fork whose first page is a page of the
 * pinned span does not move: the span's pages stay shared (a move copies
 * every page it holds), and its new pages still come in runs. The answer
 * depends on s alone, so it is the same before and after the step's copies. */
static bool turns_long(const struct kvb_cache *c, const struct kvb_stream *s, int64_t np) {
    const int64_t held = s->v.n_pages;
    return np > 0 && held > 0 && held < c->pool->long_pages && held + np >= c->pool->long_pages &&
           !(s->cow && page_never_written(c, s, 0));
}

/* Copy on write: appends to *list (pairs stream index, page index; *n of
 * them in *cap int32s, kvb_grow) the pages of stream i that other caches
 * also hold and that it will write into: those holding the holes its next
 * n_new tokens pop (top of the stack first), or, when all (the step may
 * compact), every one but the pages of the pinned span, which nothing
 * writes into (page_never_written). */
static kvb_status cow_collect(struct kvb_cache *c, size_t i, int32_t n_new, bool all, int32_t **list, int64_t *cap, int64_t *n) {
    struct kvb_stream *s = &c->streams[i];
    const int64_t first = *n;
    const int32_t count = all ? s->v.n_pages : KVB_MIN(n_new, s->n_free);
    for (int32_t t = 0; t < count; t++) {
        const int32_t pg = all ? t : s->free_slots[s->n_free - 1 - t] >> c->geom.block_shift;
        bool seen = false; /* holes of one page need not be adjacent in the stack */
        for (int64_t q = *n - 1; q >= first && !all && !seen; q--) seen = (*list)[2 * q + 1] == pg;
        if (seen || (all && page_never_written(c, s, pg)) || !kvb_pool_is_shared(c->pool, s->pages[pg])) continue;
        if (kvb_grow((void **)list, cap, 2 * *n + 2, sizeof(int32_t)) != KVB_OK) return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
        (*list)[2 * *n] = (int32_t)i;
        (*list)[2 * *n + 1] = pg;
        (*n)++;
    }
    return KVB_OK;
}

/* The copy-on-write pages of layers [l0, l1) for a step of n_new tokens
 * (*list: NULL or allocated, the caller frees it). */
static kvb_status cow_pages(struct kvb_cache *c, int32_t l0, int32_t l1, int32_t n_new, int32_t **list, int64_t *n) {
    const int32_t H = c->params.n_kv_head;
    int64_t cap = 0;
    kvb_status st = KVB_OK;
    *n = 0;
    for (int32_t l = l0; l < l1 && st == KVB_OK; l++)
        for (int32_t h = 0; h < H && st == KVB_OK; h++) {
            const size_t i = (size_t)l * H + h;
            if (c->streams[i].cow) st = cow_collect(c, i, n_new, may_compact(c, &c->streams[i], l, n_new), list, &cap, n);
        }
    return st;
}

/* The bytes of a page that rows use: K rows, then V rows. */
static size_t page_used_bytes(const struct kvb_cache *c) {
    return c->geom.v_offset + (size_t)c->geom.block_size * c->geom.row_bytes_v;
}

/* Swaps each listed page for its copy in fresh[0..n) and lets the shared one go. */
static void cow_swap(struct kvb_cache *c, const int32_t *list, int64_t n, uint8_t *const *fresh) {
    for (int64_t i = 0; i < n; i++) {
        struct kvb_stream *s = &c->streams[list[2 * i]];
        uint8_t *old = s->pages[list[2 * i + 1]];
        memcpy(fresh[i], old, page_used_bytes(c));
        s->pages[list[2 * i + 1]] = fresh[i];
        kvb_pool_give(c->pool, &old, 1);
    }
}

/* Pages stream s needs for n_new more tokens: none where it holds no K/V (recurrent, a reader, a head past its layer's). */
static int64_t pages_needed(const struct kvb_cache *c, const struct kvb_stream *s, int32_t n_new) {
    return s->no_kv ? 0 : kvb_stream_pages_needed(&c->geom, s, n_new);
}

/* Reserves room for n_new tokens in every stream of layers [l0, l1), plus
 * attention scratch for G query heads and, when ring_heads > 0, the snapkv
 * family's query rings: array capacities first, then the pages from the pool
 * all or nothing, attached as free slots (c->reserved counts them per
 * stream). On failure nothing observable changed (only capacities grew). */
static kvb_status reserve_layers(struct kvb_cache *c, int32_t l0, int32_t l1, int32_t n_new, int32_t G, int32_t ring_heads) {
    const int32_t H = c->params.n_kv_head;
    int64_t total = 0, n_max = 0;
    for (int32_t l = l0; l < l1; l++)
        for (int32_t h = 0; h < H; h++) {
            struct kvb_stream *s = kvb_cache_stream(c, l, h);
            const int64_t np = pages_needed(c, s, n_new);
            if (kvb_cache_is_reader(c, l)) /* attention over its source's keys: scratch for them */
                n_max = KVB_MAX(n_max, (int64_t)kvb_cache_stream(c, c->kv_src[l], h)->v.n + n_new);
            if (s->no_kv) continue;
            if (kvb_stream_reserve(&c->geom, s, s->v.n_pages + np, (int64_t)s->v.n + n_new + 1) != KVB_OK)
                return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for slot metadata (layer %d)", (int)l);
            total += np + kvb_recall_pages_needed(c, (size_t)l * H + h);
            n_max = KVB_MAX(n_max, (int64_t)s->v.n + n_new);
        }
    if (c->recall) n_max = KVB_MAX(n_max, (int64_t)c->params.kv.recall.pages * c->params.kv.block_size); /* the recall area's runs */
    for (int32_t h = 0; h < H; h++)
        if (kvb_head_scratch_reserve(c, kvb_head_scratch_at(c->scratch, h), n_max, G) != KVB_OK)
            return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for attention scratch");
    kvb_status st;
    for (int32_t l = l0; ring_heads > 0 && l < l1; l++) /* the queries a prompt keeps for its vote (no window layer votes) */
        if (!c->window[l] && (st = ring_reserve(c, l, ring_heads)) != KVB_OK) return st;
    /* One request per stream, near its last page, so that a long stream's
     * pages lie in runs (pool.c), and one per recall area. A stream that
     * becomes long with this request also moves the pages it holds into
     * the start of its first run (a copy of less than half a run, once per
     * stream), unless the pool lacks room for both at once. */
    /* Copy on write: the pages this step's tokens will be written into
     * (the holes they pop) that other caches also hold are copied first,
     * with pages taken in the same request. */
    int64_t n_cow = 0;
    int32_t *cow = NULL; /* pairs (stream, page) */
    if ((st = cow_pages(c, l0, l1, n_new, &cow, &n_cow)) != KVB_OK) {
        kvb_free(cow);
        return st;
    }
    total += n_cow;
    uint8_t *stack[64];
    uint8_t **got = stack;
    int64_t n_moved = 0;
    if (total > 0) {
        const int64_t n_req = 2 * (int64_t)(l1 - l0) * H + 1;
        struct kvb_pool_req rstack[32];
        struct kvb_pool_req *reqs = n_req <= 32 ? rstack : kvb_malloc(sizeof(struct kvb_pool_req) * (size_t)n_req);
        int64_t moving = 0;
        for (int32_t l = l0; reqs && l < l1; l++)
            for (int32_t h = 0; h < H; h++) {
                const struct kvb_stream *s = kvb_cache_stream(c, l, h);
                const int64_t np = pages_needed(c, s, n_new);
                if (turns_long(c, s, np)) moving += s->v.n_pages;
            }
        if (total + moving > 64) got = kvb_malloc(sizeof(uint8_t *) * (size_t)(total + moving));
        if (!got || !reqs) {
            if (got != stack) kvb_free(got);
            if (reqs != rstack) kvb_free(reqs);
            kvb_free(cow);
            return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
        }
        reqs[n_req - 1] = (struct kvb_pool_req){n_cow, 0, NULL}; /* the copies, taken last */
        for (int pass = moving > 0 ? 0 : 1; pass < 2; pass++) { /* pass 0 moves the pages of streams turning long */
            for (int32_t l = l0, r = 0; l < l1; l++)
                for (int32_t h = 0; h < H; h++, r += 2) {
                    const struct kvb_stream *s = kvb_cache_stream(c, l, h);
                    const int64_t np = pages_needed(c, s, n_new), held = s->v.n_pages;
                    const bool move = pass == 0 && turns_long(c, s, np);
                    reqs[r] = move ? (struct kvb_pool_req){held + np, 0, NULL}
                                   : (struct kvb_pool_req){np, held, held ? s->pages[held - 1] : NULL};
                    reqs[r + 1] = (struct kvb_pool_req){kvb_recall_pages_needed(c, (size_t)l * H + h), 0, NULL};
                }
            st = kvb_pool_take_reqs(c->pool, reqs, n_req, got);
            if (st == KVB_OK) {
                n_moved = pass == 0 ? moving : 0;
                break;
            }
        }
        if (reqs != rstack) kvb_free(reqs);
        if (st != KVB_OK) {
            if (got != stack) kvb_free(got);
            kvb_free(cow);
            return st;
        }
    }
    cow_swap(c, cow, n_cow, got + total + n_moved - n_cow);
    kvb_free(cow);
    int64_t k = 0;
    for (int32_t l = l0; l < l1; l++)
        for (int32_t h = 0; h < H; h++) {
            struct kvb_stream *s = kvb_cache_stream(c, l, h);
            const int64_t np = pages_needed(c, s, n_new), held = s->v.n_pages;
            if (n_moved && turns_long(c, s, np)) {
                for (int64_t i = 0; i < held; i++) { /* the page table keeps its order: slots do not change */
                    memcpy(got[k + i], s->pages[i], page_used_bytes(c));
                    uint8_t *old = s->pages[i];
                    s->pages[i] = got[k + i];
                    got[k + i] = old;
                }
                kvb_pool_give(c->pool, got + k, held);
                k += held;
            }
            kvb_stream_attach(&c->geom, s, got + k, np);
            c->reserved[(size_t)l * H + h] = (int32_t)np;
            k += np;
            const int32_t na = kvb_recall_pages_needed(c, (size_t)l * H + h);
            if (na) {
                kvb_recall_attach(c, (size_t)l * H + h, got + k, true);
                k += na;
            } else if (c->recall) {
                c->recall[(size_t)l * H + h].reserved = false;
            }
        }
    if (got != stack) kvb_free(got);
    return KVB_OK;
}

/* Room for n_new tokens in one layer, right before they are written. */
static kvb_status prepare_layer(struct kvb_cache *c, int32_t layer, int32_t n_new, int32_t G) {
    c->has_reserve = false; /* what follows uses the reserved pages */
    return reserve_layers(c, layer, layer + 1, n_new, G, 0);
}

static kvb_status check_heads(const struct kvb_cache *c, int32_t n_head);
static kvb_status recon_reserve(struct kvb_cache *c, int32_t layer, int32_t n_tok);
static kvb_status check_pos(const struct kvb_cache *c, int32_t layer, int64_t n_new);
static void update_peak(struct kvb_cache *c);

kvb_status kvb_cache_reserve(struct kvb_cache *c, int32_t n_new, int32_t n_head) {
    if (!c) return kvb_fail(KVB_ERR_INVALID, "cache is NULL");
    kvb_status st = check_heads(c, n_head);
    if (st != KVB_OK) return st;
    if (n_new < 1 || n_new > (1 << 20)) return kvb_fail(KVB_ERR_INVALID, "cache_reserve: n_new must be in 1..1048576, got %d", (int)n_new);
    for (int32_t l = 0; l < c->params.n_layer; l++)
        if ((st = check_pos(c, l, n_new)) != KVB_OK) return st;
    const bool recon_room = c->recon_ctx && ((c->policy.iface->flags & KVB_PF_RECONSTRUCT) || c->pscore); /* kvzip, or a park's passes */
    for (int32_t l = 0; recon_room && l < c->params.n_layer; l++) /* a reconstruction pass's scoring room too (a prompt's rows) */
        if (kvb_cache_holds_kv(c, l) && (prompt_open(c, l) || n_new > 1) && (st = recon_reserve(c, l, n_new)) != KVB_OK) return st;
    const bool rings = (c->policy.flags & KVB_PF_COMPRESS) && c->params.kv.policy.prefill_budget == 0 && (c->policy.flags & KVB_PF_PREFILL_MASS);
    if ((st = reserve_layers(c, 0, c->params.n_layer, n_new, n_head / c->min_kvh, rings ? n_head : 0)) != KVB_OK) return st;
    c->has_reserve = true;
    const bool had_state = kvb_state_pages_held(c) > 0;
    if ((st = kvb_state_prepare(c)) != KVB_OK) { /* the recurrent state's pages, or its copies of a fork's */
        kvb_cache_unreserve(c);
        return st;
    }
    c->state_reserved = !had_state && kvb_state_pages_held(c) > 0;
    update_peak(c);
    return KVB_OK;
}

void kvb_cache_unreserve(struct kvb_cache *c) {
    if (!c || !c->has_reserve) return;
    const size_t n_streams = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    for (size_t i = 0; i < n_streams; i++) {
        uint8_t *pages[64];
        int64_t left = c->reserved[i];
        while (left > 0) { /* the last pages first, as they were attached */
            const int64_t np = KVB_MIN(left, (int64_t)64);
            kvb_stream_detach(&c->geom, &c->streams[i], pages, np);
            kvb_pool_give(c->pool, pages, np);
            left -= np;
        }
        c->reserved[i] = 0;
        kvb_recall_unreserve(c, i);
    }
    if (c->state_reserved) kvb_state_release(c); /* a zero state again, as before (copies of a fork's pages stay: same bytes) */
    c->state_reserved = false;
    c->has_reserve = false;
}

/* ------------------------------------------------------------------------ */
/* eviction: the cache asks, the policy answers                             */
/* ------------------------------------------------------------------------ */

/* Evicts stream s down to its budget: the slots after its pinned span
 * (kv.keep) down to the budget, the policy choosing among them only. Cannot
 * fail. */
static void evict_stream(struct kvb_cache *c, struct kvb_stream *s) {
    const struct kvb_policy_i *pi = c->policy.iface;
    struct kvb_stream_view pv;
    const int32_t pin = kvb_cache_policy_view(c, s, &pv);
    if (!pv.budget || pv.n <= pv.budget || (pi->flags & KVB_PF_NEVER_EVICT)) return;
    int32_t k = pi->select(&c->policy, &pv, pv.n - pv.budget, s->victims);
    for (int32_t i = 0; pin && i < k; i++) s->victims[i] += pin; /* the view's logical slots are the stream's after the span */
    k = kvb_stream_sort_victims(s->victims, k);
    kvb_recall_evicted(c, s, s->victims, k); /* recall: to the cold tier first */
    kvb_stream_remove(&c->geom, s, c->pool, s->victims, k);
}

/* A window layer's stream after its step: the tokens no query from position
 * next on can see (pos <= next - window) leave, their pages go back to the
 * pool. The model's mask, not a policy: nothing goes cold. Cannot fail. */
static void evict_window(struct kvb_cache *c, struct kvb_stream *s, int64_t next) {
    int32_t k = 0;
    while (k < s->v.n && next - s->v.pos[s->v.order[k]] >= s->window) {
        s->victims[k] = k;
        k++;
    }
    if (k) kvb_stream_remove(&c->geom, s, c->pool, s->victims, k);
}

static void update_peak(struct kvb_cache *c) {
    int64_t pages = 0;
    const int64_t n = (int64_t)c->params.n_layer * c->params.n_kv_head;
    for (int64_t i = 0; i < n; i++) pages += c->streams[i].v.n_pages;
    pages += kvb_recall_pages_held(c) + kvb_state_pages_held(c);
    if (pages > c->pages_peak) c->pages_peak = pages;
}

/* ------------------------------------------------------------------------ */
/* init / free                                                              */
/* ------------------------------------------------------------------------ */

/* Budgets of a fresh or reset cache: every stream's target is the policy's
 * budget; the snapkv family starts reading a prompt (prefill_budget). */
static void init_budgets(struct kvb_cache *c) {
    const size_t n_streams = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    const bool compress = c->policy.flags & KVB_PF_COMPRESS;
    for (size_t i = 0; i < n_streams; i++) {
        struct kvb_stream *s = &c->streams[i];
        s->v.target = s->window ? s->window : c->params.kv.policy.budget;
        s->v.budget = s->window ? s->window : compress ? c->params.kv.policy.prefill_budget : c->params.kv.policy.budget;
        s->v.prompt_end = (s->window || s->no_kv) && compress ? 0 : -1; /* a window layer, or one without K/V, has no prompt to compress */
    }
    for (int32_t l = 0; l < c->params.n_layer; l++) c->ring_n[l] = 0;
    for (int32_t l = 0; c->evict_pending && l < c->params.n_layer; l++) c->evict_pending[l] = false;
}

/* Sliding-window layers (kv.layers) and their rotation (rope_swa): the
 * cache's own copies, each stream's window. */
static kvb_status init_windows(struct kvb_cache *c, const struct kvb_cache_params *params) {
    const int32_t L = params->n_layer, H = params->n_kv_head;
    c->params.kv.layers = NULL;
    if (!(c->window = kvb_calloc((size_t)L, sizeof(int32_t)))) return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
    if (params->kv.n_layers > 0) {
        if (!(c->layers = kvb_malloc(sizeof(struct kvb_kv_layer) * (size_t)params->kv.n_layers))) return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
        memcpy(c->layers, params->kv.layers, sizeof(struct kvb_kv_layer) * (size_t)params->kv.n_layers);
        c->params.kv.layers = c->layers;
        for (int32_t i = 0; i < params->kv.n_layers; i++) c->window[c->layers[i].layer] = c->layers[i].policy.budget;
    }
    const bool own_rope = params->rope_swa.base > 0 && c->n_pairs > 0;
    c->params.rope_swa.freq_factors = NULL;
    c->n_pairs_swa = own_rope ? params->rope_swa.n_dims / 2 : c->n_pairs;
    if (own_rope) {
        if (!(c->inv_freq_swa = kvb_malloc(sizeof(double) * (size_t)c->n_pairs_swa))) return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
        if (params->rope_swa.freq_factors) {
            if (!(c->freq_factors_swa = kvb_malloc(sizeof(float) * (size_t)c->n_pairs_swa))) return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
            memcpy(c->freq_factors_swa, params->rope_swa.freq_factors, sizeof(float) * (size_t)c->n_pairs_swa);
            for (int32_t i = 0; i < c->n_pairs_swa; i++)
                if (c->freq_factors_swa[i] == 0 || !isfinite(c->freq_factors_swa[i]))
                    return kvb_fail(KVB_ERR_INVALID, "cache: rope_swa.freq_factors[%d] must be finite and nonzero", (int)i);
            c->params.rope_swa.freq_factors = c->freq_factors_swa;
        }
        kvb_rope_inv_freq(&c->params.rope_swa, c->freq_factors_swa, c->inv_freq_swa);
    }
    for (int32_t l = 0; l < L; l++)
        for (int32_t h = 0; h < H; h++) {
            struct kvb_stream *s = &c->streams[(size_t)l * H + h];
            s->window = c->window[l];
            s->rope_swa = own_rope && c->window[l] > 0;
        }
    return KVB_OK;
}

/* kvzip's reconstruction pass must be able to give back all it changes: no
 * recurrent layers (their state would move for good), original positions.
 * (Sliding-window layers: the pass evicts nothing, so their windows are
 * as before once its rows leave; the model's window, not a policy, bounds
 * them, so they are not scored. Recall: nothing of the pass goes cold; its
 * queries choose the recalled pages, which the next attention chooses
 * afresh.) */
static kvb_status recon_supported(const struct kvb_cache *c) {
    if (!(c->policy.iface->flags & KVB_PF_RECONSTRUCT)) return KVB_OK;
    const char *pn = kvb_policy_name(c->params.kv.policy.id);
    if (c->pos_mode != KVB_POS_ORIGINAL)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "cache: policy %s needs original positions (its reconstruction pass is read after the context)", pn);
    for (int32_t l = 0; l < c->params.n_layer; l++) {
        if (kvb_cache_is_recurrent(c, l))
            return kvb_fail(KVB_ERR_UNSUPPORTED, "cache: policy %s on a model with recurrent layers (layer %d): not implemented (the reconstruction pass would change their state for good)", pn, (int)l);
    }
    return KVB_OK;
}

kvb_status kvb_cache_init(struct kvb_pool *pool, const struct kvb_cache_params *params, struct kvb_cache **out) {
    if (!params || !out) return kvb_fail(KVB_ERR_INVALID, "cache: params and out must not be NULL");
    kvb_status st = validate_params(params);
    if (st != KVB_OK) return st;
    struct kvb_cache *c = kvb_calloc(1, sizeof *c);
    if (!c) return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
    c->params = *params;
    c->params.kv.kv_dtype_v = v_dtype(params); /* resolved: the V rows' own type */
    c->kr = kvb_kernels();
    c->policy = kvb_policy_make(&params->kv.policy, params->kv.block_size);
    /* the pinned span holds positions 0..keep-1, so it is the sinks: the
     * policy's view (after the span) keeps only the sinks past it */
    c->policy.params.n_sink = KVB_MAX(0, params->kv.policy.n_sink - params->kv.keep);
    c->pos_mode = params->kv.pos_mode == KVB_POS_POLICY_DEFAULT ? c->policy.iface->default_pos : params->kv.pos_mode;
    if (params->kv.recall.pages > 0 && c->pos_mode == KVB_POS_CONTIGUOUS) /* streaming's default: recalled tokens keep their positions */
        c->pos_mode = params->kv.max_distance > 0 ? KVB_POS_CAPPED : KVB_POS_ORIGINAL;
    if (params->kv.recall.pages > 0 && c->params.kv.recall.every == 0) c->params.kv.recall.every = 1;
    c->page_bytes = kvb_cache_page_bytes(params);
    c->geom.block_size = params->kv.block_size;
    while ((1 << c->geom.block_shift) < params->kv.block_size) c->geom.block_shift++;
    c->geom.row_bytes = kvb_dtype_row_bytes(params->kv.kv_dtype, params->head_dim);
    c->geom.row_bytes_v = params->head_dim_v > 0 ? 0 : kvb_dtype_row_bytes(c->params.kv.kv_dtype_v, params->head_dim); /* latent: none */
    c->v_in_k = params->head_dim_v > 0 ? kvb_dtype_row_bytes(params->kv.kv_dtype, params->head_dim - params->head_dim_v) : 0;
    c->geom.v_offset = (size_t)params->kv.block_size * c->geom.row_bytes;
    c->geom.n_state = c->policy.iface->n_state;
    c->geom.runs = c->pos_mode == KVB_POS_CONTIGUOUS;
    c->n_pairs = params->rope.type == KVB_ROPE_NONE ? 0 : params->rope.n_dims / 2;
    const size_t n_streams = (size_t)params->n_layer * (size_t)params->n_kv_head;
    c->streams = kvb_calloc(n_streams, sizeof(struct kvb_stream));
    c->n_past = kvb_calloc((size_t)params->n_layer, sizeof(int64_t));
    c->scratch = kvb_head_scratch_new_array(params->n_kv_head);
    c->inv_freq = kvb_calloc((size_t)KVB_MAX(c->n_pairs, 1), sizeof(double));
    c->ring_q = kvb_calloc((size_t)params->n_layer, sizeof(float *));
    c->ring_n = kvb_calloc((size_t)params->n_layer, sizeof(int32_t));
    c->ring_heads = kvb_calloc((size_t)params->n_layer, sizeof(int32_t));
    c->reserved = kvb_calloc(n_streams, sizeof(int32_t));
    if (c->n_pairs && params->rope.freq_factors) {
        c->freq_factors = kvb_malloc(sizeof(float) * (size_t)c->n_pairs);
        if (c->freq_factors) memcpy(c->freq_factors, params->rope.freq_factors, sizeof(float) * (size_t)c->n_pairs);
        else goto nomem;
        for (int32_t i = 0; i < c->n_pairs; i++)
            if (c->freq_factors[i] == 0 || !isfinite(c->freq_factors[i])) { /* a negative divisor turns the pair the other way, as in ggml */
                kvb_cache_free(c);
                return kvb_fail(KVB_ERR_INVALID, "cache: rope.freq_factors[%d] must be finite and nonzero", (int)i);
            }
    }
    c->params.rope.freq_factors = c->freq_factors;
    if (!c->streams || !c->n_past || !c->scratch || !c->inv_freq || !c->ring_q || !c->ring_n || !c->ring_heads || !c->reserved) goto nomem;
    if (c->policy.iface->flags & KVB_PF_RECONSTRUCT) { /* kvzip: the pass's start per layer, every stream's view */
        c->recon_ctx = kvb_calloc((size_t)params->n_layer, sizeof(int64_t));
        c->gviews = kvb_calloc(n_streams, sizeof(struct kvb_stream_view));
        c->gptrs = kvb_calloc(n_streams, sizeof(struct kvb_stream_view *));
        if (!c->recon_ctx || !c->gviews || !c->gptrs) goto nomem;
    }
    if (params->no_rope) {
        if (!(c->no_rope = kvb_malloc((size_t)params->n_layer))) goto nomem;
        memcpy(c->no_rope, params->no_rope, (size_t)params->n_layer);
        for (int32_t l = 0; l < params->n_layer; l++)
            for (int32_t h = 0; h < params->n_kv_head; h++) c->streams[(size_t)l * params->n_kv_head + h].no_rope = c->no_rope[l];
    }
    c->params.no_rope = c->no_rope;
    if (params->sinks) { /* each stream sees its own query heads' */
        const size_t n = (size_t)params->n_layer * (size_t)params->n_sink_heads;
        if (!(c->sinks = kvb_malloc(sizeof(float) * n))) goto nomem;
        memcpy(c->sinks, params->sinks, sizeof(float) * n);
        const int32_t G = params->n_sink_heads / params->n_kv_head;
        for (int32_t l = 0; l < params->n_layer; l++)
            for (int32_t h = 0; h < params->n_kv_head; h++)
                c->streams[(size_t)l * params->n_kv_head + h].sink = c->sinks + (size_t)l * params->n_sink_heads + (size_t)h * G;
    }
    c->params.sinks = c->sinks;
    if (!c->sinks) c->params.n_sink_heads = 0;
    if (c->n_pairs) kvb_rope_inv_freq(&c->params.rope, c->freq_factors, c->inv_freq);
    if ((st = init_windows(c, params)) != KVB_OK) {
        kvb_cache_free(c);
        return st;
    }
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
    if ((st = kvb_state_init(c, params)) != KVB_OK) {
        kvb_cache_free(c);
        return st;
    }
    c->params.kv_source = NULL;
    if (params->kv_source) { /* KV-shared layers: each source's last reader, whose call lets the source evict */
        const size_t L = (size_t)params->n_layer;
        c->kv_src = kvb_malloc(sizeof(int32_t) * L);
        c->last_reader = kvb_malloc(sizeof(int32_t) * L);
        c->evict_pending = kvb_calloc(L, sizeof(bool));
        if (!c->kv_src || !c->last_reader || !c->evict_pending) {
            kvb_cache_free(c);
            return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
        }
        memcpy(c->kv_src, params->kv_source, sizeof(int32_t) * L);
        for (size_t l = 0; l < L; l++) c->last_reader[l] = -1;
        for (size_t l = 0; l < L; l++)
            if (c->kv_src[l] >= 0) c->last_reader[c->kv_src[l]] = (int32_t)l;
        c->params.kv_source = c->kv_src;
    }
    if (!(c->kvh = kvb_malloc(sizeof(int32_t) * (size_t)params->n_layer))) {
        kvb_cache_free(c);
        return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
    }
    c->min_kvh = params->n_kv_head;
    for (int32_t l = 0; l < params->n_layer; l++) {
        c->kvh[l] = params->kv_heads ? params->kv_heads[l] : params->n_kv_head;
        c->min_kvh = KVB_MIN(c->min_kvh, c->kvh[l]);
    }
    c->params.kv_heads = params->kv_heads ? c->kvh : NULL;
    for (int32_t l = 0; l < params->n_layer; l++)
        for (int32_t h = 0; h < params->n_kv_head; h++)
            c->streams[(size_t)l * params->n_kv_head + h].no_kv = !kvb_cache_holds_kv(c, l) || h >= c->kvh[l];
    if ((st = kvb_recall_init(c)) != KVB_OK) { /* after the pool: areas come from it */
        kvb_cache_free(c);
        return st;
    }
    c->params.kv.recall.cold_dir = NULL; /* the store keeps its own copy */
    if ((st = recon_supported(c)) != KVB_OK) {
        kvb_cache_free(c);
        return st;
    }
    init_budgets(c);
    *out = c;
    return KVB_OK;
nomem:
    kvb_cache_free(c);
    return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory");
}

void kvb_cache_free(struct kvb_cache *c) {
    if (!c) return;
    const size_t n_streams = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    if (c->streams) {
        for (size_t i = 0; i < n_streams; i++) {
            struct kvb_stream *s = &c->streams[i];
            kvb_stream_clear(s, c->pool);
            kvb_stream_free(s);
        }
    }
    kvb_recall_free(c); /* area pages back to the pool before it goes */
    kvb_state_free(c);
    kvb_head_scratch_free_array(c->scratch, c->params.n_kv_head);
    if (c->own_pool) kvb_pool_free(c->pool);
    if (c->ring_q)
        for (int32_t l = 0; l < c->params.n_layer; l++) kvb_free(c->ring_q[l]);
    kvb_free(c->ring_q); kvb_free(c->ring_n); kvb_free(c->ring_heads); kvb_free(c->reserved);
    kvb_free(c->streams); kvb_free(c->n_past); kvb_free(c->inv_freq); kvb_free(c->freq_factors); kvb_free(c->no_rope); kvb_free(c->sinks);
    kvb_free(c->inv_freq_swa); kvb_free(c->freq_factors_swa); kvb_free(c->window); kvb_free(c->layers);
    kvb_free(c->kv_src); kvb_free(c->last_reader); kvb_free(c->evict_pending); kvb_free(c->kvh);
    kvb_free(c->recon_ctx); kvb_free(c->recon_buf); kvb_free(c->gviews); kvb_free(c->gptrs);
    kvb_free(c);
}

void kvb_cache_reset(struct kvb_cache *c) {
    if (!c) return;
    const size_t n_streams = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    for (size_t i = 0; i < n_streams; i++) {
        kvb_stream_clear(&c->streams[i], c->pool);
    }
    kvb_recall_reset(c);
    kvb_state_release(c);
    for (int32_t l = 0; l < c->params.n_layer; l++) c->n_past[l] = 0;
    c->has_reserve = false;
    c->recon = false;
    init_budgets(c);
}

kvb_status kvb_cache_fork(struct kvb_cache *src, struct kvb_cache **out) {
    if (!src || !out) return kvb_fail(KVB_ERR_INVALID, "cache_fork: src and out must not be NULL");
    if (src->own_pool) return kvb_fail(KVB_ERR_INVALID, "cache_fork: the cache has a pool of its own; a fork needs one the caches share (kvb_cache_init with a pool)");
    if (src->recall) return kvb_fail(KVB_ERR_UNSUPPORTED, "cache_fork: a cache with recall (kv.recall.pages %d) cannot be forked: its cold tier is its own",
                                     (int)src->params.kv.recall.pages);
    if (src->has_reserve) return kvb_fail(KVB_ERR_INVALID, "cache_fork: the cache holds a reservation (kvb_cache_reserve) not yet used");
    for (int32_t l = 0; src->evict_pending && l < src->params.n_layer; l++)
        if (src->evict_pending[l])
            return kvb_fail(KVB_ERR_INVALID, "cache_fork: layer %d's readers (kv_source) have not run this step", (int)l);
    for (int32_t l = 0; l < src->params.n_layer; l++)
        if (src->ring_n[l] > 0 || prompt_open(src, l))
            return kvb_fail(KVB_ERR_INVALID, "cache_fork: layer %d has a %s prompt open (not yet compressed)", (int)l,
                            kvb_policy_name(src->params.kv.policy.id));
    struct kvb_cache *c;
    kvb_status st = kvb_cache_init(src->pool, &src->params, &c);
    if (st != KVB_OK) return st;
    const size_t n_streams = (size_t)src->params.n_layer * (size_t)src->params.n_kv_head;
    const int32_t B = src->geom.block_size;
    const size_t ns = (size_t)src->geom.n_state;
    for (size_t i = 0; i < n_streams; i++) {
        const struct kvb_stream *a = &src->streams[i];
        struct kvb_stream *b = &c->streams[i];
        if (kvb_stream_reserve(&c->geom, b, a->v.n_pages, (int64_t)a->n_runs + 1) != KVB_OK ||
            (a->qstat && !(b->qstat = kvb_malloc(sizeof(float) * a->qstat_words)))) {
            kvb_cache_free(c);
            return kvb_fail(KVB_ERR_NOMEM, "cache_fork: out of memory for slot metadata");
        }
        if (a->qstat) { /* the policy's query statistics go on from the same values */
            memcpy(b->qstat, a->qstat, sizeof(float) * a->qstat_words);
            b->qstat_words = a->qstat_words;
            b->qstat_g = a->qstat_g;
            b->qstat_n = a->qstat_n;
        }
    }
    for (size_t i = 0; i < n_streams; i++) { /* nothing below can fail but sharing the pages */
        const struct kvb_stream *a = &src->streams[i];
        struct kvb_stream *b = &c->streams[i];
        const size_t slots = (size_t)a->v.n_pages * (size_t)B;
        if (slots) memcpy(b->v.pos, a->v.pos, sizeof(int32_t) * slots);
        if (a->v.n) memcpy(b->v.order, a->v.order, sizeof(int32_t) * (size_t)a->v.n);
        if (a->v.n && ns) memcpy(b->v.state, a->v.state, sizeof(float) * (size_t)a->v.n * ns);
        if (a->n_free) memcpy(b->free_slots, a->free_slots, sizeof(int32_t) * (size_t)a->n_free);
        if (a->n_runs) memcpy(b->runs, a->runs, sizeof(struct kvb_run) * (size_t)a->n_runs);
        if (a->v.n_pages) {
            memcpy(b->pages, a->pages, sizeof(uint8_t *) * (size_t)a->v.n_pages);
            memcpy(b->v.page_live, a->v.page_live, sizeof(int32_t) * (size_t)a->v.n_pages);
        }
        b->v.n = a->v.n;
        b->v.n_pages = a->v.n_pages;
        b->v.budget = a->v.budget;
        b->v.target = a->v.target;
        b->v.prompt_end = a->v.prompt_end;
        b->n_free = a->n_free;
        b->n_runs = a->n_runs;
    }
    for (size_t i = 0; i < n_streams && st == KVB_OK; i++) {
        st = kvb_pool_share(c->pool, c->streams[i].pages, c->streams[i].v.n_pages);
        if (st != KVB_OK) { /* the streams before i hold their shares; the rest none */
            for (size_t r = i; r < n_streams; r++) c->streams[r].v.n_pages = 0, c->streams[r].n_free = 0, c->streams[r].v.n = 0;
            kvb_cache_free(c);
            return st;
        }
    }
    if ((st = kvb_state_fork(src, c)) != KVB_OK) { /* the recurrent state's pages: shared too */
        kvb_cache_free(c);
        return st;
    }
    kvb_state_mark_shared(src);
    for (size_t i = 0; i < n_streams; i++) {
        src->streams[i].cow = src->streams[i].v.n_pages > 0;
        c->streams[i].cow = c->streams[i].v.n_pages > 0;
    }
    memcpy(c->n_past, src->n_past, sizeof(int64_t) * (size_t)src->params.n_layer);
    c->pages_peak = src->pages_peak;
    *out = c;
    return KVB_OK;
}

void kvb_cache_get_params(const struct kvb_cache *c, struct kvb_cache_params *out) { *out = c->params; }
enum kvb_pos_mode kvb_cache_pos_mode(const struct kvb_cache *c) { return c->pos_mode; }

/* ------------------------------------------------------------------------ */
/* decode                                                                   */
/* ------------------------------------------------------------------------ */

static bool prompt_open(const struct kvb_cache *c, int32_t layer);
static void compress_layer(struct kvb_cache *c, int32_t l, struct kvb_threadpool *tp, bool preset);
static void combine_and_evict(struct kvb_cache *c, int32_t layer, struct kvb_threadpool *tp);

struct decode_job {
    struct kvb_cache *c;
    int32_t layer, n_head, G;
    const float *q, *k, *v;
    float *out;
    bool attend;
    int32_t src;  /* the layer whose streams it reads: its own, or a reader's source (kv_source) */
    bool defer;   /* a source with readers: its eviction waits for its last reader */
};

/* The queries of a step or chunk to a KVB_PF_QUERY_STATS policy (its view's qstat). */
static void feed_queries(struct kvb_cache *c, struct kvb_stream *s, const float *q, int32_t n_tok, int32_t G, size_t stride, int64_t pos0) {
    struct kvb_stream_view pv;
    kvb_cache_policy_view(c, s, &pv);
    c->policy.iface->on_queries(&c->policy, &pv, q, n_tok, G, stride, pos0);
}

/* Room for the query statistics of a KVB_PF_QUERY_STATS policy on a layer
 * whose queries come in G heads per KV head (zeroed when G changes); all or
 * nothing, before any change of the step. */
static kvb_status qstat_reserve(struct kvb_cache *c, int32_t layer, int32_t G) {
    if (!(c->policy.flags & KVB_PF_QUERY_STATS) || c->window[layer] || kvb_cache_is_reader(c, layer)) return KVB_OK;
    const size_t d = (size_t)c->params.head_dim, words = (size_t)(G + 1) * (d + d * d);
    if (words > KVB_QSTAT_MAX_WORDS) /* a d x d covariance per query head: 171 MB a layer for DeepSeek-V3's 128 of 576 */
        return kvb_fail(KVB_ERR_UNSUPPORTED, "cache: %s keeps a %d x %d query covariance for each of the %d query heads of a KV head: %zu MiB a "
                                             "stream on layer %d, over its 64 MiB limit (latent attention's one row for every head)",
                        c->policy.iface->name, (int)d, (int)d, (int)G, words * sizeof(float) >> 20, (int)layer);
    float *fresh[KVB_MAX_KV_HEADS] = {0};
    int32_t nf = 0;
    for (int32_t h = 0; h < c->kvh[layer]; h++) {
        const struct kvb_stream *s = kvb_cache_stream(c, layer, h);
        if (s->qstat && s->qstat_g == G) continue;
        if (!(fresh[h] = kvb_calloc(words, sizeof(float)))) {
            for (int32_t i = 0; i < h; i++) kvb_free(fresh[i]);
            return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for the query statistics of layer %d", (int)layer);
        }
        nf++;
    }
    for (int32_t h = 0; nf && h < c->kvh[layer]; h++) {
        if (!fresh[h]) continue;
        struct kvb_stream *s = kvb_cache_stream(c, layer, h);
        kvb_free(s->qstat);
        s->qstat = fresh[h];
        s->qstat_words = words;
        s->qstat_g = G;
        s->qstat_n = 0;
    }
    return KVB_OK;
}

static void decode_worker(int32_t ith, int32_t nth, void *arg) {
    struct decode_job *jb = arg;
    struct kvb_cache *c = jb->c;
    const int32_t H = c->kvh[jb->src], d = c->params.head_dim, dv = kvb_cache_dv(c);
    const bool reader = jb->src != jb->layer; /* a KV-shared layer: attention over its source's tokens, nothing else */
    const bool window = c->window[jb->src] > 0; /* the model's window, not the policy, bounds this layer */
    const bool policy_w = !reader && !window && (c->policy.flags & KVB_PF_DECODE_ATTN) && c->policy.iface->observe;
    const bool want_w = policy_w || c->observer;
    const bool evict = !reader && !jb->defer;
    for (int32_t h = ith; h < H; h += nth) {
        struct kvb_stream *s = kvb_cache_stream(c, jb->src, h);
        struct kvb_head_scratch *hs = kvb_head_scratch_at(c->scratch, h);
        const int32_t pos = (int32_t)c->n_past[jb->layer];
        if (!reader) kvb_attend_append(c, s, hs, jb->k ? jb->k + (size_t)h * d : NULL, jb->v ? jb->v + (size_t)h * d : NULL, pos);
        if (jb->attend && !reader && !window && s->qstat) feed_queries(c, s, jb->q + (size_t)h * jb->G * d, 1, jb->G, 0, pos);
        if (jb->attend) {
            kvb_attend_decode(c, s, hs, jb->q + (size_t)h * jb->G * d, jb->G, pos, jb->out + (size_t)h * jb->G * dv,
                          want_w ? kvb_head_scratch_col(hs) : NULL);
            if (c->observer) c->observer(c->observer_user, jb->layer, h, kvb_head_scratch_col(hs), s->v.n);
            if (policy_w) {
                struct kvb_stream_view pv;
                const int32_t pin = kvb_cache_policy_view(c, s, &pv);
                c->policy.iface->observe(&c->policy, &pv, kvb_head_scratch_col(hs) + pin, pv.n, false);
            }
            if (evict && !window && !c->policy.iface->combine) evict_stream(c, s); /* else after every head: combine_and_evict */
        }
        if (evict && window) evict_window(c, s, pos + 1);
    }
}

/* Whether attention of n_tok query tokens over a layer is worth waking the
 * pool: below about 64K multiply-adds a fork-join costs more than it saves
 * (measured: ppl on stories260K with -t 2 ran 30x slower than -t 1). */
static bool worth_threads(const struct kvb_cache *c, int32_t layer, int32_t n_tok, int32_t n_head) {
    if (kvb_cache_is_reader(c, layer)) layer = c->kv_src[layer]; /* its source's keys */
    const int64_t keys = (int64_t)kvb_cache_stream(c, layer, 0)->v.n + n_tok;
    return (int64_t)n_tok * n_head * keys * c->params.head_dim >= (1 << 16) && c->params.n_kv_head > 1;
}

static kvb_status check_kv_layer(const struct kvb_cache *c, int32_t layer, const char *what);
static void run_pending_eviction(struct kvb_cache *c, int32_t layer, struct kvb_threadpool *tp);
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
    for (int32_t l = 0; c->params.kv_heads && l < c->params.n_layer; l++)
        if (n_head % c->kvh[l])
            return kvb_fail(KVB_ERR_INVALID, "cache: n_head (%d) must be a multiple of layer %d's %d KV heads", (int)n_head, (int)l, (int)c->kvh[l]);
    if (n_head / c->min_kvh > KVB_CACHE_MAX_GROUP)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "cache: more than %d query heads per KV head", KVB_CACHE_MAX_GROUP);
    if (c->sinks && n_head != c->params.n_sink_heads)
        return kvb_fail(KVB_ERR_INVALID, "cache: n_head (%d) differs from the %d heads its sinks are for", (int)n_head, (int)c->params.n_sink_heads);
    return KVB_OK;
}

/* A latent cache (head_dim_v > 0) stores no V rows: v must be NULL. */
static kvb_status check_latent_v(const struct kvb_cache *c, const float *v, const char *what) {
    if (c->params.head_dim_v > 0 && v)
        return kvb_fail(KVB_ERR_INVALID, "%s: v must be NULL with head_dim_v %d (the value is the K row's last head_dim_v entries)", what,
                        (int)c->params.head_dim_v);
    return KVB_OK;
}

static kvb_status check_pos(const struct kvb_cache *c, int32_t layer, int64_t n_new) {
    if (c->n_past[layer] + n_new > INT32_MAX)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "cache: positions beyond 2^31-1 in layer %d", (int)layer);
    return KVB_OK;
}

kvb_status kvb_cache_decode(struct kvb_cache *c, int32_t layer, const float *q, int32_t n_head, const float *k,
                            const float *v, float *out, struct kvb_threadpool *tp) {
    kvb_status st = check_kv_layer(c, layer, "cache_decode");
    if (st != KVB_OK) return st;
    if ((st = check_heads(c, n_head)) != KVB_OK) return st;
    const bool reader = kvb_cache_is_reader(c, layer);
    if (!q || !out || (!reader && (!k || (!v && !c->params.head_dim_v))))
        return kvb_fail(KVB_ERR_INVALID, "cache_decode: q, %sout must not be NULL", reader ? "" : c->params.head_dim_v ? "k and " : "k, v and ");
    if ((st = check_latent_v(c, v, "cache_decode")) != KVB_OK) return st;
    if ((st = check_pos(c, layer, 1)) != KVB_OK) return st;
    if (reader && c->n_past[c->kv_src[layer]] != c->n_past[layer] + 1)
        return kvb_fail(KVB_ERR_INVALID, "cache_decode: layer %d reads layer %d (kv_source), which has not taken this token first", (int)layer,
                        (int)c->kv_src[layer]);
    const int32_t G = n_head / c->kvh[layer];
    if ((st = qstat_reserve(c, layer, G)) != KVB_OK) return st;
    run_pending_eviction(c, layer, tp); /* its readers did not run after its last step */
    if (prompt_open(c, layer)) { /* the prompt ended without kvb_cache_compress */
        if (c->policy.iface->budgets_global) kvb_cache_compress(c, tp); /* kvzip: its budgets span every layer */
        else compress_layer(c, layer, tp, false);
    }
    if ((st = prepare_layer(c, layer, 1, G)) != KVB_OK) return st;
    const int32_t src = reader ? c->kv_src[layer] : layer;
    const bool defer = !reader && c->last_reader && c->last_reader[layer] >= 0;
    struct decode_job jb = {c, layer, n_head, G, q, k, v, out, true, src, defer};
    kvb_threadpool_run(worth_threads(c, layer, 1, n_head) ? tp : NULL, decode_worker, &jb);
    c->n_past[layer]++;
    update_peak(c);
    if (defer) c->evict_pending[layer] = true;
    /* serial: one O(n) pick per stream costs less than waking the pool again */
    else if (!reader && c->policy.iface->combine && !c->window[layer]) combine_and_evict(c, layer, NULL);
    if (reader && c->last_reader[src] == layer) run_pending_eviction(c, src, NULL); /* the source's last reader has attended */
    return KVB_OK;
}

kvb_status kvb_cache_append(struct kvb_cache *c, int32_t layer, const float *k, const float *v) {
    kvb_status st = check_kv_layer(c, layer, "cache_append");
    if (st != KVB_OK) return st;
    if ((st = check_latent_v(c, v, "cache_append")) != KVB_OK) return st;
    if (c->policy.flags & KVB_PF_QUERY_STATS) /* its evidence is the queries, which this path never sees */
        return kvb_fail(KVB_ERR_UNSUPPORTED, "cache_append: policy %s scores keys by the statistics of the queries, which only "
                                             "kvb_cache_decode and kvb_cache_prefill see; it has no low-level path", c->policy.iface->name);
    if ((st = check_pos(c, layer, 1)) != KVB_OK) return st;
    if ((st = prepare_layer(c, layer, 1, 1)) != KVB_OK) return st;
    run_pending_eviction(c, layer, NULL);
    struct decode_job jb = {c, layer, c->kvh[layer], 1, NULL, k, v, NULL, false, layer, false};
    decode_worker(0, 1, &jb);
    c->n_past[layer]++;
    update_peak(c);
    return KVB_OK;
}

static kvb_status observe_common(struct kvb_cache *c, int32_t layer, int32_t head, const float *w, int32_t n, bool prefill) {
    kvb_status st = check_layer(c, layer);
    if (st != KVB_OK) return st;
    if (head < 0 || head >= c->kvh[layer])
        return kvb_fail(KVB_ERR_INVALID, "cache: head %d out of range 0..%d (layer %d)", (int)head, (int)c->kvh[layer] - 1, (int)layer);
    struct kvb_stream *s = kvb_cache_stream(c, layer, head);
    if (!w || n != s->v.n) return kvb_fail(KVB_ERR_INVALID, "cache_observe: row has %d weights, stream has %d slots", (int)n, (int)s->v.n);
    const struct kvb_policy_i *pi = c->policy.iface;
    if (c->window[layer]) return KVB_OK; /* the model's window bounds the layer: no evidence is kept */
    if (pi->observe && (pi->flags & (prefill ? KVB_PF_PREFILL_MASS : KVB_PF_DECODE_ATTN))) {
        struct kvb_stream_view pv;
        const int32_t pin = kvb_cache_policy_view(c, s, &pv);
        pi->observe(&c->policy, &pv, w + pin, pv.n, prefill); /* the pinned span keeps no evidence */
    }
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
    c->has_reserve = false;
    combine_and_evict(c, layer, NULL);
    update_peak(c);
}

/* ------------------------------------------------------------------------ */
/* prefill                                                                  */
/* ------------------------------------------------------------------------ */

struct prefill_job {
    struct kvb_cache *c;
    int32_t layer, n_tok, n_head, G;
    const float *q, *k, *v;
    float *out;
    bool mass; /* feed the chunk's column mass to the policy */
    int32_t src; /* the layer whose streams it reads (a reader's source, kv_source), else its own */
};

static void prefill_worker(int32_t ith, int32_t nth, void *arg) {
    struct prefill_job *jb = arg;
    struct kvb_cache *c = jb->c;
    const int32_t H = c->kvh[jb->src], d = c->params.head_dim, C = jb->n_tok;
    const int32_t obs_from = c->policy.obs_last > 0 ? KVB_MAX(0, C - c->policy.obs_last) : 0;
    const int64_t p0 = c->n_past[jb->layer];
    const bool reader = jb->src != jb->layer;
    for (int32_t h = ith; h < H; h += nth) {
        struct kvb_stream *s = kvb_cache_stream(c, jb->src, h);
        struct kvb_head_scratch *hs = kvb_head_scratch_at(c->scratch, h);
        const int32_t n_prev = reader ? s->v.n - C : s->v.n; /* a reader: the source's chunk is its last C slots (not yet evicted) */
        for (int32_t i = 0; i < C && !reader; i++)
            kvb_attend_append(c, s, hs, jb->k + ((size_t)i * H + h) * d, jb->v ? jb->v + ((size_t)i * H + h) * d : NULL, (int32_t)(p0 + i));
        if (!reader && !s->window && s->qstat && !c->recon) feed_queries(c, s, jb->q + (size_t)h * jb->G * d, C, jb->G, (size_t)jb->n_head * d, p0);
        if (jb->mass) memset(kvb_head_scratch_col(hs), 0, sizeof(float) * (size_t)s->v.n);
        kvb_attend_tokens(c, s, hs, h, jb->q, jb->n_head, jb->G, C, n_prev, p0, jb->out, obs_from, jb->mass ? kvb_head_scratch_col(hs) : NULL);
        if (jb->mass) {
            struct kvb_stream_view pv;
            const int32_t pin = kvb_cache_policy_view(c, s, &pv);
            c->policy.iface->observe(&c->policy, &pv, kvb_head_scratch_col(hs) + pin, pv.n, true);
        }
    }
}

struct layer_job {
    struct kvb_cache *c;
    int32_t layer;
};

static void evict_worker(int32_t ith, int32_t nth, void *arg) {
    struct layer_job *jb = arg;
    struct kvb_cache *c = jb->c;
    for (int32_t h = ith; h < c->kvh[jb->layer]; h += nth) {
        struct kvb_stream *s = kvb_cache_stream(c, jb->layer, h);
        if (s->window) evict_window(c, s, c->n_past[jb->layer]);
        else evict_stream(c, s);
    }
}

/* The policy's views of a layer's streams (each after its pinned span), for
 * the policy hooks that see a whole layer: views[h], pointed at by ptrs[h].
 * A hook that sets budgets writes them into the views (view_budgets_back). */
static int32_t layer_streams(struct kvb_cache *c, int32_t layer, struct kvb_stream_view *views, struct kvb_stream_view **ptrs) {
    for (int32_t h = 0; h < c->kvh[layer]; h++) {
        kvb_cache_policy_view(c, kvb_cache_stream(c, layer, h), &views[h]);
        ptrs[h] = &views[h];
    }
    return c->kvh[layer];
}

/* Layer-wide scores (tova's layer scope), then eviction of every stream
 * (over tp's threads; tp NULL: serially). */
static void combine_and_evict(struct kvb_cache *c, int32_t layer, struct kvb_threadpool *tp) {
    if (c->policy.iface->combine && !c->window[layer]) {
        struct kvb_stream_view views[KVB_MAX_KV_HEADS], *ptrs[KVB_MAX_KV_HEADS];
        int32_t H = layer_streams(c, layer, views, ptrs);
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
    float *r = kvb_malloc(sizeof(float) * (size_t)c->params.kv.policy.obs_window * (size_t)n_head * (size_t)c->params.head_dim);
    if (!r) return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for the observation window's queries (layer %d)", (int)layer);
    kvb_free(c->ring_q[layer]);
    c->ring_q[layer] = r;
    c->ring_heads[layer] = n_head;
    c->ring_n[layer] = 0;
    return KVB_OK;
}

/* Keeps the last obs_window of the recorded queries plus q's C tokens. */
static void ring_push(struct kvb_cache *c, int32_t layer, const float *q, int32_t C) {
    const int32_t W = c->params.kv.policy.obs_window;
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
    const size_t ns = (size_t)c->geom.n_state;
    for (int32_t h = 0; h < c->params.n_kv_head; h++) {
        struct kvb_stream *s = kvb_cache_stream(c, layer, h);
        s->v.prompt_end = -1;
        s->v.budget = c->params.kv.policy.prefill_budget;
        /* kvzip: earlier scores stand (its pass scores only the tokens read since) */
        if (ns && s->v.n > 0 && !(c->policy.iface->flags & KVB_PF_RECONSTRUCT)) memset(s->v.state, 0, sizeof(float) * (size_t)s->v.n * ns);
    }
    c->ring_n[layer] = 0;
}

/* The recorded queries (the last ring_n tokens appended) vote over the whole
 * stream: their column mass replaces the streams' votes. */
static void vote_worker(int32_t ith, int32_t nth, void *arg) {
    struct layer_job *jb = arg;
    struct kvb_cache *c = jb->c;
    const int32_t l = jb->layer, H = c->kvh[l], r = c->ring_n[l], n_head = c->ring_heads[l];
    const int64_t p0 = c->n_past[l] - r;
    const size_t ns = (size_t)c->geom.n_state;
    for (int32_t h = ith; h < H; h += nth) {
        struct kvb_stream *s = kvb_cache_stream(c, l, h);
        struct kvb_head_scratch *hs = kvb_head_scratch_at(c->scratch, h);
        if (s->v.n < r || s->v.pos[s->v.order[s->v.n - r]] != p0) continue; /* not the tokens recorded: keep the votes */
        memset(kvb_head_scratch_col(hs), 0, sizeof(float) * (size_t)s->v.n);
        kvb_attend_tokens(c, s, hs, h, c->ring_q[l], n_head, n_head / H, r, s->v.n - r, p0, NULL, 0, kvb_head_scratch_col(hs));
        memset(s->v.state, 0, sizeof(float) * (size_t)s->v.n * ns);
        struct kvb_stream_view pv;
        const int32_t pin = kvb_cache_policy_view(c, s, &pv);
        c->policy.iface->observe(&c->policy, &pv, kvb_head_scratch_col(hs) + pin, pv.n, true);
    }
}

/* A stream's compression budget: its target (kvb_cache_set_budget), or the
 * layer's base when budget_frac resolves it or no target is set. */
static int32_t stream_target(const struct kvb_policy_params *pp, const struct kvb_stream_view *s, int32_t base) {
    return pp->budget_frac > 0 || !s->target ? base : s->target;
}

/* Ends the open prompt of a layer: vote, budgets from the prompt length,
 * eviction, then the frozen prompt plus decode_budget. Cannot fail. */
/* A layer's compression budget: the policy's, or budget_frac of its prompt
 * after the pinned span. */
static int32_t layer_base(const struct kvb_cache *c, int32_t l) {
    const struct kvb_policy_params *pp = &c->params.kv.policy;
    const int64_t prompt = c->n_past[l];
    int32_t base = pp->budget;
    if (pp->budget_frac > 0) {
        double b = floor((double)pp->budget_frac * (double)(prompt - KVB_MIN(prompt, (int64_t)c->params.kv.keep)));
        base = KVB_MAX((int32_t)KVB_MIN(b, (double)INT32_MAX), pp->n_sink + 1);
    }
    return base;
}

/* Ends the open prompt of a layer: vote, budgets from the prompt length
 * (unless preset: budgets_global set them), eviction, then the frozen
 * prompt plus decode_budget. Cannot fail. */
static void compress_layer(struct kvb_cache *c, int32_t l, struct kvb_threadpool *tp, bool preset) {
    c->has_reserve = false;
    const struct kvb_policy_params *pp = &c->params.kv.policy;
    struct kvb_stream_view views[KVB_MAX_KV_HEADS], *ptrs[KVB_MAX_KV_HEADS];
    struct layer_job jb = {c, l};
    if (c->ring_n[l] > 0) kvb_threadpool_run(tp, vote_worker, &jb);
    const int32_t H = layer_streams(c, l, views, ptrs); /* the prompt after the pinned span is what compresses */
    const int64_t prompt = c->n_past[l];
    const int32_t base = layer_base(c, l);
    int32_t P = 0;
    for (int32_t h = 0; h < H && !preset; h++) {
        ptrs[h]->budget = stream_target(pp, ptrs[h], base);
        P = KVB_MAX(P, ptrs[h]->n);
    }
    if (c->policy.iface->budgets && !preset) { /* the layer's place among those that hold K/V (a hybrid's recurrent layers and
                                     * Gemma 4's readers hold none): pyramidkv's slope spans them only */
        int32_t at = 0, n_kv = 0;
        for (int32_t i = 0; i < c->params.n_layer; i++) {
            if (!kvb_cache_holds_kv(c, i)) continue;
            at += i < l;
            n_kv++;
        }
        c->policy.iface->budgets(&c->policy, ptrs, H, at, n_kv, base, P);
    }
    for (int32_t h = 0; h < H && !preset; h++) kvb_cache_stream(c, l, h)->v.budget = views[h].budget;
    kvb_threadpool_run(tp, evict_worker, &jb);
    const bool scores_go_on = c->policy.iface->flags & KVB_PF_COMPRESS_OPTIONAL; /* expected-attention: no frozen prompt */
    for (int32_t h = 0; h < H; h++) {
        struct kvb_stream *st = kvb_cache_stream(c, l, h);
        struct kvb_stream_view *s = &st->v;
        const int64_t dec = pp->decode_budget ? pp->decode_budget : stream_target(pp, s, base);
        s->prompt_end = (int32_t)prompt;
        s->budget = scores_go_on ? views[h].budget : (int32_t)KVB_MIN((int64_t)s->n - kvb_cache_pinned(c, st) + dec, (int64_t)INT32_MAX);
    }
    c->ring_n[l] = 0;
}

static bool prompt_open(const struct kvb_cache *c, int32_t layer) {
    return (c->policy.flags & KVB_PF_COMPRESS) && !c->window[layer] && !kvb_cache_is_recurrent(c, layer) && kvb_cache_stream(c, layer, 0)->v.prompt_end < 0;
}

bool kvb_cache_prompt_pending(const struct kvb_cache *c) {
    for (int32_t l = 0; c && l < c->params.n_layer; l++)
        if (kvb_cache_holds_kv(c, l) && prompt_open(c, l)) return true;
    return false;
}

kvb_status kvb_cache_prefill(struct kvb_cache *c, int32_t layer, int32_t n_tok, const float *q, int32_t n_head,
                             const float *k, const float *v, float *out, struct kvb_threadpool *tp) {
    kvb_status st = check_kv_layer(c, layer, "cache_prefill");
    if (st != KVB_OK) return st;
    if ((st = check_heads(c, n_head)) != KVB_OK) return st;
    if (n_tok < 1 || n_tok > (1 << 20)) return kvb_fail(KVB_ERR_INVALID, "cache_prefill: n_tok must be in 1..1048576, got %d", (int)n_tok);
    const bool reader = kvb_cache_is_reader(c, layer);
    if (!q || !out || (!reader && (!k || (!v && !c->params.head_dim_v))))
        return kvb_fail(KVB_ERR_INVALID, "cache_prefill: q, %sout must not be NULL", reader ? "" : c->params.head_dim_v ? "k and " : "k, v and ");
    if ((st = check_latent_v(c, v, "cache_prefill")) != KVB_OK) return st;
    if ((st = check_pos(c, layer, n_tok)) != KVB_OK) return st;
    const int32_t src = reader ? c->kv_src[layer] : layer;
    if (reader && (c->n_past[src] != c->n_past[layer] + n_tok || kvb_cache_stream(c, src, 0)->v.n < n_tok))
        return kvb_fail(KVB_ERR_INVALID, "cache_prefill: layer %d reads layer %d (kv_source), which has not taken these %d tokens first", (int)layer,
                        (int)src, (int)n_tok);
    const struct kvb_policy_i *pi = c->policy.iface;
    const bool recon = c->recon; /* kvzip's pass: score, no vote, no eviction (its rows leave at recon_end) */
    const bool compress = !reader && (c->policy.flags & KVB_PF_COMPRESS) && !c->window[layer] && !recon; /* a window layer: the model's window only */
    const bool exact = compress && c->params.kv.policy.prefill_budget == 0 && (c->policy.flags & KVB_PF_PREFILL_MASS); /* votes recorded (not kvzip's) */
    const bool defer = !reader && c->last_reader && c->last_reader[layer] >= 0 && !recon;
    const int32_t G = n_head / c->kvh[layer];
    if ((st = qstat_reserve(c, layer, G)) != KVB_OK) return st;
    run_pending_eviction(c, layer, tp); /* its readers did not run after its last step */
    if (exact && (st = ring_reserve(c, layer, n_head)) != KVB_OK) return st;
    if (recon && !reader && (st = recon_reserve(c, layer, n_tok)) != KVB_OK) return st;
    if ((st = prepare_layer(c, layer, n_tok, G)) != KVB_OK) return st;
    if (compress && !prompt_open(c, layer)) open_prompt(c, layer);
    struct prefill_job jb = {c, layer, n_tok, n_head, G, q, k, v, out,
                             !reader && !c->window[layer] && !exact && !recon && pi->observe && (c->policy.flags & KVB_PF_PREFILL_MASS), src};
    kvb_threadpool_run(worth_threads(c, layer, n_tok, n_head) ? tp : NULL, prefill_worker, &jb);
    if (recon && !reader) kvb_threadpool_run(tp, recon_worker, &jb);
    if (exact) ring_push(c, layer, q, n_tok);
    c->n_past[layer] += n_tok;
    update_peak(c); /* peak includes the whole chunk before eviction */
    if (defer) c->evict_pending[layer] = true;
    else if (!reader && !recon) combine_and_evict(c, layer, tp);
    if (reader && c->last_reader[src] == layer) run_pending_eviction(c, src, tp); /* the source's last reader has attended */
    return KVB_OK;
}

/* budgets_global (kvzip): every open layer's streams at once, each with the
 * budget its layer would give it; the policy rewrites them. */
static void global_budgets(struct kvb_cache *c) {
    int32_t n = 0;
    for (int32_t l = 0; l < c->params.n_layer; l++) {
        if (!prompt_open(c, l)) continue;
        const int32_t base = layer_base(c, l), H = layer_streams(c, l, c->gviews + n, c->gptrs + n);
        for (int32_t h = 0; h < H; h++) c->gviews[n + h].budget = stream_target(&c->params.kv.policy, &c->gviews[n + h], base);
        n += H;
    }
    c->policy.iface->budgets_global(&c->policy, c->gptrs, n);
    n = 0;
    for (int32_t l = 0; l < c->params.n_layer; l++) {
        if (!prompt_open(c, l)) continue;
        for (int32_t h = 0; h < c->kvh[l]; h++) kvb_cache_stream(c, l, h)->v.budget = c->gviews[n++].budget;
    }
}

void kvb_cache_compress(struct kvb_cache *c, struct kvb_threadpool *tp) {
    if (!c || !(c->policy.flags & KVB_PF_COMPRESS)) return;
    const bool preset = c->policy.iface->budgets_global && c->gviews;
    if (preset) global_budgets(c);
    for (int32_t l = 0; l < c->params.n_layer; l++)
        if (prompt_open(c, l)) compress_layer(c, l, tp, preset);
    kvb_free(c->recon_buf); /* kvzip: the scoring's room, until the next prompt */
    c->recon_buf = NULL;
    c->recon_cap = 0;
    update_peak(c);
}

/* ---- kvzip's reconstruction pass ---- */

kvb_status kvb_cache_recon_begin(struct kvb_cache *c, int64_t lo, int64_t hi) {
    if (!c) return kvb_fail(KVB_ERR_INVALID, "cache is NULL");
    if (!(c->policy.iface->flags & KVB_PF_RECONSTRUCT) && !c->pscore)
        return kvb_fail(KVB_ERR_INVALID, "recon_begin: policy %s scores no reconstruction (kvzip does; any cache while it parks)",
                        kvb_policy_name(c->params.kv.policy.id));
    if (c->recon) return kvb_fail(KVB_ERR_INVALID, "recon_begin: a reconstruction pass is already begun");
    for (int32_t l = 0; l < c->params.n_layer; l++)
        if (kvb_cache_holds_kv(c, l) && c->n_past[l] != c->n_past[0])
            return kvb_fail(KVB_ERR_INVALID, "recon_begin: layers have read different numbers of tokens");
    if (lo < 0 || hi <= lo || hi > c->n_past[0] || hi - lo > KVB_KVZIP_CHUNK)
        return kvb_fail(KVB_ERR_INVALID, "recon_begin: positions [%lld, %lld) are not a chunk of at most %d read tokens (%lld read)", (long long)lo,
                        (long long)hi, KVB_KVZIP_CHUNK, (long long)c->n_past[0]);
    for (int32_t l = 0; l < c->params.n_layer; l++) c->recon_ctx[l] = c->n_past[l];
    c->recon_lo = lo;
    c->recon_hi = hi;
    c->recon = true;
    return KVB_OK;
}

void kvb_cache_recon_end(struct kvb_cache *c) {
    if (!c || !c->recon) return;
    c->has_reserve = false;
    for (int32_t l = 0; l < c->params.n_layer; l++) {
        for (int32_t h = 0; h < c->kvh[l] && kvb_cache_holds_kv(c, l); h++) {
            struct kvb_stream *s = kvb_cache_stream(c, l, h);
            int32_t k = 0;
            for (int32_t j = s->v.n; j > 0 && s->v.pos[s->v.order[j - 1]] >= c->recon_ctx[l]; j--) k++;
            kvb_stream_pop(&c->geom, s, k); /* its pages stay, as holes, for the next pass or the next tokens */
        }
        c->n_past[l] = c->recon_ctx[l];
    }
    c->recon = false;
}

/* ---- compress-on-park ---- */

kvb_status kvb_cache_park_begin(struct kvb_cache *c) {
    if (!c) return kvb_fail(KVB_ERR_INVALID, "cache is NULL");
    if (c->recon || c->pscore) return kvb_fail(KVB_ERR_INVALID, "park_begin: a reconstruction pass or a park is already begun");
    for (int32_t l = 0; l < c->params.n_layer; l++)
        if (prompt_open(c, l) || c->ring_n[l] > 0)
            return kvb_fail(KVB_ERR_INVALID, "park_begin: layer %d has a %s prompt open (not yet compressed)", (int)l, kvb_policy_name(c->params.kv.policy.id));
    const struct kvb_policy keep = c->policy;
    c->policy.iface = &kvb_policy_kvzip; /* the refusals of a kvzip cache, whatever the policy */
    kvb_status st = recon_supported(c);
    c->policy = keep;
    if (st != KVB_OK) return st;
    const size_t n_streams = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    if (!c->recon_ctx && !(c->recon_ctx = kvb_calloc((size_t)c->params.n_layer, sizeof(int64_t))))
        return kvb_fail(KVB_ERR_NOMEM, "park_begin: out of memory");
    float **ps = kvb_calloc(n_streams, sizeof(float *));
    bool ok = ps != NULL;
    for (size_t i = 0; ok && i < n_streams; i++) ok = (ps[i] = kvb_calloc((size_t)KVB_MAX(c->streams[i].v.n, 1), sizeof(float))) != NULL;
    if (!ok) {
        for (size_t i = 0; ps && i < n_streams; i++) kvb_free(ps[i]);
        kvb_free(ps);
        return kvb_fail(KVB_ERR_NOMEM, "park_begin: out of memory for the scores");
    }
    c->pscore = ps;
    return KVB_OK;
}

kvb_status kvb_cache_park_end(struct kvb_cache *c, double keep) {
    if (!c || !c->pscore) return kvb_fail(KVB_ERR_INVALID, "park_end: no park begun");
    kvb_cache_recon_end(c);
    const size_t n_streams = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    kvb_status st = KVB_OK;
    if (keep > 0 && keep < 1) {
        /* each stream's view of its candidates (after the pinned span and the sinks) over its scores */
        struct kvb_stream_view *v = kvb_calloc(n_streams, sizeof *v), **pv = kvb_calloc(n_streams, sizeof *pv);
        int32_t *which = kvb_calloc(n_streams, sizeof(int32_t));
        if (!v || !pv || !which) st = kvb_fail(KVB_ERR_NOMEM, "park_end: out of memory (nothing dropped)");
        int64_t all = 0, held = 0;
        int32_t n = 0;
        for (size_t i = 0; st == KVB_OK && i < n_streams; i++) {
            struct kvb_stream *s = &c->streams[i];
            if (s->no_kv || s->window || s->v.n == 0) continue;
            const int32_t pin = kvb_cache_pinned(c, s);
            v[n] = s->v;
            v[n].n = s->v.n - pin;
            v[n].order = s->v.order + pin;
            v[n].state = c->pscore[i] + pin;
            which[n] = (int32_t)i;
            all += s->v.n;
            held += pin + KVB_MIN(c->policy.params.n_sink, v[n].n);
            pv[n] = &v[n];
            n++;
        }
        if (st == KVB_OK && n > 0) {
            const int64_t total = KVB_MAX((int64_t)0, (int64_t)floor(keep * (double)all) - held);
            kvb_global_top_budgets(pv, n, c->policy.params.n_sink, total);
            for (int32_t i = 0; i < n; i++) {
                struct kvb_stream *s = &c->streams[which[i]];
                const int32_t over = v[i].n - v[i].budget, pin = kvb_cache_pinned(c, s);
                if (over <= 0) continue;
                int32_t k = kvb_pick_lowest(&v[i], v[i].state, KVB_MIN(c->policy.params.n_sink, v[i].n), v[i].n, over, s->victims);
                for (int32_t j = 0; j < k; j++) s->victims[j] += pin;
                k = kvb_stream_sort_victims(s->victims, k);
                kvb_recall_evicted(c, s, s->victims, k); /* recall: to the cold tier first, as any eviction */
                kvb_stream_remove(&c->geom, s, c->pool, s->victims, k);
            }
        }
        kvb_free(v);
        kvb_free(pv);
        kvb_free(which);
    }
    for (size_t i = 0; i < n_streams; i++) kvb_free(c->pscore[i]);
    kvb_free(c->pscore);
    c->pscore = NULL;
    kvb_free(c->recon_buf);
    c->recon_buf = NULL;
    c->recon_cap = 0;
    c->has_reserve = false;
    update_peak(c);
    return st;
}

/* The chunk [recon_lo, recon_hi) in a stream's logical slots. */
static int32_t first_at(const struct kvb_stream *s, int64_t pos) {
    int32_t lo = 0, hi = s->v.n;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (s->v.pos[s->v.order[mid]] < pos) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void recon_worker(int32_t ith, int32_t nth, void *arg) {
    const struct prefill_job *jb = arg;
    struct kvb_cache *c = jb->c;
    const int32_t H = c->kvh[jb->layer], C = jb->n_tok;
    const int64_t p0 = c->n_past[jb->layer];
    for (int32_t h = ith; h < H; h += nth) {
        struct kvb_stream *s = kvb_cache_stream(c, jb->layer, h);
        if (s->window) continue; /* the model's window bounds it, no policy: nothing to score */
        const size_t per = c->recon_cap / (size_t)H;
        float *score = c->pscore ? c->pscore[kvb_cache_stream_index(c, s)] : s->v.state; /* parking: its own scores */
        kvb_attend_recon_score(c, s, kvb_head_scratch_at(c->scratch, h), h, jb->q, jb->n_head, jb->G, C, s->v.n - C, p0,
                               c->params.kv.policy.n_sink, first_at(s, c->recon_lo), first_at(s, c->recon_hi), first_at(s, c->recon_ctx[jb->layer]),
                               c->recon_buf + per * (size_t)h, score, c->pscore ? 1 : (size_t)c->geom.n_state);
    }
}

/* Room for the scoring of n_tok more pass tokens on a layer: the keys a
 * pass's token sees (the sinks, its chunk of at most KVB_KVZIP_CHUNK, the
 * pass's own of at most KVB_KVZIP_PROMPT_MAX + KVB_KVZIP_CHUNK; never more
 * than the stream's n + n_tok) and as many logits, per stream: bounded
 * whatever the context's length. */
static kvb_status recon_reserve(struct kvb_cache *c, int32_t layer, int32_t n_tok) {
    int64_t K = 0;
    for (int32_t h = 0; h < c->kvh[layer]; h++) K = KVB_MAX(K, (int64_t)kvb_cache_stream(c, layer, h)->v.n + n_tok);
    K = KVB_MIN(K, (int64_t)c->params.kv.policy.n_sink + 2 * KVB_KVZIP_CHUNK + KVB_KVZIP_PROMPT_MAX);
    const size_t need = (size_t)c->kvh[layer] * (size_t)K * ((size_t)c->params.head_dim + 1);
    if (need <= c->recon_cap) return KVB_OK;
    float *b = kvb_malloc(sizeof(float) * need);
    if (!b) return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for kvzip's reconstruction scores (layer %d)", (int)layer);
    kvb_free(c->recon_buf);
    c->recon_buf = b;
    c->recon_cap = need;
    return KVB_OK;
}

/* ------------------------------------------------------------------------ */
/* budgets, introspection, stats                                            */
/* ------------------------------------------------------------------------ */

kvb_status kvb_cache_set_budget(struct kvb_cache *c, int32_t layer, int32_t head, int32_t tokens) {
    if (!c) return kvb_fail(KVB_ERR_INVALID, "cache is NULL");
    if (layer < -1 || layer >= c->params.n_layer) return kvb_fail(KVB_ERR_INVALID, "set_budget: layer %d out of range", (int)layer);
    if (head < -1 || head >= c->params.n_kv_head) return kvb_fail(KVB_ERR_INVALID, "set_budget: head %d out of range", (int)head);
    if (tokens < 0) return kvb_fail(KVB_ERR_INVALID, "set_budget: tokens must be >= 0, got %d", (int)tokens);
    if (tokens != 0 && tokens <= c->params.kv.policy.n_sink)
        return kvb_fail(KVB_ERR_INVALID, "set_budget: %d tokens do not exceed n_sink (%d)", (int)tokens, (int)c->params.kv.policy.n_sink);
    if (tokens == 0 && !(c->policy.flags & KVB_PF_NEVER_EVICT))
        return kvb_fail(KVB_ERR_INVALID, "set_budget: policy %s needs a budget > 0", kvb_policy_name(c->params.kv.policy.id));
    if (layer >= 0 && c->window[layer])
        return kvb_fail(KVB_ERR_INVALID, "set_budget: layer %d is a sliding-window layer: the model's window (%d) bounds it", (int)layer,
                        (int)c->window[layer]);
    const bool compress = c->policy.flags & KVB_PF_COMPRESS;
    /* a stream that will shrink may compact: the pages it shares become its own first */
    int32_t *list = NULL;
    int64_t n = 0, cap = 0;
    kvb_status st = KVB_OK;
    for (int32_t l = 0; l < c->params.n_layer && st == KVB_OK; l++)
        for (int32_t h = 0; h < c->params.n_kv_head && st == KVB_OK; h++) {
            const struct kvb_stream *s = kvb_cache_stream(c, l, h);
            if ((layer < 0 || l == layer) && (head < 0 || h == head) && !c->window[l] && s->cow && tokens && s->v.n - kvb_cache_pinned(c, s) > tokens)
                st = cow_collect(c, (size_t)l * c->params.n_kv_head + h, 0, true, &list, &cap, &n);
        }
    uint8_t **fresh = n > 0 && st == KVB_OK ? kvb_malloc(sizeof(uint8_t *) * (size_t)n) : NULL;
    if (n > 0 && st == KVB_OK) st = !fresh ? kvb_fail(KVB_ERR_NOMEM, "set_budget: out of memory") : kvb_pool_take(c->pool, n, fresh);
    if (st == KVB_OK) cow_swap(c, list, n, fresh);
    kvb_free(fresh);
    kvb_free(list);
    if (st != KVB_OK) return st;
    for (int32_t l = 0; l < c->params.n_layer; l++)
        for (int32_t h = 0; h < c->params.n_kv_head; h++)
            if ((layer < 0 || l == layer) && (head < 0 || h == head) && !c->window[l]) {
                struct kvb_stream *s = kvb_cache_stream(c, l, h);
                s->v.target = tokens;
                /* an open snapkv-family prompt keeps prefill_budget until its compress */
                if (!compress || s->v.prompt_end >= 0) s->v.budget = tokens;
            }
    return KVB_OK;
}

static bool stream_ok(const struct kvb_cache *c, int32_t layer, int32_t head) {
    return c && layer >= 0 && layer < c->params.n_layer && head >= 0 && head < c->params.n_kv_head;
}

int32_t kvb_cache_budget(const struct kvb_cache *c, int32_t layer, int32_t head) {
    return stream_ok(c, layer, head) ? kvb_cache_stream(c, layer, head)->v.budget : -1;
}

int32_t kvb_cache_n_slots(const struct kvb_cache *c, int32_t layer, int32_t head) {
    return stream_ok(c, layer, head) ? kvb_cache_stream(c, layer, head)->v.n : -1;
}

int32_t kvb_cache_recalled(const struct kvb_cache *c, int32_t layer, int32_t head, int32_t *pos, int32_t max) {
    if (!stream_ok(c, layer, head)) return -1;
    const struct kvb_recall_stream *r = kvb_recall_area(c, kvb_cache_stream(c, layer, head));
    if (!r) return 0;
    for (int32_t j = 0; j < r->n && j < max && pos; j++) pos[j] = r->pos[r->order[j]];
    return r->n;
}

kvb_status kvb_cache_set_recall(struct kvb_cache *c, bool on) {
    if (!c) return kvb_fail(KVB_ERR_INVALID, "cache is NULL");
    if (!c->recall) return kvb_fail(KVB_ERR_INVALID, "set_recall: the cache was made without recall (recall.pages 0)");
    c->recall_paused = !on;
    if (on) /* choose afresh at the next attention */
        for (size_t i = 0; i < (size_t)c->params.n_layer * (size_t)c->params.n_kv_head; i++) c->recall[i].since = 0;
    return KVB_OK;
}

kvb_status kvb_cache_set_cold_dir(struct kvb_cache *c, const char *dir) {
    if (!c) return kvb_fail(KVB_ERR_INVALID, "cache is NULL");
    if (!c->recall) return kvb_fail(KVB_ERR_INVALID, "set_cold_dir: the cache was made without recall (recall.pages 0)");
    return kvb_cold_set_dir(c->cold, dir);
}

int64_t kvb_cache_n_past(const struct kvb_cache *c, int32_t layer) {
    return c && layer >= 0 && layer < c->params.n_layer ? c->n_past[layer] : -1;
}

kvb_status kvb_cache_slot_info(const struct kvb_cache *c, int32_t layer, int32_t head, int32_t j, struct kvb_slot_info *o) {
    if (!stream_ok(c, layer, head) || !o) return kvb_fail(KVB_ERR_INVALID, "slot_info: bad cache, layer or head");
    const struct kvb_stream *s = kvb_cache_stream(c, layer, head);
    if (j < 0 || j >= s->v.n) return kvb_fail(KVB_ERR_INVALID, "slot_info: slot %d out of range 0..%d", (int)j, (int)s->v.n - 1);
    int32_t slot = s->v.order[j];
    o->pos_original = s->v.pos[slot];
    o->pos_cache = c->pos_mode == KVB_POS_CONTIGUOUS ? j : s->v.pos[slot];
    o->score = c->geom.n_state ? s->v.state[(size_t)j * c->geom.n_state] : 0.0f;
    o->page = slot >> c->geom.block_shift;
    return KVB_OK;
}

kvb_status kvb_cache_read_slot(const struct kvb_cache *c, int32_t layer, int32_t head, int32_t j, float *k, float *v) {
    if (!stream_ok(c, layer, head)) return kvb_fail(KVB_ERR_INVALID, "read_slot: bad cache, layer or head");
    const struct kvb_stream *s = kvb_cache_stream(c, layer, head);
    if (j < 0 || j >= s->v.n) return kvb_fail(KVB_ERR_INVALID, "read_slot: slot %d out of range 0..%d", (int)j, (int)s->v.n - 1);
    kvb_attend_read_slot(c, s, j, k, v);
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
        if (s->no_kv) continue; /* no K/V: its state is counted below */
        o->pages_in_use += s->v.n_pages;
        o->slots += s->v.n;
        o->slots_max = KVB_MAX(o->slots_max, s->v.n);
        o->slots_min = KVB_MIN(o->slots_min, s->v.n);
        meta += kvb_stream_meta_bytes(&c->geom, s);
        o->query_stats_bytes += s->qstat_words * sizeof(float);
        if (s->window) {
            o->window_slots += s->v.n;
            o->window_pages += s->v.n_pages;
        }
    }
    for (int32_t l = 0; l < c->params.n_layer; l++) o->window_layers += c->window[l] > 0 && kvb_cache_holds_kv(c, l); /* a reader holds none */
    o->state_layers = c->n_rec;
    o->state_pages = kvb_state_pages_held(c);
    o->state_bytes = (size_t)o->state_pages * pb;
    o->pages_in_use += o->state_pages;
    if (o->slots_min == INT32_MAX) o->slots_min = 0;
    const int64_t area = kvb_recall_pages_held(c);
    o->pages_in_use += area;
    o->recall_bytes = (size_t)area * pb;
    meta += kvb_recall_meta_bytes(c);
    if (c->recall) {
        struct kvb_cold_counts cc;
        kvb_cold_counts(c->cold, &cc);
        o->cold_pages = cc.mem_pages + cc.file_pages;
        o->cold_mem_bytes = cc.mem_bytes;
        o->cold_file_bytes = cc.file_bytes;
        o->cold_dropped_pages = cc.dropped_pages;
        int64_t sns = 0, lns = 0;
        for (size_t i = 0; i < n_streams; i++) {
            const struct kvb_recall_stream *r = &c->recall[i];
            o->cold_staged_tokens += r->n_stage;
            o->cold_dropped_pages += r->lost;
            o->recall_scorings += r->scorings;
            o->recall_loads += r->loads;
            sns += r->score_ns;
            lns += r->load_ns;
        }
        o->recall_score_s = (double)sns * 1e-9;
        o->recall_load_s = (double)lns * 1e-9;
    }
    o->bytes_used = (size_t)o->pages_in_use * pb;
    o->bytes_reserved = o->bytes_used + meta;
    o->bytes_peak = (size_t)KVB_MAX(c->pages_peak, o->pages_in_use) * pb;
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(c->pool, &ps);
    o->pages_free = ps.pages_free;
}

/* ------------------------------------------------------------------------ */
/* recurrent layers (state.c holds their pages)                             */
/* ------------------------------------------------------------------------ */

static kvb_status check_kv_layer(const struct kvb_cache *c, int32_t layer, const char *what) {
    kvb_status st = check_layer(c, layer);
    if (st == KVB_OK && kvb_cache_is_recurrent(c, layer))
        return kvb_fail(KVB_ERR_INVALID, "%s: layer %d is recurrent: it keeps a state (kvb_cache_state), no K/V", what, (int)layer);
    if (st == KVB_OK && kvb_cache_is_reader(c, layer) && !strcmp(what, "cache_append"))
        return kvb_fail(KVB_ERR_INVALID, "%s: layer %d reads layer %d's K/V (kv_source): nothing is appended to it", what, (int)layer, (int)c->kv_src[layer]);
    return st;
}

/* A source's eviction that waited for its readers (kv_source): now. */
static void run_pending_eviction(struct kvb_cache *c, int32_t layer, struct kvb_threadpool *tp) {
    if (!c->evict_pending || !c->evict_pending[layer]) return;
    c->evict_pending[layer] = false;
    combine_and_evict(c, layer, tp);
    update_peak(c);
}

int64_t kvb_cache_state_pages(const struct kvb_cache_params *p) {
    if (!p || !p->recurrent) return 0;
    const int64_t per = kvb_state_layer_pages(p, kvb_cache_page_bytes(p));
    if (per <= 0) return per;
    int64_t n = 0;
    for (int32_t l = 0; l < p->n_layer; l++) n += p->recurrent[l] != 0;
    return n * per;
}

kvb_status kvb_cache_state(struct kvb_cache *c, int32_t layer, int32_t n_tok, float *const **rows) {
    kvb_status st = check_layer(c, layer);
    if (st != KVB_OK) return st;
    if (!rows) return kvb_fail(KVB_ERR_INVALID, "cache_state: rows must not be NULL");
    if (!kvb_cache_is_recurrent(c, layer)) return kvb_fail(KVB_ERR_INVALID, "cache_state: layer %d is not recurrent", (int)layer);
    if (n_tok < 1 || n_tok > (1 << 20)) return kvb_fail(KVB_ERR_INVALID, "cache_state: n_tok must be in 1..1048576, got %d", (int)n_tok);
    if ((st = check_pos(c, layer, n_tok)) != KVB_OK) return st;
    if ((st = kvb_state_prepare(c)) != KVB_OK) return st;
    c->has_reserve = c->state_reserved = false; /* what follows writes */
    *rows = kvb_state_layer_rows(c, layer);
    c->n_past[layer] += n_tok;
    update_peak(c);
    return KVB_OK;
}

/* ------------------------------------------------------------------------ */
/* hooks for cache_io.c (restore)                                           */
/* ------------------------------------------------------------------------ */

void kvb_cache_note_peak(struct kvb_cache *c) { update_peak(c); }

/*
 * batch.c — many sequences in one forward pass (continuous batching with
 * chunked prefill), each with its own cache and sampler, every cache on one
 * page pool.
 *
 * A step: (1) rows — every decoding sequence's pending token first (rows
 * [0, n_dec), one kvb_matmul_decode per weight for all of them), then the
 * prompts in admission order, a chunk each while step_tokens lasts (a chunk
 * never splits below `chunk`, so a prompt is cut where a lone context cuts
 * it and the numbers match); (2) reserve — kvb_cache_reserve for every
 * sequence of the step, undone for all if one cannot get its pages, so a
 * failed step changes no cache; (3) kvb_forward; (4) per sequence: a prompt
 * that ended compresses (kvb_cache_compress) and samples, a decode samples;
 * a sequence ends at EOS, max_tokens or, under full, n_ctx.
 *
 * Stall-free steps (step_target_ms / step_target_x, issue 37): a step that
 * carries a 256-token chunk pauses every decoder for the whole chunk (p99
 * inter-token gap 24x the median under 16 clients). With a target, a step
 * that has decode rows takes prompt rows only while its predicted time
 * stays under the target, as Sarathi-Serve does. The prediction is a fit
 * of the batch's own recent steps, t = a + r * R over all R rows of a step
 * (kvb_step_cost: exponentially weighted least squares, pure, tested
 * alone), so it follows the machine, the thread count and the load. In one
 * pass a decode row costs about what a prompt row does (measured: 16
 * decoders alone 220 ms, with 64 prompt rows 667 ms, 1 with 511 3,954 ms;
 * one line a = 105, r = 7.2 within 10%), so the decode-only step of n
 * decoders is a + r n, and step_target_x sets the target as a multiple of
 * that. A fit over prompt rows alone (the first version) took the
 * decoders into its intercept, and was wrong whenever their number changed,
 * as it does when a burst of prompts becomes decoders. A step without
 * decode rows stalls nobody and fills step_tokens as
 * before. Progress: prompts are served oldest first, and the oldest always
 * gets prompt_min_rows (or a whole chunk if it may not be cut), so a prompt
 * waits at most for the ones ahead of it, each read at >= prompt_min_rows a
 * step; giving every waiting prompt a minimum instead would make the pause
 * grow with the queue, which is what this removes.
 * The gap users feel (prompt_step_share, issue 53): under a steady queue
 * of prompts every step took its budget of prompt rows, so every gap was
 * the target's (then 3.5x by serve's default) and the median gap that many
 * decode steps. With a share,
 * the batch counts the decoders of recent steps (decayed by GAP_DECAY) and
 * how many of them waited on prompt rows; a step whose prompt rows would
 * put that share above the cap carries its decoders alone. The median gap
 * is then the decode-only step, the p99 the target, and prompts still get
 * the rows of the other steps.
 * Exactness: a lone context reads a prompt in chunks of `chunk`; a piece
 * smaller than that gives the same attention (every row sees every earlier
 * row, nothing is evicted in between) as long as the cache cannot evict
 * before the prompt ends, so pieces are cut only then (cuttable()): full,
 * or the whole prompt within the policy's budget, no per-layer windows,
 * no budget_frac. A sequence that may not be cut waits for a whole chunk.
 * A hybrid's recurrent layers round by their chunked form's chunks of 64
 * from a call's first token, so its cuts end on a 64-row boundary of the
 * lone context's piece and the next piece ends where that piece ends
 * (rec_cut, rec_piece_left): the bits stay the lone context's.
 */
#include "model.h"
#include "../ops/deltanet.h"
#include "../ops/ssd.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

struct seq {
    bool used;
    struct kvb_seq_params p;
    struct kvb_cache *cache;
    struct kvb_sampler *smp;
    int32_t *hist;               /* every token read, then the one sampled last (pending) */
    int32_t n_hist, prompt_at;   /* the current prompt is hist[prompt_at, prompt_at + n_prompt) */
    int64_t hist_cap;
    int32_t n_prompt, n_prompt_done, n_generated, last_token, next;
    int32_t split;               /* no chunk of the current prompt crosses it (kvb_seq_params.prompt_split) */
    int32_t n_ctx;
    enum kvb_seq_state state;
    const char *stop;
    int64_t order;               /* admission order */
    float *logits, *work;        /* [n_vocab] raw logits; the sampler's copy */
    bool has_logits;
    struct kvb_matcher *matcher; /* the caller's grammar, or NULL */
    int32_t recon_from;          /* kvzip: the first position its reconstruction has not scored */
};

struct kvb_batch {
    const struct kvb_model *m;
    struct kvb_batch_params p;
    struct kvb_pool *pool;
    struct kvb_threadpool *tp;
    struct kvb_fwd fwd;
    struct seq *seqs;            /* [max_seqs] */
    int64_t next_order, steps, rows;
    int32_t *tok;                /* [step_tokens] */
    struct kvb_fwd_seg *segs;    /* [max_seqs] */
    int32_t *seg_seq;            /* [max_seqs] */
    int32_t *by_order;           /* [max_seqs] */
    size_t page_bytes;           /* the pool's */
    struct kvb_step_cost cost;   /* the fit of recent steps' times (step targets) */
    double gap_heavy, gap_all;   /* decoders of recent steps that carried prompt rows, and of all (decayed; prompt_step_share) */
    int64_t kvzip_pass;          /* tokens kvzip's reconstruction passes read */
};

struct kvb_batch_params kvb_batch_default_params(void) {
    struct kvb_batch_params p;
    memset(&p, 0, sizeof p);
    p.kv = kvb_kv_default_params();
    p.kv_pool_bytes = (size_t)1 << 30;
    p.n_threads = 1;
    p.max_seqs = 64;
    p.step_tokens = 512;
    p.chunk = 256;
    p.prompt_min_rows = 16;
    return p;
}

/* ---- the step-cost model (pure) ---- */

#define COST_DECAY 0.9
#define GAP_DECAY 0.9 /* prompt_step_share's count of recent decoders */

void kvb_step_cost_observe(struct kvb_step_cost *c, int32_t n_rows, double ms) {
    if (!c || !(ms >= 0) || !isfinite(ms) || n_rows < 0) return;
    const double R = n_rows;
    c->w = COST_DECAY * c->w + 1;
    c->sp = COST_DECAY * c->sp + R;
    c->st = COST_DECAY * c->st + ms;
    c->spp = COST_DECAY * c->spp + R * R;
    c->spt = COST_DECAY * c->spt + R * ms;
    const double mr = c->sp / c->w, mt = c->st / c->w;
    const double var = c->spp / c->w - mr * mr, cov = c->spt / c->w - mr * mt;
    /* a slope needs steps of different sizes (variance of R above one row);
     * until then, or when noise gives a slope <= 0, the last fit stands */
    if (var > 1.0 && cov > 0) {
        const double r = cov / var;
        c->r_ms = r;
        c->a_ms = mt - r * mr > 0 ? mt - r * mr : 0;
    } else if (c->r_ms > 0) {
        c->a_ms = mt - c->r_ms * mr > 0 ? mt - c->r_ms * mr : 0; /* the intercept follows the load */
    }
}

double kvb_step_cost_predict(const struct kvb_step_cost *c, int32_t n_rows) {
    if (!c || !(c->r_ms > 0)) return 0;
    return c->a_ms + c->r_ms * (n_rows > 0 ? n_rows : 0);
}

int32_t kvb_step_cost_budget(const struct kvb_step_cost *c, double target_ms, int32_t min_rows, int32_t max_rows) {
    if (max_rows < 0) max_rows = 0;
    if (min_rows > max_rows) min_rows = max_rows;
    if (min_rows < 0) min_rows = 0;
    if (!c || !(c->r_ms > 0)) return min_rows; /* no fit yet: the safe side; steps of min_rows next to
                                                * decode-only ones give the fit its slope */
    const double rows = (target_ms - c->a_ms) / c->r_ms;
    if (!(rows > min_rows)) return min_rows;
    if (rows >= max_rows) return max_rows;
    return (int32_t)rows;
}

struct kvb_seq_params kvb_seq_default_params(void) {
    struct kvb_seq_params p;
    memset(&p, 0, sizeof p);
    p.kv = kvb_kv_default_params();
    p.sampler = kvb_sampler_default_params();
    return p;
}

struct kvb_seq_params kvb_batch_seq_default_params(const struct kvb_batch *b) {
    struct kvb_seq_params p = kvb_seq_default_params();
    if (b) p.kv = b->p.kv;
    return p;
}

/* Whether kv stores rows as the batch's pool pages hold them. */
static bool same_layout(const struct kvb_batch *b, const struct kvb_kv_params *kv) {
    return kv->kv_dtype == b->p.kv.kv_dtype && kvb_kv_v_type(kv) == kvb_kv_v_type(&b->p.kv) && kv->block_size == b->p.kv.block_size;
}

static kvb_status layout_mismatch(const struct kvb_batch *b, const char *what, const struct kvb_kv_params *kv) {
    return kvb_fail(KVB_ERR_INVALID, "%s: kv.kv_dtype %s, V rows %s, kv.block_size %d differ from the batch's %s, %s, %d (its pool's page holds those)",
                    what, kvb_dtype_name(kv->kv_dtype), kvb_dtype_name(kvb_kv_v_type(kv)), (int)kv->block_size,
                    kvb_dtype_name(b->p.kv.kv_dtype), kvb_dtype_name(kvb_kv_v_type(&b->p.kv)), (int)b->p.kv.block_size);
}

static void seq_clear(struct seq *s) {
    kvb_cache_free(s->cache); /* its pages go back to the pool now */
    kvb_sampler_free(s->smp);
    kvb_free(s->hist);
    kvb_free(s->logits);
    kvb_free(s->work);
    memset(s, 0, sizeof *s);
}

void kvb_batch_free(struct kvb_batch *b) {
    if (!b) return;
    if (b->seqs)
        for (int32_t i = 0; i < b->p.max_seqs; i++) seq_clear(&b->seqs[i]);
    kvb_free(b->seqs);
    kvb_fwd_free(&b->fwd);
    kvb_threadpool_free(b->tp);
    kvb_pool_free(b->pool);
    kvb_free(b->tok); kvb_free(b->segs); kvb_free(b->seg_seq); kvb_free(b->by_order);
    kvb_free(b);
}

kvb_status kvb_batch_init(const struct kvb_model *m, const struct kvb_batch_params *params, struct kvb_batch **out) {
    if (!m || !params || !out) return kvb_fail(KVB_ERR_INVALID, "batch_init: model, params and out must not be NULL");
    const struct kvb_batch_params *p = params;
    if (p->max_seqs < 1 || p->max_seqs > 4096) return kvb_fail(KVB_ERR_INVALID, "batch: max_seqs must be in 1..4096, got %d", (int)p->max_seqs);
    if (p->chunk < 1 || p->chunk > 8192) return kvb_fail(KVB_ERR_INVALID, "batch: chunk must be in 1..8192, got %d", (int)p->chunk);
    if (p->step_tokens < p->chunk || p->step_tokens > 65536)
        return kvb_fail(KVB_ERR_INVALID, "batch: step_tokens must be in chunk (%d)..65536, got %d", (int)p->chunk, (int)p->step_tokens);
    if (p->n_threads < 1 || p->n_threads > 1024) return kvb_fail(KVB_ERR_INVALID, "batch: n_threads must be in 1..1024, got %d", (int)p->n_threads);
    if (!(p->step_target_ms >= 0 && p->step_target_ms <= 1e7f) || !(p->step_target_x >= 0 && p->step_target_x <= 1e4f))
        return kvb_fail(KVB_ERR_INVALID, "batch: step_target_ms must be in 0..1e7 and step_target_x in 0..1e4, got %g and %g",
                        (double)p->step_target_ms, (double)p->step_target_x);
    if (!(p->prompt_step_share >= 0 && p->prompt_step_share <= 1))
        return kvb_fail(KVB_ERR_INVALID, "batch: prompt_step_share must be in 0..1, got %g", (double)p->prompt_step_share);
    if ((p->step_target_ms > 0 || p->step_target_x > 0) && (p->prompt_min_rows < 1 || p->prompt_min_rows > p->chunk))
        return kvb_fail(KVB_ERR_INVALID, "batch: prompt_min_rows must be in 1..chunk (%d) with a step target, got %d", (int)p->chunk,
                        (int)p->prompt_min_rows);
    const struct kvb_cache_params cp = kvb_model_cache_params(m, &p->kv, 0, 0);
    const size_t page = kvb_cache_page_bytes(&cp);
    if (!page) return kvb_fail(KVB_ERR_INVALID, "batch: kv.kv_dtype %s / V rows %s or kv.block_size %d does not fit head_dim %d",
                               kvb_dtype_name(p->kv.kv_dtype), kvb_dtype_name(kvb_kv_v_type(&p->kv)), (int)p->kv.block_size, (int)cp.head_dim);
    if (p->kv.layers || p->kv.n_layers)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "batch: kv.layers: %d per-layer override(s) given; the model sets its own per-layer windows",
                        (int)p->kv.n_layers);
    struct kvb_batch *b = kvb_calloc(1, sizeof *b);
    if (!b) return kvb_fail(KVB_ERR_NOMEM, "batch: out of memory");
    b->m = m;
    b->p = *p;
    struct kvb_pool_params pp = kvb_pool_default_params();
    pp.page_bytes = page;
    pp.capacity_bytes = p->kv_pool_bytes;
    kvb_status st = kvb_pool_init(&pp, &b->pool);
    if (st == KVB_OK) st = kvb_threadpool_init(p->n_threads, &b->tp);
    if (st == KVB_OK) st = kvb_fwd_init(&b->fwd, &m->info, p->step_tokens);
    if (st != KVB_OK) {
        kvb_batch_free(b);
        return st;
    }
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(b->pool, &ps);
    b->page_bytes = ps.page_bytes;
    b->seqs = kvb_calloc((size_t)p->max_seqs, sizeof(struct seq));
    b->tok = kvb_malloc(sizeof(int32_t) * (size_t)p->step_tokens);
    b->segs = kvb_malloc(sizeof(struct kvb_fwd_seg) * (size_t)p->max_seqs);
    b->seg_seq = kvb_malloc(sizeof(int32_t) * (size_t)p->max_seqs);
    b->by_order = kvb_malloc(sizeof(int32_t) * (size_t)p->max_seqs);
    if (!b->seqs || !b->tok || !b->segs || !b->seg_seq || !b->by_order) {
        kvb_batch_free(b);
        return kvb_fail(KVB_ERR_NOMEM, "batch: out of memory for %d sequences", (int)p->max_seqs);
    }
    *out = b;
    return KVB_OK;
}

/* ---- admission ---- */

static bool is_full(const struct kvb_seq_params *p) { return p->kv.policy.id == KVB_POLICY_FULL; }

size_t kvb_batch_seq_min_bytes(const struct kvb_batch *b, const struct kvb_seq_params *p, int32_t n_prompt) {
    if (!b || !p) return 0;
    const struct kvb_model_info *in = &b->m->info;
    int64_t n_ctx = p->n_ctx > 0 ? p->n_ctx : in->n_ctx_train;
    if (is_full(p) && p->max_tokens > 0) n_ctx = KVB_MIN(n_ctx, (int64_t)n_prompt + p->max_tokens);
    struct kvb_kv_params kv = p->kv; /* in the batch's pages */
    kv.kv_dtype = b->p.kv.kv_dtype;
    kv.kv_dtype_v = b->p.kv.kv_dtype_v;
    kv.block_size = b->p.kv.block_size;
    return kvb_model_kv_seq_bytes(b->m, &kv, n_ctx, n_prompt, b->p.chunk); /* the model's windows at their width */
}

static size_t seq_bytes(const struct kvb_batch *b, const struct seq *s) {
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(s->cache, &cs);
    return (size_t)cs.pages_in_use * b->page_bytes;
}

kvb_status kvb_batch_can_admit(const struct kvb_batch *b, const struct kvb_seq_params *p, int32_t n_prompt) {
    if (!b || !p) return kvb_fail(KVB_ERR_INVALID, "batch_can_admit: NULL argument");
    size_t need = kvb_batch_seq_min_bytes(b, p, n_prompt), held = 0;
    for (int32_t i = 0; i < b->p.max_seqs; i++) {
        const struct seq *s = &b->seqs[i];
        if (!s->used) continue;
        const size_t cur = seq_bytes(b, s);
        held += cur;
        need += s->state == KVB_SEQ_DONE ? cur : KVB_MAX(cur, kvb_batch_seq_min_bytes(b, &s->p, s->n_prompt));
    }
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(b->pool, &ps);
    /* a page that forks share is held by each of them but takes the pool one page */
    const size_t in_use = (size_t)ps.pages_in_use * ps.page_bytes;
    if (held > in_use) need -= held - in_use;
    const size_t cap = (size_t)ps.pages_capacity * ps.page_bytes;
    if (need > cap)
        return kvb_fail(KVB_ERR_NOMEM, "batch: the pool (%zu bytes) cannot hold one more sequence at its minimum (%zu bytes short)", cap,
                        need - cap);
    return KVB_OK;
}


/* A free sequence slot, or -1. */
static int32_t free_slot(const struct kvb_batch *b) {
    for (int32_t i = 0; i < b->p.max_seqs; i++)
        if (!b->seqs[i].used) return i;
    return -1;
}

/* A sequence's sampler and buffers (logits, sampler copy, history of
 * hist_cap tokens); on failure the caller clears it. */
static kvb_status seq_buffers(const struct kvb_batch *b, struct seq *s, const struct kvb_sampler_params *sp, int64_t hist_cap) {
    const int32_t V = b->m->info.n_vocab;
    kvb_status st = kvb_sampler_init(sp, V, &s->smp);
    if (st != KVB_OK) return st;
    s->hist_cap = hist_cap;
    s->logits = kvb_malloc(sizeof(float) * (size_t)V);
    s->work = kvb_malloc(sizeof(float) * (size_t)V);
    s->hist = kvb_malloc(sizeof(int32_t) * (size_t)hist_cap);
    if (!s->logits || !s->work || !s->hist) return kvb_fail(KVB_ERR_NOMEM, "batch: out of memory for a sequence");
    return KVB_OK;
}

kvb_status kvb_batch_add(struct kvb_batch *b, const struct kvb_seq_params *p, const int32_t *prompt, int32_t n_prompt, int32_t *seq_id) {
    if (!b || !p || !prompt || !seq_id) return kvb_fail(KVB_ERR_INVALID, "batch_add: NULL argument");
    const struct kvb_model_info *in = &b->m->info;
    if (n_prompt < 1) return kvb_fail(KVB_ERR_INVALID, "batch_add: a sequence needs a prompt of at least one token");
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= in->n_vocab)
            return kvb_fail(KVB_ERR_INVALID, "batch_add: prompt token %d is %d, out of range 0..%d", (int)i, (int)prompt[i], (int)in->n_vocab - 1);
    if (p->max_tokens < 0 || p->n_ctx < 0 || p->kv.max_distance < 0)
        return kvb_fail(KVB_ERR_INVALID, "batch_add: max_tokens, n_ctx and kv.max_distance must be >= 0");
    if (p->prompt_split < 0 || p->prompt_split >= n_prompt)
        return kvb_fail(KVB_ERR_INVALID, "batch_add: prompt_split %d is not 0 or inside the prompt of %d tokens", (int)p->prompt_split, (int)n_prompt);
    if (!same_layout(b, &p->kv)) return layout_mismatch(b, "batch_add", &p->kv);
    if (p->kv.layers || p->kv.n_layers)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "batch_add: kv.layers: %d per-layer override(s) given; the model sets its own per-layer windows",
                        (int)p->kv.n_layers);
    const int32_t n_ctx = p->n_ctx > 0 ? p->n_ctx : in->n_ctx_train;
    if (is_full(p) && n_prompt > n_ctx)
        return kvb_fail(KVB_ERR_INVALID, "batch_add: a prompt of %d tokens exceeds n_ctx %d under policy full (use a bounded policy)",
                        (int)n_prompt, (int)n_ctx);
    const int32_t id = free_slot(b);
    if (id < 0) return kvb_fail(KVB_ERR_NOMEM, "batch: all %d sequence slots are in use", (int)b->p.max_seqs);
    struct seq s;
    memset(&s, 0, sizeof s);
    s.p = *p;
    s.n_ctx = n_ctx;
    const struct kvb_cache_params cp = kvb_model_cache_params(b->m, &p->kv, 0, n_ctx);
    kvb_status st = kvb_cache_init(b->pool, &cp, &s.cache);
    s.p.kv.recall.cold_dir = NULL; /* the cache keeps its own copy; the caller's string may go */
    s.p.sampler.logit_bias = NULL;  /* the sampler's too */
    s.p.sampler.n_logit_bias = 0;
    if (st == KVB_OK) st = seq_buffers(b, &s, &p->sampler, n_prompt);
    if (st != KVB_OK) {
        seq_clear(&s);
        return st;
    }
    memcpy(s.hist, prompt, sizeof(int32_t) * (size_t)n_prompt);
    s.n_hist = n_prompt;
    s.n_prompt = n_prompt;
    s.split = p->prompt_split;
    s.state = KVB_SEQ_PROMPT;
    s.last_token = -1;
    s.used = true;
    s.order = b->next_order++;
    b->seqs[id] = s;
    *seq_id = id;
    return KVB_OK;
}

static struct seq *get_seq(const struct kvb_batch *b, int32_t id) {
    return b && id >= 0 && id < b->p.max_seqs && b->seqs[id].used ? &b->seqs[id] : NULL;
}

kvb_status kvb_batch_remove(struct kvb_batch *b, int32_t id) {
    struct seq *s = get_seq(b, id);
    if (!s) return kvb_fail(KVB_ERR_INVALID, "batch_remove: no sequence %d", (int)id);
    seq_clear(s);
    return KVB_OK;
}

kvb_status kvb_batch_set_token(struct kvb_batch *b, int32_t id, int32_t token) {
    struct seq *s = get_seq(b, id);
    if (!s) return kvb_fail(KVB_ERR_INVALID, "batch_set_token: no sequence %d", (int)id);
    if (s->state != KVB_SEQ_DECODE) return kvb_fail(KVB_ERR_INVALID, "batch_set_token: sequence %d is not decoding", (int)id);
    if (token < 0 || token >= b->m->info.n_vocab) return kvb_fail(KVB_ERR_INVALID, "batch_set_token: token %d out of range", (int)token);
    s->next = token;
    s->hist[s->n_hist - 1] = token;
    return KVB_OK;
}

/* ---- a step ---- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Whether the rest of s's prompt may be read in pieces smaller than
 * `chunk` with the logits a lone context gets: only while the cache cannot
 * evict before the prompt ends (then every row attends to every earlier
 * row however the prompt is cut). */
/* A recurrent layer's chunked form (Gated DeltaNet, Mamba-2's SSD) runs in chunks of REC_CHUNK tokens from a call's first
 * token, and its rounding follows those chunks: a prompt read in pieces keeps a lone context's bits only when every piece
 * ends where the lone context's call of `chunk` tokens does, or on one of that call's internal chunk boundaries. */
#define REC_CHUNK 64
_Static_assert(REC_CHUNK == KVB_SSD_CHUNK && REC_CHUNK == KVB_GDN_CHUNK, "the recurrent layers' chunked forms share one chunk");

/* Where s's current piece of `chunk` rows begins to be counted: the prompt's start, or its split once read past it
 * (a lone context reads the two parts as two prompts). The offset in the piece is a multiple of REC_CHUNK: cuts keep it so. */
static int32_t rec_offset(const struct kvb_batch *b, const struct seq *s) {
    const int32_t origin = s->split > 0 && s->n_prompt_done >= s->split ? s->split : 0;
    return (s->n_prompt_done - origin) % b->p.chunk;
}

/* The rows of s's prompt a step may read at most, for a recurrent model: to the end of the lone context's piece. */
static int32_t rec_piece_left(const struct kvb_batch *b, const struct seq *s) { return b->p.chunk - rec_offset(b, s); }

/* A cut of at most `allow` rows for a recurrent model, ending on a REC_CHUNK boundary of the lone context's piece; 0: none. */
static int32_t rec_cut(const struct kvb_batch *b, const struct seq *s, int32_t allow) {
    const int32_t o = rec_offset(b, s);
    return KVB_MAX(0, (o + allow) / REC_CHUNK * REC_CHUNK - o);
}

static bool cuttable(const struct seq *s) {
    struct kvb_cache_params cp;
    kvb_cache_get_params(s->cache, &cp);
    if (cp.kv.n_layers || cp.kv.layers) return false; /* per-layer windows evict on their own */
    const struct kvb_policy_params *pol = &cp.kv.policy;
    if (pol->id == KVB_POLICY_FULL) return true;
    if (pol->budget_frac > 0 || pol->budget <= 0) return false;
    return kvb_cache_n_past(s->cache, 0) + (s->n_prompt - s->n_prompt_done) <= pol->budget;
}

/* After the sequence's logits are in s->logits: sample, then decide whether
 * it goes on. The history has room for the token (the step reserved it), so
 * this cannot fail. */
static void sample_next(struct kvb_batch *b, struct seq *s) {
    const int32_t V = b->m->info.n_vocab;
    memcpy(s->work, s->logits, sizeof(float) * (size_t)V);
    s->has_logits = true;
    int32_t tok;
    if (s->matcher) {
        /* the unconstrained pick when the grammar takes it (one check), else
         * a pick among what it allows: for a plain draw both give the masked
         * distribution, and most steps skip the mask */
        kvb_sampler_adjust(s->smp, s->work, s->hist, s->n_hist);
        tok = kvb_sampler_pick(s->smp, s->work);
        if (!kvb_matcher_allows(s->matcher, tok) && kvb_matcher_mask(s->matcher, s->work) == KVB_OK) tok = kvb_sampler_pick(s->smp, s->work);
        kvb_matcher_accept(s->matcher, tok); /* refused (nothing allowed): the matcher stays; the text is the model's */
    } else {
        tok = kvb_sampler_sample(s->smp, s->work, s->hist, s->n_hist);
    }
    s->hist[s->n_hist++] = tok;
    s->n_generated++;
    s->last_token = s->next = tok;
    const struct kvb_vocab *v = b->m->vocab;
    if (!s->p.ignore_eos && kvb_vocab_is_eog(v, tok)) {
        s->state = KVB_SEQ_DONE;
        s->stop = "eos";
    } else if (s->p.max_tokens > 0 && s->n_generated >= s->p.max_tokens) {
        s->state = KVB_SEQ_DONE;
        s->stop = "length";
    } else if (is_full(&s->p) && kvb_cache_n_past(s->cache, 0) + 1 > s->n_ctx) {
        s->state = KVB_SEQ_DONE;
        s->stop = "context";
    } else {
        s->state = KVB_SEQ_DECODE;
    }
}

/* The rows kvzip's reconstruction pass adds to the step's reservation for
 * a sequence whose prompt ends in segment g (0 for any other; -1: the
 * repeat prompt could not be tokenized). */
static int32_t kvzip_pass_rows(struct kvb_batch *b, const struct seq *s, const struct kvb_fwd_seg *g) {
    if (g->decode || s->p.kv.policy.id != KVB_POLICY_KVZIP || s->n_prompt_done + g->T < s->n_prompt) return 0;
    if (kvb_kvzip_prepare(b->m, &b->fwd) != KVB_OK) return -1;
    const int32_t since = s->prompt_at + s->n_prompt - s->recon_from;
    return KVB_MIN(since, KVB_KVZIP_CHUNK) + KVB_KVZIP_PROMPT_MAX;
}

kvb_status kvb_batch_step(struct kvb_batch *b, int32_t *n_advanced, int32_t *failed_seq) {
    if (!b) return kvb_fail(KVB_ERR_INVALID, "batch is NULL");
    if (n_advanced) *n_advanced = 0;
    if (failed_seq) *failed_seq = -1;
    const struct kvb_model_info *in = &b->m->info;
    int32_t n_seg = 0, rows = 0;
    /* decode rows first */
    for (int32_t i = 0; i < b->p.max_seqs; i++) {
        struct seq *s = &b->seqs[i];
        if (!s->used || s->state != KVB_SEQ_DECODE || rows >= b->p.step_tokens) continue;
        b->tok[rows] = s->next;
        b->segs[n_seg] = (struct kvb_fwd_seg){s->cache, rows, 1, true, s->logits, false};
        b->seg_seq[n_seg++] = i;
        rows++;
    }
    const int32_t n_dec = rows;
    const bool target = n_dec > 0 && (b->p.step_target_ms > 0 || b->p.step_target_x > 0);
    int32_t left = b->p.step_tokens - rows; /* prompt rows the step may still take */
    if (target) {
        const double t = b->p.step_target_ms > 0 ? (double)b->p.step_target_ms
                                                 : (double)b->p.step_target_x * kvb_step_cost_predict(&b->cost, n_dec);
        left = kvb_step_cost_budget(&b->cost, t, n_dec, n_dec + left) - n_dec;
    }
    /* the gap users feel: a step whose prompt rows would make more than
     * prompt_step_share of recent decoders' gaps carries its decoders alone */
    const float share = b->p.prompt_step_share;
    const bool decoders_alone = target && share > 0 && share < 1 &&
                                GAP_DECAY * b->gap_heavy + n_dec > (double)share * (GAP_DECAY * b->gap_all + n_dec);
    const double t0 = now_ms();
    /* then prompts, oldest first, a whole chunk each while the budget lasts */
    int32_t n_wait = 0;
    for (int32_t i = 0; i < b->p.max_seqs && !decoders_alone; i++)
        if (b->seqs[i].used && b->seqs[i].state == KVB_SEQ_PROMPT) b->by_order[n_wait++] = i;
    for (int32_t a = 1; a < n_wait; a++) { /* insertion sort by admission order */
        const int32_t x = b->by_order[a];
        int32_t j = a - 1;
        while (j >= 0 && b->seqs[b->by_order[j]].order > b->seqs[x].order) { b->by_order[j + 1] = b->by_order[j]; j--; }
        b->by_order[j + 1] = x;
    }
    for (int32_t a = 0; a < n_wait; a++) {
        const int32_t i = b->by_order[a];
        struct seq *s = &b->seqs[i];
        int32_t T = KVB_MIN(b->p.chunk, s->n_prompt - s->n_prompt_done);
        if (b->m->recurrent) T = KVB_MIN(T, rec_piece_left(b, s)); /* after a cut: the rest of the lone context's piece */
        if (s->split > s->n_prompt_done) T = KVB_MIN(T, s->split - s->n_prompt_done); /* no chunk crosses the split */
        if (!target) {
            if (rows + T > b->p.step_tokens) break; /* first come, first served */
        } else {
            const int32_t room = b->p.step_tokens - rows;
            const int32_t allow = KVB_MIN(room, a == 0 ? KVB_MAX(left, b->p.prompt_min_rows) : left);
            if (T > allow) {
                const int32_t cut = !cuttable(s) ? 0 : b->m->recurrent ? rec_cut(b, s, allow) : allow;
                if (cut > 0) T = cut;
                else if (a > 0 || T > room) break; /* the oldest may take a whole chunk past the budget */
            }
            if (T < 1) break;
            left -= T;
        }
        memcpy(b->tok + rows, s->hist + s->prompt_at + s->n_prompt_done, sizeof(int32_t) * (size_t)T);
        const bool last = s->n_prompt_done + T == s->n_prompt;
        b->segs[n_seg] = (struct kvb_fwd_seg){s->cache, rows, T, false, last ? s->logits : NULL, false};
        b->seg_seq[n_seg++] = i;
        rows += T;
    }
    if (!n_seg) return KVB_OK;
    for (int32_t k = 0; k < n_seg; k++) { /* room for the token each will sample: after the pass nothing may fail */
        struct seq *s = &b->seqs[b->seg_seq[k]];
        if (s->n_hist == s->hist_cap && kvb_grow((void **)&s->hist, &s->hist_cap, (int64_t)s->n_hist + 1, sizeof(int32_t)) != KVB_OK)
            return kvb_fail(KVB_ERR_NOMEM, "batch: out of memory for the tokens of sequence %d", (int)b->seg_seq[k]);
    }
    int32_t n_lg = 0;
    for (int32_t k = 0; k < n_seg; k++) n_lg += b->segs[k].logits != NULL;
    kvb_status st = kvb_fwd_reserve_logits(&b->fwd, in, n_lg);
    if (st != KVB_OK) return st;
    /* reserve every sequence's pages, or none (kvzip: a prompt that ends also its reconstruction pass's) */
    for (int32_t k = 0; k < n_seg; k++) {
        const int32_t pass = kvzip_pass_rows(b, &b->seqs[b->seg_seq[k]], &b->segs[k]);
        st = pass < 0 ? KVB_ERR_NOMEM : kvb_cache_reserve(b->segs[k].cache, b->segs[k].T + pass, in->n_head);
        if (st != KVB_OK) {
            for (int32_t u = 0; u < k; u++) kvb_cache_unreserve(b->segs[u].cache);
            if (failed_seq) *failed_seq = b->seg_seq[k];
            if (st == KVB_ERR_NOMEM)
                return kvb_fail(KVB_ERR_NOMEM, "batch: the pool cannot give sequence %d the pages for %d more tokens (%s); no cache changed",
                                (int)b->seg_seq[k], (int)b->segs[k].T, kvb_last_error());
            return st;
        }
    }
    st = kvb_forward(b->m, b->tp, &b->fwd, b->tok, b->segs, n_seg, n_dec);
    if (st != KVB_OK) return st; /* not reached after the reserves: the forward cannot fail then */
    b->steps++;
    b->rows += rows;
    if (n_dec > 0) { /* the decoders' gaps this step made, and whether prompt rows lengthened them */
        b->gap_all = GAP_DECAY * b->gap_all + n_dec;
        b->gap_heavy = GAP_DECAY * b->gap_heavy + (rows > n_dec ? n_dec : 0);
    }
    for (int32_t k = 0; k < n_seg; k++) {
        struct seq *s = &b->seqs[b->seg_seq[k]];
        if (!b->segs[k].decode) {
            s->n_prompt_done += b->segs[k].T;
            if (s->n_prompt_done < s->n_prompt) continue;
            if (s->p.kv.policy.id == KVB_POLICY_KVZIP) { /* its pages and scoring room reserved above: cannot fail */
                const int32_t end = s->prompt_at + s->n_prompt;
                if (kvb_kvzip_reconstruct(b->m, b->tp, &b->fwd, s->cache, s->hist + s->recon_from, end - s->recon_from, &b->kvzip_pass) != KVB_OK)
                    kvb_logf(KVB_LOG_WARN, "batch: sequence %d: kvzip's reconstruction failed (%s); its prompt is compressed on the scores it has",
                             (int)b->seg_seq[k], kvb_last_error());
                s->recon_from = end;
            }
            kvb_cache_compress(s->cache, b->tp); /* the prompt is read: the snapkv family compresses it */
        }
        sample_next(b, s);
    }
    if (b->steps > 1) kvb_step_cost_observe(&b->cost, rows, now_ms() - t0); /* the first pages the weights in */
    if (n_advanced) *n_advanced = n_seg;
    return KVB_OK;
}

/* ---- sessions: a finished sequence goes on, is saved, comes back ---- */

kvb_status kvb_batch_continue(struct kvb_batch *b, int32_t id, const struct kvb_seq_params *p, const int32_t *tokens, int32_t n) {
    struct seq *s = get_seq(b, id);
    if (!s || !p || !tokens) return kvb_fail(KVB_ERR_INVALID, "batch_continue: no sequence %d (or NULL argument)", (int)id);
    if (s->state != KVB_SEQ_DONE) return kvb_fail(KVB_ERR_INVALID, "batch_continue: sequence %d has not finished its turn", (int)id);
    const struct kvb_model_info *in = &b->m->info;
    if (n < 1) return kvb_fail(KVB_ERR_INVALID, "batch_continue: a turn needs at least one token");
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= in->n_vocab)
            return kvb_fail(KVB_ERR_INVALID, "batch_continue: token %d is %d, out of range 0..%d", (int)i, (int)tokens[i], (int)in->n_vocab - 1);
    if (p->max_tokens < 0) return kvb_fail(KVB_ERR_INVALID, "batch_continue: max_tokens must be >= 0");
    if (p->prompt_split < 0 || p->prompt_split >= n)
        return kvb_fail(KVB_ERR_INVALID, "batch_continue: prompt_split %d is not 0 or inside the turn's %d tokens", (int)p->prompt_split, (int)n);
    const int64_t seen = kvb_cache_n_past(s->cache, 0);
    if (is_full(&s->p) && seen + n > s->n_ctx)
        return kvb_fail(KVB_ERR_INVALID, "batch_continue: %lld tokens seen + %d exceed n_ctx %d under policy full", (long long)seen, (int)n,
                        (int)s->n_ctx);
    struct kvb_sampler *smp = NULL;
    kvb_status st = kvb_sampler_init(&p->sampler, in->n_vocab, &smp);
    if (st != KVB_OK) return st;
    const int32_t keep = (int32_t)seen; /* the pending token is dropped: the caller passes it first to keep it */
    if ((int64_t)keep + n > s->hist_cap && kvb_grow((void **)&s->hist, &s->hist_cap, (int64_t)keep + n, sizeof(int32_t)) != KVB_OK) {
        kvb_sampler_free(smp);
        return kvb_fail(KVB_ERR_NOMEM, "batch_continue: out of memory for %d tokens", (int)n);
    }
    memcpy(s->hist + keep, tokens, sizeof(int32_t) * (size_t)n);
    s->n_hist = keep + n;
    s->prompt_at = keep;
    s->n_prompt = n;
    s->split = p->prompt_split;
    s->n_prompt_done = 0;
    s->n_generated = 0;
    s->last_token = -1;
    s->stop = NULL;
    s->has_logits = false;
    s->state = KVB_SEQ_PROMPT;
    s->order = b->next_order++;
    s->p.sampler = p->sampler;
    s->p.sampler.logit_bias = NULL; /* the sampler holds its own copy; the caller's may go */
    s->p.sampler.n_logit_bias = 0;
    s->p.max_tokens = p->max_tokens;
    s->p.ignore_eos = p->ignore_eos;
    s->matcher = NULL;
    kvb_sampler_free(s->smp);
    s->smp = smp;
    return KVB_OK;
}

kvb_status kvb_batch_set_matcher(struct kvb_batch *b, int32_t id, struct kvb_matcher *m) {
    struct seq *s = get_seq(b, id);
    if (!s) return kvb_fail(KVB_ERR_INVALID, "batch_set_matcher: no sequence %d", (int)id);
    s->matcher = m;
    return KVB_OK;
}

kvb_status kvb_batch_finish(struct kvb_batch *b, int32_t id) {
    struct seq *s = get_seq(b, id);
    if (!s) return kvb_fail(KVB_ERR_INVALID, "batch_finish: no sequence %d", (int)id);
    if (s->state != KVB_SEQ_DECODE) return kvb_fail(KVB_ERR_INVALID, "batch_finish: sequence %d is not decoding", (int)id);
    s->state = KVB_SEQ_DONE;
    s->stop = "stop";
    return KVB_OK;
}

/* Session image: "KVBSESS\0", u32 version, u32 flags (0), i32 n_ctx,
 * i32 last_token (-1: none pending), i64 n_hist, i32 hist[n_hist],
 * u64 cache_len, the cache image, u32 CRC-32 of everything before. */
#define SESSION_MAGIC "KVBSESS"
#define SESSION_VERSION 1u

kvb_status kvb_batch_seq_save(const struct kvb_batch *b, int32_t id, void **buf, size_t *len) {
    const struct seq *s = get_seq(b, id);
    if (!s || !buf || !len) return kvb_fail(KVB_ERR_INVALID, "batch_seq_save: no sequence %d (or NULL argument)", (int)id);
    if (s->state != KVB_SEQ_DONE) return kvb_fail(KVB_ERR_INVALID, "batch_seq_save: sequence %d is in the middle of a turn", (int)id);
    void *img = NULL;
    size_t il = 0;
    kvb_status st = kvb_cache_save(s->cache, &img, &il);
    if (st != KVB_OK) return st;
    const size_t total = 8 + 4 + 4 + 4 + 4 + 8 + sizeof(int32_t) * (size_t)s->n_hist + 8 + il + 4;
    uint8_t *o = kvb_malloc(total);
    if (!o) {
        kvb_buffer_free(img);
        return kvb_fail(KVB_ERR_NOMEM, "batch_seq_save: out of memory for %zu bytes", total);
    }
    size_t at = 0;
#define PUT(p, n) (memcpy(o + at, (p), (n)), at += (n))
    const uint32_t version = SESSION_VERSION, flags = 0;
    const int32_t n_ctx = s->n_ctx, last = s->n_generated > 0 ? s->last_token : -1;
    const int64_t nh = s->n_hist;
    const uint64_t cl = il;
    PUT(SESSION_MAGIC, 8);
    PUT(&version, 4);
    PUT(&flags, 4);
    PUT(&n_ctx, 4);
    PUT(&last, 4);
    PUT(&nh, 8);
    PUT(s->hist, sizeof(int32_t) * (size_t)s->n_hist);
    PUT(&cl, 8);
    PUT(img, il);
    const uint32_t crc = kvb_crc32(0, o, at);
    PUT(&crc, 4);
#undef PUT
    kvb_buffer_free(img);
    *buf = o;
    *len = total;
    return KVB_OK;
}

/* A sequence made whole outside the batch takes slot id, DONE with stop. */
static kvb_status seq_install_done(struct kvb_batch *b, struct seq *s, int32_t id, const char *stop, int32_t *seq_id) {
    s->state = KVB_SEQ_DONE;
    s->stop = stop;
    s->used = true;
    s->order = b->next_order++;
    b->seqs[id] = *s;
    *seq_id = id;
    return KVB_OK;
}

kvb_status kvb_batch_seq_load(struct kvb_batch *b, const struct kvb_seq_params *p, const void *buf, size_t len, int32_t *seq_id) {
    if (!b || !p || !buf || !seq_id) return kvb_fail(KVB_ERR_INVALID, "batch_seq_load: NULL argument");
    if (p->kv.layers || p->kv.n_layers)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "batch_seq_load: kv.layers: %d per-layer override(s) given; the model sets its own per-layer windows",
                        (int)p->kv.n_layers);
    const uint8_t *in8 = buf;
    const size_t head = 8 + 4 + 4 + 4 + 4 + 8;
    if (len < head + 8 + 4) return kvb_fail(KVB_ERR_CORRUPT, "session image too short (%zu bytes)", len);
    if (memcmp(in8, SESSION_MAGIC, 8) != 0) return kvb_fail(KVB_ERR_CORRUPT, "session image: bad magic (not a kvbound session)");
    uint32_t crc, version;
    memcpy(&crc, in8 + len - 4, 4);
    if (kvb_crc32(0, in8, len - 4) != crc) return kvb_fail(KVB_ERR_CORRUPT, "session image: checksum mismatch (corrupt or truncated)");
    memcpy(&version, in8 + 8, 4);
    if (version != SESSION_VERSION) return kvb_fail(KVB_ERR_UNSUPPORTED, "session image version %u (this build reads %u)", version, SESSION_VERSION);
    int32_t n_ctx, last;
    int64_t nh;
    memcpy(&n_ctx, in8 + 16, 4);
    memcpy(&last, in8 + 20, 4);
    memcpy(&nh, in8 + 24, 8);
    const struct kvb_model_info *mi = &b->m->info;
    if (nh < 0 || (uint64_t)nh > (len - head - 12) / sizeof(int32_t) || nh > INT32_MAX - 1)
        return kvb_fail(KVB_ERR_CORRUPT, "session image: token history of %lld tokens does not fit its %zu bytes", (long long)nh, len);
    const size_t at_cl = head + sizeof(int32_t) * (size_t)nh;
    uint64_t cl;
    memcpy(&cl, in8 + at_cl, 8);
    if (cl != len - at_cl - 8 - 4) return kvb_fail(KVB_ERR_CORRUPT, "session image: cache image length %llu does not match the file", (unsigned long long)cl);
    if (n_ctx < 1 || last < -1 || last >= mi->n_vocab)
        return kvb_fail(KVB_ERR_CORRUPT, "session image: n_ctx %d or pending token %d out of range", (int)n_ctx, (int)last);
    for (int64_t i = 0; i < nh; i++) {
        int32_t t;
        memcpy(&t, in8 + head + sizeof(int32_t) * (size_t)i, sizeof t); /* the history may sit unaligned */
        if (t < 0 || t >= mi->n_vocab) return kvb_fail(KVB_ERR_CORRUPT, "session image: token %lld is %d, out of range", (long long)i, (int)t);
    }
    const int32_t id = free_slot(b);
    if (id < 0) return kvb_fail(KVB_ERR_NOMEM, "batch: all %d sequence slots are in use", (int)b->p.max_seqs);
    struct seq s;
    memset(&s, 0, sizeof s);
    kvb_status st = kvb_cache_load(b->pool, in8 + at_cl + 8, (size_t)cl, 0, &s.cache);
    if (st != KVB_OK) return st;
    struct kvb_cache_params cp;
    kvb_cache_get_params(s.cache, &cp);
    const int64_t seen = kvb_cache_n_past(s.cache, 0);
    const int64_t want_hist = seen + (last >= 0);
    if (!kvb_model_cache_fits(b->m, &cp) || !same_layout(b, &cp.kv)) {
        st = kvb_fail(KVB_ERR_INVALID, "session image: its cache (%d layers, %d KV heads, %d dims, %s, blocks of %d) does not fit this model and batch",
                      (int)cp.n_layer, (int)cp.n_kv_head, (int)cp.head_dim, kvb_dtype_name(cp.kv.kv_dtype), (int)cp.kv.block_size);
    } else if (nh != want_hist) {
        st = kvb_fail(KVB_ERR_CORRUPT, "session image: %lld tokens of history for a cache that has seen %lld", (long long)nh, (long long)seen);
    } else if (cp.kv.policy.id == KVB_POLICY_FULL && seen > n_ctx) {
        st = kvb_fail(KVB_ERR_CORRUPT, "session image: %lld tokens seen under full exceed n_ctx %d", (long long)seen, (int)n_ctx);
    }
    /* recall comes with the image (its cold tier in memory); beyond it, the
     * caller's cold directory */
    if (st == KVB_OK && cp.kv.recall.pages > 0 && p->kv.recall.cold_dir) st = kvb_cache_set_cold_dir(s.cache, p->kv.recall.cold_dir);
    s.p = *p;
    s.p.kv = cp.kv; /* a cache's params name no cold_dir (the store keeps its copy) */
    s.p.kv.layers = NULL; /* the model's windows, which the cache has: not the sequence's own */
    s.p.kv.n_layers = 0;
    s.p.n_ctx = n_ctx;
    s.n_ctx = n_ctx;
    s.p.sampler.logit_bias = NULL; /* the sampler keeps its own copy */
    s.p.sampler.n_logit_bias = 0;
    if (st == KVB_OK) st = seq_buffers(b, &s, &p->sampler, KVB_MAX(nh, 1));
    if (st != KVB_OK) {
        seq_clear(&s);
        return st;
    }
    memcpy(s.hist, in8 + head, sizeof(int32_t) * (size_t)nh);
    s.n_hist = (int32_t)nh;
    s.last_token = last;
    s.next = last;
    s.n_generated = last >= 0;
    s.recon_from = (int32_t)seen; /* kvzip: the image's scores stand for what it holds */
    return seq_install_done(b, &s, id, "restored", seq_id);
}

kvb_status kvb_batch_seq_fork(struct kvb_batch *b, int32_t src_id, const struct kvb_seq_params *p, int32_t *seq_id) {
    const struct seq *src = get_seq(b, src_id);
    if (!src || !p || !seq_id) return kvb_fail(KVB_ERR_INVALID, "batch_seq_fork: no sequence %d (or NULL argument)", (int)src_id);
    if (src->state != KVB_SEQ_DONE) return kvb_fail(KVB_ERR_INVALID, "batch_seq_fork: sequence %d has not finished its turn", (int)src_id);
    const int32_t id = free_slot(b);
    if (id < 0) return kvb_fail(KVB_ERR_NOMEM, "batch: all %d sequence slots are in use", (int)b->p.max_seqs);
    struct seq s;
    memset(&s, 0, sizeof s);
    kvb_status st = kvb_cache_fork(src->cache, &s.cache);
    if (st == KVB_OK) st = seq_buffers(b, &s, &p->sampler, KVB_MAX(src->n_hist, 1));
    if (st != KVB_OK) {
        seq_clear(&s);
        return st;
    }
    s.p = src->p; /* the cache's configuration and n_ctx are the source's */
    s.p.sampler = p->sampler;
    s.p.sampler.logit_bias = NULL; /* the sampler keeps its own copy */
    s.p.sampler.n_logit_bias = 0;
    s.p.max_tokens = p->max_tokens;
    s.p.ignore_eos = p->ignore_eos;
    s.n_ctx = src->n_ctx;
    memcpy(s.hist, src->hist, sizeof(int32_t) * (size_t)src->n_hist);
    s.n_hist = src->n_hist;
    s.prompt_at = src->prompt_at;
    s.n_prompt = src->n_prompt;
    s.n_prompt_done = src->n_prompt_done;
    s.n_generated = src->n_generated;
    s.last_token = src->last_token;
    s.next = src->next;
    s.recon_from = src->recon_from;
    return seq_install_done(b, &s, id, "forked", seq_id);
}

kvb_status kvb_batch_seq_park(struct kvb_batch *b, int32_t id, enum kvb_policy_id how, double ratio) {
    struct seq *s = get_seq(b, id);
    if (!s) return kvb_fail(KVB_ERR_INVALID, "batch_seq_park: no sequence %d", (int)id);
    if (s->state != KVB_SEQ_DONE) return kvb_fail(KVB_ERR_INVALID, "batch_seq_park: sequence %d has not finished its turn", (int)id);
    if (!(ratio > 0 && ratio < 1)) return kvb_fail(KVB_ERR_INVALID, "batch_seq_park: ratio (the fraction removed) must be in (0, 1), got %g", ratio);
    if (how != KVB_POLICY_KVZIP)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "batch_seq_park: compress-on-park with %s: not implemented (kvzip only)", kvb_policy_name(how));
    const int64_t n = kvb_cache_n_past(s->cache, 0); /* every token it read: hist[0, n) */
    kvb_status st = kvb_cache_park_begin(s->cache);
    if (st != KVB_OK) return st;
    st = kvb_kvzip_reconstruct(b->m, b->tp, &b->fwd, s->cache, s->hist, n, &b->kvzip_pass);
    const kvb_status end = kvb_cache_park_end(s->cache, st == KVB_OK ? 1.0 - ratio : 0.0); /* a failed pass: nothing dropped */
    /* recon_from stays: a kvzip session's own next compress still scores its last turn (the park's scores were its own) */
    return st != KVB_OK ? st : end;
}

/* ---- introspection ---- */

kvb_status kvb_batch_seq_info(const struct kvb_batch *b, int32_t id, struct kvb_seq_info *o) {
    const struct seq *s = get_seq(b, id);
    if (!s || !o) return kvb_fail(KVB_ERR_INVALID, "batch_seq_info: no sequence %d", (int)id);
    o->state = s->state;
    o->n_prompt = s->n_prompt;
    o->n_prompt_done = s->n_prompt_done;
    o->n_generated = s->n_generated;
    o->last_token = s->last_token;
    o->n_past = kvb_cache_n_past(s->cache, 0);
    o->stop = s->stop;
    o->kv_bytes = seq_bytes(b, s);
    return KVB_OK;
}

const float *kvb_batch_logits(const struct kvb_batch *b, int32_t id) {
    const struct seq *s = get_seq(b, id);
    return s && s->has_logits ? s->logits : NULL;
}

struct kvb_cache *kvb_batch_seq_cache(struct kvb_batch *b, int32_t id) {
    struct seq *s = get_seq(b, id);
    return s ? s->cache : NULL;
}

void kvb_batch_get_stats(const struct kvb_batch *b, struct kvb_batch_stats *o) {
    memset(o, 0, sizeof *o);
    if (!b) return;
    for (int32_t i = 0; i < b->p.max_seqs; i++) {
        o->n_seqs += b->seqs[i].used;
        o->n_active += b->seqs[i].used && b->seqs[i].state != KVB_SEQ_DONE;
    }
    o->steps = b->steps;
    o->rows = b->rows;
    o->expert_bytes_read = b->fwd.moe.bytes_read;
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(b->pool, &ps);
    o->pool_bytes_in_use = ps.bytes_used;
    o->pool_bytes_peak = ps.bytes_peak;
    o->pool_bytes_capacity = (size_t)ps.pages_capacity * ps.page_bytes;
    o->page_bytes = ps.page_bytes;
    o->pool_bytes_shared = (size_t)ps.pages_shared * ps.page_bytes;
    o->step_cost = b->cost;
    o->kvzip_pass_tokens = b->kvzip_pass;
}

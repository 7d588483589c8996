/*
 * forward.c — inference contexts: a model, a KV cache with any policy, a
 * thread pool and activation buffers for one chunk. The forward pass of the
 * llama family, for T tokens at once (T = 1: decode):
 *
 *   x[T][E] = embed(tokens)
 *   per layer: xb = rmsnorm(x) * attn_norm
 *              q = xb Wq^T (+bq), k, v likewise       q [T][Hq*D], k/v [T][Hk*D]
 *              att = cache attention (RoPE, eviction inside the cache)
 *              x += att Wo^T
 *              xb = rmsnorm(x) * ffn_norm
 *              x += (silu(xb Wg^T) * (xb Wu^T)) Wd^T
 *   logits = rmsnorm(x) * output_norm, then Wout.
 * The cache sees q and k before RoPE and owns positions (original or
 * contiguous). Logits are computed only for the tokens asked for. The other
 * families' steps (biases, q/k norms, post norms, GeGLU, scales, softcaps)
 * run when the model has them; sliding-window layers, their RoPE and the
 * attention softcap are the cache's, from kvb_model_cache_params. Gemma 4's
 * are data too: window layers' heads (head_dim_swa) padded with zeros to the
 * cache's head size and cut back before attn_output, V = rms(raw V or raw K)
 * per head, KV-shared layers (kv_source) calling the cache with k = v = NULL,
 * the per-layer inputs (ple_inputs, once a pass) joined after the FFN, and
 * layer_output_scale on the whole stream.
 *
 * kvb_context_prompt is the one place where an engine path ends a prompt:
 * every chunk goes through prefill (a one-token tail too), then
 * kvb_cache_compress runs the policy's prompt compression (snapkv family).
 */
#include "model.h"
#include "../tokenizer/tokenizer.h"
#include "../ops/quant.h"

#include <math.h>

struct kvb_context {
    const struct kvb_model *m;
    struct kvb_context_params p;
    struct kvb_cache *cache;
    struct kvb_threadpool *tp;
    int32_t chunk;
    struct kvb_fwd fwd;
    int64_t n_past;
    char *cold_dir; /* recall: the cold directory (a copy), for caches loaded from images */
    /* kvzip: the tokens read since the last compress (its next reconstruction), and its cost */
    int32_t *since;
    int64_t n_since, cap_since;
    int64_t kvzip_pass, kvzip_context;
};

kvb_status kvb_fwd_init(struct kvb_fwd *f, const struct kvb_model_info *in, int32_t rows) {
    memset(f, 0, sizeof *f);
    const size_t T = (size_t)rows, E = (size_t)in->n_embd, QD = (size_t)in->n_head * in->head_dim,
                 KD = (size_t)in->n_head_kv * in->head_dim, F = (size_t)KVB_MAX(in->n_ff, in->n_ff_shexp); /* hg, hu: the dense FFN's and the shared experts' */
    f->rows = rows;
    f->x = kvb_malloc(sizeof(float) * T * E);
    f->xb = kvb_malloc(sizeof(float) * T * E);
    f->q = kvb_malloc(sizeof(float) * T * QD);
    f->k = kvb_malloc(sizeof(float) * T * KD);
    f->v = kvb_malloc(sizeof(float) * T * KD);
    f->att = kvb_malloc(sizeof(float) * T * QD);
    f->hg = kvb_malloc(sizeof(float) * T * F);
    f->hu = kvb_malloc(sizeof(float) * T * F);
    f->tmp = kvb_malloc(sizeof(float) * T * KVB_MAX(E, QD));
    f->q8 = kvb_calloc(1, sizeof *f->q8);
    f->pass.cr0 = kvb_malloc(sizeof(int32_t) * T);
    f->pass.cT = kvb_malloc(sizeof(int32_t) * T);
    f->pass.one = kvb_malloc(sizeof(int32_t) * T);
    const size_t P = (size_t)in->n_embd_per_layer, PL = P * (size_t)in->n_layer; /* gemma4's per-layer inputs */
    const size_t widest = KVB_MAX(KVB_MAX(KVB_MAX(E, QD), KVB_MAX(F, (size_t)in->n_ff_exp)), KVB_MAX(P, (size_t)in->q_lora_rank));
    const size_t MQ = (size_t)in->q_lora_rank + (size_t)in->n_head * in->head_dim_k_mla, MKV = (size_t)in->kv_lora_rank + in->rope_dims,
                 MO = (size_t)in->n_head * in->head_dim_v_mla; /* deepseek2's latent attention */
    if (in->kv_lora_rank) {
        f->mq = kvb_malloc(sizeof(float) * T * MQ);
        f->mkv = kvb_malloc(sizeof(float) * T * MKV);
        f->mo = kvb_malloc(sizeof(float) * T * MO);
    }
    if (P) {
        f->ple = kvb_malloc(sizeof(float) * T * PL);
        f->pg = kvb_malloc(sizeof(float) * T * P);
        f->pu = kvb_malloc(sizeof(float) * KVB_MAX(T * P, PL)); /* also one row's token part */
    }
    if (f->q8) {
        f->q8->cap = (int64_t)(T * widest);
        f->q8->q = kvb_malloc(T * widest);
        f->q8->d = kvb_malloc(sizeof(float) * (T * widest / 32 + 1));
        f->q8->s = kvb_malloc(sizeof(int16_t) * (T * widest / 16 + 1));
    }
    const bool experts_beside = in->n_expert > 0 && !strcmp(in->arch, "gemma4"); /* the only family with both */
    if (experts_beside) { /* gemma4's router input and experts' sum (beside the dense FFN's output in tmp) */
        f->xr = kvb_malloc(sizeof(float) * T * E);
        f->m2 = kvb_malloc(sizeof(float) * T * E);
    }
    if (in->attn_gated) {
        f->qg = kvb_malloc(sizeof(float) * T * 2 * QD);
        f->gate = kvb_malloc(sizeof(float) * T * QD);
    }
    if (!f->x || !f->xb || !f->q || !f->k || !f->v || !f->att || !f->hg || !f->hu || !f->tmp || !f->q8 || !f->q8->q || !f->q8->d || !f->q8->s || !f->pass.cr0 || !f->pass.cT || !f->pass.one ||
        (in->attn_gated && (!f->qg || !f->gate)) || (P && (!f->ple || !f->pg || !f->pu)) || (experts_beside && (!f->xr || !f->m2)) || (in->kv_lora_rank && (!f->mq || !f->mkv || !f->mo)) || kvb_moe_buf_init(&f->moe, in, rows) != KVB_OK || kvb_rec_buf_init(&f->rec, in, rows) != KVB_OK) {
        kvb_fwd_free(f);
        return kvb_fail(KVB_ERR_NOMEM, "out of memory for activations (%d rows)", (int)rows);
    }
    return KVB_OK;
}

kvb_status kvb_fwd_reserve_logits(struct kvb_fwd *f, const struct kvb_model_info *in, int32_t n) {
    if (n <= f->lg_rows) return KVB_OK;
    float *lg = kvb_malloc(sizeof(float) * (size_t)n * (size_t)in->n_vocab);
    if (!lg) return kvb_fail(KVB_ERR_NOMEM, "out of memory for the logits of %d sequences", (int)n);
    kvb_free(f->lg);
    f->lg = lg;
    f->lg_rows = n;
    return KVB_OK;
}

void kvb_fwd_free(struct kvb_fwd *f) {
    kvb_free(f->xr); kvb_free(f->m2);
    kvb_free(f->mq); kvb_free(f->mkv); kvb_free(f->mo);
    kvb_free(f->x); kvb_free(f->xb); kvb_free(f->q); kvb_free(f->k); kvb_free(f->v);
    kvb_free(f->att); kvb_free(f->hg); kvb_free(f->hu); kvb_free(f->tmp); kvb_free(f->lg);
    if (f->q8) { kvb_free(f->q8->q); kvb_free(f->q8->d); kvb_free(f->q8->s); kvb_free(f->q8); }
    kvb_free(f->pass.cr0); kvb_free(f->pass.cT); kvb_free(f->pass.one);
    kvb_moe_buf_free(&f->moe);
    kvb_rec_buf_free(&f->rec);
    kvb_free(f->qg); kvb_free(f->gate);
    kvb_free(f->ple); kvb_free(f->pg); kvb_free(f->pu);
    memset(f, 0, sizeof *f);
}

struct kvb_context_params kvb_context_default_params(void) {
    struct kvb_context_params p;
    memset(&p, 0, sizeof p);
    p.kv = kvb_kv_default_params();
    p.kv_pool_bytes = (size_t)1 << 30;
    p.n_threads = 1;
    p.n_ctx = 0;
    p.chunk = 256;
    return p;
}

void kvb_context_free(struct kvb_context *c) {
    if (!c) return;
    kvb_cache_free(c->cache);
    kvb_threadpool_free(c->tp);
    kvb_fwd_free(&c->fwd);
    kvb_free(c->cold_dir);
    kvb_free(c->since);
    kvb_free(c);
}

struct kvb_cache_params kvb_model_cache_params(const struct kvb_model *m, const struct kvb_kv_params *kv, size_t pool_bytes, int64_t n_ctx) {
    const struct kvb_model_info *in = &m->info;
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = in->n_layer;
    cp.n_kv_head = in->n_head_kv;
    cp.head_dim = in->head_dim;
    cp.head_dim_v = in->kv_lora_rank; /* deepseek2's latent rows: values read off the K row's last kv_lora_rank entries; else 0 */
    /* LongRoPE: chosen once, for the context as llama.cpp sizes it, rounded up to a multiple of 256 (its
     * llama_context pads n_ctx so, then picks the long factors when that exceeds the original context): a
     * file whose original context is not a multiple of 256 (128: llama.cpp's own test models) rotates by
     * its long factors at a context of 128 there, so here too. At originals of multiples of 256 (real
     * checkpoints: 4096, 8192, ...) the rounding changes nothing. */
    const int64_t ctx_256 = (n_ctx + 255) / 256 * 256;
    const bool long_ctx = m->rope_freqs_long && ctx_256 > m->rope_orig_ctx;
    cp.rope = (struct kvb_rope){in->rope_type, in->rope_dims, in->rope_base, in->rope_freq_scale, long_ctx ? m->rope_freqs_long : m->rope_freqs};
    cp.pool_bytes = pool_bytes;
    cp.no_rope = m->no_rope;
    cp.kv = *kv;
    if (cp.kv.max_distance == 0) cp.kv.max_distance = in->n_ctx_train; /* KVB_POS_CAPPED (lminfinite) */
    /* the model's sliding-window layers (gemma2/3): each its exact window, at its own RoPE */
    cp.kv.layers = m->swa_layers;
    cp.kv.n_layers = m->swa_layers ? in->n_swa_layers : 0;
    /* gemma4's window layers rotate their own dims (the real head's, which lead the padded row), unfactored */
    if (m->swa_layers)
        cp.rope_swa = (struct kvb_rope){in->rope_type, m->rope_dims_swa ? m->rope_dims_swa : in->rope_dims, m->rope_base_swa, m->rope_freq_scale_swa, NULL};
    cp.kv_source = m->kv_source; /* gemma4's KV-shared layers */
    cp.kv_heads = m->n_kv_layer; /* gemma4's per-layer KV heads (26B-A4B, 31B), or NULL: n_kv_head on every layer */
    cp.attn_softcap = m->attn_softcap;
    cp.sinks = m->sinks;
    cp.n_sink_heads = m->sinks ? in->n_head : 0;
    if (m->recurrent) { /* the Gated DeltaNet layers' state: Hv*Dk rows of Dv floats, then the conv history */
        cp.recurrent = m->recurrent;
        cp.state_rows = kvb_rec_state_rows(in);
        cp.state_row_floats = kvb_rec_row_floats(in);
    }
    return cp;
}

bool kvb_model_cache_fits(const struct kvb_model *m, const struct kvb_cache_params *p) {
    const struct kvb_model_info *in = &m->info;
    if (p->n_layer != in->n_layer || p->n_kv_head != in->n_head_kv || p->head_dim != in->head_dim || p->head_dim_v != in->kv_lora_rank || p->rope.type != in->rope_type ||
        !kvb_model_no_rope_matches(m, p->no_rope) || p->attn_softcap != m->attn_softcap || !p->sinks != !m->sinks || !p->recurrent != !m->recurrent)
        return false;
    if (m->recurrent && (memcmp(p->recurrent, m->recurrent, (size_t)in->n_layer) || p->state_rows != kvb_rec_state_rows(in) ||
                         p->state_row_floats != kvb_rec_row_floats(in)))
        return false;
    if (m->sinks && (p->n_sink_heads != in->n_head || memcmp(p->sinks, m->sinks, sizeof(float) * (size_t)in->n_layer * (size_t)in->n_head)))
        return false;
    const int32_t n = m->swa_layers ? in->n_swa_layers : 0;
    if (p->kv.n_layers != n || (n && !p->kv.layers)) return false;
    for (int32_t i = 0; i < n; i++) {
        const struct kvb_kv_layer *a = &p->kv.layers[i], *b = &m->swa_layers[i];
        if (a->layer != b->layer || a->policy.id != b->policy.id || a->policy.budget != b->policy.budget || a->policy.n_sink != b->policy.n_sink)
            return false;
    }
    if (!p->kv_source != !m->kv_source || (m->kv_source && memcmp(p->kv_source, m->kv_source, sizeof(int32_t) * (size_t)in->n_layer)))
        return false;
    for (int32_t l = 0; l < in->n_layer; l++) /* per-layer KV heads (NULL: n_kv_head everywhere, on either side) */
        if ((p->kv_heads ? p->kv_heads[l] : p->n_kv_head) != kvb_layer_n_kv(m, l)) return false;
    if (p->rope.n_dims != in->rope_dims) return false;
    if (n && p->rope_swa.base > 0 && p->rope_swa.n_dims != (m->rope_dims_swa ? m->rope_dims_swa : in->rope_dims)) return false;
    return !n || (p->rope_swa.base == m->rope_base_swa && p->rope_swa.freq_scale == m->rope_freq_scale_swa);
}

size_t kvb_model_kv_seq_bytes(const struct kvb_model *m, const struct kvb_kv_params *kv, int64_t n_ctx, int64_t n_prompt, int32_t chunk) {
    if (!m || !kv) return 0;
    const struct kvb_model_info *in = &m->info;
    /* The sizing rule over each group of the layers that hold K/V with the same KV head count (one group but for
     * Gemma 4's per-layer heads), each group's window layers at the model's windows, numbered within the group;
     * readers (KV-shared layers) hold nothing, and a hybrid's recurrent layers hold their state's pages instead. */
    struct kvb_kv_params k = *kv; /* the model's windows, not the caller's */
    struct kvb_kv_layer *w = kvb_malloc(sizeof *w * (size_t)KVB_MAX(in->n_swa_layers, 1));
    if (!w) return 0;
    size_t total = 0;
    int32_t n_attn = 0;
    for (int32_t l = 0; l < in->n_layer; l++) {
        if (!kvb_layer_holds_kv(m, l)) continue;
        n_attn++;
        const int32_t h = kvb_layer_n_kv(m, l);
        bool seen = false;
        for (int32_t j = 0; j < l && !seen; j++) seen = kvb_layer_holds_kv(m, j) && kvb_layer_n_kv(m, j) == h;
        if (seen) continue; /* its group is counted */
        int32_t n = 0, nw = 0;
        for (int32_t j = l; j < in->n_layer; j++) {
            if (!kvb_layer_holds_kv(m, j) || kvb_layer_n_kv(m, j) != h) continue;
            for (int32_t i = 0; m->swa_layers && i < in->n_swa_layers; i++)
                if (m->swa_layers[i].layer == j) {
                    w[nw] = m->swa_layers[i];
                    w[nw++].layer = n; /* numbered within the group */
                }
            n++;
        }
        k.layers = nw ? w : NULL;
        k.n_layers = nw;
        const size_t b = kvb_kv_seq_bytes_latent(&k, n, h, in->head_dim, in->kv_lora_rank, n_ctx, n_prompt, chunk);
        const size_t qs = kvb_kv_query_stats_bytes(&k, n, h, in->n_head, in->head_dim); /* expected-attention's statistics, host memory */
        if (!b || qs > SIZE_MAX - total || b > SIZE_MAX - total - qs) { /* too large to count: 0, as kvb_kv_seq_bytes says */
            kvb_free(w);
            return 0;
        }
        total += qs + b;
    }
    kvb_free(w);
    if (!m->recurrent) return n_attn ? total : 0;
    /* a hybrid model: and the recurrent state's pages */
    const struct kvb_cache_params cp = kvb_model_cache_params(m, kv, 0, n_ctx);
    const int64_t state_pages = kvb_cache_state_pages(&cp);
    if (state_pages < 0) return 0;
    return total + (size_t)state_pages * ((kvb_cache_page_bytes(&cp) + 63) & ~(size_t)63);
}

kvb_status kvb_context_init(const struct kvb_model *m, const struct kvb_context_params *params, struct kvb_context **out) {
    if (!m || !params || !out) return kvb_fail(KVB_ERR_INVALID, "context_init: model, params and out must not be NULL");
    if (params->chunk < 1 || params->chunk > 8192) return kvb_fail(KVB_ERR_INVALID, "context: chunk must be in 1..8192, got %d", (int)params->chunk);
    if (params->n_threads < 1 || params->n_threads > 1024) return kvb_fail(KVB_ERR_INVALID, "context: n_threads must be in 1..1024, got %d", (int)params->n_threads);
    if (params->n_ctx < 0) return kvb_fail(KVB_ERR_INVALID, "context: n_ctx must be >= 0");
    if (params->kv.max_distance < 0) return kvb_fail(KVB_ERR_INVALID, "context: kv.max_distance must be >= 0");
    if (params->kv.layers || params->kv.n_layers)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "context: kv.layers: %d per-layer override(s) given; the model sets its own per-layer windows",
                        (int)params->kv.n_layers);
    const struct kvb_model_info *in = &m->info;
    struct kvb_context *c = kvb_calloc(1, sizeof *c);
    if (!c) return kvb_fail(KVB_ERR_NOMEM, "context: out of memory");
    c->m = m;
    c->p = *params;
    c->p.kv.recall.cold_dir = NULL; /* the caller's string may go: cold_dir holds a copy */
    if (params->kv.recall.pages > 0 && params->kv.recall.cold_dir) {
        const size_t n = strlen(params->kv.recall.cold_dir) + 1;
        if (!(c->cold_dir = kvb_malloc(n))) {
            kvb_free(c);
            return kvb_fail(KVB_ERR_NOMEM, "context: out of memory");
        }
        memcpy(c->cold_dir, params->kv.recall.cold_dir, n);
    }
    if (!c->p.n_ctx) c->p.n_ctx = in->n_ctx_train;
    c->chunk = params->chunk;
    const struct kvb_cache_params cp = kvb_model_cache_params(m, &params->kv, params->kv_pool_bytes, c->p.n_ctx);
    kvb_status st = kvb_cache_init(NULL, &cp, &c->cache);
    if (st == KVB_OK) st = kvb_threadpool_init(params->n_threads, &c->tp);
    if (st != KVB_OK) {
        kvb_context_free(c);
        return st;
    }
    if ((st = kvb_fwd_init(&c->fwd, in, c->chunk)) != KVB_OK) {
        kvb_context_free(c);
        return st;
    }
    *out = c;
    return KVB_OK;
}

void kvb_context_reset(struct kvb_context *c) {
    kvb_cache_reset(c->cache);
    c->n_past = 0;
    c->n_since = 0;
}

struct kvb_cache *kvb_context_cache(struct kvb_context *c) { return c->cache; }

kvb_status kvb_context_save(const struct kvb_context *c, const char *path) { return kvb_cache_save_file(c->cache, path); }

kvb_status kvb_context_load(struct kvb_context *c, const char *path) {
    struct kvb_cache *nc;
    kvb_status st = kvb_cache_load_file(NULL, path, c->p.kv_pool_bytes, &nc);
    if (st != KVB_OK) return st;
    struct kvb_cache_params saved;
    kvb_cache_get_params(nc, &saved);
    const struct kvb_cache_params *p = &saved;
    const struct kvb_model_info *in = &c->m->info;
    if (!kvb_model_cache_fits(c->m, p)) {
        kvb_cache_free(nc);
        return kvb_fail(KVB_ERR_INVALID, "%s: the saved cache (%d layers, %d KV heads, %d dims, %d window layers) does not fit this model (%d, %d, %d, %d)",
                        path, (int)p->n_layer, (int)p->n_kv_head, (int)p->head_dim, (int)p->kv.n_layers, (int)in->n_layer, (int)in->n_head_kv,
                        (int)in->head_dim, (int)(c->m->swa_layers ? in->n_swa_layers : 0));
    }
    /* a cache with recall comes back with its cold tier in memory: beyond
     * it, this context's cold directory, as for the cache it replaces */
    if (p->kv.recall.pages > 0 && c->cold_dir && (st = kvb_cache_set_cold_dir(nc, c->cold_dir)) != KVB_OK) {
        kvb_cache_free(nc);
        return st;
    }
    kvb_cache_free(c->cache);
    c->cache = nc;
    c->n_past = kvb_cache_n_past(nc, 0);
    c->n_since = 0; /* a loaded cache's prompt was compressed before it was saved */
    return KVB_OK;
}
void kvb_context_kvzip_cost(const struct kvb_context *c, int64_t *pass_tokens, int64_t *context_tokens) {
    if (pass_tokens) *pass_tokens = c ? c->kvzip_pass : 0;
    if (context_tokens) *context_tokens = c ? c->kvzip_context : 0;
}
int64_t kvb_context_n_past(const struct kvb_context *c) { return c->n_past; }
int64_t kvb_context_expert_bytes_read(const struct kvb_context *c) { return c ? c->fwd.moe.bytes_read : 0; }

static void rmsnorm(float *o, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) o[i] = x[i] * s * w[i];
}

static void embed_row(const struct kvb_mat *e, int32_t tok, float *out) {
    kvb_dequantize_row(e->type, e->data + (size_t)tok * e->row_bytes, out, e->n_in);
}

/* RMS norm of each of the n vectors of size d at x, stride ld (in place), weights w (NULL: none, gemma4's V). */
static void norm_heads(float *x, int64_t n, int64_t ld, int64_t d, const float *w, float eps) {
    for (int64_t h = 0; h < n; h++) {
        float *y = x + h * ld;
        if (w) {
            rmsnorm(y, y, w, d, eps);
            continue;
        }
        double ss = 0;
        for (int64_t i = 0; i < d; i++) ss += (double)y[i] * y[i];
        const float sc = 1.0f / sqrtf((float)(ss / (double)d) + eps);
        for (int64_t i = 0; i < d; i++) y[i] *= sc;
    }
}

/* gemma4's window layers: rows of n heads of d values (d < D) spread to heads of D, the rest zeros
 * (zero dims add nothing to q.k, and V's come out zero); and back, for the attention output. */
static void pad_heads(float *x, int32_t rows, int64_t ld, int64_t n, int64_t d, int64_t D) {
    for (int32_t t = 0; d != D && t < rows; t++)
        for (int64_t h = n - 1; h >= 0; h--) {
            float *r = x + (size_t)t * ld;
            memmove(r + h * D, r + h * d, sizeof(float) * (size_t)d);
            memset(r + h * D + d, 0, sizeof(float) * (size_t)(D - d));
        }
}
static void unpad_heads(float *x, int32_t rows, int64_t ld, int64_t n, int64_t d, int64_t D) {
    for (int32_t t = 0; d != D && t < rows; t++)
        for (int64_t h = 0; h < n; h++) memmove(x + (size_t)t * ld + h * d, x + (size_t)t * ld + h * D, sizeof(float) * (size_t)d);
}

/* What reaches the cache: q and k after biases, their norms, the RoPE
 * magnitude (on the rotated dims, which is where ggml's cos/sin carry it),
 * the query scale and Mistral 3's temperature (a per-position factor, linear
 * like the rotation, so applied before it). */
static void shape_qk(const struct kvb_model *m, const struct kvb_layer *L, struct kvb_fwd *f, const struct kvb_fwd_seg *seg, int32_t n_seg,
                     int32_t l) {
    const struct kvb_model_info *in = &m->info;
    const int64_t D = in->head_dim, QD = (int64_t)in->n_head * D, Hkv = kvb_layer_n_kv(m, l), KD = Hkv * D; /* this layer's KV heads */
    const int64_t Dl = kvb_layer_head_dim(m, l); /* the heads' real size (gemma4's window layers: padded to D) */
    const int32_t R = f->pass.n_rows;
    kvb_fwd_scale_rows(f->q, R, QD, L->s_q); /* the per-tensor scales come before the biases here, as in llama.cpp */
    kvb_fwd_scale_rows(f->k, R, KD, L->s_k);
    kvb_fwd_scale_rows(f->v, R, KD, L->s_v);
    kvb_fwd_add_bias(f->q, R, QD, L->bq);
    kvb_fwd_add_bias(f->k, R, KD, L->bk);
    kvb_fwd_add_bias(f->v, R, KD, L->bv);
    for (int32_t t = 0; t < R; t++) {
        float *q = f->q + (size_t)t * QD, *k = f->k + (size_t)t * KD;
        const bool reader = m->kv_source && m->kv_source[l] >= 0; /* gemma4: no K/V of its own */
        if (L->q_norm) norm_heads(q, m->qk_norm_whole ? 1 : in->n_head, D, m->qk_norm_whole ? QD : Dl, L->q_norm, in->rms_eps);
        if (L->k_norm && !reader) norm_heads(k, m->qk_norm_whole ? 1 : Hkv, D, m->qk_norm_whole ? KD : Dl, L->k_norm, in->rms_eps);
        if (m->v_norm && !reader) norm_heads(f->v + (size_t)t * KD, Hkv, D, Dl, NULL, in->rms_eps);
        if (m->rope_mscale != 1.0f && in->rope_type != KVB_ROPE_NONE && !(m->no_rope && m->no_rope[l])) { /* a NoPE layer has no rotation to scale */
            for (int64_t h = 0; h < in->n_head; h++)
                for (int32_t i = 0; i < in->rope_dims; i++) q[h * D + i] *= m->rope_mscale;
            for (int64_t h = 0; h < Hkv; h++)
                for (int32_t i = 0; i < in->rope_dims; i++) k[h * D + i] *= m->rope_mscale;
        }
        if (m->q_scale != 1.0f)
            for (int64_t i = 0; i < QD; i++) q[i] *= m->q_scale;
    }
    if (m->temp_beta != 0)
        for (int32_t i = 0; i < n_seg; i++) {
            const int64_t p0 = kvb_cache_n_past(seg[i].cache, l); /* original positions, whatever the cache keeps */
            for (int32_t t = 0; t < seg[i].T; t++) {
                const float s = 1.0f + m->temp_beta * logf(1.0f + floorf((float)(p0 + t) / (float)m->temp_floor));
                float *q = f->q + (size_t)(seg[i].r0 + t) * QD;
                for (int64_t j = 0; j < QD; j++) q[j] *= s;
            }
        }
}

/* x += scale * norm(y): a branch's output joins the residual stream. */
static void residual(const struct kvb_model *m, float *x, float *y, const float *post_norm, int32_t rows, int64_t E) {
    for (int32_t t = 0; t < rows; t++) {
        float *yt = y + (size_t)t * E, *xt = x + (size_t)t * E;
        if (post_norm) rmsnorm(yt, yt, post_norm, E, m->info.rms_eps);
        for (int64_t i = 0; i < E; i++) xt[i] += m->residual_scale * yt[i];
    }
}

/* The output's scale and bias, Granite's logit scale and the final softcap on n rows. */
static void finish_logits(const struct kvb_model *m, float *lg, int64_t rows) {
    const int64_t V = m->info.n_vocab;
    if (!m->output_bias && m->output_scale == 1.0f && m->logit_scale == 1.0f && m->final_softcap == 0) return;
    for (int64_t r = 0; r < rows; r++) {
        float *y = lg + r * V;
        if (m->output_scale != 1.0f)
            for (int64_t i = 0; i < V; i++) y[i] *= m->output_scale;
        if (m->output_bias)
            for (int64_t i = 0; i < V; i++) y[i] += m->output_bias[i];
        if (m->logit_scale != 1.0f)
            for (int64_t i = 0; i < V; i++) y[i] /= m->logit_scale;
        if (m->final_softcap != 0)
            kvb_softcap(kvb_kernels(), y, V, m->final_softcap);
    }
}

/* The norm before a branch: xb = norm(x), or x itself when the family has none (olmo2). */
static const float *pre_norm(const struct kvb_model *m, struct kvb_fwd *f, const float *w, int32_t rows, int64_t E) {
    if (!w) return f->x;
    for (int32_t t = 0; t < rows; t++) rmsnorm(f->xb + (size_t)t * E, f->x + (size_t)t * E, w, E, m->info.rms_eps);
    return f->xb;
}

static kvb_status attention_block(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const struct kvb_fwd_seg *seg,
                                  int32_t n_seg, int32_t l) {
    const struct kvb_model_info *in = &m->info;
    const struct kvb_layer *L = &m->layers[l];
    const int64_t E = in->n_embd, QD = (int64_t)in->n_head * in->head_dim, Hkv = kvb_layer_n_kv(m, l), KD = Hkv * in->head_dim;
    /* k, v: [T][Hkv(l)][D], this layer's own KV heads (gemma4's per-layer head_count_kv; the cache's kv_heads) */
    const int32_t R = f->pass.n_rows;
    const float *xin = pre_norm(m, f, L->attn_norm, R, E);
    if (m->recurrent && m->recurrent[l]) { /* a Gated DeltaNet layer: a recurrent state instead of K/V */
        kvb_status st = kvb_rec_layer(m, tp, f, seg, n_seg, l, xin, f->tmp);
        if (st != KVB_OK) return st;
        residual(m, f->x, f->tmp, L->post_attn_norm, R, E);
        return KVB_OK;
    }
    if (L->wkv_a.data) { /* multi-head latent attention (deepseek2) */
        kvb_status st = kvb_mla_layer(m, tp, f, seg, n_seg, l, xin, f->tmp);
        if (st != KVB_OK) return st;
        residual(m, f->x, f->tmp, NULL, R, E);
        return KVB_OK;
    }
    const bool reader = m->kv_source && m->kv_source[l] >= 0; /* gemma4's KV-shared layer: its source's K/V */
    const int64_t D = in->head_dim, Dl = kvb_layer_head_dim(m, l);
    {
        const struct kvb_mat *w[3] = {&L->wq, &L->wk, &L->wv};
        float *y[3] = {m->q_gate ? f->qg : f->q, f->k, f->v};
        const int64_t ld[3] = {m->q_gate ? 2 * QD : QD, KD, KD};
        /* gemma4: no attn_v: V is the raw K projection; a shared layer computes neither */
        const int32_t n = reader ? 1 : L->wv.data ? 3 : 2;
        kvb_fwd_mm_group(tp, f->q8, &f->pass, w, n, xin, E, y, ld);
        if (n == 2) memcpy(f->v, f->k, sizeof(float) * (size_t)R * (size_t)KD);
        pad_heads(f->q, R, QD, in->n_head, Dl, D);
        if (!reader) {
            pad_heads(f->k, R, KD, Hkv, Dl, D);
            pad_heads(f->v, R, KD, Hkv, Dl, D);
        }
    }
    if (m->q_gate) /* each head's query rows, then its gate's (qwen35) */
        for (int32_t t = 0; t < R; t++)
            for (int32_t h = 0; h < in->n_head; h++) {
                const float *src = f->qg + (size_t)t * 2 * QD + (size_t)h * 2 * in->head_dim;
                memcpy(f->q + (size_t)t * QD + (size_t)h * in->head_dim, src, sizeof(float) * (size_t)in->head_dim);
                memcpy(f->gate + (size_t)t * QD + (size_t)h * in->head_dim, src + in->head_dim, sizeof(float) * (size_t)in->head_dim);
            }
    shape_qk(m, L, f, seg, n_seg, l);
    for (int32_t i = 0; i < n_seg; i++) {
        const struct kvb_fwd_seg *g = &seg[i];
        float *q = f->q + (size_t)g->r0 * QD, *k = reader ? NULL : f->k + (size_t)g->r0 * KD, *v = reader ? NULL : f->v + (size_t)g->r0 * KD;
        float *att = f->att + (size_t)g->r0 * QD;
        kvb_status st = g->decode ? kvb_cache_decode(g->cache, l, q, in->n_head, k, v, att, tp)
                                  : kvb_cache_prefill(g->cache, l, g->T, q, in->n_head, k, v, att, tp);
        if (st != KVB_OK) return st;
    }
    if (m->q_gate)
        for (size_t i = 0; i < (size_t)R * (size_t)QD; i++) f->att[i] *= 1.0f / (1.0f + expf(-f->gate[i]));
    unpad_heads(f->att, R, QD, in->n_head, Dl, D);
    kvb_fwd_mm(tp, f->q8, &f->pass, &L->wo, f->att, QD, f->tmp, E);
    kvb_fwd_scale_rows(f->tmp, R, E, L->s_o);
    kvb_fwd_add_bias(f->tmp, R, E, L->bo);
    residual(m, f->x, f->tmp, L->post_attn_norm, R, E);
    return KVB_OK;
}

static void ffn_block(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, int32_t l) {
    const struct kvb_model_info *in = &m->info;
    const struct kvb_layer *L = &m->layers[l];
    const int64_t E = in->n_embd;
    const int32_t R = f->pass.n_rows;
    if (!L->w_down.data && !L->router.data) return; /* nemotron_h: a mixer without an FFN after it */
    const float *xin = pre_norm(m, f, L->ffn_norm, R, E);
    if (L->router_scale) { /* gemma4: the dense FFN always, then the experts on their own norms, both into post_ffn_norm */
        const struct kvb_ffn_w w = {&L->w_gate, &L->w_up, &L->w_down, L->b_gate, L->b_up, L->b_down, L->s_gate, L->s_up, L->s_down};
        kvb_fwd_ffn(m, tp, f, &f->pass, &w, kvb_layer_n_ff(m, l), xin, f->tmp);
        const float inv = 1.0f / sqrtf((float)E);
        for (int32_t t = 0; t < R; t++) {
            const float *x = f->x + (size_t)t * E;
            float *y = f->tmp + (size_t)t * E, *r = f->xr + (size_t)t * E;
            rmsnorm(y, y, L->post_ffn_norm_1, E, in->rms_eps);
            double ss = 0; /* the router's input: rms(x) / sqrt(E) * router_scale, no weight in the norm */
            for (int64_t i = 0; i < E; i++) ss += (double)x[i] * x[i];
            const float sc = 1.0f / sqrtf((float)(ss / (double)E) + in->rms_eps);
            for (int64_t i = 0; i < E; i++) r[i] = x[i] * sc * inv * L->router_scale[i];
            rmsnorm(f->xb + (size_t)t * E, x, L->pre_ffn_norm_2, E, in->rms_eps); /* the experts' input (xin, the dense one, is done) */
        }
        kvb_moe_ffn_routed(m, tp, f, &f->pass, l, f->xr, f->xb, f->m2);
        for (int32_t t = 0; t < R; t++) {
            float *y = f->tmp + (size_t)t * E, *e = f->m2 + (size_t)t * E;
            rmsnorm(e, e, L->post_ffn_norm_2, E, in->rms_eps);
            for (int64_t i = 0; i < E; i++) y[i] += e[i];
        }
    } else if (L->router.data) { /* a mixture of experts */
        kvb_moe_ffn(m, tp, f, &f->pass, l, xin, f->tmp);
    } else {
        const struct kvb_ffn_w w = {&L->w_gate, &L->w_up, &L->w_down, L->b_gate, L->b_up, L->b_down, L->s_gate, L->s_up, L->s_down};
        kvb_fwd_ffn(m, tp, f, &f->pass, &w, kvb_layer_n_ff(m, l), xin, f->tmp);
    }
    residual(m, f->x, f->tmp, L->post_ffn_norm, R, E);
    if (L->ple_gate.data) { /* gemma4's per-layer input: x += N(proj (gelu(inp_gate x) * ple[l]), post_norm) */
        const int64_t P = m->n_ple, PL = P * in->n_layer;
        kvb_fwd_mm(tp, f->q8, &f->pass, &L->ple_gate, f->x, E, f->pg, P);
        for (int32_t t = 0; t < R; t++) memcpy(f->pu + (size_t)t * P, f->ple + (size_t)t * PL + (size_t)l * P, sizeof(float) * (size_t)P);
        kvb_fwd_glu(tp, KVB_FFN_GELU_TANH, f->pg, f->pu, (size_t)R * (size_t)P);
        kvb_fwd_mm(tp, f->q8, &f->pass, &L->ple_proj, f->pg, P, f->tmp, E);
        residual(m, f->x, f->tmp, L->ple_norm, R, E);
    }
    if (L->out_scale != 1.0f) kvb_fwd_scale_rows(f->x, R, E, L->out_scale); /* the whole stream (gemma4's layer_output_scale) */
}

/* gemma4's per-layer inputs of every row, before layer 0 (x already scaled by sqrt(E)):
 * ple[t] = (N_P(per_layer_model_proj x / sqrt(E)) + per_layer_token_embd[tok] sqrt(P)) / sqrt(2), N_P
 * the RMS norm of each layer's P values by per_layer_proj_norm. */
static void ple_inputs(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const int32_t *tok) {
    const struct kvb_model_info *in = &m->info;
    const int64_t E = in->n_embd, P = m->n_ple, PL = P * in->n_layer;
    const int32_t R = f->pass.n_rows;
    kvb_fwd_mm(tp, f->q8, &f->pass, &m->ple_model_proj, f->x, E, f->ple, PL);
    const float se = 1.0f / sqrtf((float)E), sp = sqrtf((float)P), s2 = 1.0f / sqrtf(2.0f);
    for (int32_t t = 0; t < R; t++) {
        float *p = f->ple + (size_t)t * PL;
        for (int64_t i = 0; i < PL; i++) p[i] *= se;
        for (int32_t l = 0; l < in->n_layer; l++) rmsnorm(p + l * P, p + l * P, m->ple_proj_norm, P, in->rms_eps);
        embed_row(&m->ple_embd, tok[t], f->pu);
        for (int64_t i = 0; i < PL; i++) p[i] = (p[i] + f->pu[i] * sp) * s2;
    }
}

kvb_status kvb_forward(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const int32_t *tok,
                       const struct kvb_fwd_seg *seg, int32_t n_seg, int32_t n_dec) {
    const struct kvb_model_info *in = &m->info;
    const int64_t E = in->n_embd;
    int32_t R = 0, n_lg = 0;
    for (int32_t i = 0; i < n_seg; i++) {
        R = KVB_MAX(R, seg[i].r0 + seg[i].T);
        n_lg += seg[i].logits && !seg[i].all_logits;
    }
    kvb_status st = kvb_fwd_reserve_logits(f, in, n_lg); /* before any change */
    if (st != KVB_OK) return st;
    struct kvb_pass_rows *p = &f->pass;
    p->n_rows = R;
    p->n_dec = n_dec;
    p->nc = p->n_one = 0;
    for (int32_t i = 0; i < n_seg; i++)
        if (!seg[i].decode && seg[i].T >= 2) {
            p->cr0[p->nc] = seg[i].r0;
            p->cT[p->nc++] = seg[i].T;
        } else if (!seg[i].decode) {
            p->one[p->n_one++] = seg[i].r0;
        }
    for (int32_t t = 0; t < R; t++) embed_row(&m->tok_embd, tok[t], f->x + (size_t)t * E);
    if (m->embd_scale != 1.0f)
        for (size_t i = 0; i < (size_t)R * E; i++) f->x[i] *= m->embd_scale;
    if (m->n_ple) ple_inputs(m, tp, f, tok);
    for (int32_t l = 0; l < in->n_layer; l++) {
        if ((st = attention_block(m, tp, f, seg, n_seg, l)) != KVB_OK) return st;
        ffn_block(m, tp, f, l);
    }
    /* logits: every segment's last row as one decode batch (each row as a
     * lone T == 1 call), a segment's every row as its own chunk */
    int32_t n_last = 0;
    for (int32_t i = 0; i < n_seg; i++) {
        const struct kvb_fwd_seg *g = &seg[i];
        if (!g->logits) continue;
        if (g->all_logits) {
            for (int32_t t = 0; t < g->T; t++)
                rmsnorm(f->tmp + (size_t)t * E, f->x + (size_t)(g->r0 + t) * E, m->output_norm, E, in->rms_eps);
            kvb_matmul(tp, &m->output, f->tmp, E, g->logits, in->n_vocab, g->T);
            finish_logits(m, g->logits, g->T);
        } else {
            rmsnorm(f->xb + (size_t)n_last++ * E, f->x + (size_t)(g->r0 + g->T - 1) * E, m->output_norm, E, in->rms_eps);
        }
    }
    if (!n_last) return KVB_OK;
    kvb_matmul_decode(tp, &m->output, f->xb, E, f->lg, in->n_vocab, n_last, f->q8);
    finish_logits(m, f->lg, n_last);
    for (int32_t i = 0, r = 0; i < n_seg; i++)
        if (seg[i].logits && !seg[i].all_logits)
            memcpy(seg[i].logits, f->lg + (size_t)r++ * in->n_vocab, sizeof(float) * (size_t)in->n_vocab);
    return KVB_OK;
}

#define KVZIP_SINCE_MAX (64 * KVB_KVZIP_CHUNK) /* tokens kept for kvzip's next reconstruction: 512 KiB */

static kvb_status eval_tokens(struct kvb_context *c, const int32_t *tokens, int32_t n, float *logits, bool all, bool prompt) {
    if (!c || (!tokens && n)) return kvb_fail(KVB_ERR_INVALID, "context_eval: bad arguments");
    if (n <= 0) return KVB_OK;
    const int32_t V = c->m->info.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V) return kvb_fail(KVB_ERR_INVALID, "context_eval: token %d is out of range 0..%d", (int)tokens[i], (int)V - 1);
    if (c->p.kv.policy.id == KVB_POLICY_FULL && c->n_past + n > c->p.n_ctx)
        return kvb_fail(KVB_ERR_INVALID, "context full: %lld + %d tokens exceed n_ctx %d (policy full keeps every token; use a bounded policy or a larger n_ctx)",
                        (long long)c->n_past, (int)n, (int)c->p.n_ctx);
    /* kvzip: the tokens read since its last reconstruction, kept for the next
     * one (each chunk once the cache has read it, so a failed chunk leaves
     * none the cache lacks) */
    const bool kvzip = c->p.kv.policy.id == KVB_POLICY_KVZIP;
    if (kvzip && kvb_grow((void **)&c->since, &c->cap_since, c->n_since + n, sizeof(int32_t)) != KVB_OK)
        return kvb_fail(KVB_ERR_NOMEM, "context_eval: out of memory for kvzip's context tokens");
    for (int32_t i = 0; i < n; i += c->chunk) {
        const int32_t T = KVB_MIN(c->chunk, n - i);
        const bool last = i + T == n;
        struct kvb_fwd_seg seg = {c->cache, 0, T, T == 1 && !prompt, all ? logits + (size_t)i * V : (last ? logits : NULL), all};
        kvb_status st;
        /* kvzip: tokens read by eval (a question after a compressed context) leave a prompt open that the
         * decode step compresses: they are reconstructed first, or they would score nothing and leave */
        if (kvzip && seg.decode && c->n_since > 0 && kvb_cache_prompt_pending(c->cache)) {
            if ((st = kvb_kvzip_reconstruct(c->m, c->tp, &c->fwd, c->cache, c->since, c->n_since, &c->kvzip_pass)) != KVB_OK) return st;
            c->kvzip_context += c->n_since;
            c->n_since = 0;
        }
        if ((st = kvb_forward(c->m, c->tp, &c->fwd, tokens + i, &seg, 1, seg.decode ? 1 : 0)) != KVB_OK) return st;
        if (kvzip) {
            memcpy(c->since + c->n_since, tokens + i, sizeof(int32_t) * (size_t)T);
            c->n_since += T;
            if (c->n_since > KVZIP_SINCE_MAX) { /* a long decode: the last ones (older tokens score 0 at the next compress) */
                memmove(c->since, c->since + (c->n_since - KVZIP_SINCE_MAX), sizeof(int32_t) * KVZIP_SINCE_MAX);
                c->n_since = KVZIP_SINCE_MAX;
            }
        }
        c->n_past += T;
    }
    return KVB_OK;
}

kvb_status kvb_context_eval(struct kvb_context *c, const int32_t *tokens, int32_t n, float *logits, bool all) {
    return eval_tokens(c, tokens, n, logits, all, false);
}

kvb_status kvb_context_prompt(struct kvb_context *c, const int32_t *tokens, int32_t n, float *logits, bool all) {
    kvb_status st = eval_tokens(c, tokens, n, logits, all, true);
    if (st == KVB_OK && c && c->p.kv.policy.id == KVB_POLICY_KVZIP && c->n_since > 0) { /* kvzip: the context scores first */
        st = kvb_kvzip_reconstruct(c->m, c->tp, &c->fwd, c->cache, c->since, c->n_since, &c->kvzip_pass);
        if (st != KVB_OK) return st; /* the tokens stay for the next try; nothing compressed */
        c->kvzip_context += c->n_since;
        c->n_since = 0;
    }
    if (st == KVB_OK && c) kvb_cache_compress(c->cache, c->tp);
    return st;
}

#define KVZIP_PREV_TAIL 8 /* tokens of the previous chunk a later pass's prompt ends with */

kvb_status kvb_kvzip_prepare(const struct kvb_model *m, struct kvb_fwd *f) {
    static const char *const text[2] = {"\n\nRepeat the part of the previous context exactly, starting with", "\n\nRepeat the previous context exactly."};
    const struct kvb_vocab *v = kvb_model_vocab(m);
    for (int i = 0; i < 2 && !f->kz_ready; i++) {
        int32_t *ids = NULL, n = 0;
        f->kz_n[i] = 0;
        if (!v) continue; /* no vocabulary: the chunk alone */
        if (kvb_vocab_tokenize(v, text[i], strlen(text[i]), false, false, &ids, &n) != KVB_OK)
            return kvb_fail(KVB_ERR_NOMEM, "kvzip: out of memory for the repeat prompt's tokens");
        f->kz_n[i] = KVB_MIN(n, KVB_KVZIP_PROMPT_MAX - KVZIP_PREV_TAIL);
        memcpy(f->kz_prompt[i], ids, sizeof(int32_t) * (size_t)f->kz_n[i]);
        kvb_buffer_free(ids);
    }
    f->kz_ready = true;
    return KVB_OK;
}

kvb_status kvb_kvzip_reconstruct(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, struct kvb_cache *cache,
                                 const int32_t *tok, int64_t n, int64_t *pass_tokens) {
    const int64_t pos0 = kvb_cache_n_past(cache, 0) - n; /* the tokens' first position */
    int32_t in[KVB_KVZIP_CHUNK + KVB_KVZIP_PROMPT_MAX];
    kvb_status st = kvb_kvzip_prepare(m, f);
    for (int64_t a = 0; a < n && st == KVB_OK; a += KVB_KVZIP_CHUNK) {
        const int32_t len = (int32_t)KVB_MIN((int64_t)KVB_KVZIP_CHUNK, n - a), first = a == 0;
        int32_t np = f->kz_n[first];
        memcpy(in, f->kz_prompt[first], sizeof(int32_t) * (size_t)np);
        if (!first && np > 0) { /* "... starting with" the previous chunk's last tokens */
            memcpy(in + np, tok + a - KVZIP_PREV_TAIL, sizeof(int32_t) * KVZIP_PREV_TAIL);
            np += KVZIP_PREV_TAIL;
        }
        memcpy(in + np, tok + a, sizeof(int32_t) * (size_t)len);
        const int32_t total = np + len;
        if ((st = kvb_cache_recon_begin(cache, pos0 + a, pos0 + a + len)) != KVB_OK) break;
        for (int32_t i = 0; i < total && st == KVB_OK; i += f->rows) {
            const struct kvb_fwd_seg seg = {cache, 0, KVB_MIN(f->rows, total - i), false, NULL, false};
            st = kvb_forward(m, tp, f, in + i, &seg, 1, 0);
        }
        kvb_cache_recon_end(cache);
        if (pass_tokens && st == KVB_OK) *pass_tokens += total;
    }
    return st;
}

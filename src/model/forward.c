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
 * contiguous). Logits are computed only for the tokens asked for.
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
    float *x, *xb, *q, *k, *v, *att, *hg, *hu, *tmp; /* [chunk][...] */
    int64_t n_past;
};

struct kvb_context_params kvb_context_default_params(void) {
    struct kvb_context_params p;
    memset(&p, 0, sizeof p);
    p.policy = kvb_policy_default_params(KVB_POLICY_FULL);
    p.pos_mode = KVB_POS_POLICY_DEFAULT;
    p.kv_dtype = KVB_DTYPE_F16;
    p.block_size = 16;
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
    kvb_free(c->x); kvb_free(c->xb); kvb_free(c->q); kvb_free(c->k); kvb_free(c->v);
    kvb_free(c->att); kvb_free(c->hg); kvb_free(c->hu); kvb_free(c->tmp);
    kvb_free(c);
}

kvb_status kvb_context_init(const struct kvb_model *m, const struct kvb_context_params *params, struct kvb_context **out) {
    if (!m || !params || !out) return kvb_fail(KVB_ERR_INVALID, "context_init: model, params and out must not be NULL");
    if (params->chunk < 1 || params->chunk > 8192) return kvb_fail(KVB_ERR_INVALID, "context: chunk must be in 1..8192, got %d", (int)params->chunk);
    if (params->n_threads < 1 || params->n_threads > 1024) return kvb_fail(KVB_ERR_INVALID, "context: n_threads must be in 1..1024, got %d", (int)params->n_threads);
    if (params->n_ctx < 0) return kvb_fail(KVB_ERR_INVALID, "context: n_ctx must be >= 0");
    if (params->max_distance < 0) return kvb_fail(KVB_ERR_INVALID, "context: max_distance must be >= 0");
    const struct kvb_model_info *in = &m->info;
    struct kvb_context *c = kvb_calloc(1, sizeof *c);
    if (!c) return kvb_fail(KVB_ERR_NOMEM, "context: out of memory");
    c->m = m;
    c->p = *params;
    if (!c->p.n_ctx) c->p.n_ctx = in->n_ctx_train;
    c->chunk = params->chunk;
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = in->n_layer;
    cp.n_kv_head = in->n_head_kv;
    cp.head_dim = in->head_dim;
    cp.dtype = params->kv_dtype;
    cp.block_size = params->block_size;
    cp.pos_mode = params->pos_mode;
    cp.rope = (struct kvb_rope){in->rope_type, in->rope_dims, in->rope_base, in->rope_freq_scale, m->rope_freqs};
    cp.policy = params->policy;
    cp.pool_bytes = params->kv_pool_bytes;
    cp.max_distance = params->max_distance > 0 ? params->max_distance : in->n_ctx_train; /* KVB_POS_CAPPED (lminfinite) */
    kvb_status st = kvb_cache_init(NULL, &cp, &c->cache);
    if (st == KVB_OK) st = kvb_threadpool_init(params->n_threads, &c->tp);
    if (st != KVB_OK) {
        kvb_context_free(c);
        return st;
    }
    const size_t T = (size_t)c->chunk, E = (size_t)in->n_embd, QD = (size_t)in->n_head * in->head_dim,
                 KD = (size_t)in->n_head_kv * in->head_dim, F = (size_t)in->n_ff;
    c->x = kvb_malloc(sizeof(float) * T * E);
    c->xb = kvb_malloc(sizeof(float) * T * E);
    c->q = kvb_malloc(sizeof(float) * T * QD);
    c->k = kvb_malloc(sizeof(float) * T * KD);
    c->v = kvb_malloc(sizeof(float) * T * KD);
    c->att = kvb_malloc(sizeof(float) * T * QD);
    c->hg = kvb_malloc(sizeof(float) * T * F);
    c->hu = kvb_malloc(sizeof(float) * T * F);
    c->tmp = kvb_malloc(sizeof(float) * T * KVB_MAX(E, QD));
    if (!c->x || !c->xb || !c->q || !c->k || !c->v || !c->att || !c->hg || !c->hu || !c->tmp) {
        kvb_context_free(c);
        return kvb_fail(KVB_ERR_NOMEM, "context: out of memory for activations (chunk %d)", (int)c->chunk);
    }
    *out = c;
    return KVB_OK;
}

void kvb_context_reset(struct kvb_context *c) {
    kvb_cache_reset(c->cache);
    c->n_past = 0;
}

struct kvb_cache *kvb_context_cache(struct kvb_context *c) { return c->cache; }

kvb_status kvb_context_save(const struct kvb_context *c, const char *path) { return kvb_cache_save_file(c->cache, path); }

kvb_status kvb_context_load(struct kvb_context *c, const char *path) {
    struct kvb_cache *nc;
    kvb_status st = kvb_cache_load_file(NULL, path, c->p.kv_pool_bytes, &nc);
    if (st != KVB_OK) return st;
    const struct kvb_cache_params *p = kvb_cache_get_params(nc);
    const struct kvb_model_info *in = &c->m->info;
    if (p->n_layer != in->n_layer || p->n_kv_head != in->n_head_kv || p->head_dim != in->head_dim || p->rope.type != in->rope_type) {
        kvb_cache_free(nc);
        return kvb_fail(KVB_ERR_INVALID, "%s: the saved cache (%d layers, %d KV heads, %d dims) does not fit this model (%d, %d, %d)", path,
                        (int)p->n_layer, (int)p->n_kv_head, (int)p->head_dim, (int)in->n_layer, (int)in->n_head_kv, (int)in->head_dim);
    }
    kvb_cache_free(c->cache);
    c->cache = nc;
    c->n_past = kvb_cache_n_past(nc, 0);
    return KVB_OK;
}
int64_t kvb_context_n_past(const struct kvb_context *c) { return c->n_past; }

static void rmsnorm(float *o, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) o[i] = x[i] * s * w[i];
}

static void embed_row(const struct kvb_mat *e, int32_t tok, float *out) {
    kvb_dequantize_row(e->type, e->data + (size_t)tok * e->row_bytes, out, e->n_in);
}

/* One chunk of T tokens. */
static kvb_status forward_chunk(struct kvb_context *c, const int32_t *tok, int32_t T, float *logits, bool all, bool prompt) {
    const struct kvb_model *m = c->m;
    const struct kvb_model_info *in = &m->info;
    const int64_t E = in->n_embd, QD = (int64_t)in->n_head * in->head_dim, KD = (int64_t)in->n_head_kv * in->head_dim, F = in->n_ff;
    for (int32_t t = 0; t < T; t++) embed_row(&m->tok_embd, tok[t], c->x + (size_t)t * E);
    for (int32_t l = 0; l < in->n_layer; l++) {
        const struct kvb_layer *L = &m->layers[l];
        for (int32_t t = 0; t < T; t++) rmsnorm(c->xb + (size_t)t * E, c->x + (size_t)t * E, L->attn_norm, E, in->rms_eps);
        kvb_matmul(c->tp, &L->wq, c->xb, E, c->q, QD, T);
        kvb_matmul(c->tp, &L->wk, c->xb, E, c->k, KD, T);
        kvb_matmul(c->tp, &L->wv, c->xb, E, c->v, KD, T);
        if (L->bq)
            for (int32_t t = 0; t < T; t++) {
                for (int64_t i = 0; i < QD; i++) c->q[(size_t)t * QD + i] += L->bq[i];
                for (int64_t i = 0; i < KD; i++) {
                    c->k[(size_t)t * KD + i] += L->bk[i];
                    c->v[(size_t)t * KD + i] += L->bv[i];
                }
            }
        kvb_status st = T == 1 && !prompt ? kvb_cache_decode(c->cache, l, c->q, in->n_head, c->k, c->v, c->att, c->tp)
                               : kvb_cache_prefill(c->cache, l, T, c->q, in->n_head, c->k, c->v, c->att, c->tp);
        if (st != KVB_OK) return st;
        kvb_matmul(c->tp, &L->wo, c->att, QD, c->tmp, E, T);
        for (size_t i = 0; i < (size_t)T * E; i++) c->x[i] += c->tmp[i];
        for (int32_t t = 0; t < T; t++) rmsnorm(c->xb + (size_t)t * E, c->x + (size_t)t * E, L->ffn_norm, E, in->rms_eps);
        kvb_matmul(c->tp, &L->w_gate, c->xb, E, c->hg, F, T);
        kvb_matmul(c->tp, &L->w_up, c->xb, E, c->hu, F, T);
        for (size_t i = 0; i < (size_t)T * F; i++) {
            float g = c->hg[i];
            c->hg[i] = g / (1.0f + expf(-g)) * c->hu[i];
        }
        kvb_matmul(c->tp, &L->w_down, c->hg, F, c->tmp, E, T);
        for (size_t i = 0; i < (size_t)T * E; i++) c->x[i] += c->tmp[i];
    }
    if (!logits) return KVB_OK;
    const int32_t first = all ? 0 : T - 1;
    for (int32_t t = first; t < T; t++) rmsnorm(c->xb + (size_t)(t - first) * E, c->x + (size_t)t * E, m->output_norm, E, in->rms_eps);
    kvb_matmul(c->tp, &m->output, c->xb, E, logits, in->n_vocab, T - first);
    return KVB_OK;
}

static kvb_status eval_tokens(struct kvb_context *c, const int32_t *tokens, int32_t n, float *logits, bool all, bool prompt) {
    if (!c || (!tokens && n)) return kvb_fail(KVB_ERR_INVALID, "context_eval: bad arguments");
    if (n <= 0) return KVB_OK;
    const int32_t V = c->m->info.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V) return kvb_fail(KVB_ERR_INVALID, "context_eval: token %d is out of range 0..%d", (int)tokens[i], (int)V - 1);
    if (c->p.policy.id == KVB_POLICY_FULL && c->n_past + n > c->p.n_ctx)
        return kvb_fail(KVB_ERR_INVALID, "context full: %lld + %d tokens exceed n_ctx %d (policy full keeps every token; use a bounded policy or a larger --ctx)",
                        (long long)c->n_past, (int)n, (int)c->p.n_ctx);
    for (int32_t i = 0; i < n; i += c->chunk) {
        int32_t T = KVB_MIN(c->chunk, n - i);
        bool last = i + T == n;
        float *lg = all ? logits + (size_t)i * V : (last ? logits : NULL);
        kvb_status st = forward_chunk(c, tokens + i, T, lg, all, prompt);
        if (st != KVB_OK) return st;
        c->n_past += T;
    }
    return KVB_OK;
}

kvb_status kvb_context_eval(struct kvb_context *c, const int32_t *tokens, int32_t n, float *logits, bool all) {
    return eval_tokens(c, tokens, n, logits, all, false);
}

kvb_status kvb_context_prompt(struct kvb_context *c, const int32_t *tokens, int32_t n, float *logits, bool all) {
    kvb_status st = eval_tokens(c, tokens, n, logits, all, true);
    if (st == KVB_OK && c) kvb_cache_compress(c->cache, c->tp);
    return st;
}

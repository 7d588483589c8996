/*
 * ppl.c — the perplexity protocol of ../shared/data/README.md, which the
 * reference numbers (run.c's forward) were measured with: paragraphs split on
 * "\n\n", inner newlines as spaces, [BOS] + encode(paragraph) concatenated,
 * non-overlapping windows of W tokens with a fresh cache each, every
 * next-token prediction inside a window scored with full attention.
 * NLL is accumulated in double from a log-sum-exp per row.
 */
#include "../core/core.h"

#include <time.h>

#include <math.h>

kvb_status kvb_eval_tokenize_paragraphs(const struct kvb_model *m, const char *text, size_t len, int32_t **ids, int64_t *n) {
    if (!m || (!text && len) || !ids || !n) return kvb_fail(KVB_ERR_INVALID, "eval: bad arguments");
    int64_t cap = 1024, cnt = 0;
    int32_t *out = kvb_malloc(sizeof(int32_t) * (size_t)cap);
    char *para = kvb_malloc(len + 1);
    if (!out || !para) {
        kvb_free(out);
        kvb_free(para);
        return kvb_fail(KVB_ERR_NOMEM, "eval: out of memory");
    }
    size_t at = 0;
    while (at <= len) {
        size_t end = at;
        while (end < len && !(text[end] == '\n' && end + 1 < len && text[end + 1] == '\n')) end++;
        size_t pl = 0;
        for (size_t i = at; i < end; i++) para[pl++] = text[i] == '\n' ? ' ' : text[i];
        if (pl) {
            int32_t *t;
            int32_t nt;
            kvb_status st = kvb_vocab_tokenize(kvb_model_vocab(m), para, pl, true, false, &t, &nt);
            if (st != KVB_OK) {
                kvb_free(out);
                kvb_free(para);
                return st;
            }
            if (kvb_grow((void **)&out, &cap, cnt + nt, sizeof(int32_t)) != KVB_OK) {
                kvb_free(t);
                kvb_free(out);
                kvb_free(para);
                return kvb_fail(KVB_ERR_NOMEM, "eval: out of memory");
            }
            memcpy(out + cnt, t, sizeof(int32_t) * (size_t)nt);
            cnt += nt;
            kvb_free(t);
        }
        if (end >= len) break;
        at = end + 2;
    }
    kvb_free(para);
    *ids = out;
    *n = cnt;
    return KVB_OK;
}

kvb_status kvb_eval_window_nll(const struct kvb_model *m, const int32_t *ids, int64_t n, int32_t W, int32_t n_threads,
                               int64_t max_windows, double *sum_nll, int64_t *count) {
    if (!m || !ids || W < 2 || !sum_nll || !count) return kvb_fail(KVB_ERR_INVALID, "eval: bad arguments (window must be >= 2)");
    struct kvb_context_params cp = kvb_context_default_params();
    cp.kv.kv_dtype = KVB_DTYPE_F32;
    cp.n_threads = n_threads;
    cp.n_ctx = W;
    cp.chunk = W;
    cp.kv_pool_bytes = (size_t)1 << 30;
    struct kvb_context *c;
    kvb_status st = kvb_context_init(m, &cp, &c);
    if (st != KVB_OK) return st;
    const int32_t V = kvb_vocab_size(kvb_model_vocab(m));
    float *logits = kvb_malloc(sizeof(float) * (size_t)W * (size_t)V);
    if (!logits) {
        kvb_context_free(c);
        return kvb_fail(KVB_ERR_NOMEM, "eval: out of memory for %d x %d logits", (int)W, (int)V);
    }
    int64_t windows = 0;
    for (int64_t w0 = 0; w0 + 1 < n; w0 += W) {
        if (max_windows > 0 && windows == max_windows) break;
        int32_t T = (int32_t)KVB_MIN((int64_t)W, n - w0);
        kvb_context_reset(c);
        if ((st = kvb_context_eval(c, ids + w0, T, logits, true)) != KVB_OK) break;
        for (int32_t t = 0; t + 1 < T; t++) {
            const float *lg = logits + (size_t)t * V;
            float mx = lg[0];
            for (int32_t i = 1; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
            double z = 0;
            for (int32_t i = 0; i < V; i++) z += exp((double)lg[i] - mx);
            *sum_nll += (double)mx + log(z) - (double)lg[ids[w0 + t + 1]];
            (*count)++;
        }
        windows++;
    }
    kvb_free(logits);
    kvb_context_free(c);
    return st;
}

/* ---- kvb_eval_ppl: a policy against baselines on one token stream ---- */

#include <stdlib.h>

struct kvb_ppl_params kvb_ppl_default_params(void) {
    struct kvb_ppl_params p;
    memset(&p, 0, sizeof p);
    p.kv = kvb_kv_default_params();
    p.kv.policy = kvb_policy_default_params(KVB_POLICY_STREAMING);
    p.kv.kv_dtype = KVB_DTYPE_F32; /* the policy, not KV rounding */
    p.chunk = 1;
    p.baseline = KVB_BASELINE_NONE;
    p.n_threads = 1;
    p.segment = 256;
    return p;
}

void kvb_ppl_result_free(struct kvb_ppl_result *r) {
    if (!r) return;
    kvb_free(r->mass_layer);
    kvb_free(r->sink_mass_layer);
    kvb_free(r->nll_tok);
    kvb_free(r->base_nll_tok);
    kvb_free(r->seg_ppl);
    memset(r, 0, sizeof *r);
}

/* log-softmax pieces: returns log Z, writes the argmax */
static double log_z(const float *lg, int32_t V, int32_t *argmax) {
    float mx = lg[0];
    int32_t am = 0;
    for (int32_t i = 1; i < V; i++)
        if (lg[i] > mx) { mx = lg[i]; am = i; }
    double z = 0;
    for (int32_t i = 0; i < V; i++) z += exp((double)lg[i] - mx);
    if (argmax) *argmax = am;
    return (double)mx + log(z);
}

struct mass_state {
    const struct kvb_context *policy_ctx;
    int32_t H;
    int64_t pos;         /* position of the query */
    float *full_rows;    /* [L][H][n] full attention rows of this step */
    int64_t stride;
    double *acc;         /* [L][H] summed retained mass */
    double *sink;        /* [L][H] summed mass on position 0 */
    int64_t *cnt;        /* [L][H] */
    const int32_t *kv_source; /* [L] the layer whose slots a KV-shared layer (Gemma 4) reads, -1 its own; NULL: own */
};

static void full_observer(void *user, int32_t layer, int32_t head, const float *w, int32_t n) {
    struct mass_state *ms = user;
    float *dst = ms->full_rows + ((size_t)layer * ms->H + head) * (size_t)ms->stride;
    memcpy(dst, w, sizeof(float) * (size_t)n); /* full cache: logical j == position j */
}

static void policy_observer(void *user, int32_t layer, int32_t head, const float *w, int32_t n) {
    (void)w;
    struct mass_state *ms = user;
    const struct kvb_cache *c = kvb_context_cache((struct kvb_context *)ms->policy_ctx);
    const float *full = ms->full_rows + ((size_t)layer * ms->H + head) * (size_t)ms->stride;
    const int32_t held = ms->kv_source && ms->kv_source[layer] >= 0 ? ms->kv_source[layer] : layer; /* a reader attends its source's slots */
    double m = 0;
    for (int32_t j = 0; j < n; j++) {
        struct kvb_slot_info si;
        if (kvb_cache_slot_info(c, held, head, j, &si) == KVB_OK && si.pos_original <= ms->pos) m += full[si.pos_original];
    }
    const size_t k = (size_t)layer * ms->H + head;
    ms->acc[k] += m;
    ms->sink[k] += full[0];
    ms->cnt[k]++;
}

struct ppl_acc {
    double sum, sum_b, kl;
    int64_t agree;
};

/* Scores prediction k (target token `target`) from the policy's logits a and,
 * with a full-cache run, its logits b. */
static void score_one(struct kvb_ppl_result *out, const struct kvb_ppl_params *p, struct ppl_acc *acc, int64_t k, int32_t target,
                      const float *a, const float *b, int32_t V) {
    int32_t am_p;
    double lzp = log_z(a, V, &am_p);
    out->nll_tok[k] = lzp - a[target];
    acc->sum += out->nll_tok[k];
    if (b && p->baseline == KVB_BASELINE_FULL) {
        int32_t am_f;
        double lzf = log_z(b, V, &am_f);
        out->base_nll_tok[k] = lzf - b[target];
        acc->sum_b += out->base_nll_tok[k];
        double kl = 0; /* KL(full || policy) = sum pf (log pf - log pp) */
        for (int32_t v = 0; v < V; v++) {
            double lpf = b[v] - lzf, lpp = a[v] - lzp;
            kl += exp(lpf) * (lpf - lpp);
        }
        acc->kl += kl;
        acc->agree += am_f == am_p;
    }
}

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

kvb_status kvb_eval_ppl(const struct kvb_model *m, const int32_t *ids, int64_t n, const struct kvb_ppl_params *p, struct kvb_ppl_result *out) {
    if (!m || !ids || !p || !out || n < 2) return kvb_fail(KVB_ERR_INVALID, "eval_ppl: needs a model and at least 2 tokens");
    memset(out, 0, sizeof *out);
    struct kvb_model_info info;
    kvb_model_get_info(m, &info);
    const struct kvb_model_info *in = &info;
    const int32_t V = in->n_vocab, C = p->chunk, P = p->prompt;
    const bool bounded = p->kv.policy.id != KVB_POLICY_FULL;
    const bool compress_prompt = P > 0 && kvb_policy_params_compress(&p->kv.policy);
    const int32_t B = p->kv.policy.budget;
    if (C < 1 || C > 8192) return kvb_fail(KVB_ERR_INVALID, "eval_ppl: chunk must be in 1..8192");
    if (p->mass && (C != 1)) return kvb_fail(KVB_ERR_INVALID, "eval_ppl: --mass needs one token per step (chunk 1)");
    if (P < 0 || P >= n) return kvb_fail(KVB_ERR_INVALID, "eval_ppl: prompt must be in 0..%lld (the text has %lld tokens), got %d", (long long)n - 1, (long long)n, (int)P);
    if (P > 0 && (p->mass || p->baseline == KVB_BASELINE_RECOMPUTE))
        return kvb_fail(KVB_ERR_INVALID, "eval_ppl: --prompt works with the full baseline only, and without --mass");
    if (bounded && !compress_prompt && B - C <= p->kv.policy.n_sink)
        return kvb_fail(KVB_ERR_INVALID, "eval_ppl: budget %d leaves no room beyond %d sinks with chunk %d (a query attends to at most budget tokens)",
                        (int)B, (int)p->kv.policy.n_sink, (int)C);
    struct kvb_context_params cp = kvb_context_default_params();
    cp.kv = p->kv;
    if (bounded && !compress_prompt) cp.kv.policy.budget = B - C;
    cp.n_threads = p->n_threads;
    cp.chunk = compress_prompt ? KVB_MAX(C, 256) : C; /* a compressed prompt is read in big chunks */
    cp.n_ctx = (int32_t)KVB_MIN(n + 8, (int64_t)INT32_MAX);
    /* the one sizing rule: the policy's peak for the prompt (or the first chunk), the whole text under full */
    cp.kv_pool_bytes = kvb_model_kv_seq_bytes(m, &cp.kv, n, P > 0 ? P : C, cp.chunk);
    struct kvb_context *pc = NULL, *fc = NULL, *rc = NULL;
    float *lp = NULL, *lf = NULL;
    struct mass_state ms = {0};
    kvb_status st = kvb_context_init(m, &cp, &pc);
    const bool full_run = p->baseline == KVB_BASELINE_FULL || p->mass;
    if (st == KVB_OK && (full_run || p->baseline == KVB_BASELINE_RECOMPUTE)) {
        struct kvb_context_params fp = cp;
        fp.kv = kvb_kv_default_params(); /* full */
        fp.kv.pos_mode = KVB_POS_ORIGINAL;
        fp.kv.kv_dtype = KVB_DTYPE_F32; /* unquantized: the baseline of what the policy and the bits cost */
        fp.kv.max_distance = p->kv.max_distance;
        fp.kv_pool_bytes = kvb_model_kv_seq_bytes(m, &fp.kv, n, n, cp.chunk);
        if (full_run) st = kvb_context_init(m, &fp, &fc);
        if (st == KVB_OK && p->baseline == KVB_BASELINE_RECOMPUTE) {
            fp.chunk = KVB_MAX(B, 1);
            st = kvb_context_init(m, &fp, &rc);
        }
    }
    const int64_t first = P > 0 ? P - 1 : 0; /* the first scored prediction: of token first + 1 */
    const int64_t T = n - 1 - first;         /* scored predictions */
    out->nll_tok = kvb_calloc((size_t)T, sizeof(double));
    if (p->baseline != KVB_BASELINE_NONE) out->base_nll_tok = kvb_calloc((size_t)T, sizeof(double));
    lp = kvb_malloc(sizeof(float) * (size_t)C * V);
    lf = kvb_malloc(sizeof(float) * (size_t)C * V);
    if (st == KVB_OK && (!out->nll_tok || (p->baseline != KVB_BASELINE_NONE && !out->base_nll_tok) || !lp || !lf))
        st = kvb_fail(KVB_ERR_NOMEM, "eval_ppl: out of memory");
    if (st == KVB_OK && p->mass) {
        ms.policy_ctx = pc;
        ms.H = in->n_head_kv;
        struct kvb_cache_params pcp;
        kvb_cache_get_params(kvb_context_cache(pc), &pcp);
        ms.kv_source = pcp.kv_source;
        ms.stride = n;
        ms.full_rows = kvb_calloc((size_t)in->n_layer * in->n_head_kv * (size_t)n, sizeof(float));
        ms.acc = kvb_calloc((size_t)in->n_layer * in->n_head_kv, sizeof(double));
        ms.sink = kvb_calloc((size_t)in->n_layer * in->n_head_kv, sizeof(double));
        ms.cnt = kvb_calloc((size_t)in->n_layer * in->n_head_kv, sizeof(int64_t));
        if (!ms.full_rows || !ms.acc || !ms.sink || !ms.cnt) st = kvb_fail(KVB_ERR_NOMEM, "eval_ppl: out of memory for --mass rows (%lld tokens)", (long long)n);
        else {
            kvb_cache_set_observer(kvb_context_cache(fc), full_observer, &ms);
            kvb_cache_set_observer(kvb_context_cache(pc), policy_observer, &ms);
        }
    }
    struct ppl_acc acc = {0};
    double t_policy = 0;
    int64_t g_start = 0; /* next token to feed */
    if (st == KVB_OK && P > 0) {
        /* the prompt: the full baseline reads it whole; the policy through kvb_context_prompt
         * (compress policies in big chunks, decode-time ones `chunk` tokens per step) */
        if (fc) st = kvb_context_eval(fc, ids, P, lf, false);
        const double t0 = now_sec();
        if (st == KVB_OK && compress_prompt) st = kvb_context_prompt(pc, ids, P, lp, false);
        for (int64_t i = 0; st == KVB_OK && !compress_prompt && i < P; i += C) {
            const int32_t c = (int32_t)KVB_MIN((int64_t)C, P - i);
            st = i + c < P ? kvb_context_eval(pc, ids + i, c, NULL, false) : kvb_context_prompt(pc, ids + i, c, lp, false);
        }
        t_policy += now_sec() - t0;
        if (st == KVB_OK) {
            struct kvb_cache_stats ps;
            kvb_cache_get_stats(kvb_context_cache(pc), &ps);
            out->prompt_kept = (double)ps.slots / ((double)(in->n_layer - in->n_rec_layers) * in->n_head_kv); /* streams of the attention layers */
            out->prompt_kept_min = ps.slots_min;
            out->prompt_kept_max = ps.slots_max;
            kvb_context_kvzip_cost(pc, &out->kvzip_pass_tokens, &out->kvzip_context_tokens);
            score_one(out, p, &acc, 0, ids[P], lp, fc ? lf : NULL, V);
            g_start = P;
        }
    }
    for (int64_t g0 = g_start; st == KVB_OK && g0 < n - 1; g0 += C) {
        const int32_t c = (int32_t)KVB_MIN((int64_t)C, n - 1 - g0);
        ms.pos = g0;
        if (fc && (st = kvb_context_eval(fc, ids + g0, c, lf, true)) != KVB_OK) break; /* full first: --mass reads its rows */
        const double t0 = now_sec();
        if ((st = kvb_context_eval(pc, ids + g0, c, lp, true)) != KVB_OK) break;
        t_policy += now_sec() - t0;
        for (int32_t i = 0; i < c; i++) {
            const int64_t g = g0 + i;
            score_one(out, p, &acc, g - first, ids[g + 1], lp + (size_t)i * V, fc ? lf + (size_t)i * V : NULL, V);
            if (rc) { /* recompute: the last B tokens, from scratch, at 0..B-1 */
                int64_t s0 = KVB_MAX((int64_t)0, g - B + 1);
                kvb_context_reset(rc);
                if ((st = kvb_context_eval(rc, ids + s0, (int32_t)(g - s0 + 1), lf, false)) != KVB_OK) break;
                out->base_nll_tok[g] = log_z(lf, V, NULL) - lf[ids[g + 1]];
                acc.sum_b += out->base_nll_tok[g];
            }
        }
        if (p->progress) p->progress(g0 + c - first, T, p->user);
    }
    if (st == KVB_OK) {
        out->tokens = T;
        out->nll = acc.sum / (double)T;
        out->ppl = exp(out->nll);
        if (p->baseline != KVB_BASELINE_NONE) {
            out->has_baseline = true;
            out->base_nll = acc.sum_b / (double)T;
            out->base_ppl = exp(out->base_nll);
        }
        if (p->baseline == KVB_BASELINE_FULL) {
            out->has_kl = true;
            out->kl = acc.kl / (double)T;
            out->top1 = (double)acc.agree / (double)T;
        }
        out->tok_per_s = t_policy > 0 ? (double)T / t_policy : 0;
        struct kvb_cache_stats cs;
        kvb_cache_get_stats(kvb_context_cache(pc), &cs);
        out->kv_bytes_peak = cs.bytes_peak;
        out->recall_bytes = cs.recall_bytes;
        out->cold_pages = cs.cold_pages;
        out->recall_score_s = cs.recall_score_s;
        out->recall_load_s = cs.recall_load_s;
        const int32_t seg = KVB_MAX(p->segment, 1);
        out->n_seg = (int32_t)((T + seg - 1) / seg);
        out->seg_ppl = kvb_calloc((size_t)out->n_seg, sizeof(double));
        for (int32_t s = 0; out->seg_ppl && s < out->n_seg; s++) {
            double a = 0;
            int64_t k0 = (int64_t)s * seg, k1 = KVB_MIN(T, k0 + seg);
            for (int64_t k = k0; k < k1; k++) a += out->nll_tok[k];
            out->seg_ppl[s] = exp(a / (double)(k1 - k0));
        }
        if (p->mass) {
            out->has_mass = true;
            out->n_layer = in->n_layer;
            out->mass_layer = kvb_calloc((size_t)in->n_layer, sizeof(double));
            out->sink_mass_layer = kvb_calloc((size_t)in->n_layer, sizeof(double));
            double tot = 0, tots = 0;
            int32_t n_attn = 0; /* layers with attention: a hybrid's Gated DeltaNet layers have none (NaN) */
            for (int32_t l = 0; out->mass_layer && out->sink_mass_layer && l < in->n_layer; l++) {
                double a = 0, s2 = 0;
                int64_t c2 = 0;
                for (int32_t h = 0; h < in->n_head_kv; h++) {
                    a += ms.acc[(size_t)l * in->n_head_kv + h];
                    s2 += ms.sink[(size_t)l * in->n_head_kv + h];
                    c2 += ms.cnt[(size_t)l * in->n_head_kv + h];
                }
                if (in->n_rec_layers && !c2) { /* no attention on this layer */
                    out->mass_layer[l] = out->sink_mass_layer[l] = NAN;
                    continue;
                }
                out->mass_layer[l] = c2 ? a / (double)c2 : 0;
                out->sink_mass_layer[l] = c2 ? s2 / (double)c2 : 0;
                tot += out->mass_layer[l];
                tots += out->sink_mass_layer[l];
                n_attn++;
            }
            out->mass = n_attn ? tot / n_attn : 0;
            out->sink_mass = n_attn ? tots / n_attn : 0;
        }
    }
    kvb_free(ms.full_rows); kvb_free(ms.acc); kvb_free(ms.sink); kvb_free(ms.cnt);
    kvb_free(lp);
    kvb_free(lf);
    kvb_context_free(pc);
    kvb_context_free(fc);
    kvb_context_free(rc);
    if (st != KVB_OK) kvb_ppl_result_free(out);
    return st;
}

/*
 * ppl.c — the perplexity protocol of ../shared/data/README.md, which the
 * reference numbers (run.c's forward) were measured with: paragraphs split on
 * "\n\n", inner newlines as spaces, [BOS] + encode(paragraph) concatenated,
 * non-overlapping windows of W tokens with a fresh cache each, every
 * next-token prediction inside a window scored with full attention.
 * NLL is accumulated in double from a log-sum-exp per row.
 */
#include "../core/core.h"

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
            kvb_status st = kvb_tokenize(m, para, pl, true, false, &t, &nt);
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
    cp.kv_dtype = KVB_DTYPE_F32;
    cp.n_threads = n_threads;
    cp.n_ctx = W;
    cp.chunk = W;
    cp.kv_pool_bytes = (size_t)1 << 30;
    struct kvb_context *c;
    kvb_status st = kvb_context_init(m, &cp, &c);
    if (st != KVB_OK) return st;
    const int32_t V = kvb_n_vocab(m);
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

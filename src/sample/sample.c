/*
 * sample.c — token samplers, applied in llama.cpp's order: logit bias,
 * the penalties over the last repeat_last_n tokens (repetition: divide or
 * multiply; presence and frequency: OpenAI's subtraction), then (temp <= 0)
 * argmax, or top-k, softmax at temperature, top-p, min-p, and a draw from
 * a seeded splitmix64 stream. Candidates are sorted once by logit
 * (descending, ties by id) so every filter is a prefix cut. -INFINITY
 * logits (a ban, a grammar's mask) are never drawn while any finite one
 * remains.
 */
#include "../core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
    float logit;
    int32_t id;
};

struct kvb_sampler {
    struct kvb_sampler_params p;
    int32_t n_vocab;
    struct cand *c;
    float *prob;
    uint64_t rng;
    struct kvb_logit_bias *bias; /* own copy */
    int32_t *count;              /* [n_vocab] occurrences in the penalty window, zero between calls */
};

struct kvb_sampler_params kvb_sampler_default_params(void) {
    struct kvb_sampler_params p = {0.8f, 40, 0.95f, 0.05f, 1.0f, 64, 0, 0.0f, 0.0f, NULL, 0};
    return p;
}

kvb_status kvb_sampler_init(const struct kvb_sampler_params *p, int32_t n_vocab, struct kvb_sampler **out) {
    if (!p || !out || n_vocab < 1) return kvb_fail(KVB_ERR_INVALID, "sampler: bad arguments");
    if (!(p->temp >= 0 || p->temp < 0) || p->top_k < 0 || !(p->top_p > 0 && p->top_p <= 1) || !(p->min_p >= 0 && p->min_p <= 1) ||
        !(p->repeat_penalty > 0) || p->repeat_last_n < 0)
        return kvb_fail(KVB_ERR_INVALID, "sampler: parameters out of range (top_p in (0,1], min_p in [0,1], repeat_penalty > 0)");
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return kvb_fail(KVB_ERR_INVALID, "sampler: presence_penalty and frequency_penalty must be finite");
    if (p->n_logit_bias < 0 || p->n_logit_bias > 65536 || (p->n_logit_bias && !p->logit_bias))
        return kvb_fail(KVB_ERR_INVALID, "sampler: n_logit_bias %d outside 0..65536 (or logit_bias NULL)", (int)p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= n_vocab)
            return kvb_fail(KVB_ERR_INVALID, "sampler: logit_bias token %d is outside the vocabulary (0..%d)", (int)p->logit_bias[i].token, (int)n_vocab - 1);
        if (isnan(p->logit_bias[i].bias) || p->logit_bias[i].bias == INFINITY)
            return kvb_fail(KVB_ERR_INVALID, "sampler: logit_bias of token %d is %g (want a number, or -inf to ban it)", (int)p->logit_bias[i].token,
                            (double)p->logit_bias[i].bias);
    }
    struct kvb_sampler *s = kvb_calloc(1, sizeof *s);
    if (!s) return kvb_fail(KVB_ERR_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->c = kvb_malloc(sizeof *s->c * (size_t)n_vocab);
    s->prob = kvb_malloc(sizeof(float) * (size_t)n_vocab);
    s->count = kvb_calloc((size_t)n_vocab, sizeof *s->count);
    if (p->n_logit_bias) {
        s->bias = kvb_malloc(sizeof *s->bias * (size_t)p->n_logit_bias);
        if (s->bias) memcpy(s->bias, p->logit_bias, sizeof *s->bias * (size_t)p->n_logit_bias);
    }
    s->p.logit_bias = s->bias;
    if (!s->c || !s->prob || !s->count || (p->n_logit_bias && !s->bias)) {
        kvb_sampler_free(s);
        return kvb_fail(KVB_ERR_NOMEM, "sampler: out of memory");
    }
    s->rng = p->seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    *out = s;
    return KVB_OK;
}

void kvb_sampler_free(struct kvb_sampler *s) {
    if (!s) return;
    kvb_free(s->c);
    kvb_free(s->prob);
    kvb_free(s->count);
    kvb_free(s->bias);
    kvb_free(s);
}


static int cmp_cand(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

void kvb_sampler_adjust(const struct kvb_sampler *s, float *logits, const int32_t *hist, int32_t n_hist) {
    const int32_t V = s->n_vocab;
    for (int32_t i = 0; i < s->p.n_logit_bias; i++) logits[s->bias[i].token] += s->bias[i].bias;
    const bool rep = s->p.repeat_penalty != 1.0f, pf = s->p.presence_penalty != 0.0f || s->p.frequency_penalty != 0.0f;
    if (!hist || n_hist <= 0 || (!rep && !pf)) return;
    const int32_t from = n_hist > s->p.repeat_last_n ? n_hist - s->p.repeat_last_n : 0;
    int32_t *cnt = s->count; /* zero on entry and on return */
    for (int32_t i = from; i < n_hist; i++)
        if (hist[i] >= 0 && hist[i] < V) cnt[hist[i]]++;
    for (int32_t i = from; i < n_hist; i++) {
        const int32_t t = hist[i];
        if (t < 0 || t >= V || !cnt[t]) continue; /* out of range, or done: each token once */
        float l = logits[t];
        if (rep) l = l > 0 ? l / s->p.repeat_penalty : l * s->p.repeat_penalty;
        l -= (float)cnt[t] * s->p.frequency_penalty + s->p.presence_penalty;
        logits[t] = l;
        cnt[t] = 0;
    }
}

int32_t kvb_sampler_pick(struct kvb_sampler *s, const float *logits) {
    const int32_t V = s->n_vocab;
    if (s->p.temp <= 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    int32_t n = 0;
    for (int32_t i = 0; i < V; i++)
        if (logits[i] > -INFINITY) s->c[n++] = (struct cand){logits[i], i};
    if (n == 0) return 0; /* everything banned: nothing better to say */
    qsort(s->c, (size_t)n, sizeof *s->c, cmp_cand); /* O(V log V) per token: small next to the forward pass */
    if (s->p.top_k > 0 && s->p.top_k < n) n = s->p.top_k;
    double z = 0;
    const float mx = s->c[0].logit;
    for (int32_t i = 0; i < n; i++) {
        s->prob[i] = expf((s->c[i].logit - mx) / s->p.temp);
        z += s->prob[i];
    }
    for (int32_t i = 0; i < n; i++) s->prob[i] = (float)(s->prob[i] / z);
    if (s->p.top_p < 1.0f) {
        double cum = 0;
        int32_t k = 0;
        while (k < n) {
            cum += s->prob[k++];
            if (cum >= s->p.top_p) break;
        }
        n = KVB_MAX(k, 1);
    }
    if (s->p.min_p > 0) {
        const float thr = s->p.min_p * s->prob[0];
        int32_t k = 1;
        while (k < n && s->prob[k] >= thr) k++;
        n = k;
    }
    double tot = 0;
    for (int32_t i = 0; i < n; i++) tot += s->prob[i];
    double r = kvb_rand_unit(&s->rng) * tot, acc = 0;
    for (int32_t i = 0; i < n; i++) {
        acc += s->prob[i];
        if (r < acc) return s->c[i].id;
    }
    return s->c[n - 1].id;
}

int32_t kvb_sampler_sample(struct kvb_sampler *s, float *logits, const int32_t *hist, int32_t n_hist) {
    kvb_sampler_adjust(s, logits, hist, n_hist);
    return kvb_sampler_pick(s, logits);
}

static int cmp_top(const void *a, const void *b) { return cmp_cand(a, b); }

float kvb_logprobs(const float *logits, int32_t V, int32_t token, int32_t k, int32_t *top_ids, float *top_lp) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double z = 0;
    for (int32_t i = 0; i < V; i++) z += exp((double)logits[i] - mx);
    const double lz = (double)mx + log(z);
    if (k > V) k = V;
    if (k > 0) {
        /* a running top k, kept sorted (k is small: OpenAI allows 20); k clamped to the array, as the header says */
        struct cand best[KVB_LOGPROBS_MAX_K];
        int32_t nb = 0;
        if (k > KVB_LOGPROBS_MAX_K) k = KVB_LOGPROBS_MAX_K;
        for (int32_t i = 0; i < V; i++) {
            const struct cand c = {logits[i], i};
            if (nb == k && cmp_top(&c, &best[nb - 1]) >= 0) continue;
            int32_t at = nb < k ? nb++ : nb - 1;
            while (at > 0 && cmp_top(&c, &best[at - 1]) < 0) { best[at] = best[at - 1]; at--; }
            best[at] = c;
        }
        for (int32_t i = 0; i < nb; i++) {
            top_ids[i] = best[i].id;
            top_lp[i] = (float)((double)best[i].logit - lz);
        }
    }
    return token >= 0 && token < V ? (float)((double)logits[token] - lz) : -INFINITY;
}

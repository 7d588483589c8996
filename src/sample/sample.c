/*
 * sample.c — token samplers, applied in llama.cpp's order: repetition
 * penalty, then (temp <= 0) argmax, or top-k, softmax at temperature, top-p,
 * min-p, and a draw from a seeded splitmix64 stream. Candidates are sorted
 * once by logit (descending, ties by id) so every filter is a prefix cut.
 */
#include "../core/core.h"

#include <math.h>
#include <stdlib.h>

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
};

struct kvb_sampler_params kvb_sampler_default_params(void) {
    struct kvb_sampler_params p = {0.8f, 40, 0.95f, 0.05f, 1.0f, 64, 0};
    return p;
}

kvb_status kvb_sampler_init(const struct kvb_sampler_params *p, int32_t n_vocab, struct kvb_sampler **out) {
    if (!p || !out || n_vocab < 1) return kvb_fail(KVB_ERR_INVALID, "sampler: bad arguments");
    if (!(p->temp >= 0 || p->temp < 0) || p->top_k < 0 || !(p->top_p > 0 && p->top_p <= 1) || !(p->min_p >= 0 && p->min_p <= 1) ||
        !(p->repeat_penalty > 0) || p->repeat_last_n < 0)
        return kvb_fail(KVB_ERR_INVALID, "sampler: parameters out of range (top_p in (0,1], min_p in [0,1], repeat_penalty > 0)");
    struct kvb_sampler *s = kvb_calloc(1, sizeof *s);
    if (!s) return kvb_fail(KVB_ERR_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->c = kvb_malloc(sizeof *s->c * (size_t)n_vocab);
    s->prob = kvb_malloc(sizeof(float) * (size_t)n_vocab);
    if (!s->c || !s->prob) {
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
    kvb_free(s);
}


static int cmp_cand(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

int32_t kvb_sampler_sample(struct kvb_sampler *s, float *logits, const int32_t *hist, int32_t n_hist) {
    const int32_t V = s->n_vocab;
    if (s->p.repeat_penalty != 1.0f && hist) {
        int32_t from = n_hist > s->p.repeat_last_n ? n_hist - s->p.repeat_last_n : 0;
        for (int32_t i = from; i < n_hist; i++) {
            int32_t t = hist[i];
            if (t < 0 || t >= V) continue;
            bool seen = false; /* penalise each token once */
            for (int32_t k = from; k < i && !seen; k++) seen = hist[k] == t;
            if (seen) continue;
            logits[t] = logits[t] > 0 ? logits[t] / s->p.repeat_penalty : logits[t] * s->p.repeat_penalty;
        }
    }
    if (s->p.temp <= 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    int32_t n = V;
    for (int32_t i = 0; i < V; i++) s->c[i] = (struct cand){logits[i], i};
    qsort(s->c, (size_t)V, sizeof *s->c, cmp_cand); /* O(V log V) per token: small next to the forward pass */
    if (s->p.top_k > 0 && s->p.top_k < V) n = s->p.top_k;
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

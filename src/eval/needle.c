/*
 * needle.c — passkey retrieval through eviction. The haystack is built in
 * token space so its length is exact: filler sentences are tokenized one by
 * one and appended until the budget for filler is used, the needle sentence
 * goes in at the sentence boundary nearest to `depth`, and the question ends
 * the prompt. The prompt is prefilled in chunks (eviction between chunks, as
 * in real use), kvb_cache_compress runs (SnapKV-style policies select here),
 * then up to 8 tokens are generated greedily. Besides the model's answer we
 * report whether every passkey token survived in each (layer, KV head)
 * stream, which is what a policy controls, whatever the model can do.
 * needle_multi does the same for several passkeys ("The pass key number I
 * is K.", spread from `depth`), each asked in a prompt of its own, or with
 * ask_after in turns after the haystack's compression (kvbound.h).
 */
#include "../core/core.h"

#include <stdio.h>
#include <stdlib.h>

static const char *k_default_filler =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
    "The river runs past the old mill. A dog sleeps by the door. The wind moves the tall trees. "
    "Bread is baked in the morning. The children walk to school. Rain falls on the quiet town. ";

struct toks {
    int32_t *p;
    int64_t n, cap;
};

static kvb_status append(struct toks *t, const int32_t *ids, int32_t n) {
    if (kvb_grow((void **)&t->p, &t->cap, t->n + n, sizeof(int32_t)) != KVB_OK) return kvb_fail(KVB_ERR_NOMEM, "needle: out of memory");
    memcpy(t->p + t->n, ids, sizeof(int32_t) * (size_t)n);
    t->n += n;
    return KVB_OK;
}

static kvb_status add_text(const struct kvb_model *m, struct toks *t, const char *s, size_t len) {
    int32_t *ids, n;
    kvb_status st = kvb_vocab_tokenize(kvb_model_vocab(m), s, len, false, false, &ids, &n);
    if (st != KVB_OK) return st;
    st = append(t, ids, n);
    kvb_buffer_free(ids);
    return st;
}

/* Share of (layer, KV head) streams holding every token of [kpos, kpos +
 * klen) in their retained slots, or with recall in slots and recall area;
 * the streams of the layers that hold K/V (a hybrid's Gated DeltaNet layers
 * and Gemma 4's KV-shared layers have none), each layer its own KV heads. */
static double held_share(const struct kvb_cache *cache, const struct kvb_model_info *in, int64_t kpos, int64_t klen, bool area_too) {
    int64_t held = 0, streams = 0;
    int32_t area[KVB_RECALL_MAX_PAGES * 64];
    const int32_t cap = (int32_t)(sizeof area / sizeof area[0]);
    struct kvb_cache_params cp;
    kvb_cache_get_params(cache, &cp);
    for (int32_t l = 0; l < in->n_layer; l++) {
        if ((cp.recurrent && cp.recurrent[l]) || (cp.kv_source && cp.kv_source[l] >= 0)) continue;
        for (int32_t h = 0; h < (cp.kv_heads ? cp.kv_heads[l] : in->n_head_kv); h++) {
            int32_t ns = kvb_cache_n_slots(cache, l, h), found = 0;
            for (int32_t j = 0; j < ns; j++) {
                struct kvb_slot_info si;
                kvb_cache_slot_info(cache, l, h, j, &si);
                found += si.pos_original >= kpos && si.pos_original < kpos + klen;
            }
            const int32_t na = area_too ? KVB_MIN(kvb_cache_recalled(cache, l, h, area, cap), cap) : 0;
            for (int32_t j = 0; j < na; j++) found += area[j] >= kpos && area[j] < kpos + klen;
            held += found == klen;
            streams++;
        }
    }
    return streams ? (double)held / (double)streams : 0;
}

struct kvb_needle_params kvb_needle_default_params(void) {
    struct kvb_needle_params p;
    memset(&p, 0, sizeof p);
    p.kv = kvb_kv_default_params();
    p.length = 4096;
    p.depth = 0.5;
    p.key = 48213;
    p.chunk = 256;
    p.n_threads = 1;
    return p;
}


/* Sentences of filler (ended by '.' or a newline, the text repeated) appended
 * to hay until it holds fill tokens after its first; bnd[] (kvb_malloc'd, nb
 * of them): where each sentence begins in hay. */
static kvb_status fill_haystack(const struct kvb_model *m, const char *filler, int64_t fill, struct toks *hay, int64_t **bnd, int64_t *nb) {
    kvb_status st = KVB_OK;
    int64_t bcap = 0;
    *bnd = NULL, *nb = 0;
    size_t at = 0, flen = strlen(filler);
    while (st == KVB_OK && hay->n - 1 < fill) {
        size_t end = at;
        while (end < flen && filler[end] != '.' && filler[end] != '\n') end++;
        if (end < flen) end++;
        if (end == at) { at = 0; continue; }
        if (kvb_grow((void **)bnd, &bcap, *nb + 1, sizeof(int64_t)) != KVB_OK) return kvb_fail(KVB_ERR_NOMEM, "needle: out of memory");
        (*bnd)[(*nb)++] = hay->n;
        struct toks s = {0};
        st = add_text(m, &s, filler + at, end - at);
        if (st == KVB_OK) st = append(hay, s.p, (int32_t)KVB_MIN((int64_t)s.n, fill - (hay->n - 1)));
        kvb_free(s.p);
        at = end >= flen ? 0 : end;
    }
    return st;
}

/* The first sentence boundary at or past the filler position target (end: none). */
static int64_t boundary_at(const int64_t *bnd, int64_t nb, int64_t target, int64_t end) {
    for (int64_t b = 0; b < nb; b++)
        if (bnd[b] - 1 >= target) return bnd[b];
    return end;
}

/* The passkey's tokens in the needle sentence at prompt[ins, ins + n_nd);
 * the whole sentence when they merged with their neighbours. */
static void key_span(const struct toks *prompt, int64_t ins, int64_t n_nd, const struct toks *key, int64_t *kpos, int64_t *klen) {
    *kpos = ins, *klen = n_nd;
    for (int64_t j = ins; j + key->n <= ins + n_nd; j++)
        if (memcmp(prompt->p + j, key->p, sizeof(int32_t) * (size_t)key->n) == 0) { *kpos = j, *klen = key->n; return; }
}

/* Where a passkey lies in a prompt (kpos, klen), for held_share after the
 * answer's first token (recall: the set that token attended to). */
struct key_probe {
    int64_t kpos, klen;
    double *share; /* NULL: not measured */
};

/* The greedy answer (up to 8 tokens) from the logits in lg, each token fed
 * back; its first run of digits against keytxt. probe (or NULL): the
 * passkey's share of streams held in slots and recall area, after the first
 * token. */
static kvb_status answer_key(struct kvb_context *c, const struct kvb_model *m, const struct kvb_model_info *in, float *lg, const char *keytxt,
                             const struct key_probe *probe, char *answer, size_t cap, bool *correct) {
    kvb_status st = KVB_OK;
    size_t w = 0;
    char buf[64];
    for (int g = 0; g < 8 && st == KVB_OK; g++) {
        int32_t best = 0;
        for (int32_t i = 1; i < in->n_vocab; i++)
            if (lg[i] > lg[best]) best = i;
        if (best == kvb_vocab_special(kvb_model_vocab(m), KVB_SPECIAL_EOS)) break;
        size_t pl = kvb_vocab_token_bytes(kvb_model_vocab(m), best, false, buf, sizeof buf);
        if (w + pl < cap) { memcpy(answer + w, buf, pl); w += pl; }
        st = kvb_context_eval(c, &best, 1, lg, false);
        if (g == 0 && st == KVB_OK && probe && probe->share) *probe->share = held_share(kvb_context_cache(c), in, probe->kpos, probe->klen, true);
    }
    answer[w] = 0;
    char digits[16];
    size_t nd = 0;
    for (size_t i = 0; i < w && nd < sizeof digits - 1; i++)
        if (answer[i] >= '0' && answer[i] <= '9') digits[nd++] = answer[i];
        else if (nd) break;
    digits[nd] = 0;
    *correct = strcmp(digits, keytxt) == 0;
    return st;
}

/* Several passkeys, or questions after the compression (see the header). */
static kvb_status needle_multi(const struct kvb_model *m, const struct kvb_needle_params *p, struct kvb_needle_result *out) {
    const int32_t n = p->passkeys > 1 ? p->passkeys : 1;
    uint32_t keys[64];
    struct toks nd[64], q[64], kt[64], hay = {0}, prompt = {0};
    int64_t at_b[64] = {0}, kpos[64] = {0}, klen[64] = {0};
    memset(nd, 0, sizeof nd); memset(q, 0, sizeof q); memset(kt, 0, sizeof kt);
    kvb_status st = KVB_OK;
    uint64_t rs = p->key;
    for (int32_t i = 0; i < n; i++) { /* distinct five-digit keys, the first one `key` */
        bool dup;
        do {
            keys[i] = i == 0 ? p->key : 10000u + (uint32_t)((rs >> 33) % 90000u);
            rs = rs * 6364136223846793005ull + 1442695040888963407ull;
            dup = false;
            for (int32_t k = 0; k < i; k++) dup |= keys[k] == keys[i];
        } while (dup);
        char t[128], kx[8];
        snprintf(t, sizeof t, " The pass key number %d is %u. Remember it.", (int)i + 1, keys[i]);
        if (st == KVB_OK) st = add_text(m, &nd[i], t, strlen(t));
        snprintf(t, sizeof t, " What is the pass key number %d? The pass key number %d is", (int)i + 1, (int)i + 1);
        if (st == KVB_OK) st = add_text(m, &q[i], t, strlen(t));
        snprintf(kx, sizeof kx, "%u", keys[i]);
        if (st == KVB_OK) st = add_text(m, &kt[i], kx, strlen(kx));
    }
    const char *filler = p->filler && *p->filler ? p->filler : k_default_filler;
    const int32_t bos = kvb_vocab_special(kvb_model_vocab(m), KVB_SPECIAL_BOS);
    if (st == KVB_OK && bos >= 0) st = append(&hay, &bos, 1);
    int64_t needles = 0, qmax = 0;
    for (int32_t i = 0; i < n; i++) { needles += nd[i].n; qmax = KVB_MAX(qmax, q[i].n); }
    /* length holds the haystack, the needles and one question (the longest) */
    const int64_t fill = (int64_t)p->length - hay.n - needles - qmax;
    if (st == KVB_OK && fill < 8 * n)
        st = kvb_fail(KVB_ERR_INVALID, "needle: passkeys %d do not fit in length %d (each needs 8 filler tokens besides its sentence)", (int)n, (int)p->length);
    int64_t *bnd = NULL, nb = 0;
    if (st == KVB_OK) st = fill_haystack(m, filler, fill, &hay, &bnd, &nb);
    for (int32_t i = 0; i < n && st == KVB_OK; i++) { /* the boundary nearest each depth */
        double d = p->depth + (double)i / n;
        if (d > 1) d -= 1;
        at_b[i] = boundary_at(bnd, nb, (int64_t)(d * (double)fill + 0.5), hay.n);
    }
    kvb_free(bnd);
    /* assemble in haystack order: needle i before haystack position at_b[i] */
    bool placed[64] = {0};
    int64_t from = 0;
    for (int32_t r = 0; r < n && st == KVB_OK; r++) {
        int32_t i = -1;
        for (int32_t k = 0; k < n; k++)
            if (!placed[k] && (i < 0 || at_b[k] < at_b[i])) i = k;
        placed[i] = true;
        st = append(&prompt, hay.p + from, (int32_t)(at_b[i] - from));
        from = at_b[i];
        const int64_t ins = prompt.n;
        if (st == KVB_OK) st = append(&prompt, nd[i].p, (int32_t)nd[i].n);
        if (st == KVB_OK) key_span(&prompt, ins, nd[i].n, &kt[i], &kpos[i], &klen[i]);
    }
    if (st == KVB_OK) st = append(&prompt, hay.p + from, (int32_t)(hay.n - from));
    const int64_t body = prompt.n;
    out->passkeys = n;
    out->needle_pos = (int32_t)kpos[0];
    struct kvb_model_info in;
    kvb_model_get_info(m, &in);
    float *lg = st == KVB_OK ? kvb_malloc(sizeof(float) * (size_t)in.n_vocab) : NULL;
    if (st == KVB_OK && !lg) st = kvb_fail(KVB_ERR_NOMEM, "needle: out of memory");
    double ret = 0, ret_hot = 0;
    for (int32_t r = 0; r < (p->ask_after ? 1 : n) && st == KVB_OK; r++) {
        struct kvb_context *c = NULL;
        prompt.n = body;
        if (!p->ask_after) st = append(&prompt, q[r].p, (int32_t)q[r].n);
        struct kvb_context_params cp = kvb_context_default_params();
        cp.kv = p->kv;
        cp.n_threads = p->n_threads > 0 ? p->n_threads : 1;
        cp.chunk = p->chunk > 0 ? p->chunk : 256;
        cp.n_ctx = (int32_t)(prompt.n + 16 + (p->ask_after ? n * (qmax + 8) : 0));
        cp.kv_pool_bytes = kvb_model_kv_seq_bytes(m, &cp.kv, cp.n_ctx, prompt.n, cp.chunk);
        if (st == KVB_OK) st = kvb_context_init(m, &cp, &c);
        if (st == KVB_OK) st = kvb_context_prompt(c, prompt.p, (int32_t)prompt.n, lg, false);
        out->prompt_tokens = (int32_t)prompt.n;
        for (int32_t i = p->ask_after ? 0 : r; i < (p->ask_after ? n : r + 1) && st == KVB_OK; i++) {
            struct kvb_cache *cache = kvb_context_cache(c);
            const double h = held_share(cache, &in, kpos[i], klen[i], false);
            ret_hot += h;
            if (p->ask_after) st = kvb_context_eval(c, q[i].p, (int32_t)q[i].n, lg, false);
            ret += p->kv.recall.pages > 0 && st == KVB_OK ? held_share(cache, &in, kpos[i], klen[i], true) : h;
            char kx[8];
            snprintf(kx, sizeof kx, "%u", keys[i]);
            bool ok = false;
            if (st == KVB_OK) st = answer_key(c, m, &in, lg, kx, NULL, out->answer, sizeof out->answer, &ok);
            out->n_correct += ok;
        }
        int64_t pass = 0, ctx = 0;
        kvb_context_kvzip_cost(c, &pass, &ctx);
        out->kvzip_pass_tokens += pass;
        out->kvzip_context_tokens += ctx;
        kvb_context_free(c);
    }
    out->retained = ret / n;
    out->retained_hot = ret_hot / n;
    out->correct = out->n_correct == n;
    kvb_free(lg);
    for (int32_t i = 0; i < n; i++) { kvb_free(nd[i].p); kvb_free(q[i].p); kvb_free(kt[i].p); }
    kvb_free(hay.p); kvb_free(prompt.p);
    return st;
}

kvb_status kvb_eval_needle(const struct kvb_model *m, const struct kvb_needle_params *p, struct kvb_needle_result *out) {
    if (!m || !p || !out || p->length < 32 || p->length > (1 << 24) || !(p->depth >= 0 && p->depth <= 1) || p->key < 10000 || p->key > 99999)
        return kvb_fail(KVB_ERR_INVALID, "needle: length must be in 32..16M, depth in [0, 1], key five digits");
    if (p->passkeys < 0 || p->passkeys > 64) return kvb_fail(KVB_ERR_INVALID, "needle: passkeys must be in 1..64, not %d", (int)p->passkeys);
    memset(out, 0, sizeof *out);
    if (p->passkeys > 1 || p->ask_after) return needle_multi(m, p, out);
    out->passkeys = 1;
    char needle[96], keytxt[8];
    snprintf(needle, sizeof needle, " The pass key is %u. Remember it.", p->key);
    snprintf(keytxt, sizeof keytxt, "%u", p->key);
    const char *question = " What is the pass key? The pass key is";
    struct toks nd = {0}, q = {0}, key = {0}, hay = {0};
    kvb_status st = add_text(m, &nd, needle, strlen(needle));
    if (st == KVB_OK) st = add_text(m, &q, question, strlen(question));
    if (st == KVB_OK) st = add_text(m, &key, keytxt, strlen(keytxt));
    /* sentences of the filler */
    const char *filler = p->filler && *p->filler ? p->filler : k_default_filler;
    const int32_t bos = kvb_vocab_special(kvb_model_vocab(m), KVB_SPECIAL_BOS);
    if (st == KVB_OK && bos >= 0) st = append(&hay, &bos, 1);
    const int64_t fill = (int64_t)p->length - hay.n - nd.n - q.n;
    if (st == KVB_OK && fill < 8) st = kvb_fail(KVB_ERR_INVALID, "needle: length %d is too short for the needle and the question", (int)p->length);
    int64_t *bnd = NULL, nb = 0, insert_at = 0;
    if (st == KVB_OK) st = fill_haystack(m, filler, fill, &hay, &bnd, &nb);
    if (st == KVB_OK) insert_at = boundary_at(bnd, nb, (int64_t)(p->depth * (double)fill + 0.5), hay.n);
    kvb_free(bnd);
    /* assemble: hay[0..insert) needle hay[insert..) question */
    struct toks prompt = {0};
    if (st == KVB_OK) st = append(&prompt, hay.p, (int32_t)insert_at);
    if (st == KVB_OK) st = append(&prompt, nd.p, (int32_t)nd.n);
    if (st == KVB_OK) st = append(&prompt, hay.p + insert_at, (int32_t)(hay.n - insert_at));
    if (st == KVB_OK) st = append(&prompt, q.p, (int32_t)q.n);
    struct kvb_context *c = NULL;
    if (st == KVB_OK) {
        struct kvb_model_info in;
        kvb_model_get_info(m, &in);
        struct kvb_context_params cp = kvb_context_default_params();
        cp.kv = p->kv;
        cp.n_threads = p->n_threads > 0 ? p->n_threads : 1;
        cp.chunk = p->chunk > 0 ? p->chunk : 256;
        cp.n_ctx = (int32_t)prompt.n + 16;
        cp.kv_pool_bytes = kvb_model_kv_seq_bytes(m, &cp.kv, cp.n_ctx, prompt.n, cp.chunk);
        st = kvb_context_init(m, &cp, &c);
    }
    float *lg = NULL;
    if (st == KVB_OK) {
        struct kvb_model_info in;
        kvb_model_get_info(m, &in);
        lg = kvb_malloc(sizeof(float) * (size_t)in.n_vocab);
        if (!lg) st = kvb_fail(KVB_ERR_NOMEM, "needle: out of memory");
        if (st == KVB_OK) st = kvb_context_prompt(c, prompt.p, (int32_t)prompt.n, lg, false);
        if (st == KVB_OK) {
            struct kvb_cache *cache = kvb_context_cache(c);
            struct key_probe kp; /* the passkey tokens' positions in the prompt */
            key_span(&prompt, insert_at, nd.n, &key, &kp.kpos, &kp.klen);
            out->retained_hot = held_share(cache, &in, kp.kpos, kp.klen, false);
            out->retained = out->retained_hot; /* without recall: the retained slots after the prompt */
            out->needle_pos = (int32_t)kp.kpos;
            out->prompt_tokens = (int32_t)prompt.n;
            /* with recall: the set the answer's first token attended to, its recall area chosen by its
             * own query over every cold page (the prompt's last chunk can recall only pages evicted before it) */
            kp.share = p->kv.recall.pages > 0 ? &out->retained : NULL;
            bool ok = false;
            st = answer_key(c, m, &in, lg, keytxt, &kp, out->answer, sizeof out->answer, &ok);
            out->correct = ok;
            out->n_correct = ok;
        }
    }
    kvb_free(lg);
    kvb_context_kvzip_cost(c, &out->kvzip_pass_tokens, &out->kvzip_context_tokens);
    kvb_context_free(c);
    kvb_free(nd.p); kvb_free(q.p); kvb_free(key.p); kvb_free(hay.p); kvb_free(prompt.p);
    return st;
}

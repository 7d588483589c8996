/*
 * implicit.c — implicit sessions: a stateless chat (no session_id, the
 * whole history sent every turn, as every OpenAI client sends it) resumes
 * the state the server had at the end of a turn it served, and reads only
 * what comes after (docs/SERVING.md, "Implicit sessions").
 *
 * A conversation is known by a digest chain over what was served, never
 * over the cache (a bounded cache no longer holds the history) nor over a
 * re-tokenization (the tokens a model generated need not be those its text
 * tokenizes to):
 *   c0     = SHA-256("kvbound implicit v1", the tenant's scope (tenant and
 *            cache_salt), the model, the cache configuration, the chunking,
 *            the template, tools and chat_template_kwargs)
 *   c(i+1) = SHA-256("kvbound chain", c(i), message i reduced as history.c
 *            reduces it: role, content less the white space at its ends,
 *            tool calls' names and parsed arguments; reasoning_content is
 *            not part of it)
 * A turn whose request has messages m0..m(n-1) and whose answer is a ends
 * with the state of the conversation m0..m(n-1), a: its checkpoint's key is
 * "c:" and the hex of c(n+1), with a as the last message. A later request
 * m0..m(k) ... whose message k is an assistant message looks up c(k+1):
 * found, its state is that conversation's exactly, and the request reads
 * messages k+1.. as a session's later turn reads its new messages. The
 * candidates are the request's last --checkpoints assistant messages,
 * latest first, so a client that rewrote its last turns resumes from the
 * latest checkpoint still a prefix of what it sends.
 *
 * This file only computes keys; sched.c finds and stores checkpoints
 * through the store worker, text.c renders each candidate's new messages.
 */
#include "sched_impl.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_i64(struct serve_sha *c, int64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)v >> (8 * i));
    serve_sha_put(c, b, 8);
}

static void put_text(struct serve_sha *c, const char *s) {
    const size_t n = s ? strlen(s) : 0;
    put_i64(c, s ? (int64_t)n : -1); /* none is not "" */
    if (n) serve_sha_put(c, s, n);
}

/* A JSON text's canonical bytes (key order and spacing do not matter); false: out of memory. */
static bool put_json(struct serve_sha *c, const char *json) {
    if (!json) { put_i64(c, -1); return true; }
    cJSON *v = cJSON_Parse(json);
    struct kvb_str b = {0};
    const bool ok = v && history_canon_json(v, &b);
    if (ok) {
        put_i64(c, (int64_t)b.n);
        serve_sha_put(c, b.p, b.n);
    }
    kvb_str_free(&b);
    cJSON_Delete(v);
    return ok;
}

static void put_f(struct serve_sha *c, float f) {
    char t[32];
    snprintf(t, sizeof t, "%.9g", (double)f);
    put_text(c, t);
}

/* c0: what the state of a conversation depends on besides its messages. */
static bool chain_seed(const struct server *srv, const struct job *j, unsigned char out[SERVE_DIGEST]) {
    struct serve_sha c;
    serve_sha_init(&c);
    static const char label[] = "kvbound implicit v1\n";
    serve_sha_put(&c, label, sizeof label - 1);
    serve_sha_put(&c, j->scope, SERVE_DIGEST); /* tenant and cache_salt: never found by another */
    put_i64(&c, j->kind);             /* a chat's and a completion's never meet */
    put_text(&c, srv->o.model_name);
    const struct kvb_model_info *mi = &srv->mi;
    put_i64(&c, mi->n_layer);
    put_i64(&c, mi->n_embd);
    put_i64(&c, mi->n_head_kv);
    put_i64(&c, mi->n_vocab);
    const struct kvb_kv_params *kv = &j->sp.kv;
    const struct kvb_policy_params *p = &kv->policy;
    put_i64(&c, p->id);
    put_i64(&c, p->budget);
    put_f(&c, p->budget_frac);
    put_i64(&c, p->n_sink);
    put_i64(&c, p->n_recent);
    put_f(&c, p->heavy_ratio);
    put_i64(&c, p->obs_window);
    put_i64(&c, p->pool_kernel);
    put_f(&c, p->pyramid_beta);
    put_f(&c, p->ada_floor);
    put_i64(&c, p->history);
    put_i64(&c, p->threshold);
    put_i64(&c, p->pool_mode);
    put_i64(&c, p->decode_budget);
    put_i64(&c, p->prefill_budget);
    put_i64(&c, p->tova_scope);
    if (p->compress_prompt) put_i64(&c, p->compress_prompt); /* only when set: the keys of every other configuration as before */
    put_i64(&c, kv->pos_mode);
    put_i64(&c, kv->max_distance);
    put_i64(&c, kv->kv_dtype);
    put_i64(&c, kv->kv_dtype_v);
    put_i64(&c, kv->block_size);
    put_i64(&c, kv->recall.pages);
    put_i64(&c, j->n_keep);           /* the pinned span is named by n_keep, fixed at the first turn */
    put_i64(&c, srv->o.keep_max);
    put_i64(&c, srv->o.chunk);        /* how a prompt is cut into chunks changes what a policy evicts between them */
    put_i64(&c, srv->o.prefix_min);
    put_i64(&c, srv->o.special_in_content);
    put_text(&c, srv->template_text); /* the template renders every turn's text */
    const bool ok = put_json(&c, j->tools_json) && put_json(&c, j->vars_json);
    serve_sha_end(&c, out);
    return ok;
}

/* c(i+1) from c(i) and message m; false: out of memory. */
static bool chain_next(unsigned char c_i[SERVE_DIGEST], const cJSON *m) {
    struct kvb_str b = {0};
    const bool ok = history_canon_message(m, &b);
    if (ok) {
        struct serve_sha c;
        serve_sha_init(&c);
        static const char label[] = "kvbound chain\n";
        serve_sha_put(&c, label, sizeof label - 1);
        serve_sha_put(&c, c_i, SERVE_DIGEST);
        serve_sha_put(&c, b.p, b.n);
        serve_sha_end(&c, c_i);
    }
    kvb_str_free(&b);
    return ok;
}

static void key_of(const unsigned char d[SERVE_DIGEST], char out[SERVE_CKEY]) {
    memcpy(out, "c:", 2);
    for (int i = 0; i < SERVE_DIGEST; i++) snprintf(out + 2 + 2 * i, 3, "%02x", d[i]);
}

bool implicit_prepare(struct server *srv, struct job *j) {
    j->hit = -1;
    j->n_cand = 0;
    if (!j->implicit) return true;
    if (j->kind == JOB_COMPLETION) { /* its checkpoints are token sequences under this seed (implicit_token_key) */
        if (!chain_seed(srv, j, j->chain)) j->implicit = false;
        return j->implicit;
    }
    cJSON *all = cJSON_Parse(j->all_json);
    const int n = cJSON_GetArraySize(all);
    unsigned char c[SERVE_DIGEST];
    bool ok = all && chain_seed(srv, j, c);
    /* the chain at each message's end; the candidates are the last assistant messages, latest first */
    int32_t *at = ok && n ? malloc(sizeof *at * (size_t)n) : NULL;
    unsigned char (*cs)[SERVE_DIGEST] = ok && n ? malloc(sizeof *cs * (size_t)n) : NULL;
    ok = ok && (!n || (at && cs));
    int na = 0;
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, all) {
        if (!ok) break;
        ok = chain_next(c, m);
        memcpy(cs[i], c, SERVE_DIGEST);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (cJSON_IsString(role) && !strcmp(role->valuestring, "assistant")) at[na++] = i;
        i++;
    }
    const int want = srv->o.checkpoints < SERVE_CANDS ? srv->o.checkpoints : SERVE_CANDS;
    for (int k = na - 1; ok && k >= 0 && j->n_cand < want; k--) {
        key_of(cs[at[k]], j->cand_key[j->n_cand]);
        j->cand_msgs[j->n_cand] = at[k] + 1;
        j->n_cand++;
    }
    if (ok) memcpy(j->chain, c, SERVE_DIGEST);
    free(at);
    free(cs);
    cJSON_Delete(all);
    if (!ok) j->implicit = false, j->n_cand = 0; /* out of memory: the turn reads its whole prompt, and is not checkpointed */
    return ok;
}

bool implicit_answer_key(const struct job *j, const char *response, char out[SERVE_CKEY]) {
    cJSON *body = cJSON_Parse(response);
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(body, "choices"), 0), "message");
    unsigned char c[SERVE_DIGEST];
    memcpy(c, j->chain, SERVE_DIGEST);
    const bool ok = cJSON_IsObject(msg) && chain_next(c, msg);
    cJSON_Delete(body);
    if (ok) key_of(c, out);
    return ok;
}

char *implicit_meta(const struct job *j, const char *extra, int keep, char drop[SERVE_CKEY]) {
    drop[0] = 0;
    cJSON *old = extra ? cJSON_Parse(extra) : NULL, *o = cJSON_CreateObject(), *a = o ? cJSON_AddArrayToObject(o, "ancestors") : NULL;
    const cJSON *prev = j->hit >= 0 ? cJSON_GetObjectItemCaseSensitive(old, "ancestors") : NULL, *e = cJSON_IsArray(prev) ? prev->child : NULL;
    bool ok = a != NULL;
    /* the conversation's earlier checkpoints, newest first: the resumed one, then its own earlier ones; past keep - 1, the next goes */
    for (const char *k = j->hit >= 0 ? j->cand_key[j->hit] : NULL; ok && k; e = e ? e->next : NULL) {
        if (strlen(k) == SERVE_CKEY - 1 && !strncmp(k, "c:", 2)) {
            if (cJSON_GetArraySize(a) >= keep - 1) {
                snprintf(drop, SERVE_CKEY, "%s", k);
                break;
            }
            ok = cJSON_AddItemToArray(a, cJSON_CreateString(k));
        }
        k = e && cJSON_IsString(e) ? e->valuestring : NULL;
    }
    char *t = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(old);
    cJSON_Delete(o);
    return t;
}

/* token ids as 4 bytes each, little endian */
static void put_tokens(struct serve_sha *c, const int32_t *t, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        unsigned char b[4];
        for (int k = 0; k < 4; k++) b[k] = (unsigned char)((uint32_t)t[i] >> (8 * k));
        serve_sha_put(c, b, 4);
    }
}

/* "c:" and the hex of SHA-256(label, seed, t[0..n)) */
static void token_digest(const char *label, const unsigned char seed[SERVE_DIGEST], const int32_t *t, int32_t n, char out[SERVE_CKEY]) {
    struct serve_sha c;
    serve_sha_init(&c);
    serve_sha_put(&c, label, strlen(label));
    serve_sha_put(&c, seed, SERVE_DIGEST);
    put_tokens(&c, t, n);
    unsigned char d[SERVE_DIGEST];
    serve_sha_end(&c, d);
    key_of(d, out);
}

void implicit_token_key(const unsigned char seed[SERVE_DIGEST], const int32_t *t, int32_t n, char out[SERVE_CKEY]) {
    token_digest("kvbound tokens\n", seed, t, n, out);
}

void implicit_token_group(const unsigned char seed[SERVE_DIGEST], const int32_t *t, char out[SERVE_CKEY]) {
    token_digest("kvbound token group\n", seed, t, IMPLICIT_GROUP_TOKENS, out);
    out[0] = 'g';
}

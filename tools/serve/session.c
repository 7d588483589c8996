/*
 * session.c — the scheduler's session table and the stored blob.
 *
 * The table holds a record for each session in memory (a DONE sequence in
 * the batch between turns) or in a turn; each record is its own
 * allocation, so a pointer to one stays good while others come and go.
 * A session no longer in memory is forgotten here: the store holds it.
 * The blob is "KVBSRV1\0", u32 meta length, the meta JSON (turns, the stop
 * token's text, figures, policy, and history.c's digests of the
 * conversation, tools and answers, joined as history.c printed them), then
 * the library's session image (kvb_batch_seq_save).
 */
#include "sched_impl.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#define BLOB_MAGIC "KVBSRV1"

struct sess *sess_find(struct sched *s, const char *id) {
    for (int i = 0; i < s->n_sess; i++)
        if (!strcmp(s->sess[i]->id, id)) return s->sess[i];
    return NULL;
}

struct sess *sess_new(struct sched *s, const char *id) {
    if (s->n_sess == s->cap_sess) {
        const int cap = s->cap_sess ? 2 * s->cap_sess : 16;
        struct sess **t = realloc(s->sess, sizeof *t * (size_t)cap);
        if (!t) return NULL;
        s->sess = t;
        s->cap_sess = cap;
    }
    struct sess *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    s->sess[s->n_sess++] = x;
    snprintf(x->id, sizeof x->id, "%s", id);
    x->seq = -1;
    return x;
}

void sess_drop(struct sched *s, struct sess *x) {
    for (int i = 0; i < s->n_sess; i++)
        if (s->sess[i] == x) {
            s->sess[i] = s->sess[--s->n_sess];
            break;
        }
    free(x->extra);
    free(x);
}

/* Forgets a session here: its sequence (if any) leaves the batch and its
 * record the table, which so holds only sessions in memory or in a turn.
 * What the store holds is its state. */
void sess_release(struct sched *s, struct sess *x) {
    if (x->seq >= 0) kvb_batch_remove(s->b, x->seq);
    sess_drop(s, x);
}

/* A session's turn is done with (refused, cut or failed): the record is
 * freed from it, and forgotten when it is not in memory or the store is
 * shared (then the store is its only copy between turns). */
void sess_idle(struct server *srv, struct sess *x) {
    x->busy = NULL;
    if (x->seq < 0 || srv->store->shared) sess_release(srv->sched, x);
}

bool offload_session(struct server *srv) {
    struct sched *s = srv->sched;
    struct sess *lru = NULL;
    for (int i = 0; i < s->n_sess; i++) {
        struct sess *x = s->sess[i];
        if (x->seq >= 0 && !x->busy && (!lru || x->last_used < lru->last_used)) lru = x;
    }
    if (!lru) return false;
    sess_release(s, lru);
    s->offloaded++;
    return true;
}

void session_place(struct server *srv) {
    struct sched *s = srv->sched;
    struct kvb_batch_stats bs;
    kvb_batch_get_stats(s->b, &bs);
    while (bs.n_seqs - s->n_prefixes >= srv->o.parallel + srv->o.max_sessions && offload_session(srv)) kvb_batch_get_stats(s->b, &bs);
}



/* A sequence's figures as the API reports them: tokens seen, retained
 * tokens per (layer, KV head) on average, KV bytes, cold pages (--recall),
 * and with window_tokens (or NULL), for a model with sliding-window layers,
 * the tokens per stream of each kind. false: no such sequence. */
bool seq_figures(struct server *srv, int32_t seq, int64_t *position, int64_t *cache_tokens, size_t *kv_bytes, int64_t *cold_pages,
                 int64_t *window_tokens, int64_t *global_tokens) {
    struct kvb_seq_info si;
    if (seq < 0 || kvb_batch_seq_info(srv->sched->b, seq, &si) != KVB_OK) return false;
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(kvb_batch_seq_cache(srv->sched->b, seq), &cs);
    *position = si.n_past;
    /* per K/V stream: the layers that hold K/V (not recurrent, not reading another's) */
    *cache_tokens = cs.slots / ((int64_t)(srv->mi.n_layer - srv->mi.n_rec_layers - srv->mi.n_kv_shared > 1 ? srv->mi.n_layer - srv->mi.n_rec_layers - srv->mi.n_kv_shared : 1) * srv->mi.n_head_kv);
    *kv_bytes = si.kv_bytes;
    *cold_pages = cs.cold_pages;
    if (window_tokens && srv->mi.n_swa_layers) { /* both kinds of layers: the model's window and the policy's */
        const int64_t hk = srv->mi.n_head_kv, nw = cs.window_layers, ng = srv->mi.n_layer - srv->mi.n_rec_layers - srv->mi.n_kv_shared - nw;
        *window_tokens = nw ? cs.window_slots / (nw * hk) : 0;
        *global_tokens = ng ? (cs.slots - cs.window_slots) / (ng * hk) : 0;
    }
    return true;
}

void sess_figures(struct server *srv, struct sess *x) {
    seq_figures(srv, x->seq, &x->position, &x->cache_tokens, &x->kv_bytes, &x->cold_pages, &x->window_tokens, &x->global_tokens);
}

static char *meta_json(const struct sess *x) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "turns", (double)x->turns);
    cJSON_AddStringToObject(o, "stop_text", x->stop_text);
    cJSON_AddNumberToObject(o, "position", (double)x->position);
    cJSON_AddNumberToObject(o, "cache_tokens", (double)x->cache_tokens);
    cJSON_AddNumberToObject(o, "kv_bytes", (double)x->kv_bytes);
    cJSON_AddNumberToObject(o, "cold_pages", (double)x->cold_pages);
    cJSON_AddStringToObject(o, "kv_policy", kvb_policy_name(x->pol.id));
    cJSON_AddNumberToObject(o, "kv_budget", x->pol.budget);
    cJSON_AddNumberToObject(o, "n_keep", x->n_keep);
    cJSON_AddNumberToObject(o, "keep_span", x->keep_span);
    cJSON_AddNumberToObject(o, "keep", x->keep);
    if (x->ntok > 0) cJSON_AddNumberToObject(o, "ntok", x->ntok); /* a completion's checkpoint: its sequence's tokens */
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    /* history.c's object (history digests, tools, answers) joins it as
     * printed, never parsed again: "{...}" + "{h...}" is "{...,h...}" */
    const size_t el = x->extra ? strlen(x->extra) : 0, tl = t ? strlen(t) : 0;
    if (!t || el < 3 || x->extra[0] != '{' || x->extra[el - 1] != '}') return t;
    char *m = malloc(tl + el);
    if (m) {
        memcpy(m, t, tl - 1);
        m[tl - 1] = ',';
        memcpy(m + tl, x->extra + 1, el); /* with its NUL */
    }
    free(t);
    return m;
}

/* The session (DONE in the batch) as the stored blob, its meta saying
 * `turns` turns. NULL on failure (the cause to stderr). */
void *session_blob(struct server *srv, const struct sess *x, int64_t turns, const char *extra, size_t *len) {
    void *img = NULL;
    size_t il = 0;
    if (kvb_batch_seq_save(srv->sched->b, x->seq, &img, &il) != KVB_OK) {
        fprintf(stderr, "kvbound serve: session %s: %s\n", x->id, kvb_last_error());
        return NULL;
    }
    struct sess with = *x;
    with.turns = turns;
    with.extra = (char *)extra;
    char *meta = meta_json(&with);
    const uint32_t ml = meta ? (uint32_t)strlen(meta) : 0;
    const size_t total = 8 + 4 + ml + il;
    char *blob = meta ? malloc(total) : NULL;
    if (blob) {
        memcpy(blob, BLOB_MAGIC, 8);
        memcpy(blob + 8, &ml, 4);
        memcpy(blob + 12, meta, ml);
        memcpy(blob + 12 + ml, img, il);
        *len = total;
    }
    free(meta);
    kvb_buffer_free(img);
    return blob;
}

/* A count in a blob's meta: a whole number in 0..2^53. */
static bool count_ok(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0 && v->valuedouble == floor(v->valuedouble);
}

/* Reads a stored blob's meta into x and returns where the image starts, or
 * NULL (corrupt). */
const char *blob_meta(const char *blob, size_t len, struct sess *x, size_t *img_len) {
    if (len < 12 || memcmp(blob, BLOB_MAGIC, 8)) return NULL;
    uint32_t ml;
    memcpy(&ml, blob + 8, 4);
    if (ml > len - 12) return NULL;
    cJSON *o = cJSON_ParseWithLength(blob + 12, ml);
    if (!cJSON_IsObject(o)) { cJSON_Delete(o); return NULL; }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "turns"), *st = cJSON_GetObjectItemCaseSensitive(o, "stop_text");
    const cJSON *pos = cJSON_GetObjectItemCaseSensitive(o, "position"), *ct = cJSON_GetObjectItemCaseSensitive(o, "cache_tokens");
    const cJSON *kb = cJSON_GetObjectItemCaseSensitive(o, "kv_bytes"), *cp = cJSON_GetObjectItemCaseSensitive(o, "cold_pages");
    if (!count_ok(t) || !cJSON_IsString(st) || !count_ok(pos) || !count_ok(ct) || (kb && !count_ok(kb)) || (cp && !count_ok(cp))) {
        cJSON_Delete(o); /* a count that is no count (negative, past 2^53, not a number) is a corrupt blob, never cast */
        return NULL;
    }
    x->turns = (int64_t)t->valuedouble;
    snprintf(x->stop_text, sizeof x->stop_text, "%s", st->valuestring);
    x->position = (int64_t)pos->valuedouble;
    x->cache_tokens = (int64_t)ct->valuedouble;
    x->kv_bytes = cJSON_IsNumber(kb) ? (size_t)kb->valuedouble : 0;
    x->cold_pages = cJSON_IsNumber(cp) ? (int64_t)cp->valuedouble : 0;
    x->stored_bytes = len;
    const cJSON *nk = cJSON_GetObjectItemCaseSensitive(o, "n_keep"), *ks = cJSON_GetObjectItemCaseSensitive(o, "keep_span");
    const cJSON *kp = cJSON_GetObjectItemCaseSensitive(o, "keep");
    x->n_keep = cJSON_IsNumber(nk) && nk->valuedouble >= -1 && nk->valuedouble <= KVB_KEEP_MAX ? (int32_t)nk->valuedouble : 0; /* none: it pinned nothing */
    x->keep_span = count_ok(ks) && ks->valuedouble <= KVB_KEEP_MAX ? (int32_t)ks->valuedouble : 0;
    x->keep = count_ok(kp) && kp->valuedouble <= KVB_KEEP_MAX ? (int32_t)kp->valuedouble : 0; /* the image's, once loaded */
    const cJSON *nt = cJSON_GetObjectItemCaseSensitive(o, "ntok");
    x->ntok = count_ok(nt) && nt->valuedouble <= INT32_MAX ? (int32_t)nt->valuedouble : 0;
    free(x->extra);
    x->extra = NULL;
    x->extra = history_from_meta(o); /* NULL (none, or no memory): unknown */
    cJSON *anc = cJSON_GetObjectItemCaseSensitive(o, "ancestors"); /* a checkpoint's (implicit.c): its conversation's earlier ones */
    if (cJSON_IsArray(anc) && !x->extra) {
        cJSON *e = cJSON_CreateObject();
        if (e && cJSON_AddItemToObject(e, "ancestors", cJSON_Duplicate(anc, true))) x->extra = cJSON_PrintUnformatted(e);
        cJSON_Delete(e);
    }
    cJSON_Delete(o);
    *img_len = len - 12 - ml;
    return blob + 12 + ml;
}

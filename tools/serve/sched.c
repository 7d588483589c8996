/*
 * sched.c — the scheduler thread: the only owner of the kvb_batch, the
 * session table and the store.
 *
 * Loop: answer session queries (state, map, delete); admit queued jobs in
 * order while --parallel allows and the pool can hold each one's minimum
 * (returning idle sessions' pages first; they are already in the store);
 * fail jobs that waited past --queue-timeout; run one kvb_batch_step; hand
 * each job its new text (stop strings cut, their possible beginnings held
 * back); finish turns: a session is saved to the store after every
 * completed turn, a sessionless sequence is removed. A cancelled job's
 * sequence is removed at once.
 *
 * A session in memory is a DONE sequence in the batch between turns. Its
 * record keeps what the next turn needs: whether it had a turn, the text of
 * the stop token its last answer ended with (the chat template's glue), and
 * its figures. The stored blob is "KVBSRV1\0", u32 meta length, the meta
 * JSON, then the library's session image (kvb_batch_seq_save).
 */
#include "serve.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sess {
    char id[SERVE_ID_MAX + 1];
    int32_t seq;          /* in the batch, or -1 (in the store only) */
    struct job *busy;     /* the job running a turn on it */
    int64_t turns;
    char stop_text[64];   /* text of the stop token the last answer ended with, "" if cut */
    double last_used;
    int64_t position, cache_tokens, cold_pages;
    size_t kv_bytes, stored_bytes;
    struct kvb_policy_params pol;
};

struct ctl {
    enum { CTL_JSON, CTL_MAP, CTL_DELETE } kind;
    const char *id;
    struct sbuf *out;
    int status;
    bool done;
    pthread_cond_t cv;
    struct ctl *next;
};

struct sched {
    pthread_t th;
    bool running;
    struct kvb_batch *b;
    struct sess *sess;
    int n_sess, cap_sess;
    struct job **active;
    int n_active;
    struct ctl *ctl_head;
    /* figures */
    int64_t prefill_tokens, decode_tokens, offloaded;
    double prefill_time, decode_time;
    int64_t pages_used, pages_free, page_bytes, in_memory, persisted;
    double counted_at;
};

/* ---- sessions ---- */

static struct sess *sess_find(struct sched *s, const char *id) {
    for (int i = 0; i < s->n_sess; i++)
        if (!strcmp(s->sess[i].id, id)) return &s->sess[i];
    return NULL;
}

static struct sess *sess_new(struct sched *s, const char *id) {
    if (s->n_sess == s->cap_sess) {
        const int cap = s->cap_sess ? 2 * s->cap_sess : 16;
        struct sess *t = realloc(s->sess, sizeof *t * (size_t)cap);
        if (!t) return NULL;
        s->sess = t;
        s->cap_sess = cap;
    }
    struct sess *x = &s->sess[s->n_sess++];
    memset(x, 0, sizeof *x);
    snprintf(x->id, sizeof x->id, "%s", id);
    x->seq = -1;
    return x;
}

static void sess_drop(struct sched *s, struct sess *x) {
    const int i = (int)(x - s->sess);
    s->sess[i] = s->sess[--s->n_sess];
}

/* A sequence's figures as the API reports them: tokens seen, retained
 * tokens per (layer, KV head) on average, KV bytes, cold pages (--recall).
 * false: no such sequence. */
static bool seq_figures(struct server *srv, int32_t seq, int64_t *position, int64_t *cache_tokens, size_t *kv_bytes, int64_t *cold_pages) {
    struct kvb_seq_info si;
    if (seq < 0 || kvb_batch_seq_info(srv->sched->b, seq, &si) != KVB_OK) return false;
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(kvb_batch_seq_cache(srv->sched->b, seq), &cs);
    *position = si.n_past;
    *cache_tokens = cs.slots / ((int64_t)srv->mi.n_layer * srv->mi.n_head_kv);
    *kv_bytes = si.kv_bytes;
    *cold_pages = cs.cold_pages;
    return true;
}

static void sess_figures(struct server *srv, struct sess *x) {
    seq_figures(srv, x->seq, &x->position, &x->cache_tokens, &x->kv_bytes, &x->cold_pages);
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
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
}

#define BLOB_MAGIC "KVBSRV1"

/* Writes the session (DONE in the batch) to the store. 0 ok. */
static int sess_persist(struct server *srv, struct sess *x) {
    void *img = NULL;
    size_t il = 0;
    if (kvb_batch_seq_save(srv->sched->b, x->seq, &img, &il) != KVB_OK) {
        fprintf(stderr, "kvbound serve: session %s: %s\n", x->id, kvb_last_error());
        return -1;
    }
    char *meta = meta_json(x);
    const uint32_t ml = meta ? (uint32_t)strlen(meta) : 0;
    const size_t total = 8 + 4 + ml + il;
    char *blob = meta ? malloc(total) : NULL;
    int rc = -1;
    if (blob) {
        memcpy(blob, BLOB_MAGIC, 8);
        memcpy(blob + 8, &ml, 4);
        memcpy(blob + 12, meta, ml);
        memcpy(blob + 12 + ml, img, il);
        rc = srv->store->put(srv->store, x->id, blob, total);
        if (rc) fprintf(stderr, "kvbound serve: session %s: store: %s\n", x->id, srv->store->error);
        else x->stored_bytes = total;
    }
    free(blob);
    free(meta);
    kvb_buffer_free(img);
    return rc;
}

/* Reads a stored blob's meta into x and returns where the image starts, or
 * NULL (corrupt). */
static const char *blob_meta(const char *blob, size_t len, struct sess *x, size_t *img_len) {
    if (len < 12 || memcmp(blob, BLOB_MAGIC, 8)) return NULL;
    uint32_t ml;
    memcpy(&ml, blob + 8, 4);
    if (ml > len - 12) return NULL;
    cJSON *o = cJSON_ParseWithLength(blob + 12, ml);
    if (!cJSON_IsObject(o)) { cJSON_Delete(o); return NULL; }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "turns"), *st = cJSON_GetObjectItemCaseSensitive(o, "stop_text");
    const cJSON *pos = cJSON_GetObjectItemCaseSensitive(o, "position"), *ct = cJSON_GetObjectItemCaseSensitive(o, "cache_tokens");
    const cJSON *kb = cJSON_GetObjectItemCaseSensitive(o, "kv_bytes"), *cp = cJSON_GetObjectItemCaseSensitive(o, "cold_pages");
    if (!cJSON_IsNumber(t) || !cJSON_IsString(st) || !cJSON_IsNumber(pos) || !cJSON_IsNumber(ct)) { cJSON_Delete(o); return NULL; }
    x->turns = (int64_t)t->valuedouble;
    snprintf(x->stop_text, sizeof x->stop_text, "%s", st->valuestring);
    x->position = (int64_t)pos->valuedouble;
    x->cache_tokens = (int64_t)ct->valuedouble;
    x->kv_bytes = cJSON_IsNumber(kb) ? (size_t)kb->valuedouble : 0;
    x->cold_pages = cJSON_IsNumber(cp) ? (int64_t)cp->valuedouble : 0;
    x->stored_bytes = len;
    cJSON_Delete(o);
    *img_len = len - 12 - ml;
    return blob + 12 + ml;
}

/* Returns the pages of the least recently used idle session in memory (it
 * is in the store already). false: none. */
static bool offload_one(struct server *srv) {
    struct sched *s = srv->sched;
    struct sess *lru = NULL;
    for (int i = 0; i < s->n_sess; i++) {
        struct sess *x = &s->sess[i];
        if (x->seq >= 0 && !x->busy && (!lru || x->last_used < lru->last_used)) lru = x;
    }
    if (!lru) return false;
    kvb_batch_remove(s->b, lru->seq);
    lru->seq = -1;
    s->offloaded++;
    return true;
}

/* ---- jobs ---- */

static void job_fail(struct server *srv, struct job *j, int status, const char *type, int retry_after, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void job_fail(struct server *srv, struct job *j, int status, const char *type, int retry_after, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->error, sizeof j->error, fmt, ap);
    va_end(ap);
    snprintf(j->error_type, sizeof j->error_type, "%s", type);
    j->status = status;
    j->retry_after = retry_after;
    j->failed = j->done = true;
    metrics_count(srv->metrics, 0, 0, 0, 1);
    pthread_cond_broadcast(&j->cv);
}

static int32_t *tokens_of(struct server *srv, const char *text, bool bos, int32_t pending, int32_t *n) {
    int32_t *ids = NULL, k = 0;
    if (kvb_vocab_tokenize(srv->vocab, text, strlen(text), bos, true, &ids, &k) != KVB_OK) return NULL;
    int32_t *all = malloc(sizeof(int32_t) * (size_t)(k + 1));
    if (!all) { kvb_buffer_free(ids); return NULL; }
    int32_t m = 0;
    if (pending >= 0) all[m++] = pending;
    if (k) memcpy(all + m, ids, sizeof(int32_t) * (size_t)k);
    kvb_buffer_free(ids);
    *n = m + k;
    return all;
}

/* The text a turn reads, as tokens. */
static int32_t *turn_tokens(struct server *srv, struct job *j, const struct sess *x, int32_t pending, int32_t *n) {
    const bool first = !x || x->turns == 0;
    char *text = NULL;
    kvb_status st;
    if (j->kind == JOB_COMPLETION) {
        return tokens_of(srv, j->prompt, first, first ? -1 : pending, n);
    }
    if (first) {
        /* the whole conversation, with the template's default system message if it has one */
        struct kvb_chat_message *msgs = j->msgs;
        int32_t nm = j->n_msgs;
        struct kvb_chat_message *withsys = NULL;
        if (!j->system && srv->default_system[0]) {
            withsys = malloc(sizeof *withsys * (size_t)(nm + 1));
            if (!withsys) return NULL;
            withsys[0] = (struct kvb_chat_message){"system", srv->default_system};
            memcpy(withsys + 1, msgs, sizeof *msgs * (size_t)nm);
            msgs = withsys;
            nm++;
        }
        size_t len;
        st = kvb_chat_format(srv->style, msgs, nm, true, &text, &len);
        free(withsys);
    } else {
        st = kvb_chat_turn_text(srv->style, NULL, j->user, false, x->stop_text, &text, NULL);
    }
    if (st != KVB_OK) return NULL;
    int32_t *ids = tokens_of(srv, text, first, first ? -1 : pending, n);
    kvb_buffer_free(text);
    return ids;
}

/* Tries to start j. Returns 1 started (or failed for good: j is done),
 * 0 wait (pool), and keeps the queue order. */
static int admit(struct server *srv, struct job *j) {
    struct sched *s = srv->sched;
    struct sess *x = NULL;
    bool fresh = false;
    void *held = NULL;
    size_t held_len = 0;
    if (j->session_id[0]) {
        x = sess_find(s, j->session_id);
        if (x && x->busy) {
            job_fail(srv, j, 429, "session_busy", 1, "session '%s' is running a turn; retry when it ends", j->session_id);
            return 1;
        }
        if (!x) {
            void *blob = NULL;
            size_t bl = 0;
            const int g = srv->store->get(srv->store, j->session_id, &blob, &bl);
            if (g < 0) {
                job_fail(srv, j, 500, "server_error", 0, "session store: %s", srv->store->error);
                return 1;
            }
            x = sess_new(s, j->session_id);
            if (!x) { free(blob); job_fail(srv, j, 500, "server_error", 0, "out of memory"); return 1; }
            if (g == 1) fresh = true;
            else {
                size_t il;
                if (!blob_meta(blob, bl, x, &il)) {
                    free(blob);
                    sess_drop(s, x);
                    job_fail(srv, j, 500, "server_error", 0, "session '%s': the stored snapshot is damaged", j->session_id);
                    return 1;
                }
                held = blob; /* loaded below, not fetched twice */
                held_len = bl;
                x->turns = x->turns ? x->turns : 1;
            }
            x->pol = j->sp.policy;
        }
        if (!fresh && x->seq < 0) { /* in the store: bring it back */
            void *blob = held;
            size_t bl = held_len, il = 0;
            if (!blob && srv->store->get(srv->store, x->id, &blob, &bl) != 0) {
                free(blob);
                job_fail(srv, j, 500, "server_error", 0, "session '%s': cannot read it from the store: %s", x->id, srv->store->error);
                return 1;
            }
            const char *img = blob_meta(blob, bl, x, &il);
            kvb_status st = img ? kvb_batch_seq_load(s->b, &j->sp, img, il, &x->seq) : KVB_ERR_CORRUPT;
            while (st == KVB_ERR_NOMEM && offload_one(srv)) st = kvb_batch_seq_load(s->b, &j->sp, img, il, &x->seq);
            free(blob);
            if (st == KVB_ERR_NOMEM) { x->seq = -1; return 0; }
            if (st != KVB_OK) {
                x->seq = -1;
                job_fail(srv, j, 500, "server_error", 0, "session '%s': %s", x->id, img ? kvb_last_error() : "the stored snapshot is damaged");
                return 1;
            }
            struct kvb_cache_params cp;
            kvb_cache_get_params(kvb_batch_seq_cache(s->b, x->seq), &cp);
            x->pol = cp.policy;
        }
        if (!fresh && j->policy_given &&
            (j->sp.policy.id != x->pol.id || j->sp.policy.budget != x->pol.budget || j->sp.policy.n_sink != x->pol.n_sink)) {
            job_fail(srv, j, 400, "invalid_request_error", 0, "session '%s' keeps its cache under %s with budget %d and %d sinks; a turn cannot change them",
                     x->id, kvb_policy_name(x->pol.id), (int)x->pol.budget, (int)x->pol.n_sink);
            return 1;
        }
        if (!fresh) j->sp.policy = x->pol;
    }
    if (x) x->busy = j; /* from here on offload_one must not pick it */
    int32_t pending = -1;
    if (x && x->seq >= 0) {
        struct kvb_seq_info si;
        kvb_batch_seq_info(s->b, x->seq, &si);
        pending = si.last_token;
    }
    int32_t n = 0;
    int32_t *ids = turn_tokens(srv, j, x && !fresh ? x : NULL, pending, &n);
    if (!ids || n < 1) {
        free(ids);
        if (x) x->busy = NULL;
        if (fresh && x) sess_drop(s, x);
        job_fail(srv, j, 400, "invalid_request_error", 0, "the prompt is empty after tokenizing");
        return 1;
    }
    kvb_status st = kvb_batch_can_admit(s->b, &j->sp, n);
    while (st == KVB_ERR_NOMEM && offload_one(srv)) st = kvb_batch_can_admit(s->b, &j->sp, n);
    if (st == KVB_ERR_NOMEM) {
        free(ids);
        if (x) x->busy = NULL;
        if (fresh && x) sess_drop(s, x);
        if (s->n_active == 0) { /* an empty pool cannot hold it: waiting will not help */
            job_fail(srv, j, 400, "invalid_request_error", 0, "the page pool (--pool-mb) cannot hold this request even when empty: %s", kvb_last_error());
            return 1;
        }
        return 0;
    }
    if (x && x->seq >= 0) st = kvb_batch_continue(s->b, x->seq, &j->sp, ids, n);
    else {
        int32_t id = -1;
        st = kvb_batch_add(s->b, &j->sp, ids, n, &id);
        while (st == KVB_ERR_NOMEM && offload_one(srv)) st = kvb_batch_add(s->b, &j->sp, ids, n, &id);
        if (st == KVB_OK && x) x->seq = id;
        j->seq = id;
    }
    free(ids);
    if (st != KVB_OK) {
        if (x) x->busy = NULL;
        if (fresh && x) sess_drop(s, x);
        job_fail(srv, j, 400, "invalid_request_error", 0, "%s", kvb_last_error());
        return 1;
    }
    if (x) {
        j->seq = x->seq;
        x->busy = j;
        x->last_used = serve_now();
    }
    j->prompt_tokens = n;
    j->started = true;
    s->active[s->n_active++] = j;
    return 1;
}

/* The longest tail of text that begins some stop string. */
static size_t stop_prefix_tail(const struct job *j) {
    size_t best = 0;
    for (int k = 0; k < j->n_stops; k++) {
        const size_t ls = strlen(j->stops[k]);
        for (size_t t = ls - 1; t > best; t--)
            if (t <= j->text.n && !memcmp(j->text.s + j->text.n - t, j->stops[k], t)) { best = t; break; }
    }
    return best;
}

/* Appends piece to the job's text; true when a stop string ended it. */
static bool add_text(struct job *j, const char *piece, size_t pl) {
    const size_t before = j->text.n;
    sb_put(&j->text, piece, pl);
    for (int k = 0; k < j->n_stops; k++) {
        const size_t ls = strlen(j->stops[k]);
        const size_t from = before >= ls ? before - ls + 1 : 0;
        for (size_t at = from; at + ls <= j->text.n; at++)
            if (!memcmp(j->text.s + at, j->stops[k], ls)) {
                j->text.n = at;
                j->text.s[at] = 0;
                j->held = 0;
                return true;
            }
    }
    j->held = stop_prefix_tail(j);
    return false;
}

static void finish_turn(struct server *srv, struct job *j, const struct kvb_seq_info *si) {
    struct sched *s = srv->sched;
    char tail[16];
    const size_t tl = kvb_detok_flush(&j->dt, tail, sizeof tail);
    if (tl) sb_put(&j->text, tail, tl);
    j->held = 0;
    if (!j->finish) j->finish = si->stop && (!strcmp(si->stop, "length") || !strcmp(si->stop, "context")) ? "length" : "stop";
    struct sess *x = j->session_id[0] ? sess_find(s, j->session_id) : NULL;
    seq_figures(srv, j->seq, &j->position, &j->cache_tokens, &j->kv_bytes, &j->cold_pages);
    if (x) {
        const int32_t eos = kvb_vocab_special(srv->vocab, KVB_SPECIAL_EOS), eot = kvb_vocab_special(srv->vocab, KVB_SPECIAL_EOT);
        x->stop_text[0] = 0;
        if (si->last_token >= 0 && (si->last_token == eos || si->last_token == eot) && srv->style != KVB_CHAT_PLAIN) {
            const size_t n = kvb_vocab_token_bytes(srv->vocab, si->last_token, true, x->stop_text, sizeof x->stop_text - 1);
            x->stop_text[n < sizeof x->stop_text ? n : sizeof x->stop_text - 1] = 0;
        }
        x->turns++;
        x->busy = NULL;
        x->last_used = serve_now();
        sess_figures(srv, x);
        /* the write (a TinyLlama session at B = 1024 is 23 MB) runs without
         * the server mutex: connections keep streaming and queueing
         * meanwhile. The batch, the session table and the store are the
         * scheduler's alone, and the job is not done yet, so nothing this
         * needs can change; flags set meanwhile are read after. */
        pthread_mutex_unlock(&srv->mu);
        const int prc = sess_persist(srv, x);
        pthread_mutex_lock(&srv->mu);
        if (prc != 0) {
            /* the turn happened but is not durable: say so rather than pretend */
            snprintf(j->error, sizeof j->error, "the turn finished but the session store failed: %.180s", srv->store->error);
        }
        if (srv->store->shared) { /* another replica may take the next turn: the store is the only copy */
            kvb_batch_remove(s->b, x->seq);
            sess_drop(s, x);
        }
    } else {
        kvb_batch_remove(s->b, j->seq);
    }
    j->seq = -1;
    j->done = true;
    metrics_count(srv->metrics, 0, 0, 1, 0);
    pthread_cond_broadcast(&j->cv);
}

static void drop_active(struct sched *s, int i) { s->active[i] = s->active[--s->n_active]; }

/* After a step: new tokens to their jobs, finished turns closed. Under mu
 * (released while a finished session is written to the store). */
static void publish(struct server *srv) {
    struct sched *s = srv->sched;
    const int32_t eos = kvb_vocab_special(srv->vocab, KVB_SPECIAL_EOS), eot = kvb_vocab_special(srv->vocab, KVB_SPECIAL_EOT);
    for (int i = 0; i < s->n_active; i++) {
        struct job *j = s->active[i];
        struct kvb_seq_info si;
        if (kvb_batch_seq_info(s->b, j->seq, &si) != KVB_OK) continue;
        bool stopped = false;
        if (si.n_generated > j->completion_tokens) {
            const double now = serve_now();
            metrics_token(srv->metrics, j->completion_tokens == 0, j->completion_tokens == 0 ? now - j->t_submit : now - j->t_last);
            if (!j->completion_tokens) j->t_first = now;
            j->t_last = now;
            const int32_t tok = si.last_token;
            const bool end = si.state == KVB_SEQ_DONE && si.stop && !strcmp(si.stop, "eos") && (tok == eos || tok == eot);
            if (!end) {
                j->completion_tokens = si.n_generated;
                char piece[256];
                size_t pl = kvb_detok_push(srv->vocab, &j->dt, tok, false, piece, sizeof piece);
                if (pl > sizeof piece) pl = 0;
                stopped = add_text(j, piece, pl);
                if (stopped) {
                    j->finish = "stop";
                    if (si.state == KVB_SEQ_DECODE) kvb_batch_finish(s->b, j->seq);
                    kvb_batch_seq_info(s->b, j->seq, &si);
                }
            }
        }
        if (si.state == KVB_SEQ_DONE) {
            finish_turn(srv, j, &si);
            drop_active(s, i--);
            if (j->abandoned) job_free(j);
        } else {
            pthread_cond_broadcast(&j->cv);
        }
    }
}

static void cancel_jobs(struct server *srv) {
    struct sched *s = srv->sched;
    for (int i = 0; i < s->n_active; i++) {
        struct job *j = s->active[i];
        if (!j->cancelled) continue;
        struct sess *x = j->session_id[0] ? sess_find(s, j->session_id) : NULL;
        kvb_batch_remove(s->b, j->seq); /* pages back now; a session is as of its last stored turn */
        if (x) {
            x->seq = -1;
            x->busy = NULL;
            if (x->turns == 0) sess_drop(s, x); /* never stored */
        }
        j->seq = -1;
        j->done = j->failed = true;
        if (!j->status) j->status = 499; /* the client went away */
        drop_active(s, i--);
        metrics_count(srv->metrics, 0, 0, 0, 1);
        if (j->abandoned) job_free(j);
        else pthread_cond_broadcast(&j->cv);
    }
}

/* ---- session queries (scheduler thread) ---- */

static int ctl_json(struct server *srv, const char *id, struct sbuf *out) {
    struct sched *s = srv->sched;
    struct sess *x = sess_find(s, id), tmp;
    if (!x) {
        void *blob = NULL;
        size_t bl = 0, il;
        const int g = srv->store->get(srv->store, id, &blob, &bl);
        if (g != 0) { free(blob); return g == 1 ? 404 : 500; }
        memset(&tmp, 0, sizeof tmp);
        snprintf(tmp.id, sizeof tmp.id, "%s", id);
        tmp.seq = -1;
        const bool ok = blob_meta(blob, bl, &tmp, &il) != NULL;
        free(blob);
        if (!ok) return 500;
        x = &tmp;
    } else if (!x->busy) {
        sess_figures(srv, x);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", x->id);
    cJSON_AddStringToObject(o, "object", "session");
    cJSON_AddBoolToObject(o, "in_memory", x->seq >= 0);
    cJSON_AddBoolToObject(o, "busy", x->busy != NULL);
    cJSON_AddNumberToObject(o, "turns", (double)x->turns);
    cJSON_AddNumberToObject(o, "position", (double)x->position);
    cJSON_AddNumberToObject(o, "cache_tokens", (double)x->cache_tokens);
    cJSON_AddNumberToObject(o, "kv_bytes", (double)x->kv_bytes);
    cJSON_AddNumberToObject(o, "cold_pages", (double)x->cold_pages);
    cJSON_AddNumberToObject(o, "stored_bytes", (double)x->stored_bytes);
    if (x != &tmp) {
        cJSON_AddStringToObject(o, "kv_policy", kvb_policy_name(x->pol.id));
        cJSON_AddNumberToObject(o, "kv_budget", x->pol.budget);
        cJSON_AddNumberToObject(o, "kv_sinks", x->pol.n_sink);
    }
    cJSON_AddStringToObject(o, "store", srv->store->kind);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!t) return 500;
    sb_puts(out, t);
    sb_puts(out, "\n");
    free(t);
    return 200;
}

/* Which positions each layer keeps (per KV head), for the page. */
static int ctl_map(struct server *srv, const char *id, struct sbuf *out) {
    struct sched *s = srv->sched;
    struct sess *x = sess_find(s, id);
    if (!x) return 404;
    if (x->seq < 0) return 404;
    struct kvb_cache *c = kvb_batch_seq_cache(s->b, x->seq);
    const int32_t L = srv->mi.n_layer, H = srv->mi.n_head_kv;
    sb_printf(out, "{\"id\":\"%s\",\"object\":\"session.map\",\"position\":%lld,\"n_layer\":%d,\"n_head_kv\":%d,\"kv_policy\":\"%s\",\"kv_budget\":%d,"
                   "\"kv_sinks\":%d,\"busy\":%s,\"layers\":[",
              x->id, (long long)kvb_cache_n_past(c, 0), (int)L, (int)H, kvb_policy_name(x->pol.id), (int)x->pol.budget, (int)x->pol.n_sink,
              x->busy ? "true" : "false");
    for (int32_t l = 0; l < L; l++) {
        sb_puts(out, l ? ",[" : "[");
        for (int32_t h = 0; h < H; h++) {
            sb_puts(out, h ? ",[" : "[");
            const int32_t n = kvb_cache_n_slots(c, l, h);
            for (int32_t k = 0; k < n; k++) {
                struct kvb_slot_info si;
                if (kvb_cache_slot_info(c, l, h, k, &si) == KVB_OK) sb_printf(out, k ? ",%lld" : "%lld", (long long)si.pos_original);
            }
            sb_puts(out, "]");
        }
        sb_puts(out, "]");
    }
    sb_puts(out, "]}\n");
    return out->oom ? 500 : 200;
}

static int ctl_delete(struct server *srv, const char *id) {
    struct sched *s = srv->sched;
    struct sess *x = sess_find(s, id);
    if (x && x->busy) return 429;
    bool found = false;
    if (x) {
        if (x->seq >= 0) kvb_batch_remove(s->b, x->seq);
        sess_drop(s, x);
        found = true;
    }
    const int d = srv->store->del(srv->store, id);
    if (d < 0) return 500;
    return found || d == 0 ? 200 : 404;
}

static void run_ctls(struct server *srv) {
    struct sched *s = srv->sched;
    struct ctl *list = s->ctl_head;
    s->ctl_head = NULL;
    pthread_mutex_unlock(&srv->mu);
    for (struct ctl *c = list; c; c = c->next)
        c->status = c->kind == CTL_DELETE ? ctl_delete(srv, c->id) : c->kind == CTL_MAP ? ctl_map(srv, c->id, c->out) : ctl_json(srv, c->id, c->out);
    pthread_mutex_lock(&srv->mu);
    for (struct ctl *c = list, *nx; c; c = nx) {
        nx = c->next;
        c->done = true;
        pthread_cond_broadcast(&c->cv);
    }
}

static int ctl_run(struct server *srv, int kind, const char *id, struct sbuf *out) {
    struct ctl c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.id = id;
    c.out = out;
    pthread_cond_init(&c.cv, NULL);
    pthread_mutex_lock(&srv->mu);
    if (!srv->sched->running) {
        pthread_mutex_unlock(&srv->mu);
        pthread_cond_destroy(&c.cv);
        return 503;
    }
    c.next = srv->sched->ctl_head;
    srv->sched->ctl_head = &c;
    pthread_cond_signal(&srv->work);
    while (!c.done) pthread_cond_wait(&c.cv, &srv->mu);
    pthread_mutex_unlock(&srv->mu);
    pthread_cond_destroy(&c.cv);
    return c.status;
}

int sched_session_json(struct server *srv, const char *id, bool map, struct sbuf *out) { return ctl_run(srv, map ? CTL_MAP : CTL_JSON, id, out); }
int sched_session_delete(struct server *srv, const char *id) { return ctl_run(srv, CTL_DELETE, id, NULL); }

/* ---- the loop ---- */

static void gauges_update(struct server *srv) {
    struct sched *s = srv->sched;
    struct kvb_batch_stats bs;
    kvb_batch_get_stats(s->b, &bs);
    int64_t in_mem = 0;
    for (int i = 0; i < s->n_sess; i++) in_mem += s->sess[i].seq >= 0;
    s->in_memory = in_mem;
    s->page_bytes = (int64_t)bs.page_bytes;
    s->pages_used = bs.page_bytes ? (int64_t)(bs.pool_bytes_in_use / bs.page_bytes) : 0;
    s->pages_free = bs.page_bytes ? (int64_t)((bs.pool_bytes_capacity - bs.pool_bytes_in_use) / bs.page_bytes) : 0;
    const double now = serve_now();
    if (now - s->counted_at > 2.0) { /* the store is the scheduler's: counted here, now and then */
        s->persisted = srv->store->count(srv->store);
        s->counted_at = now;
    }
}

static void *loop(void *arg) {
    struct server *srv = arg;
    struct sched *s = srv->sched;
    double stop_deadline = 0;
    pthread_mutex_lock(&srv->mu);
    for (;;) {
        if (s->ctl_head) run_ctls(srv);
        cancel_jobs(srv);
        if (srv->stopping && !stop_deadline) stop_deadline = serve_now() + 5.0;
        if (srv->stopping && (s->n_active == 0 || serve_now() > stop_deadline)) break;
        /* admit in order */
        const double now = serve_now();
        while (srv->queue_head && !srv->stopping) {
            struct job *j = srv->queue_head;
            if (j->cancelled) {
                srv->queue_head = j->next;
                if (!srv->queue_head) srv->queue_tail = NULL;
                srv->n_queued--;
                j->done = j->failed = true;
                j->status = 499;
                if (j->abandoned) job_free(j);
                else pthread_cond_broadcast(&j->cv);
                continue;
            }
            if (s->n_active >= srv->o.parallel) break;
            const int r = admit(srv, j);
            if (r == 0) break; /* the pool is full: first come, first served */
            srv->queue_head = j->next;
            if (!srv->queue_head) srv->queue_tail = NULL;
            srv->n_queued--;
            if (j->done && j->abandoned) job_free(j);
        }
        /* deadlines of those still waiting */
        for (struct job **pp = &srv->queue_head, *j; (j = *pp);) {
            if (now - j->t_submit > srv->o.queue_timeout_s || srv->stopping) {
                *pp = j->next;
                srv->n_queued--;
                if (srv->queue_tail == j) {
                    srv->queue_tail = NULL;
                    for (struct job *t = srv->queue_head; t; t = t->next) srv->queue_tail = t;
                }
                job_fail(srv, j, 503, "server_busy", 5, "no room in the page pool for %d s (--queue-timeout); retry later", srv->o.queue_timeout_s);
                if (j->abandoned) job_free(j);
                continue;
            }
            pp = &j->next;
        }
        gauges_update(srv);
        if (!s->n_active) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
            pthread_cond_timedwait(&srv->work, &srv->mu, &ts);
            continue;
        }
        /* one step, outside the lock */
        int n_dec = 0, n_pre = 0;
        for (int i = 0; i < s->n_active; i++) {
            struct kvb_seq_info si;
            if (kvb_batch_seq_info(s->b, s->active[i]->seq, &si) == KVB_OK) {
                if (si.state == KVB_SEQ_DECODE) n_dec++;
                else n_pre++;
            }
        }
        struct kvb_batch_stats before;
        kvb_batch_get_stats(s->b, &before);
        pthread_mutex_unlock(&srv->mu);
        const double t0 = serve_now();
        int32_t adv = 0, failed = -1;
        kvb_status st = kvb_batch_step(s->b, &adv, &failed);
        const double dt = serve_now() - t0;
        pthread_mutex_lock(&srv->mu);
        if (st == KVB_ERR_NOMEM) {
            if (offload_one(srv)) continue;
            /* nothing idle to return: the failing job ends */
            for (int i = 0; i < s->n_active; i++)
                if (s->active[i]->seq == failed) {
                    struct job *j = s->active[i];
                    j->cancelled = true; /* cancel_jobs removes it */
                    j->status = 503;
                    j->retry_after = 5;
                    snprintf(j->error_type, sizeof j->error_type, "server_busy");
                    snprintf(j->error, sizeof j->error, "the page pool ran out during this turn; retry later");
                }
            cancel_jobs(srv);
            continue;
        }
        if (st != KVB_OK) {
            fprintf(stderr, "kvbound serve: step failed: %s\n", kvb_last_error());
            continue;
        }
        struct kvb_batch_stats after;
        kvb_batch_get_stats(s->b, &after);
        const int64_t rows = after.rows - before.rows;
        s->decode_tokens += n_dec;
        s->prefill_tokens += rows - n_dec;
        if (n_pre) s->prefill_time += dt;
        else s->decode_time += dt;
        metrics_count(srv->metrics, rows - n_dec, n_dec, 0, 0);
        metrics_rate(srv->metrics, s->prefill_time > 0 ? (double)s->prefill_tokens / s->prefill_time : 0,
                     s->decode_time > 0 ? (double)s->decode_tokens / s->decode_time : 0);
        publish(srv);
    }
    /* shutting down: whatever still runs is cancelled (sessions are as
     * stored), whatever still waits is told to come back */
    for (int i = 0; i < s->n_active; i++) s->active[i]->cancelled = true;
    cancel_jobs(srv);
    while (srv->queue_head) {
        struct job *j = srv->queue_head;
        srv->queue_head = j->next;
        srv->n_queued--;
        job_fail(srv, j, 503, "server_busy", 5, "the server is shutting down; retry on another replica or later");
        if (j->abandoned) job_free(j);
    }
    srv->queue_tail = NULL;
    s->running = false;
    while (s->ctl_head) run_ctls(srv);
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

int sched_start(struct server *srv) {
    struct sched *s = calloc(1, sizeof *s);
    if (!s) return -1;
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.kv_pool_bytes = srv->o.pool_bytes;
    bp.kv_dtype = srv->o.kv_dtype;
    bp.kv_dtype_v = srv->o.kv_dtype_v;
    bp.n_threads = srv->o.threads;
    bp.max_seqs = srv->o.parallel + srv->o.max_sessions;
    bp.step_tokens = srv->o.step_tokens;
    bp.chunk = srv->o.chunk;
    if (bp.max_seqs > 4096) bp.max_seqs = 4096;
    if (kvb_batch_init(srv->model, &bp, &s->b) != KVB_OK) {
        fprintf(stderr, "kvbound serve: %s\n", kvb_last_error());
        free(s);
        return -1;
    }
    s->active = calloc((size_t)srv->o.parallel, sizeof *s->active);
    if (!s->active) { kvb_batch_free(s->b); free(s); return -1; }
    srv->sched = s;
    s->running = true;
    if (pthread_create(&s->th, NULL, loop, srv)) {
        kvb_batch_free(s->b);
        free(s->active);
        free(s);
        srv->sched = NULL;
        return -1;
    }
    return 0;
}

void sched_stop(struct server *srv) {
    struct sched *s = srv->sched;
    if (!s) return;
    pthread_mutex_lock(&srv->mu);
    srv->stopping = true;
    pthread_cond_broadcast(&srv->work);
    pthread_mutex_unlock(&srv->mu);
    pthread_join(s->th, NULL);
    /* s stays: connection threads still being served may call ctl_run or
     * sched_gauges, which find it not running (503). sched_free, after the
     * HTTP daemon has stopped, releases it. */
}

void sched_free(struct server *srv) {
    struct sched *s = srv->sched;
    if (!s) return;
    kvb_batch_free(s->b);
    free(s->sess);
    free(s->active);
    free(s);
    srv->sched = NULL;
}

bool sched_submit(struct server *srv, struct job *j) {
    pthread_mutex_lock(&srv->mu);
    if (srv->stopping || srv->n_queued >= srv->o.queue_max) {
        pthread_mutex_unlock(&srv->mu);
        return false;
    }
    j->next = NULL;
    if (srv->queue_tail) srv->queue_tail->next = j;
    else srv->queue_head = j;
    srv->queue_tail = j;
    srv->n_queued++;
    pthread_cond_signal(&srv->work);
    pthread_mutex_unlock(&srv->mu);
    return true;
}

void sched_gauges(struct server *srv, struct sched_gauges *g) {
    memset(g, 0, sizeof *g);
    pthread_mutex_lock(&srv->mu);
    struct sched *s = srv->sched;
    if (s) {
        g->pages_used = s->pages_used;
        g->pages_free = s->pages_free;
        g->active = s->n_active;
        g->in_memory = s->in_memory;
        g->page_bytes = s->page_bytes;
        g->evictions_idle = s->offloaded;
        g->persisted = s->persisted;
    }
    g->queued = srv->n_queued;
    pthread_mutex_unlock(&srv->mu);
}

/*
 * sched.c — the scheduler thread: the only owner of the kvb_batch and the
 * session table. The store is the store worker's (store_queue.c): the
 * scheduler posts reads and writes and takes their answers at the top of
 * each loop, so no store I/O ever pauses a step.
 *
 * Loop: take the store worker's answers; answer session queries (state,
 * map, delete: from memory, else through the store); admit queued jobs in
 * order while --parallel allows and the pool can hold each one's minimum
 * (returning idle sessions' pages first; they are already in the store);
 * a job whose session is not in memory is parked while the worker reads
 * it, then comes back to the head of the queue; fail jobs that waited
 * past --queue-timeout; run one kvb_batch_step; hand each job its new text
 * (stop strings cut, their possible beginnings held back); finish turns: a
 * session's turn is acknowledged only when the worker has stored it at the
 * version it was read at (else 409 or 503, and the session is dropped from
 * memory: the store's copy is its state); a sessionless sequence is
 * removed. A cancelled job's sequence is removed at once.
 *
 * A session in memory is a DONE sequence in the batch between turns. Its
 * record keeps what the next turn needs: whether it had a turn, the text of
 * the stop token its last answer ended with (the chat template's glue), its
 * stored version, and its figures. Records exist only for sessions in
 * memory or in a turn, each its own allocation (a pointer to one stays
 * good while others go). The stored blob is "KVBSRV1\0", u32 meta length,
 * the meta JSON, then the library's session image (kvb_batch_seq_save).
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
    int64_t version;      /* in the store; STORE_ABSENT: never stored */
};

struct ctl {
    enum { CTL_JSON, CTL_MAP, CTL_DELETE } kind;
    const char *id;
    struct sbuf *out;
    int status;
    bool done;
    bool was_in_memory; /* DELETE: the session was in memory (so found) */
    pthread_cond_t cv;
    struct ctl *next;
};

/* Who waits for a store request. */
enum { OWN_FETCH, OWN_SAVE, OWN_CTL };

struct sched {
    pthread_t th;
    bool running;
    struct kvb_batch *b;
    struct sess **sess; /* each record its own allocation: a pointer to one stays good while others come and go */
    int n_sess, cap_sess;
    struct job **active;
    int n_active;
    struct ctl *ctl_head;
    struct store_queue *q; /* the store worker */
    bool store_stopped;
    int n_parked;          /* jobs waiting for their session from the store */
    /* figures */
    int64_t prefill_tokens, decode_tokens, offloaded;
    double prefill_time, decode_time;
    int64_t pages_used, pages_free, page_bytes, in_memory, persisted;
};

/* ---- sessions ---- */

static struct sess *sess_find(struct sched *s, const char *id) {
    for (int i = 0; i < s->n_sess; i++)
        if (!strcmp(s->sess[i]->id, id)) return s->sess[i];
    return NULL;
}

static struct sess *sess_new(struct sched *s, const char *id) {
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

static void sess_drop(struct sched *s, struct sess *x) {
    for (int i = 0; i < s->n_sess; i++)
        if (s->sess[i] == x) {
            s->sess[i] = s->sess[--s->n_sess];
            break;
        }
    free(x);
}

/* Forgets a session here: its sequence (if any) leaves the batch and its
 * record the table, which so holds only sessions in memory or in a turn.
 * What the store holds is its state. */
static void sess_release(struct sched *s, struct sess *x) {
    if (x->seq >= 0) kvb_batch_remove(s->b, x->seq);
    sess_drop(s, x);
}

static struct store_req *store_req_new(enum store_op op, const char *id, void *owner, int owner_kind) {
    struct store_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->op = op;
    snprintf(r->id, sizeof r->id, "%s", id);
    r->owner = owner;
    r->owner_kind = owner_kind;
    return r;
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

/* The session (DONE in the batch) as the stored blob, its meta saying
 * `turns` turns. NULL on failure (the cause to stderr). */
static void *session_blob(struct server *srv, const struct sess *x, int64_t turns, size_t *len) {
    void *img = NULL;
    size_t il = 0;
    if (kvb_batch_seq_save(srv->sched->b, x->seq, &img, &il) != KVB_OK) {
        fprintf(stderr, "kvbound serve: session %s: %s\n", x->id, kvb_last_error());
        return NULL;
    }
    struct sess with = *x;
    with.turns = turns;
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
        struct sess *x = s->sess[i];
        if (x->seq >= 0 && !x->busy && (!lru || x->last_used < lru->last_used)) lru = x;
    }
    if (!lru) return false;
    sess_release(s, lru);
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

/* A session's turn is done with (refused, cut or failed): the record is
 * freed from it, and forgotten when it is not in memory or the store is
 * shared (then the store is its only copy between turns). */
static void sess_idle(struct server *srv, struct sess *x) {
    x->busy = NULL;
    if (x->seq < 0 || srv->store->shared) sess_release(srv->sched, x);
}

/* A queued job leaves the queue without starting: a session it held (a
 * fetched one waiting for room) is let go. */
static void unbusy(struct server *srv, struct job *j) {
    struct sess *x = j->session_id[0] ? sess_find(srv->sched, j->session_id) : NULL;
    if (x && x->busy == j) sess_idle(srv, x);
}

enum { ADMIT_WAIT = 0, ADMIT_DONE = 1, ADMIT_PARKED = 2 };

/* Tries to start j. ADMIT_DONE: started, or failed for good (j is done);
 * ADMIT_WAIT: the pool is full, j keeps its place; ADMIT_PARKED: its
 * session is being read from the store, and j comes back to the head of
 * the queue with it (store_done). */
static int admit(struct server *srv, struct job *j) {
    struct sched *s = srv->sched;
    struct sess *x = NULL;
    bool fresh = false;
    if (j->session_id[0]) {
        x = sess_find(s, j->session_id);
        if (x && x->busy && x->busy != j) {
            job_fail(srv, j, 429, "session_busy", 1, "session '%s' is running a turn; retry when it ends", j->session_id);
            return ADMIT_DONE;
        }
        if (!x || x->seq < 0) {
            if (!x && !(x = sess_new(s, j->session_id))) { job_fail(srv, j, 500, "server_error", 0, "out of memory"); return ADMIT_DONE; }
            x->busy = j;
            if (!j->fetched) { /* ask the store, off this thread */
                struct store_req *r = s->store_stopped ? NULL : store_req_new(SOP_GET, x->id, j, OWN_FETCH);
                if (!r) {
                    sess_idle(srv, x);
                    job_fail(srv, j, 503, "server_busy", 1, "the session store cannot be asked now; retry");
                    return ADMIT_DONE;
                }
                store_queue_post(s->q, r);
                s->n_parked++;
                return ADMIT_PARKED;
            }
            if (j->fetch_rc == STORE_ERROR) {
                sess_idle(srv, x);
                job_fail(srv, j, 503, "store_unavailable", 1, "session '%s': the session store cannot be read: %.160s", j->session_id, j->fetch_error);
                return ADMIT_DONE;
            }
            if (j->fetch_rc == STORE_NOT_FOUND) {
                fresh = true;
                x->turns = 0;
                x->version = STORE_ABSENT;
                x->pol = j->sp.policy;
            } else {
                size_t il = 0;
                const char *img = blob_meta(j->blob, j->blob_len, x, &il);
                kvb_status st = img ? kvb_batch_seq_load(s->b, &j->sp, img, il, &x->seq) : KVB_ERR_CORRUPT;
                while (st == KVB_ERR_NOMEM && offload_one(srv)) st = kvb_batch_seq_load(s->b, &j->sp, img, il, &x->seq);
                if (st == KVB_ERR_NOMEM) { x->seq = -1; return ADMIT_WAIT; } /* the blob stays on j */
                if (st != KVB_OK) {
                    x->seq = -1;
                    sess_idle(srv, x);
                    job_fail(srv, j, 500, "server_error", 0, "session '%s': %s", j->session_id, img ? kvb_last_error() : "the stored snapshot is damaged");
                    return ADMIT_DONE;
                }
                free(j->blob);
                j->blob = NULL;
                x->version = j->blob_version;
                x->turns = x->turns ? x->turns : 1;
                struct kvb_cache_params cp;
                kvb_cache_get_params(kvb_batch_seq_cache(s->b, x->seq), &cp);
                x->pol = cp.policy;
            }
        }
        if (!fresh && j->policy_given &&
            (j->sp.policy.id != x->pol.id || j->sp.policy.budget != x->pol.budget || j->sp.policy.n_sink != x->pol.n_sink)) {
            const struct kvb_policy_params kept = x->pol;
            sess_idle(srv, x);
            job_fail(srv, j, 400, "invalid_request_error", 0, "session '%s' keeps its cache under %s with budget %d and %d sinks; a turn cannot change them",
                     j->session_id, kvb_policy_name(kept.id), (int)kept.budget, (int)kept.n_sink);
            return ADMIT_DONE;
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
        if (x) sess_idle(srv, x);
        job_fail(srv, j, 400, "invalid_request_error", 0, "the prompt is empty after tokenizing");
        return ADMIT_DONE;
    }
    kvb_status st = kvb_batch_can_admit(s->b, &j->sp, n);
    while (st == KVB_ERR_NOMEM && offload_one(srv)) st = kvb_batch_can_admit(s->b, &j->sp, n);
    if (st == KVB_ERR_NOMEM) {
        free(ids);
        if (s->n_active == 0) { /* an empty pool cannot hold it: waiting will not help */
            if (x) sess_idle(srv, x);
            job_fail(srv, j, 400, "invalid_request_error", 0, "the page pool (--pool-mb) cannot hold this request even when empty: %s", kvb_last_error());
            return ADMIT_DONE;
        }
        return ADMIT_WAIT; /* x stays busy with j (its answer from the store is on j) */
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
        if (x) sess_idle(srv, x);
        job_fail(srv, j, 400, "invalid_request_error", 0, "%s", kvb_last_error());
        return ADMIT_DONE;
    }
    if (x) {
        j->seq = x->seq;
        x->busy = j;
        x->last_used = serve_now();
    }
    j->prompt_tokens = n;
    j->started = true;
    s->active[s->n_active++] = j;
    return ADMIT_DONE;
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
        x->last_used = serve_now();
        sess_figures(srv, x);
        /* the turn is acknowledged only once its session is stored: the
         * blob is made here (the batch is this thread's), written by the
         * store worker, and the job ends in store_done */
        size_t bl = 0;
        void *blob = session_blob(srv, x, x->turns + 1, &bl);
        struct store_req *r = blob && !s->store_stopped ? store_req_new(SOP_PUT, x->id, j, OWN_SAVE) : NULL;
        if (!r) {
            free(blob);
            sess_release(s, x);
            j->seq = -1;
            job_fail(srv, j, 503, "store_unavailable", 1, "the turn was not stored (%s); the session is as of its last stored turn: retry the turn",
                     s->store_stopped ? "the server is stopping" : "out of memory");
            return;
        }
        r->buf = blob;
        r->len = bl;
        r->version = x->version;
        store_queue_post(s->q, r);
        j->saving = true;
        return;
    }
    kvb_batch_remove(s->b, j->seq);
    j->seq = -1;
    j->done = true;
    metrics_count(srv->metrics, 0, 0, 1, 0);
    pthread_cond_broadcast(&j->cv);
}

static void drop_active(struct sched *s, int i) { s->active[i] = s->active[--s->n_active]; }

/* After a step: new tokens to their jobs, finished turns closed (a
 * session's handed to the store worker). Under mu. */
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
            if (j->abandoned && j->done) job_free(j);
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
        /* pages back now; a session is as of its last stored turn */
        if (x) sess_release(s, x);
        else kvb_batch_remove(s->b, j->seq);
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

static int sess_json(struct server *srv, const struct sess *x, bool busy, bool with_policy, struct sbuf *out) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", x->id);
    cJSON_AddStringToObject(o, "object", "session");
    cJSON_AddBoolToObject(o, "in_memory", x->seq >= 0);
    cJSON_AddBoolToObject(o, "busy", busy);
    cJSON_AddNumberToObject(o, "turns", (double)x->turns);
    cJSON_AddNumberToObject(o, "position", (double)x->position);
    cJSON_AddNumberToObject(o, "cache_tokens", (double)x->cache_tokens);
    cJSON_AddNumberToObject(o, "kv_bytes", (double)x->kv_bytes);
    cJSON_AddNumberToObject(o, "cold_pages", (double)x->cold_pages);
    cJSON_AddNumberToObject(o, "stored_bytes", (double)x->stored_bytes);
    cJSON_AddNumberToObject(o, "version", (double)(x->version < 0 ? 0 : x->version));
    if (with_policy) {
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

/* Which positions each layer keeps (per KV head) in a sequence, for the page. */
static int seq_map(struct server *srv, const char *id, int32_t seq, const struct kvb_policy_params *pol, bool busy, struct sbuf *out) {
    struct kvb_cache *c = kvb_batch_seq_cache(srv->sched->b, seq);
    if (!c) return 404;
    const int32_t L = srv->mi.n_layer, H = srv->mi.n_head_kv;
    sb_printf(out, "{\"id\":\"%s\",\"object\":\"session.map\",\"position\":%lld,\"n_layer\":%d,\"n_head_kv\":%d,\"kv_policy\":\"%s\",\"kv_budget\":%d,"
                   "\"kv_sinks\":%d,\"busy\":%s,\"layers\":[",
              id, (long long)kvb_cache_n_past(c, 0), (int)L, (int)H, kvb_policy_name(pol->id), (int)pol->budget, (int)pol->n_sink,
              busy ? "true" : "false");
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

/* Answers c from memory when it can; false: it needs the store. */
static bool ctl_from_memory(struct server *srv, struct ctl *c) {
    struct sched *s = srv->sched;
    struct sess *x = sess_find(s, c->id);
    switch (c->kind) {
    case CTL_JSON:
        if (!x || x->seq < 0) return false;
        if (!x->busy) sess_figures(srv, x);
        c->status = sess_json(srv, x, x->busy != NULL, true, c->out);
        return true;
    case CTL_MAP:
        if (!x || x->seq < 0) return false;
        c->status = seq_map(srv, x->id, x->seq, &x->pol, x->busy != NULL, c->out);
        return true;
    case CTL_DELETE:
        if (x && x->busy) { c->status = 429; return true; }
        if (x) { sess_release(s, x); c->was_in_memory = true; }
        return false; /* and from the store */
    }
    return true;
}

/* Answers c from what the store said. */
static void ctl_from_store(struct server *srv, struct ctl *c, struct store_req *r) {
    if (c->kind == CTL_DELETE) {
        c->status = r->rc == STORE_OK || (r->rc == STORE_NOT_FOUND && c->was_in_memory) ? 200 : r->rc == STORE_NOT_FOUND ? 404 : 500;
        return;
    }
    if (r->rc == STORE_NOT_FOUND) { c->status = 404; return; }
    if (r->rc != STORE_OK) { c->status = 503; return; }
    struct sess tmp;
    memset(&tmp, 0, sizeof tmp);
    snprintf(tmp.id, sizeof tmp.id, "%s", c->id);
    tmp.seq = -1;
    tmp.version = r->version;
    size_t il = 0;
    const char *img = blob_meta(r->buf, r->len, &tmp, &il);
    if (!img) { c->status = 500; return; }
    const struct sess *live = sess_find(srv->sched, c->id);
    const bool busy = live && live->busy;
    if (c->kind == CTL_JSON) { c->status = sess_json(srv, &tmp, busy, false, c->out); return; }
    /* the map of a stored session: loaded for the moment, then let go */
    struct kvb_seq_params sp = kvb_seq_default_params();
    int32_t seq = -1;
    kvb_status st = kvb_batch_seq_load(srv->sched->b, &sp, img, il, &seq);
    while (st == KVB_ERR_NOMEM && offload_one(srv)) st = kvb_batch_seq_load(srv->sched->b, &sp, img, il, &seq);
    if (st != KVB_OK) { c->status = st == KVB_ERR_NOMEM ? 503 : 500; return; }
    struct kvb_cache_params cp;
    kvb_cache_get_params(kvb_batch_seq_cache(srv->sched->b, seq), &cp);
    c->status = seq_map(srv, c->id, seq, &cp.policy, busy, c->out);
    kvb_batch_remove(srv->sched->b, seq);
}

static void ctl_finish(struct ctl *c) {
    c->done = true;
    pthread_cond_broadcast(&c->cv);
}

/* The session queries waiting (under mu): answered from memory, or sent
 * to the store worker. */
static void run_ctls(struct server *srv) {
    struct sched *s = srv->sched;
    struct ctl *list = s->ctl_head;
    s->ctl_head = NULL;
    for (struct ctl *c = list, *nx; c; c = nx) {
        nx = c->next;
        if (ctl_from_memory(srv, c)) { ctl_finish(c); continue; }
        struct store_req *r = s->store_stopped ? NULL : store_req_new(c->kind == CTL_DELETE ? SOP_DEL : SOP_GET, c->id, c, OWN_CTL);
        if (!r) { c->status = 503; ctl_finish(c); continue; }
        store_queue_post(s->q, r);
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

/* ---- what the store worker finished (under mu) ---- */

static void fetch_done(struct server *srv, struct job *j, struct store_req *r) {
    struct sched *s = srv->sched;
    s->n_parked--;
    j->fetched = true;
    j->fetch_rc = r->rc;
    j->blob = r->buf;
    j->blob_len = r->len;
    j->blob_version = r->version;
    r->buf = NULL;
    snprintf(j->fetch_error, sizeof j->fetch_error, "%.150s", r->error);
    if (j->cancelled || srv->stopping) {
        struct sess *x = sess_find(s, j->session_id);
        if (x && x->busy == j) sess_idle(srv, x);
        if (srv->stopping) job_fail(srv, j, 503, "server_busy", 5, "the server is shutting down; retry on another replica or later");
        else { j->done = j->failed = true; j->status = 499; }
        if (j->abandoned) job_free(j);
        return;
    }
    /* back to the head of the queue, where admit finds its answer */
    j->next = srv->queue_head;
    srv->queue_head = j;
    if (!srv->queue_tail) srv->queue_tail = j;
    srv->n_queued++;
}

static void save_done(struct server *srv, struct job *j, struct store_req *r) {
    struct sched *s = srv->sched;
    struct sess *x = sess_find(s, j->session_id);
    j->saving = false;
    if (!x || x->busy != j) { /* cannot happen: a saving session is busy, and nothing drops a busy one */
        job_fail(srv, j, 500, "server_error", 0, "session '%s' was lost while it was stored", j->session_id);
    } else if (r->rc == STORE_OK) {
        x->version = r->version;
        x->turns++;
        x->stored_bytes = r->len;
        x->last_used = serve_now();
        sess_idle(srv, x);
        j->done = true;
        metrics_count(srv->metrics, 0, 0, 1, 0);
        pthread_cond_broadcast(&j->cv);
    } else {
        /* not stored: nothing of this turn is kept, the store's state is the
         * session's, and the same turn can be sent again */
        sess_release(s, x);
        if (r->rc == STORE_CONFLICT)
            job_fail(srv, j, 409, "session_conflict", 0, "session '%s' was changed elsewhere (another replica) while this turn ran; this turn was not kept: retry it",
                     j->session_id);
        else
            job_fail(srv, j, 503, "store_unavailable", 1, "the turn was not stored (%.160s); the session is as of its last stored turn: retry the turn",
                     r->error);
    }
    if (j->abandoned) job_free(j);
}

static void store_done(struct server *srv) {
    struct store_req *list = store_queue_done(srv->sched->q);
    for (struct store_req *r = list, *nx; r; r = nx) {
        nx = r->next;
        if (r->owner_kind == OWN_FETCH) fetch_done(srv, r->owner, r);
        else if (r->owner_kind == OWN_SAVE) save_done(srv, r->owner, r);
        else {
            ctl_from_store(srv, r->owner, r);
            ctl_finish(r->owner);
        }
        free(r->buf);
        free(r);
    }
}

int sched_session_json(struct server *srv, const char *id, bool map, struct sbuf *out) { return ctl_run(srv, map ? CTL_MAP : CTL_JSON, id, out); }
int sched_session_delete(struct server *srv, const char *id) { return ctl_run(srv, CTL_DELETE, id, NULL); }

/* ---- the loop ---- */

static void gauges_update(struct server *srv) {
    struct sched *s = srv->sched;
    struct kvb_batch_stats bs;
    kvb_batch_get_stats(s->b, &bs);
    int64_t in_mem = 0;
    for (int i = 0; i < s->n_sess; i++) in_mem += s->sess[i]->seq >= 0;
    s->in_memory = in_mem;
    s->page_bytes = (int64_t)bs.page_bytes;
    s->pages_used = bs.page_bytes ? (int64_t)(bs.pool_bytes_in_use / bs.page_bytes) : 0;
    s->pages_free = bs.page_bytes ? (int64_t)((bs.pool_bytes_capacity - bs.pool_bytes_in_use) / bs.page_bytes) : 0;
    s->persisted = store_queue_count(s->q); /* counted by the store worker */
}

static void *loop(void *arg) {
    struct server *srv = arg;
    struct sched *s = srv->sched;
    double stop_deadline = 0;
    pthread_mutex_lock(&srv->mu);
    for (;;) {
        store_done(srv);
        if (s->ctl_head) run_ctls(srv);
        cancel_jobs(srv);
        if (srv->stopping && !stop_deadline) stop_deadline = serve_now() + 5.0;
        /* stopping: running turns finish and their sessions are stored, for 5 s at most */
        if (srv->stopping && ((s->n_active == 0 && store_queue_pending(s->q) == 0) || serve_now() > stop_deadline)) break;
        /* admit in order */
        const double now = serve_now();
        while (srv->queue_head && !srv->stopping) {
            struct job *j = srv->queue_head;
            if (j->cancelled) {
                srv->queue_head = j->next;
                if (!srv->queue_head) srv->queue_tail = NULL;
                srv->n_queued--;
                unbusy(srv, j);
                j->done = j->failed = true;
                j->status = 499;
                if (j->abandoned) job_free(j);
                else pthread_cond_broadcast(&j->cv);
                continue;
            }
            if (s->n_active + s->n_parked >= srv->o.parallel) break;
            const int r = admit(srv, j);
            if (r == ADMIT_WAIT) break; /* the pool is full: first come, first served */
            srv->queue_head = j->next; /* started, done, or parked (store_done puts it back) */
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
                unbusy(srv, j);
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
    /* shutting down: whatever still runs is cut (sessions are as stored)
     * and told to come back, as is whatever still waits */
    for (int i = 0; i < s->n_active; i++) {
        struct job *j = s->active[i];
        j->cancelled = true;
        j->status = 503;
        j->retry_after = 5;
        snprintf(j->error_type, sizeof j->error_type, "server_busy");
        snprintf(j->error, sizeof j->error, "the server is shutting down; this turn was cut and not kept: retry it on another replica or later");
    }
    cancel_jobs(srv);
    while (srv->queue_head) {
        struct job *j = srv->queue_head;
        srv->queue_head = j->next;
        srv->n_queued--;
        unbusy(srv, j);
        job_fail(srv, j, 503, "server_busy", 5, "the server is shutting down; retry on another replica or later");
        if (j->abandoned) job_free(j);
    }
    srv->queue_tail = NULL;
    s->running = false;
    /* the store worker ends its request in hand; the rest come back refused */
    pthread_mutex_unlock(&srv->mu);
    store_queue_stop(s->q);
    pthread_mutex_lock(&srv->mu);
    s->store_stopped = true;
    store_done(srv);
    while (srv->queue_head) { /* parked jobs that came back */
        struct job *j = srv->queue_head;
        srv->queue_head = j->next;
        srv->n_queued--;
        unbusy(srv, j);
        job_fail(srv, j, 503, "server_busy", 5, "the server is shutting down; retry on another replica or later");
        if (j->abandoned) job_free(j);
    }
    srv->queue_tail = NULL;
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
    s->q = store_queue_start(srv);
    s->running = s->q != NULL;
    if (!s->q || pthread_create(&s->th, NULL, loop, srv)) {
        if (s->q) store_queue_stop(s->q);
        store_queue_free(s->q);
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
    store_queue_free(s->q);
    kvb_batch_free(s->b);
    for (int i = 0; i < s->n_sess; i++) free(s->sess[i]);
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
        g->records = s->n_sess;
        g->store_pending = s->q ? store_queue_pending(s->q) : 0;
    }
    g->queued = srv->n_queued;
    pthread_mutex_unlock(&srv->mu);
}

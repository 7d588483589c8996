/*
 * store_queue.c — the store worker: every read, write, delete and count of
 * the session store runs on this one thread, so that a slow store (a 46 MB
 * session written, an SQLite file another process holds locked, a Redis
 * that stopped answering) never pauses the step loop and everyone's next
 * token with it.
 *
 * The scheduler posts a struct store_req under the server mutex and goes
 * on; the worker takes requests in order, runs each without the mutex,
 * puts it on the done list and signals the scheduler's condition variable.
 * In order matters: a DELETE posted before a GET of the same session is
 * seen by it. Between requests, and every 2 s when idle, the worker counts
 * the stored sessions (a counter in Redis, COUNT(*) in SQLite) for
 * /metrics, so no count runs on the loop.
 *
 * Health (GET /health): every request's outcome says whether the store
 * works (a failed read or write: it does not; a write made: it does), and
 * when /health asks and the last word is over a second old, the worker
 * probes it with a small write of its own, so a store that broke while no
 * turn came is seen, and one that came back is too.
 */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct store_queue {
    struct server *srv;
    pthread_t th;
    pthread_cond_t cv; /* the worker waits on it, with srv->mu */
    struct store_req *todo_head, *todo_tail, *done_head, *done_tail;
    int pending;       /* posted, not yet taken back done */
    bool stop, changed;
    int64_t count, c_count, c_bytes; /* sessions stored; checkpoints and their bytes */
    double counted_at;
    bool failing, probe_wanted;  /* the store failed its last use; /health asked for a probe */
    double checked_at;           /* when the last use or probe ended */
    char fail_error[256];
};

/* Under srv->mu: what a request's or a probe's outcome says of the store. */
static void note_outcome(struct store_queue *q, enum store_op op, int rc, bool probe, const char *error) {
    q->checked_at = serve_now();
    if (rc == STORE_ERROR || rc == STORE_UNKNOWN) {
        q->failing = true;
        snprintf(q->fail_error, sizeof q->fail_error, "%s", error[0] ? error : "the store failed");
    } else if (probe || (op != SOP_GET && op != SOP_CFIND)) {
        q->failing = false; /* a write was made (or refused by its version): the store can be written */
    }
}

static void append(struct store_req **head, struct store_req **tail, struct store_req *r) {
    r->next = NULL;
    if (*tail) (*tail)->next = r;
    else *head = r;
    *tail = r;
}

/* A completion's lookup: its group's checkpoints whose tokens begin the
 * prompt's (each listed key made again from the prompt's first ntok
 * tokens) become r->keys, longest first, for the reads below (one gone
 * or expired meanwhile: the next). */
#define FIND_LISTED 64
static void find_tokens(struct store *st, struct store_req *r) {
    char (*keys)[SERVE_CKEY] = malloc(sizeof *keys * FIND_LISTED);
    int32_t ntok[FIND_LISTED];
    int n = 0, m = 0;
    if (!keys || st->clist(st, r->grp, FIND_LISTED, keys, ntok, &n) != STORE_OK) n = 0;
    for (int i = 0; i < n; i++) { /* the matches, in place */
        char k[SERVE_CKEY];
        if (ntok[i] < IMPLICIT_GROUP_TOKENS || ntok[i] > r->n_toks) continue;
        implicit_token_key(r->seed, r->toks, ntok[i], k);
        if (strcmp(k, keys[i])) continue;
        memcpy(keys[m], keys[i], SERVE_CKEY);
        ntok[m++] = ntok[i];
    }
    for (int i = 1; i < m; i++) /* longest first (insertion sort: at most FIND_LISTED) */
        for (int k = i; k > 0 && ntok[k] > ntok[k - 1]; k--) {
            char t[SERVE_CKEY];
            memcpy(t, keys[k], SERVE_CKEY);
            memcpy(keys[k], keys[k - 1], SERVE_CKEY);
            memcpy(keys[k - 1], t, SERVE_CKEY);
            const int32_t tn = ntok[k];
            ntok[k] = ntok[k - 1];
            ntok[k - 1] = tn;
        }
    free(r->keys);
    r->keys = m ? keys : NULL;
    r->n_keys = m;
    memcpy(r->ntoks, ntok, sizeof(int32_t) * (size_t)m);
    if (!m) free(keys);
}

static void run_one(struct store *st, struct store_req *r) {
    st->error[0] = 0;
    switch (r->op) {
    case SOP_GET:
        r->rc = st->get(st, r->id, &r->buf, &r->len, &r->version);
        break;
    case SOP_PUT: {
        int64_t v = r->version;
        r->rc = st->put(st, r->id, r->buf, r->len, r->version, &v);
        if (r->rc == STORE_OK) r->version = v;
        free(r->buf);
        r->buf = NULL;
        break;
    }
    case SOP_DEL:
        r->rc = st->del(st, r->id);
        break;
    case SOP_CFIND: /* the latest checkpoint first: the first found is the one to resume */
        r->rc = STORE_NOT_FOUND;
        r->hit = -1;
        if (r->grp[0]) find_tokens(st, r);
        for (int i = 0; i < r->n_keys && r->rc == STORE_NOT_FOUND; i++) {
            r->rc = st->cget(st, r->keys[i], r->lim.ttl_s, &r->buf, &r->len);
            if (r->rc == STORE_OK) r->hit = i;
            if (r->rc == STORE_OK && r->grp[0]) r->ntok = r->ntoks[i];
        }
        break;
    case SOP_CPUT:
        r->rc = st->cput(st, r->id, r->grp[0] ? r->grp : NULL, r->ntok, r->buf, r->len, &r->lim, &r->c_count, &r->c_bytes);
        free(r->buf);
        r->buf = NULL;
        if (r->rc == STORE_OK && r->drop[0] && st->cdel(st, r->drop) == STORE_OK) r->c_count--; /* the conversation's oldest past --checkpoints */
        break;
    }
    if (r->rc == STORE_ERROR || r->rc == STORE_UNKNOWN) snprintf(r->error, sizeof r->error, "%s", st->error[0] ? st->error : "the store failed");
}

static void *worker(void *arg) {
    struct store_queue *q = arg;
    struct server *srv = q->srv;
    pthread_mutex_lock(&srv->mu);
    for (;;) {
        if (q->stop) break;
        struct store_req *r = q->todo_head;
        if (!r && q->probe_wanted && srv->store->probe) {
            q->probe_wanted = false;
            pthread_mutex_unlock(&srv->mu);
            srv->store->error[0] = 0;
            const int rc = srv->store->probe(srv->store);
            char err[256];
            snprintf(err, sizeof err, "%s", srv->store->error);
            pthread_mutex_lock(&srv->mu);
            note_outcome(q, SOP_PUT, rc, true, err);
            continue;
        }
        if (!r) {
            const double now = serve_now();
            if (q->changed || now - q->counted_at > 2.0) {
                q->changed = false;
                q->counted_at = now;
                pthread_mutex_unlock(&srv->mu);
                const int64_t n = srv->store->count(srv->store);
                int64_t cc = -1, cb = -1;
                if (srv->store->cstats(srv->store, &cc, &cb) != STORE_OK) cc = cb = -1;
                pthread_mutex_lock(&srv->mu);
                if (n >= 0) q->count = n;
                if (cc >= 0) { q->c_count = cc; q->c_bytes = cb; }
                continue;
            }
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&q->cv, &srv->mu, &ts);
            continue;
        }
        q->todo_head = r->next;
        if (!q->todo_head) q->todo_tail = NULL;
        pthread_mutex_unlock(&srv->mu);
        run_one(srv->store, r);
        pthread_mutex_lock(&srv->mu);
        if (r->op != SOP_CPUT && r->op != SOP_CFIND) note_outcome(q, r->op, r->rc, false, r->error); /* checkpoints are a cache: the sessions' health is theirs */
        if (r->op == SOP_CPUT && r->rc == STORE_OK) { q->c_count = r->c_count; q->c_bytes = r->c_bytes; }
        if (r->op != SOP_GET && r->op != SOP_CFIND) q->changed = true;
        append(&q->done_head, &q->done_tail, r);
        pthread_cond_broadcast(&srv->work);
    }
    /* stopping: whatever was not started comes back refused */
    while (q->todo_head) {
        struct store_req *r = q->todo_head;
        q->todo_head = r->next;
        if (r->op == SOP_PUT || r->op == SOP_CPUT) { free(r->buf); r->buf = NULL; }
        r->rc = STORE_ERROR;
        snprintf(r->error, sizeof r->error, "the server is stopping");
        append(&q->done_head, &q->done_tail, r);
    }
    q->todo_tail = NULL;
    pthread_cond_broadcast(&srv->work);
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

struct store_req *store_req_new(enum store_op op, const char *id, void *owner, int owner_kind) {
    struct store_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->op = op;
    snprintf(r->id, sizeof r->id, "%s", id);
    r->owner = owner;
    r->owner_kind = owner_kind;
    return r;
}

void store_req_free(struct store_req *r) {
    if (!r) return;
    free(r->buf);
    free(r->keys);
    free(r->toks);
    free(r);
}

struct store_queue *store_queue_start(struct server *srv) {
    struct store_queue *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->srv = srv;
    q->count = q->c_count = q->c_bytes = -1;
    q->counted_at = -1e9;
    pthread_cond_init(&q->cv, NULL);
    if (pthread_create(&q->th, NULL, worker, q)) {
        pthread_cond_destroy(&q->cv);
        free(q);
        return NULL;
    }
    return q;
}

void store_queue_post(struct store_queue *q, struct store_req *r) {
    append(&q->todo_head, &q->todo_tail, r);
    q->pending++;
    pthread_cond_signal(&q->cv);
}

struct store_req *store_queue_done(struct store_queue *q) {
    struct store_req *list = q->done_head;
    for (struct store_req *r = list; r; r = r->next) q->pending--;
    q->done_head = q->done_tail = NULL;
    return list;
}

int store_queue_pending(const struct store_queue *q) { return q->pending; }
int64_t store_queue_count(const struct store_queue *q) { return q->count; }
void store_queue_checkpoints(const struct store_queue *q, int64_t *count, int64_t *bytes) {
    *count = q->c_count;
    *bytes = q->c_bytes;
}

bool store_queue_healthy(struct store_queue *q, char *err, size_t cap) {
    if (serve_now() - q->checked_at > 1.0 && !q->probe_wanted) {
        q->probe_wanted = true;
        pthread_cond_signal(&q->cv);
    }
    if (q->failing) snprintf(err, cap, "%s", q->fail_error);
    return !q->failing;
}

void store_queue_stop(struct store_queue *q) {
    pthread_mutex_lock(&q->srv->mu);
    q->stop = true;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->srv->mu);
    pthread_join(q->th, NULL);
}

void store_queue_free(struct store_queue *q) {
    if (!q) return;
    for (struct store_req *r = q->done_head, *nx; r; r = nx) {
        nx = r->next;
        store_req_free(r);
    }
    pthread_cond_destroy(&q->cv);
    free(q);
}

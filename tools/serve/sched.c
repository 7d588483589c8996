/*
 * sched.c — the scheduler thread: admission and the loop. It alone owns
 * the kvb_batch and the session table (session.c); the store is the store
 * worker's (store_queue.c): the scheduler posts reads and writes and takes
 * their answers at the top of each loop, so no store I/O ever pauses a
 * step. Session queries are queries.c's, turn text and stop strings
 * text.c's.
 *
 * Loop: take the store worker's answers; answer session queries; admit
 * queued jobs in order while --parallel allows and the pool can hold each
 * one's minimum (returning idle sessions' pages first; they are already in
 * the store); a job whose session is not in memory is parked while the
 * worker reads it, then comes back to the head of the queue; fail jobs
 * that waited past --queue-timeout; run one kvb_batch_step; hand each job
 * its new text; finish turns: a session's turn is acknowledged only when
 * the worker has stored it at the version it was read at (else 409 or
 * 503, and the session is dropped from memory: the store's copy is its
 * state); a sessionless sequence is removed. A cancelled job's sequence is
 * removed at once.
 */
#include "sched_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A queued job leaves the queue without starting: a session it held (a
 * fetched one waiting for room) is let go. */
static void unbusy(struct server *srv, struct job *j) {
    struct sess *x = j->session_key[0] ? sess_find(srv->sched, j->session_key) : NULL;
    if (x && x->busy == j) sess_idle(srv, x);
}

enum { ADMIT_WAIT = 0, ADMIT_DONE = 1, ADMIT_PARKED = 2 };

/* A first turn's pinned span (docs/SERVING.md "Pinned instructions"):
 * n_keep -1 the instruction span (text.c), 0 none, N > 0 the prompt's
 * first N tokens; at most --keep-max are pinned (kv.keep, counted by
 * admission), the policy governing the rest, said once in the log. A
 * session keeps it for its whole life. */
static void keep_resolve(struct server *srv, struct job *j, struct sess *x, const int32_t *ids, int32_t n) {
    const int32_t span = j->n_keep < 0 ? instruction_span(srv, j, ids, n) : j->n_keep < n ? j->n_keep : n;
    const int32_t pinned = span < srv->o.keep_max ? span : srv->o.keep_max;
    if (pinned < span && j->keep_span != span) /* once: admission may try again */
        fprintf(stderr, "kvbound serve: %s%s: the pinned span (n_keep %d) is %d tokens; --keep-max %d pins the first %d, the policy governs the rest\n",
                x ? "session " : "request ", x ? x->id : j->id, (int)j->n_keep, (int)span, srv->o.keep_max, (int)pinned);
    j->keep_span = span;
    j->keep_pinned = pinned;
    j->sp.kv.keep = pinned;
    if (x) {
        x->n_keep = j->n_keep;
        x->keep_span = span;
        x->keep = pinned;
    }
}

/* j waits for the store worker's answer to r (fetch_done puts it back at the head of the queue). */
static int park(struct sched *s, struct store_req *r) {
    store_queue_post(s->q, r);
    s->n_parked++;
    return ADMIT_PARKED;
}

/* A completion's: its prompt's tokens, then the longest checkpoint in
 * memory whose tokens begin them, else the store's (by the group of its
 * first tokens); its one candidate is the one found. */
static int implicit_resolve_tokens(struct server *srv, struct job *j) {
    struct sched *s = srv->sched;
    if (!j->ptoks) j->ptoks = completion_tokens(srv, j, &j->n_ptoks);
    struct sess *best = NULL;
    for (int i = 0; j->ptoks && !j->fetched && i < s->n_sess; i++) {
        struct sess *y = s->sess[i];
        if (y->ntok < IMPLICIT_GROUP_TOKENS || y->ntok > j->n_ptoks || y->seq < 0 || y->busy || (best && y->ntok <= best->ntok)) continue;
        char k[SERVE_CKEY];
        implicit_token_key(j->chain, j->ptoks, y->ntok, k);
        if (!strcmp(k, y->id)) best = y;
    }
    if (best) {
        j->n_cand = 1;
        j->hit = 0;
        memcpy(j->cand_key[0], best->id, SERVE_CKEY);
        j->cand_ntok = best->ntok;
        j->fetched = false;
    } else if (!j->fetched) {
        struct store_req *r = j->ptoks && j->n_ptoks >= IMPLICIT_GROUP_TOKENS && !s->store_stopped ? store_req_new(SOP_CFIND, "", j, OWN_FETCH) : NULL;
        if (r && !(r->toks = malloc(sizeof *r->toks * (size_t)j->n_ptoks))) { store_req_free(r); r = NULL; }
        if (r) {
            memcpy(r->toks, j->ptoks, sizeof *r->toks * (size_t)j->n_ptoks);
            r->n_toks = j->n_ptoks;
            memcpy(r->seed, j->chain, SERVE_DIGEST);
            implicit_token_group(j->chain, j->ptoks, r->grp);
            r->lim.ttl_s = srv->o.checkpoint_ttl_s;
            return park(s, r);
        }
        j->fetched = true;
        j->fetch_rc = STORE_NOT_FOUND;
    }
    return -1;
}

/* An implicit session's turn (implicit.c): which checkpoint it resumes,
 * the latest of its candidates in memory (idle), else in the store (the
 * worker is asked, and j parked); none: a fresh conversation, under a key
 * of its own until its checkpoint's is known. ADMIT_PARKED, or -1: resolved
 * (j->session_key set; a checkpoint read from the store is on j). */
static int implicit_resolve(struct server *srv, struct job *j) {
    struct sched *s = srv->sched;
    int found = -1;
    if (j->kind == JOB_COMPLETION) {
        if (implicit_resolve_tokens(srv, j) == ADMIT_PARKED) return ADMIT_PARKED;
        if (!j->fetched) found = 0; /* in memory */
    }
    for (int c = 0; j->kind == JOB_CHAT && c < j->n_cand && found < 0; c++) {
        const struct sess *y = j->cand_st[c] == KVB_OK ? sess_find(s, j->cand_key[c]) : NULL;
        if (y && y->seq >= 0 && !y->busy) found = c;
    }
    if (found < 0 && !j->fetched && j->kind == JOB_CHAT) {
        int usable = 0;
        for (int c = 0; c < j->n_cand; c++) usable += j->cand_st[c] == KVB_OK;
        struct store_req *r = usable && !s->store_stopped ? store_req_new(SOP_CFIND, "", j, OWN_FETCH) : NULL;
        if (r && !(r->keys = malloc(sizeof *r->keys * (size_t)usable))) { store_req_free(r); r = NULL; }
        if (r) {
            for (int c = 0; c < j->n_cand; c++)
                if (j->cand_st[c] == KVB_OK) memcpy(r->keys[r->n_keys++], j->cand_key[c], SERVE_CKEY);
            r->lim.ttl_s = srv->o.checkpoint_ttl_s;
            return park(s, r);
        }
        j->fetched = true; /* nothing to ask (or no memory to ask): a fresh conversation */
        j->fetch_rc = STORE_NOT_FOUND;
    }
    if (found < 0 && j->fetch_rc == STORE_OK) { /* the worker's hit: the blob is on j (fetch_done) */
        const struct sess *y = sess_find(s, j->cand_key[j->hit]);
        if (!y || (!y->busy && y->seq >= 0)) found = j->hit; /* in memory meanwhile (and idle): that copy, the same state */
        if (y) { /* the read is not needed; one busy with another turn: that one goes on, this one starts afresh */
            free(j->blob);
            j->blob = NULL;
            if (found < 0) j->fetch_rc = STORE_NOT_FOUND;
            else j->fetched = false;
        }
    } else if (found >= 0) {
        j->fetched = false; /* in memory: nothing read */
    }
    if (found < 0 && j->fetch_rc == STORE_ERROR) { /* the store cannot be read: the turn still runs, from the start */
        fprintf(stderr, "kvbound serve: request %s: the checkpoints cannot be read (%s); reading its whole prompt\n", j->id, j->fetch_error);
        j->fetch_rc = STORE_NOT_FOUND;
    }
    j->hit = found;
    if (found >= 0) {
        snprintf(j->session_key, sizeof j->session_key, "%s", j->cand_key[found]);
        snprintf(j->resumed, sizeof j->resumed, "%.16s", j->cand_key[found] + 2);
        if (j->kind == JOB_CHAT) {
            free(j->r_cont);
            j->r_cont = j->cand_cont[found]; /* its new messages, as a session's later turn reads them */
            j->cand_cont[found] = NULL;
            j->r_cont_st = KVB_OK;
        }
        metrics_implicit(srv->metrics, 1, 0, 0, 0);
    } else {
        snprintf(j->session_key, sizeof j->session_key, "n:%s", j->id); /* its record's key until its checkpoint's is known */
        j->fetched = true;
        j->fetch_rc = STORE_NOT_FOUND;
        metrics_implicit(srv->metrics, 0, 1, 0, 0);
    }
    return -1;
}

/* Tries to start j. ADMIT_DONE: started, or failed for good (j is done);
 * ADMIT_WAIT: the pool is full, j keeps its place; ADMIT_PARKED: its
 * session is being read from the store, and j comes back to the head of
 * the queue with it (store_done). */
static int admit(struct server *srv, struct job *j) {
    struct sched *s = srv->sched;
    j->prefix_waiting = false; /* set again only if its prefix is still being read */
    struct sess *x = NULL;
    bool fresh = false;
    if (j->implicit && !j->session_key[0] && implicit_resolve(srv, j) == ADMIT_PARKED) return ADMIT_PARKED;
    if (j->session_key[0]) {
        x = sess_find(s, j->session_key);
        if (x && x->busy && x->busy != j) {
            job_fail(srv, j, 429, "session_busy", 1, "session '%s' is running a turn; retry when it ends", j->session_id);
            return ADMIT_DONE;
        }
        if (!x || x->seq < 0) {
            if (!x && !(x = sess_new(s, j->session_key))) { job_fail(srv, j, 500, "server_error", 0, "out of memory"); return ADMIT_DONE; }
            x->busy = j;
            if (!j->fetched) { /* ask the store, off this thread */
                struct store_req *r = s->store_stopped ? NULL : store_req_new(SOP_GET, x->id, j, OWN_FETCH);
                if (!r) {
                    sess_idle(srv, x);
                    job_fail(srv, j, 503, "server_busy", 1, "the session store cannot be asked now; retry");
                    return ADMIT_DONE;
                }
                return park(s, r);
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
                x->pol = j->sp.kv.policy;
            } else {
                size_t il = 0;
                const char *img = blob_meta(j->blob, j->blob_len, x, &il);
                if (img) session_place(srv);
                kvb_status st = img ? kvb_batch_seq_load(s->b, &j->sp, img, il, &x->seq) : KVB_ERR_CORRUPT;
                while (st == KVB_ERR_NOMEM && offload_one(srv)) st = kvb_batch_seq_load(s->b, &j->sp, img, il, &x->seq);
                if (st == KVB_ERR_NOMEM) { x->seq = -1; return ADMIT_WAIT; } /* the blob stays on j */
                if (st != KVB_OK && j->implicit) { /* a checkpoint that does not load (damaged, another build's): the turn reads its whole prompt */
                    fprintf(stderr, "kvbound serve: request %s: checkpoint %.18s does not load (%s); reading the whole prompt\n", j->id, x->id,
                            img ? kvb_last_error() : "the stored snapshot is damaged");
                    x->seq = -1;
                    sess_release(s, x);
                    free(j->blob);
                    j->blob = NULL;
                    j->hit = -1;
                    j->resumed[0] = 0;
                    snprintf(j->session_key, sizeof j->session_key, "n:%s", j->id);
                    j->fetch_rc = STORE_NOT_FOUND;
                    return admit(srv, j);
                }
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
                x->pol = cp.kv.policy;
                x->keep = cp.kv.keep; /* the image carries the span; the meta what named it */
            }
        }
        if (!fresh && j->implicit) j->implicit_tokens = (int32_t)(x->position < INT32_MAX ? x->position : INT32_MAX); /* not read again */
        if (!fresh && j->idem_key[0] && !j->implicit) { /* a retry of a turn the session holds: its answer again, no second turn */
            char *ans = history_answer(x->extra, j->idem_key);
            if (ans) {
                j->replay = ans; /* a stream asked for gets it as events (http.c) */
                sess_idle(srv, x);
                j->done = true;
                metrics_count(srv->metrics, 0, 0, 1, 0);
                return ADMIT_DONE;
            }
        }
        char mismatch[480];
        if (!j->implicit && !history_begin(j, x->extra, fresh, mismatch, sizeof mismatch)) { /* implicit: its key is its history */
            sess_idle(srv, x);
            job_fail(srv, j, 409, "session_history_mismatch", 0, "%s", mismatch);
            return ADMIT_DONE;
        }
        if (!fresh && j->policy_given &&
            (j->sp.kv.policy.id != x->pol.id || j->sp.kv.policy.budget != x->pol.budget || j->sp.kv.policy.n_sink != x->pol.n_sink)) {
            const struct kvb_policy_params kept = x->pol;
            sess_idle(srv, x);
            job_fail(srv, j, 400, "invalid_request_error", 0, "session '%s' keeps its cache under %s with budget %d and %d sinks; a turn cannot change them",
                     j->session_id, kvb_policy_name(kept.id), (int)kept.budget, (int)kept.n_sink);
            return ADMIT_DONE;
        }
        if (!fresh && j->n_keep_given && j->n_keep != x->n_keep) { /* the span is fixed at the first turn */
            const int32_t kept = x->n_keep, pinned = x->keep;
            sess_idle(srv, x);
            job_fail(srv, j, 400, "invalid_request_error", 0, "'n_keep' is %d, but session '%s' was opened with n_keep %d (%d tokens pinned); a turn cannot change it",
                     (int)j->n_keep, j->session_id, (int)kept, (int)pinned);
            return ADMIT_DONE;
        }
        if (!fresh) {
            j->sp.kv.policy = x->pol;
            j->sp.kv.keep = x->keep;
            j->keep_span = x->keep_span;
            j->keep_pinned = x->keep;
        }
    }
    if (x) x->busy = j; /* from here on offload_one must not pick it */
    int32_t pending = -1;
    if (x && x->seq >= 0) {
        struct kvb_seq_info si;
        kvb_batch_seq_info(s->b, x->seq, &si);
        pending = si.last_token;
    }
    int32_t n = 0;
    char why[320];
    int32_t *ids = turn_tokens(srv, j, x && !fresh ? x : NULL, pending, &n, why, sizeof why);
    if (!ids || n < 1) {
        free(ids);
        if (x) sess_idle(srv, x);
        job_fail(srv, j, 400, "invalid_request_error", 0, "%s", why);
        return ADMIT_DONE;
    }
    if (!x || fresh) keep_resolve(srv, j, x, ids, n);
    if (!j->n_warnings && !job_prompt_size(srv, j, n)) { /* too long: 400; past the budget: a warning (once, though admission may wait) */
        free(ids);
        if (x) sess_idle(srv, x);
        return ADMIT_DONE;
    }
    kvb_status st = kvb_batch_can_admit(s->b, &j->sp, n);
    while (st == KVB_ERR_NOMEM && offload_one(srv)) st = kvb_batch_can_admit(s->b, &j->sp, n);
    if (st == KVB_ERR_NOMEM) {
        free(ids);
        if (s->n_active == 0 && s->n_reading == 0) { /* an empty pool cannot hold it: waiting will not help */
            if (x) sess_idle(srv, x);
            job_fail(srv, j, 400, "invalid_request_error", 0, "the page pool (--pool-mb) cannot hold this request even when empty: %s", kvb_last_error());
            return ADMIT_DONE;
        }
        return ADMIT_WAIT; /* x stays busy with j (its answer from the store is on j) */
    }
    if (x && x->seq >= 0) st = kvb_batch_continue(s->b, x->seq, &j->sp, ids, n);
    else {
        int32_t id = -1;
        session_place(srv);
        if (j->prefix_n < 0) j->prefix_n = prefix_boundary(srv, j, ids, n); /* where its shared messages end (0: none) */
        j->sp.prompt_split = j->prefix_n > 0 ? j->prefix_n : 0;
        const int pr = prefix_admit(srv, j, ids, n, &id);
        if (pr == PREFIX_WAIT) { /* its prefix is being read; x stays busy with j */
            free(ids);
            return ADMIT_WAIT;
        }
        st = pr == PREFIX_FORKED ? KVB_OK : kvb_batch_add(s->b, &j->sp, ids, n, &id);
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
    j->prompt_tokens = n + j->implicit_tokens; /* the whole prompt: what a checkpoint held, and what was read */
    j->cached_tokens += j->implicit_tokens;
    if (j->implicit_tokens) metrics_implicit(srv->metrics, 0, 0, j->implicit_tokens, 0);
    j->started = true;
    if (!output_start(srv, j)) {
        /* cannot happen but for memory: the turn ends before it starts */
        if (x) sess_release(s, x);
        else kvb_batch_remove(s->b, j->seq);
        j->seq = -1;
        job_fail(srv, j, 500, "server_error", 0, "out of memory");
        return ADMIT_DONE;
    }
    s->active[s->n_active++] = j;
    return ADMIT_DONE;
}

/* A completion's checkpoint key: its prompt's tokens and those generated,
 * when its text is exactly theirs (it ended by max_tokens: no stop string
 * cut, no end-of-generation token the text leaves out); false: none. */
static bool completion_key(struct job *j, const struct kvb_seq_info *si) {
    if (!j->ptoks || j->n_ptoks + j->n_gen < IMPLICIT_GROUP_TOKENS || !si->stop || strcmp(si->stop, "length") || j->stop_word ||
        j->n_gen != si->n_generated)
        return false;
    int32_t *t = malloc(sizeof *t * (size_t)(j->n_ptoks + j->n_gen));
    if (!t) return false;
    memcpy(t, j->ptoks, sizeof *t * (size_t)j->n_ptoks);
    memcpy(t + j->n_ptoks, j->gen, sizeof *t * (size_t)j->n_gen);
    implicit_token_key(j->chain, t, j->n_ptoks + j->n_gen, j->ckpt_key);
    implicit_token_group(j->chain, t, j->ckpt_grp); /* its first tokens: a later prompt's, which begins with them */
    free(t);
    return true;
}

static void finish_turn(struct server *srv, struct job *j, const struct kvb_seq_info *si) {
    struct sched *s = srv->sched;
    char tail[16];
    const size_t tl = kvb_detok_flush(&j->dt, tail, sizeof tail);
    if (tl) sb_put_utf8(&j->text, tail, tl); /* a character cut short at the end: U+FFFD */
    j->held = 0;
    if (j->matcher) kvb_batch_set_matcher(s->b, j->seq, NULL);
    /* a forced call cut by max_tokens is a call (finish_reason length), never its markup as content */
    if (j->parser && j->prefill && j->tools_json && (j->tool_choice == TOOLS_REQUIRED || j->tool_choice == TOOLS_NAMED) && si->stop && (!strcmp(si->stop, "length") || !strcmp(si->stop, "context")))
        kvb_chat_parser_cut(j->parser, j->tool_choice == TOOLS_NAMED ? j->tool_name : NULL);
    output_finish(j);
    if (!j->finish) j->finish = si->stop && (!strcmp(si->stop, "length") || !strcmp(si->stop, "context")) ? "length" : "stop";
    struct sess *x = j->session_key[0] ? sess_find(s, j->session_key) : NULL;
    /* compress-on-park: the session is stored (and goes on) compressed; the figures below are the stored ones */
    if (x && srv->o.park_pid >= 0 && kvb_batch_seq_park(s->b, x->seq, (enum kvb_policy_id)srv->o.park_pid, srv->o.park_ratio) != KVB_OK)
        fprintf(stderr, "kvbound serve: session %s: --park-compress: %s (stored as it is)\n", x->id, kvb_last_error());
    seq_figures(srv, j->seq, &j->position, &j->cache_tokens, &j->kv_bytes, &j->cold_pages, NULL, NULL);
    if (x) {
        x->stop_text[0] = 0;
        if (si->last_token >= 0 && kvb_vocab_is_eog(srv->vocab, si->last_token) && (srv->jinja || srv->style != KVB_CHAT_PLAIN)) {
            const size_t n = kvb_vocab_token_bytes(srv->vocab, si->last_token, true, x->stop_text, sizeof x->stop_text - 1);
            x->stop_text[n < sizeof x->stop_text ? n : sizeof x->stop_text - 1] = 0;
        }
        x->last_used = serve_now();
        sess_figures(srv, x);
        /* the turn is acknowledged only once its session is stored: the
         * blob is made here (the batch is this thread's), written by the
         * store worker, and the job ends in store_done */
        struct kvb_str body = {0};
        if (j->native) native_response(srv, j, &body); /* what the client gets: the retry's with its key */
        else openai_response(srv, j, &body);           /* (and the history's answer) */
        char *meta = NULL;
        if (!j->implicit) meta = body.err ? NULL : history_next(j, x->extra, body.p ? body.p : "{}"); /* from j->turn_meta, history_begin's */
        else if (j->kind == JOB_COMPLETION ? completion_key(j, si) : !body.err && implicit_answer_key(j, body.p ? body.p : "{}", j->ckpt_key))
            meta = implicit_meta(j, x->extra, srv->o.checkpoints, j->ckpt_drop); /* the conversation with this answer */
        free(j->turn_meta);
        j->turn_meta = meta;
        kvb_str_free(&body);
        size_t bl = 0;
        if (j->implicit) x->ntok = j->kind == JOB_COMPLETION ? j->n_ptoks + j->n_gen : 0; /* the blob's meta says it */
        void *blob = !j->implicit || meta ? session_blob(srv, x, x->turns + 1, j->turn_meta, &bl) : NULL;
        if (blob && j->implicit && (int64_t)bl > srv->o.checkpoint_bytes) { /* larger than all checkpoints may be: not stored */
            free(blob);
            blob = NULL;
        }
        struct store_req *r = blob && !s->store_stopped ? store_req_new(j->implicit ? SOP_CPUT : SOP_PUT, j->implicit ? j->ckpt_key : x->id, j, OWN_SAVE) : NULL;
        if (!r && j->implicit) { /* not checkpointed: the answer stands, the next turn reads its whole prompt */
            free(blob);
            sess_release(s, x);
            j->seq = -1;
            j->done = true;
            metrics_count(srv->metrics, 0, 0, 1, 0);
            pthread_cond_broadcast(&j->cv);
            return;
        }
        if (r && j->implicit) {
            if (j->kind == JOB_COMPLETION) {
                memcpy(r->grp, j->ckpt_grp, SERVE_CKEY);
                r->ntok = j->n_ptoks + j->n_gen;
            }
            memcpy(r->drop, j->ckpt_drop, SERVE_CKEY);
            r->lim = (struct ckpt_limits){srv->o.checkpoint_max, srv->o.checkpoint_bytes, srv->o.checkpoint_ttl_s};
        }
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
            if (j->implicit && j->kind == JOB_COMPLETION && tok >= 0) { /* its checkpoint is its tokens (completion_key) */
                if (j->n_gen == j->cap_gen) {
                    const int32_t cap = j->cap_gen ? 2 * j->cap_gen : 64;
                    int32_t *g = realloc(j->gen, sizeof *g * (size_t)cap);
                    if (g) j->gen = g, j->cap_gen = cap;
                }
                if (j->n_gen < j->cap_gen) j->gen[j->n_gen++] = tok;
            }
            const bool end = si.state == KVB_SEQ_DONE && si.stop && !strcmp(si.stop, "eos") && kvb_vocab_is_eog(srv->vocab, tok);
            if (!end) {
                j->completion_tokens = si.n_generated;
                char piece[256];
                /* with a parser, control tokens are text: the call markers (<|channel|>, [TOOL_CALLS]) are control tokens */
                size_t pl = kvb_detok_push(srv->vocab, &j->dt, tok, j->parser != NULL, piece, sizeof piece);
                if (pl > sizeof piece) pl = 0;
                if (j->logprobs) add_logprobs(srv, j, tok, kvb_batch_logits(s->b, j->seq));
                stopped = add_text(j, piece, pl);
                if (j->parser) feed_parser(j, false);
                if (stopped) {
                    j->finish = "stop";
                    j->stop_word = true;
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
        struct sess *x = j->session_key[0] ? sess_find(s, j->session_key) : NULL;
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
    if (r->op == SOP_CFIND && r->rc == STORE_OK && r->grp[0]) { /* a completion's: the one found is its candidate */
        j->n_cand = 1;
        j->hit = 0;
        memcpy(j->cand_key[0], r->keys[r->hit], SERVE_CKEY);
        j->cand_ntok = r->ntok;
    } else if (r->op == SOP_CFIND && r->rc == STORE_OK) /* which candidate: r->keys holds the usable ones, in order */
        for (int c = 0; c < j->n_cand; c++)
            if (!strcmp(j->cand_key[c], r->keys[r->hit])) { j->hit = c; break; }
    snprintf(j->fetch_error, sizeof j->fetch_error, "%.150s", r->error);
    if (j->cancelled || srv->stopping) {
        struct sess *x = sess_find(s, j->session_key);
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

/* Checkpoints kept in memory (each conversation's latest, idle) obey the
 * store's limits too: unused past --checkpoint-ttl, then least recently
 * used past --checkpoint-max or --checkpoint-mb, they leave memory, so a
 * conversation the store forgot is not resumed from memory either. Run at
 * each checkpoint stored, and once a second by the loop, so an idle server
 * gives back the pages of those that expired. */
static void trim_checkpoints(struct server *srv) {
    struct sched *s = srv->sched;
    const double now = serve_now();
    for (;;) {
        struct sess *lru = NULL;
        int64_t count = 0, bytes = 0;
        for (int i = 0; i < s->n_sess; i++) {
            struct sess *y = s->sess[i];
            if (strncmp(y->id, "c:", 2) || y->busy) continue;
            if (now - y->last_used > (double)srv->o.checkpoint_ttl_s) { lru = y; count = INT64_MAX; break; }
            count++;
            bytes += (int64_t)y->stored_bytes;
            if (!lru || y->last_used < lru->last_used) lru = y;
        }
        if (!lru || (count <= srv->o.checkpoint_max && bytes <= srv->o.checkpoint_bytes)) return;
        sess_release(s, lru);
    }
}

/* A turn's session as stored: one turn more, its size, the header it was stored with. */
static void turn_stored(struct sess *x, struct job *j, const struct store_req *r) {
    x->turns++;
    x->stored_bytes = r->len;
    free(x->extra);
    x->extra = j->turn_meta;
    j->turn_meta = NULL;
    x->last_used = serve_now();
}

static void save_done(struct server *srv, struct job *j, struct store_req *r) {
    struct sched *s = srv->sched;
    struct sess *x = sess_find(s, j->session_key);
    j->saving = false;
    if (j->implicit && x && x->busy == j) { /* a checkpoint: the answer stands whether it was stored or not */
        if (r->rc == STORE_OK) {
            snprintf(j->stored, sizeof j->stored, "%.16s", j->ckpt_key + 2);
            metrics_implicit(srv->metrics, 0, 0, 0, 1);
        } else {
            fprintf(stderr, "kvbound serve: request %s: its checkpoint was not stored (%s); the conversation's next turn reads its whole prompt\n",
                    j->id, r->error[0] ? r->error : "the store failed");
        }
        struct sess *twin = sess_find(s, j->ckpt_key); /* the same conversation served twice (the same answer at temperature 0) */
        if (twin && twin != x && !twin->busy) sess_release(s, twin), twin = NULL;
        turn_stored(x, j, r);
        if (!twin) snprintf(x->id, sizeof x->id, "%s", j->ckpt_key); /* found by the conversation's next turn */
        if (twin || r->rc != STORE_OK) sess_release(s, x); /* kept in memory only as a stored checkpoint (the store is its copy) */
        else sess_idle(srv, x);
        trim_checkpoints(srv);
        j->seq = -1;
        j->done = true;
        metrics_count(srv->metrics, 0, 0, 1, 0);
        pthread_cond_broadcast(&j->cv);
    } else if (!x || x->busy != j) { /* cannot happen: a saving session is busy, and nothing drops a busy one */
        job_fail(srv, j, 500, "server_error", 0, "session '%s' was lost while it was stored", j->session_id);
    } else if (r->rc == STORE_OK) {
        x->version = r->version;
        turn_stored(x, j, r);
        sess_idle(srv, x);
        j->done = true;
        metrics_count(srv->metrics, 0, 0, 1, 0);
        pthread_cond_broadcast(&j->cv);
    } else {
        /* not stored: nothing of this turn is kept, the store's state is the
         * session's, and the same turn can be sent again (unless its
         * outcome is unknown: then the store may hold it) */
        const int64_t x_turns_after = x->turns + 1;
        sess_release(s, x);
        if (r->rc == STORE_UNKNOWN) {
            char before[40];
            if (x_turns_after > 1) snprintf(before, sizeof before, "turns %lld", (long long)(x_turns_after - 1));
            else snprintf(before, sizeof before, "404");
            job_fail(srv, j, 504, "store_outcome_unknown", 0,
                     "the store's reply to this turn's write was lost (%.120s): the turn may be stored or not. GET /v1/sessions/%s says: turns %lld "
                     "means it was stored, %s that it was not. Resend it with the same Idempotency-Key header, and a stored turn answers as it did",
                     r->error, j->session_id, (long long)x_turns_after, before);
            j->no_retry = true;
        }
        else if (r->rc == STORE_CONFLICT)
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
        store_req_free(r);
    }
}

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
    s->pages_shared = bs.page_bytes ? (int64_t)(bs.pool_bytes_shared / bs.page_bytes) : 0;
}

/* Shutting down: every queued job is told to come back (503). */
static void refuse_queue(struct server *srv) {
    while (srv->queue_head) {
        struct job *j = srv->queue_head;
        srv->queue_head = j->next;
        srv->n_queued--;
        unbusy(srv, j);
        job_fail(srv, j, 503, "server_busy", 5, "the server is shutting down; retry on another replica or later");
        if (j->abandoned) job_free(j);
    }
    srv->queue_tail = NULL;
}

static void *loop(void *arg) {
    struct server *srv = arg;
    struct sched *s = srv->sched;
    double stop_deadline = 0, last_trim = 0;
    pthread_mutex_lock(&srv->mu);
    for (;;) {
        store_done(srv);
        if (s->ctl_head) run_ctls(srv);
        cancel_jobs(srv);
        if (srv->stopping && !stop_deadline) stop_deadline = serve_now() + 5.0;
        /* stopping: running turns finish and their sessions are stored, for 5 s at most */
        if (srv->stopping && ((s->n_active == 0 && store_queue_pending(s->q) == 0) || serve_now() > stop_deadline)) break;
        /* admit in order; a turn waiting for its shared prefix to be read keeps its place without holding up those behind it */
        const double now = serve_now();
        for (struct job *prev = NULL, *j = srv->queue_head, *next; j && !srv->stopping; j = next) {
            next = j->next;
            bool leaves = false;
            if (j->cancelled) {
                unbusy(srv, j);
                j->done = j->failed = true;
                j->status = 499;
                leaves = true;
            } else {
                if (s->n_active + s->n_parked >= srv->o.parallel) break;
                const int r = admit(srv, j);
                if (r == ADMIT_WAIT && !j->prefix_waiting) break; /* the pool is full: first come, first served */
                leaves = r != ADMIT_WAIT; /* started, done, or parked (store_done puts it back) */
            }
            if (!leaves) {
                prev = j;
                continue;
            }
            if (prev) prev->next = next;
            else srv->queue_head = next;
            if (srv->queue_tail == j) srv->queue_tail = prev;
            srv->n_queued--;
            if (j->done && j->abandoned) job_free(j);
            else if (j->done) pthread_cond_broadcast(&j->cv);
        }
        /* deadlines of those still waiting */
        for (struct job **pp = &srv->queue_head, *j; (j = *pp);) {
            if ((now - j->t_submit > srv->o.queue_timeout_s && !j->prefix_waiting) || srv->stopping) { /* a prefix being read is progress */
                *pp = j->next;
                srv->n_queued--;
                if (srv->queue_tail == j) {
                    srv->queue_tail = NULL;
                    for (struct job *t = srv->queue_head; t; t = t->next) srv->queue_tail = t;
                }
                unbusy(srv, j);
                if (s->n_active + s->n_parked >= srv->o.parallel) /* the limit met is the slots', not the pool's */
                    job_fail(srv, j, 503, "server_busy", 5, "all %d slots (--parallel) stayed busy for %d s (--queue-timeout); retry later",
                             srv->o.parallel, srv->o.queue_timeout_s);
                else job_fail(srv, j, 503, "server_busy", 5, "no room in the page pool for %d s (--queue-timeout); retry later", srv->o.queue_timeout_s);
                if (j->abandoned) job_free(j);
                continue;
            }
            pp = &j->next;
        }
        if (now - last_trim >= 1.0) {
            trim_checkpoints(srv);
            last_trim = now;
        }
        gauges_update(srv);
        if (!s->n_active && !s->n_reading) {
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
            if (offload_one(srv) || prefix_step_failed(srv, failed)) continue;
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
        prefix_poll(srv);
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
    refuse_queue(srv);
    s->running = false;
    /* the store worker ends its request in hand; the rest come back refused */
    pthread_mutex_unlock(&srv->mu);
    store_queue_stop(s->q);
    pthread_mutex_lock(&srv->mu);
    s->store_stopped = true;
    store_done(srv);
    refuse_queue(srv); /* parked jobs that came back */
    while (s->ctl_head) run_ctls(srv);
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

int sched_start(struct server *srv) {
    struct sched *s = calloc(1, sizeof *s);
    if (!s) return -1;
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.kv_pool_bytes = srv->o.pool_bytes;
    bp.kv = srv->o.kv; /* its row types and page size: every session's */
    bp.n_threads = srv->o.threads;
    bp.max_seqs = srv->o.parallel + srv->o.max_sessions + srv->o.prefix_cache; /* session_place keeps sessions to theirs */
    bp.step_tokens = srv->o.step_tokens;
    bp.chunk = srv->o.chunk;
    bp.step_target_ms = srv->o.step_target_ms;
    bp.step_target_x = srv->o.step_target_x;
    bp.prompt_step_share = srv->o.prompt_step_share;
    bp.prompt_min_rows = srv->o.prompt_min_rows; /* 1..--chunk (serve_args) */
    if (bp.max_seqs > 4096) bp.max_seqs = 4096;
    if (kvb_batch_init(srv->model, &bp, &s->b) != KVB_OK) {
        fprintf(stderr, "kvbound serve: %s\n", kvb_last_error());
        free(s);
        return -1;
    }
    s->active = calloc((size_t)srv->o.parallel, sizeof *s->active);
    if (!s->active) { kvb_batch_free(s->b); free(s); return -1; }
    srv->sched = s;
    if (prefix_init(srv)) {
        kvb_batch_free(s->b);
        free(s->active);
        free(s);
        srv->sched = NULL;
        return -1;
    }
    s->q = store_queue_start(srv);
    s->running = s->q != NULL;
    if (!s->q || pthread_create(&s->th, NULL, loop, srv)) {
        if (s->q) store_queue_stop(s->q);
        store_queue_free(s->q);
        prefix_free(srv);
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
    prefix_free(srv);
    kvb_batch_free(s->b);
    for (int i = 0; i < s->n_sess; i++) {
        free(s->sess[i]->extra);
        free(s->sess[i]);
    }
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

bool sched_store_healthy(struct server *srv, char *err, size_t cap) {
    pthread_mutex_lock(&srv->mu);
    struct sched *s = srv->sched;
    const bool ok = !s || !s->q || s->store_stopped || store_queue_healthy(s->q, err, cap);
    pthread_mutex_unlock(&srv->mu);
    return ok;
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
        g->pages_shared = s->pages_shared;
        g->prefixes = s->n_prefixes;
        g->prefix_hits = s->prefix_hits;
        g->prefix_tokens_reused = s->prefix_tokens_reused;
        g->checkpoints = g->checkpoint_bytes = -1;
        if (s->q) store_queue_checkpoints(s->q, &g->checkpoints, &g->checkpoint_bytes);
    }
    g->queued = srv->n_queued;
    pthread_mutex_unlock(&srv->mu);
}

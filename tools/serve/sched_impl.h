/*
 * sched_impl.h — what the scheduler's files share, and nothing outside
 * them sees: the session record, a session query, the scheduler's state,
 * and the functions of its rooms. Who calls whom, with no circle:
 *   sched.c   (admission, the loop, the store's answers)
 *     -> queries.c (GET/DELETE /v1/sessions/{id}, .../map)
 *     -> text.c    (turn text and stop strings)
 *     -> history.c (a session's conversation and keyed answers)
 *     -> session.c (the table, the stored blob, offloading)
 *     -> job.c, store_queue.c, metrics.c, sbuf.c
 * All of it runs on the scheduler thread under the server mutex, except
 * ctl_run (a connection thread, which waits for the scheduler's answer).
 */
#ifndef KVB_SCHED_IMPL_H
#define KVB_SCHED_IMPL_H

#include "serve.h"

struct sess {
    char id[SERVE_SKEY_MAX + 1]; /* its key (tenant_session_key); tenant_public_id gives the id the client sent */
    int32_t seq;          /* in the batch, or -1 (in the store only) */
    struct job *busy;     /* the job running a turn on it */
    int64_t turns;
    char stop_text[64];   /* text of the stop token the last answer ended with, "" if cut */
    double last_used;
    int64_t position, cache_tokens, cold_pages;
    int64_t window_tokens, global_tokens; /* a model with sliding-window layers: per stream of each kind */
    size_t kv_bytes, stored_bytes;
    struct kvb_policy_params pol;
    int64_t version;      /* in the store; STORE_ABSENT: never stored */
    char *extra;          /* its history and keyed answers as stored (history.c), or NULL: unknown */
    int32_t n_keep, keep_span, keep; /* its first turn's n_keep, the span it named, the tokens pinned (kv.keep) */
    int32_t ntok;         /* a completion's checkpoint (implicit.c): the tokens of its sequence; 0 otherwise */
};

struct ctl {
    enum { CTL_JSON, CTL_MAP, CTL_DELETE } kind;
    const char *id;
    struct kvb_str *out;
    int status;
    bool done;
    bool was_in_memory; /* DELETE: the session was in memory (so found) */
    char error[200];    /* a store failure's cause */
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
    struct prefix *prefixes; /* shared prefixes (prefix.c), at most --prefix-cache */
    int n_prefixes, n_reading;
    int64_t prefix_hits, prefix_tokens_reused, pages_shared;
    /* figures */
    int64_t prefill_tokens, decode_tokens, offloaded;
    double prefill_time, decode_time;
    int64_t pages_used, pages_free, page_bytes, in_memory, persisted;
};

/* session.c: the session table and the stored blob */
struct sess *sess_find(struct sched *s, const char *id);
struct sess *sess_new(struct sched *s, const char *id);
void sess_drop(struct sched *s, struct sess *x);
void sess_release(struct sched *s, struct sess *x);
void sess_idle(struct server *srv, struct sess *x);
/* Returns the pages (and the batch's place) of the least recently used idle
 * session in memory (it is in the store already); false: none. */
bool offload_session(struct server *srv);
/* Before a turn's or a session's sequence joins the batch: idle sessions go
 * until sessions and turns hold fewer than --parallel + --max-sessions
 * places (shared prefixes have --prefix-cache places of their own). */
void session_place(struct server *srv);
bool seq_figures(struct server *srv, int32_t seq, int64_t *position, int64_t *cache_tokens, size_t *kv_bytes, int64_t *cold_pages,
                 int64_t *window_tokens, int64_t *global_tokens);
void sess_figures(struct server *srv, struct sess *x);
void *session_blob(struct server *srv, const struct sess *x, int64_t turns, const char *extra, size_t *len);
const char *blob_meta(const char *blob, size_t len, struct sess *x, size_t *img_len);

/* text.c: what a turn reads, and stop strings in what it writes */
int32_t *turn_tokens(struct server *srv, struct job *j, const struct sess *x, int32_t pending, int32_t *n, char *err, size_t cap);
/* A completion's whole prompt as its first turn reads it (NULL: out of memory or no tokens). */
int32_t *completion_tokens(struct server *srv, const struct job *j, int32_t *n);
bool add_text(struct job *j, const char *piece, size_t pl);
/* output.c: what a turn writes beyond text: the grammar's matcher and the
 * parser set up when it starts (false: out of memory), the parser fed what
 * text is certain (final: all of it), a token's logprobs, the message. */
bool output_start(struct server *srv, struct job *j);
void feed_parser(struct job *j, bool final);
void add_logprobs(const struct server *srv, struct job *j, int32_t token, const float *logits);
void output_finish(struct job *j);

/* queries.c: session queries, answered from memory or through the store */
void run_ctls(struct server *srv);
void ctl_from_store(struct server *srv, struct ctl *c, struct store_req *r);
void ctl_finish(struct ctl *c);

/* prefix.c: shared prefixes. prefix_admit starts a turn that has one:
 * PREFIX_FORKED (*seq is its sequence, reading the rest of its prompt),
 * PREFIX_WAIT (its prefix is being read: try again after a step), or
 * PREFIX_NONE (no prefix, or no sharing: read the whole prompt). */
enum { PREFIX_NONE = 0, PREFIX_FORKED = 1, PREFIX_WAIT = 2 };
int prefix_init(struct server *srv);
void prefix_free(struct server *srv);
int prefix_admit(struct server *srv, struct job *j, const int32_t *ids, int32_t n, int32_t *seq);
/* After a step: prefixes whose sequences finished reading become ready. */
void prefix_poll(struct server *srv);
/* The step failed for want of pages at sequence seq: a prefix being read is dropped (true). */
bool prefix_step_failed(struct server *srv, int32_t seq);
/* Lets the least recently used ready prefix go (its forks keep what they share); false: none. */
bool prefix_drop_lru(struct server *srv);
/* Room in the pool: offload_session, else prefix_drop_lru. */
bool offload_one(struct server *srv);
/* text.c: how many of ids[0..n) the job's shared messages cover (0: none). */
int32_t prefix_boundary(struct server *srv, const struct job *j, const int32_t *ids, int32_t n);
/* The instruction span of a chat's first-turn prompt ids[0..n): the tokens
 * that the rendering of its leading system and developer messages and its
 * tools alone (no generation prompt; tokenized as the prompt is) has in
 * common with the prompt's start; 0 for none or a completion. */
int32_t instruction_span(struct server *srv, const struct job *j, const int32_t *ids, int32_t n);

/* job.c: a turn's prompt of n tokens checked against --max-prompt-tokens
 * (false: the job failed with 400 naming the limit) and, past its budget
 * or the trained length, given a warning (kvbound.warnings, the log). */
bool job_prompt_size(struct server *srv, struct job *j, int32_t n);
/* history.c: what a session holds of its conversation (sess.extra): a
 * bounded digest of its messages, its first turn's tools, keyed answers.
 * history_begin: at a session turn's admission (fresh: a new session),
 * false with why filled when the history j sends is not the session's
 * (409); else j->turn_meta is the header the turn will store less its
 * answer (NULL: none, unknown). history_answer: the stored answer of the
 * turn sent with key (malloc), or NULL. history_next: extra after j's
 * turn, whose whole response body is response (malloc; NULL: out of
 * memory). history_from_meta: the history, tools and answers of a stored
 * blob's meta (any format kvbound stored; items may be moved out of meta)
 * as extra (malloc), or NULL: unknown. */
bool history_begin(struct job *j, const char *extra, bool fresh, char *why, size_t cap);
char *history_answer(const char *extra, const char *key);
char *history_next(const struct job *j, const char *extra, const char *response);
char *history_from_meta(struct cJSON *meta);
/* The canonical bytes the digests hash (key order and spacing do not
 * matter): of a message reduced as the history holds it (role, content less
 * the white space at its ends, tool calls' names and parsed arguments),
 * and of any JSON value; false: out of memory. implicit.c chains them. */
bool history_canon_message(const struct cJSON *m, struct kvb_str *out);
bool history_canon_json(const struct cJSON *v, struct kvb_str *out);

/* job.c: a job ends in failure, with its status and error */
void job_fail(struct server *srv, struct job *j, int status, const char *type, int retry_after, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

#endif

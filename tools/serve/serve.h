/*
 * serve.h — `kvbound serve`: an OpenAI-compatible HTTP server over the
 * batch API, for many long sessions on one page pool.
 *
 * Design (who owns what, and what happens when things go wrong):
 *
 *  - Layering, as llama.cpp's tools/server (slots fed from a task queue by
 *    one loop that alone touches the model) and Redis's networking.c
 *    (reading and parsing a request apart from executing it): I/O in
 *    http.c, parsing and checking in routes.c / openai.c, execution in
 *    sched.c and its rooms (sched_impl.h: session.c, text.c, queries.c);
 *    nothing below http.c knows a socket. Calls go one way: no two files
 *    call each other, and sbuf.c at the bottom calls none.
 *
 *  - Threads. libmicrohttpd runs one thread per connection (http.c). A
 *    connection thread reads its request, hands it to serve_route (routes.c,
 *    no HTTP library in it, so the fuzz target drives it directly), and for a
 *    generation waits on its job for text. One scheduler thread (sched.c)
 *    owns the kvb_batch and the session table: nothing else touches them.
 *    One store worker (store_queue.c) alone calls the session store, on
 *    requests the scheduler posts, so no store I/O runs on the step loop.
 *    A watchdog (guard.c) closes connections that do not send a whole
 *    request in time. The main thread parses flags and waits for a signal.
 *
 *  - Queues. A generation is a struct job. serve_route parses and checks it
 *    (openai.c: grammars are compiled there), renders a chat's template
 *    (text_render: a slow template holds its own connection's thread, never
 *    the steps) and submits it to the scheduler's bounded queue; a full
 *    queue is 503 with Retry-After. The scheduler admits queued jobs in
 *    order when the pool can hold the sequence's minimum
 *    (kvb_batch_can_admit), after returning the pages of idle sessions
 *    (already persisted) if it must; a job that waits past its deadline gets
 *    503. Every step of the batch advances every admitted job.
 *
 *  - Ownership. The scheduler owns the sequence; the connection thread owns
 *    the job's memory until it sets job->abandoned, after which the
 *    scheduler frees it. Text crosses between them under the server mutex,
 *    signalled by the job's condition variable.
 *
 *  - Disconnect. The connection thread notices a closed socket (or a failed
 *    write) and marks the job cancelled; the scheduler removes the sequence
 *    at the next step, so its pages go back to the pool. A session's turn
 *    that is cancelled is lost: the session is as of its last completed
 *    turn, which is in the store.
 *
 *  - Full pool. Admission waits (bounded queue, deadline); idle sessions are
 *    evicted from memory (they live on in the store). If a step still cannot
 *    get its pages, the newest job is ended with an error and its session
 *    falls back to its stored snapshot.
 *
 *  - Tenants (tenant.c). Each API key is a tenant; what one request
 *    reuses of another's (a shared prefix, a session id) is looked up
 *    only within its tenant (and, for prefixes, its cache_salt), so no
 *    field, counter or timing of reuse crosses tenants.
 *
 *  - Crash. A turn is acknowledged only once its session is written to the
 *    store, in one atomic write (an SQLite statement, a Redis script),
 *    conditional on the version the turn started from; so kill -9 loses at
 *    most the turns not yet acknowledged, and two replicas never overwrite
 *    each other (the later write is refused: 409). A write that fails
 *    keeps nothing of its turn (503): the store holds the session. A write
 *    whose reply was lost may have been made (504 store_outcome_unknown);
 *    a turn resent with its Idempotency-Key gets the stored answer if the
 *    store holds it (history.c), so no turn is stored twice. On
 *    SIGINT/SIGTERM the server stops accepting work, lets running turns
 *    finish and be stored (5 s at most), then exits; the scheduler is freed
 *    only after the HTTP daemon has stopped.
 */
#ifndef KVB_SERVE_H
#define KVB_SERVE_H

#include "kvbound.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SERVE_MAX_STOPS 4
#define SERVE_ID_MAX 64
/* a session's key in the table and the store: its id, after its tenant's tag but for the first tenant (tenant.c) */
#define SERVE_SKEY_MAX (SERVE_ID_MAX + 34)
#define SERVE_IDEM_MAX 128 /* the longest Idempotency-Key */
#define SERVE_CANDS 16     /* the most checkpoints a stateless request tries (the latest --checkpoints turns) */
#define SERVE_CKEY 67      /* a checkpoint's key: "c:" and 64 hex digits, NUL */
/* the stand-in assistant answer whose rendering shows what a template writes after one */
#define SERVE_TEMPLATE_MARK "KVBOUNDANSWERMARK7F3A"

/* ---- sbuf.c: the bottom (it calls nothing of serve). Bodies are built
 * with the library's struct kvb_str (kvbound.h): a writer checks its
 * kvb_str_error once at the end. ---- */
/* Whether s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
bool utf8_valid(const char *s, size_t n);
/* Appends s to b as valid UTF-8: each maximal ill-formed subpart (a stray
 * byte, a sequence cut short) becomes U+FFFD, as Unicode recommends and as
 * Python's errors="replace" decodes. Generated text passes through it: a
 * model can emit bytes that are no character, and JSON must be UTF-8. */
void sb_put_utf8(struct kvb_str *b, const char *s, size_t n);

/* ---- tenant.c: also at the bottom. Tenants and what they may reuse
 * (docs/SERVING.md "Tenants"). A key is kept only here; everything else
 * holds its digest. ---- */
#define SERVE_DIGEST 32
#define SERVE_SALT_MAX 256 /* the longest cache_salt, in bytes */
struct serve_keys {
    char **key;                         /* the API keys, in the file's order (key[0]: the operator's) */
    unsigned char (*digest)[SERVE_DIGEST]; /* each key's tenant digest */
    int n;                              /* 0: no key, one tenant for everyone (its digest all zero) */
};
void serve_sha256(const void *data, size_t n, unsigned char out[SERVE_DIGEST]);
/* The same, fed piece by piece (implicit.c chains a conversation's messages). */
struct serve_sha {
    uint32_t h[8];
    uint64_t len;          /* bytes fed */
    unsigned char buf[64];
    size_t n;              /* bytes in buf */
};
void serve_sha_init(struct serve_sha *c);
void serve_sha_put(struct serve_sha *c, const void *data, size_t n);
void serve_sha_end(struct serve_sha *c, unsigned char out[SERVE_DIGEST]);
/* --api-key-file's text (len bytes, changed in place): one key a line,
 * blank lines and lines starting with # skipped, spaces around a key
 * trimmed. false with why in err (a line number, never a key): a NUL, a
 * key with a space or control byte inside, a key twice, no key. */
bool tenant_parse_keys(char *text, size_t len, struct serve_keys *k, char *err, size_t cap);
bool tenant_one_key(struct serve_keys *k, const char *key); /* --api-key: false out of memory */
void tenant_keys_free(struct serve_keys *k); /* every key and digest; k emptied */
/* The index of the key g is (every key compared in full), or -1. */
int tenant_match(const struct serve_keys *k, const char *g);
/* What a request may reuse of others' (a shared prefix): the digest of
 * its tenant's and its cache_salt (NULL: none given). */
void tenant_scope(const unsigned char tenant[SERVE_DIGEST], const char *salt, unsigned char out[SERVE_DIGEST]);
/* A session's key (out: SERVE_SKEY_MAX + 1 bytes): the first tenant's (the
 * first key, or everyone without a key) is its id, as before tenants; any
 * other tenant's is "t", 32 hex digits of its digest, ":" and the id, so
 * each tenant has its own ids (":" is in no id). */
void tenant_session_key(const struct serve_keys *k, int tenant, const char *id, char *out);
/* The id in a session's key. */
const char *tenant_public_id(const char *key);

/* ---- a request and its response, free of any HTTP library ---- */
struct http_req {
    const char *method, *path;  /* path without the query string */
    const char *authorization;  /* header or NULL */
    const char *body;
    size_t body_len;
    bool body_too_large;        /* the body passed --max-body: answered 413 */
    const char *host;           /* Host header or NULL */
    const char *origin;         /* Origin header or NULL */
    const char *x_api_key;      /* X-Api-Key header (llama-server's other spelling of the key) or NULL */
    const char *idempotency_key; /* Idempotency-Key header or NULL */
};
struct job;
struct http_resp {
    int status;
    const char *content_type;
    struct kvb_str body;
    int retry_after;            /* seconds; 0: no header */
    const char *allow;          /* Allow header (405, OPTIONS) or NULL */
    const char *cors_origin;    /* Access-Control-Allow-Origin (a --cors origin) or NULL */
    bool preflight;             /* the CORS preflight's Allow-Methods/-Headers too */
    bool close;                 /* Connection: close */
    bool no_retry;              /* x-should-retry: false (the OpenAI clients then do not resend on their own) */
    struct job *job;            /* a generation: the body comes from it */
};
void http_resp_free(struct http_resp *r);

/* ---- a generation ---- */
enum job_kind { JOB_CHAT, JOB_COMPLETION };
struct job {
    /* request (set before submit, read-only after) */
    enum job_kind kind;
    bool stream, include_usage;
    bool native;                       /* llama-server's POST /completion: its request and answer shape (native.c) */
    char *answer_prefix;               /* chat: a final assistant message, which the answer continues (a prefill), or NULL */
    char session_id[SERVE_ID_MAX + 1]; /* "" = none */
    char session_key[SERVE_SKEY_MAX + 1]; /* its key in the table and the store (tenant_session_key) */
    bool salt_given;                   /* cache_salt was in the request */
    char cache_salt[SERVE_SALT_MAX + 1];
    unsigned char tenant[SERVE_DIGEST]; /* its API key's digest (tenant.c; all zero without keys) */
    unsigned char scope[SERVE_DIGEST];  /* tenant_scope of it and cache_salt: what it may share (prefix.c) */
    char *system, *user;               /* chat: system (may be NULL) and the newest user message */
    struct kvb_chat_message *msgs;     /* chat without a session: the whole conversation */
    int32_t n_msgs;
    char *prompt;                      /* completion */
    /* chat through the model's Jinja template: the request's messages as JSON arrays (content as text,
     * tool_calls' arguments as objects): all of them; those up to the last assistant message (NULL: none);
     * those with the messages after it (a session's later turn reads what comes after the previous ones);
     * a stand-in exchange and the same with the new messages (a session turn that sends no history) */
    char *all_json, *prev_json, *cont_json, *standin_prev_json, *standin_json;
    char *shared_json;                 /* the messages before the last user message (a system prompt, few-shot
                                        * examples: the prefix sessions may share, prefix.c), or NULL */
    /* their renderings through the template, made on the connection thread before the job is queued
     * (text_render), so that a slow template holds its own request and never the scheduler's steps: the
     * whole conversation (a first turn), the new messages after the last answer (a later turn; what follows
     * the stop token is put before it at admission), the shared messages (NULL: none, or no rendering); a
     * failed one keeps its status and why, answered if the turn needs it */
    bool rendered;
    char *r_all, *r_cont, *r_shared;
    kvb_status r_all_st, r_cont_st;
    char r_all_err[320], r_cont_err[320];
    char *tools_json;                  /* NULL, or the request's tools (rendered under tool_choice none too, as OpenAI's and llama-server's) */
    char *vars_json;                   /* chat_template_kwargs (and reasoning_effort) as a JSON object, or NULL */
    enum { TOOLS_AUTO, TOOLS_REQUIRED, TOOLS_NAMED, TOOLS_NONE } tool_choice; /* none: the tools are in the prompt, no text is a call */
    char tool_name[128];               /* TOOLS_NAMED */
    bool parallel_tool_calls;          /* false: at most one call is returned */
    char *gbnf;                        /* a grammar the output must match (grammar, response_format, a forced tool call), or NULL */
    struct kvb_grammar *grammar;       /* gbnf compiled */
    struct kvb_matcher *matcher;       /* the scheduler's, while the turn runs */
    char *prefill;                     /* text the answer starts with, read with the prompt (a forced call's marker) */
    struct kvb_chat_syntax syntax;     /* the server's, with think_open from this turn's prompt */
    bool json_output;                  /* response_format json_object / json_schema: the grammar is the output */
    bool logprobs;                     /* chat: logprobs; completion: logprobs given */
    int top_logprobs;
    struct kvb_logit_bias *bias;       /* logit_bias, sp.sampler points at it */
    struct kvb_seq_params sp;
    bool policy_given;                 /* kv_policy/kv_budget/kv_sinks were in the request */
    int32_t n_keep;                    /* n_keep (else --keep): -1 the instruction span, 0 none, N > 0 the first N tokens */
    bool n_keep_given;                 /* n_keep was in the request */
    char *r_instr;                     /* --jinja: the leading system/developer messages and the tools rendered alone, or NULL */
    int32_t keep_span, keep_pinned;    /* admission: the span n_keep names (tokens) and what is pinned of it (<= --keep-max) */
    char *stops[SERVE_MAX_STOPS];
    int n_stops;
    char idem_key[SERVE_IDEM_MAX + 1]; /* the Idempotency-Key header, "" = none */
    char *replay;                      /* a retry of a stored turn: its stored answer (the whole body), or NULL */
    char *turn_meta;                   /* a session turn being stored: its history and answers for the blob (session.c) */
    /* implicit sessions (implicit.c; docs/SERVING.md "Implicit sessions"): a chat without session_id
     * resumes the latest checkpoint whose conversation begins its messages, and its end is checkpointed */
    bool implicit;                     /* looked up and checkpointed (--checkpoints > 0, --jinja, no session_id, no prefill) */
    int n_cand;                        /* the checkpoints to try, latest first: each a key, the messages it covers, */
    char cand_key[SERVE_CANDS][SERVE_CKEY];  /* and its new messages rendered (text_render; r_cont's kind) */
    int32_t cand_msgs[SERVE_CANDS];
    char *cand_cont[SERVE_CANDS];
    kvb_status cand_st[SERVE_CANDS];
    unsigned char chain[SERVE_DIGEST]; /* the digest chain over all its messages (the answer is chained on at the end) */
    int hit;                           /* the candidate resumed, -1: none (a fresh conversation) */
    char resumed[17], stored[17];      /* kvbound.implicit: the checkpoint used and the one stored (16 hex digits), "" none */
    int32_t implicit_tokens;           /* tokens the resumed checkpoint held (cached_tokens) */
    char ckpt_key[SERVE_CKEY];         /* the checkpoint of this turn's end (its conversation with the answer) */
    char ckpt_drop[SERVE_CKEY];        /* the conversation's checkpoint past --checkpoints, deleted once it is stored ("" none) */
    int32_t *ptoks, n_ptoks;           /* a completion: its prompt's tokens (the checkpoints are token sequences) */
    int32_t cand_ntok;                 /* a completion: the tokens of the checkpoint resumed */
    char ckpt_grp[SERVE_CKEY];         /* a completion: its checkpoint's group (implicit_token_group) */
    int32_t *gen, n_gen, cap_gen;      /* a completion: the tokens generated (its checkpoint is ptoks and them) */
    char id[40];
    int64_t created;
    double t_submit;
    /* progress (under the server mutex) */
    pthread_cond_t cv;
    struct kvb_str text;        /* text generated so far, stop strings cut out */
    size_t sent;             /* bytes of text the connection has written */
    bool started, done, failed, cancelled, abandoned, role_sent, final_sent, done_sent;
    bool stop_word;          /* a stop string ended it (native.c's stop_type "word") */
    char warnings[2][256];   /* said with the answer (kvbound.warnings) and in the log: a prompt past the budget or trained length */
    int n_warnings;
    int status;              /* on failure before any text: the HTTP status */
    int retry_after;
    bool no_retry;           /* its failure must not be resent blindly (the outcome is unknown) */
    char error[256];
    char error_type[40];
    const char *finish;      /* "stop", "length" */
    int32_t prompt_tokens, completion_tokens;
    int64_t position, cache_tokens; /* the session after the turn */
    size_t kv_bytes;
    int64_t cold_pages;      /* --recall: the session's cold pages after the turn */
    double t_first, t_last;
    /* scheduler's own */
    bool fetched, saving;    /* its session was read from the store / is being written */
    int fetch_rc;            /* the read's STORE_* */
    void *blob;              /* what was read, until loaded */
    size_t blob_len;
    int64_t blob_version;
    char fetch_error[160];
    int32_t seq;
    int32_t prefix_n;        /* tokens of its prompt a shared prefix covers: -1 not yet known, 0 none */
    bool prefix_waiting;     /* its last admission found its prefix being read (it keeps its place, not the queue's head) */
    bool prefix_asked;       /* it has waited for a prefix: one gone since is not read again for it */
    bool prefix_tried;       /* sharing tried and given up (or no prefix): it reads its whole prompt */
    bool prefix_started;     /* it started the reading of its prefix (its cached_tokens stay 0) */
    int32_t cached_tokens;   /* prompt tokens it did not read: a shared prefix's (usage.prompt_tokens_details) */
    struct kvb_detok dt;
    struct kvb_chat_parser *parser; /* chat with tools or reasoning: the text as content, reasoning and calls */
    size_t parsed;           /* bytes of text fed to it */
    struct kvb_str deltas;      /* its deltas, one JSON object a line (under the server mutex) */
    size_t deltas_sent;      /* bytes of them the connection has written */
    char *message;           /* done: the whole message as JSON (the parser's), or NULL (plain text) */
    struct kvb_str lp;          /* logprobs: one {"token","logprob","bytes","top_logprobs"} a line, a line per token */
    size_t lp_sent;
    size_t held;             /* bytes of text held back (a stop string may be starting) */
    struct job *next;
};
void job_free(struct job *j); /* job.c */

/* ---- server ---- */
struct store;
struct metrics;
struct serve_opts {
    const char *model_path, *host, *sessions, *api_key, *model_name; /* api_key: the first of keys, or NULL */
    struct serve_keys keys; /* --api-key, KVB_API_KEY or --api-key-file: one tenant each */
    int port, parallel, threads, queue_max, queue_timeout_s, max_tokens_cap, default_max_tokens;
    int max_budget, max_sessions, step_tokens, chunk;
    int prefix_cache, prefix_min; /* shared prefixes kept (0: no sharing); the fewest tokens one may have */
    int checkpoints;      /* --checkpoints: a conversation's checkpoints kept (its last N turns); 0: no implicit sessions */
    int64_t checkpoint_max, checkpoint_bytes, checkpoint_ttl_s; /* --checkpoint-max, --checkpoint-mb (as bytes), --checkpoint-ttl */
    int keep, keep_max; /* --keep: a request's n_keep when it gives none (-1: the instruction span); --keep-max: the most pinned */
    float step_target_ms, step_target_x; /* --step-target-ms: N ms, or Kx the decode-only step; both 0: off */
    float prompt_step_share;             /* --prompt-step-share: kvb_batch_params.prompt_step_share */
    int32_t prompt_min_rows;             /* --prompt-min-rows: kvb_batch_params.prompt_min_rows (1..--chunk; not given: 4, or --chunk if smaller) */
    float default_temp;  /* --temp: a request's temperature when it gives none (<0: the library's default) */
    bool seed_given;     /* --seed: a request's seed when it gives none (else a fresh one each request) */
    uint64_t default_seed;
    int n_ctx;    /* -c: a session's token limit under full; 0: the model's trained length */
    int park_pid;        /* --park-compress: the policy that compresses a session as it is stored (kvzip); -1 none */
    double park_ratio;   /* --park-ratio: the fraction of its tokens removed then, in (0, 1) */
    int max_prompt_tokens; /* --max-prompt-tokens: a turn's prompt beyond it is 400 (0: the default, set at start) */
    int template_deadline_ms; /* --template-deadline-ms: a chat template's render past it fails, naming it (0: 2000) */
    int max_compiles, compile_wait_ms; /* --max-compiles, --compile-wait-ms: requests compiling grammars at once, and how long one past it waits before a 503 */
    size_t pool_bytes, max_body;
    struct kvb_kv_params kv; /* every session's KV configuration: --policy and its knobs, --positions,
                              * --kv-dtype, --recall (a request may change the policy; recall is for
                              * bounded sessions only) */
    bool no_mmap; /* --no-mmap: weights read into memory */
    const char *cors[8]; /* --cors ORIGIN: origins allowed to write across sites ("*": any) */
    int n_cors;
    bool check_host; /* no --api-key on a loopback address: Host must name this server (DNS rebinding) */
    bool dry_run; /* the fuzz target: requests are checked, never generated */
    bool verbose; /* -v: one line per request on stderr (http.c) */
    bool special_in_content; /* --special-in-content: control-token text in a message is the token (the old reading) */
};

struct server {
    struct serve_opts o;
    struct kvb_model *model;
    const struct kvb_vocab *vocab;
    struct kvb_model_info mi;
    enum kvb_chat_style style;
    bool jinja;                  /* chat through the Jinja template (template_text); else the signature family `style` */
    char *template_text;         /* --chat-template-file, or the model's tokenizer.chat_template */
    bool tmpl_developer;         /* the template knows the developer role */
    bool tmpl_tools;             /* the template renders tools */
    struct kvb_chat_syntax syntax; /* how its model writes tool calls and reasoning */
    struct kvb_grammar_vocab *gvocab; /* the vocabulary for grammars */
    char *closing;               /* what the template writes after an assistant answer (ChatML: "<|im_end|>\n") */
    char default_system[1024];
    pthread_mutex_t mu;
    pthread_cond_t work;     /* the scheduler waits on it */
    struct job *queue_head, *queue_tail;
    int n_queued;
    bool stopping;
    int64_t next_id;
    struct sched *sched;
    struct store *store;
    struct metrics *metrics;
    struct guard *guard;
};

/* implicit.c: implicit sessions (docs/SERVING.md). implicit_prepare: for
 * a job with implicit set (a chat without session_id, after its scope is
 * known), the checkpoints to try (cand_key, cand_msgs) and the digest
 * chain over its messages; false for want of memory (implicit is then
 * off for it). implicit_answer_key: the key of the checkpoint of its
 * conversation with the answer in the response body; false: none.
 * implicit_meta: the meta of that checkpoint (its conversation's earlier
 * checkpoints, at most keep - 1, from extra, the resumed one's); drop the
 * one that falls off ("" none); NULL: out of memory. */
bool implicit_prepare(struct server *srv, struct job *j);
/* A completion's checkpoint: the key of the token sequence t[0..n) (the
 * prompt's tokens and those generated) under seed, and its group (seed and
 * the first IMPLICIT_GROUP_TOKENS tokens; a sequence shorter has none). */
#define IMPLICIT_GROUP_TOKENS 16
void implicit_token_key(const unsigned char seed[SERVE_DIGEST], const int32_t *t, int32_t n, char out[SERVE_CKEY]);
void implicit_token_group(const unsigned char seed[SERVE_DIGEST], const int32_t *t, char out[SERVE_CKEY]);
bool implicit_answer_key(const struct job *j, const char *response, char out[SERVE_CKEY]);
char *implicit_meta(const struct job *j, const char *extra, int keep, char drop[SERVE_CKEY]);

/* routes.c: every request */
void serve_route(struct server *srv, const struct http_req *req, struct http_resp *resp);
/* sbuf.c: r becomes OpenAI's error object with this status */
void serve_error(struct http_resp *r, int status, const char *type, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* extras.c: GET /v1/models (id NULL) and /v1/models/{id}, POST /tokenize and /detokenize, GET /props */
void serve_models(const struct server *srv, const char *id, struct http_resp *r);
void serve_tokenize(const struct server *srv, const struct http_req *q, struct http_resp *r);
void serve_detokenize(const struct server *srv, const struct http_req *q, struct http_resp *r);
void serve_props(const struct server *srv, struct http_resp *r);

/* text.c: a chat job's Jinja renderings (struct job's r_*), on the calling
 * (connection) thread; nothing for a completion, without --jinja or in a
 * dry run. */
void text_render(struct server *srv, struct job *j);

/* json_body.c: a request body as exactly one valid JSON value (UTF-8, no
 * raw control byte, no \u0000, nothing after it, no key twice in an
 * object); NULL with resp filled (400 naming the offset or the key). */
struct cJSON;
struct cJSON *serve_json_body(const char *body, size_t len, struct http_resp *resp);

/* openai.c: the JSON of the OpenAI API */
/* Fills j from a request body; on a bad body fills resp (400) and returns false. */
bool openai_parse(struct server *srv, enum job_kind kind, const char *body, size_t len, struct job *j, struct http_resp *resp);
/* A whole response (stream false), or one SSE event of a stream. */
void openai_response(const struct server *srv, const struct job *j, struct kvb_str *out);
/* A retry of a stored turn (j->replay) that asked for a stream: the stored answer as one chunk carrying its whole
 * message (or text), the final chunk with its finish_reason, the usage chunk (include_usage), [DONE]. */
void openai_replay_stream(const struct server *srv, const struct job *j, struct kvb_str *out);
void openai_chunk(const struct server *srv, const struct job *j, const char *delta, size_t n, bool role, const char *finish,
                  bool usage_only, const char *lp, size_t lp_n, struct kvb_str *out);
/* Shared with extras.c: a boolean field (absent or null leaves *out; else a
 * 400 naming it), and the first field of o, not null, that known (NULL-ended)
 * does not list, or NULL. */
struct cJSON;
bool openai_get_bool(const struct cJSON *o, const char *name, bool *out, struct http_resp *resp);
const char *openai_unknown_field(const struct cJSON *o, const char *const *known);
/* Adds the kvbound object's pinned span ("keep") and implicit session ("implicit") of j to k (native.c's answer too). */
void openai_kvbound_state(const struct job *j, struct cJSON *k);
/* A chat stream's event with one of the parser's deltas (a JSON object) and the logprob lines since the last. */
void openai_delta_chunk(const struct server *srv, const struct job *j, const char *delta, size_t n, const char *lp, size_t lp_n,
                        struct kvb_str *out);

/* sched.c: the scheduler thread over the batch */
struct sched;
int sched_start(struct server *srv);
/* sched_stop ends the loop (running turns finish or are cut, the queue is
 * answered 503) and leaves the scheduler answering 503 to session queries;
 * sched_free releases it once no connection thread can reach it. */
void sched_stop(struct server *srv);
void sched_free(struct server *srv);
/* Queues j (the scheduler owns it from now until done); false: the queue
 * is full (j untouched). */
bool sched_submit(struct server *srv, struct job *j);
/* queries.c: session state as JSON (GET /v1/sessions/{id}), its cache
 * map, or delete: run on the scheduler thread, answered here. Return the
 * HTTP status; 503: the store failed (its cause in err, "" otherwise). */
int sched_session_json(struct server *srv, const char *id, bool map, struct kvb_str *out, char *err, size_t cap);
int sched_session_delete(struct server *srv, const char *id, char *err, size_t cap);
/* Metrics gauges the scheduler keeps. */
struct sched_gauges {
    int64_t pages_used, pages_free, page_bytes, active, queued, in_memory, persisted, evictions_idle;
    int64_t records, store_pending;                  /* the session table's size; store requests not yet done */
    int64_t pages_shared, prefixes, prefix_hits, prefix_tokens_reused; /* shared prefixes (prefix.c) */
    int64_t checkpoints, checkpoint_bytes;           /* implicit sessions' checkpoints in the store (-1: not known yet) */
    int64_t conn_open, conn_refused, conn_timed_out; /* guard.c */
};
void sched_gauges(struct server *srv, struct sched_gauges *g);
/* GET /health: false with the store's failure in err when the session store
 * cannot be read or written now. */
bool sched_store_healthy(struct server *srv, char *err, size_t cap);

/* store.c: where sessions live between turns. Every stored session has a
 * version, raised by each write; a write names the version it read
 * (STORE_ABSENT: none, the session is new) and is refused with
 * STORE_CONFLICT when the store holds another, so two replicas that ran
 * turns on the same session cannot overwrite each other. Every call runs
 * on the store worker thread (store_queue.c), never on the step loop. */
#define STORE_ABSENT (-1)
/* STORE_UNKNOWN: a write was sent and its reply lost (the connection broke
 * after the request went out, and the store could not be asked again):
 * it may or may not have been made. */
enum { STORE_OK = 0, STORE_NOT_FOUND = 1, STORE_CONFLICT = 2, STORE_UNKNOWN = 3, STORE_ERROR = -1 };
struct ckpt_limits { int64_t max_count, max_bytes, ttl_s; };
struct store {
    const char *kind; /* "sqlite", "redis" */
    bool shared;      /* other replicas write it too: no session stays in memory between turns */
    /* Writes buf if the stored version is expect; *version the new one. */
    int (*put)(struct store *s, const char *id, const void *buf, size_t len, int64_t expect, int64_t *version);
    /* *buf from malloc, *version its version; STORE_OK, STORE_NOT_FOUND or STORE_ERROR */
    int (*get)(struct store *s, const char *id, void **buf, size_t *len, int64_t *version);
    int (*del)(struct store *s, const char *id); /* STORE_OK, STORE_NOT_FOUND or STORE_ERROR */
    int64_t (*count)(struct store *s);           /* sessions stored; -1 unknown */
    /* Checkpoints (implicit sessions): immutable records under content keys
     * ("c:" and hex), apart from the sessions (count counts none of them).
     * cput stores one (replacing one of the same key), its last use now,
     * then removes those unused for ttl_s seconds and, least recently used
     * first, those past max_count or max_bytes; *count and *bytes are what
     * is kept then. cget reads one not expired and marks it used now
     * (STORE_OK, STORE_NOT_FOUND, STORE_ERROR). A completion's checkpoint
     * (a token sequence) has a group, grp (a digest of its scope,
     * configuration and first tokens; NULL for a chat's), and its length
     * ntok: clist gives the keys and lengths of a group's checkpoints, at
     * most max, the most recently used first (*n of them). */
    int (*cput)(struct store *s, const char *key, const char *grp, int32_t ntok, const void *buf, size_t len, const struct ckpt_limits *l,
                int64_t *count, int64_t *bytes);
    int (*clist)(struct store *s, const char *grp, int max, char (*keys)[SERVE_CKEY], int32_t *ntok, int *n);
    int (*cget)(struct store *s, const char *key, int64_t ttl_s, void **buf, size_t *len);
    int (*cdel)(struct store *s, const char *key);
    int (*cstats)(struct store *s, int64_t *count, int64_t *bytes); /* the checkpoints kept: STORE_OK or STORE_ERROR */
    /* A small write that shows the store can be written now (its own key or
     * table, never a session), waiting at most a moment: STORE_OK or STORE_ERROR. */
    int (*probe)(struct store *s);
    void (*close)(struct store *s);
    char error[256]; /* the last failure's cause */
};
/* "DIR" (SQLite file DIR/sessions.sqlite) or "redis://HOST:PORT". NULL
 * with a message in err on failure. */
struct store *store_open(const char *where, char *err, size_t errlen);
struct store *store_sqlite_open(const char *dir, char *err, size_t errlen);
struct store *store_redis_open(const char *url, char *err, size_t errlen);

/* store_queue.c: the store worker. The scheduler posts requests (under the
 * server mutex) and goes on stepping; the worker runs them in order, one
 * at a time, and hands each back finished, waking the scheduler. */
/* SOP_CFIND: the first of keys[0..n_keys) that is a checkpoint (hit its
 * index, buf what was read), or with grp the longest checkpoint of group
 * grp whose tokens begin toks (keys[0] its key, ntok its length); SOP_CPUT:
 * a checkpoint stored (grp and ntok: a completion's), then drop (a
 * conversation's checkpoint past --checkpoints, "" none) deleted. */
enum store_op { SOP_GET, SOP_PUT, SOP_DEL, SOP_CFIND, SOP_CPUT };
struct store_req {
    enum store_op op;
    char id[SERVE_SKEY_MAX + 1];
    void *buf;        /* PUT: the blob (freed once written); GET: what was read (malloc) */
    size_t len;
    int64_t version;  /* PUT: the version read (STORE_ABSENT: new), then the one written; GET: the one read */
    int rc;           /* STORE_OK, STORE_NOT_FOUND, STORE_CONFLICT, STORE_ERROR */
    char error[256];
    char (*keys)[SERVE_CKEY]; /* SOP_CFIND: the keys to try, in order (malloc, freed with the request) */
    int n_keys, hit;
    char grp[SERVE_CKEY];     /* a completion's checkpoint group, "" none (a chat's) */
    int32_t *toks, n_toks;    /* SOP_CFIND with grp: the prompt's tokens (malloc, freed with the request) */
    int32_t ntok;             /* SOP_CPUT with grp: the checkpoint's tokens; SOP_CFIND: the one found's */
    int32_t ntoks[64];        /* SOP_CFIND with grp: each of keys' tokens */
    unsigned char seed[SERVE_DIGEST]; /* SOP_CFIND with grp: the chain's seed the keys are made from */
    char drop[SERVE_CKEY];    /* SOP_CPUT: a checkpoint to delete once it is stored, "" none */
    struct ckpt_limits lim;   /* SOP_CPUT */
    int64_t c_count, c_bytes; /* SOP_CPUT: the checkpoints kept after it */
    void *owner;      /* the scheduler's: what waits for it */
    int owner_kind;
    struct store_req *next;
};
struct store_queue;
struct store_req *store_req_new(enum store_op op, const char *id, void *owner, int owner_kind); /* NULL: out of memory */
void store_req_free(struct store_req *r); /* with what it holds (buf, keys) */
struct store_queue *store_queue_start(struct server *srv);
/* Under srv->mu. */
void store_queue_post(struct store_queue *q, struct store_req *r);
/* Under srv->mu: the finished requests, oldest first (the caller owns them). */
struct store_req *store_queue_done(struct store_queue *q);
/* Under srv->mu: requests posted and not yet taken back done. */
int store_queue_pending(const struct store_queue *q);
/* Under srv->mu: sessions in the store (-1: not known yet). */
int64_t store_queue_count(const struct store_queue *q);
/* Under srv->mu: the checkpoints in the store and their bytes (-1: not known yet). */
void store_queue_checkpoints(const struct store_queue *q, int64_t *count, int64_t *bytes);
/* Under srv->mu: whether the store answered its last use (a read, a write,
 * a probe) or failed it, with the failure in err; asks the worker for a
 * probe when the last is over a second old (the answer then is as of the
 * probe before). */
bool store_queue_healthy(struct store_queue *q, char *err, size_t cap);
/* Not under srv->mu: the worker finishes the request it runs; those not
 * started come back done with STORE_ERROR "the server is stopping". */
void store_queue_stop(struct store_queue *q);
void store_queue_free(struct store_queue *q);

/* metrics.c: Prometheus text */
struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);
void metrics_token(struct metrics *m, bool first, double seconds); /* TTFT or inter-token */
/* implicit sessions: lookups that hit or missed, conversation tokens not read again, checkpoints stored */
void metrics_implicit(struct metrics *m, int hits, int misses, int64_t reused, int stored);
void metrics_count(struct metrics *m, int64_t prefill_tokens, int64_t decode_tokens, int64_t requests_ok, int64_t requests_failed);
void metrics_rate(struct metrics *m, double prefill_tok_s, double decode_tok_s);
void metrics_render(struct metrics *m, const struct sched_gauges *g, struct kvb_str *out);

/* native.c: llama-server's POST /completion answer: {"content", "stop", ...}, whole or as one SSE event */
void native_response(const struct server *srv, const struct job *j, struct kvb_str *out);
void native_replay_stream(const struct job *j, struct kvb_str *out);
void native_chunk(const struct server *srv, const struct job *j, const char *text, size_t n, bool final, struct kvb_str *out);

/* page.c (generated from page.html) */
extern const char serve_page_html[];
extern const size_t serve_page_html_len;

/* http.c: libmicrohttpd, one thread per connection */
struct MHD_Daemon;
struct MHD_Daemon *http_start(struct server *srv, int max_connections, int max_per_ip, int request_timeout_s, int *port_out, char *err,
                              size_t errlen);
void http_quiesce(struct MHD_Daemon *d);
void http_stop(struct MHD_Daemon *d);

/* guard.c: connection counts (total, per address) and the request deadline */
struct guard;
struct guard_conn;
struct sockaddr;
struct guard *guard_new(int max_total, int max_per_addr, double timeout_s);
void guard_free(struct guard *g);
bool guard_admit(struct guard *g, const struct sockaddr *addr, unsigned addrlen);
struct guard_conn *guard_open(struct guard *g, int fd, const struct sockaddr *addr, unsigned addrlen);
void guard_close(struct guard *g, struct guard_conn *c);
void guard_answering(struct guard *g, struct guard_conn *c, bool on);
void guard_counts(struct guard *g, int64_t *open, int64_t *refused, int64_t *timed_out);
/* Connections whose request is in and whose answer is not yet sent. */
int guard_answering_count(struct guard *g);

double serve_now(void);
int cmd_serve_main(int argc, char **argv);

#endif

/*
 * routes.c — what each request gets, with no HTTP library in sight: the
 * connection layer (http.c) or the fuzz target fills a struct http_req and
 * reads back a struct http_resp (a status and a body, or a job to stream).
 *
 *   GET  /                          the page (page.html)
 *   GET  /health                    {"status":"ok"}
 *   GET  /metrics                   Prometheus text
 *   GET  /v1/models                 the one model
 *   POST /v1/chat/completions       chat (stream or not)
 *   POST /v1/completions            raw completion
 *   GET  /v1/sessions/{id}          a session's state
 *   GET  /v1/sessions/{id}/map      its cache, position by position
 *   DELETE /v1/sessions/{id}
 * Errors use OpenAI's error object: 400 bad JSON or field, 401 bad key,
 * 404, 405, 413 body too large, 429 session busy, 503 full (Retry-After).
 */
#include "serve.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double serve_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sb_put(struct sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) { b->oom = true; return; }
        b->s = t;
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
void sb_puts(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
void sb_printf(struct sbuf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { sb_put(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = true; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_put(b, big, (size_t)n);
    free(big);
}
void sb_free(struct sbuf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

void http_resp_free(struct http_resp *r) { sb_free(&r->body); }

void job_free(struct job *j) {
    if (!j) return;
    free(j->system);
    free(j->user);
    free(j->prompt);
    for (int i = 0; i < j->n_msgs; i++) free((char *)j->msgs[i].content);
    free(j->msgs);
    for (int i = 0; i < j->n_stops; i++) free(j->stops[i]);
    sb_free(&j->text);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* JSON string escaping for the few bodies written by hand here. */
static void json_str(struct sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { sb_put(b, "\\", 1); sb_put(b, s, 1); }
        else if (c < 0x20) sb_printf(b, "\\u%04x", c);
        else sb_put(b, s, 1);
    }
    sb_put(b, "\"", 1);
}

void serve_error(struct http_resp *r, int status, const char *type, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!utf8_valid(msg, strlen(msg))) snprintf(msg, sizeof msg, "bad request");
    sb_free(&r->body);
    r->status = status;
    r->content_type = "application/json";
    sb_puts(&r->body, "{\"error\":{\"message\":");
    json_str(&r->body, msg);
    sb_puts(&r->body, ",\"type\":");
    json_str(&r->body, type);
    sb_printf(&r->body, ",\"param\":null,\"code\":%d}}\n", status);
}

static bool authorized(const struct server *srv, const struct http_req *q) {
    if (!srv->o.api_key) return true;
    const char *a = q->authorization;
    if (!a || strncmp(a, "Bearer ", 7)) return false;
    /* compare every byte, whatever matches first */
    const char *k = srv->o.api_key, *g = a + 7;
    size_t lk = strlen(k), lg = strlen(g);
    unsigned diff = (unsigned)(lk ^ lg);
    for (size_t i = 0; i < lk; i++) diff |= (unsigned)(k[i] ^ (i < lg ? g[i] : 0));
    return diff == 0;
}

static void generation(struct server *srv, enum job_kind kind, const struct http_req *q, struct http_resp *r) {
    struct job *j = calloc(1, sizeof *j);
    if (!j) { serve_error(r, 500, "server_error", "out of memory"); return; }
    pthread_cond_init(&j->cv, NULL);
    j->seq = -1;
    pthread_mutex_lock(&srv->mu);
    const int64_t id = ++srv->next_id;
    pthread_mutex_unlock(&srv->mu);
    if (!openai_parse(srv, kind, q->body, q->body_len, j, r)) {
        job_free(j);
        return;
    }
    snprintf(j->id, sizeof j->id, "%s-%lld", kind == JOB_CHAT ? "chatcmpl" : "cmpl", (long long)id);
    j->created = (int64_t)time(NULL);
    j->t_submit = serve_now();
    if (srv->o.dry_run) { /* the fuzz target: checked, not generated */
        r->status = 200;
        r->content_type = "application/json";
        sb_puts(&r->body, "{}\n");
        job_free(j);
        return;
    }
    if (!sched_submit(srv, j)) {
        job_free(j);
        serve_error(r, 503, "server_busy", "the request queue is full (%d waiting); retry later", srv->o.queue_max);
        r->retry_after = 2;
        return;
    }
    r->status = 200;
    r->content_type = j->stream ? "text/event-stream" : "application/json";
    r->job = j;
}

void serve_route(struct server *srv, const struct http_req *q, struct http_resp *r) {
    memset(r, 0, sizeof *r);
    const char *m = q->method, *p = q->path;
    const bool get = !strcmp(m, "GET") || !strcmp(m, "HEAD"), post = !strcmp(m, "POST"), del = !strcmp(m, "DELETE");
    if (get && !strcmp(p, "/")) {
        r->status = 200;
        r->content_type = "text/html; charset=utf-8";
        sb_put(&r->body, serve_page_html, serve_page_html_len);
        return;
    }
    if (get && !strcmp(p, "/health")) {
        r->status = 200;
        r->content_type = "application/json";
        sb_puts(&r->body, "{\"status\":\"ok\"}\n");
        return;
    }
    if (!authorized(srv, q)) {
        serve_error(r, 401, "invalid_api_key", "missing or wrong API key (Authorization: Bearer KEY)");
        return;
    }
    if (q->body_too_large) {
        serve_error(r, 413, "invalid_request_error", "the request body is larger than %zu bytes (--max-body)", srv->o.max_body);
        return;
    }
    if (get && !strcmp(p, "/metrics")) {
        struct sched_gauges g;
        memset(&g, 0, sizeof g);
        if (!srv->o.dry_run) sched_gauges(srv, &g);
        r->status = 200;
        r->content_type = "text/plain; version=0.0.4";
        metrics_render(srv->metrics, &g, &r->body);
        return;
    }
    if (get && !strcmp(p, "/v1/models")) {
        r->status = 200;
        r->content_type = "application/json";
        sb_puts(&r->body, "{\"object\":\"list\",\"data\":[{\"id\":");
        json_str(&r->body, srv->o.model_name);
        sb_printf(&r->body, ",\"object\":\"model\",\"created\":0,\"owned_by\":\"kvbound\",\"kvbound\":{\"arch\":\"%s\",\"n_ctx_train\":%d,"
                            "\"kv_policy\":\"%s\",\"kv_budget\":%d,\"max_budget\":%d}}]}\n",
                  srv->mi.arch, (int)srv->mi.n_ctx_train, kvb_policy_name(srv->o.policy.id), (int)srv->o.policy.budget, srv->o.max_budget);
        return;
    }
    if (!strcmp(p, "/v1/chat/completions") || !strcmp(p, "/v1/completions")) {
        if (!post) { serve_error(r, 405, "invalid_request_error", "%s takes POST", p); return; }
        generation(srv, p[4] == 'c' && p[5] == 'h' ? JOB_CHAT : JOB_COMPLETION, q, r);
        return;
    }
    if (!strncmp(p, "/v1/sessions/", 13)) {
        char id[SERVE_ID_MAX + 8];
        const char *rest = p + 13;
        const char *slash = strchr(rest, '/');
        const size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
        const bool map = slash && !strcmp(slash, "/map");
        if (n < 1 || n > SERVE_ID_MAX || (slash && !map)) { serve_error(r, 404, "not_found", "no such route"); return; }
        memcpy(id, rest, n);
        id[n] = 0;
        if (srv->o.dry_run) { serve_error(r, 404, "not_found", "no session '%s'", id); return; }
        if (get) {
            r->content_type = "application/json";
            r->status = sched_session_json(srv, id, map, &r->body);
            if (r->status != 200) serve_error(r, r->status, r->status == 404 ? "not_found" : "server_error", "session '%s': %s", id,
                                              r->status == 404 ? "not found" : "unavailable");
            return;
        }
        if (del && !map) {
            const int st = sched_session_delete(srv, id);
            if (st == 200) {
                r->status = 200;
                r->content_type = "application/json";
                sb_puts(&r->body, "{\"id\":");
                json_str(&r->body, id);
                sb_puts(&r->body, ",\"object\":\"session\",\"deleted\":true}\n");
            } else {
                serve_error(r, st, st == 404 ? "not_found" : st == 429 ? "session_busy" : "server_error", "session '%s': %s", id,
                            st == 404 ? "not found" : st == 429 ? "a turn is running" : "the store failed");
                if (st == 429) r->retry_after = 1;
            }
            return;
        }
        serve_error(r, 405, "invalid_request_error", "sessions take GET or DELETE");
        return;
    }
    serve_error(r, 404, "not_found", "no route %s %s", m, p);
}

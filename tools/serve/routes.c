/*
 * routes.c — what each request gets, with no HTTP library in sight: the
 * connection layer (http.c) or the fuzz target fills a struct http_req and
 * reads back a struct http_resp (a status and a body, or a job to stream).
 *
 *   GET  /                          the page (page.html)
 *   GET  /health, /v1/health        {"status":"ok"}; 503 when the session store fails
 *   GET  /metrics                   Prometheus text
 *   GET  /v1/models                 the one model; /v1/models/{id} it alone
 *   POST /tokenize, /detokenize     llama-server's (extras.c)
 *   GET  /props                     llama-server's: slots, context, template
 *   POST /v1/chat/completions       chat (stream or not); also without /v1
 *   POST /v1/completions            raw completion; also without /v1
 *   POST /completion                llama-server's: a completion in its shape (native.c)
 *   GET  /v1/sessions/{id}          a session's state
 *   GET  /v1/sessions/{id}/map      its cache, position by position
 *   DELETE /v1/sessions/{id}
 *   OPTIONS (any of them)           a CORS preflight, for a --cors origin
 * Errors use OpenAI's error object: 400 bad JSON or field, 401 bad key,
 * 403 a Host that does not name this server (loopback without --api-key)
 * or a write from another origin that --cors does not allow, 404, 405
 * with Allow, 413 body too large, 429 session busy, 503 full
 * (Retry-After).
 */
#include "serve.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* The tenant of a request's key: Authorization: Bearer KEY, or X-Api-Key:
 * KEY (llama-server takes both); its index in srv->o.keys, 0 when no key is
 * configured (one tenant for everyone), -1 no key or a wrong one. */
static int tenant_of(const struct server *srv, const struct http_req *q) {
    if (!srv->o.keys.n) return 0;
    if (q->x_api_key) {
        const int t = tenant_match(&srv->o.keys, q->x_api_key);
        if (t >= 0) return t;
    }
    const char *a = q->authorization;
    /* the scheme is case-insensitive, then one or more spaces (RFC 9110 11.1, 11.6.2) */
    if (!a || strncasecmp(a, "Bearer", 6) || a[6] != ' ') return -1;
    const char *g = a + 6;
    while (*g == ' ') g++;
    return tenant_match(&srv->o.keys, g);
}

static void generation(struct server *srv, enum job_kind kind, const struct http_req *q, int tenant, struct http_resp *r) {
    struct job *j = calloc(1, sizeof *j);
    if (!j) { serve_error(r, 500, "server_error", "out of memory"); return; }
    pthread_cond_init(&j->cv, NULL);
    j->seq = -1;
    j->prefix_n = -1;
    pthread_mutex_lock(&srv->mu);
    const int64_t id = ++srv->next_id;
    pthread_mutex_unlock(&srv->mu);
    if (!openai_parse(srv, kind, q->body, q->body_len, j, r)) {
        job_free(j);
        return;
    }
    if (srv->o.keys.n) memcpy(j->tenant, srv->o.keys.digest[tenant], SERVE_DIGEST); /* no key: all zero, one tenant */
    tenant_scope(j->tenant, j->salt_given ? j->cache_salt : NULL, j->scope);
    if (j->session_id[0]) tenant_session_key(&srv->o.keys, tenant, j->session_id, j->session_key); /* each tenant its own ids */
    j->native = !strcmp(q->path, "/completion"); /* llama-server's own route: its answer's shape (native.c) */
    /* a stateless chat resumes where its history ends (implicit.c); a prefill's answer continues text that is no answer of ours */
    j->implicit = !j->session_id[0] && srv->o.checkpoints > 0 &&
                  (kind == JOB_CHAT ? srv->jinja && !j->answer_prefix : !j->native); /* a completion: on the token prefix of its prompt */
    if (j->implicit && !implicit_prepare(srv, j)) {
        job_free(j);
        serve_error(r, 500, "server_error", "out of memory");
        return;
    }
    if (j->native && j->logprobs) {
        serve_error(r, 400, "invalid_request_error", "'logprobs' is not implemented on /completion (llama-server's n_probs neither); use /v1/completions");
        job_free(j);
        return;
    }
    if (q->idempotency_key) { /* a session turn's: a retry of a stored turn gets its stored answer */
        const char *k = q->idempotency_key;
        size_t n = 0;
        while (k[n] > 0x20 && k[n] < 0x7f) n++;
        if (!n || k[n] || n > SERVE_IDEM_MAX) {
            job_free(j);
            serve_error(r, 400, "invalid_request_error", "the Idempotency-Key header must be 1 to %d visible ASCII characters", SERVE_IDEM_MAX);
            return;
        }
        memcpy(j->idem_key, k, n + 1);
    }
    snprintf(j->id, sizeof j->id, "%s-%lld", kind == JOB_CHAT ? "chatcmpl" : "cmpl", (long long)id);
    j->created = (int64_t)time(NULL);
    j->t_submit = serve_now();
    if (srv->o.dry_run) { /* the fuzz target: checked, not generated */
        r->status = 200;
        r->content_type = "application/json";
        kvb_str_puts(&r->body, "{}\n");
        job_free(j);
        return;
    }
    text_render(srv, j); /* here, not on the scheduler thread: a slow template holds this request only */
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

/* The name part of a Host header or of an Origin's authority: brackets of
 * an IPv6 literal and the port taken off, into out (false: too long). */
static bool host_name(const char *h, size_t n, char *out, size_t cap) {
    if (n && h[0] == '[') {
        const char *rb = memchr(h, ']', n);
        if (!rb) return false;
        h++;
        n = (size_t)(rb - h);
    } else {
        const char *colon = memchr(h, ':', n);
        if (colon) n = (size_t)(colon - h);
    }
    if (n >= cap) return false;
    memcpy(out, h, n);
    out[n] = 0;
    return true;
}

/* Whether the Host header names this server as a browser on this machine
 * would: the --host address, localhost or a loopback literal (127.0.0.0/8,
 * ::1; any port: a
 * load balancer on this machine forwards its own). A page on another name
 * that resolves here (DNS rebinding) names that other name. */
static bool host_allowed(const struct server *srv, const char *host) {
    if (!srv->o.check_host || !host) return true; /* HTTP/1.0 without Host: no browser */
    char name[256];
    if (!host_name(host, strlen(host), name, sizeof name)) return false;
    if (!strcasecmp(name, "localhost")) return true;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, name, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127) return true; /* any of 127.0.0.0/8 */
    if (inet_pton(AF_INET6, name, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6)) return true;
    char bound[256];
    return host_name(srv->o.host, strlen(srv->o.host), bound, sizeof bound) && !strcasecmp(name, bound);
}

/* The --cors entry that allows origin, or NULL. */
static const char *cors_allowed(const struct server *srv, const char *origin) {
    for (int i = 0; i < srv->o.n_cors; i++)
        if (!strcmp(srv->o.cors[i], "*") || !strcmp(srv->o.cors[i], origin)) return srv->o.cors[i];
    return NULL;
}

/* Whether an Origin is this server's own page: http://HOST with HOST the
 * request's Host header. */
static bool same_origin(const char *origin, const char *host) {
    if (!host || strncmp(origin, "http://", 7)) return false;
    return !strcasecmp(origin + 7, host);
}

/* Allowed methods of each fixed route; NULL: not one of them. */
static const char *route_allow(const char *p) {
    if (!strcmp(p, "/") || !strcmp(p, "/health") || !strcmp(p, "/v1/health") || !strcmp(p, "/metrics") || !strcmp(p, "/v1/models") || !strcmp(p, "/props") ||
        (!strncmp(p, "/v1/models/", 11) && p[11]))
        return "GET, HEAD";
    if (!strcmp(p, "/v1/chat/completions") || !strcmp(p, "/v1/completions") || !strcmp(p, "/tokenize") || !strcmp(p, "/detokenize") ||
        !strcmp(p, "/chat/completions") || !strcmp(p, "/completions") || !strcmp(p, "/completion"))
        return "POST";
    if (!strncmp(p, "/v1/sessions/", 13)) {
        const char *slash = strchr(p + 13, '/');
        return slash ? "GET, HEAD" : "GET, HEAD, DELETE";
    }
    return NULL;
}

/* Whether method is one of allow's comma-separated names. */
static bool method_in(const char *allow, const char *method) {
    const size_t n = strlen(method);
    for (const char *a = allow; *a;) {
        const char *end = strchr(a, ',');
        const size_t len = end ? (size_t)(end - a) : strlen(a);
        if (len == n && !memcmp(a, method, n)) return true;
        if (!end) break;
        a = end + 1;
        while (*a == ' ') a++;
    }
    return false;
}

void serve_route(struct server *srv, const struct http_req *q, struct http_resp *r) {
    memset(r, 0, sizeof *r);
    const char *m = q->method, *p = q->path;
    const bool get = !strcmp(m, "GET") || !strcmp(m, "HEAD");
    const bool options = !strcmp(m, "OPTIONS");
    if (!host_allowed(srv, q->host)) {
        serve_error(r, 403, "forbidden", "Host '%.200s' does not name this server; a server on a loopback address without --api-key answers "
                                         "only to localhost and its own address", q->host);
        return;
    }
    const char *allow = route_allow(p);
    if (q->origin) {
        const char *cors = cors_allowed(srv, q->origin);
        if (cors) r->cors_origin = !strcmp(cors, "*") ? "*" : cors;
        if (options) { /* a CORS preflight */
            if (!cors || !allow) {
                serve_error(r, 403, "forbidden", "cross-origin requests from '%.200s' are not allowed (--cors ORIGIN allows one)", q->origin);
                return;
            }
            r->status = 204;
            r->allow = allow;
            r->preflight = true;
            return;
        }
        if (!get && !cors && !same_origin(q->origin, q->host)) {
            serve_error(r, 403, "forbidden", "cross-origin %s from '%.200s' refused (--cors ORIGIN allows one)", m, q->origin);
            return;
        }
    }
    if (allow && !method_in(allow, m)) {
        serve_error(r, 405, "invalid_request_error", "%s takes %s", p, allow);
        r->allow = allow;
        return;
    }
    if (get && !strcmp(p, "/")) {
        r->status = 200;
        r->content_type = "text/html; charset=utf-8";
        kvb_str_put(&r->body, serve_page_html, serve_page_html_len);
        return;
    }
    if (get && (!strcmp(p, "/health") || !strcmp(p, "/v1/health"))) {
        char err[256] = "";
        r->content_type = "application/json";
        if (!srv->o.dry_run && !sched_store_healthy(srv, err, sizeof err)) { /* turns would fail: a load balancer should send them elsewhere */
            r->status = 503;
            r->retry_after = 1;
            kvb_str_printf(&r->body, "{\"status\":\"store_unavailable\",\"store\":\"%s\",\"store_error\":", srv->store ? srv->store->kind : "");
            kvb_str_json(&r->body, err, strlen(err), 0);
            kvb_str_puts(&r->body, "}\n");
            return;
        }
        r->status = 200;
        kvb_str_puts(&r->body, "{\"status\":\"ok\"}\n");
        return;
    }
    const int tenant = tenant_of(srv, q);
    if (tenant < 0) {
        serve_error(r, 401, "invalid_api_key", "missing or wrong API key (Authorization: Bearer KEY, or X-Api-Key: KEY)");
        return;
    }
    if (q->body_too_large) {
        serve_error(r, 413, "invalid_request_error", "the request body is larger than %zu bytes (--max-body)", srv->o.max_body);
        return;
    }
    if (get && !strcmp(p, "/metrics")) {
        if (tenant != 0) { /* its counters are every tenant's (a prefix hit says someone sent that prompt): the operator's alone */
            serve_error(r, 403, "forbidden", "/metrics counts every tenant's requests: it answers the first key of --api-key-file only");
            return;
        }
        struct sched_gauges g;
        memset(&g, 0, sizeof g);
        if (!srv->o.dry_run) sched_gauges(srv, &g);
        if (srv->guard) guard_counts(srv->guard, &g.conn_open, &g.conn_refused, &g.conn_timed_out);
        r->status = 200;
        r->content_type = "text/plain; version=0.0.4";
        metrics_render(srv->metrics, &g, &r->body);
        return;
    }
    if (get && !strcmp(p, "/v1/models")) { serve_models(srv, NULL, r); return; }
    if (get && !strncmp(p, "/v1/models/", 11)) { serve_models(srv, p + 11, r); return; }
    if (get && !strcmp(p, "/props")) { serve_props(srv, r); return; }
    if (!strcmp(p, "/tokenize")) { serve_tokenize(srv, q, r); return; }
    if (!strcmp(p, "/detokenize")) { serve_detokenize(srv, q, r); return; }
    /* without /v1 too, as llama-server and many clients' base URLs have them; /completion is llama-server's own */
    if (!strcmp(p, "/v1/chat/completions") || !strcmp(p, "/chat/completions")) { generation(srv, JOB_CHAT, q, tenant, r); return; }
    if (!strcmp(p, "/v1/completions") || !strcmp(p, "/completions") || !strcmp(p, "/completion")) { generation(srv, JOB_COMPLETION, q, tenant, r); return; }
    if (!strncmp(p, "/v1/sessions/", 13)) {
        char id[SERVE_ID_MAX + 8], key[SERVE_SKEY_MAX + 1];
        const char *rest = p + 13;
        const char *slash = strchr(rest, '/');
        const size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
        const bool map = slash && !strcmp(slash, "/map");
        if (n < 1 || n > SERVE_ID_MAX || (slash && !map)) { serve_error(r, 404, "not_found", "no such route"); return; }
        memcpy(id, rest, n);
        id[n] = 0;
        if (memchr(id, ':', n)) { /* no session id has one: the table's other keys (another tenant's sessions, checkpoints) are not reachable */
            serve_error(r, 404, "not_found", "no session '%s'", id);
            return;
        }
        tenant_session_key(&srv->o.keys, tenant, id, key); /* another tenant's session is not there: 404 as any absent one */
        if (srv->o.dry_run) { serve_error(r, 404, "not_found", "no session '%s'", id); return; }
        char err[200] = "";
        if (get) {
            r->content_type = "application/json";
            r->status = sched_session_json(srv, key, map, &r->body, err, sizeof err);
            if (r->status == 503 && err[0]) {
                serve_error(r, 503, "store_unavailable", "session '%s': the session store cannot be read (%s); retry", id, err);
                r->retry_after = 1;
            } else if (r->status != 200)
                serve_error(r, r->status, r->status == 404 ? "not_found" : "server_error", "session '%s': %s", id,
                            r->status == 404 ? "not found" : "unavailable");
            return;
        }
        /* DELETE: route_allow let no other method through, and none on .../map */
        const int st = sched_session_delete(srv, key, err, sizeof err);
        if (st == 200) {
            r->status = 200;
            r->content_type = "application/json";
            kvb_str_puts(&r->body, "{\"id\":");
            kvb_str_json(&r->body, id, strlen(id), 0);
            kvb_str_puts(&r->body, ",\"object\":\"session\",\"deleted\":true}\n");
        } else if (st == 503) { /* as a turn whose store write failed: the store still holds the session */
            serve_error(r, 503, "store_unavailable", "session '%s' was not deleted: the session store failed (%s); it holds the session still: retry",
                        id, err[0] ? err : "unavailable");
            r->retry_after = 1;
        } else {
            serve_error(r, st, st == 404 ? "not_found" : st == 429 ? "session_busy" : "server_error", "session '%s': %s", id,
                        st == 404 ? "not found" : st == 429 ? "a turn is running" : "the store failed");
            if (st == 429) r->retry_after = 1;
        }
        return;
    }
    serve_error(r, 404, "not_found", "no route %s %s", m, p);
}

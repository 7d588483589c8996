/*
 * http.c — libmicrohttpd glue: one thread per connection. The body is
 * gathered (up to --max-body; beyond it the answer is 413 and the rest is
 * not kept), serve_route decides, and a generation is waited for here:
 *  - stream false: until the job is done, then one JSON answer;
 *  - stream true: until it starts (so a refusal still gets its own status),
 *    then server-sent events from a content reader that waits for text.
 * While waiting, the socket is checked every 100 ms; a client that went
 * away cancels its job, which returns its pages at the next step. Before
 * an answer starts, a FIN is probed (probe_half): a client that closed
 * both ends is cancelled, one that only half-closed is still answered.
 * With -v each request ends with one line on stderr (log_request): method,
 * path, status (0: the client went away first), ms from its headers to its
 * end, and its session.
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include "serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <time.h>

struct conn {
    struct kvb_str body;
    bool too_large;
    /* -v */
    double t0;
    int status;
    char method[16], path[128], session[SERVE_ID_MAX + 1];
};

/* src into dst, bytes outside printable ASCII as '?' (a log line stays one line) */
static void log_copy(char *dst, size_t cap, const char *src) {
    size_t k = 0;
    for (; src && src[k] && k + 1 < cap; k++) dst[k] = (unsigned char)src[k] < 0x20 || (unsigned char)src[k] >= 0x7f ? '?' : src[k];
    dst[k] = 0;
}

/* -v: a request's line (method and path as log_copy left them) */
static void log_request(const char *method, const char *path, int status, double ms, const char *session) {
    fprintf(stderr, "kvbound serve: %s %s %d %.0f ms session %s\n", method, path, status, ms, session[0] ? session : "-");
}

struct stream {
    struct server *srv;
    struct job *j;
    int fd;
    struct kvb_str out;
    size_t off;
    bool finished;
    double pinged; /* when a comment last went to a half-closed peer */
};

/* What the peer has done with its end. A FIN alone (PEER_HALF) may be a
 * client that half-closed after sending its request (shutdown(SHUT_WR),
 * as `nc -N` does) and still reads: it is answered. Only a reset, or an
 * error, is a client gone; a client that closed both ends is found out by
 * the next write, which draws a reset. */
enum peer { PEER_OK, PEER_HALF, PEER_GONE };
static enum peer peer_state(int fd) {
    if (fd < 0) return PEER_OK;
    struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return PEER_OK;
    if (p.revents & (POLLHUP | POLLERR)) return PEER_GONE;
    if (p.revents & POLLRDHUP) return PEER_HALF;
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 ? PEER_HALF : PEER_OK;
}

/* A peer whose FIN came while its answer has not started: a client that
 * closed both ends (gone: its request is cancelled, as llama-server and
 * vLLM cancel it) or one that only half-closed and still reads. An
 * HTTP/1.1 client must accept an interim 100 (Continue) before its answer
 * (RFC 9110 15.2), so one is written once: a closed peer answers it with
 * a reset (PEER_GONE at the next look). An HTTP/1.0 client may not get a
 * 1xx: its FIN is read as gone. Returns whether the peer is gone now. */
static bool probe_half(int fd, bool http11, bool *probed) {
    if (!http11) return true;
    if (*probed) return false;
    *probed = true;
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    return send(fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)(sizeof cont - 1);
}

static void wait_100ms(struct server *srv, struct job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
    pthread_cond_timedwait(&j->cv, &srv->mu, &ts);
}

/* Gives up on a job (under mu): the scheduler frees it if it still holds
 * it, else it is freed here. */
static void release_job(struct job *j) {
    if (j->done) job_free(j);
    else {
        j->cancelled = true;
        j->abandoned = true;
    }
}

/* The headers every answer may carry besides its body's. */
static void add_headers(struct MHD_Response *r, const struct http_resp *h) {
    if (h->retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", h->retry_after);
        MHD_add_response_header(r, "Retry-After", v);
    }
    if (h->allow) MHD_add_response_header(r, "Allow", h->allow);
    if (h->cors_origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", h->cors_origin);
        MHD_add_response_header(r, "Vary", "Origin");
    }
    if (h->preflight) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type, X-Api-Key, Idempotency-Key");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    if (h->close) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (h->no_retry) MHD_add_response_header(r, "x-should-retry", "false");
}

static enum MHD_Result send_resp(struct MHD_Connection *c, const struct http_resp *h) {
    if (kvb_str_error(&h->body) != KVB_OK) { /* a body cut short by a failed append is never sent: a 500 instead */
        if (h->status == 500) return MHD_NO;
        struct http_resp e;
        memset(&e, 0, sizeof e);
        serve_error(&e, 500, "server_error", "out of memory while writing the answer");
        e.close = true;
        const enum MHD_Result ok = kvb_str_error(&e.body) == KVB_OK ? send_resp(c, &e) : MHD_NO;
        http_resp_free(&e);
        return ok;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(h->body.n, h->body.p ? h->body.p : (char *)"", MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    if (h->body.n || h->status != 204) MHD_add_response_header(r, "Content-Type", h->content_type ? h->content_type : "application/json");
    add_headers(r, h);
    const enum MHD_Result ok = MHD_queue_response(c, (unsigned)h->status, r);
    MHD_destroy_response(r);
    return ok;
}

static void job_error_body(const struct job *j, struct http_resp *r) {
    serve_error(r, j->status ? j->status : 500, j->error_type[0] ? j->error_type : "server_error", "%s", j->error[0] ? j->error : "failed");
    r->retry_after = j->retry_after;
    r->no_retry = j->no_retry;
}

/* Counts the Content-Length and Transfer-Encoding headers of a request. */
struct framing {
    int content_length, transfer_encoding;
};
static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    (void)value;
    struct framing *f = cls;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) f->content_length++;
    if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) f->transfer_encoding++;
    return MHD_YES;
}

/* An answer made before the body is read (its framing is bad, or it is too
 * large): the connection closes after it, as the unread body cannot be
 * told from the next request. Queued in the first call, so a client that
 * sent Expect: 100-continue gets this at once instead of 100. */
static enum MHD_Result refuse_early(const struct server *srv, struct MHD_Connection *c, const char *method, const char *url, int status,
                                    const char *type, const char *msg) {
    if (srv->o.verbose) {
        char m[16], p[128];
        log_copy(m, sizeof m, method);
        log_copy(p, sizeof p, url);
        log_request(m, p, status, 0, "");
    }
    struct http_resp r;
    memset(&r, 0, sizeof r);
    serve_error(&r, status, type, "%s", msg);
    r.close = true;
    const enum MHD_Result ok = send_resp(c, &r);
    http_resp_free(&r);
    return ok;
}

/* ---- server-sent events ---- */

/* The logprob lines not yet written (NULL: none). */
static const char *lp_unsent(const struct job *j) { return j->lp.n > j->lp_sent ? j->lp.p + j->lp_sent : NULL; }

/* Appends every event now due (under mu). */
static void stream_events(struct stream *st) {
    struct job *j = st->j;
    const struct server *srv = st->srv;
    if (j->replay) { /* a retry of a stored turn (Idempotency-Key): the stored answer, as events */
        if (j->native) native_replay_stream(j, &st->out);
        else openai_replay_stream(srv, j, &st->out);
        st->finished = true;
        return;
    }
    if (!j->role_sent) {
        if (j->kind == JOB_CHAT) openai_chunk(srv, j, NULL, 0, true, NULL, false, NULL, 0, &st->out);
        j->role_sent = true;
    }
    if (j->parser) {
        /* the parser's deltas, each with the logprobs that came since the last */
        while (j->deltas_sent < j->deltas.n) {
            const char *d = j->deltas.p + j->deltas_sent;
            const char *nl = memchr(d, '\n', j->deltas.n - j->deltas_sent);
            if (!nl) break;
            openai_delta_chunk(srv, j, d, (size_t)(nl - d), lp_unsent(j), j->lp.n - j->lp_sent, &st->out);
            j->lp_sent = j->lp.n;
            j->deltas_sent += (size_t)(nl - d) + 1;
        }
    } else {
        const size_t ready = j->done ? j->text.n : j->text.n - (j->held < j->text.n ? j->held : j->text.n);
        if (ready > j->sent && j->native) {
            native_chunk(srv, j, j->text.p + j->sent, ready - j->sent, false, &st->out);
            j->sent = ready;
        } else if (ready > j->sent) {
            openai_chunk(srv, j, j->text.p + j->sent, ready - j->sent, false, NULL, false, lp_unsent(j), j->lp.n - j->lp_sent, &st->out);
            j->lp_sent = j->lp.n;
            j->sent = ready;
        }
    }
    if (!j->done) return;
    if (j->failed) {
        struct http_resp e;
        memset(&e, 0, sizeof e);
        job_error_body(j, &e);
        kvb_str_puts(&st->out, "data: ");
        kvb_str_put(&st->out, e.body.p, e.body.n ? e.body.n - 1 : 0);
        kvb_str_puts(&st->out, "\n\n");
        http_resp_free(&e);
    } else if (j->native) { /* llama-server's /completion: the last event says stop, and no [DONE] follows */
        native_chunk(srv, j, NULL, 0, true, &st->out);
    } else {
        openai_chunk(srv, j, NULL, 0, false, j->finish, false, lp_unsent(j), j->lp.n - j->lp_sent, &st->out);
        j->lp_sent = j->lp.n;
        if (j->include_usage) openai_chunk(srv, j, NULL, 0, false, NULL, true, NULL, 0, &st->out);
    }
    if (!j->native) kvb_str_puts(&st->out, "data: [DONE]\n\n");
    st->finished = true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct stream *st = cls;
    if (st->off == st->out.n) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        st->out.n = st->off = 0;
        pthread_mutex_lock(&st->srv->mu);
        for (;;) {
            stream_events(st);
            if (kvb_str_error(&st->out) != KVB_OK || kvb_str_error(&st->j->deltas) != KVB_OK) { /* an event cut short: end the stream broken, never with [DONE] */
                pthread_mutex_unlock(&st->srv->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            if (st->out.n || st->finished) break;
            wait_100ms(st->srv, st->j);
            const enum peer ps = peer_state(st->fd);
            if (ps == PEER_GONE) {
                pthread_mutex_unlock(&st->srv->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            if (ps == PEER_HALF && serve_now() - st->pinged > 0.5) {
                /* an SSE comment, which clients skip: a peer that closed
                 * both ends answers it with a reset, seen as PEER_GONE */
                kvb_str_puts(&st->out, ": keep-alive\n\n");
                st->pinged = serve_now();
                break;
            }
        }
        pthread_mutex_unlock(&st->srv->mu);
        if (st->out.err) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    const size_t n = st->out.n - st->off < max ? st->out.n - st->off : max;
    memcpy(buf, st->out.p + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    struct stream *st = cls;
    pthread_mutex_lock(&st->srv->mu);
    release_job(st->j);
    pthread_mutex_unlock(&st->srv->mu);
    kvb_str_free(&st->out);
    free(st);
}

/* ---- a request ---- */

static struct guard_conn *guard_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls) {
    struct server *srv = cls;
    struct conn *cc = *con_cls;
    if (!cc) { /* the headers are in; the body is not read yet */
        struct framing f = {0, 0};
        MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
        if (f.content_length > 1)
            return refuse_early(srv, c, method, url, 400, "invalid_request_error", "the request has more than one Content-Length header");
        if (f.content_length && f.transfer_encoding)
            return refuse_early(srv, c, method, url, 400, "invalid_request_error", "the request has both Content-Length and Transfer-Encoding");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > srv->o.max_body) {
            char msg[128];
            snprintf(msg, sizeof msg, "the request body is larger than %zu bytes (--max-body)", srv->o.max_body);
            return refuse_early(srv, c, method, url, 413, "invalid_request_error", msg);
        }
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        if (srv->o.verbose) {
            cc->t0 = serve_now();
            log_copy(cc->method, sizeof cc->method, method);
            log_copy(cc->path, sizeof cc->path, url);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->too_large && cc->body.n + *upload_size <= srv->o.max_body) kvb_str_put(&cc->body, upload_data, *upload_size);
        else {
            cc->too_large = true;
            kvb_str_free(&cc->body);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    guard_answering(srv->guard, guard_of(c), true);
    struct http_req q = {method, url, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
                         cc->body.p ? cc->body.p : "", cc->body.n, cc->too_large || cc->body.err,
                         MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST),
                         MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"),
                         MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key"),
                         MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key")};

    struct http_resp r;
    serve_route(srv, &q, &r);
    cc->status = r.status;
    if (r.job) snprintf(cc->session, sizeof cc->session, "%s", r.job->session_id);
    else if (!strncmp(url, "/v1/sessions/", 13)) { /* GET, DELETE: the id is in the path */
        log_copy(cc->session, sizeof cc->session, url + 13);
        cc->session[strcspn(cc->session, "/?")] = 0;
    }
    if (!r.job) {
        const enum MHD_Result ok = send_resp(c, &r);
        http_resp_free(&r);
        return ok;
    }
    struct job *j = r.job;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const int fd = ci ? ci->connect_fd : -1;
    const bool http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
    bool probed = false;
    pthread_mutex_lock(&srv->mu);
    while (!(j->done || (j->stream && j->started))) {
        wait_100ms(srv, j);
        const enum peer ps = peer_state(fd);
        if (ps == PEER_GONE || (ps == PEER_HALF && probe_half(fd, http11, &probed))) {
            release_job(j);
            pthread_mutex_unlock(&srv->mu);
            http_resp_free(&r);
            return MHD_NO;
        }
    }
    if (j->failed && (!j->stream || !j->started)) {
        job_error_body(j, &r);
        cc->status = r.status;
        job_free(j);
        pthread_mutex_unlock(&srv->mu);
        const enum MHD_Result ok = send_resp(c, &r);
        http_resp_free(&r);
        return ok;
    }
    if (!j->stream) {
        kvb_str_free(&r.body);
        if (j->native) native_response(srv, j, &r.body);
        else openai_response(srv, j, &r.body);
        job_free(j);
        pthread_mutex_unlock(&srv->mu);
        r.status = cc->status = 200;
        r.content_type = "application/json";
        const enum MHD_Result ok = send_resp(c, &r);
        http_resp_free(&r);
        return ok;
    }
    pthread_mutex_unlock(&srv->mu);
    struct stream *st = calloc(1, sizeof *st);
    if (!st) {
        http_resp_free(&r);
        pthread_mutex_lock(&srv->mu);
        release_job(j);
        pthread_mutex_unlock(&srv->mu);
        return MHD_NO;
    }
    st->srv = srv;
    st->j = j;
    st->fd = fd;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, st, stream_free);
    if (!resp) {
        http_resp_free(&r);
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    add_headers(resp, &r);
    http_resp_free(&r);
    cc->status = 200;
    const enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ok;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    struct server *srv = cls;
    guard_answering(srv->guard, guard_of(c), false);
    struct conn *cc = *con_cls;
    if (!cc) return;
    if (srv->o.verbose) log_request(cc->method, cc->path, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? cc->status : 0,
                                    (serve_now() - cc->t0) * 1e3, cc->session);
    kvb_str_free(&cc->body);
    free(cc);
    *con_cls = NULL;
}

static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
    struct server *srv = cls;
    return guard_admit(srv->guard, addr, addrlen) ? MHD_YES : MHD_NO;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    struct server *srv = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ad = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const struct sockaddr *sa = ad ? ad->client_addr : NULL;
        const socklen_t sl = !sa ? 0 : sa->sa_family == AF_INET6 ? (socklen_t)sizeof(struct sockaddr_in6) : (socklen_t)sizeof(struct sockaddr_in);
        *socket_context = guard_open(srv->guard, fd ? fd->connect_fd : -1, sa, sl);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        guard_close(srv->guard, *socket_context);
        *socket_context = NULL;
    }
}

struct MHD_Daemon *http_start(struct server *srv, int max_connections, int max_per_ip, int request_timeout_s, int *port_out, char *err,
                              size_t errlen) {
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", srv->o.port);
    const int g = getaddrinfo(srv->o.host, port, &hints, &ai);
    if (g != 0 || !ai) {
        snprintf(err, errlen, "--host %s: %s", srv->o.host, gai_strerror(g));
        return NULL;
    }
    srv->guard = guard_new(max_connections, max_per_ip, request_timeout_s);
    if (!srv->guard) {
        freeaddrinfo(ai);
        snprintf(err, errlen, "cannot start the connection watchdog");
        return NULL;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* libmicrohttpd's limit above the guard's: the guard refuses at once,
     * where libmicrohttpd would stop accepting and leave clients waiting */
    struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)srv->o.port, on_accept, srv, on_request, srv, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_connections + 16u, MHD_OPTION_CONNECTION_TIMEOUT,
                                            (unsigned)request_timeout_s + 30u, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
                                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) {
        snprintf(err, errlen, "cannot listen on %s:%d (%s)", srv->o.host, srv->o.port, errno ? strerror(errno) : "libmicrohttpd refused");
        guard_free(srv->guard);
        srv->guard = NULL;
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *port_out = di ? di->port : srv->o.port;
    return d;
}

void http_quiesce(struct MHD_Daemon *d) {
    const MHD_socket s = MHD_quiesce_daemon(d);
    if (s != MHD_INVALID_SOCKET) close(s);
}

void http_stop(struct MHD_Daemon *d) { MHD_stop_daemon(d); }

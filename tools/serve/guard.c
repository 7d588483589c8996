/*
 * guard.c — what one connection may hold, so that a few clients cannot
 * keep everyone else out (slowloris: many connections, each sending a
 * header a byte at a time or not at all).
 *
 *  - Counts. At most --max-connections at once and --max-connections-per-ip
 *    from one address. A connection beyond either is refused at accept
 *    (libmicrohttpd's accept policy), closed at once before a thread is
 *    spent on it, rather than left waiting in the listen backlog.
 *    libmicrohttpd's own limit is set above ours, so ours is the one met.
 *  - Deadline. A connection must deliver a whole request, headers and body,
 *    within --request-timeout seconds of opening or of its previous answer
 *    (which also bounds an idle keep-alive connection). A watchdog thread
 *    looks four times a second and shuts down the socket of one that is
 *    late; libmicrohttpd then sees the socket end and closes it. While an
 *    answer is being made (a generation may run for minutes) no deadline
 *    runs.
 *
 * Every record is added when libmicrohttpd starts a connection and removed
 * when it closes it (before it closes the socket), both under the guard's
 * mutex, so the watchdog never shuts down a socket number that has been
 * reused.
 */
#include "serve.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <time.h>

struct guard_conn {
    int fd;
    struct sockaddr_storage addr;
    socklen_t alen;
    double since;   /* opened, or its previous answer ended */
    bool answering; /* a whole request is in: no deadline */
    bool shut;      /* the watchdog shut it down */
    struct guard_conn *prev, *next;
};

struct guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool stop, started;
    int max_total, max_per_addr;
    double timeout;
    int n;
    int64_t refused, timed_out;
    struct guard_conn *head;
};

static bool same_addr(const struct sockaddr *a, socklen_t al, const struct sockaddr_storage *b, socklen_t bl) {
    if (a->sa_family != b->ss_family) return false;
    if (a->sa_family == AF_INET)
        return !memcmp(&((const struct sockaddr_in *)a)->sin_addr, &((const struct sockaddr_in *)b)->sin_addr, sizeof(struct in_addr));
    if (a->sa_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
    return al == bl && !memcmp(a, b, al);
}

bool guard_admit(struct guard *g, const struct sockaddr *addr, unsigned alen) {
    pthread_mutex_lock(&g->mu);
    bool ok = g->n < g->max_total;
    if (ok) {
        int same = 0;
        for (const struct guard_conn *c = g->head; c; c = c->next) same += same_addr(addr, alen, &c->addr, c->alen);
        ok = same < g->max_per_addr;
    }
    if (!ok) g->refused++;
    pthread_mutex_unlock(&g->mu);
    return ok;
}

struct guard_conn *guard_open(struct guard *g, int fd, const struct sockaddr *addr, unsigned alen) {
    struct guard_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    if (addr && alen <= sizeof c->addr) {
        memcpy(&c->addr, addr, alen);
        c->alen = alen;
    }
    c->since = serve_now();
    pthread_mutex_lock(&g->mu);
    c->next = g->head;
    if (g->head) g->head->prev = c;
    g->head = c;
    g->n++;
    pthread_mutex_unlock(&g->mu);
    return c;
}

void guard_close(struct guard *g, struct guard_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (c->prev) c->prev->next = c->next;
    else g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    g->n--;
    pthread_mutex_unlock(&g->mu);
    free(c);
}

void guard_answering(struct guard *g, struct guard_conn *c, bool on) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->answering = on;
    if (!on) c->since = serve_now();
    pthread_mutex_unlock(&g->mu);
}

int guard_answering_count(struct guard *g) {
    int n = 0;
    pthread_mutex_lock(&g->mu);
    for (struct guard_conn *c = g->head; c; c = c->next) n += c->answering;
    pthread_mutex_unlock(&g->mu);
    return n;
}

static void *watchdog(void *arg) {
    struct guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        const double now = serve_now();
        for (struct guard_conn *c = g->head; c; c = c->next)
            if (!c->answering && !c->shut && now - c->since > g->timeout) {
                shutdown(c->fd, SHUT_RDWR);
                c->shut = true;
                g->timed_out++;
            }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

struct guard *guard_new(int max_total, int max_per_addr, double timeout_s) {
    struct guard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->max_total = max_total;
    g->max_per_addr = max_per_addr;
    g->timeout = timeout_s;
    if (pthread_create(&g->th, NULL, watchdog, g)) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return NULL;
    }
    g->started = true;
    return g;
}

void guard_counts(struct guard *g, int64_t *open, int64_t *refused, int64_t *timed_out) {
    pthread_mutex_lock(&g->mu);
    *open = g->n;
    *refused = g->refused;
    *timed_out = g->timed_out;
    pthread_mutex_unlock(&g->mu);
}

/* After the daemon has stopped (every connection closed). */
void guard_free(struct guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->started) pthread_join(g->th, NULL);
    while (g->head) guard_close(g, g->head);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/*
 * store_redis.c — sessions in Redis (`--sessions redis://HOST:PORT`), so
 * replicas behind a load balancer share them: key "kvbound:session:ID"
 * holds the blob, written by one SET (atomic). The connection is
 * re-established once when a command fails.
 */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KVB_HAVE_HIREDIS
#include <hiredis/hiredis.h>

struct redis_store {
    struct store base;
    redisContext *c;
    char host[256];
    int port;
};

static bool reconnect(struct redis_store *s) {
    if (s->c) redisFree(s->c);
    struct timeval tv = {5, 0};
    s->c = redisConnectWithTimeout(s->host, s->port, tv);
    if (!s->c || s->c->err) {
        snprintf(s->base.error, sizeof s->base.error, "redis %.100s:%d: %.100s", s->host, s->port, s->c ? s->c->errstr : "cannot connect");
        return false;
    }
    redisSetTimeout(s->c, tv);
    return true;
}

static redisReply *command(struct redis_store *s, int argc, const char **argv, const size_t *lens) {
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!s->c && !reconnect(s)) return NULL;
        redisReply *r = redisCommandArgv(s->c, argc, argv, lens);
        if (r) return r;
        snprintf(s->base.error, sizeof s->base.error, "redis: %s", s->c->errstr);
        redisFree(s->c);
        s->c = NULL;
    }
    return NULL;
}

static void key_of(const char *id, char *k, size_t n) { snprintf(k, n, "kvbound:session:%s", id); }

static int put(struct store *st, const char *id, const void *buf, size_t len) {
    struct redis_store *s = (struct redis_store *)st;
    char k[128];
    key_of(id, k, sizeof k);
    const char *argv[] = {"SET", k, buf};
    const size_t lens[] = {3, strlen(k), len};
    redisReply *r = command(s, 3, argv, lens);
    if (!r) return -1;
    const int ok = r->type == REDIS_REPLY_STATUS;
    if (!ok) snprintf(st->error, sizeof st->error, "redis SET: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

static int get(struct store *st, const char *id, void **buf, size_t *len) {
    struct redis_store *s = (struct redis_store *)st;
    char k[128];
    key_of(id, k, sizeof k);
    const char *argv[] = {"GET", k};
    const size_t lens[] = {3, strlen(k)};
    *buf = NULL;
    *len = 0;
    redisReply *r = command(s, 2, argv, lens);
    if (!r) return -1;
    int res;
    if (r->type == REDIS_REPLY_NIL) res = 1;
    else if (r->type == REDIS_REPLY_STRING) {
        *buf = malloc(r->len ? r->len : 1);
        if (*buf) {
            memcpy(*buf, r->str, r->len);
            *len = r->len;
            res = 0;
        } else {
            snprintf(st->error, sizeof st->error, "out of memory");
            res = -1;
        }
    } else {
        snprintf(st->error, sizeof st->error, "redis GET: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        res = -1;
    }
    freeReplyObject(r);
    return res;
}

static int del(struct store *st, const char *id) {
    struct redis_store *s = (struct redis_store *)st;
    char k[128];
    key_of(id, k, sizeof k);
    const char *argv[] = {"DEL", k};
    const size_t lens[] = {3, strlen(k)};
    redisReply *r = command(s, 2, argv, lens);
    if (!r) return -1;
    const int res = r->type == REDIS_REPLY_INTEGER ? (r->integer > 0 ? 0 : 1) : -1;
    freeReplyObject(r);
    return res;
}

/* Keys under kvbound:session:, counted with SCAN (never KEYS). */
static int64_t count(struct store *st) {
    struct redis_store *s = (struct redis_store *)st;
    char cursor[32] = "0";
    int64_t n = 0;
    for (int rounds = 0; rounds < 10000; rounds++) {
        const char *argv[] = {"SCAN", cursor, "MATCH", "kvbound:session:*", "COUNT", "1000"};
        size_t lens[6];
        for (int i = 0; i < 6; i++) lens[i] = strlen(argv[i]);
        redisReply *r = command(s, 6, argv, lens);
        if (!r) return -1;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING) { freeReplyObject(r); return -1; }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        n += (int64_t)r->element[1]->elements;
        freeReplyObject(r);
        if (!strcmp(cursor, "0")) break;
    }
    return n;
}

static void close_store(struct store *st) {
    struct redis_store *s = (struct redis_store *)st;
    if (s->c) redisFree(s->c);
    free(s);
}

struct store *store_redis_open(const char *url, char *err, size_t errlen) {
    const char *hp = url + 8;
    const char *colon = strrchr(hp, ':');
    struct redis_store *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, errlen, "out of memory"); return NULL; }
    size_t hl = colon ? (size_t)(colon - hp) : strlen(hp);
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 6379;
    if (!hl || hl >= sizeof s->host || port < 1 || port > 65535 || (colon && (!end || *end))) {
        snprintf(err, errlen, "--sessions %s: want redis://HOST:PORT", url);
        free(s);
        return NULL;
    }
    memcpy(s->host, hp, hl);
    s->port = (int)port;
    if (!reconnect(s)) {
        snprintf(err, errlen, "--sessions %.100s: %.200s", url, s->base.error);
        if (s->c) redisFree(s->c);
        free(s);
        return NULL;
    }
    s->base.kind = "redis";
    s->base.shared = true;
    s->base.put = put;
    s->base.get = get;
    s->base.del = del;
    s->base.count = count;
    s->base.close = close_store;
    return &s->base;
}
#else
struct store *store_redis_open(const char *url, char *err, size_t errlen) {
    snprintf(err, errlen, "--sessions %s: this kvbound was built without Redis (install libhiredis-dev and rebuild)", url);
    return NULL;
}
#endif

/*
 * store_redis.c — sessions in Redis (`--sessions redis://HOST:PORT`), so
 * replicas behind a load balancer share them: key "kvbound:session:ID" is
 * a hash of the blob ("image") and its version ("v"), written by one Lua
 * script (atomic in Redis) only when the version is still the one read,
 * which also keeps the set "kvbound:sessions" of stored ids that /metrics
 * counts. A key written before versions (a plain string) reads as version
 * 0 and is replaced by a hash at its next write. The connection is
 * re-established once when a command fails. A write whose request went
 * out and whose reply was lost, and that the one retry could not send
 * again (Redis unreachable), is STORE_UNKNOWN: the script may have run.
 * The health probe SETs "kvbound:probe".
 *
 * Checkpoints (implicit sessions): "kvbound:ckpt:KEY" a hash of the blob
 * ("image") and its size ("bytes"); the sorted set "kvbound:ckpts" their
 * keys by last use (Redis's own clock, TIME, so every replica agrees); the
 * counter "kvbound:ckpt_bytes" their bytes, the hash "kvbound:ckpt_size" each
 * one's (apart from its record, which a Redis under maxmemory may evict:
 * the counter stays true). One script stores one and
 * trims the rest (unused past the TTL, then least recently used past the
 * count or bytes); another reads one and marks it used. A completion's
 * checkpoint also has "grp" and "ntok" in its hash and its key in the
 * sorted set "kvbound:ckgrp:GRP" (by last use), which lists its group.
 */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef KVB_HAVE_HIREDIS
#include <hiredis/hiredis.h>

struct redis_store {
    struct store base;
    redisContext *c;
    char host[256];
    int port;
    unsigned long long writes; /* this store's writes, for their tokens */
    char nonce[40];            /* this store's, random: tokens of replicas on other machines differ */
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

/* *sent (may be NULL): a request went out whose reply was lost, so it may
 * have run. */
static redisReply *command_sent(struct redis_store *s, int argc, const char **argv, const size_t *lens, bool *sent) {
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!s->c && !reconnect(s)) return NULL;
        if (sent) *sent = true;
        redisReply *r = redisCommandArgv(s->c, argc, argv, lens);
        if (r) return r;
        snprintf(s->base.error, sizeof s->base.error, "redis: %s", s->c->errstr);
        redisFree(s->c);
        s->c = NULL;
    }
    return NULL;
}

static redisReply *command(struct redis_store *s, int argc, const char **argv, const size_t *lens) { return command_sent(s, argc, argv, lens, NULL); }

static void key_of(const char *id, char *k, size_t n) { snprintf(k, n, "kvbound:session:%s", id); }
#define INDEX_KEY "kvbound:sessions" /* a set of the stored ids: counted with SCARD */

/* The conditional write, atomic in Redis: KEYS[1] the session, KEYS[2] the
 * index; ARGV[1] the version read (-1: none), ARGV[2] the blob, ARGV[3]
 * the id, ARGV[4] this write's token. A session written before versions
 * (a plain string) is version 0. Returns {1, new version} or {0, the
 * version found, the token of the write that made it}: a write whose reply
 * was lost, sent again by command(), finds its own token and so knows it
 * was made. */
static const char PUT_SCRIPT[] =
    "local t = redis.call('TYPE', KEYS[1]).ok\n"
    "local cur = -1\n"
    "if t == 'hash' then cur = tonumber(redis.call('HGET', KEYS[1], 'v')) or 0 elseif t == 'string' then cur = 0 end\n"
    "if cur ~= tonumber(ARGV[1]) then return {0, cur, (t == 'hash' and redis.call('HGET', KEYS[1], 'w')) or ''} end\n"
    "if t == 'string' then redis.call('DEL', KEYS[1]) end\n"
    "local nv = cur < 0 and 1 or cur + 1\n"
    "redis.call('HSET', KEYS[1], 'v', nv, 'image', ARGV[2], 'w', ARGV[4])\n"
    "redis.call('SADD', KEYS[2], ARGV[3])\n"
    "return {1, nv}\n";

static int put(struct store *st, const char *id, const void *buf, size_t len, int64_t expect, int64_t *version) {
    struct redis_store *s = (struct redis_store *)st;
    char k[128], ev[32], token[64];
    key_of(id, k, sizeof k);
    snprintf(ev, sizeof ev, "%lld", (long long)expect);
    snprintf(token, sizeof token, "%s-%llu", s->nonce, ++s->writes);
    const char *argv[] = {"EVAL", PUT_SCRIPT, "2", k, INDEX_KEY, ev, buf, id, token};
    const size_t lens[] = {4, strlen(PUT_SCRIPT), 1, strlen(k), strlen(INDEX_KEY), strlen(ev), len, strlen(id), strlen(token)};
    bool sent = false;
    redisReply *r = command_sent(s, 9, argv, lens, &sent);
    if (!r) {
        if (!sent) return STORE_ERROR;
        snprintf(st->error, sizeof st->error, "redis %.60s:%d: the write's reply was lost, and it could not be checked: %.80s", s->host,
                 s->port, s->c ? s->c->errstr : "cannot connect");
        return STORE_UNKNOWN;
    }
    int res = STORE_ERROR;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
        r->element[1]->type == REDIS_REPLY_INTEGER) {
        const bool ours = r->elements == 3 && r->element[2]->type == REDIS_REPLY_STRING && !strcmp(r->element[2]->str, token);
        if (r->element[0]->integer == 1 || ours) {
            *version = r->element[1]->integer;
            res = STORE_OK;
        } else {
            snprintf(st->error, sizeof st->error, "session '%s' is at version %lld, not the %lld read", id, (long long)r->element[1]->integer,
                     (long long)expect);
            res = STORE_CONFLICT;
        }
    } else {
        snprintf(st->error, sizeof st->error, "redis write: %.200s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    freeReplyObject(r);
    return res;
}

/* Copies a reply's string into *buf. */
static int take_string(struct store *st, const redisReply *r, void **buf, size_t *len) {
    *buf = malloc(r->len ? r->len : 1);
    if (!*buf) {
        snprintf(st->error, sizeof st->error, "out of memory for a %zu-byte session", (size_t)r->len);
        return STORE_ERROR;
    }
    memcpy(*buf, r->str, r->len);
    *len = r->len;
    return STORE_OK;
}

static int get(struct store *st, const char *id, void **buf, size_t *len, int64_t *version) {
    struct redis_store *s = (struct redis_store *)st;
    char k[128];
    key_of(id, k, sizeof k);
    const char *argv[] = {"HMGET", k, "v", "image"};
    const size_t lens[] = {5, strlen(k), 1, 5};
    *buf = NULL;
    *len = 0;
    redisReply *r = command(s, 4, argv, lens);
    if (!r) return STORE_ERROR;
    int res = STORE_ERROR;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
        const redisReply *v = r->element[0], *img = r->element[1];
        if (v->type == REDIS_REPLY_NIL && img->type == REDIS_REPLY_NIL) res = STORE_NOT_FOUND;
        else if (v->type == REDIS_REPLY_STRING && img->type == REDIS_REPLY_STRING) {
            *version = strtoll(v->str, NULL, 10);
            res = take_string(st, img, buf, len);
        } else snprintf(st->error, sizeof st->error, "redis: %s is not a kvbound session", k);
    } else if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "WRONGTYPE", 9)) {
        /* written before versions: a plain string, version 0 */
        freeReplyObject(r);
        const char *gargv[] = {"GET", k};
        const size_t glens[] = {3, strlen(k)};
        r = command(s, 2, gargv, glens);
        if (!r) return STORE_ERROR;
        if (r->type == REDIS_REPLY_STRING) {
            *version = 0;
            res = take_string(st, r, buf, len);
        } else snprintf(st->error, sizeof st->error, "redis: %s is not a kvbound session", k);
    } else {
        snprintf(st->error, sizeof st->error, "redis read: %.200s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    freeReplyObject(r);
    return res;
}

static const char DEL_SCRIPT[] = "redis.call('SREM', KEYS[2], ARGV[1])\nreturn redis.call('DEL', KEYS[1])\n";

static int del(struct store *st, const char *id) {
    struct redis_store *s = (struct redis_store *)st;
    char k[128];
    key_of(id, k, sizeof k);
    const char *argv[] = {"EVAL", DEL_SCRIPT, "2", k, INDEX_KEY, id};
    const size_t lens[] = {4, strlen(DEL_SCRIPT), 1, strlen(k), strlen(INDEX_KEY), strlen(id)};
    redisReply *r = command(s, 6, argv, lens);
    if (!r) return STORE_ERROR;
    int res = STORE_ERROR;
    if (r->type == REDIS_REPLY_INTEGER) res = r->integer > 0 ? STORE_OK : STORE_NOT_FOUND;
    else snprintf(st->error, sizeof st->error, "redis delete: %.200s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return res;
}

/* The index's size: one O(1) SCARD, never a scan of the keyspace. */
static int64_t count(struct store *st) {
    struct redis_store *s = (struct redis_store *)st;
    const char *argv[] = {"SCARD", INDEX_KEY};
    const size_t lens[] = {5, strlen(INDEX_KEY)};
    redisReply *r = command(s, 2, argv, lens);
    if (!r) return -1;
    const int64_t n = r->type == REDIS_REPLY_INTEGER ? (int64_t)r->integer : -1;
    freeReplyObject(r);
    return n;
}

/* ---- checkpoints ---- */
#define CKPT_PREFIX "kvbound:ckpt:"
#define CKPT_SET "kvbound:ckpts"
#define CKPT_BYTES "kvbound:ckpt_bytes"
#define CKPT_GROUP "kvbound:ckgrp:"
#define CKPT_NOW "local t = redis.call('TIME')\nlocal now = tonumber(t[1]) + tonumber(t[2]) / 1e6\n"
#define CKPT_SIZES "kvbound:ckpt_size" /* each checkpoint's bytes, apart from its record (which Redis may evict) */
#define CKPT_DROP                                                                                                                          \
    "local function drop(m)\n"                                                                                                              \
    "  local b = tonumber(redis.call('HGET', '" CKPT_SIZES "', m) or '0')\n"                                                               \
    "  local g = redis.call('HGET', '" CKPT_PREFIX "' .. m, 'grp')\n"                                                                      \
    "  if g then redis.call('ZREM', '" CKPT_GROUP "' .. g, m) end\n"                                                                       \
    "  redis.call('DEL', '" CKPT_PREFIX "' .. m)\n"                                                                                         \
    "  redis.call('HDEL', '" CKPT_SIZES "', m)\n"                                                                                           \
    "  redis.call('ZREM', '" CKPT_SET "', m)\n"                                                                                             \
    "  local total = redis.call('INCRBY', '" CKPT_BYTES "', -b)\n"                                                                          \
    "  if total < 0 or redis.call('ZCARD', '" CKPT_SET "') == 0 then redis.call('SET', '" CKPT_BYTES "', 0) total = 0 end\n"              \
    "  return total\n"                                                                                                                      \
    "end\n"
/* KEYS: the record, the set, the byte counter; ARGV: key, image, ttl, max count, max bytes, group ("" none), ntok. The one
 * written is never trimmed by its own write (the server sends none larger than max bytes). */
static const char CPUT_SCRIPT[] = CKPT_NOW CKPT_DROP
    "local old = tonumber(redis.call('HGET', '" CKPT_SIZES "', ARGV[1]) or '0')\n"
    "redis.call('HSET', KEYS[1], 'image', ARGV[2])\n"
    "redis.call('HSET', '" CKPT_SIZES "', ARGV[1], #ARGV[2])\n"
    "if ARGV[6] ~= '' then\n"
    "  redis.call('HSET', KEYS[1], 'grp', ARGV[6], 'ntok', ARGV[7])\n"
    "  redis.call('ZADD', '" CKPT_GROUP "' .. ARGV[6], now, ARGV[1])\n"
    "end\n"
    "redis.call('ZADD', KEYS[2], now, ARGV[1])\n"
    "local total = redis.call('INCRBY', KEYS[3], #ARGV[2] - old)\n"
    "for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - tonumber(ARGV[3])))) do\n"
    "  if m ~= ARGV[1] then total = drop(m) end\n"
    "end\n"
    "while redis.call('ZCARD', KEYS[2]) > tonumber(ARGV[4]) or total > tonumber(ARGV[5]) do\n"
    "  local m = nil\n"
    "  for _, c in ipairs(redis.call('ZRANGE', KEYS[2], 0, 1)) do if c ~= ARGV[1] and not m then m = c end end\n"
    "  if not m then break end\n"
    "  total = drop(m)\n"
    "end\n"
    "return {redis.call('ZCARD', KEYS[2]), total}\n";
/* KEYS: the record, the set; ARGV: key, ttl. A record Redis evicted is dropped (its bytes counted off). */
static const char CGET_SCRIPT[] = CKPT_NOW CKPT_DROP
    "local s = redis.call('ZSCORE', KEYS[2], ARGV[1])\n"
    "if not s or tonumber(s) < now - tonumber(ARGV[2]) then return false end\n"
    "local img = redis.call('HGET', KEYS[1], 'image')\n"
    "if not img then drop(ARGV[1]) return false end\n"
    "redis.call('ZADD', KEYS[2], now, ARGV[1])\n"
    "local g = redis.call('HGET', KEYS[1], 'grp')\n"
    "if g then redis.call('ZADD', '" CKPT_GROUP "' .. g, now, ARGV[1]) end\n"
    "return img\n";
/* KEYS: the group's set; ARGV: max. {key, ntok, key, ntok, ...}, the most recently used first */
static const char CLIST_SCRIPT[] =
    "local out = {}\n"
    "for _, m in ipairs(redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)) do\n"
    "  local n = redis.call('HGET', '" CKPT_PREFIX "' .. m, 'ntok')\n"
    "  if n then table.insert(out, m) table.insert(out, n) else redis.call('ZREM', KEYS[1], m) end\n"
    "end\n"
    "return out\n";
/* KEYS: the record, the set, the byte counter; ARGV: key */
static const char CDEL_SCRIPT[] = CKPT_DROP "local had = redis.call('EXISTS', KEYS[1])\ndrop(ARGV[1])\nreturn had\n";

static int cput(struct store *st, const char *key, const char *grp, int32_t ntok, const void *buf, size_t len, const struct ckpt_limits *l,
                int64_t *count, int64_t *bytes) {
    struct redis_store *s = (struct redis_store *)st;
    char k[128], ttl[32], mc[32], mb[32], nt[16];
    snprintf(nt, sizeof nt, "%d", (int)ntok);
    if (!grp) grp = "";
    snprintf(k, sizeof k, CKPT_PREFIX "%s", key);
    snprintf(ttl, sizeof ttl, "%lld", (long long)l->ttl_s);
    snprintf(mc, sizeof mc, "%lld", (long long)l->max_count);
    snprintf(mb, sizeof mb, "%lld", (long long)l->max_bytes);
    const char *argv[] = {"EVAL", CPUT_SCRIPT, "3", k, CKPT_SET, CKPT_BYTES, key, buf, ttl, mc, mb, grp, nt};
    const size_t lens[] = {4, strlen(CPUT_SCRIPT), 1, strlen(k), strlen(CKPT_SET), strlen(CKPT_BYTES), strlen(key), len, strlen(ttl), strlen(mc), strlen(mb),
                           strlen(grp), strlen(nt)};
    redisReply *r = command(s, 13, argv, lens); /* sent twice at worst: the same record, the same trim */
    if (!r) return STORE_ERROR;
    int res = STORE_ERROR;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_INTEGER) {
        *count = r->element[0]->integer;
        *bytes = r->element[1]->integer;
        res = STORE_OK;
    } else {
        snprintf(st->error, sizeof st->error, "redis checkpoint write: %.200s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    freeReplyObject(r);
    return res;
}

static int cget(struct store *st, const char *key, int64_t ttl_s, void **buf, size_t *len) {
    struct redis_store *s = (struct redis_store *)st;
    char k[128], ttl[32];
    snprintf(k, sizeof k, CKPT_PREFIX "%s", key);
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_s);
    const char *argv[] = {"EVAL", CGET_SCRIPT, "2", k, CKPT_SET, key, ttl};
    const size_t lens[] = {4, strlen(CGET_SCRIPT), 1, strlen(k), strlen(CKPT_SET), strlen(key), strlen(ttl)};
    *buf = NULL;
    *len = 0;
    redisReply *r = command(s, 7, argv, lens);
    if (!r) return STORE_ERROR;
    int res = STORE_ERROR;
    if (r->type == REDIS_REPLY_NIL) res = STORE_NOT_FOUND;
    else if (r->type == REDIS_REPLY_STRING) res = take_string(st, r, buf, len);
    else snprintf(st->error, sizeof st->error, "redis checkpoint read: %.200s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return res;
}

static int clist(struct store *st, const char *grp, int max, char (*keys)[SERVE_CKEY], int32_t *ntok, int *n) {
    struct redis_store *s = (struct redis_store *)st;
    char g[128], mx[16];
    snprintf(g, sizeof g, CKPT_GROUP "%s", grp);
    snprintf(mx, sizeof mx, "%d", max);
    const char *argv[] = {"EVAL", CLIST_SCRIPT, "1", g, mx};
    const size_t lens[] = {4, strlen(CLIST_SCRIPT), 1, strlen(g), strlen(mx)};
    *n = 0;
    redisReply *r = command(s, 5, argv, lens);
    if (!r) return STORE_ERROR;
    int res = STORE_OK;
    if (r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i + 1 < r->elements && *n < max; i += 2) {
            const redisReply *k = r->element[i], *v = r->element[i + 1];
            if (k->type != REDIS_REPLY_STRING || k->len != SERVE_CKEY - 1 || v->type != REDIS_REPLY_STRING) continue;
            memcpy(keys[*n], k->str, SERVE_CKEY);
            ntok[(*n)++] = (int32_t)strtol(v->str, NULL, 10);
        }
    } else {
        snprintf(st->error, sizeof st->error, "redis checkpoint list: %.200s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        res = STORE_ERROR;
    }
    freeReplyObject(r);
    return res;
}

static int cdel(struct store *st, const char *key) {
    struct redis_store *s = (struct redis_store *)st;
    char k[128];
    snprintf(k, sizeof k, CKPT_PREFIX "%s", key);
    const char *argv[] = {"EVAL", CDEL_SCRIPT, "3", k, CKPT_SET, CKPT_BYTES, key};
    const size_t lens[] = {4, strlen(CDEL_SCRIPT), 1, strlen(k), strlen(CKPT_SET), strlen(CKPT_BYTES), strlen(key)};
    redisReply *r = command(s, 7, argv, lens);
    if (!r) return STORE_ERROR;
    int res = STORE_ERROR;
    if (r->type == REDIS_REPLY_INTEGER) res = r->integer > 0 ? STORE_OK : STORE_NOT_FOUND;
    else snprintf(st->error, sizeof st->error, "redis checkpoint delete: %.200s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return res;
}

static int cstats(struct store *st, int64_t *count, int64_t *bytes) {
    struct redis_store *s = (struct redis_store *)st;
    const char *a1[] = {"ZCARD", CKPT_SET}, *a2[] = {"GET", CKPT_BYTES};
    const size_t l1[] = {5, strlen(CKPT_SET)}, l2[] = {3, strlen(CKPT_BYTES)};
    redisReply *r = command(s, 2, a1, l1);
    if (!r) return STORE_ERROR;
    const bool ok = r->type == REDIS_REPLY_INTEGER;
    *count = ok ? (int64_t)r->integer : -1;
    freeReplyObject(r);
    if (!ok || !(r = command(s, 2, a2, l2))) return STORE_ERROR;
    *bytes = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    return STORE_OK;
}

static int probe(struct store *st) {
    struct redis_store *s = (struct redis_store *)st;
    const char *argv[] = {"SET", "kvbound:probe", "1"};
    const size_t lens[] = {3, 13, 1};
    redisReply *r = command(s, 3, argv, lens);
    if (!r) return STORE_ERROR;
    const int res = r->type == REDIS_REPLY_STATUS ? STORE_OK : STORE_ERROR;
    if (res != STORE_OK) snprintf(st->error, sizeof st->error, "redis write: %.200s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return res;
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
    unsigned char rnd[8] = {0};
    FILE *ur = fopen("/dev/urandom", "rb");
    const bool got = ur && fread(rnd, 1, sizeof rnd, ur) == sizeof rnd;
    if (ur) fclose(ur);
    unsigned long long n = 0;
    for (int i = 0; i < 8; i++) n = n << 8 | rnd[i];
    if (!got) n = (unsigned long long)time(NULL) * 1000003ull;
    snprintf(s->nonce, sizeof s->nonce, "%llx.%ld", n, (long)getpid());
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
    s->base.cput = cput;
    s->base.cget = cget;
    s->base.clist = clist;
    s->base.cdel = cdel;
    s->base.cstats = cstats;
    s->base.probe = probe;
    s->base.close = close_store;
    return &s->base;
}
#else
struct store *store_redis_open(const char *url, char *err, size_t errlen) {
    snprintf(err, errlen, "--sessions %s: this kvbound was built without Redis (install libhiredis-dev and rebuild)", url);
    return NULL;
}
#endif

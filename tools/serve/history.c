/*
 * history.c — what a session remembers of its conversation besides the
 * cache, kept in its stored blob's header (session.c) so that every
 * replica sees it: a digest of each message it has read and each answer
 * it gave, the tools of its first turn as one digest, and the last answers
 * of turns sent with an Idempotency-Key ("answers": key and whole response
 * body, the HISTORY_ANSWERS newest).
 *
 * A message's digest is "HASH ROLE": a 64-bit hash (16 hex digits) of the
 * message reduced to its role, its content with the whitespace at its ends
 * taken off, and its tool calls' names and arguments (parsed), hashed as
 * JSON whose object keys are taken in sorted order (so key order does not
 * matter, as it did not when whole messages were compared), then its role
 * (at most HISTORY_ROLE_MAX bytes) for the 409's message. The tools' digest
 * is the hash alone. The header stays bounded however long a session runs:
 * "msg_count" (every message the session read or wrote), "msg_head" (the
 * digests of its first HISTORY_HEAD messages: its system prompt and first
 * exchange) and "msg_tail" (of its last HISTORY_KEPT); a message between
 * the two is no longer held and is not checked.
 *
 * A later turn is checked against it: the messages a request sends before
 * its new ones (all up to its last assistant message; without one, its
 * leading system messages) must be the session's, one for one (all of
 * them, or its last ones, ending with its last answer), and tools sent
 * must be its first turn's; else 409 naming the first message that
 * differs. A request that sends only its new messages (the short form)
 * passes. A retry whose key the session holds gets that turn's answer
 * again instead of a second turn.
 *
 * Per turn, the request's messages are parsed and hashed once
 * (history_begin, at admission, which also leaves the header that the turn
 * will store, less its answer, on the job) and the answer once
 * (history_next); the stored header is parsed once by each.
 *
 * The text is a JSON object; one without "msg_count" (a session stored
 * before history was kept, one that took a completion) is unknown and
 * checks nothing. A header stored by kvbound before the digests (whole
 * messages in "history", the tools in "tools") is turned into digests when
 * it is read (history_from_meta), so such a session is still checked.
 */
#include "sched_impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HISTORY_ANSWERS 4
#define HISTORY_HEAD 8     /* the first messages, always held */
#define HISTORY_KEPT 256   /* the last messages held */
#define HISTORY_ROLE_MAX 16
#define DIGEST_CAP (16 + 1 + HISTORY_ROLE_MAX + 1)

typedef char digest[DIGEST_CAP];

static const char *str_of(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- hashing: FNV-1a over a length-prefixed walk of the JSON, mixed at the end ---- */

/* The canonical bytes of a JSON value, which the digests hash: each value
 * a type byte, strings and containers length-prefixed (u64, little
 * endian), numbers as doubles (-0 as 0), object members in sorted key
 * order; false: out of memory. */
static void put_u64(struct kvb_str *b, uint64_t v) {
    char c[8];
    for (int i = 0; i < 8; i++) c[i] = (char)(unsigned char)(v >> (8 * i));
    kvb_str_put(b, c, 8);
}

static void put_lstr(struct kvb_str *b, const char *s) {
    const size_t n = strlen(s);
    put_u64(b, n);
    kvb_str_put(b, s, n);
}

static int by_key(const void *a, const void *b) {
    const char *x = (*(const cJSON *const *)a)->string, *y = (*(const cJSON *const *)b)->string;
    return strcmp(x ? x : "", y ? y : "");
}

static bool canon_json(struct kvb_str *b, const cJSON *v) {
    if (cJSON_IsString(v)) {
        kvb_str_putc(b, 's');
        put_lstr(b, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble == 0 ? 0.0 : v->valuedouble; /* -0 is 0 */
        uint64_t bits;
        memcpy(&bits, &d, 8);
        kvb_str_putc(b, 'n');
        put_u64(b, bits);
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        const int n = cJSON_GetArraySize(v);
        kvb_str_putc(b, cJSON_IsArray(v) ? 'a' : 'o');
        put_u64(b, (uint64_t)n);
        const cJSON **kids = n ? malloc(sizeof *kids * (size_t)n) : NULL;
        if (n && !kids) return false;
        int k = 0;
        for (const cJSON *c = v->child; c && k < n; c = c->next) kids[k++] = c;
        if (k > 1 && cJSON_IsObject(v)) qsort(kids, (size_t)k, sizeof *kids, by_key); /* not qsort(NULL, 0): an empty object has no kids */
        bool ok = true;
        for (int i = 0; ok && i < k; i++) {
            if (cJSON_IsObject(v)) put_lstr(b, kids[i]->string ? kids[i]->string : "");
            ok = canon_json(b, kids[i]);
        }
        free(kids);
        return ok;
    } else {
        kvb_str_putc(b, cJSON_IsTrue(v) ? 't' : cJSON_IsFalse(v) ? 'f' : '0');
    }
    return !kvb_str_error(b);
}

/* the hash of v (FNV-1a over its canonical bytes, mixed at the end) as 16 hex digits into out (17 bytes); false: out of memory */
static bool hash_json(const cJSON *v, char *out) {
    struct kvb_str b = {0};
    const bool ok = canon_json(&b, v);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; ok && i < b.n; i++) h = (h ^ (unsigned char)b.p[i]) * 0x100000001b3ull;
    kvb_str_free(&b);
    if (!ok) return false;
    h ^= h >> 30; /* splitmix64's finalizer */
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    return true;
}

/* One message as the session knew it (NULL: out of memory). */
static cJSON *reduce(const cJSON *m) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const char *role = str_of(m, "role"), *content = str_of(m, "content");
    cJSON_AddStringToObject(o, "role", role ? role : "");
    const char *a = content ? content : "";
    size_t n = strlen(a);
    while (n && strchr(" \t\r\n", a[0])) { a++; n--; }
    while (n && strchr(" \t\r\n", a[n - 1])) n--;
    char *t = malloc(n + 1);
    if (!t) { cJSON_Delete(o); return NULL; }
    memcpy(t, a, n);
    t[n] = 0;
    const bool added = cJSON_AddStringToObject(o, "content", t) != NULL;
    free(t);
    if (!added) { cJSON_Delete(o); return NULL; }
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *c;
    if (cJSON_GetArraySize(calls) > 0) {
        cJSON *out = cJSON_AddArrayToObject(o, "tool_calls");
        cJSON_ArrayForEach(c, calls) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            cJSON *call = cJSON_CreateObject();
            const char *name = str_of(fn, "name");
            cJSON_AddStringToObject(call, "name", name ? name : "");
            cJSON *parsed = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : cJSON_Duplicate(args, true);
            cJSON_AddItemToObject(call, "arguments", parsed ? parsed : cJSON_CreateNull());
            cJSON_AddItemToArray(out, call);
        }
    }
    return o;
}

/* The digest of a message as reduce() gives it (or as a header before the
 * digests stored it); false: out of memory. */
static bool digest_of_reduced(const cJSON *r, char *out) {
    if (!hash_json(r, out)) return false;
    const char *role = str_of(r, "role");
    snprintf(out + 16, DIGEST_CAP - 16, " %.*s", HISTORY_ROLE_MAX, role ? role : "");
    return true;
}

bool history_canon_message(const cJSON *m, struct kvb_str *out) {
    cJSON *r = reduce(m);
    const bool ok = r && canon_json(out, r);
    cJSON_Delete(r);
    return ok;
}

bool history_canon_json(const cJSON *v, struct kvb_str *out) { return canon_json(out, v); }

static bool digest_of_message(const cJSON *m, char *out) {
    cJSON *r = reduce(m);
    const bool ok = r && digest_of_reduced(r, out);
    cJSON_Delete(r);
    return ok;
}

/* the role a stored digest names ("?" when it names none) */
static const char *digest_role(const char *d) {
    const char *sp = d ? strchr(d, ' ') : NULL;
    return sp && sp[1] ? sp + 1 : "?";
}

static bool is_system(const cJSON *m) {
    const char *r = str_of(m, "role");
    return r && (!strcmp(r, "system") || !strcmp(r, "developer"));
}

/* How many of the request's messages are history: up to its last assistant
 * message, else its leading system messages. */
static int sent_history(const cJSON *msgs) {
    const int n = cJSON_GetArraySize(msgs);
    int last_assistant = -1, lead = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *m = cJSON_GetArrayItem(msgs, i);
        const char *r = str_of(m, "role");
        if (r && !strcmp(r, "assistant")) last_assistant = i;
    }
    if (last_assistant >= 0) return last_assistant + 1;
    while (lead < n && is_system(cJSON_GetArrayItem(msgs, lead))) lead++;
    return lead;
}

/* ---- the stored digests ---- */

/* What a header holds of the conversation: count messages, the digests of
 * the first n_head and of the last n_tail (within the header's JSON). */
struct held {
    int64_t count;
    const cJSON *head, *tail;
    int n_head, n_tail;
};

static bool digests_ok(const cJSON *a, int max) {
    const cJSON *d;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > max) return false;
    cJSON_ArrayForEach(d, a) if (!cJSON_IsString(d) || strlen(d->valuestring) >= DIGEST_CAP) return false;
    return true;
}

/* false: o holds no history (unknown), or one that is not well formed */
static bool held_of(const cJSON *o, struct held *h) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "msg_count");
    h->head = cJSON_GetObjectItemCaseSensitive(o, "msg_head");
    h->tail = cJSON_GetObjectItemCaseSensitive(o, "msg_tail");
    if (!cJSON_IsNumber(c) || !(c->valuedouble >= 0 && c->valuedouble <= 9007199254740992.0) || c->valuedouble != floor(c->valuedouble) ||
        !digests_ok(h->head, HISTORY_HEAD) || !digests_ok(h->tail, HISTORY_KEPT))
        return false;
    h->count = (int64_t)c->valuedouble;
    h->n_head = cJSON_GetArraySize(h->head);
    h->n_tail = cJSON_GetArraySize(h->tail);
    return h->n_head == (h->count < HISTORY_HEAD ? h->count : HISTORY_HEAD) && h->n_tail == (h->count < HISTORY_KEPT ? h->count : HISTORY_KEPT);
}

/* the digest of the session's message i, or NULL: not held */
static const char *held_digest(const struct held *h, int64_t i) {
    if (i < 0 || i >= h->count) return NULL;
    if (i >= h->count - h->n_tail) return cJSON_GetArrayItem(h->tail, (int)(i - (h->count - h->n_tail)))->valuestring;
    if (i < h->n_head) return cJSON_GetArrayItem(h->head, (int)i)->valuestring;
    return NULL;
}

/* Appends one digest to o's history; false: out of memory. */
static bool held_push(cJSON *o, const char *d) {
    cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "msg_count"), *head = cJSON_GetObjectItemCaseSensitive(o, "msg_head"),
          *tail = cJSON_GetObjectItemCaseSensitive(o, "msg_tail");
    if (cJSON_GetArraySize(head) < HISTORY_HEAD) {
        cJSON *s = cJSON_CreateString(d);
        if (!s) return false;
        cJSON_AddItemToArray(head, s);
    }
    cJSON *s = cJSON_CreateString(d);
    if (!s) return false;
    cJSON_AddItemToArray(tail, s);
    if (cJSON_GetArraySize(tail) > HISTORY_KEPT) cJSON_DeleteItemFromArray(tail, 0);
    cJSON_SetNumberValue(c, c->valuedouble + 1);
    return true;
}

static void held_forget(cJSON *o) {
    static const char *const keys[] = {"msg_count", "msg_head", "msg_tail", "tools_digest"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) cJSON_DeleteItemFromObjectCaseSensitive(o, keys[k]);
}

/* A new, empty history with tools (JSON text, or NULL: none) in o; false: out of memory. */
static bool held_new(cJSON *o, const char *tools_json) {
    held_forget(o);
    char th[17];
    cJSON *t = tools_json ? cJSON_Parse(tools_json) : NULL;
    const bool have = t && hash_json(t, th);
    cJSON_Delete(t);
    return cJSON_AddNumberToObject(o, "msg_count", 0) && cJSON_AddArrayToObject(o, "msg_head") && cJSON_AddArrayToObject(o, "msg_tail") &&
           (have ? cJSON_AddStringToObject(o, "tools_digest", th) != NULL : cJSON_AddNullToObject(o, "tools_digest") != NULL);
}

/* ---- a turn ---- */

static bool check(const struct job *j, const struct held *hd, const cJSON *o, const cJSON *msgs, digest *d, char *why, size_t cap) {
    const int64_t nh = hd->count;
    const int n = cJSON_GetArraySize(msgs), h = sent_history(msgs);
    const bool full = h > 0 && !is_system(cJSON_GetArrayItem(msgs, h - 1)); /* it sends an assistant message */
    bool tail = full && h < nh; /* it sends the session's last messages only (up to its last answer): the held ones agree */
    for (int i = 0; tail && i < h; i++) {
        const char *s = held_digest(hd, nh - h + i);
        tail = !s || !strcmp(s, d[i]);
    }
    const int cmp = tail ? 0 : h; /* how many to compare from the start */
    for (int i = 0; i < cmp && i < nh; i++) {
        const char *s = held_digest(hd, i);
        if (s && strcmp(s, d[i])) {
            const char *role = str_of(cJSON_GetArrayItem(msgs, i), "role");
            snprintf(why, cap, "messages[%d] (%s) differs from message %d (%s) of session '%s': a session reads only its new messages, "
                     "so the history a request sends must be the session's (start a new session, or send only the new messages)", i,
                     role ? role : "?", i, digest_role(s), j->session_id);
            return false;
        }
    }
    if (cmp > nh) {
        const char *role = str_of(cJSON_GetArrayItem(msgs, (int)nh), "role");
        snprintf(why, cap, "session '%s' holds %lld messages; the request sends messages[%lld] (%s) as history before its new ones, which the "
                 "session does not hold (start a new session, or send only the new messages)", j->session_id, (long long)nh, (long long)nh,
                 role ? role : "?");
        return false;
    }
    if (full && cmp && cmp < nh) { /* its history ends where the session's goes on (a turn it never saw the answer of) */
        const char *role = h < n ? str_of(cJSON_GetArrayItem(msgs, h), "role") : NULL, *s = held_digest(hd, h);
        snprintf(why, cap, "session '%s' holds %lld messages, the request's history %d: its messages[%d] (%s) stands where the session holds "
                 "message %d (%s); GET /v1/sessions/%s shows its turns (send the whole conversation, or only the new messages)", j->session_id,
                 (long long)nh, h, h, role ? role : "?", h, s ? digest_role(s) : "?", j->session_id);
        return false;
    }
    for (int i = h; i < n; i++)
        if (is_system(cJSON_GetArrayItem(msgs, i))) {
            snprintf(why, cap, "messages[%d] (%s) is new to session '%s', which keeps the system prompt of its first turn: start a new session "
                     "to change it", i, str_of(cJSON_GetArrayItem(msgs, i), "role"), j->session_id);
            return false;
        }
    if (j->tools_json) {
        cJSON *t = cJSON_Parse(j->tools_json);
        char th[17];
        const char *st = str_of(o, "tools_digest");
        const bool differ = t && hash_json(t, th) && !(st && !strcmp(st, th));
        cJSON_Delete(t);
        if (differ) {
            snprintf(why, cap, "'tools' differ from those of session '%s' (its first turn's%s, which its prompt holds): start a new session to "
                     "change them, or send none", j->session_id, st ? "" : ": none");
            return false;
        }
    }
    return true;
}

bool history_begin(struct job *j, const char *extra, bool fresh, char *why, size_t cap) {
    free(j->turn_meta);
    j->turn_meta = NULL;
    if (j->kind != JOB_CHAT || (!fresh && !extra)) return true; /* history_next forgets or keeps it unknown */
    cJSON *o = fresh ? cJSON_CreateObject() : cJSON_Parse(extra);
    struct held hd = {0};
    if (!cJSON_IsObject(o) || (fresh ? !held_new(o, j->tools_json) : !held_of(o, &hd))) {
        cJSON_Delete(o);
        return true; /* unknown (or out of memory): checks nothing, and history_next keeps it unknown */
    }
    cJSON *msgs = j->all_json ? cJSON_Parse(j->all_json) : NULL;
    const int n = cJSON_GetArraySize(msgs);
    digest *d = n ? malloc(sizeof *d * (size_t)n) : NULL;
    bool ok = true, oom = n && !d;
    for (int i = 0; !oom && i < n; i++) oom = !digest_of_message(cJSON_GetArrayItem(msgs, i), d[i]);
    if (!oom && !fresh) ok = check(j, &hd, o, msgs, d, why, cap);
    if (ok && !oom) {
        for (int i = fresh ? 0 : sent_history(msgs); !oom && i < n; i++) {
            if (!fresh && is_system(cJSON_GetArrayItem(msgs, i))) continue; /* never read: check refuses it */
            oom = !held_push(o, d[i]);
        }
        if (!oom) j->turn_meta = cJSON_PrintUnformatted(o); /* NULL: history_next makes it unknown */
    }
    free(d);
    cJSON_Delete(msgs);
    cJSON_Delete(o);
    return ok;
}

char *history_answer(const char *extra, const char *key) {
    if (!extra || !key[0]) return NULL;
    if (!strpbrk(key, "\"\\/") && !strstr(extra, key)) return NULL; /* not there as written: no need to parse */
    cJSON *o = cJSON_Parse(extra);
    const cJSON *a;
    char *found = NULL;
    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(o, "answers")) {
        const char *k = str_of(a, "key"), *resp = str_of(a, "response");
        if (k && resp && !strcmp(k, key)) {
            free(found);
            found = strdup(resp);
        }
    }
    cJSON_Delete(o);
    return found;
}

char *history_next(const struct job *j, const char *extra, const char *response) {
    const char *base = j->turn_meta ? j->turn_meta : extra;
    cJSON *o = base ? cJSON_Parse(base) : NULL;
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        o = cJSON_CreateObject();
        if (!o) return NULL;
    }
    struct held hd;
    if (!j->turn_meta || !held_of(o, &hd)) {
        held_forget(o); /* a completion's text has no messages, and a chat turn history_begin did not read: unknown from here on */
    } else {
        cJSON *body = cJSON_Parse(response);
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(body, "choices"), 0), "message");
        digest d;
        cJSON *null = msg ? NULL : cJSON_CreateNull();
        if (!((msg || null) && (msg ? digest_of_message(msg, d) : digest_of_reduced(null, d)) && held_push(o, d))) held_forget(o);
        cJSON_Delete(null);
        cJSON_Delete(body);
    }
    if (j->idem_key[0]) {
        cJSON *answers = cJSON_GetObjectItemCaseSensitive(o, "answers");
        if (!cJSON_IsArray(answers)) {
            cJSON_DeleteItemFromObjectCaseSensitive(o, "answers");
            answers = cJSON_AddArrayToObject(o, "answers");
        }
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "key", j->idem_key);
        cJSON_AddStringToObject(a, "response", response);
        cJSON_AddItemToArray(answers, a);
        while (cJSON_GetArraySize(answers) > HISTORY_ANSWERS) cJSON_DeleteItemFromArray(answers, 0);
    }
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
}

char *history_from_meta(cJSON *meta) {
    cJSON *e = cJSON_CreateObject();
    if (!e) return NULL;
    struct held hd;
    const cJSON *legacy = cJSON_GetObjectItemCaseSensitive(meta, "history");
    if (held_of(meta, &hd)) {
        static const char *const keys[] = {"msg_count", "msg_head", "msg_tail"};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) cJSON_AddItemToObject(e, keys[k], cJSON_DetachItemFromObjectCaseSensitive(meta, keys[k]));
        const char *td = str_of(meta, "tools_digest");
        if (td && strlen(td) == 16) cJSON_AddStringToObject(e, "tools_digest", td);
        else cJSON_AddNullToObject(e, "tools_digest");
    } else if (cJSON_IsArray(legacy)) { /* stored before the digests: each message whole, as reduce() gave it */
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(meta, "tools"), *m;
        char th[17];
        bool ok = cJSON_AddNumberToObject(e, "msg_count", 0) && cJSON_AddArrayToObject(e, "msg_head") && cJSON_AddArrayToObject(e, "msg_tail") &&
                  (tools && !cJSON_IsNull(tools) ? hash_json(tools, th) && cJSON_AddStringToObject(e, "tools_digest", th)
                                                 : cJSON_AddNullToObject(e, "tools_digest") != NULL);
        cJSON_ArrayForEach(m, legacy) {
            digest d;
            ok = ok && digest_of_reduced(m, d) && held_push(e, d);
        }
        if (!ok) held_forget(e); /* out of memory: unknown */
    }
    cJSON *answers = cJSON_DetachItemFromObjectCaseSensitive(meta, "answers");
    if (cJSON_IsArray(answers)) {
        while (cJSON_GetArraySize(answers) > HISTORY_ANSWERS) cJSON_DeleteItemFromArray(answers, 0);
        cJSON_AddItemToObject(e, "answers", answers);
    } else {
        cJSON_Delete(answers);
    }
    char *t = e->child ? cJSON_PrintUnformatted(e) : NULL; /* NULL (none, or no memory): unknown */
    cJSON_Delete(e);
    return t;
}

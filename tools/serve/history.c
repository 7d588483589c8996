/*
 * history.c — what a session remembers of its conversation besides the
 * cache, kept in its stored blob's header (session.c) so that every
 * replica sees it: the messages it has read and the answers it gave
 * ("history", each message reduced to its role, its content with the
 * whitespace at its ends taken off, its tool calls' names and arguments),
 * the tools of its first turn ("tools"), and the last answers of turns
 * sent with an Idempotency-Key ("answers": key and whole response body,
 * the HISTORY_ANSWERS newest).
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
 * The text is a JSON object; NULL (a session stored before this, or one
 * that took a completion) is unknown and checks nothing.
 */
#include "sched_impl.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HISTORY_ANSWERS 4

static const char *str_of(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* One message as the session keeps it (NULL: out of memory). */
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
    if (t) {
        memcpy(t, a, n);
        t[n] = 0;
        cJSON_AddStringToObject(o, "content", t);
        free(t);
    }
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

bool history_check(const struct job *j, const char *extra, char *why, size_t cap) {
    if (j->kind != JOB_CHAT || !extra || !j->all_json) return true;
    cJSON *o = cJSON_Parse(extra), *msgs = cJSON_Parse(j->all_json);
    const cJSON *hist = cJSON_GetObjectItemCaseSensitive(o, "history");
    bool ok = true;
    if (cJSON_IsArray(hist) && cJSON_IsArray(msgs)) {
        const int nh = cJSON_GetArraySize(hist), n = cJSON_GetArraySize(msgs), h = sent_history(msgs);
        const bool full = h > 0 && !is_system(cJSON_GetArrayItem(msgs, h - 1)); /* it sends an assistant message */
        bool tail = full && h < nh; /* it sends the session's last messages only (up to its last answer): they agree */
        for (int i = 0; tail && i < h; i++) {
            cJSON *r = reduce(cJSON_GetArrayItem(msgs, i));
            tail = r && cJSON_Compare(r, cJSON_GetArrayItem(hist, nh - h + i), true);
            cJSON_Delete(r);
        }
        const int cmp = tail ? 0 : h; /* how many to compare from the start */
        for (int i = 0; ok && i < cmp && i < nh; i++) {
            const cJSON *m = cJSON_GetArrayItem(msgs, i), *s = cJSON_GetArrayItem(hist, i);
            cJSON *r = reduce(m);
            const bool same = r && cJSON_Compare(r, s, true);
            cJSON_Delete(r);
            if (!same) {
                const char *role = str_of(m, "role"), *srole = str_of(s, "role");
                snprintf(why, cap, "messages[%d] (%s) differs from message %d (%s) of session '%s': a session reads only its new messages, "
                         "so the history a request sends must be the session's (start a new session, or send only the new messages)", i,
                         role ? role : "?", i, srole ? srole : "?", j->session_id);
                ok = false;
            }
        }
        if (ok && cmp > nh) {
            const char *role = str_of(cJSON_GetArrayItem(msgs, nh), "role");
            snprintf(why, cap, "session '%s' holds %d messages; the request sends messages[%d] (%s) as history before its new ones, which the "
                     "session does not hold (start a new session, or send only the new messages)", j->session_id, nh, nh, role ? role : "?");
            ok = false;
        } else if (ok && full && cmp && cmp < nh) { /* its history ends where the session's goes on (a turn it never saw the answer of) */
            const char *role = h < n ? str_of(cJSON_GetArrayItem(msgs, h), "role") : NULL, *srole = str_of(cJSON_GetArrayItem(hist, h), "role");
            snprintf(why, cap, "session '%s' holds %d messages, the request's history %d: its messages[%d] (%s) stands where the session holds "
                     "message %d (%s); GET /v1/sessions/%s shows its turns (send the whole conversation, or only the new messages)", j->session_id, nh,
                     h, h, role ? role : "?", h, srole ? srole : "?", j->session_id);
            ok = false;
        }
        for (int i = h; ok && i < n; i++)
            if (is_system(cJSON_GetArrayItem(msgs, i))) {
                snprintf(why, cap, "messages[%d] (%s) is new to session '%s', which keeps the system prompt of its first turn: start a new session "
                         "to change it", i, str_of(cJSON_GetArrayItem(msgs, i), "role"), j->session_id);
                ok = false;
            }
    }
    if (ok && j->tools_json && cJSON_IsObject(o)) {
        cJSON *t = cJSON_Parse(j->tools_json);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "tools");
        if (t && !(st && !cJSON_IsNull(st) && cJSON_Compare(t, st, true))) {
            snprintf(why, cap, "'tools' differ from those of session '%s' (its first turn's%s, which its prompt holds): start a new session to "
                     "change them, or send none", j->session_id, st && !cJSON_IsNull(st) ? "" : ": none");
            ok = false;
        }
        cJSON_Delete(t);
    }
    cJSON_Delete(o);
    cJSON_Delete(msgs);
    return ok;
}

char *history_answer(const char *extra, const char *key) {
    if (!extra || !key[0]) return NULL;
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

char *history_next(const struct job *j, const char *extra, bool fresh, const char *response) {
    cJSON *o = !fresh && extra ? cJSON_Parse(extra) : NULL;
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        o = cJSON_CreateObject();
        if (!o) return NULL;
    }
    cJSON *hist = cJSON_GetObjectItemCaseSensitive(o, "history");
    if (j->kind == JOB_CHAT && (fresh || cJSON_IsArray(hist))) {
        if (fresh) {
            hist = cJSON_AddArrayToObject(o, "history");
            cJSON *t = j->tools_json ? cJSON_Parse(j->tools_json) : NULL;
            cJSON_AddItemToObject(o, "tools", t ? t : cJSON_CreateNull());
        }
        cJSON *msgs = j->all_json ? cJSON_Parse(j->all_json) : NULL;
        const int n = cJSON_GetArraySize(msgs);
        for (int i = fresh ? 0 : sent_history(msgs); i < n; i++) {
            const cJSON *m = cJSON_GetArrayItem(msgs, i);
            if (!fresh && is_system(m)) continue; /* never read: history_check refuses it */
            cJSON_AddItemToArray(hist, reduce(m));
        }
        cJSON_Delete(msgs);
        cJSON *body = cJSON_Parse(response);
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(body, "choices"), 0), "message");
        cJSON_AddItemToArray(hist, msg ? reduce(msg) : cJSON_CreateNull());
        cJSON_Delete(body);
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(o, "history"); /* a completion's text has no messages: unknown from here on */
        cJSON_DeleteItemFromObjectCaseSensitive(o, "tools");
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

/*
 * openai.c — the OpenAI API's JSON, both ways, with cJSON.
 *
 * Requests: every field a client may send is checked for type and range
 * and a bad one is a 400 that names it; unknown fields are ignored (clients
 * send many). kvbound's own fields: kv_policy, kv_budget, kv_sinks (checked
 * against the server's --max-budget) and session_id. Responses:
 * chat.completion / text_completion objects, and chat.completion.chunk /
 * text_completion events for stream: true, with usage and kvbound's
 * "kvbound" object (session, cache tokens, position).
 */
#include "serve.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* An integer field in [lo, hi]; absent leaves *out. */
static bool get_int(const cJSON *o, const char *name, long long lo, long long hi, long long *out, bool *given, struct http_resp *r) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (given) *given = false;
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble)) {
        serve_error(r, 400, "invalid_request_error", "'%s' must be an integer", name);
        return false;
    }
    if (v->valuedouble < (double)lo || v->valuedouble > (double)hi) {
        serve_error(r, 400, "invalid_request_error", "'%s' is %.17g, outside %lld..%lld", name, v->valuedouble, lo, hi);
        return false;
    }
    *out = (long long)v->valuedouble;
    if (given) *given = true;
    return true;
}

static bool get_num(const cJSON *o, const char *name, double lo, double hi, bool lo_open, float *out, struct http_resp *r) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        serve_error(r, 400, "invalid_request_error", "'%s' must be a number", name);
        return false;
    }
    if (v->valuedouble < lo || v->valuedouble > hi || (lo_open && v->valuedouble <= lo)) {
        serve_error(r, 400, "invalid_request_error", "'%s' is %g, outside %s%g..%g", name, v->valuedouble, lo_open ? "(" : "", lo, hi);
        return false;
    }
    *out = (float)v->valuedouble;
    return true;
}

static bool get_bool(const cJSON *o, const char *name, bool *out, struct http_resp *r) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsBool(v)) {
        serve_error(r, 400, "invalid_request_error", "'%s' must be true or false", name);
        return false;
    }
    *out = cJSON_IsTrue(v);
    return true;
}

/* A message's content: a string, or an array of {"type":"text","text":...}
 * parts, joined. NULL with resp filled on error. */
static char *content_text(const cJSON *c, int idx, struct http_resp *r) {
    if (cJSON_IsString(c)) return xstrdup(c->valuestring);
    if (cJSON_IsArray(c)) {
        struct sbuf b = {0};
        const cJSON *part;
        cJSON_ArrayForEach(part, c) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type"), *x = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") || !cJSON_IsString(x)) {
                sb_free(&b);
                serve_error(r, 400, "invalid_request_error", "messages[%d].content: only text parts ({\"type\":\"text\",\"text\":...}) are supported", idx);
                return NULL;
            }
            sb_puts(&b, x->valuestring);
        }
        if (!b.s) sb_put(&b, "", 0);
        if (b.oom) { sb_free(&b); serve_error(r, 500, "server_error", "out of memory"); return NULL; }
        return b.s;
    }
    serve_error(r, 400, "invalid_request_error", "messages[%d].content must be a string or an array of text parts", idx);
    return NULL;
}

static bool parse_messages(const cJSON *root, struct job *j, struct http_resp *r) {
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(ms)) { serve_error(r, 400, "invalid_request_error", "'messages' is required and must be an array"); return false; }
    const int n = cJSON_GetArraySize(ms);
    if (n < 1 || n > 1024) { serve_error(r, 400, "invalid_request_error", "'messages' must hold 1 to 1024 messages, not %d", n); return false; }
    j->msgs = calloc((size_t)n, sizeof *j->msgs);
    if (!j->msgs) { serve_error(r, 500, "server_error", "out of memory"); return false; }
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            serve_error(r, 400, "invalid_request_error", "messages[%d] must be an object with a string 'role'", i);
            return false;
        }
        const char *rl = role->valuestring;
        if (!strcmp(rl, "developer")) rl = "system";
        if (strcmp(rl, "system") && strcmp(rl, "user") && strcmp(rl, "assistant")) {
            serve_error(r, 400, "invalid_request_error", "messages[%d].role '%.40s' is not system, developer, user or assistant", i, role->valuestring);
            return false;
        }
        char *text = content_text(cJSON_GetObjectItemCaseSensitive(m, "content"), i, r);
        if (!text) return false;
        j->msgs[i].role = rl[0] == 's' ? "system" : rl[0] == 'u' ? "user" : "assistant";
        j->msgs[i].content = text;
        j->n_msgs = ++i;
    }
    /* with a session only the newest user message is new text; a system
     * message counts on the session's first turn */
    if (strcmp(j->msgs[n - 1].role, "user")) {
        serve_error(r, 400, "invalid_request_error", "the last message must have role 'user'");
        return false;
    }
    j->user = xstrdup(j->msgs[n - 1].content);
    for (int k = 0; k < n; k++)
        if (!strcmp(j->msgs[k].role, "system")) { j->system = xstrdup(j->msgs[k].content); break; }
    if (!j->user) { serve_error(r, 500, "server_error", "out of memory"); return false; }
    return true;
}

static bool parse_stop(const cJSON *root, struct job *j, struct http_resp *r) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (!st || cJSON_IsNull(st)) return true;
    const cJSON *one;
    if (cJSON_IsString(st)) one = st;
    else if (cJSON_IsArray(st)) one = NULL;
    else { serve_error(r, 400, "invalid_request_error", "'stop' must be a string or an array of up to 4 strings"); return false; }
    if (one) {
        if (!one->valuestring[0] || strlen(one->valuestring) > 256) { serve_error(r, 400, "invalid_request_error", "'stop' strings must be 1 to 256 bytes"); return false; }
        j->stops[j->n_stops++] = xstrdup(one->valuestring);
        return true;
    }
    if (cJSON_GetArraySize(st) > SERVE_MAX_STOPS) { serve_error(r, 400, "invalid_request_error", "'stop' holds at most %d strings", SERVE_MAX_STOPS); return false; }
    cJSON_ArrayForEach(one, st) {
        if (!cJSON_IsString(one) || !one->valuestring[0] || strlen(one->valuestring) > 256) {
            serve_error(r, 400, "invalid_request_error", "'stop' strings must be strings of 1 to 256 bytes");
            return false;
        }
        j->stops[j->n_stops++] = xstrdup(one->valuestring);
    }
    return true;
}

static bool session_id_ok(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > SERVE_ID_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.')) return false;
    }
    return true;
}

/* Where a JSON string of the body escapes U+0000 (\u0000), as an offset,
 * or -1. cJSON keeps strings NUL-terminated, so such a string would be cut
 * short without a word (a session_id "demo\u0000x" read as "demo"). A raw
 * NUL byte is no valid JSON and is refused by the parser. */
static long escaped_nul_at(const char *body, size_t len) {
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        const char c = body[i];
        if (!in_str) { in_str = c == '"'; continue; }
        if (c == '"') { in_str = false; continue; }
        if (c != '\\' || i + 1 >= len) continue;
        if (body[i + 1] == 'u' && i + 5 < len && !memcmp(body + i + 2, "0000", 4)) return (long)i;
        i++; /* the escaped character */
    }
    return -1;
}

bool openai_parse(struct server *srv, enum job_kind kind, const char *body, size_t len, struct job *j, struct http_resp *r) {
    if (!utf8_valid(body, len)) { serve_error(r, 400, "invalid_request_error", "the request body is not valid UTF-8"); return false; }
    const long nul = escaped_nul_at(body, len);
    if (nul >= 0) {
        serve_error(r, 400, "invalid_request_error", "a string of the request holds U+0000 (\\u0000, at byte %ld), which kvbound refuses rather than cut the string there", nul);
        return false;
    }
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) { serve_error(r, 400, "invalid_request_error", "the request body is not valid JSON (near byte %ld)", cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - body) : -1L); return false; }
    bool ok = false;
    j->kind = kind;
    j->sp = kvb_seq_default_params();
    j->sp.kv = srv->o.kv;
    j->sp.sampler = kvb_sampler_default_params();
    j->sp.sampler.seed = (uint64_t)(uintptr_t)j * 0x9e3779b97f4a7c15ull + (uint64_t)(serve_now() * 1e6); /* no seed given: a fresh one */
    j->sp.max_tokens = srv->o.default_max_tokens;
    long long v = 0;
    bool given = false;
    if (!cJSON_IsObject(root)) { serve_error(r, 400, "invalid_request_error", "the request body must be a JSON object"); goto out; }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsString(model) && !cJSON_IsNull(model)) { serve_error(r, 400, "invalid_request_error", "'model' must be a string"); goto out; }
    if (kind == JOB_CHAT) {
        if (!parse_messages(root, j, r)) goto out;
    } else {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
        if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0))) p = cJSON_GetArrayItem(p, 0);
        if (!cJSON_IsString(p)) { serve_error(r, 400, "invalid_request_error", "'prompt' is required and must be a string (or an array of one string)"); goto out; }
        if (!p->valuestring[0]) { serve_error(r, 400, "invalid_request_error", "'prompt' is empty"); goto out; }
        j->prompt = xstrdup(p->valuestring);
    }
    if (!get_int(root, "n", 1, 1, &v, NULL, r)) goto out;
    if (!get_int(root, "max_tokens", 1, srv->o.max_tokens_cap, &v, &given, r)) goto out;
    if (given) j->sp.max_tokens = (int32_t)v;
    if (!get_int(root, "max_completion_tokens", 1, srv->o.max_tokens_cap, &v, &given, r)) goto out;
    if (given) j->sp.max_tokens = (int32_t)v;
    if (!get_num(root, "temperature", 0, 2, false, &j->sp.sampler.temp, r)) goto out;
    if (!get_num(root, "top_p", 0, 1, true, &j->sp.sampler.top_p, r)) goto out;
    if (!get_int(root, "seed", -(1ll << 53), 1ll << 53, &v, &given, r)) goto out;
    if (given) j->sp.sampler.seed = (uint64_t)v;
    if (!get_bool(root, "stream", &j->stream, r)) goto out;
    if (!get_bool(root, "ignore_eos", &j->sp.ignore_eos, r)) goto out; /* llama-server's extension: exactly max_tokens */
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) { serve_error(r, 400, "invalid_request_error", "'stream_options' must be an object"); goto out; }
        if (!get_bool(so, "include_usage", &j->include_usage, r)) goto out;
    }
    if (!parse_stop(root, j, r)) goto out;
    /* kvbound's own fields */
    const cJSON *pol = cJSON_GetObjectItemCaseSensitive(root, "kv_policy");
    if (pol && !cJSON_IsNull(pol)) {
        enum kvb_policy_id id;
        if (!cJSON_IsString(pol) || kvb_policy_from_name(pol->valuestring, &id) != KVB_OK) {
            serve_error(r, 400, "invalid_request_error", "'kv_policy' must name a policy (kvbound policies lists them)");
            goto out;
        }
        if (id == KVB_POLICY_FULL && srv->o.kv.policy.id != KVB_POLICY_FULL) {
            serve_error(r, 400, "invalid_request_error", "'kv_policy' full is not allowed: this server bounds every session (--policy %s)", kvb_policy_name(srv->o.kv.policy.id));
            goto out;
        }
        if (id != srv->o.kv.policy.id) {
            const int32_t b = j->sp.kv.policy.budget ? j->sp.kv.policy.budget : 256;
            j->sp.kv.policy = kvb_policy_default_params(id);
            if (id != KVB_POLICY_FULL) j->sp.kv.policy.budget = b;
        }
        j->policy_given = true;
    }
    if (!get_int(root, "kv_budget", 2, srv->o.max_budget, &v, &given, r)) goto out;
    if (given) {
        if (j->sp.kv.policy.id == KVB_POLICY_FULL) { serve_error(r, 400, "invalid_request_error", "'kv_budget' needs a bounded 'kv_policy'"); goto out; }
        j->sp.kv.policy.budget = (int32_t)v;
        j->policy_given = true;
    }
    if (!get_int(root, "kv_sinks", 0, 1 << 20, &v, &given, r)) goto out;
    if (given) {
        j->sp.kv.policy.n_sink = (int32_t)v;
        j->policy_given = true;
    }
    if (j->sp.kv.policy.id == KVB_POLICY_FULL) j->sp.kv.recall = (struct kvb_recall_params){0}; /* recall is for bounded sessions; a session keeps its first turn's (its image holds them) */
    if (j->sp.kv.policy.id != KVB_POLICY_FULL && j->sp.kv.policy.n_sink >= j->sp.kv.policy.budget) {
        serve_error(r, 400, "invalid_request_error", "'kv_sinks' (%d) must be below the budget (%d)", (int)j->sp.kv.policy.n_sink, (int)j->sp.kv.policy.budget);
        goto out;
    }
    const cJSON *sid = cJSON_GetObjectItemCaseSensitive(root, "session_id");
    if (sid && !cJSON_IsNull(sid)) {
        if (!cJSON_IsString(sid) || !session_id_ok(sid->valuestring)) {
            serve_error(r, 400, "invalid_request_error", "'session_id' must be 1 to %d characters of A-Z a-z 0-9 . _ -", SERVE_ID_MAX);
            goto out;
        }
        snprintf(j->session_id, sizeof j->session_id, "%s", sid->valuestring);
    }
    ok = true;
out:
    cJSON_Delete(root);
    return ok;
}

/* ---- responses ---- */

static void add_kvbound(const struct job *j, cJSON *o) {
    cJSON *k = cJSON_AddObjectToObject(o, "kvbound");
    if (j->session_id[0]) cJSON_AddStringToObject(k, "session_id", j->session_id);
    cJSON_AddStringToObject(k, "kv_policy", kvb_policy_name(j->sp.kv.policy.id));
    cJSON_AddNumberToObject(k, "kv_budget", j->sp.kv.policy.budget);
    cJSON_AddNumberToObject(k, "position", (double)j->position);
    cJSON_AddNumberToObject(k, "cache_tokens", (double)j->cache_tokens);
    cJSON_AddNumberToObject(k, "kv_bytes", (double)j->kv_bytes);
    if (j->sp.kv.recall.pages > 0) cJSON_AddNumberToObject(k, "cold_pages", (double)j->cold_pages);
}

static void add_usage(const struct job *j, cJSON *o) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", j->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", j->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", j->prompt_tokens + j->completion_tokens);
}

static void emit(cJSON *o, struct sbuf *out, bool sse) {
    char *s = cJSON_PrintUnformatted(o);
    if (!s) { out->oom = true; cJSON_Delete(o); return; }
    if (sse) sb_puts(out, "data: ");
    sb_puts(out, s);
    sb_puts(out, sse ? "\n\n" : "\n");
    free(s);
    cJSON_Delete(o);
}

static cJSON *head(const struct server *srv, const struct job *j, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", srv->o.model_name);
    return o;
}

void openai_response(const struct server *srv, const struct job *j, struct sbuf *out) {
    const bool chat = j->kind == JOB_CHAT;
    cJSON *o = head(srv, j, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    char *text = malloc(j->text.n + 1);
    if (text) {
        memcpy(text, j->text.s ? j->text.s : "", j->text.n);
        text[j->text.n] = 0;
    }
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", text ? text : "");
    } else {
        cJSON_AddStringToObject(c, "text", text ? text : "");
        cJSON_AddNullToObject(c, "logprobs");
    }
    free(text);
    cJSON_AddStringToObject(c, "finish_reason", j->finish ? j->finish : "stop");
    cJSON_AddItemToArray(choices, c);
    add_usage(j, o);
    add_kvbound(j, o);
    emit(o, out, false);
}

void openai_chunk(const struct server *srv, const struct job *j, const char *delta, size_t n, bool role, const char *finish, bool usage_only,
                  struct sbuf *out) {
    const bool chat = j->kind == JOB_CHAT;
    cJSON *o = head(srv, j, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    if (usage_only) {
        add_usage(j, o);
        add_kvbound(j, o);
        emit(o, out, true);
        return;
    }
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    char *text = malloc(n + 1);
    if (text) {
        memcpy(text, delta ? delta : "", n);
        text[n] = 0;
    }
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (n || role) cJSON_AddStringToObject(d, "content", text ? text : "");
    } else {
        cJSON_AddStringToObject(c, "text", text ? text : "");
        cJSON_AddNullToObject(c, "logprobs");
    }
    free(text);
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    if (finish) add_kvbound(j, o);
    emit(o, out, true);
}

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
#include <errno.h>
#include <math.h>
#include <pthread.h>
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

bool openai_get_bool(const cJSON *o, const char *name, bool *out, struct http_resp *r) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsBool(v)) {
        serve_error(r, 400, "invalid_request_error", "'%s' must be true or false", name);
        return false;
    }
    *out = cJSON_IsTrue(v);
    return true;
}

const char *openai_unknown_field(const cJSON *o, const char *const *known) {
    const cJSON *f;
    cJSON_ArrayForEach(f, o) {
        if (cJSON_IsNull(f)) continue;
        int k = 0;
        while (known[k] && strcmp(known[k], f->string)) k++;
        if (!known[k]) return f->string;
    }
    return NULL;
}

/* A message's content: a string, or an array of {"type":"text","text":...}
 * parts, joined. NULL with resp filled on error. */
static char *content_text(const cJSON *c, int idx, struct http_resp *r) {
    if (cJSON_IsString(c)) return xstrdup(c->valuestring);
    if (cJSON_IsArray(c)) {
        struct kvb_str b = {0};
        const cJSON *part;
        cJSON_ArrayForEach(part, c) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type"), *x = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") || !cJSON_IsString(x)) {
                kvb_str_free(&b);
                serve_error(r, 400, "invalid_request_error", "messages[%d].content: only text parts ({\"type\":\"text\",\"text\":...}) are supported", idx);
                return NULL;
            }
            kvb_str_puts(&b, x->valuestring);
        }
        char *text = b.err ? NULL : xstrdup(b.p ? b.p : ""); /* the caller free()s it: libc's memory */
        kvb_str_free(&b);
        if (!text) serve_error(r, 500, "server_error", "out of memory");
        return text;
    }
    serve_error(r, 400, "invalid_request_error", "messages[%d].content must be a string or an array of text parts", idx);
    return NULL;
}

/* A copy of message m as the template wants it: role, content as text
 * (NULL content kept as null for an assistant with tool_calls), name,
 * tool_call_id, reasoning_content, and tool_calls with their arguments
 * parsed from the JSON string OpenAI sends into an object (templates
 * write them with tojson). NULL with resp filled on error. */
static cJSON *message_copy(const cJSON *m, const char *role, const char *text, int idx, struct http_resp *r) {
    cJSON *o = cJSON_CreateObject();
    if (!o) goto oom;
    cJSON_AddStringToObject(o, "role", role);
    if (text) cJSON_AddStringToObject(o, "content", text);
    else cJSON_AddNullToObject(o, "content");
    static const char *const strs[] = {"name", "tool_call_id", "reasoning_content"};
    for (size_t k = 0; k < sizeof strs / sizeof *strs; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, strs[k]);
        if (!v || cJSON_IsNull(v)) continue;
        if (!cJSON_IsString(v)) {
            serve_error(r, 400, "invalid_request_error", "messages[%d].%s must be a string", idx, strs[k]);
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddStringToObject(o, strs[k], v->valuestring);
    }
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (tc && !cJSON_IsNull(tc)) {
        if (strcmp(role, "assistant") || !cJSON_IsArray(tc)) {
            serve_error(r, 400, "invalid_request_error", "messages[%d].tool_calls must be an array, on an assistant message", idx);
            cJSON_Delete(o);
            return NULL;
        }
        cJSON *calls = cJSON_AddArrayToObject(o, "tool_calls");
        int k = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, tc) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function"), *id = cJSON_GetObjectItemCaseSensitive(c, "id");
            const cJSON *nm = f ? cJSON_GetObjectItemCaseSensitive(f, "name") : NULL, *args = f ? cJSON_GetObjectItemCaseSensitive(f, "arguments") : NULL;
            if (!cJSON_IsObject(f) || !cJSON_IsString(nm) || !(cJSON_IsString(args) || cJSON_IsObject(args)) || (id && !cJSON_IsString(id))) {
                serve_error(r, 400, "invalid_request_error",
                            "messages[%d].tool_calls[%d] must be {\"id\": string, \"type\": \"function\", \"function\": {\"name\": string, \"arguments\": string}}", idx, k);
                cJSON_Delete(o);
                return NULL;
            }
            cJSON *parsed = cJSON_IsString(args) ? serve_json_body(args->valuestring, strlen(args->valuestring), r) : cJSON_Duplicate(args, true);
            if (!cJSON_IsObject(parsed)) {
                cJSON_Delete(parsed);
                serve_error(r, 400, "invalid_request_error", "messages[%d].tool_calls[%d].function.arguments is not one JSON object (strictly: no key twice, nothing after it)", idx, k);
                cJSON_Delete(o);
                return NULL;
            }
            cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
            if (id) cJSON_AddStringToObject(call, "id", id->valuestring);
            cJSON_AddStringToObject(call, "type", "function");
            cJSON_AddStringToObject(fn, "name", nm->valuestring);
            cJSON_AddItemToObject(fn, "arguments", parsed);
            cJSON_AddItemToObject(call, "function", fn);
            cJSON_AddItemToArray(calls, call);
            k++;
        }
    }
    return o;
oom:
    serve_error(r, 500, "server_error", "out of memory");
    return NULL;
}

static char *json_of(cJSON *a) {
    char *s = a ? cJSON_PrintUnformatted(a) : NULL;
    cJSON_Delete(a);
    return s;
}

/* The messages a session turn reads through the Jinja template (serve.h:
 * all_json ... standin_json). */
static bool message_sets(struct job *j, cJSON *all, int last_assistant, struct http_resp *r) {
    const int n = cJSON_GetArraySize(all);
    cJSON *prev = last_assistant >= 0 ? cJSON_CreateArray() : NULL, *cont = last_assistant >= 0 ? cJSON_CreateArray() : NULL;
    cJSON *sprev = cJSON_CreateArray(), *scont = cJSON_CreateArray();
    cJSON *u = cJSON_CreateObject(), *a = cJSON_CreateObject();
    cJSON_AddStringToObject(u, "role", "user");
    cJSON_AddStringToObject(u, "content", "Hello.");
    cJSON_AddStringToObject(a, "role", "assistant");
    cJSON_AddStringToObject(a, "content", SERVE_TEMPLATE_MARK);
    cJSON_AddItemToArray(sprev, u);
    cJSON_AddItemToArray(sprev, a);
    cJSON_AddItemToArray(scont, cJSON_Duplicate(u, true));
    cJSON_AddItemToArray(scont, cJSON_Duplicate(a, true));
    int last_user = -1;
    for (int i = 0; i < n; i++) {
        const cJSON *m = cJSON_GetArrayItem(all, i);
        const char *role = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
        const bool sys = !strcmp(role, "system") || !strcmp(role, "developer");
        if (!strcmp(role, "user")) last_user = i;
        if (prev && i <= last_assistant) cJSON_AddItemToArray(prev, cJSON_Duplicate(m, true));
        if (cont && (i <= last_assistant || !sys)) cJSON_AddItemToArray(cont, cJSON_Duplicate(m, true));
        if (i > last_assistant && !sys) cJSON_AddItemToArray(scont, cJSON_Duplicate(m, true));
    }
    if (last_user > 0) { /* what sessions may share: the messages before the last user message */
        cJSON *shared = cJSON_CreateArray();
        for (int i = 0; shared && i < last_user; i++) cJSON_AddItemToArray(shared, cJSON_Duplicate(cJSON_GetArrayItem(all, i), true));
        j->shared_json = json_of(shared); /* NULL for want of memory: no sharing */
    }
    j->all_json = cJSON_PrintUnformatted(all);
    j->prev_json = prev ? json_of(prev) : NULL;
    j->cont_json = cont ? json_of(cont) : NULL;
    j->standin_prev_json = json_of(sprev);
    j->standin_json = json_of(scont);
    if (!j->all_json || (last_assistant >= 0 && (!j->prev_json || !j->cont_json)) || !j->standin_prev_json || !j->standin_json) {
        serve_error(r, 500, "server_error", "out of memory");
        return false;
    }
    return true;
}

static bool parse_messages(const struct server *srv, const cJSON *root, struct job *j, struct http_resp *r) {
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(ms)) { serve_error(r, 400, "invalid_request_error", "'messages' is required and must be an array"); return false; }
    const int n = cJSON_GetArraySize(ms);
    if (n < 1 || n > 1024) { serve_error(r, 400, "invalid_request_error", "'messages' must hold 1 to 1024 messages, not %d", n); return false; }
    j->msgs = calloc((size_t)n, sizeof *j->msgs);
    cJSON *all = cJSON_CreateArray();
    if (!j->msgs || !all) { cJSON_Delete(all); serve_error(r, 500, "server_error", "out of memory"); return false; }
    int i = 0, last_assistant = -1;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            serve_error(r, 400, "invalid_request_error", "messages[%d] must be an object with a string 'role'", i);
            goto fail;
        }
        const char *rl = role->valuestring;
        if (strcmp(rl, "system") && strcmp(rl, "developer") && strcmp(rl, "user") && strcmp(rl, "assistant") && strcmp(rl, "tool")) {
            serve_error(r, 400, "invalid_request_error", "messages[%d].role '%.40s' is not system, developer, user, assistant or tool", i, role->valuestring);
            goto fail;
        }
        static const char *const known[] = {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", "refusal", NULL};
        const char *unknown = openai_unknown_field(m, known);
        if (unknown) {
            serve_error(r, 400, "invalid_request_error", "messages[%d].%.60s is not implemented by kvbound", i, unknown);
            goto fail;
        }
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        const bool may_be_null = !strcmp(rl, "assistant") && cJSON_IsArray(tc) && cJSON_GetArraySize(tc) > 0;
        char *text = (!content || cJSON_IsNull(content)) && may_be_null ? NULL : content_text(content, i, r);
        if (!text && !may_be_null) goto fail;
        /* developer is system to a template that does not know it (gpt-oss's does) */
        cJSON *copy = message_copy(m, !strcmp(rl, "developer") && !srv->tmpl_developer ? "system" : rl, text, i, r);
        if (!copy) { free(text); goto fail; }
        cJSON_AddItemToArray(all, copy);
        if (!strcmp(rl, "assistant")) last_assistant = i;
        j->msgs[i].role = rl[0] == 's' || rl[0] == 'd' ? "system" : rl[0] == 'u' ? "user" : rl[0] == 'a' ? "assistant" : "tool";
        j->msgs[i].content = text ? text : strdup("");
        j->n_msgs = ++i;
        if (!j->msgs[i - 1].content) { serve_error(r, 500, "server_error", "out of memory"); goto fail; }
    }
    /* a final assistant message with text and no calls is a prefill: the
     * answer continues it (llama-server's and Anthropic's reading); it leaves
     * the messages and is read after the generation prompt (text.c) */
    int last = n - 1;
    if (last > 0 && !strcmp(j->msgs[last].role, "assistant") && j->msgs[last].content[0] &&
        !cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(all, last), "tool_calls")) {
        j->answer_prefix = (char *)j->msgs[last].content;
        j->msgs[last].content = NULL;
        j->n_msgs = last;
        cJSON_DeleteItemFromArray(all, last);
        last_assistant = -1;
        for (int k = 0; k < last; k++)
            if (!strcmp(j->msgs[k].role, "assistant")) last_assistant = k;
        last--;
    }
    /* with a session only the new messages are new text (those after the
     * last assistant message); a system message counts on the session's
     * first turn */
    if (strcmp(j->msgs[last].role, "user") && strcmp(j->msgs[last].role, "tool")) {
        serve_error(r, 400, "invalid_request_error", "the last message must have role 'user' or 'tool' (or be an assistant's text, a prefill the answer continues)");
        goto fail;
    }
    j->user = xstrdup(j->msgs[last].content);
    for (int k = 0; k <= last; k++)
        if (!strcmp(j->msgs[k].role, "system")) { j->system = xstrdup(j->msgs[k].content); break; }
    if (!j->user) { serve_error(r, 500, "server_error", "out of memory"); goto fail; }
    if (!message_sets(j, all, last_assistant, r)) goto fail;
    cJSON_Delete(all);
    return true;
fail:
    cJSON_Delete(all);
    return false;
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

/* Fields kvbound reads, per route; anything else that is not null is a
 * 400 naming it (docs/SERVING.md lists both). The last ones are known to
 * change nothing kvbound does: user, metadata, store, cache_prompt. */
static const char *const chat_fields[] = {
    "model", "messages", "n", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stream", "stream_options", "stop",
    "ignore_eos", "kv_policy", "kv_budget", "kv_sinks", "session_id", "top_k", "min_p", "repeat_penalty", "repeat_last_n",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "grammar", "json_schema", "chat_template_kwargs", "reasoning_effort", "user", "metadata", "store", "cache_prompt", "n_predict", "cache_salt", "n_keep", NULL};
static const char *const completion_fields[] = {
    "model", "prompt", "n", "max_tokens", "temperature", "top_p", "seed", "stream", "stream_options", "stop", "ignore_eos", "kv_policy",
    "kv_budget", "kv_sinks", "session_id", "top_k", "min_p", "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty",
    "logit_bias", "logprobs", "grammar", "json_schema", "response_format", "echo", "best_of", "user", "metadata", "store", "cache_prompt",
    "n_predict", "cache_salt", "n_keep", NULL};

static bool fields_known(const cJSON *root, enum job_kind kind, struct http_resp *r) {
    const char *unknown = openai_unknown_field(root, kind == JOB_CHAT ? chat_fields : completion_fields);
    if (!unknown) return true;
    serve_error(r, 400, "invalid_request_error", "'%.80s' is not implemented by kvbound%s; leave it out (docs/SERVING.md lists the fields)", unknown,
                kind == JOB_COMPLETION && !strcmp(unknown, "suffix") ? " (no fill-in-the-middle)" : "");
    return false;
}

/* logit_bias: {"TOKEN_ID": bias in -100..100}; -100 bans the token. */
static bool parse_logit_bias(const struct server *srv, const cJSON *root, struct job *j, struct http_resp *r) {
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (!lb || cJSON_IsNull(lb)) return true;
    if (!cJSON_IsObject(lb)) { serve_error(r, 400, "invalid_request_error", "'logit_bias' must be an object of token ids to numbers"); return false; }
    const int n = cJSON_GetArraySize(lb);
    if (n > 1024) { serve_error(r, 400, "invalid_request_error", "'logit_bias' holds %d tokens; at most 1024", n); return false; }
    if (!n) return true;
    j->bias = calloc((size_t)n, sizeof *j->bias);
    if (!j->bias) { serve_error(r, 500, "server_error", "out of memory"); return false; }
    const int32_t V = srv->mi.n_vocab;
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, lb) {
        char *end = NULL;
        const long id = strtol(e->string, &end, 10);
        if (!e->string[0] || *end || id < 0 || id >= V) {
            serve_error(r, 400, "invalid_request_error", "'logit_bias' key '%.40s' is no token id of this model (0..%d)", e->string, (int)V - 1);
            return false;
        }
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < -100 || e->valuedouble > 100) {
            serve_error(r, 400, "invalid_request_error", "'logit_bias' of token %ld must be a number in -100..100", id);
            return false;
        }
        j->bias[k++] = (struct kvb_logit_bias){(int32_t)id, e->valuedouble <= -100 ? -INFINITY : (float)e->valuedouble};
    }
    j->sp.sampler.logit_bias = j->bias;
    j->sp.sampler.n_logit_bias = k;
    return true;
}

/* top_k, min_p, the penalties, logprobs. */
static bool parse_sampling(const struct server *srv, const cJSON *root, struct job *j, struct http_resp *r) {
    long long v = 0;
    bool given = false;
    if (!get_int(root, "top_k", 0, 1 << 20, &v, &given, r)) return false;
    if (given) j->sp.sampler.top_k = (int32_t)v;
    if (!get_num(root, "min_p", 0, 1, false, &j->sp.sampler.min_p, r)) return false;
    if (!get_num(root, "repeat_penalty", 0, 10, true, &j->sp.sampler.repeat_penalty, r)) return false;
    if (!get_int(root, "repeat_last_n", 0, 1 << 20, &v, &given, r)) return false;
    if (given) j->sp.sampler.repeat_last_n = (int32_t)v;
    if (!get_num(root, "presence_penalty", -2, 2, false, &j->sp.sampler.presence_penalty, r)) return false;
    if (!get_num(root, "frequency_penalty", -2, 2, false, &j->sp.sampler.frequency_penalty, r)) return false;
    if (!parse_logit_bias(srv, root, j, r)) return false;
    if (j->kind == JOB_CHAT) {
        if (!openai_get_bool(root, "logprobs", &j->logprobs, r)) return false;
        if (!get_int(root, "top_logprobs", 0, 20, &v, &given, r)) return false;
        if (given) {
            if (!j->logprobs) { serve_error(r, 400, "invalid_request_error", "'top_logprobs' needs 'logprobs': true"); return false; }
            j->top_logprobs = (int)v;
        }
    } else {
        if (!get_int(root, "logprobs", 0, 5, &v, &given, r)) return false;
        if (given) { j->logprobs = true; j->top_logprobs = (int)v; }
        bool echo = false;
        if (!openai_get_bool(root, "echo", &echo, r)) return false;
        if (echo) { serve_error(r, 400, "invalid_request_error", "'echo': true is not implemented by kvbound"); return false; }
        if (!get_int(root, "best_of", 1, 1, &v, NULL, r)) return false;
    }
    return true;
}

/* A JSON Schema (or NULL: any object) as the job's grammar. */
static bool schema_grammar(const cJSON *schema, struct job *j, const char *field, struct http_resp *r) {
    char *text = schema ? cJSON_PrintUnformatted(schema) : NULL;
    if (schema && !text) { serve_error(r, 500, "server_error", "out of memory"); return false; }
    char *gbnf = NULL;
    size_t gl = 0;
    const char *src = text ? text : "{\"type\":\"object\"}";
    const kvb_status st = kvb_json_schema_to_gbnf(src, strlen(src), NULL, &gbnf, &gl);
    free(text);
    if (st != KVB_OK) {
        serve_error(r, st == KVB_ERR_NOMEM ? 500 : 400, st == KVB_ERR_NOMEM ? "server_error" : "invalid_request_error", "'%s': %s", field, kvb_last_error());
        return false;
    }
    j->gbnf = strdup(gbnf);
    kvb_buffer_free(gbnf);
    if (!j->gbnf) { serve_error(r, 500, "server_error", "out of memory"); return false; }
    j->json_output = true;
    return true;
}

/* A GBNF literal of s, quoted. */
static void gbnf_literal(struct kvb_str *b, const char *s) {
    kvb_str_puts(b, "\"");
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') kvb_str_printf(b, "\\%c", c);
        else if (c == '\n') kvb_str_puts(b, "\\n");
        else if (c < 0x20) kvb_str_printf(b, "\\x%02X", c);
        else kvb_str_put(b, s, 1);
    }
    kvb_str_puts(b, "\"");
}

/* tool_choice required or named: the answer starts with the format's call
 * marker (j->prefill, read with the prompt: it is a control token in some
 * vocabularies, which no grammar emits), then exactly one call whose
 * arguments follow the tool's parameters schema (j->gbnf), then the end. */
static bool forced_call_grammar(const struct server *srv, const cJSON *tools, struct job *j, struct http_resp *r) {
    const enum kvb_tool_format f = srv->syntax.tools;
    const char *pre = f == KVB_TOOLS_HERMES ? "<tool_call>\n" : f == KVB_TOOLS_MISTRAL ? "[TOOL_CALLS]" : f == KVB_TOOLS_GRANITE ? "<|tool_call|>" : "";
    const char *open = f == KVB_TOOLS_MISTRAL || f == KVB_TOOLS_GRANITE ? "[{\"name\": \"" : "{\"name\": \"";
    const char *args = f == KVB_TOOLS_LLAMA3 ? "\", \"parameters\": " : "\", \"arguments\": ";
    const char *close = f == KVB_TOOLS_HERMES ? "}\n</tool_call>" : f == KVB_TOOLS_GRANITE ? "}]" : "}";
    if (f == KVB_TOOLS_HARMONY) {
        int n = cJSON_GetArraySize(tools);
        if (j->tool_choice == TOOLS_REQUIRED && n == 1) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tools, 0), "function");
            snprintf(j->tool_name, sizeof j->tool_name, "%s", cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring);
            j->tool_choice = TOOLS_NAMED;
        }
        if (j->tool_choice != TOOLS_NAMED) {
            serve_error(r, 400, "invalid_request_error", "'tool_choice': required with several tools is not implemented for harmony (gpt-oss); name the function");
            return false;
        }
    }
    if (f != KVB_TOOLS_HERMES && f != KVB_TOOLS_LLAMA3 && f != KVB_TOOLS_MISTRAL && f != KVB_TOOLS_GRANITE && f != KVB_TOOLS_HARMONY) {
        serve_error(r, 400, "invalid_request_error", "'tool_choice': kvbound cannot force a call in this model's format (%s)", kvb_tool_format_name(f));
        return false;
    }
    struct kvb_str g = {0}, alts = {0};
    int k = 0;
    const cJSON *t;
    bool ok = true;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const char *name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
        if (j->tool_choice == TOOLS_NAMED && strcmp(name, j->tool_name)) continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        char *schema = cJSON_IsObject(params) ? cJSON_PrintUnformatted(params) : NULL;
        char prefix[32], *gbnf = NULL;
        size_t gl = 0;
        snprintf(prefix, sizeof prefix, "t%d-", k);
        const char *src = schema ? schema : "{\"type\":\"object\"}";
        /* compact: no free white space between a forced call's tokens (a weak model spent max_tokens on tabs) */
        const kvb_status st = kvb_json_schema_to_gbnf_flags(src, strlen(src), prefix, KVB_SCHEMA_COMPACT, &gbnf, &gl);
        free(schema);
        if (st != KVB_OK) {
            serve_error(r, st == KVB_ERR_NOMEM ? 500 : 400, st == KVB_ERR_NOMEM ? "server_error" : "invalid_request_error", "tools[%d].function.parameters: %s", k,
                        kvb_last_error());
            ok = false;
            break;
        }
        kvb_str_put(&g, gbnf, gl);
        kvb_str_puts(&g, "\n");
        kvb_buffer_free(gbnf);
        if (f == KVB_TOOLS_HARMONY) kvb_str_printf(&alts, "%st%d-root", alts.n ? " | " : "", k);
        else {
            char lit[256];
            snprintf(lit, sizeof lit, "%.120s%s", name, args);
            kvb_str_puts(&alts, alts.n ? " | " : "");
            gbnf_literal(&alts, lit);
            kvb_str_printf(&alts, " t%d-root", k);
        }
        k++;
    }
    if (ok) {
        kvb_str_puts(&g, "root ::= ");
        if (f == KVB_TOOLS_HARMONY) kvb_str_printf(&g, "( %s )\n", alts.p ? alts.p : "\"\"");
        else {
            gbnf_literal(&g, open);
            kvb_str_printf(&g, " ( %s ) ", alts.p ? alts.p : "\"\"");
            if (f == KVB_TOOLS_MISTRAL) kvb_str_puts(&g, "\", \\\"id\\\": \\\"\" [a-zA-Z0-9]{9} \"\\\"}]\"");
            else gbnf_literal(&g, close);
            kvb_str_puts(&g, "\n");
        }
    }
    if (alts.err) g.err = alts.err; /* a call's alternative lost: the grammar is not built */
    kvb_str_free(&alts);
    if (!ok || g.err) {
        if (ok) serve_error(r, 500, "server_error", "out of memory");
        kvb_str_free(&g);
        return false;
    }
    j->gbnf = xstrdup(g.p); /* job_free free()s it */
    kvb_str_free(&g);
    if (!j->gbnf) {
        serve_error(r, 500, "server_error", "out of memory");
        return false;
    }
    if (f == KVB_TOOLS_HARMONY) {
        char buf[256];
        snprintf(buf, sizeof buf, "<|channel|>commentary to=functions.%s <|constrain|>json<|message|>", j->tool_name);
        j->prefill = xstrdup(buf);
    } else {
        j->prefill = xstrdup(pre);
    }
    if (!j->prefill) { serve_error(r, 500, "server_error", "out of memory"); return false; }
    return true;
}

/* At most `limit` requests compile grammars at once (issue 47: eight
 * big grammars at once took 30 s of CPU from the connection threads); one
 * past it waits up to wait_ms for a turn, then is answered 503 naming the
 * limit. --max-compiles (1-64, default 4) and --compile-wait-ms (0-60000,
 * default 2000) set them. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int busy, limit, wait_ms;
} g_compiles = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};

static bool compile_enter(const struct server *srv, struct http_resp *r) {
    pthread_mutex_lock(&g_compiles.mu);
    g_compiles.limit = srv->o.max_compiles > 0 ? srv->o.max_compiles : 4;
    g_compiles.wait_ms = srv->o.compile_wait_ms;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += g_compiles.wait_ms / 1000;
    until.tv_nsec += (long)(g_compiles.wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
    int rc = 0;
    while (g_compiles.busy >= g_compiles.limit && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&g_compiles.cv, &g_compiles.mu, &until);
    const bool ok = g_compiles.busy < g_compiles.limit;
    if (ok) g_compiles.busy++;
    const int limit = g_compiles.limit, wait_ms = g_compiles.wait_ms;
    pthread_mutex_unlock(&g_compiles.mu);
    if (!ok) {
        r->retry_after = 1;
        serve_error(r, 503, "server_busy", "%d grammar compilations are running (the limit, --max-compiles) and none ended within %d ms (--compile-wait-ms); retry",
                    limit, wait_ms);
    }
    return ok;
}

static void compile_leave(void) {
    pthread_mutex_lock(&g_compiles.mu);
    g_compiles.busy--;
    pthread_cond_signal(&g_compiles.cv);
    pthread_mutex_unlock(&g_compiles.mu);
}

/* tools, tool_choice, parallel_tool_calls, response_format, grammar,
 * json_schema, chat_template_kwargs, reasoning_effort. */
static bool parse_structure(const struct server *srv, const cJSON *root, struct job *j, struct http_resp *r) {
    const bool chat = j->kind == JOB_CHAT;
    const cJSON *tools = chat ? cJSON_GetObjectItemCaseSensitive(root, "tools") : NULL;
    const cJSON *choice = chat ? cJSON_GetObjectItemCaseSensitive(root, "tool_choice") : NULL;
    j->parallel_tool_calls = true;
    if (chat && !openai_get_bool(root, "parallel_tool_calls", &j->parallel_tool_calls, r)) return false;
    bool none = false;
    if (choice && !cJSON_IsNull(choice)) {
        const cJSON *fn = cJSON_IsObject(choice) ? cJSON_GetObjectItemCaseSensitive(choice, "function") : NULL;
        const cJSON *nm = fn ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
        if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "none")) none = true, j->tool_choice = TOOLS_NONE;
        else if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "auto")) j->tool_choice = TOOLS_AUTO;
        else if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "required")) j->tool_choice = TOOLS_REQUIRED;
        else if (cJSON_IsString(nm) && strlen(nm->valuestring) < sizeof j->tool_name) {
            j->tool_choice = TOOLS_NAMED;
            snprintf(j->tool_name, sizeof j->tool_name, "%s", nm->valuestring);
        } else {
            serve_error(r, 400, "invalid_request_error", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
            return false;
        }
    }
    if (tools && !cJSON_IsNull(tools)) {
        if (!cJSON_IsArray(tools)) { serve_error(r, 400, "invalid_request_error", "'tools' must be an array"); return false; }
        int k = 0;
        bool named_found = false;
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type"), *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            const cJSON *nm = fn ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL, *params = fn ? cJSON_GetObjectItemCaseSensitive(fn, "parameters") : NULL;
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsObject(fn) || !cJSON_IsString(nm) || !nm->valuestring[0] ||
                (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))) {
                serve_error(r, 400, "invalid_request_error", "tools[%d] must be {\"type\": \"function\", \"function\": {\"name\": string, \"parameters\": JSON Schema object}}", k);
                return false;
            }
            for (const char *c = nm->valuestring; *c; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '-' || *c == '.') ||
                    c - nm->valuestring >= 64) {
                    serve_error(r, 400, "invalid_request_error", "tools[%d].function.name must be 1 to 64 characters of a-z A-Z 0-9 _ - .", k);
                    return false;
                }
            if (j->tool_choice == TOOLS_NAMED && !strcmp(nm->valuestring, j->tool_name)) named_found = true;
            k++;
        }
        if (j->tool_choice == TOOLS_NAMED && !named_found) {
            serve_error(r, 400, "invalid_request_error", "'tool_choice' names '%s', which is not in 'tools'", j->tool_name);
            return false;
        }
        /* under none the model still sees the tools (OpenAI's, llama-server's and vLLM's reading) and calls none: a template that
         * cannot render them leaves them out */
        if (k && (!none || (srv->jinja && srv->tmpl_tools && srv->syntax.tools != KVB_TOOLS_HARMONY))) { /* harmony: its channels name calls */
            if (!none && (!srv->jinja || !srv->tmpl_tools || srv->syntax.tools == KVB_TOOLS_NONE)) {
                serve_error(r, 400, "invalid_request_error", "'tools': %s", !srv->jinja ? "tools need the model's Jinja chat template (serve runs without it: --no-jinja, or a template it cannot run)"
                                                                          : "the model's chat template does not render tools, or kvbound knows no tool-call format for it");
                return false;
            }
            j->tools_json = cJSON_PrintUnformatted(tools);
            if (!j->tools_json) { serve_error(r, 500, "server_error", "out of memory"); return false; }
        }
    }
    if (!j->tools_json && choice && !cJSON_IsNull(choice) && !none && j->tool_choice != TOOLS_AUTO) {
        serve_error(r, 400, "invalid_request_error", "'tool_choice' needs 'tools'");
        return false;
    }
    /* structured output */
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    const cJSON *gr = cJSON_GetObjectItemCaseSensitive(root, "grammar"), *js = cJSON_GetObjectItemCaseSensitive(root, "json_schema");
    const int n_struct = (rf && !cJSON_IsNull(rf)) + (gr && !cJSON_IsNull(gr)) + (js && !cJSON_IsNull(js));
    if (n_struct > 1) { serve_error(r, 400, "invalid_request_error", "give one of 'response_format', 'grammar' and 'json_schema'"); return false; }
    const bool forced = j->tools_json && (j->tool_choice == TOOLS_REQUIRED || j->tool_choice == TOOLS_NAMED);
    if (n_struct && forced) {
        serve_error(r, 400, "invalid_request_error", "a forced tool call ('tool_choice') and a constrained answer ('response_format', 'grammar') exclude each other");
        return false;
    }
    if (rf && !cJSON_IsNull(rf)) {
        const cJSON *type = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
        if (!cJSON_IsString(type)) { serve_error(r, 400, "invalid_request_error", "'response_format' must be an object with a 'type'"); return false; }
        if (!strcmp(type->valuestring, "json_object")) {
            const cJSON *sch = cJSON_GetObjectItemCaseSensitive(rf, "schema"); /* llama-server's */
            if (!schema_grammar(cJSON_IsObject(sch) ? sch : NULL, j, "response_format", r)) return false;
        } else if (!strcmp(type->valuestring, "json_schema")) {
            const cJSON *w = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
            const cJSON *sch = cJSON_IsObject(w) ? cJSON_GetObjectItemCaseSensitive(w, "schema") : NULL;
            if (!cJSON_IsObject(sch)) {
                serve_error(r, 400, "invalid_request_error", "'response_format': json_schema needs {\"json_schema\": {\"name\": ..., \"schema\": {...}}}");
                return false;
            }
            if (!schema_grammar(sch, j, "response_format.json_schema.schema", r)) return false;
        } else if (strcmp(type->valuestring, "text")) {
            serve_error(r, 400, "invalid_request_error", "'response_format' type '%.40s' is not text, json_object or json_schema", type->valuestring);
            return false;
        }
    }
    if (js && !cJSON_IsNull(js)) {
        if (!cJSON_IsObject(js)) { serve_error(r, 400, "invalid_request_error", "'json_schema' must be a JSON Schema object"); return false; }
        if (!schema_grammar(js, j, "json_schema", r)) return false;
    }
    if (gr && !cJSON_IsNull(gr)) {
        if (!cJSON_IsString(gr) || !gr->valuestring[0]) { serve_error(r, 400, "invalid_request_error", "'grammar' must be a GBNF grammar (a string)"); return false; }
        j->gbnf = xstrdup(gr->valuestring);
        if (!j->gbnf) { serve_error(r, 500, "server_error", "out of memory"); return false; }
    }
    if (forced && !forced_call_grammar(srv, tools, j, r)) return false;
    if (j->gbnf) {
        const kvb_status st = kvb_grammar_parse(j->gbnf, strlen(j->gbnf), NULL, &j->grammar);
        if (st != KVB_OK) {
            serve_error(r, st == KVB_ERR_NOMEM ? 500 : 400, st == KVB_ERR_NOMEM ? "server_error" : "invalid_request_error", "'%s': %s",
                        gr && !cJSON_IsNull(gr) ? "grammar" : "response_format", kvb_last_error());
            return false;
        }
    }
    /* the template's variables */
    const cJSON *kw = chat ? cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs") : NULL;
    const cJSON *effort = chat ? cJSON_GetObjectItemCaseSensitive(root, "reasoning_effort") : NULL;
    if ((kw && !cJSON_IsNull(kw)) || (effort && !cJSON_IsNull(effort))) {
        if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw)) { serve_error(r, 400, "invalid_request_error", "'chat_template_kwargs' must be an object"); return false; }
        if (effort && !cJSON_IsNull(effort) &&
            (!cJSON_IsString(effort) || (strcmp(effort->valuestring, "low") && strcmp(effort->valuestring, "medium") && strcmp(effort->valuestring, "high")))) {
            serve_error(r, 400, "invalid_request_error", "'reasoning_effort' must be low, medium or high");
            return false;
        }
        if (!srv->jinja) {
            serve_error(r, 400, "invalid_request_error", "'%s' needs the model's Jinja chat template (serve runs without it)",
                        kw && !cJSON_IsNull(kw) ? "chat_template_kwargs" : "reasoning_effort");
            return false;
        }
        cJSON *vars = kw && cJSON_IsObject(kw) ? cJSON_Duplicate(kw, true) : cJSON_CreateObject();
        if (vars && effort && cJSON_IsString(effort)) {
            cJSON_DeleteItemFromObjectCaseSensitive(vars, "reasoning_effort");
            cJSON_AddStringToObject(vars, "reasoning_effort", effort->valuestring);
        }
        j->vars_json = json_of(vars);
        if (!j->vars_json) { serve_error(r, 500, "server_error", "out of memory"); return false; }
    }
    return true;
}

bool openai_parse(struct server *srv, enum job_kind kind, const char *body, size_t len, struct job *j, struct http_resp *r) {
    cJSON *root = serve_json_body(body, len, r); /* one valid value, strictly (json_body.c) */
    if (!root) return false;
    bool ok = false;
    j->kind = kind;
    j->sp = kvb_seq_default_params();
    j->sp.kv = srv->o.kv;
    j->n_keep = srv->o.keep;
    j->sp.sampler = kvb_sampler_default_params();
    j->sp.sampler.seed = (uint64_t)(uintptr_t)j * 0x9e3779b97f4a7c15ull + (uint64_t)(serve_now() * 1e6); /* no seed given: a fresh one */
    if (srv->o.default_temp >= 0) j->sp.sampler.temp = srv->o.default_temp; /* --temp */
    if (srv->o.seed_given) j->sp.sampler.seed = srv->o.default_seed;       /* --seed */
    j->sp.max_tokens = srv->o.default_max_tokens;
    j->sp.n_ctx = srv->o.n_ctx;
    long long v = 0;
    bool given = false;
    if (!cJSON_IsObject(root)) { serve_error(r, 400, "invalid_request_error", "the request body must be a JSON object"); goto out; }
    if (!fields_known(root, kind, r)) goto out;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsString(model) && !cJSON_IsNull(model)) { serve_error(r, 400, "invalid_request_error", "'model' must be a string"); goto out; }
    if (kind == JOB_CHAT) {
        if (!parse_messages(srv, root, j, r)) goto out;
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
    bool max_given = given;
    if (!get_int(root, "max_completion_tokens", 1, srv->o.max_tokens_cap, &v, &given, r)) goto out;
    if (given) j->sp.max_tokens = (int32_t)v;
    max_given = max_given || given;
    /* llama-server's n_predict: max_tokens by another name; -1 is the most --max-tokens allows */
    if (!get_int(root, "n_predict", -1, srv->o.max_tokens_cap, &v, &given, r)) goto out;
    if (given && (max_given || v == 0)) {
        serve_error(r, 400, "invalid_request_error", "%s", v == 0 ? "'n_predict' 0 (read the prompt only) is not implemented by kvbound"
                                                                  : "give 'n_predict' or 'max_tokens' (max_completion_tokens), not both");
        goto out;
    }
    if (given) j->sp.max_tokens = v < 0 ? srv->o.max_tokens_cap : (int32_t)v;
    if (!get_num(root, "temperature", 0, 2, false, &j->sp.sampler.temp, r)) goto out;
    if (!get_num(root, "top_p", 0, 1, true, &j->sp.sampler.top_p, r)) goto out;
    if (!get_int(root, "seed", -(1ll << 53), 1ll << 53, &v, &given, r)) goto out;
    if (given) j->sp.sampler.seed = (uint64_t)v;
    if (!openai_get_bool(root, "stream", &j->stream, r)) goto out;
    if (!openai_get_bool(root, "ignore_eos", &j->sp.ignore_eos, r)) goto out; /* llama-server's extension: exactly max_tokens */
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) { serve_error(r, 400, "invalid_request_error", "'stream_options' must be an object"); goto out; }
        if (!openai_get_bool(so, "include_usage", &j->include_usage, r)) goto out;
    }
    if (!parse_stop(root, j, r)) goto out;
    if (!parse_sampling(srv, root, j, r)) goto out;
    {
        /* a request that compiles a grammar takes a turn at it: grammar, json_schema, a response_format
         * other than text, tools with a forced call (tool_choice required or named). Tools under auto (an
         * agent's every request) compile only their calls' checks, below, bounded by the schema limits:
         * they never wait behind big grammars */
        static const char *const compiles[] = {"grammar", "json_schema", "response_format", NULL};
        bool gated = false;
        for (int i = 0; compiles[i] && !gated; i++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, compiles[i]);
            const cJSON *type = i == 2 && cJSON_IsObject(x) ? cJSON_GetObjectItemCaseSensitive(x, "type") : NULL;
            gated = x && !cJSON_IsNull(x) && !(cJSON_IsString(type) && !strcmp(type->valuestring, "text"));
        }
        if (!gated && kind == JOB_CHAT) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tools"), *c = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
            gated = cJSON_IsArray(t) && cJSON_GetArraySize(t) > 0 && c && !cJSON_IsNull(c) &&
                    !(cJSON_IsString(c) && (!strcmp(c->valuestring, "auto") || !strcmp(c->valuestring, "none")));
        }
        if (gated && !compile_enter(srv, r)) goto out;
        const bool structured = parse_structure(srv, root, j, r);
        if (gated) compile_leave();
        if (!structured) goto out;
    }
    if (j->tools_json && j->tool_choice == TOOLS_AUTO && kind == JOB_CHAT && srv->jinja) {
        /* a call must name a tool of the request and match its parameters, else it stays content (issue 47):
         * the tools' schemas are parsed and compiled here, on this request's thread, once, and never on
         * the scheduler's (output.c sets the syntax at admission). A forced call needs no check: its
         * grammar makes it one of the tools, with its parameters. */
        struct kvb_chat_syntax syn = srv->syntax;
        kvb_status st = kvb_chat_parser_new(&syn, &j->parser);
        if (st == KVB_OK) st = kvb_chat_parser_tools(j->parser, j->tools_json, strlen(j->tools_json));
        if (st != KVB_OK) {
            if (st == KVB_ERR_NOMEM) serve_error(r, 500, "server_error", "'tools': %s", kvb_last_error());
            else serve_error(r, 400, "invalid_request_error", "'tools' must be nested at most 64 deep (kvbound reads them to check the calls): %s", kvb_last_error());
            goto out;
        }
    }
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
    if (!get_int(root, "n_keep", -1, KVB_KEEP_MAX, &v, &j->n_keep_given, r)) goto out; /* llama.cpp's: -1 the instruction span, 0 none */
    if (j->n_keep_given) j->n_keep = (int32_t)v;
    if (j->sp.kv.policy.id == KVB_POLICY_FULL) j->sp.kv.recall = (struct kvb_recall_params){0}; /* recall is for bounded sessions; a session keeps its first turn's (its image holds them) */
    if (j->sp.kv.policy.id != KVB_POLICY_FULL && j->sp.kv.policy.n_sink >= j->sp.kv.policy.budget) {
        serve_error(r, 400, "invalid_request_error", "'kv_sinks' (%d) must be below the budget (%d)", (int)j->sp.kv.policy.n_sink, (int)j->sp.kv.policy.budget);
        goto out;
    }
    const cJSON *salt = cJSON_GetObjectItemCaseSensitive(root, "cache_salt"); /* vLLM's: reuse only between requests with the same */
    if (salt && !cJSON_IsNull(salt)) {
        if (!cJSON_IsString(salt) || !salt->valuestring[0] || strlen(salt->valuestring) > SERVE_SALT_MAX) {
            serve_error(r, 400, "invalid_request_error", "'cache_salt' must be a string of 1 to %d bytes", SERVE_SALT_MAX);
            goto out;
        }
        j->salt_given = true;
        snprintf(j->cache_salt, sizeof j->cache_salt, "%s", salt->valuestring);
    }
    const cJSON *sid = cJSON_GetObjectItemCaseSensitive(root, "session_id");
    if (sid && !cJSON_IsNull(sid)) {
        if (!cJSON_IsString(sid) || !session_id_ok(sid->valuestring)) {
            serve_error(r, 400, "invalid_request_error", "'session_id' must be 1 to %d characters of A-Z a-z 0-9 . _ -", SERVE_ID_MAX);
            goto out;
        }
        snprintf(j->session_id, sizeof j->session_id, "%s", sid->valuestring);
    }
    if (j->answer_prefix && (j->session_id[0] || j->gbnf || (j->tools_json && j->tool_choice != TOOLS_NONE))) {
        serve_error(r, 400, "invalid_request_error", "a final assistant message (a prefill the answer continues) cannot go with %s",
                    j->session_id[0] ? "'session_id' (a session's turn ends with a user or tool message)"
                    : j->gbnf ? "a grammar, a schema or a forced tool call (they constrain the whole answer)" : "'tools'");
        goto out;
    }
    ok = true;
out:
    cJSON_Delete(root);
    return ok;
}

/* ---- responses ---- */

/* The kvbound object's pinned span (keep) and implicit session (implicit); llama-server's /completion answer has them too (native.c). */
void openai_kvbound_state(const struct job *j, struct cJSON *k) {
    if (j->implicit) { /* implicit sessions: the checkpoint resumed (null: none) and the one this turn's end was stored as */
        cJSON *im = cJSON_AddObjectToObject(k, "implicit");
        if (j->resumed[0]) cJSON_AddStringToObject(im, "resumed", j->resumed);
        else cJSON_AddNullToObject(im, "resumed");
        if (j->kind == JOB_CHAT) cJSON_AddNumberToObject(im, "messages", j->hit >= 0 ? j->cand_msgs[j->hit] : 0);
        cJSON_AddNumberToObject(im, "tokens", j->implicit_tokens);
        if (j->stored[0]) cJSON_AddStringToObject(im, "checkpoint", j->stored);
        else cJSON_AddNullToObject(im, "checkpoint");
    }
    if (j->keep_span > 0) { /* the pinned span: what n_keep named, what is pinned of it, and whether --keep-max cut it */
        cJSON *p = cJSON_AddObjectToObject(k, "keep");
        cJSON_AddNumberToObject(p, "pinned", j->keep_pinned);
        cJSON_AddNumberToObject(p, "span", j->keep_span);
        cJSON_AddBoolToObject(p, "capped", j->keep_pinned < j->keep_span);
    }
}

static void add_kvbound(const struct job *j, cJSON *o) {
    cJSON *k = cJSON_AddObjectToObject(o, "kvbound");
    if (j->session_id[0]) cJSON_AddStringToObject(k, "session_id", j->session_id);
    cJSON_AddStringToObject(k, "kv_policy", kvb_policy_name(j->sp.kv.policy.id));
    cJSON_AddNumberToObject(k, "kv_budget", j->sp.kv.policy.budget);
    cJSON_AddNumberToObject(k, "position", (double)j->position);
    cJSON_AddNumberToObject(k, "cache_tokens", (double)j->cache_tokens);
    cJSON_AddNumberToObject(k, "kv_bytes", (double)j->kv_bytes);
    if (j->sp.kv.recall.pages > 0) cJSON_AddNumberToObject(k, "cold_pages", (double)j->cold_pages);
    openai_kvbound_state(j, k);
    if (j->n_warnings) { /* a prompt past the budget or the trained length (job.c) */
        cJSON *w = cJSON_AddArrayToObject(k, "warnings");
        for (int i = 0; i < j->n_warnings; i++) cJSON_AddItemToArray(w, cJSON_CreateString(j->warnings[i]));
    }
}

static void add_usage(const struct job *j, cJSON *o) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", j->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", j->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", j->prompt_tokens + j->completion_tokens);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details"); /* OpenAI's: prompt tokens served from a cache */
    cJSON_AddNumberToObject(d, "cached_tokens", j->cached_tokens);
}

static void emit(cJSON *o, struct kvb_str *out, bool sse) {
    char *s = cJSON_PrintUnformatted(o);
    if (!s) { out->err = KVB_ERR_NOMEM; cJSON_Delete(o); return; }
    if (sse) kvb_str_puts(out, "data: ");
    kvb_str_puts(out, s);
    kvb_str_puts(out, sse ? "\n\n" : "\n");
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

/* Logprob lines (output.c) as OpenAI's: chat {"content": [...]}, or the
 * completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. */
static cJSON *logprobs_object(const struct job *j, const char *lines, size_t n, size_t text_at) {
    cJSON *content = cJSON_CreateArray();
    for (size_t at = 0; at < n;) {
        const char *nl = memchr(lines + at, '\n', n - at);
        const size_t len = nl ? (size_t)(nl - lines - at) : n - at;
        cJSON *e = cJSON_ParseWithLength(lines + at, len);
        if (e) cJSON_AddItemToArray(content, e);
        at += len + 1;
    }
    if (j->kind == JOB_CHAT) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "content", content);
        return o;
    }
    cJSON *o = cJSON_CreateObject(), *toks = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    const cJSON *e;
    cJSON_ArrayForEach(e, content) {
        const cJSON *tok = cJSON_GetObjectItemCaseSensitive(e, "token");
        cJSON_AddItemToArray(toks, cJSON_CreateString(cJSON_IsString(tok) ? tok->valuestring : ""));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(cJSON_GetObjectItemCaseSensitive(e, "logprob")->valuedouble));
        cJSON *top = cJSON_CreateObject();
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(e, "top_logprobs")) {
            const cJSON *tt = cJSON_GetObjectItemCaseSensitive(t, "token");
            if (cJSON_IsString(tt) && !cJSON_GetObjectItemCaseSensitive(top, tt->valuestring))
                cJSON_AddNumberToObject(top, tt->valuestring, cJSON_GetObjectItemCaseSensitive(t, "logprob")->valuedouble);
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)text_at));
        text_at += cJSON_IsString(tok) ? strlen(tok->valuestring) : 0;
    }
    cJSON_Delete(content);
    return o;
}

/* The parser's message, with parallel_tool_calls false cut to its first call. */
static cJSON *parsed_message(const struct job *j) {
    cJSON *m = cJSON_Parse(j->message);
    if (!m) return NULL;
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!j->parallel_tool_calls && cJSON_IsArray(calls))
        while (cJSON_GetArraySize(calls) > 1) cJSON_DeleteItemFromArray(calls, cJSON_GetArraySize(calls) - 1);
    return m;
}

/* finish_reason: tool_calls when the answer is calls */
static const char *finish_of(const struct job *j) {
    if (j->finish && !strcmp(j->finish, "length")) return "length";
    return j->parser && kvb_chat_parser_n_calls(j->parser) > 0 ? "tool_calls" : j->finish ? j->finish : "stop";
}

void openai_response(const struct server *srv, const struct job *j, struct kvb_str *out) {
    if (j->replay) { kvb_str_puts(out, j->replay); return; } /* a retry of a stored turn (Idempotency-Key): its answer as stored */
    const bool chat = j->kind == JOB_CHAT;
    cJSON *o = head(srv, j, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    char *text = malloc(j->text.n + 1);
    if (text) {
        memcpy(text, j->text.p ? j->text.p : "", j->text.n);
        text[j->text.n] = 0;
    }
    if (chat) {
        cJSON *m = j->message ? parsed_message(j) : NULL;
        if (m) cJSON_AddItemToObject(c, "message", m);
        else {
            m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddStringToObject(m, "content", text ? text : "");
        }
    } else {
        cJSON_AddStringToObject(c, "text", text ? text : "");
    }
    free(text);
    if (j->logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs_object(j, j->lp.p, j->lp.n, 0));
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", finish_of(j));
    cJSON_AddItemToArray(choices, c);
    add_usage(j, o);
    add_kvbound(j, o);
    emit(o, out, false);
}

void openai_replay_stream(const struct server *srv, const struct job *j, struct kvb_str *out) {
    (void)srv;
    cJSON *a = cJSON_Parse(j->replay);
    const bool chat = j->kind == JOB_CHAT;
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(a, "choices"), 0);
    if (!cJSON_IsObject(a) || !cJSON_IsObject(c0)) { cJSON_Delete(a); out->err = KVB_ERR_NOMEM; return; }
    const char *const keep[] = {"id", "created", "model"};
    cJSON *ev[3];
    for (int e = 0; e < 3; e++) { /* the whole answer, its end, its usage: each with the stored id, created and model */
        ev[e] = cJSON_CreateObject();
        cJSON_AddItemToObject(ev[e], "id", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(a, keep[0]), true));
        cJSON_AddStringToObject(ev[e], "object", chat ? "chat.completion.chunk" : "text_completion");
        for (int k = 1; k < 3; k++) cJSON_AddItemToObject(ev[e], keep[k], cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(a, keep[k]), true));
    }
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(c0, "logprobs");
    for (int e = 0; e < 2; e++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", 0);
        if (chat) {
            cJSON *d = e ? cJSON_CreateObject() : cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(c0, "message"), true);
            if (!cJSON_IsObject(d)) { cJSON_Delete(d); d = cJSON_CreateObject(); }
            cJSON *calls = cJSON_GetObjectItemCaseSensitive(d, "tool_calls"), *call;
            int i = 0;
            cJSON_ArrayForEach(call, calls) cJSON_AddNumberToObject(call, "index", i++); /* a delta's calls are indexed */
            cJSON_AddItemToObject(c, "delta", d);
        } else {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(c0, "text");
            cJSON_AddStringToObject(c, "text", !e && cJSON_IsString(t) ? t->valuestring : "");
        }
        cJSON_AddItemToObject(c, "logprobs", !e && lp ? cJSON_Duplicate(lp, true) : cJSON_CreateNull());
        cJSON_AddItemToObject(c, "finish_reason", e ? cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(c0, "finish_reason"), true) : cJSON_CreateNull());
        cJSON_AddItemToArray(cJSON_AddArrayToObject(ev[e], "choices"), c);
    }
    cJSON_AddItemToObject(ev[1], "kvbound", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(a, "kvbound"), true));
    cJSON_AddArrayToObject(ev[2], "choices");
    cJSON_AddItemToObject(ev[2], "usage", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(a, "usage"), true));
    cJSON_AddItemToObject(ev[2], "kvbound", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(a, "kvbound"), true));
    cJSON_Delete(a);
    emit(ev[0], out, true);
    emit(ev[1], out, true);
    if (j->include_usage) emit(ev[2], out, true);
    else cJSON_Delete(ev[2]);
    kvb_str_puts(out, "data: [DONE]\n\n");
}

/* One event of a chat stream with the parser's delta (a JSON object). */
void openai_delta_chunk(const struct server *srv, const struct job *j, const char *delta, size_t n, const char *lp, size_t lp_n, struct kvb_str *out) {
    cJSON *o = head(srv, j, "chat.completion.chunk");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON *d = cJSON_ParseWithLength(delta, n);
    if (!cJSON_IsObject(d)) { cJSON_Delete(d); d = cJSON_CreateObject(); }
    if (!j->parallel_tool_calls) { /* calls past the first are not shown */
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(d, "tool_calls");
        for (int i = cJSON_GetArraySize(calls) - 1; i >= 0; i--) {
            const cJSON *ix = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(calls, i), "index");
            if (cJSON_IsNumber(ix) && ix->valueint > 0) cJSON_DeleteItemFromArray(calls, i);
        }
        if (calls && !cJSON_GetArraySize(calls)) cJSON_DeleteItemFromObjectCaseSensitive(d, "tool_calls");
    }
    cJSON_AddItemToObject(c, "delta", d);
    if (j->logprobs && lp_n) cJSON_AddItemToObject(c, "logprobs", logprobs_object(j, lp, lp_n, 0));
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    emit(o, out, true);
}

void openai_chunk(const struct server *srv, const struct job *j, const char *delta, size_t n, bool role, const char *finish, bool usage_only,
                  const char *lp, size_t lp_n, struct kvb_str *out) {
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
        if (n || (role && !j->parser)) cJSON_AddStringToObject(d, "content", text ? text : "");
    } else {
        cJSON_AddStringToObject(c, "text", text ? text : "");
    }
    free(text);
    if (j->logprobs && lp_n) cJSON_AddItemToObject(c, "logprobs", logprobs_object(j, lp, lp_n, 0));
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", chat ? finish_of(j) : finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    if (finish) add_kvbound(j, o);
    emit(o, out, true);
}

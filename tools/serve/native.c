/*
 * native.c — llama-server's own completion route, POST /completion, in
 * its answer's shape, for clients written against llama-server: the
 * request is a completion's (openai.c reads it: prompt, n_predict or
 * max_tokens, temperature, stream, stop, the sampling fields), the answer
 *   {"content": TEXT, "stop": true, "stop_type": "eos"|"limit"|"word",
 *    "stopping_word", "tokens_predicted", "tokens_evaluated", "model",
 *    "kvbound": {...}}
 * and a stream is server-sent events of {"content": PIECE, "stop": false}
 * ending with one whose "stop" is true and carries the figures (no
 * [DONE], as llama-server sends none on this route). A streamed retry of a
 * stored turn (Idempotency-Key) is its stored answer as that one last event.
 */
#include "serve.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char *stop_type(const struct job *j) {
    if (j->finish && !strcmp(j->finish, "length")) return "limit";
    return j->stop_word ? "word" : "eos";
}

static void emit(cJSON *o, struct kvb_str *out, bool sse) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s) { out->err = KVB_ERR_NOMEM; return; }
    if (sse) kvb_str_puts(out, "data: ");
    kvb_str_puts(out, s);
    kvb_str_puts(out, sse ? "\n\n" : "\n");
    free(s);
}

/* The figures of a finished answer (its last event, or the whole answer). */
static void add_final(const struct server *srv, const struct job *j, cJSON *o) {
    cJSON_AddBoolToObject(o, "stop", true);
    cJSON_AddStringToObject(o, "stop_type", stop_type(j));
    cJSON_AddStringToObject(o, "stopping_word", ""); /* the stop string is cut from the text; which one is not kept */
    cJSON_AddStringToObject(o, "model", srv->o.model_name);
    cJSON_AddNumberToObject(o, "tokens_predicted", j->completion_tokens);
    cJSON_AddNumberToObject(o, "tokens_evaluated", j->prompt_tokens);
    cJSON *k = cJSON_AddObjectToObject(o, "kvbound");
    cJSON_AddStringToObject(k, "kv_policy", kvb_policy_name(j->sp.kv.policy.id));
    cJSON_AddNumberToObject(k, "kv_budget", j->sp.kv.policy.budget);
    cJSON_AddNumberToObject(k, "position", (double)j->position);
    cJSON_AddNumberToObject(k, "cache_tokens", (double)j->cache_tokens);
    openai_kvbound_state(j, k);
    if (j->n_warnings) {
        cJSON *w = cJSON_AddArrayToObject(k, "warnings");
        for (int i = 0; i < j->n_warnings; i++) cJSON_AddItemToArray(w, cJSON_CreateString(j->warnings[i]));
    }
}

void native_response(const struct server *srv, const struct job *j, struct kvb_str *out) {
    if (j->replay) { kvb_str_puts(out, j->replay); return; } /* a retry of a stored turn (Idempotency-Key): its answer as stored */
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "content", j->text.p ? j->text.p : "");
        add_final(srv, j, o);
    }
    emit(o, out, false);
}

/* A streamed retry of a stored turn: the stored answer (its whole content, stop true, the figures) as the one event. */
void native_replay_stream(const struct job *j, struct kvb_str *out) { emit(cJSON_Parse(j->replay), out, true); }

void native_chunk(const struct server *srv, const struct job *j, const char *text, size_t n, bool final, struct kvb_str *out) {
    cJSON *o = cJSON_CreateObject();
    char *t = malloc(n + 1);
    if (o && t) {
        if (n) memcpy(t, text, n);
        t[n] = 0;
        cJSON_AddStringToObject(o, "content", t);
        if (final) add_final(srv, j, o);
        else cJSON_AddBoolToObject(o, "stop", false);
    } else {
        cJSON_Delete(o);
        o = NULL;
    }
    free(t);
    emit(o, out, true);
}

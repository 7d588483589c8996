/*
 * extras.c — llama-server's utility routes, for clients written against it:
 *   GET  /v1/models/{id}   the one model (404 for another id)
 *   POST /tokenize         {"content", "add_special", "parse_special", "with_pieces"} -> {"tokens"}
 *   POST /detokenize       {"tokens"} -> {"content"}
 *   GET  /props            the server's settings: slots, context, template, model
 * Request fields are checked like the OpenAI routes' (a field kvbound does
 * not read is a 400 naming it); all of it runs on the connection thread:
 * the vocabulary is immutable.
 */
#include "serve.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXTRAS_MAX_TOKENS (1 << 20)

static void model_object(const struct server *srv, struct kvb_str *b) {
    kvb_str_puts(b, "{\"id\":");
    kvb_str_json(b, srv->o.model_name, strlen(srv->o.model_name), 0);
    kvb_str_printf(b, ",\"object\":\"model\",\"created\":0,\"owned_by\":\"kvbound\",\"kvbound\":{\"arch\":\"%s\",\"n_ctx_train\":%d,"
                 "\"kv_policy\":\"%s\",\"kv_budget\":%d,\"max_budget\":%d}}",
              srv->mi.arch, (int)srv->mi.n_ctx_train, kvb_policy_name(srv->o.kv.policy.id), (int)srv->o.kv.policy.budget, srv->o.max_budget);
}

void serve_models(const struct server *srv, const char *id, struct http_resp *r) {
    if (id && strcmp(id, srv->o.model_name)) {
        serve_error(r, 404, "not_found", "no model '%.200s' (this server has '%.200s')", id, srv->o.model_name);
        return;
    }
    r->status = 200;
    r->content_type = "application/json";
    if (!id) kvb_str_puts(&r->body, "{\"object\":\"list\",\"data\":[");
    model_object(srv, &r->body);
    kvb_str_puts(&r->body, id ? "\n" : "]}\n");
}

static cJSON *body_object(const struct http_req *q, const char *const *known, struct http_resp *r) {
    cJSON *root = serve_json_body(q->body, q->body_len, r);
    if (!root) return NULL;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        serve_error(r, 400, "invalid_request_error", "the request body must be a JSON object");
        return NULL;
    }
    const char *unknown = openai_unknown_field(root, known);
    if (unknown) {
        serve_error(r, 400, "invalid_request_error", "'%.80s' is not implemented by kvbound", unknown);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

void serve_tokenize(const struct server *srv, const struct http_req *q, struct http_resp *r) {
    static const char *const known[] = {"content", "add_special", "parse_special", "with_pieces", "model", NULL};
    cJSON *root = body_object(q, known, r);
    if (!root) return;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "content");
    if (!srv->vocab) { /* the fuzz target's server has no model */
        cJSON_Delete(root);
        serve_error(r, 503, "server_busy", "no model");
        return;
    }
    bool add_special = false, parse_special = true, pieces = false;
    int32_t *ids = NULL, n = 0;
    if (!cJSON_IsString(c)) { serve_error(r, 400, "invalid_request_error", "'content' is required and must be a string"); goto out; }
    if (!openai_get_bool(root, "add_special", &add_special, r) || !openai_get_bool(root, "parse_special", &parse_special, r) ||
        !openai_get_bool(root, "with_pieces", &pieces, r))
        goto out;
    if (kvb_vocab_tokenize(srv->vocab, c->valuestring, strlen(c->valuestring), add_special, parse_special, &ids, &n) != KVB_OK) {
        serve_error(r, 500, "server_error", "tokenize: %s", kvb_last_error());
        goto out;
    }
    r->status = 200;
    r->content_type = "application/json";
    kvb_str_puts(&r->body, "{\"tokens\":[");
    for (int32_t i = 0; i < n; i++) {
        if (i) kvb_str_puts(&r->body, ",");
        if (!pieces) { kvb_str_printf(&r->body, "%d", (int)ids[i]); continue; }
        char piece[512];
        size_t pl = kvb_vocab_token_bytes(srv->vocab, ids[i], true, piece, sizeof piece - 1);
        if (pl > sizeof piece - 1) pl = sizeof piece - 1;
        piece[pl] = 0;
        kvb_str_printf(&r->body, "{\"id\":%d,\"piece\":", (int)ids[i]);
        if (utf8_valid(piece, pl)) kvb_str_json(&r->body, piece, strlen(piece), 0);
        else { /* part of a character: its bytes, as llama-server gives them */
            kvb_str_puts(&r->body, "[");
            for (size_t k = 0; k < pl; k++) kvb_str_printf(&r->body, "%s%u", k ? "," : "", (unsigned)(unsigned char)piece[k]);
            kvb_str_puts(&r->body, "]");
        }
        kvb_str_puts(&r->body, "}");
    }
    kvb_str_puts(&r->body, "]}\n");
out:
    kvb_buffer_free(ids);
    cJSON_Delete(root);
}

void serve_detokenize(const struct server *srv, const struct http_req *q, struct http_resp *r) {
    static const char *const known[] = {"tokens", "model", NULL};
    cJSON *root = body_object(q, known, r);
    if (!root) return;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    struct kvb_str text = {0};
    if (!srv->vocab) {
        cJSON_Delete(root);
        serve_error(r, 503, "server_busy", "no model");
        return;
    }
    const int32_t V = srv->mi.n_vocab;
    if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) > EXTRAS_MAX_TOKENS) {
        serve_error(r, 400, "invalid_request_error", "'tokens' is required: an array of at most %d token ids", EXTRAS_MAX_TOKENS);
        goto out;
    }
    struct kvb_detok dt = {0};
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, t) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 || e->valuedouble >= V) {
            serve_error(r, 400, "invalid_request_error", "tokens[%d] is no token id of this model (0..%d)", i, (int)V - 1);
            goto out;
        }
        char piece[512];
        const size_t pl = kvb_detok_push(srv->vocab, &dt, (int32_t)e->valuedouble, true, piece, sizeof piece);
        if (pl <= sizeof piece) kvb_str_put(&text, piece, pl);
        i++;
    }
    char tail[8];
    const size_t tl = kvb_detok_flush(&dt, tail, sizeof tail);
    struct kvb_str clean = {0};
    sb_put_utf8(&clean, text.p ? text.p : "", text.n);
    sb_put_utf8(&clean, tail, tl);
    kvb_str_put(&clean, "", 1);
    if (text.err || clean.err) { kvb_str_free(&clean); serve_error(r, 500, "server_error", "out of memory"); goto out; }
    r->status = 200;
    r->content_type = "application/json";
    kvb_str_puts(&r->body, "{\"content\":");
    kvb_str_json(&r->body, clean.p, strlen(clean.p), 0);
    kvb_str_puts(&r->body, "}\n");
    kvb_str_free(&clean);
out:
    kvb_str_free(&text);
    cJSON_Delete(root);
}

void serve_props(const struct server *srv, struct http_resp *r) {
    if (!srv->vocab) { serve_error(r, 503, "server_busy", "no model"); return; }
    cJSON *o = cJSON_CreateObject();
    cJSON *g = cJSON_AddObjectToObject(o, "default_generation_settings");
    const struct kvb_sampler_params sp = kvb_sampler_default_params();
    cJSON_AddNumberToObject(g, "n_ctx", srv->o.n_ctx ? srv->o.n_ctx : srv->mi.n_ctx_train);
    cJSON *p = cJSON_AddObjectToObject(g, "params");
    cJSON_AddNumberToObject(p, "temperature", srv->o.default_temp >= 0 ? srv->o.default_temp : sp.temp); /* --temp */
    if (srv->o.seed_given) cJSON_AddNumberToObject(p, "seed", (double)srv->o.default_seed);                  /* --seed */
    cJSON_AddNumberToObject(p, "top_k", sp.top_k);
    cJSON_AddNumberToObject(p, "top_p", sp.top_p);
    cJSON_AddNumberToObject(p, "min_p", sp.min_p);
    cJSON_AddNumberToObject(p, "repeat_penalty", sp.repeat_penalty);
    cJSON_AddNumberToObject(p, "repeat_last_n", sp.repeat_last_n);
    cJSON_AddNumberToObject(p, "n_predict", srv->o.default_max_tokens);
    cJSON_AddNumberToObject(o, "total_slots", srv->o.parallel);
    cJSON_AddStringToObject(o, "model_alias", srv->o.model_name);
    cJSON_AddStringToObject(o, "model_path", srv->o.model_path);
    cJSON_AddStringToObject(o, "chat_template", srv->jinja && srv->template_text ? srv->template_text : kvb_chat_style_name(srv->style));
    cJSON_AddBoolToObject(o, "jinja", srv->jinja);
    cJSON_AddStringToObject(o, "tool_call_format", srv->jinja ? kvb_tool_format_name(srv->syntax.tools) : "none");
    struct kvb_vocab_info vi;
    kvb_vocab_get_info(srv->vocab, &vi);
    char tok[256];
    size_t n = vi.bos >= 0 ? kvb_vocab_token_bytes(srv->vocab, vi.bos, true, tok, sizeof tok - 1) : 0;
    tok[n < sizeof tok ? n : sizeof tok - 1] = 0;
    cJSON_AddStringToObject(o, "bos_token", utf8_valid(tok, strlen(tok)) ? tok : "");
    n = vi.eos >= 0 ? kvb_vocab_token_bytes(srv->vocab, vi.eos, true, tok, sizeof tok - 1) : 0;
    tok[n < sizeof tok ? n : sizeof tok - 1] = 0;
    cJSON_AddStringToObject(o, "eos_token", utf8_valid(tok, strlen(tok)) ? tok : "");
    cJSON *m = cJSON_AddObjectToObject(o, "modalities");
    cJSON_AddBoolToObject(m, "vision", false);
    cJSON_AddBoolToObject(m, "audio", false);
    cJSON *k = cJSON_AddObjectToObject(o, "kvbound");
    cJSON_AddStringToObject(k, "arch", srv->mi.arch);
    cJSON_AddStringToObject(k, "kv_policy", kvb_policy_name(srv->o.kv.policy.id));
    cJSON_AddNumberToObject(k, "kv_budget", srv->o.kv.policy.budget);
    cJSON_AddNumberToObject(k, "max_budget", srv->o.max_budget);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) { serve_error(r, 500, "server_error", "out of memory"); return; }
    r->status = 200;
    r->content_type = "application/json";
    kvb_str_puts(&r->body, s);
    kvb_str_puts(&r->body, "\n");
    free(s);
}

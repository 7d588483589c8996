/*
 * chat_jinja.c — kvb_chat_apply: a conversation through the model's own Jinja
 * chat template (jinja.c), with the variables transformers'
 * apply_chat_template provides, and the signature families
 * (chat_template.c) as the fallback when the template is absent or uses
 * something outside the interpreter's subset.
 */
#include "jinja.h"
#include "../tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>

struct kvb_chat_apply_params kvb_chat_apply_default_params(void) {
    return (struct kvb_chat_apply_params){.add_generation_prompt = true};
}

/* s as a JSON string literal (kvb_malloc'ed), or NULL */
static char *json_quote(const char *s) {
    struct kvb_str b = {0};
    kvb_str_json(&b, s, strlen(s), 0);
    return kvb_str_finish(&b, NULL);
}

static void set_why(const struct kvb_chat_apply_params *p, const char *fmt, const char *a) {
    if (p->why && p->why_cap) snprintf(p->why, p->why_cap, fmt, a);
}

static kvb_status fall_back(const struct kvb_chat_apply_params *p, const char *tmpl, char **out, size_t *len) {
    enum kvb_chat_style style = KVB_CHAT_CHATML;
    if (tmpl) kvb_chat_detect(tmpl, &style);
    else if (p->vocab) kvb_chat_style_for_vocab(p->vocab, &style, NULL);
    struct kvb_chat_message *msgs;
    int32_t n;
    void *block;
    char msg[256];
    kvb_status st = jjson_simple_messages(p->messages_json, &msgs, &n, &block, msg, sizeof msg);
    if (st != KVB_OK) return kvb_fail(st, "chat_apply: %s", msg);
    st = kvb_chat_format(style, msgs, n, p->add_generation_prompt, out, len);
    kvb_free(block);
    return st == KVB_OK ? KVB_FALLBACK : st;
}

kvb_status kvb_chat_apply(const struct kvb_chat_apply_params *p, char **out, size_t *len) {
    if (!p || !out) return kvb_fail(KVB_ERR_INVALID, "chat_apply: NULL argument");
    *out = NULL;
    if (len) *len = 0;
    if (p->why && p->why_cap) p->why[0] = 0;
    if (!p->messages_json) return kvb_fail(KVB_ERR_INVALID, "chat_apply: messages_json is NULL");
    char msg[256];
    kvb_status st = jjson_check("messages", p->messages_json, '[', true, msg, sizeof msg);
    if (st == KVB_OK && p->tools_json) st = jjson_check("tools", p->tools_json, '[', false, msg, sizeof msg);
    if (st == KVB_OK && p->vars_json) st = jjson_check("extra variables", p->vars_json, '{', false, msg, sizeof msg);
    if (st != KVB_OK) return kvb_fail(st, "chat_apply: %s", msg);
    const char *tmpl = p->template_text ? p->template_text : p->vocab ? p->vocab->chat_template : NULL;
    if (!tmpl) {
        if (!p->fallback) return kvb_fail(KVB_ERR_INVALID, "chat_apply: no template (the vocabulary has no tokenizer.chat_template)");
        set_why(p, "%s", "the model has no chat template");
        return fall_back(p, NULL, out, len);
    }
    char *bos = NULL, *eos = NULL;
    if (p->vocab && p->vocab->bos >= 0 && p->vocab->bos < p->vocab->n) bos = json_quote(kvb_vocab_text(p->vocab, p->vocab->bos));
    if (p->vocab && p->vocab->eos >= 0 && p->vocab->eos < p->vocab->n) eos = json_quote(kvb_vocab_text(p->vocab, p->vocab->eos));
    const char *names[] = {"messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token"};
    const char *json[] = {p->messages_json, p->tools_json ? p->tools_json : "null", "null", p->add_generation_prompt ? "true" : "false", bos, eos};
    struct jinja_limits lim = {.max_output = p->max_output, .deadline_ms = p->deadline_ms};
    struct jinja_input in = {.src = tmpl, .src_len = strlen(tmpl), .names = names, .json = json, .n_vars = 6, .vars_object = p->vars_json, .limits = &lim};
    size_t rlen = 0;
    st = jinja_render(&in, out, &rlen, msg, sizeof msg);
    if (len) *len = rlen;
    kvb_free(bos);
    kvb_free(eos);
    if (st == KVB_OK) {
        if (p->strip_bos && p->vocab && p->vocab->add_bos && p->vocab->bos >= 0 && p->vocab->bos < p->vocab->n) { /* as llama.cpp: only a BOS the tokenizer adds again */
            const char *t = kvb_vocab_text(p->vocab, p->vocab->bos);
            size_t tl = strlen(t);
            if (tl && rlen >= tl && !memcmp(*out, t, tl)) {
                memmove(*out, *out + tl, rlen - tl + 1);
                if (len) *len -= tl;
            }
        }
        return KVB_OK;
    }
    if (st == KVB_ERR_UNSUPPORTED && p->fallback) {
        set_why(p, "the chat template uses something kvbound's Jinja interpreter lacks (%s); using its signature family", msg);
        return fall_back(p, tmpl, out, len);
    }
    return kvb_fail(st, "chat template: %s", msg[0] ? msg : kvb_status_str(st));
}

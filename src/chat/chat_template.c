/*
 * chat_template.c — conversations in the prompt format a model was trained
 * on. GGUF files carry the Hugging Face Jinja template; rather than run a
 * Jinja interpreter we recognize the template by signature strings (as
 * llama.cpp does) and render that family with code:
 *
 *   chatml   <|im_start|>ROLE\nCONTENT<|im_end|>\n ... <|im_start|>assistant\n
 *   llama3   <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT.strip()<|eot_id|>
 *   llama2   [INST] <<SYS>>\nSYS\n<</SYS>>\n\nUSER [/INST] ANSWER </s><s>[INST] USER [/INST]
 *   mistral  [INST] USER[/INST] ANSWER</s>[INST] SYS\n\nUSER[/INST]   (v3/v0.3:
 *            the system message goes with the last user turn)
 *   gemma    <start_of_turn>user\nSYS\n\nUSER.strip()<end_of_turn>\n<start_of_turn>model\n
 *            (Gemma 3's template; Gemma 2's refuses a system message, which we
 *            fold into the first user turn the same way)
 *
 * The BOS text at the very start is left out: tokenizing with add_special
 * adds the BOS id, and later "<s>" texts become BOS with parse_special.
 */
#include "../tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const k_style_name[] = {"chatml", "llama3", "llama2", "mistral", "plain", "gemma"};
#define N_STYLES 6

const char *kvb_chat_style_name(enum kvb_chat_style s) { return (unsigned)s < N_STYLES ? k_style_name[s] : "?"; }

kvb_status kvb_chat_style_from_name(const char *name, enum kvb_chat_style *style) {
    for (int i = 0; name && i < N_STYLES; i++)
        if (!strcmp(name, k_style_name[i])) {
            *style = (enum kvb_chat_style)i;
            return KVB_OK;
        }
    return kvb_fail(KVB_ERR_INVALID, "chat template '%s' unknown (chatml, llama3, llama2, mistral, gemma, plain)", name ? name : "(null)");
}

kvb_status kvb_chat_detect(const char *t, enum kvb_chat_style *style) {
    if (!t || !style) return kvb_fail(KVB_ERR_INVALID, "chat_detect: NULL argument");
    if (strstr(t, "<start_of_turn>") && strstr(t, "<end_of_turn>")) *style = KVB_CHAT_GEMMA;
    else if (strstr(t, "<|im_start|>")) *style = KVB_CHAT_CHATML;
    else if (strstr(t, "<|start_header_id|>") && strstr(t, "<|eot_id|>")) *style = KVB_CHAT_LLAMA3;
    else if (strstr(t, "[INST]") && strstr(t, "<<SYS>>")) *style = KVB_CHAT_LLAMA2;
    else if (strstr(t, "[INST]")) *style = KVB_CHAT_MISTRAL;
    else {
        *style = KVB_CHAT_CHATML; /* the usual choice; the caller says it fell back */
        return KVB_FALLBACK;
    }
    return KVB_OK;
}

size_t kvb_chat_default_system(const char *t, char *buf, size_t cap) {
    static const char *const heads[] = {"<|im_start|>system\\n", "<|im_start|>system\n"}; /* escaped or literal newline */
    if (!t || !cap) return 0;
    buf[0] = 0;
    for (int h = 0; h < 2; h++) {
        for (const char *p = strstr(t, heads[h]); p; p = strstr(p + 1, heads[h])) {
            const char *b = p + strlen(heads[h]), *e = strstr(b, "<|im_end|>");
            if (!e) break;
            bool literal = e > b;
            for (const char *q = b; q < e && literal; q++) literal = !strchr("'\"{}+", *q);
            if (!literal) continue; /* "... + message['content'] + ...": not a default */
            size_t n = 0;
            for (const char *q = b; q < e; q++) {
                char c = *q;
                if (c == '\\' && q + 1 < e) { /* Jinja string escapes */
                    q++;
                    c = *q == 'n' ? '\n' : *q == 't' ? '\t' : *q;
                }
                if (n + 1 < cap) buf[n] = c;
                n++;
            }
            buf[n + 1 < cap ? n : cap - 1] = 0;
            return n;
        }
    }
    return 0;
}

/* Python's str.strip() on ASCII whitespace. */
static void put_stripped(struct kvb_str *b, const char *s) {
    size_t n = strlen(s), i = 0;
    while (i < n && strchr(" \t\n\r\v\f", s[i])) i++;
    while (n > i && strchr(" \t\n\r\v\f", s[n - 1])) n--;
    kvb_str_put(b, s + i, n - i);
}

kvb_status kvb_chat_format(enum kvb_chat_style style, const struct kvb_chat_message *m, int32_t n, bool add_assistant, char **out,
                           size_t *len) {
    if ((!m && n) || n < 0 || !out || (unsigned)style >= N_STYLES) return kvb_fail(KVB_ERR_INVALID, "chat_format: bad arguments");
    for (int32_t i = 0; i < n; i++) {
        if (!m[i].role || !m[i].content) return kvb_fail(KVB_ERR_INVALID, "chat_format: message %d has no role or content", (int)i);
        if (strcmp(m[i].role, "system") && strcmp(m[i].role, "user") && strcmp(m[i].role, "assistant"))
            return kvb_fail(KVB_ERR_INVALID, "chat_format: message %d has role '%s' (system, user or assistant)", (int)i, m[i].role);
    }
    struct kvb_str b = {0};
    kvb_str_puts(&b, "");
    const char *sys = n > 0 && !strcmp(m[0].role, "system") ? m[0].content : NULL;
    int32_t last_user = -1;
    for (int32_t i = 0; i < n; i++)
        if (!strcmp(m[i].role, "user")) last_user = i;
    bool first_user = true;
    for (int32_t i = 0; i < n; i++) {
        const char *role = m[i].role, *c = m[i].content;
        switch (style) {
        case KVB_CHAT_CHATML:
            kvb_str_puts(&b, "<|im_start|>"); kvb_str_puts(&b, role); kvb_str_puts(&b, "\n"); kvb_str_puts(&b, c); kvb_str_puts(&b, "<|im_end|>\n");
            break;
        case KVB_CHAT_LLAMA3:
            kvb_str_puts(&b, "<|start_header_id|>"); kvb_str_puts(&b, role); kvb_str_puts(&b, "<|end_header_id|>\n\n"); put_stripped(&b, c);
            kvb_str_puts(&b, "<|eot_id|>");
            break;
        case KVB_CHAT_LLAMA2:
            if (i == 0 && sys) break; /* folded into the first user turn */
            if (!strcmp(role, "user")) {
                if (!first_user) kvb_str_puts(&b, "<s>");
                kvb_str_puts(&b, "[INST] ");
                struct kvb_str t = {0};
                if (first_user && sys) { kvb_str_puts(&t, "<<SYS>>\n"); kvb_str_puts(&t, sys); kvb_str_puts(&t, "\n<</SYS>>\n\n"); }
                kvb_str_puts(&t, c);
                if (kvb_str_error(&t)) { kvb_free(t.p); b.err = KVB_ERR_NOMEM; break; }
                put_stripped(&b, t.p);
                kvb_free(t.p);
                kvb_str_puts(&b, " [/INST]");
                first_user = false;
            } else if (!strcmp(role, "assistant")) {
                kvb_str_puts(&b, " "); put_stripped(&b, c); kvb_str_puts(&b, " </s>");
            }
            break;
        case KVB_CHAT_MISTRAL:
            if (!strcmp(role, "user")) {
                kvb_str_puts(&b, "[INST] ");
                if (i == last_user && sys) { kvb_str_puts(&b, sys); kvb_str_puts(&b, "\n\n"); }
                kvb_str_puts(&b, c);
                kvb_str_puts(&b, "[/INST]");
            } else if (!strcmp(role, "assistant")) {
                kvb_str_puts(&b, " "); kvb_str_puts(&b, c); kvb_str_puts(&b, "</s>");
            }
            break;
        case KVB_CHAT_GEMMA:
            if (i == 0 && sys) break; /* folded into the first user turn */
            kvb_str_puts(&b, "<start_of_turn>");
            kvb_str_puts(&b, !strcmp(role, "assistant") ? "model" : role);
            kvb_str_puts(&b, "\n");
            if (!strcmp(role, "user") && first_user && sys) { kvb_str_puts(&b, sys); kvb_str_puts(&b, "\n\n"); }
            if (!strcmp(role, "user")) first_user = false;
            put_stripped(&b, c);
            kvb_str_puts(&b, "<end_of_turn>\n");
            break;
        case KVB_CHAT_PLAIN:
            kvb_str_puts(&b, !strcmp(role, "system") ? "System: " : !strcmp(role, "user") ? "User: " : "Assistant: ");
            kvb_str_puts(&b, c);
            kvb_str_puts(&b, "\n");
            break;
        }
    }
    if (add_assistant) {
        if (style == KVB_CHAT_CHATML) kvb_str_puts(&b, "<|im_start|>assistant\n");
        else if (style == KVB_CHAT_LLAMA3) kvb_str_puts(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        else if (style == KVB_CHAT_PLAIN) kvb_str_puts(&b, "Assistant:");
        else if (style == KVB_CHAT_GEMMA) kvb_str_puts(&b, "<start_of_turn>model\n");
    }
    size_t n_out;
    *out = kvb_str_finish(&b, &n_out);
    if (!*out) return kvb_fail(KVB_ERR_NOMEM, "chat_format: out of memory");
    if (len) *len = n_out;
    return KVB_OK;
}

/* ---- styles for a vocabulary, and the text of a later turn ---- */

static bool has_control_token(const struct kvb_vocab *vocab, const char *text) {
    int32_t *ids = NULL, n = 0;
    const bool one = kvb_vocab_tokenize(vocab, text, strlen(text), false, true, &ids, &n) == KVB_OK && n == 1;
    kvb_buffer_free(ids);
    return one;
}

const char *kvb_chat_missing_token(const struct kvb_vocab *vocab, enum kvb_chat_style style) {
    static const char *const chatml[] = {"<|im_start|>", "<|im_end|>", NULL};
    static const char *const llama3[] = {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", NULL};
    static const char *const gemma[] = {"<start_of_turn>", "<end_of_turn>", NULL};
    const char *const *need = style == KVB_CHAT_CHATML ? chatml : style == KVB_CHAT_LLAMA3 ? llama3 : style == KVB_CHAT_GEMMA ? gemma : NULL;
    if (!vocab) return NULL;
    for (; need && *need; need++)
        if (!has_control_token(vocab, *need)) return *need;
    return NULL;
}

kvb_status kvb_chat_style_for_vocab(const struct kvb_vocab *vocab, enum kvb_chat_style *style, const char **why) {
    if (why) *why = NULL;
    if (!vocab || !style) return kvb_fail(KVB_ERR_INVALID, "chat_style_for_vocab: NULL argument");
    struct kvb_vocab_info vi;
    kvb_vocab_get_info(vocab, &vi);
    *style = KVB_CHAT_PLAIN;
    if (!vi.chat_template) return KVB_OK; /* base models (llama2.c stories) have no template */
    kvb_status st = KVB_OK;
    if (kvb_chat_detect(vi.chat_template, style) == KVB_FALLBACK) {
        st = KVB_FALLBACK;
        if (why) *why = "the model's chat template is not one we recognize; trying ChatML";
    }
    const char *miss = kvb_chat_missing_token(vocab, *style);
    if (miss) {
        static _Thread_local char msg[160];
        snprintf(msg, sizeof msg, "template %s needs the %s token, which the vocabulary lacks; using plain User:/Assistant:",
                 kvb_chat_style_name(*style), miss);
        if (why) *why = msg;
        *style = KVB_CHAT_PLAIN;
        st = KVB_FALLBACK;
    }
    return st;
}

kvb_status kvb_chat_turn_text(enum kvb_chat_style style, const char *system, const char *user, bool first, const char *stop_text,
                              char **out, size_t *len) {
    if (!user || !out) return kvb_fail(KVB_ERR_INVALID, "chat_turn_text: NULL argument");
    if (!stop_text) stop_text = "";
    *out = NULL;
    if (len) *len = 0;
    struct kvb_chat_message msgs[4];
    int k = 0;
    if (first && system) msgs[k++] = (struct kvb_chat_message){"system", system};
    if (!first) {
        msgs[k++] = (struct kvb_chat_message){"user", "\x02"};
        msgs[k++] = (struct kvb_chat_message){"assistant", "\x01"}; /* placeholders no template text contains */
    }
    char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    kvb_status st = first ? KVB_OK : kvb_chat_format(style, msgs, k, false, &a, &la);
    if (st != KVB_OK) return st;
    msgs[k++] = (struct kvb_chat_message){"user", user};
    st = kvb_chat_format(style, msgs, k, true, &b, &lb);
    if (st == KVB_OK) {
        /* what the template writes after the stop token the answer ended
         * with, or after the answer itself when it was cut (stop_text "") */
        const char *glue = "", *mark = stop_text[0] ? stop_text : "\x01";
        for (const char *p = a; p && (p = strstr(p, mark)); p += strlen(mark)) glue = p + strlen(mark);
        const size_t n = strlen(glue) + lb - la;
        char *t = kvb_malloc(n + 1);
        if (!t) st = kvb_fail(KVB_ERR_NOMEM, "chat_turn_text: out of memory");
        else {
            memcpy(t, glue, strlen(glue));
            memcpy(t + strlen(glue), b + la, lb - la);
            t[n] = 0;
            *out = t;
            if (len) *len = n;
        }
    }
    kvb_buffer_free(a);
    kvb_buffer_free(b);
    return st;
}

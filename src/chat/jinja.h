/*
 * jinja.h — the chat room's internal header: a Jinja2 interpreter for chat
 * templates (jinja.c) over the library's JSON values (src/json/json.h), and
 * the checks of kvb_chat_apply's JSON inputs (chat_json.c).
 *
 * The room (src/chat), and how its files call one another (one way; checked
 * by tests/src_layers.py): chat_jinja.c (kvb_chat_apply, the front) calls
 * jinja.c (a render), chat_json.c (the inputs checked, plain messages) and
 * chat_template.c (the signature families, the fallback); those three call
 * nothing else in the room. chat_parse.c (the model's output back as an
 * assistant message) stands alone: it reads calls with src/json and checks
 * their arguments through src/grammar. Below the room: the tokenizer (a
 * vocabulary's template and special tokens), src/json, src/grammar and core;
 * nothing below calls into it.
 */
#ifndef KVB_CHAT_JINJA_H
#define KVB_CHAT_JINJA_H

#include "../json/json.h"

#define jinja_render kvb_jinja_render
#define jjson_check kvb_jjson_check
#define jjson_simple_messages kvb_jjson_simple_messages

/* One render. Inputs are JSON texts (NULL: absent). */
struct jinja_limits {
    size_t max_output;   /* bytes of rendered text (default 16 MiB) */
    size_t max_memory;   /* arena bytes (default 256 MiB) */
    int32_t max_depth;   /* nesting of expressions, statements, macro calls and values (default 200) */
    int64_t max_steps;   /* work in total, in steps of JWORK_STEP units: a loop iteration or call is a
                            step, and so are 256 bytes scanned or values compared (default 1,000,000) */
    int32_t deadline_ms; /* wall-clock time of one render (default 2000; < 0: none) */
};
/* Renders src (template text) with the variables of the JSON object
 * vars_json (may be NULL). *out: kvb_malloc'ed, NUL-terminated. On failure
 * the message (with the template line) is in msg, and the status is
 * KVB_ERR_INVALID (template or input error, raise_exception),
 * KVB_ERR_UNSUPPORTED (a construct outside the subset), KVB_ERR_NOMEM (a
 * limit, named in msg: output, memory, nesting, steps, deadline; or the
 * allocator). */
struct jinja_input {
    const char *src;
    size_t src_len;
    /* variables: JSON values by name (each NULL to leave undefined) */
    const char *const *names;
    const char *const *json;
    int n_vars;
    const char *vars_object; /* NULL, or a JSON object whose keys are set after names (and override them) */
    const struct jinja_limits *limits; /* NULL: defaults */
};
kvb_status jinja_render(const struct jinja_input *in, char **out, size_t *len, char *msg, size_t msg_cap);

/* Checks JSON text without keeping it: its top-level type must be `want`
 * ('[' array, '{' object, 0 any); for messages (is_messages) every item
 * must be an object with a string "role". KVB_OK, or KVB_ERR_INVALID /
 * KVB_ERR_NOMEM with the reason (naming `what`, line and column) in msg. */
kvb_status jjson_check(const char *what, const char *text, char want, bool is_messages, char *msg, size_t msg_cap);
/* The messages as role/content pairs for the signature families: string
 * contents only (a list of parts is joined from its "text" parts). *msgs and
 * the strings live in one kvb_malloc'ed block (free *block). */
kvb_status jjson_simple_messages(const char *text, struct kvb_chat_message **msgs, int32_t *n, void **block, char *msg, size_t msg_cap);

#endif

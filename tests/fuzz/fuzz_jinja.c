/*
 * fuzz_jinja.c — libFuzzer target for the Jinja interpreter and the JSON
 * reader behind kvb_chat_apply. The input is TEMPLATE [\0 MESSAGES_JSON
 * [\0 VARS_JSON]]: the template renders with small limits over the messages
 * (a default conversation when absent) and the variables, then goes through
 * kvb_chat_apply with the signature-family fallback. Besides not crashing,
 * a success must give NUL-terminated text of the reported length within the
 * output limit, and a failure a status and a message.
 *
 * Seeds: the .jinja files of tests/jinja/templates (and llama.cpp's models/templates
 * where present), and the hostile shapes of tests/jinja/hostile (values
 * nested past the depth limit under every walk, long string scans in loops,
 * quadratic growth), which must fail with a status naming a limit (depth,
 * steps, memory, deadline: 200 ms here) and never crash or hang; .ci/run
 * fuzzes it for 60 s. test_jinja.c replays this entry point over those
 * seeds, their prefixes and byte flips.
 */
#include "chat/jinja.h"

#include <stdio.h>
#include <stdlib.h>

static const char k_default_messages[] =
    "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"hi\"}, "
    "{\"role\": \"assistant\", \"content\": \"yo\", \"reasoning_content\": \"r\", \"tool_calls\": [{\"id\": \"a1b2c3d4e\", "
    "\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}}]}, "
    "{\"role\": \"tool\", \"tool_call_id\": \"a1b2c3d4e\", \"content\": \"{}\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"t\"}]}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0;
    char *buf = malloc(size + 3);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = buf[size + 1] = buf[size + 2] = 0;
    const char *tmpl = buf, *msgs = NULL, *vars = NULL;
    size_t tlen = strlen(tmpl);
    if (tlen < size) {
        msgs = buf + tlen + 1;
        size_t mlen = strlen(msgs);
        if (tlen + 1 + mlen < size) vars = msgs + mlen + 1;
    }
    const char *names[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"};
    const char *json[] = {msgs ? msgs : k_default_messages, "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", "true", "\"<s>\"",
                          "\"</s>\""};
    struct jinja_limits lim = {.max_output = 1u << 20, .max_memory = 64u << 20, .max_depth = 100, .max_steps = 100000, .deadline_ms = 200};
    struct jinja_input in = {.src = tmpl, .src_len = tlen, .names = names, .json = json, .n_vars = 5, .vars_object = vars, .limits = &lim};
    char *out = NULL, msg[256];
    size_t len = 0;
    kvb_status st = jinja_render(&in, &out, &len, msg, sizeof msg);
    if (st == KVB_OK) {
        if (!out || out[len] != 0 || len > lim.max_output) abort();
    } else if (out || !msg[0] || (st != KVB_ERR_INVALID && st != KVB_ERR_UNSUPPORTED && st != KVB_ERR_NOMEM)) {
        abort();
    }
    kvb_free(out);
    out = NULL;
    struct kvb_chat_apply_params p = kvb_chat_apply_default_params();
    p.template_text = tmpl;
    p.messages_json = msgs ? msgs : k_default_messages;
    p.vars_json = vars;
    p.fallback = true;
    p.max_output = 1u << 20;
    p.deadline_ms = 200; /* the default limits otherwise */
    st = kvb_chat_apply(&p, &out, &len);
    if ((st == KVB_OK || st == KVB_FALLBACK) && (!out || out[len] != 0)) abort();
    kvb_buffer_free(out);
    free(buf);
    return 0;
}

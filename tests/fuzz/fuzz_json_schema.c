/*
 * fuzz_json_schema.c — libFuzzer target for kvb_json_schema_to_gbnf. Any
 * schema the compiler accepts must give GBNF that kvb_grammar_parse accepts
 * (with the rule prefix), NUL-terminated at the reported length; a refusal
 * must be KVB_ERR_UNSUPPORTED, KVB_ERR_INVALID or KVB_ERR_NOMEM with a
 * message and leave the outputs alone. The first input byte picks a rule
 * prefix (bits 0-1) and KVB_SCHEMA_COMPACT (bit 2). Seeds: tests/fuzz/seeds_json_schema; .ci/run fuzzes it for 30 s.
 */
#include "kvbound.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 16)) return 0;
    static const char *const prefixes[] = {NULL, "", "tool-", "a_b"};
    const char *prefix = prefixes[data[0] & 3];
    char *gb = (char *)1;
    size_t n = 12345;
    const unsigned flags = data[0] & 4 ? KVB_SCHEMA_COMPACT : 0;
    kvb_status st = kvb_json_schema_to_gbnf_flags((const char *)data + 1, size - 1, prefix, flags, &gb, &n);
    if (st != KVB_OK) {
        if (gb != (char *)1 || n != 12345 || !kvb_last_error()[0]) abort();
        if (st != KVB_ERR_UNSUPPORTED && st != KVB_ERR_INVALID && st != KVB_ERR_NOMEM) abort();
        return 0;
    }
    if (!gb || gb[n] != 0 || strlen(gb) != n) abort();
    char root[64];
    snprintf(root, sizeof root, "%sroot", prefix ? prefix : "");
    struct kvb_grammar *g = NULL;
    if (kvb_grammar_parse(gb, n, root, &g) != KVB_OK) abort(); /* what the compiler accepts must compile */
    struct kvb_matcher *m = NULL;
    if (kvb_matcher_new(g, NULL, &m) == KVB_OK) {
        /* the schema's own text is often a valid value of a permissive schema: feed it */
        for (size_t i = 1; i < size && kvb_matcher_accept_bytes(m, (const char *)data + i, 1) == KVB_OK; i++) {}
    }
    kvb_matcher_free(m);
    kvb_grammar_free(g);
    kvb_buffer_free(gb);
    return 0;
}

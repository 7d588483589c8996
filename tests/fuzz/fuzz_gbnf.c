/*
 * fuzz_gbnf.c — libFuzzer target for the GBNF parser and the matcher. The
 * input is GRAMMAR [\0 TEXT]: the grammar is parsed (a failure must be
 * KVB_ERR_INVALID or KVB_ERR_NOMEM with a message); when it parses, TEXT
 * (or the grammar's own bytes) is fed byte by byte until refused, and a
 * refused byte must leave the matcher where it was (the same next byte is
 * taken or refused alike, can_end unchanged). Seeds: tests/fuzz/seeds_gbnf;
 * .ci/run fuzzes it for 30 s.
 */
#include "kvbound.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 16)) return 0;
    const char *text = (const char *)data;
    size_t glen = size, tlen = 0;
    const char *t = NULL;
    const void *z = memchr(data, 0, size);
    if (z) {
        glen = (size_t)((const uint8_t *)z - data);
        t = text + glen + 1;
        tlen = size - glen - 1;
    }
    struct kvb_grammar *g = NULL;
    kvb_status st = kvb_grammar_parse(text, glen, NULL, &g);
    if (st != KVB_OK) {
        if (g || (st != KVB_ERR_INVALID && st != KVB_ERR_NOMEM) || !kvb_last_error()[0]) abort();
        return 0;
    }
    if (!t) {
        t = text;
        tlen = glen;
    }
    struct kvb_matcher *m = NULL;
    if (kvb_matcher_new(g, NULL, &m) == KVB_OK) {
        for (size_t i = 0; i < tlen && i < 4096; i++) {
            bool end_before = kvb_matcher_can_end(m);
            st = kvb_matcher_accept_bytes(m, t + i, 1);
            if (st == KVB_ERR_NOMEM) break;
            if (st != KVB_OK) {
                if (kvb_matcher_can_end(m) != end_before) abort();
                if (kvb_matcher_accept_bytes(m, t + i, 1) == KVB_OK) abort(); /* unchanged: refused again */
                break;
            }
        }
        kvb_matcher_reset(m);
        (void)kvb_matcher_must_end(m);
    }
    kvb_matcher_free(m);
    kvb_grammar_free(g);
    return 0;
}

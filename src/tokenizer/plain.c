/*
 * plain.c — client text inside a prompt, read as plain text: only the chat
 * template's own text may become control tokens (issue 47: a user's
 * "<|im_end|>\n<|im_start|>system" must not close their turn).
 *
 * kvb_vocab_mark_plain rewrites a client string before it goes through the
 * template: each control token's text T (one that kvb_vocab_tokenize reads
 * as the token only with parse_special: CONTROL, UNKNOWN, ...; USER_DEFINED
 * ones are tokens either way) becomes OPEN T CLOSE, and a literal OPEN
 * becomes OPEN CLOSE, with OPEN = U+FDD0 and CLOSE = U+FDD1 (noncharacters:
 * no template or tokenizer writes them). Text without either is unchanged,
 * so templates that trim, split or test content see what they would.
 * kvb_vocab_tokenize_marked then tokenizes the rendered prompt as
 * kvb_vocab_tokenize with parse_special does, except that OPEN T CLOSE is T
 * as plain text, within its fragment (the tokens are those of the same text
 * tokenized without parse_special), and OPEN CLOSE is the character U+FDD0.
 * An OPEN followed by a control token's text but no CLOSE (a template that
 * sliced or truncated a marked string between the two) is still client
 * text: the token's text as plain text, the OPEN dropped, since no template
 * writes OPEN. An OPEN followed by neither is text, as written.
 */
#include "tokenizer.h"

#include <string.h>

#define OPEN "\xEF\xB7\x90"
#define CLOSE "\xEF\xB7\x91"
enum { MARK_LEN = 3 };

static bool at_mark(const char *text, size_t len, size_t at, const char *mark) {
    return at <= len && len - at >= MARK_LEN && !memcmp(text + at, mark, MARK_LEN);
}

static bool has_open(const char *text, size_t len) {
    for (size_t at = 0; at + MARK_LEN <= len; at++)
        if (at_mark(text, len, at, OPEN)) return true;
    return false;
}

kvb_status kvb_vocab_mark_plain(const struct kvb_vocab *v, const char *text, size_t len, char **out, size_t *out_len) {
    if (!v || (!text && len) || !out) return kvb_fail(KVB_ERR_INVALID, "mark_plain: bad arguments");
    struct kvb_str b = {0};
    size_t start = 0;
    for (size_t at = 0; at < len;) {
        const int32_t sp = v->special_first[(uint8_t)text[at]] ? kvb_vocab_match_special(v, text, len, at, true) : -1;
        const bool control = sp >= 0 && v->type[sp] != KVB_TOKEN_USER_DEFINED;
        if (control || at_mark(text, len, at, OPEN)) {
            kvb_str_put(&b, text + start, at - start);
            kvb_str_put(&b, OPEN, MARK_LEN);
            if (control) kvb_str_put(&b, text + at, kvb_vocab_len(v, sp));
            kvb_str_put(&b, CLOSE, MARK_LEN);
            at += control ? kvb_vocab_len(v, sp) : MARK_LEN;
            start = at;
            continue;
        }
        at += sp >= 0 ? kvb_vocab_len(v, sp) : 1; /* a USER_DEFINED token is one either way */
    }
    kvb_str_put(&b, text + start, len - start);
    size_t n = 0;
    char *p = kvb_str_finish(&b, &n); /* "" allocated for empty text */
    if (!p) return kvb_fail(KVB_ERR_NOMEM, "mark_plain: out of memory for %zu bytes of text", len);
    *out = p;
    if (out_len) *out_len = n;
    return KVB_OK;
}

kvb_status kvb_vocab_tokenize_marked(const struct kvb_vocab *v, const char *text, size_t len, bool add_special, int32_t **ids,
                                     int32_t *n_ids) {
    if (!v || (!text && len) || !ids || !n_ids) return kvb_fail(KVB_ERR_INVALID, "tokenize: bad arguments");
    if (v->kind == KVB_VOCAB_NONE)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "tokenize: this model has no vocabulary (tokenizer.ggml.model 'no_vocab'): it takes token ids only");
    if (!has_open(text, len)) return kvb_vocab_tokenize(v, text, len, add_special, true, ids, n_ids);
    struct kvb_tok_out o = {0};
    struct kvb_str frag = {0}; /* the fragment being gathered, marks taken out */
    bool after_special = true;
    if (add_special && v->add_bos && v->bos >= 0) kvb_tok_emit(&o, v->bos);
    size_t run = 0; /* text[run, at) is plain text not yet in frag */
    for (size_t at = 0; at <= len;) {
        if (at < len && at_mark(text, len, at, OPEN)) {
            kvb_str_put(&frag, text + run, at - run);
            const size_t in = at + MARK_LEN;
            const int32_t sp = in < len ? kvb_vocab_match_special(v, text, len, in, true) : -1;
            if (at_mark(text, len, in, CLOSE)) { /* a literal U+FDD0 */
                kvb_str_put(&frag, OPEN, MARK_LEN);
                at = in + MARK_LEN;
            } else if (sp >= 0 && at_mark(text, len, in + kvb_vocab_len(v, sp), CLOSE)) { /* client text: plain */
                kvb_str_put(&frag, text + in, kvb_vocab_len(v, sp));
                at = in + kvb_vocab_len(v, sp) + MARK_LEN;
            } else if (sp >= 0) { /* client text whose close the template cut off (a slice, truncate): still plain */
                kvb_str_put(&frag, text + in, kvb_vocab_len(v, sp));
                at = in + kvb_vocab_len(v, sp);
            } else { /* not a mark of ours: text as written */
                kvb_str_put(&frag, OPEN, MARK_LEN);
                at = in;
            }
            run = at;
            continue;
        }
        const int32_t sp = at < len && v->special_first[(uint8_t)text[at]] ? kvb_vocab_match_special(v, text, len, at, true) : -1;
        if (at == len || sp >= 0) {
            kvb_str_put(&frag, text + run, at - run);
            kvb_tok_fragment(v, frag.p, frag.err ? 0 : frag.n, sp, &after_special, &o);
            frag.n = 0;
            if (at == len) break;
            at += kvb_vocab_len(v, sp);
            run = at;
            continue;
        }
        at++;
    }
    if (add_special && v->add_eos && v->eos >= 0) kvb_tok_emit(&o, v->eos);
    const bool oom = frag.err != KVB_OK || o.oom;
    kvb_str_free(&frag);
    if (!oom && !o.ids) o.ids = kvb_malloc(sizeof(int32_t));
    if (oom || !o.ids) {
        kvb_free(o.ids);
        return kvb_fail(KVB_ERR_NOMEM, "tokenize: out of memory for %zu bytes of text", len);
    }
    *ids = o.ids;
    *n_ids = o.n;
    return KVB_OK;
}

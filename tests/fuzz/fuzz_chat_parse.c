/*
 * fuzz_chat_parse.c — libFuzzer target for kvb_chat_parser (chat_parse.c).
 * Input: byte 0 picks the format (6), think / think_open and (its bit 24s)
 * whether calls are checked against a fixed tools list, byte 1 seeds the
 * splits, the rest is the generated text. The text is parsed in one feed and
 * again fed in random pieces (and byte by byte for short inputs); besides not
 * crashing: every delta and the message are valid JSON with valid UTF-8
 * strings, every call's arguments parse as a JSON object, and the deltas
 * concatenate (content, reasoning_content, per index id, name and
 * arguments) to exactly the one-shot message.
 *
 * Seeds: tests/fuzz/chat_parse_corpus (the texts of test_chat_parse.c's cases,
 * each after its format byte and a zero); .ci/run fuzzes it for 30 s.
 * test_chat_parse.c includes this file and uses chat_parse_check directly.
 */
#include "kvbound.h"
#include "chat/jinja.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cp_str {
    char *p;
    size_t n;
};

static int cp_append(struct cp_str *s, const char *p, size_t n) {
    char *q = realloc(s->p, s->n + n + 1);
    if (!q) return -1;
    memcpy(q + s->n, p, n);
    s->p = q;
    s->n += n;
    s->p[s->n] = 0;
    return 0;
}

struct cp_acc {
    struct cp_str content, reasoning;
    int n_calls;
    struct cp_str id[300], name[300], args[300];
};

static void cp_acc_free(struct cp_acc *a) {
    free(a->content.p);
    free(a->reasoning.p);
    for (int i = 0; i < a->n_calls; i++) {
        free(a->id[i].p);
        free(a->name[i].p);
        free(a->args[i].p);
    }
    memset(a, 0, sizeof *a);
}

static int cp_utf8_ok(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!l || i + l > n) return 0;
        for (size_t k = 1; k < l; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80) return 0;
        if (l == 3 && ((c == 0xE0 && (unsigned char)s[i + 1] < 0xA0) || (c == 0xED && (unsigned char)s[i + 1] > 0x9F))) return 0;
        if (l == 4 && ((c == 0xF0 && (unsigned char)s[i + 1] < 0x90) || (c == 0xF4 && (unsigned char)s[i + 1] > 0x8F))) return 0;
        i += l;
    }
    return 1;
}

struct cp_work {
    struct jerr e;
    struct jarena a;
};

static int cp_parse(struct cp_work *w, const char *s, jv *out) {
    if (setjmp(w->e.jb)) return -1;
    *out = jjson_parse(&w->a, &w->e, "t", s, strlen(s), 512);
    return 0;
}

static const jv *cp_get(jv d, const char *k) { return d.t == JV_DICT ? jv_dict_get(d.u.d, k, strlen(k)) : NULL; }

/* a string member (or absent): appended to s; -1 when not a string */
static int cp_take_str(jv d, const char *k, struct cp_str *s) {
    const jv *v = cp_get(d, k);
    if (!v) return 0;
    if (v->t != JV_STR || !cp_utf8_ok(v->u.s, v->n)) return -1;
    return cp_append(s, v->u.s, v->n);
}

static int cp_args_ok(struct cp_work *w, const char *s, size_t n) {
    char *z = malloc(n + 1);
    if (!z) return 0;
    memcpy(z, s, n);
    z[n] = 0;
    jv v;
    int ok = cp_parse(w, z, &v) == 0 && v.t == JV_DICT;
    free(z);
    return ok;
}

/* Adds one delta to the accumulator; -1 (why set) when it is not a valid delta */
static int cp_add_delta(struct cp_work *w, struct cp_acc *a, const char *delta, const char **why) {
    jv d;
    if (cp_parse(w, delta, &d) || d.t != JV_DICT || !d.u.d->n) { *why = "a delta is not a non-empty JSON object"; return -1; }
    if (cp_take_str(d, "content", &a->content) || cp_take_str(d, "reasoning_content", &a->reasoning)) { *why = "bad content delta"; return -1; }
    const jv *tc = cp_get(d, "tool_calls");
    if (!tc) return 0;
    if (tc->t != JV_LIST || !tc->u.l->n) { *why = "tool_calls delta not a list"; return -1; }
    for (int32_t i = 0; i < tc->u.l->n; i++) {
        jv c = tc->u.l->v[i];
        const jv *ix = cp_get(c, "index"), *fn = cp_get(c, "function");
        if (!ix || ix->t != JV_INT || ix->u.i < 0 || ix->u.i > a->n_calls || ix->u.i >= 300 || !fn) { *why = "tool call delta: bad index"; return -1; }
        int k = (int)ix->u.i;
        if (k == a->n_calls) {
            a->n_calls++;
            const jv *ty = cp_get(c, "type");
            if (!cp_get(c, "id") || !cp_get(*fn, "name") || !ty || ty->t != JV_STR || ty->n != 8 || memcmp(ty->u.s, "function", 8)) { *why = "a new call's delta lacks id, type or name"; return -1; }
        }
        if (cp_take_str(c, "id", &a->id[k]) || cp_take_str(*fn, "name", &a->name[k]) || cp_take_str(*fn, "arguments", &a->args[k])) { *why = "bad call delta"; return -1; }
    }
    return 0;
}

/* Compares the message with an accumulator; 0 equal */
static int cp_same(struct cp_work *w, const char *message, const struct cp_acc *a, const char **why) {
    jv m;
    if (cp_parse(w, message, &m) || m.t != JV_DICT) { *why = "the message is not a JSON object"; return -1; }
    const jv *role = cp_get(m, "role"), *c = cp_get(m, "content"), *r = cp_get(m, "reasoning_content"), *tc = cp_get(m, "tool_calls");
    if (!role || role->t != JV_STR || role->n != 9 || memcmp(role->u.s, "assistant", 9)) { *why = "role"; return -1; }
    if (!c || !(c->t == JV_NONE || (c->t == JV_STR && c->n))) { *why = "content neither null nor a non-empty string"; return -1; }
    size_t cn = c->t == JV_STR ? c->n : 0;
    if (cn != a->content.n || (cn && memcmp(c->u.s, a->content.p, cn)) || !cp_utf8_ok(a->content.p ? a->content.p : "", a->content.n)) { *why = "content differs from the deltas'"; return -1; }
    if (r && (r->t != JV_STR || !r->n)) { *why = "reasoning_content empty or not a string"; return -1; }
    size_t rn = r ? r->n : 0;
    if (rn != a->reasoning.n || (rn && memcmp(r->u.s, a->reasoning.p, rn)) || !cp_utf8_ok(a->reasoning.p ? a->reasoning.p : "", a->reasoning.n)) { *why = "reasoning differs from the deltas'"; return -1; }
    int nc = tc ? (tc->t == JV_LIST ? (int)tc->u.l->n : -1) : 0;
    if (tc && nc <= 0) { *why = "tool_calls empty or not a list"; return -1; }
    if (nc != a->n_calls) { *why = "number of calls differs from the deltas'"; return -1; }
    for (int i = 0; i < nc; i++) {
        jv x = tc->u.l->v[i];
        const jv *id = cp_get(x, "id"), *fn = cp_get(x, "function");
        const jv *name = fn ? cp_get(*fn, "name") : NULL, *args = fn ? cp_get(*fn, "arguments") : NULL;
        if (!id || !name || !args || id->t != JV_STR || name->t != JV_STR || args->t != JV_STR) { *why = "a call lacks id, name or arguments"; return -1; }
        if (id->n != a->id[i].n || memcmp(id->u.s, a->id[i].p, id->n) || name->n != a->name[i].n || memcmp(name->u.s, a->name[i].p, name->n) ||
            args->n != a->args[i].n || memcmp(args->u.s, a->args[i].p, args->n)) { *why = "a call differs from the deltas'"; return -1; }
        if (!name->n || !cp_utf8_ok(name->u.s, name->n) || !cp_args_ok(w, args->u.s, args->n)) { *why = "a call's name or arguments are bad"; return -1; }
    }
    return 0;
}

/* Parses text (one feed), then again in the pieces cuts[0..n_cuts) (ascending
 * offsets); 0 when the deltas concatenate to the message. *message (may be
 * NULL): the one-shot message (free). */
/* the tools both parsers are declared (kvb_chat_parser_tools), or NULL: any call */
static const char *cp_tools;

static int chat_parse_split(const struct kvb_chat_syntax *syn, const char *text, size_t n, const size_t *cuts, int n_cuts, char **message,
                            const char **why) {
    struct kvb_chat_parser *p1 = NULL, *p2 = NULL;
    char *m1 = NULL, *m2 = NULL, *d = NULL;
    int rc = -1;
    struct cp_work *w = calloc(1, sizeof *w);
    struct cp_acc *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    *why = "setup";
    if (!w || !a || !b) goto out;
    w->a.limit = 1u << 28;
    if (kvb_chat_parser_new(syn, &p1) || kvb_chat_parser_new(syn, &p2)) goto out;
    kvb_chat_parser_seed(p1, 7);
    kvb_chat_parser_seed(p2, 7);
    if (cp_tools && (kvb_chat_parser_tools(p1, cp_tools, strlen(cp_tools)) || kvb_chat_parser_tools(p2, cp_tools, strlen(cp_tools)))) goto out;
    if (kvb_chat_parser_feed(p1, text, n, true, &d)) { *why = "one-shot feed failed"; goto out; }
    if (d && cp_add_delta(w, a, d, why)) goto out;
    kvb_buffer_free(d);
    d = NULL;
    if (kvb_chat_parser_message(p1, &m1)) { *why = "message failed"; goto out; }
    if (cp_same(w, m1, a, why)) { *why = "one-shot delta vs message"; goto out; }
    size_t at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t e = i < n_cuts ? cuts[i] : n;
        if (e < at || e > n) { *why = "bad cut"; goto out; }
        if (kvb_chat_parser_feed(p2, text + at, e - at, i == n_cuts, &d)) { *why = "feed failed"; goto out; }
        if (d && cp_add_delta(w, b, d, why)) goto out;
        kvb_buffer_free(d);
        d = NULL;
        at = e;
    }
    if (kvb_chat_parser_message(p2, &m2)) { *why = "message failed"; goto out; }
    if (strcmp(m1, m2)) { *why = "the streamed message differs from the one-shot one"; goto out; }
    if (cp_same(w, m1, b, why)) goto out;
    rc = 0;
out:
    kvb_buffer_free(d);
    if (message && rc == 0) {
        *message = m1;
        m1 = NULL;
    }
    kvb_buffer_free(m1);
    kvb_buffer_free(m2);
    kvb_chat_parser_free(p1);
    kvb_chat_parser_free(p2);
    if (w) jarena_free(&w->a);
    free(w);
    if (a) cp_acc_free(a);
    if (b) cp_acc_free(b);
    free(a);
    free(b);
    return rc;
}

static uint64_t cp_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The fuzz input's checks; 0 when they hold (why: the first that did not) */
static int chat_parse_check(const uint8_t *data, size_t size, const char **why) {
    *why = "";
    if (size < 2) return 0;
    struct kvb_chat_syntax syn = {(enum kvb_tool_format)(data[0] % 6), (data[0] / 6) % 2 == 1, (data[0] / 12) % 2 == 1};
    /* (data[0] / 24) odd: calls are checked against these tools */
    static const char k_tools[] = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
                                  "{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"a\"]}}},"
                                  "{\"type\":\"function\",\"function\":{\"name\":\"g\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]";
    cp_tools = (data[0] / 24) % 2 ? k_tools : NULL;
    uint64_t seed = data[1] * 0x9E3779B97F4A7C15ull + 1;
    const char *text = (const char *)data + 2;
    size_t n = size - 2;
    size_t *cuts = malloc(sizeof *cuts * (n + 1));
    if (!cuts) return 0;
    int rc = 0;
    for (int round = 0; round < 3 && !rc; round++) {
        int k = 0;
        if (round == 0 && n <= 512)
            for (size_t i = 1; i < n; i++) cuts[k++] = i; /* every byte */
        else
            for (size_t i = 1; i < n; i++)
                if (cp_rand(&seed) % (round == 1 ? 3 : 17) == 0) cuts[k++] = i;
        rc = chat_parse_split(&syn, text, n, cuts, k, NULL, why);
    }
    cp_tools = NULL;
    free(cuts);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 16)) return 0;
    const char *why;
    if (chat_parse_check(data, size, &why)) {
        fprintf(stderr, "fuzz_chat_parse: %s\n", why);
        abort();
    }
    return 0;
}

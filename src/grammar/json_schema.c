/*
 * json_schema.c — JSON Schema to GBNF (kvb_json_schema_to_gbnf), for
 * response_format json_schema / json_object and forced tool calls.
 *
 * The schema is read with the library's JSON reader (src/json) into one
 * arena; every schema node becomes a rule whose body is built in its own
 * buffer and appended when complete, so nested nodes simply come first.
 * Shared pieces (space, string, number, value...) are written once, on first
 * use. $ref targets ("#/$defs/x", "#/definitions/x") get their rule name
 * before their body is made, so recursive schemas are recursive rules.
 *
 * Coverage: type (one or a list), nullable, enum, const, anyOf / oneOf (as
 * alternatives: oneOf's exclusivity is not enforced), allOf of one schema or
 * of object schemas (merged), objects (properties in order, optional ones may
 * be left out, additionalProperties false / true / a schema; with properties
 * (even none) and no additionalProperties no other key is allowed, as in
 * llama.cpp; extra keys may not be
 * a declared property's name), arrays (items, prefixItems, minItems,
 * maxItems), strings (minLength, maxLength, pattern: a regular-expression
 * subset, format date / time / date-time / uuid), integers with minimum /
 * maximum / exclusive bounds (as digit ranges, |bound| < 10^15), number,
 * boolean, null. Any other keyword that constrains values is refused by name
 * (KVB_ERR_UNSUPPORTED); annotations (title, description, default, ...) are
 * ignored. A malformed node is KVB_ERR_INVALID with its JSON pointer.
 *
 * Size: the schema's keys and items are counted on its text before it is
 * read (MAX_ITEMS), the rules written (KVB_GRAMMAR_MAX_RULES) and the text
 * (OUT_LIMIT) as they grow; each is refused naming its limit (KVB_ERR_INVALID,
 * a request's fault, never "out of memory"). KVB_SCHEMA_COMPACT makes the
 * space rule empty: no white space between tokens.
 *
 * The text is parsed once as GBNF before it is returned, so whatever this
 * accepts compiles (a schema that refers to itself without any value in
 * between is refused here, as left recursion).
 */
#include "grammar.h"
#include "../json/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define OUT_LIMIT ((size_t)8 << 20)
#define MAX_REPEAT 10000
#define MAX_ITEMS 16384 /* object keys and array items of a schema, counted on its text before it is read */

struct sc {
    struct jarena *a;
    struct jerr *e;
    struct jbuf out;
    const char *prefix;
    jv root;
    int n_rules;
    int n_written; /* rules written */
    unsigned have; /* shared rules written */
    jv refs;       /* dict: "#/..." -> rule name */
    int depth;
    bool compact; /* KVB_SCHEMA_COMPACT: no white space between tokens */
};

enum { H_SPACE = 1, H_STRING = 2, H_NUMBER = 4, H_INTEGER = 8, H_BOOLEAN = 16, H_NULL = 32, H_VALUE = 64, H_CHAR = 128 };

_Noreturn static void out_limit(struct sc *s) {
    jerr_throw(s->e, KVB_ERR_INVALID, "json schema: the grammar it makes would pass %zu MiB of text (the limit)", OUT_LIMIT >> 20);
}

/* Every write goes through here or jbuf_json (a buffer's limit is the same
 * bound): past OUT_LIMIT the schema is refused by name (a request's fault, not memory). */
static void put_n(struct sc *s, struct jbuf *b, const char *t, size_t n) {
    if (b->n + n + 1 > OUT_LIMIT) out_limit(s);
    jbuf_put(s->a, s->e, b, t, n);
}

static void put(struct sc *s, struct jbuf *b, const char *t) { put_n(s, b, t, strlen(t)); }

static KVB_PRINTF(3, 4) void putf(struct sc *s, struct jbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof tmp) jerr_throw(s->e, KVB_ERR_INVALID, "json schema: name too long");
    put_n(s, b, tmp, (size_t)n);
}

static struct jbuf newbuf(void) { return (struct jbuf){.limit = OUT_LIMIT - 1}; /* n + 1 <= OUT_LIMIT, as put_n */ }

static const char *bufstr(struct sc *s, struct jbuf *b) {
    put_n(s, b, "", 1);
    b->n--;
    return b->p;
}

/* Writes rule "<prefix>name ::= body". */
static void rule(struct sc *s, const char *name, const char *body) {
    if (++s->n_written > KVB_GRAMMAR_MAX_RULES)
        jerr_throw(s->e, KVB_ERR_INVALID, "json schema: the grammar it makes would have more than %d rules (the limit)", KVB_GRAMMAR_MAX_RULES);
    putf(s, &s->out, "%s%s ::= ", s->prefix, name);
    put(s, &s->out, body);
    put(s, &s->out, "\n");
}

static const char *new_name(struct sc *s) {
    char *n = jarena_alloc(s->a, s->e, 24);
    snprintf(n, 24, "s%d", ++s->n_rules);
    return n;
}

/* A rule name as the body of another rule refers to it. */
static const char *ref(struct sc *s, const char *name) {
    size_t n = strlen(s->prefix) + strlen(name) + 1;
    char *r = jarena_alloc(s->a, s->e, n);
    snprintf(r, n, "%s%s", s->prefix, name);
    return r;
}

static const char *need(struct sc *s, unsigned h);

static void write_helpers(struct sc *s, unsigned h) {
    if (s->have & h) return;
    s->have |= h;
    char b[1024];
    const char *p = s->prefix;
    switch (h) {
    case H_SPACE: rule(s, "space", s->compact ? "\"\"" : "| \" \" | \"\\n\" [ \\t]{0,20}"); break;
    case H_CHAR: rule(s, "char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})"); break;
    case H_STRING:
        need(s, H_CHAR), need(s, H_SPACE);
        snprintf(b, sizeof b, "\"\\\"\" %schar* \"\\\"\" %sspace", p, p);
        rule(s, "string", b);
        break;
    case H_NUMBER:
        need(s, H_SPACE);
        snprintf(b, sizeof b, "\"-\"? ([0] | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,4})? %sspace", p);
        rule(s, "number", b);
        break;
    case H_INTEGER:
        need(s, H_SPACE);
        snprintf(b, sizeof b, "\"-\"? ([0] | [1-9] [0-9]{0,15}) %sspace", p);
        rule(s, "integer", b);
        break;
    case H_BOOLEAN: need(s, H_SPACE); snprintf(b, sizeof b, "(\"true\" | \"false\") %sspace", p); rule(s, "boolean", b); break;
    case H_NULL: need(s, H_SPACE); snprintf(b, sizeof b, "\"null\" %sspace", p); rule(s, "null", b); break;
    case H_VALUE:
        need(s, H_STRING), need(s, H_NUMBER), need(s, H_BOOLEAN), need(s, H_NULL);
        snprintf(b, sizeof b, "%sobject | %sarray | %sstring | %snumber | %sboolean | %snull", p, p, p, p, p, p);
        rule(s, "value", b);
        snprintf(b, sizeof b, "\"{\" %sspace (%sstring \":\" %sspace %svalue (\",\" %sspace %sstring \":\" %sspace %svalue)*)? \"}\" %sspace", p, p, p,
                 p, p, p, p, p, p);
        rule(s, "object", b);
        snprintf(b, sizeof b, "\"[\" %sspace (%svalue (\",\" %sspace %svalue)*)? \"]\" %sspace", p, p, p, p, p);
        rule(s, "array", b);
        break;
    default: break;
    }
}

static const char *need(struct sc *s, unsigned h) {
    write_helpers(s, h);
    switch (h) {
    case H_SPACE: return ref(s, "space");
    case H_STRING: return ref(s, "string");
    case H_NUMBER: return ref(s, "number");
    case H_INTEGER: return ref(s, "integer");
    case H_BOOLEAN: return ref(s, "boolean");
    case H_NULL: return ref(s, "null");
    case H_VALUE: return ref(s, "value");
    default: return ref(s, "char");
    }
}

/* ---- literals ---- */

/* GBNF literal of bytes t[0..n) (quotes included). */
static void gbnf_lit(struct sc *s, struct jbuf *b, const char *t, size_t n) {
    put(s, b, "\"");
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)t[i];
        if (c == '"' || c == '\\') { char x[3] = {'\\', (char)c, 0}; put(s, b, x); }
        else if (c < 0x20 || c == 0x7F) putf(s, b, "\\x%02X", c);
        else put_n(s, b, (const char *)&t[i], 1);
    }
    put(s, b, "\"");
}

/* Compact JSON text of x (strings escaped as JSON requires). */
static void dump_compact(struct sc *s, struct jbuf *b, jv x) {
    switch (x.t) {
    case JV_NONE: put(s, b, "null"); break;
    case JV_BOOL: put(s, b, x.u.b ? "true" : "false"); break;
    case JV_INT: putf(s, b, "%lld", (long long)x.u.i); break;
    case JV_FLOAT: {
        char f[40];
        jfloat_repr(x.u.f, f);
        put(s, b, f);
        break;
    }
    case JV_STR:
        if (!jbuf_json(s->a, s->e, b, x.u.s, x.n, 0)) out_limit(s);
        break;
    case JV_LIST:
        put(s, b, "[");
        for (int32_t i = 0; i < x.u.l->n; i++) { if (i) put(s, b, ","); dump_compact(s, b, x.u.l->v[i]); }
        put(s, b, "]");
        break;
    case JV_DICT:
        put(s, b, "{");
        for (int32_t i = 0; i < x.u.d->n; i++) {
            if (i) put(s, b, ",");
            dump_compact(s, b, x.u.d->k[i]);
            put(s, b, ":");
            dump_compact(s, b, x.u.d->v[i]);
        }
        put(s, b, "}");
        break;
    default: break;
    }
}

static void literal_of(struct sc *s, struct jbuf *b, jv x) {
    struct jbuf t = newbuf();
    dump_compact(s, &t, x);
    gbnf_lit(s, b, t.p, t.n);
    putf(s, b, " %s", need(s, H_SPACE));
}

/* ---- helpers ---- */

static const char *child_ptr(struct sc *s, const char *ptr, const char *key, int idx) {
    struct jbuf b = newbuf();
    put(s, &b, ptr);
    put(s, &b, "/");
    if (key) {
        for (const char *k = key; *k; k++) {
            if (*k == '~') put(s, &b, "~0");
            else if (*k == '/') put(s, &b, "~1");
            else put_n(s, &b, k, 1);
        }
    } else putf(s, &b, "%d", idx);
    return bufstr(s, &b);
}

static jv *get(jv node, const char *key) { return node.t == JV_DICT ? jv_dict_get(node.u.d, key, strlen(key)) : NULL; }

static const char *cstr(struct sc *s, jv x) {
    char *p = jarena_alloc(s->a, s->e, x.n + 1);
    memcpy(p, x.u.s, x.n);
    p[x.n] = 0;
    return p;
}

static _Noreturn void bad(struct sc *s, const char *ptr, const char *what) {
    jerr_throw(s->e, KVB_ERR_INVALID, "json schema %s: %s", *ptr ? ptr : "(root)", what);
}

static int64_t count_of(struct sc *s, const char *ptr, jv *x, const char *kw, int64_t dflt) {
    if (!x) return dflt;
    double v = x->t == JV_INT ? (double)x->u.i : x->t == JV_FLOAT ? x->u.f : -1;
    if ((x->t != JV_INT && x->t != JV_FLOAT) || !(v >= 0) || v != floor(v)) /* floor: no cast of a value past int64 (3e62 is an integer) */
        jerr_throw(s->e, KVB_ERR_INVALID, "json schema %s: \"%s\" must be a non-negative integer", *ptr ? ptr : "(root)", kw);
    if (v > MAX_REPEAT) jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: \"%s\" above %d is not supported", *ptr ? ptr : "(root)", kw, MAX_REPEAT);
    return (int64_t)v;
}

/* "{a,b}" ("{a,}" when b < 0) */
static void put_rep(struct sc *s, struct jbuf *b, int64_t lo, int64_t hi) {
    if (hi < 0) putf(s, b, "{%lld,}", (long long)lo);
    else putf(s, b, "{%lld,%lld}", (long long)lo, (long long)hi);
}

static const char *gen(struct sc *s, jv node, const char *ptr);

/* ---- keywords ---- */

static const char *const k_annotations[] = {"$schema", "$id", "id", "title", "description", "default", "examples", "$comment", "readOnly",
                                            "writeOnly", "deprecated", "$defs", "definitions", NULL};
static const char *const k_known[] = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "nullable", "properties", "required",
                                      "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength",
                                      "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

/* the keywords of one type each */
static const char *const k_obj[] = {"properties", "required", "additionalProperties", NULL};
static const char *const k_arr[] = {"items", "prefixItems", "minItems", "maxItems", NULL};
static const char *const k_str[] = {"minLength", "maxLength", "pattern", "format", NULL};
static const char *const k_num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

/* The keywords of type t (a JSON string value), or NULL for types that have none. */
static const char *const *keywords_of(jv t) {
    if (t.t != JV_STR) return NULL;
    if (t.n == 6 && !memcmp(t.u.s, "object", 6)) return k_obj;
    if (t.n == 5 && !memcmp(t.u.s, "array", 5)) return k_arr;
    if (t.n == 6 && !memcmp(t.u.s, "string", 6)) return k_str;
    if ((t.n == 7 && !memcmp(t.u.s, "integer", 7)) || (t.n == 6 && !memcmp(t.u.s, "number", 6))) return k_num;
    return NULL;
}

static bool key_is(jv k, const char *name) { return k.t == JV_STR && k.n == strlen(name) && !memcmp(k.u.s, name, k.n); }

static bool in_list(const char *const *l, const char *k, size_t n) {
    for (; *l; l++)
        if (strlen(*l) == n && !memcmp(*l, k, n)) return true;
    return false;
}

static void check_keywords(struct sc *s, jv node, const char *ptr) {
    for (int32_t i = 0; i < node.u.d->n; i++) {
        jv k = node.u.d->k[i];
        if (k.t != JV_STR) continue;
        if (in_list(k_annotations, k.u.s, k.n) || in_list(k_known, k.u.s, k.n)) continue;
        jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: keyword \"%.*s\" is not supported", *ptr ? ptr : "(root)", (int)KVB_MIN(k.n, 64),
                   k.u.s);
    }
}

/* ---- strings ---- */

static const char *json_char_class_byte(uint32_t c, char *buf) {
    /* a code point inside a GBNF character class */
    if (c == ']' || c == '[' || c == '\\' || c == '-' || c == '^' || c == '"') { buf[0] = '\\'; buf[1] = (char)c; buf[2] = 0; }
    else if (c < 0x20 || c == 0x7F) snprintf(buf, 8, "\\x%02X", c);
    else if (c < 0x80) { buf[0] = (char)c; buf[1] = 0; }
    else snprintf(buf, 12, "\\U%08X", c);
    return buf;
}

struct rx {
    struct sc *s;
    const char *p, *end, *ptr;
    int depth;
    const char *begin; /* the pattern's first byte: error offsets count from it */
};

static _Noreturn void rx_unsupported(struct rx *r, const char *what) {
    jerr_throw(r->s->e, KVB_ERR_UNSUPPORTED, "json schema %s: pattern: %s is not supported (at offset %d)", *r->ptr ? r->ptr : "(root)", what,
               (int)(r->p - r->begin));
}

static uint32_t rx_utf8(struct rx *r) {
    uint8_t b = (uint8_t)*r->p++;
    if (b < 0x80) return b;
    int n = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : 0;
    uint32_t c = b & (0x3Fu >> n);
    for (int i = 0; i < n && r->p < r->end; i++) c = c << 6 | ((uint8_t)*r->p++ & 0x3F);
    return c;
}

/* A JSON-string piece that produces code point c (escaped when JSON needs it). */
static void rx_lit(struct rx *r, struct jbuf *b, uint32_t c) {
    struct sc *s = r->s;
    if (c == '"') put(s, b, "\"\\\\\\\"\"");
    else if (c == '\\') put(s, b, "\"\\\\\\\\\"");
    else if (c == '\n') put(s, b, "\"\\\\n\"");
    else if (c == '\t') put(s, b, "\"\\\\t\"");
    else if (c == '\r') put(s, b, "\"\\\\r\"");
    else if (c < 0x20) putf(s, b, "\"\\\\u%04x\"", c);
    else {
        char t[16];
        put(s, b, "[");
        put(s, b, json_char_class_byte(c, t));
        put(s, b, "]");
    }
}

static void rx_alt(struct rx *r, struct jbuf *b);

/* class items of \d \w \s into b (inside [ ]) */
static bool rx_shorthand(struct sc *s, struct jbuf *b, char c, bool *neg) {
    *neg = c == 'D' || c == 'W' || c == 'S';
    switch (c) {
    case 'd': case 'D': put(s, b, "0-9"); return true;
    case 'w': case 'W': put(s, b, "a-zA-Z0-9_"); return true;
    case 's': case 'S': put(s, b, " \\t\\n\\r"); return true;
    default: return false;
    }
}

static uint32_t rx_escape_char(struct rx *r, char c) {
    switch (c) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) rx_unsupported(r, "this escape");
        return (uint8_t)c;
    }
}

static void rx_class(struct rx *r, struct jbuf *b) {
    struct sc *s = r->s;
    r->p++; /* [ */
    bool neg = r->p < r->end && *r->p == '^';
    if (neg) r->p++;
    /* raw characters only: '"', '\\' and control characters never come from a class */
    put(s, b, neg ? "[^\"\\\\\\x00-\\x1F" : "[");
    bool first = true;
    while (r->p < r->end && (*r->p != ']' || first)) {
        first = false;
        uint32_t lo;
        if (*r->p == '\\') {
            if (++r->p >= r->end) rx_unsupported(r, "a trailing '\\'");
            bool sneg;
            char c = *r->p++;
            if (rx_shorthand(s, b, c, &sneg)) {
                if (sneg) rx_unsupported(r, "a negated shorthand inside a class");
                continue;
            }
            lo = rx_escape_char(r, c);
        } else if (*r->p == '[') rx_unsupported(r, "'[' inside a class");
        else lo = rx_utf8(r);
        uint32_t hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            r->p++;
            if (*r->p == '\\') {
                r->p++;
                if (r->p >= r->end) rx_unsupported(r, "a trailing '\\'");
                hi = rx_escape_char(r, *r->p++);
            } else hi = rx_utf8(r);
            if (hi < lo) rx_unsupported(r, "a reversed range");
        }
        /* drop what JSON would need escaped (a positive class); a negated one already excludes them */
        for (uint32_t a = lo; a <= hi;) {
            if (a < 0x20 || a == '"' || a == '\\') { a++; continue; }
            uint32_t z = a;
            while (z < hi && !(z + 1 < 0x20 || z + 1 == '"' || z + 1 == '\\')) z++;
            char t1[16], t2[16];
            if (z == a) put(s, b, json_char_class_byte(a, t1));
            else putf(s, b, "%s-%s", json_char_class_byte(a, t1), json_char_class_byte(z, t2));
            a = z + 1;
            if (z == 0x10FFFF) break;
        }
    }
    if (r->p >= r->end) rx_unsupported(r, "an unterminated class");
    r->p++;
    put(s, b, "]");
    /* an empty positive class can match nothing */
    if (!neg && b->n >= 2 && b->p[b->n - 2] == '[') {
        b->n -= 2;
        put(s, b, "[^\\x00-\\U0010FFFF]");
    }
}

static void rx_atom(struct rx *r, struct jbuf *b) {
    struct sc *s = r->s;
    char c = *r->p;
    if (c == '(') {
        r->p++;
        if (r->p < r->end && *r->p == '?') {
            if (r->p + 1 < r->end && r->p[1] == ':') r->p += 2;
            else rx_unsupported(r, "'(?' (lookaround or named group)");
        }
        if (++r->depth > 32) rx_unsupported(r, "groups nested deeper than 32");
        put(s, b, "(");
        rx_alt(r, b);
        if (r->p >= r->end || *r->p != ')') rx_unsupported(r, "an unbalanced '('");
        r->p++;
        r->depth--;
        put(s, b, ")");
    } else if (c == '[') rx_class(r, b);
    else if (c == '.') {
        r->p++;
        put(s, b, "[^\"\\\\\\x00-\\x1F]");
    } else if (c == '\\') {
        r->p++;
        if (r->p >= r->end) rx_unsupported(r, "a trailing '\\'");
        char e = *r->p++;
        bool neg;
        struct jbuf t = newbuf();
        if (rx_shorthand(s, &t, e, &neg)) {
            put(s, b, neg ? "[^\"\\\\\\x00-\\x1F" : "[");
            put(s, b, bufstr(s, &t));
            put(s, b, "]");
        } else if (e >= '1' && e <= '9') rx_unsupported(r, "a back-reference");
        else if (e == 'b' || e == 'B') rx_unsupported(r, "a word boundary");
        else rx_lit(r, b, rx_escape_char(r, e));
    } else if (c == '^' || c == '$') rx_unsupported(r, "an anchor inside the pattern");
    else rx_lit(r, b, rx_utf8(r));
}

static void rx_seq(struct rx *r, struct jbuf *b) {
    struct sc *s = r->s;
    bool any = false;
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        if (*r->p == '$' && r->p + 1 == r->end) break;
        if (*r->p == '*' || *r->p == '+' || *r->p == '?' || *r->p == '{') rx_unsupported(r, "a quantifier without an item");
        put(s, b, any ? " (" : "(");
        rx_atom(r, b);
        put(s, b, ")");
        any = true;
        if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?')) {
            put_n(r->s, b, r->p, 1);
            r->p++;
        } else if (r->p < r->end && *r->p == '{') {
            const char *q = r->p + 1;
            long lo = 0, hi = -1;
            char *endp;
            lo = strtol(q, &endp, 10);
            if (endp == q) rx_unsupported(r, "'{' that is not a repetition");
            q = endp;
            if (*q == ',') {
                q++;
                if (*q == '}') hi = -2;
                else {
                    hi = strtol(q, &endp, 10);
                    if (endp == q) rx_unsupported(r, "a malformed repetition");
                    q = endp;
                }
            } else hi = lo;
            if (*q != '}' || lo < 0 || lo > MAX_REPEAT || hi > MAX_REPEAT || (hi >= 0 && hi < lo)) rx_unsupported(r, "this repetition");
            r->p = q + 1;
            put_rep(s, b, lo, hi == -2 ? -1 : hi);
        }
        if (r->p < r->end && (*r->p == '?' || *r->p == '+')) rx_unsupported(r, "a lazy or possessive quantifier");
    }
    if (!any) put(s, b, "\"\"");
}

static void rx_alt(struct rx *r, struct jbuf *b) {
    rx_seq(r, b);
    while (r->p < r->end && *r->p == '|') {
        r->p++;
        put(r->s, b, " | ");
        rx_seq(r, b);
    }
}

static void string_pattern(struct sc *s, struct jbuf *b, jv pat, const char *ptr) {
    if (pat.t != JV_STR) bad(s, ptr, "\"pattern\" must be a string");
    const char *p = cstr(s, pat);
    struct rx r = {s, p, p + strlen(p), ptr, 0, p};
    bool start = r.p < r.end && *r.p == '^';
    if (start) r.p++;
    bool end_anchor = r.end > r.p && r.end[-1] == '$' && (r.end - 1 == r.p || r.end[-2] != '\\');
    const char *ch = need(s, H_CHAR);
    put(s, b, "\"\\\"\" ");
    if (!start) putf(s, b, "%s* ", ch);
    put(s, b, "(");
    rx_alt(&r, b);
    if (r.p < r.end && *r.p == '$' && r.p + 1 == r.end) r.p++;
    if (r.p != r.end) rx_unsupported(&r, "an unbalanced ')'");
    put(s, b, ") ");
    if (!end_anchor) putf(s, b, "%s* ", ch);
    putf(s, b, "\"\\\"\" %s", need(s, H_SPACE));
}

static void string_format(struct sc *s, struct jbuf *b, const char *f, const char *ptr) {
    const char *date = "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])";
    const char *time = "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
    put(s, b, "\"\\\"\" ");
    if (!strcmp(f, "date")) put(s, b, date);
    else if (!strcmp(f, "time")) put(s, b, time);
    else if (!strcmp(f, "date-time")) { put(s, b, date); put(s, b, " \"T\" "); put(s, b, time); }
    else if (!strcmp(f, "uuid"))
        put(s, b, "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}");
    else jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: \"format\": \"%.40s\" is not supported", *ptr ? ptr : "(root)", f);
    putf(s, b, " \"\\\"\" %s", need(s, H_SPACE));
}

static void gen_string(struct sc *s, struct jbuf *b, jv node, const char *ptr) {
    jv *pat = get(node, "pattern"), *fmt = get(node, "format");
    int64_t lo = count_of(s, ptr, get(node, "minLength"), "minLength", 0), hi = count_of(s, ptr, get(node, "maxLength"), "maxLength", -1);
    if (hi >= 0 && hi < lo) bad(s, ptr, "maxLength below minLength");
    if ((pat || fmt) && (get(node, "minLength") || get(node, "maxLength")))
        jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: minLength/maxLength together with pattern or format is not supported",
                   *ptr ? ptr : "(root)");
    if (pat && fmt) jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: pattern together with format is not supported", *ptr ? ptr : "(root)");
    if (pat) {
        string_pattern(s, b, *pat, ptr);
        return;
    }
    if (fmt) {
        if (fmt->t != JV_STR) bad(s, ptr, "\"format\" must be a string");
        string_format(s, b, cstr(s, *fmt), ptr);
        return;
    }
    if (!lo && hi < 0) {
        put(s, b, need(s, H_STRING));
        return;
    }
    putf(s, b, "\"\\\"\" %s", need(s, H_CHAR));
    put_rep(s, b, lo, hi);
    putf(s, b, " \"\\\"\" %s", need(s, H_SPACE));
}

/* ---- integers in a range ---- */

#define INT_LIMIT 1000000000000000LL /* 10^15 */

/* digits of the same length: a..b (decimal strings, a <= b) */
static void digits_range(struct sc *s, struct jbuf *b, const char *a, const char *z, size_t n) {
    if (!n) return;
    size_t i = 0;
    while (i < n && a[i] == z[i]) i++;
    if (i) {
        putf(s, b, "\"%.*s\" ", (int)i, a);
        a += i, z += i, n -= i;
        if (!n) return;
    }
    bool a_zeros = true, z_nines = true;
    for (size_t k = 1; k < n; k++) { a_zeros &= a[k] == '0'; z_nines &= z[k] == '9'; }
    if (a_zeros && z_nines) {
        putf(s, b, "[%c-%c]", a[0], z[0]);
        if (n > 1) putf(s, b, " [0-9]{%zu}", n - 1);
        put(s, b, " ");
        return;
    }
    put(s, b, "(");
    /* a[0] then a[1..]..99 */
    char nines[20], zeros[20];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    putf(s, b, "\"%c\" ", a[0]);
    digits_range(s, b, a + 1, nines, n - 1);
    if (a[0] + 1 <= z[0] - 1) {
        putf(s, b, "| [%c-%c]", a[0] + 1, z[0] - 1);
        if (n > 1) putf(s, b, " [0-9]{%zu}", n - 1);
        put(s, b, " ");
    }
    putf(s, b, "| \"%c\" ", z[0]);
    digits_range(s, b, zeros, z + 1, n - 1);
    put(s, b, ") ");
}

/* non-negative lo..hi */
static void nat_range(struct sc *s, struct jbuf *b, int64_t lo, int64_t hi) {
    put(s, b, "(");
    bool first = true;
    int64_t p = 1;
    for (int len = 1; len <= 16; len++, p *= 10) {
        int64_t a = len == 1 ? 0 : p, z = p * 10 - 1;
        if (a < lo) a = lo;
        if (z > hi) z = hi;
        if (a > z) continue;
        char sa[24], sz[24];
        snprintf(sa, sizeof sa, "%lld", (long long)a);
        snprintf(sz, sizeof sz, "%lld", (long long)z);
        put(s, b, first ? "" : "| ");
        first = false;
        digits_range(s, b, sa, sz, strlen(sa));
    }
    put(s, b, ")");
}

static bool bound_of(struct sc *s, jv node, const char *kw, const char *ptr, int64_t *v) {
    jv *x = get(node, kw);
    if (!x) return false;
    double d = x->t == JV_INT ? (double)x->u.i : x->t == JV_FLOAT ? x->u.f : NAN;
    if (x->t == JV_BOOL && (!strcmp(kw, "exclusiveMinimum") || !strcmp(kw, "exclusiveMaximum")))
        jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: boolean \"%s\" (draft 4) is not supported", *ptr ? ptr : "(root)", kw);
    if (d != d) jerr_throw(s->e, KVB_ERR_INVALID, "json schema %s: \"%s\" must be a number", *ptr ? ptr : "(root)", kw);
    if (d <= -(double)INT_LIMIT || d >= (double)INT_LIMIT)
        jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: \"%s\" beyond 10^15 is not supported", *ptr ? ptr : "(root)", kw);
    /* integers only take integer values: round inward */
    bool lower = !strcmp(kw, "minimum") || !strcmp(kw, "exclusiveMinimum");
    double r = lower ? ceil(d) : floor(d);
    if (!strcmp(kw, "exclusiveMinimum") && r == d) r += 1;
    if (!strcmp(kw, "exclusiveMaximum") && r == d) r -= 1;
    *v = (int64_t)r;
    return true;
}

static void gen_integer(struct sc *s, struct jbuf *b, jv node, const char *ptr) {
    int64_t lo = -(INT_LIMIT * 10 - 1), hi = INT_LIMIT * 10 - 1, v;
    bool any = false;
    if (bound_of(s, node, "minimum", ptr, &v)) { lo = KVB_MAX(lo, v); any = true; }
    if (bound_of(s, node, "exclusiveMinimum", ptr, &v)) { lo = KVB_MAX(lo, v); any = true; }
    if (bound_of(s, node, "maximum", ptr, &v)) { hi = KVB_MIN(hi, v); any = true; }
    if (bound_of(s, node, "exclusiveMaximum", ptr, &v)) { hi = KVB_MIN(hi, v); any = true; }
    if (!any) {
        put(s, b, need(s, H_INTEGER));
        return;
    }
    if (lo > hi) bad(s, ptr, "no integer lies between the bounds");
    put(s, b, "(");
    bool alt = false;
    if (lo < 0) {
        put(s, b, "\"-\" ");
        nat_range(s, b, hi < 0 ? -hi : 1, -lo);
        alt = true;
    }
    if (hi >= 0) {
        if (alt) put(s, b, " | ");
        nat_range(s, b, lo < 0 ? 0 : lo, hi);
    }
    putf(s, b, ") %s", need(s, H_SPACE));
}

/* ---- objects and arrays ---- */

/* byte order of two JSON strings */
static int cmp_names(const void *a, const void *b) {
    const jv *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = n ? memcmp(x->u.s, y->u.s, n) : 0;
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* A string rule for keys that are none of names[0..n) (their JSON text with no escapes). */
static const char *key_not_in(struct sc *s, jv *names, int32_t n) {
    /* a trie over the names' bytes, each node a rule: stop here (when no name ends here), take a child's byte,
     * or take any other character (then anything may follow). Built from the names sorted, so each name adds
     * the nodes past its common prefix with the one before, in preorder: linear in the names' bytes. */
    const char *ch = need(s, H_CHAR);
    const char *base = new_name(s);
    struct node {
        const char *p;
        size_t len;
        int32_t parent, first, next, last; /* children: first..next links (last: the newest) */
        bool ends;
    };
    /* only names of plain printable ASCII (no '"' or '\\') are excluded: a name with other characters may come
     * again as an extra key */
    jv *plain = jarena_alloc(s->a, s->e, sizeof *plain * (size_t)(n + 1));
    int32_t np = 0;
    size_t longest = 0;
    for (int32_t i = 0; i < n; i++) {
        bool ok = names[i].t == JV_STR;
        for (size_t j = 0; ok && j < names[i].n; j++) ok = names[i].u.s[j] >= 0x20 && names[i].u.s[j] < 0x7F && names[i].u.s[j] != '"' && names[i].u.s[j] != '\\';
        if (ok) {
            plain[np++] = names[i];
            if (names[i].n > longest) longest = names[i].n;
        }
    }
    names = plain;
    n = np;
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) total += names[i].n + 1;
    struct node *nodes = jarena_alloc(s->a, s->e, sizeof *nodes * (total + 1));
    int32_t *path = jarena_alloc(s->a, s->e, sizeof *path * (longest + 1)); /* path[l]: the node of the current name's first l bytes */
    int32_t nn = 0;
    nodes[nn++] = (struct node){"", 0, -1, -1, -1, -1, false};
    path[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t lcp = 0;
        if (i)
            while (lcp < names[i].n && lcp < names[i - 1].n && names[i].u.s[lcp] == names[i - 1].u.s[lcp]) lcp++;
        for (size_t l = lcp + 1; l <= names[i].n; l++) {
            if (nn > KVB_GRAMMAR_MAX_RULES)
                jerr_throw(s->e, KVB_ERR_INVALID, "json schema: the grammar it makes would have more than %d rules (the limit)", KVB_GRAMMAR_MAX_RULES);
            int32_t par = path[l - 1];
            nodes[nn] = (struct node){names[i].u.s, l, par, -1, -1, -1, false};
            if (nodes[par].last < 0) nodes[par].first = nn;
            else nodes[nodes[par].last].next = nn;
            nodes[par].last = nn;
            path[l] = nn++;
        }
        nodes[path[names[i].n]].ends = true;
    }
    for (int32_t k = 0; k < nn; k++) {
        struct jbuf b = newbuf();
        bool alt = false;
        if (!nodes[k].ends) { put(s, &b, "\"\""); alt = true; }
        /* children bytes */
        char excl[1024];
        size_t ne = 0;
        for (int32_t c = nodes[k].first; c >= 0; c = nodes[c].next) {
            uint8_t byte = (uint8_t)nodes[c].p[nodes[k].len];
            char t[16];
            putf(s, &b, "%s[%s] %ss%s_%d", alt ? " | " : "", json_char_class_byte(byte, t), s->prefix, base, c);
            alt = true;
            if (ne + 16 < sizeof excl) { memcpy(excl + ne, t, strlen(t)); ne += strlen(t); }
        }
        excl[ne] = 0;
        /* any other character (or an escape: a name spelled with escapes is not recognised), then anything */
        putf(s, &b, "%s([^\"\\\\\\x00-\\x1F%s] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})) %s*", alt ? " | " : "", excl, ch);
        char nm[64];
        snprintf(nm, sizeof nm, "s%s_%d", base, k);
        rule(s, nm, bufstr(s, &b));
    }
    const char *r = new_name(s);
    struct jbuf b = newbuf();
    putf(s, &b, "\"\\\"\" %ss%s_0 \"\\\"\" %s", s->prefix, base, need(s, H_SPACE));
    rule(s, r, bufstr(s, &b));
    return ref(s, r);
}

static void gen_object(struct sc *s, struct jbuf *b, jv node, const char *ptr) {
    jv *props = get(node, "properties"), *req = get(node, "required"), *addl = get(node, "additionalProperties");
    if (props && props->t != JV_DICT) bad(s, ptr, "\"properties\" must be an object");
    if (req && req->t != JV_LIST) bad(s, ptr, "\"required\" must be an array");
    const char *sp = need(s, H_SPACE);
    int32_t np = props ? props->u.d->n : 0;
    /* the extra key-value pairs */
    const char *extra = NULL;
    /* as llama.cpp: a schema that lists properties (even none: a tool without arguments) allows no other key unless
     * additionalProperties says so; without properties, any key */
    bool extra_ok = addl ? !(addl->t == JV_BOOL && !addl->u.b) : !props;
    if (addl && addl->t != JV_BOOL && addl->t != JV_DICT) bad(s, ptr, "\"additionalProperties\" must be a boolean or a schema");
    if (req)
        for (int32_t i = 0; i < req->u.l->n; i++) {
            jv r = req->u.l->v[i];
            if (r.t != JV_STR) bad(s, ptr, "\"required\" must list strings");
            if (!props || !jv_dict_get(props->u.d, r.u.s, r.n))
                jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: required property \"%.*s\" has no schema in \"properties\"",
                           *ptr ? ptr : "(root)", (int)KVB_MIN(r.n, 64), r.u.s);
        }
    if (extra_ok) {
        const char *val = addl && addl->t == JV_DICT ? gen(s, *addl, child_ptr(s, ptr, "additionalProperties", 0)) : need(s, H_VALUE);
        const char *key = np ? key_not_in(s, props->u.d->k, np) : need(s, H_STRING);
        const char *kv = new_name(s);
        struct jbuf t = newbuf();
        putf(s, &t, "%s \":\" %s %s", key, sp, val);
        rule(s, kv, bufstr(s, &t));
        extra = ref(s, kv);
    }
    if (!np) {
        if (!extra) putf(s, b, "\"{\" %s \"}\" %s", sp, sp);
        else putf(s, b, "\"{\" %s (%s (\",\" %s %s)*)? \"}\" %s", sp, extra, sp, extra, sp);
        return;
    }
    /* H_i: properties i.. with nothing written yet; T_i: with something written (each then starts with a comma) */
    const char **kv = jarena_alloc(s->a, s->e, sizeof *kv * (size_t)np);
    bool *opt = jarena_alloc(s->a, s->e, sizeof *opt * (size_t)np);
    for (int32_t i = 0; i < np; i++) {
        jv k = props->u.d->k[i];
        const char *kname = cstr(s, k);
        const char *val = gen(s, props->u.d->v[i], child_ptr(s, child_ptr(s, ptr, "properties", 0), kname, 0));
        struct jbuf t = newbuf();
        struct jbuf lit = newbuf();
        dump_compact(s, &lit, k);
        gbnf_lit(s, &t, lit.p, lit.n);
        putf(s, &t, " %s \":\" %s %s", sp, sp, val);
        const char *nm = new_name(s);
        rule(s, nm, bufstr(s, &t));
        kv[i] = ref(s, nm);
        opt[i] = true;
        for (int32_t j = 0; req && j < req->u.l->n; j++)
            if (req->u.l->v[j].n == k.n && !memcmp(req->u.l->v[j].u.s, k.u.s, k.n)) opt[i] = false;
    }
    const char *base = new_name(s);
    char hn[64], tn[64], hn1[64], tn1[64];
    for (int32_t i = np; i >= 0; i--) {
        snprintf(hn, sizeof hn, "%s_h%d", base, i);
        snprintf(tn, sizeof tn, "%s_t%d", base, i);
        snprintf(hn1, sizeof hn1, "%s%s_h%d", s->prefix, base, i + 1);
        snprintf(tn1, sizeof tn1, "%s%s_t%d", s->prefix, base, i + 1);
        struct jbuf h = newbuf(), t = newbuf();
        if (i == np) {
            if (extra) {
                putf(s, &h, "(%s (\",\" %s %s)*)?", extra, sp, extra);
                putf(s, &t, "(\",\" %s %s)*", sp, extra);
            } else {
                put(s, &h, "\"\"");
                put(s, &t, "\"\"");
            }
        } else {
            putf(s, &h, "%s %s", kv[i], tn1);
            if (opt[i]) putf(s, &h, " | %s", hn1);
            if (opt[i]) putf(s, &t, "(\",\" %s %s)? %s", sp, kv[i], tn1);
            else putf(s, &t, "\",\" %s %s %s", sp, kv[i], tn1);
        }
        rule(s, hn, bufstr(s, &h));
        rule(s, tn, bufstr(s, &t));
    }
    putf(s, b, "\"{\" %s %s%s_h0 \"}\" %s", sp, s->prefix, base, sp);
}

static void gen_array(struct sc *s, struct jbuf *b, jv node, const char *ptr) {
    jv *items = get(node, "items"), *prefix = get(node, "prefixItems");
    if (prefix && prefix->t != JV_LIST) bad(s, ptr, "\"prefixItems\" must be an array");
    if (items && items->t == JV_LIST)
        jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: \"items\" as an array (draft 4 tuples; use prefixItems)", *ptr ? ptr : "(root)");
    if (items && items->t != JV_DICT && items->t != JV_BOOL) bad(s, ptr, "\"items\" must be a schema");
    int64_t lo = count_of(s, ptr, get(node, "minItems"), "minItems", 0), hi = count_of(s, ptr, get(node, "maxItems"), "maxItems", -1);
    if (hi >= 0 && hi < lo) bad(s, ptr, "maxItems below minItems");
    const char *sp = need(s, H_SPACE);
    int32_t k = prefix ? prefix->u.l->n : 0;
    bool no_more = items && items->t == JV_BOOL && !items->u.b;
    if (no_more && hi < 0) hi = k;
    if (no_more && hi > k) hi = k;
    if (hi >= 0 && hi < lo) bad(s, ptr, "minItems above what the items allow");
    const char *item = items && items->t == JV_DICT ? gen(s, *items, child_ptr(s, ptr, "items", 0)) : no_more ? NULL : need(s, H_VALUE);
    const char **pi = jarena_alloc(s->a, s->e, sizeof *pi * (size_t)(k + 1));
    for (int32_t i = 0; i < k; i++) pi[i] = gen(s, prefix->u.l->v[i], child_ptr(s, child_ptr(s, ptr, "prefixItems", 0), NULL, i));
    /* E_i: items i.. (i > 0: each starts with a comma); item i optional when i >= lo */
    const char *base = new_name(s);
    int64_t npos = hi >= 0 ? KVB_MIN(hi, (int64_t)k) : k;
    char nm[64], nx[64];
    /* the rest after the prefix items: positions npos.. */
    {
        struct jbuf t = newbuf();
        snprintf(nm, sizeof nm, "%s_e%lld", base, (long long)npos);
        int64_t rlo = KVB_MAX(0, lo - npos), rhi = hi < 0 ? -1 : hi - npos;
        if (!item || rhi == 0) put(s, &t, "\"\"");
        else if (npos > 0) {
            putf(s, &t, "(\",\" %s %s)", sp, item);
            put_rep(s, &t, rlo, rhi);
        } else {
            /* no prefix: the first item has no comma */
            if (rlo == 0) putf(s, &t, "(%s (\",\" %s %s)", item, sp, item);
            else putf(s, &t, "%s (\",\" %s %s)", item, sp, item);
            put_rep(s, &t, rlo ? rlo - 1 : 0, rhi < 0 ? -1 : rhi - 1);
            if (rlo == 0) put(s, &t, ")?");
        }
        rule(s, nm, bufstr(s, &t));
    }
    for (int64_t i = npos - 1; i >= 0; i--) {
        struct jbuf t = newbuf();
        snprintf(nm, sizeof nm, "%s_e%lld", base, (long long)i);
        snprintf(nx, sizeof nx, "%s%s_e%lld", s->prefix, base, (long long)i + 1);
        if (i >= lo) put(s, &t, "(");
        if (i > 0) putf(s, &t, "\",\" %s ", sp);
        putf(s, &t, "%s %s", pi[i], nx);
        if (i >= lo) put(s, &t, ")?");
        rule(s, nm, bufstr(s, &t));
    }
    putf(s, b, "\"[\" %s %s%s_e0 \"]\" %s", sp, s->prefix, base, sp);
}

/* ---- one node ---- */

static bool has_type(jv *types, const char *t) {
    if (!types) return false;
    if (types->t == JV_STR) return types->n == strlen(t) && !memcmp(types->u.s, t, types->n);
    for (int32_t i = 0; types->t == JV_LIST && i < types->u.l->n; i++) {
        jv x = types->u.l->v[i];
        if (x.t == JV_STR && x.n == strlen(t) && !memcmp(x.u.s, t, x.n)) return true;
    }
    return false;
}

static const char *resolve_ref(struct sc *s, jv r, const char *ptr) {
    if (r.t != JV_STR) bad(s, ptr, "\"$ref\" must be a string");
    jv *have = jv_dict_get(s->refs.u.d, r.u.s, r.n);
    if (have) return cstr(s, *have);
    const char *t = cstr(s, r);
    const char *name = NULL;
    jv target;
    if (!strncmp(t, "#/$defs/", 8)) name = t + 8, target = s->root.t == JV_DICT && get(s->root, "$defs") ? *get(s->root, "$defs") : (jv){0};
    else if (!strncmp(t, "#/definitions/", 14))
        name = t + 14, target = s->root.t == JV_DICT && get(s->root, "definitions") ? *get(s->root, "definitions") : (jv){0};
    else if (!strcmp(t, "#")) name = "", target = s->root;
    else jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: \"$ref\": \"%.80s\" (only #/$defs/... and #/definitions/...)", *ptr ? ptr : "(root)", t);
    jv node = target;
    if (*name) {
        if (strchr(name, '/') || strchr(name, '~'))
            jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: \"$ref\": \"%.80s\" (a nested path)", *ptr ? ptr : "(root)", t);
        jv *x = target.t == JV_DICT ? jv_dict_get(target.u.d, name, strlen(name)) : NULL;
        if (!x) jerr_throw(s->e, KVB_ERR_INVALID, "json schema %s: \"$ref\": \"%.80s\" is not defined", *ptr ? ptr : "(root)", t);
        node = *x;
    }
    const char *nm = new_name(s);
    const char *full = ref(s, nm);
    jv_dict_set(s->a, s->e, s->refs, r, jv_str(s->a, s->e, full, strlen(full)));
    const char *body = gen(s, node, t + 1);
    rule(s, nm, body);
    return full;
}

/* Builds the body of node's rule into b. */
static void gen_body(struct sc *s, struct jbuf *b, jv node, const char *ptr) {
    if (node.t == JV_BOOL) {
        if (!node.u.b) jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: the schema false (nothing is valid)", *ptr ? ptr : "(root)");
        put(s, b, need(s, H_VALUE));
        return;
    }
    if (node.t != JV_DICT) bad(s, ptr, "a schema must be an object or a boolean");
    check_keywords(s, node, ptr);
    jv *x;
    jv *nullable = get(node, "nullable");
    if (nullable && nullable->t == JV_BOOL && nullable->u.b) {
        /* the node without nullable, or null */
        jv copy = jv_dict_new(s->a, s->e, node.u.d->n);
        for (int32_t i = 0; i < node.u.d->n; i++)
            if (!(node.u.d->k[i].t == JV_STR && node.u.d->k[i].n == 8 && !memcmp(node.u.d->k[i].u.s, "nullable", 8)))
                jv_dict_set(s->a, s->e, copy, node.u.d->k[i], node.u.d->v[i]);
        putf(s, b, "%s | %s", gen(s, copy, ptr), need(s, H_NULL));
        return;
    }
    if ((x = get(node, "$ref"))) {
        for (int32_t i = 0; i < node.u.d->n; i++) {
            jv k = node.u.d->k[i];
            if (k.t == JV_STR && !in_list(k_annotations, k.u.s, k.n) && !(k.n == 4 && !memcmp(k.u.s, "$ref", 4)))
                jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: \"%.*s\" beside \"$ref\" is not supported", *ptr ? ptr : "(root)",
                           (int)KVB_MIN(k.n, 64), k.u.s);
        }
        put(s, b, resolve_ref(s, *x, ptr));
        return;
    }
    if ((x = get(node, "const"))) {
        literal_of(s, b, *x);
        return;
    }
    if ((x = get(node, "enum"))) {
        if (x->t != JV_LIST || !x->u.l->n) bad(s, ptr, "\"enum\" must be a non-empty array");
        for (int32_t i = 0; i < x->u.l->n; i++) {
            if (i) put(s, b, " | ");
            literal_of(s, b, x->u.l->v[i]);
        }
        return;
    }
    jv *any = get(node, "anyOf");
    if (!any) any = get(node, "oneOf");
    if (any) {
        if (get(node, "anyOf") && get(node, "oneOf")) jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: anyOf together with oneOf", *ptr ? ptr : "(root)");
        if (any->t != JV_LIST || !any->u.l->n) bad(s, ptr, "\"anyOf\"/\"oneOf\" must be a non-empty array");
        const char *kw = get(node, "anyOf") ? "anyOf" : "oneOf";
        for (int32_t i = 0; i < node.u.d->n; i++) {
            jv k = node.u.d->k[i];
            if (k.t == JV_STR && !in_list(k_annotations, k.u.s, k.n) && !key_is(k, kw))
                jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: \"%.*s\" beside \"%s\" is not supported", *ptr ? ptr : "(root)",
                           (int)KVB_MIN(k.n, 64), k.u.s, kw);
        }
        const char *cp = child_ptr(s, ptr, kw, 0);
        for (int32_t i = 0; i < any->u.l->n; i++) {
            if (i) put(s, b, " | ");
            put(s, b, gen(s, any->u.l->v[i], child_ptr(s, cp, NULL, i)));
        }
        return;
    }
    if ((x = get(node, "allOf"))) {
        if (x->t != JV_LIST || !x->u.l->n) bad(s, ptr, "\"allOf\" must be a non-empty array");
        if (node.u.d->n != 1 && !(node.u.d->n == 2 && get(node, "type") && has_type(get(node, "type"), "object")))
            jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: \"allOf\" beside other keywords is not supported", *ptr ? ptr : "(root)");
        if (x->u.l->n == 1) {
            put(s, b, gen(s, x->u.l->v[0], child_ptr(s, child_ptr(s, ptr, "allOf", 0), NULL, 0)));
            return;
        }
        /* objects merged: properties and required joined, additionalProperties false unless one allows more */
        jv merged = jv_dict_new(s->a, s->e, 4), props = jv_dict_new(s->a, s->e, 8), req = jv_list_new(s->a, s->e, 8);
        for (int32_t i = 0; i < x->u.l->n; i++) {
            jv part = x->u.l->v[i];
            const char *pp = child_ptr(s, child_ptr(s, ptr, "allOf", 0), NULL, i);
            if (part.t == JV_DICT && get(part, "$ref")) {
                /* a reference to an object definition: merge its target */
                jv *rr = get(part, "$ref");
                if (rr->t == JV_STR && rr->n > 8 && !memcmp(rr->u.s, "#/$defs/", 8) && get(s->root, "$defs")) {
                    jv *tt = jv_dict_get(get(s->root, "$defs")->u.d, rr->u.s + 8, rr->n - 8);
                    if (tt) part = *tt;
                } else if (rr->t == JV_STR && rr->n > 14 && !memcmp(rr->u.s, "#/definitions/", 14) && get(s->root, "definitions")) {
                    jv *tt = jv_dict_get(get(s->root, "definitions")->u.d, rr->u.s + 14, rr->n - 14);
                    if (tt) part = *tt;
                }
            }
            if (part.t != JV_DICT || !get(part, "properties"))
                jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: \"allOf\" of schemas other than objects with properties", pp);
            for (int32_t j = 0; j < part.u.d->n; j++) {
                jv k = part.u.d->k[j];
                if (k.t == JV_STR && !in_list(k_annotations, k.u.s, k.n) && !key_is(k, "properties") && !key_is(k, "required") &&
                    !key_is(k, "type") && !key_is(k, "additionalProperties"))
                    jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: \"%.*s\" in an allOf part", pp, (int)KVB_MIN(k.n, 64), k.u.s);
            }
            jv *pr = get(part, "properties");
            if (pr->t != JV_DICT) bad(s, pp, "\"properties\" must be an object");
            for (int32_t j = 0; j < pr->u.d->n; j++) jv_dict_set(s->a, s->e, props, pr->u.d->k[j], pr->u.d->v[j]);
            jv *rq = get(part, "required");
            for (int32_t j = 0; rq && rq->t == JV_LIST && j < rq->u.l->n; j++) jv_list_push(s->a, s->e, req, rq->u.l->v[j]);
        }
        jv_dict_set(s->a, s->e, merged, jv_str(s->a, s->e, "properties", 10), props);
        jv_dict_set(s->a, s->e, merged, jv_str(s->a, s->e, "required", 8), req);
        gen_object(s, b, merged, ptr);
        return;
    }
    jv *type = get(node, "type");
    if (type && type->t != JV_STR && type->t != JV_LIST) bad(s, ptr, "\"type\" must be a string or an array");
    if (type && type->t == JV_LIST) {
        if (!type->u.l->n) bad(s, ptr, "\"type\" must not be empty");
        for (int32_t i = 0; i < type->u.l->n; i++) {
            jv t = type->u.l->v[i];
            if (t.t != JV_STR) bad(s, ptr, "\"type\" must list strings");
            if (type->u.l->n == 1) break;
            /* one alternative per type, with the keywords that apply to it (the others constrain other types) */
            const char *const *mine = keywords_of(t), *const *groups[] = {k_obj, k_arr, k_str, k_num};
            jv copy = jv_dict_new(s->a, s->e, node.u.d->n);
            for (int32_t j = 0; j < node.u.d->n; j++) {
                jv k = node.u.d->k[j];
                bool other = false;
                for (int gi = 0; gi < 4; gi++)
                    if (groups[gi] != mine && k.t == JV_STR && in_list(groups[gi], k.u.s, k.n)) other = true;
                if (!other) jv_dict_set(s->a, s->e, copy, k, key_is(k, "type") ? t : node.u.d->v[j]);
            }
            if (i) put(s, b, " | ");
            put(s, b, gen(s, copy, ptr));
        }
        if (type->u.l->n > 1) return;
        type = &type->u.l->v[0];
    }
    const char *tn = type ? cstr(s, *type) : NULL;
    if (!tn) { /* inferred from the keywords */
        if (get(node, "properties") || get(node, "additionalProperties") || get(node, "required")) tn = "object";
        else if (get(node, "items") || get(node, "prefixItems") || get(node, "minItems") || get(node, "maxItems")) tn = "array";
        else if (get(node, "minLength") || get(node, "maxLength") || get(node, "pattern") || get(node, "format")) tn = "string";
        else if (get(node, "minimum") || get(node, "maximum") || get(node, "exclusiveMinimum") || get(node, "exclusiveMaximum")) tn = "number";
        else {
            put(s, b, need(s, H_VALUE));
            return;
        }
    }
    /* keywords of other types are refused rather than ignored */
    const char *const *own = !strcmp(tn, "object") ? k_obj : !strcmp(tn, "array") ? k_arr : !strcmp(tn, "string") ? k_str
                           : (!strcmp(tn, "integer") || !strcmp(tn, "number")) ? k_num : NULL;
    const char *const *all[] = {k_obj, k_arr, k_str, k_num};
    for (int g = 0; g < 4; g++) {
        if (all[g] == own) continue;
        for (const char *const *k = all[g]; *k; k++)
            if (get(node, *k))
                jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: \"%s\" does not apply to type \"%.20s\"", *ptr ? ptr : "(root)", *k, tn);
    }
    if (!strcmp(tn, "object")) gen_object(s, b, node, ptr);
    else if (!strcmp(tn, "array")) gen_array(s, b, node, ptr);
    else if (!strcmp(tn, "string")) gen_string(s, b, node, ptr);
    else if (!strcmp(tn, "integer")) gen_integer(s, b, node, ptr);
    else if (!strcmp(tn, "number")) {
        for (int i = 0; k_num[i]; i++)
            if (get(node, k_num[i]))
                jerr_throw(s->e, KVB_ERR_UNSUPPORTED, "json schema %s: \"%s\" on a number (only on integers)", *ptr ? ptr : "(root)", k_num[i]);
        put(s, b, need(s, H_NUMBER));
    } else if (!strcmp(tn, "boolean")) put(s, b, need(s, H_BOOLEAN));
    else if (!strcmp(tn, "null")) put(s, b, need(s, H_NULL));
    else jerr_throw(s->e, KVB_ERR_INVALID, "json schema %s: unknown type \"%.20s\"", *ptr ? ptr : "(root)", tn);
}

/* A rule for node; returns its full name. */
static const char *gen(struct sc *s, jv node, const char *ptr) {
    if (++s->depth > 128) jerr_throw(s->e, KVB_ERR_INVALID, "json schema %s: nested deeper than 128", *ptr ? ptr : "(root)");
    struct jbuf b = newbuf();
    gen_body(s, &b, node, ptr);
    const char *nm = new_name(s);
    rule(s, nm, bufstr(s, &b));
    s->depth--;
    return ref(s, nm);
}

struct swork {
    struct jerr e;
    struct jarena a;
    struct sc s;
    const char *text;
    size_t len;
};

static kvb_status run(struct swork *w) {
    struct sc *s = &w->s;
    if (setjmp(w->e.jb)) return w->e.st;
    s->a = &w->a;
    s->e = &w->e;
    s->out = newbuf();
    s->refs = jv_dict_new(s->a, s->e, 8);
    s->root = w->text ? jjson_parse(s->a, s->e, "json schema", w->text, w->len, 64) : (jv){.t = JV_DICT, .u.d = jv_dict_new(s->a, s->e, 1).u.d};
    const char *top = gen(s, s->root, "");
    putf(s, &s->out, "%sroot ::= %s\n", s->prefix, top); /* the builder keeps its text NUL-terminated */
    return KVB_OK;
}

/* Object keys and array items of JSON text (its ':' and ',' outside strings): the size bound, checked before anything is
 * built from it, so a huge schema costs one pass over its bytes. */
static size_t count_items(const char *t, size_t n) {
    size_t k = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
        } else if (c == '"') in_str = true;
        else if (c == ':' || c == ',') k++;
    }
    return k;
}

kvb_status kvb_json_schema_to_gbnf(const char *schema_json, size_t len, const char *rule_prefix, char **gbnf, size_t *gbnf_len) {
    return kvb_json_schema_to_gbnf_flags(schema_json, len, rule_prefix, 0, gbnf, gbnf_len);
}

kvb_status kvb_json_schema_to_gbnf_flags(const char *schema_json, size_t len, const char *rule_prefix, unsigned flags, char **gbnf, size_t *gbnf_len) {
    if (flags & ~KVB_SCHEMA_COMPACT) return kvb_fail(KVB_ERR_INVALID, "kvb_json_schema_to_gbnf_flags: unknown flags 0x%x", flags & ~KVB_SCHEMA_COMPACT);
    if (!gbnf || !gbnf_len) return kvb_fail(KVB_ERR_INVALID, "kvb_json_schema_to_gbnf: NULL argument");
    const char *pre = rule_prefix ? rule_prefix : "";
    if (strlen(pre) > 32) return kvb_fail(KVB_ERR_INVALID, "json schema: rule prefix longer than 32 bytes");
    for (const char *c = pre; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_'))
            return kvb_fail(KVB_ERR_INVALID, "json schema: rule prefix '%s' has characters other than letters, digits, '-', '_'", pre);
    if (schema_json && count_items(schema_json, len) > MAX_ITEMS)
        return kvb_fail(KVB_ERR_INVALID, "json schema: more than %d object keys and array items (enum values included): the limit of a schema's size",
                        MAX_ITEMS);
    struct swork *w = kvb_calloc(1, sizeof *w);
    if (!w) return kvb_fail(KVB_ERR_NOMEM, "json schema: out of memory");
    w->a.limit = 256u << 20;
    w->s.prefix = pre;
    w->s.compact = (flags & KVB_SCHEMA_COMPACT) != 0;
    w->text = schema_json;
    w->len = schema_json ? len : 0;
    kvb_status st = run(w);
    if (st != KVB_OK) {
        st = kvb_fail(st, "%s", w->e.msg);
    } else {
        struct kvb_grammar *g = NULL;
        char root[64];
        snprintf(root, sizeof root, "%sroot", pre);
        st = kvb_grammar_parse(w->s.out.p, w->s.out.n, root, &g);
        if (st == KVB_ERR_INVALID) {
            /* the compiler's message is copied out first: formatting the last error into itself garbles it */
            char why[320];
            snprintf(why, sizeof why, "%s", kvb_last_error());
            const char *w0 = !strncmp(why, "grammar: ", 9) ? why + 9 : why;
            if (strstr(why, "left-recursive") || strstr(why, "left recursion"))
                st = kvb_fail(KVB_ERR_INVALID, "json schema: refers to itself without a value in between (%s)", w0);
            else st = kvb_fail(KVB_ERR_INVALID, "json schema: the grammar it makes is refused: %s", w0);
        }
        kvb_grammar_free(g);
        if (st == KVB_OK) {
            char *o = kvb_malloc(w->s.out.n + 1);
            if (!o) st = kvb_fail(KVB_ERR_NOMEM, "json schema: out of memory");
            else {
                memcpy(o, w->s.out.p, w->s.out.n + 1);
                *gbnf = o;
                *gbnf_len = w->s.out.n;
            }
        }
    }
    jarena_free(&w->a);
    kvb_free(w);
    return st;
}

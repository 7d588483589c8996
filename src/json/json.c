/*
 * json.c — the library's JSON values (json.h): the arena they live in,
 * lists and ordered dicts, the error channel and work budget, and JSON in
 * and out.
 *
 * JSON in: RFC 8259 text to values (objects keep their key order, as Python's
 * json.loads does; a repeated key keeps its first place and its last value),
 * bounded nesting, errors with line and column. JSON out: what Python's
 * json.dumps(x, ensure_ascii=False, indent=N) writes, which is the tojson
 * filter of transformers' chat templates: ", " and ": " separators without
 * indent, "," and ": " with it; non-ASCII characters as they are; control
 * characters as \uXXXX; floats as Python's repr.
 */
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <time.h>

struct jchunk {
    struct jchunk *next;
    size_t cap, used;
    max_align_t data[];
};

_Noreturn void jerr_throw(struct jerr *e, kvb_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->st = st;
    longjmp(e->jb, 1);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* "template line N: " while a template is evaluated, else "template render: " */
static void line_prefix(const struct jerr *e, char at[32]) {
    if (e->line > 0) snprintf(at, 32, "template line %d: ", e->line);
    else snprintf(at, 32, "template render: ");
}

_Noreturn static void too_deep(struct jerr *e, const char *what, int limit) {
    char at[32];
    line_prefix(e, at);
    jerr_throw(e, KVB_ERR_NOMEM, "%svalues nested too deeply %s (more than %d levels)", at, what, limit);
}

void jwork_check(struct jerr *e) {
    char at[32];
    line_prefix(e, at);
    if (e->max_work && e->work > e->max_work)
        jerr_throw(e, KVB_ERR_NOMEM,
                   "%sstep budget spent: more than %lld steps (loop iterations and calls; also 256 bytes scanned or values compared each)",
                   at, (long long)(e->max_work / JWORK_STEP));
    int64_t next = INT64_MAX;
    if (e->deadline_ns) {
        if (now_ns() > e->deadline_ns) jerr_throw(e, KVB_ERR_NOMEM, "%sdeadline of %d ms passed", at, (int)e->deadline_ms);
        next = e->work + JWORK_CLOCK;
    }
    if (e->max_work && e->max_work < next) next = e->max_work + 1;
    e->next_check = next;
}

/* n bytes of the arena, or NULL with *why 1 (its limit) or 2 (the allocator) */
static void *arena_take(struct jarena *a, size_t n, int *why) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (!n) n = sizeof(max_align_t);
    struct jchunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 60000 ? n : 60000;
        if (n > a->limit || a->total + cap + sizeof *c > a->limit)
            return *why = 1, NULL;
        c = kvb_malloc(sizeof *c + cap);
        if (!c) return *why = 2, NULL;
        c->cap = cap;
        c->used = 0;
        a->total += cap + sizeof *c;
        if (a->head && a->head->cap - a->head->used > cap - n) { /* keep the fuller chunk's room in front */
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

_Noreturn static void arena_refused(struct jarena *a, struct jerr *e, int why) {
    if (why == 1) jerr_throw(e, KVB_ERR_NOMEM, "template render: memory limit of %zu bytes reached", a->limit);
    jerr_throw(e, KVB_ERR_NOMEM, "template render: out of memory");
}

void *jarena_alloc(struct jarena *a, struct jerr *e, size_t n) {
    int why = 0;
    void *p = arena_take(a, n, &why);
    if (!p) arena_refused(a, e, why);
    return p;
}

void jarena_free(struct jarena *a) {
    for (struct jchunk *c = a->head, *n; c; c = n) {
        n = c->next;
        kvb_free(c);
    }
    a->head = NULL;
    a->total = 0;
}

jv jv_str(struct jarena *a, struct jerr *e, const char *s, size_t n) {
    char *p = jarena_alloc(a, e, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return (jv){.t = JV_STR, .n = n, .u.s = p};
}

jv jv_list_new(struct jarena *a, struct jerr *e, int32_t cap) {
    struct jlist *l = jarena_alloc(a, e, sizeof *l);
    l->n = 0;
    l->cap = cap > 0 ? cap : 0;
    l->v = l->cap ? jarena_alloc(a, e, sizeof(jv) * (size_t)l->cap) : NULL;
    return (jv){.t = JV_LIST, .u.l = l};
}

void jv_list_push(struct jarena *a, struct jerr *e, jv list, jv x) {
    struct jlist *l = list.u.l;
    if (l->n == l->cap) {
        if (l->cap > (1 << 28)) jerr_throw(e, KVB_ERR_NOMEM, "template render: list too long");
        int32_t cap = l->cap ? l->cap * 2 : 4;
        jv *v = jarena_alloc(a, e, sizeof(jv) * (size_t)cap);
        if (l->n) memcpy(v, l->v, sizeof(jv) * (size_t)l->n);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

jv jv_dict_new(struct jarena *a, struct jerr *e, int32_t cap) {
    struct jdict *d = jarena_alloc(a, e, sizeof *d);
    d->n = 0;
    d->cap = cap > 0 ? cap : 0;
    d->k = d->cap ? jarena_alloc(a, e, sizeof(jv) * (size_t)d->cap) : NULL;
    d->v = d->cap ? jarena_alloc(a, e, sizeof(jv) * (size_t)d->cap) : NULL;
    return (jv){.t = JV_DICT, .u.d = d};
}

void jv_dict_set(struct jarena *a, struct jerr *e, jv dict, jv key, jv val) {
    struct jdict *d = dict.u.d;
    for (int32_t i = 0; i < d->n; i++)
        if (jv_equal(e, d->k[i], key)) {
            d->v[i] = val;
            return;
        }
    if (d->n == d->cap) {
        if (d->cap > (1 << 26)) jerr_throw(e, KVB_ERR_NOMEM, "template render: dict too large");
        int32_t cap = d->cap ? d->cap * 2 : 4;
        jv *k = jarena_alloc(a, e, sizeof(jv) * (size_t)cap), *v = jarena_alloc(a, e, sizeof(jv) * (size_t)cap);
        if (d->n) {
            memcpy(k, d->k, sizeof(jv) * (size_t)d->n);
            memcpy(v, d->v, sizeof(jv) * (size_t)d->n);
        }
        d->k = k;
        d->v = v;
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n++] = val;
}

jv *jv_dict_get(const struct jdict *d, const char *key, size_t n) {
    for (int32_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].n == n && !memcmp(d->k[i].u.s, key, n)) return &d->v[i];
    return NULL;
}

static bool is_num(jv x) { return x.t == JV_INT || x.t == JV_FLOAT || x.t == JV_BOOL; }
static double num(jv x) { return x.t == JV_FLOAT ? x.u.f : x.t == JV_INT ? (double)x.u.i : (double)x.u.b; }

static int walk_depth(const struct jerr *e) { return e->max_depth > 0 ? e->max_depth : 512; }

static bool equal_at(struct jerr *e, jv a, jv b, int level) {
    jwork(e, 1);
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
        return num(a) == num(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR:
        if (a.n != b.n) return false;
        jwork(e, (int64_t)a.n);
        return !memcmp(a.u.s, b.u.s, a.n);
    case JV_LIST:
        if (a.u.l == b.u.l) return true; /* Python compares items by identity first */
        if (a.u.l->n != b.u.l->n) return false;
        if (level >= walk_depth(e)) too_deep(e, "to compare", walk_depth(e));
        for (int32_t i = 0; i < a.u.l->n; i++)
            if (!equal_at(e, a.u.l->v[i], b.u.l->v[i], level + 1)) return false;
        return true;
    case JV_DICT:
        if (a.u.d == b.u.d) return true;
        if (a.u.d->n != b.u.d->n) return false;
        if (level >= walk_depth(e)) too_deep(e, "to compare", walk_depth(e));
        for (int32_t i = 0; i < a.u.d->n; i++) {
            bool found = false;
            for (int32_t j = 0; j < b.u.d->n && !found; j++)
                if (equal_at(e, a.u.d->k[i], b.u.d->k[j], level + 1)) {
                    if (!equal_at(e, a.u.d->v[i], b.u.d->v[j], level + 1)) return false;
                    found = true;
                }
            if (!found) return false;
        }
        return true;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_BUILTIN: return a.u.fn == b.u.fn;
    default: return false;
    }
}

bool jv_equal(struct jerr *e, jv a, jv b) { return equal_at(e, a, b, 0); }

/* The builder's allocator: blocks of the arena (ctx), never freed one by one. */
static void *jbuf_grow(void *ctx, size_t n) {
    struct jarena *a = ctx;
    return arena_take(a, n, &a->refused);
}

/* b grows in a's arena from here on */
static void jbuf_bind(struct jarena *a, struct jbuf *b) {
    b->alloc = jbuf_grow;
    b->ctx = a;
}

_Noreturn static void output_limit(struct jerr *e, const struct jbuf *b) {
    jerr_throw(e, KVB_ERR_NOMEM, "template render: output limit of %zu bytes reached", b->limit);
}

/* After an append b refused: the arena's message, else the output limit's. */
_Noreturn static void jbuf_refused(struct jarena *a, struct jerr *e, struct jbuf *b) {
    const int why = a->refused;
    a->refused = 0;
    if (why) arena_refused(a, e, why);
    output_limit(e, b);
}

void jbuf_put(struct jarena *a, struct jerr *e, struct jbuf *b, const char *s, size_t n) {
    if (!n && b->p) return; /* an empty put still gives an empty string */
    if (b->n + n > b->limit) output_limit(e, b);
    jwork(e, (int64_t)n);
    jbuf_bind(a, b);
    kvb_str_put(b, s, n);
    if (kvb_str_error(b)) jbuf_refused(a, e, b);
}

bool jbuf_json(struct jarena *a, struct jerr *e, struct jbuf *b, const char *s, size_t n, unsigned flags) {
    const size_t before = b->n;
    jbuf_bind(a, b);
    kvb_str_json(b, s, n, flags);
    jwork(e, (int64_t)(b->n - before));
    if (kvb_str_error(b) == KVB_ERR_INVALID) return false; /* the limit */
    if (kvb_str_error(b)) jbuf_refused(a, e, b);
    return true;
}

void jfloat_repr(double f, char *buf) {
    if (isnan(f)) { strcpy(buf, "nan"); return; }
    if (isinf(f)) { strcpy(buf, f < 0 ? "-inf" : "inf"); return; }
    char e[40];
    int p = 1;
    for (; p <= 17; p++) { /* the shortest digits that read back as f */
        snprintf(e, sizeof e, "%.*e", p - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e: [-]D[.DDD]e[+-]XX */
    const char *q = e;
    char digits[24];
    int nd = 0;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char *o = buf;
    if (neg) *o++ = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            *o++ = '0';
            *o++ = '.';
            for (int i = -1; i > exp; i--) *o++ = '0';
            for (int i = 0; i < nd; i++) *o++ = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) *o++ = digits[i];
            else *o++ = '0';
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int i = 1; i < nd; i++) *o++ = digits[i];
        }
        sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

/* ---- JSON in ---- */

struct jp {
    struct jarena *a;
    struct jerr *e;
    const char *what, *s, *end, *p;
    int depth, max_depth;
};

_Noreturn static void jp_fail(struct jp *j, const char *why) {
    int line = 1, col = 1;
    for (const char *q = j->s; q < j->p; q++) {
        if (*q == '\n') { line++; col = 1; }
        else col++;
    }
    jerr_throw(j->e, KVB_ERR_INVALID, "%s: invalid JSON at line %d, column %d: %s", j->what, line, col, why);
}

static void jp_ws(struct jp *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static uint32_t jp_hex4(struct jp *j) {
    if (j->end - j->p < 4) jp_fail(j, "short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = kvb_jinja_hex_digit(j->p[i]);
        if (h < 0) jp_fail(j, "bad \\u escape");
        v = v * 16 + (uint32_t)h;
    }
    j->p += 4;
    return v;
}

static jv jp_string(struct jp *j) {
    j->p++; /* the quote */
    const char *b = j->p;
    size_t n = 0;
    bool esc = false;
    while (j->p < j->end && *j->p != '"') {
        if ((unsigned char)*j->p < 0x20) jp_fail(j, "control character in a string");
        if (*j->p == '\\') {
            esc = true;
            if (++j->p >= j->end) break; /* a backslash ending the text: unterminated, never past the end */
        }
        j->p++;
        n++;
    }
    if (j->p >= j->end) jp_fail(j, "unterminated string");
    if (!esc) {
        jv s = jv_str(j->a, j->e, b, (size_t)(j->p - b));
        j->p++;
        return s;
    }
    char *o = jarena_alloc(j->a, j->e, (size_t)(j->p - b) + 1), *w = o; /* escapes never grow */
    const char *stop = j->p;
    j->p = b;
    while (j->p < stop) {
        if (*j->p != '\\') { *w++ = *j->p++; continue; }
        j->p++;
        char c = *j->p++;
        switch (c) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            uint32_t cp = jp_hex4(j);
            if (cp >= 0xD800 && cp < 0xDC00 && stop - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
                const char *save = j->p;
                j->p += 2;
                uint32_t lo = jp_hex4(j);
                if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else j->p = save;
            }
            if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD; /* a lone surrogate has no UTF-8 */
            w += kvb_utf8_encode(cp, w);
            break;
        }
        default: j->p--; jp_fail(j, "bad escape");
        }
    }
    *w = 0;
    j->p = stop + 1;
    (void)n;
    return (jv){.t = JV_STR, .n = (size_t)(w - o), .u.s = o};
}

static jv jp_value(struct jp *j) {
    jp_ws(j);
    if (j->p >= j->end) jp_fail(j, "value expected");
    if (++j->depth > j->max_depth) jp_fail(j, "nested too deeply");
    jv r;
    char c = *j->p;
    if (c == '{') {
        j->p++;
        r = jv_dict_new(j->a, j->e, 0);
        jp_ws(j);
        if (j->p < j->end && *j->p == '}') j->p++;
        else
            for (;;) {
                jp_ws(j);
                if (j->p >= j->end || *j->p != '"') jp_fail(j, "object key expected");
                jv k = jp_string(j);
                jp_ws(j);
                if (j->p >= j->end || *j->p != ':') jp_fail(j, "':' expected");
                j->p++;
                jv v = jp_value(j);
                if (r.u.d->n >= 10000) jp_fail(j, "an object with more than 10000 members"); /* keys are compared one by one */
                jv_dict_set(j->a, j->e, r, k, v);
                jp_ws(j);
                if (j->p < j->end && *j->p == ',') { j->p++; continue; }
                if (j->p < j->end && *j->p == '}') { j->p++; break; }
                jp_fail(j, "',' or '}' expected");
            }
    } else if (c == '[') {
        j->p++;
        r = jv_list_new(j->a, j->e, 0);
        jp_ws(j);
        if (j->p < j->end && *j->p == ']') j->p++;
        else
            for (;;) {
                jv_list_push(j->a, j->e, r, jp_value(j));
                jp_ws(j);
                if (j->p < j->end && *j->p == ',') { j->p++; continue; }
                if (j->p < j->end && *j->p == ']') { j->p++; break; }
                jp_fail(j, "',' or ']' expected");
            }
    } else if (c == '"') {
        r = jp_string(j);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        const char *b = j->p;
        bool flt = false;
        if (*j->p == '-') j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') jp_fail(j, "digit expected");
        if (*j->p == '0') j->p++;
        else while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
        if (j->p < j->end && *j->p == '.') {
            flt = true;
            j->p++;
            if (j->p >= j->end || *j->p < '0' || *j->p > '9') jp_fail(j, "digit expected after '.'");
            while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
        }
        if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
            flt = true;
            j->p++;
            if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
            if (j->p >= j->end || *j->p < '0' || *j->p > '9') jp_fail(j, "digit expected in exponent");
            while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
        }
        char tmp[64];
        size_t n = (size_t)(j->p - b);
        if (n >= sizeof tmp) { flt = true; n = sizeof tmp - 1; }
        memcpy(tmp, b, n);
        tmp[n] = 0;
        if (!flt) {
            char *endp;
            long long v = strtoll(tmp, &endp, 10);
            if ((v == LLONG_MAX || v == LLONG_MIN)) r = (jv){.t = JV_FLOAT, .u.f = strtod(tmp, NULL)};
            else r = (jv){.t = JV_INT, .u.i = v};
        } else r = (jv){.t = JV_FLOAT, .u.f = strtod(tmp, NULL)};
    } else if (j->end - j->p >= 4 && !memcmp(j->p, "true", 4)) {
        j->p += 4;
        r = (jv){.t = JV_BOOL, .u.b = true};
    } else if (j->end - j->p >= 5 && !memcmp(j->p, "false", 5)) {
        j->p += 5;
        r = (jv){.t = JV_BOOL, .u.b = false};
    } else if (j->end - j->p >= 4 && !memcmp(j->p, "null", 4)) {
        j->p += 4;
        r = (jv){.t = JV_NONE};
    } else jp_fail(j, "unexpected character");
    j->depth--;
    return r;
}

jv jjson_parse(struct jarena *a, struct jerr *e, const char *what, const char *text, size_t len, int depth) {
    struct jp j = {a, e, what, text, text + len, text, 0, depth > 0 ? depth : 512};
    jv r = jp_value(&j);
    jp_ws(&j);
    if (j.p != j.end) jp_fail(&j, "text after the value");
    return r;
}

/* ---- JSON out ---- */

static void put_s(struct jarena *a, struct jerr *e, struct jbuf *b, const char *s) { jbuf_put(a, e, b, s, strlen(s)); }

static void dump_string(struct jarena *a, struct jerr *e, struct jbuf *b, const char *s, size_t n) {
    if (!jbuf_json(a, e, b, s, n, KVB_JSON_PYTHON)) output_limit(e, b);
}

static void newline_indent(struct jarena *a, struct jerr *e, struct jbuf *b, int indent, int level) {
    jbuf_put(a, e, b, "\n", 1);
    for (int i = 0; i < indent * level; i++) jbuf_put(a, e, b, " ", 1);
}

void jjson_dump(struct jarena *a, struct jerr *e, struct jbuf *b, jv x, int indent, int level) {
    char t[40];
    if (level > walk_depth(e)) too_deep(e, "for tojson", walk_depth(e));
    switch (x.t) {
    case JV_NONE: put_s(a, e, b, "null"); break;
    case JV_BOOL: put_s(a, e, b, x.u.b ? "true" : "false"); break;
    case JV_INT: snprintf(t, sizeof t, "%lld", (long long)x.u.i); put_s(a, e, b, t); break;
    case JV_FLOAT:
        if (isnan(x.u.f)) put_s(a, e, b, "NaN");
        else if (isinf(x.u.f)) put_s(a, e, b, x.u.f < 0 ? "-Infinity" : "Infinity");
        else { jfloat_repr(x.u.f, t); put_s(a, e, b, t); }
        break;
    case JV_STR: dump_string(a, e, b, x.u.s, x.n); break;
    case JV_LIST:
        if (!x.u.l->n) { put_s(a, e, b, "[]"); break; }
        jbuf_put(a, e, b, "[", 1);
        for (int32_t i = 0; i < x.u.l->n; i++) {
            if (i) put_s(a, e, b, indent >= 0 ? "," : ", ");
            if (indent >= 0) newline_indent(a, e, b, indent, level + 1);
            jjson_dump(a, e, b, x.u.l->v[i], indent, level + 1);
        }
        if (indent >= 0) newline_indent(a, e, b, indent, level);
        jbuf_put(a, e, b, "]", 1);
        break;
    case JV_DICT:
        if (!x.u.d->n) { put_s(a, e, b, "{}"); break; }
        jbuf_put(a, e, b, "{", 1);
        for (int32_t i = 0; i < x.u.d->n; i++) {
            if (i) put_s(a, e, b, indent >= 0 ? "," : ", ");
            if (indent >= 0) newline_indent(a, e, b, indent, level + 1);
            jv k = x.u.d->k[i];
            if (k.t == JV_STR) dump_string(a, e, b, k.u.s, k.n);
            else if (k.t == JV_INT) { snprintf(t, sizeof t, "\"%lld\"", (long long)k.u.i); put_s(a, e, b, t); }
            else if (k.t == JV_BOOL) put_s(a, e, b, k.u.b ? "\"true\"" : "\"false\"");
            else if (k.t == JV_NONE) put_s(a, e, b, "\"null\"");
            else jerr_throw(e, KVB_ERR_INVALID, "tojson: keys must be str, int, float, bool or None");
            put_s(a, e, b, ": ");
            jjson_dump(a, e, b, x.u.d->v[i], indent, level + 1);
        }
        if (indent >= 0) newline_indent(a, e, b, indent, level);
        jbuf_put(a, e, b, "}", 1);
        break;
    case JV_UNDEF: jerr_throw(e, KVB_ERR_INVALID, "tojson: Object of type Undefined is not JSON serializable");
    default: jerr_throw(e, KVB_ERR_INVALID, "tojson: a callable is not JSON serializable");
    }
}

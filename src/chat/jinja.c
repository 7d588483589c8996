/*
 * jinja.c — a Jinja2 interpreter for chat templates.
 *
 * Design. Three passes over one arena (jinja.h): the lexer turns the source
 * into TEXT runs and the tokens of each {{ }} / {% %} tag (comments vanish),
 * applying whitespace control there; the parser builds a tree of statement
 * and expression nodes (one struct node, fields by kind); the evaluator
 * walks it over values (jv) in scopes (a dict per scope, parent chain) and
 * appends to a bounded output buffer. Errors longjmp to jinja_render.
 *
 * Templates are untrusted: every recursion counts its depth against one
 * limit (the parser's pdepth; depth for eval, exec, macro calls and filters
 * in filters; a level argument for each walk over a value: jv_equal,
 * compare, put_str, jjson_dump), and all work is charged to the budget in
 * struct jerr (jwork: a node evaluated, a name looked up, a byte scanned or
 * written, a value compared is a unit, a loop iteration or call a step of
 * JWORK_STEP units), which also holds the render's wall-clock deadline.
 * Substring search (struct finder) is linear, so charging by bytes bounds it.
 *
 * Semantics are jinja2's as transformers' apply_chat_template configures it:
 * ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
 * the loopcontrols extension (break, continue), globals raise_exception and
 * strftime_now, and tojson = json.dumps(x, ensure_ascii=False, indent=...).
 * keep_trailing_newline is off: one final newline of the source is dropped.
 * Undefined is jinja2's default Undefined: renders as "", is falsy, iterates
 * as empty, has length 0, and fails on attribute access, arithmetic and
 * calls. A dict's `.name` is its method (items, keys, values, get) or else
 * its item; `[key]` the item. Strings are UTF-8 and index, slice and count
 * by code point; upper/lower/title act on ASCII letters only.
 *
 * The subset: {{ }}, {% %}, {# #} with '-' / '+' whitespace control;
 * statements if/elif/else, for (tuple targets, a loop filter, else, loop.*),
 * set (names, tuples, namespace attributes, blocks), macro (defaults,
 * keyword arguments), call (with caller arguments), break, continue,
 * transformers' generation block; expressions with Python's operators and
 * precedence, literals, attributes, subscripts, slices, calls; filters in
 * run_filter, tests in run_test, string and dict methods in k_str_methods /
 * k_dict_methods, globals range, namespace, dict, raise_exception,
 * strftime_now. Lists that jinja2 would yield lazily (map, select, items)
 * are built at once.
 *
 * Outside the subset (the error names the construct and its line, status
 * KVB_ERR_UNSUPPORTED): include/import/extends/block, raw, filter blocks,
 * recursive loops, varargs or kwargs in macros, '%' string formatting,
 * str.format, any other filter or test.
 */
#include "jinja.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ---------------------------------------------------------------- lexer */

enum tk { T_EOF, T_TEXT, T_VBEG, T_VEND, T_BBEG, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP };

struct tok {
    uint8_t k;
    int line;
    const char *s; /* TEXT, NAME, OP: into the source; STR: decoded */
    size_t n;
    int64_t i;
    double f;
};

struct ctx {
    struct jarena ar;
    struct jerr err;
    /* lexer / parser */
    struct tok *t;
    int nt, capt, ti;
    int pdepth;
    /* evaluator */
    struct jbuf *out;
    size_t max_out;
    int depth, max_depth;
    int brk; /* 1 break, 2 continue pending */
    size_t *scratch; /* the substring search's table (struct finder), reused */
    size_t scratch_cap;
};

#define A (&c->ar)
#define E (&c->err)

_Noreturn static void fail_at(struct ctx *c, kvb_status st, int line, const char *fmt, ...) KVB_PRINTF(4, 5);
_Noreturn static void fail_at(struct ctx *c, kvb_status st, int line, const char *fmt, ...) {
    char m[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    jerr_throw(E, st, "template line %d: %s", line, m);
}

static void push_tok(struct ctx *c, struct tok t) {
    if (c->nt == c->capt) {
        int cap = c->capt ? c->capt * 2 : 256;
        struct tok *n = jarena_alloc(A, E, sizeof *n * (size_t)cap);
        if (c->nt) memcpy(n, c->t, sizeof *n * (size_t)c->nt);
        c->t = n;
        c->capt = cap;
    }
    c->t[c->nt++] = t;
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f'; }
static bool is_alpha(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static int count_nl(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* A string literal at s[*p] (the quote): Python's escapes. */
static struct tok lex_string(struct ctx *c, const char *s, size_t len, size_t *p, int line) {
    char q = s[*p];
    size_t i = *p + 1, start = i;
    while (i < len && s[i] != q) i += s[i] == '\\' ? 2 : 1;
    if (i >= len) fail_at(c, KVB_ERR_INVALID, line, "unterminated string");
    char *o = jarena_alloc(A, E, i - start + 1), *w = o;
    for (size_t j = start; j < i; j++) {
        if (s[j] != '\\') { *w++ = s[j]; continue; }
        char e = s[++j];
        int nh = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nh) {
            uint32_t cp = 0;
            bool ok = j + (size_t)nh < i;
            for (int h = 1; ok && h <= nh; h++) {
                int v = kvb_jinja_hex_digit(s[j + (size_t)h]);
                if (v < 0) ok = false;
                else cp = cp * 16 + (uint32_t)v;
            }
            if (!ok || cp > 0x10FFFF) fail_at(c, KVB_ERR_INVALID, line, "bad \\%c escape in a string", e);
            w += kvb_utf8_encode(cp, w);
            j += (size_t)nh;
            continue;
        }
        switch (e) {
        case 'n': *w++ = '\n'; break;
        case 't': *w++ = '\t'; break;
        case 'r': *w++ = '\r'; break;
        case '0': *w++ = '\0'; break;
        case 'a': *w++ = '\a'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'v': *w++ = '\v'; break;
        case '\\': case '\'': case '"': *w++ = e; break;
        case '\n': break;
        default: *w++ = '\\'; *w++ = e; break; /* unknown escapes stay */
        }
    }
    *w = 0;
    *p = i + 1;
    return (struct tok){.k = T_STR, .line = line, .s = o, .n = (size_t)(w - o)};
}

static const char *const k_ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                    "=",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|"};

/* Tokens of one tag up to its end marker; returns the position after it. */
static size_t lex_tag(struct ctx *c, const char *s, size_t len, size_t p, int *line, bool var, bool *strip_after, bool *plus_after) {
    int open = 0; /* brackets: the end marker counts only outside them, as in jinja2 ("{'b': {}}}") */
    for (;;) {
        while (p < len && is_ws(s[p])) { *line += s[p] == '\n'; p++; }
        if (p >= len) fail_at(c, KVB_ERR_INVALID, *line, "unclosed '%s'", var ? "{{" : "{%");
        const char *endm = var ? "}}" : "%}";
        *strip_after = *plus_after = false;
        if (!open && (s[p] == '-' || s[p] == '+') && p + 3 <= len && !memcmp(s + p + 1, endm, 2)) {
            if (s[p] == '+' && var) fail_at(c, KVB_ERR_INVALID, *line, "unexpected '+'");
            *strip_after = s[p] == '-';
            *plus_after = s[p] == '+';
            push_tok(c, (struct tok){.k = var ? T_VEND : T_BEND, .line = *line});
            return p + 3;
        }
        if (!open && p + 2 <= len && !memcmp(s + p, endm, 2)) {
            push_tok(c, (struct tok){.k = var ? T_VEND : T_BEND, .line = *line});
            return p + 2;
        }
        char ch = s[p];
        if (ch == '\'' || ch == '"') {
            size_t b = p;
            struct tok t = lex_string(c, s, len, &p, *line);
            *line += count_nl(s + b, p - b);
            push_tok(c, t);
        } else if (is_alpha(ch)) {
            size_t b = p;
            while (p < len && (is_alpha(s[p]) || is_digit(s[p]))) p++;
            push_tok(c, (struct tok){.k = T_NAME, .line = *line, .s = s + b, .n = p - b});
        } else if (is_digit(ch)) {
            size_t b = p;
            bool flt = false;
            while (p < len && (is_digit(s[p]) || s[p] == '_')) p++;
            if (p + 1 < len && s[p] == '.' && is_digit(s[p + 1])) {
                flt = true;
                p++;
                while (p < len && (is_digit(s[p]) || s[p] == '_')) p++;
            }
            if (p < len && (s[p] == 'e' || s[p] == 'E')) {
                size_t q = p + 1;
                if (q < len && (s[q] == '+' || s[q] == '-')) q++;
                if (q < len && is_digit(s[q])) {
                    flt = true;
                    p = q;
                    while (p < len && is_digit(s[p])) p++;
                }
            }
            char tmp[64];
            size_t n = 0;
            for (size_t i = b; i < p && n + 1 < sizeof tmp; i++)
                if (s[i] != '_') tmp[n++] = s[i];
            tmp[n] = 0;
            struct tok t = {.k = flt ? T_FLOAT : T_INT, .line = *line};
            if (flt) t.f = strtod(tmp, NULL);
            else {
                errno = 0;
                long long v = strtoll(tmp, NULL, 10);
                if (errno || p - b > 19) fail_at(c, KVB_ERR_UNSUPPORTED, *line, "integer literal too large");
                t.i = v;
            }
            push_tok(c, t);
        } else {
            size_t k = 0, nops = sizeof k_ops / sizeof *k_ops;
            for (; k < nops; k++) {
                size_t ol = strlen(k_ops[k]);
                if (p + ol <= len && !memcmp(s + p, k_ops[k], ol)) break;
            }
            if (k == nops) fail_at(c, KVB_ERR_INVALID, *line, "unexpected character '%c'", ch);
            size_t ol = strlen(k_ops[k]);
            if (ol == 1 && strchr("([{", ch)) {
                if (++open > c->max_depth) fail_at(c, KVB_ERR_NOMEM, *line, "brackets nested too deeply");
            } else if (ol == 1 && strchr(")]}", ch) && open > 0) open--;
            push_tok(c, (struct tok){.k = T_OP, .line = *line, .s = k_ops[k], .n = ol});
            p += ol;
        }
    }
}

static void lex(struct ctx *c, const char *s, size_t len) {
    size_t p = 0;
    int line = 1;
    bool line_starting = true, strip_next = false;
    for (;;) {
        size_t b = p, q = p;
        while (q + 1 < len && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#'))) q++;
        if (q + 1 >= len) q = len;
        size_t tb = b, te = q; /* the text run */
        if (strip_next)
            while (tb < te && is_ws(s[tb])) tb++;
        int tline = line + count_nl(s + b, tb - b);
        line += count_nl(s + b, q - b);
        char kind = q < len ? s[q + 1] : 0, sign = q + 2 < len ? s[q + 2] : 0;
        if (kind && sign == '-') {
            while (te > tb && is_ws(s[te - 1])) te--;
        } else if (kind && kind != '{' && sign != '+') { /* lstrip_blocks */
            size_t l = te;
            while (l > tb && s[l - 1] != '\n') l--;
            bool has_nl = l > tb;
            size_t k = l;
            while (k < te && is_ws(s[k])) k++;
            if ((has_nl || line_starting) && k == te && l < te) te = l;
        }
        if (te > tb) push_tok(c, (struct tok){.k = T_TEXT, .line = tline, .s = s + tb, .n = te - tb});
        if (!kind) break;
        p = q + 2 + (sign == '-' || sign == '+');
        bool strip_after = false, plus_after = false;
        if (kind == '#') {
            size_t e = p;
            while (e + 1 < len && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= len) fail_at(c, KVB_ERR_INVALID, line, "unclosed comment");
            strip_after = e > p && s[e - 1] == '-';
            plus_after = e > p && s[e - 1] == '+';
            line += count_nl(s + p, e - p);
            p = e + 2;
        } else {
            push_tok(c, (struct tok){.k = kind == '{' ? T_VBEG : T_BBEG, .line = line});
            p = lex_tag(c, s, len, p, &line, kind == '{', &strip_after, &plus_after);
        }
        strip_next = strip_after;
        line_starting = false;
        if (strip_after) {
            size_t k = p;
            while (k < len && is_ws(s[k])) k++;
            line_starting = k > p && s[k - 1] == '\n';
        } else if (kind != '{' && !plus_after && p < len && s[p] == '\n') { /* trim_blocks */
            p++;
            line++;
            line_starting = true;
        }
    }
    push_tok(c, (struct tok){.k = T_EOF, .line = line});
}

/* --------------------------------------------------------------- parser */

enum nk {
    N_BODY, N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLK, N_MACRO, N_CALLBLK, N_BREAK, N_CONT,
    E_LIT, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NEG, E_POS, E_BIN,
    E_AND, E_OR, E_NOT, E_COND
};

struct node {
    uint8_t k;
    bool neg;   /* E_TEST: "is not"; E_BIN: "not in" */
    int line;
    struct node *a, *b, *c, *d, *e;
    struct node **v; /* children / positional args / macro parameter defaults */
    int n;
    const char **kn; /* keyword names (calls) or parameter names (macros) */
    struct node **kv;
    int nk;
    const char *name; /* identifier, operator, attribute, filter or test name */
    jv lit;
};

static struct node *mk(struct ctx *c, int k, int line) {
    struct node *n = jarena_alloc(A, E, sizeof *n);
    memset(n, 0, sizeof *n);
    n->k = (uint8_t)k;
    n->line = line;
    return n;
}

static void add_kid(struct ctx *c, struct node *p, struct node *kid, int *cap) {
    if (p->n == *cap) {
        int nc = *cap ? *cap * 2 : 4;
        struct node **v = jarena_alloc(A, E, sizeof *v * (size_t)nc);
        if (p->n) memcpy(v, p->v, sizeof *v * (size_t)p->n);
        p->v = v;
        *cap = nc;
    }
    p->v[p->n++] = kid;
}

static void add_kw(struct ctx *c, struct node *p, const char *name, struct node *val, int *cap) {
    if (p->nk == *cap) {
        int nc = *cap ? *cap * 2 : 4;
        const char **kn = jarena_alloc(A, E, sizeof *kn * (size_t)nc);
        struct node **kv = jarena_alloc(A, E, sizeof *kv * (size_t)nc);
        if (p->nk) {
            memcpy(kn, p->kn, sizeof *kn * (size_t)p->nk);
            memcpy(kv, p->kv, sizeof *kv * (size_t)p->nk);
        }
        p->kn = kn;
        p->kv = kv;
        *cap = nc;
    }
    p->kn[p->nk] = name;
    p->kv[p->nk++] = val;
}

static struct tok *cur(struct ctx *c) { return &c->t[c->ti]; }
static bool is_op(struct tok *t, const char *op) { return t->k == T_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n); }
static bool is_name(struct tok *t, const char *nm) { return t->k == T_NAME && t->n == strlen(nm) && !memcmp(t->s, nm, t->n); }
static bool accept_op(struct ctx *c, const char *op) {
    if (is_op(cur(c), op)) { c->ti++; return true; }
    return false;
}
static bool accept_name(struct ctx *c, const char *nm) {
    if (is_name(cur(c), nm)) { c->ti++; return true; }
    return false;
}
static const char *tok_desc(struct ctx *c, struct tok *t) {
    switch (t->k) {
    case T_EOF: return "end of template";
    case T_TEXT: return "text";
    case T_VBEG: return "'{{'";
    case T_VEND: return "'}}'";
    case T_BBEG: return "'{%'";
    case T_BEND: return "'%}'";
    case T_STR: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    default: {
        char *d = jarena_alloc(A, E, t->n + 3);
        snprintf(d, t->n + 3, "'%.*s'", (int)t->n, t->s);
        return d;
    }
    }
}
static void expect_op(struct ctx *c, const char *op) {
    if (!accept_op(c, op)) fail_at(c, KVB_ERR_INVALID, cur(c)->line, "expected '%s', got %s", op, tok_desc(c, cur(c)));
}
static const char *tok_str(struct ctx *c, struct tok *t) {
    char *s = jarena_alloc(A, E, t->n + 1);
    memcpy(s, t->s, t->n);
    s[t->n] = 0;
    return s;
}
static const char *expect_ident(struct ctx *c) {
    struct tok *t = cur(c);
    if (t->k != T_NAME) fail_at(c, KVB_ERR_INVALID, t->line, "expected a name, got %s", tok_desc(c, t));
    c->ti++;
    return tok_str(c, t);
}
static void expect_kind(struct ctx *c, int k, const char *what) {
    if (cur(c)->k != k) fail_at(c, KVB_ERR_INVALID, cur(c)->line, "expected %s, got %s", what, tok_desc(c, cur(c)));
    c->ti++;
}

static void enter(struct ctx *c, int line) {
    if (++c->pdepth > c->max_depth) fail_at(c, KVB_ERR_NOMEM, line, "template nested too deeply (more than %d levels)", c->max_depth);
}

static struct node *p_expr(struct ctx *c);
static struct node *p_or(struct ctx *c);
static struct node *p_unary(struct ctx *c, bool with_filter);

/* Call arguments after '(' up to ')'. */
static void p_args(struct ctx *c, struct node *call) {
    int cap = 0, kcap = 0;
    while (!accept_op(c, ")")) {
        if (call->n + call->nk) expect_op(c, ",");
        if (accept_op(c, ")")) break;
        if (is_op(cur(c), "*") || is_op(cur(c), "**"))
            fail_at(c, KVB_ERR_UNSUPPORTED, cur(c)->line, "unsupported: *args / **kwargs in a call");
        if (cur(c)->k == T_NAME && is_op(&c->t[c->ti + 1], "=")) {
            const char *nm = expect_ident(c);
            c->ti++;
            add_kw(c, call, nm, p_expr(c), &kcap);
        } else {
            if (call->nk) fail_at(c, KVB_ERR_INVALID, cur(c)->line, "positional argument after a keyword argument");
            add_kid(c, call, p_expr(c), &cap);
        }
    }
}

static struct node *p_primary(struct ctx *c) {
    struct tok *t = cur(c);
    struct node *n;
    enter(c, t->line);
    if (t->k == T_STR) {
        /* adjacent literals concatenate */
        size_t total = 0;
        int j = c->ti;
        while (c->t[j].k == T_STR) total += c->t[j++].n;
        char *s = jarena_alloc(A, E, total + 1);
        size_t o = 0;
        while (cur(c)->k == T_STR) {
            memcpy(s + o, cur(c)->s, cur(c)->n);
            o += cur(c)->n;
            c->ti++;
        }
        s[o] = 0;
        n = mk(c, E_LIT, t->line);
        n->lit = (jv){.t = JV_STR, .n = o, .u.s = s};
    } else if (t->k == T_INT || t->k == T_FLOAT) {
        c->ti++;
        n = mk(c, E_LIT, t->line);
        n->lit = t->k == T_INT ? (jv){.t = JV_INT, .u.i = t->i} : (jv){.t = JV_FLOAT, .u.f = t->f};
    } else if (t->k == T_NAME) {
        c->ti++;
        n = mk(c, E_LIT, t->line);
        if (is_name(t, "true") || is_name(t, "True")) n->lit = (jv){.t = JV_BOOL, .u.b = true};
        else if (is_name(t, "false") || is_name(t, "False")) n->lit = (jv){.t = JV_BOOL, .u.b = false};
        else if (is_name(t, "none") || is_name(t, "None")) n->lit = (jv){.t = JV_NONE};
        else {
            n->k = E_NAME;
            n->name = tok_str(c, t);
        }
    } else if (accept_op(c, "(")) {
        if (accept_op(c, ")")) {
            n = mk(c, E_TUPLE, t->line);
        } else {
            struct node *first = p_expr(c);
            if (accept_op(c, ",")) {
                n = mk(c, E_TUPLE, t->line);
                int cap = 0;
                add_kid(c, n, first, &cap);
                while (!is_op(cur(c), ")")) {
                    add_kid(c, n, p_expr(c), &cap);
                    if (!accept_op(c, ",")) break;
                }
            } else n = first;
            expect_op(c, ")");
        }
    } else if (accept_op(c, "[")) {
        n = mk(c, E_LIST, t->line);
        int cap = 0;
        while (!accept_op(c, "]")) {
            if (n->n) expect_op(c, ",");
            if (accept_op(c, "]")) break;
            add_kid(c, n, p_expr(c), &cap);
        }
    } else if (accept_op(c, "{")) {
        n = mk(c, E_DICT, t->line);
        int cap = 0;
        while (!accept_op(c, "}")) {
            if (n->n) expect_op(c, ",");
            if (accept_op(c, "}")) break;
            add_kid(c, n, p_expr(c), &cap);
            expect_op(c, ":");
            add_kid(c, n, p_expr(c), &cap);
        }
    } else {
        fail_at(c, KVB_ERR_INVALID, t->line, "unexpected %s in an expression", tok_desc(c, t));
    }
    /* postfix: .name, [index], [slice], (args) */
    for (;;) {
        struct tok *u = cur(c);
        if (accept_op(c, ".")) {
            struct node *m = mk(c, E_ATTR, u->line);
            m->a = n;
            if (cur(c)->k == T_INT) {
                m->k = E_ITEM;
                m->b = mk(c, E_LIT, u->line);
                m->b->lit = (jv){.t = JV_INT, .u.i = cur(c)->i};
                c->ti++;
            } else m->name = expect_ident(c);
            n = m;
        } else if (accept_op(c, "[")) {
            struct node *parts[3] = {NULL, NULL, NULL};
            int np = 0;
            bool slice = false;
            for (;;) {
                if (!is_op(cur(c), ":") && !is_op(cur(c), "]")) parts[np] = p_expr(c);
                if (accept_op(c, ":")) {
                    slice = true;
                    if (++np > 2) fail_at(c, KVB_ERR_INVALID, u->line, "too many ':' in a slice");
                    continue;
                }
                break;
            }
            expect_op(c, "]");
            struct node *m = mk(c, slice ? E_SLICE : E_ITEM, u->line);
            m->a = n;
            m->b = parts[0];
            m->c = parts[1];
            m->d = parts[2];
            if (!slice && !m->b) fail_at(c, KVB_ERR_INVALID, u->line, "empty subscript");
            n = m;
        } else if (accept_op(c, "(")) {
            struct node *m = mk(c, E_CALL, u->line);
            m->a = n;
            p_args(c, m);
            n = m;
        } else break;
    }
    c->pdepth--;
    return n;
}

/* filters (|name, |name(args)) and tests (is [not] name [arg]) after a unary */
static struct node *p_filters(struct ctx *c, struct node *n) {
    for (;;) {
        struct tok *t = cur(c);
        if (accept_op(c, "|")) {
            struct node *f = mk(c, E_FILTER, t->line);
            f->a = n;
            f->name = expect_ident(c);
            while (accept_op(c, ".")) { /* dotted filter names are not jinja2's builtins */
                fail_at(c, KVB_ERR_UNSUPPORTED, t->line, "unsupported: dotted filter name");
            }
            if (accept_op(c, "(")) p_args(c, f);
            n = f;
        } else if (accept_name(c, "is")) {
            struct node *f = mk(c, E_TEST, t->line);
            f->a = n;
            f->neg = accept_name(c, "not");
            struct tok *nt = cur(c);
            if (nt->k == T_NAME) f->name = expect_ident(c);
            else fail_at(c, KVB_ERR_INVALID, nt->line, "expected a test name after 'is', got %s", tok_desc(c, nt));
            if (accept_op(c, "(")) p_args(c, f);
            else {
                struct tok *x = cur(c);
                bool arg = x->k == T_STR || x->k == T_INT || x->k == T_FLOAT || is_op(x, "[") || is_op(x, "{") || is_op(x, "(") ||
                           (x->k == T_NAME && !is_name(x, "else") && !is_name(x, "or") && !is_name(x, "and") && !is_name(x, "if") &&
                            !is_name(x, "in") && !is_name(x, "is") && !is_name(x, "not"));
                if (arg) {
                    int cap = 0;
                    add_kid(c, f, p_unary(c, false), &cap);
                }
            }
            n = f;
        } else return n;
    }
}

static struct node *p_unary(struct ctx *c, bool with_filter) {
    struct tok *t = cur(c);
    struct node *n;
    enter(c, t->line);
    if (accept_op(c, "-")) {
        n = mk(c, E_NEG, t->line);
        n->a = p_unary(c, false);
    } else if (accept_op(c, "+")) {
        n = mk(c, E_POS, t->line);
        n->a = p_unary(c, false);
    } else n = p_primary(c);
    if (with_filter) n = p_filters(c, n);
    c->pdepth--;
    return n;
}

static struct node *bin(struct ctx *c, const char *op, struct node *l, struct node *r, int line) {
    struct node *n = mk(c, E_BIN, line);
    n->name = op;
    n->a = l;
    n->b = r;
    return n;
}

static struct node *p_pow(struct ctx *c) {
    struct node *l = p_unary(c, true);
    while (is_op(cur(c), "**")) {
        int line = cur(c)->line;
        c->ti++;
        l = bin(c, "**", l, p_unary(c, true), line);
    }
    return l;
}
static struct node *p_mul(struct ctx *c) {
    struct node *l = p_pow(c);
    for (;;) {
        struct tok *t = cur(c);
        const char *op = is_op(t, "*") ? "*" : is_op(t, "/") ? "/" : is_op(t, "//") ? "//" : is_op(t, "%") ? "%" : NULL;
        if (!op) return l;
        c->ti++;
        l = bin(c, op, l, p_pow(c), t->line);
    }
}
static struct node *p_concat(struct ctx *c) {
    struct node *l = p_mul(c);
    while (is_op(cur(c), "~")) {
        int line = cur(c)->line;
        c->ti++;
        l = bin(c, "~", l, p_mul(c), line);
    }
    return l;
}
static struct node *p_add(struct ctx *c) {
    struct node *l = p_concat(c);
    for (;;) {
        struct tok *t = cur(c);
        const char *op = is_op(t, "+") ? "+" : is_op(t, "-") ? "-" : NULL;
        if (!op) return l;
        c->ti++;
        l = bin(c, op, l, p_concat(c), t->line);
    }
}
static struct node *p_cmp(struct ctx *c) {
    struct node *l = p_add(c);
    for (;;) {
        struct tok *t = cur(c);
        static const char *const ops[] = {"==", "!=", "<=", ">=", "<", ">"};
        const char *op = NULL;
        for (int i = 0; i < 6 && !op; i++)
            if (is_op(t, ops[i])) op = ops[i];
        if (op) {
            c->ti++;
            l = bin(c, op, l, p_add(c), t->line);
        } else if (is_name(t, "in")) {
            c->ti++;
            l = bin(c, "in", l, p_add(c), t->line);
        } else if (is_name(t, "not") && is_name(&c->t[c->ti + 1], "in")) {
            c->ti += 2;
            l = bin(c, "in", l, p_add(c), t->line);
            l->neg = true;
        } else return l;
    }
}
static struct node *p_not(struct ctx *c) {
    struct tok *t = cur(c);
    if (accept_name(c, "not")) {
        enter(c, t->line);
        struct node *n = mk(c, E_NOT, t->line);
        n->a = p_not(c);
        c->pdepth--;
        return n;
    }
    return p_cmp(c);
}
static struct node *p_and(struct ctx *c) {
    struct node *l = p_not(c);
    while (is_name(cur(c), "and")) {
        struct node *n = mk(c, E_AND, cur(c)->line);
        c->ti++;
        n->a = l;
        n->b = p_not(c);
        l = n;
    }
    return l;
}
static struct node *p_or(struct ctx *c) {
    struct node *l = p_and(c);
    while (is_name(cur(c), "or")) {
        struct node *n = mk(c, E_OR, cur(c)->line);
        c->ti++;
        n->a = l;
        n->b = p_and(c);
        l = n;
    }
    return l;
}
static struct node *p_expr(struct ctx *c) {
    enter(c, cur(c)->line);
    struct node *l = p_or(c);
    while (is_name(cur(c), "if")) {
        struct node *n = mk(c, E_COND, cur(c)->line);
        c->ti++;
        n->a = l;       /* value when true */
        n->b = p_or(c); /* condition */
        if (accept_name(c, "else")) n->c = p_expr(c);
        l = n;
    }
    c->pdepth--;
    return l;
}
/* an expression, or a bare tuple "a, b" */
static struct node *p_tuple(struct ctx *c) {
    struct node *first = p_expr(c);
    if (!is_op(cur(c), ",")) return first;
    struct node *n = mk(c, E_TUPLE, first->line);
    int cap = 0;
    add_kid(c, n, first, &cap);
    while (accept_op(c, ",")) {
        if (cur(c)->k == T_BEND || cur(c)->k == T_VEND) break;
        add_kid(c, n, p_expr(c), &cap);
    }
    return n;
}

/* an assignment target: name, name.attr, or names separated by commas */
static struct node *p_target(struct ctx *c, bool allow_attr) {
    struct tok *t = cur(c);
    struct node *n = mk(c, E_NAME, t->line);
    n->name = expect_ident(c);
    if (allow_attr && accept_op(c, ".")) {
        struct node *m = mk(c, E_ATTR, t->line);
        m->a = n;
        m->name = expect_ident(c);
        return m;
    }
    if (is_op(cur(c), ",")) {
        struct node *tu = mk(c, E_TUPLE, t->line);
        int cap = 0;
        add_kid(c, tu, n, &cap);
        while (accept_op(c, ",")) {
            struct node *x = mk(c, E_NAME, cur(c)->line);
            x->name = expect_ident(c);
            add_kid(c, tu, x, &cap);
        }
        return tu;
    }
    return n;
}

static struct node *p_body(struct ctx *c, const char *const *ends, const char **which);

static bool tag_is(struct ctx *c, const char *nm) { return cur(c)->k == T_BBEG && is_name(&c->t[c->ti + 1], nm); }

/* after the keyword: the rest of the tag must be '%}' */
static void end_tag(struct ctx *c) { expect_kind(c, T_BEND, "'%}'"); }

static struct node *p_stmt(struct ctx *c) {
    struct tok *kw = cur(c);
    int line = kw->line;
    if (kw->k != T_NAME) fail_at(c, KVB_ERR_INVALID, line, "expected a statement name after '{%%'");
    enter(c, line);
    struct node *n;
    if (accept_name(c, "if")) {
        n = mk(c, N_IF, line);
        n->a = p_tuple(c);
        end_tag(c);
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        const char *w;
        n->b = p_body(c, ends, &w);
        struct node *tail = n;
        while (!strcmp(w, "elif")) {
            struct node *e = mk(c, N_IF, cur(c)->line);
            e->a = p_tuple(c);
            end_tag(c);
            e->b = p_body(c, ends, &w);
            tail->c = e;
            tail = e;
        }
        if (!strcmp(w, "else")) {
            end_tag(c);
            static const char *const ends2[] = {"endif", NULL};
            tail->c = p_body(c, ends2, &w);
        }
        end_tag(c);
    } else if (accept_name(c, "for")) {
        n = mk(c, N_FOR, line);
        n->a = p_target(c, false);
        if (!accept_name(c, "in")) fail_at(c, KVB_ERR_INVALID, line, "expected 'in' in a for loop");
        n->b = p_or(c);
        if (is_op(cur(c), ",")) fail_at(c, KVB_ERR_UNSUPPORTED, line, "unsupported: iterating a bare tuple");
        if (accept_name(c, "if")) n->c = p_or(c);
        if (is_name(cur(c), "recursive")) fail_at(c, KVB_ERR_UNSUPPORTED, line, "unsupported statement 'for ... recursive'");
        end_tag(c);
        static const char *const ends[] = {"else", "endfor", NULL};
        const char *w;
        n->d = p_body(c, ends, &w);
        if (!strcmp(w, "else")) {
            end_tag(c);
            static const char *const ends2[] = {"endfor", NULL};
            n->e = p_body(c, ends2, &w);
        }
        end_tag(c);
    } else if (accept_name(c, "set")) {
        struct node *tg = p_target(c, true);
        if (accept_op(c, "=")) {
            n = mk(c, N_SET, line);
            n->a = tg;
            n->b = p_tuple(c);
            end_tag(c);
        } else {
            if (tg->k != E_NAME) fail_at(c, KVB_ERR_INVALID, line, "a block set takes one name");
            if (is_op(cur(c), "|")) fail_at(c, KVB_ERR_UNSUPPORTED, line, "unsupported: filter on a block set");
            end_tag(c);
            n = mk(c, N_SETBLK, line);
            n->a = tg;
            static const char *const ends[] = {"endset", NULL};
            const char *w;
            n->d = p_body(c, ends, &w);
            end_tag(c);
        }
    } else if (accept_name(c, "macro") || (is_name(cur(c), "call") && (c->ti++, true))) {
        bool call = is_name(kw, "call");
        n = mk(c, call ? N_CALLBLK : N_MACRO, line);
        int kcap = 0;
        if (call) {
            if (accept_op(c, "(")) goto params;
            goto callee;
        }
        n->name = expect_ident(c);
        expect_op(c, "(");
    params:
        while (!accept_op(c, ")")) {
            if (n->nk) expect_op(c, ",");
            if (accept_op(c, ")")) break;
            if (is_op(cur(c), "*") || is_op(cur(c), "**")) fail_at(c, KVB_ERR_UNSUPPORTED, line, "unsupported: *args / **kwargs in a macro");
            const char *pn = expect_ident(c);
            struct node *def = NULL;
            if (accept_op(c, "=")) def = p_expr(c);
            add_kw(c, n, pn, def, &kcap);
        }
        if (call) {
        callee:
            n->a = p_expr(c);
            if (n->a->k != E_CALL) fail_at(c, KVB_ERR_INVALID, line, "'call' needs a macro call");
        }
        end_tag(c);
        static const char *const mends[] = {"endmacro", NULL}, *const cends[] = {"endcall", NULL};
        const char *w;
        n->d = p_body(c, call ? cends : mends, &w);
        if (!call && cur(c)->k == T_NAME) c->ti++; /* {% endmacro name %} */
        end_tag(c);
    } else if (accept_name(c, "break") || accept_name(c, "continue")) {
        n = mk(c, is_name(kw, "break") ? N_BREAK : N_CONT, line);
        end_tag(c);
    } else if (accept_name(c, "generation")) { /* transformers' AssistantTracker: renders its body */
        end_tag(c);
        static const char *const ends[] = {"endgeneration", NULL};
        const char *w;
        n = p_body(c, ends, &w);
        end_tag(c);
    } else if (is_name(kw, "do")) {
        fail_at(c, KVB_ERR_UNSUPPORTED, line, "unsupported statement 'do'");
    } else {
        fail_at(c, is_name(kw, "endif") || is_name(kw, "endfor") || is_name(kw, "else") || is_name(kw, "elif") ||
                        is_name(kw, "endset") || is_name(kw, "endmacro") || is_name(kw, "endcall")
                    ? KVB_ERR_INVALID
                    : KVB_ERR_UNSUPPORTED,
                line, "%s statement '%.*s'",
                is_name(kw, "endif") || is_name(kw, "endfor") || is_name(kw, "else") || is_name(kw, "elif") || is_name(kw, "endset") ||
                        is_name(kw, "endmacro") || is_name(kw, "endcall")
                    ? "unexpected"
                    : "unsupported",
                (int)kw->n, kw->s);
    }
    c->pdepth--;
    return n;
}

/* Statements until one of ends (NULL-terminated; NULL: to the end of the
 * template). *which: the end keyword found (consumed, the tag still open). */
static struct node *p_body(struct ctx *c, const char *const *ends, const char **which) {
    struct node *body = mk(c, N_BODY, cur(c)->line);
    int cap = 0, line = cur(c)->line;
    for (;;) {
        struct tok *t = cur(c);
        if (t->k == T_EOF) {
            if (ends) {
                const char *want = ends[0];
                for (int i = 0; ends[i]; i++)
                    if (!strncmp(ends[i], "end", 3)) want = ends[i];
                fail_at(c, KVB_ERR_INVALID, line, "missing '%s' for the block opened here", want);
            }
            return body;
        }
        if (t->k == T_TEXT) {
            struct node *n = mk(c, N_TEXT, t->line);
            n->lit = (jv){.t = JV_STR, .n = t->n, .u.s = t->s};
            add_kid(c, body, n, &cap);
            c->ti++;
        } else if (t->k == T_VBEG) {
            c->ti++;
            struct node *n = mk(c, N_OUT, t->line);
            n->a = p_tuple(c);
            expect_kind(c, T_VEND, "'}}'");
            add_kid(c, body, n, &cap);
        } else if (t->k == T_BBEG) {
            for (int i = 0; ends && ends[i]; i++)
                if (tag_is(c, ends[i])) {
                    c->ti += 2;
                    *which = ends[i];
                    return body;
                }
            c->ti++;
            add_kid(c, body, p_stmt(c), &cap);
        } else fail_at(c, KVB_ERR_INVALID, t->line, "unexpected %s", tok_desc(c, t));
    }
}

/* ------------------------------------------------------------ evaluator */

struct scope {
    struct scope *parent;
    jv vars; /* dict */
};

struct jmacro {
    struct node *def;       /* N_MACRO or N_CALLBLK (the caller) */
    struct scope *closure;
};

struct jmethod {
    jv obj;
    const char *name;
};

enum builtin { B_RANGE, B_NAMESPACE, B_RAISE, B_STRFTIME, B_DICT };

static jv undef(const char *name) { return (jv){.t = JV_UNDEF, .u.s = name}; }
static jv mkbool(bool b) { return (jv){.t = JV_BOOL, .u.b = b}; }
static jv mkint(int64_t i) { return (jv){.t = JV_INT, .u.i = i}; }
static jv mkstr(struct ctx *c, const char *s) { return jv_str(A, E, s, strlen(s)); }
static jv lit(const char *s) { return (jv){.t = JV_STR, .n = strlen(s), .u.s = s}; }


static const char *type_name(jv x) {
    switch (x.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return "list";
    case JV_DICT: return x.ns ? "Namespace" : "dict";
    default: return "function";
    }
}

static bool truthy(jv x) {
    switch (x.t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return x.u.b;
    case JV_INT: return x.u.i != 0;
    case JV_FLOAT: return x.u.f != 0;
    case JV_STR: return x.n > 0;
    case JV_LIST: return x.u.l->n > 0;
    case JV_DICT: return x.u.d->n > 0;
    default: return true;
    }
}

static void scope_set(struct ctx *c, struct scope *s, const char *name, jv v) { jv_dict_set(A, E, s->vars, lit(name), v); }
static jv lookup(struct ctx *c, struct scope *s, const char *name) {
    size_t n = strlen(name);
    for (; s; s = s->parent) {
        jwork(E, s->vars.u.d->n);
        jv *v = jv_dict_get(s->vars.u.d, name, n);
        if (v) return *v;
    }
    return undef(name);
}
static struct scope *new_scope(struct ctx *c, struct scope *parent) {
    struct scope *s = jarena_alloc(A, E, sizeof *s);
    s->parent = parent;
    s->vars = jv_dict_new(A, E, 0);
    return s;
}

/* --- strings --- */

static size_t utf8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}
/* byte offsets of each code point, plus n at the end: [cps + 1] */
static size_t *cp_offsets(struct ctx *c, const char *s, size_t n, size_t *ncp) {
    jwork(E, (int64_t)n);
    size_t k = utf8_len(s, n), j = 0;
    size_t *off = jarena_alloc(A, E, sizeof *off * (k + 1));
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) off[j++] = i;
    off[k] = n;
    *ncp = k;
    return off;
}

static void put_repr_str(struct ctx *c, struct jbuf *b, const char *s, size_t n) {
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    jbuf_put(A, E, b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char t[8];
        if (ch == '\\') jbuf_put(A, E, b, "\\\\", 2);
        else if (ch == (unsigned char)q) { t[0] = '\\'; t[1] = q; jbuf_put(A, E, b, t, 2); }
        else if (ch == '\n') jbuf_put(A, E, b, "\\n", 2);
        else if (ch == '\r') jbuf_put(A, E, b, "\\r", 2);
        else if (ch == '\t') jbuf_put(A, E, b, "\\t", 2);
        else if (ch < 0x20 || ch == 0x7f) { snprintf(t, sizeof t, "\\x%02x", ch); jbuf_put(A, E, b, t, 4); }
        else jbuf_put(A, E, b, s + i, 1);
    }
    jbuf_put(A, E, b, &q, 1);
}

static void put_str(struct ctx *c, struct jbuf *b, jv x, bool repr, int level);

static void put_str(struct ctx *c, struct jbuf *b, jv x, bool repr, int level) {
    char t[40];
    if (level > c->max_depth) jerr_throw(E, KVB_ERR_NOMEM, "value nested too deeply to print");
    switch (x.t) {
    case JV_UNDEF: break;
    case JV_NONE: jbuf_put(A, E, b, "None", 4); break;
    case JV_BOOL: jbuf_put(A, E, b, x.u.b ? "True" : "False", x.u.b ? 4 : 5); break;
    case JV_INT: snprintf(t, sizeof t, "%lld", (long long)x.u.i); jbuf_put(A, E, b, t, strlen(t)); break;
    case JV_FLOAT: jfloat_repr(x.u.f, t); jbuf_put(A, E, b, t, strlen(t)); break;
    case JV_STR:
        if (repr) put_repr_str(c, b, x.u.s, x.n);
        else jbuf_put(A, E, b, x.u.s, x.n);
        break;
    case JV_LIST:
        jbuf_put(A, E, b, x.ns ? "(" : "[", 1);
        for (int32_t i = 0; i < x.u.l->n; i++) {
            if (i) jbuf_put(A, E, b, ", ", 2);
            put_str(c, b, x.u.l->v[i], true, level + 1);
        }
        if (x.ns && x.u.l->n == 1) jbuf_put(A, E, b, ",", 1);
        jbuf_put(A, E, b, x.ns ? ")" : "]", 1);
        break;
    case JV_DICT:
        if (x.ns) { jbuf_put(A, E, b, "<Namespace>", 11); break; }
        jbuf_put(A, E, b, "{", 1);
        for (int32_t i = 0; i < x.u.d->n; i++) {
            if (i) jbuf_put(A, E, b, ", ", 2);
            put_str(c, b, x.u.d->k[i], true, level + 1);
            jbuf_put(A, E, b, ": ", 2);
            put_str(c, b, x.u.d->v[i], true, level + 1);
        }
        jbuf_put(A, E, b, "}", 1);
        break;
    default: jbuf_put(A, E, b, "<function>", 10); break;
    }
}

/* The length of the line break at p[i] as Python's str.splitlines sees one (\n, \r, \r\n, \v, \f, \x1c-\x1e,
 * U+0085, U+2028, U+2029 in UTF-8), 0 where none starts */
static size_t line_break(const char *p, size_t n, size_t i) {
    const unsigned char *u = (const unsigned char *)p;
    if (u[i] == '\r') return i + 1 < n && u[i + 1] == '\n' ? 2 : 1;
    if (u[i] == '\n' || u[i] == 0x0b || u[i] == 0x0c || (u[i] >= 0x1c && u[i] <= 0x1e)) return 1;
    if (u[i] == 0xc2 && i + 1 < n && u[i + 1] == 0x85) return 2;
    if (u[i] == 0xe2 && i + 2 < n && u[i + 1] == 0x80 && (u[i + 2] == 0xa8 || u[i + 2] == 0xa9)) return 3;
    return 0;
}

static jv to_str(struct ctx *c, jv x) {
    if (x.t == JV_STR) return x;
    struct jbuf b = {.limit = c->max_out};
    put_str(c, &b, x, false, 0);
    return (jv){.t = JV_STR, .n = b.n, .u.s = b.p ? b.p : ""};
}

static bool py_space(unsigned char ch) { return ch == ' ' || (ch >= 9 && ch <= 13) || (ch >= 0x1c && ch <= 0x1f); }

/* s.strip(chars) / lstrip / rstrip: which 1 left, 2 right, 3 both */
static jv strip(struct ctx *c, jv s, jv chars, int which) {
    size_t b = 0, e = s.n;
    bool has = chars.t == JV_STR;
    if (chars.t != JV_STR && chars.t != JV_NONE && chars.t != JV_UNDEF) jerr_throw(E, KVB_ERR_INVALID, "strip arg must be None or str");
    /* chars are matched as code points; ASCII-only sets are the common case */
    size_t ncp = 0, *off = has ? cp_offsets(c, chars.u.s, chars.n, &ncp) : NULL;
    if (which & 1)
        while (b < e) {
            size_t l = 1;
            while (b + l < e && ((unsigned char)s.u.s[b + l] & 0xC0) == 0x80) l++;
            bool in = false;
            jwork(E, (int64_t)ncp + 1);
            if (has) {
                for (size_t k = 0; k < ncp && !in; k++) in = off[k + 1] - off[k] == l && !memcmp(chars.u.s + off[k], s.u.s + b, l);
            } else in = l == 1 && py_space((unsigned char)s.u.s[b]);
            if (!in) break;
            b += l;
        }
    if (which & 2)
        while (e > b) {
            size_t l = 1;
            while (e - l > b && ((unsigned char)s.u.s[e - l] & 0xC0) == 0x80) l++;
            bool in = false;
            jwork(E, (int64_t)ncp + 1);
            if (has) {
                for (size_t k = 0; k < ncp && !in; k++) in = off[k + 1] - off[k] == l && !memcmp(chars.u.s + off[k], s.u.s + e - l, l);
            } else in = l == 1 && py_space((unsigned char)s.u.s[e - 1]);
            if (!in) break;
            e -= l;
        }
    return (jv){.t = JV_STR, .n = e - b, .u.s = s.u.s + b};
}

static jv str_case(struct ctx *c, jv s, int mode) { /* 0 lower, 1 upper, 2 capitalize, 3 title */
    jwork(E, (int64_t)s.n);
    char *o = jarena_alloc(A, E, s.n + 1);
    bool prev_letter = false;
    for (size_t i = 0; i < s.n; i++) {
        char ch = s.u.s[i];
        bool up = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && !prev_letter);
        bool letter = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        if (up && ch >= 'a' && ch <= 'z') ch = (char)(ch - 32);
        else if (!up && ch >= 'A' && ch <= 'Z') ch = (char)(ch + 32);
        o[i] = ch;
        prev_letter = letter || ((unsigned char)ch >= 0x80);
    }
    o[s.n] = 0;
    return (jv){.t = JV_STR, .n = s.n, .u.s = o};
}

/* Substring search in time linear in the text and the needle
 * (Knuth-Morris-Pratt, with memchr to the needle's first byte), each byte
 * passed charged as a unit of work. One finder is in use at a time: its
 * table is the context's scratch. */
struct finder {
    const char *p;
    size_t m;
    const size_t *fail; /* fail[i]: the longest proper border of p[0..i] */
};

static struct finder finder_new(struct ctx *c, jv needle) {
    struct finder f = {needle.u.s, needle.n, NULL};
    jwork(E, (int64_t)needle.n);
    if (needle.n > c->scratch_cap) {
        size_t cap = KVB_MAX(needle.n, 2 * c->scratch_cap);
        c->scratch = jarena_alloc(A, E, sizeof *c->scratch * cap);
        c->scratch_cap = cap;
    }
    size_t *fail = c->scratch;
    if (needle.n) fail[0] = 0;
    for (size_t i = 1, k = 0; i < needle.n; i++) {
        while (k && needle.u.s[i] != needle.u.s[k]) k = fail[k - 1];
        if (needle.u.s[i] == needle.u.s[k]) k++;
        fail[i] = k;
    }
    f.fail = fail;
    return f;
}

/* The first occurrence of the needle in s[from, n), or SIZE_MAX. */
static size_t finder_next(struct ctx *c, const struct finder *f, const char *s, size_t n, size_t from) {
    if (!f->m) return from <= n ? from : SIZE_MAX;
    size_t i = from, k = 0, at = SIZE_MAX;
    while (i < n) {
        if (!k) {
            const char *q = memchr(s + i, f->p[0], n - i);
            if (!q) { i = n; break; }
            i = (size_t)(q - s);
        }
        if (s[i] == f->p[k]) {
            i++;
            if (++k == f->m) { at = i - f->m; break; }
        } else if (k) k = f->fail[k - 1];
        else i++;
    }
    jwork(E, (int64_t)(i - from));
    return at;
}

static jv str_replace(struct ctx *c, jv s, jv old, jv new_, int64_t count) {
    struct jbuf b = {.limit = c->max_out};
    jbuf_put(A, E, &b, "", 0);
    if (old.n == 0) { /* Python inserts new_ between every code point */
        size_t ncp, *off = cp_offsets(c, s.u.s, s.n, &ncp);
        int64_t done = 0;
        for (size_t k = 0; k <= ncp; k++) {
            if (count < 0 || done < count) { jbuf_put(A, E, &b, new_.u.s, new_.n); done++; }
            if (k < ncp) jbuf_put(A, E, &b, s.u.s + off[k], off[k + 1] - off[k]);
        }
    } else {
        struct finder f = finder_new(c, old);
        size_t i = 0;
        int64_t done = 0;
        while (count < 0 || done < count) {
            size_t at = finder_next(c, &f, s.u.s, s.n, i);
            if (at == SIZE_MAX) break;
            jbuf_put(A, E, &b, s.u.s + i, at - i);
            jbuf_put(A, E, &b, new_.u.s, new_.n);
            i = at + old.n;
            done++;
        }
        jbuf_put(A, E, &b, s.u.s + i, s.n - i);
    }
    return (jv){.t = JV_STR, .n = b.n, .u.s = b.p ? b.p : ""};
}

static jv str_split(struct ctx *c, jv s, jv sep, int64_t maxsplit) {
    jv r = jv_list_new(A, E, 0);
    if (sep.t == JV_STR) {
        if (!sep.n) jerr_throw(E, KVB_ERR_INVALID, "split: empty separator");
        struct finder f = finder_new(c, sep);
        size_t b = 0;
        int64_t done = 0;
        while (maxsplit < 0 || done < maxsplit) {
            size_t at = finder_next(c, &f, s.u.s, s.n, b);
            if (at == SIZE_MAX) break;
            jv_list_push(A, E, r, (jv){.t = JV_STR, .n = at - b, .u.s = s.u.s + b});
            b = at + sep.n;
            done++;
        }
        jv_list_push(A, E, r, (jv){.t = JV_STR, .n = s.n - b, .u.s = s.u.s + b});
        return r;
    }
    jwork(E, (int64_t)s.n);
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
        while (i < s.n && py_space((unsigned char)s.u.s[i])) i++;
        if (i >= s.n) break;
        if (maxsplit >= 0 && done >= maxsplit) {
            size_t e = s.n;
            while (e > i && py_space((unsigned char)s.u.s[e - 1])) e--;
            jv_list_push(A, E, r, (jv){.t = JV_STR, .n = e - i, .u.s = s.u.s + i});
            break;
        }
        size_t b = i;
        while (i < s.n && !py_space((unsigned char)s.u.s[i])) i++;
        jv_list_push(A, E, r, (jv){.t = JV_STR, .n = i - b, .u.s = s.u.s + b});
        done++;
    }
    return r;
}

static bool str_affix(jv s, jv a, bool start) {
    if (a.t != JV_STR) return false;
    if (a.n > s.n) return false;
    return !memcmp(start ? s.u.s : s.u.s + s.n - a.n, a.u.s, a.n);
}

/* --- arithmetic and comparison --- */

static bool isnum(jv x) { return x.t == JV_INT || x.t == JV_FLOAT || x.t == JV_BOOL; }
static double fnum(jv x) { return x.t == JV_FLOAT ? x.u.f : x.t == JV_INT ? (double)x.u.i : (double)x.u.b; }
static int64_t inum(jv x) { return x.t == JV_INT ? x.u.i : x.t == JV_BOOL ? (int64_t)x.u.b : 0; }

_Noreturn static void bad_operands(struct ctx *c, int line, const char *op, jv a, jv b) {
    if (a.t == JV_UNDEF || b.t == JV_UNDEF) {
        jv u = a.t == JV_UNDEF ? a : b;
        fail_at(c, KVB_ERR_INVALID, line, "'%s' is undefined", u.u.s ? u.u.s : "value");
    }
    fail_at(c, KVB_ERR_INVALID, line, "unsupported operand types for %s: '%s' and '%s'", op, type_name(a), type_name(b));
}

static int compare_at(struct ctx *c, int line, const char *op, jv a, jv b, int level) {
    jwork(E, 1);
    if (isnum(a) && isnum(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return inum(a) < inum(b) ? -1 : inum(a) > inum(b);
        double x = fnum(a), y = fnum(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = KVB_MIN(a.n, b.n);
        jwork(E, (int64_t)n);
        int r = memcmp(a.u.s, b.u.s, n);
        if (r) return r < 0 ? -1 : 1;
        return a.n < b.n ? -1 : a.n > b.n;
    }
    if (a.t == JV_LIST && b.t == JV_LIST) {
        if (level >= c->max_depth) fail_at(c, KVB_ERR_NOMEM, line, "values nested too deeply to compare (more than %d levels)", c->max_depth);
        for (int32_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (jv_equal(E, a.u.l->v[i], b.u.l->v[i])) continue;
            return compare_at(c, line, op, a.u.l->v[i], b.u.l->v[i], level + 1);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    fail_at(c, KVB_ERR_INVALID, line, "'%s' not supported between '%s' and '%s'", op, type_name(a), type_name(b));
}
static int compare(struct ctx *c, int line, const char *op, jv a, jv b) { return compare_at(c, line, op, a, b, 0); }

static void step(struct ctx *c, int line);

static bool contains(struct ctx *c, int line, jv hay, jv needle) {
    switch (hay.t) {
    case JV_STR:
        if (needle.t != JV_STR) fail_at(c, KVB_ERR_INVALID, line, "'in <string>' requires string as left operand, not %s", type_name(needle));
        if (!needle.n) return true;
        {
            struct finder f = finder_new(c, needle);
            return finder_next(c, &f, hay.u.s, hay.n, 0) != SIZE_MAX;
        }
    case JV_LIST:
        for (int32_t i = 0; i < hay.u.l->n; i++)
            if (jv_equal(E, hay.u.l->v[i], needle)) return true;
        return false;
    case JV_DICT:
        for (int32_t i = 0; i < hay.u.d->n; i++)
            if (jv_equal(E, hay.u.d->k[i], needle)) return true;
        return false;
    case JV_UNDEF: return false;
    default: fail_at(c, KVB_ERR_INVALID, line, "argument of type '%s' is not iterable", type_name(hay));
    }
}

static int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static jv binop(struct ctx *c, int line, const char *op, jv a, jv b) {
    if (!strcmp(op, "~")) {
        jv x = to_str(c, a), y = to_str(c, b);
        struct jbuf o = {.limit = c->max_out};
        jbuf_put(A, E, &o, "", 0);
        jbuf_put(A, E, &o, x.u.s, x.n);
        jbuf_put(A, E, &o, y.u.s, y.n);
        return (jv){.t = JV_STR, .n = o.n, .u.s = o.p ? o.p : ""};
    }
    if (!strcmp(op, "==")) return mkbool(jv_equal(E, a, b));
    if (!strcmp(op, "!=")) return mkbool(!jv_equal(E, a, b));
    if (!strcmp(op, "<")) return mkbool(compare(c, line, op, a, b) < 0);
    if (!strcmp(op, "<=")) return mkbool(compare(c, line, op, a, b) <= 0);
    if (!strcmp(op, ">")) return mkbool(compare(c, line, op, a, b) > 0);
    if (!strcmp(op, ">=")) return mkbool(compare(c, line, op, a, b) >= 0);
    if (!strcmp(op, "in")) return mkbool(contains(c, line, b, a));
    char o = op[0];
    bool two = op[1] != 0;
    if (isnum(a) && isnum(b)) {
        bool ints = a.t != JV_FLOAT && b.t != JV_FLOAT;
        int64_t x = inum(a), y = inum(b);
        if (o == '+' && ints) {
            int64_t r;
            if (!__builtin_add_overflow(x, y, &r)) return mkint(r);
        } else if (o == '-' && ints) {
            int64_t r;
            if (!__builtin_sub_overflow(x, y, &r)) return mkint(r);
        } else if (o == '*' && !two && ints) {
            int64_t r;
            if (!__builtin_mul_overflow(x, y, &r)) return mkint(r);
        } else if ((o == '/' && two) || o == '%') {
            if (ints) {
                if (!y) fail_at(c, KVB_ERR_INVALID, line, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) fail_at(c, KVB_ERR_UNSUPPORTED, line, "integer overflow");
                int64_t q = floordiv(x, y);
                return mkint(o == '%' ? x - q * y : q);
            }
            double fx = fnum(a), fy = fnum(b);
            if (fy == 0) fail_at(c, KVB_ERR_INVALID, line, "float division by zero");
            double q = floor(fx / fy);
            return (jv){.t = JV_FLOAT, .u.f = o == '%' ? fx - q * fy : q};
        } else if (o == '*' && two && ints && y >= 0) { /* by squaring: 1 ** 10**18 takes 60 steps, not 10**18 */
            int64_t r = 1, base = x;
            for (int64_t e = y; e; e >>= 1) {
                if ((e & 1) && __builtin_mul_overflow(r, base, &r)) fail_at(c, KVB_ERR_UNSUPPORTED, line, "integer overflow in **");
                /* base squared overflowing with bits left means the result would (|base| >= 2) */
                if (e > 1 && __builtin_mul_overflow(base, base, &base)) fail_at(c, KVB_ERR_UNSUPPORTED, line, "integer overflow in **");
            }
            return mkint(r);
        }
        double fx = fnum(a), fy = fnum(b);
        if (o == '/' && !two) {
            if (fy == 0) fail_at(c, KVB_ERR_INVALID, line, "division by zero");
            return (jv){.t = JV_FLOAT, .u.f = fx / fy};
        }
        if (o == '+') return (jv){.t = JV_FLOAT, .u.f = fx + fy};
        if (o == '-') return (jv){.t = JV_FLOAT, .u.f = fx - fy};
        if (o == '*' && !two) return (jv){.t = JV_FLOAT, .u.f = fx * fy};
        if (o == '*' && two) return (jv){.t = JV_FLOAT, .u.f = pow(fx, fy)};
    }
    if (o == '+' && a.t == JV_STR && b.t == JV_STR) {
        struct jbuf r = {.limit = c->max_out};
        jbuf_put(A, E, &r, "", 0);
        jbuf_put(A, E, &r, a.u.s, a.n);
        jbuf_put(A, E, &r, b.u.s, b.n);
        return (jv){.t = JV_STR, .n = r.n, .u.s = r.p ? r.p : ""};
    }
    if (o == '+' && a.t == JV_LIST && b.t == JV_LIST) {
        jv r = jv_list_new(A, E, a.u.l->n + b.u.l->n);
        jwork(E, (int64_t)a.u.l->n + b.u.l->n);
        for (int32_t i = 0; i < a.u.l->n; i++) jv_list_push(A, E, r, a.u.l->v[i]);
        for (int32_t i = 0; i < b.u.l->n; i++) jv_list_push(A, E, r, b.u.l->v[i]);
        return r;
    }
    if (o == '*' && !two && ((a.t == JV_STR && (b.t == JV_INT || b.t == JV_BOOL)) || (b.t == JV_STR && (a.t == JV_INT || a.t == JV_BOOL)))) {
        jv s = a.t == JV_STR ? a : b;
        int64_t k = a.t == JV_STR ? inum(b) : inum(a);
        struct jbuf r = {.limit = c->max_out};
        jbuf_put(A, E, &r, "", 0);
        for (int64_t i = 0; i < k; i++) {
            step(c, line);
            jbuf_put(A, E, &r, s.u.s, s.n);
        }
        return (jv){.t = JV_STR, .n = r.n, .u.s = r.p ? r.p : ""};
    }
    if (o == '*' && !two && ((a.t == JV_LIST && (b.t == JV_INT || b.t == JV_BOOL)) || (b.t == JV_LIST && (a.t == JV_INT || a.t == JV_BOOL)))) {
        jv l = a.t == JV_LIST ? a : b;
        int64_t k = a.t == JV_LIST ? inum(b) : inum(a);
        jv r = jv_list_new(A, E, 0);
        for (int64_t i = 0; i < k; i++) {
            step(c, line);
            jwork(E, l.u.l->n);
            for (int32_t j = 0; j < l.u.l->n; j++) jv_list_push(A, E, r, l.u.l->v[j]);
        }
        r.ns = l.ns;
        return r;
    }
    if (o == '%' && a.t == JV_STR) fail_at(c, KVB_ERR_UNSUPPORTED, line, "unsupported: '%%' string formatting");
    bad_operands(c, line, op, a, b);
}

/* --- attribute, item, slice --- */

static const char *const k_str_methods[] = {"strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper", "lower", "replace",
                                            "title", "capitalize", "find", "count", "join", "format", NULL};
static const char *const k_dict_methods[] = {"items", "keys", "values", "get", NULL};

static bool in_names(const char *const *names, const char *s, size_t n) {
    for (; *names; names++)
        if (strlen(*names) == n && !memcmp(*names, s, n)) return true;
    return false;
}

static jv method(struct ctx *c, jv obj, const char *name) {
    struct jmethod *m = jarena_alloc(A, E, sizeof *m);
    m->obj = obj;
    m->name = name;
    return (jv){.t = JV_METHOD, .u.me = m};
}

static jv getattr_(struct ctx *c, int line, jv obj, const char *name) {
    size_t n = strlen(name);
    if (obj.t == JV_UNDEF)
        fail_at(c, KVB_ERR_INVALID, line, "'%s' is undefined (reading its attribute '%s')", obj.u.s ? obj.u.s : "value", name);
    if (obj.t == JV_DICT) {
        if (!obj.ns && in_names(k_dict_methods, name, n)) return method(c, obj, name);
        jwork(E, obj.u.d->n);
        jv *v = jv_dict_get(obj.u.d, name, n);
        return v ? *v : undef(name);
    }
    if (obj.t == JV_STR && in_names(k_str_methods, name, n)) return method(c, obj, name);
    return undef(name);
}

static jv getitem(struct ctx *c, int line, jv obj, jv key) {
    if (obj.t == JV_UNDEF) fail_at(c, KVB_ERR_INVALID, line, "'%s' is undefined (reading an item)", obj.u.s ? obj.u.s : "value");
    if (obj.t == JV_DICT) {
        for (int32_t i = 0; i < obj.u.d->n; i++)
            if (jv_equal(E, obj.u.d->k[i], key)) return obj.u.d->v[i];
        if (key.t == JV_STR) {
            char *nm = jarena_alloc(A, E, key.n + 1);
            memcpy(nm, key.u.s, key.n);
            nm[key.n] = 0;
            if (!obj.ns && in_names(k_dict_methods, key.u.s, key.n)) return method(c, obj, nm);
            return undef(nm);
        }
        return undef(NULL);
    }
    if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
        int64_t i = inum(key);
        if (obj.t == JV_LIST) {
            if (i < 0) i += obj.u.l->n;
            return i >= 0 && i < obj.u.l->n ? obj.u.l->v[i] : undef(NULL);
        }
        size_t ncp, *off = cp_offsets(c, obj.u.s, obj.n, &ncp);
        if (i < 0) i += (int64_t)ncp;
        if (i < 0 || i >= (int64_t)ncp) return undef(NULL);
        return (jv){.t = JV_STR, .n = off[i + 1] - off[i], .u.s = obj.u.s + off[i]};
    }
    if (key.t == JV_STR) {
        char *nm = jarena_alloc(A, E, key.n + 1);
        memcpy(nm, key.u.s, key.n);
        nm[key.n] = 0;
        return getattr_(c, line, obj, nm);
    }
    return undef(NULL);
}

static jv slice(struct ctx *c, int line, jv obj, jv lo, jv hi, jv st) {
    int64_t len;
    size_t *off = NULL, ncp = 0;
    if (obj.t == JV_LIST) len = obj.u.l->n;
    else if (obj.t == JV_STR) {
        off = cp_offsets(c, obj.u.s, obj.n, &ncp);
        len = (int64_t)ncp;
    } else if (obj.t == JV_UNDEF) fail_at(c, KVB_ERR_INVALID, line, "'%s' is undefined (slicing it)", obj.u.s ? obj.u.s : "value");
    else return undef(NULL); /* jinja2's getitem: a failed lookup is undefined */
    for (int k = 0; k < 3; k++) {
        jv x = k == 0 ? lo : k == 1 ? hi : st;
        if (x.t != JV_NONE && x.t != JV_UNDEF && x.t != JV_INT && x.t != JV_BOOL)
            fail_at(c, KVB_ERR_INVALID, line, "slice indices must be integers or None");
    }
    int64_t step = st.t == JV_INT || st.t == JV_BOOL ? inum(st) : 1;
    if (!step) fail_at(c, KVB_ERR_INVALID, line, "slice step cannot be zero");
    int64_t start, stop;
    bool has_lo = lo.t == JV_INT || lo.t == JV_BOOL, has_hi = hi.t == JV_INT || hi.t == JV_BOOL;
    if (step > 0) {
        start = has_lo ? inum(lo) : 0;
        stop = has_hi ? inum(hi) : len;
        if (start < 0) start = KVB_MAX(start + len, 0);
        if (stop < 0) stop = KVB_MAX(stop + len, 0);
        start = KVB_MIN(start, len);
        stop = KVB_MIN(stop, len);
    } else {
        start = has_lo ? inum(lo) : len - 1;
        stop = has_hi ? inum(hi) : -1 - len;
        if (start < 0) start = KVB_MAX(start + len, -1);
        if (stop < 0) stop = KVB_MAX(stop + len, -1);
        start = KVB_MIN(start, len - 1);
        stop = KVB_MIN(stop, len - 1);
    }
    if (obj.t == JV_LIST) {
        jv r = jv_list_new(A, E, 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            jv_list_push(A, E, r, obj.u.l->v[i]);
            if (step > 0 ? step >= stop - i : step <= stop - i) break; /* the next index is past stop (and i + step may overflow) */
        }
        return r;
    }
    if (step == 1) {
        if (stop <= start) return lit("");
        return (jv){.t = JV_STR, .n = off[stop] - off[start], .u.s = obj.u.s + off[start]};
    }
    struct jbuf b = {.limit = c->max_out};
    jbuf_put(A, E, &b, "", 0);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        jbuf_put(A, E, &b, obj.u.s + off[i], off[i + 1] - off[i]);
        if (step > 0 ? step >= stop - i : step <= stop - i) break;
    }
    return (jv){.t = JV_STR, .n = b.n, .u.s = b.p};
}

/* --- calls --- */

struct args {
    jv *pos;
    int npos;
    const char **kn;
    jv *kv;
    int nk;
    int line;
    const char *what; /* for messages */
};

/* argument i by position, or by keyword name; def when absent */
static jv arg(struct args *a, int i, const char *name, jv def) {
    if (i >= 0 && i < a->npos) return a->pos[i];
    for (int k = 0; name && k < a->nk; k++)
        if (!strcmp(a->kn[k], name)) return a->kv[k];
    return def;
}
static void check_args(struct ctx *c, struct args *a, int max_pos, const char *const *kw) {
    if (a->npos > max_pos) fail_at(c, KVB_ERR_INVALID, a->line, "%s takes at most %d positional arguments (%d given)", a->what, max_pos, a->npos);
    for (int k = 0; k < a->nk; k++) {
        bool ok = false;
        for (int j = 0; kw && kw[j] && !ok; j++) ok = !strcmp(kw[j], a->kn[k]);
        if (!ok) fail_at(c, KVB_ERR_UNSUPPORTED, a->line, "%s: unsupported argument '%s'", a->what, a->kn[k]);
    }
}
static int64_t int_arg(struct ctx *c, struct args *a, jv v, const char *what) {
    if (v.t != JV_INT && v.t != JV_BOOL) fail_at(c, KVB_ERR_INVALID, a->line, "%s: %s must be an integer, not %s", a->what, what, type_name(v));
    return inum(v);
}
static jv str_arg(struct ctx *c, struct args *a, jv v, const char *what) {
    if (v.t != JV_STR) fail_at(c, KVB_ERR_INVALID, a->line, "%s: %s must be a string, not %s", a->what, what, type_name(v));
    return v;
}

static void exec(struct ctx *c, struct node *n, struct scope *s);
static jv eval(struct ctx *c, struct node *n, struct scope *s);
static jv call_value(struct ctx *c, jv f, struct args *a, struct scope *s);
static bool run_test(struct ctx *c, const char *name, jv v, struct args *a);
static jv run_filter(struct ctx *c, const char *name, jv v, struct args *a, struct scope *s);

/* a loop iteration or a call: JWORK_STEP units of the render's budget */
static void step(struct ctx *c, int line) {
    E->line = line;
    jwork(E, JWORK_STEP);
}

static jv call_macro(struct ctx *c, struct jmacro *m, struct args *a, jv caller) {
    struct node *def = m->def;
    step(c, a->line);
    if (++c->depth > c->max_depth) fail_at(c, KVB_ERR_NOMEM, a->line, "macro calls nested too deeply (more than %d)", c->max_depth);
    struct scope *s = new_scope(c, m->closure);
    jwork(E, 3 * (int64_t)(a->nk + 1) * (def->nk + 1)); /* matching keyword arguments to parameters */
    if (a->npos > def->nk) fail_at(c, KVB_ERR_INVALID, a->line, "macro '%s' takes %d arguments (%d given)", def->name ? def->name : "caller", def->nk, a->npos);
    for (int k = 0; k < a->nk; k++) {
        bool ok = !strcmp(a->kn[k], "caller") && caller.t != JV_UNDEF;
        for (int j = 0; j < def->nk && !ok; j++) ok = !strcmp(def->kn[j], a->kn[k]);
        if (!ok) fail_at(c, KVB_ERR_INVALID, a->line, "macro '%s' has no parameter '%s'", def->name ? def->name : "caller", a->kn[k]);
    }
    for (int j = 0; j < def->nk; j++) {
        jv v = arg(a, j, def->kn[j], undef(NULL));
        if (v.t == JV_UNDEF && !(j < a->npos)) {
            bool given = false;
            for (int k = 0; k < a->nk; k++) given |= !strcmp(a->kn[k], def->kn[j]);
            if (!given) v = def->kv[j] ? eval(c, def->kv[j], s) : undef(def->kn[j]);
        }
        scope_set(c, s, def->kn[j], v);
    }
    if (caller.t != JV_UNDEF) scope_set(c, s, "caller", caller);
    struct jbuf *saved = c->out, b = {.limit = c->max_out};
    jbuf_put(A, E, &b, "", 0);
    c->out = &b;
    exec(c, def->d, s);
    c->out = saved;
    c->brk = 0;
    c->depth--;
    return (jv){.t = JV_STR, .n = b.n, .u.s = b.p};
}

static jv list_of(struct ctx *c, int line, jv v) { /* iteration as a list */
    switch (v.t) {
    case JV_LIST: return v;
    case JV_UNDEF: return jv_list_new(A, E, 0);
    case JV_DICT: {
        jv r = jv_list_new(A, E, v.u.d->n);
        for (int32_t i = 0; i < v.u.d->n; i++) jv_list_push(A, E, r, v.u.d->k[i]);
        return r;
    }
    case JV_STR: {
        size_t ncp, *off = cp_offsets(c, v.u.s, v.n, &ncp);
        jv r = jv_list_new(A, E, (int32_t)KVB_MIN(ncp, (size_t)INT32_MAX / 2));
        for (size_t i = 0; i < ncp; i++) jv_list_push(A, E, r, (jv){.t = JV_STR, .n = off[i + 1] - off[i], .u.s = v.u.s + off[i]});
        return r;
    }
    default: fail_at(c, KVB_ERR_INVALID, line, "'%s' object is not iterable", type_name(v));
    }
}

static jv items_of(struct ctx *c, int line, jv d) {
    if (d.t == JV_UNDEF) return jv_list_new(A, E, 0);
    if (d.t != JV_DICT) fail_at(c, KVB_ERR_INVALID, line, "items: can only get item pairs from a mapping, not %s", type_name(d));
    jv r = jv_list_new(A, E, d.u.d->n);
    for (int32_t i = 0; i < d.u.d->n; i++) {
        jv p = jv_list_new(A, E, 2);
        jv_list_push(A, E, p, d.u.d->k[i]);
        jv_list_push(A, E, p, d.u.d->v[i]);
        p.ns = true; /* a tuple */
        jv_list_push(A, E, r, p);
    }
    return r;
}

static jv call_method(struct ctx *c, struct jmethod *m, struct args *a) {
    jv o = m->obj;
    const char *nm = m->name;
    a->what = nm;
    if (o.t == JV_DICT) {
        if (!strcmp(nm, "items")) { check_args(c, a, 0, NULL); return items_of(c, a->line, o); }
        if (!strcmp(nm, "keys")) { check_args(c, a, 0, NULL); return list_of(c, a->line, o); }
        if (!strcmp(nm, "values")) {
            check_args(c, a, 0, NULL);
            jv r = jv_list_new(A, E, o.u.d->n);
            for (int32_t i = 0; i < o.u.d->n; i++) jv_list_push(A, E, r, o.u.d->v[i]);
            return r;
        }
        if (!strcmp(nm, "get")) {
            check_args(c, a, 2, NULL);
            if (a->npos < 1) fail_at(c, KVB_ERR_INVALID, a->line, "get expected at least 1 argument");
            for (int32_t i = 0; i < o.u.d->n; i++)
                if (jv_equal(E, o.u.d->k[i], a->pos[0])) return o.u.d->v[i];
            return a->npos > 1 ? a->pos[1] : (jv){.t = JV_NONE};
        }
    }
    if (o.t != JV_STR) fail_at(c, KVB_ERR_INVALID, a->line, "'%s' has no method '%s'", type_name(o), nm);
    if (!strcmp(nm, "strip") || !strcmp(nm, "lstrip") || !strcmp(nm, "rstrip")) {
        check_args(c, a, 1, NULL);
        return strip(c, o, arg(a, 0, NULL, (jv){.t = JV_NONE}), nm[0] == 'l' ? 1 : nm[0] == 'r' ? 2 : 3);
    }
    if (!strcmp(nm, "split")) {
        static const char *const kw[] = {"sep", "maxsplit", NULL};
        check_args(c, a, 2, kw);
        jv sep = arg(a, 0, "sep", (jv){.t = JV_NONE});
        if (sep.t != JV_NONE) str_arg(c, a, sep, "sep");
        return str_split(c, o, sep, int_arg(c, a, arg(a, 1, "maxsplit", mkint(-1)), "maxsplit"));
    }
    if (!strcmp(nm, "startswith") || !strcmp(nm, "endswith")) {
        check_args(c, a, 1, NULL);
        jv p = arg(a, 0, NULL, undef(NULL));
        bool start = nm[0] == 's';
        if (p.t == JV_LIST) {
            for (int32_t i = 0; i < p.u.l->n; i++) {
                jv x = str_arg(c, a, p.u.l->v[i], "prefix");
                jwork(E, (int64_t)KVB_MIN(x.n, o.n) + 1);
                if (str_affix(o, x, start)) return mkbool(true);
            }
            return mkbool(false);
        }
        jv x = str_arg(c, a, p, "prefix");
        jwork(E, (int64_t)KVB_MIN(x.n, o.n) + 1);
        return mkbool(str_affix(o, x, start));
    }
    if (!strcmp(nm, "upper")) { check_args(c, a, 0, NULL); return str_case(c, o, 1); }
    if (!strcmp(nm, "lower")) { check_args(c, a, 0, NULL); return str_case(c, o, 0); }
    if (!strcmp(nm, "capitalize")) { check_args(c, a, 0, NULL); return str_case(c, o, 2); }
    if (!strcmp(nm, "title")) { check_args(c, a, 0, NULL); return str_case(c, o, 3); }
    if (!strcmp(nm, "replace")) {
        check_args(c, a, 3, NULL);
        return str_replace(c, o, str_arg(c, a, arg(a, 0, NULL, undef(NULL)), "old"), str_arg(c, a, arg(a, 1, NULL, undef(NULL)), "new"),
                           int_arg(c, a, arg(a, 2, NULL, mkint(-1)), "count"));
    }
    if (!strcmp(nm, "find") || !strcmp(nm, "count")) {
        check_args(c, a, 1, NULL);
        jv x = str_arg(c, a, arg(a, 0, NULL, undef(NULL)), "sub");
        if (nm[0] == 'c' && !x.n) { /* Python: one more than the code points */
            jwork(E, (int64_t)o.n);
            return mkint((int64_t)utf8_len(o.u.s, o.n) + 1);
        }
        struct finder f = finder_new(c, x);
        int64_t k = 0;
        for (size_t i = 0;;) {
            size_t at = finder_next(c, &f, o.u.s, o.n, i);
            if (at == SIZE_MAX) break;
            if (nm[0] == 'f') {
                jwork(E, (int64_t)at);
                return mkint((int64_t)utf8_len(o.u.s, at));
            }
            k++;
            i = at + x.n;
        }
        return mkint(nm[0] == 'f' ? -1 : k);
    }
    if (!strcmp(nm, "join")) {
        check_args(c, a, 1, NULL);
        jv l = list_of(c, a->line, arg(a, 0, NULL, undef(NULL)));
        struct jbuf b = {.limit = c->max_out};
        jbuf_put(A, E, &b, "", 0);
        for (int32_t i = 0; i < l.u.l->n; i++) {
            jwork(E, 1);
            if (i) jbuf_put(A, E, &b, o.u.s, o.n);
            jv x = str_arg(c, a, l.u.l->v[i], "item");
            jbuf_put(A, E, &b, x.u.s, x.n);
        }
        return (jv){.t = JV_STR, .n = b.n, .u.s = b.p};
    }
    fail_at(c, KVB_ERR_UNSUPPORTED, a->line, "unsupported string method '%s'", nm);
}

static jv call_builtin(struct ctx *c, int fn, struct args *a) {
    switch (fn) {
    case B_RANGE: {
        a->what = "range";
        check_args(c, a, 3, NULL);
        if (a->npos < 1) fail_at(c, KVB_ERR_INVALID, a->line, "range expected at least 1 argument");
        int64_t lo = 0, hi, st = 1;
        if (a->npos == 1) hi = int_arg(c, a, a->pos[0], "stop");
        else {
            lo = int_arg(c, a, a->pos[0], "start");
            hi = int_arg(c, a, a->pos[1], "stop");
            if (a->npos > 2) st = int_arg(c, a, a->pos[2], "step");
        }
        if (!st) fail_at(c, KVB_ERR_INVALID, a->line, "range() arg 3 must not be zero");
        jv r = jv_list_new(A, E, 0);
        for (int64_t i = lo; st > 0 ? i < hi : i > hi;) {
            step(c, a->line);
            jv_list_push(A, E, r, mkint(i));
            if (__builtin_add_overflow(i, st, &i)) break; /* past INT64's ends: past hi too */
        }
        return r;
    }
    case B_NAMESPACE: case B_DICT: {
        a->what = fn == B_DICT ? "dict" : "namespace";
        jv d = jv_dict_new(A, E, a->nk);
        if (a->npos > 1 || (a->npos == 1 && a->pos[0].t != JV_DICT))
            fail_at(c, KVB_ERR_UNSUPPORTED, a->line, "%s: only keyword arguments or one dict", a->what);
        if (a->npos == 1)
            for (int32_t i = 0; i < a->pos[0].u.d->n; i++) jv_dict_set(A, E, d, a->pos[0].u.d->k[i], a->pos[0].u.d->v[i]);
        for (int k = 0; k < a->nk; k++) jv_dict_set(A, E, d, mkstr(c, a->kn[k]), a->kv[k]);
        d.ns = fn == B_NAMESPACE;
        return d;
    }
    case B_RAISE: {
        jv m = to_str(c, arg(a, 0, NULL, lit("")));
        fail_at(c, KVB_ERR_INVALID, a->line, "raise_exception: %.*s", (int)KVB_MIN(m.n, 150), m.u.s);
    }
    case B_STRFTIME: {
        a->what = "strftime_now";
        check_args(c, a, 1, NULL);
        jv f = str_arg(c, a, arg(a, 0, NULL, undef(NULL)), "format");
        char fmt[128], buf[256];
        if (f.n >= sizeof fmt) fail_at(c, KVB_ERR_UNSUPPORTED, a->line, "strftime_now: format too long");
        memcpy(fmt, f.u.s, f.n);
        fmt[f.n] = 0;
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t n = strftime(buf, sizeof buf, fmt, &tm);
        return jv_str(A, E, buf, n);
    }
    }
    fail_at(c, KVB_ERR_INVALID, a->line, "unknown builtin");
}

static jv call_value(struct ctx *c, jv f, struct args *a, struct scope *s) {
    (void)s;
    switch (f.t) {
    case JV_MACRO: return call_macro(c, f.u.m, a, undef(NULL));
    case JV_BUILTIN: return call_builtin(c, f.u.fn, a);
    case JV_METHOD: return call_method(c, f.u.me, a);
    case JV_UNDEF: fail_at(c, KVB_ERR_INVALID, a->line, "'%s' is undefined (called as a function)", f.u.s ? f.u.s : "value");
    default: fail_at(c, KVB_ERR_INVALID, a->line, "'%s' object is not callable", type_name(f));
    }
}

static void eval_args(struct ctx *c, struct node *n, struct scope *s, struct args *a, int extra_front) {
    a->npos = n->n + extra_front;
    a->pos = jarena_alloc(A, E, sizeof(jv) * (size_t)(a->npos + 1));
    for (int i = 0; i < n->n; i++) a->pos[i + extra_front] = eval(c, n->v[i], s);
    a->nk = n->nk;
    a->kn = n->kn;
    a->kv = jarena_alloc(A, E, sizeof(jv) * (size_t)(a->nk + 1));
    for (int i = 0; i < n->nk; i++) a->kv[i] = eval(c, n->kv[i], s);
    a->line = n->line;
}

/* --- tests --- */

static bool run_test(struct ctx *c, const char *name, jv v, struct args *a) {
    a->what = name;
    jv x = arg(a, 0, NULL, undef(NULL));
    if (!strcmp(name, "defined")) return v.t != JV_UNDEF;
    if (!strcmp(name, "undefined")) return v.t == JV_UNDEF;
    if (!strcmp(name, "none")) return v.t == JV_NONE;
    if (!strcmp(name, "string")) return v.t == JV_STR;
    if (!strcmp(name, "mapping")) return v.t == JV_DICT;
    if (!strcmp(name, "iterable") || !strcmp(name, "sequence")) return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
    if (!strcmp(name, "number")) return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
    if (!strcmp(name, "integer")) return v.t == JV_INT;
    if (!strcmp(name, "float")) return v.t == JV_FLOAT;
    if (!strcmp(name, "boolean")) return v.t == JV_BOOL;
    if (!strcmp(name, "true")) return v.t == JV_BOOL && v.u.b;
    if (!strcmp(name, "false")) return v.t == JV_BOOL && !v.u.b;
    if (!strcmp(name, "callable")) return v.t == JV_MACRO || v.t == JV_BUILTIN || v.t == JV_METHOD;
    if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==") || !strcmp(name, "sameas")) {
        if (!strcmp(name, "sameas") && (v.t != x.t)) return false;
        return jv_equal(E, v, x);
    }
    if (!strcmp(name, "ne") || !strcmp(name, "!=")) return !jv_equal(E, v, x);
    if (!strcmp(name, "lt") || !strcmp(name, "<") || !strcmp(name, "lessthan")) return compare(c, a->line, "<", v, x) < 0;
    if (!strcmp(name, "le") || !strcmp(name, "<=")) return compare(c, a->line, "<=", v, x) <= 0;
    if (!strcmp(name, "gt") || !strcmp(name, ">") || !strcmp(name, "greaterthan")) return compare(c, a->line, ">", v, x) > 0;
    if (!strcmp(name, "ge") || !strcmp(name, ">=")) return compare(c, a->line, ">=", v, x) >= 0;
    if (!strcmp(name, "in")) return contains(c, a->line, x, v);
    if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        int64_t i = int_arg(c, a, v, "value");
        return (i % 2 != 0) == (name[0] == 'o');
    }
    if (!strcmp(name, "divisibleby")) {
        int64_t d = int_arg(c, a, x, "num");
        if (!d) fail_at(c, KVB_ERR_INVALID, a->line, "divisibleby 0");
        return int_arg(c, a, v, "value") % d == 0;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) { /* str(value).islower() */
        jv s = to_str(c, v);
        jwork(E, (int64_t)s.n);
        bool any = false;
        for (size_t i = 0; i < s.n; i++) {
            char ch = s.u.s[i];
            if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
                any = true;
                if ((name[0] == 'l') != (ch >= 'a' && ch <= 'z')) return false;
            }
        }
        return any;
    }
    fail_at(c, KVB_ERR_UNSUPPORTED, a->line, "unsupported test '%s'", name);
}

/* --- filters --- */

static jv attr_path(struct ctx *c, int line, jv v, jv path) {
    /* "a.b" or an integer */
    if (path.t == JV_INT) return getitem(c, line, v, path);
    jwork(E, (int64_t)path.n);
    size_t b = 0;
    for (size_t i = 0; i <= path.n; i++)
        if (i == path.n || path.u.s[i] == '.') {
            jv part = (jv){.t = JV_STR, .n = i - b, .u.s = path.u.s + b};
            bool digits = part.n > 0;
            for (size_t k = 0; k < part.n; k++) digits &= is_digit(part.u.s[k]);
            if (digits) part = mkint(strtoll(jv_str(A, E, part.u.s, part.n).u.s, NULL, 10));
            if (v.t == JV_UNDEF) return v;
            v = getitem(c, line, v, part);
            b = i + 1;
        }
    return v;
}

static struct args sub_args(struct args *a, int from) {
    struct args r = *a;
    r.pos = a->pos + from;
    r.npos = a->npos > from ? a->npos - from : 0;
    return r;
}

static int cmp_sort(struct ctx *c, int line, jv attr, bool ci, jv a, jv b) {
    if (attr.t == JV_STR || attr.t == JV_INT) {
        a = attr_path(c, line, a, attr);
        b = attr_path(c, line, b, attr);
    }
    if (ci && a.t == JV_STR && b.t == JV_STR) {
        a = str_case(c, a, 0);
        b = str_case(c, b, 0);
    }
    return compare(c, line, "<", a, b);
}

static jv run_filter_(struct ctx *c, const char *name, jv v, struct args *a, struct scope *s);

/* map(filter) calls filters in filters: nested as deep as the value */
static jv run_filter(struct ctx *c, const char *name, jv v, struct args *a, struct scope *s) {
    if (++c->depth > c->max_depth) fail_at(c, KVB_ERR_NOMEM, a->line, "filters nested too deeply (more than %d)", c->max_depth);
    jwork(E, 1);
    jv r = run_filter_(c, name, v, a, s);
    c->depth--;
    return r;
}

static jv run_filter_(struct ctx *c, const char *name, jv v, struct args *a, struct scope *s) {
    a->what = name;
    int line = a->line;
    if (!strcmp(name, "tojson")) {
        static const char *const kw[] = {"indent", "ensure_ascii", "sort_keys", "separators", NULL};
        check_args(c, a, 1, kw);
        jv ind = arg(a, 0, "indent", (jv){.t = JV_NONE});
        if (truthy(arg(a, -1, "ensure_ascii", mkbool(false)))) fail_at(c, KVB_ERR_UNSUPPORTED, line, "tojson: ensure_ascii=True is unsupported");
        if (truthy(arg(a, -1, "sort_keys", mkbool(false)))) fail_at(c, KVB_ERR_UNSUPPORTED, line, "tojson: sort_keys=True is unsupported");
        if (arg(a, -1, "separators", (jv){.t = JV_NONE}).t != JV_NONE) fail_at(c, KVB_ERR_UNSUPPORTED, line, "tojson: separators are unsupported");
        int indent = -1;
        if (ind.t != JV_NONE) indent = (int)KVB_MAX(0, KVB_MIN(int_arg(c, a, ind, "indent"), 64));
        struct jbuf b = {.limit = c->max_out};
        jbuf_put(A, E, &b, "", 0);
        jjson_dump(A, E, &b, v, indent, 0);
        return (jv){.t = JV_STR, .n = b.n, .u.s = b.p};
    }
    if (!strcmp(name, "trim")) {
        check_args(c, a, 1, NULL);
        return strip(c, to_str(c, v), arg(a, 0, "chars", (jv){.t = JV_NONE}), 3);
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        check_args(c, a, 0, NULL);
        switch (v.t) {
        case JV_STR: jwork(E, (int64_t)v.n); return mkint((int64_t)utf8_len(v.u.s, v.n));
        case JV_LIST: return mkint(v.u.l->n);
        case JV_DICT: return mkint(v.u.d->n);
        case JV_UNDEF: return mkint(0);
        default: fail_at(c, KVB_ERR_INVALID, line, "object of type '%s' has no len()", type_name(v));
        }
    }
    if (!strcmp(name, "items")) { check_args(c, a, 0, NULL); return items_of(c, line, v); }
    if (!strcmp(name, "list")) {
        check_args(c, a, 0, NULL);
        jv l = list_of(c, line, v);
        l.ns = false; /* a tuple becomes a list */
        return l;
    }
    if (!strcmp(name, "string")) { check_args(c, a, 0, NULL); return to_str(c, v); }
    if (!strcmp(name, "safe")) { check_args(c, a, 0, NULL); return to_str(c, v); } /* Markup(str(value)) */
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") || !strcmp(name, "title")) {
        check_args(c, a, 0, NULL);
        int mode = name[0] == 'u' ? 1 : name[0] == 'l' ? 0 : name[0] == 'c' ? 2 : 3;
        return str_case(c, to_str(c, v), mode);
    }
    if (!strcmp(name, "replace")) {
        static const char *const kw[] = {"old", "new", "count", NULL};
        check_args(c, a, 3, kw);
        jv cnt = arg(a, 2, "count", (jv){.t = JV_NONE});
        return str_replace(c, to_str(c, v), to_str(c, arg(a, 0, "old", lit(""))), to_str(c, arg(a, 1, "new", lit(""))),
                           cnt.t == JV_NONE ? -1 : int_arg(c, a, cnt, "count"));
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        static const char *const kw[] = {"default_value", "boolean", NULL};
        check_args(c, a, 2, kw);
        jv def = arg(a, 0, "default_value", lit(""));
        bool boolean = truthy(arg(a, 1, "boolean", mkbool(false)));
        if (v.t == JV_UNDEF || (boolean && !truthy(v))) return def;
        return v;
    }
    if (!strcmp(name, "join")) {
        static const char *const kw[] = {"d", "attribute", NULL};
        check_args(c, a, 2, kw);
        jv sep = to_str(c, arg(a, 0, "d", lit(""))), at = arg(a, 1, "attribute", (jv){.t = JV_NONE});
        jv l = list_of(c, line, v);
        struct jbuf b = {.limit = c->max_out};
        jbuf_put(A, E, &b, "", 0);
        for (int32_t i = 0; i < l.u.l->n; i++) {
            jwork(E, 1);
            if (i) jbuf_put(A, E, &b, sep.u.s, sep.n);
            jv x = at.t != JV_NONE ? attr_path(c, line, l.u.l->v[i], at) : l.u.l->v[i];
            x = to_str(c, x);
            jbuf_put(A, E, &b, x.u.s, x.n);
        }
        return (jv){.t = JV_STR, .n = b.n, .u.s = b.p};
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        check_args(c, a, 0, NULL);
        jv l = list_of(c, line, v);
        if (!l.u.l->n) return undef(NULL);
        return l.u.l->v[name[0] == 'f' ? 0 : l.u.l->n - 1];
    }
    if (!strcmp(name, "int")) {
        static const char *const kw[] = {"default", "base", NULL};
        check_args(c, a, 2, kw);
        jv def = arg(a, 0, "default", mkint(0));
        if (v.t == JV_INT) return v;
        if (v.t == JV_BOOL) return mkint(v.u.b);
        if (v.t == JV_FLOAT) return isfinite(v.u.f) && fabs(v.u.f) < 9e18 ? mkint((int64_t)v.u.f) : def;
        if (v.t == JV_STR) {
            jv t = strip(c, v, (jv){.t = JV_NONE}, 3);
            jwork(E, 2 * (int64_t)t.n);
            const char *z = jv_str(A, E, t.u.s, t.n).u.s;
            char *end;
            errno = 0;
            long long i = strtoll(z, &end, 10);
            if (t.n && !*end && !errno) return mkint(i);
            double f = strtod(z, &end);
            if (t.n && !*end && isfinite(f) && fabs(f) < 9e18) return mkint((int64_t)f);
        }
        return def;
    }
    if (!strcmp(name, "float")) {
        check_args(c, a, 1, NULL);
        if (isnum(v)) return (jv){.t = JV_FLOAT, .u.f = fnum(v)};
        if (v.t == JV_STR) {
            jwork(E, (int64_t)v.n);
            const char *z = jv_str(A, E, v.u.s, v.n).u.s;
            char *end;
            double f = strtod(z, &end);
            if (v.n && !*end) return (jv){.t = JV_FLOAT, .u.f = f};
        }
        return arg(a, 0, "default", (jv){.t = JV_FLOAT, .u.f = 0});
    }
    if (!strcmp(name, "abs")) {
        check_args(c, a, 0, NULL);
        if (v.t == JV_BOOL) return mkint(v.u.b);
        if (v.t == JV_INT && v.u.i != INT64_MIN) return mkint(v.u.i < 0 ? -v.u.i : v.u.i);
        if (v.t == JV_FLOAT) return (jv){.t = JV_FLOAT, .u.f = fabs(v.u.f)};
        fail_at(c, KVB_ERR_INVALID, line, "bad operand type for abs(): '%s'", type_name(v));
    }
    if (!strcmp(name, "reverse")) {
        check_args(c, a, 0, NULL);
        if (v.t == JV_STR) return slice(c, line, v, (jv){.t = JV_NONE}, (jv){.t = JV_NONE}, mkint(-1));
        jv l = list_of(c, line, v), r = jv_list_new(A, E, l.u.l->n);
        for (int32_t i = l.u.l->n - 1; i >= 0; i--) jv_list_push(A, E, r, l.u.l->v[i]);
        return r;
    }
    if (!strcmp(name, "unique")) {
        check_args(c, a, 0, NULL);
        jv l = list_of(c, line, v), r = jv_list_new(A, E, 0);
        for (int32_t i = 0; i < l.u.l->n; i++)
            if (!contains(c, line, r, l.u.l->v[i])) jv_list_push(A, E, r, l.u.l->v[i]);
        return r;
    }
    if (!strcmp(name, "sort")) {
        static const char *const kw[] = {"reverse", "case_sensitive", "attribute", NULL};
        check_args(c, a, 3, kw);
        bool rev = truthy(arg(a, 0, "reverse", mkbool(false)));
        jv l = list_of(c, line, v), r = jv_list_new(A, E, l.u.l->n);
        for (int32_t i = 0; i < l.u.l->n; i++) jv_list_push(A, E, r, l.u.l->v[i]);
        bool ci = !truthy(arg(a, 1, "case_sensitive", mkbool(false)));
        jv at = arg(a, 2, "attribute", (jv){.t = JV_NONE});
        /* insertion sort: stable like Python's, and inputs are small */
        jv *x = r.u.l->v;
        for (int32_t i = 1; i < r.u.l->n; i++) {
            jv key = x[i];
            int32_t j = i - 1;
            while (j >= 0 && (rev ? cmp_sort(c, line, at, ci, x[j], key) < 0 : cmp_sort(c, line, at, ci, x[j], key) > 0)) {
                step(c, line);
                x[j + 1] = x[j];
                j--;
            }
            x[j + 1] = key;
        }
        return r;
    }
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr") || !strcmp(name, "select") || !strcmp(name, "reject")) {
        bool by_attr = strstr(name, "attr") != NULL, keep = name[0] == 's';
        if (a->nk) fail_at(c, KVB_ERR_UNSUPPORTED, line, "%s: keyword arguments are unsupported", name);
        jv l = list_of(c, line, v), r = jv_list_new(A, E, 0);
        int t0 = by_attr ? 1 : 0;
        if (by_attr && a->npos < 1) fail_at(c, KVB_ERR_INVALID, line, "%s: missing the attribute", name);
        jv test = arg(a, t0, NULL, (jv){.t = JV_NONE});
        if (test.t != JV_NONE) str_arg(c, a, test, "test");
        const char *tname = test.t == JV_STR ? jv_str(A, E, test.u.s, test.n).u.s : NULL;
        struct args ta = sub_args(a, t0 + 1);
        for (int32_t i = 0; i < l.u.l->n; i++) {
            step(c, line);
            jv x = by_attr ? attr_path(c, line, l.u.l->v[i], str_arg(c, a, a->pos[0], "attribute")) : l.u.l->v[i];
            bool ok = tname ? run_test(c, tname, x, &ta) : truthy(x);
            if (ok == keep) jv_list_push(A, E, r, l.u.l->v[i]);
        }
        return r;
    }
    if (!strcmp(name, "map")) {
        jv l = list_of(c, line, v), r = jv_list_new(A, E, l.u.l->n);
        jv at = arg(a, -1, "attribute", undef(NULL));
        if (at.t != JV_UNDEF) {
            static const char *const kw[] = {"attribute", "default", NULL};
            check_args(c, a, 0, kw);
            jv def = arg(a, -1, "default", undef(NULL));
            for (int32_t i = 0; i < l.u.l->n; i++) {
                jv x = attr_path(c, line, l.u.l->v[i], at);
                jv_list_push(A, E, r, x.t == JV_UNDEF && def.t != JV_UNDEF ? def : x);
            }
            return r;
        }
        if (a->npos < 1) fail_at(c, KVB_ERR_INVALID, line, "map: needs a filter name or attribute=");
        jv fname = str_arg(c, a, a->pos[0], "filter");
        const char *fn = jv_str(A, E, fname.u.s, fname.n).u.s;
        struct args fa = sub_args(a, 1);
        for (int32_t i = 0; i < l.u.l->n; i++) {
            step(c, line);
            jv_list_push(A, E, r, run_filter(c, fn, l.u.l->v[i], &fa, s));
        }
        return r;
    }
    if (!strcmp(name, "indent")) {
        static const char *const kw[] = {"width", "first", "blank", NULL};
        check_args(c, a, 3, kw);
        jv w = arg(a, 0, "width", mkint(4));
        jv pad = w;
        if (w.t != JV_STR) {
            int64_t k = KVB_MAX(0, KVB_MIN(int_arg(c, a, w, "width"), 1024));
            pad = binop(c, line, "*", lit(" "), mkint(k));
        }
        bool first = truthy(arg(a, 1, "first", mkbool(false))), blank = truthy(arg(a, 2, "blank", mkbool(false)));
        jv sv = to_str(c, v);
        struct jbuf b = {.limit = c->max_out};
        jbuf_put(A, E, &b, "", 0);
        /* Jinja2 3.x: the lines of Python's str.splitlines, joined by "\n"; the first line padded only with first
         * (then even when empty), a blank line only with blank (issue 48 survivor 5) */
        size_t i = 0, brk = 0;
        bool at_start = true;
        while (i <= sv.n) {
            size_t e = i;
            while (e < sv.n && !(brk = line_break(sv.u.s, sv.n, e))) e++;
            bool empty = e == i;
            /* Jinja2 splits the text with a "\n" added: a last lone "\r" joins it into one break, the end */
            bool last = e == sv.n || (brk == 1 && sv.u.s[e] == '\r' && e + 1 == sv.n);
            if (at_start ? first : blank || !empty) jbuf_put(A, E, &b, pad.u.s, pad.n);
            jbuf_put(A, E, &b, sv.u.s + i, e - i);
            if (!last) jbuf_put(A, E, &b, "\n", 1);
            at_start = false;
            if (last) break;
            i = e + brk;
        }
        return (jv){.t = JV_STR, .n = b.n, .u.s = b.p};
    }
    fail_at(c, KVB_ERR_UNSUPPORTED, line, "unsupported filter '%s'", name);
}

/* --- expressions --- */

static jv eval(struct ctx *c, struct node *n, struct scope *s) {
    if (++c->depth > c->max_depth) fail_at(c, KVB_ERR_NOMEM, n->line, "evaluation nested too deeply (more than %d)", c->max_depth);
    E->line = n->line;
    jwork(E, 1);
    jv r;
    switch (n->k) {
    case E_LIT: r = n->lit; break;
    case E_NAME: r = lookup(c, s, n->name); break;
    case E_LIST: case E_TUPLE:
        r = jv_list_new(A, E, n->n);
        for (int i = 0; i < n->n; i++) jv_list_push(A, E, r, eval(c, n->v[i], s));
        r.ns = n->k == E_TUPLE;
        break;
    case E_DICT:
        r = jv_dict_new(A, E, n->n / 2);
        for (int i = 0; i + 1 < n->n; i += 2) {
            jv k = eval(c, n->v[i], s);
            jv_dict_set(A, E, r, k, eval(c, n->v[i + 1], s));
        }
        break;
    case E_ATTR: r = getattr_(c, n->line, eval(c, n->a, s), n->name); break;
    case E_ITEM: {
        jv o = eval(c, n->a, s);
        r = getitem(c, n->line, o, eval(c, n->b, s));
        break;
    }
    case E_SLICE: {
        jv o = eval(c, n->a, s);
        jv none = {.t = JV_NONE};
        r = slice(c, n->line, o, n->b ? eval(c, n->b, s) : none, n->c ? eval(c, n->c, s) : none, n->d ? eval(c, n->d, s) : none);
        break;
    }
    case E_CALL: {
        jv f = eval(c, n->a, s);
        struct args a;
        eval_args(c, n, s, &a, 0);
        a.what = n->a->k == E_NAME ? n->a->name : n->a->k == E_ATTR ? n->a->name : "call";
        r = call_value(c, f, &a, s);
        break;
    }
    case E_FILTER: {
        jv v = eval(c, n->a, s);
        struct args a;
        eval_args(c, n, s, &a, 0);
        r = run_filter(c, n->name, v, &a, s);
        break;
    }
    case E_TEST: {
        jv v = eval(c, n->a, s);
        struct args a;
        eval_args(c, n, s, &a, 0);
        r = mkbool(run_test(c, n->name, v, &a) != n->neg);
        break;
    }
    case E_NEG: case E_POS: {
        jv v = eval(c, n->a, s);
        if (v.t == JV_INT && n->k == E_NEG && v.u.i != INT64_MIN) r = mkint(-v.u.i);
        else if (v.t == JV_BOOL) r = mkint(n->k == E_NEG ? -(int64_t)v.u.b : v.u.b);
        else if (v.t == JV_INT) r = v;
        else if (v.t == JV_FLOAT) r = (jv){.t = JV_FLOAT, .u.f = n->k == E_NEG ? -v.u.f : v.u.f};
        else fail_at(c, KVB_ERR_INVALID, n->line, "bad operand type for unary %c: '%s'", n->k == E_NEG ? '-' : '+', type_name(v));
        break;
    }
    case E_BIN: {
        jv l = eval(c, n->a, s);
        r = binop(c, n->line, n->name, l, eval(c, n->b, s));
        if (n->neg) r.u.b = !r.u.b;
        break;
    }
    case E_AND: {
        jv l = eval(c, n->a, s);
        r = truthy(l) ? eval(c, n->b, s) : l;
        break;
    }
    case E_OR: {
        jv l = eval(c, n->a, s);
        r = truthy(l) ? l : eval(c, n->b, s);
        break;
    }
    case E_NOT: r = mkbool(!truthy(eval(c, n->a, s))); break;
    case E_COND:
        if (truthy(eval(c, n->b, s))) r = eval(c, n->a, s);
        else r = n->c ? eval(c, n->c, s) : undef(NULL);
        break;
    default: fail_at(c, KVB_ERR_INVALID, n->line, "internal: bad expression node %d", n->k);
    }
    c->depth--;
    return r;
}

/* --- statements --- */

static void assign(struct ctx *c, struct node *tg, jv v, struct scope *s) {
    if (tg->k == E_NAME) {
        scope_set(c, s, tg->name, v);
    } else if (tg->k == E_ATTR) {
        jv ns = eval(c, tg->a, s);
        if (ns.t != JV_DICT || !ns.ns) fail_at(c, KVB_ERR_INVALID, tg->line, "cannot assign attribute on non-namespace object");
        jv_dict_set(A, E, ns, mkstr(c, tg->name), v);
    } else {
        if (v.t != JV_LIST) v = list_of(c, tg->line, v);
        if (v.u.l->n != tg->n)
            fail_at(c, KVB_ERR_INVALID, tg->line, "cannot unpack %d values into %d names", (int)v.u.l->n, tg->n);
        for (int i = 0; i < tg->n; i++) assign(c, tg->v[i], v.u.l->v[i], s);
    }
}

static jv loop_var(struct ctx *c, int32_t i, int32_t n, jv items) {
    jv d = jv_dict_new(A, E, 10);
    jv_dict_set(A, E, d, lit("index"), mkint(i + 1));
    jv_dict_set(A, E, d, lit("index0"), mkint(i));
    jv_dict_set(A, E, d, lit("revindex"), mkint(n - i));
    jv_dict_set(A, E, d, lit("revindex0"), mkint(n - i - 1));
    jv_dict_set(A, E, d, lit("first"), mkbool(i == 0));
    jv_dict_set(A, E, d, lit("last"), mkbool(i == n - 1));
    jv_dict_set(A, E, d, lit("length"), mkint(n));
    jv_dict_set(A, E, d, lit("previtem"), i > 0 ? items.u.l->v[i - 1] : undef("previtem"));
    jv_dict_set(A, E, d, lit("nextitem"), i + 1 < n ? items.u.l->v[i + 1] : undef("nextitem"));
    d.ns = true; /* attributes only (no dict methods); never assigned to by templates */
    return d;
}

static void exec_for(struct ctx *c, struct node *n, struct scope *s) {
    jv all = list_of(c, n->line, eval(c, n->b, s));
    struct scope *ls = new_scope(c, s);
    jv items = all;
    if (n->c) { /* the loop filter: loop.* counts the items that pass */
        items = jv_list_new(A, E, 0);
        for (int32_t i = 0; i < all.u.l->n; i++) {
            step(c, n->line);
            assign(c, n->a, all.u.l->v[i], ls);
            if (truthy(eval(c, n->c, ls))) jv_list_push(A, E, items, all.u.l->v[i]);
        }
    }
    int32_t cnt = items.u.l->n;
    /* Jinja2 runs the else branch when no body ran to its end: no item passed the filter (issue 48 survivor 4), or
     * each body that ran stopped at a break or continue (its compiled loop clears the mark at the body's end) */
    bool completed = false;
    for (int32_t i = 0; i < cnt; i++) {
        step(c, n->line);
        assign(c, n->a, items.u.l->v[i], ls);
        scope_set(c, ls, "loop", loop_var(c, i, cnt, items));
        exec(c, n->d, ls);
        if (c->brk == 1) { c->brk = 0; break; }
        if (!c->brk) completed = true;
        c->brk = 0;
    }
    if (!completed && n->e) exec(c, n->e, s);
}

static void exec(struct ctx *c, struct node *n, struct scope *s) {
    if (++c->depth > c->max_depth) fail_at(c, KVB_ERR_NOMEM, n->line, "statements nested too deeply (more than %d)", c->max_depth);
    E->line = n->line;
    jwork(E, 1);
    switch (n->k) {
    case N_BODY:
        for (int i = 0; i < n->n && !c->brk; i++) exec(c, n->v[i], s);
        break;
    case N_TEXT: jbuf_put(A, E, c->out, n->lit.u.s, n->lit.n); break;
    case N_OUT: {
        jv v = eval(c, n->a, s);
        put_str(c, c->out, v, false, 0);
        break;
    }
    case N_IF:
        for (struct node *b = n; b; b = b->c) {
            if (b->k != N_IF) { exec(c, b, s); break; }
            if (truthy(eval(c, b->a, s))) { exec(c, b->b, s); break; }
        }
        break;
    case N_FOR: exec_for(c, n, s); break;
    case N_SET: assign(c, n->a, eval(c, n->b, s), s); break;
    case N_SETBLK: {
        struct jbuf *saved = c->out, b = {.limit = c->max_out};
        jbuf_put(A, E, &b, "", 0);
        c->out = &b;
        exec(c, n->d, s);
        c->out = saved;
        scope_set(c, s, n->a->name, (jv){.t = JV_STR, .n = b.n, .u.s = b.p});
        break;
    }
    case N_MACRO: {
        struct jmacro *m = jarena_alloc(A, E, sizeof *m);
        m->def = n;
        m->closure = s;
        scope_set(c, s, n->name, (jv){.t = JV_MACRO, .u.m = m});
        break;
    }
    case N_CALLBLK: {
        struct jmacro *m = jarena_alloc(A, E, sizeof *m);
        m->def = n;
        m->closure = s;
        struct node *call = n->a;
        jv f = eval(c, call->a, s);
        if (f.t != JV_MACRO) fail_at(c, KVB_ERR_INVALID, n->line, "'call' needs a macro");
        struct args a;
        eval_args(c, call, s, &a, 0);
        a.what = "call";
        jv r = call_macro(c, f.u.m, &a, (jv){.t = JV_MACRO, .u.m = m});
        jbuf_put(A, E, c->out, r.u.s, r.n);
        break;
    }
    case N_BREAK: c->brk = 1; break;
    case N_CONT: c->brk = 2; break;
    default: fail_at(c, KVB_ERR_INVALID, n->line, "internal: bad statement node %d", n->k);
    }
    c->depth--;
}

/* ------------------------------------------------------------ entry */

static kvb_status render(struct ctx *c, const struct jinja_input *in, struct jbuf *out) {
    /* newlines normalised (\r\n, \r -> \n), one trailing newline dropped */
    char *src = jarena_alloc(A, E, in->src_len + 1);
    size_t n = 0;
    for (size_t i = 0; i < in->src_len; i++) {
        char ch = in->src[i];
        if (ch == '\r') {
            if (i + 1 < in->src_len && in->src[i + 1] == '\n') i++;
            ch = '\n';
        }
        src[n++] = ch;
    }
    if (n && src[n - 1] == '\n') n--;
    src[n] = 0;
    lex(c, src, n);
    c->ti = 0;
    struct node *body = p_body(c, NULL, NULL);
    struct scope *g = new_scope(c, NULL);
    scope_set(c, g, "range", (jv){.t = JV_BUILTIN, .u.fn = B_RANGE});
    scope_set(c, g, "namespace", (jv){.t = JV_BUILTIN, .u.fn = B_NAMESPACE});
    scope_set(c, g, "raise_exception", (jv){.t = JV_BUILTIN, .u.fn = B_RAISE});
    scope_set(c, g, "strftime_now", (jv){.t = JV_BUILTIN, .u.fn = B_STRFTIME});
    scope_set(c, g, "dict", (jv){.t = JV_BUILTIN, .u.fn = B_DICT});
    struct scope *vars = new_scope(c, g);
    for (int i = 0; i < in->n_vars; i++) {
        if (!in->json[i]) continue;
        char what[96];
        snprintf(what, sizeof what, "variable '%s'", in->names[i]);
        scope_set(c, vars, in->names[i], jjson_parse(A, E, what, in->json[i], strlen(in->json[i]), c->max_depth));
    }
    if (in->vars_object) {
        jv o = jjson_parse(A, E, "extra variables", in->vars_object, strlen(in->vars_object), c->max_depth);
        if (o.t != JV_DICT) jerr_throw(E, KVB_ERR_INVALID, "extra variables: a JSON object expected");
        for (int32_t i = 0; i < o.u.d->n; i++) jv_dict_set(A, E, vars->vars, o.u.d->k[i], o.u.d->v[i]);
    }
    struct scope *top = new_scope(c, vars);
    c->out = out;
    jbuf_put(A, E, out, "", 0);
    exec(c, body, top);
    return KVB_OK;
}

kvb_status jinja_render(const struct jinja_input *in, char **out, size_t *len, char *msg, size_t msg_cap) {
    if (msg && msg_cap) msg[0] = 0;
    if (!in || !in->src || !out) return KVB_ERR_INVALID;
    *out = NULL;
    if (len) *len = 0;
    struct jinja_limits lim = {16u << 20, 256u << 20, 200, 1000000, 2000};
    if (in->limits) {
        if (in->limits->max_output) lim.max_output = in->limits->max_output;
        if (in->limits->max_memory) lim.max_memory = in->limits->max_memory;
        if (in->limits->max_depth > 0) lim.max_depth = in->limits->max_depth;
        if (in->limits->max_steps > 0) lim.max_steps = KVB_MIN(in->limits->max_steps, INT64_MAX / JWORK_STEP);
        if (in->limits->deadline_ms) lim.deadline_ms = in->limits->deadline_ms;
    }
    struct ctx *c = kvb_calloc(1, sizeof *c);
    if (!c) return KVB_ERR_NOMEM;
    c->ar.limit = lim.max_memory;
    c->max_out = lim.max_output;
    c->max_depth = lim.max_depth;
    c->err.max_depth = lim.max_depth;
    c->err.max_work = lim.max_steps * JWORK_STEP;
    if (lim.deadline_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        c->err.deadline_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + (int64_t)lim.deadline_ms * 1000000;
        c->err.deadline_ms = lim.deadline_ms;
    }
    struct jbuf *ob = kvb_calloc(1, sizeof *ob);
    kvb_status st = ob ? KVB_OK : KVB_ERR_NOMEM;
    if (ob && !setjmp(c->err.jb)) {
        ob->limit = lim.max_output;
        st = render(c, in, ob);
        char *r = kvb_malloc(ob->n + 1);
        if (!r) st = KVB_ERR_NOMEM;
        else {
            if (ob->n) memcpy(r, ob->p, ob->n);
            r[ob->n] = 0;
            *out = r;
            if (len) *len = ob->n;
        }
    } else if (ob) {
        st = c->err.st;
        if (msg && msg_cap) snprintf(msg, msg_cap, "%s", c->err.msg);
    }
    jarena_free(&c->ar);
    kvb_free(ob);
    kvb_free(c);
    return st;
}

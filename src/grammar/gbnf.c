/*
 * gbnf.c — llama.cpp's GBNF text to a compiled grammar (grammar.h).
 *
 * A recursive-descent parser over the text, in llama.cpp's layout rules: a
 * rule is `name ::= alternatives`, a newline ends it except inside
 * parentheses, `#` starts a comment. Every group and repetition becomes a
 * generated rule named after the rule it appears in ("value_3"): x* is
 * R ::= x R | (nothing), x+ is x R, x? is R ::= x | (nothing), x{m,n} is m
 * copies of x and a chain of n - m nested optionals. Elements of the rule
 * being parsed sit on a scratch stack (alternatives separated by a marker)
 * and move to the element array when the rule or group is complete, so
 * nested groups never interleave with their parent.
 *
 * After the text: every referenced rule must be defined, the start rule
 * must exist, and no rule may reach itself before reading a byte (left
 * recursion, also through rules that may match nothing; a repetition of
 * something that can be empty is that case, named as such). Nullability is
 * a linear worklist; the cycle search an iterative depth-first search.
 *
 * Errors unwind with longjmp to kvb_grammar_parse; every buffer is in the
 * parser context and freed there, so a failure leaks nothing and *out is
 * untouched. Limits (grammar.h) bound text, rules, elements, nesting and
 * repetition counts.
 */
#include "grammar.h"

#include <setjmp.h>
#include <stdio.h>

#define SEP 0xFFFFFFFFu /* separates alternatives on the scratch stack */

struct rinfo {
    char *name;
    int32_t first_alt, n_alts; /* into p->alts, once defined */
    bool defined, generated, repeat; /* repeat: the R of x* / x+ / x{m,} */
    int32_t origin;           /* user rule it was generated in (itself if not generated) */
    uint32_t line, col;       /* definition, or first reference while undefined */
};

struct gp {
    jmp_buf jb;
    kvb_status st;
    char msg[320];
    const char *src, *p, *end;
    int depth;
    struct rinfo *rules;
    int64_t n_rules, cap_rules;
    int32_t *hash; /* name -> rule, -1 empty */
    uint32_t hash_cap;
    uint32_t *scratch;
    int64_t n_scratch, cap_scratch;
    uint32_t *elems;
    int64_t n_elems, cap_elems;
    uint32_t *alts; /* start of every alternative, in commit order */
    int64_t n_alts, cap_alts;
    struct kvb_gset *sets;
    int64_t n_sets, cap_sets;
    uint32_t *ranges;
    int64_t n_ranges, cap_ranges; /* in uint32 units */
    int32_t ascii_set[128];       /* set of one ASCII character, or -1 */
    int32_t cur_rule;             /* user rule being parsed */
    /* after the text (here, not locals, so a longjmp cannot lose them) */
    bool *nullable;
    int32_t *ints;
    uint8_t *color;
    uint32_t *stk_pos;
    struct kvb_grammar *g;
    const char *root;
    const char *w_at, *w_ls;      /* where(): the furthest position asked, the start of its line */
    uint32_t w_line;              /* and its line */
    uint64_t work;                /* bytes where() scanned and hash probes: the compile's work, for tests */
};

/* Line and column of at. The parser asks for positions that mostly move
 * forward, so the scan resumes from the furthest one asked (p->w_at, on the
 * line starting at p->w_ls): linear in the text overall, not in text x
 * rules. A position behind it (a group's '(' asked after the groups inside
 * it) counts back from there, over the group's own bytes only. */
static void where(struct gp *p, const char *at, uint32_t *line, uint32_t *col) {
    if (at > p->end) at = p->end;
    if (at < p->src) at = p->src;
    if (!p->w_at) { p->w_at = p->w_ls = p->src; p->w_line = 1; }
    if (at >= p->w_at) {
        for (const char *q = p->w_at; q < at; q++)
            if (*q == '\n') { p->w_line++; p->w_ls = q + 1; }
        p->work += (uint64_t)(at - p->w_at);
        p->w_at = at;
        *line = p->w_line;
        *col = (uint32_t)(at - p->w_ls) + 1;
        return;
    }
    uint32_t l = p->w_line;
    const char *ls = p->w_ls;
    if (at < ls) {
        for (const char *q = at; q < p->w_ls; q++) l -= *q == '\n';
        ls = at;
        while (ls > p->src && ls[-1] != '\n') ls--;
        p->work += (uint64_t)(p->w_ls - ls);
    }
    *line = l;
    *col = (uint32_t)(at - ls) + 1;
}

static _Noreturn KVB_PRINTF(3, 4) void fail_at(struct gp *p, const char *at, const char *fmt, ...) {
    uint32_t line, col;
    where(p, at, &line, &col);
    int k = snprintf(p->msg, sizeof p->msg, "grammar: line %u, column %u: ", line, col);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->msg + k, sizeof p->msg - (size_t)k, fmt, ap);
    va_end(ap);
    p->st = KVB_ERR_INVALID;
    longjmp(p->jb, 1);
}

static _Noreturn KVB_PRINTF(3, 4) void fail(struct gp *p, kvb_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(p->msg, sizeof p->msg, "grammar: ");
    vsnprintf(p->msg + k, sizeof p->msg - (size_t)k, fmt, ap);
    va_end(ap);
    p->st = st;
    longjmp(p->jb, 1);
}

static void grow(struct gp *p, void **a, int64_t *cap, int64_t need, size_t elem) {
    if (need > *cap && kvb_grow(a, cap, need, elem) != KVB_OK) fail(p, KVB_ERR_NOMEM, "out of memory");
}

/* scratch + i (no arithmetic on NULL while it is still empty) */
static uint32_t *sc_at(struct gp *p, int64_t i) { return p->scratch ? p->scratch + i : NULL; }

static void push_scratch(struct gp *p, uint32_t x) {
    if (p->n_scratch >= KVB_GRAMMAR_MAX_ELEMS) fail_at(p, p->p, "grammar too large (more than %d elements)", KVB_GRAMMAR_MAX_ELEMS);
    grow(p, (void **)&p->scratch, &p->cap_scratch, p->n_scratch + 1, sizeof *p->scratch);
    p->scratch[p->n_scratch++] = x;
}

/* ---- rules by name ---- */

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static void hash_insert(struct gp *p, int32_t id) {
    const char *nm = p->rules[id].name;
    uint32_t h = name_hash(nm, strlen(nm)) & (p->hash_cap - 1);
    while (p->hash[h] >= 0) h = (h + 1) & (p->hash_cap - 1);
    p->hash[h] = id;
}

static int32_t new_rule(struct gp *p, const char *name, size_t n, const char *at) {
    if (p->n_rules >= KVB_GRAMMAR_MAX_RULES) fail_at(p, at, "more than %d rules", KVB_GRAMMAR_MAX_RULES);
    grow(p, (void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof *p->rules);
    if ((uint64_t)(p->n_rules + 1) * 2 > p->hash_cap) {
        uint32_t cap = p->hash_cap ? p->hash_cap * 2 : 256;
        int32_t *h = kvb_malloc(sizeof *h * cap);
        if (!h) fail(p, KVB_ERR_NOMEM, "out of memory");
        kvb_free(p->hash);
        p->hash = h;
        p->hash_cap = cap;
        for (uint32_t i = 0; i < cap; i++) h[i] = -1;
        for (int32_t i = 0; i < (int32_t)p->n_rules; i++) hash_insert(p, i);
    }
    struct rinfo *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->name = kvb_malloc(n + 1);
    if (!r->name) fail(p, KVB_ERR_NOMEM, "out of memory");
    memcpy(r->name, name, n);
    r->name[n] = 0;
    r->origin = (int32_t)p->n_rules;
    where(p, at, &r->line, &r->col);
    int32_t id = (int32_t)p->n_rules++;
    hash_insert(p, id);
    return id;
}

static int32_t find_rule(struct gp *p, const char *name, size_t n) {
    if (!p->hash_cap) return -1;
    uint32_t h = name_hash(name, n) & (p->hash_cap - 1);
    for (; p->hash[h] >= 0; h = (h + 1) & (p->hash_cap - 1)) {
        p->work++;
        const char *nm = p->rules[p->hash[h]].name;
        if (strlen(nm) == n && !memcmp(nm, name, n)) return p->hash[h];
    }
    return -1;
}

static int32_t gen_rule(struct gp *p, const char *at) {
    char nm[96];
    const char *base = p->rules[p->cur_rule].name;
    for (int k = (int)p->n_rules;; k++) {
        int len = snprintf(nm, sizeof nm, "%.64s_%d", base, k);
        if (find_rule(p, nm, (size_t)len) < 0) {
            int32_t id = new_rule(p, nm, (size_t)len, at);
            p->rules[id].generated = true;
            p->rules[id].origin = p->cur_rule;
            return id;
        }
    }
}

/* Moves syms[0..n) (alternatives split by SEP) into the element array as rule id's body. */
static void commit_rule(struct gp *p, int32_t id, const uint32_t *syms, int64_t n) {
    int64_t n_alt = 1;
    for (int64_t i = 0; i < n; i++) n_alt += syms[i] == SEP;
    if (p->n_elems + n + 1 > KVB_GRAMMAR_MAX_ELEMS) fail(p, KVB_ERR_INVALID, "grammar too large (more than %d elements)", KVB_GRAMMAR_MAX_ELEMS);
    grow(p, (void **)&p->elems, &p->cap_elems, p->n_elems + n + 1, sizeof *p->elems);
    grow(p, (void **)&p->alts, &p->cap_alts, p->n_alts + n_alt, sizeof *p->alts);
    p->rules[id].first_alt = (int32_t)p->n_alts;
    p->rules[id].n_alts = (int32_t)n_alt;
    p->rules[id].defined = true;
    p->alts[p->n_alts++] = (uint32_t)p->n_elems;
    for (int64_t i = 0; i < n; i++) {
        if (syms[i] == SEP) {
            p->elems[p->n_elems++] = G_MAKE(G_END, 0);
            p->alts[p->n_alts++] = (uint32_t)p->n_elems;
        } else p->elems[p->n_elems++] = syms[i];
    }
    p->elems[p->n_elems++] = G_MAKE(G_END, 0);
}

/* ---- character sets ---- */

/* ranges: pairs, any order, may overlap; negate: the complement over 0..0x10FFFF. */
static uint32_t add_set(struct gp *p, uint32_t *r, int64_t n, bool negate) {
    /* sort pairs (insertion sort: classes are short) and merge */
    for (int64_t i = 1; i < n; i++) {
        uint32_t lo = r[2 * i], hi = r[2 * i + 1];
        int64_t j = i - 1;
        while (j >= 0 && r[2 * j] > lo) { r[2 * j + 2] = r[2 * j]; r[2 * j + 3] = r[2 * j + 1]; j--; }
        r[2 * j + 2] = lo;
        r[2 * j + 3] = hi;
    }
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (m && r[2 * i] <= r[2 * m - 1] + 1) { if (r[2 * i + 1] > r[2 * m - 1]) r[2 * m - 1] = r[2 * i + 1]; }
        else { r[2 * m] = r[2 * i]; r[2 * m + 1] = r[2 * i + 1]; m++; }
    }
    if (p->n_sets >= KVB_GRAMMAR_MAX_ELEMS) fail(p, KVB_ERR_INVALID, "grammar too large");
    grow(p, (void **)&p->sets, &p->cap_sets, p->n_sets + 1, sizeof *p->sets);
    grow(p, (void **)&p->ranges, &p->cap_ranges, p->n_ranges + 2 * m + 2, sizeof *p->ranges);
    struct kvb_gset *s = &p->sets[p->n_sets];
    memset(s, 0, sizeof *s);
    s->first = (uint32_t)(p->n_ranges / 2);
    uint32_t *out = p->ranges + p->n_ranges;
    uint32_t k = 0;
    if (!negate) {
        for (int64_t i = 0; i < m; i++) { out[2 * k] = r[2 * i]; out[2 * k + 1] = r[2 * i + 1]; k++; }
    } else {
        uint32_t next = 0;
        for (int64_t i = 0; i < m; i++) {
            if (r[2 * i] > next) { out[2 * k] = next; out[2 * k + 1] = r[2 * i] - 1; k++; }
            next = r[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) { out[2 * k] = next; out[2 * k + 1] = 0x10FFFF; k++; }
    }
    s->n = k;
    p->n_ranges += 2 * k;
    for (uint32_t i = 0; i < k; i++)
        for (uint32_t c = out[2 * i]; c <= out[2 * i + 1] && c < 128; c++) s->ascii[c >> 5] |= 1u << (c & 31);
    return (uint32_t)p->n_sets++;
}

static uint32_t char_set(struct gp *p, uint32_t c) {
    if (c < 128 && p->ascii_set[c] >= 0) return (uint32_t)p->ascii_set[c];
    uint32_t r[2] = {c, c};
    uint32_t s = add_set(p, r, 1, false);
    if (c < 128) p->ascii_set[c] = (int32_t)s;
    return s;
}

/* ---- lexing ---- */

static bool word_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

static void skip_space(struct gp *p, bool newline_ok) {
    while (p->p < p->end) {
        char c = *p->p;
        if (c == '#') {
            while (p->p < p->end && *p->p != '\n' && *p->p != '\r') p->p++;
        } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) p->p++;
        else break;
    }
}

static uint32_t hex_n(struct gp *p, int n) {
    const char *at = p->p;
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        if (p->p >= p->end) fail_at(p, at, "expected %d hex digits", n);
        char c = *p->p;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) fail_at(p, p->p, "expected %d hex digits", n);
        v = v * 16 + (uint32_t)d;
        p->p++;
    }
    if (v > 0x10FFFF) fail_at(p, at, "code point U+%X out of range", v);
    return v;
}

/* One character of a literal or class (escapes decoded, UTF-8 read). */
static uint32_t read_char(struct gp *p) {
    const char *at = p->p;
    if (p->p >= p->end) fail_at(p, at, "unexpected end of text");
    uint8_t b = (uint8_t)*p->p++;
    if (b == '\\') {
        if (p->p >= p->end) fail_at(p, at, "unexpected end of text after '\\'");
        char c = *p->p++;
        switch (c) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'x': return hex_n(p, 2);
        case 'u': return hex_n(p, 4);
        case 'U': return hex_n(p, 8);
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.': return (uint8_t)c;
        default: fail_at(p, at, "unknown escape '\\%c'", c);
        }
    }
    if (b < 0x80) return b;
    int need = b >= 0xC2 && b <= 0xDF ? 1 : b >= 0xE0 && b <= 0xEF ? 2 : b >= 0xF0 && b <= 0xF4 ? 3 : -1;
    if (need < 0) fail_at(p, at, "invalid UTF-8");
    uint32_t cp = b & (0x3Fu >> need);
    for (int i = 0; i < need; i++) {
        if (p->p >= p->end || ((uint8_t)*p->p & 0xC0) != 0x80) fail_at(p, at, "invalid UTF-8");
        cp = cp << 6 | ((uint8_t)*p->p++ & 0x3F);
    }
    if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
        fail_at(p, at, "invalid UTF-8");
    return cp;
}

/* ---- parser ---- */

static void parse_alternatives(struct gp *p, bool nested);

/* Replaces scratch[from..) (one term) by a reference to a new rule made of it. */
static void wrap_term(struct gp *p, int64_t from, const char *at) {
    if (p->n_scratch - from == 1) return;
    int32_t id = gen_rule(p, at);
    commit_rule(p, id, sc_at(p, from), p->n_scratch - from);
    p->n_scratch = from;
    push_scratch(p, G_MAKE(G_REF, id));
}

static void repeat_term(struct gp *p, int64_t from, uint32_t min, uint32_t max /* UINT32_MAX: unbounded */, const char *at) {
    wrap_term(p, from, at);
    uint32_t x = p->scratch[--p->n_scratch];
    for (uint32_t i = 0; i < min; i++) push_scratch(p, x);
    if (max == UINT32_MAX) {
        int32_t r = gen_rule(p, at);
        p->rules[r].repeat = true;
        uint32_t body[3] = {x, G_MAKE(G_REF, r), SEP};
        commit_rule(p, r, body, 3);
        push_scratch(p, G_MAKE(G_REF, r));
    } else if (max > min) {
        int32_t prev = -1;
        for (uint32_t k = 0; k < max - min; k++) {
            int32_t r = gen_rule(p, at);
            uint32_t body[3] = {x, prev >= 0 ? G_MAKE(G_REF, prev) : SEP, SEP};
            commit_rule(p, r, body, prev >= 0 ? 3 : 2);
            prev = r;
        }
        push_scratch(p, G_MAKE(G_REF, prev));
    }
}

static uint32_t read_count(struct gp *p) {
    const char *at = p->p;
    uint32_t v = 0;
    if (p->p >= p->end || *p->p < '0' || *p->p > '9') fail_at(p, at, "expected a number in {}");
    while (p->p < p->end && *p->p >= '0' && *p->p <= '9') {
        v = v * 10 + (uint32_t)(*p->p++ - '0');
        if (v > KVB_GRAMMAR_MAX_REPEAT) fail_at(p, at, "repetition count above %d", KVB_GRAMMAR_MAX_REPEAT);
    }
    return v;
}

static void parse_sequence(struct gp *p, bool nested) {
    int64_t last = -1; /* where the last term starts on the scratch stack */
    while (p->p < p->end) {
        const char *at = p->p;
        char c = *p->p;
        if (c == '"') {
            p->p++;
            last = p->n_scratch;
            while (p->p < p->end && *p->p != '"') push_scratch(p, G_MAKE(G_SET, char_set(p, read_char(p))));
            if (p->p >= p->end) fail_at(p, at, "unterminated literal");
            p->p++;
            if (p->n_scratch == last) { /* "" matches nothing: an empty group */
                int32_t r = gen_rule(p, at);
                commit_rule(p, r, NULL, 0);
                push_scratch(p, G_MAKE(G_REF, r));
            }
        } else if (c == '[') {
            p->p++;
            bool neg = p->p < p->end && *p->p == '^';
            if (neg) p->p++;
            int64_t n = 0;
            /* the ranges go on the scratch stack above its top, then come off */
            int64_t base = p->n_scratch;
            while (p->p < p->end && *p->p != ']') {
                uint32_t lo = read_char(p), hi = lo;
                if (p->p + 1 < p->end && *p->p == '-' && p->p[1] != ']') {
                    p->p++;
                    hi = read_char(p);
                    if (hi < lo) fail_at(p, at, "character range out of order");
                }
                push_scratch(p, lo);
                push_scratch(p, hi);
                n++;
            }
            if (p->p >= p->end) fail_at(p, at, "unterminated character class");
            p->p++;
            uint32_t s = add_set(p, sc_at(p, base), n, neg);
            p->n_scratch = base;
            last = p->n_scratch;
            push_scratch(p, G_MAKE(G_SET, s));
        } else if (c == '.') {
            p->p++;
            uint32_t r[2] = {0, 0x10FFFF};
            last = p->n_scratch;
            push_scratch(p, G_MAKE(G_SET, add_set(p, r, 1, false)));
        } else if (word_char(c)) {
            const char *s = p->p;
            while (p->p < p->end && word_char(*p->p)) p->p++;
            int32_t id = find_rule(p, s, (size_t)(p->p - s));
            if (id < 0) id = new_rule(p, s, (size_t)(p->p - s), s);
            last = p->n_scratch;
            push_scratch(p, G_MAKE(G_REF, id));
        } else if (c == '(') {
            p->p++;
            if (++p->depth > KVB_GRAMMAR_MAX_NEST) fail_at(p, at, "parentheses nested deeper than %d", KVB_GRAMMAR_MAX_NEST);
            skip_space(p, true);
            int64_t from = p->n_scratch;
            parse_alternatives(p, true);
            if (p->p >= p->end || *p->p != ')') fail_at(p, at, "expected ')' to close this '('");
            p->p++;
            p->depth--;
            int32_t r = gen_rule(p, at);
            commit_rule(p, r, sc_at(p, from), p->n_scratch - from);
            p->n_scratch = from;
            last = p->n_scratch;
            push_scratch(p, G_MAKE(G_REF, r));
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) fail_at(p, at, "'%c' without an item before it", c);
            p->p++;
            if (c == '*') repeat_term(p, last, 0, UINT32_MAX, at);
            else if (c == '+') repeat_term(p, last, 1, UINT32_MAX, at);
            else if (c == '?') repeat_term(p, last, 0, 1, at);
            else {
                skip_space(p, nested);
                uint32_t lo = read_count(p), hi = lo;
                skip_space(p, nested);
                if (p->p < p->end && *p->p == ',') {
                    p->p++;
                    skip_space(p, nested);
                    hi = p->p < p->end && *p->p >= '0' && *p->p <= '9' ? read_count(p) : UINT32_MAX;
                    skip_space(p, nested);
                }
                if (p->p >= p->end || *p->p != '}') fail_at(p, p->p, "expected '}'");
                p->p++;
                if (hi < lo) fail_at(p, at, "repetition {%u,%u}: maximum below minimum", lo, hi);
                repeat_term(p, last, lo, hi, at);
            }
            last = -1;
        } else break;
        skip_space(p, nested);
    }
}

static void parse_alternatives(struct gp *p, bool nested) {
    parse_sequence(p, nested);
    while (p->p < p->end && *p->p == '|') {
        p->p++;
        push_scratch(p, SEP);
        skip_space(p, true);
        parse_sequence(p, nested);
    }
}

static void parse_rule(struct gp *p) {
    const char *at = p->p;
    while (p->p < p->end && word_char(*p->p)) p->p++;
    if (p->p == at) fail_at(p, at, "expected a rule name");
    size_t n = (size_t)(p->p - at);
    int32_t id = find_rule(p, at, n);
    if (id < 0) id = new_rule(p, at, n, at);
    else if (p->rules[id].defined) fail_at(p, at, "rule '%s' defined twice (first at line %u)", p->rules[id].name, p->rules[id].line);
    where(p, at, &p->rules[id].line, &p->rules[id].col);
    skip_space(p, false);
    if (p->end - p->p < 3 || memcmp(p->p, "::=", 3)) fail_at(p, p->p, "expected '::=' after rule name '%s'", p->rules[id].name);
    p->p += 3;
    skip_space(p, true);
    p->cur_rule = id;
    int64_t from = p->n_scratch;
    parse_alternatives(p, false);
    commit_rule(p, id, sc_at(p, from), p->n_scratch - from);
    p->n_scratch = from;
    if (p->p < p->end) {
        if (*p->p == '\r') p->p += (p->p + 1 < p->end && p->p[1] == '\n') ? 2 : 1;
        else if (*p->p == '\n') p->p++;
        else fail_at(p, p->p, "unexpected '%c' in rule '%s'", *p->p, p->rules[id].name);
    }
    skip_space(p, true);
}

/* ---- checks ---- */

static void check_left_recursion(struct gp *p, bool *nullable, int32_t *cnt, int32_t *occ_off, int32_t *occ, int32_t *alt_rule,
                                 int32_t *work, uint8_t *color, int32_t *stk_rule, int32_t *stk_alt, uint32_t *stk_pos) {
    const int32_t nr = (int32_t)p->n_rules, na = (int32_t)p->n_alts;
    /* nullable: an alternative counts its elements not yet known nullable (a set never is) */
    for (int32_t r = 0; r < nr; r++)
        for (int32_t a = p->rules[r].first_alt; a < p->rules[r].first_alt + p->rules[r].n_alts; a++) alt_rule[a] = r;
    for (int32_t r = 0; r <= nr; r++) occ_off[r] = 0;
    for (int32_t a = 0; a < na; a++) {
        cnt[a] = 0;
        for (uint32_t e = p->alts[a]; G_KIND(p->elems[e]) != G_END; e++) {
            cnt[a]++;
            if (G_KIND(p->elems[e]) == G_REF) occ_off[G_ARG(p->elems[e]) + 1]++;
        }
    }
    for (int32_t r = 0; r < nr; r++) occ_off[r + 1] += occ_off[r];
    {
        int32_t *fill = work; /* scratch use of work[0..nr) */
        for (int32_t r = 0; r < nr; r++) fill[r] = occ_off[r];
        for (int32_t a = 0; a < na; a++)
            for (uint32_t e = p->alts[a]; G_KIND(p->elems[e]) != G_END; e++)
                if (G_KIND(p->elems[e]) == G_REF) occ[fill[G_ARG(p->elems[e])]++] = a;
    }
    int32_t nw = 0;
    for (int32_t r = 0; r < nr; r++) nullable[r] = false;
    for (int32_t a = 0; a < na; a++)
        if (cnt[a] == 0 && !nullable[alt_rule[a]]) { nullable[alt_rule[a]] = true; work[nw++] = alt_rule[a]; }
    while (nw) {
        int32_t r = work[--nw];
        for (int32_t k = occ_off[r]; k < occ_off[r + 1]; k++) {
            int32_t a = occ[k];
            if (--cnt[a] == 0 && !nullable[alt_rule[a]]) { nullable[alt_rule[a]] = true; work[nw++] = alt_rule[a]; }
        }
    }
    /* a reference reached before any byte: an edge; a cycle of them is left recursion */
    for (int32_t r = 0; r < nr; r++) color[r] = 0;
    for (int32_t s = 0; s < nr; s++) {
        if (color[s]) continue;
        int32_t sp = 0;
        stk_rule[0] = s;
        stk_alt[0] = p->rules[s].first_alt;
        stk_pos[0] = p->rules[s].n_alts ? p->alts[stk_alt[0]] : 0;
        color[s] = 1;
        while (sp >= 0) {
            int32_t r = stk_rule[sp];
            const struct rinfo *ri = &p->rules[r];
            if (stk_alt[sp] >= ri->first_alt + ri->n_alts) { color[r] = 2; sp--; continue; }
            uint32_t e = stk_pos[sp];
            uint32_t el = p->elems[e];
            if (G_KIND(el) != G_REF) { /* end of the alternative, or a set: next alternative */
                stk_alt[sp]++;
                if (stk_alt[sp] < ri->first_alt + ri->n_alts) stk_pos[sp] = p->alts[stk_alt[sp]];
                continue;
            }
            int32_t t = (int32_t)G_ARG(el);
            if (nullable[t]) stk_pos[sp] = e + 1;
            else { /* nothing after a non-nullable reference is reached first */
                stk_alt[sp]++;
                if (stk_alt[sp] < ri->first_alt + ri->n_alts) stk_pos[sp] = p->alts[stk_alt[sp]];
            }
            if (color[t] == 1) {
                const struct rinfo *ti = &p->rules[t];
                const struct rinfo *o = &p->rules[ti->origin];
                if (ti->repeat)
                    fail(p, KVB_ERR_INVALID, "rule '%s' (line %u, column %u): a repetition of something that can match the empty string "
                         "(left recursion)", o->name, ti->line, ti->col);
                if (ti->generated)
                    fail(p, KVB_ERR_INVALID, "rule '%s' is left-recursive (through the group at line %u, column %u)", o->name, ti->line, ti->col);
                fail(p, KVB_ERR_INVALID, "rule '%s' is left-recursive (line %u)", ti->name, ti->line);
            }
            if (color[t] == 0) {
                color[t] = 1;
                sp++;
                stk_rule[sp] = t;
                stk_alt[sp] = p->rules[t].first_alt;
                stk_pos[sp] = p->rules[t].n_alts ? p->alts[stk_alt[sp]] : 0;
            }
        }
    }
}

static void gp_free(struct gp *p) {
    for (int64_t i = 0; i < p->n_rules; i++) kvb_free(p->rules[i].name);
    kvb_free(p->rules);
    kvb_free(p->hash);
    kvb_free(p->scratch);
    kvb_free(p->elems);
    kvb_free(p->alts);
    kvb_free(p->sets);
    kvb_free(p->ranges);
}

void kvb_grammar_free(struct kvb_grammar *g) {
    if (!g) return;
    for (int32_t i = 0; g->names && i < g->n_rules; i++) kvb_free(g->names[i]);
    kvb_free(g->names);
    kvb_free(g->elems);
    kvb_free(g->alts);
    kvb_free(g->rule_alt);
    kvb_free(g->sets);
    kvb_free(g->ranges);
    kvb_free(g);
}

static kvb_status run_parse(struct gp *p);

kvb_status kvb_grammar_parse(const char *gbnf, size_t len, const char *root_name, struct kvb_grammar **out) {
    if (!out || (!gbnf && len)) return kvb_fail(KVB_ERR_INVALID, "kvb_grammar_parse: NULL argument");
    if (len > KVB_GRAMMAR_MAX_TEXT) return kvb_fail(KVB_ERR_INVALID, "grammar: text of %zu bytes (most %zu)", len, KVB_GRAMMAR_MAX_TEXT);
    struct gp *p = kvb_calloc(1, sizeof *p);
    if (!p) return kvb_fail(KVB_ERR_NOMEM, "grammar: out of memory");
    p->src = p->p = gbnf ? gbnf : "";
    p->end = p->src + len;
    p->root = root_name ? root_name : "root";
    for (int i = 0; i < 128; i++) p->ascii_set[i] = -1;
    kvb_status st = run_parse(p);
    struct kvb_grammar *g = p->g;
    kvb_free(p->nullable);
    kvb_free(p->ints);
    kvb_free(p->color);
    kvb_free(p->stk_pos);
    gp_free(p);
    kvb_free(p);
    if (st == KVB_OK) *out = g;
    return st;
}

/* the part that may longjmp: only p lives across it */
static kvb_status run_parse(struct gp *p) {
    if (setjmp(p->jb)) {
        kvb_grammar_free(p->g);
        p->g = NULL;
        return kvb_fail(p->st, "%s", p->msg);
    }
    {
        const char *root = p->root;
        skip_space(p, true);
        while (p->p < p->end) parse_rule(p);
        for (int64_t i = 0; i < p->n_rules; i++)
            if (!p->rules[i].defined)
                fail(p, KVB_ERR_INVALID, "line %u, column %u: undefined rule '%s'", p->rules[i].line, p->rules[i].col, p->rules[i].name);
        int32_t rid = find_rule(p, root, strlen(root));
        if (rid < 0) fail(p, KVB_ERR_INVALID, "no rule '%s' (the start rule)", root);
        const int32_t nr = (int32_t)p->n_rules, na = (int32_t)p->n_alts;
        p->nullable = kvb_calloc((size_t)nr + 1, sizeof *p->nullable);
        p->ints = kvb_calloc((size_t)na * 2 + (size_t)nr * 5 + (size_t)p->n_elems + 8, sizeof *p->ints);
        p->color = kvb_calloc((size_t)nr + 1, 1);
        p->stk_pos = kvb_calloc((size_t)nr + 1, sizeof *p->stk_pos);
        if (!p->nullable || !p->ints || !p->color || !p->stk_pos) fail(p, KVB_ERR_NOMEM, "out of memory");
        int32_t *cnt = p->ints, *alt_rule = cnt + na, *occ_off = alt_rule + na, *work = occ_off + nr + 1, *stk_rule = work + nr + 1,
                *stk_alt = stk_rule + nr + 1, *occ = stk_alt + nr + 1;
        check_left_recursion(p, p->nullable, cnt, occ_off, occ, alt_rule, work, p->color, stk_rule, stk_alt, p->stk_pos);
        /* the compiled grammar */
        struct kvb_grammar *g = p->g = kvb_calloc(1, sizeof *g);
        if (!g) fail(p, KVB_ERR_NOMEM, "out of memory");
        g->n_rules = nr;
        g->compile_work = p->work;
        g->n_elems = (int32_t)p->n_elems;
        g->n_sets = (int32_t)p->n_sets;
        g->root = rid;
        g->elems = p->elems;
        p->elems = NULL;
        g->sets = p->sets;
        p->sets = NULL;
        g->ranges = p->ranges;
        p->ranges = NULL;
        g->alts = kvb_malloc(sizeof *g->alts * (size_t)(na + 1));
        g->rule_alt = kvb_malloc(sizeof *g->rule_alt * (size_t)(nr + 1));
        g->names = kvb_calloc((size_t)nr + 1, sizeof *g->names);
        if (!g->alts || !g->rule_alt || !g->names) fail(p, KVB_ERR_NOMEM, "out of memory");
        int32_t k = 0;
        for (int32_t r = 0; r < nr; r++) {
            g->rule_alt[r] = k;
            for (int32_t a = 0; a < p->rules[r].n_alts; a++) g->alts[k++] = p->alts[p->rules[r].first_alt + a];
            g->names[r] = p->rules[r].name;
            p->rules[r].name = NULL;
        }
        g->rule_alt[nr] = k;
    }
    return KVB_OK;
}

/*
 * grammar.h — the compiled form of a GBNF grammar (gbnf.c builds it,
 * matcher.c runs it, json_schema.c writes the GBNF text it comes from).
 *
 * A grammar is a flat array of elements. Every rule is a list of
 * alternatives; an alternative is a run of elements ending in G_END. An
 * element is a character set (code-point ranges, negations already resolved)
 * or a reference to a rule. Groups and repetitions of the source became
 * generated rules while parsing (x* is R ::= x R | empty), so the matcher
 * only knows sets, references and ends. Left recursion (also through rules
 * that may match nothing) is refused when compiling, so expanding references
 * without reading a byte always terminates.
 */
#ifndef KVB_GRAMMAR_H
#define KVB_GRAMMAR_H

#include "../core/core.h"

#define KVB_GRAMMAR_MAX_TEXT ((size_t)16 << 20)
#define KVB_GRAMMAR_MAX_RULES 16384
#define KVB_GRAMMAR_MAX_ELEMS 2000000
#define KVB_GRAMMAR_MAX_NEST 64
#define KVB_GRAMMAR_MAX_REPEAT 10000
#define KVB_GRAMMAR_MAX_STACK 2048

enum { G_END = 0, G_SET = 1, G_REF = 2 };

/* element: kind in the low 2 bits, argument (set or rule index) above */
#define G_KIND(e) ((e) & 3u)
#define G_ARG(e) ((e) >> 2)
#define G_MAKE(kind, arg) ((uint32_t)(kind) | ((uint32_t)(arg) << 2))

struct kvb_gset {
    uint32_t ascii[4];  /* bitmap of the code points 0..127 */
    uint32_t first, n;  /* ranges[first .. first + n): inclusive [lo, hi] pairs, sorted, disjoint */
};

struct kvb_grammar {
    uint32_t *elems;   /* [n_elems] */
    int32_t n_elems;
    uint32_t *alts;    /* start element of every alternative, rule by rule */
    int32_t *rule_alt; /* [n_rules + 1]: rule r's alternatives are alts[rule_alt[r] .. rule_alt[r + 1]) */
    int32_t n_rules;
    struct kvb_gset *sets;
    int32_t n_sets;
    uint32_t *ranges;  /* [2 * n_ranges] */
    int32_t root;
    char **names;      /* [n_rules] rule names (generated ones: "parent_N") */
    uint64_t compile_work; /* steps the compile took (bytes scanned for positions, name-table probes): linear in the text, for tests */
};

/* Whether code point c is in the set (binary search above ASCII). */
static inline bool kvb_gset_has(const struct kvb_grammar *g, const struct kvb_gset *s, uint32_t c) {
    if (c < 128) return (s->ascii[c >> 5] >> (c & 31)) & 1u;
    const uint32_t *r = g->ranges + 2 * (size_t)s->first;
    uint32_t lo = 0, hi = s->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (r[2 * mid + 1] < c) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->n && r[2 * lo] <= c;
}
/* Whether the set meets [a, b]. */
static inline bool kvb_gset_meets(const struct kvb_grammar *g, const struct kvb_gset *s, uint32_t a, uint32_t b) {
    const uint32_t *r = g->ranges + 2 * (size_t)s->first;
    for (uint32_t i = 0; i < s->n; i++)
        if (r[2 * i] <= b && r[2 * i + 1] >= a) return true;
    return false;
}

#endif

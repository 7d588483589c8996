/*
 * test_grammar.c — constrained decoding (src/grammar): the GBNF parser and
 * its errors, the matcher against an independent backtracking recognizer
 * (written here over code points), the token mask against brute force
 * (each token tried on a clone of the matcher) on a synthetic vocabulary and
 * the shared 32K SentencePiece and GPT-2 vocabularies, and JSON Schema to
 * GBNF: random constrained walks whose every output must parse as JSON and
 * pass the validator written here (POSIX regex for patterns), known-valid
 * documents accepted and known-invalid ones refused, refusals named.
 */
#include "testing.h"
#include "grammar/grammar.h"
#include "chat/jinja.h"
#include "tokenizer/tokenizer.h"

#include <regex.h>
#include <unistd.h>

static uint64_t rng_state = 12345;
static uint32_t rnd(uint32_t n) { return n ? (uint32_t)(kvb_splitmix64(&rng_state) % n) : 0; }

static struct kvb_grammar *parse(const char *text) {
    struct kvb_grammar *g = NULL;
    if (kvb_grammar_parse(text, strlen(text), NULL, &g) != KVB_OK) return NULL;
    return g;
}

/* whether the whole text is accepted and the grammar may end there */
static int match_text(const struct kvb_grammar *g, const char *t, size_t n) {
    struct kvb_matcher *m;
    if (kvb_matcher_new(g, NULL, &m) != KVB_OK) return -1;
    int r = kvb_matcher_accept_bytes(m, t, n) == KVB_OK && kvb_matcher_can_end(m);
    kvb_matcher_free(m);
    return r;
}

/* ---- GBNF parser ---- */

TEST(gbnf_accepts) {
    static const char *ok[] = {
        "root ::= \"a\"",
        "root ::= \"a\" | \"b\" # comment\n",
        "# leading comment\n\nroot ::= x y\nx ::= [a-z]+\ny ::= [^\\n\\]\\\\]* \"\\x41\\u00e9\\U0001F600\"\n",
        "root ::= ( \"a\"\n  | \"b\" )* \"c\"{2} \"d\"{1,} \"e\"{0,3} .?",
        "root ::= \"\"",
        "root ::=",
        "root ::= a\na ::= \"(\" a \")\" | \"\"",
        "root ::= [a-zA-Z_] [a-zA-Z0-9_-]{0,10}",
        "root ::= \"é\" [α-ω] \"\\\"\"",
        "root ::= x\r\nx ::= \"y\"\r\n",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct kvb_grammar *g = parse(ok[i]);
        if (!g) FAILF("refused %s: %s", ok[i], kvb_last_error());
        kvb_grammar_free(g);
    }
    struct kvb_grammar *g = parse("root ::= \"a\" b\nb ::= \"b\"+ | \"c\"");
    CHECK(g);
    CHECK_EQ_INT(match_text(g, "abbb", 4), 1);
    CHECK_EQ_INT(match_text(g, "ac", 2), 1);
    CHECK_EQ_INT(match_text(g, "a", 1), 0);
    CHECK_EQ_INT(match_text(g, "abc", 3), 0);
    kvb_grammar_free(g);
    /* another start rule */
    CHECK_OK(kvb_grammar_parse("x ::= \"1\"\ny ::= \"2\"", 19, "y", &g));
    CHECK_EQ_INT(match_text(g, "2", 1), 1);
    CHECK_EQ_INT(match_text(g, "1", 1), 0);
    kvb_grammar_free(g);
}

TEST(gbnf_refuses) {
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"root ::= foo", "undefined rule 'foo'"},
        {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
        {"root ::= root \"a\"", "rule 'root' is left-recursive"},
        {"root ::= a\na ::= b \"x\"\nb ::= a", "left-recursive"},
        {"root ::= a\na ::= n a \"x\"\nn ::= \"y\"?", "left-recursive"},
        {"root ::= (\"a\"?)*", "repetition of something that can match the empty string"},
        {"root ::= \"abc", "line 1, column 10: unterminated literal"},
        {"root ::= [abc", "unterminated character class"},
        {"root ::= \"\\q\"", "unknown escape"},
        {"root ::= \"a\"\n  x ::= \"b\" )", "line 2, column 13"},
        {"root \"a\"", "expected '::='"},
        {"x ::= \"a\"", "no rule 'root'"},
        {"root ::= *", "without an item"},
        {"root ::= \"a\"{3,2}", "maximum below minimum"},
        {"root ::= \"a\"{10001}", "repetition count above"},
        {"root ::= [z-a]", "out of order"},
        {"root ::= (\"a\"", "expected ')'"},
        {"root ::= \"\\xZZ\"", "hex digits"},
        {"root ::= \"\xff\"", "invalid UTF-8"},
        {"root ::= \"\\U00110000\"", "out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct kvb_grammar *g = (struct kvb_grammar *)1;
        kvb_status st = kvb_grammar_parse(bad[i].text, strlen(bad[i].text), NULL, &g);
        if (st != KVB_ERR_INVALID) FAILF("%s: status %d", bad[i].text, (int)st);
        if (g != (struct kvb_grammar *)1) FAILF("%s: *out changed on failure", bad[i].text);
        if (!strstr(kvb_last_error(), bad[i].want)) FAILF("%s: message '%s' lacks '%s'", bad[i].text, kvb_last_error(), bad[i].want);
    }
}

/* Issue 47: a grammar of many rules compiled in time quadratic in its rules (16,000 rules: 7 s), since every rule's
 * line and column were found by scanning the text from its start. The compile's work is counted (compile_work: bytes
 * scanned for positions and name-table probes) and must stay linear in the text. */
TEST(gbnf_many_rules_linear) {
    const int n = 16000;
    size_t cap = (size_t)n * 40 + 64;
    char *big = malloc(cap);
    CHECK(big);
    size_t k = (size_t)snprintf(big, cap, "root ::= r0\n");
    for (int i = 0; i < n - 1; i++) k += (size_t)snprintf(big + k, cap - k, "r%d ::= \"a\" r%d | \"b\"\n", i, i + 1);
    k += (size_t)snprintf(big + k, cap - k, "r%d ::= \"z\"\n", n - 1);
    struct kvb_grammar *g = NULL;
    kvb_status st = kvb_grammar_parse(big, k, NULL, &g);
    free(big);
    CHECK_OK(st);
    CHECK_EQ_INT(g->n_rules, n + 1);
    uint64_t work = g->compile_work;
    kvb_grammar_free(g);
    if (work > 4 * (uint64_t)k) FAILF("compile work %llu for %zu bytes of text: more than linear", (unsigned long long)work, k);
    CHECK(work >= (uint64_t)k / 2); /* the counter counts */
}

TEST(gbnf_limits) {
    /* nesting */
    char buf[4096];
    int n = snprintf(buf, sizeof buf, "root ::= ");
    for (int i = 0; i < 70; i++) buf[n++] = '(';
    buf[n++] = '"', buf[n++] = 'a', buf[n++] = '"';
    for (int i = 0; i < 70; i++) buf[n++] = ')';
    buf[n] = 0;
    struct kvb_grammar *g = NULL;
    CHECK_STATUS(kvb_grammar_parse(buf, (size_t)n, NULL, &g), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "nested deeper"));
    /* rules */
    size_t cap = 20000 * 24;
    char *big = malloc(cap);
    size_t k = (size_t)snprintf(big, cap, "root ::= r0\n");
    for (int i = 0; i < 17000; i++) k += (size_t)snprintf(big + k, cap - k, "r%d ::= \"x\"\n", i);
    CHECK_STATUS(kvb_grammar_parse(big, k, NULL, &g), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "rules"));
    /* elements: nested bounded repetitions multiply nothing, but the total is capped */
    k = (size_t)snprintf(big, cap, "root ::= ");
    for (int i = 0; i < 300; i++) k += (size_t)snprintf(big + k, cap - k, "[a-z]{10000} ");
    CHECK_STATUS(kvb_grammar_parse(big, k, NULL, &g), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "too large"));
    free(big);
    /* deep matcher stacks are refused, not grown */
    g = parse("root ::= \"(\" root \")\" | \"x\"");
    CHECK(g);
    struct kvb_matcher *m;
    CHECK_OK(kvb_matcher_new(g, NULL, &m));
    kvb_status st = KVB_OK;
    int depth = 0;
    for (; depth < 5000 && st == KVB_OK; depth++) st = kvb_matcher_accept_bytes(m, "(", 1);
    CHECK_STATUS(st, KVB_ERR_INVALID);
    CHECK(depth > 1000 && depth < 3000);
    kvb_matcher_free(m);
    kvb_grammar_free(g);
    /* ambiguity that doubles the parses at every byte is refused by name past a bound, the position unchanged */
    g = parse("root ::= \"(\" root . \")\" | \"(\" root . \"\" | \"\"");
    CHECK(g);
    CHECK_OK(kvb_matcher_new(g, NULL, &m));
    st = KVB_OK;
    for (depth = 0; depth < 40 && st == KVB_OK; depth++) st = kvb_matcher_accept_bytes(m, "(", 1);
    CHECK_STATUS(st, KVB_ERR_UNSUPPORTED);
    CHECK(strstr(kvb_last_error(), "ambiguous"));
    CHECK(depth > 8 && depth < 20);
    CHECK_OK(kvb_matcher_accept_bytes(m, "x", 1));
    kvb_matcher_free(m);
    kvb_grammar_free(g);
}

/* ---- the reference recognizer: backtracking over code points on the compiled grammar ---- */

struct ref {
    const struct kvb_grammar *g;
    const uint32_t *cp;
    int n;
    bool prefix; /* succeed when the input runs out while the grammar still expects more */
    long budget;
};

static bool ref_run(struct ref *r, uint32_t *stack, int sp, int i) {
    if (--r->budget < 0) return false;
    if (sp > 250) return false;
    if (sp == 0) return i == r->n;
    uint32_t pos = stack[sp - 1];
    uint32_t e = r->g->elems[pos];
    if (G_KIND(e) == G_END) return ref_run(r, stack, sp - 1, i);
    if (G_KIND(e) == G_SET) {
        if (i == r->n) return r->prefix;
        if (!kvb_gset_has(r->g, &r->g->sets[G_ARG(e)], r->cp[i])) return false;
        stack[sp - 1] = pos + 1;
        bool ok = ref_run(r, stack, sp, i + 1);
        stack[sp - 1] = pos;
        return ok;
    }
    /* every slot a frame writes is restored when it returns (frames reached by popping write into their callers' slots) */
    const uint32_t above = stack[sp];
    bool ok = false;
    for (int32_t a = r->g->rule_alt[G_ARG(e)]; a < r->g->rule_alt[G_ARG(e) + 1] && !ok; a++) {
        stack[sp - 1] = pos + 1;
        stack[sp] = r->g->alts[a];
        ok = ref_run(r, stack, sp + 1, i);
    }
    stack[sp - 1] = pos;
    stack[sp] = above;
    return ok;
}

/* 1 / 0, or -1 when the budget ran out */
static int ref_match(const struct kvb_grammar *g, const uint32_t *cp, int n, bool prefix) {
    struct ref r = {g, cp, n, prefix, 2000000};
    uint32_t stack[256];
    bool ok = false;
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1] && !ok; a++) {
        stack[0] = g->alts[a];
        ok = ref_run(&r, stack, 1, 0);
    }
    return r.budget < 0 ? -1 : ok;
}

static size_t utf8_put(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | c >> 6); o[1] = (char)(0x80 | (c & 63)); return 2; }
    if (c < 0x10000) { o[0] = (char)(0xE0 | c >> 12); o[1] = (char)(0x80 | ((c >> 6) & 63)); o[2] = (char)(0x80 | (c & 63)); return 3; }
    o[0] = (char)(0xF0 | c >> 18); o[1] = (char)(0x80 | ((c >> 12) & 63)); o[2] = (char)(0x80 | ((c >> 6) & 63)); o[3] = (char)(0x80 | (c & 63));
    return 4;
}

static const uint32_t k_alpha[] = {'a', 'b', 'c', 'd', 0xE9 /* é */, 0x20AC /* € */, 0x1F600 /* 😀 */};
static const char *const k_alpha_text[] = {"a", "b", "c", "d", "é", "€", "😀"};
#define N_ALPHA 7

/* a random grammar over the alphabet: rules r0..r4, references to later rules anywhere, to any rule after a literal */
static void rand_seq(char *b, size_t *k, size_t cap, int rule, int depth) {
    int n = (int)rnd(4);
    bool guarded = false;
    for (int i = 0; i < n; i++) {
        int kind = (int)rnd(depth > 2 ? 3 : 5);
        if (kind == 0) { *k += (size_t)snprintf(b + *k, cap - *k, "\"%s\" ", k_alpha_text[rnd(N_ALPHA)]); guarded = true; }
        else if (kind == 1) {
            static const char *cls[] = {"[a-b]", "[^a]", "[a-cé]", "[€-😀]", "[^b-d€]", "."};
            *k += (size_t)snprintf(b + *k, cap - *k, "%s ", cls[rnd(6)]);
            guarded = true;
        } else if (kind == 2) {
            int t = guarded ? (int)rnd(5) : rule + 1 + (int)rnd(5 - (unsigned)rule);
            if (t < 5) *k += (size_t)snprintf(b + *k, cap - *k, "r%d ", t);
            else { *k += (size_t)snprintf(b + *k, cap - *k, "\"a\" "); guarded = true; }
        } else {
            *k += (size_t)snprintf(b + *k, cap - *k, "(");
            rand_seq(b, k, cap, rule, depth + 1);
            if (rnd(2)) { *k += (size_t)snprintf(b + *k, cap - *k, "| "); rand_seq(b, k, cap, rule, depth + 1); }
            *k += (size_t)snprintf(b + *k, cap - *k, ")");
            static const char *q[] = {"", "*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}"};
            *k += (size_t)snprintf(b + *k, cap - *k, "%s ", q[rnd(8)]);
        }
    }
}

static void rand_grammar(char *b, size_t cap) {
    size_t k = 0;
    for (int r = 0; r < 5; r++) {
        if (r == 0) k += (size_t)snprintf(b + k, cap - k, "root ::= ");
        else k += (size_t)snprintf(b + k, cap - k, "r%d ::= ", r);
        size_t body = k;
        rand_seq(b, &k, cap, r, 0);
        if (k == body) k += (size_t)snprintf(b + k, cap - k, "\"\" "); /* "::=" at the end of a line continues the rule */
        if (rnd(2)) {
            k += (size_t)snprintf(b + k, cap - k, "| ");
            size_t before = k;
            rand_seq(b, &k, cap, r, 0);
            if (k == before) k += (size_t)snprintf(b + k, cap - k, "\"\" "); /* a '|' at the end of a line continues the rule */
        }
        k += (size_t)snprintf(b + k, cap - k, "\n");
    }
    /* r0 is root's other name */
    k += (size_t)snprintf(b + k, cap - k, "r0 ::= root\n");
}

/* a random sentence of g (code points), by random expansion with a depth limit; false when it gave up */
static bool rand_sentence(const struct kvb_grammar *g, uint32_t *out, int *n, int cap) {
    uint32_t stack[64];
    int sp = 0;
    stack[sp++] = g->alts[g->rule_alt[g->root] + (int32_t)rnd((uint32_t)(g->rule_alt[g->root + 1] - g->rule_alt[g->root]))];
    *n = 0;
    for (int steps = 0; steps < 400; steps++) {
        if (!sp) return true;
        uint32_t pos = stack[sp - 1], e = g->elems[pos];
        if (G_KIND(e) == G_END) { sp--; continue; }
        stack[sp - 1] = pos + 1;
        if (G_KIND(e) == G_SET) {
            if (*n >= cap) return false;
            /* a member of the set: try alphabet letters, then the set's first code point */
            const struct kvb_gset *s = &g->sets[G_ARG(e)];
            uint32_t pick = UINT32_MAX;
            for (int t = 0; t < 8 && pick == UINT32_MAX; t++) {
                uint32_t c = k_alpha[rnd(N_ALPHA)];
                if (kvb_gset_has(g, s, c)) pick = c;
            }
            if (pick == UINT32_MAX) pick = s->n ? g->ranges[2 * s->first] : 0;
            if (pick >= 0xD800 && pick <= 0xDFFF) return false;
            out[(*n)++] = pick;
            continue;
        }
        if (sp >= 60) return false;
        int32_t a0 = g->rule_alt[G_ARG(e)], na = g->rule_alt[G_ARG(e) + 1] - a0;
        /* deep: prefer the shortest alternative */
        int32_t a = a0 + (int32_t)rnd((uint32_t)na);
        if (sp > 20) {
            int32_t best = a0, best_len = 1 << 30;
            for (int32_t x = a0; x < a0 + na; x++) {
                int32_t len = 0;
                for (uint32_t p = g->alts[x]; G_KIND(g->elems[p]) != G_END; p++) len += G_KIND(g->elems[p]) == G_REF ? 3 : 1;
                if (len < best_len) { best_len = len; best = x; }
            }
            a = best;
        }
        stack[sp++] = g->alts[a];
    }
    return false;
}

TEST(matcher_vs_reference) {
    char gb[8192];
    int grammars = 0, compared = 0, sentences = 0;
    for (int round = 0; round < 1200; round++) {
        rand_grammar(gb, sizeof gb);
        struct kvb_grammar *g = parse(gb);
        if (!g) {
            if (!strstr(kvb_last_error(), "left-recursive") && !strstr(kvb_last_error(), "empty string"))
                FAILF("random grammar refused for another reason: %s\n%s", kvb_last_error(), gb);
            continue;
        }
        grammars++;
        for (int t = 0; t < 60; t++) {
            uint32_t cp[16];
            int n = 0;
            bool from_grammar = t % 2 == 0;
            if (from_grammar) {
                if (!rand_sentence(g, cp, &n, 12)) continue;
                sentences++;
            } else {
                n = (int)rnd(7);
                for (int i = 0; i < n; i++) cp[i] = k_alpha[rnd(N_ALPHA)];
            }
            int full = ref_match(g, cp, n, false), pre = ref_match(g, cp, n, true);
            if (full < 0 || pre < 0) continue;
            if (from_grammar && !full) FAILF("reference refuses a generated sentence\n%s", gb);
            char text[80];
            size_t len = 0;
            for (int i = 0; i < n; i++) len += utf8_put(cp[i], text + len);
            struct kvb_matcher *m;
            CHECK_OK(kvb_matcher_new(g, NULL, &m));
            kvb_status st = kvb_matcher_accept_bytes(m, text, len);
            bool ok = st == KVB_OK;
            if (ok != (pre == 1)) FAILF("prefix '%.*s': matcher %d, reference %d\n%s", (int)len, text, ok, pre, gb);
            if (ok && kvb_matcher_can_end(m) != (full == 1)) FAILF("'%.*s': can_end %d, reference %d\n%s", (int)len, text, !ok, full, gb);
            if (ok && full == 1) { /* must_end: nothing of the alphabet may follow */
                bool more = false, unknown = false;
                for (int c = 0; c <= N_ALPHA; c++) { /* the alphabet, and 'z' for '.' and negated classes */
                    cp[n] = c < N_ALPHA ? k_alpha[c] : 'z';
                    int r = ref_match(g, cp, n + 1, true);
                    more |= r == 1;
                    unknown |= r < 0;
                }
                bool dot_more = false;
                if (unknown && !more) { kvb_matcher_free(m); continue; }
                if (!more && !dot_more && !kvb_matcher_must_end(m)) FAILF("'%.*s': must_end expected\n%s", (int)len, text, gb);
                if (more && kvb_matcher_must_end(m)) FAILF("'%.*s': must_end but more may follow\n%s", (int)len, text, gb);
            }
            kvb_matcher_free(m);
            /* byte by byte gives the same; a refused text leaves the matcher as it was */
            CHECK_OK(kvb_matcher_new(g, NULL, &m));
            size_t i = 0;
            for (; i < len && kvb_matcher_accept_bytes(m, text + i, 1) == KVB_OK; i++) {}
            if ((i == len) != ok) FAILF("byte by byte differs on '%.*s'\n%s", (int)len, text, gb);
            if (ok && kvb_matcher_can_end(m) != (full == 1)) FAILF("byte by byte can_end differs\n%s", gb);
            kvb_matcher_free(m);
            compared++;
        }
        kvb_grammar_free(g);
    }
    printf("  %d grammars, %d texts compared (%d generated sentences)\n", grammars, compared, sentences);
    CHECK(grammars > 150);
    CHECK(compared > 8000);
}

TEST(matcher_utf8_and_state) {
    struct kvb_grammar *g = parse("root ::= [^a-z€] \"x\" | \"€\" \"y\"");
    CHECK(g);
    struct kvb_matcher *m;
    CHECK_OK(kvb_matcher_new(g, NULL, &m));
    /* € = E2 82 AC, split over three calls */
    CHECK_OK(kvb_matcher_accept_bytes(m, "\xE2", 1));
    CHECK_OK(kvb_matcher_accept_bytes(m, "\x82", 1));
    CHECK(!kvb_matcher_can_end(m));
    CHECK_STATUS(kvb_matcher_accept_bytes(m, "\xAC" "x", 2), KVB_ERR_INVALID); /* € then x: only € y */
    CHECK_OK(kvb_matcher_accept_bytes(m, "\xAC", 1));
    CHECK_STATUS(kvb_matcher_accept_bytes(m, "x", 1), KVB_ERR_INVALID);
    CHECK_OK(kvb_matcher_accept_bytes(m, "y", 1));
    CHECK(kvb_matcher_must_end(m));
    kvb_matcher_reset(m);
    CHECK_STATUS(kvb_matcher_accept_bytes(m, "\x82", 1), KVB_ERR_INVALID); /* a continuation byte first */
    CHECK_STATUS(kvb_matcher_accept_bytes(m, "\xC0\x80", 2), KVB_ERR_INVALID); /* overlong */
    CHECK_STATUS(kvb_matcher_accept_bytes(m, "\xED\xA0\x80", 3), KVB_ERR_INVALID); /* a surrogate */
    CHECK_OK(kvb_matcher_accept_bytes(m, "\xC3\xA9x", 3)); /* é x */
    CHECK(kvb_matcher_must_end(m));
    kvb_matcher_free(m);
    kvb_grammar_free(g);
}

/* ---- vocabularies ---- */

/* A synthetic SentencePiece vocabulary: <unk> <s> </s>, a control token, all 256 byte tokens, and text pieces
 * chosen to split JSON and multi-byte characters in awkward places. */
static struct kvb_vocab *synth_vocab(void) {
    static const char *pieces[] = {"a", "b", "ab", "abc", "\"", "{\"", "\":", "\",", "\"}", "}", "{", "[", "]", "[\"", "\"]", ",", ":",
                                   "\xE2\x96\x81", "\xE2\x96\x81" "a", "\xE2\x96\x81\xE2\x96\x81", "true", "tr", "ue", "null", "0", "1", "12", "-",
                                   ".", "e", "\\", "\\n", "\\u", "00", "é", "\xC3", "€", "\xE2\x82", "\x82\xAC", "😀", "x", "yz", "\n", "\n ",
                                   "  ", "\t", "name", "\"name", "age", "\":\"", "\":{\"", "[1", "],", "0.5", "1e", "E+", "<0x", NULL};
    int n_text = 0;
    while (pieces[n_text]) n_text++;
    int n = 4 + 256 + n_text;
    struct kvb_vocab *v = kvb_calloc(1, sizeof *v);
    v->kind = KVB_VOCAB_SPM;
    v->n = n;
    v->off = kvb_calloc((size_t)n + 1, sizeof *v->off);
    v->type = kvb_calloc((size_t)n, 1);
    v->score = kvb_calloc((size_t)n, sizeof *v->score);
    v->arena = kvb_malloc((size_t)n * 16 + 1024);
    v->bos = 1, v->eos = 2, v->unk = 0, v->eot = -1, v->pad = -1;
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        char t[32];
        uint8_t ty = KVB_TOKEN_NORMAL;
        if (i == 0) snprintf(t, sizeof t, "<unk>"), ty = KVB_TOKEN_UNKNOWN;
        else if (i == 1) snprintf(t, sizeof t, "<s>"), ty = KVB_TOKEN_CONTROL;
        else if (i == 2) snprintf(t, sizeof t, "</s>"), ty = KVB_TOKEN_CONTROL;
        else if (i == 3) snprintf(t, sizeof t, "<|tool|>"), ty = KVB_TOKEN_CONTROL;
        else if (i < 260) snprintf(t, sizeof t, "<0x%02X>", i - 4), ty = KVB_TOKEN_BYTE;
        else snprintf(t, sizeof t, "%s", pieces[i - 260]);
        v->off[i] = (uint32_t)k;
        memcpy(v->arena + k, t, strlen(t) + 1);
        k += strlen(t) + 1;
        v->type[i] = ty;
    }
    v->off[n] = (uint32_t)k;
    return v;
}

static void synth_free(struct kvb_vocab *v) {
    kvb_free(v->off);
    kvb_free(v->type);
    kvb_free(v->score);
    kvb_free(v->arena);
    kvb_free(v);
}

/* The mask equals brute force at this position: for every token, a clone accepts it or not. */
static int check_mask(struct kvb_matcher *m, const struct kvb_vocab *v, float *logits, int32_t *n_allowed) {
    int32_t nv = kvb_vocab_size(v);
    for (int32_t i = 0; i < nv; i++) logits[i] = 1.0f;
    if (kvb_matcher_mask(m, logits) != KVB_OK) return -1;
    *n_allowed = 0;
    for (int32_t t = 0; t < nv; t++) {
        bool want;
        char b[300];
        size_t bn = kvb_vocab_token_bytes(v, t, false, b, sizeof b);
        const uint8_t ty = v->type[t];
        if (t == v->eos || t == v->eot) want = kvb_matcher_can_end(m);
        else if (ty == KVB_TOKEN_CONTROL || ty == KVB_TOKEN_UNKNOWN || ty == KVB_TOKEN_UNUSED || bn == 0) want = false;
        else {
            struct kvb_matcher *c;
            if (kvb_matcher_clone(m, &c) != KVB_OK) return -1;
            want = kvb_matcher_accept_bytes(c, b, bn) == KVB_OK;
            kvb_matcher_free(c);
        }
        bool got = logits[t] != -INFINITY;
        if (got != want) {
            printf("  token %d (%.*s): mask %d, brute force %d\n", (int)t, (int)bn, b, got, want);
            return 0;
        }
        if (got) {
            if (logits[t] != 1.0f) return 0; /* allowed logits untouched */
            if (kvb_matcher_allows(m, t) != true) { printf("  allows() disagrees on %d\n", (int)t); return 0; }
            (*n_allowed)++;
        } else if (kvb_matcher_allows(m, t)) { printf("  allows() disagrees on %d\n", (int)t); return 0; }
    }
    return 1;
}

static const char k_walk_gbnf[] =
    "root ::= obj | \"x\" [€é😀]{1,3} \"y\"\n"
    "obj ::= \"{\" ws (pair (\",\" ws pair)*)? \"}\" ws\n"
    "pair ::= str \":\" ws val\n"
    "val ::= str | num | obj | \"[\" ws (val (\",\" ws val)*)? \"]\" ws | \"true\" ws | \"null\" ws\n"
    "str ::= \"\\\"\" ([^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\nt] | \"\\\\u\" [0-9a-fA-F]{4})* \"\\\"\" ws\n"
    "num ::= \"-\"? ([0] | [1-9] [0-9]{0,5}) (\".\" [0-9]{1,3})? ([eE] [-+]? [0-9]{1,2})? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,3}\n";

/* Random walks by tokens (mask, pick an allowed one); the mask is checked at every state. */
static void mask_walks(const struct kvb_vocab *v, const char *gbnf, int walks, int steps, int *states, int *fails) {
    struct kvb_grammar *g = parse(gbnf);
    struct kvb_grammar_vocab *gv = NULL;
    if (!g || kvb_grammar_vocab_new(v, &gv) != KVB_OK) { (*fails)++; kvb_grammar_free(g); return; }
    int32_t nv = kvb_vocab_size(v);
    float *logits = malloc(sizeof(float) * (size_t)nv);
    int32_t *ok = malloc(sizeof(int32_t) * (size_t)nv);
    for (int w = 0; w < walks && !*fails; w++) {
        struct kvb_matcher *m;
        if (kvb_matcher_new(g, gv, &m) != KVB_OK) { (*fails)++; break; }
        for (int s = 0; s < steps; s++) {
            int32_t na;
            int r = check_mask(m, v, logits, &na);
            (*states)++;
            if (r != 1) { (*fails)++; break; }
            int32_t n_ok = 0;
            for (int32_t t = 0; t < nv; t++)
                if (logits[t] != -INFINITY) ok[n_ok++] = t;
            if (kvb_matcher_must_end(m)) {
                if (!(n_ok >= 1)) { (*fails)++; break; }
                for (int32_t k = 0; k < n_ok; k++)
                    if (ok[k] != v->eos && ok[k] != v->eot) { (*fails)++; break; }
            }
            if (!n_ok) break;
            int32_t pick = ok[rnd((uint32_t)n_ok)];
            if (kvb_matcher_accept(m, pick) != KVB_OK) { (*fails)++; break; }
            if (pick == v->eos || pick == v->eot) {
                /* after the end nothing is allowed */
                for (int32_t t = 0; t < nv; t++) logits[t] = 0;
                kvb_matcher_mask(m, logits);
                for (int32_t t = 0; t < nv; t++)
                    if (logits[t] != -INFINITY) { (*fails)++; break; }
                break;
            }
        }
        kvb_matcher_free(m);
    }
    free(logits);
    free(ok);
    kvb_grammar_vocab_free(gv);
    kvb_grammar_free(g);
}

TEST(mask_synthetic_vocab) {
    struct kvb_vocab *v = synth_vocab();
    int states = 0, fails = 0;
    mask_walks(v, k_walk_gbnf, 40, 40, &states, &fails);
    mask_walks(v, "root ::= [^a-z€]* \"€\" | \"ab\"+ \"c\"", 20, 20, &states, &fails);
    printf("  %d states checked\n", states);
    CHECK_EQ_INT(fails, 0);
    CHECK(states > 500);
    /* control tokens and <unk> never; EOS only at the end */
    struct kvb_grammar *g = parse("root ::= \"a\"?");
    struct kvb_grammar_vocab *gv;
    CHECK_OK(kvb_grammar_vocab_new(v, &gv));
    struct kvb_matcher *m;
    CHECK_OK(kvb_matcher_new(g, gv, &m));
    float lg[400];
    for (int i = 0; i < v->n; i++) lg[i] = 0;
    CHECK_OK(kvb_matcher_mask(m, lg));
    CHECK(lg[2] == 0 && lg[0] == -INFINITY && lg[1] == -INFINITY && lg[3] == -INFINITY);
    CHECK(lg[4 + 'a'] == 0 && lg[260] == 0 && lg[4 + 'b'] == -INFINITY);
    CHECK_STATUS(kvb_matcher_accept(m, 3), KVB_ERR_INVALID);
    CHECK_STATUS(kvb_matcher_accept(m, 4 + 'b'), KVB_ERR_INVALID);
    CHECK_OK(kvb_matcher_accept(m, 260));
    CHECK(kvb_matcher_must_end(m));
    CHECK_OK(kvb_matcher_mask(m, lg));
    for (int i = 0; i < v->n; i++)
        if (i != 2 && lg[i] != -INFINITY) FAILF("token %d allowed where only EOS may come", i);
    kvb_matcher_free(m);
    kvb_grammar_vocab_free(gv);
    kvb_grammar_free(g);
    synth_free(v);
}

static void real_vocab_case(const char *path, int walks, int steps) {
    struct kvb_vocab *v;
    CHECK_OK(kvb_vocab_load(path, &v));
    int states = 0, fails = 0;
    mask_walks(v, k_walk_gbnf, walks, steps, &states, &fails);
    printf("  %s: %d states checked against brute force over %d tokens\n", path, states, (int)kvb_vocab_size(v));
    kvb_vocab_free(v);
    CHECK_EQ_INT(fails, 0);
    CHECK(states >= walks);
}

TEST(mask_llama_spm_vocab) {
    NEED_SHARED(p, "tokenizers/llama2/ggml-vocab-llama-spm.gguf");
    real_vocab_case(p, getenv("KVB_TEST_QUICK") ? 2 : 3, 8);
}

TEST(mask_gpt2_vocab) {
    NEED_SHARED(p, "tokenizers/gpt2/ggml-vocab-gpt-2.gguf");
    real_vocab_case(p, getenv("KVB_TEST_QUICK") ? 1 : 2, 6);
}

/* ---- JSON Schema ---- */

struct vctx {
    jv root;
    char why[256];
};

static bool vfail(struct vctx *c, const char *w) {
    snprintf(c->why, sizeof c->why, "%s", w);
    return false;
}

static jv *sget(jv s, const char *k) { return s.t == JV_DICT ? jv_dict_get(s.u.d, k, strlen(k)) : NULL; }

static long u8len(jv s) {
    long n = 0;
    for (size_t i = 0; i < s.n; i++) n += ((uint8_t)s.u.s[i] & 0xC0) != 0x80;
    return n;
}

static bool regex_ok(const char *pat, const char *s, size_t n) {
    regex_t re;
    if (regcomp(&re, pat, REG_EXTENDED | REG_NOSUB)) return false;
    char *z = malloc(n + 1);
    memcpy(z, s, n);
    z[n] = 0;
    bool ok = regexec(&re, z, 0, NULL, 0) == 0;
    free(z);
    regfree(&re);
    return ok;
}

static bool is_type(jv x, const char *t) {
    if (!strcmp(t, "object")) return x.t == JV_DICT;
    if (!strcmp(t, "array")) return x.t == JV_LIST;
    if (!strcmp(t, "string")) return x.t == JV_STR;
    if (!strcmp(t, "integer")) return x.t == JV_INT || (x.t == JV_FLOAT && x.u.f == (double)(long long)x.u.f);
    if (!strcmp(t, "number")) return x.t == JV_INT || x.t == JV_FLOAT;
    if (!strcmp(t, "boolean")) return x.t == JV_BOOL;
    if (!strcmp(t, "null")) return x.t == JV_NONE;
    return false;
}

/* jv_equal without a budget (parsed values nest at most 64 levels here); a
 * failure would count as unequal */
static bool same_value(jv a, jv b) {
    struct jerr e;
    memset(&e, 0, sizeof e);
    if (setjmp(e.jb)) return false;
    return jv_equal(&e, a, b);
}

static bool validate(struct vctx *c, jv s, jv x, int depth, bool loose) {
    if (depth > 60) return vfail(c, "too deep");
    if (s.t == JV_BOOL) return s.u.b ? true : vfail(c, "false schema");
    jv *k;
    if ((k = sget(s, "$ref"))) {
        const char *r = k->u.s;
        jv *defs = sget(c->root, !strncmp(r, "#/$defs/", 8) ? "$defs" : "definitions");
        const char *name = strchr(r + 2, '/') + 1;
        jv *t = defs ? jv_dict_get(defs->u.d, name, k->n - (size_t)(name - r)) : NULL;
        if (!t) return vfail(c, "ref");
        return validate(c, *t, x, depth + 1, false);
    }
    if ((k = sget(s, "nullable")) && k->u.b && x.t == JV_NONE) return true;
    if ((k = sget(s, "const")) && !same_value(*k, x)) return vfail(c, "const");
    if ((k = sget(s, "enum"))) {
        bool any = false;
        for (int32_t i = 0; i < k->u.l->n && !any; i++) any = same_value(k->u.l->v[i], x) && k->u.l->v[i].t == x.t;
        if (!any) return vfail(c, "enum");
    }
    if ((k = sget(s, "anyOf")) || (k = sget(s, "oneOf"))) {
        int hits = 0;
        for (int32_t i = 0; i < k->u.l->n; i++) hits += validate(c, k->u.l->v[i], x, depth + 1, false);
        if (!hits) return vfail(c, "anyOf");
        if (sget(s, "oneOf") && hits != 1) return vfail(c, "oneOf: more than one");
    }
    if ((k = sget(s, "allOf")))
        for (int32_t i = 0; i < k->u.l->n; i++)
            if (!validate(c, k->u.l->v[i], x, depth + 1, true)) return false;
    if ((k = sget(s, "type"))) {
        bool any = false;
        if (k->t == JV_STR) { char t[16]; snprintf(t, sizeof t, "%.*s", (int)k->n, k->u.s); any = is_type(x, t); }
        else for (int32_t i = 0; i < k->u.l->n && !any; i++) { char t[16]; snprintf(t, sizeof t, "%.*s", (int)k->u.l->v[i].n, k->u.l->v[i].u.s); any = is_type(x, t); }
        if (!any) return vfail(c, "type");
    }
    if (x.t == JV_DICT) {
        jv *props = sget(s, "properties"), *req = sget(s, "required"), *addl = sget(s, "additionalProperties");
        for (int32_t i = 0; req && i < req->u.l->n; i++)
            if (!jv_dict_get(x.u.d, req->u.l->v[i].u.s, req->u.l->v[i].n)) return vfail(c, "required");
        for (int32_t i = 0; i < x.u.d->n; i++) {
            jv key = x.u.d->k[i];
            jv *ps = props ? jv_dict_get(props->u.d, key.u.s, key.n) : NULL;
            if (ps) { if (!validate(c, *ps, x.u.d->v[i], depth + 1, false)) return false; }
            else if (addl && addl->t == JV_BOOL && !addl->u.b) return vfail(c, "additionalProperties false");
            else if (!addl && props && !loose) return vfail(c, "extra key (no additionalProperties)");
            else if (addl && addl->t == JV_DICT && !validate(c, *addl, x.u.d->v[i], depth + 1, false)) return false;
        }
    }
    if (x.t == JV_LIST) {
        jv *items = sget(s, "items"), *pre = sget(s, "prefixItems"), *mn = sget(s, "minItems"), *mx = sget(s, "maxItems");
        if (mn && x.u.l->n < mn->u.i) return vfail(c, "minItems");
        if (mx && x.u.l->n > mx->u.i) return vfail(c, "maxItems");
        for (int32_t i = 0; i < x.u.l->n; i++) {
            if (pre && i < pre->u.l->n) { if (!validate(c, pre->u.l->v[i], x.u.l->v[i], depth + 1, false)) return false; }
            else if (items && !validate(c, *items, x.u.l->v[i], depth + 1, false)) return false;
        }
    }
    if (x.t == JV_STR) {
        jv *mn = sget(s, "minLength"), *mx = sget(s, "maxLength"), *pat = sget(s, "pattern"), *fmt = sget(s, "format");
        if (mn && u8len(x) < mn->u.i) return vfail(c, "minLength");
        if (mx && u8len(x) > mx->u.i) return vfail(c, "maxLength");
        if (pat) {
            char p[256];
            snprintf(p, sizeof p, "%.*s", (int)pat->n, pat->u.s);
            if (!regex_ok(p, x.u.s, x.n)) return vfail(c, "pattern");
        }
        if (fmt) {
            const char *re = fmt->n == 9 && !strncmp(fmt->u.s, "date-time", 9) ? "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
                           : fmt->n == 4 && !strncmp(fmt->u.s, "date", 4) ? "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$"
                           : "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
            if (!regex_ok(re, x.u.s, x.n)) return vfail(c, "format");
        }
    }
    if (x.t == JV_INT || x.t == JV_FLOAT) {
        double d = x.t == JV_INT ? (double)x.u.i : x.u.f;
        if ((k = sget(s, "minimum")) && d < (k->t == JV_INT ? (double)k->u.i : k->u.f)) return vfail(c, "minimum");
        if ((k = sget(s, "maximum")) && d > (k->t == JV_INT ? (double)k->u.i : k->u.f)) return vfail(c, "maximum");
        if ((k = sget(s, "exclusiveMinimum")) && d <= (k->t == JV_INT ? (double)k->u.i : k->u.f)) return vfail(c, "exclusiveMinimum");
        if ((k = sget(s, "exclusiveMaximum")) && d >= (k->t == JV_INT ? (double)k->u.i : k->u.f)) return vfail(c, "exclusiveMaximum");
    }
    return true;
}

struct jwork {
    struct jerr e;
    struct jarena a;
};

/* 1 valid, 0 invalid (why in c->why), -1 not JSON */
static int check_doc(const char *schema, const char *doc, size_t n, char *why, size_t why_cap) {
    struct jwork *w = calloc(1, sizeof *w);
    w->a.limit = 64u << 20;
    int r;
    if (!setjmp(w->e.jb)) {
        struct vctx c = {0};
        c.root = jjson_parse(&w->a, &w->e, "schema", schema, strlen(schema), 64);
        jv x = jjson_parse(&w->a, &w->e, "doc", doc, n, 64);
        r = validate(&c, c.root, x, 0, false);
        snprintf(why, why_cap, "%s", c.why);
    } else {
        r = -1;
        snprintf(why, why_cap, "%s", w->e.msg);
    }
    jarena_free(&w->a);
    free(w);
    return r;
}

static const char *const k_schemas[] = {
    /* 0 nested objects, required and optional, enums, bounds */
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\",\"minimum\":18,\"maximum\":120},\"role\":{\"enum\":[\"admin\",\"user\",null,3]},"
    "\"addr\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},"
    "\"required\":[\"zip\"]},\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\"]}",
    /* 1 arrays with bounds, prefixItems, numbers */
    "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\",\"exclusiveMinimum\":-5,\"exclusiveMaximum\":5},{\"type\":\"string\",\"const\":\"k\"}],"
    "\"items\":{\"type\":\"number\"},\"minItems\":1,\"maxItems\":4}",
    /* 2 anyOf, type arrays, nullable */
    "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":3},{\"type\":[\"integer\",\"null\"]},{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"maxItems\":2}]}",
    /* 3 $ref recursion */
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},"
    "\"maxItems\":2}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}",
    /* 4 additionalProperties schema with named properties; patterns */
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"^(ab|c[d-f]+)x?$\"}},\"additionalProperties\":{\"type\":\"integer\"}}",
    /* 5 formats, definitions, oneOf of disjoint types, string lengths */
    "{\"definitions\":{\"d\":{\"type\":\"string\",\"format\":\"date\"}},\"type\":\"object\",\"properties\":{\"when\":{\"$ref\":\"#/definitions/d\"},"
    "\"u\":{\"type\":\"string\",\"format\":\"uuid\"},\"t\":{\"type\":\"string\",\"format\":\"date-time\"},\"x\":{\"oneOf\":[{\"type\":\"string\",\"minLength\":2,"
    "\"maxLength\":2},{\"type\":\"boolean\"}]}},\"required\":[\"when\",\"u\",\"t\",\"x\"],\"additionalProperties\":false}",
    /* 6 any value */
    "{}",
    /* 7 json_object mode */
    "{\"type\":\"object\"}",
    /* 8 allOf of objects, nullable, unanchored pattern */
    "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"nullable\":true}},\"required\":[\"a\"]},"
    "{\"properties\":{\"b\":{\"type\":\"string\",\"pattern\":\"^z[0-9]\"}}}]}",
    /* 9 a type list with keywords of one of its types; a nullable object */
    "{\"type\":[\"string\",\"null\",\"array\"],\"maxLength\":3,\"items\":{\"type\":\"object\",\"nullable\":true,"
    "\"properties\":{\"q\":{\"const\":[1,{\"r\":\"s\"}]}},\"additionalProperties\":true},\"maxItems\":2}",
    /* 10 a tool without arguments (issue 47: it allowed any object; llama.cpp gives {}) */
    "{\"type\":\"object\",\"properties\":{}}",
    /* 11 no properties, more allowed */
    "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":true}",
    NULL,
};

/* valid: 1 the grammar and JSON Schema accept, 0 both refuse, 2 the grammar refuses what JSON Schema allows
 * (properties out of the schema's order) */
static const struct {
    int schema;
    const char *doc;
    int valid;
} k_docs[] = {
    {0, "{\"name\":\"bob\",\"age\":42}", true},
    {0, "{\"name\": \"bob\", \"age\": 42, \"role\": null, \"addr\": {\"zip\": \"12345\"}, \"ok\": true}", true},
    {0, "{\"name\":\"bob\",\"age\":42,\"role\":3}", true},
    {0, "{\"age\":42,\"name\":\"bob\"}", 2},              /* order */
    {0, "{\"name\":\"bob\"}", false},                     /* required */
    {0, "{\"name\":\"bob\",\"age\":17}", false},          /* minimum */
    {0, "{\"name\":\"bob\",\"age\":121}", false},
    {0, "{\"name\":\"\",\"age\":20}", false},             /* minLength */
    {0, "{\"name\":\"bobbobbob\",\"age\":20}", false},    /* maxLength */
    {0, "{\"name\":\"bob\",\"age\":20,\"addr\":{\"zip\":\"1234\"}}", false},
    {0, "{\"name\":\"bob\",\"age\":20,\"x\":1}", false},  /* no additional */
    {0, "{\"name\":\"bob\",\"age\":20,\"role\":\"root\"}", false},
    {0, "{\"name\":\"b\\u00e9\\n\",\"age\":20}", true},
    {0, "{\"name\":\"b\nb\",\"age\":20}", false},         /* raw control character */
    {1, "[0,\"k\",1.5,-2e3]", true},
    {1, "[4]", true},
    {1, "[5]", false},
    {1, "[-4,\"k\",1,2,3]", false},
    {1, "[]", false},
    {1, "[0,\"j\"]", false},
    {2, "\"abc\"", true},
    {2, "null", true},
    {2, "[true,false]", true},
    {2, "\"abcd\"", false},
    {2, "[true,false,true]", false},
    {3, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4}]}]}", true},
    {3, "{\"v\":1,\"kids\":[{\"kids\":[]}]}", false},
    {4, "{\"id\":\"cdex\",\"n\":3}", true},
    {4, "{\"n\":3,\"m\":-1}", true},
    {4, "{\"id\":\"ab\",\"id2\":1,\"i\":2}", true},
    {4, "{\"id\":\"cx\"}", false},
    {4, "{\"n\":\"s\"}", false},
    {4, "{\"n\":1,\"id\":\"ab\"}", 2}, /* a declared property after the extra keys */
    {4, "{\"id\":\"ab\",\"id\":\"ab\"}", 2}, /* a declared property again as an extra key */
    {5, "{\"when\":\"2024-02-29\",\"u\":\"123e4567-e89b-12d3-a456-426614174000\",\"t\":\"2024-01-01T10:00:00Z\",\"x\":\"ab\"}", true},
    {5, "{\"when\":\"2024-13-01\",\"u\":\"123e4567-e89b-12d3-a456-426614174000\",\"t\":\"2024-01-01T10:00:00Z\",\"x\":true}", false},
    {5, "{\"when\":\"2024-02-29\",\"u\":\"123e4567-e89b-12d3-a456-42661417400\",\"t\":\"2024-01-01T10:00:00Z\",\"x\":true}", false},
    {6, "[1, {\"a\": [null, true, \"x\"]}, -0.5e+3]", true},
    {6, "[1,]", false},
    {6, "01", false},
    {7, "{\"a\":{\"b\":[1]}}", true},
    {7, "[1]", false},
    {8, "{\"a\":null,\"b\":\"z1y\"}", true},
    {8, "{\"a\":null,\"b\":\"xz1\"}", false},
    {8, "{\"a\":1}", true},
    {8, "{\"b\":\"z1\"}", false},
    {8, "{\"a\":1,\"b\":\"zz\"}", false},
    {9, "\"abc\"", true},
    {9, "null", true},
    {9, "\"abcd\"", false},
    {9, "[null,{\"q\":[1,{\"r\":\"s\"}],\"z\":{}}]", true},
    {9, "[{\"q\":[1,{\"r\":\"t\"}]}]", false},
    {9, "[{},{},{}]", false},
    {10, "{}", true},
    {10, "{ }", true},
    {10, "{\"a\":1}", false},
    {11, "{}", true},
    {11, "{\"a\":1}", true},
};

static struct kvb_grammar *schema_grammar(const char *schema, char **text) {
    char *gb = NULL;
    size_t n = 0;
    if (kvb_json_schema_to_gbnf(schema, strlen(schema), "", &gb, &n) != KVB_OK) return NULL;
    struct kvb_grammar *g = NULL;
    if (kvb_grammar_parse(gb, n, NULL, &g) != KVB_OK) g = NULL;
    if (text) *text = gb;
    else kvb_buffer_free(gb);
    return g;
}

TEST(schema_known_documents) {
    for (size_t i = 0; i < sizeof k_docs / sizeof k_docs[0]; i++) {
        char *gb;
        struct kvb_grammar *g = schema_grammar(k_schemas[k_docs[i].schema], &gb);
        if (!g) FAILF("schema %d: %s", k_docs[i].schema, kvb_last_error());
        int r = match_text(g, k_docs[i].doc, strlen(k_docs[i].doc));
        char why[256];
        int v = check_doc(k_schemas[k_docs[i].schema], k_docs[i].doc, strlen(k_docs[i].doc), why, sizeof why);
        if ((v == 1) != (k_docs[i].valid != 0)) FAILF("the test's validator says %d on %s (%s)", v, k_docs[i].doc, why);
        if (r != (k_docs[i].valid == 1)) FAILF("schema %d, %s: grammar says %d, want %d\n%s", k_docs[i].schema, k_docs[i].doc, r, k_docs[i].valid, gb);
        kvb_buffer_free(gb);
        kvb_grammar_free(g);
    }
}

/* issue 48 survivor 1: an integer range with one digit between the bounds' leading digits (minimum 18, maximum 120
 * refused 115: the middle digit class was dropped). Exhaustive over a window: for each (minimum, maximum) pair, across
 * 1-, 2-, 3- and 4-digit boundaries, negatives and random pairs, the compiled grammar accepts exactly the integers in
 * the range, each written the one JSON way (no leading zeros, no "-0"), so any slip in a digit class is caught. */
static int int_range_check(int64_t lo, int64_t hi, int64_t from, int64_t to, char *why, size_t cap) {
    char schema[128];
    snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}", (long long)lo, (long long)hi);
    struct kvb_grammar *g = schema_grammar(schema, NULL);
    if (!g) return snprintf(why, cap, "%s: %s", schema, kvb_last_error()), 0;
    for (int64_t x = from; x <= to; x++) {
        char t[32];
        int n = snprintf(t, sizeof t, "%lld", (long long)x);
        int want = x >= lo && x <= hi;
        if (match_text(g, t, (size_t)n) != want) {
            snprintf(why, cap, "%s: %s %s", schema, t, want ? "refused" : "accepted");
            kvb_grammar_free(g);
            return 0;
        }
        /* the same value with a leading zero is no JSON integer */
        n = snprintf(t, sizeof t, x < 0 ? "-0%lld" : "0%lld", (long long)(x < 0 ? -x : x));
        if (x != 0 && match_text(g, t, (size_t)n) != 0) {
            snprintf(why, cap, "%s: %s accepted", schema, t);
            kvb_grammar_free(g);
            return 0;
        }
    }
    int minus_zero = match_text(g, "-0", 2);
    kvb_grammar_free(g);
    if (minus_zero) return snprintf(why, cap, "%s: -0 accepted", schema), 0;
    return 1;
}

TEST(schema_int_range_one_middle_digit) { /* issue 48 survivor 1 */
    static const int64_t pairs[][2] = {
        {18, 120}, {100, 120}, {105, 125}, {0, 9}, {0, 10}, {1, 99}, {5, 5}, {9, 10}, {10, 99}, {99, 100}, {100, 999},
        {123, 456}, {109, 301}, {190, 210}, {7, 31}, {12, 34}, {11, 29}, {1, 1000}, {998, 1002}, {1234, 1432},
        {1090, 1310}, {0, 0}, {-120, -18}, {-5, 5}, {-10, -1}, {-9, 0}, {-100, 100}, {-999, -100}, {-1002, -998},
        {-31, 7}, {-125, 105}, {-210, -190}, {-1, 0}, {-1432, -1234},
    };
    char why[256];
    int n = 0;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++, n++)
        if (!int_range_check(pairs[i][0], pairs[i][1], pairs[i][0] - 25, pairs[i][1] + 25, why, sizeof why)) FAILF("%s", why);
    /* random pairs of random digit lengths: each bound's width drawn first, so every length mix comes up */
    static const int64_t tens[] = {1, 10, 100, 1000};
    uint64_t saved = rng_state; /* the other cases' random streams stay as they were */
    rng_state = 48;
    for (int i = 0; i < 80; i++, n++) {
        int64_t a = (int64_t)rnd((uint32_t)tens[rnd(4)] * 10), b = (int64_t)rnd((uint32_t)tens[rnd(4)] * 10);
        if (rnd(4) == 0) a = -a;
        if (rnd(6) == 0) b = -b;
        int64_t lo = KVB_MIN(a, b), hi = KVB_MAX(a, b);
        /* every integer for short ranges; for long ones, the ends and every tenth value between */
        if (hi - lo <= 400) {
            if (!int_range_check(lo, hi, lo - 25, hi + 25, why, sizeof why)) FAILF("%s", why);
        } else if (!int_range_check(lo, hi, lo - 25, lo + 200, why, sizeof why) ||
                   !int_range_check(lo, hi, hi - 200, hi + 25, why, sizeof why)) FAILF("%s", why);
    }
    rng_state = saved;
    printf("  %d integer ranges checked\n", n);
}

/* a byte-level random walk (allowed bytes from the mask over a 256-byte vocabulary + EOS), steered to end */
static struct kvb_vocab *byte_vocab(void) {
    struct kvb_vocab *v = kvb_calloc(1, sizeof *v);
    int n = 258;
    v->kind = KVB_VOCAB_SPM;
    v->n = n;
    v->off = kvb_calloc((size_t)n + 1, sizeof *v->off);
    v->type = kvb_calloc((size_t)n, 1);
    v->score = kvb_calloc((size_t)n, sizeof *v->score);
    v->arena = kvb_malloc((size_t)n * 8);
    v->bos = 256, v->eos = 257, v->unk = -1, v->eot = -1, v->pad = -1;
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        char t[16];
        if (i < 256) snprintf(t, sizeof t, "<0x%02X>", i), v->type[i] = KVB_TOKEN_BYTE;
        else snprintf(t, sizeof t, i == 256 ? "<s>" : "</s>"), v->type[i] = KVB_TOKEN_CONTROL;
        v->off[i] = (uint32_t)k;
        memcpy(v->arena + k, t, strlen(t) + 1);
        k += strlen(t) + 1;
    }
    v->off[n] = (uint32_t)k;
    return v;
}

TEST(schema_random_walks) {
    struct kvb_vocab *v = byte_vocab();
    struct kvb_grammar_vocab *gv;
    CHECK_OK(kvb_grammar_vocab_new(v, &gv));
    int docs = 0;
    for (int si = 0; k_schemas[si]; si++) {
        char *gb;
        struct kvb_grammar *g = schema_grammar(k_schemas[si], &gb);
        if (!g) FAILF("schema %d: %s", si, kvb_last_error());
        for (int w = 0; w < 40; w++) {
            struct kvb_matcher *m;
            CHECK_OK(kvb_matcher_new(g, gv, &m));
            char out[8192];
            size_t n = 0;
            float lg[258];
            int cap = 20 + (int)rnd(120);
            bool ended = false;
            for (int step = 0; step < 6000 && n < sizeof out - 1; step++) {
                for (int i = 0; i < 258; i++) lg[i] = 0;
                CHECK_OK(kvb_matcher_mask(m, lg));
                int ok[258], n_ok = 0;
                for (int i = 0; i < 258; i++)
                    if (lg[i] == 0) ok[n_ok++] = i;
                if (!n_ok) FAILF("schema %d: dead end after '%.*s'", si, (int)n, out);
                int pick = ok[rnd((uint32_t)n_ok)];
                if ((int)n >= cap) { /* steer: end, close, then short choices */
                    static const char pref[] = {'"', '}', ']', '0', '1', 'a', 'n', 'f', 't', 'u', 'l', 'e', 'r', 's', '2', '-', 'T', ':', 'Z'};
                    int best = 1000;
                    for (int i = 0; i < n_ok; i++) {
                        int score = ok[i] == 257 ? -1 : 100;
                        for (size_t p = 0; p < sizeof pref && score == 100; p++)
                            if (ok[i] == (uint8_t)pref[p]) score = (int)p;
                        if (ok[i] == ',' || ok[i] == ' ' || ok[i] == '\n' || ok[i] == '\t') score = 200;
                        if (score < best) { best = score; pick = ok[i]; }
                    }
                }
                CHECK_OK(kvb_matcher_accept(m, pick));
                if (pick == 257) { ended = true; break; }
                out[n++] = (char)pick;
            }
            kvb_matcher_free(m);
            if (!ended) FAILF("schema %d: the walk did not end: '%.*s'", si, (int)KVB_MIN(n, 300), out);
            char why[256];
            int r = check_doc(k_schemas[si], out, n, why, sizeof why);
            if (r != 1) FAILF("schema %d: walk output refused by the validator (%d: %s): %.*s\n%s", si, r, why, (int)n, out, gb);
            docs++;
        }
        kvb_buffer_free(gb);
        kvb_grammar_free(g);
    }
    printf("  %d generated documents validated\n", docs);
    kvb_grammar_vocab_free(gv);
    synth_free(v);
}

static int count_of_str(const char *h, const char *n) {
    int k = 0;
    for (const char *p = h; (p = strstr(p, n)); p += strlen(n)) k++;
    return k;
}

/* Issue 47: a schema's size is bounded before it is compiled, each bound refused by name (400, not 500 "out of
 * memory"); the compiler's message is not formatted into itself (it came out garbled); a pattern's error offset
 * counts from the pattern's start (it was negative); a big object compiles in linear work. */
/* An object schema of n properties "NAMEi": {"type": TYPE} into big (cap
 * bytes), with `head` after its opening brace; its length. */
static size_t object_schema(char *big, size_t cap, const char *head, const char *name, const char *type, int n) {
    size_t k = (size_t)snprintf(big, cap, "{\"type\":\"object\",%s\"properties\":{", head);
    for (int i = 0; i < n; i++) k += (size_t)snprintf(big + k, cap - k, "%s\"%s%d\":{\"type\":\"%s\"}", i ? "," : "", name, i, type);
    return k + (size_t)snprintf(big + k, cap - k, "}}");
}

TEST(schema_size_limits_and_messages) {
    char *gb = NULL;
    size_t n = 0;
    const char *self = "{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}";
    CHECK_STATUS(kvb_json_schema_to_gbnf(self, strlen(self), NULL, &gb, &n), KVB_ERR_INVALID);
    const char *msg = kvb_last_error();
    if (count_of_str(msg, "json schema") != 1 || !strstr(msg, "left-recursive") || strncmp(msg, "json schema: refers to itself", 29))
        FAILF("garbled message: %s", msg);
    const char *rx = "{\"type\":\"string\",\"pattern\":\"abc(?=x)\"}";
    CHECK_STATUS(kvb_json_schema_to_gbnf(rx, strlen(rx), NULL, &gb, &n), KVB_ERR_UNSUPPORTED);
    if (!strstr(kvb_last_error(), "at offset 4)")) FAILF("offset: %s", kvb_last_error());
    size_t cap = (size_t)12 << 20;
    char *big = malloc(cap);
    CHECK(big);
    /* an enum of 100,000 strings */
    size_t k = (size_t)snprintf(big, cap, "{\"enum\":[");
    for (int i = 0; i < 100000; i++) k += (size_t)snprintf(big + k, cap - k, "%s\"value number %d\"", i ? "," : "", i);
    k += (size_t)snprintf(big + k, cap - k, "]}");
    kvb_status st = kvb_json_schema_to_gbnf(big, k, NULL, &gb, &n);
    if (st != KVB_ERR_INVALID || !strstr(kvb_last_error(), "16384") || !strstr(kvb_last_error(), "limit")) {
        free(big);
        FAILF("enum of 100,000: status %d, %s", (int)st, kvb_last_error());
    }
    /* an enum of few, long strings: past the text bound, refused by name (was "out of memory") */
    k = (size_t)snprintf(big, cap, "{\"enum\":[");
    for (int i = 0; i < 5000; i++) {
        k += (size_t)snprintf(big + k, cap - k, "%s\"%d", i ? "," : "", i);
        memset(big + k, 'x', 2000);
        k += 2000;
        big[k++] = '"';
    }
    k += (size_t)snprintf(big + k, cap - k, "]}");
    st = kvb_json_schema_to_gbnf(big, k, NULL, &gb, &n);
    if (st != KVB_ERR_INVALID || !strstr(kvb_last_error(), "MiB of text (the limit)")) {
        free(big);
        FAILF("long enum: status %d, %s", (int)st, kvb_last_error());
    }
    /* more properties than the rules allow: refused naming the rule limit */
    k = object_schema(big, cap, "", "p", "string", 4500);
    st = kvb_json_schema_to_gbnf(big, k, NULL, &gb, &n);
    if (st != KVB_ERR_INVALID || !strstr(kvb_last_error(), "more than 16384 rules (the limit)")) {
        free(big);
        FAILF("4500 properties: status %d, %s", (int)st, kvb_last_error());
    }
    /* 2000 properties compile, in work linear in the grammar's text */
    k = object_schema(big, cap, "", "p", "string", 2000);
    st = kvb_json_schema_to_gbnf(big, k, NULL, &gb, &n);
    free(big);
    CHECK_OK(st);
    struct kvb_grammar *g = NULL;
    st = kvb_grammar_parse(gb, n, NULL, &g);
    kvb_buffer_free(gb);
    CHECK_OK(st);
    uint64_t work = g->compile_work;
    kvb_grammar_free(g);
    if (work > 4 * (uint64_t)n) FAILF("compile work %llu for %zu bytes: more than linear", (unsigned long long)work, n);
    /* other keys allowed: a trie of the names' bytes, one rule a node, each with nested groups (positions asked
     * backwards, from a group's '(' after the groups inside it) */
    big = malloc(cap);
    CHECK(big);
    k = object_schema(big, cap, "\"additionalProperties\":true,", "key", "integer", 1500);
    st = kvb_json_schema_to_gbnf(big, k, NULL, &gb, &n);
    free(big);
    CHECK_OK(st);
    st = kvb_grammar_parse(gb, n, NULL, &g);
    kvb_buffer_free(gb);
    CHECK_OK(st);
    work = g->compile_work;
    kvb_grammar_free(g);
    if (work > 4 * (uint64_t)n) FAILF("compile work %llu for %zu bytes (other keys allowed): more than linear", (unsigned long long)work, n);
}

/* Issue 47: a forced tool call's arguments are compact JSON (KVB_SCHEMA_COMPACT): no white space between tokens, so a
 * weak model cannot spend max_tokens on tabs; without the flag the bounded white space stays allowed. */
TEST(schema_compact) {
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"array\",\"items\":{}}},"
                         "\"required\":[\"a\"]}";
    static const struct {
        const char *doc;
        int compact, loose;
    } docs[] = {
        {"{\"a\":1}", 1, 1},
        {"{\"a\":1,\"b\":[{\"x\":[true,null]},\"s p\"]}", 1, 1},
        {"{\"a\": 1}", 0, 1},
        {"{ \"a\":1}", 0, 1},
        {"{\"a\":1,\"b\":[\n\t1]}", 0, 1},
        {"{\"a\":1,\"b\":[{\"x\" :2}]}", 0, 1},
        {"{\"a\":1}\n", 0, 1},
    };
    for (int mode = 0; mode < 2; mode++) {
        char *gb = NULL;
        size_t n = 0;
        CHECK_OK(kvb_json_schema_to_gbnf_flags(schema, strlen(schema), NULL, mode ? 0 : KVB_SCHEMA_COMPACT, &gb, &n));
        struct kvb_grammar *g = NULL;
        kvb_status st = kvb_grammar_parse(gb, n, NULL, &g);
        kvb_buffer_free(gb);
        CHECK_OK(st);
        for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
            int want = mode ? docs[i].loose : docs[i].compact;
            int got = match_text(g, docs[i].doc, strlen(docs[i].doc));
            if (got != want) {
                kvb_grammar_free(g);
                FAILF("%s grammar on %s: %d, want %d", mode ? "loose" : "compact", docs[i].doc, got, want);
            }
        }
        kvb_grammar_free(g);
    }
    char *gb = NULL;
    size_t n = 0;
    CHECK_STATUS(kvb_json_schema_to_gbnf_flags("{}", 2, NULL, 4, &gb, &n), KVB_ERR_INVALID);
}

TEST(schema_refusals) {
    static const struct {
        const char *schema;
        kvb_status st;
        const char *want;
    } bad[] = {
        {"{\"type\":\"object\",\"patternProperties\":{\"a\":{}}}", KVB_ERR_UNSUPPORTED, "\"patternProperties\""},
        {"{\"not\":{\"type\":\"string\"}}", KVB_ERR_UNSUPPORTED, "\"not\""},
        {"{\"if\":{},\"then\":{}}", KVB_ERR_UNSUPPORTED, "\"if\""},
        {"{\"type\":\"number\",\"minimum\":1.5}", KVB_ERR_UNSUPPORTED, "minimum"},
        {"{\"type\":\"integer\",\"multipleOf\":2}", KVB_ERR_UNSUPPORTED, "multipleOf"},
        {"{\"type\":\"string\",\"format\":\"email\"}", KVB_ERR_UNSUPPORTED, "email"},
        {"{\"type\":\"string\",\"pattern\":\"^(?=a)\"}", KVB_ERR_UNSUPPORTED, "pattern"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", KVB_ERR_UNSUPPORTED, "back-reference"},
        {"{\"$ref\":\"http://x/y\"}", KVB_ERR_UNSUPPORTED, "$ref"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"strin\"}}}", KVB_ERR_INVALID, "/properties/a"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"items\":{\"minItems\":-1}}}}", KVB_ERR_INVALID, "/properties/a/items"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", KVB_ERR_INVALID, "itself"},
        {"{\"$ref\":\"#/$defs/missing\"}", KVB_ERR_INVALID, "not defined"},
        {"{\"type\":", KVB_ERR_INVALID, "json schema"},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", KVB_ERR_INVALID, "maxLength"},
        {"{\"type\":\"array\",\"minItems\":20000}", KVB_ERR_UNSUPPORTED, "minItems"},
        {"{\"type\":\"array\",\"maxItems\":3e62}", KVB_ERR_UNSUPPORTED, "maxItems"}, /* past int64: refused, never cast (a fuzzer's find) */
        {"{\"type\":\"array\",\"maxItems\":1.5}", KVB_ERR_INVALID, "maxItems"},
        {"{\"type\":\"string\",\"minItems\":2}", KVB_ERR_UNSUPPORTED, "minItems"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", KVB_ERR_INVALID, "no integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *gb = (char *)1;
        size_t n = 7;
        kvb_status st = kvb_json_schema_to_gbnf(bad[i].schema, strlen(bad[i].schema), NULL, &gb, &n);
        if (st != bad[i].st) FAILF("%s: status %d, want %d (%s)", bad[i].schema, (int)st, (int)bad[i].st, kvb_last_error());
        if (gb != (char *)1 || n != 7) FAILF("%s: outputs changed on failure", bad[i].schema);
        if (!strstr(kvb_last_error(), bad[i].want)) FAILF("%s: message '%s' lacks '%s'", bad[i].schema, kvb_last_error(), bad[i].want);
    }
    /* prefixes: every rule starts with it, the value is <prefix>root */
    char *gb;
    size_t n;
    CHECK_OK(kvb_json_schema_to_gbnf(NULL, 0, "tool-", &gb, &n));
    CHECK(strlen(gb) == n);
    for (const char *l = gb; *l; l = strchr(l, '\n') + 1) {
        if (strncmp(l, "tool-", 5)) FAILF("rule without the prefix: %.40s", l);
        if (!strchr(l, '\n')) break;
    }
    struct kvb_grammar *g;
    CHECK_OK(kvb_grammar_parse(gb, n, "tool-root", &g));
    CHECK_EQ_INT(match_text(g, "[1,{\"a\":null}]", 14), 1);
    kvb_grammar_free(g);
    kvb_buffer_free(gb);
    CHECK_STATUS(kvb_json_schema_to_gbnf("{}", 2, "bad prefix", &gb, &n), KVB_ERR_INVALID);
    /* bounded whitespace: at most one newline and 20 spaces between tokens */
    g = schema_grammar("{\"type\":\"array\"}", NULL);
    CHECK(g);
    CHECK_EQ_INT(match_text(g, "[\n                    1]", 24), 1);
    CHECK_EQ_INT(match_text(g, "[\n                     1]", 25), 0);
    CHECK_EQ_INT(match_text(g, "[  1]", 5), 0);
    kvb_grammar_free(g);
}

/* ---- caches rebuilt, allocation failures ---- */

TEST(matcher_cache_rebuild) {
    /* every count of the repetition is its own state: thousands of states, so the caches are rebuilt many times */
    struct kvb_grammar *g = parse("root ::= ([a-c] | \"é\"){0,5000} \"!\"");
    CHECK(g);
    struct kvb_vocab *v = byte_vocab();
    struct kvb_grammar_vocab *gv;
    CHECK_OK(kvb_grammar_vocab_new(v, &gv));
    struct kvb_matcher *m;
    CHECK_OK(kvb_matcher_new(g, gv, &m));
    float lg[258];
    int32_t na;
    for (int i = 0; i < 4000; i++) {
        if (i % 500 == 7) {
            CHECK_EQ_INT(check_mask(m, v, lg, &na), 1);
            CHECK_EQ_INT(na, 5); /* a b c, é's lead byte, ! */
            CHECK_OK(kvb_matcher_accept_bytes(m, "\xC3", 1)); /* a character split around a rebuild */
            CHECK_EQ_INT(check_mask(m, v, lg, &na), 1);
            CHECK_EQ_INT(na, 1);
            CHECK_OK(kvb_matcher_accept(m, 0xA9));
        } else CHECK_OK(kvb_matcher_accept_bytes(m, i % 3 ? "a" : "c", 1));
    }
    CHECK(!kvb_matcher_can_end(m));
    CHECK_OK(kvb_matcher_accept_bytes(m, "!", 1));
    CHECK(kvb_matcher_must_end(m));
    CHECK_OK(kvb_matcher_accept(m, 257));
    CHECK_STATUS(kvb_matcher_accept_bytes(m, "a", 1), KVB_ERR_INVALID);
    kvb_matcher_reset(m);
    CHECK(!kvb_matcher_can_end(m));
    CHECK_OK(kvb_matcher_accept_bytes(m, "abc!", 4));
    CHECK(kvb_matcher_must_end(m));
    /* past the bound */
    kvb_matcher_reset(m);
    for (int i = 0; i < 5000; i++) CHECK_OK(kvb_matcher_accept_bytes(m, "b", 1));
    CHECK_STATUS(kvb_matcher_accept_bytes(m, "b", 1), KVB_ERR_INVALID);
    CHECK_OK(kvb_matcher_accept_bytes(m, "!", 1));
    kvb_matcher_free(m);
    kvb_grammar_vocab_free(gv);
    kvb_grammar_free(g);
    synth_free(v);
}

/* issue 48 survivor 2: after the caches are rebuilt (a long repetition), reset must go back to the grammar's start,
 * not to the state id the start had in the old tables (that id now names another state: a valid text was refused).
 * The start here differs from every state inside the repetition: only 'x' may begin. */
TEST(matcher_reset_after_rebuild_stale_start) { /* issue 48 survivor 2 */
    struct kvb_grammar *g = parse("root ::= \"x\" ([a-c] | \"é\"){0,6000} \"!\"");
    CHECK(g);
    struct kvb_vocab *v = byte_vocab();
    struct kvb_grammar_vocab *gv;
    CHECK_OK(kvb_grammar_vocab_new(v, &gv));
    struct kvb_matcher *m;
    CHECK_OK(kvb_matcher_new(g, gv, &m));
    float lg[258];
    int32_t na;
    for (int round = 0; round < 3; round++) {
        /* the start: 'x' alone */
        CHECK_EQ_INT(check_mask(m, v, lg, &na), 1);
        CHECK_EQ_INT(na, 1);
        CHECK(lg['x'] != -INFINITY);
        CHECK_STATUS(kvb_matcher_accept_bytes(m, "a", 1), KVB_ERR_INVALID);
        CHECK_OK(kvb_matcher_accept_bytes(m, "x", 1));
        for (int i = 0; i < 5000; i++) CHECK_OK(kvb_matcher_accept_bytes(m, i % 2 ? "b" : "c", 1));
        if (round == 1) { /* reset in the middle of the repetition, not after an end */
            kvb_matcher_reset(m);
            continue;
        }
        CHECK_OK(kvb_matcher_accept_bytes(m, "!", 1));
        CHECK_OK(kvb_matcher_accept(m, 257));
        kvb_matcher_reset(m);
    }
    CHECK(!kvb_matcher_can_end(m));
    CHECK_STATUS(kvb_matcher_accept_bytes(m, "abc!", 4), KVB_ERR_INVALID);
    CHECK_OK(kvb_matcher_accept_bytes(m, "xabc!", 5));
    CHECK(kvb_matcher_must_end(m));
    CHECK_OK(kvb_matcher_accept(m, 257));
    kvb_matcher_free(m);
    kvb_grammar_vocab_free(gv);
    kvb_grammar_free(g);
    synth_free(v);
}

/* issue 48 survivor 3: a clone of an ended matcher is ended too: a second end-of-generation, more text or any token is
 * refused, and its mask allows nothing, as on the original. */
TEST(matcher_clone_of_ended_is_ended) { /* issue 48 survivor 3 */
    struct kvb_grammar *g = parse("root ::= \"a\"+");
    CHECK(g);
    struct kvb_vocab *v = byte_vocab();
    struct kvb_grammar_vocab *gv;
    CHECK_OK(kvb_grammar_vocab_new(v, &gv));
    struct kvb_matcher *m, *c = NULL;
    CHECK_OK(kvb_matcher_new(g, gv, &m));
    CHECK_OK(kvb_matcher_accept_bytes(m, "aa", 2));
    CHECK_OK(kvb_matcher_accept(m, 257));
    CHECK_OK(kvb_matcher_clone(m, &c));
    struct kvb_matcher *both[2] = {m, c};
    for (int i = 0; i < 2; i++) {
        struct kvb_matcher *x = both[i];
        CHECK(kvb_matcher_can_end(x));
        CHECK(kvb_matcher_must_end(x));
        CHECK(!kvb_matcher_allows(x, 257));
        CHECK(!kvb_matcher_allows(x, 'a'));
        float lg[258];
        for (int k = 0; k < 258; k++) lg[k] = 0;
        CHECK_OK(kvb_matcher_mask(x, lg));
        for (int k = 0; k < 258; k++)
            if (lg[k] == 0) FAILF("matcher %d: token %d allowed after the end", i, k);
        CHECK_STATUS(kvb_matcher_accept(x, 257), KVB_ERR_INVALID);
        CHECK_STATUS(kvb_matcher_accept(x, 'a'), KVB_ERR_INVALID);
        CHECK_STATUS(kvb_matcher_accept_bytes(x, "a", 1), KVB_ERR_INVALID);
    }
    /* a clone taken before the end is not ended, and ends on its own */
    kvb_matcher_free(c);
    kvb_matcher_reset(m);
    CHECK_OK(kvb_matcher_accept_bytes(m, "a", 1));
    CHECK_OK(kvb_matcher_clone(m, &c));
    CHECK(kvb_matcher_allows(c, 257));
    CHECK_OK(kvb_matcher_accept(c, 257));
    CHECK_STATUS(kvb_matcher_accept(c, 257), KVB_ERR_INVALID);
    CHECK_OK(kvb_matcher_accept_bytes(m, "a", 1)); /* the original goes on */
    kvb_matcher_free(c);
    kvb_matcher_free(m);
    kvb_grammar_vocab_free(gv);
    kvb_grammar_free(g);
    synth_free(v);
}

static long g_calls, g_fail_at, g_live;
static bool g_suspend;
static void *t_malloc(size_t n, void *u) {
    (void)u;
    void *p = NULL;
    if (g_suspend || ++g_calls != g_fail_at) {
        p = malloc(n);
        if (p) g_live++;
    }
    return p;
}
static void t_free(void *p, void *u) {
    (void)u;
    if (!p) return;
    g_live--;
    free(p);
}

/* schema -> GBNF -> grammar -> trie -> matcher -> masks and bytes; 0 done, 1 stopped by a failed allocation
 * (reported as KVB_ERR_NOMEM, nothing changed), -1 wrong */
static int oom_scenario(const struct kvb_vocab *v, int32_t want_first) {
    static const char schema[] = "{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\",\"maxLength\":4},"
                                 "\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99}},\"required\":[\"k\"]}";
    static const char doc[] = "{\"k\":\"ab\xC3\xA9\",\"n\":42}";
    char *gb = NULL;
    size_t n;
    struct kvb_grammar *g = NULL;
    struct kvb_grammar_vocab *gv = NULL;
    struct kvb_matcher *m = NULL;
    int r = 1;
    kvb_status st = kvb_json_schema_to_gbnf(schema, sizeof schema - 1, NULL, &gb, &n);
    if (st == KVB_OK) st = kvb_grammar_parse(gb, n, NULL, &g);
    if (st == KVB_OK) st = kvb_grammar_vocab_new(v, &gv);
    if (st == KVB_OK) st = kvb_matcher_new(g, gv, &m);
    if (st != KVB_OK) { r = st == KVB_ERR_NOMEM ? 1 : -1; goto done; }
    float lg[400];
    for (int i = 0; i < v->n; i++) lg[i] = 0;
    st = kvb_matcher_mask(m, lg);
    if (st == KVB_ERR_NOMEM) { /* unchanged: the same mask without the failure */
        g_suspend = true;
        st = kvb_matcher_mask(m, lg);
        g_suspend = false;
    }
    int32_t na = 0;
    for (int i = 0; i < v->n; i++) na += lg[i] == 0;
    if (st != KVB_OK || na != want_first) { r = -1; goto done; }
    for (size_t i = 0; i < sizeof doc - 1; i++) {
        st = kvb_matcher_accept_bytes(m, doc + i, 1);
        if (st == KVB_ERR_NOMEM) {
            g_suspend = true;
            st = kvb_matcher_accept_bytes(m, doc + i, 1);
            g_suspend = false;
        }
        if (st != KVB_OK) { r = -1; goto done; }
    }
    r = kvb_matcher_can_end(m) && !kvb_matcher_must_end(m) ? 0 : -1; /* trailing whitespace may follow */
done:
    kvb_matcher_free(m);
    kvb_grammar_vocab_free(gv);
    kvb_grammar_free(g);
    kvb_buffer_free(gb);
    return r;
}

TEST(allocation_failures) {
    struct kvb_vocab *v = synth_vocab();
    struct kvb_allocator a = {t_malloc, t_free, NULL};
    int r;
    struct kvb_grammar *g = schema_grammar("{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\",\"maxLength\":4},"
                                           "\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99}},\"required\":[\"k\"]}", NULL);
    struct kvb_grammar_vocab *gv;
    struct kvb_matcher *m;
    CHECK_OK(kvb_grammar_vocab_new(v, &gv));
    CHECK_OK(kvb_matcher_new(g, gv, &m));
    float lg[400];
    for (int i = 0; i < v->n; i++) lg[i] = 0;
    CHECK_OK(kvb_matcher_mask(m, lg));
    int32_t want = 0;
    for (int i = 0; i < v->n; i++) want += lg[i] == 0;
    kvb_matcher_free(m);
    kvb_grammar_vocab_free(gv);
    kvb_grammar_free(g);
    CHECK(want > 0);
    int failures = 0;
    for (long k = 1;; k++) {
        g_calls = 0;
        g_fail_at = k;
        g_live = 0;
        kvb_allocator_set(&a);
        r = oom_scenario(v, want);
        kvb_allocator_set(NULL);
        if (g_live != 0) FAILF("allocation %ld failing: %ld blocks leaked", k, g_live);
        if (r < 0) FAILF("allocation %ld failing: wrong result (%s)", k, kvb_last_error());
        if (r == 0 && g_calls < k) break; /* the failure point is past the whole scenario */
        failures++;
    }
    printf("  %d allocation failure points, each reported and leak-free\n", failures);
    CHECK(failures > 20);
    synth_free(v);
}

int main(void) {
    RUN(gbnf_accepts);
    RUN(gbnf_refuses);
    RUN(gbnf_limits);
    RUN(gbnf_many_rules_linear);
    RUN(matcher_vs_reference);
    RUN(matcher_utf8_and_state);
    RUN(mask_synthetic_vocab);
    RUN(mask_llama_spm_vocab);
    RUN(mask_gpt2_vocab);
    RUN(schema_known_documents);
    RUN(schema_int_range_one_middle_digit);
    RUN(schema_random_walks);
    RUN(schema_refusals);
    RUN(schema_compact);
    RUN(schema_size_limits_and_messages);
    RUN(matcher_cache_rebuild);
    RUN(matcher_reset_after_rebuild_stale_start);
    RUN(matcher_clone_of_ended_is_ended);
    RUN(allocation_failures);
    return test_summary();
}

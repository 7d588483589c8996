/*
 * bpe.c — byte-level BPE (tokenizer.ggml.model = "gpt2"). kvb_vocab_tokenize
 * (vocab.c) splits the text at special tokens; each fragment between them is
 * pre-tokenized here by the regular expressions llama.cpp's llm_tokenizer_bpe
 * lists for the vocabulary's tokenizer.ggml.pre — written as scanners over
 * code points that try each expression's alternatives in order, as a
 * backtracking regex engine would. Where llama.cpp lists several expressions,
 * each splits every piece the one before left, and the text between two
 * matches is a piece of its own:
 *
 *   gpt-2      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   llama-bpe  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
 *   dbrx         | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   smaug-bpe
 *   qwen2      as llama-bpe with \p{N} (one digit at a time)
 *   qwen35     as qwen2 with marks joining letters:
 *                (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}
 *                | ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   smollm     \p{N}, then gpt-2
 *   refact     the same
 *   starcoder  the same
 *   default    [\p{P}\$\+<=>\^~\|]+, then gpt-2, then \p{N}+, then [0-9][0-9][0-9]
 *   gpt-4o     [^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?|\p{N}{1,3}
 *                | ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *              with C = (?i:'s|'t|'re|'ve|'m|'ll|'d)
 *   tekken     as gpt-4o without C, and \p{N} (one digit at a time)
 *   gemma4     [^\n]+|[\n]+ (runs of newlines and the text between)
 *
 * U and W: the published gpt-4o / tekken expressions have
 * [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}]; llama.cpp
 * runs them as (?=\p{L})[^a-z] and (?=\p{L})[^A-Z], and so does kvbound, for
 * llama.cpp's ids: U is a letter other than a-z, W a letter other than A-Z
 * (so a non-ASCII letter is both), and a mark (\p{M}) is neither: it falls in
 * [^\s\p{L}\p{N}]. qwen35's \p{M} is the general category M* (Mn, Mc,
 * Me: combining marks, vowel signs, variation selectors; unicode_tables.c)
 * code point by code point: llama.cpp runs that expression with a scanner of
 * its own, as the published expression reads (its std::regex fallback, which
 * stands every non-ASCII code point in for one byte of its category, is not
 * used for it), so a mark extends the letter run it follows, and a run may
 * start with a mark or with one other character before a letter or mark.
 * \s is Unicode White_Space; "default"'s \p{P} is the
 * general category P* (unicode_tables.c), the rest of that class ASCII.
 *
 * Each piece's bytes are mapped to GPT-2's printable code points and merged
 * by rank (lowest first, ties leftmost, lazy invalidation in a heap).
 * ignore_merges (llama-bpe, tekken) takes a whole piece that is already a
 * token as is.
 *
 * gemma4 (tokenizer.ggml.model "gemma4", llama.cpp's LLAMA_VOCAB_PRE_TYPE_GEMMA4)
 * is BPE in SentencePiece's clothes: no byte mapping. Each fragment is first
 * read as llama.cpp reads it: every space becomes "▁" (U+2581), and the text
 * is decoded leniently to code points and written back (a byte that starts
 * no sequence becomes U+FFFD, an overlong form the code point it spells;
 * where llama.cpp would abort, on a sequence above U+10FFFF or an overlong
 * space, kvbound writes U+FFFD and "▁"). The pieces (newline runs and the
 * text between) are merged by rank over their UTF-8 characters; a piece of
 * newlines only that is a token is taken whole. A final symbol that is not
 * a token falls back to its bytes' "<0xNN>" tokens (upper-case hex, looked
 * up by text; a byte without one is dropped, as llama.cpp drops it).
 * Decoding: "▁" back to a space, a BYTE token to its byte, USER_DEFINED
 * text as is, UNKNOWN and untyped tokens to nothing.
 */
#include "tokenizer.h"
#include "unicode.h"

#include <stdlib.h>

/* ---- pre-tokenizers ---- */

static bool is_l(uint32_t c) { return kvb_cp_is_letter(c); }
static bool is_n(uint32_t c) { return kvb_cp_is_number(c); }
static bool is_s(uint32_t c) { return kvb_cp_is_space(c); }
static bool is_other(uint32_t c) { return !is_s(c) && !is_l(c) && !is_n(c); }
static bool is_lm(uint32_t c) { return is_l(c) || kvb_cp_is_mark(c); }           /* [\p{L}\p{M}] */
static bool is_other_m(uint32_t c) { return !is_s(c) && !is_lm(c) && !is_n(c); } /* [^\s\p{L}\p{M}\p{N}] */
static bool is_nl(uint32_t c) { return c == '\r' || c == '\n'; }
static bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
static bool is_upper_ish(uint32_t c) { return is_l(c) && !(c >= 'a' && c <= 'z'); } /* U: (?=\p{L})[^a-z] */
static bool is_lower_ish(uint32_t c) { return is_l(c) && !(c >= 'A' && c <= 'Z'); } /* W: (?=\p{L})[^A-Z] */
static uint32_t lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* default's first class [\p{P}\$\+<=>\^~\|]: every ASCII punctuation mark or
 * symbol but '`', and P* beyond ASCII. */
static bool is_default_punct(uint32_t c) {
    if (c < 0x80) return c > 0x20 && c < 0x7F && c != '`' && !is_digit(c) && !(c >= 'A' && c <= 'Z') && !(c >= 'a' && c <= 'z');
    return kvb_cp_is_punct(c);
}

/* Contraction at i: returns its length (2 or 3) or 0. */
static int contraction(const uint32_t *c, int i, int n, bool ci) {
    if (i + 1 >= n || c[i] != '\'') return 0;
    uint32_t a = ci ? lower(c[i + 1]) : c[i + 1];
    uint32_t b = i + 2 < n ? (ci ? lower(c[i + 2]) : c[i + 2]) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* Whitespace alternatives shared by all families: \s+(?!\S) then \s+. */
static int ws_tail(const uint32_t *c, int i, int n) {
    int k = i;
    while (k < n && is_s(c[k])) k++;
    if (k == n) return k - i;          /* end of text: (?!\S) holds */
    if (k - i >= 2) return k - 1 - i;  /* leave the last space to the next piece */
    return k - i;                      /* \s+ */
}

/* \s*[\r\n]+|\s+(?!\S)|\s+ (llama-bpe, qwen2, gpt-4o, tekken) at a space. */
static int ws_nl_tail(const uint32_t *c, int i, int n) {
    int k = i, last_nl = -1;
    while (k < n && is_s(c[k])) {
        if (is_nl(c[k])) last_nl = k;
        k++;
    }
    if (last_nl >= 0) return last_nl + 1 - i; /* \s* gives back up to the last newline */
    return ws_tail(c, i, n);
}

static int scan_gpt2(const uint32_t *c, int i, int n) {
    int m = contraction(c, i, n, false);
    if (m) return m;
    int j = i + (c[i] == ' ' && i + 1 < n ? 1 : 0);
    if (is_l(c[j])) { while (j < n && is_l(c[j])) j++; return j - i; }
    if (is_n(c[j])) { while (j < n && is_n(c[j])) j++; return j - i; }
    if (is_other(c[j])) { while (j < n && is_other(c[j])) j++; return j - i; }
    if (is_s(c[i])) return ws_tail(c, i, n);
    return 1;
}

static int scan_llama3(const uint32_t *c, int i, int n, int max_digits) {
    int m = contraction(c, i, n, true);
    if (m) return m;
    if (is_l(c[i]) || (!is_nl(c[i]) && !is_l(c[i]) && !is_n(c[i]) && i + 1 < n && is_l(c[i + 1]))) {
        int j = i + 1;
        while (j < n && is_l(c[j])) j++;
        return j - i;
    }
    if (is_n(c[i])) {
        int j = i;
        while (j < n && j - i < max_digits && is_n(c[j])) j++;
        return j - i;
    }
    int j = i + (c[i] == ' ' && i + 1 < n && is_other(c[i + 1]) ? 1 : 0);
    if (is_other(c[j])) {
        while (j < n && is_other(c[j])) j++;
        while (j < n && is_nl(c[j])) j++;
        return j - i;
    }
    if (is_s(c[i])) return ws_nl_tail(c, i, n);
    return 1;
}

/* qwen35: qwen2's alternatives with [\p{L}\p{M}] for \p{L}. */
static int scan_qwen35(const uint32_t *c, int i, int n) {
    int m = contraction(c, i, n, true);
    if (m) return m;
    /* [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+: a mark may be the optional lead too */
    if (!is_nl(c[i]) && !is_n(c[i]) && (is_lm(c[i]) || (i + 1 < n && is_lm(c[i + 1])))) {
        int j = i + 1;
        while (j < n && is_lm(c[j])) j++;
        return j - i;
    }
    if (is_n(c[i])) return 1;
    int j = i + (c[i] == ' ' && i + 1 < n && is_other_m(c[i + 1]) ? 1 : 0);
    if (is_other_m(c[j])) {
        while (j < n && is_other_m(c[j])) j++;
        while (j < n && is_nl(c[j])) j++;
        return j - i;
    }
    if (is_s(c[i])) return ws_nl_tail(c, i, n);
    return 1;
}

/* gpt-4o (max_digits 3, contractions) and tekken (1, none). */
static int scan_gpt4o(const uint32_t *c, int i, int n, int max_digits, bool contractions) {
    /* [^\r\n\p{L}\p{N}]? then letters: such a first character can only lead */
    int j = i + (!is_nl(c[i]) && !is_l(c[i]) && !is_n(c[i]) && i + 1 < n ? 1 : 0);
    if (is_l(c[j])) {
        int u = j;
        while (u < n && is_upper_ish(c[u])) u++;
        /* U*W+: U* gives back one letter at a time until W+ can start, so W+
         * starts at the last k <= u with a W there; none: U+W*, where W* is
         * then empty (c[u] is no W), so the U run alone. */
        int k = u;
        while (k >= j && !(k < n && is_lower_ish(c[k]))) k--;
        int e = u;
        if (k >= j)
            for (e = k; e < n && is_lower_ish(c[e]);) e++;
        if (contractions) e += contraction(c, e, n, true);
        return e - i;
    }
    if (is_n(c[i])) {
        int k = i;
        while (k < n && k - i < max_digits && is_n(c[k])) k++;
        return k - i;
    }
    j = i + (c[i] == ' ' && i + 1 < n && is_other(c[i + 1]) ? 1 : 0);
    if (is_other(c[j])) { /*  ?[^\s\p{L}\p{N}]+[\r\n/]* */
        while (j < n && is_other(c[j])) j++;
        while (j < n && (is_nl(c[j]) || c[j] == '/')) j++;
        return j - i;
    }
    if (is_s(c[i])) return ws_nl_tail(c, i, n);
    return 1;
}

/* Piece ends, in code points, appended to end[] (one per piece: at most n). */
struct cuts {
    int32_t *end;
    int n;
};
static void cut(struct cuts *o, int at) { o->end[o->n++] = at; }

/* default's last two expressions on the piece c[a..b): runs of \p{N} and the
 * text between them, then in each, leftmost [0-9][0-9][0-9] matches without
 * overlap and the text between them. */
static void default_numbers(const uint32_t *c, int a, int b, struct cuts *o) {
    for (int i = a; i < b;) {
        const bool num = is_n(c[i]);
        int e = i;
        while (e < b && is_n(c[e]) == num) e++;
        int g = i; /* start of the text not yet cut */
        for (int k = i; k + 3 <= e;) {
            if (is_digit(c[k]) && is_digit(c[k + 1]) && is_digit(c[k + 2])) {
                if (k > g) cut(o, k);
                cut(o, k + 3);
                k += 3;
                g = k;
            } else {
                k++;
            }
        }
        if (e > g) cut(o, e);
        i = e;
    }
}

/* Splits c[0..n) by pre's expressions; returns the number of pieces. */
static int split(enum kvb_pre_type pre, const uint32_t *c, int n, int32_t *end) {
    struct cuts o = {end, 0};
    switch (pre) {
    case KVB_PRE_SMOLLM:
    case KVB_PRE_REFACT:
    case KVB_PRE_STARCODER: /* \p{N}, then gpt-2 on each piece between */
        for (int i = 0; i < n;) {
            if (is_n(c[i])) {
                cut(&o, ++i);
                continue;
            }
            int e = i;
            while (e < n && !is_n(c[e])) e++;
            for (int j = i; j < e;) {
                j += scan_gpt2(c + i, j - i, e - i);
                cut(&o, j);
            }
            i = e;
        }
        break;
    case KVB_PRE_DEFAULT: /* punctuation runs and the text between, then gpt-2, then the numbers */
        for (int i = 0; i < n;) {
            const bool p = is_default_punct(c[i]);
            int e = i;
            while (e < n && is_default_punct(c[e]) == p) e++;
            for (int j = i; j < e;) {
                int k = scan_gpt2(c + i, j - i, e - i);
                default_numbers(c, j, j + k, &o);
                j += k;
            }
            i = e;
        }
        break;
    case KVB_PRE_GEMMA4: /* [^\n]+|[\n]+ */
        for (int i = 0; i < n;) {
            const bool nl = c[i] == '\n';
            while (i < n && (c[i] == '\n') == nl) i++;
            cut(&o, i);
        }
        break;
    default:
        for (int i = 0; i < n;) {
            int k;
            switch (pre) {
            case KVB_PRE_GPT2: k = scan_gpt2(c, i, n); break;
            case KVB_PRE_QWEN2: k = scan_llama3(c, i, n, 1); break;
            case KVB_PRE_QWEN35: k = scan_qwen35(c, i, n); break;
            case KVB_PRE_GPT4O: k = scan_gpt4o(c, i, n, 3, true); break;
            case KVB_PRE_TEKKEN: k = scan_gpt4o(c, i, n, 1, false); break;
            default: k = scan_llama3(c, i, n, 3); break; /* llama-bpe, dbrx, smaug-bpe */
            }
            i += k;
            cut(&o, i);
        }
        break;
    }
    return o.n;
}

/* text[0..len) as code points: cp[k] starts at byte off[k], off[n] = len. */
static int decode_text(const char *text, size_t len, uint32_t *cp, int32_t *off) {
    int n = 0;
    for (size_t at = 0; at < len;) {
        int l;
        cp[n] = kvb_utf8_decode((const uint8_t *)text + at, len - at, &l);
        off[n++] = (int32_t)at;
        at += (size_t)l;
    }
    off[n] = (int32_t)len;
    return n;
}

kvb_status kvb_bpe_pre_split(enum kvb_pre_type pre, const char *text, size_t len, size_t **ends, int32_t *n_out) {
    if ((!text && len) || !ends || !n_out || (unsigned)pre >= KVB_PRE_COUNT || len >= (size_t)INT32_MAX)
        return kvb_fail(KVB_ERR_INVALID, "bpe_pre_split: bad arguments");
    uint32_t *cp = kvb_malloc(sizeof(uint32_t) * (len + 1));
    int32_t *off = kvb_malloc(sizeof(int32_t) * (len + 1));
    int32_t *end = kvb_malloc(sizeof(int32_t) * (len + 1));
    size_t *e = kvb_malloc(sizeof(size_t) * (len + 1));
    if (!cp || !off || !end || !e) {
        kvb_free(cp); kvb_free(off); kvb_free(end); kvb_free(e);
        return kvb_fail(KVB_ERR_NOMEM, "bpe_pre_split: out of memory for %zu bytes of text", len);
    }
    const int n = decode_text(text, len, cp, off);
    const int np = split(pre, cp, n, end);
    for (int k = 0; k < np; k++) e[k] = (size_t)off[end[k]];
    kvb_free(cp); kvb_free(off); kvb_free(end);
    *ends = e;
    *n_out = np;
    return KVB_OK;
}

/* ---- merges ---- */

/* Rank of merging a|b, or -1. */
static int32_t merge_rank(const struct kvb_vocab *v, const char *a, size_t na, const char *b, size_t nb) {
    char key[512];
    if (na + nb + 1 > sizeof key) return -1;
    memcpy(key, a, na);
    key[na] = ' ';
    memcpy(key + na + 1, b, nb);
    const size_t n = na + nb + 1;
    const uint32_t m = v->merge_cap - 1;
    for (uint32_t h = kvb_fnv1a(key, n) & m;; h = (h + 1) & m) {
        int32_t r = v->merge_hash[h];
        if (r < 0) return -1;
        if (v->merge_off[r + 1] - v->merge_off[r] - 1 == n && memcmp(v->merge_arena + v->merge_off[r], key, n) == 0) return r;
    }
}

kvb_status kvb_bpe_build_merges(struct kvb_vocab *v, const char *const *m, const uint32_t *len, int32_t n, const char *name) {
    size_t arena = 0;
    for (int32_t i = 0; i < n; i++) arena += len[i] + 1;
    v->merge_arena = kvb_malloc(arena ? arena : 1);
    v->merge_off = kvb_malloc(sizeof(uint32_t) * ((size_t)n + 1));
    v->merge_cap = 64;
    while (v->merge_cap < (uint32_t)n * 2u) v->merge_cap *= 2;
    v->merge_hash = kvb_malloc(sizeof(int32_t) * v->merge_cap);
    if (!v->merge_arena || !v->merge_off || !v->merge_hash) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory for %d merges", name, (int)n);
    for (uint32_t i = 0; i < v->merge_cap; i++) v->merge_hash[i] = -1;
    uint32_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        v->merge_off[i] = at;
        memcpy(v->merge_arena + at, m[i], len[i]);
        at += len[i];
        v->merge_arena[at++] = 0;
        const uint32_t mask = v->merge_cap - 1;
        uint32_t h = kvb_fnv1a(m[i], len[i]) & mask;
        bool dup = false;
        while (v->merge_hash[h] >= 0) {
            int32_t r = v->merge_hash[h];
            if (v->merge_off[r + 1] - v->merge_off[r] - 1 == len[i] && memcmp(v->merge_arena + v->merge_off[r], m[i], len[i]) == 0) { dup = true; break; }
            h = (h + 1) & mask;
        }
        v->merge_off[i + 1] = at;
        if (!dup) v->merge_hash[h] = i; /* the first (best) rank wins */
    }
    v->merge_off[n] = at;
    v->n_merges = n;
    return KVB_OK;
}

struct bsym {
    int32_t start, n; /* bytes in the mapped string */
    int32_t prev, next;
};

struct bgram {
    int32_t left, right, rank, size;
};

static bool bg_less(const struct bgram *x, const struct bgram *y) { return x->rank < y->rank || (x->rank == y->rank && x->left < y->left); }

static void push(struct bgram *h, int32_t *n, struct bgram b) {
    int32_t i = (*n)++;
    h[i] = b;
    while (i > 0 && bg_less(&h[i], &h[(i - 1) / 2])) {
        struct bgram t = h[i]; h[i] = h[(i - 1) / 2]; h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static struct bgram pop(struct bgram *h, int32_t *n) {
    struct bgram top = h[0];
    h[0] = h[--(*n)];
    for (int32_t i = 0;;) {
        int32_t l = 2 * i + 1, r = l + 1, b = i;
        if (l < *n && bg_less(&h[l], &h[b])) b = l;
        if (r < *n && bg_less(&h[r], &h[b])) b = r;
        if (b == i) break;
        struct bgram t = h[i]; h[i] = h[b]; h[b] = t;
        i = b;
    }
    return top;
}

static void try_pair(const struct kvb_vocab *v, const char *w, const struct bsym *s, struct bgram *h, int32_t *nh, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    int32_t rank = merge_rank(v, w + s[l].start, (size_t)s[l].n, w + s[r].start, (size_t)s[r].n);
    if (rank >= 0) push(h, nh, (struct bgram){l, r, rank, s[l].n + s[r].n});
}

/* Bytes of the UTF-8 character a lead byte starts, as llama.cpp's
 * unicode_len_utf8 counts them (by its top four bits). */
static int32_t lead_len(uint8_t c) { return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

/* gemma4's byte fallback: the "<0xNN>" token of each byte of t[0..n), a byte without one dropped. */
static void gemma4_bytes(const struct kvb_vocab *v, const char *t, int32_t n, struct kvb_tok_out *o) {
    static const char hex[] = "0123456789ABCDEF";
    for (int32_t k = 0; k < n; k++) {
        const uint8_t b = (uint8_t)t[k];
        const char piece[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        const int32_t id = kvb_vocab_find(v, piece, sizeof piece);
        if (id >= 0) kvb_tok_emit(o, id);
    }
}

/* One pre-token -> symbols -> merges -> ids. Byte-level BPE: each raw byte
 * is one symbol, GPT-2's code point for it. gemma4: the (normalized) text as
 * it is, one symbol per UTF-8 character. */
static void bpe_word(const struct kvb_vocab *v, const uint8_t *raw, size_t len, struct kvb_tok_out *o) {
    const bool utf8 = v->pre == KVB_PRE_GEMMA4;
    char *w = kvb_malloc(len * 2 + 1); /* mapped code points are < 0x800: at most 2 bytes each */
    struct bsym *s = kvb_malloc(sizeof *s * (len + 1));
    struct bgram *h = kvb_malloc(sizeof *h * (len * 2 + 2));
    if (!w || !s || !h) { kvb_free(w); kvb_free(s); kvb_free(h); o->oom = true; return; }
    int32_t wl = 0, ns = 0, nh = 0;
    bool newlines = utf8;
    for (size_t i = 0; i < len;) {
        int k;
        if (utf8) {
            k = (int)KVB_MIN((size_t)lead_len(raw[i]), len - i);
            memcpy(w + wl, raw + i, (size_t)k);
            newlines &= raw[i] == '\n';
            i += (size_t)k;
        } else {
            k = kvb_utf8_encode(kvb_byte_to_cp(raw[i++]), w + wl);
        }
        s[ns] = (struct bsym){wl, k, ns - 1, -1};
        if (ns) s[ns - 1].next = ns;
        ns++;
        wl += k;
    }
    /* ignore_merges: a piece that is a token is taken whole; gemma4 does so for newline runs */
    int32_t whole = v->ignore_merges || (newlines && len) ? kvb_vocab_find(v, w, (size_t)wl) : -1;
    if (whole >= 0) {
        kvb_tok_emit(o, whole);
    } else {
        for (int32_t i = 1; i < ns; i++) try_pair(v, w, s, h, &nh, i - 1, i);
        while (nh) {
            struct bgram b = pop(h, &nh);
            struct bsym *l = &s[b.left], *r = &s[b.right];
            if (l->n == 0 || r->n == 0 || l->n + r->n != b.size || l->next != b.right) continue;
            l->n += r->n;
            r->n = 0;
            l->next = r->next;
            if (r->next >= 0) s[r->next].prev = b.left;
            try_pair(v, w, s, h, &nh, l->prev, b.left);
            try_pair(v, w, s, h, &nh, b.left, l->next);
        }
        for (int32_t i = 0; i != -1 && ns; i = s[i].next) {
            int32_t id = kvb_vocab_find(v, w + s[i].start, (size_t)s[i].n);
            if (id >= 0) {
                kvb_tok_emit(o, id);
                continue;
            }
            if (utf8) {
                gemma4_bytes(v, w + s[i].start, s[i].n, o);
                continue;
            }
            for (int32_t k = 0; k < s[i].n;) { /* not a token: its characters one by one */
                int cl;
                kvb_utf8_decode((const uint8_t *)w + s[i].start + k, (size_t)(s[i].n - k), &cl);
                int32_t cid = kvb_vocab_find(v, w + s[i].start + k, (size_t)cl);
                if (cid >= 0) kvb_tok_emit(o, cid);
                else if (v->unk >= 0) kvb_tok_emit(o, v->unk);
                k += cl;
            }
        }
    }
    kvb_free(w);
    kvb_free(s);
    kvb_free(h);
}

/* gemma4: text[0..len) as llama.cpp's encoder reads it (the header): spaces
 * as "▁", code points decoded leniently and written back. NULL: no memory. */
static char *gemma4_normalize(const char *text, size_t len, size_t *out_len) {
    char *t = kvb_malloc(len * 3 + 1); /* a byte becomes at most 3 ("▁", U+FFFD) */
    if (!t) return NULL;
    size_t n = 0;
    for (size_t at = 0; at < len;) {
        int l;
        uint32_t cp = kvb_utf8_decode((const uint8_t *)text + at, len - at, &l);
        at += (size_t)l;
        if (cp == ' ') cp = 0x2581;
        else if (cp > 0x10FFFF) cp = 0xFFFD; /* starts no sequence (kvb_utf8_decode), or above Unicode */
        n += (size_t)kvb_utf8_encode(cp, t + n);
    }
    *out_len = n;
    return t;
}

/* Pre-tokenizes text[0..len) (one raw fragment) and encodes every piece. */
void kvb_bpe_fragment(const struct kvb_vocab *v, const char *text, size_t len, struct kvb_tok_out *o) {
    if (!len) return;
    char *norm = NULL;
    if (v->pre == KVB_PRE_GEMMA4 && !(text = norm = gemma4_normalize(text, len, &len))) { o->oom = true; return; }
    uint32_t *cp = kvb_malloc(sizeof(uint32_t) * (len + 1));
    int32_t *off = kvb_malloc(sizeof(int32_t) * (len + 1));
    int32_t *end = kvb_malloc(sizeof(int32_t) * (len + 1));
    if (!cp || !off || !end) { kvb_free(cp); kvb_free(off); kvb_free(end); kvb_free(norm); o->oom = true; return; }
    const int n = decode_text(text, len, cp, off);
    const int np = split(v->pre, cp, n, end);
    for (int k = 0, s = 0; k < np; s = end[k++]) bpe_word(v, (const uint8_t *)text + off[s], (size_t)(off[end[k]] - off[s]), o);
    kvb_free(cp);
    kvb_free(off);
    kvb_free(end);
    kvb_free(norm);
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* gemma4's pieces (the header): CONTROL and UNUSED never get here (kvb_vocab_piece). */
static size_t gemma4_piece(const struct kvb_vocab *v, int32_t id, char *buf, size_t cap) {
    const char *t = kvb_vocab_text(v, id);
    const uint32_t len = kvb_vocab_len(v, id);
    switch (v->type[id]) {
    case KVB_TOKEN_USER_DEFINED:
        if (cap) memcpy(buf, t, KVB_MIN((size_t)len, cap));
        return len;
    case KVB_TOKEN_BYTE: { /* "<0xNN>": the two digits after "<0x" */
        const int hi = len >= 5 ? hex_digit(t[3]) : -1, lo = len >= 5 ? hex_digit(t[4]) : -1;
        if (hi < 0 || lo < 0) return 0;
        if (cap) buf[0] = (char)(hi * 16 + lo);
        return 1;
    }
    case KVB_TOKEN_NORMAL: {
        size_t n = 0;
        for (uint32_t i = 0; i < len;) {
            const bool space = i + 3 <= len && memcmp(t + i, "\xE2\x96\x81", 3) == 0;
            if (n < cap) buf[n] = space ? ' ' : t[i];
            n++;
            i += space ? 3 : 1;
        }
        return n;
    }
    default: /* UNKNOWN, UNDEFINED: nothing, as llama.cpp */
        return 0;
    }
}

size_t kvb_bpe_piece(const struct kvb_vocab *v, int32_t id, char *buf, size_t cap) {
    if (v->pre == KVB_PRE_GEMMA4) return gemma4_piece(v, id, buf, cap);
    const char *t = kvb_vocab_text(v, id);
    const uint32_t len = kvb_vocab_len(v, id);
    if (v->type[id] == KVB_TOKEN_USER_DEFINED) { /* stored as plain text */
        for (uint32_t i = 0; i < len && i < cap; i++) buf[i] = t[i];
        return len;
    }
    size_t n = 0;
    for (uint32_t i = 0; i < len;) {
        int cl;
        uint32_t c = kvb_utf8_decode((const uint8_t *)t + i, len - i, &cl);
        int b = kvb_cp_to_byte(c);
        if (b >= 0) {
            if (n < cap) buf[n] = (char)b;
            n++;
        } else { /* not a mapped byte: copy as is */
            for (int k = 0; k < cl; k++, n++)
                if (n < cap) buf[n] = t[i + k];
        }
        i += (uint32_t)cl;
    }
    return n;
}

/*
 * ruler.c — RULER's synthetic tasks (NVIDIA/RULER, arXiv 2404.06654),
 * generated in C, deterministic by seed, at any length, and scored as RULER
 * scores them. The library side of `kvbound ruler`: no printing.
 *
 * Generators follow RULER's synthetic.yaml and data/synthetic scripts:
 *   niah_*  needles "One of the special magic {numbers|uuids} for KEY is:
 *           VALUE." in a haystack of noise ("The grass is green. ..."
 *           paragraphs), essay text (needles at sentence boundaries, at depths
 *           drawn from 40 even depths 0..100%) or other needles; keys are
 *           word pairs "w1-w2" (RULER: adjective-noun) or UUIDs, values 7-digit
 *           numbers or UUIDs; RULER's template, singular when one value is
 *           asked, and its answer prefix.
 *   vt      one chain of 4 hops "VAR X = 12345", "VAR Y = VAR X " in noise,
 *           after one worked example (3-letter names) as RULER's few-shot.
 *   cwe     a numbered list: 10 common words 30 times, the others 3 times
 *           (6 and 1 below 4K tokens), after a worked example.
 *   fwe     coded words (6 letters) drawn with the law count(k) =
 *           floor(N k^-2 / zeta(2)), rank 1 being "..." (noise): the answer
 *           is ranks 2..4.
 * Every key, value and variable of a sample is distinct (a hash set of what
 * was drawn). The haystack is sized as RULER sizes it: the largest count of
 * units (essay words, noise paragraphs, distractor needles, listed words,
 * coded words) for which the input's tokens plus tokens_to_generate fit the
 * length, found by doubling then bisection over the caller's token count.
 *
 * kvb_eval_ruler renders a sample through the model's chat template (one user
 * message, then the assistant header and the answer prefix; plain text when
 * the vocabulary has none), prefills it (the policy compresses at the end of
 * the prompt), or with ask_after prefills the context alone and reads the
 * question after the compression, then answers greedily.
 */
#include "../core/core.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

enum kind { K_NIAH, K_VT, K_CWE, K_FWE };
enum hay { H_NOISE, H_ESSAY, H_NEEDLE, H_NONE };
enum typ { T_WORDS, T_NUMBERS, T_UUIDS };

struct task {
    const char *name;
    enum kind kind;
    enum hay hay;
    enum typ tk, tv;
    int nk, nv, nq, ttg;
};

static const struct task k_tasks[KVB_RULER_TASKS] = {
    {"niah_single_1", K_NIAH, H_NOISE, T_WORDS, T_NUMBERS, 1, 1, 1, 128},
    {"niah_single_2", K_NIAH, H_ESSAY, T_WORDS, T_NUMBERS, 1, 1, 1, 128},
    {"niah_single_3", K_NIAH, H_ESSAY, T_WORDS, T_UUIDS, 1, 1, 1, 128},
    {"niah_multikey_1", K_NIAH, H_ESSAY, T_WORDS, T_NUMBERS, 4, 1, 1, 128},
    {"niah_multikey_2", K_NIAH, H_NEEDLE, T_WORDS, T_NUMBERS, 1, 1, 1, 128},
    {"niah_multikey_3", K_NIAH, H_NEEDLE, T_UUIDS, T_UUIDS, 1, 1, 1, 128},
    {"niah_multivalue", K_NIAH, H_ESSAY, T_WORDS, T_NUMBERS, 1, 4, 1, 128},
    {"niah_multiquery", K_NIAH, H_ESSAY, T_WORDS, T_NUMBERS, 4, 1, 4, 128},
    {"vt", K_VT, H_NOISE, T_WORDS, T_NUMBERS, 0, 0, 0, 30},
    {"cwe", K_CWE, H_NONE, T_WORDS, T_WORDS, 0, 0, 0, 120},
    {"fwe", K_FWE, H_NONE, T_WORDS, T_WORDS, 0, 0, 0, 50},
};

static const char k_noise[] = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

const char *kvb_ruler_task_name(int32_t i) { return i >= 0 && i < KVB_RULER_TASKS ? k_tasks[i].name : NULL; }

kvb_status kvb_ruler_task_from_name(const char *name, int32_t *task) {
    if (!name || !task) return kvb_fail(KVB_ERR_INVALID, "ruler: no task name");
    for (int32_t i = 0; i < KVB_RULER_TASKS; i++)
        if (!strcmp(name, k_tasks[i].name)) { *task = i; return KVB_OK; }
    if (!strcmp(name, "qa_1") || !strcmp(name, "qa_2"))
        return kvb_fail(KVB_ERR_INVALID, "ruler: task %s is absent: RULER's QA tasks need SQuAD (qa_1) and HotpotQA (qa_2), which kvbound does not ship", name);
    return kvb_fail(KVB_ERR_INVALID, "ruler: unknown task '%.64s' (niah_single_1..3, niah_multikey_1..3, niah_multivalue, niah_multiquery, vt, cwe, fwe)", name);
}

bool kvb_ruler_task_part(int32_t task) { (void)task; return false; }

/* ---- the corpus ---- */

struct span {
    int64_t at;
    int32_t n;
};

struct kvb_ruler_corpus {
    char *essay;      /* kept text (boilerplate cut), words are spans of it */
    struct span *ew;  /* essay words */
    int64_t n_ew;
    char *wtext;      /* the word list, NUL-separated */
    const char **w;   /* sorted, distinct */
    int64_t n_w;
};

static const char *find(const char *s, size_t n, const char *pat) {
    const size_t m = strlen(pat);
    for (size_t i = 0; i + m <= n; i++)
        if (s[i] == pat[0] && !memcmp(s + i, pat, m)) return s + i;
    return NULL;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The essay's kept text: between each "*** START OF" line and the next
 * "*** END OF" (Project Gutenberg), or all of it when there is none. */
static kvb_status corpus_essay(struct kvb_ruler_corpus *c, const char *t, size_t n) {
    c->essay = kvb_malloc(n + 2);
    if (!c->essay) return kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
    size_t w = 0;
    if (!find(t, n, "*** START OF")) {
        memcpy(c->essay, t, n);
        w = n;
    } else {
        const char *p = t, *end = t + n;
        const char *s;
        while ((s = find(p, (size_t)(end - p), "*** START OF"))) {
            while (s < end && *s != '\n') s++;
            const char *e = find(s, (size_t)(end - s), "*** END OF");
            if (!e) e = end;
            memcpy(c->essay + w, s, (size_t)(e - s));
            w += (size_t)(e - s);
            c->essay[w++] = '\n';
            p = e;
            if (p < end) p++;
        }
    }
    c->essay[w] = 0;
    int64_t cap = 0;
    for (size_t i = 0; i < w;) {
        while (i < w && (unsigned char)c->essay[i] <= ' ') i++;
        size_t j = i;
        while (j < w && (unsigned char)c->essay[j] > ' ') j++;
        if (j > i) {
            if (kvb_grow((void **)&c->ew, &cap, c->n_ew + 1, sizeof *c->ew) != KVB_OK) return kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
            c->ew[c->n_ew++] = (struct span){(int64_t)i, (int32_t)KVB_MIN(j - i, (size_t)1 << 20)};
        }
        i = j;
    }
    return KVB_OK;
}

/* The word list: lines of 3..12 lowercase ASCII letters, sorted, distinct. */
static kvb_status corpus_words(struct kvb_ruler_corpus *c, const char *t, size_t n) {
    c->wtext = kvb_malloc(n + 1);
    if (!c->wtext) return kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
    memcpy(c->wtext, t, n);
    c->wtext[n] = 0;
    int64_t cap = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && c->wtext[j] != '\n') j++;
        size_t e = j;
        if (e > i && c->wtext[e - 1] == '\r') e--;
        bool ok = e - i >= 3 && e - i <= 12;
        for (size_t k = i; k < e && ok; k++) ok = c->wtext[k] >= 'a' && c->wtext[k] <= 'z';
        if (ok) {
            c->wtext[e] = 0;
            if (kvb_grow((void **)&c->w, &cap, c->n_w + 1, sizeof *c->w) != KVB_OK) return kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
            c->w[c->n_w++] = c->wtext + i;
        }
        i = j + 1;
    }
    if (c->n_w) qsort((void *)c->w, (size_t)c->n_w, sizeof *c->w, cmp_str);
    int64_t k = 0;
    for (int64_t i = 0; i < c->n_w; i++)
        if (!k || strcmp(c->w[k - 1], c->w[i])) c->w[k++] = c->w[i];
    c->n_w = k;
    return KVB_OK;
}

kvb_status kvb_ruler_corpus_new(const char *essay, size_t essay_len, const char *words, size_t words_len, struct kvb_ruler_corpus **out) {
    if (!out || (!essay && essay_len) || (!words && words_len)) return kvb_fail(KVB_ERR_INVALID, "ruler: bad corpus arguments");
    struct kvb_ruler_corpus *c = kvb_calloc(1, sizeof *c);
    if (!c) return kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
    kvb_status st = corpus_essay(c, essay ? essay : "", essay_len);
    if (st == KVB_OK) st = corpus_words(c, words ? words : "", words_len);
    if (st != KVB_OK) { kvb_ruler_corpus_free(c); return st; }
    *out = c;
    return KVB_OK;
}

void kvb_ruler_corpus_free(struct kvb_ruler_corpus *c) {
    if (!c) return;
    kvb_free(c->essay); kvb_free(c->ew); kvb_free(c->wtext); kvb_free((void *)c->w);
    kvb_free(c);
}

void kvb_ruler_corpus_size(const struct kvb_ruler_corpus *c, int64_t *n_words, int64_t *n_essay_words) {
    if (n_words) *n_words = c ? c->n_w : 0;
    if (n_essay_words) *n_essay_words = c ? c->n_ew : 0;
}

/* ---- pieces: random numbers, strings, sets ---- */

static uint64_t rnd(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int64_t below(uint64_t *s, int64_t n) { return n > 0 ? (int64_t)(rnd(s) % (uint64_t)n) : 0; }

struct sb {
    char *p;
    int64_t n, cap;
    bool oom;
};
static void sb_put(struct sb *b, const char *s, size_t n) {
    if (b->oom) return;
    if (kvb_grow((void **)&b->p, &b->cap, b->n + (int64_t)n + 1, 1) != KVB_OK) { b->oom = true; return; }
    memcpy(b->p + b->n, s, n);
    b->n += (int64_t)n;
    b->p[b->n] = 0;
}
static void sb_puts(struct sb *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_printf(struct sb *b, const char *fmt, ...) KVB_PRINTF(2, 3);
static void sb_printf(struct sb *b, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) sb_put(b, buf, KVB_MIN((size_t)n, sizeof buf - 1));
}

/* A set of 64-bit hashes (FNV-1a of strings): open addressing, 0 = empty. */
struct hset {
    uint64_t *t;
    int64_t cap, n;
};
static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ? h : 1;
}
/* 1: added, 0: present, -1: out of memory */
static int hset_add(struct hset *h, uint64_t k) {
    if (2 * (h->n + 1) > h->cap) {
        int64_t nc = h->cap ? 2 * h->cap : 64;
        uint64_t *nt = kvb_calloc((size_t)nc, sizeof *nt);
        if (!nt) return -1;
        for (int64_t i = 0; i < h->cap; i++)
            if (h->t[i]) {
                int64_t j = (int64_t)(h->t[i] & (uint64_t)(nc - 1));
                while (nt[j]) j = (j + 1) & (nc - 1);
                nt[j] = h->t[i];
            }
        kvb_free(h->t);
        h->t = nt, h->cap = nc;
    }
    int64_t j = (int64_t)(k & (uint64_t)(h->cap - 1));
    while (h->t[j]) {
        if (h->t[j] == k) return 0;
        j = (j + 1) & (h->cap - 1);
    }
    h->t[j] = k;
    h->n++;
    return 1;
}

/* A random key or value of type t, distinct from every one in seen (64 tries). */
static kvb_status draw(const struct kvb_ruler_corpus *c, enum typ t, uint64_t *rs, struct hset *seen, char *buf, size_t cap) {
    for (int tries = 0; tries < 64; tries++) {
        if (t == T_NUMBERS) {
            snprintf(buf, cap, "%d", (int)(1000000 + below(rs, 9000000)));
        } else if (t == T_WORDS) {
            const int64_t a = below(rs, c->n_w), b = below(rs, c->n_w);
            snprintf(buf, cap, "%s-%s", c->w[a], c->w[b]);
        } else { /* a version 4 UUID */
            uint8_t u[16];
            uint64_t x = rnd(rs), y = rnd(rs);
            for (int i = 0; i < 8; i++) u[i] = (uint8_t)(x >> (8 * i)), u[8 + i] = (uint8_t)(y >> (8 * i));
            u[6] = (uint8_t)((u[6] & 0x0f) | 0x40);
            u[8] = (uint8_t)((u[8] & 0x3f) | 0x80);
            char *o = buf;
            for (int i = 0; i < 16 && cap >= 40; i++) {
                o += snprintf(o, 3, "%02x", u[i]);
                if (i == 3 || i == 5 || i == 7 || i == 9) *o++ = '-';
            }
            *o = 0;
        }
        int r = hset_add(seen, hash_str(buf));
        if (r < 0) return kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
        if (r > 0) return KVB_OK;
    }
    /* every key and value of a sample is distinct (the header's promise): a list too small for that is refused */
    return kvb_fail(KVB_ERR_INVALID, "ruler: no distinct %s after 64 draws: the word list is too small for this many keys and values",
                    t == T_NUMBERS ? "number" : t == T_WORDS ? "word pair" : "UUID");
}

/* k distinct values of 0..n-1, in draw order (k <= n). */
static kvb_status sample_idx(uint64_t *rs, int64_t n, int64_t k, int64_t *out) {
    struct hset h = {0};
    for (int64_t i = 0; i < k; i++) {
        int r;
        do {
            out[i] = below(rs, n);
            r = hset_add(&h, (uint64_t)out[i] + 1);
        } while (r == 0);
        if (r < 0) { kvb_free(h.t); return kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory"); }
    }
    kvb_free(h.t);
    return KVB_OK;
}

static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void shuffle_ptr(uint64_t *rs, const char **a, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        const int64_t j = below(rs, i + 1);
        const char *t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

/* ---- a sample being built ---- */

struct draft {
    struct sb ctx, q, pre;
    char ans[KVB_RULER_MAX_ANSWERS][64];
    int32_t n_ans;
};
static void draft_clear(struct draft *d) {
    d->ctx.n = d->q.n = d->pre.n = 0;
    d->ctx.oom = d->q.oom = d->pre.oom = false;
    sb_puts(&d->ctx, ""), sb_puts(&d->q, ""), sb_puts(&d->pre, "");
    d->n_ans = 0;
}
static void draft_free(struct draft *d) { kvb_free(d->ctx.p); kvb_free(d->q.p); kvb_free(d->pre.p); }

/* Whether an essay word ends a sentence: '.', '!' or '?' before any
 * closing quotes or brackets (ASCII, or a multi-byte closing quote). */
static bool ends_sentence(const char *s, int32_t e) {
    for (;;) {
        if (e > 0 && strchr("\"')]", s[e - 1])) e--;
        else if (e >= 3 && (unsigned char)s[e - 1] >= 0x80) e -= 3; /* a curly quote (3 bytes in UTF-8) */
        else break;
    }
    return e > 0 && strchr(".!?", s[e - 1]);
}

/* The essay words [0, n) (wrapping round the essay), needles inserted
 * before the sentences int(n_sentences * depth / 100) at n_nd depths drawn
 * from round(linspace(0, 100, 40)), as RULER's niah.py places them. */
/* a needle sentence: its words (about 40 bytes) and a key and a value of up to 63 each */
#define NEEDLE_MAX 192

static void essay_with_needles(const struct kvb_ruler_corpus *c, int64_t n, uint64_t *rs, char (*nd)[NEEDLE_MAX], int32_t n_nd, struct sb *out) {
    int64_t n_sent = 1;
    for (int64_t i = 0; i + 1 < n; i++) {
        const struct span *w = &c->ew[i % c->n_ew];
        n_sent += ends_sentence(c->essay + w->at, w->n);
    }
    int64_t pick[KVB_RULER_MAX_ANSWERS], ins[KVB_RULER_MAX_ANSWERS];
    if (sample_idx(rs, 40, n_nd, pick) != KVB_OK) { out->oom = true; return; }
    for (int32_t k = 0; k < n_nd; k++) {
        const double depth = floor(100.0 * (double)pick[k] / 39.0 + 0.5);
        ins[k] = (int64_t)((double)n_sent * depth / 100.0);
    }
    qsort(ins, (size_t)n_nd, sizeof ins[0], cmp_i64);
    int64_t sent = 0;
    int32_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        while (k < n_nd && ins[k] == sent) { /* before sentence `sent` */
            if (out->n) sb_puts(out, " ");
            sb_puts(out, nd[k++]);
        }
        const struct span *w = &c->ew[i % c->n_ew];
        if (out->n) sb_puts(out, " ");
        sb_put(out, c->essay + w->at, (size_t)w->n);
        if (i + 1 < n && ends_sentence(c->essay + w->at, w->n)) sent++;
    }
    while (k < n_nd) { /* after the last sentence (depth 100) */
        if (out->n) sb_puts(out, " ");
        sb_puts(out, nd[k++]);
    }
}

static kvb_status build_niah(const struct kvb_ruler_corpus *c, const struct task *t, uint64_t seed, int64_t n, struct draft *d) {
    uint64_t rs = seed;
    struct hset seen = {0};
    char keys[4][64], vals[4][4][64], nd[KVB_RULER_MAX_ANSWERS][NEEDLE_MAX];
    const char *vname = t->tv == T_UUIDS ? "uuids" : "numbers";
    int32_t n_nd = 0;
    kvb_status st = KVB_OK;
    for (int i = 0; i < t->nk && st == KVB_OK; i++) {
        st = draw(c, t->tk, &rs, &seen, keys[i], sizeof keys[i]);
        for (int j = 0; j < t->nv && st == KVB_OK; j++) {
            st = draw(c, t->tv, &rs, &seen, vals[i][j], sizeof vals[i][j]);
            snprintf(nd[n_nd++], sizeof nd[0], "One of the special magic %s for %.63s is: %.63s.", vname, keys[i], vals[i][j]);
        }
    }
    for (int32_t i = n_nd - 1; i > 0 && st == KVB_OK; i--) { /* shuffled */
        const int64_t j = below(&rs, i + 1);
        char tmp[NEEDLE_MAX];
        memcpy(tmp, nd[i], sizeof tmp), memcpy(nd[i], nd[j], sizeof tmp), memcpy(nd[j], tmp, sizeof tmp);
    }
    struct sb hay = {0};
    if (st == KVB_OK && t->hay == H_ESSAY) {
        essay_with_needles(c, n, &rs, nd, n_nd, &hay);
    } else if (st == KVB_OK) { /* noise paragraphs or distractor needles, one a line, needles at drawn lines */
        int64_t idx[KVB_RULER_MAX_ANSWERS];
        st = sample_idx(&rs, n, n_nd, idx);
        if (st == KVB_OK) qsort(idx, (size_t)n_nd, sizeof idx[0], cmp_i64);
        int32_t k = 0;
        char dk[64], dv[64];
        for (int64_t i = 0; i < n && st == KVB_OK; i++) {
            while (k < n_nd && idx[k] == i) {
                if (hay.n) sb_puts(&hay, "\n");
                sb_puts(&hay, nd[n_nd - 1 - k]);
                k++;
            }
            if (hay.n) sb_puts(&hay, "\n");
            if (t->hay == H_NOISE) {
                sb_puts(&hay, k_noise);
            } else {
                st = draw(c, t->tk, &rs, &seen, dk, sizeof dk);
                if (st == KVB_OK) st = draw(c, t->tv, &rs, &seen, dv, sizeof dv);
                sb_printf(&hay, "One of the special magic %s for %s is: %s.", vname, dk, dv);
            }
        }
    }
    /* the question: nq distinct keys, their values the answers */
    int64_t qi[4] = {0};
    if (st == KVB_OK) st = sample_idx(&rs, t->nk, t->nq, qi);
    char query[300] = "";
    size_t ql = 0;
    for (int i = 0; i < t->nq && st == KVB_OK; i++) {
        const char *sep = i == 0 ? "" : t->nq > 2 && i < t->nq - 1 ? ", " : t->nq > 2 ? ", and " : " and ";
        ql += (size_t)snprintf(query + ql, sizeof query - ql, "%s%s", sep, keys[qi[i]]);
        for (int j = 0; j < t->nv; j++) snprintf(d->ans[d->n_ans++], sizeof d->ans[0], "%s", vals[qi[i]][j]);
    }
    if (st == KVB_OK && t->nq * t->nv == 1) { /* RULER's singular: Some -> A, are all / are -> is, numbers -> number */
        const char *v1 = t->tv == T_UUIDS ? "uuid" : "number";
        sb_printf(&d->ctx, "A special magic %s is hidden within the following text. Make sure to memorize it. I will quiz you about the %s afterwards.\n", v1, v1);
        sb_put(&d->ctx, hay.p ? hay.p : "", (size_t)hay.n);
        sb_printf(&d->q, "\nWhat is the special magic %s for %s mentioned in the provided text?", v1, query);
        sb_printf(&d->pre, " The special magic %s for %s mentioned in the provided text is", v1, query);
    } else if (st == KVB_OK) {
        sb_printf(&d->ctx, "Some special magic %s are hidden within the following text. Make sure to memorize it. I will quiz you about the %s afterwards.\n", vname, vname);
        sb_put(&d->ctx, hay.p ? hay.p : "", (size_t)hay.n);
        sb_printf(&d->q, "\nWhat are all the special magic %s for %s mentioned in the provided text?", vname, query);
        sb_printf(&d->pre, " The special magic %s for %s mentioned in the provided text are", vname, query);
    }
    if (hay.oom) st = kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
    kvb_free(hay.p);
    kvb_free(seen.t);
    return st;
}

/* vt: RULER's one chain of num_hops = 4 (5 variables) in n noise
 * paragraphs; icl (may be NULL): the worked example put first. */
static kvb_status build_vt(uint64_t seed, int64_t n, bool is_icl, const char *icl, struct draft *d) {
    uint64_t rs = seed;
    struct hset seen = {0};
    char var[5][8];
    const int len = is_icl ? 3 : 5;
    for (int i = 0; i < 5; i++) {
        int r;
        do {
            for (int k = 0; k < len; k++) var[i][k] = (char)('A' + below(&rs, 26));
            var[i][len] = 0;
            r = hset_add(&seen, hash_str(var[i]));
        } while (r == 0);
        if (r < 0) { kvb_free(seen.t); return kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory"); }
    }
    kvb_free(seen.t);
    const int value = (int)(10000 + below(&rs, 89999));
    int64_t pos[5];
    if (sample_idx(&rs, n, 5, pos) != KVB_OK) return kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
    qsort(pos, 5, sizeof pos[0], cmp_i64);
    if (icl) sb_puts(&d->ctx, icl);
    sb_puts(&d->ctx, "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n");
    /* RULER joins the noise paragraphs (each ending "\n") and the chain's lines with spaces */
    int j = 0;
    for (int64_t i = 0; i < n; i++) {
        while (j < 5 && pos[j] == i) {
            if (i || j) sb_puts(&d->ctx, " ");
            if (j == 0) sb_printf(&d->ctx, "VAR %s = %d", var[0], value);
            else sb_printf(&d->ctx, "VAR %s = VAR %s ", var[j], var[j - 1]);
            j++;
        }
        if (i || j) sb_puts(&d->ctx, " ");
        sb_puts(&d->ctx, k_noise);
        sb_puts(&d->ctx, "\n");
    }
    sb_printf(&d->q, "\nQuestion: Find all variables that are assigned the value %d in the text above.", value);
    /* "assgined" is RULER's spelling */
    sb_printf(&d->pre, " Answer: According to the chain(s) of variable assignment in the text above, 5 variables are assgined the value %d, they are: ", value);
    for (int i = 0; i < 5; i++) snprintf(d->ans[d->n_ans++], sizeof d->ans[0], "%s", var[i]);
    return KVB_OK;
}

/* cwe's numbered list of nw distinct words: the first 10 drawn cr times, the rest ur times, shuffled. */
static kvb_status cwe_list(const struct kvb_ruler_corpus *c, uint64_t *rs, int64_t nw, int cr, int ur, struct sb *out, char (*common)[64]) {
    int64_t *idx = kvb_malloc(sizeof(int64_t) * (size_t)nw);
    const int64_t total = 10 * (int64_t)cr + (nw - 10) * (int64_t)ur;
    const char **list = kvb_malloc(sizeof(char *) * (size_t)KVB_MAX(total, 1));
    kvb_status st = idx && list ? sample_idx(rs, c->n_w, nw, idx) : kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
    int64_t m = 0;
    for (int64_t i = 0; i < nw && st == KVB_OK; i++) {
        if (i < 10) snprintf(common[i], 64, "%s", c->w[idx[i]]);
        for (int r = 0; r < (i < 10 ? cr : ur); r++) list[m++] = c->w[idx[i]];
    }
    if (st == KVB_OK) shuffle_ptr(rs, list, m);
    for (int64_t i = 0; i < m && st == KVB_OK; i++) sb_printf(out, "%s%lld. %s", i ? " " : "", (long long)i + 1, list[i]);
    kvb_free(idx);
    kvb_free((void *)list);
    return st;
}

static const char k_cwe_head[] = "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones that appear most often.\n";
static const char k_cwe_q[] = "\nQuestion: What are the 10 most common words in the above list?";
static const char k_cwe_pre[] = " Answer: The top 10 words that appear most often in the list are:";

static kvb_status build_cwe(const struct kvb_ruler_corpus *c, uint64_t seed, int64_t length, int64_t n, struct draft *d) {
    uint64_t rs = seed;
    const bool small = length < 4096; /* RULER's frequencies below 4K tokens */
    char ex[10][64];
    sb_puts(&d->ctx, k_cwe_head); /* the worked example */
    kvb_status st = cwe_list(c, &rs, small ? 20 : 40, small ? 3 : 10, small ? 1 : 3, &d->ctx, ex);
    sb_puts(&d->ctx, k_cwe_q);
    sb_puts(&d->ctx, k_cwe_pre);
    for (int i = 0; i < 10; i++) sb_printf(&d->ctx, " %d. %s", i + 1, ex[i]);
    sb_puts(&d->ctx, "\n");
    sb_puts(&d->ctx, k_cwe_head);
    if (st == KVB_OK) st = cwe_list(c, &rs, n, small ? 6 : 30, small ? 1 : 3, &d->ctx, d->ans);
    d->n_ans = 10;
    sb_puts(&d->q, k_cwe_q);
    sb_puts(&d->pre, k_cwe_pre);
    return st;
}

/* fwe: 2000 coded words, rank k drawn floor(n k^-2 / zeta(2)) times. */
static kvb_status build_fwe(uint64_t seed, int64_t n, struct draft *d) {
    enum { V = 2000 };
    uint64_t rs = seed;
    static const double zeta2 = 1.6449340668482264; /* pi^2 / 6 */
    char (*vocab)[8] = kvb_malloc(sizeof(*vocab) * V);
    const char **voc = kvb_malloc(sizeof(char *) * V);
    int64_t total = 0;
    for (int k = 1; k <= V; k++) total += (int64_t)floor((double)n * pow((double)k, -2.0) / zeta2);
    const char **list = kvb_malloc(sizeof(char *) * (size_t)KVB_MAX(total, 1));
    struct hset seen = {0};
    kvb_status st = vocab && voc && list ? KVB_OK : kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
    for (int i = 0; i < V && st == KVB_OK; i++) {
        int r;
        do {
            for (int k = 0; k < 6; k++) vocab[i][k] = (char)('a' + below(&rs, 26));
            vocab[i][6] = 0;
            r = hset_add(&seen, hash_str(vocab[i]));
        } while (r == 0);
        if (r < 0) st = kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
        voc[i] = vocab[i];
    }
    if (st == KVB_OK) {
        voc[0] = "..."; /* the top rank is noise */
        int64_t m = 0;
        for (int k = 1; k <= V; k++) {
            const int64_t cnt = (int64_t)floor((double)n * pow((double)k, -2.0) / zeta2);
            for (int64_t r = 0; r < cnt; r++) list[m++] = voc[k - 1];
        }
        shuffle_ptr(&rs, list, m);
        sb_puts(&d->ctx, "Read the following coded text and track the frequency of each coded word. Find the three most frequently appeared coded words. ");
        for (int64_t i = 0; i < m; i++) {
            if (i) sb_puts(&d->ctx, " ");
            sb_puts(&d->ctx, list[i]);
        }
        sb_puts(&d->q, "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the three most frequently appeared words in the above coded text?");
        sb_puts(&d->pre, " Answer: According to the coded text above, the three most frequently appeared words are:");
        for (int i = 1; i <= 3; i++) snprintf(d->ans[d->n_ans++], sizeof d->ans[0], "%s", voc[i]);
    }
    kvb_free(seen.t);
    kvb_free(vocab);
    kvb_free((void *)voc);
    kvb_free((void *)list);
    return st;
}

static kvb_status build(const struct kvb_ruler_corpus *c, const struct task *t, uint64_t seed, int64_t length, int64_t n, bool is_icl,
                        const char *icl, struct draft *d) {
    draft_clear(d);
    kvb_status st;
    switch (t->kind) {
    case K_NIAH: st = build_niah(c, t, seed, n, d); break;
    case K_VT: st = build_vt(seed, n, is_icl, icl, d); break;
    case K_CWE: st = build_cwe(c, seed, length, n, d); break;
    default: st = build_fwe(seed, n, d); break;
    }
    if (st == KVB_OK && (d->ctx.oom || d->q.oom || d->pre.oom)) st = kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
    return st;
}

/* Tokens of the draft's whole input (negative: the count failed). */
static int64_t measure(struct draft *d, kvb_ruler_count_fn count, void *ud) {
    return count(ud, d->ctx.p ? d->ctx.p : "", d->q.p ? d->q.p : "", d->pre.p ? d->pre.p : "");
}

/* The largest n in [lo, hi] whose input has at most target tokens, built
 * into d (*tokens its count). KVB_ERR_INVALID when lo does not fit. */
static kvb_status fit(const struct kvb_ruler_corpus *c, const struct task *t, uint64_t seed, int64_t length, int64_t lo, int64_t hi,
                      int64_t target, bool is_icl, const char *icl, kvb_ruler_count_fn count, void *ud, struct draft *d, int64_t *units,
                      int64_t *tokens) {
    kvb_status st = build(c, t, seed, length, lo, is_icl, icl, d);
    int64_t tk = st == KVB_OK ? measure(d, count, ud) : 0;
    if (st == KVB_OK && tk < 0) st = kvb_fail(KVB_ERR_INVALID, "ruler: counting the tokens of %s failed", t->name);
    if (st == KVB_OK && tk > target)
        st = kvb_fail(KVB_ERR_INVALID, "ruler: length %lld is too short for %s: its smallest input is %lld tokens, and %d are generated",
                      (long long)length, t->name, (long long)tk, t->ttg);
    int64_t good = lo, bad = -1; /* good fits; bad (if >= 0) does not */
    for (int64_t step = KVB_MAX(lo, 1); st == KVB_OK && bad < 0;) { /* doubling */
        const int64_t m = KVB_MIN(good + step, hi);
        if (m <= good) break;
        st = build(c, t, seed, length, m, is_icl, icl, d);
        tk = st == KVB_OK ? measure(d, count, ud) : 0;
        if (st == KVB_OK && tk < 0) st = kvb_fail(KVB_ERR_INVALID, "ruler: counting the tokens of %s failed", t->name);
        if (st == KVB_OK && tk <= target) good = m, step *= 2;
        else bad = m;
    }
    while (st == KVB_OK && bad > good + 1) { /* bisection */
        const int64_t m = good + (bad - good) / 2;
        st = build(c, t, seed, length, m, is_icl, icl, d);
        tk = st == KVB_OK ? measure(d, count, ud) : 0;
        if (st == KVB_OK && tk < 0) st = kvb_fail(KVB_ERR_INVALID, "ruler: counting the tokens of %s failed", t->name);
        if (st == KVB_OK && tk <= target) good = m;
        else bad = m;
    }
    if (st == KVB_OK) st = build(c, t, seed, length, good, is_icl, icl, d);
    if (st == KVB_OK) *tokens = measure(d, count, ud), *units = good;
    return st;
}

static char *dup_sb(const struct sb *b) {
    char *s = kvb_malloc((size_t)b->n + 1);
    if (s) memcpy(s, b->p ? b->p : "", (size_t)b->n), s[b->n] = 0;
    return s;
}

kvb_status kvb_ruler_generate(const struct kvb_ruler_corpus *c, int32_t task, uint64_t seed, int64_t length, kvb_ruler_count_fn count,
                              void *ud, struct kvb_ruler_sample *out) {
    if (!c || !count || !out || task < 0 || task >= KVB_RULER_TASKS) return kvb_fail(KVB_ERR_INVALID, "ruler: bad arguments");
    if (length < 64 || length > (1 << 24)) return kvb_fail(KVB_ERR_INVALID, "ruler: length must be in 64..16M, not %lld", (long long)length);
    const struct task *t = &k_tasks[task];
    memset(out, 0, sizeof *out);
    if (t->kind != K_VT && t->kind != K_FWE && (t->tk == T_WORDS || t->kind == K_CWE) && c->n_w < 64)
        return kvb_fail(KVB_ERR_INVALID, "ruler: %s needs a word list (one word a line, e.g. Debian's wamerican: /usr/share/dict/american-english); %lld words given",
                        t->name, (long long)c->n_w);
    if (t->hay == H_ESSAY && c->n_ew < 16)
        return kvb_fail(KVB_ERR_INVALID, "ruler: %s needs an essay haystack (a long text, e.g. a Project Gutenberg book)", t->name);
    const int64_t target = length - t->ttg;
    struct draft d = {0};
    int64_t units = 0, tokens = 0;
    kvb_status st = KVB_OK;
    char *icl = NULL;
    if (t->kind == K_VT) { /* the worked example, sized as RULER's (500 tokens, here at most a quarter of the length) */
        int64_t iu, itk;
        const int64_t itarget = KVB_MIN(500, length / 4) - t->ttg;
        st = fit(c, t, seed ^ 0x5DEECE66Dull, length, 5, itarget, itarget, true, NULL, count, ud, &d, &iu, &itk);
        if (st == KVB_ERR_INVALID) st = build(c, t, seed ^ 0x5DEECE66Dull, length, 5, true, NULL, &d); /* the smallest */
        struct sb ex = {0};
        sb_put(&ex, d.ctx.p, (size_t)d.ctx.n);
        sb_put(&ex, d.q.p, (size_t)d.q.n);
        sb_put(&ex, d.pre.p, (size_t)d.pre.n);
        for (int i = 0; i < d.n_ans; i++) sb_printf(&ex, "%s%s", i ? " " : "", d.ans[i]);
        sb_puts(&ex, "\n\n");
        if (ex.oom) st = kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
        icl = ex.p;
    }
    int64_t lo = 1, hi = target;
    if (t->kind == K_NIAH && t->hay != H_ESSAY) lo = t->nk * t->nv;
    if (t->kind == K_VT) lo = 5;
    if (t->kind == K_CWE) lo = 11, hi = KVB_MIN(hi, c->n_w);
    if (t->kind == K_FWE) lo = 64, hi = KVB_MAX(target * 2, lo); /* "..." is cheap: a coded word can be under a token */
    if (st == KVB_OK) st = fit(c, t, seed, length, lo, KVB_MAX(hi, lo), target, false, icl, count, ud, &d, &units, &tokens);
    kvb_free(icl);
    if (st == KVB_OK) {
        out->context = dup_sb(&d.ctx);
        out->question = dup_sb(&d.q);
        out->answer_prefix = dup_sb(&d.pre);
        for (int i = 0; i < d.n_ans; i++) {
            const size_t l = strlen(d.ans[i]);
            if ((out->answers[i] = kvb_malloc(l + 1))) memcpy(out->answers[i], d.ans[i], l + 1);
            else st = KVB_ERR_NOMEM;
        }
        out->n_answers = d.n_ans;
        out->tokens_to_generate = t->ttg;
        out->units = units;
        out->tokens = tokens;
        if (st != KVB_OK || !out->context || !out->question || !out->answer_prefix) {
            kvb_ruler_sample_free(out);
            st = kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
        }
    }
    draft_free(&d);
    return st;
}

void kvb_ruler_sample_free(struct kvb_ruler_sample *s) {
    if (!s) return;
    kvb_free(s->context); kvb_free(s->question); kvb_free(s->answer_prefix);
    for (int i = 0; i < KVB_RULER_MAX_ANSWERS; i++) kvb_free(s->answers[i]);
    memset(s, 0, sizeof *s);
}

/* ---- scoring ---- */

static bool contains_ci(const char *hay, const char *pat) {
    const size_t m = strlen(pat);
    if (!m) return true;
    for (const char *h = hay; *h; h++) {
        size_t k = 0;
        while (k < m && h[k]) {
            char a = h[k], b = pat[k];
            if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
            if (b >= 'A' && b <= 'Z') b = (char)(b - 'A' + 'a');
            if (a != b) break;
            k++;
        }
        if (k == m) return true;
    }
    return false;
}

double kvb_ruler_match(const char *output, const char *const *answers, int32_t n, bool part) {
    if (!output || !answers || n <= 0) return 0;
    int32_t found = 0;
    for (int32_t i = 0; i < n; i++) found += answers[i] && contains_ci(output, answers[i]);
    return part ? (found > 0 ? 1.0 : 0.0) : (double)found / n;
}

/* ---- through the model ---- */

struct kvb_ruler_params kvb_ruler_default_params(void) {
    struct kvb_ruler_params p;
    memset(&p, 0, sizeof p);
    p.kv = kvb_kv_default_params();
    p.chunk = 256;
    p.n_threads = 1;
    return p;
}

struct ids {
    int32_t *p;
    int32_t n;
};

/* The sample as token ids: a = the prompt up to the end of the context (BOS
 * and the template's opening included), b = the question, the template's
 * assistant header and the answer prefix. */
static kvb_status render(const struct kvb_vocab *v, const char *ctx, const char *q, const char *pre, struct ids *a, struct ids *b) {
    struct kvb_vocab_info in;
    kvb_vocab_get_info(v, &in);
    a->p = b->p = NULL;
    a->n = b->n = 0;
    kvb_status st = KVB_OK;
    char *mc = NULL, *mq = NULL, *mp = NULL, *text = NULL, *ra = NULL;
    int32_t *ta = NULL, *tb = NULL;
    int32_t na = 0, nb = 0;
    if (in.chat_template) {
        enum kvb_chat_style style;
        kvb_chat_style_for_vocab(v, &style, NULL); /* a guess (KVB_FALLBACK) is used as chat would */
        size_t lc, lq, lp, lt;
        st = kvb_vocab_mark_plain(v, ctx, strlen(ctx), &mc, &lc);
        if (st == KVB_OK) st = kvb_vocab_mark_plain(v, q, strlen(q), &mq, &lq);
        if (st == KVB_OK) st = kvb_vocab_mark_plain(v, pre, strlen(pre), &mp, &lp);
        char *user = st == KVB_OK ? kvb_malloc(lc + lq + 1) : NULL;
        if (st == KVB_OK && !user) st = kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
        if (st == KVB_OK) {
            memcpy(user, mc, lc), memcpy(user + lc, mq, lq), user[lc + lq] = 0;
            struct kvb_chat_message msg = {"user", user};
            st = kvb_chat_format(style, &msg, 1, true, &text, &lt);
            const char *at = st == KVB_OK ? strstr(text, user) : NULL;
            if (st == KVB_OK && !at) st = kvb_fail(KVB_ERR_INVALID, "ruler: the chat template does not write the message as given");
            if (st == KVB_OK) {
                const size_t split = (size_t)(at - text) + lc;
                st = kvb_vocab_tokenize_marked(v, text, split, false, &ta, &na);
                ra = kvb_malloc(lt - split + lp + 1);
                if (st == KVB_OK && !ra) st = kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
                if (st == KVB_OK) {
                    memcpy(ra, text + split, lt - split), memcpy(ra + lt - split, mp, lp), ra[lt - split + lp] = 0;
                    st = kvb_vocab_tokenize_marked(v, ra, lt - split + lp, false, &tb, &nb);
                }
            }
        }
        kvb_free(user);
    } else {
        const size_t lq = strlen(q), lp = strlen(pre);
        st = kvb_vocab_tokenize(v, ctx, strlen(ctx), false, false, &ta, &na);
        ra = kvb_malloc(lq + lp + 1);
        if (st == KVB_OK && !ra) st = kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
        if (st == KVB_OK) {
            memcpy(ra, q, lq), memcpy(ra + lq, pre, lp), ra[lq + lp] = 0;
            st = kvb_vocab_tokenize(v, ra, lq + lp, false, false, &tb, &nb);
        }
    }
    const bool bos = in.add_bos && in.bos >= 0;
    if (st == KVB_OK) {
        a->p = kvb_malloc(sizeof(int32_t) * (size_t)(na + 1));
        b->p = kvb_malloc(sizeof(int32_t) * (size_t)(nb + 1));
        if (!a->p || !b->p) st = kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
    }
    if (st == KVB_OK) {
        if (bos) a->p[a->n++] = in.bos;
        memcpy(a->p + a->n, ta, sizeof(int32_t) * (size_t)na), a->n += na;
        memcpy(b->p, tb, sizeof(int32_t) * (size_t)nb), b->n = nb;
    } else {
        kvb_free(a->p), kvb_free(b->p);
        a->p = b->p = NULL;
    }
    kvb_buffer_free(mc); kvb_buffer_free(mq); kvb_buffer_free(mp); kvb_buffer_free(text);
    if (ta) kvb_buffer_free(ta);
    if (tb) kvb_buffer_free(tb);
    kvb_free(ra);
    return st;
}

kvb_status kvb_ruler_tokens(const struct kvb_vocab *vocab, const struct kvb_ruler_sample *s, int32_t **context, int32_t *n_context,
                            int32_t **rest, int32_t *n_rest) {
    if (!vocab || !s || !s->context || !s->question || !s->answer_prefix || !context || !n_context || !rest || !n_rest)
        return kvb_fail(KVB_ERR_INVALID, "ruler: bad arguments");
    struct ids a, b;
    const kvb_status st = render(vocab, s->context, s->question, s->answer_prefix, &a, &b);
    if (st != KVB_OK) return st;
    *context = a.p, *n_context = a.n, *rest = b.p, *n_rest = b.n;
    return KVB_OK;
}

int64_t kvb_ruler_count_model(void *ud, const char *context, const char *question, const char *answer_prefix) {
    const struct kvb_model *m = ud;
    if (!m || !context || !question || !answer_prefix) return -1;
    struct ids a, b;
    if (render(kvb_model_vocab(m), context, question, answer_prefix, &a, &b) != KVB_OK) return -1;
    const int64_t n = (int64_t)a.n + b.n;
    kvb_free(a.p), kvb_free(b.p);
    return n;
}

kvb_status kvb_eval_ruler(const struct kvb_model *m, const struct kvb_ruler_params *p, int32_t task, const struct kvb_ruler_sample *s,
                          struct kvb_ruler_result *out) {
    if (!m || !p || !s || !out || task < 0 || task >= KVB_RULER_TASKS || !s->context || !s->question || !s->answer_prefix)
        return kvb_fail(KVB_ERR_INVALID, "ruler: bad arguments");
    if (!(p->ratio >= 0 && p->ratio < 1)) return kvb_fail(KVB_ERR_INVALID, "ruler: ratio must be in [0, 1), not %g", p->ratio);
    if (p->ratio > 0 && p->kv.policy.id == KVB_POLICY_FULL)
        return kvb_fail(KVB_ERR_INVALID, "ruler: a compression ratio needs a policy that evicts (not full)");
    memset(out, 0, sizeof *out);
    struct ids a, b;
    kvb_status st = render(kvb_model_vocab(m), s->context, s->question, s->answer_prefix, &a, &b);
    if (st != KVB_OK) return st;
    const int32_t n = a.n + b.n;
    struct kvb_kv_params kv = p->kv;
    out->prompt_tokens = n;
    out->compressed_tokens = p->ask_after ? a.n : n;
    if (p->ratio > 0) {
        kv.policy.budget = KVB_MAX(8, (int32_t)floor((1 - p->ratio) * out->compressed_tokens + 0.5));
        kv.policy.budget_frac = 0;
    }
    out->budget = kv.policy.id == KVB_POLICY_FULL ? 0 : kv.policy.budget;
    struct kvb_model_info in;
    kvb_model_get_info(m, &in);
    const struct kvb_vocab *v = kvb_model_vocab(m);
    struct kvb_context_params cp = kvb_context_default_params();
    cp.kv = kv;
    cp.n_threads = p->n_threads > 0 ? p->n_threads : 1;
    cp.chunk = p->chunk > 0 ? p->chunk : 256;
    cp.n_ctx = n + s->tokens_to_generate + 8;
    cp.kv_pool_bytes = kvb_model_kv_seq_bytes(m, &cp.kv, cp.n_ctx, n, cp.chunk);
    struct kvb_context *c = NULL;
    float *lg = kvb_malloc(sizeof(float) * (size_t)in.n_vocab);
    int32_t *all = kvb_malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (!lg || !all) st = kvb_fail(KVB_ERR_NOMEM, "ruler: out of memory");
    if (st == KVB_OK) st = kvb_context_init(m, &cp, &c);
    if (st == KVB_OK && p->ask_after) {
        st = kvb_context_prompt(c, a.p, a.n, lg, false);
        if (st == KVB_OK && b.n) st = kvb_context_eval(c, b.p, b.n, lg, false);
    } else if (st == KVB_OK) {
        memcpy(all, a.p, sizeof(int32_t) * (size_t)a.n), memcpy(all + a.n, b.p, sizeof(int32_t) * (size_t)b.n);
        st = kvb_context_prompt(c, all, n, lg, false);
    }
    size_t w = 0;
    struct kvb_detok dt = {0};
    for (int32_t g = 0; g < s->tokens_to_generate && st == KVB_OK; g++) {
        int32_t best = 0;
        for (int32_t i = 1; i < in.n_vocab; i++)
            if (lg[i] > lg[best]) best = i;
        if (kvb_vocab_is_eog(v, best)) break;
        char buf[256];
        const size_t k = kvb_detok_push(v, &dt, best, false, buf, sizeof buf);
        if (k <= sizeof buf && w + k < sizeof out->output) memcpy(out->output + w, buf, k), w += k;
        if (g + 1 < s->tokens_to_generate) st = kvb_context_eval(c, &best, 1, lg, false);
    }
    if (st == KVB_OK) {
        char buf[8];
        const size_t k = kvb_detok_flush(&dt, buf, sizeof buf);
        if (k <= sizeof buf && w + k < sizeof out->output) memcpy(out->output + w, buf, k), w += k;
        out->output[w] = 0;
        out->score = kvb_ruler_match(out->output, (const char *const *)s->answers, s->n_answers, kvb_ruler_task_part(task));
    }
    kvb_context_free(c);
    kvb_free(lg), kvb_free(all), kvb_free(a.p), kvb_free(b.p);
    return st;
}

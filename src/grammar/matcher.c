/*
 * matcher.c — a sequence's position in a compiled grammar, the token mask,
 * and the per-vocabulary token trie.
 *
 * Position: a set of stacks of element indexes (a pushdown automaton run as
 * an NFA). A stack's top is always a character set; the stacks below it are
 * return addresses. Stacks are hash-consed nodes (pos, parent), so equal
 * stacks are one node and a set of stacks is a sorted array of node ids
 * (with the partial UTF-8 character each stack is in the middle of: a code
 * point may be split across tokens, and a lead byte is taken when the set
 * holds some code point it can still become). The empty stack (node 0) means
 * the text so far is a complete sentence. Sets of stacks are interned too
 * ("states"), and each state keeps a 256-entry row of the states its bytes
 * lead to, filled on first use: inside a JSON string almost every byte leads
 * back to the same state, so after the first step the automaton runs as a
 * DFA, one table load per byte.
 *
 * Mask: the vocabulary's tokens as a byte trie in preorder (byte, depth,
 * where its subtree ends, the tokens ending there): one pass over it, a dead
 * state skips the whole subtree, so shared prefixes are matched once.
 * End-of-generation tokens are allowed where the empty stack is in the state;
 * other control tokens, unknown and unused tokens, and tokens of no bytes
 * never are.
 *
 * Expansion (closure) is iterative with a visited set, and recursion without
 * reading a byte cannot loop (gbnf.c refuses left recursion); stacks deeper
 * than KVB_GRAMMAR_MAX_STACK are dropped (the path is refused). The caches
 * of nodes and states are per matcher and are rebuilt from the current state
 * alone when they grow past a bound, so memory stays bounded over a long
 * generation. Failures (allocation) leave the position unchanged.
 */
#include "grammar.h"
#include "../tokenizer/tokenizer.h"

#include <math.h>
#include <stdlib.h>

/* ---- the vocabulary side ---- */

enum { TK_TEXT = 0, TK_EOG = 1, TK_NEVER = 2 };

struct kvb_grammar_vocab {
    int32_t n_vocab;
    uint8_t *kind;      /* [n_vocab] TK_* */
    uint32_t *off;      /* [n_vocab + 1] into bytes */
    uint8_t *bytes;
    /* the trie, preorder; node 0 is the root */
    int32_t n_nodes;
    uint8_t *t_byte;
    uint16_t *t_depth;
    int32_t *t_skip;    /* first node after the subtree */
    int32_t *t_tok;     /* [n_nodes + 1]: tokens ending at node i are toks[t_tok[i] .. t_tok[i + 1]) */
    int32_t *toks;
    int32_t max_depth;
};

struct tok_sort {
    const uint8_t *p;
    uint32_t n;
    int32_t id;
};

static int cmp_tok(const void *a, const void *b) {
    const struct tok_sort *x = a, *y = b;
    uint32_t n = x->n < y->n ? x->n : y->n;
    int c = n ? memcmp(x->p, y->p, n) : 0;
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void kvb_grammar_vocab_free(struct kvb_grammar_vocab *gv) {
    if (!gv) return;
    kvb_free(gv->kind);
    kvb_free(gv->off);
    kvb_free(gv->bytes);
    kvb_free(gv->t_byte);
    kvb_free(gv->t_depth);
    kvb_free(gv->t_skip);
    kvb_free(gv->t_tok);
    kvb_free(gv->toks);
    kvb_free(gv);
}

/* the end-of-generation set the batch ends sequences on */
static bool is_eog(const struct kvb_vocab *v, int32_t id) { return kvb_vocab_is_eog(v, id); }

kvb_status kvb_grammar_vocab_new(const struct kvb_vocab *v, struct kvb_grammar_vocab **out) {
    if (!v || !out) return kvb_fail(KVB_ERR_INVALID, "kvb_grammar_vocab_new: NULL argument");
    if (v->kind == KVB_VOCAB_NONE || !v->type) return kvb_fail(KVB_ERR_UNSUPPORTED, "grammar: the vocabulary has no token texts (no_vocab)");
    const int32_t n = v->n;
    struct kvb_grammar_vocab *gv = kvb_calloc(1, sizeof *gv);
    struct tok_sort *ts = NULL;
    if (!gv) goto nomem;
    gv->n_vocab = n;
    gv->kind = kvb_calloc((size_t)n + 1, 1);
    gv->off = kvb_calloc((size_t)n + 1, sizeof *gv->off);
    if (!gv->kind || !gv->off) goto nomem;
    size_t total = 0;
    char tmp[8];
    for (int32_t i = 0; i < n; i++) {
        const uint8_t ty = v->type[i];
        size_t len = (ty == KVB_TOKEN_CONTROL || ty == KVB_TOKEN_UNKNOWN || ty == KVB_TOKEN_UNUSED) ? 0 : kvb_vocab_token_bytes(v, i, false, tmp, 0);
        if (len > 65535) len = 0;
        gv->kind[i] = is_eog(v, i) ? TK_EOG : len ? TK_TEXT : TK_NEVER;
        if (gv->kind[i] != TK_TEXT) len = 0;
        gv->off[i] = (uint32_t)total;
        total += len;
        if (total > UINT32_MAX / 2) goto nomem;
    }
    gv->off[n] = (uint32_t)total;
    gv->bytes = kvb_malloc(total + 1);
    ts = kvb_malloc(sizeof *ts * ((size_t)n + 1));
    if (!gv->bytes || !ts) goto nomem;
    int32_t nt = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t len = gv->off[i + 1] - gv->off[i];
        if (!len) continue;
        kvb_vocab_token_bytes(v, i, false, (char *)gv->bytes + gv->off[i], len);
        ts[nt++] = (struct tok_sort){gv->bytes + gv->off[i], len, i};
    }
    qsort(ts, (size_t)nt, sizeof *ts, cmp_tok);
    /* nodes: at most total + 1 */
    size_t cap = total + 1;
    gv->t_byte = kvb_malloc(cap);
    gv->t_depth = kvb_malloc(sizeof *gv->t_depth * cap);
    gv->t_skip = kvb_malloc(sizeof *gv->t_skip * cap);
    gv->t_tok = kvb_calloc(cap + 1, sizeof *gv->t_tok);
    gv->toks = kvb_malloc(sizeof *gv->toks * ((size_t)nt + 1));
    int32_t *path = kvb_malloc(sizeof *path * 65537);
    if (!gv->t_byte || !gv->t_depth || !gv->t_skip || !gv->t_tok || !gv->toks || !path) { kvb_free(path); goto nomem; }
    int32_t nn = 1;
    gv->t_byte[0] = 0;
    gv->t_depth[0] = 0;
    path[0] = 0;
    /* count tokens per node first (t_tok as counts, shifted), then prefix sums */
    int32_t *node_of = kvb_malloc(sizeof *node_of * ((size_t)nt + 1));
    if (!node_of) { kvb_free(path); goto nomem; }
    const uint8_t *prev = NULL;
    uint32_t prev_n = 0;
    for (int32_t k = 0; k < nt; k++) {
        uint32_t c = 0;
        if (prev)
            while (c < prev_n && c < ts[k].n && prev[c] == ts[k].p[c]) c++;
        for (uint32_t d = c; d < ts[k].n; d++) {
            gv->t_byte[nn] = ts[k].p[d];
            gv->t_depth[nn] = (uint16_t)(d + 1);
            path[d + 1] = nn++;
        }
        node_of[k] = path[ts[k].n];
        gv->t_tok[path[ts[k].n] + 1]++;
        if ((int32_t)ts[k].n > gv->max_depth) gv->max_depth = (int32_t)ts[k].n;
        prev = ts[k].p;
        prev_n = ts[k].n;
    }
    for (int32_t i = 0; i < nn; i++) gv->t_tok[i + 1] += gv->t_tok[i];
    for (int32_t k = 0; k < nt; k++) gv->toks[k] = ts[k].id; /* sorted order = node order, tokens of a node adjacent */
    (void)node_of;
    kvb_free(node_of);
    /* subtree ends */
    int32_t sp = 0;
    for (int32_t i = 0; i < nn; i++) {
        while (sp > 0 && gv->t_depth[path[sp - 1]] >= gv->t_depth[i]) gv->t_skip[path[--sp]] = i;
        path[sp++] = i;
    }
    while (sp > 0) gv->t_skip[path[--sp]] = nn;
    kvb_free(path);
    gv->n_nodes = nn;
    kvb_free(ts);
    *out = gv;
    return KVB_OK;
nomem:
    kvb_free(ts);
    kvb_grammar_vocab_free(gv);
    return kvb_fail(KVB_ERR_NOMEM, "grammar: out of memory for the vocabulary's token trie");
}

/* ---- the matcher ---- */

struct gnode {
    uint32_t pos, parent, depth, next; /* next: hash chain */
};

struct gstate {
    uint32_t first, n; /* entries ent[first .. first + n) */
    uint32_t next;     /* hash chain, UINT32_MAX ends */
    int32_t row;       /* transitions rows[row * 256 ..], -1 none yet */
};

#define NO_STATE (-1)   /* dead */
#define UNKNOWN (-2)    /* transition not computed yet */
#define FAILED (-3)     /* out of memory, or too ambiguous (m->ambiguous) */
#define MAX_ENTRIES 4096     /* stacks in one state: more is refused as too ambiguous */
#define MAX_PUSHES (1 << 20) /* expansions in one step */
#define SOFT_STATES 4096
#define SOFT_NODES (1 << 20)
#define HARD_STATES (1 << 16)
#define NIL UINT32_MAX

struct kvb_matcher {
    const struct kvb_grammar *g;
    const struct kvb_grammar_vocab *gv;
    struct gnode *nodes;
    int64_t n_nodes, cap_nodes;
    uint32_t *node_head, node_mask;
    struct gstate *states;
    int64_t n_states, cap_states;
    uint32_t *state_head, state_mask;
    uint64_t *ent;
    int64_t n_ent, cap_ent;
    int32_t *rows;
    int64_t n_rows, cap_rows; /* rows of 256; cap in int32s */
    int32_t cur;              /* current state, NO_STATE: nothing can follow */
    int32_t start;
    bool ended;               /* an end-of-generation token was accepted */
    bool ambiguous;           /* the last failure was a bound on stacks or expansions, not memory */
    int64_t n_pushes;         /* expansions in this step */
    /* scratch of one step */
    uint64_t *out;
    int64_t n_out, cap_out;
    uint64_t *work;
    int64_t n_work, cap_work;
    uint64_t *vis;            /* visited (pos, parent) + 1, 0 empty */
    uint32_t *vis_gen, gen, vis_mask;
    int32_t *dstate;          /* per trie depth */
    uint8_t *allowed;         /* per token */
};

static kvb_status failed(const struct kvb_matcher *m);

static uint32_t mix32(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (uint32_t)x;
}

/* ---- nodes ---- */

static bool node_table_init(struct kvb_matcher *m, uint32_t buckets) {
    kvb_free(m->node_head);
    m->node_head = kvb_malloc(sizeof *m->node_head * buckets);
    if (!m->node_head) return false;
    for (uint32_t i = 0; i < buckets; i++) m->node_head[i] = NIL;
    m->node_mask = buckets - 1;
    m->n_nodes = 1; /* node 0: the empty stack */
    m->nodes[0] = (struct gnode){0, 0, 0, NIL};
    return true;
}

static bool node_rehash(struct kvb_matcher *m) {
    uint32_t buckets = (m->node_mask + 1) * 2;
    uint32_t *h = kvb_malloc(sizeof *h * buckets);
    if (!h) return false;
    for (uint32_t i = 0; i < buckets; i++) h[i] = NIL;
    for (int64_t i = 1; i < m->n_nodes; i++) {
        uint32_t b = mix32((uint64_t)m->nodes[i].pos << 32 | m->nodes[i].parent) & (buckets - 1);
        m->nodes[i].next = h[b];
        h[b] = (uint32_t)i;
    }
    kvb_free(m->node_head);
    m->node_head = h;
    m->node_mask = buckets - 1;
    return true;
}

/* The node (pos, parent): its id, NIL when too deep, NIL - 1 when out of memory. */
static uint32_t node_get(struct kvb_matcher *m, uint32_t pos, uint32_t parent) {
    uint32_t b = mix32((uint64_t)pos << 32 | parent) & m->node_mask;
    for (uint32_t i = m->node_head[b]; i != NIL; i = m->nodes[i].next)
        if (m->nodes[i].pos == pos && m->nodes[i].parent == parent) return i;
    uint32_t depth = m->nodes[parent].depth + 1;
    if (depth > KVB_GRAMMAR_MAX_STACK) return NIL;
    if (m->n_nodes >= (int64_t)(NIL - 2)) return NIL - 1;
    if (m->n_nodes >= m->cap_nodes && kvb_grow((void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof *m->nodes)) return NIL - 1;
    if ((uint64_t)m->n_nodes > (uint64_t)m->node_mask + 1) {
        if (!node_rehash(m)) return NIL - 1;
        b = mix32((uint64_t)pos << 32 | parent) & m->node_mask;
    }
    uint32_t id = (uint32_t)m->n_nodes++;
    m->nodes[id] = (struct gnode){pos, parent, depth, m->node_head[b]};
    m->node_head[b] = id;
    return id;
}

/* ---- closure: from element pos over return stack parent, the stacks whose top is a set ---- */

static bool out_push(struct kvb_matcher *m, uint64_t e) {
    if (m->n_out >= MAX_ENTRIES) {
        m->ambiguous = true;
        return false;
    }
    if (m->n_out >= m->cap_out && kvb_grow((void **)&m->out, &m->cap_out, m->n_out + 1, sizeof *m->out)) return false;
    m->out[m->n_out++] = e;
    return true;
}

static bool vis_reset(struct kvb_matcher *m) {
    m->n_pushes = 0;
    if (++m->gen == 0) { /* wrapped: clear */
        memset(m->vis_gen, 0, sizeof *m->vis_gen * ((size_t)m->vis_mask + 1));
        m->gen = 1;
    }
    return true;
}

/* true when (pos, parent) was not seen in this step (and marks it) */
static int vis_first(struct kvb_matcher *m, uint32_t pos, uint32_t parent) {
    uint64_t key = ((uint64_t)pos << 32 | parent) + 1;
    uint32_t i = mix32(key) & m->vis_mask, probes = 0;
    while (m->vis_gen[i] == m->gen) {
        if (m->vis[i] == key) return 0;
        i = (i + 1) & m->vis_mask;
        if (++probes > m->vis_mask / 2) return -1; /* too full: the caller grows it */
    }
    m->vis_gen[i] = m->gen;
    m->vis[i] = key;
    return 1;
}

static bool vis_grow(struct kvb_matcher *m) {
    uint32_t cap = (m->vis_mask + 1) * 2;
    uint64_t *v = kvb_malloc(sizeof *v * cap);
    uint32_t *gg = kvb_calloc(cap, sizeof *gg);
    if (!v || !gg) { kvb_free(v); kvb_free(gg); return false; }
    /* re-insert the current generation */
    uint64_t *ov = m->vis;
    uint32_t *og = m->vis_gen, om = m->vis_mask, g0 = m->gen;
    m->vis = v;
    m->vis_gen = gg;
    m->vis_mask = cap - 1;
    m->gen = 1;
    for (uint32_t i = 0; i <= om; i++)
        if (og[i] == g0) {
            uint32_t j = mix32(ov[i]) & m->vis_mask;
            while (gg[j] == 1) j = (j + 1) & m->vis_mask;
            gg[j] = 1;
            v[j] = ov[i];
        }
    kvb_free(ov);
    kvb_free(og);
    return true;
}

static bool work_push(struct kvb_matcher *m, uint32_t pos, uint32_t parent) {
    if (++m->n_pushes > MAX_PUSHES) {
        m->ambiguous = true;
        return false;
    }
    int r;
    while ((r = vis_first(m, pos, parent)) < 0)
        if (!vis_grow(m)) return false;
    if (!r) return true;
    if (m->n_work >= m->cap_work && kvb_grow((void **)&m->work, &m->cap_work, m->n_work + 1, sizeof *m->work)) return false;
    m->work[m->n_work++] = (uint64_t)pos << 32 | parent;
    return true;
}

/* false: out of memory */
static bool closure(struct kvb_matcher *m, uint32_t pos0, uint32_t parent0) {
    const struct kvb_grammar *g = m->g;
    m->n_work = 0;
    if (!work_push(m, pos0, parent0)) return false;
    while (m->n_work) {
        uint64_t w = m->work[--m->n_work];
        uint32_t pos = (uint32_t)(w >> 32), par = (uint32_t)w;
        for (;;) {
            uint32_t e = g->elems[pos];
            if (G_KIND(e) == G_END) {
                if (par == 0) {
                    if (!out_push(m, 0)) return false;
                    break;
                }
                pos = m->nodes[par].pos;
                par = m->nodes[par].parent;
                continue;
            }
            if (G_KIND(e) == G_SET) {
                uint32_t id = node_get(m, pos, par);
                if (id == NIL - 1) return false;
                if (id != NIL && !out_push(m, (uint64_t)id << 32)) return false;
                break;
            }
            /* a reference: push the return address unless it is an end (tail call) */
            uint32_t base = par;
            if (G_KIND(g->elems[pos + 1]) != G_END) {
                base = node_get(m, pos + 1, par);
                if (base == NIL - 1) return false;
                if (base == NIL) break;
            }
            const uint32_t r = G_ARG(e);
            for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
                if (!work_push(m, g->alts[a], base)) return false;
            break;
        }
    }
    return true;
}

/* ---- states ---- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t ent_hash(const uint64_t *e, int64_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    for (int64_t i = 0; i < n; i++) h = (h ^ e[i]) * 0x100000001B3ULL + (h >> 29);
    return mix32(h);
}

static bool state_table_init(struct kvb_matcher *m, uint32_t buckets) {
    kvb_free(m->state_head);
    m->state_head = kvb_malloc(sizeof *m->state_head * buckets);
    if (!m->state_head) return false;
    for (uint32_t i = 0; i < buckets; i++) m->state_head[i] = NIL;
    m->state_mask = buckets - 1;
    m->n_states = 0;
    m->n_ent = 0;
    m->n_rows = 0;
    return true;
}

/* The state of m->out (sorted, deduplicated here): its id, NO_STATE for the empty set, FAILED. */
static int32_t state_of_out(struct kvb_matcher *m) {
    if (!m->n_out) return NO_STATE;
    if (m->n_out > 1) {
        qsort(m->out, (size_t)m->n_out, sizeof *m->out, cmp_u64);
        int64_t k = 1;
        for (int64_t i = 1; i < m->n_out; i++)
            if (m->out[i] != m->out[k - 1]) m->out[k++] = m->out[i];
        m->n_out = k;
    }
    uint32_t h = ent_hash(m->out, m->n_out);
    for (uint32_t i = m->state_head[h & m->state_mask]; i != NIL; i = m->states[i].next) {
        const struct gstate *s = &m->states[i];
        if (s->n == m->n_out && !memcmp(m->ent + s->first, m->out, sizeof *m->out * (size_t)s->n)) return (int32_t)i;
    }
    if (m->n_states >= HARD_STATES) return FAILED;
    if (m->n_states >= m->cap_states && kvb_grow((void **)&m->states, &m->cap_states, m->n_states + 1, sizeof *m->states)) return FAILED;
    if (m->n_ent + m->n_out > m->cap_ent && kvb_grow((void **)&m->ent, &m->cap_ent, m->n_ent + m->n_out, sizeof *m->ent)) return FAILED;
    if ((uint64_t)m->n_states + 1 > (uint64_t)m->state_mask + 1) { /* rehash */
        uint32_t buckets = (m->state_mask + 1) * 2;
        uint32_t *sh = kvb_malloc(sizeof *sh * buckets);
        if (!sh) return FAILED;
        for (uint32_t i = 0; i < buckets; i++) sh[i] = NIL;
        for (int64_t i = 0; i < m->n_states; i++) {
            uint32_t b = ent_hash(m->ent + m->states[i].first, m->states[i].n) & (buckets - 1);
            m->states[i].next = sh[b];
            sh[b] = (uint32_t)i;
        }
        kvb_free(m->state_head);
        m->state_head = sh;
        m->state_mask = buckets - 1;
    }
    struct gstate *s = &m->states[m->n_states];
    s->first = (uint32_t)m->n_ent;
    s->n = (uint32_t)m->n_out;
    s->row = -1;
    memcpy(m->ent + m->n_ent, m->out, sizeof *m->out * (size_t)m->n_out);
    m->n_ent += m->n_out;
    s->next = m->state_head[h & m->state_mask];
    m->state_head[h & m->state_mask] = (uint32_t)m->n_states;
    return (int32_t)m->n_states++;
}

/* partial UTF-8 character of an entry: bit 0 set, remaining bytes (bits 1-2), length (3-4), code point so far (5-) */
#define P_MAKE(cp, rem, len) (1u | (uint32_t)(rem) << 1 | (uint32_t)(len) << 3 | (uint32_t)(cp) << 5)

static int utf8_len(uint8_t b) { return b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0; }

/* Whether a character of len bytes starting with prefix cp (rem bytes missing) can still be in set s. */
static bool prefix_meets(const struct kvb_grammar *g, const struct kvb_gset *s, uint32_t cp, int rem, int len) {
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t lo = cp << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
    if (lo < min_cp[len]) lo = min_cp[len];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return false;
    /* surrogates are never characters: only the parts of [lo, hi] outside them count */
    if (lo < 0xD800 && kvb_gset_meets(g, s, lo, KVB_MIN(hi, 0xD7FFu))) return true;
    return hi > 0xDFFF && kvb_gset_meets(g, s, KVB_MAX(lo, 0xE000u), hi);
}

/* A partial character whose every completion is in the set: only the number of continuation bytes still due
 * matters (so the many prefixes of a string's characters are one state, not one per prefix). */
#define P_ANY(rem) (1u | (uint32_t)(rem) << 1 | 0x1FFFFFu << 5)
#define P_IS_ANY(p) (((p) >> 5) == 0x1FFFFFu)

/* Whether every completion of prefix cp (rem bytes missing, of a len-byte character) is a valid character in s:
 * no overlong form, surrogate or value past U+10FFFF among them (those depend on the next byte: not yet). */
static bool prefix_covers(const struct kvb_grammar *g, const struct kvb_gset *s, uint32_t cp, int rem, int len) {
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    const uint32_t lo = cp << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
    if (lo < min_cp[len] || hi > 0x10FFFF || (lo <= 0xDFFF && hi >= 0xD800)) return false;
    const uint32_t *r = g->ranges + 2 * (size_t)s->first;
    for (uint32_t i = 0; i < s->n; i++)
        if (r[2 * i] <= lo) {
            if (r[2 * i + 1] >= hi) return true;
        } else break;
    return false;
}

/* The entry for node nid after a byte left a partial character (prefix c, rem bytes due, len bytes in all);
 * false when out of memory. Nothing is added when no completion can be in the set. */
static bool push_partial(struct kvb_matcher *m, const struct kvb_gset *s, uint32_t nid, uint32_t c, int rem, int len) {
    uint32_t part;
    if (prefix_covers(m->g, s, c, rem, len)) part = P_ANY(rem);
    else if (prefix_meets(m->g, s, c, rem, len)) part = P_MAKE(c, rem, len & 3);
    else return true;
    return out_push(m, (uint64_t)nid << 32 | part);
}

/* The state after byte b from state si: its id, NO_STATE, FAILED. */
static int32_t step_slow(struct kvb_matcher *m, int32_t si, uint8_t b) {
    const struct kvb_grammar *g = m->g;
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    m->n_out = 0;
    vis_reset(m);
    const uint32_t first = m->states[si].first, n = m->states[si].n;
    for (uint32_t k = 0; k < n; k++) {
        const uint64_t e = m->ent[first + k];
        const uint32_t nid = (uint32_t)(e >> 32), part = (uint32_t)e;
        if (!nid) continue;
        const uint32_t pos = m->nodes[nid].pos;
        const struct kvb_gset *s = &g->sets[G_ARG(g->elems[pos])];
        if (!part) {
            if (b < 0x80) {
                if (!kvb_gset_has(g, s, b)) continue;
            } else {
                int len = utf8_len(b);
                if (len && !push_partial(m, s, nid, b & (0x7Fu >> len), len - 1, len)) return FAILED;
                continue;
            }
        } else {
            if ((b & 0xC0) != 0x80) continue;
            const int rem = (int)((part >> 1) & 3) - 1;
            if (P_IS_ANY(part)) {
                if (rem > 0) {
                    if (!out_push(m, (uint64_t)nid << 32 | P_ANY(rem))) return FAILED;
                    continue;
                }
            } else {
                int len = (int)((part >> 3) & 3);
                if (len == 0) len = 4; /* 4 wraps in two bits */
                const uint32_t c = (part >> 5) << 6 | (b & 0x3Fu);
                if (rem > 0) {
                    if (!push_partial(m, s, nid, c, rem, len)) return FAILED;
                    continue;
                }
                if (c < min_cp[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF) || !kvb_gset_has(g, s, c)) continue;
            }
        }
        if (!closure(m, pos + 1, m->nodes[nid].parent)) return FAILED;
    }
    return state_of_out(m);
}

static inline int32_t step(struct kvb_matcher *m, int32_t si, uint8_t b) {
    int32_t row = m->states[si].row;
    if (row >= 0) {
        int32_t t = m->rows[(size_t)row * 256 + b];
        if (t != UNKNOWN) return t;
    }
    int32_t t = step_slow(m, si, b);
    if (t == FAILED) return FAILED;
    row = m->states[si].row;
    if (row < 0) {
        const int64_t need = (m->n_rows + 1) * 256;
        if (need > m->cap_rows && kvb_grow((void **)&m->rows, &m->cap_rows, need, sizeof *m->rows)) return t;
        row = (int32_t)m->n_rows++;
        for (int i = 0; i < 256; i++) m->rows[(size_t)row * 256 + i] = UNKNOWN;
        m->states[si].row = row;
    }
    m->rows[(size_t)row * 256 + b] = t;
    return t;
}

static bool state_can_end(const struct kvb_matcher *m, int32_t si) {
    return si >= 0 && m->states[si].n && m->ent[m->states[si].first] == 0;
}

/* The start state (closure of the root's alternatives). */
static int32_t start_state(struct kvb_matcher *m) {
    const struct kvb_grammar *g = m->g;
    m->n_out = 0;
    vis_reset(m);
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
        if (!closure(m, g->alts[a], 0)) return FAILED;
    return state_of_out(m);
}

static void matcher_tables_free(struct kvb_matcher *m) {
    kvb_free(m->nodes);
    kvb_free(m->node_head);
    kvb_free(m->states);
    kvb_free(m->state_head);
    kvb_free(m->ent);
    kvb_free(m->rows);
}

static void scratch_free(struct kvb_matcher *m);

void kvb_matcher_free(struct kvb_matcher *m) {
    if (!m) return;
    matcher_tables_free(m);
    scratch_free(m);
    kvb_free(m);
}

static bool tables_init(struct kvb_matcher *m) {
    m->n_nodes = 0;
    if (!m->nodes && kvb_grow((void **)&m->nodes, &m->cap_nodes, 1024, sizeof *m->nodes)) return false;
    return node_table_init(m, 1024) && state_table_init(m, 256);
}

kvb_status kvb_matcher_new(const struct kvb_grammar *g, const struct kvb_grammar_vocab *gv, struct kvb_matcher **out) {
    if (!g || !out) return kvb_fail(KVB_ERR_INVALID, "kvb_matcher_new: NULL argument");
    struct kvb_matcher *m = kvb_calloc(1, sizeof *m);
    if (!m) return kvb_fail(KVB_ERR_NOMEM, "grammar matcher: out of memory");
    m->g = g;
    m->gv = gv;
    m->vis_mask = 255;
    m->vis = kvb_malloc(sizeof *m->vis * 256);
    m->vis_gen = kvb_calloc(256, sizeof *m->vis_gen);
    if (gv) {
        m->dstate = kvb_malloc(sizeof *m->dstate * ((size_t)gv->max_depth + 2));
        m->allowed = kvb_malloc((size_t)gv->n_vocab + 1);
    }
    if (!m->vis || !m->vis_gen || (gv && (!m->dstate || !m->allowed)) || !tables_init(m)) goto nomem;
    m->start = m->cur = start_state(m);
    if (m->cur == FAILED) {
        kvb_status st = failed(m);
        kvb_matcher_free(m);
        return st;
    }
    *out = m;
    return KVB_OK;
nomem:
    kvb_matcher_free(m);
    return kvb_fail(KVB_ERR_NOMEM, "grammar matcher: out of memory");
}

/* Interns src's state cur (its stacks and partial characters) into t, whose tables are fresh: the state's id in t,
 * NO_STATE, FAILED. */
static int32_t copy_state(const struct kvb_matcher *src, int32_t cur, struct kvb_matcher *t) {
    if (cur < 0) return cur;
    const uint32_t ne = src->states[cur].n, first = src->states[cur].first;
    int64_t total = 0;
    for (uint32_t k = 0; k < ne; k++) total += src->nodes[src->ent[first + k] >> 32].depth;
    uint32_t *buf = kvb_malloc(sizeof *buf * (size_t)(total + 1));
    uint64_t *ents = kvb_malloc(sizeof *ents * ((size_t)ne + 1));
    int32_t ns = FAILED;
    if (!buf || !ents) goto done;
    for (uint32_t k = 0; k < ne; k++) ents[k] = src->ent[first + k];
    t->n_out = 0;
    for (uint32_t k = 0; k < ne; k++) {
        uint32_t nid = (uint32_t)(ents[k] >> 32), d = src->nodes[nid].depth, id = 0;
        for (uint32_t i = nid, j = 0; i; i = src->nodes[i].parent, j++) buf[d - 1 - j] = src->nodes[i].pos;
        for (uint32_t j = 0; j < d; j++) {
            id = node_get(t, buf[j], id);
            if (id >= NIL - 1) goto done;
        }
        if (!out_push(t, (uint64_t)id << 32 | (uint32_t)ents[k])) goto done;
    }
    ns = state_of_out(t);
done:
    kvb_free(buf);
    kvb_free(ents);
    return ns;
}

static void scratch_free(struct kvb_matcher *m) {
    kvb_free(m->out);
    kvb_free(m->work);
    kvb_free(m->vis);
    kvb_free(m->vis_gen);
    kvb_free(m->dstate);
    kvb_free(m->allowed);
}

/* When the caches have grown past their bounds: start them over from the current state alone.
 * On failure the old tables stay (still correct, only larger). */
static void maybe_flush(struct kvb_matcher *m) {
    if (m->n_states < SOFT_STATES && m->n_nodes < SOFT_NODES) return;
    struct kvb_matcher t = {0};
    t.g = m->g;
    int32_t ns = FAILED;
    if (tables_init(&t)) ns = copy_state(m, m->cur, &t);
    if (ns == FAILED || (m->cur >= 0 && ns < 0)) {
        matcher_tables_free(&t);
        kvb_free(t.out);
        return;
    }
    matcher_tables_free(m);
    kvb_free(m->out);
    m->nodes = t.nodes;
    m->cap_nodes = t.cap_nodes;
    m->n_nodes = t.n_nodes;
    m->node_head = t.node_head;
    m->node_mask = t.node_mask;
    m->states = t.states;
    m->n_states = t.n_states;
    m->cap_states = t.cap_states;
    m->state_head = t.state_head;
    m->state_mask = t.state_mask;
    m->ent = t.ent;
    m->n_ent = t.n_ent;
    m->cap_ent = t.cap_ent;
    m->rows = NULL;
    m->n_rows = m->cap_rows = 0;
    m->out = t.out;
    m->cap_out = t.cap_out;
    m->cur = ns;
    m->start = FAILED; /* recomputed on reset */
}

kvb_status kvb_matcher_clone(const struct kvb_matcher *m, struct kvb_matcher **out) {
    if (!m || !out) return kvb_fail(KVB_ERR_INVALID, "kvb_matcher_clone: NULL argument");
    struct kvb_matcher *t = kvb_calloc(1, sizeof *t);
    if (!t) return kvb_fail(KVB_ERR_NOMEM, "grammar matcher: out of memory");
    t->g = m->g;
    t->gv = m->gv;
    t->vis_mask = 255;
    t->vis = kvb_malloc(sizeof *t->vis * 256);
    t->vis_gen = kvb_calloc(256, sizeof *t->vis_gen);
    if (t->gv) {
        t->dstate = kvb_malloc(sizeof *t->dstate * ((size_t)t->gv->max_depth + 2));
        t->allowed = kvb_malloc((size_t)t->gv->n_vocab + 1);
    }
    int32_t ns = FAILED;
    if (t->vis && t->vis_gen && (!t->gv || (t->dstate && t->allowed)) && tables_init(t)) ns = copy_state(m, m->cur, t);
    if (ns == FAILED || (m->cur >= 0 && ns < 0)) {
        kvb_matcher_free(t);
        return kvb_fail(KVB_ERR_NOMEM, "grammar matcher: out of memory");
    }
    t->cur = ns;
    t->start = FAILED;
    t->ended = m->ended;
    *out = t;
    return KVB_OK;
}

void kvb_matcher_reset(struct kvb_matcher *m) {
    if (!m) return;
    m->ended = false;
    if (m->start == FAILED) {
        int32_t s = start_state(m);
        if (s == FAILED) { /* keep what there is: rebuild from scratch */
            if (tables_init(m)) s = start_state(m);
        }
        m->start = s;
    }
    m->cur = m->start;
}

/* The failure behind FAILED: too ambiguous, or out of memory. */
static kvb_status failed(const struct kvb_matcher *m) {
    if (m->ambiguous)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "grammar: more than %d parses at once here (the grammar is too ambiguous)", MAX_ENTRIES);
    return kvb_fail(KVB_ERR_NOMEM, "grammar matcher: out of memory");
}

/* The state after bytes s[0..n) from state si (NO_STATE, FAILED). */
static int32_t walk(struct kvb_matcher *m, int32_t si, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n && si >= 0; i++) si = step(m, si, s[i]);
    return si;
}

kvb_status kvb_matcher_accept_bytes(struct kvb_matcher *m, const char *s, size_t n) {
    if (!m || (!s && n)) return kvb_fail(KVB_ERR_INVALID, "kvb_matcher_accept_bytes: NULL argument");
    if (!n) return KVB_OK;
    if (m->ended || m->cur < 0) return kvb_fail(KVB_ERR_INVALID, "grammar: nothing may follow");
    maybe_flush(m);
    m->ambiguous = false;
    int32_t t = walk(m, m->cur, (const uint8_t *)s, n);
    if (t == FAILED) return failed(m);
    if (t < 0) return kvb_fail(KVB_ERR_INVALID, "grammar: the text is refused");
    m->cur = t;
    return KVB_OK;
}

bool kvb_matcher_can_end(const struct kvb_matcher *m) { return m && (m->ended || state_can_end(m, m->cur)); }

bool kvb_matcher_must_end(const struct kvb_matcher *m) {
    return m && (m->ended || (m->cur >= 0 && m->states[m->cur].n == 1 && m->ent[m->states[m->cur].first] == 0));
}

/* The state after token tok (NO_STATE when refused, FAILED), or -4 for an allowed end-of-generation token. */
static int32_t token_step(struct kvb_matcher *m, int32_t tok) {
    const struct kvb_grammar_vocab *gv = m->gv;
    if (!gv || tok < 0 || tok >= gv->n_vocab || m->ended || m->cur < 0) return NO_STATE;
    if (gv->kind[tok] == TK_EOG) return state_can_end(m, m->cur) ? -4 : NO_STATE;
    if (gv->kind[tok] != TK_TEXT) return NO_STATE;
    return walk(m, m->cur, gv->bytes + gv->off[tok], gv->off[tok + 1] - gv->off[tok]);
}

bool kvb_matcher_allows(const struct kvb_matcher *cm, int32_t token) {
    /* the matcher is the caller's own (not shared); only its caches change */
    struct kvb_matcher *m = (struct kvb_matcher *)(uintptr_t)cm;
    if (!m) return false;
    m->ambiguous = false;
    int32_t t = token_step(m, token);
    return t >= 0 || t == -4;
}

kvb_status kvb_matcher_accept(struct kvb_matcher *m, int32_t token) {
    if (!m || !m->gv) return kvb_fail(KVB_ERR_INVALID, "kvb_matcher_accept: no matcher or no vocabulary");
    maybe_flush(m);
    m->ambiguous = false;
    int32_t t = token_step(m, token);
    if (t == FAILED) return failed(m);
    if (t == -4) {
        m->ended = true;
        return KVB_OK;
    }
    if (t < 0) return kvb_fail(KVB_ERR_INVALID, "grammar: token %d is not allowed here", (int)token);
    m->cur = t;
    return KVB_OK;
}

kvb_status kvb_matcher_mask(struct kvb_matcher *m, float *logits) {
    if (!m || !logits || !m->gv) return kvb_fail(KVB_ERR_INVALID, "kvb_matcher_mask: NULL argument or no vocabulary");
    const struct kvb_grammar_vocab *gv = m->gv;
    const int32_t nv = gv->n_vocab;
    if (m->ended || m->cur < 0) {
        for (int32_t i = 0; i < nv; i++) logits[i] = -INFINITY;
        return KVB_OK;
    }
    maybe_flush(m);
    m->ambiguous = false;
    uint8_t *allowed = m->allowed;
    memset(allowed, 0, (size_t)nv);
    int32_t *ds = m->dstate;
    ds[0] = m->cur;
    const uint8_t *tb = gv->t_byte;
    const uint16_t *td = gv->t_depth;
    const int32_t *tk = gv->t_tok, *toks = gv->toks, *skip = gv->t_skip;
    for (int32_t i = 1; i < gv->n_nodes;) {
        const int32_t d = td[i], s = ds[d - 1];
        int32_t t;
        const int32_t row = m->states[s].row;
        if (row >= 0 && (t = m->rows[(size_t)row * 256 + tb[i]]) != UNKNOWN) {
        } else t = step(m, s, tb[i]);
        if (t < 0) {
            if (t == FAILED) return failed(m);
            i = skip[i];
            continue;
        }
        ds[d] = t;
        for (int32_t k = tk[i]; k < tk[i + 1]; k++) allowed[toks[k]] = 1;
        i++;
    }
    const bool end_ok = state_can_end(m, m->cur);
    for (int32_t i = 0; i < nv; i++)
        if (!allowed[i] && !(end_ok && gv->kind[i] == TK_EOG)) logits[i] = -INFINITY;
    return KVB_OK;
}

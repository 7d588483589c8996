/*
 * spm.c — SentencePiece BPE encoding, as llama.cpp's llm_tokenizer_spm does
 * it (so ids match llama.cpp on GGUF vocabularies):
 *   - kvb_vocab_tokenize (vocab.c) splits the text at special tokens; each
 *     raw fragment gets a leading space if it follows a special token or
 *     starts the text (add_space_prefix), then spaces become "▁";
 *   - each UTF-8 character is a symbol; adjacent symbols whose concatenation
 *     is a piece are merged, best score first (ties: leftmost), with a binary
 *     heap of candidate bigrams and lazy invalidation;
 *   - a final symbol that is not a piece falls back to its bytes (<0xNN>),
 *     or to <unk> when the vocabulary has no byte tokens.
 * Cost: O(n log n) in the number of characters.
 */
#include "tokenizer.h"

#include <stdlib.h>

struct sym {
    const char *text;
    int32_t n;     /* bytes; 0 once merged away */
    int32_t prev, next;
};

struct bigram {
    int32_t left, right;
    float score;
    int32_t size;
};

struct heap {
    struct bigram *a;
    int32_t n, cap;
};

static bool bg_better(const struct bigram *x, const struct bigram *y) {
    return x->score > y->score || (x->score == y->score && x->left < y->left);
}

static void heap_push(struct heap *h, struct bigram b) {
    int32_t i = h->n++;
    h->a[i] = b;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!bg_better(&h->a[i], &h->a[p])) break;
        struct bigram t = h->a[i]; h->a[i] = h->a[p]; h->a[p] = t;
        i = p;
    }
}

static struct bigram heap_pop(struct heap *h) {
    struct bigram top = h->a[0];
    h->a[0] = h->a[--h->n];
    for (int32_t i = 0;;) {
        int32_t l = 2 * i + 1, r = l + 1, b = i;
        if (l < h->n && bg_better(&h->a[l], &h->a[b])) b = l;
        if (r < h->n && bg_better(&h->a[r], &h->a[b])) b = r;
        if (b == i) break;
        struct bigram t = h->a[i]; h->a[i] = h->a[b]; h->a[b] = t;
        i = b;
    }
    return top;
}

static void try_bigram(const struct kvb_vocab *v, const struct sym *s, struct heap *h, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    int32_t size = s[left].n + s[right].n;
    int32_t id = kvb_vocab_find(v, s[left].text, (size_t)size);
    if (id < 0 || h->n >= h->cap) return;
    heap_push(h, (struct bigram){left, right, v->score[id], size});
}

static int32_t utf8_len(uint8_t c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1; /* stray continuation or invalid: one byte */
}

/* Encodes one escaped fragment (spaces already "▁"). */
static void spm_fragment(const struct kvb_vocab *v, const char *text, size_t len, struct kvb_tok_out *o) {
    if (!len) return;
    struct sym *s = kvb_malloc(sizeof *s * len);
    struct heap h = {kvb_malloc(sizeof(struct bigram) * len * 2 + 16), 0, (int32_t)(len * 2 + 16)};
    if (!s || !h.a) {
        kvb_free(s);
        kvb_free(h.a);
        o->oom = true;
        return;
    }
    int32_t n = 0;
    for (size_t at = 0; at < len;) {
        int32_t cl = utf8_len((uint8_t)text[at]);
        if ((size_t)cl > len - at) cl = (int32_t)(len - at);
        s[n] = (struct sym){text + at, cl, n - 1, -1};
        if (n) s[n - 1].next = n;
        n++;
        at += (size_t)cl;
    }
    for (int32_t i = 1; i < n; i++) try_bigram(v, s, &h, i - 1, i);
    while (h.n) {
        struct bigram b = heap_pop(&h);
        struct sym *l = &s[b.left], *r = &s[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = b.left;
        try_bigram(v, s, &h, l->prev, b.left);
        try_bigram(v, s, &h, b.left, l->next);
    }
    for (int32_t i = 0; i != -1 && i < n; i = s[i].next) {
        int32_t id = kvb_vocab_find(v, s[i].text, (size_t)s[i].n);
        if (id >= 0) {
            kvb_tok_emit(o, id);
            continue;
        }
        for (int32_t k = 0; k < s[i].n; k++) { /* byte fallback */
            int32_t bid = v->byte_id[(uint8_t)s[i].text[k]];
            kvb_tok_emit(o, bid >= 0 ? bid : v->unk);
        }
    }
    kvb_free(s);
    kvb_free(h.a);
}

/* Escapes a raw fragment (optional leading space, ' ' -> "▁") and encodes it. */
void kvb_spm_fragment(const struct kvb_vocab *v, const char *text, size_t len, bool after_special, struct kvb_tok_out *o) {
    const bool prefix = v->add_space_prefix && after_special;
    size_t spaces = prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    size_t n = len + (prefix ? 1 : 0) + spaces * 2;
    char *buf = kvb_malloc(n + 1);
    if (!buf) {
        o->oom = true;
        return;
    }
    size_t w = 0;
    if (prefix) { memcpy(buf, "\xE2\x96\x81", 3); w = 3; }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(buf + w, "\xE2\x96\x81", 3); w += 3; }
        else buf[w++] = text[i];
    }
    if (!v->spm_word_split) spm_fragment(v, buf, w, o);
    else { /* cut before every "▁" that follows another character: no piece spans the cut, the
              result is the same, and each merge heap stays small and in cache */
        size_t start = 0;
        for (size_t i = 1; i + 3 <= w; i++)
            if (memcmp(buf + i, "\xE2\x96\x81", 3) == 0 && !(i >= 3 && memcmp(buf + i - 3, "\xE2\x96\x81", 3) == 0)) {
                spm_fragment(v, buf + start, i - start, o);
                start = i;
                i += 2;
            }
        spm_fragment(v, buf + start, w - start, o);
    }
    kvb_free(buf);
}

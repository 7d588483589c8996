/*
 * decode.c — token ids back to bytes for output streams. A byte-level or
 * byte-fallback token can end in the middle of a UTF-8 character (an emoji
 * is often 2–4 tokens), so the streaming decoder holds an unfinished tail
 * back until the token that completes it. Bytes that can never become a
 * valid character are passed through at once rather than held.
 */
#include "tokenizer.h"

size_t kvb_vocab_token_bytes(const struct kvb_vocab *v, int32_t id, bool render_special, char *buf, size_t cap) {
    if (!v || id < 0 || id >= v->n) return 0;
    if (render_special && v->type[id] == KVB_TOKEN_CONTROL) {
        const uint32_t len = kvb_vocab_len(v, id);
        memcpy(buf, kvb_vocab_text(v, id), KVB_MIN((size_t)len, cap));
        return len;
    }
    return kvb_vocab_piece(v, id, buf, cap);
}

/* Length of the UTF-8 sequence a lead byte starts, 0 for a byte that cannot lead. */
static int utf8_need(uint8_t b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* Where the unfinished tail of s[0..n) starts (n when the text ends cleanly). */
static size_t unfinished_tail(const uint8_t *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const uint8_t b = s[n - back];
        if ((b & 0xC0) == 0x80) continue; /* continuation byte: look further back */
        const int need = utf8_need(b);
        return need > (int)back ? n - back : n;
    }
    return n;
}

size_t kvb_detok_push(const struct kvb_vocab *v, struct kvb_detok *d, int32_t id, bool render_special, char *buf, size_t cap) {
    char piece[256];
    size_t plen = kvb_vocab_token_bytes(v, id, render_special, piece, sizeof piece);
    const size_t total = (size_t)d->n_held + plen;
    if (total > cap) return total;
    memcpy(buf, d->held, (size_t)d->n_held);
    if (plen <= sizeof piece) memcpy(buf + d->n_held, piece, plen);
    else kvb_vocab_token_bytes(v, id, render_special, buf + d->n_held, plen);
    const size_t ready = unfinished_tail((const uint8_t *)buf, total);
    d->n_held = (int)(total - ready);
    memcpy(d->held, buf + ready, (size_t)d->n_held);
    return ready;
}

size_t kvb_detok_flush(struct kvb_detok *d, char *buf, size_t cap) {
    const size_t n = (size_t)d->n_held;
    if (n > cap) return n;
    memcpy(buf, d->held, n);
    d->n_held = 0;
    return n;
}

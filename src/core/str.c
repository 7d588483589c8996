/*
 * str.c — the library's one string builder (struct kvb_str, kvbound.h) and
 * its one JSON string writer.
 *
 * Design, after SQLite's StrAccum: an append never fails in the caller's
 * face. The first failure (the allocator said no, the caller's limit would
 * be passed) is recorded in b->err and every later append is a no-op, so a
 * caller writes a whole text and checks kvb_str_error once at the end.
 *
 * Bounds stay the caller's: b->limit is the caller's number, and a caller
 * with its own error channel wraps the builder. The Jinja engine's jbuf
 * (src/json) is this struct growing in its arena (alloc/ctx; the arena's
 * limit applies), with its output limit in b->limit, and jbuf_put charges
 * the work and throws; kvbound serve's bodies use the library allocator
 * and keep their size limits where they are read.
 *
 * Growth doubles from 32 bytes. The text stays NUL-terminated after every
 * append, and the first successful append (even of no bytes) allocates, so
 * a builder that was written to always has a string at p.
 */
#include "core.h"

#include <stdio.h>

/* Room for n more bytes and the NUL; false (b->err set, text unchanged) if not. */
static bool reserve(struct kvb_str *b, size_t n) {
    if (b->err) return false;
    if (b->limit && (n > b->limit || b->n > b->limit - n)) {
        b->err = KVB_ERR_INVALID;
        return false;
    }
    if (n < b->cap - b->n) return true; /* b->cap is 0 while p is NULL */
    if (n >= SIZE_MAX / 4 - b->n) {
        b->err = KVB_ERR_NOMEM;
        return false;
    }
    const size_t need = b->n + n + 1;
    size_t cap = b->cap ? b->cap : 32;
    while (cap < need) cap *= 2;
    char *p = b->alloc ? b->alloc(b->ctx, cap) : kvb_malloc(cap);
    if (!p) {
        b->err = KVB_ERR_NOMEM;
        return false;
    }
    if (b->n) memcpy(p, b->p, b->n);
    if (!b->alloc) kvb_free(b->p);
    b->p = p;
    b->cap = cap;
    return true;
}

void kvb_str_put(struct kvb_str *b, const char *s, size_t n) {
    if (!reserve(b, n)) return;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void kvb_str_puts(struct kvb_str *b, const char *s) { kvb_str_put(b, s, strlen(s)); }

void kvb_str_putc(struct kvb_str *b, char c) { kvb_str_put(b, &c, 1); }

void kvb_str_printf(struct kvb_str *b, const char *fmt, ...) {
    if (b->err) return;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    /* first into the room there is; most texts fit and are formatted once */
    const size_t room = b->cap - b->n;
    const int k = vsnprintf(room ? b->p + b->n : NULL, room, fmt, ap);
    if (k < 0) b->err = KVB_ERR_INVALID;
    else if ((size_t)k < room && (!b->limit || (size_t)k <= b->limit - b->n)) b->n += (size_t)k;
    else if (reserve(b, (size_t)k)) {
        vsnprintf(b->p + b->n, (size_t)k + 1, fmt, again);
        b->n += (size_t)k;
    }
    if (b->p) b->p[b->n] = 0; /* a refused text may have been written past n */
    va_end(again);
    va_end(ap);
}

void kvb_str_json(struct kvb_str *b, const char *s, size_t n, unsigned flags) {
    static const char hex[] = "0123456789abcdef";
    kvb_str_put(b, "\"", 1);
    size_t from = 0; /* s[from..i) is not written yet */
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t len = 2;
        if (c == '"' || c == '\\') esc[1] = (char)c;
        else if ((flags & KVB_JSON_SHORT_NRT) && (c == '\n' || c == '\r' || c == '\t')) esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        else if ((flags & KVB_JSON_SHORT_BF) && (c == '\b' || c == '\f')) esc[1] = c == '\b' ? 'b' : 'f';
        else if (c < 0x20 || (c == 0x7f && (flags & KVB_JSON_DEL))) {
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            len = 6;
        } else continue;
        kvb_str_put(b, s + from, i - from);
        kvb_str_put(b, esc, len);
        from = i + 1;
    }
    kvb_str_put(b, s + from, n - from);
    kvb_str_put(b, "\"", 1);
}

kvb_status kvb_str_error(const struct kvb_str *b) { return b->err; }

char *kvb_str_finish(struct kvb_str *b, size_t *len) {
    if (!b->p) kvb_str_put(b, "", 0);
    char *p = b->err ? NULL : b->p;
    if (len) *len = p ? b->n : 0;
    if (!p) kvb_str_free(b);
    else *b = (struct kvb_str){.limit = b->limit, .alloc = b->alloc, .ctx = b->ctx};
    return p;
}

void kvb_str_free(struct kvb_str *b) {
    if (!b->alloc) kvb_free(b->p);
    *b = (struct kvb_str){.limit = b->limit, .alloc = b->alloc, .ctx = b->ctx};
}

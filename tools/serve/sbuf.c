/*
 * sbuf.c — the bottom of kvbound serve, calling nothing of it: the
 * monotonic clock, UTF-8 validation and cleaning, OpenAI's error object,
 * and a response's memory. Bodies are built with the library's string
 * builder (struct kvb_str, kvb_str_json for their JSON strings: every byte
 * below 0x20 as \u00xx), whose failure a body's writer checks once.
 */
#include "serve.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double serve_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void http_resp_free(struct http_resp *r) { kvb_str_free(&r->body); }

bool utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        const unsigned c = p[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) { k = 1; cp = c & 0x1f; }
        else if (c >= 0xe0 && c <= 0xef) { k = 2; cp = c & 0x0f; }
        else if (c >= 0xf0 && c <= 0xf4) { k = 3; cp = c & 0x07; }
        else return false;
        if (i + k >= n) return false; /* cut short */
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (p[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += k + 1;
    }
    return true;
}

/* The length of the well-formed character at p[0..n), or 0 with *bad the
 * length of its maximal ill-formed subpart. */
static size_t utf8_char(const unsigned char *p, size_t n, size_t *bad) {
    const unsigned c = p[0];
    size_t k;
    unsigned lo = 0x80, hi = 0xbf; /* the second byte's range */
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) k = 1;
    else if (c >= 0xe0 && c <= 0xef) { k = 2; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
    else if (c >= 0xf0 && c <= 0xf4) { k = 3; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
    else { *bad = 1; return 0; }
    size_t j = 1;
    for (; j <= k && j < n; j++) {
        const unsigned b = p[j];
        if (j == 1 ? (b < lo || b > hi) : (b & 0xc0) != 0x80) break;
    }
    if (j == k + 1) return k + 1;
    *bad = j; /* the lead and the continuations that fit it */
    return 0;
}

void sb_put_utf8(struct kvb_str *b, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0; /* run: well-formed bytes not yet copied */
    while (i + run < n) {
        size_t bad = 0;
        const size_t len = utf8_char(p + i + run, n - i - run, &bad);
        if (len) { run += len; continue; }
        kvb_str_put(b, s + i, run);
        kvb_str_put(b, "\xef\xbf\xbd", 3);
        i += run + bad;
        run = 0;
    }
    kvb_str_put(b, s + i, run);
}

void serve_error(struct http_resp *r, int status, const char *type, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!utf8_valid(msg, strlen(msg))) snprintf(msg, sizeof msg, "bad request");
    kvb_str_free(&r->body);
    r->status = status;
    r->content_type = "application/json";
    kvb_str_puts(&r->body, "{\"error\":{\"message\":");
    kvb_str_json(&r->body, msg, strlen(msg), 0);
    kvb_str_puts(&r->body, ",\"type\":");
    kvb_str_json(&r->body, type, strlen(type), 0);
    kvb_str_printf(&r->body, ",\"param\":null,\"code\":%d}}\n", status);
}


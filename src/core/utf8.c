/* utf8.c — one code point in and out of UTF-8 (core.h). */
#include "core.h"

uint32_t kvb_utf8_decode(const uint8_t *s, size_t n, int *len) {
    uint8_t c = s[0];
    int need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (need == 1) { *len = 1; return c; }
    if (need == 0 || (size_t)need > n) { *len = 1; return 0x110000u + c; }
    uint32_t cp = c & (0x7F >> need);
    for (int i = 1; i < need; i++) {
        if ((s[i] & 0xC0) != 0x80) { *len = 1; return 0x110000u + c; }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    *len = need;
    return cp;
}

int kvb_utf8_encode(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) { o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F)); return 3; }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F)); o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

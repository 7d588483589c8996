/* unicode.c — category lookups, GPT-2's byte <-> unicode map. */
#include "unicode.h"

static bool in_ranges(const struct kvb_cp_range *r, int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid].lo) hi = mid - 1;
        else if (cp > r[mid].hi) lo = mid + 1;
        else return true;
    }
    return false;
}

bool kvb_cp_is_letter(uint32_t cp) { return cp < 0x110000 && in_ranges(kvb_unicode_letters, kvb_unicode_n_letters, cp); }
bool kvb_cp_is_number(uint32_t cp) { return cp < 0x110000 && in_ranges(kvb_unicode_numbers, kvb_unicode_n_numbers, cp); }
bool kvb_cp_is_punct(uint32_t cp) { return cp < 0x110000 && in_ranges(kvb_unicode_punct, kvb_unicode_n_punct, cp); }
bool kvb_cp_is_mark(uint32_t cp) { return cp < 0x110000 && in_ranges(kvb_unicode_marks, kvb_unicode_n_marks, cp); }

bool kvb_cp_is_space(uint32_t cp) { /* Unicode White_Space */
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Printable bytes map to themselves; the other 68 take 256, 257, ... in order. */
static bool printable(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

uint32_t kvb_byte_to_cp(uint8_t b) {
    if (printable(b)) return b;
    uint32_t k = 0;
    for (int i = 0; i < b; i++) k += !printable(i);
    return 256 + k;
}

int kvb_cp_to_byte(uint32_t cp) {
    if (cp < 256) return printable((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t k = cp - 256;
    for (int b = 0; b < 256; b++)
        if (!printable(b) && k-- == 0) return b;
    return -1;
}

/*
 * unicode.h — what the byte-level BPE pre-tokenizers need from Unicode:
 * \p{L}, \p{N}, \p{P} and \p{M} (general categories L*, N*, P* and M*,
 * tables generated from UnicodeData.txt), \s (the White_Space property),
 * and GPT-2's byte <-> code point mapping.
 */
#ifndef KVB_UNICODE_H
#define KVB_UNICODE_H

#include "../core/core.h"

struct kvb_cp_range {
    uint32_t lo, hi;
};
extern const struct kvb_cp_range kvb_unicode_letters[], kvb_unicode_numbers[], kvb_unicode_punct[], kvb_unicode_marks[];
extern const int kvb_unicode_n_letters, kvb_unicode_n_numbers, kvb_unicode_n_punct, kvb_unicode_n_marks;

bool kvb_cp_is_letter(uint32_t cp);
bool kvb_cp_is_number(uint32_t cp);
bool kvb_cp_is_punct(uint32_t cp);
bool kvb_cp_is_mark(uint32_t cp); /* Mn, Mc, Me: combining marks, variation selectors */
bool kvb_cp_is_space(uint32_t cp);

/* GPT-2 byte-level mapping: byte b is written as code point map[b]. */
uint32_t kvb_byte_to_cp(uint8_t b);
/* Inverse: the byte of a mapped code point, or -1. */
int kvb_cp_to_byte(uint32_t cp);

#endif

/*
 * unicode.h — what the byte-level BPE pre-tokenizers need from Unicode:
 * UTF-8 decoding, \p{L}, \p{N} and \p{P} (general categories L*, N* and P*,
 * tables generated from UnicodeData.txt), \s (the White_Space property),
 * and GPT-2's byte <-> code point mapping.
 */
#ifndef KVB_UNICODE_H
#define KVB_UNICODE_H

#include "../core/core.h"

struct kvb_cp_range {
    uint32_t lo, hi;
};
extern const struct kvb_cp_range kvb_unicode_letters[], kvb_unicode_numbers[], kvb_unicode_punct[];
extern const int kvb_unicode_n_letters, kvb_unicode_n_numbers, kvb_unicode_n_punct;

bool kvb_cp_is_letter(uint32_t cp);
bool kvb_cp_is_number(uint32_t cp);
bool kvb_cp_is_punct(uint32_t cp);
bool kvb_cp_is_space(uint32_t cp);

/* Decodes one code point at s[0..n); *len gets its byte length. An invalid
 * or truncated sequence decodes as one byte with the marker value
 * 0x110000 + byte (not a letter, number or space). */
uint32_t kvb_utf8_decode(const uint8_t *s, size_t n, int *len);
/* Writes cp as UTF-8 (1..4 bytes); returns the length. */
int kvb_utf8_encode(uint32_t cp, char *out);

/* GPT-2 byte-level mapping: byte b is written as code point map[b]. */
uint32_t kvb_byte_to_cp(uint8_t b);
/* Inverse: the byte of a mapped code point, or -1. */
int kvb_cp_to_byte(uint32_t cp);

#endif

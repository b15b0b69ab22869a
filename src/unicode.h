/*
 * unicode.h: the little of Unicode the tokenizers need.
 *
 * Classes of a code point (\p{L}, \p{N}, \s, \p{P}) from tables generated
 * out of Python's unicodedata (src/unicode_tables.h, see
 * scripts/gen-unicode-tables), and UTF-8 decoding that never fails: a byte
 * that does not start a valid, complete, shortest-form sequence decodes as
 * U+FFFD of length 1, so a scanner always advances and keeps every input
 * byte. Nothing here allocates.
 */
#ifndef BT_UNICODE_H
#define BT_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    BT_UCD_LETTER = 1, /* \p{L}: Lu Ll Lt Lm Lo */
    BT_UCD_NUMBER = 2, /* \p{N}: Nd Nl No */
    BT_UCD_SPACE = 4,  /* \s: the White_Space property */
    BT_UCD_PUNCT = 8,  /* \p{P}: Pc Pd Ps Pe Pi Pf Po */
};

#define BT_UCD_REPLACEMENT 0xFFFDu

/* The class bits of cp (0 for unassigned, marks, symbols, controls, and
 * anything above U+10FFFF). */
unsigned bt_ucd_flags(uint32_t cp);

static inline bool bt_ucd_is_letter(uint32_t cp) { return bt_ucd_flags(cp) & BT_UCD_LETTER; }
static inline bool bt_ucd_is_number(uint32_t cp) { return bt_ucd_flags(cp) & BT_UCD_NUMBER; }
static inline bool bt_ucd_is_space(uint32_t cp) { return bt_ucd_flags(cp) & BT_UCD_SPACE; }
static inline bool bt_ucd_is_punct(uint32_t cp) { return bt_ucd_flags(cp) & BT_UCD_PUNCT; }

/* The Unicode version of the tables, e.g. "14.0.0". */
const char *bt_ucd_version(void);

/* Decodes the code point at s[0..n) (n > 0) into *cp and returns its length
 * in bytes (1..4). Invalid, overlong, surrogate or truncated sequences give
 * *cp = U+FFFD and length 1. */
int bt_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* Writes cp (<= U+10FFFF, not a surrogate; else U+FFFD) as UTF-8 into out
 * and returns its length (1..4). */
int bt_utf8_encode(uint32_t cp, char out[4]);

/* s[0..n) as valid UTF-8 into out, which has room for 3 * n bytes: each
 * byte that is not part of a valid character becomes U+FFFD. Returns the
 * bytes written (no NUL). */
size_t bt_utf8_repair(const char *s, size_t n, char *out);

/* Sequence length announced by a lead byte the way llama.cpp splits text
 * into characters: 1 for ASCII and for stray continuation bytes, 2 for
 * 0xC0..0xDF, 3 for 0xE0..0xEF, 4 for 0xF0..0xFF. */
static inline int bt_utf8_lead_len(uint8_t b)
{
    static const int8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[b >> 4];
}

/* Length of the longest prefix of s[0..n) that does not end inside a
 * UTF-8 sequence that could still be completed by more bytes: trailing
 * bytes that are a valid but incomplete sequence are held back; invalid
 * bytes are not (they can never become valid). Used to stream text. */
size_t bt_utf8_complete_prefix(const char *s, size_t n);

#endif /* BT_UNICODE_H */

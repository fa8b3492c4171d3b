/*
 * utf8: classifying UTF-8 byte sequences the way Python's and Rust's lossy decoders do, for the
 * tokenizer (streaming detokenizer, invalid input) and the JSON writer (U+FFFD replacement).
 *
 *     size_t len;
 *     switch (utf8_class(s, n, &len)) {
 *         case U8_OK:    ... one character of len bytes ...
 *         case U8_BAD:   ... len bytes that become one U+FFFD ...
 *         case U8_SHORT: ... the n bytes start a character that continues past the end ...
 *     }
 */
#ifndef TACHYON_UTF8_H
#define TACHYON_UTF8_H

#include <stddef.h>
#include <stdint.h>

enum { U8_OK, U8_BAD, U8_SHORT };

/* Classifies the bytes at s[0..n), n >= 1: U8_OK (one well-formed character of *len bytes),
 * U8_BAD (a maximal subpart of an ill-formed sequence, *len bytes, which Python's and Rust's
 * lossy decoders each turn into one U+FFFD) or U8_SHORT (all n bytes are the well-formed
 * start of a character that continues past the end). */
static inline int utf8_class(const uint8_t *s, size_t n, size_t *len) {
    uint8_t c = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
        *len = 1;
        return U8_OK;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *len = 1;
        return U8_BAD;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *len = n;
            return U8_SHORT;
        }
        uint8_t min = i == 1 ? lo : 0x80, max = i == 1 ? hi : 0xBF;
        if (s[i] < min || s[i] > max) {
            *len = i;
            return U8_BAD;
        }
    }
    *len = need;
    return U8_OK;
}

/* Byte length of the code point at s when Python's str.isspace() holds for it, else 0. Jinja's
 * trim filter and Python's str.strip()/lstrip() (and re's \s) use this set, not just ASCII. */
static inline size_t utf8_py_space(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    if (n == 0) return 0;
    if (s[0] < 0x80) return (s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x20);
    if (s[0] == 0xc2 && n >= 2) return (s[1] == 0x85 || s[1] == 0xa0) ? 2 : 0;
    if (n < 3) return 0;
    if (s[0] == 0xe1) return s[1] == 0x9a && s[2] == 0x80 ? 3 : 0; /* U+1680 */
    if (s[0] == 0xe2 && s[1] == 0x80) /* U+2000..U+200A, U+2028, U+2029, U+202F */
        return (s[2] >= 0x80 && s[2] <= 0x8a) || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf ? 3
                                                                                              : 0;
    if (s[0] == 0xe2 && s[1] == 0x81) return s[2] == 0x9f ? 3 : 0; /* U+205F */
    if (s[0] == 0xe3) return s[1] == 0x80 && s[2] == 0x80 ? 3 : 0; /* U+3000 */
    return 0;
}

/* Like utf8_py_space for the code point that ends at s + n. */
static inline size_t utf8_py_space_before(const char *s, size_t n) {
    if (n && (unsigned char)s[n - 1] < 0x80) return utf8_py_space(s + n - 1, 1);
    if (n >= 2 && utf8_py_space(s + n - 2, 2) == 2) return 2;
    if (n >= 3 && utf8_py_space(s + n - 3, 3) == 3) return 3;
    return 0;
}

#endif

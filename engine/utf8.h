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

#endif

#include "jbuf.h"
#include "utf8.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jb_init(jbuf_t *b) {
    memset(b, 0, sizeof *b);
}

void jb_free(jbuf_t *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

void jb_reset(jbuf_t *b) {
    b->len = 0;
    b->oom = false;
    if (b->p) b->p[0] = '\0';
}

/* Makes room for n more bytes; false (and oom set) when out of memory. */
static bool jb_reserve(jbuf_t *b, size_t n) {
    if (b->oom) return false;
    if (b->len + n + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void jb_raw(jbuf_t *b, const char *s, size_t n) {
    if (!jb_reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, s, n); /* s may be NULL for an empty slice */
    b->len += n;
    b->p[b->len] = '\0';
}

void jb_lit(jbuf_t *b, const char *s) {
    jb_raw(b, s, strlen(s));
}

void jb_printf(jbuf_t *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        jb_raw(b, small, (size_t)n);
        return;
    }
    if (!jb_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length of the first valid UTF-8 sequence at s (1..4), or 0 when s starts with an invalid one;
 * *bad is then the length of the maximal invalid subpart to replace (a sequence cut by the end
 * counts as invalid here: JSON text is never continued). */
static size_t jb_utf8_seq(const unsigned char *s, size_t n, size_t *bad) {
    size_t len;
    if (utf8_class(s, n, &len) == U8_OK) return len;
    *bad = len;
    return 0;
}

bool jb_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, bad;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = jb_utf8_seq(u + i, n - i, &bad);
        if (!k) return false;
        i += k;
    }
    return true;
}

void jb_esc(jbuf_t *b, const char *s, size_t n) {
    /* worst case: every byte becomes \u00XX (6) or U+FFFD (3) */
    if (!jb_reserve(b, n * 6)) return;
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    char *o = b->p + b->len;
    size_t i = 0, bad;
    while (i < n) {
        unsigned c = u[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            *o++ = (char)c;
            i++;
            continue;
        }
        if (c < 0x80) {
            *o++ = '\\';
            switch (c) {
                case '"':
                    *o++ = '"';
                    break;
                case '\\':
                    *o++ = '\\';
                    break;
                case '\n':
                    *o++ = 'n';
                    break;
                case '\r':
                    *o++ = 'r';
                    break;
                case '\t':
                    *o++ = 't';
                    break;
                case '\b':
                    *o++ = 'b';
                    break;
                case '\f':
                    *o++ = 'f';
                    break;
                default:
                    *o++ = 'u';
                    *o++ = '0';
                    *o++ = '0';
                    *o++ = hex[c >> 4];
                    *o++ = hex[c & 15];
            }
            i++;
            continue;
        }
        size_t k = jb_utf8_seq(u + i, n - i, &bad);
        if (k) {
            memcpy(o, u + i, k);
            o += k;
            i += k;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += bad;
        }
    }
    b->len = (size_t)(o - b->p);
    b->p[b->len] = '\0';
}

void jb_str(jbuf_t *b, const char *s, size_t n) {
    jb_raw(b, "\"", 1);
    jb_esc(b, s, n);
    jb_raw(b, "\"", 1);
}

void jb_cstr(jbuf_t *b, const char *s) {
    if (!s)
        jb_raw(b, "null", 4);
    else
        jb_str(b, s, strlen(s));
}

void jb_int(jbuf_t *b, long long v) {
    char t[24];
    int n = snprintf(t, sizeof t, "%lld", v);
    jb_raw(b, t, (size_t)n);
}

void jb_u64(jbuf_t *b, uint64_t v) {
    char t[24];
    int n = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    jb_raw(b, t, (size_t)n);
}

void jb_double(jbuf_t *b, double v) {
    if (isinf(v) && v < 0) v = -9999.0;
    if (!isfinite(v)) {
        jb_raw(b, "null", 4);
        return;
    }
    char t[40];
    int n = 0;
    /* Any decimal of at most 15 digits survives a round trip through a double, so %.15g is
     * the shortest form whenever one of 15 digits or fewer exists. */
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(t, sizeof t, "%.*g", prec, v);
        if (strtod(t, NULL) == v) break;
    }
    if (!strpbrk(t, ".e")) {
        memcpy(t + n, ".0", 3);
        n += 2;
    }
    jb_raw(b, t, (size_t)n);
}

void jb_bytes_array(jbuf_t *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    jb_raw(b, "[", 1);
    bool first = true;
    size_t i = 0, bad;
    while (i < n) {
        size_t k = u[i] < 0x80 ? 1 : jb_utf8_seq(u + i, n - i, &bad);
        static const unsigned char fffd[3] = {0xEF, 0xBF, 0xBD};
        const unsigned char *src = k ? u + i : fffd;
        size_t m = k ? k : 3;
        for (size_t j = 0; j < m; j++) {
            if (!first) jb_raw(b, ",", 1);
            jb_int(b, src[j]);
            first = false;
        }
        i += k ? k : bad;
    }
    jb_raw(b, "]", 1);
}

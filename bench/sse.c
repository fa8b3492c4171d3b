/* sse: incremental Server-Sent Events parsing and allocation-free JSON reading (see sse.h). */
#include "sse.h"

#include <stdlib.h>
#include <string.h>

int bench_sse_init(bench_sse_t *s, size_t cap) {
    memset(s, 0, sizeof *s);
    if (cap < 64) cap = 64;
    s->line = malloc(cap + 1);
    s->data = malloc(cap + 1);
    if (!s->line || !s->data) {
        bench_sse_free(s);
        return -1;
    }
    s->line_cap = s->data_cap = cap;
    return 0;
}

void bench_sse_free(bench_sse_t *s) {
    free(s->line);
    free(s->data);
    memset(s, 0, sizeof *s);
}

static void reset_message(bench_sse_t *s) {
    s->data_len = 0;
    s->n_data = 0;
    s->n_lines = 0;
    s->drop = false;
}

void bench_sse_reset(bench_sse_t *s) {
    reset_message(s);
    s->line_len = 0;
    s->after_cr = false;
    s->failed = false;
}

/* Appends to a buffer with one spare byte for the NUL that messages are handed on with. */
static int append(bench_sse_t *s, char **buf, size_t *len, size_t *cap, const char *p, size_t n) {
    if (*len + n > *cap) {
        size_t c = *cap * 2;
        while (c < *len + n)
            c *= 2;
        char *b = realloc(*buf, c + 1);
        if (!b) {
            s->failed = true;
            return -1;
        }
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    return 0;
}

/* A complete line: a blank one ends the message, a data line adds to it. */
static int end_line(bench_sse_t *s, bench_sse_fn fn, void *user) {
    if (s->line_len == 0) {
        int rc = 0;
        if (!s->drop && s->n_data > 0) {
            s->data[s->data_len] = '\0';
            rc = fn(user, s->data, s->data_len);
        }
        reset_message(s);
        return rc;
    }
    size_t n = s->line_len;
    s->line_len = 0;
    s->n_lines++;
    if (s->drop || s->line[0] == ':') return 0;
    const char *colon = memchr(s->line, ':', n);
    size_t name_len = colon ? (size_t)(colon - s->line) : n;
    if (name_len != 4 || memcmp(s->line, "data", 4)) return 0;
    const char *v = colon ? colon + 1 : s->line + n;
    if (v < s->line + n && *v == ' ') v++;
    if (s->n_data > 0 && append(s, &s->data, &s->data_len, &s->data_cap, "\n", 1) < 0) return -1;
    s->n_data++;
    return append(s, &s->data, &s->data_len, &s->data_cap, v, (size_t)(s->line + n - v));
}

static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The trailing-buffer rule: a message still waiting for its blank line goes out now when it is
 * one data line holding "[DONE]" or a complete JSON value (objects only while the stream is
 * open, since a number or a string could still be a prefix of a longer one). */
static int early(bench_sse_t *s, bench_sse_fn fn, void *user, bool at_end) {
    const char *v;
    size_t n;
    bool in_data = false;
    if (s->drop) return 0;
    if (s->n_lines == 1 && s->n_data == 1 && s->line_len == 0) {
        v = s->data;
        n = s->data_len;
        in_data = true;
    } else if (s->n_lines == 0 && s->line_len > 5 && !memcmp(s->line, "data:", 5)) {
        v = s->line + 5;
        n = s->line_len - 5;
        if (*v == ' ') v++, n--;
    } else {
        return 0;
    }
    while (n && is_ws(*v))
        v++, n--;
    while (n && is_ws(v[n - 1]))
        n--;
    if (!n) return 0;
    bool done = n == 6 && !memcmp(v, "[DONE]", 6);
    if (!done) {
        if (!at_end && (v[0] != '{' || v[n - 1] != '}')) return 0;
        if (!bench_sse_json_valid(v, n)) return 0;
    }
    /* v points into line or data; hand it on NUL-terminated from the start of data. */
    if (in_data) {
        memmove(s->data, v, n);
    } else {
        s->data_len = 0;
        if (append(s, &s->data, &s->data_len, &s->data_cap, v, n) < 0) return -1;
    }
    s->data[n] = '\0';
    s->drop = true;
    s->data_len = 0;
    return fn(user, s->data, n);
}

int bench_sse_feed(bench_sse_t *s, const char *p, size_t n, bench_sse_fn fn, void *user) {
    if (s->failed) return -1;
    size_t i = 0;
    if (n && s->after_cr) {
        if (p[0] == '\n') i = 1;
        s->after_cr = false;
    }
    while (i < n) {
        size_t j = i;
        while (j < n && p[j] != '\n' && p[j] != '\r')
            j++;
        if (append(s, &s->line, &s->line_len, &s->line_cap, p + i, j - i) < 0) return -1;
        if (j == n) break;
        i = j + 1;
        if (p[j] == '\r') {
            if (i < n) {
                if (p[i] == '\n') i++;
            } else {
                s->after_cr = true;
            }
        }
        int rc = end_line(s, fn, user);
        if (rc) return rc;
    }
    return early(s, fn, user, false);
}

int bench_sse_finish(bench_sse_t *s, bench_sse_fn fn, void *user) {
    int rc = 0;
    if (!s->failed) rc = early(s, fn, user, true);
    bench_sse_reset(s);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* JSON reading: each function returns the end of what it read, or NULL on invalid input.      */

static const char *skip_ws(const char *p, const char *e) {
    while (p < e && is_ws(*p))
        p++;
    return p;
}

static bool is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static const char *scan_string(const char *p, const char *e) {
    if (p >= e || *p != '"') return NULL;
    for (p++; p < e; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL;
        if (c == '\\') {
            if (++p >= e) return NULL;
            if (*p == 'u') {
                if (e - p < 5) return NULL;
                for (int k = 1; k <= 4; k++)
                    if (!is_hex(p[k])) return NULL;
                p += 4;
            } else if (!strchr("\"\\/bfnrt", *p)) {
                return NULL;
            }
        }
    }
    return NULL;
}

static const char *scan_digits(const char *p, const char *e) {
    const char *s = p;
    while (p < e && *p >= '0' && *p <= '9')
        p++;
    return p > s ? p : NULL;
}

static const char *scan_number(const char *p, const char *e) {
    if (p < e && *p == '-') p++;
    if (p < e && *p == '0') {
        p++;
    } else if (!(p = scan_digits(p, e))) {
        return NULL;
    }
    if (p < e && *p == '.' && !(p = scan_digits(p + 1, e))) return NULL;
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (!(p = scan_digits(p, e))) return NULL;
    }
    return p;
}

static const char *scan_value(const char *p, const char *e, int depth);

static const char *scan_container(const char *p, const char *e, int depth) {
    char close = *p == '{' ? '}' : ']';
    bool object = *p == '{';
    if (depth >= 64) return NULL;
    p = skip_ws(p + 1, e);
    if (p < e && *p == close) return p + 1;
    for (;;) {
        if (object) {
            if (!(p = scan_string(p, e))) return NULL;
            p = skip_ws(p, e);
            if (p >= e || *p != ':') return NULL;
            p = skip_ws(p + 1, e);
        }
        if (!(p = scan_value(p, e, depth + 1))) return NULL;
        p = skip_ws(p, e);
        if (p >= e) return NULL;
        if (*p == close) return p + 1;
        if (*p != ',') return NULL;
        p = skip_ws(p + 1, e);
    }
}

static const char *scan_literal(const char *p, const char *e, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)(e - p) >= n && !memcmp(p, lit, n) ? p + n : NULL;
}

static const char *scan_value(const char *p, const char *e, int depth) {
    if (p >= e) return NULL;
    switch (*p) {
        case '{':
        case '[':
            return scan_container(p, e, depth);
        case '"':
            return scan_string(p, e);
        case 't':
            return scan_literal(p, e, "true");
        case 'f':
            return scan_literal(p, e, "false");
        case 'n':
            return scan_literal(p, e, "null");
        default:
            return scan_number(p, e);
    }
}

bool bench_sse_json_valid(const char *text, size_t len) {
    const char *e = text + len;
    const char *p = scan_value(skip_ws(text, e), e, 0);
    return p && skip_ws(p, e) == e;
}

const char *bench_sse_json_get(const char *text, size_t len, const char *key, size_t *vlen) {
    const char *e = text + len, *p = skip_ws(text, e);
    size_t klen = strlen(key);
    if (p >= e || *p != '{') return NULL;
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}') return NULL;
    for (;;) {
        const char *k = p;
        if (!(p = scan_string(p, e))) return NULL;
        bool match = (size_t)(p - k) == klen + 2 && !memcmp(k + 1, key, klen);
        p = skip_ws(p, e);
        if (p >= e || *p != ':') return NULL;
        const char *v = skip_ws(p + 1, e);
        if (!(p = scan_value(v, e, 1))) return NULL;
        if (match) {
            *vlen = (size_t)(p - v);
            return v;
        }
        p = skip_ws(p, e);
        if (p >= e || *p != ',') return NULL;
        p = skip_ws(p + 1, e);
    }
}

const char *bench_sse_json_first(const char *v, size_t vlen, size_t *elen) {
    const char *e = v + vlen, *p = skip_ws(v, e);
    if (p >= e || *p != '[') return NULL;
    p = skip_ws(p + 1, e);
    const char *q = p < e && *p != ']' ? scan_value(p, e, 1) : NULL;
    if (!q) return NULL;
    *elen = (size_t)(q - p);
    return p;
}

bool bench_sse_json_nonempty_array(const char *v, size_t vlen) {
    if (!v || !vlen || *v != '[') return false;
    const char *p = skip_ws(v + 1, v + vlen);
    return p < v + vlen && *p != ']';
}

bool bench_sse_json_int(const char *v, size_t vlen, long long *out) {
    if (!v || !vlen || vlen > 20) return false;
    char tmp[24];
    memcpy(tmp, v, vlen);
    tmp[vlen] = '\0';
    char *end;
    long long x = strtoll(tmp, &end, 10);
    if (end == tmp || *end) return false;
    *out = x;
    return true;
}

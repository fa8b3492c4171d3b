#include "json.h"
#include "utf8.h"

#include <errno.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
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

// ---------------------------------------------------------------------------------------------
// Parsing

static const char *skip_json_string(const char *p, const char *end) {
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return end;
}

/* Gives the number nodes of `item`, in document order, the next spellings found in the text. */
static int annotate_numbers(cJSON *item, const char **cursor, const char *end) {
    for (; item; item = item->next) {
        if (cJSON_IsNumber(item)) {
            const char *p = *cursor;
            while (p < end && !(*p == '-' || (*p >= '0' && *p <= '9'))) {
                if (*p == '"')
                    p = skip_json_string(p, end);
                else
                    p++;
            }
            const char *q = p;
            while (q < end && strchr("+-.eE0123456789", *q))
                q++;
            if (p == end) return -1;
            char *lex = cJSON_malloc((size_t)(q - p) + 1);
            if (!lex) return -1;
            memcpy(lex, p, (size_t)(q - p));
            lex[q - p] = '\0';
            item->valuestring = lex;
            *cursor = q;
        }
        if ((cJSON_IsArray(item) || cJSON_IsObject(item)) &&
            annotate_numbers(item->child, cursor, end) < 0)
            return -1;
    }
    return 0;
}

/* Python's json.loads refuses a raw control character inside a string; cJSON copies it (and a
 * raw NUL cuts the string short). Returns the offset of the first one, or -1. Also tells whether
 * any string holds an escaped U+0000. */
static long find_control_char(const char *text, const char *end, bool *escaped_nul) {
    bool in_string = false;
    *escaped_nul = false;
    for (const char *p = text; p < end; p++) {
        unsigned char c = (unsigned char)*p;
        if (!in_string) {
            in_string = c == '"';
        } else if (c == '"') {
            in_string = false;
        } else if (c == '\\') {
            if (end - p >= 6 && memcmp(p + 1, "u0000", 5) == 0) *escaped_nul = true;
            p++;
        } else if (c < 0x20) {
            return (long)(p - text);
        }
    }
    return -1;
}

static unsigned hex4(const char *p) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v = v * 16 + (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

/* The string token that starts at the next '"' from *cursor (cJSON validated it): its decoded
 * byte length and whether it holds U+0000. */
static size_t next_string(const char **cursor, const char *end, bool *has_nul) {
    const char *p = *cursor;
    while (p < end && *p != '"')
        p++;
    size_t n = 0;
    *has_nul = false;
    for (p++; p < end && *p != '"'; p++, n++) {
        if (*p != '\\') continue;
        if (p[1] != 'u') {
            p++;
            continue;
        }
        unsigned cp = hex4(p + 2);
        p += 5;
        if (cp >= 0xd800 && cp <= 0xdbff && end - p > 6 && p[1] == '\\' && p[2] == 'u') {
            n += 3; /* a surrogate pair is one 4-byte character */
            p += 6;
        } else {
            *has_nul |= cp == 0;
            n += cp < 0x80 ? 0 : cp < 0x800 ? 1 : 2;
        }
    }
    *cursor = p < end ? p + 1 : end;
    return n;
}

/* Walks the tree and the text's string tokens together, in document order (an object member's
 * key comes before its value), recording the length of every string that holds U+0000. */
static int mark_nul_strings(cJSON *item, bool members, const char **cursor, const char *end,
                            err_t *err) {
    for (; item; item = item->next) {
        bool nul;
        if (members) {
            next_string(cursor, end, &nul);
            if (nul) return err_set(err, "invalid JSON: an object key holds U+0000");
        }
        if (cJSON_IsString(item)) {
            size_t n = next_string(cursor, end, &nul);
            if (nul && n > INT_MAX) return err_set(err, "invalid JSON: a string is too long");
            if (nul) item->valueint = (int)n;
        } else if ((cJSON_IsArray(item) || cJSON_IsObject(item)) &&
                   mark_nul_strings(item->child, cJSON_IsObject(item), cursor, end, err) < 0) {
            return -1;
        }
    }
    return 0;
}

cJSON *json_parse(const char *text, size_t len, err_t *err) {
    const char *end = NULL;
    cJSON *json = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!json) {
        err_set(err, "invalid JSON near byte %ld", end ? (long)(end - text) : -1L);
        return NULL;
    }
    for (const char *p = end; p < text + len; p++) {
        if (!strchr(" \t\r\n", *p) || !*p) {
            cJSON_Delete(json);
            err_set(err, "invalid JSON: unexpected data at byte %ld", (long)(p - text));
            return NULL;
        }
    }
    bool escaped_nul;
    long bad = find_control_char(text, end, &escaped_nul);
    if (bad >= 0) {
        cJSON_Delete(json);
        err_set(err, "invalid JSON: a control character inside a string at byte %ld", bad);
        return NULL;
    }
    const char *cursor = text;
    if (annotate_numbers(json, &cursor, end) < 0) {
        cJSON_Delete(json);
        err_set(err, "out of memory parsing JSON");
        return NULL;
    }
    cursor = text;
    if (escaped_nul && mark_nul_strings(json, false, &cursor, end, err) < 0) {
        cJSON_Delete(json);
        return NULL;
    }
    return json;
}

cJSON *json_parse_file(const char *path, err_t *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        err_set(err, "cannot be read: %s", strerror(errno));
        return NULL;
    }
    jbuf_t text;
    jb_init(&text);
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;)
        jb_raw(&text, buf, n);
    bool failed = ferror(f);
    fclose(f);
    cJSON *j = NULL;
    if (failed)
        err_set(err, "cannot be read");
    else if (text.oom)
        err_set(err, "out of memory reading it");
    else
        j = json_parse(text.p ? text.p : "", text.len, err);
    jb_free(&text);
    return j;
}

bool json_has_nul(const cJSON *item) {
    return cJSON_IsString(item) && item->valuestring && item->valueint > 0;
}

size_t json_strlen(const cJSON *item) {
    if (!cJSON_IsString(item) || !item->valuestring) return 0;
    return item->valueint > 0 ? (size_t)item->valueint : strlen(item->valuestring);
}

// ---------------------------------------------------------------------------------------------
// Python's json.dumps (ensure_ascii=False, separators ", " and ": ", keys in order) and str()

static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static locale_t c_locale;

static void c_locale_init(void) {
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

/* Number conversions below run under the C locale, whatever the process set with setlocale. */
static locale_t enter_c_locale(void) {
    pthread_once(&c_locale_once, c_locale_init);
    return c_locale ? uselocale(c_locale) : (locale_t)0;
}

static void leave_c_locale(locale_t old) {
    if (old) uselocale(old);
}

/* repr(float): the shortest digits that read back to v, in fixed notation when the decimal
 * exponent is in (-4, 16], else d.ddde+XX. */
static void py_float_repr(double v, char *buf, size_t size, bool json) {
    if (isinf(v)) {
        snprintf(buf, size, "%s%s", v < 0 ? "-" : "", json ? "Infinity" : "inf");
        return;
    }
    if (isnan(v)) {
        snprintf(buf, size, "%s", json ? "NaN" : "nan");
        return;
    }
    if (v == 0) {
        snprintf(buf, size, "%s", signbit(v) ? "-0.0" : "0.0");
        return;
    }
    locale_t old = enter_c_locale();
    char tmp[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
        if (strtod(tmp, NULL) == v) break;
    }
    leave_c_locale(old);
    char digits[24];
    int nd = 0, exp10 = 0;
    bool neg = tmp[0] == '-';
    for (const char *p = tmp + neg; *p; p++) {
        if (*p >= '0' && *p <= '9' && nd < (int)sizeof digits - 1) digits[nd++] = *p;
        if (*p == 'e') {
            exp10 = atoi(p + 1);
            break;
        }
    }
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    int decpt = exp10 + 1;
    jbuf_t b = {0};
    char sign[2] = {neg ? '-' : '\0', '\0'};
    jb_lit(&b, sign);
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            jb_lit(&b, "0.");
            for (int i = 0; i < -decpt; i++)
                jb_lit(&b, "0");
            jb_lit(&b, digits);
        } else if (decpt >= nd) {
            jb_lit(&b, digits);
            for (int i = nd; i < decpt; i++)
                jb_lit(&b, "0");
            jb_lit(&b, ".0");
        } else {
            jb_raw(&b, digits, decpt);
            jb_lit(&b, ".");
            jb_lit(&b, digits + decpt);
        }
    } else {
        char e[16];
        jb_raw(&b, digits, 1);
        if (nd > 1) {
            jb_lit(&b, ".");
            jb_lit(&b, digits + 1);
        }
        snprintf(e, sizeof e, "e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
        jb_lit(&b, e);
    }
    snprintf(buf, size, "%s", b.p ? b.p : "0.0");
    free(b.p);
}

/* A number as Python sees it after json.loads: an int when its spelling (recorded by
 * json_parse) has no fraction or exponent, else a float. Without a spelling, integral
 * values within 2^53 count as ints. */
static void py_number(jbuf_t *b, const cJSON *item, bool json) {
    char buf[64];
    const char *lex = item->valuestring;
    if (lex && !strpbrk(lex, ".eE")) {
        jb_lit(b, strcmp(lex, "-0") == 0 ? "0" : lex);
        return;
    }
    double v = item->valuedouble;
    if (lex) {
        locale_t old = enter_c_locale();
        v = strtod(lex, NULL);
        leave_c_locale(old);
    } else if (v == floor(v) && fabs(v) <= 9007199254740992.0) {
        snprintf(buf, sizeof buf, "%lld", (long long)v);
        jb_lit(b, buf);
        return;
    }
    py_float_repr(v, buf, sizeof buf, json);
    jb_lit(b, buf);
}

void jb_py_number_text(jbuf_t *b, const char *spelling, size_t n) {
    char small[64], *text = n < sizeof small ? small : malloc(n + 1);
    if (!text) {
        b->oom = true;
        return;
    }
    memcpy(text, spelling, n);
    text[n] = '\0';
    cJSON item = {.type = cJSON_Number, .valuestring = text};
    py_number(b, &item, true);
    if (text != small) free(text);
}

void jb_py_float(jbuf_t *b, double v, bool json) {
    char buf[64];
    py_float_repr(v, buf, sizeof buf, json);
    jb_lit(b, buf);
}

void jb_py_string(jbuf_t *b, const char *s, size_t n) {
    jb_lit(b, "\"");
    for (const char *p = s; p < s + n; p++) {
        unsigned char c = (unsigned char)*p;
        const char *esc = NULL;
        char u[8];
        switch (c) {
            case '"':
                esc = "\\\"";
                break;
            case '\\':
                esc = "\\\\";
                break;
            case '\n':
                esc = "\\n";
                break;
            case '\r':
                esc = "\\r";
                break;
            case '\t':
                esc = "\\t";
                break;
            case '\b':
                esc = "\\b";
                break;
            case '\f':
                esc = "\\f";
                break;
            default:
                if (c < 0x20) {
                    snprintf(u, sizeof u, "\\u%04x", c);
                    esc = u;
                }
        }
        if (esc)
            jb_lit(b, esc);
        else
            jb_raw(b, p, 1);
    }
    jb_lit(b, "\"");
}

/* Python dicts keep one entry per key: the first key's position with the last key's value. */
bool json_key_seen_before(const cJSON *obj, const cJSON *item) {
    for (const cJSON *c = obj->child; c != item; c = c->next)
        if (strcmp(c->string, item->string) == 0) return true;
    return false;
}

const cJSON *json_key_last_value(const cJSON *item) {
    const cJSON *last = item;
    for (const cJSON *c = item->next; c; c = c->next)
        if (strcmp(c->string, item->string) == 0) last = c;
    return last;
}

void jb_py_dumps(jbuf_t *b, const cJSON *item) {
    if (cJSON_IsObject(item)) {
        jb_lit(b, "{");
        bool first = true;
        for (const cJSON *c = item->child; c; c = c->next) {
            if (json_key_seen_before(item, c)) continue;
            if (!first) jb_lit(b, ", ");
            first = false;
            jb_py_string(b, c->string, strlen(c->string));
            jb_lit(b, ": ");
            jb_py_dumps(b, json_key_last_value(c));
        }
        jb_lit(b, "}");
    } else if (cJSON_IsArray(item)) {
        jb_lit(b, "[");
        for (const cJSON *c = item->child; c; c = c->next) {
            if (c != item->child) jb_lit(b, ", ");
            jb_py_dumps(b, c);
        }
        jb_lit(b, "]");
    } else if (cJSON_IsString(item)) {
        jb_py_string(b, item->valuestring, json_strlen(item));
    } else if (cJSON_IsNumber(item)) {
        py_number(b, item, true);
    } else if (cJSON_IsBool(item)) {
        jb_lit(b, cJSON_IsTrue(item) ? "true" : "false");
    } else {
        jb_lit(b, "null");
    }
}

/* Jinja's `string` filter: Python str() of a scalar. */
void jb_py_str(jbuf_t *b, const cJSON *item) {
    if (cJSON_IsString(item))
        jb_raw(b, item->valuestring, json_strlen(item));
    else if (cJSON_IsNumber(item))
        py_number(b, item, false);
    else if (cJSON_IsBool(item))
        jb_lit(b, cJSON_IsTrue(item) ? "True" : "False");
    else
        jb_lit(b, "None");
}

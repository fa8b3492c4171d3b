/*
 * jnorm: incremental JSON in, Python's json.dumps out (jnorm.h).
 */
#include "jnorm.h"

#include <string.h>

void jnorm_init(jnorm_t *j) {
    memset(j, 0, sizeof *j);
    j->state = JN_VALUE;
    jb_init(&j->key);
}

void jnorm_free(jnorm_t *j) {
    jb_free(&j->key);
}

static void put(jnorm_t *j, const char *s, size_t n) {
    if (j->out) jb_raw(j->out, s, n);
}

/* One decoded character (its UTF-8 bytes, or one byte of a raw multi-byte character) of a
 * string, written as json.dumps escapes it. */
static void put_char(jnorm_t *j, const char *s, size_t n) {
    if (j->in_key && j->depth == 1) jb_raw(&j->key, s, n);
    if (j->decoded && !j->in_key) jb_raw(j->decoded, s, n);
    if (!j->out) return;
    if (n > 1 || (unsigned char)s[0] >= 0x20) {
        if (n == 1 && (s[0] == '"' || s[0] == '\\')) {
            char esc[2] = {'\\', s[0]};
            put(j, esc, 2);
        } else {
            put(j, s, n);
        }
        return;
    }
    static const char *const named[32] = {
        ['\b'] = "\\b", ['\f'] = "\\f", ['\n'] = "\\n", ['\r'] = "\\r", ['\t'] = "\\t"};
    const char *e = named[(unsigned char)s[0]];
    if (e) {
        put(j, e, 2);
    } else {
        char u[7];
        static const char hex[] = "0123456789abcdef";
        memcpy(u, "\\u00", 4);
        u[4] = hex[(unsigned char)s[0] >> 4];
        u[5] = hex[(unsigned char)s[0] & 15];
        put(j, u, 6);
    }
}

static void put_code_point(jnorm_t *j, unsigned cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12);
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18);
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    put_char(j, u, n);
}

static jnorm_state_t fail(jnorm_t *j) {
    return j->state = JN_ERROR;
}

/* A scalar or a container ended. */
static jnorm_state_t value_done(jnorm_t *j) {
    return j->state = j->depth == 0 ? JN_DONE : JN_AFTER;
}

/* RFC 8259's number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool valid_number(const char *s, int n) {
    int i = 0;
    if (i < n && s[i] == '-') i++;
    if (i < n && s[i] == '0') {
        i++;
    } else {
        if (i >= n || s[i] < '1' || s[i] > '9') return false;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    if (i < n && s[i] == '.') {
        int d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d) return false;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        int d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d) return false;
    }
    return i == n;
}

static jnorm_state_t end_number(jnorm_t *j) {
    if (!valid_number(j->tok, j->ntok)) return fail(j);
    if (j->out) jb_py_number_text(j->out, j->tok, (size_t)j->ntok);
    return value_done(j);
}

static jnorm_state_t open_container(jnorm_t *j, char c) {
    if (j->depth == JNORM_MAX_DEPTH) return fail(j);
    j->stack[j->depth++] = c;
    put(j, &c, 1);
    return j->state = c == '{' ? JN_KEY_OR_END : JN_VALUE_OR_END;
}

static jnorm_state_t close_container(jnorm_t *j, char c) {
    if (j->depth == 0 || j->stack[j->depth - 1] != (c == '}' ? '{' : '[')) return fail(j);
    j->depth--;
    put(j, &c, 1);
    return value_done(j);
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static jnorm_state_t start_value(jnorm_t *j, char c) {
    if (c == '{' || c == '[') return open_container(j, c);
    if (c == '"') {
        j->in_key = false;
        put(j, "\"", 1);
        return j->state = JN_STRING;
    }
    j->ntok = 0;
    j->tok[j->ntok++] = c;
    if (c == '-' || (c >= '0' && c <= '9')) return j->state = JN_NUMBER;
    if (c == 't' || c == 'f' || c == 'n') return j->state = JN_LITERAL;
    return fail(j);
}

static jnorm_state_t start_key(jnorm_t *j) {
    j->in_key = true;
    if (j->depth == 1) jb_reset(&j->key);
    put(j, "\"", 1);
    return j->state = JN_STRING;
}

static jnorm_state_t escaped(jnorm_t *j, char c) {
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = memchr(from, c, sizeof from - 1);
    if (c == 'u') {
        j->ntok = 0;
        return j->state = JN_UNICODE;
    }
    if (!k || j->high) return fail(j);
    put_char(j, &to[k - from], 1);
    return j->state = JN_STRING;
}

static jnorm_state_t unicode(jnorm_t *j, char c) {
    bool hex = (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
    if (!hex) return fail(j);
    j->tok[j->ntok++] = c;
    if (j->ntok < 4) return j->state;
    unsigned cp = 0;
    for (int i = 0; i < 4; i++) {
        char d = j->tok[i];
        cp = cp * 16 + (unsigned)(d <= '9' ? d - '0' : (d | 0x20) - 'a' + 10);
    }
    if (j->high) {
        if (cp < 0xDC00 || cp > 0xDFFF) return fail(j);
        put_code_point(j, 0x10000 + ((j->high - 0xD800) << 10) + (cp - 0xDC00));
        j->high = 0;
    } else if (cp >= 0xD800 && cp <= 0xDBFF) {
        j->high = cp;
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        return fail(j); /* a lone low surrogate: not text */
    } else {
        put_code_point(j, cp);
    }
    return j->state = JN_STRING;
}

static jnorm_state_t in_string(jnorm_t *j, char c) {
    if (j->high && c != '\\') return fail(j); /* a high surrogate needs its low half next */
    if (c == '\\') return j->state = JN_ESCAPE;
    if ((unsigned char)c < 0x20) return fail(j);
    if (c != '"') {
        put_char(j, &c, 1);
        return j->state;
    }
    put(j, "\"", 1);
    if (!j->in_key) return value_done(j);
    j->in_key = false;
    return j->state = JN_COLON;
}

static jnorm_state_t literal(jnorm_t *j, char c) {
    static const char *const words[] = {"true", "false", "null"};
    if (j->ntok == (int)sizeof j->tok) return fail(j);
    j->tok[j->ntok++] = c;
    for (int w = 0; w < 3; w++) {
        size_t n = strlen(words[w]);
        if ((size_t)j->ntok > n || memcmp(words[w], j->tok, (size_t)j->ntok) != 0) continue;
        if ((size_t)j->ntok < n) return j->state;
        put(j, words[w], n);
        return value_done(j);
    }
    return fail(j);
}

jnorm_state_t jnorm_push(jnorm_t *j, char c) {
    switch (j->state) {
        case JN_ERROR:
            return JN_ERROR;
        case JN_DONE:
            return is_space(c) ? JN_DONE : fail(j);
        case JN_VALUE:
            return is_space(c) ? j->state : start_value(j, c);
        case JN_VALUE_OR_END:
            if (is_space(c)) return j->state;
            return c == ']' ? close_container(j, c) : start_value(j, c);
        case JN_KEY_OR_END:
            if (is_space(c)) return j->state;
            if (c == '}') return close_container(j, c);
            return c == '"' ? start_key(j) : fail(j);
        case JN_KEY:
            if (is_space(c)) return j->state;
            return c == '"' ? start_key(j) : fail(j);
        case JN_COLON:
            if (is_space(c)) return j->state;
            if (c != ':') return fail(j);
            put(j, ": ", 2);
            return j->state = JN_VALUE;
        case JN_AFTER:
            if (is_space(c)) return j->state;
            if (c == '}' || c == ']') return close_container(j, c);
            if (c != ',') return fail(j);
            put(j, ", ", 2);
            return j->state = j->stack[j->depth - 1] == '{' ? JN_KEY : JN_VALUE;
        case JN_STRING:
            return in_string(j, c);
        case JN_ESCAPE:
            return escaped(j, c);
        case JN_UNICODE:
            return unicode(j, c);
        case JN_NUMBER:
            if (strchr("0123456789+-.eE", c) && c) {
                if (j->ntok == (int)sizeof j->tok) return fail(j);
                j->tok[j->ntok++] = c;
                return j->state;
            }
            if (end_number(j) == JN_ERROR) return JN_ERROR;
            return jnorm_push(j, c);
        case JN_LITERAL:
            return literal(j, c);
    }
    return fail(j);
}

jnorm_state_t jnorm_end(jnorm_t *j) {
    if (j->state == JN_NUMBER && j->depth == 0) return end_number(j);
    return j->state == JN_DONE ? JN_DONE : fail(j);
}

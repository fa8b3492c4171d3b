#include "ui_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

typedef struct line {
    char *s;
    size_t len, cap;
    ui_txt_style_t style;
} line_t;

struct ui_text {
    line_t *ring; /* [cap] */
    int cap, head, n;
    bool open; /* the newest line takes further appends */
};

ui_text_t *ui_text_create(int max_lines, err_t *err) {
    if (max_lines < 1) {
        err_set(err, "ui text: max_lines must be positive, got %d", max_lines);
        return NULL;
    }
    ui_text_t *t = calloc(1, sizeof *t);
    if (!t || !(t->ring = calloc((size_t)max_lines, sizeof *t->ring))) {
        free(t);
        err_set(err, "ui text: out of memory");
        return NULL;
    }
    t->cap = max_lines;
    return t;
}

void ui_text_clear(ui_text_t *t) {
    for (int i = 0; i < t->cap; i++) {
        free(t->ring[i].s);
        t->ring[i] = (line_t){0};
    }
    t->head = t->n = 0;
    t->open = false;
}

void ui_text_destroy(ui_text_t *t) {
    if (!t) return;
    ui_text_clear(t);
    free(t->ring);
    free(t);
}

int ui_text_count(const ui_text_t *t) {
    return t->n;
}

static line_t *line_at(const ui_text_t *t, int i) { /* 0 = oldest */
    return &t->ring[(t->head + i) % t->cap];
}

static line_t *new_line(ui_text_t *t, ui_txt_style_t style) {
    line_t *l;
    if (t->n == t->cap) { /* reuse the oldest line's buffer */
        l = &t->ring[t->head];
        t->head = (t->head + 1) % t->cap;
    } else {
        l = line_at(t, t->n);
        t->n++;
    }
    l->len = 0;
    if (l->s) l->s[0] = '\0';
    l->style = style;
    t->open = true;
    return l;
}

static int line_put(line_t *l, const char *text, size_t len) {
    if (l->len + len + 1 > l->cap) {
        size_t cap = l->cap ? l->cap : 64;
        while (cap < l->len + len + 1)
            cap *= 2;
        char *s = realloc(l->s, cap);
        if (!s) return -1;
        l->s = s;
        l->cap = cap;
    }
    memcpy(l->s + l->len, text, len);
    l->len += len;
    l->s[l->len] = '\0';
    return 0;
}

int ui_text_append(ui_text_t *t, ui_txt_style_t style, const char *text, size_t len) {
    line_t *l =
        t->open && t->n && line_at(t, t->n - 1)->style == style ? line_at(t, t->n - 1) : NULL;
    for (;;) {
        if (!l) l = new_line(t, style);
        const char *nl = memchr(text, '\n', len);
        size_t part = nl ? (size_t)(nl - text) : len;
        /* carriage returns and tabs would move the curses cursor: keep the text printable */
        for (size_t i = 0; i < part; i++) {
            char c = text[i] == '\t' ? ' ' : text[i];
            if ((unsigned char)c < 0x20 || c == 0x7f) continue;
            if (line_put(l, &c, 1) < 0) return -1;
        }
        if (!nl) return 0;
        text += part + 1;
        len -= part + 1;
        l = NULL;
        t->open = false;
        if (len == 0) return 0;
    }
}

void ui_text_end(ui_text_t *t) {
    t->open = false;
}

int ui_text_add(ui_text_t *t, ui_txt_style_t style, const char *text) {
    ui_text_end(t);
    if (!*text) {
        new_line(t, style);
        ui_text_end(t);
        return 0;
    }
    int rc = ui_text_append(t, style, text, strlen(text));
    ui_text_end(t);
    return rc;
}

int ui_text_addf(ui_text_t *t, ui_txt_style_t style, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return ui_text_add(t, style, buf);
}

/* Width of one code point at s (its byte length in *n); invalid bytes are one column. */
static int char_width(const char *s, size_t len, size_t *n) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &cp);
    if (k <= 0) {
        *n = 1;
        return 1;
    }
    *n = (size_t)k;
    return utf8proc_charwidth(cp);
}

/* Tables (a style of their own) wrap at any character, text at spaces. */
static bool wraps_words(ui_txt_style_t st) {
    return st != UI_TXT_PRE && st != UI_TXT_BETTER && st != UI_TXT_WORSE;
}

size_t ui_text_fit(const char *s, size_t len, int width, bool wrap_words) {
    size_t i = 0, last_space = 0;
    int cols = 0;
    while (i < len) {
        size_t n;
        int w = char_width(s + i, len - i, &n);
        if (cols + w > width) break;
        cols += w;
        i += n;
        if (s[i - 1] == ' ') last_space = i;
    }
    if (i == 0 && len > 0) { /* not even one character fits: take it anyway */
        size_t n;
        char_width(s, len, &n);
        return n;
    }
    if (i < len && wrap_words && last_space > 0) return last_space;
    return i;
}

static bool visible(const line_t *l, bool show_reasoning) {
    if (l->style == UI_TXT_REASONING) return show_reasoning;
    if (l->style == UI_TXT_FOLD) return !show_reasoning;
    return true;
}

/* Rows a line takes at this width. */
static int line_rows(const line_t *l, int width) {
    if (l->len == 0) return 1;
    bool words = wraps_words(l->style);
    int rows = 0;
    for (size_t i = 0; i < l->len; rows++)
        i += ui_text_fit(l->s + i, l->len - i, width, words);
    return rows;
}

int ui_text_rows(const ui_text_t *t, int width, int max_rows, int *scroll, bool show_reasoning,
                 ui_text_row_t *rows) {
    if (width < 1 || max_rows < 1) return 0;
    if (*scroll < 0) *scroll = 0;
    /* Walk lines from the newest back until the pane plus the scroll offset is covered. */
    int need = max_rows + *scroll, have = 0, first = t->n;
    while (first > 0 && have < need) {
        const line_t *l = line_at(t, first - 1);
        if (visible(l, show_reasoning)) have += line_rows(l, width);
        first--;
    }
    if (have < need) { /* not enough text to scroll that far: show the top */
        *scroll = have > max_rows ? have - max_rows : 0;
        need = max_rows + *scroll;
    }
    int skip_top = have > need ? have - need : 0; /* rows of the first line above the pane */
    int out = 0;
    for (int i = first; i < t->n && out < max_rows; i++) {
        const line_t *l = line_at(t, i);
        if (!visible(l, show_reasoning)) continue;
        size_t pos = 0;
        bool words = wraps_words(l->style);
        do {
            size_t n = l->len ? ui_text_fit(l->s + pos, l->len - pos, width, words) : 0;
            if (skip_top > 0) {
                skip_top--;
            } else if (out < max_rows) {
                rows[out++] = (ui_text_row_t){l->s ? l->s + pos : "", n, l->style};
            }
            pos += n;
        } while (pos < l->len);
    }
    return out;
}

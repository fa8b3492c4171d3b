/* lineedit: see lineedit.h. The line is always valid UTF-8 without control characters other than
 * '\n' (every way in sanitises), so cursor movement never meets an invalid byte. A "character" for
 * the cursor is a cluster: a code point and the zero-width code points (combining marks, joiners)
 * after it, so the cursor never stops between a letter and its accent. */
#include "lineedit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <utf8proc.h>

#include "statedir.h"

#define MULTILINE_MARK '\x1e' /* starts a multi-line entry in the history file */

struct le {
    char *buf; /* [cap + 1] the line */
    size_t len, cap, cursor;
    size_t scroll; /* byte offset of the first visible cluster */

    char *kill; /* [cap + 1] the last killed text */
    size_t kill_len;

    char *saved; /* [cap + 1] the line being edited while browsing the history */
    char *submitted;
    char *sugg; /* [cap + 1] inline suggestion */

    char **hist; /* [hist_max] oldest first, each malloc'd */
    int hist_n, hist_max;
    int hpos; /* index of the entry shown; hist_n = the line being edited */

    le_complete_fn complete;
    void *user;
    le_completion_t comp; /* the suggestion's scratch */
    le_completion_t tab;  /* the last Tab's candidates */
    bool show_cands;
};

/* ------------------------------------------------------------------------------------------ */
/* UTF-8 helpers                                                                               */

/* Decodes the code point at s[0, n); returns its length, or -1 for an invalid sequence. */
static int decode(const char *s, size_t n, int32_t *cp) {
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, cp);
    return k > 0 ? (int)k : -1;
}

static bool is_control(int32_t cp) {
    return cp < 0x20 || (cp >= 0x7f && cp < 0xa0);
}

static int cp_width(int32_t cp) {
    if (cp == '\n') return 1; /* drawn as a mark, so the cursor can stand on it */
    if (is_control(cp)) return 0;
    return utf8proc_charwidth(cp);
}

/* End of the cluster that starts at pos (pos < len). */
static size_t next_cluster(const char *s, size_t len, size_t pos) {
    int32_t cp;
    int k = decode(s + pos, len - pos, &cp);
    pos += k > 0 ? (size_t)k : 1;
    while (pos < len) {
        k = decode(s + pos, len - pos, &cp);
        if (k < 0 || cp_width(cp) != 0 || is_control(cp)) break;
        pos += (size_t)k;
    }
    return pos;
}

/* Start of the cluster that ends at pos (pos > 0). */
static size_t prev_cluster(const char *s, size_t pos) {
    for (;;) {
        size_t q = pos - 1;
        while (q > 0 && ((unsigned char)s[q] & 0xC0) == 0x80)
            q--;
        int32_t cp;
        int k = decode(s + q, pos - q, &cp);
        pos = q;
        if (pos == 0 || k < 0 || cp_width(cp) != 0) return pos;
    }
}

/* The cluster boundary at or after pos: an edit can join text into one cluster (deleting the
 * letter between a letter and a combining mark), leaving pos inside it. */
static size_t snap(const char *s, size_t len, size_t pos) {
    while (pos > 0 && pos < len) {
        int32_t cp;
        int k = decode(s + pos, len - pos, &cp);
        if (k < 0 || cp_width(cp) != 0) break;
        pos += (size_t)k;
    }
    return pos;
}

static int cluster_width(const char *s, size_t a, size_t b) {
    return le_text_width(s + a, b - a);
}

int le_text_width(const char *s, size_t len) {
    int w = 0;
    size_t i = 0;
    while (i < len) {
        int32_t cp;
        int k = decode(s + i, len - i, &cp);
        if (k < 0) {
            w += 1;
            i += 1;
            continue;
        }
        w += cp_width(cp);
        i += (size_t)k;
    }
    return w;
}

/* Letters and digits make words (readline's rule), judged on a cluster's first code point. */
static bool is_word_at(const char *s, size_t len, size_t pos) {
    int32_t cp;
    if (decode(s + pos, len - pos, &cp) < 0) return false;
    switch (utf8proc_category(cp)) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO:
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_NL:
        case UTF8PROC_CATEGORY_NO:
            return true;
        default:
            return false;
    }
}

/* Copies text into dst (room for cap bytes, then a NUL) dropping invalid bytes and control
 * characters but '\n', and stopping before a character that would not fit. CR LF and CR (what a
 * terminal pastes for a line break) become '\n'; a tab becomes four spaces, which every pane
 * draws alike. Returns the bytes written. */
static size_t sanitize(char *dst, size_t cap, const char *text, size_t n) {
    size_t out = 0, i = 0;
    while (i < n) {
        int32_t cp;
        int k = decode(text + i, n - i, &cp);
        if (k < 0) {
            i++;
            continue;
        }
        const char *put = text + i;
        size_t len = (size_t)k;
        if (cp == '\r')
            put = i + 1 < n && text[i + 1] == '\n' ? "" : "\n";
        else if (cp == '\t')
            put = "    ";
        else if (is_control(cp) && cp != '\n')
            put = "";
        if (put != text + i) len = strlen(put);
        if (out + len > cap) break;
        memmove(dst + out, put, len);
        out += len;
        i += (size_t)k;
    }
    return out;
}

/* ------------------------------------------------------------------------------------------ */
/* Editing primitives                                                                          */

/* Replaces buf[a, b) with the sanitised text[0, n), cut to what fits; the cursor goes to the end
 * of the inserted text. Returns the bytes inserted. */
static size_t replace(le_t *le, size_t a, size_t b, const char *text, size_t n) {
    size_t tail = le->len - b;
    size_t room = le->cap - (le->len - (b - a));
    /* Park the tail at the end of the buffer, so the text can be sanitised straight into place
     * whatever its length. */
    memmove(le->buf + le->cap - tail, le->buf + b, tail);
    size_t w = sanitize(le->buf + a, room, text, n);
    memmove(le->buf + a + w, le->buf + le->cap - tail, tail);
    le->len = a + w + tail;
    le->buf[le->len] = '\0';
    le->cursor = snap(le->buf, le->len, a + w);
    if (a < le->scroll) le->scroll = a;
    return w;
}

static void kill_range(le_t *le, size_t a, size_t b) {
    memcpy(le->kill, le->buf + a, b - a);
    le->kill_len = b - a;
    le->kill[le->kill_len] = '\0';
    replace(le, a, b, "", 0);
}

static void update_suggestion(le_t *le) {
    le->sugg[0] = '\0';
    if (!le->complete || le->len == 0 || le->cursor != le->len) return;
    memset(&le->comp, 0, sizeof le->comp);
    le->comp.best = -1;
    int n = le->complete(le->user, le->buf, le->cursor, &le->comp);
    if (n <= 0 || le->comp.best < 0 || le->comp.best >= le->comp.n || le->comp.start > le->cursor)
        return;
    const char *cand = le->comp.cand[le->comp.best];
    size_t wlen = le->cursor - le->comp.start;
    if (!cand || strncmp(cand, le->buf + le->comp.start, wlen) != 0 || strlen(cand) <= wlen) return;
    size_t w = sanitize(le->sugg, le->cap - le->len, cand + wlen, strlen(cand + wlen));
    le->sugg[w] = '\0';
}

static void set_line(le_t *le, const char *text) {
    le->len = le->cursor = le->scroll = 0;
    le->buf[0] = '\0';
    replace(le, 0, 0, text, strlen(text));
}

static le_result_t accept_suggestion(le_t *le) {
    if (le->cursor != le->len || le->sugg[0] == '\0') return LE_IGNORED;
    replace(le, le->len, le->len, le->sugg, strlen(le->sugg));
    return LE_CHANGED;
}

static size_t common_prefix(const char *const *c, int n) {
    size_t p = strlen(c[0]);
    for (int i = 1; i < n; i++) {
        size_t j = 0;
        while (j < p && c[i][j] == c[0][j])
            j++;
        p = j;
    }
    /* Never end inside a multi-byte character. */
    while (p > 0 && ((unsigned char)c[0][p] & 0xC0) == 0x80)
        p--;
    return p;
}

static le_result_t tab(le_t *le) {
    if (!le->complete) return LE_IGNORED;
    memset(&le->tab, 0, sizeof le->tab);
    le->tab.best = -1;
    int n = le->complete(le->user, le->buf, le->cursor, &le->tab);
    if (n <= 0 || le->tab.n <= 0 || le->tab.start > le->cursor) return LE_IGNORED;
    if (le->tab.n > LE_MAX_CANDIDATES) le->tab.n = LE_MAX_CANDIDATES;
    size_t start = le->tab.start, wlen = le->cursor - start;
    const char *word = le->buf + start;
    if (le->tab.n == 1) {
        const char *c = le->tab.cand[0];
        size_t cl = strlen(c);
        bool space = le->tab.space_after && le->buf[le->cursor] != ' ';
        if (cl == wlen && memcmp(c, word, wlen) == 0 && !space) return LE_IGNORED;
        if (le->len - wlen + cl + (space ? 1 : 0) > le->cap) return LE_IGNORED;
        replace(le, start, le->cursor, c, cl);
        if (space) replace(le, le->cursor, le->cursor, " ", 1);
        return LE_CHANGED;
    }
    size_t p = common_prefix(le->tab.cand, le->tab.n);
    if (p > wlen && strncmp(le->tab.cand[0], word, wlen) == 0 && le->len - wlen + p <= le->cap)
        replace(le, start, le->cursor, le->tab.cand[0], p);
    le->show_cands = true;
    return LE_CANDIDATES;
}

static le_result_t history_move(le_t *le, int dir) {
    int to = le->hpos + dir;
    if (to < 0 || to > le->hist_n) return LE_IGNORED;
    if (le->hpos == le->hist_n) memcpy(le->saved, le->buf, le->len + 1);
    le->hpos = to;
    set_line(le, to == le->hist_n ? le->saved : le->hist[to]);
    return LE_CHANGED;
}

static le_result_t submit(le_t *le) {
    memcpy(le->submitted, le->buf, le->len + 1);
    le_history_add(le, le->submitted);
    le->hpos = le->hist_n;
    set_line(le, "");
    /* the suggestion belonged to the submitted line: left on the empty one, Right would turn it
     * into text */
    le->sugg[0] = '\0';
    return LE_SUBMIT;
}

/* ------------------------------------------------------------------------------------------ */
/* Public API                                                                                  */

le_t *le_create(size_t max_bytes, int history_max, err_t *err) {
    if (max_bytes < 16 || max_bytes > (1u << 24) || history_max < 1 || history_max > 1000000) {
        err_set(err, "lineedit: bad sizes (line %zu bytes, history %d)", max_bytes, history_max);
        return NULL;
    }
    le_t *le = calloc(1, sizeof *le);
    if (!le) goto oom;
    le->cap = max_bytes;
    le->hist_max = history_max;
    le->buf = calloc(1, max_bytes + 1);
    le->kill = calloc(1, max_bytes + 1);
    le->saved = calloc(1, max_bytes + 1);
    le->submitted = calloc(1, max_bytes + 1);
    le->sugg = calloc(1, max_bytes + 1);
    le->hist = calloc((size_t)history_max, sizeof *le->hist);
    if (!le->buf || !le->kill || !le->saved || !le->submitted || !le->sugg || !le->hist) goto oom;
    return le;
oom:
    le_destroy(le);
    err_set(err, "lineedit: out of memory");
    return NULL;
}

void le_destroy(le_t *le) {
    if (!le) return;
    for (int i = 0; i < le->hist_n; i++)
        free(le->hist[i]);
    free(le->hist);
    free(le->buf);
    free(le->kill);
    free(le->saved);
    free(le->submitted);
    free(le->sugg);
    free(le);
}

void le_set_completer(le_t *le, le_complete_fn fn, void *user) {
    le->complete = fn;
    le->user = user;
    update_suggestion(le);
}

le_result_t le_key(le_t *le, int key) {
    le->show_cands = false;
    size_t c = le->cursor, len = le->len;
    le_result_t r = LE_CHANGED;
    switch (key) {
        case LE_KEY_CTRL_A:
        case LE_KEY_HOME:
            if (c == 0) return LE_IGNORED;
            le->cursor = 0;
            break;
        case LE_KEY_CTRL_E:
        case LE_KEY_END:
            if (c == len)
                r = accept_suggestion(le);
            else
                le->cursor = len;
            break;
        case LE_KEY_CTRL_B:
        case LE_KEY_LEFT:
            if (c == 0) return LE_IGNORED;
            le->cursor = prev_cluster(le->buf, c);
            break;
        case LE_KEY_CTRL_F:
        case LE_KEY_RIGHT:
            if (c == len)
                r = accept_suggestion(le);
            else
                le->cursor = next_cluster(le->buf, len, c);
            break;
        case LE_KEY_ALT_B:
        case LE_KEY_CTRL_LEFT:
            if (c == 0) return LE_IGNORED;
            while (c > 0 && !is_word_at(le->buf, len, prev_cluster(le->buf, c)))
                c = prev_cluster(le->buf, c);
            while (c > 0 && is_word_at(le->buf, len, prev_cluster(le->buf, c)))
                c = prev_cluster(le->buf, c);
            le->cursor = c;
            break;
        case LE_KEY_ALT_F:
        case LE_KEY_CTRL_RIGHT:
            if (c == len) return LE_IGNORED;
            while (c < len && !is_word_at(le->buf, len, c))
                c = next_cluster(le->buf, len, c);
            while (c < len && is_word_at(le->buf, len, c))
                c = next_cluster(le->buf, len, c);
            le->cursor = c;
            break;
        case LE_KEY_CTRL_K:
            if (c == len) return LE_IGNORED;
            kill_range(le, c, len);
            le->cursor = c;
            break;
        case LE_KEY_CTRL_U:
            if (c == 0) return LE_IGNORED;
            kill_range(le, 0, c);
            break;
        case LE_KEY_CTRL_W: {
            if (c == 0) return LE_IGNORED;
            size_t p = c;
            while (p > 0 && (le->buf[p - 1] == ' ' || le->buf[p - 1] == '\n'))
                p--;
            while (p > 0 && le->buf[p - 1] != ' ' && le->buf[p - 1] != '\n')
                p = prev_cluster(le->buf, p);
            kill_range(le, p, c);
            break;
        }
        case LE_KEY_CTRL_Y:
            if (le->kill_len == 0 || replace(le, c, c, le->kill, le->kill_len) == 0)
                return LE_IGNORED;
            break;
        case LE_KEY_BACKSPACE:
        case LE_KEY_CTRL_H:
            if (c == 0) return LE_IGNORED;
            replace(le, prev_cluster(le->buf, c), c, "", 0);
            break;
        case LE_KEY_CTRL_D:
            if (len == 0) return LE_EOF;
            /* fallthrough */
        case LE_KEY_DELETE:
            if (c == len) return LE_IGNORED;
            replace(le, c, next_cluster(le->buf, len, c), "", 0);
            le->cursor = c;
            break;
        case LE_KEY_ENTER:
        case LE_KEY_CTRL_J:
            return submit(le);
        case LE_KEY_NEWLINE:
            if (len + 1 > le->cap) return LE_IGNORED;
            replace(le, c, c, "\n", 1);
            break;
        case LE_KEY_UP:
        case LE_KEY_CTRL_P:
            r = history_move(le, -1);
            break;
        case LE_KEY_DOWN:
        case LE_KEY_CTRL_N:
            r = history_move(le, +1);
            break;
        case LE_KEY_TAB:
            r = tab(le);
            break;
        default: {
            if (key < 0x20 || (key >= 0x7f && key < 0xa0) || key >= LE_KEY_BASE ||
                (key >= 0xd800 && key <= 0xdfff))
                return LE_IGNORED;
            uint8_t enc[4];
            utf8proc_ssize_t k = utf8proc_encode_char(key, enc);
            if (k <= 0 || len + (size_t)k > le->cap) return LE_IGNORED;
            replace(le, c, c, (const char *)enc, (size_t)k);
            break;
        }
    }
    le->cursor = snap(le->buf, le->len, le->cursor);
    if (r != LE_IGNORED) update_suggestion(le);
    return r;
}

le_result_t le_insert(le_t *le, const char *text) {
    le->show_cands = false;
    if (replace(le, le->cursor, le->cursor, text, strlen(text)) == 0) return LE_IGNORED;
    update_suggestion(le);
    return LE_CHANGED;
}

void le_set_text(le_t *le, const char *text) {
    le->show_cands = false;
    set_line(le, text);
    update_suggestion(le);
}

void le_clear(le_t *le) {
    le_set_text(le, "");
}

const char *le_text(const le_t *le) {
    return le->buf;
}

size_t le_cursor(const le_t *le) {
    return le->cursor;
}

const char *le_submitted(const le_t *le) {
    return le->submitted;
}

const char *const *le_candidates(const le_t *le, int *n) {
    if (!le->show_cands) {
        *n = 0;
        return NULL;
    }
    *n = le->tab.n;
    return le->tab.cand;
}

const char *le_suggestion(const le_t *le) {
    return le->sugg;
}

void le_render(le_t *le, int width, le_view_t *out) {
    if (width < 1) width = 1;
    const char *s = le->buf;
    size_t len = le->len, cur = le->cursor;
    le->scroll = snap(s, len, le->scroll > len ? len : le->scroll);
    if (le->scroll > cur) le->scroll = cur;
    /* The cursor needs a cell of its own: everything left of it within width - 1 columns.
     * Widths are kept incrementally, so a jump across a long line stays linear. */
    int left = cluster_width(s, le->scroll, cur);
    while (left > width - 1) {
        size_t e = next_cluster(s, len, le->scroll);
        left -= cluster_width(s, le->scroll, e);
        le->scroll = e;
    }
    /* Scroll back when the text got shorter, to show as much as fits. */
    int shown = cluster_width(s, le->scroll, len);
    while (le->scroll > 0) {
        size_t p = prev_cluster(s, le->scroll);
        int w = cluster_width(s, p, le->scroll);
        if (shown + w + 1 > width) break;
        shown += w;
        le->scroll = p;
    }
    size_t a = le->scroll, b = a;
    int cols = 0;
    while (b < len) {
        size_t e = next_cluster(s, len, b);
        int w = cluster_width(s, b, e);
        if (cols + w > width) break;
        cols += w;
        b = e;
    }
    memset(out, 0, sizeof *out);
    out->text = s + a;
    out->len = b - a;
    out->text_cols = cols;
    out->cursor_col = cluster_width(s, a, cur);
    out->more_left = a > 0;
    out->more_right = b < len;
    out->suggest = le->sugg;
    if (cur == len && le->sugg[0] != '\0') {
        size_t sl = strlen(le->sugg), q = 0;
        int sc = 0;
        while (q < sl) {
            size_t e = next_cluster(le->sugg, sl, q);
            int w = cluster_width(le->sugg, q, e);
            if (cols + sc + w > width) break;
            sc += w;
            q = e;
        }
        out->suggest_len = q;
        out->suggest_cols = sc;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* History                                                                                     */

static bool blank(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n') return false;
    return true;
}

void le_history_add(le_t *le, const char *line) {
    if (blank(line)) return;
    if (le->hist_n > 0 && strcmp(le->hist[le->hist_n - 1], line) == 0) return;
    char *copy = strdup(line);
    if (!copy) return; /* history is a convenience: losing one entry beats failing the line */
    if (le->hist_n == le->hist_max) {
        free(le->hist[0]);
        memmove(le->hist, le->hist + 1, (size_t)(le->hist_n - 1) * sizeof *le->hist);
        le->hist_n--;
    }
    le->hist[le->hist_n++] = copy;
    le->hpos = le->hist_n;
}

int le_history_count(const le_t *le) {
    return le->hist_n;
}

const char *le_history_at(const le_t *le, int i) {
    return i >= 0 && i < le->hist_n ? le->hist[i] : NULL;
}

static bool clean_entry(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int32_t cp;
        int k = decode(s + i, n - i, &cp);
        if (k < 0 || (is_control(cp) && cp != '\n')) return false;
        i += (size_t)k;
    }
    return true;
}

/* A multi-line entry is one line of the history file: U+001E (a control character, so no
 * single-line entry starts with it, and older versions skip the line) and the text with '\\' as
 * "\\\\" and '\n' as "\\n". Decodes s[0, n) in place; returns the new length. */
static size_t unescape_entry(char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 1; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n && (s[i + 1] == 'n' || s[i + 1] == '\\'))
            s[o++] = s[++i] == 'n' ? '\n' : '\\';
        else
            s[o++] = s[i];
    }
    s[o] = '\0';
    return o;
}

static bool write_entry(FILE *f, const char *e) {
    if (!strchr(e, '\n')) return fputs(e, f) >= 0 && fputc('\n', f) != EOF;
    bool ok = fputc(MULTILINE_MARK, f) != EOF;
    for (; *e && ok; e++)
        ok = *e == '\n'   ? fputs("\\n", f) >= 0
             : *e == '\\' ? fputs("\\\\", f) >= 0
                          : fputc(*e, f) != EOF;
    return ok && fputc('\n', f) != EOF;
}

int le_history_load(le_t *le, const char *path, err_t *err) {
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        return err_set(err, "%s: %s", path, strerror(errno));
    }
    char *line = NULL;
    size_t size = 0;
    ssize_t n;
    while ((n = getline(&line, &size, f)) >= 0) {
        if (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
        if (n > 0 && line[n - 1] == '\r') line[--n] = '\0';
        if (n > 0 && line[0] == MULTILINE_MARK) n = (ssize_t)unescape_entry(line, (size_t)n);
        if ((size_t)n <= le->cap && clean_entry(line, (size_t)n)) le_history_add(le, line);
    }
    free(line);
    int bad = ferror(f);
    fclose(f);
    if (bad) return err_set(err, "%s: read error", path);
    return 0;
}

int le_history_save(const le_t *le, const char *path, err_t *err) {
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 5);
    if (!tmp) return err_set(err, "%s: out of memory", path);
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmp", 5);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        err_set(err, "%s: %s", tmp, strerror(errno));
        if (fd >= 0) close(fd);
        free(tmp);
        return -1;
    }
    bool ok = true;
    for (int i = 0; i < le->hist_n && ok; i++)
        ok = write_entry(f, le->hist[i]);
    ok = fflush(f) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) < 0) {
        err_set(err, "%s: %s", ok ? path : tmp, strerror(errno));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

int le_history_path(char *buf, size_t size, err_t *err) {
    return statedir_path("history", buf, size, err);
}

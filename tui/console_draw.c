/* console_draw: one frame of the console from a con_view_t (see console_draw.h). Everything here
 * reads the view and writes curses; the buffers a frame needs are the drawer's, sized once. */
#include "console_draw.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curses.h>

#include "chart.h"
#include "flags.h"
#include "ui_header.h"

#define MAX_COLS 512 /* chart buffers are sized for this; wider screens draw up to it */
#define MAX_ROWS 128
#define LINE_BUF (4 * MAX_COLS + 1)

enum {
    PAIR_TITLE = 1,
    PAIR_CHART,
    PAIR_ERROR,
    PAIR_USER,
    PAIR_CHANGED,
    PAIR_BAR,
    PAIR_OK,
    PAIR_TOOL,
};

struct con_drawer {
    char *chart_buf;     /* [CHART_BUF_SIZE(MAX_COLS, MAX_ROWS)] */
    char *chart_buf2;    /* the same, for the overlaid second series */
    double *points;      /* [2 * MAX_COLS] */
    double *points2;     /* [2 * MAX_COLS] */
    char *line_buf;      /* [LINE_BUF] one screen row */
    ui_text_row_t *rows; /* [CON_MAX_TEXT_ROWS] */
};

con_drawer_t *con_drawer_create(err_t *err) {
    con_drawer_t *d = calloc(1, sizeof *d);
    if (d) {
        d->chart_buf = malloc(CHART_BUF_SIZE(MAX_COLS, MAX_ROWS));
        d->chart_buf2 = malloc(CHART_BUF_SIZE(MAX_COLS, MAX_ROWS));
        d->points = malloc(2 * MAX_COLS * sizeof *d->points);
        d->points2 = malloc(2 * MAX_COLS * sizeof *d->points2);
        d->line_buf = malloc(LINE_BUF);
        d->rows = malloc(CON_MAX_TEXT_ROWS * sizeof *d->rows);
    }
    if (!d || !d->chart_buf || !d->chart_buf2 || !d->points || !d->points2 || !d->line_buf ||
        !d->rows) {
        con_drawer_destroy(d);
        err_set(err, "out of memory");
        return NULL;
    }
    return d;
}

void con_drawer_destroy(con_drawer_t *d) {
    if (!d) return;
    free(d->chart_buf);
    free(d->chart_buf2);
    free(d->points);
    free(d->points2);
    free(d->line_buf);
    free(d->rows);
    free(d);
}

bool con_draw_colors(bool want) {
    if (!want || !has_colors()) return false;
    start_color();
    use_default_colors();
    init_pair(PAIR_TITLE, COLOR_CYAN, -1);
    init_pair(PAIR_CHART, COLOR_GREEN, -1);
    init_pair(PAIR_ERROR, COLOR_RED, -1);
    init_pair(PAIR_USER, COLOR_YELLOW, -1);
    init_pair(PAIR_CHANGED, COLOR_MAGENTA, -1);
    init_pair(PAIR_BAR, COLOR_BLACK, COLOR_CYAN);
    init_pair(PAIR_OK, COLOR_GREEN, -1);
    init_pair(PAIR_TOOL, COLOR_MAGENTA, -1);
    return true;
}

static const char *repl_prompt(bool busy) {
    return busy ? "... " : "> ";
}

int con_draw_line_width(const layout_t *lay, bool busy) {
    int w = lay->repl.w - (int)strlen(repl_prompt(busy)) - 1;
    return w < 1 ? 1 : w;
}

// ---------------------------------------------------------------------------------------------
// Text

static attr_t attr_of(const con_view_t *v, int pair, attr_t fallback) {
    return v->color ? (attr_t)COLOR_PAIR(pair) : fallback;
}

/* Text clipped to w columns at (y, x). */
static void put(int y, int x, int w, const char *s, size_t len, attr_t a) {
    if (w <= 0 || !len) return;
    size_t n = ui_text_fit(s, len, w, false);
    if (n > len) n = len;
    attrset(a);
    mvaddnstr(y, x, s, (int)n);
    attrset(A_NORMAL);
}

static void putf(con_drawer_t *d, int y, int x, int w, attr_t a, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void putf(con_drawer_t *d, int y, int x, int w, attr_t a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(d->line_buf, LINE_BUF, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    put(y, x, w, d->line_buf, strlen(d->line_buf), a);
}

/* A panel's title row: "── Title ─────" (or dashes in ASCII mode). */
static void title_rule(con_drawer_t *d, const con_view_t *v, layout_rect_t r, const char *title) {
    attr_t a = attr_of(v, PAIR_TITLE, A_BOLD);
    attrset(a);
    for (int x = r.x; x < r.x + r.w; x++) {
        if (v->ascii)
            mvaddch(r.y, x, '-');
        else
            mvaddstr(r.y, x, "\xe2\x94\x80");
    }
    attrset(A_NORMAL);
    putf(d, r.y, r.x + 1, r.w - 2, a | A_BOLD, " %s ", title);
}

// ---------------------------------------------------------------------------------------------
// Header and charts

/* The header's fields, the name clients must send and the URL last to go (ui_header.h). */
static void draw_header(con_drawer_t *d, const con_view_t *v) {
    layout_rect_t r = v->lay.header;
    long up = (long)v->uptime;
    char uptime[32];
    snprintf(uptime, sizeof uptime, "up %02ld:%02ld:%02ld", up / 3600, up / 60 % 60, up % 60);
    const ui_header_field_t f[] = {
        {"Tachyon", 5, false, false},      {v->model_name, 0, false, true},
        {v->model_note, 1, true, false},   {v->url, 0, false, false},
        {v->layout_desc, 3, false, false}, {uptime, 4, false, false},
        {v->backend, 2, false, false},     {v->model_desc, 6, false, false},
    };
    ui_header_fit(f, (int)(sizeof f / sizeof f[0]), r.w - 1, v->ascii, d->line_buf, LINE_BUF);
    attr_t a = attr_of(v, PAIR_BAR, A_REVERSE);
    attrset(a);
    mvhline(r.y, r.x, ' ', r.w);
    attrset(A_NORMAL);
    put(r.y, r.x + 1, r.w - 1, d->line_buf, strlen(d->line_buf), a | A_BOLD);
}

/* Dot bits of the braille cell at *p (a space is an empty cell); advances *p past it. */
static unsigned braille_bits(const char **p) {
    const unsigned char *u = (const unsigned char *)*p;
    if (u[0] == 0xe2 && u[1] && u[2]) {
        *p += 3;
        return ((u[1] & 0x3u) << 6) | (u[2] & 0x3fu);
    }
    *p += 1;
    return 0;
}

/* Merges two rows of width cells into out (>= CHART_ROW_SIZE(width) bytes): braille dots are
 * ORed, ASCII cells take the taller glyph. */
static void overlay_row(const char *a, const char *b, int width, bool ascii, char *out) {
    static const char levels[] = " .:|#";
    char *o = out;
    for (int i = 0; i < width && *a && *b; i++) {
        if (ascii) {
            const char *la = strchr(levels, *a), *lb = strchr(levels, *b);
            *o++ = la && lb && lb > la ? *b : *a;
            a++, b++;
            continue;
        }
        unsigned bits = braille_bits(&a) | braille_bits(&b);
        if (!bits) {
            *o++ = ' ';
        } else {
            *o++ = (char)0xe2;
            *o++ = (char)(0xa0 | (bits >> 6));
            *o++ = (char)(0x80 | (bits & 0x3f));
        }
    }
    *o = '\0';
}

typedef struct chart_spec {
    const char *name, *unit;
    int metric, metric2; /* metric2: overlaid as a line (-1: none) */
    bool percent;
    double floor;
} chart_spec_t;

static const chart_spec_t chart_specs[LAYOUT_CHARTS] = {
    {"running seqs", "", M_RUNNING, -1, false, 1},
    {"waiting seqs", "", M_WAITING, -1, false, 1},
    {"KV cache", "%", M_KV, -1, true, 100},
    {"prompt tok/s", "", M_PROMPT_TPS, -1, false, 10},
    {"gen tok/s", "", M_GEN_TPS, -1, false, 10},
    {"TTFT/TPOT", "ms", M_TTFT, M_TPOT, false, 1},
};

static void draw_chart(con_drawer_t *d, const con_view_t *v, int i) {
    const chart_spec_t *sp = &chart_specs[i];
    layout_rect_t r = v->lay.charts[i];
    double win = v->window;
    char title[256], v1[16], v2[16], wtxt[32];
    int tw = r.w - 1;
    if (sp->metric2 < 0) {
        chart_title(title, sizeof title, tw, sp->name, win, ui_series_last(&v->series[sp->metric]),
                    sp->unit);
    } else { /* two values, shortened until they fit: "TTFT/TPOT  last 1 min  now 120/15 ms" */
        chart_format_value(v->last_ttft, v1, sizeof v1);
        chart_format_value(v->last_tpot, v2, sizeof v2);
        chart_format_window(win, wtxt, sizeof wtxt);
        snprintf(title, sizeof title, "%s  last %s  now %s/%s %s", sp->name, wtxt, v1, v2,
                 sp->unit);
        if ((int)strlen(title) > tw)
            snprintf(title, sizeof title, "%s %s %s/%s %s", sp->name, wtxt, v1, v2, sp->unit);
        if ((int)strlen(title) > tw)
            snprintf(title, sizeof title, "%s %s/%s %s", sp->name, v1, v2, sp->unit);
    }
    put(r.y, r.x, tw, title, strlen(title), attr_of(v, PAIR_TITLE, A_BOLD));
    int label_w = 5, ph = r.h - 1, pw = r.w - label_w - 2;
    if (ph < 1 || pw < 1) return;
    if (pw > MAX_COLS) pw = MAX_COLS;
    if (ph > MAX_ROWS) ph = MAX_ROWS;
    double span = win * 1000.0 / CON_SAMPLE_MS;
    ui_series_resample(&v->series[sp->metric], span, d->points, 2 * pw);
    chart_opts_t o = {.width = pw,
                      .height = ph,
                      .glyphs = v->ascii ? CHART_ASCII : CHART_BRAILLE,
                      .style = CHART_AREA,
                      .auto_range = !sp->percent,
                      .auto_floor = sp->floor,
                      .ymin = 0,
                      .ymax = 100};
    size_t size = CHART_BUF_SIZE(MAX_COLS, MAX_ROWS);
    if (sp->metric2 >= 0) { /* both series on one scale: the larger decides the top */
        ui_series_resample(&v->series[sp->metric2], span, d->points2, 2 * pw);
        double top = sp->floor;
        for (int k = 0; k < 2 * pw; k++) {
            if (d->points[k] > top) top = d->points[k];
            if (d->points2[k] > top) top = d->points2[k];
        }
        o.auto_range = false;
        o.ymax = chart_nice_top(top, sp->floor);
    }
    double ytop = chart_render(d->points, 2 * pw, &o, d->chart_buf, size);
    if (isnan(ytop)) return;
    if (sp->metric2 >= 0) {
        o.style = CHART_LINE;
        if (isnan(chart_render(d->points2, 2 * pw, &o, d->chart_buf2, size))) return;
    }
    char labels[MAX_ROWS * 8];
    chart_ylabels(0, ytop, ph, label_w, labels, 8);
    attr_t la = v->color ? A_NORMAL : A_DIM;
    attr_t ca = attr_of(v, PAIR_CHART, A_NORMAL);
    for (int row = 0; row < ph; row++) {
        put(r.y + 1 + row, r.x, label_w, labels + row * 8, strlen(labels + row * 8), la);
        const char *line = chart_row(d->chart_buf, pw, row);
        if (sp->metric2 >= 0) {
            overlay_row(line, chart_row(d->chart_buf2, pw, row), pw, v->ascii, d->line_buf);
            line = d->line_buf;
        }
        attrset(ca);
        mvaddstr(r.y + 1 + row, r.x + label_w + 1, line);
        attrset(A_NORMAL);
    }
}

// ---------------------------------------------------------------------------------------------
// Flags and requests

static void draw_flags(con_drawer_t *d, const con_view_t *v) {
    layout_rect_t r = v->lay.flags;
    if (layout_rect_empty(r)) return;
    title_rule(d, v, r, "Flags (* changed)");
    int y = r.y + 1, w = r.w - 1;
    /* changed flags first, so that a /set is always in view */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < v->n_flags && y < r.y + r.h; i++) {
            if (v->flag_changed[i] != (pass == 0)) continue;
            attr_t a = v->flag_changed[i] ? attr_of(v, PAIR_CHANGED, A_BOLD) | A_BOLD : A_NORMAL;
            const char *name = flags_at(i)->name, *value = v->flag_text[i];
            /* the value right-aligned and never cut; the name cut to what is left */
            int vw = (int)strlen(value), nw = w - 2 - vw;
            if (nw < 1) nw = 1;
            putf(d, y++, r.x + 1, w, a, "%c%-*.*s %s", v->flag_changed[i] ? '*' : ' ', nw, nw, name,
                 value);
        }
}

static void progress_bar(const bench_progress_t *p, char *buf, size_t size, int width) {
    int total = p->total > 0 ? p->total : 1;
    int fill = (int)((long)width * p->done / total);
    size_t k = 0;
    buf[k++] = '[';
    for (int i = 0; i < width && k + 2 < size; i++)
        buf[k++] = i < fill ? '#' : '.';
    buf[k++] = ']';
    buf[k] = '\0';
}

/* The engine's live requests (oldest first; the console's chat and the benchmark's requests
 * among them), the benchmark's progress and the engine's totals. */
static void draw_requests(con_drawer_t *d, const con_view_t *v) {
    static const char *const state_names[] = {"waiting", "prefill", "decode", "preempted"};
    layout_rect_t r = v->lay.requests;
    if (layout_rect_empty(r)) return;
    title_rule(d, v, r, "Requests");
    int y = r.y + 1, w = r.w - 1, end = r.y + r.h;
    const stats_snapshot_t *s = v->stats;
    if (y < end)
        putf(d, y++, r.x + 1, w, A_BOLD, "engine: %d running, %d waiting", s->running, s->waiting);
    /* the benchmark's own lines only when two request rows still fit (the status line shows
     * its progress too) */
    const bench_progress_t *b = v->bench;
    if (b && end - y >= 8) {
        putf(d, y++, r.x + 1, w, A_NORMAL, "bench   %d in flight, %d/%d done, %d failed",
             b->in_flight, b->done, b->total, b->failed);
        if (y < end) {
            char bar[128];
            progress_bar(b, bar, sizeof bar, w - 12 > 60 ? 60 : w - 12);
            putf(d, y++, r.x + 1, w, attr_of(v, PAIR_OK, A_BOLD), "%s %.0f s", bar, b->elapsed);
        }
    }
    /* the id takes what the numbers and the state (29 columns) leave */
    int id_w = w - 29 < 6 ? 6 : w - 29 > 40 ? 40 : w - 29;
    if (y < end)
        putf(d, y++, r.x + 1, w, A_DIM, "%-*s %6s %5s %5s %s", id_w, "id", "prompt", "gen", "secs",
             "state");
    /* the console's own reply first: with a benchmark queued ahead it may be far down the list */
    const char *reply_id = v->reply_id ? v->reply_id : "";
    if (v->reply_id && y < end - 1)
        putf(d, y++, r.x + 1, w, A_BOLD, "%-*s %6d %5d %5.1f %s", id_w, reply_id, v->reply_prompt,
             v->reply_gen, v->reply_secs, v->reply_decoding ? "decode" : "prefill");
    int shown = v->reply_id ? 1 : 0;
    for (int i = 0; i < s->n_active && y < end - 2; i++) {
        const stats_active_t *a = &s->active[i];
        if (!strcmp(a->id, reply_id)) continue;
        /* a long id (the API's chatcmpl-<hex>) shows its distinctive end, marked with '~' */
        char id[sizeof a->id];
        size_t n = strlen(a->id);
        if (n == 0)
            snprintf(id, sizeof id, "-");
        else if ((int)n <= id_w)
            snprintf(id, sizeof id, "%s", a->id);
        else
            snprintf(id, sizeof id, "~%s", a->id + n - (size_t)(id_w - 1));
        putf(d, y++, r.x + 1, w, a->state == STATS_REQ_DECODE ? A_NORMAL : A_DIM,
             "%-*s %6d %5d %5.1f %s", id_w, id, a->prompt_tokens, a->generated,
             s->active_t - a->arrival, state_names[a->state]);
        shown++;
    }
    if (s->n_active_total > shown && y < end - 1)
        putf(d, y++, r.x + 1, w, A_DIM, "... and %d more", s->n_active_total - shown);
    if (s->n_active_total == 0 && y < end - 1) put(y++, r.x + 1, w, "(no requests)", 13, A_DIM);
    if (y < end)
        putf(d, y++, r.x + 1, w, A_DIM, "%llu submitted, %llu done, %llu preempted",
             (unsigned long long)s->requests_submitted,
             (unsigned long long)(s->requests_finished[0] + s->requests_finished[1] +
                                  s->requests_finished[2] + s->requests_finished[3]),
             (unsigned long long)s->preemptions);
}

// ---------------------------------------------------------------------------------------------
// Chat pane, REPL line, status line

static attr_t text_attr(const con_view_t *v, ui_txt_style_t st) {
    switch (st) {
        case UI_TXT_USER:
            return attr_of(v, PAIR_USER, A_BOLD) | A_BOLD;
        case UI_TXT_REASONING:
        case UI_TXT_FOLD:
        case UI_TXT_INFO:
            return A_DIM;
        case UI_TXT_ERROR:
            return attr_of(v, PAIR_ERROR, A_BOLD) | A_BOLD;
        case UI_TXT_TOOL: /* apart from the reply: coloured, or bold without colours */
            return attr_of(v, PAIR_TOOL, A_BOLD);
        default:
            return A_NORMAL;
    }
}

static int draw_chat(con_drawer_t *d, const con_view_t *v) {
    layout_rect_t r = v->lay.chat;
    int h = r.h - 1 > CON_MAX_TEXT_ROWS ? CON_MAX_TEXT_ROWS : r.h - 1, scroll = v->scroll;
    int n = ui_text_rows(v->text, r.w - 1, h, &scroll, v->show_reasoning, d->rows);
    title_rule(d, v, r,
               scroll ? "Chat and output (scrolled up: PgDn goes back)" : "Chat and output");
    int y0 = r.y + 1 + (h - n); /* bottom-aligned */
    for (int i = 0; i < n; i++)
        put(y0 + i, r.x, r.w, d->rows[i].text, d->rows[i].len, text_attr(v, d->rows[i].style));
    return scroll;
}

static void draw_repl(const con_view_t *v) {
    layout_rect_t r = v->lay.repl;
    const char *prompt = repl_prompt(v->busy);
    int pw = (int)strlen(prompt), fw = con_draw_line_width(&v->lay, v->busy);
    attr_t pa = attr_of(v, PAIR_TITLE, A_BOLD) | A_BOLD;
    put(r.y, r.x, r.w, prompt, strlen(prompt), pa);
    const le_view_t *lv = &v->line;
    /* a line break takes one column, drawn as a mark, so a pasted message reads as one */
    int x = r.x + pw;
    for (const char *p = lv->text, *end = lv->text + lv->len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        put(r.y, x, r.x + pw + fw - x, p, n, A_NORMAL);
        x += le_text_width(p, n);
        if (!nl) break;
        put(r.y, x++, 1, v->ascii ? "|" : "\xe2\x8f\x8e", v->ascii ? 1 : 3, A_DIM);
        p = nl + 1;
    }
    if (lv->suggest_len)
        put(r.y, r.x + pw + lv->text_cols, fw - lv->text_cols, lv->suggest, lv->suggest_len, A_DIM);
    move(r.y, r.x + pw + lv->cursor_col);
}

static void draw_status(const con_view_t *v) {
    layout_rect_t r = v->lay.status;
    char left[160], bar[64] = "";
    if (v->bench) {
        progress_bar(v->bench, bar, sizeof bar, 20);
        snprintf(left, sizeof left, "ready | bench %s %d/%d |", bar, v->bench->done,
                 v->bench->total);
    } else if (v->applying) {
        static const char spin[] = "|/-\\";
        snprintf(left, sizeof left, "ready | applying %s %c %.1f s |", v->applying,
                 spin[(int)(v->now * 8) % 4], v->applying_secs);
    } else {
        char wtxt[32];
        chart_format_window(v->window, wtxt, sizeof wtxt);
        snprintf(left, sizeof left, "ready | F1 help | +/- window %s | F2 reasoning %s |", wtxt,
                 v->show_reasoning ? "shown" : "hidden");
    }
    attr_t a = attr_of(v, PAIR_BAR, A_REVERSE);
    attrset(a);
    mvhline(r.y, r.x, ' ', r.w);
    attrset(A_NORMAL);
    int lw = (int)strlen(left);
    put(r.y, r.x, r.w, left, (size_t)lw, a | A_BOLD);
    if (r.w > lw + 1) {
        attr_t sa = v->status_error ? (attr_of(v, PAIR_ERROR, A_REVERSE) | A_BOLD) : a;
        put(r.y, r.x + lw + 1, r.w - lw - 1, v->status, strlen(v->status), sa);
    }
}

// ---------------------------------------------------------------------------------------------
// Help and "too small"

/* The help overlay: the keys, then the commands, wrapped to the width; when it does not fit
 * (80x24 does not hold it) it scrolls, and its title and last row say so. Returns the scroll,
 * clamped to the one that shows the first row. */
static int draw_help(con_drawer_t *d, const con_view_t *v) {
    int w = COLS - 4 < 96 ? COLS - 4 : 96, h = LINES - 2;
    int x = (COLS - w) / 2, y = 1, rows = h - 2 < CON_MAX_TEXT_ROWS ? h - 2 : CON_MAX_TEXT_ROWS;
    for (int row = 0; row < h; row++)
        mvhline(y + row, x, ' ', w);
    int top = 1 << 20; /* clamped to the scroll that shows the first row */
    ui_text_rows(v->help_text, w - 2, rows, &top, true, d->rows);
    int scroll = v->help_scroll > top ? top : v->help_scroll;
    int n = ui_text_rows(v->help_text, w - 2, rows, &scroll, true, d->rows);
    title_rule(d, v, (layout_rect_t){x, y, w, 1},
               top ? "Help (Up/Down, PgUp/PgDn scroll; any other key closes)"
                   : "Help (any key closes)");
    for (int i = 0; i < n; i++)
        put(y + 1 + i, x + 1, w - 2, d->rows[i].text, d->rows[i].len, A_NORMAL);
    if (top)
        putf(d, y + h - 1, x + 1, w - 2, A_DIM, "%s",
             scroll == top ? "-- PgDn: more below --"
             : scroll      ? "-- PgUp / PgDn: more above and below --"
                           : "-- end (PgUp: more above) --");
    return scroll;
}

static void draw_too_small(const con_view_t *v) {
    char msg[3][64];
    snprintf(msg[0], sizeof msg[0], "terminal too small: need %dx%d", v->lay.min_w, v->lay.min_h);
    snprintf(msg[1], sizeof msg[1], "(now %dx%d)", COLS, LINES);
    snprintf(msg[2], sizeof msg[2], "/quit or Ctrl-C leaves");
    int y = LINES / 2 - 1 > 0 ? LINES / 2 - 1 : 0;
    for (int i = 0; i < 3 && y + i < LINES; i++) {
        int len = (int)strlen(msg[i]), x = COLS > len ? (COLS - len) / 2 : 0;
        put(y + i, x, COLS - x, msg[i], (size_t)len, i == 0 ? A_BOLD : A_DIM);
    }
}

void con_draw(con_drawer_t *d, const con_view_t *v, con_drawn_t *out) {
    out->scroll = v->scroll;
    out->help_scroll = v->help_scroll;
    werase(stdscr);
    if (v->lay.too_small) {
        curs_set(0);
        draw_too_small(v);
    } else if (v->help) {
        curs_set(0);
        draw_header(d, v);
        out->help_scroll = draw_help(d, v);
        draw_status(v);
    } else {
        draw_header(d, v);
        for (int i = 0; i < v->lay.n_charts; i++)
            draw_chart(d, v, i);
        draw_flags(d, v);
        draw_requests(d, v);
        out->scroll = draw_chat(d, v);
        draw_status(v);
        curs_set(1);
        draw_repl(v); /* last: it leaves the cursor in the line */
    }
    wnoutrefresh(stdscr);
    doupdate();
}

/* console_draw: one frame of the console from a con_view_t (see console_draw.h). Everything here
 * reads the view and writes curses; the buffers a frame needs are the drawer's, sized once. */
#include "console_draw_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curses.h>

#include "chart.h"
#include "flags.h"
#include "ui_header.h"

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
    init_pair(PAIR_S1, COLOR_GREEN, -1);
    init_pair(PAIR_S2, COLOR_YELLOW, -1);
    init_pair(PAIR_S3, COLOR_CYAN, -1);
    init_pair(PAIR_S4, COLOR_MAGENTA, -1);
    init_pair(PAIR_HEAT_COLD, COLOR_BLUE, -1);
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

attr_t cd_attr(const con_view_t *v, int pair, attr_t fallback) {
    return v->color ? (attr_t)COLOR_PAIR(pair) : fallback;
}

/* Text clipped to w columns at (y, x). */
void cd_put(int y, int x, int w, const char *s, size_t len, attr_t a) {
    if (w <= 0 || !len) return;
    size_t n = ui_text_fit(s, len, w, false);
    if (n > len) n = len;
    attrset(a);
    mvaddnstr(y, x, s, (int)n);
    attrset(A_NORMAL);
}

void cd_putf(con_drawer_t *d, int y, int x, int w, attr_t a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(d->line_buf, LINE_BUF, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    cd_put(y, x, w, d->line_buf, strlen(d->line_buf), a);
}

/* A panel's title row: "── Title ─────" (or dashes in ASCII mode). */
void cd_title_rule(con_drawer_t *d, const con_view_t *v, layout_rect_t r, const char *title) {
    attr_t a = cd_attr(v, PAIR_TITLE, A_BOLD);
    attrset(a);
    for (int x = r.x; x < r.x + r.w; x++) {
        if (v->ascii)
            mvaddch(r.y, x, '-');
        else
            mvaddstr(r.y, x, "\xe2\x94\x80");
    }
    attrset(A_NORMAL);
    cd_putf(d, r.y, r.x + 1, r.w - 2, a | A_BOLD, " %s ", title);
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
    attr_t a = cd_attr(v, PAIR_BAR, A_REVERSE);
    attrset(a);
    mvhline(r.y, r.x, ' ', r.w);
    attrset(A_NORMAL);
    cd_put(r.y, r.x + 1, r.w - 1, d->line_buf, strlen(d->line_buf), a | A_BOLD);
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

/* The numbers band (ui_vitals.h): each segment in its style; colours grade the load, and
 * without colours the warnings are bold and the errors bold and underlined. */
static attr_t vitals_attr(const con_view_t *v, ui_vstyle_t st) {
    switch (st) {
        case UI_VS_LABEL:
            return A_DIM;
        case UI_VS_GOOD:
            return cd_attr(v, PAIR_OK, A_NORMAL);
        case UI_VS_WARN:
            return cd_attr(v, PAIR_USER, A_BOLD) | A_BOLD;
        case UI_VS_BAD:
            return cd_attr(v, PAIR_ERROR, A_BOLD | A_UNDERLINE) | A_BOLD;
        case UI_VS_TITLE:
            return cd_attr(v, PAIR_TITLE, A_BOLD) | A_BOLD;
        default:
            return A_NORMAL;
    }
}

static void draw_vitals(con_drawer_t *d, const con_view_t *v) {
    layout_rect_t r = v->lay.vitals;
    if (layout_rect_empty(r) || !v->gpu || !v->ops) return;
    int rows, n = ui_vitals_lay(v->gpu, v->ops, r.w - 1, r.h, d->vsegs, UI_VITALS_MAX_SEGS, &rows);
    for (int i = 0; i < n; i++) {
        const ui_vseg_t *sg = &d->vsegs[i];
        cd_put(r.y + sg->row, r.x + 1 + sg->col, r.w - 1 - sg->col, sg->text, (size_t)sg->len,
               vitals_attr(v, sg->style));
    }
}

/* One chart: one or two series, each in its own colour (without colours the second is bold),
 * named in the title with its current value (the legend); a single percentage is coloured by
 * height (green, yellow from 70 %, red from 90 %). */
typedef struct chart_spec {
    const char *name, *unit;
    int metric, metric2;         /* metric2: a second series drawn as a line (-1: none) */
    const char *label, *label2;  /* the series' names in the legend */
    const char *short1, *short2; /* the same where the title is short of room */
    int pair, pair2;             /* their colours */
    bool percent;                /* 0..100 (graded when alone) */
    double floor;                /* the y range's smallest top */
} chart_spec_t;

static const chart_spec_t chart_specs[LAYOUT_MAX_CHARTS] = {
    {"seqs", "", M_RUNNING, M_WAITING, "running", "waiting", "run", "wait", PAIR_S1, PAIR_S2, false,
     1},
    {"KV cache", "%", M_KV, -1, "used", NULL, "", NULL, PAIR_S1, 0, true, 100},
    {"tok/s", "", M_PROMPT_TPS, M_GEN_TPS, "prompt", "gen", "in", "out", PAIR_S3, PAIR_S1, false,
     10},
    {"TTFT", "ms", M_TTFT, -1, "mean", NULL, "", NULL, PAIR_S4, 0, false, 1},
    {"TPOT", "ms", M_TPOT, -1, "mean", NULL, "", NULL, PAIR_S3, 0, false, 1},
    {"GPU", "%", M_DEV_UTIL, M_DEV_MEM, "util", "mem", "u", "m", PAIR_S1, PAIR_S2, true, 100},
    /* speculative decoding, tokens per verify step: accepted of drafted (layout.h: shown while
     * it is configured or has run) */
    {"spec", "", M_SPEC_ACCEPTED, M_SPEC_DRAFTED, "accepted", "drafted", "acc", "dft", PAIR_S1,
     PAIR_S2, false, 1},
};

typedef struct title_seg {
    const char *text;
    attr_t attr;
} title_seg_t;

/* The title as segments, the shortest of a few forms that fits tw columns: "seqs  last 1 min
 * running 3  waiting 1", "seqs 1 min running 3 waiting 1", "seqs running 3 waiting 1", "seqs
 * run 3 wait 1". */
static void chart_title_draw(const con_view_t *v, const chart_spec_t *sp, int y, int x, int tw,
                             const char *name, double val1, double val2) {
    char wtxt[32], last[40], v1[24], v2[24];
    chart_format_window(v->window, wtxt, sizeof wtxt);
    snprintf(last, sizeof last, "last %s", wtxt);
    chart_format_value(val1, v1, sizeof v1);
    chart_format_value(val2, v2, sizeof v2);
    if (*sp->unit) {
        size_t n = strlen(v1);
        snprintf(v1 + n, sizeof v1 - n, "%s%s", !strcmp(sp->unit, "%") ? "" : " ", sp->unit);
        n = strlen(v2);
        snprintf(v2 + n, sizeof v2 - n, "%s%s", !strcmp(sp->unit, "%") ? "" : " ", sp->unit);
    }
    attr_t ta = cd_attr(v, PAIR_TITLE, A_BOLD) | A_BOLD;
    attr_t a1 = cd_attr(v, sp->pair, A_NORMAL), a2 = cd_attr(v, sp->pair2, A_BOLD) | A_BOLD;
    for (int form = 0; form < 4; form++) {
        title_seg_t seg[12];
        int n = 0;
        seg[n++] = (title_seg_t){name, ta};
        if (form < 2) seg[n++] = (title_seg_t){form == 0 ? last : wtxt, A_DIM};
        const char *l1 = form == 3 ? sp->short1 : sp->label;
        if (*l1) seg[n++] = (title_seg_t){l1, a1};
        seg[n++] = (title_seg_t){v1, A_NORMAL};
        if (sp->metric2 >= 0) {
            seg[n++] = (title_seg_t){form == 3 ? sp->short2 : sp->label2, a2};
            seg[n++] = (title_seg_t){v2, A_NORMAL};
        }
        int w = 0;
        for (int i = 0; i < n; i++)
            w += (int)strlen(seg[i].text) + (i ? (form == 0 && (i == 1 || i == 2) ? 2 : 1) : 0);
        if (w > tw && form < 3) continue;
        int cx = x;
        for (int i = 0; i < n && cx < x + tw; i++) {
            if (i) cx += form == 0 && (i == 1 || i == 2) ? 2 : 1;
            int len = (int)strlen(seg[i].text);
            cd_put(y, cx, x + tw - cx, seg[i].text, (size_t)len, seg[i].attr);
            cx += len;
        }
        return;
    }
}

/* The time axis under a plot of pw columns at x: "-1 min", the middle and "now". */
static void time_axis(con_drawer_t *d, const con_view_t *v, int y, int x, int pw) {
    char l[32], m[32];
    l[0] = m[0] = '-';
    chart_format_window(v->window, l + 1, sizeof l - 1);
    chart_format_window(v->window / 2, m + 1, sizeof m - 1);
    memset(d->line_buf, ' ', (size_t)pw);
    d->line_buf[pw] = '\0';
    int ll = (int)strlen(l), ml = (int)strlen(m);
    if (ll + ml + 3 + 4 > pw) { /* no room for the middle */
        ml = 0;
        if (ll + 4 > pw) return;
    }
    memcpy(d->line_buf, l, (size_t)ll);
    if (ml) memcpy(d->line_buf + pw / 2 - ml / 2, m, (size_t)ml);
    memcpy(d->line_buf + pw - 3, "now", 3);
    cd_put(y, x, pw, d->line_buf, (size_t)pw, A_DIM);
}

/* One plot row: the cells of the second series (a line) over the first (an area), each in its
 * series' attribute. */
static void plot_row(const con_view_t *v, int y, int x, const char *a, const char *b, int width,
                     attr_t aa, attr_t ab) {
    static const char levels[] = " .:|#";
    for (int i = 0; i < width && *a; i++) {
        if (v->ascii) {
            char ca = *a++, cb = b && *b ? *b++ : ' ';
            const char *la = strchr(levels, ca), *lb = strchr(levels, cb);
            bool second = cb != ' ' && la && lb && lb >= la;
            attrset(second ? ab : aa);
            mvaddch(y, x + i, (chtype)(unsigned char)(second ? cb : ca));
            continue;
        }
        unsigned ba = braille_bits(&a), bb = b && *b ? braille_bits(&b) : 0, bits = ba | bb;
        attrset(bb ? ab : aa);
        if (!bits) {
            mvaddch(y, x + i, ' ');
        } else {
            char cell[4] = {(char)0xe2, (char)(0xa0 | (bits >> 6)), (char)(0x80 | (bits & 0x3f)),
                            0};
            mvaddstr(y, x + i, cell);
        }
    }
    attrset(A_NORMAL);
}

/* The area of the chart grid: where a zoomed chart goes. */
static layout_rect_t chart_area(const layout_t *l) {
    layout_rect_t a = l->charts[0], z = l->charts[l->n_charts - 1];
    return (layout_rect_t){a.x, a.y, z.x + z.w - a.x, z.y + z.h - a.y};
}

int con_draw_chart_at(const con_view_t *v, int y, int x) {
    const layout_t *l = &v->lay;
    if (l->too_small || v->help) return -1;
    if (v->zoom >= 0) {
        layout_rect_t a = chart_area(l);
        return y >= a.y && y < a.y + a.h && x >= a.x && x < a.x + a.w ? v->zoom : -1;
    }
    for (int i = 0; i < l->n_charts; i++) {
        layout_rect_t r = l->charts[i];
        if (y >= r.y && y < r.y + r.h && x >= r.x && x < r.x + r.w) return i;
    }
    return -1;
}

static void draw_chart(con_drawer_t *d, const con_view_t *v, int i, layout_rect_t r) {
    const chart_spec_t *sp = &chart_specs[i];
    chart_spec_t cpu_spec; /* no GPU: the process's CPU and resident memory, in % */
    if (sp->metric == M_DEV_UTIL && !(v->gpu && v->gpu->n > 0)) {
        cpu_spec = *sp;
        cpu_spec.name = "CPU/RSS";
        cpu_spec.label = "cpu";
        cpu_spec.label2 = "rss";
        sp = &cpu_spec;
    }
    const char *name = sp->name;
    double val1 = ui_series_last(&v->series[sp->metric]);
    double val2 = sp->metric2 >= 0 ? ui_series_last(&v->series[sp->metric2]) : NAN;
    if (sp->metric == M_TTFT) val1 = v->last_ttft;
    if (sp->metric == M_TPOT) val1 = v->last_tpot;
    chart_title_draw(v, sp, r.y, r.x, r.w - 1, name, val1, val2);
    int label_w = 5, ph = r.h - 1, pw = r.w - label_w - 2;
    bool axis = ph >= 4; /* a time axis on the last row where the plot keeps three */
    if (axis) ph--;
    if (ph < 1 || pw < 1) return;
    if (pw > MAX_COLS) pw = MAX_COLS;
    if (ph > MAX_ROWS) ph = MAX_ROWS;
    double span = v->window * 1000.0 / CON_SAMPLE_MS;
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
    if (sp->metric2 >= 0 && !sp->percent) { /* both series on one scale: the larger decides */
        ui_series_resample(&v->series[sp->metric2], span, d->points2, 2 * pw);
        double top = sp->floor;
        for (int k = 0; k < 2 * pw; k++) {
            if (d->points[k] > top) top = d->points[k];
            if (d->points2[k] > top) top = d->points2[k];
        }
        o.auto_range = false;
        o.ymax = chart_nice_top(top, sp->floor);
    } else if (sp->metric2 >= 0) {
        ui_series_resample(&v->series[sp->metric2], span, d->points2, 2 * pw);
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
    attr_t a1 = cd_attr(v, sp->pair, A_NORMAL), a2 = cd_attr(v, sp->pair2, A_BOLD) | A_BOLD;
    for (int row = 0; row < ph; row++) {
        cd_put(r.y + 1 + row, r.x, label_w, labels + row * 8, strlen(labels + row * 8), la);
        if (sp->percent && sp->metric2 < 0 && v->color) { /* graded by the row's height */
            double top = ytop * (ph - row) / ph;
            a1 = COLOR_PAIR(top > 90 ? PAIR_ERROR : top > 70 ? PAIR_USER : PAIR_OK);
        }
        plot_row(v, r.y + 1 + row, r.x + label_w + 1, chart_row(d->chart_buf, pw, row),
                 sp->metric2 >= 0 ? chart_row(d->chart_buf2, pw, row) : NULL, pw, a1, a2);
    }
    if (axis) time_axis(d, v, r.y + 1 + ph, r.x + label_w + 1, pw);
}

// ---------------------------------------------------------------------------------------------
// Flags and requests

static void draw_flags(con_drawer_t *d, const con_view_t *v) {
    layout_rect_t r = v->lay.flags;
    if (layout_rect_empty(r)) return;
    cd_title_rule(d, v, r, v->applying ? "Flags (* changed, > applying)" : "Flags (* changed)");
    int y = r.y + 1, w = r.w - 1;
    /* changed flags first, so that a /set is always in view */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < v->n_flags && y < r.y + r.h; i++) {
            if (v->flag_changed[i] != (pass == 0)) continue;
            attr_t a = v->flag_changed[i] ? cd_attr(v, PAIR_CHANGED, A_BOLD) | A_BOLD : A_NORMAL;
            const char *name = flags_at(i)->name, *value = v->flag_text[i];
            char mark = v->flag_changed[i] ? '*' : ' ';
            if (v->applying && !strcmp(v->applying, name)) { /* a /set being applied: rebuild */
                a = cd_attr(v, PAIR_USER, A_BOLD) | A_BOLD;
                value = "applying...";
                mark = '>';
            }
            /* the value right-aligned and never cut; the name cut to what is left */
            int vw = (int)strlen(value), nw = w - 2 - vw;
            if (nw < 1) nw = 1;
            cd_putf(d, y++, r.x + 1, w, a, "%c%-*.*s %s", mark, nw, nw, name, value);
        }
}

// ---------------------------------------------------------------------------------------------
// Chat pane, REPL line, status line

static attr_t text_attr(const con_view_t *v, ui_txt_style_t st) {
    switch (st) {
        case UI_TXT_USER:
            return cd_attr(v, PAIR_USER, A_BOLD) | A_BOLD;
        case UI_TXT_REASONING:
        case UI_TXT_FOLD:
        case UI_TXT_INFO:
            return A_DIM;
        case UI_TXT_ERROR:
            return cd_attr(v, PAIR_ERROR, A_BOLD) | A_BOLD;
        case UI_TXT_TOOL: /* apart from the reply: coloured, or bold without colours */
            return cd_attr(v, PAIR_TOOL, A_BOLD);
        case UI_TXT_BETTER: /* without colours the row's words say it */
            return cd_attr(v, PAIR_OK, A_NORMAL);
        case UI_TXT_WORSE:
            return cd_attr(v, PAIR_ERROR, A_BOLD) | A_BOLD;
        default:
            return A_NORMAL;
    }
}

static int draw_chat(con_drawer_t *d, const con_view_t *v) {
    layout_rect_t r = v->lay.chat;
    int h = r.h - 1 > CON_MAX_TEXT_ROWS ? CON_MAX_TEXT_ROWS : r.h - 1, scroll = v->scroll;
    int n = ui_text_rows(v->text, r.w - 1, h, &scroll, v->show_reasoning, d->rows);
    const char *title = v->log               ? "Log (F3: back to the chat)"
                        : !v->show_reasoning ? "Chat and output (reasoning hidden: F2)"
                                             : "Chat and output";
    if (scroll)
        title = v->log ? "Log (scrolled up: PgDn goes back)"
                       : "Chat and output (scrolled up: PgDn goes back)";
    cd_title_rule(d, v, r, title);
    int y0 = r.y + 1 + (h - n); /* bottom-aligned */
    for (int i = 0; i < n; i++)
        cd_put(y0 + i, r.x, r.w, d->rows[i].text, d->rows[i].len, text_attr(v, d->rows[i].style));
    return scroll;
}

static void draw_repl(const con_view_t *v) {
    layout_rect_t r = v->lay.repl;
    const char *prompt = repl_prompt(v->busy);
    int pw = (int)strlen(prompt), fw = con_draw_line_width(&v->lay, v->busy);
    attr_t pa = cd_attr(v, PAIR_TITLE, A_BOLD) | A_BOLD;
    cd_put(r.y, r.x, r.w, prompt, strlen(prompt), pa);
    const le_view_t *lv = &v->line;
    /* a line break takes one column, drawn as a mark, so a pasted message reads as one */
    int x = r.x + pw;
    for (const char *p = lv->text, *end = lv->text + lv->len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        cd_put(r.y, x, r.x + pw + fw - x, p, n, A_NORMAL);
        x += le_text_width(p, n);
        if (!nl) break;
        cd_put(r.y, x++, 1, v->ascii ? "|" : "\xe2\x8f\x8e", v->ascii ? 1 : 3, A_DIM);
        p = nl + 1;
    }
    if (lv->suggest_len)
        cd_put(r.y, r.x + pw + lv->text_cols, fw - lv->text_cols, lv->suggest, lv->suggest_len,
               A_DIM);
    move(r.y, r.x + pw + lv->cursor_col);
}

/* The F-key bar (htop's habit: the key, then its label in the bar's colour), after "ready | ";
 * below 100 columns only help and quit. */
typedef struct fkey {
    int key;
    const char *label, *label_on; /* label_on: while its mode is on */
} fkey_t;

static const fkey_t fkeys[] = {
    {1, "Help", NULL},  {2, "Think", NULL},  {3, "Log", "Chat"}, {4, "Zoom", "Grid"},
    {5, "Rerun", NULL}, {6, "Reqs", "Back"}, {10, "Quit", NULL},
};
#define N_FKEYS ((int)(sizeof fkeys / sizeof fkeys[0]))
#define FBAR_X  8 /* after "ready | " */

static bool fkey_shown(const con_view_t *v, int i) {
    /* narrow: help and quit, and F6 to leave the requests table while it is focused */
    return v->lay.status.w >= 100 || fkeys[i].key == 1 || fkeys[i].key == 10 ||
           (fkeys[i].key == 6 && v->reqs_focus);
}

static const char *fkey_label(const con_view_t *v, int i) {
    bool on = (fkeys[i].key == 3 && v->log) || (fkeys[i].key == 4 && v->zoom >= 0) ||
              (fkeys[i].key == 6 && v->reqs_focus);
    return on ? fkeys[i].label_on : fkeys[i].label;
}

/* Columns of key i's "F<n><Label>" on the status line; returns the column after it. */
static int fkey_span(const con_view_t *v, int i, int *x0) {
    int x = FBAR_X;
    for (int k = 0; k < N_FKEYS; k++) {
        if (!fkey_shown(v, k)) continue;
        int w = (fkeys[k].key >= 10 ? 3 : 2) + (int)strlen(fkey_label(v, k));
        if (k == i) {
            *x0 = x;
            return x + w;
        }
        x += w + 1;
    }
    *x0 = x;
    return x;
}

int con_draw_fkey_at(const con_view_t *v, int x) {
    if (v->bench || v->applying) return 0;
    for (int i = 0; i < N_FKEYS; i++) {
        int x0, x1 = fkey_shown(v, i) ? fkey_span(v, i, &x0) : -1;
        if (x1 > 0 && x >= x0 && x < x1) return fkeys[i].key;
    }
    return 0;
}

static void draw_status(const con_view_t *v) {
    layout_rect_t r = v->lay.status;
    char left[256], bar[64] = "", nums[96];
    attr_t a = cd_attr(v, PAIR_BAR, A_REVERSE);
    attrset(a);
    mvhline(r.y, r.x, ' ', r.w);
    attrset(A_NORMAL);
    int lw;
    if (v->bench) {
        cd_progress_bar(v->bench, bar, sizeof bar, r.w < 160 ? 10 : 20);
        cd_bench_numbers(v->bench, r.w >= 160, nums, sizeof nums);
        snprintf(left, sizeof left, "ready | bench %s %d/%d %s |", bar, v->bench->done,
                 v->bench->total, nums);
    } else if (v->applying) {
        static const char spin[] = "|/-\\";
        snprintf(left, sizeof left, "ready | applying %s %c %.1f s |", v->applying,
                 spin[(int)(v->now * 8) % 4], v->applying_secs);
    } else {
        snprintf(left, sizeof left, "ready |");
    }
    lw = (int)strlen(left);
    cd_put(r.y, r.x, r.w, left, (size_t)lw, a | A_BOLD);
    if (!v->bench && !v->applying) {
        char key[8];
        int end = FBAR_X;
        for (int i = 0; i < N_FKEYS; i++) {
            if (!fkey_shown(v, i)) continue;
            int x0;
            end = fkey_span(v, i, &x0);
            int kw = snprintf(key, sizeof key, "F%d", fkeys[i].key);
            cd_put(r.y, r.x + x0, r.w - x0, key, (size_t)kw, A_BOLD);
            const char *label = fkey_label(v, i);
            cd_put(r.y, r.x + x0 + kw, r.w - x0 - kw, label, strlen(label), a);
        }
        cd_put(r.y, r.x + end + 1, r.w - end - 1, "|", 1, a | A_BOLD);
        lw = end + 2;
    }
    if (r.w > lw + 1) {
        attr_t sa = v->status_error ? (cd_attr(v, PAIR_ERROR, A_REVERSE) | A_BOLD) : a;
        cd_put(r.y, r.x + lw + 1, r.w - lw - 1, v->status, strlen(v->status), sa);
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
    cd_title_rule(d, v, (layout_rect_t){x, y, w, 1},
                  top ? "Help (Up/Down, PgUp/PgDn scroll; any other key closes)"
                      : "Help (any key closes)");
    for (int i = 0; i < n; i++)
        cd_put(y + 1 + i, x + 1, w - 2, d->rows[i].text, d->rows[i].len, A_NORMAL);
    if (top)
        cd_putf(d, y + h - 1, x + 1, w - 2, A_DIM, "%s",
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
        cd_put(y + i, x, COLS - x, msg[i], (size_t)len, i == 0 ? A_BOLD : A_DIM);
    }
}

// ---------------------------------------------------------------------------------------------
// The loading screen

void con_bytes_text(uint64_t bytes, char *buf, size_t size) {
    double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, size, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else
        snprintf(buf, size, "%.1f MiB", b / (1024.0 * 1024));
}

void con_draw_loading(con_drawer_t *d, const con_loading_t *v) {
    con_view_t cv = {.color = v->color, .ascii = v->ascii}; /* for the helpers' styles */
    const engine_load_t *l = v->load;
    werase(stdscr);
    curs_set(0);
    int w = COLS - 2, y = 0;
    const char *model = v->model && v->model[0] ? v->model : "the embedded demo model";
    cd_putf(d, y++, 1, w, cd_attr(&cv, PAIR_TITLE, A_BOLD) | A_BOLD, "Tachyon: loading %s", model);
    y++;
    char a[64], b[64];
    if (!l || !l->model_type)
        cd_putf(d, y++, 3, w - 2, A_NORMAL, "%-9s reading its config and weights' headers...",
                "model");
    else
        cd_putf(d, y++, 3, w - 2, A_NORMAL, "%-9s %s, %d layers", "model", l->model_type,
                l->n_layers);
    if (l && l->model_type) {
        con_bytes_text(l->bytes_total, a, sizeof a);
        if (l->shards)
            cd_putf(d, y++, 3, w - 2, A_NORMAL, "%-9s %d safetensors file%s mapped, %s", "shards",
                    l->shards, l->shards == 1 ? "" : "s", a);
        else
            cd_putf(d, y++, 3, w - 2, A_NORMAL, "%-9s none: embedded or made-up weights, %s",
                    "shards", a);
    }
    if (l && l->phase >= ENGINE_LOAD_WEIGHTS) {
        int bw = w - 40 > 40 ? 40 : w - 40 < 10 ? 10 : w - 40;
        uint64_t total = l->bytes_total ? l->bytes_total : 1;
        int pct = (int)(100.0 * (double)l->bytes / (double)total);
        char bar[64];
        int fill = bw * pct / 100, k = 0;
        bar[k++] = '[';
        for (int i = 0; i < bw && k < (int)sizeof bar - 2; i++)
            bar[k++] = i < fill ? '#' : '.';
        bar[k++] = ']';
        bar[k] = '\0';
        con_bytes_text(l->bytes, a, sizeof a);
        con_bytes_text(l->bytes_total, b, sizeof b);
        cd_putf(d, y++, 3, w - 2, cd_attr(&cv, PAIR_OK, A_NORMAL), "%-9s %s %3d%%  %s of %s",
                "weights", bar, pct, a, b);
    }
    if (l && l->phase == ENGINE_LOAD_KV)
        cd_putf(d, y++, 3, w - 2, A_NORMAL, "%-9s sizing and reserving the pool...", "KV cache");
    if (l && l->phase == ENGINE_LOAD_READY) {
        con_bytes_text(l->kv_bytes, a, sizeof a);
        cd_putf(d, y++, 3, w - 2, A_NORMAL, "%-9s %d blocks x %d tokens = %d tokens, %s",
                "KV cache", l->kv_blocks, l->block_size, l->kv_blocks * l->block_size, a);
    }
    cd_putf(d, y++, 3, w - 2, A_DIM, "%-9s %.1f s", "elapsed", l ? l->t : 0.0);
    y++;
    if (v->log && y < LINES - 2) {
        cd_title_rule(d, &cv, (layout_rect_t){0, y++, COLS, 1}, "Log");
        int rows = LINES - y < CON_MAX_TEXT_ROWS ? LINES - y : CON_MAX_TEXT_ROWS, scroll = 0;
        int n = ui_text_rows(v->log, COLS - 2, rows, &scroll, true, d->rows);
        for (int i = 0; i < n; i++)
            cd_put(y + i, 1, COLS - 2, d->rows[i].text, d->rows[i].len, A_DIM);
    }
    wnoutrefresh(stdscr);
    doupdate();
}

void con_draw(con_drawer_t *d, const con_view_t *v, con_drawn_t *out) {
    out->scroll = v->scroll;
    out->help_scroll = v->help_scroll;
    out->reqs_top = v->reqs ? v->reqs->top : 0;
    out->experts_top = v->experts_top;
    out->experts_rows = 0;
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
        draw_vitals(d, v);
        if (v->reqs_focus) { /* the table over the charts and the chat pane */
            out->reqs_top = cd_draw_requests(d, v);
        } else {
            if (v->zoom >= 0 && v->zoom < v->lay.n_charts)
                draw_chart(d, v, v->zoom, chart_area(&v->lay));
            else
                for (int i = 0; i < v->lay.n_charts; i++)
                    draw_chart(d, v, i, v->lay.charts[i]);
            draw_flags(d, v);
            out->reqs_top = cd_draw_requests(d, v);
            if (v->experts)
                out->experts_top = cd_draw_experts(d, v, &out->experts_rows);
            else
                out->scroll = draw_chat(d, v);
        }
        draw_status(v);
        curs_set(1);
        draw_repl(v); /* last: it leaves the cursor in the line */
    }
    wnoutrefresh(stdscr);
    doupdate();
}

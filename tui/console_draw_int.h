/*
 * console_draw_int: what the files of console_draw share (console_draw.c: the frame, header,
 * charts, flags, chat, status and help; console_draw_reqs.c: the requests table;
 * console_draw_experts.c: the expert-load panel): the drawer's buffers, the colour pairs and the
 * text helpers. Internal to them.
 */
#ifndef TACHYON_CONSOLE_DRAW_INT_H
#define TACHYON_CONSOLE_DRAW_INT_H

#include <curses.h>

#include "console_draw.h"

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
    PAIR_S1, /* the charts' series */
    PAIR_S2,
    PAIR_S3,
    PAIR_S4,
    PAIR_HEAT_COLD, /* the expert-load panel's cold cells (the others reuse OK, USER, ERROR) */
};

struct con_drawer {
    char *chart_buf;     /* [CHART_BUF_SIZE(MAX_COLS, MAX_ROWS)] */
    char *chart_buf2;    /* the same, for the overlaid second series */
    double *points;      /* [2 * MAX_COLS] */
    double *points2;     /* [2 * MAX_COLS] */
    char *line_buf;      /* [LINE_BUF] one screen row */
    ui_text_row_t *rows; /* [CON_MAX_TEXT_ROWS] */
    ui_vseg_t vsegs[UI_VITALS_MAX_SEGS];
};

/* The attribute of a colour pair, or fallback without colours. */
attr_t cd_attr(const con_view_t *v, int pair, attr_t fallback);

/* Text clipped to w columns at (y, x). */
void cd_put(int y, int x, int w, const char *s, size_t len, attr_t a);

/* cd_put of a printf, through the drawer's line buffer. */
void cd_putf(con_drawer_t *d, int y, int x, int w, attr_t a, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* A panel's title row: "── Title ─────" (or dashes in ASCII mode). */
void cd_title_rule(con_drawer_t *d, const con_view_t *v, layout_rect_t r, const char *title);

/* A benchmark's bar "[####......]" of width cells, and tqdm's numbers "25% 00:12<00:36 0.8
 * req/s ok 10 fail 0" (ok and fail only when wide, fail always when some failed), or "preparing
 * 40 prompts" before the first request has gone out. */
void cd_progress_bar(const bench_progress_t *p, char *buf, size_t size, int width);
void cd_bench_numbers(const bench_progress_t *p, bool wide, char *buf, size_t size);

/* The requests table (console_draw_reqs.c); returns the first row shown (v->reqs->top clamped
 * so that the selection is in view). */
int cd_draw_requests(con_drawer_t *d, const con_view_t *v);

/* The expert-load panel in the chat pane's place (console_draw_experts.c); returns the first
 * MoE layer shown (v->experts_top clamped to the rows there are) and sets *rows to how many. */
int cd_draw_experts(con_drawer_t *d, const con_view_t *v, int *rows);

#endif

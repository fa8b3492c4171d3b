/*
 * layout: where each panel of the console goes on a W x H terminal. A pure function (no curses),
 * so that every size can be checked by a unit test.
 *
 *     layout_t l;
 *     layout_compute(COLS, LINES, band_rows, &l);
 *     if (l.too_small) show "terminal too small: need l.min_w x l.min_h";
 *     else draw the header in l.header, charts in l.charts[0 .. l.n_charts), ...
 *
 * Always shown (when not too small): header (top row), the numbers band under it (band rows
 * wanted: ui_vitals.h; it gets fewer, or none, where the charts and the chat pane need the
 * rows), the charts, the chat/output pane, the
 * REPL line and the status line (bottom row). The flags panel and the requests table are shown
 * where there is room (a column beside the charts on wide terminals, the requests table running
 * down beside the chat pane from 160 columns, a strip under the charts on medium ones)
 * and have w = h = 0 otherwise. Shown rectangles lie inside the screen and never overlap.
 */
#ifndef TACHYON_LAYOUT_H
#define TACHYON_LAYOUT_H

#include <stdbool.h>

/* running, waiting, KV cache, prompt tok/s, generation tok/s, latency; and the most: with
 * speculative decoding's tokens per step, shown while it is configured or has run */
#define LAYOUT_CHARTS     6
#define LAYOUT_MAX_CHARTS 7
#define LAYOUT_MIN_W      60
#define LAYOUT_MIN_H      16

typedef struct layout_rect {
    int x, y, w, h; /* columns and rows from the top left; w = h = 0: not shown */
} layout_rect_t;

typedef struct layout {
    bool too_small; /* below min_w x min_h: show only the "too small" screen */
    int min_w, min_h;
    layout_rect_t header;
    layout_rect_t vitals; /* the numbers band under the header; optional */
    layout_rect_t charts[LAYOUT_MAX_CHARTS];
    int n_charts;               /* as asked (LAYOUT_CHARTS or more); 0 when too small */
    int chart_cols, chart_rows; /* grid of the charts; a last row short of charts spreads them */
    layout_rect_t flags;        /* optional */
    layout_rect_t requests;     /* optional */
    layout_rect_t chat;         /* chat and command output */
    layout_rect_t repl;         /* one row */
    layout_rect_t status;       /* one row */
} layout_t;

/* Fills *out for a terminal of w columns and h rows (any values, also 0 or negative), with up
 * to band rows for the numbers band and LAYOUT_CHARTS charts. */
void layout_compute(int w, int h, int band, layout_t *out);

/* The same with n_charts charts (LAYOUT_CHARTS .. LAYOUT_MAX_CHARTS), and the chat idle or not:
 * idle, the charts take most of the body (and grow taller), the chat pane what is left (at least
 * its minimum). */
void layout_compute_idle(int w, int h, int band, bool idle, int n_charts, layout_t *out);

bool layout_rect_empty(layout_rect_t r);

/* True when a and b share a cell. */
bool layout_rect_overlap(layout_rect_t a, layout_rect_t b);

#endif

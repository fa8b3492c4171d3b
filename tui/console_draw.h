/*
 * console_draw: one frame of the console, drawn from a snapshot of its state. con_draw reads a
 * con_view_t, writes curses (stdscr of the current SCREEN) and changes nothing else: what it
 * works out on the way (the scrolls clamped to the text there is) comes back in con_drawn_t.
 * So a test can open a SCREEN with newterm() on a pipe, draw a made-up view and read the cells
 * back (tests/unit/test_console_draw.c).
 *
 *     con_drawer_t *d = con_drawer_create(&err);      // the frame's buffers, sized once
 *     bool color = con_draw_colors(want_color);       // after newterm: the colour pairs
 *     con_view_t v = {...};                           // the console fills it for each frame
 *     le_render(le, con_draw_line_width(&lay, busy), &v.line);
 *     con_drawn_t out;
 *     con_draw(d, &v, &out);                          // werase, draw, wnoutrefresh, doupdate
 *     scroll = out.scroll; help_scroll = out.help_scroll;
 *     con_drawer_destroy(d);
 *
 * Screen (layout.h places the panels): the header, the numbers band (ui_vitals.h), six charts
 * (one over the whole chart area when zoomed), the flags panel, the requests table, the chat/output
 * pane (or the log, or the live expert-load panel: console_draw_experts.c), the REPL line and
 * the status line with the F-key bar (con_draw_fkey_at and con_draw_chart_at tell what a click
 * hit); the help over the charts; a "terminal too small" screen below the layout's minimum. Colour
 * only with view.color; ASCII glyphs with view.ascii.
 */
#ifndef TACHYON_CONSOLE_DRAW_H
#define TACHYON_CONSOLE_DRAW_H

#include <stdbool.h>

#include "bench.h"
#include "engine.h"
#include "err.h"
#include "layout.h"
#include "lineedit.h"
#include "ui_gpu.h"
#include "ui_reqs.h"
#include "ui_series.h"
#include "ui_text.h"
#include "ui_vitals.h"

#define CON_SAMPLE_MS     250 /* engine_stats() sampling period: one sample of each series */
#define CON_FLAG_VALUE    64  /* bytes of a flag's value text */
#define CON_MAX_FLAGS     64  /* flags the panel shows */
#define CON_MAX_TEXT_ROWS 128 /* rows of the chat pane and the help drawn at most */

/* The series the charts draw, sampled by the console. */
enum {
    M_RUNNING,
    M_WAITING,
    M_KV,
    M_PROMPT_TPS,
    M_GEN_TPS,
    M_TTFT,
    M_TPOT,
    M_DEV_UTIL, /* %: the GPUs' mean utilisation, or the process's CPU (of all cores) */
    M_DEV_MEM,  /* %: the GPUs' mean memory use, or the process's resident set of the machine's */
    M_SPEC_ACCEPTED, /* speculative decoding: draft tokens accepted per verify step (5 s mean) */
    M_SPEC_DRAFTED,  /* draft tokens proposed per verify step */
    N_METRICS
};

/* What one frame shows. Pointers are borrowed for the call. */
typedef struct con_view {
    double now; /* s (engine_now), the frame's time */
    bool color, ascii;
    layout_t lay;
    /* header */
    const char *model_name, *model_note, *url, *layout_desc, *backend, *model_desc;
    double uptime; /* s */
    /* charts */
    const ui_series_t *series;   /* [N_METRICS] */
    double window;               /* s, the charts' time window */
    double last_ttft, last_tpot; /* ms, the latest non-empty latency window (NaN: none yet) */
    /* the numbers band (lay.vitals) and the device chart */
    const ui_gpu_sample_t *gpu; /* NULL: none sampled yet */
    const ui_ops_t *ops;
    /* flags panel */
    int n_flags;
    const char (*flag_text)[CON_FLAG_VALUE]; /* [n_flags], in flags_at() order */
    const bool *flag_changed;                /* [n_flags] */
    /* requests table: the engine's totals, the rows (ui_reqs_build'd: the console's own reply
     * among them), its sort and filter; focused (F6): over the charts and the chat pane, the
     * selected row shown */
    const stats_snapshot_t *stats;
    const bench_progress_t *bench; /* the benchmark's progress; NULL: none runs */
    const ui_reqs_t *reqs;
    bool reqs_focus;
    /* chat/output pane, or the log pane */
    const ui_text_t *text;
    int scroll; /* rows scrolled up from the newest */
    bool show_reasoning;
    bool log; /* text is the log (F3) */
    int zoom; /* the chart that takes the whole chart area (-1: none) */
    /* the live expert-load panel (/experts) in the chat pane's place, drawn from stats->experts
     * (ui_experts.h) from its MoE layer experts_top on */
    bool experts;
    int experts_top;
    /* REPL line: the editor's view, rendered con_draw_line_width() columns wide */
    le_view_t line;
    bool busy; /* a reply streams: the prompt says so */
    /* status line */
    const char *status;
    bool status_error;
    const char *applying; /* a flag change in flight (its name); NULL: none */
    double applying_secs;
    /* help overlay */
    bool help;
    const ui_text_t *help_text;
    int help_scroll; /* rows scrolled up from its end */
} con_view_t;

/* What drawing worked out: the scrolls clamped to the text there is. */
typedef struct con_drawn {
    int scroll, help_scroll;
    int reqs_top;     /* the requests table's first row shown */
    int experts_top;  /* the expert-load panel's first MoE layer shown */
    int experts_rows; /* and how many it showed (PgUp/PgDn's page); 0 when not drawn */
} con_drawn_t;

typedef struct con_drawer con_drawer_t;

/* The buffers a frame needs (charts, one screen row, the pane's rows). NULL when out of
 * memory. */
con_drawer_t *con_drawer_create(err_t *err);
void con_drawer_destroy(con_drawer_t *d); /* NULL is a no-op */

/* Sets up the colour pairs on the current SCREEN when want and the terminal has colours;
 * returns whether colours are on. */
bool con_draw_colors(bool want);

/* The columns the REPL line gives the editor (le_render's width). */
int con_draw_line_width(const layout_t *lay, bool busy);

/* The chart at (y, x) in a frame of v's layout (zoomed or not); -1 when none. */
int con_draw_chart_at(const con_view_t *v, int y, int x);

/* Where the requests table is in a frame of v (focused: over the charts and the chat pane). */
layout_rect_t con_draw_reqs_rect(const con_view_t *v);

/* The requests table's row (an index into v->reqs->rows, from the frame's first row shown,
 * top) at (y, x); -1 when none. */
int con_draw_req_at(const con_view_t *v, int top, int y, int x);

/* The F-key bar's key under column x of the status line (1..10 for F1..F10); 0 when none. */
int con_draw_fkey_at(const con_view_t *v, int x);

/* The loading screen, before the dashboard: what engine_open has reported (engine_load_t) and
 * the log's last lines. */
typedef struct con_loading {
    bool color, ascii;
    const char *model;         /* as given ("" or NULL: the embedded demo model) */
    const engine_load_t *load; /* NULL: nothing reported yet */
    const ui_text_t *log;      /* the log so far; NULL: none */
} con_loading_t;

void con_draw_loading(con_drawer_t *d, const con_loading_t *v);

/* "4.2 MiB", "1.50 GiB": bytes for people. */
void con_bytes_text(uint64_t bytes, char *buf, size_t size);

/* Draws the frame: werase, every panel, one wnoutrefresh and one doupdate; the cursor is left
 * in the REPL line (hidden under the help and the "too small" screen). */
void con_draw(con_drawer_t *d, const con_view_t *v, con_drawn_t *out);

#endif

/*
 * ui_experts: the expert-load heat map of a mixture-of-experts model, laid out for a pane of a
 * width: what the console's live panel (/experts, drawn by console_draw_experts.c) and its text
 * copy (/experts print) show. Pure: no curses, no engine calls.
 *
 * One row per MoE layer of a stats_experts_t (engine_stats()): its experts in cells, several
 * experts a cell when they do not all fit the width, each cell
 *   - a glyph of the ramp " .:-=+*#%@" by the cell's tokens relative to the busiest cell of its
 *     row (blank: none; '@': the busiest), and
 *   - a heat class by the cell's tokens per expert against the row's mean expert (its fair
 *     share): cold (under half), fair (up to 1.5x), warm (up to 3x), hot (above), which the
 *     console colours (blue, green, yellow, red; bold for hot without colours);
 * then the row's imbalance (busiest expert over the mean expert) and its tokens. The counts are
 * those of the engine's window (the last ~10 s), or, when the window holds nothing, those since
 * start; the summary line says which, the busiest expert of all, the most unbalanced layer and
 * the tokens routed since start. The engine refreshes the window only while it runs (and once
 * as it goes idle), so the map is given the time now: an engine idle for a while is said to be
 * ("idle 4 s"), and one idle for the whole window counts as having routed nothing in it.
 *
 *     ui_experts_map_t m;
 *     ui_experts_map(&snap.experts, pane_width, engine_now(), &m);
 *     ui_experts_summary(&m, buf, sizeof buf);             // one line, most telling first
 *     ui_experts_fold(buf, pane_width, rows, sizeof rows); // the same on rows of the width
 *     for (int r = top; r < top + rows && r < m.n_rows; r++) {
 *         uint8_t level[UI_EXPERTS_MAX_CELLS], heat[UI_EXPERTS_MAX_CELLS];
 *         ui_experts_row(&m, r, buf, sizeof buf, level, heat);
 *         // buf: "L12   |.:@  | x 2.10 96"; cell c is the column UI_EXPERTS_LABEL_W + c
 *     }
 *
 *     char *text = ui_experts_render(&snap.experts, width, engine_now(), max_rows);  // as text
 *     free(text);
 */
#ifndef TACHYON_UI_EXPERTS_H
#define TACHYON_UI_EXPERTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stats.h"

#define UI_EXPERTS_RAMP      " .:-=+*#%@"
#define UI_EXPERTS_LABEL_W   7   /* "L93   |": the row's first cell is this column */
#define UI_EXPERTS_TAIL_W    18  /* "| x 12.34 1234567" after the cells, at most */
#define UI_EXPERTS_MIN_W     40  /* narrower widths are laid out as this one */
#define UI_EXPERTS_MAX_CELLS 512 /* cells a row (a wider pane folds experts as if it were so) */

typedef enum ui_experts_heat {
    UI_EXPERTS_NONE, /* no tokens */
    UI_EXPERTS_COLD, /* under half the row's mean expert */
    UI_EXPERTS_FAIR, /* up to 1.5x */
    UI_EXPERTS_WARM, /* up to 3x */
    UI_EXPERTS_HOT,  /* above 3x */
} ui_experts_heat_t;

/* The map laid out for a width: which counts, experts folded into cells, the summary's facts. */
typedef struct ui_experts_map {
    const stats_experts_t *x; /* borrowed */
    int n_rows;               /* MoE layers (0: a dense model, or one not tracked) */
    bool window;              /* the window's counts; false: since start (the window is empty) */
    double idle_s;            /* since the engine last refreshed the counts (0: it runs) */
    int per, cells;           /* experts a cell, cells a row */
    uint64_t tokens;          /* routed in the counts shown (a token once per expert it went to) */
    uint64_t since_start;     /* routed since start */
    int hot_row, hot_expert;  /* the busiest expert of all (-1: nothing routed) */
    uint64_t hot_tokens;
    double hot_share;       /* its share of its layer's tokens, % */
    int worst_row;          /* the most unbalanced layer (-1: nothing routed) */
    double worst_imbalance; /* its busiest expert over its mean expert */
} ui_experts_map_t;

/* Idle (no refresh) for longer than this, the summary says so. */
#define UI_EXPERTS_IDLE_S (4 * STATS_EXPERT_REFRESH)

/* Lays x out for a pane `width` columns wide (at least UI_EXPERTS_MIN_W used) at time now
 * (engine_now(), x->t's clock; <= 0: as of x->t). */
void ui_experts_map(const stats_experts_t *x, int width, double now, ui_experts_map_t *m);

/* The summary line: "last 9.5 s: 94 MoE layers x 128 experts (4 a cell) | 5678 routed since
 * start | busiest L12 e37 1234 tok, 31% of its layer | worst imbalance L40 x12.30" (the total
 * before the details, which a narrow pane's fold may cut) ("last 9.5 s,
 * idle 4 s: ..." once the engine has been idle a while); for a dense
 * model the "no MoE layers" sentence, before any token "no tokens routed yet". Returns the
 * length (cut to size - 1). */
int ui_experts_summary(const ui_experts_map_t *m, char *buf, size_t size);

/* The summary s folded onto rows of width columns: broken at its " | " where the next part would
 * run past the edge (each such " | " becomes '\n'; a part longer than a row stays whole). Returns
 * the length (cut to size - 1). */
int ui_experts_fold(const char *s, int width, char *buf, size_t size);

/* Row r (0 <= r < m->n_rows) as text, "L12   |" then m->cells cells and "| x 2.10 96", and each
 * cell's ramp level (0..9) and heat (ui_experts_heat_t) in level[] and heat[] (m->cells each;
 * either may be NULL). Returns the length (cut to size - 1). */
int ui_experts_row(const ui_experts_map_t *m, int r, char *buf, size_t size, uint8_t *level,
                   uint8_t *heat);

/* The whole map as text lines ended by '\n': the summary (folded to the width), the ramp's
 * legend, then the rows, at
 * most max_rows of them (< 1: all) and "... N more MoE layers" for the rest; for a dense model
 * one line saying so. NULL when out of memory; the caller frees the string. */
char *ui_experts_render(const stats_experts_t *x, int width, double now, int max_rows);

#endif

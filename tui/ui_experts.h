/*
 * ui_experts: the expert-load heat map of a mixture-of-experts model as text lines, what the
 * console's /experts prints (and what any text view can show). Pure: no curses, no engine calls.
 *
 * One row per MoE layer of a stats_experts_t (engine_stats()): its experts in cells, several
 * experts a cell when they do not all fit the width, each cell one character of the ramp
 * " .:-=+*#%@" by the cell's tokens relative to the busiest cell of that row (blank: none; '@':
 * the busiest), then the row's imbalance (busiest expert over the mean expert) and its token
 * count. The counts are those of the engine's window (the last ~10 s), or, when the window holds
 * nothing (an idle engine), those since start; the first line says which.
 *
 *     char *text = ui_experts_render(&snap.experts, pane_width);   // NULL: out of memory
 *     for each '\n'-separated line: ui_text_add(t, UI_TXT_PRE, line);
 *     free(text);
 */
#ifndef TACHYON_UI_EXPERTS_H
#define TACHYON_UI_EXPERTS_H

#include "stats.h"

#define UI_EXPERTS_RAMP " .:-=+*#%@"

/* The heat map of x for a pane `width` columns wide (at least 40 used), lines ended by '\n';
 * for a dense model (x->n_layers 0) one line saying so. The caller frees the string. */
char *ui_experts_render(const stats_experts_t *x, int width);

#endif

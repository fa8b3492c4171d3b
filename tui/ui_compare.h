/*
 * ui_compare: /compare as the console shows it, to be read at a glance in 80 columns: for each
 * run against the base, the workload once, the server flags that differ named ("max-num-seqs 256
 * -> 64"), then one row per metric an operator reads (throughput, request rate, TTFT, TPOT, ITL,
 * E2E means and p99, failures) with the base, the run, the change and a verdict: better or worse
 * (a line style of its own: coloured, and the words say it without colours), or "same" when the
 * change is within the noise. The noise is measured when a run was repeated: the runs of the
 * store with the same workload and the same flags as the base (or the run) are its repeats, and
 * a metric's noise is half their spread (max - min) over their mean, the larger of the base's
 * and the run's; without repeats a change under 1 % counts as the same, and a line says how to
 * measure the noise. Then a count: "3 better, 1 worse, 4 the same". Pure (no curses): the lines
 * go to a callback with their style.
 *
 *     results_set_t set;
 *     results_pick(store, argc, argv, &set, &err);
 *     ui_compare_lines(&set, all_runs, n_runs, ascii, add_line, pane);
 */
#ifndef TACHYON_UI_COMPARE_H
#define TACHYON_UI_COMPARE_H

#include <stdbool.h>

#include "bench.h"
#include "results.h"
#include "ui_text.h"

#define UI_COMPARE_MIN_CHANGE 1.0 /* %: without repeats, smaller changes count as the same */

typedef void (*ui_compare_out_fn)(void *user, ui_txt_style_t style, const char *line);

/* The lines of set (r[0] the base) compared, the noise from the repeats among store[0 .. n_store)
 * (the console's runs; set's own runs may be among them). ascii: "+"/"-" for the arrows. */
void ui_compare_lines(const results_set_t *set, const bench_result_t *const *store, int n_store,
                      bool ascii, ui_compare_out_fn out, void *user);

#endif

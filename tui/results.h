/*
 * results: the console's benchmark results. Every run with at least one successful request is
 * kept as a JSON file (bench_result_save_json) in one directory (--results-dir, by default
 * $XDG_STATE_HOME/tachyon/results), and the files found there are loaded at start-up, so that
 * runs before and after a restart (a reload flag such as tensor-parallel-size) compare. Runs are
 * numbered 1.. in the store's order: the files sorted by name (which starts with the run's date),
 * then this session's runs. No curses: the console prints what this writes to a FILE.
 *
 *     results_t *rs = results_create(dir, &err);      // creates the directory
 *     char note[512];
 *     results_load(rs, note, sizeof note);            // every *.json there
 *     ... a benchmark finished with result r:
 *     int k = results_add(rs, r, &err);               // takes r; 0: not kept (no success)
 *     results_list(rs, &baseline, f);                 // the /results table
 *     if (results_compare(rs, argc, argv, f, &err) < 0) show(err.msg);   // /compare
 *     results_destroy(rs);
 *
 * A run without a successful request has no latencies and would compare as nonsense: it is never
 * saved, loaded or compared. /compare with no arguments compares the last two complete runs (not
 * stopped early) of one profile: the newest complete run against the newest complete run of its
 * profile before it. Arguments are run numbers ("3" or "#3") or result files (a path, or a name
 * in the directory), the first being the base.
 *
 * Memory: a kept result drops its per-request records (only the metrics, options and flags are
 * listed and compared), so a directory of large runs loads in little memory.
 */
#ifndef TACHYON_RESULTS_H
#define TACHYON_RESULTS_H

#include <stdio.h>

#include "bench.h"
#include "err.h"
#include "flags.h"

typedef struct results results_t;

/* A store over dir (created with its parents, mode 0700). NULL with err set when the directory
 * cannot be created or memory is short. The caller owns it (results_destroy). */
results_t *results_create(const char *dir, err_t *err);
void results_destroy(results_t *rs); /* NULL is a no-op */

/* The directory, as given. */
const char *results_dir(const results_t *rs);

/* The default directory: $XDG_STATE_HOME/tachyon/results (see statedir.h). -1 with err set. */
int results_default_dir(char *buf, size_t size, err_t *err);

/* Loads every *.json file of the directory, in name order, after the runs already held. Files
 * that cannot be read or hold no successful request are skipped; note receives one line saying
 * how many runs were loaded and what was skipped (the first problem named), "" when the
 * directory holds no result. Returns the number of runs loaded. */
int results_load(results_t *rs, char *note, size_t size);

/* Keeps a finished run: saves it as <dir>/<date>-<profile>.json (-2, -3, ... when taken) and
 * appends it. Takes r in every case. Returns the run's number (>= 1), with err set when the file
 * could not be written (the run is still listed, with no path); 0 when r has no successful
 * request (r is freed: such a run is no result). */
int results_add(results_t *rs, bench_result_t *r, err_t *err);

int results_count(const results_t *rs);

/* Run k (1 .. results_count), owned by the store; NULL out of range. */
const bench_result_t *results_get(const results_t *rs, int k);

/* Run k's file, "" when it could not be saved; NULL out of range. */
const char *results_path(const results_t *rs, int k);

/* "max-num-seqs=4 enable-prefix-caching=false": the flags of the server the run measured that
 * differ from baseline, "defaults" when none does, "(flags unknown)" when the result has no
 * server flags (not a Tachyon server). Cut to fit size. */
void results_flags_text(const bench_result_t *r, const flag_values_t *baseline, char *buf,
                        size_t size);

/* The /results table, one row per run: number, date, profile, prompts, successes, output
 * tokens/s, median TTFT, the flags against baseline and whether it was stopped early. */
void results_list(const results_t *rs, const flag_values_t *baseline, FILE *f);

/* The runs /compare compares: r[0] the base, then the others; each labelled "#3" (a run of the
 * store) or by its file's name (a file, loaded for the set). */
typedef struct results_set {
    int n;                    /* the base and the runs compared with it (>= 2) */
    const bench_result_t **r; /* [n] */
    char (*label)[64];        /* [n] */
    bench_result_t **loaded;  /* [n] the files loaded for it, else NULL */
} results_set_t;

/* argv[0] the base and the others compared with it (argc >= 2), or with argc == 0 the default
 * pair (see above). -1 with err set (and nothing to free) for an unknown run or unreadable file,
 * a file without a successful request, one argument, or no default pair. */
int results_pick(const results_t *rs, int argc, char *const *argv, results_set_t *set, err_t *err);
void results_set_free(results_set_t *set);

/* /compare: argv[0] the base and the others compared with it (argc >= 2), or with argc == 0 the
 * default pair (see above); prints bench_compare_print's table to f. -1 with err set, printing
 * nothing, for an unknown run or unreadable file, a file without a successful request, one
 * argument, or no default pair. */
int results_compare(const results_t *rs, int argc, char *const *argv, FILE *f, err_t *err);

#endif

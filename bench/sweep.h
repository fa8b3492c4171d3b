/*
 * sweep: a benchmark profile run once per value of one server flag (vLLM's `bench sweep`, the
 * seeds' tuning method in one command): for each value, set the flag (a callback: the console
 * calls its engine, `tachyon bench sweep` POSTs Tachyon's /admin/flags/NAME), run the workload
 * with warm-up requests first, and keep the result; then a table and a terminal plot of output
 * throughput against latency (mean TPOT), with the Pareto front (no other point is both faster
 * and has more throughput) and the best point (the most throughput) marked.
 *
 *     bench_sweep_t sw;
 *     bench_sweep_parse("max-num-seqs", "64,128,256", &sw, &err);
 *     bench_sweep_run(&sw, &opts, set_flag, user, progress, puser, &err);   // blocks
 *     bench_sweep_print(stdout, &sw, 80, true);                           // table + plot
 *     bench_sweep_free(&sw);                                              // the results left
 */
#ifndef TACHYON_BENCH_SWEEP_H
#define TACHYON_BENCH_SWEEP_H

#include <stdbool.h>
#include <stdio.h>

#include "bench.h"

#define BENCH_SWEEP_MAX     16 /* values in one sweep */
#define BENCH_SWEEP_WARMUPS 2  /* warm-up requests before each point (when the options ask none) */

typedef struct bench_sweep_point {
    char value[64];
    bool ok;                 /* the flag was set and the run gave metrics */
    char error[512];         /* !ok: why */
    double out_tps;          /* output tokens/s */
    double req_tps;          /* requests/s */
    double ttft_ms, tpot_ms; /* means */
    double p99_tpot_ms;
    bool pareto, best;      /* set by bench_sweep_run */
    bench_result_t *result; /* owned until taken (set to NULL by whoever keeps it) */
} bench_sweep_point_t;

typedef struct bench_sweep {
    char flag[64];
    int n;
    bench_sweep_point_t pts[BENCH_SWEEP_MAX];
    bool stopped; /* the options' stop flag was raised: the points after it did not run */
} bench_sweep_t;

/* Sets the flag on the server; 0, or -1 with err set. */
typedef int (*bench_sweep_set_fn)(void *user, const char *flag, const char *value,
                                  bench_err_t *err);

/* A comma-separated list of values ("64,128,256": 1 to BENCH_SWEEP_MAX, none empty). */
int bench_sweep_parse(const char *flag, const char *values, bench_sweep_t *out, bench_err_t *err);

/* Runs every point in turn (o is copied; num_warmups raised to BENCH_SWEEP_WARMUPS), marks the
 * Pareto front and the best point. A point whose flag change or run fails keeps its error and
 * the sweep goes on; o->stop ends it (the current point's partial result is kept). Returns 0, or
 * -1 when no point gave metrics. */
int bench_sweep_run(bench_sweep_t *sw, const bench_options_t *o, bench_sweep_set_fn set, void *user,
                    bench_progress_fn progress, void *puser, bench_err_t *err);

/* The table (value, req/s, output tok/s, mean TTFT, mean and P99 TPOT, Pareto and best marks)
 * and the plot of throughput against mean TPOT in at most width columns, in ASCII. */
void bench_sweep_print(FILE *f, const bench_sweep_t *sw, int width);

/* Frees the results not taken. */
void bench_sweep_free(bench_sweep_t *sw);

/* POSTs {"value": VALUE} to BASE/admin/flags/NAME (Tachyon's admin endpoint), with the API key
 * when not empty; live flags apply at once, rebuild flags once the server has rebuilt its KV
 * pool. A bench_sweep_set_fn for `tachyon bench sweep`: user is the bench_options_t. */
int bench_sweep_set_http(void *user, const char *flag, const char *value, bench_err_t *err);

#endif

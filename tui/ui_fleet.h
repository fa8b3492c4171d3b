/*
 * ui_fleet: what `tachyon console --watch URL...` shows of a fleet of replicas (server/
 * scale-out.md): each replica's Prometheus /metrics read over HTTP, one row per replica (its
 * URL, up or down and why, requests running and waiting, KV-cache use, generation and prompt
 * tokens/s from the counters' deltas, requests done, the model), and the fleet's total. Any
 * server that exports vLLM's metric names works: Tachyon (server/metrics.c), vLLM, several
 * engines in one process (their samples are summed; KV use is their mean).
 *
 * The parsing, the rates and the rows' text are pure (unit-tested: tests/unit/test_ui_fleet.c);
 * the sampler (ui_fleet_http.c) reads every replica at once with libcurl's multi interface on a
 * thread of its own, so a replica that hangs never stalls the UI; ui_fleet_read does one such
 * read on the calling thread (`tachyon bench --metrics`, before and after a run).
 *
 *     ui_fleet_sampler_t *sp = ui_fleet_sampler_start(urls, n, 1.0, &err); // UI signals blocked
 *     ui_fleet_row_t rows[n];
 *     unsigned seq = 0;
 *     if (ui_fleet_sampler_latest(sp, rows, n, &seq)) ...;  // UI thread: a copy, never blocks
 *     ui_fleet_row_t total;
 *     ui_fleet_total(rows, n, &total);
 *     ui_fleet_cols_t c;
 *     ui_fleet_columns(width, &c);
 *     char line[UI_FLEET_LINE];
 *     ui_fleet_head_text(&c, line, sizeof line);            // the table's column heads
 *     ui_fleet_row_text(&c, &rows[i], i + 1, now, line, sizeof line);
 *     ui_fleet_sampler_stop(sp);
 */
#ifndef TACHYON_UI_FLEET_H
#define TACHYON_UI_FLEET_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

#define UI_FLEET_MAX  64   /* replicas watched */
#define UI_FLEET_URL  256  /* bytes of a replica's URL */
#define UI_FLEET_LINE 1024 /* bytes of a row's text (the widest terminal's row) */

/* One read of a replica's /metrics. */
typedef struct ui_fleet_scrape {
    double running, waiting; /* requests: vllm:num_requests_running / _waiting, summed */
    double kv;               /* 0..1: vllm:kv_cache_usage_perc (or gpu_cache_), mean; NaN none */
    double gen_tokens;       /* vllm:generation_tokens_total, summed */
    double prompt_tokens;    /* vllm:prompt_tokens_total, summed */
    double requests_done;    /* vllm:request_success_total, every finished_reason */
    char model[96];          /* the first model_name label ("" none) */
} ui_fleet_scrape_t;

/* Reads Prometheus text (format 0.0.4) into *out. -1 when it holds no vLLM serving metric
 * (vllm:num_requests_running): not a vLLM-compatible /metrics. Unknown series, comments and
 * malformed lines are skipped. */
int ui_fleet_parse(const char *text, size_t len, ui_fleet_scrape_t *out);

/* A replica as the console shows it. */
typedef struct ui_fleet_row {
    char url[UI_FLEET_URL]; /* as given */
    bool seen;              /* read at least once (until then: "connecting") */
    bool up;                /* the last read answered 200 with vLLM metrics */
    char why[96];           /* !up: "connection refused", "HTTP 503", "timed out", ... */
    double since;           /* s (engine_now's clock): when up last changed */
    ui_fleet_scrape_t m;    /* the last good read (stale while down) */
    double t;               /* s: when m was read */
    double gen_tps;         /* tokens/s between the last two good reads; NaN: not yet */
    double prompt_tps;
    int n_up; /* ui_fleet_total only: replicas up (of n_rows) */
    int n_rows;
} ui_fleet_row_t;

/* A row for url, not read yet (url is cut to UI_FLEET_URL - 1 bytes). */
void ui_fleet_row_init(ui_fleet_row_t *r, const char *url);

/* One read's outcome at time t: s the scrape (NULL: the read failed, why says why). Rates come
 * from the counters' change since the previous good read; a counter that went down (the
 * replica restarted) gives no rate this time. */
void ui_fleet_row_update(ui_fleet_row_t *r, const ui_fleet_scrape_t *s, const char *why, double t);

/* The fleet as one row: sums over the replicas that are up (KV: their mean), n_up of n_rows. */
void ui_fleet_total(const ui_fleet_row_t *rows, int n, ui_fleet_row_t *out);

/* Columns of the table for a width: the URL takes what the numbers leave (at least 12 columns),
 * the model column only where there is room. */
typedef struct ui_fleet_cols {
    int width;
    int url_w;   /* columns of the URL */
    int model_w; /* 0: no model column */
} ui_fleet_cols_t;

void ui_fleet_columns(int width, ui_fleet_cols_t *c);

/* The column heads, exactly c->width columns (ASCII). */
void ui_fleet_head_text(const ui_fleet_cols_t *c, char *buf, size_t size);

/* One replica's row (index: its number, 1..; 0: the fleet's total row, r from ui_fleet_total),
 * exactly c->width columns (ASCII; a URL too long for its column keeps its end, after a '~').
 * A replica that is down shows "down", why and for how long instead of its numbers. */
void ui_fleet_row_text(const ui_fleet_cols_t *c, const ui_fleet_row_t *r, int index, double now,
                       char *buf, size_t size);

/* The URL a replica's metrics are read from: url with "/metrics" appended unless it ends so
 * (a trailing '/' dropped first). -1 when it does not fit in size. */
int ui_fleet_metrics_url(const char *url, char *buf, size_t size);

/* Reads the replica of each row (rows[i].url) once, now, on the calling thread, all at once, each
 * read timing out after timeout_s (at least 1 s); the outcomes update the rows as a sampler's
 * round does. -1 with err set when n is out of range or a URL is too long. */
int ui_fleet_read(ui_fleet_row_t *rows, int n, double timeout_s, err_t *err);

/* `tachyon bench --metrics URL...`: a replica's share of a run from its rows read before (b) and
 * after (a) it: requests finished and tokens generated meanwhile, those tokens over the run's
 * duration (s), KV use at the end; "-" where a read failed or a counter went down (a restart),
 * "down" and why when the read after failed. The head, then one line per replica (index 1..),
 * ASCII, no trailing newline. */
void ui_fleet_run_head_text(char *buf, size_t size);
void ui_fleet_run_text(const ui_fleet_row_t *b, const ui_fleet_row_t *a, int index, double duration,
                       char *buf, size_t size);

/* The sampler: a thread that reads every replica's /metrics at once every period_s seconds
 * (the first read at once; each read times out after period_s, at least 1 s, so a replica that
 * hangs shows down). urls are copied. Start it with the UI's signals blocked. NULL with err set
 * when n is out of range, a URL is too long or the thread cannot start. */
typedef struct ui_fleet_sampler ui_fleet_sampler_t;
ui_fleet_sampler_t *ui_fleet_sampler_start(const char *const *urls, int n, double period_s,
                                           err_t *err);

/* The rows after the latest round, copied into rows[0, n) when newer than *seq (then *seq is
 * its number and the result true); false, rows untouched, when there is none newer. Takes the
 * lock only for the copy. */
bool ui_fleet_sampler_latest(ui_fleet_sampler_t *sp, ui_fleet_row_t *rows, int n, unsigned *seq);

/* Stops the thread (within a tenth of a second, whatever the replicas do) and frees sp. NULL is
 * a no-op. */
void ui_fleet_sampler_stop(ui_fleet_sampler_t *sp);

#endif

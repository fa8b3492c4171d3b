/*
 * client: the HTTP side of a benchmark: one thread drives every request through one libcurl
 * multi handle (epoll + curl_multi_socket_action), streaming the responses and timing each
 * token event exactly as vLLM's request functions do (reference 3.2, see bench_record_t).
 *
 * Request i arrives at t0 + delays[i]; arrived requests start in order as long as fewer than
 * max_concurrency are in flight (the time spent waiting is client_queue_time). Connections are
 * kept alive and reused; the multi handle keeps as many as the concurrency allows. No thread or
 * allocation per token event: a response's bytes go through its transfer's SSE parser
 * (sse.h) and the chunk fields are read in place.
 *
 *     bench_client_config_t cfg = {.url = "http://127.0.0.1:8000/v1/completions", ...};
 *     int started;
 *     double t0 = bench_client_now(), t_end;
 *     bench_client_run(&cfg, reqs, n, delays, t0, records, &started, &t_end, fn, user, &err);
 *     ... records[0..started) filled; free each records[i].itl ...
 */
#ifndef TACHYON_BENCH_CLIENT_H
#define TACHYON_BENCH_CLIENT_H

#include <stdatomic.h>
#include <stddef.h>

#include "bench.h"

typedef struct bench_client_config {
    const char *url;               /* full URL of the streaming endpoint */
    const char *api_key;           /* NULL or "": no Authorization header */
    const char *request_id_prefix; /* x-request-id is prefix + index: "bench-1a2b3c4d-" */
    int max_concurrency;           /* 0 = unlimited */
    double timeout_s;              /* per request, > 0 */
    atomic_bool *stop;             /* NULL, or raised from any thread to abort the run */
} bench_client_config_t;

typedef struct bench_client_request {
    const char *body; /* JSON request body, caller-owned; must outlive the run */
    size_t body_len;
    int prompt_len; /* the dataset's count, kept unless the server's usage says otherwise */
    int output_len; /* expected tokens: sizes the record's itl list up front */
} bench_client_request_t;

/* CLOCK_MONOTONIC in seconds. */
double bench_client_now(void);

/* Runs n requests (delays NULL: all arrive at t0). Fills records[i] for every request started
 * (start_time and the other times relative to t0); records[i].itl is allocated here and owned
 * by the caller afterwards. When cfg->stop is raised, requests in flight are aborted (failed,
 * error "aborted: benchmark stopped") and no more start; *n_started tells how many did (always
 * the first ones). *t_end is when the last request finished (or the stop). progress, when not
 * NULL, is called about four times a second and once at the end. Failed requests are not an
 * error of the run: -1 only when the client cannot be set up. */
int bench_client_run(const bench_client_config_t *cfg, const bench_client_request_t *reqs, int n,
                     const double *delays, double t0, bench_record_t *records, int *n_started,
                     double *t_end, bench_progress_fn progress, void *user, bench_err_t *err);

#endif

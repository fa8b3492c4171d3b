/*
 * metrics: the Prometheus text of GET /metrics.
 *
 * vLLM's metric names (reference/server-and-bench.md section 2), so that Grafana dashboards,
 * GPUStack and `vllm bench serve` read them unchanged, computed from the engine's stats
 * snapshot, plus per-request histograms the server records itself (prompt and generation
 * lengths, n, max_tokens) and Tachyon's own series under `tachyon:`.
 *
 *     metrics_t *m = metrics_create(max_model_len);
 *     metrics_request_done(m, &done);                      // any thread, per finished request
 *     metrics_add(m, METRIC_DISCONNECTS, 1);
 *     stats_snapshot_t *snap = ...; engine_replica_stats(eng, 0, snap);   // each replica
 *     metrics_render(m, (const stats_snapshot_t *const[]){snap}, 1, &info, &buf);
 *     metrics_destroy(m);
 */
#ifndef TACHYON_METRICS_H
#define TACHYON_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "json.h"
#include "stats.h"

typedef struct metrics metrics_t;

/* Counters the server bumps. */
typedef enum metric_counter {
    METRIC_DISCONNECTS,    /* clients that went away before their answer was complete */
    METRIC_REJECTED_QUEUE, /* 503: the engine's queue was full */
    METRIC_HTTP_2XX,
    METRIC_HTTP_4XX,
    METRIC_HTTP_5XX,
    METRIC_COUNT_,
} metric_counter_t;

/* One finished generation request (all its choices). */
typedef struct metrics_request {
    int prompt_tokens;     /* summed over the request's prompts */
    int generation_tokens; /* summed over its choices */
    int max_generation;    /* the longest choice */
    int n;                 /* choices per prompt */
    int max_tokens;        /* the request's max_tokens, or -1 when it gave none */
} metrics_request_t;

/* What the render needs besides the snapshot. */
typedef struct metrics_info {
    const char *model_name;
    int block_size;
    const char *kv_cache_dtype;
    bool prefix_caching;
    unsigned connections;   /* open HTTP connections */
    int requests_in_flight; /* generation requests being answered */
} metrics_info_t;

/* Token-count histograms get vLLM's 1-2-5 buckets up to max_model_len. NULL when out of
 * memory. */
metrics_t *metrics_create(int max_model_len);
void metrics_destroy(metrics_t *m);

void metrics_request_done(metrics_t *m, const metrics_request_t *r);
void metrics_add(metrics_t *m, metric_counter_t c, uint64_t n);

/* Appends the exposition text (format 0.0.4) for an engine of n data-parallel replicas
 * (snaps[i]: engine_replica_stats of replica i; at most STATS_MERGE_MAX): the engine's series once
 * per replica, labelled engine="i" as vLLM labels its data-parallel engines (their sum is the
 * engine's: sum by (model_name)), the server's own series (request histograms, HTTP) once under
 * engine="0". */
void metrics_render(metrics_t *m, const stats_snapshot_t *const *snaps, int n,
                    const metrics_info_t *info, jbuf_t *out);

#endif

/*
 * ui_vitals: the band of numbers under the console's header, the ones an operator reads: one
 * row per GPU (utilisation, memory, power, temperature, clocks: ui_gpu.h), or "no GPU" and the
 * process's CPU % and resident memory; then the engine's numbers as vLLM's periodic log line and
 * /metrics carry them: KV cache used/total in tokens and blocks, the concurrency the pool holds
 * at max-model-len, prefix-cache hit rate, step and forward time, tokens per step, preemptions
 * per second, queue time, speculative acceptance (when drafts run), and finished requests by
 * reason (errors highlighted); with data-parallel replicas, a row per replica after them
 * (running, waiting, KV use, generation rate, step time, requests done: where the router put
 * the load); with tensor parallelism, a row per rank (its forward time per step and the part
 * spent in collectives: a rank that waits little is the one the others wait for).
 *
 * Pure (no curses): ui_vitals_lay places the fields as styled segments on rows of a given
 * width; a field that does not fit its row goes to the next one (GPU rows drop their last
 * fields instead), and what does not fit max_rows is left out.
 *
 *     ui_ops_t ops;
 *     ui_ops_from_stats(snap, engine_now(), 5.0, &ops);   // then block_size, max_model_len,
 *                                                          // queue_ms from the console
 *     ui_vseg_t segs[UI_VITALS_MAX_SEGS];
 *     int rows, n = ui_vitals_lay(&gpu, &ops, width, max_rows, segs, UI_VITALS_MAX_SEGS, &rows);
 */
#ifndef TACHYON_UI_VITALS_H
#define TACHYON_UI_VITALS_H

#include <stdbool.h>
#include <stdint.h>

#include "stats.h"
#include "ui_gpu.h"

#define UI_VITALS_MAX_SEGS     256
#define UI_VITALS_MAX_REPLICAS 16
#define UI_VITALS_MAX_RANKS    32

typedef struct ui_ops {
    int kv_used, kv_total;      /* blocks */
    bool kv_fp8;                /* --kv-cache-dtype fp8: the band says "KV fp8" */
    int block_size;             /* tokens per block; 0 unknown */
    int max_model_len;          /* tokens; 0 unknown */
    double prefix_hit_pct;      /* % of prompt tokens looked up that were cached; NaN none */
    double step_ms, forward_ms; /* mean over the window's steps; NaN: no step in it */
    double tokens_per_step;     /* mean tokens scheduled per step; NaN: none */
    double preempt_per_s;       /* over the window */
    double queue_ms;            /* mean queue time of recent requests; NaN: none */
    double spec_accept_pct;     /* speculative drafts accepted over the window, %; NaN: none */
    double spec_mean_len;       /* tokens per verifying sequence and step since start (>= 1);
                                   0: speculative decoding has not run */
    uint64_t finished[4];       /* by engine_finish_reason_t: stop, length, abort, error */
    /* data-parallel replicas (engine_replicas > 1; else 0): a row each */
    int n_replicas;
    struct ui_replica {
        int running, waiting, kv_used, kv_total;
        double gen_tps; /* generated tokens per second over the window */
        double step_ms; /* mean step time over the window; NaN: idle */
        uint64_t done;  /* requests finished, any reason */
    } replica[UI_VITALS_MAX_REPLICAS];
    /* tensor-parallel ranks (of every replica), a row each: per step over the last interval */
    int n_ranks;
    struct ui_rank {
        int replica, rank; /* replica -1: the engine has one */
        double fwd_ms;     /* forward per step; NaN: no step in the interval */
        double coll_ms;    /* of which inside collectives (waiting for the others included) */
    } rank[UI_VITALS_MAX_RANKS];
} ui_ops_t;

/* The numbers a snapshot gives: KV blocks, prefix hit rate and finishes since start, and the
 * step means over the steps of the last window_s seconds before now (engine_now() clock).
 * block_size, max_model_len and queue_ms are left 0 / NaN for the caller. */
void ui_ops_from_stats(const stats_snapshot_t *s, double now, double window_s, ui_ops_t *o);
/* Replica i's row of o from its own snapshot (engine_replica_stats), over the same window; sets
 * o->n_replicas to at least i + 1. */
void ui_ops_replica(ui_ops_t *o, int i, const stats_snapshot_t *s, double now, double window_s);

typedef enum ui_vstyle {
    UI_VS_LABEL, /* a field's name: dim */
    UI_VS_VALUE, /* a plain value */
    UI_VS_GOOD,  /* graded values: low load */
    UI_VS_WARN,  /* high load, preemptions */
    UI_VS_BAD,   /* near the limit, errors */
    UI_VS_TITLE, /* a GPU's index */
} ui_vstyle_t;

typedef struct ui_vseg {
    int row, col, len; /* len bytes of text; col in columns */
    ui_vstyle_t style;
    char text[128];
} ui_vseg_t;

/* A graded style for a percentage: good below 70, warn below 90, bad from 90. */
ui_vstyle_t ui_vitals_grade(double pct);

/* Places the fields on rows [0, max_rows) of width columns; returns the segments written (at
 * most max_segs) and sets *rows to the rows used. gpu or ops may be NULL (their fields left
 * out). */
int ui_vitals_lay(const ui_gpu_sample_t *gpu, const ui_ops_t *ops, int width, int max_rows,
                  ui_vseg_t *segs, int max_segs, int *rows);

#endif

/*
 * bench: the benchmark client library, `vllm bench serve` semantics against any
 * OpenAI-compatible endpoint (Tachyon, vLLM, SGLang, TensorRT-LLM).
 *
 * bench/ stands alone: it includes nothing from engine/, server/, kernels/ or tui/. The console
 * runs it on a thread of its own against the embedded server's loopback endpoint; `tachyon bench`
 * runs it from the command line.
 *
 *     bench_options_t o;
 *     bench_options_default(&o);
 *     bench_err_t err;
 *     if (bench_profile_apply("short", &o, &err) < 0) ...;   // then flags override fields
 *     o.num_prompts = 20;
 *     bench_result_t *r;
 *     if (bench_run(&o, on_progress, user, &r, &err) < 0) fprintf(stderr, "%s\n", err.msg);
 *     bench_report_print(stdout, r, BENCH_REPORT_VLLM);
 *     bench_result_save_json(r, "run.json", &err);
 *     bench_result_destroy(r);
 *
 * Times are seconds (double, CLOCK_MONOTONIC) unless a name ends in _ms. Every function that can
 * fail returns 0 / negative and fills a bench_err_t; nothing here exits or asserts on bad input.
 */
#ifndef TACHYON_BENCH_H
#define TACHYON_BENCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct bench_err {
    char msg[512];
} bench_err_t;

/* Formats msg into err (when err is not NULL) and returns -1. */
int bench_err_set(bench_err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                     */

typedef enum { BENCH_BACKEND_OPENAI, BENCH_BACKEND_OPENAI_CHAT } bench_backend_t;
typedef enum {
    BENCH_DATASET_RANDOM,
    BENCH_DATASET_SHAREGPT,           /* from dataset_path */
    BENCH_DATASET_SHAREGPT_SYNTHETIC, /* seeded generator matching ShareGPT's length statistics */
} bench_dataset_t;
typedef enum {
    BENCH_REPORT_VLLM,
    BENCH_REPORT_GUIDELLM,
    BENCH_REPORT_GPUSTACK
} bench_report_style_t;

/* A tokenizer for building datasets. bench_run uses the one in the options when given (tachyon
 * bench passes Tachyon's own tokenizer for --tokenizer DIR), else the server's /tokenize and
 * /detokenize. */
typedef struct bench_tokenizer {
    void *ctx;
    /* Token ids of text (add_special: as the server's add_special_tokens). Caller frees *ids. */
    int (*encode)(void *ctx, const char *text, bool add_special, int32_t **ids, int *n,
                  bench_err_t *err);
    /* Text of ids. Caller frees *text. */
    int (*decode)(void *ctx, const int32_t *ids, int n, char **text, bench_err_t *err);
    int vocab_size;             /* ids are 0 .. vocab_size-1 */
    const int32_t *special_ids; /* [n_special] never drawn for random prompts */
    int n_special;
    int num_special_tokens_to_add; /* BOS-style tokens encode(add_special) adds (0 for Qwen3) */
} bench_tokenizer_t;

/* Which latency metrics get percentiles (--percentile-metrics ttft,tpot,itl,e2el). */
enum { BENCH_METRIC_TTFT = 1, BENCH_METRIC_TPOT = 2, BENCH_METRIC_ITL = 4, BENCH_METRIC_E2EL = 8 };

#define BENCH_MAX_PERCENTILES 16
#define BENCH_MAX_EXTRA_BODY  1024

typedef struct bench_options {
    /* Target */
    char base_url[256]; /* "http://127.0.0.1:8000" (no trailing slash) */
    char endpoint[128]; /* "" = the backend's default: /v1/completions or /v1/chat/completions */
    bench_backend_t backend;
    char model[256];   /* "" = the first id of GET /v1/models */
    char api_key[256]; /* "" = $OPENAI_API_KEY when set; sent as a bearer token */
    /* Workload */
    char profile[64]; /* name of the bundled profile applied, "" if none (reports show it) */
    bench_dataset_t dataset;
    char dataset_path[1024];
    int num_prompts;    /* 1000 */
    int input_len;      /* random: 1024 */
    int output_len;     /* random: 128; sharegpt: > 0 fixes the output length */
    double range_ratio; /* random: [0, 1) */
    int prefix_len;     /* random: shared prefix tokens */
    bool ignore_eos;    /* forced on for random, as vLLM does */
    uint64_t seed;      /* 0 */
    /* Arrival */
    double request_rate; /* INFINITY = all at once */
    double burstiness;   /* 1.0 = Poisson; INFINITY = constant interval */
    int max_concurrency; /* 0 = unlimited */
    int num_warmups;     /* 0 */
    /* Metrics and report */
    unsigned percentile_metrics;                      /* BENCH_METRIC_* bits; ttft|tpot|itl */
    double metric_percentiles[BENCH_MAX_PERCENTILES]; /* {99} */
    int n_metric_percentiles;
    double goodput_ttft_ms, goodput_tpot_ms, goodput_e2el_ms; /* 0 = no SLO on that metric */
    char extra_body[BENCH_MAX_EXTRA_BODY]; /* JSON object merged into every request body, "" = none
                                            */
    char label[64];                        /* result label, "" = backend name */
    const bench_tokenizer_t *tokenizer;    /* NULL = through the server (see bench_tokenizer_t) */
    /* Control */
    double timeout_s;  /* per request; 0 = 6 hours as vLLM */
    atomic_bool *stop; /* when set (from any thread), in-flight requests are aborted and
                          bench_run returns the partial result with stopped = true */
} bench_options_t;

/* vLLM's defaults (random 1024/128, 1000 prompts, rate inf, percentiles ttft,tpot,itl at 99). */
void bench_options_default(bench_options_t *o);

/* ------------------------------------------------------------------------------------------ */
/* Profiles                                                                                    */

typedef struct bench_profile {
    const char *name;        /* "short" */
    const char *source;      /* "seed 000 (Qwen3-14B H100 lab)" */
    const char *description; /* one line */
} bench_profile_t;

/* The bundled profiles, terminated by a {NULL} entry (static storage). */
const bench_profile_t *bench_profiles(void);

/* Sets the dataset, lengths, prompt count, seed and arrival fields of o for the named profile,
 * the backend (openai-chat, as every seed ran) and o->profile; other fields are untouched, so
 * flags parsed afterwards override it. Unknown name: error listing the known ones. */
int bench_profile_apply(const char *name, bench_options_t *o, bench_err_t *err);

/* ------------------------------------------------------------------------------------------ */
/* Per-request records and metrics                                                             */

/* What the client measured for one request (vLLM's RequestFuncOutput). */
typedef struct bench_record {
    bool success;      /* at least one token event arrived, the status was 200 and the
                          finish_reason was not "abort" or "error" */
    double start_time; /* s, when the POST was issued (run clock: 0 = benchmark start) */
    double ttft;       /* s, first event with non-empty choices - start_time */
    double latency;    /* s, last token event - start_time */
    double *itl;       /* [n_itl] s, gaps between consecutive token events (owned by result) */
    int n_itl;
    int prompt_len;           /* usage.prompt_tokens when sent, else the dataset's length */
    int output_len;           /* usage.completion_tokens when sent, else token events (min 1) */
    double client_queue_time; /* s, waiting on max_concurrency before the POST */
    char error[160];          /* why it failed: HTTP status and reason, curl error, ... */
} bench_record_t;

/* One latency metric's statistics in ms, numpy semantics (population std, linear percentiles;
 * an empty list counts as [0]). */
typedef struct bench_stat {
    double mean, median, std;
    double percentiles[BENCH_MAX_PERCENTILES]; /* at bench_metrics_t.percentile_points */
} bench_stat_t;

/* vLLM's calculate_metrics over successful requests. */
typedef struct bench_metrics {
    int completed, failed;
    double duration; /* s */
    int64_t total_input_tokens, total_output_tokens;
    double request_throughput;      /* req/s */
    double request_goodput;         /* req/s; meaningful when any goodput SLO is set */
    double output_throughput;       /* tok/s */
    double total_token_throughput;  /* tok/s */
    double max_output_tokens_per_s; /* peak 1-second bucket of token events */
    double max_concurrent_requests; /* sweep line over [start, start + latency) */
    bench_stat_t ttft, tpot, itl, e2el;
    double percentile_points[BENCH_MAX_PERCENTILES];
    int n_percentiles;
} bench_metrics_t;

/* Computes every metric from the records with vLLM's formulas (reference 3.4). The SLOs, the
 * percentile points come from o. */
int bench_metrics_compute(const bench_record_t *records, int n, double duration,
                          const bench_options_t *o, bench_metrics_t *out, bench_err_t *err);

/* numpy.percentile(values, p) with linear interpolation; values need not be sorted (a sorted
 * copy is made in scratch, which holds n doubles). n == 0 gives 0. */
double bench_percentile(const double *values, int n, double p, double *scratch);

/* ------------------------------------------------------------------------------------------ */
/* Running                                                                                     */

typedef struct bench_progress {
    int total; /* num_prompts */
    int done;  /* finished, successful or not */
    int failed;
    int in_flight;
    double elapsed;               /* s since the benchmark started (warmups excluded) */
    double request_rate_observed; /* completed / elapsed */
    int64_t output_tokens;        /* so far */
} bench_progress_t;

/* Called from the benchmark's thread a few times per second and once at the end; it must not
 * block. */
typedef void (*bench_progress_fn)(const bench_progress_t *p, void *user);

typedef struct bench_result {
    bench_options_t options; /* as run (model filled in, stop = NULL) */
    bench_metrics_t metrics;
    bench_record_t *records; /* [n_records], in dataset order */
    int n_records;
    bool stopped;                 /* bench_options_t.stop was raised: a partial run */
    bool synthetic_dataset;       /* reports label it */
    char date[32];                /* "20261121-031500" local time at the start */
    char server_flags_json[8192]; /* the Tachyon server's flags as one JSON object
                                     {"name": "value", ...} (from its GET /admin/flags list), ""
                                     when the server has no such endpoint */
} bench_result_t;

/* Runs the benchmark: readiness of the endpoint, dataset (random prompts aligned through the
 * server's /tokenize and /detokenize when it has them), warmups, the timed run with the arrival
 * process, metrics. Blocks until done or stopped. The caller owns *out (bench_result_destroy). */
int bench_run(const bench_options_t *o, bench_progress_fn progress, void *user,
              bench_result_t **out, bench_err_t *err);

void bench_result_destroy(bench_result_t *r);

/* ------------------------------------------------------------------------------------------ */
/* Reports, results on disk, comparison                                                        */

/* The report in the given style; vLLM's is the exact "Serving Benchmark Result" block. */
void bench_report_print(FILE *f, const bench_result_t *r, bench_report_style_t style);

/* vLLM's --save-result JSON keys (with its detailed per-request arrays input_lens, output_lens,
 * ttfts, itls, latencies, start_times, queue_times, errors), plus "profile",
 * "synthetic_dataset", "stopped", "server_flags" (the parsed object) when known, and "options"
 * (the workload and report settings a reload needs). */
int bench_result_save_json(const bench_result_t *r, const char *path, bench_err_t *err);

/* Reads a saved result back: metrics, the options the reports need, and the records when the
 * per-request arrays are present (each records[i].itl malloc'd, freed by bench_result_destroy;
 * otherwise n_records = 0). Also reads `vllm bench serve --save-result` files. The caller owns
 * *out. */
int bench_result_load_json(const char *path, bench_result_t **out, bench_err_t *err);

/* The server flags that differ between two runs: fn(user, name, run's value, base's value) for
 * each, values as JSON text ("unset" where a run lacks the flag). Returns how many differ, -1
 * when either run has no server flags (not a Tachyon server) or they do not parse. */
typedef void (*bench_flag_diff_fn)(void *user, const char *name, const char *run, const char *base);
int bench_flags_diff(const bench_result_t *base, const bench_result_t *run, bench_flag_diff_fn fn,
                     void *user);

/* The seeds' comparison table: each metric, baseline vs every run, with +x % (and whether higher
 * is better for that metric). */
void bench_compare_print(FILE *f, const bench_result_t *base, const bench_result_t *const *runs,
                         int n_runs);

#endif

#include "metrics.h"

#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

struct metrics {
    pthread_mutex_t mu;
    stats_hist_t prompt, generation, max_generation, params_n, params_max_tokens; /* under mu */
    atomic_uint_least64_t counters[METRIC_COUNT_];
};

/* vLLM's build_1_2_5_buckets(max_model_len). */
static void hist_1_2_5(stats_hist_t *h, int max) {
    memset(h, 0, sizeof *h);
    static const int mant[] = {1, 2, 5};
    for (double exp = 1; h->n_bounds < STATS_MAX_BUCKETS; exp *= 10)
        for (int i = 0; i < 3 && h->n_bounds < STATS_MAX_BUCKETS; i++) {
            double v = mant[i] * exp;
            if (v > max) return;
            h->bounds[h->n_bounds++] = v;
        }
}

static void hist_observe(stats_hist_t *h, double v) {
    int b = 0;
    while (b < h->n_bounds && v > h->bounds[b])
        b++;
    h->counts[b]++;
    h->count++;
    h->sum += v;
}

metrics_t *metrics_create(int max_model_len) {
    metrics_t *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    hist_1_2_5(&m->prompt, max_model_len);
    hist_1_2_5(&m->generation, max_model_len);
    hist_1_2_5(&m->max_generation, max_model_len);
    hist_1_2_5(&m->params_max_tokens, max_model_len);
    static const double n_bounds[] = {1, 2, 5, 10, 20};
    m->params_n.n_bounds = 5;
    memcpy(m->params_n.bounds, n_bounds, sizeof n_bounds);
    for (int i = 0; i < METRIC_COUNT_; i++)
        atomic_init(&m->counters[i], 0);
    return m;
}

void metrics_destroy(metrics_t *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void metrics_request_done(metrics_t *m, const metrics_request_t *r) {
    pthread_mutex_lock(&m->mu);
    hist_observe(&m->prompt, r->prompt_tokens);
    hist_observe(&m->generation, r->generation_tokens);
    hist_observe(&m->max_generation, r->max_generation);
    hist_observe(&m->params_n, r->n);
    if (r->max_tokens > 0) hist_observe(&m->params_max_tokens, r->max_tokens);
    pthread_mutex_unlock(&m->mu);
}

void metrics_add(metrics_t *m, metric_counter_t c, uint64_t n) {
    atomic_fetch_add(&m->counters[c], n);
}

static uint64_t metrics_get(metrics_t *m, metric_counter_t c) {
    return atomic_load(&m->counters[c]);
}

// ---------------------------------------------------------------------------------------------
// Exposition

typedef struct out {
    jbuf_t *b;
    const char *labels; /* the sample's: engine="i",model_name="M" */
    char **lab;         /* [n]: each replica's labels (lab[0] also the server's own series) */
    int n;
} out_t;

static void head(out_t *o, const char *name, const char *type, const char *help) {
    jb_printf(o->b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample(out_t *o, const char *name, const char *extra, double v) {
    jb_printf(o->b, "%s{%s%s%s} ", name, o->labels, extra ? "," : "", extra ? extra : "");
    jb_double(o->b, v);
    jb_raw(o->b, "\n", 1);
}

static void gauge(out_t *o, const char *name, const char *help, double v) {
    head(o, name, "gauge", help);
    sample(o, name, NULL, v);
}

static void counter(out_t *o, const char *name, const char *help, double v) {
    head(o, name, "counter", help);
    sample(o, name, NULL, v);
}

/* A family of the engine's stats: its head, then a sample per replica (engine="i"), `value` an
 * expression of that replica's snapshot `s`. */
#define PER_ENGINE(o, snaps, type, name, help, value)                                              \
    do {                                                                                           \
        head(o, name, type, help);                                                                 \
        for (int r_ = 0; r_ < (o)->n; r_++) {                                                      \
            const stats_snapshot_t *s = (snaps)[r_];                                               \
            (o)->labels = (o)->lab[r_];                                                            \
            sample(o, name, NULL, (double)(value));                                                \
        }                                                                                          \
        (o)->labels = (o)->lab[0];                                                                 \
    } while (0)

static void hist_samples(out_t *o, const char *name, const stats_hist_t *h) {
    char le[64], series[160];
    snprintf(series, sizeof series, "%s_bucket", name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        jbuf_t t;
        jb_init(&t);
        jb_double(&t, h->bounds[i]);
        snprintf(le, sizeof le, "le=\"%s\"", t.p ? t.p : "0");
        jb_free(&t);
        sample(o, series, le, (double)cum);
    }
    sample(o, series, "le=\"+Inf\"", (double)h->count);
    snprintf(series, sizeof series, "%s_count", name);
    sample(o, series, NULL, (double)h->count);
    snprintf(series, sizeof series, "%s_sum", name);
    sample(o, series, NULL, h->sum);
}

static void histogram(out_t *o, const char *name, const char *help, const stats_hist_t *h) {
    head(o, name, "histogram", help);
    hist_samples(o, name, h);
}

/* A histogram of the engine's stats (`field` of stats_snapshot_t), a series per replica. */
static void engine_histogram(out_t *o, const stats_snapshot_t *const *snaps, const char *name,
                             const char *help, size_t field) {
    head(o, name, "histogram", help);
    for (int r = 0; r < o->n; r++) {
        o->labels = o->lab[r];
        hist_samples(o, name, (const stats_hist_t *)((const char *)snaps[r] + field));
    }
    o->labels = o->lab[0];
}

/* Expert load of an MoE model: a counter per (layer, expert), whose rate over a window is that
 * window's load (the console shows engine_stats' own window as a heat map), and per layer the
 * busiest expert over the mean one in the engine's window; per replica. */
static void experts(out_t *o, const stats_snapshot_t *const *snaps) {
    const stats_experts_t *x0 = &snaps[0]->experts;
    if (x0->n_layers == 0) return;
    char lbl[64];
    head(o, "tachyon:moe_expert_tokens_total", "counter",
         "Tokens routed to each expert of each MoE layer (a token counts for each of its top-k "
         "experts).");
    for (int i = 0; i < o->n; i++) {
        const stats_experts_t *x = &snaps[i]->experts;
        o->labels = o->lab[i];
        for (int r = 0; r < x->n_layers; r++)
            for (int e = 0; e < x->n_experts; e++) {
                snprintf(lbl, sizeof lbl, "layer=\"%d\",expert=\"%d\"", x->layer[r], e);
                sample(o, "tachyon:moe_expert_tokens_total", lbl,
                       (double)x->total[r * x->n_experts + e]);
            }
    }
    head(o, "tachyon:moe_expert_load_imbalance", "gauge",
         "Per MoE layer, the busiest expert's tokens over the mean expert's in the last "
         "tachyon:moe_expert_window_seconds (1 = balanced; 0 = no tokens).");
    for (int i = 0; i < o->n; i++) {
        const stats_experts_t *x = &snaps[i]->experts;
        o->labels = o->lab[i];
        for (int r = 0; r < x->n_layers; r++) {
            uint64_t sum = 0, max = 0;
            for (int e = 0; e < x->n_experts; e++) {
                uint32_t v = x->window[r * x->n_experts + e];
                sum += v;
                if (v > max) max = v;
            }
            snprintf(lbl, sizeof lbl, "layer=\"%d\"", x->layer[r]);
            sample(o, "tachyon:moe_expert_load_imbalance", lbl,
                   sum ? (double)max * x->n_experts / (double)sum : 0.0);
        }
    }
    o->labels = o->lab[0];
    gauge(o, "tachyon:moe_expert_window_seconds", "Seconds the engine's expert-load window covers.",
          x0->window_s);
}

/* Speculative decoding, as vLLM's SpecDecodingProm names it (its counters gain _total when
 * exposed): verified drafts, draft tokens, accepted ones, and accepted ones per draft position
 * for the positions used so far. */
static void spec_decode(out_t *o, const stats_snapshot_t *const *snaps) {
    PER_ENGINE(o, snaps, "counter", "vllm:spec_decode_num_drafts_total",
               "Number of spec decoding drafts.", s->spec_drafts);
    PER_ENGINE(o, snaps, "counter", "vllm:spec_decode_num_draft_tokens_total",
               "Number of draft tokens.", s->spec_draft_tokens);
    PER_ENGINE(o, snaps, "counter", "vllm:spec_decode_num_accepted_tokens_total",
               "Number of accepted tokens.", s->spec_accepted_tokens);
    head(o, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Accepted tokens per draft position.");
    for (int i = 0; i < o->n; i++) {
        const stats_snapshot_t *s = snaps[i];
        o->labels = o->lab[i];
        for (int j = 0; j < s->spec_k && j < STATS_SPEC_POS; j++) {
            char lbl[32];
            snprintf(lbl, sizeof lbl, "position=\"%d\"", j);
            sample(o, "vllm:spec_decode_num_accepted_tokens_per_pos_total", lbl,
                   (double)s->spec_accepted_per_pos[j]);
        }
    }
    o->labels = o->lab[0];
}

static double kv_usage(const stats_snapshot_t *s) {
    return s->kv_total > 0 ? (double)s->kv_used / s->kv_total : 0.0;
}

/* The engine's latency and size histograms, in vLLM's order. */
#define HIST(name, help, member)                                                                   \
    { name, help, offsetof(stats_snapshot_t, member) }
static const struct {
    const char *name, *help;
    size_t field;
} ENGINE_HISTS[] = {
    HIST("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft),
    HIST("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl),
    HIST("vllm:time_per_output_token_seconds",
         "Histogram of time per output token in seconds. DEPRECATED: Use "
         "vllm:inter_token_latency_seconds instead.",
         itl),
    HIST("vllm:request_time_per_output_token_seconds",
         "Histogram of time_per_output_token_seconds per request.", tpot),
    HIST("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e2e),
    HIST("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
         queue),
    HIST("vllm:request_prefill_time_seconds",
         "Histogram of time spent in PREFILL phase for request.", prefill_time),
    HIST("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
         decode_time),
    HIST("vllm:request_inference_time_seconds",
         "Histogram of time spent in RUNNING phase for request.", inference_time),
    HIST("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
         iteration_tokens),
};

void metrics_render(metrics_t *m, const stats_snapshot_t *const *snaps, int n,
                    const metrics_info_t *info, jbuf_t *out) {
    char *lab[STATS_MERGE_MAX] = {0};
    if (n < 1) return;
    if (n > STATS_MERGE_MAX) n = STATS_MERGE_MAX;
    for (int i = 0; i < n; i++) {
        jbuf_t l;
        jb_init(&l);
        jb_printf(&l, "engine=\"%d\",model_name=\"", i);
        /* label values escape \ " and newline; jb_esc does exactly that for them */
        jb_esc(&l, info->model_name, strlen(info->model_name));
        jb_lit(&l, "\"");
        lab[i] = l.p;
        if (l.oom) {
            out->oom = true;
            for (int k = 0; k <= i; k++)
                free(lab[k]);
            return;
        }
    }
    out_t o = {out, lab[0], lab, n};

    PER_ENGINE(&o, snaps, "gauge", "vllm:num_requests_running",
               "Number of requests in model execution batches.", s->running);
    PER_ENGINE(&o, snaps, "gauge", "vllm:num_requests_waiting",
               "Number of requests waiting to be processed.", s->waiting);
    PER_ENGINE(&o, snaps, "gauge", "vllm:kv_cache_usage_perc",
               "KV-cache usage. 1 means 100 percent usage.", kv_usage(s));
    PER_ENGINE(&o, snaps, "gauge", "vllm:gpu_cache_usage_perc",
               "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use "
               "vllm:kv_cache_usage_perc instead.",
               kv_usage(s));
    PER_ENGINE(&o, snaps, "counter", "vllm:prefix_cache_queries_total",
               "Prefix cache queries, in terms of number of queried tokens.", s->prefix_queries);
    PER_ENGINE(&o, snaps, "counter", "vllm:prefix_cache_hits_total",
               "Prefix cache hits, in terms of number of cached tokens.", s->prefix_hits);
    PER_ENGINE(&o, snaps, "counter", "vllm:num_preemptions_total",
               "Cumulative number of preemption from the engine.", s->preemptions);
    PER_ENGINE(&o, snaps, "counter", "vllm:prompt_tokens_total",
               "Number of prefill tokens processed.", s->prompt_tokens);
    PER_ENGINE(&o, snaps, "counter", "vllm:generation_tokens_total",
               "Number of generation tokens processed.", s->generation_tokens);
    PER_ENGINE(&o, snaps, "counter", "tachyon:steps_ahead_total",
               "Engine steps launched before the previous step's samples came back "
               "(--async-scheduling).",
               s->steps_ahead);
    PER_ENGINE(&o, snaps, "counter", "tachyon:tokens_ahead_total",
               "Input tokens of those steps that were the previous step's samples, read on the "
               "device.",
               s->tokens_ahead);
    spec_decode(&o, snaps);

    head(&o, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
    for (int i = 0; i < n; i++) {
        o.labels = lab[i];
        for (int r = 0; r < 4; r++) {
            char lbl[48];
            snprintf(lbl, sizeof lbl, "finished_reason=\"%s\"",
                     engine_finish_reason_name((engine_finish_reason_t)r));
            sample(&o, "vllm:request_success_total", lbl, (double)snaps[i]->requests_finished[r]);
        }
    }
    o.labels = lab[0];

    /* the server's own: one series (engine="0") */
    pthread_mutex_lock(&m->mu);
    histogram(&o, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", &m->prompt);
    histogram(&o, "vllm:request_generation_tokens", "Number of generation tokens processed.",
              &m->generation);
    histogram(&o, "vllm:request_max_num_generation_tokens",
              "Histogram of maximum number of requested generation tokens.", &m->max_generation);
    histogram(&o, "vllm:request_params_n", "Histogram of the n request parameter.", &m->params_n);
    histogram(&o, "vllm:request_params_max_tokens",
              "Histogram of the max_tokens request parameter.", &m->params_max_tokens);
    pthread_mutex_unlock(&m->mu);

    for (size_t i = 0; i < sizeof ENGINE_HISTS / sizeof ENGINE_HISTS[0]; i++)
        engine_histogram(&o, snaps, ENGINE_HISTS[i].name, ENGINE_HISTS[i].help,
                         ENGINE_HISTS[i].field);

    head(&o, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
    for (int i = 0; i < n; i++) {
        char cc[256];
        snprintf(cc, sizeof cc,
                 "block_size=\"%d\",cache_dtype=\"%s\",enable_prefix_caching=\"%s\","
                 "num_gpu_blocks=\"%d\"",
                 info->block_size, info->kv_cache_dtype, info->prefix_caching ? "True" : "False",
                 snaps[i]->kv_total);
        o.labels = lab[i];
        sample(&o, "vllm:cache_config_info", cc, 1.0);
    }
    o.labels = lab[0];

    PER_ENGINE(&o, snaps, "gauge", "tachyon:kv_blocks_used",
               "KV-cache blocks referenced by sequences.", s->kv_used);
    PER_ENGINE(&o, snaps, "gauge", "tachyon:kv_blocks_total", "KV-cache blocks in the pool.",
               s->kv_total);
    PER_ENGINE(&o, snaps, "counter", "tachyon:engine_steps_total", "Engine steps run.", s->steps);
    PER_ENGINE(&o, snaps, "counter", "tachyon:requests_submitted_total",
               "Requests submitted to the engine.", s->requests_submitted);
    gauge(&o, "tachyon:http_connections", "Open HTTP connections.", info->connections);
    gauge(&o, "tachyon:requests_in_flight", "Generation requests being answered.",
          info->requests_in_flight);
    counter(&o, "tachyon:client_disconnects_total",
            "Generation requests whose client went away before the answer was complete.",
            (double)metrics_get(m, METRIC_DISCONNECTS));
    counter(&o, "tachyon:requests_rejected_total",
            "Requests refused with 503 because the engine's queue was full.",
            (double)metrics_get(m, METRIC_REJECTED_QUEUE));
    head(&o, "tachyon:http_responses_total", "counter", "HTTP responses by status class.");
    sample(&o, "tachyon:http_responses_total", "code=\"2xx\"",
           (double)metrics_get(m, METRIC_HTTP_2XX));
    sample(&o, "tachyon:http_responses_total", "code=\"4xx\"",
           (double)metrics_get(m, METRIC_HTTP_4XX));
    sample(&o, "tachyon:http_responses_total", "code=\"5xx\"",
           (double)metrics_get(m, METRIC_HTTP_5XX));
    experts(&o, snaps);
    for (int i = 0; i < n; i++)
        free(lab[i]);
}

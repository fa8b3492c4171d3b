/*
 * bench report: the printed reports (vLLM's "Serving Benchmark Result" block byte for byte,
 * guidellm's naming, GPUStack's vLLM-looking block from guidellm fields) and the result JSON.
 *
 * The vLLM block follows vllm/benchmarks/serve.py (0.33): rows "{:<40} {:<10}" for integers and
 * "{:<40} {:<10.2f}" for floats (so lines end in spaces), section rules centred in 50 columns.
 * guidellm's per-request values (reference server-and-bench.md 4.3) are computed here from the
 * records: request latency, TTFT, ITL = (last - first) / (out - 1), TPOT = (last - start) / out,
 * output tokens/s = out / latency.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bench.h"

/* ---- formatting helpers ---- */

static void rule(FILE *f, const char *title, char c) {
    int len = (int)strlen(title), pad = 50 - len;
    if (pad < 0) pad = 0;
    int left = pad / 2; /* str.format's '^' puts the odd column on the right */
    for (int i = 0; i < left; i++)
        fputc(c, f);
    fputs(title, f);
    for (int i = 0; i < pad - left; i++)
        fputc(c, f);
    fputc('\n', f);
}

static void row_i(FILE *f, const char *label, long long v) {
    fprintf(f, "%-40s %-10lld\n", label, v);
}

static void row_f(FILE *f, const char *label, double v) {
    fprintf(f, "%-40s %-10.2f\n", label, v);
}

/* row_f with a formatted label: the Mean / Median / Pxx rows of one metric. */
static void row_fmt(FILE *f, double v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void row_fmt(FILE *f, double v, const char *fmt, ...) {
    char label[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(label, sizeof label, fmt, ap);
    va_end(ap);
    row_f(f, label, v);
}

/* Python's str(int(p)) for whole numbers, else repr(float): the shortest round-trip digits. */
static void pct_word(double p, char *buf, size_t cap) {
    if (p == floor(p) && fabs(p) < 1e15) {
        snprintf(buf, cap, "%lld", (long long)p);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, p);
        if (strtod(buf, NULL) == p) return;
    }
}

static const char *backend_name(bench_backend_t b) {
    return b == BENCH_BACKEND_OPENAI_CHAT ? "openai-chat" : "openai";
}

static const char *dataset_name(bench_dataset_t d) {
    switch (d) {
        case BENCH_DATASET_SHAREGPT:
            return "sharegpt";
        case BENCH_DATASET_SHAREGPT_SYNTHETIC:
            return "sharegpt-synthetic";
        default:
            return "random";
    }
}

/* The lines every style prints before its block: failed requests' errors (vLLM's wording), the
 * synthetic dataset's label, a partial run. */
static void preamble(FILE *f, const bench_result_t *r) {
    int failed = 0;
    for (int i = 0; i < r->n_records; i++)
        failed += !r->records[i].success;
    if (failed > 0) {
        fputs("Failed requests during benchmark run detected (capping to 10):\n", f);
        int k = 0;
        for (int i = 0; i < r->n_records && k < 10; i++)
            if (!r->records[i].success) fprintf(f, "Error %d: %s\n", k++, r->records[i].error);
    }
    if (r->synthetic_dataset)
        fputs("Dataset: sharegpt-synthetic (SYNTHETIC: prompt and output lengths drawn to match "
              "ShareGPT V3 as vLLM samples it; not real ShareGPT text)\n",
              f);
    if (r->stopped)
        fprintf(f, "Benchmark stopped early: partial result, %d of %d requests finished\n",
                r->metrics.completed + r->metrics.failed, r->options.num_prompts);
}

/* ---- vLLM ---- */

static void vllm_metric(FILE *f, const bench_metrics_t *m, const char *name, const char *header,
                        const bench_stat_t *st) {
    char pw[32];
    rule(f, header, '-');
    row_fmt(f, st->mean, "Mean %s (ms):", name);
    row_fmt(f, st->median, "Median %s (ms):", name);
    for (int k = 0; k < m->n_percentiles; k++) {
        pct_word(m->percentile_points[k], pw, sizeof pw);
        row_fmt(f, st->percentiles[k], "P%s %s (ms):", pw, name);
    }
}

static void report_vllm(FILE *f, const bench_result_t *r) {
    const bench_metrics_t *m = &r->metrics;
    const bench_options_t *o = &r->options;
    rule(f, " Serving Benchmark Result ", '=');
    row_i(f, "Successful requests:", m->completed);
    row_i(f, "Failed requests:", m->failed);
    if (o->max_concurrency > 0) row_i(f, "Maximum request concurrency:", o->max_concurrency);
    if (!isinf(o->request_rate)) row_f(f, "Request rate configured (RPS):", o->request_rate);
    row_f(f, "Benchmark duration (s):", m->duration);
    row_i(f, "Total input tokens:", (long long)m->total_input_tokens);
    row_i(f, "Total generated tokens:", (long long)m->total_output_tokens);
    row_f(f, "Request throughput (req/s):", m->request_throughput);
    if (o->goodput_ttft_ms > 0 || o->goodput_tpot_ms > 0 || o->goodput_e2el_ms > 0)
        row_f(f, "Request goodput (req/s):", m->request_goodput);
    row_f(f, "Output token throughput (tok/s):", m->output_throughput);
    row_f(f, "Peak output token throughput (tok/s):", m->max_output_tokens_per_s);
    row_f(f, "Peak concurrent requests:", m->max_concurrent_requests);
    row_f(f, "Total token throughput (tok/s):", m->total_token_throughput);
    unsigned sel = o->percentile_metrics;
    if (sel & BENCH_METRIC_TTFT) vllm_metric(f, m, "TTFT", "Time to First Token", &m->ttft);
    if (sel & BENCH_METRIC_TPOT)
        vllm_metric(f, m, "TPOT", "Time per Output Token (excl. 1st token)", &m->tpot);
    if (sel & BENCH_METRIC_ITL) vllm_metric(f, m, "ITL", "Inter-token Latency", &m->itl);
    if (sel & BENCH_METRIC_E2EL) vllm_metric(f, m, "E2EL", "End-to-end Latency", &m->e2el);
    rule(f, "", '=');
}

/* ---- guidellm's per-request values ---- */

typedef struct g_stat {
    double mean, median, p95, p99, max;
} g_stat_t;

typedef struct g_values {
    int n;              /* successful requests */
    g_stat_t latency_s; /* request_latency */
    g_stat_t ttft_ms;   /* time_to_first_token_ms */
    g_stat_t itl_ms;    /* inter_token_latency_ms: mean weighted by out - 1 */
    g_stat_t tpot_ms;   /* time_per_output_token_ms: mean weighted by out */
    g_stat_t out_tps;   /* output_tokens_per_second per request */
    g_stat_t prompt_tokens, output_tokens;
    double concurrency_mean; /* sum of latencies / duration (Little's law) */
} g_values_t;

/* Unweighted order statistics (numpy linear) and the plain mean of v[0..n). */
static void g_fill(double *v, int n, double *scratch, g_stat_t *s) {
    memset(s, 0, sizeof *s);
    if (n <= 0) return;
    double sum = 0, mx = v[0];
    for (int i = 0; i < n; i++) {
        sum += v[i];
        if (v[i] > mx) mx = v[i];
    }
    s->mean = sum / n;
    s->median = bench_percentile(v, n, 50, scratch);
    s->p95 = bench_percentile(v, n, 95, scratch);
    s->p99 = bench_percentile(v, n, 99, scratch);
    s->max = mx;
}

static int g_compute(const bench_result_t *r, g_values_t *g) {
    memset(g, 0, sizeof *g);
    int n = r->n_records;
    double *v = malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof *v);
    if (!v) return -1;
    double *scratch = v + (n > 0 ? n : 1);
    int k;
    double wsum, wden;

#define G_COLLECT(stat, cond, expr)                                                                \
    do {                                                                                           \
        k = 0;                                                                                     \
        for (int i = 0; i < n; i++) {                                                              \
            const bench_record_t *rec = &r->records[i];                                            \
            if (rec->success && (cond)) v[k++] = (expr);                                           \
        }                                                                                          \
        g_fill(v, k, scratch, &g->stat);                                                           \
    } while (0)

    G_COLLECT(latency_s, 1, rec->latency);
    g->n = k;
    double lat_sum = 0;
    for (int i = 0; i < k; i++)
        lat_sum += v[i];
    if (r->metrics.duration > 0) g->concurrency_mean = lat_sum / r->metrics.duration;
    G_COLLECT(ttft_ms, 1, rec->ttft * 1000.0);
    G_COLLECT(itl_ms, rec->output_len > 1,
              (rec->latency - rec->ttft) * 1000.0 / (rec->output_len - 1));
    G_COLLECT(tpot_ms, rec->output_len > 0, rec->latency * 1000.0 / rec->output_len);
    G_COLLECT(out_tps, rec->latency > 0, rec->output_len / rec->latency);
    G_COLLECT(prompt_tokens, 1, (double)rec->prompt_len);
    G_COLLECT(output_tokens, 1, (double)rec->output_len);
#undef G_COLLECT

    /* guidellm weights these two means by tokens: ITL by out - 1, TPOT by out. */
    wsum = wden = 0;
    for (int i = 0; i < n; i++) {
        const bench_record_t *rec = &r->records[i];
        if (rec->success && rec->output_len > 1) {
            wsum += (rec->latency - rec->ttft) * 1000.0;
            wden += rec->output_len - 1;
        }
    }
    g->itl_ms.mean = wden > 0 ? wsum / wden : 0;
    wsum = wden = 0;
    for (int i = 0; i < n; i++) {
        const bench_record_t *rec = &r->records[i];
        if (rec->success && rec->output_len > 0) {
            wsum += rec->latency * 1000.0;
            wden += rec->output_len;
        }
    }
    g->tpot_ms.mean = wden > 0 ? wsum / wden : 0;
    free(v);
    return 0;
}

/* A guidellm statistics table: its title and column header. */
static void g_header(FILE *f, const char *title) {
    fprintf(f, "%s\n| %-26s | %12s | %12s | %12s | %12s |\n", title, "Metric", "Mean", "Median",
            "P95", "P99");
}

static void g_row(FILE *f, const char *name, const g_stat_t *s) {
    fprintf(f, "| %-26s | %12.2f | %12.2f | %12.2f | %12.2f |\n", name, s->mean, s->median, s->p95,
            s->p99);
}

static void report_guidellm(FILE *f, const bench_result_t *r) {
    const bench_metrics_t *m = &r->metrics;
    g_values_t g;
    if (g_compute(r, &g) < 0) {
        fputs("report: out of memory\n", f);
        return;
    }
    int incomplete = r->stopped ? r->options.num_prompts - m->completed - m->failed : 0;
    if (incomplete < 0) incomplete = 0;
    fputs("Benchmarks Info (guidellm naming)\n", f);
    fprintf(f, "| %-26s | %-12s | %-12s | %-12s | %-12s |\n", "Requests", "Successful",
            "Incomplete", "Errored", "Total");
    fprintf(f, "| %-26s | %12d | %12d | %12d | %12d |\n", "count", m->completed, incomplete,
            m->failed, m->completed + incomplete + m->failed);
    fprintf(f, "Duration (s): %.2f\n\n", m->duration);

    g_header(f, "Request Token Statistics");
    g_row(f, "Input Tokens / Request", &g.prompt_tokens);
    g_row(f, "Output Tokens / Request", &g.output_tokens);
    fputc('\n', f);

    g_header(f, "Request Latency Statistics");
    g_row(f, "Request Latency (s)", &g.latency_s);
    g_row(f, "TTFT (ms)", &g.ttft_ms);
    g_row(f, "ITL (ms)", &g.itl_ms);
    g_row(f, "TPOT (ms)", &g.tpot_ms);
    fputs("ITL = (last - first token) / (out - 1) (vLLM's TPOT); TPOT = (last token - start) / out "
          "(includes TTFT).\n\n",
          f);

    fputs("Server Throughput Statistics\n", f);
    fprintf(f, "| %-26s | %12s | %12s |\n", "Metric", "Mean", "Max");
    fprintf(f, "| %-26s | %12.2f | %12.2f |\n", "Request Concurrency", g.concurrency_mean,
            m->max_concurrent_requests);
    fprintf(f, "| %-26s | %12.2f | %12s |\n", "Requests/s", m->request_throughput, "");
    fprintf(f, "| %-26s | %12.2f | %12s |\n", "Input Tokens/s",
            m->duration > 0 ? (double)m->total_input_tokens / m->duration : 0.0, "");
    fprintf(f, "| %-26s | %12.2f | %12.2f |\n", "Output Tokens/s", m->output_throughput,
            m->max_output_tokens_per_s);
    fprintf(f, "| %-26s | %12.2f | %12s |\n", "Total Tokens/s", m->total_token_throughput, "");
}

/* ---- GPUStack: perf_doc_common.render_benchmark_result_block's mapping ---- */

static void gs_block(FILE *f, const char *header, const char *name, const char *unit,
                     const g_stat_t *s) {
    if (header[0] == '-')
        fprintf(f, "%s\n", header);
    else
        rule(f, header, '-');
    row_fmt(f, s->mean, "Mean %s%s:", name, unit);
    row_fmt(f, s->median, "Median %s%s:", name, unit);
    row_fmt(f, s->p95, "P95 %s%s:", name, unit);
    row_fmt(f, s->p99, "P99 %s%s:", name, unit);
}

static void report_gpustack(FILE *f, const bench_result_t *r) {
    const bench_metrics_t *m = &r->metrics;
    g_values_t g;
    if (g_compute(r, &g) < 0) {
        fputs("report: out of memory\n", f);
        return;
    }
    rule(f, " Serving Benchmark Result ", '=');
    row_i(f, "Successful requests:", m->completed);
    row_i(f, "Maximum request concurrency:", (long long)m->max_concurrent_requests);
    row_f(f, "Benchmark duration (s):", m->duration);
    /* GPUStack multiplies guidellm's mean token counts by the successful requests. */
    row_i(f, "Total input tokens:", (long long)llround(g.prompt_tokens.mean * g.n));
    row_i(f, "Total generated tokens:", (long long)llround(g.output_tokens.mean * g.n));
    row_f(f, "Request throughput (req/s):", m->request_throughput);
    row_f(f, "Output token throughput (tok/s):", m->output_throughput);
    row_f(f, "Peak output token throughput (tok/s):", g.out_tps.max);
    row_f(f, "Peak concurrent requests:", m->max_concurrent_requests);
    row_f(f, "Total Token throughput (tok/s):", m->total_token_throughput);
    gs_block(f, "----------------------Latency---------------------", "Latency", "(s)",
             &g.latency_s);
    gs_block(f, "Time to First Token", "TTFT", " (ms)", &g.ttft_ms);
    gs_block(f, "Time per Output Token (excl. 1st token)", "TPOT", " (ms)", &g.tpot_ms);
    gs_block(f, "Inter-token Latency", "ITL", " (ms)", &g.itl_ms);
    rule(f, "", '=');
}

void bench_report_print(FILE *f, const bench_result_t *r, bench_report_style_t style) {
    if (!f || !r) return;
    preamble(f, r);
    switch (style) {
        case BENCH_REPORT_GUIDELLM:
            report_guidellm(f, r);
            break;
        case BENCH_REPORT_GPUSTACK:
            report_gpustack(f, r);
            break;
        default:
            report_vllm(f, r);
    }
}

/* ---- result JSON ---- */

static const char *metric_key(int i) {
    static const char *const keys[] = {"ttft", "tpot", "itl", "e2el"};
    return keys[i];
}

static bench_stat_t *metric_stat(bench_metrics_t *m, int i) {
    bench_stat_t *s[] = {&m->ttft, &m->tpot, &m->itl, &m->e2el};
    return s[i];
}

static const unsigned k_metric_bits[4] = {BENCH_METRIC_TTFT, BENCH_METRIC_TPOT, BENCH_METRIC_ITL,
                                          BENCH_METRIC_E2EL};

/* A double as Python's json writes it (float repr): the shortest digits that read back to the
 * same bits, positional for exponents -4 .. 15 with ".0" on whole numbers. cJSON's own printing
 * accepts 15 digits within an epsilon, which loses the last bit. */
static cJSON *json_double(double v) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char buf[48];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
    int exp10 = atoi(strchr(buf, 'e') + 1);
    if (exp10 >= -4 && exp10 < 16) {
        int dec = prec - 1 - exp10;
        snprintf(buf, sizeof buf, "%.*f", dec > 0 ? dec : 0, v);
        if (!strchr(buf, '.')) strcat(buf, ".0");
    }
    return cJSON_CreateRaw(buf);
}

static void add_double(cJSON *obj, const char *key, double v) {
    cJSON_AddItemToObject(obj, key, json_double(v));
}

/* Non-finite doubles are not JSON: vLLM writes "inf" for an unlimited rate. */
static cJSON *json_num_or_inf(double v) {
    return isinf(v) ? cJSON_CreateString("inf") : json_double(v);
}

static void percentile_metrics_str(unsigned sel, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < 4; i++)
        if (sel & k_metric_bits[i])
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? "," : "", metric_key(i));
}

static cJSON *result_to_json(const bench_result_t *r) {
    const bench_options_t *o = &r->options;
    bench_metrics_t m = r->metrics;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "date", r->date);
    cJSON_AddStringToObject(j, "endpoint_type", backend_name(o->backend));
    cJSON_AddStringToObject(j, "backend", backend_name(o->backend));
    cJSON_AddStringToObject(j, "label", o->label[0] ? o->label : backend_name(o->backend));
    cJSON_AddStringToObject(j, "model_id", o->model);
    cJSON_AddStringToObject(j, "tokenizer_id", o->model);
    cJSON_AddNumberToObject(j, "num_prompts", o->num_prompts);
    cJSON_AddItemToObject(j, "request_rate", json_num_or_inf(o->request_rate));
    cJSON_AddItemToObject(j, "burstiness", json_num_or_inf(o->burstiness));
    if (o->max_concurrency > 0)
        cJSON_AddNumberToObject(j, "max_concurrency", o->max_concurrency);
    else
        cJSON_AddNullToObject(j, "max_concurrency");
    add_double(j, "duration", m.duration);
    cJSON_AddNumberToObject(j, "completed", m.completed);
    cJSON_AddNumberToObject(j, "failed", m.failed);
    cJSON_AddNumberToObject(j, "total_input_tokens", (double)m.total_input_tokens);
    cJSON_AddNumberToObject(j, "total_output_tokens", (double)m.total_output_tokens);
    add_double(j, "request_throughput", m.request_throughput);
    if (o->goodput_ttft_ms > 0 || o->goodput_tpot_ms > 0 || o->goodput_e2el_ms > 0)
        add_double(j, "request_goodput", m.request_goodput);
    else
        cJSON_AddNullToObject(j, "request_goodput");
    add_double(j, "output_throughput", m.output_throughput);
    add_double(j, "total_token_throughput", m.total_token_throughput);

    cJSON *in = cJSON_AddArrayToObject(j, "input_lens");
    cJSON *out = cJSON_AddArrayToObject(j, "output_lens");
    cJSON *ttfts = cJSON_AddArrayToObject(j, "ttfts");
    cJSON *itls = cJSON_AddArrayToObject(j, "itls");
    cJSON *lats = cJSON_AddArrayToObject(j, "latencies");
    cJSON *starts = cJSON_AddArrayToObject(j, "start_times");
    cJSON *queues = cJSON_AddArrayToObject(j, "queue_times");
    cJSON *errors = cJSON_AddArrayToObject(j, "errors");
    for (int i = 0; i < r->n_records; i++) {
        const bench_record_t *rec = &r->records[i];
        cJSON_AddItemToArray(in, cJSON_CreateNumber(rec->prompt_len));
        cJSON_AddItemToArray(out, cJSON_CreateNumber(rec->success ? rec->output_len : 0));
        cJSON_AddItemToArray(ttfts, json_double(rec->ttft));
        cJSON *gaps = cJSON_CreateArray();
        for (int k = 0; k < rec->n_itl; k++)
            cJSON_AddItemToArray(gaps, json_double(rec->itl[k]));
        cJSON_AddItemToArray(itls, gaps);
        cJSON_AddItemToArray(lats, json_double(rec->latency));
        cJSON_AddItemToArray(starts, json_double(rec->start_time));
        cJSON_AddItemToArray(queues, json_double(rec->client_queue_time));
        /* vLLM's error is "" on success; a failure always says something. */
        const char *e = rec->success ? "" : (rec->error[0] ? rec->error : "failed");
        cJSON_AddItemToArray(errors, cJSON_CreateString(e));
    }
    add_double(j, "max_output_tokens_per_s", m.max_output_tokens_per_s);
    add_double(j, "max_concurrent_requests", m.max_concurrent_requests);
    for (int i = 0; i < 4; i++) {
        if (!(o->percentile_metrics & k_metric_bits[i])) continue;
        const bench_stat_t *s = metric_stat(&m, i);
        char key[64], pw[32];
        snprintf(key, sizeof key, "mean_%s_ms", metric_key(i));
        add_double(j, key, s->mean);
        snprintf(key, sizeof key, "median_%s_ms", metric_key(i));
        add_double(j, key, s->median);
        snprintf(key, sizeof key, "std_%s_ms", metric_key(i));
        add_double(j, key, s->std);
        for (int k = 0; k < m.n_percentiles; k++) {
            pct_word(m.percentile_points[k], pw, sizeof pw);
            snprintf(key, sizeof key, "p%s_%s_ms", pw, metric_key(i));
            add_double(j, key, s->percentiles[k]);
        }
    }

    /* Tachyon's additions. */
    cJSON_AddStringToObject(j, "profile", o->profile);
    cJSON_AddBoolToObject(j, "synthetic_dataset", r->synthetic_dataset);
    cJSON_AddBoolToObject(j, "stopped", r->stopped);
    if (r->server_flags_json[0]) {
        cJSON *flags = cJSON_Parse(r->server_flags_json);
        if (flags)
            cJSON_AddItemToObject(j, "server_flags", flags);
        else
            cJSON_AddStringToObject(j, "server_flags", r->server_flags_json);
    }
    cJSON *opt = cJSON_AddObjectToObject(j, "options");
    cJSON_AddStringToObject(opt, "base_url", o->base_url);
    cJSON_AddStringToObject(opt, "endpoint", o->endpoint);
    cJSON_AddStringToObject(opt, "dataset_name", dataset_name(o->dataset));
    cJSON_AddStringToObject(opt, "dataset_path", o->dataset_path);
    cJSON_AddNumberToObject(opt, "input_len", o->input_len);
    cJSON_AddNumberToObject(opt, "output_len", o->output_len);
    add_double(opt, "range_ratio", o->range_ratio);
    cJSON_AddNumberToObject(opt, "prefix_len", o->prefix_len);
    cJSON_AddBoolToObject(opt, "ignore_eos", o->ignore_eos);
    cJSON_AddNumberToObject(opt, "seed", (double)o->seed);
    cJSON_AddNumberToObject(opt, "num_warmups", o->num_warmups);
    char sel[64];
    percentile_metrics_str(o->percentile_metrics, sel, sizeof sel);
    cJSON_AddStringToObject(opt, "percentile_metrics", sel);
    cJSON *pts = cJSON_AddArrayToObject(opt, "metric_percentiles");
    for (int k = 0; k < o->n_metric_percentiles; k++)
        cJSON_AddItemToArray(pts, json_double(o->metric_percentiles[k]));
    add_double(opt, "goodput_ttft_ms", o->goodput_ttft_ms);
    add_double(opt, "goodput_tpot_ms", o->goodput_tpot_ms);
    add_double(opt, "goodput_e2el_ms", o->goodput_e2el_ms);
    cJSON_AddStringToObject(opt, "extra_body", o->extra_body);
    return j;
}

int bench_result_save_json(const bench_result_t *r, const char *path, bench_err_t *err) {
    if (!r || !path) return bench_err_set(err, "bench_result_save_json: bad arguments");
    cJSON *j = result_to_json(r);
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!text) return bench_err_set(err, "%s: out of memory building the result", path);
    FILE *f = fopen(path, "w");
    if (!f) {
        free(text);
        return bench_err_set(err, "%s: cannot create", path);
    }
    size_t len = strlen(text);
    bool ok = fwrite(text, 1, len, f) == len && fputc('\n', f) != EOF;
    ok = (fclose(f) == 0) && ok;
    free(text);
    return ok ? 0 : bench_err_set(err, "%s: write failed", path);
}

/* ---- loading ---- */

static double get_num(const cJSON *j, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (cJSON_IsNumber(v)) return v->valuedouble;
    if (cJSON_IsString(v) && strcmp(v->valuestring, "inf") == 0) return INFINITY;
    return dflt;
}

static void get_str(const cJSON *j, const char *key, char *dst, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (cJSON_IsString(v)) snprintf(dst, cap, "%s", v->valuestring);
}

static bool get_bool(const cJSON *j, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, key));
}

/* Which of the mean_*_ms keys are present tells which metrics the run selected. */
static void load_metrics(const cJSON *j, bench_result_t *r) {
    bench_metrics_t *m = &r->metrics;
    bench_options_t *o = &r->options;
    m->duration = get_num(j, "duration", 0);
    m->completed = (int)get_num(j, "completed", 0);
    m->failed = (int)get_num(j, "failed", 0);
    m->total_input_tokens = (int64_t)get_num(j, "total_input_tokens", 0);
    m->total_output_tokens = (int64_t)get_num(j, "total_output_tokens", 0);
    m->request_throughput = get_num(j, "request_throughput", 0);
    m->request_goodput = get_num(j, "request_goodput", 0);
    m->output_throughput = get_num(j, "output_throughput", 0);
    m->total_token_throughput = get_num(j, "total_token_throughput", 0);
    m->max_output_tokens_per_s = get_num(j, "max_output_tokens_per_s", 0);
    m->max_concurrent_requests = get_num(j, "max_concurrent_requests", 0);
    m->n_percentiles = o->n_metric_percentiles;
    memcpy(m->percentile_points, o->metric_percentiles, sizeof m->percentile_points);
    unsigned found = 0;
    for (int i = 0; i < 4; i++) {
        char key[64], pw[32];
        bench_stat_t *s = metric_stat(m, i);
        snprintf(key, sizeof key, "mean_%s_ms", metric_key(i));
        if (!cJSON_GetObjectItemCaseSensitive(j, key)) continue;
        found |= k_metric_bits[i];
        s->mean = get_num(j, key, 0);
        snprintf(key, sizeof key, "median_%s_ms", metric_key(i));
        s->median = get_num(j, key, 0);
        snprintf(key, sizeof key, "std_%s_ms", metric_key(i));
        s->std = get_num(j, key, 0);
        for (int k = 0; k < m->n_percentiles; k++) {
            pct_word(m->percentile_points[k], pw, sizeof pw);
            snprintf(key, sizeof key, "p%s_%s_ms", pw, metric_key(i));
            s->percentiles[k] = get_num(j, key, 0);
        }
    }
    o->percentile_metrics = found;
}

/* vLLM files name their percentiles only in keys: collect the pXX of mean_ttft_ms's metric. */
static void infer_percentiles(const cJSON *j, bench_options_t *o) {
    const cJSON *it;
    o->n_metric_percentiles = 0;
    cJSON_ArrayForEach(it, j) {
        const char *k = it->string;
        size_t len = k ? strlen(k) : 0;
        if (len < 5 || k[0] != 'p' || o->n_metric_percentiles >= BENCH_MAX_PERCENTILES) continue;
        char *end;
        double p = strtod(k + 1, &end);
        if (end == k + 1) continue;
        const char *metric = NULL;
        for (int i = 0; i < 4 && !metric; i++) {
            char suffix[16];
            snprintf(suffix, sizeof suffix, "_%s_ms", metric_key(i));
            if (strcmp(end, suffix) == 0) metric = metric_key(i);
        }
        if (!metric) continue;
        bool dup = false;
        for (int q = 0; q < o->n_metric_percentiles; q++)
            dup |= o->metric_percentiles[q] == p;
        if (!dup) o->metric_percentiles[o->n_metric_percentiles++] = p;
    }
}

static void load_options(const cJSON *j, bench_options_t *o) {
    char s[64] = "";
    get_str(j, "backend", s, sizeof s);
    o->backend = strcmp(s, "openai-chat") == 0 ? BENCH_BACKEND_OPENAI_CHAT : BENCH_BACKEND_OPENAI;
    get_str(j, "model_id", o->model, sizeof o->model);
    get_str(j, "label", o->label, sizeof o->label);
    get_str(j, "profile", o->profile, sizeof o->profile);
    o->num_prompts = (int)get_num(j, "num_prompts", 0);
    o->request_rate = get_num(j, "request_rate", INFINITY);
    o->burstiness = get_num(j, "burstiness", 1.0);
    o->max_concurrency = (int)get_num(j, "max_concurrency", 0);
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(j, "options");
    const cJSON *pts = cJSON_GetObjectItemCaseSensitive(opt, "metric_percentiles");
    if (cJSON_IsArray(pts)) {
        o->n_metric_percentiles = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, pts) {
            if (cJSON_IsNumber(p) && o->n_metric_percentiles < BENCH_MAX_PERCENTILES)
                o->metric_percentiles[o->n_metric_percentiles++] = p->valuedouble;
        }
    } else {
        infer_percentiles(j, o);
    }
    if (!opt) return;
    get_str(opt, "base_url", o->base_url, sizeof o->base_url);
    get_str(opt, "endpoint", o->endpoint, sizeof o->endpoint);
    s[0] = '\0';
    get_str(opt, "dataset_name", s, sizeof s);
    o->dataset = strcmp(s, "sharegpt") == 0             ? BENCH_DATASET_SHAREGPT
                 : strcmp(s, "sharegpt-synthetic") == 0 ? BENCH_DATASET_SHAREGPT_SYNTHETIC
                                                        : BENCH_DATASET_RANDOM;
    get_str(opt, "dataset_path", o->dataset_path, sizeof o->dataset_path);
    o->input_len = (int)get_num(opt, "input_len", o->input_len);
    o->output_len = (int)get_num(opt, "output_len", o->output_len);
    o->range_ratio = get_num(opt, "range_ratio", o->range_ratio);
    o->prefix_len = (int)get_num(opt, "prefix_len", o->prefix_len);
    o->ignore_eos = get_bool(opt, "ignore_eos");
    o->seed = (uint64_t)get_num(opt, "seed", 0);
    o->num_warmups = (int)get_num(opt, "num_warmups", 0);
    o->goodput_ttft_ms = get_num(opt, "goodput_ttft_ms", 0);
    o->goodput_tpot_ms = get_num(opt, "goodput_tpot_ms", 0);
    o->goodput_e2el_ms = get_num(opt, "goodput_e2el_ms", 0);
    get_str(opt, "extra_body", o->extra_body, sizeof o->extra_body);
}

static double arr_num(const cJSON *a, int i) {
    const cJSON *v = cJSON_GetArrayItem(a, i);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

/* Rebuilds the records when the per-request arrays are there (Tachyon's files, vLLM's with
 * --save-detailed); success is vLLM's empty error string. */
static int load_records(const cJSON *j, bench_result_t *r, bench_err_t *err, const char *path) {
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "input_lens");
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(j, "output_lens");
    const cJSON *ttfts = cJSON_GetObjectItemCaseSensitive(j, "ttfts");
    const cJSON *itls = cJSON_GetObjectItemCaseSensitive(j, "itls");
    const cJSON *lats = cJSON_GetObjectItemCaseSensitive(j, "latencies");
    const cJSON *starts = cJSON_GetObjectItemCaseSensitive(j, "start_times");
    const cJSON *queues = cJSON_GetObjectItemCaseSensitive(j, "queue_times");
    const cJSON *errors = cJSON_GetObjectItemCaseSensitive(j, "errors");
    if (!cJSON_IsArray(in) || !cJSON_IsArray(out) || !cJSON_IsArray(ttfts) ||
        !cJSON_IsArray(itls) || !cJSON_IsArray(lats) || !cJSON_IsArray(starts) ||
        !cJSON_IsArray(errors))
        return 0;
    int n = cJSON_GetArraySize(in);
    if (cJSON_GetArraySize(out) != n || cJSON_GetArraySize(ttfts) != n ||
        cJSON_GetArraySize(itls) != n || cJSON_GetArraySize(lats) != n ||
        cJSON_GetArraySize(starts) != n || cJSON_GetArraySize(errors) != n)
        return bench_err_set(err, "%s: per-request arrays of different lengths", path);
    if (n == 0) return 0;
    r->records = calloc((size_t)n, sizeof *r->records);
    if (!r->records) return bench_err_set(err, "%s: out of memory", path);
    r->n_records = n;
    for (int i = 0; i < n; i++) {
        bench_record_t *rec = &r->records[i];
        const cJSON *e = cJSON_GetArrayItem(errors, i);
        const char *es = cJSON_IsString(e) ? e->valuestring : "";
        rec->success = es[0] == '\0';
        snprintf(rec->error, sizeof rec->error, "%s", es);
        rec->prompt_len = (int)arr_num(in, i);
        rec->output_len = (int)arr_num(out, i);
        rec->ttft = arr_num(ttfts, i);
        rec->latency = arr_num(lats, i);
        rec->start_time = arr_num(starts, i);
        rec->client_queue_time = cJSON_IsArray(queues) ? arr_num(queues, i) : 0.0;
        const cJSON *gaps = cJSON_GetArrayItem(itls, i);
        int ng = cJSON_IsArray(gaps) ? cJSON_GetArraySize(gaps) : 0;
        if (ng > 0) {
            rec->itl = malloc((size_t)ng * sizeof *rec->itl);
            if (!rec->itl) return bench_err_set(err, "%s: out of memory", path);
            for (int k = 0; k < ng; k++)
                rec->itl[k] = arr_num(gaps, k);
            rec->n_itl = ng;
        }
    }
    return 0;
}

static void free_partial(bench_result_t *r) {
    for (int i = 0; i < r->n_records; i++)
        free(r->records[i].itl);
    free(r->records);
    free(r);
}

int bench_result_load_json(const char *path, bench_result_t **out, bench_err_t *err) {
    if (out) *out = NULL;
    if (!path || !out) return bench_err_set(err, "bench_result_load_json: bad arguments");
    FILE *f = fopen(path, "rb");
    if (!f) return bench_err_set(err, "%s: cannot open", path);
    char *text = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        text = malloc((size_t)size + 1);
        if (text && fread(text, 1, (size_t)size, f) == (size_t)size)
            text[size] = '\0';
        else {
            free(text);
            text = NULL;
        }
    }
    fclose(f);
    if (!text) return bench_err_set(err, "%s: cannot read", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return bench_err_set(err, "%s: not a benchmark result (JSON object expected)", path);
    }
    if (!cJSON_GetObjectItemCaseSensitive(j, "completed") ||
        !cJSON_GetObjectItemCaseSensitive(j, "duration")) {
        cJSON_Delete(j);
        return bench_err_set(err, "%s: not a benchmark result (no completed / duration)", path);
    }
    bench_result_t *r = calloc(1, sizeof *r);
    if (!r) {
        cJSON_Delete(j);
        return bench_err_set(err, "%s: out of memory", path);
    }
    bench_options_default(&r->options);
    load_options(j, &r->options);
    load_metrics(j, r);
    get_str(j, "date", r->date, sizeof r->date);
    r->stopped = get_bool(j, "stopped");
    r->synthetic_dataset = get_bool(j, "synthetic_dataset");
    const cJSON *flags = cJSON_GetObjectItemCaseSensitive(j, "server_flags");
    if (cJSON_IsObject(flags)) {
        char *s = cJSON_PrintUnformatted(flags);
        if (s && strlen(s) < sizeof r->server_flags_json)
            memcpy(r->server_flags_json, s, strlen(s) + 1);
        free(s);
    } else if (cJSON_IsString(flags)) {
        snprintf(r->server_flags_json, sizeof r->server_flags_json, "%s", flags->valuestring);
    }
    int rc = load_records(j, r, err, path);
    cJSON_Delete(j);
    if (rc < 0) {
        free_partial(r);
        return -1;
    }
    *out = r;
    return 0;
}

/*
 * bench compare: the seed reports' before/after table. The seeds show each benchmark case as
 * "Total TPS: 6595.66 | Total TPS: 10426.27 (+58.1%)" with the Mean TPOT beside it, and a
 * summary "`A` is faster by X tok/s (Y%); Mean TPOT = a ms vs b ms, reduced by c ms (d%)".
 * Here every metric gets a row: baseline, then each run with its signed change and whether that
 * change is better or worse for the metric; the runs are described above the table by label,
 * profile, date and the server flags that differ from the baseline's. A metric one side does
 * not have (the latencies of a run without a successful request, where the metrics hold zeros,
 * or a percentile point the run did not compute) is n/a, never a change: a run whose requests all
 * failed is not "-100% better" on latency.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bench.h"

typedef enum { BETTER_HIGHER, BETTER_LOWER, BETTER_NONE } better_t;

typedef struct cmp_row {
    char name[64];
    better_t better;
    bool integer; /* a count: printed without decimals */
    double base;
    double run[64];
} cmp_row_t;

#define CMP_MAX_RUNS 64
#define CMP_MAX_ROWS 64

static void describe(FILE *f, const char *tag, const bench_result_t *r) {
    const bench_options_t *o = &r->options;
    fprintf(f, "  %-6s %s", tag, o->label[0] ? o->label : (o->model[0] ? o->model : "run"));
    if (o->profile[0]) fprintf(f, "  profile %s", o->profile);
    if (r->date[0]) fprintf(f, "  %s", r->date);
    if (r->synthetic_dataset) fputs("  [synthetic dataset]", f);
    if (r->stopped) fputs("  [stopped early]", f);
    fputc('\n', f);
}

static void value_str(const cJSON *v, char *buf, size_t cap) {
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    snprintf(buf, cap, "%s", s ? s : "unset");
    free(s);
}

int bench_flags_diff(const bench_result_t *base, const bench_result_t *run, bench_flag_diff_fn fn,
                     void *user) {
    if (!base->server_flags_json[0] || !run->server_flags_json[0]) return -1;
    cJSON *b = cJSON_Parse(base->server_flags_json);
    cJSON *r = cJSON_Parse(run->server_flags_json);
    int shown = -1;
    if (b && r) {
        shown = 0;
        const cJSON *it;
        char vr[128], vb[128];
        cJSON_ArrayForEach(it, r) {
            const cJSON *bv = cJSON_GetObjectItemCaseSensitive(b, it->string);
            if (bv && cJSON_Compare(bv, it, true)) continue;
            value_str(it, vr, sizeof vr);
            value_str(bv, vb, sizeof vb);
            fn(user, it->string, vr, vb);
            shown++;
        }
        cJSON_ArrayForEach(it, b) {
            if (cJSON_GetObjectItemCaseSensitive(r, it->string)) continue;
            value_str(it, vb, sizeof vb);
            fn(user, it->string, "unset", vb);
            shown++;
        }
    }
    cJSON_Delete(b);
    cJSON_Delete(r);
    return shown;
}

typedef struct flag_line {
    FILE *f;
    int n;
} flag_line_t;

static void print_flag(void *user, const char *name, const char *run, const char *base) {
    flag_line_t *l = user;
    fprintf(l->f, "%s%s%s%s (base %s)", l->n++ ? ", " : "         flags: ", name,
            strcmp(run, "unset") ? "=" : " ", run, base);
}

/* "flags: a=1 (base 2), b unset (base true)" for the keys whose values differ. */
static void flag_diff(FILE *f, const bench_result_t *base, const bench_result_t *run) {
    if (!base->server_flags_json[0] && !run->server_flags_json[0]) return;
    flag_line_t l = {f, 0};
    int n = bench_flags_diff(base, run, print_flag, &l);
    if (n > 0)
        fputc('\n', f);
    else if (n == 0)
        fputs("         flags: same as base\n", f);
}

static int add_row(cmp_row_t *rows, int n, const char *name, better_t better) {
    if (n >= CMP_MAX_ROWS) return n;
    memset(&rows[n], 0, sizeof rows[n]);
    snprintf(rows[n].name, sizeof rows[n].name, "%s", name);
    rows[n].better = better;
    rows[n].integer = strstr(name, "tokens") != NULL && strstr(name, "tok/s") == NULL;
    rows[n].integer |= strstr(name, "requests") != NULL && strstr(name, "Peak") == NULL;
    return n + 1;
}

/* The metric values in row order (NAN where r does not have the metric); rows is filled once
 * from the baseline's selection. */
static int fill(const bench_result_t *r, const bench_result_t *base, cmp_row_t *rows, int col) {
    const bench_metrics_t *m = &r->metrics;
    /* vLLM's metrics count an empty latency list as [0]: no success means no latency at all */
    bool latencies = m->completed > 0;
    const bench_options_t *bo = &base->options;
    double v[CMP_MAX_ROWS];
    int n = 0;
    v[n++] = m->total_token_throughput;
    v[n++] = m->output_throughput;
    v[n++] = m->request_throughput;
    if (bo->goodput_ttft_ms > 0 || bo->goodput_tpot_ms > 0 || bo->goodput_e2el_ms > 0)
        v[n++] = m->request_goodput;
    v[n++] = m->max_output_tokens_per_s;
    v[n++] = m->max_concurrent_requests;
    v[n++] = m->duration;
    v[n++] = m->completed;
    v[n++] = m->failed;
    v[n++] = (double)m->total_input_tokens;
    v[n++] = (double)m->total_output_tokens;
    const bench_stat_t *stats[4] = {&m->ttft, &m->tpot, &m->itl, &m->e2el};
    const unsigned bits[4] = {BENCH_METRIC_TTFT, BENCH_METRIC_TPOT, BENCH_METRIC_ITL,
                              BENCH_METRIC_E2EL};
    for (int i = 0; i < 4; i++) {
        if (!(bo->percentile_metrics & bits[i])) continue;
        v[n++] = latencies ? stats[i]->mean : NAN;
        v[n++] = latencies ? stats[i]->median : NAN;
        for (int k = 0; k < base->metrics.n_percentiles; k++) {
            double pv = NAN;
            /* A run may have other percentile points: only the same point compares. */
            for (int q = 0; q < m->n_percentiles && latencies; q++)
                if (m->percentile_points[q] == base->metrics.percentile_points[k])
                    pv = stats[i]->percentiles[q];
            v[n++] = pv;
        }
    }
    for (int i = 0; i < n; i++) {
        if (col < 0)
            rows[i].base = v[i];
        else
            rows[i].run[col] = v[i];
    }
    return n;
}

static int build_rows(const bench_result_t *base, cmp_row_t *rows) {
    const bench_options_t *bo = &base->options;
    int n = 0;
    n = add_row(rows, n, "Total token throughput (tok/s)", BETTER_HIGHER);
    n = add_row(rows, n, "Output token throughput (tok/s)", BETTER_HIGHER);
    n = add_row(rows, n, "Request throughput (req/s)", BETTER_HIGHER);
    if (bo->goodput_ttft_ms > 0 || bo->goodput_tpot_ms > 0 || bo->goodput_e2el_ms > 0)
        n = add_row(rows, n, "Request goodput (req/s)", BETTER_HIGHER);
    n = add_row(rows, n, "Peak output token throughput (tok/s)", BETTER_HIGHER);
    n = add_row(rows, n, "Peak concurrent requests", BETTER_NONE);
    n = add_row(rows, n, "Benchmark duration (s)", BETTER_LOWER);
    n = add_row(rows, n, "Successful requests", BETTER_HIGHER);
    n = add_row(rows, n, "Failed requests", BETTER_LOWER);
    n = add_row(rows, n, "Total input tokens", BETTER_NONE);
    n = add_row(rows, n, "Total generated tokens", BETTER_NONE);
    static const char *const names[4] = {"TTFT", "TPOT", "ITL", "E2EL"};
    const unsigned bits[4] = {BENCH_METRIC_TTFT, BENCH_METRIC_TPOT, BENCH_METRIC_ITL,
                              BENCH_METRIC_E2EL};
    char label[64], pw[32];
    for (int i = 0; i < 4; i++) {
        if (!(bo->percentile_metrics & bits[i])) continue;
        snprintf(label, sizeof label, "Mean %s (ms)", names[i]);
        n = add_row(rows, n, label, BETTER_LOWER);
        snprintf(label, sizeof label, "Median %s (ms)", names[i]);
        n = add_row(rows, n, label, BETTER_LOWER);
        for (int k = 0; k < base->metrics.n_percentiles; k++) {
            double p = base->metrics.percentile_points[k];
            if (p == floor(p))
                snprintf(pw, sizeof pw, "%lld", (long long)p);
            else
                snprintf(pw, sizeof pw, "%g", p);
            snprintf(label, sizeof label, "P%s %s (ms)", pw, names[i]);
            n = add_row(rows, n, label, BETTER_LOWER);
        }
    }
    return n;
}

/* "+58.08% better", "-3.10% worse", "+0.00%" (no change or no direction), "n/a" (base 0, or
 * either side absent). */
static void delta_str(double base, double run, better_t better, char *buf, size_t cap) {
    if (isnan(base) || isnan(run)) {
        snprintf(buf, cap, "n/a");
        return;
    }
    if (base == 0) {
        snprintf(buf, cap, "%s", run == 0 ? "+0.00%" : "n/a");
        return;
    }
    double d = (run - base) / fabs(base) * 100.0;
    const char *verdict = "";
    if (d != 0 && better != BETTER_NONE)
        verdict = ((d > 0) == (better == BETTER_HIGHER)) ? " better" : " worse";
    snprintf(buf, cap, "%+.2f%%%s", d, verdict);
}

/* A value in a column of width 12: the number, or n/a when absent. */
static void print_value(FILE *f, double v, int prec) {
    if (isnan(v))
        fprintf(f, " %12s |", "n/a");
    else
        fprintf(f, " %12.*f |", prec, v);
}

void bench_compare_print(FILE *f, const bench_result_t *base, const bench_result_t *const *runs,
                         int n_runs) {
    if (!f || !base || n_runs < 0 || (n_runs > 0 && !runs)) return;
    if (n_runs > CMP_MAX_RUNS) n_runs = CMP_MAX_RUNS;
    cmp_row_t *rows = calloc(CMP_MAX_ROWS, sizeof *rows);
    if (!rows) {
        fputs("compare: out of memory\n", f);
        return;
    }
    int n = build_rows(base, rows);
    fill(base, base, rows, -1);
    for (int c = 0; c < n_runs; c++)
        fill(runs[c], base, rows, c);

    fputs("Runs:\n", f);
    describe(f, "base", base);
    char tag[16];
    for (int c = 0; c < n_runs; c++) {
        snprintf(tag, sizeof tag, "run%d", c + 1);
        describe(f, tag, runs[c]);
        flag_diff(f, base, runs[c]);
    }
    fputc('\n', f);

    fprintf(f, "| %-38s | %-6s | %12s |", "Metric", "Better", "base");
    for (int c = 0; c < n_runs; c++) {
        snprintf(tag, sizeof tag, "run%d", c + 1);
        fprintf(f, " %12s | %-15s |", tag, "change");
    }
    fputc('\n', f);
    fprintf(f, "|%.40s|%.8s|%.14s|", "----------------------------------------", "--------",
            "--------------");
    for (int c = 0; c < n_runs; c++)
        fprintf(f, "%.14s|%.17s|", "--------------", "-----------------");
    fputc('\n', f);
    static const char *const better_names[] = {"higher", "lower", "-"};
    char d[48];
    for (int i = 0; i < n; i++) {
        int prec = rows[i].integer ? 0 : 2;
        fprintf(f, "| %-38s | %-6s |", rows[i].name, better_names[rows[i].better]);
        print_value(f, rows[i].base, prec);
        for (int c = 0; c < n_runs; c++) {
            delta_str(rows[i].base, rows[i].run[c], rows[i].better, d, sizeof d);
            print_value(f, rows[i].run[c], prec);
            fprintf(f, " %-15s |", d);
        }
        fputc('\n', f);
    }

    /* The seeds' one-line summary per run: total throughput and mean TPOT. */
    const bench_metrics_t *bm = &base->metrics;
    for (int c = 0; c < n_runs; c++) {
        const bench_metrics_t *rm = &runs[c]->metrics;
        double dt = rm->total_token_throughput - bm->total_token_throughput;
        double pt =
            bm->total_token_throughput > 0 ? fabs(dt) / bm->total_token_throughput * 100 : 0;
        fprintf(f, "run%d: Total TPS = %.2f vs base %.2f, %s by %.2f tok/s (%.2f%%); ", c + 1,
                rm->total_token_throughput, bm->total_token_throughput,
                dt >= 0 ? "faster" : "slower", fabs(dt), pt);
        if (rm->completed == 0 || bm->completed == 0) {
            fputs("Mean TPOT n/a (no successful requests)\n", f);
            continue;
        }
        double dp = rm->tpot.mean - bm->tpot.mean;
        double pp = bm->tpot.mean > 0 ? fabs(dp) / bm->tpot.mean * 100 : 0;
        fprintf(f, "Mean TPOT = %.2f ms vs %.2f ms, %s by %.2f ms (%.2f%%)\n", rm->tpot.mean,
                bm->tpot.mean, dp <= 0 ? "reduced" : "increased", fabs(dp), pp);
    }
    free(rows);
}

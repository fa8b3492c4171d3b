/*
 * bench compare: the seeds' before/after table: signed changes, better / worse per metric
 * direction, aligned columns, run descriptions with the server flags that differ, and the
 * seeds' one-line summary (numbers from seed 001: vLLM 6595.66 vs SGLang FP8 10426.27 tok/s);
 * a metric one side does not have (latencies of a run without a successful request, a
 * percentile point the run did not compute) is n/a, never a change.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bench.h"

static void make(bench_result_t *r, const char *label, double tps, double tpot_mean,
                 const char *flags) {
    memset(r, 0, sizeof *r);
    bench_options_default(&r->options);
    snprintf(r->options.label, sizeof r->options.label, "%s", label);
    snprintf(r->options.profile, sizeof r->options.profile, "sharegpt");
    snprintf(r->date, sizeof r->date, "20261121-0315%02d", (int)strlen(label));
    snprintf(r->server_flags_json, sizeof r->server_flags_json, "%s", flags);
    bench_metrics_t *m = &r->metrics;
    m->completed = 1000;
    m->duration = 40.0;
    m->total_token_throughput = tps;
    m->output_throughput = tps / 2;
    m->request_throughput = 20;
    m->tpot.mean = tpot_mean;
    m->ttft.mean = 7000;
    m->n_percentiles = 1;
    m->percentile_points[0] = 99;
}

static char *compare(const bench_result_t *base, const bench_result_t *const *runs, int n) {
    /* static: GCC 12 at -O3 otherwise takes the returned text for a pointer to this frame */
    static char *buf;
    static size_t len;
    buf = NULL;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    bench_compare_print(f, base, runs, n);
    fclose(f);
    return buf;
}

/* The line of the table whose metric is name. */
static const char *row(const char *text, const char *name) {
    char key[80];
    snprintf(key, sizeof key, "| %s ", name);
    const char *p = strstr(text, key);
    if (!p) fail_msg("no row %s in\n%s", name, text);
    return p;
}

static void test_table(void **state) {
    (void)state;
    bench_result_t base, run1, run2;
    make(&base, "vllm", 6595.66, 226.03, "{\"max-num-seqs\":256,\"kv-cache-dtype\":\"auto\"}");
    make(&run1, "sglang-fp8", 10426.27, 251.67,
         "{\"max-num-seqs\":512,\"kv-cache-dtype\":\"auto\",\"enable-prefix-caching\":true}");
    make(&run2, "slow", 3297.83, 100.0, "{\"max-num-seqs\":256,\"kv-cache-dtype\":\"auto\"}");
    run2.metrics.failed = 3;
    const bench_result_t *runs[] = {&run1, &run2};
    char *t = compare(&base, runs, 2);

    const char *r = row(t, "Total token throughput (tok/s)");
    assert_non_null(strstr(r, "| higher |      6595.66 |     10426.27 | +58.08% better  |"));
    assert_non_null(strstr(r, "|      3297.83 | -50.00% worse   |"));
    r = row(t, "Mean TPOT (ms)");
    assert_non_null(strstr(r, "| lower  |       226.03 |       251.67 | +11.34% worse   |"));
    assert_non_null(strstr(r, "|       100.00 | -55.76% better  |"));
    r = row(t, "Failed requests");
    assert_non_null(strstr(r, "+0.00%"));
    assert_non_null(strstr(r, "| n/a             |"));
    assert_non_null(row(t, "P99 ITL (ms)"));
    assert_null(strstr(t, "E2EL")); /* not selected by the baseline */

    /* Runs described, with only the flags that differ. */
    assert_non_null(strstr(t, "base   vllm  profile sharegpt  20261121-031504\n"));
    assert_non_null(strstr(t, "run1   sglang-fp8  profile sharegpt"));
    assert_non_null(strstr(t, "flags: max-num-seqs=512 (base 256), enable-prefix-caching=true "
                              "(base unset)\n"));
    assert_null(strstr(t, "kv-cache-dtype="));
    assert_non_null(strstr(t, "flags: same as base\n"));

    /* Every table line has the same width. */
    size_t width = 0;
    int lines = 0;
    for (const char *p = strstr(t, "| Metric"); p && *p == '|'; lines++) {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl);
        if (!width) width = (size_t)(nl - p);
        assert_int_equal((size_t)(nl - p), width);
        p = nl + 1;
    }
    assert_true(lines > 15);

    assert_non_null(strstr(t, "run1: Total TPS = 10426.27 vs base 6595.66, faster by 3830.61 tok/s "
                              "(58.08%); Mean TPOT = 251.67 ms vs 226.03 ms, increased by 25.64 ms "
                              "(11.34%)\n"));
    assert_non_null(strstr(t, "run2: Total TPS = 3297.83 vs base 6595.66, slower by 3297.83 tok/s "
                              "(50.00%); Mean TPOT = 100.00 ms vs 226.03 ms, reduced by 126.03 ms "
                              "(55.76%)\n"));
    free(t);

    /* No runs: the baseline alone; no flags at all: no flags line. */
    base.server_flags_json[0] = '\0';
    t = compare(&base, NULL, 0);
    assert_non_null(strstr(t, "6595.66"));
    assert_null(strstr(t, "flags:"));
    free(t);
}

/* A run whose requests all failed has no latencies: its latency rows say n/a on both the value
 * and the change (not "-100.00% better"), and so does the summary's TPOT; a percentile point the
 * run lacks is n/a too. Its throughputs are measured zeros and compare as such. */
static void test_absent_metrics(void **state) {
    (void)state;
    bench_result_t base, none, other;
    make(&base, "base", 6595.66, 226.03, "");
    make(&none, "none", 0, 0, "");
    none.metrics.completed = 0;
    none.metrics.failed = 1000;
    none.metrics.ttft.mean = 0;
    make(&other, "other", 6000, 200, "");
    other.metrics.percentile_points[0] = 90; /* not the base's P99 */
    const bench_result_t *runs[] = {&none, &other};
    char *t = compare(&base, runs, 2);
    const char *names[] = {"Mean TTFT (ms)", "Median TTFT (ms)", "P99 TTFT (ms)", "Mean TPOT (ms)",
                           "P99 ITL (ms)"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *r = row(t, names[i]);
        const char *end = strchr(r, '\n');
        char line[256];
        snprintf(line, sizeof line, "%.*s", (int)(end - r), r);
        assert_null(strstr(line, "-100.00%"));
        assert_non_null(strstr(line, "|          n/a | n/a             |"));
    }
    /* the other run has P99 values missing, its means are there */
    assert_non_null(strstr(row(t, "P99 TTFT (ms)"), "n/a             |          n/a | n/a"));
    assert_non_null(strstr(row(t, "Mean TPOT (ms)"), "200.00 | -11.52% better"));
    assert_non_null(strstr(row(t, "Total token throughput (tok/s)"), "0.00 | -100.00% worse"));
    assert_non_null(strstr(t, "run1: Total TPS = 0.00 vs base 6595.66, slower by 6595.66 tok/s "
                              "(100.00%); Mean TPOT n/a (no successful requests)\n"));
    free(t);

    /* the same with the failed run as the base */
    const bench_result_t *one[] = {&base};
    t = compare(&none, one, 1);
    const char *r = row(t, "Mean TTFT (ms)");
    assert_non_null(strstr(r, "|          n/a |      7000.00 | n/a             |"));
    free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_absent_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

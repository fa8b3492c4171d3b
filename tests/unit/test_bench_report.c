/*
 * bench report: the exact vLLM block (trailing spaces, optional rows, percentile labels), the
 * guidellm and GPUStack field mappings on a known result, and save -> load round trips.
 * The expected vLLM blocks were printed once by vLLM's own print statements (copied from
 * vllm/benchmarks/serve.py 0.33, run with /root/fxvenv/bin/python and numpy on the same
 * timeline) and pasted here.
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
#include "testutil.h"

/* The timeline of test_bench_metrics.c: three successes, one failure. */
static void make_result(bench_result_t *r) {
    static const double itl0[] = {0.25, 0.25, 0.5}, itl2[] = {0.1, 0.2}, itl3[] = {1.0, 1.0};
    memset(r, 0, sizeof *r);
    bench_options_default(&r->options);
    snprintf(r->options.model, sizeof r->options.model, "Qwen/Qwen3-0.6B");
    snprintf(r->options.label, sizeof r->options.label, "tachyon");
    snprintf(r->options.profile, sizeof r->options.profile, "short");
    snprintf(r->date, sizeof r->date, "20261121-031500");
    r->options.num_prompts = 4;
    r->n_records = 4;
    r->records = calloc(4, sizeof *r->records);
    assert_non_null(r->records);
    bench_record_t *rec = r->records;
    rec[0] = (bench_record_t){.success = true,
                              .start_time = 0.0,
                              .ttft = 0.5,
                              .latency = 1.5,
                              .n_itl = 3,
                              .prompt_len = 10,
                              .output_len = 4};
    rec[1] = (bench_record_t){.success = true,
                              .start_time = 1.5,
                              .ttft = 0.2,
                              .latency = 0.2,
                              .prompt_len = 20,
                              .output_len = 1};
    rec[2] = (bench_record_t){.success = true,
                              .start_time = 0.25,
                              .ttft = 1.0,
                              .latency = 1.3,
                              .n_itl = 2,
                              .prompt_len = 5,
                              .output_len = 3,
                              .client_queue_time = 0.125};
    rec[3] = (bench_record_t){.success = false,
                              .start_time = 0.1,
                              .ttft = 0.0,
                              .latency = 0.0,
                              .n_itl = 0,
                              .prompt_len = 1000,
                              .output_len = 0};
    snprintf(rec[3].error, sizeof rec[3].error, "Internal Server Error");
    const double *src[4] = {itl0, NULL, itl2, itl3};
    for (int i = 0; i < 4; i++) {
        if (!rec[i].n_itl) continue;
        rec[i].itl = malloc((size_t)rec[i].n_itl * sizeof(double));
        assert_non_null(rec[i].itl);
        memcpy(rec[i].itl, src[i], (size_t)rec[i].n_itl * sizeof(double));
    }
}

static void compute(bench_result_t *r) {
    bench_err_t err;
    assert_int_equal(
        bench_metrics_compute(r->records, r->n_records, 2.0, &r->options, &r->metrics, &err), 0);
}

static void free_result(bench_result_t *r) {
    for (int i = 0; i < r->n_records; i++)
        free(r->records[i].itl);
    free(r->records);
}

static char *print_report(const bench_result_t *r, bench_report_style_t style) {
    /* static: GCC 12 at -O3 otherwise takes the returned text for a pointer to this frame */
    static char *buf;
    static size_t len;
    buf = NULL;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    bench_report_print(f, r, style);
    fclose(f);
    return buf;
}

static const char *k_block_a = "============ Serving Benchmark Result ============\n"
                               "Successful requests:                     3         \n"
                               "Failed requests:                         1         \n"
                               "Benchmark duration (s):                  2.00      \n"
                               "Total input tokens:                      35        \n"
                               "Total generated tokens:                  8         \n"
                               "Request throughput (req/s):              1.50      \n"
                               "Output token throughput (tok/s):         4.00      \n"
                               "Peak output token throughput (tok/s):    6.00      \n"
                               "Peak concurrent requests:                2.00      \n"
                               "Total token throughput (tok/s):          21.50     \n"
                               "---------------Time to First Token----------------\n"
                               "Mean TTFT (ms):                          566.67    \n"
                               "Median TTFT (ms):                        500.00    \n"
                               "P99 TTFT (ms):                           990.00    \n"
                               "-----Time per Output Token (excl. 1st token)------\n"
                               "Mean TPOT (ms):                          241.67    \n"
                               "Median TPOT (ms):                        241.67    \n"
                               "P99 TPOT (ms):                           331.50    \n"
                               "---------------Inter-token Latency----------------\n"
                               "Mean ITL (ms):                           260.00    \n"
                               "Median ITL (ms):                         250.00    \n"
                               "P99 ITL (ms):                            490.00    \n"
                               "==================================================\n";

static const char *k_block_b = "============ Serving Benchmark Result ============\n"
                               "Successful requests:                     3         \n"
                               "Failed requests:                         1         \n"
                               "Maximum request concurrency:             4         \n"
                               "Request rate configured (RPS):           10.00     \n"
                               "Benchmark duration (s):                  2.00      \n"
                               "Total input tokens:                      35        \n"
                               "Total generated tokens:                  8         \n"
                               "Request throughput (req/s):              1.50      \n"
                               "Request goodput (req/s):                 0.50      \n"
                               "Output token throughput (tok/s):         4.00      \n"
                               "Peak output token throughput (tok/s):    6.00      \n"
                               "Peak concurrent requests:                2.00      \n"
                               "Total token throughput (tok/s):          21.50     \n"
                               "---------------Time to First Token----------------\n"
                               "Mean TTFT (ms):                          566.67    \n"
                               "Median TTFT (ms):                        500.00    \n"
                               "P50 TTFT (ms):                           500.00    \n"
                               "P99.9 TTFT (ms):                         999.00    \n"
                               "-----Time per Output Token (excl. 1st token)------\n"
                               "Mean TPOT (ms):                          241.67    \n"
                               "Median TPOT (ms):                        241.67    \n"
                               "P50 TPOT (ms):                           241.67    \n"
                               "P99.9 TPOT (ms):                         333.15    \n"
                               "---------------Inter-token Latency----------------\n"
                               "Mean ITL (ms):                           260.00    \n"
                               "Median ITL (ms):                         250.00    \n"
                               "P50 ITL (ms):                            250.00    \n"
                               "P99.9 ITL (ms):                          499.00    \n"
                               "----------------End-to-end Latency----------------\n"
                               "Mean E2EL (ms):                          1000.00   \n"
                               "Median E2EL (ms):                        1300.00   \n"
                               "P50 E2EL (ms):                           1300.00   \n"
                               "P99.9 E2EL (ms):                         1499.60   \n"
                               "==================================================\n";

static void test_vllm_block_default(void **state) {
    (void)state;
    bench_result_t r;
    make_result(&r);
    compute(&r);
    char *text = print_report(&r, BENCH_REPORT_VLLM);
    const char *errors = "Failed requests during benchmark run detected (capping to 10):\n"
                         "Error 0: Internal Server Error\n";
    assert_memory_equal(text, errors, strlen(errors));
    assert_string_equal(text + strlen(errors), k_block_a);
    free(text);
    free_result(&r);
}

static void test_vllm_block_optional_rows(void **state) {
    (void)state;
    bench_result_t r;
    make_result(&r);
    r.options.max_concurrency = 4;
    r.options.request_rate = 10.0;
    r.options.goodput_ttft_ms = 600;
    r.options.goodput_tpot_ms = 200;
    r.options.percentile_metrics |= BENCH_METRIC_E2EL;
    r.options.metric_percentiles[0] = 50;
    r.options.metric_percentiles[1] = 99.9;
    r.options.n_metric_percentiles = 2;
    compute(&r);
    r.records[3].success = true; /* no failures: no error lines before the block */
    char *text = print_report(&r, BENCH_REPORT_VLLM);
    assert_string_equal(text, k_block_b);
    free(text);
    free_result(&r);
}

static void test_labels_synthetic_stopped(void **state) {
    (void)state;
    bench_result_t r;
    make_result(&r);
    compute(&r);
    r.synthetic_dataset = true;
    r.stopped = true;
    r.options.num_prompts = 10;
    char *text = print_report(&r, BENCH_REPORT_VLLM);
    const char *block = strstr(text, "============ Serving Benchmark Result");
    const char *synth = strstr(text, "Dataset: sharegpt-synthetic (SYNTHETIC");
    const char *stop = strstr(text, "stopped early: partial result, 4 of 10 requests finished");
    assert_non_null(block);
    assert_non_null(synth);
    assert_non_null(stop);
    assert_true(synth < block && stop < block);
    free(text);
    /* More than ten failures: ten error lines. */
    bench_record_t many[12];
    memset(many, 0, sizeof many);
    for (int i = 0; i < 12; i++)
        snprintf(many[i].error, sizeof many[i].error, "HTTP 500 #%d", i);
    bench_record_t *saved = r.records;
    r.records = many;
    r.n_records = 12;
    r.synthetic_dataset = r.stopped = false;
    text = print_report(&r, BENCH_REPORT_VLLM);
    assert_non_null(strstr(text, "Error 9: HTTP 500 #9\n"));
    assert_null(strstr(text, "Error 10:"));
    free(text);
    r.records = saved;
    r.n_records = 4;
    free_result(&r);
}

/* The value of the first "| NAME ... | x |" table row's first number. */
static double table_value(const char *text, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "| %s ", name);
    const char *p = strstr(text, key);
    assert_non_null(p);
    p = strchr(p + 2, '|');
    assert_non_null(p);
    return strtod(p + 1, NULL);
}

/* The value of a "Label:   x" row of a vLLM-style block. */
static double row_value(const char *text, const char *label) {
    const char *p = strstr(text, label);
    assert_non_null(p);
    return strtod(p + strlen(label), NULL);
}

static void test_guidellm_gpustack_mappings(void **state) {
    (void)state;
    bench_result_t r;
    make_result(&r);
    compute(&r);
    /* guidellm: ITL = (last - first) / (out - 1), weighted by out - 1: (1.0 + 0.3) / 5 s;
     * TPOT = (last - start) / out weighted by out: (1.5 + 0.2 + 1.3) / 8 s. */
    char *g = print_report(&r, BENCH_REPORT_GUIDELLM);
    assert_true(fabs(table_value(g, "ITL (ms)") - 260.0) < 1e-9);
    assert_true(fabs(table_value(g, "TPOT (ms)") - 375.0) < 1e-9);
    assert_true(fabs(table_value(g, "TTFT (ms)") - 566.67) < 1e-9);
    assert_true(fabs(table_value(g, "Request Latency (s)") - 1.0) < 1e-9);
    assert_true(fabs(table_value(g, "Output Tokens / Request") - 8.0 / 3) < 0.005);
    assert_true(fabs(table_value(g, "Request Concurrency") - 1.5) < 1e-9); /* 3.0 s / 2.0 s */
    free(g);

    char *s = print_report(&r, BENCH_REPORT_GPUSTACK);
    assert_non_null(strstr(s, "============ Serving Benchmark Result ============\n"));
    assert_non_null(strstr(s, "----------------------Latency---------------------\n"));
    /* GPUStack's TPOT row is guidellm's time_per_output_token, its ITL row guidellm's ITL. */
    assert_true(fabs(row_value(s, "Mean TPOT (ms):") - 375.0) < 1e-9);
    assert_true(fabs(row_value(s, "Mean ITL (ms):") - 260.0) < 1e-9);
    assert_true(fabs(row_value(s, "Mean Latency(s):") - 1.0) < 1e-9);
    /* Peak output = the largest per-request output tokens/s: 1 token in 0.2 s. */
    assert_true(fabs(row_value(s, "Peak output token throughput (tok/s):") - 5.0) < 1e-9);
    assert_true(fabs(row_value(s, "Total input tokens:") - 35) < 1e-9);
    assert_true(fabs(row_value(s, "Maximum request concurrency:") - 2) < 1e-9);
    assert_non_null(strstr(s, "P95 TTFT (ms):"));
    free(s);
    free_result(&r);
}

static void test_save_load_round_trip(void **state) {
    (void)state;
    bench_result_t r;
    make_result(&r);
    r.options.percentile_metrics |= BENCH_METRIC_E2EL;
    r.options.metric_percentiles[1] = 99.9;
    r.options.n_metric_percentiles = 2;
    r.options.max_concurrency = 8;
    r.options.goodput_e2el_ms = 1500;
    r.options.backend = BENCH_BACKEND_OPENAI_CHAT;
    r.synthetic_dataset = true;
    snprintf(r.server_flags_json, sizeof r.server_flags_json,
             "{\"max-num-seqs\":256,\"enable-prefix-caching\":true}");
    compute(&r);
    char *dir = tu_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/run.json", dir);
    bench_err_t err;
    assert_int_equal(bench_result_save_json(&r, path, &err), 0);

    char *json = tu_read(path, NULL);
    assert_non_null(json);
    const char *keys[] = {"\"date\":\"20261121-031500\"",
                          "\"backend\":\"openai-chat\"",
                          "\"request_rate\":\"inf\"",
                          "\"max_concurrency\":8",
                          "\"completed\":3",
                          "\"failed\":1",
                          "\"total_input_tokens\":35",
                          "\"p99.9_ttft_ms\":",
                          "\"mean_e2el_ms\":1000.0",
                          "\"input_lens\":[10,20,5,1000]",
                          "\"output_lens\":[4,1,3,0]",
                          "\"errors\":[\"\",\"\",\"\",\"Internal Server Error\"]",
                          "\"itls\":[[0.25,0.25,0.5],[],[0.1,0.2],[]]",
                          "\"profile\":\"short\"",
                          "\"synthetic_dataset\":true",
                          "\"stopped\":false",
                          "\"server_flags\":{\"max-num-seqs\":256"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strstr(json, keys[i])) fail_msg("missing %s in %s", keys[i], json);
    free(json);

    bench_result_t *l;
    assert_int_equal(bench_result_load_json(path, &l, &err), 0);
    assert_memory_equal(&l->metrics, &r.metrics, sizeof r.metrics);
    assert_int_equal(l->options.percentile_metrics, r.options.percentile_metrics);
    assert_int_equal(l->options.backend, BENCH_BACKEND_OPENAI_CHAT);
    assert_true(isinf(l->options.request_rate));
    assert_int_equal(l->options.max_concurrency, 8);
    assert_true(l->options.goodput_e2el_ms == 1500);
    assert_string_equal(l->options.profile, "short");
    assert_string_equal(l->options.label, "tachyon");
    assert_string_equal(l->options.model, "Qwen/Qwen3-0.6B");
    assert_string_equal(l->date, "20261121-031500");
    assert_true(l->synthetic_dataset);
    assert_false(l->stopped);
    assert_string_equal(l->server_flags_json, r.server_flags_json);
    assert_int_equal(l->n_records, 4);
    for (int i = 0; i < 4; i++) {
        const bench_record_t *a = &r.records[i], *b = &l->records[i];
        assert_int_equal(a->success, b->success);
        assert_true(a->start_time == b->start_time && a->ttft == b->ttft &&
                    a->latency == b->latency && a->client_queue_time == b->client_queue_time);
        assert_int_equal(a->prompt_len, b->prompt_len);
        assert_int_equal(a->output_len, b->output_len);
        assert_string_equal(a->error, b->error);
        assert_int_equal(a->n_itl, b->n_itl);
        if (a->n_itl) assert_memory_equal(a->itl, b->itl, (size_t)a->n_itl * sizeof(double));
    }
    /* Every report of the reloaded result is the original's, byte for byte. */
    for (int style = 0; style < 3; style++) {
        char *x = print_report(&r, (bench_report_style_t)style);
        char *y = print_report(l, (bench_report_style_t)style);
        assert_string_equal(x, y);
        free(x);
        free(y);
    }
    bench_result_destroy(l);

    /* A `vllm bench serve --save-result` file (0.11: no per-request arrays, no options). */
    tu_write_text(
        dir, "vllm.json",
        "{\"date\": \"20251101-120000\", \"backend\": \"openai-chat\", \"model_id\": "
        "\"Qwen/Qwen3-14B\", \"num_prompts\": 1000, \"request_rate\": \"inf\", "
        "\"burstiness\": 1.0, \"max_concurrency\": null, \"duration\": 63.53, "
        "\"completed\": 1000, \"total_input_tokens\": 217393, \"total_output_tokens\": "
        "201648, \"request_throughput\": 15.74, \"request_goodput\": null, "
        "\"output_throughput\": 3173.92, \"total_token_throughput\": 6595.66, "
        "\"max_output_tokens_per_s\": 8890.0, \"max_concurrent_requests\": 1000, "
        "\"mean_ttft_ms\": 22141.21, \"median_ttft_ms\": 21872.31, \"std_ttft_ms\": 1.0, "
        "\"p99_ttft_ms\": 31156.86, \"mean_tpot_ms\": 226.03, \"median_tpot_ms\": 117.46, "
        "\"std_tpot_ms\": 2.0, \"p99_tpot_ms\": 621.87, \"mean_itl_ms\": 92.83, "
        "\"median_itl_ms\": 59.99, \"std_itl_ms\": 3.0, \"p99_itl_ms\": 627.72}");
    snprintf(path, sizeof path, "%s/vllm.json", dir);
    assert_int_equal(bench_result_load_json(path, &l, &err), 0);
    assert_int_equal(l->n_records, 0);
    assert_int_equal(l->metrics.completed, 1000);
    assert_int_equal(l->metrics.total_output_tokens, 201648);
    assert_int_equal(l->options.percentile_metrics,
                     BENCH_METRIC_TTFT | BENCH_METRIC_TPOT | BENCH_METRIC_ITL);
    assert_int_equal(l->metrics.n_percentiles, 1);
    assert_true(l->metrics.percentile_points[0] == 99);
    assert_true(l->metrics.tpot.percentiles[0] == 621.87);
    assert_int_equal(l->options.max_concurrency, 0);
    char *text = print_report(l, BENCH_REPORT_VLLM);
    assert_non_null(strstr(text, "Total token throughput (tok/s):          6595.66   \n"));
    assert_non_null(strstr(text, "P99 ITL (ms):                            627.72    \n"));
    free(text);
    bench_result_destroy(l);

    tu_write_text(dir, "junk.json", "[1, 2]");
    snprintf(path, sizeof path, "%s/junk.json", dir);
    assert_int_equal(bench_result_load_json(path, &l, &err), -1);
    assert_null(l);
    snprintf(path, sizeof path, "%s/none.json", dir);
    assert_int_equal(bench_result_load_json(path, &l, &err), -1);
    tu_rmrf(dir);
    free(dir);
    free_result(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm_block_default),
        cmocka_unit_test(test_vllm_block_optional_rows),
        cmocka_unit_test(test_labels_synthetic_stopped),
        cmocka_unit_test(test_guidellm_gpustack_mappings),
        cmocka_unit_test(test_save_load_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * bench metrics: vLLM's calculate_metrics formulas on hand-computed timelines, and numpy's
 * statistics. The expected numpy values were produced once with
 *   /root/fxvenv/bin/python -c "import numpy as np; print(repr(float(np.percentile(v, p))))"
 * (numpy 2.x, default linear method; np.mean / np.median / np.std with ddof=0) on the same
 * inputs written here, and pasted as constants; the test itself needs no Python.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bench.h"

/* cmocka has no double comparison: |a - b| <= eps, printing both at full precision. */
#define assert_close(a, b, eps)                                                                    \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!(fabs(a_ - b_) <= (eps))) fail_msg("%s = %.17g, want %.17g", #a, a_, b_);             \
    } while (0)

static void opts_init(bench_options_t *o) {
    memset(o, 0, sizeof *o);
    o->percentile_metrics = BENCH_METRIC_TTFT | BENCH_METRIC_TPOT | BENCH_METRIC_ITL;
    o->metric_percentiles[0] = 99;
    o->metric_percentiles[1] = 50;
    o->n_metric_percentiles = 2;
    o->request_rate = INFINITY;
}

static void test_percentile_numpy(void **state) {
    (void)state;
    const double v[] = {3.2, 1.5, 9.75, 4.0, 2.25, 7.5, 0.125};
    double scratch[7];
    const struct {
        double p, want;
    } cases[] = {
        {0, 0.125},
        {25, 1.875},
        {50, 3.2},
        {90, 8.4},
        {99, 9.614999999999998},
        {99.9, 9.736500000000001},
        {100, 9.75},
        {33.3, 2.2485},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_close(bench_percentile(v, 7, cases[i].p, scratch), cases[i].want, 1e-15);
    /* The input is not reordered. */
    assert_close(v[0], 3.2, 0);
    double one = 2.5, two[] = {1.0, 2.0};
    assert_close(bench_percentile(&one, 1, 99, scratch), 2.5, 0);
    assert_close(bench_percentile(two, 2, 99.5, scratch), 1.995, 1e-15);
    assert_close(bench_percentile(NULL, 0, 99, scratch), 0.0, 0);
}

/* 300 values: mean and std go through numpy's pairwise summation. */
static void test_stats_numpy_large(void **state) {
    (void)state;
    enum { N = 300 };
    static bench_record_t rec[N];
    for (int i = 0; i < N; i++) {
        memset(&rec[i], 0, sizeof rec[i]);
        rec[i].success = true;
        rec[i].ttft = fmod(i * 0.7919, 3.3) + i * 1e-3;
        rec[i].latency = rec[i].ttft;
        rec[i].output_len = 1;
    }
    bench_options_t o;
    opts_init(&o);
    bench_metrics_t m;
    bench_err_t err;
    assert_int_equal(bench_metrics_compute(rec, N, 10.0, &o, &m, &err), 0);
    assert_close(m.ttft.mean, 1.8395500000000136 * 1000, 0);
    assert_close(m.ttft.std, 0.9560533627889193 * 1000, 0);
    assert_close(m.ttft.median, 1.8412500000000112 * 1000, 0);
    assert_close(m.ttft.percentiles[0], 3.480225000000004 * 1000, 0);
    assert_close(m.ttft.percentiles[1], 1.8412500000000112 * 1000, 0);
}

/*
 * The timeline (seconds; run clock):
 *   r0 ok     start 0.00  ttft 0.5  gaps 0.25 0.25 0.5  -> latency 1.5, 4 tokens, prompt 10
 *   r1 ok     start 1.50  ttft 0.2  no gaps             -> latency 0.2, 1 token,  prompt 20
 *   r2 ok     start 0.25  ttft 1.0  gaps 0.1 0.2        -> latency 1.3, 3 tokens, prompt 5
 *   r3 failed start 0.10  (its numbers must not count anywhere)
 * Token events: r0 0.5 0.75 1.0 1.5; r1 1.7; r2 1.25 1.35 1.55 -> bucket 0: 2, bucket 1: 6.
 * Concurrency: r1 arrives at 1.5 exactly when r0 leaves: departures first -> peak 2 (not 3).
 * TPOT: r0 (1.5-0.5)/3, r2 (1.3-1.0)/2; r1 has one token and is left out.
 */
static double g_itl0[] = {0.25, 0.25, 0.5}, g_itl2[] = {0.1, 0.2}, g_itl3[] = {1.0, 1.0};

static void timeline(bench_record_t rec[4]) {
    memset(rec, 0, 4 * sizeof *rec);
    rec[0] = (bench_record_t){.success = true,
                              .start_time = 0.0,
                              .ttft = 0.5,
                              .latency = 1.5,
                              .itl = g_itl0,
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
                              .itl = g_itl2,
                              .n_itl = 2,
                              .prompt_len = 5,
                              .output_len = 3};
    rec[3] = (bench_record_t){.success = false,
                              .start_time = 0.1,
                              .ttft = 0.3,
                              .latency = 5.0,
                              .itl = g_itl3,
                              .n_itl = 2,
                              .prompt_len = 1000,
                              .output_len = 99};
    strcpy(rec[3].error, "Internal Server Error");
}

static void test_timeline_formulas(void **state) {
    (void)state;
    bench_record_t rec[4];
    timeline(rec);
    bench_options_t o;
    opts_init(&o);
    o.percentile_metrics |= BENCH_METRIC_E2EL;
    bench_metrics_t m;
    bench_err_t err;
    assert_int_equal(bench_metrics_compute(rec, 4, 2.0, &o, &m, &err), 0);
    assert_int_equal(m.completed, 3);
    assert_int_equal(m.failed, 1);
    assert_int_equal(m.total_input_tokens, 35);
    assert_int_equal(m.total_output_tokens, 8);
    assert_close(m.duration, 2.0, 0);
    assert_close(m.request_throughput, 1.5, 1e-12);
    assert_close(m.output_throughput, 4.0, 1e-12);
    assert_close(m.total_token_throughput, 21.5, 1e-12);
    assert_close(m.max_output_tokens_per_s, 6.0, 0);
    assert_close(m.max_concurrent_requests, 2.0, 0);
    /* numpy: ttft [0.5, 0.2, 1.0] */
    assert_close(m.ttft.mean, 566.6666666666666, 1e-9);
    assert_close(m.ttft.median, 500.0, 1e-9);
    assert_close(m.ttft.std, 329.9831645537222, 1e-9);
    assert_close(m.ttft.percentiles[0], 990.0, 1e-9);
    /* numpy: tpot [1/3, 0.15] */
    assert_close(m.tpot.mean, 241.66666666666666, 1e-9);
    assert_close(m.tpot.std, 91.66666666666664, 1e-9);
    assert_close(m.tpot.percentiles[0], 331.49999999999994, 1e-9);
    /* numpy: pooled itl [0.25, 0.25, 0.5, 0.1, 0.2] (the failed request's gaps excluded) */
    assert_close(m.itl.mean, 260.0, 1e-9);
    assert_close(m.itl.median, 250.0, 1e-9);
    assert_close(m.itl.std, 131.90905958272918, 1e-9);
    assert_close(m.itl.percentiles[0], 490.0, 1e-9);
    /* numpy: e2el [1.5, 0.2, 1.3] */
    assert_close(m.e2el.mean, 1000.0, 1e-9);
    assert_close(m.e2el.median, 1300.0, 1e-9);
    assert_close(m.e2el.std, 571.5476066494083, 1e-9);
    assert_close(m.e2el.percentiles[0], 1496.0, 1e-9);
    assert_close(m.e2el.percentiles[1], 1300.0, 1e-9);
    assert_int_equal(m.n_percentiles, 2);
    assert_close(m.percentile_points[0], 99, 0);
}

static void test_goodput(void **state) {
    (void)state;
    bench_record_t rec[4];
    timeline(rec);
    bench_options_t o;
    opts_init(&o);
    bench_metrics_t m;
    bench_err_t err;
    /* ttft <= 600 ms and tpot <= 200 ms: r0 fails on tpot (333 ms), r2 on ttft; r1 has one
     * token, so its TPOT counts as 0 and it is good. */
    o.goodput_ttft_ms = 600;
    o.goodput_tpot_ms = 200;
    assert_int_equal(bench_metrics_compute(rec, 4, 2.0, &o, &m, &err), 0);
    assert_close(m.request_goodput, 0.5, 1e-12);
    /* e2el <= 1500 ms: the bound is inclusive (slo >= value), so r0 at exactly 1.5 s is good. */
    opts_init(&o);
    o.goodput_e2el_ms = 1500;
    assert_int_equal(bench_metrics_compute(rec, 4, 2.0, &o, &m, &err), 0);
    assert_close(m.request_goodput, 1.5, 1e-12);
    opts_init(&o);
    o.goodput_e2el_ms = 1499;
    assert_int_equal(bench_metrics_compute(rec, 4, 2.0, &o, &m, &err), 0);
    assert_close(m.request_goodput, 1.0, 1e-12);
}

/* Arrivals and departures at equal times, and three requests overlapping only at a point. */
static void test_sweep_ties(void **state) {
    (void)state;
    bench_record_t rec[4];
    memset(rec, 0, sizeof rec);
    for (int i = 0; i < 4; i++) {
        rec[i].success = true;
        rec[i].output_len = 1;
    }
    /* [0,1) [1,2) [2,3): never two at once. */
    rec[0].start_time = 0, rec[0].latency = 1;
    rec[1].start_time = 1, rec[1].latency = 1;
    rec[2].start_time = 2, rec[2].latency = 1;
    /* A zero-length request arrives and leaves at 1.0: it never overlaps. */
    rec[3].start_time = 1, rec[3].latency = 0;
    bench_options_t o;
    opts_init(&o);
    bench_metrics_t m;
    bench_err_t err;
    assert_int_equal(bench_metrics_compute(rec, 4, 3.0, &o, &m, &err), 0);
    assert_close(m.max_concurrent_requests, 1.0, 0);
    /* Shift the third to 1.999: now [1,2) and [1.999,2.999) overlap. */
    rec[2].start_time = 1.999;
    assert_int_equal(bench_metrics_compute(rec, 3, 3.0, &o, &m, &err), 0);
    assert_close(m.max_concurrent_requests, 2.0, 0);
}

/* The peak counts token events (one per chunk), bucketed from the earliest successful start. */
static void test_peak_bucket(void **state) {
    (void)state;
    static double gaps[] = {0.3, 0.3, 0.3, 0.05, 0.05};
    bench_record_t rec[2];
    memset(rec, 0, sizeof rec);
    /* Events at 10.2 10.5 10.8 11.1 11.15 11.2 (relative 0.2 .. 1.2): buckets 3 and 3. */
    rec[0] = (bench_record_t){.success = true,
                              .start_time = 10.0,
                              .ttft = 0.2,
                              .latency = 1.2,
                              .itl = gaps,
                              .n_itl = 5,
                              .output_len = 60};
    /* A failed request earlier must not move the origin. */
    rec[1] = (bench_record_t){.success = false, .start_time = 9.5, .latency = 0.1};
    bench_options_t o;
    opts_init(&o);
    bench_metrics_t m;
    bench_err_t err;
    assert_int_equal(bench_metrics_compute(rec, 2, 2.0, &o, &m, &err), 0);
    assert_close(m.max_output_tokens_per_s, 3.0, 0);
    assert_int_equal(m.total_output_tokens, 60);
    /* TPOT uses the usage count, not the events: (1.2 - 0.2) / 59. */
    assert_close(m.tpot.mean, 1000.0 / 59.0, 1e-9);
}

static void test_all_failed(void **state) {
    (void)state;
    bench_record_t rec[2];
    memset(rec, 0, sizeof rec);
    rec[0].start_time = 1.0, rec[0].latency = 2.0, rec[0].ttft = 0.5;
    bench_options_t o;
    opts_init(&o);
    bench_metrics_t m;
    bench_err_t err;
    assert_int_equal(bench_metrics_compute(rec, 2, 4.0, &o, &m, &err), 0);
    assert_int_equal(m.completed, 0);
    assert_int_equal(m.failed, 2);
    assert_close(m.ttft.mean, 0, 0);
    assert_close(m.ttft.percentiles[0], 0, 0);
    assert_close(m.itl.median, 0, 0);
    assert_close(m.max_output_tokens_per_s, 0, 0);
    assert_close(m.max_concurrent_requests, 0, 0);
    assert_close(m.request_throughput, 0, 0);
    /* No records at all is fine too; bad arguments are errors, not crashes. */
    assert_int_equal(bench_metrics_compute(NULL, 0, 1.0, &o, &m, &err), 0);
    assert_int_equal(bench_metrics_compute(rec, 2, 4.0, NULL, &m, &err), -1);
    o.n_metric_percentiles = BENCH_MAX_PERCENTILES + 1;
    assert_int_equal(bench_metrics_compute(rec, 2, 4.0, &o, &m, &err), -1);
    assert_non_null(strstr(err.msg, "percentiles"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentile_numpy),  cmocka_unit_test(test_stats_numpy_large),
        cmocka_unit_test(test_timeline_formulas), cmocka_unit_test(test_goodput),
        cmocka_unit_test(test_sweep_ties),        cmocka_unit_test(test_peak_bucket),
        cmocka_unit_test(test_all_failed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

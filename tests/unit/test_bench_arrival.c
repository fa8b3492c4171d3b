/* bench arrival: vLLM's schedule: zero delays at an infinite rate, constant spacing (first request
 * waits one gap), seeded gamma gaps whose mean is 1/rate and whose coefficient of variation is
 * 1/sqrt(burstiness), the last delay rescaled to exactly N/rate, determinism per seed, bad input.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "arrival.h"

static void test_infinite_rate(void **state) {
    (void)state;
    double d[5] = {1, 1, 1, 1, 1};
    assert_int_equal(bench_arrival_delays(INFINITY, 1.0, 0, 5, d, NULL), 0);
    for (int i = 0; i < 5; i++)
        assert_true(d[i] == 0);
}

static void test_constant(void **state) {
    (void)state;
    double d[4];
    assert_int_equal(bench_arrival_delays(4.0, INFINITY, 0, 4, d, NULL), 0);
    assert_true(fabs(d[0] - 0.25) < 1e-12);
    assert_true(fabs(d[1] - 0.50) < 1e-12);
    assert_true(fabs(d[2] - 0.75) < 1e-12);
    assert_true(fabs(d[3] - 1.00) < 1e-12);
}

/* Gaps of a long schedule: mean 1/rate, CV 1/sqrt(burstiness) within sampling error. */
static void gap_stats(double rate, double burstiness, double *mean, double *cv) {
    enum { N = 200000 };
    double *d = malloc(N * sizeof *d);
    assert_int_equal(bench_arrival_delays(rate, burstiness, 42, N, d, NULL), 0);
    assert_true(fabs(d[N - 1] - N / rate) < 1e-9 * N / rate);
    double s = 0, s2 = 0, prev = 0;
    for (int i = 0; i < N; i++) {
        double g = d[i] - prev;
        assert_true(g >= 0);
        prev = d[i];
        s += g;
        s2 += g * g;
    }
    *mean = s / N;
    *cv = sqrt(s2 / N - *mean * *mean) / *mean;
    free(d);
}

static void test_poisson_and_gamma(void **state) {
    (void)state;
    double mean, cv;
    gap_stats(10.0, 1.0, &mean, &cv);      /* exponential: CV 1 */
    assert_true(fabs(mean - 0.1) < 1e-12); /* exact after rescaling */
    assert_true(fabs(cv - 1.0) < 0.01);
    gap_stats(5.0, 4.0, &mean, &cv); /* CV 0.5 */
    assert_true(fabs(mean - 0.2) < 1e-12);
    assert_true(fabs(cv - 0.5) < 0.01);
    gap_stats(5.0, 0.25, &mean, &cv); /* bursty, shape < 1: CV 2 */
    assert_true(fabs(cv - 2.0) < 0.05);
}

/* Before rescaling the sampled mean differs from 1/rate; the rescaled last delay is N/rate. */
static void test_rescaled_small(void **state) {
    (void)state;
    double d[7];
    assert_int_equal(bench_arrival_delays(2.0, 1.0, 3, 7, d, NULL), 0);
    assert_true(fabs(d[6] - 3.5) < 1e-12);
    for (int i = 1; i < 7; i++)
        assert_true(d[i] >= d[i - 1]);
    assert_true(d[0] > 0); /* the first request waits too */
}

static void test_seeded(void **state) {
    (void)state;
    double a[50], b[50], c[50];
    assert_int_equal(bench_arrival_delays(3.0, 1.0, 7, 50, a, NULL), 0);
    assert_int_equal(bench_arrival_delays(3.0, 1.0, 7, 50, b, NULL), 0);
    assert_int_equal(bench_arrival_delays(3.0, 1.0, 8, 50, c, NULL), 0);
    assert_memory_equal(a, b, sizeof a);
    assert_true(memcmp(a, c, sizeof a) != 0);
}

static void test_bad_input(void **state) {
    (void)state;
    double d[2];
    bench_err_t err;
    assert_int_equal(bench_arrival_delays(0, 1.0, 0, 2, d, &err), -1);
    assert_non_null(strstr(err.msg, "rate"));
    assert_int_equal(bench_arrival_delays(1.0, -1, 0, 2, d, &err), -1);
    assert_int_equal(bench_arrival_delays(NAN, 1, 0, 2, d, &err), -1);
    assert_int_equal(bench_arrival_delays(1.0, 1.0, 0, 0, d, &err), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_infinite_rate),
        cmocka_unit_test(test_constant),
        cmocka_unit_test(test_poisson_and_gamma),
        cmocka_unit_test(test_rescaled_small),
        cmocka_unit_test(test_seeded),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * bench profiles: every bundled profile applies the seeds' settings, carries its source, and
 * leaves the other options alone; an unknown name is an error that lists the known ones.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bench.h"

typedef struct expect {
    const char *name;
    bench_dataset_t dataset;
    int input_len, output_len, num_prompts;
    double rate; /* INFINITY: all at once */
    uint64_t seed;
    const char *source_has;
} expect_t;

static const expect_t k_expect[] = {
    {"sharegpt", BENCH_DATASET_SHAREGPT, -1, 0, 1000, INFINITY, 0, "000-002"},
    {"short", BENCH_DATASET_RANDOM, 128, 4, 1000, INFINITY, 42, "000-002"},
    {"medium", BENCH_DATASET_RANDOM, 2000, 100, 500, INFINITY, 42, "000-002"},
    {"long", BENCH_DATASET_RANDOM, 4000, 200, 500, INFINITY, 42, "000-002"},
    {"very-long", BENCH_DATASET_RANDOM, 32000, 100, 100, INFINITY, 42, "000-002"},
    {"throughput", BENCH_DATASET_RANDOM, 1024, 128, 1000, 1000.0, 42, "003"},
    {"long-context", BENCH_DATASET_RANDOM, 32000, 100, 100, 1.0, 42, "003"},
    {"generation-heavy", BENCH_DATASET_RANDOM, 1000, 2000, 200, 1.0, 42, "003"},
    {"latency", BENCH_DATASET_RANDOM, 32, 128, 100, 1.0, 42, "GPUStack"},
};

#define N_EXPECT (sizeof k_expect / sizeof k_expect[0])

static void base_opts(bench_options_t *o) {
    memset(o, 0, sizeof *o);
    o->input_len = -1;
    o->range_ratio = 0.5;
    o->prefix_len = 7;
    o->max_concurrency = 3;
    o->num_warmups = 2;
    snprintf(o->base_url, sizeof o->base_url, "http://example:1");
    snprintf(o->dataset_path, sizeof o->dataset_path, "/data/sg.json");
    o->metric_percentiles[0] = 95;
    o->n_metric_percentiles = 1;
}

static void test_every_profile(void **state) {
    (void)state;
    const bench_profile_t *list = bench_profiles();
    size_t n = 0;
    while (list[n].name)
        n++;
    assert_int_equal(n, N_EXPECT);
    for (size_t i = 0; i < N_EXPECT; i++) {
        const expect_t *e = &k_expect[i];
        assert_string_equal(list[i].name, e->name);
        assert_non_null(strstr(list[i].source, e->source_has));
        assert_true(strlen(list[i].description) > 10);
        bench_options_t o;
        base_opts(&o);
        bench_err_t err;
        assert_int_equal(bench_profile_apply(e->name, &o, &err), 0);
        assert_string_equal(o.profile, e->name);
        assert_int_equal(o.dataset, e->dataset);
        assert_int_equal(o.backend, BENCH_BACKEND_OPENAI_CHAT);
        assert_int_equal(o.num_prompts, e->num_prompts);
        assert_int_equal(o.input_len, e->input_len);
        assert_int_equal(o.output_len, e->output_len);
        assert_int_equal(o.seed, e->seed);
        assert_int_equal(o.max_concurrency, 0);
        if (isinf(e->rate)) {
            assert_true(isinf(o.request_rate));
        } else {
            assert_true(o.request_rate == e->rate);
            assert_true(isinf(o.burstiness)); /* guidellm constant: evenly spaced */
        }
        if (e->dataset == BENCH_DATASET_RANDOM) {
            assert_true(o.range_ratio == 0.0);
            assert_int_equal(o.prefix_len, 0);
            assert_true(o.ignore_eos);
        }
        /* untouched */
        assert_string_equal(o.base_url, "http://example:1");
        assert_string_equal(o.dataset_path, "/data/sg.json");
        assert_int_equal(o.num_warmups, 2);
        assert_int_equal(o.n_metric_percentiles, 1);
    }
}

static void test_unknown_profile(void **state) {
    (void)state;
    bench_options_t o;
    base_opts(&o);
    bench_err_t err;
    assert_int_equal(bench_profile_apply("sharegtp", &o, &err), -1);
    assert_non_null(strstr(err.msg, "sharegtp"));
    for (size_t i = 0; i < N_EXPECT; i++)
        assert_non_null(strstr(err.msg, k_expect[i].name));
    assert_string_equal(o.profile, "");
    assert_int_equal(o.input_len, -1);
    assert_int_equal(bench_profile_apply(NULL, &o, &err), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_profile),
        cmocka_unit_test(test_unknown_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

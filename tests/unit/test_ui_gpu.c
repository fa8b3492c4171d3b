/* ui_gpu: NVML loaded with dlopen, here the tests' fake (tests/fake/fake_nvml.c): every number
 * of every GPU read; a missing library and a driver that does not initialise give no GPU and
 * say why; the process's CPU % and resident memory are read with or without GPUs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ui_gpu.h"

static void test_fake_gpus(void **state) {
    (void)state;
    setenv("FAKE_NVML_GPUS", "2", 1);
    unsetenv("FAKE_NVML_FAIL");
    ui_gpu_t *g = ui_gpu_create(FAKE_NVML);
    assert_non_null(g);
    ui_gpu_sample_t s;
    ui_gpu_sample(g, &s);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.n_total, 2);
    assert_string_equal(s.dev[0].name, "Fake H100 0");
    assert_string_equal(s.dev[1].name, "Fake H100 1");
    assert_true(s.dev[0].util == 40 && s.dev[1].util == 55); /* the fake's 2nd query: +5 */
    assert_true(s.dev[1].mem_used == 31.0 * (1 << 30) && s.dev[1].mem_total == 80.0 * (1 << 30));
    assert_true(s.dev[0].power_w == 350 && s.dev[0].power_cap_w == 700);
    assert_true(s.dev[1].temp_c == 62 && s.dev[0].sm_mhz == 1980 && s.dev[0].mem_mhz == 2619);
    assert_true(fabs(ui_gpu_mean_util(&s) - 47.5) < 1e-9);
    assert_true(fabs(ui_gpu_mean_mem_pct(&s) - 100.0 * 30.5 / 80) < 1e-9);
    assert_true(s.cpu_pct >= 0); /* since ui_gpu_create */
    assert_true(s.rss > 0 && s.mem_total >= s.rss && s.n_cpus >= 1);
    volatile double x = 0; /* some CPU time, so the next reading is a rate */
    for (long i = 0; i < 20000000; i++)
        x += (double)i;
    ui_gpu_sample(g, &s);
    assert_true(s.cpu_pct > 0 && s.cpu_pct < 100.0 * s.n_cpus + 1);
    ui_gpu_destroy(g);
    ui_gpu_destroy(NULL);
}

static void test_many_gpus_capped(void **state) {
    (void)state;
    setenv("FAKE_NVML_GPUS", "20", 1);
    ui_gpu_t *g = ui_gpu_create(FAKE_NVML);
    ui_gpu_sample_t s;
    ui_gpu_sample(g, &s);
    assert_int_equal(s.n, UI_GPU_MAX);
    assert_int_equal(s.n_total, 20);
    ui_gpu_destroy(g);
    setenv("FAKE_NVML_GPUS", "0", 1);
    g = ui_gpu_create(FAKE_NVML);
    ui_gpu_sample(g, &s);
    assert_int_equal(s.n, 0);
    assert_string_equal(s.why, "NVML sees no GPU");
    assert_true(isnan(ui_gpu_mean_util(&s)));
    ui_gpu_destroy(g);
}

static void test_no_nvml(void **state) {
    (void)state;
    ui_gpu_t *g = ui_gpu_create("/nonexistent/libnvidia-ml.so.1");
    ui_gpu_sample_t s;
    ui_gpu_sample(g, &s);
    assert_int_equal(s.n, 0);
    assert_non_null(strstr(s.why, "no NVML"));
    assert_true(s.rss > 0); /* the process's numbers still */
    ui_gpu_destroy(g);
}

static void test_driver_not_loaded(void **state) {
    (void)state;
    setenv("FAKE_NVML_FAIL", "1", 1);
    ui_gpu_t *g = ui_gpu_create(FAKE_NVML);
    ui_gpu_sample_t s;
    ui_gpu_sample(g, &s);
    assert_int_equal(s.n, 0);
    assert_string_equal(s.why, "NVML: Driver Not Loaded");
    ui_gpu_destroy(g);
    unsetenv("FAKE_NVML_FAIL");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fake_gpus),
        cmocka_unit_test(test_many_gpus_capped),
        cmocka_unit_test(test_no_nvml),
        cmocka_unit_test(test_driver_not_loaded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

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
#include <unistd.h>

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

/* The engine's devices by PCI bus id (rank order; one NVML does not know left out) first, then
 * the machine's other GPUs; the means cover the engine's; without devices every GPU is the
 * machine's, in NVML's order. */
static void test_engine_devices(void **state) {
    (void)state;
    setenv("FAKE_NVML_GPUS", "4", 1);
    unsetenv("FAKE_NVML_FAIL");
    ui_gpu_t *g = ui_gpu_create(FAKE_NVML);
    const char *ids[] = {"0000:12:00.0", "0000:99:00.0", "00000000:10:00.0"};
    ui_gpu_set_devices(g, ids, 3);
    ui_gpu_sample_t s;
    ui_gpu_sample(g, &s);
    assert_int_equal(s.n, 4);
    assert_int_equal(s.n_engine, 2);
    int want_index[4] = {2, 0, 1, 3}, want_rank[4] = {0, 2, -1, -1};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(s.dev[i].index, want_index[i]);
        assert_int_equal(s.dev[i].rank, want_rank[i]);
    }
    assert_string_equal(s.dev[0].name, "Fake H100 2");
    assert_true(s.dev[0].mem_used == 32.0 * (1 << 30));
    assert_true(fabs(ui_gpu_mean_mem_pct(&s) - 100.0 * 31 / 80) < 1e-9); /* GPUs 2 and 0 */
    ui_gpu_set_devices(g, NULL, 0);
    ui_gpu_sample(g, &s);
    assert_int_equal(s.n_engine, 0);
    for (int i = 0; i < 4; i++)
        assert_true(s.dev[i].index == i && s.dev[i].rank == -1);
    assert_true(fabs(ui_gpu_mean_mem_pct(&s) - 100.0 * 31.5 / 80) < 1e-9);
    ui_gpu_destroy(g);
}

/* The sampler thread: samples at once and then every period; the UI's copy only when newer. */
static void test_sampler(void **state) {
    (void)state;
    setenv("FAKE_NVML_GPUS", "3", 1);
    ui_gpu_t *g = ui_gpu_create(FAKE_NVML);
    err_t err = {{0}};
    ui_gpu_sampler_t *sp = ui_gpu_sampler_start(g, 0.01, &err);
    assert_non_null(sp);
    ui_gpu_sample_t s;
    unsigned seq = 0;
    int tries = 0;
    while (!ui_gpu_sampler_latest(sp, &s, &seq) && tries++ < 10000)
        usleep(1000);
    assert_true(seq >= 1);
    assert_int_equal(s.n, 3);
    unsigned first = seq;
    tries = 0;
    while (seq == first && tries++ < 10000) { /* a later one comes */
        ui_gpu_sampler_latest(sp, &s, &seq);
        usleep(1000);
    }
    assert_true(seq > first);
    unsigned now = seq;
    s.n = -1;
    if (!ui_gpu_sampler_latest(sp, &s, &seq)) assert_int_equal(s.n, -1); /* untouched */
    assert_true(seq >= now);
    ui_gpu_sampler_stop(sp);
    ui_gpu_sampler_stop(NULL);
    ui_gpu_destroy(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fake_gpus),      cmocka_unit_test(test_many_gpus_capped),
        cmocka_unit_test(test_no_nvml),        cmocka_unit_test(test_driver_not_loaded),
        cmocka_unit_test(test_engine_devices), cmocka_unit_test(test_sampler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* bench/sweep: the value list (commas, no empty or quoted values, at most BENCH_SWEEP_MAX), and
 * the table and plot from made-up points: a row per value (an error for a failed one), the
 * Pareto and best marks, the best point '*' in the plot, the legend, ASCII only, no row wider
 * than asked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sweep.h"

static void test_parse(void **state) {
    (void)state;
    bench_sweep_t sw;
    bench_err_t e;
    assert_int_equal(bench_sweep_parse("max-num-seqs", "64,128,256", &sw, &e), 0);
    assert_int_equal(sw.n, 3);
    assert_string_equal(sw.flag, "max-num-seqs");
    assert_string_equal(sw.pts[2].value, "256");
    const char *bad[] = {"", "1,,2", "1,", ",1", "a\"b", "1 2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(bench_sweep_parse("f", bad[i], &sw, &e), -1);
    char many[256] = "0";
    for (int i = 1; i <= BENCH_SWEEP_MAX; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), ",%d", i);
    assert_int_equal(bench_sweep_parse("f", many, &sw, &e), -1);
    assert_non_null(strstr(e.msg, "at most"));
}

static void test_print(void **state) {
    (void)state;
    bench_sweep_t sw;
    bench_err_t e;
    assert_int_equal(bench_sweep_parse("max-num-seqs", "64,128,256", &sw, &e), 0);
    sw.pts[0] = (bench_sweep_point_t){.value = "64",
                                      .ok = true,
                                      .out_tps = 1000,
                                      .req_tps = 4,
                                      .ttft_ms = 50,
                                      .tpot_ms = 10,
                                      .p99_tpot_ms = 12,
                                      .pareto = true};
    sw.pts[1] = (bench_sweep_point_t){.value = "128",
                                      .ok = true,
                                      .out_tps = 1800,
                                      .req_tps = 7,
                                      .ttft_ms = 80,
                                      .tpot_ms = 16,
                                      .p99_tpot_ms = 20,
                                      .pareto = true,
                                      .best = true};
    snprintf(sw.pts[2].error, sizeof sw.pts[2].error, "max-num-seqs=256: refused");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    bench_sweep_print(f, &sw, 80);
    fclose(f);
    assert_non_null(strstr(buf, "Sweep of max-num-seqs\n"));
    assert_non_null(strstr(buf, " 1 64             4.00      1000.0     50.00     10.00     "
                                "12.00  pareto\n"));
    assert_non_null(strstr(buf, " 2 128            7.00      1800.0     80.00     16.00     "
                                "20.00  pareto best *\n"));
    assert_non_null(strstr(buf, " 3 256        max-num-seqs=256: refused\n"));
    assert_non_null(strstr(buf, "output tok/s\n"));
    assert_non_null(strstr(buf, "mean TPOT (ms)"));
    assert_non_null(strstr(buf, "points: 1=64 *=128  (* best throughput)"));
    int stars = 0;
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        assert_true(n <= 80);
        if (memchr(line, '|', n)) stars += memchr(line, '*', n) != NULL;
        line = nl ? nl + 1 : NULL;
    }
    assert_int_equal(stars, 1); /* the best point, once */
    for (const unsigned char *p = (const unsigned char *)buf; *p; p++)
        assert_true(*p < 0x80);
    free(buf);
    bench_sweep_free(&sw);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_print),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

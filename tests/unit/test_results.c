/* results: the console's store of benchmark runs: a run without a successful request is not
 * kept; every kept run is a JSON file that a new store loads back in date order (so runs compare
 * across a restart); /compare's default pair is the last two complete runs of one profile
 * (stopped runs and other profiles are passed over); run numbers and result files name runs; a
 * file without a successful request, an unknown run and an unreadable file are clear errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "results.h"
#include "testutil.h"

/* A finished run as bench_run returns it (heap, with records). */
static bench_result_t *run(const char *profile, const char *date, int completed, double tps,
                           bool stopped, const char *flags) {
    bench_result_t *r = calloc(1, sizeof *r);
    assert_non_null(r);
    bench_options_default(&r->options);
    snprintf(r->options.profile, sizeof r->options.profile, "%s", profile);
    snprintf(r->date, sizeof r->date, "%s", date);
    snprintf(r->server_flags_json, sizeof r->server_flags_json, "%s", flags);
    r->stopped = stopped;
    r->options.num_prompts = completed ? completed : 5;
    bench_metrics_t *m = &r->metrics;
    m->completed = completed;
    m->failed = completed ? 0 : 5;
    m->duration = 2;
    m->output_throughput = tps;
    m->total_token_throughput = 2 * tps;
    m->ttft.mean = m->ttft.median = completed ? 10 : 0;
    m->n_percentiles = 1;
    m->percentile_points[0] = 99;
    r->n_records = 1;
    r->records = calloc(1, sizeof *r->records);
    r->records[0].itl = malloc(4 * sizeof(double));
    return r;
}

/* Whether the compare output t describes run tag ("base", "run1") as profile and date (and the
 * rest of the line, e.g. "  [stopped early]"). */
static bool described(const char *t, const char *tag, const char *what) {
    char key[32];
    snprintf(key, sizeof key, "  %-6s ", tag);
    const char *p = strstr(t, key);
    if (!p) return false;
    const char *nl = strchr(p, '\n');
    char line[256];
    snprintf(line, sizeof line, "%.*s", (int)(nl - p), p);
    const char *at = strstr(line, what);
    return at && strlen(at) == strlen(what);
}

/* What results_compare prints, or NULL with err set. */
static char *compare(results_t *rs, int argc, char *const *argv, err_t *err) {
    static char *buf; /* static: see test_bench_compare.c */
    static size_t len;
    buf = NULL;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    int rc = results_compare(rs, argc, argv, f, err);
    fclose(f);
    if (rc < 0) {
        assert_string_equal(buf, "");
        free(buf);
        return NULL;
    }
    return buf;
}

static int count_json(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c '\\.json$'", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    assert_int_equal(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

static void test_store_load_compare(void **state) {
    (void)state;
    char *tmp = tu_tmpdir();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/state/tachyon/results", tmp);
    err_t err = {{0}};
    results_t *rs = results_create(dir, &err);
    assert_non_null(rs);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    char note[512];
    assert_int_equal(results_load(rs, note, sizeof note), 0);
    assert_string_equal(note, "");
    assert_null(compare(rs, 0, NULL, &err));
    assert_non_null(strstr(err.msg, "no complete benchmark run"));

    const char *seqs4 = "{\"max-num-seqs\":\"4\"}";
    assert_int_equal(results_add(rs, run("short", "20260101-000001", 20, 100, false, "{}"), &err),
                     1);
    assert_int_equal(results_add(rs, run("long", "20260101-000002", 20, 50, false, "{}"), &err), 2);
    /* no successful request: not kept, no file, no number */
    assert_int_equal(results_add(rs, run("short", "20260101-000003", 0, 0, false, "{}"), &err), 0);
    assert_int_equal(results_add(rs, run("short", "20260101-000004", 7, 90, true, seqs4), &err), 3);
    /* only one complete short run so far: the newest complete run is short, no pair */
    err.msg[0] = '\0';
    assert_int_equal(results_add(rs, run("short", "20260101-000004", 20, 80, false, seqs4), &err),
                     4);
    assert_string_equal(err.msg, ""); /* the same second: saved as ...-2.json */
    assert_non_null(strstr(results_path(rs, 4), "20260101-000004-short-2.json"));
    assert_int_equal(results_count(rs), 4);
    assert_int_equal(count_json(dir), 4);
    assert_int_equal(results_get(rs, 1)->n_records, 0); /* records dropped once kept */

    /* default: run 4 (newest complete) against run 1 (the complete short one before it): the
     * stopped run 3 and the long run 2 are passed over */
    char *t = compare(rs, 0, NULL, &err);
    assert_non_null(t);
    assert_true(described(t, "base", "profile short  20260101-000001"));
    assert_true(described(t, "run1", "profile short  20260101-000004"));
    free(t);

    flag_values_t base;
    flags_init(&base);
    char flags[128];
    results_flags_text(results_get(rs, 4), &base, flags, sizeof flags);
    assert_string_equal(flags, "max-num-seqs=4");
    results_flags_text(results_get(rs, 1), &base, flags, sizeof flags);
    assert_string_equal(flags, "defaults");
    results_destroy(rs);

    /* a new store (a restart) loads the same runs in the same order; an unreadable file and a
     * run without success are skipped and said */
    tu_write_text(dir, "broken.json", "{not json");
    bench_result_t *none = run("short", "20260101-000009", 0, 0, false, "{}");
    char path[4200];
    snprintf(path, sizeof path, "%s/zz-none.json", dir);
    bench_err_t berr;
    assert_int_equal(bench_result_save_json(none, path, &berr), 0);
    bench_result_destroy(none);
    rs = results_create(dir, &err);
    assert_int_equal(results_load(rs, note, sizeof note), 4);
    assert_non_null(strstr(note, "4 benchmark runs loaded from "));
    assert_non_null(strstr(note, "1 without a successful request skipped"));
    assert_non_null(strstr(note, "1 unreadable skipped"));
    assert_int_equal(results_count(rs), 4);
    assert_string_equal(results_get(rs, 3)->date, "20260101-000004");
    assert_true(results_get(rs, 3)->stopped);
    t = compare(rs, 0, NULL, &err);
    assert_true(described(t, "base", "profile short  20260101-000001"));
    free(t);

    /* runs by number, by file path and by a name in the directory */
    char *two[] = {"#2", "1"};
    t = compare(rs, 2, two, &err);
    assert_true(described(t, "base", "profile long  20260101-000002"));
    free(t);
    char *files[] = {"20260101-000001-short.json", (char *)results_path(rs, 4), "3"};
    t = compare(rs, 3, files, &err);
    assert_non_null(t);
    assert_true(described(t, "run2", "profile short  20260101-000004  [stopped early]"));
    free(t);

    char *bad[] = {"1", "9"};
    assert_null(compare(rs, 2, bad, &err));
    assert_string_equal(err.msg, "no run 9: /results lists runs 1..4");
    char *zero[] = {"1", path};
    assert_null(compare(rs, 2, zero, &err));
    assert_non_null(strstr(err.msg, "has no successful request: nothing to compare"));
    char *missing[] = {"1", "nothing-here.json"};
    assert_null(compare(rs, 2, missing, &err));
    assert_non_null(strstr(err.msg, "is neither a run number"));
    char *one[] = {"1"};
    assert_null(compare(rs, 1, one, &err));

    /* the /results table lists every run */
    char *list = NULL;
    size_t len;
    FILE *f = open_memstream(&list, &len);
    results_list(rs, &base, f);
    fclose(f);
    assert_non_null(strstr(list, "  1  20260101-000001  short          20  20"));
    assert_non_null(strstr(list, "max-num-seqs=4 (stopped)\n"));
    free(list);
    results_destroy(rs);

    /* one complete run of each profile: no default pair, and the message says what to do */
    char dir2[4200];
    snprintf(dir2, sizeof dir2, "%s/other", tmp);
    rs = results_create(dir2, &err);
    results_add(rs, run("short", "20260101-000001", 20, 100, false, "{}"), &err);
    results_add(rs, run("long", "20260101-000002", 20, 100, false, "{}"), &err);
    assert_null(compare(rs, 0, NULL, &err));
    assert_non_null(strstr(err.msg, "run #2 (long) is the only one: /bench long again"));
    results_destroy(rs);
    results_destroy(NULL);
    tu_rmrf(tmp);
    free(tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_load_compare),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* ui_compare: /compare at a glance: the differing flags named, a verdict per metric with its
 * line style (better, worse, the same under 1 % without repeats or within the noise the repeats
 * measure), the noise from runs of the same workload and flags only, the count of verdicts, every
 * line within 80 columns, ASCII arrows. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>
#include <locale.h>

#include <cmocka.h>

#include "ui_compare.h"

typedef struct lines {
    int n;
    char text[64][256];
    ui_txt_style_t style[64];
} lines_t;

static void collect(void *user, ui_txt_style_t style, const char *line) {
    lines_t *l = user;
    assert_true(l->n < 64);
    snprintf(l->text[l->n], sizeof l->text[0], "%s", line);
    l->style[l->n++] = style;
}

/* The line starting with s (after its indent); -1 when none. */
static int find(const lines_t *l, const char *s) {
    for (int i = 0; i < l->n; i++) {
        const char *t = l->text[i];
        while (*t == ' ')
            t++;
        if (!strncmp(t, s, strlen(s))) return i;
    }
    return -1;
}

static bench_result_t *run(const char *flags, double out_tps, double tpot_ms) {
    bench_result_t *r = calloc(1, sizeof *r);
    bench_options_default(&r->options);
    snprintf(r->options.profile, sizeof r->options.profile, "short");
    snprintf(r->date, sizeof r->date, "20261126-050000");
    snprintf(r->server_flags_json, sizeof r->server_flags_json, "%s", flags);
    bench_metrics_t *m = &r->metrics;
    m->completed = 100;
    m->output_throughput = out_tps;
    m->total_token_throughput = 10 * out_tps;
    m->request_throughput = out_tps / 100;
    m->ttft.mean = 50;
    m->tpot.mean = tpot_ms;
    m->itl.mean = tpot_ms;
    m->n_percentiles = 1;
    m->percentile_points[0] = 99;
    m->ttft.percentiles[0] = 80;
    m->tpot.percentiles[0] = 2 * tpot_ms;
    return r;
}

static void compare(lines_t *l, const bench_result_t *base, const bench_result_t *r,
                    const bench_result_t *const *store, int n_store, bool ascii) {
    const bench_result_t *rs[2] = {base, r};
    char label[2][64] = {"#1", "#2"};
    results_set_t set = {.n = 2, .r = rs, .label = label};
    memset(l, 0, sizeof *l);
    ui_compare_lines(&set, store, n_store, ascii, collect, l);
    for (int i = 0; i < l->n; i++) { /* 80 columns at most */
        wchar_t w[256];
        size_t n = mbstowcs(w, l->text[i], 256);
        assert_true(n != (size_t)-1 && wcswidth(w, n) <= 80);
    }
}

static void test_verdicts(void **state) {
    (void)state;
    bench_result_t *base = run("{\"max-num-seqs\": \"256\"}", 1000, 10);
    bench_result_t *r = run("{\"max-num-seqs\": \"64\"}", 1200, 10.05);
    r->metrics.failed = 2;
    lines_t l;
    compare(&l, base, r, NULL, 0, false);
    assert_true(strstr(l.text[0], "/compare: base #1 (20261126-050000)") != NULL);
    assert_true(strstr(l.text[1], "workload: short, ") != NULL);
    int f = find(&l, "flags:");
    assert_true(f >= 0 && strstr(l.text[f], "max-num-seqs 256 -> 64"));
    int k = find(&l, "output tok/s");
    assert_true(strstr(l.text[k], "+20.0%") && strstr(l.text[k], "\xe2\x96\xb2 better"));
    assert_int_equal(l.style[k], UI_TXT_BETTER);
    k = find(&l, "TPOT mean ms"); /* +0.5 %: under 1 %, the same without repeats */
    assert_true(strstr(l.text[k], "= same") != NULL);
    assert_int_equal(l.style[k], UI_TXT_NORMAL);
    k = find(&l, "failed"); /* from none: worse */
    assert_true(strstr(l.text[k], "worse") != NULL);
    assert_int_equal(l.style[k], UI_TXT_WORSE);
    assert_true(find(&l, "no repeats:") >= 0);
    k = find(&l, "#2: ");
    assert_true(strstr(l.text[k], "3 better, 1 worse") != NULL); /* out, total, req/s; failed */
    assert_int_equal(l.style[k], UI_TXT_WORSE);
    /* ASCII arrows */
    compare(&l, base, r, NULL, 0, true);
    assert_true(strstr(l.text[find(&l, "output tok/s")], "+ better") != NULL);
    free(base);
    free(r);
}

/* Repeats of the base (same workload and flags) give the noise; a run with other flags or
 * another workload is no repeat. */
static void test_noise(void **state) {
    (void)state;
    const char *flags = "{\"max-num-seqs\": \"256\"}";
    bench_result_t *base = run(flags, 1000, 10), *again = run(flags, 1100, 10.4);
    bench_result_t *other_flags = run("{\"max-num-seqs\": \"8\"}", 5000, 1);
    bench_result_t *other_load = run(flags, 9000, 1);
    other_load->options.num_prompts = 7;
    bench_result_t *r = run(flags, 1040, 20);
    const bench_result_t *store[] = {base, again, other_flags, other_load, r};
    lines_t l;
    compare(&l, base, r, store, 5, false);
    int k = find(&l, "metric");
    assert_true(strstr(l.text[k], "noise") != NULL);
    /* base 1000, 1100: half the spread 50 over 1050 = 4.8 %; the run's own repeats (base, again
     * and itself: 1000..1100 over 1046.7) 4.8 %; +4 % is within */
    k = find(&l, "output tok/s");
    assert_true(strstr(l.text[k], "\xc2\xb1"
                                  "4.8%") != NULL);
    assert_true(strstr(l.text[k], "= same (noise)") != NULL);
    k = find(&l, "TPOT mean ms"); /* doubled: beyond any noise */
    assert_true(strstr(l.text[k], "worse") != NULL);
    assert_true(find(&l, "noise: half the spread of 3 runs like the base, 3 like #2") >= 0);
    assert_true(strstr(l.text[find(&l, "flags:")], "the same as the base's") != NULL);
    free(base), free(again), free(other_flags), free(other_load), free(r);
}

int main(void) {
    setlocale(LC_ALL, "C.UTF-8"); /* widths of the arrows and the plus-minus sign */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verdicts),
        cmocka_unit_test(test_noise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The expert-load heat map laid out as text (ui_experts): a dense model, the rows' glyphs, heat
 * classes and tails, the summary (window or since start, the busiest expert, the worst layer, an
 * idle engine) and its folding to a width, experts folded into cells in a narrow pane, and
 * Qwen3-235B's 94 layers x 128 experts clipped to a few rows with "N more". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ui_experts.h"

/* The i-th '\n'-separated line of text (static copy). */
static const char *line_of(const char *text, int i) {
    static char buf[512];
    for (; i > 0 && text; i--) {
        text = strchr(text, '\n');
        if (text) text++;
    }
    assert_non_null(text);
    const char *end = strchr(text, '\n');
    size_t n = end ? (size_t)(end - text) : strlen(text);
    assert_true(n < sizeof buf);
    memcpy(buf, text, n);
    buf[n] = 0;
    return buf;
}

static int count_lines(const char *text) {
    int n = 0;
    for (const char *p = text; *p; p++)
        n += *p == '\n';
    return n;
}

/* Two layers of 8 experts: in the window layer 0 balanced (10 each), layer 2 all on expert 5
 * but a little on 0; since start 100 each and 1 each. */
static stats_experts_t *two_layers(void) {
    static stats_experts_t x;
    memset(&x, 0, sizeof x);
    x.n_layers = 2;
    x.n_experts = 8;
    x.layer[0] = 0;
    x.layer[1] = 2;
    x.window_s = 9.5;
    for (int e = 0; e < 8; e++) {
        x.window[e] = 10;
        x.total[e] = 100;
        x.total[8 + e] = 1;
    }
    x.window[8 + 5] = 72;
    x.window[8 + 0] = 8;
    return &x;
}

static void test_dense(void **state) {
    (void)state;
    static stats_experts_t x; /* n_layers 0 */
    ui_experts_map_t m;
    ui_experts_map(&x, 80, 0, &m);
    assert_int_equal(m.n_rows, 0);
    assert_int_equal(m.hot_row, -1);
    char buf[256];
    ui_experts_summary(&m, buf, sizeof buf);
    assert_non_null(strstr(buf, "no MoE layers"));
    assert_int_equal(ui_experts_row(&m, 0, buf, sizeof buf, NULL, NULL), 0);
    char *map = ui_experts_render(&x, 80, 0, 0);
    assert_non_null(map);
    assert_non_null(strstr(line_of(map, 0), "no MoE layers"));
    assert_int_equal(count_lines(map), 1);
    free(map);
}

static void test_rows_and_summary(void **state) {
    (void)state;
    const stats_experts_t *x = two_layers();
    ui_experts_map_t m;
    ui_experts_map(x, 80, 0, &m);
    assert_true(m.window);
    assert_int_equal(m.per, 1);
    assert_int_equal(m.cells, 8);
    assert_int_equal(m.tokens, 160);
    assert_int_equal(m.since_start, 808);
    assert_int_equal(m.hot_row, 1);
    assert_int_equal(m.hot_expert, 5);
    assert_int_equal(m.hot_tokens, 72);
    assert_int_equal(m.worst_row, 1);
    assert_true(m.worst_imbalance > 7.19 && m.worst_imbalance < 7.21);
    char buf[512];
    uint8_t level[UI_EXPERTS_MAX_CELLS], heat[UI_EXPERTS_MAX_CELLS];
    ui_experts_row(&m, 0, buf, sizeof buf, level, heat);
    assert_string_equal(buf, "L0    |@@@@@@@@| x 1.00 80");
    for (int c = 0; c < 8; c++) {
        assert_int_equal(level[c], 9);
        assert_int_equal(heat[c], UI_EXPERTS_FAIR);
    }
    ui_experts_row(&m, 1, buf, sizeof buf, level, heat);
    assert_string_equal(buf, "L2    |.    @  | x 7.20 80");
    assert_int_equal(heat[5], UI_EXPERTS_HOT);  /* 72 against a mean of 10 */
    assert_int_equal(heat[0], UI_EXPERTS_FAIR); /* 8 */
    assert_int_equal(heat[1], UI_EXPERTS_NONE);
    assert_int_equal(level[1], 0);
    ui_experts_summary(&m, buf, sizeof buf);
    assert_string_equal(buf, "last 9.5 s: 2 MoE layers x 8 experts | 808 routed since start | "
                             "busiest L2 e5 72 tok, 90% of its layer | worst imbalance L2 x7.20");
    /* folded to 80 columns at its " | " */
    char fold[512];
    ui_experts_fold(buf, 80, fold, sizeof fold);
    assert_string_equal(fold, "last 9.5 s: 2 MoE layers x 8 experts | 808 routed since start\n"
                              "busiest L2 e5 72 tok, 90% of its layer | worst imbalance L2 x7.20");
    ui_experts_fold("aaa | bbb | ccc", 9, fold, sizeof fold);
    assert_string_equal(fold, "aaa | bbb\nccc");
    ui_experts_fold("aaaaaaaaaaaa | b", 5, fold, sizeof fold); /* a long part stays whole */
    assert_string_equal(fold, "aaaaaaaaaaaa\nb");
    ui_experts_fold("aaa | bbb", 200, fold, sizeof fold);
    assert_string_equal(fold, "aaa | bbb");
    /* the text copy: the summary folded, the legend, the rows */
    char *map = ui_experts_render(x, 80, 0, 0);
    assert_non_null(map);
    assert_int_equal(count_lines(map), 5);
    assert_non_null(strstr(line_of(map, 0), "808 routed since start"));
    assert_string_equal(line_of(map, 1),
                        "busiest L2 e5 72 tok, 90% of its layer | worst imbalance L2 x7.20");
    assert_non_null(strstr(line_of(map, 2), UI_EXPERTS_RAMP));
    assert_string_equal(line_of(map, 3), "L0    |@@@@@@@@| x 1.00 80");
    assert_string_equal(line_of(map, 4), "L2    |.    @  | x 7.20 80");
    free(map);
}

/* Heat by the cell against the row's mean expert: under half cold, up to 1.5x fair, up to 3x
 * warm, above hot; the glyph by the row's busiest cell. */
static void test_heat_classes(void **state) {
    (void)state;
    static stats_experts_t x;
    x.n_layers = 1;
    x.n_experts = 8;
    x.window_s = 10;
    const uint32_t v[8] = {0, 19, 20, 60, 61, 121, 39, 0}; /* 320 tokens: a mean of 40 */
    for (int e = 0; e < 8; e++)
        x.window[e] = v[e];
    ui_experts_map_t m;
    ui_experts_map(&x, 80, 0, &m);
    char buf[256];
    uint8_t level[UI_EXPERTS_MAX_CELLS], heat[UI_EXPERTS_MAX_CELLS];
    ui_experts_row(&m, 0, buf, sizeof buf, level, heat);
    const uint8_t want[8] = {UI_EXPERTS_NONE, UI_EXPERTS_COLD, UI_EXPERTS_FAIR, UI_EXPERTS_FAIR,
                             UI_EXPERTS_WARM, UI_EXPERTS_HOT,  UI_EXPERTS_FAIR, UI_EXPERTS_NONE};
    for (int e = 0; e < 8; e++) {
        assert_int_equal(heat[e], want[e]);
        assert_int_equal(level[e], v[e] ? 1 + 8 * v[e] / 121 : 0);
        assert_int_equal(buf[UI_EXPERTS_LABEL_W + e], UI_EXPERTS_RAMP[level[e]]);
    }
    assert_int_equal(level[5], 9);
}

/* An idle engine: the totals since start; before any token, "no tokens routed yet". */
static void test_since_start(void **state) {
    (void)state;
    static stats_experts_t x;
    x.n_layers = 1;
    x.n_experts = 4;
    x.layer[0] = 3;
    x.window_s = 10;
    ui_experts_map_t m;
    ui_experts_map(&x, 80, 0, &m);
    char buf[256];
    ui_experts_summary(&m, buf, sizeof buf);
    assert_string_equal(buf,
                        "no tokens routed yet: 1 MoE layer x 4 experts | 0 routed since start");
    ui_experts_row(&m, 0, buf, sizeof buf, NULL, NULL);
    assert_string_equal(buf, "L3    |    | x 0.00 0");
    x.total[2] = 6;
    ui_experts_map(&x, 80, 0, &m);
    assert_false(m.window);
    ui_experts_summary(&m, buf, sizeof buf);
    assert_non_null(strstr(buf, "since start (none in the last 10 s)"));
    assert_non_null(strstr(buf, "busiest L3 e2 6 tok, 100% of its layer"));
    ui_experts_row(&m, 0, buf, sizeof buf, NULL, NULL);
    assert_string_equal(buf, "L3    |  @ | x 4.00 6");
}

/* The engine refreshes the counts only while it runs: idle a while, the summary says so; idle
 * for the whole window, nothing was routed in it and the totals since start are shown. */
static void test_idle(void **state) {
    (void)state;
    stats_experts_t *x = two_layers();
    x->t = 100;
    ui_experts_map_t m;
    char buf[512];
    ui_experts_map(x, 80, 100.2, &m);
    assert_true(m.window);
    ui_experts_summary(&m, buf, sizeof buf);
    assert_true(strncmp(buf, "last 9.5 s: 2 MoE layers", 24) == 0);
    ui_experts_map(x, 80, 105, &m);
    assert_true(m.window);
    ui_experts_summary(&m, buf, sizeof buf);
    assert_true(strncmp(buf, "last 9.5 s, idle 5 s: 2 MoE layers", 34) == 0);
    ui_experts_map(x, 80, 111, &m);
    assert_false(m.window);
    assert_int_equal(m.tokens, 808);
    ui_experts_summary(&m, buf, sizeof buf);
    assert_true(strncmp(buf, "since start (none in the last 10 s), idle 11 s: 2 MoE", 53) == 0);
    ui_experts_row(&m, 0, buf, sizeof buf, NULL, NULL);
    assert_string_equal(buf, "L0    |@@@@@@@@| x 1.00 800");
}

/* 128 experts in a 40-column pane: 9 a cell, 15 cells. */
static void test_folded_cells(void **state) {
    (void)state;
    static stats_experts_t big;
    big.n_layers = 1;
    big.n_experts = 128;
    big.layer[0] = 47;
    for (int e = 0; e < 128; e++)
        big.total[e] = e < 6 ? 60 : 6; /* the first cell: (6 x 60 + 3 x 6) / 9 = 42 */
    ui_experts_map_t m;
    ui_experts_map(&big, 10, 0, &m); /* narrower than the least: laid out as 40 */
    assert_int_equal(m.per, 9);
    assert_int_equal(m.cells, 15);
    char *map = ui_experts_render(&big, 40, 0, 0);
    assert_non_null(strstr(line_of(map, 0), "since start"));
    assert_non_null(strstr(map, "(9 a cell)"));
    const char *row = strstr(map, "\nL47 ");
    assert_non_null(row);
    assert_string_equal(line_of(row + 1, 0), "L47   |@::::::::::::::| x 7.03 1092");
    free(map);
}

/* Qwen3-235B-A22B: 94 MoE layers x 128 experts, every row within the width, clipped to a few
 * rows with the rest counted; the busiest expert and the worst layer found among them all. */
static void test_235b_clipped(void **state) {
    (void)state;
    static stats_experts_t x;
    x.n_layers = 94;
    x.n_experts = 128;
    x.window_s = 10;
    for (int r = 0; r < 94; r++) {
        x.layer[r] = (int16_t)r;
        for (int e = 0; e < 128; e++)
            x.window[r * 128 + e] = (uint32_t)(8 + (r * 7 + e * 13) % 17);
    }
    x.window[80 * 128 + 100] = 5000; /* layer 80's expert 100 takes most of it */
    for (int width = 60; width <= 200; width += 70) {
        ui_experts_map_t m;
        ui_experts_map(&x, width, 0, &m);
        assert_int_equal(m.hot_row, 80);
        assert_int_equal(m.hot_expert, 100);
        assert_int_equal(m.worst_row, 80);
        assert_int_equal(m.cells * m.per >= 128, true);
        assert_int_equal((m.cells - 1) * m.per < 128, true);
        char buf[1024];
        for (int r = 0; r < 94; r++) {
            int n = ui_experts_row(&m, r, buf, sizeof buf, NULL, NULL);
            assert_true(n <= width);
            assert_int_equal((int)strlen(buf), n);
        }
        char *map = ui_experts_render(&x, width, 0, 6);
        assert_non_null(map);
        char fold[512];
        ui_experts_summary(&m, buf, sizeof buf);
        ui_experts_fold(buf, width, fold, sizeof fold);
        int head = count_lines(fold) + 2; /* the summary's rows and the legend */
        assert_int_equal(count_lines(map), head + 6 + 1);
        for (int i = 0; i < head - 1; i++)
            assert_true((int)strlen(line_of(map, i)) <= width);
        assert_string_equal(line_of(map, head + 6), "... 88 more MoE layers");
        assert_non_null(strstr(map, "busiest L80 e100 5000 tok"));
        assert_non_null(strstr(line_of(map, head), "L0    |"));
        assert_non_null(strstr(line_of(map, head + 5), "L5    |"));
        free(map);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense),        cmocka_unit_test(test_rows_and_summary),
        cmocka_unit_test(test_heat_classes), cmocka_unit_test(test_since_start),
        cmocka_unit_test(test_idle),         cmocka_unit_test(test_folded_cells),
        cmocka_unit_test(test_235b_clipped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

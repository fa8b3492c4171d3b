/* layout: for every terminal size from 40x12 to 300x100, either the "too small" screen (below the
 * minimum) or a tiling where every shown panel lies inside the screen, no two overlap, together
 * they cover every cell, the panels that are always shown are never empty, and each is big enough
 * to draw (the numbers band under the header within the rows asked for; charts with a title and two
 * plot rows, a chat pane of a few rows, one-row REPL and status at the bottom). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "layout.h"

static bool inside(layout_rect_t r, int w, int h) {
    return r.x >= 0 && r.y >= 0 && r.x + r.w <= w && r.y + r.h <= h;
}

/* Every rectangle of l that is shown: charts, then the named panels. */
static int shown(const layout_t *l, layout_rect_t *out) {
    int n = 0;
    for (int i = 0; i < l->n_charts; i++)
        out[n++] = l->charts[i];
    const layout_rect_t named[] = {l->header, l->vitals, l->flags, l->requests,
                                   l->chat,   l->repl,   l->status};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (!layout_rect_empty(named[i])) out[n++] = named[i];
    return n;
}

static void check_size(int w, int h, int band, bool idle, int n_charts) {
    layout_t l;
    layout_compute_idle(w, h, band, idle, n_charts, &l);
    assert_int_equal(l.min_w, LAYOUT_MIN_W);
    assert_int_equal(l.min_h, LAYOUT_MIN_H);
    if (w < LAYOUT_MIN_W || h < LAYOUT_MIN_H) {
        assert_true(l.too_small);
        return;
    }
    assert_false(l.too_small);
    /* the extra charts where their rows fit (always from 84 columns at 24 rows), else none */
    assert_true(l.n_charts == n_charts || l.n_charts == LAYOUT_CHARTS);
    if (w >= 84 && h >= 24 && band <= 4) assert_int_equal(l.n_charts, n_charts);
    assert_true(l.chart_cols * l.chart_rows >= l.n_charts);
    assert_true(l.chart_cols * (l.chart_rows - 1) < l.n_charts);

    /* always shown, with the sizes they need */
    assert_true(l.header.y == 0 && l.header.h == 1 && l.header.w == w);
    assert_true(l.status.y == h - 1 && l.status.h == 1 && l.status.w == w);
    assert_true(l.repl.y == h - 2 && l.repl.h == 1 && l.repl.w == w);
    assert_true(l.chat.h >= 4 && l.chat.w >= 40);
    for (int i = 0; i < l.n_charts; i++)
        assert_true(l.charts[i].h >= 3 && l.charts[i].w >= 20);
    /* optional panels: both or neither, and readable when shown */
    assert_int_equal(layout_rect_empty(l.flags), layout_rect_empty(l.requests));
    if (!layout_rect_empty(l.flags)) {
        assert_true(l.flags.w >= 30 && l.flags.h >= 3);
        assert_true(l.requests.w >= 30 && l.requests.h >= 3);
    }
    /* the wide layouts keep flags and requests on screen (the tmux tests read them at 120x40) */
    if (w >= 110) assert_false(layout_rect_empty(l.flags));

    /* the numbers band: under the header, never more rows than asked */
    if (!layout_rect_empty(l.vitals))
        assert_true(l.vitals.y == 1 && l.vitals.w == w && l.vitals.h <= band);
    if (band == 0) assert_true(layout_rect_empty(l.vitals));
    if (h >= 24 && band) assert_true(l.vitals.h >= (band < 4 ? band : 4)); /* 80x24 has room */

    layout_rect_t r[LAYOUT_MAX_CHARTS + 7];
    int n = shown(&l, r);
    long area = 0;
    for (int i = 0; i < n; i++) {
        assert_false(layout_rect_empty(r[i]));
        if (!inside(r[i], w, h)) fail_msg("%dx%d: rect %d outside the screen", w, h, i);
        area += (long)r[i].w * r[i].h;
        for (int j = i + 1; j < n; j++)
            if (layout_rect_overlap(r[i], r[j]))
                fail_msg("%dx%d: rects %d and %d overlap", w, h, i, j);
    }
    /* no overlap and the same area as the screen: every cell belongs to exactly one panel */
    assert_int_equal(area, (long)w * h);
}

static void test_all_sizes(void **state) {
    (void)state;
    for (int w = 40; w <= 300; w++)
        for (int h = 12; h <= 100; h++)
            for (int band = 0; band <= 8; band += 4)
                for (int idle = 0; idle < 2; idle++)
                    for (int n = LAYOUT_CHARTS; n <= LAYOUT_MAX_CHARTS; n++)
                        check_size(w, h, band, idle, n);
}

static void test_degenerate(void **state) {
    (void)state;
    const int sizes[][2] = {{0, 0}, {-5, 10}, {10, -1}, {1, 1}, {59, 100}, {300, 15}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        layout_t l;
        layout_compute(sizes[i][0], sizes[i][1], 0, &l);
        assert_true(l.too_small);
        assert_int_equal(l.n_charts, 0);
        assert_true(layout_rect_empty(l.chat));
    }
}

static void test_known_sizes(void **state) {
    (void)state;
    layout_t l;
    layout_compute(120, 40, 0, &l); /* the tmux tests' pane */
    assert_int_equal(l.chart_cols, 3);
    assert_int_equal(l.flags.x, l.charts[2].x + l.charts[2].w);
    assert_true(l.flags.h >= 8);     /* room for the flags the tmux tests look at */
    assert_int_equal(l.chat.w, 120); /* tables (/compare) get the whole width */
    layout_compute(60, 20, 0, &l);   /* the resize test's small size: no side panels */
    assert_false(l.too_small);
    assert_int_equal(l.chart_cols, 2);
    assert_true(layout_rect_empty(l.flags));
    layout_compute_idle(120, 40, 0, false, LAYOUT_MAX_CHARTS, &l); /* with the spec chart */
    assert_int_equal(l.n_charts, LAYOUT_MAX_CHARTS);
    assert_int_equal(l.chart_cols, 4);
    assert_int_equal(l.chart_rows, 2);
    assert_int_equal(l.charts[6].x + l.charts[6].w, l.flags.x);    /* the short row spread out */
    layout_compute_idle(200, 50, 0, false, LAYOUT_MAX_CHARTS, &l); /* one row */
    assert_int_equal(l.chart_rows, 1);
    layout_compute(LAYOUT_MIN_W, LAYOUT_MIN_H, 0, &l);
    assert_false(l.too_small);
    layout_compute(LAYOUT_MIN_W - 1, LAYOUT_MIN_H, 0, &l);
    assert_true(l.too_small);
    layout_compute(LAYOUT_MIN_W, LAYOUT_MIN_H - 1, 0, &l);
    assert_true(l.too_small);
}

static void test_overlap_helper(void **state) {
    (void)state;
    layout_rect_t a = {0, 0, 10, 5}, b = {9, 4, 3, 3}, c = {10, 0, 5, 5}, e = {2, 2, 0, 4};
    assert_true(layout_rect_overlap(a, b));
    assert_false(layout_rect_overlap(a, c));
    assert_false(layout_rect_overlap(a, e));
    assert_true(layout_rect_empty(e));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_sizes),
        cmocka_unit_test(test_degenerate),
        cmocka_unit_test(test_known_sizes),
        cmocka_unit_test(test_overlap_helper),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

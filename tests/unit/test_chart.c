/* chart: exact braille output for small series (the code points worked out by hand from the dot
 * layout: left column bottom-up 0x40 0x04 0x02 0x01, right 0x80 0x20 0x10 0x08, U+2800 + bits
 * is E2, A0 | bits >> 6, 80 | bits & 3F in UTF-8), line style, the ASCII fallback, NaN gaps,
 * auto range rounding, right alignment, every small width and height, titles, labels and
 * downsampling. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chart.h"

static char rows[CHART_BUF_SIZE(64, 8)];

static chart_opts_t fixed(int w, int h, double lo, double hi) {
    chart_opts_t o = {.width = w, .height = h, .glyphs = CHART_BRAILLE, .style = CHART_AREA};
    o.ymin = lo;
    o.ymax = hi;
    return o;
}

static const char *render(const double *s, int n, chart_opts_t o, int r) {
    double top = chart_render(s, n, &o, rows, sizeof rows);
    assert_false(isnan(top));
    return chart_row(rows, o.width, r);
}

static void test_braille_one_row(void **state) {
    (void)state;
    /* 0..4 over 4 levels: 0 -> 1 dot (baseline), 1 -> 1, 2 -> 2, 3 -> 3.
     * Cell 0: left 1 (0x40) | right 1 (0x80) = 0xC0 -> U+28C0.
     * Cell 1: left 2 (0x44) | right 3 (0xB0) = 0xF4 -> U+28F4. */
    const double s[] = {0, 1, 2, 3};
    assert_string_equal(render(s, 4, fixed(2, 1, 0, 4), 0), "\xE2\xA3\x80\xE2\xA3\xB4");
    /* Full: left 4 (0x47) | right 4 (0xB8) = 0xFF -> U+28FF. */
    const double full[] = {4, 4};
    assert_string_equal(render(full, 2, fixed(1, 1, 0, 4), 0), "\xE2\xA3\xBF");
}

static void test_braille_two_rows_and_gaps(void **state) {
    (void)state;
    /* 0..8 over 2 rows (8 levels): 8 -> 8, 5 -> 5, NaN -> gap, 1 -> 1.
     * Top row (levels 5-8): cell 0 left 4 (0x47) | right 1 (0x80) = 0xC7 -> U+28C7; cell 1 only
     * the gap and a sample below this row: blank.
     * Bottom row: cell 0 left 4 | right 4 = U+28FF; cell 1 right 1 = 0x80 -> U+2880. */
    const double s[] = {8, 5, NAN, 1};
    chart_opts_t o = fixed(2, 2, 0, 8);
    assert_string_equal(render(s, 4, o, 0), "\xE2\xA3\x87 ");
    assert_string_equal(render(s, 4, o, 1), "\xE2\xA3\xBF\xE2\xA2\x80");
    /* Out of range: above clamps to full, below shows nothing. */
    const double out[] = {150, -5};
    o = fixed(1, 1, 0, 100);
    assert_string_equal(render(out, 2, o, 0), "\xE2\xA1\x87"); /* 0x47 -> U+2847 */
    /* Rounding: 0..100 over 4 levels, 60 -> 2.4 -> 2 (0x44), 63 -> 2.52 -> 3 (0xB0): 0xF4. */
    const double rnd[] = {60, 63};
    assert_string_equal(render(rnd, 2, o, 0), "\xE2\xA3\xB4");
}

static void test_right_alignment(void **state) {
    (void)state;
    /* One sample in a 3-cell chart: the newest sits in the last cell's right column.
     * Right 4 = 0xB8 -> U+28B8; the other cells are blank. */
    const double one[] = {4};
    assert_string_equal(render(one, 1, fixed(3, 1, 0, 4), 0), "  \xE2\xA2\xB8");
    /* Three samples: the oldest lands in a right column. Cell 1: right 1 (0x80) -> U+2880;
     * cell 2: left 2 (0x44) | right 3 (0xB0) -> U+28F4. */
    const double three[] = {1, 2, 3};
    assert_string_equal(render(three, 3, fixed(3, 1, 0, 4), 0), " \xE2\xA2\x80\xE2\xA3\xB4");
    /* More samples than 2*width: only the newest 2 show (1 -> 0x40, 2 -> 0xA0: U+28E0). */
    const double many[] = {4, 4, 4, 1, 2};
    assert_string_equal(render(many, 5, fixed(1, 1, 0, 4), 0), "\xE2\xA3\xA0");
    /* No samples: all blank. */
    assert_string_equal(render(NULL, 0, fixed(3, 1, 0, 4), 0), "   ");
}

static void test_line_style(void **state) {
    (void)state;
    /* 0..8 over 2 rows, {8, 3}: left's top level is 8 (row 0, height 4: 0x01 -> U+2801);
     * right's is 3 (row 1, height 3: 0x10 -> U+2810). Nothing else is drawn. */
    const double s[] = {8, 3};
    chart_opts_t o = fixed(1, 2, 0, 8);
    o.style = CHART_LINE;
    assert_string_equal(render(s, 2, o, 0), "\xE2\xA0\x81");
    assert_string_equal(render(s, 2, o, 1), "\xE2\xA0\x90");
}

static void test_ascii_fallback(void **state) {
    (void)state;
    /* 0..8 over 2 rows; a cell takes its higher sample: 8, 6, gap.
     * Top row: 4 levels '#', 2 ':', blank. Bottom row: '#', '#', blank. */
    const double s[] = {8, 1, 4, 6, NAN, NAN};
    chart_opts_t o = fixed(3, 2, 0, 8);
    o.glyphs = CHART_ASCII;
    assert_string_equal(render(s, 6, o, 0), "#: ");
    assert_string_equal(render(s, 6, o, 1), "## ");
    /* One row, levels 1 and 3: '.' and '|'. */
    const double lv[] = {1, NAN, 3, 1};
    o = fixed(2, 1, 0, 4);
    o.glyphs = CHART_ASCII;
    assert_string_equal(render(lv, 4, o, 0), ".|");
    /* ASCII line style: only the top level's row. */
    const double ln[] = {8, 8};
    o = fixed(1, 2, 0, 8);
    o.glyphs = CHART_ASCII;
    o.style = CHART_LINE;
    assert_string_equal(render(ln, 2, o, 0), "#");
    assert_string_equal(render(ln, 2, o, 1), " ");
}

static void test_auto_range(void **state) {
    (void)state;
    assert_true(chart_nice_top(12, 1) == 12);
    assert_true(chart_nice_top(13, 1) == 15);
    assert_true(chart_nice_top(0.7, 0.01) == 0.8);
    assert_true(chart_nice_top(101, 1) == 120);
    assert_true(chart_nice_top(7, 1) == 8);
    assert_true(chart_nice_top(9, 1) == 10);
    assert_true(chart_nice_top(10.5, 1) == 12);
    assert_true(chart_nice_top(2600, 1) == 3000);
    assert_true(chart_nice_top(45000, 1) == 50000);
    assert_true(chart_nice_top(0.05, 0.01) == 0.05);
    assert_true(chart_nice_top(0.3, 1) == 1); /* the floor */
    assert_true(chart_nice_top(0, 0) == 1);
    assert_true(chart_nice_top(NAN, 5) == 5);
    assert_true(chart_nice_top(INFINITY, 2) == 2);

    /* {0, 13}: top 15; 13/15 * 4 = 3.47 -> 3 (0xB0), 0 -> baseline (0x40): U+28F0. */
    const double s[] = {0, 13};
    chart_opts_t o = {.width = 1, .height = 1, .auto_range = true, .auto_floor = 1};
    assert_true(chart_render(s, 2, &o, rows, sizeof rows) == 15);
    assert_string_equal(chart_row(rows, 1, 0), "\xE2\xA3\xB0");
    /* Only visible samples count: the 100 scrolled out of a 1-cell chart. */
    const double old[] = {100, 2, 3};
    assert_true(chart_render(old, 3, &o, rows, sizeof rows) == 3);
    /* Idle or empty: the floor. */
    const double idle[] = {0, 0, NAN};
    assert_true(chart_render(idle, 3, &o, rows, sizeof rows) == 1);
    assert_true(chart_render(NULL, 0, &o, rows, sizeof rows) == 1);
}

/* Code points in a row: each must be ' ' or a braille character, exactly width of them. */
static int cells(const char *row) {
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)row; *p;) {
        if (*p == ' ') {
            p++;
        } else {
            assert_int_equal(p[0], 0xE2);
            assert_true(p[1] == 0xA0 || p[1] == 0xA1 || p[1] == 0xA2 || p[1] == 0xA3);
            assert_true((p[2] & 0xC0) == 0x80);
            p += 3;
        }
        n++;
    }
    return n;
}

static void test_all_small_sizes(void **state) {
    (void)state;
    double s[200];
    for (int i = 0; i < 200; i++)
        s[i] = i % 7 == 3 ? NAN : (i * 37) % 101;
    for (int w = 1; w <= 64; w++) {
        for (int h = 1; h <= 8; h++) {
            for (int n = 0; n <= 200; n += 23) {
                chart_opts_t o = {.width = w, .height = h, .auto_range = true, .auto_floor = 1};
                assert_int_equal(chart_buf_size(w, h), CHART_BUF_SIZE(w, h));
                assert_false(isnan(chart_render(s, n, &o, rows, chart_buf_size(w, h))));
                int dots_col_total = 0;
                for (int r = 0; r < h; r++) {
                    const char *row = chart_row(rows, w, r);
                    assert_int_equal(cells(row), w);
                    assert_true(strlen(row) < chart_row_size(w));
                    dots_col_total += (int)strlen(row);
                }
                if (n == 0) assert_int_equal(dots_col_total, w * h); /* all blank */
                o.glyphs = CHART_ASCII;
                chart_render(s, n, &o, rows, chart_buf_size(w, h));
                for (int r = 0; r < h; r++)
                    assert_int_equal(strlen(chart_row(rows, w, r)), w);
            }
        }
    }
}

static void test_invalid(void **state) {
    (void)state;
    const double s[] = {1};
    chart_opts_t o = fixed(0, 1, 0, 1);
    assert_true(isnan(chart_render(s, 1, &o, rows, sizeof rows)));
    o = fixed(2, 2, 5, 5);
    assert_true(isnan(chart_render(s, 1, &o, rows, sizeof rows)));
    o = fixed(2, 2, 0, INFINITY);
    assert_true(isnan(chart_render(s, 1, &o, rows, sizeof rows)));
    o = fixed(2, 2, 0, 1);
    assert_true(isnan(chart_render(s, 1, &o, rows, chart_buf_size(2, 2) - 1)));
    assert_true(isnan(chart_render(NULL, 1, &o, rows, sizeof rows)));
    assert_int_equal(chart_buf_size(0, 3), 0);
}

static const char *fmt(double v) {
    static char b[32];
    chart_format_value(v, b, sizeof b);
    return b;
}

static const char *win(double s) {
    static char b[32];
    chart_format_window(s, b, sizeof b);
    return b;
}

static void test_format(void **state) {
    (void)state;
    assert_string_equal(fmt(0), "0");
    assert_string_equal(fmt(12), "12");
    assert_string_equal(fmt(9999), "9999");
    assert_string_equal(fmt(12345), "12.3k");
    assert_string_equal(fmt(2000000), "2M");
    assert_string_equal(fmt(1234567), "1.23M");
    assert_string_equal(fmt(999999), "1M");
    assert_string_equal(fmt(3.5e9), "3.5G");
    assert_string_equal(fmt(0.5), "0.5");
    assert_string_equal(fmt(0.125), "0.125");
    assert_string_equal(fmt(2.25), "2.25");
    assert_string_equal(fmt(12.5), "12.5");
    assert_string_equal(fmt(123.4), "123");
    assert_string_equal(fmt(-3), "-3");
    assert_string_equal(fmt(-45000), "-45k");
    assert_string_equal(fmt(0.0001), "1e-04");
    assert_string_equal(fmt(NAN), "-");
    char small[4];
    assert_int_equal(chart_format_value(12345, small, sizeof small), 3);
    assert_string_equal(small, "12.");

    assert_string_equal(win(60), "60 s");
    assert_string_equal(win(90), "90 s");
    assert_string_equal(win(2.5), "2.5 s");
    assert_string_equal(win(120), "2 min");
    assert_string_equal(win(150), "2 min 30 s");
    assert_string_equal(win(5400), "90 min");
    assert_string_equal(win(7200), "2 h");
    assert_string_equal(win(9000), "2 h 30 min");
    assert_string_equal(win(NAN), "-");
}

static void test_title(void **state) {
    (void)state;
    char b[128];
    assert_int_equal(chart_title(b, sizeof b, 80, "running seqs", 60, 12, ""), 31);
    assert_string_equal(b, "running seqs  last 60 s  now 12");
    chart_title(b, sizeof b, 80, "gen tok/s", 120, 15000, "tok/s");
    assert_string_equal(b, "gen tok/s  last 2 min  now 15k tok/s");
    chart_title(b, sizeof b, 80, "KV cache", 30, 45.5, "%");
    assert_string_equal(b, "KV cache  last 30 s  now 45.5%");
    chart_title(b, sizeof b, 80, "TTFT", 60, NAN, "ms");
    assert_string_equal(b, "TTFT  last 60 s  now -");
    /* Narrower: drop the words, then the window, then the value, then cut the name. */
    chart_title(b, sizeof b, 22, "running seqs", 60, 12, "");
    assert_string_equal(b, "running seqs  60 s  12");
    chart_title(b, sizeof b, 21, "running seqs", 60, 12, "");
    assert_string_equal(b, "running seqs  12");
    chart_title(b, sizeof b, 15, "running seqs", 60, 12, "");
    assert_string_equal(b, "running seqs");
    chart_title(b, sizeof b, 7, "running seqs", 60, 12, "");
    assert_string_equal(b, "running");
    assert_int_equal(chart_title(b, sizeof b, 0, "x", 1, 1, ""), 0);
    assert_string_equal(b, "");
    char tiny[5];
    chart_title(tiny, sizeof tiny, 80, "running seqs", 60, 12, "");
    assert_string_equal(tiny, "runn");
}

static void test_ylabels(void **state) {
    (void)state;
    char l[8][8];
    chart_ylabels(0, 100, 5, 4, &l[0][0], sizeof l[0]);
    assert_string_equal(l[0], " 100");
    assert_string_equal(l[1], "    ");
    assert_string_equal(l[2], "  50");
    assert_string_equal(l[3], "    ");
    assert_string_equal(l[4], "   0");
    chart_ylabels(0, 12, 2, 3, &l[0][0], sizeof l[0]);
    assert_string_equal(l[0], " 12");
    assert_string_equal(l[1], "  0");
    chart_ylabels(0, 15000, 6, 4, &l[0][0], sizeof l[0]);
    assert_string_equal(l[0], " 15k");
    assert_string_equal(l[3], "7500"); /* height 6: row 3 is the middle */
    chart_ylabels(0, 12500, 1, 3, &l[0][0], sizeof l[0]);
    assert_string_equal(l[0], "12k"); /* "12.5k" loses its decimals */
    chart_ylabels(0, 12500, 1, 2, &l[0][0], sizeof l[0]);
    assert_string_equal(l[0], "##");
}

static void test_downsample(void **state) {
    (void)state;
    const double s[] = {1, 5, NAN, 2, NAN, NAN, 3};
    double d[8];
    /* Buckets of 2 from the newest: {NAN,3} {2,NAN} {5,NAN} {1}. */
    assert_int_equal(chart_downsample(s, 7, 2, d, 8), 4);
    assert_true(d[0] == 1 && d[1] == 5 && d[2] == 2 && d[3] == 3);
    assert_int_equal(chart_downsample(s, 7, 2, d, 2), 2); /* the newest kept */
    assert_true(d[0] == 2 && d[1] == 3);
    const double g[] = {NAN, NAN, 1};
    assert_int_equal(chart_downsample(g, 3, 2, d, 8), 2);
    assert_true(isnan(d[0]) && d[1] == 1);
    assert_int_equal(chart_downsample(s, 7, 1, d, 8), 7);
    assert_true(isnan(d[2]) && d[6] == 3);
    assert_int_equal(chart_downsample(s, 7, 0, d, 8), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_braille_one_row), cmocka_unit_test(test_braille_two_rows_and_gaps),
        cmocka_unit_test(test_right_alignment), cmocka_unit_test(test_line_style),
        cmocka_unit_test(test_ascii_fallback),  cmocka_unit_test(test_auto_range),
        cmocka_unit_test(test_all_small_sizes), cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_format),          cmocka_unit_test(test_title),
        cmocka_unit_test(test_ylabels),         cmocka_unit_test(test_downsample),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The console's non-curses parts: the metric rings and their resampling to a chart's points
 * (ui_series), the output pane's line ring, streaming appends and width-aware wrapping with
 * scrolling (ui_text), the cross-thread event queue with its eventfd wake-up on the
 * empty -> non-empty transition only (ui_queue), and the header's fields fitted to the width
 * with the URL and the served model name last to go (ui_header). The expert-load heat map is
 * test_ui_experts.c's. */
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ui_header.h"
#include "ui_queue.h"
#include "ui_series.h"
#include "ui_text.h"

// ---------------------------------------------------------------------------------------------
// ui_series

static void test_series_ring(void **state) {
    (void)state;
    static ui_series_t s;
    ui_series_init(&s);
    assert_true(isnan(ui_series_last(&s)));
    for (int i = 0; i < UI_SERIES_CAP + 10; i++)
        ui_series_push(&s, i);
    assert_int_equal(s.n, UI_SERIES_CAP);
    assert_true(ui_series_last(&s) == UI_SERIES_CAP + 9);
    assert_true(ui_series_at(&s, 1) == UI_SERIES_CAP + 8);
    assert_true(ui_series_at(&s, UI_SERIES_CAP - 1) == 10); /* the oldest kept */
    assert_true(isnan(ui_series_at(&s, UI_SERIES_CAP)));
    assert_true(isnan(ui_series_at(&s, -1)));
}

static void test_series_resample(void **state) {
    (void)state;
    static ui_series_t s;
    ui_series_init(&s);
    for (int i = 1; i <= 8; i++)
        ui_series_push(&s, i); /* 1 .. 8, 8 newest */
    double out[16];
    /* span 8 onto 4 points: max of each pair of samples */
    ui_series_resample(&s, 8, out, 4);
    assert_true(out[0] == 2 && out[1] == 4 && out[2] == 6 && out[3] == 8);
    /* span 4 onto 8 points: each sample repeated twice, newest at the right */
    ui_series_resample(&s, 4, out, 8);
    double want[] = {5, 5, 6, 6, 7, 7, 8, 8};
    for (int i = 0; i < 8; i++)
        assert_true(out[i] == want[i]);
    /* a span reaching before the oldest sample: NaN on the left */
    ui_series_resample(&s, 16, out, 8);
    for (int i = 0; i < 4; i++)
        assert_true(isnan(out[i]));
    assert_true(out[4] == 2 && out[7] == 8);
    /* missing samples inside the span are skipped, a slice of only NaN stays NaN */
    ui_series_push(&s, NAN);
    ui_series_resample(&s, 2, out, 2);
    assert_true(out[0] == 8 && isnan(out[1]));
    ui_series_resample(&s, 2, out, 1);
    assert_true(out[0] == 8);
}

// ---------------------------------------------------------------------------------------------
// ui_text

static ui_text_t *text_new(int max_lines) {
    err_t err;
    ui_text_t *t = ui_text_create(max_lines, &err);
    assert_non_null(t);
    return t;
}

static void assert_row(const ui_text_row_t *r, const char *text, ui_txt_style_t style) {
    if (r->len != strlen(text) || memcmp(r->text, text, r->len))
        fail_msg("row \"%.*s\", expected \"%s\"", (int)r->len, r->text, text);
    assert_int_equal(r->style, style);
}

static void test_text_append(void **state) {
    (void)state;
    ui_text_t *t = text_new(100);
    ui_text_add(t, UI_TXT_USER, "> hi");
    ui_text_append(t, UI_TXT_REPLY, "Hel", 3);
    ui_text_append(t, UI_TXT_REPLY, "lo\nwor", 6);
    ui_text_append(t, UI_TXT_REPLY, "ld\t!", 4);
    ui_text_end(t);
    ui_text_append(t, UI_TXT_REPLY, "next", 4);
    assert_int_equal(ui_text_count(t), 4);
    ui_text_row_t rows[10];
    int scroll = 0;
    int n = ui_text_rows(t, 40, 10, &scroll, true, rows);
    assert_int_equal(n, 4);
    assert_row(&rows[0], "> hi", UI_TXT_USER);
    assert_row(&rows[1], "Hello", UI_TXT_REPLY);
    assert_row(&rows[2], "world !", UI_TXT_REPLY); /* a tab becomes a space */
    assert_row(&rows[3], "next", UI_TXT_REPLY);
    ui_text_destroy(t);
}

static void test_text_wrap_and_scroll(void **state) {
    (void)state;
    ui_text_t *t = text_new(100);
    ui_text_add(t, UI_TXT_NORMAL, "aaa bbb ccc ddd"); /* width 8: "aaa bbb " / "ccc ddd" */
    ui_text_add(t, UI_TXT_PRE, "| 1234567890 |");     /* a table: any character, "| 123456" ... */
    ui_text_add(t, UI_TXT_NORMAL,
                "\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe5\xb9\x95x"); /* 2 cols each */
    ui_text_row_t rows[20];
    int scroll = 0;
    int n = ui_text_rows(t, 8, 20, &scroll, true, rows);
    assert_int_equal(n, 6);
    assert_row(&rows[0], "aaa bbb ", UI_TXT_NORMAL);
    assert_row(&rows[1], "ccc ddd", UI_TXT_NORMAL);
    assert_row(&rows[2], "| 123456", UI_TXT_PRE);
    assert_row(&rows[3], "7890 |", UI_TXT_PRE);
    assert_row(&rows[4], "\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe5\xb9\x95", UI_TXT_NORMAL);
    assert_row(&rows[5], "x", UI_TXT_NORMAL);
    /* a 3-row pane at the bottom, then scrolled up by 2, then too far (clamped to the top) */
    n = ui_text_rows(t, 8, 3, &scroll, true, rows);
    assert_int_equal(n, 3);
    assert_row(&rows[0], "7890 |", UI_TXT_PRE);
    assert_row(&rows[2], "x", UI_TXT_NORMAL);
    scroll = 2;
    n = ui_text_rows(t, 8, 3, &scroll, true, rows);
    assert_int_equal(n, 3);
    assert_int_equal(scroll, 2);
    assert_row(&rows[0], "ccc ddd", UI_TXT_NORMAL);
    assert_row(&rows[2], "7890 |", UI_TXT_PRE);
    scroll = 100;
    n = ui_text_rows(t, 8, 3, &scroll, true, rows);
    assert_int_equal(scroll, 3);
    assert_row(&rows[0], "aaa bbb ", UI_TXT_NORMAL);
    ui_text_destroy(t);
}

static void test_text_reasoning_and_ring(void **state) {
    (void)state;
    ui_text_t *t = text_new(3);
    ui_text_add(t, UI_TXT_FOLD, "(hidden)");
    ui_text_append(t, UI_TXT_REASONING, "thinking", 8);
    ui_text_append(t, UI_TXT_REPLY, "answer", 6);
    ui_text_row_t rows[10];
    int scroll = 0;
    int n = ui_text_rows(t, 40, 10, &scroll, true, rows);
    assert_int_equal(n, 2);
    assert_row(&rows[0], "thinking", UI_TXT_REASONING);
    n = ui_text_rows(t, 40, 10, &scroll, false, rows);
    assert_int_equal(n, 2);
    assert_row(&rows[0], "(hidden)", UI_TXT_FOLD);
    assert_row(&rows[1], "answer", UI_TXT_REPLY);
    /* the oldest lines drop out of a full ring */
    ui_text_add(t, UI_TXT_NORMAL, "four");
    ui_text_add(t, UI_TXT_NORMAL, "five");
    assert_int_equal(ui_text_count(t), 3);
    n = ui_text_rows(t, 40, 10, &scroll, true, rows);
    assert_int_equal(n, 3);
    assert_row(&rows[0], "answer", UI_TXT_REPLY);
    assert_row(&rows[2], "five", UI_TXT_NORMAL);
    ui_text_clear(t);
    assert_int_equal(ui_text_rows(t, 40, 10, &scroll, true, rows), 0);
    ui_text_destroy(t);
    ui_text_destroy(NULL);
}

static void test_text_fit(void **state) {
    (void)state;
    assert_int_equal(ui_text_fit("hello world", 11, 8, true), 6); /* "hello " */
    assert_int_equal(ui_text_fit("hello world", 11, 8, false), 8);
    assert_int_equal(ui_text_fit("abcdefghij", 10, 4, true), 4);  /* a long word is cut */
    assert_int_equal(ui_text_fit("\xe4\xb8\xad", 3, 1, true), 3); /* wide char still fits */
    assert_int_equal(ui_text_fit("ab", 2, 5, true), 2);
}

// ---------------------------------------------------------------------------------------------
// ui_queue

static bool readable(ui_queue_t *q) {
    struct pollfd p = {.fd = ui_queue_fd(q), .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

static void test_queue_wakeup(void **state) {
    (void)state;
    err_t err;
    ui_queue_t *q = ui_queue_create(3, &err);
    assert_non_null(q);
    assert_false(readable(q));
    ui_event_t ev = {.type = UI_EV_BENCH_PROGRESS, .code = 1};
    assert_int_equal(ui_queue_push(q, &ev), 0);
    assert_true(readable(q));
    ui_queue_ack(q);
    assert_false(readable(q));
    ev.code = 2;
    assert_int_equal(ui_queue_push(q, &ev), 0); /* not empty before: no second wake-up */
    assert_false(readable(q));
    ev.code = 3;
    assert_int_equal(ui_queue_push(q, &ev), 0);
    assert_int_equal(ui_queue_push(q, &ev), -1); /* full */
    ui_event_t got;
    for (int i = 1; i <= 3; i++) {
        assert_true(ui_queue_pop(q, &got));
        assert_int_equal(got.code, i);
    }
    assert_false(ui_queue_pop(q, &got));
    ev.code = 4;
    assert_int_equal(ui_queue_push(q, &ev), 0); /* empty again: wakes */
    assert_true(readable(q));
    ui_queue_ack(q);
    ui_queue_kick(q);
    assert_true(readable(q));
    ui_queue_destroy(q);
    ui_queue_destroy(NULL);
    assert_null(ui_queue_create(0, &err));
}

#define N_PRODUCERS  4
#define PER_PRODUCER 20000

static void *producer(void *arg) {
    ui_queue_t *q = arg;
    for (int i = 0; i < PER_PRODUCER; i++) {
        ui_event_t ev = {.type = UI_EV_WAKE, .code = i};
        while (ui_queue_push(q, &ev) < 0)
            sched_yield();
    }
    return NULL;
}

/* Four threads push while this one waits on the fd the way the UI loop does: every event
 * arrives, in order per producer, and the loop never sleeps on a non-empty queue. */
static void test_queue_threads(void **state) {
    (void)state;
    err_t err;
    ui_queue_t *q = ui_queue_create(64, &err);
    assert_non_null(q);
    pthread_t t[N_PRODUCERS];
    for (int i = 0; i < N_PRODUCERS; i++)
        pthread_create(&t[i], NULL, producer, q);
    int got = 0;
    while (got < N_PRODUCERS * PER_PRODUCER) {
        struct pollfd p = {.fd = ui_queue_fd(q), .events = POLLIN};
        int n = poll(&p, 1, 5000);
        assert_int_equal(n, 1); /* a lost wake-up would time out here */
        ui_queue_ack(q);
        ui_event_t ev;
        while (ui_queue_pop(q, &ev))
            got++;
    }
    for (int i = 0; i < N_PRODUCERS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(got, N_PRODUCERS * PER_PRODUCER);
    ui_queue_destroy(q);
}

// ---------------------------------------------------------------------------------------------
// ui_header

static const char URL[] = "http://127.0.0.1:41234";

static char *header(const char *name, int width, bool ascii) {
    static char out[512];
    const ui_header_field_t f[] = {
        {"Tachyon", 6, false, false},
        {name, 0, false, true},
        {"(demo model, toy weights)", 2, true, false},
        {URL, 0, false, false},
        {"TP 1", 3, false, false},
        {"up 00:01:02", 4, false, false},
        {"cpu, 2 threads", 5, false, false},
        {"qwen3 3 layers, 128 hidden, 4 heads", 7, false, false},
    };
    int w = ui_header_fit(f, 8, width, ascii, out, sizeof out);
    assert_true(w <= width || width < (int)strlen(URL));
    return out;
}

static void test_header_ranks(void **state) {
    (void)state;
    assert_string_equal(
        header("tiny", 200, false),
        "Tachyon | tiny (demo model, toy weights) | http://127.0.0.1:41234 | TP 1 | "
        "up 00:01:02 | cpu, 2 threads | qwen3 3 layers, 128 hidden, 4 heads");
    /* the model's shape leaves first, then the brand, the backend, the uptime, ... */
    assert_string_equal(
        header("tiny", 100, false),
        "tiny (demo model, toy weights) | http://127.0.0.1:41234 | TP 1 | up 00:01:02 | "
        "cpu, 2 threads");
    assert_string_equal(header("tiny", 59, false),
                        "tiny (demo model, toy weights) | http://127.0.0.1:41234");
    assert_string_equal(header("tiny", 40, false), "tiny | http://127.0.0.1:41234 | TP 1");
    assert_string_equal(header("tiny", 30, false), "tiny | http://127.0.0.1:41234");
    /* a served name as long as a path keeps its end, the URL stays whole */
    const char *path = "/work/models/checkpoints/qwen3/tiny-qwen3";
    assert_string_equal(header(path, 59, false),
                        "\xe2\x80\xa6"
                        "dels/checkpoints/qwen3/tiny-qwen3 | http://127.0.0.1:41234");
    assert_string_equal(header(path, 45, true), "~ts/qwen3/tiny-qwen3 | http://127.0.0.1:41234");
    assert_string_equal(
        header(path, 80, false),
        "/work/models/checkpoints/qwen3/tiny-qwen3 | http://127.0.0.1:41234 | TP 1");
    /* a small output buffer cuts at a character boundary */
    char small[8];
    const ui_header_field_t f[] = {{"\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad", 0, false, true}};
    ui_header_fit(f, 1, 80, false, small, sizeof small);
    assert_string_equal(small, "\xe4\xb8\xad\xe4\xb8\xad");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_series_ring),
        cmocka_unit_test(test_series_resample),
        cmocka_unit_test(test_text_append),
        cmocka_unit_test(test_text_wrap_and_scroll),
        cmocka_unit_test(test_text_reasoning_and_ring),
        cmocka_unit_test(test_text_fit),
        cmocka_unit_test(test_queue_wakeup),
        cmocka_unit_test(test_queue_threads),
        cmocka_unit_test(test_header_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

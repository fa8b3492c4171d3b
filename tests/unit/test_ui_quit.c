/* ui_quit: when the console may quit: Ctrl-C stops the console's own work first; other clients'
 * requests in flight make Ctrl-C and /quit ask, and a second one within the question's time
 * quits (a late one asks again); with nothing in flight both quit at once; /quit --drain drains
 * until nothing is in flight or the grace time is over, and Ctrl-C while draining quits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ui_quit.h"

static void test_interrupt(void **state) {
    (void)state;
    ui_quit_t q = {0};
    assert_int_equal(ui_quit_interrupt(&q, false, 0, 100), UI_QUIT_NOW);
    q = (ui_quit_t){0};
    assert_int_equal(ui_quit_interrupt(&q, true, 3, 100), UI_QUIT_STOP_OWN);
    assert_int_equal(ui_quit_interrupt(&q, true, 3, 100.5), UI_QUIT_STOP_OWN);
    assert_int_equal(ui_quit_interrupt(&q, false, 3, 101), UI_QUIT_ASK);
    assert_int_equal(ui_quit_interrupt(&q, false, 3, 102), UI_QUIT_NOW);
    /* a question goes stale */
    q = (ui_quit_t){0};
    assert_int_equal(ui_quit_interrupt(&q, false, 1, 100), UI_QUIT_ASK);
    assert_int_equal(ui_quit_interrupt(&q, false, 1, 100 + UI_QUIT_ASK_S + 1), UI_QUIT_ASK);
    /* /quit asks the same question, and a Ctrl-C answers it */
    q = (ui_quit_t){0};
    assert_int_equal(ui_quit_command(&q, false, 2, 100, 30), UI_QUIT_ASK);
    assert_int_equal(ui_quit_interrupt(&q, false, 2, 101), UI_QUIT_NOW);
    q = (ui_quit_t){0};
    assert_int_equal(ui_quit_command(&q, false, 0, 100, 30), UI_QUIT_NOW);
    q = (ui_quit_t){0};
    assert_int_equal(ui_quit_command(&q, false, 2, 100, 30), UI_QUIT_ASK);
    assert_int_equal(ui_quit_command(&q, false, 2, 103, 30), UI_QUIT_NOW);
}

static void test_drain(void **state) {
    (void)state;
    ui_quit_t q = {0};
    assert_int_equal(ui_quit_tick(&q, 5, 100), UI_QUIT_STAY); /* not draining */
    assert_int_equal(ui_quit_command(&q, true, 3, 100, 30), UI_QUIT_DRAIN);
    assert_true(q.draining);
    assert_int_equal(ui_quit_tick(&q, 3, 110), UI_QUIT_STAY);
    assert_int_equal(ui_quit_command(&q, true, 3, 111, 30), UI_QUIT_STAY); /* drains already */
    assert_int_equal(ui_quit_tick(&q, 0, 112), UI_QUIT_NOW);
    q = (ui_quit_t){0};
    ui_quit_command(&q, true, 3, 100, 30);
    assert_int_equal(ui_quit_tick(&q, 1, 129.9), UI_QUIT_STAY);
    assert_int_equal(ui_quit_tick(&q, 1, 130), UI_QUIT_NOW); /* grace time over */
    q = (ui_quit_t){0};
    ui_quit_command(&q, true, 3, 100, 30);
    assert_int_equal(ui_quit_interrupt(&q, true, 3, 101), UI_QUIT_NOW);
    q = (ui_quit_t){0};
    ui_quit_command(&q, true, 3, 100, 30);
    assert_int_equal(ui_quit_command(&q, false, 3, 101, 30), UI_QUIT_NOW);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interrupt),
        cmocka_unit_test(test_drain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

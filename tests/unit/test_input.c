/* input: the console's keyboard decoder: a bracketed paste is one event with its line breaks
 * (CR and LF), whatever keys come inside it, cut to the buffer and ended by a timeout when its end
 * marker is lost; Alt-Enter is a newline for the editor, Alt-B/F word moves; ESC before another
 * key is a lone Esc and then that key; curses' editing keys map to the editor's codes and the
 * others pass through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <curses.h>

#include "input.h"
#include "lineedit.h"

static input_t *make(size_t cap) {
    err_t err = {{0}};
    input_t *in = input_create(cap, &err);
    assert_non_null(in);
    return in;
}

/* Feeds the code points of ASCII text (no events expected: inside a paste). */
static void feed_text(input_t *in, const char *s, double now) {
    input_event_t ev[2];
    for (; *s; s++)
        assert_int_equal(input_feed(in, false, (unsigned char)*s, now, ev), 0);
}

static void test_paste(void **state) {
    (void)state;
    input_t *in = make(64);
    input_event_t ev[2];
    assert_int_equal(input_feed(in, true, INPUT_KEY_PASTE_BEGIN, 1.0, ev), 0);
    assert_true(input_pasting(in));
    feed_text(in, "first line\r", 1.0);
    assert_int_equal(input_feed(in, false, 0xE9, 1.0, ev), 0); /* é */
    feed_text(in, "\nthird", 1.0);
    assert_int_equal(input_feed(in, true, KEY_F(1), 1.0, ev), 0); /* no text: dropped */
    assert_int_equal(input_idle(in, 1.5, ev), 0); /* a pause inside a paste does not end it */
    assert_int_equal(input_feed(in, true, INPUT_KEY_PASTE_END, 1.6, ev), 1);
    assert_int_equal(ev[0].kind, INPUT_PASTE);
    assert_string_equal(ev[0].text, "first line\n\xC3\xA9\nthird");
    assert_int_equal(ev[0].len, strlen(ev[0].text));
    assert_false(input_pasting(in));
    /* after it, keys are keys again */
    assert_int_equal(input_feed(in, false, '\r', 2.0, ev), 1);
    assert_int_equal(ev[0].kind, INPUT_KEY);
    assert_int_equal(ev[0].key, '\r');
    /* an end marker without a start is nothing */
    assert_int_equal(input_feed(in, true, INPUT_KEY_PASTE_END, 2.0, ev), 0);
    input_destroy(in);
}

static void test_paste_limits(void **state) {
    (void)state;
    input_t *in = make(16);
    input_event_t ev[2];
    input_feed(in, true, INPUT_KEY_PASTE_BEGIN, 0, ev);
    feed_text(in, "0123456789abcd", 0);
    assert_int_equal(input_feed(in, false, 0x4E2D, 0, ev), 0); /* 3 bytes: no room */
    feed_text(in, "ef", 0);
    assert_int_equal(input_feed(in, true, INPUT_KEY_PASTE_END, 0, ev), 1);
    assert_string_equal(ev[0].text, "0123456789abcdef");
    /* a paste whose end marker never comes ends a second after its last byte */
    input_feed(in, true, INPUT_KEY_PASTE_BEGIN, 10, ev);
    feed_text(in, "lost", 10.2);
    assert_int_equal(input_idle(in, 11.0, ev), 0);
    assert_int_equal(input_idle(in, 11.3, ev), 1);
    assert_int_equal(ev[0].kind, INPUT_PASTE);
    assert_string_equal(ev[0].text, "lost");
    err_t err = {{0}};
    assert_null(input_create(4, &err));
    input_destroy(NULL);
    input_destroy(in);
}

static void test_escape_and_alt(void **state) {
    (void)state;
    input_t *in = make(64);
    input_event_t ev[2];
    const int alts[][2] = {
        {'\r', LE_KEY_NEWLINE}, {'\n', LE_KEY_NEWLINE}, {'b', LE_KEY_ALT_B}, {'f', LE_KEY_ALT_F}};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(input_feed(in, false, 27, 0, ev), 0);
        assert_int_equal(input_feed(in, false, alts[i][0], 0, ev), 1);
        assert_int_equal(ev[0].kind, INPUT_EDIT);
        assert_int_equal(ev[0].key, alts[i][1]);
    }
    /* ESC then nothing: a lone Esc */
    input_feed(in, false, 27, 0, ev);
    assert_int_equal(input_idle(in, 0, ev), 1);
    assert_int_equal(ev[0].kind, INPUT_ESC);
    assert_int_equal(input_idle(in, 0, ev), 0);
    /* ESC then another key: Esc, then the key */
    input_feed(in, false, 27, 0, ev);
    assert_int_equal(input_feed(in, false, 'x', 0, ev), 2);
    assert_int_equal(ev[0].kind, INPUT_ESC);
    assert_int_equal(ev[1].kind, INPUT_KEY);
    assert_int_equal(ev[1].key, 'x');
    input_feed(in, false, 27, 0, ev);
    assert_int_equal(input_feed(in, true, KEY_LEFT, 0, ev), 2);
    assert_int_equal(ev[1].kind, INPUT_EDIT);
    assert_int_equal(ev[1].key, LE_KEY_LEFT);
    /* ESC then a paste: Esc, then the paste */
    input_feed(in, false, 27, 0, ev);
    assert_int_equal(input_feed(in, true, INPUT_KEY_PASTE_BEGIN, 0, ev), 1);
    assert_int_equal(ev[0].kind, INPUT_ESC);
    assert_true(input_pasting(in));
    input_destroy(in);
}

static void test_keys(void **state) {
    (void)state;
    input_t *in = make(64);
    input_event_t ev[2];
    const int map[][2] = {
        {KEY_LEFT, LE_KEY_LEFT}, {KEY_RIGHT, LE_KEY_RIGHT},         {KEY_UP, LE_KEY_UP},
        {KEY_DOWN, LE_KEY_DOWN}, {KEY_HOME, LE_KEY_HOME},           {KEY_END, LE_KEY_END},
        {KEY_DC, LE_KEY_DELETE}, {KEY_BACKSPACE, LE_KEY_BACKSPACE}, {KEY_ENTER, LE_KEY_ENTER}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        assert_int_equal(input_feed(in, true, map[i][0], 0, ev), 1);
        assert_int_equal(ev[0].kind, INPUT_EDIT);
        assert_int_equal(ev[0].key, map[i][1]);
    }
    assert_int_equal(input_feed(in, true, KEY_NPAGE, 0, ev), 1);
    assert_int_equal(ev[0].kind, INPUT_KEY);
    assert_true(ev[0].curses_key);
    assert_int_equal(ev[0].key, KEY_NPAGE);
    assert_int_equal(input_feed(in, false, 0x4E2D, 0, ev), 1);
    assert_int_equal(ev[0].kind, INPUT_KEY);
    assert_false(ev[0].curses_key);
    assert_int_equal(ev[0].key, 0x4E2D);
    input_destroy(in);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paste),
        cmocka_unit_test(test_paste_limits),
        cmocka_unit_test(test_escape_and_alt),
        cmocka_unit_test(test_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* bench sse: a stream of several messages (UTF-8 text, CRLF and CR line ends, comments, multi-line
 * data, unknown fields, [DONE]) gives the same messages however it is cut: at every single
 * position, at every pair of positions, and one byte at a time; the trailing-buffer rule; the
 * allocation-free JSON readers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sse.h"

#define MAX_MSGS 32

typedef struct got {
    char msgs[MAX_MSGS][512];
    int n;
} got_t;

static int collect(void *user, const char *data, size_t len) {
    got_t *g = user;
    assert_true(g->n < MAX_MSGS);
    assert_true(len < sizeof g->msgs[0]);
    assert_int_equal(data[len], '\0');
    assert_int_equal(strlen(data), len);
    memcpy(g->msgs[g->n++], data, len + 1);
    return 0;
}

/* UTF-8: e-acute (2 bytes), a CJK character (3), an emoji (4). */
static const char stream[] =
    ": ping\n\n"
    "data: {\"choices\":[{\"text\":\"h\xc3\xa9llo\"}]}\n\n"
    "data: {\"choices\":[{\"text\":\"\xe4\xb8\xad\"}]}\r\n\r\n"
    "event: message\r\nid: 7\r\n"
    "data: {\"choices\":[{\"text\":\"\xf0\x9f\x98\x80\"}]}\r\n\r\n"
    ": comment line\n"
    "data:{\"no\":\"space\"}\n\n"
    "data: first line\n"
    "data: second line\n\n"
    "data: {\"a\":1}\r\r"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}\n\n"
    "data: [DONE]\n\n";

static const char *const expected[] = {
    "{\"choices\":[{\"text\":\"h\xc3\xa9llo\"}]}",
    "{\"choices\":[{\"text\":\"\xe4\xb8\xad\"}]}",
    "{\"choices\":[{\"text\":\"\xf0\x9f\x98\x80\"}]}",
    "{\"no\":\"space\"}",
    "first line\nsecond line",
    "{\"a\":1}",
    "{\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}",
    "[DONE]",
};
#define N_EXPECTED (int)(sizeof expected / sizeof expected[0])

static void check(const got_t *g, const char *where) {
    if (g->n != N_EXPECTED) fail_msg("%s: %d messages, want %d", where, g->n, N_EXPECTED);
    for (int i = 0; i < N_EXPECTED; i++)
        if (strcmp(g->msgs[i], expected[i]))
            fail_msg("%s: message %d is \"%s\", want \"%s\"", where, i, g->msgs[i], expected[i]);
}

/* Feeds stream cut at the given sorted positions (a small buffer, so growth is exercised). */
static void run_cuts(const size_t *cuts, int n_cuts, got_t *g) {
    bench_sse_t s;
    assert_int_equal(bench_sse_init(&s, 8), 0);
    memset(g, 0, sizeof *g);
    size_t len = sizeof stream - 1, at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        assert_int_equal(bench_sse_feed(&s, stream + at, end - at, collect, g), 0);
        at = end;
    }
    assert_int_equal(bench_sse_finish(&s, collect, g), 0);
    bench_sse_free(&s);
}

static void test_whole(void **state) {
    (void)state;
    got_t g;
    run_cuts(NULL, 0, &g);
    check(&g, "whole");
}

static void test_every_split(void **state) {
    (void)state;
    size_t len = sizeof stream - 1;
    got_t g;
    char where[64];
    for (size_t i = 0; i <= len; i++) {
        run_cuts(&i, 1, &g);
        snprintf(where, sizeof where, "split at %zu", i);
        check(&g, where);
    }
}

static void test_every_pair_of_splits(void **state) {
    (void)state;
    size_t len = sizeof stream - 1;
    got_t g;
    char where[64];
    for (size_t i = 0; i <= len; i++)
        for (size_t j = i; j <= len; j++) {
            size_t cuts[2] = {i, j};
            run_cuts(cuts, 2, &g);
            snprintf(where, sizeof where, "split at %zu and %zu", i, j);
            check(&g, where);
        }
}

static void test_byte_at_a_time(void **state) {
    (void)state;
    size_t len = sizeof stream - 1;
    size_t *cuts = malloc(len * sizeof *cuts);
    for (size_t i = 0; i < len; i++)
        cuts[i] = i + 1;
    got_t g;
    run_cuts(cuts, (int)len, &g);
    check(&g, "byte at a time");
    free(cuts);
}

/* The message goes out once its JSON object is complete, before the blank line; the blank line
 * that follows adds nothing. */
static void test_early_object(void **state) {
    (void)state;
    bench_sse_t s;
    got_t g = {0};
    assert_int_equal(bench_sse_init(&s, 64), 0);
    const char *a = "data: {\"choices\":[{\"text\":\"x\"}]}";
    assert_int_equal(bench_sse_feed(&s, a, strlen(a) - 1, collect, &g), 0);
    assert_int_equal(g.n, 0); /* "}" missing: not yet */
    assert_int_equal(bench_sse_feed(&s, a + strlen(a) - 1, 1, collect, &g), 0);
    assert_int_equal(g.n, 1);
    assert_string_equal(g.msgs[0], "{\"choices\":[{\"text\":\"x\"}]}");
    assert_int_equal(bench_sse_feed(&s, "\n\n", 2, collect, &g), 0);
    assert_int_equal(g.n, 1);
    assert_int_equal(bench_sse_feed(&s, "data: [DONE]", 12, collect, &g), 0);
    assert_int_equal(g.n, 2);
    assert_string_equal(g.msgs[1], "[DONE]");
    assert_int_equal(bench_sse_finish(&s, collect, &g), 0);
    assert_int_equal(g.n, 2);
    bench_sse_free(&s);
}

/* At the end of the stream an unterminated message counts only when it is valid JSON or
 * [DONE]; a brace inside a string does not end an object early. */
static void test_trailing_buffer(void **state) {
    (void)state;
    bench_sse_t s;
    got_t g = {0};
    assert_int_equal(bench_sse_init(&s, 64), 0);
    const char *t = "data: {\"a\":\"}\"";
    assert_int_equal(bench_sse_feed(&s, t, strlen(t), collect, &g), 0);
    assert_int_equal(g.n, 0);
    assert_int_equal(bench_sse_finish(&s, collect, &g), 0);
    assert_int_equal(g.n, 0); /* truncated JSON: dropped */

    t = "data: 42";
    assert_int_equal(bench_sse_feed(&s, t, strlen(t), collect, &g), 0);
    assert_int_equal(g.n, 0); /* a number could still grow */
    assert_int_equal(bench_sse_finish(&s, collect, &g), 0);
    assert_int_equal(g.n, 1);
    assert_string_equal(g.msgs[0], "42");

    t = "data: not json";
    assert_int_equal(bench_sse_feed(&s, t, strlen(t), collect, &g), 0);
    assert_int_equal(bench_sse_finish(&s, collect, &g), 0);
    assert_int_equal(g.n, 1);

    t = ": only a comment";
    assert_int_equal(bench_sse_feed(&s, t, strlen(t), collect, &g), 0);
    assert_int_equal(bench_sse_finish(&s, collect, &g), 0);
    assert_int_equal(g.n, 1);
    bench_sse_free(&s);
}

static int stop_at_second(void *user, const char *data, size_t len) {
    (void)data;
    (void)len;
    return ++*(int *)user == 2 ? 7 : 0;
}

static void test_callback_stops_feed(void **state) {
    (void)state;
    bench_sse_t s;
    int calls = 0;
    assert_int_equal(bench_sse_init(&s, 64), 0);
    const char *t = "data: 1\n\ndata: 2\n\ndata: 3\n\n";
    assert_int_equal(bench_sse_feed(&s, t, strlen(t), stop_at_second, &calls), 7);
    assert_int_equal(calls, 2);
    bench_sse_free(&s);
}

static void test_json_readers(void **state) {
    (void)state;
    const char *j = "{\"id\":\"x\\\"choices\",\"choices\" : [ ],\"nested\":{\"usage\":1},"
                    "\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":-3,\"f\":1.5}}";
    size_t n = strlen(j), vl, l;
    assert_true(bench_sse_json_valid(j, n));
    const char *v = bench_sse_json_get(j, n, "choices", &vl);
    assert_non_null(v);
    assert_false(bench_sse_json_nonempty_array(v, vl));
    const char *u = bench_sse_json_get(j, n, "usage", &vl);
    assert_non_null(u);
    assert_int_equal(*u, '{');
    long long x;
    v = bench_sse_json_get(u, vl, "prompt_tokens", &l);
    assert_true(bench_sse_json_int(v, l, &x));
    assert_int_equal(x, 12);
    v = bench_sse_json_get(u, vl, "completion_tokens", &l);
    assert_true(bench_sse_json_int(v, l, &x));
    assert_int_equal(x, -3);
    v = bench_sse_json_get(u, vl, "f", &l);
    assert_false(bench_sse_json_int(v, l, &x));
    assert_null(bench_sse_json_get(j, n, "missing", &vl));
    assert_true(bench_sse_json_nonempty_array("[ {} ]", 6));
    assert_false(bench_sse_json_nonempty_array("{}", 2));
    /* the first element of an array (a stream chunk's choices[0]) */
    const char *arr = " [ {\"finish_reason\":\"abort\"} , 2]";
    v = bench_sse_json_first(arr, strlen(arr), &vl);
    assert_non_null(v);
    assert_int_equal(vl, 25);
    v = bench_sse_json_get(v, vl, "finish_reason", &l);
    assert_int_equal(l, 7);
    assert_memory_equal(v, "\"abort\"", 7);
    assert_null(bench_sse_json_first("[ ]", 3, &vl));
    assert_null(bench_sse_json_first("{}", 2, &vl));
    assert_null(bench_sse_json_first("[tru]", 5, &vl));

    static const char *const bad[] = {"",      "{",     "{\"a\"}", "[1,]",    "{\"a\":1,}",
                                      "01",    "1.",    "\"\\x\"", "\"a",     "tru",
                                      "[1 2]", "{} {}", "-",       "\"\x01\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (bench_sse_json_valid(bad[i], strlen(bad[i]))) fail_msg("valid: %s", bad[i]);
    static const char *const good[] = {
        "0", "-1.5e+3", " true ", "null", "\"\\u00e9\\n\"", "[[],{}]", "{\"a\":[1,{\"b\":null}]}"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (!bench_sse_json_valid(good[i], strlen(good[i]))) fail_msg("invalid: %s", good[i]);
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    assert_false(bench_sse_json_valid(deep, 200));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole),
        cmocka_unit_test(test_every_split),
        cmocka_unit_test(test_every_pair_of_splits),
        cmocka_unit_test(test_byte_at_a_time),
        cmocka_unit_test(test_early_object),
        cmocka_unit_test(test_trailing_buffer),
        cmocka_unit_test(test_callback_stops_feed),
        cmocka_unit_test(test_json_readers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

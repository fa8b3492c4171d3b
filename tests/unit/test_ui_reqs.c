/* ui_reqs: the requests table's rows from a snapshot: live choices and recently finished ones,
 * each filter (live, running, waiting, finished, errors, all, an id's part), each sort key both
 * ways (ties oldest first, no TTFT sorting as the slowest), the console's own reply added when
 * the snapshot does not list it yet, and the selection following its request across rebuilds
 * (gone when it is filtered out, back when it is shown again). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ui_reqs.h"

/* live: a decode (arrived 10 s ago, TTFT 200 ms), b prefill (5 s), c waiting (1 s), d preempted
 * (8 s, TTFT 50 ms); finished: e stop, f abort (no token), g error, h length */
static stats_snapshot_t *snapshot(void) {
    stats_snapshot_t *s = calloc(1, sizeof *s);
    struct {
        const char *id;
        stats_req_state_t st;
        int prompt, gen;
        double arrival, first;
    } live[] = {{"req-a", STATS_REQ_DECODE, 100, 40, 90, 90.2},
                {"req-b", STATS_REQ_PREFILL, 300, 0, 95, 0},
                {"req-c", STATS_REQ_WAITING, 20, 0, 99, 0},
                {"req-d", STATS_REQ_PREEMPTED, 50, 7, 92, 92.05}};
    for (int i = 0; i < 4; i++) {
        stats_active_t *a = &s->active[i];
        snprintf(a->id, sizeof a->id, "%s", live[i].id);
        a->state = live[i].st;
        a->prompt_tokens = live[i].prompt;
        a->generated = live[i].gen;
        a->arrival = live[i].arrival;
        a->first_token = live[i].first;
    }
    s->n_active = 4;
    s->n_active_total = 6; /* two more than listed */
    struct {
        const char *id;
        int reason, gen;
        double ttft, e2e;
    } fin[] = {{"req-e", 0, 16, 0.3, 2},
               {"req-f", 2, 0, -1, 3},
               {"req-g", 3, 1, 0.1, 4},
               {"req-h", 1, 64, 0.4, 6}};
    for (int i = 0; i < 4; i++) {
        stats_finished_t *f = &s->recent[i];
        snprintf(f->id, sizeof f->id, "%s", fin[i].id);
        f->finish_reason = fin[i].reason;
        f->prompt_tokens = 10 * (i + 1);
        f->generated = fin[i].gen;
        f->ttft_s = fin[i].ttft;
        f->e2e_s = fin[i].e2e;
    }
    s->n_recent = 4;
    return s;
}

/* The rows' ids, joined: "req-a req-d ..." */
static const char *ids(const ui_reqs_t *t) {
    static char buf[512];
    buf[0] = '\0';
    for (int i = 0; i < t->n; i++) {
        if (i) strcat(buf, " ");
        strcat(buf, t->rows[i].id);
    }
    return buf;
}

static void build(ui_reqs_t *t, const stats_snapshot_t *s) {
    ui_reqs_build(t, s, 100, NULL);
}

static void test_filters(void **state) {
    (void)state;
    stats_snapshot_t *s = snapshot();
    ui_reqs_t *t = malloc(sizeof *t);
    ui_reqs_init(t);
    build(t, s); /* live, oldest first */
    assert_string_equal(ids(t), "req-a req-d req-b req-c");
    assert_int_equal(t->n_unlisted, 2);
    assert_int_equal(t->rows[0].state, UI_REQ_DECODE);
    assert_true(fabs(t->rows[0].age_s - 10) < 1e-9);
    assert_true(fabs(t->rows[0].ttft_ms - 200) < 1e-6);
    assert_true(isnan(t->rows[2].ttft_ms)); /* no token yet */
    t->filter = UI_REQ_RUNNING;
    build(t, s);
    assert_string_equal(ids(t), "req-a req-b");
    t->filter = UI_REQ_QUEUED;
    build(t, s);
    assert_string_equal(ids(t), "req-d req-c");
    t->filter = UI_REQ_FINISHED;
    build(t, s);
    assert_string_equal(ids(t), "req-h req-g req-f req-e");
    assert_int_equal(t->rows[0].state, UI_REQ_LENGTH);
    assert_true(isnan(t->rows[2].ttft_ms)); /* aborted before its first token */
    t->filter = UI_REQ_ERRORS;
    build(t, s);
    assert_string_equal(ids(t), "req-g req-f");
    t->filter = UI_REQ_ALL;
    build(t, s);
    assert_int_equal(t->n, 8);
    snprintf(t->text, sizeof t->text, "q-b"); /* an id's part */
    build(t, s);
    assert_string_equal(ids(t), "req-b");
    free(t);
    free(s);
}

static void test_sorts(void **state) {
    (void)state;
    stats_snapshot_t *s = snapshot();
    ui_reqs_t *t = malloc(sizeof *t);
    ui_reqs_init(t);
    ui_reqs_set_sort(t, UI_REQ_SORT_AGE, false); /* the newest first */
    build(t, s);
    assert_string_equal(ids(t), "req-c req-b req-d req-a");
    ui_reqs_set_sort(t, UI_REQ_SORT_TTFT, true); /* none yet counts as the slowest; ties: the
                                                    oldest first */
    build(t, s);
    assert_string_equal(ids(t), "req-b req-c req-a req-d");
    ui_reqs_set_sort(t, UI_REQ_SORT_TTFT, false);
    build(t, s);
    assert_string_equal(ids(t), "req-d req-a req-b req-c");
    ui_reqs_set_sort(t, UI_REQ_SORT_PROMPT, true);
    build(t, s);
    assert_string_equal(ids(t), "req-b req-a req-d req-c");
    ui_reqs_set_sort(t, UI_REQ_SORT_GEN, true);
    build(t, s);
    assert_string_equal(ids(t), "req-a req-d req-b req-c");
    ui_reqs_set_sort(t, UI_REQ_SORT_STATE, false);
    build(t, s);
    assert_string_equal(ids(t), "req-c req-b req-a req-d");
    ui_reqs_set_sort(t, UI_REQ_SORT_ID, true);
    build(t, s);
    assert_string_equal(ids(t), "req-d req-c req-b req-a");
    /* names both ways */
    for (int k = 0; k < UI_REQ_N_SORTS; k++)
        assert_int_equal(ui_req_sort_parse(ui_req_sort_name(k)), k);
    for (int k = 0; k < UI_REQ_N_FILTERS; k++)
        assert_int_equal(ui_req_filter_parse(ui_req_filter_name(k)), k);
    assert_int_equal(ui_req_sort_parse("tokens"), UI_REQ_SORT_GEN);
    assert_int_equal(ui_req_filter_parse("error"), UI_REQ_ERRORS);
    assert_int_equal(ui_req_sort_parse("speed"), -1);
    assert_int_equal(ui_req_filter_parse("req-a"), -1);
    free(t);
    free(s);
}

/* The console's reply: first, added while the snapshot does not list it, marked where it does
 * (with the console's numbers). */
static void test_own(void **state) {
    (void)state;
    stats_snapshot_t *s = snapshot();
    ui_reqs_t *t = malloc(sizeof *t);
    ui_reqs_init(t);
    ui_req_row_t own = {.id = "chat-1", .state = UI_REQ_PREFILL, .prompt = 9, .age_s = 0.5};
    ui_reqs_build(t, s, 100, &own);
    assert_string_equal(ids(t), "chat-1 req-a req-d req-b req-c");
    assert_true(t->rows[0].own && !t->rows[1].own);
    snprintf(own.id, sizeof own.id, "req-b");
    ui_reqs_build(t, s, 100, &own);
    assert_string_equal(ids(t), "req-b req-a req-d req-c");
    assert_true(t->rows[0].own);
    assert_int_equal(t->rows[0].prompt, 9);
    free(t);
    free(s);
}

/* The selection follows its request when the order changes, is gone while filtered out and
 * back when shown again; moves are clamped. */
static void test_selection(void **state) {
    (void)state;
    stats_snapshot_t *s = snapshot();
    ui_reqs_t *t = malloc(sizeof *t);
    ui_reqs_init(t);
    build(t, s);
    assert_null(ui_reqs_selected(t));
    assert_true(ui_reqs_move(t, 1)); /* none: the first */
    assert_string_equal(ui_reqs_selected(t)->id, "req-a");
    assert_true(ui_reqs_move(t, 2));
    assert_string_equal(ui_reqs_selected(t)->id, "req-b");
    assert_true(ui_reqs_move(t, 100)); /* clamped */
    assert_string_equal(ui_reqs_selected(t)->id, "req-c");
    assert_true(ui_reqs_move(t, -1));
    assert_string_equal(ui_reqs_selected(t)->id, "req-b");
    ui_reqs_set_sort(t, UI_REQ_SORT_PROMPT, true); /* b first now */
    build(t, s);
    assert_int_equal(t->sel, 0);
    assert_string_equal(ui_reqs_selected(t)->id, "req-b");
    t->filter = UI_REQ_QUEUED;
    build(t, s);
    assert_null(ui_reqs_selected(t));
    t->filter = UI_REQ_LIVE;
    build(t, s);
    assert_string_equal(ui_reqs_selected(t)->id, "req-b");
    t->filter = UI_REQ_ERRORS;
    t->text[0] = '\0';
    stats_snapshot_t *empty = calloc(1, sizeof *empty);
    build(t, empty);
    assert_int_equal(t->n, 0);
    assert_false(ui_reqs_move(t, 1));
    assert_false(ui_reqs_select(t, 0));
    free(empty);
    free(t);
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_sorts),
        cmocka_unit_test(test_own),
        cmocka_unit_test(test_selection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

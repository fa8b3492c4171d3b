/*
 * stream: the per-request event queue alone, with no engine and no model. The test thread plays
 * the engine thread (stream_int.h: open, close, publish, notify) and readers use the public
 * calls (stream.h): order, payloads, FINISH fields, segment reuse, a blocked reader woken, the
 * wake hook, cancel notices, lost finishes, reader-side detokenizing, and release at any point
 * (leaks and use-after-free are the sanitizer build's to find).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mdir.h"
#include "stream_int.h"
#include "testutil.h"

/* The engine's side of one event: a delta of choice c with token id `token` and `text`. */
static void write_delta(engine_stream_t *s, int c, int32_t token, const char *text) {
    sampler_result_t r = {.token = token};
    evrec_t *rec;
    size_t len = strlen(text);
    char *p = stream_open_event(s, c, ENGINE_EV_DELTA, &r, false, len, &rec);
    assert_non_null(p);
    memcpy(p, text, len);
    stream_close_event(s, rec, p, len);
}

static void write_finish(engine_stream_t *s, int c, const char *text, const char *stop_str) {
    evrec_t *rec;
    size_t len = strlen(text);
    char *p = stream_open_event(s, c, ENGINE_EV_FINISH, NULL, false, len, &rec);
    assert_non_null(p);
    memcpy(p, text, len);
    stream_close_event(s, rec, p, len);
    *stream_finish_fields(s, rec) = (evfinish_t){.reason = ENGINE_FINISH_STOP,
                                                 .stop_token = -1,
                                                 .stop_str = stop_str ? strdup(stop_str) : NULL,
                                                 .prompt_tokens = 7,
                                                 .completion_tokens = 3,
                                                 .cached_tokens = 2,
                                                 .ttft_s = 0.5,
                                                 .e2e_s = 1.5};
}

static void publish(engine_stream_t *s) {
    stream_publish(s);
    atomic_thread_fence(memory_order_seq_cst);
    stream_notify(s);
}

static int count_segments(const engine_stream_t *s) {
    int n = 0;
    for (const evseg_t *g = s->oldest; g; g = g->pnext)
        n++;
    return n;
}

static void test_order_payloads_and_finish(void **state) {
    engine_stream_t *s = stream_create(2, NULL, NULL, NULL, false);
    assert_non_null(s);
    engine_event_t ev;
    assert_int_equal(engine_stream_poll(s, &ev), 0); /* nothing published yet */
    write_delta(s, 0, 11, "Hello");
    write_delta(s, 1, 21, "");
    assert_int_equal(engine_stream_poll(s, &ev), 0); /* written is not published */
    publish(s);
    assert_int_equal(engine_stream_poll(s, &ev), 1);
    assert_int_equal(ev.type, ENGINE_EV_DELTA);
    assert_int_equal(ev.choice, 0);
    assert_int_equal(ev.n_tokens, 1);
    assert_int_equal(ev.token_ids[0], 11);
    assert_string_equal(ev.text, "Hello");
    assert_int_equal(ev.text_len, 5);
    assert_null(ev.logprobs);
    engine_event_clear(&ev);
    assert_int_equal(engine_stream_poll(s, &ev), 1);
    assert_int_equal(ev.choice, 1);
    assert_string_equal(ev.text, "");
    engine_event_clear(&ev);
    write_finish(s, 0, " world", "STOP");
    write_finish(s, 1, "", NULL);
    publish(s);
    for (int c = 0; c < 2; c++) {
        assert_int_equal(engine_stream_poll(s, &ev), 1);
        assert_int_equal(ev.type, ENGINE_EV_FINISH);
        assert_int_equal(ev.choice, c);
        assert_int_equal(ev.n_tokens, 0);
        assert_int_equal(ev.reason, ENGINE_FINISH_STOP);
        assert_int_equal(ev.prompt_tokens, 7);
        assert_int_equal(ev.completion_tokens, 3);
        assert_int_equal(ev.cached_tokens, 2);
        assert_true(ev.ttft_s == 0.5 && ev.e2e_s == 1.5);
        if (c == 0) {
            assert_string_equal(ev.text, " world");
            assert_string_equal(ev.stop_str, "STOP");
        } else {
            assert_null(ev.stop_str);
        }
        engine_event_clear(&ev);
    }
    assert_int_equal(engine_stream_poll(s, &ev), -1); /* every choice finished, all read */
    stream_detach(s);
    stream_unref(s); /* the engine's reference */
    engine_stream_release(s);
}

/* Logprobs ride with the token: the sampled one first, then the alternatives. */
static void test_logprobs(void **state) {
    engine_stream_t *s = stream_create(1, NULL, NULL, NULL, false);
    sampler_result_t r = {.token = 5, .logprob = -0.25f, .n_top = 2};
    r.top_ids[0] = 5;
    r.top_ids[1] = 9;
    r.top_logprobs[0] = -0.25f;
    r.top_logprobs[1] = -2.0f;
    evrec_t *rec;
    char *p = stream_open_event(s, 0, ENGINE_EV_DELTA, &r, true, 1, &rec);
    *p = 'x';
    stream_close_event(s, rec, p, 1);
    publish(s);
    engine_event_t ev;
    assert_int_equal(engine_stream_poll(s, &ev), 1);
    assert_int_equal(ev.n_top, 2);
    assert_int_equal(ev.logprobs[0].id, 5);
    assert_true(ev.logprobs[0].logprob == -0.25f);
    assert_int_equal(ev.logprobs[2].id, 9);
    assert_true(ev.logprobs[2].logprob == -2.0f);
    assert_int_equal(ev.token_ids[0], 5);
    assert_string_equal(ev.text, "x");
    engine_event_clear(&ev);
    stream_unref(s);
    engine_stream_release(s);
}

/* A steady stream reuses its segments once the reader is done with them: thousands of events
 * read as they come keep a handful of segments; events held by the reader keep theirs alive. */
static void test_segments_reused(void **state) {
    engine_stream_t *s = stream_create(1, NULL, NULL, NULL, false);
    char text[64];
    engine_event_t ev;
    for (int i = 0; i < 7 * 700; i++) {
        snprintf(text, sizeof text, "t%d", i);
        write_delta(s, 0, i, text);
        if (i % 7 == 6) { /* a step of 7 events, then the reader takes them */
            publish(s);
            for (int k = i - 6; k <= i; k++) {
                assert_int_equal(engine_stream_poll(s, &ev), 1);
                snprintf(text, sizeof text, "t%d", k);
                assert_string_equal(ev.text, text);
                assert_int_equal(ev.token_ids[0], k);
                engine_event_clear(&ev);
            }
        }
    }
    assert_true(count_segments(s) <= 4);
    /* the reader holds events while the engine writes on: nothing is overwritten */
    engine_event_t held[100];
    for (int i = 0; i < 100; i++) {
        snprintf(text, sizeof text, "h%d-%s", i, i % 3 ? "" : "a longer text than the room");
        write_delta(s, 0, 100000 + i, text);
        publish(s);
        assert_int_equal(engine_stream_poll(s, &held[i]), 1);
    }
    for (int i = 0; i < 100; i++) {
        snprintf(text, sizeof text, "h%d-%s", i, i % 3 ? "" : "a longer text than the room");
        assert_string_equal(held[i].text, text);
        assert_int_equal(held[i].token_ids[0], 100000 + i);
    }
    stream_unref(s);
    engine_stream_release(s); /* with events still held: they stay valid until cleared */
    assert_int_equal(held[99].token_ids[0], 100099);
    for (int i = 0; i < 100; i++)
        engine_event_clear(&held[i]);
}

typedef struct reader {
    engine_stream_t *s;
    int n_events, n_finish;
    char text[4096];
    size_t len;
} reader_t;

static void *read_all(void *arg) {
    reader_t *r = arg;
    engine_event_t ev;
    int rc;
    while ((rc = engine_stream_wait(r->s, &ev, -1)) > 0) {
        r->n_events++;
        r->n_finish += ev.type == ENGINE_EV_FINISH;
        memcpy(r->text + r->len, ev.text, ev.text_len);
        r->len += ev.text_len;
        engine_event_clear(&ev);
    }
    return NULL;
}

static void count_wake(void *ctx) {
    atomic_fetch_add((atomic_int *)ctx, 1);
}

/* A reader blocked in engine_stream_wait is woken by each publication, and the wake hook runs
 * once per notify. */
static void test_blocked_reader_woken(void **state) {
    atomic_int wakes;
    atomic_init(&wakes, 0);
    engine_stream_t *s = stream_create(1, count_wake, &wakes, NULL, false);
    reader_t r = {.s = s};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, read_all, &r), 0);
    char want[4096] = "";
    for (int i = 0; i < 300; i++) {
        char text[16];
        snprintf(text, sizeof text, "%d,", i);
        strcat(want, text);
        write_delta(s, 0, i, text);
        publish(s);
    }
    write_finish(s, 0, "end", NULL);
    strcat(want, "end");
    publish(s);
    pthread_join(t, NULL);
    assert_int_equal(r.n_events, 301);
    assert_int_equal(r.n_finish, 1);
    r.text[r.len] = '\0';
    assert_string_equal(r.text, want);
    assert_int_equal(atomic_load(&wakes), 301);
    stream_unref(s);
    engine_stream_release(s);
}

/* wait with a timeout returns 0 when nothing comes. */
static void test_wait_timeout(void **state) {
    engine_stream_t *s = stream_create(1, NULL, NULL, NULL, false);
    engine_event_t ev;
    assert_int_equal(engine_stream_wait(s, &ev, 30), 0);
    assert_int_equal(engine_stream_wait(s, &ev, 0), 0);
    stream_unref(s);
    engine_stream_release(s);
}

typedef struct cancels {
    int n;
    engine_stream_t *last;
} cancels_t;

static void on_cancel(void *ctx, engine_stream_t *s) {
    cancels_t *c = ctx;
    c->n++;
    c->last = s;
}

/* A cancel reaches whoever the stream is attached to, once, with a reference of its own; a
 * detached stream's cancel goes nowhere; release cancels. */
static void test_cancel_notices(void **state) {
    cancels_t c = {0};
    engine_stream_t *s = stream_create(1, NULL, NULL, NULL, false);
    stream_attach(s, on_cancel, &c);
    int refs = atomic_load(&s->refs);
    engine_stream_cancel(s);
    engine_stream_cancel(s);
    assert_int_equal(c.n, 1);
    assert_ptr_equal(c.last, s);
    assert_int_equal(atomic_load(&s->refs), refs + 1);
    stream_unref(s); /* the notice, as the engine gives it back */
    stream_detach(s);
    stream_unref(s);
    engine_stream_release(s);

    cancels_t d = {0};
    s = stream_create(1, NULL, NULL, NULL, false);
    stream_attach(s, on_cancel, &d);
    stream_detach(s);
    engine_stream_cancel(s);
    assert_int_equal(d.n, 0);
    stream_attach(s, on_cancel, &d);
    engine_stream_release(s); /* the reader leaves an unfinished stream: a cancel */
    assert_int_equal(d.n, 1);
    stream_unref(d.last); /* the notice */
    stream_unref(s);      /* the engine: the last holder */
}

/* A FINISH that could not be queued still ends the stream for its reader. */
static void test_lost_finish(void **state) {
    engine_stream_t *s = stream_create(2, NULL, NULL, NULL, false);
    write_finish(s, 0, "", NULL);
    s->lost_finish++;
    publish(s);
    engine_event_t ev;
    assert_int_equal(engine_stream_poll(s, &ev), 1);
    engine_event_clear(&ev);
    assert_int_equal(engine_stream_poll(s, &ev), -1);
    stream_unref(s);
    engine_stream_release(s);
}

/* Without stop strings the reader detokenizes: the engine queues ids (EVR_DECODE_TOKEN, and
 * EVR_DECODE_FLUSH on the FINISH) and the reader's text equals tok_decode of the ids, long
 * tokens (past the record's room) included. */
static void test_reader_decodes(void **state) {
    mdir_t *dir;
    tokenizer_t *tok;
    err_t err = {{0}};
    if (mdir_open(tu_fixture("tokenizer/qwen3"), &dir, &err) < 0 || tok_load(dir, &tok, &err) < 0)
        fail_msg("%s", err.msg);
    const char *prompt = "Streams decode text: ünïcødé, 中文, emoji 🚀, and long-long-words.";
    int32_t *ids;
    size_t n;
    assert_int_equal(tok_encode(tok, prompt, strlen(prompt), &ids, &n, &err), 0);
    engine_stream_t *s = stream_create(1, NULL, NULL, tok, true);
    for (size_t i = 0; i + 1 < n; i++) {
        sampler_result_t r = {.token = ids[i]};
        evrec_t *rec;
        assert_non_null(
            stream_open_event(s, 0, ENGINE_EV_DELTA, &r, false, READER_TEXT_ROOM - 1, &rec));
        rec->flags |= EVR_DECODE_TOKEN;
    }
    sampler_result_t last = {.token = ids[n - 1]};
    evrec_t *rec;
    assert_non_null(
        stream_open_event(s, 0, ENGINE_EV_FINISH, &last, false, READER_TEXT_ROOM - 1, &rec));
    rec->flags |= EVR_DECODE_TOKEN | EVR_DECODE_FLUSH;
    *stream_finish_fields(s, rec) = (evfinish_t){.reason = ENGINE_FINISH_LENGTH, .stop_token = -1};
    publish(s);
    reader_t r = {.s = s};
    read_all(&r);
    r.text[r.len] = '\0';
    assert_string_equal(r.text, prompt);
    assert_int_equal(r.n_events, (int)n);
    stream_unref(s);
    engine_stream_release(s);
    free(ids);
    tok_destroy(tok);
    mdir_close(dir);
}

/* A submission that failed frees its stream whole. */
static void test_discard(void **state) {
    engine_stream_t *s = stream_create(3, NULL, NULL, NULL, false);
    write_delta(s, 0, 1, "never read");
    stream_discard(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_payloads_and_finish),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_segments_reused),
        cmocka_unit_test(test_blocked_reader_woken),
        cmocka_unit_test(test_wait_timeout),
        cmocka_unit_test(test_cancel_notices),
        cmocka_unit_test(test_lost_finish),
        cmocka_unit_test(test_reader_decodes),
        cmocka_unit_test(test_discard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

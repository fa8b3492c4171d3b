/*
 * output: output processing alone, with no engine thread, backend or model. A hand-made engine
 * (stats, limits, EOS ids, a tokenizer from the fixtures) takes sampled tokens through
 * output_on_token as the step would, and the request's stream is read back: stop conditions in
 * vLLM's order (length, then EOS and stop ids past min_tokens, then stop strings), the text held
 * back while it may still grow into a stop string, the FINISH's fields, and the stop-string
 * helpers on their own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mdir.h"
#include "output.h"
#include "testutil.h"

enum { EOS = 151645, MML = 64 };

typedef struct world {
    core_t e;
    mdir_t *dir;
} world_t;

static world_t *world_open(void) {
    world_t *w = calloc(1, sizeof *w);
    err_t err = {{0}};
    if (mdir_open(tu_fixture("tokenizer/qwen3"), &w->dir, &err) < 0 ||
        tok_load(w->dir, &w->e.tok, &err) < 0)
        fail_msg("%s", err.msg);
    w->e.stats = stats_create();
    w->e.mml = MML;
    w->e.stop_ids[0] = EOS;
    w->e.n_stop_ids = 1;
    w->e.max_chunk = tok_stream_max_chunk(w->e.tok);
    atomic_init(&w->e.n_queued, 0);
    batch_init(&w->e.batch, 16, w->e.stop_ids, 1, NULL, NULL);
    return w;
}

static void world_close(world_t *w) {
    batch_free(&w->e.batch);
    stats_destroy(w->e.stats);
    tok_destroy(w->e.tok);
    mdir_close(w->dir);
    free(w);
}

/* A one-choice request whose prompt is computed, as the engine makes it: the engine thread
 * detokenizes when it has stop strings, else its reader. */
static eng_req_t *request(world_t *w, const sampling_params_t *sp, int max_tokens) {
    eng_req_t *req = calloc(1, sizeof *req);
    err_t err;
    assert_int_equal(sampling_params_copy(&req->sp, sp, &err), 0);
    req->n = 1;
    req->max_tokens = max_tokens;
    req->reader_decodes = sp->n_stop == 0;
    req->choices = calloc(1, sizeof *req->choices);
    eng_choice_t *q = &req->choices[0];
    q->req = req;
    int32_t prompt[3] = {1, 2, 3};
    assert_int_equal(sched_seq_init(&q->b.s, prompt, 3, 8), 0);
    batch_seq_init(&q->b, &req->sp, 0, 0);
    if (!req->reader_decodes) {
        q->ts = tok_stream_create(w->e.tok, sp->skip_special_tokens);
        q->cap_pend = 64 + w->e.max_chunk + 8;
        q->pend = malloc(q->cap_pend);
    }
    req->stream = stream_create(1, NULL, NULL, req->reader_decodes ? w->e.tok : NULL,
                                sp->skip_special_tokens);
    assert_non_null(req->stream);
    req->stream->req = req;
    return req;
}

static void request_free(eng_req_t *req) {
    eng_choice_t *q = &req->choices[0];
    tok_stream_destroy(q->ts);
    free(q->pend);
    sched_seq_free(&q->b.s);
    free(req->choices);
    sampling_params_free(&req->sp);
    stream_unref(req->stream);
    engine_stream_release(req->stream);
    free(req);
}

typedef struct seen {
    char text[1024];
    char deltas[64][64]; /* each delta's text */
    int n_deltas, n_finish;
    engine_event_t fin; /* the FINISH (its strings kept until seen_free) */
} seen_t;

/* Feeds `text` token by token (as the tokenizer splits it), then the extra ids, publishing after
 * each as a step does; reads back everything. */
static void feed(world_t *w, eng_req_t *req, const char *text, const int32_t *extra, int n_extra,
                 seen_t *out) {
    int32_t *ids = NULL;
    size_t n = 0;
    err_t err;
    if (text) assert_int_equal(tok_encode(w->e.tok, text, strlen(text), &ids, &n, &err), 0);
    memset(out, 0, sizeof *out);
    eng_choice_t *q = &req->choices[0];
    engine_event_t ev;
    for (size_t i = 0; i < n + (size_t)n_extra && !q->finished; i++) {
        sampler_result_t r = {.token = i < n ? ids[i] : extra[i - n]};
        output_on_token(&w->e, q, &r, 1.0 + (double)i);
        output_flush(&w->e);
        while (engine_stream_poll(req->stream, &ev) > 0) {
            strncat(out->text, ev.text, sizeof out->text - strlen(out->text) - 1);
            if (ev.type == ENGINE_EV_FINISH) {
                out->n_finish++;
                out->fin = ev;
                continue;
            }
            if (ev.text_len && out->n_deltas < 64)
                snprintf(out->deltas[out->n_deltas++], 64, "%s", ev.text);
            engine_event_clear(&ev);
        }
    }
    free(ids);
}

/* The text of the first n tokens of text. */
static const char *first_tokens(world_t *w, const char *text, size_t n) {
    static char buf[256];
    int32_t *ids;
    size_t n_ids, len;
    char *out;
    err_t err;
    assert_int_equal(tok_encode(w->e.tok, text, strlen(text), &ids, &n_ids, &err), 0);
    assert_int_equal(tok_decode(w->e.tok, ids, n < n_ids ? n : n_ids, false, &out, &len, &err), 0);
    snprintf(buf, sizeof buf, "%s", out);
    free(out);
    free(ids);
    return buf;
}

static int count_tokens(world_t *w, const char *text) {
    int32_t *ids;
    size_t n;
    err_t err;
    assert_int_equal(tok_encode(w->e.tok, text, strlen(text), &ids, &n, &err), 0);
    free(ids);
    return (int)n;
}

static void seen_free(seen_t *s) {
    if (s->n_finish) engine_event_clear(&s->fin);
}

static void test_eos_and_min_tokens(void **state) {
    world_t *w = world_open();
    sampling_params_t sp;
    sampling_params_init(&sp);
    sp.min_tokens = 3;
    eng_req_t *req = request(w, &sp, 100);
    int32_t ids[] = {40, EOS, 41, EOS};
    seen_t s;
    feed(w, req, NULL, ids, 4, &s);
    /* the first EOS comes before min_tokens: it is a token like any other */
    assert_int_equal(s.n_finish, 1);
    assert_int_equal(s.fin.reason, ENGINE_FINISH_STOP);
    assert_int_equal(s.fin.stop_token, EOS);
    assert_int_equal(s.fin.completion_tokens, 4);
    assert_int_equal(s.fin.prompt_tokens, 3);
    assert_true(req->choices[0].finished);
    seen_free(&s);
    request_free(req);

    sampling_params_init(&sp);
    sp.ignore_eos = true;
    int32_t stop_id[] = {77};
    sp.stop_token_ids[0] = 77;
    sp.n_stop_token_ids = 1;
    req = request(w, &sp, 100);
    int32_t ids2[] = {EOS, EOS, 77};
    feed(w, req, NULL, ids2, 3, &s);
    assert_int_equal(s.fin.stop_token, stop_id[0]);
    assert_int_equal(s.fin.completion_tokens, 3);
    seen_free(&s);
    request_free(req);
    world_close(w);
}

static void test_length(void **state) {
    world_t *w = world_open();
    sampling_params_t sp;
    sampling_params_init(&sp);
    eng_req_t *req = request(w, &sp, 5);
    seen_t s;
    const char *text = "one two three four five six seven eight";
    feed(w, req, text, NULL, 0, &s);
    assert_int_equal(s.fin.reason, ENGINE_FINISH_LENGTH);
    assert_int_equal(s.fin.completion_tokens, 5);
    assert_string_equal(s.text, first_tokens(w, text, 5));
    seen_free(&s);
    request_free(req);
    /* the context limit (max-model-len) ends it too: prompt 3 + 61 = 64 tokens */
    req = request(w, &sp, 1000);
    int32_t many[80];
    for (int i = 0; i < 80; i++)
        many[i] = 64 + i % 20;
    feed(w, req, NULL, many, 80, &s);
    assert_int_equal(s.fin.reason, ENGINE_FINISH_LENGTH);
    assert_int_equal(s.fin.completion_tokens, MML - 3);
    seen_free(&s);
    request_free(req);
    world_close(w);
}

/* Text that may still become a stop string is held back; once the stop string matches, the
 * text up to it (or through it with include_stop_str_in_output) is all that comes out. */
static void test_stop_strings(void **state) {
    world_t *w = world_open();
    sampling_params_t sp;
    sampling_params_init(&sp);
    err_t err;
    assert_int_equal(sampling_params_add_stop(&sp, "STOP", &err), 0);
    assert_int_equal(sampling_params_add_stop(&sp, "the end", &err), 0);
    eng_req_t *req = request(w, &sp, 100);
    seen_t s;
    feed(w, req, "Hello ST world, STAR, STO and STOP is not said", NULL, 0, &s);
    assert_string_equal(s.text, "Hello ST world, STAR, STO and ");
    assert_int_equal(s.fin.reason, ENGINE_FINISH_STOP);
    assert_string_equal(s.fin.stop_str, "STOP");
    assert_int_equal(s.fin.stop_token, -1);
    /* no delta ends with what could still grow into a stop string */
    for (int i = 0; i < s.n_deltas; i++)
        assert_int_equal(output_held_back(&req->sp, s.deltas[i], strlen(s.deltas[i])), 0);
    seen_free(&s);
    request_free(req);

    sp.include_stop_str_in_output = true;
    req = request(w, &sp, 100);
    feed(w, req, "and that is the end of it", NULL, 0, &s);
    assert_string_equal(s.text, "and that is the end");
    assert_string_equal(s.fin.stop_str, "the end");
    seen_free(&s);
    request_free(req);

    /* no stop string: the held-back tail comes out at the finish */
    sampling_params_t sp2;
    sampling_params_init(&sp2);
    assert_int_equal(sampling_params_add_stop(&sp2, "XYZ", &err), 0);
    req = request(w, &sp2, count_tokens(w, "a b c d e XY"));
    feed(w, req, "a b c d e XY", NULL, 0, &s);
    assert_int_equal(s.fin.reason, ENGINE_FINISH_LENGTH);
    assert_string_equal(s.text, "a b c d e XY");
    seen_free(&s);
    request_free(req);
    sampling_params_free(&sp);
    sampling_params_free(&sp2);
    world_close(w);
}

static void test_stop_helpers(void **state) {
    sampling_params_t sp;
    sampling_params_init(&sp);
    err_t err;
    assert_int_equal(sampling_params_add_stop(&sp, "abc", &err), 0);
    assert_int_equal(sampling_params_add_stop(&sp, "bd", &err), 0);
    assert_int_equal(sampling_params_add_stop(&sp, "€x", &err), 0); /* 3-byte character */
    size_t at = 0;
    assert_int_equal(output_find_stop(&sp, "xxbdabc", 7, &at), 1);
    assert_int_equal(at, 2);
    assert_int_equal(output_find_stop(&sp, "xxabcbd", 7, &at), 0); /* earliest wins */
    assert_int_equal(at, 2);
    assert_int_equal(output_find_stop(&sp, "xxab", 4, &at), -1);
    assert_int_equal(output_held_back(&sp, "xxab", 4), 2);
    assert_int_equal(output_held_back(&sp, "xxa", 3), 1);
    assert_int_equal(output_held_back(&sp, "xxb", 3), 1);
    assert_int_equal(output_held_back(&sp, "xxc", 3), 0);
    assert_int_equal(output_held_back(&sp, "", 0), 0);
    /* a partial character is never split: "€" held whole, not its last bytes */
    assert_int_equal(output_held_back(&sp, "y\xe2\x82\xac", 4), 3);
    sampling_params_free(&sp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eos_and_min_tokens),
        cmocka_unit_test(test_length),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_stop_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

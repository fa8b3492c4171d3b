/*
 * engine: requests end to end through the engine thread. Most tests use the "null" backend on
 * the "tiny" preset: its next token is a fixed hash of (last token, position) (xor the seeded
 * draw of (seed, choice, output index) when temperature > 0), so every expected output is
 * computed here independently of batching, preemption, chunking and block size. The text side
 * (stop strings, logprobs with the embedded model, --tokenizer): test_engine_text.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "engine_testutil.h"
#include "rng.h"
#include "testutil.h"
#include "tokenizer.h"

enum { WAIT_MS = 20000, TINY_VOCAB = 4096 };

static engine_t *open_null_flags(int n_blocks, int mml, const char *const *flags) {
    backend_register(&null_backend_ops);
    engine_opts_t o;
    engine_opts_init(&o);
    o.model.model = "tiny";
    o.model.format = LOAD_DUMMY;
    o.model.seed = 1;
    o.backend = "null";
    o.flags.max_model_len = mml;
    o.flags.kv_cache_memory = (uint64_t)n_blocks * 16 * 64; /* null: 64 bytes per token */
    err_t err;
    for (int i = 0; flags && flags[i]; i += 2)
        if (flags_set(flags_find(flags[i]), flags[i + 1], &o.flags, &err) < 0)
            fail_msg("%s", err.msg);
    engine_t *e;
    if (engine_open(&o, &e, &err) < 0) fail_msg("engine_open: %s", err.msg);
    return e;
}

static engine_t *open_null(int n_blocks, int mml) {
    return open_null_flags(n_blocks, mml, NULL);
}

static void prompt_of(int32_t *p, int n, int base) {
    for (int i = 0; i < n; i++)
        p[i] = (base + 37 * i) % TINY_VOCAB;
}

/* The null backend's output for a prompt. */
static void expected(const int32_t *prompt, int n_prompt, int n_out, bool random, uint64_t seed,
                     int choice, int32_t *out) {
    int32_t last = prompt[n_prompt - 1];
    for (int i = 0; i < n_out; i++) {
        uint64_t key = (uint64_t)last << 32 | (uint32_t)(n_prompt - 1 + i);
        if (random) key ^= rng_bits(seed, (uint64_t)choice, (uint64_t)i);
        out[i] = last = (int32_t)(rng_mix64(key) % TINY_VOCAB);
    }
}

/* Microseconds each wake call sleeps: slows the engine thread down so that a test can act
 * while requests are surely still running (the null backend finishes thousands of steps in
 * milliseconds). */
static atomic_int throttle_us;

/* While set, the engine thread waits at its first wake call: a test submits a whole batch
 * before any of it can run, however the threads are scheduled. */
static atomic_bool hold_engine;

static void throttle(void *ctx) {
    (void)ctx;
    while (atomic_load(&hold_engine)) {
        struct timespec ts = {0, 100 * 1000};
        nanosleep(&ts, NULL);
    }
    int us = atomic_load(&throttle_us);
    if (us > 0) {
        struct timespec ts = {0, (long)us * 1000};
        nanosleep(&ts, NULL);
    }
}

static engine_stream_t *submit(engine_t *e, const int32_t *prompt, int n, int max_tokens,
                               float temperature, int n_choices, uint64_t seed) {
    engine_request_t req = {.prompt = prompt, .n_prompt = n, .wake = throttle};
    sampling_params_init(&req.sampling);
    req.sampling.max_tokens = max_tokens;
    req.sampling.temperature = temperature;
    req.sampling.n = n_choices;
    if (seed) {
        req.sampling.has_seed = true;
        req.sampling.seed = seed;
    }
    engine_stream_t *s;
    err_t err;
    if (engine_submit(e, &req, &s, &err) < 0) fail_msg("engine_submit: %s", err.msg);
    sampling_params_free(&req.sampling);
    return s;
}

static void check_output(const tu_got_t *g, int c, const int32_t *prompt, int n_prompt, int n_out,
                         bool random, uint64_t seed) {
    int32_t *want = malloc((size_t)n_out * sizeof *want);
    expected(prompt, n_prompt, n_out, random, seed, c, want);
    assert_int_equal(g->n_ids[c], n_out);
    assert_memory_equal(g->ids[c], want, (size_t)n_out * sizeof *want);
    free(want);
}

static void wait_idle(engine_t *e, stats_snapshot_t *snap) {
    for (int i = 0; i < 2000; i++) {
        engine_stats(e, snap);
        if (snap->running == 0 && snap->waiting == 0 && snap->kv_used == 0) return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    fail_msg("engine not idle: running %d waiting %d kv_used %d", snap->running, snap->waiting,
             snap->kv_used);
}

// ---------------------------------------------------------------------------------------------

static void test_single_stream(void **state) {
    engine_t *e = open_null(64, 512);
    int32_t prompt[10];
    prompt_of(prompt, 10, 5);
    engine_stream_t *s = submit(e, prompt, 10, 20, 0.0f, 1, 0);
    tu_got_t g = {0};
    tu_got_collect(s, &g);
    assert_int_equal(g.n_finish[0], 1);
    assert_int_equal(g.reason[0], ENGINE_FINISH_LENGTH);
    assert_int_equal(g.n_deltas[0], 19); /* the 20th token comes with the FINISH */
    assert_int_equal(g.completion[0], 20);
    assert_int_equal(g.prompt[0], 10);
    assert_int_equal(g.text_len[0], 0); /* a preset has no tokenizer */
    check_output(&g, 0, prompt, 10, 20, false, 0);
    engine_event_t ev;
    assert_int_equal(engine_stream_poll(s, &ev), -1);
    engine_stream_release(s);

    stats_snapshot_t snap;
    wait_idle(e, &snap);
    assert_int_equal(snap.requests_finished[ENGINE_FINISH_LENGTH], 1);
    assert_int_equal(snap.requests_submitted, 1);
    assert_int_equal(snap.generation_tokens, 20);
    assert_int_equal(snap.prompt_tokens, 10);
    assert_int_equal(snap.ttft.count, 1);
    assert_int_equal(snap.itl.count, 19);
    tu_got_free(&g);
    engine_close(e);
}

static void test_cancel(void **state) {
    engine_t *e = open_null(300, 4096);
    int32_t prompt[40];
    prompt_of(prompt, 40, 9);
    throttle_us = 500;
    engine_stream_t *s = submit(e, prompt, 40, 4000, 0.0f, 1, 0);
    tu_got_t g = {0};
    engine_event_t ev;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(engine_stream_wait(s, &ev, WAIT_MS), 1);
        tu_got_event(&g, &ev);
        engine_event_clear(&ev);
    }
    engine_stream_cancel(s);
    engine_stream_cancel(s); /* idempotent */
    tu_got_collect(s, &g);
    assert_int_equal(g.n_finish[0], 1);
    assert_int_equal(g.reason[0], ENGINE_FINISH_ABORT);
    assert_true(g.completion[0] >= 5 && g.completion[0] < 4000);
    assert_int_equal(g.n_ids[0], g.completion[0]);
    check_output(&g, 0, prompt, 40, g.n_ids[0], false, 0);
    /* the FINISH is pushed after the blocks went back and the gauges were recorded */
    stats_snapshot_t snap;
    engine_stats(e, &snap);
    assert_int_equal(snap.kv_used, 0);
    assert_int_equal(snap.running, 0);
    assert_int_equal(snap.requests_finished[ENGINE_FINISH_ABORT], 1);
    engine_stream_release(s);

    /* released before it finishes: cancelled, and freed when the engine lets go */
    s = submit(e, prompt, 40, 4000, 0.0f, 1, 0);
    engine_stream_release(s);
    wait_idle(e, &snap);
    throttle_us = 0;
    tu_got_free(&g);
    engine_close(e);
}

static engine_stream_t *submit_id(engine_t *e, const int32_t *prompt, int n, int max_tokens,
                                  const char *id) {
    engine_request_t req = {.prompt = prompt, .n_prompt = n, .wake = throttle, .request_id = id};
    sampling_params_init(&req.sampling);
    req.sampling.max_tokens = max_tokens;
    req.sampling.temperature = 0.0f;
    engine_stream_t *s;
    err_t err;
    if (engine_submit(e, &req, &s, &err) < 0) fail_msg("engine_submit: %s", err.msg);
    sampling_params_free(&req.sampling);
    return s;
}

/* An operator's cancel by request id (the console's requests table): the request ends with
 * abort on its stream, the one beside it runs to its end; both are in the snapshot's list of
 * recent finished requests with their reasons; an unknown id changes nothing. */
static void test_cancel_by_id(void **state) {
    engine_t *e = open_null(300, 4096);
    int32_t prompt[40];
    prompt_of(prompt, 40, 9);
    throttle_us = 500;
    engine_stream_t *a = submit_id(e, prompt, 40, 4000, "op-a");
    engine_stream_t *b = submit_id(e, prompt, 40, 30, "op-b");
    tu_got_t ga = {0}, gb = {0};
    engine_event_t ev;
    assert_int_equal(engine_stream_wait(a, &ev, WAIT_MS), 1);
    tu_got_event(&ga, &ev);
    engine_event_clear(&ev);
    assert_int_equal(engine_cancel(e, ""), -1);
    assert_int_equal(engine_cancel(e, "op-nobody"), 0);
    assert_int_equal(engine_cancel(e, "op-a"), 0);
    tu_got_collect(a, &ga);
    tu_got_collect(b, &gb);
    assert_int_equal(ga.n_finish[0], 1);
    assert_int_equal(ga.reason[0], ENGINE_FINISH_ABORT);
    assert_true(ga.completion[0] >= 1 && ga.completion[0] < 4000);
    assert_int_equal(gb.reason[0], ENGINE_FINISH_LENGTH);
    assert_int_equal(gb.completion[0], 30);
    stats_snapshot_t *snap = malloc(sizeof *snap);
    wait_idle(e, snap);
    assert_int_equal(snap->requests_finished[ENGINE_FINISH_ABORT], 1);
    assert_int_equal(snap->n_recent, 2);
    bool seen_a = false, seen_b = false;
    for (int i = 0; i < snap->n_recent; i++) {
        const stats_finished_t *f = &snap->recent[i];
        if (!strcmp(f->id, "op-a")) seen_a = f->finish_reason == ENGINE_FINISH_ABORT;
        if (!strcmp(f->id, "op-b"))
            seen_b = f->finish_reason == ENGINE_FINISH_LENGTH && f->generated == 30 &&
                     f->prompt_tokens == 40 && f->ttft_s >= 0 && f->e2e_s >= f->ttft_s;
    }
    assert_true(seen_a && seen_b);
    free(snap);
    throttle_us = 0;
    engine_stream_release(a);
    engine_stream_release(b);
    tu_got_free(&ga);
    tu_got_free(&gb);
    engine_close(e);
}

static void test_n_choices(void **state) {
    engine_t *e = open_null(128, 512);
    int32_t prompt[37];
    prompt_of(prompt, 37, 11);
    engine_stream_t *s = submit(e, prompt, 37, 16, 0.8f, 3, 7);
    tu_got_t g = {0};
    tu_got_collect(s, &g);
    engine_stream_release(s);
    for (int c = 0; c < 3; c++) {
        assert_int_equal(g.n_finish[c], 1);
        assert_int_equal(g.reason[c], ENGINE_FINISH_LENGTH);
        assert_int_equal(g.completion[c], 16);
        check_output(&g, c, prompt, 37, 16, true, 7);
    }
    assert_memory_not_equal(g.ids[0], g.ids[1], 16 * sizeof(int32_t));
    assert_memory_not_equal(g.ids[1], g.ids[2], 16 * sizeof(int32_t));

    /* the same seed with n = 2: the same first two choices */
    tu_got_t g2 = {0};
    s = submit(e, prompt, 37, 16, 0.8f, 2, 7);
    tu_got_collect(s, &g2);
    engine_stream_release(s);
    assert_memory_equal(g2.ids[0], g.ids[0], 16 * sizeof(int32_t));
    assert_memory_equal(g2.ids[1], g.ids[1], 16 * sizeof(int32_t));
    assert_int_equal(g2.n_finish[2], 0);

    /* greedy with n > 1 is refused, as vLLM does */
    engine_request_t req = {.prompt = prompt, .n_prompt = 37};
    sampling_params_init(&req.sampling);
    req.sampling.temperature = 0.0f;
    req.sampling.n = 3;
    err_t err;
    assert_int_equal(engine_submit(e, &req, &s, &err), -1);
    assert_non_null(strstr(err.msg, "n must be 1"));
    assert_null(s);

    stats_snapshot_t snap;
    wait_idle(e, &snap);
    tu_got_free(&g);
    tu_got_free(&g2);
    engine_close(e);
}

/* Six requests of 190 tokens in a pool for one and a half: the scheduler preempts and
 * recomputes, and every output is what it is alone. All six are submitted before the engine
 * runs any (on a loaded machine the first could otherwise finish before the second arrives,
 * and nothing would need preempting). */
static void test_preemption(void **state) {
    engine_t *e = open_null(20, 256);
    enum { N = 6 };
    int32_t prompts[N][40];
    engine_stream_t *s[N];
    atomic_store(&hold_engine, true);
    for (int i = 0; i < N; i++) {
        prompt_of(prompts[i], 40, 100 * i + 1);
        s[i] = submit(e, prompts[i], 40, 150, i % 2 ? 0.7f : 0.0f, 1, 1000 + (uint64_t)i);
    }
    atomic_store(&hold_engine, false);
    for (int i = 0; i < N; i++) {
        tu_got_t g = {0};
        tu_got_collect(s[i], &g);
        engine_stream_release(s[i]);
        assert_int_equal(g.reason[0], ENGINE_FINISH_LENGTH);
        check_output(&g, 0, prompts[i], 40, 150, i % 2, 1000 + (uint64_t)i);
        tu_got_free(&g);
    }
    stats_snapshot_t snap;
    wait_idle(e, &snap);
    assert_true(snap.preemptions > 0);
    engine_close(e);
}

static void test_chunked_prefill(void **state) {
    engine_t *e = open_null(64, 512);
    err_t err;
    assert_int_equal(engine_flag_set(e, "max-num-batched-tokens", "16", &err), 0);
    char buf[32];
    assert_int_equal(engine_flag_get(e, "max-num-batched-tokens", buf, sizeof buf, &err), 0);
    assert_string_equal(buf, "16");
    int32_t prompt[100];
    prompt_of(prompt, 100, 3);
    engine_stream_t *s = submit(e, prompt, 100, 3, 0.0f, 1, 0);
    tu_got_t g = {0};
    tu_got_collect(s, &g);
    engine_stream_release(s);
    check_output(&g, 0, prompt, 100, 3, false, 0);
    stats_snapshot_t snap;
    wait_idle(e, &snap);
    int pre[] = {16, 16, 16, 16, 16, 16, 4, 0, 0}, dec[] = {0, 0, 0, 0, 0, 0, 0, 1, 1};
    int k = 0;
    for (int i = 0; i < snap.n_steps; i++) {
        const stats_step_t *st = &snap.steps_ring[i];
        if (st->prefill_tokens + st->decode_tokens == 0) continue; /* gauge-only records */
        assert_true(k < 9);
        assert_int_equal(st->prefill_tokens, pre[k]);
        assert_int_equal(st->decode_tokens, dec[k]);
        k++;
    }
    assert_int_equal(k, 9);
    tu_got_free(&g);
    engine_close(e);
}

static void test_prefix_cache_hit(void **state) {
    engine_t *e = open_null(64, 512);
    int32_t prompt[64];
    prompt_of(prompt, 64, 21);
    tu_got_t g1 = {0}, g2 = {0};
    engine_stream_t *s = submit(e, prompt, 64, 4, 0.0f, 1, 0);
    tu_got_collect(s, &g1);
    engine_stream_release(s);
    s = submit(e, prompt, 64, 4, 0.0f, 1, 0);
    tu_got_collect(s, &g2);
    engine_stream_release(s);
    assert_int_equal(g1.cached[0], 0);
    assert_int_equal(g2.cached[0], 48); /* 3 of 4 blocks: the last token is computed */
    assert_memory_equal(g1.ids[0], g2.ids[0], 4 * sizeof(int32_t));
    stats_snapshot_t snap;
    wait_idle(e, &snap);
    assert_int_equal(snap.prefix_queries, 96);
    assert_int_equal(snap.prefix_hits, 48);
    assert_int_equal(snap.prompt_tokens, 64 + 64); /* whole prompts, as vLLM counts them */

    /* off (live): no hit */
    err_t err;
    assert_int_equal(engine_flag_set(e, "enable-prefix-caching", "false", &err), 0);
    tu_got_t g3 = {0};
    s = submit(e, prompt, 64, 4, 0.0f, 1, 0);
    tu_got_collect(s, &g3);
    engine_stream_release(s);
    assert_int_equal(g3.cached[0], 0);
    tu_got_free(&g1);
    tu_got_free(&g2);
    tu_got_free(&g3);
    engine_close(e);
}

/* Stop ids after min_tokens, and a request's own stop token ids. */
static void test_stop_token_ids(void **state) {
    engine_t *e = open_null(64, 512);
    int32_t prompt[8], want[30];
    prompt_of(prompt, 8, 77);
    expected(prompt, 8, 30, false, 0, 0, want);
    engine_request_t req = {.prompt = prompt, .n_prompt = 8};
    sampling_params_init(&req.sampling);
    req.sampling.temperature = 0.0f;
    req.sampling.max_tokens = 30;
    req.sampling.stop_token_ids[0] = want[5];
    req.sampling.n_stop_token_ids = 1;
    engine_stream_t *s;
    err_t err;
    assert_int_equal(engine_submit(e, &req, &s, &err), 0);
    tu_got_t g = {0};
    tu_got_collect(s, &g);
    engine_stream_release(s);
    int first = 0;
    while (want[first] != want[5])
        first++;
    assert_int_equal(g.reason[0], ENGINE_FINISH_STOP);
    assert_int_equal(g.stop_token[0], want[5]);
    assert_int_equal(g.completion[0], first + 1); /* the stop token counts */
    tu_got_free(&g);

    req.sampling.min_tokens = 7; /* the stop id is ignored before 7 tokens */
    assert_int_equal(engine_submit(e, &req, &s, &err), 0);
    tu_got_collect(s, &g);
    engine_stream_release(s);
    assert_true(g.completion[0] > 7);
    for (int i = 6; i < g.n_ids[0] - 1; i++)
        assert_int_not_equal(g.ids[0][i], want[5]);
    check_output(&g, 0, prompt, 8, g.n_ids[0], false, 0);
    tu_got_free(&g);
    sampling_params_free(&req.sampling);
    engine_close(e);
}

/* block-size 16 -> 32 while 8 requests run: all preempted, pool rebuilt, all resumed. */
static void test_rebuild_block_size(void **state) {
    engine_t *e = open_null(512, 1024);
    throttle_us = 100;
    enum { N = 8 };
    int32_t prompts[N][64];
    engine_stream_t *s[N];
    tu_got_t g[N];
    memset(g, 0, sizeof g);
    for (int i = 0; i < N; i++) {
        prompt_of(prompts[i], 30 + i, 7 * i + 2);
        s[i] = submit(e, prompts[i], 30 + i, 400, i % 2 ? 0.9f : 0.0f, 1, 50 + (uint64_t)i);
    }
    engine_event_t ev;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 3; k++) {
            assert_int_equal(engine_stream_wait(s[i], &ev, WAIT_MS), 1);
            tu_got_event(&g[i], &ev);
            engine_event_clear(&ev);
        }
    stats_snapshot_t before;
    engine_stats(e, &before);
    assert_int_equal(before.running, N);
    err_t err;
    assert_int_equal(engine_flag_set(e, "block-size", "32", &err), 0);
    char buf[32];
    engine_flag_get(e, "block-size", buf, sizeof buf, &err);
    assert_string_equal(buf, "32");
    throttle_us = 0;
    for (int i = 0; i < N; i++) {
        tu_got_collect(s[i], &g[i]);
        engine_stream_release(s[i]);
        assert_int_equal(g[i].reason[0], ENGINE_FINISH_LENGTH);
        check_output(&g[i], 0, prompts[i], 30 + i, 400, i % 2, 50 + (uint64_t)i);
        tu_got_free(&g[i]);
    }
    stats_snapshot_t snap;
    wait_idle(e, &snap);
    assert_int_equal(snap.preemptions, before.preemptions + N); /* all, by the rebuild */
    assert_int_equal(snap.kv_total, 256); /* same bytes, blocks twice as large */

    /* refused: a max-model-len a running request does not fit in */
    int32_t p[100];
    prompt_of(p, 100, 1);
    atomic_store(&throttle_us, 1000);
    engine_stream_t *t = submit(e, p, 100, 800, 0.0f, 1, 0);
    assert_int_equal(engine_stream_wait(t, &ev, WAIT_MS), 1);
    engine_event_clear(&ev);
    assert_int_equal(engine_flag_set(e, "max-model-len", "512", &err), -1);
    assert_non_null(strstr(err.msg, "max-model-len"));
    engine_flag_get(e, "max-model-len", buf, sizeof buf, &err);
    assert_string_equal(buf, "1024");
    engine_stream_release(t);
    atomic_store(&throttle_us, 0);
    wait_idle(e, &snap);
    assert_int_equal(engine_flag_set(e, "max-model-len", "512", &err), 0);
    assert_int_equal(engine_flag_set(e, "max-model-len", "8192", &err), -1);
    assert_non_null(strstr(err.msg, "max_position_embeddings"));
    engine_close(e);
}

static void test_close_aborts(void **state) {
    engine_t *e = open_null(1024, 4096);
    throttle_us = 200;
    enum { N = 4 };
    int32_t prompt[20];
    prompt_of(prompt, 20, 4);
    engine_stream_t *s[N];
    for (int i = 0; i < N; i++)
        s[i] = submit(e, prompt, 20, 4000, 0.5f, i == 3 ? 3 : 1, 9);
    engine_event_t ev;
    assert_int_equal(engine_stream_wait(s[0], &ev, WAIT_MS), 1);
    engine_event_clear(&ev);
    engine_close(e);
    throttle_us = 0;
    for (int i = 0; i < N; i++) {
        tu_got_t g = {0};
        tu_got_collect(s[i], &g);
        int n = i == 3 ? 3 : 1;
        for (int c = 0; c < n; c++) {
            assert_int_equal(g.n_finish[c], 1);
            assert_int_equal(g.reason[c], ENGINE_FINISH_ABORT);
        }
        engine_stream_cancel(s[i]); /* after close: a no-op */
        engine_stream_release(s[i]);
        tu_got_free(&g);
    }
}

static void test_rejections(void **state) {
    engine_t *e = open_null(64, 512);
    int32_t prompt[512];
    prompt_of(prompt, 512, 1);
    engine_request_t req = {.prompt = prompt, .n_prompt = 500};
    sampling_params_init(&req.sampling);
    req.sampling.max_tokens = 20;
    engine_stream_t *s;
    err_t err;
    assert_int_equal(engine_submit(e, &req, &s, &err), -1);
    assert_non_null(strstr(err.msg, "maximum context length is 512"));
    req.n_prompt = 512;
    req.sampling.max_tokens = SAMPLING_UNSET_I;
    assert_int_equal(engine_submit(e, &req, &s, &err), -1);
    req.n_prompt = 10;
    prompt[3] = TINY_VOCAB;
    assert_int_equal(engine_submit(e, &req, &s, &err), -1);
    assert_non_null(strstr(err.msg, "vocabulary"));
    prompt[3] = 1;
    assert_int_equal(sampling_params_add_stop(&req.sampling, "x", &err), 0);
    assert_int_equal(engine_submit(e, &req, &s, &err), -1);
    assert_non_null(strstr(err.msg, "tokenizer"));
    sampling_params_free(&req.sampling);
    sampling_params_init(&req.sampling);
    req.sampling.temperature = 5.0f;
    assert_int_equal(engine_submit(e, &req, &s, &err), -1);
    assert_non_null(strstr(err.msg, "temperature"));
    req.n_prompt = 0;
    assert_int_equal(engine_submit(e, &req, &s, &err), -1);

    /* a reload the null backend cannot do: refused with why, the engine back as it was */
    assert_int_equal(engine_flag_set(e, "tensor-parallel-size", "2", &err), -1);
    assert_non_null(strstr(err.msg, "tensor"));
    assert_true(engine_alive(e));
    assert_int_equal(engine_flag_set(e, "kv-cache-dtype", "fp8", &err), -1);
    assert_non_null(strstr(err.msg, "cuda"));
    assert_int_equal(engine_flag_set(e, "no-such-flag", "1", &err), -1);
    assert_int_equal(engine_flag_set(e, "max-num-seqs", "zero", &err), -1);
    assert_int_equal(engine_flag_set(e, "kv-cache-memory", "1KiB", &err), -1);
    assert_non_null(strstr(err.msg, "kv-cache-memory"));
    char buf[32];
    assert_int_equal(engine_flag_get(e, "max-num-seqs", buf, sizeof buf, &err), 0);
    assert_string_equal(buf, "256");
    engine_close(e);

    /* a pool too small for one max-model-len sequence: the message says what to raise */
    backend_register(&null_backend_ops);
    engine_opts_t o;
    engine_opts_init(&o);
    o.model.model = "tiny";
    o.model.format = LOAD_DUMMY;
    o.backend = "null";
    o.flags.kv_cache_memory = 16 * 1024; /* 16 blocks of 16 tokens */
    o.flags.max_model_len = 4096;
    assert_int_equal(engine_open(&o, &e, &err), -1);
    assert_non_null(strstr(err.msg, "kv-cache-memory"));
    o.flags.max_model_len = 0; /* auto: what the pool holds, below the model's 4096 */
    assert_int_equal(engine_open(&o, &e, &err), 0);
    assert_int_equal(engine_flag_get(e, "max-model-len", buf, sizeof buf, &err), 0);
    assert_string_equal(buf, "256");
    engine_close(e);
    o.flags.max_model_len = 100000;
    assert_int_equal(engine_open(&o, &e, &err), -1);
    assert_non_null(strstr(err.msg, "max_position_embeddings"));
    o.backend = "nope";
    assert_int_equal(engine_open(&o, &e, &err), -1);
    assert_non_null(strstr(err.msg, "unknown backend"));
}

static void count_wake(void *ctx) {
    atomic_fetch_add((atomic_int *)ctx, 1);
}

static void test_wake_hook(void **state) {
    engine_t *e = open_null(64, 512);
    int32_t prompt[5];
    prompt_of(prompt, 5, 8);
    atomic_int wakes = 0;
    engine_request_t req = {
        .prompt = prompt, .n_prompt = 5, .wake = count_wake, .wake_ctx = &wakes};
    sampling_params_init(&req.sampling);
    req.sampling.max_tokens = 10;
    engine_stream_t *s;
    err_t err;
    assert_int_equal(engine_submit(e, &req, &s, &err), 0);
    tu_got_t g = {0};
    tu_got_collect(s, &g);
    /* one call per step that gave the stream events: 10 steps, one token each */
    for (int i = 0; i < 2000 && atomic_load(&wakes) < 10; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(atomic_load(&wakes), 10);
    engine_stream_release(s);
    tu_got_free(&g);

    /* none once engine_stream_release has returned */
    atomic_store(&wakes, 0);
    req.sampling.max_tokens = 500;
    assert_int_equal(engine_submit(e, &req, &s, &err), 0);
    engine_event_t ev;
    assert_int_equal(engine_stream_wait(s, &ev, WAIT_MS), 1);
    engine_event_clear(&ev);
    engine_stream_release(s);
    int after = atomic_load(&wakes);
    stats_snapshot_t snap;
    wait_idle(e, &snap);
    assert_int_equal(atomic_load(&wakes), after);
    engine_close(e);
}

/* "flaky": the null backend, except that a batch holding token FLAKY_ID fails. */
enum { FLAKY_ID = 4000 };

static const backend_ops_t *flaky_ops(void);

static int flaky_create(const backend_options_t *o, const model_weights_t *w, backend_t **out,
                        err_t *err) {
    if (null_backend_ops.create(o, w, out, err) < 0) return -1;
    (*out)->ops = flaky_ops(); /* the instance dispatches through its own table */
    return 0;
}

static int flaky_forward(backend_t *be, const be_batch_t *b, float *logits, err_t *err) {
    for (int i = 0; i < b->n_tokens; i++)
        if (b->token_ids[i] == FLAKY_ID) return err_set(err, "flaky: token %d", FLAKY_ID);
    return null_backend_ops.forward(be, b, logits, err);
}

static const backend_ops_t *flaky_ops(void) {
    static backend_ops_t ops;
    ops = null_backend_ops;
    ops.name = "flaky";
    ops.create = flaky_create;
    ops.forward = flaky_forward;
    return &ops;
}

/* A failed forward ends every request of that step with the error; the engine goes on. */
static void test_forward_error(void **state) {
    assert_int_equal(backend_register(flaky_ops()), 0);
    engine_opts_t o;
    engine_opts_init(&o);
    o.model.model = "tiny";
    o.model.format = LOAD_DUMMY;
    o.backend = "flaky";
    o.flags.max_model_len = 512;
    o.flags.kv_cache_memory = 64 * 16 * 64;
    engine_t *e;
    err_t err;
    if (engine_open(&o, &e, &err) < 0) fail_msg("%s", err.msg);
    int32_t pa[10], pb[10], pc[10];
    prompt_of(pa, 10, 1);
    prompt_of(pb, 10, 2);
    prompt_of(pc, 10, 3);
    pb[4] = FLAKY_ID;
    atomic_store(&throttle_us, 500);
    engine_stream_t *a = submit(e, pa, 10, 400, 0.0f, 1, 0);
    engine_event_t ev;
    assert_int_equal(engine_stream_wait(a, &ev, WAIT_MS), 1); /* a is running */
    engine_event_clear(&ev);
    engine_stream_t *b = submit(e, pb, 10, 5, 0.0f, 1, 0);
    tu_got_t ga = {0}, gb = {0}, gc = {0};
    tu_got_collect(b, &gb);
    tu_got_collect(a, &ga);
    atomic_store(&throttle_us, 0);
    assert_int_equal(gb.reason[0], ENGINE_FINISH_ERROR);
    assert_non_null(strstr(gb.error[0], "flaky: token 4000"));
    assert_int_equal(ga.reason[0], ENGINE_FINISH_ERROR); /* it shared b's step */
    assert_true(ga.completion[0] < 400);
    engine_stream_release(a);
    engine_stream_release(b);
    engine_stream_t *c = submit(e, pc, 10, 5, 0.0f, 1, 0);
    tu_got_collect(c, &gc);
    engine_stream_release(c);
    assert_int_equal(gc.reason[0], ENGINE_FINISH_LENGTH);
    check_output(&gc, 0, pc, 10, 5, false, 0);
    stats_snapshot_t snap;
    wait_idle(e, &snap);
    assert_int_equal(snap.requests_finished[ENGINE_FINISH_ERROR], 2);
    tu_got_free(&ga);
    tu_got_free(&gb);
    tu_got_free(&gc);
    engine_close(e);
}

/* Three threads submit, read (blocking and polling), cancel and release at random, on a pool
 * small enough to preempt: every stream ends with one FINISH per choice, every completed
 * choice is what it is alone, and the pool is empty at the end. */
typedef struct worker {
    engine_t *e;
    unsigned seed;
    int checked;
    char failure[160]; /* the first problem (cmocka's asserts belong to the main thread) */
} worker_t;

static void worker_fail(worker_t *w, const char *what, int r, int c) {
    if (!w->failure[0])
        snprintf(w->failure, sizeof w->failure, "request %d choice %d: %s", r, c, what);
}

static void *worker_main(void *arg) {
    worker_t *w = arg;
    for (int r = 0; r < 20; r++) {
        int n_prompt = 5 + (int)(rand_r(&w->seed) % 56);
        int max_tokens = 5 + (int)(rand_r(&w->seed) % 146);
        int n = 1 + (int)(rand_r(&w->seed) % 3);
        uint64_t seed = 1 + rand_r(&w->seed) % 1000;
        int32_t prompt[64];
        prompt_of(prompt, n_prompt, (int)(rand_r(&w->seed) % 4000));
        engine_stream_t *s = submit(w->e, prompt, n_prompt, max_tokens, 0.8f, n, seed);
        int action = (int)(rand_r(&w->seed) % 4); /* 0, 1: read all; 2: cancel; 3: release */
        int after = (int)(rand_r(&w->seed) % 20);
        tu_got_t g = {0};
        engine_event_t ev;
        int rc, seen = 0;
        for (;;) {
            rc = r % 2 ? engine_stream_poll(s, &ev) : engine_stream_wait(s, &ev, WAIT_MS);
            if (rc < 0) break;
            if (rc == 0) {
                if (r % 2 == 0) {
                    worker_fail(w, "stream stalled", r, -1);
                    break;
                }
                sched_yield();
                continue;
            }
            int c = ev.choice;
            if (c < 0 || c >= n || g.n_finish[c]) worker_fail(w, "event after its FINISH", r, c);
            if (c >= 0 && c < TU_MAXC && !g.n_finish[c]) tu_got_event(&g, &ev);
            engine_event_clear(&ev);
            if (++seen == after && action == 2) engine_stream_cancel(s);
            if (seen == after && action == 3) break;
        }
        engine_stream_release(s);
        for (int c = 0; rc < 0 && c < n; c++) {
            int32_t want[160];
            expected(prompt, n_prompt, max_tokens, true, seed, c, want);
            if (g.n_finish[c] != 1)
                worker_fail(w, "no FINISH", r, c);
            else if (g.reason[c] == ENGINE_FINISH_LENGTH) {
                if (g.n_ids[c] != max_tokens ||
                    memcmp(g.ids[c], want, (size_t)max_tokens * sizeof *want) != 0)
                    worker_fail(w, "output differs from the request alone", r, c);
                w->checked++;
            } else if (g.reason[c] != ENGINE_FINISH_ABORT) {
                worker_fail(w, "unexpected finish reason", r, c);
            }
        }
        tu_got_free(&g);
    }
    return NULL;
}

static void test_concurrent_readers(void **state) {
    engine_t *e = open_null_flags(
        24, 256, (const char *const[]){"max-num-seqs", "16", "max-num-batched-tokens", "64", NULL});
    pthread_t t[3];
    worker_t w[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (worker_t){.e = e, .seed = 17u + (unsigned)i};
        pthread_create(&t[i], NULL, worker_main, &w[i]);
    }
    int checked = 0;
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        if (w[i].failure[0]) fail_msg("worker %d: %s", i, w[i].failure);
        checked += w[i].checked;
    }
    assert_true(checked > 10);
    stats_snapshot_t snap;
    wait_idle(e, &snap);
    assert_true(snap.preemptions > 0);
    engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_stream),      cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_cancel_by_id),       cmocka_unit_test(test_n_choices),
        cmocka_unit_test(test_preemption),         cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_prefix_cache_hit),   cmocka_unit_test(test_stop_token_ids),
        cmocka_unit_test(test_rebuild_block_size), cmocka_unit_test(test_close_aborts),
        cmocka_unit_test(test_rejections),         cmocka_unit_test(test_wake_hook),
        cmocka_unit_test(test_concurrent_readers), cmocka_unit_test(test_forward_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

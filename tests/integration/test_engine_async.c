/* Asynchronous scheduling (--async-scheduling, engine/core_async.c) changes no output: the same
 * mixed workload on the CPU backend with steps ahead (on) and without (off) gives every choice
 * the same token ids, text, finish reason, stop string and usage:
 * - greedy, seeded sampled (top-p, logprobs), stop strings, stop ids, min_tokens with EOS,
 *   presence / frequency / repetition penalties (which sit out the step ahead), n = 2 (forks),
 *   max_tokens short and long, all at once under a token budget that chunks prompts;
 * - the same in a pool small enough that sequences are preempted (asserted) and recomputed;
 * - Qwen3.5 (recurrent state carried across steps ahead; n = 2 forks copy state at a fork
 *   point);
 * and the asynchronous runs did run ahead (stats: steps_ahead, tokens_ahead > 0), the
 * synchronous ones never. Then streams released mid-generation (cancels) while steps run ahead:
 * the others finish as alone, every block returns to the pool and (ASan) nothing leaks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine.h"
#include "engine_testutil.h"
#include "rng.h"
#include "testutil.h"

#define N_REQ 24

static tu_got_t got[2][N_REQ];

/* Request i of the mixed workload. */
static sampling_params_t params_of(int i) {
    sampling_params_t p;
    sampling_params_init(&p);
    p.max_tokens = 6 + (int)(rng_bits(77, 0, (uint64_t)i) % 24);
    switch (i % 8) {
        case 0: /* greedy, EOS ignored */
            p.temperature = 0.0f;
            p.ignore_eos = true;
            break;
        case 1: /* seeded sampling with logprobs */
            p.temperature = 0.8f;
            p.top_p = 0.9f;
            p.has_seed = true;
            p.seed = 100 + (uint64_t)i;
            p.logprobs = 2;
            break;
        case 2: /* stop strings (single letters: they do end some) and a stop id */
            p.temperature = 0.0f;
            p.stop[0] = strdup("e");
            p.stop[1] = strdup("s");
            p.n_stop = 2;
            p.stop_token_ids[0] = 17;
            p.n_stop_token_ids = 1;
            break;
        case 3: /* penalties: reads its own output, never ahead */
            p.temperature = 0.7f;
            p.has_seed = true;
            p.seed = 7;
            p.presence_penalty = 0.5f;
            p.frequency_penalty = 0.3f;
            break;
        case 4: /* two choices, forked after the prompt */
            p.n = 2;
            p.temperature = 1.0f;
            p.has_seed = true;
            p.seed = 3;
            break;
        case 5: /* min_tokens before EOS may end it */
            p.temperature = 1.0f;
            p.has_seed = true;
            p.seed = 11;
            p.min_tokens = 3;
            break;
        case 6: /* repetition penalty, greedy */
            p.temperature = 0.0f;
            p.repetition_penalty = 1.3f;
            break;
        default: /* one token */
            p.max_tokens = 1;
            p.temperature = 0.0f;
            break;
    }
    return p;
}

/* Runs the workload on a fresh engine: all requests at once; returns its stats. */
static void run(const char *fixture, const char *async, const char *pool, tu_got_t *out,
                stats_snapshot_t *snap) {
    const char *flags[] = {"max-num-batched-tokens",
                           "48",
                           "max-model-len",
                           "160",
                           "async-scheduling",
                           async,
                           pool ? "kv-cache-memory" : NULL,
                           pool,
                           NULL};
    engine_t *eng = tu_open_engine(tu_fixture(fixture), "cpu", flags);
    engine_stream_t *s[N_REQ];
    int32_t prompt[96];
    for (int i = 0; i < N_REQ; i++) {
        int n = tu_prompt(i, prompt);
        for (int k = 0; k < n; k++) /* within tiny-qwen3.5's 1,088 ids too */
            prompt[k] %= 1024;
        sampling_params_t p = params_of(i);
        s[i] = tu_submit(eng, prompt, n, &p);
        sampling_params_free(&p);
    }
    for (int i = 0; i < N_REQ; i++) {
        memset(&out[i], 0, sizeof out[i]);
        tu_got_collect(s[i], &out[i]);
        engine_stream_release(s[i]);
    }
    engine_stats(eng, snap);
    engine_close(eng);
}

static void expect_same(const char *what, const tu_got_t *a, const tu_got_t *b) {
    for (int i = 0; i < N_REQ; i++) {
        sampling_params_t p = params_of(i);
        for (int c = 0; c < p.n; c++) {
            if (a[i].n_ids[c] != b[i].n_ids[c] ||
                memcmp(a[i].ids[c], b[i].ids[c], (size_t)a[i].n_ids[c] * sizeof(int32_t)))
                fail_msg("%s: request %d choice %d: %d tokens in steps ahead, %d without (or "
                         "other ids)",
                         what, i, c, a[i].n_ids[c], b[i].n_ids[c]);
            assert_int_equal(a[i].text_len[c], b[i].text_len[c]);
            if (a[i].text_len[c]) assert_memory_equal(a[i].text[c], b[i].text[c], a[i].text_len[c]);
            assert_int_equal(a[i].n_finish[c], 1);
            assert_int_equal(b[i].n_finish[c], 1);
            assert_int_equal(a[i].reason[c], b[i].reason[c]);
            assert_int_equal(a[i].completion[c], b[i].completion[c]);
            assert_int_equal(a[i].completion[c], a[i].n_ids[c]);
            assert_int_equal(a[i].stop_token[c], b[i].stop_token[c]);
            assert_string_equal(a[i].stop_str[c], b[i].stop_str[c]);
        }
        sampling_params_free(&p);
    }
}

static void ab(const char *fixture, const char *pool, bool expect_preemption) {
    static stats_snapshot_t on, off;
    run(fixture, "on", pool, got[0], &on);
    run(fixture, "off", pool, got[1], &off);
    expect_same(fixture, got[0], got[1]);
    print_message("%s%s: %llu steps ahead, %llu tokens ahead of %llu steps; %llu preemptions\n",
                  fixture, pool ? " (small pool)" : "", (unsigned long long)on.steps_ahead,
                  (unsigned long long)on.tokens_ahead, (unsigned long long)on.steps,
                  (unsigned long long)on.preemptions);
    assert_true(on.steps_ahead > 0 && on.tokens_ahead > 0);
    assert_true(off.steps_ahead == 0 && off.tokens_ahead == 0);
    if (expect_preemption) assert_true(on.preemptions > 0 && off.preemptions > 0);
    /* the choices that ended differently from one another: the workload is not trivial */
    int stopped = 0, lengths = 0;
    for (int i = 0; i < N_REQ; i++) {
        stopped += got[1][i].reason[0] == ENGINE_FINISH_STOP;
        lengths += got[1][i].reason[0] == ENGINE_FINISH_LENGTH;
    }
    assert_true(stopped > 0 && lengths > 0);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N_REQ; i++)
            tu_got_free(&got[k][i]);
}

static void test_same_outputs(void **state) {
    (void)state;
    ab("tiny-qwen3", NULL, false);
}

/* 10 blocks of 16 tokens (3 layers x K,V x 2 heads x 128 x f32 = 96 KiB a block): one
 * max-model-len sequence */
static void test_same_outputs_preempted(void **state) {
    (void)state;
    static char pool[32];
    snprintf(pool, sizeof pool, "%d", 10 * 16 * 3 * 2 * 2 * 128 * 4);
    ab("tiny-qwen3", pool, true);
}

static void test_same_outputs_qwen35(void **state) {
    (void)state;
    ab("tiny-qwen3.5", NULL, false);
}

/* Half the streams released after their third event, while steps run ahead. */
static void test_cancels(void **state) {
    (void)state;
    const char *flags[] = {"async-scheduling", "on", "max-model-len", "256", NULL};
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", flags);
    enum { N = 12 };
    engine_stream_t *s[N];
    int32_t prompt[96];
    sampling_params_t p = tu_greedy(120);
    for (int i = 0; i < N; i++)
        s[i] = tu_submit(eng, prompt, tu_prompt(40 + i, prompt), &p);
    for (int i = 0; i < N; i += 2) {
        engine_event_t ev;
        for (int k = 0; k < 3; k++) {
            assert_true(engine_stream_wait(s[i], &ev, 20000) > 0);
            engine_event_clear(&ev);
        }
        engine_stream_release(s[i]);
    }
    for (int i = 1; i < N; i += 2) {
        tu_got_t g = {0};
        tu_got_collect(s[i], &g);
        assert_int_equal(g.n_ids[0], 120);
        assert_int_equal(g.reason[0], ENGINE_FINISH_LENGTH);
        tu_got_free(&g);
        engine_stream_release(s[i]);
    }
    static stats_snapshot_t snap;
    for (int t = 0; t < 400; t++) { /* the engine may take a step to settle */
        engine_stats(eng, &snap);
        if (snap.kv_used == 0 && snap.running == 0) break;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(snap.kv_used, 0);
    assert_int_equal(snap.running, 0);
    assert_true(snap.tokens_ahead > 0);
    engine_close(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_outputs),
        cmocka_unit_test(test_same_outputs_preempted),
        cmocka_unit_test(test_same_outputs_qwen35),
        cmocka_unit_test(test_cancels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

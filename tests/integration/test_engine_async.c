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

static void ab(const char *fixture, const char *pool, bool expect_preemption) {
    static stats_snapshot_t on, off;
    const char *flags[] = {"kv-cache-memory", pool, NULL};
    tu_mixed_run(fixture, "cpu", "on", pool ? flags : NULL, N_REQ, got[0], &on);
    tu_mixed_run(fixture, "cpu", "off", pool ? flags : NULL, N_REQ, got[1], &off);
    tu_mixed_expect_same(fixture, N_REQ, got[0], got[1]);
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

/* The engine with a hybrid model (tiny-qwen3.5: Gated DeltaNet layers with a recurrent state
 * per sequence, gated attention layers with a KV cache) on the CPU backend:
 * - batch invariance: each request's greedy output is the same alone and among 24 concurrent
 *   requests, for token budgets that cut prompts into prefill chunks (the state carried from
 *   chunk to chunk) and a pool small enough to force preemption (asserted), where a preempted
 *   sequence rebuilds its state by recomputation; the same at tensor-parallel size 2, against
 *   TP 1's tokens alone;
 * - after every run, all KV blocks and all state slots are back;
 * - a request with n = 3 (forks after the prompt, each copying the parent's state), sampled with
 *   top_k 1, gives three choices equal to the greedy request alone. */
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

#define N_REQ     24
#define N_GEN     10
#define MAX_TOKEN 1000 /* the fixture's regular ids: below <|endoftext|> */

static int32_t prompts[N_REQ][128];
static int prompt_len[N_REQ];
static int32_t alone[N_REQ][N_GEN];

static engine_t *open_q35(const char *const *flags) {
    return tu_open_engine(tu_fixture("tiny-qwen3.5"), "cpu", flags);
}

/* Reads a stream to its end: the tokens of each choice. */
static void collect(engine_stream_t *s, int32_t out[][N_GEN], int n_choices) {
    int n[4] = {0};
    engine_event_t ev;
    int rc;
    while ((rc = engine_stream_wait(s, &ev, 120000)) > 0) {
        assert_true(ev.choice >= 0 && ev.choice < n_choices);
        for (int i = 0; i < ev.n_tokens && n[ev.choice] < N_GEN; i++)
            out[ev.choice][n[ev.choice]++] = ev.token_ids[i];
        engine_event_clear(&ev);
    }
    assert_int_equal(rc, -1);
    for (int c = 0; c < n_choices; c++)
        assert_int_equal(n[c], N_GEN);
    engine_stream_release(s);
}

static void expect_pool_empty(engine_t *eng) {
    static stats_snapshot_t snap;
    for (int i = 0; i < 200; i++) {
        engine_stats(eng, &snap);
        if (snap.kv_used == 0 && snap.state_used == 0 && snap.running == 0 && snap.waiting == 0)
            break;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    if (snap.kv_used || snap.state_used || snap.running || snap.waiting)
        fail_msg("after every request ended: %d blocks and %d state slots in use, %d running, "
                 "%d waiting",
                 snap.kv_used, snap.state_used, snap.running, snap.waiting);
    assert_true(snap.state_total > 0);
}

static void run_together(const char *const *flags, bool expect_preemption) {
    engine_t *eng = open_q35(flags);
    sampling_params_t p = tu_greedy(N_GEN);
    engine_stream_t *streams[N_REQ];
    for (int i = 0; i < N_REQ; i++)
        streams[i] = tu_submit(eng, prompts[i], prompt_len[i], &p);
    for (int i = 0; i < N_REQ; i++) {
        int32_t got[1][N_GEN];
        collect(streams[i], got, 1);
        for (int k = 0; k < N_GEN; k++)
            if (got[0][k] != alone[i][k])
                fail_msg("request %d (prompt %d tokens), %s %s, %s %s: token %d is %d in the "
                         "batch, %d alone",
                         i, prompt_len[i], flags[0], flags[1], flags[2], flags[3], k, got[0][k],
                         alone[i][k]);
    }
    expect_pool_empty(eng);
    static stats_snapshot_t snap;
    engine_stats(eng, &snap);
    print_message("%s %s, %s %s: %llu preemptions\n", flags[0], flags[1], flags[2], flags[3],
                  (unsigned long long)snap.preemptions);
    if (expect_preemption) assert_true(snap.preemptions > 0);
    engine_close(eng);
}

static void test_batch_invariance(void **state) {
    for (int i = 0; i < N_REQ; i++) {
        prompt_len[i] = 3 + (int)(rng_uniform(35, 1, (uint64_t)i) * 110.0f);
        for (int t = 0; t < prompt_len[i]; t++)
            prompts[i][t] = (int32_t)(rng_uniform(35, 2, (uint64_t)(i * 128 + t)) * MAX_TOKEN);
    }
    const char *const base[] = {"max-model-len", "128", NULL};
    engine_t *eng = open_q35(base);
    sampling_params_t p = tu_greedy(N_GEN);
    for (int i = 0; i < N_REQ; i++)
        collect(tu_submit(eng, prompts[i], prompt_len[i], &p), &alone[i], 1);
    expect_pool_empty(eng);
    engine_close(eng);

    static const char *budgets[] = {"16", "70", "2048"};
    for (int b = 0; b < 3; b++) {
        const char *flags[] = {"max-num-batched-tokens", budgets[b], "max-model-len", "128", NULL};
        run_together(flags, false);
    }
    /* The CPU backend's KV block: 2 attention layers x K,V x 16 tokens x 2 heads x 64 x f32 =
     * 32 KiB (the 6 linear layers keep no K/V); a state slot: 6 linear layers x (3 x 256 conv +
     * 4 x 32 x 32 SSM) floats = 114 KiB. The engine keeps one max-model-len sequence's blocks (8)
     * and gives the rest to slots, so this pool is eight slots and eight blocks: eight sequences
     * run at a time and their blocks run out. */
    static char pool[32];
    snprintf(pool, sizeof pool, "%d", 8 * 32768 + 8 * 116736);
    for (int b = 0; b < 3; b++) {
        const char *flags[] = {"max-num-batched-tokens",
                               budgets[b],
                               "kv-cache-memory",
                               pool,
                               "max-model-len",
                               "128",
                               NULL};
        run_together(flags, true);
    }
    /* tensor parallel 2 (cpu ranks as threads, each with half the heads: the same bytes per
     * block and per slot over the two ranks): the same tokens as TP 1 alone */
    const char *tp2[] = {"tensor-parallel-size",
                         "2",
                         "max-num-batched-tokens",
                         "70",
                         "kv-cache-memory",
                         pool,
                         "max-model-len",
                         "128",
                         NULL};
    run_together(tp2, true);
}

static void test_forks_copy_state(void **state) {
    const char *const flags[] = {"max-model-len", "128", NULL};
    engine_t *eng = open_q35(flags);
    sampling_params_t p = tu_greedy(N_GEN);
    p.n = 3; /* sampled (n > 1 is), but top_k 1 keeps each choice greedy */
    p.temperature = 1.0f;
    p.top_k = 1;
    int32_t got[3][N_GEN];
    collect(tu_submit(eng, prompts[5], prompt_len[5], &p), got, 3);
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < N_GEN; k++)
            if (got[c][k] != alone[5][k])
                fail_msg("choice %d token %d is %d, %d alone", c, k, got[c][k], alone[5][k]);
    expect_pool_empty(eng);
    engine_close(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_forks_copy_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

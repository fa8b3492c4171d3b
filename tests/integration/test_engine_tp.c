/* The engine at tensor-parallel size 2 on the CPU backend (ranks as threads): 12 requests, each
 * alone at TP 1, alone at TP 2, and all together at TP 2 under a token budget of 64 with a KV
 * pool of 10 blocks, which forces preemption (asserted): every request's greedy tokens are the
 * same in the three runs, and every block is back in the pool after the batch. For Qwen3 dense
 * (tiny-qwen3) and Qwen3-MoE (tiny-qwen3-moe) with experts sliced (tensor parallel) and placed
 * whole (expert parallel). Qwen3.5 at TP 2: test_engine_qwen35. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine.h"
#include "engine_testutil.h"
#include "testutil.h"

#define N_REQ 12
#define N_GEN 12

static int32_t prompts[N_REQ][96];
static int prompt_len[N_REQ];

/* Greedy tokens of every request into out[N_REQ][N_GEN]: one at a time (alone) or all submitted
 * at once. Returns the engine's preemptions. */
static uint64_t run(const char *fixture, const char *const *flags, bool alone,
                    int32_t out[N_REQ][N_GEN]) {
    engine_t *eng = tu_open_engine(tu_fixture(fixture), "cpu", flags);
    sampling_params_t p = tu_greedy(N_GEN);
    engine_stream_t *s[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        s[i] = tu_submit(eng, prompts[i], prompt_len[i], &p);
        if (!alone && i + 1 < N_REQ) continue;
        for (int j = alone ? i : 0; j <= i; j++) {
            int n = 0, rc;
            engine_event_t ev;
            while ((rc = engine_stream_wait(s[j], &ev, 60000)) > 0) {
                for (int k = 0; k < ev.n_tokens && n < N_GEN; k++)
                    out[j][n++] = ev.token_ids[k];
                engine_event_clear(&ev);
            }
            assert_int_equal(rc, -1);
            assert_int_equal(n, N_GEN);
            engine_stream_release(s[j]);
        }
    }
    static stats_snapshot_t snap;
    for (int i = 0; i < 200; i++) { /* the last release may trail the engine by a step */
        engine_stats(eng, &snap);
        if (snap.kv_used == 0 && snap.running == 0) break;
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    assert_int_equal(snap.kv_used, 0);
    engine_close(eng);
    return snap.preemptions;
}

static void expect_same(const char *what, int32_t a[N_REQ][N_GEN], int32_t b[N_REQ][N_GEN]) {
    for (int i = 0; i < N_REQ; i++)
        for (int k = 0; k < N_GEN; k++)
            if (a[i][k] != b[i][k])
                fail_msg("%s: request %d (prompt %d tokens) token %d: %d, TP 1 alone %d", what, i,
                         prompt_len[i], k, b[i][k], a[i][k]);
}

static void tp2(const char *fixture, bool ep) {
    for (int i = 0; i < N_REQ; i++)
        prompt_len[i] = tu_prompt(i, prompts[i]);
    static int32_t ref[N_REQ][N_GEN], got[N_REQ][N_GEN];
    const char *ep_flag = ep ? "true" : "false";
    /* blocks of 16 tokens: 3 layers x K,V x 2 KV heads x 128 x f32 = 96 KiB each, over the two
     * ranks (one KV head each); 40 for the requests alone, 10 for the batch (one or two of
     * these sequences at once) */
    static char big[32], small[32];
    snprintf(big, sizeof big, "%d", 40 * 16 * 3 * 2 * 2 * 128 * 4);
    snprintf(small, sizeof small, "%d", 10 * 16 * 3 * 2 * 2 * 128 * 4);
    const char *const one[] = {"max-model-len", "256", "kv-cache-memory", big, NULL};
    run(fixture, one, true, ref);
    const char *const two[] = {"max-model-len",
                               "256",
                               "kv-cache-memory",
                               big,
                               "tensor-parallel-size",
                               "2",
                               "enable-expert-parallel",
                               ep_flag,
                               NULL};
    run(fixture, two, true, got);
    expect_same("TP 2 alone", ref, got);
    const char *const batch[] = {"max-model-len",
                                 "128",
                                 "tensor-parallel-size",
                                 "2",
                                 "enable-expert-parallel",
                                 ep_flag,
                                 "max-num-batched-tokens",
                                 "64",
                                 "kv-cache-memory",
                                 small,
                                 NULL};
    uint64_t preemptions = run(fixture, batch, false, got);
    print_message("%s TP 2%s: %d requests alone and together (%llu preemptions): same tokens\n",
                  fixture, ep ? " EP" : "", N_REQ, (unsigned long long)preemptions);
    expect_same("TP 2 batch with preemption", ref, got);
    assert_true(preemptions > 0);
}

static void test_tp2_dense(void **state) {
    (void)state;
    tp2("tiny-qwen3", false);
}

static void test_tp2_moe(void **state) {
    (void)state;
    tp2("tiny-qwen3-moe", false);
}

static void test_tp2_moe_ep(void **state) {
    (void)state;
    tp2("tiny-qwen3-moe", true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tp2_dense),
        cmocka_unit_test(test_tp2_moe),
        cmocka_unit_test(test_tp2_moe_ep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The engine with two data-parallel replicas on the CPU backend (tiny-qwen3): the same greedy
 * tokens as one replica for 12 requests submitted together, spread over both replicas, with the
 * engine's stats the sum of theirs; requests sharing a long prefix kept on one replica and found
 * in its prefix cache; flags changed on both (a live one, a rebuild of the KV pool) and a bad
 * value refused on both; a cancel by id reaching the replica that holds the request; reload
 * flags applied in place. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine.h"
#include "engine_testutil.h"
#include "testutil.h"

#define N_REQ 12
#define N_GEN 10

static stats_snapshot_t snap, part[2];

/* Reads a stream to its end: the tokens into out (up to N_GEN), the finish reason returned. */
static int drain(engine_stream_t *s, int32_t *out, int *n_out) {
    int n = 0, rc, reason = -1;
    engine_event_t ev;
    while ((rc = engine_stream_wait(s, &ev, 60000)) > 0) {
        for (int k = 0; k < ev.n_tokens; k++, n++)
            if (out && n < N_GEN) out[n] = ev.token_ids[k];
        if (ev.type == ENGINE_EV_FINISH) reason = (int)ev.reason;
        engine_event_clear(&ev);
    }
    assert_int_equal(rc, -1);
    if (n_out) *n_out = n;
    engine_stream_release(s);
    return reason;
}

/* Waits until no replica holds a sequence (the last release may trail the engine by a step). */
static void wait_idle(engine_t *eng) {
    for (int i = 0; i < 400; i++) {
        engine_stats(eng, &snap);
        if (snap.running == 0 && snap.waiting == 0 && snap.kv_used == 0) return;
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    fail_msg("the engine did not go idle");
}

static void replica_stats(engine_t *eng) {
    for (int r = 0; r < 2; r++)
        engine_replica_stats(eng, r, &part[r]);
}

static void test_dp2_same_tokens(void **state) {
    (void)state;
    static int32_t prompts[N_REQ][96], ref[N_REQ][N_GEN], got[N_REQ][N_GEN];
    int len[N_REQ];
    for (int i = 0; i < N_REQ; i++)
        len[i] = tu_prompt(i, prompts[i]);
    sampling_params_t p = tu_greedy(N_GEN);
    const char *const one[] = {"max-model-len", "256", NULL};
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", one);
    assert_int_equal(engine_replicas(eng), 1);
    for (int i = 0; i < N_REQ; i++) {
        int n;
        drain(tu_submit(eng, prompts[i], len[i], &p), ref[i], &n);
        assert_int_equal(n, N_GEN);
    }
    engine_close(eng);

    const char *const two[] = {"max-model-len", "256", "data-parallel-size", "2", NULL};
    eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", two);
    assert_int_equal(engine_replicas(eng), 2);
    char desc[256];
    engine_describe_backend(eng, desc, sizeof desc);
    assert_non_null(strstr(desc, "2 data-parallel replicas"));
    engine_stream_t *s[N_REQ];
    for (int i = 0; i < N_REQ; i++)
        s[i] = tu_submit(eng, prompts[i], len[i], &p);
    for (int i = 0; i < N_REQ; i++) {
        int n;
        drain(s[i], got[i], &n);
        assert_int_equal(n, N_GEN);
        for (int k = 0; k < N_GEN; k++)
            if (got[i][k] != ref[i][k])
                fail_msg("request %d token %d: %d with two replicas, %d with one", i, k, got[i][k],
                         ref[i][k]);
    }
    wait_idle(eng);
    replica_stats(eng);
    print_message("12 requests over 2 replicas: %llu and %llu\n",
                  (unsigned long long)part[0].requests_submitted,
                  (unsigned long long)part[1].requests_submitted);
    assert_true(part[0].requests_submitted > 0 && part[1].requests_submitted > 0);
    assert_int_equal(snap.requests_submitted, N_REQ);
    assert_int_equal(part[0].requests_submitted + part[1].requests_submitted, N_REQ);
    assert_int_equal(snap.generation_tokens, part[0].generation_tokens + part[1].generation_tokens);
    assert_int_equal(snap.generation_tokens, N_REQ * N_GEN);
    assert_int_equal(snap.kv_total, part[0].kv_total + part[1].kv_total);
    assert_int_equal(snap.ttft.count, N_REQ);
    assert_int_equal(snap.n_recent, N_REQ);
    for (int i = 1; i < snap.n_recent; i++)
        assert_true(snap.recent[i - 1].t <= snap.recent[i].t);
    for (int i = 1; i < snap.n_steps; i++)
        assert_true(snap.steps_ring[i - 1].t <= snap.steps_ring[i].t);
    assert_int_equal(snap.n_steps, (int)(part[0].n_steps + part[1].n_steps));
    engine_close(eng);
}

/* Conversations sharing a 64-token system prompt, one after another: the first lands anywhere,
 * the rest follow it and hit its prefix cache; a prompt sharing nothing goes elsewhere when its
 * replica is the idler one. */
static void test_dp2_prefix_affinity(void **state) {
    (void)state;
    const char *const two[] = {"max-model-len", "256", "data-parallel-size", "2", NULL};
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", two);
    sampling_params_t p = tu_greedy(4);
    int32_t ids[80];
    for (int k = 0; k < 64; k++)
        ids[k] = 100 + 13 * k;
    for (int i = 0; i < 6; i++) {
        for (int k = 64; k < 80; k++)
            ids[k] = 1200 + 101 * i + k;
        drain(tu_submit(eng, ids, 80, &p), NULL, NULL);
    }
    wait_idle(eng);
    replica_stats(eng);
    int home = part[0].requests_submitted ? 0 : 1;
    assert_int_equal(part[home].requests_submitted, 6);
    assert_int_equal(part[1 - home].requests_submitted, 0);
    /* five later requests each found the 4 blocks of the system prompt */
    assert_true(part[home].prefix_hits >= 5 * 64);
    engine_close(eng);
}

static void test_dp2_flags(void **state) {
    (void)state;
    const char *const two[] = {
        "max-model-len", "256", "kv-cache-memory", "16MiB", "data-parallel-size", "2", NULL};
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", two);
    err_t err = {{0}};
    char buf[32];
    /* live */
    assert_int_equal(engine_flag_set(eng, "max-num-seqs", "7", &err), 0);
    assert_int_equal(engine_flag_get(eng, "max-num-seqs", buf, sizeof buf, &err), 0);
    assert_string_equal(buf, "7");
    /* rebuild: both pools resized */
    replica_stats(eng);
    int before = part[0].kv_total;
    assert_int_equal(part[1].kv_total, before);
    assert_int_equal(engine_flag_set(eng, "kv-cache-memory", "8MiB", &err), 0);
    replica_stats(eng);
    assert_int_equal(part[0].kv_total, before / 2);
    assert_int_equal(part[1].kv_total, before / 2);
    /* refused on every replica, nothing changed */
    assert_int_equal(engine_flag_set(eng, "max-model-len", "100000000", &err), -1);
    assert_non_null(strstr(err.msg, "max-model-len"));
    assert_int_equal(engine_flag_set(eng, "data-parallel-size", "9", &err), -1);
    assert_non_null(strstr(err.msg, "data-parallel-size"));
    assert_int_equal(engine_flag_get(eng, "max-model-len", buf, sizeof buf, &err), 0);
    assert_string_equal(buf, "256");
    /* the engine still serves on both */
    sampling_params_t p = tu_greedy(3);
    int32_t ids[20];
    for (int i = 0; i < 4; i++) {
        for (int k = 0; k < 20; k++)
            ids[k] = 500 + 31 * i + k;
        int n, reason = drain(tu_submit(eng, ids, 20, &p), NULL, &n);
        if (n != 3) fail_msg("request %d: %d tokens, finish %d", i, n, reason);
    }
    engine_close(eng);
}

/* A cancel by id finds the request on whichever replica holds it. */
static void test_dp2_cancel(void **state) {
    (void)state;
    const char *const two[] = {"max-model-len", "256", "data-parallel-size", "2", NULL};
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", two);
    engine_stream_t *s[2];
    const char *names[2] = {"keep-me", "cancel-me"};
    int32_t ids[2][24];
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < 24; k++)
            ids[i][k] = 700 + 50 * i + k;
        engine_request_t req = {.prompt = ids[i], .n_prompt = 24, .request_id = names[i]};
        sampling_params_init(&req.sampling);
        req.sampling.temperature = 0.0f;
        req.sampling.max_tokens = i == 0 ? 8 : 200;
        req.sampling.ignore_eos = true;
        err_t err = {{0}};
        if (engine_submit(eng, &req, &s[i], &err) < 0) fail_msg("%s", err.msg);
    }
    replica_stats(eng);
    assert_int_equal(part[0].requests_submitted + part[1].requests_submitted, 2);
    assert_true(part[0].requests_submitted == 1); /* one each: both idle, round-robin */
    assert_int_equal(engine_cancel(eng, "cancel-me"), 0);
    assert_int_equal(drain(s[1], NULL, NULL), ENGINE_FINISH_ABORT);
    assert_int_equal(drain(s[0], NULL, NULL), ENGINE_FINISH_LENGTH);
    wait_idle(eng);
    engine_close(eng);
}

/* The greedy tokens of a fixed prompt. */
static void reference(engine_t *eng, int32_t *out) {
    int32_t ids[30];
    for (int k = 0; k < 30; k++)
        ids[k] = 900 + 17 * k;
    sampling_params_t p = tu_greedy(N_GEN);
    int n;
    drain(tu_submit(eng, ids, 30, &p), out, &n);
    assert_int_equal(n, N_GEN);
}

typedef struct answer {
    atomic_int done;
    int rc;
    char msg[256];
} answer_t;

static void answered(void *ctx, int rc, const char *msg) {
    answer_t *a = ctx;
    a->rc = rc;
    snprintf(a->msg, sizeof a->msg, "%s", msg ? msg : "");
    atomic_store(&a->done, 1);
}

/* Reload flags apply in place: data-parallel-size and tensor-parallel-size change while the
 * handle, its tokenizer and its config stay; a request in flight when the change comes finishes
 * (drained), one submitted during the reload is refused as busy, naming the reload; a layout
 * that cannot open (TP 3 over 4 heads) is refused with why and the previous one serves again. */
static void test_reload_in_place(void **state) {
    (void)state;
    const char *const one[] = {"max-model-len", "256", NULL};
    setenv("TACHYON_TEST_STEP_DELAY_MS", "2", 1); /* 120 tokens in flight for 240 ms or more */
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", one);
    const tokenizer_t *tok = engine_tokenizer(eng);
    const model_config_t *cfg = engine_model_config(eng);
    int32_t ref[N_GEN], got[N_GEN];
    reference(eng, ref);

    /* a long request in flight, then the change: it drains, a new one is refused */
    int32_t ids[24];
    for (int k = 0; k < 24; k++)
        ids[k] = 40 + 3 * k;
    sampling_params_t longp = tu_greedy(120);
    engine_stream_t *inflight = tu_submit(eng, ids, 24, &longp);
    answer_t a = {0};
    err_t err = {{0}};
    assert_int_equal(engine_flag_set_async(eng, "data-parallel-size", "2", answered, &a, &err), 0);
    engine_request_t req = {.prompt = ids, .n_prompt = 24};
    sampling_params_init(&req.sampling);
    engine_stream_t *refused;
    assert_int_equal(engine_submit(eng, &req, &refused, &err), ENGINE_E_BUSY);
    assert_non_null(strstr(err.msg, "reloading (data-parallel-size 2)"));
    nanosleep(&(struct timespec){0, 50000000}, NULL);
    assert_false(atomic_load(&a.done)); /* still draining: the old replica serves its request */
    assert_int_equal(engine_replicas(eng), 1);
    int n, reason = drain(inflight, NULL, &n);
    assert_int_equal(reason, ENGINE_FINISH_LENGTH);
    assert_int_equal(n, 120);
    for (int i = 0; i < 6000 && !atomic_load(&a.done); i++)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    assert_true(atomic_load(&a.done));
    if (a.rc != 0) fail_msg("reload: %s", a.msg);
    assert_int_equal(engine_replicas(eng), 2);
    char buf[32];
    assert_int_equal(engine_flag_get(eng, "data-parallel-size", buf, sizeof buf, &err), 0);
    assert_string_equal(buf, "2");
    assert_ptr_equal(engine_tokenizer(eng), tok);
    assert_ptr_equal(engine_model_config(eng), cfg);
    reference(eng, got);
    assert_memory_equal(got, ref, sizeof ref);

    /* tensor parallel 2 on each replica, waited for */
    assert_int_equal(engine_flag_set(eng, "tensor-parallel-size", "2", &err), 0);
    char desc[256];
    engine_describe_backend(eng, desc, sizeof desc);
    print_message("after the reloads: %s\n", desc);
    assert_int_equal(engine_flag_get(eng, "tensor-parallel-size", buf, sizeof buf, &err), 0);
    assert_string_equal(buf, "2");
    reference(eng, got);
    assert_memory_equal(got, ref, sizeof ref);

    /* a layout that cannot open: refused with the reason, the previous one back */
    assert_int_equal(engine_flag_set(eng, "tensor-parallel-size", "3", &err), -1);
    print_message("TP 3: %s\n", err.msg);
    assert_int_equal(engine_flag_get(eng, "tensor-parallel-size", buf, sizeof buf, &err), 0);
    assert_string_equal(buf, "2");
    assert_int_equal(engine_replicas(eng), 2);
    assert_true(engine_alive(eng));
    reference(eng, got);
    assert_memory_equal(got, ref, sizeof ref);
    /* the same value again: nothing to reload */
    assert_int_equal(engine_flag_set(eng, "data-parallel-size", "2", &err), 0);
    engine_close(eng);
    unsetenv("TACHYON_TEST_STEP_DELAY_MS");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dp2_same_tokens), cmocka_unit_test(test_dp2_prefix_affinity),
        cmocka_unit_test(test_dp2_flags),       cmocka_unit_test(test_dp2_cancel),
        cmocka_unit_test(test_reload_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

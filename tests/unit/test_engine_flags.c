/*
 * engine flags changed without blocking (engine_flag_set_async), on the null backend: a rebuild
 * flag is queued and answered from the engine thread, live flags apply at once, bad values and
 * reload flags are refused at once, queued changes apply in order (each writing back only its
 * own flag, so a live change made meanwhile stays), requests in flight lose nothing, and a close
 * answers changes still queued.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"

enum { WAIT_MS = 20000 };

typedef struct answer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, rc[8];
    char msg[8][256];
    pthread_t thread[8];
} answer_t;

static void answered(void *ctx, int rc, const char *msg) {
    answer_t *a = ctx;
    pthread_mutex_lock(&a->mu);
    a->rc[a->n] = rc;
    snprintf(a->msg[a->n], sizeof a->msg[0], "%s", msg ? msg : "");
    a->thread[a->n] = pthread_self();
    a->n++;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static void wait_answers(answer_t *a, int n) {
    pthread_mutex_lock(&a->mu);
    while (a->n < n)
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
}

/* The request's wake hook runs on the engine thread: sleeping there keeps the request running
 * while the test changes flags. */
static atomic_int throttle_us;

static void throttle(void *ctx) {
    (void)ctx;
    int us = atomic_load(&throttle_us);
    if (us) usleep((useconds_t)us);
}

static engine_t *open_null(void) {
    backend_register(&null_backend_ops);
    engine_opts_t o;
    engine_opts_init(&o);
    o.model.model = "tiny";
    o.model.format = LOAD_DUMMY;
    o.model.seed = 1;
    o.backend = "null";
    o.flags.max_model_len = 1024;
    o.flags.kv_cache_memory = 512 * 16 * 64; /* null: 64 bytes per token */
    engine_t *e;
    err_t err;
    if (engine_open(&o, &e, &err) < 0) fail_msg("engine_open: %s", err.msg);
    return e;
}

static void flag_is(engine_t *e, const char *name, const char *want) {
    char buf[64];
    err_t err;
    assert_int_equal(engine_flag_get(e, name, buf, sizeof buf, &err), 0);
    assert_string_equal(buf, want);
}

static void test_async_changes(void **state) {
    engine_t *e = open_null();
    answer_t a = {.n = 0};
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    err_t err = {{0}};
    /* a request runs through every change */
    int32_t prompt[40];
    for (int i = 0; i < 40; i++)
        prompt[i] = 5 + 3 * i;
    engine_request_t req = {.prompt = prompt, .n_prompt = 40, .wake = throttle};
    atomic_store(&throttle_us, 1000);
    sampling_params_init(&req.sampling);
    req.sampling.max_tokens = 300;
    req.sampling.temperature = 0;
    req.sampling.ignore_eos = true;
    engine_stream_t *s;
    assert_int_equal(engine_submit(e, &req, &s, &err), 0);

    /* refused at once: nothing is called back */
    assert_int_equal(engine_flag_set_async(e, "block-size", "seven", answered, &a, &err), -1);
    assert_int_equal(engine_flag_set_async(e, "tensor-parallel-size", "0", answered, &a, &err), -1);
    assert_non_null(strstr(err.msg, "tensor-parallel-size"));
    assert_int_equal(engine_flag_set_async(e, "max-model-len", "99999", answered, &a, &err), -1);
    /* live: applied at once, nothing is called back */
    assert_int_equal(engine_flag_set_async(e, "max-num-seqs", "17", answered, &a, &err), 1);
    flag_is(e, "max-num-seqs", "17");
    /* rebuilds: queued, answered in order from the engine thread */
    assert_int_equal(engine_flag_set_async(e, "block-size", "32", answered, &a, &err), 0);
    assert_int_equal(engine_flag_set_async(e, "max-model-len", "0", answered, &a, &err), 0);
    assert_int_equal(engine_flag_set_async(e, "max-num-seqs", "9", answered, &a, &err), 1);
    wait_answers(&a, 2);
    assert_int_equal(a.rc[0], 0);
    assert_int_equal(a.rc[1], 0);
    assert_false(pthread_equal(a.thread[0], pthread_self()));
    char ctx[16];
    snprintf(ctx, sizeof ctx, "%d", engine_model_config(e)->max_position_embeddings);
    flag_is(e, "block-size", "32");
    flag_is(e, "max-model-len", ctx); /* 0: the model's context */
    flag_is(e, "max-num-seqs", "9");  /* the live change made meanwhile stayed */
    /* a rebuild refused on the engine thread: answered with the reason, nothing changed */
    assert_int_equal(engine_flag_set_async(e, "max-model-len", "32", answered, &a, &err), 0);
    wait_answers(&a, 3);
    assert_int_equal(a.rc[2], -1);
    assert_non_null(strstr(a.msg[2], "max-model-len"));
    flag_is(e, "max-model-len", ctx);

    /* the request lost nothing */
    atomic_store(&throttle_us, 0);
    engine_event_t ev;
    int n_tokens = 0, rc;
    while ((rc = engine_stream_wait(s, &ev, WAIT_MS)) > 0) {
        n_tokens += ev.n_tokens;
        if (ev.type == ENGINE_EV_FINISH) assert_int_equal(ev.reason, ENGINE_FINISH_LENGTH);
        engine_event_clear(&ev);
    }
    assert_int_equal(rc, -1);
    assert_int_equal(n_tokens, 300);
    engine_stream_release(s);

    /* the synchronous form on top of it */
    assert_int_equal(engine_flag_set(e, "block-size", "16", &err), 0);
    flag_is(e, "block-size", "16");
    assert_int_equal(engine_flag_set(e, "block-size", "16", &err), 0); /* unchanged */
    engine_close(e);
    pthread_mutex_destroy(&a.mu);
    pthread_cond_destroy(&a.cv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_async_changes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

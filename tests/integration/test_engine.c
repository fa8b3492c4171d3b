/* The engine's acceptance tests (engine core issue), on the CPU backend with the tiny fixture
 * and on the null backend for volume:
 * - batch invariance: each request's greedy output is the same alone and among 64 concurrent
 *   requests, for several token budgets, prefix caching on and off, and a pool small enough to
 *   force preemption (asserted); for Qwen3 dense (tiny-qwen3) and Qwen3-MoE (tiny-qwen3-moe);
 * - the expert-load statistics of the MoE model count every token's k experts;
 * - every block is back in the pool after each run;
 * - a seeded sampled request gives the same tokens alone and in a batch;
 * - stop strings split across tokens stop generation and never leak into the output;
 * - streamed text is the decoding of the streamed ids, whether the stream's reader decodes
 *   them (no stop strings) or the engine does (stop strings), with every finish kind;
 * - a stress run of 1,000 requests with random parameters, cancels and live flag changes
 *   (including a rebuild) where every request ends with a correct finish reason;
 * - the snapshot's list of live choices (the console's request table) follows the requests.
 * ctest runs the CPU backend's cases again with TACHYON_TEST_ASYNC=on (test_engine_async: the
 * engine's asynchronous scheduling, held to synchronous steps' outputs). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine.h"
#include "rng.h"
#include "engine_testutil.h"
#include "testutil.h"

#define N_BATCH       64
#define GREEDY_TOKENS 12
#define N_STRESS_CPU  120 /* requests of the stress test on the real model */

// ---------------------------------------------------------------------------------------------
// Helpers

typedef struct outcome {
    int32_t tokens[SAMPLING_MAX_N][512];
    int n_tokens[SAMPLING_MAX_N];
    char text[SAMPLING_MAX_N][4096];
    size_t text_len[SAMPLING_MAX_N];
    int finishes;
    engine_finish_reason_t reason[SAMPLING_MAX_N];
    int completion_tokens[SAMPLING_MAX_N];
    char stop_str[SAMPLING_MAX_N][64];
    int32_t stop_token[SAMPLING_MAX_N];
    size_t longest_text; /* the most text one event carried */
} outcome_t;

static engine_t *open_tiny(const char *const *flags) {
    return tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", flags);
}

/* Reads a stream to its end into out and releases it. */
static void collect(engine_stream_t *s, outcome_t *out) {
    memset(out, 0, sizeof *out);
    engine_event_t ev;
    int rc;
    while ((rc = engine_stream_wait(s, &ev, 60000)) > 0) {
        int c = ev.choice;
        assert_true(c >= 0 && c < SAMPLING_MAX_N);
        for (int i = 0; i < ev.n_tokens && out->n_tokens[c] < 512; i++)
            out->tokens[c][out->n_tokens[c]++] = ev.token_ids[i];
        assert_int_equal(ev.text[ev.text_len], '\0'); /* terminated (a byte token may be 0) */
        if (ev.text_len) {
            assert_true(out->text_len[c] + ev.text_len < sizeof out->text[c]);
            memcpy(out->text[c] + out->text_len[c], ev.text, ev.text_len);
            out->text_len[c] += ev.text_len;
            if (ev.text_len > out->longest_text) out->longest_text = ev.text_len;
        }
        if (ev.type == ENGINE_EV_FINISH) {
            out->finishes++;
            out->reason[c] = ev.reason;
            out->stop_token[c] = ev.stop_token;
            out->completion_tokens[c] = ev.completion_tokens;
            if (ev.stop_str) snprintf(out->stop_str[c], sizeof out->stop_str[c], "%s", ev.stop_str);
        }
        engine_event_clear(&ev);
    }
    assert_int_equal(rc, -1); /* ended, not timed out */
    engine_stream_release(s);
}

static void expect_pool_empty(engine_t *eng) {
    static stats_snapshot_t snap;
    /* The last release may race the engine's bookkeeping by one step. */
    for (int i = 0; i < 200; i++) {
        engine_stats(eng, &snap);
        if (snap.kv_used == 0 && snap.running == 0 && snap.waiting == 0) return;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    fail_msg("blocks still in use after every request ended: %d used, %d running, %d waiting",
             snap.kv_used, snap.running, snap.waiting);
}

// ---------------------------------------------------------------------------------------------
// Batch invariance

static outcome_t alone[N_BATCH], together[N_BATCH];
static int32_t prompts[N_BATCH][96];
static int prompt_len[N_BATCH];

static void run_together(const char *fixture, const char *const *flags, bool expect_preemption) {
    engine_t *eng = tu_open_engine(tu_fixture(fixture), "cpu", flags);
    sampling_params_t p = tu_greedy(GREEDY_TOKENS);
    engine_stream_t *streams[N_BATCH];
    for (int i = 0; i < N_BATCH; i++)
        streams[i] = tu_submit(eng, prompts[i], prompt_len[i], &p);
    for (int i = 0; i < N_BATCH; i++)
        collect(streams[i], &together[i]);
    for (int i = 0; i < N_BATCH; i++) {
        assert_int_equal(together[i].finishes, 1);
        assert_int_equal(together[i].reason[0], ENGINE_FINISH_LENGTH);
        assert_int_equal(together[i].n_tokens[0], GREEDY_TOKENS);
        for (int k = 0; k < GREEDY_TOKENS; k++)
            if (together[i].tokens[0][k] != alone[i].tokens[0][k])
                fail_msg("request %d (prompt %d tokens), flags %s=%s %s=%s %s=%s: token %d is %d "
                         "in the batch, %d alone",
                         i, prompt_len[i], flags[0], flags[1], flags[2], flags[3],
                         flags[4] ? flags[4] : "", flags[4] ? flags[5] : "", k,
                         together[i].tokens[0][k], alone[i].tokens[0][k]);
    }
    expect_pool_empty(eng);
    static stats_snapshot_t snap;
    engine_stats(eng, &snap);
    if (expect_preemption) assert_true(snap.preemptions > 0);
    /* TACHYON_TEST_ASYNC=on (test_engine_async): the batch ran ahead, the reference did not */
    if (getenv("TACHYON_TEST_ASYNC")) assert_true(snap.steps_ahead > 0 && snap.tokens_ahead > 0);
    engine_close(eng);
}

/* fixture: 3 layers of 2 KV heads x 128, as the pool size below assumes */
static void batch_invariance(const char *fixture) {
    for (int i = 0; i < N_BATCH; i++)
        prompt_len[i] = tu_prompt(i, prompts[i]);
    /* Alone: one request at a time on a fresh engine state, steps never ahead (the batches run
     * ahead under TACHYON_TEST_ASYNC=on, so that they are held to synchronous steps' tokens) */
    const char *const base[] = {"max-model-len", "256", "async-scheduling", "off", NULL};
    engine_t *eng = tu_open_engine(tu_fixture(fixture), "cpu", base);
    sampling_params_t p = tu_greedy(GREEDY_TOKENS);
    for (int i = 0; i < N_BATCH; i++)
        collect(tu_submit(eng, prompts[i], prompt_len[i], &p), &alone[i]);
    engine_close(eng);

    static const char *budgets[] = {"16", "64", "2048"};
    static const char *caching[] = {"true", "false"};
    for (int b = 0; b < 3; b++)
        for (int c = 0; c < 2; c++) {
            const char *flags[] = {"max-num-batched-tokens",
                                   budgets[b],
                                   "enable-prefix-caching",
                                   caching[c],
                                   "max-model-len",
                                   "256",
                                   NULL};
            run_together(fixture, flags, false);
        }
    /* A pool of 10 blocks of 16 tokens (3 layers x K,V x 2 heads x 128 x f32 = 96 KiB a block)
     * holds one or two of these sequences at once. */
    static char pool[32];
    snprintf(pool, sizeof pool, "%d", 10 * 16 * 3 * 2 * 2 * 128 * 4);
    for (int b = 0; b < 3; b++) {
        const char *flags[] = {"max-num-batched-tokens",
                               budgets[b],
                               "kv-cache-memory",
                               pool,
                               "max-model-len",
                               "128",
                               NULL};
        run_together(fixture, flags, true);
    }
}

static void test_batch_invariance(void **state) {
    batch_invariance("tiny-qwen3");
}

static void test_batch_invariance_moe(void **state) {
    batch_invariance("tiny-qwen3-moe");
}

/* Every forwarded token is routed to k experts in each MoE layer: with prefix caching off and
 * no preemption, a layer's counts sum to k x (prompt tokens + generated tokens - 1 per
 * request, the last sampled token never being fed back). */
static void test_expert_load(void **state) {
    const char *const flags[] = {"enable-prefix-caching", "false", "max-model-len", "256", NULL};
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3-moe"), "cpu", flags);
    sampling_params_t p = tu_greedy(GREEDY_TOKENS);
    uint64_t forwarded = 0;
    engine_stream_t *streams[16];
    for (int i = 0; i < 16; i++) {
        prompt_len[i] = tu_prompt(300 + i, prompts[i]);
        forwarded += (uint64_t)prompt_len[i] + GREEDY_TOKENS - 1;
        streams[i] = tu_submit(eng, prompts[i], prompt_len[i], &p);
    }
    for (int i = 0; i < 16; i++)
        collect(streams[i], &together[i]);
    static stats_snapshot_t snap;
    engine_stats(eng, &snap);
    assert_int_equal(snap.experts.n_layers, 2); /* mlp_only_layers [1]: layers 0 and 2 */
    tu_check_expert_load(eng, forwarded);
    engine_close(eng);
}

// ---------------------------------------------------------------------------------------------
// Seeded sampling

static void test_seeded_sampling_invariance(void **state) {
    engine_t *eng = open_tiny(NULL);
    sampling_params_t p;
    sampling_params_init(&p);
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    p.has_seed = true;
    p.seed = 4242;
    p.max_tokens = 24;
    p.ignore_eos = true;
    int32_t prompt[96];
    int n = tu_prompt(7, prompt);
    outcome_t solo, in_batch, again;
    collect(tu_submit(eng, prompt, n, &p), &solo);

    sampling_params_t other = tu_greedy(24);
    engine_stream_t *noise[16];
    int32_t np[16][96];
    for (int i = 0; i < 16; i++) {
        int m = tu_prompt(100 + i, np[i]);
        other.temperature = i % 2 ? 1.0f : 0.0f;
        noise[i] = tu_submit(eng, np[i], m, &other);
    }
    engine_stream_t *mine = tu_submit(eng, prompt, n, &p);
    static outcome_t scratch;
    for (int i = 0; i < 8; i++)
        collect(noise[i], &scratch);
    collect(mine, &in_batch);
    for (int i = 8; i < 16; i++)
        collect(noise[i], &scratch);
    collect(tu_submit(eng, prompt, n, &p), &again);
    assert_int_equal(solo.n_tokens[0], 24);
    assert_memory_equal(solo.tokens[0], in_batch.tokens[0], 24 * sizeof(int32_t));
    assert_memory_equal(solo.tokens[0], again.tokens[0], 24 * sizeof(int32_t));
    /* and the seed matters */
    p.seed = 4243;
    outcome_t other_seed;
    collect(tu_submit(eng, prompt, n, &p), &other_seed);
    assert_memory_not_equal(solo.tokens[0], other_seed.tokens[0], 24 * sizeof(int32_t));
    expect_pool_empty(eng);
    engine_close(eng);
}

// ---------------------------------------------------------------------------------------------
// Stop strings

static void test_stop_strings_across_tokens(void **state) {
    engine_t *eng = open_tiny(NULL);
    const tokenizer_t *tok = engine_tokenizer(eng);
    assert_non_null(tok);
    const char *text = "The default value of the argument is";
    int32_t *ids;
    size_t n;
    err_t err = {{0}};
    assert_int_equal(tok_encode(tok, text, strlen(text), &ids, &n, &err), 0);
    sampling_params_t p = tu_greedy(40);
    outcome_t full;
    collect(tu_submit(eng, ids, (int)n, &p), &full);
    assert_int_equal(full.n_tokens[0], 40);

    /* Every stop string that starts inside one token and ends inside a later one. */
    int tested = 0;
    size_t pos = 0;
    for (int k = 0; k + 1 < full.n_tokens[0] && tested < 12; k++) {
        char *piece;
        size_t plen;
        assert_int_equal(tok_decode(tok, &full.tokens[0][k], 1, true, &piece, &plen, &err), 0);
        size_t start = pos + plen / 2, end = pos + plen + 2; /* spans the boundary after k */
        pos += plen;
        free(piece);
        if (plen < 2 || end > full.text_len[0]) continue;
        char stop[64];
        snprintf(stop, sizeof stop, "%.*s", (int)(end - start), full.text[0] + start);
        const char *first = strstr(full.text[0], stop);
        assert_non_null(first);
        sampling_params_t ps = tu_greedy(40);
        assert_int_equal(sampling_params_add_stop(&ps, stop, &err), 0);
        outcome_t o;
        collect(tu_submit(eng, ids, (int)n, &ps), &o);
        sampling_params_free(&ps);
        assert_int_equal(o.reason[0], ENGINE_FINISH_STOP);
        assert_string_equal(o.stop_str[0], stop);
        size_t want = (size_t)(first - full.text[0]);
        if (o.text_len[0] != want || memcmp(o.text[0], full.text[0], want) != 0)
            fail_msg("stop \"%s\": got \"%.*s\", want \"%.*s\"", stop, (int)o.text_len[0],
                     o.text[0], (int)want, full.text[0]);
        assert_null(strstr(o.text[0], stop));
        tested++;
    }
    assert_true(tested >= 5);
    free(ids);
    expect_pool_empty(eng);
    engine_close(eng);
}

// ---------------------------------------------------------------------------------------------
// Stress

#define N_STRESS     1000
#define N_SUBMITTERS 4

typedef struct stress {
    engine_t *eng;
    int first, count;
    int cancelled, finished_ok;
    char failure[1200];
} stress_t;

/* What the engine holds, on stderr: the reason a request that never finishes is stuck. */
static void print_engine_state(engine_t *eng) {
    static stats_snapshot_t snap; /* large; the workers' timeouts print it one at a time */
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static const char *states[] = {"waiting", "prefill", "decode", "preempted"};
    pthread_mutex_lock(&lock);
    engine_stats(eng, &snap);
    fprintf(stderr, "engine: %d running, %d waiting, KV %d/%d, %llu steps, %d active:\n",
            snap.running, snap.waiting, snap.kv_used, snap.kv_total, (unsigned long long)snap.steps,
            snap.n_active);
    for (int a = 0; a < snap.n_active && a < 64; a++) {
        const stats_active_t *r = &snap.active[a];
        fprintf(stderr, "  %s/%d %s prompt %d generated %d cached %d preemptions %d\n", r->id,
                r->choice, states[r->state], r->prompt_tokens, r->generated, r->cached_tokens,
                r->preemptions);
    }
    pthread_mutex_unlock(&lock);
}

/* engine_stream_wait without a fixed time limit: waits as long as the engine keeps stepping,
 * 0 only once it has made no step for 120 s. A loaded machine (ASan, other jobs) slows the
 * steps; a request the engine forgets stops them. */
static int wait_while_engine_steps(engine_t *eng, engine_stream_t *s, engine_event_t *ev,
                                   stats_snapshot_t *snap) {
    uint64_t steps = UINT64_MAX;
    for (int idle_s = 0; idle_s < 120; idle_s += 10) {
        int rc = engine_stream_wait(s, ev, 10000);
        if (rc != 0) return rc;
        engine_stats(eng, snap);
        if (snap->steps != steps) idle_s = -10; /* moved: the 120 s start again */
        steps = snap->steps;
    }
    return 0;
}

/* Submits all of its requests at once (so that many run together and the pool overflows), then
 * reads their streams in order, cancelling some mid-way, and checks every finish. */
static void *stress_worker(void *arg) {
    stress_t *st = arg;
    static const char *stops[] = {"\n", "the", "e", ".", "ab"};
    engine_stream_t **streams = calloc((size_t)st->count, sizeof *streams);
    sampling_params_t *params = calloc((size_t)st->count, sizeof *params);
    stats_snapshot_t *snap = malloc(sizeof *snap);
    for (int j = 0; j < st->count; j++) {
        int i = st->first + j;
        uint64_t r = rng_bits(99, 0, (uint64_t)i);
        int32_t prompt[200];
        int n = 1 + (int)(r % 200);
        for (int k = 0; k < n; k++)
            prompt[k] = (int32_t)(rng_bits(99, 1 + (uint64_t)i, (uint64_t)k) % 2074);
        sampling_params_t *p = &params[j];
        sampling_params_init(p);
        p->max_tokens = 1 + (int)((r >> 12) % 48);
        p->temperature = (r >> 20) % 2 ? 0.0f : 0.8f;
        p->n = p->temperature > 0 ? 1 + (int)((r >> 8) % 3) : 1; /* greedy needs n = 1 */
        if ((r >> 21) % 3 == 0) p->top_k = 5;
        if ((r >> 23) % 3 == 0) p->top_p = 0.9f;
        p->ignore_eos = (r >> 25) % 2;
        if ((r >> 26) % 4 == 0) {
            p->has_seed = true;
            p->seed = r;
        }
        err_t err = {{0}};
        if ((r >> 28) % 3 == 0) sampling_params_add_stop(p, stops[(r >> 30) % 5], &err);
        engine_request_t req = {
            .prompt = prompt, .n_prompt = n, .sampling = *p, .priority = (int)((r >> 33) % 3)};
        if (engine_submit(st->eng, &req, &streams[j], &err) < 0) {
            snprintf(st->failure, sizeof st->failure, "submit %d: %s", i, err.msg);
            st->count = j;
            break;
        }
    }
    for (int j = 0; j < st->count; j++) {
        int i = st->first + j;
        uint64_t r = rng_bits(99, 0, (uint64_t)i);
        const sampling_params_t *p = &params[j];
        engine_stream_t *s = streams[j];
        bool cancel = (r >> 35) % 10 == 0;
        int cancel_after = (int)((r >> 40) % 4);
        if (cancel && cancel_after == 3) engine_stream_cancel(s); /* before any event */
        int finishes = 0, events = 0;
        engine_event_t ev;
        int rc;
        while ((rc = wait_while_engine_steps(st->eng, s, &ev, snap)) > 0) {
            if (cancel && events++ == cancel_after) engine_stream_cancel(s);
            if (ev.type == ENGINE_EV_FINISH) {
                finishes++;
                bool ok;
                switch (ev.reason) {
                    case ENGINE_FINISH_ABORT:
                        ok = cancel;
                        break;
                    case ENGINE_FINISH_LENGTH:
                        ok = ev.completion_tokens == p->max_tokens;
                        break;
                    case ENGINE_FINISH_STOP:
                        ok = ev.completion_tokens <= p->max_tokens &&
                             (ev.stop_str || ev.stop_token >= 0);
                        break;
                    default:
                        ok = false;
                }
                if (!ok && !st->failure[0])
                    snprintf(st->failure, sizeof st->failure,
                             "request %d choice %d: finish %s with %d of %d tokens%s", i, ev.choice,
                             engine_finish_reason_name(ev.reason), ev.completion_tokens,
                             p->max_tokens, cancel ? " (cancelled)" : "");
            }
            engine_event_clear(&ev);
        }
        if (rc != -1 && !st->failure[0]) {
            snprintf(st->failure, sizeof st->failure, "request %d: no engine step for 120 s", i);
            print_engine_state(st->eng);
        }
        if (finishes != p->n && !st->failure[0])
            snprintf(st->failure, sizeof st->failure, "request %d: %d finishes for n = %d", i,
                     finishes, p->n);
        st->cancelled += cancel;
        engine_stream_release(s);
    }
    for (int j = 0; j < st->count; j++)
        sampling_params_free(&params[j]);
    free(params);
    free(streams);
    free(snap);
    return NULL;
}

static void run_stress(engine_t *eng, int n_requests) {
    pthread_t threads[N_SUBMITTERS];
    stress_t st[N_SUBMITTERS];
    for (int t = 0; t < N_SUBMITTERS; t++) {
        st[t] = (stress_t){
            .eng = eng, .first = t * n_requests / N_SUBMITTERS, .count = n_requests / N_SUBMITTERS};
        pthread_create(&threads[t], NULL, stress_worker, &st[t]);
    }
    /* Live flag changes while the workers run, one rebuild among them. */
    static const char *changes[][2] = {
        {"max-num-seqs", "7"},
        {"max-num-batched-tokens", "32"},
        {"enable-prefix-caching", "false"},
        {"scheduling-policy", "priority"},
        {"block-size", "32"},
        {"max-num-batched-tokens", "512"},
        {"enable-chunked-prefill", "false"},
        {"max-num-seqs", "64"},
        {"enable-prefix-caching", "true"},
        {"enable-chunked-prefill", "true"},
        {"block-size", "16"},
        {"scheduling-policy", "fcfs"},
    };
    for (size_t c = 0; c < sizeof changes / sizeof changes[0]; c++) {
        struct timespec ts = {0, 40000000};
        nanosleep(&ts, NULL);
        err_t err = {{0}};
        if (engine_flag_set(eng, changes[c][0], changes[c][1], &err) < 0)
            fail_msg("set %s %s: %s", changes[c][0], changes[c][1], err.msg);
    }
    /* every worker joined before any failure is reported: failing returns from this frame,
     * whose st[] the workers still running would write (ASan: stack-use-after-scope) */
    for (int t = 0; t < N_SUBMITTERS; t++)
        pthread_join(threads[t], NULL);
    for (int t = 0; t < N_SUBMITTERS; t++)
        if (st[t].failure[0]) fail_msg("%s", st[t].failure);
    expect_pool_empty(eng);
}

static void test_stress_null_backend(void **state) {
    const char *const flags[] = {"max-model-len", "512", "kv-cache-memory", "65536", NULL};
    engine_t *eng = tu_open_engine(MDIR_EMBEDDED, "null", flags);
    run_stress(eng, N_STRESS);
    static stats_snapshot_t snap;
    engine_stats(eng, &snap);
    print_message("stress: %llu preemptions, %llu steps\n", (unsigned long long)snap.preemptions,
                  (unsigned long long)snap.steps);
    assert_true(snap.preemptions > 0);
    uint64_t finished = 0;
    for (int r = 0; r < 4; r++)
        finished += snap.requests_finished[r];
    assert_true(finished >= N_STRESS); /* one per choice, n >= 1 */
    engine_close(eng);
}

static void test_stress_cpu_backend(void **state) {
    static char pool[32]; /* 40 blocks of 16 tokens for tiny-qwen3 */
    snprintf(pool, sizeof pool, "%d", 40 * 16 * 3 * 2 * 2 * 128 * 4);
    const char *const flags[] = {"max-model-len", "512", "kv-cache-memory", pool, NULL};
    engine_t *eng = open_tiny(flags);
    run_stress(eng, N_STRESS_CPU);
    engine_close(eng);
}

// ---------------------------------------------------------------------------------------------
// Streamed text

#define N_TEXT 60

/* Per choice, the text streamed must be tok_decode of the ids streamed (less a matched stop id
 * left out of the output), with the same replacement characters for cut UTF-8, whether the
 * reader detokenizes (no stop strings) or the engine does (a stop string that never matches),
 * and whatever ends the choice: length, EOS, a stop id, with or without the stop id's text. */
static void test_streamed_text_is_decoded_ids(void **state) {
    const char *const flags[] = {"max-model-len", "512", NULL};
    engine_t *eng = tu_open_engine(MDIR_EMBEDDED, "null", flags);
    const tokenizer_t *tok = engine_tokenizer(eng);
    assert_non_null(tok);
    engine_stream_t *streams[N_TEXT];
    bool include_stop[N_TEXT], skip_special[N_TEXT];
    for (int i = 0; i < N_TEXT; i++) {
        int32_t prompt[96];
        int n = tu_prompt(i, prompt);
        sampling_params_t p;
        sampling_params_init(&p);
        p.temperature = 1.0f;
        p.seed = (uint64_t)i;
        p.has_seed = true;
        p.n = 1 + i % 3;
        p.max_tokens = 20 + (i * 37) % 200;
        p.ignore_eos = i % 2 == 0;
        p.include_stop_str_in_output = include_stop[i] = i % 4 == 1;
        p.skip_special_tokens = skip_special[i] = i % 5 != 0;
        if (i % 3 == 1) /* stop ids likely to come up: the null model's tokens are uniform */
            for (int k = 0; k < 24; k++)
                p.stop_token_ids[p.n_stop_token_ids++] = (int32_t)((i * 131 + k * 89) % 2112);
        err_t err = {{0}};
        if (i % 6 == 0) assert_int_equal(sampling_params_add_stop(&p, "\x01never", &err), 0);
        streams[i] = tu_submit(eng, prompt, n, &p);
        sampling_params_free(&p);
    }
    static outcome_t o;
    size_t longest = 0;
    int reasons[4] = {0}, stopped_by_id = 0;
    for (int i = 0; i < N_TEXT; i++) {
        collect(streams[i], &o);
        assert_int_equal(o.finishes, 1 + i % 3);
        if (o.longest_text > longest) longest = o.longest_text;
        for (int c = 0; c < 1 + i % 3; c++) {
            assert_true(o.reason[c] >= 0 && o.reason[c] < 4);
            reasons[o.reason[c]]++;
            size_t n = (size_t)o.n_tokens[c];
            if (o.stop_token[c] >= 0) {
                stopped_by_id++;
                assert_true(n > 0 && o.tokens[c][n - 1] == o.stop_token[c]);
                if (!include_stop[i]) n--;
            }
            char *want;
            size_t want_len;
            err_t err = {{0}};
            assert_int_equal(
                tok_decode(tok, o.tokens[c], n, skip_special[i], &want, &want_len, &err), 0);
            if (want_len != o.text_len[c] || memcmp(want, o.text[c], want_len) != 0)
                fail_msg("request %d choice %d (%zu ids): streamed \"%.*s\", decoded \"%s\"", i, c,
                         n, (int)o.text_len[c], o.text[c], want);
            free(want);
        }
    }
    print_message("streamed text: %d stop-id finishes, %d length, longest event text %zu bytes\n",
                  stopped_by_id, reasons[ENGINE_FINISH_LENGTH], longest);
    assert_true(stopped_by_id > 0);
    assert_true(reasons[ENGINE_FINISH_LENGTH] > 0);
    assert_true(longest >= 16); /* an event's text outgrew the room kept for it in the stream */
    engine_close(eng);
}

// ---------------------------------------------------------------------------------------------
// The live-request list of engine_stats()

/* Polls the snapshot until pred holds (5 s at most). */
static bool wait_snapshot(engine_t *eng, stats_snapshot_t *snap, int total, int decoding) {
    for (int i = 0; i < 1000; i++) {
        engine_stats(eng, snap);
        int d = 0;
        for (int k = 0; k < snap->n_active; k++)
            d += snap->active[k].state == STATS_REQ_DECODE;
        if (snap->n_active_total == total && d >= decoding) return true;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

static void test_active_request_list(void **state) {
    const char *flags[] = {"max-num-seqs", "4", NULL};
    /* the CPU backend, so that the requests are still running when the test looks */
    engine_t *eng = tu_open_engine(MDIR_EMBEDDED, "cpu", flags);
    sampling_params_t p = tu_greedy(4000);
    engine_stream_t *streams[10];
    int32_t prompt[20];
    for (int k = 0; k < 20; k++)
        prompt[k] = 100 + k;
    for (int i = 0; i < 10; i++) {
        char id[32];
        snprintf(id, sizeof id, "req-%d", i);
        engine_request_t req = {.prompt = prompt, .n_prompt = 10 + i, .request_id = id};
        req.sampling = p;
        err_t err = {{0}};
        if (engine_submit(eng, &req, &streams[i], &err) < 0) fail_msg("%s", err.msg);
    }
    static stats_snapshot_t snap;
    assert_true(wait_snapshot(eng, &snap, 10, 4));
    assert_int_equal(snap.n_active, 10);
    int waiting = 0, decoding = 0;
    for (int i = 0; i < 10; i++) {
        const stats_active_t *a = &snap.active[i];
        char id[32];
        snprintf(id, sizeof id, "req-%d", i);
        assert_string_equal(a->id, id); /* oldest first */
        assert_int_equal(a->prompt_tokens, 10 + i);
        waiting += a->state == STATS_REQ_WAITING;
        decoding += a->state == STATS_REQ_DECODE;
        if (a->state == STATS_REQ_DECODE) {
            assert_true(a->generated > 0);
            assert_true(a->first_token >= a->arrival);
        } else {
            assert_int_equal(a->generated, 0);
        }
    }
    assert_int_equal(decoding, 4); /* max-num-seqs */
    assert_int_equal(waiting, 6);
    for (int i = 0; i < 10; i++)
        engine_stream_cancel(streams[i]);
    assert_true(wait_snapshot(eng, &snap, 0, 0));
    assert_int_equal(snap.n_active, 0);
    for (int i = 0; i < 10; i++)
        engine_stream_release(streams[i]);
    engine_close(eng);
}

/* A stream's first choice's tokens into ids (at most n); returns how many. */
static int collect_ids(engine_stream_t *s, int32_t *ids, int n) {
    static outcome_t o;
    collect(s, &o);
    int k = o.n_tokens[0] < n ? o.n_tokens[0] : n;
    memcpy(ids, o.tokens[0], (size_t)k * sizeof *ids);
    return k;
}

/* --kv-cache-dtype fp8 on the CPU backend, switched live (a rebuild): the description says so,
 * a request's greedy tokens are the same alone and among others (the rounding is per value, as
 * the GPU's cache), and back to auto the tokens are the f32 cache's again. */
static void test_fp8_kv_cpu(void **state) {
    (void)state;
    const char *const flags[] = {"max-model-len", "256", NULL};
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", flags);
    enum { N = 4, GEN = 12 };
    int32_t prompts[N][96], f32[N][GEN], fp8[N][GEN], fp8_batch[N][GEN];
    int len[N];
    sampling_params_t p = tu_greedy(GEN);
    for (int i = 0; i < N; i++)
        len[i] = tu_prompt(60 + i, prompts[i]);
    for (int i = 0; i < N; i++)
        assert_int_equal(collect_ids(tu_submit(eng, prompts[i], len[i], &p), f32[i], GEN), GEN);
    err_t err = {{0}};
    assert_int_equal(engine_flag_set(eng, "kv-cache-dtype", "fp8", &err), 0);
    char desc[256];
    engine_describe_backend(eng, desc, sizeof desc);
    assert_non_null(strstr(desc, "kv fp8"));
    for (int i = 0; i < N; i++)
        assert_int_equal(collect_ids(tu_submit(eng, prompts[i], len[i], &p), fp8[i], GEN), GEN);
    engine_stream_t *s[N];
    for (int i = 0; i < N; i++)
        s[i] = tu_submit(eng, prompts[i], len[i], &p);
    int differ = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(collect_ids(s[i], fp8_batch[i], GEN), GEN);
        assert_memory_equal(fp8_batch[i], fp8[i], sizeof fp8[i]);
        differ += memcmp(fp8[i], f32[i], sizeof f32[i]) != 0;
    }
    print_message("fp8 KV: %d of %d greedy continuations differ from the f32 cache's\n", differ, N);
    assert_int_equal(engine_flag_set(eng, "kv-cache-dtype", "auto", &err), 0);
    engine_describe_backend(eng, desc, sizeof desc);
    assert_null(strstr(desc, "kv fp8"));
    for (int i = 0; i < N; i++) {
        int32_t again[GEN];
        assert_int_equal(collect_ids(tu_submit(eng, prompts[i], len[i], &p), again, GEN), GEN);
        assert_memory_equal(again, f32[i], sizeof again);
    }
    engine_close(eng);
}

int main(void) {
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_batch_invariance_moe),
        cmocka_unit_test(test_expert_load),
        cmocka_unit_test(test_seeded_sampling_invariance),
        cmocka_unit_test(test_stop_strings_across_tokens),
        cmocka_unit_test(test_streamed_text_is_decoded_ids),
        cmocka_unit_test(test_stress_null_backend),
        cmocka_unit_test(test_stress_cpu_backend),
        cmocka_unit_test(test_active_request_list),
        cmocka_unit_test(test_fp8_kv_cpu),
    };
    size_t n = 0; /* TEST_FILTER / TEST_SKIP, e.g. TEST_FILTER='test_stress_*' (testutil.h) */
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (tu_test_selected(tests[i].name)) tests[n++] = tests[i];
    return _cmocka_run_group_tests("test_engine", tests, n, NULL, NULL);
}

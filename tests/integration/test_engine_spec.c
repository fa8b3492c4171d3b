/* Speculative decoding with n-gram drafts and Qwen3.5's MTP head (engine/spec.h, spec_mtp.h)
 * on the CPU backend:
 * - greedy exactness: each request's tokens with drafts (k = 1 and 3, turned on live) are the
 *   tokens without, alone and in a batch, and in a pool small enough to force preemption
 *   (asserted), for Qwen3 dense, Qwen3-MoE and Qwen3.5 (recurrent state rolled back on a
 *   rejection); drafts are verified and some accepted (asserted), so the comparison means
 *   something; the same with the MTP head's drafts (k = 1, 2 and 4, the method set by a pool
 *   rebuild) on both Qwen3.5 fixtures;
 * - seeded sampled requests (temperature, top-p, top-k, n = 2) give the same tokens with and
 *   without drafts (n-gram; MTP on Qwen3.5);
 * - the distribution: token counts at output positions 1..4 of 240 sampled requests with drafts
 *   and 240 without (independent seeds) agree by a chi-squared test at the 0.1% level;
 * - max_tokens is never passed and finish reasons and usage stay right when one step emits
 *   several tokens; stop ids and stop strings met inside an accepted run end the choice there,
 *   with the text and logprobs of the run without drafts; turning num-speculative-tokens to 0
 *   live stops the drafts, and toggling it while a batch runs loses nothing (n-gram on Qwen3;
 *   MTP on Qwen3.5, where the acceptance counters move); drafts take only the token budget the
 *   running decodes leave;
 * - the MTP head at tensor parallel 2 gives the tokens of one rank; the method refused on a model
 *   without an MTP head. */
#include <math.h>
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
#include "tokenizer.h"

#define N_REQ 8
#define N_GEN 24

typedef struct outcome {
    int32_t tok[2][N_GEN];
    int n[2];
    engine_finish_reason_t reason[2];
    int completion[2];
    char text[2][1024];
    size_t text_len[2];
    engine_token_logprob_t lp[2][N_GEN][3]; /* with logprobs 2 */
    int32_t stop_token[2];
    char stop_str[2][32];
} outcome_t;

static int32_t prompts[N_REQ][64];
static int prompt_len[N_REQ];

/* Even prompt i: a passage of 10 + i tokens said three times, then its start again: the n-gram
 * drafter finds matches from the first step on. Odd ones: 34 + i tokens without a plan, where
 * the drafts come from whatever repeats (and are rejected more often). */
static void make_prompts(int max_token) {
    for (int i = 0; i < N_REQ; i++) {
        int len = 10 + i, n = 0;
        for (int r = 0; r < (i % 2 ? 1 : 3); r++)
            for (int t = 0; t < len; t++)
                prompts[i][n++] = (int32_t)(rng_bits(77, (uint64_t)i, (uint64_t)t) % max_token);
        for (int t = 0; t < (i % 2 ? 24 : 4); t++)
            prompts[i][n++] = i % 2 ? (int32_t)(rng_bits(78, (uint64_t)i, (uint64_t)t) % max_token)
                                    : prompts[i][t];
        prompt_len[i] = n;
    }
}

static void collect(engine_stream_t *s, outcome_t *out) {
    memset(out, 0, sizeof *out);
    engine_event_t ev;
    int rc;
    while ((rc = engine_stream_wait(s, &ev, 120000)) > 0) {
        int c = ev.choice;
        assert_true(c >= 0 && c < 2);
        for (int i = 0; i < ev.n_tokens; i++) {
            assert_true(out->n[c] < N_GEN); /* never past max_tokens */
            if (ev.logprobs && ev.n_top <= 2)
                memcpy(out->lp[c][out->n[c]], ev.logprobs + (size_t)i * (1 + ev.n_top),
                       (size_t)(1 + ev.n_top) * sizeof *ev.logprobs);
            out->tok[c][out->n[c]++] = ev.token_ids[i];
        }
        assert_true(out->text_len[c] + ev.text_len < sizeof out->text[c]);
        memcpy(out->text[c] + out->text_len[c], ev.text, ev.text_len);
        out->text_len[c] += ev.text_len;
        if (ev.type == ENGINE_EV_FINISH) {
            out->reason[c] = ev.reason;
            out->completion[c] = ev.completion_tokens;
            out->stop_token[c] = ev.stop_token;
            snprintf(out->stop_str[c], sizeof out->stop_str[c], "%s",
                     ev.stop_str ? ev.stop_str : "");
        }
        engine_event_clear(&ev);
    }
    assert_int_equal(rc, -1);
    engine_stream_release(s);
}

/* Runs every prompt, one after another or all at once. */
static void run(engine_t *eng, const sampling_params_t *p, bool together, outcome_t *out) {
    engine_stream_t *s[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        s[i] = tu_submit(eng, prompts[i], prompt_len[i], p);
        if (!together) collect(s[i], &out[i]);
    }
    if (together)
        for (int i = 0; i < N_REQ; i++)
            collect(s[i], &out[i]);
}

static void expect_same(const outcome_t *a, const outcome_t *b, int n_choices, const char *what) {
    for (int i = 0; i < N_REQ; i++)
        for (int c = 0; c < n_choices; c++) {
            assert_int_equal(a[i].n[c], b[i].n[c]);
            assert_int_equal(a[i].completion[c], a[i].n[c]); /* usage counts tokens */
            assert_int_equal(b[i].completion[c], b[i].n[c]);
            assert_int_equal(a[i].reason[c], b[i].reason[c]);
            for (int k = 0; k < a[i].n[c]; k++)
                if (a[i].tok[c][k] != b[i].tok[c][k])
                    fail_msg("%s: request %d choice %d: token %d is %d with drafts, %d without",
                             what, i, c, k, b[i].tok[c][k], a[i].tok[c][k]);
            /* the same text, stop, and logprobs bit for bit (the CPU backend's rows do not
             * depend on the batch) */
            assert_int_equal(a[i].text_len[c], b[i].text_len[c]);
            assert_memory_equal(a[i].text[c], b[i].text[c], a[i].text_len[c]);
            assert_int_equal(a[i].stop_token[c], b[i].stop_token[c]);
            assert_string_equal(a[i].stop_str[c], b[i].stop_str[c]);
            assert_memory_equal(a[i].lp[c], b[i].lp[c], sizeof a[i].lp[c]);
        }
}

static void set_flag(engine_t *eng, const char *name, const char *value) {
    err_t err;
    if (engine_flag_set(eng, name, value, &err) < 0) fail_msg("%s: %s", name, err.msg);
}

/* Waits for the engine to go idle with every block (and state slot) back. */
static void expect_idle(engine_t *eng, stats_snapshot_t *snap) {
    for (int i = 0; i < 400; i++) {
        engine_stats(eng, snap);
        if (snap->kv_used == 0 && snap->state_used == 0 && snap->running == 0 && snap->waiting == 0)
            return;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    fail_msg("%d blocks, %d state slots still in use", snap->kv_used, snap->state_used);
}

static outcome_t base[N_REQ], got[N_REQ];

/* Drafts on: n-gram (tu_spec_on) or the MTP head, k of them. */
static void spec_on(engine_t *eng, bool mtp, const char *k) {
    if (!mtp) {
        tu_spec_on(eng, k);
        return;
    }
    set_flag(eng, "speculative-method", "mtp");
    set_flag(eng, "num-speculative-tokens", k);
}

/* Greedy with and without drafts, alone, together, and preempted in a small pool: n-gram with
 * k = 1, 3, 3, the MTP head with k = 1, 2, 4. */
static void greedy_exact(const char *fixture, int max_token, const char *pool, bool mtp) {
    make_prompts(max_token);
    const char *const flags[] = {"max-model-len", "256", NULL};
    engine_t *eng = tu_open_engine(tu_fixture(fixture), "cpu", flags);
    sampling_params_t p = tu_greedy(N_GEN);
    run(eng, &p, false, base);
    spec_on(eng, mtp, "1");
    run(eng, &p, true, got);
    expect_same(base, got, 1, "together, k 1");
    set_flag(eng, "num-speculative-tokens", mtp ? "2" : "3");
    run(eng, &p, false, got);
    expect_same(base, got, 1, "alone, k 2 (mtp) or 3");
    set_flag(eng, "num-speculative-tokens", mtp ? "4" : "3");
    run(eng, &p, true, got);
    expect_same(base, got, 1, "together, k 4 (mtp) or 3");
    static stats_snapshot_t snap;
    expect_idle(eng, &snap);
    print_message("%s: %llu drafts of %llu tokens, %llu accepted (rate %.2f, mean length %.2f)\n",
                  fixture, (unsigned long long)snap.spec_drafts,
                  (unsigned long long)snap.spec_draft_tokens,
                  (unsigned long long)snap.spec_accepted_tokens, stats_spec_acceptance_rate(&snap),
                  stats_spec_mean_length(&snap));
    assert_true(snap.spec_accepted_tokens > 0); /* and some rejected (a Qwen3.5 rollback) */
    assert_true(snap.spec_accepted_tokens < snap.spec_draft_tokens);
    assert_true(snap.spec_accepted_per_pos[0] >= snap.spec_accepted_per_pos[1]);
    engine_close(eng);

    const char *const small[] = {
        "max-model-len", "128", "kv-cache-memory", pool, "max-num-batched-tokens", "48", NULL};
    eng = tu_open_engine(tu_fixture(fixture), "cpu", small);
    spec_on(eng, mtp, mtp ? "4" : "3");
    run(eng, &p, true, got);
    expect_same(base, got, 1, "preempted");
    expect_idle(eng, &snap);
    print_message("%s, small pool: %llu preemptions, %llu drafts accepted\n", fixture,
                  (unsigned long long)snap.preemptions,
                  (unsigned long long)snap.spec_accepted_tokens);
    assert_true(snap.preemptions > 0);
    engine_close(eng);
}

/* 3 layers x K,V x 2 heads x 128 x f32 x 16 tokens = 96 KiB a block: 10 blocks hold one or two
 * of the sequences (up to 5 blocks each). */
static void test_greedy_exact_qwen3(void **state) {
    greedy_exact("tiny-qwen3", 2048, "983040", false);
}

static void test_greedy_exact_moe(void **state) {
    greedy_exact("tiny-qwen3-moe", 2048, "983040", false);
}

/* tiny-qwen3.5: a KV block is 32 KiB (its 2 attention layers, as test_engine_qwen35 counts), a
 * state slot 114 KiB: eight blocks (one max-model-len sequence's, which the engine keeps before it
 * makes slots) and ten slots (some spare for the drafts' snapshots). */
static void test_greedy_exact_qwen35(void **state) {
    static char pool[32];
    snprintf(pool, sizeof pool, "%d", 8 * 32768 + 10 * 116736);
    greedy_exact("tiny-qwen3.5", 1000, pool, false);
}

/* The MTP head's drafts: its layer's K/V make a block 48 KiB (three attention layers). */
static void test_mtp_greedy_exact_qwen35(void **state) {
    static char pool[32];
    snprintf(pool, sizeof pool, "%d", 8 * 49152 + 10 * 116736);
    greedy_exact("tiny-qwen3.5", 1000, pool, true);
}

static void test_mtp_greedy_exact_qwen35_fp8(void **state) {
    static char pool[32];
    snprintf(pool, sizeof pool, "%d", 8 * 49152 + 10 * 116736);
    greedy_exact("tiny-qwen3.5-fp8", 1000, pool, true);
}

/* Seeded sampled requests, n = 2: the same tokens with drafts (spec.h: the draw at an output
 * position is the one the sampler makes there without drafts). Sampling makes drafts fail
 * often: on Qwen3.5 each failure puts the recurrent state back (asserted: some rejected). */
static void seeded_exact(const char *fixture, int max_token, bool mtp) {
    make_prompts(max_token);
    engine_t *eng = tu_open_engine(tu_fixture(fixture), "cpu", NULL);
    sampling_params_t p;
    sampling_params_init(&p);
    p.temperature = 0.7f;
    p.top_p = 0.9f;
    p.top_k = 40;
    p.max_tokens = N_GEN;
    p.ignore_eos = true;
    p.n = 2;
    p.has_seed = true;
    p.seed = 4242;
    run(eng, &p, true, base);
    spec_on(eng, mtp, "3");
    run(eng, &p, true, got);
    expect_same(base, got, 2, "seeded");
    static stats_snapshot_t snap;
    expect_idle(eng, &snap);
    print_message("%s, seeded: %llu drafts, %llu accepted\n", fixture,
                  (unsigned long long)snap.spec_draft_tokens,
                  (unsigned long long)snap.spec_accepted_tokens);
    assert_true(snap.spec_accepted_tokens > 0);
    assert_true(snap.spec_accepted_tokens < snap.spec_draft_tokens);
    engine_close(eng);
}

static void test_seeded_sampling_exact(void **state) {
    seeded_exact("tiny-qwen3", 2048, false);
}

static void test_seeded_sampling_exact_qwen35(void **state) {
    seeded_exact("tiny-qwen3.5", 1000, false);
}

static void test_mtp_seeded_sampling_exact(void **state) {
    seeded_exact("tiny-qwen3.5", 1000, true);
}

/* max_tokens not a multiple of what steps emit, and a max_tokens of 1 (no drafts then), with
 * the finish reason length and usage equal to the tokens streamed; then drafts off live by batch
 * size (only while fewer than 8 run: the batch's start and end) and by num-speculative-tokens 0. */
static void test_lengths_and_live_off(void **state) {
    make_prompts(2048);
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", NULL);
    tu_spec_on(eng, "4");
    static const int lengths[] = {1, 2, 5, 7, 13};
    for (int m = 0; m < 5; m++) {
        sampling_params_t p = tu_greedy(lengths[m]);
        run(eng, &p, true, got);
        for (int i = 0; i < N_REQ; i++) {
            assert_int_equal(got[i].n[0], lengths[m]);
            assert_int_equal(got[i].completion[0], lengths[m]);
            assert_int_equal(got[i].reason[0], ENGINE_FINISH_LENGTH);
        }
    }
    static stats_snapshot_t before, after;
    expect_idle(eng, &before);
    assert_true(before.spec_draft_tokens > 0);
    /* 8 sequences at once: speculative-disable-by-batch-size 8 leaves them without drafts but
     * while fewer run (the first ones admitted before the rest arrive) */
    sampling_params_t p = tu_greedy(N_GEN);
    uint64_t drafted[2];
    for (int limit = 0; limit < 2; limit++) {
        set_flag(eng, "speculative-disable-by-batch-size", limit ? "0" : "8");
        run(eng, &p, true, got);
        expect_idle(eng, &after);
        drafted[limit] = after.spec_draft_tokens - before.spec_draft_tokens;
        before = after;
    }
    print_message("drafts with 8 running: %llu under the limit of 8, %llu without a limit\n",
                  (unsigned long long)drafted[0], (unsigned long long)drafted[1]);
    assert_true(drafted[1] > 0 && drafted[0] * 4 < drafted[1]);
    set_flag(eng, "num-speculative-tokens", "0");
    run(eng, &p, true, got);
    expect_idle(eng, &after);
    assert_int_equal(after.spec_draft_tokens, before.spec_draft_tokens);
    engine_close(eng);
}

/* Stop ids and stop strings met inside a run of accepted drafts end the choice there, with the
 * text, finish, stop and logprobs (2 alternatives) of the same request without drafts. */
static void test_stops_and_logprobs(void **state) {
    make_prompts(2048);
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", NULL);
    const tokenizer_t *tok = engine_tokenizer(eng);
    assert_non_null(tok);
    sampling_params_t p = tu_greedy(N_GEN);
    run(eng, &p, true, base); /* the outputs to pick stops from */
    static sampling_params_t ps[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        ps[i] = tu_greedy(N_GEN);
        ps[i].logprobs = 2;
        /* stops from output position 16 on (min_tokens): the tiny model's outputs repeat by
         * then, so drafts are accepted around the stop */
        const int32_t *t = base[i].tok[0];
        int at = 16;
        ps[i].min_tokens = at;
        if (i % 2) {
            ps[i].ignore_eos = false;
            ps[i].stop_token_ids[0] = t[at];
            ps[i].n_stop_token_ids = 1;
        } else {
            char *text = NULL;
            size_t n_text = 0;
            err_t err;
            assert_int_equal(tok_decode(tok, t + at, 2, true, &text, &n_text, &err), 0);
            ps[i].stop[0] = strndup(text, n_text < 31 ? n_text : 31);
            ps[i].n_stop = n_text > 0;
            free(text);
        }
    }
    for (int side = 0; side < 2; side++) {
        if (side == 1) tu_spec_on(eng, "4");
        outcome_t *o = side ? got : base;
        engine_stream_t *s[N_REQ];
        for (int i = 0; i < N_REQ; i++)
            s[i] = tu_submit(eng, prompts[i], prompt_len[i], &ps[i]);
        for (int i = 0; i < N_REQ; i++)
            collect(s[i], &o[i]);
    }
    expect_same(base, got, 1, "stops");
    int stopped = 0;
    for (int i = 0; i < N_REQ; i++) {
        stopped += base[i].reason[0] == ENGINE_FINISH_STOP;
        sampling_params_free(&ps[i]);
    }
    assert_true(stopped >= N_REQ / 2);
    static stats_snapshot_t snap;
    expect_idle(eng, &snap);
    print_message("stops: %d of %d stopped; %llu drafts, %llu accepted\n", stopped, N_REQ,
                  (unsigned long long)snap.spec_draft_tokens,
                  (unsigned long long)snap.spec_accepted_tokens);
    assert_true(snap.spec_accepted_tokens > 0);
    engine_close(eng);
}

/* num-speculative-tokens changed live while a batch runs (0, 3, 1, 0, ...: from the next step):
 * nothing is lost and every greedy output is the one without drafts. */
static void live_toggle(const char *fixture, int max_token, bool mtp) {
    make_prompts(max_token);
    engine_t *eng = tu_open_engine(tu_fixture(fixture), "cpu", NULL);
    sampling_params_t p = tu_greedy(N_GEN);
    run(eng, &p, true, base);
    spec_on(eng, mtp, "0");
    engine_stream_t *s[N_REQ];
    for (int i = 0; i < N_REQ; i++)
        s[i] = tu_submit(eng, prompts[i], prompt_len[i], &p);
    static const char *ks[] = {"3", "1", "0", "4"};
    static stats_snapshot_t snap;
    for (int t = 0; t < 400; t++) {
        set_flag(eng, "num-speculative-tokens", ks[t % 4]);
        engine_stats(eng, &snap);
        if (snap.running == 0 && snap.waiting == 0 && t > 4) break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < N_REQ; i++)
        collect(s[i], &got[i]);
    expect_same(base, got, 1, "toggled");
    expect_idle(eng, &snap);
    print_message("%s, toggled: %llu drafts, %llu accepted\n", fixture,
                  (unsigned long long)snap.spec_draft_tokens,
                  (unsigned long long)snap.spec_accepted_tokens);
    assert_true(snap.spec_accepted_tokens > 0); /* the counters moved */
    engine_close(eng);
}

static void test_live_toggle_during_run(void **state) {
    live_toggle("tiny-qwen3", 2048, false);
}

static void test_mtp_live_toggle_during_run(void **state) {
    live_toggle("tiny-qwen3.5", 1000, true);
}

/* The MTP method where it cannot run: a model without an MTP head (the flag and
 * --speculative-config at open), tensor parallel ranks (no MTP on them yet). */
static void test_mtp_refused(void **state) {
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", NULL);
    err_t err = {{0}};
    assert_int_equal(engine_flag_set(eng, "speculative-method", "mtp", &err), -1);
    assert_non_null(strstr(err.msg, "has no MTP head"));
    engine_close(eng);
}

/* max-num-seqs 5 and 8 requests: while 5 run no state slot is spare for a draft's snapshot, so
 * those steps draft nothing (and the head does not run, spec.c); the last 3 draft (two slots
 * spare); the tokens are those without drafts. */
static void test_mtp_full_slots(void **state) {
    make_prompts(1000);
    const char *const flags[] = {"max-num-seqs", "5", NULL};
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3.5"), "cpu", flags);
    sampling_params_t p = tu_greedy(N_GEN);
    run(eng, &p, false, base);
    spec_on(eng, true, "2");
    run(eng, &p, true, got);
    expect_same(base, got, 1, "max-num-seqs 5, mtp k 2");
    static stats_snapshot_t snap;
    expect_idle(eng, &snap);
    int full = 0, drafted = 0;
    for (int i = 0; i < snap.n_steps; i++) {
        const stats_step_t *st = &snap.steps_ring[i];
        if (st->running == 5 && st->state_total == 5) {
            full++;
            assert_int_equal(st->draft_tokens, 0);
        }
        drafted += st->draft_tokens > 0;
    }
    print_message("max-num-seqs 5: %d steps with every slot in use, %d steps with drafts\n", full,
                  drafted);
    assert_true(full > 0 && drafted > 0);
    engine_close(eng);
}

/* The head at tensor parallel 2 (each rank its shard of the head's layer, engine/tp.h): the
 * greedy tokens of one rank without drafts, drafts accepted; then back to one rank, reloaded in
 * place with the method kept. */
static void test_mtp_tensor_parallel(void **state) {
    make_prompts(1000);
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3.5"), "cpu", NULL);
    sampling_params_t p = tu_greedy(N_GEN);
    run(eng, &p, true, base);
    set_flag(eng, "tensor-parallel-size", "2");
    spec_on(eng, true, "3");
    run(eng, &p, true, got);
    expect_same(base, got, 1, "tp 2, mtp k 3");
    static stats_snapshot_t snap;
    expect_idle(eng, &snap);
    print_message("tiny-qwen3.5, tp 2: %llu drafts, %llu accepted\n",
                  (unsigned long long)snap.spec_draft_tokens,
                  (unsigned long long)snap.spec_accepted_tokens);
    assert_true(snap.spec_accepted_tokens > 0);
    set_flag(eng, "tensor-parallel-size", "1");
    run(eng, &p, false, got);
    expect_same(base, got, 1, "tp 1 again, mtp k 3");
    engine_close(eng);
}

/* A token budget that the running decodes fill: drafts take only what is left, so every step
 * with all 8 sequences decoding decodes all 8 (none waits behind another's drafts). */
static void test_budget_before_drafts(void **state) {
    make_prompts(2048);
    const char *const flags[] = {"max-num-batched-tokens", "10", NULL};
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", flags);
    sampling_params_t p = tu_greedy(N_GEN);
    run(eng, &p, true, base);
    tu_spec_on(eng, "3");
    run(eng, &p, true, got);
    expect_same(base, got, 1, "budget 10");
    static stats_snapshot_t snap;
    expect_idle(eng, &snap);
    int full = 0;
    for (int i = 0; i < snap.n_steps; i++) {
        const stats_step_t *st = &snap.steps_ring[i];
        assert_true(st->prefill_tokens + st->decode_tokens + st->draft_tokens <= 10);
        if (st->running == N_REQ && st->prefill_tokens == 0) {
            full++;
            assert_int_equal(st->decode_tokens, N_REQ);
            assert_true(st->draft_tokens <= 2);
        }
    }
    assert_true(full > 0);
    engine_close(eng);
}

/* Two-sample chi-squared: counts a[] and b[] over n_cat categories (each with at least 5 in
 * both together); returns the statistic and its degrees of freedom. */
static double chi2_two_sample(const int *a, const int *b, int n_cat, int *df) {
    double na = 0, nb = 0, x = 0;
    for (int c = 0; c < n_cat; c++) {
        na += a[c];
        nb += b[c];
    }
    int used = 0;
    for (int c = 0; c < n_cat; c++) {
        double tot = a[c] + b[c];
        if (tot == 0) continue;
        double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
        x += (a[c] - ea) * (a[c] - ea) / ea + (b[c] - eb) * (b[c] - eb) / eb;
        used++;
    }
    *df = used - 1;
    return x;
}

/* The distribution: the tokens at output positions 1..4 of N_DIST requests of one prompt
 * (top_k 3, so that a position has few outcomes and drafts get accepted and rejected), seeds
 * 1..N_DIST with drafts and N_DIST+1.. without: independent samples of the same distribution
 * when the acceptance rule keeps it. Categories with fewer than 10 counts are pooled. With 240
 * samples a side, the test sees a change of about 0.1 in the probability of a common token;
 * test_spec's chi-squared on the rule itself shows how a wrong rule is caught. */
#define N_DIST 240
static void test_distribution(void **state) {
    make_prompts(2048);
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", NULL);
    /* the prompt: P, P's greedy continuation G, P again: the drafts after it are G, which the
     * sampled tokens follow often but not always */
    int32_t prompt[64 + N_GEN];
    int n_prompt = prompt_len[2];
    sampling_params_t g = tu_greedy(N_GEN);
    outcome_t o;
    collect(tu_submit(eng, prompts[2], n_prompt, &g), &o);
    memcpy(prompt, prompts[2], (size_t)n_prompt * sizeof *prompt);
    memcpy(prompt + n_prompt, o.tok[0], 8 * sizeof *prompt);
    memcpy(prompt + n_prompt + 8, prompts[2], (size_t)n_prompt * sizeof *prompt);
    n_prompt = 2 * n_prompt + 8;
    static int32_t toks[2][N_DIST][5];
    for (int side = 0; side < 2; side++) {
        if (side == 0)
            tu_spec_on(eng, "3");
        else
            set_flag(eng, "num-speculative-tokens", "0");
        engine_stream_t *s[N_DIST];
        for (int r = 0; r < N_DIST; r++) {
            sampling_params_t p = tu_greedy(5);
            p.temperature = 1.0f;
            p.top_k = 3;
            p.has_seed = true;
            p.seed = (uint64_t)(side * N_DIST + r + 1);
            s[r] = tu_submit(eng, prompt, n_prompt, &p);
        }
        for (int r = 0; r < N_DIST; r++) {
            collect(s[r], &o);
            assert_int_equal(o.n[0], 5);
            memcpy(toks[side][r], o.tok[0], sizeof toks[side][r]);
        }
    }
    static stats_snapshot_t snap;
    expect_idle(eng, &snap);
    print_message("%llu drafts, %llu accepted\n", (unsigned long long)snap.spec_draft_tokens,
                  (unsigned long long)snap.spec_accepted_tokens);
    assert_true(snap.spec_accepted_tokens > 0 &&
                snap.spec_accepted_tokens < snap.spec_draft_tokens);
    engine_close(eng);
    /* chi-squared critical values at 0.1% for df 1..12 */
    static const double crit[] = {0,     10.83, 13.82, 16.27, 18.47, 20.52, 22.46,
                                  24.32, 26.12, 27.88, 29.59, 31.26, 32.91};
    for (int pos = 1; pos < 5; pos++) {
        int ids[2 * N_DIST], n_ids = 0, a[2 * N_DIST] = {0}, b[2 * N_DIST] = {0};
        for (int side = 0; side < 2; side++)
            for (int r = 0; r < N_DIST; r++) {
                int32_t t = toks[side][r][pos];
                int c = 0;
                while (c < n_ids && ids[c] != t)
                    c++;
                if (c == n_ids) ids[n_ids++] = t;
                (side == 0 ? a : b)[c]++;
            }
        int pa[13] = {0}, pb[13] = {0}, n_cat = 0; /* big categories, the rest pooled last */
        for (int c = 0; c < n_ids; c++) {
            int into = a[c] + b[c] >= 10 && n_cat < 11 ? n_cat++ : 11;
            pa[into] += a[c];
            pb[into] += b[c];
        }
        int df;
        double x = chi2_two_sample(pa, pb, 12, &df);
        print_message("position %d: %d outcomes, chi2 %.2f, df %d (critical %.2f)\n", pos, n_ids, x,
                      df, df > 0 ? crit[df] : 0.0);
        if (df > 0 && x > crit[df]) fail_msg("position %d: chi2 %.2f > %.2f", pos, x, crit[df]);
    }
}

int main(void) {
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_exact_qwen3),
        cmocka_unit_test(test_greedy_exact_moe),
        cmocka_unit_test(test_greedy_exact_qwen35),
        cmocka_unit_test(test_mtp_greedy_exact_qwen35),
        cmocka_unit_test(test_mtp_greedy_exact_qwen35_fp8),
        cmocka_unit_test(test_seeded_sampling_exact),
        cmocka_unit_test(test_seeded_sampling_exact_qwen35),
        cmocka_unit_test(test_mtp_seeded_sampling_exact),
        cmocka_unit_test(test_lengths_and_live_off),
        cmocka_unit_test(test_stops_and_logprobs),
        cmocka_unit_test(test_live_toggle_during_run),
        cmocka_unit_test(test_mtp_live_toggle_during_run),
        cmocka_unit_test(test_mtp_refused),
        cmocka_unit_test(test_mtp_tensor_parallel),
        cmocka_unit_test(test_mtp_full_slots),
        cmocka_unit_test(test_budget_before_drafts),
        cmocka_unit_test(test_distribution),
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (tu_test_selected(tests[i].name)) tests[n++] = tests[i];
    return _cmocka_run_group_tests("test_engine_spec", tests, n, NULL, NULL);
}

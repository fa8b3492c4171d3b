/* The CPU backend's MTP head (backend_ops_t.mtp_forward, engine/cpu/cpu_mtp.c) against the
 * golden outputs scripts/make_fixtures_qwen35.py computes with transformers' Qwen3_5DecoderLayer
 * and vLLM's Qwen3_5MultiTokenPredictor arithmetic (golden/<fixture>.mtp.json), on both Qwen3.5
 * fixtures (BF16; block FP8 with the head's linears in FP8 too):
 * - the model's forward over two sequences together (one varlen batch, a state slot each), its
 *   final-norm hidden states kept;
 * - the head's step 0 over every position of both (x_{t+1} beside h_t at position t): logits of
 *   every row within 1e-3 of transformers' (test_golden.c says why that tolerance);
 * - three chained draft steps, both sequences in each batch (the previous draft beside the
 *   head's own output, one position further, attending to the head's K/V written so far): the
 *   same drafts (argmax) as transformers, logits within 1e-3;
 * - the same at tensor parallel 2 (the BF16 fixture: two ranks, each its shard of the head's
 *   layer, the lm_head's rows all-gathered);
 * - refusals: the head on a pool reserved without its layers, hidden rows out of range;
 * - in the engine (speculative method mtp, one draft a step): each golden prompt's greedy run
 *   accepts exactly the drafts that transformers' head predicts there. A step's draft comes from
 *   the head's row at the last position the step accepted (x_{t+1} beside h_t), so walking the
 *   golden rows the way the steps go (two positions on after an accepted draft, one after a
 *   rejected one and one more for the step that recomputes it without drafts) counts the drafts
 *   the engine must accept; a head fed the wrong token, hidden
 *   state or position would draft otherwise (on this fixture's repetitive continuations the
 *   acceptance rate alone hardly moves: this count does). */
#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "engine_testutil.h"
#include "testutil.h"
#include "weights.h"

#define TOLERANCE 1e-3

/* tp: tensor-parallel ranks (engine/tp.h: each its shard of the head's layer). */
static void check_fixture(const char *fixture, int tp) {
    tu_golden_t g;
    int chained = tu_mtp_golden_load(fixture, &g);
    model_weights_t *w = tu_fixture_weights(fixture);
    assert_int_equal(weights_config(w)->n_mtp_layers, 1);
    err_t err = {{0}};
    backend_t *be;
    backend_options_t opts = {.n_threads = 2, .mtp = true, .tensor_parallel_size = tp};
    if (cpu_backend_ops.create(&opts, w, &be, &err) < 0) fail_msg("%s", err.msg);
    assert_non_null(be->ops->mtp_forward);
    if (backend_kv_reserve(be, TU_SEQS * TU_SEQ_BLOCKS, TU_BLOCK, &err) < 0 ||
        be->ops->state_reserve(be, TU_SEQS, &err) < 0)
        fail_msg("%s", err.msg);

    const cJSON *prompts = cJSON_GetObjectItem(g.json, "prompts");
    assert_int_equal(cJSON_GetArraySize(prompts), TU_SEQS);
    int32_t seq[TU_SEQS][256];
    int len[TU_SEQS], offset[TU_SEQS];
    for (int s = 0; s < TU_SEQS; s++) {
        const cJSON *p = cJSON_GetArrayItem(prompts, s);
        const cJSON *ids = cJSON_GetObjectItem(p, "ids");
        len[s] = cJSON_GetArraySize(ids);
        assert_true(len[s] + chained < 256);
        for (int i = 0; i < len[s]; i++)
            seq[s][i] = cJSON_GetArrayItem(ids, i)->valueint;
        offset[s] = cJSON_GetObjectItem(p, "logits_row_offset")->valueint;
        assert_int_equal(cJSON_GetObjectItem(p, "step0_rows")->valueint, len[s] - 1);
    }

    /* the model over both sequences: hidden states kept, no logits asked */
    static tu_batch_t sb;
    const int32_t *tok[TU_SEQS] = {seq[0], seq[1]};
    int zero[TU_SEQS] = {0, 0}, n[TU_SEQS] = {len[0], len[1]};
    tu_batch_build(&sb, tok, zero, n, false);
    sb.b.n_logits = 0;
    if (backend_forward(be, &sb.b, NULL, &err) < 0) fail_msg("%s", err.msg);

    /* step 0: x_{t+1} beside h_t at position t, every row with logits */
    const int32_t *next[TU_SEQS] = {seq[0] + 1, seq[1] + 1};
    int n0[TU_SEQS] = {len[0] - 1, len[1] - 1};
    tu_batch_build(&sb, next, zero, n0, true);
    for (int s = 0; s < TU_SEQS; s++)
        for (int i = 0; i < n0[s]; i++)
            sb.rows[sb.qstart[s] + i] =
                len[0] * s + i; /* the forward's rows: seq s from len[0]*s */
    float *logits = malloc((size_t)sb.b.n_logits * (size_t)g.vocab * sizeof(float));
    assert_non_null(logits);
    if (be->ops->mtp_forward(be, &sb.b, sb.rows, 0, logits, NULL, &err) < 0)
        fail_msg("%s", err.msg);
    double worst = 0;
    int last_row[TU_SEQS];
    for (int s = 0; s < TU_SEQS; s++) {
        for (int i = 0; i < n0[s]; i++) {
            double d = tu_max_diff(logits + (size_t)(sb.qstart[s] + i) * g.vocab,
                                   g.logits + (size_t)(offset[s] + i) * g.vocab, g.vocab);
            if (d > TOLERANCE)
                fail_msg("%s: sequence %d step 0 row %d: |diff| %g", fixture, s, i, d);
            if (d > worst) worst = d;
        }
        last_row[s] = sb.qstart[s] + n0[s] - 1;
    }

    /* chained steps: the previous draft beside the head's output, one position on */
    int32_t draft[TU_SEQS];
    for (int s = 0; s < TU_SEQS; s++)
        draft[s] = tu_argmax(logits + (size_t)last_row[s] * g.vocab, g.vocab, NULL);
    for (int j = 1; j <= chained; j++) {
        for (int s = 0; s < TU_SEQS; s++) {
            const cJSON *drafts = cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, s), "drafts");
            assert_int_equal(draft[s], cJSON_GetArrayItem(drafts, j - 1)->valueint);
        }
        const int32_t *one[TU_SEQS] = {&draft[0], &draft[1]};
        int from[TU_SEQS] = {len[0] - 2 + j, len[1] - 2 + j}, n1[TU_SEQS] = {1, 1};
        int32_t rows[TU_SEQS] = {last_row[0], last_row[1]};
        tu_batch_build(&sb, one, from, n1, true);
        if (be->ops->mtp_forward(be, &sb.b, rows, j, logits, NULL, &err) < 0)
            fail_msg("%s", err.msg);
        for (int s = 0; s < TU_SEQS; s++) {
            const float *want = g.logits + (size_t)(offset[s] + n0[s] + j - 1) * g.vocab;
            double d = tu_max_diff(logits + (size_t)s * g.vocab, want, g.vocab);
            if (d > TOLERANCE)
                fail_msg("%s: sequence %d chained step %d: |diff| %g", fixture, s, j, d);
            if (d > worst) worst = d;
            draft[s] = tu_argmax(logits + (size_t)s * g.vocab, g.vocab, NULL);
            last_row[s] = s;
        }
    }
    print_message("%s, tp %d: MTP logits within %.2e of transformers (%d + %d rows, %d chained "
                  "steps)\n",
                  fixture, tp, worst, n0[0], n0[1], chained);

    /* refusals: a hidden row the last step did not have; a pool without the head's K/V */
    const int32_t *one[TU_SEQS] = {&draft[0], &draft[1]};
    int from[TU_SEQS] = {len[0], len[1]}, n1[TU_SEQS] = {1, 1};
    tu_batch_build(&sb, one, from, n1, true);
    backend_options_t off = {.n_threads = 2};
    tu_check_mtp_refusals(be, &off, &sb, logits);
    free(logits);
    backend_destroy(be);
    weights_destroy(w);
    tu_golden_free(&g);
}

/* The fixture's MTP golden, and an engine on it drafting one token a step with the head. */
static engine_t *open_mtp_engine(const char *fixture, tu_golden_t *g) {
    tu_mtp_golden_load(fixture, g);
    engine_t *eng = tu_open_engine(tu_fixture(fixture), "cpu", NULL);
    err_t err = {{0}};
    if (engine_flag_set(eng, "speculative-method", "mtp", &err) < 0 ||
        engine_flag_set(eng, "num-speculative-tokens", "1", &err) < 0)
        fail_msg("%s", err.msg);
    return eng;
}

/* The drafts the engine accepts on the golden's sequences (k = 1, max_tokens m). */
/* Top-1 minus top-2 of a row. */
static float top2_gap(const float *x, int n) {
    float m;
    tu_argmax(x, n, &m);
    return m;
}

static void check_engine_drafts(const char *fixture) {
    tu_golden_t g;
    engine_t *eng = open_mtp_engine(fixture, &g);
    const cJSON *prompts = cJSON_GetObjectItem(g.json, "prompts");
    uint64_t want = 0, drafted = 0;
    const int m = 7; /* outputs: the golden rows reach 8 greedy tokens */
    for (int c = 0; c < cJSON_GetArraySize(prompts); c++) {
        const cJSON *p = cJSON_GetArrayItem(prompts, c);
        const cJSON *ids = cJSON_GetObjectItem(p, "ids");
        int n = cJSON_GetArraySize(ids), P = n - 8, off;
        int32_t seq[256];
        for (int i = 0; i < n; i++)
            seq[i] = cJSON_GetArrayItem(ids, i)->valueint;
        off = cJSON_GetObjectItem(p, "logits_row_offset")->valueint;
        /* the engine's steps: the prefill emits one token; then each step drafts from the row of
         * the last position it accepted, while a draft fits max_tokens, except the step after a
         * rejection (spec.h: it recomputes the rolled-back tokens without drafts) */
        int pos = P - 1, n_out = 1;
        bool recompute = false;
        while (n_out < m) {
            bool draft = m - n_out - 1 >= 1 && !recompute;
            recompute = false;
            drafted += draft;
            if (draft && tu_argmax(g.logits + (size_t)(off + pos) * g.vocab, g.vocab, NULL) ==
                             seq[pos + 2]) {
                want++;
                pos += 2;
                n_out += 2;
            } else {
                recompute = draft; /* rejected: rolled back */
                pos += 1;
                n_out += 1;
            }
        }
        sampling_params_t sp = tu_greedy(m);
        engine_stream_t *s = tu_submit(eng, seq, P, &sp);
        engine_event_t ev;
        int got = 0, rc;
        while ((rc = engine_stream_wait(s, &ev, 60000)) > 0) {
            for (int i = 0; i < ev.n_tokens; i++, got++)
                assert_int_equal(ev.token_ids[i], seq[P + got]); /* the golden greedy tokens */
            engine_event_clear(&ev);
        }
        engine_stream_release(s);
        assert_int_equal(got, m);
    }
    static stats_snapshot_t snap;
    engine_stats(eng, &snap);
    print_message("%s: %llu of %llu drafts accepted in the engine, as the golden head predicts\n",
                  fixture, (unsigned long long)snap.spec_accepted_tokens,
                  (unsigned long long)snap.spec_draft_tokens);
    assert_true(want > 0 && want < drafted); /* some accepted, some rejected */
    assert_int_equal(snap.spec_accepted_tokens, want);
    assert_int_equal(snap.spec_draft_tokens, drafted);
    engine_close(eng);
    tu_golden_free(&g);
}

/* The first draft after a prefill, from the prompt's positions: for every prefix x_0..x_{L-1}
 * of the golden sequences whose greedy next token is x_L (so the head's step 0 after the
 * prefill sees the golden's inputs), a request of 3 greedy tokens with one draft a step: the
 * draft, the head's argmax at row L - 1, is accepted iff it is the model's greedy token after
 * x_0..x_L. Rows and greedy tokens with a top-2 margin under 0.01 are left out (an f32 tie could
 * go either way). All prefixes run together, in one batch. */
static void check_prefix_drafts(const char *fixture) {
    tu_golden_t g;
    engine_t *eng = open_mtp_engine(fixture, &g);
    const cJSON *prompts = cJSON_GetObjectItem(g.json, "prompts");
    static int32_t seq[TU_SEQS][256];
    engine_stream_t *streams[512];
    int n_req = 0;
    uint64_t want = 0;
    sampling_params_t sp = tu_greedy(3);
    for (int c = 0; c < TU_SEQS; c++) {
        const cJSON *p = cJSON_GetArrayItem(prompts, c);
        const cJSON *ids = cJSON_GetObjectItem(p, "ids");
        const cJSON *next = cJSON_GetObjectItem(p, "greedy_next");
        const cJSON *gap = cJSON_GetObjectItem(p, "greedy_next_margin");
        int n = cJSON_GetArraySize(ids),
            off = cJSON_GetObjectItem(p, "logits_row_offset")->valueint;
        for (int i = 0; i < n; i++)
            seq[c][i] = cJSON_GetArrayItem(ids, i)->valueint;
        for (int L = 2; L < n - 2; L++) {
            const float *row = g.logits + (size_t)(off + L - 1) * g.vocab;
            if (cJSON_GetArrayItem(next, L - 1)->valueint != seq[c][L] ||
                cJSON_GetArrayItem(gap, L - 1)->valuedouble < 0.01 ||
                cJSON_GetArrayItem(gap, L)->valuedouble < 0.01 || top2_gap(row, g.vocab) < 0.01f)
                continue;
            want += tu_argmax(row, g.vocab, NULL) == cJSON_GetArrayItem(next, L)->valueint;
            streams[n_req++] = tu_submit(eng, seq[c], L, &sp);
        }
    }
    for (int r = 0; r < n_req; r++) {
        engine_event_t ev;
        while (engine_stream_wait(streams[r], &ev, 60000) > 0)
            engine_event_clear(&ev);
        engine_stream_release(streams[r]);
    }
    static stats_snapshot_t snap;
    engine_stats(eng, &snap);
    print_message("%s: %d prefixes, %llu of %llu first drafts accepted, as the golden head "
                  "predicts\n",
                  fixture, n_req, (unsigned long long)snap.spec_accepted_tokens,
                  (unsigned long long)snap.spec_draft_tokens);
    assert_int_equal(snap.spec_draft_tokens, n_req);
    assert_true(want > 0 && want < (uint64_t)n_req);
    assert_int_equal(snap.spec_accepted_tokens, want);
    engine_close(eng);
    tu_golden_free(&g);
}

static void test_mtp_bf16(void **state) {
    check_fixture("tiny-qwen3.5", 1);
}

static void test_mtp_fp8(void **state) {
    check_fixture("tiny-qwen3.5-fp8", 1);
}

static void test_mtp_tp2(void **state) {
    check_fixture("tiny-qwen3.5", 2);
}

static void test_engine_drafts_bf16(void **state) {
    check_engine_drafts("tiny-qwen3.5");
}

static void test_engine_drafts_fp8(void **state) {
    check_engine_drafts("tiny-qwen3.5-fp8");
}

static void test_prefix_drafts_bf16(void **state) {
    check_prefix_drafts("tiny-qwen3.5");
}

static void test_prefix_drafts_fp8(void **state) {
    check_prefix_drafts("tiny-qwen3.5-fp8");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtp_bf16),          cmocka_unit_test(test_mtp_fp8),
        cmocka_unit_test(test_mtp_tp2),           cmocka_unit_test(test_engine_drafts_bf16),
        cmocka_unit_test(test_engine_drafts_fp8), cmocka_unit_test(test_prefix_drafts_bf16),
        cmocka_unit_test(test_prefix_drafts_fp8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

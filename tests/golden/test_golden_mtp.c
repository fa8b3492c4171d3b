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
#define BLOCK     16
#define N_SEQ     2
#define MAX_BLK   16 /* blocks a sequence may use: 256 tokens */

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static double max_diff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++)
        if (fabs((double)a[i] - b[i]) > d) d = fabs((double)a[i] - b[i]);
    return d;
}

/* A batch over N_SEQ sequences, sequence s in blocks [s * MAX_BLK, (s + 1) * MAX_BLK) and
 * state slot s: n[s] tokens at positions from[s].., tokens tok[s][..]. */
typedef struct step_batch {
    int32_t tokens[512], positions[512], qstart[N_SEQ + 1], ctx[N_SEQ], rows[512];
    int32_t tables[N_SEQ * MAX_BLK], slots_state[N_SEQ], logit_rows[512];
    int64_t slots[512];
    be_batch_t b;
} step_batch_t;

static void build(step_batch_t *sb, const int32_t *const tok[N_SEQ], const int from[N_SEQ],
                  const int n[N_SEQ], bool all_logits) {
    int t = 0, l = 0;
    for (int s = 0; s < N_SEQ; s++) {
        sb->qstart[s] = t;
        for (int i = 0; i < n[s]; i++, t++) {
            assert_true(t < 512);
            sb->tokens[t] = tok[s][i];
            sb->positions[t] = from[s] + i;
            sb->slots[t] = (int64_t)s * MAX_BLK * BLOCK + from[s] + i;
            if (all_logits || i == n[s] - 1) sb->logit_rows[l++] = t;
        }
        sb->ctx[s] = from[s] + n[s];
        assert_true(sb->ctx[s] <= MAX_BLK * BLOCK);
        for (int k = 0; k < MAX_BLK; k++)
            sb->tables[s * MAX_BLK + k] = s * MAX_BLK + k;
        sb->slots_state[s] = s;
    }
    sb->qstart[N_SEQ] = t;
    sb->b = (be_batch_t){.n_tokens = t,
                         .n_seqs = N_SEQ,
                         .token_ids = sb->tokens,
                         .positions = sb->positions,
                         .slot_mapping = sb->slots,
                         .query_start = sb->qstart,
                         .context_len = sb->ctx,
                         .block_tables = sb->tables,
                         .block_table_stride = MAX_BLK,
                         .n_logits = l,
                         .logit_rows = sb->logit_rows,
                         .state_slots = sb->slots_state};
}

static void check_fixture(const char *fixture) {
    tu_golden_t g;
    char name[64];
    snprintf(name, sizeof name, "%s.mtp", fixture);
    tu_golden_load(name, &g);
    int chained = cJSON_GetObjectItem(g.json, "chained_steps")->valueint;
    model_weights_t *w = tu_fixture_weights(fixture);
    assert_int_equal(weights_config(w)->n_mtp_layers, 1);
    err_t err = {{0}};
    backend_t *be;
    backend_options_t opts = {.n_threads = 2, .mtp = true};
    if (cpu_backend_ops.create(&opts, w, &be, &err) < 0) fail_msg("%s", err.msg);
    assert_non_null(be->ops->mtp_forward);
    if (backend_kv_reserve(be, N_SEQ * MAX_BLK, BLOCK, &err) < 0 ||
        be->ops->state_reserve(be, N_SEQ, &err) < 0)
        fail_msg("%s", err.msg);

    const cJSON *prompts = cJSON_GetObjectItem(g.json, "prompts");
    assert_int_equal(cJSON_GetArraySize(prompts), N_SEQ);
    int32_t seq[N_SEQ][256];
    int len[N_SEQ], offset[N_SEQ];
    for (int s = 0; s < N_SEQ; s++) {
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
    static step_batch_t sb;
    const int32_t *tok[N_SEQ] = {seq[0], seq[1]};
    int zero[N_SEQ] = {0, 0}, n[N_SEQ] = {len[0], len[1]};
    build(&sb, tok, zero, n, false);
    sb.b.n_logits = 0;
    if (backend_forward(be, &sb.b, NULL, &err) < 0) fail_msg("%s", err.msg);

    /* step 0: x_{t+1} beside h_t at position t, every row with logits */
    const int32_t *next[N_SEQ] = {seq[0] + 1, seq[1] + 1};
    int n0[N_SEQ] = {len[0] - 1, len[1] - 1};
    build(&sb, next, zero, n0, true);
    for (int s = 0; s < N_SEQ; s++)
        for (int i = 0; i < n0[s]; i++)
            sb.rows[sb.qstart[s] + i] =
                len[0] * s + i; /* the forward's rows: seq s from len[0]*s */
    float *logits = malloc((size_t)sb.b.n_logits * (size_t)g.vocab * sizeof(float));
    assert_non_null(logits);
    if (be->ops->mtp_forward(be, &sb.b, sb.rows, 0, logits, &err) < 0) fail_msg("%s", err.msg);
    double worst = 0;
    int last_row[N_SEQ];
    for (int s = 0; s < N_SEQ; s++) {
        for (int i = 0; i < n0[s]; i++) {
            double d = max_diff(logits + (size_t)(sb.qstart[s] + i) * g.vocab,
                                g.logits + (size_t)(offset[s] + i) * g.vocab, g.vocab);
            if (d > TOLERANCE)
                fail_msg("%s: sequence %d step 0 row %d: |diff| %g", fixture, s, i, d);
            if (d > worst) worst = d;
        }
        last_row[s] = sb.qstart[s] + n0[s] - 1;
    }

    /* chained steps: the previous draft beside the head's output, one position on */
    int32_t draft[N_SEQ];
    for (int s = 0; s < N_SEQ; s++)
        draft[s] = argmax(logits + (size_t)last_row[s] * g.vocab, g.vocab);
    for (int j = 1; j <= chained; j++) {
        for (int s = 0; s < N_SEQ; s++) {
            const cJSON *drafts = cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, s), "drafts");
            assert_int_equal(draft[s], cJSON_GetArrayItem(drafts, j - 1)->valueint);
        }
        const int32_t *one[N_SEQ] = {&draft[0], &draft[1]};
        int from[N_SEQ] = {len[0] - 2 + j, len[1] - 2 + j}, n1[N_SEQ] = {1, 1};
        int32_t rows[N_SEQ] = {last_row[0], last_row[1]};
        build(&sb, one, from, n1, true);
        if (be->ops->mtp_forward(be, &sb.b, rows, j, logits, &err) < 0) fail_msg("%s", err.msg);
        for (int s = 0; s < N_SEQ; s++) {
            const float *want = g.logits + (size_t)(offset[s] + n0[s] + j - 1) * g.vocab;
            double d = max_diff(logits + (size_t)s * g.vocab, want, g.vocab);
            if (d > TOLERANCE)
                fail_msg("%s: sequence %d chained step %d: |diff| %g", fixture, s, j, d);
            if (d > worst) worst = d;
            draft[s] = argmax(logits + (size_t)s * g.vocab, g.vocab);
            last_row[s] = s;
        }
    }
    print_message("%s: MTP logits within %.2e of transformers (%d + %d rows, %d chained steps)\n",
                  fixture, worst, n0[0], n0[1], chained);

    /* refusals: a hidden row the last step did not have; a pool without the head's K/V */
    int32_t bad[N_SEQ] = {0, 5};
    const int32_t *one[N_SEQ] = {&draft[0], &draft[1]};
    int from[N_SEQ] = {len[0], len[1]}, n1[N_SEQ] = {1, 1};
    build(&sb, one, from, n1, true);
    assert_int_equal(be->ops->mtp_forward(be, &sb.b, bad, 1, logits, &err), -1);
    assert_non_null(strstr(err.msg, "hidden row 5"));
    backend_options_t off = {.n_threads = 2};
    be->ops->configure(be, &off);
    if (backend_kv_reserve(be, N_SEQ * MAX_BLK, BLOCK, &err) < 0) fail_msg("%s", err.msg);
    assert_int_equal(be->ops->mtp_forward(be, &sb.b, bad, 0, logits, &err), -1);
    assert_non_null(strstr(err.msg, "without the MTP layers"));
    free(logits);
    backend_destroy(be);
    weights_destroy(w);
    tu_golden_free(&g);
}

/* The fixture's MTP golden, and an engine on it drafting one token a step with the head. */
static engine_t *open_mtp_engine(const char *fixture, tu_golden_t *g) {
    char name[64];
    snprintf(name, sizeof name, "%s.mtp", fixture);
    tu_golden_load(name, g);
    engine_t *eng = tu_open_engine(tu_fixture(fixture), "cpu", NULL);
    err_t err = {{0}};
    if (engine_flag_set(eng, "speculative-method", "mtp", &err) < 0 ||
        engine_flag_set(eng, "num-speculative-tokens", "1", &err) < 0)
        fail_msg("%s", err.msg);
    return eng;
}

/* The drafts the engine accepts on the golden's sequences (k = 1, max_tokens m). */
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
            if (draft &&
                argmax(g.logits + (size_t)(off + pos) * g.vocab, g.vocab) == seq[pos + 2]) {
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

/* Top-1 minus top-2 of a row. */
static float margin(const float *x, int n) {
    int best = argmax(x, n);
    float second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != best && x[i] > second) second = x[i];
    return x[best] - second;
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
    static int32_t seq[N_SEQ][256];
    engine_stream_t *streams[512];
    int n_req = 0;
    uint64_t want = 0;
    sampling_params_t sp = tu_greedy(3);
    for (int c = 0; c < N_SEQ; c++) {
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
                cJSON_GetArrayItem(gap, L)->valuedouble < 0.01 || margin(row, g.vocab) < 0.01f)
                continue;
            want += argmax(row, g.vocab) == cJSON_GetArrayItem(next, L)->valueint;
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
    check_fixture("tiny-qwen3.5");
}

static void test_mtp_fp8(void **state) {
    check_fixture("tiny-qwen3.5-fp8");
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
        cmocka_unit_test(test_mtp_bf16),           cmocka_unit_test(test_mtp_fp8),
        cmocka_unit_test(test_engine_drafts_bf16), cmocka_unit_test(test_engine_drafts_fp8),
        cmocka_unit_test(test_prefix_drafts_bf16), cmocka_unit_test(test_prefix_drafts_fp8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * cpu backend, tensor and expert parallel (cpu_tp.h, shard.h): the sharded model against
 * the whole one on the fixtures. Two sequences (prompts of 19 and 7 tokens, prefilled together,
 * then decoded together) are decoded greedily at tensor-parallel size 1 and N; the greedy tokens
 * must be equal, and the logits of every step within LOGIT_TOL of TP 1's (the row-parallel
 * layers sum partial products over the ranks, so the bits differ; each test prints the max
 * abs diff and the near-ties: steps where TP 1's top two logits are closer than 10x that).
 * Dense Qwen3 at TP 2 and 4 (4 replicates the 2 KV heads), Qwen3-MoE with experts sliced (TP)
 * and placed whole (EP) at 2 and 4, block-FP8 (the dummy tiny preset, W8A8 emulated, and its
 * lazy twin, whose views generate the values) at TP 2, Qwen3.5 (Gated DeltaNet heads sharded
 * too, state slots per rank) at TP 2; and those at --cpu-matmul-precision high (the bf16 GEMMs,
 * where the CPU has AVX512-BF16: each rank splits its own shard's activations, FP8 views keep
 * whole scale blocks). TP runs are bit-identical run to run (fixed-order
 * all-reduce; checked on dense, EP and Qwen3.5). Shards that would split a 128 x 128 FP8 scale
 * block and head counts that do not divide are refused with messages that name what breaks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu_bf16.h"
#include "engine_testutil.h"
#include "flags.h"
#include "testutil.h"
#include "weights.h"

enum { BS = 16, NB = 16, STRIDE = 4, N_GEN = 10, MAXT = 64 };

#define LOGIT_TOL 5e-5 /* the logits here are O(1); sums in another order differ by ~1e-5 */

static model_weights_t *dummy_tiny_fp8(bool lazy) {
    model_config_t cfg;
    model_weights_t *w;
    err_t err;
    if (model_config_preset("tiny", true, &cfg, &err) < 0) fail_msg("%s", err.msg);
    int rc = lazy ? weights_dummy_lazy(&cfg, 7, &w, &err) : weights_dummy(&cfg, 7, &w, &err);
    if (rc < 0) fail_msg("%s", err.msg);
    return w;
}

static int g_precision; /* make: cpu_matmul_precision_t */

static int make(const model_weights_t *w, int tp, bool ep, bool emulate, backend_t **be,
                err_t *err) {
    backend_options_t o = {.n_threads = 2,
                           .tensor_parallel_size = tp,
                           .expert_parallel = ep,
                           .emulate_fp8_activations = emulate,
                           .cpu_matmul_precision = g_precision};
    if (cpu_backend_ops.create(&o, w, be, err) < 0) return -1;
    if (model_has_state(weights_config(w)) && (*be)->ops->state_reserve(*be, 2, err) < 0) return -1;
    return backend_kv_reserve(*be, NB, BS, err);
}

/* Greedy decoding of two sequences together: logits [N_GEN][2][V], tokens [N_GEN][2]. */
static void run(backend_t *be, int V, float *logits, int32_t *tokens) {
    static const int len[2] = {19, 7};
    int32_t seq[2][MAXT];
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < len[s]; i++)
            seq[s][i] = (int32_t)((s * 977 + i * 131 + 5) % (V < 2000 ? V : 2000));
    int32_t tables[2 * STRIDE] = {3, 9, 1, 12, 7, 0, 14, 5}; /* scattered blocks */
    int done[2] = {0, 0}, n[2] = {len[0], len[1]};
    for (int g = 0; g < N_GEN; g++) {
        int32_t ids[MAXT], pos[MAXT], qs[3] = {0}, ctx[2], rows[2], state_slots[2] = {1, 0};
        int64_t slots[MAXT];
        int T = 0;
        for (int s = 0; s < 2; s++) {
            for (int p = done[s]; p < done[s] + n[s]; p++, T++) {
                ids[T] = seq[s][p];
                pos[T] = p;
                slots[T] = (int64_t)tables[s * STRIDE + p / BS] * BS + p % BS;
            }
            done[s] += n[s];
            qs[s + 1] = T;
            ctx[s] = done[s];
            rows[s] = T - 1;
        }
        be_batch_t b = {.n_tokens = T,
                        .n_seqs = 2,
                        .token_ids = ids,
                        .positions = pos,
                        .slot_mapping = slots,
                        .query_start = qs,
                        .context_len = ctx,
                        .block_tables = tables,
                        .block_table_stride = STRIDE,
                        .n_logits = 2,
                        .logit_rows = rows,
                        .state_slots = state_slots};
        err_t err;
        float *lg = logits + (size_t)g * 2 * V;
        if (backend_forward(be, &b, lg, &err) < 0) fail_msg("%s", err.msg);
        for (int s = 0; s < 2; s++) {
            const float *row = lg + (size_t)s * V;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (row[v] > row[best]) best = v;
            tokens[g * 2 + s] = best;
            seq[s][done[s]] = best;
            n[s] = 1;
        }
    }
}

/* TP 1 against TP tp (experts whole with ep) on w: equal greedy tokens, logits within
 * LOGIT_TOL; prints the max abs diff and the near-ties. With again, a second TP run must give
 * the same bits. */
static void compare(const char *what, const model_weights_t *w, int tp, bool ep, bool emulate,
                    bool again) {
    int V = weights_config(w)->vocab_size;
    size_t n = (size_t)N_GEN * 2 * V;
    float *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
    assert_non_null(ref);
    assert_non_null(got);
    int32_t ref_tok[N_GEN * 2], got_tok[N_GEN * 2];
    backend_t *one, *par;
    err_t err;
    if (make(w, 1, false, emulate, &one, &err) < 0) fail_msg("%s", err.msg);
    if (make(w, tp, ep, emulate, &par, &err) < 0) fail_msg("%s", err.msg);
    run(one, V, ref, ref_tok);
    run(par, V, got, got_tok);
    double max_diff = 0;
    for (size_t i = 0; i < n; i++)
        max_diff = fmax(max_diff, fabs((double)ref[i] - (double)got[i]));
    int ties = 0;
    for (int r = 0; r < N_GEN * 2; r++) {
        const float *row = ref + (size_t)r * V;
        float top = row[ref_tok[r]], second = -INFINITY;
        for (int v = 0; v < V; v++)
            if (v != ref_tok[r] && row[v] > second) second = row[v];
        if (top - second < 10 * max_diff + 1e-7) {
            ties++;
            print_message("  %s: near-tie at step %d seq %d: top two %.7g %.7g\n", what, r / 2,
                          r % 2, top, second);
        }
    }
    char desc[512];
    par->ops->describe(par, desc, sizeof desc);
    print_message("%s: TP %d%s vs TP 1: max abs logit diff %.3g over %d steps x 2 sequences, "
                  "%d near-tie%s (%s)\n",
                  what, tp, ep ? " EP" : "", max_diff, N_GEN, ties, ties == 1 ? "" : "s", desc);
    for (int r = 0; r < N_GEN * 2; r++)
        if (ref_tok[r] != got_tok[r])
            fail_msg("%s TP %d: step %d seq %d: token %d, TP 1 %d", what, tp, r / 2, r % 2,
                     got_tok[r], ref_tok[r]);
    assert_true(max_diff <= LOGIT_TOL);

    if (again) { /* the same sharded run again: the same bits */
        backend_destroy(par);
        if (make(w, tp, ep, emulate, &par, &err) < 0) fail_msg("%s", err.msg);
        run(par, V, ref, ref_tok);
        assert_memory_equal(ref, got, n * sizeof *ref);
    }
    backend_destroy(par);
    backend_destroy(one);
    free(ref);
    free(got);
}

static void test_dense(void **state) {
    (void)state;
    model_weights_t *w = tu_fixture_weights("tiny-qwen3");
    compare("tiny-qwen3", w, 2, false, false, true);
    compare("tiny-qwen3", w, 4, false, false, false); /* 2 KV heads, each on 2 ranks */
    weights_destroy(w);
}

static void test_moe(void **state) {
    (void)state;
    model_weights_t *w = tu_fixture_weights("tiny-qwen3-moe");
    compare("tiny-qwen3-moe", w, 2, false, false, false);
    compare("tiny-qwen3-moe", w, 4, false, false, false);
    compare("tiny-qwen3-moe", w, 2, true, false, true);
    compare("tiny-qwen3-moe", w, 4, true, false, false);
    /* routing is replicated: rank 0's counts are the model's */
    backend_t *be;
    err_t err;
    if (make(w, 2, true, false, &be, &err) < 0) fail_msg("%s", err.msg);
    int V = weights_config(w)->vocab_size;
    float *lg = malloc((size_t)N_GEN * 2 * V * sizeof *lg);
    int32_t tok[N_GEN * 2];
    run(be, V, lg, tok);
    const model_config_t *c = weights_config(w);
    uint64_t counts[64 * 8] = {0};
    assert_true(c->n_layers * c->n_experts <= 64 * 8);
    assert_int_equal(be->ops->expert_load(be, counts, &err), 0);
    uint64_t sum = 0;
    for (int e = 0; e < c->n_experts; e++)
        sum += counts[0 * c->n_experts + e];
    assert_int_equal(sum, (uint64_t)(19 + 7 + 2 * (N_GEN - 1)) * (uint64_t)c->n_experts_per_tok);
    free(lg);
    backend_destroy(be);
    weights_destroy(w);
}

static void test_fp8(void **state) {
    (void)state;
    model_weights_t *w = dummy_tiny_fp8(false);
    compare("tiny FP8", w, 2, false, false, false);
    compare("tiny FP8 W8A8", w, 2, false, true, false);
    weights_destroy(w);
    w = dummy_tiny_fp8(true);
    compare("tiny FP8 lazy", w, 2, false, false, false);
    weights_destroy(w);
}

static void test_qwen35(void **state) {
    (void)state;
    model_weights_t *w = tu_fixture_weights("tiny-qwen3.5");
    compare("tiny-qwen3.5", w, 2, false, false, true);
    weights_destroy(w);
}

static void test_high_precision(void **state) {
    (void)state;
    if (!cpu_bf16_supported()) skip();
    g_precision = CPU_MM_HIGH;
    static const char *const fixtures[] = {"tiny-qwen3", "tiny-qwen3-moe", "tiny-qwen3.5"};
    for (int i = 0; i < 3; i++) {
        model_weights_t *w = tu_fixture_weights(fixtures[i]);
        compare(fixtures[i], w, 2, i == 1, false, i == 0);
        weights_destroy(w);
    }
    model_weights_t *w = dummy_tiny_fp8(false);
    compare("tiny FP8", w, 2, false, false, true);
    weights_destroy(w);
    g_precision = CPU_MM_HIGHEST;
}

static void expect_refusal(const model_weights_t *w, int tp, bool ep, const char *const *phrases) {
    backend_t *be = NULL;
    err_t err = {{0}};
    assert_int_equal(make(w, tp, ep, false, &be, &err), -1);
    assert_null(be);
    print_message("refused: %s\n", err.msg);
    for (int i = 0; phrases[i]; i++)
        if (!strstr(err.msg, phrases[i])) fail_msg("\"%s\" lacks \"%s\"", err.msg, phrases[i]);
}

static void test_refusals(void **state) {
    (void)state;
    /* intermediate 320 / 2 = 160 rows: the second shard starts inside a 128-row block */
    model_weights_t *w = tu_fixture_weights("tiny-qwen3-fp8");
    expect_refusal(w, 2, false,
                   (const char *const[]){"tensor parallel 2", "layer 0 gate_proj", "[0, 160)",
                                         "of 320", "128-row FP8 scale block", NULL});
    weights_destroy(w);
    /* experts whole satisfy the rule, the dense layers' 320 do not */
    w = tu_fixture_weights("tiny-qwen3-moe-fp8");
    expect_refusal(w, 2, true, (const char *const[]){"gate_proj", "160", NULL});
    weights_destroy(w);
    /* tiny FP8 at TP 4: 768 / 4 = 192 */
    w = dummy_tiny_fp8(false);
    expect_refusal(w, 4, false, (const char *const[]){"gate_proj", "[0, 192)", "of 768", NULL});
    weights_destroy(w);
    w = tu_fixture_weights("tiny-qwen3");
    expect_refusal(w, 3, false,
                   (const char *const[]){"num_attention_heads (4) is not a multiple of 3", NULL});
    expect_refusal(w, 8, false,
                   (const char *const[]){"num_attention_heads (4) is not a multiple of 8", NULL});
    weights_destroy(w);
    /* Gated DeltaNet: 2 key heads over 4 ranks; FP8 q rows of 32 (one key head) per rank */
    w = tu_fixture_weights("tiny-qwen3.5");
    expect_refusal(w, 4, false,
                   (const char *const[]){"linear_num_key_heads (2) is not a multiple of 4", NULL});
    weights_destroy(w);
    w = tu_fixture_weights("tiny-qwen3.5-fp8");
    expect_refusal(w, 2, false, (const char *const[]){"in_proj_qkv (q rows)", "128-row", NULL});
    weights_destroy(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_moe),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_qwen35),
        cmocka_unit_test(test_high_precision),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

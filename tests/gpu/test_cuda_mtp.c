/* The cuda backend's MTP head (backend_ops_t.mtp_forward: kernels/cb_step.cu, cb_layers.cu's
 * cb_run_mtp, ops_mtp_input) against the CPU backend's (engine/cpu/cpu_mtp.c, which
 * tests/golden/test_golden_mtp.c checks against transformers), on both Qwen3.5 fixtures:
 *
 * - the model's forward over the two sequences of golden/<fixture>.mtp.json together (a state
 *   slot each), the head's step 0 over every position of both, then three chained draft steps
 *   (the CPU's drafts fed to both): logits within LOGIT_TOL of the CPU's at every row (the FP8
 *   fixture against the CPU's W8A8 emulation), and the same drafts wherever the CPU's top-2
 *   margin is above the noise band;
 * - in the engine (backend "cuda", speculative method mtp, k = 2): greedy tokens of several
 *   prompts, alone and together, are the tokens without drafts, and drafts are accepted; the
 *   same at tensor parallel 2 (two ranks on the device);
 * - refusals: a pool reserved without the head's K/V; hidden rows the last pass did not have.
 *
 * Tolerances as test_cuda_backend.c's (BF16 0.1, FP8 0.5; what the GPU's bf16 roundings move):
 * the head adds one bf16 rounding of its hidden input (the GPU keeps the final norm's rows in
 * bf16, as vLLM hands them over; the CPU in f32) and of its fc input.
 *
 * Exit 77 without a Hopper GPU (the host emulation runs it everywhere: test_cuda_mtp_emu). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "backend.h"
#include "cuda_backend.h"
#include "cuda_compare.h"
#include "engine.h"
#include "engine_testutil.h"
#include "testutil.h"
#include "weights.h"

#define LOGIT_TOL_BF16 0.1
#define LOGIT_TOL_FP8  0.5

static backend_t *open_be(const backend_ops_t *ops, model_weights_t *w, bool emulate, bool mtp) {
    backend_options_t o = {.n_threads = 2,
                           .emulate_fp8_activations = emulate,
                           .gpu_memory_utilization = 0.5,
                           .max_num_batched_tokens = 1024,
                           .max_num_seqs = 16,
                           .mtp = mtp};
    backend_t *be;
    err_t err = {{0}};
    if (ops->create(&o, w, &be, &err) < 0) fail_msg("%s: %s", ops->name, err.msg);
    if (backend_kv_reserve(be, TU_SEQS * TU_SEQ_BLOCKS, TU_BLOCK, &err) < 0 ||
        be->ops->state_reserve(be, TU_SEQS, &err) < 0)
        fail_msg("%s: %s", ops->name, err.msg);
    return be;
}

/* Runs the same batch through both backends' mtp_forward (the forward's when rows is NULL) and
 * compares the logits; returns the largest difference. Each backend's drafts (the argmax it
 * computes where its logits are: the GPU's on the device) must be its logits' argmax. */
static double both(backend_t *cpu, backend_t *gpu, const be_batch_t *b, const int32_t *rows,
                   int step, float *lc, float *lg, int vocab) {
    err_t err = {{0}};
    static int32_t dc[512], dg[512];
    if (!rows) {
        if (backend_forward(cpu, b, lc, &err) < 0 || backend_forward(gpu, b, lg, &err) < 0)
            fail_msg("forward: %s", err.msg);
    } else if (cpu->ops->mtp_forward(cpu, b, rows, step, lc, dc, &err) < 0 ||
               gpu->ops->mtp_forward(gpu, b, rows, step, lg, dg, &err) < 0) {
        fail_msg("mtp_forward step %d: %s", step, err.msg);
    }
    for (int i = 0; rows && i < b->n_logits; i++) {
        assert_int_equal(dc[i], tu_argmax(lc + (size_t)i * (size_t)vocab, vocab, NULL));
        assert_int_equal(dg[i], tu_argmax(lg + (size_t)i * (size_t)vocab, vocab, NULL));
    }
    return tu_max_diff(lc, lg, (size_t)b->n_logits * (size_t)vocab);
}

static void against_cpu(const char *fixture, bool fp8, double tol) {
    tu_golden_t g;
    int chained = tu_mtp_golden_load(fixture, &g);
    model_weights_t *w = tu_fixture_weights(fixture);
    backend_t *cpu = open_be(&cpu_backend_ops, w, fp8, true);
    backend_t *gpu = open_be(&cuda_backend_ops, w, false, true);
    const cJSON *prompts = cJSON_GetObjectItem(g.json, "prompts");
    static int32_t seq[TU_SEQS][256];
    int len[TU_SEQS];
    for (int s = 0; s < TU_SEQS; s++) {
        const cJSON *ids = cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, s), "ids");
        len[s] = cJSON_GetArraySize(ids);
        for (int i = 0; i < len[s]; i++)
            seq[s][i] = cJSON_GetArrayItem(ids, i)->valueint;
    }
    size_t row_floats = (size_t)g.vocab;
    float *lc = malloc(512 * row_floats * sizeof(float)), *lg = malloc(512 * row_floats * 4);
    assert_true(lc && lg);

    /* the model over both sequences (its last rows' logits compared too) */
    static tu_batch_t sb;
    const int32_t *tok[TU_SEQS] = {seq[0], seq[1]};
    int zero[TU_SEQS] = {0, 0}, n[TU_SEQS] = {len[0], len[1]};
    tu_batch_build(&sb, tok, zero, n, false);
    double model = both(cpu, gpu, &sb.b, NULL, 0, lc, lg, g.vocab);

    /* step 0: every position of both */
    const int32_t *next[TU_SEQS] = {seq[0] + 1, seq[1] + 1};
    int n0[TU_SEQS] = {len[0] - 1, len[1] - 1};
    tu_batch_build(&sb, next, zero, n0, true);
    static int32_t rows[512];
    for (int s = 0; s < TU_SEQS; s++)
        for (int i = 0; i < n0[s]; i++)
            rows[sb.qstart[s] + i] = (s == 0 ? 0 : len[0]) + i;
    double worst = both(cpu, gpu, &sb.b, rows, 0, lc, lg, g.vocab);
    int flips = 0, last[TU_SEQS] = {sb.qstart[0] + n0[0] - 1, sb.qstart[1] + n0[1] - 1};
    int32_t draft[TU_SEQS];
    for (int i = 0; i < sb.b.n_logits; i++) {
        float mc, mg;
        int tc = tu_argmax(lc + (size_t)i * row_floats, g.vocab, &mc);
        int tg = tu_argmax(lg + (size_t)i * row_floats, g.vocab, &mg);
        if (tc != tg) {
            if (mc > 2 * tol)
                fail_msg("%s: step 0 row %d: draft %d on the cpu, %d", fixture, i, tc, tg);
            flips++;
        }
    }
    for (int s = 0; s < TU_SEQS; s++) {
        float m;
        draft[s] = tu_argmax(lc + (size_t)last[s] * row_floats, g.vocab, &m);
    }

    /* chained steps, the CPU's drafts on both */
    for (int j = 1; j <= chained; j++) {
        const int32_t *one[TU_SEQS] = {&draft[0], &draft[1]};
        int from[TU_SEQS] = {len[0] - 2 + j, len[1] - 2 + j}, n1[TU_SEQS] = {1, 1};
        int32_t prev[TU_SEQS] = {last[0], last[1]};
        tu_batch_build(&sb, one, from, n1, true);
        double d = both(cpu, gpu, &sb.b, prev, j, lc, lg, g.vocab);
        if (d > worst) worst = d;
        for (int s = 0; s < TU_SEQS; s++) {
            float mc, mg;
            int tg = tu_argmax(lg + (size_t)s * row_floats, g.vocab, &mg);
            draft[s] = tu_argmax(lc + (size_t)s * row_floats, g.vocab, &mc);
            if (draft[s] != tg && mc > 2 * tol)
                fail_msg("%s: chained step %d sequence %d: draft %d on the cpu, %d", fixture, j, s,
                         draft[s], tg);
            last[s] = s;
        }
    }
    print_message("%s: model logits within %.3f, MTP logits within %.3f of the CPU's (%d + %d "
                  "rows, %d chained steps; %d near-tie drafts differ)\n",
                  fixture, model, worst, n0[0], n0[1], chained, flips);
    if (model > tol || worst > tol)
        fail_msg("%s: differences %.3f, %.3f above %.2f", fixture, model, worst, tol);

    /* refusals: a hidden row the last step did not have; a pool without the head's K/V */
    const int32_t *one[TU_SEQS] = {&draft[0], &draft[1]};
    int from[TU_SEQS] = {len[0] + chained, len[1] + chained}, n1[TU_SEQS] = {1, 1};
    tu_batch_build(&sb, one, from, n1, true);
    backend_options_t off = {.gpu_memory_utilization = 0.5, .max_num_seqs = 16};
    tu_check_mtp_refusals(gpu, &off, &sb, lg);
    free(lc);
    free(lg);
    backend_destroy(cpu);
    backend_destroy(gpu);
    weights_destroy(w);
    tu_golden_free(&g);
}

static void test_mtp_bf16(void **state) {
    against_cpu("tiny-qwen3.5", false, LOGIT_TOL_BF16);
}

static void test_mtp_fp8(void **state) {
    against_cpu("tiny-qwen3.5-fp8", true, LOGIT_TOL_FP8);
}

/* Greedy tokens of prompts with and without the head's drafts, on the cuda backend. */
#define N_REQ 4
#define N_GEN 20

/* Every prompt, one after another or all at once. */
static void run(engine_t *eng, const int32_t prompts[N_REQ][96], const int *plen, bool together,
                int32_t out[N_REQ][N_GEN]) {
    sampling_params_t p = tu_greedy(N_GEN);
    engine_stream_t *s[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        s[i] = tu_submit(eng, prompts[i], plen[i], &p);
        if (!together) assert_int_equal(collect(s[i], out[i], N_GEN), N_GEN);
    }
    for (int i = 0; together && i < N_REQ; i++)
        assert_int_equal(collect(s[i], out[i], N_GEN), N_GEN);
}

static void test_engine_mtp(void **state) {
    static int32_t prompts[N_REQ][96];
    int plen[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        plen[i] = tu_prompt(i + 2, prompts[i]);
        for (int t = 0; t < plen[i]; t++)
            prompts[i][t] %= 1000; /* the Qwen3.5 fixtures' vocabulary */
    }
    const char *const flags[] = {"max-model-len", "128", "gpu-memory-utilization", "0.3", NULL};
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3.5"), "cuda", flags);
    static int32_t base[N_REQ][N_GEN], got[N_REQ][N_GEN];
    run(eng, prompts, plen, false, base);
    err_t err = {{0}};
    if (engine_flag_set(eng, "speculative-method", "mtp", &err) < 0 ||
        engine_flag_set(eng, "num-speculative-tokens", "2", &err) < 0)
        fail_msg("%s", err.msg);
    run(eng, prompts, plen, false, got);
    assert_memory_equal(base, got, sizeof base);
    run(eng, prompts, plen, true, got);
    assert_memory_equal(base, got, sizeof base);
    static stats_snapshot_t snap;
    engine_stats(eng, &snap);
    print_message("cuda engine, MTP k 2: %llu drafts verified, %llu accepted\n",
                  (unsigned long long)snap.spec_draft_tokens,
                  (unsigned long long)snap.spec_accepted_tokens);
    assert_true(snap.spec_accepted_tokens > 0);
    /* tensor parallel 2 on the device (each rank its shard of the head's layer): the same tokens
     * as one rank (greedy margins on this fixture are far above TP's rounding) */
    if (engine_flag_set(eng, "tensor-parallel-size", "2", &err) < 0) fail_msg("%s", err.msg);
    run(eng, prompts, plen, true, got);
    assert_memory_equal(base, got, sizeof base);
    engine_stats(eng, &snap);
    print_message("cuda engine, tp 2, MTP k 2: %llu accepted (the new layout's counters)\n",
                  (unsigned long long)snap.spec_accepted_tokens);
    assert_true(snap.spec_accepted_tokens > 0);
    engine_close(eng);
}

int main(void) {
    if (!cuda_backend_available()) {
        printf("test_cuda_mtp: no Hopper GPU, skipped\n");
        return 77;
    }
    backend_register(&cuda_backend_ops);
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtp_bf16),
        cmocka_unit_test(test_mtp_fp8),
        cmocka_unit_test(test_engine_mtp),
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (tu_test_selected(tests[i].name)) tests[n++] = tests[i];
    return _cmocka_run_group_tests("test_cuda_mtp", tests, n, NULL, NULL);
}

/* The cuda backend end to end against the CPU backend (the project's reference numerics):
 *
 * - tiny-qwen3 (BF16): the logits of all golden prompts prefilled in one varlen batch are within
 *   LOGIT_TOL_BF16 of the CPU backend's (which tests/golden checks against transformers); then
 *   every prompt generates greedily on both backends in lockstep (chunked prefill over the
 *   cached prefix, paged decode): logits within the tolerance at every step and the same token,
 *   except where the CPU's own top-2 margin is inside the noise band (2 x tolerance), which is
 *   counted and printed.
 * - tiny-qwen3-fp8: the same against the CPU backend's W8A8 emulation (activations quantized per
 *   token per 128 columns, as the GPU does), within LOGIT_TOL_FP8.
 * - tiny-qwen3-moe (BF16) and tiny-qwen3-moe-fp8 (W8A8): the same for Qwen3-MoE (router, top-k,
 *   grouped expert GEMMs, combine), and the expert-load statistics through the engine.
 * - tiny-qwen3.5 and tiny-qwen3.5-fp8 (Qwen3.5: Gated DeltaNet and gated attention layers, each
 *   sequence with a recurrent-state slot) the same way. The FP8 one's shapes (128-wide heads, a
 *   320-channel conv) run on the FP8 path where cuBLASLt takes them, else as BF16.
 * - the engine's batch invariance with backend "cuda": each request's greedy output is the same
 *   alone and among 32 concurrent ones (16 in the host emulation), for several token budgets,
 *   graphs on and off, and a pool small enough to preempt, on tiny-qwen3 and tiny-qwen3-moe; a
 *   seeded sampled request gives the same tokens alone and in a batch; with n-gram speculative
 *   drafts (the verify step's k + 1 rows per sequence) the greedy tokens are those without.
 * - tensor parallel: test_cuda_tp.c (the helpers both use: cuda_compare.h).
 * - dummy qwen3-0.6b (FP8 and BF16) generated on the device equals weights_dummy's host values
 *   on sampled elements, read back through the fused / padded device layout; so do the experts
 *   of a dummy Qwen3-MoE (the MoE fixture's config).
 *
 * Tolerances (logits of magnitude 4..12 on these fixtures): the CPU computes in f32 throughout;
 * the GPU rounds BF16 GEMM inputs, the attention inputs and output and the KV cache to bf16
 * (relative 2^-9) and sums in other orders. Measured under the host emulation
 * (test_cuda_backend_emu: the same kernels, exact f32 arithmetic): BF16 max 0.03-0.05, FP8
 * W8A8 max 0.2-0.32 (a bf16 rounding that moves a value across an e4m3 step changes it by 1/16
 * relative, and such flips compound through the layers). LOGIT_TOL_BF16 0.1 and LOGIT_TOL_FP8 0.5
 * leave 2x margin for the GPU's ulp-level differences, while a wrong norm, RoPE, scale layout,
 * fused-weight offset or attention mask moves logits by 1 or more (seen: 17 with a broken
 * attention input).
 *
 * Exit 77 without a Hopper GPU. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "backend.h"
#include "cb_internal.h"
#include "cuda_backend.h"
#include "engine.h"
#include "rng.h"
#include "engine_testutil.h"
#include "testutil.h"
#include "weights.h"

#include "cuda_compare.h"

/* The cuda backend against the CPU one on a fixture: batched-prefill logits within tol, greedy
 * continuations identical. For an MoE model, a sequence with a token the backends routed to
 * different experts (a near tie of the router that rounding decides) is held to LOGIT_TOL_FLIP
 * from that token on, and such routings must be under MAX_FLIP_SHARE of all. */
static void compare_fixture(const char *fixture, bool fp8, double tol) {
    cJSON *g = golden(fixture);
    model_source_t from = {.model = weights_from, .format = LOAD_AUTO};
    model_weights_t *w = weights_from ? tu_weights(&from) : tu_fixture_weights(fixture);
    const model_config_t *cfg = weights_config(w);
    backend_t *gpu = open_backend(&cuda_backend_ops, w, false);
    char desc[256];
    gpu->ops->describe(gpu, desc, sizeof desc);
    print_message("%s on %s\n", fixture, desc);
    if (fp8 && !model_has_state(cfg)) assert_true(cuda_backend_uses_fp8(gpu));
    /* the CPU emulates W8A8 where the GPU runs it (a Qwen3.5 FP8 fixture may run as BF16) */
    fp8 = fp8 && cuda_backend_uses_fp8(gpu);
    if (!fp8 && kv_dtype != KV_DTYPE_FP8) tol = tol < LOGIT_TOL_BF16 ? tol : LOGIT_TOL_BF16;
    backend_t *cpu = open_backend(&cpu_backend_ops, w, fp8);

    const cJSON *prompts = cJSON_GetObjectItem(g, "prompts"), *p;
    int n_tokens = 0;
    cJSON_ArrayForEach(p, prompts) n_tokens += cJSON_GetArraySize(cJSON_GetObjectItem(p, "ids"));
    trace_t *tr = trace_new(cfg, n_tokens > BLOCK ? n_tokens : BLOCK);
    int n, n2;
    trace_on(tr, cpu, gpu);
    float *a = batched_prefill(cpu, w, g, cfg->vocab_size, &n);
    float *b = batched_prefill(gpu, w, g, cfg->vocab_size, &n2);
    trace_on(NULL, cpu, gpu);
    assert_int_equal(n, n2);
    bool *flipped = calloc((size_t)n_tokens, 1);
    if (tr) trace_compare(tr, n_tokens, flipped);
    double worst = 0, flip_worst = 0;
    int s = 0, t0 = 0, flipped_rows = 0;
    cJSON_ArrayForEach(p, prompts) {
        /* row s: the last token of prompt s, which attends to all of it */
        int len = cJSON_GetArraySize(cJSON_GetObjectItem(p, "ids"));
        bool f = false;
        for (int i = t0; i < t0 + len; i++)
            f |= flipped[i];
        flipped_rows += f;
        for (int v = 0; v < cfg->vocab_size; v++) {
            double d = fabs((double)a[(size_t)s * cfg->vocab_size + v] -
                            b[(size_t)s * cfg->vocab_size + v]);
            double *into = f ? &flip_worst : &worst;
            if (!(d <= *into)) *into = d;
        }
        t0 += len;
        s++;
    }
    print_message("%s: max |logit cuda - cpu%s| = %.4g (tolerance %.3g)\n", fixture,
                  fp8 ? " W8A8" : "", worst, tol);
    if (flipped_rows)
        print_message("%s: %d of %d prompts had a token routed to other experts: max |logit cuda "
                      "- cpu| %.4g there (tolerance %.3g)\n",
                      fixture, flipped_rows, n, flip_worst, LOGIT_TOL_FLIP);
    assert_true(worst <= tol);
    assert_true(flip_worst <= LOGIT_TOL_FLIP);
    free(flipped);
    free(a);
    free(b);

    int ties = 0, steps = 0;
    double step_worst = 0, step_flip_worst = 0;
    cJSON_ArrayForEach(p, prompts) {
        int n_prompt, n_want;
        int32_t *prompt = json_ids(cJSON_GetObjectItem(p, "ids"), &n_prompt);
        int32_t *want = json_ids(cJSON_GetObjectItem(p, "greedy"), &n_want);
        char what[64];
        snprintf(what, sizeof what, "%s, prompt of %d tokens", fixture, n_prompt);
        double d =
            lockstep(cpu, gpu, w, prompt, n_prompt, n_want, tol, what, &ties, tr, &step_flip_worst);
        if (d > step_worst) step_worst = d;
        steps += n_want;
        free(prompt);
        free(want);
    }
    print_message("%s: %d greedy steps, max |logit cuda - cpu| %.4g, %d near ties (top-2 gap "
                  "<= %.3g) picked differently\n",
                  fixture, steps, step_worst, ties, 2 * tol);
    /* the decode steps replayed CUDA graphs (captured on the device, recorded and replayed by
     * the host emulation), except MoE's, whose traced steps run eagerly */
    cuda_graph_stats_t gs;
    cuda_backend_graph_stats(gpu, &gs);
    print_message("%s: %ld decode steps replayed from %d captured graphs\n", fixture, gs.replays,
                  gs.captured);
    if (!tr) assert_true(gs.replays > 0 && gs.captured > 0);
    if (tr) {
        print_message("%s: %d of %d (MoE layer, token) routings differ between the backends; "
                      "max |logit cuda - cpu| %.4g after one (tolerance %.3g)\n",
                      fixture, tr->flips, tr->routings, step_flip_worst, LOGIT_TOL_FLIP);
        assert_true(tr->flips <= MAX_FLIP_SHARE * tr->routings);
    }
    assert_true(step_worst <= tol);
    assert_true(step_flip_worst <= LOGIT_TOL_FLIP);
    trace_free(tr);
    backend_destroy(gpu);
    backend_destroy(cpu);
    weights_destroy(w);
    cJSON_Delete(g);
}

static void test_bf16_fixture(void **state) {
    compare_fixture("tiny-qwen3", false, LOGIT_TOL_BF16);
}

static void test_fp8_fixture(void **state) {
    compare_fixture("tiny-qwen3-fp8", true, LOGIT_TOL_FP8);
}

static void test_moe_bf16_fixture(void **state) {
    compare_fixture("tiny-qwen3-moe", false, LOGIT_TOL_BF16);
}

static void test_moe_fp8_fixture(void **state) {
    compare_fixture("tiny-qwen3-moe-fp8", true, LOGIT_TOL_FP8_MOE);
}

static void test_qwen35_bf16_fixture(void **state) {
    compare_fixture("tiny-qwen3.5", false, LOGIT_TOL_BF16);
}

static void test_qwen35_fp8_fixture(void **state) {
    compare_fixture("tiny-qwen3.5-fp8", true, LOGIT_TOL_FP8);
}

/* --kv-cache-dtype fp8 on both backends: the CPU rounds K and V through e4m3 as the GPU's cache
 * stores them, so tiny-qwen3's logits through prefill and the lockstep decode (which reads the
 * cache) stay within the FP8 tolerance of the GPU's, and the greedy tokens equal (near ties
 * counted). Measured in the emulator: prefill 0.070, decode 0.32, 2 near ties; with the CPU's
 * cache left in f32 the decode reaches 0.62 (5 near ties) and the test fails. */
static void test_fp8_kv_against_cpu(void **state) {
    kv_dtype = KV_DTYPE_FP8;
    compare_fixture("tiny-qwen3", false, LOGIT_TOL_FP8);
    kv_dtype = KV_DTYPE_AUTO;
}

/* The same with the checkpoint's per-tensor KV scales (weights_kv_scales; amax / 448 of K and V
 * on these prompts, as test_golden's), both backends quantizing with them, then with scales that
 * saturate; and with Qwen3.5's gated attention (its write kernel). */
static void test_fp8_kv_scales_against_cpu(void **state) {
    kv_dtype = KV_DTYPE_FP8;
    char *dir = tu_fixture_with_kv_scales("tiny-qwen3", 10.0f / 448, 8.5f / 448);
    weights_from = dir;
    compare_fixture("tiny-qwen3", false, LOGIT_TOL_FP8);
    tu_rmrf(dir);
    free(dir);
    /* scales 16x too small: both caches saturate the same values at +-448 (a backend that
     * ignored the scales would be ~15 logits away, test_golden's saturated case) */
    dir = tu_fixture_with_kv_scales("tiny-qwen3", 10.0f / 448 / 16, 8.5f / 448 / 16);
    weights_from = dir;
    compare_fixture("tiny-qwen3", false, LOGIT_TOL_FP8);
    tu_rmrf(dir);
    free(dir);
    dir = tu_fixture_with_kv_scales("tiny-qwen3.5", 5.0f / 448, 2.5f / 448);
    weights_from = dir;
    compare_fixture("tiny-qwen3.5", false, LOGIT_TOL_FP8);
    weights_from = NULL;
    tu_rmrf(dir);
    free(dir);
    kv_dtype = KV_DTYPE_AUTO;
}
// ---------------------------------------------------------------------------------------------
// Speculative verify steps from CUDA graphs

/* Verify-shaped steps (every sequence q = k + 1 tokens, every token a logit row: what the engine
 * runs to check k drafts) on the cuda backend with graphs on, the same backend with graphs off,
 * and the CPU backend, in lockstep: two golden prompts prefilled, then steps of q = 3, 2, 5 and 3
 * tokens. The graphs' logits equal the eager run's bit for bit in the host emulation (the padded
 * sequences change nothing a real one reads; on a device cuBLASLt may pick another algorithm for
 * the padded size: within LOGIT_TOL_BF16 there) and are within LOGIT_TOL_BF16 of the CPU's; the
 * verify steps replayed graphs, the eager backend none. */
static void verify_graphs(const char *fixture) {
    cJSON *g = golden(fixture);
    model_weights_t *w = tu_fixture_weights(fixture);
    backend_t *be[3]; /* graphs, eager, cpu */
    be[0] = open_backend(&cuda_backend_ops, w, false);
    cuda_graphs = false;
    be[1] = open_backend(&cuda_backend_ops, w, false);
    cuda_graphs = true;
    be[2] = open_backend(&cpu_backend_ops, w, false);
    err_t err = {{0}};
    const int V = weights_config(w)->vocab_size;
    for (int i = 0; i < 3; i++) {
        if (backend_kv_reserve(be[i], TU_SEQS * TU_SEQ_BLOCKS, TU_BLOCK, &err) < 0)
            fail_msg("%s", err.msg);
        if (model_has_state(weights_config(w)) &&
            be[i]->ops->state_reserve(be[i], TU_SEQS, &err) < 0)
            fail_msg("%s", err.msg);
    }
    const cJSON *prompts = cJSON_GetObjectItem(g, "prompts");
    int32_t *ids[TU_SEQS];
    int from[TU_SEQS] = {0}, n[TU_SEQS];
    for (int s = 0; s < TU_SEQS; s++)
        ids[s] = json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, s), "ids"), &n[s]);
    float *lg[3];
    for (int i = 0; i < 3; i++)
        lg[i] = malloc((size_t)TU_TOKENS * V * sizeof(float));
    static tu_batch_t sb;
    const int steps[] = {0, 3, 2, 5, 3, 3}; /* 0: the prefill */
    double worst = 0.0;
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        const int32_t *tok[TU_SEQS];
        int32_t draft[TU_SEQS][8];
        int len[TU_SEQS];
        for (int s = 0; s < TU_SEQS; s++) {
            if (steps[k] == 0) {
                tok[s] = ids[s];
                len[s] = n[s];
                continue;
            }
            /* the CPU's greedy token, then "drafts": tokens of the prompt (right or not) */
            for (int j = 0; j < steps[k]; j++)
                draft[s][j] = j == 0 ? tu_argmax(lg[2] + (size_t)s * V, V, NULL)
                                     : ids[s][(from[s] + j) % n[s]];
            tok[s] = draft[s];
            len[s] = steps[k];
        }
        tu_batch_build(&sb, tok, from, len, steps[k] > 0);
        for (int i = 0; i < 3; i++)
            if (backend_forward(be[i], &sb.b, lg[i], &err) < 0) fail_msg("%s", err.msg);
        const size_t count = (size_t)sb.b.n_logits * V;
#ifdef OPS_HOST_EMULATION
        if (memcmp(lg[0], lg[1], count * sizeof(float)))
            fail_msg("%s: step %zu (q %d): graph logits differ from the eager run's, by up to %g",
                     fixture, k, steps[k], tu_max_diff(lg[0], lg[1], count));
#else
        assert_true(tu_max_diff(lg[0], lg[1], count) <= LOGIT_TOL_BF16);
#endif
        double d = tu_max_diff(lg[0], lg[2], count);
        if (d > worst) worst = d;
        if (!(d <= LOGIT_TOL_BF16))
            fail_msg("%s: step %zu (q %d): |logit cuda - cpu| %g", fixture, k, steps[k], d);
        if (steps[k] > 0) /* the next step's first token follows each sequence's last row */
            for (int s = TU_SEQS - 1; s >= 0; s--)
                memmove(lg[2] + (size_t)s * V, lg[2] + (size_t)(sb.b.query_start[s + 1] - 1) * V,
                        (size_t)V * 4);
        for (int s = 0; s < TU_SEQS; s++)
            from[s] += len[s];
    }
    cuda_graph_stats_t gs[2];
    for (int i = 0; i < 2; i++)
        cuda_backend_graph_stats(be[i], &gs[i]);
    print_message("%s: verify steps of 3, 2, 5 tokens a sequence: %ld replayed from %d graphs, "
                  "max |logit cuda - cpu| %.4g\n",
                  fixture, gs[0].verify_replays, gs[0].captured, worst);
    assert_int_equal(gs[0].verify_replays, 5);
    assert_int_equal(gs[1].replays + gs[1].captured, 0);
    for (int i = 0; i < 3; i++) {
        backend_destroy(be[i]);
        free(lg[i]);
    }
    for (int s = 0; s < TU_SEQS; s++)
        free(ids[s]);
    weights_destroy(w);
    cJSON_Delete(g);
}

static void test_verify_graphs(void **state) {
    verify_graphs("tiny-qwen3");
}

static void test_qwen35_verify_graphs(void **state) {
    verify_graphs("tiny-qwen3.5");
}

// ---------------------------------------------------------------------------------------------
// Engine batch invariance (tests/integration/test_engine.c's approach, backend "cuda")

/* Requests batched together: 32 on a GPU; in the host emulation (every GPU thread a fiber: each
 * batched run costs as much as the requests one by one) 8, which still mix prefill chunks and
 * decodes at budgets 16 and 64 and are preempted in the 10-block pool (asserted below); the CPU
 * engine test batches 64. */
#ifdef OPS_HOST_EMULATION
#define N_REQ 8
#else
#define N_REQ 32
#endif
#define N_GEN 12

/* fixture: 3 layers of 2 KV heads x 128, as the pool size below assumes */
static void batch_invariance(const char *fixture) {
    static int32_t prompts[N_REQ][96], alone[N_REQ][N_GEN], together[N_REQ][N_GEN];
    int len[N_REQ];
    for (int i = 0; i < N_REQ; i++)
        len[i] = tu_prompt(i, prompts[i]);
    sampling_params_t p = tu_greedy(N_GEN);
    /* alone without steps ahead: the batches run ahead (--async-scheduling auto: the cuda
     * backend's sample_begin / sample_end, placeholders resolved on the device) and are held to
     * synchronous steps' tokens */
    const char *const base[] = {"max-model-len",
                                "256",
                                "gpu-memory-utilization",
                                "0.3",
                                "enable-prefix-caching",
                                "false",
                                "async-scheduling",
                                "off",
                                NULL};
    engine_t *eng = tu_open_engine(tu_fixture(fixture), "cuda", base);
    uint64_t forwarded = 0;
    for (int i = 0; i < N_REQ; i++) {
        assert_int_equal(collect(tu_submit(eng, prompts[i], len[i], &p), alone[i], N_GEN), N_GEN);
        forwarded += (uint64_t)len[i] + N_GEN - 1;
    }
    if (engine_model_config(eng)->n_experts > 0) tu_check_expert_load(eng, forwarded);
    engine_close(eng);

    /* 10 blocks of 16 tokens (3 layers x K,V x 2 heads x 128 x bf16 = 48 KiB a block) */
    static char pool[32];
    snprintf(pool, sizeof pool, "%d", 10 * 16 * 3 * 2 * 2 * 128 * 2);
    const char *budgets[] = {"16", "64", "2048"};
    for (int b = 0; b < 3; b++)
        for (int variant = 0; variant < 3; variant++) {
            const char *flags[] = {"max-num-batched-tokens",
                                   budgets[b],
                                   "cuda-graphs",
                                   variant == 1 ? "false" : "true",
                                   "max-model-len",
                                   variant == 2 ? "128" : "256",
                                   variant == 2 ? "kv-cache-memory" : "gpu-memory-utilization",
                                   variant == 2 ? pool : "0.3",
                                   NULL};
            engine_t *e = tu_open_engine(tu_fixture(fixture), "cuda", flags);
            engine_stream_t *st[N_REQ];
            for (int i = 0; i < N_REQ; i++)
                st[i] = tu_submit(e, prompts[i], len[i], &p);
            for (int i = 0; i < N_REQ; i++) {
                assert_int_equal(collect(st[i], together[i], N_GEN), N_GEN);
                for (int k = 0; k < N_GEN; k++)
                    if (together[i][k] != alone[i][k])
                        fail_msg("%s: request %d, budget %s, variant %d: token %d is %d in the "
                                 "batch, %d alone",
                                 fixture, i, budgets[b], variant, k, together[i][k], alone[i][k]);
            }
            char desc[256]; /* a failed capture turns graphs off: it must not have */
            engine_describe_backend(e, desc, sizeof desc);
            assert_non_null(strstr(desc, variant == 1 ? "graphs off" : "graphs on"));
            static stats_snapshot_t snap;
            engine_stats(e, &snap);
            assert_true(snap.steps_ahead > 0 && snap.tokens_ahead > 0);
            if (variant == 2) {
                print_message("%s budget %s, 10-block pool: %llu preemptions\n", fixture,
                              budgets[b], (unsigned long long)snap.preemptions);
                assert_true(snap.preemptions > 0);
            }
            engine_close(e);
        }
}

static void test_engine_batch_invariance(void **state) {
    batch_invariance("tiny-qwen3");
}

static void test_engine_batch_invariance_moe(void **state) {
    batch_invariance("tiny-qwen3-moe");
}

/* Asynchronous scheduling on the cuda backend (sample_begin / sample_end, placeholders read on
 * the device) changes no output of the mixed workload (engine_testutil.h: seeded top-p with
 * logprobs, stop strings, penalties on the device's arena, n = 2, min_tokens masks) against
 * --async-scheduling off; and it ran ahead. */
static void async_mixed(const char *fixture, const char *budget) {
    enum { N = 24 };
    static tu_got_t got[2][N];
    static stats_snapshot_t on, off;
    const char *const extra[] = {"gpu-memory-utilization", "0.3", "max-num-batched-tokens", budget,
                                 NULL};
    tu_mixed_run(fixture, "cuda", "auto", extra, N, got[0], &on);
    tu_mixed_run(fixture, "cuda", "off", extra, N, got[1], &off);
    tu_mixed_expect_same(fixture, N, got[0], got[1]);
    print_message("cuda, %s: %llu of %llu steps ahead, %llu placeholder tokens\n", fixture,
                  (unsigned long long)on.steps_ahead, (unsigned long long)on.steps,
                  (unsigned long long)on.tokens_ahead);
    assert_true(on.steps_ahead > 0 && on.tokens_ahead > 0 && off.tokens_ahead == 0);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++)
            tu_got_free(&got[k][i]);
}

static void test_engine_async_mixed(void **state) {
    async_mixed("tiny-qwen3", "48"); /* prompts in chunks, mixed with decodes */
}

/* The recurrent state carried across steps ahead; n = 2 forks copy it on the stream. Whole
 * prompts a step: the cuda backend's chunked Gated DeltaNet sums a prompt split at another token
 * in another order (logprobs ~1e-3 apart at budgets 40 and 48, without steps ahead), and a
 * sequence that sits out a step ahead (penalties) shifts the others' splits. */
static void test_engine_async_mixed_qwen35(void **state) {
    async_mixed("tiny-qwen3.5", "2048");
}

/* Qwen3.5 on the engine with backend "cuda": 8 requests alone and together, budgets that cut
 * prompts into chunks (the recurrent state carried between steps), and a pool that the engine
 * splits into 5 state slots (6 linear layers x 19 KiB a slot) and 10 KV blocks (2 attention
 * layers x K,V x 16 x 2 heads x 64 x bf16 = 16 KiB a block), where sequences are preempted and
 * recomputed; every KV block and state slot back after each run. */
static void test_engine_qwen35_invariance(void **state) {
    enum { N = 8 };
    static int32_t prompts[N][96], alone[N][N_GEN], together[N][N_GEN];
    int len[N];
    for (int i = 0; i < N; i++) {
        len[i] = tu_prompt(3 * i + 1, prompts[i]);
        for (int t = 0; t < len[i]; t++)
            prompts[i][t] %= 1000; /* the fixture's regular ids */
    }
    sampling_params_t p = tu_greedy(N_GEN);
    const char *const base[] = {
        "max-model-len", "128", "gpu-memory-utilization", "0.3", "async-scheduling",
        "off",           NULL}; /* the batches run ahead */
    engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3.5"), "cuda", base);
    for (int i = 0; i < N; i++)
        assert_int_equal(collect(tu_submit(eng, prompts[i], len[i], &p), alone[i], N_GEN), N_GEN);
    engine_close(eng);
    static char pool[32];
    snprintf(pool, sizeof pool, "%d", 4 * 116736 + 18 * 16384);
    const char *budgets[] = {"16", "2048", "64"};
    for (int b = 0; b < 3; b++) {
        const char *flags[] = {"max-num-batched-tokens",
                               budgets[b],
                               "max-model-len",
                               "128",
                               b == 2 ? "kv-cache-memory" : "gpu-memory-utilization",
                               b == 2 ? pool : "0.3",
                               NULL};
        engine_t *e = tu_open_engine(tu_fixture("tiny-qwen3.5"), "cuda", flags);
        engine_stream_t *st[N];
        for (int i = 0; i < N; i++)
            st[i] = tu_submit(e, prompts[i], len[i], &p);
        for (int i = 0; i < N; i++) {
            assert_int_equal(collect(st[i], together[i], N_GEN), N_GEN);
            for (int k = 0; k < N_GEN; k++)
                if (together[i][k] != alone[i][k])
                    fail_msg("qwen3.5 request %d, budget %s: token %d is %d in the batch, %d alone",
                             i, budgets[b], k, together[i][k], alone[i][k]);
        }
        static stats_snapshot_t snap;
        for (int tries = 0; tries < 200; tries++) {
            engine_stats(e, &snap);
            if (snap.kv_used == 0 && snap.state_used == 0 && snap.running == 0) break;
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
        print_message("qwen3.5 budget %s%s: %llu preemptions; %d blocks, %d state slots in use\n",
                      budgets[b], b == 2 ? " (small pool)" : "",
                      (unsigned long long)snap.preemptions, snap.kv_used, snap.state_used);
        assert_int_equal(snap.kv_used, 0);
        assert_int_equal(snap.state_used, 0);
        assert_true(snap.tokens_ahead > 0);
        if (b == 2) assert_true(snap.preemptions > 0);
        engine_close(e);
    }
}

/* Speculative decoding with n-gram drafts (engine/spec.h) on the cuda backend: the verify step
 * is a chunk of k + 1 query tokens with a logit row for each, sampled on the device. Each
 * request's greedy output with drafts (k = 3), all at once, equals its output without, alone;
 * on tiny-qwen3 and on tiny-qwen3.5, where a rejected draft puts the recurrent state back
 * (state_copy). Prompts say a passage three times, so drafts are found and accepted. */
static void spec_ngram(const char *fixture, int max_token) {
    enum { N = 8 };
    static int32_t prompts[N][64], alone[N][N_GEN], together[N][N_GEN];
    int len[N];
    for (int i = 0; i < N; i++) {
        len[i] = 0;
        for (int r = 0; r < 3; r++)
            for (int t = 0; t < 10 + i; t++)
                prompts[i][len[i]++] =
                    (int32_t)(rng_bits(77, (uint64_t)i, (uint64_t)t) % max_token);
    }
    sampling_params_t p = tu_greedy(N_GEN);
    const char *const flags[] = {"max-model-len", "128", "gpu-memory-utilization", "0.3", NULL};
    engine_t *eng = tu_open_engine(tu_fixture(fixture), "cuda", flags);
    for (int i = 0; i < N; i++)
        assert_int_equal(collect(tu_submit(eng, prompts[i], len[i], &p), alone[i], N_GEN), N_GEN);
    tu_spec_on(eng, "3");
    engine_stream_t *st[N];
    for (int i = 0; i < N; i++)
        st[i] = tu_submit(eng, prompts[i], len[i], &p);
    for (int i = 0; i < N; i++) {
        assert_int_equal(collect(st[i], together[i], N_GEN), N_GEN);
        for (int k = 0; k < N_GEN; k++)
            if (together[i][k] != alone[i][k])
                fail_msg("%s request %d: token %d is %d with drafts, %d without", fixture, i, k,
                         together[i][k], alone[i][k]);
    }
    static stats_snapshot_t snap;
    engine_stats(eng, &snap);
    print_message("%s: %llu drafts verified, %llu accepted\n", fixture,
                  (unsigned long long)snap.spec_draft_tokens,
                  (unsigned long long)snap.spec_accepted_tokens);
    assert_true(snap.spec_accepted_tokens > 0);
    engine_close(eng);
}

static void test_engine_spec_ngram(void **state) {
    spec_ngram("tiny-qwen3", 2048);
}

static void test_engine_spec_ngram_qwen35(void **state) {
    spec_ngram("tiny-qwen3.5", 1000);
}

/* --kv-cache-dtype fp8: greedy outputs alone and batched agree (against each other: the e4m3
 * cache legitimately changes tokens relative to bf16). */
static void test_engine_fp8_kv(void **state) {
    enum { N = 12 };
    static int32_t prompts[N][96], alone[N][N_GEN], together[N][N_GEN];
    int len[N];
    for (int i = 0; i < N; i++)
        len[i] = tu_prompt(200 + i, prompts[i]);
    sampling_params_t p = tu_greedy(N_GEN);
    const char *const flags[] = {"max-model-len",
                                 "256",
                                 "gpu-memory-utilization",
                                 "0.3",
                                 "kv-cache-dtype",
                                 "fp8",
                                 "max-num-batched-tokens",
                                 "64",
                                 NULL};
    engine_t *eng = open_engine(flags);
    char desc[256];
    engine_describe_backend(eng, desc, sizeof desc);
    print_message("%s\n", desc);
    assert_non_null(strstr(desc, "kv fp8"));
    /* the device list the console's GPU rows follow: one device (at TP 1),
     * with the PCI bus id NVML finds it by ("0000:3b:00.0") */
    backend_device_t dev[4];
    assert_int_equal(engine_devices(eng, dev, 4), 1);
    assert_true(dev[0].ordinal >= 0 && strlen(dev[0].pci_bus_id) >= 12);
    for (int i = 0; i < N; i++)
        assert_int_equal(collect(tu_submit(eng, prompts[i], len[i], &p), alone[i], N_GEN), N_GEN);
    engine_stream_t *st[N];
    for (int i = 0; i < N; i++)
        st[i] = tu_submit(eng, prompts[i], len[i], &p);
    for (int i = 0; i < N; i++) {
        assert_int_equal(collect(st[i], together[i], N_GEN), N_GEN);
        assert_memory_equal(alone[i], together[i], sizeof alone[i]);
    }
    engine_close(eng);
}

static void test_engine_seeded_sampling(void **state) {
    const char *const flags[] = {"max-model-len", "256", "gpu-memory-utilization", "0.3", NULL};
    engine_t *eng = open_engine(flags);
    sampling_params_t p;
    sampling_params_init(&p);
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    p.top_k = 50;
    p.has_seed = true;
    p.seed = 4242;
    p.max_tokens = 24;
    p.ignore_eos = true;
    int32_t prompt[96], solo[24], in_batch[24], np[16][96], scratch[64];
    int n = tu_prompt(7, prompt);
    assert_int_equal(collect(tu_submit(eng, prompt, n, &p), solo, 24), 24);
    sampling_params_t other = tu_greedy(24);
    engine_stream_t *noise[16];
    for (int i = 0; i < 16; i++) {
        int m = tu_prompt(100 + i, np[i]);
        other.temperature = i % 2 ? 1.0f : 0.0f;
        noise[i] = tu_submit(eng, np[i], m, &other);
    }
    engine_stream_t *mine = tu_submit(eng, prompt, n, &p);
    for (int i = 0; i < 8; i++)
        collect(noise[i], scratch, 64);
    assert_int_equal(collect(mine, in_batch, 24), 24);
    for (int i = 8; i < 16; i++)
        collect(noise[i], scratch, 64);
    assert_memory_equal(solo, in_batch, sizeof solo);
    engine_close(eng);
}

// ---------------------------------------------------------------------------------------------
// Dummy weights generated on the device

/* Draw i of seed `seed`: a random element (*row, *col) of dummy tensor t and the value the host
 * scheme gives it (e4m3 times its block's scale, or bf16). */
static float dummy_element(const wtensor_t *t, uint64_t seed, int i, int64_t *row, int64_t *col) {
    *row = (int64_t)(rng_bits(seed, 3, (uint64_t)i) % (uint64_t)t->rows);
    *col = (int64_t)(rng_bits(seed, 4, (uint64_t)i) % (uint64_t)t->cols);
    uint64_t idx = (uint64_t)*row * (uint64_t)t->cols + (uint64_t)*col;
    if (t->dtype == DT_F8_E4M3)
        return dtype_e4m3_to_f32(weights_dummy_e4m3(t->dummy_seed, t->dummy_stream, idx)) *
               t->scale_inv[(*row / 128) * t->scale_cols + *col / 128];
    return dtype_bf16_to_f32(weights_dummy_bf16(t->dummy_seed, t->dummy_stream, idx));
}

/* Lazy dummy weights of `model` (a preset or a directory's config) on the cuda backend, which
 * generates them on the device: FP8 or BF16 as asked. */
static backend_t *open_dummy(const char *model, bool fp8, uint64_t seed, model_weights_t **w) {
    model_source_t src = {
        .model = model, .format = LOAD_DUMMY, .dummy_fp8 = fp8, .seed = seed, .lazy_dummy = true};
    *w = tu_weights(&src);
    backend_t *be = open_backend(&cuda_backend_ops, *w, false);
    assert_int_equal(cuda_backend_uses_fp8(be), fp8);
    return be;
}

static void check_dummy(bool fp8) {
    /* TACHYON_TEST_DUMMY_PRESET: a smaller preset for the host emulation (tests/gpu/emu_backend) */
    const char *preset = getenv("TACHYON_TEST_DUMMY_PRESET");
    const char *model = preset ? preset : "qwen3-0.6b";
    model_weights_t *w;
    err_t err = {{0}};
    backend_t *be = open_dummy(model, fp8, 1234, &w);
    const model_config_t *cfg = weights_config(w);
    static const int slots[] = {L_Q, L_K, L_V, L_O, L_GATE, L_UP, L_DOWN};
    int checked = 0;
    for (int i = 0; i < 2000; i++) {
        int layer = (int)(rng_bits(99, 1, (uint64_t)i) % (uint64_t)(cfg->n_layers + 1)) - 1;
        int slot = layer < 0 ? (int)(rng_bits(99, 2, (uint64_t)i) % 2) == 0 ? G_EMBED : G_LM_HEAD
                             : slots[rng_bits(99, 2, (uint64_t)i) % 7];
        const wtensor_t *t =
            layer < 0 ? weights_global(w, (gslot_t)slot) : weights_layer(w, layer, (lslot_t)slot);
        assert_true(t->dummy);
        assert_null(t->data);
        int64_t row, col;
        float want = dummy_element(t, 99, i, &row, &col);
        float got;
        if (cuda_backend_weight_value(be, layer, slot, row, col, &got, &err) < 0)
            fail_msg("%s", err.msg);
        if (got != want)
            fail_msg("layer %d slot %d (%lld, %lld): device %g, host %g", layer, slot,
                     (long long)row, (long long)col, got, want);
        checked++;
    }
    /* the lazy scheme is the eager one: compare with weights_dummy's host data too */
    model_weights_t *eager;
    model_config_t small = *cfg;
    small.n_layers = 1;
    assert_int_equal(weights_dummy(&small, 1234, &eager, &err), 0);
    const wtensor_t *e = weights_layer(eager, 0, L_GATE), *l = weights_layer(w, 0, L_GATE);
    for (int64_t i = 0; i < 4096; i++) {
        uint64_t idx = rng_bits(5, 5, (uint64_t)i) % (uint64_t)(e->rows * e->cols);
        if (e->dtype == DT_F8_E4M3)
            assert_int_equal(((const uint8_t *)e->data)[idx],
                             weights_dummy_e4m3(l->dummy_seed, l->dummy_stream, idx));
        else
            assert_int_equal(((const uint16_t *)e->data)[idx],
                             weights_dummy_bf16(l->dummy_seed, l->dummy_stream, idx));
    }
    weights_destroy(eager);
    print_message("%s %s: %d device elements equal the host scheme\n", model, fp8 ? "fp8" : "bf16",
                  checked);
    backend_destroy(be);
    weights_destroy(w);
}

static void test_dummy_fp8(void **state) {
    check_dummy(true);
}

static void test_dummy_bf16(void **state) {
    check_dummy(false);
}

/* The experts of a dummy MoE (the FP8 fixture's config: 12 experts, I 96 padded to 128) on the
 * device equal the host scheme, through the stacked gate | up and padded layout. */
static void test_dummy_moe(void **state) {
    model_weights_t *w;
    err_t err = {{0}};
    backend_t *be = open_dummy(tu_fixture("tiny-qwen3-moe-fp8"), true, 77, &w);
    const model_config_t *cfg = weights_config(w);
    int checked = 0;
    for (int i = 0; i < 600; i++) {
        int layer = 1 + 2 * (int)(rng_bits(98, 1, (uint64_t)i) % 2); /* layers 1 and 3 */
        int e = (int)(rng_bits(98, 2, (uint64_t)i) % (uint64_t)cfg->n_experts);
        int slot = (int)(rng_bits(98, 6, (uint64_t)i) % E_COUNT);
        const wtensor_t *t = weights_expert(w, layer, e, (eslot_t)slot);
        assert_true(t->dummy);
        int64_t row, col;
        float want = dummy_element(t, 98, i, &row, &col);
        float got;
        if (cuda_backend_expert_value(be, layer, e, slot, row, col, &got, &err) < 0)
            fail_msg("%s", err.msg);
        if (got != want)
            fail_msg("layer %d expert %d slot %d (%lld, %lld): device %g, host %g", layer, e, slot,
                     (long long)row, (long long)col, got, want);
        checked++;
    }
    print_message("dummy MoE: %d expert elements equal the host scheme\n", checked);
    backend_destroy(be);
    weights_destroy(w);
}

int main(void) {
    if (!cuda_backend_available()) {
        printf("test_cuda_backend: no Hopper GPU, skipped\n");
        return 77;
    }
    backend_register(&cuda_backend_ops);
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dummy_fp8),
        cmocka_unit_test(test_dummy_bf16),
        cmocka_unit_test(test_dummy_moe),
        cmocka_unit_test(test_bf16_fixture),
        cmocka_unit_test(test_fp8_fixture),
        cmocka_unit_test(test_moe_bf16_fixture),
        cmocka_unit_test(test_moe_fp8_fixture),
        cmocka_unit_test(test_qwen35_bf16_fixture),
        cmocka_unit_test(test_qwen35_fp8_fixture),
        cmocka_unit_test(test_engine_batch_invariance),
        cmocka_unit_test(test_engine_batch_invariance_moe),
        cmocka_unit_test(test_engine_qwen35_invariance),
        cmocka_unit_test(test_engine_seeded_sampling),
        cmocka_unit_test(test_engine_async_mixed),
        cmocka_unit_test(test_engine_async_mixed_qwen35),
        cmocka_unit_test(test_engine_spec_ngram),
        cmocka_unit_test(test_engine_spec_ngram_qwen35),
        cmocka_unit_test(test_engine_fp8_kv),
        cmocka_unit_test(test_fp8_kv_against_cpu),
        cmocka_unit_test(test_fp8_kv_scales_against_cpu),
        cmocka_unit_test(test_verify_graphs),
        cmocka_unit_test(test_qwen35_verify_graphs),
    };
    /* TEST_FILTER / TEST_SKIP: comma-separated patterns of the tests to run / to leave out, e.g.
     * TEST_FILTER='*moe*' (the emulated run takes minutes; ctest runs it in groups) */
    size_t n = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (tu_test_selected(tests[i].name)) tests[n++] = tests[i];
    return _cmocka_run_group_tests("test_cuda_backend", tests, n, NULL, NULL);
}

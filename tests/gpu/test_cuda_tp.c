/* Tensor parallel 2 (and 4) against TP 1, both on the cuda backend: on one device (the
 * single-device communicator), or, where two devices and NCCL are there, a rank per device over
 * NCCL with the decode steps replayed from every rank's CUDA graphs (on the device, or in the host
 * emulation with TACHYON_EMU_DEVICES=4 over its emulated NCCL). The same logits within LOGIT_TOL_TP
 * and the same greedy tokens (and against the CPU backend, within test_cuda_backend's tolerances of
 * TP 1), through the backend and through the engine (with two devices also two data-parallel
 * replicas, a device each): dense BF16 and FP8, Qwen3-MoE (tensor and expert parallel), Qwen3.5;
 * what TP cannot shard is refused, naming it. (Split from test_cuda_backend.c, whose helpers both
 * use: cuda_compare.h.)
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
#include <cuda_runtime_api.h>

#include "backend.h"
#include "cb_internal.h"
#include "cuda_backend.h"
#include "engine.h"
#include "rng.h"
#include "engine_testutil.h"
#include "testutil.h"
#include "tp.h"
#include "weights.h"

#include "cuda_compare.h"

/* TP 2 against TP 1, both on the cuda backend: the row-parallel layers add two f32 partial sums
 * where TP 1 has one GEMM's sum (f32 ulps), which a later bf16 (or e4m3) rounding of a GEMM input
 * can turn into one step of that format. Measured under the host emulation: 3.1e-4 on tiny-qwen3
 * (BF16), 0.026 on the "tiny" dummy preset in FP8 (W8A8: an e4m3 step is 1/16 relative); the
 * tolerances leave room for cuBLASLt's other summation orders at K and K / 2 on the device. */
#define LOGIT_TOL_TP     0.05
#define LOGIT_TOL_TP_FP8 0.25

// ---------------------------------------------------------------------------------------------
// Tensor parallel on one device

/* ref's and got's logits [n, vocab]: the largest difference, and argmaxes equal unless ref's
 * top-2 gap is within 2 * tol (a near tie, printed and counted in *ties). */
static double compare_rows(const float *ref, const float *got, int n, int vocab, double tol,
                           const char *what, int *ties) {
    double worst = 0;
    for (int r = 0; r < n; r++) {
        const float *a = ref + (size_t)r * vocab, *b = got + (size_t)r * vocab;
        int aa = 0, ab = 0;
        for (int v = 0; v < vocab; v++) {
            double d = fabs((double)a[v] - b[v]);
            if (!(d <= worst)) worst = d;
            if (a[v] > a[aa]) aa = v;
            if (b[v] > b[ab]) ab = v;
        }
        if (aa == ab) continue;
        float second = -INFINITY;
        for (int v = 0; v < vocab; v++)
            if (v != aa && a[v] > second) second = a[v];
        if (a[aa] - second > 2 * tol)
            fail_msg("%s: row %d: TP N picks %d, TP 1 %d with a margin of %.4g", what, r, ab, aa,
                     a[aa] - second);
        print_message("%s: row %d: near tie, TP N picks %d, TP 1 %d (margin %.4g)\n", what, r, ab,
                      aa, a[aa] - second);
        (*ties)++;
    }
    return worst;
}

/* TP tp against TP 1 on the cuda backend over weights w: the first n_prompts golden prompts of
 * `fixture` (or, for NULL, n_prompts tu_prompt prompts) prefilled in one batch, logits within
 * tol; then n_lock of them generated greedily in lockstep for 8 tokens (chunked prefill, paged
 * decode). */
static void tp_against_tp1(model_weights_t *w, const char *fixture, int tp, bool fp8, bool ep,
                           double tol, int n_prompts, int n_lock) {
    char name[64];
    snprintf(name, sizeof name, "%s at TP %d", fixture ? fixture : "dummy", tp);
    backend_t *one = open_backend_tp(&cuda_backend_ops, w, false, 1, false, NULL);
    backend_t *two = open_backend_tp(&cuda_backend_ops, w, false, tp, ep, NULL);
    assert_int_equal(cuda_backend_uses_fp8(one), fp8);
    assert_int_equal(cuda_backend_uses_fp8(two), fp8);
    char desc[512];
    two->ops->describe(two, desc, sizeof desc);
    print_message("%s: %s\n", name, desc);
    char want[32];
    snprintf(want, sizeof want, "tensor parallel %d", tp);
    assert_non_null(strstr(desc, want));
    if (ep) assert_non_null(strstr(desc, "expert parallel"));
    /* graphs asked for: on over NCCL (its collectives are captured with each rank's steps), off
     * over the single-device communicator (it meets the ranks on the host) */
    const bool nccl = strstr(desc, "NCCL") != NULL;
    assert_non_null(strstr(desc, nccl ? "graphs on" : "graphs off"));
    int vocab = weights_config(w)->vocab_size, n, n2, ties = 0;
    cJSON *g = NULL;
    if (fixture) {
        g = golden(fixture);
        cJSON *ps = cJSON_GetObjectItem(g, "prompts");
        while (cJSON_GetArraySize(ps) > n_prompts)
            cJSON_DeleteItemFromArray(ps, n_prompts);
    } else { /* the same golden shape from generated prompts */
        g = cJSON_CreateObject();
        cJSON *ps = cJSON_AddArrayToObject(g, "prompts");
        for (int i = 0; i < n_prompts; i++) {
            int32_t ids[96];
            int len = tu_prompt(300 + i, ids);
            cJSON *p = cJSON_CreateObject();
            cJSON_AddItemToObject(p, "ids", cJSON_CreateIntArray(ids, len));
            cJSON_AddItemToArray(ps, p);
        }
    }
    float *a = batched_prefill(one, w, g, vocab, &n);
    float *b = batched_prefill(two, w, g, vocab, &n2);
    assert_int_equal(n, n2);
    double worst = compare_rows(a, b, n, vocab, tol, name, &ties);
    print_message("%s: batched prefill of %d prompts: max |logit TP N - TP 1| = %.4g (tolerance "
                  "%.3g), %d near ties\n",
                  name, n, worst, tol, ties);
    assert_true(worst <= tol);
    free(a);
    free(b);
    /* greedy in lockstep with TP 1, and with the CPU backend, the reference (W8A8 emulated where
     * the ranks run it) held as test_cuda_backend holds TP 1: an MoE token the two route to other
     * experts (a router near tie) holds its sequence to LOGIT_TOL_FLIP from there on */
    const model_config_t *cfg = weights_config(w);
    backend_t *cpu = open_backend(&cpu_backend_ops, w, fp8);
    trace_t *tr = trace_new(cfg, BLOCK);
    double cpu_tol = !fp8 ? LOGIT_TOL_BF16 : cfg->n_experts ? LOGIT_TOL_FP8_MOE : LOGIT_TOL_FP8;
    double step_worst = 0, cpu_worst = 0, flip_worst = 0;
    int cpu_ties = 0, k = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(g, "prompts")) {
        if (k++ >= n_lock) break;
        int n_prompt;
        int32_t *prompt = json_ids(cJSON_GetObjectItem(p, "ids"), &n_prompt);
        char what[sizeof name + 64];
        snprintf(what, sizeof what, "%s, prompt of %d tokens", name, n_prompt);
        double d = lockstep(one, two, w, prompt, n_prompt, 8, tol, what, &ties, NULL, NULL);
        if (d > step_worst) step_worst = d;
        snprintf(what, sizeof what, "%s against the CPU, prompt of %d tokens", name, n_prompt);
        d = lockstep(cpu, two, w, prompt, n_prompt, 8, cpu_tol, what, &cpu_ties, tr, &flip_worst);
        if (d > cpu_worst) cpu_worst = d;
        free(prompt);
    }
    print_message("%s: %d prompts x 8 greedy steps in lockstep: max |logit TP N - TP 1| = %.4g, "
                  "%d near ties in all\n",
                  name, n_lock, step_worst, ties);
    print_message("%s: the same with the CPU backend: max |logit TP N - cpu| = %.4g (tolerance "
                  "%.3g), %d near ties%s\n",
                  name, cpu_worst, cpu_tol, cpu_ties,
                  tr && tr->flips ? ", routing flips held to LOGIT_TOL_FLIP" : "");
    assert_true(step_worst <= tol);
    assert_true(cpu_worst <= cpu_tol && flip_worst <= LOGIT_TOL_FLIP);
    trace_free(tr);
    backend_destroy(cpu);
    for (int r = 0; nccl && r < tp; r++) { /* every rank's decode steps ran from its graphs */
        cuda_graph_stats_t gs;
        cuda_backend_graph_stats(tp_backend_rank(two, r), &gs);
        print_message("%s: rank %d replayed %ld steps from %d captured graphs\n", name, r,
                      gs.replays, gs.captured);
        assert_true(gs.replays >= 7 * n_lock && gs.captured >= 1);
    }
    cJSON_Delete(g);
    backend_destroy(two);
    backend_destroy(one);
}

/* tiny-qwen3 (BF16): the backend's logits, then the engine: 4 requests of 8 tokens batched
 * under a budget of 16 tokens (prefills in chunks, mixed with decodes), the same tokens at TP 2
 * as at TP 1. */
static void test_tp2_bf16(void **state) {
    model_weights_t *w = tu_fixture_weights("tiny-qwen3");
    tp_against_tp1(w, "tiny-qwen3", 2, false, false, LOGIT_TOL_TP, 5, 2);
    weights_destroy(w);

    /* TP 1, TP 2, and where the TP 2 ranks had a device each, two data-parallel replicas of
     * TP 1, each on its own device (device + replica x TP) */
    enum { N = 4, GEN = 8 };
    static const char *const layout[3][2] = {{"1", "1"}, {"2", "1"}, {"1", "2"}};
    static int32_t prompts[N][96], out[3][N][GEN];
    int len[N], runs = 2;
    for (int i = 0; i < N; i++)
        len[i] = tu_prompt(400 + i, prompts[i]);
    sampling_params_t p = tu_greedy(GEN);
    for (int run = 0; run < runs; run++) {
        const char *const flags[] = {"max-model-len",
                                     "256",
                                     "gpu-memory-utilization",
                                     "0.3",
                                     "max-num-batched-tokens",
                                     "16",
                                     "tensor-parallel-size",
                                     layout[run][0],
                                     "data-parallel-size",
                                     layout[run][1],
                                     NULL};
        engine_t *e = open_engine(flags);
        backend_device_t dev[4];
        int n_dev = engine_devices(e, dev, 4);
        print_message("engine at TP %s DP %s: %d device(s)%s\n", layout[run][0], layout[run][1],
                      n_dev, n_dev == 2 ? ", ordinals 0 and 1" : "");
        if (run > 0 && n_dev == 2) {
            assert_true(dev[0].ordinal == 0 && dev[1].ordinal == 1);
            runs = 3;
        }
        engine_stream_t *st[N];
        for (int i = 0; i < N; i++)
            st[i] = tu_submit(e, prompts[i], len[i], &p);
        for (int i = 0; i < N; i++)
            assert_int_equal(collect(st[i], out[run][i], GEN), GEN);
        engine_close(e);
    }
    for (int run = 1; run < runs; run++)
        for (int i = 0; i < N; i++)
            for (int k = 0; k < GEN; k++)
                if (out[run][i][k] != out[0][i][k])
                    fail_msg("engine: request %d token %d: %d at TP %s DP %s, %d at TP 1", i, k,
                             out[run][i][k], layout[run][0], layout[run][1], out[0][i][k]);
    print_message(
        "engine, tiny-qwen3: %d requests x %d tokens, budget 16: the same tokens at TP 2%s "
        "as at TP 1\n",
        N, GEN, runs == 3 ? " and at DP 2 (a device each)" : "");
}

/* FP8 at TP 2: the "tiny" dummy preset (hidden 256, intermediate 768: every shard on 128-blocks,
 * so the W8A8 path runs on each rank), generated on the device through the shard views. */
static void test_tp2_fp8(void **state) {
    model_source_t src = {
        .model = "tiny", .format = LOAD_DUMMY, .dummy_fp8 = true, .seed = 77, .lazy_dummy = true};
    model_weights_t *w = tu_weights(&src);
    tp_against_tp1(w, NULL, 2, true, false, LOGIT_TOL_TP_FP8, 4, 2);
    weights_destroy(w);
}

/* Qwen3-MoE at TP 2 (tiny-qwen3-moe, BF16): every expert sliced (moe_intermediate_size 64, 32
 * a rank), the router replicated, the experts' outputs all-reduced. (Named without "moe": the
 * tp group runs it, not the moe one.) */
static void test_tp2_experts(void **state) {
    model_weights_t *w = tu_fixture_weights("tiny-qwen3-moe");
    tp_against_tp1(w, "tiny-qwen3-moe", 2, false, false, LOGIT_TOL_TP, 5, 2);
    weights_destroy(w);
}

/* Expert parallel at TP 2: each rank holds half the experts whole, groups and computes only the
 * pairs routed to them (the others' rows left out of its sums), and the all-reduce adds the
 * ranks' parts. tiny-qwen3-moe (BF16, 8 experts, top 2), and block FP8 on dummy weights of a
 * config whose every shard keeps to 128-blocks (hidden 256, 8 experts of 128, top 2, a dense
 * layer of 256) so that the W8A8 grouped GEMM runs on a range of experts (4 a rank). */
static void test_tp2_experts_ep(void **state) {
    model_weights_t *w = tu_fixture_weights("tiny-qwen3-moe");
    tp_against_tp1(w, "tiny-qwen3-moe", 2, false, true, LOGIT_TOL_TP, 5, 2);
    weights_destroy(w);
    char dir[] = "/tmp/tachyon-ep-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\", "
          "\"hidden_size\": 256, \"intermediate_size\": 256, \"moe_intermediate_size\": 128, "
          "\"num_experts\": 8, \"num_experts_per_tok\": 2, \"norm_topk_prob\": true, "
          "\"decoder_sparse_step\": 1, \"mlp_only_layers\": [1], \"num_hidden_layers\": 2, "
          "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 128, "
          "\"vocab_size\": 4096, \"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-06, "
          "\"rope_theta\": 1000000, \"tie_word_embeddings\": false, \"torch_dtype\": "
          "\"bfloat16\", \"bos_token_id\": 1, \"eos_token_id\": 2}",
          f);
    fclose(f);
    model_source_t src = {
        .model = dir, .format = LOAD_DUMMY, .dummy_fp8 = true, .seed = 91, .lazy_dummy = true};
    w = tu_weights(&src);
    tp_against_tp1(w, NULL, 2, true, true, LOGIT_TOL_TP_FP8, 2, 2);
    weights_destroy(w);
    remove(path);
    rmdir(dir);
}

/* Qwen3.5 at TP 2 (tiny-qwen3.5, BF16): gated attention by heads (q | gate rows per head), the
 * Gated DeltaNet by key and value heads (in_proj_qkv and conv1d as three row blocks, each rank's
 * state slots its heads' conv windows and SSM states), out_proj all-reduced. (Named without
 * "qwen35": the tp group runs it.) */
static void test_tp2_gated_deltanet(void **state) {
    model_weights_t *w = tu_fixture_weights("tiny-qwen3.5");
    tp_against_tp1(w, "tiny-qwen3.5", 2, false, false, LOGIT_TOL_TP, 3, 2);
    weights_destroy(w);
}

/* The fault-injection tests' backends: tiny-qwen3 at TP 1 and TP 2, when the TP 2 ranks run in
 * the host emulation a device each over NCCL; false elsewhere (the skip said, nothing left
 * open). */
static bool open_fault_pair(model_weights_t **w, backend_t **one, backend_t **two) {
    *w = tu_fixture_weights("tiny-qwen3");
    *one = open_backend_tp(&cuda_backend_ops, *w, false, 1, false, NULL);
    *two = open_backend_tp(&cuda_backend_ops, *w, false, 2, false, NULL);
    char desc[512];
    (*two)->ops->describe(*two, desc, sizeof desc);
    if (strstr(desc, "host emulation") && strstr(desc, "NCCL")) return true;
    print_message("skipped: needs the host emulation with a rank per device\n");
    backend_destroy(*two);
    backend_destroy(*one);
    weights_destroy(*w);
    return false;
}

/* A CUDA graph capture that fails on one rank only (the host emulation's fault injection,
 * TACHYON_EMU_FAIL_CAPTURE_DEVICE) turns graphs off on every rank: NCCL requires a collective
 * graph-captured on all ranks or on none (the emulated NCCL stops the process otherwise), so the
 * ranks agree on each capture. The decode steps then run eagerly on both ranks, with TP 1's
 * tokens. Needs a rank per device over NCCL; skipped elsewhere. */
static void test_tp2_capture_failure(void **state) {
    model_weights_t *w;
    backend_t *one, *two;
    if (!open_fault_pair(&w, &one, &two)) return;
    int32_t prompt[96];
    int n = tu_prompt(600, prompt), ties = 0;
    setenv("TACHYON_EMU_FAIL_CAPTURE_DEVICE", "1", 1);
    double d = lockstep(one, two, w, prompt, n, 6, LOGIT_TOL_TP, "capture failing on rank 1", &ties,
                        NULL, NULL);
    unsetenv("TACHYON_EMU_FAIL_CAPTURE_DEVICE");
    char desc[512];
    two->ops->describe(two, desc, sizeof desc);
    print_message("capture refused on device 1: max |logit TP 2 - TP 1| = %.4g; %s\n", d, desc);
    assert_true(d <= LOGIT_TOL_TP);
    assert_non_null(strstr(desc, "graphs off")); /* rank 0's, which captured fine */
    for (int r = 0; r < 2; r++) {
        cuda_graph_stats_t gs;
        cuda_backend_graph_stats(tp_backend_rank(two, r), &gs);
        assert_int_equal(gs.replays, 0);
    }
    backend_destroy(two);
    backend_destroy(one);
    weights_destroy(w);
}

/* TP 4 over 2 KV heads: each KV head replicated on the two ranks whose query head reads it (one
 * query head a rank), vocab-parallel in quarters; tiny-qwen3 (dense) and tiny-qwen3-moe with
 * expert parallel (2 of the 8 experts a rank). On one device, or a rank per device where four
 * are; a machine with two or three is refused (test_tp2_refusals). */
static void test_tp4_replicated_kv(void **state) {
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count >= 2 && count < 4) {
        print_message("skipped: %d devices, TP 4 is refused there\n", count);
        return;
    }
    model_weights_t *w = tu_fixture_weights("tiny-qwen3");
    tp_against_tp1(w, "tiny-qwen3", 4, false, false, LOGIT_TOL_TP, 3, 1);
    weights_destroy(w);
    w = tu_fixture_weights("tiny-qwen3-moe");
    tp_against_tp1(w, "tiny-qwen3-moe", 4, false, true, LOGIT_TOL_TP, 3, 1);
    weights_destroy(w);
}

/* A rank that fails on its own before a collective (its host-to-device copies refused: the host
 * emulation's fault injection, TACHYON_EMU_FAIL_H2D_DEVICE) fails the step on every rank instead
 * of leaving the others waiting in the collective (the emulated NCCL aborts a wait it can tell
 * would hang): the error is that rank's own, named; then, the fault gone, the next step runs and
 * matches TP 1. Needs a rank per device (TACHYON_EMU_DEVICES >= 2); skipped elsewhere. */
static void test_tp2_rank_failure(void **state) {
    model_weights_t *w;
    backend_t *one, *two;
    if (!open_fault_pair(&w, &one, &two)) return;
    err_t err = {{0}};
    assert_int_equal(backend_kv_reserve(one, TU_SEQS * TU_SEQ_BLOCKS, TU_BLOCK, &err), 0);
    assert_int_equal(backend_kv_reserve(two, TU_SEQS * TU_SEQ_BLOCKS, TU_BLOCK, &err), 0);
    static int32_t p0[96], p1[96];
    const int32_t *tok[TU_SEQS] = {p0, p1};
    const int from[TU_SEQS] = {0, 0}, n[TU_SEQS] = {tu_prompt(500, p0), tu_prompt(501, p1)};
    static tu_batch_t sb;
    tu_batch_build(&sb, tok, from, n, false);
    const int vocab = weights_config(w)->vocab_size;
    float *a = malloc((size_t)TU_SEQS * vocab * sizeof *a),
          *b = malloc((size_t)TU_SEQS * vocab * 4);
    for (int dev = 1; dev >= 0; dev--) { /* rank 1's failure, then rank 0's own */
        char d[4];
        snprintf(d, sizeof d, "%d", dev);
        setenv("TACHYON_EMU_FAIL_H2D_DEVICE", d, 1);
        err = (err_t){{0}};
        int rc = backend_forward(two, &sb.b, b, &err);
        unsetenv("TACHYON_EMU_FAIL_H2D_DEVICE");
        print_message("device %d refusing copies: forward %d: %s\n", dev, rc, err.msg);
        assert_int_equal(rc, -1);
        assert_non_null(strstr(err.msg, "cudaMemcpyAsync")); /* the cause, not the meeting */
        assert_int_equal(strstr(err.msg, "rank 1: ") != NULL, dev == 1);
    }
    assert_int_equal(backend_forward(one, &sb.b, a, &err), 0);
    assert_int_equal(backend_forward(two, &sb.b, b, &err), 0);
    double d = tu_max_diff(a, b, (size_t)TU_SEQS * vocab);
    print_message("the next step: max |logit TP 2 - TP 1| = %.4g\n", d);
    assert_true(d <= LOGIT_TOL_TP);
    /* and the failed steps left nothing behind: a TP 2 instance that never failed, the same bits */
    backend_t *fresh = open_backend_tp(&cuda_backend_ops, w, false, 2, false, NULL);
    assert_int_equal(backend_kv_reserve(fresh, TU_SEQS * TU_SEQ_BLOCKS, TU_BLOCK, &err), 0);
    assert_int_equal(backend_forward(fresh, &sb.b, a, &err), 0);
    assert_memory_equal(a, b, (size_t)TU_SEQS * vocab * sizeof *a);
    backend_destroy(fresh);
    free(a);
    free(b);
    backend_destroy(two);
    backend_destroy(one);
    weights_destroy(w);
}

/* What TP 2 does not run on this backend is refused at create, naming it. */
static void test_tp2_refusals(void **state) {
    static const struct {
        const char *fixture, *needle;
    } cases[] = {
        {"tiny-qwen3-fp8", "FP8 scale block"},     /* intermediate 320: 160 rows a rank */
        {"tiny-qwen3-moe-fp8", "FP8 scale block"}, /* experts' intermediate 64: 32 a rank */
        {"tiny-qwen3.5-fp8", "FP8 scale block"},   /* in_proj_qkv's q rows: 64 a rank */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_weights_t *w = tu_fixture_weights(cases[i].fixture);
        err_t err = {{0}};
        backend_t *be = open_backend_tp(&cuda_backend_ops, w, false, 2, false, &err);
        assert_null(be);
        print_message("%s at TP 2: %s\n", cases[i].fixture, err.msg);
        assert_non_null(strstr(err.msg, cases[i].needle));
        weights_destroy(w);
    }
    /* a machine with several GPUs but fewer than the ranks: refused, not run on one of them */
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count >= 2 && 2 * count <= COMM_MAX_RANKS) {
        model_weights_t *w = tu_fixture_weights("tiny-qwen3");
        err_t err = {{0}};
        assert_null(open_backend_tp(&cuda_backend_ops, w, false, 2 * count, false, &err));
        print_message("tiny-qwen3 at TP %d on %d GPUs: %s\n", 2 * count, count, err.msg);
        assert_non_null(strstr(err.msg, "a GPU per rank"));
        weights_destroy(w);
    }
}

int main(void) {
    if (!cuda_backend_available()) {
        printf("test_cuda_tp: no Hopper GPU, skipped\n");
        return 77;
    }
    backend_register(&cuda_backend_ops);
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tp2_bf16),          cmocka_unit_test(test_tp2_fp8),
        cmocka_unit_test(test_tp2_experts),       cmocka_unit_test(test_tp2_gated_deltanet),
        cmocka_unit_test(test_tp2_experts_ep),    cmocka_unit_test(test_tp2_refusals),
        cmocka_unit_test(test_tp2_rank_failure),  cmocka_unit_test(test_tp2_capture_failure),
        cmocka_unit_test(test_tp4_replicated_kv),
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (tu_test_selected(tests[i].name)) tests[n++] = tests[i];
    return _cmocka_run_group_tests("test_cuda_tp", tests, n, NULL, NULL);
}

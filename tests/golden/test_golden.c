/* The CPU backend against Hugging Face transformers (scripts/make-fixtures): logits of every
 * fixture prompt, all prompts prefilled together in one varlen batch, and greedy continuations
 * generated with chunked prefill and the paged decode path. Qwen3 dense (tiny-qwen3, -fp8) and
 * Qwen3-MoE (tiny-qwen3-moe, -fp8), and the MoE FP8 model under W8A8 emulation against
 * transformers with every FP8 linear's input quantized per token per 128 columns. The Qwen3.5
 * fixtures (scripts/make_fixtures_qwen35.py) too: each sequence with a recurrent-state slot,
 * prompts of up to 230 tokens, so the batched prefill runs the Gated DeltaNet's chunked form over
 * several 64-token chunks and the greedy runs continue the state chunk after chunk, then token by
 * token. Every batched prefill runs twice, on the vector fast paths (the default) and on the scalar
 * reference kernels (cpu_reference): their logits must be identical bit for bit.
 *
 * Tolerance: transformers ran in float32 on the same weights (BF16 values, or FP8 dequantized
 * exactly), so the only differences are f32 summation order in GEMMs (K <= 384), RMSNorm and
 * softmax: a few ulps per op, observed below 2e-5 on logits of magnitude ~10. We allow 1e-3
 * absolute, 50x that, while any real deviation (bf16 rounding of an activation, a RoPE or norm
 * slip) moves logits by 1e-2 or more. Greedy tokens must be identical: make-fixtures only keeps
 * prompts whose top-1/top-2 gaps stay above 1e-3 over all 32 steps.
 *
 * cpu-matmul-precision high and medium (the bf16 GEMMs, where the CPU has AVX512-BF16) against
 * the same goldens: high (activations to 16 bits) within the same 1e-3 and the same greedy
 * tokens (observed <= 5.4e-5); medium (activations rounded to bf16, as transformers at bfloat16
 * computes) within MEDIUM_TOLERANCE (observed <= 0.046: 2^-8 per activation through the layers),
 * its greedy tokens not checked (a bf16 rounding is larger than the gaps make-fixtures keeps). */
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
#include "cpu/cpu_bf16.h"
#include "engine_testutil.h"
#include "flags.h"
#include "testutil.h"
#include "weights.h"

#define LOGIT_TOLERANCE  1e-3
#define MEDIUM_TOLERANCE 1e-1
#define BLOCK            16

static int32_t *json_ids(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *ids = malloc((size_t)*n * sizeof *ids);
    for (int i = 0; i < *n; i++)
        ids[i] = cJSON_GetArrayItem(arr, i)->valueint;
    return ids;
}

/* --kv-cache-dtype of the backends make_backend makes, and a directory open_fixture reads the
 * weights from instead of the fixture's (NULL: the fixture's). */
static int kv_dtype = KV_DTYPE_AUTO;
static const char *weights_from;
static int precision = CPU_MM_HIGHEST; /* --cpu-matmul-precision of the fast backends */

static void make_backend(const model_weights_t *w, bool emulate, bool reference, backend_t **be) {
    err_t err = {{0}};
    backend_options_t opts = {.n_threads = 2,
                              .emulate_fp8_activations = emulate,
                              .cpu_reference = reference,
                              .cpu_matmul_precision = precision,
                              .kv_cache_dtype = kv_dtype};
    if (cpu_backend_ops.create(&opts, w, be, &err) < 0) fail_msg("%s", err.msg);
}

static void open_fixture(const char *fixture, bool emulate, model_weights_t **w, backend_t **be) {
    if (weights_from) {
        model_source_t src = {.model = weights_from, .format = LOAD_AUTO};
        *w = tu_weights(&src);
    } else {
        *w = tu_fixture_weights(fixture);
    }
    make_backend(*w, emulate, false, be);
}

/* Models with recurrent state: n slots, sequence s in slot n - 1 - s (so slot and sequence
 * numbers differ); NULL (no slots) for the others. The caller frees the array. */
static int32_t *state_slots(backend_t *be, const model_weights_t *w, int n) {
    if (!model_has_state(weights_config(w))) return NULL;
    err_t err = {{0}};
    if (be->ops->state_reserve(be, n, &err) < 0) fail_msg("%s", err.msg);
    int32_t *slots = malloc((size_t)n * sizeof *slots);
    assert_non_null(slots);
    for (int s = 0; s < n; s++)
        slots[s] = n - 1 - s;
    return slots;
}

/* Prefills every prompt of golden/<golden>.json in one batch and returns the largest
 * |logit - golden| over all its rows. */
static double batched_prefill_error(const char *fixture, const char *golden, bool emulate) {
    tu_golden_t g;
    tu_golden_load(golden, &g);
    model_weights_t *w;
    backend_t *be;
    open_fixture(fixture, emulate, &w, &be);
    assert_int_equal(weights_config(w)->vocab_size, g.vocab);

    const cJSON *prompts = cJSON_GetObjectItem(g.json, "prompts");
    int n_seqs = cJSON_GetArraySize(prompts);
    int n_tokens = 0, max_blocks = 0, n_logits = 0;
    for (int s = 0; s < n_seqs; s++) {
        const cJSON *p = cJSON_GetArrayItem(prompts, s);
        int len = cJSON_GetArraySize(cJSON_GetObjectItem(p, "ids"));
        n_tokens += len;
        int blocks = (len + BLOCK - 1) / BLOCK;
        if (blocks > max_blocks) max_blocks = blocks;
        n_logits += cJSON_GetArraySize(cJSON_GetObjectItem(p, "logit_positions"));
    }
    int32_t *tokens = malloc((size_t)n_tokens * sizeof *tokens);
    int32_t *positions = malloc((size_t)n_tokens * sizeof *positions);
    int64_t *slots = malloc((size_t)n_tokens * sizeof *slots);
    int32_t *qstart = malloc((size_t)(n_seqs + 1) * sizeof *qstart);
    int32_t *ctx = malloc((size_t)n_seqs * sizeof *ctx);
    int32_t *tables = calloc((size_t)(n_seqs * max_blocks), sizeof *tables);
    int32_t *rows = malloc((size_t)n_logits * sizeof *rows);
    int32_t *golden_rows = malloc((size_t)n_logits * sizeof *golden_rows);
    /* Blocks are handed out in reverse so that no sequence's blocks are contiguous in order. */
    int total_blocks = n_seqs * max_blocks, next_block = total_blocks - 1;
    int t = 0, r = 0;
    qstart[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        const cJSON *p = cJSON_GetArrayItem(prompts, s);
        int len;
        int32_t *ids = json_ids(cJSON_GetObjectItem(p, "ids"), &len);
        for (int b = 0; b < (len + BLOCK - 1) / BLOCK; b++)
            tables[s * max_blocks + b] = next_block--;
        for (int i = 0; i < len; i++, t++) {
            tokens[t] = ids[i];
            positions[t] = i;
            slots[t] = (int64_t)tables[s * max_blocks + i / BLOCK] * BLOCK + i % BLOCK;
        }
        qstart[s + 1] = t;
        ctx[s] = len;
        const cJSON *lp = cJSON_GetObjectItem(p, "logit_positions");
        int offset = cJSON_GetObjectItem(p, "logits_row_offset")->valueint;
        for (int j = 0; j < cJSON_GetArraySize(lp); j++, r++) {
            rows[r] = qstart[s] + cJSON_GetArrayItem(lp, j)->valueint;
            golden_rows[r] = offset + j;
        }
        free(ids);
    }
    err_t err = {{0}};
    if (backend_kv_reserve(be, total_blocks, BLOCK, &err) < 0) fail_msg("%s", err.msg);
    int32_t *sslots = state_slots(be, w, n_seqs);
    be_batch_t batch = {
        .n_tokens = n_tokens,
        .n_seqs = n_seqs,
        .token_ids = tokens,
        .positions = positions,
        .slot_mapping = slots,
        .query_start = qstart,
        .context_len = ctx,
        .block_tables = tables,
        .block_table_stride = max_blocks,
        .n_logits = n_logits,
        .logit_rows = rows,
        .state_slots = sslots,
    };
    assert_int_equal(backend_check_batch(&batch, total_blocks, BLOCK, &err), 0);
    float *logits = malloc((size_t)n_logits * g.vocab * sizeof *logits);
    if (backend_forward(be, &batch, logits, &err) < 0) fail_msg("%s", err.msg);

    /* the scalar reference kernels give the same bits (in the f32 precision) */
    backend_t *ref_be = NULL;
    if (precision != CPU_MM_HIGHEST) goto compare;
    make_backend(w, emulate, true, &ref_be);
    if (backend_kv_reserve(ref_be, total_blocks, BLOCK, &err) < 0) fail_msg("%s", err.msg);
    int32_t *ref_sslots = state_slots(ref_be, w, n_seqs);
    batch.state_slots = ref_sslots;
    float *ref_logits = malloc((size_t)n_logits * g.vocab * sizeof *ref_logits);
    if (backend_forward(ref_be, &batch, ref_logits, &err) < 0) fail_msg("%s", err.msg);
    if (memcmp(logits, ref_logits, (size_t)n_logits * g.vocab * sizeof *logits))
        fail_msg("%s: the fast paths' logits differ from the reference kernels'", fixture);
    free(ref_logits);
    free(ref_sslots);
    backend_destroy(ref_be);

compare:;
    double worst = 0;
    for (int i = 0; i < n_logits; i++) {
        assert_true((size_t)golden_rows[i] < g.n_rows);
        const float *ref = g.logits + (size_t)golden_rows[i] * g.vocab;
        for (int v = 0; v < g.vocab; v++) {
            double d = fabs((double)logits[(size_t)i * g.vocab + v] - ref[v]);
            if (!(d <= worst)) worst = d; /* NaN propagates as the worst */
        }
    }
    free(logits);
    free(tokens);
    free(positions);
    free(slots);
    free(qstart);
    free(ctx);
    free(tables);
    free(rows);
    free(golden_rows);
    free(sslots);
    backend_destroy(be);
    weights_destroy(w);
    tu_golden_free(&g);
    return worst;
}

/* Greedy generation of n_out tokens on the backend alone (no scheduler): the prompt in chunks
 * of BLOCK tokens (so later chunks attend to cached blocks), then one token per step. */
static void greedy(backend_t *be, int vocab, const int32_t *prompt, int n_prompt, int n_out,
                   const int32_t *sslot, int32_t *out, float *last_logits) {
    int total = n_prompt + n_out, n_blocks = (total + BLOCK - 1) / BLOCK;
    int32_t *blocks = malloc((size_t)n_blocks * sizeof *blocks);
    int32_t tokens[BLOCK], positions[BLOCK];
    int64_t slots[BLOCK];
    float *logits = malloc((size_t)vocab * sizeof *logits);
    assert_non_null(blocks);
    assert_non_null(logits);
    for (int b = 0; b < n_blocks; b++)
        blocks[b] = b;
    err_t err = {{0}};
    if (backend_kv_reserve(be, n_blocks, BLOCK, &err) < 0) fail_msg("%s", err.msg);
    int done = 0, produced = 0;
    while (produced < n_out) {
        int n_new = done < n_prompt ? (n_prompt - done < BLOCK ? n_prompt - done : BLOCK) : 1;
        for (int i = 0; i < n_new; i++) {
            tokens[i] = done < n_prompt ? prompt[done + i] : out[produced - 1];
            positions[i] = done + i;
            slots[i] = done + i; /* blocks in order: the slot is the position */
        }
        int32_t query_start[2] = {0, n_new}, context_len = done + n_new, logit_row = n_new - 1;
        bool wants_logits = context_len >= n_prompt;
        be_batch_t batch = {.n_tokens = n_new,
                            .n_seqs = 1,
                            .token_ids = tokens,
                            .positions = positions,
                            .slot_mapping = slots,
                            .query_start = query_start,
                            .context_len = &context_len,
                            .block_tables = blocks,
                            .block_table_stride = n_blocks,
                            .n_logits = wants_logits ? 1 : 0,
                            .logit_rows = &logit_row,
                            .state_slots = sslot};
        if (backend_forward(be, &batch, logits, &err) < 0) fail_msg("%s", err.msg);
        done += n_new;
        if (!wants_logits) continue;
        int best = 0;
        for (int v = 1; v < vocab; v++)
            if (logits[v] > logits[best]) best = v;
        out[produced++] = best;
    }
    memcpy(last_logits, logits, (size_t)vocab * sizeof *logits);
    free(blocks);
    free(logits);
}

static void check_greedy(const char *fixture, const char *golden, bool emulate) {
    tu_golden_t g;
    tu_golden_load(golden, &g);
    model_weights_t *w;
    backend_t *be;
    open_fixture(fixture, emulate, &w, &be);
    int32_t *sslots = state_slots(be, w, 1); /* each prompt starts at position 0: a zero state */
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(g.json, "prompts")) {
        int n_prompt, n_want;
        int32_t *prompt = json_ids(cJSON_GetObjectItem(p, "ids"), &n_prompt);
        int32_t *want = json_ids(cJSON_GetObjectItem(p, "greedy"), &n_want);
        int32_t *got = malloc((size_t)(n_want > 0 ? n_want : 1) * sizeof *got);
        assert_non_null(got);
        float *last = malloc((size_t)g.vocab * sizeof *last);
        assert_non_null(last);
        greedy(be, weights_config(w)->vocab_size, prompt, n_prompt, n_want, sslots, got, last);
        for (int i = 0; i < n_want; i++)
            if (got[i] != want[i])
                fail_msg("%s: prompt of %d tokens: greedy token %d is %d, transformers gave %d",
                         golden, n_prompt, i, got[i], want[i]);
        /* the Qwen3.5 goldens: the logits of the last greedy step, reached here by decoding
         * token by token (the recurrent form), by transformers in one forward */
        const cJSON *lr = cJSON_GetObjectItem(p, "greedy_last_logits_row");
        if (lr) {
            assert_true((size_t)lr->valueint < g.n_rows);
            const float *ref = g.logits + (size_t)lr->valueint * g.vocab;
            double worst = 0;
            for (int v = 0; v < g.vocab; v++) {
                double d = fabs((double)last[v] - ref[v]);
                if (!(d <= worst)) worst = d;
            }
            print_message("%s: prompt of %d tokens: last greedy step max |logit - transformers| = "
                          "%.3g\n",
                          golden, n_prompt, worst);
            assert_true(worst <= LOGIT_TOLERANCE);
        }
        free(last);
        free(got);
        free(prompt);
        free(want);
    }
    free(sslots);
    backend_destroy(be);
    weights_destroy(w);
    tu_golden_free(&g);
}

/* Every fixture without W8A8 (whose quantization amplifies any rounding change) at high, then
 * medium precision. */
static void test_bf16_kernel_precisions(void **state) {
    if (!cpu_bf16_supported()) skip();
    static const char *const fixtures[] = {"tiny-qwen3",     "tiny-qwen3-fp8",
                                           "tiny-qwen3-moe", "tiny-qwen3-moe-fp8",
                                           "tiny-qwen3.5",   "tiny-qwen3.5-fp8"};
    for (int p = CPU_MM_HIGH; p <= CPU_MM_MEDIUM; p++) {
        precision = p;
        for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
            double e = batched_prefill_error(fixtures[i], fixtures[i], false);
            print_message("%s, precision %s: max |logit - transformers| = %.3g\n", fixtures[i],
                          p == CPU_MM_HIGH ? "high" : "medium", e);
            assert_true(e <= (p == CPU_MM_HIGH ? LOGIT_TOLERANCE : MEDIUM_TOLERANCE));
            if (p == CPU_MM_HIGH) check_greedy(fixtures[i], fixtures[i], false);
        }
    }
    precision = CPU_MM_HIGHEST;
}

static void test_bf16_logits(void **state) {
    double e = batched_prefill_error("tiny-qwen3", "tiny-qwen3", false);
    print_message("tiny-qwen3: max |logit - transformers| = %.3g\n", e);
    assert_true(e <= LOGIT_TOLERANCE);
}

static void test_fp8_logits(void **state) {
    double e = batched_prefill_error("tiny-qwen3-fp8", "tiny-qwen3-fp8", false);
    print_message("tiny-qwen3-fp8: max |logit - transformers| = %.3g\n", e);
    assert_true(e <= LOGIT_TOLERANCE);
}

/* W8A8 emulation quantizes activations (e4m3 has 3 mantissa bits): logits move away from the
 * weight-only reference, but stay close. */
static void test_fp8_w8a8_emulation(void **state) {
    double e = batched_prefill_error("tiny-qwen3-fp8", "tiny-qwen3-fp8", true);
    print_message("tiny-qwen3-fp8 W8A8: max |logit - transformers| = %.3g\n", e);
    assert_true(e > LOGIT_TOLERANCE);
    assert_true(e < 1.0);
}

static void test_bf16_greedy(void **state) {
    check_greedy("tiny-qwen3", "tiny-qwen3", false);
}

static void test_fp8_greedy(void **state) {
    check_greedy("tiny-qwen3-fp8", "tiny-qwen3-fp8", false);
}

static void test_moe_bf16(void **state) {
    double e = batched_prefill_error("tiny-qwen3-moe", "tiny-qwen3-moe", false);
    print_message("tiny-qwen3-moe: max |logit - transformers| = %.3g\n", e);
    assert_true(e <= LOGIT_TOLERANCE);
    check_greedy("tiny-qwen3-moe", "tiny-qwen3-moe", false);
}

static void test_moe_fp8(void **state) {
    double e = batched_prefill_error("tiny-qwen3-moe-fp8", "tiny-qwen3-moe-fp8", false);
    print_message("tiny-qwen3-moe-fp8: max |logit - transformers| = %.3g\n", e);
    assert_true(e <= LOGIT_TOLERANCE);
    check_greedy("tiny-qwen3-moe-fp8", "tiny-qwen3-moe-fp8", false);
    /* how far W8A8 alone moves this model's logits (the scale of the CUDA backend's FP8
     * differences, tests/gpu/test_cuda_backend.c) */
    e = batched_prefill_error("tiny-qwen3-moe-fp8", "tiny-qwen3-moe-fp8", true);
    print_message("tiny-qwen3-moe-fp8 W8A8: max |logit - transformers weight-only| = %.3g\n", e);
    assert_true(e > LOGIT_TOLERANCE && e < 2.0);
}

/* W8A8 emulation against transformers with the same quantization (per token, per 128 columns,
 * e4m3), on the 1- and 7-token prompts: the quantizer is a step function, so a last-ulp
 * difference in a GEMM input can move a value to the next e4m3 step (1/16 relative) and the
 * logits by up to W8A8_TOLERANCE; the reference's greedy margins are >= 0.05, above that. */
#define W8A8_TOLERANCE 0.02
static void test_moe_fp8_w8a8(void **state) {
    double e = batched_prefill_error("tiny-qwen3-moe-fp8", "tiny-qwen3-moe-fp8.w8a8", true);
    print_message("tiny-qwen3-moe-fp8 W8A8: max |logit - transformers W8A8| = %.3g\n", e);
    assert_true(e <= W8A8_TOLERANCE);
    check_greedy("tiny-qwen3-moe-fp8", "tiny-qwen3-moe-fp8.w8a8", true);
}

static void test_qwen35_bf16_logits(void **state) {
    double e = batched_prefill_error("tiny-qwen3.5", "tiny-qwen3.5", false);
    print_message("tiny-qwen3.5: max |logit - transformers| = %.3g\n", e);
    assert_true(e <= LOGIT_TOLERANCE);
}

static void test_qwen35_fp8_logits(void **state) {
    double e = batched_prefill_error("tiny-qwen3.5-fp8", "tiny-qwen3.5-fp8", false);
    print_message("tiny-qwen3.5-fp8: max |logit - transformers| = %.3g\n", e);
    assert_true(e <= LOGIT_TOLERANCE);
}

static void test_qwen35_bf16_greedy(void **state) {
    check_greedy("tiny-qwen3.5", "tiny-qwen3.5", false);
}

static void test_qwen35_fp8_greedy(void **state) {
    check_greedy("tiny-qwen3.5-fp8", "tiny-qwen3.5-fp8", false);
}

/* --kv-cache-dtype fp8 against transformers' unquantized attention: K and V rounded through e4m3
 * at vLLM's default scales (1.0), at scales taken from the checkpoint (weights_kv_scales) suited
 * to the fixture's values, and at a K scale so small that K saturates at +-448 (the scales are
 * applied: the error jumps). */
static double fp8_kv_error(const char *fixture, float k_scale, float v_scale) {
    char *dir = tu_fixture_with_kv_scales(fixture, k_scale, v_scale);
    weights_from = dir;
    kv_dtype = KV_DTYPE_FP8;
    double e = batched_prefill_error(fixture, fixture, false);
    kv_dtype = KV_DTYPE_AUTO;
    weights_from = NULL;
    tu_rmrf(dir);
    free(dir);
    print_message("%s, fp8 KV cache at k/v scales %g / %g: max |logit - transformers| = %.3g\n",
                  fixture, k_scale, v_scale, e);
    return e;
}

/* k_amax, v_amax: a little above the largest |K| (after RoPE) and |V| transformers computes on
 * the golden prompts in any layer (measured with forward hooks), so that amax / 448 is the
 * per-tensor scale a calibration (llm-compressor's) would store. Every error stays within the
 * FP8 tolerance of the cuda backend's tests (LOGIT_TOL_FP8 there, 0.5); a K scale that saturates
 * K must move the logits by far more (the scales are applied, to K and not only V). */
static void fp8_kv_scales(const char *fixture, float k_amax, float v_amax) {
    double one = fp8_kv_error(fixture, 1.0f, 1.0f);
    double cal = fp8_kv_error(fixture, k_amax / 448.0f, v_amax / 448.0f);
    double sat = fp8_kv_error(fixture, k_amax / 448.0f / 64.0f, v_amax / 448.0f);
    assert_true(one <= 0.5 && cal <= 0.5);
    assert_true(sat > 5 * (one > cal ? one : cal));
}

static void test_fp8_kv_scales(void **state) {
    fp8_kv_scales("tiny-qwen3", 10.0f, 8.5f); /* |K| <= 7.0, |V| <= 7.9 */
}

static void test_qwen35_fp8_kv_scales(void **state) {
    fp8_kv_scales("tiny-qwen3.5", 5.0f, 2.5f); /* |K| <= 3.4, |V| <= 2.3 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_logits),
        cmocka_unit_test(test_fp8_logits),
        cmocka_unit_test(test_fp8_w8a8_emulation),
        cmocka_unit_test(test_bf16_greedy),
        cmocka_unit_test(test_fp8_greedy),
        cmocka_unit_test(test_moe_bf16),
        cmocka_unit_test(test_moe_fp8),
        cmocka_unit_test(test_moe_fp8_w8a8),
        cmocka_unit_test(test_qwen35_bf16_logits),
        cmocka_unit_test(test_qwen35_fp8_logits),
        cmocka_unit_test(test_qwen35_bf16_greedy),
        cmocka_unit_test(test_qwen35_fp8_greedy),
        cmocka_unit_test(test_fp8_kv_scales),
        cmocka_unit_test(test_qwen35_fp8_kv_scales),
        cmocka_unit_test(test_bf16_kernel_precisions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

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
 * - tensor parallel 2 on one device (the single-device communicator): the same logits as TP 1
 *   within LOGIT_TOL_TP and the same greedy tokens, through the backend and through the engine
 *   (test_tp2_*): dense BF16 and FP8, Qwen3-MoE, Qwen3.5; what TP cannot shard is refused,
 *   naming it.
 * - dummy qwen3-0.6b (FP8 and BF16) generated on the device equals weights_dummy's host values
 *   on sampled elements, read back through the fused / padded device layout; so do the experts
 *   of a dummy Qwen3-MoE (the MoE fixture's config).
 *
 * Tolerances (logits of magnitude 4..12 on these fixtures): the CPU computes in f32 throughout;
 * the GPU rounds BF16 GEMM inputs, the attention inputs and output and the KV cache to bf16
 * (relative 2^-9) and sums in other orders. Measured under the host emulation
 * (tests/gpu/emu_backend/run: the same kernels, exact f32 arithmetic): BF16 max 0.03-0.05, FP8
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

#define LOGIT_TOL_BF16 0.1
#define LOGIT_TOL_FP8  0.5
/* tiny-qwen3-moe-fp8 is twice as sensitive to W8A8 as tiny-qwen3-fp8 (4 layers, two quantized
 * inputs per expert: W8A8 alone moves its logits by 0.556 against 0.313, test_golden), and the
 * e4m3 step flips that bf16 rounding causes upstream scale with it: measured 0.65 under the
 * host emulation with every (token, expert) routing equal */
#define LOGIT_TOL_FP8_MOE 1.0
/* MoE: where the two backends route a token to different experts (the router's k-th and
 * (k+1)-th logits within rounding of each other) the logits of that token's sequence may move by
 * a swapped expert's share; such rows get this tolerance, and such flips must stay rare */
#define LOGIT_TOL_FLIP 2.0
#define MAX_FLIP_SHARE 0.05
#define BLOCK          16
/* TP 2 against TP 1, both on the cuda backend: the row-parallel layers add two f32 partial sums
 * where TP 1 has one GEMM's sum (f32 ulps), which a later bf16 (or e4m3) rounding of a GEMM input
 * can turn into one step of that format. Measured under the host emulation: 3.1e-4 on tiny-qwen3
 * (BF16), 0.026 on the "tiny" dummy preset in FP8 (W8A8: an e4m3 step is 1/16 relative); the
 * tolerances leave room for cuBLASLt's other summation orders at K and K / 2 on the device. */
#define LOGIT_TOL_TP     0.05
#define LOGIT_TOL_TP_FP8 0.25

// ---------------------------------------------------------------------------------------------
// Helpers

static cJSON *golden(const char *fixture) {
    char name[256];
    snprintf(name, sizeof name, "golden/%s.json", fixture);
    char *text = tu_read(tu_fixture(name), NULL);
    assert_non_null(text);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

static int32_t *json_ids(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *ids = malloc((size_t)*n * sizeof *ids);
    for (int i = 0; i < *n; i++)
        ids[i] = cJSON_GetArrayItem(arr, i)->valueint;
    return ids;
}

/* The backend at tensor parallel tp (1: none); NULL with the message in *err when create
 * refuses and err is not NULL. */
/* --kv-cache-dtype of the backends the tests open (test_fp8_kv_against_cpu sets fp8). */
static int kv_dtype = KV_DTYPE_AUTO;

static backend_t *open_backend_tp(const backend_ops_t *ops, model_weights_t *w, bool emulate,
                                  int tp, bool ep, err_t *err) {
    backend_options_t o = {.n_threads = 2,
                           .kv_cache_dtype = kv_dtype,
                           .expert_parallel = ep,
                           .emulate_fp8_activations = emulate,
                           .gpu_memory_utilization = 0.5,
                           .max_num_batched_tokens = 2048,
                           .max_num_seqs = 64,
                           .cuda_graphs = true,
                           .tensor_parallel_size = tp};
    backend_t *be;
    err_t e = {{0}};
    if (ops->create(&o, w, &be, &e) < 0) {
        if (!err) fail_msg("%s: %s", ops->name, e.msg);
        *err = e;
        return NULL;
    }
    return be;
}

static backend_t *open_backend(const backend_ops_t *ops, model_weights_t *w, bool emulate) {
    return open_backend_tp(ops, w, emulate, 1, false, NULL);
}

/* Models with recurrent state: n slots on be, sequence s in slot n - 1 - s; NULL otherwise. The
 * caller frees the array. */
static int32_t *state_slots(backend_t *be, const model_weights_t *w, int n) {
    if (!model_has_state(weights_config(w))) return NULL;
    err_t err = {{0}};
    if (be->ops->state_reserve(be, n, &err) < 0) fail_msg("%s: %s", be->ops->name, err.msg);
    int32_t *slots = malloc((size_t)n * sizeof *slots);
    for (int s = 0; s < n; s++)
        slots[s] = n - 1 - s;
    return slots;
}

/* The MoE routing of both backends for the tokens of one forward (backend_ops_t.trace_routing):
 * buffers [n_layers][cap][k], and the flips counted so far. NULL for a dense model. */
typedef struct trace {
    const model_config_t *cfg;
    int cap;
    int32_t *cpu, *gpu;
    int routings, flips; /* (MoE layer, token) pairs compared, and those that differ */
} trace_t;

static trace_t *trace_new(const model_config_t *cfg, int cap) {
    if (cfg->n_experts == 0) return NULL;
    trace_t *t = calloc(1, sizeof *t);
    size_t n = (size_t)cfg->n_layers * (size_t)cap * (size_t)cfg->n_experts_per_tok;
    *t = (trace_t){cfg, cap, calloc(n, 4), calloc(n, 4), 0, 0};
    return t;
}

static void trace_free(trace_t *t) {
    if (!t) return;
    free(t->cpu);
    free(t->gpu);
    free(t);
}

static void trace_on(trace_t *t, backend_t *cpu, backend_t *gpu) {
    cpu->ops->trace_routing(cpu, t ? t->cpu : NULL);
    gpu->ops->trace_routing(gpu, t ? t->gpu : NULL);
}

/* After a traced forward of T tokens: flipped[i] (T entries) whether token i went to other
 * experts on the two backends in any MoE layer (as sets: the order of equal choices does not
 * matter). Returns how many tokens flipped. */
static int trace_compare(trace_t *t, int T, bool *flipped) {
    const model_config_t *c = t->cfg;
    int k = c->n_experts_per_tok, any = 0;
    for (int i = 0; i < T; i++)
        flipped[i] = false;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer[l].mlp != MLP_MOE) continue;
        for (int i = 0; i < T; i++) {
            const int32_t *a = t->cpu + ((size_t)l * T + i) * k,
                          *b = t->gpu + ((size_t)l * T + i) * k;
            bool same = true;
            for (int j = 0; j < k; j++) {
                bool found = false;
                for (int m = 0; m < k; m++)
                    found |= a[j] == b[m];
                same &= found;
            }
            t->routings++;
            if (!same) {
                t->flips++;
                any += !flipped[i];
                flipped[i] = true;
            }
        }
    }
    return any;
}

/* All golden prompts prefilled in one batch on `be`; returns logits [n_logits, vocab]. */
static float *batched_prefill(backend_t *be, const model_weights_t *w, const cJSON *g, int vocab,
                              int *n_out) {
    const cJSON *prompts = cJSON_GetObjectItem(g, "prompts");
    int n_seqs = cJSON_GetArraySize(prompts), n_tokens = 0, max_blocks = 0;
    for (int s = 0; s < n_seqs; s++) {
        int len = cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, s), "ids"));
        n_tokens += len;
        if ((len + BLOCK - 1) / BLOCK > max_blocks) max_blocks = (len + BLOCK - 1) / BLOCK;
    }
    int32_t *tokens = malloc((size_t)n_tokens * 4), *pos = malloc((size_t)n_tokens * 4);
    int64_t *slots = malloc((size_t)n_tokens * 8);
    int32_t *qs = malloc((size_t)(n_seqs + 1) * 4), *ctx = malloc((size_t)n_seqs * 4);
    int32_t *tables = calloc((size_t)(n_seqs * max_blocks), 4), *rows = malloc((size_t)n_seqs * 4);
    int total = n_seqs * max_blocks, next = total - 1, t = 0;
    qs[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        int len;
        int32_t *ids = json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, s), "ids"), &len);
        for (int b = 0; b < (len + BLOCK - 1) / BLOCK; b++)
            tables[s * max_blocks + b] = next--;
        for (int i = 0; i < len; i++, t++) {
            tokens[t] = ids[i];
            pos[t] = i;
            slots[t] = (int64_t)tables[s * max_blocks + i / BLOCK] * BLOCK + i % BLOCK;
        }
        qs[s + 1] = t;
        ctx[s] = len;
        rows[s] = t - 1;
        free(ids);
    }
    err_t err = {{0}};
    if (backend_kv_reserve(be, total, BLOCK, &err) < 0) fail_msg("%s", err.msg);
    int32_t *sslots = state_slots(be, w, n_seqs);
    be_batch_t b = {.n_tokens = n_tokens,
                    .n_seqs = n_seqs,
                    .token_ids = tokens,
                    .positions = pos,
                    .slot_mapping = slots,
                    .query_start = qs,
                    .context_len = ctx,
                    .block_tables = tables,
                    .block_table_stride = max_blocks,
                    .n_logits = n_seqs,
                    .logit_rows = rows,
                    .state_slots = sslots};
    float *logits = malloc((size_t)n_seqs * vocab * sizeof *logits);
    /* poison: every row must be written */
    for (size_t i = 0; i < (size_t)n_seqs * vocab; i++)
        logits[i] = NAN;
    if (backend_forward(be, &b, logits, &err) < 0) fail_msg("%s", err.msg);
    free(tokens);
    free(pos);
    free(slots);
    free(qs);
    free(ctx);
    free(tables);
    free(rows);
    free(sslots);
    *n_out = n_seqs;
    return logits;
}

/* Greedy generation on both backends in lockstep, the CPU's token fed to both: chunked prefill
 * (BLOCK tokens a step, over the cached prefix), then n_gen decode steps. At every step with
 * logits the two rows must be within tol, and their argmax equal unless the CPU's top-2 gap is
 * itself within 2 * tol (a near tie that numeric noise may flip; counted in *ties). Returns the
 * largest logit difference seen. */
static double lockstep(backend_t *cpu, backend_t *gpu, const model_weights_t *w,
                       const int32_t *prompt, int n, int n_gen, double tol, const char *what,
                       int *ties, trace_t *tr, double *flip_worst) {
    int vocab = weights_config(w)->vocab_size;
    bool flipped = false; /* a token of the sequence so far was routed differently */
    int total = n + n_gen, nb = (total + BLOCK - 1) / BLOCK;
    int32_t *tokens = malloc((size_t)total * 4), *table = malloc((size_t)nb * 4);
    float *lc = malloc((size_t)vocab * 4), *lg = malloc((size_t)vocab * 4);
    memcpy(tokens, prompt, (size_t)n * 4);
    for (int b = 0; b < nb; b++)
        table[b] = nb - 1 - b; /* not in order */
    err_t err = {{0}};
    if (backend_kv_reserve(cpu, nb, BLOCK, &err) < 0 ||
        backend_kv_reserve(gpu, nb, BLOCK, &err) < 0)
        fail_msg("%s", err.msg);
    int32_t *sc = state_slots(cpu, w, 1), *sg = state_slots(gpu, w, 1);
    double worst = 0;
    int done = 0, len = n;
    while (len < total) {
        int chunk = done < n ? (n - done < BLOCK ? n - done : BLOCK) : 1;
        int32_t pos[BLOCK], qs[2] = {0, chunk}, ctx[1] = {done + chunk}, row[1] = {chunk - 1};
        int64_t slots[BLOCK];
        for (int i = 0; i < chunk; i++) {
            pos[i] = done + i;
            slots[i] = (int64_t)table[(done + i) / BLOCK] * BLOCK + (done + i) % BLOCK;
        }
        bool last = done + chunk == len;
        be_batch_t b = {.n_tokens = chunk,
                        .n_seqs = 1,
                        .token_ids = tokens + done,
                        .positions = pos,
                        .slot_mapping = slots,
                        .query_start = qs,
                        .context_len = ctx,
                        .block_tables = table,
                        .block_table_stride = nb,
                        .n_logits = last ? 1 : 0,
                        .logit_rows = row};
        for (int v = 0; v < vocab; v++)
            lg[v] = NAN;
        trace_on(tr, cpu, gpu);
        b.state_slots = sc;
        if (backend_forward(cpu, &b, lc, &err) < 0) fail_msg("%s: %s", what, err.msg);
        b.state_slots = sg;
        if (backend_forward(gpu, &b, lg, &err) < 0) fail_msg("%s: %s", what, err.msg);
        bool f[BLOCK];
        if (tr && trace_compare(tr, chunk, f)) flipped = true;
        done += chunk;
        if (!last) continue;
        double *into = flipped ? flip_worst : &worst, step_tol = flipped ? LOGIT_TOL_FLIP : tol;
        int ac = 0, ag = 0;
        for (int v = 0; v < vocab; v++) {
            double d = fabs((double)lc[v] - lg[v]);
            if (!(d <= *into)) *into = d;
            if (lc[v] > lc[ac]) ac = v;
            if (lg[v] > lg[ag]) ag = v;
        }
        if (ag != ac) {
            float second = -INFINITY;
            for (int v = 0; v < vocab; v++)
                if (v != ac && lc[v] > second) second = lc[v];
            if (lc[ac] - second > 2 * step_tol)
                fail_msg("%s: token %d: cuda picks %d, cpu %d with a margin of %.4g (> %.3g)", what,
                         len - n, ag, ac, lc[ac] - second, 2 * step_tol);
            print_message("%s: token %d: near tie, cuda picks %d, cpu %d (cpu margin %.4g)\n", what,
                          len - n, ag, ac, lc[ac] - second);
            (*ties)++;
        }
        tokens[len++] = ac;
    }
    trace_on(NULL, cpu, gpu);
    free(tokens);
    free(table);
    free(lc);
    free(lg);
    free(sc);
    free(sg);
    return worst;
}

/* The cuda backend against the CPU one on a fixture: batched-prefill logits within tol, greedy
 * continuations identical. For an MoE model, a sequence with a token the backends routed to
 * different experts (a near tie of the router that rounding decides) is held to LOGIT_TOL_FLIP
 * from that token on, and such routings must be under MAX_FLIP_SHARE of all. */
static void compare_fixture(const char *fixture, bool fp8, double tol) {
    cJSON *g = golden(fixture);
    model_weights_t *w = tu_fixture_weights(fixture);
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

/* Reads a stream to its end: the tokens of choice 0. */
static int collect(engine_stream_t *s, int32_t *out, int cap) {
    engine_event_t ev;
    int rc, n = 0;
    while ((rc = engine_stream_wait(s, &ev, 120000)) > 0) {
        for (int i = 0; i < ev.n_tokens && n < cap; i++)
            out[n++] = ev.token_ids[i];
        engine_event_clear(&ev);
    }
    assert_int_equal(rc, -1);
    engine_stream_release(s);
    return n;
}

static engine_t *open_engine(const char *const *flags) {
    return tu_open_engine(tu_fixture("tiny-qwen3"), "cuda", flags);
}

/* fixture: 3 layers of 2 KV heads x 128, as the pool size below assumes */
static void batch_invariance(const char *fixture) {
    static int32_t prompts[N_REQ][96], alone[N_REQ][N_GEN], together[N_REQ][N_GEN];
    int len[N_REQ];
    for (int i = 0; i < N_REQ; i++)
        len[i] = tu_prompt(i, prompts[i]);
    sampling_params_t p = tu_greedy(N_GEN);
    const char *const base[] = {
        "max-model-len", "256", "gpu-memory-utilization", "0.3", "enable-prefix-caching",
        "false",         NULL};
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
#ifdef OPS_HOST_EMULATION
            /* the host emulation has no graph capture (the backend falls back to graphs off), so
             * there the graphs-off variant would repeat the graphs-on one */
            if (variant == 1) continue;
#endif
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
            static stats_snapshot_t snap;
            engine_stats(e, &snap);
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
    const char *const base[] = {"max-model-len", "128", "gpu-memory-utilization", "0.3", NULL};
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
            fail_msg("%s: row %d: TP 2 picks %d, TP 1 %d with a margin of %.4g", what, r, ab, aa,
                     a[aa] - second);
        print_message("%s: row %d: near tie, TP 2 picks %d, TP 1 %d (margin %.4g)\n", what, r, ab,
                      aa, a[aa] - second);
        (*ties)++;
    }
    return worst;
}

/* TP 2 against TP 1 on the cuda backend over weights w: the first n_prompts golden prompts of
 * `fixture` (or, for NULL, n_prompts tu_prompt prompts) prefilled in one batch, logits within
 * tol; then n_lock of them generated greedily in lockstep for 8 tokens (chunked prefill, paged
 * decode). */
static void tp2_against_tp1(model_weights_t *w, const char *fixture, bool fp8, bool ep, double tol,
                            int n_prompts, int n_lock) {
    const char *name = fixture ? fixture : "dummy";
    backend_t *one = open_backend_tp(&cuda_backend_ops, w, false, 1, false, NULL);
    backend_t *two = open_backend_tp(&cuda_backend_ops, w, false, 2, ep, NULL);
    assert_int_equal(cuda_backend_uses_fp8(one), fp8);
    assert_int_equal(cuda_backend_uses_fp8(two), fp8);
    char desc[512];
    two->ops->describe(two, desc, sizeof desc);
    print_message("%s: %s\n", name, desc);
    assert_non_null(strstr(desc, "tensor parallel 2"));
    if (ep) assert_non_null(strstr(desc, "expert parallel"));
    assert_non_null(strstr(desc, "graphs off")); /* asked for, off at TP > 1 */
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
    print_message("%s: batched prefill of %d prompts: max |logit TP 2 - TP 1| = %.4g (tolerance "
                  "%.3g), %d near ties\n",
                  name, n, worst, tol, ties);
    assert_true(worst <= tol);
    free(a);
    free(b);
    const cJSON *p;
    int k = 0;
    double step_worst = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(g, "prompts")) {
        if (k++ >= n_lock) break;
        int n_prompt;
        int32_t *prompt = json_ids(cJSON_GetObjectItem(p, "ids"), &n_prompt);
        char what[64];
        snprintf(what, sizeof what, "%s TP 2, prompt of %d tokens", name, n_prompt);
        double d = lockstep(one, two, w, prompt, n_prompt, 8, tol, what, &ties, NULL, NULL);
        if (d > step_worst) step_worst = d;
        free(prompt);
    }
    print_message("%s: %d prompts x 8 greedy steps in lockstep: max |logit TP 2 - TP 1| = %.4g, "
                  "%d near ties in all\n",
                  name, n_lock, step_worst, ties);
    assert_true(step_worst <= tol);
    cJSON_Delete(g);
    backend_destroy(two);
    backend_destroy(one);
}

/* tiny-qwen3 (BF16): the backend's logits, then the engine: 4 requests of 8 tokens batched
 * under a budget of 16 tokens (prefills in chunks, mixed with decodes), the same tokens at TP 2
 * as at TP 1. */
static void test_tp2_bf16(void **state) {
    model_weights_t *w = tu_fixture_weights("tiny-qwen3");
    tp2_against_tp1(w, "tiny-qwen3", false, false, LOGIT_TOL_TP, 5, 2);
    weights_destroy(w);

    enum { N = 4, GEN = 8 };
    static int32_t prompts[N][96], out[2][N][GEN];
    int len[N];
    for (int i = 0; i < N; i++)
        len[i] = tu_prompt(400 + i, prompts[i]);
    sampling_params_t p = tu_greedy(GEN);
    for (int tp = 1; tp <= 2; tp++) {
        const char *const flags[] = {"max-model-len",
                                     "256",
                                     "gpu-memory-utilization",
                                     "0.3",
                                     "max-num-batched-tokens",
                                     "16",
                                     "tensor-parallel-size",
                                     tp == 1 ? "1" : "2",
                                     NULL};
        engine_t *e = open_engine(flags);
        engine_stream_t *st[N];
        for (int i = 0; i < N; i++)
            st[i] = tu_submit(e, prompts[i], len[i], &p);
        for (int i = 0; i < N; i++)
            assert_int_equal(collect(st[i], out[tp - 1][i], GEN), GEN);
        engine_close(e);
    }
    for (int i = 0; i < N; i++)
        for (int k = 0; k < GEN; k++)
            if (out[1][i][k] != out[0][i][k])
                fail_msg("engine: request %d token %d: %d at TP 2, %d at TP 1", i, k, out[1][i][k],
                         out[0][i][k]);
    print_message("engine, tiny-qwen3: %d requests x %d tokens, budget 16: TP 2 tokens equal TP "
                  "1's\n",
                  N, GEN);
}

/* FP8 at TP 2: the "tiny" dummy preset (hidden 256, intermediate 768: every shard on 128-blocks,
 * so the W8A8 path runs on each rank), generated on the device through the shard views. */
static void test_tp2_fp8(void **state) {
    model_source_t src = {
        .model = "tiny", .format = LOAD_DUMMY, .dummy_fp8 = true, .seed = 77, .lazy_dummy = true};
    model_weights_t *w = tu_weights(&src);
    tp2_against_tp1(w, NULL, true, false, LOGIT_TOL_TP_FP8, 4, 2);
    weights_destroy(w);
}

/* Qwen3-MoE at TP 2 (tiny-qwen3-moe, BF16): every expert sliced (moe_intermediate_size 64, 32
 * a rank), the router replicated, the experts' outputs all-reduced. (Named without "moe": the
 * tp group runs it, not the moe one.) */
static void test_tp2_experts(void **state) {
    model_weights_t *w = tu_fixture_weights("tiny-qwen3-moe");
    tp2_against_tp1(w, "tiny-qwen3-moe", false, false, LOGIT_TOL_TP, 5, 2);
    weights_destroy(w);
}

/* Expert parallel at TP 2: each rank holds half the experts whole, groups and computes only the
 * pairs routed to them (the others' rows left out of its sums), and the all-reduce adds the
 * ranks' parts. tiny-qwen3-moe (BF16, 8 experts, top 2), and block FP8 on dummy weights of a
 * config whose every shard keeps to 128-blocks (hidden 256, 8 experts of 128, top 2, a dense
 * layer of 256) so that the W8A8 grouped GEMM runs on a range of experts (4 a rank). */
static void test_tp2_experts_ep(void **state) {
    model_weights_t *w = tu_fixture_weights("tiny-qwen3-moe");
    tp2_against_tp1(w, "tiny-qwen3-moe", false, true, LOGIT_TOL_TP, 5, 2);
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
    tp2_against_tp1(w, NULL, true, true, LOGIT_TOL_TP_FP8, 2, 2);
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
    tp2_against_tp1(w, "tiny-qwen3.5", false, false, LOGIT_TOL_TP, 3, 2);
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
        cmocka_unit_test(test_engine_spec_ngram),
        cmocka_unit_test(test_engine_spec_ngram_qwen35),
        cmocka_unit_test(test_engine_fp8_kv),
        cmocka_unit_test(test_fp8_kv_against_cpu),
        cmocka_unit_test(test_tp2_bf16),
        cmocka_unit_test(test_tp2_fp8),
        cmocka_unit_test(test_tp2_experts),
        cmocka_unit_test(test_tp2_gated_deltanet),
        cmocka_unit_test(test_tp2_experts_ep),
        cmocka_unit_test(test_tp2_refusals),
    };
    /* TEST_FILTER / TEST_SKIP: comma-separated patterns of the tests to run / to leave out, e.g.
     * TEST_FILTER='*moe*' (the emulated run takes minutes; ctest runs it in three groups) */
    size_t n = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (tu_test_selected(tests[i].name)) tests[n++] = tests[i];
    return _cmocka_run_group_tests("test_cuda_backend", tests, n, NULL, NULL);
}

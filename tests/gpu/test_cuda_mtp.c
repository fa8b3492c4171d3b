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
 * - with graphs on (the head's passes of one token a sequence replayed from a graph): the same
 *   logits bit for bit in the host emulation;
 * - the draft chain (backend_ops_t.mtp_chain, 4 passes in one call, one sequence stopping early)
 *   on the CPU, on the cuda backend eagerly and from a graph, against mtp_forward pass by pass:
 *   the same drafts, and the same logits for a pass after it (random weights, whose drafts
 *   change from pass to pass);
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
#include "cb_internal.h"
#include "cuda_backend.h"
#include "cuda_compare.h"
#include "engine.h"
#include "engine_testutil.h"
#include "testutil.h"
#include "weights.h"

#define LOGIT_TOL_BF16 0.1
#define LOGIT_TOL_FP8  0.5

static backend_t *open_be(const backend_ops_t *ops, model_weights_t *w, bool emulate, bool mtp,
                          bool graphs) {
    backend_options_t o = {.n_threads = 2,
                           .emulate_fp8_activations = emulate,
                           .gpu_memory_utilization = 0.5,
                           .max_num_batched_tokens = 1024,
                           .max_num_seqs = 16,
                           .mtp = mtp,
                           .cuda_graphs = graphs};
    backend_t *be;
    err_t err = {{0}};
    if (ops->create(&o, w, &be, &err) < 0) fail_msg("%s: %s", ops->name, err.msg);
    if (backend_kv_reserve(be, TU_SEQS * TU_SEQ_BLOCKS, TU_BLOCK, &err) < 0 ||
        be->ops->state_reserve(be, TU_SEQS, &err) < 0)
        fail_msg("%s: %s", ops->name, err.msg);
    return be;
}

/* The cuda backend with graphs on beside the eager one: the same passes, and the logits of
 * every MTP pass the graphs ran (one token a sequence) equal the eager ones bit for bit in the
 * host emulation (the padding changes nothing a real row reads), within the tolerance on a
 * device (cuBLASLt may pick another algorithm for the padded size). */
static backend_t *graphed;
static float *graphed_logits;

/* Runs the same batch through both backends' mtp_forward (the forward's when rows is NULL), and
 * `graphed`'s, and compares the logits; returns the largest difference. Each backend's drafts
 * (the argmax it computes where its logits are: the GPU's on the device) must be its logits'
 * argmax. */
static double both(backend_t *cpu, backend_t *gpu, const be_batch_t *b, const int32_t *rows,
                   int step, float *lc, float *lg, int vocab) {
    err_t err = {{0}};
    static int32_t dc[512], dg[512], dgg[512];
    float *lgg = graphed_logits;
    if (!rows) {
        if (backend_forward(cpu, b, lc, &err) < 0 || backend_forward(gpu, b, lg, &err) < 0 ||
            backend_forward(graphed, b, lgg, &err) < 0)
            fail_msg("forward: %s", err.msg);
    } else if (cpu->ops->mtp_forward(cpu, b, rows, step, lc, dc, &err) < 0 ||
               gpu->ops->mtp_forward(gpu, b, rows, step, lg, dg, &err) < 0 ||
               graphed->ops->mtp_forward(graphed, b, rows, step, lgg, dgg, &err) < 0) {
        fail_msg("mtp_forward step %d: %s", step, err.msg);
    }
    const size_t n = (size_t)b->n_logits * (size_t)vocab;
    for (int i = 0; rows && i < b->n_logits; i++) {
        assert_int_equal(dc[i], tu_argmax(lc + (size_t)i * (size_t)vocab, vocab, NULL));
        assert_int_equal(dg[i], tu_argmax(lg + (size_t)i * (size_t)vocab, vocab, NULL));
        assert_int_equal(dgg[i], tu_argmax(lgg + (size_t)i * (size_t)vocab, vocab, NULL));
    }
#ifdef OPS_HOST_EMULATION
    if (memcmp(lg, lgg, n * sizeof(float)))
        fail_msg("step %d: graphs on moved the logits by up to %g", step, tu_max_diff(lg, lgg, n));
#else
    assert_true(tu_max_diff(lg, lgg, n) <= 0.1);
#endif
    return tu_max_diff(lc, lg, n);
}

/* The golden file's two sequences. */
static void golden_seqs(const tu_golden_t *g, int32_t seq[TU_SEQS][256], int len[TU_SEQS]) {
    const cJSON *prompts = cJSON_GetObjectItem(g->json, "prompts");
    for (int s = 0; s < TU_SEQS; s++) {
        const cJSON *ids = cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, s), "ids");
        len[s] = cJSON_GetArraySize(ids);
        assert_true(len[s] <= 256);
        for (int i = 0; i < len[s]; i++)
            seq[s][i] = cJSON_GetArrayItem(ids, i)->valueint;
    }
}

static void against_cpu(const char *fixture, bool fp8, double tol) {
    tu_golden_t g;
    int chained = tu_mtp_golden_load(fixture, &g);
    model_weights_t *w = tu_fixture_weights(fixture);
    backend_t *cpu = open_be(&cpu_backend_ops, w, fp8, true, false);
    backend_t *gpu = open_be(&cuda_backend_ops, w, false, true, false);
    graphed = open_be(&cuda_backend_ops, w, false, true, true);
    static int32_t seq[TU_SEQS][256];
    int len[TU_SEQS];
    golden_seqs(&g, seq, len);
    size_t row_floats = (size_t)g.vocab;
    float *lc = malloc(512 * row_floats * sizeof(float)), *lg = malloc(512 * row_floats * 4);
    graphed_logits = malloc(512 * row_floats * 4);
    assert_true(lc && lg && graphed_logits);

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
    cuda_graph_stats_t gs;
    cuda_backend_graph_stats(graphed, &gs);
    print_message("%s: model logits within %.3f, MTP logits within %.3f of the CPU's (%d + %d "
                  "rows, %d chained steps; %d near-tie drafts differ); graphs on: %ld MTP passes "
                  "replayed\n",
                  fixture, model, worst, n0[0], n0[1], chained, flips, gs.mtp_replays);
    assert_int_equal(gs.mtp_replays, chained); /* the chained passes: one token a sequence */
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
    free(graphed_logits);
    backend_destroy(cpu);
    backend_destroy(gpu);
    backend_destroy(graphed);
    weights_destroy(w);
    tu_golden_free(&g);
}

static void test_mtp_bf16(void **state) {
    against_cpu("tiny-qwen3.5", false, LOGIT_TOL_BF16);
}

static void test_mtp_fp8(void **state) {
    against_cpu("tiny-qwen3.5-fp8", true, LOGIT_TOL_FP8);
}

/* backend_ops_t.mtp_chain: 4 chained draft passes in one call (the cuda backend's on the device,
 * eager and from a graph; the CPU's), after the model's forward and step 0 over both golden
 * sequences (random weights of tiny-qwen3.5's shapes, MTP layer included), the second sequence
 * stopping after 2 drafts (last_pos). The reference is the engine's
 * other way, one mtp_forward a pass over the sequences still drafting, on a CPU backend: the CPU
 * chain's drafts equal it, the cuda chain's eager and graph drafts equal each other (and the
 * CPU's: no near ties on this fixture's chained steps), for the drafts each sequence makes. */
#define CHAIN 4
static void prime(backend_t *be, const int32_t seq[TU_SEQS][256], const int *len, int32_t *draft0,
                  float *logits, int vocab) {
    static tu_batch_t sb;
    const int32_t *tok[TU_SEQS] = {seq[0], seq[1]};
    int zero[TU_SEQS] = {0, 0}, n[TU_SEQS] = {len[0], len[1]};
    tu_batch_build(&sb, tok, zero, n, false);
    err_t err = {{0}};
    if (backend_forward(be, &sb.b, logits, &err) < 0) fail_msg("%s", err.msg);
    const int32_t *next[TU_SEQS] = {seq[0] + 1, seq[1] + 1};
    int n0[TU_SEQS] = {len[0] - 1, len[1] - 1};
    tu_batch_build(&sb, next, zero, n0, false); /* a logit row at each one's last position */
    static int32_t rows[512];
    for (int s = 0; s < TU_SEQS; s++)
        for (int i = 0; i < n0[s]; i++)
            rows[sb.qstart[s] + i] = (s == 0 ? 0 : len[0]) + i;
    int32_t ids[TU_SEQS];
    if (be->ops->mtp_forward(be, &sb.b, rows, 0, logits, ids, &err) < 0) fail_msg("%s", err.msg);
    for (int s = 0; s < TU_SEQS; s++)
        draft0[s] = tu_argmax(logits + (size_t)s * vocab, vocab, NULL);
}

/* One more pass for sequence 0 after the chain, at the position after its last draft, with that
 * draft beside the last pass's output (row 0): its logits into probe[vocab]. They read the K/V
 * every pass wrote: a pass at a wrong position, slot or token moves them. */
static void probe_pass(backend_t *be, const int *len, int32_t token, float *probe) {
    int32_t pos = len[0] - 1 + CHAIN, qs[2] = {0, 1}, ctx = pos + 1, lr = 0, row = 0;
    int32_t tables[TU_SEQ_BLOCKS];
    for (int k = 0; k < TU_SEQ_BLOCKS; k++)
        tables[k] = k;
    int64_t slot = pos;
    be_batch_t b = {.n_tokens = 1,
                    .n_seqs = 1,
                    .token_ids = &token,
                    .positions = &pos,
                    .slot_mapping = &slot,
                    .query_start = qs,
                    .context_len = &ctx,
                    .block_tables = tables,
                    .block_table_stride = TU_SEQ_BLOCKS,
                    .n_logits = 1,
                    .logit_rows = &lr};
    int32_t id;
    err_t err = {{0}};
    if (be->ops->mtp_forward(be, &b, &row, 1 + CHAIN, probe, &id, &err) < 0)
        fail_msg("%s", err.msg);
}

static void chain(backend_t *be, const int *len, const int32_t *draft0, bool one_call, int vocab,
                  int32_t out[CHAIN][TU_SEQS], float *probe) {
    static tu_batch_t sb;
    int32_t tok[TU_SEQS] = {draft0[0], draft0[1]};
    int32_t rows[TU_SEQS], last[TU_SEQS] = {len[0] - 1 + CHAIN - 1, len[1] - 1 + 1};
    int n_seq[TU_SEQS] = {1, 1};
    err_t err = {{0}};
    for (int s = 0; s < TU_SEQS; s++) /* step 0's rows: each sequence's last token's */
        rows[s] = s == 0 ? len[0] - 2 : len[0] - 1 + len[1] - 2;
    if (one_call) {
        const int32_t *one[TU_SEQS] = {&tok[0], &tok[1]};
        int from[TU_SEQS] = {len[0] - 1, len[1] - 1};
        tu_batch_build(&sb, one, from, n_seq, true);
        int32_t d[CHAIN * TU_SEQS];
        if (be->ops->mtp_chain(be, &sb.b, rows, 1, CHAIN, last, d, &err) < 0)
            fail_msg("%s", err.msg);
        for (int j = 0; j < CHAIN; j++)
            for (int s = 0; s < TU_SEQS; s++)
                out[j][s] = len[s] - 1 + j <= last[s] ? d[j * TU_SEQS + s] : -1;
        probe_pass(be, len, out[CHAIN - 1][0], probe);
        return;
    }
    /* pass by pass, the sequences still drafting only (spec_mtp.c's loop) */
    float *lg = malloc((size_t)TU_SEQS * (size_t)vocab * sizeof(float));
    int prev[TU_SEQS]; /* each sequence's row in the previous pass */
    for (int j = 0; j < CHAIN; j++) {
        int32_t pos[TU_SEQS], tk[TU_SEQS], rw[TU_SEQS], who[TU_SEQS], n = 0;
        for (int s = 0; s < TU_SEQS; s++) {
            out[j][s] = -1;
            if (len[s] - 1 + j > last[s]) continue;
            who[n] = s;
            pos[n] = len[s] - 1 + j;
            tk[n] = j == 0 ? draft0[s] : out[j - 1][s];
            rw[n] = j == 0 ? rows[s] : prev[s];
            n++;
        }
        be_batch_t b = {0};
        int32_t qs[TU_SEQS + 1], ctx[TU_SEQS], lr[TU_SEQS], tables[TU_SEQS * TU_SEQ_BLOCKS];
        int64_t slots[TU_SEQS];
        for (int i = 0; i < n; i++) {
            qs[i] = i;
            ctx[i] = pos[i] + 1;
            lr[i] = i;
            slots[i] = (int64_t)who[i] * TU_SEQ_BLOCKS * TU_BLOCK + pos[i];
            for (int k = 0; k < TU_SEQ_BLOCKS; k++)
                tables[i * TU_SEQ_BLOCKS + k] = who[i] * TU_SEQ_BLOCKS + k;
        }
        qs[n] = n;
        b = (be_batch_t){.n_tokens = n,
                         .n_seqs = n,
                         .token_ids = tk,
                         .positions = pos,
                         .slot_mapping = slots,
                         .query_start = qs,
                         .context_len = ctx,
                         .block_tables = tables,
                         .block_table_stride = TU_SEQ_BLOCKS,
                         .n_logits = n,
                         .logit_rows = lr};
        int32_t ids[TU_SEQS];
        if (be->ops->mtp_forward(be, &b, rw, 1 + j, lg, ids, &err) < 0) fail_msg("%s", err.msg);
        for (int i = 0; i < n; i++) {
            out[j][who[i]] = ids[i];
            prev[who[i]] = i;
        }
    }
    free(lg);
    probe_pass(be, len, out[CHAIN - 1][0], probe);
}

static void test_mtp_chain(void **state) {
    const char *fixture = "tiny-qwen3.5";
    tu_golden_t g;
    tu_mtp_golden_load(fixture, &g);
    /* random weights of the fixture's shapes: the trained head repeats one token along the
     * chain, which would hide a pass fed the wrong token; random ones change it every pass */
    model_source_t src = {.model = tu_fixture(fixture), .format = LOAD_DUMMY, .seed = 7};
    model_weights_t *w = tu_weights(&src);
    static int32_t seq[TU_SEQS][256];
    int len[TU_SEQS];
    golden_seqs(&g, seq, len);
    float *logits = malloc(512 * (size_t)g.vocab * sizeof(float));
    backend_t *be[4] = {open_be(&cpu_backend_ops, w, false, true, false),
                        open_be(&cpu_backend_ops, w, false, true, false),
                        open_be(&cuda_backend_ops, w, false, true, false),
                        open_be(&cuda_backend_ops, w, false, true, true)};
    static int32_t d[4][CHAIN][TU_SEQS];
    float *probe[4];
    for (int i = 0; i < 4; i++) {
        int32_t draft0[TU_SEQS];
        probe[i] = malloc((size_t)g.vocab * sizeof(float));
        prime(be[i], seq, len, draft0, logits, g.vocab);
        chain(be[i], len, draft0, i > 0, g.vocab, d[i], probe[i]);
    }
    for (int j = 0; j < CHAIN; j++)
        print_message("chain pass %d: cpu passes %d %d, cpu chain %d %d, cuda %d %d, graph %d %d\n",
                      j, d[0][j][0], d[0][j][1], d[1][j][0], d[1][j][1], d[2][j][0], d[2][j][1],
                      d[3][j][0], d[3][j][1]);
    assert_true(d[0][0][0] != d[0][1][0] || d[0][1][0] != d[0][2][0]); /* the drafts vary */
    assert_memory_equal(d[0], d[1], sizeof d[0]);
    assert_memory_equal(d[2], d[3], sizeof d[2]);
    assert_memory_equal(d[0], d[2], sizeof d[0]);
    /* the pass after: the CPU's chain and passes bit for bit, the cuda backend's eager and graph
     * chains too (the emulation: the same kernels on the same inputs), and the two backends
     * within the BF16 tolerance */
    print_message("probe pass: |cpu chain - passes| %g, |graph - eager| %g, |cuda - cpu| %g\n",
                  tu_max_diff(probe[0], probe[1], (size_t)g.vocab),
                  tu_max_diff(probe[2], probe[3], (size_t)g.vocab),
                  tu_max_diff(probe[0], probe[2], (size_t)g.vocab));
    assert_memory_equal(probe[0], probe[1], (size_t)g.vocab * sizeof(float));
#ifdef OPS_HOST_EMULATION
    assert_memory_equal(probe[2], probe[3], (size_t)g.vocab * sizeof(float));
#endif
    assert_true(tu_max_diff(probe[0], probe[2], (size_t)g.vocab) <= LOGIT_TOL_BF16);
    for (int i = 0; i < 4; i++)
        free(probe[i]);
    cuda_graph_stats_t gs[2];
    cuda_backend_graph_stats(be[2], &gs[0]);
    cuda_backend_graph_stats(be[3], &gs[1]);
    assert_int_equal(gs[0].chain_replays, 0);
    assert_int_equal(gs[1].chain_replays, 1);
    for (int i = 0; i < 4; i++)
        backend_destroy(be[i]);
    free(logits);
    weights_destroy(w);
    tu_golden_free(&g);
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
        cmocka_unit_test(test_mtp_chain),
        cmocka_unit_test(test_engine_mtp),
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (tu_test_selected(tests[i].name)) tests[n++] = tests[i];
    return _cmocka_run_group_tests("test_cuda_mtp", tests, n, NULL, NULL);
}

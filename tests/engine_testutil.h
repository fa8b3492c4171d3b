/*
 * engine_testutil: engine helpers shared by the C tests that drive an engine end to end (the
 * CPU engine tests, the CUDA backend's tests on a GPU and under the host emulator). Failures
 * fail the running cmocka test.
 *
 *     engine_t *eng = tu_open_engine(tu_fixture("tiny-qwen3"), "cpu", flags);
 *     int32_t ids[96];
 *     sampling_params_t p = tu_greedy(40);
 *     engine_stream_t *s = tu_submit(eng, ids, tu_prompt(3, ids), &p);
 */
#ifndef TACHYON_ENGINE_TESTUTIL_H
#define TACHYON_ENGINE_TESTUTIL_H

#include <stdint.h>

#include "backend.h"
#include "engine.h"
#include "weights.h"

/* The weights src names (a fixture, a preset, dummy or not); the caller destroys them. */
model_weights_t *tu_weights(const model_source_t *src);

/* A golden output of scripts/make-fixtures: golden/<name>.json (cJSON) and its logits file,
 * rows of vocab_size f32. tu_golden_load fails the test when either is missing or malformed. */
typedef struct tu_golden {
    struct cJSON *json;
    float *logits; /* [n_rows, vocab] */
    size_t n_rows;
    int vocab;
} tu_golden_t;
void tu_golden_load(const char *name, tu_golden_t *g);
void tu_golden_free(tu_golden_t *g);
/* golden/<fixture>.mtp.json (the MTP head's, scripts/make_fixtures_qwen35.py); returns its
 * chained_steps. */
int tu_mtp_golden_load(const char *fixture, tu_golden_t *g);

/* A backend batch of TU_SEQS sequences for tests that drive a backend directly: sequence s in
 * blocks [s TU_SEQ_BLOCKS, (s + 1) TU_SEQ_BLOCKS) of TU_BLOCK tokens and state slot s, its n[s]
 * tokens tok[s][..] at positions from[s].., with logit rows at every token (all_logits) or at
 * each sequence's last. rows: a caller's per-token array (an MTP pass's hidden rows). */
#define TU_SEQS       2
#define TU_SEQ_BLOCKS 16
#define TU_BLOCK      16
#define TU_TOKENS     512
typedef struct tu_batch {
    int32_t tokens[TU_TOKENS], positions[TU_TOKENS], rows[TU_TOKENS], logit_rows[TU_TOKENS];
    int32_t qstart[TU_SEQS + 1], ctx[TU_SEQS], state[TU_SEQS], tables[TU_SEQS * TU_SEQ_BLOCKS];
    int64_t slots[TU_TOKENS];
    be_batch_t b;
} tu_batch_t;
void tu_batch_build(tu_batch_t *sb, const int32_t *const tok[TU_SEQS], const int from[TU_SEQS],
                    const int n[TU_SEQS], bool all_logits);

/* An MTP backend's refusals (backend_ops_t.mtp_forward) over sb, a batch of one token each: a
 * hidden row its last pass did not have (7), then, after `configure` with off and a new pool of
 * TU_SEQS * TU_SEQ_BLOCKS blocks, any pass on a pool reserved without the head's K/V. */
void tu_check_mtp_refusals(backend_t *be, const backend_options_t *off, const tu_batch_t *sb,
                           float *logits);

/* The largest entry of x[0..n) (the first on a tie) and, when margin is not NULL, how far it is
 * above the second. */
int tu_argmax(const float *x, int n, float *margin);
/* max |a[i] - b[i]| over i < n. */
double tu_max_diff(const float *a, const float *b, size_t n);

/* The weights of fixture `name` (tests/fixtures), as they are stored. */
model_weights_t *tu_fixture_weights(const char *name);

/* A copy of fixture `name` (a new temporary directory: tu_rmrf and free it) whose checkpoint
 * also holds FP8 KV cache scales for every attention layer, k_scale and v_scale beside each
 * self_attn.k_proj.weight (compressed-tensors' names, weights_kv_scales), F32 scalars. */
char *tu_fixture_with_kv_scales(const char *name, float k_scale, float v_scale);

/* An engine on `model` with `backend` (two CPU threads for the cpu backend) and flags given as
 * NULL-terminated name, value pairs (NULL for none). With TACHYON_TEST_ASYNC=on in the
 * environment, --async-scheduling on unless the flags name it (ctest's *_async variants run
 * the engine tests on the CPU backend's asynchronous path that way). */
engine_t *tu_open_engine(const char *model, const char *backend, const char *const *flags);

/* Submits prompt[0..n) with a copy of *p; the caller releases the stream. */
engine_stream_t *tu_submit(engine_t *eng, const int32_t *prompt, int n, const sampling_params_t *p);

/* Deterministic prompt number i: 5..80 tokens over the tiny fixture's regular vocabulary
 * (ids < 2048) into ids[96]; returns the length. */
int tu_prompt(int i, int32_t *ids);

/* Turns on n-gram speculative drafts live: k drafts, prompt lookup of 1..4 tokens. */
void tu_spec_on(engine_t *eng, const char *k);

/* Greedy decoding of max_tokens tokens, EOS ignored. */
sampling_params_t tu_greedy(int max_tokens);

/* The expert-load statistics of an idle engine on an MoE model: every MoE layer's counts sum
 * to the model's num_experts_per_tok x `forwarded` tokens, and more than one expert got some;
 * the window holds no more than the totals and something of them. Prints each layer's sums. */
void tu_check_expert_load(engine_t *eng, uint64_t forwarded);

/* What an engine stream delivered, per choice (TU_MAXC at most): tu_got_event adds one event,
 * checking its invariants (text length, nothing after a choice's FINISH, one token a DELTA);
 * tu_got_collect reads a stream to its end, failing on a 20 s stall. */
#define TU_MAXC 4
/* What a stream delivered, per choice. */
typedef struct got {
    int32_t *ids[TU_MAXC];
    int n_ids[TU_MAXC];
    char *text[TU_MAXC];
    size_t text_len[TU_MAXC];
    int n_deltas[TU_MAXC];
    int n_finish[TU_MAXC];
    engine_finish_reason_t reason[TU_MAXC];
    int completion[TU_MAXC], prompt[TU_MAXC], cached[TU_MAXC];
    int32_t stop_token[TU_MAXC];
    char stop_str[TU_MAXC][64];
    char error[TU_MAXC][256];
} tu_got_t;
void tu_got_free(tu_got_t *g);
void tu_got_event(tu_got_t *g, const engine_event_t *ev);
void tu_got_collect(engine_stream_t *s, tu_got_t *g);

/* The mixed workload of asynchronous scheduling's tests: request i's parameters (greedy, seeded
 * top-p with logprobs, stop strings and a stop id, penalties, n = 2, min_tokens, repetition
 * penalty, one token; a caller frees them); n_req requests at once (tu_prompt's prompts within
 * 1,024 ids) on a fresh engine with budget 48, max-model-len 160, --async-scheduling async and
 * the extra flags (name, value pairs, NULL-terminated, or NULL), collected into out[n_req], the
 * stats at the end in *snap; and the check that two runs gave every choice the same ids, text,
 * finish reason, stop, usage (each finished once). */
sampling_params_t tu_mixed_params(int i);
void tu_mixed_run(const char *fixture, const char *backend, const char *async,
                  const char *const *extra, int n_req, tu_got_t *out, stats_snapshot_t *snap);
void tu_mixed_expect_same(const char *what, int n_req, const tu_got_t *a, const tu_got_t *b);

#endif

/*
 * cuda_compare: what the cuda backend's end-to-end tests share (test_cuda_backend.c, the
 * backend against the CPU one; test_cuda_tp.c, tensor parallel against TP 1): golden prompts,
 * backends opened as the tests configure them, the MoE routing trace, batched prefills, lockstep
 * greedy generation, and the engine helpers. Failures fail the running cmocka test.
 */
#ifndef TACHYON_TESTS_CUDA_COMPARE_H
#define TACHYON_TESTS_CUDA_COMPARE_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "backend.h"
#include "engine.h"
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

/* --kv-cache-dtype of the backends the tests open (the fp8 KV tests set KV_DTYPE_FP8). */
extern int kv_dtype;
/* --cuda-graphs of the backends the tests open (true unless a test turns it off). */
extern bool cuda_graphs;
/* A directory compare_fixture and the tests read weights from instead of the fixture's (NULL:
 * the fixture's), for checkpoints with KV cache scales. */
extern const char *weights_from;

/* The MoE routing of both backends for the tokens of one forward (backend_ops_t.trace_routing):
 * buffers [n_layers][cap][k], and the flips counted so far. NULL for a dense model. */
typedef struct trace {
    const model_config_t *cfg;
    int cap;
    int32_t *cpu, *gpu;
    int routings, flips; /* (MoE layer, token) pairs compared, and those that differ */
} trace_t;

/* tests/fixtures/golden/<fixture>.json, parsed; the caller deletes it. */
cJSON *golden(const char *fixture);

/* A JSON array of token ids as a malloc'd array of *n. */
int32_t *json_ids(const cJSON *arr, int *n);

/* The backend at tensor parallel tp (1: none), expert parallel when ep, as the tests configure
 * it (kv_dtype, graphs on, half the device memory); NULL with the message in *err when create
 * refuses and err is not NULL (otherwise the test fails). open_backend: tp 1. */
backend_t *open_backend_tp(const backend_ops_t *ops, model_weights_t *w, bool emulate, int tp,
                           bool ep, err_t *err);

backend_t *open_backend(const backend_ops_t *ops, model_weights_t *w, bool emulate);

/* Models with recurrent state: n slots on be, sequence s in slot n - 1 - s; NULL otherwise. The
 * caller frees the array. */
int32_t *state_slots(backend_t *be, const model_weights_t *w, int n);

trace_t *trace_new(const model_config_t *cfg, int cap);

void trace_free(trace_t *t);

void trace_on(trace_t *t, backend_t *cpu, backend_t *gpu);

/* After a traced forward of T tokens: flipped[i] (T entries) whether token i went to other
 * experts on the two backends in any MoE layer (as sets: the order of equal choices does not
 * matter). Returns how many tokens flipped. */
int trace_compare(trace_t *t, int T, bool *flipped);

/* All golden prompts prefilled in one batch on `be`; returns logits [n_logits, vocab]. */
float *batched_prefill(backend_t *be, const model_weights_t *w, const cJSON *g, int vocab,
                       int *n_out);

/* Greedy generation on both backends in lockstep, the CPU's token fed to both: chunked prefill
 * (BLOCK tokens a step, over the cached prefix), then n_gen decode steps. At every step with
 * logits the two rows must be within tol, and their argmax equal unless the CPU's top-2 gap is
 * itself within 2 * tol (a near tie that numeric noise may flip; counted in *ties). Returns the
 * largest logit difference seen. */
double lockstep(backend_t *cpu, backend_t *gpu, const model_weights_t *w, const int32_t *prompt,
                int n, int n_gen, double tol, const char *what, int *ties, trace_t *tr,
                double *flip_worst);

/* Reads a stream to its end: the tokens of choice 0. */
/* Reads a stream to its end: the tokens of choice 0 (at most cap). */
int collect(engine_stream_t *s, int32_t *out, int cap);

/* An engine on tiny-qwen3 with backend "cuda" and the given flags (tu_open_engine). */
engine_t *open_engine(const char *const *flags);

#endif

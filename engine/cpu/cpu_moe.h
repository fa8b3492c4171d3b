/*
 * cpu_moe: the MLP_MOE layer of the CPU backend, the reference numerics of Qwen3-MoE (models.md
 * 3.3, HF Qwen3MoeSparseMoeBlock):
 *
 *     logits = x Wr^T                                  [T, E] f32, the router (never quantized)
 *     p = softmax(logits); top-k of p                  ties: the lower expert id first
 *     w = p_topk / sum(p_topk) when norm_topk_prob, else p_topk
 *     out[t] = sum over t's experts e, in increasing e:  w_e * down_e(silu(gate_e(x)) * up_e(x))
 *     h[t] += out[t]
 *
 * Each expert runs on the tokens routed to it only: the batch's (token, expert) pairs are
 * grouped by expert (stable in token order), the tokens of one expert gathered into a dense
 * block, and work items are (expert, 128 rows of its weights) over the thread pool. Every output
 * element is one cpu_ops dot product and the sum over a token's experts has a fixed order, so
 * results do not depend on the batch, the grouping or the thread count. With W8A8 emulation the
 * expert inputs are quantized per token per 128 columns as vLLM does (x before gate/up, the
 * SiLU product before down). Tokens are taken CPU_MOE_PAIRS / num_experts_per_tok at a time,
 * which bounds the scratch.
 *
 *     cpu_moe_t *m;
 *     cpu_moe_create(cfg, n_threads, fast, &m, &err);     // fast: cpu_fast.h's GEMM
 *     cpu_moe_weights_t lw = {router, experts, 0, E};      // experts: weights_expert(w, l, 0, 0)
 *     cpu_moe_forward(m, pool, &lw, x, T, h, emulate_fp8, 0, counts, NULL); // counts[E] += routed
 *     cpu_moe_destroy(m);
 */
#ifndef TACHYON_CPU_MOE_H
#define TACHYON_CPU_MOE_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu_pool.h"
#include "err.h"
#include "model.h"
#include "weights.h"

#define CPU_MOE_PAIRS 2048 /* (token, expert) pairs computed at once */

typedef struct cpu_moe cpu_moe_t;

/* One MLP_MOE layer's weights. */
typedef struct cpu_moe_weights {
    const wtensor_t *router;  /* [E, H] */
    const wtensor_t *experts; /* [E][E_COUNT], contiguous (weights_expert(w, l, 0, 0)) */
    int first, end;           /* the experts computed: [first, end), 0 and E but under expert
                                 parallelism, where the others' are another rank's (routing
                                 still sees all E; a token's other experts add nothing here) */
} cpu_moe_weights_t;

/* Scratch for the MoE layers of cfg (n_experts > 0) run on n_threads threads. The caller owns
 * *out. */
int cpu_moe_create(const model_config_t *cfg, int n_threads, bool fast, cpu_moe_t **out,
                   err_t *err);
void cpu_moe_destroy(cpu_moe_t *m);

/* h[t] += MoE(x[t]) for t < T: x [T, H] the normed input (f32), h [T, H] the residual stream.
 * counts[E] (may be NULL) gets the tokens routed to each expert added; trace [T, k] (may be
 * NULL) each token's experts (backend_ops_t.trace_routing). Uses the pool's threads.
 * Every expert's gate and up must have the dtype (and FP8 block) of expert 0's gate, and every
 * down that of expert 0's down: the input quantization is shared (the backend checks).
 * bf16_passes: the experts' GEMMs on cpu_bf16.h's kernels with 1 or 2 passes
 * (cpu-matmul-precision medium, high), or 0 for f32 (taken as 0 where the CPU has no
 * AVX512-BF16 or m is not fast); the router is f32 whatever it is: its top-k is a discrete
 * choice that rounding would move. */
void cpu_moe_forward(cpu_moe_t *m, cpu_pool_t *pool, const cpu_moe_weights_t *w, const float *x,
                     int T, float *h, bool emulate_fp8, int bf16_passes, uint64_t *counts,
                     int32_t *trace);

/* The k experts of one token from its router logits [E]: ids in decreasing probability (ties:
 * lower id first) and their weights (renormalised when norm). Exposed for the tests and the
 * CUDA backend's CPU twin. */
void cpu_moe_route(const float *logits, int E, int k, bool norm, int32_t *ids, float *weights);

#endif

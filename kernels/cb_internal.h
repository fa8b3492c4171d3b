/*
 * cb_internal: test hooks of the cuda backend (tests/gpu), not part of the engine's interface.
 *
 *     float v;
 *     cuda_backend_weight_value(be, 3, L_GATE, row, col, &v, &err);  // as the GEMM reads it
 */
#ifndef TACHYON_CB_INTERNAL_H
#define TACHYON_CB_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element (row, col) of a weight as the device holds it, dequantized to f32 (e4m3 x block scale,
 * or bf16), read back from the fused / padded device layout. layer -1 names a model-wide tensor
 * (slot is then a gslot_t: G_EMBED or G_LM_HEAD); otherwise slot is an lslot_t projection. */
int cuda_backend_weight_value(const backend_t *be, int layer, int slot, int64_t row, int64_t col,
                              float *out, err_t *err);

/* The same for element (row, col) of expert `expert`'s projection `slot` (eslot_t) of MoE layer
 * `layer`, read back from its [E][n][k] device array (gate and up stacked, padded). */
int cuda_backend_expert_value(const backend_t *be, int layer, int expert, int slot, int64_t row,
                              int64_t col, float *out, err_t *err);

/* Whether the linears run as FP8 block-scaled GEMMs (false: BF16, also the fallback for FP8
 * checkpoints whose shapes cuBLASLt's FP8 path cannot take). This and the graph stats take a
 * tensor-parallel instance too (its rank 0's); the value hooks a single instance only. */
bool cuda_backend_uses_fp8(const backend_t *be);

/* CUDA graph use so far: steps replayed from a graph (decode and verify steps), the verify steps
 * among them (several tokens a sequence), MTP draft passes (mtp_forward) and draft chains
 * (mtp_chain) replayed, graphs captured. */
typedef struct cuda_graph_stats {
    long replays, verify_replays, mtp_replays, chain_replays;
    int captured;
} cuda_graph_stats_t;
void cuda_backend_graph_stats(const backend_t *be, cuda_graph_stats_t *stats);

#ifdef __cplusplus
}
#endif

#endif

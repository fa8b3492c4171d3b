/*
 * ops_gdn: the CUDA kernels of Qwen3.5's Gated DeltaNet layer (models.md 4.6), as C-callable
 * launchers, each the twin of a CPU function (engine/cpu/cpu_gdn_ops.h). Like ops.h they only
 * enqueue work (graph-capturable: per-step metadata is read through device pointers).
 *
 *     qkvz = x [Wqkv | Wz]^T, ba = x [Wb | Wa]^T                (the backend's GEMMs)
 *     ops_gdn_conv(...)          y = silu(conv(qkv)) with each sequence's conv window; windows
 *                                slide to the last K - 1 raw inputs          (cpu_gdn_conv)
 *     ops_gdn_prepare(...)       q, k L2-normalized in y; g, beta from a, b  (cpu_gdn_l2norm,
 *                                                                           cpu_gdn_gates)
 *     ops_gdn_chunked(...)       sequences with more than one new token: the chunked delta rule
 *                                (64-token chunks, tf32 tensor cores, mma.sync) (cpu_gdn_chunked)
 *     ops_gdn_recurrent(...)     sequences with one new token: the fused recurrent step, the
 *                                state read and written once                 (cpu_gdn_recurrent)
 *     ops_gdn_gated_norm(...)    o = w * rmsnorm(o) * silu(z), bf16 for out_proj
 *                                                                          (cpu_gdn_gated_rmsnorm)
 *     out = o Wout^T                                             (the backend's GEMM)
 *
 * State (ops_gdn_state_t): per slot and linear layer, the conv window [K - 1, C] f32 and the SSM
 * state [Hv, dk, dv] (f32 or bf16), addressed by each sequence's slot (state_slots[s]; < 0: a
 * padding sequence, whose outputs are zero and whose state is not touched). A sequence whose
 * first new token is at position 0 (context_len == its new tokens) starts from zero.
 *
 * Shapes: dk, dv multiples of 8 up to 128; value heads a multiple of key heads; conv kernel up to
 * OPS_GDN_MAX_CONV.
 */
#ifndef TACHYON_OPS_GDN_H
#define TACHYON_OPS_GDN_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "err.h"

#define OPS_GDN_CHUNK    64 /* tokens per chunk of the chunked form (transformers') */
#define OPS_GDN_MAX_DIM  128
#define OPS_GDN_MAX_CONV 8

/* The recurrent state of every slot, one layer's view. */
typedef struct ops_gdn_state {
    float *conv; /* slot s: conv + s * conv_slot_stride, [K - 1, C] f32 */
    void *ssm;   /* slot s: ssm + s * ssm_slot_stride elements, [Hv, dk, dv] */
    int64_t conv_slot_stride, ssm_slot_stride; /* elements between slots */
    bool ssm_bf16; /* SSM state stored as bf16 (rounded after each step), else f32 */
} ops_gdn_state_t;

/* The layer's shapes and the step's metadata. */
typedef struct ops_gdn_args {
    int T, n_seqs;
    int Hk, Hv, dk, dv, K;      /* key / value heads and dims, conv kernel */
    int C;                      /* conv channels: 2 Hk dk + Hv dv */
    const int32_t *query_start; /* [n_seqs + 1] device */
    const int32_t *context_len; /* [n_seqs] device */
    const int32_t *state_slots; /* [n_seqs] device */
    ops_gdn_state_t state;
} ops_gdn_args_t;

/* y[t, c] = silu(sum_j w[c, j] x(t - K + 1 + j)[c]) over each sequence's new tokens, x(tau < 0)
 * from its conv window (zeros at position 0), then the windows take the last K - 1 raw inputs.
 * x: the in_proj_qkv output, f32 [T, >= C] at stride ld_x; w [C, K] f32; y [T, C] f32. */
int ops_gdn_conv(const ops_gdn_args_t *a, const float *x, int64_t ld_x, const float *w, float *y,
                 cudaStream_t stream, err_t *err);

/* In y [T, C]: q and k heads L2-normalized in place; g[t, h] = -exp(A_log[h]) * softplus(a +
 * dt_bias[h]), beta[t, h] = sigmoid(b): a, b from ba [T, >= 2 Hv] (b in columns [0, Hv), a in
 * [a_col, a_col + Hv)) at stride ld_ba; g, beta [T, Hv] f32. */
int ops_gdn_prepare(const ops_gdn_args_t *a, float *y, const float *ba, int64_t ld_ba, int a_col,
                    const float *a_log, const float *dt_bias, float *g, float *beta,
                    cudaStream_t stream, err_t *err);

/* The delta rule of sequences with more than one new token (others are left alone): o [T, Hv dv]
 * f32 from y's q, k, v, g and beta, the slot's SSM state read and written. */
int ops_gdn_chunked(const ops_gdn_args_t *a, const float *y, const float *g, const float *beta,
                    float *o, cudaStream_t stream, err_t *err);

/* The same for sequences with exactly one new token (others are left alone). */
int ops_gdn_recurrent(const ops_gdn_args_t *a, const float *y, const float *g, const float *beta,
                      float *o, cudaStream_t stream, err_t *err);

/* out[t, h dv + i] = bf16(w[i] * (o * rsqrt(mean(o_h^2) + eps))[i] * silu(z[t, h dv + i])) for
 * every token and value head; o [T, Hv dv] f32; z f32 at stride ld_z; out bf16 [T, ld_out]
 * (columns Hv dv .. ld_out - 1 zeroed, for a K-padded out_proj). */
int ops_gdn_gated_norm(int T, int Hv, int dv, const float *o, const float *z, int64_t ld_z,
                       const float *w, float eps, void *out, int64_t ld_out, cudaStream_t stream,
                       err_t *err);

/* Whether the ops take a's shapes (heads, dims, conv kernel, channels); a's other fields are not
 * read. */
int ops_gdn_check(const ops_gdn_args_t *a, err_t *err);

/* Dynamic shared memory ops_gdn_chunked needs; ops_gdn_init (once per device, after ops_init)
 * allows the largest. */
size_t ops_gdn_chunked_smem(int dk, int dv);
int ops_gdn_init(err_t *err);

#ifdef __cplusplus
}
#endif

#endif

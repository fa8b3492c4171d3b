/*
 * gemm: the linear layers of the cuda backend through cuBLASLt, y[T, N] = x[T, K] W[N, K]^T with
 * row-major x, W and y (kernels.md 1.5: A = W transposed, B = x, D = y column-major [N, T]).
 *
 *   - FP8 block-scaled: W e4m3 with 128x128 block scales (BLK128x128_32F), x e4m3 with per-token
 *     128-column scales (VEC128_32F), BF16 out, FP32 compute. T is padded to a multiple of 4
 *     (gemm_pad_t): x, its scales and y must hold gemm_pad_t(T) rows, and the activation scales
 *     are stored transposed, [ceil(K/128)][gemm_pad_t(T)] f32.
 *   - BF16: W and x bf16, y bf16 or f32 (the lm_head writes f32 logits).
 *
 * Algorithms come from cublasLtMatmulAlgoGetHeuristic once per (kind, N, K, padded T) and are
 * cached in a fixed table, so a step never allocates; the workspace is allocated once.
 *
 *     gemm_ctx_t *g;
 *     gemm_create(stream, 32 << 20, &g, &err);
 *     gemm_w8_t w = {.data = wq, .scale = sq, .n = N, .k = K};   // scale: gemm_w8_scale_layout
 *     gemm_fp8(g, &w, xq, xs, T, y, false, &err);
 *     gemm_destroy(g);
 *
 * Not thread-safe: one context per stream (the engine thread's).
 */
#ifndef TACHYON_GEMM_H
#define TACHYON_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gemm_ctx gemm_ctx_t;

/* An FP8 weight on the device. */
typedef struct gemm_w8 {
    const uint8_t *data; /* [n, k] e4m3, row-major */
    const float *scale;  /* [ceil(n/128), gemm_w8_scale_ld(k)] f32: BLK128x128, K-major */
    int n, k;
} gemm_w8_t;

/* A BF16 weight on the device. */
typedef struct gemm_w16 {
    const uint16_t *data; /* [n, k] bf16, row-major */
    int n, k;
} gemm_w16_t;

/* Token count rounded up to what the FP8 GEMM takes (a multiple of 4). */
static inline int gemm_pad_t(int t) {
    return (t + 3) & ~3;
}

/* Row stride (floats) of a weight's BLK128x128 scale array: ceil(k/128) rounded up to 4. */
static inline int gemm_w8_scale_ld(int k) {
    return ((k + 127) / 128 + 3) & ~3;
}

/* Whether cuBLASLt's block-scaled FP8 path can take an [n, k] weight: n and k multiples of 16
 * (16-byte aligned rows). On false, why says which constraint fails. */
bool gemm_fp8_shape_ok(int n, int k, char *why, size_t why_size);

/* Creates a context issuing on `stream` with a workspace of workspace_bytes (cuBLASLt asks for
 * up to 32 MiB on Hopper). The caller owns *out. */
int gemm_create(cudaStream_t stream, size_t workspace_bytes, gemm_ctx_t **out, err_t *err);
void gemm_destroy(gemm_ctx_t *g);

/* y[T, n] = x[T, k] W^T. x: [gemm_pad_t(t), k] e4m3; xs: [ceil(k/128), gemm_pad_t(t)] f32
 * (the dequantization multipliers, amax/448); y: [gemm_pad_t(t), n], bf16 (y_f32 false) or f32
 * (padding rows are written with whatever the padding rows of x give). t = 0 does nothing.
 * Errors: a shape the path cannot take, no algorithm, a cuBLASLt failure. */
int gemm_fp8(gemm_ctx_t *g, const gemm_w8_t *w, const uint8_t *x, const float *xs, int t, void *y,
             bool y_f32, err_t *err);

/* Whether cuBLASLt has a block-scaled FP8 algorithm for an [n, k] weight at t tokens, without
 * running anything (heuristics run on the host); the answer is cached like gemm_fp8's. 0, or -1
 * with the reason in err. */
int gemm_fp8_check(gemm_ctx_t *g, int n, int k, int t, bool y_f32, err_t *err);

/* y[T, n] = x[T, k] W^T with x bf16 [t, k] and y [t, n], bf16 (y_f32 false) or f32. */
int gemm_bf16(gemm_ctx_t *g, const gemm_w16_t *w, const uint16_t *x, int t, void *y, bool y_f32,
              err_t *err);

/* Heuristic queries made so far (cache misses), for tests and the start-up log. */
int gemm_algo_queries(const gemm_ctx_t *g);

#ifdef __cplusplus
}
#endif

#endif

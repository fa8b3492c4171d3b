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
 * Algorithms come from cublasLtMatmulAlgoGetHeuristic once per (kind, N, K, padded T, operand
 * alignment), with the alignment preferences set to the operands' (the largest power of two
 * dividing every pointer, at most 256): up to 4 candidates kept in the heuristic's order, the
 * next tried when one fails to launch (and moved to the front when it works), cached in a fixed
 * table so a step never allocates; an algorithm for less aligned operands serves more aligned
 * ones. gemm_probe asks for every size a step can run at start-up; an FP8 product with f32
 * output that has no algorithm at some size runs FP8 with BF16 output there and converts
 * (before the engine would ever dequantize the weights to BF16). The workspace and the
 * conversion buffer are allocated once.
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

/* y[T, n] = x[T, k] W^T with x bf16 [t, k] and y [t, n], bf16 (y_f32 false) or f32. */
int gemm_bf16(gemm_ctx_t *g, const gemm_w16_t *w, const uint16_t *x, int t, void *y, bool y_f32,
              err_t *err);

/* Asks for an algorithm of every token count a step can run, T = 1..t_max (FP8: every padded T
 * up to gemm_pad_t(t_max)), for an [n, k] weight, FP8 block-scaled (fp8) or BF16, operands
 * aligned to 2^align_log2 bytes (the least aligned the caller will pass; 8: 256). An FP8 product
 * with f32 output and no algorithm at some T takes BF16 output there, converted to f32: *via_bf16
 * counts those sizes, and their conversion buffer is allocated here, never in a step. 0, or -1
 * naming the first T with no algorithm at all (the caller says so at start-up). */
int gemm_probe(gemm_ctx_t *g, bool fp8, int n, int k, int t_max, bool y_f32, int align_log2,
               int *via_bf16, err_t *err);

/* What the context did so far: heuristic queries, launches retried with the next candidate, and
 * sizes probed that run FP8 with BF16 output. */
typedef struct gemm_stats {
    int queries, retries, via_bf16;
} gemm_stats_t;
void gemm_stats(const gemm_ctx_t *g, gemm_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif

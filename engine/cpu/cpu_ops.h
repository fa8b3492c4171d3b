/*
 * cpu_ops: the f32 kernels of the CPU backend, one thread's share of each op.
 *
 * These are the reference numerics of the project: weights are dequantized to f32 a few rows at
 * a time (never the whole model), every dot product sums in f32 with the same fixed order of
 * fused multiply-adds (8 lanes, lane k % 8, then a fixed tree), so a result does not depend on
 * the batch size, on how rows are split between threads, or on the build (fmaf is exactly
 * rounded at -O0 and -O3 alike). The backend (cpu_backend.c) drives them over its thread pool;
 * the tests call them directly.
 *
 *     cpu_matmul_rows(x, T, w, 0, w->rows, y, w->rows, wbuf);   // y[T, N] = x[T, K] W[N, K]^T
 */
#ifndef TACHYON_CPU_OPS_H
#define TACHYON_CPU_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "weights.h"

/* Rows cpu_matmul_rows dequantizes at once: its scratch is CPU_MM_ROWS * cols floats. */
#define CPU_MM_ROWS 4

/* Dequantizes rows [row0, row0 + n) of w to f32: dst [n, w->cols]. BF16, F16, F32 are exact;
 * F8_E4M3 values are multiplied by their block's scale_inv in f32; lazy dummy tensors are
 * generated (wtensor_row_f32). The caller checks the range. */
void cpu_dequant_rows(const wtensor_t *w, int64_t row0, int n, float *dst);

/* y[t][n] = sum_k x[t][k] * W[n][k] for t < T and n in [n0, n1): x [T, K] with K = w->cols,
 * y [T, ldy] f32 (only columns n0..n1-1 are written). wbuf: CPU_MM_ROWS * K floats of scratch. */
void cpu_matmul_rows(const float *x, int T, const wtensor_t *w, int64_t n0, int64_t n1, float *y,
                     int64_t ldy, float *wbuf);

/* The dot product every kernel here uses (the fixed order above). */
float cpu_dot(const float *a, const float *b, int n);

/* RMSNorm of one vector: y = w * (x / sqrt(mean(x^2) + eps)), f32; y may equal x. */
void cpu_rmsnorm(const float *x, const float *w, int n, float eps, float *y);

/* RoPE inverse frequencies as transformers computes them in f32:
 * inv_freq[j] = 1 / theta^(f32(2j) / D), j < D/2. (Equal to torch's to within 1 ulp: torch's
 * vectorized pow and cos/sin are not always correctly rounded.) */
void cpu_rope_inv_freq(int head_dim, double theta, float *inv_freq);

/* cos/sin of the angles pos * inv_freq[j] (f32 product), j < half. */
void cpu_rope_cos_sin(int32_t pos, const float *inv_freq, int half, float *cos_out, float *sin_out);

/* NeoX rotation of one head in place: dims j and j + D/2 rotate by the angle of j. */
void cpu_rope_apply(float *x, int head_dim, const float *cos_in, const float *sin_in);

/* W8A8 emulation (vLLM per-token-group FP8 quantization): for each row of x [T, K] and each
 * `group`-column block (the last one may be narrower), s = max(max|x|, 1e-10) / 448 and
 * out = e4m3(clamp(x / s, -448, 448)) * s, all f32. out [T, K] may equal x. */
void cpu_quant_fp8_rows(const float *x, int T, int K, int group, float *out);

/* The input a GEMM with weight w reads: x itself, or, when emulating W8A8 and w is F8_E4M3,
 * x quantized per token per w->block_k columns (cpu_quant_fp8_rows) into scratch [T, w->cols]. */
const float *cpu_linear_input(const float *x, int T, const wtensor_t *w, bool emulate_fp8,
                              float *scratch);

/* Paged attention of one layer. The caches are [num_blocks, n_kv_heads, block_size, head_dim]:
 * a KV head's rows of a block lie together (cpu_kv_rows), so attention at depth streams runs of
 * block_size x head_dim floats rather than one head_dim row every n_kv_heads x head_dim; slot
 * (block b, row i) of head h is at ((b n_kv_heads + h) block_size + i) head_dim. Sequence s's
 * context is the first context_len[s] slots named by its block table row, its new tokens are
 * query_start[s] .. query_start[s+1]-1, the last ones of that context. */
typedef struct cpu_attn {
    const float *q; /* [n_tokens, n_heads * head_dim], after q_norm and RoPE */
    float *out;     /* [n_tokens, n_heads * head_dim] */
    const float *k_cache, *v_cache;
    int block_size;
    int n_heads, n_kv_heads, head_dim;
    float scale; /* 1 / sqrt(head_dim) */
    const int32_t *query_start, *context_len, *block_tables;
    int block_table_stride;
} cpu_attn_t;

/* Where slot `slot` (row slot % block_size of block slot / block_size) of KV head kvh starts in
 * a layer's cache, in floats: the one statement of the layout above. */
/* x through an fp8 KV cache of per-tensor scale s and back: e4m3(x / s) (saturated to +-448,
 * round to nearest even) times s, what the cuda backend's cache holds (kernels/fused.cu) and its
 * attention reads, so that the two compare. */
static inline float cpu_e4m3_round(float x, float s) {
    float y = x / s;
    float c = y > 448.0f ? 448.0f : y < -448.0f ? -448.0f : y;
    return dtype_e4m3_to_f32(dtype_f32_to_e4m3(c)) * s;
}

static inline int64_t cpu_kv_offset(int64_t slot, int kvh, int n_kv_heads, int block_size,
                                    int head_dim) {
    return ((slot / block_size * n_kv_heads + kvh) * block_size + slot % block_size) * head_dim;
}

/* The block_size rows (head_dim floats each, contiguous) of KV head kvh in block `block`. */
static inline const float *cpu_kv_rows(const float *cache, const cpu_attn_t *a, int32_t block,
                                       int kvh) {
    return cache + cpu_kv_offset((int64_t)block * a->block_size, kvh, a->n_kv_heads, a->block_size,
                                 a->head_dim);
}

/* Causal softmax attention for token t (of sequence s) and query head h, which reads kv head
 * h / (n_heads / n_kv_heads). scores: scratch of context_len[s] floats. */
void cpu_attention_head(const cpu_attn_t *a, int s, int t, int h, float *scores);

#endif

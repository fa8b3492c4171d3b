/*
 * cpu_bf16: GEMMs on the CPU's bfloat16 dot-product instruction (AVX512-BF16's VDPBF16PS, chosen
 * at run time), for the cpu-matmul-precision flag's `high` and `medium` settings. The weights are
 * read in their checkpoint form (BF16 rows as they are; block FP8 decoded to bf16 exactly, its
 * block scales folded into the activations) and the activations are rounded to bf16:
 *
 * - medium (1 pass): x rounded once to bf16 (8 significant bits), what llama.cpp's BF16 path and
 *   transformers at torch_dtype=bfloat16 compute with. |y - y_exact| <= 2^-8 sum_k |x_k w_k| +
 *   the f32 summation's error.
 * - high (2 passes): x as the sum of two bf16 (hi = bf16(x), lo = bf16(x - hi): 16 significant
 *   bits), PyTorch's "high" float32 matmul precision. |y - y_exact| <= 2^-16 sum_k |x_k w_k| + the
 *   f32 summation's error: logits within 1e-4 of the f32 reference on the fixtures.
 *
 * Products of two bf16 are exact in f32 and summed in f32, so the error is the activations'
 * rounding alone (and, for FP8, x times its block scale rounded to f32 first). Every output has
 * one 16-lane f32 accumulator walked along K in the same order (32 columns at a time, pass after
 * pass), whatever the tile, the batch size or the rows a thread was given, then reduced in a
 * fixed tree: a token's result does not depend on the batch around it or on the thread count
 * (the engine's batch invariance holds in these modes too), though it differs from the f32
 * reference's.
 *
 * Speed (AMD EPYC with AVX512-BF16, one VDPBF16PS a cycle, i.e. twice the f32 FMA's
 * multiply-adds): register tiles of 4 rows x 6 tokens (24 accumulators), over row panels that stay
 * in L2 while every token passes; a tile prefetches the next tile's rows as one linear stream (a
 * core streams 4 interleaved rows at half the speed of one); the four rows' sums reduced
 * together. medium runs near twice highest's speed where the GEMM is compute-bound (prefill,
 * batches); high about as fast as highest there (two passes), faster on FP8 weights (decoded 32
 * at a time, not 8); single-sequence decode is memory-bound in every mode. bench/RESULTS.md has
 * the numbers.
 *
 *     uint16_t *xb = ...cpu_bf16_x_elems(T, K, passes)...;
 *     cpu_bf16_split(x, T, K, passes, xb);
 *     cpu_bf16_matmul_rows(x, xb, T, passes, w, n0, n1, y, ldy, scratch);
 */
#ifndef TACHYON_CPU_BF16_H
#define TACHYON_CPU_BF16_H

#include <stdbool.h>
#include <stdint.h>

#include "weights.h"

/* True when this CPU has AVX512-F/BW/VL and AVX512-BF16 (checked once). */
bool cpu_bf16_supported(void);

/* True when w can be multiplied here: BF16, or block FP8 whose block_k is a multiple of 32, with
 * its values in memory (lazy dummy tensors and other dtypes take the f32 path). */
bool cpu_bf16_takes(const wtensor_t *w);

/* Elements of the bf16 activations of T rows of K columns: T * passes * round_up(K, 32). */
int64_t cpu_bf16_x_elems(int T, int64_t K, int passes);

/* x [T, K] f32 to xb [T][passes][round_up(K, 32)] bf16 (round to nearest even): pass 0 is
 * bf16(x), pass 1 bf16(x - pass 0); the columns past K are zero. passes is 1 or 2. */
void cpu_bf16_split(const float *x, int T, int64_t K, int passes, uint16_t *xb);

/* Scratch floats cpu_bf16_matmul_rows needs for weights of K columns (FP8: the activations
 * times a block's scales, and a panel of decoded rows). */
int64_t cpu_bf16_scratch_floats(int64_t K);

/* y[t][n] = x[t] . W[n] for t < T and n in [n0, n1), y [T, ldy] f32, x [T, K = w->cols] f32.
 * BF16 weights read xb, cpu_bf16_split(x, T, K, passes, ..) made once for every thread; FP8
 * weights split x times each 128-row block's scales themselves (the scale folded into the
 * activations: x[k] s[k / block_k] in f32, then split), xb unused. scratch: at least
 * cpu_bf16_scratch_floats(K) floats. Only when cpu_bf16_supported() and cpu_bf16_takes(w). */
void cpu_bf16_matmul_rows(const float *x, const uint16_t *xb, int T, int passes, const wtensor_t *w,
                          int64_t n0, int64_t n1, float *y, int64_t ldy, float *scratch);

#endif

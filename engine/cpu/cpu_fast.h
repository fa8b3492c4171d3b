/*
 * cpu_fast: the vector fast paths of the CPU backend (AVX2 + FMA, chosen at run time), beside
 * the scalar reference kernels of cpu_ops.h and bit-identical to them.
 *
 * The reference sums every dot product in 8 lanes (lane k % 8, one fmaf after another along k)
 * and then reduces the lanes in a fixed tree. An AVX2 register of 8 f32 is exactly those 8
 * lanes, so these kernels keep the reference's order (one accumulator register per output,
 * walked along the whole of K, the same reduction tree) while they change everything else:
 *
 * - GEMM (cpu_fast_matmul_rows): a register tile of 3 weight rows x 4 tokens (12 accumulators)
 *   over a panel of weight rows dequantized once to f32 for the whole batch (sized to stay in
 *   L2), so each weight is read from memory once per step and each activation row is reused
 *   from L1 across the panel; with 1 to 3 tokens (decode), 4 weight rows are read and converted
 *   inside registers (BF16 by a shift, F16 by F16C, block-scaled FP8 by bit moves and its scale),
 *   with no f32 buffer in between, the next 4 rows prefetched as one stream. Four accumulators
 *   are reduced together in transposed registers (the same pairs as the reference's tree).
 * - attention (cpu_fast_attention): the query heads that share a KV head are done together, so
 *   each K and V row of the paged cache is loaded once for all of them, block run by block run;
 *   QK and PV are vectorized (QK over several keys at once, so that the scores' FMA chains
 *   overlap), softmax stays the reference's (expf, the same sum order).
 *
 * Results equal the reference bit for bit (tests/unit/test_cpu_fast.c checks it on odd shapes and
 * every dtype), so the fast paths need no tolerance of their own, and the backend's bit-identity
 * across thread counts and batch compositions holds with them on. The inner loops are left out of
 * the sanitizers as cpu_ops.c's are (their spans are bounded by their callers).
 */
#ifndef TACHYON_CPU_FAST_H
#define TACHYON_CPU_FAST_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu_ops.h"
#include "weights.h"

/* True when this CPU runs the fast paths (AVX2, FMA and F16C; checked once). */
bool cpu_fast_supported(void);

/* Scratch floats cpu_fast_matmul_rows wants for weights of K columns: a panel of f32 rows. */
int64_t cpu_fast_scratch_floats(int64_t K);

/* cpu_matmul_rows, bit for bit, on the vector units: y[t][n] = x[t] . W[n] for t < T and n in
 * [n0, n1); scratch of scratch_floats floats (at least 3 * K; cpu_fast_scratch_floats(K) for
 * full speed). Only when cpu_fast_supported(). */
void cpu_fast_matmul_rows(const float *x, int T, const wtensor_t *w, int64_t n0, int64_t n1,
                          float *y, int64_t ldy, float *scratch, int64_t scratch_floats);

/* cpu_attention_head, bit for bit, for token t of sequence s and every query head of KV head
 * kvh at once. scores: scratch of (n_heads / n_kv_heads) * context_len[s] floats. */
void cpu_fast_attention(const cpu_attn_t *a, int s, int t, int kvh, float *scores);

#endif

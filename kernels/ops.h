/*
 * ops: the CUDA kernels of one Qwen3 forward step and the GPU sampler, as C-callable launchers.
 *
 * The backend (cuda_backend.cu, cb_*.cu) owns every buffer; these functions only enqueue kernels on
 * the given stream. None of them synchronizes the host, allocates memory or reads device data on
 * the host, so all of them can be captured in a CUDA graph: per-step metadata (positions, slot
 * mapping, block tables, ...) is read through device pointers, and every grid size depends only
 * on host integers the caller passes (capacities under graphs, actual sizes otherwise).
 * Every launcher returns 0, or -1 with err filled (bad arguments, or a launch error).
 *
 *     ops_init(&err);                                         // once, after cudaSetDevice
 *     ops_embed(embed, ids, T, H, resid, stream, &err);       // resid = embed[ids]
 *     for each layer:
 *         ops_add_rmsnorm_fp8(resid, NULL|o_out, ..., xq, xs, T_pad, ...);   // attn norm
 *         QKV GEMM -> qkv
 *         ops_qk_norm_rope_kv(qkv, ..., q, k_cache[l], v_cache[l], ...);
 *         ops_attention_prefill(...) or ops_attention_decode(...)            -> att
 *         ops_quant_fp8(att, ...)                                            -> o_proj input
 *         o_proj GEMM -> o_out
 *         ops_add_rmsnorm_fp8(resid, o_out, ...)                             // mlp norm
 *         gate_up GEMM -> gu
 *         ops_silu_mul_fp8(gu, ...)                                          -> down input
 *         down GEMM -> d_out   (added to resid by the next layer's norm)
 *     ops_add_rmsnorm_bf16(resid, d_out, logit_rows, n_logits, ...)          // final norm
 *     lm_head GEMM -> logits [n_logits, V] f32
 *     ops_sample(logits, ...)
 *
 * Numerics (why these dtypes): the residual stream is f32 [T, H], as in the CPU reference, so
 * the many residual additions of a deep model do not accumulate bf16 rounding; everything a GEMM
 * reads is bf16 or fp8 e4m3 (cuBLASLt's input types); GEMM outputs may be bf16 or f32 (every
 * kernel that reads one takes an ops_dtype_t), and every reduction (norms, softmax, attention
 * dot products) accumulates in f32. Norm weights and RoPE inverse frequencies are f32 on the
 * device (the backend converts the checkpoint's bf16 norm weights exactly and computes the
 * frequencies with cpu_rope_inv_freq, so both backends use the same bits).
 *
 * FP8 activations (reference kernels.md 1.4-1.5, 2.4): per token, per group of 128 columns,
 * s = max(amax, 1e-10) / 448, q = e4m3(clamp(x / s, -448, 448)) (division, as the CPU's
 * cpu_quant_fp8_rows). The e4m3 matrix is [T_pad, K_pad] row-major (K_pad >= K, columns K..
 * K_pad-1 written as zero) and the scales are TRANSPOSED, f32 [ceil(K_pad / 128), T_pad]: scale
 * of token t and group g at g * T_pad + t, the VEC128_32F "N-major" B-scale layout for
 * B = activations, n = T_pad. T_pad is T rounded up to a multiple of 4 (cuBLASLt requires it);
 * rows T..T_pad-1 are written as zeros with scale 0, so the padded GEMM columns are finite.
 *
 * KV cache: per layer one K pool and one V pool, each [num_blocks, block_size, n_kv_heads,
 * head_dim] of bf16 (OPS_KV_BF16) or fp8 e4m3 (OPS_KV_FP8, value = e4m3 * k_scale or v_scale,
 * per-tensor scales as vLLM takes them: 1.0 by default, a checkpoint's when it has them). The K and
 * V of the token at slot s = block * block_size + offset start at element s * n_kv_heads *
 * head_dim. block_size is 16 or 32; pools must be 16-byte aligned (cudaMalloc is).
 * ops_kv_pool_bytes() gives one pool's size.
 *
 * Shapes supported: head_dim 64 or 128 (256 in the attention kernels and the gated q/k kernel,
 * with a group of at most 8: Qwen3.5); n_heads a multiple of n_kv_heads with a group
 * (n_heads / n_kv_heads) of at most 16; hidden and intermediate sizes multiples of 8.
 */
#ifndef TACHYON_OPS_H
#define TACHYON_OPS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The engine headers have no guards of their own: C linkage for them here too. */
#include "err.h"
#include "sampler.h"

/* Element type of a GEMM output that a kernel reads. */
typedef enum ops_dtype { OPS_BF16 = 0, OPS_F32 = 1 } ops_dtype_t;

/* Element type of the KV cache (the kv-cache-dtype flag: auto = bf16, fp8 = e4m3). */
typedef enum ops_kv_dtype { OPS_KV_BF16 = 0, OPS_KV_FP8 = 1 } ops_kv_dtype_t;

#define OPS_FP8_GROUP 128 /* columns per activation scale */
#define OPS_MAX_GROUP 16  /* largest n_heads / n_kv_heads the attention kernels handle */

/* Sets per-kernel attributes (dynamic shared memory above 48 KiB) on the current device. Call
 * once per device before any launcher, outside graph capture. */
int ops_init(err_t *err);

/* ---- sizes (host functions) ----------------------------------------------------------------- */

/* T rounded up to a multiple of 4: rows of an fp8 GEMM input and the scales' leading size. */
int ops_pad_tokens(int T);

/* Bytes of one K (or V) pool of one layer. */
size_t ops_kv_pool_bytes(int num_blocks, int block_size, int n_kv_heads, int head_dim,
                         ops_kv_dtype_t dtype);

/* ---- embedding and norms -------------------------------------------------------------------- */

/* resid[t, :] = f32(table[ids[t], :]).
 * table [vocab, H] bf16; ids [T] int32 device (must be in range: the engine checks them);
 * resid [T, H] f32. */
int ops_embed(const void *table, const int32_t *ids, int T, int H, float *resid,
              cudaStream_t stream, err_t *err);

/* Residual add + RMSNorm, bf16 output (unquantized layers, the final norm before the lm_head).
 * For i < n_rows, r = rows ? rows[i] : i:
 *     if add: resid[r, :] += add[r, :]  (written back; add [*, H] of add_dtype, row stride H)
 *     out[i, :] = bf16(w * (resid[r, :] * rsqrt(mean(resid[r, :]^2) + eps)))
 * resid [*, H] f32 (in place); w [H] f32; out [n_rows, H] bf16; rows [n_rows] int32 device or
 * NULL (the final norm gathers the logit rows with it). */
int ops_add_rmsnorm_bf16(float *resid, const void *add, ops_dtype_t add_dtype, const int32_t *rows,
                         int n_rows, int H, const float *w, float eps, void *out,
                         cudaStream_t stream, err_t *err);

/* The same with FP8 output for a block-FP8 GEMM: out [T_pad, H] e4m3 (1 byte each), scales
 * [ceil(H / 128), T_pad] f32 (transposed, see above), T_pad = ops_pad_tokens(n_rows) or more
 * (a graph's capacity); rows n_rows..T_pad-1 are zero-filled. The normalized f32 values are
 * quantized directly (no bf16 rounding in between), as the CPU's W8A8 emulation does. */
int ops_add_rmsnorm_fp8(float *resid, const void *add, ops_dtype_t add_dtype, const int32_t *rows,
                        int n_rows, int T_pad, int H, const float *w, float eps, void *out,
                        float *scales, cudaStream_t stream, err_t *err);

/* ---- attention input: q/k norm, RoPE, KV write ---------------------------------------------- */

typedef struct ops_qkv_args {
    const void *qkv;       /* [T, (n_heads + 2 * n_kv_heads) * head_dim]: q | k | v per row, the
                              fused QKV GEMM output (row stride ld_qkv elements) */
    ops_dtype_t qkv_dtype; /* OPS_BF16 or OPS_F32 */
    int64_t ld_qkv;        /* elements between rows (>= the row width) */
    int T;
    int n_heads, n_kv_heads, head_dim;
    const float *q_norm, *k_norm; /* [head_dim] f32 RMSNorm weights */
    float eps;
    const float *inv_freq;       /* [head_dim / 2] f32 (cpu_rope_inv_freq) */
    const int32_t *positions;    /* [T] device */
    const int64_t *slot_mapping; /* [T] device; -1: the token's K/V are not written */
    void *q_out;                 /* [T, n_heads, head_dim] bf16 */
    void *k_cache, *v_cache;     /* this layer's pools (layout above) */
    ops_kv_dtype_t kv_dtype;
    float k_scale, v_scale; /* fp8 cache: stored = e4m3(x / scale), saturated to +-448 */
    int block_size;         /* tokens per block (only the slot matters here) */
} ops_qkv_args_t;

/* Per token: q and k heads get RMSNorm over head_dim (q_norm / k_norm) then NeoX RoPE at the
 * token's position (dims j and j + head_dim/2 rotate by pos * inv_freq[j]); q goes to q_out, k
 * and v (v untouched) to the caches at slot_mapping[t]. Same f32 operation order as cpu_ops. */
int ops_qk_norm_rope_kv(const ops_qkv_args_t *a, cudaStream_t stream, err_t *err);

/* Qwen3.5's gated full attention (ATTN_GATED, kernels/gated.cu): qkv rows are
 * [q_0 | gate_0 | q_1 | gate_1 | ... | k | v] (q_proj's per-head [q_h | gate_h], then k, v; the
 * row width 2 n_heads head_dim + 2 n_kv_heads head_dim). Otherwise as ops_qk_norm_rope_kv, with
 * RoPE on each head's first rotary_dim dims only (pairs (j, j + rotary_dim / 2); inv_freq
 * [rotary_dim / 2]) and the norm weights as given (Qwen3.5's 1 + w applied by the caller).
 * head_dim a multiple of 32 up to OPS_GATED_MAX_HEAD_DIM. */
#define OPS_GATED_MAX_HEAD_DIM 256
int ops_gated_qk_norm_rope_kv(const ops_qkv_args_t *a, int rotary_dim, cudaStream_t stream,
                              err_t *err);

/* att[t, h D + d] = bf16(att[t, h D + d] * sigmoid(gate_h[d])): the output gate, read from the
 * same qkv rows (gate_h at column h 2D + D). att [T, n_heads, head_dim] bf16, in place. */
int ops_output_gate(void *att, const void *qkv, ops_dtype_t qkv_dtype, int64_t ld_qkv, int T,
                    int n_heads, int head_dim, cudaStream_t stream, err_t *err);

/* The MTP head's fc input (Qwen3.5, models.md 4.8), for t < T:
 *     out[t, 0 .. H)  = bf16(w_e * rmsnorm(embed[ids[t], :]))      the next token's embedding
 *     out[t, H .. 2H) = bf16(w_h * rmsnorm(hidden[rows[t], :]))    the hidden state it goes with
 * embed [V, H] bf16; hidden [*, H] bf16; ids, rows [T] int32 device (in range: the caller checks);
 * w_e, w_h [H] f32 (1 + w applied); out [T, 2H] bf16. (kernels/gated.cu) */
int ops_mtp_input(const void *embed, const int32_t *ids, const void *hidden, const int32_t *rows,
                  int T, int H, const float *w_e, const float *w_h, float eps, void *out,
                  cudaStream_t stream, err_t *err);

/* Between two chained MTP draft passes of one token a sequence, on the device (kernels/gated.cu),
 * for s < n: drafts[s] = res[s].token (the pass's argmax, ops_sample at temperature 0); with
 * advance, the next pass's metadata from it: ids[s] = that token, rows[s] = s (the hidden row is
 * the pass's own output), and one position on, p = pos[s] + 1, while p <= last_pos[s]: pos[s] = p,
 * ctx[s] = p + 1, slots[s] = tables[s stride + p / block_size] block_size + p % block_size;
 * past it slots[s] = -1 and the position stays (recomputed, nothing written). Device arrays. */
int ops_mtp_advance(int n, const sampler_result_t *res, int32_t *drafts, int advance, int32_t *ids,
                    int32_t *pos, int64_t *slots, int32_t *ctx, const int32_t *tables, int stride,
                    int block_size, const int32_t *last_pos, int32_t *rows, cudaStream_t stream,
                    err_t *err);

/* ---- attention ------------------------------------------------------------------------------- */

typedef struct ops_attn_args {
    const void *q; /* [n_tokens, n_heads, head_dim] bf16 (ops_qk_norm_rope_kv's q_out) */
    void *out;     /* [n_tokens, n_heads, head_dim] bf16 */
    const void *k_cache, *v_cache; /* this layer's pools */
    ops_kv_dtype_t kv_dtype;
    float k_scale, v_scale; /* fp8 cache only: value = e4m3 * scale */
    int n_seqs;
    int n_tokens; /* query_start[n_seqs] (0: unknown; prefill then sizes its grid by max_q_len) */
    int n_heads, n_kv_heads, head_dim, block_size;
    const int32_t *query_start;  /* [n_seqs + 1] device */
    const int32_t *context_len;  /* [n_seqs] device: tokens of context including this step's */
    const int32_t *block_tables; /* [n_seqs, block_table_stride] device */
    int block_table_stride;
    float scale; /* softmax scale, 1 / sqrt(head_dim) */
    /* A mixed batch split by query count (1 = yes): ops_attention_decode runs only the
     * sequences with one query token (the decodes), ops_attention_prefill only the others; each
     * leaves the other's rows of out alone. 0: prefill runs every sequence, and decode requires
     * one query token for each. */
    int mixed;
} ops_attn_args_t;

/* Varlen causal attention over the paged cache for any batch (prefill chunks after a cached
 * prefix, decodes, or both): query token i of sequence s (local index i in [0, n_new)) attends to
 * keys 0 .. context_len[s] - n_new + i. max_q_len >= max over s of the query count. The grid is
 * flat over every sequence's tiles (R rows of token x query head each: 64 for head_dim 128 and
 * 256, on tensor cores; 32 for 64), about n_tokens * G / R + n_seqs CTAs per KV head when
 * a->n_tokens is set, so a long prompt mixed with many decodes costs no idle CTAs. The K/V of this
 * step's tokens must already be in the cache (ops_qk_norm_rope_kv). A sub-range of sequences can be
 * run alone by offsetting query_start, context_len and block_tables (token offsets stay absolute),
 * e.g. decodes through ops_attention_decode and the rest here. */
int ops_attention_prefill(const ops_attn_args_t *a, int max_q_len, cudaStream_t stream, err_t *err);

/* Split count for ops_attention_decode: 1 when n_seqs * n_kv_heads CTAs already fill the GPU,
 * else enough splits to fill about two waves, each split covering at least 256 keys of
 * max_context, at most max_splits. Under CUDA graphs pass the capture's batch size and the
 * largest context the graph may see (max-model-len): the kernel sizes each sequence's splits
 * from its real context length on the device, so the grid stays fixed. */
int ops_attention_decode_splits(int n_seqs, int n_kv_heads, int max_context, int num_sms,
                                int max_splits);

/* Bytes of the decode workspace for up to max_seqs sequences and max_splits splits. A call with
 * n_seqs and num_splits uses log-sum-exps [n_seqs, n_heads, num_splits] f32, then partial outputs
 * [n_seqs, n_heads, num_splits, head_dim] f32 at the next 16-byte boundary. Allocate it once
 * (256-byte aligned, as cudaMalloc is). */
size_t ops_attention_workspace_bytes(int max_seqs, int n_heads, int head_dim, int max_splits);

/* Decode attention: every sequence has exactly one query token (query_start[s+1] - query_start[s]
 * == 1; with a->mixed, only those sequences are run), which attends to all context_len[s] keys. The
 * n_heads / n_kv_heads query heads of one KV head share one CTA (K/V read once for the group). With
 * num_splits > 1 each sequence's keys are cut into num_splits chunks processed in parallel
 * (Flash-Decoding) whose partial results go to workspace and are merged by log-sum-exp; workspace
 * may be NULL when num_splits == 1. n_seqs and num_splits must be within the max_seqs and
 * max_splits the workspace was sized for. */
int ops_attention_decode(const ops_attn_args_t *a, int num_splits, void *workspace,
                         cudaStream_t stream, err_t *err);

/* The kernels behind ops_attention_prefill / _decode: head_dim 128 and 256 run on tensor cores
 * (mma.sync; decode as the prefill kernel's rows of one token with its keys split, so that a
 * token's result is the same in a prefill chunk, a decode or a mixed step when num_splits is
 * 1), head_dim 64 on CUDA cores. These two run the CUDA-core kernels for every head_dim (32-row
 * prefill tiles, one key per lane), for comparisons (perf_prefill_attention, perf_attention). */
int ops_attention_prefill_simt(const ops_attn_args_t *a, int max_q_len, cudaStream_t stream,
                               err_t *err);
int ops_attention_decode_simt(const ops_attn_args_t *a, int num_splits, void *workspace,
                              cudaStream_t stream, err_t *err);

/* ---- standalone quantization and the MLP activation ------------------------------------------ */

/* Per-token-group FP8 quantization of x [T, K] (row stride ld_x elements, x_dtype) into out
 * [T_pad, K_pad] e4m3 and scales [ceil(K_pad / 128), T_pad] f32 (layout above); used for the
 * attention output before o_proj. K_pad >= K, both multiples of 4. */
int ops_quant_fp8(const void *x, ops_dtype_t x_dtype, int64_t ld_x, int T, int K, int T_pad,
                  int K_pad, void *out, float *scales, cudaStream_t stream, err_t *err);

/* SwiGLU over the fused gate_up GEMM output gu [T, 2 * I] (gate in columns [0, I), up in
 * [I, 2I), row stride ld_gu elements, gu_dtype): y = gate / (1 + exp(-gate)) * up in f32.
 * _bf16: out [T, I] bf16. _fp8: out [T_pad, I_pad] e4m3 + scales [ceil(I_pad / 128), T_pad]
 * (I_pad >= I, zero columns beyond I, for a down_proj whose K the backend padded). */
int ops_silu_mul_bf16(const void *gu, ops_dtype_t gu_dtype, int64_t ld_gu, int T, int I, void *out,
                      cudaStream_t stream, err_t *err);
int ops_silu_mul_fp8(const void *gu, ops_dtype_t gu_dtype, int64_t ld_gu, int T, int I, int T_pad,
                     int I_pad, void *out, float *scales, cudaStream_t stream, err_t *err);

/* ---- sampling -------------------------------------------------------------------------------- */

/* One row's sampling request, as sampler.h's sampler_row_t with its params resolved, flattened
 * for the device. Token lists live in one int32 arena (device) addressed by offsets. */
typedef struct ops_sample_row {
    float temperature; /* < 1e-5: greedy (argmax after masks and penalties) */
    float top_p;       /* (0, 1] */
    float min_p;       /* [0, 1] */
    float presence_penalty, frequency_penalty, repetition_penalty;
    int32_t top_k;      /* 0 = off */
    int32_t min_tokens; /* mask ids are applied while n_output < min_tokens */
    int32_t logprobs;   /* -1: none; else the sampled logprob plus this many top ones (<= 20) */
    int32_t n_output;   /* tokens generated so far by this choice: the rng index */
    uint64_t seed;
    int32_t choice;
    int32_t n_prompt_tokens; /* prompt ids at arena[prompt_off ...]: 0 unless rep. penalty != 1 */
    int64_t prompt_off;
    int32_t n_output_tokens; /* output ids at arena[output_off ...]: 0 unless a penalty is on */
    int32_t n_mask;          /* EOS + stop ids at arena[mask_off ...] (masked per min_tokens) */
    int64_t output_off;
    int64_t mask_off;
} ops_sample_row_t;

/* Bytes of the sampler workspace: an int32 occurrence count per (row, vocab id),
 * [max_rows, vocab]. It must be zeroed once after allocation (cudaMemset); each ops_sample
 * call leaves it zero again. */
size_t ops_sample_workspace_bytes(int max_rows, int vocab);

/* Samples row i of logits [n_rows, ld_logits] f32 (vocab columns; not modified) with rows[i]
 * (device array of ops_sample_row_t) and writes out[i] (device array of sampler_result_t, the
 * host struct of sampler.h, so the backend copies it back as is). Semantics are sampler.h's:
 * raw logprobs, min_tokens masks, repetition / frequency / presence penalties, temperature,
 * min_p, top_k (exact k, ties lower id first), top_p, then the draw at
 * u = (rng_bits(seed, choice, n_output) >> 11) * 2^-53 in canonical order; nothing sorts the
 * vocabulary (radix selection over the float keys). Masses are summed in 2^-40 fixed point so
 * a row's result is deterministic and independent of the other rows. One CTA per row.
 * counts: ops_sample_workspace_bytes(n_rows, vocab) or more, zeroed. */
int ops_sample(const float *logits, int64_t ld_logits, int n_rows, int vocab,
               const ops_sample_row_t *rows, const int32_t *arena, void *counts,
               sampler_result_t *out, cudaStream_t stream, err_t *err);

/* Asynchronous scheduling's placeholders (backend_ops_t.sample_begin): every ids[i] < 0 of the
 * device array ids [n] becomes res[-(1 + ids[i])].token, the id an ops_sample call wrote there
 * (its out). */
int ops_resolve_placeholders(int32_t *ids, int n, const sampler_result_t *res, cudaStream_t stream,
                             err_t *err);

#ifdef __cplusplus
}
#endif

#endif

/*
 * cpu_backend_int: the CPU backend's instance and the layer passes it shares between its files
 * (cpu_backend.c: create, the pool, forward; cpu_mtp.c: the MTP head). Not an interface: the
 * backend's is backend.h's cpu_backend_ops.
 */
#ifndef TACHYON_CPU_BACKEND_INT_H
#define TACHYON_CPU_BACKEND_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cpu_gdn.h"
#include "cpu_moe.h"
#include "cpu_pool.h"
#include "model.h"
#include "shard.h"
#include "weights.h"

/* A layer's weights by slot (weights.h), those of its kinds bound: the checkpoint's tensors, and
 * f32 copies of the small ones (norm vectors, with Qwen3.5's 1 + w applied; the Gated
 * DeltaNet's parameters and conv weight). */
typedef struct cpu_layer {
    const wtensor_t *w[L_COUNT];
    const float *norm[L_COUNT]; /* [rows, cols] f32, small slots only */
    int linear;                 /* ATTN_LINEAR: its ordinal among the linear layers */
    int kv;                     /* ATTN_FULL, ATTN_GATED: its place in the KV pool (kv_layers) */
    float k_scale, v_scale;     /* the fp8 KV cache's scales (weights_kv_scales) */
    /* ATTN_LINEAR: in_proj_qkv and conv1d as q | k | v parts (shard_qkv; at tp 1 one whole
     * tensor at [0]) */
    const wtensor_t *qkv[3], *conv[3];
    cpu_moe_weights_t moe; /* MLP_MOE */
} cpu_layer_t;

typedef struct cpu_backend {
    backend_t base;
    const model_config_t *cfg; /* &lcfg */
    model_config_t lcfg;       /* the config this rank computes with (shard_config) */
    shard_t shard;             /* which rank of how many (tp 1: the whole model) */
    wtensor_t *views;          /* tp > 1: this rank's shards of the checkpoint's tensors */
    int64_t v0, vn, vpad;      /* lm_head rows [v0, v0 + vn) held; the widest rank's share */
    int n_threads;
    bool emulate_fp8;
    bool fast;    /* cpu_fast.h's kernels, else cpu_ops.h's */
    bool bf16_ok; /* fast, and the CPU has AVX512-BF16 (cpu_bf16_supported) */
    /* the cpu-matmul-precision (cpu_matmul_precision_t): GEMMs of BF16 and FP8 weights on
     * cpu_bf16.h's kernels with 2 passes (high) or 1 (medium) where bf16_ok; set by `configure`
     * on the engine thread, read by `describe` on any: atomic */
    _Atomic int precision;
    cpu_pool_t *pool;

    const wtensor_t *embed, *lm_head;
    cpu_layer_t *layers;
    float *norms;      /* f32 copies of every small weight (tiny) */
    float *final_norm; /* [H], inside norms */
    float *inv_freq;   /* [rotary_dim / 2] */
    int half;          /* rotary_dim / 2: RoPE pairs (j, j + half) of each head's first dims */
    cpu_gdn_t *gdn;    /* Gated DeltaNet layers and their state slots, when the model has any */
    bool ssm_bf16;     /* state slots keep the SSM state rounded to bf16 */
    bool kv_fp8;       /* --kv-cache-dtype fp8: K and V rounded through e4m3 as they are written
                          (the cuda backend's cache, its scales), kept in the f32 pool */
    bool kv_fp8_next;  /* configure's, from the next kv_reserve (the engine rebuilds after it) */
    bool kv_scales;    /* the checkpoint gave k/v scales (weights_kv_scales_loaded) */
    int kmax;          /* widest GEMM input: the most columns of any linear (H, nH*D, I) */
    cpu_moe_t *moe;    /* scratch of the MLP_MOE layers; NULL without */
    uint64_t *expert_counts; /* [n_layers][n_experts] tokens routed since create */
    int32_t *trace;          /* trace_routing's [n_layers][T][k], or NULL */

    /* The MTP head (cpu_mtp.c): its layers are layers[n_layers .. n_layers + n_mtp) (0 without
     * mtp.* tensors), sharded as the decoder's at tp > 1 (fc and norms whole on every rank, the
     * lm_head vocab-parallel as the model's); the pool holds their K/V after the
     * decoder's while `mtp` (backend_options_t.mtp at the last kv_reserve; mtp_next from the
     * next one), and forward then keeps every token's final-norm output in `hid`. */
    int n_mtp;
    bool mtp, mtp_next;
    const wtensor_t *mtp_fc;                            /* [H, 2H] */
    const wtensor_t *mtp_norm_w[3];                     /* embedding, hidden, output norms */
    float *mtp_embed_norm, *mtp_hidden_norm, *mtp_norm; /* [H] each, 1 + w applied */
    float *hid;     /* [T, H] the last forward's final-norm output (mtp) */
    int hid_rows;   /* its tokens */
    float *hid_mtp; /* [T, H] the last mtp_forward's output (mtp.norm) */
    int hid_mtp_rows;
    float *cat;        /* [T, 2H] the fc's input */
    float *mtp_logits; /* [cap_mtp_logits floats] logits of a pass asked for drafts only */
    size_t cap_mtp_logits;

    /* KV pool, f32 [kv layers][num_blocks][n_kv_heads][block_size][head_dim] each (cpu_ops.h: a
     * head's rows of a block together): the softmax attention layers only (kv_layers), in layer
     * order; a Gated DeltaNet layer keeps no K/V */
    float *k_pool, *v_pool;
    int num_blocks, block_size;
    size_t layer_floats;

    /* Activations for up to cap_tokens tokens, grown when a larger batch arrives. */
    int cap_tokens;
    float *h;         /* [T, H] residual stream */
    float *xn;        /* [T, H] normed input, then projection outputs */
    float *q;         /* [T, nH*D] */
    float *qg;        /* [T, nH*2D] ATTN_GATED's q_proj output: [q_h | gate_h] per head */
    float *k, *v;     /* [T, nKV*D] */
    float *att;       /* [T, nH*D] attention output */
    float *gate;      /* [T, I] */
    float *up;        /* [T, I] */
    float *aq;        /* [T, kmax] GEMM input after W8A8 quantization */
    uint16_t *xb;     /* [T, 2, round32(kmax)] a BF16 GEMM's input split to bf16 (where the CPU
                         has the bf16 kernels) */
    float *rope_cos;  /* [T, half] */
    float *rope_sin;  /* [T, half] */
    int32_t *tok_seq; /* [T] sequence of each token */
    float *part;      /* [T, H] (tp > 1) an MoE layer's partial output, before the all-reduce */
    int cap_logits;   /* rows of lg_rank and lg_all (tp > 1) */
    float *lg_rank;   /* [cap_logits, vpad] this rank's logits */
    float *lg_all;    /* [tp, cap_logits, vpad] every rank's, all-gathered */

    float **wbuf;        /* [n_threads][wbuf_floats] dequantized weight rows */
    int64_t wbuf_floats; /* CPU_MM_ROWS * kmax, or a fast GEMM's panel */
    float **scores;      /* [n_threads][heads per KV head * cap_ctx] attention scores */
    int64_t cap_ctx;
    int64_t max_ctx; /* longest context of the current batch */
} cpu_backend_t;

/* y[T, N] (row stride ldy) = x[T, K] W^T, quantizing x first when W8A8 is emulated. */
void cpu_be_gemm(cpu_backend_t *be, const float *x, int T, const wtensor_t *w, float *y,
                 int64_t ldy);

/* Checks the batch and sizes the buffers for it (logits: the caller's output, needed when the
 * batch has logit rows). */
int cpu_be_prepare(cpu_backend_t *be, const be_batch_t *b, const float *logits, err_t *err);

/* Each token's RoPE angles, from the batch's positions. */
void cpu_be_rope(cpu_backend_t *be, const be_batch_t *b);

/* logits [n, V] of the normed rows xn[0..n) through lm_head: the whole vocabulary at tp 1, the
 * rank's rows all-gathered at tp > 1 (every rank takes part; rank 0 writes logits). */
int cpu_be_logits(cpu_backend_t *be, int n, float *logits, err_t *err);

/* h += layer `layer`'s attention, then its MLP (any kind), over the batch. */
int cpu_be_layer(cpu_backend_t *be, const be_batch_t *b, int layer, err_t *err);

/* cpu_mtp.c: binds the MTP layers' shared tensors (fc, the three norms), checking their shapes
 * (the layers themselves are bound as decoder layers); adds their small floats to
 * *norm_floats and widens be->kmax. be->n_mtp 0: nothing. */
int cpu_mtp_bind(cpu_backend_t *be, const model_weights_t *w, size_t *norm_floats, err_t *err);

/* cpu_mtp.c: the f32 copies of the MTP norms, taken from *cursor. */
void cpu_mtp_take_norms(cpu_backend_t *be, float **cursor);

/* cpu_mtp.c: backend_ops_t.mtp_forward. */
int cpu_mtp_forward(backend_t *base, const be_batch_t *b, const int32_t *hidden_rows, int step,
                    float *logits, int32_t *argmax, err_t *err);
/* cpu_mtp.c: backend_ops_t.mtp_chain, as the cuda backend's (ops_mtp_advance's rule) with the
 * passes one after another through cpu_mtp_forward. */
int cpu_mtp_chain(backend_t *base, const be_batch_t *b, const int32_t *hidden_rows, int first_step,
                  int n_steps, const int32_t *last_pos, int32_t *drafts, err_t *err);

#endif

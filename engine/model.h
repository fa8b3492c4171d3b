/*
 * model: what a model is (config.json -> model_config_t) and the table of architectures.
 *
 * The architecture table maps config.json's `model_type` to the architecture's home in
 * engine/arch/ (one file each): the code that reads its fields, the tensors its checkpoints hold
 * (weights.h) and what each of its layers is (model_layer_t: an attention kind and an MLP kind,
 * on which both backends dispatch). Qwen3 dense, Qwen3-MoE and Qwen3.5 (hybrid: Gated DeltaNet
 * linear attention and gated full attention) are implemented.
 *
 *     model_config_t cfg;
 *     if (model_config_load(dir, &cfg, &err) < 0) ...          // from config.json
 *     if (model_config_preset("qwen3-14b", &cfg, &err) < 0) ... // built-in shapes
 */
#ifndef TACHYON_MODEL_H
#define TACHYON_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"
#include "mdir.h"

typedef struct model_arch model_arch_t;

/* The layer kinds the backends implement. A layer is one token mixer (attn_kind_t) then one MLP
 * (mlp_kind_t), each a pre-norm residual block: h += block(rmsnorm(h)). New kinds come with the
 * architectures that need them (Qwen3.5: gated full attention and Gated DeltaNet linear
 * attention; Qwen3-MoE: the sparse MoE MLP); each backend then implements them in its dispatch
 * (a switch per kind, so the compiler names every backend a new kind is missing from). */
typedef enum attn_kind {
    ATTN_FULL,   /* causal softmax attention over the paged KV cache: GQA, q/k RMSNorm, NeoX RoPE
                    on the first rotary_dim dims of each head */
    ATTN_GATED,  /* ATTN_FULL whose q_proj also yields a per-head output gate: q_proj rows are
                    [q_h | gate_h] for each head h, and the attention output is multiplied by
                    sigmoid(gate) before o_proj (Qwen3.5 full_attention, models.md 4.5) */
    ATTN_LINEAR, /* Gated DeltaNet (Qwen3.5 linear_attention, models.md 4.6): projections, causal
                    depthwise conv1d, L2-normalised q/k, the gated delta rule, a gated RMSNorm;
                    keeps a per-sequence recurrent state instead of KV blocks */
} attn_kind_t;

typedef enum mlp_kind {
    MLP_DENSE, /* SwiGLU: down(silu(gate(x)) * up(x)) */
    MLP_MOE,   /* sparse mixture of SwiGLU experts: a router picks num_experts_per_tok of
                  num_experts per token (softmax, top-k, renormalised when norm_topk_prob) and
                  the output is the routing-weighted sum of those experts' outputs */
} mlp_kind_t;

typedef struct model_layer {
    attn_kind_t attn;
    mlp_kind_t mlp;
} model_layer_t;

/* More than any Qwen model has (94); the description is kept in the config, by value. */
#define MODEL_MAX_LAYERS 256

typedef struct model_config {
    const model_arch_t *arch;
    char model_type[32]; /* config.json model_type, e.g. "qwen3" */
    char source[256];    /* where it came from: "DIR/config.json" or "preset qwen3-14b" */
    int hidden_size;     /* H */
    int n_layers;
    int n_heads; /* query heads */
    int n_kv_heads;
    int head_dim;          /* D, explicit in Qwen3 config (not H / n_heads) */
    int intermediate_size; /* I */
    int vocab_size;        /* V: rows of embed_tokens / lm_head (>= the tokenizer's vocab) */
    int max_position_embeddings;
    double rope_theta;
    float rms_norm_eps;
    bool tie_word_embeddings;
    int rotary_dim;    /* dims of each head RoPE rotates, the first ones (head_dim *
                          partial_rotary_factor; head_dim for Qwen3) */
    float norm_offset; /* RMSNorm weights apply as (norm_offset + w): 1 for Qwen3.5's zero-centred
                          weights, 0 for Qwen3 (the Gated DeltaNet's gated norm is always plain) */
    /* Gated DeltaNet (ATTN_LINEAR layers): key / value heads and their dims, the conv kernel */
    int lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim, lin_conv_kernel;
    dtype_t ssm_dtype; /* mamba_ssm_dtype: DT_F32 (Qwen3.5) or DT_BF16, the recurrent state's */
    int n_mtp_layers;  /* multi-token-prediction layers, described after the decoder layers:
                          layer[n_layers .. n_layers + n_mtp_layers), weights bound, not run */
    int bos_token_id;  /* -1 when absent */
    int eos_token_id;  /* -1 when absent; generation_config.json may list more */
    dtype_t torch_dtype;
    /* quantization_config with quant_method fp8 and weight_block_size */
    bool fp8;
    int fp8_block_n, fp8_block_k; /* 128, 128 */
    /* Mixture of experts (MLP_MOE layers); 0 for a dense model */
    int n_experts;                         /* E: num_experts */
    int n_experts_per_tok;                 /* k: num_experts_per_tok */
    int moe_intermediate_size;             /* I of each expert */
    bool norm_topk_prob;                   /* renormalise the k routing weights to sum 1 */
    model_layer_t layer[MODEL_MAX_LAYERS]; /* [n_layers + n_mtp_layers] what each layer is (the
                                              architecture's description) */
} model_config_t;

/* A bound on every width of a config (hidden, intermediate, head_dim, vocabulary, heads, experts,
 * the Gated DeltaNet's heads and head dims) and on the widths made of two of them (heads x
 * head_dim, the Gated DeltaNet's key, value and conv widths), far above any model's (the widest
 * are vocabularies of about 2^18): a hostile config.json with head_dim 10^9 made --load-format
 * dummy fill 2 GB norm vectors per layer, and products of two in-bound fields overflowed int.
 * So every derived size of model.h below fits an int. */
#define MODEL_MAX_DIM (1 << 20)

/* More parameters than any model has (the largest are about 10^12); refusing configs beyond it
 * keeps every tensor's element count and byte size far inside int64. */
#define MODEL_MAX_PARAMS 1e15

/* Parses a config.json text; `file` names it in messages. Refuses an unknown model_type, a
 * missing or invalid field, rope_scaling the engine does not implement, a width beyond
 * MODEL_MAX_DIM, and shapes that make more than MODEL_MAX_PARAMS parameters. */
int model_config_parse(const char *json_text, const char *file, model_config_t *cfg, err_t *err);

/* Reads and parses config.json of a model directory. */
int model_config_load(mdir_t *dir, model_config_t *cfg, err_t *err);

/* Built-in configs of real models, for --load-format dummy: "qwen3-0.6b", "qwen3-8b",
 * "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3.5-9b" (the Hugging Face
 * config.json texts, parsed as config.json is) and "tiny". With fp8, the preset gets the
 * quantization_config of the -FP8 checkpoints (block 128x128). */
int model_config_preset(const char *name, bool fp8, model_config_t *cfg, err_t *err);

/* NULL-terminated list of preset names, for help and completion. */
const char *const *model_preset_names(void);

/* Derived sizes. */
static inline int model_q_dim(const model_config_t *c) {
    return c->n_heads * c->head_dim;
}
static inline int model_kv_dim(const model_config_t *c) {
    return c->n_kv_heads * c->head_dim;
}
/* Gated DeltaNet: key dim (per q and k), value dim, the conv's channels (q | k | v). */
static inline int model_lin_k_dim(const model_config_t *c) {
    return c->lin_k_heads * c->lin_k_dim;
}
static inline int model_lin_v_dim(const model_config_t *c) {
    return c->lin_v_heads * c->lin_v_dim;
}
static inline int model_lin_conv_dim(const model_config_t *c) {
    return 2 * model_lin_k_dim(c) + model_lin_v_dim(c);
}

/* Layers of a kind among the decoder layers (MTP layers not counted). */
int model_count_attn(const model_config_t *c, attn_kind_t kind);

/* True when the model keeps a recurrent state per sequence (a Gated DeltaNet layer): the KV
 * manager then gives each running sequence a state slot, and prefix caching is off. */
static inline bool model_has_state(const model_config_t *c) {
    return model_count_attn(c, ATTN_LINEAR) > 0;
}

/* Bytes of one sequence's recurrent state with the SSM state in ssm_dtype (f32 or bf16) and the
 * conv state in bf16 (models.md 4.7): per linear layer Hv x dk x dv + (conv_kernel - 1) x
 * conv_dim elements. 0 for a model without linear layers. A backend may store more. */
uint64_t model_state_bytes(const model_config_t *c, dtype_t ssm_dtype);

/* Parameters in the model (embedding counted once when tied; MTP layers not counted). */
int64_t model_param_count(const model_config_t *c);

/* Parameters one token computes with: all of them for a dense model; an MoE layer counts its
 * router and num_experts_per_tok of its experts (the "A22B" of Qwen3-235B-A22B). */
int64_t model_active_param_count(const model_config_t *c);

/* A one-line summary: "qwen3 28 layers, hidden 1024, 16/8 heads x 128, ...". */
void model_config_describe(const model_config_t *c, char *buf, size_t size);

#endif

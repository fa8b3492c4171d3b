/*
 * model_arch: what an architecture provides, and the config readers its parser uses. Shared by
 * model.c (the table, generic config parsing), weights.c (tensor binding) and the architectures'
 * homes in engine/arch/. Internal to the engine.
 *
 * Adding an architecture (as Qwen3-MoE and Qwen3.5 were) means: a file engine/arch/NAME.c
 * defining a model_arch_t (a parser for its config fields that also fills the layer
 * description, and the list of tensors its checkpoints hold), its declaration below and one row
 * in model.c's table; new tensor slots in weights.h and new layer kinds in model.h when it has
 * any.
 *
 *     static int parse(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
 *         if (model_json_int(json, file, "hidden_size", -1, 1, &cfg->hidden_size, err) < 0) ...
 *         for (int l = 0; l < cfg->n_layers; l++) cfg->layer[l] = (model_layer_t){...};
 *     }
 *     const model_arch_t model_arch_x = {"x", parse, x_tensors, N_X_TENSORS};
 */
#ifndef TACHYON_MODEL_ARCH_H
#define TACHYON_MODEL_ARCH_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "model.h"

/* A dimension of a tensor, in terms of the config. */
typedef enum wdim {
    WD_ONE,      /* 1: vectors are [1, n] */
    WD_HIDDEN,   /* hidden_size */
    WD_Q,        /* num_attention_heads * head_dim */
    WD_KV,       /* num_key_value_heads * head_dim */
    WD_HEAD,     /* head_dim */
    WD_INTER,    /* intermediate_size */
    WD_VOCAB,    /* vocab_size */
    WD_Q_PROJ,   /* q_proj rows: WD_Q, twice that when the attention is gated (q | gate per head) */
    WD_2HIDDEN,  /* 2 x hidden_size (the MTP head's fc input: embedding | hidden) */
    WD_LIN_CONV, /* Gated DeltaNet conv channels: 2 x key heads x key dim + value dim */
    WD_LIN_V,    /* Gated DeltaNet value dim: value heads x value head dim */
    WD_LIN_HEADS, /* Gated DeltaNet value heads */
    WD_LIN_DV,    /* Gated DeltaNet value head dim */
    WD_CONV_K,    /* Gated DeltaNet conv kernel size */
    WD_EXPERTS,   /* num_experts */
    WD_MOE_INTER, /* moe_intermediate_size */
} wdim_t;

typedef enum wkind {
    WK_VECTOR,  /* a norm weight: float, never quantized */
    WK_EMBED,   /* an embedding table: float, never quantized */
    WK_LINEAR,  /* a projection: float, or F8_E4M3 with .weight_scale_inv when the config is fp8 */
    WK_LM_HEAD, /* the output projection: a linear, absent when tie_word_embeddings (the
                   embedding serves); BF16 in dummy FP8 weights, as real -FP8 checkpoints keep
                   it */
    WK_LINEAR_BF16, /* a projection real -FP8 checkpoints leave in BF16 (Qwen3.5's in_proj_a /
                       in_proj_b): as WK_LINEAR, but BF16 in dummy FP8 weights */
    WK_PARAM,       /* a float vector stored under its name, without ".weight" (A_log, dt_bias) */
    WK_CONV,        /* a depthwise conv1d weight [rows, 1, cols]: float, never quantized */
    WK_ROUTER,      /* a projection that FP8 checkpoints keep unquantized (the MoE router
                       `mlp.gate`, slot L_ROUTER): float only */
    WK_EXPERT,      /* a projection of one expert of an MLP_MOE layer (slot an eslot_t): as
                       WK_LINEAR, one tensor per expert; the name takes the layer, then the
                       expert index */
} wkind_t;

/* One tensor of a checkpoint. `name` is a printf pattern taking the layer index for per-layer
 * tensors, without the ".weight" suffix. A per-layer tensor is held by the layers whose kinds
 * use its slot (weights.h); a WK_EXPERT one by each MLP_MOE layer, once per expert. Names that
 * start with "mtp." belong to the multi-token-prediction head, as Qwen checkpoints name it:
 * per-layer ones are held by the MTP layers (the name takes the MTP layer's own index),
 * model-wide ones exist when the config has MTP layers. */
typedef struct wspec {
    bool per_layer;
    int slot; /* gslot_t, lslot_t or (WK_EXPERT) eslot_t (weights.h) */
    const char *name;
    wkind_t kind;
    wdim_t rows, cols;
} wspec_t;

/* Whether tensor s is part of the MTP head ("mtp." names). */
bool wspec_is_mtp(const wspec_t *s);

/* Whether s is a per-expert projection (one tensor per expert of each MLP_MOE layer). */
static inline bool wspec_per_expert(const wspec_t *s) {
    return s->kind == WK_EXPERT;
}

/* Whether layer l (decoder layers, then MTP layers) holds the per-layer tensor s. */
bool wspec_in_layer(const wspec_t *s, const model_config_t *cfg, int l);

struct model_arch {
    const char *model_type; /* config.json model_type */
    /* Reads the architecture's fields from the config object (`file` names it in messages) and
     * describes its layers: cfg->layer[0 .. n_layers). The generic fields (torch_dtype,
     * quantization_config, bos / eos ids) are read before. */
    int (*parse)(const cJSON *json, const char *file, model_config_t *cfg, err_t *err);
    const wspec_t *tensors; /* the order is part of the dummy weights' values (weights.c) */
    int n_tensors;
};

/* The architectures (engine/arch/). */
extern const model_arch_t model_arch_qwen3;
extern const model_arch_t model_arch_qwen3_moe;
extern const model_arch_t model_arch_qwen3_5;      /* Qwen3_5ForConditionalGeneration */
extern const model_arch_t model_arch_qwen3_5_text; /* Qwen3_5ForCausalLM */

/* The fields Qwen3 dense and Qwen3-MoE share (qwen3.c): the decoder's (model_json_decoder),
 * tie_word_embeddings, and sliding window, which they refuse. */
int qwen3_parse_common(const cJSON *json, const char *file, model_config_t *cfg, err_t *err);

/* The tensors Qwen3 dense and Qwen3-MoE share, the first rows of both tables: embedding, final
 * norm, lm_head, and each layer's norms and attention (the order is part of the dummy values). */
// clang-format off
#define QWEN3_SHARED_TENSORS                                                                       \
    {false, G_EMBED, "model.embed_tokens", WK_EMBED, WD_VOCAB, WD_HIDDEN},                         \
    {false, G_FINAL_NORM, "model.norm", WK_VECTOR, WD_ONE, WD_HIDDEN},                             \
    {false, G_LM_HEAD, "lm_head", WK_LM_HEAD, WD_VOCAB, WD_HIDDEN},                                \
    {true, L_ATTN_NORM, "model.layers.%d.input_layernorm", WK_VECTOR, WD_ONE, WD_HIDDEN},          \
    {true, L_Q, "model.layers.%d.self_attn.q_proj", WK_LINEAR, WD_Q, WD_HIDDEN},                   \
    {true, L_K, "model.layers.%d.self_attn.k_proj", WK_LINEAR, WD_KV, WD_HIDDEN},                  \
    {true, L_V, "model.layers.%d.self_attn.v_proj", WK_LINEAR, WD_KV, WD_HIDDEN},                  \
    {true, L_O, "model.layers.%d.self_attn.o_proj", WK_LINEAR, WD_HIDDEN, WD_Q},                   \
    {true, L_Q_NORM, "model.layers.%d.self_attn.q_norm", WK_VECTOR, WD_ONE, WD_HEAD},              \
    {true, L_K_NORM, "model.layers.%d.self_attn.k_norm", WK_VECTOR, WD_ONE, WD_HEAD},              \
    {true, L_MLP_NORM, "model.layers.%d.post_attention_layernorm", WK_VECTOR, WD_ONE, WD_HIDDEN}
// clang-format on

/* The architecture of that model_type, or NULL. */
const model_arch_t *model_arch_find(const char *model_type);

/* The value of a dimension for a config. */
int64_t model_dim(const model_config_t *cfg, wdim_t dim);

/* How a dimension is explained in messages: "num_attention_heads 8 x head_dim 128". */
void model_dim_explain(const model_config_t *cfg, wdim_t dim, char *buf, size_t size);

/* Config readers for the architectures' parsers; each fails with a message naming `file` and
 * the field. An integer field with `def` < 0 is required, others take `def` when absent or null;
 * a double must be positive. */
int model_json_int(const cJSON *json, const char *file, const char *key, int def, int min, int *out,
                   err_t *err);
int model_json_double(const cJSON *json, const char *file, const char *key, double def, double *out,
                      err_t *err);
int model_json_bool(const cJSON *json, const char *file, const char *key, bool def, bool *out,
                    err_t *err);
/* A string field, or NULL when absent or not a string. */
const char *model_json_string(const cJSON *json, const char *key);

/* rope_theta (or rope_parameters.rope_theta) into cfg->rope_theta; any RoPE scaling is refused,
 * since running a model with its scaling ignored would silently produce wrong output. */
int model_json_rope(const cJSON *json, const char *file, model_config_t *cfg, err_t *err);

/* The fields every Qwen decoder config has, with HF's defaults: hidden_size, num_hidden_layers,
 * num_attention_heads, num_key_value_heads, intermediate_size, vocab_size,
 * max_position_embeddings, head_dim, rms_norm_eps, RoPE (model_json_rope); refuses
 * attention_bias, an activation other than silu, heads that do not group, an odd head_dim and
 * more layers than MODEL_MAX_LAYERS (less extra_layers, e.g. MTP layers). */
int model_json_decoder(const cJSON *json, const char *file, int extra_layers, model_config_t *cfg,
                       err_t *err);

#endif

/*
 * model_arch: what an architecture provides, and the config readers its parser uses. Shared by
 * model.c (the table, generic config parsing), weights.c (tensor binding) and the architectures'
 * homes in engine/arch/. Internal to the engine.
 *
 * Adding an architecture (Qwen3.5) means: a file engine/arch/NAME.c defining a
 * model_arch_t (a parser for its config fields that also fills the layer description, and the
 * list of tensors its checkpoints hold), its declaration below and one row in model.c's table;
 * new tensor slots in weights.h and new layer kinds in model.h when it has any.
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
    WD_ONE,       /* 1: vectors are [1, n] */
    WD_HIDDEN,    /* hidden_size */
    WD_Q,         /* num_attention_heads * head_dim */
    WD_KV,        /* num_key_value_heads * head_dim */
    WD_HEAD,      /* head_dim */
    WD_INTER,     /* intermediate_size */
    WD_VOCAB,     /* vocab_size */
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
    WK_ROUTER,  /* a projection that FP8 checkpoints keep unquantized (the MoE router
                   `mlp.gate`): float only */
} wkind_t;

/* One tensor of a checkpoint. `name` is a printf pattern taking the layer index for per-layer
 * tensors (and then the expert index for per-expert ones), without the ".weight" suffix.
 * A per-layer tensor is in the layers `in_layer` accepts (NULL: every layer); a per-expert one
 * is in each of its layers once per expert, slot an eslot_t. */
typedef struct wspec {
    bool per_layer;
    int slot; /* gslot_t, lslot_t or eslot_t (weights.h) */
    const char *name;
    wkind_t kind;
    wdim_t rows, cols;
    bool (*in_layer)(const model_layer_t *layer);
    bool per_expert;
} wspec_t;

/* Table rows: a model-wide tensor; a per-layer one in the layers `in` accepts (NULL: all); a
 * per-expert projection of the layers `in` accepts. */
#define WSPEC_GLOBAL(slot, name, kind, rows, cols)                                                 \
    { false, slot, name, kind, rows, cols, NULL, false }
#define WSPEC_LAYER(slot, name, kind, rows, cols, in)                                              \
    { true, slot, name, kind, rows, cols, in, false }
#define WSPEC_EXPERT(slot, name, rows, cols, in)                                                   \
    { true, slot, name, WK_LINEAR, rows, cols, in, true }

/* Whether layer l of cfg holds the per-layer tensor s. */
static inline bool wspec_in_layer(const wspec_t *s, const model_config_t *cfg, int l) {
    return !s->in_layer || s->in_layer(&cfg->layer[l]);
}

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

/* The fields Qwen3 dense and Qwen3-MoE share (qwen3.c): sizes, heads, norms, RoPE, and the
 * options they refuse (attention bias, sliding window, an activation other than SiLU). */
int qwen3_parse_common(const cJSON *json, const char *file, model_config_t *cfg, err_t *err);

/* The tensors Qwen3 dense and Qwen3-MoE share, the first rows of both tables: embedding, final
 * norm, lm_head, and each layer's norms and attention (the order is part of the dummy values). */
#define QWEN3_SHARED_TENSORS                                                                       \
    WSPEC_GLOBAL(G_EMBED, "model.embed_tokens", WK_EMBED, WD_VOCAB, WD_HIDDEN),                    \
        WSPEC_GLOBAL(G_FINAL_NORM, "model.norm", WK_VECTOR, WD_ONE, WD_HIDDEN),                    \
        WSPEC_GLOBAL(G_LM_HEAD, "lm_head", WK_LM_HEAD, WD_VOCAB, WD_HIDDEN),                       \
        WSPEC_LAYER(L_ATTN_NORM, "model.layers.%d.input_layernorm", WK_VECTOR, WD_ONE, WD_HIDDEN,  \
                    NULL),                                                                         \
        WSPEC_LAYER(L_Q, "model.layers.%d.self_attn.q_proj", WK_LINEAR, WD_Q, WD_HIDDEN, NULL),    \
        WSPEC_LAYER(L_K, "model.layers.%d.self_attn.k_proj", WK_LINEAR, WD_KV, WD_HIDDEN, NULL),   \
        WSPEC_LAYER(L_V, "model.layers.%d.self_attn.v_proj", WK_LINEAR, WD_KV, WD_HIDDEN, NULL),   \
        WSPEC_LAYER(L_O, "model.layers.%d.self_attn.o_proj", WK_LINEAR, WD_HIDDEN, WD_Q, NULL),    \
        WSPEC_LAYER(L_Q_NORM, "model.layers.%d.self_attn.q_norm", WK_VECTOR, WD_ONE, WD_HEAD,      \
                    NULL),                                                                         \
        WSPEC_LAYER(L_K_NORM, "model.layers.%d.self_attn.k_norm", WK_VECTOR, WD_ONE, WD_HEAD,      \
                    NULL),                                                                         \
        WSPEC_LAYER(L_MLP_NORM, "model.layers.%d.post_attention_layernorm", WK_VECTOR, WD_ONE,     \
                    WD_HIDDEN, NULL)

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

#endif

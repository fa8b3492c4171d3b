/*
 * model_arch: the architecture table's row type, shared by model.c (config parsing) and
 * weights.c (tensor binding). Internal to the engine.
 *
 * Adding an architecture (Qwen3-MoE, Qwen3.5) means: a config parser for its fields, a list of
 * the tensors its checkpoints hold, and one row in model.c's table.
 */
#ifndef TACHYON_MODEL_ARCH_H
#define TACHYON_MODEL_ARCH_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "model.h"

/* A dimension of a tensor, in terms of the config. */
typedef enum wdim {
    WD_ONE,    /* 1: vectors are [1, n] */
    WD_HIDDEN, /* hidden_size */
    WD_Q,      /* num_attention_heads * head_dim */
    WD_KV,     /* num_key_value_heads * head_dim */
    WD_HEAD,   /* head_dim */
    WD_INTER,  /* intermediate_size */
    WD_VOCAB,  /* vocab_size */
} wdim_t;

typedef enum wkind {
    WK_VECTOR, /* a norm weight: float, never quantized */
    WK_EMBED,  /* an embedding table: float, never quantized */
    WK_LINEAR, /* a projection: float, or F8_E4M3 with .weight_scale_inv when the config is fp8 */
} wkind_t;

/* One tensor of a checkpoint. `name` is a printf pattern taking the layer index for per-layer
 * tensors, without the ".weight" suffix. */
typedef struct wspec {
    bool per_layer;
    int slot; /* gslot_t or lslot_t */
    const char *name;
    wkind_t kind;
    wdim_t rows, cols;
} wspec_t;

struct model_arch {
    const char *model_type;        /* config.json model_type */
    const char *hf_architecture;   /* config.json architectures[0] */
    /* Reads the architecture's fields from the config object; `file` names it in messages. */
    int (*parse)(const cJSON *json, const char *file, model_config_t *cfg, err_t *err);
    const wspec_t *tensors;
    int n_tensors;
};

/* The architecture of that model_type, or NULL. */
const model_arch_t *model_arch_find(const char *model_type);

/* The value of a dimension for a config. */
int64_t model_dim(const model_config_t *cfg, wdim_t dim);

/* How a dimension is explained in messages: "num_attention_heads 8 x head_dim 128". */
void model_dim_explain(const model_config_t *cfg, wdim_t dim, char *buf, size_t size);

#endif

/*
 * Qwen3 dense (Qwen3ForCausalLM, model_type "qwen3"; models.md 1): its config fields, the
 * tensors of its checkpoints and its layers, every one full attention then a dense SwiGLU MLP.
 */
#include <string.h>

#include "model_arch.h"
#include "weights.h"

int qwen3_parse_common(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
    if (model_json_int(json, file, "hidden_size", -1, 1, &cfg->hidden_size, err) < 0 ||
        model_json_int(json, file, "num_hidden_layers", -1, 1, &cfg->n_layers, err) < 0 ||
        model_json_int(json, file, "num_attention_heads", -1, 1, &cfg->n_heads, err) < 0 ||
        model_json_int(json, file, "num_key_value_heads", cfg->n_heads, 1, &cfg->n_kv_heads, err) <
            0 ||
        model_json_int(json, file, "intermediate_size", -1, 1, &cfg->intermediate_size, err) < 0 ||
        model_json_int(json, file, "vocab_size", -1, 1, &cfg->vocab_size, err) < 0 ||
        model_json_int(json, file, "max_position_embeddings", 32768, 1,
                       &cfg->max_position_embeddings, err) < 0)
        return -1;
    /* HF Qwen3Config: head_dim defaults to hidden_size / num_attention_heads. */
    if (model_json_int(json, file, "head_dim", cfg->hidden_size / cfg->n_heads, 2, &cfg->head_dim,
                       err) < 0)
        return -1;
    double eps = 0;
    if (model_json_double(json, file, "rms_norm_eps", 1e-6, &eps, err) < 0) return -1;
    cfg->rms_norm_eps = (float)eps;
    if (model_json_bool(json, file, "tie_word_embeddings", false, &cfg->tie_word_embeddings, err) <
        0)
        return -1;
    if (model_json_rope(json, file, cfg, err) < 0) return -1;

    bool flag = false;
    if (model_json_bool(json, file, "attention_bias", false, &flag, err) < 0) return -1;
    if (flag) return err_set(err, "%s: attention_bias true is not supported for qwen3", file);
    if (model_json_bool(json, file, "use_sliding_window", false, &flag, err) < 0) return -1;
    if (flag)
        return err_set(err, "%s: use_sliding_window true is not supported (full attention only)",
                       file);
    const char *act = model_json_string(json, "hidden_act");
    if (act && strcmp(act, "silu") != 0)
        return err_set(err, "%s: hidden_act \"%s\" is not supported (silu)", file, act);

    if (cfg->n_heads % cfg->n_kv_heads != 0)
        return err_set(err,
                       "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                       file, cfg->n_heads, cfg->n_kv_heads);
    if (cfg->head_dim % 2 != 0)
        return err_set(err, "%s: head_dim %d must be even for RoPE", file, cfg->head_dim);
    if (cfg->n_layers > MODEL_MAX_LAYERS)
        return err_set(err, "%s: num_hidden_layers %d is more than the %d Tachyon supports", file,
                       cfg->n_layers, MODEL_MAX_LAYERS);
    return 0;
}

static int parse(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
    if (qwen3_parse_common(json, file, cfg, err) < 0) return -1;
    for (int l = 0; l < cfg->n_layers; l++)
        cfg->layer[l] = (model_layer_t){ATTN_FULL, MLP_DENSE};
    return 0;
}

static const wspec_t tensors[] = {
    QWEN3_SHARED_TENSORS,
    WSPEC_LAYER(L_GATE, "model.layers.%d.mlp.gate_proj", WK_LINEAR, WD_INTER, WD_HIDDEN, NULL),
    WSPEC_LAYER(L_UP, "model.layers.%d.mlp.up_proj", WK_LINEAR, WD_INTER, WD_HIDDEN, NULL),
    WSPEC_LAYER(L_DOWN, "model.layers.%d.mlp.down_proj", WK_LINEAR, WD_HIDDEN, WD_INTER, NULL),
};

const model_arch_t model_arch_qwen3 = {"qwen3", parse, tensors,
                                       (int)(sizeof tensors / sizeof tensors[0])};

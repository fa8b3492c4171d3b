/*
 * Qwen3 dense (Qwen3ForCausalLM, model_type "qwen3"; models.md 1): its config fields, the
 * tensors of its checkpoints and its layers, every one full attention then a dense SwiGLU MLP.
 */
#include "model_arch.h"
#include "weights.h"

int qwen3_parse_common(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
    if (model_json_decoder(json, file, 0, cfg, err) < 0 ||
        model_json_bool(json, file, "tie_word_embeddings", false, &cfg->tie_word_embeddings, err) <
            0)
        return -1;
    bool sliding = false;
    if (model_json_bool(json, file, "use_sliding_window", false, &sliding, err) < 0) return -1;
    if (sliding)
        return err_set(err, "%s: use_sliding_window true is not supported (full attention only)",
                       file);
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
    {true, L_GATE, "model.layers.%d.mlp.gate_proj", WK_LINEAR, WD_INTER, WD_HIDDEN},
    {true, L_UP, "model.layers.%d.mlp.up_proj", WK_LINEAR, WD_INTER, WD_HIDDEN},
    {true, L_DOWN, "model.layers.%d.mlp.down_proj", WK_LINEAR, WD_HIDDEN, WD_INTER},
};

const model_arch_t model_arch_qwen3 = {"qwen3", parse, tensors,
                                       (int)(sizeof tensors / sizeof tensors[0])};

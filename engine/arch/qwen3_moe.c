/*
 * Qwen3-MoE (Qwen3MoeForCausalLM, model_type "qwen3_moe"; models.md 3): Qwen3's attention with a
 * sparse mixture-of-experts MLP in most layers. Layer l is MLP_MOE when it is not in
 * mlp_only_layers, num_experts > 0 and (l + 1) % decoder_sparse_step == 0 (HF
 * Qwen3MoeDecoderLayer), otherwise a dense SwiGLU MLP of intermediate_size. An MoE layer holds
 * the router `mlp.gate` [num_experts, hidden] (unquantized in FP8 checkpoints) and per expert e
 * `mlp.experts.e.{gate,up,down}_proj` of moe_intermediate_size, each a tensor of its own (BF16,
 * or block FP8 with its own scales).
 */
#include <string.h>

#include "model_arch.h"
#include "weights.h"

/* Limits of the backends' routing (a token's top-k list lives in registers). */
#define MAX_EXPERTS         1024
#define MAX_EXPERTS_PER_TOK 32

/* mlp_only_layers: a list of layer indices (HF keeps it a list; entries beyond the model are
 * ignored there too). */
static int parse_mlp_only(const cJSON *json, const char *file, bool *dense, int n_layers,
                          err_t *err) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(json, "mlp_only_layers");
    if (!list || cJSON_IsNull(list)) return 0;
    if (!cJSON_IsArray(list))
        return err_set(err, "%s: field \"mlp_only_layers\" must be a list of layer indices", file);
    const cJSON *v;
    cJSON_ArrayForEach(v, list) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != (int)v->valuedouble)
            return err_set(err, "%s: \"mlp_only_layers\" holds %s, not a layer index", file,
                           cJSON_IsNumber(v) ? "a negative or fractional number" : "a non-number");
        if ((int)v->valuedouble < n_layers) dense[(int)v->valuedouble] = true;
    }
    return 0;
}

/* num_experts, as Qwen's checkpoints name it, or num_local_experts, the name transformers 5
 * writes (its attribute_map makes them one field). */
static int parse_n_experts(const cJSON *json, const char *file, int *out, err_t *err) {
    const cJSON *named = cJSON_GetObjectItemCaseSensitive(json, "num_experts");
    const cJSON *local = cJSON_GetObjectItemCaseSensitive(json, "num_local_experts");
    bool has_named = named && !cJSON_IsNull(named), has_local = local && !cJSON_IsNull(local);
    int a, b;
    if (model_json_int(json, file, "num_experts", 128, 0, &a, err) < 0 ||
        model_json_int(json, file, "num_local_experts", 128, 0, &b, err) < 0)
        return -1;
    if (has_named && has_local && a != b)
        return err_set(err, "%s: num_experts %d and num_local_experts %d disagree", file, a, b);
    *out = has_named ? a : b; /* absent: HF's default, 128 */
    return 0;
}

static int parse(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
    if (qwen3_parse_common(json, file, cfg, err) < 0) return -1;
    /* defaults: HF Qwen3MoeConfig */
    int sparse_step = 1;
    if (parse_n_experts(json, file, &cfg->n_experts, err) < 0 ||
        model_json_int(json, file, "num_experts_per_tok", 8, 1, &cfg->n_experts_per_tok, err) < 0 ||
        model_json_int(json, file, "moe_intermediate_size", 768, 1, &cfg->moe_intermediate_size,
                       err) < 0 ||
        model_json_int(json, file, "decoder_sparse_step", 1, 1, &sparse_step, err) < 0 ||
        model_json_bool(json, file, "norm_topk_prob", false, &cfg->norm_topk_prob, err) < 0)
        return -1;
    if (cfg->n_experts > MAX_EXPERTS)
        return err_set(err, "%s: num_experts %d is more than the %d Tachyon supports", file,
                       cfg->n_experts, MAX_EXPERTS);
    if (cfg->n_experts > 0 && cfg->n_experts_per_tok > cfg->n_experts)
        return err_set(err, "%s: num_experts_per_tok %d is more than num_experts %d", file,
                       cfg->n_experts_per_tok, cfg->n_experts);
    if (cfg->n_experts_per_tok > MAX_EXPERTS_PER_TOK)
        return err_set(err, "%s: num_experts_per_tok %d is more than the %d Tachyon supports", file,
                       cfg->n_experts_per_tok, MAX_EXPERTS_PER_TOK);
    bool dense[MODEL_MAX_LAYERS] = {false};
    if (parse_mlp_only(json, file, dense, cfg->n_layers, err) < 0) return -1;
    for (int l = 0; l < cfg->n_layers; l++) {
        bool moe = !dense[l] && cfg->n_experts > 0 && (l + 1) % sparse_step == 0;
        cfg->layer[l] = (model_layer_t){ATTN_FULL, moe ? MLP_MOE : MLP_DENSE};
    }
    return 0;
}

/* The dense MLP's tensors are held by the MLP_DENSE layers, the router by the MLP_MOE ones
 * (weights.h), the experts' by each MLP_MOE layer once per expert. */
static const wspec_t tensors[] = {
    QWEN3_SHARED_TENSORS,
    {true, L_GATE, "model.layers.%d.mlp.gate_proj", WK_LINEAR, WD_INTER, WD_HIDDEN},
    {true, L_UP, "model.layers.%d.mlp.up_proj", WK_LINEAR, WD_INTER, WD_HIDDEN},
    {true, L_DOWN, "model.layers.%d.mlp.down_proj", WK_LINEAR, WD_HIDDEN, WD_INTER},
    {true, L_ROUTER, "model.layers.%d.mlp.gate", WK_ROUTER, WD_EXPERTS, WD_HIDDEN},
    {true, E_GATE, "model.layers.%d.mlp.experts.%d.gate_proj", WK_EXPERT, WD_MOE_INTER, WD_HIDDEN},
    {true, E_UP, "model.layers.%d.mlp.experts.%d.up_proj", WK_EXPERT, WD_MOE_INTER, WD_HIDDEN},
    {true, E_DOWN, "model.layers.%d.mlp.experts.%d.down_proj", WK_EXPERT, WD_HIDDEN, WD_MOE_INTER},
};

const model_arch_t model_arch_qwen3_moe = {"qwen3_moe", parse, tensors,
                                           (int)(sizeof tensors / sizeof tensors[0])};

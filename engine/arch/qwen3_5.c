/*
 * Qwen3.5 (models.md 4): a hybrid of Gated DeltaNet linear attention (ATTN_LINEAR) and gated full
 * attention (ATTN_GATED), as layer_types says (3:1 in the released models), each followed by a
 * dense SwiGLU MLP; RMSNorms with zero-centred weights (y = norm(x) * (1 + w)), partial RoPE, and
 * one multi-token-prediction layer (mtp.*, bound for speculative decoding, not run here).
 *
 * Two architectures share this home: "qwen3_5" (Qwen3_5ForConditionalGeneration, the released
 * checkpoints: the text model's fields under text_config, its tensors under
 * model.language_model., a vision tower under model.visual. that text-only serving leaves out)
 * and "qwen3_5_text" (Qwen3_5ForCausalLM: the fields at the top, tensors under model.).
 */
#include <string.h>

#include "model_arch.h"
#include "weights.h"

/* HF Qwen3_5TextConfig's defaults for the Gated DeltaNet and RoPE fields. */
#define DEFAULT_FULL_ATTENTION_INTERVAL 4
#define DEFAULT_PARTIAL_ROTARY          0.25

/* rope_theta is read with the decoder's fields; here the rotary part of each head. */
static int parse_rope(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
    /* partial_rotary_factor in rope_parameters (newer configs) or at the top (older ones). The
     * M-RoPE sections only matter for images and video: text positions are equal on all three
     * axes, so interleaved M-RoPE is plain 1-D RoPE (models.md 4.5). */
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(json, "rope_parameters");
    const cJSON *where =
        cJSON_IsObject(params) && cJSON_GetObjectItemCaseSensitive(params, "partial_rotary_factor")
            ? params
            : json;
    double factor = 0;
    if (model_json_double(where, file, "partial_rotary_factor", DEFAULT_PARTIAL_ROTARY, &factor,
                          err) < 0)
        return -1;
    if (factor > 1)
        return err_set(err, "%s: partial_rotary_factor %g must be in (0, 1]", file, factor);
    cfg->rotary_dim = (int)(cfg->head_dim * factor); /* HF: int(head_dim * factor) */
    if (cfg->rotary_dim < 2 || cfg->rotary_dim % 2 != 0)
        return err_set(err,
                       "%s: head_dim %d x partial_rotary_factor %g gives %d rotary dims (must be "
                       "even and at least 2)",
                       file, cfg->head_dim, factor, cfg->rotary_dim);
    return 0;
}

/* layer_types[i] when given, else HF's default: every full_attention_interval-th layer is full. */
static int parse_layer_types(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(json, "layer_types");
    if (types && !cJSON_IsNull(types)) {
        if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != cfg->n_layers)
            return err_set(err, "%s: layer_types must list num_hidden_layers (%d) strings", file,
                           cfg->n_layers);
        for (int l = 0; l < cfg->n_layers; l++) {
            const cJSON *t = cJSON_GetArrayItem(types, l);
            const char *name = cJSON_IsString(t) ? t->valuestring : "?";
            if (!strcmp(name, "linear_attention"))
                cfg->layer[l] = (model_layer_t){ATTN_LINEAR, MLP_DENSE};
            else if (!strcmp(name, "full_attention"))
                cfg->layer[l] = (model_layer_t){ATTN_GATED, MLP_DENSE};
            else
                return err_set(err,
                               "%s: layer_types[%d] is \"%s\" (linear_attention or "
                               "full_attention)",
                               file, l, name);
        }
        return 0;
    }
    int every = 0;
    if (model_json_int(json, file, "full_attention_interval", DEFAULT_FULL_ATTENTION_INTERVAL, 1,
                       &every, err) < 0)
        return -1;
    for (int l = 0; l < cfg->n_layers; l++)
        cfg->layer[l] = (model_layer_t){(l + 1) % every ? ATTN_LINEAR : ATTN_GATED, MLP_DENSE};
    return 0;
}

static int parse_linear(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
    if (model_json_int(json, file, "linear_num_key_heads", 16, 1, &cfg->lin_k_heads, err) < 0 ||
        model_json_int(json, file, "linear_num_value_heads", 32, 1, &cfg->lin_v_heads, err) < 0 ||
        model_json_int(json, file, "linear_key_head_dim", 128, 1, &cfg->lin_k_dim, err) < 0 ||
        model_json_int(json, file, "linear_value_head_dim", 128, 1, &cfg->lin_v_dim, err) < 0 ||
        model_json_int(json, file, "linear_conv_kernel_dim", 4, 1, &cfg->lin_conv_kernel, err) < 0)
        return -1;
    if (cfg->lin_v_heads % cfg->lin_k_heads != 0)
        return err_set(err,
                       "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d",
                       file, cfg->lin_v_heads, cfg->lin_k_heads);
    const char *ssm = model_json_string(json, "mamba_ssm_dtype");
    if (!ssm || !strcmp(ssm, "float32")) {
        cfg->ssm_dtype = DT_F32;
    } else if (!strcmp(ssm, "bfloat16")) {
        cfg->ssm_dtype = DT_BF16;
    } else {
        return err_set(err, "%s: mamba_ssm_dtype \"%s\" is not supported (float32, bfloat16)", file,
                       ssm);
    }
    return 0;
}

/* The text model's fields (config.json itself, or its text_config). */
static int parse_text(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
    if (model_json_int(json, file, "mtp_num_hidden_layers", 0, 0, &cfg->n_mtp_layers, err) < 0 ||
        model_json_decoder(json, file, cfg->n_mtp_layers, cfg, err) < 0 ||
        parse_rope(json, file, cfg, err) < 0)
        return -1;
    cfg->norm_offset = 1.0f;
    bool gate = true;
    if (model_json_bool(json, file, "attn_output_gate", true, &gate, err) < 0) return -1;
    if (!gate)
        return err_set(err,
                       "%s: attn_output_gate false is not supported (transformers' Qwen3.5 "
                       "attention always gates its output)",
                       file);
    if (parse_layer_types(json, file, cfg, err) < 0 || parse_linear(json, file, cfg, err) < 0)
        return -1;
    /* vLLM qwen3_5_mtp.py: each MTP layer is a full-attention decoder layer. */
    for (int i = 0; i < cfg->n_mtp_layers; i++)
        cfg->layer[cfg->n_layers + i] = (model_layer_t){ATTN_GATED, MLP_DENSE};
    return 0;
}

static int parse_causal_lm(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
    return model_json_bool(json, file, "tie_word_embeddings", false, &cfg->tie_word_embeddings,
                           err) < 0
               ? -1
               : parse_text(json, file, cfg, err);
}

/* Qwen3_5ForConditionalGeneration: text_config holds the text model's fields; what the generic
 * reader found at the top (eos, dtype) may instead be there. tie_word_embeddings is read from
 * text_config, else from the top (transformers ties by the text config). */
static int parse_conditional(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(json, "text_config");
    if (!cJSON_IsObject(text))
        return err_set(err, "%s: model_type qwen3_5 needs a \"text_config\" object", file);
    bool tie = false;
    if (model_json_bool(json, file, "tie_word_embeddings", false, &tie, err) < 0 ||
        model_json_bool(text, file, "tie_word_embeddings", tie, &cfg->tie_word_embeddings, err) < 0)
        return -1;
    if (cfg->eos_token_id < 0 &&
        cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(text, "eos_token_id")) &&
        model_json_int(text, file, "eos_token_id", 0, 0, &cfg->eos_token_id, err) < 0)
        return -1;
    if (cfg->bos_token_id < 0 &&
        cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(text, "bos_token_id")) &&
        model_json_int(text, file, "bos_token_id", 0, 0, &cfg->bos_token_id, err) < 0)
        return -1;
    const char *dtype = model_json_string(text, "dtype");
    if (!dtype) dtype = model_json_string(text, "torch_dtype");
    if (dtype && !model_json_string(json, "dtype") && !model_json_string(json, "torch_dtype"))
        cfg->torch_dtype = !strcmp(dtype, "float32")   ? DT_F32
                           : !strcmp(dtype, "float16") ? DT_F16
                                                       : DT_BF16;
    return parse_text(text, file, cfg, err);
}

/* The tables below are macros over the text model's prefix P, one row per tensor (kept as
 * written: clang-format would interleave the rows). */
// clang-format off

/* A full-attention layer's tensors under prefix P (a decoder layer or an MTP layer). */
#define FULL_ATTN(P)                                                                            \
    {true, L_Q, P "self_attn.q_proj", WK_LINEAR, WD_Q_PROJ, WD_HIDDEN},                         \
    {true, L_K, P "self_attn.k_proj", WK_LINEAR, WD_KV, WD_HIDDEN},                             \
    {true, L_V, P "self_attn.v_proj", WK_LINEAR, WD_KV, WD_HIDDEN},                             \
    {true, L_O, P "self_attn.o_proj", WK_LINEAR, WD_HIDDEN, WD_Q},                              \
    {true, L_Q_NORM, P "self_attn.q_norm", WK_VECTOR, WD_ONE, WD_HEAD},                         \
    {true, L_K_NORM, P "self_attn.k_norm", WK_VECTOR, WD_ONE, WD_HEAD}

/* Every layer's two norms and dense MLP under prefix P. */
#define NORMS_MLP(P)                                                                            \
    {true, L_ATTN_NORM, P "input_layernorm", WK_VECTOR, WD_ONE, WD_HIDDEN},                     \
    {true, L_MLP_NORM, P "post_attention_layernorm", WK_VECTOR, WD_ONE, WD_HIDDEN},             \
    {true, L_GATE, P "mlp.gate_proj", WK_LINEAR, WD_INTER, WD_HIDDEN},                          \
    {true, L_UP, P "mlp.up_proj", WK_LINEAR, WD_INTER, WD_HIDDEN},                              \
    {true, L_DOWN, P "mlp.down_proj", WK_LINEAR, WD_HIDDEN, WD_INTER}

/* A Gated DeltaNet layer's tensors under prefix P. */
#define LINEAR_ATTN(P)                                                                          \
    {true, L_LIN_QKV, P "linear_attn.in_proj_qkv", WK_LINEAR, WD_LIN_CONV, WD_HIDDEN},          \
    {true, L_LIN_Z, P "linear_attn.in_proj_z", WK_LINEAR, WD_LIN_V, WD_HIDDEN},                 \
    {true, L_LIN_B, P "linear_attn.in_proj_b", WK_LINEAR_BF16, WD_LIN_HEADS, WD_HIDDEN},        \
    {true, L_LIN_A, P "linear_attn.in_proj_a", WK_LINEAR_BF16, WD_LIN_HEADS, WD_HIDDEN},        \
    {true, L_LIN_CONV, P "linear_attn.conv1d", WK_CONV, WD_LIN_CONV, WD_CONV_K},                \
    {true, L_LIN_A_LOG, P "linear_attn.A_log", WK_PARAM, WD_ONE, WD_LIN_HEADS},                 \
    {true, L_LIN_DT_BIAS, P "linear_attn.dt_bias", WK_PARAM, WD_ONE, WD_LIN_HEADS},             \
    {true, L_LIN_NORM, P "linear_attn.norm", WK_VECTOR, WD_ONE, WD_LIN_DV},                     \
    {true, L_LIN_OUT, P "linear_attn.out_proj", WK_LINEAR, WD_HIDDEN, WD_LIN_V}

/* Every tensor of a checkpoint whose text model lives under P ("model.language_model." or
 * "model."). The MTP head sits at the top level in both (mtp.*). */
#define QWEN3_5_TENSORS(P)                                                                      \
    {false, G_EMBED, P "embed_tokens", WK_EMBED, WD_VOCAB, WD_HIDDEN},                          \
    {false, G_FINAL_NORM, P "norm", WK_VECTOR, WD_ONE, WD_HIDDEN},                              \
    {false, G_LM_HEAD, "lm_head", WK_LM_HEAD, WD_VOCAB, WD_HIDDEN},                             \
    NORMS_MLP(P "layers.%d."),                                                                  \
    FULL_ATTN(P "layers.%d."),                                                                  \
    LINEAR_ATTN(P "layers.%d."),                                                                \
    {false, G_MTP_FC, "mtp.fc", WK_LINEAR, WD_HIDDEN, WD_2HIDDEN},                              \
    {false, G_MTP_EMBED_NORM, "mtp.pre_fc_norm_embedding", WK_VECTOR, WD_ONE, WD_HIDDEN},       \
    {false, G_MTP_HIDDEN_NORM, "mtp.pre_fc_norm_hidden", WK_VECTOR, WD_ONE, WD_HIDDEN},         \
    {false, G_MTP_NORM, "mtp.norm", WK_VECTOR, WD_ONE, WD_HIDDEN},                              \
    NORMS_MLP("mtp.layers.%d."),                                                                \
    FULL_ATTN("mtp.layers.%d.")

// clang-format on

static const wspec_t conditional_tensors[] = {QWEN3_5_TENSORS("model.language_model.")};
static const wspec_t causal_lm_tensors[] = {QWEN3_5_TENSORS("model.")};

const model_arch_t model_arch_qwen3_5 = {
    "qwen3_5", parse_conditional, conditional_tensors,
    (int)(sizeof conditional_tensors / sizeof conditional_tensors[0])};
const model_arch_t model_arch_qwen3_5_text = {
    "qwen3_5_text", parse_causal_lm, causal_lm_tensors,
    (int)(sizeof causal_lm_tensors / sizeof causal_lm_tensors[0])};

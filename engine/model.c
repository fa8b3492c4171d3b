#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_arch.h"

// ---------------------------------------------------------------------------------------------
// Reading fields

int model_json_int(const cJSON *json, const char *file, const char *key, int def, int min, int *out,
                   err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json, key);
    if (!v || cJSON_IsNull(v)) {
        if (def < 0) return err_set(err, "%s: missing field \"%s\"", file, key);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < min ||
        v->valuedouble > 1e9)
        return err_set(err, "%s: field \"%s\" must be an integer >= %d", file, key, min);
    *out = (int)v->valuedouble;
    return 0;
}

int model_json_double(const cJSON *json, const char *file, const char *key, double def, double *out,
                      err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0))
        return err_set(err, "%s: field \"%s\" must be a positive number", file, key);
    *out = v->valuedouble;
    return 0;
}

int model_json_bool(const cJSON *json, const char *file, const char *key, bool def, bool *out,
                    err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v)) return err_set(err, "%s: field \"%s\" must be true or false", file, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

const char *model_json_string(const cJSON *json, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* rope_type of a rope_scaling / rope_parameters object ("type" in older configs). */
static const char *rope_type(const cJSON *obj) {
    const char *t = model_json_string(obj, "rope_type");
    return t ? t : model_json_string(obj, "type");
}

/* Plain RoPE from `rope_theta`, or the newer `rope_parameters`. */
int model_json_rope(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(json, "rope_scaling");
    if (scaling && !cJSON_IsNull(scaling)) {
        const char *t = cJSON_IsObject(scaling) ? rope_type(scaling) : NULL;
        if (!t || strcmp(t, "default") != 0)
            return err_set(err,
                           "%s: rope_scaling of type \"%s\" is not implemented (Tachyon runs "
                           "plain RoPE; remove rope_scaling to run at the native context)",
                           file, t ? t : "?");
    }
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(json, "rope_parameters");
    if (params && !cJSON_IsNull(params)) {
        if (!cJSON_IsObject(params))
            return err_set(err, "%s: field \"rope_parameters\" must be an object", file);
        const char *t = rope_type(params);
        if (t && strcmp(t, "default") != 0)
            return err_set(err,
                           "%s: rope_parameters.rope_type \"%s\" is not implemented (Tachyon "
                           "runs plain RoPE)",
                           file, t);
        if (cJSON_GetObjectItemCaseSensitive(params, "rope_theta"))
            return model_json_double(params, file, "rope_theta", 10000.0, &cfg->rope_theta, err);
    }
    return model_json_double(json, file, "rope_theta", 10000.0, &cfg->rope_theta, err);
}

int model_json_decoder(const cJSON *json, const char *file, int extra_layers, model_config_t *cfg,
                       err_t *err) {
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
    /* HF: head_dim defaults to hidden_size / num_attention_heads. */
    if (model_json_int(json, file, "head_dim", cfg->hidden_size / cfg->n_heads, 2, &cfg->head_dim,
                       err) < 0)
        return -1;
    if (cfg->head_dim < 2) /* the default: hidden_size 2 with 4 heads made head_dim 0 */
        return err_set(err,
                       "%s: head_dim is missing and hidden_size %d / num_attention_heads %d is %d "
                       "(at least 2)",
                       file, cfg->hidden_size, cfg->n_heads, cfg->head_dim);
    double eps = 0;
    if (model_json_double(json, file, "rms_norm_eps", 1e-6, &eps, err) < 0) return -1;
    cfg->rms_norm_eps = (float)eps;
    if (model_json_rope(json, file, cfg, err) < 0) return -1;
    bool bias = false;
    if (model_json_bool(json, file, "attention_bias", false, &bias, err) < 0) return -1;
    if (bias)
        return err_set(err, "%s: attention_bias true is not supported for %s", file,
                       cfg->model_type);
    const char *act = model_json_string(json, "hidden_act");
    if (act && strcmp(act, "silu") != 0)
        return err_set(err, "%s: hidden_act \"%s\" is not supported (silu)", file, act);
    if (cfg->n_heads % cfg->n_kv_heads != 0)
        return err_set(err,
                       "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                       file, cfg->n_heads, cfg->n_kv_heads);
    if (cfg->head_dim % 2 != 0)
        return err_set(err, "%s: head_dim %d must be even for RoPE", file, cfg->head_dim);
    if (cfg->n_layers + extra_layers > MODEL_MAX_LAYERS)
        return err_set(err, "%s: %d layers are more than the %d Tachyon supports", file,
                       cfg->n_layers + extra_layers, MODEL_MAX_LAYERS);
    return 0;
}

static int parse_torch_dtype(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
    const char *s = model_json_string(json, "torch_dtype");
    if (!s) s = model_json_string(json, "dtype");
    if (!s || !strcmp(s, "bfloat16")) {
        cfg->torch_dtype = DT_BF16;
    } else if (!strcmp(s, "float16")) {
        cfg->torch_dtype = DT_F16;
    } else if (!strcmp(s, "float32")) {
        cfg->torch_dtype = DT_F32;
    } else {
        return err_set(err, "%s: torch_dtype \"%s\" is not supported (bfloat16, float16, float32)",
                       file, s);
    }
    return 0;
}

static int parse_quantization(const cJSON *json, const char *file, model_config_t *cfg,
                              err_t *err) {
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(json, "quantization_config");
    if (!q || cJSON_IsNull(q)) return 0;
    if (!cJSON_IsObject(q))
        return err_set(err, "%s: field \"quantization_config\" must be an object", file);
    const char *method = model_json_string(q, "quant_method");
    if (!method || strcmp(method, "fp8") != 0)
        return err_set(err, "%s: quantization method \"%s\" is not supported (only block fp8)",
                       file, method ? method : "?");
    const char *scheme = model_json_string(q, "activation_scheme");
    if (scheme && strcmp(scheme, "dynamic") != 0)
        return err_set(err, "%s: fp8 activation_scheme \"%s\" is not supported (only dynamic)",
                       file, scheme);
    const cJSON *block = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
    if (!cJSON_IsArray(block) || cJSON_GetArraySize(block) != 2 ||
        !cJSON_IsNumber(cJSON_GetArrayItem(block, 0)) ||
        !cJSON_IsNumber(cJSON_GetArrayItem(block, 1)))
        return err_set(err,
                       "%s: fp8 quantization_config needs \"weight_block_size\": [128, 128] "
                       "(per-tensor fp8 is not supported)",
                       file);
    cfg->fp8_block_n = cJSON_GetArrayItem(block, 0)->valueint;
    cfg->fp8_block_k = cJSON_GetArrayItem(block, 1)->valueint;
    if (cfg->fp8_block_n != 128 || cfg->fp8_block_k != 128)
        return err_set(err, "%s: fp8 weight_block_size [%d, %d] is not supported (only [128, 128])",
                       file, cfg->fp8_block_n, cfg->fp8_block_k);
    cfg->fp8 = true;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The architecture table

/* One row per architecture; each lives in engine/arch/. */
static const model_arch_t *const model_archs[] = {
    &model_arch_qwen3,
    &model_arch_qwen3_moe,
    &model_arch_qwen3_5,
    &model_arch_qwen3_5_text,
};
#define N_ARCHS ((int)(sizeof model_archs / sizeof model_archs[0]))

const model_arch_t *model_arch_find(const char *model_type) {
    for (int i = 0; i < N_ARCHS; i++)
        if (strcmp(model_archs[i]->model_type, model_type) == 0) return model_archs[i];
    return NULL;
}

int model_count_attn(const model_config_t *c, attn_kind_t kind) {
    int n = 0;
    for (int l = 0; l < c->n_layers; l++)
        n += c->layer[l].attn == kind;
    return n;
}

uint64_t model_state_bytes(const model_config_t *c, dtype_t ssm_dtype) {
    uint64_t ssm = (uint64_t)c->lin_v_heads * (uint64_t)c->lin_k_dim * (uint64_t)c->lin_v_dim;
    uint64_t conv = (uint64_t)(c->lin_conv_kernel - 1) * (uint64_t)model_lin_conv_dim(c);
    return (uint64_t)model_count_attn(c, ATTN_LINEAR) * (ssm * dtype_size(ssm_dtype) + conv * 2);
}

/* q_proj doubles when the model's full attention is gated (q | gate per head). */
static int q_proj_factor(const model_config_t *c) {
    for (int l = 0; l < c->n_layers + c->n_mtp_layers; l++)
        if (c->layer[l].attn == ATTN_GATED) return 2;
    return 1;
}

int64_t model_dim(const model_config_t *c, wdim_t dim) {
    switch (dim) {
        case WD_ONE:
            return 1;
        case WD_HIDDEN:
            return c->hidden_size;
        case WD_Q:
            return (int64_t)c->n_heads * c->head_dim;
        case WD_KV:
            return (int64_t)c->n_kv_heads * c->head_dim;
        case WD_HEAD:
            return c->head_dim;
        case WD_INTER:
            return c->intermediate_size;
        case WD_VOCAB:
            return c->vocab_size;
        case WD_EXPERTS:
            return c->n_experts;
        case WD_MOE_INTER:
            return c->moe_intermediate_size;
        case WD_Q_PROJ:
            return (int64_t)q_proj_factor(c) * c->n_heads * c->head_dim;
        case WD_2HIDDEN:
            return 2 * (int64_t)c->hidden_size;
        case WD_LIN_CONV: /* in int64, as the other products: a config is checked with them */
            return 2 * (int64_t)c->lin_k_heads * c->lin_k_dim +
                   (int64_t)c->lin_v_heads * c->lin_v_dim;
        case WD_LIN_V:
            return (int64_t)c->lin_v_heads * c->lin_v_dim;
        case WD_LIN_HEADS:
            return c->lin_v_heads;
        case WD_LIN_DV:
            return c->lin_v_dim;
        case WD_CONV_K:
            return c->lin_conv_kernel;
    }
    return 0;
}

void model_dim_explain(const model_config_t *c, wdim_t dim, char *buf, size_t size) {
    switch (dim) {
        case WD_ONE:
            snprintf(buf, size, "1");
            break;
        case WD_HIDDEN:
            snprintf(buf, size, "hidden_size %d", c->hidden_size);
            break;
        case WD_Q:
            snprintf(buf, size, "num_attention_heads %d x head_dim %d", c->n_heads, c->head_dim);
            break;
        case WD_KV:
            snprintf(buf, size, "num_key_value_heads %d x head_dim %d", c->n_kv_heads, c->head_dim);
            break;
        case WD_HEAD:
            snprintf(buf, size, "head_dim %d", c->head_dim);
            break;
        case WD_INTER:
            snprintf(buf, size, "intermediate_size %d", c->intermediate_size);
            break;
        case WD_VOCAB:
            snprintf(buf, size, "vocab_size %d", c->vocab_size);
            break;
        case WD_EXPERTS:
            snprintf(buf, size, "num_experts %d", c->n_experts);
            break;
        case WD_MOE_INTER:
            snprintf(buf, size, "moe_intermediate_size %d", c->moe_intermediate_size);
            break;
        case WD_Q_PROJ:
            snprintf(buf, size, "num_attention_heads %d x head_dim %d%s", c->n_heads, c->head_dim,
                     q_proj_factor(c) == 2 ? " x 2 (attn_output_gate)" : "");
            break;
        case WD_2HIDDEN:
            snprintf(buf, size, "2 x hidden_size %d", c->hidden_size);
            break;
        case WD_LIN_CONV:
            snprintf(buf, size,
                     "2 x linear_num_key_heads %d x linear_key_head_dim %d + "
                     "linear_num_value_heads %d x linear_value_head_dim %d",
                     c->lin_k_heads, c->lin_k_dim, c->lin_v_heads, c->lin_v_dim);
            break;
        case WD_LIN_V:
            snprintf(buf, size, "linear_num_value_heads %d x linear_value_head_dim %d",
                     c->lin_v_heads, c->lin_v_dim);
            break;
        case WD_LIN_HEADS:
            snprintf(buf, size, "linear_num_value_heads %d", c->lin_v_heads);
            break;
        case WD_LIN_DV:
            snprintf(buf, size, "linear_value_head_dim %d", c->lin_v_dim);
            break;
        case WD_CONV_K:
            snprintf(buf, size, "linear_conv_kernel_dim %d", c->lin_conv_kernel);
            break;
    }
}

// ---------------------------------------------------------------------------------------------
// config.json

static double param_count(const model_config_t *c, int experts);

int model_config_parse(const char *text, const char *file, model_config_t *cfg, err_t *err) {
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->source, sizeof cfg->source, "%s", file);
    cfg->bos_token_id = cfg->eos_token_id = -1;
    const char *end = NULL;
    cJSON *json = cJSON_ParseWithOpts(text, &end, true);
    if (!json) {
        long offset = end ? (long)(end - text) : -1;
        return err_set(err, "%s: invalid JSON near byte %ld", file, offset);
    }
    int rc = -1;
    if (!cJSON_IsObject(json)) {
        err_set(err, "%s: expected a JSON object", file);
        goto out;
    }
    const char *type = model_json_string(json, "model_type");
    if (!type) {
        err_set(err, "%s: missing field \"model_type\"", file);
        goto out;
    }
    cfg->arch = model_arch_find(type);
    if (!cfg->arch) {
        char list[256] = "";
        for (int i = 0; i < N_ARCHS; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                     model_archs[i]->model_type);
        err_set(err, "%s: model_type \"%s\" is not supported (supported: %s)", file, type, list);
        goto out;
    }
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", type);
    int bos = -1, eos = -1;
    if (model_json_int(json, file, "bos_token_id", 0, 0, &bos, err) < 0) goto out;
    if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(json, "bos_token_id")))
        cfg->bos_token_id = bos;
    if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(json, "eos_token_id")) &&
        model_json_int(json, file, "eos_token_id", 0, 0, &eos, err) == 0)
        cfg->eos_token_id = eos;
    if (parse_torch_dtype(json, file, cfg, err) < 0 ||
        parse_quantization(json, file, cfg, err) < 0 || cfg->arch->parse(json, file, cfg, err) < 0)
        goto out;
    if (cfg->rotary_dim == 0) cfg->rotary_dim = cfg->head_dim;
    /* Every width, the config's own and those made of two of them, in int64 before any int
     * product of them is formed. */
    const int64_t lin_k = (int64_t)cfg->lin_k_heads * cfg->lin_k_dim,
                  lin_v = model_dim(cfg, WD_LIN_V);
    char conv_name[96];
    snprintf(conv_name, sizeof conv_name, "Gated DeltaNet conv channels (2 x %lld + %lld)",
             (long long)lin_k, (long long)lin_v);
    const struct {
        const char *name;
        int64_t value;
    } dims[] = {
        {"hidden_size", cfg->hidden_size},
        {"intermediate_size", cfg->intermediate_size},
        {"head_dim", cfg->head_dim},
        {"vocab_size", cfg->vocab_size},
        {"num_attention_heads", cfg->n_heads},
        {"num_key_value_heads", cfg->n_kv_heads},
        {"num_experts", cfg->n_experts},
        {"moe_intermediate_size", cfg->moe_intermediate_size},
        {"linear_num_key_heads", cfg->lin_k_heads},
        {"linear_num_value_heads", cfg->lin_v_heads},
        {"linear_key_head_dim", cfg->lin_k_dim},
        {"linear_value_head_dim", cfg->lin_v_dim},
        {"linear_conv_kernel_dim", cfg->lin_conv_kernel},
        {"num_attention_heads x head_dim", model_dim(cfg, WD_Q)},
        {"q_proj rows (num_attention_heads x head_dim x 2, gated)", model_dim(cfg, WD_Q_PROJ)},
        {"num_key_value_heads x head_dim", model_dim(cfg, WD_KV)},
        {"linear_num_key_heads x linear_key_head_dim", lin_k},
        {"linear_num_value_heads x linear_value_head_dim", lin_v},
        {conv_name, model_dim(cfg, WD_LIN_CONV)}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        if (dims[i].value > MODEL_MAX_DIM) {
            err_set(err, "%s: %s %lld is more than the %d Tachyon supports", file, dims[i].name,
                    (long long)dims[i].value, MODEL_MAX_DIM);
            goto out;
        }
    }
    double params = param_count(cfg, cfg->n_experts);
    if (params > MODEL_MAX_PARAMS) {
        err_set(err, "%s: the shapes make %.3g parameters, more than the %.0e Tachyon addresses",
                file, params, MODEL_MAX_PARAMS);
        goto out;
    }
    rc = 0;
out:
    cJSON_Delete(json);
    return rc;
}

int model_config_load(mdir_t *dir, model_config_t *cfg, err_t *err) {
    char file[4200];
    snprintf(file, sizeof file, "%s/config.json", mdir_path(dir));
    char *text;
    if (!mdir_has(dir, "config.json"))
        return err_set(err, "%s: missing (a Hugging Face model directory has one)", file);
    if (mdir_read_text(dir, "config.json", &text, NULL, err) < 0) return -1;
    int rc = model_config_parse(text, file, cfg, err);
    free(text);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Presets: the config.json of real checkpoints (models.md 1.1), for --load-format dummy

#define QWEN3_COMMON                                                                               \
    "\"model_type\": \"qwen3\", \"head_dim\": 128, \"rope_theta\": 1000000, "                      \
    "\"rms_norm_eps\": 1e-06, \"torch_dtype\": \"bfloat16\""
#define QWEN3_MOE_COMMON                                                                           \
    "\"model_type\": \"qwen3_moe\", \"head_dim\": 128, \"num_key_value_heads\": 4, "               \
    "\"rms_norm_eps\": 1e-06, \"torch_dtype\": \"bfloat16\", \"tie_word_embeddings\": false, "     \
    "\"num_experts\": 128, \"num_experts_per_tok\": 8, \"norm_topk_prob\": true, "                 \
    "\"decoder_sparse_step\": 1, \"mlp_only_layers\": []"
#define QWEN3_VOCAB                                                                                \
    "\"vocab_size\": 151936, \"bos_token_id\": 151643, \"eos_token_id\": 151645, "                 \
    "\"max_position_embeddings\": 40960"

static const struct {
    const char *name;
    const char *config; /* config.json text */
} presets[] = {
    {"tiny", "{" QWEN3_COMMON ", \"vocab_size\": 4096, \"max_position_embeddings\": 4096, "
             "\"hidden_size\": 256, \"num_hidden_layers\": 4, \"num_attention_heads\": 4, "
             "\"num_key_value_heads\": 2, \"intermediate_size\": 768, "
             "\"tie_word_embeddings\": false}"},
    {"qwen3-0.6b", "{" QWEN3_COMMON ", " QWEN3_VOCAB ", \"hidden_size\": 1024, "
                   "\"num_hidden_layers\": 28, \"num_attention_heads\": 16, "
                   "\"num_key_value_heads\": 8, \"intermediate_size\": 3072, "
                   "\"tie_word_embeddings\": true}"},
    {"qwen3-8b", "{" QWEN3_COMMON ", " QWEN3_VOCAB ", \"hidden_size\": 4096, "
                 "\"num_hidden_layers\": 36, \"num_attention_heads\": 32, "
                 "\"num_key_value_heads\": 8, \"intermediate_size\": 12288, "
                 "\"tie_word_embeddings\": false}"},
    {"qwen3-14b", "{" QWEN3_COMMON ", " QWEN3_VOCAB ", \"hidden_size\": 5120, "
                  "\"num_hidden_layers\": 40, \"num_attention_heads\": 40, "
                  "\"num_key_value_heads\": 8, \"intermediate_size\": 17408, "
                  "\"tie_word_embeddings\": false}"},
    {"qwen3-32b", "{" QWEN3_COMMON ", " QWEN3_VOCAB ", \"hidden_size\": 5120, "
                  "\"num_hidden_layers\": 64, \"num_attention_heads\": 64, "
                  "\"num_key_value_heads\": 8, \"intermediate_size\": 25600, "
                  "\"tie_word_embeddings\": false}"},
    /* models.md 3.1: Qwen3-30B-A3B and Qwen3-235B-A22B-Instruct-2507 */
    {"qwen3-30b-a3b", "{" QWEN3_MOE_COMMON ", " QWEN3_VOCAB ", \"rope_theta\": 1000000, "
                      "\"hidden_size\": 2048, \"num_hidden_layers\": 48, "
                      "\"num_attention_heads\": 32, \"intermediate_size\": 6144, "
                      "\"moe_intermediate_size\": 768}"},
    {"qwen3-235b-a22b", "{" QWEN3_MOE_COMMON ", \"vocab_size\": 151936, \"bos_token_id\": 151643, "
                        "\"eos_token_id\": 151645, \"max_position_embeddings\": 262144, "
                        "\"rope_theta\": 5000000, \"hidden_size\": 4096, "
                        "\"num_hidden_layers\": 94, \"num_attention_heads\": 64, "
                        "\"intermediate_size\": 12288, \"moe_intermediate_size\": 1536}"},
    /* Qwen/Qwen3.5-9B (models.md 4.2): the vision tower's config is left out, since text-only
     * serving never reads it */
    {"qwen3.5-9b",
     "{\"model_type\": \"qwen3_5\", \"tie_word_embeddings\": false, \"text_config\": {"
     "\"model_type\": \"qwen3_5_text\", \"hidden_size\": 4096, \"num_hidden_layers\": 32, "
     "\"full_attention_interval\": 4, \"intermediate_size\": 12288, "
     "\"num_attention_heads\": 16, \"num_key_value_heads\": 4, \"head_dim\": 256, "
     "\"attn_output_gate\": true, \"linear_num_key_heads\": 16, "
     "\"linear_num_value_heads\": 32, \"linear_key_head_dim\": 128, "
     "\"linear_value_head_dim\": 128, \"linear_conv_kernel_dim\": 4, \"rope_parameters\": "
     "{\"rope_type\": \"default\", \"rope_theta\": 10000000, \"partial_rotary_factor\": "
     "0.25, \"mrope_section\": [11, 11, 10], \"mrope_interleaved\": true}, "
     "\"rms_norm_eps\": 1e-06, \"vocab_size\": 248320, \"max_position_embeddings\": 262144, "
     "\"mamba_ssm_dtype\": \"float32\", \"mtp_num_hidden_layers\": 1, \"hidden_act\": \"silu\", "
     "\"bos_token_id\": 248044, \"eos_token_id\": 248044, \"dtype\": \"bfloat16\"}}"},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

const char *const *model_preset_names(void) {
    static const char *names[N_PRESETS + 1];
    for (int i = 0; i < N_PRESETS; i++)
        names[i] = presets[i].name;
    names[N_PRESETS] = NULL;
    return names;
}

int model_config_preset(const char *name, bool fp8, model_config_t *cfg, err_t *err) {
    for (int i = 0; i < N_PRESETS; i++) {
        if (strcmp(presets[i].name, name) != 0) continue;
        char source[64];
        snprintf(source, sizeof source, "preset %s", name);
        if (model_config_parse(presets[i].config, source, cfg, err) < 0) return -1;
        cfg->fp8 = fp8;
        cfg->fp8_block_n = cfg->fp8_block_k = fp8 ? 128 : 0;
        return 0;
    }
    char list[256] = "";
    for (int i = 0; i < N_PRESETS; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 presets[i].name);
    return err_set(err, "unknown model preset \"%s\" (presets: %s)", name, list);
}

// ---------------------------------------------------------------------------------------------
// Derived

/* Parameters, with `experts` of each MoE layer's experts counted (n_experts: all). In double,
 * so that any config's shapes can be counted (a hostile config.json with 256 layers of
 * 10^9 x 10^9 overflowed int64); exact below 2^53, far above MODEL_MAX_PARAMS. */
static double param_count(const model_config_t *c, int experts) {
    double n = 0;
    const model_arch_t *a = c->arch;
    for (int i = 0; i < a->n_tensors; i++) {
        const wspec_t *s = &a->tensors[i];
        if (s->kind == WK_LM_HEAD && c->tie_word_embeddings) continue;
        if (wspec_is_mtp(s)) continue; /* the draft head is not part of the model's size */
        double size = (double)model_dim(c, s->rows) * (double)model_dim(c, s->cols);
        if (!s->per_layer) {
            n += size;
            continue;
        }
        for (int l = 0; l < c->n_layers; l++)
            if (wspec_in_layer(s, c, l)) n += wspec_per_expert(s) ? size * experts : size;
    }
    return n;
}

int64_t model_param_count(const model_config_t *c) {
    return (int64_t)param_count(c, c->n_experts);
}

int64_t model_active_param_count(const model_config_t *c) {
    return (int64_t)param_count(c, c->n_experts_per_tok);
}

void model_config_describe(const model_config_t *c, char *buf, size_t size) {
    char moe[128] = "";
    if (c->n_experts > 0)
        snprintf(moe, sizeof moe, ", %d experts (top %d) of intermediate %d, %.2fB active",
                 c->n_experts, c->n_experts_per_tok, c->moe_intermediate_size,
                 (double)model_active_param_count(c) / 1e9);
    int n =
        snprintf(buf, size,
                 "%s: %d layers, hidden %d, %d/%d heads x %d, intermediate %d%s, vocab %d, "
                 "%.2fB params, %s%s",
                 c->model_type, c->n_layers, c->hidden_size, c->n_heads, c->n_kv_heads, c->head_dim,
                 c->intermediate_size, moe, c->vocab_size, (double)model_param_count(c) / 1e9,
                 c->fp8 ? "fp8 block 128x128" : dtype_name(c->torch_dtype),
                 c->tie_word_embeddings ? ", tied embeddings" : "");
    int linear = model_count_attn(c, ATTN_LINEAR);
    if (linear > 0 && n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n,
                 ", hybrid %d Gated DeltaNet + %d full, %.1f MiB state/seq, prefix caching off",
                 linear, c->n_layers - linear,
                 (double)model_state_bytes(c, c->ssm_dtype) / (1 << 20));
}

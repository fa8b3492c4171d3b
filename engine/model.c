#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_arch.h"
#include "weights.h"

// ---------------------------------------------------------------------------------------------
// Reading fields

/* An integer field; `def` < 0 means required. */
static int get_int(const cJSON *json, const char *file, const char *key, int def, int min,
                   int *out, err_t *err) {
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

static int get_double(const cJSON *json, const char *file, const char *key, double def,
                      double *out, err_t *err) {
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

static int get_bool(const cJSON *json, const char *file, const char *key, bool def, bool *out,
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

static const char *get_string(const cJSON *json, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* rope_type of a rope_scaling / rope_parameters object ("type" in older configs). */
static const char *rope_type(const cJSON *obj) {
    const char *t = get_string(obj, "rope_type");
    return t ? t : get_string(obj, "type");
}

/* Plain RoPE from `rope_theta`, or the newer `rope_parameters`; any scaling is refused, since
 * running a model with its scaling ignored would silently produce wrong output. */
static int parse_rope(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
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
            return get_double(params, file, "rope_theta", 10000.0, &cfg->rope_theta, err);
    }
    return get_double(json, file, "rope_theta", 10000.0, &cfg->rope_theta, err);
}

static int parse_torch_dtype(const cJSON *json, const char *file, model_config_t *cfg,
                             err_t *err) {
    const char *s = get_string(json, "torch_dtype");
    if (!s) s = get_string(json, "dtype");
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
    const char *method = get_string(q, "quant_method");
    if (!method || strcmp(method, "fp8") != 0)
        return err_set(err, "%s: quantization method \"%s\" is not supported (only block fp8)",
                       file, method ? method : "?");
    const char *scheme = get_string(q, "activation_scheme");
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
// Qwen3 dense

static int parse_qwen3(const cJSON *json, const char *file, model_config_t *cfg, err_t *err) {
    if (get_int(json, file, "hidden_size", -1, 1, &cfg->hidden_size, err) < 0 ||
        get_int(json, file, "num_hidden_layers", -1, 1, &cfg->n_layers, err) < 0 ||
        get_int(json, file, "num_attention_heads", -1, 1, &cfg->n_heads, err) < 0 ||
        get_int(json, file, "num_key_value_heads", cfg->n_heads, 1, &cfg->n_kv_heads, err) < 0 ||
        get_int(json, file, "intermediate_size", -1, 1, &cfg->intermediate_size, err) < 0 ||
        get_int(json, file, "vocab_size", -1, 1, &cfg->vocab_size, err) < 0 ||
        get_int(json, file, "max_position_embeddings", 32768, 1, &cfg->max_position_embeddings,
                err) < 0)
        return -1;
    /* HF Qwen3Config: head_dim defaults to hidden_size / num_attention_heads. */
    if (get_int(json, file, "head_dim", cfg->hidden_size / cfg->n_heads, 2, &cfg->head_dim, err) <
        0)
        return -1;
    double eps = 0;
    if (get_double(json, file, "rms_norm_eps", 1e-6, &eps, err) < 0) return -1;
    cfg->rms_norm_eps = (float)eps;
    if (get_bool(json, file, "tie_word_embeddings", false, &cfg->tie_word_embeddings, err) < 0)
        return -1;
    if (parse_rope(json, file, cfg, err) < 0) return -1;

    bool flag = false;
    if (get_bool(json, file, "attention_bias", false, &flag, err) < 0) return -1;
    if (flag) return err_set(err, "%s: attention_bias true is not supported for qwen3", file);
    if (get_bool(json, file, "use_sliding_window", false, &flag, err) < 0) return -1;
    if (flag)
        return err_set(err, "%s: use_sliding_window true is not supported (full attention only)",
                       file);
    const char *act = get_string(json, "hidden_act");
    if (act && strcmp(act, "silu") != 0)
        return err_set(err, "%s: hidden_act \"%s\" is not supported (silu)", file, act);

    if (cfg->n_heads % cfg->n_kv_heads != 0)
        return err_set(err,
                       "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                       file, cfg->n_heads, cfg->n_kv_heads);
    if (cfg->head_dim % 2 != 0)
        return err_set(err, "%s: head_dim %d must be even for RoPE", file, cfg->head_dim);
    return 0;
}

static const wspec_t qwen3_tensors[] = {
    {false, G_EMBED, "model.embed_tokens", WK_EMBED, WD_VOCAB, WD_HIDDEN},
    {false, G_FINAL_NORM, "model.norm", WK_VECTOR, WD_ONE, WD_HIDDEN},
    {false, G_LM_HEAD, "lm_head", WK_LINEAR, WD_VOCAB, WD_HIDDEN},
    {true, L_ATTN_NORM, "model.layers.%d.input_layernorm", WK_VECTOR, WD_ONE, WD_HIDDEN},
    {true, L_Q, "model.layers.%d.self_attn.q_proj", WK_LINEAR, WD_Q, WD_HIDDEN},
    {true, L_K, "model.layers.%d.self_attn.k_proj", WK_LINEAR, WD_KV, WD_HIDDEN},
    {true, L_V, "model.layers.%d.self_attn.v_proj", WK_LINEAR, WD_KV, WD_HIDDEN},
    {true, L_O, "model.layers.%d.self_attn.o_proj", WK_LINEAR, WD_HIDDEN, WD_Q},
    {true, L_Q_NORM, "model.layers.%d.self_attn.q_norm", WK_VECTOR, WD_ONE, WD_HEAD},
    {true, L_K_NORM, "model.layers.%d.self_attn.k_norm", WK_VECTOR, WD_ONE, WD_HEAD},
    {true, L_MLP_NORM, "model.layers.%d.post_attention_layernorm", WK_VECTOR, WD_ONE, WD_HIDDEN},
    {true, L_GATE, "model.layers.%d.mlp.gate_proj", WK_LINEAR, WD_INTER, WD_HIDDEN},
    {true, L_UP, "model.layers.%d.mlp.up_proj", WK_LINEAR, WD_INTER, WD_HIDDEN},
    {true, L_DOWN, "model.layers.%d.mlp.down_proj", WK_LINEAR, WD_HIDDEN, WD_INTER},
};

// ---------------------------------------------------------------------------------------------
// The architecture table

static const model_arch_t model_archs[] = {
    {"qwen3", "Qwen3ForCausalLM", parse_qwen3, qwen3_tensors,
     (int)(sizeof qwen3_tensors / sizeof qwen3_tensors[0])},
};
#define N_ARCHS ((int)(sizeof model_archs / sizeof model_archs[0]))

const model_arch_t *model_arch_find(const char *model_type) {
    for (int i = 0; i < N_ARCHS; i++)
        if (strcmp(model_archs[i].model_type, model_type) == 0) return &model_archs[i];
    return NULL;
}

int64_t model_dim(const model_config_t *c, wdim_t dim) {
    switch (dim) {
        case WD_ONE: return 1;
        case WD_HIDDEN: return c->hidden_size;
        case WD_Q: return (int64_t)c->n_heads * c->head_dim;
        case WD_KV: return (int64_t)c->n_kv_heads * c->head_dim;
        case WD_HEAD: return c->head_dim;
        case WD_INTER: return c->intermediate_size;
        case WD_VOCAB: return c->vocab_size;
    }
    return 0;
}

void model_dim_explain(const model_config_t *c, wdim_t dim, char *buf, size_t size) {
    switch (dim) {
        case WD_ONE: snprintf(buf, size, "1"); break;
        case WD_HIDDEN: snprintf(buf, size, "hidden_size %d", c->hidden_size); break;
        case WD_Q:
            snprintf(buf, size, "num_attention_heads %d x head_dim %d", c->n_heads, c->head_dim);
            break;
        case WD_KV:
            snprintf(buf, size, "num_key_value_heads %d x head_dim %d", c->n_kv_heads,
                     c->head_dim);
            break;
        case WD_HEAD: snprintf(buf, size, "head_dim %d", c->head_dim); break;
        case WD_INTER: snprintf(buf, size, "intermediate_size %d", c->intermediate_size); break;
        case WD_VOCAB: snprintf(buf, size, "vocab_size %d", c->vocab_size); break;
    }
}

// ---------------------------------------------------------------------------------------------
// config.json

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
    const char *type = get_string(json, "model_type");
    if (!type) {
        err_set(err, "%s: missing field \"model_type\"", file);
        goto out;
    }
    cfg->arch = model_arch_find(type);
    if (!cfg->arch) {
        char list[256] = "";
        for (int i = 0; i < N_ARCHS; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                     model_archs[i].model_type);
        err_set(err, "%s: model_type \"%s\" is not supported (supported: %s)", file, type, list);
        goto out;
    }
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", type);
    int bos = -1, eos = -1;
    if (get_int(json, file, "bos_token_id", 0, 0, &bos, err) < 0) goto out;
    if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(json, "bos_token_id")))
        cfg->bos_token_id = bos;
    if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(json, "eos_token_id")) &&
        get_int(json, file, "eos_token_id", 0, 0, &eos, err) == 0)
        cfg->eos_token_id = eos;
    if (parse_torch_dtype(json, file, cfg, err) < 0 ||
        parse_quantization(json, file, cfg, err) < 0 || cfg->arch->parse(json, file, cfg, err) < 0)
        goto out;
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
// Presets: the shapes of real checkpoints (models.md 1.1), for --load-format dummy

typedef struct preset {
    const char *name;
    int hidden, layers, heads, kv_heads, head_dim, inter, vocab, max_pos;
    bool tied;
} preset_t;

static const preset_t presets[] = {
    {"tiny", 256, 4, 4, 2, 128, 768, 4096, 4096, false},
    {"qwen3-0.6b", 1024, 28, 16, 8, 128, 3072, 151936, 40960, true},
    {"qwen3-8b", 4096, 36, 32, 8, 128, 12288, 151936, 40960, false},
    {"qwen3-14b", 5120, 40, 40, 8, 128, 17408, 151936, 40960, false},
    {"qwen3-32b", 5120, 64, 64, 8, 128, 25600, 151936, 40960, false},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

const char *const *model_preset_names(void) {
    static const char *names[N_PRESETS + 1];
    for (int i = 0; i < N_PRESETS; i++) names[i] = presets[i].name;
    names[N_PRESETS] = NULL;
    return names;
}

int model_config_preset(const char *name, bool fp8, model_config_t *cfg, err_t *err) {
    for (int i = 0; i < N_PRESETS; i++) {
        const preset_t *p = &presets[i];
        if (strcmp(p->name, name) != 0) continue;
        memset(cfg, 0, sizeof *cfg);
        cfg->arch = model_arch_find("qwen3");
        snprintf(cfg->model_type, sizeof cfg->model_type, "qwen3");
        snprintf(cfg->source, sizeof cfg->source, "preset %s", name);
        cfg->hidden_size = p->hidden;
        cfg->n_layers = p->layers;
        cfg->n_heads = p->heads;
        cfg->n_kv_heads = p->kv_heads;
        cfg->head_dim = p->head_dim;
        cfg->intermediate_size = p->inter;
        cfg->vocab_size = p->vocab;
        cfg->max_position_embeddings = p->max_pos;
        cfg->rope_theta = 1000000.0;
        cfg->rms_norm_eps = 1e-6f;
        cfg->tie_word_embeddings = p->tied;
        cfg->bos_token_id = p->vocab == 151936 ? 151643 : -1;
        cfg->eos_token_id = p->vocab == 151936 ? 151645 : -1;
        cfg->torch_dtype = DT_BF16;
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

int64_t model_param_count(const model_config_t *c) {
    int64_t n = 0;
    const model_arch_t *a = c->arch;
    for (int i = 0; i < a->n_tensors; i++) {
        const wspec_t *s = &a->tensors[i];
        if (!s->per_layer && s->slot == G_LM_HEAD && c->tie_word_embeddings) continue;
        int64_t size = model_dim(c, s->rows) * model_dim(c, s->cols);
        n += s->per_layer ? size * c->n_layers : size;
    }
    return n;
}

void model_config_describe(const model_config_t *c, char *buf, size_t size) {
    snprintf(buf, size,
             "%s: %d layers, hidden %d, %d/%d heads x %d, intermediate %d, vocab %d, "
             "%.2fB params, %s%s",
             c->model_type, c->n_layers, c->hidden_size, c->n_heads, c->n_kv_heads, c->head_dim,
             c->intermediate_size, c->vocab_size, (double)model_param_count(c) / 1e9,
             c->fp8 ? "fp8 block 128x128" : dtype_name(c->torch_dtype),
             c->tie_word_embeddings ? ", tied embeddings" : "");
}

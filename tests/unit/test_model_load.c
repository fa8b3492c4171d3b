/* Loading models: the fixtures load and bind; every kind of broken model directory fails with
 * one message naming the file and the problem; presets and dummy weights have the real shapes. */
#include <cjson/cJSON.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <math.h>

#include <cmocka.h>

#include "model.h"
#include "testutil.h"
#include "weights.h"

#define FP8_SHARD1 "model-00001-of-00002.safetensors"
#define FP8_SHARD2 "model-00002-of-00002.safetensors"

// ---------------------------------------------------------------------------------------------
// Helpers

static int open_dir(const char *dir, model_weights_t **w, err_t *err) {
    model_source_t src = {.model = dir, .format = LOAD_AUTO};
    return weights_open(&src, w, err);
}

/* Asserts that loading `dir` fails with a message containing every given phrase. */
static void expect_failure(const char *dir, ...) {
    model_weights_t *w = NULL;
    err_t err = {{0}};
    int rc = open_dir(dir, &w, &err);
    if (rc == 0) weights_destroy(w);
    assert_int_equal(rc, -1);
    assert_null(w);
    va_list ap;
    va_start(ap, dir);
    for (const char *phrase; (phrase = va_arg(ap, const char *));) {
        if (!strstr(err.msg, phrase))
            fail_msg("message \"%s\" does not contain \"%s\"", err.msg, phrase);
    }
    va_end(ap);
}

static char *file_path(const char *dir, const char *name) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* Edits config.json of dir with fn. */
static void edit_config(const char *dir, void (*fn)(cJSON *cfg)) {
    char *text = tu_read(file_path(dir, "config.json"), NULL);
    assert_non_null(text);
    cJSON *cfg = cJSON_Parse(text);
    assert_non_null(cfg);
    fn(cfg);
    char *out = cJSON_Print(cfg);
    tu_write_text(dir, "config.json", out);
    free(out);
    free(text);
    cJSON_Delete(cfg);
}

/* Rewrites a safetensors file's header with fn, keeping its data section. */
static void edit_header(const char *dir, const char *file, void (*fn)(cJSON *hdr)) {
    size_t len;
    unsigned char *bytes = (unsigned char *)tu_read(file_path(dir, file), &len);
    assert_non_null(bytes);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | bytes[i];
    assert_true(8 + hlen <= len);
    char *htext = strndup((char *)bytes + 8, hlen);
    cJSON *hdr = cJSON_Parse(htext);
    assert_non_null(hdr);
    fn(hdr);
    char *out = cJSON_PrintUnformatted(hdr);
    uint64_t nlen = strlen(out);
    size_t data_len = len - 8 - hlen;
    unsigned char *nbytes = malloc(8 + nlen + data_len);
    for (int i = 0; i < 8; i++)
        nbytes[i] = (unsigned char)(nlen >> (8 * i));
    memcpy(nbytes + 8, out, nlen);
    memcpy(nbytes + 8 + nlen, bytes + 8 + hlen, data_len);
    tu_write(dir, file, nbytes, 8 + nlen + data_len);
    free(nbytes);
    free(out);
    free(htext);
    free(bytes);
    cJSON_Delete(hdr);
}

static void set_number(cJSON *obj, const char *key, double v) {
    cJSON_ReplaceItemInObjectCaseSensitive(obj, key, cJSON_CreateNumber(v));
}

static char *fixture_copy(const char *name) {
    return tu_copy_dir(tu_fixture(name));
}

static void done(char *dir) {
    tu_rmrf(dir);
    free(dir);
}

// ---------------------------------------------------------------------------------------------
// Good models

static void test_tiny_qwen3_loads(void **state) {
    model_weights_t *w;
    err_t err = {{0}};
    if (open_dir(tu_fixture("tiny-qwen3"), &w, &err) < 0) fail_msg("%s", err.msg);
    const model_config_t *c = weights_config(w);
    assert_string_equal(c->model_type, "qwen3");
    assert_int_equal(c->head_dim, 128);
    assert_true(c->head_dim * c->n_heads != c->hidden_size); /* head_dim is explicit */
    assert_true(c->tie_word_embeddings);
    assert_true(c->rope_theta == 1e6);
    /* tied: lm_head is the embedding, not a copy */
    assert_ptr_equal(weights_global(w, G_LM_HEAD)->data, weights_global(w, G_EMBED)->data);
    const wtensor_t *q = weights_layer(w, 0, L_Q);
    assert_int_equal(q->dtype, DT_BF16);
    assert_int_equal(q->rows, c->n_heads * c->head_dim);
    assert_int_equal(q->cols, c->hidden_size);
    assert_null(q->scale_inv);
    const wtensor_t *qn = weights_layer(w, c->n_layers - 1, L_Q_NORM);
    assert_int_equal(qn->rows, 1);
    assert_int_equal(qn->cols, c->head_dim);
    weights_destroy(w);
}

static void test_tiny_qwen3_fp8_loads(void **state) {
    model_weights_t *w;
    err_t err = {{0}};
    if (open_dir(tu_fixture("tiny-qwen3-fp8"), &w, &err) < 0) fail_msg("%s", err.msg);
    const model_config_t *c = weights_config(w);
    assert_true(c->fp8);
    assert_false(c->tie_word_embeddings);
    assert_true(c->rope_theta == 1e6); /* from rope_parameters */
    assert_ptr_not_equal(weights_global(w, G_LM_HEAD)->data, weights_global(w, G_EMBED)->data);
    assert_int_equal(weights_global(w, G_LM_HEAD)->dtype, DT_BF16);
    const wtensor_t *g = weights_layer(w, 0, L_GATE);
    assert_int_equal(g->dtype, DT_F8_E4M3);
    assert_non_null(g->scale_inv);
    assert_int_equal(g->scale_rows, (c->intermediate_size + 127) / 128);
    assert_int_equal(g->scale_cols, (c->hidden_size + 127) / 128);
    const wtensor_t *d = weights_layer(w, c->n_layers - 1, L_DOWN);
    assert_int_equal(d->scale_cols, (c->intermediate_size + 127) / 128);
    /* dequantized rows are finite and not all zero */
    float *row = malloc((size_t)d->cols * sizeof *row);
    wtensor_row_f32(d, d->rows - 1, row);
    double sum = 0;
    for (int64_t k = 0; k < d->cols; k++)
        sum += row[k] * row[k];
    assert_true(sum > 0 && sum < 1e6);
    free(row);
    weights_destroy(w);
}

/* Qwen3-MoE: tiny-qwen3-moe (BF16, layer 1 dense through mlp_only_layers, tied) and
 * tiny-qwen3-moe-fp8 (decoder_sparse_step 2, block FP8 experts, BF16 routers, two shards). */
static void test_tiny_qwen3_moe_loads(void **state) {
    model_weights_t *w;
    err_t err = {{0}};
    if (open_dir(tu_fixture("tiny-qwen3-moe"), &w, &err) < 0) fail_msg("%s", err.msg);
    const model_config_t *c = weights_config(w);
    assert_string_equal(c->model_type, "qwen3_moe");
    assert_int_equal(c->n_experts, 8); /* written as num_local_experts */
    assert_int_equal(c->n_experts_per_tok, 2);
    assert_false(c->norm_topk_prob);
    assert_int_equal(c->layer[0].mlp, MLP_MOE);
    assert_int_equal(c->layer[1].mlp, MLP_DENSE);
    assert_int_equal(c->layer[2].mlp, MLP_MOE);
    assert_int_equal(weights_layer(w, 0, L_ROUTER)->rows, 8);
    assert_int_equal(weights_layer(w, 1, L_ROUTER)->rows, 0); /* a dense layer has none */
    assert_int_equal(weights_layer(w, 1, L_GATE)->rows, c->intermediate_size);
    assert_int_equal(weights_layer(w, 0, L_GATE)->rows, 0);
    const wtensor_t *d = weights_expert(w, 2, 7, E_DOWN);
    assert_int_equal(d->rows, c->hidden_size);
    assert_int_equal(d->cols, c->moe_intermediate_size);
    assert_int_equal(d->dtype, DT_BF16);
    weights_destroy(w);

    if (open_dir(tu_fixture("tiny-qwen3-moe-fp8"), &w, &err) < 0) fail_msg("%s", err.msg);
    c = weights_config(w);
    assert_int_equal(c->n_experts, 12);
    assert_int_equal(c->n_experts_per_tok, 3);
    assert_true(c->norm_topk_prob && c->fp8);
    for (int l = 0; l < c->n_layers; l++)
        assert_int_equal(c->layer[l].mlp, l % 2 ? MLP_MOE : MLP_DENSE);
    assert_int_equal(weights_layer(w, 3, L_ROUTER)->dtype, DT_BF16);
    const wtensor_t *u = weights_expert(w, 3, 11, E_UP);
    assert_int_equal(u->dtype, DT_F8_E4M3);
    assert_int_equal(u->scale_rows, 1);
    assert_int_equal(u->scale_cols, (c->hidden_size + 127) / 128);
    weights_destroy(w);
}

static void drop_expert(cJSON *h) {
    cJSON *t =
        cJSON_DetachItemFromObjectCaseSensitive(h, "model.layers.2.mlp.experts.5.up_proj.weight");
    assert_non_null(t);
    cJSON_AddItemToObject(h, "model.layers.2.mlp.experts.5.up_proj.unused", t);
}

static void router_to_fp8(cJSON *h) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "model.layers.1.mlp.gate.weight");
    assert_non_null(t);
    /* the same bytes as [E, 2H] e4m3, so that only the dtype is wrong */
    cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
    int cols = cJSON_GetArrayItem(shape, 1)->valueint;
    cJSON_ReplaceItemInArray(shape, 1, cJSON_CreateNumber(2 * cols));
    cJSON_ReplaceItemInObjectCaseSensitive(t, "dtype", cJSON_CreateString("F8_E4M3"));
}

static void shrink_moe_intermediate(cJSON *c) {
    set_number(c, "moe_intermediate_size", 32);
}

/* A missing expert, a quantized router and experts of another shape are named with their file
 * and tensor. */
static void test_moe_broken(void **state) {
    char *dir = fixture_copy("tiny-qwen3-moe");
    edit_header(dir, "model.safetensors", drop_expert);
    expect_failure(dir, "model.safetensors",
                   "missing tensor 'model.layers.2.mlp.experts.5.up_proj.weight'",
                   "8 experts in layer 2", NULL);
    done(dir);
    dir = fixture_copy("tiny-qwen3-moe-fp8");
    edit_header(dir, FP8_SHARD1, router_to_fp8);
    expect_failure(dir, FP8_SHARD1, "model.layers.1.mlp.gate.weight", "F8_E4M3",
                   "router stays unquantized", NULL);
    done(dir);
    dir = fixture_copy("tiny-qwen3-moe");
    edit_config(dir, shrink_moe_intermediate);
    expect_failure(dir, "model.safetensors", "model.layers.0.mlp.experts.0.gate_proj.weight",
                   "moe_intermediate_size 32", NULL);
    done(dir);
}

// ---------------------------------------------------------------------------------------------
// Broken config.json

static void test_missing_directory(void **state) {
    expect_failure("/nonexistent/model-dir", "/nonexistent/model-dir", "cannot open", NULL);
}

static void test_missing_config(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    unlink(file_path(dir, "config.json"));
    expect_failure(dir, "config.json", "missing", NULL);
    done(dir);
}

static void test_invalid_config(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    tu_write_text(dir, "config.json", "{\"model_type\": \"qwen3\", \"hidden_size\": ");
    expect_failure(dir, "config.json", "invalid JSON", NULL);
    done(dir);
}

static void drop_hidden_size(cJSON *c) {
    cJSON_DeleteItemFromObjectCaseSensitive(c, "hidden_size");
}

static void test_config_missing_field(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    edit_config(dir, drop_hidden_size);
    expect_failure(dir, "config.json", "hidden_size", NULL);
    done(dir);
}

static void set_llama(cJSON *c) {
    cJSON_ReplaceItemInObjectCaseSensitive(c, "model_type", cJSON_CreateString("llama"));
}

static void test_unknown_model_type(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    edit_config(dir, set_llama);
    expect_failure(dir, "config.json", "model_type \"llama\" is not supported", "qwen3", NULL);
    done(dir);
}

static void set_yarn(cJSON *c) {
    cJSON *rs = cJSON_CreateObject();
    cJSON_AddStringToObject(rs, "rope_type", "yarn");
    cJSON_AddNumberToObject(rs, "factor", 4.0);
    cJSON_AddNumberToObject(rs, "original_max_position_embeddings", 32768);
    cJSON_DeleteItemFromObjectCaseSensitive(c, "rope_scaling");
    cJSON_AddItemToObject(c, "rope_scaling", rs);
}

static void test_rope_scaling_refused(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    edit_config(dir, set_yarn);
    expect_failure(dir, "config.json", "rope_scaling", "yarn", "not implemented", NULL);
    done(dir);
}

static void set_rope_parameters_yarn(cJSON *c) {
    cJSON *rp = cJSON_CreateObject();
    cJSON_AddStringToObject(rp, "rope_type", "yarn");
    cJSON_AddNumberToObject(rp, "rope_theta", 1e6);
    cJSON_AddItemToObject(c, "rope_parameters", rp);
}

static void test_rope_parameters_scaling_refused(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    edit_config(dir, set_rope_parameters_yarn);
    expect_failure(dir, "config.json", "rope_type \"yarn\"", NULL);
    done(dir);
}

/* Found by fuzz_config (tests/fuzz/corpus/config/crash-*): head_dim's default of hidden_size /
 * num_attention_heads made 0, accepted; shapes whose parameter count overflowed int64. */
static void test_config_head_dim_default_zero(void **state) {
    model_config_t cfg;
    err_t err = {{0}};
    const char *text =
        "{\"model_type\": \"qwen3\", \"hidden_size\": 2, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 4, \"intermediate_size\": 8, \"vocab_size\": 16, "
        "\"num_hidden_layers\": 1, \"max_position_embeddings\": 64}";
    assert_int_equal(model_config_parse(text, "config.json", &cfg, &err), -1);
    assert_non_null(strstr(err.msg, "head_dim"));
}

static void test_config_too_many_params(void **state) {
    model_config_t cfg;
    err_t err = {{0}};
    const char *text =
        "{\"model_type\": \"qwen3\", \"hidden_size\": 1000000, \"num_attention_heads\": 1000, "
        "\"num_key_value_heads\": 1000, \"head_dim\": 1000, \"intermediate_size\": 1000000, "
        "\"vocab_size\": 1000000, \"num_hidden_layers\": 256, \"max_position_embeddings\": 64}";
    assert_int_equal(model_config_parse(text, "config.json", &cfg, &err), -1);
    assert_non_null(strstr(err.msg, "parameters"));
}

/* Found by fuzz_config (crash-huge-head-dim, a timeout): head_dim 10^9 with hidden_size 2 made
 * few enough parameters, but --load-format dummy filled 2 GB q_norm and k_norm vectors per
 * layer. */
static void test_config_width_beyond_limit(void **state) {
    model_config_t cfg;
    err_t err = {{0}};
    const char *text =
        "{\"model_type\": \"qwen3\", \"hidden_size\": 2, \"num_attention_heads\": 1, "
        "\"head_dim\": 1000000000, \"intermediate_size\": 8, \"vocab_size\": 16, "
        "\"num_hidden_layers\": 1, \"max_position_embeddings\": 64}";
    assert_int_equal(model_config_parse(text, "config.json", &cfg, &err), -1);
    assert_non_null(strstr(err.msg, "head_dim 1000000000 is more than"));
}

/* Widths made of two fields, each within the bound: attention heads x head_dim, and the Gated
 * DeltaNet's key and value widths (heads x head dims) and its conv channels. Each product is
 * refused by name before anything computes it in int (signed overflow). Also the MoE's and the
 * Gated DeltaNet's own fields. */
static void test_config_derived_width_beyond_limit(void **state) {
    static const struct {
        const char *fields, *want;
    } cases[] = {
        {"\"model_type\": \"qwen3\", \"num_attention_heads\": 1048576, \"head_dim\": 1048576",
         "num_attention_heads x head_dim 1099511627776 is more than"},
        {"\"model_type\": \"qwen3\", \"num_attention_heads\": 4096, \"num_key_value_heads\": 4096, "
         "\"head_dim\": 1024",
         "num_attention_heads x head_dim 4194304 is more than"},
        {"\"model_type\": \"qwen3_5_text\", \"num_attention_heads\": 1, \"head_dim\": 8, "
         "\"linear_num_key_heads\": 1048576, \"linear_key_head_dim\": 1048576, "
         "\"linear_num_value_heads\": 1048576, \"linear_value_head_dim\": 1",
         "linear_num_key_heads x linear_key_head_dim 1099511627776 is more than"},
        {"\"model_type\": \"qwen3_5_text\", \"num_attention_heads\": 1, \"head_dim\": 8, "
         "\"linear_num_key_heads\": 1, \"linear_key_head_dim\": 8, "
         "\"linear_num_value_heads\": 2097152, \"linear_value_head_dim\": 1",
         "linear_num_value_heads 2097152 is more than"},
        {"\"model_type\": \"qwen3_5_text\", \"num_attention_heads\": 1, \"head_dim\": 8, "
         "\"linear_num_key_heads\": 512, \"linear_key_head_dim\": 1024, "
         "\"linear_num_value_heads\": 512, \"linear_value_head_dim\": 1024",
         "Gated DeltaNet conv channels (2 x 524288 + 524288) 1572864 is more than"},
        {"\"model_type\": \"qwen3_moe\", \"num_attention_heads\": 1, \"head_dim\": 8, "
         "\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 2000000",
         "moe_intermediate_size 2000000 is more than"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "{%s, \"hidden_size\": 2, \"intermediate_size\": 8, \"vocab_size\": 16, "
                 "\"num_hidden_layers\": 1, \"max_position_embeddings\": 64}",
                 cases[i].fields);
        model_config_t cfg;
        err_t err = {{0}};
        if (model_config_parse(text, "config.json", &cfg, &err) != -1)
            fail_msg("case %zu: accepted", i);
        if (!strstr(err.msg, cases[i].want))
            fail_msg("case %zu: \"%s\", expected \"%s\"", i, err.msg, cases[i].want);
    }
}

// ---------------------------------------------------------------------------------------------
// Config and checkpoint disagree

static void shrink_intermediate(cJSON *c) {
    set_number(c, "intermediate_size", 256);
}

static void test_shape_mismatch(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    edit_config(dir, shrink_intermediate);
    expect_failure(dir, "model.safetensors", "mlp.gate_proj.weight", "has shape", "[256, ",
                   "intermediate_size 256", NULL);
    done(dir);
}

static void add_layer(cJSON *c) {
    int n = cJSON_GetObjectItemCaseSensitive(c, "num_hidden_layers")->valueint;
    set_number(c, "num_hidden_layers", n + 1);
}

static void test_missing_tensor(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    edit_config(dir, add_layer);
    char *text = tu_read(file_path(dir, "config.json"), NULL);
    cJSON *cfg = cJSON_Parse(text);
    char want[128];
    snprintf(want, sizeof want, "missing tensor 'model.layers.%d.",
             cJSON_GetObjectItemCaseSensitive(cfg, "num_hidden_layers")->valueint - 1);
    cJSON_Delete(cfg);
    free(text);
    expect_failure(dir, "model.safetensors", want, NULL);
    done(dir);
}

static void norm_to_i16(cJSON *h) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "model.layers.0.self_attn.q_norm.weight");
    assert_non_null(t);
    cJSON_ReplaceItemInObjectCaseSensitive(t, "dtype", cJSON_CreateString("I16"));
}

static void test_dtype_mismatch(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    edit_header(dir, "model.safetensors", norm_to_i16);
    expect_failure(dir, "model.safetensors", "q_norm.weight", "dtype I16", NULL);
    done(dir);
}

static void untie(cJSON *c) {
    cJSON_ReplaceItemInObjectCaseSensitive(c, "tie_word_embeddings", cJSON_CreateFalse());
}

static void test_untied_config_needs_lm_head(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    edit_config(dir, untie);
    expect_failure(dir, "model.safetensors", "missing tensor 'lm_head.weight'", NULL);
    done(dir);
}

static void drop_quantization(cJSON *c) {
    cJSON_DeleteItemFromObjectCaseSensitive(c, "quantization_config");
}

static void test_fp8_without_quantization_config(void **state) {
    char *dir = fixture_copy("tiny-qwen3-fp8");
    edit_config(dir, drop_quantization);
    expect_failure(dir, "F8_E4M3", "no fp8 quantization_config", NULL);
    done(dir);
}

// ---------------------------------------------------------------------------------------------
// Broken safetensors files

static void test_header_length_beyond_file(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    size_t len;
    unsigned char *bytes = (unsigned char *)tu_read(file_path(dir, "model.safetensors"), &len);
    uint64_t huge = (uint64_t)len * 4;
    for (int i = 0; i < 8; i++)
        bytes[i] = (unsigned char)(huge >> (8 * i));
    tu_write(dir, "model.safetensors", bytes, len);
    free(bytes);
    expect_failure(dir, "model.safetensors", "header length", NULL);
    done(dir);
}

static void test_invalid_header_json(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    size_t len;
    char *bytes = tu_read(file_path(dir, "model.safetensors"), &len);
    memcpy(bytes + 8, "{\"a\": [1, 2", 11);
    tu_write(dir, "model.safetensors", bytes, len);
    free(bytes);
    expect_failure(dir, "model.safetensors", "JSON", NULL);
    done(dir);
}

static void offsets_out_of_range(cJSON *h) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "model.norm.weight");
    cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    double end = cJSON_GetArrayItem(off, 1)->valuedouble;
    cJSON_ReplaceItemInArray(off, 0, cJSON_CreateNumber(end + 1e9));
    cJSON_ReplaceItemInArray(off, 1, cJSON_CreateNumber(end + 1e9 + 256));
}

static void test_offsets_out_of_range(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    edit_header(dir, "model.safetensors", offsets_out_of_range);
    expect_failure(dir, "model.safetensors", "model.norm.weight", NULL);
    done(dir);
}

/* Points layer 0's k_norm at the bytes of its q_norm (same size). */
static void offsets_overlap(cJSON *h) {
    cJSON *q = cJSON_GetObjectItemCaseSensitive(h, "model.layers.0.self_attn.q_norm.weight");
    cJSON *k = cJSON_GetObjectItemCaseSensitive(h, "model.layers.0.self_attn.k_norm.weight");
    cJSON_ReplaceItemInObjectCaseSensitive(
        k, "data_offsets", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(q, "data_offsets"), 1));
}

static void test_offsets_overlap(void **state) {
    char *dir = fixture_copy("tiny-qwen3");
    edit_header(dir, "model.safetensors", offsets_overlap);
    expect_failure(dir, "model.safetensors", "overlap", "k_norm", NULL);
    done(dir);
}

static void test_truncated_shard(void **state) {
    char *dir = fixture_copy("tiny-qwen3-fp8");
    size_t len;
    char *bytes = tu_read(file_path(dir, FP8_SHARD2), &len);
    tu_write(dir, FP8_SHARD2, bytes, len - len / 3);
    free(bytes);
    expect_failure(dir, FP8_SHARD2, "truncated", NULL);
    done(dir);
}

static void test_missing_shard(void **state) {
    char *dir = fixture_copy("tiny-qwen3-fp8");
    unlink(file_path(dir, FP8_SHARD1));
    expect_failure(dir, FP8_SHARD1, NULL);
    done(dir);
}

static void drop_one_scale(cJSON *h) {
    cJSON *found = NULL;
    cJSON *t;
    cJSON_ArrayForEach(t, h) {
        if (strstr(t->string, ".weight_scale_inv")) found = t;
    }
    assert_non_null(found);
    cJSON_DeleteItemFromObjectCaseSensitive(h, found->string);
}

static void test_missing_scale(void **state) {
    char *dir = fixture_copy("tiny-qwen3-fp8");
    edit_header(dir, FP8_SHARD2, drop_one_scale);
    expect_failure(dir, "weight_scale_inv", NULL);
    done(dir);
}

// ---------------------------------------------------------------------------------------------
// Presets and dummy weights

static void test_presets_have_real_sizes(void **state) {
    /* Total parameters per the model cards: 0.6B (0.44B non-embedding), 14.8B, 32.8B. */
    struct {
        const char *name;
        double billions;
    } cases[] = {{"qwen3-0.6b", 0.596}, {"qwen3-14b", 14.77}, {"qwen3-32b", 32.76}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_config_t c;
        err_t err = {{0}};
        assert_int_equal(model_config_preset(cases[i].name, true, &c, &err), 0);
        double b = (double)model_param_count(&c) / 1e9;
        if (b < cases[i].billions * 0.99 || b > cases[i].billions * 1.01)
            fail_msg("%s: %.3fB parameters, expected about %.3fB", cases[i].name, b,
                     cases[i].billions);
        assert_true(c.fp8);
    }
    model_config_t c;
    err_t err = {{0}};
    assert_int_equal(model_config_preset("qwen3-1000b", false, &c, &err), -1);
    assert_non_null(strstr(err.msg, "qwen3-14b"));
}

static void test_dummy_weights(void **state) {
    model_config_t c;
    err_t err = {{0}};
    assert_int_equal(model_config_preset("tiny", true, &c, &err), 0);
    model_weights_t *a, *b, *other;
    assert_int_equal(weights_dummy(&c, 7, &a, &err), 0);
    assert_int_equal(weights_dummy(&c, 7, &b, &err), 0);
    assert_int_equal(weights_dummy(&c, 8, &other, &err), 0);
    const wtensor_t *wa = weights_layer(a, 1, L_UP), *wb = weights_layer(b, 1, L_UP);
    assert_int_equal(wa->dtype, DT_F8_E4M3);
    assert_int_equal(wa->rows, c.intermediate_size);
    assert_memory_equal(wa->data, wb->data, (size_t)(wa->rows * wa->cols));
    assert_memory_not_equal(wa->data, weights_layer(other, 1, L_UP)->data,
                            (size_t)(wa->rows * wa->cols));
    /* dequantized values have the initializer's spread */
    float *row = malloc((size_t)wa->cols * sizeof *row);
    double sq = 0;
    for (int64_t r = 0; r < 16; r++) {
        wtensor_row_f32(wa, r, row);
        for (int64_t k = 0; k < wa->cols; k++)
            sq += row[k] * row[k];
    }
    double std = sqrt(sq / (16.0 * wa->cols));
    assert_true(std > 0.017 && std < 0.023);
    free(row);
    float *norm = malloc((size_t)c.hidden_size * sizeof *norm);
    wtensor_row_f32(weights_layer(a, 0, L_ATTN_NORM), 0, norm);
    for (int i = 0; i < c.hidden_size; i++)
        assert_true(norm[i] == 1.0f);
    free(norm);
    assert_int_equal(weights_global(a, G_LM_HEAD)->dtype, DT_BF16); /* as real -FP8 checkpoints */
    weights_destroy(a);
    weights_destroy(b);
    weights_destroy(other);
}

static void test_dummy_from_config_dir(void **state) {
    model_source_t src = {.model = tu_fixture("tiny-qwen3-fp8"), .format = LOAD_DUMMY, .seed = 1};
    model_weights_t *w;
    err_t err = {{0}};
    if (weights_open(&src, &w, &err) < 0) fail_msg("%s", err.msg);
    assert_true(weights_config(w)->fp8);
    assert_int_equal(weights_layer(w, 0, L_Q)->dtype, DT_F8_E4M3);
    assert_non_null(weights_dir(w));
    weights_destroy(w);
    src.model = "no-such-preset";
    assert_int_equal(weights_open(&src, &w, &err), -1);
    assert_non_null(strstr(err.msg, "not a preset"));
}

// ---------------------------------------------------------------------------------------------
// FP8 KV cache scales (weights_kv_scales)

static void add_scale(const char *dir, const char *file, const char *name, const char *dtype, int n,
                      float v) {
    int64_t shape[1] = {n};
    float f[16];
    uint16_t h[16];
    for (int i = 0; i < n; i++)
        f[i] = v * (i + 1) / n; /* per head: the last is the largest */
    if (!strcmp(dtype, "BF16")) {
        for (int i = 0; i < n; i++)
            h[i] = dtype_f32_to_bf16(f[i]);
        tu_safetensors_add(dir, file, name, dtype, shape, n == 1 ? 0 : 1, h, 2 * (size_t)n);
    } else {
        tu_safetensors_add(dir, file, name, dtype, shape, n == 1 ? 0 : 1, f, 4 * (size_t)n);
    }
}

static void expect_kv_scales(const model_weights_t *w, int layer, float k, float v) {
    float ks, vs;
    weights_kv_scales(w, layer, &ks, &vs);
    if (ks != k || vs != v)
        fail_msg("layer %d: k/v scales %g / %g, expected %g / %g", layer, ks, vs, k, v);
}

static void test_kv_scales_default(void **state) {
    (void)state;
    model_weights_t *w;
    err_t err = {{0}};
    if (open_dir(tu_fixture("tiny-qwen3"), &w, &err) < 0) fail_msg("%s", err.msg);
    for (int l = 0; l < weights_config(w)->n_layers; l++)
        expect_kv_scales(w, l, 1.0f, 1.0f);
    assert_int_equal(weights_kv_scales_loaded(w), 0);
    weights_destroy(w);
}

/* Every spelling vLLM reads, scalar, [1] and per head, F32 and BF16; none is "not used". */
static void test_kv_scales_spellings(void **state) {
    (void)state;
    char *dir = fixture_copy("tiny-qwen3");
    const char *f = "model.safetensors";
    add_scale(dir, f, "model.layers.0.self_attn.k_scale", "F32", 1, 0.5f);
    add_scale(dir, f, "model.layers.0.self_attn.v_scale", "BF16", 1, 0.25f);
    add_scale(dir, f, "model.layers.1.self_attn.k_proj.k_scale", "F32", 2, 0.125f); /* per head */
    add_scale(dir, f, "model.layers.1.self_attn.v_proj.output_scale", "F32", 1, 3.0f);
    add_scale(dir, f, "model.layers.2.self_attn.kv_scale", "F32", 1, 0.75f); /* both */
    model_weights_t *w;
    err_t err = {{0}};
    if (open_dir(dir, &w, &err) < 0) fail_msg("%s", err.msg);
    expect_kv_scales(w, 0, 0.5f, 0.25f);
    expect_kv_scales(w, 1, 0.125f, 3.0f);
    expect_kv_scales(w, 2, 0.75f, 0.75f);
    assert_int_equal(weights_kv_scales_loaded(w), 3);
    if (strstr(weights_note(w), "not used")) fail_msg("note: %s", weights_note(w));
    assert_non_null(strstr(weights_note(w), "FP8 KV cache scales for 3 layers"));
    weights_destroy(w);
    done(dir);

    /* vLLM's own names (attn.), one layer only: the others keep 1.0 */
    dir = fixture_copy("tiny-qwen3");
    add_scale(dir, f, "model.layers.1.self_attn.attn.k_scale", "F32", 1, 2.0f);
    add_scale(dir, f, "model.layers.1.self_attn.attn.v_scale", "F32", 1, 4.0f);
    if (open_dir(dir, &w, &err) < 0) fail_msg("%s", err.msg);
    expect_kv_scales(w, 0, 1.0f, 1.0f);
    expect_kv_scales(w, 1, 2.0f, 4.0f);
    assert_int_equal(weights_kv_scales_loaded(w), 1);
    weights_destroy(w);
    done(dir);
}

/* A sharded FP8 checkpoint (the index maps them), and Qwen3.5: its full-attention layers and
 * its MTP layer. */
static void test_kv_scales_sharded_and_qwen35(void **state) {
    (void)state;
    char *dir = fixture_copy("tiny-qwen3-fp8");
    add_scale(dir, FP8_SHARD2, "model.layers.1.self_attn.k_scale", "F32", 1, 0.0625f);
    add_scale(dir, FP8_SHARD1, "model.layers.1.self_attn.v_scale", "F32", 1, 0.03125f);
    model_weights_t *w;
    err_t err = {{0}};
    if (open_dir(dir, &w, &err) < 0) fail_msg("%s", err.msg);
    expect_kv_scales(w, 1, 0.0625f, 0.03125f);
    weights_destroy(w);
    done(dir);

    dir = fixture_copy("tiny-qwen3.5");
    const char *f = "model.safetensors";
    add_scale(dir, f, "model.language_model.layers.3.self_attn.k_scale", "F32", 1, 0.5f);
    add_scale(dir, f, "model.language_model.layers.3.self_attn.v_scale", "F32", 1, 0.25f);
    add_scale(dir, f, "mtp.layers.0.self_attn.k_scale", "F32", 1, 2.0f);
    add_scale(dir, f, "mtp.layers.0.self_attn.v_scale", "F32", 1, 8.0f);
    if (open_dir(dir, &w, &err) < 0) fail_msg("%s", err.msg);
    const model_config_t *c = weights_config(w);
    assert_true(c->n_mtp_layers == 1 && c->layer[3].attn != ATTN_LINEAR);
    expect_kv_scales(w, 3, 0.5f, 0.25f);
    expect_kv_scales(w, 7, 1.0f, 1.0f);
    expect_kv_scales(w, c->n_layers, 2.0f, 8.0f);
    assert_int_equal(weights_kv_scales_loaded(w), 2);
    if (strstr(weights_note(w), "not used")) fail_msg("note: %s", weights_note(w));
    weights_destroy(w);
    done(dir);
}

static void test_kv_scales_broken(void **state) {
    (void)state;
    const char *f = "model.safetensors";
    char *dir = fixture_copy("tiny-qwen3");
    add_scale(dir, f, "model.layers.2.self_attn.v_scale", "F32", 1, -1.0f);
    expect_failure(dir, f, "model.layers.2.self_attn.v_scale", "positive and finite", NULL);
    done(dir);
    dir = fixture_copy("tiny-qwen3");
    add_scale(dir, f, "model.layers.0.self_attn.k_scale", "F32", 3, 1.0f); /* 2 KV heads */
    expect_failure(dir, f, "model.layers.0.self_attn.k_scale", "shape [3]",
                   "one value or one per KV head (2)", NULL);
    done(dir);
    dir = fixture_copy("tiny-qwen3");
    int32_t one = 1;
    tu_safetensors_add(dir, f, "model.layers.0.self_attn.k_scale", "I32", NULL, 0, &one, 4);
    expect_failure(dir, f, "model.layers.0.self_attn.k_scale", "dtype I32", NULL);
    done(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_qwen3_loads),
        cmocka_unit_test(test_tiny_qwen3_fp8_loads),
        cmocka_unit_test(test_tiny_qwen3_moe_loads),
        cmocka_unit_test(test_moe_broken),
        cmocka_unit_test(test_missing_directory),
        cmocka_unit_test(test_missing_config),
        cmocka_unit_test(test_invalid_config),
        cmocka_unit_test(test_config_missing_field),
        cmocka_unit_test(test_unknown_model_type),
        cmocka_unit_test(test_rope_scaling_refused),
        cmocka_unit_test(test_rope_parameters_scaling_refused),
        cmocka_unit_test(test_config_head_dim_default_zero),
        cmocka_unit_test(test_config_too_many_params),
        cmocka_unit_test(test_config_width_beyond_limit),
        cmocka_unit_test(test_config_derived_width_beyond_limit),
        cmocka_unit_test(test_shape_mismatch),
        cmocka_unit_test(test_missing_tensor),
        cmocka_unit_test(test_dtype_mismatch),
        cmocka_unit_test(test_untied_config_needs_lm_head),
        cmocka_unit_test(test_fp8_without_quantization_config),
        cmocka_unit_test(test_header_length_beyond_file),
        cmocka_unit_test(test_invalid_header_json),
        cmocka_unit_test(test_offsets_out_of_range),
        cmocka_unit_test(test_offsets_overlap),
        cmocka_unit_test(test_truncated_shard),
        cmocka_unit_test(test_missing_shard),
        cmocka_unit_test(test_missing_scale),
        cmocka_unit_test(test_kv_scales_default),
        cmocka_unit_test(test_kv_scales_spellings),
        cmocka_unit_test(test_kv_scales_sharded_and_qwen35),
        cmocka_unit_test(test_kv_scales_broken),
        cmocka_unit_test(test_presets_have_real_sizes),
        cmocka_unit_test(test_dummy_weights),
        cmocka_unit_test(test_dummy_from_config_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Qwen3-MoE as a model description: config.json fields (num_experts or num_local_experts,
 * num_experts_per_tok, moe_intermediate_size, norm_topk_prob, decoder_sparse_step,
 * mlp_only_layers) become a layer description and clean errors; the presets have the model
 * cards' total and active parameters; the shard plan's memory per GPU for Qwen3-235B-A22B FP8
 * at tensor-parallel 4 / 8 and expert parallel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "model.h"
#include "shard_plan.h"

/* A small Qwen3-MoE config.json with `extra` fields appended (a leading comma included). */
static int parse(const char *extra, model_config_t *c, err_t *err) {
    char text[2048];
    snprintf(text, sizeof text,
             "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 256, \"num_hidden_layers\": 6, "
             "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 64, "
             "\"intermediate_size\": 512, \"vocab_size\": 1000, \"rms_norm_eps\": 1e-06, "
             "\"rope_theta\": 1000000, \"max_position_embeddings\": 4096, "
             "\"torch_dtype\": \"bfloat16\", \"tie_word_embeddings\": false%s}",
             extra);
    return model_config_parse(text, "config.json", c, err);
}

static void expect_error(const char *extra, const char *phrase) {
    model_config_t c;
    err_t err = {{0}};
    assert_int_equal(parse(extra, &c, &err), -1);
    if (!strstr(err.msg, phrase)) fail_msg("\"%s\" does not contain \"%s\"", err.msg, phrase);
}

static void test_defaults(void **state) {
    model_config_t c;
    err_t err = {{0}};
    if (parse("", &c, &err) < 0) fail_msg("%s", err.msg);
    /* HF Qwen3MoeConfig's defaults */
    assert_int_equal(c.n_experts, 128);
    assert_int_equal(c.n_experts_per_tok, 8);
    assert_int_equal(c.moe_intermediate_size, 768);
    assert_false(c.norm_topk_prob);
    for (int l = 0; l < c.n_layers; l++)
        assert_int_equal(c.layer[l].mlp, MLP_MOE);
}

static void test_layer_kinds(void **state) {
    model_config_t c;
    err_t err = {{0}};
    /* decoder_sparse_step 2: layers 1, 3, 5 are sparse, minus mlp_only_layers 3 (9: no such
     * layer, ignored as transformers does) */
    if (parse(", \"num_local_experts\": 8, \"num_experts_per_tok\": 2, "
              "\"moe_intermediate_size\": 96, \"norm_topk_prob\": true, "
              "\"decoder_sparse_step\": 2, \"mlp_only_layers\": [3, 9]",
              &c, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(c.n_experts, 8);
    assert_int_equal(c.n_experts_per_tok, 2);
    assert_int_equal(c.moe_intermediate_size, 96);
    assert_true(c.norm_topk_prob);
    static const mlp_kind_t want[6] = {MLP_DENSE, MLP_MOE,   MLP_DENSE,
                                       MLP_DENSE, MLP_DENSE, MLP_MOE};
    for (int l = 0; l < 6; l++) {
        assert_int_equal(c.layer[l].mlp, want[l]);
        assert_int_equal(c.layer[l].attn, ATTN_FULL);
    }
    /* num_experts 0: every layer dense */
    if (parse(", \"num_experts\": 0", &c, &err) < 0) fail_msg("%s", err.msg);
    for (int l = 0; l < 6; l++)
        assert_int_equal(c.layer[l].mlp, MLP_DENSE);
    char buf[512];
    if (parse(", \"num_experts\": 16, \"num_experts_per_tok\": 4", &c, &err) < 0)
        fail_msg("%s", err.msg);
    model_config_describe(&c, buf, sizeof buf);
    assert_non_null(strstr(buf, "16 experts (top 4) of intermediate 768"));
}

static void test_config_errors(void **state) {
    expect_error(", \"num_experts\": 4, \"num_experts_per_tok\": 8",
                 "num_experts_per_tok 8 is more than num_experts 4");
    expect_error(", \"num_experts\": 8, \"num_local_experts\": 16", "disagree");
    expect_error(", \"num_experts\": 4096", "num_experts 4096");
    expect_error(", \"num_experts_per_tok\": 64", "num_experts_per_tok 64");
    expect_error(", \"mlp_only_layers\": 3", "must be a list");
    expect_error(", \"mlp_only_layers\": [1.5]", "not a layer index");
    expect_error(", \"decoder_sparse_step\": 0", "decoder_sparse_step");
}

/* Model cards: Qwen3-30B-A3B 30.5B total, 3.3B activated; Qwen3-235B-A22B 235B, 22B. */
static void test_presets(void **state) {
    struct {
        const char *name;
        double total, active;
        int experts, k, layers;
    } cases[] = {{"qwen3-30b-a3b", 30.5, 3.3, 128, 8, 48},
                 {"qwen3-235b-a22b", 235, 22, 128, 8, 94}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_config_t c;
        err_t err = {{0}};
        assert_int_equal(model_config_preset(cases[i].name, true, &c, &err), 0);
        double total = (double)model_param_count(&c) / 1e9;
        double active = (double)model_active_param_count(&c) / 1e9;
        print_message("%s: %.2fB parameters, %.2fB active\n", cases[i].name, total, active);
        if (total < cases[i].total * 0.98 || total > cases[i].total * 1.02 ||
            active < cases[i].active * 0.95 || active > cases[i].active * 1.05)
            fail_msg("%s: %.2fB / %.2fB active, expected about %.1fB / %.1fB", cases[i].name, total,
                     active, cases[i].total, cases[i].active);
        assert_int_equal(c.n_experts, cases[i].experts);
        assert_int_equal(c.n_experts_per_tok, cases[i].k);
        assert_int_equal(c.n_layers, cases[i].layers);
        assert_true(c.norm_topk_prob);
        assert_true(c.fp8);
        for (int l = 0; l < c.n_layers; l++)
            assert_int_equal(c.layer[l].mlp, MLP_MOE);
    }
}

static double gib(uint64_t b) {
    return (double)b / (double)(1ull << 30);
}

/* Qwen3-235B-A22B FP8: ~220 GiB of weights; at tensor parallel 4 (seed 002's -tp 4) each GPU
 * holds a quarter of them; at 8 the experts' 1536 / 8 = 192 columns are not whole FP8 blocks (as
 * vLLM refuses), but expert parallel 8 places 16 whole experts per GPU. */
static void test_shard_plan_235b(void **state) {
    model_config_t c;
    err_t err = {{0}};
    assert_int_equal(model_config_preset("qwen3-235b-a22b", true, &c, &err), 0);
    shard_plan_t tp4, ep4, tp8, ep8, one;
    shard_plan_make(&c, 4, false, &tp4);
    shard_plan_make(&c, 4, true, &ep4);
    shard_plan_make(&c, 8, false, &tp8);
    shard_plan_make(&c, 8, true, &ep8);
    shard_plan_make(&c, 1, false, &one);
    print_message("235B FP8: %.1f GiB; TP4 %.1f, EP4 %.1f, EP8 %.1f GiB per GPU\n",
                  gib(tp4.weights_total), gib(tp4.weights), gib(ep4.weights), gib(ep8.weights));
    assert_true(gib(one.weights_total) > 210 && gib(one.weights_total) < 230);
    assert_int_equal(one.weights, one.weights_total);
    assert_true(tp4.valid && ep4.valid && ep8.valid);
    assert_false(tp8.valid);
    assert_non_null(strstr(tp8.why, "moe_intermediate_size 1536 / 8 = 192"));
    assert_int_equal(ep4.experts, 32);
    assert_int_equal(ep8.experts, 16);
    assert_int_equal(tp4.experts, 128);
    /* a quarter of everything but the replicated norms, routers and (at TP 4, one KV head per
     * GPU) nothing else */
    assert_true(tp4.weights > one.weights_total / 4 && tp4.weights < one.weights_total / 4 * 1.01);
    assert_int_equal(tp4.kv_heads, 1);
    assert_int_equal(tp4.kv_per_token, 94ull * 2 * 1 * 128 * 2);
    /* the H100 keeps room for KV at 0.9, the H200 much more */
    uint64_t h100 = shard_plan_kv_tokens(&tp4, 80e9, 0.9, SHARD_PLAN_OVERHEAD);
    uint64_t h200 = shard_plan_kv_tokens(&tp4, 141e9, 0.9, SHARD_PLAN_OVERHEAD);
    assert_true(h100 > 100000 && h200 > 5 * h100);
    assert_int_equal(shard_plan_kv_tokens(&one, 80e9, 0.9, SHARD_PLAN_OVERHEAD), 0);
    char buf[1024];
    shard_plan_describe(&c, 8, buf, sizeof buf);
    assert_non_null(strstr(buf, "tensor parallel 8"));
    assert_non_null(strstr(buf, "not possible"));
    assert_non_null(strstr(buf, "expert parallel 8"));
    assert_non_null(strstr(buf, "H200 141GB"));
}

/* --tensor-parallel-size above 1 is answered with what the model would need. */
static void test_shard_plan_refuse(void **state) {
    model_source_t src = {.model = "qwen3-235b-a22b", .format = LOAD_DUMMY, .dummy_fp8 = true};
    err_t err = {{0}};
    assert_int_equal(shard_plan_refuse(&src, 4, &err), -1);
    assert_non_null(strstr(err.msg, "tensor-parallel-size 4"));
    assert_non_null(strstr(err.msg, "runs on the cpu and cuda backends"));
    assert_non_null(strstr(err.msg, "GiB of weights per GPU"));
    src.model = "no-such-model";
    assert_int_equal(shard_plan_refuse(&src, 4, &err), -1);
    assert_non_null(strstr(err.msg, "no-such-model"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),        cmocka_unit_test(test_layer_kinds),
        cmocka_unit_test(test_config_errors),   cmocka_unit_test(test_presets),
        cmocka_unit_test(test_shard_plan_235b), cmocka_unit_test(test_shard_plan_refuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

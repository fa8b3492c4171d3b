/* generation_config.json: the Qwen3 / Qwen3.5 files load with their values, a missing file is
 * defaults, bad files fail naming the file and field, and stop ids merge as vLLM merges them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "genconfig.h"
#include "testutil.h"

static const char QWEN3[] = "{\n  \"bos_token_id\": 151643,\n  \"do_sample\": true,\n"
                            "  \"eos_token_id\": [\n    151645,\n    151643\n  ],\n"
                            "  \"pad_token_id\": 151643,\n  \"temperature\": 0.6,\n"
                            "  \"top_k\": 20,\n  \"top_p\": 0.95,\n"
                            "  \"transformers_version\": \"4.51.0\"\n}";

static int load_dir(const char *dir, genconfig_t *gc, err_t *err) {
    mdir_t *md;
    if (mdir_open(dir, &md, err) < 0) return -1;
    int rc = genconfig_load(md, gc, err);
    mdir_close(md);
    return rc;
}

static void test_qwen3_file(void **state) {
    char *dir = tu_tmpdir();
    tu_write_text(dir, "generation_config.json", QWEN3);
    tu_write_text(dir, "tokenizer_config.json",
                  "{\"eos_token\": \"<|im_end|>\", \"pad_token\": \"<|endoftext|>\"}");
    genconfig_t gc;
    err_t err = {{0}};
    assert_int_equal(load_dir(dir, &gc, &err), 0);
    assert_true(gc.found);
    assert_int_equal(gc.n_eos, 2);
    assert_int_equal(gc.eos_ids[0], 151645);
    assert_int_equal(gc.eos_ids[1], 151643);
    assert_int_equal(gc.bos_token_id, 151643);
    assert_int_equal(gc.pad_token_id, 151643);
    assert_true(gc.has_temperature && gc.temperature == 0.6);
    assert_true(gc.has_top_k && gc.top_k == 20);
    assert_true(gc.has_top_p && gc.top_p == 0.95);
    assert_true(gc.has_do_sample && gc.do_sample);
    assert_false(gc.has_min_p);
    assert_false(gc.has_repetition_penalty);
    assert_false(gc.has_max_new_tokens);
    assert_string_equal(gc.eos_token, "<|im_end|>");

    /* vLLM: the tokenizer's eos (<|im_end|>) first, then the file's ids not yet listed. */
    int ids[8];
    int n = genconfig_stop_ids(&gc, 151645, ids, 8);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 151645);
    assert_int_equal(ids[1], 151643);
    n = genconfig_stop_ids(&gc, 7, ids, 8);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 7);
    assert_int_equal(ids[2], 151643);
    assert_int_equal(genconfig_stop_ids(&gc, -1, ids, 8), 2);
    assert_int_equal(ids[0], 151645);
    assert_int_equal(genconfig_stop_ids(&gc, 7, ids, 1), 1);
    tu_rmrf(dir);
    free(dir);
}

static void test_missing_is_defaults(void **state) {
    char *dir = tu_tmpdir();
    genconfig_t gc;
    err_t err = {{0}};
    assert_int_equal(load_dir(dir, &gc, &err), 0);
    assert_false(gc.found);
    assert_int_equal(gc.n_eos, 0);
    assert_int_equal(gc.bos_token_id, -1);
    assert_int_equal(gc.pad_token_id, -1);
    assert_false(gc.has_temperature || gc.has_top_k || gc.has_top_p || gc.has_do_sample);
    assert_string_equal(gc.eos_token, "");
    int ids[4];
    assert_int_equal(genconfig_stop_ids(&gc, 151645, ids, 4), 1);
    assert_int_equal(ids[0], 151645);
    assert_int_equal(genconfig_stop_ids(&gc, -1, ids, 4), 0);
    tu_rmrf(dir);
    free(dir);
}

static void test_values(void **state) {
    genconfig_t gc;
    err_t err = {{0}};
    /* Qwen3.5: eos as a list, no pad in some files; a single int eos; nulls are absent. */
    const char *qwen35 = "{\"bos_token_id\": 248044, \"eos_token_id\": [248046, 248044], "
                         "\"top_k\": 20, \"top_p\": 0.95, \"temperature\": 1.0, \"min_p\": 0.0, "
                         "\"repetition_penalty\": 1.05, \"max_new_tokens\": 32768, "
                         "\"pad_token_id\": null, \"do_sample\": null}";
    assert_int_equal(genconfig_parse(qwen35, "g.json", &gc, &err), 0);
    assert_int_equal(gc.n_eos, 2);
    assert_int_equal(gc.eos_ids[0], 248046);
    assert_int_equal(gc.pad_token_id, -1);
    assert_false(gc.has_do_sample);
    assert_true(gc.has_min_p && gc.min_p == 0.0);
    assert_true(gc.has_repetition_penalty && gc.repetition_penalty == 1.05);
    assert_true(gc.has_max_new_tokens && gc.max_new_tokens == 32768);
    assert_true(gc.has_temperature && gc.temperature == 1.0);

    assert_int_equal(genconfig_parse("{\"eos_token_id\": 2}", "g.json", &gc, &err), 0);
    assert_int_equal(gc.n_eos, 1);
    assert_int_equal(gc.eos_ids[0], 2);
    assert_int_equal(genconfig_parse("{}", "g.json", &gc, &err), 0);
    assert_true(gc.found);
    assert_int_equal(gc.n_eos, 0);
}

/* The tiny fixture model's files load; its eos list holds the id of its <|im_end|>. */
static void test_fixture_model(void **state) {
    genconfig_t gc;
    err_t err = {{0}};
    if (load_dir(tu_fixture("tiny-qwen3"), &gc, &err) < 0) fail_msg("%s", err.msg);
    assert_true(gc.found);
    assert_true(gc.n_eos >= 1);
    assert_string_equal(gc.eos_token, "<|im_end|>");
}

static void expect_parse_error(const char *text, const char *phrase) {
    genconfig_t gc;
    err_t err = {{0}};
    assert_int_equal(genconfig_parse(text, "/m/generation_config.json", &gc, &err), -1);
    if (!strstr(err.msg, "/m/generation_config.json") || !strstr(err.msg, phrase))
        fail_msg("\"%s\" should name the file and \"%s\"", err.msg, phrase);
    assert_int_equal(gc.n_eos, 0);
    assert_false(gc.has_temperature);
}

static void test_errors(void **state) {
    expect_parse_error("{\"eos_token_id\": [1,", "invalid JSON");
    expect_parse_error("[1, 2]", "expected a JSON object");
    expect_parse_error("{\"eos_token_id\": \"<|im_end|>\"}", "eos_token_id");
    expect_parse_error("{\"eos_token_id\": [1, -2]}", "eos_token_id");
    expect_parse_error("{\"eos_token_id\": [1, 2.5]}", "eos_token_id");
    expect_parse_error("{\"bos_token_id\": \"x\"}", "bos_token_id");
    expect_parse_error("{\"temperature\": -0.1}", "temperature");
    expect_parse_error("{\"temperature\": 0.6, \"top_p\": 0}", "top_p");
    expect_parse_error("{\"top_p\": 1.5}", "top_p");
    expect_parse_error("{\"min_p\": 2}", "min_p");
    expect_parse_error("{\"repetition_penalty\": 0}", "repetition_penalty");
    expect_parse_error("{\"top_k\": 2.5}", "top_k");
    expect_parse_error("{\"max_new_tokens\": 0}", "max_new_tokens");
    expect_parse_error("{\"do_sample\": \"yes\"}", "do_sample");
    expect_parse_error("{\"eos_token_id\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}",
                       "more than 16");

    char *dir = tu_tmpdir();
    tu_write_text(dir, "generation_config.json", "{\"top_k\": }");
    genconfig_t gc;
    err_t err = {{0}};
    assert_int_equal(load_dir(dir, &gc, &err), -1);
    assert_non_null(strstr(err.msg, "generation_config.json: invalid JSON"));
    assert_non_null(strstr(err.msg, dir));
    tu_write_text(dir, "generation_config.json", QWEN3);
    tu_write_text(dir, "tokenizer_config.json", "{\"eos_token\": ");
    assert_int_equal(load_dir(dir, &gc, &err), -1);
    assert_non_null(strstr(err.msg, "tokenizer_config.json: invalid JSON"));
    /* The eos_token object form of older tokenizer configs. */
    tu_write_text(dir, "tokenizer_config.json",
                  "{\"eos_token\": {\"__type\": \"AddedToken\", \"content\": \"</s>\"}}");
    assert_int_equal(load_dir(dir, &gc, &err), 0);
    assert_string_equal(gc.eos_token, "</s>");
    tu_rmrf(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_file), cmocka_unit_test(test_missing_is_defaults),
        cmocka_unit_test(test_values),     cmocka_unit_test(test_fixture_model),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Lazy dummy weights (weights_dummy_lazy, model_source_t.lazy_dummy): the same tensors as
 * weights_dummy with no host data, values given by weights_dummy_bf16 / weights_dummy_e4m3, which
 * the cuda backend regenerates on the device. Checked against the eager weights element by
 * element (through wtensor_row_f32) on the tiny preset, BF16 and FP8. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weights.h"

static void compare(bool fp8) {
    model_config_t c;
    err_t err = {{0}};
    assert_int_equal(model_config_preset("tiny", fp8, &c, &err), 0);
    model_weights_t *eager, *lazy;
    assert_int_equal(weights_dummy(&c, 99, &eager, &err), 0);
    assert_int_equal(weights_dummy_lazy(&c, 99, &lazy, &err), 0);
    assert_int_equal(weights_bytes(eager), weights_bytes(lazy));
    float *a = malloc((size_t)c.intermediate_size * 4 + (size_t)c.vocab_size * 4 + 4096 * 4);
    float *b = malloc((size_t)c.intermediate_size * 4 + (size_t)c.vocab_size * 4 + 4096 * 4);
    int lazy_count = 0;
    for (int l = -1; l < c.n_layers; l++)
        for (int s = 0; s < (l < 0 ? G_COUNT : L_COUNT); s++) {
            const wtensor_t *e =
                l < 0 ? weights_global(eager, (gslot_t)s) : weights_layer(eager, l, (lslot_t)s);
            const wtensor_t *z =
                l < 0 ? weights_global(lazy, (gslot_t)s) : weights_layer(lazy, l, (lslot_t)s);
            assert_int_equal(e->rows, z->rows);
            if (e->rows == 0) continue; /* a slot of a layer kind this layer is not */
            assert_int_equal(e->dtype, z->dtype);
            assert_int_equal(e->cols, z->cols);
            assert_int_equal(e->scale_rows, z->scale_rows);
            assert_int_equal(e->scale_cols, z->scale_cols);
            if (e->scale_inv)
                assert_memory_equal(e->scale_inv, z->scale_inv,
                                    (size_t)(e->scale_rows * e->scale_cols) * sizeof(float));
            assert_false(e->dummy);
            if (z->dummy) {
                assert_null(z->data);
                lazy_count++;
            } else {
                assert_non_null(z->data); /* norm vectors stay eager */
                assert_int_equal(z->rows, 1);
            }
            for (int64_t r = 0; r < e->rows; r += 1 + e->rows / 7) {
                wtensor_row_f32(e, r, a);
                wtensor_row_f32(z, r, b);
                assert_memory_equal(a, b, (size_t)e->cols * sizeof(float));
            }
        }
    assert_true(lazy_count > 0);
    free(a);
    free(b);
    weights_destroy(eager);
    weights_destroy(lazy);
}

static void test_lazy_bf16(void **state) {
    compare(false);
}

static void test_lazy_fp8(void **state) {
    compare(true);
}

/* weights_open takes the lazy flag for presets; real checkpoints ignore it. */
static void test_open_lazy(void **state) {
    model_source_t src = {
        .model = "qwen3-14b", .format = LOAD_DUMMY, .dummy_fp8 = true, .lazy_dummy = true};
    model_weights_t *w;
    err_t err = {{0}};
    assert_int_equal(weights_open(&src, &w, &err), 0); /* instant: no 15 GB on the host */
    const wtensor_t *t = weights_layer(w, 39, L_DOWN);
    assert_true(t->dummy);
    assert_null(t->data);
    assert_int_equal(t->dtype, DT_F8_E4M3);
    float row[17408];
    wtensor_row_f32(t, 5, row);
    uint8_t q = weights_dummy_e4m3(t->dummy_seed, t->dummy_stream, 5 * 17408 + 3);
    assert_true(row[3] == dtype_e4m3_to_f32(q) * WEIGHTS_DUMMY_FP8_SCALE);
    weights_destroy(w);
}

/* Dummy norms and parameters are all ones: one shared array serves every vector, so a config of
 * many layers of very wide norms (fuzz_config found 255 layers of 100,000: 400 MB of ones, 1.5 s
 * an input; at the widths the parser takes, 2^20, GBs) costs one vector. */
static void test_dummy_vectors_shared(void **state) {
    model_config_t c;
    err_t err = {{0}};
    const char *json = "{\"model_type\": \"qwen3\", \"hidden_size\": 100000, "
                       "\"intermediate_size\": 100000, \"num_attention_heads\": 1, "
                       "\"num_hidden_layers\": 255, \"vocab_size\": 2112}";
    assert_int_equal(model_config_parse(json, "config.json", &c, &err), 0);
    model_weights_t *w;
    assert_int_equal(weights_dummy_lazy(&c, 1, &w, &err), 0);
    const wtensor_t *a = weights_layer(w, 0, L_ATTN_NORM), *b = weights_layer(w, 254, L_MLP_NORM);
    assert_int_equal(a->cols, 100000);
    assert_ptr_equal(a->data, b->data);
    assert_ptr_equal(a->data, weights_global(w, G_FINAL_NORM)->data);
    const wtensor_t *qn = weights_layer(w, 7, L_Q_NORM); /* head_dim 100000 too */
    float *row = malloc((size_t)qn->cols * sizeof *row);
    wtensor_row_f32(qn, 0, row);
    assert_true(row[0] == 1.0f && row[qn->cols - 1] == 1.0f);
    free(row);
    weights_destroy(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lazy_bf16),
        cmocka_unit_test(test_lazy_fp8),
        cmocka_unit_test(test_open_lazy),
        cmocka_unit_test(test_dummy_vectors_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

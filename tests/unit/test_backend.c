/*
 * backend: the table of named backends, and backend_check_batch on a valid two-sequence batch
 * and on each way a batch can point outside the pool or disagree with itself; backend_check_bounds
 * (what every forward checks) on the same batch and each way it can point outside the pool.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "backend.h"

static void test_table(void **state) {
    assert_ptr_equal(backend_find("cpu"), &cpu_backend_ops);
    assert_null(backend_find("nope"));
    assert_null(backend_find(NULL));
    assert_ptr_equal(backend_find("null"), &null_backend_ops);
    const char *const *names = backend_names();
    assert_string_equal(names[0], "cpu");
    assert_string_equal(names[1], "null");

    static const backend_ops_t fake = {.name = "fake"};
    static const backend_ops_t impostor = {.name = "cpu"};
    assert_int_equal(backend_register(&fake), 0);
    assert_int_equal(backend_register(&fake), 0); /* again: no-op */
    assert_ptr_equal(backend_find("fake"), &fake);
    assert_int_equal(backend_register(&impostor), -1);
    assert_ptr_equal(backend_find("cpu"), &cpu_backend_ops);
    assert_int_equal(backend_register(NULL), -1);
    names = backend_names();
    int n = 0;
    while (names[n])
        n++;
    assert_int_equal(n, 3);
    assert_string_equal(names[2], "fake");
}

/* Pool of 8 blocks of 4. Sequence 0: 3 cached tokens + 3 new (context 6, blocks 5, 1);
 * sequence 1: one decode token at context 2 (block 7). */
typedef struct fixture {
    int32_t ids[4], pos[4], qs[3], ctx[2], tables[2][3], rows[2];
    int64_t slots[4];
    be_batch_t b;
} fixture_t;

static void fixture_init(fixture_t *f) {
    *f = (fixture_t){
        .ids = {5, 6, 7, 8},
        .pos = {3, 4, 5, 1},
        .qs = {0, 3, 4},
        .ctx = {6, 2},
        .tables = {{5, 1, -1}, {7, -1, -1}},
        .rows = {2, 3},
        .slots = {5 * 4 + 3, 1 * 4 + 0, 1 * 4 + 1, 7 * 4 + 1},
    };
    f->b = (be_batch_t){.n_tokens = 4,
                        .n_seqs = 2,
                        .token_ids = f->ids,
                        .positions = f->pos,
                        .slot_mapping = f->slots,
                        .query_start = f->qs,
                        .context_len = f->ctx,
                        .block_tables = &f->tables[0][0],
                        .block_table_stride = 3,
                        .n_logits = 2,
                        .logit_rows = f->rows};
}

static void expect_error(const fixture_t *f, const char *needle) {
    err_t err = {{0}};
    assert_int_equal(backend_check_batch(&f->b, 8, 4, &err), -1);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_check_valid(void **state) {
    fixture_t f;
    fixture_init(&f);
    err_t err;
    assert_int_equal(backend_check_batch(&f.b, 8, 4, &err), 0);
    f.slots[1] = -1; /* not written: allowed */
    assert_int_equal(backend_check_batch(&f.b, 8, 4, &err), 0);
    be_batch_t empty = {.query_start = f.qs};
    assert_int_equal(backend_check_batch(&empty, 8, 4, &err), 0);
}

static void test_check_slots(void **state) {
    fixture_t f;
    fixture_init(&f);
    f.slots[3] = 32; /* one past the pool */
    expect_error(&f, "slot_mapping[3] = 32 out of range [0, 32)");
    fixture_init(&f);
    f.slots[0] = -2;
    expect_error(&f, "slot_mapping[0] = -2 out of range");
    fixture_init(&f);
    f.slots[2] = 1 * 4 + 2; /* in range, but not where the block table puts position 5 */
    expect_error(&f, "slot_mapping[2] = 6, but position 5 of sequence 0 is slot 5");
}

static void test_check_blocks(void **state) {
    fixture_t f;
    fixture_init(&f);
    f.tables[0][1] = 8;
    expect_error(&f, "sequence 0: block_tables[1] = 8 out of range [0, 8)");
    fixture_init(&f);
    f.tables[1][0] = -1;
    expect_error(&f, "sequence 1: block_tables[0] = -1");
    fixture_init(&f);
    f.ctx[0] = 13; /* needs 4 blocks, the table holds 3 */
    expect_error(&f, "needs 4 blocks, block table holds 3");
}

static void test_check_offsets(void **state) {
    fixture_t f;
    fixture_init(&f);
    f.qs[0] = 1;
    expect_error(&f, "query_start[0] = 1");
    fixture_init(&f);
    f.qs[2] = 3;
    expect_error(&f, "query_start[2] = 3, but the batch has 4 tokens");
    fixture_init(&f);
    f.qs[1] = 5;
    expect_error(&f, "not increasing");
    fixture_init(&f);
    f.ctx[1] = 0;
    expect_error(&f, "context_len 0 < its 1 new tokens");
    fixture_init(&f);
    f.pos[1] = 7;
    expect_error(&f, "token 1 (sequence 0): position 7, expected 4");
    fixture_init(&f);
    f.rows[1] = 4;
    expect_error(&f, "logit_rows[1] = 4 out of range [0, 4)");
    fixture_init(&f);
    f.b.n_logits = 5;
    expect_error(&f, "n_logits 5");
    fixture_init(&f);
    f.b.n_tokens = -1;
    expect_error(&f, "-1 tokens");
    fixture_init(&f);
    f.b.slot_mapping = NULL;
    expect_error(&f, "missing");
}

static void expect_bounds_error(const fixture_t *f, const char *needle) {
    err_t err = {{0}};
    assert_int_equal(backend_check_bounds(&f->b, 8, 4, 10, &err), -1);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_bounds(void **state) {
    fixture_t f;
    fixture_init(&f);
    err_t err;
    assert_int_equal(backend_check_bounds(&f.b, 8, 4, 10, &err), 0);
    f.pos[1] = 7; /* wrong, but inside the pool: only backend_check_batch sees it */
    f.slots[2] = 1 * 4 + 2;
    assert_int_equal(backend_check_bounds(&f.b, 8, 4, 10, &err), 0);
    be_batch_t empty = {0};
    assert_int_equal(backend_check_bounds(&empty, 8, 4, 10, &err), 0);

    fixture_init(&f);
    f.b.n_logits = 5;
    expect_bounds_error(&f, "batch of 4 tokens, 2 sequences, 5 logit rows");
    fixture_init(&f);
    f.b.block_tables = NULL;
    expect_bounds_error(&f, "batch array missing");
    fixture_init(&f);
    f.qs[2] = 3;
    expect_bounds_error(&f, "query_start does not span the 4 tokens");
    fixture_init(&f);
    f.ctx[0] = 13; /* needs 4 blocks, the table holds 3 */
    expect_bounds_error(&f, "sequence 0: 3 new tokens, context 13");
    fixture_init(&f);
    f.tables[0][1] = 8;
    expect_bounds_error(&f, "sequence 0: block 8 out of range [0, 8)");
    fixture_init(&f);
    f.ids[2] = 10;
    expect_bounds_error(&f, "token 2: id 10 out of range [0, 10)");
    fixture_init(&f);
    f.slots[3] = 32;
    expect_bounds_error(&f, "token 3: slot 32 out of range [0, 32)");
    fixture_init(&f);
    f.rows[1] = 4;
    expect_bounds_error(&f, "logit row 4 out of range [0, 4)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),         cmocka_unit_test(test_check_valid),
        cmocka_unit_test(test_check_slots),   cmocka_unit_test(test_check_blocks),
        cmocka_unit_test(test_check_offsets), cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* sampling: init, stops, deep copy, and resolve: defaults (request, then engine, then built-in),
 * vLLM's greedy and temperature rules, and every range check with its message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sampling.h"

static void test_init(void **state) {
    sampling_params_t p;
    memset(&p, 0x5a, sizeof p);
    sampling_params_init(&p);
    assert_int_equal(p.n, 1);
    assert_true(isnan(p.temperature));
    assert_true(isnan(p.top_p));
    assert_true(isnan(p.min_p));
    assert_true(isnan(p.repetition_penalty));
    assert_int_equal(p.top_k, SAMPLING_UNSET_I);
    assert_int_equal(p.max_tokens, SAMPLING_UNSET_I);
    assert_int_equal(p.logprobs, -1);
    assert_int_equal(p.n_stop, 0);
    assert_int_equal(p.n_stop_token_ids, 0);
    assert_true(p.skip_special_tokens);
    assert_false(p.include_stop_str_in_output);
    assert_false(p.ignore_eos);
    assert_false(p.has_seed);
    sampling_params_free(&p);
}

static void test_stops_and_copy(void **state) {
    sampling_params_t p, q;
    err_t err = {{0}};
    sampling_params_init(&p);
    assert_int_equal(sampling_params_add_stop(&p, "\n\n", &err), 0);
    assert_int_equal(sampling_params_add_stop(&p, "</s>", &err), 0);
    assert_int_equal(sampling_params_add_stop(&p, "", &err), -1);
    assert_string_equal(err.msg, "stop cannot contain an empty string");
    assert_int_equal(p.n_stop, 2);
    p.temperature = 0.5f;
    p.stop_token_ids[0] = 7;
    p.n_stop_token_ids = 1;

    assert_int_equal(sampling_params_copy(&q, &p, &err), 0);
    assert_int_equal(q.n_stop, 2);
    assert_ptr_not_equal(q.stop[0], p.stop[0]);
    assert_string_equal(q.stop[0], "\n\n");
    assert_string_equal(q.stop[1], "</s>");
    assert_true(q.temperature == 0.5f);
    assert_int_equal(q.stop_token_ids[0], 7);
    sampling_params_free(&p); /* q's strings survive p */
    assert_string_equal(q.stop[1], "</s>");
    sampling_params_free(&q);
    sampling_params_free(&q);
    assert_int_equal(q.n_stop, 0);

    sampling_params_init(&p);
    char s[16];
    for (int i = 0; i < SAMPLING_MAX_STOP; i++) {
        snprintf(s, sizeof s, "s%d", i);
        assert_int_equal(sampling_params_add_stop(&p, s, &err), 0);
    }
    assert_int_equal(sampling_params_add_stop(&p, "one more", &err), -1);
    assert_non_null(strstr(err.msg, "at most 16"));
    assert_string_equal(p.stop[15], "s15");
    sampling_params_free(&p);
}

static void test_builtin_defaults(void **state) {
    sampling_params_t p;
    err_t err = {{0}};
    sampling_params_init(&p);
    assert_int_equal(sampling_params_resolve(&p, NULL, &err), 0);
    assert_true(p.temperature == 1.0f);
    assert_int_equal(p.top_k, 0);
    assert_true(p.top_p == 1.0f);
    assert_true(p.min_p == 0.0f);
    assert_true(p.presence_penalty == 0.0f);
    assert_true(p.frequency_penalty == 0.0f);
    assert_true(p.repetition_penalty == 1.0f);
    assert_int_equal(p.max_tokens, -1);
    assert_int_equal(p.min_tokens, 0);
    assert_int_equal(p.logprobs, -1);

    /* A defaults struct with nothing set gives the same. */
    sampling_params_t d, q;
    sampling_params_init(&d);
    sampling_params_init(&q);
    assert_int_equal(sampling_params_resolve(&q, &d, &err), 0);
    assert_true(q.temperature == 1.0f && q.top_k == 0 && q.top_p == 1.0f);
    assert_true(q.repetition_penalty == 1.0f && q.max_tokens == -1);
}

static void test_defaults_fill_only_unset(void **state) {
    /* Qwen3's generation_config.json: temperature 0.6, top_k 20, top_p 0.95. */
    sampling_params_t d, p;
    err_t err = {{0}};
    sampling_params_init(&d);
    d.temperature = 0.6f;
    d.top_k = 20;
    d.top_p = 0.95f;
    d.repetition_penalty = 1.05f;
    d.max_tokens = 4096;

    sampling_params_init(&p);
    p.top_p = 0.5f;
    p.top_k = 0; /* explicitly off: not replaced by the default 20 */
    p.min_p = 0.1f;
    assert_int_equal(sampling_params_resolve(&p, &d, &err), 0);
    assert_true(p.temperature == 0.6f);
    assert_int_equal(p.top_k, 0);
    assert_true(p.top_p == 0.5f);
    assert_true(p.min_p == 0.1f);
    assert_true(p.repetition_penalty == 1.05f);
    assert_int_equal(p.max_tokens, 4096);
    assert_int_equal(p.min_tokens, 0);

    sampling_params_init(&p);
    assert_int_equal(sampling_params_resolve(&p, &d, &err), 0);
    assert_int_equal(p.top_k, 20);
    assert_true(p.top_p == 0.95f);

    /* Resolving twice changes nothing. */
    sampling_params_t again;
    memcpy(&again, &p, sizeof p);
    assert_int_equal(sampling_params_resolve(&again, &d, &err), 0);
    assert_memory_equal(&again, &p, sizeof p);
}

static void test_greedy_rules(void **state) {
    sampling_params_t p;
    err_t err = {{0}};
    sampling_params_init(&p);
    p.temperature = 0.0f;
    p.top_k = 5;
    p.top_p = 0.3f;
    p.min_p = 0.2f;
    assert_int_equal(sampling_params_resolve(&p, NULL, &err), 0);
    assert_true(p.temperature == 0.0f);
    assert_int_equal(p.top_k, 0);
    assert_true(p.top_p == 1.0f);
    assert_true(p.min_p == 0.0f);

    sampling_params_init(&p);
    p.temperature = 0.0f;
    p.n = 2;
    assert_int_equal(sampling_params_resolve(&p, NULL, &err), -1);
    assert_string_equal(err.msg, "n must be 1 when using greedy sampling, got 2");

    /* vLLM raises positive temperatures below 0.01 to 0.01 instead of making them greedy. */
    sampling_params_init(&p);
    p.temperature = 1e-6f;
    p.top_k = 5;
    assert_int_equal(sampling_params_resolve(&p, NULL, &err), 0);
    assert_true(p.temperature == 0.01f);
    assert_int_equal(p.top_k, 5);

    sampling_params_init(&p);
    p.temperature = 2.0f;
    p.n = SAMPLING_MAX_N;
    assert_int_equal(sampling_params_resolve(&p, NULL, &err), 0);
}

typedef struct bad_case {
    const char *what;
    void (*set)(sampling_params_t *p);
    const char *msg;
} bad_case_t;

static void b_n0(sampling_params_t *p) {
    p->n = 0;
}
static void b_n17(sampling_params_t *p) {
    p->n = SAMPLING_MAX_N + 1;
}
static void b_temp_neg(sampling_params_t *p) {
    p->temperature = -1.0f;
}
static void b_temp_big(sampling_params_t *p) {
    p->temperature = 3.0f;
}
static void b_temp_inf(sampling_params_t *p) {
    p->temperature = INFINITY;
}
static void b_top_p0(sampling_params_t *p) {
    p->top_p = 0.0f;
}
static void b_top_p_big(sampling_params_t *p) {
    p->top_p = 1.5f;
}
static void b_top_k(sampling_params_t *p) {
    p->top_k = -2;
}
static void b_min_p(sampling_params_t *p) {
    p->min_p = 1.5f;
}
static void b_presence(sampling_params_t *p) {
    p->presence_penalty = 2.5f;
}
static void b_frequency(sampling_params_t *p) {
    p->frequency_penalty = -3.0f;
}
static void b_rep0(sampling_params_t *p) {
    p->repetition_penalty = 0.0f;
}
static void b_rep_inf(sampling_params_t *p) {
    p->repetition_penalty = INFINITY;
}
static void b_max0(sampling_params_t *p) {
    p->max_tokens = 0;
}
static void b_max_neg(sampling_params_t *p) {
    p->max_tokens = -5;
}
static void b_min_neg(sampling_params_t *p) {
    p->min_tokens = -2;
}
static void b_min_gt_max(sampling_params_t *p) {
    p->max_tokens = 10;
    p->min_tokens = 11;
}
static void b_logprobs_big(sampling_params_t *p) {
    p->logprobs = SAMPLING_MAX_LOGPROBS + 1;
}
static void b_logprobs_neg(sampling_params_t *p) {
    p->logprobs = -2;
}
static void b_stop_id(sampling_params_t *p) {
    p->stop_token_ids[0] = 3;
    p->stop_token_ids[1] = -4;
    p->n_stop_token_ids = 2;
}
static void b_stop_ids_many(sampling_params_t *p) {
    p->n_stop_token_ids = SAMPLING_MAX_STOP_IDS + 1;
}

static void test_range_errors(void **state) {
    static const bad_case_t cases[] = {
        {"n 0", b_n0, "n must be in [1, 16], got 0"},
        {"n 17", b_n17, "n must be in [1, 16], got 17"},
        {"temperature -1", b_temp_neg, "temperature must be in [0, 2], got -1"},
        {"temperature 3", b_temp_big, "temperature must be in [0, 2], got 3"},
        {"temperature inf", b_temp_inf, "temperature must be in [0, 2], got inf"},
        {"top_p 0", b_top_p0, "top_p must be in (0, 1], got 0"},
        {"top_p 1.5", b_top_p_big, "top_p must be in (0, 1], got 1.5"},
        {"top_k -2", b_top_k, "top_k must be 0 (disable), or at least 1, got -2"},
        {"min_p 1.5", b_min_p, "min_p must be in [0, 1], got 1.5"},
        {"presence", b_presence, "presence_penalty must be in [-2, 2], got 2.5"},
        {"frequency", b_frequency, "frequency_penalty must be in [-2, 2], got -3"},
        {"repetition 0", b_rep0,
         "repetition_penalty must be a finite number greater than zero, got 0"},
        {"repetition inf", b_rep_inf,
         "repetition_penalty must be a finite number greater than zero, got inf"},
        {"max_tokens 0", b_max0, "max_tokens must be at least 1, got 0"},
        {"max_tokens -5", b_max_neg, "max_tokens must be at least 1, got -5"},
        {"min_tokens -2", b_min_neg, "min_tokens must be greater than or equal to 0, got -2"},
        {"min > max", b_min_gt_max,
         "min_tokens must be less than or equal to max_tokens=10, got 11"},
        {"logprobs 21", b_logprobs_big, "logprobs must be in [0, 20] (or -1 for none), got 21"},
        {"logprobs -2", b_logprobs_neg, "logprobs must be in [0, 20] (or -1 for none), got -2"},
        {"stop id", b_stop_id, "stop_token_ids must be non-negative, got -4"},
        {"stop ids", b_stop_ids_many, "stop_token_ids: at most 64 ids are allowed, got 65"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sampling_params_t p;
        err_t err = {{0}};
        sampling_params_init(&p);
        cases[i].set(&p);
        if (sampling_params_resolve(&p, NULL, &err) != -1) fail_msg("%s: accepted", cases[i].what);
        if (strcmp(err.msg, cases[i].msg) != 0)
            fail_msg("%s: message \"%s\", expected \"%s\"", cases[i].what, err.msg, cases[i].msg);
        sampling_params_free(&p);
    }
}

static void test_bad_default_is_named(void **state) {
    sampling_params_t d, p;
    err_t err = {{0}};
    sampling_params_init(&d);
    d.top_p = 2.0f;
    sampling_params_init(&p);
    assert_int_equal(sampling_params_resolve(&p, &d, &err), -1);
    assert_string_equal(err.msg, "top_p must be in (0, 1], got 2");
    p.top_p = 0.9f; /* the request's own value wins over a bad default */
    assert_int_equal(sampling_params_resolve(&p, &d, &err), 0);
}

static void test_edges_accepted(void **state) {
    sampling_params_t p;
    err_t err = {{0}};
    sampling_params_init(&p);
    p.temperature = 2.0f;
    p.top_p = 1.0f;
    p.top_k = 1;
    p.min_p = 1.0f;
    p.presence_penalty = -2.0f;
    p.frequency_penalty = 2.0f;
    p.repetition_penalty = 1e-3f;
    p.max_tokens = 1;
    p.min_tokens = 1;
    p.logprobs = SAMPLING_MAX_LOGPROBS;
    assert_int_equal(sampling_params_resolve(&p, NULL, &err), 0);
    p.logprobs = 0;
    assert_int_equal(sampling_params_resolve(&p, NULL, &err), 0);

    /* Duplicate stop ids are dropped in order (vLLM: dict.fromkeys). */
    sampling_params_init(&p);
    int32_t ids[] = {5, 9, 5, 0, 9, 7};
    memcpy(p.stop_token_ids, ids, sizeof ids);
    p.n_stop_token_ids = 6;
    assert_int_equal(sampling_params_resolve(&p, NULL, &err), 0);
    assert_int_equal(p.n_stop_token_ids, 4);
    assert_int_equal(p.stop_token_ids[0], 5);
    assert_int_equal(p.stop_token_ids[1], 9);
    assert_int_equal(p.stop_token_ids[2], 0);
    assert_int_equal(p.stop_token_ids[3], 7);

    /* min_tokens without max_tokens is fine. */
    sampling_params_init(&p);
    p.min_tokens = 100000;
    assert_int_equal(sampling_params_resolve(&p, NULL, &err), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_stops_and_copy),
        cmocka_unit_test(test_builtin_defaults),
        cmocka_unit_test(test_defaults_fill_only_unset),
        cmocka_unit_test(test_greedy_rules),
        cmocka_unit_test(test_range_errors),
        cmocka_unit_test(test_bad_default_is_named),
        cmocka_unit_test(test_edges_accepted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

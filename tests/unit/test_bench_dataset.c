/*
 * bench dataset: random prompts of exact token lengths (range ratio bounds, shared prefix,
 * special tokens never drawn), ShareGPT sampling (filter, BOS counted, fixed output length,
 * oversampling) and the synthetic ShareGPT generator (deterministic, statistics on target).
 *
 * The toy tokenizer: ids 0..94 are the printable ASCII bytes ' '..'~', 95 is the merge "ab",
 * 96 the merge "th", 97 "<s>" (BOS) and 98 "<|end|>" are special. Encoding is greedy, so
 * decoding consecutive ids such as 'a','b' and re-encoding gives fewer tokens: the random
 * dataset's decode -> re-encode adjustment has real work to do.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bench.h"
#include "dataset.h"
#include "testutil.h"

enum { TOY_AB = 95, TOY_TH = 96, TOY_BOS = 97, TOY_END = 98, TOY_VOCAB = 99 };

typedef struct toy {
    bool bos; /* encode(add_special) prepends BOS */
} toy_t;

static int toy_encode(void *ctx, const char *text, bool add_special, int32_t **ids, int *n,
                      bench_err_t *err) {
    const toy_t *t = ctx;
    size_t len = strlen(text);
    int32_t *out = malloc((len + 2) * sizeof *out);
    if (!out) return bench_err_set(err, "toy: out of memory");
    int k = 0;
    if (add_special && t->bos) out[k++] = TOY_BOS;
    for (size_t i = 0; i < len;) {
        if (strncmp(text + i, "<s>", 3) == 0) {
            out[k++] = TOY_BOS, i += 3;
        } else if (strncmp(text + i, "<|end|>", 7) == 0) {
            out[k++] = TOY_END, i += 7;
        } else if (strncmp(text + i, "ab", 2) == 0) {
            out[k++] = TOY_AB, i += 2;
        } else if (strncmp(text + i, "th", 2) == 0) {
            out[k++] = TOY_TH, i += 2;
        } else {
            unsigned char c = (unsigned char)text[i++];
            if (c < 32 || c > 126) {
                free(out);
                return bench_err_set(err, "toy: byte %d", c);
            }
            out[k++] = c - 32;
        }
    }
    *ids = out;
    *n = k;
    return 0;
}

static int toy_decode(void *ctx, const int32_t *ids, int n, char **text, bench_err_t *err) {
    (void)ctx;
    char *s = malloc((size_t)n * 7 + 1);
    if (!s) return bench_err_set(err, "toy: out of memory");
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        const char *piece = NULL;
        char one[2] = {0};
        switch (ids[i]) {
            case TOY_AB:
                piece = "ab";
                break;
            case TOY_TH:
                piece = "th";
                break;
            case TOY_BOS:
                piece = "<s>";
                break;
            case TOY_END:
                piece = "<|end|>";
                break;
            default:
                if (ids[i] < 0 || ids[i] >= TOY_VOCAB) {
                    free(s);
                    return bench_err_set(err, "toy: id %d", ids[i]);
                }
                one[0] = (char)(ids[i] + 32);
                piece = one;
        }
        size_t pl = strlen(piece);
        memcpy(s + len, piece, pl);
        len += pl;
    }
    s[len] = '\0';
    *text = s;
    return 0;
}

static const int32_t k_specials[] = {TOY_BOS, TOY_END};

static bench_tokenizer_t toy_tok(toy_t *t) {
    return (bench_tokenizer_t){.ctx = t,
                               .encode = toy_encode,
                               .decode = toy_decode,
                               .vocab_size = TOY_VOCAB,
                               .special_ids = k_specials,
                               .n_special = 2,
                               .num_special_tokens_to_add = t->bos ? 1 : 0};
}

static int count(const bench_tokenizer_t *tok, const char *text, bool add_special,
                 bool *has_special) {
    int32_t *ids;
    int n;
    bench_err_t err;
    assert_int_equal(tok->encode(tok->ctx, text, add_special, &ids, &n, &err), 0);
    if (has_special)
        for (int i = 0; i < n; i++)
            if (ids[i] == TOY_BOS || ids[i] == TOY_END) *has_special = true;
    free(ids);
    return n;
}

static void random_opts(bench_options_t *o) {
    memset(o, 0, sizeof *o);
    o->dataset = BENCH_DATASET_RANDOM;
    o->input_len = 40;
    o->output_len = 10;
    o->seed = 42;
}

static void test_random_exact_lengths(void **state) {
    (void)state;
    for (int bos = 0; bos <= 1; bos++) {
        toy_t t = {bos};
        bench_tokenizer_t tok = toy_tok(&t);
        bench_options_t o;
        random_opts(&o);
        bench_prompt_t *p;
        bool synth = true;
        bench_err_t err;
        assert_int_equal(bench_dataset_build(&o, &tok, 100, &p, &synth, &err), 0);
        assert_false(synth);
        bool special = false;
        for (int i = 0; i < 100; i++) {
            /* range ratio 0: every prompt is input_len minus the BOS the server will add */
            assert_int_equal(p[i].prompt_len, 40 - bos);
            assert_int_equal(count(&tok, p[i].text, false, &special), 40 - bos);
            assert_int_equal(count(&tok, p[i].text, true, NULL), 40);
            assert_int_equal(p[i].output_len, 10);
        }
        assert_false(special);
        bench_dataset_free(p, 100);
    }
}

static void test_random_range_prefix(void **state) {
    (void)state;
    toy_t t = {true};
    bench_tokenizer_t tok = toy_tok(&t);
    bench_options_t o;
    random_opts(&o);
    o.range_ratio = 0.5;
    o.prefix_len = 5;
    enum { N = 300 };
    bench_prompt_t *p;
    bool synth;
    bench_err_t err;
    assert_int_equal(bench_dataset_build(&o, &tok, N, &p, &synth, &err), 0);
    /* real input 39: body in [floor(19.5), ceil(58.5)] = [19, 59]; output in [5, 15]. */
    int in_min = 1000, in_max = 0, out_min = 1000, out_max = 0;
    bool special = false;
    for (int i = 0; i < N; i++) {
        int body = p[i].prompt_len - 5;
        assert_int_equal(count(&tok, p[i].text, false, &special), p[i].prompt_len);
        assert_in_range(body, 19, 59);
        assert_in_range(p[i].output_len, 5, 15);
        in_min = body < in_min ? body : in_min;
        in_max = body > in_max ? body : in_max;
        out_min = p[i].output_len < out_min ? p[i].output_len : out_min;
        out_max = p[i].output_len > out_max ? p[i].output_len : out_max;
        /* the shared prefix: 5 tokens of at least one character each */
        assert_memory_equal(p[i].text, p[0].text, 5);
    }
    assert_false(special);
    assert_true(in_min <= 21 && in_max >= 57);
    assert_int_equal(out_min, 5);
    assert_int_equal(out_max, 15);
    bench_dataset_free(p, N);

    /* Without a prefix the prompts start at different vocabulary offsets. */
    o.prefix_len = 0;
    assert_int_equal(bench_dataset_build(&o, &tok, N, &p, &synth, &err), 0);
    int differ = 0;
    for (int i = 1; i < N; i++)
        differ += memcmp(p[i].text, p[0].text, 5) != 0;
    assert_true(differ > N / 2);
    bench_dataset_free(p, N);
}

static void test_random_deterministic_and_errors(void **state) {
    (void)state;
    toy_t t = {false};
    bench_tokenizer_t tok = toy_tok(&t);
    bench_options_t o;
    random_opts(&o);
    o.range_ratio = 0.3;
    bench_prompt_t *a, *b, *c;
    bool synth;
    bench_err_t err;
    assert_int_equal(bench_dataset_build(&o, &tok, 20, &a, &synth, &err), 0);
    assert_int_equal(bench_dataset_build(&o, &tok, 20, &b, &synth, &err), 0);
    o.seed = 43;
    assert_int_equal(bench_dataset_build(&o, &tok, 20, &c, &synth, &err), 0);
    int same = 0;
    for (int i = 0; i < 20; i++) {
        assert_string_equal(a[i].text, b[i].text);
        assert_int_equal(a[i].output_len, b[i].output_len);
        same += strcmp(a[i].text, c[i].text) == 0;
    }
    assert_true(same < 20);
    bench_dataset_free(a, 20);
    bench_dataset_free(b, 20);
    bench_dataset_free(c, 20);

    o.range_ratio = 1.0;
    assert_int_equal(bench_dataset_build(&o, &tok, 5, &a, &synth, &err), -1);
    assert_null(a);
    assert_non_null(strstr(err.msg, "range ratio"));
    random_opts(&o);
    assert_int_equal(bench_dataset_build(&o, NULL, 5, &a, &synth, &err), -1);
    assert_int_equal(bench_dataset_build(&o, &tok, 0, &a, &synth, &err), -1);
}

/* Toy-tokenizer lengths (BOS counted): "abc" -> <s> ab c = 3 tokens. */
static const char *k_sharegpt =
    "["
    "{\"id\":\"one-turn\",\"conversations\":[{\"from\":\"human\",\"value\":\"qrstuvwxyz\"}]},"
    "{\"id\":\"short-prompt\",\"conversations\":[{\"from\":\"human\",\"value\":\"abc\"},"
    "{\"from\":\"gpt\",\"value\":\"a long enough answer\"}]},"
    "{\"id\":\"ok-1\",\"conversations\":[{\"from\":\"human\",\"value\":\"hello there\"},"
    "{\"from\":\"gpt\",\"value\":\"general kenobi\"}]},"
    "{\"id\":\"short-output\",\"conversations\":[{\"from\":\"human\",\"value\":\"what is it\"},"
    "{\"from\":\"gpt\",\"value\":\"ok\"}]},"
    "{\"id\":\"ok-2\",\"conversations\":[{\"from\":\"gpt\",\"value\":\"roles are not checked\"},"
    "{\"from\":\"human\",\"value\":\"fine by vllm\"},{\"from\":\"gpt\",\"value\":\"more\"}]},"
    "{\"id\":\"ok-3\",\"conversations\":[{\"from\":\"human\",\"value\":\"abcd\"},"
    "{\"from\":\"gpt\",\"value\":\"four\"}]}"
    "]";

static void sharegpt_opts(bench_options_t *o, const char *path) {
    memset(o, 0, sizeof *o);
    o->dataset = BENCH_DATASET_SHAREGPT;
    snprintf(o->dataset_path, sizeof o->dataset_path, "%s", path);
    o->seed = 0;
}

static bool is_one_of(const char *s, const char *const *set, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(s, set[i]) == 0) return true;
    return false;
}

static void test_sharegpt_filter_oversample(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    tu_write_text(dir, "sg.json", k_sharegpt);
    char path[1024];
    snprintf(path, sizeof path, "%s/sg.json", dir);
    toy_t t = {true};
    bench_tokenizer_t tok = toy_tok(&t);
    bench_options_t o;
    sharegpt_opts(&o, path);
    bench_prompt_t *p;
    bool synth = true;
    bench_err_t err;
    assert_int_equal(bench_dataset_build(&o, &tok, 9, &p, &synth, &err), 0);
    assert_false(synth);
    /* "abc" is 3 tokens with BOS (< 4); "ok" is 2 tokens of output (< 4); "abcd" = <s> ab cd
     * is exactly 4 and passes; the one-turn entry is skipped. */
    const char *valid[] = {"hello there", "roles are not checked", "abcd"};
    int seen[3] = {0};
    for (int i = 0; i < 9; i++) {
        assert_true(is_one_of(p[i].text, valid, 3));
        for (int k = 0; k < 3; k++)
            seen[k] += strcmp(p[i].text, valid[k]) == 0;
        assert_int_equal(p[i].prompt_len, count(&tok, p[i].text, true, NULL));
        if (strcmp(p[i].text, "hello there") == 0) assert_int_equal(p[i].output_len, 15);
        if (strcmp(p[i].text, "abcd") == 0) assert_int_equal(p[i].output_len, 5);
    }
    for (int k = 0; k < 3; k++)
        assert_true(seen[k] >= 1);
    bench_dataset_free(p, 9);

    /* A fixed output length skips the output checks: "what is it" now passes. */
    o.output_len = 50;
    assert_int_equal(bench_dataset_build(&o, &tok, 4, &p, &synth, &err), 0);
    const char *valid4[] = {"hello there", "roles are not checked", "abcd", "what is it"};
    int seen4[4] = {0};
    for (int i = 0; i < 4; i++) {
        assert_true(is_one_of(p[i].text, valid4, 4));
        assert_int_equal(p[i].output_len, 50);
        for (int k = 0; k < 4; k++)
            seen4[k] += strcmp(p[i].text, valid4[k]) == 0;
    }
    for (int k = 0; k < 4; k++)
        assert_int_equal(seen4[k], 1); /* the first 4 of 4: no repeats */
    bench_dataset_free(p, 4);

    /* Nothing passes the filter: an error, not an empty dataset. */
    tu_write_text(dir, "bad.json", "[{\"conversations\":[{\"value\":\"a\"},{\"value\":\"b\"}]}]");
    snprintf(path, sizeof path, "%s/bad.json", dir);
    sharegpt_opts(&o, path);
    assert_int_equal(bench_dataset_build(&o, &tok, 2, &p, &synth, &err), -1);
    assert_non_null(strstr(err.msg, "filter"));
    snprintf(path, sizeof path, "%s/missing.json", dir);
    sharegpt_opts(&o, path);
    assert_int_equal(bench_dataset_build(&o, &tok, 2, &p, &synth, &err), -1);
    tu_write_text(dir, "obj.json", "{\"not\":\"a list\"}");
    snprintf(path, sizeof path, "%s/obj.json", dir);
    sharegpt_opts(&o, path);
    assert_int_equal(bench_dataset_build(&o, &tok, 2, &p, &synth, &err), -1);
    tu_rmrf(dir);
    free(dir);
}

static int cmp_int(const void *a, const void *b) {
    return *(const int *)a - *(const int *)b;
}

static void test_synthetic_statistics(void **state) {
    (void)state;
    enum { N = 20000 };
    int *pl = malloc(N * sizeof *pl), *ol = malloc(N * sizeof *ol);
    int *pl2 = malloc(N * sizeof *pl2), *ol2 = malloc(N * sizeof *ol2);
    assert_non_null(pl);
    assert_non_null(ol);
    assert_non_null(pl2);
    assert_non_null(ol2);
    bench_dataset_synthetic_lengths(7, N, pl, ol);
    bench_dataset_synthetic_lengths(7, N, pl2, ol2);
    assert_memory_equal(pl, pl2, N * sizeof *pl);
    assert_memory_equal(ol, ol2, N * sizeof *ol);
    double sp = 0, so = 0;
    for (int i = 0; i < N; i++) {
        /* vLLM's filter */
        assert_in_range(pl[i], 4, 1024);
        assert_true(ol[i] >= 4);
        assert_true(pl[i] + ol[i] <= 2048);
        sp += pl[i];
        so += ol[i];
    }
    sp /= N;
    so /= N;
    qsort(pl, N, sizeof *pl, cmp_int);
    qsort(ol, N, sizeof *ol, cmp_int);
    double mp = (pl[N / 2 - 1] + pl[N / 2]) / 2.0, mo = (ol[N / 2 - 1] + ol[N / 2]) / 2.0;
    print_message("synthetic: prompt mean %.1f median %.1f, output mean %.1f median %.1f\n", sp, mp,
                  so, mo);
    assert_true(fabs(sp - BENCH_SYNTH_PROMPT_MEAN) <= 0.04 * BENCH_SYNTH_PROMPT_MEAN);
    assert_true(fabs(so - BENCH_SYNTH_OUTPUT_MEAN) <= 0.04 * BENCH_SYNTH_OUTPUT_MEAN);
    assert_true(fabs(mp - BENCH_SYNTH_PROMPT_MEDIAN) <= 0.06 * BENCH_SYNTH_PROMPT_MEDIAN);
    assert_true(fabs(mo - BENCH_SYNTH_OUTPUT_MEDIAN) <= 0.06 * BENCH_SYNTH_OUTPUT_MEDIAN);
    bench_dataset_synthetic_lengths(8, N, pl2, ol2);
    bench_dataset_synthetic_lengths(7, N, pl, ol);
    assert_true(memcmp(pl, pl2, N * sizeof *pl) != 0);
    free(pl);
    free(ol);
    free(pl2);
    free(ol2);
}

static void test_synthetic_prompts(void **state) {
    (void)state;
    toy_t t = {true};
    bench_tokenizer_t tok = toy_tok(&t);
    bench_options_t o;
    memset(&o, 0, sizeof o);
    /* sharegpt without a file falls back to the synthetic generator */
    o.dataset = BENCH_DATASET_SHAREGPT;
    o.seed = 3;
    enum { N = 40 };
    int pl[N], ol[N];
    bench_dataset_synthetic_lengths(3, N, pl, ol);
    bench_prompt_t *p, *q;
    bool synth = false;
    bench_err_t err;
    assert_int_equal(bench_dataset_build(&o, &tok, N, &p, &synth, &err), 0);
    assert_true(synth);
    o.dataset = BENCH_DATASET_SHAREGPT_SYNTHETIC;
    synth = false;
    assert_int_equal(bench_dataset_build(&o, &tok, N, &q, &synth, &err), 0);
    assert_true(synth);
    for (int i = 0; i < N; i++) {
        assert_int_equal(p[i].prompt_len, pl[i]);
        assert_int_equal(p[i].output_len, ol[i]);
        /* prompt_len counts BOS, as vLLM's ShareGPT lengths do */
        assert_int_equal(count(&tok, p[i].text, true, NULL), pl[i]);
        assert_string_equal(p[i].text, q[i].text);
        if (pl[i] >= 40) assert_non_null(strchr(p[i].text, ' ')); /* words, not one run */
    }
    bench_dataset_free(p, N);
    bench_dataset_free(q, N);
    o.output_len = 77;
    assert_int_equal(bench_dataset_build(&o, &tok, 3, &p, &synth, &err), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(p[i].output_len, 77);
    bench_dataset_free(p, 3);
    bench_dataset_free(NULL, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_exact_lengths),
        cmocka_unit_test(test_random_range_prefix),
        cmocka_unit_test(test_random_deterministic_and_errors),
        cmocka_unit_test(test_sharegpt_filter_oversample),
        cmocka_unit_test(test_synthetic_statistics),
        cmocka_unit_test(test_synthetic_prompts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* spec: n-gram prompt lookup (longest n first, most recent match, capped by k and by what
 * follows), --speculative-config parsing and its errors, and the acceptance rule checked
 * statistically: the token a verified position emits is distributed as the target's, while a
 * wrong rule (on rejection, resample from p with the draft left in) is caught by the same test. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "flags.h"
#include "rng.h"
#include "sampler.h"
#include "spec.h"

static int propose(const int32_t *t, int n, int nmin, int nmax, int k, int32_t *out) {
    return spec_ngram_propose(t, n, nmin, nmax, k, out);
}

static void test_ngram(void **state) {
    int32_t out[8];
    /* "1 2 3 9 | 1 2 3 7 | 5 1 2 3": the last 3-gram's latest match is followed by 7 5 */
    const int32_t a[] = {1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3};
    assert_int_equal(propose(a, 12, 1, 3, 2, out), 2);
    assert_int_equal(out[0], 7);
    assert_int_equal(out[1], 5);
    /* k larger than what follows the match: the tail repeats with its period (5 here) */
    assert_int_equal(propose(a, 12, 1, 3, 8, out), 8);
    const int32_t want[] = {7, 5, 1, 2, 3, 7, 5, 1};
    assert_memory_equal(out, want, sizeof want);
    /* the longest n first: "4 2 3" has no match, "2 3" has, followed by 5 */
    const int32_t b[] = {2, 3, 5, 6, 1, 2, 3, 4, 2, 3};
    assert_int_equal(propose(b, 10, 2, 3, 1, out), 1);
    assert_int_equal(out[0], 4); /* the most recent "2 3" is at 5..6, followed by 4 */
    /* nothing below nmin: "9" alone matches nothing, and 1-grams are not looked up */
    const int32_t c[] = {1, 2, 1, 9};
    assert_int_equal(propose(c, 4, 2, 3, 3, out), 0);
    const int32_t d[] = {1, 2, 1};
    assert_int_equal(propose(d, 3, 1, 3, 3, out), 3); /* "1" at 0: followed by 2 1, then 2 */
    assert_int_equal(out[0], 2);
    assert_int_equal(out[2], 2);
    /* a run of one token proposes k more; too short a context or k = 0 proposes nothing */
    const int32_t e[] = {5, 5, 5};
    assert_int_equal(propose(e, 3, 1, 4, 3, out), 3);
    assert_int_equal(out[2], 5);
    const int32_t xy[] = {8, 9, 8, 9};
    assert_int_equal(propose(xy, 4, 2, 2, 3, out), 3);
    assert_int_equal(out[0], 8);
    assert_int_equal(out[1], 9);
    assert_int_equal(out[2], 8);
    assert_int_equal(propose(e, 1, 1, 4, 3, out), 0);
    assert_int_equal(propose(e, 3, 1, 4, 0, out), 0);
    assert_non_null(spec_drafter(SPEC_NGRAM));
    assert_null(spec_drafter(SPEC_NONE));
}

/* The lookup as the issue states it, the slow way: for g from nmax down to nmin, the most recent
 * earlier occurrence of the last g tokens; the k tokens after it, the tail repeating. */
static int propose_naive(const int32_t *t, int n, int nmin, int nmax, int k, int32_t *out) {
    for (int g = nmax < n - 1 ? nmax : n - 1; g >= nmin && k > 0; g--)
        for (int i = n - g - 1; i >= 0; i--) {
            if (memcmp(t + i, t + n - g, (size_t)g * sizeof *t) != 0) continue;
            for (int j = 0; j < k; j++)
                out[j] = j < n - (i + g) ? t[i + g + j] : out[j - (n - (i + g))];
            return k;
        }
    return 0;
}

/* The one-pass lookup agrees with the naive one on random contexts over small alphabets (many
 * matches of every length). */
static void test_ngram_matches_naive(void **state) {
    int32_t t[80], a[8], b[8];
    for (int trial = 0; trial < 4000; trial++) {
        int n = 1 + (int)(rng_bits(5, 1, (uint64_t)trial) % 60);
        int alphabet = 2 + (int)(rng_bits(5, 2, (uint64_t)trial) % 4);
        for (int i = 0; i < n; i++)
            t[i] = (int32_t)(rng_bits(5, 3 + (uint64_t)trial, (uint64_t)i) % (uint64_t)alphabet);
        int nmin = 1 + (int)(rng_bits(5, 4, (uint64_t)trial) % 3);
        int nmax = nmin + (int)(rng_bits(5, 5, (uint64_t)trial) % 4);
        int k = 1 + (int)(rng_bits(5, 6, (uint64_t)trial) % 6);
        int na = propose(t, n, nmin, nmax, k, a), nb = propose_naive(t, n, nmin, nmax, k, b);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, (size_t)na * sizeof *a);
    }
}

static const char *parse_err(const char *json) {
    static err_t err;
    flag_values_t v, before;
    flags_init(&v);
    before = v;
    memset(&err, 0, sizeof err);
    assert_int_equal(spec_parse_config(json, &v, &err), -1);
    assert_memory_equal(&v, &before, sizeof v);
    return err.msg;
}

static void test_config(void **state) {
    flag_values_t v;
    flags_init(&v);
    assert_int_equal(v.num_speculative_tokens, 0);
    err_t err = {{0}};
    const char *ok = "{\"method\":\"ngram\",\"num_speculative_tokens\":3,\"prompt_lookup_max\":4,"
                     "\"prompt_lookup_min\":2}";
    assert_int_equal(spec_parse_config(ok, &v, &err), 0);
    assert_int_equal(v.speculative_method, SPEC_NGRAM);
    assert_int_equal(v.num_speculative_tokens, 3);
    assert_int_equal(v.prompt_lookup_max, 4);
    assert_int_equal(v.prompt_lookup_min, 2);
    assert_int_equal(v.speculative_disable_by_batch_size, 0);
    assert_int_equal(spec_parse_config("{\"method\":\"ngram\",\"num_speculative_tokens\":2,"
                                       "\"disable_by_batch_size\":16}",
                                       &v, &err),
                     0);
    assert_int_equal(v.speculative_disable_by_batch_size, 16);
    /* one bound sets both; none gives 5 and 5 */
    assert_int_equal(
        spec_parse_config(
            "{\"method\":\"ngram\",\"num_speculative_tokens\":2,\"prompt_lookup_max\":3}", &v,
            &err),
        0);
    assert_int_equal(v.prompt_lookup_min, 3);
    assert_int_equal(
        spec_parse_config("{\"method\":\"ngram\",\"num_speculative_tokens\":2}", &v, &err), 0);
    assert_int_equal(v.prompt_lookup_max, 5);
    assert_int_equal(v.prompt_lookup_min, 5);

    assert_non_null(strstr(parse_err("[1]"), "JSON object"));
    assert_non_null(strstr(parse_err("{\"method\":"), "")); /* json_parse's message */
    /* the MTP head: vLLM's name and the model-specific ones it still takes */
    static const char *const mtp[] = {"mtp", "qwen3_next_mtp", "qwen3_5_mtp"};
    for (int i = 0; i < 3; i++) {
        char json[96];
        snprintf(json, sizeof json, "{\"method\":\"%s\",\"num_speculative_tokens\":2}", mtp[i]);
        flags_init(&v);
        assert_int_equal(spec_parse_config(json, &v, &err), 0);
        assert_int_equal(v.speculative_method, SPEC_MTP);
        assert_int_equal(v.num_speculative_tokens, 2);
    }
    assert_non_null(strstr(parse_err("{\"method\":\"mtp\",\"num_speculative_tokens\":2,"
                                     "\"prompt_lookup_max\":3}"),
                           "apply to method \"ngram\" only"));
    assert_non_null(
        strstr(parse_err("{\"method\":\"eagle3\",\"num_speculative_tokens\":2}"), "not supported"));
    assert_non_null(strstr(parse_err("{\"num_speculative_tokens\":2}"), "\"method\" is missing"));
    assert_non_null(
        strstr(parse_err("{\"method\":\"ngram\"}"), "\"num_speculative_tokens\" is missing"));
    assert_non_null(strstr(parse_err("{\"method\":\"ngram\",\"num_speculative_tokens\":0}"),
                           "integer in [1, 16]"));
    assert_non_null(
        strstr(parse_err("{\"method\":\"ngram\",\"num_speculative_tokens\":2.5}"), "integer"));
    assert_non_null(strstr(parse_err("{\"method\":\"ngram\",\"num_speculative_tokens\":2,"
                                     "\"prompt_lookup_min\":4,\"prompt_lookup_max\":2}"),
                           "more than prompt_lookup_max"));
    assert_non_null(strstr(parse_err("{\"method\":\"ngram\",\"num_speculative_tokens\":2,"
                                     "\"draft_model\":\"x\"}"),
                           "unknown key \"draft_model\""));

    /* on the command line, as --speculative-config JSON and =JSON */
    flags_init(&v);
    int used = 0;
    assert_int_equal(flags_parse_arg("--speculative-config", ok, &v, &used, &err), 1);
    assert_int_equal(used, 2);
    assert_int_equal(v.num_speculative_tokens, 3);
    assert_int_equal(flags_parse_arg("--speculative_config={\"method\":\"ngram\","
                                     "\"num_speculative_tokens\":1}",
                                     NULL, &v, &used, &err),
                     1);
    assert_int_equal(used, 1);
    assert_int_equal(v.num_speculative_tokens, 1);
    assert_int_equal(flags_parse_arg("--speculative-config", "{}", &v, &used, &err), -1);
    assert_non_null(strstr(err.msg, "--speculative-config"));
    assert_int_equal(flags_parse_arg("--speculative-config", NULL, &v, &used, &err), -1);
    /* the live flag, as the console and the admin endpoint set it */
    assert_int_equal(flags_find("num-speculative-tokens")->apply, FLAG_LIVE);
    assert_int_equal(flags_set(flags_find("num-speculative-tokens"), "17", &v, &err), -1);
}

/* The acceptance rule on one verified position. p: the target's processed distribution over 6
 * tokens (temperature 1), x: the draft. Per trial (seed i):
 * - coupled (what the engine does): y drawn by the sampler with the position's uniform; the
 *   draft is accepted iff y == x; the position emits y either way;
 * - standard: accept x when u < p(x), else draw from p with x removed, renormalized;
 * - wrong: accept x when u < p(x), else draw from p as it is (x left in).
 * The emitted token's counts over N trials against N p: chi-squared with 5 degrees of freedom,
 * critical value 20.52 at the 0.1% level. Measured (N = 20000, fixed seeds): coupled 1.1,
 * standard 2.3, wrong 3,240 (p(x) = 0.19 becomes 0.19 + 0.81 x 0.19 = 0.34). */
#define N_TRIALS 20000
static void test_acceptance_rule_distribution(void **state) {
    enum { V = 6 };
    const float logits[V] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -2.0f};
    const int32_t x = 1;
    double p[V], z = 0;
    for (int i = 0; i < V; i++)
        z += p[i] = exp((double)logits[i]);
    for (int i = 0; i < V; i++)
        p[i] /= z;
    sampler_t *smp = sampler_create(V);
    sampling_params_t sp;
    sampling_params_init(&sp);
    sp.temperature = 1.0f;
    sp.top_p = 1.0f;
    sp.top_k = 0;
    sp.min_p = 0.0f;
    sp.repetition_penalty = 1.0f;
    sp.presence_penalty = sp.frequency_penalty = 0.0f;
    sp.min_tokens = 0;
    sp.logprobs = -1;
    int count[3][V] = {{0}};
    for (int i = 0; i < N_TRIALS; i++) {
        float row[V];
        sampler_row_t r = {.params = &sp, .seed = (uint64_t)i + 1};
        sampler_result_t res;
        memcpy(row, logits, sizeof row);
        sampler_sample(smp, row, &r, &res);
        count[0][res.token]++; /* accepted iff res.token == x: emitted either way */
        double u = (double)rng_uniform((uint64_t)i + 1, 99, 0);
        if (u < p[x]) {
            count[1][x]++;
            count[2][x]++;
            continue;
        }
        memcpy(row, logits, sizeof row);
        row[x] = -INFINITY; /* p with x removed, renormalized by the sampler */
        sampler_sample(smp, row, &r, &res);
        count[1][res.token]++;
        memcpy(row, logits, sizeof row);
        sampler_sample(smp, row, &r, &res);
        count[2][res.token]++;
    }
    sampler_destroy(smp);
    double chi2[3] = {0};
    for (int m = 0; m < 3; m++)
        for (int t = 0; t < V; t++) {
            double ex = N_TRIALS * p[t];
            chi2[m] += (count[m][t] - ex) * (count[m][t] - ex) / ex;
        }
    print_message("chi2 (df 5, critical 20.52): coupled %.1f, standard %.1f, wrong %.1f\n", chi2[0],
                  chi2[1], chi2[2]);
    assert_true(chi2[0] < 20.52);
    assert_true(chi2[1] < 20.52);
    assert_true(chi2[2] > 20.52);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram),
        cmocka_unit_test(test_ngram_matches_naive),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_acceptance_rule_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

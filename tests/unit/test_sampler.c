/* sampler: greedy ties, sampled frequencies against the distribution (chi-square, seeded so it
 * cannot flake), top_k / top_p / min_p sets and their order, each penalty against hand-computed
 * logits, min_tokens, logprobs against a double-precision log_softmax, seeded determinism, exact
 * agreement with a sort-based reference draw, and a 151936-token row (timed, not asserted). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "rng.h"
#include "sampler.h"

static sampling_params_t params(float temperature, int top_k, float top_p, float min_p) {
    sampling_params_t p;
    err_t err = {{0}};
    sampling_params_init(&p);
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    if (sampling_params_resolve(&p, NULL, &err) != 0) fail_msg("resolve: %s", err.msg);
    return p;
}

static sampler_row_t row_of(const sampling_params_t *p, uint64_t seed, int choice, int n_output) {
    return (sampler_row_t){.params = p, .seed = seed, .choice = choice, .n_output = n_output};
}

/* Samples logits (copied each time) with n different (seed, position, choice) keys. */
static void histogram(sampler_t *smp, const float *logits, int V, const sampling_params_t *p, int n,
                      int *counts) {
    float *buf = malloc((size_t)V * sizeof *buf);
    memset(counts, 0, (size_t)V * sizeof *counts);
    for (int i = 0; i < n; i++) {
        memcpy(buf, logits, (size_t)V * sizeof *buf);
        sampler_row_t r = row_of(p, 1000 + (uint64_t)(i / 97), i % 3, i % 97);
        sampler_result_t res;
        sampler_sample(smp, buf, &r, &res);
        assert_in_range(res.token, 0, V - 1);
        counts[res.token]++;
    }
    free(buf);
}

static double chi_square(const int *counts, const double *probs, int k, int n) {
    double chi = 0.0;
    for (int i = 0; i < k; i++) {
        double e = probs[i] * n;
        chi += (counts[i] - e) * (counts[i] - e) / e;
    }
    return chi;
}

static void test_greedy_ties(void **state) {
    sampler_t *smp = sampler_create(8);
    sampling_params_t p = params(0.0f, SAMPLING_UNSET_I, SAMPLING_UNSET_F, SAMPLING_UNSET_F);
    float logits[8] = {1, 5, 3, 5, -INFINITY, 2, 5, 0};
    sampler_row_t r = row_of(&p, 1, 0, 0);
    sampler_result_t res;
    sampler_sample(smp, logits, &r, &res);
    assert_int_equal(res.token, 1); /* first of the three 5s */
    assert_int_equal(res.n_top, 0);
    assert_true(res.logprob == 0.0f);

    float all_masked[8];
    for (int i = 0; i < 8; i++)
        all_masked[i] = -INFINITY;
    sampler_sample(smp, all_masked, &r, &res);
    assert_int_equal(res.token, 0);
    sampler_destroy(smp);
}

static void test_temperature_frequencies(void **state) {
    const double probs[5] = {0.4, 0.25, 0.2, 0.1, 0.05};
    enum { V = 64, N = 20000 };
    float logits[V];
    for (int i = 0; i < V; i++)
        logits[i] = -INFINITY;
    for (int i = 0; i < 5; i++)
        logits[i * 7] = (float)log(probs[i]) + 3.0f;
    sampler_t *smp = sampler_create(V);
    int counts[V], c5[5];

    sampling_params_t p = params(1.0f, 0, 1.0f, 0.0f);
    histogram(smp, logits, V, &p, N, counts);
    for (int i = 0; i < 5; i++)
        c5[i] = counts[i * 7];
    int total = 0;
    for (int i = 0; i < 5; i++)
        total += c5[i];
    assert_int_equal(total, N); /* masked tokens never drawn */
    double chi = chi_square(c5, probs, 5, N);
    printf("temperature 1: counts %d %d %d %d %d, chi2 %.2f\n", c5[0], c5[1], c5[2], c5[3], c5[4],
           chi);
    assert_true(chi < 18.47); /* 4 dof, p = 0.001 */

    /* Temperature 0.5 squares the probabilities. */
    double sq[5], z = 0;
    for (int i = 0; i < 5; i++)
        z += sq[i] = probs[i] * probs[i];
    for (int i = 0; i < 5; i++)
        sq[i] /= z;
    p = params(0.5f, 0, 1.0f, 0.0f);
    histogram(smp, logits, V, &p, N, counts);
    for (int i = 0; i < 5; i++)
        c5[i] = counts[i * 7];
    chi = chi_square(c5, sq, 5, N);
    printf("temperature 0.5: counts %d %d %d %d %d, chi2 %.2f\n", c5[0], c5[1], c5[2], c5[3], c5[4],
           chi);
    assert_true(chi < 18.47);
    /* The uniform distribution would be far off: the test can fail. */
    double flat[5] = {0.2, 0.2, 0.2, 0.2, 0.2};
    assert_true(chi_square(c5, flat, 5, N) > 1000);
    sampler_destroy(smp);
}

static void test_top_k(void **state) {
    enum { V = 1000 };
    float logits[V], buf[V];
    sampler_t *smp = sampler_create(V);
    sampling_params_t p = params(1.0f, 1, 1.0f, 0.0f);
    for (int t = 0; t < 200; t++) {
        for (int i = 0; i < V; i++)
            logits[i] = rng_uniform(77, (uint64_t)t, (uint64_t)i) * 10;
        memcpy(buf, logits, sizeof buf);
        sampler_row_t r = row_of(&p, (uint64_t)t, 0, t);
        sampler_result_t res;
        sampler_sample(smp, buf, &r, &res);
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        assert_int_equal(res.token, best);
    }

    sampler_destroy(smp);

    /* top_k = 2 of {0.4, 0.3, 0.2, 0.1}: renormalized 4/7, 3/7. */
    smp = sampler_create(4);
    float four[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    int counts[4];
    p = params(1.0f, 2, 1.0f, 0.0f);
    histogram(smp, four, 4, &p, 14000, counts);
    assert_int_equal(counts[2] + counts[3], 0);
    double two[2] = {4.0 / 7, 3.0 / 7};
    assert_true(chi_square(counts, two, 2, 14000) < 10.83);

    sampler_destroy(smp);

    /* Ties at the k-th value: exactly k kept, lower ids first. */
    smp = sampler_create(5);
    float tied[5] = {1, 5, 5, 5, 5};
    p = params(1.0f, 2, 1.0f, 0.0f);
    int ct[5];
    histogram(smp, tied, 5, &p, 2000, ct);
    assert_int_equal(ct[0] + ct[3] + ct[4], 0);
    assert_true(ct[1] > 800 && ct[2] > 800);
    sampler_destroy(smp);
}

static void test_top_p(void **state) {
    sampler_t *smp = sampler_create(4);
    float logits[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    int counts[4];

    sampling_params_t p = params(1.0f, 0, 0.001f, 0.0f);
    histogram(smp, logits, 4, &p, 2000, counts);
    assert_int_equal(counts[0], 2000);

    p = params(1.0f, 0, 0.75f, 0.0f); /* 0.5 < 0.75 <= 0.8: tokens 0 and 1 */
    histogram(smp, logits, 4, &p, 16000, counts);
    assert_int_equal(counts[2] + counts[3], 0);
    double two[2] = {0.625, 0.375};
    assert_true(chi_square(counts, two, 2, 16000) < 10.83);

    p = params(1.0f, 0, 0.85f, 0.0f); /* 0.8 < 0.85: token 2 too */
    histogram(smp, logits, 4, &p, 16000, counts);
    assert_int_equal(counts[3], 0);
    assert_true(counts[2] > 1000);

    /* top_p applies to the renormalized top_k set: {0.4, 0.3, 0.2, 0.1} with top_k 3 is
     * {4/9, 3/9, 2/9}; top_p 0.75 keeps 2 tokens there, 3 on the full distribution. */
    float four[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    p = params(1.0f, 3, 0.75f, 0.0f);
    histogram(smp, four, 4, &p, 4000, counts);
    assert_int_equal(counts[2] + counts[3], 0);
    p = params(1.0f, 0, 0.75f, 0.0f);
    histogram(smp, four, 4, &p, 4000, counts);
    assert_int_equal(counts[3], 0);
    assert_true(counts[2] > 300);
    sampler_destroy(smp);
}

static void test_min_p(void **state) {
    sampler_t *smp = sampler_create(4);
    float logits[4] = {logf(0.5f), logf(0.3f), logf(0.12f), logf(0.08f)};
    int counts[4];

    sampling_params_t p = params(1.0f, 0, 1.0f, 0.2f); /* threshold 0.1: drops 0.08 */
    histogram(smp, logits, 4, &p, 10000, counts);
    assert_int_equal(counts[3], 0);
    assert_true(counts[2] > 900);
    double three[3] = {0.5 / 0.92, 0.3 / 0.92, 0.12 / 0.92};
    assert_true(chi_square(counts, three, 3, 10000) < 13.82);

    p = params(1.0f, 0, 1.0f, 0.45f); /* threshold 0.225: tokens 0 and 1 */
    histogram(smp, logits, 4, &p, 4000, counts);
    assert_int_equal(counts[2] + counts[3], 0);

    /* After temperature 2 the ratios are square roots: 0.49 and 0.4 against 0.45. */
    p = params(2.0f, 0, 1.0f, 0.45f);
    histogram(smp, logits, 4, &p, 4000, counts);
    assert_int_equal(counts[3], 0);
    assert_true(counts[2] > 300);

    p = params(1.0f, 0, 1.0f, 1.0f); /* only the maximum */
    histogram(smp, logits, 4, &p, 1000, counts);
    assert_int_equal(counts[0], 1000);
    sampler_destroy(smp);
}

static void assert_floats(const float *got, const float *want, int n) {
    for (int i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= 1e-6f))
            fail_msg("logit %d: %.7g, expected %.7g", i, (double)got[i], (double)want[i]);
}

static sampling_params_t penalty_params(float rp, float fp, float pp) {
    sampling_params_t p = params(0.0f, 0, 1.0f, 0.0f);
    p.repetition_penalty = rp;
    p.frequency_penalty = fp;
    p.presence_penalty = pp;
    return p;
}

static void test_penalties(void **state) {
    sampler_t *smp = sampler_create(8);
    const float raw[8] = {2, -1, 0.5f, 3, -2, 1, 0, 4};
    const int32_t prompt[3] = {0, 1, 1};
    const int32_t output[4] = {3, 3, 4, 7};
    float x[8];
    sampler_result_t res;

    /* All three: repetition over prompt and output, frequency and presence over output. */
    sampling_params_t p = penalty_params(2.0f, 0.5f, 0.25f);
    sampler_row_t r = {
        .params = &p, .prompt = prompt, .n_prompt = 3, .output = output, .n_output = 4};
    memcpy(x, raw, sizeof x);
    sampler_sample(smp, x, &r, &res);
    const float all[8] = {1, -2, 0.5f, 1.5f - 1.0f - 0.25f, -4 - 0.5f - 0.25f, 1, 0, 2 - 0.75f};
    assert_floats(x, all, 8);
    assert_int_equal(res.token, 7);

    /* Each alone, on the same sampler (its scratch counts must have been cleared). */
    p = penalty_params(1.5f, 0, 0);
    memcpy(x, raw, sizeof x);
    sampler_sample(smp, x, &r, &res);
    const float rep[8] = {2 / 1.5f, -1.5f, 0.5f, 2, -3, 1, 0, 4 / 1.5f};
    assert_floats(x, rep, 8);

    p = penalty_params(1, 1.0f, 0);
    memcpy(x, raw, sizeof x);
    sampler_sample(smp, x, &r, &res);
    const float freq[8] = {2, -1, 0.5f, 1, -3, 1, 0, 3};
    assert_floats(x, freq, 8);

    p = penalty_params(1, 0, -0.5f);
    memcpy(x, raw, sizeof x);
    sampler_sample(smp, x, &r, &res);
    const float pres[8] = {2, -1, 0.5f, 3.5f, -1.5f, 1, 0, 4.5f};
    assert_floats(x, pres, 8);

    /* A different output on the next call: counts start from zero again. */
    const int32_t out2[1] = {3};
    sampler_row_t r2 = {.params = &p, .output = out2, .n_output = 1};
    p = penalty_params(1, 2.0f, 0);
    memcpy(x, raw, sizeof x);
    sampler_sample(smp, x, &r2, &res);
    const float once[8] = {2, -1, 0.5f, 1, -2, 1, 0, 4};
    assert_floats(x, once, 8);
    assert_int_equal(res.token, 7);

    /* Penalties change the greedy choice. */
    p = penalty_params(1, 2.0f, 0);
    const int32_t many7[2] = {7, 7};
    sampler_row_t r3 = {.params = &p, .output = many7, .n_output = 2};
    memcpy(x, raw, sizeof x);
    sampler_sample(smp, x, &r3, &res);
    assert_int_equal(res.token, 3);
    sampler_destroy(smp);
}

static void test_min_tokens(void **state) {
    sampler_t *smp = sampler_create(6);
    sampling_params_t p = params(0.0f, 0, 1.0f, 0.0f);
    p.min_tokens = 3;
    p.stop_token_ids[0] = 4;
    p.n_stop_token_ids = 1;
    const int32_t eos[1] = {5};
    const float raw[6] = {0, 1, 2, 0, 8, 9};
    const int32_t out[4] = {1, 1, 1, 1};
    for (int n_out = 0; n_out <= 4; n_out++) {
        for (int ignore = 0; ignore < 2; ignore++) {
            p.ignore_eos = ignore;
            float x[6];
            memcpy(x, raw, sizeof x);
            sampler_row_t r = {
                .params = &p, .output = out, .n_output = n_out, .eos_ids = eos, .n_eos = 1};
            sampler_result_t res;
            sampler_sample(smp, x, &r, &res);
            assert_int_equal(res.token, n_out < 3 ? 2 : 5);
            if (n_out < 3) assert_true(x[4] == -INFINITY && x[5] == -INFINITY);
        }
    }
    /* Sampling (not greedy) respects the mask too. */
    p = params(1.0f, 0, 1.0f, 0.0f);
    p.min_tokens = 1;
    int seen_eos = 0;
    for (int i = 0; i < 500; i++) {
        float x[6];
        memcpy(x, raw, sizeof x);
        sampler_row_t r = {.params = &p, .eos_ids = eos, .n_eos = 1, .seed = (uint64_t)i};
        sampler_result_t res;
        sampler_sample(smp, x, &r, &res);
        seen_eos += res.token == 5;
    }
    assert_int_equal(seen_eos, 0);
    sampler_destroy(smp);
}

static void test_logprobs(void **state) {
    enum { V = 1000 };
    float logits[V], x[V];
    double ref[V];
    for (int i = 0; i < V; i++)
        logits[i] = (rng_uniform(5, 0, (uint64_t)i) - 0.5f) * 20;
    logits[10] = logits[20] = 12.0f; /* a tie at the top: lower id first */
    logits[30] = 11.5f;
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++)
        m = fmax(m, logits[i]);
    for (int i = 0; i < V; i++)
        sum += exp((double)logits[i] - m);
    for (int i = 0; i < V; i++)
        ref[i] = (double)logits[i] - m - log(sum);

    sampler_t *smp = sampler_create(V);
    sampling_params_t p = params(1.0f, 0, 1.0f, 0.0f);
    p.logprobs = 5;
    p.repetition_penalty = 3.0f; /* changes the logits but not the reported logprobs */
    const int32_t prompt[3] = {10, 20, 30};
    for (int t = 0; t < 50; t++) {
        memcpy(x, logits, sizeof x);
        sampler_row_t r = {.params = &p, .prompt = prompt, .n_prompt = 3, .seed = (uint64_t)t};
        sampler_result_t res;
        sampler_sample(smp, x, &r, &res);
        assert_int_equal(res.n_top, 5);
        assert_int_equal(res.top_ids[0], 10);
        assert_int_equal(res.top_ids[1], 20);
        assert_int_equal(res.top_ids[2], 30);
        for (int i = 0; i < 5; i++) {
            assert_true(fabs(res.top_logprobs[i] - ref[res.top_ids[i]]) < 1e-5);
            if (i > 0) assert_true(res.top_logprobs[i] <= res.top_logprobs[i - 1]);
        }
        /* the fifth is really the fifth best */
        int better = 0;
        for (int i = 0; i < V; i++)
            better += logits[i] > logits[res.top_ids[4]];
        assert_int_equal(better, 4);
        assert_true(fabs(res.logprob - ref[res.token]) < 1e-5);
    }

    p.logprobs = 0;
    memcpy(x, logits, sizeof x);
    sampler_row_t r = {.params = &p, .seed = 3};
    sampler_result_t res;
    sampler_sample(smp, x, &r, &res);
    assert_int_equal(res.n_top, 0);
    assert_true(fabs(res.logprob - ref[res.token]) < 1e-5);
    sampler_destroy(smp);

    smp = sampler_create(3); /* more alternatives asked than the vocabulary has */
    float small[3] = {0, 1, 2};
    p = params(0.0f, 0, 1.0f, 0.0f);
    p.logprobs = 20;
    r = (sampler_row_t){.params = &p};
    sampler_sample(smp, small, &r, &res);
    assert_int_equal(res.n_top, 3);
    assert_int_equal(res.top_ids[0], 2);
    assert_int_equal(res.top_ids[2], 0);
    assert_true(fabs(res.top_logprobs[0] - (2 - log(1 + exp(1.0) + exp(2.0)))) < 1e-5);
    sampler_destroy(smp);
}

static void test_determinism(void **state) {
    enum { V = 500, K = 60 };
    float logits[V], x[V];
    for (int i = 0; i < V; i++)
        logits[i] = rng_uniform(9, 0, (uint64_t)i) * 6;
    sampler_t *smp = sampler_create(V);
    sampling_params_t p = params(1.0f, 0, 0.95f, 0.0f);
    int32_t first[K];
    for (int k = 0; k < K; k++) {
        memcpy(x, logits, sizeof x);
        sampler_row_t r = row_of(&p, 42 + (uint64_t)(k % 4), k % 3, k);
        sampler_result_t res;
        sampler_sample(smp, x, &r, &res);
        first[k] = res.token;
    }
    /* Reverse order, with unrelated calls (other rows, other params) in between. */
    sampling_params_t q = params(0.7f, 20, 0.8f, 0.05f);
    int differ = 0;
    for (int k = K - 1; k >= 0; k--) {
        memcpy(x, logits, sizeof x);
        sampler_row_t other = row_of(&q, 7, 1, 1000 + k);
        sampler_result_t res;
        sampler_sample(smp, x, &other, &res);
        memcpy(x, logits, sizeof x);
        sampler_row_t r = row_of(&p, 42 + (uint64_t)(k % 4), k % 3, k);
        sampler_sample(smp, x, &r, &res);
        assert_int_equal(res.token, first[k]);
        /* another choice of the same request draws from its own stream */
        memcpy(x, logits, sizeof x);
        sampler_row_t c = row_of(&p, 42 + (uint64_t)(k % 4), k % 3 + 5, k);
        sampler_sample(smp, x, &c, &res);
        differ += res.token != first[k];
    }
    assert_true(differ > K / 2);
    sampler_destroy(smp);
}

/* ---- reference draw: full sort, sequential walk --------------------------------------------- */

typedef struct ref_entry {
    float x;
    int32_t id;
} ref_entry_t;

static int ref_cmp(const void *a, const void *b) {
    const ref_entry_t *x = a, *y = b;
    if (x->x != y->x) return x->x > y->x ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int32_t ref_draw(const float *raw, int V, const sampler_row_t *r, ref_entry_t *e) {
    const sampling_params_t *p = r->params;
    float m = -INFINITY;
    for (int i = 0; i < V; i++) {
        e[i].x = raw[i] / p->temperature;
        e[i].id = i;
        m = fmaxf(m, e[i].x);
    }
    qsort(e, (size_t)V, sizeof *e, ref_cmp);
    int n = 0;
    float lmp = p->min_p > 0 ? logf(p->min_p) : -INFINITY;
    while (n < V && e[n].x - m >= lmp)
        n++;
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    double z = 0;
    for (int i = 0; i < n; i++)
        z += expf(e[i].x - m);
    if (p->top_p < 1) {
        double acc = 0, target = (double)p->top_p * z;
        int keep = n;
        for (int i = 0; i < n; i++) {
            acc += expf(e[i].x - m);
            if (acc >= target) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
        z = 0;
        for (int i = 0; i < n; i++)
            z += expf(e[i].x - m);
    }
    double u =
        (double)(rng_bits(r->seed, (uint64_t)r->choice, (uint64_t)r->n_output) >> 11) * 0x1.0p-53;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        acc += expf(e[i].x - m);
        if (acc > u * z) return e[i].id;
    }
    return e[n - 1].id;
}

static void test_matches_sorted_reference(void **state) {
    enum { V = 5000, ROWS = 600 };
    float *logits = malloc(V * sizeof *logits), *x = malloc(V * sizeof *x);
    ref_entry_t *e = malloc(V * sizeof *e);
    sampler_t *smp = sampler_create(V);
    const struct {
        float t;
        int k;
        float tp, mp;
    } cfg[] = {{1.0f, 0, 1.0f, 0.0f},   {0.7f, 20, 0.95f, 0.0f}, {1.0f, 0, 0.9f, 0.0f},
               {1.3f, 0, 0.5f, 0.02f},  {0.6f, 50, 1.0f, 0.1f},  {1.0f, 1000, 0.99f, 0.0f},
               {2.0f, 0, 0.999f, 0.0f}, {0.5f, 3, 0.3f, 0.0f}};
    int ncfg = (int)(sizeof cfg / sizeof cfg[0]);
    for (int t = 0; t < ROWS; t++) {
        /* peaked, flat and tied rows */
        int kind = t % 3;
        for (int i = 0; i < V; i++) {
            float g = rng_uniform(31, (uint64_t)t, (uint64_t)i);
            logits[i] = kind == 0 ? g * 25 : kind == 1 ? g * 2 : (float)(int)(g * 8);
        }
        sampling_params_t p =
            params(cfg[t % ncfg].t, cfg[t % ncfg].k, cfg[t % ncfg].tp, cfg[t % ncfg].mp);
        sampler_row_t r = row_of(&p, (uint64_t)t * 31, t % 5, t);
        memcpy(x, logits, V * sizeof *x);
        sampler_result_t res;
        sampler_sample(smp, x, &r, &res);
        int32_t want = ref_draw(logits, V, &r, e);
        if (res.token != want)
            fail_msg("row %d (config %d, kind %d): token %d, reference %d", t, t % ncfg, kind,
                     res.token, want);
    }
    sampler_destroy(smp);
    free(logits);
    free(x);
    free(e);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_full_vocab_row(void **state) {
    enum { V = 151936, PROMPT = 4096, REPS = 20 };
    float *logits = malloc(V * sizeof *logits), *x = malloc(V * sizeof *x);
    int32_t *prompt = malloc(PROMPT * sizeof *prompt), out[256];
    for (int i = 0; i < V; i++) {
        /* a long tail with a few strong candidates, like a language model's row */
        float g = rng_uniform(3, 0, (uint64_t)i);
        logits[i] = -8.0f * g + (i % 5003 == 0 ? 14.0f : 0.0f);
    }
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)(rng_bits(4, 0, (uint64_t)i) % V);
    for (int i = 0; i < 256; i++)
        out[i] = (int32_t)(rng_bits(4, 1, (uint64_t)i) % V);
    sampler_t *smp = sampler_create(V);
    ref_entry_t *e = malloc(V * sizeof *e);
    const struct {
        const char *name;
        float t;
        int k;
        float tp, mp, rp;
        int lp;
    } cfg[] = {
        {"greedy", 0.0f, 0, 1.0f, 0.0f, 1.0f, -1},
        {"t=0.6 top_k=20 top_p=0.95", 0.6f, 20, 0.95f, 0.0f, 1.0f, -1},
        {"t=1 top_p=0.9", 1.0f, 0, 0.9f, 0.0f, 1.0f, -1},
        {"t=1 no filter", 1.0f, 0, 1.0f, 0.0f, 1.0f, -1},
        {"t=0.7 min_p=0.05", 0.7f, 0, 1.0f, 0.05f, 1.0f, -1},
        {"t=1 top_k=20 logprobs=20", 1.0f, 20, 1.0f, 0.0f, 1.0f, 20},
        {"t=0.8 top_p=0.95 rep=1.1 (4096+256 tokens)", 0.8f, 0, 0.95f, 0.0f, 1.1f, -1},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        sampling_params_t p = params(cfg[c].t, cfg[c].k, cfg[c].tp, cfg[c].mp);
        p.repetition_penalty = cfg[c].rp;
        p.logprobs = cfg[c].lp;
        double total = 0;
        for (int rep = 0; rep < REPS; rep++) {
            memcpy(x, logits, V * sizeof *x);
            sampler_row_t r = {.params = &p,
                               .prompt = prompt,
                               .n_prompt = PROMPT,
                               .output = out,
                               .n_output = 256,
                               .seed = (uint64_t)rep};
            sampler_result_t res;
            double t0 = now_ms();
            sampler_sample(smp, x, &r, &res);
            total += now_ms() - t0;
            assert_in_range(res.token, 0, V - 1);
            if (cfg[c].rp == 1.0f && cfg[c].lp < 0) {
                if (cfg[c].t == 0.0f) {
                    int best = 0;
                    for (int i = 1; i < V; i++)
                        if (logits[i] > logits[best]) best = i;
                    assert_int_equal(res.token, best);
                } else {
                    assert_int_equal(res.token, ref_draw(logits, V, &r, e));
                }
            }
        }
        printf("V=%d %-44s %.3f ms/row\n", V, cfg[c].name, total / REPS);
    }
    sampler_destroy(smp);
    free(e);
    free(logits);
    free(x);
    free(prompt);
}

static void test_create(void **state) {
    assert_null(sampler_create(0));
    sampler_destroy(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create),
        cmocka_unit_test(test_greedy_ties),
        cmocka_unit_test(test_temperature_frequencies),
        cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_min_tokens),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_matches_sorted_reference),
        cmocka_unit_test(test_full_vocab_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

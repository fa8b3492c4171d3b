/*
 * cpu_gdn_ops: the Gated DeltaNet math of the CPU backend. The chunked form (prefill) against the
 * recurrent form (decode) on random inputs, over several 64-token chunks and from a random
 * initial state; a prompt chunked across steps (the state carried between calls) against one
 * call; the conv against its definition, in one piece and in pieces; the gates' softplus
 * threshold; the gated RMSNorm against its formula.
 *
 * Tolerance of the two forms: they are the same recurrence in two association orders, in f32,
 * so they differ by rounding only: |chunked - recurrent| <= 1e-5 * (1 + |recurrent|) on
 * outputs and final state after 150 tokens (observed below 5e-7; a wrong decay, beta or mask
 * moves outputs by 1e-2 or more).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "cpu/cpu_gdn_ops.h"

#define TOL 1e-5

/* n tokens of one value head: q, k L2-normalized rows, v, decays g in (-2.5, 0), beta in (0, 1);
 * q and k rows at stride ld (wider than dk, as in the conv output). */
typedef struct inputs {
    int n, dk, dv, ld;
    float *q, *k, *v, *g, *beta;
} inputs_t;

static inputs_t make_inputs(int n, int dk, int dv) {
    inputs_t in = {n, dk, dv, dk + 3, NULL, NULL, NULL, NULL, NULL};
    in.q = calloc((size_t)n * in.ld, sizeof(float));
    in.k = calloc((size_t)n * in.ld, sizeof(float));
    in.v = malloc((size_t)n * dv * sizeof(float));
    in.g = malloc((size_t)n * sizeof(float));
    in.beta = malloc((size_t)n * sizeof(float));
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < dk; i++) {
            in.q[t * in.ld + i] = tu_randf();
            in.k[t * in.ld + i] = tu_randf();
        }
        cpu_gdn_l2norm(in.q + t * in.ld, dk);
        cpu_gdn_l2norm(in.k + t * in.ld, dk);
        for (int j = 0; j < dv; j++)
            in.v[t * dv + j] = 2.0f * tu_randf();
        float a = 3.0f * tu_randf(), b = 3.0f * tu_randf();
        cpu_gdn_gates(a, b, -0.5f + 0.5f * tu_randf(), 0.5f, &in.g[t], &in.beta[t]);
    }
    return in;
}

static void free_inputs(inputs_t *in) {
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->g);
    free(in->beta);
}

/* Tokens [t0, t0 + n) of in as one head's call. */
static cpu_gdn_head_t head(const inputs_t *in, int t0, int n, float *o) {
    return (cpu_gdn_head_t){.n = n,
                            .dk = in->dk,
                            .dv = in->dv,
                            .q = in->q + (size_t)t0 * in->ld,
                            .k = in->k + (size_t)t0 * in->ld,
                            .ld_qk = in->ld,
                            .v = in->v + (size_t)t0 * in->dv,
                            .ld_v = in->dv,
                            .g = in->g + t0,
                            .beta = in->beta + t0,
                            .ld_gb = 1,
                            .o = o + (size_t)t0 * in->dv,
                            .ld_o = in->dv};
}

static double worst_rel(const float *a, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
        if (!(d <= w)) w = d;
    }
    return w;
}

/* Two runs over the same inputs from the same initial state: run 0 the reference, run 1 the
 * form under test. */
typedef struct pair {
    inputs_t in;
    size_t sn;
    float *s[2], *o[2], *scratch;
} pair_t;

static pair_t pair_make(int n, int dk, int dv, float state_scale) {
    pair_t p = {.in = make_inputs(n, dk, dv), .sn = (size_t)dk * dv};
    for (int r = 0; r < 2; r++) {
        p.s[r] = malloc(p.sn * sizeof(float));
        p.o[r] = malloc((size_t)n * dv * sizeof(float));
    }
    for (size_t i = 0; i < p.sn; i++)
        p.s[0][i] = p.s[1][i] = state_scale * tu_randf();
    p.scratch = malloc(cpu_gdn_scratch(dk, dv) * sizeof(float));
    return p;
}

/* Compares run 1 with run 0 (outputs and final state) within TOL, then frees the pair. */
static void pair_check(pair_t *p, const char *what) {
    double eo = worst_rel(p->o[1], p->o[0], (size_t)p->in.n * p->in.dv);
    double es = worst_rel(p->s[1], p->s[0], p->sn);
    print_message("%s: outputs %.2g, state %.2g\n", what, eo, es);
    assert_true(eo <= TOL);
    assert_true(es <= TOL);
    for (int r = 0; r < 2; r++) {
        free(p->s[r]);
        free(p->o[r]);
    }
    free(p->scratch);
    free_inputs(&p->in);
}

static void chunked_vs_recurrent(int n, int dk, int dv) {
    pair_t p = pair_make(n, dk, dv, 0.3f);
    cpu_gdn_head_t h0 = head(&p.in, 0, n, p.o[0]), h1 = head(&p.in, 0, n, p.o[1]);
    cpu_gdn_recurrent(&h0, p.s[0], p.scratch);
    cpu_gdn_chunked(&h1, p.s[1], p.scratch);
    char what[96];
    snprintf(what, sizeof what, "n %d dk %d dv %d: chunked vs recurrent", n, dk, dv);
    pair_check(&p, what);
}

static void test_chunked_matches_recurrent(void **state) {
    (void)state;
    chunked_vs_recurrent(150, 32, 48); /* chunks of 64, 64, 22 */
    chunked_vs_recurrent(64, 128, 128);
    chunked_vs_recurrent(7, 16, 16);
    chunked_vs_recurrent(1, 64, 32);
}

/* A prompt prefilled in steps of 37 tokens (chunk boundaries that do not meet the 64-token
 * chunks), the state carried between calls, then decoded token by token: the same outputs as
 * one chunked call over everything. */
static void test_state_carries_across_calls(void **state) {
    (void)state;
    int n = 180, prompt = 160;
    pair_t p = pair_make(n, 32, 32, 0.0f);
    cpu_gdn_head_t all = head(&p.in, 0, n, p.o[0]);
    cpu_gdn_chunked(&all, p.s[0], p.scratch);
    for (int t0 = 0; t0 < prompt; t0 += 37) {
        cpu_gdn_head_t part = head(&p.in, t0, prompt - t0 < 37 ? prompt - t0 : 37, p.o[1]);
        cpu_gdn_chunked(&part, p.s[1], p.scratch);
    }
    for (int t = prompt; t < n; t++) {
        cpu_gdn_head_t one = head(&p.in, t, 1, p.o[1]);
        cpu_gdn_recurrent(&one, p.s[1], p.scratch);
    }
    pair_check(&p, "steps of 37 then decodes vs one call");
}

static float silu(float x) {
    return x / (1.0f + expf(-x));
}

/* The conv against y[t][c] = silu(sum_j w[c][j] x[t - K + 1 + j][c]) with zeros before the start;
 * then the same input in pieces of 1, 2 and 3 tokens with the window carried. */
static void test_conv(void **state) {
    (void)state;
    enum { N = 9, C = 5, K = 4 };
    float w[C * K], x[N * C], y[N * C], y2[N * C], window[(K - 1) * C], window2[(K - 1) * C];
    for (int i = 0; i < C * K; i++)
        w[i] = tu_randf();
    for (int i = 0; i < N * C; i++)
        x[i] = tu_randf();
    memset(window, 0, sizeof window);
    memset(window2, 0, sizeof window2);
    cpu_gdn_conv(N, C, K, 0, C, w, x, C, window, y, C);
    for (int t = 0; t < N; t++)
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int j = 0; j < K; j++) {
                int tau = t - (K - 1) + j;
                if (tau >= 0) acc += (double)w[c * K + j] * x[tau * C + c];
            }
            assert_float_equal(y[t * C + c], silu((float)acc), 1e-6);
        }
    for (int i = 0; i < K - 1; i++) /* the window holds the last K - 1 raw inputs */
        assert_memory_equal(window + i * C, x + (N - (K - 1) + i) * C, C * sizeof(float));
    int pieces[] = {1, 2, 3, 1, 2}, t0 = 0;
    for (int p = 0; p < 5; p++) {
        cpu_gdn_conv(pieces[p], C, K, 0, C, w, x + t0 * C, C, window2, y2 + t0 * C, C);
        t0 += pieces[p];
    }
    assert_int_equal(t0, N);
    assert_memory_equal(y, y2, sizeof y);
    assert_memory_equal(window, window2, sizeof window);
}

static void test_gates(void **state) {
    (void)state;
    float g, beta;
    cpu_gdn_gates(25.0f, 0.0f, 0.0f, 1.0f, &g, &beta); /* softplus(26) = 26 past the threshold */
    assert_float_equal(g, -26.0f, 0);
    assert_float_equal(beta, 0.5f, 0);
    cpu_gdn_gates(0.0f, 2.0f, logf(2.0f), 0.0f, &g, &beta); /* -2 * log(2) */
    assert_float_equal(g, -2.0f * logf(2.0f), 1e-6);
    assert_float_equal(beta, 1.0f / (1.0f + expf(-2.0f)), 1e-7);
}

static void test_gated_rmsnorm(void **state) {
    (void)state;
    float o[8], z[8], w[8], y[8];
    for (int i = 0; i < 8; i++) {
        o[i] = tu_randf();
        z[i] = 2 * tu_randf();
        w[i] = 1 + tu_randf();
    }
    double ss = 0;
    for (int i = 0; i < 8; i++)
        ss += (double)o[i] * o[i];
    double inv = 1.0 / sqrt(ss / 8 + 1e-6);
    cpu_gdn_gated_rmsnorm(o, z, w, 8, 1e-6f, y);
    for (int i = 0; i < 8; i++)
        assert_float_equal(y[i], w[i] * o[i] * inv * silu(z[i]), 1e-6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_matches_recurrent),
        cmocka_unit_test(test_state_carries_across_calls),
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_gates),
        cmocka_unit_test(test_gated_rmsnorm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

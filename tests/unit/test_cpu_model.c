/*
 * cpu backend, whole model: the "tiny" dummy Qwen3 against a naive double-precision forward,
 * and the consistency the engine relies on: one-shot prefill, chunked prefill over a cached
 * prefix and token-by-token decode give the same logits; sequences batched together (varlen,
 * scattered block tables) give what each gives alone; 1 and 2 threads are bit-identical; the
 * W8A8 emulation is deterministic and close to the unquantized activations; the vector fast
 * paths give the scalar reference kernels' logits bit for bit.
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

#include "backend.h"
#include "cpu/cpu_bf16.h"
#include "engine_testutil.h"
#include "flags.h"
#include "testutil.h"
#include "weights.h"

enum { BS = 16, NB = 40, STRIDE = 8, MAXT = 200 };

static model_weights_t *tiny(bool fp8) {
    model_config_t cfg;
    model_weights_t *w;
    err_t err;
    if (model_config_preset("tiny", fp8, &cfg, &err) < 0) fail_msg("%s", err.msg);
    if (weights_dummy(&cfg, 42, &w, &err) < 0) fail_msg("%s", err.msg);
    return w;
}

static bool g_reference; /* make_backend: the scalar reference kernels (cpu_reference) */
static int g_precision;  /* make_backend: cpu_matmul_precision_t */

static backend_t *make_backend(const model_weights_t *w, int threads, bool emulate) {
    backend_options_t opts = {.n_threads = threads,
                              .emulate_fp8_activations = emulate,
                              .cpu_reference = g_reference,
                              .cpu_matmul_precision = g_precision};
    backend_t *be;
    err_t err;
    if (cpu_backend_ops.create(&opts, w, &be, &err) < 0) fail_msg("%s", err.msg);
    if (backend_kv_reserve(be, NB, BS, &err) < 0) fail_msg("%s", err.msg);
    return be;
}

/* One sequence of a test: its tokens and its blocks in the pool. */
typedef struct seq {
    const int32_t *tokens;
    int32_t table[STRIDE];
    int done; /* tokens already in the cache */
} seq_t;

/* Runs one step: n_new[i] next tokens of each sequence; logits of each sequence's last new
 * token go to logits[i * V] (all rows when all_rows, then in token order). */
static void step(backend_t *be, seq_t **seqs, const int *n_new, int n_seqs, bool all_rows,
                 float *logits) {
    int32_t ids[MAXT], pos[MAXT], qs[8], ctx[8], tables[8 * STRIDE], rows[MAXT];
    int64_t slots[MAXT];
    int T = 0, n_logits = 0;
    qs[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        seq_t *q = seqs[s];
        for (int i = 0; i < n_new[s]; i++, T++) {
            int p = q->done + i;
            ids[T] = q->tokens[p];
            pos[T] = p;
            slots[T] = (int64_t)q->table[p / BS] * BS + p % BS;
            if (all_rows) rows[n_logits++] = T;
        }
        if (!all_rows) rows[n_logits++] = T - 1;
        q->done += n_new[s];
        qs[s + 1] = T;
        ctx[s] = q->done;
        memcpy(tables + s * STRIDE, q->table, sizeof q->table);
    }
    be_batch_t b = {.n_tokens = T,
                    .n_seqs = n_seqs,
                    .token_ids = ids,
                    .positions = pos,
                    .slot_mapping = slots,
                    .query_start = qs,
                    .context_len = ctx,
                    .block_tables = tables,
                    .block_table_stride = STRIDE,
                    .n_logits = n_logits,
                    .logit_rows = rows};
    err_t err;
    if (backend_check_batch(&b, NB, BS, &err) < 0) fail_msg("test batch: %s", err.msg);
    if (backend_forward(be, &b, logits, &err) < 0) fail_msg("%s", err.msg);
}

static void make_tokens(int32_t *t, int n, int V, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = (int32_t)((seed >> 8) % (uint32_t)V);
    }
}

/* max |a - b| / max |b| */
static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

/* --- naive double reference ---------------------------------------------------------------- */

static double *dense(const wtensor_t *t) {
    double *d = malloc(sizeof(double) * (size_t)(t->rows * t->cols));
    float *row = malloc(sizeof(float) * (size_t)t->cols);
    for (int64_t r = 0; r < t->rows; r++) {
        wtensor_row_f32(t, r, row);
        for (int64_t k = 0; k < t->cols; k++)
            d[r * t->cols + k] = row[k];
    }
    free(row);
    return d;
}

static void ref_matmul(const double *x, int T, const double *W, int N, int K, double *y) {
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += x[t * K + k] * W[(size_t)n * K + k];
            y[t * N + n] = s;
        }
}

static void ref_rmsnorm(double *x, const double *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        x[i] = w[i] * x[i] * inv;
}

static void ref_rope(double *x, int D, int pos, double theta) {
    for (int j = 0; j < D / 2; j++) {
        double a = pos / pow(theta, 2.0 * j / D), c = cos(a), s = sin(a);
        double lo = x[j], hi = x[j + D / 2];
        x[j] = lo * c - hi * s;
        x[j + D / 2] = hi * c + lo * s;
    }
}

/* logits [T, V] of a prompt, every row */
static void ref_forward(const model_weights_t *w, const int32_t *ids, int T, double *logits) {
    const model_config_t *c = weights_config(w);
    int H = c->hidden_size, D = c->head_dim, nH = c->n_heads, nKV = c->n_kv_heads;
    int I = c->intermediate_size, V = c->vocab_size, qd = nH * D, kvd = nKV * D;
    double eps = c->rms_norm_eps;
    double *h = calloc((size_t)T * H, sizeof(double)), *x = calloc((size_t)T * H, sizeof(double));
    double *q = calloc((size_t)T * qd, sizeof(double)),
           *k = calloc((size_t)T * kvd, sizeof(double));
    double *v = calloc((size_t)T * kvd, sizeof(double)),
           *a = calloc((size_t)T * qd, sizeof(double));
    double *g = calloc((size_t)T * I, sizeof(double)), *u = calloc((size_t)T * I, sizeof(double));
    double *o = calloc((size_t)T * H, sizeof(double)), *sc = calloc((size_t)T, sizeof(double));

    double *emb = dense(weights_global(w, G_EMBED));
    for (int t = 0; t < T; t++)
        memcpy(h + t * H, emb + (size_t)ids[t] * H, sizeof(double) * H);
    free(emb);
    for (int l = 0; l < c->n_layers; l++) {
        double *n1 = dense(weights_layer(w, l, L_ATTN_NORM)),
               *n2 = dense(weights_layer(w, l, L_MLP_NORM));
        double *qn = dense(weights_layer(w, l, L_Q_NORM)),
               *kn = dense(weights_layer(w, l, L_K_NORM));
        double *Wq = dense(weights_layer(w, l, L_Q)), *Wk = dense(weights_layer(w, l, L_K));
        double *Wv = dense(weights_layer(w, l, L_V)), *Wo = dense(weights_layer(w, l, L_O));
        double *Wg = dense(weights_layer(w, l, L_GATE)), *Wu = dense(weights_layer(w, l, L_UP));
        double *Wd = dense(weights_layer(w, l, L_DOWN));

        memcpy(x, h, sizeof(double) * T * H);
        for (int t = 0; t < T; t++)
            ref_rmsnorm(x + t * H, n1, H, eps);
        ref_matmul(x, T, Wq, qd, H, q);
        ref_matmul(x, T, Wk, kvd, H, k);
        ref_matmul(x, T, Wv, kvd, H, v);
        for (int t = 0; t < T; t++) {
            for (int hh = 0; hh < nH; hh++) {
                ref_rmsnorm(q + t * qd + hh * D, qn, D, eps);
                ref_rope(q + t * qd + hh * D, D, t, c->rope_theta);
            }
            for (int hh = 0; hh < nKV; hh++) {
                ref_rmsnorm(k + t * kvd + hh * D, kn, D, eps);
                ref_rope(k + t * kvd + hh * D, D, t, c->rope_theta);
            }
        }
        for (int t = 0; t < T; t++)
            for (int hh = 0; hh < nH; hh++) {
                int kh = hh / (nH / nKV);
                double m = -1e300, sum = 0;
                for (int p = 0; p <= t; p++) {
                    double d = 0;
                    for (int i = 0; i < D; i++)
                        d += q[t * qd + hh * D + i] * k[p * kvd + kh * D + i];
                    sc[p] = d / sqrt((double)D);
                    m = fmax(m, sc[p]);
                }
                for (int p = 0; p <= t; p++)
                    sum += (sc[p] = exp(sc[p] - m));
                for (int i = 0; i < D; i++) {
                    double acc = 0;
                    for (int p = 0; p <= t; p++)
                        acc += sc[p] / sum * v[p * kvd + kh * D + i];
                    a[t * qd + hh * D + i] = acc;
                }
            }
        ref_matmul(a, T, Wo, H, qd, o);
        for (int i = 0; i < T * H; i++)
            h[i] += o[i];
        memcpy(x, h, sizeof(double) * T * H);
        for (int t = 0; t < T; t++)
            ref_rmsnorm(x + t * H, n2, H, eps);
        ref_matmul(x, T, Wg, I, H, g);
        ref_matmul(x, T, Wu, I, H, u);
        for (int i = 0; i < T * I; i++)
            g[i] = g[i] / (1 + exp(-g[i])) * u[i];
        ref_matmul(g, T, Wd, H, I, o);
        for (int i = 0; i < T * H; i++)
            h[i] += o[i];
        free(n1), free(n2), free(qn), free(kn), free(Wq), free(Wk), free(Wv), free(Wo);
        free(Wg), free(Wu), free(Wd);
    }
    double *fn = dense(weights_global(w, G_FINAL_NORM)), *lm = dense(weights_global(w, G_LM_HEAD));
    for (int t = 0; t < T; t++)
        ref_rmsnorm(h + t * H, fn, H, eps);
    ref_matmul(h, T, lm, V, H, logits);
    free(fn), free(lm);
    free(h), free(x), free(q), free(k), free(v), free(a), free(g), free(u), free(o), free(sc);
}

static void check_against_reference(bool fp8) {
    model_weights_t *w = tiny(fp8);
    int V = weights_config(w)->vocab_size;
    enum { T = 12 };
    int32_t ids[T];
    make_tokens(ids, T, V, 7);
    double *ref = malloc(sizeof(double) * T * (size_t)V);
    ref_forward(w, ids, T, ref);
    float *got = malloc(sizeof(float) * T * (size_t)V);
    float *reff = malloc(sizeof(float) * T * (size_t)V);
    for (size_t i = 0; i < (size_t)T * V; i++)
        reff[i] = (float)ref[i];

    backend_t *be = make_backend(w, 2, false);
    seq_t s = {.tokens = ids, .table = {3, 9, 1}};
    seq_t *seqs[] = {&s};
    int n[] = {T};
    step(be, seqs, n, 1, true, got);
    double d = rel_diff(got, reff, (size_t)T * V);
    print_message("%s: max |cpu - double reference| / max |logit| = %.3g\n", fp8 ? "fp8" : "bf16",
                  d);
    assert_true(d < 1e-5);
    /* the logits are not degenerate */
    double spread = 0;
    for (int i = 1; i < V; i++)
        spread = fmax(spread, fabs(ref[i] - ref[0]));
    assert_true(spread > 1e-3);
    backend_destroy(be);
    free(ref), free(got), free(reff);
    weights_destroy(w);
}

static void test_matches_double_reference_bf16(void **state) {
    check_against_reference(false);
}

static void test_matches_double_reference_fp8(void **state) {
    check_against_reference(true);
}

/* --- prefill / chunked prefill / decode --------------------------------------------------- */

static void check_prefill_paths(bool fp8, bool emulate) {
    model_weights_t *w = tiny(fp8);
    int V = weights_config(w)->vocab_size;
    enum { T = 40 };
    int32_t ids[T];
    make_tokens(ids, T, V, 11);
    backend_t *be = make_backend(w, 2, emulate);
    float *one = malloc(sizeof(float) * T * (size_t)V);
    float *chunked = malloc(sizeof(float) * (size_t)V);
    float *decode = malloc(sizeof(float) * T * (size_t)V);

    /* (a) one step, logits of every row */
    seq_t a = {.tokens = ids, .table = {7, 2, 30}};
    seq_t *sa[] = {&a};
    int all[] = {T};
    step(be, sa, all, 1, true, one);

    /* (b) chunks of 16, 16, 8 after a fresh pool, other blocks */
    err_t err;
    assert_int_equal(backend_kv_reserve(be, NB, BS, &err), 0);
    seq_t b = {.tokens = ids, .table = {12, 0, 5}};
    seq_t *sb[] = {&b};
    for (int i = 0; i < 3; i++) {
        int n[] = {i < 2 ? 16 : 8};
        step(be, sb, n, 1, false, chunked);
    }

    /* (c) token by token */
    assert_int_equal(backend_kv_reserve(be, NB, BS, &err), 0);
    seq_t c = {.tokens = ids, .table = {33, 21, 4}};
    seq_t *sc[] = {&c};
    for (int i = 0; i < T; i++) {
        int n[] = {1};
        step(be, sc, n, 1, false, decode + (size_t)i * V);
    }

    double d_chunk = rel_diff(chunked, one + (size_t)(T - 1) * V, (size_t)V);
    double d_dec = rel_diff(decode, one, (size_t)T * V);
    print_message("%s%s: chunked vs one-shot %.3g, decode vs one-shot %.3g (all 40 rows)\n",
                  fp8 ? "fp8" : "bf16", emulate ? " W8A8" : "", d_chunk, d_dec);
    assert_true(d_chunk < 1e-4);
    assert_true(d_dec < 1e-4);
    backend_destroy(be);
    free(one), free(chunked), free(decode);
    weights_destroy(w);
}

static void test_prefill_chunked_decode_agree(void **state) {
    check_prefill_paths(false, false);
}

static void test_prefill_chunked_decode_agree_w8a8(void **state) {
    check_prefill_paths(true, true);
}

/* --- varlen batches ------------------------------------------------------------------------ */

/* Three prompts (40, 23, 70 tokens: 133 in one step, more than the first buffers hold), each
 * alone, then all three in one step, then a mixed step: A and B decode while C is prefilled in
 * a chunk after its cached prefix. Returns the mixed step's logits [3, V]. */
static void varlen_run(const model_weights_t *w, int threads, bool emulate, float *mixed,
                       double *d_together) {
    int V = weights_config(w)->vocab_size;
    int32_t ta[41], tb[24], tc[70];
    make_tokens(ta, 41, V, 1);
    make_tokens(tb, 24, V, 2);
    make_tokens(tc, 70, V, 3);
    backend_t *be = make_backend(w, threads, emulate);
    float *alone = malloc(sizeof(float) * 3 * (size_t)V);
    float *together = malloc(sizeof(float) * 3 * (size_t)V);

    seq_t a = {.tokens = ta, .table = {10, 3, 25}};
    seq_t b = {.tokens = tb, .table = {6, 19}};
    seq_t c = {.tokens = tc, .table = {0, 38, 14, 27, 9}};
    int na[] = {40}, nb[] = {23}, nc[] = {70};
    seq_t *s1[] = {&a}, *s2[] = {&b}, *s3[] = {&c};
    step(be, s1, na, 1, false, alone);
    step(be, s2, nb, 1, false, alone + V);
    step(be, s3, nc, 1, false, alone + 2 * (size_t)V);

    err_t err;
    assert_int_equal(backend_kv_reserve(be, NB, BS, &err), 0);
    a.done = b.done = c.done = 0;
    seq_t *all[] = {&a, &b, &c};
    int n[] = {40, 23, 70};
    step(be, all, n, 3, false, together);
    *d_together = rel_diff(together, alone, 3 * (size_t)V);

    /* C again from a 50-token prefix, A and B decode their next token */
    c.done = 50;
    int n2[] = {1, 1, 20};
    step(be, all, n2, 3, false, mixed);
    backend_destroy(be);
    free(alone), free(together);
}

static void test_varlen_batch_matches_alone(void **state) {
    model_weights_t *w = tiny(false);
    int V = weights_config(w)->vocab_size;
    float *mixed = malloc(sizeof(float) * 3 * (size_t)V);
    double d;
    varlen_run(w, 2, false, mixed, &d);
    print_message("three prompts together vs alone: %.3g\n", d);
    assert_true(d < 1e-4);

    /* the mixed step's rows against each sequence run alone to the same point */
    backend_t *be = make_backend(w, 1, false);
    int32_t ta[41], tc[70];
    make_tokens(ta, 41, V, 1);
    make_tokens(tc, 70, V, 3);
    float *ref = malloc(sizeof(float) * (size_t)V);
    seq_t a = {.tokens = ta, .table = {1, 2, 3}};
    seq_t *sa[] = {&a};
    int n41[] = {41};
    step(be, sa, n41, 1, false, ref);
    assert_true(rel_diff(mixed, ref, (size_t)V) < 1e-4);
    seq_t c = {.tokens = tc, .table = {4, 5, 6, 7, 8}};
    seq_t *scc[] = {&c};
    int n70[] = {70};
    step(be, scc, n70, 1, false, ref);
    double dc = rel_diff(mixed + 2 * (size_t)V, ref, (size_t)V);
    print_message("chunk after cached prefix inside a mixed batch vs alone: %.3g\n", dc);
    assert_true(dc < 1e-4);
    backend_destroy(be);
    free(ref), free(mixed);
    weights_destroy(w);
}

/* Two prompts in one step, then one decodes while the other takes a chunk, then both decode:
 * logits of the three steps, [6, V]. */
static void threads_run(const model_weights_t *w, int threads, bool emulate, float *logits) {
    int V = weights_config(w)->vocab_size;
    int32_t ta[32], tb[31];
    make_tokens(ta, 32, V, 8);
    make_tokens(tb, 31, V, 9);
    backend_t *be = make_backend(w, threads, emulate);
    seq_t a = {.tokens = ta, .table = {4, 17}};
    seq_t b = {.tokens = tb, .table = {22, 8}};
    seq_t *ab[] = {&a, &b};
    int n1[] = {30, 9}, n2[] = {1, 21}, n3[] = {1, 1};
    step(be, ab, n1, 2, false, logits);
    step(be, ab, n2, 2, false, logits + 2 * (size_t)V);
    step(be, ab, n3, 2, false, logits + 4 * (size_t)V);
    backend_destroy(be);
}

static void test_thread_count_bit_identical(void **state) {
    for (int fp8 = 0; fp8 < 2; fp8++) {
        model_weights_t *w = tiny(fp8);
        size_t V = (size_t)weights_config(w)->vocab_size;
        float *m1 = malloc(sizeof(float) * 6 * V), *m2 = malloc(sizeof(float) * 6 * V);
        threads_run(w, 1, fp8, m1);
        threads_run(w, fp8 ? 3 : 2, fp8, m2);
        assert_memory_equal(m1, m2, sizeof(float) * 6 * V);
        free(m1), free(m2);
        weights_destroy(w);
    }
}

/* The fast paths (the default where the CPU has AVX2) against the scalar reference kernels:
 * the same logits bit for bit, BF16 and FP8 with W8A8, prefill, chunks and decode. */
static void test_fast_paths_equal_reference(void **state) {
    g_precision = CPU_MM_HIGHEST;
    for (int fp8 = 0; fp8 < 2; fp8++) {
        model_weights_t *w = tiny(fp8);
        size_t V = (size_t)weights_config(w)->vocab_size;
        float *ref = malloc(sizeof(float) * 6 * V), *fast = malloc(sizeof(float) * 6 * V);
        g_reference = true;
        threads_run(w, 1, fp8, ref);
        g_reference = false;
        threads_run(w, 2, fp8, fast);
        assert_memory_equal(fast, ref, sizeof(float) * 6 * V);
        free(ref), free(fast);
        weights_destroy(w);
    }
}

/* cpu-matmul-precision high and medium (the bf16 kernels, where the CPU has AVX512-BF16): the
 * logits within their tolerance of the f32 reference's (high: 16-bit activations, observed
 * ~6e-6 relative; medium: bf16 activations, observed ~4e-3), BF16 and FP8 weights with f32
 * activations (under W8A8 emulation any change of rounding moves logits by the quantization
 * noise: test_w8a8_emulation_close_not_equal), and still the same bits for every thread count and
 * whether sequences run alone or batched. Then live: `configure` switches the precision between
 * two steps and back. */
static void test_bf16_precisions(void **state) {
    g_precision = CPU_MM_HIGHEST;
    if (!cpu_bf16_supported()) skip();
    static const double tolerance[] = {[CPU_MM_HIGH] = 1e-4, [CPU_MM_MEDIUM] = 3e-2};
    for (int fp8 = 0; fp8 < 2; fp8++) {
        model_weights_t *w = tiny(fp8);
        size_t V = (size_t)weights_config(w)->vocab_size;
        float *ref = malloc(sizeof(float) * 6 * V), *m1 = malloc(sizeof(float) * 6 * V),
              *m2 = malloc(sizeof(float) * 6 * V);
        threads_run(w, 2, false, ref);
        for (int p = CPU_MM_HIGH; p <= CPU_MM_MEDIUM; p++) {
            g_precision = p;
            threads_run(w, 1, false, m1);
            threads_run(w, 3, false, m2);
            assert_memory_equal(m1, m2, sizeof(float) * 6 * V);
            double d = rel_diff(m1, ref, 6 * V);
            print_message("%s, precision %s: %.3g from f32\n", fp8 ? "fp8" : "bf16",
                          p == CPU_MM_HIGH ? "high" : "medium", d);
            assert_true(d > 0 && d < tolerance[p]);
            float *mixed = malloc(sizeof(float) * 3 * V);
            double together;
            varlen_run(w, 2, fp8, mixed, &together); /* W8A8 too */
            assert_true(together == 0);
            free(mixed);
        }
        g_precision = CPU_MM_HIGHEST;
        free(ref), free(m1), free(m2);
        weights_destroy(w);
    }

    /* live: one backend, made at high, switched to highest (the reference's bits), then medium */
    model_weights_t *w = tiny(false);
    int V = weights_config(w)->vocab_size;
    enum { T = 19 };
    int32_t ids[T];
    make_tokens(ids, T, V, 11);
    float *f32 = malloc(sizeof(float) * (size_t)V), *got = malloc(sizeof(float) * (size_t)V);
    backend_t *be = make_backend(w, 2, false);
    seq_t s = {.tokens = ids, .table = {1, 2}};
    seq_t *ss[] = {&s};
    int n[] = {T};
    step(be, ss, n, 1, false, f32);
    g_precision = CPU_MM_HIGH;
    backend_t *live = make_backend(w, 2, false);
    g_precision = CPU_MM_HIGHEST;
    static const int order[] = {CPU_MM_HIGH, CPU_MM_HIGHEST, CPU_MM_MEDIUM, CPU_MM_HIGHEST};
    for (int i = 0; i < 4; i++) {
        backend_options_t opts = {.cpu_matmul_precision = order[i]};
        if (i > 0) live->ops->configure(live, &opts);
        s.done = 0;
        step(live, ss, n, 1, false, got);
        bool same = memcmp(got, f32, sizeof(float) * (size_t)V) == 0;
        assert_true(same == (order[i] == CPU_MM_HIGHEST));
    }
    char buf[160];
    live->ops->describe(live, buf, sizeof buf);
    assert_non_null(strstr(buf, ", f32"));
    backend_options_t medium = {.cpu_matmul_precision = CPU_MM_MEDIUM};
    live->ops->configure(live, &medium);
    live->ops->describe(live, buf, sizeof buf);
    assert_non_null(strstr(buf, "matmul medium (bf16, AVX512-BF16)"));
    backend_destroy(be), backend_destroy(live);
    free(f32), free(got);
    weights_destroy(w);
}

/* W8A8 moves logits by the quantization noise (a few %) but not more. There is no double
 * reference for it: quantization is discontinuous, so an activation a few ulps to the other side
 * of a rounding boundary flips one e4m3 value, and that flip then moves every later quantized
 * input by as much as the quantization noise itself (observed: a double W8A8 forward agreed to
 * 2e-7 up to the first flip, then drifted 2-5%). test_cpu_ops checks the quantizer and the
 * GEMM inputs exactly instead. */
static void test_w8a8_emulation_close_not_equal(void **state) {
    model_weights_t *w = tiny(true);
    int V = weights_config(w)->vocab_size;
    enum { T = 24 };
    int32_t ids[T];
    make_tokens(ids, T, V, 5);
    float *off = malloc(sizeof(float) * (size_t)V), *on = malloc(sizeof(float) * (size_t)V);
    for (int e = 0; e < 2; e++) {
        backend_t *be = make_backend(w, 2, e);
        seq_t s = {.tokens = ids, .table = {1, 2}};
        seq_t *ss[] = {&s};
        int n[] = {T};
        step(be, ss, n, 1, false, e ? on : off);
        backend_destroy(be);
    }
    double d = rel_diff(on, off, (size_t)V);
    print_message("W8A8 emulation vs f32 activations: %.3g\n", d);
    assert_true(d > 1e-4);
    assert_true(d < 0.1);
    free(off), free(on);
    weights_destroy(w);
}

/* --- errors and misc -------------------------------------------------------------------------- */

/* A hybrid model's KV block holds its softmax-attention layers only: tiny-qwen3.5's 2 of 8 (the
 * Gated DeltaNet layers keep recurrent state slots instead), a quarter of a block over every
 * layer. */
static void test_hybrid_kv_block(void **state) {
    model_weights_t *w = tu_fixture_weights("tiny-qwen3.5");
    err_t err;
    const model_config_t *c = weights_config(w);
    int attn = c->n_layers - model_count_attn(c, ATTN_LINEAR);
    assert_true(attn > 0 && attn < c->n_layers);
    backend_options_t opts = {.n_threads = 1};
    backend_t *be;
    assert_int_equal(cpu_backend_ops.create(&opts, w, &be, &err), 0);
    assert_int_equal(be->ops->kv_block_bytes(be, 16),
                     2 * (size_t)attn * 16 * (size_t)model_kv_dim(c) * sizeof(float));
    assert_int_equal(be->ops->kv_reserve(be, 4, 16, &err), 0);
    be->ops->destroy(be);
    weights_destroy(w);
}

static void test_errors_and_describe(void **state) {
    model_weights_t *w = tiny(false);
    const model_config_t *c = weights_config(w);
    backend_options_t opts = {.n_threads = 2};
    backend_t *be;
    err_t err;
    assert_int_equal(cpu_backend_ops.create(&opts, w, &be, &err), 0);
    char buf[128];
    be->ops->describe(be, buf, sizeof buf);
    assert_string_equal(buf, "cpu, 2 threads, f32 (W8A8 emulation off)");
    assert_int_equal(be->ops->kv_block_bytes(be, 16),
                     2 * (size_t)c->n_layers * 16 * (size_t)model_kv_dim(c) * sizeof(float));

    int32_t ids[2] = {1, 2}, pos[2] = {0, 1}, qs[2] = {0, 2}, ctx[1] = {2}, table[1] = {0};
    int32_t rows[1] = {1};
    int64_t slots[2] = {0, 1};
    be_batch_t b = {.n_tokens = 2,
                    .n_seqs = 1,
                    .token_ids = ids,
                    .positions = pos,
                    .slot_mapping = slots,
                    .query_start = qs,
                    .context_len = ctx,
                    .block_tables = table,
                    .block_table_stride = 1,
                    .n_logits = 1,
                    .logit_rows = rows};
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    assert_int_equal(backend_forward(be, &b, logits, &err), -1);
    assert_non_null(strstr(err.msg, "kv_reserve"));
    assert_int_equal(backend_kv_reserve(be, 0, 16, &err), -1);
    assert_int_equal(backend_kv_reserve(be, 4, 16, &err), 0);
    assert_int_equal(backend_forward(be, &b, logits, &err), 0);

    ids[1] = c->vocab_size;
    assert_int_equal(backend_forward(be, &b, logits, &err), -1);
    assert_non_null(strstr(err.msg, "out of range"));
    ids[1] = 2;
    slots[1] = 4 * 16;
    assert_int_equal(backend_forward(be, &b, logits, &err), -1);
    assert_non_null(strstr(err.msg, "out of range"));
    slots[1] = 1;
    table[0] = 4;
    assert_int_equal(backend_forward(be, &b, logits, &err), -1);
    assert_non_null(strstr(err.msg, "out of range"));
    table[0] = 0;
    rows[0] = 2;
    assert_int_equal(backend_forward(be, &b, logits, &err), -1);
    rows[0] = 1;
    assert_int_equal(backend_forward(be, &b, logits, &err), 0);
    backend_destroy(be);
    backend_destroy(NULL);

    opts.n_threads = 0;
    opts.emulate_fp8_activations = true;
    assert_int_equal(cpu_backend_ops.create(&opts, w, &be, &err), 0);
    be->ops->describe(be, buf, sizeof buf);
    assert_non_null(strstr(buf, "W8A8 emulation on"));
    backend_destroy(be);
    opts.n_threads = -1;
    assert_int_equal(cpu_backend_ops.create(&opts, w, &be, &err), -1);
    free(logits);
    weights_destroy(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_double_reference_bf16),
        cmocka_unit_test(test_matches_double_reference_fp8),
        cmocka_unit_test(test_prefill_chunked_decode_agree),
        cmocka_unit_test(test_prefill_chunked_decode_agree_w8a8),
        cmocka_unit_test(test_varlen_batch_matches_alone),
        cmocka_unit_test(test_bf16_precisions),
        cmocka_unit_test(test_thread_count_bit_identical),
        cmocka_unit_test(test_fast_paths_equal_reference),
        cmocka_unit_test(test_w8a8_emulation_close_not_equal),
        cmocka_unit_test(test_errors_and_describe),
        cmocka_unit_test(test_hybrid_kv_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

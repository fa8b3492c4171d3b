/*
 * cpu_ops: each kernel of the CPU backend against a naive double-precision reference on random
 * inputs (weights decoded here with the formulas of models.md 2.3, independently of dtype.c),
 * plus hand-checked values for RoPE and the W8A8 quantizer, and paged attention through a
 * shuffled block table against contiguous softmax attention. The vector fast paths (cpu_fast.h)
 * against these reference kernels, bit for bit, on ragged shapes, every dtype and odd GQA groups.
 * The bf16 GEMMs (cpu_bf16.h, where the CPU has AVX512-BF16) against the exact products within
 * their stated bounds, and invariant, bit for bit, to the batch and to the rows' split.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "cpu/cpu_bf16.h"
#include "cpu/cpu_fast.h"
#include "cpu/cpu_ops.h"
#include "cpu/cpu_pool.h"

static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = tu_randf() * scale;
}

/* --- independent decoders ------------------------------------------------------------------ */

static double bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double f16_value(uint16_t b) {
    int s = b >> 15, e = (b >> 10) & 31, m = b & 1023;
    double v = e == 0 ? ldexp(m / 1024.0, -14) : ldexp(1.0 + m / 1024.0, e - 15);
    return s ? -v : v;
}

static double e4m3_value(uint8_t b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? (m / 8.0) * ldexp(1.0, -6) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
    return s ? -v : v;
}

/* --- matmul --------------------------------------------------------------------------------- */

typedef struct mm_case {
    wtensor_t w;
    void *data;
    float *scales;
    double *dense; /* [N, K] exact values of W */
} mm_case_t;

static mm_case_t make_weight(dtype_t dt, int N, int K, int block) {
    mm_case_t c = {0};
    c.w.dtype = dt;
    c.w.rows = N;
    c.w.cols = K;
    c.dense = malloc(sizeof(double) * (size_t)N * (size_t)K);
    size_t n = (size_t)N * (size_t)K;
    if (dt == DT_F32) {
        float *d = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            c.dense[i] = d[i] = tu_randf() * 0.1f;
        c.data = d;
    } else if (dt == DT_BF16) {
        uint16_t *d = malloc(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) {
            float f = tu_randf() * 0.1f;
            uint32_t u;
            memcpy(&u, &f, sizeof u);
            d[i] = (uint16_t)(u >> 16);
            c.dense[i] = bf16_value(d[i]);
        }
        c.data = d;
    } else if (dt == DT_F16) {
        uint16_t *d = malloc(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) {
            /* exponents 5..17: normal values from ~1e-3 to ~8 */
            d[i] = (uint16_t)((tu_rand32() & 0x8000u) | ((5u + tu_rand32() % 13u) << 10) |
                              (tu_rand32() & 1023u));
            c.dense[i] = f16_value(d[i]);
        }
        c.data = d;
    } else {
        uint8_t *d = malloc(n);
        int sr = (N + block - 1) / block, sc = (K + block - 1) / block;
        c.scales = malloc(sizeof(float) * (size_t)(sr * sc));
        for (int i = 0; i < sr * sc; i++)
            c.scales[i] = (0.5f + (tu_randf() + 1.0f)) * 1e-3f;
        for (size_t i = 0; i < n; i++) {
            uint8_t b;
            do
                b = (uint8_t)tu_rand32();
            while ((b & 0x7f) == 0x7f); /* no NaN */
            d[i] = b;
            size_t r = i / (size_t)K, k = i % (size_t)K;
            c.dense[i] =
                e4m3_value(b) * c.scales[(r / (size_t)block) * (size_t)sc + k / (size_t)block];
        }
        c.data = d;
        c.w.scale_inv = c.scales;
        c.w.scale_rows = sr;
        c.w.scale_cols = sc;
        c.w.block_n = block;
        c.w.block_k = block;
    }
    c.w.data = c.data;
    return c;
}

static void free_weight(mm_case_t *c) {
    free(c->data);
    free(c->scales);
    free(c->dense);
}

static void check_matmul(dtype_t dt, int T, int N, int K, int block) {
    mm_case_t c = make_weight(dt, N, K, block);
    float *x = malloc(sizeof(float) * (size_t)T * (size_t)K);
    float *y = malloc(sizeof(float) * (size_t)T * (size_t)N);
    float *y1 = malloc(sizeof(float) * (size_t)N);
    float *wbuf = malloc(sizeof(float) * CPU_MM_ROWS * (size_t)K);
    fill(x, (size_t)T * (size_t)K, 1.0f);
    cpu_matmul_rows(x, T, &c.w, 0, N, y, N, wbuf);

    /* dequantized rows are exact */
    float *row = malloc(sizeof(float) * (size_t)K);
    for (int n = 0; n < N; n += 37) {
        cpu_dequant_rows(&c.w, n, 1, row);
        for (int k = 0; k < K; k++)
            assert_true((double)row[k] == (float)c.dense[(size_t)n * K + k]);
    }
    free(row);

    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)x[(size_t)t * K + k] * c.dense[(size_t)n * K + k];
                ref += p;
                mag += fabs(p);
            }
            double err = fabs((double)y[(size_t)t * N + n] - ref);
            if (err > 1e-6 * mag + 1e-30) fail_msg("t %d n %d: %g vs %g", t, n, y[t * N + n], ref);
        }

    /* each token alone, over a ragged row range, gives bit-identical rows */
    for (int t = 0; t < T; t++) {
        cpu_matmul_rows(x + (size_t)t * K, 1, &c.w, 3, N - 1, y1, N, wbuf);
        assert_memory_equal(y1 + 3, y + (size_t)t * N + 3, sizeof(float) * (size_t)(N - 4));
    }
    free(x);
    free(y);
    free(y1);
    free(wbuf);
    free_weight(&c);
}

static void test_matmul_f32(void **state) {
    check_matmul(DT_F32, 5, 37, 300, 0);
}

static void test_matmul_bf16(void **state) {
    check_matmul(DT_BF16, 7, 64, 256, 0);
    check_matmul(DT_BF16, 1, 9, 13, 0);
}

static void test_matmul_f16(void **state) {
    check_matmul(DT_F16, 3, 21, 130, 0);
}

static void test_matmul_fp8_ragged(void **state) {
    check_matmul(DT_F8_E4M3, 5, 200, 300, 128);
}

/* --- bf16 GEMMs: within their bounds, batch- and split-invariant ----------------------------- */

/* y = x W^T on the bf16 kernels, rows [n0, n1), the rows in two pieces split at `cut` when cut
 * is inside (what two threads do). */
static void bf16_matmul(const float *x, int T, int passes, const wtensor_t *w, int64_t n0,
                        int64_t n1, int64_t cut, float *y, int64_t ldy) {
    int64_t K = w->cols, sf = cpu_bf16_scratch_floats(K);
    uint16_t *xb = malloc(sizeof(uint16_t) * (size_t)cpu_bf16_x_elems(T, K, passes));
    float *scratch = malloc(sizeof(float) * (size_t)sf);
    cpu_bf16_split(x, T, K, passes, xb);
    if (cut > n0 && cut < n1) {
        cpu_bf16_matmul_rows(x, xb, T, passes, w, n0, cut, y, ldy, scratch);
        cpu_bf16_matmul_rows(x, xb, T, passes, w, cut, n1, y, ldy, scratch);
    } else {
        cpu_bf16_matmul_rows(x, xb, T, passes, w, n0, n1, y, ldy, scratch);
    }
    free(xb);
    free(scratch);
}

/* dense: W's exact values (row n at n * ldd). Each output within its bound of the exact product:
 * the activations' rounding (2^-8 relative with one pass, 2^-16 with two) plus the f32 sums' (16
 * lanes of K / 16 terms, then the tree: (K / 16 + 8) 2^-24, doubled), times sum |x w|. */
static void check_bf16_matmul(const wtensor_t *w, const double *dense, int64_t ldd) {
    int N = (int)w->rows, K = (int)w->cols;
    enum { TMAX = 13 };
    float *x = malloc(sizeof(float) * TMAX * (size_t)K);
    float *y = malloc(sizeof(float) * TMAX * (size_t)N);
    float *y1 = malloc(sizeof(float) * (size_t)N);
    fill(x, TMAX * (size_t)K, 1.0f);
    x[3] = 1e-3f; /* a small value beside large ones: its rounding error is its own */
    assert_true(cpu_bf16_takes(w));
    for (int passes = 1; passes <= 2; passes++) {
        double rel = ldexp(1.0, passes == 1 ? -8 : -16) + ldexp((double)K / 16 + 8, -23);
        for (int T = 1; T <= TMAX; T += T < 7 ? 1 : 6) {
            memset(y, 0xff, sizeof(float) * TMAX * (size_t)N);
            bf16_matmul(x, T, passes, w, 0, N, N / 2 + 1, y, N);
            for (int t = 0; t < T; t++)
                for (int n = 0; n < N; n++) {
                    double ref = 0, mag = 0;
                    for (int k = 0; k < K; k++) {
                        double p = (double)x[(size_t)t * K + k] * dense[(size_t)n * ldd + k];
                        ref += p;
                        mag += fabs(p);
                    }
                    double got = y[(size_t)t * N + n];
                    if (!(fabs(got - ref) <= rel * mag))
                        fail_msg("passes %d dtype %d N %d K %d T %d: y[%d][%d] = %.9g, exact %.9g "
                                 "(bound %.3g)",
                                 passes, w->dtype, N, K, T, t, n, got, ref, rel * mag);
                }
            /* each token alone, over a ragged row range in one piece, gives the same bits */
            for (int t = 0; t < T; t++) {
                bf16_matmul(x + (size_t)t * K, 1, passes, w, 1, N, 0, y1, N);
                if (memcmp(y1 + 1, y + (size_t)t * N + 1, sizeof(float) * (size_t)(N - 1)))
                    fail_msg("passes %d dtype %d N %d K %d T %d: token %d alone differs", passes,
                             w->dtype, N, K, T, t);
            }
        }
    }
    free(x);
    free(y);
    free(y1);
}

static void test_bf16_matmul_within_bounds(void **state) {
    if (!cpu_bf16_supported()) skip();
    static const struct {
        dtype_t dt;
        int N, K, block;
    } cases[] = {
        {DT_BF16, 64, 256, 0},       {DT_BF16, 9, 13, 0},        {DT_BF16, 103, 1064, 0},
        {DT_F8_E4M3, 200, 300, 128}, {DT_F8_E4M3, 50, 256, 128}, {DT_F8_E4M3, 19, 96, 32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mm_case_t c = make_weight(cases[i].dt, cases[i].N, cases[i].K, cases[i].block);
        check_bf16_matmul(&c.w, c.dense, c.w.cols);
        free_weight(&c);
    }
    /* views (tensor-parallel shards): rows 128.. of an FP8 tensor, columns 0..256 of 300 (its
     * rows ld apart, its scales a scale row apart); columns 40..1000 of a BF16 one */
    err_t err;
    mm_case_t c = make_weight(DT_F8_E4M3, 300, 300, 128);
    wtensor_t view;
    assert_int_equal(wtensor_slice(&c.w, "fp8", 128, 172, 0, 256, &view, &err), 0);
    check_bf16_matmul(&view, c.dense + 128 * 300, 300);
    free_weight(&c);
    c = make_weight(DT_BF16, 70, 1040, 0);
    assert_int_equal(wtensor_slice(&c.w, "bf16", 0, 70, 40, 960, &view, &err), 0);
    check_bf16_matmul(&view, c.dense + 40, 1040);
    free_weight(&c);
    /* what the bf16 kernels leave to the f32 paths */
    c = make_weight(DT_F8_E4M3, 19, 96, 12);
    assert_false(cpu_bf16_takes(&c.w));
    free_weight(&c);
    c = make_weight(DT_F32, 8, 64, 0);
    assert_false(cpu_bf16_takes(&c.w));
    free_weight(&c);
    wtensor_t lazy = {.dtype = DT_BF16, .rows = 45, .cols = 136, .dummy = true, .dummy_seed = 7};
    assert_false(cpu_bf16_takes(&lazy));
}

/* The split: pass 0 is x rounded to nearest even bf16, pass 0 + pass 1 is x to 16 bits, the
 * padding to 32 columns is zero. */
static void test_bf16_split(void **state) {
    if (!cpu_bf16_supported()) skip();
    enum { T = 3, K = 45, KP = 64 };
    float x[T * K];
    fill(x, T * K, 3.0f);
    x[0] = 1.0f + 0x1p-8f;               /* a tie: to even, 1.0 */
    x[1] = 1.0f + 0x1p-8f + 0x1p-7f;     /* a tie: to even, 1 + 2^-6 */
    x[2] = -(1.0f + 0x1p-8f + 0x1p-20f); /* above the tie: away from 1 */
    uint16_t xb[T * 2 * KP];
    memset(xb, 0xff, sizeof xb);
    cpu_bf16_split(x, T, K, 2, xb);
    assert_int_equal(xb[0], 0x3f80);
    assert_int_equal(xb[1], 0x3f81 + 1);
    assert_int_equal(xb[2], 0xbf81);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < KP; k++) {
            double hi = bf16_value(xb[(t * 2) * KP + k]), lo = bf16_value(xb[(t * 2 + 1) * KP + k]);
            if (k >= K) {
                assert_true(hi == 0 && lo == 0);
                continue;
            }
            double v = x[t * K + k];
            assert_true(fabs(v - hi) <= ldexp(fabs(v), -8));
            assert_true(fabs(v - hi - lo) <= ldexp(fabs(v), -16));
        }
}

/* --- fast GEMM == reference GEMM, bit for bit --------------------------------------------- */

/* For T = 1..9 tokens (the register path below 4, the panels from 4) and ragged row ranges,
 * with a full panel scratch and with the smallest one (3-row panels). */
static void check_fast_matmul(wtensor_t *w) {
    int N = (int)w->rows, K = (int)w->cols;
    enum { TMAX = 9 };
    int64_t big = cpu_fast_scratch_floats(K), small = (int64_t)CPU_MM_ROWS * K;
    float *x = malloc(sizeof(float) * TMAX * (size_t)K);
    float *ref = malloc(sizeof(float) * TMAX * (size_t)N);
    float *got = malloc(sizeof(float) * TMAX * (size_t)N);
    float *scratch = malloc(sizeof(float) * (size_t)big);
    fill(x, TMAX * (size_t)K, 1.0f);
    for (int T = 1; T <= TMAX; T++) {
        cpu_matmul_rows(x, T, w, 0, N, ref, N, scratch);
        for (int pass = 0; pass < 2; pass++) {
            int64_t n0 = pass ? 1 : 0, n1 = pass ? N - 2 : N;
            memset(got, 0xff, sizeof(float) * TMAX * (size_t)N);
            cpu_fast_matmul_rows(x, T, w, n0, n1, got, N, scratch, pass ? small : big);
            for (int t = 0; t < T; t++)
                if (memcmp(got + (size_t)t * N + n0, ref + (size_t)t * N + n0,
                           sizeof(float) * (size_t)(n1 - n0)))
                    fail_msg("dtype %d N %d K %d T %d rows [%d, %d): token %d differs", w->dtype, N,
                             K, T, (int)n0, (int)n1, t);
        }
    }
    free(x);
    free(ref);
    free(got);
    free(scratch);
}

static void test_fast_matmul_equals_reference(void **state) {
    if (!cpu_fast_supported()) skip();
    static const struct {
        dtype_t dt;
        int N, K, block;
    } cases[] = {
        {DT_F32, 37, 300, 0},        {DT_F32, 8, 64, 0},         {DT_BF16, 64, 256, 0},
        {DT_BF16, 9, 13, 0},         {DT_BF16, 103, 1024, 0},    {DT_F16, 21, 130, 0},
        {DT_F8_E4M3, 200, 300, 128}, {DT_F8_E4M3, 50, 256, 128}, {DT_F8_E4M3, 19, 96, 12},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mm_case_t c = make_weight(cases[i].dt, cases[i].N, cases[i].K, cases[i].block);
        check_fast_matmul(&c.w);
        free_weight(&c);
    }
    /* lazy dummy weights (generated as read): the panels' dequantization */
    wtensor_t lazy = {.dtype = DT_BF16, .rows = 45, .cols = 136, .dummy = true, .dummy_seed = 7};
    check_fast_matmul(&lazy);
}

/* --- RMSNorm -------------------------------------------------------------------------------- */

static void test_rmsnorm(void **state) {
    enum { N = 300 };
    float x[N], w[N], y[N];
    fill(x, N, 3.0f);
    fill(w, N, 2.0f);
    double ss = 0;
    for (int i = 0; i < N; i++)
        ss += (double)x[i] * x[i];
    double inv = 1.0 / sqrt(ss / N + 1e-6);
    cpu_rmsnorm(x, w, N, 1e-6f, y);
    for (int i = 0; i < N; i++)
        assert_float_equal(y[i], w[i] * x[i] * inv, 1e-5 * fabs(w[i]));
    /* in place gives the same */
    float z[N];
    memcpy(z, x, sizeof z);
    cpu_rmsnorm(z, w, N, 1e-6f, z);
    assert_memory_equal(z, y, sizeof z);
    /* eps dominates a zero vector: output 0, not NaN */
    memset(z, 0, sizeof z);
    cpu_rmsnorm(z, w, N, 1e-6f, z);
    for (int i = 0; i < N; i++)
        assert_true(z[i] == 0.0f);
}

/* --- RoPE ----------------------------------------------------------------------------------- */

/* inv_freq for D 128, theta 1e6 as transformers computes it (torch 2.x, CPU, f32):
 *   1.0 / (1e6 ** (torch.arange(0, 128, 2, dtype=torch.int64).float() / 128))
 * torch's vectorized pow is not always correctly rounded, so 1 ulp of difference is allowed
 * (it happens for one of the 64: j = 37). */
static const uint32_t torch_inv_freq[64] = {
    0x3f800000u, 0x3f4e4badu, 0x3f263de0u, 0x3f05f6efu, 0x3ed7e89bu, 0x3eadfcffu, 0x3e8c3504u,
    0x3e61f835u, 0x3e361887u, 0x3e12bd91u, 0x3dec7fd6u, 0x3dbe94c6u, 0x3d99940du, 0x3d778513u,
    0x3d47763fu, 0x3d20bc1du, 0x3d0186e3u, 0x3cd0c1a8u, 0x3ca8398bu, 0x3c879008u, 0x3c5a7bf2u,
    0x3c301052u, 0x3c0de12du, 0x3be4aa46u, 0x3bb8449cu, 0x3b947daeu, 0x3b6f520eu, 0x3b40dac5u,
    0x3b1b690du, 0x3afa78f0u, 0x3ac9d75cu, 0x3aa2a6f7u, 0x3a83126fu, 0x3a533f28u, 0x3a2a3b44u,
    0x3a092e02u, 0x39dd1725u, 0x39b229fbu, 0x398f9272u, 0x39676492u, 0x393a7753u, 0x39164324u,
    0x38f22ce2u, 0x38c327b5u, 0x389d43a4u, 0x387d75d4u, 0x384c3fbeu, 0x382497abu, 0x3804a2b2u,
    0x37d5c441u, 0x37ac431du, 0x378ad0edu, 0x375fba4fu, 0x37344a0eu, 0x371148e3u, 0x36ea2732u,
    0x36bcb0c1u, 0x36980e02u, 0x36751070u, 0x36457babu, 0x361f23e4u, 0x36003decu, 0x35ceaf79u,
    0x35a68e4cu,
};

static void test_rope_inv_freq(void **state) {
    float inv[64];
    cpu_rope_inv_freq(128, 1e6, inv);
    int exact = 0;
    for (int j = 0; j < 64; j++) {
        uint32_t u;
        memcpy(&u, &inv[j], sizeof u);
        int64_t ulps = (int64_t)u - (int64_t)torch_inv_freq[j];
        if (ulps < -1 || ulps > 1)
            fail_msg("inv_freq[%d] = %08x, torch %08x", j, u, torch_inv_freq[j]);
        exact += ulps == 0;
    }
    assert_true(exact >= 62);
}

static void test_rope_known_rotation(void **state) {
    enum { D = 8, HALF = D / 2 };
    float inv[HALF], cs[HALF], sn[HALF];
    cpu_rope_inv_freq(D, 10000.0, inv);
    /* theta 10000, D 8: inv_freq = 1, 0.1, 0.01, 0.001 */
    const double expect[HALF] = {1, 0.1, 0.01, 0.001};
    for (int j = 0; j < HALF; j++)
        assert_float_equal(inv[j], expect[j], 1e-7 * expect[j] + 1e-9);

    /* position 0 is the identity */
    float x[D] = {1, 2, 3, 4, 5, 6, 7, 8}, x0[D];
    memcpy(x0, x, sizeof x);
    cpu_rope_cos_sin(0, inv, HALF, cs, sn);
    cpu_rope_apply(x, D, cs, sn);
    assert_memory_equal(x, x0, sizeof x);

    /* position 3: pair (0, 4) rotates by 3 rad, pair (1, 5) by 0.3: the unit vector e_0 goes
     * to (cos 3, 0, 0, 0, sin 3, ...), and e_5 (the second half of pair 1) to (-sin .3, cos .3) */
    cpu_rope_cos_sin(3, inv, HALF, cs, sn);
    float e0[D] = {1, 0, 0, 0, 0, 0, 0, 0}, e5[D] = {0, 0, 0, 0, 0, 1, 0, 0};
    cpu_rope_apply(e0, D, cs, sn);
    cpu_rope_apply(e5, D, cs, sn);
    assert_float_equal(e0[0], cos(3.0), 1e-6);
    assert_float_equal(e0[4], sin(3.0), 1e-6);
    assert_float_equal(e5[1], -sin(0.3), 1e-6);
    assert_float_equal(e5[5], cos(0.3), 1e-6);
    for (int i = 0; i < D; i++) {
        if (i != 0 && i != 4) assert_true(e0[i] == 0.0f);
        if (i != 1 && i != 5) assert_true(e5[i] == 0.0f);
    }

    /* a rotation keeps the norm, at a large position too */
    float v[128], inv128[64], c128[64], s128[64];
    fill(v, 128, 1.0f);
    double n0 = 0, n1 = 0;
    for (int i = 0; i < 128; i++)
        n0 += (double)v[i] * v[i];
    cpu_rope_inv_freq(128, 1e6, inv128);
    cpu_rope_cos_sin(40000, inv128, 64, c128, s128);
    cpu_rope_apply(v, 128, c128, s128);
    for (int i = 0; i < 128; i++)
        n1 += (double)v[i] * v[i];
    assert_float_equal(n1, n0, 1e-5 * n0);
}

/* --- W8A8 quantizer -------------------------------------------------------------------------- */

static void test_quant_fp8_hand(void **state) {
    /* group of 4 with amax 448: s = 1, so the outputs are the e4m3 values themselves.
     * 152 is the tie between 144 (mantissa 1) and 160 (mantissa 2): even -> 160.
     * 136 is the tie between 128 (m 0) and 144 (m 1): even -> 128.
     * -0.001 is above half the smallest subnormal 2^-9: -> -2^-9. */
    float x[4] = {448.0f, 152.0f, 136.0f, -0.001f}, y[4];
    cpu_quant_fp8_rows(x, 1, 4, 4, y);
    assert_true(y[0] == 448.0f);
    assert_true(y[1] == 160.0f);
    assert_true(y[2] == 128.0f);
    assert_true(y[3] == -0x1p-9f);

    /* amax 1: s = 1/448; 0.3 -> 134.4 -> 128; 0.34 -> 152.32 -> 160; -1 -> -448 (saturation) */
    float a[4] = {1.0f, 0.3f, 0.34f, -1.0f}, b[4];
    cpu_quant_fp8_rows(a, 1, 4, 4, b);
    float s = 1.0f / 448.0f;
    assert_true(b[1] == 128.0f * s);
    assert_true(b[2] == 160.0f * s);
    assert_true(b[3] == -448.0f * s);
    assert_float_equal(b[0], 1.0, 1e-6);

    /* the 1e-10 floor: a group of 1e-12 gets s = 1e-10/448, so x/s = 4.48 -> 4.5 (no eps would
     * give s = 1e-12/448 and an exact 1e-12); an all-zero group stays zero, not NaN */
    float t[8] = {1e-12f, 0, 0, 0, 0, 0, 0, 0}, u[8];
    cpu_quant_fp8_rows(t, 1, 8, 4, u);
    float s_eps = 1e-10f / 448.0f;
    assert_true(u[0] == 4.5f * s_eps);
    for (int i = 1; i < 8; i++)
        assert_true(u[i] == 0.0f);

    /* ragged groups: K 6, group 4: columns 4..5 have their own scale (amax 0.5) */
    float r[12] = {100, 1, 1, 1, 0.5f, 0.25f, /* row 2 */ 1, 1, 1, 1, 1, 1}, q[12];
    cpu_quant_fp8_rows(r, 2, 6, 4, q);
    assert_true(q[4] == 448.0f * (0.5f / 448.0f));
    assert_true(q[5] == 224.0f * (0.5f / 448.0f));
    /* 1/(100/448) = 4.48 -> 4.5 in the first group of row 1 */
    assert_true(q[1] == 4.5f * (100.0f / 448.0f));
    for (int i = 6; i < 12; i++)
        assert_true(q[i] == 448.0f * (1.0f / 448.0f));

    /* in place, and the group max always maps to +-448 * s */
    float big[256];
    tu_rand_seed(99);
    fill(big, 256, 1000.0f);
    float ref[256];
    cpu_quant_fp8_rows(big, 2, 128, 128, ref);
    cpu_quant_fp8_rows(big, 2, 128, 128, big);
    assert_memory_equal(big, ref, sizeof big);
    float src[256];
    tu_rand_seed(99);
    fill(src, 256, 1000.0f);
    for (int g = 0; g < 2; g++) {
        float amax = 0, omax = 0;
        for (int i = 0; i < 128; i++) {
            amax = fmaxf(amax, fabsf(src[g * 128 + i]));
            omax = fmaxf(omax, fabsf(ref[g * 128 + i]));
        }
        assert_true(omax == 448.0f * (amax / 448.0f));
    }
}

/* The backend's GEMM input: quantized per w->block_k columns only for FP8 weights under
 * emulation, and the GEMM of that input matches a double GEMM of the quantized values. */
static void test_linear_input(void **state) {
    enum { T = 3, N = 200, K = 300 };
    mm_case_t f8 = make_weight(DT_F8_E4M3, N, K, 128);
    mm_case_t bf = make_weight(DT_BF16, N, K, 0);
    static float x[T * K], scratch[T * K], expect[T * K], y[T * N], wbuf[CPU_MM_ROWS * K];
    fill(x, T * K, 4.0f);
    assert_ptr_equal(cpu_linear_input(x, T, &f8.w, false, scratch), x);
    assert_ptr_equal(cpu_linear_input(x, T, &bf.w, true, scratch), x);
    const float *in = cpu_linear_input(x, T, &f8.w, true, scratch);
    assert_ptr_equal(in, scratch);
    cpu_quant_fp8_rows(x, T, K, 128, expect);
    assert_memory_equal(scratch, expect, sizeof expect);
    /* columns 256..299 form their own group: their scale comes from their own max */
    for (int t = 0; t < T; t++) {
        float amax = 0, omax = 0;
        for (int k = 256; k < K; k++) {
            amax = fmaxf(amax, fabsf(x[t * K + k]));
            omax = fmaxf(omax, fabsf(scratch[t * K + k]));
        }
        assert_true(omax == 448.0f * (amax / 448.0f));
    }
    cpu_matmul_rows(in, T, &f8.w, 0, N, y, N, wbuf);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)in[t * K + k] * f8.dense[(size_t)n * K + k];
                ref += p;
                mag += fabs(p);
            }
            assert_true(fabs(y[t * N + n] - ref) <= 1e-6 * mag);
        }
    free_weight(&f8);
    free_weight(&bf);
}

/* --- attention ------------------------------------------------------------------------------- */

/* Two sequences (GQA 4 query heads over 2 kv heads, D 16, blocks of 4 tokens): sequence 0 has a
 * cached prefix of 7 tokens and 4 new ones (context 11), sequence 1 decodes one token at
 * context 6. Their blocks are scattered through the pool in shuffled order. */
static void test_attention_paged_gqa(void **state) {
    enum { NH = 4, NKV = 2, D = 16, BS = 4, NB = 12, STRIDE = 4 };
    const int ctx[2] = {11, 6}, n_new[2] = {4, 1};
    const int32_t qs[3] = {0, 4, 5};
    const int32_t tables[2][STRIDE] = {{9, 2, 7, -1}, {4, 11, -1, -1}};

    /* contiguous K/V per sequence [ctx, NKV, D] */
    float kc[2][11][NKV][D], vc[2][11][NKV][D];
    fill(&kc[0][0][0][0], sizeof kc / sizeof(float), 1.0f);
    fill(&vc[0][0][0][0], sizeof vc / sizeof(float), 1.0f);
    /* the pool: a kv head's rows of a block together (cpu_ops.h) */
    static float kpool[NB][NKV][BS][D], vpool[NB][NKV][BS][D];
    fill(&kpool[0][0][0][0], sizeof kpool / sizeof(float), 50.0f); /* garbage elsewhere */
    fill(&vpool[0][0][0][0], sizeof vpool / sizeof(float), 50.0f);
    for (int s = 0; s < 2; s++)
        for (int p = 0; p < ctx[s]; p++)
            for (int h = 0; h < NKV; h++) {
                memcpy(kpool[tables[s][p / BS]][h][p % BS], kc[s][p][h], sizeof kc[s][p][h]);
                memcpy(vpool[tables[s][p / BS]][h][p % BS], vc[s][p][h], sizeof vc[s][p][h]);
            }
    float q[5][NH][D], out[5][NH][D];
    fill(&q[0][0][0], sizeof q / sizeof(float), 1.0f);

    cpu_attn_t a = {.q = &q[0][0][0],
                    .out = &out[0][0][0],
                    .k_cache = &kpool[0][0][0][0],
                    .v_cache = &vpool[0][0][0][0],
                    .block_size = BS,
                    .n_heads = NH,
                    .n_kv_heads = NKV,
                    .head_dim = D,
                    .scale = 1.0f / sqrtf((float)D),
                    .query_start = qs,
                    .context_len = ctx,
                    .block_tables = &tables[0][0],
                    .block_table_stride = STRIDE};
    float scores[16];
    for (int s = 0; s < 2; s++)
        for (int t = qs[s]; t < qs[s + 1]; t++)
            for (int h = 0; h < NH; h++)
                cpu_attention_head(&a, s, t, h, scores);

    for (int s = 0; s < 2; s++)
        for (int t = qs[s]; t < qs[s + 1]; t++) {
            int n_keys = ctx[s] - n_new[s] + (t - qs[s]) + 1;
            for (int h = 0; h < NH; h++) {
                int kvh = h / (NH / NKV);
                double sc[16], m = -1e300, sum = 0;
                for (int p = 0; p < n_keys; p++) {
                    double d = 0;
                    for (int i = 0; i < D; i++)
                        d += (double)q[t][h][i] * kc[s][p][kvh][i];
                    sc[p] = d / sqrt((double)D);
                    if (sc[p] > m) m = sc[p];
                }
                for (int p = 0; p < n_keys; p++)
                    sum += (sc[p] = exp(sc[p] - m));
                for (int i = 0; i < D; i++) {
                    double o = 0;
                    for (int p = 0; p < n_keys; p++)
                        o += sc[p] / sum * vc[s][p][kvh][i];
                    assert_float_equal(out[t][h][i], o, 1e-5);
                }
            }
        }
}

/* Fast attention == reference attention, bit for bit: GQA groups of 1 to 5 query heads per KV
 * head (the 4-head and 2-head loops and their remainders), head_dim 32 and 64, three sequences
 * (a prefill over a cached prefix, a decode, a fresh prompt) through shuffled block tables. */
static void check_fast_attention(int NH, int NKV, int D, int BS) {
    enum { NB = 40, STRIDE = 10, NSEQ = 3 };
    const int32_t ctx[NSEQ] = {37, 22, 9}, n_new[NSEQ] = {6, 1, 9};
    int32_t qs[NSEQ + 1] = {0};
    for (int s = 0; s < NSEQ; s++)
        qs[s + 1] = qs[s] + n_new[s];
    int T = qs[NSEQ];
    int32_t tables[NSEQ * STRIDE];
    for (int i = 0; i < NSEQ * STRIDE; i++)
        tables[i] = (i * 17 + 5) % NB; /* distinct, scattered */
    size_t pool = (size_t)NB * BS * NKV * D, qn = (size_t)T * NH * D;
    float *k = malloc(sizeof(float) * pool), *v = malloc(sizeof(float) * pool);
    float *q = malloc(sizeof(float) * qn), *ref = malloc(sizeof(float) * qn);
    float *got = malloc(sizeof(float) * qn);
    float *scores = malloc(sizeof(float) * (size_t)(NH / NKV) * 64);
    fill(k, pool, 1.0f);
    fill(v, pool, 1.0f);
    fill(q, qn, 1.0f);
    cpu_attn_t a = {.q = q,
                    .out = ref,
                    .k_cache = k,
                    .v_cache = v,
                    .block_size = BS,
                    .n_heads = NH,
                    .n_kv_heads = NKV,
                    .head_dim = D,
                    .scale = 1.0f / sqrtf((float)D),
                    .query_start = qs,
                    .context_len = ctx,
                    .block_tables = tables,
                    .block_table_stride = STRIDE};
    for (int s = 0; s < NSEQ; s++)
        for (int t = qs[s]; t < qs[s + 1]; t++)
            for (int h = 0; h < NH; h++)
                cpu_attention_head(&a, s, t, h, scores);
    a.out = got;
    memset(got, 0xff, sizeof(float) * qn);
    for (int s = 0; s < NSEQ; s++)
        for (int t = qs[s]; t < qs[s + 1]; t++)
            for (int g = 0; g < NKV; g++)
                cpu_fast_attention(&a, s, t, g, scores);
    if (memcmp(got, ref, sizeof(float) * qn))
        fail_msg("fast attention differs: %d heads over %d, D %d, blocks of %d", NH, NKV, D, BS);
    free(k);
    free(v);
    free(q);
    free(ref);
    free(got);
    free(scores);
}

static void test_fast_attention_equals_reference(void **state) {
    if (!cpu_fast_supported()) skip();
    check_fast_attention(4, 2, 32, 4);
    check_fast_attention(5, 1, 64, 16);
    check_fast_attention(6, 2, 32, 8);
    check_fast_attention(3, 3, 64, 5);
    check_fast_attention(8, 2, 16, 4); /* head_dim not a multiple of 32: the reference inside */
}

/* --- thread pool ------------------------------------------------------------------------------ */

typedef struct {
    int *hits;
    int *thread_of;
} pool_ctx_t;

static void mark(void *ctx, int thread, int64_t begin, int64_t end) {
    pool_ctx_t *c = ctx;
    for (int64_t i = begin; i < end; i++) {
        c->hits[i]++;
        c->thread_of[i] = thread;
    }
}

static void test_pool_covers_every_item_once(void **state) {
    err_t err;
    for (int n_threads = 1; n_threads <= 3; n_threads++) {
        cpu_pool_t *pool;
        assert_int_equal(cpu_pool_create(n_threads, &pool, &err), 0);
        assert_int_equal(cpu_pool_size(pool), n_threads);
        enum { N = 1001 };
        int hits[N], thread_of[N];
        for (int round = 0; round < 200; round++) {
            memset(hits, 0, sizeof hits);
            pool_ctx_t c = {hits, thread_of};
            cpu_pool_run(pool, N, 1 + round % 17, mark, &c);
            for (int i = 0; i < N; i++) {
                assert_int_equal(hits[i], 1);
                assert_in_range(thread_of[i], 0, n_threads - 1);
            }
        }
        cpu_pool_destroy(pool);
    }
    cpu_pool_destroy(NULL);
    cpu_pool_t *pool;
    assert_int_equal(cpu_pool_create(0, &pool, &err), -1);
    assert_non_null(strstr(err.msg, "threads"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_f32),
        cmocka_unit_test(test_matmul_bf16),
        cmocka_unit_test(test_matmul_f16),
        cmocka_unit_test(test_matmul_fp8_ragged),
        cmocka_unit_test(test_fast_matmul_equals_reference),
        cmocka_unit_test(test_bf16_split),
        cmocka_unit_test(test_bf16_matmul_within_bounds),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope_inv_freq),
        cmocka_unit_test(test_rope_known_rotation),
        cmocka_unit_test(test_quant_fp8_hand),
        cmocka_unit_test(test_linear_input),
        cmocka_unit_test(test_attention_paged_gqa),
        cmocka_unit_test(test_fast_attention_equals_reference),
        cmocka_unit_test(test_pool_covers_every_item_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

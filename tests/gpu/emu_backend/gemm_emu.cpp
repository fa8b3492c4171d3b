/* kernels/gemm.h on the host, for the backend's host emulation (tests/gpu/emu_backend/run): the
 * cuBLASLt semantics the backend relies on, written out as loops. FP8: A = W [n, k] e4m3 with
 * BLK128x128 scales at scale[(row / 128) * gemm_w8_scale_ld(k) + col / 128] (K-major, padded
 * rows of 4 blocks), B = x [tp, k] e4m3 with VEC128 scales at xs[(col / 128) * tp + t]
 * (transposed), f32 accumulation promoted per 128-column block, BF16 out (round to nearest
 * even) or f32. BF16: f32 accumulation, BF16 or f32 out. tests/gpu/test_gemm checks these same
 * semantics against cuBLASLt on the device. */
#include "cb_engine.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_check.h"
#include "gemm.h"

struct gemm_ctx {
    int queries;
    const float *e4m3;   /* emu_e4m3_table() */
    cudaStream_t stream; /* its launches' (emu_check_stream: its device must be current) */
};

extern "C" const char *cublasLtGetStatusString(cublasStatus_t) {
    return "emulated cuBLASLt";
}

extern "C" bool gemm_fp8_shape_ok(int n, int k, char *why, size_t why_size) {
    if (n >= 16 && k >= 16 && n % 16 == 0 && k % 16 == 0) return true;
    if (why) snprintf(why, why_size, "FP8 GEMM N=%d K=%d: N and K must be multiples of 16", n, k);
    return false;
}

extern "C" int gemm_create(cudaStream_t stream, size_t, gemm_ctx_t **out, err_t *err) {
    gemm_ctx_t *g = (gemm_ctx_t *)calloc(1, sizeof *g);
    if (!g) return err_set(err, "gemm: out of memory");
    g->e4m3 = emu_e4m3_table();
    g->stream = stream;
    *out = g;
    return 0;
}

extern "C" void gemm_destroy(gemm_ctx_t *g) {
    free(g);
}

/* Sum of a[k] * b[k] over [k0, k1) in eight lanes (vectorizes), then the lanes in a fixed order:
 * the same order for a row whatever the batch around it, as batch invariance needs. */
static float dot_f32(const float *a, const float *b, int k0, int k1) {
    float lane[8] = {0};
    int k = k0;
    for (; k + 8 <= k1; k += 8)
        for (int j = 0; j < 8; j++)
            lane[j] += a[k + j] * b[k + j];
    for (int j = 0; k < k1; k++, j++)
        lane[j] += a[k] * b[k];
    return ((lane[0] + lane[4]) + (lane[2] + lane[6])) +
           ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

static void store(void *y, bool y_f32, size_t i, float v) {
    if (y_f32)
        ((float *)y)[i] = v;
    else
        ((uint16_t *)y)[i] = dtype_f32_to_bf16(v);
}

/* The products themselves: run at the call, or recorded while a CUDA graph is captured
 * (emu_cuda.h), the weight's description copied as cuBLASLt's matmul node keeps its pointers and
 * sizes. */
static void run_fp8(const gemm_ctx_t *g, const gemm_w8_t *w, const uint8_t *x, const float *xs,
                    int t, void *y, bool y_f32);
static void run_bf16(const gemm_w16_t *w, const uint16_t *x, int t, void *y, bool y_f32);

extern "C" int gemm_fp8(gemm_ctx_t *g, const gemm_w8_t *w, const uint8_t *x, const float *xs, int t,
                        void *y, bool y_f32, err_t *err) {
    if (t <= 0) return 0;
    char why[160];
    if (!gemm_fp8_shape_ok(w->n, w->k, why, sizeof why)) return err_set(err, "%s", why);
    emu_check_stream(g->stream, "an FP8 GEMM");
    if (emu_capturing()) {
        const gemm_w8_t wc = *w;
        emu_capture([=]() { run_fp8(g, &wc, x, xs, t, y, y_f32); });
    } else {
        run_fp8(g, w, x, xs, t, y, y_f32);
    }
    return 0;
}

static void run_fp8(const gemm_ctx_t *g, const gemm_w8_t *w, const uint8_t *x, const float *xs,
                    int t, void *y, bool y_f32) {
    int tp = gemm_pad_t(t), ld = gemm_w8_scale_ld(w->k), L = (w->k + 127) / 128;
    const size_t K = (size_t)w->k;
    std::vector<float> xf((size_t)tp * K), wf(K); /* decoded once per call / per weight row */
    for (size_t i = 0; i < xf.size(); i++)
        xf[i] = g->e4m3[x[i]];
    for (int n = 0; n < w->n; n++) {
        for (size_t k = 0; k < K; k++)
            wf[k] = g->e4m3[w->data[(size_t)n * K + k]];
        for (int r = 0; r < tp; r++) {
            float acc = 0.0f; /* promoted to f32 with both scales per 128-column block */
            for (int kb = 0; kb < L; kb++) {
                int k1 = (kb + 1) * 128 < w->k ? (kb + 1) * 128 : w->k;
                float part = dot_f32(wf.data(), &xf[(size_t)r * K], kb * 128, k1);
                acc += part * w->scale[(size_t)(n / 128) * ld + kb] * xs[(size_t)kb * tp + r];
            }
            store(y, y_f32, (size_t)r * w->n + n, acc);
        }
    }
}

extern "C" int gemm_bf16(gemm_ctx_t *g, const gemm_w16_t *w, const uint16_t *x, int t, void *y,
                         bool y_f32, err_t *err) {
    (void)g;
    (void)err;
    if (t <= 0) return 0;
    emu_check_stream(g->stream, "a BF16 GEMM");
    if (emu_capturing()) {
        const gemm_w16_t wc = *w;
        emu_capture([=]() { run_bf16(&wc, x, t, y, y_f32); });
    } else {
        run_bf16(w, x, t, y, y_f32);
    }
    return 0;
}

static void run_bf16(const gemm_w16_t *w, const uint16_t *x, int t, void *y, bool y_f32) {
    const size_t K = (size_t)w->k;
    std::vector<float> xf((size_t)t * K), wf(K); /* decoded once per call / per weight row */
    for (size_t i = 0; i < xf.size(); i++)
        xf[i] = dtype_bf16_to_f32(x[i]);
    for (int n = 0; n < w->n; n++) {
        for (size_t k = 0; k < K; k++)
            wf[k] = dtype_bf16_to_f32(w->data[(size_t)n * K + k]);
        for (int r = 0; r < t; r++)
            store(y, y_f32, (size_t)r * w->n + n, dot_f32(wf.data(), &xf[(size_t)r * K], 0, w->k));
    }
}

/* The loops take every size: a probe finds an "algorithm" everywhere the shape is allowed. */
extern "C" int gemm_probe(gemm_ctx_t *g, bool fp8, int n, int k, int t_max, bool y_f32,
                          int align_log2, int *via_bf16, err_t *err) {
    (void)t_max, (void)y_f32, (void)align_log2;
    *via_bf16 = 0;
    char why[160];
    if (fp8 && !gemm_fp8_shape_ok(n, k, why, sizeof why)) return err_set(err, "%s", why);
    g->queries++;
    return 0;
}

extern "C" void gemm_stats(const gemm_ctx_t *g, gemm_stats_t *out) {
    *out = gemm_stats_t{g->queries, 0, 0};
}

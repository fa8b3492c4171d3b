/* FP8 block-scaled GEMM throughput (kernels/gemm, cuBLASLt) for the Qwen3-14B and -32B linear
 * shapes (engine presets) at T = 1, 16, 64, 256, 2048, 8192 tokens: median of 20 timed runs after
 * 3 warm-ups (CUDA events), random data (dummy_fill), weights rotated among enough copies to
 * exceed the L2 so each run reads its weight from HBM. Prints a markdown table: TFLOP/s
 * (2 N K T / time) and weight GB/s (N K bytes / time) per shape and T.
 *
 *     perf_gemm            # exits 77 without a Hopper GPU */
#include "cb_engine.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_backend.h"
#include "dummy_weights.h"
#include "gemm.h"
#include "gpu_check.h"

static void die(const err_t *err) {
    fprintf(stderr, "perf_gemm: %s\n", err->msg);
    exit(1);
}

int main(void) {
    if (!cuda_backend_available()) {
        printf("perf_gemm: no Hopper GPU, skipped\n");
        return 77;
    }
    static const int T_LIST[] = {1, 16, 64, 256, 2048, 8192};
    const int NT = 6, MAXT = 8192;
    err_t err = {{0}};
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    gemm_ctx_t *g;
    if (gemm_create(st, 32u << 20, &g, &err) < 0) die(&err);
    printf("| model | linear | N | K | T=1 | T=16 | T=64 | T=256 | T=2048 | T=8192 |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const char *preset : {"qwen3-14b", "qwen3-32b"}) {
        model_config_t c;
        if (model_config_preset(preset, true, &c, &err) < 0) die(&err);
        int H = c.hidden_size, qkv = model_q_dim(&c) + 2 * model_kv_dim(&c);
        int I = (c.intermediate_size + 127) / 128 * 128;
        struct {
            const char *name;
            int n, k;
        } lin[] = {
            {"qkv", qkv, H}, {"o", H, model_q_dim(&c)}, {"gate_up", 2 * I, H}, {"down", H, I}};
        for (auto &l : lin) {
            size_t wbytes = (size_t)l.n * l.k;
            int copies = (int)std::max<size_t>(1, (256ull << 20) / wbytes + 1);
            std::vector<uint8_t *> w(copies);
            int ld = gemm_w8_scale_ld(l.k);
            size_t sc = (size_t)((l.n + 127) / 128) * ld;
            std::vector<float> hs(sc, 1e-3f);
            float *ws;
            CK(cudaMalloc(&ws, sc * 4));
            CK(cudaMemcpy(ws, hs.data(), sc * 4, cudaMemcpyHostToDevice));
            for (int i = 0; i < copies; i++) {
                CK(cudaMalloc(&w[i], wbytes));
                if (dummy_fill(w[i], true, l.n, l.k, l.k, 7, (uint64_t)i, st, &err) < 0) die(&err);
            }
            uint8_t *x;
            float *xs;
            float *y; /* f32 output, as the backend uses */
            CK(cudaMalloc(&x, (size_t)MAXT * l.k));
            CK(cudaMalloc(&xs, (size_t)(l.k / 128 + 1) * MAXT * 4));
            CK(cudaMalloc(&y, (size_t)MAXT * l.n * 4));
            if (dummy_fill(x, true, MAXT, l.k, l.k, 8, 0, st, &err) < 0) die(&err);
            std::vector<float> hxs((size_t)(l.k / 128 + 1) * MAXT, 0.01f);
            CK(cudaMemcpy(xs, hxs.data(), hxs.size() * 4, cudaMemcpyHostToDevice));
            printf("| %s | %s | %d | %d |", preset, l.name, l.n, l.k);
            for (int ti = 0; ti < NT; ti++) {
                int T = T_LIST[ti];
                cudaEvent_t a, b;
                CK(cudaEventCreate(&a));
                CK(cudaEventCreate(&b));
                std::vector<float> ms;
                for (int it = 0; it < 23; it++) {
                    gemm_w8_t gw = {w[it % copies], ws, l.n, l.k};
                    CK(cudaEventRecord(a, st));
                    if (gemm_fp8(g, &gw, x, xs, T, y, true, &err) < 0) die(&err);
                    CK(cudaEventRecord(b, st));
                    CK(cudaEventSynchronize(b));
                    float t;
                    CK(cudaEventElapsedTime(&t, a, b));
                    if (it >= 3) ms.push_back(t);
                }
                std::sort(ms.begin(), ms.end());
                double med = ms[ms.size() / 2] * 1e-3;
                double tflops = 2.0 * l.n * (double)l.k * T / med / 1e12;
                double gbs = (double)wbytes / med / 1e9;
                printf(" %.1f TF, %.0f GB/s |", tflops, gbs);
                fflush(stdout);
                cudaEventDestroy(a);
                cudaEventDestroy(b);
            }
            printf("\n");
            for (auto p : w)
                cudaFree(p);
            cudaFree(ws);
            cudaFree(x);
            cudaFree(xs);
            cudaFree(y);
        }
    }
    gemm_destroy(g);
    return 0;
}

/* MoE grouped-GEMM microbenchmark (kernels/moe.h moe_gemm, issue 21 item 6): TFLOP/s and weight
 * GB/s of every expert's GEMM in one launch, the gate|up projection (rows gathered by token) and
 * the down projection (rows in order), at Qwen3-235B-A22B's shapes (128 experts, 8 a token,
 * hidden 4096, moe_intermediate 1536) and Qwen3-30B-A3B's (128 / 8, 2048, 768), block FP8 and
 * BF16, for 1 to 4096 tokens with a uniform random routing (each token k distinct experts).
 * Prints a markdown table for bench/RESULTS.md.
 *
 * FLOPs count the routed work only: 2 x N x K per (token, expert) pair (padding rows of the
 * experts' 64-row tiles not counted). Weight bytes: the experts the routing touches, each read
 * once (N x K at 1 or 2 bytes, plus FP8's scales): at decode sizes the kernel is bound by them,
 * at prefill sizes by its tensor-core rate. Time: CUDA events around ~0.3 s of back-to-back calls
 * (1 to 50) after a warm-up call.
 *
 * Under the host emulation (perf_moe_gemm_emu) the same code runs at a tiny shape (8 experts, 2
 * a token, 256 x 256) for 1 and 8 tokens, one call each, and checks the outputs are finite: the
 * timings there mean nothing, the point is that the program keeps building and running. Exit 77
 * without a Hopper GPU. */
#include "cb_engine.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_backend.h"
#include "gpu_check.h"
#include "moe.h"
#include "perf_timing.h"

#ifdef OPS_HOST_EMULATION
#define SIZE(gpu, emu) (emu)
#else
#define SIZE(gpu, emu) (gpu)
#endif

struct Model {
    const char *name;
    int E, k, H, I;
};

int main(void) {
    if (!cuda_backend_available()) {
        printf("perf_moe_gemm: no Hopper GPU, skipped\n");
        return 77;
    }
#ifdef OPS_HOST_EMULATION
    const std::vector<Model> models = {{"tiny", 8, 2, 256, 256}};
    const std::vector<int> tokens = {1, 8};
#else
    const std::vector<Model> models = {{"Qwen3-235B-A22B", 128, 8, 4096, 1536},
                                       {"Qwen3-30B-A3B", 128, 8, 2048, 768}};
    const std::vector<int> tokens = {1, 16, 64, 256, 1024, 4096};
#endif
    const int max_t = tokens.back();
    srand(12345);
    printf("MoE grouped GEMM (moe_gemm: every expert in one launch, uniform random routing)\n\n");
    printf(
        "| model | weights | projection | tokens | experts hit | ms | TFLOP/s | weight GB/s |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    int bad = 0;
    for (const Model &m : models) {
        const int E = m.E, k = m.k;
        /* gate|up: [2 I, H] per expert, rows gathered by token; down: [H, I], rows in order */
        const int shapes[2][2] = {{2 * m.I, m.H}, {m.H, m.I}};
        const int max_rows = moe_max_rows(max_t, k, E);
        for (int fp8 = 1; fp8 >= 0; fp8--) {
            const size_t esize = fp8 ? 1 : 2;
            for (int proj = 0; proj < 2; proj++) {
                const int N = shapes[proj][0], K = shapes[proj][1];
                const size_t wbytes = (size_t)E * N * K * esize;
                void *w = nullptr, *a = nullptr;
                float *ws = nullptr, *as = nullptr, *y = nullptr;
                CK(cudaMalloc(&w, wbytes));
                CK(cudaMemset(w, 0x38, wbytes)); /* small finite values in bf16 and e4m3 alike */
                const size_t n_scales = (size_t)E * (N / 128) * (K / 128);
                if (fp8) {
                    std::vector<float> one(n_scales, 1e-2f);
                    CK(cudaMalloc((void **)&ws, n_scales * 4));
                    CK(cudaMemcpy(ws, one.data(), n_scales * 4, cudaMemcpyHostToDevice));
                }
                const int a_rows = proj == 0 ? (max_t + 3) & ~3 : max_rows;
                CK(cudaMalloc(&a, (size_t)a_rows * K * esize));
                CK(cudaMemset(a, 0x38, (size_t)a_rows * K * esize));
                std::vector<float> sc((size_t)(K / 128) * a_rows, 1e-2f);
                CK(cudaMalloc((void **)&as, sc.size() * 4));
                CK(cudaMemcpy(as, sc.data(), sc.size() * 4, cudaMemcpyHostToDevice));
                CK(cudaMalloc((void **)&y, (size_t)max_rows * N * 4));
                moe_weights_t mw = {w, fp8 ? ws : nullptr, E, N, K};
                for (int T : tokens) {
                    /* k distinct experts a token, uniformly */
                    std::vector<int32_t> ids((size_t)T * k);
                    std::vector<char> hit(E, 0);
                    for (int t = 0; t < T; t++)
                        for (int j = 0; j < k; j++) {
                            int e;
                            bool dup;
                            do {
                                e = rand() % E;
                                dup = false;
                                for (int i = 0; i < j; i++)
                                    dup |= ids[(size_t)t * k + i] == e;
                            } while (dup);
                            ids[(size_t)t * k + j] = e;
                            hit[e] = 1;
                        }
                    int n_hit = 0;
                    for (char h : hit)
                        n_hit += h;
                    int32_t *d_ids;
                    void *pbuf;
                    CK(cudaMalloc((void **)&d_ids, ids.size() * 4));
                    CK(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
                    CK(cudaMalloc(&pbuf, moe_perm_bytes(T, k, E)));
                    moe_perm_t p;
                    moe_perm_layout(pbuf, T, k, E, &p);
                    err_t err = {{0}};
                    if (moe_permute(d_ids, T, k, E, 0, E, &p, NULL, 0, &err) < 0) {
                        fprintf(stderr, "%s\n", err.msg);
                        return 1;
                    }
                    moe_gemm_args_t g = {&mw,    a,
                                         K,      fp8 ? as : nullptr,
                                         a_rows, proj == 0 ? p.row_token : nullptr,
                                         &p,     T,
                                         k,      y};
                    const double ms = perf_time_calls(
                        [&]() {
                            err_t e = {{0}};
                            int rc = moe_gemm(&g, 0, &e);
                            if (rc < 0) fprintf(stderr, "%s\n", e.msg);
                            return rc;
                        },
                        50);
                    const double flops = 2.0 * T * k * (double)N * K;
                    const double bytes = (double)n_hit * N * K * esize +
                                         (fp8 ? (double)n_hit * (N / 128) * (K / 128) * 4 : 0.0);
                    printf("| %s | %s | %s | %d | %d | %.4f | %.1f | %.0f |\n", m.name,
                           fp8 ? "fp8" : "bf16", proj == 0 ? "gate_up" : "down", T, n_hit, ms,
                           flops / (ms * 1e-3) / 1e12, bytes / (ms * 1e-3) / 1e9);
#ifdef OPS_HOST_EMULATION
                    std::vector<float> out((size_t)moe_max_rows(T, k, E) * N);
                    CK(cudaMemcpy(out.data(), y, out.size() * 4, cudaMemcpyDeviceToHost));
                    std::vector<int32_t> tile(moe_max_tiles(T, k, E));
                    CK(cudaMemcpy(tile.data(), p.tile_expert, tile.size() * 4,
                                  cudaMemcpyDeviceToHost));
                    for (size_t r = 0; r < out.size() / N; r++)
                        for (int n = 0; n < N && tile[r / MOE_TILE_M] >= 0; n++)
                            bad += !std::isfinite(out[r * N + n]);
#endif
                    CK(cudaFree(d_ids));
                    CK(cudaFree(pbuf));
                }
                CK(cudaFree(w));
                CK(cudaFree(a));
                CK(cudaFree(as));
                CK(cudaFree(y));
                if (ws) CK(cudaFree(ws));
            }
        }
    }
    if (bad) {
        fprintf(stderr, "perf_moe_gemm: %d outputs not finite\n", bad);
        return 1;
    }
    return 0;
}

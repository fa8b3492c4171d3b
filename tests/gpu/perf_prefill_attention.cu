/* Prefill-attention microbenchmark (kernels/ops.h): TFLOP/s of causal varlen prefill over the
 * paged cache at contexts of 1k, 4k and 32k tokens, for Qwen3-14B's attention (40 query heads,
 * 8 KV heads, head_dim 128) and Qwen3.5-9B's (16 / 4, head_dim 256), bf16 and fp8 caches: the
 * tensor-core kernel (ops_attention_prefill) next to the CUDA-core one it replaced
 * (ops_attention_prefill_simt). Prints a markdown table for bench/RESULTS.md.
 *
 *     perf_prefill_attention            # the table
 *     perf_prefill_attention --quick    # no CUDA-core column at 32k (its calls take ~0.5 s)
 *
 * A case is S fresh prompts of C tokens each (S = max(1, 16384 / C), so every case has 16k
 * query tokens or more and fills the GPU), plus a 2048-token chunk after a cached 30720-token
 * prefix (the last chunk of a 32k prompt under chunked prefill). FLOPs count the causal work
 * only: 4 x head_dim x query heads per (query, visible key) pair (QK^T and PV, a multiply-add
 * each). Time: CUDA events around enough back-to-back calls to take ~0.3 s (at least one, at
 * most 20) after one warm-up call. Block size 16, blocks handed out in order.
 *
 * Under the host emulation (tests/gpu/emu, perf_prefill_attention_emu) the same code runs at a
 * tiny size (two cases of 4 / 2 heads and at most 80 query tokens, one call each), and checks that
 * both kernels agree on the constant inputs (every output is then the V value): the timings there
 * mean nothing. Exit 77 without a Hopper GPU. */
#include "cb_engine.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_backend.h"
#include "gpu_check.h"
#include "ops.h"
#include "perf_timing.h"

#ifdef OPS_HOST_EMULATION
#define SIZE(gpu, emu) (emu)
#else
#define SIZE(gpu, emu) (gpu)
#endif

struct Shape {
    const char *name;
    int Hq, Hkv, D;
};

struct Case {
    int n_seqs, prefix, q_len; /* every sequence alike */
};

typedef int (*prefill_fn)(const ops_attn_args_t *, int, cudaStream_t, err_t *);

/* Milliseconds per call of fn on a (perf_timing.h: up to 20 calls). */
static double time_calls(prefill_fn fn, const ops_attn_args_t *a, int max_q) {
    return perf_time_calls(
        [&]() {
            err_t err = {{0}};
            int rc = fn(a, max_q, 0, &err);
            if (rc < 0) fprintf(stderr, "%s\n", err.msg);
            return rc;
        },
        20);
}

int main(int argc, char **argv) {
    if (!cuda_backend_available()) {
        printf("perf_prefill_attention: no Hopper GPU, skipped\n");
        return 77;
    }
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    err_t err = {{0}};
    if (ops_init(&err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
#ifdef OPS_HOST_EMULATION
    const std::vector<Shape> shapes = {{"tiny-128", 4, 2, 128}, {"tiny-256", 4, 2, 256}};
    const std::vector<Case> cases = {{2, 0, 40}, {1, 36, 28}};
#else
    const std::vector<Shape> shapes = {{"Qwen3-14B", 40, 8, 128}, {"Qwen3.5-9B", 16, 4, 256}};
    const std::vector<Case> cases = {{16, 0, 1024}, {4, 0, 4096}, {1, 0, 32768}, {1, 30720, 2048}};
#endif
    int64_t max_tokens = 0, max_ctx_tokens = 0;
    for (const Case &c : cases) {
        const int64_t t = (int64_t)c.n_seqs * c.q_len, k = (int64_t)c.n_seqs * (c.prefix + c.q_len);
        max_tokens = t > max_tokens ? t : max_tokens;
        max_ctx_tokens = k > max_ctx_tokens ? k : max_ctx_tokens;
    }
    const int bs = 16, max_heads = 40, max_kv_heads = 8, max_d = 256;
    const size_t pool = (size_t)max_ctx_tokens * max_kv_heads * max_d * 2;
    const size_t qbytes = (size_t)max_tokens * max_heads * max_d * 2;
    void *k, *v, *q, *o, *o2;
    CK(cudaMalloc(&k, pool));
    CK(cudaMalloc(&v, pool));
    CK(cudaMemset(k, 0x3c, pool)); /* small finite values in bf16 and e4m3 alike */
    CK(cudaMemset(v, 0x3c, pool));
    CK(cudaMalloc(&q, qbytes));
    CK(cudaMemset(q, 0x3c, qbytes));
    CK(cudaMalloc(&o, qbytes));
    CK(cudaMalloc(&o2, qbytes));
    int32_t *d_qs, *d_ctx, *d_tab;
    const int max_seqs = 16;
    CK(cudaMalloc(&d_qs, (max_seqs + 1) * sizeof(int32_t)));
    CK(cudaMalloc(&d_ctx, max_seqs * sizeof(int32_t)));
    CK(cudaMalloc(&d_tab, (size_t)(max_ctx_tokens / bs + max_seqs) * sizeof(int32_t)));

    printf("prefill attention (causal, paged, block %d)\n\n", bs);
    printf("| model | kv | context | prompts x query tokens | tensor cores ms | TFLOP/s | "
           "CUDA cores ms | TFLOP/s | speed-up |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    int bad = 0;
    for (const Shape &sh : shapes)
        for (int fp8 = 0; fp8 < 2; fp8++)
            for (const Case &c : cases) {
                const int ctx = c.prefix + c.q_len, nb = (ctx + bs - 1) / bs;
                std::vector<int32_t> qs(c.n_seqs + 1), cl(c.n_seqs, ctx),
                    table((size_t)c.n_seqs * nb);
                for (int s = 0; s <= c.n_seqs; s++)
                    qs[s] = s * c.q_len;
                for (size_t i = 0; i < table.size(); i++)
                    table[i] = (int32_t)i;
                CK(cudaMemcpy(d_qs, qs.data(), qs.size() * 4, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(d_ctx, cl.data(), cl.size() * 4, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(d_tab, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
                ops_attn_args_t a = {};
                a.q = q;
                a.out = o;
                a.k_cache = k;
                a.v_cache = v;
                a.kv_dtype = fp8 ? OPS_KV_FP8 : OPS_KV_BF16;
                a.k_scale = a.v_scale = 1.0f;
                a.n_seqs = c.n_seqs;
                a.n_tokens = c.n_seqs * c.q_len;
                a.n_heads = sh.Hq;
                a.n_kv_heads = sh.Hkv;
                a.head_dim = sh.D;
                a.block_size = bs;
                a.query_start = d_qs;
                a.context_len = d_ctx;
                a.block_tables = d_tab;
                a.block_table_stride = nb;
                a.scale = (float)(1.0 / sqrt((double)sh.D));
                /* visible (query, key) pairs: query i sees prefix + i + 1 keys */
                const double pairs = (double)c.n_seqs * ((double)c.q_len * c.prefix +
                                                         (double)c.q_len * (c.q_len + 1) / 2.0);
                const double flop = 4.0 * sh.D * sh.Hq * pairs;
                const double ms_tc = time_calls(ops_attention_prefill, &a, c.q_len);
                double ms_simt = 0.0;
                if (!(quick && ctx >= 32768)) {
                    a.out = o2;
                    ms_simt = time_calls(ops_attention_prefill_simt, &a, c.q_len);
                }
                char simt[64] = "-";
                if (ms_simt > 0.0)
                    snprintf(simt, sizeof simt, "%.3f | %.1f | %.1fx", ms_simt,
                             flop / (ms_simt * 1e9), ms_simt > 0 ? ms_simt / ms_tc : 0.0);
                else
                    snprintf(simt, sizeof simt, "- | - | -");
                printf("| %s | %s | %d | %d x %d | %.3f | %.1f | %s |\n", sh.name,
                       fp8 ? "fp8" : "bf16", ctx, c.n_seqs, c.q_len, ms_tc, flop / (ms_tc * 1e9),
                       simt);
                fflush(stdout);
#ifdef OPS_HOST_EMULATION
                /* Constant inputs: every output element of both kernels is the V value. */
                const size_t n = (size_t)a.n_tokens * sh.Hq * sh.D;
                std::vector<uint16_t> x(n), y(n);
                CK(cudaMemcpy(x.data(), o, n * 2, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(y.data(), o2, n * 2, cudaMemcpyDeviceToHost));
                for (size_t i = 0; i < n; i++)
                    bad += x[i] != y[i] || !std::isfinite(dtype_bf16_to_f32(x[i]));
#endif
            }
    CK(cudaDeviceSynchronize());
    if (bad) {
        fprintf(stderr, "perf_prefill_attention: %d outputs differ between the kernels\n", bad);
        return 1;
    }
    return 0;
}

/* Decode-attention microbenchmark (kernels/ops.h ops_attention_decode): effective bandwidth of
 * the KV read for the Qwen3-14B attention shape (40 query heads, 8 KV heads, head_dim 128) at
 * batch sizes 1..256 and contexts 1k..32k, block sizes 16 and 32, bf16 and fp8 caches, with the
 * split count of ops_attention_decode_splits. Blocks are handed out in a shuffled order, as a
 * long-running pool fragments them. Prints a markdown table for bench/RESULTS.md.
 *
 *     perf_attention            # the full table
 *     perf_attention --quick    # batch 1, 64, 256 and context 1k, 32k only
 *
 * GB/s counts the K and V bytes each step must read (batch x context x 8 x 128 x 2 tensors x
 * element size) over the measured time of one call (decode + merge), CUDA events around 20
 * back-to-back calls after 3 warm-up calls: ops_attention_decode (the tensor-core kernel for
 * head_dim 128), then ops_attention_decode_simt (the CUDA-core kernel it replaced) in the last
 * two columns. Exit 77 without a Hopper GPU. */
#include "cb_engine.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_backend.h"
#include "ops.h"
#include "gpu_check.h"

static const int kHq = 40, kHkv = 8, kD = 128, kMaxSplits = 64;

int main(int argc, char **argv) {
    if (!cuda_backend_available()) {
        printf("perf_attention: no Hopper GPU, skipped\n");
        return 77;
    }
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    std::vector<int> batches =
        quick ? std::vector<int>{1, 64, 256} : std::vector<int>{1, 8, 32, 64, 128, 256};
    std::vector<int> contexts = quick ? std::vector<int>{1024, 32768}
                                      : std::vector<int>{1024, 2048, 4096, 8192, 16384, 32768};
    int dev_id, sms;
    CK(cudaGetDevice(&dev_id));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev_id));
    err_t err = {{0}};
    if (ops_init(&err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }

    /* One pool (per K and V) big enough for the largest case; bf16 bytes, reused for fp8. */
    const int64_t max_tokens = (int64_t)batches.back() * contexts.back();
    const size_t pool = (size_t)max_tokens * kHkv * kD * 2;
    void *k, *v, *q, *o, *ws;
    CK(cudaMalloc(&k, pool));
    CK(cudaMalloc(&v, pool));
    CK(cudaMemset(k, 0x3c, pool)); /* small finite values in bf16 and e4m3 alike */
    CK(cudaMemset(v, 0x3c, pool));
    CK(cudaMalloc(&q, (size_t)batches.back() * kHq * kD * 2));
    CK(cudaMemset(q, 0x3c, (size_t)batches.back() * kHq * kD * 2));
    CK(cudaMalloc(&o, (size_t)batches.back() * kHq * kD * 2));
    CK(cudaMalloc(&ws, ops_attention_workspace_bytes(batches.back(), kHq, kD, kMaxSplits)));
    int32_t *d_qs, *d_ctx, *d_tab;
    CK(cudaMalloc(&d_qs, (batches.back() + 1) * sizeof(int32_t)));
    CK(cudaMalloc(&d_ctx, batches.back() * sizeof(int32_t)));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    printf("decode attention, %d/%d heads, head_dim %d, %d SMs\n\n", kHq, kHkv, kD, sms);
    printf("| kv | block | batch | context | splits | us/call | GB/s | CUDA cores us/call | GB/s "
           "|\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int fp8 = 0; fp8 < 2; fp8++)
        for (int bs : {16, 32}) {
            const int64_t pool_blocks = max_tokens / bs;
            for (int B : batches)
                for (int ctx : contexts) {
                    const int nb = (ctx + bs - 1) / bs;
                    const int64_t need = (int64_t)B * nb;
                    std::vector<int32_t> perm(pool_blocks), table((size_t)B * nb), qs(B + 1),
                        cl(B, ctx);
                    for (int64_t i = 0; i < pool_blocks; i++)
                        perm[i] = (int32_t)i;
                    uint64_t st = 0x9e3779b97f4a7c15ull ^ (uint64_t)(B * 131 + ctx);
                    for (int64_t i = pool_blocks - 1; i > 0; i--) { /* Fisher-Yates, xorshift */
                        st ^= st << 13;
                        st ^= st >> 7;
                        st ^= st << 17;
                        int64_t j = (int64_t)(st % (uint64_t)(i + 1));
                        int32_t x = perm[i];
                        perm[i] = perm[j];
                        perm[j] = x;
                    }
                    for (int64_t i = 0; i < need; i++)
                        table[i] = perm[i];
                    for (int s = 0; s <= B; s++)
                        qs[s] = s;
                    CK(cudaMalloc(&d_tab, table.size() * sizeof(int32_t)));
                    CK(cudaMemcpy(d_tab, table.data(), table.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice));
                    CK(cudaMemcpy(d_qs, qs.data(), qs.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice));
                    CK(cudaMemcpy(d_ctx, cl.data(), cl.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice));
                    ops_attn_args_t a = {};
                    a.q = q;
                    a.out = o;
                    a.k_cache = k;
                    a.v_cache = v;
                    a.kv_dtype = fp8 ? OPS_KV_FP8 : OPS_KV_BF16;
                    a.k_scale = a.v_scale = 1.0f;
                    a.n_seqs = B;
                    a.n_heads = kHq;
                    a.n_kv_heads = kHkv;
                    a.head_dim = kD;
                    a.block_size = bs;
                    a.query_start = d_qs;
                    a.context_len = d_ctx;
                    a.block_tables = d_tab;
                    a.block_table_stride = nb;
                    a.scale = 0.08838834764831845f;
                    const int splits = ops_attention_decode_splits(B, kHkv, ctx, sms, kMaxSplits);
                    double us[2];
                    for (int simt = 0; simt < 2; simt++) {
                        auto call = simt ? ops_attention_decode_simt : ops_attention_decode;
                        for (int it = 0; it < 3; it++)
                            if (call(&a, splits, ws, 0, &err) < 0) {
                                fprintf(stderr, "%s\n", err.msg);
                                return 1;
                            }
                        const int iters = 20;
                        CK(cudaEventRecord(e0));
                        for (int it = 0; it < iters; it++)
                            if (call(&a, splits, ws, 0, &err) < 0) {
                                fprintf(stderr, "%s\n", err.msg);
                                return 1;
                            }
                        CK(cudaEventRecord(e1));
                        CK(cudaEventSynchronize(e1));
                        float ms;
                        CK(cudaEventElapsedTime(&ms, e0, e1));
                        us[simt] = 1000.0 * ms / iters;
                    }
                    const double bytes = (double)B * ctx * kHkv * kD * 2.0 * (fp8 ? 1.0 : 2.0);
                    printf("| %s | %d | %d | %d | %d | %.1f | %.0f | %.1f | %.0f |\n",
                           fp8 ? "fp8" : "bf16", bs, B, ctx, splits, us[0], bytes / (us[0] * 1e3),
                           us[1], bytes / (us[1] * 1e3));
                    fflush(stdout);
                    CK(cudaFree(d_tab));
                }
        }
    CK(cudaDeviceSynchronize());
    return 0;
}

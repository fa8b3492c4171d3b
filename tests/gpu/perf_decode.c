/* Batch-1 decode of dummy qwen3-14b FP8 through the cuda backend (forward + device sampling, as
 * the engine drives it), against the weight-bandwidth ceiling measured in the same run:
 *
 *   ceiling tok/s = device copy bandwidth (cudaMemcpy D2D, bytes read + written) /
 *                   weight bytes streamed per token (every linear with its scales + the lm_head)
 *
 * Decodes 128 tokens after a 128-token prompt, with CUDA graphs off and on; prints a markdown
 * table. Usage: perf_decode [preset] (default qwen3-14b). Exits 77 without a Hopper GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "backend.h"
#include "cuda_backend.h"
#include "weights.h"

#define PROMPT 128
#define STEPS  128
#define BLOCK  16

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *msg) {
    fprintf(stderr, "perf_decode: %s: %s\n", what, msg);
    exit(1);
}

/* Device copy bandwidth, GB/s counting bytes read plus written (median of 10 copies of 2 GiB). */
static double copy_bandwidth(void) {
    size_t bytes = 2ull << 30;
    void *a, *b;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess)
        die("copy bandwidth", "cudaMalloc failed");
    cudaMemset(a, 1, bytes);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best[10];
    for (int i = 0; i < 12; i++) {
        cudaEventRecord(e0, 0);
        cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (i >= 2) best[i - 2] = ms;
    }
    for (int i = 0; i < 10; i++)
        for (int j = i + 1; j < 10; j++)
            if (best[j] < best[i]) {
                float t = best[i];
                best[i] = best[j];
                best[j] = t;
            }
    cudaFree(a);
    cudaFree(b);
    return 2.0 * (double)bytes / (best[5] * 1e-3) / 1e9;
}

static uint64_t tensor_bytes(const wtensor_t *t) {
    uint64_t n = (uint64_t)t->rows * (uint64_t)t->cols * dtype_size(t->dtype);
    if (t->scale_inv) n += (uint64_t)t->scale_rows * (uint64_t)t->scale_cols * 4;
    return n;
}

int main(int argc, char **argv) {
    if (!cuda_backend_available()) {
        printf("perf_decode: no Hopper GPU, skipped\n");
        return 77;
    }
    const char *preset = argc > 1 ? argv[1] : "qwen3-14b";
    err_t err = {{0}};
    model_source_t src = {
        .model = preset, .format = LOAD_DUMMY, .dummy_fp8 = true, .seed = 0, .lazy_dummy = true};
    model_weights_t *w;
    double t0 = now();
    if (weights_open(&src, &w, &err) < 0) die("weights", err.msg);
    const model_config_t *c = weights_config(w);
    backend_options_t o = {.gpu_memory_utilization = 0.9,
                           .max_num_batched_tokens = 2048,
                           .max_num_seqs = 256,
                           .cuda_graphs = false};
    backend_t *be;
    if (cuda_backend_ops.create(&o, w, &be, &err) < 0) die("create", err.msg);
    double t_load = now() - t0;
    int nb = (PROMPT + STEPS + BLOCK - 1) / BLOCK;
    if (backend_kv_reserve(be, nb, BLOCK, &err) < 0) die("kv_reserve", err.msg);

    uint64_t streamed = tensor_bytes(weights_global(w, G_LM_HEAD));
    for (int l = 0; l < c->n_layers; l++)
        for (int s = 0; s < L_COUNT; s++)
            streamed += tensor_bytes(weights_layer(w, l, (lslot_t)s));
    double bw = copy_bandwidth();
    double ceiling = bw * 1e9 / (double)streamed;

    int32_t table[64] = {0};
    for (int i = 0; i < nb; i++)
        table[i] = i;
    int32_t ids[PROMPT], pos[PROMPT], qs[2] = {0, PROMPT}, ctx[1] = {PROMPT}, row[1] = {PROMPT - 1};
    int64_t slots[PROMPT];
    for (int i = 0; i < PROMPT; i++) {
        ids[i] = (int32_t)((i * 7919) % c->vocab_size);
        pos[i] = i;
        slots[i] = i;
    }
    sampling_params_t sp;
    sampling_params_init(&sp);
    sp.temperature = 0.0f;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.top_k = 0;
    sp.presence_penalty = sp.frequency_penalty = 0.0f;
    sp.repetition_penalty = 1.0f;
    sp.min_tokens = 0;
    sp.logprobs = -1;
    int32_t out_ids[STEPS + 1];
    sampler_row_t srow = {.params = &sp, .prompt = ids, .n_prompt = PROMPT, .output = out_ids};
    sampler_result_t res;

    printf("| preset | graphs | load s | decode tok/s | ms/token | weight GB/token | copy GB/s | "
           "ceiling tok/s | fraction |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int graphs = 0; graphs < 2; graphs++) {
        o.cuda_graphs = graphs;
        be->ops->configure(be, &o);
        be_batch_t b = {.n_tokens = PROMPT,
                        .n_seqs = 1,
                        .token_ids = ids,
                        .positions = pos,
                        .slot_mapping = slots,
                        .query_start = qs,
                        .context_len = ctx,
                        .block_tables = table,
                        .block_table_stride = 64,
                        .n_logits = 1,
                        .logit_rows = row};
        if (backend_forward(be, &b, NULL, &err) < 0 ||
            be->ops->sample(be, &srow, 1, &res, &err) < 0)
            die("prefill", err.msg);
        int32_t tok = res.token;
        double start = 0;
        for (int i = 0; i < STEPS; i++) {
            if (i == 8) start = now(); /* warm-up: graph capture, GEMM heuristics */
            int32_t p = PROMPT + i, dq[2] = {0, 1}, dctx[1] = {p + 1}, drow[1] = {0};
            int64_t dslot[1] = {p};
            be_batch_t d = {.n_tokens = 1,
                            .n_seqs = 1,
                            .token_ids = &tok,
                            .positions = &p,
                            .slot_mapping = dslot,
                            .query_start = dq,
                            .context_len = dctx,
                            .block_tables = table,
                            .block_table_stride = 64,
                            .n_logits = 1,
                            .logit_rows = drow};
            out_ids[i] = tok;
            srow.n_output = i + 1;
            if (backend_forward(be, &d, NULL, &err) < 0 ||
                be->ops->sample(be, &srow, 1, &res, &err) < 0)
                die("decode", err.msg);
            tok = res.token;
        }
        double secs = now() - start, tps = (STEPS - 8) / secs;
        printf("| %s fp8 | %s | %.1f | %.1f | %.3f | %.2f | %.0f | %.1f | %.3f |\n", preset,
               graphs ? "on" : "off", t_load, tps, 1e3 / tps, (double)streamed / 1e9, bw, ceiling,
               tps / ceiling);
        fflush(stdout);
    }
    char desc[256];
    be->ops->describe(be, desc, sizeof desc);
    printf("\nbackend: %s\n", desc);
    backend_destroy(be);
    weights_destroy(w);
    return 0;
}

/*
 * The cuda backend's tensor parallelism (opts->tensor_parallel_size > 1): N rank instances of the
 * backend on ONE device, each with its shard of the weights (engine/shard.h: column-parallel
 * q/k/v and gate/up, row-parallel o_proj and down_proj, vocab-parallel lm_head, replicated
 * embedding and norms) and its own KV pool (its KV heads), driven in lockstep by engine/tp.h
 * (a thread per rank, the engine thread is rank 0) and joined by the single-device communicator
 * (comm_device.h). This checks the CUDA path's sharding math on a one-GPU machine (and in the
 * host emulator); the ranks share the device, so it is no faster than one rank.
 *
 * Not yet at tp > 1 (refused at create, naming them): MoE layers (so expert parallel too) and
 * Qwen3.5's Gated DeltaNet; FP8 checkpoints whose shards split a 128 x 128 scale block
 * (shard.h refuses them, as vLLM does). CUDA graphs are off (the communicator waits on the
 * host: steps run eagerly).
 */
#include "cb_backend.h"

#include <cstdio>

#include "comm_device.h"
#include "cuda_check.h"

typedef struct make_args {
    const backend_options_t *opts;
    const model_weights_t *w;
    comm_device_group_t *group;
} make_args_t;

static int make_rank(void *user, int rank, backend_t **out, err_t *err) {
    const make_args_t *a = (const make_args_t *)user;
    shard_t s = {rank, a->opts->tensor_parallel_size, false, comm_device_rank(a->group, rank)};
    return cb_create_rank(a->opts, a->w, &s, out, err);
}

static void release_group(void *group) {
    comm_device_destroy((comm_device_group_t *)group);
}

int cb_tp_create(const backend_options_t *opts, const model_weights_t *w, backend_t **out,
                 err_t *err) {
    *out = NULL;
    int n = opts->tensor_parallel_size;
    make_args_t a = {opts, w, NULL};
    if (comm_device_create(n, &a.group, err) < 0) return err_prefix(err, "cuda backend");
    if (tp_backend_create(n, make_rank, &a, release_group, a.group,
                          "ranks on one device, single-device communicator (all-reduce in rank "
                          "order)",
                          out, err) < 0)
        return -1; /* the rank's message names the backend */
    return 0;
}

int cb_all_reduce(cuda_backend_t *be, void *buf, int64_t n, err_t *err) {
    if (be->shard.tp == 1) return 0;
    static_assert(GEMM_OUT_F32, "the all-reduce sums f32 GEMM outputs");
    return comm_all_reduce_sum(be->shard.comm, (float *)buf, (size_t)n, err);
}

int cb_vocab_parallel_logits(cuda_backend_t *be, int n, float *logits, err_t *err) {
    const int tp = be->shard.tp;
    if (gemm_bf16(be->gemm, &be->lm_head, be->xf, n, be->lg_rank, true, err) < 0) return -1;
    /* every rank sends n rows of vpad (its own vn columns first): the same bytes on every rank */
    size_t bytes = (size_t)n * (size_t)be->vpad * 4;
    if (comm_all_gather(be->shard.comm, be->lg_rank, bytes, be->lg_all, err) < 0) return -1;
    if (be->shard.rank != 0) return 0;
    for (int q = 0; q < tp; q++) {
        int64_t v0, vn, vpad;
        shard_vocab(be->V, q, tp, &v0, &vn, &vpad);
        /* rank q's [n, vn] block, rows packed, into columns [v0, v0 + vn) of logits [n, V] */
        CUDA_CHECK(cudaMemcpy2DAsync(logits + v0, (size_t)be->V * 4,
                                     (const char *)be->lg_all + (size_t)q * bytes, (size_t)vn * 4,
                                     (size_t)vn * 4, (size_t)n, cudaMemcpyDeviceToDevice,
                                     be->stream),
                   err);
    }
    return 0;
}

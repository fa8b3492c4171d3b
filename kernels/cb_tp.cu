/*
 * The cuda backend's tensor parallelism (opts->tensor_parallel_size > 1): N rank instances of the
 * backend on ONE device, each with its shard of the weights and its own KV pool (its KV heads),
 * driven in lockstep by engine/tp.h (a thread per rank, the engine thread is rank 0) and joined
 * by the single-device communicator (comm_gpu.h). The shards (engine/shard.h): column-parallel
 * q/k/v and gate/up (gated attention: q | gate rows by head), row-parallel o_proj and
 * down_proj, every MoE expert sliced the same way (or, with expert parallel, a range of whole
 * experts per rank, cb_moe.cu) with the router replicated, the Gated
 * DeltaNet by key and value heads (in_proj_qkv and conv1d as three row blocks, out_proj
 * row-parallel; each rank's state slots hold its heads), vocab-parallel lm_head, replicated
 * embedding and norms. This checks the CUDA path's sharding math on a one-GPU machine (and in
 * the host emulator); the ranks share the device, so it is no faster than one rank. Where NCCL
 * is built (TACHYON_HAVE_NCCL) and N devices exist from backend_options_t.device on, rank r runs
 * on device + r with the NCCL communicator instead (comm_gpu.h: run over an emulated NCCL in the
 * host emulation, not yet on two real GPUs); several GPUs but too few, or no NCCL: refused,
 * naming what is missing.
 *
 * Not at tp > 1 (refused at create, naming them): FP8 checkpoints whose shards split a 128 x 128
 * scale block (shard.h refuses them, as vLLM does).
 * CUDA graphs: over NCCL each rank captures and replays its own (its collectives inside them,
 * comm_ops_t.graph_safe), all ranks alike, as NCCL requires (a collective graph-captured on every
 * rank or on none: "Using NCCL with CUDA Graphs"): the ranks capture at the same step of the one
 * step plan, agree on each capture (one that fails anywhere turns graphs off everywhere,
 * cb_step.cu), and a traced MoE step runs eagerly on every rank (backend.h trace_routing). Over
 * the single-device communicator graphs are off (it meets the ranks on the host).
 */
#include "cb_backend.h"

#include <cstdio>

#include "comm_gpu.h"
#include "cuda_check.h"

typedef struct make_args {
    const backend_options_t *opts;
    const model_weights_t *w;
    comm_gpu_group_t *group;
    bool nccl; /* rank r on device opts->device + r */
} make_args_t;

static int make_rank(void *user, int rank, backend_t **out, comm_t **comm_out, err_t *err) {
    const make_args_t *a = (const make_args_t *)user;
    backend_options_t ro = *a->opts;
    if (a->nccl) ro.device = a->opts->device + rank;
    comm_t *c = comm_gpu_rank(a->group, rank);
    *comm_out = c;
    const bool ep = a->opts->expert_parallel && weights_config(a->w)->n_experts > 0;
    shard_t s = {rank, a->opts->tensor_parallel_size, ep, c};
    if (cb_create_rank(&ro, a->w, &s, out, err) < 0) return -1;
    comm_gpu_bind(c, ((cuda_backend_t *)*out)->stream);
    return 0;
}

static void release_group(void *group) {
    comm_gpu_destroy((comm_gpu_group_t *)group);
}

int cb_tp_create(const backend_options_t *opts, const model_weights_t *w, backend_t **out,
                 err_t *err) {
    *out = NULL;
    int n = opts->tensor_parallel_size, count = 0;
    if (n < 2 || n > COMM_MAX_RANKS)
        return err_set(err, "cuda backend: tensor parallel %d (1..%d)", n, COMM_MAX_RANKS);
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    make_args_t a = {opts, w, NULL, false};
    /* a rank per GPU over NCCL; on a one-GPU machine the ranks share it (the sharding checked,
     * no faster than one rank); a machine with several GPUs but too few from `device` on, or no
     * NCCL in this build, is refused rather than quietly run on one of them */
    a.nccl = comm_gpu_have_nccl() && opts->device >= 0 && opts->device + n <= count;
    if (!a.nccl && count > 1) {
        if (opts->device + n > count)
            return err_set(err,
                           "cuda backend: tensor parallel %d takes a GPU per rank, devices %d..%d, "
                           "and this machine has %d (0..%d); ask for fewer ranks (or, to share "
                           "one GPU among the ranks as a check, CUDA_VISIBLE_DEVICES=<one>)",
                           n, opts->device, opts->device + n - 1, count, count - 1);
        return err_set(err,
                       "cuda backend: tensor parallel %d over %d GPUs needs NCCL, which this "
                       "build lacks (install libnccl-dev and rebuild: CMake reports \"Tachyon "
                       "NCCL communicator\")",
                       n, n);
    }
    if (!a.nccl)
        fprintf(stderr,
                "tachyon: cuda: tensor parallel %d on ONE GPU (device %d): the ranks share it, "
                "a check of the sharding, no faster than one rank\n",
                n, opts->device);
    int rc;
    if (a.nccl) {
        int devices[COMM_MAX_RANKS];
        for (int r = 0; r < n; r++)
            devices[r] = opts->device + r;
        rc = comm_gpu_create_nccl(n, devices, &a.group, err);
    } else {
        rc = comm_gpu_create_one_device(n, &a.group, err);
    }
    if (rc < 0) return err_prefix(err, "cuda backend");
    const bool ep = opts->expert_parallel && weights_config(w)->n_experts > 0;
    const char *how = a.nccl ? (ep ? "a GPU per rank, NCCL communicator, experts whole (expert "
                                     "parallel)"
                                   : "a GPU per rank, NCCL communicator")
                             : (ep ? "ranks on one device, single-device communicator (all-reduce "
                                     "in rank order), experts whole (expert parallel)"
                                   : "ranks on one device, single-device communicator (all-reduce "
                                     "in rank order)");
    if (tp_backend_create(n, make_rank, &a, release_group, a.group, how, out, err) < 0)
        return -1; /* the rank's message names the backend; the group is released */
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

/*
 * The cuda backend: a model's forward pass over one varlen batch per step on a Hopper GPU,
 * following the CPU reference (engine/cpu/cpu_backend.c) layer kind by layer kind with
 * kernels/ops.h's kernels and kernels/gemm.h's cuBLASLt GEMMs (FP8 block-scaled W8A8, or BF16).
 * This file is the backend_ops_t table: create (device, memory plan, weights, workspaces),
 * destroy, the KV pool, device sampling glue, the live options. The rest is in cb_weights.cu
 * (weights on the device), cb_layers.cu (the layer stack) and cb_step.cu (batches, pieces,
 * graphs); cb_backend.h has the state they share.
 */
#include "cb_backend.h"

#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cb_internal.h"
#include "cuda_backend.h"
#include "cuda_check.h"

int cb_alloc_dev(cuda_backend_t *be, void **p, size_t bytes, const char *what, err_t *err) {
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return memplan_oom(&be->plan, what, bytes, err);
    }
    if (e != cudaSuccess)
        return err_set(err, "%s:%d: cudaMalloc(%s, %zu bytes): %s", __FILE__, __LINE__, what, bytes,
                       cudaGetErrorString(e));
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Backend operations

static void cb_destroy(backend_t *base) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    if (!be) return;
    if (be->stream) cudaStreamSynchronize(be->stream);
    cb_drop_graphs(be);
    gemm_destroy(be->gemm);
    cudaFree(be->wmem);
    cudaFree(be->amem);
    cudaFree(be->kv_mem);
    cudaFree(be->state_mem);
    cudaFree(be->attn_ws);
    cudaFree(be->meta_d);
    cudaFree(be->tables_d);
    cudaFree(be->srows_d);
    cudaFree(be->sres_d);
    cudaFree(be->arena_d);
    cudaFreeHost(be->meta_h);
    cudaFreeHost(be->tables_h);
    cudaFreeHost(be->srows_h);
    cudaFreeHost(be->sres_h);
    cudaFreeHost(be->arena_h);
    if (be->sample_done) cudaEventDestroy(be->sample_done);
    if (be->stream) cudaStreamDestroy(be->stream);
    free(be->layers);
    free(be->moe.views);
    free(be);
}

/* Layers with K/V in the pool: the attention layers, and the MTP head's when it has them. */
static int kv_layers(const cuda_backend_t *be, bool mtp) {
    return be->n_attn + (mtp ? be->n_mtp : 0);
}

static size_t cb_kv_block_bytes(const backend_t *base, int block_size) {
    const cuda_backend_t *be = (const cuda_backend_t *)base;
    return 2 * (size_t)kv_layers(be, be->mtp_next) *
           ops_kv_pool_bytes(1, block_size, be->nKV, be->D, be->kv_dtype_next);
}

/* Bytes of one layer's conv window and SSM state in a slot, and of a slot. */
static size_t state_layer_bytes(const cuda_backend_t *be, bool ssm_bf16, size_t *conv_bytes) {
    *conv_bytes = align_up((size_t)(be->K - 1) * (size_t)be->C * 4);
    return *conv_bytes +
           align_up((size_t)be->Hv * (size_t)be->dk * (size_t)be->dv * (ssm_bf16 ? 2 : 4));
}
static size_t state_slot_bytes(const cuda_backend_t *be, bool ssm_bf16) {
    size_t conv;
    return (size_t)be->n_linear * state_layer_bytes(be, ssm_bf16, &conv);
}

static size_t cb_state_bytes(const backend_t *base) {
    const cuda_backend_t *be = (const cuda_backend_t *)base;
    return be->n_linear ? state_slot_bytes(be, be->ssm_bf16_next) : 0;
}

static int cb_state_reserve(backend_t *base, int n_slots, err_t *err) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    CUDA_CHECK(cudaSetDevice(be->device), err);
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    cb_drop_graphs(be);
    cudaFree(be->state_mem);
    be->state_mem = NULL;
    be->n_slots = 0;
    if (n_slots < 0 || !be->n_linear)
        return err_set(err, "cuda backend: %d state slots for a model with %d linear layers",
                       n_slots, be->n_linear);
    size_t bytes = (size_t)n_slots * state_slot_bytes(be, be->ssm_bf16_next);
    if (cb_alloc_dev(be, &be->state_mem, bytes, "the recurrent-state slots", err) < 0) return -1;
    CUDA_CHECK(cudaMemsetAsync(be->state_mem, 0, bytes ? bytes : 1, be->stream), err);
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    be->n_slots = n_slots;
    be->ssm_bf16 = be->ssm_bf16_next;
    return 0;
}

static int cb_state_copy(backend_t *base, int src, int dst, err_t *err) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    if (src < 0 || src >= be->n_slots || dst < 0 || dst >= be->n_slots)
        return err_set(err, "cuda backend: state copy %d -> %d outside %d slots", src, dst,
                       be->n_slots);
    if (src == dst) return 0;
    size_t slot = state_slot_bytes(be, be->ssm_bf16);
    CUDA_CHECK(cudaMemcpyAsync((char *)be->state_mem + (size_t)dst * slot,
                               (const char *)be->state_mem + (size_t)src * slot, slot,
                               cudaMemcpyDeviceToDevice, be->stream),
               err);
    return 0;
}

ops_gdn_args_t cb_gdn_args(const cuda_backend_t *be, int li, int T, int n_seqs) {
    ops_gdn_args_t a = {};
    a.T = T;
    a.n_seqs = n_seqs;
    a.Hk = be->Hk;
    a.Hv = be->Hv;
    a.dk = be->dk;
    a.dv = be->dv;
    a.K = be->K;
    a.C = be->C;
    a.query_start = be->qs_d;
    a.context_len = be->ctx_d;
    a.state_slots = be->sslots_d;
    if (li < 0 || !be->state_mem) return a;
    size_t conv, layer = state_layer_bytes(be, be->ssm_bf16, &conv);
    size_t slot = (size_t)be->n_linear * layer, esize = be->ssm_bf16 ? 2 : 4;
    char *base = (char *)be->state_mem + (size_t)li * layer;
    a.state.conv = (float *)base;
    a.state.ssm = base + conv;
    a.state.conv_slot_stride = (int64_t)(slot / 4);
    a.state.ssm_slot_stride = (int64_t)(slot / esize);
    a.state.ssm_bf16 = be->ssm_bf16;
    return a;
}

static uint64_t cb_kv_pool_bytes(const backend_t *base, double utilization) {
    const cuda_backend_t *be = (const cuda_backend_t *)base;
    size_t free_b = 0, total = 0;
    if (cudaSetDevice(be->device) != cudaSuccess || cudaMemGetInfo(&free_b, &total) != cudaSuccess)
        return 0;
    uint64_t current = be->kv_mem ? 2 * (uint64_t)kv_layers(be, be->mtp) * be->pool_bytes : 0;
    if (be->state_mem) current += (uint64_t)be->n_slots * state_slot_bytes(be, be->ssm_bf16);
    /* what others hold: the used memory less our pool (a device that reports less used than our
     * pool, as the host emulation does, holds nothing else) */
    uint64_t used = total - free_b, others = used > current ? used - current : 0;
    double left = utilization * (double)total - (double)others - (double)RESERVE_BYTES;
    return left > 0 ? (uint64_t)left : 0;
}

static int cb_kv_reserve(backend_t *base, int num_blocks, int block_size, err_t *err) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    CUDA_CHECK(cudaSetDevice(be->device), err);
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    cb_drop_graphs(be);
    cudaFree(be->kv_mem);
    be->kv_mem = NULL;
    be->num_blocks = be->block_size = 0;
    /* the state slots go too (state_reserve follows for models with state): the new pool may
     * need their memory */
    cudaFree(be->state_mem);
    be->state_mem = NULL;
    be->n_slots = 0;
    if (num_blocks < 1 || (block_size != 16 && block_size != 32))
        return err_set(err, "cuda backend: KV pool of %d blocks of %d tokens (block size 16 or 32)",
                       num_blocks, block_size);
    size_t pool = ops_kv_pool_bytes(num_blocks, block_size, be->nKV, be->D, be->kv_dtype_next);
    pool = align_up(pool);
    int layers = kv_layers(be, be->mtp_next);
    size_t total = 2 * (size_t)(layers > 0 ? layers : 1) * pool;
    if (cb_alloc_dev(be, &be->kv_mem, total, "the KV cache", err) < 0) return -1;
    /* finite values everywhere: padded decode rows read block 0 */
    CUDA_CHECK(cudaMemsetAsync(be->kv_mem, 0, total, be->stream), err);
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    be->pool_bytes = pool;
    be->kv_dtype = be->kv_dtype_next;
    be->mtp = be->mtp_next;
    be->hid_rows = be->hid_mtp_rows = 0;
    be->num_blocks = num_blocks;
    be->block_size = block_size;
    fprintf(stderr, "tachyon: cuda KV cache: %.2f GiB %s, %d blocks of %d tokens = %lld tokens\n",
            (double)total / (double)(1ull << 30), be->kv_dtype == OPS_KV_FP8 ? "fp8" : "bf16",
            num_blocks, block_size, (long long)num_blocks * block_size);
    return 0;
}

/* Queues the sampling of n_rows rows of the last forward's logits and the copy of the results
 * to be->sres_h; returns without waiting. */
static int sample_enqueue(cuda_backend_t *be, const sampler_row_t *rows, int n_rows, err_t *err) {
    if (n_rows > be->logits_rows)
        return err_set(err,
                       "cuda backend: sampling %d rows but the last forward left %d on the device",
                       n_rows, be->logits_rows);
    size_t need = 0;
    for (int i = 0; i < n_rows; i++) {
        const sampling_params_t *p = rows[i].params;
        bool rep = p->repetition_penalty != 1.0f;
        bool pen = rep || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f;
        if (rep) need += (size_t)rows[i].n_prompt;
        if (pen) need += (size_t)rows[i].n_output;
        if (rows[i].n_output < p->min_tokens)
            need += (size_t)rows[i].n_eos + (size_t)p->n_stop_token_ids;
    }
    /* The sampler's staging is its own (the forward's may still be in flight): free once the
     * last sample() synchronized the stream, or a forward since sample_begin did (stage_piece) */
    if (be->sampler_busy) {
        CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
        be->sampler_busy = be->staging_busy = false;
    }
    if (cb_grow_arena(be, need + 1, err) < 0) return -1;
    size_t at = 0;
    for (int i = 0; i < n_rows; i++) {
        const sampler_row_t *r = &rows[i];
        const sampling_params_t *p = r->params;
        ops_sample_row_t *o = &be->srows_h[i];
        memset(o, 0, sizeof *o);
        o->temperature = p->temperature;
        o->top_p = p->top_p;
        o->min_p = p->min_p;
        o->presence_penalty = p->presence_penalty;
        o->frequency_penalty = p->frequency_penalty;
        o->repetition_penalty = p->repetition_penalty;
        o->top_k = p->top_k > 0 ? p->top_k : 0;
        o->min_tokens = p->min_tokens;
        o->logprobs = p->logprobs;
        o->n_output = r->n_output;
        o->seed = r->seed;
        o->choice = r->choice;
        bool rep = p->repetition_penalty != 1.0f;
        bool pen = rep || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f;
        if (rep) {
            o->prompt_off = (int64_t)at;
            o->n_prompt_tokens = r->n_prompt;
            memcpy(be->arena_h + at, r->prompt, (size_t)r->n_prompt * 4);
            at += (size_t)r->n_prompt;
        }
        if (pen) {
            o->output_off = (int64_t)at;
            o->n_output_tokens = r->n_output;
            memcpy(be->arena_h + at, r->output, (size_t)r->n_output * 4);
            at += (size_t)r->n_output;
        }
        if (r->n_output < p->min_tokens) {
            o->mask_off = (int64_t)at;
            o->n_mask = r->n_eos + p->n_stop_token_ids;
            memcpy(be->arena_h + at, r->eos_ids, (size_t)r->n_eos * 4);
            at += (size_t)r->n_eos;
            memcpy(be->arena_h + at, p->stop_token_ids, (size_t)p->n_stop_token_ids * 4);
            at += (size_t)p->n_stop_token_ids;
        }
    }
    CUDA_CHECK(cudaMemcpyAsync(be->srows_d, be->srows_h, (size_t)n_rows * sizeof *be->srows_h,
                               cudaMemcpyHostToDevice, be->stream),
               err);
    if (at)
        CUDA_CHECK(
            cudaMemcpyAsync(be->arena_d, be->arena_h, at * 4, cudaMemcpyHostToDevice, be->stream),
            err);
    if (ops_sample(be->logits, be->V, n_rows, be->V, be->srows_d, be->arena_d, be->counts,
                   be->sres_d, be->stream, err) < 0) {
        cudaStreamSynchronize(be->stream);
        return -1;
    }
    CUDA_CHECK(cudaMemcpyAsync(be->sres_h, be->sres_d, (size_t)n_rows * sizeof *be->sres_h,
                               cudaMemcpyDeviceToHost, be->stream),
               err);
    return 0;
}

static int cb_sample(backend_t *base, const sampler_row_t *rows, int n_rows, sampler_result_t *out,
                     err_t *err) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    if (n_rows == 0) return 0;
    if (be->sample_pending)
        return err_set(err, "cuda backend: sample() while a sample_begin is pending");
    CUDA_CHECK(cudaSetDevice(be->device), err); /* the caller's thread may have another current */
    if (sample_enqueue(be, rows, n_rows, err) < 0) return -1;
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    be->staging_busy = be->sampler_busy = false;
    memcpy(out, be->sres_h, (size_t)n_rows * sizeof *out);
    return 0;
}

/* Asynchronous scheduling (backend.h): the sampling is queued behind the forward, an event
 * marks its results' arrival in be->sres_h, and the next forward's placeholders read be->sres_d
 * on the device (stage_piece). */
static int cb_sample_begin(backend_t *base, const sampler_row_t *rows, int n_rows, err_t *err) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    if (be->sample_pending)
        return err_set(err, "cuda backend: sample_begin while another is pending");
    if (n_rows == 0) return 0;
    CUDA_CHECK(cudaSetDevice(be->device), err);
    if (sample_enqueue(be, rows, n_rows, err) < 0) return -1;
    CUDA_CHECK(cudaEventRecord(be->sample_done, be->stream), err);
    be->sample_pending = n_rows;
    be->sampler_busy = be->staging_busy = true;
    return 0;
}

static int cb_sample_end(backend_t *base, sampler_result_t *out, err_t *err) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    int n_rows = be->sample_pending;
    if (n_rows == 0) return 0;
    be->sample_pending = 0;
    CUDA_CHECK(cudaEventSynchronize(be->sample_done), err);
    memcpy(out, be->sres_h, (size_t)n_rows * sizeof *out);
    return 0;
}

int cb_greedy_rows(cuda_backend_t *be, int n_rows, err_t *err) {
    if (n_rows > be->cap_l)
        return err_set(err, "cuda backend: %d greedy rows, more than %d", n_rows, be->cap_l);
    /* the sampler's staging: free, the last sample() or forward ended synchronized */
    for (int i = 0; i < n_rows; i++) {
        ops_sample_row_t *o = &be->srows_h[i];
        memset(o, 0, sizeof *o);
        o->temperature = 0.0f; /* greedy: the argmax, nothing masked or penalized */
        o->top_p = 1.0f;
        o->repetition_penalty = 1.0f;
        o->logprobs = -1;
    }
    CUDA_CHECK(cudaMemcpyAsync(be->srows_d, be->srows_h, (size_t)n_rows * sizeof *be->srows_h,
                               cudaMemcpyHostToDevice, be->stream),
               err);
    return 0;
}

int cb_greedy_ids(cuda_backend_t *be, int n_rows, int32_t *ids, err_t *err) {
    if (n_rows <= 0) return 0;
    if (cb_greedy_rows(be, n_rows, err) < 0 ||
        ops_sample(be->logits, be->V, n_rows, be->V, be->srows_d, be->arena_d, be->counts,
                   be->sres_d, be->stream, err) < 0)
        return -1;
    CUDA_CHECK(cudaMemcpyAsync(be->sres_h, be->sres_d, (size_t)n_rows * sizeof *be->sres_h,
                               cudaMemcpyDeviceToHost, be->stream),
               err);
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    for (int i = 0; i < n_rows; i++)
        ids[i] = be->sres_h[i].token;
    return 0;
}

static void cb_describe(const backend_t *base, char *buf, size_t size) {
    const cuda_backend_t *be = (const cuda_backend_t *)base;
    const char *kv = be->kv_dtype != OPS_KV_FP8 ? ""
                     : weights_kv_scales_loaded(be->w) > 0
                         ? ", kv fp8 (the checkpoint's k/v scales)"
                         : ", kv fp8 (k/v scales 1.0)";
    snprintf(buf, size, "cuda, %s (sm_%d%d), %s, graphs %s%s%s", be->device_name, be->sm_major,
             be->sm_minor, be->fp8 ? "fp8 w8a8" : "bf16", be->graphs ? "on" : "off", kv,
             be->mtp ? ", MTP head" : "");
}

static void cb_configure(backend_t *base, const backend_options_t *opts) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    int seqs = opts->max_num_seqs > 0 ? opts->max_num_seqs : DEFAULT_MAX_SEQS;
    be->graphs = opts->cuda_graphs && cb_graphs_possible(be); /* as at create */
    /* takes effect at the next kv_reserve (the engine rebuilds the pool after this) */
    be->kv_dtype_next = opts->kv_cache_dtype == KV_DTYPE_FP8 ? OPS_KV_FP8 : OPS_KV_BF16;
    be->mtp_next = opts->mtp && be->n_mtp > 0;
    be->ssm_bf16_next = opts->ssm_state_bf16;
    if (seqs != be->max_seqs_live) {
        cudaStreamSynchronize(be->stream);
        be->max_seqs_live = seqs;
        cb_plan_graphs(be);
    }
}

/* True (err filled) when the weights alone exceed the device's share: the model needs more
 * GPUs, which the message counts with shard_plan (the smallest tensor-parallel size whose share
 * fits), rather than the generic out-of-memory advice. */
static bool weights_too_large(const cuda_backend_t *be, err_t *err) {
    const memplan_t *p = &be->plan;
    double budget = p->utilization * (double)p->device_total;
    if ((double)p->weights <= budget) return false;
    char fits[200] = "no tensor-parallel size up to 8 fits either";
    for (int tp = 2; tp <= 8; tp *= 2)
        for (int ep = 0; ep <= (be->cfg->n_experts > 0); ep++) {
            shard_plan_t s;
            shard_plan_make(be->cfg, tp, ep, &s);
            if (!s.valid || (double)(s.weights + SHARD_PLAN_OVERHEAD) >= budget || fits[0] != 'n')
                continue;
            snprintf(fits, sizeof fits, "at %s %d each GPU would hold %.1f GiB",
                     ep ? "expert parallel" : "tensor-parallel-size", tp,
                     (double)s.weights / (double)(1ull << 30));
        }
    err_set(err,
            "the weights alone take %.1f GiB but %s has %.1f GiB (gpu-memory-utilization %.2f of "
            "%.1f GiB): this model needs several GPUs (%s; --tensor-parallel-size N puts a rank "
            "on each of N GPUs in a build with NCCL, not yet tested on several GPUs)",
            (double)p->weights / (double)(1ull << 30), be->device_name,
            budget / (double)(1ull << 30), p->utilization,
            (double)p->device_total / (double)(1ull << 30), fits);
    return true;
}

/* CUDA_CHECK for cb_create, which must free what it made: jumps to its `fail` label. */
#define TRY_CUDA(call)                                                                             \
    do {                                                                                           \
        cudaError_t try_e_ = (call);                                                               \
        if (try_e_ != cudaSuccess) {                                                               \
            err_set(err, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(try_e_));  \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

int cb_create_rank(const backend_options_t *opts, const model_weights_t *w, const shard_t *shard,
                   backend_t **out, err_t *err) {
    *out = NULL;
    const model_config_t *c = weights_config(w);
    int device = opts ? opts->device : 0, count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return err_set(err, "cuda backend: no CUDA device (%s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    if (device < 0 || device >= count)
        return err_set(err, "cuda backend: device %d does not exist (%d found)", device, count);
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device), err);
    if (prop.major != 9)
        return err_set(err, "cuda backend: %s is sm_%d%d; this build runs on Hopper (sm_90) only",
                       prop.name, prop.major, prop.minor);
    CUDA_CHECK(cudaSetDevice(device), err);

    cuda_backend_t *be = (cuda_backend_t *)calloc(1, sizeof *be);
    if (!be) return err_set(err, "cuda backend: out of memory");
    be->base.ops = &cuda_backend_ops;
    be->shard = *shard;
    if (shard_config(c, shard, &be->lcfg, err) < 0) {
        free(be);
        return err_prefix(err, "cuda backend: tensor parallel %d", shard->tp);
    }
    be->cfg = c = &be->lcfg;
    shard_vocab(c->vocab_size, shard->rank, shard->tp, &be->v0, &be->vn, &be->vpad);
    be->w = w;
    be->device = device;
    snprintf(be->device_name, sizeof be->device_name, "%s", prop.name);
    if (cudaDeviceGetPCIBusId(be->pci_bus_id, (int)sizeof be->pci_bus_id, device) != cudaSuccess)
        be->pci_bus_id[0] = '\0';
    be->load_progress = opts ? opts->load_progress : NULL;
    be->load_progress_user = opts ? opts->load_progress_user : NULL;
    be->load_total = weights_bytes(w);
    be->sm_major = prop.major;
    be->sm_minor = prop.minor;
    be->num_sms = prop.multiProcessorCount;
    be->H = c->hidden_size;
    be->D = c->head_dim;
    be->nH = c->n_heads;
    be->nKV = c->n_kv_heads;
    be->qd = model_q_dim(c);
    be->kvd = model_kv_dim(c);
    be->qkv_n = be->qd + 2 * be->kvd;
    be->qkv_max = model_count_attn(c, ATTN_GATED) ? 2 * be->qd + 2 * be->kvd : be->qkv_n;
    be->rotary_dim = c->rotary_dim;
    be->Hk = c->lin_k_heads;
    be->Hv = c->lin_v_heads;
    be->dk = c->lin_k_dim;
    be->dv = c->lin_v_dim;
    be->K = c->lin_conv_kernel;
    be->C = model_lin_conv_dim(c);
    be->ssm_bf16_next = opts && opts->ssm_state_bf16;
    be->I = 0; /* the dense MLPs' (an MoE model may have none: no workspace for them) */
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer[l].mlp == MLP_DENSE) be->I = c->intermediate_size;
    be->V = c->vocab_size;
    be->L = c->n_layers;
    /* the MTP head, its layers dense (an MoE MTP layer is not run here) */
    be->n_mtp = c->n_mtp_layers;
    for (int i = 0; i < be->n_mtp; i++)
        if (c->layer[be->L + i].mlp != MLP_DENSE) be->n_mtp = 0;
    be->mtp_next = opts && opts->mtp && be->n_mtp > 0;
    be->eps = c->rms_norm_eps;
    be->logits_rows = -1;
    be->layers = (cb_layer_t *)calloc((size_t)(be->L + be->n_mtp), sizeof *be->layers);
    int rc = -1;
    size_t free_b = 0, total = 0;
    if (!be->layers) {
        err_set(err, "cuda backend: out of memory");
        goto fail;
    }
    if (be->H % 8 || be->nH % be->nKV || be->nH / be->nKV > OPS_MAX_GROUP ||
        (be->D != 64 && be->D != 128 && be->D != 256)) {
        err_set(err,
                "cuda backend: hidden %d, %d/%d heads of %d: unsupported (hidden a multiple of "
                "8, head_dim 64/128/256, at most %d query heads per KV head)",
                be->H, be->nH, be->nKV, be->D, OPS_MAX_GROUP);
        goto fail;
    }
    for (int l = 0; l < be->L; l++) {
        bool lin = c->layer[l].attn == ATTN_LINEAR;
        be->layers[l].attn = lin ? -1 : be->n_attn++;
        be->layers[l].linear = lin ? be->n_linear++ : -1;
    }
    for (int l = 0; l < be->L + be->n_mtp; l++)
        weights_kv_scales(w, l, &be->layers[l].k_scale, &be->layers[l].v_scale);
    for (int i = 0; i < be->n_mtp; i++) { /* their K/V after every attention layer's */
        be->layers[be->L + i].attn = be->n_attn + i;
        be->layers[be->L + i].linear = -1;
    }
    if (be->rotary_dim < 2 || be->rotary_dim % 2 || be->rotary_dim > be->D) {
        err_set(err, "cuda backend: RoPE on %d of %d head dims", be->rotary_dim, be->D);
        goto fail;
    }
    if (model_count_attn(c, ATTN_FULL) && be->D == 256) {
        err_set(err, "cuda backend: head_dim 256 needs gated attention layers (Qwen3.5)");
        goto fail;
    }
    if (model_count_attn(c, ATTN_FULL) && be->rotary_dim != be->D) {
        err_set(err, "cuda backend: partial RoPE needs gated attention layers (Qwen3.5)");
        goto fail;
    }
    if (be->n_linear) {
        ops_gdn_args_t g = cb_gdn_args(be, -1, 0, 0);
        if (ops_gdn_check(&g, err) < 0) goto fail;
    }
    if (cb_moe_shard(be, err) < 0 || cb_check_weights(be, err) < 0) goto fail;
    be->I_pad = (be->I + 127) / 128 * 128;
    TRY_CUDA(cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking));
    TRY_CUDA(cudaEventCreate(&be->sample_done));
    if (gemm_create(be->stream, GEMM_WORKSPACE, &be->gemm, err) < 0) goto fail;
    {
        int tokens = opts && opts->max_num_batched_tokens > 0 ? opts->max_num_batched_tokens
                                                              : DEFAULT_MAX_TOKENS;
        int seqs = opts && opts->max_num_seqs > 0 ? opts->max_num_seqs : DEFAULT_MAX_SEQS;
        int graph_max = seqs < MAX_GRAPH_SIZE ? seqs : MAX_GRAPH_SIZE;
        if (tokens < graph_max) tokens = graph_max;
        be->cap_t = gemm_pad_t(tokens);
        be->cap_s = seqs;
        be->cap_l = seqs > 256 ? seqs : 256;
        be->max_seqs_live = seqs;
        be->graphs = opts && opts->cuda_graphs && cb_graphs_possible(be);
        if (opts && opts->cuda_graphs && !be->graphs && shard->rank == 0)
            fprintf(stderr,
                    "tachyon: cuda: CUDA graphs off at tensor parallel %d (the %s communicator "
                    "meets the ranks on the host, which a graph cannot capture)\n",
                    shard->tp, shard->comm->ops->name);
        be->kv_dtype_next = opts && opts->kv_cache_dtype == KV_DTYPE_FP8 ? OPS_KV_FP8 : OPS_KV_BF16;
        be->kv_dtype = be->kv_dtype_next;
    }
    be->fp8 = c->fp8 && cb_fp8_possible(be);
    if (!be->fp8) be->I_pad = (be->I + 7) / 8 * 8;
    if (c->fp8 && !be->fp8)
        fprintf(stderr, "tachyon: cuda: FP8 checkpoint runs as BF16 (dequantized at load): %s\n",
                be->fp8_why);
    be->kmax = be->H > be->qd ? be->H : be->qd;
    if (be->I_pad > be->kmax) be->kmax = be->I_pad;
    if (be->n_linear && be->Hv * be->dv > be->kmax) be->kmax = be->Hv * be->dv;
    if (be->n_mtp && 2 * be->H > be->kmax) be->kmax = 2 * be->H; /* the head's fc */
    be->mtp_fc_bf16 = be->n_mtp && (!be->fp8 || weights_global(w, G_MTP_FC)->dtype != DT_F8_E4M3);
    if (cb_probe_gemms(be, err) < 0) goto fail;
    cb_moe_init(be);

    if (ops_init(err) < 0 || (be->n_linear && ops_gdn_init(err) < 0)) goto fail;
    TRY_CUDA(cudaMemGetInfo(&free_b, &total));
    {
        size_t weight_bytes = cb_layout_weights(be, NULL);
        memplan_t *pl = &be->plan;
        pl->device_total = total;
        pl->device_free = free_b;
        pl->utilization = opts ? opts->gpu_memory_utilization : 0.9;
        pl->weights = weight_bytes;
        pl->activations = cb_layout_activations(be, NULL);
        pl->logits = cb_layout_logits(be, NULL);
        pl->workspaces = GEMM_WORKSPACE +
                         ops_attention_workspace_bytes(SPLIT_MAX_SEQS, be->nH, be->D, MAX_SPLITS) +
                         2 * cb_layout_meta(be, NULL, false);
        pl->reserve = RESERVE_BYTES;
        pl->max_tokens = be->cap_t;
        pl->max_seqs = be->cap_s;
        pl->kv_block_bytes = cb_kv_block_bytes(&be->base, 16);
        pl->block_size = 16;
        if (be->plan.utilization <= 0) be->plan.utilization = 0.9;
        memplan_print(&be->plan, stderr);

        if (weights_too_large(be, err)) goto fail;
        if (cb_alloc_dev(be, &be->wmem, weight_bytes, "the weights", err) < 0) goto fail;
        TRY_CUDA(cudaMemsetAsync(be->wmem, 0, weight_bytes, be->stream));
        cb_layout_weights(be, (char *)be->wmem);
        if (cb_upload_weights(be, err) < 0) goto fail;

        size_t act = align_up(be->plan.activations), lg = align_up(be->plan.logits);
        if (cb_alloc_dev(be, &be->amem, act + lg, "the activation workspace and logits", err) < 0)
            goto fail;
        cb_layout_activations(be, (char *)be->amem);
        cb_layout_logits(be, (char *)be->amem + act);
        TRY_CUDA(cudaMemsetAsync(be->counts, 0, ops_sample_workspace_bytes(be->cap_l, be->V),
                                 be->stream));
        if (be->moe.E)
            TRY_CUDA(cudaMemsetAsync(be->moe.load, 0, (size_t)be->L * be->moe.E * 8, be->stream));
        size_t aws = ops_attention_workspace_bytes(SPLIT_MAX_SEQS, be->nH, be->D, MAX_SPLITS);
        if (cb_alloc_dev(be, &be->attn_ws, aws, "the decode attention workspace", err) < 0)
            goto fail;
        be->meta_bytes = cb_layout_meta(be, NULL, false);
        if (cb_alloc_dev(be, &be->meta_d, be->meta_bytes, "step metadata", err) < 0) goto fail;
        TRY_CUDA(cudaMallocHost(&be->meta_h, be->meta_bytes));
        cb_layout_meta(be, (char *)be->meta_d, false);
        cb_layout_meta(be, (char *)be->meta_h, true);
        if (cb_alloc_dev(be, (void **)&be->srows_d, (size_t)be->cap_l * sizeof(ops_sample_row_t),
                         "sampler rows", err) < 0 ||
            cb_alloc_dev(be, (void **)&be->sres_d, (size_t)be->cap_l * sizeof(sampler_result_t),
                         "sampler results", err) < 0)
            goto fail;
        TRY_CUDA(
            cudaMallocHost((void **)&be->srows_h, (size_t)be->cap_l * sizeof(ops_sample_row_t)));
        TRY_CUDA(
            cudaMallocHost((void **)&be->sres_h, (size_t)be->cap_l * sizeof(sampler_result_t)));
        if (cb_grow_tables(be, (size_t)be->cap_s * 64, err) < 0 ||
            cb_grow_arena(be, 1 << 16, err) < 0)
            goto fail;
        TRY_CUDA(cudaStreamSynchronize(be->stream));
    }
    cb_plan_graphs(be);
    *out = &be->base;
    rc = 0;
fail:
    if (rc < 0) {
        err_prefix(err, "cuda backend");
        cb_destroy(&be->base);
    }
    return rc;
}

static int cb_create(const backend_options_t *opts, const model_weights_t *w, backend_t **out,
                     err_t *err) {
    if (opts && opts->tensor_parallel_size > 1) return cb_tp_create(opts, w, out, err);
    shard_t whole = {0, 1, false, NULL};
    return cb_create_rank(opts, w, &whole, out, err);
}

// ---------------------------------------------------------------------------------------------
// Entry points

extern "C" bool cuda_backend_available(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    for (int i = 0; i < count; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) == cudaSuccess && p.major == 9) return true;
    }
    return false;
}

/* A tensor-parallel instance's rank 0, or the instance itself. */
static const cuda_backend_t *rank0_of(const backend_t *base) {
    backend_t *r0 = tp_backend_rank((backend_t *)base, 0);
    return (const cuda_backend_t *)(r0 ? r0 : base);
}

extern "C" bool cuda_backend_uses_fp8(const backend_t *base) {
    return rank0_of(base)->fp8;
}

extern "C" void cuda_backend_graph_stats(const backend_t *base, cuda_graph_stats_t *s) {
    const cuda_backend_t *be = rank0_of(base);
    *s = (cuda_graph_stats_t){be->replays, be->verify_replays, be->mtp_replays, be->chain_replays,
                              be->captured};
}

/* Positional: the fields of backend_ops_t in order (name, create, destroy, kv_block_bytes,
 * kv_reserve, forward, sample, describe, kv_pool_bytes, configure, makes_dummy_weights,
 * expert_load, trace_routing, state_bytes, state_reserve, state_copy, devices,
 * max_logit_rows). */
/* The one device create chose (a tensor-parallel instance lists its ranks': engine/tp.h). */
static int cb_devices(const backend_t *base, backend_device_t *out, int max) {
    const cuda_backend_t *be = (const cuda_backend_t *)base;
    if (max > 0) {
        out[0].ordinal = be->device;
        snprintf(out[0].pci_bus_id, sizeof out[0].pci_bus_id, "%s", be->pci_bus_id);
    }
    return 1;
}

/* The device logits buffer's rows: what cb_sample can take from one forward. */
static int cb_max_logit_rows(const backend_t *base) {
    return ((const cuda_backend_t *)base)->cap_l;
}

extern "C" const backend_ops_t cuda_backend_ops = {
    "cuda",
    cb_create,
    cb_destroy,
    cb_kv_block_bytes,
    cb_kv_reserve,
    cb_forward,
    cb_sample,
    cb_describe,
    cb_kv_pool_bytes,
    cb_configure,
    true,
    cb_expert_load,
    cb_trace_routing,
    cb_state_bytes,
    cb_state_reserve,
    cb_state_copy,
    cb_devices,
    cb_max_logit_rows,
    true, /* tensor_parallel: ranks on one device (cb_tp.cu) */
    NULL, /* rank_stats: engine/tp.h's instance has them */
    cb_mtp_forward,
    cb_mtp_chain,
    cb_sample_begin,
    cb_sample_end,
};

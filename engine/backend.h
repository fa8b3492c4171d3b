/*
 * backend: what a compute backend implements, and the batch it is given every step.
 *
 * The engine owns scheduling and the KV block allocator; a backend owns the KV pool's memory
 * and runs the model over one flattened varlen batch per step: prefill chunks and decodes of
 * many sequences together. The CPU backend (engine/cpu) and the CUDA backend (kernels/) take
 * exactly the same batch. Backends are found by name in a small table: "cpu" is built in,
 * "cuda" is registered by main() when the CUDA build is present.
 *
 *     const backend_ops_t *ops = backend_find("cpu");
 *     backend_t *be;
 *     ops->create(&opts, weights, &be, &err);
 *     backend_kv_reserve(be, num_blocks, 16, &err);
 *     backend_forward(be, &batch, logits, &err);   // logits [batch.n_logits, vocab] f32
 *     backend_destroy(be);
 *
 * KV slots: the pool holds num_blocks blocks of block_size tokens for every layer. A token's
 * slot is block_id * block_size + offset; slot_mapping tells where each new token's K and V go,
 * and the block table tells which blocks hold a sequence's context, in order.
 *
 * Recurrent state (models with Gated DeltaNet layers, model_has_state): the backend also holds
 * state slots, one per running sequence (state_reserve; the KV manager hands them out from the
 * same memory budget), each with every linear layer's conv window and SSM state. The batch names
 * each sequence's slot; a sequence whose first new token is at position 0 starts from a zero
 * state (a new or preempted-and-recomputed sequence), any other continues from its slot.
 */
#ifndef TACHYON_BACKEND_H
#define TACHYON_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "sampler.h"
#include "weights.h"

/* One step's work. Sequence s owns tokens [query_start[s], query_start[s+1]) of the flattened
 * arrays; these are its newest tokens, at positions context_len[s] - n_new .. context_len[s]-1
 * (a prefill chunk after a cached prefix, or a single decode token). Attention for s reads the
 * first context_len[s] slots of its block table, the new tokens' K and V included (they are
 * written to the pool before attention), causally. */
typedef struct be_batch {
    int n_tokens; /* flattened tokens this step */
    int n_seqs;
    const int32_t *token_ids;    /* [n_tokens] */
    const int32_t *positions;    /* [n_tokens] position of each token in its sequence */
    const int64_t *slot_mapping; /* [n_tokens] KV slot to write; -1 = do not write */
    const int32_t *query_start;  /* [n_seqs + 1] token offsets, query_start[0] = 0 */
    const int32_t *context_len;  /* [n_seqs] tokens of context after this step */
    const int32_t *block_tables; /* [n_seqs, block_table_stride] block ids */
    int block_table_stride;
    int n_logits; /* rows that need logits (last token of a finished prefill, decodes) */
    const int32_t *logit_rows;  /* [n_logits] token indices into the flattened arrays */
    const int32_t *state_slots; /* [n_seqs] recurrent-state slot of each sequence (models with
                                   state; NULL otherwise) */
    int n_placeholder_rows;     /* token ids may be placeholders -(1 + r), r < this: the rows of
                                   the pending sample_begin (asynchronous scheduling); 0 else */
} be_batch_t;

typedef struct backend_options {
    int n_threads;                 /* CPU: worker threads (0 = all cores) */
    bool cpu_reference;            /* CPU: the scalar reference kernels only, not the vector
                                      fast paths (which give the same bits; for tests) */
    int cpu_matmul_precision;      /* CPU: cpu_matmul_precision_t (flags.h; 0 = highest);
                                      live through `configure` */
    bool emulate_fp8_activations;  /* CPU: quantize GEMM inputs per token per 128 columns to
                                      e4m3 (W8A8, as the GPU does) before FP8 weight GEMMs */
    int device;                    /* CUDA: device ordinal */
    double gpu_memory_utilization; /* CUDA: fraction of device memory to use */
    int max_num_batched_tokens;    /* CUDA: tokens per step the activation workspace is sized
                                      for (0 = 8192); larger batches run in pieces */
    int max_num_seqs;              /* CUDA: sequences per step (0 = 1024): logits rows, graph
                                      capture sizes, metadata capacity */
    bool cuda_graphs;              /* CUDA: replay decode steps from captured graphs; changed
                                      live through the `configure` op */
    int kv_cache_dtype;            /* CUDA: kv_cache_dtype_t (auto = bf16, fp8 = e4m3); the
                                      engine calls `configure` with it before it rebuilds the
                                      pool */
    bool ssm_state_bf16;           /* models with state: SSM state in bf16, not f32 (the
                                      mamba-ssm-cache-dtype flag; applies at state_reserve) */
    bool mtp;                      /* models with MTP layers (backend_ops_t.mtp_forward): the
                                      KV pool also holds those layers' K/V, and forward keeps
                                      every token's final hidden state for mtp_forward (the
                                      speculative method mtp; applies at kv_reserve, and
                                      kv_block_bytes counts it from `configure` on) */
    int tensor_parallel_size;      /* ranks the model is sharded over (0, 1: none); only a
                                      backend with backend_ops_t.tensor_parallel takes more */
    bool expert_parallel;          /* with tensor_parallel_size > 1: MoE experts placed whole
                                      across the ranks, not sliced */
    /* Optional: create calls it (on its own thread) as it reads or uploads the weights: bytes
     * done of total (weights_bytes). A backend that maps the weights as they are (the CPU's)
     * does not call it. */
    void (*load_progress)(void *user, uint64_t done, uint64_t total);
    void *load_progress_user;
} backend_options_t;

typedef struct backend backend_t;

/* A tensor-parallel rank's time (backend_ops_t.rank_stats): the seconds of its forward passes
 * and, of those, inside collectives (comm.h: waiting for the slowest rank included), over its
 * steps. */
typedef struct backend_rank_stats {
    double forward_s, coll_s;
    uint64_t steps;
} backend_rank_stats_t;

/* A device an instance runs on (backend_ops_t.devices). */
typedef struct backend_device {
    int ordinal;         /* CUDA: the device ordinal */
    char pci_bus_id[32]; /* "0000:3b:00.0" (cudaDeviceGetPCIBusId): how NVML finds it */
} backend_device_t;

#define BACKEND_MAX_DEVICES 16

typedef struct backend_ops {
    const char *name; /* "cpu", "cuda" */
    /* Creates an instance for the weights (which must outlive it). The caller owns *out. */
    int (*create)(const backend_options_t *opts, const model_weights_t *w, backend_t **out,
                  err_t *err);
    void (*destroy)(backend_t *be);
    /* Bytes one KV block takes across all layers (K and V), for sizing the pool. */
    size_t (*kv_block_bytes)(const backend_t *be, int block_size);
    /* (Re)allocates the KV pool; previous contents are lost. */
    int (*kv_reserve)(backend_t *be, int num_blocks, int block_size, err_t *err);
    /* Runs the model over the batch; writes logits [n_logits, vocab_size] f32 (host memory).
     * With a `sample` op, logits is NULL: the logits stay on the device for sample(). */
    int (*forward)(backend_t *be, const be_batch_t *batch, float *logits, err_t *err);
    /* Optional (NULL: the engine samples on the host from forward's logits). Samples the rows of
     * the last forward's logits on the device, row i = batch.logit_rows[i], with the same
     * semantics as sampler.h; only ids and requested logprobs come back. */
    int (*sample)(backend_t *be, const sampler_row_t *rows, int n_rows, sampler_result_t *out,
                  err_t *err);
    /* A one-line description ("cpu, 2 threads, f32"). */
    void (*describe)(const backend_t *be, char *buf, size_t size);
    /* Optional (NULL: the engine's kv-cache-memory default). Bytes the backend can give the KV
     * pool when it may use this fraction of its device memory, after its weights and
     * workspaces (the current pool counts as free: kv_reserve replaces it). */
    uint64_t (*kv_pool_bytes)(const backend_t *be, double gpu_memory_utilization);
    /* Optional. Applies the live options (cuda_graphs, max_num_seqs, max_num_batched_tokens)
     * from the next step on; the engine calls it when a live flag changes, and before
     * kv_block_bytes / kv_reserve when it rebuilds the pool (kv_cache_dtype). */
    void (*configure)(backend_t *be, const backend_options_t *opts);
    /* True when the backend makes --load-format dummy values itself (weights_open with
     * lazy_dummy: no host copy of the random weights). */
    bool makes_dummy_weights;
    /* Optional. Tokens routed to each expert of each MLP_MOE layer since create, cumulative:
     * out [n_layers][n_experts] (rows of other layers stay 0), as of the last forward that
     * returned. Fails for a model without experts. */
    int (*expert_load)(backend_t *be, uint64_t *out, err_t *err);
    /* Optional, for tests: while ids is not NULL, each forward writes the experts it routes each
     * token to in MLP_MOE layer l to ids [n_layers][n_tokens][num_experts_per_tok] (row l, in
     * the order the top-k found them; rows of other layers untouched). The caller keeps ids
     * alive and large enough until it passes NULL. A tensor-parallel instance passes ids to
     * every rank: rank 0 writes them (routing is replicated), the others only know a traced
     * step is on (the CUDA backend runs traced steps eagerly, which every rank must do alike:
     * NCCL wants a collective graph-captured on all ranks or on none). */
    void (*trace_routing)(backend_t *be, int32_t *ids);
    /* Models with recurrent state (NULL otherwise, or 0 bytes). Bytes of one state slot; the
     * SSM dtype is the one `configure` last set. */
    size_t (*state_bytes)(const backend_t *be);
    /* (Re)allocates n_slots state slots (previous contents are lost), with the KV pool. */
    int (*state_reserve)(backend_t *be, int n_slots, err_t *err);
    /* Copies slot src's state into slot dst, before the next forward reads dst (a fork). */
    int (*state_copy)(backend_t *be, int src, int dst, err_t *err);
    /* Optional (NULL: none, as on the CPU). The devices the instance runs on, in rank order, each
     * once (ranks sharing a device list it once): fills out[0 .. max) and returns how many there
     * are. */
    int (*devices)(const backend_t *be, backend_device_t *out, int max);
    /* Optional (NULL: no limit). Logit rows one forward can give the `sample` op (speculative
     * drafts ask for several per sequence); the engine drafts less rather than pass it. */
    int (*max_logit_rows)(const backend_t *be);
    /* True when create takes tensor_parallel_size > 1 (the cpu backend's ranks as threads, the
     * cuda backend's ranks on one device; engine/tp.h); the engine refuses larger sizes for the
     * others (shard_plan_refuse). */
    bool tensor_parallel;
    /* Optional (tensor parallel instances, engine/tp.h): each rank's time since create, out[r]
     * for r < max; returns the ranks. Any thread (a copy under the instance's lock). */
    int (*rank_stats)(backend_t *be, backend_rank_stats_t *out, int max);
    /* Optional (NULL: no MTP drafting). Runs the model's multi-token-prediction head (models.md
     * 4.8: fc over [norm(embed(x_{t+1})) | norm(h_t)], MTP layer step % n_mtp_layers, its norm,
     * the shared lm_head) over a batch laid out as for forward, for a pool reserved with
     * backend_options_t.mtp: token_ids[i] is the token x_{t+1} that follows position t =
     * positions[i], and slot_mapping, context_len and the block tables are those of position t
     * (the layer's own K/V, in the same slots as the model's). hidden_rows[i] names h_t: at step
     * 0 a row of the last forward's tokens (its final-norm output), at step > 0 a row of the
     * last mtp_forward's (the head's own output, for the next draft). For the batch's logit
     * rows writes logits [n_logits, vocab_size] f32 (host) when logits is not NULL, and the
     * drafts, each row's argmax, to argmax[n_logits] when that is not NULL (computed where the
     * logits are: a GPU copies back one id per row, not the rows). With b NULL it only answers
     * whether this instance runs the model's head: 0, or -1 with why not. */
    int (*mtp_forward)(backend_t *be, const be_batch_t *b, const int32_t *hidden_rows, int step,
                       float *logits, int32_t *argmax, err_t *err);
    /* Optional (NULL: the engine calls mtp_forward once a draft). n_steps chained draft passes
     * of the MTP head where it runs, with no round trip between them: b is the first pass's
     * batch as mtp_forward's at step first_step >= 1 (one token a sequence, the previous draft,
     * each token its logit row; hidden_rows: rows of the last MTP pass), and each later pass is
     * the same sequences one position on, its token the previous pass's argmax and its hidden
     * row the previous pass's own output, while the position stays at most last_pos[s] (past
     * it the sequence recomputes its last position and writes nothing: its later drafts are to
     * be ignored). The block tables must hold every position up to last_pos. Writes
     * drafts[j * n_seqs + s], the argmax of pass j (j < n_steps), and leaves the head's output
     * as mtp_forward would after the last pass. */
    int (*mtp_chain)(backend_t *be, const be_batch_t *b, const int32_t *hidden_rows, int first_step,
                     int n_steps, const int32_t *last_pos, int32_t *drafts, err_t *err);
    /* Optional, both or neither (NULL: `sample` returns only when the device is done). The
     * `sample` op in two halves, for the engine's asynchronous scheduling (core_async.c):
     * sample_begin queues the sampling of the last forward's rows, as `sample` would, and
     * returns at once; sample_end waits for those results and writes them to out. Between
     * the two the engine calls forward once more for the next step, and that batch's token ids
     * may be placeholders: id -(1 + r) stands for the token sampled at row r of the pending
     * sample_begin, which the device reads where the sampler left it (no round trip through
     * the host). At most one sample_begin is pending. */
    int (*sample_begin)(backend_t *be, const sampler_row_t *rows, int n_rows, err_t *err);
    int (*sample_end)(backend_t *be, sampler_result_t *out, err_t *err);
} backend_ops_t;

/* Every backend instance starts with this header. */
struct backend {
    const backend_ops_t *ops;
};

/* Adds a backend to the table (main() registers "cuda" when it is built). */
int backend_register(const backend_ops_t *ops);

/* The backend of that name, or NULL. "cpu" is always there. */
const backend_ops_t *backend_find(const char *name);

/* Names of the registered backends, NULL-terminated (static storage). */
const char *const *backend_names(void);

static inline void backend_destroy(backend_t *be) {
    if (be) be->ops->destroy(be);
}
static inline int backend_kv_reserve(backend_t *be, int num_blocks, int block_size, err_t *err) {
    return be->ops->kv_reserve(be, num_blocks, block_size, err);
}
static inline int backend_forward(backend_t *be, const be_batch_t *b, float *logits, err_t *err) {
    return be->ops->forward(be, b, logits, err);
}

/* Checks a batch against the pool: counts, offsets, slots and block ids in range. Backends
 * call it in debug builds; tests call it directly. */
int backend_check_batch(const be_batch_t *b, int num_blocks, int block_size, err_t *err);

/* What must hold for a forward pass not to read or write out of bounds, cheap enough for every
 * step: counts, the arrays present, query_start spanning the tokens, every sequence's context
 * within its block-table row and its blocks in the pool, token ids in [0, vocab_size) or
 * placeholders -(1 + r) with r < n_placeholder_rows, slots in
 * [-1, num_blocks * block_size), logit rows in range. b must not be NULL. Backends call it in
 * forward (backend_check_batch adds the semantic checks in debug builds); the message names no
 * backend: the caller prefixes it. */
int backend_check_bounds(const be_batch_t *b, int num_blocks, int block_size, int vocab_size,
                         err_t *err);

extern const backend_ops_t cpu_backend_ops;

/* "null": no model computation at all. Samples a token that depends only on the row's last token
 * and position (and the seed when temperature > 0), deterministically, so engine logic can be
 * tested and its own CPU cost measured with the backend's cost taken out. */
extern const backend_ops_t null_backend_ops;

#endif

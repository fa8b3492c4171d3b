/*
 * cb_backend: the cuda backend's state and what its files share. Private to kernels/:
 *
 *     cuda_backend.cu   the backend_ops_t table: create / destroy, the KV pool, device sampling
 *     cb_weights.cu     the weights on the device: layout by layer kind, upload, FP8 or BF16
 *     cb_layers.cu      the layer stack of one step (run_stack), with linear() as the one
 *                       FP8 / BF16 dispatch point; the MTP head's pass (cb_run_mtp)
 *     cb_moe.cu         the MLP_MOE layers: their weights (router, experts) and their run
 *     cb_step.cu        a step: batch checks, metadata staging, pieces, CUDA graphs (forward);
 *                       an MTP pass (cb_mtp_forward)
 *
 * Device layout: one weight arena (QKV and gate/up fused by concatenating rows; the intermediate
 * size padded to a multiple of 128 with zero rows / columns so FP8 scale blocks never straddle
 * the gate|up seam), one activation arena sized for max-num-batched-tokens, logits for
 * max-num-seqs rows, one KV allocation for every layer.
 */
#ifndef TACHYON_CB_BACKEND_H
#define TACHYON_CB_BACKEND_H

#include "cb_engine.h"

#include <cuda_runtime.h>

#include "gemm.h"
#include "memplan.h"
#include "moe.h"
#include "ops.h"
#include "ops_gdn.h"

#define GEMM_WORKSPACE     (32ull << 20)  /* bytes: what cuBLASLt asks for at most on Hopper */
#define RESERVE_BYTES      (512ull << 20) /* graphs, cuBLASLt internals, context growth */
#define DEFAULT_MAX_TOKENS 8192
#define DEFAULT_MAX_SEQS   1024
#define MAX_GRAPH_SIZE     512
#define SPLIT_MAX_SEQS     64 /* decode batches up to this many sequences may split their keys */
#define MAX_SPLITS         32
#define ALIGN              256 /* bytes: cuBLASLt's default pointer alignment preference */
#define MAX_GRAPHS         64
/* Query tokens per sequence a graph runs: 1 (decode steps), up to 8 (speculative verify steps
 * of up to 7 drafts, every sequence the same number: vLLM's uniform decode graphs) */
#define MAX_GRAPH_Q 8
/* MTP draft passes one cb_mtp_chain runs (the engine's SPEC_MAX_TOKENS - 1 at most); from a graph
 * up to MAX_GRAPH_Q of them */
#define MAX_CHAIN_STEPS 16

/* GEMM outputs (QKV, o_proj, gate_up, down) in f32: the kernels that read them (q/k norm + RoPE,
 * residual add + norm, SwiGLU + FP8 quantization) then see the CPU reference's f32 values, not
 * bf16-rounded ones, which matters most before an FP8 quantization (a rounding step can move a
 * value across an e4m3 boundary). Costs 2 extra bytes per output element (about 5% of a large
 * prefill GEMM's time, nothing at decode). */
#define GEMM_OUT_F32   true
#define GEMM_OUT       OPS_F32
#define GEMM_OUT_BYTES 4

static inline size_t align_up(size_t n) {
    return (n + ALIGN - 1) / ALIGN * ALIGN;
}

/* A byte layout inside one allocation; with base NULL it only measures. */
typedef struct wlayout {
    char *base;
    size_t off;
} wlayout_t;

static inline void *take(wlayout_t *a, size_t bytes) {
    void *p = a->base ? a->base + a->off : NULL;
    a->off += align_up(bytes);
    return p;
}

/* A linear on the device, as the path the backend runs needs it: w8 (e4m3 + 128x128 block
 * scales) when fp8, else w16 (bf16). linear() in cb_layers.cu picks. */
typedef struct cb_linear {
    gemm_w8_t w8;
    gemm_w16_t w16;
} cb_linear_t;

/* A layer's device weights, those of its kinds set (cb_weights.cu: layer_spec). Norm weights
 * hold norm_offset + w (Qwen3.5's zero-centred norms). */
typedef struct cb_layer {
    float *attn_norm, *mlp_norm; /* [H] f32 */
    /* ATTN_FULL, ATTN_GATED */
    float *q_norm, *k_norm; /* [D] f32 */
    cb_linear_t qkv;        /* [nH*D + 2 * nKV*D, H]: q | k | v rows (ATTN_GATED: [2 * nH*D +
                               2 * nKV*D, H], q_proj's per-head q | gate rows, then k, v) */
    cb_linear_t o;          /* [H, nH*D] */
    int attn;               /* its ordinal among the attention layers (its KV pools) */
    float k_scale, v_scale; /* an fp8 KV cache's per-tensor scales (weights_kv_scales) */
    /* ATTN_LINEAR (the Gated DeltaNet) */
    cb_linear_t lin_qkv;    /* [C, H] in_proj_qkv */
    cb_linear_t lin_z;      /* [Hv*dv, H] in_proj_z */
    cb_linear_t lin_ba;     /* [2 * Hv, H] in_proj_b | in_proj_a rows, always BF16 */
    cb_linear_t lin_out;    /* [H, Hv*dv] out_proj */
    float *conv;            /* [C, K] f32 */
    float *a_log, *dt_bias; /* [Hv] f32 */
    float *lin_norm;        /* [dv] f32 the gated norm's weight */
    int linear;             /* its ordinal among the linear layers (its state) */
    /* MLP_DENSE */
    cb_linear_t gate_up; /* [2 * I_pad, H]: gate rows, zero rows to I_pad, up rows, zero rows */
    cb_linear_t down;    /* [H, I_pad]: zero columns from I */
    /* MLP_MOE (cb_moe.cu); each expert contiguous, e4m3 + scales or bf16 (the path's) */
    uint16_t *router;  /* [E, H] bf16 */
    moe_weights_t w13; /* [n_local][2 * moe.I_pad][H]: an expert's gate rows, zero rows to I_pad,
                          its up rows, zero rows */
    moe_weights_t w2;  /* [n_local][H][moe.I_pad]: zero columns from I */
} cb_layer_t;

/* The MoE layers' sizes and workspaces (cb_moe.cu), for the tokens of one chunk of a piece. */
typedef struct cb_moe {
    int E, k, I, I_pad; /* experts, per token, their intermediate size and its padding to 128 */
    int e0, n_local;    /* the experts this rank computes, [e0, e0 + n_local): all of them, or
                           under expert parallelism its range (the weights hold only those) */
    bool norm;          /* norm_topk_prob */
    int chunk;          /* tokens whose experts run at once (the workspaces' size) */
    float *xf;          /* [cap_t, H] f32 the router's input */
    float *logits;      /* [cap_t, E] */
    int32_t *ids;       /* [cap_t, k] */
    float *weights;     /* [cap_t, k] */
    moe_perm_t perm;    /* for chunk tokens */
    float *gu;          /* [rows, 2 * I_pad] f32 gate | up of the grouped rows */
    uint8_t *aq;        /* [rows, I_pad] e4m3 SiLU product (FP8 path) */
    float *as;          /* [I_pad / 128, rows] its scales */
    uint16_t *a16;      /* [rows, I_pad] bf16 SiLU product (BF16 path) */
    float *y;           /* [rows, H] f32 expert outputs */
    unsigned long long *load; /* [L][E] tokens routed since create (the expert-load stats) */
    int32_t *trace;           /* host: trace_routing's [L][T][k], or NULL */
    wtensor_t *views;         /* tp > 1: [L][E][E_COUNT] the experts' slices, or under expert
                                 parallelism the rank's whole ones (shard_experts) */
} cb_moe_t;

typedef struct cb_graph {
    int size;   /* sequences of the batch it runs (each with the graph's q tokens) */
    int stride; /* block-table stride it was captured with; 0 = not captured */
    cudaGraphExec_t exec;
} cb_graph_t;

/* Sizes of one run of the stack: T tokens of n_seqs sequences (host values baked into the
 * launches, so a graph captured with them replays for any batch of that shape). */
typedef struct run_args {
    int T, n_seqs, n_logits;
    int max_q, max_ctx;
    bool decode; /* every sequence is a decode (one new token) */
    int n_dec;   /* sequences with one new token: a mixed batch runs them through the split-KV
                    decode kernel, the others through the prefill kernel */
    int splits;  /* the decode kernel's */
    const int32_t *rows; /* device logit rows, or NULL: rows 0..n_logits-1 */
    float *logits;       /* [n_logits, V] f32 device */
    int stride;          /* block-table stride */
} run_args_t;

typedef struct cuda_backend {
    backend_t base;
    const model_config_t *cfg; /* &lcfg: the shapes this rank computes with */
    const model_weights_t *w;
    /* tensor parallel (cb_tp.cu): which rank of how many (tp 1: the whole model), its config
     * (shard_config: its heads and widths; vocab_size stays the whole vocabulary) and its
     * vocabulary rows of lm_head [v0, v0 + vn) (vpad: the widest rank's, the all-gather's row) */
    shard_t shard;
    model_config_t lcfg;
    int64_t v0, vn, vpad;
    int device;
    char device_name[256];
    char pci_bus_id[32]; /* cudaDeviceGetPCIBusId: how the console's NVML panel finds it */
    /* the weights' upload, reported to the loading screen (backend_options_t.load_progress) */
    void (*load_progress)(void *user, uint64_t done, uint64_t total);
    void *load_progress_user;
    uint64_t load_done, load_total; /* bytes */
    int sm_major, sm_minor, num_sms;
    bool fp8;          /* linears in FP8 (else BF16) */
    char fp8_why[200]; /* why the BF16 fallback was taken for an FP8 checkpoint */
    int fp8_probed;    /* FP8 shapes cb_fp8_possible found algorithms for at every size */
    int H, D, nH, nKV, qd, kvd, qkv_n, I, I_pad, V, L; /* I: 0 without dense MLPs */
    int n_attn;     /* layers with a KV cache (ATTN_FULL, ATTN_GATED) */
    int n_linear;   /* ATTN_LINEAR layers */
    int qkv_max;    /* widest QKV GEMM output: qkv_n, or the gated layers' 2 qd + 2 kvd */
    int rotary_dim; /* RoPE dims of each head (inv_freq has rotary_dim / 2) */
    float eps;
    cb_moe_t moe; /* E = 0 for a dense model */
    cudaStream_t stream;
    gemm_ctx_t *gemm;
    memplan_t plan;

    /* weights */
    void *wmem;
    cb_layer_t *layers;
    uint16_t *embed;    /* [V, H] bf16 */
    gemm_w16_t lm_head; /* [V, H] bf16 (the embedding when tied) */
    float *final_norm;  /* [H] f32 */
    float *inv_freq;    /* [rotary_dim / 2] f32 */

    /* The MTP head (Qwen3.5's mtp.*, run by cb_mtp_forward): its layers are layers[L .. L +
     * n_mtp) (dense MTP layers; 0 otherwise; sharded as the decoder's at tp > 1, fc and norms
     * whole on every rank), their K/V after the decoder's in the
     * pool while `mtp` (backend_options_t.mtp at the last kv_reserve; mtp_next from configure),
     * and then every forward keeps its tokens' final-norm output in hid. */
    int n_mtp;
    bool mtp, mtp_next;
    cb_linear_t mtp_fc; /* [H, 2H] over [norm(embedding) | norm(hidden)] */
    bool mtp_fc_bf16;   /* fc in BF16 (the BF16 path, or an FP8 checkpoint's unquantized fc) */
    float *mtp_norm_e, *mtp_norm_h, *mtp_norm; /* [H] f32: embedding, hidden, output norms */
    uint16_t *hid;              /* [cap_t, H] bf16 the last forward's final-norm rows */
    uint16_t *hid_mtp;          /* [cap_t, H] bf16 the last MTP pass's output rows (mtp.norm) */
    uint16_t *mtp_cat;          /* [cap_t, 2H] bf16 the fc's input */
    int hid_rows, hid_mtp_rows; /* rows of each that hold a pass's tokens */

    /* capacities */
    int cap_t; /* tokens per piece, a multiple of 4 */
    int cap_s; /* sequences per piece */
    int cap_l; /* logit rows per piece */
    int kmax;  /* widest GEMM input: max(H, qd, I_pad, Hv*dv) */

    /* activations (one arena) */
    void *amem;
    float *resid;  /* [cap_t, H] f32 residual stream (h) */
    uint8_t *xq;   /* [cap_t, kmax] e4m3 GEMM input (FP8 path) */
    float *xs;     /* [kmax / 128, cap_t] f32 its scales, transposed */
    uint16_t *x16; /* [cap_t, kmax] bf16 GEMM input (BF16 path) */
    void *qkv;     /* [cap_t, qkv_max] GEMM_OUT */
    uint16_t *q;   /* [cap_t, qd] bf16 after q-norm and RoPE */
    uint16_t *att; /* [cap_t, qd] bf16 attention output */
    void *o_out;   /* [cap_t, H] GEMM_OUT */
    void *gu;      /* [cap_t, 2 * I_pad] GEMM_OUT */
    void *d_out;   /* [cap_t, H] GEMM_OUT */
    /* ATTN_LINEAR (models with state; f32 GEMM outputs as GEMM_OUT) */
    uint16_t *x16n;    /* [cap_t, H] bf16 normed input of in_proj_b|a on the FP8 path */
    float *gx;         /* [cap_t, C] in_proj_qkv output */
    float *gz;         /* [cap_t, Hv*dv] in_proj_z output */
    float *gba;        /* [cap_t, 2 * Hv] in_proj_b | in_proj_a output */
    float *gy;         /* [cap_t, C] conv + SiLU, q and k then L2-normalized */
    float *gg, *gbeta; /* [cap_t, Hv] decay and beta */
    float *go;         /* [cap_t, Hv*dv] the delta rule's output */
    uint16_t *gn;      /* [cap_t, Hv*dv] bf16 gated-norm output (out_proj's input) */
    uint16_t *xf;      /* [cap_l, H] bf16 final-norm rows */
    float *logits;     /* [cap_l, V] f32 */
    float *lg_rank; /* tp > 1: [cap_l, vn] f32 this rank's logit columns, sent as [cap_l, vpad] */
    float *lg_all;  /* tp > 1: [tp, cap_l * vpad] f32 every rank's, all-gathered */
    void *attn_ws;  /* split-KV partials for SPLIT_MAX_SEQS sequences */
    void *counts;   /* sampler occurrence counts [cap_l, V] int32, kept zero */

    /* step metadata: device buffers and their pinned staging, same layout */
    void *meta_d, *meta_h;
    size_t meta_bytes;
    int32_t *ids_d, *pos_d, *qs_d, *ctx_d, *lrows_d, *sslots_d, *mrows_d;
    int64_t *slots_d;
    int32_t *ids_h, *pos_h, *qs_h, *ctx_h, *lrows_h, *sslots_h; /* sslots: state slots [cap_s] */
    int32_t *mrows_h; /* [cap_t] an MTP pass's hidden rows */
    int64_t *slots_h;
    int32_t *last_d, *last_h;     /* [cap_s] a draft chain's last positions (cb_mtp_chain) */
    int32_t *chain_d, *chain_h;   /* [MAX_CHAIN_STEPS][cap_s] its drafts, pass by pass */
    int32_t *tables_d, *tables_h; /* [cap_tables] block tables, the batch's stride */
    size_t cap_tables;
    bool staging_busy;       /* a copy from the staging may still be in flight */
    bool sampler_busy;       /* a copy from the sampler's staging (srows_h, arena_h) may be */
    int sample_pending;      /* rows of the sample_begin not yet ended (0: none) */
    cudaEvent_t sample_done; /* recorded after sample_begin's copy of the results */

    /* sampling */
    ops_sample_row_t *srows_d, *srows_h; /* [cap_l] */
    sampler_result_t *sres_d, *sres_h;   /* [cap_l] */
    int32_t *arena_d, *arena_h;
    size_t cap_arena;
    int logits_rows; /* rows of the last forward's logits left on the device; -1: none */

    /* KV */
    ops_kv_dtype_t kv_dtype;      /* of the current pool */
    ops_kv_dtype_t kv_dtype_next; /* the kv-cache-dtype flag: the next kv_reserve's */
    void *kv_mem;
    int num_blocks, block_size;
    size_t pool_bytes; /* one layer's K (or V) pool */

    /* recurrent state (ATTN_LINEAR): per slot, every linear layer's conv window [K - 1, C] f32
     * then its SSM state [Hv, dk, dv] (f32, or bf16 with ssm_bf16) */
    void *state_mem;
    int n_slots;
    bool ssm_bf16, ssm_bf16_next; /* of the current slots; the flag, for the next reserve */
    int Hk, Hv, dk, dv, K, C;     /* the Gated DeltaNet's shapes */

    /* graphs */
    bool graphs;                               /* the cuda-graphs flag */
    int max_seqs_live;                         /* the max-num-seqs flag (graph sizes stop there) */
    cb_graph_t graph[MAX_GRAPH_Q][MAX_GRAPHS]; /* [q - 1][size index]: lazily captured */
    /* the MTP head's draft passes of one token a sequence: [0] reading the model's final-norm
     * rows (step 0), [1] the head's own (later steps) */
    cb_graph_t mtp_graph[2][MAX_GRAPHS];
    cb_graph_t chain_graph[MAX_GRAPH_Q][MAX_GRAPHS]; /* [passes - 1]: cb_mtp_chain's */
    int n_graphs;                                    /* sizes (the same for every q and pass) */
    long mtp_replays, chain_replays;
    long replays, verify_replays; /* graph launches, those of more than one token a sequence */
    int captured;
} cuda_backend_t;

/* cuda_backend.cu: cudaMalloc, with the memory plan's message when the device is full. */
int cb_alloc_dev(cuda_backend_t *be, void **p, size_t bytes, const char *what, err_t *err);

/* The Gated DeltaNet ops' arguments for T tokens of n_seqs sequences (the step's metadata
 * buffers) and linear layer li's view of the state slots (li < 0: shapes only). */
ops_gdn_args_t cb_gdn_args(const cuda_backend_t *be, int li, int T, int n_seqs);

/* The weight of layer l in slot as this rank holds it (shard_layer: a view at tp > 1, written
 * to *view), or NULL with err filled (missing, or a shard that splits an FP8 scale block). */
const wtensor_t *cb_tensor(const cuda_backend_t *be, int l, lslot_t slot, wtensor_t *view,
                           err_t *err);

/* cb_tp.cu */

/* One rank's instance (cuda_backend.cu): the whole model at shard->tp 1. */
int cb_create_rank(const backend_options_t *opts, const model_weights_t *w, const shard_t *shard,
                   backend_t **out, err_t *err);
/* The tensor-parallel instance over opts->tensor_parallel_size ranks on opts->device, joined
 * by the single-device communicator (comm_gpu.h; NCCL with a GPU per rank where built and
 * N GPUs exist). The caller owns *out. */
int cb_tp_create(const backend_options_t *opts, const model_weights_t *w, backend_t **out,
                 err_t *err);
/* A row-parallel layer's partial output buf[n] (f32, device) becomes the sum over the ranks
 * (nothing at tp 1). */
int cb_all_reduce(cuda_backend_t *be, void *buf, int64_t n, err_t *err);
/* logits [n, V] (device, rank 0) from this rank's lm_head rows of the normed rows be->xf: the
 * rank's columns, all-gathered. */
int cb_vocab_parallel_logits(cuda_backend_t *be, int n, float *logits, err_t *err);

/* cb_weights.cu */

/* What a tensor becomes on the device. */
typedef enum { UP_BF16, UP_FP8 } up_kind_t;
/* Copies rows [0, t->rows) of t to dst (row stride ld elements) as kind: bytes as they are, FP8
 * to FP8 and BF16 to BF16 (dummy values generated on the device), anything else converted to
 * BF16 on the host through stage (CONVERT_CHUNK bytes, pinned). */
int cb_upload_rows(cuda_backend_t *be, void *dst, int64_t ld, up_kind_t kind, const wtensor_t *t,
                   void *stage, err_t *err);
/* Copies t's block scales into rows [row0, row0 + t->scale_rows) of a [*, ld] f32 array. */
int cb_upload_scales(cuda_backend_t *be, float *dst, int64_t row0, int64_t ld, const wtensor_t *t,
                     err_t *err);

/* Checks the weights the way the CPU backend does: present, the config's shapes, float or
 * block-FP8 (128x128) dtypes. */
int cb_check_weights(const cuda_backend_t *be, err_t *err);
/* Whether the checkpoint can run as FP8 block-scaled GEMMs; why not in be->fp8_why. */
bool cb_fp8_possible(cuda_backend_t *be);
/* Lays the weights out from base (NULL: only measures); returns the arena's bytes. */
size_t cb_layout_weights(cuda_backend_t *be, char *base);
/* Copies (or generates, for lazy dummy weights) every tensor into the laid-out arena, which
 * must be zero. */
int cb_upload_weights(cuda_backend_t *be, err_t *err);

/* cb_moe.cu */

/* The MoE sizes of the config (be->moe; nothing for a dense model). */
void cb_moe_init(cuda_backend_t *be);
/* tp > 1: every MoE layer's expert slices as this rank holds them (be->moe.views). -1 with err
 * filled on a shard that splits an FP8 scale block. */
int cb_moe_shard(cuda_backend_t *be, err_t *err);
/* Layer l's router and experts: present, shaped, of dtypes the backend runs. */
int cb_moe_check(const cuda_backend_t *be, int l, err_t *err);
/* Whether every expert can run as FP8 (128x128 blocks, hidden a multiple of 128); why not in
 * be->fp8_why. True for a dense model. */
bool cb_moe_fp8_possible(cuda_backend_t *be);
/* Lays out / uploads layer l's router and experts (be->fp8 decides their form). */
void cb_moe_layout_weights(cuda_backend_t *be, int l, wlayout_t *a);
int cb_moe_upload(cuda_backend_t *be, int l, void *stage, err_t *err);
/* The MoE workspaces inside the activation arena (nothing for a dense model). */
void cb_moe_layout_activations(cuda_backend_t *be, wlayout_t *a);
/* MLP_MOE over layer l; `out` is the previous block's output. Leaves its own in be->d_out. */
int cb_moe_mlp(cuda_backend_t *be, const run_args_t *r, int l, const void *out, err_t *err);
/* backend_ops_t.expert_load */
int cb_expert_load(backend_t *base, uint64_t *out, err_t *err);
/* backend_ops_t.trace_routing (copies each MoE layer's ids back, synchronously: tests only) */
void cb_trace_routing(backend_t *base, int32_t *ids);

/* cb_layers.cu */

/* The activation arena's and the logits' layouts from base (NULL: only measures); bytes. */
size_t cb_layout_activations(cuda_backend_t *be, char *base);
size_t cb_layout_logits(cuda_backend_t *be, char *base);
/* Enqueues the forward pass of one piece whose metadata is on the device (with the MTP head's
 * K/V in the pool, every token's final-norm row into be->hid too). */
int cb_run_stack(cuda_backend_t *be, const run_args_t *r, err_t *err);
/* Enqueues an MTP pass (step: the draft's index; its layer is L + step % n_mtp) over a piece
 * whose metadata is on the device: the fc input from the token ids beside rows mrows_d of src
 * (hid at step 0, hid_mtp after), the layer, mtp.norm into hid_mtp, logits of the rows. */
int cb_run_mtp(cuda_backend_t *be, const run_args_t *r, int step, const uint16_t *src, err_t *err);

/* cb_step.cu */

/* The step metadata's layout from base (NULL: only measures), device or host names; bytes. */
size_t cb_layout_meta(cuda_backend_t *be, char *base, bool host);
/* Grows the block tables' device buffer and staging (int32 elements) to at least need. */
int cb_grow_tables(cuda_backend_t *be, size_t need, err_t *err);
/* Grows the sampler's token-list arena and staging (int32 elements) to at least need. */
int cb_grow_arena(cuda_backend_t *be, size_t need, err_t *err);
/* Sets the capture sizes for the current flags and capacities (graphs are captured lazily). */
void cb_plan_graphs(cuda_backend_t *be);
/* Whether this rank's steps can run from CUDA graphs: one rank, or a communicator whose
 * collectives a graph captures (comm_ops_t.graph_safe: NCCL). */
bool cb_graphs_possible(const cuda_backend_t *be);
void cb_drop_graphs(cuda_backend_t *be);
/* cb_weights.cu: asks cuBLASLt at start-up for the BF16 GEMMs every step size needs (the FP8
 * ones: cb_fp8_possible) and logs what the probes found; -1 naming a size without algorithm. */
int cb_probe_gemms(cuda_backend_t *be, err_t *err);
/* backend_ops_t.forward */
int cb_forward(backend_t *base, const be_batch_t *b, float *logits, err_t *err);
/* backend_ops_t.mtp_forward: one piece at most (the engine's MTP batches are no larger than the
 * step's), run eagerly. */
int cb_mtp_forward(backend_t *base, const be_batch_t *b, const int32_t *hidden_rows, int step,
                   float *logits, int32_t *argmax, err_t *err);
/* backend_ops_t.mtp_chain: the passes on the device, each pass's argmax and the next pass's
 * metadata made there (ops_sample, ops_mtp_advance); at most MAX_CHAIN_STEPS passes; from one
 * graph when graphs are on, the head has one layer and there are at most MAX_GRAPH_Q passes. */
int cb_mtp_chain(backend_t *base, const be_batch_t *b, const int32_t *hidden_rows, int first_step,
                 int n_steps, const int32_t *last_pos, int32_t *drafts, err_t *err);

/* cuda_backend.cu: the argmax of each of the first n_rows rows of the device logits, through the
 * device sampler at temperature 0 (one id per row comes back); synchronizes the stream. */
int cb_greedy_ids(cuda_backend_t *be, int n_rows, int32_t *ids, err_t *err);
/* Stages n_rows greedy rows (temperature 0, nothing masked) in the sampler's device rows: what
 * cb_greedy_ids samples with. */
int cb_greedy_rows(cuda_backend_t *be, int n_rows, err_t *err);

#endif

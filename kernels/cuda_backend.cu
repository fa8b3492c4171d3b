/*
 * The cuda backend: Qwen3 dense over one varlen batch per step on a Hopper GPU, following the
 * CPU reference (engine/cpu/cpu_backend.c) layer by layer with kernels/ops.h's kernels and
 * kernels/gemm.h's cuBLASLt GEMMs (FP8 block-scaled W8A8, or BF16).
 *
 * Device layout: one weight arena (QKV and gate/up fused by concatenating rows; the intermediate
 * size padded to a multiple of 128 with zero rows / columns so FP8 scale blocks never straddle
 * the gate|up seam), one activation arena sized for max-num-batched-tokens, logits for
 * max-num-seqs rows, one KV allocation for every layer. Every step's metadata goes through
 * pinned staging with one asynchronous copy into fixed device buffers, so captured CUDA graphs
 * (pure decode batches, padded to vLLM's capture sizes) replay against the same addresses.
 * Batches larger than the workspace run as consecutive pieces of whole or split sequences.
 */
#include "cb_engine.h"

#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "cb_internal.h"
#include "cuda_backend.h"
#include "cuda_check.h"
#include "dummy_weights.h"
#include "gemm.h"
#include "memplan.h"
#include "ops.h"

#define GEMM_WORKSPACE     (32ull << 20)  /* bytes: what cuBLASLt asks for at most on Hopper */
#define RESERVE_BYTES      (512ull << 20) /* graphs, cuBLASLt internals, context growth */
#define DEFAULT_MAX_TOKENS 8192
#define DEFAULT_MAX_SEQS   1024
#define MAX_GRAPH_SIZE     512
#define SPLIT_MAX_SEQS     64 /* decode batches up to this many sequences may split their keys */
#define MAX_SPLITS         32
#define ALIGN              256 /* bytes: cuBLASLt's default pointer alignment preference */
#define MAX_GRAPHS         64

/* GEMM outputs (QKV, o_proj, gate_up, down) in f32: the kernels that read them (q/k norm + RoPE,
 * residual add + norm, SwiGLU + FP8 quantization) then see the CPU reference's f32 values, not
 * bf16-rounded ones, which matters most before an FP8 quantization (a rounding step can move a
 * value across an e4m3 boundary). Costs 2 extra bytes per output element (about 5% of a large
 * prefill GEMM's time, nothing at decode). */
#define GEMM_OUT_F32   true
#define GEMM_OUT       OPS_F32
#define GEMM_OUT_BYTES 4

static size_t align_up(size_t n) {
    return (n + ALIGN - 1) / ALIGN * ALIGN;
}

typedef struct cb_layer {
    gemm_w8_t qkv8, o8, gu8, down8;      /* FP8 path */
    gemm_w16_t qkv16, o16, gu16, down16; /* BF16 path */
    float *attn_norm, *mlp_norm;         /* [H] f32 */
    float *q_norm, *k_norm;              /* [D] f32 */
} cb_layer_t;

typedef struct cb_graph {
    int size;   /* sequences (= tokens) of the decode batch it runs */
    int stride; /* block-table stride it was captured with; 0 = not captured */
    cudaGraphExec_t exec;
} cb_graph_t;

/* One piece of a step: tokens [t0, t1) of the batch, the sequences overlapping them, their logit
 * rows (global indices [l0, l1)). */
typedef struct piece {
    int t0, t1, s0, s1, l0, l1;
    int max_q, max_ctx;
    bool decode; /* every sequence has exactly one new token */
} piece_t;

typedef struct cuda_backend {
    backend_t base;
    const model_config_t *cfg;
    const model_weights_t *w;
    int device;
    char device_name[256];
    int sm_major, sm_minor, num_sms;
    bool fp8;          /* linears in FP8 (else BF16) */
    char fp8_why[200]; /* why the BF16 fallback was taken for an FP8 checkpoint */
    int H, D, nH, nKV, qd, kvd, qkv_n, I, I_pad, V, L;
    float eps;
    cudaStream_t stream;
    gemm_ctx_t *gemm;
    memplan_t plan;

    /* weights */
    void *wmem;
    cb_layer_t *layers;
    uint16_t *embed;    /* [V, H] bf16 */
    gemm_w16_t lm_head; /* [V, H] bf16 (the embedding when tied) */
    float *final_norm;  /* [H] f32 */
    float *inv_freq;    /* [D/2] f32 */

    /* capacities */
    int cap_t; /* tokens per piece, a multiple of 4 */
    int cap_s; /* sequences per piece */
    int cap_l; /* logit rows per piece */
    int kmax;  /* widest GEMM input: max(H, qd, I_pad) */

    /* activations (one arena) */
    void *amem;
    float *resid;  /* [cap_t, H] f32 residual stream */
    uint8_t *xq;   /* [cap_t, kmax] e4m3 GEMM input (FP8 path) */
    float *xs;     /* [kmax / 128, cap_t] f32 its scales, transposed */
    uint16_t *x16; /* [cap_t, kmax] bf16 GEMM input (BF16 path) */
    void *qkv;     /* [cap_t, qkv_n] GEMM_OUT */
    uint16_t *q;   /* [cap_t, qd] bf16 after q-norm and RoPE */
    uint16_t *att; /* [cap_t, qd] bf16 attention output */
    void *o_out;   /* [cap_t, H] GEMM_OUT */
    void *gu;      /* [cap_t, 2 * I_pad] GEMM_OUT */
    void *d_out;   /* [cap_t, H] GEMM_OUT */
    uint16_t *xf;  /* [cap_l, H] bf16 final-norm rows */
    float *logits; /* [cap_l, V] f32 */
    void *attn_ws; /* split-KV partials for SPLIT_MAX_SEQS sequences */
    void *counts;  /* sampler occurrence counts [cap_l, V] int32, kept zero */
    size_t act_bytes, logit_bytes, ws_bytes;

    /* step metadata: device buffers and their pinned staging, same layout */
    void *meta_d, *meta_h;
    size_t meta_bytes;
    int32_t *ids_d, *pos_d, *qs_d, *ctx_d, *lrows_d;
    int64_t *slots_d;
    int32_t *ids_h, *pos_h, *qs_h, *ctx_h, *lrows_h;
    int64_t *slots_h;
    int32_t *tables_d, *tables_h; /* [cap_tables] block tables, the batch's stride */
    size_t cap_tables;
    bool staging_busy; /* a copy from the staging may still be in flight */

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

    /* graphs */
    bool graphs;       /* the cuda-graphs flag */
    int max_seqs_live; /* the max-num-seqs flag (graph sizes stop there) */
    cb_graph_t graph[MAX_GRAPHS];
    int n_graphs;
    long replays;
    int captured;
} cuda_backend_t;

// ---------------------------------------------------------------------------------------------
// Helpers

static const int32_t *seq_row(const be_batch_t *b, int s) {
    return b->block_tables + (int64_t)s * b->block_table_stride;
}

/* vLLM's capture sizes: 1, 2, 4, 8..248 step 8, 256..512 step 16. */
static int capture_sizes(int max_size, int *out, int cap) {
    int n = 0;
    for (int s = 1; n < cap; s = s < 4 ? s * 2 : s < 256 ? s + 8 : s + 16) {
        if (s > MAX_GRAPH_SIZE) break;
        out[n++] = s;
        if (s >= max_size) break;
    }
    return n;
}

static void drop_graphs(cuda_backend_t *be) {
    for (int i = 0; i < be->n_graphs; i++)
        if (be->graph[i].stride) {
            cudaGraphExecDestroy(be->graph[i].exec);
            be->graph[i].stride = 0;
        }
}

/* Sets the capture sizes for the current flags and the capacities (graphs are captured lazily). */
static void plan_graphs(cuda_backend_t *be) {
    drop_graphs(be);
    int max_size = be->max_seqs_live;
    if (max_size > be->cap_s) max_size = be->cap_s;
    if (max_size > be->cap_l) max_size = be->cap_l;
    if (max_size > be->cap_t) max_size = be->cap_t;
    int sizes[MAX_GRAPHS];
    be->n_graphs = capture_sizes(max_size, sizes, MAX_GRAPHS);
    for (int i = 0; i < be->n_graphs; i++) {
        be->graph[i].size = sizes[i];
        be->graph[i].stride = 0;
        be->graph[i].exec = NULL;
    }
    /* the largest size may exceed a capacity: keep only sizes that fit */
    while (be->n_graphs > 0 && (be->graph[be->n_graphs - 1].size > be->cap_s ||
                                be->graph[be->n_graphs - 1].size > be->cap_l ||
                                be->graph[be->n_graphs - 1].size > be->cap_t))
        be->n_graphs--;
}

// ---------------------------------------------------------------------------------------------
// Weight upload

/* What a tensor becomes on the device. */
typedef enum { UP_BF16, UP_FP8 } up_kind_t;

/* Host staging for conversions, bytes. */
#define CONVERT_CHUNK (32ull << 20)

/* Copies rows [0, t->rows) of t to dst (row stride ld elements) as kind; columns cols..ld-1 are
 * left as they are (zero: the arena is cleared first). FP8 to FP8 and BF16 to BF16 copy bytes
 * (or generate dummy values on the device); any other pair converts on the host through f32. */
static int upload_rows(cuda_backend_t *be, void *dst, int64_t ld, up_kind_t kind,
                       const wtensor_t *t, void *stage, err_t *err) {
    size_t esize = kind == UP_FP8 ? 1 : 2;
    bool same =
        (kind == UP_FP8 && t->dtype == DT_F8_E4M3) || (kind == UP_BF16 && t->dtype == DT_BF16);
    if (same && t->dummy)
        return dummy_fill(dst, kind == UP_FP8, t->rows, t->cols, ld, t->dummy_seed, t->dummy_stream,
                          be->stream, err);
    if (same) {
        CUDA_CHECK(cudaMemcpy2DAsync(dst, (size_t)ld * esize, t->data, (size_t)t->cols * esize,
                                     (size_t)t->cols * esize, (size_t)t->rows,
                                     cudaMemcpyHostToDevice, be->stream),
                   err);
        /* pageable source: the copy has been staged when the call returns */
        return 0;
    }
    if (kind == UP_FP8)
        return err_set(err, "cuda backend: cannot upload a %s tensor as FP8", dtype_name(t->dtype));
    /* to BF16 through f32: rows in chunks of the staging buffer */
    int64_t rows_per = (int64_t)(CONVERT_CHUNK / ((size_t)t->cols * (2 + 4)));
    if (rows_per < 1)
        return err_set(err, "cuda backend: a weight row of %" PRId64 " is too wide", t->cols);
    uint16_t *bf = (uint16_t *)stage;
    float *row = (float *)((char *)stage + (size_t)rows_per * (size_t)t->cols * 2);
    for (int64_t r0 = 0; r0 < t->rows; r0 += rows_per) {
        int64_t n = t->rows - r0 < rows_per ? t->rows - r0 : rows_per;
        CUDA_CHECK(cudaStreamSynchronize(be->stream), err); /* the staging is free again */
        for (int64_t r = 0; r < n; r++) {
            wtensor_row_f32(t, r0 + r, row);
            for (int64_t c = 0; c < t->cols; c++)
                bf[r * t->cols + c] = dtype_f32_to_bf16(row[c]);
        }
        CUDA_CHECK(cudaMemcpy2DAsync((char *)dst + (size_t)r0 * (size_t)ld * 2, (size_t)ld * 2, bf,
                                     (size_t)t->cols * 2, (size_t)t->cols * 2, (size_t)n,
                                     cudaMemcpyHostToDevice, be->stream),
                   err);
    }
    return 0;
}

/* Copies t's block scales into rows [row0, row0 + t->scale_rows) of a [*, ld] f32 scale array
 * (the K-major BLK128x128 layout; columns past scale_cols stay zero). */
static int upload_scales(cuda_backend_t *be, float *dst, int64_t row0, int64_t ld,
                         const wtensor_t *t, err_t *err) {
    CUDA_CHECK(cudaMemcpy2DAsync(dst + row0 * ld, (size_t)ld * 4, t->scale_inv,
                                 (size_t)t->scale_cols * 4, (size_t)t->scale_cols * 4,
                                 (size_t)t->scale_rows, cudaMemcpyHostToDevice, be->stream),
               err);
    return 0;
}

/* Norm vector to f32 on the device (the checkpoint's bf16 values convert exactly). */
static int upload_norm(cuda_backend_t *be, float *dst, const wtensor_t *t, float *stage,
                       err_t *err) {
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    wtensor_row_f32(t, 0, stage);
    CUDA_CHECK(cudaMemcpy(dst, stage, (size_t)t->cols * 4, cudaMemcpyHostToDevice), err);
    return 0;
}

/* Byte layout of the weight arena; with base NULL it only measures. */
typedef struct wlayout {
    char *base;
    size_t off;
} wlayout_t;

static void *take(wlayout_t *a, size_t bytes) {
    void *p = a->base ? a->base + a->off : NULL;
    a->off += align_up(bytes);
    return p;
}

static void layout_weights(cuda_backend_t *be, wlayout_t *a) {
    int64_t H = be->H, qkv_n = be->qkv_n, qd = be->qd, I2 = 2 * (int64_t)be->I_pad, Ip = be->I_pad;
    for (int l = 0; l < be->L; l++) {
        cb_layer_t *y = &be->layers[l];
        y->attn_norm = (float *)take(a, (size_t)H * 4);
        y->mlp_norm = (float *)take(a, (size_t)H * 4);
        y->q_norm = (float *)take(a, (size_t)be->D * 4);
        y->k_norm = (float *)take(a, (size_t)be->D * 4);
        if (be->fp8) {
            struct {
                gemm_w8_t *w;
                int64_t n, k;
            } m[] = {{&y->qkv8, qkv_n, H}, {&y->o8, H, qd}, {&y->gu8, I2, H}, {&y->down8, H, Ip}};
            for (auto &e : m) {
                e.w->n = (int)e.n;
                e.w->k = (int)e.k;
                e.w->data = (const uint8_t *)take(a, (size_t)(e.n * e.k));
                e.w->scale = (const float *)take(a, (size_t)((e.n + 127) / 128) *
                                                        (size_t)gemm_w8_scale_ld((int)e.k) * 4);
            }
        } else {
            struct {
                gemm_w16_t *w;
                int64_t n, k;
            } m[] = {
                {&y->qkv16, qkv_n, H}, {&y->o16, H, qd}, {&y->gu16, I2, H}, {&y->down16, H, Ip}};
            for (auto &e : m) {
                e.w->n = (int)e.n;
                e.w->k = (int)e.k;
                e.w->data = (const uint16_t *)take(a, (size_t)(e.n * e.k) * 2);
            }
        }
    }
    be->embed = (uint16_t *)take(a, (size_t)be->V * (size_t)H * 2);
    be->lm_head.data = be->embed;
    be->lm_head.n = be->V;
    be->lm_head.k = (int)H;
    if (!be->cfg->tie_word_embeddings)
        be->lm_head.data = (const uint16_t *)take(a, (size_t)be->V * (size_t)H * 2);
    be->final_norm = (float *)take(a, (size_t)H * 4);
    be->inv_freq = (float *)take(a, (size_t)be->D / 2 * 4);
}

static int upload_weights(cuda_backend_t *be, err_t *err) {
    const model_weights_t *w = be->w;
    void *stage = NULL;
    CUDA_CHECK(cudaMallocHost(&stage, CONVERT_CHUNK), err);
    int rc = -1;
    float *fstage = (float *)stage;
    int64_t H = be->H, Ip = be->I_pad;
    for (int l = 0; l < be->L; l++) {
        cb_layer_t *y = &be->layers[l];
        if (upload_norm(be, y->attn_norm, weights_layer(w, l, L_ATTN_NORM), fstage, err) < 0 ||
            upload_norm(be, y->mlp_norm, weights_layer(w, l, L_MLP_NORM), fstage, err) < 0 ||
            upload_norm(be, y->q_norm, weights_layer(w, l, L_Q_NORM), fstage, err) < 0 ||
            upload_norm(be, y->k_norm, weights_layer(w, l, L_K_NORM), fstage, err) < 0)
            goto out;
        /* (slot, fused weight, first row, ld) */
        struct {
            lslot_t slot;
            int which; /* 0 qkv, 1 o, 2 gate_up, 3 down */
            int64_t row0;
        } parts[] = {{L_Q, 0, 0},   {L_K, 0, be->qd}, {L_V, 0, be->qd + be->kvd},
                     {L_O, 1, 0},   {L_GATE, 2, 0},   {L_UP, 2, Ip},
                     {L_DOWN, 3, 0}};
        for (auto &p : parts) {
            const wtensor_t *t = weights_layer(w, l, p.slot);
            if (be->fp8) {
                gemm_w8_t *g = p.which == 0   ? &y->qkv8
                               : p.which == 1 ? &y->o8
                               : p.which == 2 ? &y->gu8
                                              : &y->down8;
                int64_t ld = g->k, sld = gemm_w8_scale_ld(g->k);
                if (upload_rows(be, (uint8_t *)g->data + p.row0 * ld, ld, UP_FP8, t, stage, err) <
                        0 ||
                    upload_scales(be, (float *)g->scale, p.row0 / 128, sld, t, err) < 0)
                    goto out;
            } else {
                gemm_w16_t *g = p.which == 0   ? &y->qkv16
                                : p.which == 1 ? &y->o16
                                : p.which == 2 ? &y->gu16
                                               : &y->down16;
                int64_t ld = g->k;
                if (upload_rows(be, (uint16_t *)g->data + p.row0 * ld, ld, UP_BF16, t, stage, err) <
                    0)
                    goto out;
            }
        }
    }
    if (upload_rows(be, be->embed, H, UP_BF16, weights_global(w, G_EMBED), stage, err) < 0)
        goto out;
    if (!be->cfg->tie_word_embeddings && upload_rows(be, (void *)be->lm_head.data, H, UP_BF16,
                                                     weights_global(w, G_LM_HEAD), stage, err) < 0)
        goto out;
    if (upload_norm(be, be->final_norm, weights_global(w, G_FINAL_NORM), fstage, err) < 0) goto out;
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    cpu_rope_inv_freq(be->D, be->cfg->rope_theta, fstage);
    if (cudaMemcpy(be->inv_freq, fstage, (size_t)be->D / 2 * 4, cudaMemcpyHostToDevice) !=
        cudaSuccess) {
        err_set(err, "cuda backend: uploading the RoPE frequencies failed");
        goto out;
    }
    {
        cudaError_t e = cudaStreamSynchronize(be->stream);
        if (e != cudaSuccess) {
            err_set(err, "cuda backend: uploading the weights failed: %s", cudaGetErrorString(e));
            goto out;
        }
    }
    rc = 0;
out:
    cudaStreamSynchronize(be->stream);
    cudaFreeHost(stage);
    return rc;
}

/* Whether the checkpoint can run as FP8 block-scaled GEMMs; why not otherwise. */
static bool fp8_possible(cuda_backend_t *be) {
    const model_config_t *c = be->cfg;
    char *why = be->fp8_why;
    size_t n = sizeof be->fp8_why;
    if (c->fp8_block_n != 128 || c->fp8_block_k != 128) {
        snprintf(why, n, "FP8 blocks are %dx%d, cuBLASLt takes 128x128", c->fp8_block_n,
                 c->fp8_block_k);
        return false;
    }
    if (be->H % 128 || be->qd % 128 || be->kvd % 128) {
        snprintf(why, n,
                 "hidden %d / q %d / kv %d not multiples of 128 (scale blocks would straddle "
                 "the fused QKV)",
                 be->H, be->qd, be->kvd);
        return false;
    }
    for (int l = 0; l < be->L; l++)
        for (int s : {L_Q, L_K, L_V, L_O, L_GATE, L_UP, L_DOWN})
            if (weights_layer(be->w, l, (lslot_t)s)->dtype != DT_F8_E4M3) {
                snprintf(why, n, "layer %d has a %s projection", l,
                         dtype_name(weights_layer(be->w, l, (lslot_t)s)->dtype));
                return false;
            }
    int shapes[4][2] = {
        {be->qkv_n, be->H}, {be->H, be->qd}, {2 * be->I_pad, be->H}, {be->H, be->I_pad}};
    for (auto &s : shapes)
        if (!gemm_fp8_shape_ok(s[0], s[1], why, n)) return false;
    /* cuBLASLt must have an algorithm for every shape, at decode and at prefill sizes */
    for (auto &s : shapes)
        for (int t : {1, 256}) {
            err_t e = {{0}};
            if (gemm_fp8_check(be->gemm, s[0], s[1], t, GEMM_OUT_F32, &e) < 0) {
                snprintf(why, n, "%s", e.msg);
                return false;
            }
        }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Workspaces

static int alloc_dev(cuda_backend_t *be, void **p, size_t bytes, const char *what, err_t *err) {
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

/* The activation arena's layout; with base NULL it only measures. */
static size_t layout_activations(cuda_backend_t *be, char *base) {
    wlayout_t a = {base, 0};
    size_t T = (size_t)be->cap_t, H = (size_t)be->H, K = (size_t)be->kmax;
    be->resid = (float *)take(&a, T * H * 4);
    if (be->fp8) {
        be->xq = (uint8_t *)take(&a, T * K);
        be->xs = (float *)take(&a, (K + 127) / 128 * T * 4);
    } else {
        be->x16 = (uint16_t *)take(&a, T * K * 2);
    }
    be->qkv = take(&a, T * (size_t)be->qkv_n * GEMM_OUT_BYTES);
    be->q = (uint16_t *)take(&a, T * (size_t)be->qd * 2);
    be->att = (uint16_t *)take(&a, T * (size_t)be->qd * 2);
    be->o_out = take(&a, T * H * GEMM_OUT_BYTES);
    be->gu = take(&a, T * 2 * (size_t)be->I_pad * GEMM_OUT_BYTES);
    be->d_out = take(&a, T * H * GEMM_OUT_BYTES);
    return a.off;
}

static size_t layout_logits(cuda_backend_t *be, char *base) {
    wlayout_t a = {base, 0};
    be->xf = (uint16_t *)take(&a, (size_t)be->cap_l * (size_t)be->H * 2);
    be->logits = (float *)take(&a, (size_t)be->cap_l * (size_t)be->V * 4);
    be->counts = take(&a, ops_sample_workspace_bytes(be->cap_l, be->V));
    return a.off;
}

static size_t layout_meta(cuda_backend_t *be, char *base, bool host) {
    wlayout_t a = {base, 0};
    size_t T = (size_t)be->cap_t, S = (size_t)be->cap_s, Lr = (size_t)be->cap_l;
    int32_t *ids = (int32_t *)take(&a, T * 4), *pos = (int32_t *)take(&a, T * 4);
    int64_t *slots = (int64_t *)take(&a, T * 8);
    int32_t *qs = (int32_t *)take(&a, (S + 1) * 4), *ctx = (int32_t *)take(&a, S * 4);
    int32_t *lrows = (int32_t *)take(&a, Lr * 4);
    if (host) {
        be->ids_h = ids, be->pos_h = pos, be->slots_h = slots, be->qs_h = qs, be->ctx_h = ctx;
        be->lrows_h = lrows;
    } else {
        be->ids_d = ids, be->pos_d = pos, be->slots_d = slots, be->qs_d = qs, be->ctx_d = ctx;
        be->lrows_d = lrows;
    }
    return a.off;
}

/* Grows a device buffer and its pinned host staging copy (int32 elements, contents dropped) to at
 * least need, doubling; captured graphs are dropped first when they read the old device address. */
static int grow_mirrored(cuda_backend_t *be, int32_t **d, int32_t **h, size_t *cap_io, size_t need,
                         bool in_graphs, const char *what, err_t *err) {
    if (need <= *cap_io) return 0;
    size_t cap = *cap_io ? *cap_io : 1 << 16;
    while (cap < need)
        cap *= 2;
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    if (in_graphs) drop_graphs(be);
    cudaFree(*d);
    cudaFreeHost(*h);
    *d = *h = NULL;
    *cap_io = 0;
    if (alloc_dev(be, (void **)d, cap * 4, what, err) < 0) return -1;
    CUDA_CHECK(cudaMallocHost((void **)h, cap * 4), err);
    *cap_io = cap;
    return 0;
}

static int grow_tables(cuda_backend_t *be, size_t need, err_t *err) {
    return grow_mirrored(be, &be->tables_d, &be->tables_h, &be->cap_tables, need, true,
                         "block tables", err);
}

static int grow_arena(cuda_backend_t *be, size_t need, err_t *err) {
    return grow_mirrored(be, &be->arena_d, &be->arena_h, &be->cap_arena, need, false,
                         "sampler token lists", err);
}

// ---------------------------------------------------------------------------------------------
// The layer stack

/* Sizes of one run of the stack: T tokens of n_seqs sequences (host values baked into the
 * launches, so a graph captured with them replays for any batch of that shape). */
typedef struct run_args {
    int T, n_seqs, n_logits;
    int max_q, max_ctx;
    bool decode;
    int splits;
    const int32_t *rows; /* device logit rows, or NULL: rows 0..n_logits-1 */
    float *logits;       /* [n_logits, V] f32 device */
    int stride;          /* block-table stride */
} run_args_t;

static int run_stack(cuda_backend_t *be, const run_args_t *r, err_t *err) {
    cudaStream_t st = be->stream;
    const int T = r->T, Tp = ops_pad_tokens(r->T), H = be->H;
    if (ops_embed(be->embed, be->ids_d, T, H, be->resid, st, err) < 0) return -1;
    ops_attn_args_t at = {};
    at.q = be->q;
    at.out = be->att;
    at.kv_dtype = be->kv_dtype;
    at.kv_scale = 1.0f;
    at.n_seqs = r->n_seqs;
    at.n_tokens = T;
    at.n_heads = be->nH;
    at.n_kv_heads = be->nKV;
    at.head_dim = be->D;
    at.block_size = be->block_size;
    at.query_start = be->qs_d;
    at.context_len = be->ctx_d;
    at.block_tables = be->tables_d;
    at.block_table_stride = r->stride;
    at.scale = (float)(1.0 / sqrt((double)be->D));
    for (int l = 0; l < be->L; l++) {
        const cb_layer_t *y = &be->layers[l];
        const void *add = l ? be->d_out : NULL;
        void *kc = (char *)be->kv_mem + (size_t)(2 * l) * be->pool_bytes;
        void *vc = (char *)be->kv_mem + (size_t)(2 * l + 1) * be->pool_bytes;
        if (be->fp8) {
            if (ops_add_rmsnorm_fp8(be->resid, add, GEMM_OUT, NULL, T, Tp, H, y->attn_norm, be->eps,
                                    be->xq, be->xs, st, err) < 0 ||
                gemm_fp8(be->gemm, &y->qkv8, be->xq, be->xs, T, be->qkv, GEMM_OUT_F32, err) < 0)
                return -1;
        } else {
            if (ops_add_rmsnorm_bf16(be->resid, add, GEMM_OUT, NULL, T, H, y->attn_norm, be->eps,
                                     be->x16, st, err) < 0 ||
                gemm_bf16(be->gemm, &y->qkv16, be->x16, T, be->qkv, GEMM_OUT_F32, err) < 0)
                return -1;
        }
        ops_qkv_args_t qa = {};
        qa.qkv = be->qkv;
        qa.qkv_dtype = GEMM_OUT;
        qa.ld_qkv = be->qkv_n;
        qa.T = T;
        qa.n_heads = be->nH;
        qa.n_kv_heads = be->nKV;
        qa.head_dim = be->D;
        qa.q_norm = y->q_norm;
        qa.k_norm = y->k_norm;
        qa.eps = be->eps;
        qa.inv_freq = be->inv_freq;
        qa.positions = be->pos_d;
        qa.slot_mapping = be->slots_d;
        qa.q_out = be->q;
        qa.k_cache = kc;
        qa.v_cache = vc;
        qa.kv_dtype = be->kv_dtype;
        qa.kv_scale = 1.0f;
        qa.block_size = be->block_size;
        if (ops_qk_norm_rope_kv(&qa, st, err) < 0) return -1;
        at.k_cache = kc;
        at.v_cache = vc;
        int rc = r->decode ? ops_attention_decode(&at, r->splits, be->attn_ws, st, err)
                           : ops_attention_prefill(&at, r->max_q, st, err);
        if (rc < 0) return -1;
        if (be->fp8) {
            if (ops_quant_fp8(be->att, OPS_BF16, be->qd, T, be->qd, Tp, be->qd, be->xq, be->xs, st,
                              err) < 0 ||
                gemm_fp8(be->gemm, &y->o8, be->xq, be->xs, T, be->o_out, GEMM_OUT_F32, err) < 0 ||
                ops_add_rmsnorm_fp8(be->resid, be->o_out, GEMM_OUT, NULL, T, Tp, H, y->mlp_norm,
                                    be->eps, be->xq, be->xs, st, err) < 0 ||
                gemm_fp8(be->gemm, &y->gu8, be->xq, be->xs, T, be->gu, GEMM_OUT_F32, err) < 0 ||
                ops_silu_mul_fp8(be->gu, GEMM_OUT, 2 * (int64_t)be->I_pad, T, be->I_pad, Tp,
                                 be->I_pad, be->xq, be->xs, st, err) < 0 ||
                gemm_fp8(be->gemm, &y->down8, be->xq, be->xs, T, be->d_out, GEMM_OUT_F32, err) < 0)
                return -1;
        } else {
            if (gemm_bf16(be->gemm, &y->o16, be->att, T, be->o_out, GEMM_OUT_F32, err) < 0 ||
                ops_add_rmsnorm_bf16(be->resid, be->o_out, GEMM_OUT, NULL, T, H, y->mlp_norm,
                                     be->eps, be->x16, st, err) < 0 ||
                gemm_bf16(be->gemm, &y->gu16, be->x16, T, be->gu, GEMM_OUT_F32, err) < 0 ||
                ops_silu_mul_bf16(be->gu, GEMM_OUT, 2 * (int64_t)be->I_pad, T, be->I_pad, be->x16,
                                  st, err) < 0 ||
                gemm_bf16(be->gemm, &y->down16, be->x16, T, be->d_out, GEMM_OUT_F32, err) < 0)
                return -1;
        }
    }
    if (r->n_logits == 0) return 0;
    if (ops_add_rmsnorm_bf16(be->resid, be->d_out, GEMM_OUT, r->rows, r->n_logits, H,
                             be->final_norm, be->eps, be->xf, st, err) < 0)
        return -1;
    return gemm_bf16(be->gemm, &be->lm_head, be->xf, r->n_logits, r->logits, true, err);
}

// ---------------------------------------------------------------------------------------------
// Batches

/* What forward() must hold not to read or write out of bounds (as the CPU backend checks). */
static int check_batch(const cuda_backend_t *be, const be_batch_t *b, err_t *err) {
    if (!b) return err_set(err, "cuda backend: NULL batch");
    if (!be->kv_mem) return err_set(err, "cuda backend: forward before kv_reserve");
    if (b->n_tokens < 0 || b->n_seqs < 0 || b->n_logits < 0 || b->n_logits > b->n_tokens)
        return err_set(err, "cuda backend: batch of %d tokens, %d sequences, %d logit rows",
                       b->n_tokens, b->n_seqs, b->n_logits);
    if (b->n_tokens == 0) return 0;
    if (!b->token_ids || !b->positions || !b->slot_mapping || !b->query_start || !b->context_len ||
        !b->block_tables || (b->n_logits > 0 && !b->logit_rows) || b->block_table_stride < 1)
        return err_set(err, "cuda backend: batch array missing");
    if (b->query_start[0] != 0 || b->query_start[b->n_seqs] != b->n_tokens)
        return err_set(err, "cuda backend: query_start does not span the %d tokens", b->n_tokens);
    for (int s = 0; s < b->n_seqs; s++) {
        int n_new = b->query_start[s + 1] - b->query_start[s], ctx = b->context_len[s];
        if (n_new < 0 || ctx < n_new ||
            ((int64_t)ctx + be->block_size - 1) / be->block_size > b->block_table_stride)
            return err_set(err, "cuda backend: sequence %d: %d new tokens, context %d", s, n_new,
                           ctx);
        const int32_t *row = seq_row(b, s);
        for (int i = 0; i * be->block_size < ctx; i++)
            if (row[i] < 0 || row[i] >= be->num_blocks)
                return err_set(err, "cuda backend: sequence %d: block %d out of range [0, %d)", s,
                               row[i], be->num_blocks);
    }
    int64_t slots = (int64_t)be->num_blocks * be->block_size;
    for (int t = 0; t < b->n_tokens; t++) {
        if (b->token_ids[t] < 0 || b->token_ids[t] >= be->V)
            return err_set(err, "cuda backend: token %d: id %d out of range [0, %d)", t,
                           b->token_ids[t], be->V);
        if (b->slot_mapping[t] < -1 || b->slot_mapping[t] >= slots)
            return err_set(err, "cuda backend: token %d: slot %" PRId64 " out of range", t,
                           b->slot_mapping[t]);
        if (b->positions[t] < 0)
            return err_set(err, "cuda backend: token %d: position %d", t, b->positions[t]);
    }
    for (int i = 0; i < b->n_logits; i++) {
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens)
            return err_set(err, "cuda backend: logit row %d out of range [0, %d)", b->logit_rows[i],
                           b->n_tokens);
        if (i > 0 && b->logit_rows[i] <= b->logit_rows[i - 1])
            return err_set(err, "cuda backend: logit rows must ascend (row %d after %d)",
                           b->logit_rows[i], b->logit_rows[i - 1]);
    }
    return 0;
}

/* The next piece starting at token t0 (sequence *s containing it, logit index l). */
static piece_t next_piece(const cuda_backend_t *be, const be_batch_t *b, int t0, int s, int l) {
    piece_t p = {};
    p.t0 = t0;
    p.s0 = s;
    p.l0 = l;
    int t1 = b->n_tokens - t0 > be->cap_t ? t0 + be->cap_t : b->n_tokens;
    if (b->n_seqs - s > be->cap_s && b->query_start[s + be->cap_s] < t1)
        t1 = b->query_start[s + be->cap_s];
    int l1 = l;
    while (l1 < b->n_logits && b->logit_rows[l1] < t1)
        l1++;
    if (l1 - l > be->cap_l) {
        l1 = l + be->cap_l;
        t1 = b->logit_rows[l1];
    }
    p.t1 = t1;
    p.l1 = l1;
    /* Sequences with no new tokens at a piece boundary are left out: they attend nothing and
     * own no logit row. */
    int s1 = s;
    while (s1 < b->n_seqs && b->query_start[s1] < t1)
        s1++;
    p.s1 = s1;
    p.decode = true;
    for (int j = p.s0; j < p.s1; j++) {
        int q0 = b->query_start[j] > t0 ? b->query_start[j] : t0;
        int q1 = b->query_start[j + 1] < t1 ? b->query_start[j + 1] : t1;
        int ctx = b->context_len[j] - (b->query_start[j + 1] - q1);
        if (q1 - q0 > p.max_q) p.max_q = q1 - q0;
        if (ctx > p.max_ctx) p.max_ctx = ctx;
        if (q1 - q0 != 1) p.decode = false;
    }
    return p;
}

/* Fills the staging with the piece's metadata (padded to `pad_seqs` decode sequences when
 * larger) and copies it to the device. */
static int stage_piece(cuda_backend_t *be, const be_batch_t *b, const piece_t *p, int pad_seqs,
                       err_t *err) {
    int nt = p->t1 - p->t0, ns = p->s1 - p->s0, nl = p->l1 - p->l0, stride = b->block_table_stride;
    int rows = pad_seqs > ns ? pad_seqs : ns;
    if (grow_tables(be, (size_t)rows * (size_t)stride, err) < 0) return -1;
    if (be->staging_busy) CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    memcpy(be->ids_h, b->token_ids + p->t0, (size_t)nt * 4);
    memcpy(be->pos_h, b->positions + p->t0, (size_t)nt * 4);
    memcpy(be->slots_h, b->slot_mapping + p->t0, (size_t)nt * 8);
    for (int j = 0; j < ns; j++) {
        int s = p->s0 + j;
        int q0 = b->query_start[s] > p->t0 ? b->query_start[s] : p->t0;
        int q1 = b->query_start[s + 1] < p->t1 ? b->query_start[s + 1] : p->t1;
        be->qs_h[j] = q0 - p->t0;
        be->ctx_h[j] = b->context_len[s] - (b->query_start[s + 1] - q1);
    }
    be->qs_h[ns] = nt;
    memcpy(be->tables_h, seq_row(b, p->s0), (size_t)ns * (size_t)stride * 4);
    for (int i = 0; i < nl; i++)
        be->lrows_h[i] = b->logit_rows[p->l0 + i] - p->t0;
    /* decode padding: one token each at position 0, never written, reading block 0's first slot */
    for (int j = ns; j < rows; j++) {
        be->ids_h[j] = 0;
        be->pos_h[j] = 0;
        be->slots_h[j] = -1;
        be->qs_h[j + 1] = j + 1;
        be->ctx_h[j] = 1;
        be->lrows_h[j] = j;
        memset(be->tables_h + (size_t)j * stride, 0, (size_t)stride * 4);
    }
    CUDA_CHECK(
        cudaMemcpyAsync(be->meta_d, be->meta_h, be->meta_bytes, cudaMemcpyHostToDevice, be->stream),
        err);
    CUDA_CHECK(cudaMemcpyAsync(be->tables_d, be->tables_h, (size_t)rows * (size_t)stride * 4,
                               cudaMemcpyHostToDevice, be->stream),
               err);
    be->staging_busy = true;
    return 0;
}

/* The graph for a decode batch of n sequences (captured now if needed), or NULL. */
static cb_graph_t *graph_for(cuda_backend_t *be, int n, int stride, err_t *err, bool *failed) {
    *failed = false;
    cb_graph_t *g = NULL;
    for (int i = 0; i < be->n_graphs; i++)
        if (be->graph[i].size >= n) {
            g = &be->graph[i];
            break;
        }
    if (!g) return NULL;
    if (g->stride == stride) return g;
    if (g->stride) {
        cudaGraphExecDestroy(g->exec);
        g->stride = 0;
    }
    int S = g->size;
    run_args_t r = {};
    r.T = S;
    r.n_seqs = S;
    r.n_logits = S;
    r.max_q = 1;
    r.decode = true;
    r.splits = S <= SPLIT_MAX_SEQS
                   ? ops_attention_decode_splits(S, be->nKV, be->cfg->max_position_embeddings,
                                                 be->num_sms, MAX_SPLITS)
                   : 1;
    r.rows = NULL;
    r.logits = be->logits;
    r.stride = stride;
    cudaGraph_t graph;
    cudaError_t e = cudaStreamBeginCapture(be->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        err_set(err, "%s:%d: cudaStreamBeginCapture: %s", __FILE__, __LINE__,
                cudaGetErrorString(e));
        *failed = true;
        return NULL;
    }
    int rc = run_stack(be, &r, err);
    e = cudaStreamEndCapture(be->stream, &graph);
    if (rc < 0 || e != cudaSuccess) {
        if (rc == 0)
            err_set(err, "%s:%d: cudaStreamEndCapture: %s", __FILE__, __LINE__,
                    cudaGetErrorString(e));
        if (e == cudaSuccess) cudaGraphDestroy(graph);
        cudaGetLastError();
        *failed = true;
        return NULL;
    }
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        err_set(err, "%s:%d: cudaGraphInstantiate (decode batch %d): %s", __FILE__, __LINE__, S,
                cudaGetErrorString(e));
        *failed = true;
        return NULL;
    }
    g->stride = stride;
    be->captured++;
    return g;
}

static int forward_piece(cuda_backend_t *be, const be_batch_t *b, const piece_t *p, float *host,
                         bool resident, err_t *err) {
    int ns = p->s1 - p->s0, nl = p->l1 - p->l0;
    float *dst = be->logits + (resident ? (size_t)p->l0 * (size_t)be->V : 0);
    bool whole_decode = p->decode && nl == ns && p->t1 - p->t0 == ns && p->l0 == 0 && p->t0 == 0 &&
                        p->t1 == b->n_tokens;
    for (int i = 0; whole_decode && i < nl; i++)
        if (b->logit_rows[i] != i) whole_decode = false;
    if (be->graphs && whole_decode) {
        bool failed;
        int S = 0;
        for (int i = 0; i < be->n_graphs; i++)
            if (be->graph[i].size >= ns) {
                S = be->graph[i].size;
                break;
            }
        if (S) {
            if (stage_piece(be, b, p, S, err) < 0) return -1;
            cb_graph_t *g = graph_for(be, ns, b->block_table_stride, err, &failed);
            if (failed) {
                /* a capture problem must not fail the step: run eagerly from now on */
                fprintf(stderr, "tachyon: cuda: CUDA graph capture failed (%s); graphs off\n",
                        err->msg);
                be->graphs = false;
                err->msg[0] = 0;
                g = NULL;
            }
            if (g) {
                CUDA_CHECK(cudaGraphLaunch(g->exec, be->stream), err);
                be->replays++;
                goto logits;
            }
        }
    }
    {
        if (stage_piece(be, b, p, 0, err) < 0) return -1;
        run_args_t r = {};
        r.T = p->t1 - p->t0;
        r.n_seqs = ns;
        r.n_logits = nl;
        r.max_q = p->max_q;
        r.max_ctx = p->max_ctx;
        r.decode = p->decode;
        r.splits =
            p->decode && ns <= SPLIT_MAX_SEQS
                ? ops_attention_decode_splits(ns, be->nKV, p->max_ctx, be->num_sms, MAX_SPLITS)
                : 1;
        r.rows = be->lrows_d;
        r.logits = dst;
        r.stride = b->block_table_stride;
        if (run_stack(be, &r, err) < 0) return -1;
    }
logits:
    if (host && nl > 0)
        CUDA_CHECK(cudaMemcpyAsync(host + (size_t)p->l0 * (size_t)be->V, dst,
                                   (size_t)nl * (size_t)be->V * 4, cudaMemcpyDeviceToHost,
                                   be->stream),
                   err);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Backend operations

static void cb_destroy(backend_t *base) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    if (!be) return;
    if (be->stream) cudaStreamSynchronize(be->stream);
    drop_graphs(be);
    gemm_destroy(be->gemm);
    cudaFree(be->wmem);
    cudaFree(be->amem);
    cudaFree(be->kv_mem);
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
    if (be->stream) cudaStreamDestroy(be->stream);
    free(be->layers);
    free(be);
}

static size_t cb_kv_block_bytes(const backend_t *base, int block_size) {
    const cuda_backend_t *be = (const cuda_backend_t *)base;
    return 2 * (size_t)be->L * ops_kv_pool_bytes(1, block_size, be->nKV, be->D, be->kv_dtype_next);
}

static uint64_t cb_kv_pool_bytes(const backend_t *base, double utilization) {
    const cuda_backend_t *be = (const cuda_backend_t *)base;
    size_t free_b = 0, total = 0;
    if (cudaSetDevice(be->device) != cudaSuccess || cudaMemGetInfo(&free_b, &total) != cudaSuccess)
        return 0;
    uint64_t current = be->kv_mem ? 2 * (uint64_t)be->L * be->pool_bytes : 0;
    double left =
        utilization * (double)total - (double)(total - free_b - current) - (double)RESERVE_BYTES;
    return left > 0 ? (uint64_t)left : 0;
}

static int cb_kv_reserve(backend_t *base, int num_blocks, int block_size, err_t *err) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    CUDA_CHECK(cudaSetDevice(be->device), err);
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    drop_graphs(be);
    cudaFree(be->kv_mem);
    be->kv_mem = NULL;
    be->num_blocks = be->block_size = 0;
    if (num_blocks < 1 || (block_size != 16 && block_size != 32))
        return err_set(err, "cuda backend: KV pool of %d blocks of %d tokens (block size 16 or 32)",
                       num_blocks, block_size);
    size_t pool = ops_kv_pool_bytes(num_blocks, block_size, be->nKV, be->D, be->kv_dtype_next);
    pool = align_up(pool);
    size_t total = 2 * (size_t)be->L * pool;
    if (alloc_dev(be, &be->kv_mem, total, "the KV cache", err) < 0) return -1;
    /* finite values everywhere: padded decode rows read block 0 */
    CUDA_CHECK(cudaMemsetAsync(be->kv_mem, 0, total, be->stream), err);
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    be->pool_bytes = pool;
    be->kv_dtype = be->kv_dtype_next;
    be->num_blocks = num_blocks;
    be->block_size = block_size;
    fprintf(stderr, "tachyon: cuda KV cache: %.2f GiB %s, %d blocks of %d tokens = %lld tokens\n",
            (double)total / (double)(1ull << 30), be->kv_dtype == OPS_KV_FP8 ? "fp8" : "bf16",
            num_blocks, block_size, (long long)num_blocks * block_size);
    return 0;
}

static int cb_forward(backend_t *base, const be_batch_t *b, float *logits, err_t *err) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    be->logits_rows = -1;
    if (check_batch(be, b, err) < 0) return -1;
    if (b->n_tokens == 0) return 0;
    CUDA_CHECK(cudaSetDevice(be->device), err);
    bool resident = b->n_logits <= be->cap_l;
    if (!logits && !resident)
        return err_set(err,
                       "cuda backend: %d logit rows in one step; device sampling takes at most %d "
                       "(max-num-seqs)",
                       b->n_logits, be->cap_l);
    int t0 = 0, s = 0, l = 0;
    while (t0 < b->n_tokens) {
        while (b->query_start[s + 1] <= t0)
            s++;
        piece_t p = next_piece(be, b, t0, s, l);
        if (forward_piece(be, b, &p, logits, resident, err) < 0) {
            cudaStreamSynchronize(be->stream);
            be->staging_busy = false;
            return -1;
        }
        t0 = p.t1;
        l = p.l1;
    }
    if (logits || !be->base.ops->sample) {
        CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
        be->staging_busy = false;
    }
    be->logits_rows = resident ? b->n_logits : -1;
    return 0;
}

static int cb_sample(backend_t *base, const sampler_row_t *rows, int n_rows, sampler_result_t *out,
                     err_t *err) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    if (n_rows == 0) return 0;
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
    /* The sampler's staging is its own (the forward's may still be in flight): the last sample()
     * ended with the stream synchronized, so it is free. */
    if (grow_arena(be, need + 1, err) < 0) return -1;
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
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    be->staging_busy = false;
    memcpy(out, be->sres_h, (size_t)n_rows * sizeof *out);
    return 0;
}

static void cb_describe(const backend_t *base, char *buf, size_t size) {
    const cuda_backend_t *be = (const cuda_backend_t *)base;
    snprintf(buf, size, "cuda, %s (sm_%d%d), %s, graphs %s%s", be->device_name, be->sm_major,
             be->sm_minor, be->fp8 ? "fp8 w8a8" : "bf16", be->graphs ? "on" : "off",
             be->kv_dtype == OPS_KV_FP8 ? ", kv fp8" : "");
}

static void cb_configure(backend_t *base, const backend_options_t *opts) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    int seqs = opts->max_num_seqs > 0 ? opts->max_num_seqs : DEFAULT_MAX_SEQS;
    be->graphs = opts->cuda_graphs;
    /* takes effect at the next kv_reserve (the engine rebuilds the pool after this) */
    be->kv_dtype_next = opts->kv_cache_dtype == KV_DTYPE_FP8 ? OPS_KV_FP8 : OPS_KV_BF16;
    if (seqs != be->max_seqs_live) {
        cudaStreamSynchronize(be->stream);
        be->max_seqs_live = seqs;
        plan_graphs(be);
    }
}

/* Checks the weights the way the CPU backend does: present, the config's shapes. */
static int check_weights(const cuda_backend_t *be, err_t *err) {
    const model_weights_t *w = be->w;
    int64_t H = be->H, D = be->D, I = be->I, qd = be->qd, kvd = be->kvd, V = be->V;
    int64_t shapes[L_COUNT][2];
    shapes[L_ATTN_NORM][0] = 1, shapes[L_ATTN_NORM][1] = H;
    shapes[L_Q][0] = qd, shapes[L_Q][1] = H;
    shapes[L_K][0] = kvd, shapes[L_K][1] = H;
    shapes[L_V][0] = kvd, shapes[L_V][1] = H;
    shapes[L_O][0] = H, shapes[L_O][1] = qd;
    shapes[L_Q_NORM][0] = 1, shapes[L_Q_NORM][1] = D;
    shapes[L_K_NORM][0] = 1, shapes[L_K_NORM][1] = D;
    shapes[L_MLP_NORM][0] = 1, shapes[L_MLP_NORM][1] = H;
    shapes[L_GATE][0] = I, shapes[L_GATE][1] = H;
    shapes[L_UP][0] = I, shapes[L_UP][1] = H;
    shapes[L_DOWN][0] = H, shapes[L_DOWN][1] = I;
    for (int l = 0; l < be->L; l++)
        for (int s = 0; s < L_COUNT; s++) {
            const wtensor_t *t = weights_layer(w, l, (lslot_t)s);
            if (!t || (!t->data && !t->dummy) || t->rows != shapes[s][0] || t->cols != shapes[s][1])
                return err_set(err, "cuda backend: layer %d tensor %d missing or misshapen", l, s);
            if (t->dtype == DT_F8_E4M3 &&
                (!t->scale_inv || t->block_n != 128 || t->block_k != 128 ||
                 t->scale_rows != (t->rows + 127) / 128 || t->scale_cols != (t->cols + 127) / 128))
                return err_set(err, "cuda backend: layer %d tensor %d: FP8 without 128x128 scales",
                               l, s);
            if (t->dtype != DT_F8_E4M3 && t->dtype != DT_BF16 && t->dtype != DT_F16 &&
                t->dtype != DT_F32)
                return err_set(err, "cuda backend: layer %d tensor %d has dtype %s", l, s,
                               dtype_name(t->dtype));
        }
    const wtensor_t *g[] = {weights_global(w, G_EMBED), weights_global(w, G_LM_HEAD)};
    for (const wtensor_t *t : g)
        if (!t || (!t->data && !t->dummy) || t->rows != V || t->cols != H)
            return err_set(err, "cuda backend: embedding or lm_head missing or misshapen");
    const wtensor_t *fn = weights_global(w, G_FINAL_NORM);
    if (!fn || !fn->data || fn->cols != H) return err_set(err, "cuda backend: final norm missing");
    return 0;
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

static int cb_create(const backend_options_t *opts, const model_weights_t *w, backend_t **out,
                     err_t *err) {
    *out = NULL;
    const model_config_t *c = weights_config(w);
    if (strcmp(c->model_type, "qwen3") != 0)
        return err_set(err, "cuda backend: model type %s is not supported (qwen3 only)",
                       c->model_type);
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
    be->cfg = c;
    be->w = w;
    be->device = device;
    snprintf(be->device_name, sizeof be->device_name, "%s", prop.name);
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
    be->I = c->intermediate_size;
    be->V = c->vocab_size;
    be->L = c->n_layers;
    be->eps = c->rms_norm_eps;
    be->logits_rows = -1;
    be->layers = (cb_layer_t *)calloc((size_t)be->L, sizeof *be->layers);
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
    if (check_weights(be, err) < 0) goto fail;
    be->I_pad = (be->I + 127) / 128 * 128;
    TRY_CUDA(cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking));
    if (gemm_create(be->stream, GEMM_WORKSPACE, &be->gemm, err) < 0) goto fail;
    be->fp8 = c->fp8 && fp8_possible(be);
    if (!be->fp8) be->I_pad = (be->I + 7) / 8 * 8;
    if (c->fp8 && !be->fp8)
        fprintf(stderr, "tachyon: cuda: FP8 checkpoint runs as BF16 (dequantized at load): %s\n",
                be->fp8_why);
    be->kmax = be->H > be->qd ? be->H : be->qd;
    if (be->I_pad > be->kmax) be->kmax = be->I_pad;
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
        be->graphs = opts && opts->cuda_graphs;
        be->kv_dtype_next = opts && opts->kv_cache_dtype == KV_DTYPE_FP8 ? OPS_KV_FP8 : OPS_KV_BF16;
        be->kv_dtype = be->kv_dtype_next;
    }

    if (ops_init(err) < 0) goto fail;
    TRY_CUDA(cudaMemGetInfo(&free_b, &total));
    {
        wlayout_t probe = {NULL, 0};
        layout_weights(be, &probe);
        memplan_t *pl = &be->plan;
        pl->device_total = total;
        pl->device_free = free_b;
        pl->utilization = opts ? opts->gpu_memory_utilization : 0.9;
        pl->weights = probe.off;
        pl->activations = layout_activations(be, NULL);
        pl->logits = layout_logits(be, NULL);
        pl->workspaces = GEMM_WORKSPACE +
                         ops_attention_workspace_bytes(SPLIT_MAX_SEQS, be->nH, be->D, MAX_SPLITS) +
                         2 * layout_meta(be, NULL, false);
        pl->reserve = RESERVE_BYTES;
        pl->max_tokens = be->cap_t;
        pl->max_seqs = be->cap_s;
        pl->kv_block_bytes = cb_kv_block_bytes(&be->base, 16);
        pl->block_size = 16;
        if (be->plan.utilization <= 0) be->plan.utilization = 0.9;
        memplan_print(&be->plan, stderr);

        if (alloc_dev(be, &be->wmem, probe.off, "the weights", err) < 0) goto fail;
        TRY_CUDA(cudaMemsetAsync(be->wmem, 0, probe.off, be->stream));
        wlayout_t real = {(char *)be->wmem, 0};
        layout_weights(be, &real);
        if (upload_weights(be, err) < 0) goto fail;

        size_t act = align_up(be->plan.activations), lg = align_up(be->plan.logits);
        if (alloc_dev(be, &be->amem, act + lg, "the activation workspace and logits", err) < 0)
            goto fail;
        layout_activations(be, (char *)be->amem);
        layout_logits(be, (char *)be->amem + act);
        TRY_CUDA(cudaMemsetAsync(be->counts, 0, ops_sample_workspace_bytes(be->cap_l, be->V),
                                 be->stream));
        size_t aws = ops_attention_workspace_bytes(SPLIT_MAX_SEQS, be->nH, be->D, MAX_SPLITS);
        if (alloc_dev(be, &be->attn_ws, aws, "the decode attention workspace", err) < 0) goto fail;
        be->meta_bytes = layout_meta(be, NULL, false);
        if (alloc_dev(be, &be->meta_d, be->meta_bytes, "step metadata", err) < 0) goto fail;
        TRY_CUDA(cudaMallocHost(&be->meta_h, be->meta_bytes));
        layout_meta(be, (char *)be->meta_d, false);
        layout_meta(be, (char *)be->meta_h, true);
        if (alloc_dev(be, (void **)&be->srows_d, (size_t)be->cap_l * sizeof(ops_sample_row_t),
                      "sampler rows", err) < 0 ||
            alloc_dev(be, (void **)&be->sres_d, (size_t)be->cap_l * sizeof(sampler_result_t),
                      "sampler results", err) < 0)
            goto fail;
        TRY_CUDA(
            cudaMallocHost((void **)&be->srows_h, (size_t)be->cap_l * sizeof(ops_sample_row_t)));
        TRY_CUDA(
            cudaMallocHost((void **)&be->sres_h, (size_t)be->cap_l * sizeof(sampler_result_t)));
        if (grow_tables(be, (size_t)be->cap_s * 64, err) < 0 || grow_arena(be, 1 << 16, err) < 0)
            goto fail;
        TRY_CUDA(cudaStreamSynchronize(be->stream));
    }
    plan_graphs(be);
    *out = &be->base;
    rc = 0;
fail:
    if (rc < 0) {
        err_prefix(err, "cuda backend");
        cb_destroy(&be->base);
    }
    return rc;
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

extern "C" int cuda_backend_weight_value(const backend_t *base, int layer, int slot, int64_t row,
                                         int64_t col, float *out, err_t *err) {
    const cuda_backend_t *be = (const cuda_backend_t *)base;
    const void *data;
    const float *scale = NULL;
    int64_t ld, r = row, sld = 0;
    if (layer < 0) {
        if (slot != G_EMBED && slot != G_LM_HEAD)
            return err_set(err, "cuda backend: no device copy of global tensor %d", slot);
        data = slot == G_EMBED ? be->embed : be->lm_head.data;
        ld = be->H;
        if (row < 0 || row >= be->V || col < 0 || col >= be->H)
            return err_set(err, "cuda backend: element (%" PRId64 ", %" PRId64 ") out of range",
                           row, col);
    } else {
        if (layer >= be->L) return err_set(err, "cuda backend: layer %d out of range", layer);
        const cb_layer_t *y = &be->layers[layer];
        int which;
        switch (slot) {
            case L_Q:
                which = 0;
                break;
            case L_K:
                which = 0;
                r += be->qd;
                break;
            case L_V:
                which = 0;
                r += be->qd + be->kvd;
                break;
            case L_O:
                which = 1;
                break;
            case L_GATE:
                which = 2;
                break;
            case L_UP:
                which = 2;
                r += be->I_pad;
                break;
            case L_DOWN:
                which = 3;
                break;
            default:
                return err_set(err, "cuda backend: slot %d is not a projection", slot);
        }
        const wtensor_t *t = weights_layer(be->w, layer, (lslot_t)slot);
        if (row < 0 || row >= t->rows || col < 0 || col >= t->cols)
            return err_set(err, "cuda backend: element (%" PRId64 ", %" PRId64 ") out of range",
                           row, col);
        if (be->fp8) {
            const gemm_w8_t *g = which == 0   ? &y->qkv8
                                 : which == 1 ? &y->o8
                                 : which == 2 ? &y->gu8
                                              : &y->down8;
            data = g->data;
            ld = g->k;
            scale = g->scale;
            sld = gemm_w8_scale_ld(g->k);
        } else {
            const gemm_w16_t *g = which == 0   ? &y->qkv16
                                  : which == 1 ? &y->o16
                                  : which == 2 ? &y->gu16
                                               : &y->down16;
            data = g->data;
            ld = g->k;
        }
    }
    CUDA_CHECK(cudaSetDevice(be->device), err);
    if (scale) {
        uint8_t q;
        float s;
        CUDA_CHECK(cudaMemcpy(&q, (const uint8_t *)data + r * ld + col, 1, cudaMemcpyDeviceToHost),
                   err);
        CUDA_CHECK(cudaMemcpy(&s, scale + (r / 128) * sld + col / 128, 4, cudaMemcpyDeviceToHost),
                   err);
        *out = dtype_e4m3_to_f32(q) * s;
    } else {
        uint16_t v;
        CUDA_CHECK(cudaMemcpy(&v, (const uint16_t *)data + r * ld + col, 2, cudaMemcpyDeviceToHost),
                   err);
        *out = dtype_bf16_to_f32(v);
    }
    return 0;
}

extern "C" bool cuda_backend_uses_fp8(const backend_t *base) {
    return ((const cuda_backend_t *)base)->fp8;
}

extern "C" void cuda_backend_graph_stats(const backend_t *base, long *replays, int *captured) {
    const cuda_backend_t *be = (const cuda_backend_t *)base;
    *replays = be->replays;
    *captured = be->captured;
}

/* Positional: the fields of backend_ops_t in order (name, create, destroy, kv_block_bytes,
 * kv_reserve, forward, sample, describe, kv_pool_bytes, configure, makes_dummy_weights). */
extern "C" const backend_ops_t cuda_backend_ops = {
    "cuda",    cb_create,   cb_destroy,       cb_kv_block_bytes, cb_kv_reserve, cb_forward,
    cb_sample, cb_describe, cb_kv_pool_bytes, cb_configure,      true,
};

/*
 * The CPU backend: a model's forward pass in f32 over one varlen batch, the reference numerics
 * of the project (Qwen3: models.md 1.3; Qwen3.5: 4). One step, T tokens of many sequences
 * (be_batch_t), runs the layers as the model describes them (model_config_t.layer; Qwen3:
 * ATTN_FULL + MLP_DENSE; Qwen3.5: ATTN_LINEAR or ATTN_GATED, + MLP_DENSE):
 *
 *     h = embed[token_ids]                                         [T, H]
 *     for each layer l:
 *         full_attention (ATTN_FULL, ATTN_GATED):
 *             x = rmsnorm(h, attn_norm)                            [T, H]
 *             q, k, v = x Wq^T, x Wk^T, x Wv^T                     [T, nH*D], [T, nKV*D] x 2
 *                 (ATTN_GATED: x Wq^T is [q_h | gate_h] per head, [T, nH*2D])
 *             q, k = rope(rmsnorm(q, q_norm)), rope(rmsnorm(k, k_norm))      per head of D,
 *                                                                  RoPE on its first rotary_dim
 *             kv_cache[slot_mapping] = k, v
 *             att = softmax(q k^T / sqrt(D) + causal) v            per sequence, over its blocks;
 *                                                                  GQA: nH / nKV heads per kv head
 *             (ATTN_GATED: att *= sigmoid(gate))
 *             h += att Wo^T
 *         linear_attention (ATTN_LINEAR): h += the Gated DeltaNet of rmsnorm(h, attn_norm),
 *             with the sequences' recurrent state (cpu_gdn.h)
 *         dense_mlp (MLP_DENSE):
 *             x = rmsnorm(h, mlp_norm)
 *             h += (silu(x Wg^T) * x Wu^T) Wd^T                    [T, I] inside
 *         moe_mlp (MLP_MOE):
 *             x = rmsnorm(h, mlp_norm)
 *             w, ids = topk(softmax(x Wr^T))                       [T, k] of E experts
 *             h += sum over ids e: w_e * (silu(x Wg_e^T) * x Wu_e^T) Wd_e^T    cpu_moe.h
 *     logits = rmsnorm(h[logit_rows], final_norm) Wlm^T            [n_logits, V]
 *
 * GEMMs split output rows over the thread pool; attention splits (token, head) pairs, or with
 * the fast paths (token, KV head) pairs. Every output element is computed by one thread in a
 * fixed order, so results are bit-identical for any thread count and batch composition. The
 * GEMMs and attention run the vector kernels of cpu_fast.h where the CPU has AVX2 and FMA
 * (unless backend_options_t.cpu_reference), which equal the scalar ones of cpu_ops.h bit for bit.
 */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"
#include "cpu_moe.h"
#include "cpu_fast.h"
#include "cpu_gdn.h"
#include "cpu_ops.h"
#include "cpu_pool.h"

#define MAX_THREADS 256

/* A layer's weights by slot (weights.h), those of its kinds bound: the checkpoint's tensors, and
 * f32 copies of the small ones (norm vectors, with Qwen3.5's 1 + w applied; the Gated
 * DeltaNet's parameters and conv weight). */
typedef struct cpu_layer {
    const wtensor_t *w[L_COUNT];
    const float *norm[L_COUNT]; /* [rows, cols] f32, small slots only */
    int linear;                 /* ATTN_LINEAR: its ordinal among the linear layers */
    cpu_moe_weights_t moe;      /* MLP_MOE */
} cpu_layer_t;

typedef struct cpu_backend {
    backend_t base;
    const model_config_t *cfg;
    int n_threads;
    bool emulate_fp8;
    bool fast; /* cpu_fast.h's kernels, else cpu_ops.h's */
    cpu_pool_t *pool;

    const wtensor_t *embed, *lm_head;
    cpu_layer_t *layers;
    float *norms;      /* f32 copies of every small weight (tiny) */
    float *final_norm; /* [H], inside norms */
    float *inv_freq;   /* [rotary_dim / 2] */
    int half;          /* rotary_dim / 2: RoPE pairs (j, j + half) of each head's first dims */
    cpu_gdn_t *gdn;    /* Gated DeltaNet layers and their state slots, when the model has any */
    bool ssm_bf16;     /* state slots keep the SSM state rounded to bf16 */
    int kmax;          /* widest GEMM input: the most columns of any linear (H, nH*D, I) */
    cpu_moe_t *moe;    /* scratch of the MLP_MOE layers; NULL without */
    uint64_t *expert_counts; /* [n_layers][n_experts] tokens routed since create */
    int32_t *trace;          /* trace_routing's [n_layers][T][k], or NULL */

    /* KV pool, f32 [n_layers][num_blocks][block_size][n_kv_heads][head_dim] each */
    float *k_pool, *v_pool;
    int num_blocks, block_size;
    size_t layer_floats;

    /* Activations for up to cap_tokens tokens, grown when a larger batch arrives. */
    int cap_tokens;
    float *h;         /* [T, H] residual stream */
    float *xn;        /* [T, H] normed input, then projection outputs */
    float *q;         /* [T, nH*D] */
    float *qg;        /* [T, nH*2D] ATTN_GATED's q_proj output: [q_h | gate_h] per head */
    float *k, *v;     /* [T, nKV*D] */
    float *att;       /* [T, nH*D] attention output */
    float *gate;      /* [T, I] */
    float *up;        /* [T, I] */
    float *aq;        /* [T, kmax] GEMM input after W8A8 quantization */
    float *rope_cos;  /* [T, half] */
    float *rope_sin;  /* [T, half] */
    int32_t *tok_seq; /* [T] sequence of each token */

    float **wbuf;        /* [n_threads][wbuf_floats] dequantized weight rows */
    int64_t wbuf_floats; /* CPU_MM_ROWS * kmax, or a fast GEMM's panel */
    float **scores;      /* [n_threads][heads per KV head * cap_ctx] attention scores */
    int64_t cap_ctx;
    int64_t max_ctx; /* longest context of the current batch */
} cpu_backend_t;

/* ---------------------------------------------------------------------------------------------
 * Parallel jobs */

typedef struct gemm_job {
    cpu_backend_t *be;
    const float *x;
    int T;
    const wtensor_t *w;
    float *y;
    int64_t ldy;
} gemm_job_t;

static void gemm_rows(void *ctx, int thread, int64_t begin, int64_t end) {
    gemm_job_t *j = ctx;
    if (j->be->fast)
        cpu_fast_matmul_rows(j->x, j->T, j->w, begin, end, j->y, j->ldy, j->be->wbuf[thread],
                             j->be->wbuf_floats);
    else
        cpu_matmul_rows(j->x, j->T, j->w, begin, end, j->y, j->ldy, j->be->wbuf[thread]);
}

/* y[T, N] (row stride ldy) = x[T, K] W^T, quantizing x first when W8A8 is emulated. */
static void gemm(cpu_backend_t *be, const float *x, int T, const wtensor_t *w, float *y,
                 int64_t ldy) {
    if (T == 0) return;
    x = cpu_linear_input(x, T, w, be->emulate_fp8, be->aq);
    gemm_job_t job = {be, x, T, w, y, ldy};
    /* chunks of whole CPU_MM_ROWS groups (fast: of 3-row and 4-row tiles) */
    int64_t grain = cpu_pool_grain(be->pool, w->rows, (int64_t)T * w->rows * w->cols, 4,
                                   be->fast ? 12 : CPU_MM_ROWS);
    cpu_pool_run(be->pool, w->rows, grain, gemm_rows, &job);
}

typedef struct attn_job {
    cpu_backend_t *be;
    const cpu_attn_t *a;
} attn_job_t;

static void attn_items(void *ctx, int thread, int64_t begin, int64_t end) {
    attn_job_t *j = ctx;
    int n_heads = j->a->n_heads;
    for (int64_t i = begin; i < end; i++) {
        int t = (int)(i / n_heads), h = (int)(i % n_heads);
        cpu_attention_head(j->a, j->be->tok_seq[t], t, h, j->be->scores[thread]);
    }
}

/* The fast paths' items: (token, KV head), every query head of that KV head at once. */
static void attn_items_fast(void *ctx, int thread, int64_t begin, int64_t end) {
    attn_job_t *j = ctx;
    int n_kv = j->a->n_kv_heads;
    for (int64_t i = begin; i < end; i++) {
        int t = (int)(i / n_kv), g = (int)(i % n_kv);
        cpu_fast_attention(j->a, j->be->tok_seq[t], t, g, j->be->scores[thread]);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Buffers */

static void *alloc_floats(size_t n) {
    /* 64-byte aligned, size rounded up as aligned_alloc requires */
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, bytes ? bytes : 64);
}

static void free_activations(cpu_backend_t *be) {
    float **bufs[] = {&be->h,   &be->xn,   &be->q,  &be->qg, &be->k,        &be->v,
                      &be->att, &be->gate, &be->up, &be->aq, &be->rope_cos, &be->rope_sin};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        free(*bufs[i]);
        *bufs[i] = NULL;
    }
    free(be->tok_seq);
    be->tok_seq = NULL;
    be->cap_tokens = 0;
}

static int ensure_tokens(cpu_backend_t *be, int n_tokens, err_t *err) {
    if (n_tokens <= be->cap_tokens) return 0;
    const model_config_t *c = be->cfg;
    size_t T = (size_t)(n_tokens + 63) / 64 * 64;
    free_activations(be);
    size_t H = (size_t)c->hidden_size, qd = (size_t)model_q_dim(c), kvd = (size_t)model_kv_dim(c);
    size_t I = (size_t)c->intermediate_size, half = (size_t)be->half;
    size_t qg = model_count_attn(c, ATTN_GATED) > 0 ? 2 * qd : 1;
    be->h = alloc_floats(T * H);
    be->xn = alloc_floats(T * H);
    be->q = alloc_floats(T * qd);
    be->qg = alloc_floats(T * qg);
    be->k = alloc_floats(T * kvd);
    be->v = alloc_floats(T * kvd);
    be->att = alloc_floats(T * qd);
    be->gate = alloc_floats(T * I);
    be->up = alloc_floats(T * I);
    be->aq = alloc_floats(T * (size_t)be->kmax);
    be->rope_cos = alloc_floats(T * half);
    be->rope_sin = alloc_floats(T * half);
    be->tok_seq = malloc(T * sizeof(int32_t));
    if (!be->h || !be->xn || !be->q || !be->qg || !be->k || !be->v || !be->att || !be->gate ||
        !be->up || !be->aq || !be->rope_cos || !be->rope_sin || !be->tok_seq) {
        free_activations(be);
        return err_set(err, "cpu backend: out of memory for a batch of %d tokens", n_tokens);
    }
    be->cap_tokens = (int)T;
    return 0;
}

static int ensure_context(cpu_backend_t *be, int64_t ctx, err_t *err) {
    if (ctx <= be->cap_ctx) return 0;
    int64_t cap = (ctx + 1023) / 1024 * 1024;
    size_t group = (size_t)(be->cfg->n_heads / be->cfg->n_kv_heads);
    for (int i = 0; i < be->n_threads; i++) {
        free(be->scores[i]);
        be->scores[i] = alloc_floats(group * (size_t)cap);
        if (!be->scores[i]) {
            be->cap_ctx = 0;
            return err_set(err, "cpu backend: out of memory for a context of %" PRId64 " tokens",
                           ctx);
        }
    }
    be->cap_ctx = cap;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * create / destroy */

/* The KV pools are mapped, not calloc'ed: they come as untouched zero pages, paid for when first
 * written, and go back whole when unmapped; and the sanitizer build's allocator, which writes an
 * eighth of an allocation's size of shadow memory when it hands it out and again when it is
 * freed, never sees them (a 4 GiB pool cost every sanitized start about a CPU-second). */
static float *map_zeroed(size_t floats) {
    void *p = mmap(NULL, floats * sizeof(float), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void free_kv_pool(cpu_backend_t *be) {
    if (be->k_pool || be->v_pool) {
        size_t bytes = be->layer_floats * (size_t)be->cfg->n_layers * sizeof(float);
        if (be->k_pool) munmap(be->k_pool, bytes);
        if (be->v_pool) munmap(be->v_pool, bytes);
    }
    be->k_pool = be->v_pool = NULL;
    be->num_blocks = be->block_size = 0;
    be->layer_floats = 0;
}

static void cpu_destroy(backend_t *base) {
    cpu_backend_t *be = (cpu_backend_t *)base;
    if (!be) return;
    cpu_pool_destroy(be->pool);
    cpu_moe_destroy(be->moe);
    free(be->expert_counts);
    free_activations(be);
    for (int i = 0; be->wbuf && i < be->n_threads; i++)
        free(be->wbuf[i]);
    for (int i = 0; be->scores && i < be->n_threads; i++)
        free(be->scores[i]);
    free(be->wbuf);
    free(be->scores);
    free_kv_pool(be);
    cpu_gdn_destroy(be->gdn);
    free(be->inv_freq);
    free(be->norms);
    free(be->layers);
    free(be);
}

/* Checks one weight: present, the shape the config implies, a float dtype, valid FP8 scales.
 * `layer` is -1 for the model-wide tensors. */
static int check_tensor(const wtensor_t *t, const char *what, int layer, int64_t rows, int64_t cols,
                        err_t *err) {
    char where[64];
    if (layer < 0)
        snprintf(where, sizeof where, "%s", what);
    else
        snprintf(where, sizeof where, "layer %d %s", layer, what);
    if (!t || (!t->data && !t->dummy)) return err_set(err, "cpu backend: %s missing", where);
    if (t->rows != rows || t->cols != cols)
        return err_set(err,
                       "cpu backend: %s is [%" PRId64 ", %" PRId64 "], expected [%" PRId64
                       ", %" PRId64 "]",
                       where, t->rows, t->cols, rows, cols);
    switch (t->dtype) {
        case DT_BF16:
        case DT_F16:
        case DT_F32:
            return 0;
        case DT_F8_E4M3:
            if (!t->scale_inv || t->block_n < 1 || t->block_k < 1 ||
                t->scale_rows != (rows + t->block_n - 1) / t->block_n ||
                t->scale_cols != (cols + t->block_k - 1) / t->block_k)
                return err_set(err, "cpu backend: %s: FP8 without valid block scales", where);
            return 0;
        default:
            return err_set(err, "cpu backend: %s has dtype %s (not a float weight)", where,
                           dtype_name(t->dtype));
    }
}

/* A tensor a layer kind reads, with the shape it computes with. */
typedef struct need {
    lslot_t slot;
    const char *name;
    int64_t rows, cols;
} need_t;

/* Small tensors are read as f32 copies: vectors and the Gated DeltaNet's conv weight. */
static bool is_small(const need_t *d) {
    return d->rows == 1 || d->slot == L_LIN_CONV;
}

/* What a copy adds to the stored values: the RMSNorms' norm_offset (1 for Qwen3.5's zero-centred
 * weights); the Gated DeltaNet's gated norm and parameters are used as stored. */
static float copy_offset(const model_config_t *c, lslot_t slot) {
    bool rmsnorm =
        slot == L_ATTN_NORM || slot == L_MLP_NORM || slot == L_Q_NORM || slot == L_K_NORM;
    return rmsnorm ? c->norm_offset : 0.0f;
}

/* The tensors layer l reads, by its kinds (at most L_COUNT); returns how many. */
static int layer_needs(const model_config_t *c, int l, need_t *need) {
    int64_t H = c->hidden_size, D = c->head_dim, I = c->intermediate_size;
    int64_t qd = model_q_dim(c), kvd = model_kv_dim(c);
    int64_t C = model_lin_conv_dim(c), vd = model_lin_v_dim(c), Hv = c->lin_v_heads;
    int n = 0;
    need[n++] = (need_t){L_ATTN_NORM, "input_layernorm", 1, H};
    switch (c->layer[l].attn) {
        case ATTN_FULL:
        case ATTN_GATED:
            need[n++] = (need_t){L_Q, "q_proj", c->layer[l].attn == ATTN_GATED ? 2 * qd : qd, H};
            need[n++] = (need_t){L_K, "k_proj", kvd, H};
            need[n++] = (need_t){L_V, "v_proj", kvd, H};
            need[n++] = (need_t){L_O, "o_proj", H, qd};
            need[n++] = (need_t){L_Q_NORM, "q_norm", 1, D};
            need[n++] = (need_t){L_K_NORM, "k_norm", 1, D};
            break;
        case ATTN_LINEAR:
            need[n++] = (need_t){L_LIN_QKV, "in_proj_qkv", C, H};
            need[n++] = (need_t){L_LIN_Z, "in_proj_z", vd, H};
            need[n++] = (need_t){L_LIN_B, "in_proj_b", Hv, H};
            need[n++] = (need_t){L_LIN_A, "in_proj_a", Hv, H};
            need[n++] = (need_t){L_LIN_CONV, "conv1d", C, c->lin_conv_kernel};
            need[n++] = (need_t){L_LIN_A_LOG, "A_log", 1, Hv};
            need[n++] = (need_t){L_LIN_DT_BIAS, "dt_bias", 1, Hv};
            need[n++] = (need_t){L_LIN_NORM, "linear_attn.norm", 1, c->lin_v_dim};
            need[n++] = (need_t){L_LIN_OUT, "out_proj", H, vd};
            break;
    }
    need[n++] = (need_t){L_MLP_NORM, "post_attention_layernorm", 1, H};
    switch (c->layer[l].mlp) {
        case MLP_DENSE:
            need[n++] = (need_t){L_GATE, "gate_proj", I, H};
            need[n++] = (need_t){L_UP, "up_proj", I, H};
            need[n++] = (need_t){L_DOWN, "down_proj", H, I};
            break;
        case MLP_MOE:
            need[n++] = (need_t){L_ROUTER, "mlp.gate", c->n_experts, H};
            break;
    }
    return n;
}

/* The experts of MoE layer l: present, shaped, and of one dtype per projection (their inputs
 * are quantized once for all of them). */
static int check_experts(const model_weights_t *w, int l, err_t *err) {
    const model_config_t *c = weights_config(w);
    int64_t H = c->hidden_size, I = c->moe_intermediate_size;
    static const char *const names[E_COUNT] = {"gate_proj", "up_proj", "down_proj"};
    const wtensor_t *first[E_COUNT];
    for (int e = 0; e < c->n_experts; e++)
        for (int s = 0; s < E_COUNT; s++) {
            const wtensor_t *t = weights_expert(w, l, e, (eslot_t)s);
            char what[64];
            snprintf(what, sizeof what, "experts.%d.%s", e, names[s]);
            if (check_tensor(t, what, l, s == E_DOWN ? H : I, s == E_DOWN ? I : H, err) < 0)
                return -1;
            int ref = s == E_UP ? E_GATE : s;
            if (e == 0 && s != E_UP) first[s] = t;
            if (t->dtype != first[ref]->dtype || t->block_k != first[ref]->block_k)
                return err_set(err,
                               "cpu backend: layer %d %s is %s but experts.0.%s is %s (one dtype "
                               "per projection)",
                               l, what, dtype_name(t->dtype), names[ref],
                               dtype_name(first[ref]->dtype));
        }
    return 0;
}

/* Copies a small weight to f32, plus offset (the only weights the backend copies: the norms, a
 * few KiB, and the Gated DeltaNet's conv weights and parameters). */
static float *take_norm(const wtensor_t *t, float offset, float **cursor) {
    float *dst = *cursor;
    int64_t n = t->rows * t->cols;
    for (int64_t r = 0; r < t->rows; r++)
        cpu_dequant_rows(t, r, 1, dst + r * t->cols);
    for (int64_t i = 0; i < n; i++)
        dst[i] += offset;
    *cursor += n;
    return dst;
}

static int cpu_create(const backend_options_t *opts, const model_weights_t *w, backend_t **out,
                      err_t *err) {
    *out = NULL;
    const model_config_t *c = weights_config(w);
    if (c->hidden_size < 1 || c->n_layers < 1 || c->n_heads < 1 || c->n_kv_heads < 1 ||
        c->head_dim < 2 || c->rotary_dim < 2 || c->rotary_dim % 2 != 0 ||
        c->rotary_dim > c->head_dim || c->n_heads % c->n_kv_heads != 0 ||
        c->intermediate_size < 1 || c->vocab_size < 1)
        return err_set(err, "cpu backend: unusable config (%s)", c->source);
    int n_threads = opts ? opts->n_threads : 0;
    if (n_threads < 0 || n_threads > MAX_THREADS)
        return err_set(err, "cpu backend: %d threads (0..%d)", n_threads, MAX_THREADS);
    if (n_threads == 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = online < 1 ? 1 : online > MAX_THREADS ? MAX_THREADS : (int)online;
    }

    int64_t H = c->hidden_size, V = c->vocab_size;
    const wtensor_t *embed = weights_global(w, G_EMBED);
    const wtensor_t *lm_head = weights_global(w, G_LM_HEAD);
    const wtensor_t *final_norm = weights_global(w, G_FINAL_NORM);
    if (check_tensor(embed, "embed_tokens", -1, V, H, err) < 0 ||
        check_tensor(lm_head, "lm_head", -1, V, H, err) < 0 ||
        check_tensor(final_norm, "norm", -1, 1, H, err) < 0)
        return -1;
    size_t norm_floats = (size_t)H;
    int64_t kmax = H; /* the widest GEMM input */
    for (int l = 0; l < c->n_layers; l++) {
        need_t need[L_COUNT];
        for (int i = 0, n = layer_needs(c, l, need); i < n; i++) {
            const need_t *d = &need[i];
            if (check_tensor(weights_layer(w, l, d->slot), d->name, l, d->rows, d->cols, err) < 0)
                return -1;
            if (is_small(d)) norm_floats += (size_t)(d->rows * d->cols);
            if (!is_small(d) && d->cols > kmax) kmax = d->cols;
        }
        if (c->layer[l].mlp == MLP_MOE && check_experts(w, l, err) < 0) return -1;
    }

    cpu_backend_t *be = calloc(1, sizeof *be);
    if (!be) return err_set(err, "cpu backend: out of memory");
    be->base.ops = &cpu_backend_ops;
    be->cfg = c;
    be->n_threads = n_threads;
    be->emulate_fp8 = opts && opts->emulate_fp8_activations;
    be->fast = !(opts && opts->cpu_reference) && cpu_fast_supported();
    be->ssm_bf16 = opts && opts->ssm_state_bf16;
    be->half = c->rotary_dim / 2;
    be->embed = embed;
    be->lm_head = lm_head;
    be->kmax = (int)kmax;

    be->layers = calloc((size_t)c->n_layers, sizeof *be->layers);
    be->norms = alloc_floats(norm_floats);
    be->inv_freq = alloc_floats((size_t)be->half);
    be->wbuf = calloc((size_t)n_threads, sizeof *be->wbuf);
    be->scores = calloc((size_t)n_threads, sizeof *be->scores);
    if (!be->layers || !be->norms || !be->inv_freq || !be->wbuf || !be->scores) {
        cpu_destroy(&be->base);
        return err_set(err, "cpu backend: out of memory");
    }
    be->wbuf_floats =
        be->fast ? cpu_fast_scratch_floats(be->kmax) : (int64_t)CPU_MM_ROWS * be->kmax;
    for (int i = 0; i < n_threads; i++) {
        be->wbuf[i] = alloc_floats((size_t)be->wbuf_floats);
        if (!be->wbuf[i]) {
            cpu_destroy(&be->base);
            return err_set(err, "cpu backend: out of memory");
        }
    }
    float *cursor = be->norms;
    int linear = 0;
    for (int l = 0; l < c->n_layers; l++) {
        cpu_layer_t *L = &be->layers[l];
        need_t need[L_COUNT];
        for (int i = 0, n = layer_needs(c, l, need); i < n; i++) {
            lslot_t s = need[i].slot;
            L->w[s] = weights_layer(w, l, s);
            if (is_small(&need[i])) L->norm[s] = take_norm(L->w[s], copy_offset(c, s), &cursor);
        }
        if (c->layer[l].mlp == MLP_MOE)
            L->moe = (cpu_moe_weights_t){L->w[L_ROUTER], weights_expert(w, l, 0, E_GATE)};
        L->linear = c->layer[l].attn == ATTN_LINEAR ? linear++ : -1;
    }
    be->final_norm = take_norm(final_norm, c->norm_offset, &cursor);
    cpu_rope_inv_freq(c->rotary_dim, c->rope_theta, be->inv_freq);

    if (c->n_experts > 0) {
        be->expert_counts = calloc((size_t)c->n_layers * (size_t)c->n_experts, sizeof(uint64_t));
        if (!be->expert_counts) err_set(err, "cpu backend: out of memory");
        if (!be->expert_counts || cpu_moe_create(c, n_threads, be->fast, &be->moe, err) < 0) {
            cpu_destroy(&be->base);
            return -1;
        }
    }
    if (cpu_pool_create(n_threads, &be->pool, err) < 0 || ensure_tokens(be, 64, err) < 0 ||
        ensure_context(be, 1024, err) < 0 ||
        (linear > 0 && cpu_gdn_create(c, n_threads, &be->gdn, err) < 0)) {
        cpu_destroy(&be->base);
        return -1;
    }
    *out = &be->base;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * KV pool */

static size_t cpu_kv_block_bytes(const backend_t *base, int block_size) {
    const cpu_backend_t *be = (const cpu_backend_t *)base;
    const model_config_t *c = be->cfg;
    return 2 * (size_t)c->n_layers * (size_t)block_size * (size_t)model_kv_dim(c) * sizeof(float);
}

static int cpu_kv_reserve(backend_t *base, int num_blocks, int block_size, err_t *err) {
    cpu_backend_t *be = (cpu_backend_t *)base;
    const model_config_t *c = be->cfg;
    free_kv_pool(be);
    if (num_blocks < 1 || block_size < 1)
        return err_set(err, "cpu backend: KV pool of %d blocks of %d tokens", num_blocks,
                       block_size);
    size_t layer_floats, total;
    if (__builtin_mul_overflow((size_t)num_blocks, (size_t)block_size, &layer_floats) ||
        __builtin_mul_overflow(layer_floats, (size_t)model_kv_dim(c), &layer_floats) ||
        __builtin_mul_overflow(layer_floats, (size_t)c->n_layers, &total) ||
        total > SIZE_MAX / sizeof(float))
        return err_set(err, "cpu backend: KV pool of %d blocks of %d tokens is too large",
                       num_blocks, block_size);
    be->k_pool = map_zeroed(total);
    be->v_pool = map_zeroed(total);
    be->num_blocks = num_blocks;
    be->block_size = block_size;
    be->layer_floats = layer_floats;
    if (!be->k_pool || !be->v_pool) {
        free_kv_pool(be);
        return err_set(err, "cpu backend: out of memory for a KV pool of %d blocks (%zu MiB)",
                       num_blocks, 2 * total * sizeof(float) >> 20);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * forward */

/* Checks the batch and sizes the buffers for it; maps each token to its sequence (attention's
 * work items are (token, head) pairs). */
static int prepare(cpu_backend_t *be, const be_batch_t *b, const float *logits, err_t *err) {
#ifndef NDEBUG
    if (be->k_pool && backend_check_batch(b, be->num_blocks, be->block_size, err) < 0)
        return err_prefix(err, "cpu backend");
#endif
    if (!b) return err_set(err, "cpu backend: NULL batch");
    if (!be->k_pool) return err_set(err, "cpu backend: forward before kv_reserve");
    if (backend_check_bounds(b, be->num_blocks, be->block_size, be->cfg->vocab_size, err) < 0)
        return err_prefix(err, "cpu backend");
    if (b->n_logits > 0 && !logits) return err_set(err, "cpu backend: batch array missing");
    if (b->n_tokens == 0) return 0;
    int64_t max_ctx = 0;
    for (int s = 0; s < b->n_seqs; s++)
        if (b->context_len[s] > max_ctx) max_ctx = b->context_len[s];
    if (ensure_tokens(be, b->n_tokens, err) < 0 || ensure_context(be, max_ctx, err) < 0) return -1;
    be->max_ctx = max_ctx;
    for (int s = 0; s < b->n_seqs; s++)
        for (int t = b->query_start[s]; t < b->query_start[s + 1]; t++)
            be->tok_seq[t] = s;
    return 0;
}

/* ATTN_GATED's q_proj output [T, nH * 2D] (q_h | gate_h per head): q into be->q [T, nH * D];
 * the gates stay where they are. */
static void split_gated_q(cpu_backend_t *be, int T) {
    const model_config_t *c = be->cfg;
    int D = c->head_dim, qd = model_q_dim(c);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < c->n_heads; h++)
            memcpy(be->q + (int64_t)t * qd + (int64_t)h * D,
                   be->qg + (int64_t)t * 2 * qd + (int64_t)h * 2 * D, (size_t)D * sizeof(float));
}

/* att *= sigmoid(gate), the gate of ATTN_GATED (torch.sigmoid: 1 / (1 + exp(-x))). */
static void apply_output_gate(cpu_backend_t *be, int T) {
    const model_config_t *c = be->cfg;
    int D = c->head_dim, qd = model_q_dim(c);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < c->n_heads; h++) {
            float *o = be->att + (int64_t)t * qd + (int64_t)h * D;
            const float *gate = be->qg + (int64_t)t * 2 * qd + (int64_t)h * 2 * D + D;
            for (int d = 0; d < D; d++)
                o[d] *= 1.0f / (1.0f + expf(-gate[d]));
        }
}

/* ATTN_FULL, ATTN_GATED: h += attention of layer `layer` (the pseudocode at the top). */
static void full_attention(cpu_backend_t *be, const be_batch_t *b, int layer) {
    const model_config_t *c = be->cfg;
    const cpu_layer_t *L = &be->layers[layer];
    int T = b->n_tokens, D = c->head_dim, half = be->half;
    int qd = model_q_dim(c), kvd = model_kv_dim(c), H = c->hidden_size;
    bool gated = c->layer[layer].attn == ATTN_GATED;

    /* x = rmsnorm(h, attn_norm); q, k, v = x Wq^T, x Wk^T, x Wv^T */
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(be->h + (int64_t)t * H, L->norm[L_ATTN_NORM], H, c->rms_norm_eps,
                    be->xn + (int64_t)t * H);
    if (gated) {
        gemm(be, be->xn, T, L->w[L_Q], be->qg, 2 * (int64_t)qd);
        split_gated_q(be, T);
    } else {
        gemm(be, be->xn, T, L->w[L_Q], be->q, qd);
    }
    gemm(be, be->xn, T, L->w[L_K], be->k, kvd);
    gemm(be, be->xn, T, L->w[L_V], be->v, kvd);

    /* q, k = rope(rmsnorm(q, q_norm)), rope(rmsnorm(k, k_norm)); kv_cache[slot_mapping] = k, v */
    float *k_layer = be->k_pool + (size_t)layer * be->layer_floats;
    float *v_layer = be->v_pool + (size_t)layer * be->layer_floats;
    for (int t = 0; t < T; t++) {
        const float *cs = be->rope_cos + (int64_t)t * half, *sn = be->rope_sin + (int64_t)t * half;
        for (int h = 0; h < c->n_heads; h++) {
            float *x = be->q + (int64_t)t * qd + (int64_t)h * D;
            cpu_rmsnorm(x, L->norm[L_Q_NORM], D, c->rms_norm_eps, x);
            cpu_rope_apply(x, 2 * half, cs, sn);
        }
        for (int h = 0; h < c->n_kv_heads; h++) {
            float *x = be->k + (int64_t)t * kvd + (int64_t)h * D;
            cpu_rmsnorm(x, L->norm[L_K_NORM], D, c->rms_norm_eps, x);
            cpu_rope_apply(x, 2 * half, cs, sn);
        }
        int64_t slot = b->slot_mapping[t];
        if (slot >= 0) {
            memcpy(k_layer + slot * kvd, be->k + (int64_t)t * kvd, (size_t)kvd * sizeof(float));
            memcpy(v_layer + slot * kvd, be->v + (int64_t)t * kvd, (size_t)kvd * sizeof(float));
        }
    }

    /* att = softmax(q k^T / sqrt(D) + causal) v */
    cpu_attn_t a = {
        .q = be->q,
        .out = be->att,
        .k_cache = k_layer,
        .v_cache = v_layer,
        .block_size = be->block_size,
        .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads,
        .head_dim = D,
        .scale = (float)(1.0 / sqrt((double)D)), /* transformers: head_dim**-0.5, a double */
        .query_start = b->query_start,
        .context_len = b->context_len,
        .block_tables = b->block_tables,
        .block_table_stride = b->block_table_stride,
    };
    attn_job_t job = {be, &a};
    int64_t items = (int64_t)T * (be->fast ? c->n_kv_heads : c->n_heads);
    int64_t grain =
        cpu_pool_grain(be->pool, items, (int64_t)T * c->n_heads * be->max_ctx * D, 8, 1);
    cpu_pool_run(be->pool, items, grain, be->fast ? attn_items_fast : attn_items, &job);
    if (gated) apply_output_gate(be, T);

    /* h += att Wo^T */
    gemm(be, be->att, T, L->w[L_O], be->xn, H);
    int64_t n = (int64_t)T * H;
    for (int64_t i = 0; i < n; i++)
        be->h[i] += be->xn[i];
}

static void gemm_for_gdn(void *ctx, const float *x, int T, const wtensor_t *w, float *y,
                         int64_t ldy) {
    gemm(ctx, x, T, w, y, ldy);
}

/* ATTN_LINEAR: h += the Gated DeltaNet of layer `layer` (cpu_gdn.h). */
static int linear_attention(cpu_backend_t *be, const be_batch_t *b, int layer, err_t *err) {
    const model_config_t *c = be->cfg;
    const cpu_layer_t *L = &be->layers[layer];
    int T = b->n_tokens, H = c->hidden_size;
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(be->h + (int64_t)t * H, L->norm[L_ATTN_NORM], H, c->rms_norm_eps,
                    be->xn + (int64_t)t * H);
    cpu_gdn_layer_t gl = {.qkv = L->w[L_LIN_QKV],
                          .z = L->w[L_LIN_Z],
                          .b = L->w[L_LIN_B],
                          .a = L->w[L_LIN_A],
                          .out = L->w[L_LIN_OUT],
                          .conv = L->norm[L_LIN_CONV],
                          .a_log = L->norm[L_LIN_A_LOG],
                          .dt_bias = L->norm[L_LIN_DT_BIAS],
                          .norm = L->norm[L_LIN_NORM]};
    if (cpu_gdn_forward(be->gdn, be->pool, &gl, L->linear, b, be->xn, be->xn, gemm_for_gdn, be,
                        err) < 0)
        return -1;
    int64_t n = (int64_t)T * H;
    for (int64_t i = 0; i < n; i++)
        be->h[i] += be->xn[i];
    return 0;
}

/* MLP_DENSE: h += the SwiGLU MLP of layer `layer` over the batch's T tokens. */
static void dense_mlp(cpu_backend_t *be, int T, int layer) {
    const model_config_t *c = be->cfg;
    const cpu_layer_t *L = &be->layers[layer];
    int H = c->hidden_size, I = c->intermediate_size;

    /* x = rmsnorm(h, mlp_norm); h += (silu(x Wg^T) * x Wu^T) Wd^T */
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(be->h + (int64_t)t * H, L->norm[L_MLP_NORM], H, c->rms_norm_eps,
                    be->xn + (int64_t)t * H);
    gemm(be, be->xn, T, L->w[L_GATE], be->gate, I);
    gemm(be, be->xn, T, L->w[L_UP], be->up, I);
    int64_t n = (int64_t)T * I;
    for (int64_t i = 0; i < n; i++) {
        float g = be->gate[i];
        be->gate[i] = g / (1.0f + expf(-g)) * be->up[i];
    }
    gemm(be, be->gate, T, L->w[L_DOWN], be->xn, H);
    n = (int64_t)T * H;
    for (int64_t i = 0; i < n; i++)
        be->h[i] += be->xn[i];
}

/* MLP_MOE: h += the mixture of experts of layer `layer` (cpu_moe.h). */
static void moe_mlp(cpu_backend_t *be, int T, int layer) {
    const model_config_t *c = be->cfg;
    const cpu_layer_t *L = &be->layers[layer];
    int H = c->hidden_size;
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(be->h + (int64_t)t * H, L->norm[L_MLP_NORM], H, c->rms_norm_eps,
                    be->xn + (int64_t)t * H);
    int32_t *trace = be->trace ? be->trace + (size_t)layer * T * c->n_experts_per_tok : NULL;
    cpu_moe_forward(be->moe, be->pool, &L->moe, be->xn, T, be->h, be->emulate_fp8,
                    be->expert_counts + (size_t)layer * (size_t)c->n_experts, trace);
}

static int cpu_forward(backend_t *base, const be_batch_t *b, float *logits, err_t *err) {
    cpu_backend_t *be = (cpu_backend_t *)base;
    const model_config_t *c = be->cfg;
    if (prepare(be, b, logits, err) < 0) return -1;
    int T = b->n_tokens, H = c->hidden_size, half = be->half;
    if (T == 0) return 0;
    if (be->gdn && cpu_gdn_check(be->gdn, b, err) < 0) return -1;
    /* h = embed[token_ids], and each position's RoPE angles */
    for (int t = 0; t < T; t++) {
        cpu_dequant_rows(be->embed, b->token_ids[t], 1, be->h + (int64_t)t * H);
        cpu_rope_cos_sin(b->positions[t], be->inv_freq, half, be->rope_cos + (int64_t)t * half,
                         be->rope_sin + (int64_t)t * half);
    }
    for (int l = 0; l < c->n_layers; l++) {
        switch (c->layer[l].attn) {
            case ATTN_FULL:
            case ATTN_GATED:
                full_attention(be, b, l);
                break;
            case ATTN_LINEAR:
                if (linear_attention(be, b, l, err) < 0) return -1;
                break;
        }
        switch (c->layer[l].mlp) {
            case MLP_DENSE:
                dense_mlp(be, T, l);
                break;
            case MLP_MOE:
                moe_mlp(be, T, l);
                break;
        }
    }
    /* logits = rmsnorm(h[logit_rows], final_norm) Wlm^T */
    for (int i = 0; i < b->n_logits; i++)
        cpu_rmsnorm(be->h + (int64_t)b->logit_rows[i] * H, be->final_norm, H, c->rms_norm_eps,
                    be->xn + (int64_t)i * H);
    gemm(be, be->xn, b->n_logits, be->lm_head, logits, c->vocab_size);
    return 0;
}

static int cpu_expert_load(backend_t *base, uint64_t *out, err_t *err) {
    const cpu_backend_t *be = (const cpu_backend_t *)base;
    const model_config_t *c = be->cfg;
    if (!be->expert_counts) return err_set(err, "cpu backend: the model has no experts");
    memcpy(out, be->expert_counts, (size_t)c->n_layers * (size_t)c->n_experts * sizeof *out);
    return 0;
}

static void cpu_trace_routing(backend_t *base, int32_t *ids) {
    ((cpu_backend_t *)base)->trace = ids;
}

/* ---------------------------------------------------------------------------------------------
 * Recurrent state slots (models with Gated DeltaNet layers) */

static size_t cpu_state_bytes(const backend_t *base) {
    const cpu_backend_t *be = (const cpu_backend_t *)base;
    return be->gdn ? cpu_gdn_slot_bytes(be->gdn) : 0;
}

static int cpu_state_reserve(backend_t *base, int n_slots, err_t *err) {
    cpu_backend_t *be = (cpu_backend_t *)base;
    if (!be->gdn) return n_slots == 0 ? 0 : err_set(err, "cpu backend: the model has no state");
    return cpu_gdn_reserve(be->gdn, n_slots, be->ssm_bf16, err);
}

static int cpu_state_copy(backend_t *base, int src, int dst, err_t *err) {
    cpu_backend_t *be = (cpu_backend_t *)base;
    if (!be->gdn) return err_set(err, "cpu backend: the model has no state");
    return cpu_gdn_copy(be->gdn, src, dst, err);
}

/* The CPU takes one live option: the SSM state's dtype, for the next state_reserve. */
static void cpu_configure(backend_t *base, const backend_options_t *opts) {
    ((cpu_backend_t *)base)->ssm_bf16 = opts->ssm_state_bf16;
}

static void cpu_describe(const backend_t *base, char *buf, size_t size) {
    const cpu_backend_t *be = (const cpu_backend_t *)base;
    snprintf(buf, size, "cpu, %d thread%s, f32%s (W8A8 emulation %s)%s", be->n_threads,
             be->n_threads == 1 ? "" : "s", be->fast ? "" : ", scalar reference kernels",
             be->emulate_fp8 ? "on" : "off",
             be->embed->dummy ? ", dummy weights generated as read (a copy would not fit)" : "");
}

const backend_ops_t cpu_backend_ops = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .kv_block_bytes = cpu_kv_block_bytes,
    .kv_reserve = cpu_kv_reserve,
    .forward = cpu_forward,
    .describe = cpu_describe,
    .expert_load = cpu_expert_load,
    .trace_routing = cpu_trace_routing,
    .configure = cpu_configure,
    .state_bytes = cpu_state_bytes,
    .state_reserve = cpu_state_reserve,
    .state_copy = cpu_state_copy,
};

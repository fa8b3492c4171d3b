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
 * Under tensor parallelism (cpu_tp.h) an instance is one rank: cfg is the rank's config (its
 * heads and widths, shard.h), the weights are its views of the checkpoint, and each
 * row-parallel output (att Wo^T, the MLP's down projection, the MoE sum) is all-reduced over the
 * ranks before it is added to h; the logits are the rank's vocabulary rows, all-gathered.
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
#include "flags.h"
#include "cpu_moe.h"
#include "cpu_bf16.h"
#include "cpu_fast.h"
#include "cpu_gdn.h"
#include "cpu_ops.h"
#include "cpu_pool.h"
#include "shard.h"
#include "cpu_tp.h"
#include "cpu_weights.h"
#include "cpu_backend_int.h"

#define MAX_THREADS 256

/* ---------------------------------------------------------------------------------------------
 * Parallel jobs */

typedef struct gemm_job {
    cpu_backend_t *be;
    const float *x;
    const uint16_t *xb; /* x split to bf16 (BF16 weights on the bf16 kernels) */
    int passes;         /* the bf16 kernels' passes; 0: f32 */
    int T;
    const wtensor_t *w;
    float *y;
    int64_t ldy;
} gemm_job_t;

/* The bf16 kernels' passes under the cpu-matmul-precision: 2 (high) or 1 (medium) where the
 * CPU has them, else 0 (highest: f32, the reference's bits). */
static int bf16_passes(const cpu_backend_t *be) {
    int precision = be->precision; /* one read: configure may change it meanwhile */
    if (!be->bf16_ok) return 0;
    return precision == CPU_MM_HIGH ? 2 : precision == CPU_MM_MEDIUM ? 1 : 0;
}

static void gemm_rows(void *ctx, int thread, int64_t begin, int64_t end) {
    gemm_job_t *j = ctx;
    if (j->passes)
        cpu_bf16_matmul_rows(j->x, j->xb, j->T, j->passes, j->w, begin, end, j->y, j->ldy,
                             j->be->wbuf[thread]);
    else if (j->be->fast)
        cpu_fast_matmul_rows(j->x, j->T, j->w, begin, end, j->y, j->ldy, j->be->wbuf[thread],
                             j->be->wbuf_floats);
    else
        cpu_matmul_rows(j->x, j->T, j->w, begin, end, j->y, j->ldy, j->be->wbuf[thread]);
}

void cpu_be_gemm(cpu_backend_t *be, const float *x, int T, const wtensor_t *w, float *y,
                 int64_t ldy) {
    if (T == 0) return;
    x = cpu_linear_input(x, T, w, be->emulate_fp8, be->aq);
    int passes = cpu_bf16_takes(w) ? bf16_passes(be) : 0;
    const uint16_t *xb = NULL;
    if (passes && w->dtype == DT_BF16) { /* once for every thread (FP8: per block of rows) */
        cpu_bf16_split(x, T, w->cols, passes, be->xb);
        xb = be->xb;
    }
    gemm_job_t job = {be, x, xb, passes, T, w, y, ldy};
    /* chunks of whole CPU_MM_ROWS groups (fast: of 3-row and 4-row tiles; bf16: of FP8 scale
     * blocks, each of which splits its scaled activations once, or of 4-row tiles) */
    int64_t align = passes     ? (w->dtype == DT_F8_E4M3 ? w->block_n : 4)
                    : be->fast ? 12
                               : CPU_MM_ROWS;
    int64_t grain = cpu_pool_grain(be->pool, w->rows, (int64_t)T * w->rows * w->cols, 4, align);
    cpu_pool_run(be->pool, w->rows, grain, gemm_rows, &job);
}

/* A row-parallel layer's partial output buf[n] becomes the sum over the ranks (tp > 1). */
static int all_reduce(cpu_backend_t *be, float *buf, int64_t n, err_t *err) {
    if (be->shard.tp == 1) return 0;
    return comm_all_reduce_sum(be->shard.comm, buf, (size_t)n, err);
}

/* Every rank learns whether any rank failed (rc: this rank's result), before a collective that a
 * failed rank would not reach (comm_agree). */
static int agree(cpu_backend_t *be, int rc, err_t *err) {
    if (comm_agree(be->shard.comm, rc, err) < 0)
        return rc < 0 ? -1 : err_prefix(err, "cpu backend");
    return rc;
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
    float **bufs[] = {&be->h,    &be->xn,   &be->q,       &be->qg, &be->k,        &be->v,
                      &be->att,  &be->gate, &be->up,      &be->aq, &be->rope_cos, &be->rope_sin,
                      &be->part, &be->hid,  &be->hid_mtp, &be->cat};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        free(*bufs[i]);
        *bufs[i] = NULL;
    }
    free(be->tok_seq);
    be->tok_seq = NULL;
    free(be->xb);
    be->xb = NULL;
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
    be->xb =
        malloc(be->bf16_ok ? (size_t)cpu_bf16_x_elems((int)T, be->kmax, 2) * sizeof(uint16_t) : 1);
    be->rope_cos = alloc_floats(T * half);
    be->rope_sin = alloc_floats(T * half);
    be->tok_seq = malloc(T * sizeof(int32_t));
    be->part = alloc_floats(be->shard.tp > 1 ? T * H : 1);
    be->hid = alloc_floats(be->n_mtp > 0 ? T * H : 1);
    be->hid_mtp = alloc_floats(be->n_mtp > 0 ? T * H : 1);
    be->cat = alloc_floats(be->n_mtp > 0 ? 2 * T * H : 1);
    be->hid_rows = be->hid_mtp_rows = 0; /* the rows kept are gone with the buffers */
    if (!be->hid || !be->hid_mtp || !be->cat || !be->h || !be->xn || !be->q || !be->qg || !be->k ||
        !be->v || !be->att || !be->gate || !be->up || !be->aq || !be->rope_cos || !be->rope_sin ||
        !be->tok_seq || !be->part || !be->xb) {
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

/* The vocab-parallel logits' buffers (tp > 1) for n rows. */
static int ensure_logits(cpu_backend_t *be, int n, err_t *err) {
    if (be->shard.tp == 1 || n <= be->cap_logits) return 0;
    size_t cap = (size_t)(n + 15) / 16 * 16, row = (size_t)be->vpad;
    free(be->lg_rank);
    free(be->lg_all);
    be->lg_rank = alloc_floats(cap * row);
    be->lg_all = alloc_floats((size_t)be->shard.tp * cap * row);
    be->cap_logits = be->lg_rank && be->lg_all ? (int)cap : 0;
    if (!be->cap_logits) return err_set(err, "cpu backend: out of memory for %d rows of logits", n);
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

/* Layers with a K/V cache: all but the linear-attention ones, and the MTP layers when the pool
 * holds theirs (after the decoder's). */
static int kv_layers(const cpu_backend_t *be, bool mtp) {
    const model_config_t *c = be->cfg;
    return c->n_layers - model_count_attn(c, ATTN_LINEAR) + (mtp ? be->n_mtp : 0);
}

static void free_kv_pool(cpu_backend_t *be) {
    if (be->k_pool || be->v_pool) {
        size_t bytes = be->layer_floats * (size_t)kv_layers(be, be->mtp) * sizeof(float);
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
    free(be->lg_rank);
    free(be->lg_all);
    free(be->mtp_logits);
    free(be->views);
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

static int shard_error(const cpu_backend_t *be, err_t *err) {
    return err_prefix(err, "cpu backend: tensor parallel %d, rank %d", be->shard.tp,
                      be->shard.rank);
}

/* in_proj_qkv or conv1d (need d) of layer l as the rank holds it: one tensor, or its q, k and v
 * rows as three views (views[6]: qkv's, then conv's). */
static int bind_qkv(cpu_backend_t *be, const model_weights_t *w, int l, const cpu_need_t *d,
                    wtensor_t *views, size_t *norm_floats, err_t *err) {
    cpu_layer_t *L = &be->layers[l];
    const wtensor_t **parts = d->slot == L_LIN_QKV ? L->qkv : L->conv;
    wtensor_t *v = views ? views + (d->slot == L_LIN_QKV ? 0 : 3) : NULL;
    if (shard_qkv(w, &be->shard, l, d->slot, v, parts, err) < 0) return shard_error(be, err);
    const model_config_t *c = be->cfg;
    int64_t kd = model_lin_k_dim(c), rows[3] = {parts[1] ? kd : d->rows, kd, model_lin_v_dim(c)};
    for (int p = 0; p < 3 && parts[p]; p++)
        if (cpu_check_tensor(parts[p], d->name, l, rows[p], d->cols, err) < 0) return -1;
    L->w[d->slot] = parts[0];
    if (cpu_is_small(d)) *norm_floats += (size_t)(d->rows * d->cols);
    if (!cpu_is_small(d) && d->cols > be->kmax) be->kmax = (int)d->cols;
    return 0;
}

/* Binds layer l's tensors as this rank holds them (shard.h) into be->layers[l] and checks
 * them against the rank's config; adds the small ones' floats to *norm_floats and widens
 * be->kmax. `views` has room for L_COUNT + 6 + n_experts * E_COUNT views. */
static int bind_layer(cpu_backend_t *be, const model_weights_t *w, int l, wtensor_t *views,
                      size_t *norm_floats, err_t *err) {
    const model_config_t *c = be->cfg;
    cpu_layer_t *L = &be->layers[l];
    cpu_need_t need[L_COUNT];
    for (int i = 0, n = cpu_layer_needs(c, l, need); i < n; i++) {
        const cpu_need_t *d = &need[i];
        if (d->slot == L_LIN_QKV || d->slot == L_LIN_CONV) {
            if (bind_qkv(be, w, l, d, views ? views + L_COUNT : NULL, norm_floats, err) < 0)
                return -1;
            continue;
        }
        wtensor_t *view = views ? &views[d->slot] : NULL;
        L->w[d->slot] = shard_layer(w, &be->shard, l, d->slot, view, err);
        if (!L->w[d->slot]) return shard_error(be, err);
        if (cpu_check_tensor(L->w[d->slot], d->name, l, d->rows, d->cols, err) < 0) return -1;
        if (cpu_is_small(d)) *norm_floats += (size_t)(d->rows * d->cols);
        if (!cpu_is_small(d) && d->cols > be->kmax) be->kmax = (int)d->cols;
    }
    if (c->layer[l].mlp != MLP_MOE) return 0;
    if (cpu_check_experts(w, l, err) < 0) return -1;
    L->moe.router = L->w[L_ROUTER];
    L->moe.experts = shard_experts(w, &be->shard, l, views ? views + L_COUNT + 6 : NULL,
                                   &L->moe.first, &L->moe.end, err);
    if (!L->moe.experts) return shard_error(be, err);
    return 0;
}

int cpu_rank_create(const backend_options_t *opts, const model_weights_t *w, const shard_t *shard,
                    backend_t **out, err_t *err) {
    *out = NULL;
    const model_config_t *full = weights_config(w);
    if (full->hidden_size < 1 || full->n_layers < 1 || full->n_heads < 1 || full->n_kv_heads < 1 ||
        full->head_dim < 2 || full->rotary_dim < 2 || full->rotary_dim % 2 != 0 ||
        full->rotary_dim > full->head_dim || full->n_heads % full->n_kv_heads != 0 ||
        full->intermediate_size < 1 || full->vocab_size < 1)
        return err_set(err, "cpu backend: unusable config (%s)", full->source);
    int n_threads = opts ? opts->n_threads : 0;
    if (n_threads < 0 || n_threads > MAX_THREADS)
        return err_set(err, "cpu backend: %d threads (0..%d)", n_threads, MAX_THREADS);
    if (n_threads == 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = online < 1 ? 1 : online > MAX_THREADS ? MAX_THREADS : (int)online;
    }

    cpu_backend_t *be = calloc(1, sizeof *be);
    if (!be) return err_set(err, "cpu backend: out of memory");
    be->base.ops = &cpu_backend_ops;
    be->shard = *shard;
    if (shard_config(full, shard, &be->lcfg, err) < 0) {
        shard_error(be, err);
        free(be);
        return -1;
    }
    const model_config_t *c = be->cfg = &be->lcfg;
    be->n_threads = n_threads;
    be->emulate_fp8 = opts && opts->emulate_fp8_activations;
    be->fast = !(opts && opts->cpu_reference) && cpu_fast_supported();
    be->bf16_ok = be->fast && cpu_bf16_supported();
    be->precision = opts ? opts->cpu_matmul_precision : CPU_MM_HIGHEST;
    be->ssm_bf16 = opts && opts->ssm_state_bf16;
    be->kv_fp8 = be->kv_fp8_next = opts && opts->kv_cache_dtype == KV_DTYPE_FP8;
    be->half = c->rotary_dim / 2;
    be->kmax = c->hidden_size; /* the widest GEMM input, widened by bind_layer */
    shard_vocab(c->vocab_size, shard->rank, shard->tp, &be->v0, &be->vn, &be->vpad);
    size_t per_layer = L_COUNT + 6 + (size_t)c->n_experts * E_COUNT;
    be->n_mtp = c->n_mtp_layers; /* cpu_mtp.c */
    be->views = shard->tp > 1
                    ? calloc((size_t)(c->n_layers + be->n_mtp) * per_layer + 1, sizeof *be->views)
                    : NULL;
    be->mtp_next = opts && opts->mtp && be->n_mtp > 0;
    be->layers = calloc((size_t)(c->n_layers + be->n_mtp), sizeof *be->layers);
    if (!be->layers || (shard->tp > 1 && !be->views)) {
        cpu_destroy(&be->base);
        return err_set(err, "cpu backend: out of memory");
    }

    int64_t H = c->hidden_size, V = c->vocab_size;
    be->embed = weights_global(w, G_EMBED);
    be->lm_head = shard_lm_head(w, shard, be->views ? &be->views[0] : NULL, err);
    const wtensor_t *final_norm = weights_global(w, G_FINAL_NORM);
    size_t norm_floats = (size_t)H;
    if (!be->lm_head || cpu_check_tensor(be->embed, "embed_tokens", -1, V, H, err) < 0 ||
        cpu_check_tensor(be->lm_head, "lm_head", -1, be->vn, H, err) < 0 ||
        cpu_check_tensor(final_norm, "norm", -1, 1, H, err) < 0) {
        if (!be->lm_head) shard_error(be, err);
        cpu_destroy(&be->base);
        return -1;
    }
    for (int l = 0; l < c->n_layers + be->n_mtp; l++)
        if (bind_layer(be, w, l, be->views ? be->views + 1 + (size_t)l * per_layer : NULL,
                       &norm_floats, err) < 0) {
            cpu_destroy(&be->base);
            return -1;
        }
    if (cpu_mtp_bind(be, w, &norm_floats, err) < 0) {
        cpu_destroy(&be->base);
        return -1;
    }

    be->norms = alloc_floats(norm_floats);
    be->inv_freq = alloc_floats((size_t)be->half);
    be->wbuf = calloc((size_t)n_threads, sizeof *be->wbuf);
    be->scores = calloc((size_t)n_threads, sizeof *be->scores);
    if (!be->norms || !be->inv_freq || !be->wbuf || !be->scores) {
        cpu_destroy(&be->base);
        return err_set(err, "cpu backend: out of memory");
    }
    be->wbuf_floats =
        be->fast ? cpu_fast_scratch_floats(be->kmax) : (int64_t)CPU_MM_ROWS * be->kmax;
    if (be->bf16_ok && cpu_bf16_scratch_floats(be->kmax) > be->wbuf_floats)
        be->wbuf_floats = cpu_bf16_scratch_floats(be->kmax);
    for (int i = 0; i < n_threads; i++) {
        be->wbuf[i] = alloc_floats((size_t)be->wbuf_floats);
        if (!be->wbuf[i]) {
            cpu_destroy(&be->base);
            return err_set(err, "cpu backend: out of memory");
        }
    }
    float *cursor = be->norms;
    int linear = 0;
    for (int l = 0; l < c->n_layers + be->n_mtp; l++) {
        cpu_layer_t *L = &be->layers[l];
        cpu_need_t need[L_COUNT];
        for (int i = 0, n = cpu_layer_needs(c, l, need); i < n; i++) {
            lslot_t s = need[i].slot;
            if (s == L_LIN_CONV) { /* its parts side by side: the rank's q | k | v channels */
                L->norm[s] = cursor;
                for (int p = 0; p < 3 && L->conv[p]; p++)
                    cpu_take_norm(L->conv[p], 0.0f, &cursor);
            } else if (cpu_is_small(&need[i])) {
                L->norm[s] = cpu_take_norm(L->w[s], cpu_copy_offset(c, s), &cursor);
            }
        }
        /* the K/V layers before it (an MTP layer's: after every decoder layer's) */
        L->kv = c->layer[l].attn == ATTN_LINEAR ? -1 : l - linear;
        weights_kv_scales(w, l, &L->k_scale, &L->v_scale);
        be->kv_scales = weights_kv_scales_loaded(w) > 0;
        L->linear = c->layer[l].attn == ATTN_LINEAR ? linear++ : -1;
    }
    be->final_norm = cpu_take_norm(final_norm, c->norm_offset, &cursor);
    cpu_mtp_take_norms(be, &cursor);
    cpu_rope_inv_freq(c->rotary_dim, c->rope_theta, be->inv_freq);

    if (c->n_experts > 0) {
        /* the MTP layers' rows after the decoder's (expert_load reports the decoder's) */
        be->expert_counts =
            calloc((size_t)(c->n_layers + be->n_mtp) * (size_t)c->n_experts, sizeof(uint64_t));
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

static int cpu_create(const backend_options_t *opts, const model_weights_t *w, backend_t **out,
                      err_t *err) {
    int tp = opts && opts->tensor_parallel_size > 1 ? opts->tensor_parallel_size : 1;
    if (tp > 1) return cpu_tp_create(opts, w, out, err);
    shard_t whole = {.rank = 0, .tp = 1};
    return cpu_rank_create(opts, w, &whole, out, err);
}

/* ---------------------------------------------------------------------------------------------
 * KV pool */

static size_t cpu_kv_block_bytes(const backend_t *base, int block_size) {
    const cpu_backend_t *be = (const cpu_backend_t *)base;
    const model_config_t *c = be->cfg;
    return 2 * (size_t)kv_layers(be, be->mtp_next) * (size_t)block_size * (size_t)model_kv_dim(c) *
           sizeof(float);
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
        __builtin_mul_overflow(layer_floats, (size_t)kv_layers(be, be->mtp_next), &total) ||
        total > SIZE_MAX / sizeof(float))
        return err_set(err, "cpu backend: KV pool of %d blocks of %d tokens is too large",
                       num_blocks, block_size);
    be->k_pool = map_zeroed(total);
    be->v_pool = map_zeroed(total);
    be->num_blocks = num_blocks;
    be->block_size = block_size;
    be->layer_floats = layer_floats;
    be->kv_fp8 = be->kv_fp8_next;
    be->mtp = be->mtp_next;
    if (!be->k_pool || !be->v_pool) {
        free_kv_pool(be);
        return err_set(err, "cpu backend: out of memory for a KV pool of %d blocks (%zu MiB)",
                       num_blocks, 2 * total * sizeof(float) >> 20);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * forward */

/* Also maps each token to its sequence (attention's work items are (token, head) pairs). */
int cpu_be_prepare(cpu_backend_t *be, const be_batch_t *b, const float *logits, err_t *err) {
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
    if (ensure_tokens(be, b->n_tokens, err) < 0 || ensure_context(be, max_ctx, err) < 0 ||
        ensure_logits(be, b->n_logits, err) < 0)
        return -1;
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
static int full_attention(cpu_backend_t *be, const be_batch_t *b, int layer, err_t *err) {
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
        cpu_be_gemm(be, be->xn, T, L->w[L_Q], be->qg, 2 * (int64_t)qd);
        split_gated_q(be, T);
    } else {
        cpu_be_gemm(be, be->xn, T, L->w[L_Q], be->q, qd);
    }
    cpu_be_gemm(be, be->xn, T, L->w[L_K], be->k, kvd);
    cpu_be_gemm(be, be->xn, T, L->w[L_V], be->v, kvd);

    /* q, k = rope(rmsnorm(q, q_norm)), rope(rmsnorm(k, k_norm)); kv_cache[slot_mapping] = k, v */
    size_t kv_offset = (size_t)L->kv * be->layer_floats;
    float *k_layer = be->k_pool + kv_offset, *v_layer = be->v_pool + kv_offset;
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
        for (int h = 0; slot >= 0 && h < c->n_kv_heads; h++) { /* cpu_ops.h: head-major blocks */
            int64_t at = cpu_kv_offset(slot, h, c->n_kv_heads, be->block_size, D);
            int64_t from = (int64_t)t * kvd + (int64_t)h * D;
            if (be->kv_fp8) {
                for (int i = 0; i < D; i++) {
                    k_layer[at + i] = cpu_e4m3_round(be->k[from + i], L->k_scale);
                    v_layer[at + i] = cpu_e4m3_round(be->v[from + i], L->v_scale);
                }
            } else {
                memcpy(k_layer + at, be->k + from, (size_t)D * sizeof(float));
                memcpy(v_layer + at, be->v + from, (size_t)D * sizeof(float));
            }
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

    /* h += att Wo^T (summed over the ranks' heads) */
    cpu_be_gemm(be, be->att, T, L->w[L_O], be->xn, H);
    int64_t n = (int64_t)T * H;
    if (all_reduce(be, be->xn, n, err) < 0) return -1;
    for (int64_t i = 0; i < n; i++)
        be->h[i] += be->xn[i];
    return 0;
}

static void gemm_for_gdn(void *ctx, const float *x, int T, const wtensor_t *w, float *y,
                         int64_t ldy) {
    cpu_be_gemm(ctx, x, T, w, y, ldy);
}

/* ATTN_LINEAR: h += the Gated DeltaNet of layer `layer` (cpu_gdn.h). */
static int linear_attention(cpu_backend_t *be, const be_batch_t *b, int layer, err_t *err) {
    const model_config_t *c = be->cfg;
    const cpu_layer_t *L = &be->layers[layer];
    int T = b->n_tokens, H = c->hidden_size;
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(be->h + (int64_t)t * H, L->norm[L_ATTN_NORM], H, c->rms_norm_eps,
                    be->xn + (int64_t)t * H);
    cpu_gdn_layer_t gl = {.qkv = {L->qkv[0], L->qkv[1], L->qkv[2]},
                          .z = L->w[L_LIN_Z],
                          .b = L->w[L_LIN_B],
                          .a = L->w[L_LIN_A],
                          .out = L->w[L_LIN_OUT],
                          .conv = L->norm[L_LIN_CONV],
                          .a_log = L->norm[L_LIN_A_LOG],
                          .dt_bias = L->norm[L_LIN_DT_BIAS],
                          .norm = L->norm[L_LIN_NORM]};
    int rc = cpu_gdn_forward(be->gdn, be->pool, &gl, L->linear, b, be->xn, be->xn, gemm_for_gdn, be,
                             err);
    if ((be->shard.tp > 1 && agree(be, rc, err) < 0) || rc < 0) return -1;
    int64_t n = (int64_t)T * H;
    if (all_reduce(be, be->xn, n, err) < 0) return -1;
    for (int64_t i = 0; i < n; i++)
        be->h[i] += be->xn[i];
    return 0;
}

/* MLP_DENSE: h += the SwiGLU MLP of layer `layer` over the batch's T tokens. */
static int dense_mlp(cpu_backend_t *be, int T, int layer, err_t *err) {
    const model_config_t *c = be->cfg;
    const cpu_layer_t *L = &be->layers[layer];
    int H = c->hidden_size, I = c->intermediate_size;

    /* x = rmsnorm(h, mlp_norm); h += (silu(x Wg^T) * x Wu^T) Wd^T */
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(be->h + (int64_t)t * H, L->norm[L_MLP_NORM], H, c->rms_norm_eps,
                    be->xn + (int64_t)t * H);
    cpu_be_gemm(be, be->xn, T, L->w[L_GATE], be->gate, I);
    cpu_be_gemm(be, be->xn, T, L->w[L_UP], be->up, I);
    int64_t n = (int64_t)T * I;
    for (int64_t i = 0; i < n; i++) {
        float g = be->gate[i];
        be->gate[i] = g / (1.0f + expf(-g)) * be->up[i];
    }
    cpu_be_gemm(be, be->gate, T, L->w[L_DOWN], be->xn, H);
    n = (int64_t)T * H;
    if (all_reduce(be, be->xn, n, err) < 0) return -1;
    for (int64_t i = 0; i < n; i++)
        be->h[i] += be->xn[i];
    return 0;
}

/* MLP_MOE: h += the mixture of experts of layer `layer` (cpu_moe.h). */
static int moe_mlp(cpu_backend_t *be, int T, int layer, err_t *err) {
    const model_config_t *c = be->cfg;
    const cpu_layer_t *L = &be->layers[layer];
    int H = c->hidden_size;
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(be->h + (int64_t)t * H, L->norm[L_MLP_NORM], H, c->rms_norm_eps,
                    be->xn + (int64_t)t * H);
    int32_t *trace = be->trace && be->shard.rank == 0 && layer < c->n_layers
                         ? be->trace + (size_t)layer * T * c->n_experts_per_tok
                         : NULL;
    uint64_t *counts = be->expert_counts + (size_t)layer * (size_t)c->n_experts;
    if (be->shard.tp == 1) {
        cpu_moe_forward(be->moe, be->pool, &L->moe, be->xn, T, be->h, be->emulate_fp8,
                        bf16_passes(be), counts, trace);
        return 0;
    }
    /* this rank's experts (or expert slices) into part, summed over the ranks, then into h */
    int64_t n = (int64_t)T * H;
    memset(be->part, 0, (size_t)n * sizeof(float));
    cpu_moe_forward(be->moe, be->pool, &L->moe, be->xn, T, be->part, be->emulate_fp8,
                    bf16_passes(be), counts, trace);
    if (all_reduce(be, be->part, n, err) < 0) return -1;
    for (int64_t i = 0; i < n; i++)
        be->h[i] += be->part[i];
    return 0;
}

/* logits [n, V] from the normed rows xn [n, H] through this rank's lm_head rows, all-gathered
 * (rank 0 writes logits; every rank takes part). */
static int vocab_parallel_logits(cpu_backend_t *be, int n, float *logits, err_t *err) {
    if (n == 0) return 0; /* on every rank alike: n is the batch's */
    cpu_be_gemm(be, be->xn, n, be->lm_head, be->lg_rank, be->vpad);
    size_t bytes = (size_t)n * (size_t)be->vpad * sizeof(float);
    if (comm_all_gather(be->shard.comm, be->lg_rank, bytes, be->lg_all, err) < 0) return -1;
    if (be->shard.rank != 0) return 0;
    int V = be->cfg->vocab_size;
    for (int q = 0; q < be->shard.tp; q++) {
        int64_t v0, vn, vpad;
        shard_vocab(V, q, be->shard.tp, &v0, &vn, &vpad);
        for (int i = 0; i < n; i++)
            memcpy(logits + (int64_t)i * V + v0, be->lg_all + ((int64_t)q * n + i) * vpad,
                   (size_t)vn * sizeof(float));
    }
    return 0;
}

void cpu_be_rope(cpu_backend_t *be, const be_batch_t *b) {
    int half = be->half;
    for (int t = 0; t < b->n_tokens; t++)
        cpu_rope_cos_sin(b->positions[t], be->inv_freq, half, be->rope_cos + (int64_t)t * half,
                         be->rope_sin + (int64_t)t * half);
}

int cpu_be_layer(cpu_backend_t *be, const be_batch_t *b, int l, err_t *err) {
    const model_config_t *c = be->cfg;
    switch (c->layer[l].attn) {
        case ATTN_FULL:
        case ATTN_GATED:
            if (full_attention(be, b, l, err) < 0) return -1;
            break;
        case ATTN_LINEAR:
            if (linear_attention(be, b, l, err) < 0) return -1;
            break;
    }
    switch (c->layer[l].mlp) {
        case MLP_DENSE:
            return dense_mlp(be, b->n_tokens, l, err);
        case MLP_MOE:
            return moe_mlp(be, b->n_tokens, l, err);
    }
    return 0;
}

static int cpu_forward(backend_t *base, const be_batch_t *b, float *logits, err_t *err) {
    cpu_backend_t *be = (cpu_backend_t *)base;
    const model_config_t *c = be->cfg;
    int rc = cpu_be_prepare(be, b, logits, err);
    if (rc == 0 && be->gdn && b->n_tokens > 0) rc = cpu_gdn_check(be->gdn, b, err);
    if (be->shard.tp > 1 && agree(be, rc, err) < 0) return -1;
    if (rc < 0) return -1;
    int T = b->n_tokens, H = c->hidden_size;
    be->hid_rows = 0;
    if (T == 0) return 0;
    /* h = embed[token_ids], and each position's RoPE angles */
    for (int t = 0; t < T; t++)
        cpu_dequant_rows(be->embed, b->token_ids[t], 1, be->h + (int64_t)t * H);
    cpu_be_rope(be, b);
    for (int l = 0; l < c->n_layers; l++)
        if (cpu_be_layer(be, b, l, err) < 0) return -1;
    /* logits = rmsnorm(h[logit_rows], final_norm) Wlm^T; with the MTP head, every token's
     * rmsnorm(h, final_norm) is kept for it (models.md 4.8: vLLM hands it the model's output) */
    if (be->mtp) {
        for (int t = 0; t < T; t++)
            cpu_rmsnorm(be->h + (int64_t)t * H, be->final_norm, H, c->rms_norm_eps,
                        be->hid + (int64_t)t * H);
        for (int i = 0; i < b->n_logits; i++)
            memcpy(be->xn + (int64_t)i * H, be->hid + (int64_t)b->logit_rows[i] * H,
                   (size_t)H * sizeof(float));
        be->hid_rows = T;
    } else {
        for (int i = 0; i < b->n_logits; i++)
            cpu_rmsnorm(be->h + (int64_t)b->logit_rows[i] * H, be->final_norm, H, c->rms_norm_eps,
                        be->xn + (int64_t)i * H);
    }
    return cpu_be_logits(be, b->n_logits, logits, err);
}

int cpu_be_logits(cpu_backend_t *be, int n, float *logits, err_t *err) {
    if (be->shard.tp > 1) return vocab_parallel_logits(be, n, logits, err);
    cpu_be_gemm(be, be->xn, n, be->lm_head, logits, be->cfg->vocab_size);
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

/* The CPU takes four live options: the GEMMs' precision, from the next forward; the SSM state's
 * dtype, for the next state_reserve; the KV cache's dtype and whether it holds the MTP layers',
 * for the next kv_reserve. */
static void cpu_configure(backend_t *base, const backend_options_t *opts) {
    cpu_backend_t *be = (cpu_backend_t *)base;
    be->precision = opts->cpu_matmul_precision;
    be->ssm_bf16 = opts->ssm_state_bf16;
    be->kv_fp8_next = opts->kv_cache_dtype == KV_DTYPE_FP8;
    be->mtp_next = opts->mtp && be->n_mtp > 0;
}

static void cpu_describe(const backend_t *base, char *buf, size_t size) {
    const cpu_backend_t *be = (const cpu_backend_t *)base;
    int passes = bf16_passes(be);
    snprintf(buf, size, "cpu, %d thread%s, %s%s%s (W8A8 emulation %s)%s%s", be->n_threads,
             be->n_threads == 1 ? "" : "s",
             passes == 2   ? "matmul high (bf16 x2, AVX512-BF16)"
             : passes == 1 ? "matmul medium (bf16, AVX512-BF16)"
                           : "f32",
             be->fast ? "" : ", scalar reference kernels",
             be->precision != CPU_MM_HIGHEST && !passes
                 ? " (cpu-matmul-precision high and medium need AVX512-BF16)"
                 : "",
             be->emulate_fp8 ? "on" : "off",
             !be->kv_fp8 ? ""
             : be->kv_scales
                 ? ", kv fp8 (e4m3 rounding emulated in an f32 pool, the checkpoint's k/v scales)"
                 : ", kv fp8 (e4m3 rounding emulated in an f32 pool, k/v scales 1.0)",
             be->embed->dummy ? ", dummy weights generated as read (a copy would not fit)" : "");
}

const backend_ops_t cpu_backend_ops = {
    .name = "cpu",
    .create = cpu_create,
    .tensor_parallel = true,
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
    .mtp_forward = cpu_mtp_forward,
    .mtp_chain = cpu_mtp_chain,
};

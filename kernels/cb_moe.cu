/*
 * The cuda backend's MLP_MOE layers (Qwen3-MoE): their weights on the device and their run, step
 * for step as the CPU reference (engine/cpu/cpu_moe.h), with moe.h's kernels:
 *
 *     x = rmsnorm(h += out, mlp_norm)          e4m3 + scales (FP8) or bf16: the experts' input
 *     xf = the same in f32                      moe_rmsnorm_f32: the router's input
 *     logits = xf Wr^T; ids, w = topk(softmax)  moe_router, moe_topk
 *     per chunk of tokens:
 *         group the (token, expert) pairs       moe_permute (+ the expert-load counters)
 *         gu = x[token] [Wg_e|Wu_e]^T           moe_gemm, gathering x by token
 *         act = silu(g) * u                     ops_silu_mul_fp8 / _bf16 (quantized for down)
 *         y = act Wd_e^T                        moe_gemm
 *         out[t] = sum_e w_e y[row(t, e)]       moe_combine, into be->d_out
 *
 * Expert weights live in one array per projection and layer, [n_local][n][k], each expert
 * contiguous: every expert, or under expert parallelism (tp > 1) the rank's range of whole
 * experts, whose pairs alone it groups, multiplies and combines (the others' rows -1), the
 * all-reduce after the layer summing the ranks' parts; gate and up stack per expert
 * into one [2 * I_pad, H] matrix as the dense MLP's do, I padded to 128 with zero rows and
 * columns so that FP8 scale blocks never straddle the gate | up seam. Launch shapes depend only
 * on the token count: decode steps capture into CUDA graphs.
 */
#include "cb_backend.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "cb_internal.h"
#include "cuda_check.h"

/* Tokens whose experts run at once: bounds the grouped workspaces (gu, act, y grow with it)
 * and is above every decode batch a graph captures. */
#define MOE_CHUNK 2048

static_assert(GEMM_OUT_F32, "moe_combine writes the layer's output in f32");

// ---------------------------------------------------------------------------------------------
// Sizes and checks

void cb_moe_init(cuda_backend_t *be) {
    const model_config_t *c = be->cfg;
    cb_moe_t *m = &be->moe;
    m->E = c->n_experts;
    if (m->n_local == 0) m->n_local = m->E; /* cb_moe_shard sets a rank's range first */
    m->k = c->n_experts_per_tok;
    m->I = c->moe_intermediate_size;
    m->I_pad = (m->I + 127) / 128 * 128;
    m->norm = c->norm_topk_prob;
    m->chunk = be->cap_t < MOE_CHUNK ? be->cap_t : MOE_CHUNK;
}

static const wtensor_t *expert(const cuda_backend_t *be, int l, int e, eslot_t s) {
    if (be->moe.views)
        return &be->moe.views[((size_t)l * (size_t)be->cfg->n_experts + (size_t)e) * E_COUNT + s];
    return weights_expert(be->w, l, e, s);
}

int cb_moe_shard(cuda_backend_t *be, err_t *err) {
    const size_t E = (size_t)be->cfg->n_experts;
    if (be->shard.tp == 1 || E == 0) return 0;
    /* sliced: a view of every expert; expert parallel: a range of the checkpoint's own */
    if (!be->shard.ep &&
        !(be->moe.views = (wtensor_t *)calloc((size_t)be->L * E * E_COUNT, sizeof *be->moe.views)))
        return err_set(err, "cuda backend: out of memory");
    for (int l = 0; l < be->L; l++) {
        if (be->cfg->layer[l].mlp != MLP_MOE) continue;
        int first, end;
        wtensor_t *views = be->moe.views ? be->moe.views + (size_t)l * E * E_COUNT : NULL;
        if (!shard_experts(be->w, &be->shard, l, views, &first, &end, err))
            return -1;      /* create prefixes the backend's name */
        be->moe.e0 = first; /* the same range in every MoE layer */
        be->moe.n_local = end - first;
    }
    return 0;
}

int cb_moe_check(const cuda_backend_t *be, int l, err_t *err) {
    const model_config_t *c = be->cfg;
    const int64_t H = be->H, I = c->moe_intermediate_size;
    if (c->n_experts > MOE_MAX_EXPERTS || c->n_experts_per_tok > MOE_MAX_TOPK || H % 128)
        return err_set(err,
                       "cuda backend: MoE with %d experts, top %d, hidden %d (at most %d, %d; "
                       "hidden a multiple of 128)",
                       c->n_experts, c->n_experts_per_tok, be->H, MOE_MAX_EXPERTS, MOE_MAX_TOPK);
    const wtensor_t *r = weights_layer(be->w, l, L_ROUTER);
    if (!r || (!r->data && !r->dummy) || r->rows != c->n_experts || r->cols != H ||
        r->dtype == DT_F8_E4M3)
        return err_set(err, "cuda backend: layer %d router missing, misshapen or quantized", l);
    static const char *const names[E_COUNT] = {"gate_proj", "up_proj", "down_proj"};
    const int e0 = be->moe.n_local ? be->moe.e0 : 0;
    const int e1 = be->moe.n_local ? e0 + be->moe.n_local : c->n_experts;
    for (int e = e0; e < e1; e++)
        for (int s = 0; s < E_COUNT; s++) {
            const wtensor_t *t = expert(be, l, e, (eslot_t)s);
            int64_t rows = s == E_DOWN ? H : I, cols = s == E_DOWN ? I : H;
            if (!t || (!t->data && !t->dummy) || t->rows != rows || t->cols != cols)
                return err_set(err, "cuda backend: layer %d experts.%d.%s missing or misshapen", l,
                               e, names[s]);
            if (t->dtype == DT_F8_E4M3 &&
                (!t->scale_inv || t->block_n != 128 || t->block_k != 128 ||
                 t->scale_rows != (rows + 127) / 128 || t->scale_cols != (cols + 127) / 128))
                return err_set(err,
                               "cuda backend: layer %d experts.%d.%s: FP8 without 128x128 scales",
                               l, e, names[s]);
            if (t->dtype != DT_F8_E4M3 && t->dtype != DT_BF16 && t->dtype != DT_F16 &&
                t->dtype != DT_F32)
                return err_set(err, "cuda backend: layer %d experts.%d.%s has dtype %s", l, e,
                               names[s], dtype_name(t->dtype));
        }
    return 0;
}

bool cb_moe_fp8_possible(cuda_backend_t *be) {
    for (int l = 0; l < be->L; l++) {
        if (be->cfg->layer[l].mlp != MLP_MOE) continue;
        const int e0 = be->moe.n_local ? be->moe.e0 : 0;
        const int e1 = be->moe.n_local ? e0 + be->moe.n_local : be->cfg->n_experts;
        for (int e = e0; e < e1; e++)
            for (int s = 0; s < E_COUNT; s++)
                if (expert(be, l, e, (eslot_t)s)->dtype != DT_F8_E4M3) {
                    snprintf(be->fp8_why, sizeof be->fp8_why,
                             "layer %d expert %d has a %s projection", l, e,
                             dtype_name(expert(be, l, e, (eslot_t)s)->dtype));
                    return false;
                }
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Weights

/* One projection of the rank's experts: [n_local][n][k] in the path's form. */
static void layout_experts(cuda_backend_t *be, wlayout_t *a, moe_weights_t *w, int n, int k) {
    const size_t E = (size_t)be->moe.n_local, esize = be->fp8 ? 1 : 2;
    w->n_experts = (int)E;
    w->n = n;
    w->k = k;
    w->data = take(a, E * (size_t)n * (size_t)k * esize);
    w->scale =
        be->fp8 ? (const float *)take(a, E * (size_t)(n / 128) * (size_t)(k / 128) * 4) : NULL;
}

void cb_moe_layout_weights(cuda_backend_t *be, int l, wlayout_t *a) {
    cb_layer_t *y = &be->layers[l];
    y->router = (uint16_t *)take(a, (size_t)be->moe.E * (size_t)be->H * 2);
    layout_experts(be, a, &y->w13, 2 * be->moe.I_pad, be->H);
    layout_experts(be, a, &y->w2, be->H, be->moe.I_pad);
}

/* Expert e's tensor t into rows [row0, row0 + t->rows) of its [n, k] matrix in w. */
static int upload_expert(cuda_backend_t *be, const moe_weights_t *w, int e, int64_t row0,
                         const wtensor_t *t, void *stage, err_t *err) {
    const int64_t n = w->n, k = w->k;
    if (be->fp8) {
        uint8_t *data = (uint8_t *)w->data + ((int64_t)e * n + row0) * k;
        float *scale = (float *)w->scale + (int64_t)e * (n / 128) * (k / 128);
        if (cb_upload_rows(be, data, k, UP_FP8, t, stage, err) < 0) return -1;
        return cb_upload_scales(be, scale, row0 / 128, k / 128, t, err);
    }
    uint16_t *data = (uint16_t *)w->data + ((int64_t)e * n + row0) * k;
    return cb_upload_rows(be, data, k, UP_BF16, t, stage, err);
}

int cb_moe_upload(cuda_backend_t *be, int l, void *stage, err_t *err) {
    const cb_layer_t *y = &be->layers[l];
    if (cb_upload_rows(be, y->router, be->H, UP_BF16, weights_layer(be->w, l, L_ROUTER), stage,
                       err) < 0)
        return -1;
    const int e0 = be->moe.e0;
    for (int e = 0; e < be->moe.n_local; e++)
        if (upload_expert(be, &y->w13, e, 0, expert(be, l, e0 + e, E_GATE), stage, err) < 0 ||
            upload_expert(be, &y->w13, e, be->moe.I_pad, expert(be, l, e0 + e, E_UP), stage, err) <
                0 ||
            upload_expert(be, &y->w2, e, 0, expert(be, l, e0 + e, E_DOWN), stage, err) < 0)
            return -1;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Workspaces

void cb_moe_layout_activations(cuda_backend_t *be, wlayout_t *a) {
    cb_moe_t *m = &be->moe;
    if (m->E == 0) return;
    const size_t T = (size_t)be->cap_t, H = (size_t)be->H, E = (size_t)m->E, k = (size_t)m->k;
    const size_t Ip = (size_t)m->I_pad, rows = (size_t)moe_max_rows(m->chunk, m->k, m->n_local);
    m->xf = (float *)take(a, T * H * 4);
    m->logits = (float *)take(a, T * E * 4);
    m->ids = (int32_t *)take(a, T * k * 4);
    m->weights = (float *)take(a, T * k * 4);
    moe_perm_layout(take(a, moe_perm_bytes(m->chunk, m->k, m->n_local)), m->chunk, m->k, m->n_local,
                    &m->perm);
    m->gu = (float *)take(a, rows * 2 * Ip * 4);
    if (be->fp8) {
        m->aq = (uint8_t *)take(a, rows * Ip);
        m->as = (float *)take(a, Ip / 128 * rows * 4);
    } else {
        m->a16 = (uint16_t *)take(a, rows * Ip * 2);
    }
    m->y = (float *)take(a, rows * H * 4);
    m->load = (unsigned long long *)take(a, (size_t)be->L * E * 8);
}

// ---------------------------------------------------------------------------------------------
// The layer

/* The experts of tokens [t0, t0 + n) of the piece: x_in is the piece's experts input (e4m3 with
 * scales xs [H / 128, Tp], or bf16), out the piece's output. */
static int run_chunk(cuda_backend_t *be, const cb_layer_t *y, int l, int t0, int n, int Tp,
                     const void *x_in, const float *xs, err_t *err) {
    cb_moe_t *m = &be->moe;
    cudaStream_t st = be->stream;
    const int H = be->H, k = m->k, Ip = m->I_pad, rows = moe_max_rows(n, k, m->n_local);
    const int32_t *ids = m->ids + (int64_t)t0 * k;
    if (moe_permute(ids, n, k, m->E, m->e0, m->n_local, &m->perm, m->load + (int64_t)l * m->E, st,
                    err) < 0)
        return -1;
    const size_t esize = be->fp8 ? 1 : 2;
    moe_gemm_args_t g = {};
    g.w = &y->w13;
    g.a = (const char *)x_in + (size_t)t0 * H * esize;
    g.lda = H;
    g.a_scale = be->fp8 ? xs + t0 : NULL;
    g.ld_scale = Tp;
    g.a_rows = m->perm.row_token;
    g.perm = &m->perm;
    g.T = n;
    g.k = k;
    g.y = m->gu;
    if (moe_gemm(&g, st, err) < 0) return -1;
    int rc = be->fp8
                 ? ops_silu_mul_fp8(m->gu, OPS_F32, 2 * (int64_t)Ip, rows, Ip, rows, Ip, m->aq,
                                    m->as, st, err)
                 : ops_silu_mul_bf16(m->gu, OPS_F32, 2 * (int64_t)Ip, rows, Ip, m->a16, st, err);
    if (rc < 0) return -1;
    g.w = &y->w2;
    g.a = be->fp8 ? (const void *)m->aq : (const void *)m->a16;
    g.lda = Ip;
    g.a_scale = be->fp8 ? m->as : NULL;
    g.ld_scale = rows;
    g.a_rows = NULL;
    g.y = m->y;
    if (moe_gemm(&g, st, err) < 0) return -1;
    return moe_combine(m->y, m->perm.pair_row, ids, m->weights + (int64_t)t0 * k, n, k, H,
                       (float *)be->d_out + (int64_t)t0 * H, st, err);
}

int cb_moe_mlp(cuda_backend_t *be, const run_args_t *r, int l, const void *out, err_t *err) {
    const cb_layer_t *y = &be->layers[l];
    cb_moe_t *m = &be->moe;
    cudaStream_t st = be->stream;
    const int T = r->T, Tp = ops_pad_tokens(T), H = be->H;
    /* x = rmsnorm(h += out, mlp_norm), in the experts' input form and in f32 for the router */
    int rc = be->fp8 ? ops_add_rmsnorm_fp8(be->resid, out, GEMM_OUT, NULL, T, Tp, H, y->mlp_norm,
                                           be->eps, be->xq, be->xs, st, err)
                     : ops_add_rmsnorm_bf16(be->resid, out, GEMM_OUT, NULL, T, H, y->mlp_norm,
                                            be->eps, be->x16, st, err);
    if (rc < 0 || moe_rmsnorm_f32(be->resid, T, H, y->mlp_norm, be->eps, m->xf, st, err) < 0)
        return -1;
    /* each token's experts and weights */
    if (moe_router(m->xf, y->router, T, H, m->E, m->logits, st, err) < 0 ||
        moe_topk(m->logits, T, m->E, m->k, m->norm, m->ids, m->weights, st, err) < 0)
        return -1;
    if (m->trace && be->shard.rank == 0) { /* tests only: synchronous, so the caller reads it when
                                             forward returns (rank 0 writes: backend.h) */
        CUDA_CHECK(cudaStreamSynchronize(st), err);
        CUDA_CHECK(cudaMemcpy(m->trace + (size_t)l * T * m->k, m->ids, (size_t)T * m->k * 4,
                              cudaMemcpyDeviceToHost),
                   err);
    }
    const void *x_in = be->fp8 ? (const void *)be->xq : (const void *)be->x16;
    for (int t0 = 0; t0 < T; t0 += m->chunk) {
        int n = T - t0 < m->chunk ? T - t0 : m->chunk;
        if (run_chunk(be, y, l, t0, n, Tp, x_in, be->xs, err) < 0) return -1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Expert-load statistics and the test hook

int cb_expert_load(backend_t *base, uint64_t *out, err_t *err) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    if (be->moe.E == 0) return err_set(err, "cuda backend: the model has no experts");
    CUDA_CHECK(cudaSetDevice(be->device), err);
    static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "counter width");
    CUDA_CHECK(cudaMemcpyAsync(out, be->moe.load, (size_t)be->L * be->moe.E * 8,
                               cudaMemcpyDeviceToHost, be->stream),
               err);
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    return 0;
}

void cb_trace_routing(backend_t *base, int32_t *ids) {
    ((cuda_backend_t *)base)->moe.trace = ids;
}

extern "C" int cuda_backend_expert_value(const backend_t *base, int layer, int e, int slot,
                                         int64_t row, int64_t col, float *out, err_t *err) {
    const cuda_backend_t *be = (const cuda_backend_t *)base;
    if (layer < 0 || layer >= be->L || be->cfg->layer[layer].mlp != MLP_MOE || e < 0 ||
        e >= be->moe.E || slot < 0 || slot >= E_COUNT)
        return err_set(err, "cuda backend: no expert %d slot %d in layer %d", e, slot, layer);
    const wtensor_t *t = expert(be, layer, e, (eslot_t)slot);
    if (row < 0 || row >= t->rows || col < 0 || col >= t->cols)
        return err_set(err, "cuda backend: element (%" PRId64 ", %" PRId64 ") out of range", row,
                       col);
    const cb_layer_t *y = &be->layers[layer];
    const moe_weights_t *w = slot == E_DOWN ? &y->w2 : &y->w13;
    const int le = e - be->moe.e0; /* the rank's own copy */
    if (le < 0 || le >= be->moe.n_local)
        return err_set(err, "cuda backend: expert %d is another rank's (this one has [%d, %d))", e,
                       be->moe.e0, be->moe.e0 + be->moe.n_local);
    const int64_t r = (slot == E_UP ? be->moe.I_pad : 0) + row, n = w->n, k = w->k;
    const int64_t at = ((int64_t)le * n + r) * k + col;
    CUDA_CHECK(cudaSetDevice(be->device), err);
    if (be->fp8) {
        uint8_t q;
        float s;
        CUDA_CHECK(cudaMemcpy(&q, (const uint8_t *)w->data + at, 1, cudaMemcpyDeviceToHost), err);
        CUDA_CHECK(
            cudaMemcpy(&s, w->scale + ((int64_t)le * (n / 128) + r / 128) * (k / 128) + col / 128,
                       4, cudaMemcpyDeviceToHost),
            err);
        *out = dtype_e4m3_to_f32(q) * s;
    } else {
        uint16_t v;
        CUDA_CHECK(cudaMemcpy(&v, (const uint16_t *)w->data + at, 2, cudaMemcpyDeviceToHost), err);
        *out = dtype_bf16_to_f32(v);
    }
    return 0;
}

/*
 * The cuda backend's layer stack: the forward pass of one piece of a step over the device
 * buffers, the layers run as the model describes them (model_config_t.layer), step for step as
 * the CPU reference (engine/cpu/cpu_backend.c, whose pseudocode uses the same names):
 *
 *     h = embed[token_ids]                                   ops_embed
 *     for each layer l:
 *         full_attention (ATTN_FULL, ATTN_GATED):
 *             x = rmsnorm(h += out, attn_norm)               the input of the QKV linear
 *             qkv = x [Wq|Wk|Wv]^T                           linear (ATTN_GATED: q | gate per head)
 *             q, k = rope(rmsnorm(q, q_norm)), rope(rmsnorm(k, k_norm)); kv_cache[slot] = k, v
 *                                                            ops_qk_norm_rope_kv (ATTN_GATED:
 *                                                            ops_gated_qk_norm_rope_kv, partial)
 *             att = softmax(q k^T / sqrt(D) + causal) v      ops_attention_prefill / _decode
 *             (ATTN_GATED: att *= sigmoid(gate))             ops_output_gate
 *             out = att Wo^T                                 linear
 *         linear_attention (ATTN_LINEAR, the Gated DeltaNet, cpu_gdn.h):
 *             x = rmsnorm(h += out, attn_norm)
 *             qkv, z = x Wqkv^T, x Wz^T                      linear (FP8 or BF16)
 *             b | a = x [Wb|Wa]^T                            BF16 GEMM (never quantized)
 *             y = silu(conv(qkv)) with the slot's window     ops_gdn_conv
 *             q, k l2-normalized; decay, beta                ops_gdn_prepare
 *             o = delta rule with the slot's state           ops_gdn_chunked / _recurrent
 *             out = (w * rmsnorm(o) * silu(z)) Wout^T        ops_gdn_gated_norm, linear
 *         dense_mlp (MLP_DENSE):
 *             x = rmsnorm(h += out, mlp_norm)                the input of the gate|up linear
 *             gu = x [Wg|Wu]^T                               linear
 *             out = (silu(g) * u) Wd^T                       linear
 *         moe_mlp (MLP_MOE):                                 cb_moe.cu
 *             x = rmsnorm(h += out, mlp_norm)
 *             ids, w = topk(softmax(x Wr^T))
 *             out = sum_e w_e (silu(x Wg_e^T) * x Wu_e^T) Wd_e^T     grouped GEMMs (moe.h)
 *     logits = rmsnorm(h += out, final_norm)[logit_rows] Wlm^T      bf16 GEMM, f32 logits
 *
 * where the CPU adds each block's output to h at the block's end, this stack leaves it in `out`
 * and the next norm adds it (one kernel instead of two passes over h).
 *
 * Under tensor parallelism (cb_tp.cu) each rank runs this stack over its shard: the outputs of
 * o_proj, out_proj, down_proj and the experts are partial sums, all-reduced (cb_all_reduce)
 * before the next norm adds them to h (so h stays the same on every rank), and the logits are
 * the rank's vocabulary columns, all-gathered to rank 0 (cb_vocab_parallel_logits).
 *
 * linear() is the one place the FP8 / BF16 choice is made: the op that makes a linear's input
 * (a residual add + RMSNorm, SwiGLU, or the bf16 attention output as it is) writes it in the
 * form the weights' path reads (e4m3 with per-token-group scales, or bf16), fused, then the
 * GEMM runs.
 */
#include "cb_backend.h"

#include <cmath>

#include "cuda_check.h"

// ---------------------------------------------------------------------------------------------
// Workspaces

size_t cb_layout_activations(cuda_backend_t *be, char *base) {
    wlayout_t a = {base, 0};
    size_t T = (size_t)be->cap_t, H = (size_t)be->H, K = (size_t)be->kmax;
    be->resid = (float *)take(&a, T * H * 4);
    if (be->fp8) {
        be->xq = (uint8_t *)take(&a, T * K);
        be->xs = (float *)take(&a, (K + 127) / 128 * T * 4);
    } else {
        be->x16 = (uint16_t *)take(&a, T * K * 2);
    }
    be->qkv = take(&a, T * (size_t)be->qkv_max * GEMM_OUT_BYTES);
    be->q = (uint16_t *)take(&a, T * (size_t)be->qd * 2);
    be->att = (uint16_t *)take(&a, T * (size_t)be->qd * 2);
    be->o_out = take(&a, T * H * GEMM_OUT_BYTES);
    be->gu = take(&a, T * 2 * (size_t)be->I_pad * GEMM_OUT_BYTES);
    be->d_out = take(&a, T * H * GEMM_OUT_BYTES);
    cb_moe_layout_activations(be, &a);
    if (be->n_mtp) {
        be->hid = (uint16_t *)take(&a, T * H * 2);
        be->hid_mtp = (uint16_t *)take(&a, T * H * 2);
        be->mtp_cat = (uint16_t *)take(&a, T * 2 * H * 2);
    }
    if (be->n_linear) {
        size_t C = (size_t)be->C, Hv = (size_t)be->Hv, vd = Hv * (size_t)be->dv;
        if (be->fp8) be->x16n = (uint16_t *)take(&a, T * H * 2);
        /* f32 GEMM outputs (GEMM_OUT_F32) */
        be->gx = (float *)take(&a, T * C * 4);
        be->gz = (float *)take(&a, T * vd * 4);
        be->gba = (float *)take(&a, T * 2 * Hv * 4);
        be->gy = (float *)take(&a, T * C * 4);
        be->gg = (float *)take(&a, T * Hv * 4);
        be->gbeta = (float *)take(&a, T * Hv * 4);
        be->go = (float *)take(&a, T * vd * 4);
        be->gn = (uint16_t *)take(&a, T * vd * 2);
    }
    return a.off;
}

size_t cb_layout_logits(cuda_backend_t *be, char *base) {
    wlayout_t a = {base, 0};
    be->xf = (uint16_t *)take(&a, (size_t)be->cap_l * (size_t)be->H * 2);
    be->logits = (float *)take(&a, (size_t)be->cap_l * (size_t)be->V * 4);
    if (be->shard.tp > 1) {
        be->lg_rank = (float *)take(&a, (size_t)be->cap_l * (size_t)be->vpad * 4);
        be->lg_all = (float *)take(&a, (size_t)be->shard.tp * (size_t)be->cap_l * be->vpad * 4);
    }
    be->counts = take(&a, ops_sample_workspace_bytes(be->cap_l, be->V));
    return a.off;
}

// ---------------------------------------------------------------------------------------------
// linear(): the FP8 / BF16 dispatch

/* What a linear reads, and the op that makes it (IN_READY: the previous linear's input, still
 * in xq / xs or x16). */
typedef struct lin_in {
    enum { IN_RMSNORM, IN_SWIGLU, IN_BF16, IN_READY } op;
    const void *src;   /* IN_RMSNORM: the output to add to h first, GEMM_OUT [T, H], or NULL;
                          IN_SWIGLU: gate | up, GEMM_OUT [T, 2k]; IN_BF16: bf16 [T, k] */
    const float *norm; /* IN_RMSNORM: [H] f32 */
} lin_in_t;

static lin_in_t rmsnorm_of_h(const void *add, const float *norm) {
    return lin_in_t{lin_in_t::IN_RMSNORM, add, norm};
}
static lin_in_t swiglu_of(const void *gu) {
    return lin_in_t{lin_in_t::IN_SWIGLU, gu, NULL};
}
static lin_in_t bf16_of(const void *x) {
    return lin_in_t{lin_in_t::IN_BF16, x, NULL};
}
static lin_in_t ready(void) {
    return lin_in_t{lin_in_t::IN_READY, NULL, NULL};
}

/* out[T, w.n] (GEMM_OUT) = in[T, w.k] W^T: makes the input in the form the weights' path reads
 * (e4m3 + transposed scales into xq / xs, or bf16 into x16), then runs the GEMM. */
static int linear(cuda_backend_t *be, const lin_in_t &in, const cb_linear_t *w, int T, void *out,
                  err_t *err) {
    cudaStream_t st = be->stream;
    const int Tp = ops_pad_tokens(T), H = be->H;
    int rc = 0;
    if (be->fp8) {
        const int k = w->w8.k;
        switch (in.op) {
            case lin_in_t::IN_RMSNORM:
                rc = ops_add_rmsnorm_fp8(be->resid, in.src, GEMM_OUT, NULL, T, Tp, H, in.norm,
                                         be->eps, be->xq, be->xs, st, err);
                break;
            case lin_in_t::IN_SWIGLU:
                rc = ops_silu_mul_fp8(in.src, GEMM_OUT, 2 * (int64_t)k, T, k, Tp, k, be->xq, be->xs,
                                      st, err);
                break;
            case lin_in_t::IN_BF16:
                rc = ops_quant_fp8(in.src, OPS_BF16, k, T, k, Tp, k, be->xq, be->xs, st, err);
                break;
            case lin_in_t::IN_READY:
                break;
        }
        if (rc < 0) return -1;
        return gemm_fp8(be->gemm, &w->w8, be->xq, be->xs, T, out, GEMM_OUT_F32, err);
    }
    const int k = w->w16.k;
    const uint16_t *x = be->x16;
    switch (in.op) {
        case lin_in_t::IN_RMSNORM:
            rc = ops_add_rmsnorm_bf16(be->resid, in.src, GEMM_OUT, NULL, T, H, in.norm, be->eps,
                                      be->x16, st, err);
            break;
        case lin_in_t::IN_SWIGLU:
            rc = ops_silu_mul_bf16(in.src, GEMM_OUT, 2 * (int64_t)k, T, k, be->x16, st, err);
            break;
        case lin_in_t::IN_BF16:
            x = (const uint16_t *)in.src;
            break;
        case lin_in_t::IN_READY:
            break;
    }
    if (rc < 0) return -1;
    return gemm_bf16(be->gemm, &w->w16, x, T, out, GEMM_OUT_F32, err);
}

// ---------------------------------------------------------------------------------------------
// The layer kinds

/* ATTN_FULL, ATTN_GATED over layer l; `out` is the previous block's output (NULL before the
 * first). Leaves its own output in be->o_out. */
static int full_attention(cuda_backend_t *be, const run_args_t *r, int l, const void *out,
                          err_t *err) {
    const cb_layer_t *y = &be->layers[l];
    const int T = r->T;
    const bool gated = be->cfg->layer[l].attn == ATTN_GATED;
    const int64_t ld_qkv = gated ? 2 * (int64_t)be->qd + 2 * be->kvd : be->qkv_n;
    void *kc = (char *)be->kv_mem + (size_t)(2 * y->attn) * be->pool_bytes;
    void *vc = (char *)be->kv_mem + (size_t)(2 * y->attn + 1) * be->pool_bytes;

    /* x = rmsnorm(h += out, attn_norm); qkv = x [Wq|Wk|Wv]^T */
    if (linear(be, rmsnorm_of_h(out, y->attn_norm), &y->qkv, T, be->qkv, err) < 0) return -1;

    /* q, k = rope(rmsnorm(q, q_norm)), rope(rmsnorm(k, k_norm)); kv_cache[slot] = k, v */
    ops_qkv_args_t qa = {};
    qa.qkv = be->qkv;
    qa.qkv_dtype = GEMM_OUT;
    qa.ld_qkv = ld_qkv;
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
    qa.k_scale = y->k_scale;
    qa.v_scale = y->v_scale;
    qa.block_size = be->block_size;
    if ((gated ? ops_gated_qk_norm_rope_kv(&qa, be->rotary_dim, be->stream, err)
               : ops_qk_norm_rope_kv(&qa, be->stream, err)) < 0)
        return -1;

    /* att = softmax(q k^T / sqrt(D) + causal) v */
    ops_attn_args_t at = {};
    at.q = be->q;
    at.out = be->att;
    at.k_cache = kc;
    at.v_cache = vc;
    at.kv_dtype = be->kv_dtype;
    at.k_scale = y->k_scale;
    at.v_scale = y->v_scale;
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
    /* a mixed batch: prefill chunks on the prefill kernel, decodes in one split-KV launch */
    at.mixed = !r->decode && r->n_dec > 0;
    if (!r->decode && ops_attention_prefill(&at, r->max_q, be->stream, err) < 0) return -1;
    if (r->n_dec > 0 && ops_attention_decode(&at, r->splits, be->attn_ws, be->stream, err) < 0)
        return -1;
    /* ATTN_GATED: att *= sigmoid(gate) */
    if (gated &&
        ops_output_gate(be->att, be->qkv, GEMM_OUT, ld_qkv, T, be->nH, be->D, be->stream, err) < 0)
        return -1;

    /* out = att Wo^T (row-parallel: summed over the ranks) */
    if (linear(be, bf16_of(be->att), &y->o, T, be->o_out, err) < 0) return -1;
    return cb_all_reduce(be, be->o_out, (int64_t)T * be->H, err);
}

/* ATTN_LINEAR (the Gated DeltaNet) over layer l, with the sequences' state slots; `out` is the
 * previous block's output. Leaves its own output in be->o_out. */
static int linear_attention(cuda_backend_t *be, const run_args_t *r, int l, const void *out,
                            err_t *err) {
    const cb_layer_t *y = &be->layers[l];
    const int T = r->T, Hv = be->Hv, vd = be->Hv * be->dv;
    cudaStream_t st = be->stream;

    /* x = rmsnorm(h += out, attn_norm); qkv = x Wqkv^T; z = x Wz^T */
    if (linear(be, rmsnorm_of_h(out, y->attn_norm), &y->lin_qkv, T, be->gx, err) < 0 ||
        linear(be, ready(), &y->lin_z, T, be->gz, err) < 0)
        return -1;
    /* b | a = x [Wb|Wa]^T in BF16 (the FP8 path normalizes h again, already updated, to bf16) */
    const uint16_t *x16 = be->x16;
    if (be->fp8) {
        if (ops_add_rmsnorm_bf16(be->resid, NULL, GEMM_OUT, NULL, T, be->H, y->attn_norm, be->eps,
                                 be->x16n, st, err) < 0)
            return -1;
        x16 = be->x16n;
    }
    if (gemm_bf16(be->gemm, &y->lin_ba.w16, x16, T, be->gba, true, err) < 0) return -1;

    const ops_gdn_args_t a = cb_gdn_args(be, y->linear, T, r->n_seqs);
    if (ops_gdn_conv(&a, be->gx, be->C, y->conv, be->gy, st, err) < 0 ||
        ops_gdn_prepare(&a, be->gy, be->gba, 2 * Hv, Hv, y->a_log, y->dt_bias, be->gg, be->gbeta,
                        st, err) < 0)
        return -1;
    /* each kernel takes its own sequences (more than one new token: chunked) */
    if (!r->decode && ops_gdn_chunked(&a, be->gy, be->gg, be->gbeta, be->go, st, err) < 0)
        return -1;
    if (ops_gdn_recurrent(&a, be->gy, be->gg, be->gbeta, be->go, st, err) < 0 ||
        ops_gdn_gated_norm(T, Hv, be->dv, be->go, be->gz, vd, y->lin_norm, be->eps, be->gn, vd, st,
                           err) < 0)
        return -1;

    /* out = o Wout^T (row-parallel: summed over the ranks) */
    if (linear(be, bf16_of(be->gn), &y->lin_out, T, be->o_out, err) < 0) return -1;
    return cb_all_reduce(be, be->o_out, (int64_t)T * be->H, err);
}

/* MLP_DENSE over layer l; `out` is the previous block's output. Leaves its own in be->d_out. */
static int dense_mlp(cuda_backend_t *be, const run_args_t *r, int l, const void *out, err_t *err) {
    const cb_layer_t *y = &be->layers[l];
    /* x = rmsnorm(h += out, mlp_norm); gu = x [Wg|Wu]^T; out = (silu(g) * u) Wd^T */
    if (linear(be, rmsnorm_of_h(out, y->mlp_norm), &y->gate_up, r->T, be->gu, err) < 0 ||
        linear(be, swiglu_of(be->gu), &y->down, r->T, be->d_out, err) < 0)
        return -1;
    /* down_proj is row-parallel: summed over the ranks */
    return cb_all_reduce(be, be->d_out, (int64_t)r->T * be->H, err);
}

// ---------------------------------------------------------------------------------------------
// The stack

int cb_run_stack(cuda_backend_t *be, const run_args_t *r, err_t *err) {
    /* h = embed[token_ids] */
    if (ops_embed(be->embed, be->ids_d, r->T, be->H, be->resid, be->stream, err) < 0) return -1;
    const void *out = NULL; /* the last block's output, not yet added to h */
    for (int l = 0; l < be->L; l++) {
        switch (be->cfg->layer[l].attn) {
            case ATTN_FULL:
            case ATTN_GATED:
                if (full_attention(be, r, l, out, err) < 0) return -1;
                out = be->o_out;
                break;
            case ATTN_LINEAR:
                if (linear_attention(be, r, l, out, err) < 0) return -1;
                out = be->o_out;
                break;
        }
        switch (be->cfg->layer[l].mlp) {
            case MLP_DENSE:
                if (dense_mlp(be, r, l, out, err) < 0) return -1;
                out = be->d_out;
                break;
            case MLP_MOE: /* each rank's expert slices: summed over the ranks */
                if (cb_moe_mlp(be, r, l, out, err) < 0 ||
                    cb_all_reduce(be, be->d_out, (int64_t)r->T * be->H, err) < 0)
                    return -1;
                out = be->d_out;
                break;
        }
    }
    if (be->mtp) { /* every token's rmsnorm(h += out, final_norm), for the MTP head */
        if (ops_add_rmsnorm_bf16(be->resid, out, GEMM_OUT, NULL, r->T, be->H, be->final_norm,
                                 be->eps, be->hid, be->stream, err) < 0)
            return -1;
        out = NULL; /* added */
    }
    if (r->n_logits == 0) return 0;
    /* logits = rmsnorm(h += out, final_norm)[logit_rows] Wlm^T */
    if (ops_add_rmsnorm_bf16(be->resid, out, GEMM_OUT, r->rows, r->n_logits, be->H, be->final_norm,
                             be->eps, be->xf, be->stream, err) < 0)
        return -1;
    if (be->shard.tp > 1) return cb_vocab_parallel_logits(be, r->n_logits, r->logits, err);
    return gemm_bf16(be->gemm, &be->lm_head, be->xf, r->n_logits, r->logits, true, err);
}

// ---------------------------------------------------------------------------------------------
// The MTP head (models.md 4.8; the CPU's twin: engine/cpu/cpu_mtp.c)

int cb_run_mtp(cuda_backend_t *be, const run_args_t *r, int step, const uint16_t *src, err_t *err) {
    const int T = r->T, H = be->H, l = be->L + step % be->n_mtp;
    cudaStream_t st = be->stream;
    /* h = [rmsnorm(embed[x]) | rmsnorm(h_t)] fc^T (an FP8 fc quantizes the bf16 input) */
    if (ops_mtp_input(be->embed, be->ids_d, src, be->mrows_d, T, H, be->mtp_norm_e, be->mtp_norm_h,
                      be->eps, be->mtp_cat, st, err) < 0)
        return -1;
    int rc =
        be->fp8 && be->mtp_fc_bf16
            ? gemm_bf16(be->gemm, &be->mtp_fc.w16, be->mtp_cat, T, be->o_out, GEMM_OUT_F32, err)
            : linear(be, bf16_of(be->mtp_cat), &be->mtp_fc, T, be->o_out, err);
    if (rc < 0) return -1;
    CUDA_CHECK(cudaMemcpyAsync(be->resid, be->o_out, (size_t)T * (size_t)H * 4,
                               cudaMemcpyDeviceToDevice, st),
               err);
    /* the MTP layer, as a decoder layer; out = rmsnorm(h, mtp.norm) for every token */
    if (full_attention(be, r, l, NULL, err) < 0 || dense_mlp(be, r, l, be->o_out, err) < 0 ||
        ops_add_rmsnorm_bf16(be->resid, be->d_out, GEMM_OUT, NULL, T, H, be->mtp_norm, be->eps,
                             be->hid_mtp, st, err) < 0)
        return -1;
    if (r->n_logits == 0) return 0;
    /* logits = out[logit_rows] Wlm^T (the rank's vocabulary rows, gathered, at tp > 1) */
    if (ops_add_rmsnorm_bf16(be->resid, NULL, GEMM_OUT, r->rows, r->n_logits, H, be->mtp_norm,
                             be->eps, be->xf, st, err) < 0)
        return -1;
    if (be->shard.tp > 1) return cb_vocab_parallel_logits(be, r->n_logits, r->logits, err);
    return gemm_bf16(be->gemm, &be->lm_head, be->xf, r->n_logits, r->logits, true, err);
}

/*
 * The cuda backend's weights on the device: what each layer holds by its kinds (layer_spec: the
 * norms, and the device linears with the checkpoint projections each stacks), their layout in
 * one arena, the upload (bytes as they are, FP8 with its block scales or BF16, converted on the
 * host otherwise, or generated on the device for lazy dummy weights), the checks, and the choice
 * between the FP8 and the BF16 path.
 */
#include "cb_backend.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "cb_internal.h"
#include "cuda_check.h"
#include "dummy_weights.h"

// ---------------------------------------------------------------------------------------------
// What a layer holds

/* A checkpoint projection inside a device linear: rows [row0, row0 + rows) of it. */
typedef struct part {
    lslot_t slot;
    int64_t row0, rows, cols;
} part_t;

/* A device linear [n, k]: checkpoint projections stacked by rows, the rest zero. bf16: kept in
 * BF16 on the FP8 path too (Qwen3.5's in_proj_b / in_proj_a, which FP8 checkpoints leave
 * unquantized). */
typedef struct lin_spec {
    cb_linear_t *w;
    int64_t n, k;
    int n_parts;
    part_t part[3];
    bool bf16;
} lin_spec_t;

/* A small tensor [rows, len] (norm vectors, the Gated DeltaNet's conv weight and parameters),
 * f32 on the device; offset is added to every value (the RMSNorms' norm_offset). */
typedef struct vec_spec {
    float **dst;
    lslot_t slot;
    int64_t len, rows;
    float offset;
} vec_spec_t;

typedef struct layer_spec {
    vec_spec_t vec[8];
    int n_vec;
    lin_spec_t lin[6];
    int n_lin;
} layer_spec_t;

static bool lin_is_fp8(const cuda_backend_t *be, const lin_spec_t *e) {
    return be->fp8 && !e->bf16;
}

/* What layer l holds on the device, by its kinds. Offsets use the current I_pad. */
static void layer_spec(const cuda_backend_t *be, int l, layer_spec_t *s) {
    cb_layer_t *y = &be->layers[l];
    int64_t H = be->H, D = be->D, qd = be->qd, kvd = be->kvd, I = be->I, Ip = be->I_pad;
    int64_t C = be->C, vd = (int64_t)be->Hv * be->dv, Hv = be->Hv;
    float off = be->cfg->norm_offset;
    *s = layer_spec_t{}; /* all of it: g++ cannot see that n_vec bounds the reads */
    s->vec[s->n_vec++] = vec_spec_t{&y->attn_norm, L_ATTN_NORM, H, 1, off};
    s->vec[s->n_vec++] = vec_spec_t{&y->mlp_norm, L_MLP_NORM, H, 1, off};
    switch (be->cfg->layer[l].attn) {
        case ATTN_FULL:
        case ATTN_GATED: {
            int64_t qn = be->cfg->layer[l].attn == ATTN_GATED ? 2 * qd : qd;
            s->vec[s->n_vec++] = vec_spec_t{&y->q_norm, L_Q_NORM, D, 1, off};
            s->vec[s->n_vec++] = vec_spec_t{&y->k_norm, L_K_NORM, D, 1, off};
            s->lin[s->n_lin++] =
                lin_spec_t{&y->qkv,
                           qn + 2 * kvd,
                           H,
                           3,
                           {{L_Q, 0, qn, H}, {L_K, qn, kvd, H}, {L_V, qn + kvd, kvd, H}},
                           false};
            s->lin[s->n_lin++] = lin_spec_t{&y->o, H, qd, 1, {{L_O, 0, H, qd}}, false};
            break;
        }
        case ATTN_LINEAR:
            s->vec[s->n_vec++] = vec_spec_t{&y->conv, L_LIN_CONV, be->K, C, 0.0f};
            s->vec[s->n_vec++] = vec_spec_t{&y->a_log, L_LIN_A_LOG, Hv, 1, 0.0f};
            s->vec[s->n_vec++] = vec_spec_t{&y->dt_bias, L_LIN_DT_BIAS, Hv, 1, 0.0f};
            s->vec[s->n_vec++] = vec_spec_t{&y->lin_norm, L_LIN_NORM, be->dv, 1, 0.0f};
            s->lin[s->n_lin++] = lin_spec_t{&y->lin_qkv, C, H, 1, {{L_LIN_QKV, 0, C, H}}, false};
            s->lin[s->n_lin++] = lin_spec_t{&y->lin_z, vd, H, 1, {{L_LIN_Z, 0, vd, H}}, false};
            s->lin[s->n_lin++] = lin_spec_t{
                &y->lin_ba, 2 * Hv, H, 2, {{L_LIN_B, 0, Hv, H}, {L_LIN_A, Hv, Hv, H}}, true};
            s->lin[s->n_lin++] = lin_spec_t{&y->lin_out, H, vd, 1, {{L_LIN_OUT, 0, H, vd}}, false};
            break;
    }
    switch (be->cfg->layer[l].mlp) {
        case MLP_DENSE:
            s->lin[s->n_lin++] =
                lin_spec_t{&y->gate_up, 2 * Ip, H, 2, {{L_GATE, 0, I, H}, {L_UP, Ip, I, H}}, false};
            s->lin[s->n_lin++] = lin_spec_t{&y->down, H, Ip, 1, {{L_DOWN, 0, H, I}}, false};
            break;
        case MLP_MOE: /* the router and the experts: cb_moe.cu */
            break;
    }
}

// ---------------------------------------------------------------------------------------------
// Checks and the FP8 / BF16 choice

const wtensor_t *cb_tensor(const cuda_backend_t *be, int l, lslot_t slot, wtensor_t *view,
                           err_t *err) {
    return shard_layer(be->w, &be->shard, l, slot, view, err);
}

/* Layer l's tensor in slot as this rank holds it, as row blocks stacked in order: one (the
 * tensor or its view), or at tp > 1 for the Gated DeltaNet's in_proj_qkv and conv1d three (its
 * q, k and v rows: shard_qkv). Returns how many, 0 with err filled (a bad shard) or not (a
 * missing tensor: parts[0] NULL). */
static int tensor_parts(const cuda_backend_t *be, int l, lslot_t slot, wtensor_t views[3],
                        const wtensor_t *parts[3], err_t *err) {
    if (be->shard.tp > 1 && (slot == L_LIN_QKV || slot == L_LIN_CONV))
        return shard_qkv(be->w, &be->shard, l, slot, views, parts, err) < 0 ? 0 : 3;
    parts[0] = cb_tensor(be, l, slot, &views[0], err);
    parts[1] = parts[2] = NULL;
    return parts[0] ? 1 : 0;
}

/* The first part of tensor_parts where the checks have passed (the same views succeeded there):
 * what the parts share (dtype, columns). */
static const wtensor_t *tensor_of(const cuda_backend_t *be, int l, lslot_t slot,
                                  wtensor_t views[3]) {
    err_t e = {{0}};
    const wtensor_t *parts[3];
    tensor_parts(be, l, slot, views, parts, &e);
    return parts[0];
}

static int check_tensor(const wtensor_t *t, int l, lslot_t slot, int64_t rows, int64_t cols,
                        err_t *err) {
    if (!t || (!t->data && !t->dummy) || t->rows != rows || t->cols != cols)
        return err_set(err, "cuda backend: layer %d tensor %d missing or misshapen", l, slot);
    if (t->dtype == DT_F8_E4M3 &&
        (!t->scale_inv || t->block_n != 128 || t->block_k != 128 ||
         t->scale_rows != (t->rows + 127) / 128 || t->scale_cols != (t->cols + 127) / 128))
        return err_set(err, "cuda backend: layer %d tensor %d: FP8 without 128x128 scales", l,
                       slot);
    if (t->dtype != DT_F8_E4M3 && t->dtype != DT_BF16 && t->dtype != DT_F16 && t->dtype != DT_F32)
        return err_set(err, "cuda backend: layer %d tensor %d has dtype %s", l, slot,
                       dtype_name(t->dtype));
    return 0;
}

/* Layer l's tensor in slot as this rank holds it: its shard taken, then checked. */
static int check_slot(const cuda_backend_t *be, int l, lslot_t slot, int64_t rows, int64_t cols,
                      err_t *err) {
    wtensor_t v[3];
    const wtensor_t *parts[3];
    err_t e = {{0}};
    int n = tensor_parts(be, l, slot, v, parts, &e);
    if (n == 0 && e.msg[0]) return err_set(err, "%s", e.msg);
    if (n == 0) return check_tensor(NULL, l, slot, rows, cols, err);
    int64_t left = rows;
    for (int i = 0; i < n; i++) {
        if (check_tensor(parts[i], l, slot, parts[i]->rows, cols, err) < 0) return -1;
        left -= parts[i]->rows;
    }
    if (left != 0) return check_tensor(NULL, l, slot, rows, cols, err); /* misshapen */
    return 0;
}

/* The MTP head's fc (a device linear of its own, not a layer's) and its norms. */
static lin_spec_t mtp_fc_spec(const cuda_backend_t *be) {
    return lin_spec_t{
        (cb_linear_t *)&be->mtp_fc, be->H, 2 * (int64_t)be->H, 0, {}, be->mtp_fc_bf16};
}
static const gslot_t MTP_NORMS[3] = {G_MTP_EMBED_NORM, G_MTP_HIDDEN_NORM, G_MTP_NORM};

int cb_check_weights(const cuda_backend_t *be, err_t *err) {
    const model_weights_t *w = be->w;
    for (int l = 0; l < be->L + be->n_mtp; l++) {
        if (be->cfg->layer[l].mlp == MLP_MOE && cb_moe_check(be, l, err) < 0) return -1;
        layer_spec_t s;
        layer_spec(be, l, &s);
        for (int i = 0; i < s.n_vec; i++)
            if (check_slot(be, l, s.vec[i].slot, s.vec[i].rows, s.vec[i].len, err) < 0) return -1;
        for (int i = 0; i < s.n_lin; i++)
            for (int j = 0; j < s.lin[i].n_parts; j++) {
                const part_t *p = &s.lin[i].part[j];
                if (check_slot(be, l, p->slot, p->rows, p->cols, err) < 0) return -1;
            }
    }
    const wtensor_t *g[] = {weights_global(w, G_EMBED), weights_global(w, G_LM_HEAD)};
    for (const wtensor_t *t : g)
        if (!t || (!t->data && !t->dummy) || t->rows != be->V || t->cols != be->H)
            return err_set(err, "cuda backend: embedding or lm_head missing or misshapen");
    const wtensor_t *fn = weights_global(w, G_FINAL_NORM);
    if (!fn || !fn->data || fn->cols != be->H)
        return err_set(err, "cuda backend: final norm missing");
    if (be->n_mtp == 0) return 0;
    const wtensor_t *fc = weights_global(w, G_MTP_FC);
    if (check_tensor(fc, -1, L_COUNT, be->H, 2 * (int64_t)be->H, err) < 0)
        return err_prefix(err, "mtp.fc");
    for (gslot_t g : MTP_NORMS) {
        const wtensor_t *t = weights_global(w, g);
        if (!t || !t->data || t->cols != be->H)
            return err_set(err, "cuda backend: an MTP norm is missing or misshapen");
    }
    return 0;
}

bool cb_fp8_possible(cuda_backend_t *be) {
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
    if (!cb_moe_fp8_possible(be)) return false;
    /* every projection FP8; the distinct device shapes, in order */
    enum { MAX_SHAPES = 16 };
    int shapes[MAX_SHAPES][2], n_shapes = 0;
    if (be->n_mtp && weights_global(be->w, G_MTP_FC)->dtype == DT_F8_E4M3) { /* else BF16 */
        shapes[n_shapes][0] = be->H;
        shapes[n_shapes++][1] = 2 * be->H;
    }
    for (int l = 0; l < be->L + be->n_mtp; l++) {
        layer_spec_t s;
        layer_spec(be, l, &s);
        for (int i = 0; i < s.n_lin; i++) {
            if (s.lin[i].bf16) continue;
            for (int j = 0; j < s.lin[i].n_parts; j++) {
                wtensor_t v[3];
                const wtensor_t *t = tensor_of(be, l, s.lin[i].part[j].slot, v);
                if (t->dtype != DT_F8_E4M3) {
                    snprintf(why, n, "layer %d has a %s projection", l, dtype_name(t->dtype));
                    return false;
                }
            }
            int k = 0;
            while (k < n_shapes && !(shapes[k][0] == s.lin[i].n && shapes[k][1] == s.lin[i].k))
                k++;
            if (k < n_shapes) continue;
            if (n_shapes == MAX_SHAPES) {
                snprintf(why, n, "more than %d distinct linear shapes", MAX_SHAPES);
                return false;
            }
            shapes[n_shapes][0] = (int)s.lin[i].n;
            shapes[n_shapes++][1] = (int)s.lin[i].k;
        }
    }
    for (int i = 0; i < n_shapes; i++)
        if (!gemm_fp8_shape_ok(shapes[i][0], shapes[i][1], why, n)) return false;
    /* cuBLASLt must have an algorithm for every shape at every size a step can run (with BF16
     * output where F32 output has none): asked here, at start-up, never found missing in a step */
    for (int i = 0; i < n_shapes; i++) {
        err_t e = {{0}};
        int via = 0;
        if (gemm_probe(be->gemm, true, shapes[i][0], shapes[i][1], be->cap_t, GEMM_OUT_F32, 8, &via,
                       &e) < 0) {
            size_t len = strnlen(e.msg, n - 1); /* n > 0: the caller's buffer */
            memcpy(why, e.msg, len);
            why[len] = '\0';
            return false;
        }
        be->fp8_probed++;
    }
    return true;
}

int cb_probe_gemms(cuda_backend_t *be, err_t *err) {
    /* the lm_head (BF16, f32 logits) at every logit-row count, its output at a row offset of a
     * vocabulary-wide buffer (a later piece's rows) or, at tp > 1, the rank's own buffer */
    int align = 8;
    while (be->shard.tp == 1 && align > 0 && ((int64_t)be->V * 4) % (1 << align))
        align--;
    int via = 0;
    if (gemm_probe(be->gemm, false, (int)be->vn, be->H, be->cap_l, true, align, &via, err) < 0)
        return err_prefix(err, "cuda backend: the lm_head's GEMM");
    gemm_stats_t st;
    gemm_stats(be->gemm, &st);
    if (be->shard.rank == 0)
        fprintf(stderr,
                "tachyon: cuda: cuBLASLt algorithms for every size a step runs: %d FP8 shapes up "
                "to %d tokens (%d sizes through BF16 output), the lm_head up to %d rows; %d "
                "heuristic queries\n",
                be->fp8_probed, be->cap_t, st.via_bf16, be->cap_l, st.queries);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Layout

/* A device linear's place in the arena, in its path's form. */
static void layout_lin(const cuda_backend_t *be, const lin_spec_t *e, wlayout_t *a) {
    if (lin_is_fp8(be, e)) {
        gemm_w8_t *g = &e->w->w8;
        g->n = (int)e->n;
        g->k = (int)e->k;
        g->data = (const uint8_t *)take(a, (size_t)(e->n * e->k));
        g->scale = (const float *)take(a, (size_t)((e->n + 127) / 128) *
                                              (size_t)gemm_w8_scale_ld((int)e->k) * 4);
    } else {
        gemm_w16_t *g = &e->w->w16;
        g->n = (int)e->n;
        g->k = (int)e->k;
        g->data = (const uint16_t *)take(a, (size_t)(e->n * e->k) * 2);
    }
}

size_t cb_layout_weights(cuda_backend_t *be, char *base) {
    wlayout_t a = {base, 0};
    int64_t H = be->H;
    for (int l = 0; l < be->L + be->n_mtp; l++) {
        layer_spec_t s;
        layer_spec(be, l, &s);
        for (int i = 0; i < s.n_vec; i++)
            *s.vec[i].dst = (float *)take(&a, (size_t)(s.vec[i].rows * s.vec[i].len) * 4);
        if (be->cfg->layer[l].mlp == MLP_MOE) cb_moe_layout_weights(be, l, &a);
        for (int i = 0; i < s.n_lin; i++)
            layout_lin(be, &s.lin[i], &a);
    }
    if (be->n_mtp) {
        lin_spec_t fc = mtp_fc_spec(be);
        layout_lin(be, &fc, &a);
        float **norms[3] = {&be->mtp_norm_e, &be->mtp_norm_h, &be->mtp_norm};
        for (float **n : norms)
            *n = (float *)take(&a, (size_t)H * 4);
    }
    be->embed = (uint16_t *)take(&a, (size_t)be->V * (size_t)H * 2);
    /* this rank's vocabulary rows (all of them at tp 1) */
    be->lm_head.data = be->embed + be->v0 * H;
    be->lm_head.n = (int)be->vn;
    be->lm_head.k = (int)H;
    if (!be->cfg->tie_word_embeddings)
        be->lm_head.data = (const uint16_t *)take(&a, (size_t)be->vn * (size_t)H * 2);
    be->final_norm = (float *)take(&a, (size_t)H * 4);
    be->inv_freq = (float *)take(&a, (size_t)be->rotary_dim / 2 * 4);
    return a.off;
}

// ---------------------------------------------------------------------------------------------
// Upload

/* Host staging for conversions, bytes. */
#define CONVERT_CHUNK (32ull << 20)

/* Copies rows [0, t->rows) of t to dst (row stride ld elements) as kind; columns cols..ld-1 are
 * left as they are (zero: the arena is cleared first). FP8 to FP8 and BF16 to BF16 copy bytes
 * (or generate dummy values on the device); any other pair converts on the host through f32. */
/* The weights' bytes uploaded so far, for the loading screen (backend_options_t.load_progress). */
static void loaded(cuda_backend_t *be, const wtensor_t *t) {
    be->load_done += wtensor_bytes(t);
    if (be->load_progress) be->load_progress(be->load_progress_user, be->load_done, be->load_total);
}

static int upload_rows(cuda_backend_t *be, void *dst, int64_t ld, up_kind_t kind,
                       const wtensor_t *t, void *stage, err_t *err);

int cb_upload_rows(cuda_backend_t *be, void *dst, int64_t ld, up_kind_t kind, const wtensor_t *t,
                   void *stage, err_t *err) {
    int rc = upload_rows(be, dst, ld, kind, t, stage, err);
    if (rc == 0) loaded(be, t);
    return rc;
}

static int upload_rows(cuda_backend_t *be, void *dst, int64_t ld, up_kind_t kind,
                       const wtensor_t *t, void *stage, err_t *err) {
    size_t esize = kind == UP_FP8 ? 1 : 2;
    bool same =
        (kind == UP_FP8 && t->dtype == DT_F8_E4M3) || (kind == UP_BF16 && t->dtype == DT_BF16);
    if (same && t->dummy)
        return dummy_fill_view(dst, kind == UP_FP8, t->rows, t->cols, ld, t->dummy_offset,
                               wtensor_ld(t), t->dummy_seed, t->dummy_stream, be->stream, err);
    if (same) {
        CUDA_CHECK(cudaMemcpy2DAsync(dst, (size_t)ld * esize, t->data,
                                     (size_t)wtensor_ld(t) * esize, (size_t)t->cols * esize,
                                     (size_t)t->rows, cudaMemcpyHostToDevice, be->stream),
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
int cb_upload_scales(cuda_backend_t *be, float *dst, int64_t row0, int64_t ld, const wtensor_t *t,
                     err_t *err) {
    CUDA_CHECK(cudaMemcpy2DAsync(dst + row0 * ld, (size_t)ld * 4, t->scale_inv,
                                 (size_t)wtensor_scale_ld(t) * 4, (size_t)t->scale_cols * 4,
                                 (size_t)t->scale_rows, cudaMemcpyHostToDevice, be->stream),
               err);
    return 0;
}

/* A small tensor to f32 on the device, plus offset (the checkpoint's bf16 values convert
 * exactly; 1 + w rounds once in f32, as the CPU backend's copy). */
static int upload_norm(cuda_backend_t *be, float *dst, const wtensor_t *t, float offset,
                       float *stage, err_t *err) {
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    if ((size_t)(t->rows * t->cols) * 4 > CONVERT_CHUNK)
        return err_set(err, "cuda backend: a small tensor of %" PRId64 " x %" PRId64 " is too big",
                       t->rows, t->cols);
    for (int64_t r = 0; r < t->rows; r++)
        wtensor_row_f32(t, r, stage + r * t->cols);
    for (int64_t i = 0; i < t->rows * t->cols; i++)
        stage[i] += offset;
    CUDA_CHECK(cudaMemcpy(dst, stage, (size_t)(t->rows * t->cols) * 4, cudaMemcpyHostToDevice),
               err);
    return 0;
}

/* Layer l's small tensor in slot, its parts (tensor_parts) one after the other into dst. */
static int upload_vec(cuda_backend_t *be, float *dst, int l, lslot_t slot, float offset,
                      float *stage, err_t *err) {
    wtensor_t v[3];
    const wtensor_t *parts[3];
    int n = tensor_parts(be, l, slot, v, parts, err);
    for (int i = 0; i < n; i++) {
        if (upload_norm(be, dst, parts[i], offset, stage, err) < 0) return -1;
        dst += parts[i]->rows * parts[i]->cols;
    }
    return n > 0 ? 0 : -1;
}

/* Rows of a checkpoint projection (t) into rows [row0, row0 + t->rows) of a device linear. */
static int upload_rows_at(cuda_backend_t *be, const lin_spec_t *e, int64_t row0, const wtensor_t *t,
                          void *stage, err_t *err) {
    if (lin_is_fp8(be, e)) {
        gemm_w8_t *g = &e->w->w8;
        int64_t ld = g->k, sld = gemm_w8_scale_ld(g->k);
        if (cb_upload_rows(be, (uint8_t *)g->data + row0 * ld, ld, UP_FP8, t, stage, err) < 0)
            return -1;
        return cb_upload_scales(be, (float *)g->scale, row0 / 128, sld, t, err);
    }
    gemm_w16_t *g = &e->w->w16;
    return cb_upload_rows(be, (uint16_t *)g->data + row0 * g->k, g->k, UP_BF16, t, stage, err);
}

/* One checkpoint projection into its rows of a device linear (its tensor_parts stacked). */
static int upload_part(cuda_backend_t *be, const lin_spec_t *e, const part_t *p, int l, void *stage,
                       err_t *err) {
    wtensor_t v[3];
    const wtensor_t *parts[3];
    int n = tensor_parts(be, l, p->slot, v, parts, err);
    int64_t row0 = p->row0;
    for (int i = 0; i < n; i++) {
        if (upload_rows_at(be, e, row0, parts[i], stage, err) < 0) return -1;
        row0 += parts[i]->rows;
    }
    return n > 0 ? 0 : -1;
}

int cb_upload_weights(cuda_backend_t *be, err_t *err) {
    const model_weights_t *w = be->w;
    void *stage = NULL;
    CUDA_CHECK(cudaMallocHost(&stage, CONVERT_CHUNK), err);
    int rc = -1;
    float *fstage = (float *)stage;
    int64_t H = be->H;
    wtensor_t v;
    for (int l = 0; l < be->L + be->n_mtp; l++) {
        layer_spec_t s;
        layer_spec(be, l, &s);
        for (int i = 0; i < s.n_vec; i++)
            if (upload_vec(be, *s.vec[i].dst, l, s.vec[i].slot, s.vec[i].offset, fstage, err) < 0)
                goto out;
        if (be->cfg->layer[l].mlp == MLP_MOE && cb_moe_upload(be, l, stage, err) < 0) goto out;
        for (int i = 0; i < s.n_lin; i++)
            for (int j = 0; j < s.lin[i].n_parts; j++) {
                const part_t *p = &s.lin[i].part[j];
                if (upload_part(be, &s.lin[i], p, l, stage, err) < 0) goto out;
            }
    }
    if (cb_upload_rows(be, be->embed, H, UP_BF16, weights_global(w, G_EMBED), stage, err) < 0)
        goto out;
    if (!be->cfg->tie_word_embeddings) {
        const wtensor_t *lm = shard_lm_head(w, &be->shard, &v, err);
        if (!lm || cb_upload_rows(be, (void *)be->lm_head.data, H, UP_BF16, lm, stage, err) < 0)
            goto out;
    }
    if (upload_norm(be, be->final_norm, weights_global(w, G_FINAL_NORM), be->cfg->norm_offset,
                    fstage, err) < 0)
        goto out;
    if (be->n_mtp) {
        lin_spec_t fc = mtp_fc_spec(be);
        float *norms[3] = {be->mtp_norm_e, be->mtp_norm_h, be->mtp_norm};
        if (upload_rows_at(be, &fc, 0, weights_global(w, G_MTP_FC), stage, err) < 0) goto out;
        for (int i = 0; i < 3; i++)
            if (upload_norm(be, norms[i], weights_global(w, MTP_NORMS[i]), be->cfg->norm_offset,
                            fstage, err) < 0)
                goto out;
    }
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    cpu_rope_inv_freq(be->rotary_dim, be->cfg->rope_theta, fstage);
    if (cudaMemcpy(be->inv_freq, fstage, (size_t)be->rotary_dim / 2 * 4, cudaMemcpyHostToDevice) !=
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

// ---------------------------------------------------------------------------------------------
// Test hook (cb_internal.h)

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
        layer_spec_t s;
        layer_spec(be, layer, &s);
        const lin_spec_t *e = NULL;
        for (int i = 0; i < s.n_lin && !e; i++)
            for (int j = 0; j < s.lin[i].n_parts; j++)
                if (s.lin[i].part[j].slot == slot) {
                    e = &s.lin[i];
                    r += s.lin[i].part[j].row0;
                }
        if (!e) return err_set(err, "cuda backend: slot %d is not a projection", slot);
        wtensor_t views[3];
        const wtensor_t *t = tensor_of(be, layer, (lslot_t)slot, views);
        if (row < 0 || row >= t->rows || col < 0 || col >= t->cols)
            return err_set(err, "cuda backend: element (%" PRId64 ", %" PRId64 ") out of range",
                           row, col);
        if (lin_is_fp8(be, e)) {
            data = e->w->w8.data;
            ld = e->w->w8.k;
            scale = e->w->w8.scale;
            sld = gemm_w8_scale_ld(e->w->w8.k);
        } else {
            data = e->w->w16.data;
            ld = e->w->w16.k;
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

#include "shard.h"

#include <stdio.h>

/* n / tp, or -1 with err filled when tp does not divide it. */
static int split(int n, int tp, const char *what, err_t *err) {
    if (n % tp != 0) {
        err_set(err, "%s (%d) is not a multiple of %d", what, n, tp);
        return -1;
    }
    return n / tp;
}

int shard_config(const model_config_t *cfg, const shard_t *s, model_config_t *out, err_t *err) {
    *out = *cfg;
    if (s->tp == 1) return 0;
    int tp = s->tp;
    if (model_count_attn(cfg, ATTN_LINEAR) > 0 &&
        ((out->lin_k_heads = split(cfg->lin_k_heads, tp, "linear_num_key_heads", err)) < 0 ||
         (out->lin_v_heads = split(cfg->lin_v_heads, tp, "linear_num_value_heads", err)) < 0))
        return -1;
    if ((out->n_heads = split(cfg->n_heads, tp, "num_attention_heads", err)) < 0) return -1;
    if (cfg->n_kv_heads >= tp) {
        if ((out->n_kv_heads = split(cfg->n_kv_heads, tp, "num_key_value_heads", err)) < 0)
            return -1;
    } else {
        if (tp % cfg->n_kv_heads != 0)
            return err_set(err,
                           "%d KV heads can be neither split nor replicated evenly (%d is not a "
                           "multiple of %d)",
                           cfg->n_kv_heads, tp, cfg->n_kv_heads);
        out->n_kv_heads = 1; /* replicated on tp / nKV ranks */
    }
    bool dense = false;
    for (int l = 0; l < cfg->n_layers; l++)
        dense |= cfg->layer[l].mlp == MLP_DENSE;
    if (dense &&
        (out->intermediate_size = split(cfg->intermediate_size, tp, "intermediate_size", err)) < 0)
        return -1;
    if (cfg->n_experts > 0 && !s->ep &&
        (out->moe_intermediate_size =
             split(cfg->moe_intermediate_size, tp, "moe_intermediate_size", err)) < 0)
        return -1;
    if (cfg->n_experts > 0 && s->ep && cfg->n_experts < tp)
        return err_set(err, "expert parallel: only %d experts for %d ranks", cfg->n_experts, tp);
    return 0;
}

/* The first KV head rank r holds (its query heads read it). */
static int kv_head0(const model_config_t *c, int r, int tp) {
    if (c->n_kv_heads >= tp) return r * (c->n_kv_heads / tp);
    return r * (c->n_heads / tp) / (c->n_heads / c->n_kv_heads);
}

static const wtensor_t *view_of(const wtensor_t *t, const char *name, int l, int64_t row0,
                                int64_t rows, int64_t col0, int64_t cols, wtensor_t *view,
                                err_t *err) {
    char what[192];
    snprintf(what, sizeof what, "layer %d %s", l, name);
    if (!t || (!t->data && !t->dummy)) {
        err_set(err, "%s missing", what);
        return NULL;
    }
    if (wtensor_slice(t, what, row0, rows, col0, cols, view, err) < 0) return NULL;
    return view;
}

const wtensor_t *shard_layer(const model_weights_t *w, const shard_t *s, int l, lslot_t slot,
                             wtensor_t *view, err_t *err) {
    const wtensor_t *t = weights_layer(w, l, slot);
    if (s->tp == 1 || !t) return t;
    const model_config_t *c = weights_config(w);
    int r = s->rank, tp = s->tp, D = c->head_dim;
    int64_t heads = c->n_heads / tp, kvd = (c->n_kv_heads >= tp ? c->n_kv_heads / tp : 1) * D;
    int64_t I = c->intermediate_size / tp;
    int64_t hv = c->lin_v_heads / tp, vd = hv * c->lin_v_dim; /* Gated DeltaNet value heads */
    switch (slot) {
        case L_Q: {
            int64_t per = c->layer[l].attn == ATTN_GATED ? 2 * D : D;
            return view_of(t, "q_proj", l, r * heads * per, heads * per, 0, t->cols, view, err);
        }
        case L_K:
            return view_of(t, "k_proj", l, kv_head0(c, r, tp) * D, kvd, 0, t->cols, view, err);
        case L_V:
            return view_of(t, "v_proj", l, kv_head0(c, r, tp) * D, kvd, 0, t->cols, view, err);
        case L_O:
            return view_of(t, "o_proj", l, 0, t->rows, r * heads * D, heads * D, view, err);
        case L_GATE:
            return view_of(t, "gate_proj", l, r * I, I, 0, t->cols, view, err);
        case L_UP:
            return view_of(t, "up_proj", l, r * I, I, 0, t->cols, view, err);
        case L_DOWN:
            return view_of(t, "down_proj", l, 0, t->rows, r * I, I, view, err);
        case L_LIN_Z:
            return view_of(t, "in_proj_z", l, r * vd, vd, 0, t->cols, view, err);
        case L_LIN_B:
            return view_of(t, "in_proj_b", l, r * hv, hv, 0, t->cols, view, err);
        case L_LIN_A:
            return view_of(t, "in_proj_a", l, r * hv, hv, 0, t->cols, view, err);
        case L_LIN_A_LOG:
            return view_of(t, "A_log", l, 0, 1, r * hv, hv, view, err);
        case L_LIN_DT_BIAS:
            return view_of(t, "dt_bias", l, 0, 1, r * hv, hv, view, err);
        case L_LIN_OUT:
            return view_of(t, "out_proj", l, 0, t->rows, r * vd, vd, view, err);
        case L_LIN_QKV:
        case L_LIN_CONV:
            err_set(err, "layer %d: in_proj_qkv and conv1d are three views (shard_qkv)", l);
            return NULL;
        default:
            return t; /* norms and the router: replicated */
    }
}

int shard_qkv(const model_weights_t *w, const shard_t *s, int l, lslot_t slot, wtensor_t views[3],
              const wtensor_t *parts[3], err_t *err) {
    const wtensor_t *t = weights_layer(w, l, slot);
    parts[0] = t;
    parts[1] = parts[2] = NULL;
    if (s->tp == 1) return 0;
    const model_config_t *c = weights_config(w);
    int r = s->rank, tp = s->tp;
    int64_t kd = model_lin_k_dim(c), kdr = kd / tp, vdr = model_lin_v_dim(c) / tp;
    const char *name = slot == L_LIN_QKV ? "in_proj_qkv" : "conv1d";
    char what[3][48];
    snprintf(what[0], sizeof what[0], "%s (q rows)", name);
    snprintf(what[1], sizeof what[1], "%s (k rows)", name);
    snprintf(what[2], sizeof what[2], "%s (v rows)", name);
    const int64_t row0[3] = {r * kdr, kd + r * kdr, 2 * kd + r * vdr}, rows[3] = {kdr, kdr, vdr};
    for (int p = 0; p < 3; p++)
        if (!(parts[p] =
                  view_of(t, what[p], l, row0[p], rows[p], 0, t ? t->cols : 0, &views[p], err)))
            return -1;
    return 0;
}

const wtensor_t *shard_experts(const model_weights_t *w, const shard_t *s, int l, wtensor_t *views,
                               int *first, int *end, err_t *err) {
    const model_config_t *c = weights_config(w);
    int E = c->n_experts, r = s->rank, tp = s->tp;
    const wtensor_t *all = weights_expert(w, l, 0, E_GATE);
    *first = 0;
    *end = E;
    if (tp == 1) return all;
    if (s->ep) {
        *first = r * E / tp;
        *end = (r + 1) * E / tp;
        return all;
    }
    int64_t I = c->moe_intermediate_size / tp;
    for (int e = 0; e < E; e++) {
        char name[3][48];
        snprintf(name[0], sizeof name[0], "experts.%d.gate_proj", e);
        snprintf(name[1], sizeof name[1], "experts.%d.up_proj", e);
        snprintf(name[2], sizeof name[2], "experts.%d.down_proj", e);
        const wtensor_t *g = weights_expert(w, l, e, E_GATE), *u = weights_expert(w, l, e, E_UP);
        const wtensor_t *d = weights_expert(w, l, e, E_DOWN);
        wtensor_t *v = views + (size_t)e * E_COUNT;
        if (!view_of(g, name[0], l, r * I, I, 0, g->cols, &v[E_GATE], err) ||
            !view_of(u, name[1], l, r * I, I, 0, u->cols, &v[E_UP], err) ||
            !view_of(d, name[2], l, 0, d->rows, r * I, I, &v[E_DOWN], err))
            return NULL;
    }
    return views;
}

void shard_vocab(int vocab, int rank, int tp, int64_t *v0, int64_t *vn, int64_t *vpad) {
    *v0 = (int64_t)vocab * rank / tp;
    *vn = (int64_t)vocab * (rank + 1) / tp - *v0;
    *vpad = ((int64_t)vocab + tp - 1) / tp;
}

const wtensor_t *shard_lm_head(const model_weights_t *w, const shard_t *s, wtensor_t *view,
                               err_t *err) {
    const wtensor_t *t = weights_global(w, G_LM_HEAD);
    if (s->tp == 1 || !t || (!t->data && !t->dummy)) return t;
    int64_t v0, vn, vpad;
    shard_vocab(weights_config(w)->vocab_size, s->rank, s->tp, &v0, &vn, &vpad);
    if (t->rows != weights_config(w)->vocab_size) return t; /* create's check names the shape */
    if (wtensor_slice(t, "lm_head", v0, vn, 0, t->cols, view, err) < 0) return NULL;
    return view;
}

#include "weights.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_arch.h"
#include "safetensors.h"

struct model_weights {
    model_config_t config;
    wtensor_t global[G_COUNT];
    wtensor_t *layers;  /* [n_layers + n_mtp_layers][L_COUNT] */
    wtensor_t *experts; /* [n_layers][n_experts][E_COUNT]; NULL for a dense model */
    mdir_t *dir;        /* owned when weights_open opened it */
    st_set_t *st;       /* the checkpoint, when loaded */
    void **owned;       /* buffers to free: converted scales, dummy data */
    int n_owned, cap_owned;
    float *dummy_scales; /* the dummy FP8 scale array, shared by every tensor (all one value) */
    int64_t n_dummy_scales;
    uint16_t *dummy_ones; /* the dummy norms and parameters, shared by every vector (all 1) */
    int64_t n_dummy_ones;
    float (*kv_scales)[2];  /* [n_layers + n_mtp_layers]: k, v (weights_kv_scales) */
    int n_kv_scales_loaded; /* layers whose scales the checkpoint gave */
    char note[512];         /* what loading left out (weights_note) */
};

static int own(model_weights_t *w, void *p, err_t *err) {
    if (!p) return err_set(err, "out of memory");
    if (w->n_owned == w->cap_owned) {
        int cap = w->cap_owned ? 2 * w->cap_owned : 64;
        void **owned = realloc(w->owned, cap * sizeof *owned);
        if (!owned) {
            free(p);
            return err_set(err, "out of memory");
        }
        w->owned = owned;
        w->cap_owned = cap;
    }
    w->owned[w->n_owned++] = p;
    return 0;
}

/* Decoder layers and MTP layers: every per-layer slot array. */
static int all_layers(const model_config_t *cfg) {
    return cfg->n_layers + cfg->n_mtp_layers;
}

/* Whether a layer of kinds k holds the slot: the norms always, and the slots of its attention
 * and MLP kinds (weights.h lists each kind's slots as one run). */
static bool kinds_hold(model_layer_t k, int slot) {
    if (slot == L_ATTN_NORM || slot == L_MLP_NORM) return true;
    bool attn = false, mlp = false;
    switch (k.attn) {
        case ATTN_FULL:
        case ATTN_GATED:
            attn = slot >= L_Q && slot <= L_K_NORM;
            break;
        case ATTN_LINEAR:
            attn = slot >= L_LIN_QKV && slot <= L_LIN_OUT;
            break;
    }
    switch (k.mlp) {
        case MLP_DENSE:
            mlp = slot >= L_GATE && slot <= L_DOWN;
            break;
        case MLP_MOE:
            mlp = slot == L_ROUTER;
            break;
    }
    return attn || mlp;
}

bool wspec_is_mtp(const wspec_t *s) {
    return strncmp(s->name, "mtp.", 4) == 0;
}

bool wspec_in_layer(const wspec_t *s, const model_config_t *cfg, int l) {
    bool mtp_layer = l >= cfg->n_layers;
    if (l < 0 || l >= all_layers(cfg) || wspec_is_mtp(s) != mtp_layer) return false;
    /* expert slots (eslot_t) are not lslot_t: checked before the slot test */
    if (wspec_per_expert(s)) return !mtp_layer && cfg->layer[l].mlp == MLP_MOE;
    return kinds_hold(cfg->layer[l], s->slot);
}

static model_weights_t *weights_new(const model_config_t *cfg, err_t *err) {
    model_weights_t *w = calloc(1, sizeof *w);
    if (w) w->layers = calloc((size_t)all_layers(cfg) * L_COUNT, sizeof *w->layers);
    if (w) w->kv_scales = calloc((size_t)all_layers(cfg) + 1, sizeof *w->kv_scales);
    if (w && cfg->n_experts > 0)
        w->experts =
            calloc((size_t)cfg->n_layers * (size_t)cfg->n_experts * E_COUNT, sizeof *w->experts);
    if (!w || !w->layers || !w->kv_scales || (cfg->n_experts > 0 && !w->experts)) {
        if (w) free(w->layers);
        if (w) free(w->kv_scales);
        free(w);
        err_set(err, "out of memory");
        return NULL;
    }
    w->config = *cfg;
    for (int l = 0; l < all_layers(cfg); l++)
        w->kv_scales[l][0] = w->kv_scales[l][1] = 1.0f; /* vLLM's default */
    return w;
}

void weights_destroy(model_weights_t *w) {
    if (!w) return;
    for (int i = 0; i < w->n_owned; i++)
        free(w->owned[i]);
    free(w->owned);
    free(w->layers);
    free(w->kv_scales);
    free(w->experts);
    st_close(w->st);
    mdir_close(w->dir);
    free(w);
}

static wtensor_t *expert_of(const model_weights_t *w, int layer, int expert, int slot) {
    return &w->experts[((size_t)layer * (size_t)w->config.n_experts + (size_t)expert) * E_COUNT +
                       (size_t)slot];
}

static wtensor_t *slot_of(model_weights_t *w, const wspec_t *s, int layer, int expert) {
    if (wspec_per_expert(s)) return expert_of(w, layer, expert, s->slot);
    return s->per_layer ? &w->layers[(size_t)layer * L_COUNT + s->slot] : &w->global[s->slot];
}

/* Copies of a tensor in a layer that holds it: one per expert for per-expert tensors. */
static int copies(const model_config_t *cfg, const wspec_t *s) {
    return wspec_per_expert(s) ? cfg->n_experts : 1;
}

void weights_kv_scales(const model_weights_t *w, int layer, float *k_scale, float *v_scale) {
    *k_scale = w->kv_scales[layer][0];
    *v_scale = w->kv_scales[layer][1];
}

int weights_kv_scales_loaded(const model_weights_t *w) {
    return w->n_kv_scales_loaded;
}

mdir_t *weights_dir(const model_weights_t *w) {
    return w->dir;
}

const model_config_t *weights_config(const model_weights_t *w) {
    return &w->config;
}
const char *weights_note(const model_weights_t *w) {
    return w->note;
}
const wtensor_t *weights_global(const model_weights_t *w, gslot_t slot) {
    return &w->global[slot];
}
const wtensor_t *weights_layer(const model_weights_t *w, int layer, lslot_t slot) {
    return &w->layers[(size_t)layer * L_COUNT + slot];
}
const wtensor_t *weights_expert(const model_weights_t *w, int layer, int expert, eslot_t slot) {
    return expert_of(w, layer, expert, slot);
}

uint64_t wtensor_bytes(const wtensor_t *t) {
    uint64_t n = (uint64_t)t->rows * t->cols * dtype_size(t->dtype);
    if (t->scale_inv) n += (uint64_t)t->scale_rows * t->scale_cols * sizeof(float);
    return n;
}

uint64_t weights_bytes(const model_weights_t *w) {
    uint64_t n = 0;
    for (int g = 0; g < G_COUNT; g++)
        if (!(g == G_LM_HEAD && w->config.tie_word_embeddings)) n += wtensor_bytes(&w->global[g]);
    for (int i = 0; i < all_layers(&w->config) * L_COUNT; i++)
        n += wtensor_bytes(&w->layers[i]);
    for (size_t i = 0; w->experts && i < (size_t)w->config.n_layers * w->config.n_experts * E_COUNT;
         i++)
        n += wtensor_bytes(&w->experts[i]);
    return n;
}

int weights_shards(const model_weights_t *w) {
    return w->st ? st_files(w->st) : 0;
}

void wtensor_row_f32(const wtensor_t *t, int64_t row, float *dst) {
    if (t->dummy) {
        uint64_t base = (uint64_t)t->dummy_offset + (uint64_t)row * (uint64_t)wtensor_ld(t);
        for (int64_t k = 0; k < t->cols; k++) {
            uint64_t i = base + (uint64_t)k;
            if (t->dtype == DT_F8_E4M3)
                dst[k] = dtype_e4m3_to_f32(weights_dummy_e4m3(t->dummy_seed, t->dummy_stream, i));
            else
                dst[k] = dtype_bf16_to_f32(weights_dummy_bf16(t->dummy_seed, t->dummy_stream, i));
        }
    } else {
        size_t esize = dtype_size(t->dtype);
        const unsigned char *src =
            (const unsigned char *)t->data + (size_t)row * (size_t)wtensor_ld(t) * esize;
        dtype_to_f32(t->dtype, src, dst, (size_t)t->cols);
    }
    if (!t->scale_inv) return;
    const float *scales = t->scale_inv + (row / t->block_n) * wtensor_scale_ld(t);
    for (int64_t k = 0; k < t->cols; k++)
        dst[k] *= scales[k / t->block_k];
}

/* An edge at `at` of a range in [0, n) cuts a block of `block` unless it is a multiple of it or
 * an end of the range. */
static bool cuts_block(int64_t at, int64_t n, int block) {
    return at % block != 0 && at != n;
}

int wtensor_slice(const wtensor_t *t, const char *name, int64_t row0, int64_t rows, int64_t col0,
                  int64_t cols, wtensor_t *out, err_t *err) {
    if (row0 < 0 || rows < 1 || row0 + rows > t->rows || col0 < 0 || cols < 1 ||
        col0 + cols > t->cols)
        return err_set(err,
                       "%s: rows [%" PRId64 ", %" PRId64 ") columns [%" PRId64 ", %" PRId64
                       ") outside [%" PRId64 ", %" PRId64 "]",
                       name, row0, row0 + rows, col0, col0 + cols, t->rows, t->cols);
    const struct {
        const char *unit;
        int64_t at, n, len;
        int block;
    } dim[2] = {{"row", row0, rows, t->rows, t->block_n},
                {"column", col0, cols, t->cols, t->block_k}};
    for (int d = 0; t->dtype == DT_F8_E4M3 && t->scale_inv && d < 2; d++)
        if (cuts_block(dim[d].at, dim[d].len, dim[d].block) ||
            cuts_block(dim[d].at + dim[d].n, dim[d].len, dim[d].block))
            return err_set(err,
                           "%s: a shard of %ss [%" PRId64 ", %" PRId64 ") of %" PRId64
                           " splits a %d-%s FP8 scale block (each shard must start and end on a "
                           "multiple of %d: %" PRId64 " %ss per shard is not one)",
                           name, dim[d].unit, dim[d].at, dim[d].at + dim[d].n, dim[d].len,
                           dim[d].block, dim[d].unit, dim[d].block, dim[d].n, dim[d].unit);
    int64_t ld = wtensor_ld(t);
    *out = *t;
    out->rows = rows;
    out->cols = cols;
    out->ld = ld;
    out->dummy_offset = t->dummy_offset + row0 * ld + col0;
    if (t->data)
        out->data =
            (const unsigned char *)t->data + (size_t)(row0 * ld + col0) * dtype_size(t->dtype);
    if (t->scale_inv) {
        out->scale_ld = wtensor_scale_ld(t);
        out->scale_inv = t->scale_inv + (row0 / t->block_n) * out->scale_ld + col0 / t->block_k;
        out->scale_rows = (rows + t->block_n - 1) / t->block_n;
        out->scale_cols = (cols + t->block_k - 1) / t->block_k;
    }
    return 0;
}

int load_format_parse(const char *name) {
    if (!strcmp(name, "auto")) return LOAD_AUTO;
    if (!strcmp(name, "safetensors")) return LOAD_SAFETENSORS;
    if (!strcmp(name, "dummy")) return LOAD_DUMMY;
    return -1;
}

// ---------------------------------------------------------------------------------------------
// Binding a checkpoint

static void shape_str(const st_tensor_t *t, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < t->ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
}

/* Where a tensor is, for messages: "DIR/shard.safetensors: tensor 'name'". */
#define WHERE(t) mdir_path(dir), (t)->file, (t)->name

static int check_shape(mdir_t *dir, const model_config_t *cfg, const wspec_t *s,
                       const st_tensor_t *t, err_t *err) {
    int64_t rows = model_dim(cfg, s->rows), cols = model_dim(cfg, s->cols);
    bool ok = s->rows == WD_ONE ? (t->ndim == 1 && t->shape[0] == cols)
              : s->kind == WK_CONV
                  ? (t->ndim == 3 && t->shape[0] == rows && t->shape[1] == 1 && t->shape[2] == cols)
                  : (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols);
    if (ok) return 0;
    char have[128], rdim[128], cdim[128];
    shape_str(t, have, sizeof have);
    model_dim_explain(cfg, s->rows, rdim, sizeof rdim);
    model_dim_explain(cfg, s->cols, cdim, sizeof cdim);
    if (s->rows == WD_ONE)
        return err_set(err, "%s/%s: tensor '%s' has shape %s but config.json implies [%lld] (%s)",
                       WHERE(t), have, (long long)cols, cdim);
    if (s->kind == WK_CONV)
        return err_set(err,
                       "%s/%s: tensor '%s' has shape %s but config.json implies [%lld, 1, %lld] "
                       "(%s; %s)",
                       WHERE(t), have, (long long)rows, (long long)cols, rdim, cdim);
    return err_set(err,
                   "%s/%s: tensor '%s' has shape %s but config.json implies [%lld, %lld] (%s; %s)",
                   WHERE(t), have, (long long)rows, (long long)cols, rdim, cdim);
}

static int bind_scale(model_weights_t *w, mdir_t *dir, const st_tensor_t *t, const st_tensor_t *sc,
                      wtensor_t *out, err_t *err) {
    const model_config_t *cfg = &w->config;
    int bn = cfg->fp8_block_n, bk = cfg->fp8_block_k;
    int64_t srows = (t->shape[0] + bn - 1) / bn, scols = (t->shape[1] + bk - 1) / bk;
    if (sc->dtype != DT_F32 && sc->dtype != DT_BF16 && sc->dtype != DT_F16)
        return err_set(err, "%s/%s: tensor '%s' has dtype %s; FP8 scales must be F32, BF16 or F16",
                       WHERE(sc), dtype_name(sc->dtype));
    if (sc->ndim != 2 || sc->shape[0] != srows || sc->shape[1] != scols) {
        char have[128];
        shape_str(sc, have, sizeof have);
        return err_set(err,
                       "%s/%s: tensor '%s' has shape %s but a [%lld, %lld] weight with %dx%d "
                       "blocks needs [%lld, %lld]",
                       WHERE(sc), have, (long long)t->shape[0], (long long)t->shape[1], bn, bk,
                       (long long)srows, (long long)scols);
    }
    float *scales = malloc((size_t)(srows * scols) * sizeof *scales);
    if (own(w, scales, err) < 0) return -1;
    dtype_to_f32(sc->dtype, sc->data, scales, (size_t)(srows * scols));
    for (int64_t i = 0; i < srows * scols; i++)
        if (!isfinite(scales[i]) || scales[i] < 0)
            return err_set(err, "%s/%s: tensor '%s' holds a negative or non-finite scale at %lld",
                           WHERE(sc), (long long)i);
    out->scale_inv = scales;
    out->scale_rows = srows;
    out->scale_cols = scols;
    out->block_n = bn;
    out->block_k = bk;
    return 0;
}

/* A projection: the kinds that may be block FP8. */
static bool is_linear(wkind_t k) {
    return k == WK_LINEAR || k == WK_LM_HEAD || k == WK_LINEAR_BF16 || k == WK_EXPERT;
}

/* The checkpoint name of tensor s of layer `layer` (its base, without ".weight"), expert
 * `expert` for a per-expert one. */
static void tensor_base(const model_config_t *cfg, const wspec_t *s, int layer, int expert,
                        char *buf, size_t size) {
    if (wspec_per_expert(s))
        snprintf(buf, size, s->name, layer, expert);
    else
        snprintf(buf, size, s->name, wspec_is_mtp(s) ? layer - cfg->n_layers : layer);
}

/* The checkpoint tensors bound so far (weights and scales), for note_unused. */
typedef struct bound {
    const void **t;
    int n;
} bound_t;

static int bind_one(model_weights_t *w, mdir_t *dir, const wspec_t *s, int layer, int expert,
                    bound_t *b, err_t *err) {
    const model_config_t *cfg = &w->config;
    char base[256], name[300];
    tensor_base(cfg, s, layer, expert, base, sizeof base);
    snprintf(name, sizeof name, s->kind == WK_PARAM ? "%s" : "%s.weight", base);
    const st_tensor_t *t = st_find(w->st, name);
    if (!t) {
        const char *ckpt = mdir_has(dir, "model.safetensors.index.json")
                               ? "model.safetensors.index.json"
                               : "model.safetensors";
        if (wspec_per_expert(s))
            return err_set(err,
                           "%s/%s: missing tensor '%s' (config.json has %d experts in layer %d)",
                           mdir_path(dir), ckpt, name, cfg->n_experts, layer);
        if (s->per_layer)
            return err_set(err, "%s/%s: missing tensor '%s' (config.json has %d layers)",
                           mdir_path(dir), ckpt, name, cfg->n_layers);
        return err_set(err, "%s/%s: missing tensor '%s'", mdir_path(dir), ckpt, name);
    }
    if (t->dtype == DT_F8_E4M3 && s->kind == WK_ROUTER)
        return err_set(err,
                       "%s/%s: tensor '%s' is F8_E4M3 but the MoE router stays unquantized "
                       "(BF16, F16 or F32)",
                       WHERE(t));
    if (check_shape(dir, cfg, s, t, err) < 0) return -1;
    b->t[b->n++] = t;

    wtensor_t *out = slot_of(w, s, layer, expert);
    *out = (wtensor_t){.dtype = t->dtype,
                       .rows = t->ndim >= 2 ? t->shape[0] : 1,
                       .cols = t->shape[t->ndim - 1],
                       .data = t->data};
    char scale_name[320];
    snprintf(scale_name, sizeof scale_name, "%s.weight_scale_inv", base);
    const st_tensor_t *sc = st_find(w->st, scale_name);
    if (t->dtype == DT_F8_E4M3) {
        if (!is_linear(s->kind))
            return err_set(err, "%s/%s: tensor '%s' is F8_E4M3 but only projections can be FP8",
                           WHERE(t));
        if (!cfg->fp8)
            return err_set(err,
                           "%s/%s: tensor '%s' is F8_E4M3 but config.json has no fp8 "
                           "quantization_config",
                           WHERE(t));
        if (!sc)
            return err_set(err, "%s/%s: tensor '%s' is F8_E4M3 but '%s' is missing", WHERE(t),
                           scale_name);
        b->t[b->n++] = sc;
        return bind_scale(w, dir, t, sc, out, err);
    }
    if (t->dtype != DT_BF16 && t->dtype != DT_F16 && t->dtype != DT_F32)
        return err_set(err, "%s/%s: tensor '%s' has dtype %s; expected BF16, F16, F32%s", WHERE(t),
                       dtype_name(t->dtype), is_linear(s->kind) ? " or F8_E4M3" : "");
    if (sc)
        return err_set(err, "%s/%s: tensor '%s' has a weight_scale_inv but dtype %s (not F8_E4M3)",
                       WHERE(t), dtype_name(t->dtype));
    return 0;
}

/* Whether tensor s is bound for layer l (0 for a model-wide tensor). */
static bool wanted(const model_config_t *cfg, const wspec_t *s, int l) {
    if (s->kind == WK_LM_HEAD && cfg->tie_word_embeddings) return false;
    if (!s->per_layer) return !wspec_is_mtp(s) || cfg->n_mtp_layers > 0;
    return wspec_in_layer(s, cfg, l);
}

/* MTP tensors are optional as a whole: a checkpoint without the first one (transformers'
 * save_pretrained drops them) has no MTP layers. */
static void check_mtp(model_weights_t *w) {
    model_config_t *cfg = &w->config;
    const model_arch_t *a = cfg->arch;
    for (int i = 0; i < a->n_tensors && cfg->n_mtp_layers > 0; i++) {
        const wspec_t *s = &a->tensors[i];
        if (!wspec_is_mtp(s)) continue;
        char base[256], name[300];
        tensor_base(cfg, s, cfg->n_layers, 0, base, sizeof base);
        snprintf(name, sizeof name, "%s.weight", base);
        if (st_find(w->st, name)) return;
        snprintf(w->note + strlen(w->note), sizeof w->note - strlen(w->note),
                 "%sconfig.json has %d MTP layer%s but the checkpoint no '%s': MTP is not loaded",
                 w->note[0] ? "; " : "", cfg->n_mtp_layers, cfg->n_mtp_layers == 1 ? "" : "s",
                 name);
        cfg->n_mtp_layers = 0;
        return;
    }
}

/* One KV cache scale: one value (shape [] or [1]) or one per KV head, whose largest serves
 * (the cache is quantized per tensor here: a larger scale only costs the smaller heads some
 * precision, never a clipped value). */
static int read_kv_scale(mdir_t *dir, const model_config_t *cfg, const st_tensor_t *t, float *out,
                         err_t *err) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    if (t->dtype != DT_F32 && t->dtype != DT_BF16 && t->dtype != DT_F16)
        return err_set(err,
                       "%s/%s: tensor '%s' has dtype %s; a KV cache scale must be F32, BF16 "
                       "or F16",
                       WHERE(t), dtype_name(t->dtype));
    if (t->ndim > 1 || (n != 1 && n != cfg->n_kv_heads)) {
        char have[128];
        shape_str(t, have, sizeof have);
        return err_set(err,
                       "%s/%s: tensor '%s' has shape %s; a KV cache scale is one value or one per "
                       "KV head (%d)",
                       WHERE(t), have, cfg->n_kv_heads);
    }
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return err_set(err, "out of memory");
    dtype_to_f32(t->dtype, t->data, v, (size_t)n);
    *out = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(v[i]) || !(v[i] > 0.0f)) {
            err_set(err,
                    "%s/%s: tensor '%s' holds %g; a KV cache scale must be positive and finite",
                    WHERE(t), (double)v[i]);
            free(v);
            return -1;
        }
        *out = v[i] > *out ? v[i] : *out;
    }
    free(v);
    return 0;
}

/* The FP8 KV cache scales of each attention layer, under any of the names vLLM reads
 * (maybe_remap_kv_scale_name and the quantization configs' get_cache_scale):
 * ATTN.k_scale / v_scale (compressed-tensors), ATTN.attn.k_scale (vLLM's own),
 * ATTN.k_proj.k_scale / v_proj.v_scale (ModelOpt), ATTN.k_proj.output_scale (Quark,
 * compressed-tensors' output activations), and the deprecated ATTN.kv_scale for both. ATTN is
 * the layer's k_proj name without ".k_proj". */
static int bind_kv_scales(model_weights_t *w, mdir_t *dir, bound_t *b, err_t *err) {
    const model_config_t *cfg = &w->config;
    const model_arch_t *a = cfg->arch;
    for (int l = 0; l < all_layers(cfg); l++) {
        const wspec_t *ks = NULL;
        for (int i = 0; i < a->n_tensors && !ks; i++)
            if (a->tensors[i].per_layer && a->tensors[i].slot == L_K &&
                wspec_in_layer(&a->tensors[i], cfg, l))
                ks = &a->tensors[i];
        if (!ks) continue; /* no attention with a KV cache */
        char attn[256];
        tensor_base(cfg, ks, l, 0, attn, sizeof attn);
        char *cut = strstr(attn, ".k_proj");
        if (!cut || cut[7]) continue;
        *cut = '\0';
        static const char *const pattern[2][5] = {
            {"%s.k_scale", "%s.attn.k_scale", "%s.k_proj.k_scale", "%s.k_proj.output_scale",
             "%s.kv_scale"},
            {"%s.v_scale", "%s.attn.v_scale", "%s.v_proj.v_scale", "%s.v_proj.output_scale",
             "%s.kv_scale"}};
        const st_tensor_t *found = NULL;
        for (int kv = 0; kv < 2; kv++)
            for (int p = 0; p < 5; p++) {
                char name[320];
                snprintf(name, sizeof name, pattern[kv][p], attn);
                const st_tensor_t *t = st_find(w->st, name);
                if (!t) continue;
                if (read_kv_scale(dir, cfg, t, &w->kv_scales[l][kv], err) < 0) return -1;
                if (t != found) b->t[b->n++] = t; /* kv_scale serves both: bound once */
                found = t;
                break;
            }
        w->n_kv_scales_loaded += found != NULL;
    }
    size_t n = strlen(w->note);
    if (w->n_kv_scales_loaded && n < sizeof w->note)
        snprintf(w->note + n, sizeof w->note - n,
                 "%sFP8 KV cache scales for %d layer%s (used with --kv-cache-dtype fp8)",
                 n ? "; " : "", w->n_kv_scales_loaded, w->n_kv_scales_loaded == 1 ? "" : "s");
    return 0;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
    return x < y ? -1 : x > y;
}

/* Notes the checkpoint's tensors nothing bound: a vision tower (text-only serving) or others. */
static void note_unused(model_weights_t *w, const bound_t *b) {
    const void **bound = b->t;
    size_t n_bound = (size_t)b->n;
    qsort(bound, n_bound, sizeof *bound, cmp_ptr);
    int vision = 0, other = 0;
    const char *first = NULL;
    for (int i = 0; i < st_count(w->st); i++) {
        const st_tensor_t *t = st_at(w->st, i);
        if (bsearch(&t, bound, n_bound, sizeof *bound, cmp_ptr)) continue;
        if (!strncmp(t->name, "model.visual.", 13) || !strncmp(t->name, "visual.", 7)) {
            vision++;
        } else if (other++ == 0) {
            first = t->name;
        }
    }
    size_t n = strlen(w->note);
    if (vision)
        n += (size_t)snprintf(w->note + n, sizeof w->note - n,
                              "%sthe vision tower (%d tensors under model.visual.) is not loaded: "
                              "text-only serving, as vLLM's --language-model-only",
                              n ? "; " : "", vision);
    if (other && n < sizeof w->note)
        snprintf(w->note + n, sizeof w->note - n, "%s%d checkpoint tensor%s not used (first: %s)",
                 n ? "; " : "", other, other == 1 ? " is" : "s are", first);
}

int weights_load(mdir_t *dir, const model_config_t *cfg, model_weights_t **out, err_t *err) {
    *out = NULL;
    model_weights_t *w = weights_new(cfg, err);
    if (!w) return -1;
    bound_t b = {NULL, 0};
    if (st_open(dir, &w->st, err) < 0) goto fail;
    if (!(b.t = malloc(((size_t)st_count(w->st) + 1) * sizeof *b.t))) {
        err_set(err, "out of memory");
        goto fail;
    }
    check_mtp(w);
    cfg = &w->config;
    const model_arch_t *a = cfg->arch;
    for (int i = 0; i < a->n_tensors; i++) {
        const wspec_t *s = &a->tensors[i];
        for (int l = 0; l < (s->per_layer ? all_layers(cfg) : 1); l++)
            for (int e = 0; e < (wanted(cfg, s, l) ? copies(cfg, s) : 0); e++)
                if (bind_one(w, dir, s, l, e, &b, err) < 0) goto fail;
    }
    if (cfg->tie_word_embeddings) w->global[G_LM_HEAD] = w->global[G_EMBED];
    if (bind_kv_scales(w, dir, &b, err) < 0) goto fail;
    note_unused(w, &b);
    free(b.t);
    *out = w;
    return 0;
fail:
    free(b.t);
    weights_destroy(w);
    return -1;
}

// ---------------------------------------------------------------------------------------------
// Dummy weights

/* Norm vectors and parameters are made eagerly even when lazy: they are tiny and every backend
 * reads them on the host. Both are 1 (A_log 1 and dt_bias 1 decay the Gated DeltaNet's state
 * by about e^-3.5 a token: finite for any length). */
static int make_dummy(model_weights_t *w, const wspec_t *s, uint64_t stream, uint64_t seed,
                      bool lazy, wtensor_t *out, err_t *err) {
    const model_config_t *cfg = &w->config;
    int64_t rows = model_dim(cfg, s->rows), cols = model_dim(cfg, s->cols);
    size_t n = (size_t)(rows * cols);
    /* Real -FP8 checkpoints keep lm_head in BF16 (HF always skips it when quantizing). */
    bool fp8 = cfg->fp8 && (s->kind == WK_LINEAR || s->kind == WK_EXPERT);
    *out = (wtensor_t){.dtype = fp8 ? DT_F8_E4M3 : DT_BF16, .rows = rows, .cols = cols};
    if (fp8) {
        /* Every block's amax is (about) the half width, so one scale fits all blocks. */
        out->block_n = cfg->fp8_block_n;
        out->block_k = cfg->fp8_block_k;
        out->scale_rows = (rows + out->block_n - 1) / out->block_n;
        out->scale_cols = (cols + out->block_k - 1) / out->block_k;
        int64_t n_scales = out->scale_rows * out->scale_cols;
        if (n_scales > w->n_dummy_scales) {
            /* one array serves every tensor (a 235B MoE has 36k expert tensors) */
            float *scales = malloc((size_t)n_scales * sizeof *scales);
            if (own(w, scales, err) < 0) return -1;
            for (int64_t i = 0; i < n_scales; i++)
                scales[i] = WEIGHTS_DUMMY_FP8_SCALE;
            w->dummy_scales = scales;
            w->n_dummy_scales = n_scales;
        }
        out->scale_inv = w->dummy_scales;
    }
    bool vector = s->kind == WK_VECTOR || s->kind == WK_PARAM;
    if (lazy && !vector) {
        out->dummy = true;
        out->dummy_seed = seed;
        out->dummy_stream = stream;
        return 0;
    }
    if (vector) { /* one array of ones serves every vector (a config of 255 layers of 2^20-wide
                     norms would otherwise take GBs of them) */
        if ((int64_t)n > w->n_dummy_ones) {
            uint16_t *ones = malloc(n * sizeof *ones);
            if (own(w, ones, err) < 0) return -1;
            for (size_t i = 0; i < n; i++)
                ones[i] = dtype_f32_to_bf16(1.0f);
            w->dummy_ones = ones;
            w->n_dummy_ones = (int64_t)n;
        }
        out->data = w->dummy_ones;
        return 0;
    }
    void *data = malloc(n * dtype_size(out->dtype));
    if (own(w, data, err) < 0) return -1;
    out->data = data;
    if (fp8) {
        weights_dummy_fill_e4m3(seed, stream, n, data);
    } else {
        weights_dummy_fill_bf16(seed, stream, n, data);
    }
    return 0;
}

static int dummy(const model_config_t *cfg, uint64_t seed, bool lazy, model_weights_t **out,
                 err_t *err) {
    *out = NULL;
    model_weights_t *w = weights_new(cfg, err);
    if (!w) return -1;
    const model_arch_t *a = cfg->arch;
    for (int i = 0; i < a->n_tensors; i++) {
        const wspec_t *s = &a->tensors[i];
        for (int l = 0; l < (s->per_layer ? all_layers(cfg) : 1); l++)
            for (int e = 0; e < (wanted(cfg, s, l) ? copies(cfg, s) : 0); e++) {
                /* layers < 256 (MODEL_MAX_LAYERS) in the low byte, the expert above it */
                uint64_t stream = (uint64_t)i << 32 | (uint64_t)e << 8 | (uint64_t)l;
                if (make_dummy(w, s, stream, seed, lazy, slot_of(w, s, l, e), err) < 0) {
                    weights_destroy(w);
                    return -1;
                }
            }
    }
    if (cfg->tie_word_embeddings) w->global[G_LM_HEAD] = w->global[G_EMBED];
    *out = w;
    return 0;
}

int weights_dummy_lazy(const model_config_t *cfg, uint64_t seed, model_weights_t **out,
                       err_t *err) {
    return dummy(cfg, seed, true, out, err);
}

int weights_dummy(const model_config_t *cfg, uint64_t seed, model_weights_t **out, err_t *err) {
    return dummy(cfg, seed, false, out, err);
}

// ---------------------------------------------------------------------------------------------
// Opening a model as the command line names it

/* The config src names and its directory (NULL for a preset; the caller closes it). */
static int open_source(const model_source_t *src, model_config_t *cfg, mdir_t **dir, err_t *err) {
    *dir = NULL;
    if (src->format == LOAD_DUMMY &&
        model_config_preset(src->model, src->dummy_fp8, cfg, NULL) == 0)
        return 0;
    if (mdir_open(src->model, dir, err) < 0) {
        if (src->format == LOAD_DUMMY) {
            char list[256] = "";
            for (const char *const *p = model_preset_names(); *p; p++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                         p == model_preset_names() ? "" : ", ", *p);
            err_prefix(err, "not a preset (%s) nor a model directory", list);
        }
        return -1;
    }
    if (model_config_load(*dir, cfg, err) < 0) {
        mdir_close(*dir);
        *dir = NULL;
        return -1;
    }
    if (src->format == LOAD_DUMMY && src->dummy_fp8 && !cfg->fp8) {
        cfg->fp8 = true;
        cfg->fp8_block_n = cfg->fp8_block_k = 128;
    }
    return 0;
}

int weights_source_config(const model_source_t *src, model_config_t *cfg, err_t *err) {
    mdir_t *dir;
    if (open_source(src, cfg, &dir, err) < 0) return -1;
    mdir_close(dir);
    return 0;
}

uint64_t weights_dummy_bytes(const model_config_t *cfg) {
    const model_arch_t *a = cfg->arch;
    uint64_t n = 0;
    for (int i = 0; i < a->n_tensors; i++) {
        const wspec_t *s = &a->tensors[i];
        if (s->kind == WK_LM_HEAD && cfg->tie_word_embeddings) continue;
        uint64_t size = (uint64_t)(model_dim(cfg, s->rows) * model_dim(cfg, s->cols));
        size *= cfg->fp8 && (s->kind == WK_LINEAR || s->kind == WK_EXPERT) ? 1 : 2;
        for (int l = 0; l < (s->per_layer ? all_layers(cfg) : 1); l++)
            if (wanted(cfg, s, l)) n += size * (uint64_t)copies(cfg, s);
    }
    return n;
}

/* Memory the host can give now (MemAvailable), bytes; 0 when unknown. */
static uint64_t host_available(void) {
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

int weights_open(const model_source_t *src, model_weights_t **out, err_t *err) {
    *out = NULL;
    model_config_t cfg;
    mdir_t *dir;
    if (open_source(src, &cfg, &dir, err) < 0) return -1;
    int rc;
    if (src->format == LOAD_DUMMY) {
        /* values made where they are read when a host copy would not fit */
        uint64_t avail = host_available();
        bool lazy = src->lazy_dummy || (avail && weights_dummy_bytes(&cfg) > avail / 10 * 9);
        rc = dummy(&cfg, src->seed, lazy, out, err);
    } else {
        rc = weights_load(dir, &cfg, out, err);
    }
    if (rc < 0) {
        mdir_close(dir);
        return -1;
    }
    (*out)->dir = dir;
    return 0;
}

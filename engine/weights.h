/*
 * weights: the tensors of a model bound to its layers, from a checkpoint or made up (dummy).
 *
 * Binding is table-driven: each architecture (engine/arch/) lists the tensors it needs (name
 * pattern, slot, shape in terms of the config, kind); the binder finds each one in the safetensors
 * set, checks dtype and shape and records where its bytes are. A Linear is block-FP8 when its
 * `.weight` is F8_E4M3 and `.weight_scale_inv` exists ([ceil(N/128), ceil(K/128)] in F32, BF16 or
 * F16, converted to f32 at load; the only copy the loader makes). Weight data is never copied: it
 * points into the mmapped files, or into buffers that weights_dummy() fills with seeded random
 * values.
 *
 *     model_weights_t *w;
 *     if (weights_load(dir, &cfg, &w, &err) < 0) ...
 *     const wtensor_t *wq = weights_layer(w, 3, L_Q);   // [n_heads*head_dim, hidden]
 *     weights_destroy(w);
 */
#ifndef TACHYON_WEIGHTS_H
#define TACHYON_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"
#include "mdir.h"
#include "model.h"

/* Model-wide tensors. */
typedef enum gslot {
    G_EMBED,      /* [V, H] */
    G_FINAL_NORM, /* [H] */
    G_LM_HEAD,    /* [V, H]; the embedding itself when tie_word_embeddings */
    /* the MTP head (Qwen3.5, models.md 4.8), when the model has MTP layers */
    G_MTP_FC,          /* [H, 2H] fc over concat(embedding, hidden) */
    G_MTP_EMBED_NORM,  /* [H] pre_fc_norm_embedding */
    G_MTP_HIDDEN_NORM, /* [H] pre_fc_norm_hidden */
    G_MTP_NORM,        /* [H] norm of the MTP layers' output */
    G_COUNT
} gslot_t;

/* Per-layer tensors, by role. A layer holds the slots of its layer kinds (model_layer_t): the
 * two norms of every layer, then those of ATTN_FULL / ATTN_GATED (q..k_norm), of ATTN_LINEAR
 * (lin_qkv..lin_out), of MLP_DENSE (gate..down) and of MLP_MOE (the router; its experts are
 * eslot_t). An architecture with new kinds adds their slots here. */
typedef enum lslot {
    L_ATTN_NORM, /* [H] input_layernorm */
    L_Q,         /* [nH*D, H] */
    L_K,         /* [nKV*D, H] */
    L_V,         /* [nKV*D, H] */
    L_O,         /* [H, nH*D] */
    L_Q_NORM,    /* [D] */
    L_K_NORM,    /* [D] */
    L_MLP_NORM,  /* [H] post_attention_layernorm */
    L_GATE,      /* [I, H] */
    L_UP,        /* [I, H] */
    L_DOWN,      /* [H, I] */
    /* ATTN_LINEAR (Gated DeltaNet; Hk key heads of dk, Hv value heads of dv, conv kernel K) */
    L_LIN_QKV,     /* [2*Hk*dk + Hv*dv, H] in_proj_qkv: q | k | v rows */
    L_LIN_Z,       /* [Hv*dv, H] in_proj_z: the output gate */
    L_LIN_B,       /* [Hv, H] in_proj_b: beta = sigmoid(x Wb^T) */
    L_LIN_A,       /* [Hv, H] in_proj_a: the decay's input */
    L_LIN_CONV,    /* [2*Hk*dk + Hv*dv, K] conv1d (stored [C, 1, K]) */
    L_LIN_A_LOG,   /* [Hv] A_log */
    L_LIN_DT_BIAS, /* [Hv] dt_bias */
    L_LIN_NORM,    /* [dv] the gated RMSNorm's weight (plain w, not 1 + w) */
    L_LIN_OUT,     /* [H, Hv*dv] out_proj */
    /* MLP_MOE */
    L_ROUTER, /* [E, H] mlp.gate: never quantized */
    L_COUNT
} lslot_t;

/* The tensors of one expert of an MLP_MOE layer (I = moe_intermediate_size). Each expert is a
 * tensor of its own, addressed by (layer, expert): a rank holding some experts binds only
 * those. */
typedef enum eslot {
    E_GATE, /* [I, H] */
    E_UP,   /* [I, H] */
    E_DOWN, /* [H, I] */
    E_COUNT
} eslot_t;

/* One weight. A vector has rows = 1. Row-major [rows, cols], rows = output features. */
typedef struct wtensor {
    dtype_t dtype; /* BF16, F16, F32 or F8_E4M3 */
    int64_t rows, cols;
    const void *data;
    /* block-FP8 only: W[n][k] = e4m3(data[n][k]) * scale_inv[n / block_n][k / block_k] */
    const float *scale_inv; /* [scale_rows, scale_cols] f32 */
    int64_t scale_rows, scale_cols;
    int block_n, block_k;
    /* Lazy dummy weights (model_source_t.lazy_dummy): data is NULL and element i (row-major) is
     * weights_dummy_bf16 / weights_dummy_e4m3 (dtype) of (dummy_seed, dummy_stream, i); norm
     * vectors are all 1. False for real data and for eager dummy weights. */
    bool dummy;
    uint64_t dummy_seed, dummy_stream;
    /* A view of part of a larger tensor (wtensor_slice: a tensor-parallel shard): row r starts
     * ld elements after row r - 1 (0: cols), scale row s scale_ld scales after s - 1 (0:
     * scale_cols), and a lazy dummy element (r, k) is element dummy_offset + r * ld + k of the
     * whole tensor. Zero for a whole tensor. */
    int64_t ld, scale_ld, dummy_offset;
} wtensor_t;

/* Elements from one row to the next in data, and scales from one scale row to the next. */
static inline int64_t wtensor_ld(const wtensor_t *t) {
    return t->ld ? t->ld : t->cols;
}
static inline int64_t wtensor_scale_ld(const wtensor_t *t) {
    return t->scale_ld ? t->scale_ld : t->scale_cols;
}

/* A view of rows [row0, row0 + rows) and columns [col0, col0 + cols) of t (which may itself be
 * a view): no data is copied. A block-FP8 tensor's view must not split one of its scale blocks:
 * each edge of the view is a multiple of block_n (rows) or block_k (columns), or an edge of t;
 * otherwise it fails with a message naming `name`, the range and the block (vLLM refuses such
 * tensor-parallel shards the same way). */
int wtensor_slice(const wtensor_t *t, const char *name, int64_t row0, int64_t rows, int64_t col0,
                  int64_t cols, wtensor_t *out, err_t *err);

typedef struct model_weights model_weights_t;

/* Binds the checkpoint of `dir` to `cfg`'s architecture. Fails naming the file and tensor for a
 * missing tensor, a dtype or shape that does not match the config, or bad scales. MTP tensors
 * are optional as a whole (without mtp.fc the model has no MTP layers: n_mtp_layers becomes
 * 0, with a note). `dir` must outlive the weights. The caller owns *out. */
int weights_load(mdir_t *dir, const model_config_t *cfg, model_weights_t **out, err_t *err);

/* Random weights for any config: norms are 1, other tensors uniform with the std of HF's
 * initializer (0.02), stored in BF16, or (projections other than lm_head, as in real -FP8
 * checkpoints) block FP8 with F32 scales when cfg->fp8. Values depend
 * only on (seed, tensor, element), not on the thread count, so any backend can regenerate them.
 * The caller owns *out. */
int weights_dummy(const model_config_t *cfg, uint64_t seed, model_weights_t **out, err_t *err);

/* The same weights with no host copy: every tensor has its shape, dtype and (FP8) scales, but
 * data is NULL and `dummy` set, for a backend that generates the values where it runs them
 * (the cuda backend, on the device). Takes no time and no memory for any model size. */
int weights_dummy_lazy(const model_config_t *cfg, uint64_t seed, model_weights_t **out, err_t *err);

/* The dummy scheme, for backends that regenerate it: with u = rng_uniform(seed, stream, i),
 * x = (2u - 1) * WEIGHTS_DUMMY_HALF_WIDTH in f32; BF16 tensors hold bf16(x), FP8 ones
 * e4m3(x / WEIGHTS_DUMMY_FP8_SCALE) with every block's scale_inv = WEIGHTS_DUMMY_FP8_SCALE. */
#define WEIGHTS_DUMMY_HALF_WIDTH (0.02f * 1.7320508075688772f) /* std 0.02 (HF's init) */
#define WEIGHTS_DUMMY_FP8_SCALE  (WEIGHTS_DUMMY_HALF_WIDTH / 448.0f)
uint16_t weights_dummy_bf16(uint64_t seed, uint64_t stream, uint64_t i);
uint8_t weights_dummy_e4m3(uint64_t seed, uint64_t stream, uint64_t i);
/* Elements [0, n) of a stream into dst, the values of the two above (weights_dummy.c: the
 * stream's hash taken once, and no sanitizer checks in the sanitizer build). */
void weights_dummy_fill_bf16(uint64_t seed, uint64_t stream, size_t n, uint16_t *dst);
void weights_dummy_fill_e4m3(uint64_t seed, uint64_t stream, size_t n, uint8_t *dst);

/* How a model is chosen on the command line. */
typedef enum load_format {
    LOAD_AUTO,        /* safetensors from the directory */
    LOAD_SAFETENSORS, /* the same, explicitly */
    LOAD_DUMMY,       /* random weights with the model's shapes */
} load_format_t;

typedef struct model_source {
    const char *model; /* a directory, MDIR_EMBEDDED, or with LOAD_DUMMY a preset name */
    load_format_t format;
    bool dummy_fp8;  /* LOAD_DUMMY: block-FP8 weights (else BF16); also forced by an
                        fp8 quantization_config in a config.json */
    uint64_t seed;   /* LOAD_DUMMY */
    bool lazy_dummy; /* LOAD_DUMMY: weights_dummy_lazy (the backend makes the values) */
} model_source_t;

/* Parses "auto" / "safetensors" / "dummy"; -1 for anything else. */
int load_format_parse(const char *name);

/* Opens a model as the command line names it: a directory (or the embedded model) read from
 * its checkpoint, or with LOAD_DUMMY a preset or a directory's config.json with random
 * weights (lazy ones, even without lazy_dummy, when a host copy would take more than 90% of
 * the memory the host has available: the CPU backend then generates values as it reads them).
 * The weights own the directory mapping. The caller owns *out. */
int weights_open(const model_source_t *src, model_weights_t **out, err_t *err);

/* The config weights_open would open for src, without its tensors. */
int weights_source_config(const model_source_t *src, model_config_t *cfg, err_t *err);

/* Bytes of eager dummy weights for cfg (BF16, FP8 projections when cfg->fp8; scales aside). */
uint64_t weights_dummy_bytes(const model_config_t *cfg);

void weights_destroy(model_weights_t *w);

const model_config_t *weights_config(const model_weights_t *w);

/* What loading left out, for the log: "" or e.g. "the vision tower (12 tensors under
 * model.visual.) is not loaded: text-only serving, as vLLM's --language-model-only". */
const char *weights_note(const model_weights_t *w);

/* The FP8 KV cache scales of layer `layer` (decoder layers, then MTP layers), as vLLM takes
 * them: per tensor, stored = e4m3(x / scale), read back as e4m3 * scale; from the checkpoint
 * when it has them (k_scale / v_scale under the names vLLM reads, or the deprecated kv_scale
 * for both; one per KV head: the largest), 1.0 otherwise (vLLM's default) and for layers
 * without a KV cache. A BF16 cache ignores them. */
void weights_kv_scales(const model_weights_t *w, int layer, float *k_scale, float *v_scale);
/* How many layers' KV scales came from the checkpoint (0: every scale is 1.0). */
int weights_kv_scales_loaded(const model_weights_t *w);

/* The model directory weights_open() opened (for tokenizer.json and generation_config.json),
 * or NULL for a preset. */
mdir_t *weights_dir(const model_weights_t *w);
const wtensor_t *weights_global(const model_weights_t *w, gslot_t slot);
/* layer: a decoder layer, or n_layers + i for MTP layer i. */
const wtensor_t *weights_layer(const model_weights_t *w, int layer, lslot_t slot);
/* Expert `expert` of layer `layer` (an MLP_MOE layer; other layers' experts are empty). */
const wtensor_t *weights_expert(const model_weights_t *w, int layer, int expert, eslot_t slot);

/* Bytes of weight data (what a GPU copy would take), scales included. */
uint64_t weights_bytes(const model_weights_t *w);
/* One tensor's bytes as stored (its scales included), as weights_bytes counts them. */
uint64_t wtensor_bytes(const wtensor_t *t);
/* The safetensors files the weights come from (0: embedded, a preset, dummy). */
int weights_shards(const model_weights_t *w);

/* Dequantizes row `row` of a weight to f32: dst[cols]. Exact for BF16/F16/F32; FP8 rows are
 * multiplied by their block's scale_inv. Lazy dummy tensors are generated on the fly. */
void wtensor_row_f32(const wtensor_t *t, int64_t row, float *dst);

#endif

#include "cpu_weights.h"

#include <inttypes.h>
#include <stdio.h>

#include "cpu_ops.h"

/* Checks one weight: present, the shape the config implies, a float dtype, valid FP8 scales.
 * `layer` is -1 for the model-wide tensors. */
int cpu_check_tensor(const wtensor_t *t, const char *what, int layer, int64_t rows, int64_t cols,
                     err_t *err) {
    char where[96];
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

/* Small tensors are read as f32 copies: vectors and the Gated DeltaNet's conv weight. */
bool cpu_is_small(const cpu_need_t *d) {
    return d->rows == 1 || d->slot == L_LIN_CONV;
}

/* What a copy adds to the stored values: the RMSNorms' norm_offset (1 for Qwen3.5's zero-centred
 * weights); the Gated DeltaNet's gated norm and parameters are used as stored. */
float cpu_copy_offset(const model_config_t *c, lslot_t slot) {
    bool rmsnorm =
        slot == L_ATTN_NORM || slot == L_MLP_NORM || slot == L_Q_NORM || slot == L_K_NORM;
    return rmsnorm ? c->norm_offset : 0.0f;
}

/* The tensors layer l reads, by its kinds (at most L_COUNT); returns how many. */
int cpu_layer_needs(const model_config_t *c, int l, cpu_need_t *need) {
    int64_t H = c->hidden_size, D = c->head_dim, I = c->intermediate_size;
    int64_t qd = model_q_dim(c), kvd = model_kv_dim(c);
    int64_t C = model_lin_conv_dim(c), vd = model_lin_v_dim(c), Hv = c->lin_v_heads;
    int n = 0;
    need[n++] = (cpu_need_t){L_ATTN_NORM, "input_layernorm", 1, H};
    switch (c->layer[l].attn) {
        case ATTN_FULL:
        case ATTN_GATED:
            need[n++] =
                (cpu_need_t){L_Q, "q_proj", c->layer[l].attn == ATTN_GATED ? 2 * qd : qd, H};
            need[n++] = (cpu_need_t){L_K, "k_proj", kvd, H};
            need[n++] = (cpu_need_t){L_V, "v_proj", kvd, H};
            need[n++] = (cpu_need_t){L_O, "o_proj", H, qd};
            need[n++] = (cpu_need_t){L_Q_NORM, "q_norm", 1, D};
            need[n++] = (cpu_need_t){L_K_NORM, "k_norm", 1, D};
            break;
        case ATTN_LINEAR:
            need[n++] = (cpu_need_t){L_LIN_QKV, "in_proj_qkv", C, H};
            need[n++] = (cpu_need_t){L_LIN_Z, "in_proj_z", vd, H};
            need[n++] = (cpu_need_t){L_LIN_B, "in_proj_b", Hv, H};
            need[n++] = (cpu_need_t){L_LIN_A, "in_proj_a", Hv, H};
            need[n++] = (cpu_need_t){L_LIN_CONV, "conv1d", C, c->lin_conv_kernel};
            need[n++] = (cpu_need_t){L_LIN_A_LOG, "A_log", 1, Hv};
            need[n++] = (cpu_need_t){L_LIN_DT_BIAS, "dt_bias", 1, Hv};
            need[n++] = (cpu_need_t){L_LIN_NORM, "linear_attn.norm", 1, c->lin_v_dim};
            need[n++] = (cpu_need_t){L_LIN_OUT, "out_proj", H, vd};
            break;
    }
    need[n++] = (cpu_need_t){L_MLP_NORM, "post_attention_layernorm", 1, H};
    switch (c->layer[l].mlp) {
        case MLP_DENSE:
            need[n++] = (cpu_need_t){L_GATE, "gate_proj", I, H};
            need[n++] = (cpu_need_t){L_UP, "up_proj", I, H};
            need[n++] = (cpu_need_t){L_DOWN, "down_proj", H, I};
            break;
        case MLP_MOE:
            need[n++] = (cpu_need_t){L_ROUTER, "mlp.gate", c->n_experts, H};
            break;
    }
    return n;
}

/* The experts of MoE layer l: present, shaped, and of one dtype per projection (their inputs
 * are quantized once for all of them). */
int cpu_check_experts(const model_weights_t *w, int l, err_t *err) {
    const model_config_t *c = weights_config(w);
    int64_t H = c->hidden_size, I = c->moe_intermediate_size;
    static const char *const names[E_COUNT] = {"gate_proj", "up_proj", "down_proj"};
    const wtensor_t *first[E_COUNT];
    for (int e = 0; e < c->n_experts; e++)
        for (int s = 0; s < E_COUNT; s++) {
            const wtensor_t *t = weights_expert(w, l, e, (eslot_t)s);
            char what[64];
            snprintf(what, sizeof what, "experts.%d.%s", e, names[s]);
            if (cpu_check_tensor(t, what, l, s == E_DOWN ? H : I, s == E_DOWN ? I : H, err) < 0)
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
float *cpu_take_norm(const wtensor_t *t, float offset, float **cursor) {
    float *dst = *cursor;
    int64_t n = t->rows * t->cols;
    for (int64_t r = 0; r < t->rows; r++)
        cpu_dequant_rows(t, r, 1, dst + r * t->cols);
    for (int64_t i = 0; i < n; i++)
        dst[i] += offset;
    *cursor += n;
    return dst;
}

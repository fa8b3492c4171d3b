/*
 * cpu_weights: the tensors each layer kind of the CPU backend reads (cpu_layer_needs: the
 * tensor-to-layer map of the forward pass in cpu_backend.c), the checks on them (present, the
 * shape the config implies, a float dtype, valid FP8 scales; one dtype per expert projection),
 * and the f32 copies of the small ones (norm vectors, the Gated DeltaNet's parameters and conv
 * weight). The shapes are those of the config given: under tensor parallelism the rank's
 * (shard.h), so a rank's views are checked against what the rank computes with.
 *
 *     cpu_need_t need[L_COUNT];
 *     for (int i = 0, n = cpu_layer_needs(cfg, l, need); i < n; i++)
 *         cpu_check_tensor(weights_layer(w, l, need[i].slot), need[i].name, l, need[i].rows,
 *                          need[i].cols, &err);
 */
#ifndef TACHYON_CPU_WEIGHTS_H
#define TACHYON_CPU_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include "err.h"
#include "model.h"
#include "weights.h"

/* A tensor a layer kind reads, with the shape it computes with. */
typedef struct cpu_need {
    lslot_t slot;
    const char *name;
    int64_t rows, cols;
} cpu_need_t;

/* Checks one weight: present, [rows, cols], a float dtype, valid FP8 scales. `layer` is -1 for
 * the model-wide tensors; `what` names the tensor in the message. */
int cpu_check_tensor(const wtensor_t *t, const char *what, int layer, int64_t rows, int64_t cols,
                     err_t *err);

/* Small tensors are read as f32 copies: vectors and the Gated DeltaNet's conv weight. */
bool cpu_is_small(const cpu_need_t *d);

/* What a copy adds to the stored values (the RMSNorms' norm_offset). */
float cpu_copy_offset(const model_config_t *c, lslot_t slot);

/* The tensors layer l reads, by its kinds (at most L_COUNT); returns how many. */
int cpu_layer_needs(const model_config_t *c, int l, cpu_need_t *need);

/* The experts of MoE layer l (the checkpoint's whole tensors): present, shaped, one dtype per
 * projection. */
int cpu_check_experts(const model_weights_t *w, int l, err_t *err);

/* Copies small weight t to f32 at *cursor, plus offset, and advances *cursor; returns the copy. */
float *cpu_take_norm(const wtensor_t *t, float offset, float **cursor);

#endif

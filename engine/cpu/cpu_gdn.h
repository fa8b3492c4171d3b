/*
 * cpu_gdn: the CPU backend's Gated DeltaNet layers (ATTN_LINEAR, models.md 4.6) and the
 * recurrent state they keep in per-sequence slots. A slot holds, for every linear layer, the
 * conv window (the last K - 1 raw in_proj_qkv outputs, f32) and the SSM state S [Hv, dk, dv]
 * (f32, or rounded to bf16 after every step with ssm_bf16). The KV manager hands out the slots
 * (engine/kvcache.h); the batch names each sequence's (be_batch_t.state_slots), and a sequence
 * whose first new token is at position 0 starts from a zero state, so preempted sequences
 * rebuild theirs by recomputation.
 *
 *     h += out_proj(gated_rmsnorm(delta_rule(l2norm(silu(conv(x Wqkv^T)))), x Wz^T))
 *
 * with the rule's decay and beta from x Wa^T and x Wb^T, chunked for a sequence with more than
 * one new token, recurrent for a decode.
 *
 *     cpu_gdn_t *g;
 *     cpu_gdn_create(cfg, n_threads, &g, &err);
 *     cpu_gdn_reserve(g, n_slots, false, &err);
 *     cpu_gdn_forward(g, pool, &layer_weights, li, &batch, x, out, gemm, ctx, &err);
 *     cpu_gdn_destroy(g);
 */
#ifndef TACHYON_CPU_GDN_H
#define TACHYON_CPU_GDN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cpu_pool.h"

typedef struct cpu_gdn cpu_gdn_t;

/* The backend's GEMM: y[T, w.rows] (row stride ldy) = x[T, w.cols] W^T (W8A8 emulated when the
 * backend does it). */
typedef void (*cpu_gdn_gemm_fn)(void *ctx, const float *x, int T, const wtensor_t *w, float *y,
                                int64_t ldy);

/* One linear layer's weights: projections as bound, the small tensors as f32 copies. */
typedef struct cpu_gdn_layer {
    const wtensor_t *qkv[3]; /* in_proj_qkv's q | k | v rows: the whole tensor at [0] (the others
                                NULL), or a tensor-parallel rank's three views (shard.h) */
    const wtensor_t *z, *b, *a, *out;
    const float *conv;            /* [conv_dim, K] */
    const float *a_log, *dt_bias; /* [Hv] */
    const float *norm;            /* [dv] the gated RMSNorm's weight */
} cpu_gdn_layer_t;

/* For cfg's linear layers; n_threads scratch areas. The caller owns *out. */
int cpu_gdn_create(const model_config_t *cfg, int n_threads, cpu_gdn_t **out, err_t *err);
void cpu_gdn_destroy(cpu_gdn_t *g);

/* Bytes of one slot (every linear layer's conv window and SSM state). */
size_t cpu_gdn_slot_bytes(const cpu_gdn_t *g);

/* (Re)allocates n_slots zeroed slots; previous states are lost. */
int cpu_gdn_reserve(cpu_gdn_t *g, int n_slots, bool ssm_bf16, err_t *err);

/* Copies slot src into dst (a forked sequence continues from its parent's state). */
int cpu_gdn_copy(cpu_gdn_t *g, int src, int dst, err_t *err);

/* Checks the batch's state slots: present and in range for every sequence. */
int cpu_gdn_check(const cpu_gdn_t *g, const be_batch_t *b, err_t *err);

/* out[T, H] = the layer over the batch's tokens x[T, H] (normed), for linear layer li (its
 * ordinal among the linear layers), reading and updating the sequences' slots. */
int cpu_gdn_forward(cpu_gdn_t *g, cpu_pool_t *pool, const cpu_gdn_layer_t *L, int li,
                    const be_batch_t *b, const float *x, float *out, cpu_gdn_gemm_fn gemm,
                    void *ctx, err_t *err);

#endif

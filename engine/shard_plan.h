/*
 * shard_plan: what a model needs per GPU when it is split over tp GPUs as vLLM splits it
 * (kernels.md 7.1, models.md 3.4): attention heads and dense MLP channels sharded (column-
 * parallel q/k/v and gate/up, row-parallel o and down), the vocabulary of the embedding and
 * lm_head sharded, norms and the MoE router replicated; KV heads split, and replicated when
 * there are fewer than tp. Experts either sharded like the dense MLP (tensor parallel: every GPU
 * holds a slice of every expert) or placed whole (expert parallel: GPU r holds experts
 * [r E / tp, (r + 1) E / tp)). Sizes are those of the checkpoint's dtypes: block-FP8 linears 1
 * byte an element plus an f32 scale per 128 x 128 block, everything else BF16.
 *
 * The cuda backend runs one device per engine today (the cpu backend runs tensor and expert
 * parallelism with ranks as threads: engine/cpu/cpu_tp.h): the plan is what serve answers the
 * cuda backend with when asked for more, and the numbers of bench/RESULTS.md's memory table.
 *
 *     shard_plan_t p;
 *     shard_plan_make(&cfg, 4, true, &p);                      // TP 4 attention, EP 4 experts
 *     uint64_t tokens = shard_plan_kv_tokens(&p, 80e9, 0.9, SHARD_PLAN_OVERHEAD);
 *     shard_plan_describe(&cfg, 4, buf, sizeof buf);           // the table serve prints
 */
#ifndef TACHYON_SHARD_PLAN_H
#define TACHYON_SHARD_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "weights.h"

/* Device memory per GPU the plan assumes besides weights and KV: the activation workspace for
 * max-num-batched-tokens 8192, logits, cuBLASLt's workspace, graphs and the CUDA context
 * (kernels/memplan.h parts; about 3 GiB for the MoE presets on the cuda backend). */
#define SHARD_PLAN_OVERHEAD (4ull << 30)

typedef struct shard_plan {
    int tp;                 /* GPUs */
    bool ep;                /* experts placed whole (expert parallel) */
    uint64_t weights;       /* bytes of weights on each GPU (the largest share) */
    uint64_t weights_total; /* bytes of the whole checkpoint */
    uint64_t kv_per_token;  /* bytes of BF16 KV cache per token on each GPU */
    int kv_heads;           /* KV heads each GPU holds */
    int experts;            /* experts each GPU holds (whole or sliced); 0: dense */
    bool valid;             /* false: this split cannot run (why says what breaks) */
    char why[160];
} shard_plan_t;

/* The plan of cfg over tp GPUs, experts whole (ep) or sliced. */
void shard_plan_make(const model_config_t *cfg, int tp, bool ep, shard_plan_t *out);

/* Tokens of KV cache left on a GPU of device_bytes at gpu-memory-utilization util after the
 * weights and overhead bytes; 0 when nothing is left. */
uint64_t shard_plan_kv_tokens(const shard_plan_t *p, double device_bytes, double util,
                              uint64_t overhead);

/* What cfg needs at tensor-parallel-size tp, one line per layout (TP; EP for an MoE model):
 * weights per GPU and KV tokens left at utilization 0.9 on an 80 GB H100 and a 141 GB H200. */
void shard_plan_describe(const model_config_t *cfg, int tp, char *buf, size_t size);

/* The answer to tensor-parallel-size tp > 1 on a backend that does not run it (the cuda
 * backend so far): err says so and what src's model would need per GPU at that size
 * (shard_plan_describe). Returns -1. */
int shard_plan_refuse(const model_source_t *src, int tp, err_t *err);

#endif

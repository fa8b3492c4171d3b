/*
 * memplan: the cuda backend's device-memory plan: what each part takes, printed at start-up, and
 * the message when something does not fit.
 *
 *   weights      the model as uploaded (FP8 linears + scales, BF16 embedding / lm_head, f32 norms)
 *   activations  workspace for max-num-batched-tokens tokens (residual, GEMM inputs / outputs)
 *   logits       f32 logits and the sampler's workspace for max-num-seqs rows
 *   workspaces   cuBLASLt workspace, split-KV decode attention partials, step metadata
 *   reserve      headroom for CUDA graphs, cuBLASLt and the CUDA context's growth
 *   kv           the rest of gpu-memory-utilization x device memory
 *
 *     memplan_t p = {...};
 *     memplan_print(&p, stderr);
 *     return memplan_oom(&p, "the weights", bytes, err);
 */
#ifndef TACHYON_MEMPLAN_H
#define TACHYON_MEMPLAN_H

#include <stdint.h>
#include <stdio.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memplan {
    uint64_t device_total;                                      /* bytes of device memory */
    uint64_t device_free;                                       /* free when the backend started */
    double utilization;                                         /* gpu-memory-utilization */
    uint64_t weights, activations, logits, workspaces, reserve; /* bytes */
    int max_tokens, max_seqs; /* the capacities the workspaces are sized for */
    uint64_t kv_block_bytes;  /* one block of block_size tokens, all layers, K and V */
    int block_size;
} memplan_t;

/* Bytes left for the KV pool: utilization x total minus every other part and minus what other
 * processes (and the CUDA context) held at start; 0 when nothing is left. */
uint64_t memplan_kv_bytes(const memplan_t *p);

/* Prints the plan, one line per part, in GiB, with the KV tokens that fit. */
void memplan_print(const memplan_t *p, FILE *f);

/* Fills err with "out of device memory for <what> (<bytes>)", the plan and what to lower; returns
 * -1. */
int memplan_oom(const memplan_t *p, const char *what, uint64_t bytes, err_t *err);

#ifdef __cplusplus
}
#endif

#endif

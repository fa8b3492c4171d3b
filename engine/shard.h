/*
 * shard: what one rank holds under tensor parallelism (Megatron sharding, as vLLM does it;
 * models.md 2.5, 3.4), as views into the whole checkpoint (wtensor_slice: no copy). Backend-
 * neutral: the CPU backend computes on the views, the CUDA backend uploads them. Rank r of N:
 *
 *   q_proj, k_proj, v_proj   column-parallel: its heads' output rows. Query heads nH / N each;
 *                            KV heads nKV / N each, or, when N exceeds nKV, the one KV head its
 *                            query heads read, replicated on N / nKV ranks (vLLM's
 *                            max(1, nKV / tp)). Gated attention's q_proj rows are [q_h | gate_h]
 *                            per head: the rank's heads take both.
 *   o_proj                   row-parallel: the input columns of its heads; the partial outputs
 *                            are summed over the ranks (an all-reduce).
 *   gate_proj, up_proj       column-parallel: I / N intermediate rows; down_proj row-parallel:
 *                            those I / N input columns, then an all-reduce.
 *   MoE experts              tensor parallel: every expert sliced like the dense MLP (its
 *                            moe_intermediate_size / N); expert parallel: experts
 *                            [r E / N, (r + 1) E / N) whole, the others not read. Either way
 *                            the outputs are all-reduced. The router is replicated.
 *                            Expert parallel moves no tokens, by choice: attention is tensor
 *                            parallel, so every rank already holds every token's hidden state
 *                            (an all-to-all's dispatch is done), each rank's experts add their
 *                            part of each token's output, and the combine is the all-reduce the
 *                            dense MLP ends with (NCCL's reduce-scatter + all-gather: vLLM's
 *                            "allgather_reducescatter" EP backend). An all-to-all (ncclSend /
 *                            ncclRecv) would return a token's part only from the ranks holding
 *                            one of its experts: top-8 of 128 experts misses a rank's share with
 *                            probability C(128 - 128/N, 8) / C(128, 8) = 0.003, 0.09, 0.33 at
 *                            N = 2, 4, 8, so it would still move 67-99 % of the all-reduce's
 *                            bytes, after a count exchange that the host must read (no CUDA
 *                            graph around it). It pays with data-parallel attention (each rank
 *                            its own tokens), which this engine does not do: its data-parallel
 *                            replicas are whole engines (engine.h).
 *   lm_head                  vocab-parallel: rows [r V / N, (r + 1) V / N), its logits
 *                            all-gathered: the largest GEMM of a decode step is split N ways,
 *                            and each rank reads a 1/N of the weight that dominates small
 *                            models' bytes.
 *   embed_tokens             replicated: a lookup of T rows reads T * H values, nothing to
 *                            split, and a vocab-parallel embedding would cost an all-reduce of
 *                            [T, H] per step for no saving on the host (the rows are mmapped,
 *                            read where used).
 *   norms                    replicated.
 *
 *   Gated DeltaNet           by heads, as vLLM does: key heads Hk / N and value heads Hv / N
 *                            each (value head h reads key head h / (Hv / Hk), on the same rank).
 *                            in_proj_qkv and conv1d are q | k | v rows: a rank's are three row
 *                            ranges, three views (shard_qkv) computed side by side;
 *                            in_proj_z, in_proj_b, in_proj_a, A_log and dt_bias its value
 *                            heads' rows (or entries); out_proj row-parallel, then an
 *                            all-reduce; the gated norm's weight (one head's) replicated. Each
 *                            rank's state slots hold its heads' conv windows and SSM states.
 *
 * Block-FP8 shards must not split a 128 x 128 scale block: wtensor_slice refuses, naming the
 * tensor and the numbers.
 *
 *     model_config_t lc;
 *     shard_config(cfg, &shard, &lc, &err);               // the rank's heads and widths
 *     const wtensor_t *wq = shard_layer(w, &shard, l, L_Q, &view, &err);
 */
#ifndef TACHYON_SHARD_H
#define TACHYON_SHARD_H

#include <stdbool.h>
#include <stdint.h>

#include "comm.h"
#include "err.h"
#include "model.h"
#include "weights.h"

typedef struct shard {
    int rank, tp; /* rank of tp ranks; tp 1: the whole model */
    bool ep;      /* experts whole (expert parallel), else sliced */
    comm_t *comm; /* the group's communicator (NULL at tp 1) */
} shard_t;

/* The config rank s computes with: cfg with n_heads, n_kv_heads, intermediate_size and (without
 * ep) moe_intermediate_size, lin_k_heads and lin_v_heads divided among the ranks (vocab_size
 * stays the whole vocabulary). Fails naming what does not divide. */
int shard_config(const model_config_t *cfg, const shard_t *s, model_config_t *out, err_t *err);

/* Layer l's tensor in slot as rank s holds it: the whole tensor (at tp 1, and for replicated
 * ones), or a view written to *view (at tp > 1 not for L_LIN_QKV and L_LIN_CONV: shard_qkv).
 * NULL with err filled when the shard breaks the FP8 block rule or the tensor is missing. */
const wtensor_t *shard_layer(const model_weights_t *w, const shard_t *s, int l, lslot_t slot,
                             wtensor_t *view, err_t *err);

/* Layer l's in_proj_qkv (slot L_LIN_QKV) or conv1d (L_LIN_CONV) as rank s holds it: the q rows
 * of its key heads, the k rows of its key heads and the v rows of its value heads in parts[0..3)
 * (views written to views[3]); at tp 1 parts[0] is the whole tensor, parts[1] and parts[2]
 * NULL. -1 with err filled on a bad shard. */
int shard_qkv(const model_weights_t *w, const shard_t *s, int l, lslot_t slot, wtensor_t views[3],
              const wtensor_t *parts[3], err_t *err);

/* Layer l's experts as rank s holds them: the checkpoint's [E][E_COUNT] array (tp 1, expert
 * parallel), or views written to views[E * E_COUNT]; *first, *end the experts the rank
 * computes. NULL with err filled on a bad shard. */
const wtensor_t *shard_experts(const model_weights_t *w, const shard_t *s, int l, wtensor_t *views,
                               int *first, int *end, err_t *err);

/* The vocabulary rows [*v0, *v0 + *vn) of lm_head rank `rank` holds, and the widest share
 * (*vpad, the all-gather's row). */
void shard_vocab(int vocab, int rank, int tp, int64_t *v0, int64_t *vn, int64_t *vpad);

/* lm_head as rank s holds it (shard_vocab's rows). */
const wtensor_t *shard_lm_head(const model_weights_t *w, const shard_t *s, wtensor_t *view,
                               err_t *err);

#endif

/*
 * tp: the tensor-parallel instance of any backend: N rank instances (each holding its shard,
 * shard.h, and its own KV pool: its KV heads, the same block ids as every other rank) joined by
 * a communicator (comm.h), driven in lockstep by the engine thread.
 *
 * Threads: one thread per rank, as the GPU design has one worker thread per GPU. The engine
 * thread is rank 0 (no hand-off for it); ranks 1..N-1 are threads that wait for a step. A
 * forward hands every rank the same batch (the engine's one step plan, shared memory: the host
 * form of a broadcast), the ranks run the layers and meet in their collectives (the all-reduces
 * after each row-parallel layer, the all-gather of the vocab-parallel logits), and the call
 * returns when all are done, rank 0 having written the logits (every rank is handed the host
 * logits buffer, as the batch; only rank 0 writes it). A rank that fails where the others do
 * not must not leave them waiting in a collective it will never reach: the backends' ranks meet
 * in comm_agree before their collectives (the CPU backend at a step's start and after each
 * Gated DeltaNet layer's state work, the CUDA backend once a piece, after staging), and the step's
 * error is that of the first rank that failed of its own accord ("rank 1: ..."), not the
 * "tensor-parallel rank 1 failed this step" of the ranks that stopped for it.
 *
 * Each rank's forward time and its time in collectives are kept (rank_stats: the console's rows
 * per rank show where a step's time goes and which rank the others wait for).
 *
 * The other operations (KV pool, state slots, configure) run on the engine thread between
 * steps, rank by rank. Sampling, expert counts, routing traces, the KV budget and the logit-row
 * limit are rank 0's (its logits are the whole vocabulary; routing is replicated).
 *
 *     tp_backend_create(n, make_rank, &args, release_group, group, "host communicator", &be,
 *                       &err);                             // cpu_tp.c, kernels/cb_tp.cu
 */
#ifndef TACHYON_TP_H
#define TACHYON_TP_H

#include "backend.h"
#include "comm.h"

/* Creates rank `rank`'s backend instance into *out (user: tp_backend_create's), and says which
 * communicator handle it uses (*comm, its collective time read for rank_stats). */
typedef int (*tp_make_rank_fn)(void *user, int rank, backend_t **out, comm_t **comm, err_t *err);

/* The instance over n ranks (2 <= n <= COMM_MAX_RANKS) made by make_rank(user, r, ...) for r in
 * 0..n-1. release(group) runs once every rank is destroyed (the communicator the ranks share;
 * release may be NULL), also when create fails. `how` ends the description ("host communicator
 * (all-reduce in rank order)"). The instance's ops are rank 0's name and flags, with the
 * optional ops present where rank 0 has them. The caller owns *out. */
int tp_backend_create(int n, tp_make_rank_fn make_rank, void *user, void (*release)(void *),
                      void *group, const char *how, backend_t **out, err_t *err);

/* Rank r's instance of a tp_backend_create instance (tests, the CUDA backend's test hooks), or
 * NULL when be is not one or r is out of range. */
backend_t *tp_backend_rank(backend_t *be, int r);

#endif

/*
 * cpu_tp: tensor and expert parallelism on the CPU backend (backend_options_t.
 * tensor_parallel_size > 1): N ranks, each a CPU backend instance holding its shard of the
 * weights (cpu_shard.h) and its own KV pool (its KV heads, the same block ids as every other
 * rank), joined by the host communicator (comm.h).
 *
 * Threads: one thread per rank, as the GPU design has one worker thread per GPU. The engine
 * thread is rank 0 (no hand-off for it); ranks 1..N-1 are threads that wait for a step. A
 * forward hands every rank the same batch (the engine's one step plan, shared memory: the host
 * form of a broadcast), the ranks run the layers in lockstep and meet in the all-reduces after
 * each row-parallel layer and the all-gather of the vocab-parallel logits, and the call returns
 * when all are done, rank 0 having written the logits. Each rank has its own worker pool of
 * n_threads / N threads (at least 1) for its GEMMs and attention. The ranks compute exactly
 * what a GPU rank would, so on a 2-core machine there is no speed-up: the point is that the
 * sharded model gives the unsharded one's tokens.
 *
 * The other operations (KV pool, state slots, configure) run on the engine thread between
 * steps, rank by rank. Expert counts and routing traces are rank 0's (routing is replicated).
 *
 *     backend_options_t o = {.tensor_parallel_size = 2, .expert_parallel = true};
 *     cpu_backend_ops.create(&o, weights, &be, &err);          // cpu_create calls cpu_tp_create
 */
#ifndef TACHYON_CPU_TP_H
#define TACHYON_CPU_TP_H

#include "backend.h"
#include "cpu_shard.h"

/* One rank's CPU backend instance (cpu_backend.c): the whole model at shard->tp 1. */
int cpu_rank_create(const backend_options_t *opts, const model_weights_t *w,
                    const cpu_shard_t *shard, backend_t **out, err_t *err);

/* The tensor-parallel instance over opts->tensor_parallel_size ranks (opts->expert_parallel:
 * experts whole). The caller owns *out. */
int cpu_tp_create(const backend_options_t *opts, const model_weights_t *w, backend_t **out,
                  err_t *err);

#endif

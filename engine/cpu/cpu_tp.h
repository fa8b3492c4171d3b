/*
 * cpu_tp: tensor and expert parallelism on the CPU backend (backend_options_t.
 * tensor_parallel_size > 1): N ranks, each a CPU backend instance holding its shard of the
 * weights (shard.h) and its own KV pool (its KV heads, the same block ids as every other
 * rank), joined by the host communicator (comm.h).
 *
 * Threads and lockstep: engine/tp.h (the engine thread is rank 0, ranks 1..N-1 are threads).
 * Each rank has its own worker pool of n_threads / N threads (at least 1) for its GEMMs and
 * attention. The ranks compute exactly what a GPU rank would, so on a 2-core machine there is no
 * speed-up: the point is that the sharded model gives the unsharded one's tokens.
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
#include "shard.h"

/* One rank's CPU backend instance (cpu_backend.c): the whole model at shard->tp 1. */
int cpu_rank_create(const backend_options_t *opts, const model_weights_t *w, const shard_t *shard,
                    backend_t **out, err_t *err);

/* The tensor-parallel instance over opts->tensor_parallel_size ranks (opts->expert_parallel:
 * experts whole). The caller owns *out. */
int cpu_tp_create(const backend_options_t *opts, const model_weights_t *w, backend_t **out,
                  err_t *err);

#endif

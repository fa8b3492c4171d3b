/*
 * comm_gpu: the communicators of CUDA ranks (engine/comm.h's table over device buffers), each
 * rank a host thread (engine/tp.h) with its own stream:
 *
 * - single-device (comm_gpu_create_one_device): several ranks on ONE GPU. NCCL refuses two
 *   ranks on one device; this one lets a one-GPU machine (and the host emulator) run the CUDA
 *   backend's sharded model and check it against the unsharded one. Built on the host
 *   communicator (comm_host.c) for the meeting of the threads: a collective first waits for the
 *   rank's stream (its buffer is then written), swaps the ranks' device pointers through the
 *   host group, does its part on the device, waits for it, and meets the others again before it
 *   returns (no buffer is reused while another rank still reads it). The all-reduce sums in the
 *   FIXED rank order of comm_host, rank 0 + rank 1 + ... from the left (each rank sums one
 *   contiguous range of the elements over all the ranks' buffers with one kernel and writes the
 *   sum into every buffer): the same bits on every run and on every rank. Synchronous with the
 *   host, so no CUDA graph can capture it (graph_safe false: its ranks run eagerly).
 * - NCCL (comm_gpu_create_nccl, where CMake finds NCCL: TACHYON_HAVE_NCCL): one ncclComm_t per
 *   GPU, all created in this process by ncclCommInitAll; the collectives are queued on the
 *   rank's stream and return at once, so each rank's CUDA graphs capture them (graph_safe; NCCL
 *   2.9 and later; every rank's the same way: cb_tp.cu) and its decode steps replay as at one
 *   rank. NCCL sums in its own (ring /
 *   tree) order, fixed for a group, not in rank order: f32 ulps from the single-device run's
 *   bits, not from run to run. Run in the host emulation over an emulated NCCL (a rank per
 *   emulated device: tests/gpu/emu_backend/nccl_emu.cpp, test_cuda_tp_emu_nccl); not yet on two
 *   real GPUs (none were lent at once).
 * Both agree (comm_agree: whether any rank failed before a collective) on the host, through a
 * host communicator over the same ranks; cb_step.cu's ranks agree once a piece, after staging.
 *
 *     comm_gpu_group_t *g;
 *     comm_gpu_create_one_device(2, &g, &err);
 *     comm_t *c = comm_gpu_rank(g, r);
 *     comm_gpu_bind(c, stream);                       // once, the rank's stream
 *     comm_all_reduce_sum(c, dev_partial, n, &err);   // on rank r's thread
 *     comm_gpu_destroy(g);
 */
#ifndef TACHYON_COMM_GPU_H
#define TACHYON_COMM_GPU_H

#include <stdbool.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "comm.h" /* the engine's headers have no guards of their own (cb_engine.h) */

typedef struct comm_gpu_group comm_gpu_group_t;

/* size ranks (1..COMM_MAX_RANKS) on the current device. The caller owns *out. */
int comm_gpu_create_one_device(int size, comm_gpu_group_t **out, err_t *err);

/* Whether this build has NCCL (comm_gpu_create_nccl fails without it). */
bool comm_gpu_have_nccl(void);

/* size ranks over NCCL, rank r on device devices[r] (distinct devices). The caller owns *out. */
int comm_gpu_create_nccl(int size, const int *devices, comm_gpu_group_t **out, err_t *err);

/* Rank r's handle (0 <= r < size), owned by the group; NULL out of range. */
comm_t *comm_gpu_rank(comm_gpu_group_t *g, int r);

/* The stream rank c's collectives wait for and run on (the rank's backend's), before its first
 * collective. */
void comm_gpu_bind(comm_t *c, cudaStream_t stream);

/* Frees the group, once no rank is inside a collective (NCCL: none is queued). NULL is a no-op. */
void comm_gpu_destroy(comm_gpu_group_t *g);

#ifdef __cplusplus
}
#endif

#endif

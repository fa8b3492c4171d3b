/*
 * comm_device: the single-device communicator (engine/comm.h's table): several tensor-parallel
 * ranks on ONE GPU, each rank a host thread with its own stream, the buffers device pointers.
 * NCCL refuses two ranks on one device; this one lets a one-GPU machine (and the host emulator)
 * run the CUDA backend's sharded model and check it against the unsharded one.
 *
 * Built on the host communicator (comm_host.c) for the meeting of the threads. A collective
 * first waits for the rank's stream (its buffer is then written), swaps the ranks' device
 * pointers through the host group, does its part on the device, waits for it, and meets the
 * others again before it returns (no buffer is reused while another rank still reads it). The
 * all-reduce sums in the FIXED rank order of comm_host, rank 0 + rank 1 + ... from the left
 * (each rank sums one contiguous range of the elements over all the ranks' buffers with one
 * kernel and writes the sum into every buffer), so results are the same bits on every run and
 * on every rank. Synchronous with the host: a CUDA graph cannot capture it (the CUDA backend runs
 * eagerly at tensor parallel > 1).
 *
 *     comm_device_group_t *g;
 *     comm_device_create(2, &g, &err);
 *     comm_t *c = comm_device_rank(g, r);
 *     comm_device_bind(c, stream);                    // once, the rank's stream
 *     comm_all_reduce_sum(c, dev_partial, n, &err);   // on rank r's thread
 *     comm_device_destroy(g);
 */
#ifndef TACHYON_COMM_DEVICE_H
#define TACHYON_COMM_DEVICE_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "comm.h" /* the engine's headers have no guards of their own (cb_engine.h) */

typedef struct comm_device_group comm_device_group_t;

/* A group of size ranks (1..COMM_MAX_RANKS) on the current device. The caller owns *out. */
int comm_device_create(int size, comm_device_group_t **out, err_t *err);

/* Rank r's handle (0 <= r < size), owned by the group; NULL out of range. */
comm_t *comm_device_rank(comm_device_group_t *g, int r);

/* The stream rank c's collectives wait for and run on (the rank's backend's), before its first
 * collective. */
void comm_device_bind(comm_t *c, cudaStream_t stream);

/* Frees the group, once no rank is inside a collective. NULL is a no-op. */
void comm_device_destroy(comm_device_group_t *g);

#ifdef __cplusplus
}
#endif

#endif

/*
 * comm: the communicator of a tensor-parallel group: N ranks that run the same step in lockstep
 * and meet at collectives (all-reduce sum of f32, all-gather, broadcast, barrier).
 *
 * A group is created once for N ranks; each rank gets its own handle (comm_rank) and calls every
 * collective with it, in the same order as the other ranks (as NCCL requires). A collective
 * returns when this rank's part of it is done; buffers are this rank's and may be reused then.
 *
 * The host implementation here (comm_host_create): ranks are threads of one process
 * sharing memory. Its all-reduce sums in a FIXED order, rank 0 + rank 1 + ... + rank N-1 from the
 * left, whatever the timing, so a tensor-parallel step gives the same bits on every run and every
 * rank holds the same result (the CPU backend's reference numerics stay deterministic).
 *
 * The table of operations (comm_ops_t) is what another implementation provides behind the same
 * calls: NCCL (one ncclComm_t per GPU, created in one process with one worker thread per GPU;
 * the buffers are then device pointers, queued on the rank's stream; compiled where NCCL is
 * found, run in the host emulation over an emulated NCCL, not yet on several real GPUs) and a
 * single-device one that runs several ranks' shards on one GPU (NCCL refuses two ranks on one
 * device), which lets a one-GPU machine check the sharding math of the CUDA path. Both are
 * kernels/comm_gpu.h, used by the CUDA backend's tensor parallelism.
 *
 *     comm_group_t *g;
 *     comm_host_create(2, &g, &err);
 *     // on rank r's thread:
 *     comm_t *c = comm_rank(g, r);
 *     comm_all_reduce_sum(c, partial, n, &err);       // partial[n] becomes the sum over ranks
 *     comm_all_gather(c, mine, bytes, all, &err);     // all[N * bytes] = rank 0's | rank 1's ...
 *     if (comm_agree(c, rc, &err) < 0) return -1;     // any rank failed: every rank stops here
 *     comm_group_destroy(g);                          // after every rank is done with it
 */
#ifndef TACHYON_COMM_H
#define TACHYON_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "err.h"

#define COMM_MAX_RANKS 64

typedef struct comm comm_t;
typedef struct comm_group comm_group_t;

typedef struct comm_ops {
    const char *name; /* "host", "device" */
    /* buf[n] (f32) on every rank becomes the element-wise sum over the ranks. */
    int (*all_reduce_sum)(comm_t *c, float *buf, size_t n, err_t *err);
    /* recv[size * bytes] = every rank's send[bytes], in rank order; send and recv must not
     * overlap. */
    int (*all_gather)(comm_t *c, const void *send, size_t bytes, void *recv, err_t *err);
    /* buf[bytes] on every rank becomes root's. */
    int (*broadcast)(comm_t *c, void *buf, size_t bytes, int root, err_t *err);
    /* Returns when every rank has called it. */
    int (*barrier)(comm_t *c, err_t *err);
    /* A meeting on the host over each rank's outcome rc (of its work since the last collective):
     * rc when no rank's is negative, else -1 on every rank; a rank that failed keeps its own
     * message, the others get "tensor-parallel rank k failed this step" (k the first that did)
     * and peer_failed set. Ranks call it before a collective that a rank which failed would
     * never reach, so that none waits there for ever. No device work (nothing for a graph to
     * capture). */
    int (*agree)(comm_t *c, int rc, err_t *err);
    /* The all-reduce and all-gather only queue work on the rank's stream and never wait on the
     * host (NCCL), so a CUDA graph may capture them: the rank's graphs hold its collectives, and
     * replays meet as eager steps do, each rank's in the same order. False where a collective
     * meets the other ranks on the host (the host and single-device communicators). */
    bool graph_safe;
} comm_ops_t;

/* Every rank's handle starts with this header. */
struct comm {
    const comm_ops_t *ops;
    int rank, size;
    /* Seconds this rank has spent inside collectives, written by its own thread (read it between
     * steps): waiting for the slowest rank included, so a rank that waits long is one the others
     * outpace. The host and single-device communicators wait on the host; NCCL's calls only
     * queue work on the rank's stream, so there it counts the queueing. */
    double coll_s;
    /* The last agree failed for another rank's failure, not this one's: whoever reports the
     * step's error looks for the rank whose own it was (engine/tp.c). */
    bool peer_failed;
};

static inline double comm_clock_(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A group of size ranks (1 <= size <= COMM_MAX_RANKS) that are threads of this process. The
 * caller owns *out. */
int comm_host_create(int size, comm_group_t **out, err_t *err);

/* Rank r's handle (0 <= r < size), owned by the group. */
comm_t *comm_rank(comm_group_t *g, int r);

/* Frees the group and its handles, once no rank is inside a collective. NULL is a no-op. */
void comm_group_destroy(comm_group_t *g);

/* Each collective adds its time to c->coll_s. */
#define COMM_TIMED_(c, call)                                                                       \
    do {                                                                                           \
        double t0_ = comm_clock_();                                                                \
        int rc_ = (call);                                                                          \
        (c)->coll_s += comm_clock_() - t0_;                                                        \
        return rc_;                                                                                \
    } while (0)

static inline int comm_all_reduce_sum(comm_t *c, float *buf, size_t n, err_t *err) {
    COMM_TIMED_(c, c->ops->all_reduce_sum(c, buf, n, err));
}
static inline int comm_all_gather(comm_t *c, const void *send, size_t bytes, void *recv,
                                  err_t *err) {
    COMM_TIMED_(c, c->ops->all_gather(c, send, bytes, recv, err));
}
static inline int comm_broadcast(comm_t *c, void *buf, size_t bytes, int root, err_t *err) {
    COMM_TIMED_(c, c->ops->broadcast(c, buf, bytes, root, err));
}
static inline int comm_barrier(comm_t *c, err_t *err) {
    COMM_TIMED_(c, c->ops->barrier(c, err));
}
static inline int comm_agree(comm_t *c, int rc, err_t *err) {
    COMM_TIMED_(c, c->ops->agree(c, rc, err));
}

#endif

/*
 * The single-device communicator (comm_device.h): the host group meets the rank threads, the
 * device does the sums and copies.
 */
#include "cb_engine.h"

#include <cstdlib>

#include "comm_device.h"
#include "cuda_check.h"
#include "ops_common.cuh"

typedef struct dev_rank {
    comm_t base; /* first: a comm_t * is a dev_rank_t * */
    comm_t *host;
    cudaStream_t stream;
} dev_rank_t;

struct comm_device_group {
    int size;
    comm_group_t *host;
    dev_rank_t rank[COMM_MAX_RANKS];
};

/* Every rank's buffer, by value in the launch. */
typedef struct rank_ptrs {
    float *p[COMM_MAX_RANKS];
} rank_ptrs_t;

/* What each rank publishes for a collective. */
typedef struct published {
    void *ptr;
    size_t len;
} published_t;

// ---------------------------------------------------------------------------------------------
// Kernel

/* Elements [begin, end) of every rank's buffer become (((b0 + b1) + b2) ...) in rank order. */
__global__ void sum_in_rank_order(rank_ptrs_t b, int n_ranks, size_t begin, size_t end) {
    for (size_t i = begin + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < end;
         i += (size_t)gridDim.x * blockDim.x) {
        float s = b.p[0][i];
        for (int r = 1; r < n_ranks; r++)
            s += b.p[r][i];
        for (int r = 0; r < n_ranks; r++)
            b.p[r][i] = s;
    }
}

// ---------------------------------------------------------------------------------------------
// Collectives

/* Waits for the rank's stream, then swaps (ptr, len) with every rank: all[r] is rank r's. -1
 * (err filled, on every rank alike) when the lengths differ. */
static int exchange(dev_rank_t *d, void *ptr, size_t len, published_t *all, const char *op,
                    err_t *err) {
    CUDA_CHECK(cudaStreamSynchronize(d->stream), err);
    published_t mine = {ptr, len};
    if (comm_all_gather(d->host, &mine, sizeof mine, all, err) < 0) return -1;
    for (int r = 1; r < d->base.size; r++)
        if (all[r].len != all[0].len)
            return err_set(err, "device communicator: %s with %zu on rank 0 but %zu on rank %d", op,
                           all[0].len, all[r].len, r);
    return 0;
}

/* Waits for this rank's device work, then for every rank: the end of every collective, reached
 * whatever happened before (a rank that left early would leave the others waiting). */
static int finish(dev_rank_t *d, int rc, err_t *err) {
    cudaError_t e = cudaStreamSynchronize(d->stream);
    err_t berr = {{0}};
    comm_barrier(d->host, &berr);
    if (rc < 0) return -1;
    if (e != cudaSuccess) return err_set(err, "device communicator: %s", cudaGetErrorString(e));
    return 0;
}

static int dev_all_reduce_sum(comm_t *c, float *buf, size_t n, err_t *err) {
    dev_rank_t *d = (dev_rank_t *)c;
    published_t all[COMM_MAX_RANKS];
    int rc = exchange(d, buf, n, all, "all-reduce", err);
    if (rc == 0) {
        size_t begin = n * (size_t)c->rank / (size_t)c->size;
        size_t end = n * (size_t)(c->rank + 1) / (size_t)c->size;
        rank_ptrs_t b;
        for (int r = 0; r < c->size; r++)
            b.p[r] = (float *)all[r].ptr;
        if (end > begin) {
            size_t blocks = (end - begin + 255) / 256;
            if (blocks > 1024) blocks = 1024;
            OPS_LAUNCH(sum_in_rank_order, dim3((unsigned)blocks), dim3(256), 0, d->stream, b,
                       c->size, begin, end);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess)
                rc = err_set(err, "device communicator: all-reduce: %s", cudaGetErrorString(e));
        }
    }
    /* the sums of every range are written when every rank has finished its own */
    return finish(d, rc, err);
}

static int dev_all_gather(comm_t *c, const void *send, size_t bytes, void *recv, err_t *err) {
    dev_rank_t *d = (dev_rank_t *)c;
    published_t all[COMM_MAX_RANKS];
    int rc = exchange(d, (void *)send, bytes, all, "all-gather", err);
    for (int r = 0; rc == 0 && bytes && r < c->size; r++) {
        cudaError_t e = cudaMemcpyAsync((char *)recv + (size_t)r * bytes, all[r].ptr, bytes,
                                        cudaMemcpyDeviceToDevice, d->stream);
        if (e != cudaSuccess)
            rc = err_set(err, "device communicator: all-gather: %s", cudaGetErrorString(e));
    }
    return finish(d, rc, err);
}

static int dev_broadcast(comm_t *c, void *buf, size_t bytes, int root, err_t *err) {
    dev_rank_t *d = (dev_rank_t *)c;
    if (root < 0 || root >= c->size)
        return err_set(err, "device communicator: broadcast from rank %d of %d", root, c->size);
    published_t all[COMM_MAX_RANKS];
    int rc = exchange(d, buf, bytes, all, "broadcast", err);
    if (rc == 0 && c->rank != root && bytes) {
        cudaError_t e =
            cudaMemcpyAsync(buf, all[root].ptr, bytes, cudaMemcpyDeviceToDevice, d->stream);
        if (e != cudaSuccess)
            rc = err_set(err, "device communicator: broadcast: %s", cudaGetErrorString(e));
    }
    return finish(d, rc, err);
}

static int dev_barrier(comm_t *c, err_t *err) {
    return finish((dev_rank_t *)c, 0, err);
}

static const comm_ops_t device_ops = {
    "device", dev_all_reduce_sum, dev_all_gather, dev_broadcast, dev_barrier,
};

// ---------------------------------------------------------------------------------------------
// Entry points

extern "C" int comm_device_create(int size, comm_device_group_t **out, err_t *err) {
    *out = NULL;
    comm_device_group_t *g = (comm_device_group_t *)calloc(1, sizeof *g);
    if (!g) return err_set(err, "device communicator: out of memory");
    if (comm_host_create(size, &g->host, err) < 0) {
        free(g);
        return err_prefix(err, "device communicator");
    }
    g->size = size;
    for (int r = 0; r < size; r++) {
        g->rank[r].base.ops = &device_ops;
        g->rank[r].base.rank = r;
        g->rank[r].base.size = size;
        g->rank[r].host = comm_rank(g->host, r);
        g->rank[r].stream = 0;
    }
    *out = g;
    return 0;
}

extern "C" comm_t *comm_device_rank(comm_device_group_t *g, int r) {
    return r >= 0 && r < g->size ? &g->rank[r].base : NULL;
}

extern "C" void comm_device_bind(comm_t *c, cudaStream_t stream) {
    ((dev_rank_t *)c)->stream = stream;
}

extern "C" void comm_device_destroy(comm_device_group_t *g) {
    if (!g) return;
    comm_group_destroy(g->host);
    free(g);
}

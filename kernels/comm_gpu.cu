/*
 * The communicators of CUDA ranks (comm_gpu.h): the single-device one (the host group meets the
 * rank threads, the device does the sums and copies) and, where built, the NCCL one.
 */
#include "cb_engine.h"

#include <cstdlib>

#ifdef TACHYON_HAVE_NCCL
#include <nccl.h>
#endif

#include "comm_gpu.h"
#include "cuda_check.h"
#include "ops_common.cuh"

typedef struct gpu_rank {
    comm_t base; /* first: a comm_t * is a gpu_rank_t * */
    cudaStream_t stream;
    comm_t *host; /* the host group's handle: the single-device collectives' meetings, agree */
#ifdef TACHYON_HAVE_NCCL
    ncclComm_t nccl;
    int device;
    float *scratch; /* [1] f32 on the device, zero: the barrier's all-reduce */
#endif
} gpu_rank_t;

struct comm_gpu_group {
    int size;
    comm_group_t *host;
    gpu_rank_t rank[COMM_MAX_RANKS];
};

// ---------------------------------------------------------------------------------------------
// Kernel

/* Every rank's buffer, by value in the launch. */
typedef struct rank_ptrs {
    float *p[COMM_MAX_RANKS];
} rank_ptrs_t;

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
// The single-device collectives

/* What each rank publishes for a collective. */
typedef struct published {
    void *ptr;
    size_t len;
} published_t;

/* Waits for the rank's stream, then swaps (ptr, len) with every rank: all[r] is rank r's. -1
 * (err filled, on every rank alike) when the lengths differ. */
static int exchange(gpu_rank_t *d, void *ptr, size_t len, published_t *all, const char *op,
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
static int finish(gpu_rank_t *d, int rc, err_t *err) {
    cudaError_t e = cudaStreamSynchronize(d->stream);
    err_t berr = {{0}};
    comm_barrier(d->host, &berr);
    if (rc < 0) return -1;
    if (e != cudaSuccess) return err_set(err, "device communicator: %s", cudaGetErrorString(e));
    return 0;
}

static int one_all_reduce_sum(comm_t *c, float *buf, size_t n, err_t *err) {
    gpu_rank_t *d = (gpu_rank_t *)c;
    published_t all[COMM_MAX_RANKS];
    int rc = exchange(d, buf, n, all, "all-reduce", err);
    size_t begin = n * (size_t)c->rank / (size_t)c->size;
    size_t end = n * (size_t)(c->rank + 1) / (size_t)c->size;
    if (rc == 0 && end > begin) {
        rank_ptrs_t b;
        for (int r = 0; r < c->size; r++)
            b.p[r] = (float *)all[r].ptr;
        size_t blocks = (end - begin + 255) / 256;
        if (blocks > 1024) blocks = 1024;
        OPS_LAUNCH(sum_in_rank_order, dim3((unsigned)blocks), dim3(256), 0, d->stream, b, c->size,
                   begin, end);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            rc = err_set(err, "device communicator: all-reduce: %s", cudaGetErrorString(e));
    }
    /* the sums of every range are written when every rank has finished its own */
    return finish(d, rc, err);
}

static int one_all_gather(comm_t *c, const void *send, size_t bytes, void *recv, err_t *err) {
    gpu_rank_t *d = (gpu_rank_t *)c;
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

static int one_broadcast(comm_t *c, void *buf, size_t bytes, int root, err_t *err) {
    gpu_rank_t *d = (gpu_rank_t *)c;
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

static int one_barrier(comm_t *c, err_t *err) {
    return finish((gpu_rank_t *)c, 0, err);
}

/* Both communicators agree on the host, through the group's host communicator. */
static int gpu_agree(comm_t *c, int rc, err_t *err) {
    comm_t *host = ((gpu_rank_t *)c)->host;
    rc = comm_agree(host, rc, err);
    c->peer_failed = host->peer_failed;
    return rc;
}

static const comm_ops_t one_device_ops = {
    "device", one_all_reduce_sum, one_all_gather, one_broadcast, one_barrier, gpu_agree, false,
};

// ---------------------------------------------------------------------------------------------
// The NCCL collectives (queued on the rank's stream)

#ifdef TACHYON_HAVE_NCCL
static int nccl_ok(ncclResult_t r, const char *op, err_t *err) {
    if (r == ncclSuccess) return 0;
    return err_set(err, "nccl communicator: %s: %s", op, ncclGetErrorString(r));
}

static int nccl_all_reduce_sum(comm_t *c, float *buf, size_t n, err_t *err) {
    gpu_rank_t *r = (gpu_rank_t *)c;
    return nccl_ok(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, r->nccl, r->stream), "all-reduce",
                   err);
}

static int nccl_all_gather(comm_t *c, const void *send, size_t bytes, void *recv, err_t *err) {
    gpu_rank_t *r = (gpu_rank_t *)c;
    return nccl_ok(ncclAllGather(send, recv, bytes, ncclChar, r->nccl, r->stream), "all-gather",
                   err);
}

static int nccl_broadcast(comm_t *c, void *buf, size_t bytes, int root, err_t *err) {
    gpu_rank_t *r = (gpu_rank_t *)c;
    if (root < 0 || root >= c->size)
        return err_set(err, "nccl communicator: broadcast from rank %d of %d", root, c->size);
    return nccl_ok(ncclBroadcast(buf, buf, bytes, ncclChar, root, r->nccl, r->stream), "broadcast",
                   err);
}

/* An all-reduce of one zero, waited for: every rank has reached it when it returns. */
static int nccl_barrier(comm_t *c, err_t *err) {
    gpu_rank_t *r = (gpu_rank_t *)c;
    if (nccl_ok(ncclAllReduce(r->scratch, r->scratch, 1, ncclFloat, ncclSum, r->nccl, r->stream),
                "barrier", err) < 0)
        return -1;
    CUDA_CHECK(cudaStreamSynchronize(r->stream), err);
    return 0;
}

static const comm_ops_t nccl_ops = {
    "nccl", nccl_all_reduce_sum, nccl_all_gather, nccl_broadcast, nccl_barrier, gpu_agree, true,
};
#endif

// ---------------------------------------------------------------------------------------------
// Entry points

/* A group of size ranks with ops, their handles set, over a host group of as many. */
static comm_gpu_group_t *new_group(int size, const comm_ops_t *ops, err_t *err) {
    if (size < 1 || size > COMM_MAX_RANKS) {
        err_set(err, "%s communicator: %d ranks (1..%d)", ops->name, size, COMM_MAX_RANKS);
        return NULL;
    }
    comm_gpu_group_t *g = (comm_gpu_group_t *)calloc(1, sizeof *g);
    if (!g) {
        err_set(err, "%s communicator: out of memory", ops->name);
        return NULL;
    }
    if (comm_host_create(size, &g->host, err) < 0) {
        free(g);
        err_prefix(err, "%s communicator", ops->name);
        return NULL;
    }
    g->size = size;
    for (int r = 0; r < size; r++) {
        g->rank[r].base.ops = ops;
        g->rank[r].base.rank = r;
        g->rank[r].base.size = size;
        g->rank[r].host = comm_rank(g->host, r);
    }
    return g;
}

extern "C" int comm_gpu_create_one_device(int size, comm_gpu_group_t **out, err_t *err) {
    *out = NULL;
    comm_gpu_group_t *g = new_group(size, &one_device_ops, err);
    if (!g) return -1;
    *out = g;
    return 0;
}

extern "C" bool comm_gpu_have_nccl(void) {
#ifdef TACHYON_HAVE_NCCL
    return true;
#else
    return false;
#endif
}

extern "C" void comm_gpu_destroy(comm_gpu_group_t *g) {
    if (!g) return;
#ifdef TACHYON_HAVE_NCCL
    for (int i = 0; i < g->size; i++) {
        if (g->rank[i].scratch) {
            cudaSetDevice(g->rank[i].device);
            cudaFree(g->rank[i].scratch);
        }
        if (g->rank[i].nccl) ncclCommDestroy(g->rank[i].nccl);
    }
#endif
    comm_group_destroy(g->host);
    free(g);
}

extern "C" int comm_gpu_create_nccl(int size, const int *devices, comm_gpu_group_t **out,
                                    err_t *err) {
    *out = NULL;
#ifdef TACHYON_HAVE_NCCL
    comm_gpu_group_t *g = new_group(size, &nccl_ops, err);
    if (!g) return -1;
    ncclComm_t comms[COMM_MAX_RANKS];
    ncclResult_t nr = ncclCommInitAll(comms, size, devices);
    if (nr != ncclSuccess) {
        comm_gpu_destroy(g);
        return err_set(err, "nccl communicator: ncclCommInitAll over %d GPUs: %s", size,
                       ncclGetErrorString(nr));
    }
    for (int r = 0; r < size; r++) {
        g->rank[r].nccl = comms[r];
        g->rank[r].device = devices[r];
    }
    for (int r = 0; r < size; r++) {
        float **s = &g->rank[r].scratch;
        cudaError_t e = cudaSetDevice(devices[r]);
        if (e == cudaSuccess) e = cudaMalloc((void **)s, sizeof(float));
        if (e == cudaSuccess) e = cudaMemset(*s, 0, sizeof(float)); /* 0 + 0 forever */
        if (e != cudaSuccess) {
            comm_gpu_destroy(g);
            return err_set(err, "nccl communicator: device %d: %s", devices[r],
                           cudaGetErrorString(e));
        }
    }
    *out = g;
    return 0;
#else
    (void)size;
    (void)devices;
    return err_set(err, "nccl communicator: this build has no NCCL");
#endif
}

extern "C" comm_t *comm_gpu_rank(comm_gpu_group_t *g, int r) {
    return r >= 0 && r < g->size ? &g->rank[r].base : NULL;
}

extern "C" void comm_gpu_bind(comm_t *c, cudaStream_t stream) {
    ((gpu_rank_t *)c)->stream = stream;
}

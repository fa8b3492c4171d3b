/* NCCL for the backend's host emulation: the calls kernels/comm_gpu.cu makes (ncclCommInitAll,
 * ncclAllReduce of f32 sums, ncclAllGather, ncclBroadcast, ncclCommDestroy,
 * ncclGetErrorString), with NCCL's contract as comm_gpu.cu relies on it:
 *
 * - ncclCommInitAll makes one communicator per listed device (distinct devices that exist, as
 *   NCCL insists), rank i on devlist[i];
 * - a collective is stream work: it runs where the rank's stream runs it. Here stream work runs
 *   at the call (one synchronous "device" per rank), so the call meets the other ranks' calls on
 *   the host; while the calling thread captures a CUDA graph it is recorded instead and meets
 *   them when the graph is replayed (NCCL collectives inside CUDA graphs, NCCL 2.9 and later);
 * - every rank calls the same collectives in the same order, each on its own thread (one thread
 *   per GPU, as engine/tp.c drives them; one thread driving several ranks would need
 *   ncclGroupStart, which comm_gpu.cu does not use and this does not implement).
 *
 * The all-reduce sums in rank order (NCCL's ring or tree has its own order, fixed for a group);
 * every rank receives the same bits. Types and operations other than those comm_gpu.cu uses
 * are refused with ncclInvalidArgument. Two misuses a real NCCL answers with a hang or worse stop
 * the process with a message: a rank left waiting 120 s in a collective the others never reach,
 * and a collective run from a CUDA graph on some ranks and eagerly on others. */
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include <cuda_runtime.h>
#include <nccl.h>

#define MEET_LIMIT_S 120

namespace {

/* What the ranks of one group share: the buffers each published for the collective under way,
 * and a reusable meeting point. */
struct Group {
    int size = 0;
    std::mutex mu;
    std::condition_variable cv;
    int arrived = 0;
    unsigned long generation = 0;
    const void *send[64] = {};
    void *recv[64] = {};
    bool from_graph[64] = {};

    /* Returns when all size ranks have called it (once per rank per meeting). A rank left
     * waiting MEET_LIMIT_S is where a real NCCL would hang for ever (a rank that never reaches
     * the collective): the process stops, saying so, rather than the test hanging. */
    void meet(int rank) {
        std::unique_lock<std::mutex> lock(mu);
        unsigned long g = generation;
        if (++arrived == size) {
            arrived = 0;
            generation++;
            cv.notify_all();
            return;
        }
        if (!cv.wait_for(lock, std::chrono::seconds(MEET_LIMIT_S),
                         [&]() { return generation != g; })) {
            fprintf(stderr,
                    "emulated NCCL: rank %d waited %d s in a collective that %d of the %d ranks "
                    "did not reach (a real NCCL hangs here)\n",
                    rank, MEET_LIMIT_S, size - arrived, size);
            abort();
        }
    }
};

size_t type_bytes(ncclDataType_t t) {
    switch (t) {
        case ncclInt8:
        case ncclUint8:
            return 1;
        case ncclFloat32:
        case ncclInt32:
        case ncclUint32:
            return 4;
        default:
            return 0;
    }
}

} /* namespace */

struct ncclComm {
    std::shared_ptr<Group> group;
    int rank = 0, device = 0;
};

namespace {

/* Publishes this rank's buffers, runs part() once every rank has, and returns once every rank
 * has run its part (no buffer is reused while another rank still reads it). A collective run
 * from a CUDA graph on some ranks and eagerly on others stops the process: NCCL requires graph
 * capture to be the same on every rank of an operation ("Using NCCL with CUDA Graphs"). */
template <typename Part>
void collective(ncclComm_t c, const void *send, void *recv, bool from_graph, Part part) {
    Group &g = *c->group;
    g.send[c->rank] = send;
    g.recv[c->rank] = recv;
    g.from_graph[c->rank] = from_graph;
    g.meet(c->rank);
    for (int r = 0; r < g.size; r++)
        if (g.from_graph[r] != from_graph) {
            fprintf(stderr,
                    "emulated NCCL: a collective run from a CUDA graph on rank %d and eagerly on "
                    "rank %d (NCCL requires every rank alike)\n",
                    from_graph ? c->rank : r, from_graph ? r : c->rank);
            abort();
        }
    part(g);
    g.meet(c->rank);
}

/* Runs op(false) now, or records op(true) while the calling thread captures a CUDA graph
 * (emu_cuda.h), to run when the graph is replayed. */
template <typename Op> ncclResult_t enqueue(Op op) {
    if (emu_capturing())
        emu_capture([=]() { op(true); });
    else
        op(false);
    return ncclSuccess;
}

} /* namespace */

extern "C" {

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess:
            return "no error (emulated NCCL)";
        case ncclInvalidArgument:
            return "invalid argument (emulated NCCL)";
        case ncclInvalidUsage:
            return "invalid usage (emulated NCCL)";
        default:
            return "error (emulated NCCL)";
    }
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
    int count = 0;
    if (!comms || ndev < 1 || ndev > 64 || cudaGetDeviceCount(&count) != cudaSuccess)
        return ncclInvalidArgument;
    for (int i = 0; i < ndev; i++) {
        int d = devlist ? devlist[i] : i;
        if (d < 0 || d >= count) return ncclInvalidArgument;
        for (int j = 0; j < i; j++)
            if ((devlist ? devlist[j] : j) == d) return ncclInvalidUsage; /* a GPU twice */
    }
    auto g = std::make_shared<Group>();
    g->size = ndev;
    for (int i = 0; i < ndev; i++)
        comms[i] = new ncclComm{g, i, devlist ? devlist[i] : i};
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    delete c;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t c, cudaStream_t) {
    if (!c || type != ncclFloat32 || op != ncclSum) return ncclInvalidArgument;
    return enqueue([=](bool from_graph) {
        collective(c, send, recv, from_graph, [&](Group &g) {
            /* this rank's range of the elements, summed over every rank in rank order and
             * written to every rank's recv: the ranges are disjoint, so in place is safe */
            size_t begin = count * (size_t)c->rank / (size_t)g.size;
            size_t end = count * (size_t)(c->rank + 1) / (size_t)g.size;
            for (size_t i = begin; i < end; i++) {
                float s = ((const float *)g.send[0])[i];
                for (int r = 1; r < g.size; r++)
                    s += ((const float *)g.send[r])[i];
                for (int r = 0; r < g.size; r++)
                    ((float *)g.recv[r])[i] = s;
            }
        });
    });
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclComm_t c, cudaStream_t) {
    size_t bytes = count * type_bytes(type);
    if (!c || type_bytes(type) == 0) return ncclInvalidArgument;
    return enqueue([=](bool from_graph) {
        collective(c, send, recv, from_graph, [&](Group &g) {
            for (int r = 0; r < g.size; r++)
                memcpy((char *)recv + (size_t)r * bytes, g.send[r], bytes);
        });
    });
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t c, cudaStream_t) {
    size_t bytes = count * type_bytes(type);
    if (!c || type_bytes(type) == 0 || root < 0 || root >= c->group->size)
        return ncclInvalidArgument;
    return enqueue([=](bool from_graph) {
        collective(c, send, recv, from_graph, [&](Group &g) {
            if (recv != g.send[root]) memmove(recv, g.send[root], bytes);
        });
    });
}

} /* extern "C" */

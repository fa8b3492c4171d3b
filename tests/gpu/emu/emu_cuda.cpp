/* emu_cuda: the fiber scheduler behind emu_cuda.h and stubs of the CUDA runtime calls the kernel
 * tests make (device memory is host memory; every call succeeds). */
#include "emu_cuda.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <vector>

/* ---- devices and their streams (emu_cuda.h) ------------------------------------------------- */

static thread_local int current_device = 0;
/* A stream is this plus its device; lower values (0: the legacy default stream) belong to
 * whichever device is current. */
static const uintptr_t kStreamBase = 0x1000;

int emu_current_device(void) {
    return current_device;
}
void emu_set_current_device(int device) {
    current_device = device;
}
cudaStream_t emu_stream_on(int device) {
    return reinterpret_cast<cudaStream_t>(kStreamBase + (uintptr_t)device);
}
void emu_check_stream(cudaStream_t s, const char *what) {
    uintptr_t v = reinterpret_cast<uintptr_t>(s);
    if (v < kStreamBase || (int)(v - kStreamBase) == current_device) return;
    fprintf(stderr,
            "emu: %s on a stream of device %d while device %d is current (a GPU refuses it: "
            "cudaErrorInvalidResourceHandle; cudaSetDevice first)\n",
            what, (int)(v - kStreamBase), current_device);
    abort();
}

extern "C" {
#include "dtype.h"
}
#include "ops.h"

uint3 emu_block_idx;
dim3 emu_block_dim, emu_grid_dim;

namespace {

constexpr size_t kStack = 64 * 1024;
constexpr int kMmaRegs = 6; /* A's 4 and B's 2 registers of one lane */

/* A counting barrier over fibers; a fiber that finishes leaves it (arrive-and-drop), as an
 * exited CUDA thread no longer takes part in __syncthreads. */
struct Barrier {
    int expected = 0, arrived = 0;
    unsigned gen = 0;
};

/* One fiber per thread index, kept from block to block and launch to launch. A switch saves the
 * callee-saved registers on the running stack and moves to the other stack (fiber_swap below):
 * a function call's worth of work, where glibc's _setjmp / _longjmp add pointer mangling and a
 * walk of the cleanup handlers (a third of the emulator's time went there). A fiber that finishes
 * its thread's body parks; the next block resumes it into the body again. */
struct Fiber {
    void *sp = nullptr; /* its saved stack pointer while it is not running */
};

/* One thread's cp.async copies, in issue order: copies [0, done) have landed; committed group g
 * ends at group_end[g]; groups [0, groups_done) are waited for; the copies after the last end
 * are the open group. Flat and cleared, never freed, between blocks: a block of 128 threads used
 * to build 128 deques, which cost the emulated attention more than its copies. */
struct CpCopy {
    void *dst;
    const void *src;
    int src_bytes;
};
struct CpQueue {
    std::vector<CpCopy> copies;
    std::vector<size_t> group_end;
    size_t done = 0, groups_done = 0;
    void clear() {
        copies.clear();
        group_end.clear();
        done = groups_done = 0;
    }
};

/* The block being run: thread index t is fiber t. */
struct Block {
    std::vector<uint3> idx;
    std::vector<char> done;
    std::vector<Barrier> warps;
    /* Two sets of each warp's exchange slots, used in turn by a lane's successive shuffles (and
     * mmas): a lane writes set p, waits for the warp, reads; its next exchange writes the other
     * set, and its one after that set p again only after a warp barrier that every lane reaches
     * after reading set p. So one barrier an exchange, not two. */
    std::vector<uint64_t> exchange;             /* [2][32 slots per warp] */
    std::vector<uint32_t> mma;                  /* [2][per warp: each lane's fragment registers] */
    std::vector<uint8_t> exchange_set, mma_set; /* per thread: the set its next exchange uses */
    std::vector<CpQueue> cp;                    /* per thread: its cp.async copies in flight */
    Barrier block;
    void *sched_sp = nullptr; /* the scheduler's saved stack pointer while a fiber runs */
    int cur = 0;
    const std::function<void()> *body = nullptr;
};

Block *blk;
std::vector<uint32_t> dyn_smem;
std::vector<Fiber> fibers; /* [up to 1024], each with its stack in stacks[] */
std::vector<char *> stacks;
unsigned long long events; /* arrivals and departures: a round without any is a deadlock */

/* Saves the callee-saved registers (System V x86-64: rbp, rbx, r12-r15; the return address is
 * already on the stack) on the current stack, stores the stack pointer in *save, and resumes the
 * context saved at `resume` by popping the same frame. The control words of the FPU and SSE are
 * callee-saved too, but nothing here changes them. */
extern "C" void emu_fiber_swap(void **save, void *resume);
asm(R"(
    .text
    .p2align 4
    .type emu_fiber_swap, @function
emu_fiber_swap:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_fiber_swap, .-emu_fiber_swap
)");
#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64"
#endif

/* The fiber of the next thread index after `t` that has not finished, or -1. */
int next_runnable(int t) {
    const int n = (int)blk->idx.size();
    for (t++; t < n; t++)
        if (!blk->done[t]) return t;
    return -1;
}

/* A round runs every unfinished thread once, in index order, each until it waits or finishes:
 * a fiber hands over straight to the next one (one switch, not two through the scheduler), and
 * the last one of the round back to the scheduler. */
void yield_to_scheduler() {
    const int me = blk->cur, next = next_runnable(me);
    if (next < 0) {
        emu_fiber_swap(&fibers[me].sp, blk->sched_sp);
        return;
    }
    blk->cur = next;
    emu_fiber_swap(&fibers[me].sp, fibers[next].sp);
}

void wait(Barrier &b) {
    events++;
    unsigned g = b.gen;
    if (++b.arrived == b.expected) {
        b.arrived = 0;
        b.gen++;
        return;
    }
    while (b.gen == g)
        yield_to_scheduler();
}

void drop(Barrier &b) {
    events++;
    b.expected--;
    if (b.arrived > 0 && b.arrived == b.expected) {
        b.arrived = 0;
        b.gen++;
    }
}

[[noreturn]] void fiber_main() {
    for (;;) {
        (*blk->body)();
        blk->cp[blk->cur].clear(); /* copies never waited for are dropped */
        drop(blk->block);
        drop(blk->warps[blk->cur / 32]);
        blk->done[blk->cur] = 1;
        yield_to_scheduler(); /* parked until a block needs this thread index again */
    }
}

} // namespace

const uint3 &emu_thread_idx(void) {
    return blk->idx[blk->cur];
}

int emu_lane(void) {
    return blk->cur & 31;
}

uint64_t *emu_warp_exchange(void) {
    const size_t set = blk->exchange_set[blk->cur] ^= 1;
    return &blk->exchange[set * blk->idx.size() + (size_t)(blk->cur / 32) * 32];
}

void emu_syncthreads(void) {
    wait(blk->block);
}

void emu_syncwarp(void) {
    wait(blk->warps[blk->cur / 32]);
}

/* A tensor-core mma.sync over the warp (kernels/mma.cuh has the fragment layouts): each lane
 * deposits its A and B registers, and every lane reads back the two rows of A (g and g + 8) and
 * the two columns of B (2t and 2t + 1) that its four outputs need, 32 bytes of k each. The
 * m16n8k32 e4m3, m16n8k16 bf16 and m16n8k8 tf32 fragments share this byte layout (32 bytes of k
 * per row, 4 in each register): row g's k bytes 4t'..4t'+3 are in lane 4g + t''s a[0], its bytes
 * 16 + 4t'.. in a[2]; row g + 8's in a[1] and a[3]; column n's in lane 4n + t''s b[0] and b[1]. */
static void mma_gather(const uint32_t a[4], const uint32_t b[2], uint8_t A[2][32],
                       uint8_t B[2][32]) {
    const size_t set = blk->mma_set[blk->cur] ^= 1;
    uint32_t *slots = &blk->mma[(set * blk->idx.size() + (size_t)(blk->cur / 32) * 32) * kMmaRegs];
    const int lane = emu_lane(), g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; i++)
        slots[lane * kMmaRegs + i] = a[i];
    slots[lane * kMmaRegs + 4] = b[0];
    slots[lane * kMmaRegs + 5] = b[1];
    emu_syncwarp();
    for (int u = 0; u < 4; u++) {
        const uint32_t *ra = &slots[(4 * g + u) * kMmaRegs];
        memcpy(&A[0][4 * u], &ra[0], 4);
        memcpy(&A[1][4 * u], &ra[1], 4);
        memcpy(&A[0][16 + 4 * u], &ra[2], 4);
        memcpy(&A[1][16 + 4 * u], &ra[3], 4);
        for (int c = 0; c < 2; c++) {
            const uint32_t *rb = &slots[(4 * (2 * t + c) + u) * kMmaRegs];
            memcpy(&B[c][4 * u], &rb[4], 4);
            memcpy(&B[c][16 + 4 * u], &rb[5], 4);
        }
    }
}

const float *emu_e4m3_table(void) {
    static const std::vector<float> table = [] {
        std::vector<float> v(256);
        for (int i = 0; i < 256; i++)
            v[i] = dtype_e4m3_to_f32((uint8_t)i);
        return v;
    }();
    return table.data();
}

/* The 8-bit and 16-bit mmas: each lane computes its own four outputs (rows g, g + 8 by columns
 * 2t, 2t + 1), summing the products in k order in f32 and adding the sum to its accumulator.
 * X[k] holds the k-th element of a 32-byte row, already decoded to f32. */
template <int K>
static inline void mma_f32_sums(float d[4], const float X[2][32], const float Y[2][32]) {
    /* the four sums side by side, each in k order */
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (int k = 0; k < K; k++) {
        s0 += X[0][k] * Y[0][k];
        s1 += X[0][k] * Y[1][k];
        s2 += X[1][k] * Y[0][k];
        s3 += X[1][k] * Y[1][k];
    }
    d[0] += s0;
    d[1] += s1;
    d[2] += s2;
    d[3] += s3;
}

void emu_mma_e4m3_16x8x32(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    uint8_t A[2][32], B[2][32];
    mma_gather(a, b, A, B);
    const float *lut = emu_e4m3_table();
    float X[2][32], Y[2][32];
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 32; k++) {
            X[r][k] = lut[A[r][k]];
            Y[r][k] = lut[B[r][k]];
        }
    mma_f32_sums<32>(d, X, Y);
}

void emu_mma_bf16_16x8x16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    uint8_t A[2][32], B[2][32];
    mma_gather(a, b, A, B);
    float X[2][32], Y[2][32];
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 16; k++) {
            uint16_t xa, yb;
            memcpy(&xa, &A[r][2 * k], 2);
            memcpy(&yb, &B[r][2 * k], 2);
            const uint32_t xu = (uint32_t)xa << 16, yu = (uint32_t)yb << 16; /* bf16 -> f32 */
            memcpy(&X[r][k], &xu, 4);
            memcpy(&Y[r][k], &yu, 4);
        }
    mma_f32_sums<16>(d, X, Y);
}

uint32_t emu_cvt_rna_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return u; /* inf, NaN */
    return (u + 0x1000u) & ~0x1fffu;                /* half an ulp of tf32 into the magnitude */
}

/* The tf32 mma: the products summed in double from the accumulator, rounded once. */
void emu_mma_m16n8k8_tf32(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    uint8_t A[2][32], B[2][32];
    mma_gather(a, b, A, B);
    for (int e = 0; e < 4; e++) {
        double acc = d[e];
        for (int k = 0; k < 8; k++) {
            float x, y;
            memcpy(&x, &A[e >> 1][4 * k], 4);
            memcpy(&y, &B[e & 1][4 * k], 4);
            acc += (double)x * (double)y;
        }
        d[e] = (float)acc;
    }
}
static void check_aligned(const void *p, const char *what) {
    if (reinterpret_cast<uintptr_t>(p) % 16) {
        fprintf(stderr, "emu: %s address %p not 16-byte aligned (thread %d)\n", what, p, blk->cur);
        abort();
    }
}

/* ldmatrix: lane 8 i + j's address is row j of matrix i. Non-transposed, lane 4 g + t gets
 * elements 2t, 2t + 1 of row g of each matrix; transposed, element g of rows 2t and 2t + 1. */
void emu_ldmatrix_x4(uint32_t r[4], const void *row, bool trans) {
    check_aligned(row, "ldmatrix row");
    uint64_t *slots = emu_warp_exchange();
    const int lane = emu_lane(), g = lane >> 2, t = lane & 3;
    slots[lane] = (uint64_t) reinterpret_cast<uintptr_t>(row);
    emu_syncwarp();
    for (int i = 0; i < 4; i++) {
        const uint8_t *rows[8];
        for (int j = 0; j < 8; j++)
            rows[j] = reinterpret_cast<const uint8_t *>((uintptr_t)slots[8 * i + j]);
        uint16_t lo, hi;
        if (trans) {
            memcpy(&lo, rows[2 * t] + 2 * g, 2);
            memcpy(&hi, rows[2 * t + 1] + 2 * g, 2);
        } else {
            memcpy(&lo, rows[g] + 4 * t, 2);
            memcpy(&hi, rows[g] + 4 * t + 2, 2);
        }
        r[i] = (uint32_t)lo | (uint32_t)hi << 16;
    }
}

void emu_cp_async_16(void *dst, const void *src, int src_bytes) {
    check_aligned(dst, "cp.async destination");
    if (src_bytes) check_aligned(src, "cp.async source");
    blk->cp[blk->cur].copies.push_back(CpCopy{dst, src, src_bytes});
}

void emu_cp_async_commit(void) {
    CpQueue &q = blk->cp[blk->cur];
    q.group_end.push_back(q.copies.size());
}

void emu_cp_async_wait(int n) {
    CpQueue &q = blk->cp[blk->cur];
    while ((int)(q.group_end.size() - q.groups_done) > n) {
        for (const size_t end = q.group_end[q.groups_done++]; q.done < end; q.done++) {
            const CpCopy &c = q.copies[q.done];
            memcpy(c.dst, c.src, (size_t)c.src_bytes);
            memset(static_cast<uint8_t *>(c.dst) + c.src_bytes, 0, (size_t)(16 - c.src_bytes));
        }
    }
    if (q.done == q.copies.size() && q.groups_done == q.group_end.size()) q.clear();
}

uint32_t *ops_dynamic_smem_u32(void) {
    return dyn_smem.data();
}

/* One grid at a time: the fibers, the block state and the kernels' `__shared__` statics are the
 * process's, and tensor-parallel ranks (threads) launch at the same time. */
static std::mutex launch_mu;

void emu_run_grid(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body) {
    std::lock_guard<std::mutex> lock(launch_mu);
    const int n = (int)(block.x * block.y * block.z);
    if (n <= 0 || n > 1024 || n % 32) {
        fprintf(stderr, "emu: block of %d threads not supported\n", n);
        abort();
    }
    while ((int)fibers.size() < n) {
        /* A new stack holds the frame emu_fiber_swap pops: six zero registers, then fiber_main
         * as the return address, which it enters with the stack 8 bytes off 16-byte alignment,
         * as if called. */
        char *stack = static_cast<char *>(malloc(kStack));
        stacks.push_back(stack);
        uintptr_t top = ((uintptr_t)(stack + kStack) & ~(uintptr_t)15) - 16;
        void **frame = reinterpret_cast<void **>(top) - 6;
        for (int r = 0; r < 6; r++)
            frame[r] = nullptr;
        reinterpret_cast<void **>(top)[0] = reinterpret_cast<void *>(&fiber_main);
        fibers.push_back(Fiber{frame});
    }
    emu_grid_dim = grid;
    emu_block_dim = block;
    /* Garbage, not zeros: a kernel must not rely on fresh shared memory. */
    dyn_smem.assign(smem / 4 + 1, 0xcdcdcdcdu);
    Block b;
    b.idx.resize(n);
    for (int t = 0; t < n; t++)
        b.idx[t] = make_uint3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
    b.body = &body;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                b.done.assign((size_t)n, 0);
                b.warps.assign((size_t)n / 32, Barrier{});
                for (auto &w : b.warps)
                    w.expected = 32;
                b.exchange.resize(2 * (size_t)n); /* written before read: no need to clear */
                b.mma.resize(2 * (size_t)n * kMmaRegs);
                b.exchange_set.assign((size_t)n, 0);
                b.mma_set.assign((size_t)n, 0);
                if (b.cp.size() < (size_t)n) b.cp.resize((size_t)n); /* each cleared at exit */
                b.block = Barrier{};
                b.block.expected = n;
                blk = &b;
                emu_block_idx = make_uint3(x, y, z);
                for (;;) {
                    const unsigned long long before = events;
                    const int first = next_runnable(-1);
                    if (first < 0) break;
                    b.cur = first;
                    emu_fiber_swap(&b.sched_sp, fibers[first].sp); /* one round */
                    if (events == before) {
                        int alive = 0;
                        for (int t = 0; t < n; t++)
                            alive += !b.done[t];
                        fprintf(stderr,
                                "emu: deadlock in block (%u, %u, %u): %d of %d threads at "
                                "__syncthreads, %d alive\n",
                                x, y, z, b.block.arrived, b.block.expected, alive);
                        abort();
                    }
                }
                blk = nullptr;
            }
}

/* ---- graph capture (emu_cuda.h) ----------------------------------------------------------------
 */

namespace {
/* A captured graph, and an instantiated one: the recorded stream work in order. */
struct EmuGraph {
    std::vector<std::function<void()>> ops;
};
/* The graph the calling thread is capturing into (cudaStreamCaptureModeThreadLocal), or null. */
thread_local EmuGraph *capturing = nullptr;
} // namespace

bool emu_capturing(void) {
    return capturing != nullptr;
}

void emu_capture(std::function<void()> op) {
    capturing->ops.push_back(std::move(op));
}

/* ---- CUDA runtime stubs ---------------------------------------------------------------------- */

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
    if (capturing) return cudaErrorIllegalState;
    /* fault injection for the tests: captures on this device fail */
    const char *fail = getenv("TACHYON_EMU_FAIL_CAPTURE_DEVICE");
    if (fail && atoi(fail) == current_device) return cudaErrorStreamCaptureUnsupported;
    capturing = new EmuGraph;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *graph) {
    if (!capturing) return cudaErrorIllegalState;
    *graph = reinterpret_cast<cudaGraph_t>(capturing);
    capturing = nullptr;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long) {
    if (capturing) return cudaErrorStreamCaptureUnsupported;
    *exec = reinterpret_cast<cudaGraphExec_t>(new EmuGraph(*reinterpret_cast<EmuGraph *>(graph)));
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t) {
    if (capturing) return cudaErrorStreamCaptureUnsupported;
    for (const auto &op : reinterpret_cast<EmuGraph *>(exec)->ops)
        op();
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete reinterpret_cast<EmuGraph *>(graph);
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete reinterpret_cast<EmuGraph *>(exec);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n) {
    if (capturing) return cudaErrorStreamCaptureUnsupported;
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) {
    if (capturing) return cudaErrorStreamCaptureUnsupported;
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind) {
    if (capturing) return cudaErrorStreamCaptureUnsupported;
    memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
    if (capturing) return cudaErrorStreamCaptureUnsupported;
    memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    if (capturing) return cudaErrorStreamCaptureUnsupported;
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t) {
    return "emulated";
}
cudaError_t cudaGetDevice(int *d) {
    *d = current_device;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr attr, int) {
    *v = attr == cudaDevAttrMultiProcessorCount ? 132 : 0;
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *, cudaFuncAttribute, int) {
    return cudaSuccess;
}

/* Events hold the host clock when recorded (launches run synchronously here). */
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = reinterpret_cast<cudaEvent_t>(new double(0.0));
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *reinterpret_cast<double *>(e) = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)(*reinterpret_cast<double *>(b) - *reinterpret_cast<double *>(a));
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete reinterpret_cast<double *>(e);
    return cudaSuccess;
}

/* For the kernel tests; weak, so that the emulated backend's own (kernels/cuda_backend.cu) wins
 * where it is linked. */
__attribute__((weak)) bool cuda_backend_available(void) {
    return true;
}

} /* extern "C" */

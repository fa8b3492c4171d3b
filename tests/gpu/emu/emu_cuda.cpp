/* emu_cuda: the fiber scheduler behind emu_cuda.h and stubs of the CUDA runtime calls the kernel
 * tests make (device memory is host memory; every call succeeds). */
#include "emu_cuda.h"

#include <cstdio>
#include <cstdlib>
#include <csetjmp>
#include <ctime>
#include <deque>
#include <ucontext.h>
#include <vector>

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

/* One fiber per thread index, kept from block to block and launch to launch: started through
 * makecontext once, then switched with _setjmp / _longjmp, which (unlike swapcontext) do not save
 * the signal mask: no system call per switch. A fiber that finishes its thread's body parks; the
 * next block resumes it into the body again. */
struct Fiber {
    ucontext_t ctx;
    jmp_buf jb;
    bool started = false;
};

/* One thread's cp.async copies: the open group and the committed ones, oldest first. */
struct CpCopy {
    void *dst;
    const void *src;
    int src_bytes;
};
struct CpQueue {
    std::vector<CpCopy> open;
    std::deque<std::vector<CpCopy>> groups;
};

/* The block being run: thread index t is fiber t. */
struct Block {
    std::vector<uint3> idx;
    std::vector<char> done;
    std::vector<Barrier> warps;
    std::vector<uint64_t> exchange; /* 32 slots per warp */
    std::vector<uint32_t> mma;      /* per warp: each lane's fragment registers (emu_mma) */
    std::vector<CpQueue> cp;        /* per thread: its cp.async copies in flight */
    Barrier block;
    jmp_buf sched;
    ucontext_t sched_ctx;
    int cur = 0;
    const std::function<void()> *body = nullptr;
};

Block *blk;
std::vector<uint32_t> dyn_smem;
std::vector<Fiber> fibers; /* [up to 1024], each with its stack in stacks[] */
std::vector<char *> stacks;
unsigned long long events; /* arrivals and departures: a round without any is a deadlock */

void yield_to_scheduler() {
    if (!_setjmp(fibers[blk->cur].jb)) _longjmp(blk->sched, 1);
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

void fiber_main() {
    for (;;) {
        (*blk->body)();
        blk->cp[blk->cur] = CpQueue{}; /* copies never waited for are dropped */
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
    return &blk->exchange[(size_t)(blk->cur / 32) * 32];
}

void emu_syncthreads(void) {
    wait(blk->block);
}

void emu_syncwarp(void) {
    wait(blk->warps[blk->cur / 32]);
}

/* A tensor-core mma.sync over the warp (kernels/mma.cuh has the fragment layouts): each lane
 * deposits its A and B registers, and every lane rebuilds the 16 x 32-byte A slice and the
 * 8 x 32-byte B slice from all of them. The m16n8k32 e4m3, m16n8k16 bf16 and m16n8k8 tf32
 * fragments share this byte layout (32 bytes of k per row, 4 in each register). */
static void mma_gather(const uint32_t a[4], const uint32_t b[2], uint8_t A[16][32],
                       uint8_t B[8][32]) {
    uint32_t *slots = &blk->mma[(size_t)(blk->cur / 32) * 32 * kMmaRegs];
    const int lane = emu_lane();
    for (int i = 0; i < 4; i++)
        slots[lane * kMmaRegs + i] = a[i];
    slots[lane * kMmaRegs + 4] = b[0];
    slots[lane * kMmaRegs + 5] = b[1];
    emu_syncwarp();
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, t = l & 3;
        const uint32_t *r = &slots[l * kMmaRegs];
        memcpy(&A[g][4 * t], &r[0], 4);
        memcpy(&A[g + 8][4 * t], &r[1], 4);
        memcpy(&A[g][16 + 4 * t], &r[2], 4);
        memcpy(&A[g + 8][16 + 4 * t], &r[3], 4);
        memcpy(&B[g][4 * t], &r[4], 4);
        memcpy(&B[g][16 + 4 * t], &r[5], 4);
    }
    emu_syncwarp(); /* every lane has read the slots before any lane's next mma writes them */
}

/* The 8-bit and 16-bit mmas: each lane computes its own four outputs, summing the products in
 * k order in f32 and adding the sum to its accumulator. `esize` bytes an element, decoded by
 * `decode`. */
static void emu_mma(float d[4], const uint32_t a[4], const uint32_t b[2], int esize,
                    float (*decode)(const uint8_t *)) {
    uint8_t A[16][32], B[8][32];
    mma_gather(a, b, A, B);
    const int lane = emu_lane(), g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; i++) {
        const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
        float sum = 0.0f;
        for (int k = 0; k < 32; k += esize)
            sum += decode(&A[row][k]) * decode(&B[col][k]);
        d[i] += sum;
    }
}

static float decode_e4m3(const uint8_t *p) {
    return dtype_e4m3_to_f32(*p);
}

static float decode_bf16(const uint8_t *p) {
    uint16_t bits;
    memcpy(&bits, p, 2);
    return dtype_bf16_to_f32(bits);
}

void emu_mma_e4m3_16x8x32(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    emu_mma(d, a, b, 1, decode_e4m3);
}

void emu_mma_bf16_16x8x16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    emu_mma(d, a, b, 2, decode_bf16);
}

uint32_t emu_cvt_rna_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return u; /* inf, NaN */
    return (u + 0x1000u) & ~0x1fffu;                /* half an ulp of tf32 into the magnitude */
}

/* The tf32 mma: the products summed in double from the accumulator, rounded once. */
void emu_mma_m16n8k8_tf32(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    uint8_t A[16][32], B[8][32];
    mma_gather(a, b, A, B);
    const int lane = emu_lane(), g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        double acc = d[e];
        for (int k = 0; k < 8; k++) {
            float x, y;
            memcpy(&x, &A[row][4 * k], 4);
            memcpy(&y, &B[col][4 * k], 4);
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
    emu_syncwarp(); /* every lane has read the addresses before the next exchange */
}

void emu_cp_async_16(void *dst, const void *src, int src_bytes) {
    check_aligned(dst, "cp.async destination");
    if (src_bytes) check_aligned(src, "cp.async source");
    blk->cp[blk->cur].open.push_back(CpCopy{dst, src, src_bytes});
}

void emu_cp_async_commit(void) {
    CpQueue &q = blk->cp[blk->cur];
    q.groups.push_back(std::move(q.open));
    q.open.clear();
}

void emu_cp_async_wait(int n) {
    CpQueue &q = blk->cp[blk->cur];
    while ((int)q.groups.size() > n) {
        for (const CpCopy &c : q.groups.front()) {
            memcpy(c.dst, c.src, (size_t)c.src_bytes);
            memset(static_cast<uint8_t *>(c.dst) + c.src_bytes, 0, (size_t)(16 - c.src_bytes));
        }
        q.groups.pop_front();
    }
}

uint32_t *ops_dynamic_smem_u32(void) {
    return dyn_smem.data();
}

void emu_run_grid(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body) {
    const int n = (int)(block.x * block.y * block.z);
    if (n <= 0 || n > 1024 || n % 32) {
        fprintf(stderr, "emu: block of %d threads not supported\n", n);
        abort();
    }
    fibers.reserve(1024); /* never moved: a started ucontext_t points into itself */
    while ((int)fibers.size() < n) {
        stacks.push_back(static_cast<char *>(malloc(kStack)));
        fibers.emplace_back();
        Fiber &f = fibers.back();
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = stacks.back();
        f.ctx.uc_stack.ss_size = kStack;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_main, 0);
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
    for (volatile unsigned z = 0; z < grid.z; z++)
        for (volatile unsigned y = 0; y < grid.y; y++)
            for (volatile unsigned x = 0; x < grid.x; x++) {
                b.done.assign((size_t)n, 0);
                b.warps.assign((size_t)n / 32, Barrier{});
                for (auto &w : b.warps)
                    w.expected = 32;
                b.exchange.assign((size_t)n, 0);
                b.mma.assign((size_t)n * kMmaRegs, 0);
                b.cp.assign((size_t)n, CpQueue{});
                b.block = Barrier{};
                b.block.expected = n;
                blk = &b;
                emu_block_idx = make_uint3(x, y, z);
                for (;;) {
                    volatile int alive = 0;
                    volatile unsigned long long before = events;
                    for (volatile int t = 0; t < n; t++) {
                        if (b.done[t]) continue;
                        alive++;
                        b.cur = t;
                        Fiber &f = fibers[t];
                        if (!_setjmp(b.sched)) {
                            if (!f.started) {
                                f.started = true;
                                swapcontext(&b.sched_ctx, &f.ctx);
                            } else {
                                _longjmp(f.jb, 1);
                            }
                        }
                    }
                    if (!alive) break;
                    if (events == before) {
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

/* ---- CUDA runtime stubs ---------------------------------------------------------------------- */

extern "C" {

cudaError_t cudaMalloc(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind) {
    memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
    memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t) {
    return "emulated";
}
cudaError_t cudaGetDevice(int *d) {
    *d = 0;
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

bool cuda_backend_available(void) {
    return true;
}

} /* extern "C" */

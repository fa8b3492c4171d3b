/*
 * emu_cuda: runs the kernels of kernels/ops.h on the host, for machines without a GPU.
 *
 * The kernel sources (fused.cu, attention.cu, sampling.cu) and tests/gpu/test_kernels.cu are
 * compiled as plain C++ with this header forced in first (g++ -include emu_cuda.h
 * -DOPS_HOST_EMULATION). A launch (OPS_LAUNCH in ops_common.cuh) runs the grid block after block;
 * each CUDA thread of a block is a fiber (its own stack, switched by a few instructions of x86-64
 * assembly) on the calling thread, and __syncthreads and
 * the warp shuffles and tensor-core mma.sync (kernels/mma.cuh, per-lane fragment layouts of the
 * PTX ISA) are barriers between the fibers, so the kernels' real indexing, shared
 * memory traffic and synchronization run as written: a barrier some threads skip, or a shuffle
 * only part of a warp reaches, deadlocks and is reported. Device memory is host memory; the
 * CUDA runtime calls the tests use are stubs in emu_cuda.cpp.
 *
 * What this cannot catch: data races between threads that the fibers' cooperative order hides,
 * out-of-bounds accesses that land in other host memory (build with -fsanitize=address for
 * those), and anything about real hardware timing.
 */
#ifndef TACHYON_EMU_CUDA_H
#define TACHYON_EMU_CUDA_H

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>

/* ---- execution model ------------------------------------------------------------------------- */

/* The running fiber's thread index; block index and size of the running block. */
const uint3 &emu_thread_idx(void);
extern uint3 emu_block_idx;
extern dim3 emu_block_dim, emu_grid_dim;

void emu_syncthreads(void);
void emu_syncwarp(void);
/* This warp's 32 exchange slots for the calling lane's next exchange: write your slot, then
 * emu_syncwarp(), then read. Successive calls alternate between two sets of slots, so the read
 * needs no barrier after it (emu_cuda.cpp). */
uint64_t *emu_warp_exchange(void);
int emu_lane(void);

/* Every e4m3 byte's value (dtype_e4m3_to_f32), for the emulated mma and cuBLASLt. */
const float *emu_e4m3_table(void);

/* kernels/mma.cuh's tensor-core instructions, lane by lane (emu_cuda.cpp). */
void emu_mma_e4m3_16x8x32(float d[4], const uint32_t a[4], const uint32_t b[2]);
void emu_mma_bf16_16x8x16(float d[4], const uint32_t a[4], const uint32_t b[2]);

/* ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 (kernels/mma.cuh has the layout): every lane
 * deposits its row address, then reads its registers from the 32 rows. Aborts on a row address
 * that is not 16-byte aligned, as the device faults. */
void emu_ldmatrix_x4(uint32_t r[4], const void *row, bool trans);

/* cp.async.cg 16-byte copies of the calling thread: queued at issue, grouped by commit, and
 * performed only when a wait retires their group (the oldest groups beyond the N newest), so a
 * kernel that reads a tile before waiting for it reads stale shared memory, and one that reads
 * another thread's copies without a barrier after the waits reads them before they happened
 * (in the fibers' order). src_bytes 0 zero-fills. Aborts on misaligned addresses. Copies left
 * uncommitted or unwaited when the thread exits are dropped. */
void emu_cp_async_16(void *dst, const void *src, int src_bytes);
void emu_cp_async_commit(void);
void emu_cp_async_wait(int n);

/* Runs body() as grid x block fibers, block after block; smem bytes of dynamic shared memory. */
void emu_run_grid(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);

/* CUDA graph capture, emulated (the stream-capture and graph calls are in emu_cuda.cpp): while
 * the calling thread captures (cudaStreamBeginCapture .. EndCapture), its stream work is
 * recorded instead of run: kernel launches with their arguments taken by value at the launch,
 * as a kernel node keeps them; asynchronous copies and sets with their pointers, which a replay
 * reads then; the emulated GEMMs. cudaGraphLaunch runs the record in order. While
 * TACHYON_EMU_FAIL_CAPTURE_DEVICE names the current device, captures there fail (fault injection
 * for the tests). Calls a capture
 * forbids in cudaStreamCaptureModeThreadLocal (cudaMalloc, cudaFree, cudaMemcpy, cudaMemset,
 * synchronizations) fail with cudaErrorStreamCaptureUnsupported, as on a device. */
bool emu_capturing(void);
void emu_capture(std::function<void()> op);

/* Devices (several under the emulated backend's TACHYON_EMU_DEVICES): the calling thread's
 * current one (cudaSetDevice), and streams that remember theirs (emu_stream_on). A kernel launched
 * on a stream of a device that is not current fails on a GPU (CUDA C Programming Guide, Multi-
 * Device System, "Stream and Event Behavior"; copies may cross): here the process stops, naming
 * both, so that a multi-GPU path that forgets a cudaSetDevice fails where no two GPUs are. */
int emu_current_device(void);
void emu_set_current_device(int device);
cudaStream_t emu_stream_on(int device);
void emu_check_stream(cudaStream_t s, const char *what);

template <typename K, typename... A>
void ops_emu_launch(K kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A... args) {
    emu_check_stream(stream, "a kernel launch");
    if (emu_capturing()) {
        emu_capture([=]() { emu_run_grid(grid, block, smem, [&]() { kernel(args...); }); });
        return;
    }
    emu_run_grid(grid, block, smem, [&]() { kernel(args...); });
}

#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __shared__
#define __shared__      static /* one instance, shared by the fibers of the running block */
#define threadIdx       emu_thread_idx()
#define blockIdx        emu_block_idx
#define blockDim        emu_block_dim
#define gridDim         emu_grid_dim
#define __syncthreads() emu_syncthreads()
#define __syncwarp(...) emu_syncwarp()

/* ---- warp shuffles --------------------------------------------------------------------------- */

template <typename T> static inline T emu_shfl(T v, int src) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a wide type");
    uint64_t *slot = emu_warp_exchange();
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    slot[emu_lane()] = bits;
    emu_syncwarp();
    T r;
    bits = slot[src & 31];
    memcpy(&r, &bits, sizeof r);
    return r;
}
template <typename T> static inline T emu_shfl_xor_sync(unsigned, T v, int m) {
    return emu_shfl(v, emu_lane() ^ m);
}
template <typename T> static inline T emu_shfl_sync(unsigned, T v, int src) {
    return emu_shfl(v, src);
}
template <typename T> static inline T emu_shfl_up_sync(unsigned, T v, int d) {
    return emu_shfl(v, emu_lane() >= d ? emu_lane() - d : emu_lane());
}
#define __shfl_xor_sync emu_shfl_xor_sync
#define __shfl_up_sync  emu_shfl_up_sync
#define __shfl_sync     emu_shfl_sync

/* ---- tensor cores ---------------------------------------------------------------------------- */

/* cvt.rna.tf32.f32: f32 rounded to 10 mantissa bits, to nearest with ties away from zero (the
 * low 13 bits of the result are zero). */
uint32_t emu_cvt_rna_tf32(float x);

/* mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 d, a, b, d for the calling lane, with the
 * PTX ISA's fragment layouts (groupID g = lane / 4, t = lane % 4): a0..a3 hold A (g, t),
 * (g + 8, t), (g, t + 4), (g + 8, t + 4); b0, b1 hold B (t, g), (t + 4, g); d0..d3 hold D (g, 2t),
 * (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1). Every lane of the warp must call it (it exchanges
 * the fragments through the warp's scratch); products are exact, sums in double. */
void emu_mma_m16n8k8_tf32(float d[4], const uint32_t a[4], const uint32_t b[2]);

/* ---- atomics (the fibers of a block run on one host thread: plain updates are atomic) ------ */

template <typename T> static inline T emu_atomic_add(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
template <typename T> static inline T emu_atomic_or(T *p, T v) {
    T old = *p;
    *p = old | v;
    return old;
}
#define atomicAdd emu_atomic_add
#define atomicOr  emu_atomic_or

/* ---- intrinsics ------------------------------------------------------------------------------ */

template <typename T> static inline T emu_ldcg(const T *p) {
    return *p;
}
#define __ldcg emu_ldcg

/* Correctly rounded f32 operations; the emulation is built with -ffp-contract=off. */
static inline float emu_fadd_rn(float a, float b) {
    return a + b;
}
static inline float emu_fsub_rn(float a, float b) {
    return a - b;
}
static inline float emu_fmul_rn(float a, float b) {
    return a * b;
}
static inline float emu_fdiv_rn(float a, float b) {
    return a / b;
}
static inline float emu_fsqrt_rn(float a) {
    return sqrtf(a);
}
static inline unsigned long long emu_double2ull_rn(double x) {
    return (unsigned long long)nearbyint(x);
}
static inline unsigned int emu_float_as_uint(float x) {
    unsigned int u;
    memcpy(&u, &x, sizeof u);
    return u;
}
#define __fadd_rn       emu_fadd_rn
#define __fsub_rn       emu_fsub_rn
#define __fmul_rn       emu_fmul_rn
#define __fdiv_rn       emu_fdiv_rn
#define __fsqrt_rn      emu_fsqrt_rn
#define __double2ull_rn emu_double2ull_rn
#define __float_as_uint emu_float_as_uint

using std::max;
using std::min;

#endif

/*
 * mma: warp-level tensor-core multiply-accumulates (PTX mma.sync), D = A B + D with f32
 * accumulators, the ldmatrix loads that feed them and the cp.async copies that fill their shared
 * memory tiles, for kernels that tile their own GEMMs (moe_gemm.cu, attention_mma.cu). Internal
 * to kernels/.
 *
 *   mma_e4m3_16x8x32   A 16x32 e4m3 (row), B 32x8 e4m3 (col)     sm_89+ (Hopper: sm_90a)
 *   mma_bf16_16x8x16   A 16x16 bf16 (row), B 16x8 bf16 (col)     sm_80+
 *
 * Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k32" / "mma.m16n8k16", floating point):
 * lane = 4 g + t (g = lane >> 2, t = lane & 3). Both shapes address the same bytes of a
 * 32-byte k-slice of a row: A's register 0 holds row g, bytes 4t..4t+3 of the slice (e4m3
 * columns 4t..4t+3, bf16 columns 2t, 2t+1), register 1 row g + 8 at the same bytes, registers 2
 * and 3 the same rows at bytes 16 + 4t..; B's register 0 holds column g (a weight row in a row-
 * major [n, k] matrix), bytes 4t..4t+3 of the slice, register 1 bytes 16 + 4t..; lower bytes are
 * lower k. Accumulators: d[0], d[1] row g, columns 2t, 2t + 1; d[2], d[3] row g + 8.
 *
 * Under OPS_HOST_EMULATION the instructions are emulated lane by lane with these layouts
 * (tests/gpu/emu/emu_cuda.h): every lane of the warp must call them together, as on the device.
 */
#ifndef TACHYON_MMA_CUH
#define TACHYON_MMA_CUH

#include <stdint.h>

__device__ __forceinline__ void mma_e4m3_16x8x32(float d[4], const uint32_t a[4],
                                                 const uint32_t b[2]) {
#ifdef OPS_HOST_EMULATION
    emu_mma_e4m3_16x8x32(d, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__device__ __forceinline__ void mma_bf16_16x8x16(float d[4], const uint32_t a[4],
                                                 const uint32_t b[2]) {
#ifdef OPS_HOST_EMULATION
    emu_mma_bf16_16x8x16(d, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 r, [row]: four 8 x 8 matrices of 16-bit
 * elements, one 16-byte row per lane address (lane 8 i + j gives row j of matrix i; 16-byte
 * aligned, in shared memory). Lane 4 g + t receives in r[i] row g of matrix i, elements 2t and
 * 2t + 1 (the lower in the low half), which is an mma A fragment register or a B fragment
 * register of a matrix stored with its k dimension contiguous; with .trans it receives element
 * (2t, g) and (2t + 1, g) instead, which is a B fragment register of a matrix stored [k][n]. */
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *row) {
#ifdef OPS_HOST_EMULATION
    emu_ldmatrix_x4(r, row, false);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((uint32_t)__cvta_generic_to_shared(row))
                 : "memory");
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *row) {
#ifdef OPS_HOST_EMULATION
    emu_ldmatrix_x4(r, row, true);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((uint32_t)__cvta_generic_to_shared(row))
                 : "memory");
#endif
}

/* cp.async.cg.shared.global [dst], [src], 16, src_bytes: an asynchronous 16-byte copy from
 * global to shared memory (both 16-byte aligned) that bypasses L1; src_bytes 0 writes 16 zero
 * bytes and reads nothing (src must still be a valid address). The copies a thread issued
 * since its last commit form a group (cp_async_commit); cp_async_wait<N> returns when at most
 * the N newest of its groups are still in flight, and the completed copies are then visible to
 * the issuing thread only: other threads need a barrier after their own waits. */
__device__ __forceinline__ void cp_async_16(void *dst, const void *src, bool valid) {
#ifdef OPS_HOST_EMULATION
    emu_cp_async_16(dst, src, valid ? 16 : 0);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
#endif
}

__device__ __forceinline__ void cp_async_commit(void) {
#ifdef OPS_HOST_EMULATION
    emu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N> __device__ __forceinline__ void cp_async_wait(void) {
#ifdef OPS_HOST_EMULATION
    emu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

#endif

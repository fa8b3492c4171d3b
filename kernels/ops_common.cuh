/*
 * ops_common: device helpers shared by the kernels of ops.h (attention.cu, fused.cu,
 * sampling.cu): element loads of bf16 / f32 GEMM outputs, fp8 e4m3 conversion, warp and block
 * reductions. Internal to kernels/; nothing here is part of the C API.
 */
#ifndef TACHYON_OPS_COMMON_CUH
#define TACHYON_OPS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "ops.h"

#define OPS_FULL_MASK 0xffffffffu

/* Every launch goes through OPS_LAUNCH, and dynamic shared memory through
 * ops_dynamic_smem_u32(), so that tests/gpu/emu can compile these kernels as plain C++ and run
 * them on the host (one fiber per CUDA thread) on machines without a GPU. The kernel argument
 * may be parenthesized (template arguments contain commas). */
#ifdef OPS_HOST_EMULATION
#define OPS_LAUNCH(kernel, grid, block, smem, stream, ...)                                         \
    ops_emu_launch(kernel, grid, block, smem, stream, __VA_ARGS__)
uint32_t *ops_dynamic_smem_u32(void);
#else
#define OPS_LAUNCH(kernel, grid, block, smem, stream, ...)                                         \
    kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
__device__ __forceinline__ uint32_t *ops_dynamic_smem_u32(void) {
    extern __shared__ uint32_t ops_dynamic_smem[];
    return ops_dynamic_smem;
}
#endif

/* Loads 4 consecutive elements (16-byte aligned for f32, 8-byte for bf16) as f32. */
__device__ __forceinline__ void ops_load4(const float *p, float v[4]) {
    const float4 x = *reinterpret_cast<const float4 *>(p);
    v[0] = x.x;
    v[1] = x.y;
    v[2] = x.z;
    v[3] = x.w;
}
__device__ __forceinline__ void ops_load4(const __nv_bfloat16 *p, float v[4]) {
    const uint2 raw = *reinterpret_cast<const uint2 *>(p);
    const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162 *>(&raw.x);
    const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162 *>(&raw.y);
    const float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
    v[0] = fa.x;
    v[1] = fa.y;
    v[2] = fb.x;
    v[3] = fb.y;
}

__device__ __forceinline__ float ops_to_f32(float x) {
    return x;
}
__device__ __forceinline__ float ops_to_f32(__nv_bfloat16 x) {
    return __bfloat162float(x);
}

/* e4m3 with round-to-nearest-even and saturation to +-448 (the caller has clamped already; NaN
 * stays NaN), the same encoding as dtype_f32_to_e4m3. */
__device__ __forceinline__ uint8_t ops_f32_to_e4m3(float x) {
    return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ float ops_e4m3_to_f32(uint8_t b) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
    return __half2float(__half(h));
}

/* The tensor-core attention's kernel attributes (attention_mma.cu), for ops_init. */
int attn_mma_init(err_t *err);

__device__ __forceinline__ float ops_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(OPS_FULL_MASK, v, o);
    return v;
}
__device__ __forceinline__ float ops_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(OPS_FULL_MASK, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
 * The order of additions is fixed by the thread layout, so the result is deterministic.
 * red: 32 floats of shared memory; the function synchronizes the block (all threads must call). */
__device__ __forceinline__ float ops_block_sum(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = ops_warp_sum(v);
    __syncthreads(); /* red may still be read by a previous call */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = lane < nw ? red[lane] : 0.0f;
    return ops_warp_sum(r);
}

/* Order-preserving map of a float to an unsigned key (larger float -> larger key); -0 and +0
 * share the key of +0, as they compare equal. NaN maps to keys above +inf or below -inf; callers
 * exclude NaN first. */
__device__ __forceinline__ uint32_t ops_float_key(float x) {
    uint32_t u = __float_as_uint(x + 0.0f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

#endif

#include "cb_engine.h"
#include "dummy_weights.h"

#include "cuda_check.h"
#include "ops_common.cuh" /* OPS_LAUNCH: tests/gpu/emu can run this kernel on the host */
#include "dtype_encode.h" /* the host's encoders, on the device */
#include "rng.h"
#include "weights.h"

// ---------------------------------------------------------------------------------------------
// Kernels

/* One thread per element, grid-stride; the (2u - 1) is exact, the scaling is one rounded
 * multiply (and one rounded divide for FP8), as in weights.c (no contraction: __fmul_rn). */
__global__ void dummy_fill_kernel(void *dst, bool fp8, int64_t rows, int64_t cols, int64_t ld,
                                  int64_t src_offset, int64_t src_ld, uint64_t seed,
                                  uint64_t stream) {
    int64_t n = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i - r * cols;
        float u = rng_uniform(seed, stream, (uint64_t)(src_offset + r * src_ld + c));
        float x = __fmul_rn(__fadd_rn(__fmul_rn(2.0f, u), -1.0f), WEIGHTS_DUMMY_HALF_WIDTH);
        if (fp8)
            ((uint8_t *)dst)[r * ld + c] = dtype_f32_to_e4m3(__fdiv_rn(x, WEIGHTS_DUMMY_FP8_SCALE));
        else
            ((uint16_t *)dst)[r * ld + c] = dtype_f32_to_bf16(x);
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points

extern "C" int dummy_fill(void *dst, bool fp8, int64_t rows, int64_t cols, int64_t ld,
                          uint64_t seed, uint64_t stream_id, cudaStream_t stream, err_t *err) {
    return dummy_fill_view(dst, fp8, rows, cols, ld, 0, cols, seed, stream_id, stream, err);
}

extern "C" int dummy_fill_view(void *dst, bool fp8, int64_t rows, int64_t cols, int64_t ld,
                               int64_t src_offset, int64_t src_ld, uint64_t seed,
                               uint64_t stream_id, cudaStream_t stream, err_t *err) {
    int64_t n = rows * cols;
    if (n <= 0) return 0;
    int64_t blocks = (n + 255) / 256;
#ifdef OPS_HOST_EMULATION
    const int64_t max_blocks = 4; /* every CUDA thread is a fiber there: few, long-lived ones */
#else
    const int64_t max_blocks = 132 * 64; /* a few waves of an H100/H200, grid-stride beyond */
#endif
    if (blocks > max_blocks) blocks = max_blocks;
    OPS_LAUNCH(dummy_fill_kernel, dim3((unsigned)blocks), dim3(256), 0, stream, dst, fp8, rows,
               cols, ld, src_offset, src_ld, seed, stream_id);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

/*
 * cuda_check: every CUDA runtime and cuBLAS(Lt) call is checked, with file and line, and the
 * failure is carried out as an err_t (library code never exits).
 *
 *     CUDA_CHECK(cudaMalloc(&p, bytes), err);        // returns err_set(err, ...) on failure
 *     CUBLAS_CHECK(cublasLtMatmul(...), err);
 *
 * Both macros `return` from the calling function, which must return int. Kernel launches are
 * checked with CUDA_CHECK(cudaGetLastError(), err) right after the launch.
 */
#ifndef TACHYON_CUDA_CHECK_H
#define TACHYON_CUDA_CHECK_H

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "err.h"

#define CUDA_CHECK(call, err)                                                                      \
    do {                                                                                           \
        cudaError_t cuda_check_e_ = (call);                                                        \
        if (cuda_check_e_ != cudaSuccess)                                                          \
            return err_set((err), "%s:%d: %s: %s", __FILE__, __LINE__, #call,                      \
                           cudaGetErrorString(cuda_check_e_));                                     \
    } while (0)

#define CUBLAS_CHECK(call, err)                                                                    \
    do {                                                                                           \
        cublasStatus_t cublas_check_s_ = (call);                                                   \
        if (cublas_check_s_ != CUBLAS_STATUS_SUCCESS)                                              \
            return err_set((err), "%s:%d: %s: %s", __FILE__, __LINE__, #call,                      \
                           cublasLtGetStatusString(cublas_check_s_));                              \
    } while (0)

#endif

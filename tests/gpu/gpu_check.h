/*
 * gpu_check: CK(call) for the GPU tests and microbenchmarks. These are programs, not library
 * code: a failed CUDA runtime call prints its file, line and error and exits 1.
 */
#ifndef TACHYON_GPU_CHECK_H
#define TACHYON_GPU_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif

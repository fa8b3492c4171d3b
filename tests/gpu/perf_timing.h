/*
 * perf_timing: how the GPU microbenchmarks time a call (perf_prefill_attention, perf_moe_gemm):
 * one warm-up call that sizes the run, then enough back-to-back calls to take about 0.3 s (1 to
 * max_iters), between two CUDA events; milliseconds per call. Under the host emulation one call,
 * no warm-up (its timings mean nothing). call() returns 0, or -1 with its message printed (the
 * program then exits 1).
 */
#ifndef TACHYON_PERF_TIMING_H
#define TACHYON_PERF_TIMING_H

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#include "gpu_check.h"

template <typename Call> static double perf_time_calls(Call call, int max_iters) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double ms_total = 0.0;
    int iters = 1;
#ifdef OPS_HOST_EMULATION
    const int first = 1;
#else
    const int first = 0;
#endif
    for (int round = first; round < 2; round++) { /* 0: the warm-up, which sizes round 1 */
        CK(cudaEventRecord(e0));
        for (int it = 0; it < iters; it++)
            if (call() < 0) exit(1);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        ms_total = ms;
        if (round == 0) {
            const double per = ms > 1e-3f ? ms : 1e-3;
            iters = (int)(300.0 / per);
            iters = iters < 1 ? 1 : iters > max_iters ? max_iters : iters;
        }
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return ms_total / iters;
}

#endif

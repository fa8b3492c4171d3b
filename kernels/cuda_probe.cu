#include "cuda_probe.h"

#include <cstdio>
#include <cuda_runtime.h>

extern "C" int cuda_probe_devices(char *buf, size_t size) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(buf, size, "no CUDA device (%s)", cudaGetErrorString(e));
        return 0;
    }
    size_t n = (size_t)snprintf(buf, size, "%d device%s:", count, count == 1 ? "" : "s");
    for (int i = 0; i < count && n < size; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        n += (size_t)snprintf(buf + n, size - n, "%s %s (sm_%d%d, %.0f GiB)", i ? "," : "", p.name,
                              p.major, p.minor, p.totalGlobalMem / 1073741824.0);
    }
    return count;
}

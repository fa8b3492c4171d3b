/* The CUDA runtime calls of kernels/cuda_backend.cu that tests/gpu/emu/emu_cuda.cpp does not stub,
 * for the backend's host emulation: synchronous "devices" whose memory is host memory.
 * Graph capture is emulated (tests/gpu/emu/emu_cuda.h): the asynchronous copies and sets below
 * are recorded while the calling thread captures, the synchronizations refused. */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

/* What cudaMemGetInfo reports: the tests size their pools as a fraction of it, and the backend
 * zeroes its KV pool at every engine open. */
#define EMU_DEVICE_BYTES (2ull << 30)

extern "C" {

/* The devices: 1, or TACHYON_EMU_DEVICES (1..64) for the multi-GPU paths (a rank per device
 * over the emulated NCCL, nccl_emu.cpp). They share the host's memory and run their streams'
 * work at the call, each on the calling thread. */
static int device_count(void) {
    const char *s = getenv("TACHYON_EMU_DEVICES");
    int n = s ? atoi(s) : 1;
    return n >= 1 && n <= 64 ? n : 1;
}

/* Fault injection for the tests: while TACHYON_EMU_FAIL_H2D_DEVICE names a device, host-to-device
 * copies on it are refused (cudaErrorUnknown), as on a device whose context was lost. */
static bool h2d_refused(cudaMemcpyKind kind) {
    const char *s = getenv("TACHYON_EMU_FAIL_H2D_DEVICE");
    return s && kind == cudaMemcpyHostToDevice && atoi(s) == emu_current_device();
}

cudaError_t cudaGetDeviceCount(int *n) {
    *n = device_count();
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "host emulation");
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
    p->totalGlobalMem = EMU_DEVICE_BYTES;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int device) {
    snprintf(id, (size_t)len, "0000:%02x:00.0", device);
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
    emu_set_current_device(device);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int) {
    *s = emu_stream_on(emu_current_device());
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) {
    *s = emu_stream_on(emu_current_device());
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) {
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
    return emu_capturing() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t) {
    if (h2d_refused(kind)) return cudaErrorUnknown;
    if (emu_capturing())
        emu_capture([=]() { memmove(dst, src, n); });
    else
        memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind, cudaStream_t) {
    auto copy = [=]() {
        for (size_t r = 0; r < height; r++)
            memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    };
    if (emu_capturing())
        emu_capture(copy);
    else
        copy();
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) {
    if (emu_capturing())
        emu_capture([=]() { memset(p, v, n); });
    else
        memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    *free_b = EMU_DEVICE_BYTES;
    *total = EMU_DEVICE_BYTES;
    return cudaSuccess;
}

} /* extern "C" */

/*
 * cuda_probe: what CUDA devices this process sees. The first piece of the CUDA backend; it
 * keeps the CUDA toolchain in every build (CI compiles it without a GPU).
 *
 *     char buf[256];
 *     int n = cuda_probe_devices(buf, sizeof buf);  // "1 device: NVIDIA H200 (sm_90, 139 GiB)"
 */
#ifndef TACHYON_CUDA_PROBE_H
#define TACHYON_CUDA_PROBE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Describes the visible devices into buf and returns their count; 0 (and the reason in buf)
 * when there is no driver or no device. */
int cuda_probe_devices(char *buf, size_t size);

/* Runs a one-thread kernel on device 0 and returns 0 when it wrote what it should. */
int cuda_probe_kernel(void);

#ifdef __cplusplus
}
#endif

#endif

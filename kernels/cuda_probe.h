/*
 * cuda_probe: what CUDA devices this process sees, for `tachyon version`.
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

#ifdef __cplusplus
}
#endif

#endif

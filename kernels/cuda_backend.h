/*
 * cuda_backend: the "cuda" backend of engine/backend.h (FP8 / BF16 Qwen3 on Hopper).
 *
 * main() registers it when the CUDA build is present:
 *
 *     backend_register(&cuda_backend_ops);
 *
 * and picks it by default when cuda_backend_available() finds a usable device.
 */
#ifndef TACHYON_CUDA_BACKEND_H
#define TACHYON_CUDA_BACKEND_H

#include <stdbool.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const backend_ops_t cuda_backend_ops;

/* True when the driver reports at least one device of compute capability 9.0 (Hopper). */
bool cuda_backend_available(void);

#ifdef __cplusplus
}
#endif

#endif

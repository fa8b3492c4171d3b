/*
 * hostdev: TACHYON_HD marks the small inline helpers that CUDA code calls on the device too
 * (engine/rng.h, the f32 encoders of engine/dtype_encode.h), so that the GPU reproduces the
 * host's bits (dummy weights, seeded sampling) from one definition. Plain C and the host
 * emulator of tests/gpu see nothing.
 */
#ifndef TACHYON_HOSTDEV_H
#define TACHYON_HOSTDEV_H

#ifdef __CUDACC__
#define TACHYON_HD __host__ __device__
#else
#define TACHYON_HD
#endif

#endif

/*
 * rng: counter-based random numbers. A value depends only on (seed, stream, index), never on
 * the order or the thread that asks, so that the CPU and the GPU can produce the same dummy
 * weights and a request's seed gives the same samples whatever else runs.
 *
 *     float u = rng_uniform(seed, tensor_id, i);   // [0, 1)
 *     uint64_t key = rng_key(seed, tensor_id);     // the same numbers, the stream's hash once
 *     float v = rng_uniform_keyed(key, i);         // == u
 */
#ifndef TACHYON_RNG_H
#define TACHYON_RNG_H

#include <stdint.h>

#include "hostdev.h" /* the CUDA backend draws the same numbers on the device */

/* splitmix64's finalizer: a bijective 64-bit mix. */
TACHYON_HD static inline uint64_t rng_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The key of stream `stream` under `seed`: what every element of the stream shares (a loop over
 * a stream computes it once and calls the _keyed forms). */
TACHYON_HD static inline uint64_t rng_key(uint64_t seed, uint64_t stream) {
    return rng_mix64(seed ^ rng_mix64(stream));
}

TACHYON_HD static inline float rng_uniform_keyed(uint64_t key, uint64_t index) {
    /* the 24 bits through int32: the same value, and a loop over i vectorizes (x86 has no
     * vector conversion from 64-bit integers before AVX-512) */
    return (float)(int32_t)(uint32_t)(rng_mix64(key + index) >> 40) * (1.0f / 16777216.0f);
}

/* 64 random bits for element `index` of stream `stream` under `seed`. */
TACHYON_HD static inline uint64_t rng_bits(uint64_t seed, uint64_t stream, uint64_t index) {
    return rng_mix64(rng_key(seed, stream) + index);
}

/* Uniform in [0, 1) with 24 bits of precision (exact in f32). */
TACHYON_HD static inline float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return rng_uniform_keyed(rng_key(seed, stream), index);
}

#endif

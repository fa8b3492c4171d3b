/* The dummy weights' values (weights.h, "The dummy scheme"). This file is compiled without the
 * sanitizers in the ASan build (engine/CMakeLists.txt): a 0.6B model is 600 million values,
 * and the checks on every store and on the inline helpers it calls made the sanitizer build's
 * dummy load five times slower. It only writes into the buffers it is given. */
#include "dtype.h"
#include "rng.h"
#include "weights.h"

static inline float dummy_value(uint64_t key, uint64_t i) {
    return (2.0f * rng_uniform_keyed(key, i) - 1.0f) * WEIGHTS_DUMMY_HALF_WIDTH;
}

uint16_t weights_dummy_bf16(uint64_t seed, uint64_t stream, uint64_t i) {
    return dtype_f32_to_bf16(dummy_value(rng_key(seed, stream), i));
}

uint8_t weights_dummy_e4m3(uint64_t seed, uint64_t stream, uint64_t i) {
    return dtype_f32_to_e4m3(dummy_value(rng_key(seed, stream), i) / WEIGHTS_DUMMY_FP8_SCALE);
}

void weights_dummy_fill_bf16(uint64_t seed, uint64_t stream, size_t n, uint16_t *dst) {
    uint64_t key = rng_key(seed, stream);
    for (size_t i = 0; i < n; i++)
        dst[i] = dtype_f32_to_bf16(dummy_value(key, i));
}

void weights_dummy_fill_e4m3(uint64_t seed, uint64_t stream, size_t n, uint8_t *dst) {
    uint64_t key = rng_key(seed, stream);
    for (size_t i = 0; i < n; i++)
        dst[i] = dtype_f32_to_e4m3(dummy_value(key, i) / WEIGHTS_DUMMY_FP8_SCALE);
}

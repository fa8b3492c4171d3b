/*
 * dtype_encode: f32 -> BF16 and f32 -> E4M3 encodings, inline for host and device (hostdev.h),
 * so that weights made on the GPU match the host's bit for bit.
 *
 *     uint16_t b = dtype_f32_to_bf16(x);   // round to nearest even; NaN stays a quiet NaN
 *     uint8_t q = dtype_f32_to_e4m3(x);    // round to nearest even; saturates at +-448
 */
#ifndef TACHYON_DTYPE_ENCODE_H
#define TACHYON_DTYPE_ENCODE_H

#include <stdint.h>
#include <string.h>

#include "hostdev.h"

TACHYON_HD static inline uint32_t dtype_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Round to nearest even; NaN stays a (quiet) NaN. */
TACHYON_HD static inline uint16_t dtype_f32_to_bf16(float x) {
    uint32_t u = dtype_f32_bits(x);
    /* The rounding add below would carry a NaN with a small payload into infinity. */
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* e4m3fn. Round to nearest even; beyond +-448 (infinities too) saturates to +-448, as the FP8
 * quantizers clamp before casting; NaN gives 0x7f (0xff when negative). */
TACHYON_HD static inline uint8_t dtype_f32_to_e4m3(float x) {
    uint32_t u = dtype_f32_bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return sign | 0x7f;
    if (u >= 0x43e00000u) return sign | 0x7e;
    if (u >= 0x3c800000u) {
        /* Normal in e4m3 (>= 2^-6): keep 3 mantissa bits, round to nearest even; a carry out
         * of the mantissa correctly bumps the exponent. */
        u += 0x7ffffu + ((u >> 20) & 1u);
        return sign | (uint8_t)((u >> 20) - ((127u - 7u) << 3));
    }
    /* Subnormal in e4m3: count multiples of 2^-9, rounding to nearest even. The result may be
     * 8, which is exactly the encoding of the smallest normal 2^-6. f32 subnormals (exponent
     * field 0) are far below 2^-10 and round to zero. */
    uint32_t e = u >> 23;
    if (e == 0) return sign;
    uint32_t shift = 127 + 23 - 9 - e; /* value = mant * 2^(e-150), want units of 2^-9 */
    if (shift > 24) return sign;
    uint32_t mant = (u & 0x7fffffu) | 0x800000u;
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return sign | (uint8_t)q;
}

#endif

/*
 * dtype: the element types of checkpoints and their conversions to f32.
 *
 * Names are the safetensors ones ("BF16", "F8_E4M3", ...). Conversions are exact: every BF16,
 * F16 and E4M3 value is representable in f32.
 *
 *     float x = dtype_bf16_to_f32(bits);
 *     dtype_to_f32(DT_F8_E4M3, row, out, n);
 */
#ifndef TACHYON_DTYPE_H
#define TACHYON_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "dtype_encode.h" /* dtype_f32_to_bf16, dtype_f32_to_e4m3 (host and device) */

typedef enum dtype {
    DT_BOOL,
    DT_U8,
    DT_I8,
    DT_I16,
    DT_U16,
    DT_F16,
    DT_BF16,
    DT_I32,
    DT_U32,
    DT_F32,
    DT_F64,
    DT_I64,
    DT_U64,
    DT_F8_E4M3,
    DT_F8_E5M2,
    DT_COUNT
} dtype_t;

/* "BF16" -> DT_BF16; returns -1 for an unknown name. */
int dtype_from_name(const char *name);
const char *dtype_name(dtype_t t); /* "?" for a value outside the enum */
size_t dtype_size(dtype_t t);      /* bytes per element; 0 outside the enum */

/* True for the types the engine computes with: BF16, F16, F32, F8_E4M3. */
int dtype_is_float(dtype_t t);

float dtype_bf16_to_f32(uint16_t bits);
float dtype_f16_to_f32(uint16_t bits);
float dtype_e4m3_to_f32(uint8_t bits); /* e4m3fn: no infinities, 0x7f/0xff are NaN */

/* Converts n elements of type t (little-endian, any alignment) to f32: exactly for BF16, F16,
 * F32, F8_E4M3 and F8_E5M2; F64 and the integer types (BOOL as its byte value) are rounded to the
 * nearest f32. An invalid t writes zeros. */
void dtype_to_f32(dtype_t t, const void *src, float *dst, size_t n);

#endif

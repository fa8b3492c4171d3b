#include "dtype.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtype_info[DT_COUNT] = {
    [DT_BOOL] = {"BOOL", 1}, [DT_U8] = {"U8", 1},           [DT_I8] = {"I8", 1},
    [DT_I16] = {"I16", 2},   [DT_U16] = {"U16", 2},         [DT_F16] = {"F16", 2},
    [DT_BF16] = {"BF16", 2}, [DT_I32] = {"I32", 4},         [DT_U32] = {"U32", 4},
    [DT_F32] = {"F32", 4},   [DT_F64] = {"F64", 8},         [DT_I64] = {"I64", 8},
    [DT_U64] = {"U64", 8},   [DT_F8_E4M3] = {"F8_E4M3", 1}, [DT_F8_E5M2] = {"F8_E5M2", 1},
};

int dtype_from_name(const char *name) {
    for (int t = 0; t < DT_COUNT; t++)
        if (strcmp(dtype_info[t].name, name) == 0) return t;
    return -1;
}

const char *dtype_name(dtype_t t) {
    return (unsigned)t < DT_COUNT ? dtype_info[t].name : "?";
}

size_t dtype_size(dtype_t t) {
    return (unsigned)t < DT_COUNT ? dtype_info[t].size : 0;
}

int dtype_is_float(dtype_t t) {
    return t == DT_BF16 || t == DT_F16 || t == DT_F32 || t == DT_F8_E4M3;
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

float dtype_bf16_to_f32(uint16_t bits) {
    return from_bits((uint32_t)bits << 16);
}

float dtype_f16_to_f32(uint16_t bits) {
    uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    uint32_t exp = (bits >> 10) & 0x1fu;
    uint32_t mant = bits & 0x3ffu;
    if (exp == 0x1f) return from_bits(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        /* Subnormal (or zero): mant * 2^-24 is exact in f32. */
        float m = (float)mant * 0x1p-24f;
        return sign ? -m : m;
    }
    return from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

float dtype_e4m3_to_f32(uint8_t bits) {
    uint32_t sign = (uint32_t)(bits & 0x80u) << 24;
    uint32_t exp = (bits >> 3) & 0xfu;
    uint32_t mant = bits & 0x7u;
    if (exp == 0xf && mant == 0x7) return from_bits(sign | 0x7fc00000u);
    if (exp == 0) {
        float m = (float)mant * 0x1p-9f;
        return sign ? -m : m;
    }
    return from_bits(sign | ((exp + 127 - 7) << 23) | (mant << 20));
}

static float int_at(dtype_t t, const unsigned char *p, size_t i) {
    switch (t) {
        case DT_BOOL:
        case DT_U8:
            return p[i];
        case DT_I8:
            return (int8_t)p[i];
        case DT_I16: {
            int16_t v;
            memcpy(&v, p + 2 * i, 2);
            return v;
        }
        case DT_U16: {
            uint16_t v;
            memcpy(&v, p + 2 * i, 2);
            return v;
        }
        case DT_I32: {
            int32_t v;
            memcpy(&v, p + 4 * i, 4);
            return (float)v;
        }
        case DT_U32: {
            uint32_t v;
            memcpy(&v, p + 4 * i, 4);
            return (float)v;
        }
        case DT_I64: {
            int64_t v;
            memcpy(&v, p + 8 * i, 8);
            return (float)v;
        }
        case DT_U64: {
            uint64_t v;
            memcpy(&v, p + 8 * i, 8);
            return (float)v;
        }
        default:
            return 0.0f;
    }
}

void dtype_to_f32(dtype_t t, const void *src, float *dst, size_t n) {
    /* Checkpoint data need not be aligned for the element type: load through memcpy. */
    const unsigned char *p = src;
    switch (t) {
        case DT_BF16:
            for (size_t i = 0; i < n; i++) {
                uint16_t v;
                memcpy(&v, p + 2 * i, 2);
                dst[i] = dtype_bf16_to_f32(v);
            }
            break;
        case DT_F16:
            for (size_t i = 0; i < n; i++) {
                uint16_t v;
                memcpy(&v, p + 2 * i, 2);
                dst[i] = dtype_f16_to_f32(v);
            }
            break;
        case DT_F32:
            memcpy(dst, src, n * sizeof(float));
            break;
        case DT_F8_E4M3:
            for (size_t i = 0; i < n; i++)
                dst[i] = dtype_e4m3_to_f32(p[i]);
            break;
        case DT_F8_E5M2:
            /* e5m2 is the upper byte of an f16. */
            for (size_t i = 0; i < n; i++)
                dst[i] = dtype_f16_to_f32((uint16_t)(p[i] << 8));
            break;
        case DT_F64:
            for (size_t i = 0; i < n; i++) {
                double v;
                memcpy(&v, p + 8 * i, 8);
                dst[i] = (float)v;
            }
            break;
        default:
            for (size_t i = 0; i < n; i++)
                dst[i] = int_at(t, p, i);
            break;
    }
}

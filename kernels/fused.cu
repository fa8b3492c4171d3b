/*
 * fused: the memory-bound kernels around the GEMMs of a Qwen3 layer (ops.h): embedding gather,
 * residual add + RMSNorm (+ per-token-group FP8 quantization with transposed scales), q/k
 * RMSNorm + NeoX RoPE + paged KV write, SwiGLU (+ FP8 quantization), standalone FP8
 * quantization. One CTA per token row; f32 arithmetic in the CPU reference's operation order
 * (explicit _rn intrinsics where nvcc would otherwise contract a multiply and an add into an
 * FMA that the CPU does not do).
 */
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cb_engine.h" /* first: C linkage for the engine headers */
#include "cuda_check.h"
#include "ops.h"
#include "ops_common.cuh"

namespace {

constexpr int kRowThreads = 256; /* 8 warps: one FP8 group of 128 columns per warp at a time */
constexpr int kRowWarps = kRowThreads / 32;

/* ---- kernels -------------------------------------------------------------------------------- */

/* resid[t, :] = f32(table[ids[t], :]); H % 8 == 0 so each thread moves 16-byte chunks. */
__global__ void __launch_bounds__(kRowThreads)
    embed_kernel(const __nv_bfloat16 *__restrict__ table, const int32_t *__restrict__ ids, int H,
                 float *__restrict__ resid) {
    const int t = blockIdx.x;
    const __nv_bfloat16 *src = table + (int64_t)ids[t] * H;
    float *dst = resid + (int64_t)t * H;
    for (int c = threadIdx.x * 8; c < H; c += kRowThreads * 8) {
        const uint4 raw = *reinterpret_cast<const uint4 *>(src + c);
        const __nv_bfloat162 *p = reinterpret_cast<const __nv_bfloat162 *>(&raw);
        float4 lo, hi;
        float2 f;
        f = __bfloat1622float2(p[0]);
        lo.x = f.x;
        lo.y = f.y;
        f = __bfloat1622float2(p[1]);
        lo.z = f.x;
        lo.w = f.y;
        f = __bfloat1622float2(p[2]);
        hi.x = f.x;
        hi.y = f.y;
        f = __bfloat1622float2(p[3]);
        hi.z = f.x;
        hi.w = f.y;
        *reinterpret_cast<float4 *>(dst + c) = lo;
        *reinterpret_cast<float4 *>(dst + c + 4) = hi;
    }
}

/* Quantizes one row whose values come from src(c, v[4]) (columns c..c+3, zeros at or beyond K)
 * into out_row [K_pad] e4m3 and scales[g * T_pad + t]. Warp w takes groups w, w + 8, ...; lane
 * l takes columns g * 128 + 4l .. +3, so a group's amax is one warp reduction. valid == false
 * writes the zero padding row (scale 0). */
template <class Src>
__device__ __forceinline__ void quant_row(const Src &src, bool valid, int K, int K_pad, int t,
                                          int T_pad, uint8_t *__restrict__ out_row,
                                          float *__restrict__ scales, int part = 0,
                                          int n_parts = 1) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n_groups = (K_pad + OPS_FP8_GROUP - 1) / OPS_FP8_GROUP;
    for (int g = part * kRowWarps + warp; g < n_groups; g += n_parts * kRowWarps) {
        const int c = g * OPS_FP8_GROUP + lane * 4;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (valid && c < K) src(c, v);
        float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
        amax = ops_warp_max(amax);
        const float s = valid ? fmaxf(amax, 1e-10f) / 448.0f : 0.0f;
        if (c < K_pad) {
            uint32_t packed = 0;
            if (valid) {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float q = fminf(fmaxf(v[i] / s, -448.0f), 448.0f);
                    packed |= (uint32_t)ops_f32_to_e4m3(q) << (8 * i);
                }
            }
            *reinterpret_cast<uint32_t *>(out_row + c) = packed;
        }
        if (lane == 0) scales[(int64_t)g * T_pad + t] = s;
    }
}

/* Pass 1 of the residual norms: r = resid[row] (+ add[row], written back), returns sum(r^2)
 * over the block. The same thread later rereads exactly the columns it wrote (4 per 1024-column
 * stride, matching quant_row's layout), so no extra barrier is needed for its own writes. */
template <typename AddT>
__device__ __forceinline__ float residual_pass(float *__restrict__ r, const AddT *__restrict__ add,
                                               int H, float *red) {
    float ss = 0.0f;
    for (int c = threadIdx.x * 4; c < H; c += kRowThreads * 4) {
        float v[4];
        ops_load4(r + c, v);
        if (add) {
            float a[4];
            ops_load4(add + c, a);
#pragma unroll
            for (int i = 0; i < 4; i++)
                v[i] = __fadd_rn(v[i], a[i]);
            *reinterpret_cast<float4 *>(r + c) = make_float4(v[0], v[1], v[2], v[3]);
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
            ss = fmaf(v[i], v[i], ss);
    }
    return ops_block_sum(ss, red);
}

/* 1 / sqrt(mean + eps) exactly as cpu_rmsnorm rounds it. */
__device__ __forceinline__ float rms_inv(float sumsq, int n, float eps) {
    const float var = __fdiv_rn(sumsq, (float)n);
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, eps)));
}

template <typename AddT>
__global__ void __launch_bounds__(kRowThreads)
    add_rmsnorm_bf16_kernel(float *__restrict__ resid, const AddT *__restrict__ add,
                            const int32_t *__restrict__ rows, int H, const float *__restrict__ w,
                            float eps, __nv_bfloat16 *__restrict__ out) {
    __shared__ float red[32];
    const int i = blockIdx.x;
    const int64_t r = rows ? rows[i] : i;
    float *x = resid + r * H;
    const float inv = rms_inv(residual_pass(x, add ? add + r * H : nullptr, H, red), H, eps);
    __nv_bfloat16 *o = out + (int64_t)i * H;
    for (int c = threadIdx.x * 4; c < H; c += kRowThreads * 4) {
        float v[4], g[4];
        ops_load4(x + c, v);
        ops_load4(w + c, g);
        __nv_bfloat162 lo = __floats2bfloat162_rn(__fmul_rn(g[0], __fmul_rn(v[0], inv)),
                                                  __fmul_rn(g[1], __fmul_rn(v[1], inv)));
        __nv_bfloat162 hi = __floats2bfloat162_rn(__fmul_rn(g[2], __fmul_rn(v[2], inv)),
                                                  __fmul_rn(g[3], __fmul_rn(v[3], inv)));
        uint2 packed;
        packed.x = *reinterpret_cast<uint32_t *>(&lo);
        packed.y = *reinterpret_cast<uint32_t *>(&hi);
        *reinterpret_cast<uint2 *>(o + c) = packed;
    }
}

struct NormSrc {
    const float *x, *w;
    float inv;
    __device__ void operator()(int c, float v[4]) const {
        float a[4], g[4];
        ops_load4(x + c, a);
        ops_load4(w + c, g);
#pragma unroll
        for (int i = 0; i < 4; i++)
            v[i] = __fmul_rn(g[i], __fmul_rn(a[i], inv));
    }
};

/* Grid T_pad: rows >= n_rows are the zero padding of the GEMM input. */
template <typename AddT>
__global__ void __launch_bounds__(kRowThreads)
    add_rmsnorm_fp8_kernel(float *__restrict__ resid, const AddT *__restrict__ add,
                           const int32_t *__restrict__ rows, int n_rows, int T_pad, int H,
                           const float *__restrict__ w, float eps, uint8_t *__restrict__ out,
                           float *__restrict__ scales) {
    __shared__ float red[32];
    const int i = blockIdx.x;
    uint8_t *o = out + (int64_t)i * H;
    if (i >= n_rows) { /* uniform over the block: no barrier is skipped by only some threads */
        quant_row(NormSrc{nullptr, nullptr, 0.0f}, false, H, H, i, T_pad, o, scales);
        return;
    }
    const int64_t r = rows ? rows[i] : i;
    float *x = resid + r * H;
    const float inv = rms_inv(residual_pass(x, add ? add + r * H : nullptr, H, red), H, eps);
    quant_row(NormSrc{x, w, inv}, true, H, H, i, T_pad, o, scales);
}

template <typename T> struct RowSrc {
    const T *x;
    __device__ void operator()(int c, float v[4]) const {
        ops_load4(x + c, v);
    }
};

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    quant_fp8_kernel(const T *__restrict__ x, int64_t ld_x, int T_rows, int K, int T_pad, int K_pad,
                     uint8_t *__restrict__ out, float *__restrict__ scales) {
    const int t = blockIdx.x;
    const bool valid = t < T_rows;
    quant_row(RowSrc<T>{valid ? x + (int64_t)t * ld_x : x}, valid, K, K_pad, t, T_pad,
              out + (int64_t)t * K_pad, scales, blockIdx.y, gridDim.y);
}

/* SiLU(gate) * up as the CPU computes it: g / (1 + expf(-g)) * u. */
__device__ __forceinline__ float silu_mul(float g, float u) {
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

template <typename T> struct SiluSrc {
    const T *gate, *up;
    __device__ void operator()(int c, float v[4]) const {
        float g[4], u[4];
        ops_load4(gate + c, g);
        ops_load4(up + c, u);
#pragma unroll
        for (int i = 0; i < 4; i++)
            v[i] = silu_mul(g[i], u[i]);
    }
};

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    silu_mul_fp8_kernel(const T *__restrict__ gu, int64_t ld_gu, int T_rows, int I, int T_pad,
                        int I_pad, uint8_t *__restrict__ out, float *__restrict__ scales) {
    const int t = blockIdx.x;
    const bool valid = t < T_rows;
    const T *row = gu + (valid ? (int64_t)t * ld_gu : 0);
    quant_row(SiluSrc<T>{row, row + I}, valid, I, I_pad, t, T_pad, out + (int64_t)t * I_pad, scales,
              blockIdx.y, gridDim.y);
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    silu_mul_bf16_kernel(const T *__restrict__ gu, int64_t ld_gu, int I,
                         __nv_bfloat16 *__restrict__ out) {
    const int t = blockIdx.x;
    const T *gate = gu + (int64_t)t * ld_gu, *up = gate + I;
    __nv_bfloat16 *o = out + (int64_t)t * I;
    for (int c = threadIdx.x * 4; c < I; c += kRowThreads * 4) {
        float g[4], u[4];
        ops_load4(gate + c, g);
        ops_load4(up + c, u);
        __nv_bfloat162 lo = __floats2bfloat162_rn(silu_mul(g[0], u[0]), silu_mul(g[1], u[1]));
        __nv_bfloat162 hi = __floats2bfloat162_rn(silu_mul(g[2], u[2]), silu_mul(g[3], u[3]));
        uint2 packed;
        packed.x = *reinterpret_cast<uint32_t *>(&lo);
        packed.y = *reinterpret_cast<uint32_t *>(&hi);
        *reinterpret_cast<uint2 *>(o + c) = packed;
    }
}

/* One CTA per token, one warp per head (q heads, then k heads, then v heads). Lane l holds the
 * NeoX pairs (j, j + D/2) for j = l + 32 i, i < D/64, so the rotation needs no shuffles. */
template <int D, typename T, typename KV>
__global__ void __launch_bounds__(kRowThreads)
    qk_norm_rope_kv_kernel(const T *__restrict__ qkv, int64_t ld_qkv, int n_heads, int n_kv_heads,
                           const float *__restrict__ q_norm, const float *__restrict__ k_norm,
                           float eps, const float *__restrict__ inv_freq,
                           const int32_t *__restrict__ positions,
                           const int64_t *__restrict__ slot_mapping,
                           __nv_bfloat16 *__restrict__ q_out, KV *__restrict__ k_cache,
                           KV *__restrict__ v_cache, float k_scale, float v_scale) {
    constexpr int P = D / 64; /* pairs per lane */
    constexpr int half = D / 2;
    const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const T *row = qkv + (int64_t)t * ld_qkv;
    const float pos = (float)positions[t];
    const int64_t slot = slot_mapping[t];
    const int n_all = n_heads + 2 * n_kv_heads;

    float cs[P], sn[P];
#pragma unroll
    for (int i = 0; i < P; i++) {
        const float angle = __fmul_rn(pos, inv_freq[lane + 32 * i]);
        cs[i] = cosf(angle);
        sn[i] = sinf(angle);
    }

    for (int h = warp; h < n_all; h += kRowWarps) {
        const bool is_q = h < n_heads, is_k = !is_q && h < n_heads + n_kv_heads;
        if (!is_q && slot < 0) continue; /* warp-uniform: k/v of an unwritten token */
        const T *src = row + (int64_t)h * D;
        float a[P], b[P];
#pragma unroll
        for (int i = 0; i < P; i++) {
            a[i] = ops_to_f32(src[lane + 32 * i]);
            b[i] = ops_to_f32(src[lane + 32 * i + half]);
        }
        if (is_q || is_k) {
            float ss = 0.0f;
#pragma unroll
            for (int i = 0; i < P; i++)
                ss = fmaf(b[i], b[i], fmaf(a[i], a[i], ss));
            const float inv = rms_inv(ops_warp_sum(ss), D, eps);
            const float *w = is_q ? q_norm : k_norm;
#pragma unroll
            for (int i = 0; i < P; i++) {
                const int j = lane + 32 * i;
                const float x = __fmul_rn(w[j], __fmul_rn(a[i], inv));
                const float y = __fmul_rn(w[j + half], __fmul_rn(b[i], inv));
                a[i] = __fsub_rn(__fmul_rn(x, cs[i]), __fmul_rn(y, sn[i]));
                b[i] = __fadd_rn(__fmul_rn(y, cs[i]), __fmul_rn(x, sn[i]));
            }
        }
        if (is_q) {
            __nv_bfloat16 *dst = q_out + ((int64_t)t * n_heads + h) * D;
#pragma unroll
            for (int i = 0; i < P; i++) {
                dst[lane + 32 * i] = __float2bfloat16_rn(a[i]);
                dst[lane + 32 * i + half] = __float2bfloat16_rn(b[i]);
            }
            continue;
        }
        const int kvh = is_k ? h - n_heads : h - n_heads - n_kv_heads;
        KV *dst = (is_k ? k_cache : v_cache) + (slot * n_kv_heads + kvh) * D;
        const float kv_scale = is_k ? k_scale : v_scale;
#pragma unroll
        for (int i = 0; i < P; i++) {
            if constexpr (sizeof(KV) == 1) {
                dst[lane + 32 * i] =
                    ops_f32_to_e4m3(fminf(fmaxf(a[i] / kv_scale, -448.0f), 448.0f));
                dst[lane + 32 * i + half] =
                    ops_f32_to_e4m3(fminf(fmaxf(b[i] / kv_scale, -448.0f), 448.0f));
            } else {
                dst[lane + 32 * i] = __float2bfloat16_rn(a[i]);
                dst[lane + 32 * i + half] = __float2bfloat16_rn(b[i]);
            }
        }
    }
}

/* ---- launchers ------------------------------------------------------------------------------ */

int check_row_dims(const char *what, int n_rows, int H, err_t *err) {
    if (n_rows < 0 || H <= 0 || H % 8)
        return err_set(err,
                       "%s: bad shape (rows %d, columns %d; columns must be a positive "
                       "multiple of 8)",
                       what, n_rows, H);
    return 0;
}

int check_fp8_dims(const char *what, int n_rows, int T_pad, int K, int K_pad, err_t *err) {
    if (check_row_dims(what, n_rows, K, err) < 0) return -1;
    if (T_pad < n_rows || T_pad % 4 || K_pad < K || K_pad % 4)
        return err_set(err,
                       "%s: bad padding (rows %d -> %d, columns %d -> %d; padded sizes must "
                       "be multiples of 4 and not smaller)",
                       what, n_rows, T_pad, K, K_pad);
    return 0;
}

template <int D> int launch_qkv(const ops_qkv_args_t *a, cudaStream_t stream, err_t *err) {
    const dim3 grid(a->T), block(kRowThreads);
#define QKV_LAUNCH(T, KV)                                                                          \
    OPS_LAUNCH((qk_norm_rope_kv_kernel<D, T, KV>), grid, block, 0, stream, (const T *)a->qkv,      \
               a->ld_qkv, a->n_heads, a->n_kv_heads, a->q_norm, a->k_norm, a->eps, a->inv_freq,    \
               a->positions, a->slot_mapping, (__nv_bfloat16 *)a->q_out, (KV *)a->k_cache,         \
               (KV *)a->v_cache, a->k_scale, a->v_scale)
    if (a->qkv_dtype == OPS_BF16) {
        if (a->kv_dtype == OPS_KV_BF16)
            QKV_LAUNCH(__nv_bfloat16, __nv_bfloat16);
        else
            QKV_LAUNCH(__nv_bfloat16, uint8_t);
    } else {
        if (a->kv_dtype == OPS_KV_BF16)
            QKV_LAUNCH(float, __nv_bfloat16);
        else
            QKV_LAUNCH(float, uint8_t);
    }
#undef QKV_LAUNCH
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

} // namespace

/* ---- public entry points -------------------------------------------------------------------- */

extern "C" int ops_pad_tokens(int T) {
    return (T + 3) & ~3;
}

extern "C" size_t ops_kv_pool_bytes(int num_blocks, int block_size, int n_kv_heads, int head_dim,
                                    ops_kv_dtype_t dtype) {
    return (size_t)num_blocks * (size_t)block_size * (size_t)n_kv_heads * (size_t)head_dim *
           (dtype == OPS_KV_FP8 ? 1u : 2u);
}

extern "C" int ops_embed(const void *table, const int32_t *ids, int T, int H, float *resid,
                         cudaStream_t stream, err_t *err) {
    if (check_row_dims("ops_embed", T, H, err) < 0) return -1;
    if (T == 0) return 0;
    OPS_LAUNCH((embed_kernel), T, kRowThreads, 0, stream, (const __nv_bfloat16 *)table, ids, H,
               resid);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int ops_add_rmsnorm_bf16(float *resid, const void *add, ops_dtype_t add_dtype,
                                    const int32_t *rows, int n_rows, int H, const float *w,
                                    float eps, void *out, cudaStream_t stream, err_t *err) {
    if (check_row_dims("ops_add_rmsnorm_bf16", n_rows, H, err) < 0) return -1;
    if (n_rows == 0) return 0;
    if (add_dtype == OPS_BF16 || !add)
        OPS_LAUNCH((add_rmsnorm_bf16_kernel<__nv_bfloat16>), n_rows, kRowThreads, 0, stream, resid,
                   (const __nv_bfloat16 *)add, rows, H, w, eps, (__nv_bfloat16 *)out);
    else
        OPS_LAUNCH((add_rmsnorm_bf16_kernel<float>), n_rows, kRowThreads, 0, stream, resid,
                   (const float *)add, rows, H, w, eps, (__nv_bfloat16 *)out);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int ops_add_rmsnorm_fp8(float *resid, const void *add, ops_dtype_t add_dtype,
                                   const int32_t *rows, int n_rows, int T_pad, int H,
                                   const float *w, float eps, void *out, float *scales,
                                   cudaStream_t stream, err_t *err) {
    if (check_fp8_dims("ops_add_rmsnorm_fp8", n_rows, T_pad, H, H, err) < 0) return -1;
    if (T_pad == 0) return 0;
    if (add_dtype == OPS_BF16 || !add)
        OPS_LAUNCH((add_rmsnorm_fp8_kernel<__nv_bfloat16>), T_pad, kRowThreads, 0, stream, resid,
                   (const __nv_bfloat16 *)add, rows, n_rows, T_pad, H, w, eps, (uint8_t *)out,
                   scales);
    else
        OPS_LAUNCH((add_rmsnorm_fp8_kernel<float>), T_pad, kRowThreads, 0, stream, resid,
                   (const float *)add, rows, n_rows, T_pad, H, w, eps, (uint8_t *)out, scales);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int ops_qk_norm_rope_kv(const ops_qkv_args_t *a, cudaStream_t stream, err_t *err) {
    if (a->T < 0 || a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads || !(a->k_scale > 0.0f) ||
        !(a->v_scale > 0.0f))
        return err_set(err,
                       "ops_qk_norm_rope_kv: bad shape (T %d, heads %d / %d, k/v scales %g / %g)",
                       a->T, a->n_heads, a->n_kv_heads, (double)a->k_scale, (double)a->v_scale);
    if (a->ld_qkv < (int64_t)(a->n_heads + 2 * a->n_kv_heads) * a->head_dim)
        return err_set(err, "ops_qk_norm_rope_kv: row stride %lld below the row width",
                       (long long)a->ld_qkv);
    if (a->T == 0) return 0;
    switch (a->head_dim) {
        case 64:
            return launch_qkv<64>(a, stream, err);
        case 128:
            return launch_qkv<128>(a, stream, err);
        default:
            return err_set(err, "ops_qk_norm_rope_kv: head_dim %d not supported (64, 128)",
                           a->head_dim);
    }
}

/* Grid of the row-wise quantizers without a row reduction (quant_fp8, silu_mul_fp8): one block
 * per row, and at few rows each row's FP8 groups spread over blocks (blockIdx.y) up to about
 * kRowTargetBlocks so that a decode step's handful of rows still fills the GPU (one block per row
 * ran a 17,408-wide SiLU row through 17 groups per warp in turn: 18 us a layer at batch 1 on the
 * H200, 9 % of a decode step). */
constexpr int kRowTargetBlocks = 256;
static dim3 row_grid(int T_pad, int K_pad) {
    const int n_groups = (K_pad + OPS_FP8_GROUP - 1) / OPS_FP8_GROUP;
    int parts = (n_groups + kRowWarps - 1) / kRowWarps;
    const int want = (kRowTargetBlocks + T_pad - 1) / T_pad;
    if (parts > want) parts = want;
    return dim3((unsigned)T_pad, (unsigned)(parts > 0 ? parts : 1));
}

extern "C" int ops_quant_fp8(const void *x, ops_dtype_t x_dtype, int64_t ld_x, int T, int K,
                             int T_pad, int K_pad, void *out, float *scales, cudaStream_t stream,
                             err_t *err) {
    if (check_fp8_dims("ops_quant_fp8", T, T_pad, K, K_pad, err) < 0) return -1;
    if (ld_x < K || ld_x % 4)
        return err_set(err, "ops_quant_fp8: bad row stride %lld", (long long)ld_x);
    if (T_pad == 0) return 0;
    if (x_dtype == OPS_BF16)
        OPS_LAUNCH((quant_fp8_kernel<__nv_bfloat16>), row_grid(T_pad, K_pad), kRowThreads, 0,
                   stream, (const __nv_bfloat16 *)x, ld_x, T, K, T_pad, K_pad, (uint8_t *)out,
                   scales);
    else
        OPS_LAUNCH((quant_fp8_kernel<float>), row_grid(T_pad, K_pad), kRowThreads, 0, stream,
                   (const float *)x, ld_x, T, K, T_pad, K_pad, (uint8_t *)out, scales);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int ops_silu_mul_bf16(const void *gu, ops_dtype_t gu_dtype, int64_t ld_gu, int T, int I,
                                 void *out, cudaStream_t stream, err_t *err) {
    if (check_row_dims("ops_silu_mul_bf16", T, I, err) < 0) return -1;
    if (ld_gu < 2 * (int64_t)I || ld_gu % 4)
        return err_set(err, "ops_silu_mul_bf16: bad row stride %lld", (long long)ld_gu);
    if (T == 0) return 0;
    if (gu_dtype == OPS_BF16)
        OPS_LAUNCH((silu_mul_bf16_kernel<__nv_bfloat16>), T, kRowThreads, 0, stream,
                   (const __nv_bfloat16 *)gu, ld_gu, I, (__nv_bfloat16 *)out);
    else
        OPS_LAUNCH((silu_mul_bf16_kernel<float>), T, kRowThreads, 0, stream, (const float *)gu,
                   ld_gu, I, (__nv_bfloat16 *)out);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int ops_silu_mul_fp8(const void *gu, ops_dtype_t gu_dtype, int64_t ld_gu, int T, int I,
                                int T_pad, int I_pad, void *out, float *scales, cudaStream_t stream,
                                err_t *err) {
    if (check_fp8_dims("ops_silu_mul_fp8", T, T_pad, I, I_pad, err) < 0) return -1;
    if (ld_gu < 2 * (int64_t)I || ld_gu % 4)
        return err_set(err, "ops_silu_mul_fp8: bad row stride %lld", (long long)ld_gu);
    if (T_pad == 0) return 0;
    if (gu_dtype == OPS_BF16)
        OPS_LAUNCH((silu_mul_fp8_kernel<__nv_bfloat16>), row_grid(T_pad, I_pad), kRowThreads, 0,
                   stream, (const __nv_bfloat16 *)gu, ld_gu, T, I, T_pad, I_pad, (uint8_t *)out,
                   scales);
    else
        OPS_LAUNCH((silu_mul_fp8_kernel<float>), row_grid(T_pad, I_pad), kRowThreads, 0, stream,
                   (const float *)gu, ld_gu, T, I, T_pad, I_pad, (uint8_t *)out, scales);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

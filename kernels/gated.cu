/*
 * gated: the kernels of Qwen3.5's gated full attention (ATTN_GATED, models.md 4.5) around the
 * shared attention kernels (ops.h): the q / gate split with q / k RMSNorm, partial NeoX RoPE
 * and the paged KV write, and the sigmoid output gate. The CPU twins are cpu_rmsnorm and
 * cpu_rope_apply over the first rotary_dim dims (engine/cpu/cpu_ops.h) and the backend's
 * output gate (engine/cpu/cpu_backend.c); tests/gpu/test_qwen35_kernels.cu compares them.
 *
 * Also the input of Qwen3.5's MTP head (models.md 4.8): the embedding of the next token and a
 * hidden state, each RMS-normalized, side by side (its CPU twin: cpu_rmsnorm, cpu_mtp.c).
 *
 * The norm weights arrive with Qwen3.5's 1 + w already applied (the backend's upload), so the
 * norm itself is Qwen3's. One CTA per token, one warp per head; a head's normalized values go
 * through shared memory because RoPE pairs (j, j + rotary_dim / 2) need not sit in one lane.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cb_engine.h" /* first: C linkage for the engine headers */
#include "cuda_check.h"
#include "ops_common.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxD = OPS_GATED_MAX_HEAD_DIM;
constexpr int kPer = kMaxD / 32; /* elements per lane at most */

/* One CTA per token: q heads (from the [q_h | gate_h] pairs), then k heads, then v heads. */
template <typename T, typename KV>
__global__ void __launch_bounds__(kThreads)
    gated_qk_kernel(const T *__restrict__ qkv, int64_t ld_qkv, int n_heads, int n_kv_heads, int D,
                    int rotary_dim, const float *__restrict__ q_norm,
                    const float *__restrict__ k_norm, float eps, const float *__restrict__ inv_freq,
                    const int32_t *__restrict__ positions, const int64_t *__restrict__ slot_mapping,
                    __nv_bfloat16 *__restrict__ q_out, KV *__restrict__ k_cache,
                    KV *__restrict__ v_cache, float k_scale, float v_scale) {
    __shared__ float xs[kWarps][kMaxD];
    __shared__ float cs[kMaxD / 2], sn[kMaxD / 2];
    const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int half = rotary_dim / 2;
    const T *row = qkv + (int64_t)t * ld_qkv;
    const int64_t slot = slot_mapping[t];
    const float pos = (float)positions[t];
    for (int j = threadIdx.x; j < half; j += kThreads) {
        const float angle = __fmul_rn(pos, inv_freq[j]);
        cs[j] = cosf(angle);
        sn[j] = sinf(angle);
    }
    __syncthreads();
    const int n_all = n_heads + 2 * n_kv_heads, qw = 2 * n_heads * D;
    for (int h = warp; h < n_all; h += kWarps) {
        const bool is_q = h < n_heads, is_k = !is_q && h < n_heads + n_kv_heads;
        if (!is_q && slot < 0) continue; /* warp-uniform: k/v of an unwritten token */
        const T *src = is_q   ? row + (int64_t)h * 2 * D
                       : is_k ? row + qw + (int64_t)(h - n_heads) * D
                              : row + qw + (int64_t)(n_kv_heads + h - n_heads - n_kv_heads) * D;
        float v[kPer];
#pragma unroll
        for (int i = 0; i < kPer; i++) {
            const int e = lane + 32 * i;
            v[i] = e < D ? ops_to_f32(src[e]) : 0.0f;
        }
        if (is_q || is_k) {
            float ss = 0.0f;
#pragma unroll
            for (int i = 0; i < kPer; i++)
                ss = fmaf(v[i], v[i], ss);
            const float var = __fdiv_rn(ops_warp_sum(ss), (float)D);
            const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, eps)));
            const float *w = is_q ? q_norm : k_norm;
            __syncwarp(); /* the previous head's reads of xs are done */
#pragma unroll
            for (int i = 0; i < kPer; i++) {
                const int e = lane + 32 * i;
                if (e < D) xs[warp][e] = v[i] = __fmul_rn(w[e], __fmul_rn(v[i], inv));
            }
            __syncwarp();
#pragma unroll
            for (int i = 0; i < kPer; i++) {
                const int e = lane + 32 * i;
                if (e >= rotary_dim) continue;
                if (e < half) /* x cos - rotate_half(x) sin, rotate_half(x)[e] = -x[e + half] */
                    v[i] = __fsub_rn(__fmul_rn(xs[warp][e], cs[e]),
                                     __fmul_rn(xs[warp][e + half], sn[e]));
                else
                    v[i] = __fadd_rn(__fmul_rn(xs[warp][e], cs[e - half]),
                                     __fmul_rn(xs[warp][e - half], sn[e - half]));
            }
        }
        if (is_q) {
            __nv_bfloat16 *dst = q_out + ((int64_t)t * n_heads + h) * D;
#pragma unroll
            for (int i = 0; i < kPer; i++)
                if (lane + 32 * i < D) dst[lane + 32 * i] = __float2bfloat16_rn(v[i]);
            continue;
        }
        const int kvh = is_k ? h - n_heads : h - n_heads - n_kv_heads;
        KV *dst = (is_k ? k_cache : v_cache) + (slot * n_kv_heads + kvh) * D;
        const float kv_scale = is_k ? k_scale : v_scale;
#pragma unroll
        for (int i = 0; i < kPer; i++) {
            const int e = lane + 32 * i;
            if (e >= D) continue;
            if constexpr (sizeof(KV) == 1)
                dst[e] = ops_f32_to_e4m3(fminf(fmaxf(v[i] / kv_scale, -448.0f), 448.0f));
            else
                dst[e] = __float2bfloat16_rn(v[i]);
        }
    }
}

/* Grid T: att[t, h D + d] = bf16(att * sigmoid(gate_h[d])), gate_h in the q_proj output. */
template <typename T>
__global__ void __launch_bounds__(kThreads)
    output_gate_kernel(__nv_bfloat16 *__restrict__ att, const T *__restrict__ qkv, int64_t ld_qkv,
                       int n_heads, int D) {
    const int t = blockIdx.x, qd = n_heads * D;
    const T *row = qkv + (int64_t)t * ld_qkv;
    for (int i = threadIdx.x; i < qd; i += kThreads) {
        const int h = i / D, d = i - h * D;
        const float g = ops_to_f32(row[(int64_t)h * 2 * D + D + d]);
        __nv_bfloat16 *o = att + (int64_t)t * qd + i;
        *o = __float2bfloat16_rn(__bfloat162float(*o) * (1.0f / (1.0f + expf(-g))));
    }
}

/* One CTA per (token, half): half 0 normalizes embed[ids[t]], half 1 hidden[rows[t]] (bf16
 * rows of H), into out[t, half H .. (half + 1) H) as bf16. f32 sums in the fused kernels' order
 * (ops_block_sum), the CPU's rounding of 1 / sqrt(mean + eps). */
__global__ void __launch_bounds__(kThreads)
    mtp_input_kernel(const __nv_bfloat16 *__restrict__ embed, const int32_t *__restrict__ ids,
                     const __nv_bfloat16 *__restrict__ hidden, const int32_t *__restrict__ rows,
                     int H, const float *__restrict__ w_e, const float *__restrict__ w_h, float eps,
                     __nv_bfloat16 *__restrict__ out) {
    __shared__ float red[32];
    const int t = blockIdx.x, half = blockIdx.y;
    const __nv_bfloat16 *x =
        half == 0 ? embed + (int64_t)ids[t] * H : hidden + (int64_t)rows[t] * H;
    const float *w = half == 0 ? w_e : w_h;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < H; c += kThreads) {
        const float v = __bfloat162float(x[c]);
        ss = fmaf(v, v, ss);
    }
    ss = ops_block_sum(ss, red);
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)H), eps)));
    __nv_bfloat16 *o = out + (int64_t)t * 2 * H + (int64_t)half * H;
    for (int c = threadIdx.x; c < H; c += kThreads)
        o[c] = __float2bfloat16_rn(__fmul_rn(w[c], __fmul_rn(__bfloat162float(x[c]), inv)));
}

/* One thread per sequence (ops_mtp_advance). */
__global__ void __launch_bounds__(kThreads)
    mtp_advance_kernel(int n, const sampler_result_t *__restrict__ res,
                       int32_t *__restrict__ drafts, int advance, int32_t *__restrict__ ids,
                       int32_t *__restrict__ pos, int64_t *__restrict__ slots,
                       int32_t *__restrict__ ctx, const int32_t *__restrict__ tables, int stride,
                       int block_size, const int32_t *__restrict__ last_pos,
                       int32_t *__restrict__ rows) {
    const int s = blockIdx.x * kThreads + threadIdx.x;
    if (s >= n) return;
    const int32_t tok = res[s].token;
    drafts[s] = tok;
    if (!advance) return;
    ids[s] = tok;
    rows[s] = s;
    const int p = pos[s] + 1;
    if (p <= last_pos[s]) {
        pos[s] = p;
        ctx[s] = p + 1;
        slots[s] =
            (int64_t)tables[(int64_t)s * stride + p / block_size] * block_size + p % block_size;
    } else {
        slots[s] = -1; /* past its last draft: recomputes its last position, writes nothing */
    }
}

} // namespace

/* ---- public entry points --------------------------------------------------------------------- */

extern "C" int ops_mtp_advance(int n, const sampler_result_t *res, int32_t *drafts, int advance,
                               int32_t *ids, int32_t *pos, int64_t *slots, int32_t *ctx,
                               const int32_t *tables, int stride, int block_size,
                               const int32_t *last_pos, int32_t *rows, cudaStream_t stream,
                               err_t *err) {
    if (n < 0 || stride < 1 || block_size < 1)
        return err_set(err, "ops_mtp_advance: bad shape (n %d, stride %d, block size %d)", n,
                       stride, block_size);
    if (n == 0) return 0;
    OPS_LAUNCH((mtp_advance_kernel), dim3((unsigned)((n + kThreads - 1) / kThreads)), kThreads, 0,
               stream, n, res, drafts, advance ? 1 : 0, ids, pos, slots, ctx, tables, stride,
               block_size, last_pos, rows);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int ops_mtp_input(const void *embed, const int32_t *ids, const void *hidden,
                             const int32_t *rows, int T, int H, const float *w_e, const float *w_h,
                             float eps, void *out, cudaStream_t stream, err_t *err) {
    if (T < 0 || H <= 0) return err_set(err, "ops_mtp_input: bad shape (T %d, H %d)", T, H);
    if (T == 0) return 0;
    OPS_LAUNCH((mtp_input_kernel), dim3((unsigned)T, 2), kThreads, 0, stream,
               (const __nv_bfloat16 *)embed, ids, (const __nv_bfloat16 *)hidden, rows, H, w_e, w_h,
               eps, (__nv_bfloat16 *)out);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int ops_gated_qk_norm_rope_kv(const ops_qkv_args_t *a, int rotary_dim,
                                         cudaStream_t stream, err_t *err) {
    if (a->T < 0 || a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads || !(a->k_scale > 0.0f) ||
        !(a->v_scale > 0.0f) || a->head_dim <= 0 || a->head_dim % 32 || a->head_dim > kMaxD ||
        rotary_dim < 2 || rotary_dim % 2 || rotary_dim > a->head_dim)
        return err_set(err,
                       "ops_gated_qk_norm_rope_kv: bad shape (T %d, heads %d / %d of %d, rotary "
                       "%d, k/v scales %g / %g; head_dim a multiple of 32 up to %d)",
                       a->T, a->n_heads, a->n_kv_heads, a->head_dim, rotary_dim, (double)a->k_scale,
                       (double)a->v_scale, kMaxD);
    if (a->ld_qkv < (int64_t)(2 * a->n_heads + 2 * a->n_kv_heads) * a->head_dim)
        return err_set(err, "ops_gated_qk_norm_rope_kv: row stride %lld below the row width",
                       (long long)a->ld_qkv);
    if (a->T == 0) return 0;
#define GATED_QK(X, KV)                                                                            \
    OPS_LAUNCH((gated_qk_kernel<X, KV>), dim3((unsigned)a->T), kThreads, 0, stream,                \
               (const X *)a->qkv, a->ld_qkv, a->n_heads, a->n_kv_heads, a->head_dim, rotary_dim,   \
               a->q_norm, a->k_norm, a->eps, a->inv_freq, a->positions, a->slot_mapping,           \
               (__nv_bfloat16 *)a->q_out, (KV *)a->k_cache, (KV *)a->v_cache, a->k_scale,          \
               a->v_scale)
    if (a->qkv_dtype == OPS_BF16) {
        if (a->kv_dtype == OPS_KV_BF16)
            GATED_QK(__nv_bfloat16, __nv_bfloat16);
        else
            GATED_QK(__nv_bfloat16, uint8_t);
    } else {
        if (a->kv_dtype == OPS_KV_BF16)
            GATED_QK(float, __nv_bfloat16);
        else
            GATED_QK(float, uint8_t);
    }
#undef GATED_QK
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int ops_output_gate(void *att, const void *qkv, ops_dtype_t qkv_dtype, int64_t ld_qkv,
                               int T, int n_heads, int head_dim, cudaStream_t stream, err_t *err) {
    if (T < 0 || n_heads <= 0 || head_dim <= 0 || ld_qkv < 2 * (int64_t)n_heads * head_dim)
        return err_set(err, "ops_output_gate: bad shape (T %d, %d heads of %d, row stride %lld)", T,
                       n_heads, head_dim, (long long)ld_qkv);
    if (T == 0) return 0;
    if (qkv_dtype == OPS_BF16)
        OPS_LAUNCH((output_gate_kernel<__nv_bfloat16>), dim3((unsigned)T), kThreads, 0, stream,
                   (__nv_bfloat16 *)att, (const __nv_bfloat16 *)qkv, ld_qkv, n_heads, head_dim);
    else
        OPS_LAUNCH((output_gate_kernel<float>), dim3((unsigned)T), kThreads, 0, stream,
                   (__nv_bfloat16 *)att, (const float *)qkv, ld_qkv, n_heads, head_dim);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

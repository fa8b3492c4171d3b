/*
 * attention_mma: the tensor-core prefill attention (FlashAttention-2's structure on mma.sync),
 * which ops_attention_prefill (attention.cu) runs for head_dim 128 and 256, bf16 or fp8 KV.
 *
 * Rows, tiles and masks are the CUDA-core kernel's: a row is one query token x one of the G
 * query heads of a KV head (token-major, so the group shares every K / V tile), row (i, g) of a
 * sequence sees keys [0, context_len - n_new + i], and the grid is flat over the 64-row tiles of
 * all sequences (find_tile). A CTA is 4 warps, 16 rows each.
 *
 * Per CTA: q rows [64][D] bf16 in shared memory (rows padded by 16 bytes, so the 8 rows an
 * ldmatrix reads hit 8 different 16-byte bank groups), and K / V tiles of BN keys (64 for
 * D = 128, 32 for D = 256) double-buffered: cp.async brings tile n + 1 (gathered through the
 * block table, zero-filled past the CTA's last key) while the warps compute on tile n.
 * An fp8 cache is copied raw into a double-buffered staging area, and each thread converts the
 * chunks it copied to bf16 (x k_scale or v_scale) into a single bf16 stage after its wait, before
 * the barrier (so that two CTAs fit an SM: 85 / 83 KiB at D = 128 bf16 / fp8, 99 / 98 at 256).
 *
 * Per warp and tile: S = Q K^T with mma.m16n8k16 (bf16 in, f32 accumulate): A = q rows by
 * ldmatrix.x4, B = K rows by ldmatrix.x4 (K stored [key][dim] is B "col" with k = dim
 * contiguous); the causal mask and the online softmax in registers in the log2 domain (each
 * lane holds rows g and g + 8 of its warp's 16, row maxima over the 4 lanes of a quad); the
 * probabilities, rounded to bf16, are reused in registers as the A fragments of O += P V, with
 * B = V by ldmatrix.x4.trans (V stored [key][dim] is B [k][n]). O, m and l stay in f32; O / l is
 * written as bf16. A warp whose rows all end before a tile skips its math (the causal
 * triangle), but still takes part in the loads and barriers.
 *
 * Numerics against the CPU's f32 two-pass softmax: scores are exact bf16 products summed in
 * f32 (another order); P is rounded to bf16 (relative 2^-9 per weight) before P V, while l
 * sums the unrounded f32 weights, as FlashAttention does. tests/gpu/test_attention.cu derives
 * its tolerance from that.
 */
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cb_engine.h" /* first: C linkage for the engine headers */
#include "attention.cuh"
#include "cuda_check.h"
#include "mma.cuh"
#include "ops.h"
#include "ops_common.cuh"

namespace {

constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps; /* rows per CTA */
constexpr int kPad = 8;            /* bf16 elements of padding per shared row */

template <int D, typename KV> struct Tile {
    static constexpr int BN = D == 256 ? 32 : 64;       /* keys per tile */
    static constexpr int LD = D + kPad;                 /* bf16 elements per shared row */
    static constexpr int CH = D * (int)sizeof(KV) / 16; /* 16-byte chunks per cache row */
    static constexpr int EPC = 16 / (int)sizeof(KV);    /* cache elements per chunk */
    static constexpr bool FP8 = sizeof(KV) == 1;
    static constexpr size_t q_bytes = (size_t)kRows * LD * 2;
    static constexpr size_t kv_bytes = (size_t)BN * LD * 2; /* one bf16 K or V tile */
    static constexpr size_t raw_bytes = FP8 ? (size_t)BN * D : 0;
    /* q, K[2], V[2], then (fp8) raw K[2], raw V[2] */
    /* bf16 tiles: two stages, filled by cp.async; fp8: the raw copies are double-buffered and
     * each is converted into one bf16 stage (free once the previous tile's barrier is passed) */
    static constexpr int STAGES = FP8 ? 1 : 2;
    static constexpr size_t smem = q_bytes + 2 * STAGES * kv_bytes + 4 * raw_bytes;
    static constexpr int LOADS = BN * CH / (kWarps * 32); /* chunks per thread and tensor */
    static_assert(BN * CH % (kWarps * 32) == 0, "every thread copies whole chunks");
};

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

/* Grid: prefill (tiles of the batch, 1, n_kv_heads); decode (num_splits, n_seqs, n_kv_heads),
 * where the CTA takes the G rows of sequence blockIdx.y's one query token and split
 * blockIdx.x of its keys; 128 threads; Tile<D, KV>::smem bytes of dynamic shared memory. */
template <int D, typename KV, bool DECODE>
__global__ void __launch_bounds__(kWarps * 32)
    attn_mma_kernel(const AttnParams p, int num_splits, float *__restrict__ ws_o,
                    float *__restrict__ ws_lse) {
    using T = Tile<D, KV>;
    constexpr int BN = T::BN, LD = T::LD;
    uint8_t *smem = reinterpret_cast<uint8_t *>(ops_dynamic_smem_u32());
    __nv_bfloat16 *sQ = reinterpret_cast<__nv_bfloat16 *>(smem);
    __nv_bfloat16 *sK = reinterpret_cast<__nv_bfloat16 *>(smem + T::q_bytes);
    __nv_bfloat16 *sV =
        reinterpret_cast<__nv_bfloat16 *>(smem + T::q_bytes + T::STAGES * T::kv_bytes);
    uint8_t *rawK = smem + T::q_bytes + 2 * T::STAGES * T::kv_bytes;
    uint8_t *rawV = rawK + 2 * T::raw_bytes;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int kvh = blockIdx.z;
    const int G = p.n_heads / p.n_kv_heads;
    const int split = DECODE ? (int)blockIdx.x : 0;
    int tile, q0, n_q, ctx;
    const int s = cta_sequence<kWarps, DECODE>(p, G, kRows, &tile, &q0, &n_q, &ctx);
    if (s < 0) return;          /* uniform over the CTA */
    const int base = ctx - n_q; /* keys cached before this step's tokens */
    const int row0 = tile * kRows, total = n_q * G;
    if (row0 >= total) return;
    /* The CTA's keys: [kv_lo, kv_hi); a decode split covers whole tiles of the sequence's keys,
     * so that with one split the tiles are the prefill's (the same numerics, row by row). */
    int kv_lo = 0, kv_hi = base + (min(total, row0 + kRows) - 1) / G + 1;
    if (DECODE) {
        const int chunk = ((ctx + num_splits - 1) / num_splits + BN - 1) / BN * BN;
        kv_lo = split * chunk;
        kv_hi = min(kv_hi, kv_lo + chunk);
    }

    /* This lane's two rows (g and g + 8 of the warp's 16) and their key limits (exclusive). */
    int lim[2], tok[2], head[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int gr = row0 + warp * 16 + g + 8 * h, i = gr / G;
        tok[h] = q0 + i;
        head[h] = kvh * G + gr % G;
        lim[h] = gr < total ? base + i + 1 : 0;
    }
    const int wlast = min(total, row0 + warp * 16 + 16) - 1; /* the warp's last row */
    const int warp_hi = wlast >= row0 + warp * 16 ? base + wlast / G + 1 : 0;
    const bool to_ws = DECODE && num_splits > 1; /* partial results for merge_kernel */

    if (kv_lo >= kv_hi) { /* an empty split (short context): contributes nothing to the merge */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (!to_ws || lim[h] == 0) continue;
            const int64_t o = ((int64_t)s * p.n_heads + head[h]) * num_splits + split;
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                *reinterpret_cast<float2 *>(ws_o + o * D + 8 * n + 2 * t) = make_float2(0.f, 0.f);
            if (t == 0) ws_lse[o] = -INFINITY;
        }
        return;
    }

    /* q rows (zeros past the last row) into sQ: group 0 with the first tile. */
    for (int idx = tid; idx < kRows * (D / 8); idx += kWarps * 32) {
        const int r = idx / (D / 8), c = idx % (D / 8), gr = row0 + r;
        const bool valid = gr < total;
        const __nv_bfloat16 *src = p.q;
        if (valid) src = p.q + ((int64_t)(q0 + gr / G) * p.n_heads + kvh * G + gr % G) * D + 8 * c;
        cp_async_16(sQ + r * LD + 8 * c, src, valid);
    }

    const int32_t *table = p.block_tables + (int64_t)s * p.block_table_stride;
    const int64_t tok_stride = (int64_t)p.n_kv_heads * D; /* elements per slot */
    const KV *kc = static_cast<const KV *>(p.k_cache) + (int64_t)kvh * D;
    const KV *vc = static_cast<const KV *>(p.v_cache) + (int64_t)kvh * D;

    /* Issues the copies of the tile at key kt into stage st (zeros past kv_hi). */
    auto load_tile = [&](int kt, int st) {
#pragma unroll
        for (int u = 0; u < T::LOADS; u++) {
            const int idx = tid + u * kWarps * 32, key = idx / T::CH, c = idx % T::CH;
            const bool valid = kt + key < kv_hi;
            const KV *ks = kc, *vs = vc;
            if (valid) {
                const int kk = kt + key;
                const int64_t slot =
                    (int64_t)table[kk / p.block_size] * p.block_size + kk % p.block_size;
                ks = kc + slot * tok_stride + c * T::EPC;
                vs = vc + slot * tok_stride + c * T::EPC;
            }
            if (T::FP8) {
                cp_async_16(rawK + st * T::raw_bytes + key * D + c * 16, ks, valid);
                cp_async_16(rawV + st * T::raw_bytes + key * D + c * 16, vs, valid);
            } else {
                cp_async_16(sK + (st * BN + key) * LD + c * 8, ks, valid);
                cp_async_16(sV + (st * BN + key) * LD + c * 8, vs, valid);
            }
        }
    };
    /* fp8: converts the chunks this thread copied into stage st to bf16 (after its wait). */
    auto convert_tile = [&](int st) {
#pragma unroll
        for (int u = 0; u < T::LOADS; u++) {
            const int idx = tid + u * kWarps * 32, key = idx / T::CH, c = idx % T::CH;
#pragma unroll
            for (int kv = 0; kv < 2; kv++) {
                const float scale = kv ? p.v_scale : p.k_scale;
                const uint4 raw = *reinterpret_cast<const uint4 *>(
                    (kv ? rawV : rawK) + st * T::raw_bytes + key * D + c * 16);
                const uint8_t *b = reinterpret_cast<const uint8_t *>(&raw);
                __nv_bfloat16 *dst = (kv ? sV : sK) + key * LD + c * 16; /* the one stage */
                uint32_t w[8];
#pragma unroll
                for (int e = 0; e < 8; e++)
                    w[e] = pack_bf16(ops_e4m3_to_f32(b[2 * e]) * scale,
                                     ops_e4m3_to_f32(b[2 * e + 1]) * scale);
                *reinterpret_cast<uint4 *>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
                *reinterpret_cast<uint4 *>(dst + 8) = make_uint4(w[4], w[5], w[6], w[7]);
            }
        }
    };

    float o_acc[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o_acc[n][e] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; /* l: this lane's partial sums */

    /* ldmatrix row addresses of this lane: lane 8 i + j gives row j of matrix i. */
    const int mi = lane >> 3, mj = lane & 7;
    const __nv_bfloat16 *qrow = sQ + (warp * 16 + (mi & 1) * 8 + mj) * LD + (mi >> 1) * 8;
    const int krow = (mi >> 1) * 8 + mj, kcol = (mi & 1) * 8; /* + 8 j keys, + 16 kk dims */
    const int vrow = (mi & 1) * 8 + mj, vcol = (mi >> 1) * 8; /* + 16 kk keys, + 8 n dims */

    const int n_tiles = (kv_hi - kv_lo + BN - 1) / BN;
    load_tile(kv_lo, 0);
    cp_async_commit();
    for (int it = 0; it < n_tiles; it++) {
        const int st = it & 1, kt = kv_lo + it * BN;
        if (it + 1 < n_tiles) load_tile(kt + BN, st ^ 1);
        cp_async_commit(); /* possibly empty: the wait below always leaves one group */
        cp_async_wait<1>();
        if (T::FP8) convert_tile(st);
        __syncthreads(); /* tile it (and q) visible to every warp */

        if (kt < warp_hi) {                 /* uniform over the warp */
            const int cs = T::FP8 ? 0 : st; /* the bf16 stage */
            const __nv_bfloat16 *Ks = sK + cs * BN * LD, *Vs = sV + cs * BN * LD;
            float sc[BN / 8][4];
#pragma unroll
            for (int j = 0; j < BN / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    sc[j][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t a[4];
                ldmatrix_x4(a, qrow + 16 * kk);
#pragma unroll
                for (int j = 0; j < BN / 8; j += 2) {
                    uint32_t b[4];
                    ldmatrix_x4(b, Ks + (8 * j + krow) * LD + 16 * kk + kcol);
                    mma_bf16_16x8x16(sc[j], a, b);
                    mma_bf16_16x8x16(sc[j + 1], a, b + 2);
                }
            }

            /* Mask, then the online softmax update of rows g (h = 0) and g + 8 (h = 1). */
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int j = 0; j < BN / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int h = e >> 1, key = kt + 8 * j + 2 * t + (e & 1);
                    const float x = key < lim[h] ? sc[j][e] * p.scale_log2 : -INFINITY;
                    sc[j][e] = x;
                    mx[h] = fmaxf(mx[h], x);
                }
            float alpha[2], mu[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(OPS_FULL_MASK, mx[h], 1));
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(OPS_FULL_MASK, mx[h], 2));
                const float m_new = fmaxf(m[h], mx[h]);
                mu[h] = m_new == -INFINITY ? 0.0f : m_new; /* a row with no key yet */
                alpha[h] = exp2f(m[h] - mu[h]);
                m[h] = m_new;
            }
            float rs[2] = {0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < BN / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    sc[j][e] = exp2f(sc[j][e] - mu[e >> 1]);
                    rs[e >> 1] += sc[j][e];
                }
#pragma unroll
            for (int h = 0; h < 2; h++)
                l[h] = l[h] * alpha[h] + rs[h];
#pragma unroll
            for (int n = 0; n < D / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    o_acc[n][e] *= alpha[e >> 1];

                    /* O += P V: P's accumulators of keys 16 kk.. are the A fragment of k-step kk.
                     */
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                uint32_t a[4];
                a[0] = pack_bf16(sc[2 * kk][0], sc[2 * kk][1]);
                a[1] = pack_bf16(sc[2 * kk][2], sc[2 * kk][3]);
                a[2] = pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
                a[3] = pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
                for (int n = 0; n < D / 8; n += 2) {
                    uint32_t b[4];
                    ldmatrix_x4_trans(b, Vs + (16 * kk + vrow) * LD + 8 * n + vcol);
                    mma_bf16_16x8x16(o_acc[n], a, b);
                    mma_bf16_16x8x16(o_acc[n + 1], a, b + 2);
                }
            }
        }
        __syncthreads(); /* every warp is done with stage st before it is refilled */
    }

    /* l over the quad, then O / l as bf16, or (decode splits) as f32 with m + log2 l to the
     * workspace; rows past the last are not written. */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(OPS_FULL_MASK, l[h], 1);
        l[h] += __shfl_xor_sync(OPS_FULL_MASK, l[h], 2);
        if (lim[h] == 0) continue;
        const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
        if (to_ws) {
            const int64_t o = ((int64_t)s * p.n_heads + head[h]) * num_splits + split;
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                *reinterpret_cast<float2 *>(ws_o + o * D + 8 * n + 2 * t) =
                    make_float2(o_acc[n][2 * h] * inv, o_acc[n][2 * h + 1] * inv);
            if (t == 0) ws_lse[o] = l[h] > 0.0f ? m[h] + log2f(l[h]) : -INFINITY;
            continue;
        }
        __nv_bfloat16 *out = p.out + ((int64_t)tok[h] * p.n_heads + head[h]) * D + 2 * t;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *reinterpret_cast<uint32_t *>(out + 8 * n) =
                pack_bf16(o_acc[n][2 * h] * inv, o_acc[n][2 * h + 1] * inv);
    }
}

/* Raises the kernel's dynamic shared memory limit above the default 48 KiB. */
template <int D, typename KV, bool DECODE> int set_smem(err_t *err) {
    CUDA_CHECK(cudaFuncSetAttribute((const void *)attn_mma_kernel<D, KV, DECODE>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)Tile<D, KV>::smem),
               err);
    return 0;
}

template <int D, typename KV>
int launch_prefill(const ops_attn_args_t *a, int max_q_len, cudaStream_t stream, err_t *err) {
    const int64_t tiles = prefill_tiles(a, max_q_len, kRows, err);
    if (tiles < 0) return -1;
    const dim3 grid((unsigned)tiles, 1, a->n_kv_heads);
    constexpr size_t smem = Tile<D, KV>::smem;
    OPS_LAUNCH((attn_mma_kernel<D, KV, false>), grid, kWarps * 32, smem, stream, make_params(a), 1,
               nullptr, nullptr);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

template <int D, typename KV>
int launch_decode(const ops_attn_args_t *a, int num_splits, float *ws_o, float *ws_lse,
                  cudaStream_t stream, err_t *err) {
    const dim3 grid(num_splits, a->n_seqs, a->n_kv_heads);
    constexpr size_t smem = Tile<D, KV>::smem;
    OPS_LAUNCH((attn_mma_kernel<D, KV, true>), grid, kWarps * 32, smem, stream, make_params(a),
               num_splits, ws_o, ws_lse);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

} // namespace

int attn_mma_init(err_t *err) {
    if (set_smem<128, __nv_bfloat16, false>(err) < 0 || set_smem<128, uint8_t, false>(err) < 0 ||
        set_smem<256, __nv_bfloat16, false>(err) < 0 || set_smem<256, uint8_t, false>(err) < 0 ||
        set_smem<128, __nv_bfloat16, true>(err) < 0 || set_smem<128, uint8_t, true>(err) < 0 ||
        set_smem<256, __nv_bfloat16, true>(err) < 0 || set_smem<256, uint8_t, true>(err) < 0)
        return -1;
    return 0;
}

bool attn_mma_applies(const ops_attn_args_t *a) {
    return a->head_dim == 128 || a->head_dim == 256;
}

int attn_prefill_mma(const ops_attn_args_t *a, int max_q_len, cudaStream_t stream, err_t *err) {
    const bool fp8 = a->kv_dtype == OPS_KV_FP8;
    if (a->head_dim == 256)
        return fp8 ? launch_prefill<256, uint8_t>(a, max_q_len, stream, err)
                   : launch_prefill<256, __nv_bfloat16>(a, max_q_len, stream, err);
    return fp8 ? launch_prefill<128, uint8_t>(a, max_q_len, stream, err)
               : launch_prefill<128, __nv_bfloat16>(a, max_q_len, stream, err);
}

int attn_decode_mma(const ops_attn_args_t *a, int num_splits, float *ws_o, float *ws_lse,
                    cudaStream_t stream, err_t *err) {
    const bool fp8 = a->kv_dtype == OPS_KV_FP8;
    if (a->head_dim == 256)
        return fp8 ? launch_decode<256, uint8_t>(a, num_splits, ws_o, ws_lse, stream, err)
                   : launch_decode<256, __nv_bfloat16>(a, num_splits, ws_o, ws_lse, stream, err);
    return fp8 ? launch_decode<128, uint8_t>(a, num_splits, ws_o, ws_lse, stream, err)
               : launch_decode<128, __nv_bfloat16>(a, num_splits, ws_o, ws_lse, stream, err);
}

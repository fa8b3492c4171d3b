/*
 * attention: causal softmax attention over the paged KV cache (ops.h), one kernel for varlen
 * prefill and decode, plus the log-sum-exp merge of split-KV (Flash-Decoding) partials.
 *
 * A CTA owns one (sequence, KV head) pair, a tile of "rows" (a row is one query token x one of
 * the G = n_heads / n_kv_heads query heads that share the KV head, so K and V are read once for
 * the whole group), and a range of keys. Keys stream through shared memory 32 at a time (one
 * per lane): a warp computes its rows' 32 scores with lane j on key j (q broadcast from shared
 * memory, K rows padded to an odd number of words so the 32 lanes hit 32 banks), then an online
 * softmax update in the log2 domain (q is pre-scaled by scale * log2 e), then P.V with lane l
 * owning dims 2(l + 32i), +1. Everything accumulates in f32; K/V tiles are bf16 in shared
 * memory (an fp8 cache is dequantized on the way in, exactly when k_scale / v_scale are powers of
 * two).
 *
 * Prefill: rows are token-major over the sequence's new tokens, 32 rows per CTA; row (i, g)
 * sees keys [0, context_len - n_new + i]. Decode: the G rows of the sequence's last token; with
 * num_splits > 1, split k covers keys [k c, (k+1) c) with c = roundup(ceil(ctx / splits), 32),
 * writes o / l and m + log2 l to the workspace, and merge_kernel combines the splits. A mixed
 * batch (ops_attn_args_t.mixed) runs its one-token sequences here as decode (one launch and one
 * merge for all of them; the other sequences' CTAs return at once) and the rest as prefill.
 *
 * CUDA cores only (no tensor cores). ops_attention_prefill and ops_attention_decode run the
 * tensor-core kernel (attention_mma.cu) for head_dim 128 and 256 (decode included, so that a
 * row's numerics are the same whichever path computes it: batch invariance), and this one for
 * head_dim 64; ops_attention_prefill_simt and ops_attention_decode_simt run this one for any
 * head_dim (comparisons, benchmarks). merge_kernel combines either kernel's decode splits.
 */
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cb_engine.h" /* first: C linkage for the engine headers */
#include "cuda_check.h"
#include "ops.h"
#include "attention.cuh"
#include "ops_common.cuh"

namespace {

constexpr int kBK = 32;          /* keys per shared-memory tile: one per lane */
constexpr int kPrefillWarps = 8; /* prefill CTA: 8 warps x 4 rows = 32 rows */
constexpr int kPrefillRpw = 4;
constexpr int kDecodeWarps = 4; /* decode CTA: 4 warps x ceil(G / 4) rows */

/* Prefill rows per warp: head_dim 256 (Qwen3.5) takes one, so that its q rows and K / V tiles
 * stay within the 48 KiB of static shared memory. */
template <int D> constexpr int prefill_rpw() {
    return D == 256 ? 1 : kPrefillRpw;
}

/* Converts one 16-byte chunk of a cache row into bf16 pairs in shared memory: chunk c of a
 * bf16 row is elements 8c..8c+7 (words 4c..4c+3); of an fp8 row, elements 16c..16c+15. */
__device__ __forceinline__ void store_chunk(__nv_bfloat162 *row, int c, uint4 raw,
                                            const __nv_bfloat16 *, float) {
    const __nv_bfloat162 *p = reinterpret_cast<const __nv_bfloat162 *>(&raw);
#pragma unroll
    for (int i = 0; i < 4; i++)
        row[4 * c + i] = p[i];
}
__device__ __forceinline__ void store_chunk(__nv_bfloat162 *row, int c, uint4 raw, const uint8_t *,
                                            float kv_scale) {
    const uint8_t *b = reinterpret_cast<const uint8_t *>(&raw);
#pragma unroll
    for (int i = 0; i < 8; i++)
        row[8 * c + i] = __floats2bfloat162_rn(ops_e4m3_to_f32(b[2 * i]) * kv_scale,
                                               ops_e4m3_to_f32(b[2 * i + 1]) * kv_scale);
}

/* ---- kernels -------------------------------------------------------------------------------- */

/* Grid: (tiles or splits, n_seqs, n_kv_heads); NW * 32 threads; NW * RPW rows. KV is the cache
 * element type (__nv_bfloat16 or uint8_t for e4m3). */
template <int D, int NW, int RPW, bool DECODE, typename KV>
__global__ void __launch_bounds__(NW * 32)
    attn_kernel(const AttnParams p, int num_splits, float *__restrict__ ws_o,
                float *__restrict__ ws_lse) {
    constexpr int ROWS = NW * RPW;
    constexpr int KW = D / 2 + 1;                /* words per shared K/V row (odd) */
    constexpr int CH = D * (int)sizeof(KV) / 16; /* 16-byte chunks per cache row */
    constexpr int EPC = 16 / (int)sizeof(KV);    /* elements per chunk */
    constexpr int PW = D / 64;                   /* output words (2 dims) per lane */
    __shared__ __align__(16) float sQ[ROWS][D];
    __shared__ __nv_bfloat162 sK[kBK][KW];
    __shared__ __nv_bfloat162 sV[kBK][KW];
    __shared__ __align__(16) float sP[NW][RPW][kBK]; /* softmax weights of the tile, per row */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int kvh = blockIdx.z;
    const int G = p.n_heads / p.n_kv_heads;
    int tile, q0, n_q, ctx;
    const int s = cta_sequence<NW, DECODE>(p, G, ROWS, &tile, &q0, &n_q, &ctx);
    if (s < 0) return;          /* uniform over the CTA */
    const int base = ctx - n_q; /* keys cached before this step's tokens */

    /* Rows of this CTA and the key range. */
    int row0 = 0, total = G, split = 0, kv_lo = 0, kv_hi;
    if (DECODE) {
        split = blockIdx.x;
        int chunk = (ctx + num_splits - 1) / num_splits;
        chunk = (chunk + kBK - 1) / kBK * kBK;
        kv_lo = split * chunk;
        kv_hi = min(ctx, kv_lo + chunk);
    } else {
        row0 = tile * ROWS;
        total = n_q * G;
        if (row0 >= total) return;
        const int last = min(total, row0 + ROWS) - 1;
        kv_hi = base + last / G + 1;
    }

    /* Per-row token, head and key limit (exclusive); rows past `total` are idle (limit 0). */
    int lim[RPW], tok[RPW], head[RPW];
    bool any = false;
#pragma unroll
    for (int rr = 0; rr < RPW; rr++) {
        const int r = warp * RPW + rr, gr = row0 + r;
        const bool valid = gr < total;
        const int i = DECODE ? n_q - 1 : gr / G;
        tok[rr] = q0 + i;
        head[rr] = kvh * G + (DECODE ? r : gr % G);
        lim[rr] = valid ? base + i + 1 : 0;
        any |= valid;
    }

    if (kv_lo >= kv_hi) { /* an empty split (short context): contributes nothing to the merge */
        if (DECODE && num_splits > 1 && any) {
#pragma unroll
            for (int rr = 0; rr < RPW; rr++) {
                if (lim[rr] == 0) continue;
                const int64_t o = ((int64_t)s * p.n_heads + head[rr]) * num_splits + split;
#pragma unroll
                for (int i = 0; i < PW; i++)
                    reinterpret_cast<float2 *>(ws_o + o * D)[lane + 32 * i] = make_float2(0.f, 0.f);
                if (lane == 0) ws_lse[o] = -INFINITY;
            }
        }
        return;
    }

    /* q rows, pre-scaled into the log2 domain. */
    for (int idx = tid; idx < ROWS * D; idx += NW * 32) {
        const int r = idx / D, d = idx % D, gr = row0 + r;
        float v = 0.0f;
        if (gr < total) {
            const int t = DECODE ? q0 + n_q - 1 : q0 + gr / G;
            const int h = kvh * G + (DECODE ? r : gr % G);
            v = __bfloat162float(p.q[((int64_t)t * p.n_heads + h) * D + d]) * p.scale_log2;
        }
        sQ[r][d] = v;
    }

    float m[RPW], l[RPW];
    float2 acc[RPW][PW];
#pragma unroll
    for (int rr = 0; rr < RPW; rr++) {
        m[rr] = -INFINITY;
        l[rr] = 0.0f;
#pragma unroll
        for (int i = 0; i < PW; i++)
            acc[rr][i] = make_float2(0.0f, 0.0f);
    }

    const int32_t *table = p.block_tables + (int64_t)s * p.block_table_stride;
    const int64_t tok_stride = (int64_t)p.n_kv_heads * D; /* elements per slot */
    const KV *kc = static_cast<const KV *>(p.k_cache) + (int64_t)kvh * D;
    const KV *vc = static_cast<const KV *>(p.v_cache) + (int64_t)kvh * D;

    /* Tile loads go through registers: the next tile's global loads are issued before this
     * tile's math, so their latency overlaps it (LPT 16-byte chunks per thread and tensor). */
    constexpr int LPT = (kBK * CH + NW * 32 - 1) / (NW * 32);
    uint4 kr[LPT], vr[LPT];
    auto load_tile = [&](int kt) {
#pragma unroll
        for (int u = 0; u < LPT; u++) {
            const int idx = tid + u * NW * 32, key = kt + idx / CH, c = idx % CH;
            kr[u] = make_uint4(0, 0, 0, 0);
            vr[u] = make_uint4(0, 0, 0, 0);
            if (idx < kBK * CH && key < kv_hi) { /* zeros beyond: 0 * V must not meet NaN */
                const int64_t slot =
                    (int64_t)table[key / p.block_size] * p.block_size + key % p.block_size;
                kr[u] = *reinterpret_cast<const uint4 *>(kc + slot * tok_stride + c * EPC);
                vr[u] = *reinterpret_cast<const uint4 *>(vc + slot * tok_stride + c * EPC);
            }
        }
    };
    load_tile(kv_lo);

    for (int kt = kv_lo; kt < kv_hi; kt += kBK) {
        __syncthreads(); /* the previous tile (or sQ's writes) is done with */
#pragma unroll
        for (int u = 0; u < LPT; u++) {
            const int idx = tid + u * NW * 32;
            if (idx < kBK * CH) {
                store_chunk(sK[idx / CH], idx % CH, kr[u], kc, p.k_scale);
                store_chunk(sV[idx / CH], idx % CH, vr[u], vc, p.v_scale);
            }
        }
        __syncthreads();
        if (kt + kBK < kv_hi) load_tile(kt + kBK);
        if (!any) continue; /* warp-uniform; no barrier below until the next tile */

        float sc[RPW];
#pragma unroll
        for (int rr = 0; rr < RPW; rr++)
            sc[rr] = 0.0f;
            /* Four dims per step: one 16-byte broadcast load of q per row feeds 4 FMAs (shared
             * memory issue, not the FMA pipe, limits this loop). */
#pragma unroll 4
        for (int w = 0; w < D / 2; w += 2) {
            const float2 k0 = __bfloat1622float2(sK[lane][w]);
            const float2 k1 = __bfloat1622float2(sK[lane][w + 1]);
#pragma unroll
            for (int rr = 0; rr < RPW; rr++) {
                const float4 q = *reinterpret_cast<const float4 *>(&sQ[warp * RPW + rr][2 * w]);
                sc[rr] = fmaf(q.w, k1.y, fmaf(q.z, k1.x, fmaf(q.y, k0.y, fmaf(q.x, k0.x, sc[rr]))));
            }
        }

        float pr[RPW];
        const int key = kt + lane;
#pragma unroll
        for (int rr = 0; rr < RPW; rr++) {
            const float x = key < kv_hi && key < lim[rr] ? sc[rr] : -INFINITY;
            const float m_new = fmaxf(m[rr], ops_warp_max(x));
            float alpha = 1.0f;
            pr[rr] = 0.0f;
            if (m_new != -INFINITY) { /* uniform over the warp */
                alpha = exp2f(m[rr] - m_new);
                pr[rr] = exp2f(x - m_new);
            }
            l[rr] = l[rr] * alpha + ops_warp_sum(pr[rr]);
            m[rr] = m_new;
#pragma unroll
            for (int i = 0; i < PW; i++) {
                acc[rr][i].x *= alpha;
                acc[rr][i].y *= alpha;
            }
        }
        /* P goes through shared memory: one 16-byte broadcast load gives a row's weights of 4
         * keys, where shuffles would take one instruction per key and row. */
#pragma unroll
        for (int rr = 0; rr < RPW; rr++)
            sP[warp][rr][lane] = pr[rr];
        __syncwarp();
#pragma unroll 2
        for (int j = 0; j < kBK; j += 4) {
            float4 pj[RPW];
#pragma unroll
            for (int rr = 0; rr < RPW; rr++)
                pj[rr] = *reinterpret_cast<const float4 *>(&sP[warp][rr][j]);
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
#pragma unroll
                for (int i = 0; i < PW; i++) {
                    const float2 v = __bfloat1622float2(sV[j + jj][lane + 32 * i]);
#pragma unroll
                    for (int rr = 0; rr < RPW; rr++) {
                        const float pw = jj == 0   ? pj[rr].x
                                         : jj == 1 ? pj[rr].y
                                         : jj == 2 ? pj[rr].z
                                                   : pj[rr].w;
                        acc[rr][i].x = fmaf(pw, v.x, acc[rr][i].x);
                        acc[rr][i].y = fmaf(pw, v.y, acc[rr][i].y);
                    }
                }
            }
        }
        __syncwarp(); /* sP is rewritten by the next tile */
    }

#pragma unroll
    for (int rr = 0; rr < RPW; rr++) {
        if (lim[rr] == 0) continue;
        const float inv = l[rr] > 0.0f ? 1.0f / l[rr] : 0.0f;
        if (!DECODE || num_splits == 1) {
            __nv_bfloat162 *o = reinterpret_cast<__nv_bfloat162 *>(
                p.out + ((int64_t)tok[rr] * p.n_heads + head[rr]) * D);
#pragma unroll
            for (int i = 0; i < PW; i++)
                o[lane + 32 * i] = __floats2bfloat162_rn(acc[rr][i].x * inv, acc[rr][i].y * inv);
        } else {
            const int64_t o = ((int64_t)s * p.n_heads + head[rr]) * num_splits + split;
            float2 *dst = reinterpret_cast<float2 *>(ws_o + o * D);
#pragma unroll
            for (int i = 0; i < PW; i++)
                dst[lane + 32 * i] = make_float2(acc[rr][i].x * inv, acc[rr][i].y * inv);
            if (lane == 0) ws_lse[o] = l[rr] > 0.0f ? m[rr] + log2f(l[rr]) : -INFINITY;
        }
    }
}

/* out[token, h] = sum_k 2^(lse_k - max) o_k / sum_k 2^(lse_k - max) over the splits of
 * (sequence, head). Grid (n_seqs, n_heads), D / 2 threads, two dims each. */
template <int D>
__global__ void __launch_bounds__(D / 2)
    merge_kernel(const int32_t *__restrict__ query_start, int n_heads, int num_splits, int mixed,
                 const float *__restrict__ ws_o, const float *__restrict__ ws_lse,
                 __nv_bfloat16 *__restrict__ out) {
    const int s = blockIdx.x, h = blockIdx.y, t = threadIdx.x;
    const int n_q = query_start[s + 1] - query_start[s];
    if (n_q <= 0 || (mixed && n_q != 1)) return;
    const int tok = query_start[s + 1] - 1;
    const int64_t base = ((int64_t)s * n_heads + h) * num_splits;
    float mx = -INFINITY;
    for (int k = 0; k < num_splits; k++)
        mx = fmaxf(mx, ws_lse[base + k]);
    float2 acc = make_float2(0.0f, 0.0f);
    float wsum = 0.0f;
    if (mx != -INFINITY) {
        for (int k = 0; k < num_splits; k++) {
            const float lse = ws_lse[base + k];
            if (lse == -INFINITY) continue;
            const float w = exp2f(lse - mx);
            const float2 o = reinterpret_cast<const float2 *>(ws_o + (base + k) * D)[t];
            acc.x = fmaf(w, o.x, acc.x);
            acc.y = fmaf(w, o.y, acc.y);
            wsum += w;
        }
    }
    const float inv = wsum > 0.0f ? 1.0f / wsum : 0.0f;
    reinterpret_cast<__nv_bfloat162 *>(out + ((int64_t)tok * n_heads + h) * D)[t] =
        __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
}

/* ---- launchers ------------------------------------------------------------------------------ */

int check_args(const char *what, const ops_attn_args_t *a, err_t *err) {
    if (a->head_dim != 64 && a->head_dim != 128 && a->head_dim != 256)
        return err_set(err, "%s: head_dim %d not supported (64, 128, 256)", what, a->head_dim);
    if (a->head_dim == 256 && a->n_kv_heads > 0 && a->n_heads / a->n_kv_heads > 2 * kDecodeWarps)
        return err_set(err, "%s: head_dim 256 takes at most %d query heads per KV head", what,
                       2 * kDecodeWarps);
    if (a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads ||
        a->n_heads / a->n_kv_heads > OPS_MAX_GROUP)
        return err_set(err, "%s: %d query heads over %d KV heads not supported (group <= %d)", what,
                       a->n_heads, a->n_kv_heads, OPS_MAX_GROUP);
    if (a->block_size <= 0 || a->n_seqs < 0 || a->n_seqs > 65535 || a->n_kv_heads > 65535)
        return err_set(err, "%s: bad block size %d or sequence count %d", what, a->block_size,
                       a->n_seqs);
    if (a->kv_dtype == OPS_KV_FP8 && !(a->k_scale > 0.0f && a->v_scale > 0.0f))
        return err_set(err, "%s: fp8 KV cache needs positive k/v scales (%g / %g)", what,
                       (double)a->k_scale, (double)a->v_scale);
    return 0;
}

template <int D, typename KV>
int launch_prefill(const ops_attn_args_t *a, int max_q_len, cudaStream_t stream, err_t *err) {
    constexpr int rpw = prefill_rpw<D>(), rows = kPrefillWarps * rpw;
    const int64_t tiles = prefill_tiles(a, max_q_len, rows, err);
    if (tiles < 0) return -1;
    const dim3 grid((unsigned)tiles, 1, a->n_kv_heads);
    OPS_LAUNCH((attn_kernel<D, kPrefillWarps, rpw, false, KV>), grid, kPrefillWarps * 32, 0, stream,
               make_params(a), 1, nullptr, nullptr);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

template <int D, typename KV, int RPW>
int launch_decode_rpw(const ops_attn_args_t *a, int num_splits, float *ws_o, float *ws_lse,
                      cudaStream_t stream, err_t *err) {
    const dim3 grid(num_splits, a->n_seqs, a->n_kv_heads);
    OPS_LAUNCH((attn_kernel<D, kDecodeWarps, RPW, true, KV>), grid, kDecodeWarps * 32, 0, stream,
               make_params(a), num_splits, ws_o, ws_lse);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

/* Combines num_splits > 1 decode partials (either decode kernel's) into out. */
template <int D>
int launch_merge(const ops_attn_args_t *a, int num_splits, const float *ws_o, const float *ws_lse,
                 cudaStream_t stream, err_t *err) {
    OPS_LAUNCH((merge_kernel<D>), dim3(a->n_seqs, a->n_heads), D / 2, 0, stream, a->query_start,
               a->n_heads, num_splits, a->mixed, ws_o, ws_lse,
               static_cast<__nv_bfloat16 *>(a->out));
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

template <int D, typename KV>
int launch_decode(const ops_attn_args_t *a, int num_splits, float *ws_o, float *ws_lse,
                  cudaStream_t stream, err_t *err) {
    const int G = a->n_heads / a->n_kv_heads;
    if (G <= kDecodeWarps)
        return launch_decode_rpw<D, KV, 1>(a, num_splits, ws_o, ws_lse, stream, err);
    if (G <= 2 * kDecodeWarps || D == 256) /* 256: check_args allows no more */
        return launch_decode_rpw<D, KV, 2>(a, num_splits, ws_o, ws_lse, stream, err);
    if constexpr (D != 256)
        return launch_decode_rpw<D, KV, 4>(a, num_splits, ws_o, ws_lse, stream, err);
    return 0;
}

} // namespace

/* ---- public entry points -------------------------------------------------------------------- */

extern "C" int ops_attention_prefill(const ops_attn_args_t *a, int max_q_len, cudaStream_t stream,
                                     err_t *err) {
    if (check_args("ops_attention_prefill", a, err) < 0) return -1;
    if (max_q_len < 0) return err_set(err, "ops_attention_prefill: negative max_q_len");
    if (a->n_seqs == 0 || max_q_len == 0) return 0;
    if (attn_mma_applies(a)) return attn_prefill_mma(a, max_q_len, stream, err);
    return ops_attention_prefill_simt(a, max_q_len, stream, err);
}

extern "C" int ops_attention_prefill_simt(const ops_attn_args_t *a, int max_q_len,
                                          cudaStream_t stream, err_t *err) {
    if (check_args("ops_attention_prefill_simt", a, err) < 0) return -1;
    if (max_q_len < 0) return err_set(err, "ops_attention_prefill_simt: negative max_q_len");
    if (a->n_seqs == 0 || max_q_len == 0) return 0;
    const bool fp8 = a->kv_dtype == OPS_KV_FP8;
    if (a->head_dim == 64)
        return fp8 ? launch_prefill<64, uint8_t>(a, max_q_len, stream, err)
                   : launch_prefill<64, __nv_bfloat16>(a, max_q_len, stream, err);
    if (a->head_dim == 256)
        return fp8 ? launch_prefill<256, uint8_t>(a, max_q_len, stream, err)
                   : launch_prefill<256, __nv_bfloat16>(a, max_q_len, stream, err);
    return fp8 ? launch_prefill<128, uint8_t>(a, max_q_len, stream, err)
               : launch_prefill<128, __nv_bfloat16>(a, max_q_len, stream, err);
}

extern "C" int ops_attention_decode_splits(int n_seqs, int n_kv_heads, int max_context, int num_sms,
                                           int max_splits) {
    /* About 4 CUDA-core decode CTAs (128 threads, ~25 KiB shared) stay resident per SM, 2 of
     * the tensor-core kernel's (head_dim 128 / 256: 128 threads, 83-99 KiB): aim for 8 CTAs an
     * SM (two or four waves), and never split below 256 keys per split. Untuned on the GPU for
     * the tensor-core decode. */
    const int64_t ctas = (int64_t)(n_seqs > 0 ? n_seqs : 1) * (n_kv_heads > 0 ? n_kv_heads : 1);
    const int64_t target = 8 * (int64_t)(num_sms > 0 ? num_sms : 1);
    if (ctas >= target || max_splits <= 1) return 1;
    int64_t splits = (target + ctas - 1) / ctas;
    const int64_t by_len = max_context / 256;
    if (splits > by_len) splits = by_len;
    if (splits > max_splits) splits = max_splits;
    return splits < 1 ? 1 : (int)splits;
}

extern "C" size_t ops_attention_workspace_bytes(int max_seqs, int n_heads, int head_dim,
                                                int max_splits) {
    /* lse first, then the partial outputs at a 16-byte aligned offset (the slack). */
    return ((size_t)max_seqs * (size_t)n_heads * (size_t)max_splits * (size_t)(head_dim + 1) + 4) *
           sizeof(float);
}

/* Both decode entry points: the kernel (tensor cores or not), then the merge of the splits. */
static int decode(const char *what, bool simt, const ops_attn_args_t *a, int num_splits,
                  void *workspace, cudaStream_t stream, err_t *err) {
    if (check_args(what, a, err) < 0) return -1;
    if (num_splits < 1 || num_splits > 65535 || (num_splits > 1 && !workspace))
        return err_set(err, "%s: %d splits (workspace %s)", what, num_splits,
                       workspace ? "given" : "missing");
    if (a->n_seqs == 0) return 0;
    float *ws_lse = static_cast<float *>(workspace);
    float *ws_o = nullptr;
    if (workspace) {
        const size_t n_lse = (size_t)a->n_seqs * (size_t)a->n_heads * (size_t)num_splits;
        ws_o = ws_lse + ((n_lse + 3) & ~(size_t)3);
    }
    const bool fp8 = a->kv_dtype == OPS_KV_FP8;
    int rc;
    if (!simt && attn_mma_applies(a))
        rc = attn_decode_mma(a, num_splits, ws_o, ws_lse, stream, err);
    else if (a->head_dim == 64)
        rc = fp8 ? launch_decode<64, uint8_t>(a, num_splits, ws_o, ws_lse, stream, err)
                 : launch_decode<64, __nv_bfloat16>(a, num_splits, ws_o, ws_lse, stream, err);
    else if (a->head_dim == 256)
        rc = fp8 ? launch_decode<256, uint8_t>(a, num_splits, ws_o, ws_lse, stream, err)
                 : launch_decode<256, __nv_bfloat16>(a, num_splits, ws_o, ws_lse, stream, err);
    else
        rc = fp8 ? launch_decode<128, uint8_t>(a, num_splits, ws_o, ws_lse, stream, err)
                 : launch_decode<128, __nv_bfloat16>(a, num_splits, ws_o, ws_lse, stream, err);
    if (rc < 0 || num_splits == 1) return rc;
    if (a->head_dim == 64) return launch_merge<64>(a, num_splits, ws_o, ws_lse, stream, err);
    if (a->head_dim == 256) return launch_merge<256>(a, num_splits, ws_o, ws_lse, stream, err);
    return launch_merge<128>(a, num_splits, ws_o, ws_lse, stream, err);
}

extern "C" int ops_attention_decode(const ops_attn_args_t *a, int num_splits, void *workspace,
                                    cudaStream_t stream, err_t *err) {
    return decode("ops_attention_decode", false, a, num_splits, workspace, stream, err);
}

extern "C" int ops_attention_decode_simt(const ops_attn_args_t *a, int num_splits, void *workspace,
                                         cudaStream_t stream, err_t *err) {
    return decode("ops_attention_decode_simt", true, a, num_splits, workspace, stream, err);
}

/*
 * moe: the routing side of an MLP_MOE layer (moe.h): the router's f32 input and logits, top-k,
 * the grouping of (token, expert) pairs by expert, and the routing-weighted combination of the
 * experts' outputs. The grouped GEMMs are in moe_gemm.cu. f32 arithmetic in the CPU reference's
 * operation order where it decides a result (explicit _rn intrinsics where nvcc would contract
 * a multiply and an add into an FMA the CPU does not do).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cb_engine.h" /* first: C linkage for the engine headers */
#include "cuda_check.h"
#include "moe.h"
#include "ops_common.cuh"

namespace {

constexpr int kRowThreads = 256;

/* ---- kernels -------------------------------------------------------------------------------- */

/* One CTA per row: the sum of squares in fused.cu's thread layout and order, then
 * w * (x * inv) as ops_add_rmsnorm_* compute it. */
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_f32_kernel(const float *__restrict__ resid, int H, const float *__restrict__ w,
                       float eps, float *__restrict__ out) {
    __shared__ float red[32];
    const float *x = resid + (int64_t)blockIdx.x * H;
    float ss = 0.0f;
    for (int c = threadIdx.x * 4; c < H; c += kRowThreads * 4) {
        float v[4];
        ops_load4(x + c, v);
#pragma unroll
        for (int i = 0; i < 4; i++)
            ss = fmaf(v[i], v[i], ss);
    }
    const float var = __fdiv_rn(ops_block_sum(ss, red), (float)H);
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, eps)));
    float *o = out + (int64_t)blockIdx.x * H;
    for (int c = threadIdx.x * 4; c < H; c += kRowThreads * 4) {
        float v[4], g[4];
        ops_load4(x + c, v);
        ops_load4(w + c, g);
        *reinterpret_cast<float4 *>(o + c) = make_float4(
            __fmul_rn(g[0], __fmul_rn(v[0], inv)), __fmul_rn(g[1], __fmul_rn(v[1], inv)),
            __fmul_rn(g[2], __fmul_rn(v[2], inv)), __fmul_rn(g[3], __fmul_rn(v[3], inv)));
    }
}

/* The router GEMM on CUDA cores in f32 (it decides which experts run, so it is not rounded to
 * bf16 or tf32): 64 x 64 outputs per CTA, 4 x 4 per thread, k in slices of 32 through shared
 * memory; each output's FMAs run in k order. */
constexpr int kRouterTile = 64, kRouterK = 32;
__global__ void __launch_bounds__(256)
    router_kernel(const float *__restrict__ x, const __nv_bfloat16 *__restrict__ wr, int T, int H,
                  int E, float *__restrict__ logits) {
    __shared__ float xs[kRouterK][kRouterTile];
    __shared__ float ws[kRouterK][kRouterTile];
    const int t0 = blockIdx.x * kRouterTile, e0 = blockIdx.y * kRouterTile;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < H; k0 += kRouterK) {
        __syncthreads();
        for (int i = threadIdx.x; i < kRouterTile * kRouterK; i += 256) {
            const int r = i / kRouterK, k = i % kRouterK;
            const bool in_k = k0 + k < H;
            xs[k][r] = t0 + r < T && in_k ? x[(int64_t)(t0 + r) * H + k0 + k] : 0.0f;
            ws[k][r] =
                e0 + r < E && in_k ? __bfloat162float(wr[(int64_t)(e0 + r) * H + k0 + k]) : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < kRouterK; k++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = xs[k][ty * 4 + i];
                b[i] = ws[k][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            const int t = t0 + ty * 4 + i, e = e0 + tx * 4 + j;
            if (t < T && e < E) logits[(int64_t)t * E + e] = acc[i][j];
        }
}

/* One warp per token: the softmax's max and sum over its E logits, then k rounds of a warp
 * argmax (ties: lower id) over the logits not yet taken, which orders as the probabilities do. */
constexpr int kTopkWarps = 8;
__global__ void __launch_bounds__(kTopkWarps * 32)
    topk_kernel(const float *__restrict__ logits, int T, int E, int k, bool norm,
                int32_t *__restrict__ ids, float *__restrict__ weights) {
    __shared__ float row[kTopkWarps][MOE_MAX_EXPERTS];
    __shared__ float picked[kTopkWarps][MOE_MAX_TOPK];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int t = blockIdx.x * kTopkWarps + warp;
    if (t >= T) return; /* warp-uniform: the kernel has no block barrier */
    float *l = row[warp];
    float m = -INFINITY;
    for (int e = lane; e < E; e += 32) {
        const float v = logits[(int64_t)t * E + e];
        l[e] = v == v ? v : -INFINITY; /* a NaN is never picked over a number */
        m = fmaxf(m, l[e]);
    }
    m = ops_warp_max(m);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32)
        sum += expf(l[e] - m);
    sum = ops_warp_sum(sum);
    /* taken entries become NaN, which no comparison picks; arg == E: no candidate yet */
    for (int j = 0; j < k; j++) {
        float best = -INFINITY;
        int arg = E;
        for (int e = lane; e < E; e += 32)
            if (l[e] == l[e] && (arg == E || l[e] > best)) {
                best = l[e];
                arg = e;
            }
        for (int o = 16; o > 0; o >>= 1) {
            const float b2 = __shfl_xor_sync(OPS_FULL_MASK, best, o);
            const int a2 = __shfl_xor_sync(OPS_FULL_MASK, arg, o);
            if (a2 != E && (arg == E || b2 > best || (b2 == best && a2 < arg))) {
                best = b2;
                arg = a2;
            }
        }
        __syncwarp();
        if (lane == 0) {
            picked[warp][j] = best;
            ids[(int64_t)t * k + j] = arg;
            l[arg] = NAN;
        }
        __syncwarp();
    }
    if (lane != 0) return;
    float wsum = 0.0f;
    for (int j = 0; j < k; j++) {
        const float w = __fdiv_rn(expf(picked[warp][j] - m), sum);
        picked[warp][j] = w;
        wsum = __fadd_rn(wsum, w);
    }
    for (int j = 0; j < k; j++)
        weights[(int64_t)t * k + j] = norm ? __fdiv_rn(picked[warp][j], wsum) : picked[warp][j];
}

/* Exclusive prefix sum over the block (blockDim.x <= 1024, a multiple of 32) of one value per
 * thread; *total gets the sum. Synchronizes the block. scratch: 33 ints of shared memory. */
__device__ int block_exclusive_scan(int v, int *scratch, int *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int incl = v;
    for (int o = 1; o < 32; o <<= 1) {
        const int up = __shfl_up_sync(OPS_FULL_MASK, incl, o);
        if (lane >= o) incl += up;
    }
    __syncthreads();
    if (lane == 31) scratch[warp] = incl;
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (int w = 0; w < nw; w++) {
            const int s = scratch[w];
            scratch[w] = run;
            run += s;
        }
        scratch[32] = run;
    }
    __syncthreads();
    *total = scratch[32];
    return scratch[warp] + incl - v;
}

/* One CTA: each expert's count (and the load statistics, of every expert), the padded segments'
 * offsets of the local experts [e0, e0 + E), the tile map, -1 for the rows past the last
 * segment and for the pairs of other ranks' experts. */
constexpr int kPermThreads = 1024;
__global__ void __launch_bounds__(kPermThreads)
    perm_count_kernel(const int32_t *__restrict__ ids, int P, int E_all, int e0, int E,
                      int max_tiles, int max_rows, moe_perm_t p,
                      unsigned long long *__restrict__ load) {
    __shared__ int count[MOE_MAX_EXPERTS], offset[MOE_MAX_EXPERTS + 1];
    __shared__ int scratch[33];
    for (int e = threadIdx.x; e < E_all; e += kPermThreads)
        count[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < P; i += kPermThreads) {
        const int id = ids[i];
        atomicAdd(&count[id], 1);
        if (id < e0 || id >= e0 + E) p.pair_row[i] = -1; /* another rank's expert */
    }
    __syncthreads();
    /* E_all <= 1024 = the block: one expert per thread */
    const int e = threadIdx.x;
    if (load && e < E_all && count[e]) atomicAdd(&load[e], (unsigned long long)count[e]);
    const int c = e < E ? count[e0 + e] : 0;
    int rows;
    const int off =
        block_exclusive_scan((c + MOE_TILE_M - 1) / MOE_TILE_M * MOE_TILE_M, scratch, &rows);
    if (e < E) {
        offset[e] = off;
        p.count[e] = c;
        p.offset[e] = off;
    }
    if (e == 0) {
        offset[E] = rows;
        p.offset[E] = rows;
    }
    __syncthreads();
    for (int tile = threadIdx.x; tile < max_tiles; tile += kPermThreads) {
        const int row0 = tile * MOE_TILE_M;
        int lo = 0, hi = E - 1; /* the last expert whose segment starts at or before row0 */
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (offset[mid] <= row0)
                lo = mid;
            else
                hi = mid - 1;
        }
        p.tile_expert[tile] = row0 < rows ? lo : -1;
        p.tile_row0[tile] = row0;
    }
    for (int r = rows + threadIdx.x; r < max_rows; r += kPermThreads)
        p.row_token[r] = -1;
}

/* One CTA per local expert (e0 + blockIdx.x): the ranks of its pairs in pair order (a block scan
 * per 256 pairs), so that rows follow token order within the expert; then -1 for its padding
 * rows. */
constexpr int kScatterThreads = 256;
__global__ void __launch_bounds__(kScatterThreads)
    perm_scatter_kernel(const int32_t *__restrict__ ids, int P, int k, int e0, moe_perm_t p) {
    __shared__ int scratch[33];
    const int e = blockIdx.x, count = p.count[e], base = p.offset[e];
    int placed = 0;
    for (int p0 = 0; p0 < P && placed < count; p0 += kScatterThreads) {
        const int i = p0 + threadIdx.x;
        const int mine = i < P && ids[i] == e0 + e;
        int n;
        const int rank = placed + block_exclusive_scan(mine, scratch, &n);
        if (mine) {
            p.row_token[base + rank] = i / k;
            p.pair_row[i] = base + rank;
        }
        placed += n;
    }
    const int padded = (count + MOE_TILE_M - 1) / MOE_TILE_M * MOE_TILE_M;
    for (int r = count + threadIdx.x; r < padded; r += kScatterThreads)
        p.row_token[base + r] = -1;
}

/* One CTA per token: its experts in increasing id (k <= 32, sorted by thread 0), then every
 * column summed in that order, leaving out the pairs of other ranks' experts (row -1). */
__global__ void __launch_bounds__(kRowThreads)
    combine_kernel(const float *__restrict__ y, const int32_t *__restrict__ pair_row,
                   const int32_t *__restrict__ ids, const float *__restrict__ weights, int k, int H,
                   float *__restrict__ out) {
    __shared__ int rows[MOE_MAX_TOPK];
    __shared__ float w[MOE_MAX_TOPK];
    const int64_t t = blockIdx.x;
    if (threadIdx.x == 0) {
        int order[MOE_MAX_TOPK];
        for (int i = 0; i < k; i++) {
            int at = i;
            while (at > 0 && ids[t * k + order[at - 1]] > ids[t * k + i]) {
                order[at] = order[at - 1];
                at--;
            }
            order[at] = i;
        }
        for (int i = 0; i < k; i++) {
            rows[i] = pair_row[t * k + order[i]];
            w[i] = weights[t * k + order[i]];
        }
    }
    __syncthreads();
    for (int c = threadIdx.x * 4; c < H; c += kRowThreads * 4) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int i = 0; i < k; i++) {
            if (rows[i] < 0) continue;
            float v[4];
            ops_load4(y + (int64_t)rows[i] * H + c, v);
#pragma unroll
            for (int q = 0; q < 4; q++)
                acc[q] = __fadd_rn(acc[q], __fmul_rn(v[q], w[i]));
        }
        *reinterpret_cast<float4 *>(out + t * H + c) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    }
}

} // namespace

/* ---- public entry points -------------------------------------------------------------------- */

extern "C" int moe_max_tiles(int T, int k, int E) {
    const int64_t P = (int64_t)T * k, nonempty = P < E ? P : E;
    return (int)((P + nonempty * (MOE_TILE_M - 1)) / MOE_TILE_M);
}

extern "C" int moe_max_rows(int T, int k, int E) {
    return moe_max_tiles(T, k, E) * MOE_TILE_M;
}

static size_t align16(size_t n) {
    return (n + 15) / 16 * 16;
}

extern "C" size_t moe_perm_bytes(int T, int k, int E) {
    const size_t tiles = (size_t)moe_max_tiles(T, k, E), rows = (size_t)moe_max_rows(T, k, E);
    return align16((size_t)E * 4) + align16((size_t)(E + 1) * 4) + 2 * align16(tiles * 4) +
           align16(rows * 4) + align16((size_t)T * k * 4);
}

extern "C" void moe_perm_layout(void *base, int T, int k, int E, moe_perm_t *p) {
    const size_t tiles = (size_t)moe_max_tiles(T, k, E), rows = (size_t)moe_max_rows(T, k, E);
    char *at = (char *)base;
    auto take = [&](size_t n) {
        int32_t *q = (int32_t *)at;
        at += align16(n * 4);
        return q;
    };
    p->count = take((size_t)E);
    p->offset = take((size_t)E + 1);
    p->tile_expert = take(tiles);
    p->tile_row0 = take(tiles);
    p->row_token = take(rows);
    p->pair_row = take((size_t)T * k);
}

extern "C" int moe_rmsnorm_f32(const float *resid, int T, int H, const float *w, float eps,
                               float *x, cudaStream_t stream, err_t *err) {
    if (T < 0 || H <= 0 || H % 4)
        return err_set(err, "moe_rmsnorm_f32: bad shape (rows %d, columns %d)", T, H);
    if (T == 0) return 0;
    OPS_LAUNCH((rmsnorm_f32_kernel), T, kRowThreads, 0, stream, resid, H, w, eps, x);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int moe_router(const float *x, const void *router, int T, int H, int E, float *logits,
                          cudaStream_t stream, err_t *err) {
    if (T < 0 || H <= 0 || E <= 0)
        return err_set(err, "moe_router: bad shape (T %d, hidden %d, experts %d)", T, H, E);
    if (T == 0) return 0;
    const dim3 grid((unsigned)((T + kRouterTile - 1) / kRouterTile),
                    (unsigned)((E + kRouterTile - 1) / kRouterTile));
    OPS_LAUNCH((router_kernel), grid, 256, 0, stream, x, (const __nv_bfloat16 *)router, T, H, E,
               logits);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int moe_topk(const float *logits, int T, int E, int k, bool norm, int32_t *ids,
                        float *weights, cudaStream_t stream, err_t *err) {
    if (T < 0 || E < 1 || E > MOE_MAX_EXPERTS || k < 1 || k > MOE_MAX_TOPK || k > E)
        return err_set(err, "moe_topk: bad shape (T %d, %d experts, top %d; at most %d, %d)", T, E,
                       k, MOE_MAX_EXPERTS, MOE_MAX_TOPK);
    if (T == 0) return 0;
    OPS_LAUNCH((topk_kernel), (T + kTopkWarps - 1) / kTopkWarps, kTopkWarps * 32, 0, stream, logits,
               T, E, k, norm, ids, weights);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int moe_permute(const int32_t *ids, int T, int k, int E_all, int e0, int E,
                           const moe_perm_t *p, unsigned long long *load, cudaStream_t stream,
                           err_t *err) {
    if (T < 0 || E_all < 1 || E_all > MOE_MAX_EXPERTS || k < 1 || k > E_all || e0 < 0 || E < 1 ||
        e0 + E > E_all)
        return err_set(err, "moe_permute: bad shape (T %d, experts [%d, %d) of %d, top %d)", T, e0,
                       e0 + E, E_all, k);
    if (T == 0) return 0;
    OPS_LAUNCH((perm_count_kernel), 1, kPermThreads, 0, stream, ids, T * k, E_all, e0, E,
               moe_max_tiles(T, k, E), moe_max_rows(T, k, E), *p, load);
    OPS_LAUNCH((perm_scatter_kernel), E, kScatterThreads, 0, stream, ids, T * k, k, e0, *p);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int moe_combine(const float *y, const int32_t *pair_row, const int32_t *ids,
                           const float *weights, int T, int k, int H, float *out,
                           cudaStream_t stream, err_t *err) {
    if (T < 0 || k < 1 || k > MOE_MAX_TOPK || H <= 0 || H % 4)
        return err_set(err, "moe_combine: bad shape (T %d, top %d, hidden %d)", T, k, H);
    if (T == 0) return 0;
    OPS_LAUNCH((combine_kernel), T, kRowThreads, 0, stream, y, pair_row, ids, weights, k, H, out);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

/*
 * moe_gemm: the grouped GEMM of an MLP_MOE layer (moe.h): one launch computes every expert's
 * rows, y[r, n] = sum_k A[r, k] W_e[n, k], over tensor cores with mma.sync (mma.cuh).
 *
 * A CTA takes one tile of MOE_TILE_M grouped rows (all of one expert, moe_permute's tile map) and
 * MOE_TILE_N output columns; tiles past the routing's last return at once, so the grid depends
 * only on T. Four warps of 32 rows x 64 columns each. K runs in chunks of 128 bytes (128 e4m3 or
 * 64 bf16 elements) staged in shared memory, rows padded to 144 bytes so that the fragment
 * loads (row g, 4-byte word t: bank 4g + t) are conflict-free. A rows are gathered through
 * a_rows (the tokens of the grouped rows) straight from the activation matrix.
 *
 * FP8: a chunk is one 128-column scale block. Its four k32 MMAs accumulate into a zeroed
 * partial that is then scaled by the weight block's scale_inv times the row's activation scale
 * and added to the f32 accumulator (DeepGEMM's promotion, kernels.md 2.2): the per-block scales
 * of both operands are applied exactly as the CPU reference and cuBLASLt's block-scaled GEMM
 * define them, and the tensor core's reduced-precision accumulation spans 128 products only.
 * BF16: the MMAs accumulate straight into the f32 accumulator.
 *
 * Loads: a kStages-deep cp.async pipeline (16-byte copies straight into shared memory, A's rows
 * of -1 zero-filled without a read), so that the copies of the next kStages - 1 chunks are in
 * flight while the MMAs run on this one. The first version staged through registers one chunk at
 * a time and streamed FP8 weights at 0.9-1.2 TB/s on an H200 (bench/RESULTS.md, second GPU run):
 * one 24 KiB chunk in flight per CTA cannot cover the memory latency at decode's few CTAs.
 * An m16 block of rows that are all padding (the perm's row_token -1: most of a tile at decode,
 * where an expert has one or two rows) skips its MMAs and is written as zeros: at T = 1 a CTA
 * computed 64 rows for one, and the FP8 loop, bound by its own issue rather than its loads
 * (second GPU run), did four times the work it needed. wgmma with TMA is the next step for
 * large T.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cb_engine.h" /* first: C linkage for the engine headers */
#include "cuda_check.h"
#include "mma.cuh"
#include "moe.h"
#include "ops_common.cuh"

namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 128;              /* bytes of K per stage */
constexpr int kRowBytes = kChunk + 16;   /* padded shared-memory row */
constexpr int kRowWords = kRowBytes / 4; /* 36 */
constexpr int kWarpM = 32, kWarpN = 64;  /* a warp's outputs */
constexpr int kMT = kWarpM / 16;         /* m16 tiles per warp */
constexpr int kNT = kWarpN / 8;          /* n8 tiles per warp */
constexpr int kSlices = kChunk / 32;     /* 32-byte k-slices per chunk: one mma each */
constexpr int kLoads = kChunk / 16;      /* 16-byte loads per row and chunk */
constexpr int kStages = 3;               /* chunks in shared memory: 2 in flight, 1 computed */
constexpr int kStageBytes = (MOE_TILE_M + MOE_TILE_N) * kRowBytes; /* 27,648: A rows, then W */
constexpr size_t kSmemBytes = (size_t)kStages * kStageBytes;       /* 82,944: dynamic */

/* The A fragment of k-slice s for the 16 rows at row0 and the B fragments of the 64 columns
 * (weight rows) at n0 (mma.cuh's layouts). */
__device__ __forceinline__ void load_a(const uint32_t *as, int row0, int s, uint32_t a[4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t *r0 = as + (row0 + g) * kRowWords + s * 8 + t;
    const uint32_t *r1 = r0 + 8 * kRowWords;
    a[0] = r0[0];
    a[1] = r1[0];
    a[2] = r0[4];
    a[3] = r1[4];
}

__device__ __forceinline__ void load_b(const uint32_t *bs, int n0, int s, uint32_t b[kNT][2]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ni = 0; ni < kNT; ni++) {
        const uint32_t *r = bs + (n0 + ni * 8 + g) * kRowWords + s * 8 + t;
        b[ni][0] = r[0];
        b[ni][1] = r[4];
    }
}

/* The MMAs of one staged chunk for the warp's 32 x 64 outputs (wm, wn), added to out: each
 * k-slice's B fragments loaded once for both m16 blocks; an m16 block of padding rows only
 * (live 0, warp-uniform) skips its MMAs. */
template <bool FP8>
__device__ __forceinline__ void chunk_mmas(const uint32_t *as32, const uint32_t *bs32, int wm,
                                           int wn, const int *live, float out[kMT][kNT][4]) {
#pragma unroll
    for (int s = 0; s < kSlices; s++) {
        uint32_t fb[kNT][2];
        load_b(bs32, wn * kWarpN, s, fb);
#pragma unroll
        for (int mi = 0; mi < kMT; mi++) {
            if (!live[wm * kMT + mi]) continue;
            uint32_t fa[4];
            load_a(as32, wm * kWarpM + mi * 16, s, fa);
#pragma unroll
            for (int ni = 0; ni < kNT; ni++) {
                if constexpr (FP8)
                    mma_e4m3_16x8x32(out[mi][ni], fa, fb[ni]);
                else
                    mma_bf16_16x8x16(out[mi][ni], fa, fb[ni]);
            }
        }
    }
}

/* Starts the copies of K bytes [c0, c0 + kChunk) of the tile's A rows (gathered; zero for -1,
 * read from nowhere) and of the weight rows n0.. into one shared-memory stage (as, bs); the
 * caller commits them as one group. */
__device__ __forceinline__ void stage_async(const uint8_t *a, int64_t a_row_bytes, const int *arow,
                                            const uint8_t *w, int64_t w_row_bytes, int64_t c0,
                                            uint8_t *as, uint8_t *bs) {
    for (int i = threadIdx.x; i < MOE_TILE_M * kLoads; i += kThreads) {
        const int r = i / kLoads, q = i % kLoads;
        const bool valid = arow[r] >= 0;
        cp_async_16(as + r * kRowBytes + q * 16,
                    valid ? a + arow[r] * a_row_bytes + c0 + q * 16 : a, valid);
    }
    for (int i = threadIdx.x; i < MOE_TILE_N * kLoads; i += kThreads) {
        const int r = i / kLoads, q = i % kLoads;
        cp_async_16(bs + r * kRowBytes + q * 16, w + r * w_row_bytes + c0 + q * 16, true);
    }
}

template <bool FP8>
__global__ void __launch_bounds__(kThreads)
    grouped_gemm_kernel(const uint8_t *__restrict__ wdata, const float *__restrict__ wscale, int N,
                        int K, const uint8_t *__restrict__ a, int64_t lda,
                        const float *__restrict__ a_scale, int ld_scale,
                        const int32_t *__restrict__ a_rows, const int32_t *__restrict__ row_token,
                        const int32_t *__restrict__ tile_expert,
                        const int32_t *__restrict__ tile_row0, float *__restrict__ y) {
    uint8_t *smem = reinterpret_cast<uint8_t *>(ops_dynamic_smem_u32());
    __shared__ int arow[MOE_TILE_M];
    __shared__ int live[MOE_TILE_M / 16]; /* m16 row blocks holding a real (not padding) row */
    const int e = tile_expert[blockIdx.x];
    if (e < 0) return; /* block-uniform: past the routing's last tile */
    const int row0 = tile_row0[blockIdx.x], n0 = blockIdx.y * MOE_TILE_N;
    const int esize = FP8 ? 1 : 2;
    const int64_t a_row_bytes = lda * esize, w_row_bytes = (int64_t)K * esize;
    const uint8_t *w = wdata + ((int64_t)e * N + n0) * w_row_bytes;
    for (int r = threadIdx.x; r < MOE_TILE_M; r += kThreads)
        arow[r] = a_rows ? a_rows[row0 + r] : row0 + r;
    if (threadIdx.x < MOE_TILE_M / 16) {
        int any = 0;
        for (int i = 0; i < 16; i++)
            any |= row_token[row0 + threadIdx.x * 16 + i] >= 0;
        live[threadIdx.x] = any;
    }

    const int warp = threadIdx.x >> 5, wm = warp & 1, wn = warp >> 1;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float acc[kMT][kNT][4] = {};
    const int n_chunks = (int)(w_row_bytes / kChunk);
    const int scale_cols = K / 128;
    __syncthreads(); /* arow and live are written */
#pragma unroll
    for (int c = 0; c < kStages - 1; c++) {
        if (c < n_chunks)
            stage_async(a, a_row_bytes, arow, w, w_row_bytes, (int64_t)c * kChunk,
                        smem + c * kStageBytes, smem + c * kStageBytes + MOE_TILE_M * kRowBytes);
        cp_async_commit(); /* possibly empty: the wait below counts groups */
    }
    for (int c = 0; c < n_chunks; c++) {
        cp_async_wait<kStages - 2>(); /* this thread's copies of chunk c have landed */
        __syncthreads(); /* everyone's have, and chunk c - 1's stage is no longer read */
        const int next = c + kStages - 1;
        if (next < n_chunks) {
            uint8_t *st = smem + (next % kStages) * kStageBytes;
            stage_async(a, a_row_bytes, arow, w, w_row_bytes, (int64_t)next * kChunk, st,
                        st + MOE_TILE_M * kRowBytes);
        }
        cp_async_commit();
        const uint8_t *as = smem + (c % kStages) * kStageBytes;
        const uint32_t *as32 = reinterpret_cast<const uint32_t *>(as);
        const uint32_t *bs32 = reinterpret_cast<const uint32_t *>(as + MOE_TILE_M * kRowBytes);
        if constexpr (FP8) {
            /* the chunk's scales first, so that their loads overlap the MMAs; then each k-slice's
             * B fragments once for both m16 blocks, as in the BF16 loop, into partial sums
             * promoted to the accumulators per 128-column block */
            const float sw = wscale[((int64_t)e * (N / 128) + n0 / 128) * scale_cols + c];
            float sa[kMT][2];
#pragma unroll
            for (int mi = 0; mi < kMT; mi++) {
                const int r = wm * kWarpM + mi * 16 + g;
                sa[mi][0] = arow[r] >= 0 ? a_scale[(int64_t)c * ld_scale + arow[r]] : 0.0f;
                sa[mi][1] = arow[r + 8] >= 0 ? a_scale[(int64_t)c * ld_scale + arow[r + 8]] : 0.0f;
            }
            float part[kMT][kNT][4] = {};
            chunk_mmas<true>(as32, bs32, wm, wn, live, part);
#pragma unroll
            for (int mi = 0; mi < kMT; mi++) {
                const float s0 = __fmul_rn(sw, sa[mi][0]), s1 = __fmul_rn(sw, sa[mi][1]);
#pragma unroll
                for (int ni = 0; ni < kNT; ni++) {
                    acc[mi][ni][0] = fmaf(part[mi][ni][0], s0, acc[mi][ni][0]);
                    acc[mi][ni][1] = fmaf(part[mi][ni][1], s0, acc[mi][ni][1]);
                    acc[mi][ni][2] = fmaf(part[mi][ni][2], s1, acc[mi][ni][2]);
                    acc[mi][ni][3] = fmaf(part[mi][ni][3], s1, acc[mi][ni][3]);
                }
            }
        } else {
            chunk_mmas<false>(as32, bs32, wm, wn, live, acc);
        }
    }
#pragma unroll
    for (int mi = 0; mi < kMT; mi++)
#pragma unroll
        for (int ni = 0; ni < kNT; ni++) {
            const int64_t r = row0 + wm * kWarpM + mi * 16 + g;
            const int col = n0 + wn * kWarpN + ni * 8 + 2 * t;
            *reinterpret_cast<float2 *>(y + r * N + col) =
                make_float2(acc[mi][ni][0], acc[mi][ni][1]);
            *reinterpret_cast<float2 *>(y + (r + 8) * N + col) =
                make_float2(acc[mi][ni][2], acc[mi][ni][3]);
        }
}

} // namespace

extern "C" int moe_gemm(const moe_gemm_args_t *g, cudaStream_t stream, err_t *err) {
    const moe_weights_t *w = g->w;
    const bool fp8 = w->scale != NULL;
    const int kmul = fp8 ? 128 : 64;
    if (w->n <= 0 || w->n % MOE_TILE_N || w->k <= 0 || w->k % kmul || g->lda < w->k ||
        (fp8 && (!g->a_scale || g->ld_scale < 1)))
        return err_set(err,
                       "moe_gemm: unsupported shape (n %d, a multiple of %d; k %d, a multiple of "
                       "%d; lda %lld)",
                       w->n, MOE_TILE_N, w->k, kmul, (long long)g->lda);
    if (g->T == 0) return 0;
    const dim3 grid((unsigned)moe_max_tiles(g->T, g->k, w->n_experts),
                    (unsigned)(w->n / MOE_TILE_N));
    /* above the default 48 KiB of dynamic shared memory: per device, so at every launch */
    const void *kernel =
        fp8 ? (const void *)grouped_gemm_kernel<true> : (const void *)grouped_gemm_kernel<false>;
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmemBytes),
        err);
    if (fp8)
        OPS_LAUNCH((grouped_gemm_kernel<true>), grid, kThreads, kSmemBytes, stream,
                   (const uint8_t *)w->data, w->scale, w->n, w->k, (const uint8_t *)g->a, g->lda,
                   g->a_scale, g->ld_scale, g->a_rows, g->perm->row_token, g->perm->tile_expert,
                   g->perm->tile_row0, g->y);
    else
        OPS_LAUNCH((grouped_gemm_kernel<false>), grid, kThreads, kSmemBytes, stream,
                   (const uint8_t *)w->data, (const float *)nullptr, w->n, w->k,
                   (const uint8_t *)g->a, g->lda, (const float *)nullptr, 0, g->a_rows,
                   g->perm->row_token, g->perm->tile_expert, g->perm->tile_row0, g->y);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

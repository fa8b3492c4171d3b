/*
 * moe: the CUDA kernels of a mixture-of-experts MLP (MLP_MOE, Qwen3-MoE; models.md 3.3) as
 * C-callable launchers, following the CPU reference (engine/cpu/cpu_moe.h) step by step. Each
 * has a CPU twin and a test in tests/gpu/test_moe_kernels.cu (run in the host emulator too).
 *
 *     ops_add_rmsnorm_fp8 / _bf16    x = rmsnorm(h += out): the experts' input (e4m3 + scales,
 *                                    or bf16), as for a dense MLP
 *     moe_rmsnorm_f32                the same normed x in f32, the router's input
 *     moe_router                     logits [T, E] = x Wr^T (f32, bf16 router weights)
 *     moe_topk                       softmax over E, top-k (ties: lower id), renormalised
 *                                    when norm_topk_prob: ids, weights [T, k]
 *     moe_permute                    the T * k (token, expert) pairs grouped by expert, in token
 *                                    order, each expert's rows padded to MOE_TILE_M: tiles of
 *                                    one expert each, the token of each row, the row of each
 *                                    pair; adds each expert's count to the load statistics;
 *                                    under expert parallelism only the rank's experts' pairs
 *     moe_gemm                       every expert's GEMM in one launch (grouped): y[r] =
 *                                    A[r] W_e^T for the rows r of expert e's tiles, gathering A
 *                                    rows by token (gate|up) or reading them in order (down);
 *                                    tensor cores through mma.sync: block FP8 (e4m3 x e4m3,
 *                                    128x128 weight scales and per-token-group activation scales
 *                                    applied per 128-column block in f32) or BF16
 *     ops_silu_mul_fp8 / _bf16       SiLU(gate) * up of the grouped rows, quantized for down
 *     moe_gemm                       down: y[r] = act[r] W2_e^T
 *     moe_combine                    out[t] = sum over t's experts in increasing id of w * y
 *
 * Launch shapes depend only on host integers (T, k, E and sizes), never on the routing, so a
 * decode step captures into a CUDA graph: grids are sized for the most tiles any routing can
 * need (moe_max_tiles) and tiles past the routing's last one return at once. Every launcher
 * only enqueues work on the stream and returns 0, or -1 with err filled.
 *
 * Layouts: expert weights are [E][n][k] row-major, each expert contiguous (a rank holding a
 * range of experts holds a contiguous range), FP8 ones with scale_inv [E][n / 128][k / 128]
 * f32. Limits: E <= MOE_MAX_EXPERTS, k <= MOE_MAX_TOPK, GEMM n a multiple of MOE_TILE_N and k of
 * 128 (FP8) or 64 (BF16).
 */
#ifndef TACHYON_MOE_H
#define TACHYON_MOE_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "err.h"

#define MOE_MAX_EXPERTS 1024
#define MOE_MAX_TOPK    32
#define MOE_TILE_M      64  /* grouped rows per tile: an expert's rows are padded to this */
#define MOE_TILE_N      128 /* output columns per CTA */

/* Tiles and grouped rows the pairs of T tokens can need, whatever the routing. */
int moe_max_tiles(int T, int k, int E);
int moe_max_rows(int T, int k, int E);

/* x [T, H] = rmsnorm(resid) in f32 (w [H] f32), the same arithmetic as ops_add_rmsnorm_*'s
 * (which add the previous block's output into resid first). H a multiple of 4. */
int moe_rmsnorm_f32(const float *resid, int T, int H, const float *w, float eps, float *x,
                    cudaStream_t stream, err_t *err);

/* logits [T, E] f32 = x [T, H] f32 times router [E, H] bf16 transposed; each element one f32
 * FMA chain in k order (independent of T and of the other rows). */
int moe_router(const float *x, const void *router, int T, int H, int E, float *logits,
               cudaStream_t stream, err_t *err);

/* Per token: p = softmax(logits) in f32, the k largest (ids in decreasing order, ties: lower
 * id), weights p_id, divided by their sum when norm. ids, weights [T, k]. */
int moe_topk(const float *logits, int T, int E, int k, bool norm, int32_t *ids, float *weights,
             cudaStream_t stream, err_t *err);

/* The grouping of one moe_permute, device buffers the caller sizes with moe_max_tiles /
 * moe_max_rows of the largest T. */
typedef struct moe_perm {
    int32_t *count;       /* [E] pairs of each expert */
    int32_t *offset;      /* [E + 1] first row of each expert's padded segment; [E]: rows used */
    int32_t *tile_expert; /* [max_tiles] the expert of each tile, -1 past the last one */
    int32_t *tile_row0;   /* [max_tiles] the first row of each tile */
    int32_t *row_token;   /* [max_rows] the token of each row, -1 for padding */
    int32_t *pair_row;    /* [T * k] the row of pair t * k + j */
} moe_perm_t;

/* Bytes of a moe_perm_t's buffers for up to T tokens (each 16-byte aligned), and the layout of
 * them from base. */
size_t moe_perm_bytes(int T, int k, int E);
void moe_perm_layout(void *base, int T, int k, int E, moe_perm_t *p);

/* Groups the pairs of ids [T, k] (experts of E_all) whose expert is one of this rank's
 * [e0, e0 + E) by expert: p's experts are those E (expert parallel: the others are other ranks',
 * their pairs' pair_row -1; e0 0 and E = E_all otherwise), p sized for E. load (device, may be
 * NULL): [E_all] uint64 counters that get every expert's count added, the other ranks' too (the
 * expert-load statistics). */
int moe_permute(const int32_t *ids, int T, int k, int E_all, int e0, int E, const moe_perm_t *p,
                unsigned long long *load, cudaStream_t stream, err_t *err);

/* The experts' weights of one projection. */
typedef struct moe_weights {
    const void *data;   /* [E][n][k] e4m3 (scale set) or bf16 (scale NULL) */
    const float *scale; /* [E][n / 128][k / 128] f32 scale_inv */
    int n_experts, n, k;
} moe_weights_t;

/* y [moe_max_rows(T, ...), w->n] f32 = A W_e^T over the tiles of p (T: the token count p was
 * made for). A row r is a[a_rows[r]] when a_rows is given (-1: a zero row), else a[r]; a has
 * lda elements per row, e4m3 with scales a_scale[(c / 128) * ld_scale + row] (FP8) or bf16. Rows
 * of tiles past the last are not written; padding rows (p->row_token -1) may be written as
 * zeros whatever a holds there. */
typedef struct moe_gemm_args {
    const moe_weights_t *w;
    const void *a;
    int64_t lda;
    const float *a_scale; /* FP8 only */
    int ld_scale;
    const int32_t *a_rows;
    const moe_perm_t *perm;
    int T, k; /* tokens and experts per token p was made for */
    float *y;
} moe_gemm_args_t;
int moe_gemm(const moe_gemm_args_t *g, cudaStream_t stream, err_t *err);

/* out [T, H] f32: out[t] = sum over j in increasing ids[t, j] of weights[t, j] * y[pair_row[t *
 * k + j]] (y [*, H] f32), with the CPU's rounding: a product, then a sum; pairs with pair_row -1
 * (other ranks' experts) left out. */
int moe_combine(const float *y, const int32_t *pair_row, const int32_t *ids, const float *weights,
                int T, int k, int H, float *out, cudaStream_t stream, err_t *err);

#ifdef __cplusplus
}
#endif

#endif

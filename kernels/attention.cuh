/*
 * attention.cuh: what the two attention kernel files share (internal to kernels/): the kernel
 * parameters, the flat prefill grid's tile search, the argument checks, and the tensor-core
 * prefill (attention_mma.cu) that ops_attention_prefill (attention.cu) dispatches to.
 */
#ifndef TACHYON_ATTENTION_CUH
#define TACHYON_ATTENTION_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "ops.h"
#include "ops_common.cuh"

namespace {

constexpr float kLog2e = 1.4426950408889634f;

struct AttnParams {
    const __nv_bfloat16 *q;
    __nv_bfloat16 *out;
    const void *k_cache, *v_cache;
    float k_scale, v_scale;
    int n_seqs, n_heads, n_kv_heads, block_size;
    const int32_t *query_start, *context_len, *block_tables;
    int block_table_stride;
    float scale_log2; /* softmax scale * log2(e) */
    int mixed;        /* ops_attn_args_t.mixed */
};

/* Prefill grids are flat over the tiles of all sequences (sequence s has ceil(n_q * G / rows)
 * tiles), so a mixed batch of one long prompt and many decodes launches about T * G / rows + S
 * CTAs, not S * max_q * G / rows. The CTA finds its sequence with a block-wide scan of the tile
 * counts, 32 * NW sequences at a time. Returns the sequence (-1: past the last tile) and sets
 * *tile to the tile within it. With `mixed`, sequences with one query token have no tiles (the
 * decode kernel runs them). Uniform over the CTA; every thread must call. */
template <int NW>
__device__ int find_tile(const int32_t *__restrict__ query_start, int n_seqs, int G, int rows,
                         int mixed, int *tile) {
    __shared__ int warp_sum[NW];
    __shared__ int found_seq, found_tile;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int b = blockIdx.x;
    if (tid == 0) found_seq = -1;
    __syncthreads(); /* the reset is seen before anyone reads found_seq (n_seqs may be 0) */
    int before = 0;  /* tiles of the sequences of earlier chunks */
    for (int c0 = 0; c0 < n_seqs; c0 += NW * 32) {
        const int si = c0 + tid;
        int t = 0;
        if (si < n_seqs) {
            const int n_q = query_start[si + 1] - query_start[si];
            t = n_q > 0 && !(mixed && n_q == 1) ? (n_q * G + rows - 1) / rows : 0;
        }
        int incl = t; /* inclusive scan: warp, then the warps before */
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(OPS_FULL_MASK, incl, o);
            if (lane >= o) incl += v;
        }
        if (lane == 31) warp_sum[warp] = incl;
        __syncthreads();
        int total = 0;
#pragma unroll
        for (int w = 0; w < NW; w++) {
            if (w < warp) incl += warp_sum[w];
            total += warp_sum[w];
        }
        const int start = before + incl - t;
        if (t > 0 && b >= start && b < start + t) {
            found_seq = si;
            found_tile = b - start;
        }
        before += total;
        __syncthreads(); /* found_* written; warp_sum free for the next chunk */
        if (found_seq >= 0 || before > b) break;
    }
    *tile = found_tile;
    return found_seq;
}

inline AttnParams make_params(const ops_attn_args_t *a) {
    AttnParams p;
    p.q = static_cast<const __nv_bfloat16 *>(a->q);
    p.out = static_cast<__nv_bfloat16 *>(a->out);
    p.k_cache = a->k_cache;
    p.v_cache = a->v_cache;
    p.k_scale = a->k_scale;
    p.v_scale = a->v_scale;
    p.n_seqs = a->n_seqs;
    p.n_heads = a->n_heads;
    p.n_kv_heads = a->n_kv_heads;
    p.block_size = a->block_size;
    p.query_start = a->query_start;
    p.context_len = a->context_len;
    p.block_tables = a->block_tables;
    p.block_table_stride = a->block_table_stride;
    p.scale_log2 = a->scale * kLog2e;
    p.mixed = a->mixed;
    return p;
}

/* The CTA's sequence (decode: blockIdx.y; prefill: the flat grid's tile search, *tile set),
 * its first query token, query count and context; -1 when the CTA has nothing to do (past the
 * last tile, an empty sequence, a mixed batch's prefill sequence in a decode launch). Uniform
 * over the CTA; every thread must call. */
template <int NW, bool DECODE>
__device__ int cta_sequence(const AttnParams &p, int G, int rows, int *tile, int *q0, int *n_q,
                            int *ctx) {
    int s = blockIdx.y;
    *tile = 0;
    if (!DECODE) s = find_tile<NW>(p.query_start, p.n_seqs, G, rows, p.mixed, tile);
    if (s < 0) return -1;
    *q0 = p.query_start[s];
    *n_q = p.query_start[s + 1] - *q0;
    *ctx = p.context_len[s];
    if (*n_q <= 0 || *ctx <= 0) return -1;
    if (DECODE && p.mixed && *n_q != 1) return -1;
    return s;
}

/* The flat prefill grid's x extent for tiles of `rows` rows: at most S * ceil(max_q * G / rows)
 * tiles, and at most T * G / rows + S when the token count is known (each sequence wastes less
 * than one tile). Sets an error past 2^31 - 1 tiles; returns -1 then. */
inline int64_t prefill_tiles(const ops_attn_args_t *a, int max_q_len, int rows, err_t *err) {
    const int G = a->n_heads / a->n_kv_heads;
    int64_t tiles = (int64_t)a->n_seqs * (((int64_t)max_q_len * G + rows - 1) / rows);
    if (a->n_tokens > 0) {
        const int64_t by_tokens = ((int64_t)a->n_tokens * G + rows - 1) / rows + a->n_seqs;
        if (by_tokens < tiles) tiles = by_tokens;
    }
    if (tiles > 0x7fffffff) return err_set(err, "ops_attention_prefill: batch too large");
    return tiles;
}

} // namespace

/* Whether the tensor-core kernel (attention_mma.cu) takes these arguments: head_dim 128 or 256,
 * any KV dtype and group. */
bool attn_mma_applies(const ops_attn_args_t *a);

/* The tensor-core prefill, for arguments ops_attention_prefill has checked. */
int attn_prefill_mma(const ops_attn_args_t *a, int max_q_len, cudaStream_t stream, err_t *err);

/* The tensor-core split-KV decode, for arguments ops_attention_decode has checked: with
 * num_splits > 1 it leaves partials in ws_o / ws_lse for the caller's merge_kernel. */
int attn_decode_mma(const ops_attn_args_t *a, int num_splits, float *ws_o, float *ws_lse,
                    cudaStream_t stream, err_t *err);

#endif

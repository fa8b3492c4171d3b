/*
 * gdn: the Gated DeltaNet kernels (ops_gdn.h), each the twin of a cpu_gdn_ops function.
 *
 * The chunked kernel is transformers' torch_chunk_gated_delta_rule (models.md 4.6) on tensor
 * cores: a CTA owns one (sequence, value head, 32 value columns) and keeps its slice of the state
 * S [dk, 32] in shared memory (the value columns of the delta rule are independent), walking the
 * sequence's new tokens in 64-token chunks. Per chunk the six matrix products (K K^T, Q K^T,
 * W S, (Q e^cum) S, P V', (K e^(cum_L - cum))^T V') run as mma.sync m16n8k8 TF32 with f32
 * accumulation, one 16-row strip per warp; the unit lower-triangular solve for U and W is a
 * forward substitution with one thread per column (CUDA cores: it is sequential in the rows).
 * TF32 keeps 10 mantissa bits of each product's inputs, so the chunked outputs differ from the
 * CPU's f32 ones by about 1e-3 relative (tests/gpu/test_qwen35_kernels.cu states the tolerance).
 *
 * The recurrent kernel is one decode step per sequence: a CTA owns (sequence, value head, 32
 * columns), lane = column, the four warps split the dk rows; S is read once into registers,
 * decayed, read by k, updated and read by q, and written once. Both kernels leave alone the
 * sequences the other one takes (one new token: recurrent; more: chunked), so a mixed batch runs
 * both over the same grid.
 *
 * Under tests/gpu/emu the mma and the TF32 conversion run through the emulator's implementation
 * of the PTX fragment layouts (emu_cuda.h); everything else is plain CUDA C.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cb_engine.h" /* first: C linkage for the engine headers */
#include "cuda_check.h"
#include "ops_common.cuh"
#include "ops_gdn.h"

namespace {

constexpr int kConvThreads = 256;
constexpr int kThreads = 128; /* 4 warps: prepare, recurrent, chunked, gated norm */
constexpr int kWarps = kThreads / 32;
constexpr int kBV = 32; /* value columns per CTA of the recurrent and chunked kernels */
constexpr int kC = OPS_GDN_CHUNK;
constexpr int kLdA = kC + 4; /* row stride of the chunk's C x C matrices in shared memory */
constexpr int kLdS = kBV + 4;

__device__ __forceinline__ float silu(float x) {
    return x / (1.0f + expf(-x));
}

/* ---- tensor cores ---------------------------------------------------------------------------- */

/* f32 -> tf32 bits, round to nearest with ties away from zero (cvt.rna). */
__device__ __forceinline__ uint32_t tf32(float x) {
#ifdef OPS_HOST_EMULATION
    return emu_cvt_rna_tf32(x);
#else
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
#endif
}

/* d += a b for one 16x8x8 tile (mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32); the
 * fragment layouts are the PTX ISA's (groupID g = lane / 4, t = lane % 4):
 *     a0 (g, t)  a1 (g + 8, t)  a2 (g, t + 4)  a3 (g + 8, t + 4)       A [16, 8], (row, col)
 *     b0 (t, g)  b1 (t + 4, g)                                         B [8, 8]
 *     d0 (g, 2t) d1 (g, 2t + 1) d2 (g + 8, 2t) d3 (g + 8, 2t + 1)      D [16, 8] */
__device__ __forceinline__ void mma(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef OPS_HOST_EMULATION
    emu_mma_m16n8k8_tf32(d, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* Fragments from row-major shared-memory matrices (stride ld): A [m0.., k0..] of M, or of M^T
 * (A[m][k] = M[k][m]); B [k0.., n0..] of M, or of M^T (B[k][n] = M[n][k]). */
__device__ __forceinline__ void frag_a(const float *m, int ld, int m0, int k0, int g, int t,
                                       uint32_t a[4]) {
    a[0] = tf32(m[(m0 + g) * ld + k0 + t]);
    a[1] = tf32(m[(m0 + g + 8) * ld + k0 + t]);
    a[2] = tf32(m[(m0 + g) * ld + k0 + t + 4]);
    a[3] = tf32(m[(m0 + g + 8) * ld + k0 + t + 4]);
}
__device__ __forceinline__ void frag_at(const float *m, int ld, int m0, int k0, int g, int t,
                                        uint32_t a[4]) {
    a[0] = tf32(m[(k0 + t) * ld + m0 + g]);
    a[1] = tf32(m[(k0 + t) * ld + m0 + g + 8]);
    a[2] = tf32(m[(k0 + t + 4) * ld + m0 + g]);
    a[3] = tf32(m[(k0 + t + 4) * ld + m0 + g + 8]);
}
__device__ __forceinline__ void frag_b(const float *m, int ld, int k0, int n0, int g, int t,
                                       uint32_t b[2]) {
    b[0] = tf32(m[(k0 + t) * ld + n0 + g]);
    b[1] = tf32(m[(k0 + t + 4) * ld + n0 + g]);
}
__device__ __forceinline__ void frag_bt(const float *m, int ld, int k0, int n0, int g, int t,
                                        uint32_t b[2]) {
    b[0] = tf32(m[(n0 + g) * ld + k0 + t]);
    b[1] = tf32(m[(n0 + g) * ld + k0 + t + 4]);
}

/* The (row, column) of accumulator element e of a 16x8 tile at (m0, n0). */
__device__ __forceinline__ int acc_row(int m0, int g, int e) {
    return m0 + g + 8 * (e >> 1);
}
__device__ __forceinline__ int acc_col(int n0, int t, int e) {
    return n0 + 2 * t + (e & 1);
}

/* ---- state and metadata ---------------------------------------------------------------------- */

/* The sequence holding token t: the last s with query_start[s] <= t. */
__device__ int seq_of(const int32_t *__restrict__ qs, int n_seqs, int t) {
    int lo = 0, hi = n_seqs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (qs[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

__device__ __forceinline__ float ssm_load(const ops_gdn_state_t &st, int64_t i) {
    return st.ssm_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16 *>(st.ssm)[i])
                       : static_cast<const float *>(st.ssm)[i];
}
__device__ __forceinline__ void ssm_store(const ops_gdn_state_t &st, int64_t i, float v) {
    if (st.ssm_bf16)
        static_cast<__nv_bfloat16 *>(st.ssm)[i] = __float2bfloat16_rn(v);
    else
        static_cast<float *>(st.ssm)[i] = v;
}

/* Offset of head h's SSM state [dk, dv] in slot `slot`. */
__device__ __forceinline__ int64_t ssm_base(const ops_gdn_args_t &a, int slot, int h) {
    return slot * a.state.ssm_slot_stride + (int64_t)h * a.dk * a.dv;
}

/* ---- kernels --------------------------------------------------------------------------------- */

/* Grid (T, channel blocks): y = silu(conv) per (token, channel). */
__global__ void __launch_bounds__(kConvThreads)
    conv_kernel(const ops_gdn_args_t a, const float *__restrict__ x, int64_t ld_x,
                const float *__restrict__ w, float *__restrict__ y) {
    const int t = blockIdx.x, c = blockIdx.y * kConvThreads + threadIdx.x;
    if (c >= a.C) return;
    const int s = seq_of(a.query_start, a.n_seqs, t);
    const int t0 = a.query_start[s], n = a.query_start[s + 1] - t0, i = t - t0;
    const int slot = a.state_slots[s];
    float *out = y + (int64_t)t * a.C + c;
    if (slot < 0) {
        *out = 0.0f;
        return;
    }
    const bool fresh = a.context_len[s] == n;
    const float *win = a.state.conv + slot * a.state.conv_slot_stride;
    float acc = 0.0f;
    for (int j = 0; j < a.K; j++) {
        const int tau = i - (a.K - 1) + j;
        const float xv = tau >= 0 ? x[(int64_t)(t0 + tau) * ld_x + c]
                         : fresh  ? 0.0f
                                  : win[(int64_t)(a.K - 1 + tau) * a.C + c];
        acc = fmaf(w[(int64_t)c * a.K + j], xv, acc);
    }
    *out = silu(acc);
}

/* Grid (sequences, channel blocks): each window takes its sequence's last K - 1 raw inputs.
 * Shifting in place is safe: window[j] reads window[j + n] (n >= 1), written later if at all. */
__global__ void __launch_bounds__(kConvThreads)
    conv_window_kernel(const ops_gdn_args_t a, const float *__restrict__ x, int64_t ld_x) {
    const int s = blockIdx.x, c = blockIdx.y * kConvThreads + threadIdx.x;
    const int slot = a.state_slots[s];
    const int t0 = a.query_start[s], n = a.query_start[s + 1] - t0;
    if (c >= a.C || slot < 0 || n <= 0) return;
    const bool fresh = a.context_len[s] == n;
    float *win = a.state.conv + slot * a.state.conv_slot_stride;
    for (int j = 0; j < a.K - 1; j++) {
        const int tau = n - (a.K - 1) + j;
        win[(int64_t)j * a.C + c] = tau >= 0 ? x[(int64_t)(t0 + tau) * ld_x + c]
                                    : fresh  ? 0.0f
                                             : win[(int64_t)(a.K - 1 + tau) * a.C + c];
    }
}

/* Grid T: a warp per q / k head L2-normalizes it in place; the threads compute every value
 * head's decay and beta. */
__global__ void __launch_bounds__(kThreads)
    prepare_kernel(const ops_gdn_args_t a, float *__restrict__ y, const float *__restrict__ ba,
                   int64_t ld_ba, int a_col, const float *__restrict__ a_log,
                   const float *__restrict__ dt_bias, float *__restrict__ g,
                   float *__restrict__ beta) {
    const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *row = y + (int64_t)t * a.C;
    for (int hh = warp; hh < 2 * a.Hk; hh += kWarps) { /* q heads, then k heads */
        float *v = row + (int64_t)hh * a.dk;
        float ss = 0.0f;
        for (int i = lane; i < a.dk; i += 32)
            ss = fmaf(v[i], v[i], ss);
        const float inv = 1.0f / sqrtf(ops_warp_sum(ss) + 1e-6f);
        for (int i = lane; i < a.dk; i += 32)
            v[i] *= inv;
    }
    const float *bar = ba + (int64_t)t * ld_ba;
    for (int h = threadIdx.x; h < a.Hv; h += kThreads) {
        const float u = bar[a_col + h] + dt_bias[h];
        const float softplus = u > 20.0f ? u : log1pf(expf(u));
        g[(int64_t)t * a.Hv + h] = -expf(a_log[h]) * softplus;
        beta[(int64_t)t * a.Hv + h] = 1.0f / (1.0f + expf(-bar[h]));
    }
}

/* Grid (sequences, Hv, value column blocks of 32): one decode step of the delta rule. */
__global__ void __launch_bounds__(kThreads)
    recurrent_kernel(const ops_gdn_args_t a, const float *__restrict__ y,
                     const float *__restrict__ g, const float *__restrict__ beta,
                     float *__restrict__ out) {
    constexpr int kRows = OPS_GDN_MAX_DIM / kWarps; /* S rows per thread at most */
    __shared__ float sq[OPS_GDN_MAX_DIM], sk[OPS_GDN_MAX_DIM], red[kWarps][kBV];
    const int s = blockIdx.x, h = blockIdx.y, jc = blockIdx.z * kBV + (threadIdx.x & 31);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int t = a.query_start[s];
    if (a.query_start[s + 1] - t != 1) return; /* uniform: the chunked kernel's sequence */
    const int slot = a.state_slots[s];
    const bool col = jc < a.dv;
    float *o = out + (int64_t)t * a.Hv * a.dv + (int64_t)h * a.dv;
    if (slot < 0) {
        if (warp == 0 && col) o[jc] = 0.0f;
        return;
    }
    const int dk = a.dk, kd = a.Hk * dk, hk = h / (a.Hv / a.Hk);
    const float *yrow = y + (int64_t)t * a.C;
    const float scale = sqrtf((float)dk); /* transformers divides q by sqrt(dk) here */
    for (int i = threadIdx.x; i < dk; i += kThreads) {
        sq[i] = yrow[(int64_t)hk * dk + i] / scale;
        sk[i] = yrow[kd + (int64_t)hk * dk + i];
    }
    __syncthreads();
    const float decay = expf(g[(int64_t)t * a.Hv + h]), b = beta[(int64_t)t * a.Hv + h];
    const float vj = col ? yrow[2 * (int64_t)kd + (int64_t)h * a.dv + jc] : 0.0f;
    const int rows = (dk + kWarps - 1) / kWarps, r0 = warp * rows;
    const bool fresh = a.context_len[s] == 1;
    const int64_t base = ssm_base(a, slot, h);
    float S[kRows];
    float kv = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; r++) {
        const int i = r0 + r;
        const bool in = r < rows && i < dk && col;
        S[r] = in && !fresh ? ssm_load(a.state, base + (int64_t)i * a.dv + jc) * decay : 0.0f;
        if (in) kv = fmaf(S[r], sk[i], kv);
    }
    red[warp][lane] = kv;
    __syncthreads();
    kv = red[0][lane] + red[1][lane] + red[2][lane] + red[3][lane];
    const float delta = (vj - kv) * b;
    float ov = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; r++) {
        const int i = r0 + r;
        if (r < rows && i < dk && col) {
            S[r] = fmaf(sk[i], delta, S[r]);
            ov = fmaf(S[r], sq[i], ov);
            ssm_store(a.state, base + (int64_t)i * a.dv + jc, S[r]);
        }
    }
    __syncthreads(); /* every warp has read red */
    red[warp][lane] = ov;
    __syncthreads();
    if (warp == 0 && col) o[jc] = red[0][lane] + red[1][lane] + red[2][lane] + red[3][lane];
}

/* The chunk kernel's shared memory: q, k, w [64, ld_k] (ld_k = dk rounded up to 16, plus 4), the
 * state slice s [dk16, kLdS], u [64, kLdS] (v beta, then U, then the new values V'), A and P
 * [64, kLdA], the in-chunk cumulative decay and beta [64]. */
struct ChunkSmem {
    float *q, *k, *w, *s, *u, *A, *P, *cum, *bet;
    int dk16, ldk;
};

__device__ ChunkSmem chunk_smem(int dk) {
    ChunkSmem m;
    m.dk16 = (dk + 15) & ~15;
    m.ldk = m.dk16 + 4;
    float *p = reinterpret_cast<float *>(ops_dynamic_smem_u32());
    m.q = p;
    m.k = m.q + kC * m.ldk;
    m.w = m.k + kC * m.ldk;
    m.s = m.w + kC * m.ldk;
    m.u = m.s + m.dk16 * kLdS;
    m.A = m.u + kC * kLdS;
    m.P = m.A + kC * kLdA;
    m.cum = m.P + kC * kLdA;
    m.bet = m.cum + kC;
    return m;
}

/* Grid (sequences, Hv, value column blocks of 32): the chunked delta rule of a sequence with more
 * than one new token (the pseudocode of models.md 4.6, one chunk at a time). */
__global__ void __launch_bounds__(kThreads)
    chunked_kernel(const ops_gdn_args_t a, const float *__restrict__ y, const float *__restrict__ g,
                   const float *__restrict__ beta, float q_scale, float *__restrict__ out) {
    const int s = blockIdx.x, h = blockIdx.y, j0 = blockIdx.z * kBV;
    const int t0 = a.query_start[s], n = a.query_start[s + 1] - t0;
    if (n <= 1) return; /* uniform: the recurrent kernel's sequence (or none) */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
    const int dk = a.dk, dv = a.dv, Hv = a.Hv, kd = a.Hk * dk, hk = h / (a.Hv / a.Hk);
    const int nc = min(kBV, dv - j0), slot = a.state_slots[s], m0 = 16 * warp;
    const int64_t ld_out = (int64_t)Hv * dv;
    float *o = out + (int64_t)h * dv + j0;
    if (slot < 0) {
        for (int idx = tid; idx < n * nc; idx += kThreads)
            o[(int64_t)(t0 + idx / nc) * ld_out + idx % nc] = 0.0f;
        return;
    }
    const ChunkSmem m = chunk_smem(dk);
    const int dk16 = m.dk16, ldk = m.ldk;
    const bool fresh = a.context_len[s] == n;
    const int64_t base = ssm_base(a, slot, h) + j0;
    for (int idx = tid; idx < dk16 * kBV; idx += kThreads) {
        const int r = idx / kBV, c = idx % kBV;
        m.s[r * kLdS + c] =
            r < dk && c < nc && !fresh ? ssm_load(a.state, base + (int64_t)r * dv + c) : 0.0f;
    }
    for (int c0 = 0; c0 < n; c0 += kC) {
        const int L = min(kC, n - c0);
        __syncthreads(); /* the previous chunk is done with the buffers */
        /* q (scaled), k, v beta, beta and the cumulative decay; zeros past the chunk's end */
        for (int idx = tid; idx < kC * dk16; idx += kThreads) {
            const int i = idx / dk16, r = idx % dk16;
            const bool in = i < L && r < dk;
            const float *row = y + (int64_t)(t0 + c0 + i) * a.C;
            m.q[i * ldk + r] = in ? row[(int64_t)hk * dk + r] * q_scale : 0.0f;
            m.k[i * ldk + r] = in ? row[kd + (int64_t)hk * dk + r] : 0.0f;
        }
        for (int idx = tid; idx < kC * kBV; idx += kThreads) {
            const int i = idx / kBV, c = idx % kBV;
            const int64_t tok = t0 + c0 + i;
            m.u[i * kLdS + c] =
                i < L && c < nc
                    ? y[tok * a.C + 2 * (int64_t)kd + (int64_t)h * dv + j0 + c] * beta[tok * Hv + h]
                    : 0.0f;
        }
        if (tid < kC) m.bet[tid] = tid < L ? beta[(int64_t)(t0 + c0 + tid) * Hv + h] : 0.0f;
        if (tid == 0) { /* summed in double, as torch's CPU cumsum */
            double acc = 0.0;
            for (int i = 0; i < kC; i++) {
                if (i < L) acc += g[(int64_t)(t0 + c0 + i) * Hv + h];
                m.cum[i] = (float)acc;
            }
        }
        __syncthreads();

        /* A = beta (K K^T) o D strictly below the diagonal, P = (Q K^T) o D on and below it,
         * D[i][j] = exp(cum_i - cum_j) */
        {
            float kk[kC / 8][4] = {}, qk[kC / 8][4] = {};
            for (int k0 = 0; k0 < dk16; k0 += 8) {
                uint32_t ak[4], aq[4];
                frag_a(m.k, ldk, m0, k0, gq, tq, ak);
                frag_a(m.q, ldk, m0, k0, gq, tq, aq);
#pragma unroll
                for (int nt = 0; nt < kC / 8; nt++) {
                    uint32_t b[2];
                    frag_bt(m.k, ldk, k0, nt * 8, gq, tq, b);
                    mma(kk[nt], ak, b);
                    mma(qk[nt], aq, b);
                }
            }
#pragma unroll
            for (int nt = 0; nt < kC / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = acc_row(m0, gq, e), j = acc_col(nt * 8, tq, e);
                    const float d = j <= i && i < L ? expf(m.cum[i] - m.cum[j]) : 0.0f;
                    m.A[i * kLdA + j] = j < i ? m.bet[i] * kk[nt][e] * d : 0.0f;
                    m.P[i * kLdA + j] = qk[nt][e] * d;
                }
        }
        __syncthreads();

        /* w = k beta e^cum (W's right-hand side); q *= e^cum; k *= e^(cum_L - cum) */
        const float last = m.cum[L - 1];
        for (int idx = tid; idx < kC * dk16; idx += kThreads) {
            const int i = idx / dk16, r = idx % dk16;
            const float kv = m.k[i * ldk + r], e = expf(m.cum[i]);
            m.w[i * ldk + r] = i < L ? kv * m.bet[i] * e : 0.0f;
            m.q[i * ldk + r] *= e;
            m.k[i * ldk + r] = kv * expf(last - m.cum[i]);
        }
        __syncthreads();

        /* U = T (v beta), W = T w with T = (I + A)^-1: forward substitution, a thread per column */
        for (int col = tid; col < kBV + dk16; col += kThreads) {
            float *x = col < kBV ? m.u + col : m.w + (col - kBV);
            const int ld = col < kBV ? kLdS : ldk;
            for (int i = 1; i < L; i++) {
                float xi = x[i * ld];
                for (int j = 0; j < i; j++)
                    xi -= m.A[i * kLdA + j] * x[j * ld];
                x[i * ld] = xi;
            }
        }
        __syncthreads();

        /* V' = U - W S (into u); O = (Q e^cum) S + P V' */
        float os[kBV / 8][4] = {};
        {
            float ws[kBV / 8][4] = {};
            for (int k0 = 0; k0 < dk16; k0 += 8) {
                uint32_t aw[4], aq[4];
                frag_a(m.w, ldk, m0, k0, gq, tq, aw);
                frag_a(m.q, ldk, m0, k0, gq, tq, aq);
#pragma unroll
                for (int nt = 0; nt < kBV / 8; nt++) {
                    uint32_t b[2];
                    frag_b(m.s, kLdS, k0, nt * 8, gq, tq, b);
                    mma(ws[nt], aw, b);
                    mma(os[nt], aq, b);
                }
            }
#pragma unroll
            for (int nt = 0; nt < kBV / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    m.u[acc_row(m0, gq, e) * kLdS + acc_col(nt * 8, tq, e)] -= ws[nt][e];
        }
        __syncthreads(); /* V' complete; S read */
        for (int k0 = 0; k0 < kC; k0 += 8) {
            uint32_t ap[4];
            frag_a(m.P, kLdA, m0, k0, gq, tq, ap);
#pragma unroll
            for (int nt = 0; nt < kBV / 8; nt++) {
                uint32_t b[2];
                frag_b(m.u, kLdS, k0, nt * 8, gq, tq, b);
                mma(os[nt], ap, b);
            }
        }
#pragma unroll
        for (int nt = 0; nt < kBV / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = acc_row(m0, gq, e), c = acc_col(nt * 8, tq, e);
                if (i < L && c < nc) o[(int64_t)(t0 + c0 + i) * ld_out + c] = os[nt][e];
            }

        /* S = e^cum_L S + (k e^(cum_L - cum))^T V' */
        const float el = expf(last);
        for (int mt = warp; mt < dk16 / 16; mt += kWarps) {
            float acc[kBV / 8][4] = {};
            for (int k0 = 0; k0 < kC; k0 += 8) {
                uint32_t ak[4];
                frag_at(m.k, ldk, mt * 16, k0, gq, tq, ak);
#pragma unroll
                for (int nt = 0; nt < kBV / 8; nt++) {
                    uint32_t b[2];
                    frag_b(m.u, kLdS, k0, nt * 8, gq, tq, b);
                    mma(acc[nt], ak, b);
                }
            }
#pragma unroll
            for (int nt = 0; nt < kBV / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float *sv = &m.s[acc_row(mt * 16, gq, e) * kLdS + acc_col(nt * 8, tq, e)];
                    *sv = *sv * el + acc[nt][e];
                }
        }
    }
    __syncthreads();
    for (int idx = tid; idx < dk * nc; idx += kThreads) {
        const int r = idx / nc, c = idx % nc;
        ssm_store(a.state, base + (int64_t)r * dv + c, m.s[r * kLdS + c]);
    }
}

/* Grid T: a warp per value head: out = w * rmsnorm(o) * silu(z), bf16; padding columns zero. */
__global__ void __launch_bounds__(kThreads)
    gated_norm_kernel(int Hv, int dv, const float *__restrict__ o, const float *__restrict__ z,
                      int64_t ld_z, const float *__restrict__ w, float eps,
                      __nv_bfloat16 *__restrict__ out, int64_t ld_out) {
    const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int h = warp; h < Hv; h += kWarps) {
        const float *oh = o + ((int64_t)t * Hv + h) * dv, *zh = z + (int64_t)t * ld_z + h * dv;
        float ss = 0.0f;
        for (int i = lane; i < dv; i += 32)
            ss = fmaf(oh[i], oh[i], ss);
        const float inv = 1.0f / sqrtf(ops_warp_sum(ss) / (float)dv + eps);
        for (int i = lane; i < dv; i += 32)
            out[(int64_t)t * ld_out + h * dv + i] =
                __float2bfloat16_rn(w[i] * (oh[i] * inv) * silu(zh[i]));
    }
    for (int64_t i = (int64_t)Hv * dv + threadIdx.x; i < ld_out; i += kThreads)
        out[(int64_t)t * ld_out + i] = __float2bfloat16_rn(0.0f);
}

/* ---- launchers ------------------------------------------------------------------------------- */

int check(const char *what, const ops_gdn_args_t *a, err_t *err) {
    if (a->T < 0 || a->n_seqs < 0 || a->n_seqs > 65535 || a->Hk <= 0 || a->Hv <= 0 ||
        a->Hv % a->Hk || a->Hv > 65535 || a->dk <= 0 || a->dk % 8 || a->dk > OPS_GDN_MAX_DIM ||
        a->dv <= 0 || a->dv % 8 || a->dv > OPS_GDN_MAX_DIM || a->K < 1 || a->K > OPS_GDN_MAX_CONV ||
        a->C != 2 * a->Hk * a->dk + a->Hv * a->dv)
        return err_set(err,
                       "%s: unsupported shape (T %d, %d seqs, heads %d / %d of %d / %d, conv %d "
                       "over %d channels; dk, dv multiples of 8 up to %d)",
                       what, a->T, a->n_seqs, a->Hk, a->Hv, a->dk, a->dv, a->K, a->C,
                       OPS_GDN_MAX_DIM);
    return 0;
}

dim3 head_grid(const ops_gdn_args_t *a) {
    return dim3((unsigned)a->n_seqs, (unsigned)a->Hv, (unsigned)((a->dv + kBV - 1) / kBV));
}

} // namespace

/* ---- public entry points --------------------------------------------------------------------- */

extern "C" int ops_gdn_check(const ops_gdn_args_t *a, err_t *err) {
    return check("ops_gdn", a, err);
}

extern "C" size_t ops_gdn_chunked_smem(int dk, int dv) {
    (void)dv;
    const size_t dk16 = (size_t)((dk + 15) & ~15), ldk = dk16 + 4;
    return (3 * kC * ldk + dk16 * kLdS + kC * kLdS + 2 * (size_t)kC * kLdA + 2 * kC) *
           sizeof(float);
}

extern "C" int ops_gdn_init(err_t *err) {
    CUDA_CHECK(cudaFuncSetAttribute((const void *)chunked_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)ops_gdn_chunked_smem(OPS_GDN_MAX_DIM, OPS_GDN_MAX_DIM)),
               err);
    return 0;
}

extern "C" int ops_gdn_conv(const ops_gdn_args_t *a, const float *x, int64_t ld_x, const float *w,
                            float *y, cudaStream_t stream, err_t *err) {
    if (check("ops_gdn_conv", a, err) < 0) return -1;
    if (a->T == 0) return 0;
    const unsigned blocks = (unsigned)((a->C + kConvThreads - 1) / kConvThreads);
    OPS_LAUNCH(conv_kernel, dim3((unsigned)a->T, blocks), kConvThreads, 0, stream, *a, x, ld_x, w,
               y);
    CUDA_CHECK(cudaGetLastError(), err);
    OPS_LAUNCH(conv_window_kernel, dim3((unsigned)a->n_seqs, blocks), kConvThreads, 0, stream, *a,
               x, ld_x);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int ops_gdn_prepare(const ops_gdn_args_t *a, float *y, const float *ba, int64_t ld_ba,
                               int a_col, const float *a_log, const float *dt_bias, float *g,
                               float *beta, cudaStream_t stream, err_t *err) {
    if (check("ops_gdn_prepare", a, err) < 0) return -1;
    if (a->T == 0) return 0;
    OPS_LAUNCH(prepare_kernel, dim3((unsigned)a->T), kThreads, 0, stream, *a, y, ba, ld_ba, a_col,
               a_log, dt_bias, g, beta);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int ops_gdn_chunked(const ops_gdn_args_t *a, const float *y, const float *g,
                               const float *beta, float *o, cudaStream_t stream, err_t *err) {
    if (check("ops_gdn_chunked", a, err) < 0) return -1;
    if (a->T == 0 || a->n_seqs == 0) return 0;
    const float q_scale = (float)pow((double)a->dk, -0.5); /* transformers: q * dk ** -0.5 */
    OPS_LAUNCH(chunked_kernel, head_grid(a), kThreads, ops_gdn_chunked_smem(a->dk, a->dv), stream,
               *a, y, g, beta, q_scale, o);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int ops_gdn_recurrent(const ops_gdn_args_t *a, const float *y, const float *g,
                                 const float *beta, float *o, cudaStream_t stream, err_t *err) {
    if (check("ops_gdn_recurrent", a, err) < 0) return -1;
    if (a->T == 0 || a->n_seqs == 0) return 0;
    OPS_LAUNCH(recurrent_kernel, head_grid(a), kThreads, 0, stream, *a, y, g, beta, o);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int ops_gdn_gated_norm(int T, int Hv, int dv, const float *o, const float *z,
                                  int64_t ld_z, const float *w, float eps, void *out,
                                  int64_t ld_out, cudaStream_t stream, err_t *err) {
    if (T < 0 || Hv <= 0 || dv <= 0 || ld_out < (int64_t)Hv * dv || ld_z < (int64_t)Hv * dv)
        return err_set(err, "ops_gdn_gated_norm: bad shape (T %d, %d heads of %d, ld %lld / %lld)",
                       T, Hv, dv, (long long)ld_z, (long long)ld_out);
    if (T == 0) return 0;
    OPS_LAUNCH(gated_norm_kernel, dim3((unsigned)T), kThreads, 0, stream, Hv, dv, o, z, ld_z, w,
               eps, static_cast<__nv_bfloat16 *>(out), ld_out);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

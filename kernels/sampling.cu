/*
 * sampling: the GPU sampler of ops.h, with sampler.h's semantics, one 1024-thread CTA per row.
 *
 * Nothing sorts the vocabulary. Every selection is a most-significant-digit radix descent over
 * 32-bit order-preserving float keys (4 passes of 8 bits, histograms in shared memory), then,
 * among the tokens tied on the selected value, an ascending radix descent over token ids: that
 * realises sampler.c's canonical order (descending probability, ties lower id first) exactly.
 * A "kept" set is always {candidates whose (key, id) is at or above a threshold (key*, id*)}
 * in that order, so top_k, top_p and the draw each just raise the threshold:
 *   - top_k: the k-th best candidate by count;
 *   - top_p: the element where the best-first cumulative mass reaches top_p * Z;
 *   - the draw: the element where it exceeds u * Z'.
 * Masses are expf(x - max) in 2^-32 fixed point (uint64): integer sums are exact and
 * associative, so the result does not depend on thread timing (atomics) or on the batch; a
 * weight below 2^-33 counts as zero (a probability too small to matter).
 *
 * Masks and penalties are never written into the logits: three bitmasks in shared memory (mask
 * ids, prompt ids, output ids) and the per-(row, id) output counts in the global workspace turn
 * a raw logit into the adjusted one on the fly, so the raw row stays available for logprobs.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cb_engine.h" /* first: C linkage for the engine headers */
#include "cuda_check.h"
#include "ops.h"
#include "ops_common.cuh"
#include "rng.h" /* the host sampler's counter-based draws, on the device */

namespace {

constexpr int kThreads = 1024;
constexpr float kSamplerEps = 1e-5f;    /* vLLM's _SAMPLING_EPS: below it, greedy */
constexpr double kFix = 4294967296.0;   /* mass units per unit of weight (2^32) */
constexpr int kMaxDynSmem = 160 * 1024; /* bitmask bytes allowed: 3 * vocab / 8 */

typedef unsigned long long u64;

struct Shared {
    u64 red[32];
    unsigned int hist[256];
    u64 mass[256];
    uint32_t sel_key, sel_id, sel_cnt;
    u64 sel_acc, sel_w;
    int sel_exhausted;
};

/* Reduction over the block with a fixed combination order (deterministic). Every thread gets
 * the result. All threads must call. */
template <typename T, typename Op> __device__ T block_reduce(T v, Shared &sh, Op op) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = op(v, __shfl_xor_sync(OPS_FULL_MASK, v, o));
    T *red = reinterpret_cast<T *>(sh.red);
    __syncthreads(); /* the previous reduction's readers are done */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    T r = red[0];
    for (int w = 1; w < kThreads / 32; w++)
        r = op(r, red[w]);
    return r;
}

struct MaxF {
    __device__ float operator()(float a, float b) const {
        return fmaxf(a, b);
    }
};
struct SumD {
    __device__ double operator()(double a, double b) const {
        return a + b;
    }
};
struct SumU {
    __device__ u64 operator()(u64 a, u64 b) const {
        return a + b;
    }
};
struct MaxU {
    __device__ u64 operator()(u64 a, u64 b) const {
        return a > b ? a : b;
    }
};
struct MinU {
    __device__ u64 operator()(u64 a, u64 b) const {
        return a < b ? a : b;
    }
};

/* One row: raw logits, masks, penalties, temperature; value(i) is sampler.c's logits[i] at the
 * moment of the draw (or of the greedy argmax, with scaled == false). */
struct Row {
    const float *x;
    int V;
    const uint32_t *mask, *prompt, *output; /* bitmasks [ceil(V / 32)] */
    const int32_t *cnt;                     /* [V] occurrences in the output */
    bool pen, rep, scaled;
    float rp, fp, pp, temp;

    __device__ __forceinline__ float value(int i) const {
        float v = x[i];
        const int w = i >> 5;
        const uint32_t bit = 1u << (i & 31);
        if (mask[w] & bit) return -INFINITY; /* -inf stays -inf through the steps below */
        if (pen) {
            const bool in_out = (output[w] & bit) != 0;
            if (rep && (in_out || (prompt[w] & bit))) v = v > 0.0f ? v / rp : v * rp;
            if (in_out) v = __fsub_rn(__fsub_rn(v, __fmul_rn(fp, (float)__ldcg(cnt + i))), pp);
        }
        if (scaled) v = v / temp;
        return v;
    }
};

/* The candidate test of sampler.c's sample_random, and the current threshold. */
struct Kept {
    float m, log_min_p;
    uint32_t key, id; /* keep (k, i) with k > key, or k == key and i <= id */

    __device__ __forceinline__ bool operator()(float v, int i, uint32_t &k) const {
        if (!(v > -INFINITY) || !(__fsub_rn(v, m) >= log_min_p)) return false;
        k = ops_float_key(v);
        return k > key || (k == key && (uint32_t)i <= id);
    }
    __device__ __forceinline__ u64 weight(float v) const {
        return __double2ull_rn((double)expf(__fsub_rn(v, m)) * kFix);
    }
};

/* The id of the r-th (1-based) smallest id among kept tokens whose key is `key`. */
__device__ uint32_t select_tied_id(const Row &row, const Kept &kept, uint32_t key, uint32_t r,
                                   Shared &sh) {
    if (r == 1) { /* the common case (no tie): one pass, a minimum */
        u64 first = ~0ull;
        for (int i = threadIdx.x; i < row.V; i += kThreads) {
            uint32_t k;
            if ((u64)i < first && kept(row.value(i), i, k) && k == key) first = (u64)i;
        }
        return (uint32_t)block_reduce(first, sh, MinU());
    }
    uint32_t prefix = 0, pmask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += kThreads)
            sh.hist[b] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < row.V; i += kThreads) {
            uint32_t k;
            if (((uint32_t)i & pmask) != prefix || !kept(row.value(i), i, k) || k != key) continue;
            atomicAdd(&sh.hist[((uint32_t)i >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            uint32_t need = r;
            int b = 0;
            for (; b < 255; b++) {
                if (need <= sh.hist[b]) break;
                need -= sh.hist[b];
            }
            sh.sel_id = prefix | ((uint32_t)b << shift);
            sh.sel_cnt = need;
        }
        __syncthreads();
        prefix = sh.sel_id;
        r = sh.sel_cnt;
        pmask |= 255u << shift;
    }
    return prefix;
}

/* Raises kept's threshold to the k-th best kept token (count of kept tokens > k). */
__device__ void select_top_k(const Row &row, Kept &kept, uint32_t k_need, Shared &sh) {
    uint32_t prefix = 0, pmask = 0, need = k_need, n_ties = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += kThreads)
            sh.hist[b] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < row.V; i += kThreads) {
            uint32_t key;
            if (!kept(row.value(i), i, key) || (key & pmask) != prefix) continue;
            atomicAdd(&sh.hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            uint32_t left = need;
            int b = 255;
            for (; b > 0; b--) {
                if (left <= sh.hist[b]) break;
                left -= sh.hist[b];
            }
            sh.sel_key = prefix | ((uint32_t)b << shift);
            sh.sel_id = left;
            sh.sel_cnt = sh.hist[b];
        }
        __syncthreads();
        prefix = sh.sel_key;
        need = sh.sel_id;
        n_ties = sh.sel_cnt;
        pmask |= 255u << shift;
    }
    /* need = rank among the ties on value `prefix`; all of them fit when need == n_ties. */
    uint32_t id = need >= n_ties ? 0xffffffffu : select_tied_id(row, kept, prefix, need, sh);
    if (prefix == kept.key && id > kept.id) id = kept.id;
    kept.key = prefix;
    kept.id = id;
}

__device__ __forceinline__ bool reached(double acc, double target, bool strict) {
    return strict ? acc > target : acc >= target;
}

/* Finds the kept token at which the best-first cumulative mass first reaches target (> with
 * strict, else >=), as sampler.c's mass_select. Returns its key in *key and its rank among the
 * tokens tied on that value in *rank (1-based); *n_ties is how many kept tokens share it. If
 * rounding keeps the total short of target, the answer is the last kept token. */
__device__ void mass_select(const Row &row, const Kept &kept, double target, bool strict,
                            uint32_t *key_out, uint32_t *rank, uint32_t *n_ties_out, Shared &sh) {
    uint32_t prefix = 0, pmask = 0;
    u64 acc = 0;
    bool exhausted = false;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += kThreads) {
            sh.hist[b] = 0;
            sh.mass[b] = 0;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < row.V; i += kThreads) {
            uint32_t key;
            const float v = row.value(i);
            if (!kept(v, i, key) || (key & pmask) != prefix) continue;
            const uint32_t b = (key >> shift) & 255u;
            atomicAdd(&sh.hist[b], 1u);
            atomicAdd(&sh.mass[b], kept.weight(v));
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int chosen = -1, lowest = -1;
            u64 a = acc;
            for (int b = 255; b >= 0; b--) {
                if (!sh.hist[b]) continue;
                lowest = b;
                if (!exhausted && reached((double)(a + sh.mass[b]), target, strict)) {
                    chosen = b;
                    break;
                }
                a += sh.mass[b];
            }
            int ex = exhausted;
            if (chosen < 0) { /* short of target: take the worst nonempty bin, all of it */
                chosen = lowest < 0 ? 0 : lowest;
                a -= lowest < 0 ? 0 : sh.mass[chosen];
                ex = 1;
            }
            sh.sel_key = prefix | ((uint32_t)chosen << shift);
            sh.sel_acc = a;
            sh.sel_cnt = sh.hist[chosen];
            sh.sel_w = sh.mass[chosen] / (sh.hist[chosen] ? sh.hist[chosen] : 1u);
            sh.sel_exhausted = ex;
        }
        __syncthreads();
        prefix = sh.sel_key;
        acc = sh.sel_acc;
        exhausted = sh.sel_exhausted != 0;
        pmask |= 255u << shift;
    }
    /* Tokens tied on one value have the same weight w: the crossing is at the r-th of them. */
    const uint32_t n_ties = sh.sel_cnt;
    const u64 w = sh.sel_w;
    uint32_t r = n_ties;
    if (!exhausted && w > 0 && n_ties > 1) {
        const double r0 = (target - (double)acc) / (double)w;
        double rr = strict ? floor(r0) + 1.0 : ceil(r0);
        rr = fmin(fmax(rr, 1.0), (double)n_ties);
        r = (uint32_t)rr;
        while (r > 1 && reached((double)(acc + (u64)(r - 1) * w), target, strict))
            r--;
        while (r < n_ties && !reached((double)(acc + (u64)r * w), target, strict))
            r++;
    }
    *key_out = prefix;
    *rank = r < 1 ? 1 : r;
    *n_ties_out = n_ties;
}

/* Total mass of the kept tokens. */
__device__ u64 kept_mass(const Row &row, const Kept &kept, Shared &sh) {
    u64 z = 0;
    for (int i = threadIdx.x; i < row.V; i += kThreads) {
        uint32_t key;
        const float v = row.value(i);
        if (kept(v, i, key)) z += kept.weight(v);
    }
    return block_reduce(z, sh, SumU());
}

/* sampler.c's argmax: the first index of the largest value, NaN ignored, 0 when none is above
 * -inf. */
__device__ int32_t argmax(const Row &row, Shared &sh) {
    float m = -INFINITY;
    for (int i = threadIdx.x; i < row.V; i += kThreads)
        m = fmaxf(m, row.value(i));
    m = block_reduce(m, sh, MaxF());
    if (!(m > -INFINITY)) return 0;
    u64 first = ~0ull;
    for (int i = threadIdx.x; i < row.V; i += kThreads)
        if (row.value(i) == m && (u64)i < first) first = (u64)i;
    return (int32_t)block_reduce(first, sh, MinU());
}

__device__ int32_t sample_random(const Row &row, const ops_sample_row_t &p, uint64_t seed,
                                 Shared &sh) {
    float m = -INFINITY;
    for (int i = threadIdx.x; i < row.V; i += kThreads)
        m = fmaxf(m, row.value(i));
    m = block_reduce(m, sh, MaxF());
    if (!isfinite(m)) return argmax(row, sh);

    Kept kept;
    kept.m = m;
    kept.log_min_p = p.min_p > 0.0f ? logf(p.min_p) : -INFINITY;
    kept.key = 0; /* below every finite value's key: keep all candidates */
    kept.id = 0xffffffffu;

    if (p.top_k > 0 && p.top_k < row.V) {
        u64 n = 0;
        for (int i = threadIdx.x; i < row.V; i += kThreads) {
            uint32_t key;
            n += kept(row.value(i), i, key) ? 1 : 0;
        }
        n = block_reduce(n, sh, SumU());
        if (n > (u64)p.top_k) select_top_k(row, kept, (uint32_t)p.top_k, sh);
    }
    u64 z = kept_mass(row, kept, sh);
    uint32_t key, rank, n_ties;
    if (p.top_p < 1.0f) {
        mass_select(row, kept, (double)p.top_p * (double)z, false, &key, &rank, &n_ties, sh);
        uint32_t id = rank >= n_ties ? 0xffffffffu : select_tied_id(row, kept, key, rank, sh);
        if (key == kept.key && id > kept.id) id = kept.id;
        kept.key = key;
        kept.id = id;
        z = kept_mass(row, kept, sh);
    }
    const double u =
        (double)(rng_bits(seed, (uint64_t)p.choice, (uint64_t)p.n_output) >> 11) * 0x1.0p-53;
    mass_select(row, kept, u * (double)z, true, &key, &rank, &n_ties, sh);
    return (int32_t)select_tied_id(row, kept, key, rank, sh);
}

/* ---- kernel --------------------------------------------------------------------------------- */

/* Grid n_rows, 1024 threads, dynamic shared memory 3 * ceil(V / 32) words. */
__global__ void __launch_bounds__(kThreads, 1)
    sample_kernel(const float *__restrict__ logits, int64_t ld, int V,
                  const ops_sample_row_t *__restrict__ rows, const int32_t *__restrict__ arena,
                  int32_t *__restrict__ counts, sampler_result_t *__restrict__ out) {
    uint32_t *bits = ops_dynamic_smem_u32(); /* 3 bitmasks of ceil(V / 32) words */
    __shared__ Shared sh;
    const int W = (V + 31) / 32;
    const int r_idx = blockIdx.x;
    const ops_sample_row_t p = rows[r_idx];
    const float *x = logits + (int64_t)r_idx * ld;
    int32_t *cnt = counts + (int64_t)r_idx * V;
    uint32_t *mask = bits, *prompt = bits + W, *output = bits + 2 * W;

    for (int w = threadIdx.x; w < 3 * W; w += kThreads)
        bits[w] = 0;
    __syncthreads();

    const bool rep = p.repetition_penalty != 1.0f;
    const bool pen = rep || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
    if (p.n_output < p.min_tokens) {
        for (int i = threadIdx.x; i < p.n_mask; i += kThreads) {
            const int32_t t = arena[p.mask_off + i];
            if (t >= 0 && t < V) atomicOr(&mask[t >> 5], 1u << (t & 31));
        }
    }
    if (pen) {
        for (int i = threadIdx.x; i < p.n_output_tokens; i += kThreads) {
            const int32_t t = arena[p.output_off + i];
            if (t < 0 || t >= V) continue;
            atomicAdd(&cnt[t], 1);
            atomicOr(&output[t >> 5], 1u << (t & 31));
        }
        if (rep) {
            for (int i = threadIdx.x; i < p.n_prompt_tokens; i += kThreads) {
                const int32_t t = arena[p.prompt_off + i];
                if (t >= 0 && t < V) atomicOr(&prompt[t >> 5], 1u << (t & 31));
            }
        }
    }
    __syncthreads(); /* bitmasks and counts complete (counts are read with __ldcg, from L2) */

    /* Logprobs of the raw distribution, before any mask or penalty (sampler.c's order). */
    const bool want = p.logprobs >= 0;
    double lse = 0.0;
    if (want) {
        float mr = -INFINITY;
        for (int i = threadIdx.x; i < V; i += kThreads)
            mr = fmaxf(mr, x[i]);
        mr = block_reduce(mr, sh, MaxF());
        if (!isfinite(mr)) {
            lse = (double)mr;
        } else {
            double s = 0.0;
            for (int i = threadIdx.x; i < V; i += kThreads)
                s += (double)expf(x[i] - mr);
            lse = (double)mr + log(block_reduce(s, sh, SumD()));
        }
        const int n_top = p.logprobs < V ? p.logprobs : V;
        u64 bound = ~0ull; /* next pick: the best (key, lower id) strictly below the last one */
        int got = 0;
        for (; got < n_top && got < SAMPLING_MAX_LOGPROBS; got++) {
            u64 best = 0;
            for (int i = threadIdx.x; i < V; i += kThreads) {
                const float v = x[i];
                if (isnan(v)) continue;
                const u64 k = ((u64)ops_float_key(v) << 32) | (u64)(0xffffffffu - (uint32_t)i);
                if (k < bound && k > best) best = k;
            }
            best = block_reduce(best, sh, MaxU());
            if (best == 0) break;
            bound = best;
            if (threadIdx.x == 0) {
                const int32_t id = (int32_t)(0xffffffffu - (uint32_t)(best & 0xffffffffu));
                out[r_idx].top_ids[got] = id;
                out[r_idx].top_logprobs[got] = (float)((double)x[id] - lse);
            }
        }
        if (threadIdx.x == 0) out[r_idx].n_top = got;
    }

    Row row;
    row.x = x;
    row.V = V;
    row.mask = mask;
    row.prompt = prompt;
    row.output = output;
    row.cnt = cnt;
    row.pen = pen;
    row.rep = rep;
    row.rp = p.repetition_penalty;
    row.fp = p.frequency_penalty;
    row.pp = p.presence_penalty;
    row.temp = p.temperature;
    row.scaled = p.temperature >= kSamplerEps;

    const int32_t tok = row.scaled ? sample_random(row, p, p.seed, sh) : argmax(row, sh);
    if (threadIdx.x == 0) {
        out[r_idx].token = tok;
        out[r_idx].logprob = want ? (float)((double)x[tok] - lse) : 0.0f;
        if (!want) out[r_idx].n_top = 0;
    }

    __syncthreads(); /* every read of cnt is done: leave the workspace zero for the next call */
    if (pen) {
        for (int i = threadIdx.x; i < p.n_output_tokens; i += kThreads) {
            const int32_t t = arena[p.output_off + i];
            if (t >= 0 && t < V) cnt[t] = 0;
        }
    }
}

int dyn_smem_bytes(int vocab) {
    return 3 * ((vocab + 31) / 32) * (int)sizeof(uint32_t);
}

/* ids[i] < 0 is a placeholder for the token sampled at row -(1 + ids[i]). */
__global__ void resolve_placeholders_kernel(int32_t *ids, int n, const sampler_result_t *res) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && ids[i] < 0) ids[i] = res[-(ids[i] + 1)].token;
}

} // namespace

/* ---- public entry points -------------------------------------------------------------------- */

extern "C" int ops_resolve_placeholders(int32_t *ids, int n, const sampler_result_t *res,
                                        cudaStream_t stream, err_t *err) {
    if (n <= 0) return 0;
    OPS_LAUNCH((resolve_placeholders_kernel), (n + 255) / 256, 256, 0, stream, ids, n, res);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int ops_init(err_t *err) {
    CUDA_CHECK(cudaFuncSetAttribute((const void *)sample_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxDynSmem),
               err);
    return attn_mma_init(err);
}

extern "C" size_t ops_sample_workspace_bytes(int max_rows, int vocab) {
    return (size_t)(max_rows > 0 ? max_rows : 0) * (size_t)(vocab > 0 ? vocab : 0) *
           sizeof(int32_t);
}

extern "C" int ops_sample(const float *logits, int64_t ld_logits, int n_rows, int vocab,
                          const ops_sample_row_t *rows, const int32_t *arena, void *counts,
                          sampler_result_t *out, cudaStream_t stream, err_t *err) {
    if (n_rows < 0 || vocab <= 0 || ld_logits < vocab)
        return err_set(err, "ops_sample: bad shape (%d rows, vocab %d, row stride %lld)", n_rows,
                       vocab, (long long)ld_logits);
    if (dyn_smem_bytes(vocab) > kMaxDynSmem)
        return err_set(err, "ops_sample: vocab %d too large for the shared-memory bitmasks", vocab);
    if (n_rows == 0) return 0;
    OPS_LAUNCH((sample_kernel), n_rows, kThreads, dyn_smem_bytes(vocab), stream, logits, ld_logits,
               vocab, rows, arena, static_cast<int32_t *>(counts), out);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

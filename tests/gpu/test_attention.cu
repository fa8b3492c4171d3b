/* The attention kernels of kernels/ops.h (prefill and split-KV decode on tensor cores for
 * head_dim 128 and 256, on CUDA cores for 64 and through the _simt entry points; mixed batches
 * split between the two) against the CPU
 * reference (engine/cpu/cpu_ops.h cpu_attention_head) on fresh random inputs every run (the seed
 * is printed; TACHYON_TEST_SEED=n replays one), on the GPU and in the host emulation
 * (tests/gpu/emu, smaller sizes). Outputs are poisoned with 0xff bytes (NaN) before a launch
 * and every comparison fails on NaN, so a row a kernel forgot is caught; unused block-table
 * entries are -1 and the blocks are handed out shuffled.
 *
 * Tolerances, per element (bf16 outputs), and why:
 * - CUDA-core kernels (_simt, head_dim 64): |gpu - ref| <= 2^-8 |ref| + 1e-4.
 *   The f32 online softmax (exp2 of pre-scaled scores, another summation order) differs from
 *   the CPU's two-pass f32 softmax by ~1e-6 relative; the rest is bf16 output rounding (2^-8
 *   covers one ulp). An off-by-one in masking or a wrong block changes outputs by
 *   ~|v| / n_keys >= 3e-4 at the context lengths used, so abs stays below that.
 * - tensor cores (prefill and decode): |gpu - ref| <= 2^-8 |ref| + 1.05 * 2^-8 * A + 1e-5, with
 *   A = sum_k p_k |v_k| (p the CPU's normalized weights) for that output element. The kernel
 *   rounds each weight to bf16 before P V (8 significant bits: relative error <= 2^-8) and
 *   normalizes by the sum of the unrounded weights, so its P V differs from the reference by at
 *   most 2^-8 A; scores are exact bf16 products summed in f32 (~1e-6 relative), the 5% covers
 *   that; 2^-8 |ref| is the bf16 output rounding. A masking
 *   off-by-one moves an output by ~|v| / n_keys, above the bound on the rows with few keys
 *   that every case has (each sequence's first tokens).
 * - prefill and decode of the same token (tensor cores, one decode split): bit for bit, the
 *   property the engine's batch-invariance tests rest on (the kernel is shared, and each output
 *   element of an mma depends only on its own row and column).
 * - every case: the relative Frobenius error of the whole output under 3e-3 (bf16 rounding of
 *   P alone gives ~1.5e-3: independent relative errors of rms ~2^-8 / sqrt(3) x 0.7).
 * Exit 77 without a Hopper GPU. */
#include "cb_engine.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_backend.h"
#include "ops.h"
#include "gpu_check.h"
#include "kernel_test.h"

struct AttnCase {
    int D, Hq, Hkv, bs;
    bool fp8;
    bool decode;
    int splits; /* decode: 0 = the heuristic */
    std::vector<int> prefix, q_len;
    bool simt;        /* prefill through ops_attention_prefill_simt */
    const char *what; /* what the case covers, in its name */
    /* prefill, then decode of the one-token sequences (ops_attn_args_t.mixed) */
    bool mixed = false;
    /* prefill, then each sequence's last token again as a decode (one split): the two must
     * agree bit for bit, which batch invariance rests on (a token's attention must not depend
     * on whether a prefill chunk, a decode or a mixed step computes it) */
    bool decode_again = false;
    /* fp8 quantized from bf16 (the long-context accuracy check): K and V are random bf16 values,
     * quantized on the host as the write kernels do at k_scale = amax(K) / 448 and v_scale =
     * amax(V) / 448 (a calibration's per-tensor scales), with three needles per sequence (keys
     * at the start, the middle and the end aligned with its first query's head 0, so that row's
     * output rests on three far-apart slots). Besides the check against the dequantized values,
     * the output is compared with the CPU's attention on the bf16 values themselves: relative
     * Frobenius error at most bf16_frob, stored in *frob_out. */
    bool quantize = false;
    double bf16_frob = 0.0;
    double *frob_out = nullptr;
};

/* Whether this case runs on tensor cores (attention_mma.cu: prefill and decode of head_dim 128
 * and 256, unless the _simt entry points are asked for). */
static bool tensor_cores(const AttnCase &c) {
    return !c.simt && (c.D == 128 || c.D == 256);
}

/* |got - ref| <= 2^-8 |ref| + 1.05 * 2^-8 * A + 1e-5 per element (the header says why). */
static void close_bound(const char *what, const std::vector<float> &got,
                        const std::vector<float> &ref, const std::vector<float> &A) {
    size_t bad = 0, first = 0;
    double worst = 0.0, worst_ratio = 0.0, num = 0.0, den = 0.0;
    for (size_t i = 0; i < got.size(); i++) {
        const double e = fabs((double)got[i] - (double)ref[i]);
        num += e * e;
        den += (double)ref[i] * (double)ref[i];
        const double tol = 0x1p-8 * fabs((double)ref[i]) + 1.05 * 0x1p-8 * A[i] + 1e-5;
        if (!(e <= tol)) {
            if (!bad) first = i;
            bad++;
        }
        if (!(e <= worst)) worst = e;
        if (e / tol > worst_ratio) worst_ratio = e / tol;
    }
    if (bad)
        fail("%-60s FAIL: %zu of %zu outside the bound, first at %zu (gpu %g, ref %g, A %g)\n",
             what, bad, got.size(), first, (double)got[first], (double)ref[first],
             (double)A[first]);
    else
        printf("%-60s ok (max abs err %.3g, %.2f of the bound, Frobenius %.2g)\n", what, worst,
               worst_ratio, sqrt(num / den));
}

static void run_attention(const AttnCase &c) {
    const int S = (int)c.prefix.size();
    char name[200];
    snprintf(name, sizeof name, "attention %s D=%d heads=%d/%d bs=%d kv=%s seqs=%d%s%s",
             c.decode  ? (c.simt ? "decode_simt" : "decode")
             : c.mixed ? "mixed"
             : c.simt  ? "prefill_simt"
                       : "prefill",
             c.D, c.Hq, c.Hkv, c.bs, c.fp8 ? "fp8" : "bf16", S, c.what ? " " : "",
             c.what ? c.what : "");
    const int D = c.D;
    std::vector<int32_t> qs(S + 1, 0), ctx(S);
    int max_q = 0, max_blocks = 0, total_blocks = 0, max_ctx = 0;
    for (int s = 0; s < S; s++) {
        qs[s + 1] = qs[s] + c.q_len[s];
        ctx[s] = c.prefix[s] + c.q_len[s];
        max_q = c.q_len[s] > max_q ? c.q_len[s] : max_q;
        max_ctx = ctx[s] > max_ctx ? ctx[s] : max_ctx;
        int nb = (ctx[s] + c.bs - 1) / c.bs;
        max_blocks = nb > max_blocks ? nb : max_blocks;
        total_blocks += nb;
    }
    const int T = qs[S], stride = max_blocks + 3, num_blocks = total_blocks + 5;
    /* Blocks handed out in a shuffled order; unused table entries are -1 (never to be read). */
    std::vector<int32_t> perm(num_blocks), table((size_t)S * stride, -1);
    for (int i = 0; i < num_blocks; i++)
        perm[i] = i;
    for (int i = num_blocks - 1; i > 0; i--) {
        int j = irand(i + 1);
        int32_t x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    for (int s = 0, next = 0; s < S; s++)
        for (int b = 0; b < (ctx[s] + c.bs - 1) / c.bs; b++)
            table[(size_t)s * stride + b] = perm[next++];

    const size_t n_elem = (size_t)num_blocks * c.bs * c.Hkv * D;
    /* distinct scales, neither a power of two: a swap or a dropped scale fails */
    float k_scale = c.fp8 ? 0.625f : 1.0f, v_scale = c.fp8 ? 0.375f : 1.0f;
    std::vector<float> kf(n_elem), vf(n_elem), k_orig, v_orig;
    std::vector<uint8_t> k8, v8;
    std::vector<uint16_t> kb, vb;
    std::vector<uint16_t> qb;
    std::vector<float> qf;
    if (c.quantize) {
        rand_bf16((size_t)T * c.Hq * D, 4.0f, qb, qf);
        rand_bf16(n_elem, 1.0f, kb, k_orig);
        rand_bf16(n_elem, 1.0f, vb, v_orig);
        for (int s = 0; s < S; s++)
            for (int pos : {3, ctx[s] / 2 + 1, ctx[s] - 2}) {
                const int64_t slot =
                    (int64_t)table[(size_t)s * stride + pos / c.bs] * c.bs + pos % c.bs;
                for (int d = 0; d < D; d++)
                    k_orig[(size_t)slot * c.Hkv * D + d] =
                        bf(dtype_f32_to_bf16(qf[(size_t)qs[s] * c.Hq * D + d] > 0 ? 0.9f : -0.9f));
            }
        float k_amax = 0.0f, v_amax = 0.0f;
        for (size_t i = 0; i < n_elem; i++) {
            k_amax = fabsf(k_orig[i]) > k_amax ? fabsf(k_orig[i]) : k_amax;
            v_amax = fabsf(v_orig[i]) > v_amax ? fabsf(v_orig[i]) : v_amax;
        }
        k_scale = k_amax / 448.0f;
        v_scale = v_amax / 448.0f;
        k8.resize(n_elem);
        v8.resize(n_elem);
        for (size_t i = 0; i < n_elem; i++) { /* kernels/fused.cu's rounding */
            k8[i] = dtype_f32_to_e4m3(fminf(fmaxf(k_orig[i] / k_scale, -448.0f), 448.0f));
            v8[i] = dtype_f32_to_e4m3(fminf(fmaxf(v_orig[i] / v_scale, -448.0f), 448.0f));
            kf[i] = bf(dtype_f32_to_bf16(dtype_e4m3_to_f32(k8[i]) * k_scale));
            vf[i] = bf(dtype_f32_to_bf16(dtype_e4m3_to_f32(v8[i]) * v_scale));
        }
    } else if (c.fp8) {
        k8.resize(n_elem);
        v8.resize(n_elem);
        for (size_t i = 0; i < n_elem; i++) {
            k8[i] = dtype_f32_to_e4m3(sym(2.0f));
            v8[i] = dtype_f32_to_e4m3(sym(2.0f));
            kf[i] = bf(dtype_f32_to_bf16(dtype_e4m3_to_f32(k8[i]) * k_scale));
            vf[i] = bf(dtype_f32_to_bf16(dtype_e4m3_to_f32(v8[i]) * v_scale));
        }
    } else {
        rand_bf16(n_elem, 1.0f, kb, kf);
        rand_bf16(n_elem, 1.0f, vb, vf);
    }
    if (!c.quantize) rand_bf16((size_t)T * c.Hq * D, 4.0f, qb, qf);

    uint8_t *d_k = dev<uint8_t>(n_elem * (c.fp8 ? 1 : 2)),
            *d_v = dev<uint8_t>(n_elem * (c.fp8 ? 1 : 2));
    if (c.fp8) {
        put(d_k, k8);
        put(d_v, v8);
    } else {
        CK(cudaMemcpy(d_k, kb.data(), n_elem * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_v, vb.data(), n_elem * 2, cudaMemcpyHostToDevice));
    }
    uint16_t *d_q = dev<uint16_t>(qb.size()), *d_o = dev<uint16_t>(qb.size());
    int32_t *d_qs = dev<int32_t>(S + 1), *d_ctx = dev<int32_t>(S),
            *d_tab = dev<int32_t>(table.size());
    put(d_q, qb);
    put(d_qs, qs);
    put(d_ctx, ctx);
    put(d_tab, table);

    ops_attn_args_t a = {};
    a.q = d_q;
    a.out = d_o;
    a.k_cache = d_k;
    a.v_cache = d_v;
    a.kv_dtype = c.fp8 ? OPS_KV_FP8 : OPS_KV_BF16;
    a.k_scale = k_scale;
    a.v_scale = v_scale;
    a.n_seqs = S;
    a.n_tokens = c.bs == 16 ? T : 0; /* both prefill grid bounds: by tokens and by max_q_len */
    a.n_heads = c.Hq;
    a.n_kv_heads = c.Hkv;
    a.head_dim = D;
    a.block_size = c.bs;
    a.query_start = d_qs;
    a.context_len = d_ctx;
    a.block_tables = d_tab;
    a.block_table_stride = stride;
    a.scale = (float)(1.0 / sqrt((double)D));
    void *ws = nullptr;
    a.mixed = c.mixed;
    if (!c.decode && c.simt)
        OPS(ops_attention_prefill_simt(&a, max_q, 0, ERR));
    else if (!c.decode)
        OPS(ops_attention_prefill(&a, max_q, 0, ERR));
    if (c.decode || c.mixed) {
        int dev_id, sms, n_dec = 0, dec_ctx = 0;
        for (int s = 0; s < S; s++)
            if (c.q_len[s] == 1) {
                n_dec++;
                dec_ctx = ctx[s] > dec_ctx ? ctx[s] : dec_ctx;
            }
        CK(cudaGetDevice(&dev_id));
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev_id));
        int splits =
            c.splits ? c.splits : ops_attention_decode_splits(n_dec, c.Hkv, dec_ctx, sms, 64);
        int max_splits = splits > 64 ? splits : 64;
        ws = dev<uint8_t>(ops_attention_workspace_bytes(S, c.Hq, D, max_splits));
        if (c.simt)
            OPS(ops_attention_decode_simt(&a, splits, ws, 0, ERR));
        else
            OPS(ops_attention_decode(&a, splits, ws, 0, ERR));
        snprintf(name + strlen(name), sizeof name - strlen(name), " splits=%s%d",
                 c.splits ? "" : "heuristic ", splits);
    }
    std::vector<float> out = bf16_vec(get(d_o, qb.size()));
    if (c.decode_again) {
        /* the last token of each sequence, alone, as a decode of one split */
        const size_t row = (size_t)c.Hq * D;
        std::vector<int32_t> qs1(S + 1);
        std::vector<uint16_t> q1((size_t)S * row);
        for (int s = 0; s <= S; s++)
            qs1[s] = s;
        for (int s = 0; s < S; s++)
            memcpy(&q1[s * row], &qb[(size_t)(qs[s + 1] - 1) * row], row * 2);
        uint16_t *d_q1 = dev<uint16_t>(q1.size()), *d_o1 = dev<uint16_t>(q1.size());
        int32_t *d_qs1 = dev<int32_t>(S + 1);
        put(d_q1, q1);
        put(d_qs1, qs1);
        ops_attn_args_t a1 = a;
        a1.q = d_q1;
        a1.out = d_o1;
        a1.query_start = d_qs1;
        a1.n_tokens = S;
        a1.mixed = 0;
        OPS(ops_attention_decode(&a1, 1, nullptr, 0, ERR));
        const std::vector<uint16_t> o1 = get(d_o1, q1.size()), o = get(d_o, qb.size());
        int differ = 0;
        for (int s = 0; s < S; s++)
            differ += memcmp(&o1[s * row], &o[(size_t)(qs[s + 1] - 1) * row], row * 2) != 0;
        char what[240];
        snprintf(what, sizeof what, "%s: decode = prefill", name);
        if (differ)
            fail("%-60s FAIL: %d of %d sequences' last tokens differ\n", what, differ, S);
        else
            printf("%-60s ok (bit for bit)\n", what);
        cudaFree(d_q1);
        cudaFree(d_o1);
        cudaFree(d_qs1);
    }

    std::vector<float> ref(qb.size()), scores(max_ctx + 1);
    /* the CPU backend keeps a KV head's rows of a block together (cpu_ops.h), the kernels a
     * token's heads: the reference reads a head-major copy of the same values */
    std::vector<float> kh(kf.size()), vh(vf.size());
    auto head_major = [&](const std::vector<float> &k, const std::vector<float> &v) {
        for (size_t slot = 0; slot < k.size() / ((size_t)c.Hkv * D); slot++)
            for (int h = 0; h < c.Hkv; h++) {
                const size_t from = (slot * c.Hkv + h) * D,
                             to = (size_t)cpu_kv_offset((int64_t)slot, h, c.Hkv, c.bs, D);
                std::copy(&k[from], &k[from] + D, &kh[to]);
                std::copy(&v[from], &v[from] + D, &vh[to]);
            }
    };
    head_major(kf, vf);
    cpu_attn_t ca = {};
    ca.q = qf.data();
    ca.out = ref.data();
    ca.k_cache = kh.data();
    ca.v_cache = vh.data();
    ca.block_size = c.bs;
    ca.n_heads = c.Hq;
    ca.n_kv_heads = c.Hkv;
    ca.head_dim = D;
    ca.scale = a.scale;
    ca.query_start = qs.data();
    ca.context_len = ctx.data();
    ca.block_tables = table.data();
    ca.block_table_stride = stride;
    /* A[t, h, d] = sum_k p_k |v_k[d]| from the reference's weights (unnormalized in scores). */
    std::vector<float> A(tensor_cores(c) ? qb.size() : 0);
    std::vector<double> acc(D);
    for (int s = 0; s < S; s++)
        for (int t = qs[s]; t < qs[s + 1]; t++)
            for (int h = 0; h < c.Hq; h++) {
                cpu_attention_head(&ca, s, t, h, scores.data());
                if (A.empty()) continue;
                const int n_keys = ctx[s] - (qs[s + 1] - t) + 1, kvh = h / (c.Hq / c.Hkv);
                double sum = 0.0;
                std::fill(acc.begin(), acc.end(), 0.0);
                for (int k = 0; k < n_keys; k++) {
                    const int64_t slot =
                        (int64_t)table[(size_t)s * stride + k / c.bs] * c.bs + k % c.bs;
                    const float *v = &vf[((size_t)slot * c.Hkv + kvh) * D];
                    sum += scores[k];
                    for (int d = 0; d < D; d++)
                        acc[d] += (double)scores[k] * fabs((double)v[d]);
                }
                for (int d = 0; d < D; d++)
                    A[((size_t)t * c.Hq + h) * D + d] = (float)(acc[d] / sum);
            }
    if (A.empty())
        close_all(name, out.data(), ref.data(), out.size(), 0x1p-8, 1e-4);
    else
        close_bound(name, out, ref, A);
    frob(name, out.data(), ref.data(), out.size(), 3e-3);
    if (c.quantize) { /* against the CPU's attention on the bf16 values */
        head_major(k_orig, v_orig);
        std::vector<float> ref16(qb.size());
        ca.out = ref16.data();
        for (int s = 0; s < S; s++)
            for (int t = qs[s]; t < qs[s + 1]; t++)
                for (int h = 0; h < c.Hq; h++)
                    cpu_attention_head(&ca, s, t, h, scores.data());
        double num = 0.0, den = 0.0;
        for (size_t i = 0; i < out.size(); i++) {
            num += ((double)out[i] - ref16[i]) * ((double)out[i] - ref16[i]);
            den += (double)ref16[i] * ref16[i];
        }
        const double e = sqrt(num / den);
        if (c.frob_out) *c.frob_out = e;
        char what[240];
        snprintf(what, sizeof what, "%s: vs bf16 attention (k/v scales %.3g / %.3g)", name,
                 (double)k_scale, (double)v_scale);
        if (!(e <= c.bf16_frob))
            fail("%-60s FAIL: relative Frobenius error %.3g > %.3g\n", what, e, c.bf16_frob);
        else
            printf("%-60s ok (relative Frobenius error %.3g, tolerance %.3g)\n", what, e,
                   c.bf16_frob);
    }
    cudaFree(d_k);
    cudaFree(d_v);
    cudaFree(d_q);
    cudaFree(d_o);
    cudaFree(d_qs);
    cudaFree(d_ctx);
    cudaFree(d_tab);
    cudaFree(ws);
}

static void test_attention(void) {
    struct Shape {
        int D, Hq, Hkv;
    } shapes[] = {{128, 4, 2}, {128, 40, 8}, {128, 64, 8}, {64, 8, 8}, {128, 16, 1}, {256, 16, 4}};
    for (const Shape &sh : shapes) {
        if (SIZE(false, sh.Hq > 16)) continue; /* emulation: the wide shapes take too long */
        for (int bs : {16, 32})
            for (int fp8 = 0; fp8 < 2; fp8++) {
                if (fp8 && sh.Hq != 40 && sh.Hq != 4 && sh.D != 256) continue;
                /* Prefill: fresh prompts, chunks after cached prefixes, decodes mixed in, a prefix
                 * ending mid-block and one ending on a block edge. */
                AttnCase p = {sh.D, sh.Hq, sh.Hkv, bs, fp8 != 0, false, 0, {}, {}, false, nullptr};
                const int pre[] = {0, 37, SIZE(300, 60), 16 * 3, SIZE(1000, 90),
                                   5, 0,  SIZE(511, 31)};
                const int ql[] = {SIZE(70, 20), 1, SIZE(64, 9), 16, 1, SIZE(130, 40), 1, 33};
                for (int i = 0; i < SIZE(8, 5); i++) {
                    p.prefix.push_back(pre[i] + (i == 2 ? irand(40) : 0));
                    p.q_len.push_back(ql[i] + (i == 0 ? irand(20) : 0));
                }
                run_attention(p);
                if (sh.D == 128 && sh.Hq == 4 && bs == 16 && !fp8) { /* the CUDA-core kernel */
                    p.simt = true;
                    run_attention(p);
                    p.simt = false;
                }
                /* The same batch as a mixed step: its one-token sequences through the decode
                 * kernel (fixed splits and the heuristic), the others through prefill. */
                p.mixed = true;
                p.splits = bs == 16 ? 3 : 0;
                run_attention(p);
                /* Decode: ragged contexts, splits off, fixed and heuristic. */
                for (int splits : {1, 3, 8, 0}) {
                    AttnCase d = {sh.D,   sh.Hq, sh.Hkv, bs,    fp8 != 0, true,
                                  splits, {},    {},     false, nullptr};
                    for (int s = 0; s < SIZE(12, 5); s++) {
                        int len = s == 0   ? 1
                                  : s == 1 ? bs
                                  : s == 2 ? SIZE(3000, 300)
                                           : 1 + irand(SIZE(2500, 200));
                        d.prefix.push_back(len - 1);
                        d.q_len.push_back(1);
                    }
                    run_attention(d);
                    if (splits == 3 && sh.D == 128 && sh.Hq == 4 && bs == 16 && !fp8) {
                        d.simt = true; /* the CUDA-core decode kernel */
                        run_attention(d);
                    }
                }
            }
    }
    /* More sequences than a prefill CTA scans at once (256): the tile search crosses chunks. */
    AttnCase many = {128, 4, 2, 16, false, false, 0, {}, {}, false, "300 sequences"};
    for (int i = 0; i < 300; i++) {
        many.prefix.push_back(irand(40));
        many.q_len.push_back(1 + irand(3));
    }
    run_attention(many);
}

/* The tensor-core prefill's edges: row tiles of exactly 64 rows and one token more or less,
 * key tiles (64 keys for D = 128, 32 for D = 256) ending exactly at, one before and one past a
 * context, GQA groups 1 to 16, prefix-cached chunks spanning several row tiles, single tokens;
 * bf16 and fp8 caches. */
static void test_prefill_edges(void) {
    struct Shape {
        int D, Hq, Hkv;
    } shapes[] = {{128, 1, 1}, {128, 5, 1}, {128, 8, 2}, {128, 16, 1}, {256, 3, 1}, {256, 8, 2}};
    for (const Shape &sh : shapes)
        for (int fp8 = 0; fp8 < 2; fp8++) {
            const int G = sh.Hq / sh.Hkv, BN = sh.D == 256 ? 32 : 64, R = 64 / G;
            AttnCase c = {sh.D, sh.Hq, sh.Hkv, fp8 ? 32 : 16, fp8 != 0,    false,
                          0,    {},    {},     false,         "tile edges"};
            c.decode_again = true;
            const int pre[] = {0, 0, 0, BN - 1, BN, BN - 2, 2 * BN - R, BN + 3, 0};
            const int ql[] = {R, R + 1, R > 1 ? R - 1 : 1, 1, 1, 1, R, 2 * R + 5, 1};
            for (int i = 0; i < 9; i++) {
                c.prefix.push_back(pre[i]);
                c.q_len.push_back(ql[i]);
            }
            run_attention(c);
        }
    /* Long contexts: a chunk after a long cached prefix next to a short prompt, with Qwen3-14B's
     * group of 5 and Qwen3.5's head_dim 256. */
    for (int fp8 = 0; fp8 < 2; fp8++) {
        AttnCase l = {128,
                      10,
                      2,
                      16,
                      fp8 != 0,
                      false,
                      0,
                      {SIZE(24000, 3000), 0},
                      {SIZE(80, 20), 7},
                      false,
                      "long context"};
        run_attention(l);
        AttnCase l2 = {256,
                       8,
                       2,
                       32,
                       fp8 != 0,
                       false,
                       0,
                       {SIZE(12000, 1500), 3},
                       {SIZE(48, 10), 40},
                       false,
                       "long context"};
        run_attention(l2);
    }
}

/* The fp8 KV cache at 128k-like context on small heads (one KV head of 128, two query heads):
 * a prefill chunk of 16 tokens after a cached prefix and a decode, each at 4k and at 131,072
 * tokens of context, read through calibrated per-tensor scales, against the CPU's attention on
 * the bf16 values (c.quantize). The error is e4m3's rounding of K (scores) and V, not the
 * length: at 128k it must stay within 1.5x of the 4k error, as well as under the tolerance. */
static void test_long_context_fp8(void) {
    double err[2][2];
    const int lens[2] = {4096, 131072};
    for (int l = 0; l < 2; l++)
        for (int dec = 0; dec < 2; dec++) {
            AttnCase c = {128,
                          2,
                          1,
                          16,
                          true,
                          dec != 0,
                          0,
                          {lens[l] - (dec ? 1 : 16)},
                          {dec ? 1 : 16},
                          false,
                          "fp8 from bf16, long context"};
            c.quantize = true;
            c.bf16_frob = 0.05;
            c.frob_out = &err[l][dec];
            run_attention(c);
        }
    for (int dec = 0; dec < 2; dec++) {
        const double grow = err[1][dec] / err[0][dec];
        if (!(grow <= 1.5))
            fail("long context fp8 %s: error %.3g at 128k is %.2fx the 4k error %.3g\n",
                 dec ? "decode" : "prefill", err[1][dec], grow, err[0][dec]);
        else
            printf("long context fp8 %s: error %.3g at 128k, %.3g at 4k (%.2fx) ok\n",
                   dec ? "decode" : "prefill", err[1][dec], err[0][dec], grow);
    }
}

int main(void) {
    if (!cuda_backend_available()) {
        printf("test_attention: no Hopper GPU, skipped\n");
        return 77;
    }
    const char *env = getenv("TACHYON_TEST_SEED");
    seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    printf("test_attention: seed %llu (TACHYON_TEST_SEED=%llu replays it)\n",
           (unsigned long long)seed, (unsigned long long)seed);
    OPS(ops_init(ERR));
    test_prefill_edges();
    test_attention();
    test_long_context_fp8();
    CK(cudaDeviceSynchronize());
    printf("test_attention: %d failure%s\n", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}

/* The Qwen3.5 kernels against their CPU twins on fresh random inputs every run (the seed is
 * printed; TACHYON_TEST_SEED=n replays one). Outputs are poisoned before each launch (NaN fails
 * every comparison). The Gated DeltaNet (kernels/ops_gdn.h against engine/cpu/cpu_gdn_ops.h): the
 * state slots no sequence names must come back bit for bit unchanged. The gated attention's
 * kernels (ops.h, kernels/gated.cu against cpu_rmsnorm + cpu_rope_apply and the output gate):
 * only the mapped KV slots may be written. The MTP head's input (ops_mtp_input against
 * cpu_rmsnorm): rel 2^-8, abs 1e-5, one bf16 rounding of the same f32 norm.
 *
 * Each case is one varlen batch mixing fresh prefills (crossing the 64-token chunks), prefills
 * and decodes continuing from a random state, a decode at position 0 and padding sequences
 * (slot -1), over slots with strides wider than a state. Every stage takes the GPU's previous
 * output as its input, so errors do not compound across stages.
 *
 * Tolerances, per element |gpu - ref| <= rel * |ref| + abs, and why:
 * - conv + SiLU, l2norm, gates: rel 1e-5, abs 1e-6. The same f32 operations in the same order;
 *   CUDA's expf / log1pf / sqrtf against glibc's differ by an ulp or two.
 * - recurrent step: rel 1e-4, abs 1e-5 (f32 state). The reductions over dk (S^T k, S^T q) run
 *   in another order (four partial sums per warp): a few ulps of terms of size ~|S| |k| ~ 1.
 * - chunked: abs 3e-3 on outputs and states of magnitude ~1, and a relative Frobenius error
 *   under 2e-3. The kernel multiplies on tensor cores in TF32 (10 mantissa bits, relative
 *   rounding 2^-11 ~ 5e-4 per input) with f32 accumulation; the triangular solve and the state
 *   carried across chunks compound that over up to dk-term sums. An error in masking, decay or
 *   the solve moves values by 1e-1 or more.
 * - bf16 state: the stored state within one bf16 ulp (2^-8 relative) of the CPU's rounding of
 *   the reference, plus the form's own tolerance.
 * - gated norm (bf16 out): rel 2^-8, abs 1e-5 (output rounding; f32 differences of ulps can
 *   cross a bf16 rounding boundary). The padding columns must be exactly zero.
 * - gated q / k norm + partial RoPE (bf16 q, bf16 or fp8 cache): as test_kernels' qk_norm_rope_kv
 *   (rel 2^-8, abs 1e-5 in bf16; half an e4m3 step in fp8): the same f32 operations, bf16 or
 *   e4m3 rounding of the result.
 * - output gate (bf16 in place): rel 2^-8, abs 1e-6: one bf16 rounding of att * sigmoid(gate),
 *   expf against glibc's by an ulp.
 * Exit 77 without a Hopper GPU. */
#include "cb_engine.h"

#include <algorithm>
#include <ctime>
#include <vector>

#include <cuda_runtime.h>

extern "C" {
#include "cpu/cpu_gdn_ops.h"
}
#include "cuda_backend.h"
#include "ops.h"
#include "ops_gdn.h"

#include "kernel_test.h"

/* ---- Gated DeltaNet -------------------------------------------------------------------------- */

struct GdnSeq {
    int n;       /* new tokens */
    int past;    /* tokens before them (0: starts from zero) */
    bool padded; /* slot -1 */
};

struct GdnCase {
    const char *name;
    int Hk, Hv, dk, dv, K;
    bool bf16;
    std::vector<GdnSeq> seqs;
};

/* Per-sequence metadata and the slots (a permutation, plus one spare slot no sequence names). */
struct GdnBatch {
    int T = 0, n_slots = 0;
    std::vector<int32_t> qs, ctx, slots;
};

static GdnBatch gdn_batch(const GdnCase &c) {
    GdnBatch b;
    int n = (int)c.seqs.size();
    b.n_slots = n + 1;
    std::vector<int32_t> perm(b.n_slots);
    for (int i = 0; i < b.n_slots; i++)
        perm[i] = i;
    for (int i = b.n_slots - 1; i > 0; i--)
        std::swap(perm[i], perm[irand(i + 1)]);
    b.qs.push_back(0);
    for (int s = 0; s < n; s++) {
        b.T += c.seqs[s].n;
        b.qs.push_back(b.T);
        b.ctx.push_back(c.seqs[s].past + c.seqs[s].n);
        b.slots.push_back(c.seqs[s].padded ? -1 : perm[s]);
    }
    return b;
}

static float round_state(bool bf16, float x) {
    return bf16 ? dtype_bf16_to_f32(dtype_f32_to_bf16(x)) : x;
}

static void run_gdn(const GdnCase &c) {
    const GdnBatch b = gdn_batch(c);
    const int T = b.T, n_seqs = (int)c.seqs.size(), Hk = c.Hk, Hv = c.Hv, dk = c.dk, dv = c.dv;
    const int K = c.K, C = 2 * Hk * dk + Hv * dv, kd = Hk * dk, vd = Hv * dv;
    const int64_t ld_x = C + 8, ld_ba = 2 * Hv + 3, a_col = Hv + 1;
    const int64_t conv_stride = (int64_t)(K - 1) * C + 5, ssm_stride = (int64_t)Hv * dk * dv + 7;
    char what[160];

    /* inputs and the random starting states */
    std::vector<float> x((size_t)T * ld_x), w((size_t)C * K), ba((size_t)T * ld_ba);
    std::vector<float> a_log(Hv), dt_bias(Hv);
    for (auto &v : x)
        v = sym(1.0f);
    for (auto &v : w)
        v = sym(0.6f);
    for (auto &v : ba)
        v = sym(2.0f);
    for (int h = 0; h < Hv; h++) {
        a_log[h] = sym(1.0f) - 1.0f;
        dt_bias[h] = sym(1.0f);
    }
    std::vector<float> conv((size_t)b.n_slots * conv_stride), ssm((size_t)b.n_slots * ssm_stride);
    for (auto &v : conv)
        v = sym(1.0f);
    for (auto &v : ssm)
        v = round_state(c.bf16, sym(0.5f));

    float *d_x = dev<float>(x.size()), *d_w = dev<float>(w.size()), *d_ba = dev<float>(ba.size());
    float *d_alog = dev<float>(Hv), *d_dt = dev<float>(Hv), *d_conv = dev<float>(conv.size());
    float *d_y = dev<float>((size_t)T * C), *d_g = dev<float>((size_t)T * Hv);
    float *d_beta = dev<float>((size_t)T * Hv), *d_o = dev<float>((size_t)T * vd);
    int32_t *d_qs = dev<int32_t>(b.qs.size()), *d_ctx = dev<int32_t>(n_seqs);
    int32_t *d_slots = dev<int32_t>(n_seqs);
    void *d_ssm;
    std::vector<uint16_t> ssm_bits(ssm.size());
    if (c.bf16) {
        for (size_t i = 0; i < ssm.size(); i++)
            ssm_bits[i] = dtype_f32_to_bf16(ssm[i]);
        uint16_t *p = dev<uint16_t>(ssm.size());
        put(p, ssm_bits);
        d_ssm = p;
    } else {
        float *p = dev<float>(ssm.size());
        put(p, ssm);
        d_ssm = p;
    }
    put(d_x, x);
    put(d_w, w);
    put(d_ba, ba);
    put(d_alog, a_log);
    put(d_dt, dt_bias);
    put(d_conv, conv);
    put(d_qs, b.qs);
    put(d_ctx, b.ctx);
    put(d_slots, b.slots);

    ops_gdn_args_t a = {};
    a.T = T;
    a.n_seqs = n_seqs;
    a.Hk = Hk;
    a.Hv = Hv;
    a.dk = dk;
    a.dv = dv;
    a.K = K;
    a.C = C;
    a.query_start = d_qs;
    a.context_len = d_ctx;
    a.state_slots = d_slots;
    a.state.conv = d_conv;
    a.state.ssm = d_ssm;
    a.state.conv_slot_stride = conv_stride;
    a.state.ssm_slot_stride = ssm_stride;
    a.state.ssm_bf16 = c.bf16;

    /* conv + SiLU, and the windows */
    OPS(ops_gdn_conv(&a, d_x, ld_x, d_w, d_y, 0, ERR));
    std::vector<float> y = get(d_y, (size_t)T * C), y_ref((size_t)T * C, 0.0f), conv_ref = conv;
    for (int s = 0; s < n_seqs; s++) {
        if (b.slots[s] < 0) continue;
        float *win = &conv_ref[(size_t)b.slots[s] * conv_stride];
        if (c.seqs[s].past == 0) std::fill(win, win + (size_t)(K - 1) * C, 0.0f);
        cpu_gdn_conv(c.seqs[s].n, C, K, 0, C, w.data(), &x[(size_t)b.qs[s] * ld_x], ld_x, win,
                     &y_ref[(size_t)b.qs[s] * C], C);
    }
    snprintf(what, sizeof what, "gdn %s: conv + silu", c.name);
    close_all(what, y.data(), y_ref.data(), y.size(), 1e-5, 1e-6);
    std::vector<float> conv_got = get(d_conv, conv.size());
    snprintf(what, sizeof what, "gdn %s: conv windows (all slots)", c.name);
    close_all(what, conv_got.data(), conv_ref.data(), conv.size(), 0, 0);

    /* l2norm of q, k; decay and beta */
    OPS(ops_gdn_prepare(&a, d_y, d_ba, ld_ba, (int)a_col, d_alog, d_dt, d_g, d_beta, 0, ERR));
    std::vector<float> yp = get(d_y, (size_t)T * C), g = get(d_g, (size_t)T * Hv);
    std::vector<float> beta = get(d_beta, (size_t)T * Hv);
    std::vector<float> g_ref((size_t)T * Hv), beta_ref((size_t)T * Hv);
    for (int t = 0; t < T; t++) {
        for (int hh = 0; hh < 2 * Hk; hh++)
            cpu_gdn_l2norm(&y[(size_t)t * C + (size_t)hh * dk], dk);
        for (int h = 0; h < Hv; h++)
            cpu_gdn_gates(ba[(size_t)t * ld_ba + a_col + h], ba[(size_t)t * ld_ba + h], a_log[h],
                          dt_bias[h], &g_ref[(size_t)t * Hv + h], &beta_ref[(size_t)t * Hv + h]);
    }
    snprintf(what, sizeof what, "gdn %s: l2norm q, k", c.name);
    close_all(what, yp.data(), y.data(), y.size(), 1e-5, 1e-6);
    snprintf(what, sizeof what, "gdn %s: decay g", c.name);
    close_all(what, g.data(), g_ref.data(), g.size(), 1e-5, 1e-6);
    snprintf(what, sizeof what, "gdn %s: beta", c.name);
    close_all(what, beta.data(), beta_ref.data(), beta.size(), 1e-5, 1e-6);

    /* the delta rule: chunked for n > 1, recurrent for n == 1, over the GPU's prepared inputs */
    OPS(ops_gdn_chunked(&a, d_y, d_g, d_beta, d_o, 0, ERR));
    OPS(ops_gdn_recurrent(&a, d_y, d_g, d_beta, d_o, 0, ERR));
    std::vector<float> o = get(d_o, (size_t)T * vd), o_ref((size_t)T * vd, 0.0f);
    std::vector<float> ssm_ref = ssm, scratch(cpu_gdn_scratch(dk, dv));
    for (int s = 0; s < n_seqs; s++) {
        if (b.slots[s] < 0) continue;
        const int t0 = b.qs[s], n = c.seqs[s].n;
        for (int h = 0; h < Hv; h++) {
            float *S = &ssm_ref[(size_t)b.slots[s] * ssm_stride + (size_t)h * dk * dv];
            if (c.seqs[s].past == 0) std::fill(S, S + (size_t)dk * dv, 0.0f);
            const int hk = h / (Hv / Hk);
            const float *row = &yp[(size_t)t0 * C];
            cpu_gdn_head_t hd = {n,
                                 dk,
                                 dv,
                                 row + (size_t)hk * dk,
                                 row + kd + (size_t)hk * dk,
                                 C,
                                 row + 2 * (size_t)kd + (size_t)h * dv,
                                 C,
                                 &g[(size_t)t0 * Hv + h],
                                 &beta[(size_t)t0 * Hv + h],
                                 Hv,
                                 &o_ref[(size_t)t0 * vd + (size_t)h * dv],
                                 vd};
            if (n > 1)
                cpu_gdn_chunked(&hd, S, scratch.data());
            else
                cpu_gdn_recurrent(&hd, S, scratch.data());
            for (size_t i = 0; i < (size_t)dk * dv; i++)
                S[i] = round_state(c.bf16, S[i]);
        }
    }
    std::vector<float> ssm_got(ssm.size());
    if (c.bf16) {
        std::vector<uint16_t> bits = get((const uint16_t *)d_ssm, ssm.size());
        for (size_t i = 0; i < ssm.size(); i++)
            ssm_got[i] = dtype_bf16_to_f32(bits[i]);
    } else {
        ssm_got = get((const float *)d_ssm, ssm.size());
    }
    /* compare the tokens and state slots of each form apart: their tolerances differ */
    const double st_rel = c.bf16 ? 0x1p-8 : 0.0;
    for (int form = 0; form < 2; form++) { /* 0 recurrent, 1 chunked */
        std::vector<float> og, orf, sg, sr;
        for (int s = 0; s < n_seqs; s++) {
            if ((c.seqs[s].n > 1) != (form == 1)) continue;
            og.insert(og.end(), o.begin() + (size_t)b.qs[s] * vd,
                      o.begin() + (size_t)b.qs[s + 1] * vd);
            orf.insert(orf.end(), o_ref.begin() + (size_t)b.qs[s] * vd,
                       o_ref.begin() + (size_t)b.qs[s + 1] * vd);
            if (b.slots[s] < 0) continue;
            size_t base = (size_t)b.slots[s] * ssm_stride;
            sg.insert(sg.end(), ssm_got.begin() + base, ssm_got.begin() + base + ssm_stride);
            sr.insert(sr.end(), ssm_ref.begin() + base, ssm_ref.begin() + base + ssm_stride);
        }
        const char *f = form ? "chunked" : "recurrent";
        const double rel = form ? 0.0 : 1e-4, abs_tol = form ? 3e-3 : 1e-5;
        snprintf(what, sizeof what, "gdn %s: %s outputs", c.name, f);
        close_all(what, og.data(), orf.data(), og.size(), rel, abs_tol);
        if (form) frob(what, og.data(), orf.data(), og.size(), 2e-3);
        snprintf(what, sizeof what, "gdn %s: %s states", c.name, f);
        close_all(what, sg.data(), sr.data(), sg.size(), rel + st_rel, abs_tol);
        if (form) frob(what, sg.data(), sr.data(), sg.size(), 2e-3);
    }
    /* the slot no sequence names: untouched */
    std::vector<bool> named(b.n_slots, false);
    for (int s = 0; s < n_seqs; s++)
        if (b.slots[s] >= 0) named[b.slots[s]] = true;
    for (int sl = 0; sl < b.n_slots; sl++) {
        if (named[sl]) continue;
        snprintf(what, sizeof what, "gdn %s: state of unnamed slot %d unchanged", c.name, sl);
        close_all(what, &ssm_got[(size_t)sl * ssm_stride], &ssm[(size_t)sl * ssm_stride],
                  (size_t)Hv * dk * dv, 0, 0);
    }

    /* the gated norm, bf16 out with zeroed padding columns */
    const int64_t ld_z = vd + 24, ld_out = vd + 16;
    std::vector<float> z((size_t)T * ld_z), nw(dv);
    for (auto &v : z)
        v = sym(3.0f);
    for (auto &v : nw)
        v = 1.0f + sym(0.5f);
    float *d_z = dev<float>(z.size()), *d_nw = dev<float>(dv);
    uint16_t *d_out = dev<uint16_t>((size_t)T * ld_out);
    put(d_z, z);
    put(d_nw, nw);
    OPS(ops_gdn_gated_norm(T, Hv, dv, d_o, d_z, ld_z, d_nw, 1e-6f, d_out, ld_out, 0, ERR));
    std::vector<float> out = bf16_vec(get(d_out, (size_t)T * ld_out));
    std::vector<float> out_ref((size_t)T * ld_out, 0.0f);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hv; h++)
            cpu_gdn_gated_rmsnorm(&o[(size_t)t * vd + (size_t)h * dv],
                                  &z[(size_t)t * ld_z + (size_t)h * dv], nw.data(), dv, 1e-6f,
                                  &out_ref[(size_t)t * ld_out + (size_t)h * dv]);
    snprintf(what, sizeof what, "gdn %s: gated rmsnorm (bf16 out)", c.name);
    close_all(what, out.data(), out_ref.data(), out.size(), 0x1p-8, 1e-5);

    void *bufs[] = {d_x, d_w,  d_ba,  d_alog,  d_dt,  d_conv, d_y,  d_g,  d_beta,
                    d_o, d_qs, d_ctx, d_slots, d_ssm, d_z,    d_nw, d_out};
    for (void *p : bufs)
        cudaFree(p);
}

static void test_gdn(void) {
    /* the BF16 fixture's shapes: fresh prefills across chunks, continuing prefills and decodes,
     * a decode at position 0, padding sequences */
    run_gdn({"fixture bf16 (Hk 2, Hv 4, 32 x 32, conv 4)",
             2,
             4,
             32,
             32,
             4,
             false,
             {{70, 0, false},
              {1, 9, false},
              {5, 3, false},
              {1, 0, false},
              {3, 0, true},
              {SIZE(200, 130), 40, false},
              {1, 2, true},
              {64, 17, false}}});
    /* the FP8 fixture's: dk != dv, a 3-tap conv, one value head per key head; bf16 state */
    run_gdn({"fixture fp8 (Hk 2, Hv 2, 64 x 32, conv 3, bf16 state)",
             2,
             2,
             64,
             32,
             3,
             true,
             {{2, 0, false}, {1, 5, false}, {66, 0, false}, {1, 1, false}, {2, 1, false}}});
    /* ragged: dk not a multiple of 16, dv not of 32 (a partial column block), conv 2 */
    run_gdn({"ragged (Hk 2, Hv 4, 24 x 40, conv 2)",
             2,
             4,
             24,
             40,
             2,
             false,
             {{65, 0, false}, {1, 4, false}, {7, 7, false}}});
    /* Qwen3.5-9B's head dims (128 x 128; 9B has Hk 16, Hv 32) */
    run_gdn({"9b heads (128 x 128)",
             1,
             SIZE(32, 2),
             128,
             128,
             4,
             false,
             {{SIZE(300, 70), 0, false}, {1, 30, false}, {SIZE(129, 3), 64, false}}});
}

/* ---- gated attention ---------------------------------------------------------------------------
 */

/* q / gate split, (1 + w) norms (the weights passed already offset), partial RoPE and the KV
 * write against cpu_rmsnorm + cpu_rope_apply on the first R dims; then the output gate. */
static void test_gated_case(int D, int R, int Hq, int Hkv, bool f32_in, bool fp8_kv) {
    char name[160];
    snprintf(name, sizeof name, "gated qk norm rope kv D=%d rot=%d heads=%d/%d in=%s kv=%s", D, R,
             Hq, Hkv, f32_in ? "f32" : "bf16", fp8_kv ? "fp8" : "bf16");
    const int T = SIZE(50, 19), bs = 16, num_blocks = 4;
    const int W = (2 * Hq + 2 * Hkv) * D, ld = W + 32;
    const float eps = 1e-6f, k_scale = fp8_kv ? 0.5f : 1.0f,
                v_scale = fp8_kv ? 0.375f : 1.0f; /* distinct: a swap fails */
    std::vector<uint16_t> xb;
    std::vector<float> xf;
    rand_bf16((size_t)T * ld, 3.0f, xb, xf);
    std::vector<float> qn(D), kn(D), inv(R / 2);
    for (int j = 0; j < D; j++) {
        qn[j] = 1.0f + sym(0.5f);
        kn[j] = 1.0f + sym(0.5f);
    }
    cpu_rope_inv_freq(R, 10000000.0, inv.data());
    std::vector<int32_t> pos(T);
    std::vector<int64_t> slot(T);
    const int64_t n_slots = (int64_t)num_blocks * bs;
    for (int t = 0; t < T; t++) {
        pos[t] = t < 5 ? t : irand(40000);
        slot[t] = (t % 7 == 3) ? -1 : (int64_t)((t * 37) % n_slots);
    }
    void *d_x = put_act(f32_in, xb, xf);
    float *d_qn = dev<float>(D), *d_kn = dev<float>(D), *d_inv = dev<float>(R / 2);
    int32_t *d_pos = dev<int32_t>(T);
    int64_t *d_slot = dev<int64_t>(T);
    put(d_qn, qn);
    put(d_kn, kn);
    put(d_inv, inv);
    put(d_pos, pos);
    put(d_slot, slot);
    const ops_kv_dtype_t kvt = fp8_kv ? OPS_KV_FP8 : OPS_KV_BF16;
    const size_t pool = ops_kv_pool_bytes(num_blocks, bs, Hkv, D, kvt);
    uint8_t *d_k = dev<uint8_t>(pool), *d_v = dev<uint8_t>(pool);
    uint16_t *d_q = dev<uint16_t>((size_t)T * Hq * D);
    ops_qkv_args_t a = {};
    a.qkv = d_x;
    a.qkv_dtype = f32_in ? OPS_F32 : OPS_BF16;
    a.ld_qkv = ld;
    a.T = T;
    a.n_heads = Hq;
    a.n_kv_heads = Hkv;
    a.head_dim = D;
    a.q_norm = d_qn;
    a.k_norm = d_kn;
    a.eps = eps;
    a.inv_freq = d_inv;
    a.positions = d_pos;
    a.slot_mapping = d_slot;
    a.q_out = d_q;
    a.k_cache = d_k;
    a.v_cache = d_v;
    a.kv_dtype = kvt;
    a.k_scale = k_scale;
    a.v_scale = v_scale;
    a.block_size = bs;
    OPS(ops_gated_qk_norm_rope_kv(&a, R, 0, ERR));

    std::vector<float> q_ref((size_t)T * Hq * D), k_ref((size_t)T * Hkv * D),
        v_ref((size_t)T * Hkv * D), cs(R / 2), sn(R / 2);
    for (int t = 0; t < T; t++) {
        cpu_rope_cos_sin(pos[t], inv.data(), R / 2, cs.data(), sn.data());
        for (int h = 0; h < Hq + 2 * Hkv; h++) {
            const size_t col =
                h < Hq ? (size_t)h * 2 * D : (size_t)2 * Hq * D + (size_t)(h - Hq) * D;
            std::vector<float> x(&xf[(size_t)t * ld + col], &xf[(size_t)t * ld + col] + D);
            if (h < Hq + Hkv) {
                cpu_rmsnorm(x.data(), h < Hq ? qn.data() : kn.data(), D, eps, x.data());
                cpu_rope_apply(x.data(), R, cs.data(), sn.data());
            }
            float *dst = h < Hq         ? &q_ref[((size_t)t * Hq + h) * D]
                         : h < Hq + Hkv ? &k_ref[((size_t)t * Hkv + h - Hq) * D]
                                        : &v_ref[((size_t)t * Hkv + h - Hq - Hkv) * D];
            memcpy(dst, x.data(), D * sizeof(float));
        }
    }
    std::vector<float> q = bf16_vec(get(d_q, (size_t)T * Hq * D));
    close_all(name, q.data(), q_ref.data(), q.size(), 0x1p-8, 1e-5);

    check_kv_pools(name, get(d_k, pool), get(d_v, pool), slot, Hkv * D, fp8_kv, k_scale, v_scale,
                   k_ref, v_ref);

    /* the output gate: att (bf16) *= sigmoid(gate), in place */
    std::vector<uint16_t> ab;
    std::vector<float> af;
    rand_bf16((size_t)T * Hq * D, 2.0f, ab, af);
    uint16_t *d_att = dev<uint16_t>(ab.size());
    put(d_att, ab);
    OPS(ops_output_gate(d_att, d_x, f32_in ? OPS_F32 : OPS_BF16, ld, T, Hq, D, 0, ERR));
    std::vector<float> att = bf16_vec(get(d_att, ab.size())), att_ref(ab.size());
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hq; h++)
            for (int d = 0; d < D; d++) {
                float g = xf[(size_t)t * ld + (size_t)h * 2 * D + D + d];
                size_t i = ((size_t)t * Hq + h) * D + d;
                att_ref[i] = af[i] * (1.0f / (1.0f + expf(-g)));
            }
    char what[128];
    snprintf(what, sizeof what, "output gate D=%d heads=%d in=%s", D, Hq, f32_in ? "f32" : "bf16");
    close_all(what, att.data(), att_ref.data(), att.size(), 0x1p-8, 1e-6);
    void *bufs[] = {d_x, d_qn, d_kn, d_inv, d_pos, d_slot, d_k, d_v, d_q, d_att};
    for (void *p : bufs)
        cudaFree(p);
}

/* The MTP head's input: rows of a bf16 embedding table and of bf16 hidden states, gathered,
 * normalized and put side by side (cpu_mtp.c's twin: cpu_rmsnorm of the f32 values, then bf16). */
static void test_mtp_input_case(int H) {
    char name[64];
    snprintf(name, sizeof name, "mtp input H=%d", H);
    const int T = SIZE(40, 9), V = 300, R = 70;
    const float eps = 1e-6f;
    std::vector<uint16_t> eb, hb;
    std::vector<float> ef, hf;
    rand_bf16((size_t)V * H, 1.0f, eb, ef);
    rand_bf16((size_t)R * H, 4.0f, hb, hf);
    std::vector<float> we(H), wh(H);
    for (int j = 0; j < H; j++) {
        we[j] = 1.0f + sym(0.5f);
        wh[j] = 1.0f + sym(0.5f);
    }
    std::vector<int32_t> ids(T), rows(T);
    for (int t = 0; t < T; t++) {
        ids[t] = irand(V);
        rows[t] = t % 3 == 0 ? R - 1 : irand(R); /* a row read twice and more */
    }
    uint16_t *d_e = dev<uint16_t>(eb.size()), *d_h = dev<uint16_t>(hb.size());
    uint16_t *d_out = dev<uint16_t>((size_t)T * 2 * H);
    float *d_we = dev<float>(H), *d_wh = dev<float>(H);
    int32_t *d_ids = dev<int32_t>(T), *d_rows = dev<int32_t>(T);
    put(d_e, eb);
    put(d_h, hb);
    put(d_we, we);
    put(d_wh, wh);
    put(d_ids, ids);
    put(d_rows, rows);
    poison(d_out, (size_t)T * 2 * H);
    OPS(ops_mtp_input(d_e, d_ids, d_h, d_rows, T, H, d_we, d_wh, eps, d_out, 0, ERR));
    std::vector<float> ref((size_t)T * 2 * H);
    for (int t = 0; t < T; t++) {
        cpu_rmsnorm(&ef[(size_t)ids[t] * H], we.data(), H, eps, &ref[(size_t)t * 2 * H]);
        cpu_rmsnorm(&hf[(size_t)rows[t] * H], wh.data(), H, eps, &ref[(size_t)t * 2 * H + H]);
    }
    std::vector<float> got = bf16_vec(get(d_out, (size_t)T * 2 * H));
    close_all(name, got.data(), ref.data(), got.size(), 0x1p-8, 1e-5);
    void *bufs[] = {d_e, d_h, d_out, d_we, d_wh, d_ids, d_rows};
    for (void *p : bufs)
        cudaFree(p);
}

static void test_mtp_input(void) {
    test_mtp_input_case(256);              /* the fixtures' */
    test_mtp_input_case(SIZE(4096, 1000)); /* Qwen3.5-9B's (a width that is no multiple of 256) */
}

/* Between chained MTP draft passes (ops_mtp_advance): each sequence's draft is its sampler
 * result's token; with advance, the next pass's token, hidden row, position, context and slot
 * (through its block table, across a block edge) follow, and a sequence past its last position
 * stays where it is with slot -1; every byte outside the n sequences is left alone. */
static void test_mtp_advance(void) {
    const int n = SIZE(300, 137), stride = 5, bs = 16; /* more than one CTA */
    std::vector<sampler_result_t> res(n);
    std::vector<int32_t> ids(n + 1, -7), pos(n + 1), ctx(n + 1), rows(n + 1, -7), last(n + 1);
    std::vector<int32_t> tables((size_t)(n + 1) * stride), drafts(n + 1, -7);
    std::vector<int64_t> slots(n + 1, -7);
    for (int s = 0; s <= n; s++) {
        if (s < n) res[s].token = 1000 + s;
        pos[s] = 14 + irand(40); /* some cross a block edge */
        ctx[s] = pos[s] + 1;
        last[s] = s % 4 == 0 ? pos[s] : pos[s] + 1 + irand(3); /* every 4th is done */
        for (int k = 0; k < stride; k++)
            tables[(size_t)s * stride + k] = irand(1000);
    }
    sampler_result_t *d_res = dev<sampler_result_t>(n);
    int32_t *d_ids = dev<int32_t>(n + 1), *d_pos = dev<int32_t>(n + 1),
            *d_ctx = dev<int32_t>(n + 1);
    int32_t *d_rows = dev<int32_t>(n + 1), *d_last = dev<int32_t>(n + 1);
    int32_t *d_tab = dev<int32_t>(tables.size()), *d_drafts = dev<int32_t>(n + 1);
    int64_t *d_slots = dev<int64_t>(n + 1);
    put(d_res, res);
    put(d_ids, ids);
    put(d_pos, pos);
    put(d_ctx, ctx);
    put(d_rows, rows);
    put(d_last, last);
    put(d_tab, tables);
    put(d_drafts, drafts);
    put(d_slots, slots);
    for (int advance = 0; advance < 2; advance++) {
        OPS(ops_mtp_advance(n, d_res, d_drafts, advance, d_ids, d_pos, d_slots, d_ctx, d_tab,
                            stride, bs, d_last, d_rows, 0, ERR));
        std::vector<int32_t> gd = get(d_drafts, n + 1), gi = get(d_ids, n + 1),
                             gp = get(d_pos, n + 1), gc = get(d_ctx, n + 1),
                             gr = get(d_rows, n + 1);
        std::vector<int64_t> gs = get(d_slots, n + 1);
        int bad = 0;
        for (int s = 0; s <= n; s++) {
            const bool in = s < n, moves = in && advance && pos[s] + 1 <= last[s];
            const int p = moves ? pos[s] + 1 : pos[s];
            const int64_t slot = !in || !advance ? -7
                                 : moves
                                     ? (int64_t)tables[(size_t)s * stride + p / bs] * bs + p % bs
                                     : -1;
            bad += gd[s] != (in ? 1000 + s : -7);
            bad += gi[s] != (in && advance ? 1000 + s : -7);
            bad += gr[s] != (in && advance ? s : -7);
            bad += gp[s] != p || gc[s] != p + 1 || gs[s] != slot;
        }
        if (bad)
            fail("mtp advance n=%d advance=%d FAIL: %d wrong values\n", n, advance, bad);
        else
            printf("%-60s ok\n",
                   advance ? "mtp advance (next pass's metadata)" : "mtp advance (drafts only)");
    }
    void *bufs[] = {d_res, d_ids, d_pos, d_ctx, d_rows, d_last, d_tab, d_drafts, d_slots};
    for (void *p : bufs)
        cudaFree(p);
}

static void test_gated(void) {
    test_gated_case(64, 32, 4, 2, true, false);                      /* the BF16 fixture's */
    test_gated_case(128, 32, 4, 1, true, true);                      /* the FP8 fixture's, fp8 KV */
    test_gated_case(256, 64, SIZE(16, 4), SIZE(4, 1), false, false); /* Qwen3.5-9B's */
    test_gated_case(256, 64, SIZE(16, 4), SIZE(4, 1), true, true);
}

int main(void) {
    if (!cuda_backend_available()) {
        printf("test_qwen35_kernels: no Hopper GPU, skipped\n");
        return 77;
    }
    const char *env = getenv("TACHYON_TEST_SEED");
    seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    printf("test_qwen35_kernels: seed %llu (TACHYON_TEST_SEED=%llu replays it)\n",
           (unsigned long long)seed, (unsigned long long)seed);
    OPS(ops_init(ERR));
    OPS(ops_gdn_init(ERR));
    test_gdn();
    test_gated();
    test_mtp_input();
    test_mtp_advance();
    CK(cudaDeviceSynchronize());
    printf("test_qwen35_kernels: %d failure%s\n", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}

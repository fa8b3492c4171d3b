/*
 * cpu_gdn_ops: the f32 math of one Gated DeltaNet layer (Qwen3.5 linear attention, models.md
 * 4.6), as transformers' modeling_qwen3_5.py computes it, one sequence and one head at a time.
 * cpu_gdn.c runs them over a batch; the tests call them directly.
 *
 *     cpu_gdn_conv(n, C, K, w, x, ldx, window, y, ldy);     // causal depthwise conv + SiLU
 *     cpu_gdn_l2norm(q, dk);                                 // per head, q and k
 *     cpu_gdn_gates(a, b, A_log, dt_bias, &g, &beta);        // decay and beta of a token, head
 *     cpu_gdn_chunked(&h, S, scratch);   // prefill: 64-token chunks (torch_chunk_gated_...)
 *     cpu_gdn_recurrent(&h, S, scratch); // decode: token by token (torch_recurrent_gated_...)
 *     cpu_gdn_gated_rmsnorm(o, z, w, dv, eps, y);
 *
 * The gated delta rule of one value head, state S [dk, dv]:
 *     S = e^{g_t} S;  d = beta_t (v_t - S^T k_t);  S += k_t d^T;  o_t = S^T q_t
 * The chunked form computes the same with the UT transform (models.md 4.6); the two agree to
 * rounding (tests/unit/test_cpu_gdn.c states the tolerance).
 */
#ifndef TACHYON_CPU_GDN_OPS_H
#define TACHYON_CPU_GDN_OPS_H

#include <stddef.h>
#include <stdint.h>

/* transformers' chunk size for the chunked form. */
#define CPU_GDN_CHUNK 64

/* Causal depthwise conv1d then SiLU over n new tokens of C channels, kernel K, no bias:
 * y[t][c] = silu(sum_j w[c][j] * x(t - (K - 1) + j)[c]), where x(tau) for tau < 0 is
 * window[(K - 1) + tau][c] (the K - 1 raw inputs before the first new token, oldest first, zeros
 * at the start of a sequence). Then window becomes the last K - 1 raw inputs. Channels
 * [c0, c1) only. x [n, ldx], y [n, ldy], w [C, K], window [K - 1, C]. */
void cpu_gdn_conv(int n, int C, int K, int c0, int c1, const float *w, const float *x, int64_t ldx,
                  float *window, float *y, int64_t ldy);

/* x *= rsqrt(sum(x^2) + 1e-6), in place (transformers' l2norm, FLA's convention). */
void cpu_gdn_l2norm(float *x, int n);

/* A token's decay (log space, <= 0) and beta for one value head:
 * g = -exp(A_log) * softplus(a + dt_bias) (softplus threshold 20), beta = sigmoid(b). */
void cpu_gdn_gates(float a, float b, float a_log, float dt_bias, float *g, float *beta);

/* One value head over n tokens. q and k are L2-normalized (not yet scaled: each form applies
 * dk^-0.5 as transformers does); rows of q, k at stride ld_qk, of v and o at stride ld_v / ld_o,
 * g and beta at stride ld_gb. */
typedef struct cpu_gdn_head {
    int n, dk, dv;
    const float *q, *k;
    int64_t ld_qk;
    const float *v;
    int64_t ld_v;
    const float *g, *beta;
    int64_t ld_gb;
    float *o;
    int64_t ld_o;
} cpu_gdn_head_t;

/* Floats of scratch either form needs. */
size_t cpu_gdn_scratch(int dk, int dv);

/* Token by token (transformers' torch_recurrent_gated_delta_rule: q divided by sqrt(dk)).
 * S [dk, dv] in place. */
void cpu_gdn_recurrent(const cpu_gdn_head_t *h, float *S, float *scratch);

/* In chunks of CPU_GDN_CHUNK tokens from the first (transformers' torch_chunk_gated_delta_rule:
 * q multiplied by dk^-0.5, triangular solves by forward substitution, f32 throughout except
 * the in-chunk cumulative decay, summed in double as torch's CPU cumsum does). S [dk, dv] in
 * place. */
void cpu_gdn_chunked(const cpu_gdn_head_t *h, float *S, float *scratch);

/* transformers' Qwen3_5RMSNormGated over one head: y = w * (o * rsqrt(mean(o^2) + eps)) *
 * silu(z). y may equal o. */
void cpu_gdn_gated_rmsnorm(const float *o, const float *z, const float *w, int dv, float eps,
                           float *y);

#endif

#include "cpu_gdn_ops.h"

#include <math.h>
#include <string.h>

#include "cpu_ops.h"

static inline float silu(float x) {
    return x / (1.0f + expf(-x));
}

void cpu_gdn_conv(int n, int C, int K, int c0, int c1, const float *w, const float *x, int64_t ldx,
                  float *window, float *y, int64_t ldy) {
    for (int c = c0; c < c1; c++) {
        const float *wc = w + (int64_t)c * K;
        for (int t = 0; t < n; t++) {
            float acc = 0.0f;
            for (int j = 0; j < K; j++) {
                int tau = t - (K - 1) + j;
                float xv =
                    tau >= 0 ? x[(int64_t)tau * ldx + c] : window[(int64_t)(K - 1 + tau) * C + c];
                acc = fmaf(wc[j], xv, acc);
            }
            y[(int64_t)t * ldy + c] = silu(acc);
        }
        /* the last K - 1 raw inputs: the window shifted by n, then the new tokens */
        for (int j = 0; j < K - 1; j++) {
            int tau = n - (K - 1) + j;
            window[(int64_t)j * C + c] =
                tau >= 0 ? x[(int64_t)tau * ldx + c] : window[(int64_t)(K - 1 + tau) * C + c];
        }
    }
}

void cpu_gdn_l2norm(float *x, int n) {
    float inv = 1.0f / sqrtf(cpu_dot(x, x, n) + 1e-6f);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void cpu_gdn_gates(float a, float b, float a_log, float dt_bias, float *g, float *beta) {
    float u = a + dt_bias;
    float softplus = u > 20.0f ? u : log1pf(expf(u));
    *g = -expf(a_log) * softplus;
    *beta = 1.0f / (1.0f + expf(-b));
}

void cpu_gdn_recurrent(const cpu_gdn_head_t *h, float *S, float *scratch) {
    int dk = h->dk, dv = h->dv;
    float scale = (float)sqrt((double)dk);
    float *q = scratch, *kv = scratch + dk;
    for (int t = 0; t < h->n; t++) {
        const float *qt = h->q + (int64_t)t * h->ld_qk, *kt = h->k + (int64_t)t * h->ld_qk;
        const float *vt = h->v + (int64_t)t * h->ld_v;
        float *ot = h->o + (int64_t)t * h->ld_o;
        float decay = expf(h->g[(int64_t)t * h->ld_gb]), beta = h->beta[(int64_t)t * h->ld_gb];
        for (int i = 0; i < dk; i++)
            q[i] = qt[i] / scale;
        for (int j = 0; j < dv; j++)
            kv[j] = 0.0f;
        for (int i = 0; i < dk; i++) {
            float *row = S + (int64_t)i * dv;
            for (int j = 0; j < dv; j++) {
                row[j] *= decay;
                kv[j] += row[j] * kt[i];
            }
        }
        for (int j = 0; j < dv; j++)
            kv[j] = (vt[j] - kv[j]) * beta; /* delta */
        for (int j = 0; j < dv; j++)
            ot[j] = 0.0f;
        for (int i = 0; i < dk; i++) {
            float *row = S + (int64_t)i * dv;
            for (int j = 0; j < dv; j++) {
                row[j] += kt[i] * kv[j];
                ot[j] += row[j] * q[i];
            }
        }
    }
}

size_t cpu_gdn_scratch(int dk, int dv) {
    size_t C = CPU_GDN_CHUNK;
    /* q, k, k*beta (then W), v*beta (then U), the new values, two C x C matrices, cum */
    return C * (3 * (size_t)dk + 2 * (size_t)dv) + 2 * C * C + C;
}

/* x[L, n] -= A[L, L] x, strictly lower A, row by row (forward substitution of the unit lower
 * triangular I + A, as torch.linalg.solve_triangular(unitriangular=True) solves it). */
static void solve_unit_lower(int L, const float *A, float *x, int n) {
    for (int i = 1; i < L; i++) {
        float *xi = x + (int64_t)i * n;
        for (int j = 0; j < i; j++) {
            float a = A[i * CPU_GDN_CHUNK + j];
            const float *xj = x + (int64_t)j * n;
            for (int c = 0; c < n; c++)
                xi[c] -= a * xj[c];
        }
    }
}

void cpu_gdn_chunked(const cpu_gdn_head_t *h, float *S, float *scratch) {
    const int dk = h->dk, dv = h->dv, C = CPU_GDN_CHUNK;
    const float scale = (float)pow((double)dk, -0.5);
    float *q = scratch, *k = q + C * dk, *w = k + C * dk; /* w: k * beta, then W */
    float *u = w + C * dk, *vn = u + C * dv;              /* u: v * beta, then U */
    float *A = vn + C * dv, *P = A + C * C, *cum = P + C * C;
    for (int c0 = 0; c0 < h->n; c0 += C) {
        const int L = h->n - c0 < C ? h->n - c0 : C;
        double acc = 0.0;
        for (int i = 0; i < L; i++) {
            int64_t t = c0 + i;
            acc += h->g[t * h->ld_gb];
            cum[i] = (float)acc;
            float beta = h->beta[t * h->ld_gb];
            for (int r = 0; r < dk; r++) {
                q[i * dk + r] = h->q[t * h->ld_qk + r] * scale;
                k[i * dk + r] = h->k[t * h->ld_qk + r];
                w[i * dk + r] = k[i * dk + r] * beta;
            }
            for (int c = 0; c < dv; c++)
                u[i * dv + c] = h->v[t * h->ld_v + c] * beta;
        }
        /* A = (k_beta k^T) o D strictly below the diagonal; P = (q k^T) o D on and below it,
         * D[i][j] = exp(cum_i - cum_j) */
        for (int i = 0; i < L; i++)
            for (int j = 0; j <= i; j++) {
                float d = expf(cum[i] - cum[j]);
                A[i * C + j] = cpu_dot(w + i * dk, k + j * dk, dk) * d;
                P[i * C + j] = cpu_dot(q + i * dk, k + j * dk, dk) * d;
            }
        /* U = T (v beta), W = T (k beta e^cum), T = (I + A)^-1 */
        for (int i = 0; i < L; i++) {
            float e = expf(cum[i]);
            for (int r = 0; r < dk; r++)
                w[i * dk + r] *= e;
        }
        solve_unit_lower(L, A, u, dv);
        solve_unit_lower(L, A, w, dk);
        /* new values V' = U - W S; O = (q e^cum) S + P V'; S = e^cum_L S + (k e^(cum_L - cum))^T V'
         */
        for (int i = 0; i < L; i++) {
            float e = expf(cum[i]);
            float *o = h->o + (int64_t)(c0 + i) * h->ld_o;
            for (int c = 0; c < dv; c++) {
                vn[i * dv + c] = u[i * dv + c];
                o[c] = 0.0f;
            }
            for (int r = 0; r < dk; r++) {
                const float *srow = S + (int64_t)r * dv;
                float wr = w[i * dk + r], qr = q[i * dk + r] * e;
                for (int c = 0; c < dv; c++) {
                    vn[i * dv + c] -= wr * srow[c];
                    o[c] += qr * srow[c];
                }
            }
        }
        for (int i = 0; i < L; i++) {
            float *o = h->o + (int64_t)(c0 + i) * h->ld_o;
            for (int j = 0; j <= i; j++) {
                float p = P[i * C + j];
                for (int c = 0; c < dv; c++)
                    o[c] += p * vn[j * dv + c];
            }
        }
        float last = expf(cum[L - 1]);
        for (int j = 0; j < L; j++)
            cum[j] = expf(cum[L - 1] - cum[j]); /* now the decay from token j to the chunk's end */
        for (int r = 0; r < dk; r++) {
            float *srow = S + (int64_t)r * dv;
            for (int c = 0; c < dv; c++)
                srow[c] *= last;
            for (int j = 0; j < L; j++) {
                float kr = k[j * dk + r] * cum[j];
                for (int c = 0; c < dv; c++)
                    srow[c] += kr * vn[j * dv + c];
            }
        }
    }
}

void cpu_gdn_gated_rmsnorm(const float *o, const float *z, const float *w, int dv, float eps,
                           float *y) {
    cpu_rmsnorm(o, w, dv, eps, y);
    for (int i = 0; i < dv; i++)
        y[i] *= silu(z[i]);
}

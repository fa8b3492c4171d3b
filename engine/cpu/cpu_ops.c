#include "cpu_ops.h"

#include <math.h>
#include <string.h>

#include "dtype.h"

/* e4m3 -> f32 by bit moves, which vectorize (a table lookup does not): the 7 magnitude bits
 * placed at the top of an f32's exponent and mantissa give 2^(e-127) (1 + m/8), or the
 * subnormal (m/8) 2^-126 when e = 0; times 2^120 (exact) that is the e4m3 value. The NaN codes
 * (0x7f, 0xff) decode as +-480, which no checkpoint holds. */
static inline float e4m3_decode(uint8_t b) {
    uint32_t u = ((uint32_t)(b & 0x80) << 24) | ((uint32_t)(b & 0x7f) << 20);
    float f;
    memcpy(&f, &u, sizeof f);
    return f * 0x1p120f;
}

void cpu_dequant_rows(const wtensor_t *w, int64_t row0, int n, float *dst) {
    int64_t cols = w->cols, ld = wtensor_ld(w);
    if (w->dummy) { /* lazy dummy weights: generated here (weights_open when a copy won't fit) */
        for (int r = 0; r < n; r++)
            wtensor_row_f32(w, row0 + r, dst + r * cols);
        return;
    }
    if (ld != cols && n > 1) { /* a view (a tensor-parallel shard): its rows are ld apart */
        for (int r = 0; r < n; r++)
            cpu_dequant_rows(w, row0 + r, 1, dst + r * cols);
        return;
    }
    switch (w->dtype) {
        case DT_F32:
            memcpy(dst, (const float *)w->data + row0 * ld, (size_t)(n * cols) * sizeof(float));
            break;
        case DT_BF16: {
            /* bf16 is the top half of an f32: a shift, which vectorizes. */
            const uint16_t *src = (const uint16_t *)w->data + row0 * ld;
            int64_t count = n * cols;
            for (int64_t i = 0; i < count; i++) {
                uint32_t u = (uint32_t)src[i] << 16;
                memcpy(&dst[i], &u, sizeof u);
            }
            break;
        }
        case DT_F16:
            dtype_to_f32(DT_F16, (const uint16_t *)w->data + row0 * ld, dst, (size_t)(n * cols));
            break;
        case DT_F8_E4M3:
            for (int r = 0; r < n; r++) {
                int64_t row = row0 + r;
                const uint8_t *src = (const uint8_t *)w->data + row * ld;
                const float *scales = w->scale_inv + (row / w->block_n) * wtensor_scale_ld(w);
                float *out = dst + r * cols;
                for (int64_t k0 = 0, kb = 0; k0 < cols; k0 += w->block_k, kb++) {
                    int64_t k1 = k0 + w->block_k < cols ? k0 + w->block_k : cols;
                    float s = scales[kb];
                    for (int64_t k = k0; k < k1; k++)
                        out[k] = e4m3_decode(src[k]) * s;
                }
            }
            break;
        default:
            /* create() refuses other dtypes; zeros keep a misuse visible without UB. */
            memset(dst, 0, (size_t)(n * cols) * sizeof(float));
            break;
    }
}

/* The three f32 inner products below (cpu_dot, dot_4x1, dot_4x2) are left out of the
 * sanitizers: ASan's shadow checks on their eight-lane accumulators and UBSan's index checks keep
 * the loops scalar, which made the sanitizer build's CPU tests ten times slower than the engine
 * logic they are there to check. They do float arithmetic on spans whose bounds their callers
 * own (cpu_matmul_rows: the weight tensor's rows and cols; attention: the block table, checked by
 * backend_check_bounds each step), and the callers' own accesses stay checked. */
#if defined(__GNUC__)
#define INNER_PRODUCT __attribute__((no_sanitize("address", "undefined")))
#else
#define INNER_PRODUCT
#endif

/* The fixed reduction of the 8 lanes, shared by every kernel. */
static inline float reduce8(const float *a) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

INNER_PRODUCT float cpu_dot(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int k = 0;
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++)
            acc[j] = fmaf(a[k + j], b[k + j], acc[j]);
    for (int j = 0; k + j < n; j++)
        acc[j] = fmaf(a[k + j], b[k + j], acc[j]);
    return reduce8(acc);
}

/* Four weight rows against one token: four independent FMA chains, same order as cpu_dot. */
INNER_PRODUCT static void dot_4x1(const float *x, const float *w, int K, float *out) {
    const float *w0 = w, *w1 = w + K, *w2 = w + 2 * K, *w3 = w + 3 * K;
    float a0[8] = {0}, a1[8] = {0}, a2[8] = {0}, a3[8] = {0};
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        for (int j = 0; j < 8; j++) {
            float xv = x[k + j];
            a0[j] = fmaf(xv, w0[k + j], a0[j]);
            a1[j] = fmaf(xv, w1[k + j], a1[j]);
            a2[j] = fmaf(xv, w2[k + j], a2[j]);
            a3[j] = fmaf(xv, w3[k + j], a3[j]);
        }
    }
    for (int j = 0; k + j < K; j++) {
        float xv = x[k + j];
        a0[j] = fmaf(xv, w0[k + j], a0[j]);
        a1[j] = fmaf(xv, w1[k + j], a1[j]);
        a2[j] = fmaf(xv, w2[k + j], a2[j]);
        a3[j] = fmaf(xv, w3[k + j], a3[j]);
    }
    out[0] = reduce8(a0);
    out[1] = reduce8(a1);
    out[2] = reduce8(a2);
    out[3] = reduce8(a3);
}

/* Four weight rows against two tokens: eight chains, each weight load used twice. */
INNER_PRODUCT static void dot_4x2(const float *x0, const float *x1, const float *w, int K,
                                  float *out0, float *out1) {
    const float *w0 = w, *w1 = w + K, *w2 = w + 2 * K, *w3 = w + 3 * K;
    float a0[8] = {0}, a1[8] = {0}, a2[8] = {0}, a3[8] = {0};
    float b0[8] = {0}, b1[8] = {0}, b2[8] = {0}, b3[8] = {0};
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        for (int j = 0; j < 8; j++) {
            float xa = x0[k + j], xb = x1[k + j];
            float v0 = w0[k + j], v1 = w1[k + j], v2 = w2[k + j], v3 = w3[k + j];
            a0[j] = fmaf(xa, v0, a0[j]);
            a1[j] = fmaf(xa, v1, a1[j]);
            a2[j] = fmaf(xa, v2, a2[j]);
            a3[j] = fmaf(xa, v3, a3[j]);
            b0[j] = fmaf(xb, v0, b0[j]);
            b1[j] = fmaf(xb, v1, b1[j]);
            b2[j] = fmaf(xb, v2, b2[j]);
            b3[j] = fmaf(xb, v3, b3[j]);
        }
    }
    for (int j = 0; k + j < K; j++) {
        float xa = x0[k + j], xb = x1[k + j];
        float v0 = w0[k + j], v1 = w1[k + j], v2 = w2[k + j], v3 = w3[k + j];
        a0[j] = fmaf(xa, v0, a0[j]);
        a1[j] = fmaf(xa, v1, a1[j]);
        a2[j] = fmaf(xa, v2, a2[j]);
        a3[j] = fmaf(xa, v3, a3[j]);
        b0[j] = fmaf(xb, v0, b0[j]);
        b1[j] = fmaf(xb, v1, b1[j]);
        b2[j] = fmaf(xb, v2, b2[j]);
        b3[j] = fmaf(xb, v3, b3[j]);
    }
    out0[0] = reduce8(a0);
    out0[1] = reduce8(a1);
    out0[2] = reduce8(a2);
    out0[3] = reduce8(a3);
    out1[0] = reduce8(b0);
    out1[1] = reduce8(b1);
    out1[2] = reduce8(b2);
    out1[3] = reduce8(b3);
}

void cpu_matmul_rows(const float *x, int T, const wtensor_t *w, int64_t n0, int64_t n1, float *y,
                     int64_t ldy, float *wbuf) {
    int K = (int)w->cols;
    for (int64_t n = n0; n < n1; n += CPU_MM_ROWS) {
        int r = n1 - n < CPU_MM_ROWS ? (int)(n1 - n) : CPU_MM_ROWS;
        cpu_dequant_rows(w, n, r, wbuf);
        if (r == CPU_MM_ROWS) {
            int t = 0;
            for (; t + 2 <= T; t += 2)
                dot_4x2(x + (int64_t)t * K, x + (int64_t)(t + 1) * K, wbuf, K, y + t * ldy + n,
                        y + (t + 1) * ldy + n);
            for (; t < T; t++)
                dot_4x1(x + (int64_t)t * K, wbuf, K, y + t * ldy + n);
        } else {
            for (int t = 0; t < T; t++)
                for (int i = 0; i < r; i++)
                    y[t * ldy + n + i] = cpu_dot(x + (int64_t)t * K, wbuf + (int64_t)i * K, K);
        }
    }
}

void cpu_rmsnorm(const float *x, const float *w, int n, float eps, float *y) {
    float acc[8] = {0};
    int k = 0;
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++)
            acc[j] = fmaf(x[k + j], x[k + j], acc[j]);
    for (int j = 0; k + j < n; j++)
        acc[j] = fmaf(x[k + j], x[k + j], acc[j]);
    float var = reduce8(acc) / (float)n;
    float inv = 1.0f / sqrtf(var + eps);
    /* transformers normalizes first, then applies the weight: two roundings, in that order. */
    for (int i = 0; i < n; i++)
        y[i] = w[i] * (x[i] * inv);
}

void cpu_rope_inv_freq(int head_dim, double theta, float *inv_freq) {
    float base = (float)theta;
    for (int j = 0; j < head_dim / 2; j++) {
        float e = (float)(2 * j) / (float)head_dim;
        inv_freq[j] = 1.0f / powf(base, e);
    }
}

void cpu_rope_cos_sin(int32_t pos, const float *inv_freq, int half, float *cos_out,
                      float *sin_out) {
    float p = (float)pos;
    for (int j = 0; j < half; j++) {
        float angle = p * inv_freq[j];
        cos_out[j] = cosf(angle);
        sin_out[j] = sinf(angle);
    }
}

void cpu_rope_apply(float *x, int head_dim, const float *cos_in, const float *sin_in) {
    int half = head_dim / 2;
    for (int j = 0; j < half; j++) {
        float a = x[j], b = x[j + half];
        /* q*cos + rotate_half(q)*sin, rotate_half(q) = (-q[half:], q[:half]) */
        float lo_cos = a * cos_in[j], hi_sin = b * sin_in[j];
        float hi_cos = b * cos_in[j], lo_sin = a * sin_in[j];
        x[j] = lo_cos - hi_sin;
        x[j + half] = hi_cos + lo_sin;
    }
}

void cpu_quant_fp8_rows(const float *x, int T, int K, int group, float *out) {
    for (int t = 0; t < T; t++) {
        const float *xr = x + (int64_t)t * K;
        float *yr = out + (int64_t)t * K;
        for (int k0 = 0; k0 < K; k0 += group) {
            int k1 = k0 + group < K ? k0 + group : K;
            float amax = 0.0f;
            for (int k = k0; k < k1; k++)
                amax = fmaxf(amax, fabsf(xr[k]));
            amax = fmaxf(amax, 1e-10f);
            float s = amax / 448.0f;
            for (int k = k0; k < k1; k++) {
                float q = xr[k] / s;
                q = fminf(fmaxf(q, -448.0f), 448.0f);
                yr[k] = e4m3_decode(dtype_f32_to_e4m3(q)) * s;
            }
        }
    }
}

const float *cpu_linear_input(const float *x, int T, const wtensor_t *w, bool emulate_fp8,
                              float *scratch) {
    if (!emulate_fp8 || w->dtype != DT_F8_E4M3) return x;
    cpu_quant_fp8_rows(x, T, (int)w->cols, w->block_k, scratch);
    return scratch;
}

void cpu_attention_head(const cpu_attn_t *a, int s, int t, int h, float *scores) {
    int D = a->head_dim;
    int bs = a->block_size;
    int n_new = a->query_start[s + 1] - a->query_start[s];
    int n_keys = a->context_len[s] - n_new + (t - a->query_start[s]) + 1;
    int kvh = h / (a->n_heads / a->n_kv_heads);
    const int32_t *table = a->block_tables + (int64_t)s * a->block_table_stride;
    const float *q = a->q + ((int64_t)t * a->n_heads + h) * D;
    float *out = a->out + ((int64_t)t * a->n_heads + h) * D;

    float m = -INFINITY;
    for (int p0 = 0, b = 0; p0 < n_keys; p0 += bs, b++) {
        const float *k = cpu_kv_rows(a->k_cache, a, table[b], kvh);
        int n = n_keys - p0 < bs ? n_keys - p0 : bs;
        for (int i = 0; i < n; i++) {
            float sc = cpu_dot(q, k + (int64_t)i * D, D) * a->scale;
            scores[p0 + i] = sc;
            m = fmaxf(m, sc);
        }
    }
    float sum = 0.0f;
    for (int p = 0; p < n_keys; p++) {
        scores[p] = expf(scores[p] - m);
        sum += scores[p];
    }
    float inv = 1.0f / sum;
    for (int d = 0; d < D; d++)
        out[d] = 0.0f;
    for (int p0 = 0, b = 0; p0 < n_keys; p0 += bs, b++) {
        const float *v = cpu_kv_rows(a->v_cache, a, table[b], kvh);
        int n = n_keys - p0 < bs ? n_keys - p0 : bs;
        for (int i = 0; i < n; i++) {
            float pw = scores[p0 + i] * inv;
            const float *vi = v + (int64_t)i * D;
            for (int d = 0; d < D; d++)
                out[d] = fmaf(pw, vi[d], out[d]);
        }
    }
}

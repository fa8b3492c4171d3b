#include "cpu_fast.h"

#include <math.h>
#include <string.h>

#include "dtype.h"

/* Panel scratch: rows of f32 that stay in a 512 KiB L2 beside the activations. */
#define PANEL_FLOATS   49152
#define PANEL_MAX_ROWS 96

int64_t cpu_fast_scratch_floats(int64_t K) {
    int64_t min = (int64_t)CPU_MM_ROWS * K;
    return min > PANEL_FLOATS ? min : PANEL_FLOATS;
}

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

/* Every function here is compiled for AVX2 + FMA whatever the build's -march (the Debug build
 * has none), runs only after cpu_fast_supported(), and is left out of the sanitizers (see
 * INNER_PRODUCT in cpu_ops.c: the spans are bounded by the callers, whose accesses stay checked).
 */
#define FAST        __attribute__((target("avx2,fma"), no_sanitize("address", "undefined")))
#define FAST_INLINE static inline __attribute__((always_inline)) FAST

bool cpu_fast_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* Lanes [0, n) set, n in 1..7. */
FAST_INLINE __m256i tail_mask(int n) {
    static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(m + 8 - n));
}

/* The reference's reduce8: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). */
FAST_INLINE float reduce(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

/* reduce() of four accumulators at once, the same sums of the same pairs in transposed
 * registers: [reduce(a), reduce(b), reduce(c), reduce(d)]. */
FAST_INLINE __m128 reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 ab =
        _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    __m256 cd =
        _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
    /* low lane: a's and c's (s0 + s2, s1 + s3); high lane: b's and d's */
    __m256 t = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 r = _mm256_add_ps(_mm256_shuffle_ps(t, t, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(t, t, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm_unpacklo_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
}

/* ---------------------------------------------------------------------------------------------
 * GEMM, T >= 4: R (<= 3) rows of an f32 panel against C (<= 4) tokens, 12 accumulators. */

FAST_INLINE void panel_tile(const float *w, int64_t ldw, const float *x, int K, int R, int C,
                            float *y, int64_t ldy) {
    __m256 acc[3][4];
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 wv[3];
#pragma GCC unroll 3
        for (int r = 0; r < R; r++)
            wv[r] = _mm256_loadu_ps(w + r * ldw + k);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            __m256 xv = _mm256_loadu_ps(x + (int64_t)c * K + k);
#pragma GCC unroll 3
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm256_fmadd_ps(xv, wv[r], acc[r][c]);
        }
    }
    if (k < K) { /* masked lanes add 0 * 0: the accumulators keep their values */
        __m256i m = tail_mask(K - k);
        __m256 wv[3];
#pragma GCC unroll 3
        for (int r = 0; r < R; r++)
            wv[r] = _mm256_maskload_ps(w + r * ldw + k, m);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            __m256 xv = _mm256_maskload_ps(x + (int64_t)c * K + k, m);
#pragma GCC unroll 3
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm256_fmadd_ps(xv, wv[r], acc[r][c]);
        }
    }
    if (C == 4) {
#pragma GCC unroll 3
        for (int r = 0; r < R; r++) {
            float v[4];
            _mm_storeu_ps(v, reduce4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                y[c * ldy + r] = v[c];
        }
        return;
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            y[c * ldy + r] = reduce(acc[r][c]);
}

typedef void (*panel_fn)(const float *w, int64_t ldw, const float *x, int K, float *y, int64_t ldy);
#define PANEL_FN(R, C)                                                                             \
    static FAST void panel_##R##x##C(const float *w, int64_t ldw, const float *x, int K, float *y, \
                                     int64_t ldy) {                                                \
        panel_tile(w, ldw, x, K, R, C, y, ldy);                                                    \
    }
PANEL_FN(1, 1)
PANEL_FN(1, 2)
PANEL_FN(1, 3)
PANEL_FN(1, 4)
PANEL_FN(2, 1)
PANEL_FN(2, 2)
PANEL_FN(2, 3)
PANEL_FN(2, 4)
PANEL_FN(3, 1)
PANEL_FN(3, 2)
PANEL_FN(3, 3)
PANEL_FN(3, 4)
static const panel_fn panel_fns[3][4] = {{panel_1x1, panel_1x2, panel_1x3, panel_1x4},
                                         {panel_2x1, panel_2x2, panel_2x3, panel_2x4},
                                         {panel_3x1, panel_3x2, panel_3x3, panel_3x4}};

/* Rows [n0, n1) for T >= 4 (or weights the register path does not read): panels of P rows,
 * dequantized once (F32 weights are read in place), each multiplied by every token. */
static void matmul_panels(const float *x, int T, const wtensor_t *w, int64_t n0, int64_t n1,
                          float *y, int64_t ldy, float *scratch, int64_t scratch_floats) {
    int K = (int)w->cols;
    int64_t P = scratch_floats / K / 3 * 3;
    if (P > PANEL_MAX_ROWS) P = PANEL_MAX_ROWS;
    bool in_place = w->dtype == DT_F32 && !w->dummy && wtensor_ld(w) == K;
    for (int64_t p0 = n0; p0 < n1; p0 += P) {
        int np = (int)(n1 - p0 < P ? n1 - p0 : P);
        const float *panel = scratch;
        if (in_place)
            panel = (const float *)w->data + p0 * K;
        else
            cpu_dequant_rows(w, p0, np, scratch);
        for (int t0 = 0; t0 < T; t0 += 4) {
            int C = T - t0 < 4 ? T - t0 : 4;
            const float *xt = x + (int64_t)t0 * K;
            float *yt = y + (int64_t)t0 * ldy + p0;
            for (int r0 = 0; r0 < np; r0 += 3) {
                int R = np - r0 < 3 ? np - r0 : 3;
                panel_fns[R - 1][C - 1](panel + (int64_t)r0 * K, K, xt, K, yt + r0, ldy);
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * GEMM, T <= 3: the weights converted inside registers. */

enum { W_F32, W_BF16, W_F8 };

/* 8 weights at p[k..k+7] of a row as f32; FP8 times its block's scale s. */
FAST_INLINE __m256 load_w(int kind, const void *p, int64_t k, __m256 s) {
    switch (kind) {
        case W_BF16: {
            __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + k));
            return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        }
        case W_F8: {
            /* e4m3_decode (cpu_ops.c): sign to bit 31, the 7 magnitude bits to bits 20..26,
             * times 2^120, then the block's scale: the same two f32 products */
            __m128i b8 = _mm_loadl_epi64((const __m128i *)((const uint8_t *)p + k));
            __m256i b = _mm256_cvtepu8_epi32(b8);
            __m256i u = _mm256_or_si256(
                _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24),
                _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7f)), 20));
            __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(u), _mm256_set1_ps(0x1p120f));
            return _mm256_mul_ps(f, s);
        }
        default:
            return _mm256_loadu_ps((const float *)p + k);
    }
}

/* R (<= 4) rows starting at `row` against C (<= 3) tokens; K % 8 == 0 (the caller's check; a
 * tail goes to the panel path), FP8 block_k % 8 == 0. The next R rows are prefetched as one
 * linear stream meanwhile: a core streams R interleaved rows from memory at about half the speed
 * of one stream (bench/RESULTS.md, the bf16 GEMMs). */
FAST_INLINE void reg_tile(int kind, const wtensor_t *w, int64_t row, const float *x, int K, int R,
                          int C, float *y, int64_t ldy) {
    const void *rp[4];
    const float *sc[4];
    size_t esize = kind == W_BF16 ? 2 : kind == W_F8 ? 1 : 4, ld = (size_t)wtensor_ld(w);
    int64_t sld = wtensor_scale_ld(w);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        rp[r] = (const char *)w->data + (size_t)(row + r) * ld * esize;
        sc[r] = kind == W_F8 ? w->scale_inv + ((row + r) / w->block_n) * sld : NULL;
    }
    __m256 acc[4][3];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 3
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm256_setzero_ps();
    const char *pf = (const char *)w->data + (size_t)(row + R) * ld * esize;
    const int64_t step_bytes = (int64_t)R * 8 * (int64_t)esize;
    int bk = kind == W_F8 ? w->block_k : K;
    for (int k0 = 0, kb = 0; k0 < K; k0 += bk, kb++) {
        int k1 = k0 + bk < K ? k0 + bk : K;
        __m256 s[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            s[r] = kind == W_F8 ? _mm256_set1_ps(sc[r][kb]) : _mm256_setzero_ps();
        for (int k = k0; k < k1; k += 8) {
            int64_t o = k / 8 * step_bytes;
            if ((o & 63) < step_bytes) _mm_prefetch(pf + (o & ~63), _MM_HINT_T0);
            __m256 wv[4];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                wv[r] = load_w(kind, rp[r], k, s[r]);
#pragma GCC unroll 3
            for (int c = 0; c < C; c++) {
                __m256 xv = _mm256_loadu_ps(x + (int64_t)c * K + k);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++)
                    acc[r][c] = _mm256_fmadd_ps(xv, wv[r], acc[r][c]);
            }
        }
    }
    if (R == 4) {
#pragma GCC unroll 3
        for (int c = 0; c < C; c++)
            _mm_storeu_ps(y + c * ldy, reduce4(acc[0][c], acc[1][c], acc[2][c], acc[3][c]));
        return;
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 3
        for (int c = 0; c < C; c++)
            y[c * ldy + r] = reduce(acc[r][c]);
}

typedef void (*reg_fn)(const wtensor_t *w, int64_t row, const float *x, int K, float *y,
                       int64_t ldy);
#define REG_FN(KIND, R, C)                                                                         \
    static FAST void reg_##KIND##_##R##x##C(const wtensor_t *w, int64_t row, const float *x,       \
                                            int K, float *y, int64_t ldy) {                        \
        reg_tile(KIND, w, row, x, K, R, C, y, ldy);                                                \
    }
#define REG_FNS(KIND)                                                                              \
    REG_FN(KIND, 1, 1)                                                                             \
    REG_FN(KIND, 1, 2) REG_FN(KIND, 1, 3) REG_FN(KIND, 4, 1) REG_FN(KIND, 4, 2) REG_FN(KIND, 4, 3)
REG_FNS(W_F32)
REG_FNS(W_BF16)
REG_FNS(W_F8)
/* [kind][R == 4][C - 1] */
static const reg_fn reg_fns[3][2][3] = {
    {{reg_W_F32_1x1, reg_W_F32_1x2, reg_W_F32_1x3}, {reg_W_F32_4x1, reg_W_F32_4x2, reg_W_F32_4x3}},
    {{reg_W_BF16_1x1, reg_W_BF16_1x2, reg_W_BF16_1x3},
     {reg_W_BF16_4x1, reg_W_BF16_4x2, reg_W_BF16_4x3}},
    {{reg_W_F8_1x1, reg_W_F8_1x2, reg_W_F8_1x3}, {reg_W_F8_4x1, reg_W_F8_4x2, reg_W_F8_4x3}}};

/* The register path's kind for w, or -1 when w goes to the panels. */
static int reg_kind(const wtensor_t *w) {
    if (w->dummy || w->cols % 8) return -1;
    switch (w->dtype) {
        case DT_F32:
            return W_F32;
        case DT_BF16:
            return W_BF16;
        case DT_F8_E4M3:
            return w->block_k % 8 == 0 ? W_F8 : -1;
        default:
            return -1;
    }
}

void cpu_fast_matmul_rows(const float *x, int T, const wtensor_t *w, int64_t n0, int64_t n1,
                          float *y, int64_t ldy, float *scratch, int64_t scratch_floats) {
    int kind = reg_kind(w);
    if (T >= 4 || kind < 0) {
        matmul_panels(x, T, w, n0, n1, y, ldy, scratch, scratch_floats);
        return;
    }
    int K = (int)w->cols;
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4)
        reg_fns[kind][1][T - 1](w, n, x, K, y + n, ldy);
    for (; n < n1; n++)
        reg_fns[kind][0][T - 1](w, n, x, K, y + n, ldy);
}

/* ---------------------------------------------------------------------------------------------
 * Attention */

/* scores[g][i..i+kn) = (q_g . k_p) * scale for the hn (<= 4) heads at q (stride D) and kn keys
 * from kr (stride tok_stride); D % 8 == 0. Each score is one accumulator walked along D, as the
 * reference's; the hn * kn of them run side by side so that their FMA chains overlap (one chain
 * at a time waits on the FMA's latency). */
FAST_INLINE void qk_keys(const float *q, int hn, int D, const float *kr, int64_t tok_stride, int kn,
                         float scale, float *scores, int64_t score_stride) {
    __m256 acc[4][8];
#pragma GCC unroll 4
    for (int g = 0; g < hn; g++)
#pragma GCC unroll 8
        for (int j = 0; j < kn; j++)
            acc[g][j] = _mm256_setzero_ps();
    for (int d = 0; d < D; d += 8) {
        __m256 qv[4];
#pragma GCC unroll 4
        for (int g = 0; g < hn; g++)
            qv[g] = _mm256_loadu_ps(q + g * D + d);
#pragma GCC unroll 8
        for (int j = 0; j < kn; j++) {
            __m256 kv = _mm256_loadu_ps(kr + j * tok_stride + d);
#pragma GCC unroll 4
            for (int g = 0; g < hn; g++)
                acc[g][j] = _mm256_fmadd_ps(qv[g], kv, acc[g][j]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < hn; g++)
#pragma GCC unroll 8
        for (int j = 0; j < kn; j++)
            scores[g * score_stride + j] = reduce(acc[g][j]) * scale;
}

/* The same for the keys p of one block run (n rows of stride tok_stride): 8 / hn keys at a time
 * (8 chains; 2 for hn = 3), then one by one. */
FAST_INLINE void qk_run(const float *q, int hn, int D, const float *k, int64_t tok_stride, int n,
                        float scale, float *scores, int64_t score_stride) {
    const int kb = hn == 1 ? 8 : hn == 2 ? 4 : 2;
    int i = 0;
    for (; i + kb <= n; i += kb)
        qk_keys(q, hn, D, k + i * tok_stride, tok_stride, kb, scale, scores + i, score_stride);
    for (; i < n; i++)
        qk_keys(q, hn, D, k + i * tok_stride, tok_stride, 1, scale, scores + i, score_stride);
}

/* The largest of x[0..n), as fmaxf over them gives it when none is NaN (the max is exact, so
 * the order does not matter). */
static FAST float max_of(const float *x, int n) {
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    int p = 0;
    for (; p + 8 <= n; p += 8)
        m8 = _mm256_max_ps(m8, _mm256_loadu_ps(x + p));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    float m = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
    for (; p < n; p++)
        m = x[p] > m ? x[p] : m;
    return m;
}

typedef void (*qk_fn)(const float *q, int D, const float *k, int64_t tok_stride, int n, float scale,
                      float *scores, int64_t score_stride);
#define QK_FN(H)                                                                                   \
    static FAST void qk_##H(const float *q, int D, const float *k, int64_t tok_stride, int n,      \
                            float scale, float *scores, int64_t score_stride) {                    \
        qk_run(q, H, D, k, tok_stride, n, scale, scores, score_stride);                            \
    }
QK_FN(1)
QK_FN(2)
QK_FN(3)
QK_FN(4)
static const qk_fn qk_fns[4] = {qk_1, qk_2, qk_3, qk_4};

/* out_g[d0 .. d0 + 32) += sum_p pw_g[p] v_p for hn (<= 2) heads over one block run, in the
 * reference's order along p (one fmaf per key into each output). */
FAST_INLINE void pv_run(__m256 (*acc)[4], int hn, const float *pw, int64_t pw_stride,
                        const float *v, int64_t tok_stride, int n) {
    for (int i = 0; i < n; i++) {
        const float *vr = v + i * tok_stride;
        __m256 vv[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            vv[j] = _mm256_loadu_ps(vr + 8 * j);
#pragma GCC unroll 2
        for (int g = 0; g < hn; g++) {
            __m256 p = _mm256_set1_ps(pw[g * pw_stride + i]);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                acc[g][j] = _mm256_fmadd_ps(p, vv[j], acc[g][j]);
        }
    }
}

/* The PV product of hn (<= 2) heads, 32 output dims at a time; D % 32 == 0. */
FAST_INLINE void pv_heads(int hn, const float *pw, int64_t pw_stride, const cpu_attn_t *a, int kvh,
                          const int32_t *table, int n_keys, float *out) {
    int D = a->head_dim, bs = a->block_size;
    for (int d0 = 0; d0 < D; d0 += 32) {
        __m256 acc[2][4];
#pragma GCC unroll 2
        for (int g = 0; g < hn; g++)
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                acc[g][j] = _mm256_setzero_ps();
        for (int p0 = 0, b = 0; p0 < n_keys; p0 += bs, b++) {
            const float *v = cpu_kv_rows(a->v_cache, a, table[b], kvh) + d0;
            int n = n_keys - p0 < bs ? n_keys - p0 : bs;
            pv_run(acc, hn, pw + p0, pw_stride, v, D, n);
        }
#pragma GCC unroll 2
        for (int g = 0; g < hn; g++)
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                _mm256_storeu_ps(out + (int64_t)g * D + d0 + 8 * j, acc[g][j]);
    }
}

static FAST void pv_1(const float *pw, int64_t pw_stride, const cpu_attn_t *a, int kvh,
                      const int32_t *table, int n_keys, float *out) {
    pv_heads(1, pw, pw_stride, a, kvh, table, n_keys, out);
}

static FAST void pv_2(const float *pw, int64_t pw_stride, const cpu_attn_t *a, int kvh,
                      const int32_t *table, int n_keys, float *out) {
    pv_heads(2, pw, pw_stride, a, kvh, table, n_keys, out);
}

void cpu_fast_attention(const cpu_attn_t *a, int s, int t, int kvh, float *scores) {
    int D = a->head_dim, bs = a->block_size;
    int G = a->n_heads / a->n_kv_heads;
    if (D % 32) { /* shapes the vector loops do not cover: the reference, head by head */
        for (int g = 0; g < G; g++)
            cpu_attention_head(a, s, t, kvh * G + g, scores);
        return;
    }
    int n_new = a->query_start[s + 1] - a->query_start[s];
    int n_keys = a->context_len[s] - n_new + (t - a->query_start[s]) + 1;
    const int32_t *table = a->block_tables + (int64_t)s * a->block_table_stride;
    const float *q = a->q + ((int64_t)t * a->n_heads + (int64_t)kvh * G) * D;
    float *out = a->out + ((int64_t)t * a->n_heads + (int64_t)kvh * G) * D;

    /* scores of every head, each K row loaded once for up to 4 heads */
    for (int g0 = 0; g0 < G; g0 += 4) {
        int hn = G - g0 < 4 ? G - g0 : 4;
        for (int p0 = 0, b = 0; p0 < n_keys; p0 += bs, b++) {
            const float *k = cpu_kv_rows(a->k_cache, a, table[b], kvh);
            int n = n_keys - p0 < bs ? n_keys - p0 : bs;
            qk_fns[hn - 1](q + (int64_t)g0 * D, D, k, D, n, a->scale,
                           scores + (int64_t)g0 * n_keys + p0, n_keys);
        }
    }
    /* softmax, as the reference: max (exact in any order), exp and sum in key order, then the
     * weights pw */
    for (int g = 0; g < G; g++) {
        float *sc = scores + (int64_t)g * n_keys;
        float m = max_of(sc, n_keys);
        float sum = 0.0f;
        for (int p = 0; p < n_keys; p++) {
            sc[p] = expf(sc[p] - m);
            sum += sc[p];
        }
        float inv = 1.0f / sum;
        for (int p = 0; p < n_keys; p++)
            sc[p] *= inv;
    }
    /* out = sum_p pw[p] v_p, each V row loaded once for two heads */
    int g = 0;
    for (; g + 2 <= G; g += 2)
        pv_2(scores + (int64_t)g * n_keys, n_keys, a, kvh, table, n_keys, out + (int64_t)g * D);
    if (g < G)
        pv_1(scores + (int64_t)g * n_keys, n_keys, a, kvh, table, n_keys, out + (int64_t)g * D);
}

#else /* no x86-64 vector units: the reference */

bool cpu_fast_supported(void) {
    return false;
}

void cpu_fast_matmul_rows(const float *x, int T, const wtensor_t *w, int64_t n0, int64_t n1,
                          float *y, int64_t ldy, float *scratch, int64_t scratch_floats) {
    (void)scratch_floats;
    cpu_matmul_rows(x, T, w, n0, n1, y, ldy, scratch);
}

void cpu_fast_attention(const cpu_attn_t *a, int s, int t, int kvh, float *scores) {
    int G = a->n_heads / a->n_kv_heads;
    for (int g = 0; g < G; g++)
        cpu_attention_head(a, s, t, kvh * G + g, scores);
}

#endif

#include "cpu_bf16.h"

#include <string.h>

/* Rows of a block of weights that every token passes while it stays in L2 (an FP8 one decoded to
 * bf16 once): PANEL_ROWS, fewer when they would pass PANEL_BYTES; and tokens an FP8 block's
 * scaled activations are split for at once. */
#define PANEL_ROWS  64
#define PANEL_BYTES (384 * 1024)
#define X_CHUNK     64

static int64_t round32(int64_t k) {
    return (k + 31) / 32 * 32;
}

/* Rows of a panel of bf16 rows of Kp columns: a multiple of 4 tiles' rows, at most PANEL_ROWS. */
static int64_t panel_rows(int64_t Kp) {
    int64_t rows = PANEL_BYTES / (Kp * 2) / 4 * 4;
    return rows < 4 ? 4 : rows > PANEL_ROWS ? PANEL_ROWS : rows;
}

int64_t cpu_bf16_x_elems(int T, int64_t K, int passes) {
    return (int64_t)T * passes * round32(K);
}

int64_t cpu_bf16_scratch_floats(int64_t K) {
    return (X_CHUNK * 2 + PANEL_ROWS) * round32(K) / 2;
}

bool cpu_bf16_takes(const wtensor_t *w) {
    if (w->dummy || !w->data) return false;
    return w->dtype == DT_BF16 || (w->dtype == DT_F8_E4M3 && w->block_k % 32 == 0);
}

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

/* Compiled for AVX-512 whatever the build's -march; run only after cpu_bf16_supported(); left
 * out of the sanitizers as cpu_fast.c is (the spans are bounded by the callers). */
#define BF                                                                                         \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"),                        \
                   no_sanitize("address", "undefined")))
#define BF_INLINE static inline __attribute__((always_inline)) BF

bool cpu_bf16_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bf16");
}

/* Lanes [0, n) of 32 (n in 1..32). */
BF_INLINE __mmask32 lanes(int n) {
    return n >= 32 ? 0xffffffffu : (1u << n) - 1u;
}

/* 16 f32 to bf16 at out[0..16) and, with 2 passes, their rounding errors at out[Kp..Kp + 16). */
BF_INLINE void split16(__m512 v, int passes, uint16_t *out, int64_t Kp) {
    __m256bh hi = _mm512_cvtneps_pbh(v);
    _mm256_storeu_si256((__m256i *)out, (__m256i)hi);
    if (passes == 2) {
        /* hi back to f32 is exact (a shift), so v - hi is the rounding error, exactly */
        __m512 h = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)hi), 16));
        _mm256_storeu_si256((__m256i *)(out + Kp),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(v, h)));
    }
}

/* T rows of x [., K] into xs [T][passes][Kp], each column times its FP8 block's scale
 * s[k / bk] first (f32) when s is not NULL. */
static BF void split_rows(const float *x, int T, int64_t K, const float *s, int bk, int passes,
                          uint16_t *xs, int64_t Kp) {
    for (int t = 0; t < T; t++) {
        const float *xr = x + t * K;
        uint16_t *out = xs + (int64_t)t * passes * Kp;
        for (int64_t k = 0; k < Kp; k += 16) {
            int n = K - k >= 16 ? 16 : K - k > 0 ? (int)(K - k) : 0;
            __m512 v = _mm512_maskz_loadu_ps((__mmask16)lanes(n), xr + k);
            if (s) v = _mm512_mul_ps(v, _mm512_set1_ps(k < K ? s[k / bk] : 0.0f));
            split16(v, passes, out + k, Kp);
        }
    }
}

void cpu_bf16_split(const float *x, int T, int64_t K, int passes, uint16_t *xb) {
    split_rows(x, T, K, NULL, 0, passes, xb, round32(K));
}

/* 32 e4m3 values to bf16, exactly: the 7 magnitude bits moved under the bf16 exponent and
 * re-biased (+120) for normals; the subnormals m 2^-9 (m < 8) from a table; the sign on top.
 * The NaN codes decode as +-480, as cpu_ops.c's e4m3_decode does. */
BF_INLINE __m512i e4m3_to_bf16(__m256i b8) {
    static const uint16_t sub[32] = {0, 0x3B00, 0x3B80, 0x3BC0, 0x3C00, 0x3C20, 0x3C40, 0x3C60};
    __m512i b = _mm512_cvtepu8_epi16(b8);
    __m512i mag = _mm512_and_si512(b, _mm512_set1_epi16(0x7f));
    __m512i v = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), _mm512_set1_epi16(0x3C00));
    __mmask32 is_sub = _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8));
    v = _mm512_mask_permutexvar_epi16(v, is_sub, mag, _mm512_loadu_si512(sub));
    __m512i sign = _mm512_slli_epi16(_mm512_and_si512(b, _mm512_set1_epi16(0x80)), 8);
    return _mm512_or_si512(v, sign);
}

enum { SRC_BF16, SRC_F8 }; /* what a tile's weight rows hold */

/* 32 weights of a row from column k (lanes past the row's end zero: m). */
BF_INLINE __m512i load_w(int src, const void *row, int64_t k, __mmask32 m) {
    if (src == SRC_BF16)
        return m == 0xffffffffu ? _mm512_loadu_si512((const uint16_t *)row + k)
                                : _mm512_maskz_loadu_epi16(m, (const uint16_t *)row + k);
    return e4m3_to_bf16(_mm256_maskz_loadu_epi8(m, (const uint8_t *)row + k));
}

/* The fixed reduction tree of a 16-lane accumulator. */
BF_INLINE float reduce16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

/* reduce16 of four accumulators at once, the same sums of the same pairs (lane i + lane i + 8,
 * then + 4, + 2, + 1) in transposed registers: out[0..4) get a, b, c, d's. */
BF_INLINE void reduce16x4(__m512 a, __m512 b, __m512 c, __m512 d, float *out) {
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 t = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(1, 0, 3, 2)));
    __m512 u = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(2, 3, 0, 1)));
    __m512 first = _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), u);
    _mm_storeu_ps(out, _mm512_castps512_ps128(first));
}

/* R (<= 4) weight rows against C (<= 6) tokens: rows[r] holds bf16 or e4m3 (src), xb the
 * tokens' split activations (ldx apart, Kp columns per pass). Every accumulator sees the same
 * sequence, 32 columns at a time, pass 0 then pass 1, whatever R and C are. pf (may be NULL):
 * where the next tile's rows start in memory, prefetched as one linear stream while this tile
 * runs (a core streams its R interleaved rows from memory at half the speed of one stream; the
 * next tile's block read ahead restores it). */
BF_INLINE void tile(int src, const void *const *rows, const char *pf, const uint16_t *xb,
                    int64_t ldx, int64_t Kp, int64_t K, int passes, int R, int C, float *y,
                    int64_t ldy) {
    const int64_t step_bytes = (int64_t)R * 32 * (src == SRC_BF16 ? 2 : 1);
    __m512 acc[4][6];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm512_setzero_ps();
    for (int64_t k = 0; k < Kp; k += 32) {
        __mmask32 m = lanes((int)(K - k));
        if (pf)
            for (int64_t o = (k / 32 * step_bytes) & ~63; o < (k / 32 + 1) * step_bytes; o += 64)
                _mm_prefetch(pf + o, _MM_HINT_T1);
        __m512i wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = load_w(src, rows[r], k, m);
#pragma GCC unroll 6
        for (int c = 0; c < C; c++) {
#pragma GCC unroll 2
            for (int p = 0; p < passes; p++) {
                __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + c * ldx + p * Kp + k);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++)
                    acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, (__m512bh)wv[r]);
            }
        }
    }
    if (R == 4) {
#pragma GCC unroll 6
        for (int c = 0; c < C; c++)
            reduce16x4(acc[0][c], acc[1][c], acc[2][c], acc[3][c], y + c * ldy);
        return;
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int c = 0; c < C; c++)
            y[c * ldy + r] = reduce16(acc[r][c]);
}

/* A tile's arguments, one struct so that the function tables stay short. */
typedef struct tile_args {
    const void *rows[4];
    const char *pf;
    const uint16_t *xb;
    int64_t ldx, Kp, K;
    int passes;
    float *y;
    int64_t ldy;
} tile_args_t;

typedef void (*tile_fn)(const tile_args_t *a);
#define TILE_FN(NAME, SRC, P, R, C)                                                                \
    static BF void NAME##P##_##R##x##C(const tile_args_t *a) {                                     \
        tile(SRC, a->rows, a->pf, a->xb, a->ldx, a->Kp, a->K, P, R, C, a->y, a->ldy);              \
    }
#define TILE_FNS(NAME, SRC, P, R)                                                                  \
    TILE_FN(NAME, SRC, P, R, 1)                                                                    \
    TILE_FN(NAME, SRC, P, R, 2)                                                                    \
    TILE_FN(NAME, SRC, P, R, 3)                                                                    \
    TILE_FN(NAME, SRC, P, R, 4) TILE_FN(NAME, SRC, P, R, 5) TILE_FN(NAME, SRC, P, R, 6)
#define TILE_ROW(NAME, P, R)                                                                       \
    {                                                                                              \
        NAME##P##_##R##x1, NAME##P##_##R##x2, NAME##P##_##R##x3, NAME##P##_##R##x4,                \
            NAME##P##_##R##x5, NAME##P##_##R##x6                                                   \
    }
/* every (passes, source, R, C) compiled apart: the loops over them unrolled away */
TILE_FNS(bf, SRC_BF16, 1, 1)
TILE_FNS(bf, SRC_BF16, 1, 4)
TILE_FNS(f8, SRC_F8, 1, 1)
TILE_FNS(f8, SRC_F8, 1, 4)
TILE_FNS(bf, SRC_BF16, 2, 1)
TILE_FNS(bf, SRC_BF16, 2, 4)
TILE_FNS(f8, SRC_F8, 2, 1)
TILE_FNS(f8, SRC_F8, 2, 4)
/* [passes - 1][src][R == 4][C - 1] */
static const tile_fn tile_fns[2][2][2][6] = {
    {{TILE_ROW(bf, 1, 1), TILE_ROW(bf, 1, 4)}, {TILE_ROW(f8, 1, 1), TILE_ROW(f8, 1, 4)}},
    {{TILE_ROW(bf, 2, 1), TILE_ROW(bf, 2, 4)}, {TILE_ROW(f8, 2, 1), TILE_ROW(f8, 2, 4)}}};

/* nrows rows (row r at base + r * ld elements of esize bytes, holding src) against the T tokens
 * of xb: tokens in groups of 6, rows in fours. stream: the rows come from memory (not a panel
 * in L2), so the first token group prefetches each next tile's rows. */
static void run_tiles(int src, const void *base, int64_t ld, size_t esize, int nrows, bool stream,
                      tile_args_t *a, const uint16_t *xb, int T, float *y) {
    for (int t0 = 0; t0 < T; t0 += 6) {
        int C = T - t0 < 6 ? T - t0 : 6;
        a->xb = xb + t0 * a->ldx;
        for (int r0 = 0; r0 < nrows;) {
            int R = nrows - r0 >= 4 ? 4 : 1;
            for (int r = 0; r < R; r++)
                a->rows[r] = (const char *)base + (size_t)(r0 + r) * (size_t)ld * esize;
            a->pf = stream && t0 == 0 ? (const char *)base + (size_t)(r0 + R) * (size_t)ld * esize
                                      : NULL;
            a->y = y + (int64_t)t0 * a->ldy + r0;
            tile_fns[a->passes - 1][src][R == 4][C - 1](a);
            r0 += R;
        }
    }
}

/* Rows [row0, row0 + n) of an FP8 w as bf16 rows of Kp (the columns past K zero). */
static BF void decode_panel(const wtensor_t *w, int64_t row0, int n, uint16_t *dst, int64_t Kp) {
    int64_t ld = wtensor_ld(w), K = w->cols;
    for (int r = 0; r < n; r++) {
        const uint8_t *src = (const uint8_t *)w->data + (row0 + r) * ld;
        for (int64_t k = 0; k < Kp; k += 32) {
            __mmask32 m = lanes((int)(K - k));
            __m512i v = e4m3_to_bf16(_mm256_maskz_loadu_epi8(m, src + k));
            _mm512_storeu_si512(dst + r * Kp + k, _mm512_maskz_mov_epi16(m, v));
        }
    }
}

void cpu_bf16_matmul_rows(const float *x, const uint16_t *xb, int T, int passes, const wtensor_t *w,
                          int64_t n0, int64_t n1, float *y, int64_t ldy, float *scratch) {
    int64_t K = w->cols, Kp = round32(K), ld = wtensor_ld(w);
    tile_args_t a = {.ldx = passes * Kp, .Kp = Kp, .K = K, .passes = passes, .ldy = ldy};
    int64_t P = panel_rows(Kp);
    if (w->dtype == DT_BF16) {
        /* the rows in place, in blocks that stay in L2 while every token passes */
        for (int64_t p0 = n0; p0 < n1; p0 += P) {
            int np = (int)(n1 - p0 < P ? n1 - p0 : P);
            run_tiles(SRC_BF16, (const uint16_t *)w->data + p0 * ld, ld, 2, np, true, &a, xb, T,
                      y + p0);
        }
        return;
    }
    /* FP8: per block_n rows, the activations times that scale row, split (X_CHUNK tokens at a
     * time); then the rows decoded inside registers (1 to 3 tokens: each weight read once) or
     * into a bf16 panel that every token passes */
    uint16_t *xs = (uint16_t *)scratch, *panel = xs + X_CHUNK * 2 * Kp;
    int64_t sld = wtensor_scale_ld(w);
    for (int64_t b0 = n0; b0 < n1;) {
        int64_t b1 = (b0 / w->block_n + 1) * w->block_n;
        if (b1 > n1) b1 = n1;
        const float *s = w->scale_inv + (b0 / w->block_n) * sld;
        for (int t0 = 0; t0 < T; t0 += X_CHUNK) {
            int tn = T - t0 < X_CHUNK ? T - t0 : X_CHUNK;
            split_rows(x + (int64_t)t0 * K, tn, K, s, w->block_k, passes, xs, Kp);
            float *yt = y + (int64_t)t0 * ldy;
            if (tn <= 3) {
                run_tiles(SRC_F8, (const uint8_t *)w->data + b0 * ld, ld, 1, (int)(b1 - b0), true,
                          &a, xs, tn, yt + b0);
                continue;
            }
            for (int64_t p0 = b0; p0 < b1; p0 += P) {
                int np = (int)(b1 - p0 < P ? b1 - p0 : P);
                decode_panel(w, p0, np, panel, Kp);
                run_tiles(SRC_BF16, panel, Kp, 2, np, false, &a, xs, tn, yt + p0);
            }
        }
        b0 = b1;
    }
}

#else /* no x86-64 AVX-512: never supported; the callers take the f32 path */

bool cpu_bf16_supported(void) {
    return false;
}

void cpu_bf16_split(const float *x, int T, int64_t K, int passes, uint16_t *xb) {
    (void)x, (void)T, (void)K, (void)passes, (void)xb;
}

void cpu_bf16_matmul_rows(const float *x, const uint16_t *xb, int T, int passes, const wtensor_t *w,
                          int64_t n0, int64_t n1, float *y, int64_t ldy, float *scratch) {
    (void)x, (void)xb, (void)T, (void)passes, (void)w, (void)n0, (void)n1, (void)y, (void)ldy,
        (void)scratch;
}

#endif

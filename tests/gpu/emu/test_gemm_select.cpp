/* kernels/gemm.cu's choice of cuBLASLt algorithms (issue: robust cuBLASLt), against a scripted
 * cuBLASLt (fake_cublaslt.h) whose matmul computes the product on the host, so the choice is
 * checked without a GPU (the real library's algorithms: tests/gpu/test_gemm.cu on a device):
 *
 * - gemm_probe asks for every padded token count up to t_max once (FP8) or every count (BF16),
 *   with the alignment preferences of A, B, C and D set alike, and a second probe asks nothing;
 * - a size without an FP8 algorithm of F32 output runs FP8 with BF16 output and converts: the
 *   probe counts it and allocates the buffer, the product equals the BF16-rounded reference bit
 *   for bit, the neighbouring sizes the F32 one;
 * - a size with no algorithm at all fails the probe naming it;
 * - a candidate whose launch fails is skipped for the next, which then goes first (no retry on
 *   the next call); a candidate wanting more workspace than given is never kept;
 * - operands less aligned than 256 bytes ask with their alignment; a size that has algorithms
 *   only for less aligned operands (probed that way) serves aligned ones.
 *
 * Products are checked against the host formula: W e4m3 with 128x128 block scales, x e4m3 with
 * per-token 128-column scales (transposed, padded rows), f32 sums per 128-column block. */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cb_engine.h" /* first: C linkage for the engine headers */
#include "dtype.h"
#include "fake_cublaslt.h"
#include "gemm.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

enum { N = 256, K = 384, TMAX = 32 };

/* Operands at 256-byte aligned host ("device") addresses, as cudaMalloc gives on a GPU. */
template <typename T> static T *aligned(size_t n) {
    return static_cast<T *>(aligned_alloc(256, (n * sizeof(T) + 255) / 256 * 256));
}

struct Problem {
    uint8_t *w, *x;
    float *ws, *xs;
    int tp;
};

static Problem make(int t) {
    Problem p;
    p.tp = gemm_pad_t(t);
    const int L = K / 128, ld = gemm_w8_scale_ld(K);
    p.w = aligned<uint8_t>((size_t)N * K);
    p.x = aligned<uint8_t>((size_t)p.tp * K);
    p.ws = aligned<float>((size_t)(N / 128) * ld);
    p.xs = aligned<float>((size_t)L * p.tp);
    for (size_t i = 0; i < (size_t)N * K; i++)
        p.w[i] = dtype_f32_to_e4m3((float)((int)(i * 7919 % 41) - 20) / 8.0f);
    for (size_t i = 0; i < (size_t)p.tp * K; i++)
        p.x[i] = dtype_f32_to_e4m3((float)((int)(i * 104729 % 29) - 14) / 4.0f);
    for (int i = 0; i < (N / 128) * ld; i++)
        p.ws[i] = 0.01f * (1 + i % 5);
    for (int i = 0; i < L * p.tp; i++)
        p.xs[i] = 0.02f * (1 + i % 3);
    return p;
}

static void drop(Problem &p) {
    free(p.w);
    free(p.x);
    free(p.ws);
    free(p.xs);
}

/* The product in f32, and rounded to bf16 (what the BF16-output path gives back as f32). */
static std::vector<float> reference(const Problem &p, bool bf16) {
    std::vector<float> y((size_t)p.tp * N);
    const int ld = gemm_w8_scale_ld(K);
    for (int r = 0; r < p.tp; r++)
        for (int c = 0; c < N; c++) {
            float acc = 0.0f;
            for (int kb = 0; kb < K / 128; kb++) {
                float part = 0.0f;
                for (int i = kb * 128; i < (kb + 1) * 128; i++)
                    part += dtype_e4m3_to_f32(p.w[(size_t)c * K + i]) *
                            dtype_e4m3_to_f32(p.x[(size_t)r * K + i]);
                acc += part * p.ws[(size_t)(c / 128) * ld + kb] * p.xs[(size_t)kb * p.tp + r];
            }
            y[(size_t)r * N + c] = bf16 ? dtype_bf16_to_f32(dtype_f32_to_bf16(acc)) : acc;
        }
    return y;
}

static void reset(void) {
    fake_lt = fake_lt_t{};
    fake_lt.n_algos = 3;
    fake_lt.failing_algo = -1;
    fake_lt.huge_ws_algo = -1;
}

static gemm_ctx_t *open_ctx(void) {
    gemm_ctx_t *g;
    err_t err = {{0}};
    if (gemm_create(0, 1 << 20, &g, &err) < 0) {
        printf("gemm_create: %s\n", err.msg);
        exit(1);
    }
    return g;
}

/* gemm_fp8 at t tokens into y (offset floats past a 256-aligned buffer): 0 or -1. */
static int product(gemm_ctx_t *g, const Problem &p, int t, float *y, err_t *err) {
    gemm_w8_t w = {p.w, p.ws, N, K};
    return gemm_fp8(g, &w, p.x, p.xs, t, y, true, err);
}

static void test_probe_grid(void) {
    reset();
    gemm_ctx_t *g = open_ctx();
    err_t err = {{0}};
    int via = -1;
    CHECK(gemm_probe(g, true, N, K, 100, true, 8, &via, &err) == 0, "%s", err.msg);
    CHECK(fake_lt.heuristic_calls == 25,
          "FP8 probe to 100 tokens: %d heuristic calls, want 25 "
          "(every padded size)",
          fake_lt.heuristic_calls);
    CHECK(via == 0 && fake_lt.last_align == 256 && fake_lt.mixed_align == 0,
          "via %d, alignment %u, mixed %d", via, fake_lt.last_align, fake_lt.mixed_align);
    CHECK(gemm_probe(g, true, N, K, 100, true, 8, &via, &err) == 0 && fake_lt.heuristic_calls == 25,
          "a second probe asked again (%d)", fake_lt.heuristic_calls);
    CHECK(gemm_probe(g, false, N, K, 50, true, 8, &via, &err) == 0 && fake_lt.heuristic_calls == 75,
          "BF16 probe to 50 tokens: %d calls in all, want 75", fake_lt.heuristic_calls);
    gemm_destroy(g);
    printf("%-60s %s\n", "gemm probe: every size once", failures ? "" : "ok");
}

static void test_bf16_output_fallback(void) {
    reset();
    fake_lt.no_f32_fp8_t = 8;
    gemm_ctx_t *g = open_ctx();
    err_t err = {{0}};
    int via = -1;
    CHECK(gemm_probe(g, true, N, K, 12, true, 8, &via, &err) == 0, "%s", err.msg);
    CHECK(via == 1, "sizes taking BF16 output: %d, want 1 (T = 8)", via);
    int before = failures;
    for (int t : {7, 12}) { /* 7 pads to 8: the fallback; 12 has its F32 algorithm */
        Problem p = make(t);
        float *y = aligned<float>((size_t)p.tp * N);
        CHECK(product(g, p, t, y, &err) == 0, "T=%d: %s", t, err.msg);
        std::vector<float> want = reference(p, t == 7);
        CHECK(memcmp(y, want.data(), want.size() * 4) == 0,
              "T=%d: the product differs from the %s "
              "reference",
              t, t == 7 ? "bf16-rounded" : "f32");
        free(y);
        drop(p);
    }
    gemm_stats_t st;
    gemm_stats(g, &st);
    CHECK(st.via_bf16 == 1, "stats: %d via BF16", st.via_bf16);
    gemm_destroy(g);
    printf("%-60s %s\n", "gemm FP8 with BF16 output where F32 output has none",
           failures == before ? "ok" : "FAIL");
}

static void test_no_algorithm(void) {
    reset();
    fake_lt.no_algo_t = 16;
    gemm_ctx_t *g = open_ctx();
    err_t err = {{0}};
    int via;
    CHECK(gemm_probe(g, true, N, K, 20, true, 8, &via, &err) < 0,
          "a size without algorithm passed");
    CHECK(strstr(err.msg, "T=16") != nullptr, "message names the size: %s", err.msg);
    gemm_destroy(g);
    printf("%-60s %s\n", "gemm probe names a size without algorithm", err.msg);
}

static void test_candidates(void) {
    reset();
    fake_lt.failing_algo = 0;
    gemm_ctx_t *g = open_ctx();
    err_t err = {{0}};
    int before = failures;
    Problem p = make(4);
    float *y = aligned<float>((size_t)p.tp * N);
    std::vector<float> want = reference(p, false);
    CHECK(product(g, p, 4, y, &err) == 0, "%s", err.msg);
    CHECK(memcmp(y, want.data(), want.size() * 4) == 0, "the retried product differs");
    gemm_stats_t st;
    gemm_stats(g, &st);
    CHECK(st.retries == 1 && fake_lt.matmul_calls == 2 && fake_lt.last_algo == 1,
          "retries %d, launches %d, algorithm %d", st.retries, fake_lt.matmul_calls,
          fake_lt.last_algo);
    CHECK(product(g, p, 4, y, &err) == 0 && fake_lt.matmul_calls == 3,
          "the working candidate did not go first (%d launches)", fake_lt.matmul_calls);
    gemm_destroy(g);
    /* a candidate wanting more workspace than the context has is never kept */
    reset();
    fake_lt.huge_ws_algo = 0;
    g = open_ctx();
    CHECK(product(g, p, 4, y, &err) == 0 && fake_lt.last_algo == 1,
          "ran candidate %d, which wants too much workspace", fake_lt.last_algo);
    /* every candidate failing is an error, not a crash */
    reset();
    fake_lt.n_algos = 1;
    fake_lt.failing_algo = 0;
    gemm_destroy(g);
    g = open_ctx();
    CHECK(product(g, p, 4, y, &err) < 0 && strstr(err.msg, "failed"), "all failing: %s", err.msg);
    gemm_destroy(g);
    free(y);
    drop(p);
    printf("%-60s %s\n", "gemm candidates: the next after a failed launch",
           failures == before ? "ok" : "FAIL");
}

static void test_alignment(void) {
    reset();
    gemm_ctx_t *g = open_ctx();
    err_t err = {{0}};
    int before = failures;
    Problem p = make(8);
    float *buf = aligned<float>((size_t)p.tp * N + 4);
    std::vector<float> want = reference(p, false);
    CHECK(product(g, p, 8, buf + 4, &err) == 0, "%s", err.msg); /* y 16-byte aligned */
    CHECK(fake_lt.last_align == 16, "asked at alignment %u, want 16", fake_lt.last_align);
    CHECK(memcmp(buf + 4, want.data(), want.size() * 4) == 0, "the product differs");
    gemm_destroy(g);
    /* algorithms only below 256-byte alignment: probed at 16, they serve 256-aligned operands */
    reset();
    fake_lt.min_align_offered = 256;
    g = open_ctx();
    int via;
    CHECK(gemm_probe(g, true, N, K, 8, true, 4, &via, &err) == 0, "%s", err.msg);
    CHECK(product(g, p, 8, buf, &err) == 0, "aligned operands found nothing: %s", err.msg);
    CHECK(memcmp(buf, want.data(), want.size() * 4) == 0, "the product differs");
    gemm_destroy(g);
    free(buf);
    drop(p);
    printf("%-60s %s\n", "gemm alignment preferences", failures == before ? "ok" : "FAIL");
}

int main(void) {
    test_probe_grid();
    test_bf16_output_fallback();
    test_no_algorithm();
    test_candidates();
    test_alignment();
    printf("test_gemm_select: %d failure%s\n", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}

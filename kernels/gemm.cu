#include "cb_engine.h"
#include "gemm.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_check.h"
#include "ops_common.cuh"

// ---------------------------------------------------------------------------------------------
// Algorithm cache: open addressing over (kind, pointer alignment, n, k, padded t). Sized so that
// every padded T up to 16384 tokens for a dozen shapes fits; a full table still works, it just
// asks again.

enum { KIND_FP8 = 1, KIND_FP8_F32 = 2, KIND_BF16 = 3, KIND_BF16_F32 = 4 };

#define CACHE_SLOTS 32768
#define CANDIDATES  4 /* algorithms kept per problem, the heuristic's order */
#define HEURISTICS  8 /* results asked of the heuristic */

typedef struct algo_entry {
    uint64_t key; /* 0 = empty */
    int n_algo;   /* candidates kept (0: the problem has none, remembered too) */
    cublasLtMatmulAlgo_t algo[CANDIDATES];
} algo_entry_t;

struct gemm_ctx {
    cublasLtHandle_t lt;
    cudaStream_t stream;
    void *workspace; /* device, workspace_bytes, 256-byte aligned (cudaMalloc) */
    size_t workspace_bytes;
    uint16_t *conv;      /* device: the BF16 output of a via_bf16 product, before conversion */
    size_t conv_cap;     /* its elements */
    algo_entry_t *cache; /* [CACHE_SLOTS] host */
    int queries, retries, via_bf16;
};

/* The largest power of two dividing the address, at most 256: what cuBLASLt's alignment
 * preferences take (the common one of the operands). */
static int align_log2(const void *a, const void *b, const void *d) {
    uintptr_t x = (uintptr_t)a | (uintptr_t)b | (uintptr_t)d | 256;
    int l = 0;
    while (!(x & 1)) {
        x >>= 1;
        l++;
    }
    return l;
}

static bool cacheable(int n, int k, int t) {
    return n < (1 << 21) && k < (1 << 21) && t < (1 << 15);
}

static uint64_t cache_key(int kind, int align, int n, int k, int t) {
    /* kind 3 bits, alignment (log2, 0..8) 4 bits, n and k 21 bits, t 15 bits (cacheable) */
    return (uint64_t)kind << 61 | (uint64_t)align << 57 | ((uint64_t)n & 0x1fffffu) << 36 |
           ((uint64_t)k & 0x1fffffu) << 15 | ((uint64_t)t & 0x7fffu);
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static algo_entry_t *cache_find(gemm_ctx_t *g, uint64_t key, bool *found) {
    uint64_t h = mix(key);
    for (int probe = 0; probe < 64; probe++) {
        algo_entry_t *e = &g->cache[(h + (uint64_t)probe) & (CACHE_SLOTS - 1)];
        if (e->key == key) {
            *found = true;
            return e;
        }
        if (e->key == 0) {
            *found = false;
            return e;
        }
    }
    *found = false;
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Descriptors (initialized in place: nothing is allocated per call)

typedef struct problem {
    cublasLtMatmulDescOpaque_t desc;
    cublasLtMatrixLayoutOpaque_t a, b, d;
} problem_t;

static int set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v,
                    size_t size, err_t *err) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, v, size), err);
    return 0;
}

/* TN: A = W ([n][k] row-major = column-major k x n, transposed), B = x (column-major k x t),
 * D = y (column-major n x t = row-major [t][n]). */
static int describe(problem_t *p, cudaDataType_t ab, cudaDataType_t dt, int n, int k, int t,
                    err_t *err) {
    cublasLtMatmulDesc_t d = (cublasLtMatmulDesc_t)&p->desc;
    CUBLAS_CHECK(cublasLtMatmulDescInit(d, CUBLAS_COMPUTE_32F, CUDA_R_32F), err);
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (set_attr(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta, err) < 0 ||
        set_attr(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb, err) < 0)
        return -1;
    CUBLAS_CHECK(
        cublasLtMatrixLayoutInit((cublasLtMatrixLayout_t)&p->a, ab, (uint64_t)k, (uint64_t)n, k),
        err);
    CUBLAS_CHECK(
        cublasLtMatrixLayoutInit((cublasLtMatrixLayout_t)&p->b, ab, (uint64_t)k, (uint64_t)t, k),
        err);
    CUBLAS_CHECK(
        cublasLtMatrixLayoutInit((cublasLtMatrixLayout_t)&p->d, dt, (uint64_t)n, (uint64_t)t, n),
        err);
    return 0;
}

/* Asks the heuristic for up to CANDIDATES algorithms of the problem at operand alignment
 * 2^align into e (n_algo 0 when it has none). */
static int ask(gemm_ctx_t *g, problem_t *p, int align, algo_entry_t *e, err_t *err) {
    cublasLtMatmulPreferenceOpaque_t pref_s;
    cublasLtMatmulPreference_t pref = (cublasLtMatmulPreference_t)&pref_s;
    CUBLAS_CHECK(cublasLtMatmulPreferenceInit(pref), err);
    uint64_t ws = g->workspace_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
                     pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                 err);
    uint32_t bytes = 1u << align;
    const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (cublasLtMatmulPreferenceAttributes_t a : aligns)
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, a, &bytes, sizeof bytes), err);
    cublasLtMatmulHeuristicResult_t res[HEURISTICS];
    memset(res, 0, sizeof res);
    int returned = 0;
    g->queries++;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
        g->lt, (cublasLtMatmulDesc_t)&p->desc, (cublasLtMatrixLayout_t)&p->a,
        (cublasLtMatrixLayout_t)&p->b, (cublasLtMatrixLayout_t)&p->d, (cublasLtMatrixLayout_t)&p->d,
        pref, HEURISTICS, res, &returned);
    e->n_algo = 0;
    for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < returned && e->n_algo < CANDIDATES; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= g->workspace_bytes)
            e->algo[e->n_algo++] = res[i].algo;
    return 0;
}

/* The problem's candidates (kind, n, k, padded t, operands at 2^align), from the cache or the
 * heuristic; NULL with the message in err when it has none at this alignment or any lower one
 * (an algorithm for less aligned operands serves more aligned ones). The entry is the cache's,
 * or *tmp when the problem is too large to cache. */
static algo_entry_t *pick_algo(gemm_ctx_t *g, problem_t *p, int kind, int n, int k, int t,
                               int align, algo_entry_t *tmp, err_t *err) {
    bool found = false;
    algo_entry_t *e =
        cacheable(n, k, t) ? cache_find(g, cache_key(kind, align, n, k, t), &found) : NULL;
    if (!found) {
        algo_entry_t *into = e ? e : tmp;
        if (ask(g, p, align, into, err) < 0) return NULL;
        if (e) e->key = cache_key(kind, align, n, k, t);
        e = into;
    }
    for (int a = align - 1; e->n_algo == 0 && a >= 0 && cacheable(n, k, t); a--) {
        algo_entry_t *lower = cache_find(g, cache_key(kind, a, n, k, t), &found);
        if (found && lower->n_algo > 0) return lower;
    }
    if (e->n_algo > 0) return e;
    err_set(err,
            "cuBLASLt has no %s GEMM algorithm for N=%d K=%d T=%d (operands %d-byte aligned)%s",
            kind <= KIND_FP8_F32 ? "FP8 block-scaled (BLK128x128 x VEC128)" : "BF16", n, k, t,
            1 << align,
            kind <= KIND_FP8_F32 ? ": this needs cuBLAS >= 12.9 on an sm_90 (Hopper) GPU" : "");
    return NULL;
}

/* Runs the product with the first candidate that works, moving it to the front when it was not
 * (a candidate the heuristic offered may still fail to launch: the next one is tried). */
static int run(gemm_ctx_t *g, problem_t *p, algo_entry_t *e, const void *w, const void *x, void *y,
               err_t *err) {
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t s = CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < e->n_algo; i++) {
        s = cublasLtMatmul(g->lt, (cublasLtMatmulDesc_t)&p->desc, &alpha, w,
                           (cublasLtMatrixLayout_t)&p->a, x, (cublasLtMatrixLayout_t)&p->b, &beta,
                           y, (cublasLtMatrixLayout_t)&p->d, y, (cublasLtMatrixLayout_t)&p->d,
                           &e->algo[i], g->workspace, g->workspace_bytes, g->stream);
        if (s == CUBLAS_STATUS_SUCCESS) {
            if (i > 0) {
                cublasLtMatmulAlgo_t a = e->algo[i];
                memmove(&e->algo[1], &e->algo[0], (size_t)i * sizeof a);
                e->algo[0] = a;
            }
            return 0;
        }
        g->retries++;
    }
    return err_set(err, "cublasLtMatmul: every one of %d algorithms failed (last: %s)", e->n_algo,
                   cublasLtGetStatusString(s));
}

// ---------------------------------------------------------------------------------------------
// Entry points

extern "C" bool gemm_fp8_shape_ok(int n, int k, char *why, size_t why_size) {
    const char *bad = n < 16 || k < 16             ? "N and K must be at least 16"
                      : n % 16 != 0 || k % 16 != 0 ? "N and K must be multiples of 16 (16-byte "
                                                     "aligned FP8 rows, cuBLAS Tensor Core rules)"
                                                   : NULL;
    if (bad && why) snprintf(why, why_size, "FP8 GEMM N=%d K=%d: %s", n, k, bad);
    return bad == NULL;
}

extern "C" int gemm_create(cudaStream_t stream, size_t workspace_bytes, gemm_ctx_t **out,
                           err_t *err) {
    *out = NULL;
    gemm_ctx_t *g = (gemm_ctx_t *)calloc(1, sizeof *g);
    if (!g) return err_set(err, "gemm: out of memory");
    g->cache = (algo_entry_t *)calloc(CACHE_SLOTS, sizeof *g->cache);
    if (!g->cache) {
        free(g);
        return err_set(err, "gemm: out of memory");
    }
    g->stream = stream;
    cublasStatus_t s = cublasLtCreate(&g->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(g->cache);
        free(g);
        return err_set(err, "%s:%d: cublasLtCreate: %s", __FILE__, __LINE__,
                       cublasLtGetStatusString(s));
    }
    if (workspace_bytes) {
        cudaError_t e = cudaMalloc(&g->workspace, workspace_bytes);
        if (e != cudaSuccess) {
            gemm_destroy(g);
            return err_set(err, "%s:%d: cudaMalloc(GEMM workspace, %zu MiB): %s", __FILE__,
                           __LINE__, workspace_bytes >> 20, cudaGetErrorString(e));
        }
    }
    g->workspace_bytes = workspace_bytes;
    *out = g;
    return 0;
}

extern "C" void gemm_destroy(gemm_ctx_t *g) {
    if (!g) return;
    if (g->workspace) cudaFree(g->workspace);
    if (g->conv) cudaFree(g->conv);
    if (g->lt) cublasLtDestroy(g->lt);
    free(g->cache);
    free(g);
}

/* The FP8 block-scaled problem: scale modes and pointers on top of describe(). */
static int describe_fp8(problem_t *p, int n, int k, int tp, const float *ws, const float *xs,
                        bool y_f32, err_t *err) {
    char why[160];
    if (!gemm_fp8_shape_ok(n, k, why, sizeof why)) return err_set(err, "%s", why);
    if (describe(p, CUDA_R_8F_E4M3, y_f32 ? CUDA_R_32F : CUDA_R_16BF, n, k, tp, err) < 0) return -1;
    cublasLtMatmulDesc_t d = (cublasLtMatmulDesc_t)&p->desc;
    int32_t amode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    int32_t bmode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    if (set_attr(d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &amode, sizeof amode, err) < 0 ||
        set_attr(d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bmode, sizeof bmode, err) < 0 ||
        set_attr(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws, sizeof ws, err) < 0 ||
        set_attr(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof xs, err) < 0)
        return -1;
    return 0;
}

/* y[i] = f32(x[i]): a via_bf16 product's output. */
__global__ void bf16_to_f32_kernel(const __nv_bfloat16 *__restrict__ x, float *__restrict__ y,
                                   int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (i < n) y[i] = __bfloat162float(x[i]);
}

/* The FP8 product's candidates for y_f32 output, or, when it has none, those of BF16 output
 * (*via_bf16 set: the caller converts); NULL with the message in err when neither has one. */
static algo_entry_t *pick_fp8(gemm_ctx_t *g, problem_t *p, const gemm_w8_t *w, const float *xs,
                              int tp, bool y_f32, int align, algo_entry_t *tmp, bool *via_bf16,
                              err_t *err) {
    *via_bf16 = false;
    if (describe_fp8(p, w->n, w->k, tp, w->scale, xs, y_f32, err) < 0) return NULL;
    algo_entry_t *e =
        pick_algo(g, p, y_f32 ? KIND_FP8_F32 : KIND_FP8, w->n, w->k, tp, align, tmp, err);
    if (e || !y_f32) return e;
    err_t why = *err;
    if (describe_fp8(p, w->n, w->k, tp, w->scale, xs, false, err) < 0) return NULL;
    e = pick_algo(g, p, KIND_FP8, w->n, w->k, tp, align, tmp, err);
    if (!e) {
        *err = why; /* the f32 problem's message */
        return NULL;
    }
    *via_bf16 = true;
    return e;
}

extern "C" int gemm_probe(gemm_ctx_t *g, bool fp8, int n, int k, int t_max, bool y_f32,
                          int align_log2, int *via_bf16, err_t *err) {
    *via_bf16 = 0;
    char why[160];
    if (fp8 && !gemm_fp8_shape_ok(n, k, why, sizeof why)) return err_set(err, "%s", why);
    if (align_log2 < 0 || align_log2 > 8) align_log2 = 8;
    /* the heuristic never dereferences the scale pointers; non-NULL says "scaled" */
    const float *dummy = (const float *)g->workspace;
    const gemm_w8_t w8 = {NULL, dummy, n, k};
    size_t conv_need = 0;
    for (int t = fp8 ? 4 : 1; t <= (fp8 ? gemm_pad_t(t_max) : t_max); t += fp8 ? 4 : 1) {
        problem_t p;
        algo_entry_t tmp, *e;
        bool via = false;
        if (fp8) {
            e = pick_fp8(g, &p, &w8, dummy, t, y_f32, align_log2, &tmp, &via, err);
        } else {
            if (describe(&p, CUDA_R_16BF, y_f32 ? CUDA_R_32F : CUDA_R_16BF, n, k, t, err) < 0)
                return -1;
            e = pick_algo(g, &p, y_f32 ? KIND_BF16_F32 : KIND_BF16, n, k, t, align_log2, &tmp, err);
        }
        if (!e) return -1;
        if (via) {
            (*via_bf16)++;
            if ((size_t)n * (size_t)t > conv_need) conv_need = (size_t)n * (size_t)t;
        }
    }
    g->via_bf16 += *via_bf16;
    if (conv_need > g->conv_cap) {
        if (g->conv) cudaFree(g->conv);
        g->conv = NULL;
        g->conv_cap = 0;
        CUDA_CHECK(cudaMalloc((void **)&g->conv, conv_need * 2), err);
        g->conv_cap = conv_need;
    }
    return 0;
}

extern "C" int gemm_fp8(gemm_ctx_t *g, const gemm_w8_t *w, const uint8_t *x, const float *xs, int t,
                        void *y, bool y_f32, err_t *err) {
    if (t <= 0) return 0;
    int tp = gemm_pad_t(t);
    problem_t p;
    algo_entry_t tmp;
    bool via;
    algo_entry_t *e = pick_fp8(g, &p, w, xs, tp, y_f32, align_log2(w->data, x, y), &tmp, &via, err);
    if (!e) return -1;
    if (!via) return run(g, &p, e, w->data, x, y, err);
    const int64_t n = (int64_t)tp * w->n;
    if ((size_t)n > g->conv_cap)
        return err_set(err,
                       "gemm: FP8 N=%d K=%d T=%d takes BF16 output here, beyond the %zu "
                       "elements gemm_probe prepared",
                       w->n, w->k, tp, g->conv_cap);
    if (run(g, &p, e, w->data, x, g->conv, err) < 0) return -1;
    OPS_LAUNCH(bf16_to_f32_kernel, dim3((unsigned)((n + 255) / 256)), 256, 0, g->stream,
               (const __nv_bfloat16 *)g->conv, (float *)y, n);
    CUDA_CHECK(cudaGetLastError(), err);
    return 0;
}

extern "C" int gemm_bf16(gemm_ctx_t *g, const gemm_w16_t *w, const uint16_t *x, int t, void *y,
                         bool y_f32, err_t *err) {
    if (t <= 0) return 0;
    problem_t p;
    if (describe(&p, CUDA_R_16BF, y_f32 ? CUDA_R_32F : CUDA_R_16BF, w->n, w->k, t, err) < 0)
        return -1;
    algo_entry_t tmp, *e = pick_algo(g, &p, y_f32 ? KIND_BF16_F32 : KIND_BF16, w->n, w->k, t,
                                     align_log2(w->data, x, y), &tmp, err);
    return e ? run(g, &p, e, w->data, x, y, err) : -1;
}

extern "C" void gemm_stats(const gemm_ctx_t *g, gemm_stats_t *out) {
    *out = gemm_stats_t{g->queries, g->retries, g->via_bf16};
}

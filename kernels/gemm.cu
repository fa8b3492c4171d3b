#include "cb_engine.h"
#include "gemm.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_check.h"

// ---------------------------------------------------------------------------------------------
// Algorithm cache: open addressing over (kind, n, k, padded t). Sized so that every padded T up
// to 16384 tokens for a dozen shapes fits; a full table still works, it just asks again.

enum { KIND_FP8 = 1, KIND_FP8_F32 = 2, KIND_BF16 = 3, KIND_BF16_F32 = 4 };

#define CACHE_SLOTS 32768

typedef struct algo_entry {
    uint64_t key; /* 0 = empty */
    cublasLtMatmulAlgo_t algo;
} algo_entry_t;

struct gemm_ctx {
    cublasLtHandle_t lt;
    cudaStream_t stream;
    void *workspace; /* device, workspace_bytes, 256-byte aligned (cudaMalloc) */
    size_t workspace_bytes;
    algo_entry_t *cache; /* [CACHE_SLOTS] host */
    int queries;
};

static uint64_t cache_key(int kind, int n, int k, int t) {
    /* n, k < 2^23 and t < 2^14 (pick_algo does not cache larger ones); the kind in 3 bits */
    return (uint64_t)kind << 60 | ((uint64_t)n & 0x7fffffu) << 37 |
           ((uint64_t)k & 0x7fffffu) << 14 | ((uint64_t)t & 0x3fffu);
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

/* The cached algorithm for the problem, asking the heuristic on a miss. */
static int pick_algo(gemm_ctx_t *g, problem_t *p, int kind, int n, int k, int t,
                     cublasLtMatmulAlgo_t *algo, err_t *err) {
    uint64_t key = cache_key(kind, n, k, t);
    bool found = false;
    bool cacheable = t <= 0x3fff && n <= 0x7fffff && k <= 0x7fffff;
    algo_entry_t *e = cacheable ? cache_find(g, key, &found) : NULL;
    if (found) {
        *algo = e->algo;
        return 0;
    }
    cublasLtMatmulPreferenceOpaque_t pref_s;
    cublasLtMatmulPreference_t pref = (cublasLtMatmulPreference_t)&pref_s;
    CUBLAS_CHECK(cublasLtMatmulPreferenceInit(pref), err);
    uint64_t ws = g->workspace_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
                     pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                 err);
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    res.state = CUBLAS_STATUS_NOT_SUPPORTED; /* when no result comes back */
    int returned = 0;
    g->queries++;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
        g->lt, (cublasLtMatmulDesc_t)&p->desc, (cublasLtMatrixLayout_t)&p->a,
        (cublasLtMatrixLayout_t)&p->b, (cublasLtMatrixLayout_t)&p->d, (cublasLtMatrixLayout_t)&p->d,
        pref, 1, &res, &returned);
    if (s != CUBLAS_STATUS_SUCCESS || returned < 1 || res.state != CUBLAS_STATUS_SUCCESS)
        return err_set(err, "cuBLASLt has no %s GEMM algorithm for N=%d K=%d T=%d (%s)%s",
                       kind <= KIND_FP8_F32 ? "FP8 block-scaled (BLK128x128 x VEC128)" : "BF16", n,
                       k, t, cublasLtGetStatusString(s != CUBLAS_STATUS_SUCCESS ? s : res.state),
                       kind <= KIND_FP8_F32 ? ": this needs cuBLAS >= 12.9 on an sm_90 (Hopper) GPU"
                                            : "");
    *algo = res.algo;
    if (e) {
        e->key = key;
        e->algo = res.algo;
    }
    return 0;
}

static int run(gemm_ctx_t *g, problem_t *p, const cublasLtMatmulAlgo_t *algo, const void *w,
               const void *x, void *y, err_t *err) {
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(g->lt, (cublasLtMatmulDesc_t)&p->desc, &alpha, w,
                                (cublasLtMatrixLayout_t)&p->a, x, (cublasLtMatrixLayout_t)&p->b,
                                &beta, y, (cublasLtMatrixLayout_t)&p->d, y,
                                (cublasLtMatrixLayout_t)&p->d, algo, g->workspace,
                                g->workspace_bytes, g->stream),
                 err);
    return 0;
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

extern "C" int gemm_fp8_check(gemm_ctx_t *g, int n, int k, int t, bool y_f32, err_t *err) {
    int tp = gemm_pad_t(t > 0 ? t : 1);
    problem_t p;
    /* the heuristic never dereferences the scale pointers; non-NULL says "scaled" */
    const float *dummy = (const float *)g->workspace;
    if (describe_fp8(&p, n, k, tp, dummy, dummy, y_f32, err) < 0) return -1;
    cublasLtMatmulAlgo_t algo;
    return pick_algo(g, &p, y_f32 ? KIND_FP8_F32 : KIND_FP8, n, k, tp, &algo, err);
}

extern "C" int gemm_fp8(gemm_ctx_t *g, const gemm_w8_t *w, const uint8_t *x, const float *xs, int t,
                        void *y, bool y_f32, err_t *err) {
    if (t <= 0) return 0;
    int tp = gemm_pad_t(t);
    problem_t p;
    if (describe_fp8(&p, w->n, w->k, tp, w->scale, xs, y_f32, err) < 0) return -1;
    cublasLtMatmulAlgo_t algo;
    if (pick_algo(g, &p, y_f32 ? KIND_FP8_F32 : KIND_FP8, w->n, w->k, tp, &algo, err) < 0)
        return -1;
    return run(g, &p, &algo, w->data, x, y, err);
}

extern "C" int gemm_bf16(gemm_ctx_t *g, const gemm_w16_t *w, const uint16_t *x, int t, void *y,
                         bool y_f32, err_t *err) {
    if (t <= 0) return 0;
    problem_t p;
    if (describe(&p, CUDA_R_16BF, y_f32 ? CUDA_R_32F : CUDA_R_16BF, w->n, w->k, t, err) < 0)
        return -1;
    cublasLtMatmulAlgo_t algo;
    if (pick_algo(g, &p, y_f32 ? KIND_BF16_F32 : KIND_BF16, w->n, w->k, t, &algo, err) < 0)
        return -1;
    return run(g, &p, &algo, w->data, x, y, err);
}

extern "C" int gemm_algo_queries(const gemm_ctx_t *g) {
    return g->queries;
}

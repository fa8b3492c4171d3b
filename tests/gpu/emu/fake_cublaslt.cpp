/* A scriptable cuBLASLt for test_gemm_select (fake_cublaslt.h): the descriptor and preference calls
 * kernels/gemm.cu makes, a heuristic that offers what the test scripts, and a matmul that
 * computes the product on the host (FP8 block-scaled with BLK128x128 weight scales and VEC128
 * activation scales, or BF16; output BF16 or F32), as the real library would on a device. */
#include "cb_engine.h" /* first: C linkage for the engine headers */
#include "fake_cublaslt.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include <cublasLt.h>

#include "dtype.h"
#include "gemm.h"

fake_lt_t fake_lt;

namespace {

struct Desc {
    int32_t transa, transb, amode, bmode;
    const float *ascale, *bscale;
};
struct Layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};
struct Pref {
    uint64_t max_ws;
    uint32_t align[4];
};
static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t), "desc fits");
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout fits");
static_assert(sizeof(Pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "pref fits");

float value(cudaDataType type, const void *p, size_t i) {
    if (type == CUDA_R_8F_E4M3) return dtype_e4m3_to_f32(((const uint8_t *)p)[i]);
    if (type == CUDA_R_16BF) return dtype_bf16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

} // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = (cublasLtHandle_t)&fake_lt;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t) {
    return CUBLAS_STATUS_SUCCESS;
}
const char *cublasLtGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "success" : "fake failure";
}
cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t d, size_t, cublasComputeType_t,
                                               cudaDataType_t) {
    memset(d, 0, sizeof *d);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t size) {
    Desc *x = (Desc *)d;
    switch (a) {
        case CUBLASLT_MATMUL_DESC_TRANSA:
            memcpy(&x->transa, buf, size);
            break;
        case CUBLASLT_MATMUL_DESC_TRANSB:
            memcpy(&x->transb, buf, size);
            break;
        case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
            memcpy(&x->amode, buf, size);
            break;
        case CUBLASLT_MATMUL_DESC_B_SCALE_MODE:
            memcpy(&x->bmode, buf, size);
            break;
        case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
            memcpy(&x->ascale, buf, size);
            break;
        case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
            memcpy(&x->bscale, buf, size);
            break;
        default:
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t l, size_t,
                                                 cudaDataType type, uint64_t rows, uint64_t cols,
                                                 int64_t ld) {
    *(Layout *)l = Layout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t p, size_t) {
    memset(p, 0, sizeof *p);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *buf, size_t size) {
    Pref *x = (Pref *)p;
    switch (a) {
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
            memcpy(&x->max_ws, buf, size);
            break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
            memcpy(&x->align[0], buf, size);
            break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
            memcpy(&x->align[1], buf, size);
            break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
            memcpy(&x->align[2], buf, size);
            break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
            memcpy(&x->align[3], buf, size);
            break;
        default:
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t *res, int *returned) {
    const Desc *x = (const Desc *)desc;
    const Layout *lb = (const Layout *)b, *ld = (const Layout *)d;
    const Pref *p = (const Pref *)pref;
    fake_lt.heuristic_calls++;
    fake_lt.last_align = p->align[3];
    for (int i = 1; i < 4; i++)
        if (p->align[i] != p->align[0]) fake_lt.mixed_align++;
    const int t = (int)lb->cols;
    const bool fp8 = x->amode != 0, f32_out = ld->type == CUDA_R_32F;
    *returned = 0;
    bool none = (t == fake_lt.no_algo_t) || (fp8 && f32_out && t == fake_lt.no_f32_fp8_t) ||
                (fake_lt.min_align_offered && p->align[3] >= fake_lt.min_align_offered);
    if (none) return CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < fake_lt.n_algos && i < requested; i++) {
        memset(&res[i], 0, sizeof res[i]);
        res[i].algo.data[0] = (uint64_t)i; /* the candidate's rank */
        res[i].workspaceSize = i == fake_lt.huge_ws_algo ? p->max_ws + 1 : 0;
        res[i].state = CUBLAS_STATUS_SUCCESS;
        (*returned)++;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t adesc, const void *B,
                              cublasLtMatrixLayout_t bdesc, const void *, const void *,
                              cublasLtMatrixLayout_t, void *D, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t *algo, void *, size_t, cudaStream_t) {
    fake_lt.matmul_calls++;
    if ((int)algo->data[0] == fake_lt.failing_algo) return CUBLAS_STATUS_EXECUTION_FAILED;
    fake_lt.last_algo = (int)algo->data[0];
    const Desc *x = (const Desc *)desc;
    const Layout *la = (const Layout *)adesc, *lb = (const Layout *)bdesc,
                 *ld = (const Layout *)ddesc;
    /* TN: A column-major k x n (W row-major [n][k]), B k x t (x [t][k]), D n x t (y [t][n]) */
    const int k = (int)la->rows, n = (int)la->cols, t = (int)lb->cols;
    const bool fp8 = x->amode != 0;
    const int ws_ld = gemm_w8_scale_ld(k);
    for (int r = 0; r < t; r++)
        for (int c = 0; c < n; c++) {
            float acc = 0.0f;
            for (int kb = 0; kb * 128 < k; kb++) {
                float part = 0.0f;
                for (int i = kb * 128; i < k && i < (kb + 1) * 128; i++)
                    part += value(la->type, A, (size_t)c * k + i) *
                            value(lb->type, B, (size_t)r * k + i);
                acc += fp8 ? part * x->ascale[(size_t)(c / 128) * ws_ld + kb] *
                                 x->bscale[(size_t)kb * t + r]
                           : part;
            }
            acc *= *(const float *)alpha;
            if (ld->type == CUDA_R_32F)
                ((float *)D)[(size_t)r * n + c] = acc;
            else
                ((uint16_t *)D)[(size_t)r * n + c] = dtype_f32_to_bf16(acc);
        }
    return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */

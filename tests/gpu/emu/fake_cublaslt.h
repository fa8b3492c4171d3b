/*
 * fake_cublaslt: the cuBLASLt calls of kernels/gemm.cu, scripted, so that gemm.cu's algorithm
 * choice (heuristics over every size, candidates and retries, alignment preferences, the FP8
 * with BF16 output fallback) is tested on machines without a GPU (test_gemm_select.cpp). The
 * matmul computes the product on the host from the descriptors gemm.cu set up, like the real one.
 */
#ifndef TACHYON_FAKE_CUBLASLT_H
#define TACHYON_FAKE_CUBLASLT_H

#include <stdint.h>

typedef struct fake_lt {
    /* the script */
    int n_algos;                /* candidates the heuristic offers (0: none anywhere) */
    int no_algo_t;              /* a token count with no algorithm of any kind (0: none such) */
    int no_f32_fp8_t;           /* a token count without an FP8 algorithm of F32 output */
    int failing_algo;           /* the candidate rank whose launch fails (-1: none) */
    int huge_ws_algo;           /* the candidate rank that wants more workspace than allowed (-1) */
    uint32_t min_align_offered; /* nothing offered at this operand alignment or above (0: off) */
    /* what was seen */
    int heuristic_calls, matmul_calls, last_algo, mixed_align;
    uint32_t last_align; /* the D alignment preference of the last heuristic call */
} fake_lt_t;

extern fake_lt_t fake_lt;

#endif

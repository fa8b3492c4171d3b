/* The warp-level tensor-core instructions of kernels/mma.cuh against scalar references written
 * from the PTX ISA's definitions ("Matrix Fragments for mma.m16n8k16" with floating point
 * types, "ldmatrix", "cp.async"): every lane builds its fragments element by element with the
 * ISA's formulas (groupID = lane >> 2, threadID_in_group = lane % 4), and the host checks each
 * lane's registers and results. On the GPU this checks the hardware against the formulas; in
 * the host emulation (tests/gpu/emu, test_mma_emu) it checks the emulator's per-lane semantics,
 * which the attention and MoE kernel tests rely on. Fresh random inputs every run (the seed is
 * printed; TACHYON_TEST_SEED=n replays one).
 *
 * Tolerances: ldmatrix and cp.async move bits: exact. mma m16n8k16 bf16 -> f32: the products
 * of bf16 values are exact in f32, the hardware's sum of 16 of them and the accumulator is
 * within a few f32 roundings: |d - ref| <= 2^-20 (sum |a b| + |c|), ref in double.
 * Exit 77 without a Hopper GPU. */
#include "cb_engine.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_backend.h"
#include "gpu_check.h"
#include "kernel_test.h"
#include "mma.cuh"
#include "ops_common.cuh"

/* ---- mma.m16n8k16.row.col.f32.bf16.bf16.f32 ----------------------------------------------- */

/* A [16][16], B [16][8] (k x n), C / D [16][8], row-major; one warp. */
__global__ void mma_kernel(const uint16_t *A, const uint16_t *B, const float *C, float *D) {
    const int lane = threadIdx.x & 31, groupID = lane >> 2, tig = lane & 3;
    uint16_t a[8], b[4];
    for (int i = 0; i < 8; i++) { /* a_i: row groupID (+8 for i in 2,3,6,7), col +8 for i >= 4 */
        const int row = (i < 2 || (i >= 4 && i < 6)) ? groupID : groupID + 8;
        const int col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
        a[i] = A[row * 16 + col];
    }
    for (int i = 0; i < 4; i++) { /* b_i: row (k) tig * 2 + (i & 1) (+8 for i >= 2), col groupID */
        const int row = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0);
        b[i] = B[row * 8 + groupID];
    }
    uint32_t ar[4], br[2];
    for (int j = 0; j < 4; j++) /* register j: elements 2j (low half) and 2j + 1 */
        ar[j] = (uint32_t)a[2 * j] | (uint32_t)a[2 * j + 1] << 16;
    for (int j = 0; j < 2; j++)
        br[j] = (uint32_t)b[2 * j] | (uint32_t)b[2 * j + 1] << 16;
    float d[4];
    for (int i = 0; i < 4; i++) { /* c_i: row groupID (+8 for i >= 2), col tig * 2 + (i & 1) */
        const int row = groupID + (i >= 2 ? 8 : 0), col = tig * 2 + (i & 1);
        d[i] = C[row * 8 + col];
    }
    mma_bf16_16x8x16(d, ar, br);
    for (int i = 0; i < 4; i++) {
        const int row = groupID + (i >= 2 ? 8 : 0), col = tig * 2 + (i & 1);
        D[row * 8 + col] = d[i];
    }
}

static void test_mma_bf16(void) {
    for (int rep = 0; rep < 4; rep++) {
        std::vector<uint16_t> ab, bb;
        std::vector<float> af, bf_, c(16 * 8);
        rand_bf16(16 * 16, 4.0f, ab, af);
        rand_bf16(16 * 8, 4.0f, bb, bf_);
        for (auto &x : c)
            x = sym(8.0f);
        uint16_t *dA = dev<uint16_t>(ab.size()), *dB = dev<uint16_t>(bb.size());
        float *dC = dev<float>(c.size()), *dD = dev<float>(c.size());
        put(dA, ab);
        put(dB, bb);
        put(dC, c);
        OPS_LAUNCH(mma_kernel, 1, 32, 0, 0, dA, dB, dC, dD);
        CK(cudaDeviceSynchronize());
        std::vector<float> d = get(dD, c.size());
        int bad = 0;
        double worst = 0.0;
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                double ref = c[m * 8 + n], mag = fabs(ref);
                for (int k = 0; k < 16; k++) {
                    ref += (double)af[m * 16 + k] * bf_[k * 8 + n];
                    mag += fabs((double)af[m * 16 + k] * bf_[k * 8 + n]);
                }
                const double e = fabs(d[m * 8 + n] - ref);
                if (!(e <= 0x1p-20 * mag)) bad++;
                worst = e > worst ? e : worst;
            }
        if (bad)
            fail("%-60s FAIL: %d of 128 outside 2^-20 sum |ab|, max err %g\n", "mma m16n8k16 bf16",
                 bad, worst);
        else if (rep == 0)
            printf("%-60s ok (max abs err %.3g)\n", "mma m16n8k16 bf16", worst);
        cudaFree(dA);
        cudaFree(dB);
        cudaFree(dC);
        cudaFree(dD);
    }
}

/* ---- ldmatrix.m8n8.x4{.trans}.b16 -------------------------------------------------------- */

constexpr int kRowWords = 12; /* a shared row: 8 elements + 8 bytes of padding, 16-byte aligned */

/* Matrix i, row r lives in shared row perm[8 i + r] (rows scattered, so the per-lane addresses
 * matter); element (i, r, c) = src[(8 i + r) * 8 + c]. Lane l gives the address of row l % 8 of
 * matrix l / 8; out[l * 4 + j] = register j of lane l. */
__global__ void ldmatrix_kernel(const uint16_t *src, const int32_t *perm, bool trans,
                                uint32_t *out) {
    __shared__ __align__(16) uint32_t rows[32][kRowWords];
    const int lane = threadIdx.x & 31;
    for (int c = 0; c < 4; c++) {
        const int e = lane * 8 + 2 * c;
        rows[perm[lane]][c] = (uint32_t)src[e] | (uint32_t)src[e + 1] << 16;
    }
    __syncwarp();
    uint32_t r[4];
    if (trans)
        ldmatrix_x4_trans(r, rows[perm[lane]]);
    else
        ldmatrix_x4(r, rows[perm[lane]]);
    for (int j = 0; j < 4; j++)
        out[lane * 4 + j] = r[j];
}

static void test_ldmatrix(void) {
    std::vector<uint16_t> src(32 * 8);
    for (auto &x : src)
        x = (uint16_t)irand(65536);
    std::vector<int32_t> perm(32);
    for (int i = 0; i < 32; i++)
        perm[i] = i;
    for (int i = 31; i > 0; i--) {
        const int j = irand(i + 1), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    uint16_t *dS = dev<uint16_t>(src.size());
    int32_t *dP = dev<int32_t>(32);
    uint32_t *dO = dev<uint32_t>(128);
    put(dS, src);
    put(dP, perm);
    for (int trans = 0; trans < 2; trans++) {
        OPS_LAUNCH(ldmatrix_kernel, 1, 32, 0, 0, dS, dP, trans != 0, dO);
        CK(cudaDeviceSynchronize());
        std::vector<uint32_t> o = get(dO, 128);
        int bad = 0;
        for (int lane = 0; lane < 32; lane++) {
            const int groupID = lane >> 2, tig = lane & 3;
            for (int i = 0; i < 4; i++) {
                /* Non-transposed: row groupID, columns 2 tig, 2 tig + 1 of matrix i; transposed:
                 * rows 2 tig, 2 tig + 1 of column groupID. */
                const int r0 = trans ? 2 * tig : groupID, c0 = trans ? groupID : 2 * tig;
                const int r1 = trans ? 2 * tig + 1 : groupID, c1 = trans ? groupID : 2 * tig + 1;
                const uint32_t want = (uint32_t)src[(8 * i + r0) * 8 + c0] |
                                      (uint32_t)src[(8 * i + r1) * 8 + c1] << 16;
                if (o[lane * 4 + i] != want) bad++;
            }
        }
        const char *name = trans ? "ldmatrix m8n8.x4.trans.b16" : "ldmatrix m8n8.x4.b16";
        if (bad)
            fail("%-60s FAIL: %d of 128 registers differ\n", name, bad);
        else
            printf("%-60s ok\n", name);
    }
    cudaFree(dS);
    cudaFree(dP);
    cudaFree(dO);
}

/* ---- cp.async.cg 16 bytes, groups --------------------------------------------------------- */

/* 64 threads; thread t copies chunk t of src into slot 2 t (group 0) and, zero-filled when
 * (t % 3 == 0), chunk 63 - t into slot 2 t + 1 (group 1); slot contents go to out after the
 * waits and a barrier, each thread writing another thread's slots. */
__global__ void cp_async_kernel(const uint4 *src, uint4 *out) {
    __shared__ __align__(16) uint4 slots[128];
    const int t = threadIdx.x;
    cp_async_16(&slots[2 * t], &src[t], true);
    cp_async_commit();
    cp_async_16(&slots[2 * t + 1], &src[63 - t], t % 3 != 0);
    cp_async_commit();
    cp_async_wait<1>(); /* group 0 has landed (group 1 may still be in flight) */
    const uint4 own = slots[2 * t];
    cp_async_wait<0>();
    __syncthreads();
    out[t] = own;
    out[64 + t] = slots[2 * (63 - t) + 1];
    out[128 + t] = slots[2 * (63 - t)];
}

static void test_cp_async(void) {
    std::vector<uint32_t> src(64 * 4);
    for (auto &x : src)
        x = (uint32_t)irand(1 << 30) * 4u + 1u; /* never zero */
    uint4 *dS = dev<uint4>(64), *dO = dev<uint4>(192);
    CK(cudaMemcpy(dS, src.data(), src.size() * 4, cudaMemcpyHostToDevice));
    OPS_LAUNCH(cp_async_kernel, 1, 64, 0, 0, dS, dO);
    CK(cudaDeviceSynchronize());
    std::vector<uint32_t> o(192 * 4);
    CK(cudaMemcpy(o.data(), dO, o.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int t = 0; t < 64; t++) {
        const int u = 63 - t; /* slot 2 u + 1 holds chunk 63 - u = t, or zeros */
        for (int w = 0; w < 4; w++) {
            bad += o[t * 4 + w] != src[t * 4 + w];
            bad += o[(64 + t) * 4 + w] != (u % 3 != 0 ? src[t * 4 + w] : 0u);
            bad += o[(128 + t) * 4 + w] != src[u * 4 + w];
        }
    }
    if (bad)
        fail("%-60s FAIL: %d of 768 words differ\n", "cp.async.cg 16 (groups, zero-fill)", bad);
    else
        printf("%-60s ok\n", "cp.async.cg 16 (groups, zero-fill)");
    cudaFree(dS);
    cudaFree(dO);
}

int main(void) {
    if (!cuda_backend_available()) {
        printf("test_mma: no Hopper GPU, skipped\n");
        return 77;
    }
    const char *env = getenv("TACHYON_TEST_SEED");
    seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    printf("test_mma: seed %llu (TACHYON_TEST_SEED=%llu replays it)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    test_mma_bf16();
    test_ldmatrix();
    test_cp_async();
    printf("test_mma: %d failure%s\n", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}

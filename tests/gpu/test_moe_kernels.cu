/* The MoE kernels of kernels/moe.h against their CPU twins, on fresh random inputs every run (the
 * seed is printed; TACHYON_TEST_SEED=n replays one), each with random routing, skewed routing
 * (every token to one expert) and experts that get no token. Output buffers are poisoned with
 * 0xff bytes (NaN) first, so an element a kernel forgot to write is caught.
 *
 * Tolerances, and why:
 * - rmsnorm_f32: rel 1e-6 (the same f32 operations as the CPU's, the sum of squares in another
 *   order: a few ulps).
 * - router logits: |gpu - ref| <= 1e-5 x sum |x_k w_k| (f32 FMA chains of H terms in k order
 *   against a double reference).
 * - top-k: the ids exactly those of cpu_moe_route on the same logits (ties: lower id), weights
 *   within rel 1e-5 (the softmax's sum in another order).
 * - permutation: exact (counts, segments, tiles, token order within an expert, padding rows).
 * - grouped GEMM: |gpu - ref| <= 2e-5 x sum |a_k w_k| x scales + 1e-30 against a double
 *   reference from the same e4m3 / bf16 inputs (the tensor core sums 32 or 16 products at once
 *   in its own order and precision; f32 promotion per 128 columns); padding rows exactly 0.
 * - combine: exact (the same products and sums in the same order as the CPU's).
 * Exit 77 without a Hopper GPU (the host emulation build runs it anywhere). */
#include "cb_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include <cuda_runtime.h>

extern "C" {
#include "cpu/cpu_moe.h"
}
#include "cuda_backend.h"
#include "gpu_check.h"
#include "kernel_test.h"
#include "moe.h"

/* How tokens pick experts in a case. */
typedef enum { ROUTE_RANDOM, ROUTE_SKEWED, ROUTE_FEW } route_t;
static const char *const route_name[] = {"random", "skewed", "few experts"};

/* ids [T, k], distinct per token: random; skewed (expert E/2 first for every token); few (only
 * the first k + 1 experts ever, most experts get no token). */
static std::vector<int32_t> make_ids(int T, int k, int E, route_t how) {
    std::vector<int32_t> ids((size_t)T * k);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int e;
            bool again;
            do {
                e = how == ROUTE_FEW ? irand(k + 1) : irand(E);
                if (how == ROUTE_SKEWED && j == 0) e = E / 2;
                again = false;
                for (int i = 0; i < j; i++)
                    again |= ids[(size_t)t * k + i] == e;
            } while (again);
            ids[(size_t)t * k + j] = e;
        }
    return ids;
}

/* ---- rmsnorm and router --------------------------------------------------------------------- */

static void test_router(void) {
    const int T = SIZE(77, 19), H = SIZE(1024, 256), E = SIZE(128, 40);
    std::vector<float> h((size_t)T * H), w(H);
    for (auto &v : h)
        v = sym(3.0f);
    for (auto &v : w)
        v = 0.5f + uni();
    float *dh = dev<float>(h.size()), *dw = dev<float>(H), *dx = dev<float>(h.size());
    put(dh, h);
    put(dw, w);
    OPS(moe_rmsnorm_f32(dh, T, H, dw, 1e-6f, dx, 0, ERR));
    std::vector<float> x = get(dx, h.size()), xr(h.size());
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(&h[(size_t)t * H], w.data(), H, 1e-6f, &xr[(size_t)t * H]);
    char what[128];
    snprintf(what, sizeof what, "moe_rmsnorm_f32 T=%d H=%d", T, H);
    close_all(what, x.data(), xr.data(), x.size(), 1e-6, 0.0);

    std::vector<uint16_t> wb;
    std::vector<float> wf;
    rand_bf16((size_t)E * H, 0.05f, wb, wf);
    uint16_t *dwr = dev<uint16_t>(wb.size());
    put(dwr, wb);
    float *dl = dev<float>((size_t)T * E);
    OPS(moe_router(dx, dwr, T, H, E, dl, 0, ERR));
    std::vector<float> got = get(dl, (size_t)T * E), ref(got.size()), tol(got.size());
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) {
            double s = 0, mag = 0;
            for (int c = 0; c < H; c++) {
                double p = (double)x[(size_t)t * H + c] * wf[(size_t)e * H + c];
                s += p;
                mag += fabs(p);
            }
            ref[(size_t)t * E + e] = (float)s;
            tol[(size_t)t * E + e] = (float)(1e-5 * mag);
        }
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); i++)
        bad += !(fabs(got[i] - ref[i]) <= tol[i]);
    if (bad)
        fail("moe_router T=%d H=%d E=%d FAIL: %zu logits off\n", T, H, E, bad);
    else
        printf("%-60s ok\n", "moe_router (f32, k order)");
    CK(cudaFree(dh));
    CK(cudaFree(dw));
    CK(cudaFree(dx));
    CK(cudaFree(dwr));
    CK(cudaFree(dl));
}

/* ---- top-k ---------------------------------------------------------------------------------- */

static void topk_case(int T, int E, int k, bool norm, bool ties) {
    std::vector<float> l((size_t)T * E);
    for (auto &v : l)
        v = ties ? (float)irand(4) : sym(6.0f); /* ties: many equal logits */
    float *dl = dev<float>(l.size()), *dw = dev<float>((size_t)T * k);
    int32_t *di = dev<int32_t>((size_t)T * k);
    put(dl, l);
    OPS(moe_topk(dl, T, E, k, norm, di, dw, 0, ERR));
    std::vector<int32_t> ids = get(di, (size_t)T * k), rid((size_t)k);
    std::vector<float> w = get(dw, (size_t)T * k), rw((size_t)k);
    size_t bad_ids = 0, bad_w = 0;
    for (int t = 0; t < T; t++) {
        cpu_moe_route(&l[(size_t)t * E], E, k, norm, rid.data(), rw.data());
        for (int j = 0; j < k; j++) {
            bad_ids += ids[(size_t)t * k + j] != rid[j];
            bad_w += !(fabs(w[(size_t)t * k + j] - rw[j]) <= 1e-5 * rw[j]);
        }
    }
    char what[128];
    snprintf(what, sizeof what, "moe_topk T=%d E=%d k=%d%s%s", T, E, k, norm ? " norm" : "",
             ties ? " ties" : "");
    if (bad_ids || bad_w)
        fail("%-60s FAIL: %zu ids, %zu weights differ from cpu_moe_route\n", what, bad_ids, bad_w);
    else
        printf("%-60s ok\n", what);
    CK(cudaFree(dl));
    CK(cudaFree(dw));
    CK(cudaFree(di));
}

static void test_topk(void) {
    topk_case(SIZE(301, 37), 8, 2, false, false);
    topk_case(SIZE(301, 37), 128, 8, true, false);
    topk_case(SIZE(301, 37), SIZE(1024, 200), 32, true, false);
    topk_case(SIZE(301, 37), 12, 3, true, true);
}

/* ---- permutation ---------------------------------------------------------------------------- */

/* The device grouping of ids, checked against the host's; returns it on the host. */
typedef struct perm_host {
    std::vector<int32_t> count, offset, tile_expert, tile_row0, row_token, pair_row;
} perm_host_t;

static void copy_perm(const moe_perm_t &p, int T, int k, int E, perm_host_t *h) {
    int tiles = moe_max_tiles(T, k, E), rows = moe_max_rows(T, k, E);
    h->count = get(p.count, (size_t)E);
    h->offset = get(p.offset, (size_t)E + 1);
    h->tile_expert = get(p.tile_expert, (size_t)tiles);
    h->tile_row0 = get(p.tile_row0, (size_t)tiles);
    h->row_token = get(p.row_token, (size_t)rows);
    h->pair_row = get(p.pair_row, (size_t)T * k);
}

/* A routing of T tokens made `how`, grouped on the device by moe_permute: the ids (host and
 * device), the grouping and its host copy. unroute frees the device side. */
typedef struct routed {
    std::vector<int32_t> ids;
    int32_t *di;
    void *buf;
    moe_perm_t p;
    perm_host_t h;
} routed_t;

/* Routed over E_all experts, grouped for this rank's [e0, e0 + E) (expert parallel; e0 0 and
 * E_all = E otherwise). */
static routed_t route_local(int T, int k, int E_all, int e0, int E, route_t how) {
    routed_t r;
    r.ids = make_ids(T, k, E_all, how);
    r.di = dev<int32_t>(r.ids.size());
    put(r.di, r.ids);
    r.buf = dev<uint8_t>(moe_perm_bytes(T, k, E));
    moe_perm_layout(r.buf, T, k, E, &r.p);
    OPS(moe_permute(r.di, T, k, E_all, e0, E, &r.p, NULL, 0, ERR));
    copy_perm(r.p, T, k, E, &r.h);
    return r;
}

static routed_t route(int T, int k, int E, route_t how) {
    return route_local(T, k, E, 0, E, how);
}

static void unroute(routed_t &r) {
    CK(cudaFree(r.di));
    CK(cudaFree(r.buf));
}

/* The grouping of this rank's experts [e0, e0 + E): their pairs in token order, the pairs of
 * other experts at row -1. */
static bool check_perm(const char *what, const std::vector<int32_t> &ids, int T, int k, int e0,
                       int E, const perm_host_t &g) {
    int tiles = moe_max_tiles(T, k, E), rows = moe_max_rows(T, k, E), at = 0;
    std::vector<int32_t> want_token((size_t)rows, -1), want_pair((size_t)T * k, -1);
    std::vector<int32_t> want_expert((size_t)tiles, -1);
    for (int e = 0; e < E; e++) {
        int c = 0;
        if (g.offset[e] != at)
            return fail("%s FAIL: expert %d at %d, want %d\n", what, e, g.offset[e], at), false;
        for (int p = 0; p < T * k; p++)
            if (ids[p] == e0 + e) {
                want_token[(size_t)at + c] = p / k;
                want_pair[p] = at + c;
                c++;
            }
        if (g.count[e] != c)
            return fail("%s FAIL: expert %d count %d, want %d\n", what, e, g.count[e], c), false;
        int padded = (c + MOE_TILE_M - 1) / MOE_TILE_M * MOE_TILE_M;
        for (int r = 0; r < padded; r += MOE_TILE_M)
            want_expert[(size_t)(at + r) / MOE_TILE_M] = e;
        at += padded;
    }
    if (g.offset[E] != at) return fail("%s FAIL: %d rows, want %d\n", what, g.offset[E], at), false;
    for (int i = 0; i < tiles; i++)
        if (g.tile_expert[i] != want_expert[i] || g.tile_row0[i] != i * MOE_TILE_M)
            return fail("%s FAIL: tile %d is (%d, %d)\n", what, i, g.tile_expert[i],
                        g.tile_row0[i]),
                   false;
    if (g.row_token != want_token) return fail("%s FAIL: row tokens differ\n", what), false;
    if (g.pair_row != want_pair) return fail("%s FAIL: pair rows differ\n", what), false;
    return true;
}

/* Experts [e0, e0 + E) of E_all grouped (E_all = E: all of them); the load statistics count
 * every expert's pairs, the other ranks' too. */
static void perm_case(int T, int k, int E_all, int e0, int E, route_t how) {
    std::vector<int32_t> ids = make_ids(T, k, E_all, how);
    int32_t *di = dev<int32_t>(ids.size());
    put(di, ids);
    void *buf = dev<uint8_t>(moe_perm_bytes(T, k, E));
    moe_perm_t p;
    moe_perm_layout(buf, T, k, E, &p);
    unsigned long long *load = dev<unsigned long long>((size_t)E_all);
    CK(cudaMemset(load, 0, (size_t)E_all * sizeof *load));
    OPS(moe_permute(di, T, k, E_all, e0, E, &p, load, 0, ERR));
    OPS(moe_permute(di, T, k, E_all, e0, E, &p, load, 0, ERR)); /* the statistics accumulate */
    perm_host_t h;
    copy_perm(p, T, k, E, &h);
    char what[128];
    snprintf(what, sizeof what, "moe_permute T=%d k=%d experts [%d, %d) of %d %s", T, k, e0, e0 + E,
             E_all, route_name[how]);
    bool ok = check_perm(what, ids, T, k, e0, E, h);
    std::vector<unsigned long long> l = get(load, (size_t)E_all);
    for (int e = 0; ok && e < E_all; e++) {
        unsigned long long want = 0;
        for (int32_t id : ids)
            want += id == e ? 2 : 0;
        if (l[e] != want) {
            fail("%s FAIL: expert %d load %llu, want %llu\n", what, e, l[e], want);
            ok = false;
        }
    }
    if (ok) printf("%-60s ok\n", what);
    CK(cudaFree(di));
    CK(cudaFree(buf));
    CK(cudaFree(load));
}

static void test_permute(void) {
    for (int how = 0; how < 3; how++) {
        perm_case(SIZE(517, 41), 8, 128, 0, 128, (route_t)how);
        perm_case(SIZE(93, 23), 2, 8, 0, 8, (route_t)how);
        /* expert parallel: a rank's range, fewer experts than top-k among them */
        perm_case(SIZE(517, 41), 8, 128, 32, 32, (route_t)how);
        perm_case(SIZE(93, 23), 4, 8, 6, 2, (route_t)how);
    }
    perm_case(1, 8, 128, 0, 128, ROUTE_RANDOM); /* decode: one token */
    perm_case(3, 2, 64, 0, 64, ROUTE_RANDOM);   /* most experts empty */
    perm_case(1, 8, 128, 64, 64, ROUTE_RANDOM); /* maybe none of the rank's */
}

/* ---- grouped GEMM --------------------------------------------------------------------------- */

/* A random block-FP8 weight per expert: e4m3 codes and 128x128 scale_inv. */
static void rand_fp8_weights(int E, int n, int K, std::vector<uint8_t> &q, std::vector<float> &s) {
    q.resize((size_t)E * n * K);
    s.resize((size_t)E * (n / 128) * (K / 128));
    for (auto &v : q)
        v = dtype_f32_to_e4m3(sym(400.0f));
    for (auto &v : s)
        v = 1e-4f * (0.5f + uni());
}

/* One grouped GEMM case: gather mode (rows by token, as gate|up) and direct mode (rows in
 * order, as down) over the same routing, FP8 or BF16. */
static void gemm_case(bool fp8, int T, int k, int E, int N, int K, route_t how) {
    routed_t rt = route(T, k, E, how);
    const moe_perm_t &p = rt.p;
    const perm_host_t &h = rt.h;
    const int rows = moe_max_rows(T, k, E), Tp = (T + 3) & ~3, esize = fp8 ? 1 : 2;

    /* weights */
    std::vector<uint8_t> wq;
    std::vector<float> ws;
    std::vector<uint16_t> wb;
    std::vector<float> wf;
    if (fp8)
        rand_fp8_weights(E, N, K, wq, ws);
    else
        rand_bf16((size_t)E * N * K, 0.05f, wb, wf);
    void *dw = fp8 ? (void *)dev<uint8_t>(wq.size()) : (void *)dev<uint16_t>(wb.size());
    float *dws = fp8 ? dev<float>(ws.size()) : NULL;
    if (fp8) {
        put((uint8_t *)dw, wq);
        put(dws, ws);
    } else {
        put((uint16_t *)dw, wb);
    }
    moe_weights_t w = {dw, dws, E, N, K};
    auto wval = [&](int e, int n, int c) {
        size_t i = ((size_t)e * N + n) * K + c;
        return fp8 ? (double)dtype_e4m3_to_f32(wq[i]) *
                         ws[((size_t)e * (N / 128) + n / 128) * (K / 128) + c / 128]
                   : (double)wf[i];
    };

    for (int mode = 0; mode < 2; mode++) {
        bool gather = mode == 0;
        int arows = gather ? Tp : rows; /* rows of the A matrix */
        std::vector<uint8_t> aq((size_t)arows * K);
        std::vector<uint16_t> ab((size_t)arows * K);
        std::vector<float> as((size_t)(K / 128) * arows);
        for (size_t i = 0; i < aq.size(); i++) {
            aq[i] = dtype_f32_to_e4m3(sym(448.0f));
            ab[i] = dtype_f32_to_bf16(sym(1.0f));
        }
        for (auto &v : as)
            v = 1e-3f * (0.5f + uni());
        void *da = fp8 ? (void *)dev<uint8_t>(aq.size()) : (void *)dev<uint16_t>(ab.size());
        float *das = dev<float>(as.size());
        if (fp8)
            put((uint8_t *)da, aq);
        else
            put((uint16_t *)da, ab);
        put(das, as);
        float *dy = dev<float>((size_t)rows * N);
        moe_gemm_args_t g = {&w, da, K, fp8 ? das : NULL, arows, gather ? p.row_token : NULL, &p,
                             T,  k,  dy};
        OPS(moe_gemm(&g, 0, ERR));
        std::vector<float> y = get(dy, (size_t)rows * N);
        size_t bad = 0, checked = 0;
        for (int tile = 0; tile < (int)h.tile_expert.size(); tile++) {
            int e = h.tile_expert[tile];
            if (e < 0) continue;
            for (int r = tile * MOE_TILE_M; r < (tile + 1) * MOE_TILE_M; r++) {
                int src = gather ? h.row_token[r] : r;
                bool pad = h.row_token[r] < 0;
                /* an m16 block of padding rows only skips its MMAs: zeros, even read directly */
                bool dead = true;
                for (int i = r / 16 * 16; i < r / 16 * 16 + 16; i++)
                    dead = dead && h.row_token[i] < 0;
                for (int n = 0; n < N; n++) {
                    double ref = 0, mag = 0;
                    if (!(gather && pad) && !dead)
                        for (int c = 0; c < K; c++) {
                            size_t ai = (size_t)src * K + c;
                            double a = fp8 ? (double)dtype_e4m3_to_f32(aq[ai]) *
                                                 as[(size_t)(c / 128) * arows + src]
                                           : (double)dtype_bf16_to_f32(ab[ai]);
                            double prod = a * wval(e, n, c);
                            ref += prod;
                            mag += fabs(prod);
                        }
                    double got = y[(size_t)r * N + n];
                    bad += !(fabs(got - ref) <= 2e-5 * mag + 1e-30);
                    checked++;
                }
            }
        }
        char what[160];
        snprintf(what, sizeof what, "moe_gemm %s %s T=%d k=%d E=%d N=%d K=%d %s",
                 fp8 ? "fp8" : "bf16", gather ? "gather" : "direct", T, k, E, N, K,
                 route_name[how]);
        if (bad)
            fail("%-60s FAIL: %zu of %zu outputs off\n", what, bad, checked);
        else
            printf("%-60s ok (%zu outputs)\n", what, checked);
        CK(cudaFree(da));
        CK(cudaFree(das));
        CK(cudaFree(dy));
    }
    (void)esize;
    unroute(rt);
    CK(cudaFree(dw));
    if (dws) CK(cudaFree(dws));
}

static void test_gemm(void) {
    for (int how = 0; how < 3; how++) {
        gemm_case(true, SIZE(203, 21), 4, 16, 256, SIZE(512, 256), (route_t)how);
        gemm_case(false, SIZE(203, 21), 4, 16, 256, SIZE(512, 128), (route_t)how);
    }
    gemm_case(true, 1, 8, 128, SIZE(1536, 256), SIZE(2048, 128), ROUTE_RANDOM); /* decode */
    /* more K chunks than the kernel's pipeline has stages (3): its ring of stages wraps */
    gemm_case(true, 9, 2, 4, 128, 1024, ROUTE_RANDOM);
    gemm_case(false, 9, 2, 4, 128, 512, ROUTE_SKEWED);
}

/* ---- combine -------------------------------------------------------------------------------- */

/* Experts [e0, e0 + E) of E_all: the other ranks' pairs left out of each sum. */
static void combine_case(int T, int k, int E_all, int e0, int E, int H, route_t how) {
    routed_t rt = route_local(T, k, E_all, e0, E, how);
    const std::vector<int32_t> &ids = rt.ids;
    int32_t *di = rt.di;
    const moe_perm_t &p = rt.p;
    const perm_host_t &h = rt.h;
    const int rows = moe_max_rows(T, k, E);
    std::vector<float> y((size_t)rows * H), w((size_t)T * k);
    for (auto &v : y)
        v = sym(2.0f);
    for (auto &v : w)
        v = uni();
    float *dy = dev<float>(y.size()), *dw = dev<float>(w.size()), *dout = dev<float>((size_t)T * H);
    put(dy, y);
    put(dw, w);
    OPS(moe_combine(dy, p.pair_row, di, dw, T, k, H, dout, 0, ERR));
    std::vector<float> out = get(dout, (size_t)T * H), ref((size_t)T * H);
    for (int t = 0; t < T; t++) {
        std::vector<int> order(k);
        for (int j = 0; j < k; j++)
            order[j] = j;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
            return ids[(size_t)t * k + a] < ids[(size_t)t * k + b];
        });
        for (int c = 0; c < H; c++) {
            float acc = 0.0f;
            for (int j : order) {
                if (h.pair_row[(size_t)t * k + j] < 0) continue;
                volatile float prod =
                    y[(size_t)h.pair_row[(size_t)t * k + j] * H + c] * w[(size_t)t * k + j];
                acc += prod;
            }
            ref[(size_t)t * H + c] = acc;
        }
    }
    char what[128];
    snprintf(what, sizeof what, "moe_combine T=%d k=%d experts [%d, %d) of %d H=%d %s", T, k, e0,
             e0 + E, E_all, H, route_name[how]);
    close_all(what, out.data(), ref.data(), out.size(), 0.0, 0.0);
    unroute(rt);
    CK(cudaFree(dy));
    CK(cudaFree(dw));
    CK(cudaFree(dout));
}

static void test_combine(void) {
    for (int how = 0; how < 3; how++) {
        combine_case(SIZE(131, 17), 8, 64, 0, 64, SIZE(2048, 256), (route_t)how);
        combine_case(SIZE(131, 17), 8, 64, 16, 16, SIZE(2048, 256), (route_t)how);
    }
}

int main(void) {
    if (!cuda_backend_available()) {
        printf("test_moe_kernels: no Hopper GPU, skipped\n");
        return 77;
    }
    const char *env = getenv("TACHYON_TEST_SEED");
    seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    printf("test_moe_kernels: seed %llu (TACHYON_TEST_SEED=%llu replays it)\n",
           (unsigned long long)seed, (unsigned long long)seed);
    test_router();
    test_topk();
    test_permute();
    test_gemm();
    test_combine();
    CK(cudaDeviceSynchronize());
    printf("test_moe_kernels: %d failure%s\n", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}

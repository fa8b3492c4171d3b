/*
 * kernel_test: what the kernel tests (test_kernels.cu, test_moe_kernels.cu,
 * test_qwen35_kernels.cu) share: sizes for the GPU and the host emulation, the seeded random
 * inputs, device buffers (poisoned with 0xff bytes, NaN in bf16, f32 and e4m3), and the tolerance
 * checks that count and report failures. Each test program includes it once.
 */
#ifndef TACHYON_KERNEL_TEST_H
#define TACHYON_KERNEL_TEST_H

#include <cmath>
#include <cstdint>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "cb_engine.h"
#include "gpu_check.h"

/* Sizes: full on the GPU; smaller under the host emulation (tests/gpu/emu), where every CUDA
 * thread is a fiber. */
#ifdef OPS_HOST_EMULATION
#define SIZE(gpu, emu) (emu)
#else
#define SIZE(gpu, emu) (gpu)
#endif

static int failures;
static uint64_t seed;
static uint64_t counter;

#define OPS(call)                                                                                  \
    do {                                                                                           \
        err_t err_ = {{0}};                                                                        \
        if ((call) < 0) {                                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, err_.msg);               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define ERR (&err_)

static inline float uni(void) {
    return rng_uniform(seed, 11, counter++);
}
static inline float sym(float a) {
    return (2.0f * uni() - 1.0f) * a;
}
static inline int irand(int n) {
    int r = (int)(uni() * (float)n);
    return r < n ? r : n - 1;
}

static inline void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    failures++;
}

/* ---- host/device buffers -------------------------------------------------------------------- */

template <typename T> static inline T *dev(size_t n) {
    T *p;
    CK(cudaMalloc((void **)&p, (n ? n : 1) * sizeof(T)));
    CK(cudaMemset(p, 0xff, (n ? n : 1) * sizeof(T)));
    return p;
}
template <typename T> static inline void put(T *d, const std::vector<T> &h) {
    CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <typename T> static inline std::vector<T> get(const T *d, size_t n) {
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
template <typename T> static inline void poison(T *d, size_t n) {
    CK(cudaMemset(d, 0xff, n * sizeof(T)));
}

static inline float bf(uint16_t b) {
    return dtype_bf16_to_f32(b);
}
/* Random bf16 values in [-a, a] (bits) and their exact f32 values. */
static inline void rand_bf16(size_t n, float a, std::vector<uint16_t> &bits,
                             std::vector<float> &f) {
    bits.resize(n);
    f.resize(n);
    for (size_t i = 0; i < n; i++) {
        bits[i] = dtype_f32_to_bf16(sym(a));
        f[i] = bf(bits[i]);
    }
}

/* Uploads an activation as f32 (f) or as its bf16 bits (b), the two input types of the ops. */
static inline void *put_act(bool f32, const std::vector<uint16_t> &b, const std::vector<float> &f) {
    if (f32) {
        float *p = dev<float>(f.size());
        put(p, f);
        return p;
    }
    uint16_t *p = dev<uint16_t>(b.size());
    put(p, b);
    return p;
}

/* ---- comparisons ---------------------------------------------------------------------------- */

/* Counts elements outside rel * |ref| + abs (NaN counts as outside); reports the worst. */
static inline bool close_all(const char *what, const float *got, const float *ref, size_t n,
                             double rel, double abs_tol) {
    size_t bad = 0, first = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)ref[i]);
        bool ok = e <= rel * fabs((double)ref[i]) + abs_tol;
        if (!ok) {
            if (!bad) first = i;
            bad++;
        }
        if (!(e <= worst)) worst = e;
    }
    if (bad) {
        fail(
            "%-60s FAIL: %zu of %zu outside tolerance, first at %zu (gpu %g, ref %g), max err %g\n",
            what, bad, n, first, (double)got[first], (double)ref[first], worst);
        return false;
    }
    printf("%-60s ok (max abs err %.3g)\n", what, worst);
    return true;
}

static inline void frob(const char *what, const float *got, const float *ref, size_t n,
                        double tol) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    if (!(rel <= tol)) fail("%-60s FAIL: relative Frobenius error %.3g > %.1g\n", what, rel, tol);
}

/* An fp8 GEMM input against the f32 values it quantizes: codes [T_pad, K_pad], scales
 * [ceil(K_pad / 128), T_pad]. exact: codes and scales must equal the CPU's bit for bit. */
static inline void check_fp8(const char *what, const std::vector<uint8_t> &q,
                             const std::vector<float> &sc, const std::vector<float> &x, int T,
                             int K, int T_pad, int K_pad, bool exact) {
    int G = (K_pad + 127) / 128;
    std::vector<float> ref((size_t)T * K);
    cpu_quant_fp8_rows(x.data(), T, K, 128, ref.data());
    size_t bad = 0, differ = 0, n = 0;
    char msg[256] = "";
    for (int t = 0; t < T_pad; t++) {
        for (int g = 0; g < G; g++) {
            float s = sc[(size_t)g * T_pad + t];
            if (t >= T) {
                if (s != 0.0f && !bad++) snprintf(msg, sizeof msg, "pad row %d scale %g", t, s);
                continue;
            }
            int k1 = (g + 1) * 128 < K ? (g + 1) * 128 : K;
            float amax = 0.0f;
            for (int k = g * 128; k < k1; k++)
                amax = fmaxf(amax, fabsf(x[(size_t)t * K + k]));
            float s_ref = fmaxf(amax, 1e-10f) / 448.0f;
            bool s_ok = exact ? s == s_ref : fabs(s - s_ref) <= 1e-5 * s_ref;
            if (!s_ok && !bad++)
                snprintf(msg, sizeof msg, "row %d group %d scale %g, ref %g", t, g, s, s_ref);
        }
        for (int k = 0; k < K_pad; k++) {
            uint8_t c = q[(size_t)t * K_pad + k];
            if (t >= T || k >= K) {
                if (c != 0 && !bad++) snprintf(msg, sizeof msg, "pad (%d, %d) = 0x%02x", t, k, c);
                continue;
            }
            float s = sc[(size_t)(k / 128) * T_pad + t];
            float got = dtype_e4m3_to_f32(c) * s, r = ref[(size_t)t * K + k];
            /* The CPU's code, from the CPU's scale (a scale one ulp away would make every
             * dequantized value differ while the codes agree). */
            int g = k / 128, k1 = (g + 1) * 128 < K ? (g + 1) * 128 : K;
            float amax = 0.0f;
            for (int kk = g * 128; kk < k1; kk++)
                amax = fmaxf(amax, fabsf(x[(size_t)t * K + kk]));
            float s_ref = fmaxf(amax, 1e-10f) / 448.0f;
            float qr = fminf(fmaxf(x[(size_t)t * K + k] / s_ref, -448.0f), 448.0f);
            n++;
            if (c != dtype_f32_to_e4m3(qr)) differ++;
            double tol = exact ? 0.0 : 0.125 * fabs(r) + s * 0x1p-9 * 1.01;
            if (!(fabs((double)got - (double)r) <= tol) && !bad++)
                snprintf(msg, sizeof msg, "(%d, %d): %g, ref %g", t, k, (double)got, (double)r);
        }
    }
    if (!exact && differ * 100 > n && !bad++)
        snprintf(msg, sizeof msg, "%zu of %zu elements differ (> 1%%)", differ, n);
    if (bad)
        fail("%-60s FAIL: %zu bad: %s\n", what, bad, msg);
    else
        printf("%-60s ok (%zu of %zu codes differ)\n", what, differ, n);
}

static inline std::vector<float> bf16_vec(const std::vector<uint16_t> &b) {
    std::vector<float> f(b.size());
    for (size_t i = 0; i < b.size(); i++)
        f[i] = bf(b[i]);
    return f;
}

/* The K and V pools after a KV write of T tokens to slots[t] (< 0: not written), per_slot
 * elements a slot (bf16, or e4m3 times k_scale / v_scale): the written slots against k_ref / v_ref
 * [T, per_slot], every other byte still the 0xff poison. K within bf16 rounding (or half an e4m3
 * step), V exact in bf16 (copied, never computed). */
static inline void check_kv_pools(const char *name, const std::vector<uint8_t> &kc,
                                  const std::vector<uint8_t> &vc, const std::vector<int64_t> &slots,
                                  int per_slot_i, bool fp8_kv, float k_scale, float v_scale,
                                  const std::vector<float> &k_ref,
                                  const std::vector<float> &v_ref) {
    const size_t elem = fp8_kv ? 1 : 2, per_slot = (size_t)per_slot_i;
    const size_t n_slots = kc.size() / (per_slot * elem);
    std::vector<float> kg, kr, vg, vr;
    std::vector<char> written(n_slots, 0);
    for (size_t t = 0; t < slots.size(); t++) {
        if (slots[t] < 0) continue;
        written[slots[t]] = 1;
        for (size_t e = 0; e < per_slot; e++) {
            size_t off = (size_t)slots[t] * per_slot + e;
            float kk, vv;
            if (fp8_kv) {
                kk = dtype_e4m3_to_f32(kc[off]) * k_scale;
                vv = dtype_e4m3_to_f32(vc[off]) * v_scale;
            } else {
                uint16_t b;
                memcpy(&b, &kc[off * 2], 2);
                kk = bf(b);
                memcpy(&b, &vc[off * 2], 2);
                vv = bf(b);
            }
            kg.push_back(kk);
            vg.push_back(vv);
            kr.push_back(k_ref[t * per_slot + e]);
            vr.push_back(v_ref[t * per_slot + e]);
        }
    }
    char what[200];
    /* fp8: half an e4m3 step (2^-4 relative) plus the subnormal step of the scale. */
    double rel = fp8_kv ? 0.0625 * 1.01 : 0x1p-8;
    snprintf(what, sizeof what, "  K cache (%s)", name);
    close_all(what, kg.data(), kr.data(), kg.size(), rel, fp8_kv ? k_scale * 0x1p-10 : 1e-5);
    snprintf(what, sizeof what, "  V cache (%s)", name);
    close_all(what, vg.data(), vr.data(), vg.size(), fp8_kv ? rel : 0.0,
              fp8_kv ? v_scale * 0x1p-10 : 0.0);
    size_t stray = 0;
    for (size_t s = 0; s < n_slots; s++) {
        if (written[s]) continue;
        for (size_t b = 0; b < per_slot * elem; b++)
            stray += (kc[s * per_slot * elem + b] != 0xff) + (vc[s * per_slot * elem + b] != 0xff);
    }
    if (stray) fail("  %s: %zu bytes written outside the mapped slots\n", name, stray);
}

#endif

/*
 * dtype: names and sizes, and every conversion checked exhaustively against independent formulas
 * (ldexpf of sign, exponent and mantissa; nearest-value search in double for rounding) and
 * against values PyTorch 2.15 produced.
 *
 * The torch_* tables were generated with /root/fxvenv/bin/python (torch 2.15.0):
 *
 *   g = torch.Generator().manual_seed(1234)
 *   r = torch.randint(0, 2**32, (24,), generator=g, dtype=torch.int64).tolist()
 *   bf = [b & 0xff7fffff for b in r] + [hand-made ties and edges, as listed below]
 *   x = torch.tensor(bf, dtype=torch.int64).to(torch.int32).view(torch.float32)
 *   x.to(torch.bfloat16).view(torch.int16)                              -> torch_bf16
 *   vals = (torch.rand(24, generator=g) * 1000 - 500).tolist()
 *        + (torch.rand(8, generator=g) * 0.03 - 0.015).tolist() + [hand-made ties and edges]
 *   torch.tensor(vals).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8) -> torch_e4m3
 *   torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()  -> torch_e4m3_decode
 *
 * The clamp is what the FP8 quantizers (HF Fp8Quantize, vLLM) do before the cast, hence our
 * saturating f32 -> e4m3. NaN payloads are not compared: torch turns every NaN into 0xffff in
 * bf16, we keep a quiet NaN with its sign.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <string.h>

#include "dtype.h"

static const struct {
    uint32_t f32;
    uint16_t bf16;
} torch_bf16[] = {
    {0x7f66e2d3u, 0x7f67}, {0xd15ddc35u, 0xd15e}, {0x9c335d74u, 0x9c33}, {0xc577d7f9u, 0xc578},
    {0xdc54dab1u, 0xdc55}, {0x261024e9u, 0x2610}, {0x3252201eu, 0x3252}, {0xd02e849eu, 0xd02f},
    {0x28281f7cu, 0x2828}, {0x1d3b3576u, 0x1d3b}, {0x034de878u, 0x034e}, {0x7c211ddcu, 0x7c21},
    {0x543d6d50u, 0x543d}, {0xcd79c97fu, 0xcd7a}, {0x192709feu, 0x1927}, {0x0e559632u, 0x0e56},
    {0x715256fbu, 0x7152}, {0x052b3925u, 0x052b}, {0x4a6d2fa6u, 0x4a6d}, {0x3f13b4c3u, 0x3f14},
    {0xbd005c8bu, 0xbd00}, {0xe32452e9u, 0xe324}, {0xfc352950u, 0xfc35}, {0x1e10c502u, 0x1e11},
    {0x3f808000u, 0x3f80}, {0x3f818000u, 0x3f82}, {0x3f80ffffu, 0x3f81}, {0x3f808001u, 0x3f81},
    {0x7f7fffffu, 0x7f80}, {0x00008000u, 0x0000}, {0x00018000u, 0x0002}, {0x80000001u, 0x8000},
    {0xbf818000u, 0xbf82},
};

static const struct {
    float x;
    uint8_t e4m3;
} torch_e4m3[] = {
    {383.86651611328125f, 0x7c},
    {308.28167724609375f, 0x7a},
    {252.8038330078125f, 0x78},
    {398.8310546875f, 0x7c},
    {183.8599853515625f, 0x73},
    {265.844970703125f, 0x78},
    {414.9166259765625f, 0x7d},
    {-100.7413330078125f, 0xed},
    {-389.9527893066406f, 0xfc},
    {-245.8961639404297f, 0xf7},
    {-66.74533081054688f, 0xe8},
    {-54.943328857421875f, 0xe6},
    {-3.388763427734375f, 0xc6},
    {286.535888671875f, 0x79},
    {160.3955078125f, 0x72},
    {-369.6959228515625f, 0xfc},
    {-150.20269775390625f, 0xf1},
    {-117.62481689453125f, 0xef},
    {304.30682373046875f, 0x7a},
    {-181.38955688476562f, 0xf3},
    {-209.1922607421875f, 0xf5},
    {-80.39022827148438f, 0xea},
    {-127.18551635742188f, 0xf0},
    {-123.10809326171875f, 0xef},
    {-0.01467661652714014f, 0x88},
    {0.013364809565246105f, 0x07},
    {0.007983350194990635f, 0x04},
    {-0.007097799330949783f, 0x84},
    {-0.00935899093747139f, 0x85},
    {0.000521843321621418f, 0x00},
    {0.00854660663753748f, 0x04},
    {-0.010764620266854763f, 0x86},
    {0.0009765625f, 0x00},
    {0.0029296875f, 0x02},
    {0.0048828125f, 0x02},
    {1.0625f, 0x38},
    {1.1875f, 0x3a},
    {248.0f, 0x78},
    {464.0f, 0x7e},
    {500.0f, 0x7e},
    {-1e+30f, 0xfe},
    {0.00830078125f, 0x04},
    {0.0f, 0x00},
    {-0.0f, 0x80},
};

static const float torch_e4m3_decode[256] = {
    0.0f,         0.001953125f,  0.00390625f,  0.005859375f,  0.0078125f,   0.009765625f,
    0.01171875f,  0.013671875f,  0.015625f,    0.017578125f,  0.01953125f,  0.021484375f,
    0.0234375f,   0.025390625f,  0.02734375f,  0.029296875f,  0.03125f,     0.03515625f,
    0.0390625f,   0.04296875f,   0.046875f,    0.05078125f,   0.0546875f,   0.05859375f,
    0.0625f,      0.0703125f,    0.078125f,    0.0859375f,    0.09375f,     0.1015625f,
    0.109375f,    0.1171875f,    0.125f,       0.140625f,     0.15625f,     0.171875f,
    0.1875f,      0.203125f,     0.21875f,     0.234375f,     0.25f,        0.28125f,
    0.3125f,      0.34375f,      0.375f,       0.40625f,      0.4375f,      0.46875f,
    0.5f,         0.5625f,       0.625f,       0.6875f,       0.75f,        0.8125f,
    0.875f,       0.9375f,       1.0f,         1.125f,        1.25f,        1.375f,
    1.5f,         1.625f,        1.75f,        1.875f,        2.0f,         2.25f,
    2.5f,         2.75f,         3.0f,         3.25f,         3.5f,         3.75f,
    4.0f,         4.5f,          5.0f,         5.5f,          6.0f,         6.5f,
    7.0f,         7.5f,          8.0f,         9.0f,          10.0f,        11.0f,
    12.0f,        13.0f,         14.0f,        15.0f,         16.0f,        18.0f,
    20.0f,        22.0f,         24.0f,        26.0f,         28.0f,        30.0f,
    32.0f,        36.0f,         40.0f,        44.0f,         48.0f,        52.0f,
    56.0f,        60.0f,         64.0f,        72.0f,         80.0f,        88.0f,
    96.0f,        104.0f,        112.0f,       120.0f,        128.0f,       144.0f,
    160.0f,       176.0f,        192.0f,       208.0f,        224.0f,       240.0f,
    256.0f,       288.0f,        320.0f,       352.0f,        384.0f,       416.0f,
    448.0f,       NAN,           -0.0f,        -0.001953125f, -0.00390625f, -0.005859375f,
    -0.0078125f,  -0.009765625f, -0.01171875f, -0.013671875f, -0.015625f,   -0.017578125f,
    -0.01953125f, -0.021484375f, -0.0234375f,  -0.025390625f, -0.02734375f, -0.029296875f,
    -0.03125f,    -0.03515625f,  -0.0390625f,  -0.04296875f,  -0.046875f,   -0.05078125f,
    -0.0546875f,  -0.05859375f,  -0.0625f,     -0.0703125f,   -0.078125f,   -0.0859375f,
    -0.09375f,    -0.1015625f,   -0.109375f,   -0.1171875f,   -0.125f,      -0.140625f,
    -0.15625f,    -0.171875f,    -0.1875f,     -0.203125f,    -0.21875f,    -0.234375f,
    -0.25f,       -0.28125f,     -0.3125f,     -0.34375f,     -0.375f,      -0.40625f,
    -0.4375f,     -0.46875f,     -0.5f,        -0.5625f,      -0.625f,      -0.6875f,
    -0.75f,       -0.8125f,      -0.875f,      -0.9375f,      -1.0f,        -1.125f,
    -1.25f,       -1.375f,       -1.5f,        -1.625f,       -1.75f,       -1.875f,
    -2.0f,        -2.25f,        -2.5f,        -2.75f,        -3.0f,        -3.25f,
    -3.5f,        -3.75f,        -4.0f,        -4.5f,         -5.0f,        -5.5f,
    -6.0f,        -6.5f,         -7.0f,        -7.5f,         -8.0f,        -9.0f,
    -10.0f,       -11.0f,        -12.0f,       -13.0f,        -14.0f,       -15.0f,
    -16.0f,       -18.0f,        -20.0f,       -22.0f,        -24.0f,       -26.0f,
    -28.0f,       -30.0f,        -32.0f,       -36.0f,        -40.0f,       -44.0f,
    -48.0f,       -52.0f,        -56.0f,       -60.0f,        -64.0f,       -72.0f,
    -80.0f,       -88.0f,        -96.0f,       -104.0f,       -112.0f,      -120.0f,
    -128.0f,      -144.0f,       -160.0f,      -176.0f,       -192.0f,      -208.0f,
    -224.0f,      -240.0f,       -256.0f,      -288.0f,       -320.0f,      -352.0f,
    -384.0f,      -416.0f,       -448.0f,      NAN,
};

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Same value, same sign of zero; any NaN equals any NaN. */
static void assert_same_float(float got, float want, unsigned code) {
    if (isnan(want)) {
        if (!isnan(got)) fail_msg("code 0x%x: got %a, want NaN", code, (double)got);
        return;
    }
    if (bits_of(got) != bits_of(want))
        fail_msg("code 0x%x: got %a, want %a", code, (double)got, (double)want);
}

static void test_names_and_sizes(void **state) {
    static const struct {
        const char *name;
        dtype_t t;
        size_t size;
    } all[] = {
        {"BOOL", DT_BOOL, 1}, {"U8", DT_U8, 1},           {"I8", DT_I8, 1},
        {"I16", DT_I16, 2},   {"U16", DT_U16, 2},         {"F16", DT_F16, 2},
        {"BF16", DT_BF16, 2}, {"I32", DT_I32, 4},         {"U32", DT_U32, 4},
        {"F32", DT_F32, 4},   {"F64", DT_F64, 8},         {"I64", DT_I64, 8},
        {"U64", DT_U64, 8},   {"F8_E4M3", DT_F8_E4M3, 1}, {"F8_E5M2", DT_F8_E5M2, 1},
    };
    assert_int_equal(sizeof all / sizeof all[0], DT_COUNT);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        assert_int_equal(dtype_from_name(all[i].name), all[i].t);
        assert_string_equal(dtype_name(all[i].t), all[i].name);
        assert_int_equal(dtype_size(all[i].t), all[i].size);
    }
    assert_int_equal(dtype_from_name("bf16"), -1);
    assert_int_equal(dtype_from_name("F8_E4M3FN"), -1);
    assert_int_equal(dtype_from_name(""), -1);
    assert_string_equal(dtype_name(DT_COUNT), "?");
    assert_int_equal(dtype_size(DT_COUNT), 0);

    assert_true(dtype_is_float(DT_BF16));
    assert_true(dtype_is_float(DT_F16));
    assert_true(dtype_is_float(DT_F32));
    assert_true(dtype_is_float(DT_F8_E4M3));
    assert_false(dtype_is_float(DT_F64));
    assert_false(dtype_is_float(DT_F8_E5M2));
    assert_false(dtype_is_float(DT_I32));
    assert_false(dtype_is_float(DT_BOOL));
}

/* An IEEE binary format decoded from its fields with ldexpf, no bit tricks. */
static float decode_fields(unsigned code, int exp_bits, int mant_bits) {
    int sign = (code >> (exp_bits + mant_bits)) & 1;
    int e = (code >> mant_bits) & ((1 << exp_bits) - 1);
    int m = code & ((1 << mant_bits) - 1);
    int bias = (1 << (exp_bits - 1)) - 1;
    float v;
    if (e == (1 << exp_bits) - 1)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexpf((float)m, 1 - bias - mant_bits);
    else
        v = ldexpf((float)((1 << mant_bits) + m), e - bias - mant_bits);
    return sign ? -v : v;
}

static void test_bf16_decode_all(void **state) {
    for (unsigned c = 0; c < 65536; c++)
        assert_same_float(dtype_bf16_to_f32((uint16_t)c), decode_fields(c, 8, 7), c);
}

static void test_f16_decode_all(void **state) {
    for (unsigned c = 0; c < 65536; c++)
        assert_same_float(dtype_f16_to_f32((uint16_t)c), decode_fields(c, 5, 10), c);
    assert_true(dtype_f16_to_f32(0x7c00) == INFINITY);
    assert_true(dtype_f16_to_f32(0xfc00) == -INFINITY);
    assert_true(isnan(dtype_f16_to_f32(0x7e00)));
    assert_true(isnan(dtype_f16_to_f32(0x7c01)));
    assert_true(dtype_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(dtype_f16_to_f32(0x7bff) == 65504.0f);
}

/* Magnitude of a bf16 code, with exponent field 255 read as 2^128 (the value an overflowing
 * rounding steps to) so that the nearest search below also covers rounding to infinity. */
static double bf16_magnitude(unsigned code) {
    unsigned e = (code >> 7) & 0xff, m = code & 0x7f;
    if (e == 0xff) return ldexp(1.0, 128);
    return e ? ldexp(128.0 + m, (int)e - 134) : ldexp((double)m, -133);
}

/* f32 -> bf16 by searching the nearest of the two neighbours in double, ties to even. */
static uint16_t bf16_nearest(float x) {
    unsigned lo = bits_of(x) >> 16, sign = lo & 0x8000;
    double ax = fabs((double)x);
    double a = bf16_magnitude(lo & 0x7fff), b = bf16_magnitude((lo & 0x7fff) + 1);
    double da = ax - a, db = b - ax;
    if (da < db || (da == db && (lo & 1) == 0)) return (uint16_t)lo;
    return (uint16_t)(sign | ((lo & 0x7fff) + 1));
}

static void test_bf16_encode_all(void **state) {
    static const uint32_t lows[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
    for (uint32_t hi = 0; hi < 65536; hi++) {
        if (((hi >> 7) & 0xff) == 0xff) continue; /* infinities and NaNs: below */
        for (size_t i = 0; i < sizeof lows / sizeof lows[0]; i++) {
            float x = float_of(hi << 16 | lows[i]);
            uint16_t got = dtype_f32_to_bf16(x), want = bf16_nearest(x);
            if (got != want)
                fail_msg("f32 0x%08x: got bf16 0x%04x, want 0x%04x", (unsigned)(hi << 16 | lows[i]),
                         got, want);
        }
    }
    /* Ties by hand: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 (mantissa 0, even). */
    assert_int_equal(dtype_f32_to_bf16(float_of(0x3f808000)), 0x3f80);
    assert_int_equal(dtype_f32_to_bf16(float_of(0x3f818000)), 0x3f82); /* 1 odd -> up to 2 */
    assert_int_equal(dtype_f32_to_bf16(float_of(0x3f808001)), 0x3f81); /* above the tie */
    assert_int_equal(dtype_f32_to_bf16(float_of(0x3f807fff)), 0x3f80); /* below the tie */
    assert_int_equal(dtype_f32_to_bf16(FLT_MAX), 0x7f80);              /* overflows to inf */
    assert_int_equal(dtype_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(dtype_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(dtype_f32_to_bf16(-0.0f), 0x8000);

    /* NaNs whose low payload would carry into infinity under a plain rounding add. */
    static const uint32_t nans[] = {0x7f800001, 0xff800001, 0x7f80ffff, 0x7fc00000,
                                    0xffc00000, 0x7fffffff, 0xffffffff, 0x7f808000};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t b = dtype_f32_to_bf16(float_of(nans[i]));
        assert_true(isnan(dtype_bf16_to_f32(b)));
        assert_int_equal(b & 0x8000, (nans[i] >> 16) & 0x8000);
    }
}

static void test_bf16_matches_torch(void **state) {
    for (size_t i = 0; i < sizeof torch_bf16 / sizeof torch_bf16[0]; i++) {
        uint16_t got = dtype_f32_to_bf16(float_of(torch_bf16[i].f32));
        if (got != torch_bf16[i].bf16)
            fail_msg("f32 0x%08x: got 0x%04x, torch 0x%04x", (unsigned)torch_bf16[i].f32, got,
                     torch_bf16[i].bf16);
    }
}

/* e4m3fn exactly as models.md 2.3 states it. */
static float e4m3_formula(unsigned b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m / 8.0f, -6);
    else
        v = ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return s ? -v : v;
}

static void test_e4m3_decode_all(void **state) {
    for (unsigned c = 0; c < 256; c++) {
        assert_same_float(dtype_e4m3_to_f32((uint8_t)c), e4m3_formula(c), c);
        assert_same_float(dtype_e4m3_to_f32((uint8_t)c), torch_e4m3_decode[c], c);
    }
    assert_true(dtype_e4m3_to_f32(0x7e) == 448.0f);
    assert_true(dtype_e4m3_to_f32(0xfe) == -448.0f);
    assert_true(dtype_e4m3_to_f32(0x01) == 0x1p-9f);
    assert_true(dtype_e4m3_to_f32(0x08) == 0x1p-6f);
    assert_true(isnan(dtype_e4m3_to_f32(0x7f)));
    assert_true(isnan(dtype_e4m3_to_f32(0xff)));
    assert_true(dtype_e4m3_to_f32(0x78) == 256.0f); /* e=15 m=0 is a number, not infinity */
}

static void test_e4m3_round_trip_all(void **state) {
    for (unsigned c = 0; c < 256; c++) {
        uint8_t back = dtype_f32_to_e4m3(dtype_e4m3_to_f32((uint8_t)c));
        if (back != c) fail_msg("code 0x%02x came back as 0x%02x", c, back);
    }
}

/* Every pair of neighbours: the midpoint goes to the even code, one f32 ulp either side goes to
 * the nearer one. Codes grow with magnitude, and the even code is the one with mantissa LSB 0. */
static void test_e4m3_ties_all(void **state) {
    for (unsigned sign = 0; sign <= 0x80; sign += 0x80) {
        for (unsigned c = 0; c < 0x7e; c++) {
            float lo = dtype_e4m3_to_f32((uint8_t)(sign | c));
            float hi = dtype_e4m3_to_f32((uint8_t)(sign | (c + 1)));
            float mid = (lo + hi) / 2; /* exact: both have at most 4 significant bits */
            uint8_t even = (uint8_t)(sign | ((c & 1) ? c + 1 : c));
            assert_int_equal(dtype_f32_to_e4m3(mid), even);
            assert_int_equal(dtype_f32_to_e4m3(nextafterf(mid, lo)), sign | c);
            assert_int_equal(dtype_f32_to_e4m3(nextafterf(mid, hi)), sign | (c + 1));
        }
    }
    /* Halfway between 0 and the smallest subnormal goes to zero (even), keeping the sign. */
    assert_int_equal(dtype_f32_to_e4m3(0x1p-10f), 0x00);
    assert_int_equal(dtype_f32_to_e4m3(-0x1p-10f), 0x80);
    assert_int_equal(dtype_f32_to_e4m3(0x1.000002p-10f), 0x01);
    assert_int_equal(dtype_f32_to_e4m3(0x1p-149f), 0x00); /* f32 subnormal */
    assert_int_equal(dtype_f32_to_e4m3(1.0625f), 0x38);   /* between 1 and 1.125 */
    assert_int_equal(dtype_f32_to_e4m3(1.1875f), 0x3a);   /* between 1.125 and 1.25 */
}

static void test_e4m3_saturates(void **state) {
    static const float big[] = {448.0f, 449.0f, 464.0f, 465.0f, 480.0f, 1e30f, FLT_MAX, INFINITY};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        assert_int_equal(dtype_f32_to_e4m3(big[i]), 0x7e);
        assert_int_equal(dtype_f32_to_e4m3(-big[i]), 0xfe);
    }
    assert_int_equal(dtype_f32_to_e4m3(NAN), 0x7f);
    assert_int_equal(dtype_f32_to_e4m3(-NAN), 0xff);
    assert_int_equal(dtype_f32_to_e4m3(float_of(0x7f800001)), 0x7f);
}

static void test_e4m3_matches_torch(void **state) {
    for (size_t i = 0; i < sizeof torch_e4m3 / sizeof torch_e4m3[0]; i++) {
        uint8_t got = dtype_f32_to_e4m3(torch_e4m3[i].x);
        if (got != torch_e4m3[i].e4m3)
            fail_msg("%a: got 0x%02x, torch 0x%02x", (double)torch_e4m3[i].x, got,
                     torch_e4m3[i].e4m3);
    }
}

/* Little-endian bytes of each type at an odd address, as a checkpoint may place them. */
static void test_to_f32_all_types(void **state) {
    unsigned char buf[1 + 3 * 8];
    float out[3];

    static const uint16_t bf[] = {0x3f80, 0xc040, 0x7f80}; /* 1, -3, inf */
    memcpy(buf + 1, bf, sizeof bf);
    dtype_to_f32(DT_BF16, buf + 1, out, 3);
    assert_true(out[0] == 1.0f && out[1] == -3.0f && out[2] == INFINITY);

    static const uint16_t h[] = {0x3c00, 0xc200, 0x0001}; /* 1, -3, 2^-24 */
    memcpy(buf + 1, h, sizeof h);
    dtype_to_f32(DT_F16, buf + 1, out, 3);
    assert_true(out[0] == 1.0f && out[1] == -3.0f && out[2] == 0x1p-24f);

    static const float f[] = {1.5f, -0.0f, 0x1p-149f};
    memcpy(buf + 1, f, sizeof f);
    dtype_to_f32(DT_F32, buf + 1, out, 3);
    assert_memory_equal(out, f, sizeof f);

    static const uint8_t e4[] = {0x38, 0xfe, 0x01}; /* 1, -448, 2^-9 */
    memcpy(buf + 1, e4, sizeof e4);
    dtype_to_f32(DT_F8_E4M3, buf + 1, out, 3);
    assert_true(out[0] == 1.0f && out[1] == -448.0f && out[2] == 0x1p-9f);

    static const uint8_t e5[] = {0x3c, 0xc2, 0x7c}; /* 1, -3, inf */
    memcpy(buf + 1, e5, sizeof e5);
    dtype_to_f32(DT_F8_E5M2, buf + 1, out, 3);
    assert_true(out[0] == 1.0f && out[1] == -3.0f && out[2] == INFINITY);

    static const double d[] = {0.1, -2.0, 1e300};
    memcpy(buf + 1, d, sizeof d);
    dtype_to_f32(DT_F64, buf + 1, out, 3);
    assert_true(out[0] == 0.1f && out[1] == -2.0f && out[2] == INFINITY);

    static const int32_t i32[] = {-7, 16777217, 0};
    memcpy(buf + 1, i32, sizeof i32);
    dtype_to_f32(DT_I32, buf + 1, out, 3);
    assert_true(out[0] == -7.0f && out[1] == 16777216.0f && out[2] == 0.0f);

    static const int64_t i64[] = {-1, INT64_MIN, 3};
    memcpy(buf + 1, i64, sizeof i64);
    dtype_to_f32(DT_I64, buf + 1, out, 3);
    assert_true(out[0] == -1.0f && out[1] == -0x1p63f && out[2] == 3.0f);

    static const uint64_t u64[] = {UINT64_MAX, 0, 5};
    memcpy(buf + 1, u64, sizeof u64);
    dtype_to_f32(DT_U64, buf + 1, out, 3);
    assert_true(out[0] == 0x1p64f && out[1] == 0.0f && out[2] == 5.0f);

    static const int16_t i16[] = {-32768, 2, 3};
    memcpy(buf + 1, i16, sizeof i16);
    dtype_to_f32(DT_I16, buf + 1, out, 3);
    assert_true(out[0] == -32768.0f && out[1] == 2.0f && out[2] == 3.0f);

    static const uint16_t u16[] = {65535, 0, 1};
    memcpy(buf + 1, u16, sizeof u16);
    dtype_to_f32(DT_U16, buf + 1, out, 3);
    assert_true(out[0] == 65535.0f && out[1] == 0.0f && out[2] == 1.0f);

    static const uint32_t u32[] = {4294967295u, 1, 2};
    memcpy(buf + 1, u32, sizeof u32);
    dtype_to_f32(DT_U32, buf + 1, out, 3);
    assert_true(out[0] == 0x1p32f && out[1] == 1.0f && out[2] == 2.0f);

    static const uint8_t bytes[] = {255, 0, 1};
    memcpy(buf + 1, bytes, sizeof bytes);
    dtype_to_f32(DT_U8, buf + 1, out, 3);
    assert_true(out[0] == 255.0f && out[1] == 0.0f && out[2] == 1.0f);
    dtype_to_f32(DT_I8, buf + 1, out, 3);
    assert_true(out[0] == -1.0f && out[1] == 0.0f && out[2] == 1.0f);
    dtype_to_f32(DT_BOOL, buf + 1, out, 3);
    assert_true(out[0] == 255.0f && out[1] == 0.0f && out[2] == 1.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_sizes),     cmocka_unit_test(test_bf16_decode_all),
        cmocka_unit_test(test_f16_decode_all),      cmocka_unit_test(test_bf16_encode_all),
        cmocka_unit_test(test_bf16_matches_torch),  cmocka_unit_test(test_e4m3_decode_all),
        cmocka_unit_test(test_e4m3_round_trip_all), cmocka_unit_test(test_e4m3_ties_all),
        cmocka_unit_test(test_e4m3_saturates),      cmocka_unit_test(test_e4m3_matches_torch),
        cmocka_unit_test(test_to_f32_all_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

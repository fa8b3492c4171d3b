/* bench_rng: the benchmark's seeded generator (see bench_rng.h). */
#include "bench_rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void bench_rng_seed(bench_rng_t *r, uint64_t seed) {
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t bench_rng_next(bench_rng_t *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

uint64_t bench_rng_below(bench_rng_t *r, uint64_t bound) {
    if (bound <= 1) return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do
        x = bench_rng_next(r);
    while (x >= limit);
    return x % bound;
}

int64_t bench_rng_range(bench_rng_t *r, int64_t lo, int64_t hi) {
    return lo + (int64_t)bench_rng_below(r, (uint64_t)(hi - lo) + 1);
}

double bench_rng_uniform(bench_rng_t *r) {
    return ((double)(bench_rng_next(r) >> 11) + 0.5) * 0x1.0p-53;
}

double bench_rng_normal(bench_rng_t *r) {
    double u, v, s;
    do {
        u = 2 * bench_rng_uniform(r) - 1;
        v = 2 * bench_rng_uniform(r) - 1;
        s = u * u + v * v;
    } while (s >= 1 || s == 0);
    return u * sqrt(-2 * log(s) / s);
}

double bench_rng_gamma(bench_rng_t *r, double shape, double scale) {
    if (shape < 1) {
        double u = bench_rng_uniform(r);
        return bench_rng_gamma(r, shape + 1, scale) * pow(u, 1 / shape);
    }
    double d = shape - 1.0 / 3, c = 1 / sqrt(9 * d);
    for (;;) {
        double x, v;
        do {
            x = bench_rng_normal(r);
            v = 1 + c * x;
        } while (v <= 0);
        v = v * v * v;
        double u = bench_rng_uniform(r);
        if (u < 1 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1 - v + log(v)))
            return d * v * scale;
    }
}

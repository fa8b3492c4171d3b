/*
 * bench_rng: the benchmark's seeded generator (xoshiro256** seeded through splitmix64; not numpy's
 * PCG64 stream, so for one seed the draws differ from vLLM's while their distributions match).
 * Arrival gaps, dataset lengths and texts, shuffles and request-id prefixes all use it.
 *
 *     bench_rng_t r;
 *     bench_rng_seed(&r, seed);
 *     double gap = bench_rng_gamma(&r, burstiness, 1 / (rate * burstiness));
 *     uint64_t k = bench_rng_below(&r, n);     // uniform in [0, n)
 */
#ifndef TACHYON_BENCH_RNG_H
#define TACHYON_BENCH_RNG_H

#include <stdint.h>

typedef struct bench_rng {
    uint64_t s[4];
} bench_rng_t;

void bench_rng_seed(bench_rng_t *r, uint64_t seed);
uint64_t bench_rng_next(bench_rng_t *r);
/* Uniform in [0, bound) without modulo bias; 0 when bound <= 1. */
uint64_t bench_rng_below(bench_rng_t *r, uint64_t bound);
/* Uniform integer in [lo, hi] (numpy's rng.integers(lo, hi + 1)). */
int64_t bench_rng_range(bench_rng_t *r, int64_t lo, int64_t hi);
/* Uniform in (0, 1): never 0, so logs and powers of it are finite. */
double bench_rng_uniform(bench_rng_t *r);
/* Standard normal (Marsaglia's polar method). */
double bench_rng_normal(bench_rng_t *r);
/* Gamma(shape, scale) (Marsaglia and Tsang; shape < 1 by the U^(1/shape) boost). */
double bench_rng_gamma(bench_rng_t *r, double shape, double scale);

#endif

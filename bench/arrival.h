/*
 * arrival: when each request of a benchmark is sent, as `vllm bench serve` schedules them
 * (get_request in vllm/benchmarks/serve.py).
 *
 * With an infinite rate every delay is 0 (all requests arrive at once and --max-concurrency
 * alone gates them). Otherwise the gaps between arrivals are drawn from a gamma distribution of
 * shape `burstiness` and mean 1/rate (burstiness 1 is a Poisson process), or are exactly 1/rate
 * when burstiness is infinite. The delays are cumulative, the first request also waits one gap,
 * and they are then scaled so that the last delay is exactly n/rate, as vLLM does to close the
 * gap between the sampled and the configured rate.
 *
 *     double *d = malloc(n * sizeof *d);
 *     bench_arrival_delays(rate, burstiness, seed, n, d, &err);   // d[i]: s after the start
 *
 * The generator is seeded (xoshiro256** from splitmix64 of the seed), so a seed gives the same
 * schedule on every run and machine; it is not numpy's stream.
 */
#ifndef TACHYON_BENCH_ARRIVAL_H
#define TACHYON_BENCH_ARRIVAL_H

#include <stdint.h>

#include "bench.h"
#include "bench_rng.h"

/* Fills delays[0..n) with the arrival time of each request in seconds after the benchmark
 * start. rate > 0 (INFINITY allowed), burstiness > 0 (INFINITY allowed). -1 on bad values. */
int bench_arrival_delays(double rate, double burstiness, uint64_t seed, int n, double *delays,
                         bench_err_t *err);

#endif

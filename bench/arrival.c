/* arrival: vLLM's request arrival schedule (see arrival.h). */
#include "arrival.h"

#include <math.h>

int bench_arrival_delays(double rate, double burstiness, uint64_t seed, int n, double *delays,
                         bench_err_t *err) {
    if (n < 0) return bench_err_set(err, "arrival: negative request count %d", n);
    if (!(rate > 0)) return bench_err_set(err, "request rate must be > 0 (got %g)", rate);
    if (!(burstiness > 0)) return bench_err_set(err, "burstiness must be > 0 (got %g)", burstiness);
    if (isinf(rate)) {
        for (int i = 0; i < n; i++)
            delays[i] = 0;
        return 0;
    }
    bench_rng_t r;
    bench_rng_seed(&r, seed);
    double t = 0;
    for (int i = 0; i < n; i++) {
        t +=
            isinf(burstiness) ? 1 / rate : bench_rng_gamma(&r, burstiness, 1 / (rate * burstiness));
        delays[i] = t;
    }
    if (n > 0 && delays[n - 1] > 0) {
        double k = (n / rate) / delays[n - 1];
        for (int i = 0; i < n; i++)
            delays[i] *= k;
    }
    return 0;
}

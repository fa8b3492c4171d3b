/* The benchmark client's own cost (client-cost.sh): drives bench_client_run (bench/client.c, the
 * loop `tachyon bench` times requests with) against a local responder and prints, as one JSON
 * line, the CPU seconds the client thread used (getrusage RUSAGE_THREAD around the run only: no
 * dataset, no tokenizer), the achieved rates and how late requests started. Usage:
 *   client_cost URL N RATE CONCURRENCY TOKENS
 * RATE in req/s or inf (constant spacing, as --burstiness inf), CONCURRENCY 0 = unlimited,
 * TOKENS the token events the responder sends (each record is checked to have them). */
#ifndef _GNU_SOURCE /* the CMake build defines it for every file */
#define _GNU_SOURCE
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "arrival.h"
#include "client.h"

static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: client_cost URL N RATE CONCURRENCY TOKENS\n");
        return 2;
    }
    const char *url = argv[1];
    int n = atoi(argv[2]), conc = atoi(argv[4]), tokens = atoi(argv[5]);
    double rate = strtod(argv[3], NULL);
    static const char body[] =
        "{\"model\":\"responder\",\"prompt\":\"The quick brown fox jumps over the lazy dog\","
        "\"repetition_penalty\":1,\"max_tokens\":16,\"logprobs\":null,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"ignore_eos\":true}";
    bench_client_request_t *reqs = malloc((size_t)n * sizeof *reqs);
    bench_record_t *recs = calloc((size_t)n, sizeof *recs);
    double *delays = malloc((size_t)n * sizeof *delays);
    bench_err_t err;
    if (!reqs || !recs || !delays || n < 1 ||
        bench_arrival_delays(rate, INFINITY, 0, n, delays, &err) < 0) {
        fprintf(stderr, "client_cost: bad arguments\n");
        return 2;
    }
    for (int i = 0; i < n; i++)
        reqs[i] = (bench_client_request_t){body, sizeof body - 1, 32, tokens};
    bench_client_config_t cfg = {.url = url,
                                 .request_id_prefix = "bench-c0570000-",
                                 .max_concurrency = conc,
                                 .timeout_s = 30};
    int started;
    double t_end, c0 = cpu_now(), t0 = bench_client_now();
    if (bench_client_run(&cfg, reqs, n, delays, t0, recs, &started, &t_end, NULL, NULL, &err) < 0) {
        fprintf(stderr, "client_cost: %s\n", err.msg);
        return 1;
    }
    double cpu = cpu_now() - c0, wall = t_end - t0;
    int ok = 0, bad_tokens = 0, shown = 0;
    double *late = malloc((size_t)n * sizeof *late), late_sum = 0;
    for (int i = 0; i < n; i++) {
        ok += recs[i].success;
        if (recs[i].success && (recs[i].output_len != tokens || recs[i].n_itl != tokens - 1))
            bad_tokens++;
        if (!recs[i].success && shown++ < 3) fprintf(stderr, "request %d: %s\n", i, recs[i].error);
        late[i] = recs[i].start_time - delays[i];
        late_sum += late[i];
        free(recs[i].itl);
    }
    qsort(late, (size_t)n, sizeof *late, cmp_double);
    /* The last arrival is at n/rate; the run is sustained when everything finished close to it. */
    printf("{\"n\":%d,\"rate\":\"%s\",\"concurrency\":%d,\"tokens\":%d,\"ok\":%d,\"bad_tokens\":%d,"
           "\"wall_s\":%.4f,\"achieved_rps\":%.1f,\"client_cpu_s\":%.4f,"
           "\"cpu_s_per_1000\":%.4f,\"late_mean_ms\":%.3f,\"late_p99_ms\":%.3f}\n",
           n, argv[3], conc, tokens, ok, bad_tokens, wall, n / wall, cpu, cpu * 1000.0 / n,
           late_sum / n * 1e3, late[(int)(0.99 * (n - 1))] * 1e3);
    free(late);
    free(reqs);
    free(recs);
    free(delays);
    return ok == n && bad_tokens == 0 ? 0 : 1;
}

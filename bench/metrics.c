/*
 * bench metrics: vLLM's calculate_metrics (vllm/benchmarks/serve.py) over the per-request records,
 * with numpy's arithmetic where it matters for the last printed digit: pairwise summation for
 * mean and std (np.add.reduce), the two-middle mean for the median, and the linear percentile
 * with numpy's lerp. The peak concurrency is an exact sweep line over [start, start + latency)
 * (vLLM <= 0.33 counts per-second buckets instead, which can only be higher).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* numpy's pairwise_sum (umath loops): 8 accumulators below 128 elements, halves above. */
static double pairwise_sum(const double *a, size_t n) {
    if (n < 8) {
        double s = 0.0;
        for (size_t i = 0; i < n; i++)
            s += a[i];
        return s;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++)
            r[j] = a[j];
        size_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            s += a[i];
        return s;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy's _lerp: a + (b-a)*t below t = 0.5, b - (b-a)*(1-t) from 0.5 on. */
static double np_lerp(double a, double b, double t) {
    double d = b - a;
    return t >= 0.5 ? b - d * (1.0 - t) : a + d * t;
}

static double sorted_percentile(const double *s, int n, double p) {
    if (n == 0) return 0.0;
    double vi = (p / 100.0) * (double)(n - 1);
    double lo = floor(vi);
    if (lo < 0) lo = 0;
    int i = (int)lo;
    if (i >= n - 1) return s[n - 1];
    return np_lerp(s[i], s[i + 1], vi - lo);
}

double bench_percentile(const double *values, int n, double p, double *scratch) {
    if (n <= 0) return 0.0;
    memcpy(scratch, values, (size_t)n * sizeof *scratch);
    qsort(scratch, (size_t)n, sizeof *scratch, cmp_double);
    return sorted_percentile(scratch, n, p);
}

/* Fills st (ms) from values (s) with numpy semantics; an empty list counts as [0]. scratch holds
 * n doubles. */
static void stat_compute(const double *values, int n, const double *points, int n_points,
                         double *scratch, bench_stat_t *st) {
    memset(st, 0, sizeof *st);
    if (n <= 0) return;
    double mean = pairwise_sum(values, (size_t)n) / n;
    for (int i = 0; i < n; i++) {
        double d = values[i] - mean;
        scratch[i] = d * d;
    }
    double var = pairwise_sum(scratch, (size_t)n) / n;
    memcpy(scratch, values, (size_t)n * sizeof *scratch);
    qsort(scratch, (size_t)n, sizeof *scratch, cmp_double);
    double median = (n % 2) ? scratch[n / 2] : (scratch[n / 2 - 1] + scratch[n / 2]) / 2.0;
    st->mean = mean * 1000.0;
    st->std = sqrt(var) * 1000.0;
    st->median = median * 1000.0;
    for (int k = 0; k < n_points; k++)
        st->percentiles[k] = sorted_percentile(scratch, n, points[k]) * 1000.0;
}

typedef struct sweep_event {
    double t;
    int delta; /* +1 arrival, -1 departure */
} sweep_event_t;

static int cmp_event(const void *a, const void *b) {
    const sweep_event_t *x = a, *y = b;
    if (x->t != y->t) return (x->t > y->t) - (x->t < y->t);
    return x->delta - y->delta; /* departures (-1) first at equal times */
}

/* Larger spans mean corrupt times; the bucket array would be absurd. */
#define BENCH_MAX_BUCKETS 100000000.0

int bench_metrics_compute(const bench_record_t *records, int n, double duration,
                          const bench_options_t *o, bench_metrics_t *out, bench_err_t *err) {
    if (!out || !o || n < 0 || (n > 0 && !records))
        return bench_err_set(err, "bench_metrics_compute: bad arguments");
    if (o->n_metric_percentiles < 0 || o->n_metric_percentiles > BENCH_MAX_PERCENTILES)
        return bench_err_set(err, "bench_metrics_compute: %d percentiles (at most %d)",
                             o->n_metric_percentiles, BENCH_MAX_PERCENTILES);
    memset(out, 0, sizeof *out);
    out->duration = duration;
    out->n_percentiles = o->n_metric_percentiles;
    memcpy(out->percentile_points, o->metric_percentiles,
           (size_t)o->n_metric_percentiles * sizeof(double));

    size_t n_itl = 0;
    int n_ok = 0;
    double min_start = 0, max_end = 0;
    for (int i = 0; i < n; i++) {
        const bench_record_t *r = &records[i];
        if (!r->success) {
            out->failed++;
            continue;
        }
        if (r->n_itl < 0 || (r->n_itl > 0 && !r->itl))
            return bench_err_set(err, "bench_metrics_compute: record %d has a bad ITL list", i);
        double end = r->start_time + r->latency;
        if (n_ok == 0 || r->start_time < min_start) min_start = r->start_time;
        if (n_ok == 0 || end > max_end) max_end = end;
        n_ok++;
        n_itl += (size_t)r->n_itl;
    }
    out->completed = n_ok;

    size_t n_buckets = 0;
    if (n_ok > 0) {
        double span = ceil(max_end - min_start);
        if (!(span >= 0.0) || span > BENCH_MAX_BUCKETS)
            return bench_err_set(err, "bench_metrics_compute: request times span %g s", span);
        n_buckets = (size_t)span + 1;
    }
    size_t list_len = n_itl > (size_t)n ? n_itl : (size_t)n;
    if (list_len == 0) list_len = 1;
    /* One scratch block: sweep events [2n], a metric list [list_len], the stats' scratch
     * [list_len], the per-second token buckets [n_buckets]. */
    size_t bytes =
        (size_t)2 * (size_t)n * sizeof(sweep_event_t) + (2 * list_len + n_buckets) * sizeof(double);
    char *block = calloc(1, bytes ? bytes : 1);
    if (!block)
        return bench_err_set(err, "bench_metrics_compute: out of memory (%zu bytes)", bytes);
    sweep_event_t *events = (sweep_event_t *)block;
    double *list = (double *)(block + (size_t)2 * (size_t)n * sizeof(sweep_event_t));
    double *tmp = list + list_len;
    double *buckets = tmp + list_len;

    const double *pts = o->metric_percentiles;
    int np = o->n_metric_percentiles;
    bool slo_ttft = o->goodput_ttft_ms > 0, slo_tpot = o->goodput_tpot_ms > 0,
         slo_e2el = o->goodput_e2el_ms > 0;
    int good = 0;
    int m = 0;
    for (int i = 0; i < n; i++) {
        const bench_record_t *r = &records[i];
        if (!r->success) continue;
        out->total_input_tokens += r->prompt_len;
        out->total_output_tokens += r->output_len;
        double tpot = 0.0;
        if (r->output_len > 1) tpot = (r->latency - r->ttft) / (r->output_len - 1);
        if (slo_ttft || slo_tpot || slo_e2el) {
            bool ok = true;
            if (slo_ttft && !(o->goodput_ttft_ms / 1000.0 >= r->ttft)) ok = false;
            if (slo_tpot && !(o->goodput_tpot_ms / 1000.0 >= tpot)) ok = false;
            if (slo_e2el && !(o->goodput_e2el_ms / 1000.0 >= r->latency)) ok = false;
            good += ok;
        }
        list[m++] = r->ttft;
    }
    stat_compute(list, m, pts, np, tmp, &out->ttft);

    m = 0;
    for (int i = 0; i < n; i++) {
        const bench_record_t *r = &records[i];
        if (r->success && r->output_len > 1)
            list[m++] = (r->latency - r->ttft) / (r->output_len - 1);
    }
    stat_compute(list, m, pts, np, tmp, &out->tpot);

    m = 0;
    for (int i = 0; i < n; i++) {
        const bench_record_t *r = &records[i];
        if (!r->success || r->n_itl == 0) continue;
        memcpy(list + m, r->itl, (size_t)r->n_itl * sizeof(double));
        m += r->n_itl;
    }
    stat_compute(list, m, pts, np, tmp, &out->itl);

    m = 0;
    for (int i = 0; i < n; i++)
        if (records[i].success) list[m++] = records[i].latency;
    stat_compute(list, m, pts, np, tmp, &out->e2el);

    /* Token events per second: the first at start + ttft, then the running sum of the gaps, in
     * vLLM's order of additions so bucket boundaries fall the same way. */
    memset(buckets, 0, n_buckets * sizeof(double));
    int n_ev = 0;
    for (int i = 0; i < n; i++) {
        const bench_record_t *r = &records[i];
        if (!r->success) continue;
        double t = r->start_time + r->ttft;
        for (int k = -1; k < r->n_itl; k++) {
            if (k >= 0) t += r->itl[k];
            double rel = t - min_start; /* int() truncates toward zero, as in Python */
            if (rel > -1.0 && rel < (double)n_buckets) buckets[(size_t)(long long)rel] += 1.0;
        }
        events[n_ev++] = (sweep_event_t){r->start_time, +1};
        events[n_ev++] = (sweep_event_t){r->start_time + r->latency, -1};
    }
    for (size_t b = 0; b < n_buckets; b++)
        if (buckets[b] > out->max_output_tokens_per_s) out->max_output_tokens_per_s = buckets[b];

    qsort(events, (size_t)n_ev, sizeof *events, cmp_event);
    int cur = 0, peak = 0;
    for (int k = 0; k < n_ev; k++) {
        cur += events[k].delta;
        if (cur > peak) peak = cur;
    }
    out->max_concurrent_requests = peak;

    if (duration > 0) {
        out->request_throughput = n_ok / duration;
        out->request_goodput = good / duration;
        out->output_throughput = (double)out->total_output_tokens / duration;
        out->total_token_throughput =
            (double)(out->total_input_tokens + out->total_output_tokens) / duration;
    }
    free(block);
    return 0;
}

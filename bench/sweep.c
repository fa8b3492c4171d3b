/* sweep: one profile per value of a flag, the Pareto front and a terminal plot (see sweep.h). */
#include "sweep.h"

#include <curl/curl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define PLOT_H 12 /* plot rows */

int bench_sweep_parse(const char *flag, const char *values, bench_sweep_t *out, bench_err_t *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->flag, sizeof out->flag, "%s", flag);
    for (const char *p = values;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == 0 || n >= sizeof out->pts[0].value || strcspn(p, "\"\\ ") < n)
            return bench_err_set(err,
                                 "sweep values: \"%s\" is not a comma-separated list of "
                                 "values (e.g. 64,128,256)",
                                 values);
        if (out->n == BENCH_SWEEP_MAX)
            return bench_err_set(err, "sweep values: at most %d", BENCH_SWEEP_MAX);
        memcpy(out->pts[out->n].value, p, n);
        out->pts[out->n++].value[n] = '\0';
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}

/* Pareto: no other point has at least the throughput at no more latency, one of them strictly.
 * Best: the most throughput. */
static void mark(bench_sweep_t *sw) {
    int best = -1;
    for (int i = 0; i < sw->n; i++) {
        bench_sweep_point_t *a = &sw->pts[i];
        if (!a->ok) continue;
        a->pareto = true;
        for (int j = 0; j < sw->n && a->pareto; j++) {
            const bench_sweep_point_t *b = &sw->pts[j];
            if (j == i || !b->ok) continue;
            if (b->out_tps >= a->out_tps && b->tpot_ms <= a->tpot_ms &&
                (b->out_tps > a->out_tps || b->tpot_ms < a->tpot_ms))
                a->pareto = false;
        }
        if (best < 0 || a->out_tps > sw->pts[best].out_tps) best = i;
    }
    if (best >= 0) sw->pts[best].best = true;
}

int bench_sweep_run(bench_sweep_t *sw, const bench_options_t *o, bench_sweep_set_fn set, void *user,
                    bench_progress_fn progress, void *puser, bench_err_t *err) {
    bench_options_t run = *o;
    if (run.num_warmups < BENCH_SWEEP_WARMUPS) run.num_warmups = BENCH_SWEEP_WARMUPS;
    int good = 0;
    for (int i = 0; i < sw->n; i++) {
        bench_sweep_point_t *p = &sw->pts[i];
        if (o->stop && atomic_load(o->stop)) {
            sw->stopped = true;
            snprintf(p->error, sizeof p->error, "not run (stopped)");
            continue;
        }
        bench_err_t e = {{0}};
        if (set(user, sw->flag, p->value, &e) < 0) {
            snprintf(p->error, sizeof p->error, "%s", e.msg);
            continue;
        }
        if (bench_run(&run, progress, puser, &p->result, &e) < 0) {
            p->result = NULL;
            snprintf(p->error, sizeof p->error, "%s", e.msg);
            continue;
        }
        const bench_metrics_t *m = &p->result->metrics;
        if (p->result->stopped) sw->stopped = true;
        if (m->completed == 0) {
            snprintf(p->error, sizeof p->error, "no request succeeded");
            continue;
        }
        p->ok = true;
        p->out_tps = m->output_throughput;
        p->req_tps = m->request_throughput;
        p->ttft_ms = m->ttft.mean;
        p->tpot_ms = m->tpot.mean;
        p->p99_tpot_ms = NAN;
        for (int k = 0; k < m->n_percentiles; k++)
            if (m->percentile_points[k] == 99) p->p99_tpot_ms = m->tpot.percentiles[k];
        good++;
    }
    mark(sw);
    return good ? 0 : bench_err_set(err, "no point of the sweep gave a result");
}

/* The plot: throughput (y) against mean TPOT (x), each point by its number in the table, the
 * best as '*'. */
static void plot(FILE *f, const bench_sweep_t *sw, int width) {
    double x0 = INFINITY, x1 = -INFINITY, y1 = 0;
    for (int i = 0; i < sw->n; i++) {
        const bench_sweep_point_t *p = &sw->pts[i];
        if (!p->ok) continue;
        x0 = fmin(x0, p->tpot_ms);
        x1 = fmax(x1, p->tpot_ms);
        y1 = fmax(y1, p->out_tps);
    }
    if (!isfinite(x0)) return;
    double pad = x1 > x0 ? (x1 - x0) * 0.1 : fmax(x0 * 0.1, 0.1);
    x0 = fmax(0, x0 - pad);
    x1 += pad;
    y1 = y1 > 0 ? y1 * 1.1 : 1;
    int w = width - 12;
    if (w > 64) w = 64;
    if (w < 16) w = 16;
    char grid[PLOT_H][80];
    for (int r = 0; r < PLOT_H; r++) {
        memset(grid[r], ' ', (size_t)w);
        grid[r][w] = '\0';
    }
    static const char marks[] = "123456789ABCDEFG";
    for (int i = 0; i < sw->n; i++) {
        const bench_sweep_point_t *p = &sw->pts[i];
        if (!p->ok) continue;
        int c = (int)lround((p->tpot_ms - x0) / (x1 - x0) * (w - 1));
        int r = PLOT_H - 1 - (int)lround(p->out_tps / y1 * (PLOT_H - 1));
        c = c < 0 ? 0 : c >= w ? w - 1 : c;
        r = r < 0 ? 0 : r >= PLOT_H ? PLOT_H - 1 : r;
        grid[r][c] = p->best ? '*' : marks[i];
    }
    fprintf(f, "output tok/s\n");
    for (int r = 0; r < PLOT_H; r++) {
        double y = y1 * (PLOT_H - 1 - r) / (PLOT_H - 1);
        if (r == 0 || r == PLOT_H - 1 || r == PLOT_H / 2)
            fprintf(f, "%9.1f |%s\n", y, grid[r]);
        else
            fprintf(f, "%9s |%s\n", "", grid[r]);
    }
    fprintf(f, "%9s +", "");
    for (int c = 0; c < w; c++)
        fputc('-', f);
    fprintf(f, "\n%9s %-*.2f%*.2f\n", "", w / 2, x0, w - w / 2, x1);
    fprintf(f, "%9s %*s\n", "", w, "mean TPOT (ms)");
    fprintf(f, "points:");
    for (int i = 0; i < sw->n; i++)
        if (sw->pts[i].ok) fprintf(f, " %c=%s", sw->pts[i].best ? '*' : marks[i], sw->pts[i].value);
    fprintf(f, "  (* best throughput)\n");
}

void bench_sweep_print(FILE *f, const bench_sweep_t *sw, int width) {
    fprintf(f, "Sweep of %s%s\n", sw->flag, sw->stopped ? " (stopped: partial)" : "");
    fprintf(f, "%2s %-10s %8s %11s %9s %9s %9s\n", "#", "value", "req/s", "out tok/s", "TTFT ms",
            "TPOT ms", "P99 TPOT");
    for (int i = 0; i < sw->n; i++) {
        const bench_sweep_point_t *p = &sw->pts[i];
        if (!p->ok) {
            fprintf(f, "%2d %-10s %s\n", i + 1, p->value, p->error);
            continue;
        }
        fprintf(f, "%2d %-10s %8.2f %11.1f %9.2f %9.2f %9.2f  %s%s\n", i + 1, p->value, p->req_tps,
                p->out_tps, p->ttft_ms, p->tpot_ms, p->p99_tpot_ms, p->pareto ? "pareto" : "",
                p->best ? " best *" : "");
    }
    plot(f, sw, width);
}

void bench_sweep_free(bench_sweep_t *sw) {
    for (int i = 0; i < sw->n; i++) {
        bench_result_destroy(sw->pts[i].result);
        sw->pts[i].result = NULL;
    }
}

static size_t sink(char *p, size_t size, size_t nmemb, void *user) {
    char *buf = user;
    size_t n = size * nmemb, have = strlen(buf), room = 511 - have;
    memcpy(buf + have, p, n < room ? n : room);
    buf[have + (n < room ? n : room)] = '\0';
    return n;
}

int bench_sweep_set_http(void *user, const char *flag, const char *value, bench_err_t *err) {
    const bench_options_t *o = user;
    char url[512], body[160], auth[320], reply[512] = ""; /* values hold no '"' (parse) */
    snprintf(url, sizeof url, "%s/admin/flags/%s", o->base_url, flag);
    snprintf(body, sizeof body, "{\"value\": \"%s\"}", value);
    CURL *e = curl_easy_init();
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    if (o->api_key[0]) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
        hd = curl_slist_append(hd, auth);
    }
    if (!e || !hd) {
        curl_easy_cleanup(e);
        curl_slist_free_all(hd);
        return bench_err_set(err, "out of memory");
    }
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 600L); /* a rebuild drains the batch first */
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, reply);
    CURLcode rc = curl_easy_perform(e);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(e);
    curl_slist_free_all(hd);
    if (rc != CURLE_OK) return bench_err_set(err, "%s: %s", url, curl_easy_strerror(rc));
    if (status != 200) return bench_err_set(err, "%s=%s: HTTP %ld: %s", flag, value, status, reply);
    return 0;
}

/* ui_compare: /compare at a glance (see ui_compare.h). */
#include "ui_compare.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef enum { HIGHER, LOWER } better_t;

typedef struct metric {
    const char *name;
    better_t better;
    unsigned needs; /* BENCH_METRIC_* bit the base must report, 0: always */
    int prec;
} metric_t;

enum { M_OUT, M_TOTAL, M_REQ, M_TTFT, M_TTFT99, M_TPOT, M_TPOT99, M_ITL, M_E2E, M_FAILED, N_M };

static const metric_t metrics[N_M] = {
    {"output tok/s", HIGHER, 0, 1},
    {"total tok/s", HIGHER, 0, 1},
    {"requests/s", HIGHER, 0, 2},
    {"TTFT mean ms", LOWER, BENCH_METRIC_TTFT, 1},
    {"TTFT p99 ms", LOWER, BENCH_METRIC_TTFT, 1},
    {"TPOT mean ms", LOWER, BENCH_METRIC_TPOT, 2},
    {"TPOT p99 ms", LOWER, BENCH_METRIC_TPOT, 2},
    {"ITL mean ms", LOWER, BENCH_METRIC_ITL, 2},
    {"E2E mean ms", LOWER, BENCH_METRIC_E2EL, 1},
    {"failed", LOWER, 0, 0},
};

/* The p99 (or the highest point computed) of a latency. */
static double p99(const bench_metrics_t *m, const bench_stat_t *s) {
    int best = -1;
    for (int i = 0; i < m->n_percentiles; i++)
        if (best < 0 || fabs(m->percentile_points[i] - 99) < fabs(m->percentile_points[best] - 99))
            best = i;
    return best >= 0 ? s->percentiles[best] : NAN;
}

/* Metric k of a run; NaN where it has none (latencies of a run without a success). */
static double value(const bench_result_t *r, int k) {
    const bench_metrics_t *m = &r->metrics;
    bool lat = m->completed > 0;
    switch (k) {
        case M_OUT:
            return m->output_throughput;
        case M_TOTAL:
            return m->total_token_throughput;
        case M_REQ:
            return m->request_throughput;
        case M_TTFT:
            return lat ? m->ttft.mean : NAN;
        case M_TTFT99:
            return lat ? p99(m, &m->ttft) : NAN;
        case M_TPOT:
            return lat ? m->tpot.mean : NAN;
        case M_TPOT99:
            return lat ? p99(m, &m->tpot) : NAN;
        case M_ITL:
            return lat ? m->itl.mean : NAN;
        case M_E2E:
            return lat ? m->e2el.mean : NAN;
        default:
            return m->failed;
    }
}

/* The same workload: profile, prompts, lengths, arrival. */
static bool same_workload(const bench_result_t *a, const bench_result_t *b) {
    const bench_options_t *x = &a->options, *y = &b->options;
    return !strcmp(x->profile, y->profile) && x->dataset == y->dataset &&
           x->num_prompts == y->num_prompts && x->input_len == y->input_len &&
           x->output_len == y->output_len && x->prefix_len == y->prefix_len &&
           x->max_concurrency == y->max_concurrency &&
           (x->request_rate == y->request_rate ||
            (isinf(x->request_rate) && isinf(y->request_rate)));
}

/* A repeat of r: a complete run of the same workload and the same server flags. */
static bool repeat_of(const bench_result_t *r, const bench_result_t *o) {
    return !o->stopped && o->metrics.completed > 0 && same_workload(r, o) &&
           !strcmp(r->server_flags_json, o->server_flags_json);
}

/* The repeats of r in the store (r itself counted once, in the store or not): how many, and
 * each metric's noise, half the spread over the mean, in % (NaN with fewer than two). */
static int noise_of(const bench_result_t *r, const bench_result_t *const *store, int n_store,
                    double *noise) {
    double lo[N_M], hi[N_M], sum[N_M];
    int n[N_M] = {0}, runs = 1;
    for (int k = 0; k < N_M; k++) {
        double v = value(r, k);
        lo[k] = hi[k] = sum[k] = v;
        n[k] = !isnan(v);
    }
    for (int i = 0; i < n_store; i++) {
        if (store[i] == r || !repeat_of(r, store[i])) continue;
        runs++;
        for (int k = 0; k < N_M; k++) {
            double v = value(store[i], k);
            if (isnan(v)) continue;
            if (!n[k]) lo[k] = hi[k] = sum[k] = 0;
            lo[k] = n[k] && lo[k] < v ? lo[k] : v;
            hi[k] = n[k] && hi[k] > v ? hi[k] : v;
            sum[k] += v;
            n[k]++;
        }
    }
    for (int k = 0; k < N_M; k++) {
        double mean = n[k] ? sum[k] / n[k] : NAN;
        noise[k] = n[k] >= 2 && mean != 0 ? (hi[k] - lo[k]) / 2 / fabs(mean) * 100 : NAN;
    }
    return runs;
}

typedef struct out {
    ui_compare_out_fn fn;
    void *user;
} out_t;

static void emit(const out_t *o, ui_txt_style_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void emit(const out_t *o, ui_txt_style_t st, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o->fn(o->user, st, line);
}

typedef struct flags_text {
    char buf[400];
    size_t used;
} flags_text_t;

static void add_flag(void *user, const char *name, const char *run, const char *base) {
    flags_text_t *t = user;
    /* JSON strings without their quotes: the flags' values are plain words and numbers */
    char r[128], b[128];
    snprintf(r, sizeof r, "%s", run[0] == '"' ? run + 1 : run);
    snprintf(b, sizeof b, "%s", base[0] == '"' ? base + 1 : base);
    if (r[0] && r[strlen(r) - 1] == '"' && run[0] == '"') r[strlen(r) - 1] = '\0';
    if (b[0] && b[strlen(b) - 1] == '"' && base[0] == '"') b[strlen(b) - 1] = '\0';
    int n = snprintf(t->buf + t->used, sizeof t->buf - t->used, "%s%s %s -> %s",
                     t->used ? ", " : "", name, b, r);
    if (n > 0 && (size_t)n < sizeof t->buf - t->used) t->used += (size_t)n;
}

static void workload_line(const out_t *o, const bench_result_t *r) {
    const bench_options_t *w = &r->options;
    char rate[32];
    if (isinf(w->request_rate))
        snprintf(rate, sizeof rate, "all at once");
    else
        snprintf(rate, sizeof rate, "%g req/s", w->request_rate);
    emit(o, UI_TXT_INFO, "  workload: %s, %d prompts, %d in / %d out tokens, %s%s",
         w->profile[0] ? w->profile : "custom", w->num_prompts, w->input_len, w->output_len, rate,
         w->max_concurrency > 0 ? ", capped" : "");
}

static void compare_one(const out_t *o, const char *bl, const bench_result_t *base, const char *rl,
                        const bench_result_t *run, const bench_result_t *const *store, int n_store,
                        bool ascii) {
    emit(o, UI_TXT_NORMAL, "%s vs base %s%s", rl, bl,
         same_workload(base, run) ? "" : "  (other workloads: the numbers do not compare)");
    flags_text_t ft = {{0}, 0};
    int nf = bench_flags_diff(base, run, add_flag, &ft);
    if (nf < 0)
        emit(o, UI_TXT_INFO, "  flags: unknown (not a Tachyon server)");
    else if (nf == 0)
        emit(o, UI_TXT_INFO, "  flags: the same as the base's");
    else
        emit(o, UI_TXT_NORMAL, "  flags: %s", ft.buf);
    double nb[N_M], nr[N_M];
    int rb = noise_of(base, store, n_store, nb), rr = noise_of(run, store, n_store, nr);
    bool noise = rb >= 2 || rr >= 2;
    emit(o, UI_TXT_INFO, "  %-13s %10s %10s %8s %7s  %s", "metric", bl, rl, "change",
         noise ? "noise" : "", "verdict");
    int better = 0, worse = 0, same = 0;
    const char *up = ascii ? "+" : "\xe2\x96\xb2", *down = ascii ? "-" : "\xe2\x96\xbc";
    for (int k = 0; k < N_M; k++) {
        if (metrics[k].needs && !(base->options.percentile_metrics & metrics[k].needs)) continue;
        double b = value(base, k), r = value(run, k);
        double nz = NAN;
        if (!isnan(nb[k]) || !isnan(nr[k]))
            nz = fmax(isnan(nb[k]) ? 0 : nb[k], isnan(nr[k]) ? 0 : nr[k]);
        char vb[24], vr[24], ch[24] = "n/a", nzs[16] = "", verdict[32] = "";
        int p = metrics[k].prec;
        snprintf(vb, sizeof vb, isnan(b) ? "n/a" : "%.*f", p, b);
        snprintf(vr, sizeof vr, isnan(r) ? "n/a" : "%.*f", p, r);
        if (!isnan(nz)) snprintf(nzs, sizeof nzs, "\xc2\xb1%.1f%%", nz);
        if (ascii && !isnan(nz)) snprintf(nzs, sizeof nzs, "+-%.1f%%", nz);
        ui_txt_style_t st = UI_TXT_NORMAL;
        if (!isnan(b) && !isnan(r)) {
            double d = b != 0 ? (r - b) / fabs(b) * 100 : (r == 0 ? 0 : INFINITY);
            if (b != 0)
                snprintf(ch, sizeof ch, "%+.1f%%", d);
            else
                snprintf(ch, sizeof ch, r == 0 ? "=" : "new");
            double within = isnan(nz) ? UI_COMPARE_MIN_CHANGE : nz;
            if (r == b || fabs(d) <= within) {
                snprintf(verdict, sizeof verdict, "= same%s",
                         isnan(nz) || r == b ? "" : " (noise)");
                same++;
            } else if ((r > b) == (metrics[k].better == HIGHER)) {
                snprintf(verdict, sizeof verdict, "%s better", r > b ? up : down);
                st = UI_TXT_BETTER;
                better++;
            } else {
                snprintf(verdict, sizeof verdict, "%s worse", r > b ? up : down);
                st = UI_TXT_WORSE;
                worse++;
            }
        }
        emit(o, st, "  %-13s %10s %10s %8s %7s  %s", metrics[k].name, vb, vr, ch, nzs, verdict);
    }
    if (noise)
        emit(o, UI_TXT_INFO, "  noise: half the spread of %d run%s like the base, %d like %s", rb,
             rb == 1 ? "" : "s", rr, rl);
    else
        emit(o, UI_TXT_INFO,
             "  no repeats: changes under %.0f%% count as the same (repeat a run to see the noise)",
             UI_COMPARE_MIN_CHANGE);
    emit(o,
         worse    ? UI_TXT_WORSE
         : better ? UI_TXT_BETTER
                  : UI_TXT_NORMAL,
         "  %s: %d better, %d worse, %d the same", rl, better, worse, same);
}

void ui_compare_lines(const results_set_t *set, const bench_result_t *const *store, int n_store,
                      bool ascii, ui_compare_out_fn fn, void *user) {
    out_t o = {fn, user};
    const bench_result_t *base = set->r[0];
    emit(&o, UI_TXT_NORMAL, "/compare: base %s (%s)%s", set->label[0], base->date,
         base->stopped ? " [stopped early]" : "");
    workload_line(&o, base);
    for (int i = 1; i < set->n; i++)
        compare_one(&o, set->label[0], base, set->label[i], set->r[i], store, n_store, ascii);
}

/* ui_fleet: a replica's /metrics text to numbers, rates and the table's rows (pure; the sampler
 * thread is in ui_fleet_http.c). */
#include "ui_fleet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chart.h"

// ---------------------------------------------------------------------------------------------
// Prometheus text

static bool name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == ':';
}

/* The value of label key in the label set labels[0, n) (name="value" pairs, commas between),
 * unescaped into buf (cut to size); false when it is not there. */
static bool label_value(const char *labels, size_t n, const char *key, char *buf, size_t size) {
    size_t k = strlen(key), i = 0;
    while (i < n) {
        while (i < n && (labels[i] == ',' || labels[i] == ' '))
            i++;
        size_t name = i;
        while (i < n && name_char(labels[i]))
            i++;
        bool match = i - name == k && !memcmp(labels + name, key, k);
        if (i + 1 >= n || labels[i] != '=' || labels[i + 1] != '"') return false;
        size_t o = 0;
        for (i += 2; i < n && labels[i] != '"'; i++) {
            char ch = labels[i];
            if (ch == '\\' && i + 1 < n) {
                ch = labels[++i];
                if (ch == 'n') ch = '\n';
            }
            if (match && o + 1 < size) buf[o++] = ch;
        }
        i++; /* the closing quote */
        if (match) {
            buf[o] = 0;
            return true;
        }
    }
    return false;
}

/* Where the label set that starts at p (just after '{') ends: its '}', quotes and escapes
 * respected; NULL when the line ends first. */
static const char *labels_end(const char *p, const char *end) {
    bool quoted = false;
    for (; p < end; p++) {
        if (quoted && *p == '\\')
            p++;
        else if (*p == '"')
            quoted = !quoted;
        else if (!quoted && *p == '}')
            return p;
    }
    return NULL;
}

enum { S_RUNNING, S_WAITING, S_KV, S_GPU_KV, S_GEN, S_PROMPT, S_DONE, S_N };
static const char *const series_names[S_N] = {
    "vllm:num_requests_running",  "vllm:num_requests_waiting",    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",  "vllm:generation_tokens_total", "vllm:prompt_tokens_total",
    "vllm:request_success_total",
};

int ui_fleet_parse(const char *text, size_t len, ui_fleet_scrape_t *out) {
    double sum[S_N] = {0};
    int count[S_N] = {0};
    memset(out, 0, sizeof *out);
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        const char *line = p, *q = p;
        p = eol + 1;
        while (q < eol && name_char(*q))
            q++;
        if (q == line || *line == '#') continue;
        size_t name_len = (size_t)(q - line);
        int s = 0;
        while (s < S_N &&
               (strlen(series_names[s]) != name_len || memcmp(series_names[s], line, name_len)))
            s++;
        if (s == S_N) continue;
        const char *labels = NULL;
        size_t labels_len = 0;
        if (q < eol && *q == '{') {
            const char *close = labels_end(q + 1, eol);
            if (!close) continue;
            labels = q + 1;
            labels_len = (size_t)(close - labels);
            q = close + 1;
        }
        while (q < eol && (*q == ' ' || *q == '\t'))
            q++;
        char num[64];
        size_t k = 0;
        while (q < eol && *q != ' ' && *q != '\t' && *q != '\r' && k + 1 < sizeof num)
            num[k++] = *q++;
        num[k] = 0;
        bool longer = q < eol && *q != ' ' && *q != '\t' && *q != '\r';
        char *num_end;
        double v = strtod(num, &num_end);
        if (k == 0 || *num_end || longer) continue;
        sum[s] += v;
        count[s]++;
        if (!out->model[0] && labels)
            label_value(labels, labels_len, "model_name", out->model, sizeof out->model);
    }
    if (count[S_RUNNING] == 0) return -1;
    out->running = sum[S_RUNNING];
    out->waiting = sum[S_WAITING];
    out->kv = count[S_KV]       ? sum[S_KV] / count[S_KV]
              : count[S_GPU_KV] ? sum[S_GPU_KV] / count[S_GPU_KV]
                                : NAN;
    out->gen_tokens = sum[S_GEN];
    out->prompt_tokens = sum[S_PROMPT];
    out->requests_done = sum[S_DONE];
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Rows

void ui_fleet_row_init(ui_fleet_row_t *r, const char *url) {
    memset(r, 0, sizeof *r);
    snprintf(r->url, sizeof r->url, "%s", url);
    r->gen_tps = r->prompt_tps = NAN;
    r->m.kv = NAN;
}

static double rate(double now_v, double then_v, double dt) {
    return now_v >= then_v && dt > 0 ? (now_v - then_v) / dt : NAN;
}

void ui_fleet_row_update(ui_fleet_row_t *r, const ui_fleet_scrape_t *s, const char *why, double t) {
    bool up = s != NULL;
    if (!r->seen || up != r->up) r->since = t;
    if (up) {
        if (r->seen && r->up) {
            r->gen_tps = rate(s->gen_tokens, r->m.gen_tokens, t - r->t);
            r->prompt_tps = rate(s->prompt_tokens, r->m.prompt_tokens, t - r->t);
        } else {
            r->gen_tps = r->prompt_tps = NAN;
        }
        r->m = *s;
        r->t = t;
        r->why[0] = 0;
    } else {
        snprintf(r->why, sizeof r->why, "%s", why && *why ? why : "no answer");
        r->gen_tps = r->prompt_tps = NAN;
    }
    r->seen = true;
    r->up = up;
}

/* NaN stays NaN only when every term is NaN. */
static void add(double *acc, double v) {
    if (isnan(v)) return;
    *acc = isnan(*acc) ? v : *acc + v;
}

void ui_fleet_total(const ui_fleet_row_t *rows, int n, ui_fleet_row_t *out) {
    ui_fleet_row_init(out, "fleet");
    out->seen = out->up = true;
    out->n_rows = n;
    double kv = NAN;
    int n_kv = 0;
    out->gen_tps = out->prompt_tps = NAN;
    for (int i = 0; i < n; i++) {
        const ui_fleet_row_t *r = &rows[i];
        if (!r->up) continue;
        out->n_up++;
        out->m.running += r->m.running;
        out->m.waiting += r->m.waiting;
        out->m.requests_done += r->m.requests_done;
        add(&out->gen_tps, r->gen_tps);
        add(&out->prompt_tps, r->prompt_tps);
        if (!isnan(r->m.kv)) {
            add(&kv, r->m.kv);
            n_kv++;
        }
        if (!out->m.model[0]) snprintf(out->m.model, sizeof out->m.model, "%s", r->m.model);
    }
    out->m.kv = n_kv ? kv / n_kv : NAN;
}

// ---------------------------------------------------------------------------------------------
// The table's text

/* Columns after the URL: " state  run  wait    KV%  gen tok/s  prompt tok/s    done" */
#define NUMS_W  57
#define INDEX_W 4 /* "  1 " */
#define MIN_URL 12

void ui_fleet_columns(int width, ui_fleet_cols_t *c) {
    c->width = width > 0 ? width : 0;
    int rest = width - INDEX_W - NUMS_W;
    c->model_w = 0;
    if (rest >= 56) {
        c->model_w = rest - 42 < 32 ? rest - 42 : 32;
        rest -= c->model_w + 2;
    }
    c->url_w = rest > MIN_URL ? rest : MIN_URL;
}

/* buf padded with spaces (or cut) to exactly w columns: the text is ASCII. */
static void fit(char *buf, size_t size, int w) {
    if (size == 0) return;
    if ((size_t)w >= size) w = (int)size - 1;
    size_t n = strlen(buf);
    if (n < (size_t)w) memset(buf + n, ' ', (size_t)w - n);
    buf[w] = 0;
}

/* s in w columns, its end kept after a '~' when it is longer. */
static void tail_fit(const char *s, int w, char *out, size_t size) {
    size_t n = strlen(s);
    if (n <= (size_t)w)
        snprintf(out, size, "%-*s", w, s);
    else
        snprintf(out, size, "~%s", s + n - (size_t)(w - 1));
}

/* A number for a column: "-" for NaN, decimals below 100,000, compact above. */
static void num(double v, int decimals, char *buf, size_t size) {
    if (isnan(v))
        snprintf(buf, size, "-");
    else if (fabs(v) < 1e5)
        snprintf(buf, size, "%.*f", decimals, v);
    else
        chart_format_value(v, buf, size);
}

void ui_fleet_head_text(const ui_fleet_cols_t *c, char *buf, size_t size) {
    int n =
        snprintf(buf, size, "  # %-*s state  run  wait    KV%%  gen tok/s  prompt tok/s    done",
                 c->url_w, "replica");
    if (c->model_w > 0 && n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "  %s", "model");
    fit(buf, size, c->width);
}

/* A URL without its "http://": the column is narrow. */
static const char *short_url(const char *url) {
    return strncmp(url, "http://", 7) ? url : url + 7;
}

void ui_fleet_row_text(const ui_fleet_cols_t *c, const ui_fleet_row_t *r, int index, double now,
                       char *buf, size_t size) {
    char url[UI_FLEET_URL + 32], idx[8] = "";
    if (index > 0) snprintf(idx, sizeof idx, "%3d", index > 999 ? 999 : index);
    if (index == 0)
        snprintf(url, sizeof url, "fleet: %d/%d up", r->n_up, r->n_rows);
    else
        snprintf(url, sizeof url, "%s", short_url(r->url));
    char cut[UI_FLEET_URL + 32];
    tail_fit(url, c->url_w, cut, sizeof cut);
    const char *state = index == 0 ? "" : !r->seen ? "--" : r->up ? "up" : "down";
    int n;
    if (index > 0 && !r->up) {
        char since[32] = "";
        double secs = floor(now - r->since);
        if (r->seen) chart_format_window(secs < 1 ? 1 : secs, since, sizeof since);
        n = snprintf(buf, size, "%3s %s %-5s %s%s%s", idx, cut, state,
                     r->seen ? r->why : "not read yet", r->seen ? " for " : "", since);
    } else {
        char run[16], wait[16], kv[16], gen[16], prompt[16], done[16];
        num(r->m.running, 0, run, sizeof run);
        num(r->m.waiting, 0, wait, sizeof wait);
        num(r->m.kv * 100, 1, kv, sizeof kv);
        if (!isnan(r->m.kv)) strcat(kv, "%");
        num(r->gen_tps, 1, gen, sizeof gen);
        num(r->prompt_tps, 1, prompt, sizeof prompt);
        num(r->m.requests_done, 0, done, sizeof done);
        n = snprintf(buf, size, "%3s %s %-5s%5s %5s %6s %10s %13s %7s", idx, cut, state, run, wait,
                     kv, gen, prompt, done);
        if (c->model_w > 0 && n > 0 && (size_t)n < size)
            snprintf(buf + n, size - (size_t)n, "  %.*s", c->model_w, r->m.model);
    }
    (void)n;
    fit(buf, size, c->width);
}

// ---------------------------------------------------------------------------------------------
// A benchmark's rows

#define RUN_URL_W 24

void ui_fleet_run_head_text(char *buf, size_t size) {
    snprintf(buf, size, "  # %-*s state  requests  gen tokens  gen tok/s  KV%% at end", RUN_URL_W,
             "replica");
}

/* a - b of a counter when both reads were good and it did not go down; NaN otherwise. */
static double delta(const ui_fleet_row_t *b, const ui_fleet_row_t *a, double bv, double av) {
    return b->up && a->up && av >= bv ? av - bv : NAN;
}

void ui_fleet_run_text(const ui_fleet_row_t *b, const ui_fleet_row_t *a, int index, double duration,
                       char *buf, size_t size) {
    char url[RUN_URL_W + 8];
    tail_fit(short_url(a->url), RUN_URL_W, url, sizeof url);
    if (!a->up) {
        snprintf(buf, size, "%3d %s down  %s%s", index, url, a->why,
                 b->up ? " (up before the run)" : "");
        return;
    }
    double reqs = delta(b, a, b->m.requests_done, a->m.requests_done);
    double gen = delta(b, a, b->m.gen_tokens, a->m.gen_tokens);
    char r[16], g[16], tps[16], kv[16];
    num(reqs, 0, r, sizeof r);
    num(gen, 0, g, sizeof g);
    num(duration > 0 ? gen / duration : NAN, 1, tps, sizeof tps);
    num(a->m.kv * 100, 1, kv, sizeof kv);
    if (!isnan(a->m.kv)) strcat(kv, "%");
    snprintf(buf, size, "%3d %s %-5s %9s %11s %10s %11s", index, url, "up", r, g, tps, kv);
}

int ui_fleet_metrics_url(const char *url, char *buf, size_t size) {
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    static const char suffix[] = "/metrics";
    size_t k = sizeof suffix - 1;
    bool has = n >= k && !memcmp(url + n - k, suffix, k);
    int w = snprintf(buf, size, "%.*s%s", (int)n, url, has ? "" : suffix);
    return w < 0 || (size_t)w >= size ? -1 : 0;
}

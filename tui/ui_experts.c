#include "ui_experts.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define LABEL_W 7  /* "L 93  |" */
#define TAIL_W  18 /* "| x 12.34 1234567" */

typedef struct out {
    char *p;
    size_t len, cap;
} out_t;

static void put(out_t *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n < o->cap - o->len ? (size_t)n : o->cap - o->len - 1;
}

static uint64_t count(const stats_experts_t *x, bool window, int row, int e) {
    size_t i = (size_t)row * (size_t)x->n_experts + (size_t)e;
    return window ? x->window[i] : x->total[i];
}

/* Tokens per expert of cell c (experts [c * per, (c + 1) * per) of row r). */
static double cell_mean(const stats_experts_t *x, bool window, int r, int c, int per) {
    uint64_t v = 0;
    int n = 0;
    for (int e = c * per; e < x->n_experts && e < (c + 1) * per; e++, n++)
        v += count(x, window, r, e);
    return n ? (double)v / n : 0.0;
}

char *ui_experts_render(const stats_experts_t *x, int width) {
    if (width < 40) width = 40;
    size_t cap = (size_t)(x->n_layers + 3) * (size_t)(width + TAIL_W + 8) + 512;
    out_t o = {malloc(cap), 0, cap};
    if (!o.p) return NULL;
    o.p[0] = 0;
    if (x->n_layers == 0 || x->n_experts == 0) {
        put(&o, "no expert load: the model has no MoE layers (or too many to track)\n");
        return o.p;
    }
    const int E = x->n_experts;
    bool window = false;
    for (int i = 0; i < x->n_layers * E && !window; i++)
        window = x->window[i] > 0;
    const int room = width - LABEL_W - TAIL_W;
    const int per = (E + room - 1) / room; /* experts a cell */
    const int cells = (E + per - 1) / per;
    if (window)
        put(&o, "expert load over the last %.1f s", x->window_s);
    else
        put(&o, "expert load since start (nothing routed in the last %.1f s)", x->window_s);
    put(&o, ": %d MoE layers x %d experts, %d expert%s a cell, left to right\n", x->n_layers, E,
        per, per == 1 ? "" : "s");
    put(&o, "each row shaded by its busiest cell \"%s\"; then busiest / mean expert, tokens\n",
        UI_EXPERTS_RAMP);
    for (int r = 0; r < x->n_layers; r++) {
        uint64_t sum = 0, top = 0;
        double cell_max = 0.0;
        for (int e = 0; e < E; e++) {
            uint64_t v = count(x, window, r, e);
            sum += v;
            if (v > top) top = v;
        }
        for (int c = 0; c < cells; c++)
            if (cell_mean(x, window, r, c, per) > cell_max)
                cell_max = cell_mean(x, window, r, c, per);
        put(&o, "L%-4d |", x->layer[r]);
        for (int c = 0; c < cells; c++) {
            double v = cell_mean(x, window, r, c, per);
            int level = v > 0 ? 1 + (int)(8.0 * v / cell_max) : 0;
            put(&o, "%c", UI_EXPERTS_RAMP[level > 9 ? 9 : level]);
        }
        put(&o, "| x%5.2f %llu\n", sum ? (double)top * E / (double)sum : 0.0,
            (unsigned long long)sum);
    }
    return o.p;
}

#include "ui_series.h"

#include <math.h>

void ui_series_init(ui_series_t *s) {
    s->head = 0;
    s->n = 0;
}

void ui_series_push(ui_series_t *s, double v) {
    s->v[s->head] = v;
    s->head = (s->head + 1) % UI_SERIES_CAP;
    if (s->n < UI_SERIES_CAP) s->n++;
}

double ui_series_at(const ui_series_t *s, int i) {
    if (i < 0 || i >= s->n) return NAN;
    return s->v[(s->head - 1 - i + UI_SERIES_CAP) % UI_SERIES_CAP];
}

double ui_series_last(const ui_series_t *s) {
    return ui_series_at(s, 0);
}

void ui_series_resample(const ui_series_t *s, double span, double *out, int n_out) {
    if (n_out <= 0) return;
    if (!(span >= 1)) span = 1;
    double per = span / n_out; /* samples per point */
    for (int p = 0; p < n_out; p++) {
        /* point p covers ages (newest = 0) in [lo, hi) counted back from the right edge */
        double hi_age = (n_out - p) * per, lo_age = (n_out - 1 - p) * per;
        int a0 = (int)floor(lo_age), a1 = (int)ceil(hi_age) - 1;
        if (a1 < a0) a1 = a0;
        double best = NAN;
        for (int a = a0; a <= a1; a++) {
            double v = ui_series_at(s, a);
            if (!isnan(v) && (isnan(best) || v > best)) best = v;
        }
        out[p] = best;
    }
}

/*
 * ui_series: the console's metric history. One fixed-size ring of samples per metric, pushed at
 * a fixed period by the UI thread, and resampled into exactly the number of points a chart of a
 * given width shows for a chosen time window (so a chart's title can name its window whatever
 * its width).
 *
 *     ui_series_t s;
 *     ui_series_init(&s);
 *     ui_series_push(&s, running);                  // every UI_SAMPLE_MS
 *     double pts[2 * 40];
 *     ui_series_resample(&s, 60.0 / (UI_SAMPLE_MS / 1e3), pts, 2 * 40);   // last minute
 *     chart_render(pts, 2 * 40, &opts, rows, sizeof rows);
 *
 * No allocation: the ring lives in the struct.
 */
#ifndef TACHYON_UI_SERIES_H
#define TACHYON_UI_SERIES_H

#define UI_SERIES_CAP 4096 /* samples kept: 17 min at 4 per second */

typedef struct ui_series {
    double v[UI_SERIES_CAP];
    int head; /* index of the next write */
    int n;    /* samples held, <= UI_SERIES_CAP */
} ui_series_t;

void ui_series_init(ui_series_t *s);
void ui_series_push(ui_series_t *s, double v);

/* The newest sample, NaN when empty. */
double ui_series_last(const ui_series_t *s);

/* The i-th newest sample (0 = newest), NaN when i is outside what is held. */
double ui_series_at(const ui_series_t *s, int i);

/* Maps the newest `span` samples (span >= 1; may exceed what is held) onto n_out points, oldest
 * first, the newest sample at the right: each point is the maximum of the samples in its slice
 * of the span (a slice narrower than a sample repeats that sample), NaN where the slice lies
 * before the oldest sample held. */
void ui_series_resample(const ui_series_t *s, double span, double *out, int n_out);

#endif

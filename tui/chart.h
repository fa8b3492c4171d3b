/*
 * chart: the console's chart rasteriser. Pure: it turns a series of samples into rows of UTF-8
 * text (braille, 2 samples across x 4 dot levels per cell, filled from the bottom as htop and
 * btop draw; or an ASCII fallback) plus the title and y-axis label text; the console draws the
 * rows with curses.
 *
 *     enum { W = 40, H = 6 };
 *     char rows[CHART_BUF_SIZE(W, H)];              // or malloc(chart_buf_size(w, h)) at start-up
 *     chart_opts_t o = {.width = W, .height = H, .glyphs = CHART_BRAILLE, .style = CHART_AREA,
 *                       .auto_range = true, .auto_floor = 1};
 *     double top = chart_render(samples, n, &o, rows, sizeof rows);
 *     for (int r = 0; r < H; r++)
 *         mvwaddstr(win, y + r, x, chart_row(rows, W, r));
 *     char title[128];
 *     chart_title(title, sizeof title, W, "running seqs", 60, samples[n - 1], "");
 *     char label[16];
 *     chart_format_value(top, label, sizeof label);  // the y label of the top row
 *
 * Samples are in ring-buffer order, oldest first; NaN marks a missing sample (drawn as a gap).
 * The newest sample sits at the right edge of the chart; with fewer samples than the chart
 * holds, the left part stays blank. A chart of width W shows the newest 2*W samples in both
 * glyph sets, so its time window is the same whatever the locale.
 *
 * Geometry: each cell row holds 4 levels; a chart of height H has 4*H levels. A value maps to
 * round((v - ymin) / (ymax - ymin) * 4H) levels, clamped to [0, 4H]; a non-NaN value inside the
 * range always shows at least one level, so a zero reads as a baseline and a gap as nothing.
 * Braille dots are U+2800 + bits: left column bottom-up 0x40, 0x04, 0x02, 0x01; right column
 * bottom-up 0x80, 0x20, 0x10, 0x08. The ASCII fallback takes the higher of a cell's two samples
 * and draws its levels in that row as " .:|#"[levels] (a full cell is '#').
 *
 * No allocation: output goes to the caller's buffer, rows of chart_row_size(width) bytes each
 * (NUL-terminated strings).
 */
#ifndef TACHYON_CHART_H
#define TACHYON_CHART_H

#include <stdbool.h>
#include <stddef.h>

typedef enum chart_glyphs {
    CHART_BRAILLE, /* UTF-8 braille, 3 bytes per cell */
    CHART_ASCII,   /* one byte per cell */
} chart_glyphs_t;

typedef enum chart_style {
    CHART_AREA, /* filled from the bottom up to the value */
    CHART_LINE, /* only the top level of each sample */
} chart_style_t;

typedef struct chart_opts {
    int width;  /* cells, >= 1 */
    int height; /* cells, >= 1 */
    chart_glyphs_t glyphs;
    chart_style_t style;
    bool auto_range;   /* y from 0 to chart_nice_top(max of the visible samples, auto_floor) */
    double auto_floor; /* auto_range: smallest top (e.g. 1, so that an idle chart stays flat) */
    double ymin, ymax; /* fixed range when !auto_range (e.g. 0 and 100 for KV %); ymax > ymin */
} chart_opts_t;

/* Bytes of one output row: 3 per cell (braille is 3 bytes of UTF-8; ASCII uses 1) plus NUL. */
#define CHART_ROW_SIZE(width)         ((size_t)(width)*3 + 1)
#define CHART_BUF_SIZE(width, height) (CHART_ROW_SIZE(width) * (size_t)(height))
size_t chart_row_size(int width);
size_t chart_buf_size(int width, int height);

/* Row r (0 = top) of a buffer that chart_render filled for this width. */
const char *chart_row(const char *buf, int width, int r);

/* Draws the newest 2*width samples of samples[0, n) (n >= 0; samples may be NULL when n is 0)
 * into buf: height rows of chart_row_size(width) bytes, each a NUL-terminated string of exactly
 * width cells. Returns the top of the y range used (ymax, or the auto top), or NaN with buf
 * untouched when the options are invalid (width or height < 1, ymax <= ymin for a fixed range,
 * a non-finite bound) or size < chart_buf_size(width, height). */
double chart_render(const double *samples, int n, const chart_opts_t *o, char *buf, size_t size);

/* The smallest "nice" number >= max(v, min_top): 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a
 * power of ten (so 12 -> 12, 13 -> 15, 0.7 -> 0.8, 101 -> 120). A min_top that is not finite
 * and positive counts as 1; a v that is not finite counts as 0. */
double chart_nice_top(double v, double min_top);

/* A compact number for labels and titles, at most 6 characters for any finite value:
 * integers as is below 10000 ("0", "12", "9999"), fractions with up to 3 significant digits
 * ("0.5", "2.25", "12.5"), large values with k/M/G/T ("12.3k", "2M"), NaN as "-". Always
 * NUL-terminated (truncated to size). Returns the length written. */
int chart_format_value(double v, char *buf, size_t size);

/* A time window as text: "45 s", "2 min", "2 min 30 s", "1 h", "1 h 30 min". */
int chart_format_window(double seconds, char *buf, size_t size);

/* The chart's title for at most width columns: "NAME  last WINDOW  now VALUE UNIT", e.g.
 * "running seqs  last 60 s  now 12" or "gen tok/s  last 2 min  now 1.5k tok/s" (unit "" is
 * left out, "%" is attached: "now 45%"). When it does not fit, it drops "last " and "now ", then
 * the window, then the value, and at last cuts the name. Always NUL-terminated. Returns the
 * length written (bytes; the text is ASCII when name and unit are). */
int chart_title(char *buf, size_t size, int width, const char *name, double window_s, double value,
                const char *unit);

/* Y-axis labels for a chart of height rows spanning [ymin, ymax]: row 0 gets ymax, the last row
 * ymin, and (for height >= 5) the middle row the middle value; other rows are blank. Each label
 * is right-aligned in label_width columns (>= 1; a longer number loses its decimals, truncating
 * "12.3k" to "12k", and shows as '#'s when still too long) and NUL-terminated, at
 * buf + r * stride (stride >= label_width + 1). */
void chart_ylabels(double ymin, double ymax, int height, int label_width, char *buf, size_t stride);

/* Downsamples src[0, n) by factor (>= 1) into dst for a longer time window at the same width,
 * keeping the maximum of each bucket (NaN only when the whole bucket is). Buckets are aligned to
 * the newest sample, so the oldest bucket may be partial. Returns the number of values written,
 * at most dst_cap (the newest ones are kept). */
int chart_downsample(const double *src, int n, int factor, double *dst, int dst_cap);

#endif

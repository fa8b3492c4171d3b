/* chart: see chart.h. */
#include "chart.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Braille dots filled from the bottom: index = dots (0..4), left and right columns. */
static const uint8_t fill_left[5] = {0x00, 0x40, 0x44, 0x46, 0x47};
static const uint8_t fill_right[5] = {0x00, 0x80, 0xA0, 0xB0, 0xB8};
/* The single dot at height 1..4 of a column (index 0: none). */
static const uint8_t dot_left[5] = {0x00, 0x40, 0x04, 0x02, 0x01};
static const uint8_t dot_right[5] = {0x00, 0x80, 0x20, 0x10, 0x08};
static const char ascii_levels[] = " .:|#";

size_t chart_row_size(int width) {
    return width < 1 ? 1 : CHART_ROW_SIZE(width);
}

size_t chart_buf_size(int width, int height) {
    return width < 1 || height < 1 ? 0 : CHART_BUF_SIZE(width, height);
}

const char *chart_row(const char *buf, int width, int r) {
    return buf + (size_t)r * chart_row_size(width);
}

/* 10^e for e >= 0, exact while it fits a double's mantissa. */
static double pow10i(int e) {
    double p = 1;
    for (int i = 0; i < e; i++)
        p *= 10;
    return p;
}

double chart_nice_top(double v, double min_top) {
    double lo = isfinite(min_top) && min_top > 0 ? min_top : 1;
    double m = isfinite(v) && v > lo ? v : lo;
    if (m > 1e300) return m;
    static const int steps[] = {10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100};
    int e = (int)floor(log10(m)) - 1;
    for (;;) {
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
            /* Dividing by an exact power of ten keeps 1.2e1 exactly 12 and 8e-1 exactly 0.8. */
            double val = e >= 0 ? steps[i] * pow10i(e) / 10 : steps[i] / (10 * pow10i(-e));
            if (val >= m * (1 - 1e-12)) return val;
        }
        e++;
    }
}

/* Dot levels of one sample in [0, pix]; -1 for a gap. */
static int level(double v, double ymin, double ymax, int pix) {
    if (isnan(v)) return -1;
    if (v < ymin) return 0;
    double f = (v - ymin) / (ymax - ymin) * pix;
    int lv = f >= pix ? pix : (int)lround(f);
    return lv < 1 ? 1 : lv;
}

static char *put_braille(char *p, unsigned bits) {
    if (bits == 0) {
        *p++ = ' ';
        return p;
    }
    /* U+2800 + bits in UTF-8: E2, A0 | bits >> 6, 80 | bits & 3F. */
    *p++ = (char)0xE2;
    *p++ = (char)(0xA0 | (bits >> 6));
    *p++ = (char)(0x80 | (bits & 0x3F));
    return p;
}

double chart_render(const double *samples, int n, const chart_opts_t *o, char *buf, size_t size) {
    int W = o->width, H = o->height;
    if (W < 1 || H < 1 || n < 0 || (n > 0 && !samples) || size < chart_buf_size(W, H)) return NAN;
    int count = n < 2 * W ? n : 2 * W;
    const double *vis = samples ? samples + (n - count) : NULL;
    double ymin, ymax;
    if (o->auto_range) {
        double mx = 0;
        for (int i = 0; i < count; i++)
            if (isfinite(vis[i]) && vis[i] > mx) mx = vis[i];
        ymin = 0;
        ymax = chart_nice_top(mx, o->auto_floor);
    } else {
        ymin = o->ymin;
        ymax = o->ymax;
        if (!isfinite(ymin) || !isfinite(ymax) || ymax <= ymin) return NAN;
    }
    int pix = 4 * H;
    int blank = 2 * W - count; /* dot columns left of the oldest visible sample */
    for (int r = 0; r < H; r++) {
        char *p = buf + (size_t)r * chart_row_size(W);
        int base = 4 * (H - 1 - r); /* levels below this row */
        for (int c = 0; c < W; c++) {
            int lv[2];
            for (int s = 0; s < 2; s++) {
                int x = 2 * c + s - blank;
                lv[s] = x < 0 ? -1 : level(vis[x], ymin, ymax, pix);
            }
            int fl[2];
            for (int s = 0; s < 2; s++) {
                int f = lv[s] - base;
                fl[s] = f < 0 ? 0 : f > 4 ? 4 : f;
                /* A line shows only the row that holds the sample's top level. */
                if (o->style == CHART_LINE && lv[s] > base + 4) fl[s] = 0;
            }
            if (o->glyphs == CHART_ASCII) {
                *p++ = ascii_levels[fl[0] > fl[1] ? fl[0] : fl[1]];
            } else if (o->style == CHART_LINE) {
                p = put_braille(p, dot_left[fl[0]] | dot_right[fl[1]]);
            } else {
                p = put_braille(p, fill_left[fl[0]] | fill_right[fl[1]]);
            }
        }
        *p = '\0';
    }
    return ymax;
}

/* Removes trailing zeros after a decimal point, and the point when nothing follows it. */
static void strip_zeros(char *s) {
    if (!strchr(s, '.')) return;
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '0')
        s[--n] = '\0';
    if (n > 0 && s[n - 1] == '.') s[--n] = '\0';
}

/* Three significant digits of a in [1, 1000), trailing zeros dropped. */
static void sig3(double a, char *out, size_t size) {
    snprintf(out, size, a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : "%.2f", a);
    strip_zeros(out);
}

int chart_format_value(double v, char *buf, size_t size) {
    if (size == 0) return 0;
    char t[64];
    if (isnan(v)) {
        snprintf(t, sizeof t, "-");
    } else if (isinf(v)) {
        snprintf(t, sizeof t, v > 0 ? "inf" : "-inf");
    } else {
        double a = fabs(v);
        const char *sign = v < 0 ? "-" : "";
        char num[48];
        if (a >= 10000) {
            static const char units[] = "kMGT";
            int u = 0;
            double s = a / 1000;
            while (u < 3 && s >= 999.5) {
                s /= 1000;
                u++;
            }
            if (s >= 999.5) {
                snprintf(num, sizeof num, "%.2g", a);
            } else {
                sig3(s, num, sizeof num - 2);
                size_t k = strlen(num);
                num[k] = units[u];
                num[k + 1] = '\0';
            }
        } else if (a == floor(a)) {
            snprintf(num, sizeof num, "%.0f", a);
        } else if (a >= 1) {
            sig3(a, num, sizeof num);
        } else if (a >= 0.001) {
            snprintf(num, sizeof num, "%.3f", a);
            strip_zeros(num);
        } else {
            snprintf(num, sizeof num, "%.0e", a);
        }
        snprintf(t, sizeof t, "%s%s", sign, num);
    }
    return snprintf(buf, size, "%s", t) >= (int)size ? (int)size - 1 : (int)strlen(buf);
}

int chart_format_window(double seconds, char *buf, size_t size) {
    if (size == 0) return 0;
    int n;
    if (!isfinite(seconds) || seconds < 0) {
        n = snprintf(buf, size, "-");
    } else if (seconds < 10 && seconds != floor(seconds)) {
        n = snprintf(buf, size, "%.1f s", seconds);
    } else {
        long s = lround(seconds);
        if (s < 120)
            n = snprintf(buf, size, "%ld s", s);
        else if (s < 7200 && s % 60 == 0)
            n = snprintf(buf, size, "%ld min", s / 60);
        else if (s < 7200)
            n = snprintf(buf, size, "%ld min %ld s", s / 60, s % 60);
        else if ((s % 3600) / 60 == 0)
            n = snprintf(buf, size, "%ld h", s / 3600);
        else
            n = snprintf(buf, size, "%ld h %ld min", s / 3600, (s % 3600) / 60);
    }
    return n >= (int)size ? (int)size - 1 : n;
}

/* Columns of UTF-8 text, counting every code point as one (titles are ASCII in practice). */
static int cols(const char *s) {
    int c = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) c++;
    return c;
}

int chart_title(char *buf, size_t size, int width, const char *name, double window_s, double value,
                const char *unit) {
    if (size == 0) return 0;
    buf[0] = '\0';
    if (width < 1) return 0;
    char win[32], val[32], v[64];
    chart_format_window(window_s, win, sizeof win);
    chart_format_value(value, val, sizeof val);
    if (!unit || !*unit || isnan(value))
        snprintf(v, sizeof v, "%s", val);
    else if (strcmp(unit, "%") == 0)
        snprintf(v, sizeof v, "%s%%", val);
    else
        snprintf(v, sizeof v, "%s %s", val, unit);
    char t[256];
    for (int form = 0; form < 4; form++) {
        switch (form) {
            case 0:
                snprintf(t, sizeof t, "%s  last %s  now %s", name, win, v);
                break;
            case 1:
                snprintf(t, sizeof t, "%s  %s  %s", name, win, v);
                break;
            case 2:
                snprintf(t, sizeof t, "%s  %s", name, v);
                break;
            default:
                snprintf(t, sizeof t, "%s", name);
                break;
        }
        if (cols(t) <= width) break;
    }
    /* Cut at a code point boundary to width columns and to the buffer. */
    size_t i = 0;
    int c = 0;
    while (t[i]) {
        size_t j = i + 1;
        while (((unsigned char)t[j] & 0xC0) == 0x80)
            j++;
        if (c + 1 > width || j + 1 > size) break;
        c++;
        i = j;
    }
    memcpy(buf, t, i);
    buf[i] = '\0';
    return (int)i;
}

void chart_ylabels(double ymin, double ymax, int height, int label_width, char *buf,
                   size_t stride) {
    if (height < 1 || label_width < 1 || stride < (size_t)label_width + 1) return;
    for (int r = 0; r < height; r++) {
        char *row = buf + (size_t)r * stride;
        char num[32] = "";
        if (r == 0)
            chart_format_value(ymax, num, sizeof num);
        else if (r == height - 1)
            chart_format_value(ymin, num, sizeof num);
        else if (height >= 5 && r == height / 2)
            chart_format_value((ymin + ymax) / 2, num, sizeof num);
        int n = (int)strlen(num);
        if (n > label_width) {
            /* Drop the decimals ("12.3k" -> "12k"), then give up with '#'s: a cut number
             * would read as a different one. */
            char *dot = strchr(num, '.');
            if (dot) {
                size_t k = 1;
                while (dot[k] >= '0' && dot[k] <= '9')
                    k++;
                memmove(dot, dot + k, strlen(dot + k) + 1);
                n = (int)strlen(num);
            }
            if (n > label_width) {
                n = label_width;
                memset(num, '#', (size_t)n);
            }
        }
        memset(row, ' ', (size_t)(label_width - n));
        memcpy(row + label_width - n, num, (size_t)n);
        row[label_width] = '\0';
    }
}

int chart_downsample(const double *src, int n, int factor, double *dst, int dst_cap) {
    if (n <= 0 || factor < 1 || dst_cap <= 0) return 0;
    int buckets = (n + factor - 1) / factor;
    int m = buckets < dst_cap ? buckets : dst_cap;
    for (int k = 0; k < m; k++) {
        int hi = n - k * factor, lo = hi - factor < 0 ? 0 : hi - factor;
        double mx = NAN;
        for (int i = lo; i < hi; i++)
            if (!isnan(src[i]) && (isnan(mx) || src[i] > mx)) mx = src[i];
        dst[m - 1 - k] = mx;
    }
    return m;
}

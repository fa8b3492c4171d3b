#include "layout.h"

#include <string.h>

#define SIDE_MIN_TERM_W  110 /* terminals this wide get a side column for flags and requests */
#define SIDE_MIN_W       34
#define SIDE_MAX_W       50
#define SIDE_MIN_H       6 /* flags and requests, three rows each */
#define CHART_MIN_H      3 /* a title row and two plot rows */
#define CHART_MAX_H      12
#define CHAT_MIN_H       4
#define IDLE_SHARE       70 /* % of the body the charts take while the chat is idle */
#define IDLE_CHART_MAX_H 24
#define REQUESTS_MAX_H   14  /* title, engine line, bench lines, column heads, rows, totals */
#define TALL_TABLE_W     160 /* from here the requests table runs down beside the chat pane */
#define STRIP_MIN_REST   14  /* rows under the charts needed before flags/requests get a strip */

static int clamp(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

static layout_rect_t rect(int x, int y, int w, int h) {
    return (layout_rect_t){x, y, w, h};
}

void layout_compute(int w, int h, int band_want, layout_t *out) {
    layout_compute_idle(w, h, band_want, false, LAYOUT_CHARTS, out);
}

void layout_compute_idle(int w, int h, int band_want, bool idle, int n_charts, layout_t *out) {
    memset(out, 0, sizeof *out);
    n_charts = clamp(n_charts, LAYOUT_CHARTS, LAYOUT_MAX_CHARTS);
    out->min_w = LAYOUT_MIN_W;
    out->min_h = LAYOUT_MIN_H;
    if (w < LAYOUT_MIN_W || h < LAYOUT_MIN_H) {
        out->too_small = true;
        return;
    }
    out->header = rect(0, 0, w, 1);
    out->repl = rect(0, h - 2, w, 1);
    out->status = rect(0, h - 1, w, 1);
    int body_y = 1, body_h = h - 3;
    /* the numbers band: what the charts at their smallest (three rows of them at the narrowest)
     * and the chat pane leave, less two rows so that the chat pane is not squeezed first */
    int band_max = body_h - 3 * CHART_MIN_H - CHAT_MIN_H - 2;
    int vit = clamp(band_want, 0, band_max > 0 ? band_max : 0);
    if (vit) {
        out->vitals = rect(0, 1, w, vit);
        body_y += vit;
        body_h -= vit;
    }

    int side_w = w >= SIDE_MIN_TERM_W ? clamp(w / 4, SIDE_MIN_W, SIDE_MAX_W) : 0;
    int main_w, cols, rows, chart_h, band;
    for (;;) {
        main_w = w - side_w;
        /* one row where wide, two on medium terminals, two columns where narrow */
        cols = main_w >= 150 ? n_charts : main_w >= 84 ? (n_charts + 1) / 2 : 2;
        rows = (n_charts + cols - 1) / cols;
        /* The charts take a bit under half the body; the chat pane keeps at least CHAT_MIN_H
         * rows (LAYOUT_MIN_H leaves room for both at the smallest chart height). */
        chart_h = clamp(body_h * (idle ? IDLE_SHARE : 45) / 100 / rows, CHART_MIN_H,
                        idle ? IDLE_CHART_MAX_H : CHART_MAX_H);
        /* the side column stacks flags over requests: it needs SIDE_MIN_H rows of charts */
        if (side_w && chart_h * rows < SIDE_MIN_H) chart_h = (SIDE_MIN_H + rows - 1) / rows;
        while (chart_h > CHART_MIN_H && chart_h * rows > body_h - CHAT_MIN_H)
            chart_h--;
        if (chart_h * rows > body_h - CHAT_MIN_H && n_charts > LAYOUT_CHARTS) {
            /* no room for the extra charts' rows: the base ones only */
            layout_compute_idle(w, h, band_want, idle, LAYOUT_CHARTS, out);
            return;
        }
        band = chart_h * rows;
        if (!side_w || band >= SIDE_MIN_H) break;
        side_w = 0; /* too short for the side column: charts take the whole width */
    }
    out->chart_cols = cols;
    out->chart_rows = rows;
    out->n_charts = n_charts;
    for (int i = 0; i < n_charts; i++) {
        int c = i % cols, r = i / cols;
        int in_row = n_charts - r * cols < cols ? n_charts - r * cols : cols;
        int x0 = main_w * c / in_row, x1 = main_w * (c + 1) / in_row;
        out->charts[i] = rect(x0, body_y + r * chart_h, x1 - x0, chart_h);
    }

    int rest_y = body_y + band, rest_h = body_h - band;
    if (side_w && w >= TALL_TABLE_W) { /* wide enough for the chat's tables beside a requests
                                           table that grows down beside the chat */
        out->flags = rect(main_w, body_y, side_w, band);
        out->requests = rect(main_w, rest_y, side_w, rest_h);
        out->chat = rect(0, rest_y, main_w, rest_h);
    } else if (side_w) { /* beside the charts: the chat pane gets the whole width for tables */
        int req_h = clamp(band / 2, 3, REQUESTS_MAX_H);
        out->flags = rect(main_w, body_y, side_w, band - req_h);
        out->requests = rect(main_w, body_y + band - req_h, side_w, req_h);
        out->chat = rect(0, rest_y, w, rest_h);
    } else if (rest_h >= STRIP_MIN_REST) {
        int strip = clamp(rest_h / 3, 5, 10);
        out->requests = rect(0, rest_y, w / 2, strip);
        out->flags = rect(w / 2, rest_y, w - w / 2, strip);
        out->chat = rect(0, rest_y + strip, w, rest_h - strip);
    } else {
        out->chat = rect(0, rest_y, w, rest_h);
    }
}

bool layout_rect_empty(layout_rect_t r) {
    return r.w <= 0 || r.h <= 0;
}

bool layout_rect_overlap(layout_rect_t a, layout_rect_t b) {
    if (layout_rect_empty(a) || layout_rect_empty(b)) return false;
    return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
}

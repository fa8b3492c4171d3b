/* console_draw_experts: the live expert-load panel of a frame (see console_draw.h), in the chat
 * pane's place: a title with the layers shown and the keys, the summary (ui_experts_summary,
 * folded at its " | " onto two rows where the pane has room), then one heat-map row per MoE
 * layer from the view's first row, clipped to the pane with a line saying how many more there
 * are. Cells are the ramp's glyphs coloured by their heat (blue cold, green fair share, yellow
 * warm, red hot); without colours cold cells are dim and hot ones bold. */
#include <stdio.h>
#include <string.h>

#include "console_draw_int.h"
#include "ui_experts.h"

#define SUMMARY_MAX 2 /* rows the summary may take */

static attr_t heat_attr(const con_view_t *v, int heat) {
    switch (heat) {
        case UI_EXPERTS_COLD:
            return cd_attr(v, PAIR_HEAT_COLD, A_DIM);
        case UI_EXPERTS_FAIR:
            return cd_attr(v, PAIR_OK, A_NORMAL);
        case UI_EXPERTS_WARM:
            return cd_attr(v, PAIR_USER, A_NORMAL);
        case UI_EXPERTS_HOT:
            return cd_attr(v, PAIR_ERROR, A_BOLD) | A_BOLD;
        default:
            return A_NORMAL;
    }
}

/* The summary folded to w columns (ui_experts_fold) on up to max rows from y; returns the rows
 * used. */
static int draw_summary(const char *s, int y, int x, int w, int max) {
    char rows[1024];
    ui_experts_fold(s, w, rows, sizeof rows);
    int n = 0;
    for (const char *p = rows; *p && n < max; n++) {
        size_t len = strcspn(p, "\n");
        cd_put(y + n, x, w, p, len, A_NORMAL);
        p += len + (p[len] ? 1 : 0);
    }
    return n > 0 ? n : 1;
}

int cd_draw_experts(con_drawer_t *d, const con_view_t *v, int *rows) {
    layout_rect_t r = v->lay.chat;
    *rows = 0;
    if (layout_rect_empty(r) || !v->stats) return 0;
    int w = r.w - 1;
    ui_experts_map_t m;
    ui_experts_map(&v->stats->experts, w, v->now, &m);
    char summary[512];
    ui_experts_summary(&m, summary, sizeof summary);
    int body = r.h - 1; /* under the title */
    /* two summary rows where a few map rows (or all of a small map) still fit under them */
    int max_sum =
        m.n_rows > 0 && body >= SUMMARY_MAX + (m.n_rows < 3 ? m.n_rows : 3) + 1 ? SUMMARY_MAX : 1;
    int y = r.y + 1 + draw_summary(summary, r.y + 1, r.x, w, max_sum);
    int avail = r.y + r.h - y; /* rows for the map */
    /* the last row says what is left, where a layer's row still fits above it */
    int vis = m.n_rows <= avail ? m.n_rows : avail >= 2 ? avail - 1 : avail;
    if (vis < 0) vis = 0;
    int top = v->experts_top;
    if (top > m.n_rows - vis) top = m.n_rows - vis;
    if (top < 0) top = 0;
    char title[160];
    if (m.n_rows == 0)
        snprintf(title, sizeof title, "Expert load (/experts or Esc: back to the chat)");
    else if (vis < m.n_rows)
        snprintf(title, sizeof title,
                 "Expert load, live: layers %d-%d of %d (PgUp/PgDn; /experts or Esc: chat)",
                 top + 1, top + vis, m.n_rows);
    else
        snprintf(title, sizeof title, "Expert load, live: %d MoE layers (/experts or Esc: chat)",
                 m.n_rows);
    cd_title_rule(d, v, r, title);
    uint8_t level[UI_EXPERTS_MAX_CELLS], heat[UI_EXPERTS_MAX_CELLS];
    for (int i = 0; i < vis; i++) {
        int len = ui_experts_row(&m, top + i, d->line_buf, LINE_BUF, level, heat);
        cd_put(y + i, r.x, w, d->line_buf, (size_t)len, A_NORMAL);
        cd_put(y + i, r.x, UI_EXPERTS_LABEL_W - 1, d->line_buf, UI_EXPERTS_LABEL_W - 1, A_DIM);
        for (int c = 0; c < m.cells && UI_EXPERTS_LABEL_W + c < w; c++) {
            if (!level[c]) continue;
            attrset(heat_attr(v, heat[c]));
            mvaddch(y + i, r.x + UI_EXPERTS_LABEL_W + c, (chtype)UI_EXPERTS_RAMP[level[c]]);
        }
        attrset(A_NORMAL);
    }
    *rows = vis;
    if (vis < m.n_rows && avail >= 2) {
        int below = m.n_rows - top - vis;
        if (below > 0)
            cd_putf(d, y + vis, r.x, w, A_DIM, "-- %d more MoE layer%s below (PgDn)%s --", below,
                    below == 1 ? "" : "s", top ? ", more above (PgUp)" : "");
        else
            cd_putf(d, y + vis, r.x, w, A_DIM, "-- %d more MoE layer%s above (PgUp) --", top,
                    top == 1 ? "" : "s");
    }
    return top;
}

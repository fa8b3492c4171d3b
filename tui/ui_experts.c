/* ui_experts: the expert-load heat map laid out as text (see ui_experts.h). */
#include "ui_experts.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t count(const ui_experts_map_t *m, int row, int e) {
    size_t i = (size_t)row * (size_t)m->x->n_experts + (size_t)e;
    return m->window ? m->x->window[i] : m->x->total[i];
}

/* Tokens per expert of cell c of row r (experts [c * per, (c + 1) * per)). */
static double cell_mean(const ui_experts_map_t *m, int r, int c) {
    uint64_t v = 0;
    int n = 0;
    for (int e = c * m->per; e < m->x->n_experts && e < (c + 1) * m->per; e++, n++)
        v += count(m, r, e);
    return n ? (double)v / n : 0.0;
}

/* Row r's tokens and its busiest expert. */
static uint64_t row_sum(const ui_experts_map_t *m, int r, int *top_e, uint64_t *top) {
    uint64_t sum = 0;
    *top = 0;
    *top_e = 0;
    for (int e = 0; e < m->x->n_experts; e++) {
        uint64_t v = count(m, r, e);
        sum += v;
        if (v > *top) *top = v, *top_e = e;
    }
    return sum;
}

void ui_experts_map(const stats_experts_t *x, int width, double now, ui_experts_map_t *m) {
    memset(m, 0, sizeof *m);
    m->x = x;
    m->hot_row = m->hot_expert = m->worst_row = -1;
    if (x->n_layers <= 0 || x->n_experts <= 0) return;
    m->n_rows = x->n_layers;
    m->idle_s = now > x->t ? now - x->t : 0.0;
    const int E = x->n_experts;
    for (int i = 0; i < x->n_layers * E; i++) {
        m->since_start += x->total[i];
        m->window |= x->window[i] > 0;
    }
    if (m->idle_s >= STATS_EXPERT_WINDOW) m->window = false; /* all of it older than the window */
    if (width < UI_EXPERTS_MIN_W) width = UI_EXPERTS_MIN_W;
    int room = width - UI_EXPERTS_LABEL_W - UI_EXPERTS_TAIL_W;
    if (room > UI_EXPERTS_MAX_CELLS) room = UI_EXPERTS_MAX_CELLS;
    m->per = (E + room - 1) / room;
    m->cells = (E + m->per - 1) / m->per;
    for (int r = 0; r < m->n_rows; r++) {
        int top_e;
        uint64_t top, sum = row_sum(m, r, &top_e, &top);
        m->tokens += sum;
        if (!sum) continue;
        if (top > m->hot_tokens) {
            m->hot_tokens = top;
            m->hot_row = r;
            m->hot_expert = top_e;
            m->hot_share = 100.0 * (double)top / (double)sum;
        }
        double imb = (double)top * E / (double)sum;
        if (m->worst_row < 0 || imb > m->worst_imbalance) {
            m->worst_row = r;
            m->worst_imbalance = imb;
        }
    }
}

typedef struct out {
    char *p;
    size_t len, cap;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...) {
    if (o->len + 1 >= o->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n < o->cap - o->len ? (size_t)n : o->cap - o->len - 1;
}

int ui_experts_summary(const ui_experts_map_t *m, char *buf, size_t size) {
    out_t o = {buf, 0, size};
    if (!size) return 0;
    buf[0] = '\0';
    const stats_experts_t *x = m->x;
    if (m->n_rows == 0) {
        put(&o, "no expert load: the model has no MoE layers (or too many to track)");
        return (int)o.len;
    }
    if (m->window)
        put(&o, "last %.1f s", x->window_s);
    else if (m->since_start)
        put(&o, "since start (none in the last %d s)", STATS_EXPERT_WINDOW);
    else
        put(&o, "no tokens routed yet");
    if (m->idle_s > UI_EXPERTS_IDLE_S) put(&o, ", idle %.0f s", m->idle_s);
    put(&o, ": %d MoE layer%s x %d experts", m->n_rows, m->n_rows == 1 ? "" : "s", x->n_experts);
    if (m->per > 1) put(&o, " (%d a cell)", m->per);
    /* the total before the details: a narrow pane folds the summary onto two rows and cuts what
     * does not fit */
    put(&o, " | %llu routed since start", (unsigned long long)m->since_start);
    if (m->hot_row >= 0) {
        put(&o, " | busiest L%d e%d %llu tok, %.0f%% of its layer", x->layer[m->hot_row],
            m->hot_expert, (unsigned long long)m->hot_tokens, m->hot_share);
        put(&o, " | worst imbalance L%d x%.2f", x->layer[m->worst_row], m->worst_imbalance);
    }
    return (int)o.len;
}

int ui_experts_fold(const char *s, int width, char *buf, size_t size) {
    out_t o = {buf, 0, size};
    if (!size) return 0;
    buf[0] = '\0';
    int col = 0;
    for (const char *p = s; *p;) {
        const char *sep = strstr(p, " | ");
        int len = sep ? (int)(sep - p) : (int)strlen(p);
        if (col > 0 && col + 3 + len > width) {
            put(&o, "\n");
            col = 0;
        } else if (col > 0) {
            put(&o, " | ");
            col += 3;
        }
        put(&o, "%.*s", len, p);
        col += len;
        p += len + (sep ? 3 : 0);
    }
    return (int)o.len;
}

int ui_experts_row(const ui_experts_map_t *m, int r, char *buf, size_t size, uint8_t *level,
                   uint8_t *heat) {
    out_t o = {buf, 0, size};
    if (!size) return 0;
    buf[0] = '\0';
    if (r < 0 || r >= m->n_rows) return 0;
    int top_e;
    uint64_t top, sum = row_sum(m, r, &top_e, &top);
    double cell_max = 0.0, mean = (double)sum / m->x->n_experts;
    for (int c = 0; c < m->cells; c++)
        if (cell_mean(m, r, c) > cell_max) cell_max = cell_mean(m, r, c);
    put(&o, "L%-4d |", m->x->layer[r]);
    for (int c = 0; c < m->cells; c++) {
        double v = cell_mean(m, r, c);
        int lv = v > 0 ? 1 + (int)(8.0 * v / cell_max) : 0;
        if (lv > 9) lv = 9;
        ui_experts_heat_t h = v <= 0            ? UI_EXPERTS_NONE
                              : v < 0.5 * mean  ? UI_EXPERTS_COLD
                              : v <= 1.5 * mean ? UI_EXPERTS_FAIR
                              : v <= 3.0 * mean ? UI_EXPERTS_WARM
                                                : UI_EXPERTS_HOT;
        if (level) level[c] = (uint8_t)lv;
        if (heat) heat[c] = (uint8_t)h;
        put(&o, "%c", UI_EXPERTS_RAMP[lv]);
    }
    put(&o, "| x%5.2f %llu", sum ? (double)top / mean : 0.0, (unsigned long long)sum);
    return (int)o.len;
}

char *ui_experts_render(const stats_experts_t *x, int width, double now, int max_rows) {
    ui_experts_map_t m;
    ui_experts_map(x, width, now, &m);
    int shown = max_rows < 1 || max_rows > m.n_rows ? m.n_rows : max_rows;
    size_t line = (size_t)(m.cells + UI_EXPERTS_LABEL_W + UI_EXPERTS_TAIL_W + 8);
    size_t cap = (size_t)(shown + 1) * line + 1024;
    out_t o = {malloc(cap), 0, cap};
    if (!o.p) return NULL;
    char summary[512];
    ui_experts_summary(&m, summary, sizeof summary);
    o.len = (size_t)ui_experts_fold(summary, width, o.p, cap);
    put(&o, "\n");
    if (m.n_rows == 0) return o.p;
    put(&o, "glyph: share of the row's busiest cell \"%s\"; then busiest / mean expert, tokens\n",
        UI_EXPERTS_RAMP);
    for (int r = 0; r < shown; r++) {
        ui_experts_row(&m, r, o.p + o.len, o.cap - o.len, NULL, NULL);
        o.len += strlen(o.p + o.len);
        put(&o, "\n");
    }
    if (shown < m.n_rows) put(&o, "... %d more MoE layers\n", m.n_rows - shown);
    return o.p;
}

/* console_draw_reqs: the requests table of a frame (see console_draw.h): the engine's totals, a
 * benchmark's progress, and the rows ui_reqs built (sorted, filtered, the selection kept in
 * view). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "console_draw_int.h"

/* The column of "N failed" in the requests table's benchmark line. */
static int find_failed(const bench_progress_t *b) {
    char head[96];
    return snprintf(head, sizeof head, "bench   %d in flight, %d/%d done, ", b->in_flight, b->done,
                    b->total);
}

void cd_progress_bar(const bench_progress_t *p, char *buf, size_t size, int width) {
    int total = p->total > 0 ? p->total : 1;
    int fill = (int)((long)width * p->done / total);
    size_t k = 0;
    buf[k++] = '[';
    for (int i = 0; i < width && k + 2 < size; i++)
        buf[k++] = i < fill ? '#' : '.';
    buf[k++] = ']';
    buf[k] = '\0';
}

/* tqdm's numbers (the ETA from the rate so far). */
void cd_bench_numbers(const bench_progress_t *p, bool wide, char *buf, size_t size) {
    if (p->done == 0 && p->in_flight == 0 && p->elapsed <= 0) {
        snprintf(buf, size, "preparing %d prompts", p->total);
        return;
    }
    int total = p->total > 0 ? p->total : 1;
    long el = lround(p->elapsed);
    char eta[48] = "?", counts[64] = "";
    if (p->done > 0) {
        long left = lround(p->elapsed * (p->total - p->done) / p->done);
        snprintf(eta, sizeof eta, "%02ld:%02ld", left / 60, left % 60);
    }
    if (wide)
        snprintf(counts, sizeof counts, " ok %d fail %d", p->done - p->failed, p->failed);
    else if (p->failed)
        snprintf(counts, sizeof counts, " fail %d", p->failed);
    snprintf(buf, size, "%d%% %02ld:%02ld<%s %.1f req/s%s", 100 * p->done / total, el / 60, el % 60,
             eta, p->request_rate_observed, counts);
}

layout_rect_t con_draw_reqs_rect(const con_view_t *v) {
    const layout_t *l = &v->lay;
    if (!v->reqs_focus || l->too_small || l->n_charts == 0) return l->requests;
    /* focused: from the top of the charts to the bottom of the chat pane, the whole width */
    int y = l->charts[0].y, end = l->chat.y + l->chat.h;
    return (layout_rect_t){0, y, l->header.w, end - y};
}

/* Rows of the table: its lines from the column heads on (y0) and how many rows show. */
typedef struct table_geom {
    int y0;    /* the column heads' row */
    int vis;   /* rows shown */
    int top;   /* the first row shown */
    bool more; /* a "... and N more" line under them */
} table_geom_t;

/* The geometry in r for the view's table, its first row shown `top` and the selection `sel`
 * (-1: none) kept in view. */
static table_geom_t geometry(const con_view_t *v, layout_rect_t r, int top, int sel) {
    table_geom_t g = {0};
    int y = r.y + 2; /* title, engine line */
    const bench_progress_t *b = v->bench;
    if (b && !v->reqs_focus && r.y + r.h - y >= 8) y += 3; /* the benchmark's lines */
    g.y0 = y;
    const ui_reqs_t *t = v->reqs;
    int n = t ? t->n : 0;
    int avail = r.y + r.h - (y + 1) - 1; /* less the heads and the totals */
    if (avail < 0) avail = 0;
    int unlisted = t ? t->n_unlisted : 0;
    g.vis = n + (unlisted ? 1 : 0) <= avail ? n : avail - 1;
    if (g.vis < 0) g.vis = 0;
    g.more = g.vis < n || unlisted;
    if (sel >= 0 && g.vis > 0) { /* the selection in view */
        if (sel < top) top = sel;
        if (sel >= top + g.vis) top = sel - g.vis + 1;
    }
    if (top > n - g.vis) top = n - g.vis;
    if (top < 0) top = 0;
    g.top = top;
    return g;
}

int con_draw_req_at(const con_view_t *v, int top, int y, int x) {
    layout_rect_t r = con_draw_reqs_rect(v);
    if (layout_rect_empty(r) || !v->reqs || v->help || x < r.x || x >= r.x + r.w) return -1;
    table_geom_t g = geometry(v, r, top, -1);
    int i = y - (g.y0 + 1);
    return i >= 0 && i < g.vis ? g.top + i : -1;
}

/* A benchmark's three lines: in flight, done and failed; the bar; tqdm's numbers. */
static void bench_lines(con_drawer_t *d, const con_view_t *v, layout_rect_t r, int y) {
    const bench_progress_t *b = v->bench;
    int w = r.w - 1;
    cd_putf(d, y, r.x + 1, w, A_NORMAL, "bench   %d in flight, %d/%d done, %d failed", b->in_flight,
            b->done, b->total, b->failed);
    if (b->failed) /* failures stand out */
        cd_putf(d, y, r.x + 1 + find_failed(b), w - find_failed(b),
                cd_attr(v, PAIR_ERROR, A_BOLD) | A_BOLD, "%d failed", b->failed);
    char bar[128], nums[96];
    cd_progress_bar(b, bar, sizeof bar, w - 12 > 60 ? 60 : w - 12);
    cd_putf(d, y + 1, r.x + 1, w, cd_attr(v, PAIR_OK, A_BOLD), "%s", bar);
    cd_bench_numbers(b, true, nums, sizeof nums);
    cd_putf(d, y + 2, r.x + 1, w, A_NORMAL, "%s", nums);
}

static attr_t row_attr(const con_view_t *v, const ui_req_row_t *q, bool selected) {
    attr_t a = q->state == UI_REQ_DECODE ? A_NORMAL : A_DIM;
    if (ui_req_state_failed(q->state))
        a = v->color ? cd_attr(v, PAIR_ERROR, A_NORMAL) : A_BOLD | A_UNDERLINE;
    if (q->own) a = (a & ~A_DIM) | A_BOLD;
    if (selected) a = (a & ~A_DIM) | A_REVERSE | A_BOLD;
    return a;
}

/* The id cut to w columns: a long one (the API's chatcmpl-<hex>) by its distinctive end, marked
 * with '~'; a choice after the first (n > 1) as "/N" after it. */
static void fit_id(const char *id, int choice, int w, char *out, size_t size) {
    char suffix[16] = "";
    if (choice > 0) snprintf(suffix, sizeof suffix, "/%d", choice);
    int sw = (int)strlen(suffix);
    size_t n = strlen(id);
    if (w - sw < 2) sw = 0, suffix[0] = '\0';
    if (n == 0)
        snprintf(out, size, "-%s", suffix);
    else if ((int)n + sw <= w)
        snprintf(out, size, "%s%s", id, suffix);
    else
        snprintf(out, size, "~%s%s", id + n - (size_t)(w - sw - 1), suffix);
}

int cd_draw_requests(con_drawer_t *d, const con_view_t *v) {
    layout_rect_t r = con_draw_reqs_rect(v);
    if (layout_rect_empty(r)) return v->reqs ? v->reqs->top : 0;
    const ui_reqs_t *t = v->reqs;
    if (v->reqs_focus) /* over the charts and the chat pane: a blank slate */
        for (int row = 0; row < r.h; row++)
            mvhline(r.y + row, r.x, ' ', r.w);
    char title[160];
    const char *dn = v->ascii ? "v" : "\xe2\x96\xbc", *up = v->ascii ? "^" : "\xe2\x96\xb2";
    if (t)
        snprintf(title, sizeof title, "Requests (%s%s%s, by %s %s)%s",
                 ui_req_filter_name(t->filter), t->text[0] ? " ~" : "", t->text,
                 ui_req_sort_name(t->sort), t->desc ? dn : up,
                 v->reqs_focus ? " s sort, r reverse, f filter, c cancel, Esc back" : "");
    else
        snprintf(title, sizeof title, "Requests");
    cd_title_rule(d, v, r, title);
    int w = r.w - 1, end = r.y + r.h;
    const stats_snapshot_t *s = v->stats;
    if (r.y + 1 < end)
        cd_putf(d, r.y + 1, r.x + 1, w, A_BOLD, "engine: %d running, %d waiting", s->running,
                s->waiting);
    table_geom_t g = geometry(v, r, t ? t->top : 0, t && v->reqs_focus ? t->sel : -1);
    if (v->bench && g.y0 == r.y + 5) bench_lines(d, v, r, r.y + 2);
    int y = g.y0;
    /* the id takes what the numbers and the state leave; the TTFT column where there is room */
    bool wide = w >= 60;
    int fixed = wide ? 38 : 29;
    int id_w = w - fixed < 6 ? 6 : w - fixed > 40 ? 40 : w - fixed;
    if (y < end) {
        if (wide)
            cd_putf(d, y, r.x + 1, w, A_DIM, "%-*s %6s %5s %6s %7s %s", id_w, "id", "prompt", "gen",
                    "secs", "ttft ms", "state");
        else
            cd_putf(d, y, r.x + 1, w, A_DIM, "%-*s %6s %5s %5s %s", id_w, "id", "prompt", "gen",
                    "secs", "state");
        /* the sorted column's head stands out: where it starts, its width, right-aligned */
        static const char *const heads[UI_REQ_N_SORTS] = {"secs", "ttft ms", "prompt",
                                                          "gen",  "state",   "id"};
        int x0 = -1, cw = 0;
        bool right = true;
        switch (t ? t->sort : UI_REQ_N_SORTS) {
            case UI_REQ_SORT_ID:
                x0 = 0, cw = 2, right = false;
                break;
            case UI_REQ_SORT_PROMPT:
                x0 = id_w + 1, cw = 6;
                break;
            case UI_REQ_SORT_GEN:
                x0 = id_w + 8, cw = 5;
                break;
            case UI_REQ_SORT_AGE:
                x0 = id_w + 14, cw = wide ? 6 : 5;
                break;
            case UI_REQ_SORT_TTFT:
                x0 = wide ? id_w + 21 : -1, cw = 7;
                break;
            case UI_REQ_SORT_STATE:
                x0 = id_w + (wide ? 29 : 20), cw = 5, right = false;
                break;
            default:
                break;
        }
        if (x0 >= 0 && x0 + cw <= w) {
            const char *h = heads[t->sort];
            int hw = (int)strlen(h);
            cd_put(y, r.x + 1 + x0 + (right ? cw - hw : 0), hw, h, (size_t)hw,
                   A_BOLD | A_UNDERLINE);
        }
        y++;
    }
    int n = t ? t->n : 0;
    for (int i = g.top; i < g.top + g.vis && i < n && y < end - 1; i++) {
        const ui_req_row_t *q = &t->rows[i];
        char id[STATS_ID_LEN + 24], ttft[16];
        fit_id(q->id, q->choice, id_w, id, sizeof id);
        attr_t a = row_attr(v, q, v->reqs_focus && i == t->sel);
        if (isnan(q->ttft_ms))
            snprintf(ttft, sizeof ttft, "-");
        else
            snprintf(ttft, sizeof ttft, "%.0f", q->ttft_ms);
        if (wide)
            cd_putf(d, y++, r.x + 1, w, a, "%-*s %6d %5d %6.1f %7s %-9s", id_w, id, q->prompt,
                    q->gen, q->age_s, ttft, ui_req_state_name(q->state));
        else
            cd_putf(d, y++, r.x + 1, w, a, "%-*s %6d %5d %5.1f %s", id_w, id, q->prompt, q->gen,
                    q->age_s, ui_req_state_name(q->state));
    }
    int below = n - g.top - g.vis + (t ? t->n_unlisted : 0);
    if (g.more && below > 0 && y < end - 1)
        cd_putf(d, y++, r.x + 1, w, A_DIM, "... and %d more%s", below,
                g.top > 0 ? " (and above)" : "");
    else if (g.more && g.top > 0 && y < end - 1)
        cd_putf(d, y++, r.x + 1, w, A_DIM, "... %d above", g.top);
    if (n == 0 && y < end - 1) {
        if (!t || (t->filter == UI_REQ_LIVE && !t->text[0]))
            cd_put(y++, r.x + 1, w, "(no requests)", 13, A_DIM);
        else
            cd_putf(d, y++, r.x + 1, w, A_DIM, "(none: %s%s%s)", ui_req_filter_name(t->filter),
                    t->text[0] ? " ~" : "", t->text);
    }
    if (end - 1 > g.y0)
        cd_putf(d, end - 1, r.x + 1, w, A_DIM, "%llu submitted, %llu done, %llu preempted",
                (unsigned long long)s->requests_submitted,
                (unsigned long long)(s->requests_finished[0] + s->requests_finished[1] +
                                     s->requests_finished[2] + s->requests_finished[3]),
                (unsigned long long)s->preemptions);
    return g.top;
}

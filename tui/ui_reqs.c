/* ui_reqs: the requests table's rows (see ui_reqs.h). */
#include "ui_reqs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const state_names[UI_REQ_N_STATES] = {
    "waiting", "prefill", "decode", "preempted", "stop", "length", "abort", "error"};
static const char *const sort_names[UI_REQ_N_SORTS] = {"age", "ttft",  "prompt",
                                                       "gen", "state", "id"};
static const char *const filter_names[UI_REQ_N_FILTERS] = {"live",     "running", "waiting",
                                                           "finished", "errors",  "all"};

const char *ui_req_state_name(ui_req_state_t s) {
    return s >= 0 && s < UI_REQ_N_STATES ? state_names[s] : "?";
}

const char *ui_req_sort_name(ui_req_sort_t k) {
    return k >= 0 && k < UI_REQ_N_SORTS ? sort_names[k] : "?";
}

const char *ui_req_filter_name(ui_req_filter_t f) {
    return f >= 0 && f < UI_REQ_N_FILTERS ? filter_names[f] : "?";
}

static int find(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcasecmp(names[i], name)) return i;
    return -1;
}

int ui_req_sort_parse(const char *name) {
    if (!strcasecmp(name, "tokens")) return UI_REQ_SORT_GEN;
    if (!strcasecmp(name, "time")) return UI_REQ_SORT_AGE;
    return find(sort_names, UI_REQ_N_SORTS, name);
}

int ui_req_filter_parse(const char *name) {
    if (!strcasecmp(name, "error")) return UI_REQ_ERRORS;
    if (!strcasecmp(name, "queued")) return UI_REQ_QUEUED;
    return find(filter_names, UI_REQ_N_FILTERS, name);
}

bool ui_req_state_finished(ui_req_state_t s) {
    return s >= UI_REQ_STOP;
}

bool ui_req_state_failed(ui_req_state_t s) {
    return s == UI_REQ_ABORT || s == UI_REQ_ERROR;
}

void ui_reqs_init(ui_reqs_t *t) {
    memset(t, 0, sizeof *t);
    t->sort = UI_REQ_SORT_AGE;
    t->desc = true; /* oldest first */
    t->filter = UI_REQ_LIVE;
    t->sel = -1;
}

void ui_reqs_set_sort(ui_reqs_t *t, ui_req_sort_t key, bool desc) {
    t->sort = key;
    t->desc = desc;
}

static bool passes(const ui_reqs_t *t, const ui_req_row_t *r) {
    bool fin = ui_req_state_finished(r->state);
    bool ok = false;
    switch (t->filter) {
        case UI_REQ_LIVE:
            ok = !fin;
            break;
        case UI_REQ_RUNNING:
            ok = r->state == UI_REQ_PREFILL || r->state == UI_REQ_DECODE;
            break;
        case UI_REQ_QUEUED:
            ok = r->state == UI_REQ_WAITING || r->state == UI_REQ_PREEMPTED;
            break;
        case UI_REQ_FINISHED:
            ok = fin;
            break;
        case UI_REQ_ERRORS:
            ok = ui_req_state_failed(r->state);
            break;
        default:
            ok = true;
            break;
    }
    return ok && (!t->text[0] || strstr(r->id, t->text));
}

static int cmp_num(double a, double b) {
    /* NaN (no first token yet) sorts as the largest: the slowest first when descending */
    if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
    return (a > b) - (a < b);
}

static int compare(const void *pa, const void *pb, void *ctx) {
    const ui_reqs_t *t = ctx;
    const ui_req_row_t *a = pa, *b = pb;
    int c = 0;
    switch (t->sort) {
        case UI_REQ_SORT_AGE:
            c = cmp_num(a->age_s, b->age_s);
            break;
        case UI_REQ_SORT_TTFT:
            c = cmp_num(a->ttft_ms, b->ttft_ms);
            break;
        case UI_REQ_SORT_PROMPT:
            c = (a->prompt > b->prompt) - (a->prompt < b->prompt);
            break;
        case UI_REQ_SORT_GEN:
            c = (a->gen > b->gen) - (a->gen < b->gen);
            break;
        case UI_REQ_SORT_STATE:
            c = (a->state > b->state) - (a->state < b->state);
            break;
        default:
            c = strcmp(a->id, b->id);
            if (!c) c = (a->choice > b->choice) - (a->choice < b->choice);
            break;
    }
    if (t->desc) c = -c;
    if (!c) c = -cmp_num(a->age_s, b->age_s); /* ties: oldest first, then as listed */
    if (!c) c = (a->order > b->order) - (a->order < b->order);
    return c;
}

/* Appends r when the filter passes it. */
static void add(ui_reqs_t *t, ui_req_row_t *r, int order) {
    r->order = order;
    if (t->n < UI_REQS_MAX && passes(t, r)) t->rows[t->n++] = *r;
}

void ui_reqs_build(ui_reqs_t *t, const stats_snapshot_t *s, double now, const ui_req_row_t *own) {
    t->n = 0;
    bool own_listed = false;
    for (int i = 0; i < s->n_active; i++) {
        const stats_active_t *a = &s->active[i];
        ui_req_row_t r = {.choice = a->choice,
                          .state = (ui_req_state_t)a->state,
                          .prompt = a->prompt_tokens,
                          .gen = a->generated,
                          .age_s = now - a->arrival,
                          .ttft_ms =
                              a->first_token > 0 ? (a->first_token - a->arrival) * 1e3 : NAN};
        snprintf(r.id, sizeof r.id, "%s", a->id);
        if (own && a->choice == own->choice && !strcmp(r.id, own->id)) {
            r = *own;
            r.own = own_listed = true;
        }
        add(t, &r, i);
    }
    t->n_unlisted = s->n_active_total > s->n_active ? s->n_active_total - s->n_active : 0;
    for (int i = s->n_recent - 1; i >= 0; i--) { /* the newest first, should they not fit */
        const stats_finished_t *f = &s->recent[i];
        ui_req_row_t r = {.choice = f->choice,
                          .state = (ui_req_state_t)(UI_REQ_STOP + f->finish_reason),
                          .prompt = f->prompt_tokens,
                          .gen = f->generated,
                          .age_s = f->e2e_s,
                          .ttft_ms = f->ttft_s >= 0 ? f->ttft_s * 1e3 : NAN};
        if (r.state >= UI_REQ_N_STATES) r.state = UI_REQ_ERROR;
        snprintf(r.id, sizeof r.id, "%s", f->id);
        add(t, &r, STATS_MAX_ACTIVE + s->n_recent - 1 - i);
    }
    if (own && !own_listed) {
        ui_req_row_t r = *own;
        r.own = true;
        add(t, &r, UI_REQS_MAX);
    }
    qsort_r(t->rows, (size_t)t->n, sizeof t->rows[0], compare, t);
    for (int i = 1; i < t->n; i++) /* the console's reply first */
        if (t->rows[i].own) {
            ui_req_row_t r = t->rows[i];
            memmove(t->rows + 1, t->rows, (size_t)i * sizeof r);
            t->rows[0] = r;
            break;
        }
    t->sel = -1;
    if (t->has_sel)
        for (int i = 0; i < t->n; i++)
            if (t->rows[i].choice == t->sel_choice && !strcmp(t->rows[i].id, t->sel_id)) {
                t->sel = i;
                break;
            }
}

bool ui_reqs_select(ui_reqs_t *t, int i) {
    if (t->n == 0) return false;
    if (i < 0) i = 0;
    if (i >= t->n) i = t->n - 1;
    t->sel = i;
    t->has_sel = true;
    snprintf(t->sel_id, sizeof t->sel_id, "%s", t->rows[i].id);
    t->sel_choice = t->rows[i].choice;
    return true;
}

bool ui_reqs_move(ui_reqs_t *t, int delta) {
    if (t->n == 0) return false;
    if (t->sel < 0) return ui_reqs_select(t, delta < 0 ? t->n - 1 : 0);
    return ui_reqs_select(t, t->sel + delta);
}

const ui_req_row_t *ui_reqs_selected(const ui_reqs_t *t) {
    return t->sel >= 0 && t->sel < t->n ? &t->rows[t->sel] : NULL;
}

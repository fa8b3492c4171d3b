/*
 * ui_reqs: the requests table's rows, as the console shows them: the engine's live choices and
 * its recently finished ones (engine_stats()), filtered (live, running, waiting, finished,
 * errors, all; and an id substring), sorted by a key (age, TTFT, prompt, generated tokens,
 * state, id; either way), with a selection that follows its request (by id) from one snapshot
 * to the next. Pure (no curses, no engine calls), so every sort and filter is unit-tested.
 *
 *     ui_reqs_t *t = calloc(1, sizeof *t);
 *     ui_reqs_init(t);                                   // live requests, oldest first
 *     ui_reqs_set_sort(t, UI_REQ_SORT_TTFT, true);       // slowest first token first
 *     ui_reqs_build(t, &snapshot, now, own_row_or_NULL); // each frame: rows[0..n)
 *     ui_reqs_move(t, +1);                               // select the next row
 *     const ui_req_row_t *r = ui_reqs_selected(t);       // NULL: none
 *     if (r) engine_cancel(eng, r->id);
 */
#ifndef TACHYON_UI_REQS_H
#define TACHYON_UI_REQS_H

#include <stdbool.h>

#include "stats.h"

typedef enum ui_req_state {
    UI_REQ_WAITING, /* the engine's stats_req_state_t first, then the finish reasons */
    UI_REQ_PREFILL,
    UI_REQ_DECODE,
    UI_REQ_PREEMPTED,
    UI_REQ_STOP, /* finished: engine_finish_reason_t + UI_REQ_STOP */
    UI_REQ_LENGTH,
    UI_REQ_ABORT,
    UI_REQ_ERROR,
    UI_REQ_N_STATES
} ui_req_state_t;

typedef enum ui_req_sort {
    UI_REQ_SORT_AGE, /* seconds since arrival (finished: arrival to finish) */
    UI_REQ_SORT_TTFT,
    UI_REQ_SORT_PROMPT,
    UI_REQ_SORT_GEN,
    UI_REQ_SORT_STATE,
    UI_REQ_SORT_ID,
    UI_REQ_N_SORTS
} ui_req_sort_t;

typedef enum ui_req_filter {
    UI_REQ_LIVE,     /* every unfinished one (the default) */
    UI_REQ_RUNNING,  /* prefill or decode */
    UI_REQ_QUEUED,   /* waiting or preempted */
    UI_REQ_FINISHED, /* the recently finished, whatever the reason */
    UI_REQ_ERRORS,   /* finished by abort or error */
    UI_REQ_ALL,      /* live and recently finished */
    UI_REQ_N_FILTERS
} ui_req_filter_t;

typedef struct ui_req_row {
    char id[STATS_ID_LEN];
    int choice;
    ui_req_state_t state;
    int prompt, gen; /* tokens */
    double age_s;    /* live: since arrival; finished: arrival to finish */
    double ttft_ms;  /* NaN: no token yet */
    bool own;        /* the console's own reply */
    int order;       /* its place in the snapshot's lists (the last tie-break) */
} ui_req_row_t;

#define UI_REQS_MAX (STATS_MAX_ACTIVE + STATS_RECENT + 1)

typedef struct ui_reqs {
    /* settings, kept across builds */
    ui_req_sort_t sort;
    bool desc; /* largest first (age: oldest first) */
    ui_req_filter_t filter;
    char text[STATS_ID_LEN]; /* "": no id filter; else rows whose id holds it */
    bool has_sel;
    char sel_id[STATS_ID_LEN]; /* the selected request (followed across builds) */
    int sel_choice;
    int top; /* the first row shown (the drawing keeps the selection in view) */
    /* built */
    ui_req_row_t rows[UI_REQS_MAX];
    int n;          /* rows after the filter */
    int sel;        /* the selected row, -1: none (or filtered out) */
    int n_unlisted; /* live choices the snapshot did not list (beyond STATS_MAX_ACTIVE) */
} ui_reqs_t;

/* Live requests, oldest first, nothing selected. */
void ui_reqs_init(ui_reqs_t *t);

/* Rebuilds rows from a snapshot at time now (engine_now()): the live choices and the recently
 * finished, then `own` (the console's reply in flight, NULL: none) when the snapshot does not
 * list it yet, marked own where listed (its numbers are the console's, fresher); filtered,
 * sorted (ties: oldest first, then as listed), the console's reply first; and the selection found
 * again by id (sel -1 when it is gone or filtered out; it stays selected). */
void ui_reqs_build(ui_reqs_t *t, const stats_snapshot_t *s, double now, const ui_req_row_t *own);

/* Moves the selection by delta rows (clamped; with none, selects the first row or, for a
 * negative delta, the last). False when there are no rows. */
bool ui_reqs_move(ui_reqs_t *t, int delta);

/* Selects row i of the last build (clamped); false when there are no rows. */
bool ui_reqs_select(ui_reqs_t *t, int i);

/* The selected row of the last build, NULL when none is shown. */
const ui_req_row_t *ui_reqs_selected(const ui_reqs_t *t);

void ui_reqs_set_sort(ui_reqs_t *t, ui_req_sort_t key, bool desc);

/* Names, as /requests takes and the table's title shows them. */
const char *ui_req_state_name(ui_req_state_t s);   /* "waiting" ... "error" */
const char *ui_req_sort_name(ui_req_sort_t k);     /* "age", "ttft", "prompt", "gen", ... */
const char *ui_req_filter_name(ui_req_filter_t f); /* "live", "running", "waiting", ... */
/* -1 when the name is none of them (also "tokens" for gen, "time" for age; "errors" and
 * "error" alike). */
int ui_req_sort_parse(const char *name);
int ui_req_filter_parse(const char *name);

/* Whether a state is a finish, and whether an error one (abort or error). */
bool ui_req_state_finished(ui_req_state_t s);
bool ui_req_state_failed(ui_req_state_t s);

#endif

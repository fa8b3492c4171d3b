/*
 * ui_queue: how other threads talk to the console's UI thread, the only thread that calls curses.
 *
 * A bounded, mutex-protected queue of small fixed-size events plus an eventfd. A push writes the
 * eventfd only when the queue goes from empty to non-empty, so a burst of events costs one
 * wake-up; the UI thread polls the fd beside stdin, and on readiness calls ui_queue_ack() and
 * then pops until the queue is empty (in that order, so no wake-up is lost).
 *
 *     ui_queue_t *q = ui_queue_create(256, &err);
 *     // any thread
 *     ui_event_t ev = {.type = UI_EV_BENCH_PROGRESS, .progress = p};
 *     ui_queue_push(q, &ev);
 *     // UI thread
 *     struct pollfd p[2] = {{0, POLLIN}, {ui_queue_fd(q), POLLIN}};
 *     poll(p, 2, 100);
 *     ui_queue_ack(q);
 *     while (ui_queue_pop(q, &ev)) handle(&ev);
 *     ui_queue_destroy(q);
 *
 * Ownership: the event struct is copied; pointers inside it (ptr, a result or a message) pass to
 * whoever pops the event. An event that cannot be queued stays the pusher's.
 */
#ifndef TACHYON_UI_QUEUE_H
#define TACHYON_UI_QUEUE_H

#include <stdbool.h>

#include "bench.h"
#include "err.h"

typedef enum ui_event_type {
    UI_EV_WAKE,           /* nothing to carry: look at your sources again (e.g. a chat stream) */
    UI_EV_BENCH_PROGRESS, /* progress */
    UI_EV_BENCH_DONE,     /* ptr: the bench_result_t (owned), or NULL with text: the error */
    UI_EV_FLAG_DONE,      /* a /set finished on its worker: code (0 ok / -1), text */
    UI_EV_LOG,            /* a line written to stderr (ui_log): text */
    UI_EV_SWEEP_DONE,     /* ptr: the bench_sweep_t (owned); text: an error ("" none) */
} ui_event_type_t;

typedef struct ui_event {
    ui_event_type_t type;
    int code;
    void *ptr;
    bench_progress_t progress;
    char text[512];
} ui_event_t;

typedef struct ui_queue ui_queue_t;

/* A queue holding up to cap events. NULL with err set when out of memory or without eventfd. */
ui_queue_t *ui_queue_create(int cap, err_t *err);
void ui_queue_destroy(ui_queue_t *q); /* NULL is a no-op; events left in it are dropped */

/* Copies ev in (any thread). Returns -1 when the queue is full (the event is not queued). */
int ui_queue_push(ui_queue_t *q, const ui_event_t *ev);

/* Takes the oldest event into *ev; false when empty. */
bool ui_queue_pop(ui_queue_t *q, ui_event_t *ev);

/* The fd to poll for readability. */
int ui_queue_fd(const ui_queue_t *q);

/* Clears the fd's readiness; call it before draining the queue. */
void ui_queue_ack(ui_queue_t *q);

/* Makes the fd readable without an event (async-signal-safe: a signal handler may call it). */
void ui_queue_kick(ui_queue_t *q);

#endif

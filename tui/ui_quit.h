/*
 * ui_quit: when the console may quit. Quitting stops the embedded server, which other clients
 * may be using, so it must not cut off requests the operator does not see:
 *
 *   - Ctrl-C first stops what the console itself is doing (its reply, its benchmark);
 *   - with nothing of its own running and requests from other clients in flight, Ctrl-C (and
 *     /quit) says how many and asks: a second Ctrl-C or /quit within ASK_S aborts them and quits,
 *     `/quit --drain` lets them finish;
 *   - with nothing in flight at all, Ctrl-C and /quit quit at once;
 *   - `/quit --drain` (and SIGTERM, as for `tachyon serve`) drains: no new requests, and the
 *     console quits when those in flight have finished or the grace time is over; Ctrl-C while
 *     draining aborts the rest and quits.
 *
 * Pure: the console carries out what these return (ui_quit_action_t) and says why.
 *
 *     ui_quit_t q = {0};
 *     on Ctrl-C:  act(ui_quit_interrupt(&q, own_busy, outside_in_flight, now));
 *     on /quit:   act(ui_quit_command(&q, drain, outside_in_flight, now, grace_s));
 *     each tick:  act(ui_quit_tick(&q, in_flight, now));   // UI_QUIT_NOW once drained
 */
#ifndef TACHYON_UI_QUIT_H
#define TACHYON_UI_QUIT_H

#include <stdbool.h>

#define UI_QUIT_ASK_S 10.0 /* a question stands this long: a later Ctrl-C asks again */

typedef enum ui_quit_action {
    UI_QUIT_STAY,     /* nothing to do */
    UI_QUIT_STOP_OWN, /* stop the console's reply and benchmark; stay */
    UI_QUIT_ASK,      /* other clients' requests in flight: say how many and how to go on */
    UI_QUIT_DRAIN,    /* start draining: refuse new requests, wait for those in flight */
    UI_QUIT_NOW,      /* quit: whatever is still in flight is aborted */
} ui_quit_action_t;

typedef struct ui_quit {
    double asked_at; /* s, when the question was put; 0: not asked */
    bool draining;
    double drain_end; /* s, when draining gives up on the requests left */
} ui_quit_t;

/* Ctrl-C at time now: own_busy says the console's reply or benchmark is running, outside how
 * many requests of other clients are in flight. */
ui_quit_action_t ui_quit_interrupt(ui_quit_t *q, bool own_busy, int outside, double now);

/* /quit (drain false) or /quit --drain and SIGTERM (drain true), draining for at most grace_s. */
ui_quit_action_t ui_quit_command(ui_quit_t *q, bool drain, int outside, double now, double grace_s);

/* While draining: UI_QUIT_NOW once nothing is in flight or drain_end has passed. */
ui_quit_action_t ui_quit_tick(ui_quit_t *q, int in_flight, double now);

#endif

/* ui_quit: see ui_quit.h. */
#include "ui_quit.h"

static bool asked(const ui_quit_t *q, double now) {
    return q->asked_at > 0 && now - q->asked_at <= UI_QUIT_ASK_S;
}

static ui_quit_action_t ask_or_quit(ui_quit_t *q, int outside, double now) {
    if (outside <= 0 || asked(q, now)) return UI_QUIT_NOW;
    q->asked_at = now;
    return UI_QUIT_ASK;
}

ui_quit_action_t ui_quit_interrupt(ui_quit_t *q, bool own_busy, int outside, double now) {
    if (q->draining) return UI_QUIT_NOW;
    if (own_busy) return UI_QUIT_STOP_OWN;
    return ask_or_quit(q, outside, now);
}

ui_quit_action_t ui_quit_command(ui_quit_t *q, bool drain, int outside, double now,
                                 double grace_s) {
    if (q->draining) return drain ? UI_QUIT_STAY : UI_QUIT_NOW;
    if (!drain) return ask_or_quit(q, outside, now);
    q->draining = true;
    q->drain_end = now + grace_s;
    return UI_QUIT_DRAIN;
}

ui_quit_action_t ui_quit_tick(ui_quit_t *q, int in_flight, double now) {
    if (!q->draining) return UI_QUIT_STAY;
    return in_flight <= 0 || now >= q->drain_end ? UI_QUIT_NOW : UI_QUIT_STAY;
}

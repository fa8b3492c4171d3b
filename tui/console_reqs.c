/* console_reqs: the console's requests table (see console_int.h): its rows built for each frame
 * (ui_reqs.h), F6's focus with its keys (select, sort, filter, cancel with a confirmation),
 * clicks and the wheel on it, /requests and /cancel. A cancel goes through the engine's cancel
 * path (engine_cancel): the request ends with finish reason abort, which its client sees. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <curses.h>

#include "console_int.h"

void con_reqs_build(console_t *c) {
    ui_req_row_t own, *o = NULL;
    if (c->reply) {
        memset(&own, 0, sizeof own);
        snprintf(own.id, sizeof own.id, "%s", c->chat_rid);
        own.state = c->req_started ? UI_REQ_DECODE : UI_REQ_PREFILL;
        own.prompt = c->req_prompt;
        own.gen = c->req_gen;
        own.age_s = engine_now() - c->req_t0;
        own.ttft_ms = NAN;
        o = &own;
    }
    ui_reqs_build(c->reqs, c->snap, engine_now(), o);
}

/* The view con_draw_reqs_rect and con_draw_req_at need: the layout, the focus, the table. */
static con_view_t table_view(const console_t *c) {
    return (con_view_t){.lay = c->lay,
                        .reqs = c->reqs,
                        .reqs_focus = c->reqs_focus,
                        .help = c->help,
                        .bench = c->bench_running ? &c->prog : NULL,
                        .stats = c->snap};
}

static int page_rows(const console_t *c) {
    con_view_t v = table_view(c);
    layout_rect_t r = con_draw_reqs_rect(&v);
    return r.h > 6 ? r.h - 5 : 1;
}

static void focus_hint(console_t *c) {
    con_set_status(c, false,
                   "requests: Up/Down select, s sort (%s), r reverse, f filter (%s), c cancel, "
                   "Esc back",
                   ui_req_sort_name(c->reqs->sort), ui_req_filter_name(c->reqs->filter));
}

void con_reqs_focus(console_t *c, bool on) {
    c->reqs_focus = on;
    c->reqs_confirm = false;
    if (on) {
        con_reqs_build(c);
        if (c->reqs->sel < 0) ui_reqs_move(c->reqs, 1);
        focus_hint(c);
    } else {
        con_set_status(c, false, "ready");
    }
    c->dirty = true;
}

/* Cancels a request by its id (the engine's cancel path), and says so. */
static void cancel_id(console_t *c, const char *id) {
    if (engine_cancel(c->eng, id) < 0) {
        con_out_error(c, "/cancel: no such request");
        return;
    }
    con_log(c, "cancelled request %s", id);
    ui_text_addf(c->text, UI_TXT_INFO, "cancelled request %s (it ends with finish reason abort)",
                 id);
    con_set_status(c, false, "cancelled %s", id);
}

static void ask_cancel(console_t *c) {
    const ui_req_row_t *r = ui_reqs_selected(c->reqs);
    if (!r) {
        con_set_status(c, true, "no request selected (Up/Down select one)");
        return;
    }
    if (ui_req_state_finished(r->state)) {
        con_set_status(c, true, "%s has finished already (%s)", r->id, ui_req_state_name(r->state));
        return;
    }
    c->reqs_confirm = true;
    con_set_status(c, true, "y cancels %s (any other key keeps it)", r->id);
}

bool con_reqs_key(console_t *c, const input_event_t *ev) {
    if (!c->reqs_focus) return false;
    int ch = ev->key;
    if (c->reqs_confirm) { /* the answer to "cancel ID?" */
        c->reqs_confirm = false;
        const ui_req_row_t *r = ui_reqs_selected(c->reqs);
        if (ev->kind == INPUT_KEY && !ev->curses_key && (ch == 'y' || ch == 'Y') && r)
            cancel_id(c, r->id);
        else
            focus_hint(c);
        return true;
    }
    ui_reqs_t *t = c->reqs;
    int page = page_rows(c);
    if (ev->kind == INPUT_ESC) {
        con_reqs_focus(c, false);
    } else if (ev->kind == INPUT_EDIT) {
        if (ch == LE_KEY_UP || ch == LE_KEY_DOWN)
            ui_reqs_move(t, ch == LE_KEY_UP ? -1 : 1);
        else if (ch == LE_KEY_HOME)
            ui_reqs_select(t, 0);
        else if (ch == LE_KEY_END)
            ui_reqs_select(t, t->n - 1);
        else if (ch == LE_KEY_DELETE)
            ask_cancel(c);
        else if (ch == LE_KEY_CTRL_H || ch == LE_KEY_BACKSPACE)
            con_reqs_focus(c, false);
    } else if (ev->kind == INPUT_KEY && ev->curses_key) {
        if (ch == KEY_PPAGE || ch == KEY_NPAGE)
            ui_reqs_move(t, ch == KEY_PPAGE ? -page : page);
        else if (ch == KEY_DC)
            ask_cancel(c);
        else
            return false; /* F-keys, the mouse, a resize: the console's */
    } else if (ev->kind == INPUT_KEY) {
        switch (ch) {
            case 's':
                t->sort = (ui_req_sort_t)((t->sort + 1) % UI_REQ_N_SORTS);
                t->desc = true;
                focus_hint(c);
                break;
            case 'r':
                t->desc = !t->desc;
                break;
            case 'f':
                t->filter = (ui_req_filter_t)((t->filter + 1) % UI_REQ_N_FILTERS);
                focus_hint(c);
                break;
            case 'c':
                ask_cancel(c);
                break;
            case 'q':
                con_reqs_focus(c, false);
                break;
            case '/': /* a command: the line gets the keys back, and the '/' */
                con_reqs_focus(c, false);
                return false;
            case 'j':
                ui_reqs_move(t, 1);
                break;
            case 'k':
                ui_reqs_move(t, -1);
                break;
            default:
                break;
        }
    } else {
        return false; /* a paste: the line's */
    }
    con_reqs_build(c); /* the new order and the selection for the next frame */
    c->dirty = true;
    return true;
}

bool con_reqs_mouse(console_t *c, int y, int x, bool press, int wheel) {
    con_view_t v = table_view(c);
    layout_rect_t r = con_draw_reqs_rect(&v);
    if (layout_rect_empty(r) || y < r.y || y >= r.y + r.h || x < r.x || x >= r.x + r.w)
        return false;
    if (wheel) {
        c->reqs->top += wheel;
        if (c->reqs->top < 0) c->reqs->top = 0;
        if (c->reqs_focus) ui_reqs_move(c->reqs, wheel);
    } else if (press) {
        int i = con_draw_req_at(&v, c->reqs->top, y, x);
        if (i >= 0) {
            ui_reqs_select(c->reqs, i);
            if (!c->reqs_focus) con_reqs_focus(c, true);
        }
    }
    c->dirty = true;
    return true;
}

void con_reqs_command(console_t *c, const repl_cmd_t *cmd) {
    ui_reqs_t *t = c->reqs;
    if (cmd->argc >= 2 && !strcmp(cmd->argv[0], "sort")) {
        t->sort = (ui_req_sort_t)ui_req_sort_parse(cmd->argv[1]);
        t->desc = cmd->argc < 3 || !strcmp(cmd->argv[2], "desc");
    } else if (cmd->argc >= 1 && !strcmp(cmd->argv[0], "filter")) {
        t->text[0] = '\0';
        t->filter = UI_REQ_LIVE;
        if (cmd->argc == 2) {
            int f = ui_req_filter_parse(cmd->argv[1]);
            if (f >= 0)
                t->filter = (ui_req_filter_t)f;
            else /* an id's part: among every request listed */
                t->filter = UI_REQ_ALL, snprintf(t->text, sizeof t->text, "%s", cmd->argv[1]);
        }
    }
    t->top = 0;
    con_reqs_build(c);
    bool shown = !layout_rect_empty(c->lay.requests);
    ui_text_addf(c->text, UI_TXT_INFO, "requests table: %s%s%s, by %s %s: %d row%s%s",
                 ui_req_filter_name(t->filter), t->text[0] ? " ~" : "", t->text,
                 ui_req_sort_name(t->sort), t->desc ? "(largest first)" : "(smallest first)", t->n,
                 t->n == 1 ? "" : "s", shown ? "" : " (F6 shows the table)");
    c->dirty = true;
}

void con_cancel_command(console_t *c, const repl_cmd_t *cmd) {
    if (cmd->argc == 1) {
        cancel_id(c, cmd->argv[0]);
        return;
    }
    con_reqs_build(c);
    const ui_req_row_t *r = ui_reqs_selected(c->reqs);
    if (!r) {
        con_out_error(c, "/cancel: no request selected (F6 and Up/Down select one, or /cancel ID)");
        return;
    }
    if (ui_req_state_finished(r->state)) {
        con_out_error(c, "/cancel: the selected request has finished already");
        return;
    }
    cancel_id(c, r->id);
}

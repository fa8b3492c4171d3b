/* console_cmd: the console's keys and commands (see console_int.h). Keys come decoded from
 * input.h: the editor's keys go to the REPL line, the console's own (F1 help, F2 reasoning,
 * PgUp/PgDn, +/- on an empty line, Ctrl-L, Esc) act here; a submitted line is parsed by
 * commands.h and carried out by run_line. Flag changes run on a worker thread: a rebuild flag
 * drains the engine, and even a live one may wait for another client's rebuild. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curses.h>

#include "console_int.h"
#include "ui_experts.h"

static const char help_keys[] =
    "Keys\n"
    "  Enter        send a chat message, or run a /command\n"
    "  Alt-Enter    a new line in the message (a paste keeps its lines)\n"
    "  Tab / Right  complete / accept the dimmed suggestion\n"
    "  Up / Down    history          Ctrl-A/E/B/F/K/U/W/Y  edit the line\n"
    "  PgUp / PgDn  scroll the chat pane (or page the /experts panel)\n"
    "  Esc          close the expert-load panel (/experts); else stop the reply\n"
    "  F2           show / hide the model's reasoning\n"
    "  F3 log (stderr, stats, /set)  F4 zoom charts one by one  F5 rerun /bench  F10 quit\n"
    "  F6           the requests table: Up/Down select, s sort, r reverse, f filter,\n"
    "               c cancel the selected request (y confirms), Esc back\n"
    "  + / -        (on an empty line) zoom the charts' time window in / out\n"
    "  F1 or ?      (on an empty line) this help        Ctrl-L  redraw\n"
    "  Mouse        wheel scrolls; a click runs an F-key, zooms a chart, selects a\n"
    "               request (--no-mouse)\n"
    "  Ctrl-C       stop the reply and the benchmark; then leave (asks first while\n"
    "               other clients' requests run: /quit --drain lets them finish)\n"
    "\n"
    "Commands (Tab completes them, their flags and values)\n";

void con_help_fill(console_t *c) {
    char cmds[8192];
    err_t err = {{0}};
    if (repl_help(NULL, cmds, sizeof cmds, &err) < 0) cmds[0] = '\0';
    ui_text_add(c->help_text, UI_TXT_NORMAL, help_keys);
    ui_text_add(c->help_text, UI_TXT_NORMAL, cmds);
}

// ---------------------------------------------------------------------------------------------
// Flags

void con_read_flags(console_t *c) {
    flags_init(&c->cur_flags);
    c->n_flags = flags_count() < CON_MAX_FLAGS ? flags_count() : CON_MAX_FLAGS;
    for (int i = 0; i < c->n_flags; i++) {
        const flag_def_t *f = flags_at(i);
        err_t err;
        if (engine_flag_get(c->eng, f->name, c->flag_text[i], CON_FLAG_VALUE, &err) < 0)
            snprintf(c->flag_text[i], CON_FLAG_VALUE, "?");
        flags_set(f, c->flag_text[i], &c->cur_flags, &err);
        c->flag_changed[i] = flags_differ(f, &c->cur_flags, &c->def_flags);
    }
    /* the header's backend line, which live flags change (cpu-matmul-precision) */
    engine_describe_backend(c->eng, c->backend, sizeof c->backend);
    c->flags_read_at = engine_now();
}

/* Flags whose default means "automatic" (max-model-len 0: the model's, fitted to the pool) read
 * back as the value the engine chose; when the command line left them at the default, that
 * value is the baseline the panel compares with, so they do not show as changed. */
void con_flags_baseline(console_t *c, const flag_values_t *cmdline) {
    for (int i = 0; i < c->n_flags; i++) {
        const flag_def_t *f = flags_at(i);
        if (!flags_differ(f, cmdline, &c->def_flags) && c->flag_changed[i]) {
            memcpy((char *)&c->def_flags + f->offset, (const char *)&c->cur_flags + f->offset,
                   f->size);
            c->flag_changed[i] = false;
        }
    }
}

static void show_flag(console_t *c, const flag_def_t *f, const char *prefix) {
    char v[CON_FLAG_VALUE];
    err_t err;
    if (engine_flag_get(c->eng, f->name, v, sizeof v, &err) < 0) {
        con_out_error(c, err.msg);
        return;
    }
    ui_text_addf(c->text, UI_TXT_NORMAL, "%s%s = %s   (default %s, %s)", prefix, f->name, v, f->def,
                 flag_apply_name(f->apply));
    if (*prefix) { /* /set: the value is what was asked; /get also says what the flag takes */
        c->scroll = 0;
        return;
    }
    char takes[512] = "";
    switch (f->type) {
        case FLAG_INT:
        case FLAG_SIZE:
            snprintf(takes, sizeof takes, "%s in [%.17g, %.17g]%s",
                     f->type == FLAG_SIZE ? "a size (bytes, K/M/G/KiB/MiB/GiB)" : "an integer",
                     f->min, f->max, f->can_unset ? ", or unset" : "");
            break;
        case FLAG_FLOAT:
            snprintf(takes, sizeof takes, "a number in %c%.17g, %.17g]%s", f->min_open ? '(' : '[',
                     f->min, f->max, f->can_unset ? ", or unset" : "");
            break;
        case FLAG_BOOL:
            snprintf(takes, sizeof takes, "true or false");
            break;
        case FLAG_ENUM: {
            size_t k = 0;
            for (const char *const *ch = f->choices; ch && *ch && k < sizeof takes; ch++)
                k += (size_t)snprintf(takes + k, sizeof takes - k, "%s%s", k ? ", " : "one of ",
                                      *ch);
            break;
        }
        default:
            break;
    }
    ui_text_addf(c->text, UI_TXT_INFO, "  %s; takes %s", f->help, takes[0] ? takes : "text");
    c->scroll = 0;
}

static void *flag_main(void *arg) {
    console_t *c = arg;
    ui_event_t ev = {.type = UI_EV_FLAG_DONE};
    err_t err = {{0}};
    ev.code = engine_flag_set(c->eng, c->flag_name, c->flag_value, &err) < 0 ? -1 : 0;
    snprintf(ev.text, sizeof ev.text, "%.500s", err.msg);
    while (ui_queue_push(c->q, &ev) < 0)
        usleep(10000); /* the UI must learn the outcome */
    return NULL;
}

/* Every change goes through a worker thread: a rebuild flag drains the engine, and even a live
 * one waits while another client's rebuild holds the engine's flag lock; the UI never does. */
static void con_set(console_t *c, const flag_def_t *f, const char *value) {
    if (c->flag_busy) {
        con_out_error(c, "a flag change is still being applied; wait for it");
        return;
    }
    snprintf(c->flag_name, sizeof c->flag_name, "%s", f->name);
    snprintf(c->flag_value, sizeof c->flag_value, "%s", value);
    c->flag_t0 = engine_now();
    if (con_spawn(&c->flag_thread, flag_main, c) != 0) {
        con_out_error(c, "cannot start a thread for the flag change");
        return;
    }
    c->flag_busy = true;
    if (f->apply == FLAG_REBUILD) {
        ui_text_addf(c->text, UI_TXT_INFO,
                     "%s = %s needs a KV-pool rebuild: draining the batch (running requests are "
                     "preempted and recomputed, none lost), rebuilding, resuming...",
                     f->name, value);
        c->scroll = 0;
    } else if (f->apply == FLAG_RELOAD) {
        ui_text_addf(c->text, UI_TXT_INFO,
                     "%s = %s reloads the engine in place: requests in flight finish (at most "
                     "30 s, then they are aborted), new ones get 503 until the new layout "
                     "serves; the weights load again...",
                     f->name, value);
        c->scroll = 0;
    }
}

void con_flag_done(console_t *c, const ui_event_t *ev) {
    pthread_join(c->flag_thread, NULL);
    c->flag_busy = false;
    if (ev->code < 0) {
        con_out_error(c, ev->text);
        con_log(c, "/set %s %s refused: %s", c->flag_name, c->flag_value, ev->text);
        con_describe_layout(c); /* a refused reload reopened the previous layout */
        return;
    }
    con_read_flags(c);
    con_log(c, "/set %s %s applied in %.2f s", c->flag_name, c->flag_value,
            engine_now() - c->flag_t0);
    const flag_def_t *f = flags_find(c->flag_name);
    if (!f) return;
    show_flag(c, f, "set ");
    if (f->apply == FLAG_REBUILD) {
        con_set_status(c, false, "%s = %s: KV pool rebuilt in %.2f s", f->name, c->flag_value,
                       engine_now() - c->flag_t0);
    } else if (f->apply == FLAG_RELOAD) {
        con_describe_layout(c);
        con_set_status(c, false, "%s = %s: engine reloaded in %.2f s (%s)", f->name, c->flag_value,
                       engine_now() - c->flag_t0, c->layout_desc);
    } else
        con_set_status(c, false, "%s = %s (live: applies from the next engine step)", f->name,
                       c->flag_value);
}

/* s for a shell: as is when plain, else in single quotes. */
static void shell_word(jbuf_t *b, const char *s) {
    bool plain = *s != '\0';
    for (const char *p = s; *p; p++)
        plain &= (bool)(strchr("._/:=+-,@%", *p) || (*p >= '0' && *p <= '9') ||
                        (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'));
    if (plain) {
        jb_lit(b, s);
        return;
    }
    jb_raw(b, "'", 1);
    for (const char *p = s; *p; p++)
        *p == '\'' ? jb_lit(b, "'\\''") : jb_raw(b, p, 1);
    jb_raw(b, "'", 1);
}

/* /flags diff: the `tachyon serve` command line that reproduces the model and every flag that
 * differs from its default (flags the engine chose itself, such as an automatic max-model-len,
 * are left to it). */
static void con_flags_diff(console_t *c) {
    con_read_flags(c);
    jbuf_t b;
    jb_init(&b);
    jb_lit(&b, "tachyon serve");
    if (c->model_arg[0]) {
        jb_lit(&b, " --model ");
        shell_word(&b, c->model_arg);
    }
    int n = 0;
    for (int i = 0; i < c->n_flags; i++) {
        const flag_def_t *f = flags_at(i);
        if (!c->flag_changed[i]) continue;
        char v[CON_FLAG_VALUE];
        flags_format(f, &c->cur_flags, v, sizeof v);
        bool on = f->type == FLAG_BOOL && !strcmp(v, "true");
        jb_printf(&b, " --%s%s", f->type == FLAG_BOOL && !on ? "no-" : "", f->name);
        if (f->type != FLAG_BOOL) {
            jb_raw(&b, " ", 1);
            shell_word(&b, v);
        }
        n++;
    }
    ui_text_add(c->text, UI_TXT_PRE, b.p && !b.oom ? b.p : "(out of memory)");
    ui_text_addf(c->text, UI_TXT_INFO, "(%d flag%s changed from the defaults)", n,
                 n == 1 ? "" : "s");
    jb_free(&b);
    c->scroll = 0;
}

static void con_flags(console_t *c, const char *prefix) {
    if (prefix && !strcmp(prefix, "diff")) {
        con_flags_diff(c);
        return;
    }
    size_t plen = prefix ? strlen(prefix) : 0;
    con_read_flags(c);
    ui_text_add(c->text, UI_TXT_PRE,
                "flag                          value        default      "
                "applies   (* changed)");
    int shown = 0;
    for (int i = 0; i < c->n_flags; i++) {
        const flag_def_t *f = flags_at(i);
        if (plen && strncmp(f->name, prefix, plen)) continue;
        ui_text_addf(c->text, UI_TXT_PRE, "%c %-28s %-12s %-12s %-8s  %s",
                     c->flag_changed[i] ? '*' : ' ', f->name, c->flag_text[i], f->def,
                     flag_apply_name(f->apply), f->help);
        shown++;
    }
    if (!shown) ui_text_addf(c->text, UI_TXT_INFO, "no flag starts with \"%s\"", prefix);
    c->scroll = 0;
}

// ---------------------------------------------------------------------------------------------
// Commands

static void con_help(console_t *c, const char *name) {
    char buf[8192];
    err_t err = {{0}};
    if (repl_help(name, buf, sizeof buf, &err) < 0) {
        con_out_error(c, err.msg);
        return;
    }
    ui_text_add(c->text, UI_TXT_PRE, buf);
    if (!name) ui_text_add(c->text, UI_TXT_INFO, "F1 or ? (on an empty line) lists the keys");
    c->scroll = 0;
}

/* /experts [on|off|print]: the live panel (console_draw_experts.c draws it from each sample) on,
 * off or toggled; print: the map as of the last sample, as text in the pane (the panel closed
 * so that it shows). */
static void experts_command(console_t *c, const repl_cmd_t *cmd) {
    const char *arg = cmd->argc ? cmd->argv[0] : "";
    if (!strcmp(arg, "print")) {
        char *map = ui_experts_render(&c->snap->experts, c->lay.chat.w > 1 ? c->lay.chat.w - 1 : 80,
                                      engine_now(), 0);
        if (!map) {
            con_out_error(c, "out of memory");
            return;
        }
        ui_text_add(c->text, UI_TXT_PRE, map);
        free(map);
        c->experts = false;
        c->scroll = 0;
        return;
    }
    c->experts = !strcmp(arg, "on") || (strcmp(arg, "off") && !c->experts);
    c->experts_top = 0;
    if (c->experts) c->show_log = false; /* the panel takes the pane, chat or log */
    con_set_status(c, false, "%s",
                   c->experts ? "expert load: live (PgUp/PgDn page the layers; Esc or /experts "
                                "gives the chat pane back)"
                              : "expert-load panel closed");
}

/* Commands whose outcome is text in the pane close the expert-load panel, so that it shows; the
 * chat, flag changes and the rest leave it open (their outcome is on the status line, or the
 * operator watches the load change). */
static bool prints_to_pane(repl_kind_t k) {
    return k == REPL_HELP || k == REPL_GET || k == REPL_FLAGS || k == REPL_RESULTS ||
           k == REPL_COMPARE || k == REPL_TOOLS;
}

/* Runs one submitted line; returns true to quit. */
static bool run_line(console_t *c, const char *line) {
    err_t err = {{0}};
    if (repl_parse(line, &c->cmd, &err) < 0) {
        con_out_error(c, err.msg);
        return false;
    }
    repl_cmd_t *cmd = &c->cmd;
    if (prints_to_pane(cmd->kind)) c->experts = false;
    switch (cmd->kind) {
        case REPL_EMPTY:
            break;
        case REPL_CHAT:
            if (c->reply) { /* nothing typed is lost: the message waits in the line */
                le_set_text(c->le, line);
                con_set_status(c, false,
                               "a reply is still streaming: your message stays in the line; "
                               "Enter sends it once the reply ends (Esc stops the reply)");
                break;
            }
            con_chat_send(c, cmd->text);
            break;
        case REPL_HELP:
            con_help(c, cmd->argc ? cmd->argv[0] : NULL);
            break;
        case REPL_QUIT:
            return con_quit_command(c, cmd->on);
        case REPL_NEW:
            con_chat_stop(c);
            con_chat_reset(c);
            ui_text_add(c->text, UI_TXT_INFO, "(new conversation)");
            c->scroll = 0;
            break;
        case REPL_SYSTEM:
            free(c->system);
            c->system = strdup(cmd->text);
            con_chat_reset(c);
            ui_text_addf(c->text, UI_TXT_INFO, "(new conversation with %s)",
                         *cmd->text ? "this system message" : "no system message");
            c->scroll = 0;
            break;
        case REPL_THINK:
            c->think = cmd->on;
            ui_text_addf(c->text, UI_TXT_INFO, "(thinking %s: enable_thinking=%s)",
                         cmd->on ? "on" : "off", cmd->on ? "default" : "false");
            c->scroll = 0;
            break;
        case REPL_SET:
            con_set(c, cmd->flag, cmd->argv[1]);
            break;
        case REPL_GET:
            show_flag(c, cmd->flag, "");
            break;
        case REPL_FLAGS:
            con_flags(c, cmd->argc ? cmd->argv[0] : NULL);
            break;
        case REPL_BENCH:
            snprintf(c->last_bench, sizeof c->last_bench, "%s", line);
            con_bench_start(c, cmd->argc, cmd->argv);
            break;
        case REPL_SWEEP:
            con_sweep_start(c, cmd);
            break;
        case REPL_BENCH_STOP:
            if (!con_bench_stop(c)) con_out_error(c, "no benchmark is running");
            break;
        case REPL_RESULTS:
            con_results(c);
            break;
        case REPL_REQUESTS:
            con_reqs_command(c, cmd);
            break;
        case REPL_CANCEL:
            con_cancel_command(c, cmd);
            break;
        case REPL_COMPARE:
            con_compare(c, cmd);
            break;
        case REPL_TOOLS:
        case REPL_TOOLS_OFF:
            con_chat_tools(c, cmd);
            break;
        case REPL_EXPERTS:
            experts_command(c, cmd);
            break;
        case REPL_CLEAR:
            ui_text_clear(c->text);
            c->scroll = 0;
            break;
    }
    return false;
}

// ---------------------------------------------------------------------------------------------
// Keys

static const double windows_s[] = {30, 60, 300, 900};
#define N_WINDOWS ((int)(sizeof windows_s / sizeof windows_s[0]))

double con_window_s(const console_t *c) {
    return windows_s[c->window];
}

void con_log(console_t *c, const char *fmt, ...) {
    char line[1024];
    double t = engine_now() - c->t_start;
    int n = snprintf(line, sizeof line, "[%02d:%02d:%02d] ", (int)t / 3600, (int)t / 60 % 60,
                     (int)t % 60);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    ui_text_add(c->log_text, UI_TXT_NORMAL, line);
    c->dirty = true;
}

void con_relayout(console_t *c) {
    /* the numbers band as many rows as its fields need at this width: it grows as they do and
     * starts over when the width changes, so that it does not jump back and forth */
    int rows;
    ui_vitals_lay(&c->gpu_s, &c->ops, COLS, 16, c->vsegs, UI_VITALS_MAX_SEGS, &rows);
    if (COLS != c->band_cols || rows > c->band_rows) c->band_rows = rows;
    c->band_cols = COLS;
    layout_compute_idle(COLS, LINES, c->band_rows, c->chat_idle,
                        c->spec_chart ? LAYOUT_MAX_CHARTS : LAYOUT_CHARTS, &c->lay);
    c->dirty = true;
}

/* A key while the help is open: the scroll keys scroll it, any other key closes it. */
static void help_key(console_t *c, const input_event_t *ev) {
    int page = LINES - 6 > 1 ? LINES - 6 : 1, by = 0;
    if (ev->kind == INPUT_EDIT && (ev->key == LE_KEY_UP || ev->key == LE_KEY_DOWN))
        by = ev->key == LE_KEY_UP ? 1 : -1;
    else if (ev->kind == INPUT_EDIT && (ev->key == LE_KEY_HOME || ev->key == LE_KEY_END))
        by = ev->key == LE_KEY_HOME ? 1 << 20 : -(1 << 20);
    else if (ev->kind == INPUT_KEY && ev->curses_key && ev->key == KEY_PPAGE)
        by = page;
    else if (ev->kind == INPUT_KEY && ev->curses_key && ev->key == KEY_NPAGE)
        by = -page;
    else
        c->help = false;
    c->help_scroll = c->help_scroll + by < 0 ? 0 : c->help_scroll + by; /* draw clamps the top */
}

static void open_help(console_t *c) {
    c->help = true;
    c->help_scroll = 1 << 20; /* from the top */
}

/* Scrolls the pane up (rows > 0) or down; the expert-load panel, when open, by its layers, at
 * most to its last page (the drawing clamps its top again as the pane changes). */
static void scroll_by(console_t *c, int rows) {
    if (c->experts) {
        int last = c->snap->experts.n_layers - (c->experts_page > 0 ? c->experts_page : 1);
        c->experts_top -= rows;
        if (c->experts_top > last) c->experts_top = last;
        if (c->experts_top < 0) c->experts_top = 0;
        c->dirty = true;
        return;
    }
    c->scroll += rows;
    if (c->scroll < 0) c->scroll = 0;
    c->dirty = true;
}

/* Feeds one editor key; returns true to quit. */
static bool editor_key(console_t *c, int key) {
    switch (le_key(c->le, key)) {
        case LE_SUBMIT: {
            const char *line = le_submitted(c->le);
            err_t err;
            if (c->have_hist) le_history_save(c->le, c->hist_path, &err);
            c->status_error = false;
            return run_line(c, line);
        }
        case LE_EOF:
            return true;
        case LE_CANDIDATES: {
            int n;
            const char *const *cand = le_candidates(c->le, &n);
            char buf[1024];
            size_t used = 0;
            for (int i = 0; i < n && used + 2 < sizeof buf; i++) {
                int k = snprintf(buf + used, sizeof buf - used, "%s%s", i ? "  " : "", cand[i]);
                if (k < 0 || (size_t)k >= sizeof buf - used) break;
                used += (size_t)k;
            }
            con_set_status(c, false, "%s", buf);
            break;
        }
        default:
            break;
    }
    c->dirty = true;
    return false;
}

/* F1..F10 (also clicks on the F-key bar); returns true to quit. */
static bool fkey(console_t *c, int n) {
    switch (n) {
        case 1:
            open_help(c);
            break;
        case 2:
            c->show_reasoning = !c->show_reasoning;
            break;
        case 3: /* the log, or the chat again; either way in place of the expert-load panel */
            c->show_log = c->experts ? true : !c->show_log;
            c->experts = false;
            c->scroll = 0;
            break;
        case 4: /* each chart in turn, then the grid again */
            c->zoom = c->zoom + 1 >= c->lay.n_charts ? -1 : c->zoom + 1;
            break;
        case 5:
            if (!c->last_bench[0])
                con_out_error(c, "no /bench to run again yet");
            else if (c->bench_running)
                con_out_error(c, "a benchmark is running (/bench stop stops it)");
            else
                return run_line(c, c->last_bench);
            break;
        case 6:
            con_reqs_focus(c, !c->reqs_focus);
            break;
        case 10:
            return con_quit_command(c, false);
        default:
            break;
    }
    c->dirty = true;
    return false;
}

/* A mouse event: the wheel scrolls the pane, a click on the F-key bar runs the key, on a chart
 * zooms it (or back to the grid). Returns true to quit. */
static bool mouse_event(console_t *c) {
    MEVENT m;
    if (getmouse(&m) != OK) return false;
    bool wheel_up = m.bstate & BUTTON4_PRESSED, wheel_down = m.bstate & BUTTON5_PRESSED;
    bool press = m.bstate & BUTTON1_PRESSED;
    if ((wheel_up || wheel_down || (press && m.y != c->lay.status.y)) &&
        con_reqs_mouse(c, m.y, m.x, press && !wheel_up && !wheel_down,
                       wheel_up     ? -3
                       : wheel_down ? 3
                                    : 0))
        return false;
    if (wheel_up) {
        scroll_by(c, 3);
    } else if (wheel_down) {
        scroll_by(c, -3);
    } else if (press) { /* on the press: mouseinterval(0), no click wait */
        con_view_t v = {.lay = c->lay,
                        .zoom = c->zoom,
                        .log = c->show_log,
                        .help = c->help,
                        .bench = c->bench_running ? &c->prog : NULL,
                        .applying = c->flag_busy ? c->flag_name : NULL};
        if (m.y == c->lay.status.y) {
            int k = con_draw_fkey_at(&v, m.x);
            if (k) return fkey(c, k);
        }
        int chart = con_draw_chart_at(&v, m.y, m.x);
        if (chart >= 0) c->zoom = c->zoom >= 0 ? -1 : chart;
    }
    c->dirty = true;
    return false;
}

void con_chat_touch(console_t *c) {
    c->last_activity = engine_now();
    if (c->chat_idle) {
        c->chat_idle = false;
        con_relayout(c);
    }
}

void con_chat_idle_check(console_t *c) {
    if (c->reply) c->last_activity = engine_now();   /* a streaming reply is use */
    if (c->experts) c->last_activity = engine_now(); /* the panel is watched: it keeps its rows */
    if (c->chat_idle || c->idle_s <= 0 || c->reply || c->help || le_text(c->le)[0] ||
        engine_now() - c->last_activity < c->idle_s)
        return;
    c->chat_idle = true;
    con_relayout(c);
}

/* One decoded key (input.h); returns true to quit. */
static bool console_key(console_t *c, const input_event_t *ev) {
    c->dirty = true;
    if (!(ev->kind == INPUT_KEY && ev->curses_key && ev->key == KEY_RESIZE)) con_chat_touch(c);
    int ch = ev->key;
    if (ev->kind == INPUT_KEY && ev->curses_key && ch == KEY_RESIZE) {
        con_relayout(c);
        return false;
    }
    if (c->help && ev->kind != INPUT_PASTE) { /* a paste closes the help and is kept */
        help_key(c, ev);
        return false;
    }
    c->help = false;
    if (con_reqs_key(c, ev)) return false;
    switch (ev->kind) {
        case INPUT_ESC: /* the expert-load panel closes first; then Esc stops the reply */
            if (c->experts) {
                c->experts = false;
                con_set_status(c, false, "expert-load panel closed");
            } else {
                con_chat_stop(c);
            }
            return false;
        case INPUT_PASTE: /* the whole paste is one message, its line breaks kept */
            le_insert(c->le, ev->text);
            return false;
        case INPUT_EDIT:
            return editor_key(c, ch);
        case INPUT_KEY:
            break;
    }
    if (ev->curses_key) {
        if (ch == KEY_MOUSE) return mouse_event(c);
        if (ch >= KEY_F(1) && ch <= KEY_F(10)) return fkey(c, ch - KEY_F(0));
        /* a page: the pane's rows less two, or the expert-load panel's layers shown */
        int page = c->lay.chat.h > 3 ? c->lay.chat.h - 2 : 1;
        if (c->experts) page = c->experts_page > 1 ? c->experts_page : 1;
        if (ch == KEY_PPAGE)
            scroll_by(c, page);
        else if (ch == KEY_NPAGE)
            scroll_by(c, -page);
        return false;
    }
    if (ch == 12) { /* Ctrl-L */
        clearok(curscr, TRUE);
        con_relayout(c);
        return false;
    }
    if (le_text(c->le)[0] == '\0' && (ch == '?' || ch == '+' || ch == '-')) {
        if (ch == '?')
            open_help(c);
        else if (ch == '+' && c->window > 0)
            c->window--;
        else if (ch == '-' && c->window < N_WINDOWS - 1)
            c->window++;
        return false;
    }
    return editor_key(c, ch);
}

/* Handles every key waiting on stdin; returns true to quit. */
bool con_read_keys(console_t *c) {
    wint_t ch;
    int rc, n;
    input_event_t ev[2];
    while ((rc = get_wch(&ch)) != ERR) {
        n = input_feed(c->in, rc == KEY_CODE_YES, (int)ch, engine_now(), ev);
        for (int i = 0; i < n; i++)
            if (console_key(c, &ev[i])) return true;
    }
    n = input_idle(c->in, engine_now(), ev);
    return n && console_key(c, &ev[0]);
}

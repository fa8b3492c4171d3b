/* `tachyon` / `tachyon console`: the operator's console. It opens the engine, starts the
 * embedded OpenAI server (as `tachyon serve` does) and runs the ncurses UI on the main thread:
 * header, live charts, requests table, flags panel, the chat/output pane, the REPL line and a
 * status line.
 *
 * The state is console_int.h's console_t; benchmarks and results are in console_bench.c.
 *
 * Threads: this (UI) thread is the only one that calls curses. The engine's stream wake hook,
 * the benchmark's progress callback, the flag worker and the stderr reader (ui_log) post events
 * to a ui_queue whose eventfd the UI loop polls beside stdin; SIGINT, SIGTERM and SIGWINCH are
 * blocked in every other thread (the mask is set before any thread is created). The loop samples
 * engine_stats() four times a second into its own rings and draws at most ten frames a second:
 * werase, draw, one wnoutrefresh and one doupdate per frame; the buffers a frame needs are sized at
 * start-up. */
#include <errno.h>
#include <getopt.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curses.h>

#include "bench.h"
#include "chart.h"
#include "cli.h"
#include "console_int.h"
#include "conversation.h"
#include "commands.h"
#include "engine.h"
#include "input.h"
#include "json.h"
#include "layout.h"
#include "lineedit.h"
#include "mdir.h"
#include "results.h"
#include "server.h"
#include "ui_header.h"
#include "ui_log.h"
#include "ui_quit.h"
#include "ui_queue.h"
#include "ui_series.h"
#include "ui_text.h"

#define SAMPLE_MS     250 /* engine_stats() sampling period */
#define FRAME_MS      100 /* at most ten frames a second */
#define MAX_COLS      512 /* chart buffers are sized for this; wider screens draw up to it */
#define MAX_ROWS      128
#define TEXT_LINES    5000 /* lines the chat/output pane keeps */
#define LATENCY_WIN_S 5.0  /* TTFT / TPOT charts: mean over the requests of the last 5 s */
#define RATE_WIN      4    /* tokens/s over the last 4 samples (1 s) */

static const char console_usage[] =
    "usage: tachyon [console] [options]\n"
    "\n"
    "The operator's console: the engine and its OpenAI-compatible server, live charts, a chat,\n"
    "live engine flags (/set) and benchmark runs (/bench). F1 or ? shows the keys; /help the\n"
    "commands; /quit or Ctrl-C leaves (Ctrl-C first stops the console's own reply or benchmark,\n"
    "and asks before cutting off other clients' requests: /quit --drain lets them finish).\n"
    "\n"
    "  --results-dir DIR    where /bench keeps its results, loaded at start-up (default\n"
    "                       $XDG_STATE_HOME/tachyon/results or ~/.local/state/tachyon/results)\n"
    "  --max-tokens N       tokens per chat reply (default 512)\n"
    "  --shutdown-timeout S /quit --drain and SIGTERM: seconds to let requests finish\n"
    "                       (default 30)\n"
    "  --no-color           no colours (also when NO_COLOR is set)\n"
    "  --ascii              ASCII charts and borders (automatic when the locale is not UTF-8)\n"
    "\n" CLI_SERVER_HELP CLI_ENGINE_HELP;

static const char help_keys[] =
    "Keys\n"
    "  Enter        send a chat message, or run a /command\n"
    "  Alt-Enter    a new line in the message (a paste keeps its lines)\n"
    "  Tab / Right  complete / accept the dimmed suggestion\n"
    "  Up / Down    history          Ctrl-A/E/B/F/K/U/W/Y  edit the line\n"
    "  PgUp / PgDn  scroll the chat and output pane\n"
    "  Esc          stop the reply being generated\n"
    "  F2           show / hide the model's reasoning\n"
    "  + / -        (on an empty line) zoom the charts' time window in / out\n"
    "  F1 or ?      (on an empty line) this help        Ctrl-L  redraw\n"
    "  Ctrl-C       stop the reply and the benchmark; then leave (asks first while\n"
    "               other clients' requests run: /quit --drain lets them finish)\n"
    "\n"
    "Commands (Tab completes them, their flags and values)\n";

static const double windows_s[] = {30, 60, 300, 900};
#define N_WINDOWS ((int)(sizeof windows_s / sizeof windows_s[0]))

enum { PAIR_TITLE = 1, PAIR_CHART, PAIR_ERROR, PAIR_USER, PAIR_CHANGED, PAIR_BAR, PAIR_OK };

static volatile sig_atomic_t got_sigint, got_sigterm;
static ui_queue_t *signal_queue;

static void on_signal(int sig) {
    if (sig == SIGTERM)
        got_sigterm = 1;
    else
        got_sigint = 1;
    if (signal_queue) ui_queue_kick(signal_queue);
}

static double now_s(void) {
    return engine_now();
}

void con_set_status(console_t *c, bool error, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->status, sizeof c->status, fmt, ap);
    va_end(ap);
    c->status_error = error;
    c->dirty = true;
}

/* Output in the pane; errors also go to the status line. */
void con_out_error(console_t *c, const char *msg) {
    ui_text_add(c->text, UI_TXT_ERROR, msg);
    con_set_status(c, true, "%s", msg);
    c->scroll = 0;
}

/* Blocks SIGINT, SIGTERM and SIGWINCH in the calling thread (and the threads it starts next);
 * *old receives the mask to restore. */
static void block_ui_signals(sigset_t *old) {
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGWINCH);
    pthread_sigmask(SIG_BLOCK, &block, old);
}

/* Starts a thread with the UI's signals blocked, so that only the UI thread takes them. */
int con_spawn(pthread_t *t, void *(*fn)(void *), void *arg) {
    sigset_t old;
    block_ui_signals(&old);
    int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Flags

/* Reads every flag's value from the engine into the panel's text and cur_flags. */
static void read_flags(console_t *c) {
    flags_init(&c->cur_flags);
    c->n_flags = flags_count() < 64 ? flags_count() : 64;
    for (int i = 0; i < c->n_flags; i++) {
        const flag_def_t *f = flags_at(i);
        err_t err;
        if (engine_flag_get(c->eng, f->name, c->flag_text[i], MAX_FLAG_VALUE, &err) < 0)
            snprintf(c->flag_text[i], MAX_FLAG_VALUE, "?");
        flags_set(f, c->flag_text[i], &c->cur_flags, &err);
        c->flag_changed[i] = flags_differ(f, &c->cur_flags, &c->def_flags);
    }
    c->flags_read_at = now_s();
}

/* Flags whose default means "automatic" (max-model-len 0: the model's, fitted to the pool) read
 * back as the value the engine chose; when the command line left them at the default, that
 * value is the baseline the panel compares with, so they do not show as changed. */
static void auto_baseline(console_t *c, const flag_values_t *cmdline) {
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
    char v[MAX_FLAG_VALUE];
    err_t err;
    if (engine_flag_get(c->eng, f->name, v, sizeof v, &err) < 0) {
        con_out_error(c, err.msg);
        return;
    }
    ui_text_addf(c->text, UI_TXT_NORMAL, "%s%s = %s   (default %s, %s)", prefix, f->name, v, f->def,
                 flag_apply_name(f->apply));
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
    c->flag_t0 = now_s();
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
    }
}

static void flag_done(console_t *c, const ui_event_t *ev) {
    pthread_join(c->flag_thread, NULL);
    c->flag_busy = false;
    if (ev->code < 0) {
        con_out_error(c, ev->text);
        return;
    }
    read_flags(c);
    const flag_def_t *f = flags_find(c->flag_name);
    if (!f) return;
    show_flag(c, f, "set ");
    if (f->apply == FLAG_REBUILD)
        con_set_status(c, false, "%s = %s: KV pool rebuilt in %.2f s", f->name, c->flag_value,
                       now_s() - c->flag_t0);
    else
        con_set_status(c, false, "%s = %s (live: applies from the next engine step)", f->name,
                       c->flag_value);
}

static void con_flags(console_t *c, const char *prefix) {
    size_t plen = prefix ? strlen(prefix) : 0;
    read_flags(c);
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
// Chat

static void conv_reset(console_t *c) {
    conversation_reset(&c->conv, c->system);
}

/* The engine thread's wake hook: one queued event per burst (the UI clears the flag before it
 * reads the stream). */
static void chat_wake(void *ctx) {
    console_t *c = ctx;
    if (!atomic_exchange(&c->wake_pending, true)) {
        ui_event_t ev = {.type = UI_EV_WAKE};
        if (ui_queue_push(c->q, &ev) < 0) ui_queue_kick(c->q);
    }
}

static void chat_send(console_t *c, const char *text) {
    if (c->format < 0) {
        con_out_error(c, "this model has no tokenizer or chat template: chat is not available "
                         "(benchmarks and flags still work)");
        return;
    }
    err_t err = {{0}};
    if (conversation_add(&c->conv, CHAT_USER, text) < 0) {
        con_out_error(c, "out of memory");
        return;
    }
    ui_text_addf(c->text, UI_TXT_USER, "> %s", text);
    c->scroll = 0;
    chat_opts_t copts = {.add_generation_prompt = true,
                         .enable_thinking = c->think ? CHAT_THINK_DEFAULT : CHAT_THINK_OFF};
    char *prompt = NULL;
    size_t len;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (chat_render((chat_format_t)c->format, c->conv.msgs, c->conv.n, NULL, &copts, &prompt, &len,
                    &err) < 0 ||
        tok_encode(engine_tokenizer(c->eng), prompt, len, &ids, &n_ids, &err) < 0) {
        free(prompt);
        conversation_forget_last(&c->conv);
        con_out_error(c, err.msg);
        return;
    }
    free(prompt);
    snprintf(c->chat_rid, sizeof c->chat_rid, "chat-%d", ++c->chat_id);
    engine_request_t req = {.prompt = ids,
                            .n_prompt = (int)n_ids,
                            .request_id = c->chat_rid,
                            .wake = chat_wake,
                            .wake_ctx = c};
    sampling_params_init(&req.sampling);
    req.sampling.max_tokens = c->max_tokens;
    int rc = chat_reasoning_create(chat_prompt_ends_reasoning((chat_format_t)c->format, &copts),
                                   &c->rs, &err);
    if (rc == 0) rc = engine_submit(c->eng, &req, &c->stream, &err);
    free(ids);
    sampling_params_free(&req.sampling);
    if (rc < 0) {
        chat_reasoning_destroy(c->rs);
        c->rs = NULL;
        c->stream = NULL;
        conversation_forget_last(&c->conv);
        char msg[1100];
        snprintf(msg, sizeof msg, "%s (/new starts over)", err.msg);
        con_out_error(c, msg);
        return;
    }
    jb_reset(&c->reply);
    c->req_prompt = (int)n_ids;
    c->req_gen = 0;
    c->req_t0 = now_s();
    c->req_started = c->reasoning_started = c->content_started = c->reply_stopping = false;
    con_set_status(c, false, "generating (Esc stops)");
}

/* Shows a piece of the split reply; leading newlines of each part are dropped so that the
 * template's "<think>\n" layout does not leave empty rows. */
static void chat_show(console_t *c, const char *s, size_t n, bool reasoning) {
    if (!s || !n) return;
    bool *started = reasoning ? &c->reasoning_started : &c->content_started;
    if (!*started) {
        while (n && (*s == '\n' || *s == ' '))
            s++, n--;
        if (!n) return;
        if (reasoning) ui_text_add(c->text, UI_TXT_FOLD, "(reasoning hidden: F2 shows it)");
        *started = true;
    }
    ui_text_append(c->text, reasoning ? UI_TXT_REASONING : UI_TXT_REPLY, s, n);
}

static void chat_finish(console_t *c, const engine_event_t *ev) {
    chat_split_t sp;
    chat_reasoning_finish(c->rs, &sp);
    chat_show(c, sp.reasoning, sp.reasoning_len, true);
    chat_show(c, sp.content, sp.content_len, false);
    ui_text_end(c->text);
    double dt = now_s() - c->req_t0;
    if (ev->reason == ENGINE_FINISH_ERROR) {
        conversation_forget_last(&c->conv);
        char msg[600];
        snprintf(msg, sizeof msg, "generation failed: %s", ev->error ? ev->error : "?");
        con_out_error(c, msg);
    } else {
        conversation_add(&c->conv, CHAT_ASSISTANT,
                         c->reply.oom ? ""
                         : c->reply.p ? c->reply.p
                                      : "");
        ui_text_addf(c->text, UI_TXT_INFO, "[%s: %d prompt + %d generated tokens, %.2f s%s]",
                     engine_finish_reason_name(ev->reason), ev->prompt_tokens,
                     ev->completion_tokens, dt,
                     ev->reason == ENGINE_FINISH_ABORT ? ", stopped" : "");
        con_set_status(c, false, "reply done (%s)", engine_finish_reason_name(ev->reason));
    }
    engine_stream_release(c->stream);
    c->stream = NULL;
    chat_reasoning_destroy(c->rs);
    c->rs = NULL;
}

/* Takes what the stream has; called on wake-ups and each loop while a reply streams. */
static void chat_pump(console_t *c) {
    if (!c->stream) return;
    atomic_store(&c->wake_pending, false);
    engine_event_t ev;
    while (c->stream && engine_stream_poll(c->stream, &ev) > 0) {
        c->dirty = true;
        if (ev.text_len) {
            jb_raw(&c->reply, ev.text, ev.text_len);
            chat_split_t sp;
            err_t err;
            if (chat_reasoning_feed(c->rs, ev.text, ev.text_len, &sp, &err) == 0) {
                chat_show(c, sp.reasoning, sp.reasoning_len, true);
                chat_show(c, sp.content, sp.content_len, false);
            }
        }
        c->req_gen += ev.n_tokens;
        c->req_started = true;
        if (ev.type == ENGINE_EV_FINISH) chat_finish(c, &ev);
        engine_event_clear(&ev);
    }
}

static void chat_stop(console_t *c) {
    if (c->stream) {
        engine_stream_cancel(c->stream);
        c->reply_stopping = true;
        con_set_status(c, false, "stopping the reply");
    }
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

// ---------------------------------------------------------------------------------------------
// Quitting (ui_quit.h decides; this carries it out)

/* Requests on the server that are not the console's own benchmark's: other clients'. */
static int outside_requests(console_t *c) {
    int n = http_in_flight(c->srv) - (c->bench_running ? c->prog.in_flight : 0);
    return n > 0 ? n : 0;
}

/* The console's own reply is running and has not been asked to stop, or its benchmark runs:
 * until a stopped benchmark is done, the server's count still holds its requests. */
static bool own_busy(console_t *c) {
    return (c->stream && !c->reply_stopping) || c->bench_running;
}

/* Carries out a quit decision; true: leave the UI loop (what is in flight is then aborted). */
static bool quit_act(console_t *c, ui_quit_action_t a) {
    int n = outside_requests(c);
    switch (a) {
        case UI_QUIT_STAY:
            return false;
        case UI_QUIT_NOW:
            return true;
        case UI_QUIT_STOP_OWN:
            chat_stop(c);
            con_bench_stop(c);
            con_set_status(c, false,
                           "stopping the console's reply and benchmark (Ctrl-C again "
                           "to quit)");
            return false;
        case UI_QUIT_ASK:
            ui_text_addf(c->text, UI_TXT_ERROR,
                         "%d request%s from other clients %s in flight: quitting now aborts %s. "
                         "Ctrl-C or /quit again quits anyway; /quit --drain lets %s finish "
                         "first.",
                         n, n == 1 ? "" : "s", n == 1 ? "is" : "are", n == 1 ? "it" : "them",
                         n == 1 ? "it" : "them");
            con_set_status(c, true,
                           "%d request%s of other clients in flight: Ctrl-C again "
                           "aborts, /quit --drain waits",
                           n, n == 1 ? "" : "s");
            c->scroll = 0;
            return false;
        case UI_QUIT_DRAIN:
            chat_stop(c);
            con_bench_stop(c);
            http_drain(c->srv);
            ui_text_addf(c->text, UI_TXT_INFO,
                         "draining: new requests are refused; the console quits once the %d in "
                         "flight have finished (at most %.0f s; Ctrl-C aborts them)",
                         n, c->shutdown_s);
            c->scroll = 0;
            return false;
    }
    return false;
}

/* A Ctrl-C or SIGTERM noted by the handler, or a /quit that waited for the benchmark to end;
 * true: leave the UI loop. */
static bool on_signals(console_t *c) {
    if (got_sigterm) { /* as tachyon serve: drain */
        got_sigterm = 0;
        if (quit_act(c,
                     ui_quit_command(&c->quit, true, outside_requests(c), now_s(), c->shutdown_s)))
            return true;
    }
    if (got_sigint) {
        got_sigint = 0;
        return quit_act(c, ui_quit_interrupt(&c->quit, own_busy(c), outside_requests(c), now_s()));
    }
    if (c->quit_after_bench && !c->bench_running) {
        c->quit_after_bench = false;
        return quit_act(c, ui_quit_command(&c->quit, false, outside_requests(c), now_s(), 0));
    }
    return false;
}

/* Runs one submitted line; returns true to quit. */
static bool run_line(console_t *c, const char *line) {
    err_t err = {{0}};
    if (repl_parse(line, &c->cmd, &err) < 0) {
        con_out_error(c, err.msg);
        return false;
    }
    repl_cmd_t *cmd = &c->cmd;
    switch (cmd->kind) {
        case REPL_EMPTY:
            break;
        case REPL_CHAT:
            if (c->stream) { /* nothing typed is lost: the message waits in the line */
                le_set_text(c->le, line);
                con_set_status(c, false,
                               "a reply is still streaming: your message stays in the line; "
                               "Enter sends it once the reply ends (Esc stops the reply)");
                break;
            }
            chat_send(c, cmd->text);
            break;
        case REPL_HELP:
            con_help(c, cmd->argc ? cmd->argv[0] : NULL);
            break;
        case REPL_QUIT:
            if (c->bench_running && !cmd->on) { /* decided once the server has let it go */
                con_bench_stop(c);
                c->quit_after_bench = true;
                return false;
            }
            return quit_act(
                c, ui_quit_command(&c->quit, cmd->on, outside_requests(c), now_s(), c->shutdown_s));
        case REPL_NEW:
            chat_stop(c);
            conv_reset(c);
            ui_text_add(c->text, UI_TXT_INFO, "(new conversation)");
            c->scroll = 0;
            break;
        case REPL_SYSTEM:
            free(c->system);
            c->system = strdup(cmd->text);
            conv_reset(c);
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
            con_bench_start(c, cmd->argc, cmd->argv);
            break;
        case REPL_BENCH_STOP:
            if (!con_bench_stop(c)) con_out_error(c, "no benchmark is running");
            break;
        case REPL_RESULTS:
            con_results(c);
            break;
        case REPL_COMPARE:
            con_compare(c, cmd);
            break;
        case REPL_CLEAR:
            ui_text_clear(c->text);
            c->scroll = 0;
            break;
    }
    return false;
}

// ---------------------------------------------------------------------------------------------
// Sampling the engine

static void sample(console_t *c) {
    engine_stats(c->eng, c->snap);
    const stats_snapshot_t *s = c->snap;
    counters_t k = {.t = now_s(),
                    .prompt = s->prompt_tokens,
                    .gen = s->generation_tokens,
                    .ttft_sum = s->ttft.sum,
                    .ttft_n = s->ttft.count,
                    .tpot_sum = s->tpot.sum,
                    .tpot_n = s->tpot.count};
    int cap = (int)(sizeof c->hist / sizeof c->hist[0]);
    if (c->n_hist == cap) {
        memmove(c->hist, c->hist + 1, (size_t)(cap - 1) * sizeof *c->hist);
        c->n_hist--;
    }
    c->hist[c->n_hist++] = k;
    ui_series_push(&c->series[M_RUNNING], s->running);
    ui_series_push(&c->series[M_WAITING], s->waiting);
    ui_series_push(&c->series[M_KV], s->kv_total ? 100.0 * s->kv_used / s->kv_total : 0);
    double ptps = 0, gtps = 0;
    if (c->n_hist > 1) {
        const counters_t *o =
            &c->hist[c->n_hist - 1 - (c->n_hist - 1 < RATE_WIN ? c->n_hist - 1 : RATE_WIN)];
        double dt = k.t - o->t;
        if (dt > 0) {
            ptps = (double)(k.prompt - o->prompt) / dt;
            gtps = (double)(k.gen - o->gen) / dt;
        }
    }
    ui_series_push(&c->series[M_PROMPT_TPS], ptps);
    ui_series_push(&c->series[M_GEN_TPS], gtps);
    /* latency: the mean over the requests that finished in the last LATENCY_WIN_S seconds */
    const counters_t *o = &c->hist[0];
    for (int i = c->n_hist - 1; i >= 0; i--)
        if (k.t - c->hist[i].t <= LATENCY_WIN_S) o = &c->hist[i];
    double ttft = NAN, tpot = NAN;
    if (k.ttft_n > o->ttft_n)
        ttft = 1e3 * (k.ttft_sum - o->ttft_sum) / (double)(k.ttft_n - o->ttft_n);
    if (k.tpot_n > o->tpot_n)
        tpot = 1e3 * (k.tpot_sum - o->tpot_sum) / (double)(k.tpot_n - o->tpot_n);
    if (!isnan(ttft)) c->last_ttft = ttft;
    if (!isnan(tpot)) c->last_tpot = tpot;
    ui_series_push(&c->series[M_TTFT], ttft);
    ui_series_push(&c->series[M_TPOT], tpot);
    c->dirty = true;
}

// ---------------------------------------------------------------------------------------------
// Drawing (UI thread only)

static attr_t attr_of(console_t *c, int pair, attr_t fallback) {
    return c->color ? (attr_t)COLOR_PAIR(pair) : fallback;
}

/* Text clipped to w columns at (y, x). */
static void put(int y, int x, int w, const char *s, size_t len, attr_t a) {
    if (w <= 0 || !len) return;
    size_t n = ui_text_fit(s, len, w, false);
    if (n > len) n = len;
    attrset(a);
    mvaddnstr(y, x, s, (int)n);
    attrset(A_NORMAL);
}

static void putf(console_t *c, int y, int x, int w, attr_t a, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void putf(console_t *c, int y, int x, int w, attr_t a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->line_buf, 4 * MAX_COLS + 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    size_t len = strlen(c->line_buf);
    put(y, x, w, c->line_buf, len, a);
}

/* A panel's title row: "── Title ─────" (or dashes in ASCII mode). */
static void title_rule(console_t *c, layout_rect_t r, const char *title) {
    attr_t a = attr_of(c, PAIR_TITLE, A_BOLD);
    attrset(a);
    for (int x = r.x; x < r.x + r.w; x++) {
        if (c->ascii)
            mvaddch(r.y, x, '-');
        else
            mvaddstr(r.y, x, "\xe2\x94\x80");
    }
    attrset(A_NORMAL);
    putf(c, r.y, r.x + 1, r.w - 2, a | A_BOLD, " %s ", title);
}

/* The header's fields, the name clients must send and the URL last to go (ui_header.h). */
static void draw_header(console_t *c) {
    layout_rect_t r = c->lay.header;
    long up = (long)(now_s() - c->t_start);
    char uptime[32];
    snprintf(uptime, sizeof uptime, "up %02ld:%02ld:%02ld", up / 3600, up / 60 % 60, up % 60);
    const ui_header_field_t f[] = {
        {"Tachyon", 5, false, false},      {c->model_name, 0, false, true},
        {c->model_note, 1, true, false},   {c->url, 0, false, false},
        {c->layout_desc, 3, false, false}, {uptime, 4, false, false},
        {c->backend, 2, false, false},     {c->model_desc, 6, false, false},
    };
    ui_header_fit(f, (int)(sizeof f / sizeof f[0]), r.w - 1, c->ascii, c->line_buf,
                  4 * MAX_COLS + 1);
    attr_t a = attr_of(c, PAIR_BAR, A_REVERSE);
    attrset(a);
    mvhline(r.y, r.x, ' ', r.w);
    attrset(A_NORMAL);
    put(r.y, r.x + 1, r.w - 1, c->line_buf, strlen(c->line_buf), a | A_BOLD);
}

/* Dot bits of the braille cell at *p (a space is an empty cell); advances *p past it. */
static unsigned braille_bits(const char **p) {
    const unsigned char *u = (const unsigned char *)*p;
    if (u[0] == 0xe2 && u[1] && u[2]) {
        *p += 3;
        return ((u[1] & 0x3u) << 6) | (u[2] & 0x3fu);
    }
    *p += 1;
    return 0;
}

/* Merges two rows of width cells into out (>= CHART_ROW_SIZE(width) bytes): braille dots are
 * ORed, ASCII cells take the taller glyph. */
static void overlay_row(const char *a, const char *b, int width, bool ascii, char *out) {
    static const char levels[] = " .:|#";
    char *o = out;
    for (int i = 0; i < width && *a && *b; i++) {
        if (ascii) {
            const char *la = strchr(levels, *a), *lb = strchr(levels, *b);
            *o++ = la && lb && lb > la ? *b : *a;
            a++, b++;
            continue;
        }
        unsigned bits = braille_bits(&a) | braille_bits(&b);
        if (!bits) {
            *o++ = ' ';
        } else {
            *o++ = (char)0xe2;
            *o++ = (char)(0xa0 | (bits >> 6));
            *o++ = (char)(0x80 | (bits & 0x3f));
        }
    }
    *o = '\0';
}

typedef struct chart_spec {
    const char *name, *unit;
    int metric, metric2; /* metric2: overlaid as a line (-1: none) */
    bool percent;
    double floor;
} chart_spec_t;

static const chart_spec_t chart_specs[LAYOUT_CHARTS] = {
    {"running seqs", "", M_RUNNING, -1, false, 1},
    {"waiting seqs", "", M_WAITING, -1, false, 1},
    {"KV cache", "%", M_KV, -1, true, 100},
    {"prompt tok/s", "", M_PROMPT_TPS, -1, false, 10},
    {"gen tok/s", "", M_GEN_TPS, -1, false, 10},
    {"TTFT/TPOT", "ms", M_TTFT, M_TPOT, false, 1},
};

static void draw_chart(console_t *c, int i) {
    const chart_spec_t *sp = &chart_specs[i];
    layout_rect_t r = c->lay.charts[i];
    double win = windows_s[c->window];
    char title[256], v1[16], v2[16], wtxt[32];
    int tw = r.w - 1;
    if (sp->metric2 < 0) {
        chart_title(title, sizeof title, tw, sp->name, win, ui_series_last(&c->series[sp->metric]),
                    sp->unit);
    } else { /* two values, shortened until they fit: "TTFT/TPOT  last 1 min  now 120/15 ms" */
        chart_format_value(c->last_ttft, v1, sizeof v1);
        chart_format_value(c->last_tpot, v2, sizeof v2);
        chart_format_window(win, wtxt, sizeof wtxt);
        snprintf(title, sizeof title, "%s  last %s  now %s/%s %s", sp->name, wtxt, v1, v2,
                 sp->unit);
        if ((int)strlen(title) > tw)
            snprintf(title, sizeof title, "%s %s %s/%s %s", sp->name, wtxt, v1, v2, sp->unit);
        if ((int)strlen(title) > tw)
            snprintf(title, sizeof title, "%s %s/%s %s", sp->name, v1, v2, sp->unit);
    }
    put(r.y, r.x, tw, title, strlen(title), attr_of(c, PAIR_TITLE, A_BOLD));
    int label_w = 5, ph = r.h - 1, pw = r.w - label_w - 2;
    if (ph < 1 || pw < 1) return;
    if (pw > MAX_COLS) pw = MAX_COLS;
    if (ph > MAX_ROWS) ph = MAX_ROWS;
    double span = win * 1000.0 / SAMPLE_MS;
    ui_series_resample(&c->series[sp->metric], span, c->points, 2 * pw);
    chart_opts_t o = {.width = pw,
                      .height = ph,
                      .glyphs = c->ascii ? CHART_ASCII : CHART_BRAILLE,
                      .style = CHART_AREA,
                      .auto_range = !sp->percent,
                      .auto_floor = sp->floor,
                      .ymin = 0,
                      .ymax = 100};
    size_t size = CHART_BUF_SIZE(MAX_COLS, MAX_ROWS);
    if (sp->metric2 >= 0) { /* both series on one scale: the larger decides the top */
        ui_series_resample(&c->series[sp->metric2], span, c->points2, 2 * pw);
        double top = sp->floor;
        for (int k = 0; k < 2 * pw; k++) {
            if (c->points[k] > top) top = c->points[k];
            if (c->points2[k] > top) top = c->points2[k];
        }
        o.auto_range = false;
        o.ymax = chart_nice_top(top, sp->floor);
    }
    double ytop = chart_render(c->points, 2 * pw, &o, c->chart_buf, size);
    if (isnan(ytop)) return;
    if (sp->metric2 >= 0) {
        o.style = CHART_LINE;
        if (isnan(chart_render(c->points2, 2 * pw, &o, c->chart_buf2, size))) return;
    }
    char labels[MAX_ROWS * 8];
    chart_ylabels(0, ytop, ph, label_w, labels, 8);
    attr_t la = c->color ? A_NORMAL : A_DIM;
    attr_t ca = attr_of(c, PAIR_CHART, A_NORMAL);
    for (int row = 0; row < ph; row++) {
        put(r.y + 1 + row, r.x, label_w, labels + row * 8, strlen(labels + row * 8), la);
        const char *line = chart_row(c->chart_buf, pw, row);
        if (sp->metric2 >= 0) {
            overlay_row(line, chart_row(c->chart_buf2, pw, row), pw, c->ascii, c->line_buf);
            line = c->line_buf;
        }
        attrset(ca);
        mvaddstr(r.y + 1 + row, r.x + label_w + 1, line);
        attrset(A_NORMAL);
    }
}

static void draw_flags(console_t *c) {
    layout_rect_t r = c->lay.flags;
    if (layout_rect_empty(r)) return;
    title_rule(c, r, "Flags (* changed)");
    int y = r.y + 1, w = r.w - 1;
    /* changed flags first, so that a /set is always in view */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < c->n_flags && y < r.y + r.h; i++) {
            if (c->flag_changed[i] != (pass == 0)) continue;
            attr_t a = c->flag_changed[i] ? attr_of(c, PAIR_CHANGED, A_BOLD) | A_BOLD : A_NORMAL;
            const char *name = flags_at(i)->name, *value = c->flag_text[i];
            /* the value right-aligned and never cut; the name cut to what is left */
            int vw = (int)strlen(value), nw = w - 2 - vw;
            if (nw < 1) nw = 1;
            putf(c, y++, r.x + 1, w, a, "%c%-*.*s %s", c->flag_changed[i] ? '*' : ' ', nw, nw, name,
                 value);
        }
}

static void progress_bar(console_t *c, char *buf, size_t size, int width) {
    int total = c->prog.total > 0 ? c->prog.total : 1;
    int fill = (int)((long)width * c->prog.done / total);
    size_t k = 0;
    buf[k++] = '[';
    for (int i = 0; i < width && k + 2 < size; i++)
        buf[k++] = i < fill ? '#' : '.';
    buf[k++] = ']';
    buf[k] = '\0';
}

/* The engine's live requests (oldest first; the console's chat and the benchmark's requests
 * among them), the benchmark's progress and the engine's totals. */
static void draw_requests(console_t *c) {
    static const char *const state_names[] = {"waiting", "prefill", "decode", "preempted"};
    layout_rect_t r = c->lay.requests;
    if (layout_rect_empty(r)) return;
    title_rule(c, r, "Requests");
    int y = r.y + 1, w = r.w - 1, end = r.y + r.h;
    const stats_snapshot_t *s = c->snap;
    if (y < end)
        putf(c, y++, r.x + 1, w, A_BOLD, "engine: %d running, %d waiting", s->running, s->waiting);
    /* the benchmark's own lines only when two request rows still fit (the status line shows
     * its progress too) */
    if (c->bench_running && end - y >= 8) {
        putf(c, y++, r.x + 1, w, A_NORMAL, "bench   %d in flight, %d/%d done, %d failed",
             c->prog.in_flight, c->prog.done, c->prog.total, c->prog.failed);
        if (y < end) {
            char bar[128];
            progress_bar(c, bar, sizeof bar, w - 12 > 60 ? 60 : w - 12);
            putf(c, y++, r.x + 1, w, attr_of(c, PAIR_OK, A_BOLD), "%s %.0f s", bar,
                 c->prog.elapsed);
        }
    }
    /* the id takes what the numbers and the state (29 columns) leave */
    int id_w = w - 29 < 6 ? 6 : w - 29 > 40 ? 40 : w - 29;
    if (y < end)
        putf(c, y++, r.x + 1, w, A_DIM, "%-*s %6s %5s %5s %s", id_w, "id", "prompt", "gen", "secs",
             "state");
    /* the console's own reply first: with a benchmark queued ahead it may be far down the list */
    const char *chat_id = c->stream ? c->chat_rid : "";
    if (c->stream && y < end - 1)
        putf(c, y++, r.x + 1, w, A_BOLD, "%-*s %6d %5d %5.1f %s", id_w, chat_id, c->req_prompt,
             c->req_gen, now_s() - c->req_t0, c->req_started ? "decode" : "prefill");
    int shown = c->stream ? 1 : 0;
    for (int i = 0; i < s->n_active && y < end - 2; i++) {
        const stats_active_t *a = &s->active[i];
        if (!strcmp(a->id, chat_id)) continue;
        /* a long id (the API's chatcmpl-<hex>) shows its distinctive end, marked with '~' */
        char id[sizeof a->id];
        size_t n = strlen(a->id);
        if (n == 0)
            snprintf(id, sizeof id, "-");
        else if ((int)n <= id_w)
            snprintf(id, sizeof id, "%s", a->id);
        else
            snprintf(id, sizeof id, "~%s", a->id + n - (size_t)(id_w - 1));
        putf(c, y++, r.x + 1, w, a->state == STATS_REQ_DECODE ? A_NORMAL : A_DIM,
             "%-*s %6d %5d %5.1f %s", id_w, id, a->prompt_tokens, a->generated,
             s->active_t - a->arrival, state_names[a->state]);
        shown++;
    }
    if (s->n_active_total > shown && y < end - 1)
        putf(c, y++, r.x + 1, w, A_DIM, "... and %d more", s->n_active_total - shown);
    if (s->n_active_total == 0 && y < end - 1) put(y++, r.x + 1, w, "(no requests)", 13, A_DIM);
    if (y < end)
        putf(c, y++, r.x + 1, w, A_DIM, "%llu submitted, %llu done, %llu preempted",
             (unsigned long long)s->requests_submitted,
             (unsigned long long)(s->requests_finished[0] + s->requests_finished[1] +
                                  s->requests_finished[2] + s->requests_finished[3]),
             (unsigned long long)s->preemptions);
}

static attr_t text_attr(console_t *c, ui_txt_style_t st) {
    switch (st) {
        case UI_TXT_USER:
            return attr_of(c, PAIR_USER, A_BOLD) | A_BOLD;
        case UI_TXT_REASONING:
        case UI_TXT_FOLD:
        case UI_TXT_INFO:
            return A_DIM;
        case UI_TXT_ERROR:
            return attr_of(c, PAIR_ERROR, A_BOLD) | A_BOLD;
        default:
            return A_NORMAL;
    }
}

static void draw_chat(console_t *c) {
    layout_rect_t r = c->lay.chat;
    int h = r.h - 1 > MAX_ROWS ? MAX_ROWS : r.h - 1;
    int n = ui_text_rows(c->text, r.w - 1, h, &c->scroll, c->show_reasoning, c->rows);
    title_rule(c, r,
               c->scroll ? "Chat and output (scrolled up: PgDn goes back)" : "Chat and output");
    int y0 = r.y + 1 + (h - n); /* bottom-aligned */
    for (int i = 0; i < n; i++)
        put(y0 + i, r.x, r.w, c->rows[i].text, c->rows[i].len, text_attr(c, c->rows[i].style));
}

static void draw_repl(console_t *c) {
    layout_rect_t r = c->lay.repl;
    const char *prompt = c->stream ? "... " : "> ";
    int pw = (int)strlen(prompt);
    attr_t pa = attr_of(c, PAIR_TITLE, A_BOLD) | A_BOLD;
    put(r.y, r.x, r.w, prompt, strlen(prompt), pa);
    le_view_t v;
    int fw = r.w - pw - 1;
    if (fw < 1) fw = 1;
    le_render(c->le, fw, &v);
    /* a line break takes one column, drawn as a mark, so a pasted message reads as one */
    int x = r.x + pw;
    for (const char *p = v.text, *end = v.text + v.len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        put(r.y, x, r.x + pw + fw - x, p, n, A_NORMAL);
        x += le_text_width(p, n);
        if (!nl) break;
        put(r.y, x++, 1, c->ascii ? "|" : "\xe2\x8f\x8e", c->ascii ? 1 : 3, A_DIM);
        p = nl + 1;
    }
    if (v.suggest_len)
        put(r.y, r.x + pw + v.text_cols, fw - v.text_cols, v.suggest, v.suggest_len, A_DIM);
    move(r.y, r.x + pw + v.cursor_col);
}

static void draw_status(console_t *c) {
    layout_rect_t r = c->lay.status;
    char left[160], bar[64] = "";
    if (c->bench_running) {
        progress_bar(c, bar, sizeof bar, 20);
        snprintf(left, sizeof left, "ready | bench %s %d/%d |", bar, c->prog.done, c->prog.total);
    } else if (c->flag_busy) {
        static const char spin[] = "|/-\\";
        snprintf(left, sizeof left, "ready | applying %s %c %.1f s |", c->flag_name,
                 spin[(int)(now_s() * 8) % 4], now_s() - c->flag_t0);
    } else {
        char wtxt[32];
        chart_format_window(windows_s[c->window], wtxt, sizeof wtxt);
        snprintf(left, sizeof left, "ready | F1 help | +/- window %s | F2 reasoning %s |", wtxt,
                 c->show_reasoning ? "shown" : "hidden");
    }
    attr_t a = attr_of(c, PAIR_BAR, A_REVERSE);
    attrset(a);
    mvhline(r.y, r.x, ' ', r.w);
    attrset(A_NORMAL);
    int lw = (int)strlen(left);
    put(r.y, r.x, r.w, left, (size_t)lw, a | A_BOLD);
    if (r.w > lw + 1) {
        attr_t sa = c->status_error ? (attr_of(c, PAIR_ERROR, A_REVERSE) | A_BOLD) : a;
        put(r.y, r.x + lw + 1, r.w - lw - 1, c->status, strlen(c->status), sa);
    }
}

/* The help overlay: the keys, then the commands, wrapped to the width; when it does not fit
 * (80x24 does not hold it) it scrolls, and its title and last row say so. */
static void draw_help(console_t *c) {
    int w = COLS - 4 < 96 ? COLS - 4 : 96, h = LINES - 2;
    int x = (COLS - w) / 2, y = 1, rows = h - 2 < MAX_ROWS ? h - 2 : MAX_ROWS;
    for (int row = 0; row < h; row++)
        mvhline(y + row, x, ' ', w);
    int top = 1 << 20; /* clamped to the scroll that shows the first row */
    ui_text_rows(c->help_text, w - 2, rows, &top, true, c->rows);
    if (c->help_scroll > top) c->help_scroll = top;
    int n = ui_text_rows(c->help_text, w - 2, rows, &c->help_scroll, true, c->rows);
    title_rule(c, (layout_rect_t){x, y, w, 1},
               top ? "Help (Up/Down, PgUp/PgDn scroll; any other key closes)"
                   : "Help (any key closes)");
    for (int i = 0; i < n; i++)
        put(y + 1 + i, x + 1, w - 2, c->rows[i].text, c->rows[i].len, A_NORMAL);
    if (top)
        putf(c, y + h - 1, x + 1, w - 2, A_DIM, "%s",
             c->help_scroll == top ? "-- PgDn: more below --"
             : c->help_scroll      ? "-- PgUp / PgDn: more above and below --"
                                   : "-- end (PgUp: more above) --");
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

static void draw_too_small(console_t *c) {
    char msg[3][64];
    snprintf(msg[0], sizeof msg[0], "terminal too small: need %dx%d", c->lay.min_w, c->lay.min_h);
    snprintf(msg[1], sizeof msg[1], "(now %dx%d)", COLS, LINES);
    snprintf(msg[2], sizeof msg[2], "/quit or Ctrl-C leaves");
    int y = LINES / 2 - 1 > 0 ? LINES / 2 - 1 : 0;
    for (int i = 0; i < 3 && y + i < LINES; i++) {
        int len = (int)strlen(msg[i]), x = COLS > len ? (COLS - len) / 2 : 0;
        put(y + i, x, COLS - x, msg[i], (size_t)len, i == 0 ? A_BOLD : A_DIM);
    }
}

static void draw(console_t *c) {
    werase(stdscr);
    if (c->lay.too_small) {
        curs_set(0);
        draw_too_small(c);
    } else if (c->help) {
        curs_set(0);
        draw_header(c);
        draw_help(c);
        draw_status(c);
    } else {
        draw_header(c);
        for (int i = 0; i < c->lay.n_charts; i++)
            draw_chart(c, i);
        draw_flags(c);
        draw_requests(c);
        draw_chat(c);
        draw_status(c);
        curs_set(1);
        draw_repl(c); /* last: it leaves the cursor in the line */
    }
    wnoutrefresh(stdscr);
    doupdate();
    c->dirty = false;
    c->last_frame = now_s();
}

static void relayout(console_t *c) {
    layout_compute(COLS, LINES, &c->lay);
    c->dirty = true;
}

// ---------------------------------------------------------------------------------------------
// Keys

static void scroll_by(console_t *c, int rows) {
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

/* One decoded key (input.h); returns true to quit. */
static bool console_key(console_t *c, const input_event_t *ev) {
    c->dirty = true;
    int ch = ev->key;
    if (ev->kind == INPUT_KEY && ev->curses_key && ch == KEY_RESIZE) {
        relayout(c);
        return false;
    }
    if (c->help && ev->kind != INPUT_PASTE) { /* a paste closes the help and is kept */
        help_key(c, ev);
        return false;
    }
    c->help = false;
    switch (ev->kind) {
        case INPUT_ESC:
            chat_stop(c);
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
        if (ch == KEY_F(1))
            open_help(c);
        else if (ch == KEY_F(2))
            c->show_reasoning = !c->show_reasoning;
        else if (ch == KEY_PPAGE)
            scroll_by(c, c->lay.chat.h > 3 ? c->lay.chat.h - 2 : 1);
        else if (ch == KEY_NPAGE)
            scroll_by(c, -(c->lay.chat.h > 3 ? c->lay.chat.h - 2 : 1));
        return false;
    }
    if (ch == 12) { /* Ctrl-L */
        clearok(curscr, TRUE);
        relayout(c);
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
static bool read_keys(console_t *c) {
    wint_t ch;
    int rc, n;
    input_event_t ev[2];
    while ((rc = get_wch(&ch)) != ERR) {
        n = input_feed(c->in, rc == KEY_CODE_YES, (int)ch, now_s(), ev);
        for (int i = 0; i < n; i++)
            if (console_key(c, &ev[i])) return true;
    }
    n = input_idle(c->in, now_s(), ev);
    return n && console_key(c, &ev[0]);
}

// ---------------------------------------------------------------------------------------------
// Set-up

static void handle_event(console_t *c, const ui_event_t *ev) {
    switch (ev->type) {
        case UI_EV_WAKE:
            chat_pump(c);
            break;
        case UI_EV_BENCH_PROGRESS:
            c->prog = ev->progress;
            c->dirty = true;
            break;
        case UI_EV_BENCH_DONE:
            con_bench_done(c, ev);
            break;
        case UI_EV_FLAG_DONE:
            flag_done(c, ev);
            break;
        case UI_EV_LOG:
            ui_text_add(c->text, UI_TXT_INFO, ev->text);
            c->dirty = true;
            break;
    }
}

/* The header's model: the name clients must send (the first served name: the --model argument
 * as given unless --served-model-name says otherwise), and what kind of weights it has. */
static void describe(console_t *c, const cli_engine_t *ce, const cli_server_t *sv) {
    const engine_opts_t *o = &ce->opts;
    model_config_describe(engine_model_config(c->eng), c->model_desc, sizeof c->model_desc);
    snprintf(c->model_name, sizeof c->model_name, "%s", sv->names[0]);
    if (!strcmp(o->model.model, MDIR_EMBEDDED))
        snprintf(c->model_note, sizeof c->model_note, "(demo model, toy weights)");
    else if (o->model.format == LOAD_DUMMY)
        snprintf(c->model_note, sizeof c->model_note, "(dummy random weights)");
    engine_describe_backend(c->eng, c->backend, sizeof c->backend);
    snprintf(c->layout_desc, sizeof c->layout_desc, "TP %d%s", o->flags.tensor_parallel_size,
             o->flags.enable_expert_parallel ? " EP" : "");
}

static int init_curses(console_t *c) {
    if (!(c->screen = newterm(NULL, stdout, stdin))) return -1;
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    nodelay(stdscr, TRUE);
    set_escdelay(25);
    if (c->color && has_colors()) {
        start_color();
        use_default_colors();
        init_pair(PAIR_TITLE, COLOR_CYAN, -1);
        init_pair(PAIR_CHART, COLOR_GREEN, -1);
        init_pair(PAIR_ERROR, COLOR_RED, -1);
        init_pair(PAIR_USER, COLOR_YELLOW, -1);
        init_pair(PAIR_CHANGED, COLOR_MAGENTA, -1);
        init_pair(PAIR_BAR, COLOR_BLACK, COLOR_CYAN);
        init_pair(PAIR_OK, COLOR_GREEN, -1);
    } else {
        c->color = false;
    }
    input_start(c->in, stdout);
    return 0;
}

/* A line the engine, a backend or the server wrote to stderr (ui_log's reader thread): to the
 * output pane, without the program's name. Dropped when the queue is full: it must not block. */
static void on_log_line(void *user, const char *line) {
    console_t *c = user;
    ui_event_t ev = {.type = UI_EV_LOG};
    if (!strncmp(line, "tachyon: ", 9)) line += 9;
    snprintf(ev.text, sizeof ev.text, "%s", line);
    ui_queue_push(c->q, &ev);
}

static void console_free(console_t *c) {
    ui_log_stop(c->log); /* first: its thread posts to the queue */
    if (c->stream) engine_stream_release(c->stream);
    chat_reasoning_destroy(c->rs);
    results_destroy(c->results);
    le_destroy(c->le);
    input_destroy(c->in);
    ui_text_destroy(c->text);
    ui_text_destroy(c->help_text);
    ui_queue_destroy(c->q);
    conversation_free(&c->conv);
    jb_free(&c->reply);
    free(c->system);
    free(c->snap);
    free(c->chart_buf);
    free(c->chart_buf2);
    free(c->points);
    free(c->points2);
    free(c->line_buf);
    free(c->rows);
    free(c);
}

/* The UI loop: returns when the user quits. */
static void ui_loop(console_t *c) {
    c->next_sample = now_s();
    for (;;) {
        double t = now_s();
        if (t >= c->next_sample) {
            sample(c);
            if (t - c->flags_read_at > 1.0) read_flags(c); /* the admin endpoint changes them */
            if (c->quit.draining) {
                int n = http_in_flight(c->srv);
                if (quit_act(c, ui_quit_tick(&c->quit, n, t))) return;
                con_set_status(c, false,
                               "draining: %d request%s in flight, %.0f s left (Ctrl-C "
                               "aborts)",
                               n, n == 1 ? "" : "s", c->quit.drain_end - t);
            }
            c->next_sample += SAMPLE_MS / 1e3;
            if (c->next_sample < t) c->next_sample = t + SAMPLE_MS / 1e3;
        }
        chat_pump(c);
        if (c->dirty && t - c->last_frame >= FRAME_MS / 1e3) draw(c);
        double wait = c->next_sample - now_s();
        if (c->dirty) {
            double f = c->last_frame + FRAME_MS / 1e3 - now_s();
            if (f < wait) wait = f;
        }
        int ms = wait > 0 ? (int)(wait * 1e3) + 1 : 0;
        struct pollfd p[2] = {{.fd = STDIN_FILENO, .events = POLLIN},
                              {.fd = ui_queue_fd(c->q), .events = POLLIN}};
        int n = poll(p, 2, ms), poll_errno = errno; /* on_signals may change errno (drain) */
        if (on_signals(c)) return;
        if (n < 0 && poll_errno != EINTR) return;
        if (p[1].revents & POLLIN) {
            ui_queue_ack(c->q);
            ui_event_t ev;
            while (ui_queue_pop(c->q, &ev))
                handle_event(c, &ev);
        }
        /* also after EINTR: SIGWINCH makes curses queue KEY_RESIZE */
        if (read_keys(c)) return;
        if (on_signals(c)) return;
    }
}

int cmd_console(int argc, char **argv) {
    static const struct option longopts[] = {
        {"results-dir", required_argument, 0, 'r'},
        {"max-tokens", required_argument, 0, 'n'},
        {"shutdown-timeout", required_argument, 0, 'S'},
        {"no-color", no_argument, 0, 'C'},
        {"ascii", no_argument, 0, 'A'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    cli_engine_t ce;
    cli_server_t sv;
    if (cli_engine_args(&ce, &argc, argv) < 0 || cli_server_args(&sv, &argc, argv) < 0) return 2;
    console_t *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "tachyon: out of memory\n");
        return 1;
    }
    const char *no_color = getenv("NO_COLOR");
    c->color = !(no_color && *no_color);
    c->max_tokens = 512;
    c->shutdown_s = 30;
    c->think = true;
    c->show_reasoning = true;
    c->window = 1;
    c->format = -1;
    int opt;
    long v;
    float grace;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
            case 'r':
                snprintf(c->results_dir, sizeof c->results_dir, "%s", optarg);
                break;
            case 'n':
                if (cli_parse_long(optarg, 1, 1 << 20, &v) < 0) {
                    fprintf(stderr, "tachyon: --max-tokens must be a positive integer\n");
                    goto usage_error;
                }
                c->max_tokens = (int)v;
                break;
            case 'S':
                if (cli_parse_float(optarg, 0, 1e6f, &grace) < 0) {
                    fprintf(stderr, "tachyon: --shutdown-timeout must be a number of seconds\n");
                    goto usage_error;
                }
                c->shutdown_s = grace;
                break;
            case 'C':
                c->color = false;
                break;
            case 'A':
                c->ascii = true;
                break;
            case 'h':
                fputs(console_usage, stdout);
                free(c);
                return 0;
            default:
                fputs("(tachyon console --help lists the options)\n", stderr);
                goto usage_error;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tachyon: unexpected argument \"%s\" (tachyon console --help)\n",
                argv[optind]);
        goto usage_error;
    }
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        fprintf(stderr, "tachyon: the console needs a terminal; use `tachyon serve` or "
                        "`tachyon chat` without one\n");
        free(c);
        return 2;
    }
    err_t err = {{0}};
    if (!c->results_dir[0] &&
        results_default_dir(c->results_dir, sizeof c->results_dir, &err) < 0) {
        fprintf(stderr, "tachyon: %s (--results-dir names a directory)\n", err.msg);
        free(c);
        return 2;
    }
    if (!(c->results = results_create(c->results_dir, &err))) {
        fprintf(stderr, "tachyon: %s\n", err.msg);
        free(c);
        return 1;
    }
    char results_note[1024];
    results_load(c->results, results_note, sizeof results_note);

    setlocale(LC_ALL, "");
    if (strcmp(nl_langinfo(CODESET), "UTF-8")) c->ascii = true;

    c->snap = malloc(sizeof *c->snap);
    c->chart_buf = malloc(CHART_BUF_SIZE(MAX_COLS, MAX_ROWS));
    c->chart_buf2 = malloc(CHART_BUF_SIZE(MAX_COLS, MAX_ROWS));
    c->points = malloc(2 * MAX_COLS * sizeof *c->points);
    c->points2 = malloc(2 * MAX_COLS * sizeof *c->points2);
    c->line_buf = malloc(4 * MAX_COLS + 1);
    c->rows = malloc(MAX_ROWS * sizeof *c->rows);
    c->q = ui_queue_create(1024, &err);
    c->text = c->q ? ui_text_create(TEXT_LINES, &err) : NULL;
    c->help_text = c->text ? ui_text_create(100, &err) : NULL;
    c->le = c->help_text ? le_create(REPL_LINE_MAX - 1, 1000, &err) : NULL;
    c->in = c->le ? input_create(REPL_LINE_MAX - 1, &err) : NULL;
    if (!c->snap || !c->chart_buf || !c->chart_buf2 || !c->points || !c->points2 || !c->line_buf ||
        !c->rows || !c->in) {
        fprintf(stderr, "tachyon: %s\n", err.msg[0] ? err.msg : "out of memory");
        console_free(c);
        return 1;
    }
    jb_init(&c->reply);
    for (int i = 0; i < N_METRICS; i++)
        ui_series_init(&c->series[i]);
    c->last_ttft = c->last_tpot = NAN;
    flags_init(&c->def_flags);
    c->cc.values = &c->cur_flags;
    le_set_completer(c->le, repl_complete, &c->cc);
    char cmds[8192];
    if (repl_help(NULL, cmds, sizeof cmds, &err) < 0) cmds[0] = '\0';
    ui_text_add(c->help_text, UI_TXT_NORMAL, help_keys);
    ui_text_add(c->help_text, UI_TXT_NORMAL, cmds);
    if (le_history_path(c->hist_path, sizeof c->hist_path, &err) == 0) {
        c->have_hist = true;
        le_history_load(c->le, c->hist_path, &err);
    }

    /* Every thread the engine, the server and curl start inherits this mask: only the UI
     * thread takes SIGINT, SIGTERM and SIGWINCH. */
    sigset_t old;
    block_ui_signals(&old);
    signal(SIGPIPE, SIG_IGN);
    fprintf(stderr, "tachyon: opening the model...\n");
    /* what the engine says from here on (the KV-cache size) shows in the output pane too */
    if (!(c->log = ui_log_start(on_log_line, c, &err)))
        fprintf(stderr, "tachyon: %s: messages go to the terminal\n", err.msg);
    if (cli_engine_open(&ce) < 0) {
        console_free(c);
        return 1;
    }
    c->eng = ce.eng;
    cli_server_finish(&sv, &ce);
    /* the console's own benchmarks authenticate with the first key */
    c->api_key = sv.n_keys ? sv.keys[0] : NULL;
    /* reasoning split by default here: the console's operator reads replies as chat */
    if (!sv.reasoning_given) sv.ho.reasoning_qwen3 = true;
    const http_opts_t *ho = &sv.ho;
    if (http_start(c->eng, ho, &c->srv, &err) < 0) {
        fprintf(stderr, "tachyon: %s\n", err.msg);
        cli_engine_close(&ce);
        console_free(c);
        return 1;
    }
    const char *host = ho->host;
    bool any = !strcmp(host, "0.0.0.0") || !strcmp(host, "::");
    bool v6 = strchr(host, ':') != NULL && !any;
    snprintf(c->url, sizeof c->url, "http://%s%s%s:%d", v6 ? "[" : "", any ? "127.0.0.1" : host,
             v6 ? "]" : "", http_port(c->srv));
    int fmt = engine_chat_format(c->eng);
    c->format = engine_tokenizer(c->eng) && fmt >= 0 ? fmt : -1;
    describe(c, &ce, &sv);
    c->t_start = now_s();
    read_flags(c);
    auto_baseline(c, &ce.opts.flags);

    pthread_setname_np(pthread_self(), "tachyon-ui");
    int rc = 0;
    if (init_curses(c) < 0) {
        fprintf(stderr,
                "tachyon: cannot start curses on this terminal (TERM=%s); "
                "`tachyon serve` and `tachyon chat` work without one\n",
                getenv("TERM") ? getenv("TERM") : "");
        rc = 1;
    } else {
        /* a terminal's stderr is the screen now; a file keeps every line */
        if (c->log) ui_log_echo(c->log, !isatty(ui_log_fd(c->log)));
        signal_queue = c->q;
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        relayout(c);
        ui_text_addf(c->text, UI_TXT_INFO,
                     "Serving %s at %s (OpenAI API). Type a message to chat, /help for commands, "
                     "F1 for keys.",
                     sv.names[0], c->url);
        if (results_note[0]) ui_text_add(c->text, UI_TXT_INFO, results_note);
        if (c->format < 0)
            ui_text_add(c->text, UI_TXT_INFO,
                        "(this model has no tokenizer or chat template: "
                        "chat is off)");
        con_set_status(c, false, "server listening");
        ui_loop(c);
        input_stop(c->in, stdout);
        endwin();
        ui_log_stop(c->log); /* the terminal's again: what follows goes to stderr */
        c->log = NULL;
        delscreen(c->screen);
        signal_queue = NULL;
    }
    fprintf(stderr, "tachyon: stopping\n");
    if (c->bench_running) {
        atomic_store(&c->bench_stop, true);
        pthread_join(c->bench_thread, NULL);
        ui_event_t ev;
        while (ui_queue_pop(c->q, &ev))
            if (ev.type == UI_EV_BENCH_DONE) bench_result_destroy(ev.ptr);
    }
    if (c->flag_busy) pthread_join(c->flag_thread, NULL);
    if (c->stream) {
        engine_stream_release(c->stream);
        c->stream = NULL;
    }
    http_shutdown(c->srv, 0);
    http_destroy(c->srv);
    cli_engine_close(&ce);
    console_free(c);
    return rc;

usage_error:
    free(c);
    return 2;
}

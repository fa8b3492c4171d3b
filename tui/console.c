/* `tachyon` / `tachyon console`: the operator's console. It opens the engine, starts the
 * embedded OpenAI server (as `tachyon serve` does) and runs the ncurses UI on the main thread:
 * header, live charts, requests table, flags panel, the chat/output pane, the REPL line and a
 * status line.
 *
 * This file: options, set-up and teardown, the UI loop, signals and quitting. The state is
 * console_int.h's console_t; keys and commands are in console_cmd.c, the chat in
 * console_chat.c, benchmarks in console_bench.c, and console_draw.c draws each frame from a
 * snapshot (con_view_t) taken here.
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
#include <unistd.h>

#include <curses.h>

#include "cli.h"
#include "console_int.h"
#include "mdir.h"
#include "sweep.h"
#include "ui_log.h"

#define FRAME_MS      100  /* at most ten frames a second */
#define TEXT_LINES    5000 /* lines the chat/output pane keeps */
#define LATENCY_WIN_S 5.0  /* TTFT / TPOT charts: mean over the requests of the last 5 s */
#define RATE_WIN      4    /* tokens/s over the last 4 samples (1 s) */
#define GPU_PERIOD_S  1.0  /* NVML and /proc read once a second (on the sampler thread) */
#define OPS_WIN_S     5.0  /* step time, tokens per step, preemptions/s: over the last 5 s */
#define RANK_WIN_S    1.0  /* the rank rows' per-step times: over intervals of 1 s */
#define STATS_LINE_S  5.0  /* the log's stats line, as often as tachyon serve's by default */

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
    "  --shutdown-timeout S /quit --drain, SIGTERM and SIGHUP: seconds to let requests\n"
    "                       finish (default 30)\n"
    "  --no-color           no colours (also when NO_COLOR is set)\n"
    "  --ascii              ASCII charts and borders (automatic when the locale is not UTF-8)\n"
    "  --chat-idle S        seconds without use before the chat pane shrinks and the charts\n"
    "                       grow (default 30; 0 = never)\n"
    "  --no-mouse           leave the mouse to the terminal (its selection) instead of the\n"
    "                       wheel scrolling the pane and clicks on F-keys and charts\n"
    "  --watch URL [URL...] watch replicas' /metrics instead, one row each; opens no model\n"
    "                       (tachyon console --watch --help)\n"
    "\n" CLI_SERVER_HELP CLI_ENGINE_HELP;

static volatile sig_atomic_t got_sigint, got_sigterm;
static ui_queue_t *signal_queue;

static void on_signal(int sig) {
    if (sig == SIGTERM || sig == SIGHUP) /* a hang-up: the terminal is gone, drain and quit */
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

/* Blocks SIGINT, SIGTERM, SIGHUP and SIGWINCH in the calling thread (and the threads it starts
 * next); *old receives the mask to restore. */
static void block_ui_signals(sigset_t *old) {
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
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
// Quitting (ui_quit.h decides; this carries it out)

/* Requests on the server that are not the console's own benchmark's: other clients'. */
static int outside_requests(console_t *c) {
    int n = http_in_flight(c->srv) - (c->bench_running ? c->prog.in_flight : 0);
    return n > 0 ? n : 0;
}

/* The console's own reply is running and has not been asked to stop, or its benchmark runs:
 * until a stopped benchmark is done, the server's count still holds its requests. */
static bool own_busy(console_t *c) {
    return (c->reply && !c->reply_stopping) || c->bench_running;
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
            con_chat_stop(c);
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
            con_chat_stop(c);
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

bool con_quit_command(console_t *c, bool drain) {
    if (c->bench_running && !drain) { /* decided once the server has let it go */
        con_bench_stop(c);
        c->quit_after_bench = true;
        return false;
    }
    return quit_act(c,
                    ui_quit_command(&c->quit, drain, outside_requests(c), now_s(), c->shutdown_s));
}

// ---------------------------------------------------------------------------------------------
// Sampling the engine

/* The GPUs (or the process) once a second, the operator's numbers every sample, and the band
 * grown when they need more rows than it has (o: the counters LATENCY_WIN_S ago). */
/* The tensor-parallel ranks of every replica, their per-step forward and collective times over
 * the last RANK_WIN_S interval (kept between intervals; reset when the layout changes). */
static void sample_ranks(console_t *c, double t) {
    int dp = engine_replicas(c->eng), n = 0;
    backend_rank_stats_t cur[UI_VITALS_MAX_RANKS];
    struct ui_rank who[UI_VITALS_MAX_RANKS];
    for (int i = 0; i < dp && n < UI_VITALS_MAX_RANKS; i++) {
        int got = engine_rank_stats(c->eng, i, cur + n, UI_VITALS_MAX_RANKS - n);
        for (int r = 0; r < got && n < UI_VITALS_MAX_RANKS; r++, n++)
            who[n] = (struct ui_rank){.replica = dp > 1 ? i : -1, .rank = r};
    }
    bool reset = n != c->n_ranks;
    for (int k = 0; k < n && !reset; k++)
        reset = cur[k].steps < c->rank_prev[k].steps;
    if (reset || t - c->rank_prev_t >= RANK_WIN_S) {
        for (int k = 0; k < n; k++) {
            uint64_t steps = reset ? 0 : cur[k].steps - c->rank_prev[k].steps;
            who[k].fwd_ms =
                steps ? 1e3 * (cur[k].forward_s - c->rank_prev[k].forward_s) / steps : NAN;
            who[k].coll_ms = steps ? 1e3 * (cur[k].coll_s - c->rank_prev[k].coll_s) / steps : NAN;
            c->rank_prev[k] = cur[k];
            c->rank_last[k] = who[k];
        }
        c->rank_prev_t = t;
        c->n_ranks = n;
    }
    c->ops.n_ranks = c->n_ranks;
    memcpy(c->ops.rank, c->rank_last, (size_t)c->n_ranks * sizeof c->rank_last[0]);
}

static void sample_machine(console_t *c, double t, const counters_t *o) {
    /* the sampler thread's latest (NVML's calls never run here); until its first, none */
    if (c->gpu_sampler) ui_gpu_sampler_latest(c->gpu_sampler, &c->gpu_s, &c->gpu_seq);
    const ui_gpu_sample_t *g = &c->gpu_s;
    if (g->n) {
        ui_series_push(&c->series[M_DEV_UTIL], ui_gpu_mean_util(g));
        ui_series_push(&c->series[M_DEV_MEM], ui_gpu_mean_mem_pct(g));
    } else {
        ui_series_push(&c->series[M_DEV_UTIL], g->cpu_pct / g->n_cpus);
        ui_series_push(&c->series[M_DEV_MEM], g->mem_total > 0 ? 100 * g->rss / g->mem_total : NAN);
    }
    const stats_snapshot_t *s = c->snap;
    ui_ops_from_stats(s, t, OPS_WIN_S, &c->ops);
    c->ops.block_size = c->cur_flags.block_size;
    c->ops.max_model_len = c->cur_flags.max_model_len;
    c->ops.kv_fp8 = c->cur_flags.kv_cache_dtype == KV_DTYPE_FP8;
    /* data-parallel replicas: a row each, from their own snapshots */
    sample_ranks(c, t);
    for (int i = 0; i < c->n_rsnap && i < UI_VITALS_MAX_REPLICAS; i++)
        ui_ops_replica(&c->ops, i, c->rsnap[i], t, OPS_WIN_S);
    const counters_t *k = &c->hist[c->n_hist - 1];
    if (k->queue_n > o->queue_n)
        c->ops.queue_ms = 1e3 * (k->queue_sum - o->queue_sum) / (double)(k->queue_n - o->queue_n);
    else if (s->queue.count)
        c->ops.queue_ms = 1e3 * s->queue.sum / (double)s->queue.count;
    int rows;
    ui_vitals_lay(g, &c->ops, COLS, 16, c->vsegs, UI_VITALS_MAX_SEGS, &rows);
    if (rows > c->band_rows) con_relayout(c);
}

/* The engine's snapshot into c->snap; with data-parallel replicas each one's into c->rsnap too
 * and their sum into c->snap (what engine_stats computes), so that each replica is copied once
 * per sample, not once for the sum and again for its row. */
static void take_stats(console_t *c) {
    int dp = engine_replicas(c->eng);
    c->n_rsnap = 0;
    if (dp > 1 && dp <= STATS_MERGE_MAX) {
        int got = 0;
        while (got < dp && (c->rsnap[got] || (c->rsnap[got] = malloc(sizeof *c->rsnap[got]))))
            engine_replica_stats(c->eng, got, c->rsnap[got]), got++;
        if (got == dp) {
            stats_merge(c->snap, c->rsnap, dp);
            c->n_rsnap = dp;
            return;
        }
    }
    engine_stats(c->eng, c->snap);
}

static void sample(console_t *c) {
    take_stats(c);
    const stats_snapshot_t *s = c->snap;
    counters_t k = {.t = now_s(),
                    .prompt = s->prompt_tokens,
                    .gen = s->generation_tokens,
                    .ttft_sum = s->ttft.sum,
                    .ttft_n = s->ttft.count,
                    .tpot_sum = s->tpot.sum,
                    .tpot_n = s->tpot.count,
                    .queue_sum = s->queue.sum,
                    .queue_n = s->queue.count,
                    .spec_steps = s->spec_drafts,
                    .spec_drafted = s->spec_draft_tokens,
                    .spec_accepted = s->spec_accepted_tokens};
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
    /* speculative decoding over the same window: tokens drafted and accepted per verify step */
    double steps = (double)(k.spec_steps - o->spec_steps);
    ui_series_push(&c->series[M_SPEC_ACCEPTED],
                   steps > 0 ? (double)(k.spec_accepted - o->spec_accepted) / steps : NAN);
    ui_series_push(&c->series[M_SPEC_DRAFTED],
                   steps > 0 ? (double)(k.spec_drafted - o->spec_drafted) / steps : NAN);
    bool spec = c->cur_flags.num_speculative_tokens > 0 || s->spec_drafts > 0;
    if (spec != c->spec_chart) {
        c->spec_chart = spec;
        con_relayout(c);
    }
    sample_machine(c, k.t, o);
    if (k.t - c->stats_line.t >= STATS_LINE_S) {
        char line[512];
        if (cli_stats_line(&c->stats_line, s, k.t, line, sizeof line)) con_log(c, "%s", line);
    }
    c->dirty = true;
}

// ---------------------------------------------------------------------------------------------
// The loop

static void handle_event(console_t *c, const ui_event_t *ev) {
    switch (ev->type) {
        case UI_EV_WAKE:
            con_chat_pump(c);
            break;
        case UI_EV_BENCH_PROGRESS:
            c->prog = ev->progress;
            c->dirty = true;
            break;
        case UI_EV_BENCH_DONE:
            con_bench_done(c, ev);
            break;
        case UI_EV_FLAG_DONE:
            con_flag_done(c, ev);
            break;
        case UI_EV_SWEEP_DONE:
            con_sweep_done(c, ev);
            break;
        case UI_EV_LOG: /* to the log; the pane too (a warning stands out there) */
            con_log(c, "%s", ev->text);
            ui_text_add(c->text, strncmp(ev->text, "warning: ", 9) ? UI_TXT_INFO : UI_TXT_ERROR,
                        ev->text);
            break;
    }
}

/* Draws a frame from a snapshot of the state (console_draw.h), and keeps the scrolls it
 * clamped. */
static void frame(console_t *c) {
    double now = now_s();
    bool busy = c->reply != NULL;
    con_view_t v = {
        .now = now,
        .color = c->color,
        .ascii = c->ascii,
        .lay = c->lay,
        .model_name = c->model_name,
        .model_note = c->model_note,
        .url = c->url,
        .layout_desc = c->layout_desc,
        .backend = c->backend,
        .model_desc = c->model_desc,
        .uptime = now - c->t_start,
        .series = c->series,
        .window = con_window_s(c),
        .last_ttft = c->last_ttft,
        .last_tpot = c->last_tpot,
        .gpu = &c->gpu_s,
        .ops = &c->ops,
        .n_flags = c->n_flags,
        .flag_text = (const char(*)[CON_FLAG_VALUE])c->flag_text,
        .flag_changed = c->flag_changed,
        .stats = c->snap,
        .bench = c->bench_running ? &c->prog : NULL,
        .reqs = c->reqs,
        .reqs_focus = c->reqs_focus,
        .text = c->show_log ? c->log_text : c->text,
        .scroll = c->scroll,
        .show_reasoning = c->show_reasoning,
        .log = c->show_log,
        .zoom = c->zoom,
        .experts = c->experts,
        .experts_top = c->experts_top,
        .busy = busy,
        .status = c->status,
        .status_error = c->status_error,
        .applying = c->flag_busy ? c->flag_name : NULL,
        .applying_secs = now - c->flag_t0,
        .help = c->help,
        .help_text = c->help_text,
        .help_scroll = c->help_scroll,
    };
    if (!c->lay.too_small && !c->help)
        le_render(c->le, con_draw_line_width(&c->lay, busy), &v.line);
    con_reqs_build(c);
    con_drawn_t out;
    con_draw(c->drawer, &v, &out);
    c->scroll = out.scroll;
    c->reqs->top = out.reqs_top;
    c->experts_top = out.experts_top;
    c->experts_page = out.experts_rows;
    c->help_scroll = out.help_scroll;
    c->dirty = false;
    c->last_frame = now_s();
}

/* While draining (/quit --drain, SIGTERM) the loop waits on the server as `tachyon serve` does
 * (http_drain, then http_wait_idle in slices of at most 0.1 s) and shows what is left between the
 * slices; true: quit, once nothing is in flight or the grace time is over (teardown then ends
 * with http_shutdown(srv, 0), which aborts what is left, and http_destroy). */
static bool drain_wait(console_t *c, int ms) {
    int left = http_wait_idle(c->srv, ms < 100 ? ms / 1e3 : 0.1);
    double t = now_s();
    if (quit_act(c, ui_quit_tick(&c->quit, left, t))) return true;
    char msg[sizeof c->status];
    snprintf(msg, sizeof msg, "draining: %d request%s in flight, %.0f s left (Ctrl-C aborts)", left,
             left == 1 ? "" : "s", c->quit.drain_end - t);
    if (strcmp(msg, c->status)) con_set_status(c, false, "%s", msg);
    return false;
}

/* The UI loop: returns when the user quits. */
static void ui_loop(console_t *c) {
    c->next_sample = now_s();
    for (;;) {
        double t = now_s();
        if (t >= c->next_sample) {
            sample(c);
            if (t - c->flags_read_at > 1.0) con_read_flags(c); /* the admin endpoint changes them */
            con_chat_idle_check(c);
            c->next_sample += CON_SAMPLE_MS / 1e3;
            if (c->next_sample < t) c->next_sample = t + CON_SAMPLE_MS / 1e3;
        }
        con_chat_pump(c);
        if (c->dirty && t - c->last_frame >= FRAME_MS / 1e3) frame(c);
        double wait = c->next_sample - now_s();
        if (c->dirty) {
            double f = c->last_frame + FRAME_MS / 1e3 - now_s();
            if (f < wait) wait = f;
        }
        int ms = wait > 0 ? (int)(wait * 1e3) + 1 : 0;
        struct pollfd p[2] = {{.fd = STDIN_FILENO, .events = POLLIN},
                              {.fd = ui_queue_fd(c->q), .events = POLLIN}};
        int n;
        if (c->quit.draining) { /* the wait is the server's; keys and events are taken after it */
            if (drain_wait(c, ms)) return;
            n = poll(p, 2, 0);
        } else {
            n = poll(p, 2, ms);
        }
        int poll_errno = errno; /* on_signals may change errno (drain) */
        if (on_signals(c)) return;
        if (n < 0 && poll_errno != EINTR) return;
        if (p[1].revents & POLLIN) {
            ui_queue_ack(c->q);
            ui_event_t ev;
            while (ui_queue_pop(c->q, &ev))
                handle_event(c, &ev);
        }
        /* also after EINTR: SIGWINCH makes curses queue KEY_RESIZE */
        if (con_read_keys(c)) return;
        if (on_signals(c)) return;
    }
}

// ---------------------------------------------------------------------------------------------
// Set-up

/* The header's model: the name clients must send (the first served name: the --model argument
 * as given unless --served-model-name says otherwise), and what kind of weights it has. */
static void describe(console_t *c, const cli_engine_t *ce, const cli_server_t *sv) {
    const engine_opts_t *o = &ce->opts;
    model_config_describe(engine_model_config(c->eng), c->model_desc, sizeof c->model_desc);
    snprintf(c->model_name, sizeof c->model_name, "%s", sv->names[0]);
    if (strcmp(o->model.model, MDIR_EMBEDDED))
        snprintf(c->model_arg, sizeof c->model_arg, "%s", o->model.model);
    if (!strcmp(o->model.model, MDIR_EMBEDDED))
        snprintf(c->model_note, sizeof c->model_note, "(demo model, toy weights)");
    else if (o->model.format == LOAD_DUMMY)
        snprintf(c->model_note, sizeof c->model_note, "(dummy random weights)");
    con_describe_layout(c);
}

void con_describe_layout(console_t *c) {
    engine_describe_backend(c->eng, c->backend, sizeof c->backend);
    char tp[16] = "1", ep[8] = "false";
    err_t err;
    engine_flag_get(c->eng, "tensor-parallel-size", tp, sizeof tp, &err);
    engine_flag_get(c->eng, "enable-expert-parallel", ep, sizeof ep, &err);
    int dp = engine_replicas(c->eng);
    const char *ep_text = strcmp(ep, "true") ? "" : " EP";
    if (dp > 1)
        snprintf(c->layout_desc, sizeof c->layout_desc, "TP %s%s DP %d", tp, ep_text, dp);
    else
        snprintf(c->layout_desc, sizeof c->layout_desc, "TP %s%s", tp, ep_text);
    /* the GPU rows: the engine's devices first, one per rank */
    backend_device_t devs[BACKEND_MAX_DEVICES];
    const char *ids[BACKEND_MAX_DEVICES];
    int n = engine_devices(c->eng, devs, BACKEND_MAX_DEVICES);
    if (n > BACKEND_MAX_DEVICES) n = BACKEND_MAX_DEVICES;
    for (int i = 0; i < n; i++)
        ids[i] = devs[i].pci_bus_id;
    ui_gpu_set_devices(c->gpu, ids, n);
}

static int init_curses(console_t *c) {
    if (!(c->screen = newterm(NULL, stdout, stdin))) return -1;
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    nodelay(stdscr, TRUE);
    set_escdelay(25);
    c->color = con_draw_colors(c->color);
    if (c->mouse) {
        mouseinterval(0); /* a press acts at once: no wait to tell clicks from drags */
        mousemask(BUTTON1_PRESSED | BUTTON4_PRESSED | BUTTON5_PRESSED, NULL);
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

/* The terminal back: paste mode off, curses ended, stderr restored (what follows goes to it);
 * with flush_log, the log lines still queued are written there (a failure's message). */
static void end_curses(console_t *c, bool flush_log) {
    input_stop(c->in, stdout);
    endwin();
    ui_log_stop(c->log);
    c->log = NULL;
    delscreen(c->screen);
    c->screen = NULL;
    ui_event_t ev;
    while (flush_log && !c->log_echo && ui_queue_pop(c->q, &ev))
        if (ev.type == UI_EV_LOG) fprintf(stderr, "tachyon: %s\n", ev.text);
}

/* The loading screen from what engine_open reported so far. */
static void draw_loading(console_t *c) {
    con_loading_t v = {.color = c->color,
                       .ascii = c->ascii,
                       .model = c->model_arg,
                       .load = c->load.t > 0 || c->load.model_type ? &c->load : NULL,
                       .log = c->log_text};
    con_draw_loading(c->drawer, &v);
    c->load_drawn = now_s();
}

/* engine_opts_t.on_load (engine_open runs on this thread): the log's new lines taken, the
 * loading screen drawn at most ten times a second and at each new phase. */
static void on_load(void *user, const engine_load_t *l) {
    console_t *c = user;
    bool phase = l->phase != c->load.phase;
    c->load = *l;
    ui_event_t ev;
    while (ui_queue_pop(c->q, &ev))
        if (ev.type == UI_EV_LOG) handle_event(c, &ev);
    if (phase || now_s() - c->load_drawn >= 0.1) draw_loading(c);
}

/* What loading took, once, in the log and the pane. */
static void load_summary(console_t *c) {
    const engine_load_t *l = &c->load;
    char w[32], kv[32];
    con_bytes_text(l->bytes_total, w, sizeof w);
    con_bytes_text(l->kv_bytes, kv, sizeof kv);
    char line[320];
    snprintf(line, sizeof line,
             "loaded %s (%d layers) in %.2f s: %d shard%s, %s of weights; KV pool %d blocks x "
             "%d tokens = %d tokens, %s",
             l->model_type ? l->model_type : "the model", l->n_layers, l->t, l->shards,
             l->shards == 1 ? "" : "s", w, l->kv_blocks, l->block_size,
             l->kv_blocks * l->block_size, kv);
    con_log(c, "%s", line);
    ui_text_add(c->text, UI_TXT_INFO, line);
}

static void console_free(console_t *c) {
    ui_log_stop(c->log); /* first: its thread posts to the queue */
    con_chat_free(c);
    results_destroy(c->results);
    le_destroy(c->le);
    input_destroy(c->in);
    ui_text_destroy(c->text);
    ui_text_destroy(c->log_text);
    ui_text_destroy(c->help_text);
    ui_queue_destroy(c->q);
    conversation_free(&c->conv);
    jb_free(&c->reply_text);
    free(c->system);
    free(c->snap);
    for (int i = 0; i < STATS_MERGE_MAX; i++)
        free(c->rsnap[i]);
    free(c->reqs);
    con_drawer_destroy(c->drawer);
    ui_gpu_sampler_stop(c->gpu_sampler);
    ui_gpu_destroy(c->gpu);
    free(c);
}

int cmd_console(int argc, char **argv) {
    static const struct option longopts[] = {
        {"results-dir", required_argument, 0, 'r'},
        {"max-tokens", required_argument, 0, 'n'},
        {"shutdown-timeout", required_argument, 0, 'S'},
        {"no-color", no_argument, 0, 'C'},
        {"ascii", no_argument, 0, 'A'},
        {"no-mouse", no_argument, 0, 'M'},
        {"chat-idle", required_argument, 0, 'I'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    for (int i = 1; i < argc; i++) /* watching a fleet: no model, no server */
        if (!strcmp(argv[i], "--watch") || !strncmp(argv[i], "--watch=", 8))
            return cmd_console_watch(argc, argv);
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
    c->zoom = -1;
    c->mouse = true;
    c->idle_s = 30;
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
            case 'M':
                c->mouse = false;
                break;
            case 'I':
                if (cli_parse_float(optarg, 0, 1e6f, &grace) < 0) {
                    fprintf(stderr, "tachyon: --chat-idle must be a number of seconds\n");
                    goto usage_error;
                }
                c->idle_s = grace;
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

    c->snap = calloc(1, sizeof *c->snap);
    c->reqs = malloc(sizeof *c->reqs);
    if (c->reqs) ui_reqs_init(c->reqs);
    c->drawer = con_drawer_create(&err);
    c->q = c->drawer ? ui_queue_create(1024, &err) : NULL;
    c->text = c->q ? ui_text_create(TEXT_LINES, &err) : NULL;
    c->log_text = c->text ? ui_text_create(TEXT_LINES, &err) : NULL;
    c->help_text = c->log_text ? ui_text_create(100, &err) : NULL;
    c->le = c->help_text ? le_create(REPL_LINE_MAX - 1, 1000, &err) : NULL;
    c->in = c->le ? input_create(REPL_LINE_MAX - 1, &err) : NULL;
    c->gpu = ui_gpu_create(getenv("TACHYON_NVML_LIB"));
    if (!c->snap || !c->reqs || !c->in || !c->gpu) {
        fprintf(stderr, "tachyon: %s\n", err.msg[0] ? err.msg : "out of memory");
        console_free(c);
        return 1;
    }
    jb_init(&c->reply_text);
    for (int i = 0; i < N_METRICS; i++)
        ui_series_init(&c->series[i]);
    c->last_ttft = c->last_tpot = NAN;
    flags_init(&c->def_flags);
    c->cc.values = &c->cur_flags;
    le_set_completer(c->le, repl_complete, &c->cc);
    con_help_fill(c);
    if (le_history_path(c->hist_path, sizeof c->hist_path, &err) == 0) {
        c->have_hist = true;
        le_history_load(c->le, c->hist_path, &err);
    }

    /* Every thread the engine, the server and curl start inherits this mask: only the UI
     * thread takes SIGINT, SIGTERM and SIGWINCH. */
    sigset_t old;
    block_ui_signals(&old);
    signal(SIGPIPE, SIG_IGN);
    /* the machine's numbers from a thread of their own (it inherits the blocked signals) */
    if (!(c->gpu_sampler = ui_gpu_sampler_start(c->gpu, GPU_PERIOD_S, &err)))
        fprintf(stderr, "tachyon: %s: the GPU panel stays empty\n", err.msg);
    char busy[512];
    if (cli_server_check_port(&sv, busy, sizeof busy) < 0) {
        fprintf(stderr, "tachyon: %s\n", busy);
        console_free(c);
        return 1;
    }
    fprintf(stderr, "tachyon: opening the model...\n");
    /* what the engine says from here on (the KV-cache size) shows in the output pane too */
    if (!(c->log = ui_log_start(on_log_line, c, &err)))
        fprintf(stderr, "tachyon: %s: messages go to the terminal\n", err.msg);
    pthread_setname_np(pthread_self(), "tachyon-ui");
    /* the screen from here on: the loading screen, then the dashboard */
    if (init_curses(c) < 0) {
        fprintf(stderr,
                "tachyon: cannot start curses on this terminal (TERM=%s); "
                "`tachyon serve` and `tachyon chat` work without one\n",
                getenv("TERM") ? getenv("TERM") : "");
        console_free(c);
        return 1;
    }
    /* a terminal's stderr is the screen now; a file keeps every line */
    c->log_echo = c->log && !isatty(ui_log_fd(c->log));
    if (c->log) ui_log_echo(c->log, c->log_echo);
    c->t_start = now_s(); /* the log's times count from here, loading included */
    ce.opts.on_load = on_load;
    ce.opts.load_user = c;
    if (strcmp(ce.opts.model.model, MDIR_EMBEDDED))
        snprintf(c->model_arg, sizeof c->model_arg, "%s", ce.opts.model.model);
    draw_loading(c);
    if (cli_engine_open(&ce) < 0) {
        end_curses(c, true);
        console_free(c);
        return 1;
    }
    load_summary(c);
    c->eng = ce.eng;
    cli_server_finish(&sv, &ce);
    /* the console's own benchmarks authenticate with the first key */
    c->api_key = sv.n_keys ? sv.keys[0] : NULL;
    /* reasoning split by default here: the console's operator reads replies as chat */
    if (!sv.reasoning_given) sv.ho.reasoning_qwen3 = true;
    const http_opts_t *ho = &sv.ho;
    if (http_start(c->eng, ho, &c->srv, &err) < 0) {
        end_curses(c, true);
        fprintf(stderr, "tachyon: %s\n", err.msg);
        cli_engine_close(&ce);
        console_free(c);
        return 1;
    }
    char warning[512]; /* as tachyon serve says it; ui_log shows it in the pane */
    bool warn = cli_server_warning(&sv, warning, sizeof warning);
    if (warn) fprintf(stderr, "tachyon: %s\n", warning);
    const char *host = ho->host;
    bool any = !strcmp(host, "0.0.0.0") || !strcmp(host, "::");
    bool v6 = strchr(host, ':') != NULL && !any;
    snprintf(c->url, sizeof c->url, "http://%s%s%s:%d", v6 ? "[" : "", any ? "127.0.0.1" : host,
             v6 ? "]" : "", http_port(c->srv));
    int fmt = engine_chat_format(c->eng);
    c->format = engine_tokenizer(c->eng) && fmt >= 0 ? fmt : -1;
    /* /tools: the calls are found as the server finds them (http_start checked the name) */
    c->tool_format = fmt >= 0 ? tc_format_for_chat((chat_format_t)fmt) : TC_HERMES;
    if (ho->tool_parser) tc_format_parse(ho->tool_parser, &c->tool_format);
    describe(c, &ce, &sv);
    c->stats_line.t = now_s();
    c->last_activity = c->stats_line.t;
    con_read_flags(c);
    con_flags_baseline(c, &ce.opts.flags);

    int rc = 0;
    {
        signal_queue = c->q;
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        con_relayout(c);
        ui_text_addf(c->text, UI_TXT_INFO,
                     "Serving %s at %s (OpenAI API). Type a message to chat, /help for commands, "
                     "F1 for keys.",
                     sv.names[0], c->url);
        if (results_note[0]) ui_text_add(c->text, UI_TXT_INFO, results_note);
        if (c->format < 0)
            ui_text_add(c->text, UI_TXT_INFO,
                        "(this model has no tokenizer or chat template: "
                        "chat is off)");
        if (warn)
            con_set_status(c, true, "%s", warning);
        else
            con_set_status(c, false, "server listening");
        ui_loop(c);
        end_curses(c, false);
        signal_queue = NULL;
    }
    fprintf(stderr, "tachyon: stopping\n");
    if (c->bench_running) {
        atomic_store(&c->bench_stop, true);
        pthread_join(c->bench_thread, NULL);
        ui_event_t ev;
        while (ui_queue_pop(c->q, &ev))
            if (ev.type == UI_EV_BENCH_DONE) {
                bench_result_destroy(ev.ptr);
            } else if (ev.type == UI_EV_SWEEP_DONE) {
                bench_sweep_free(ev.ptr);
                free(ev.ptr);
            }
    }
    if (c->flag_busy) pthread_join(c->flag_thread, NULL);
    con_chat_free(c); /* before the engine closes */
    http_shutdown(c->srv, 0);
    http_destroy(c->srv);
    cli_engine_close(&ce);
    console_free(c);
    return rc;

usage_error:
    free(c);
    return 2;
}

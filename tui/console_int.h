/*
 * console_int: the console's state, shared by the files that make up `tachyon console`:
 *
 *   console.c        options, set-up and teardown, the UI loop, signals and quitting
 *   console_cmd.c    keys, the REPL's commands and the flags (/set, /get, /flags)
 *   console_chat.c   the chat
 *   console_bench.c  benchmarks and results (/bench, /results, /compare)
 *   console_reqs.c   the requests table: its rows, F6's focus and keys, /requests, /cancel
 *   console_draw.c   drawing a frame from a snapshot (console_draw.h: it never sees console_t)
 *
 * Internal to them: nothing else includes it. Everything here is touched by the UI thread only,
 * except where a field says otherwise. Each part exports its entry points with the con_ prefix.
 */
#ifndef TACHYON_CONSOLE_INT_H
#define TACHYON_CONSOLE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <curses.h>

#include "bench.h"
#include "cli.h"
#include "commands.h"
#include "console_draw.h"
#include "conversation.h"
#include "engine.h"
#include "frontend.h"
#include "input.h"
#include "json.h"
#include "layout.h"
#include "lineedit.h"
#include "results.h"
#include "server.h"
#include "ui_log.h"
#include "ui_quit.h"
#include "ui_reqs.h"
#include "ui_queue.h"
#include "ui_series.h"
#include "ui_text.h"
#include "ui_gpu.h"
#include "ui_vitals.h"

typedef struct counters {
    double t;
    uint64_t prompt, gen;
    double ttft_sum, tpot_sum, queue_sum;
    uint64_t ttft_n, tpot_n, queue_n;
    uint64_t spec_steps, spec_drafted, spec_accepted; /* speculative decoding's verify steps */
} counters_t;

typedef struct console {
    /* options */
    bool color, ascii;
    int max_tokens;
    char results_dir[1024];
    results_t *results;
    /* engine and server */
    engine_t *eng;
    http_server_t *srv;
    char model_arg[1024]; /* --model as given ("": the embedded demo model), for /flags diff */
    char url[128], model_name[256], model_note[64], model_desc[256], backend[256], layout_desc[64];
    const char *api_key;
    double t_start;
    engine_load_t load; /* what engine_open reported last (the loading screen) */
    double load_drawn;  /* when the loading screen was drawn last */
    ui_queue_t *q;
    ui_log_t *log; /* stderr, shown in the output pane while the console runs */
    bool log_echo; /* ...and also written to stderr itself (a file: every line kept) */
    /* metrics */
    stats_snapshot_t *snap;
    /* data parallel: each replica's snapshot of the last sample ([n_rsnap]; their sum is snap),
     * for the vitals' replica rows */
    stats_snapshot_t *rsnap[STATS_MERGE_MAX];
    int n_rsnap;
    /* the vitals' tensor-parallel rank rows (console.c sample_ranks) */
    int n_ranks;
    backend_rank_stats_t rank_prev[UI_VITALS_MAX_RANKS]; /* at rank_prev_t */
    double rank_prev_t;
    struct ui_rank rank_last[UI_VITALS_MAX_RANKS]; /* the last interval's */
    ui_series_t series[N_METRICS];
    counters_t hist[32]; /* recent counter readings, for rates and latency windows */
    int n_hist;
    bool spec_chart;             /* speculative decoding configured or run: its chart is shown */
    double last_ttft, last_tpot; /* ms, latest non-empty window */
    int window;                  /* index into console_cmd.c's windows (con_window_s) */
    double next_sample;
    /* the machine (ui_gpu: NVML or the process) and the numbers band (ui_vitals) */
    ui_gpu_t *gpu;
    ui_gpu_sampler_t *gpu_sampler; /* the thread that samples gpu (NULL: it did not start) */
    ui_gpu_sample_t gpu_s;         /* its latest sample */
    unsigned gpu_seq;
    ui_ops_t ops;
    int band_rows, band_cols; /* rows the band needs at band_cols columns (con_relayout) */
    ui_vseg_t vsegs[UI_VITALS_MAX_SEGS]; /* scratch: how many rows the band needs */
    /* screen */
    SCREEN *screen;
    layout_t lay;
    con_drawer_t *drawer;
    bool help, dirty;
    ui_text_t *help_text; /* the keys and repl_help(NULL)'s command list, wrapped when drawn */
    int help_scroll;      /* rows the help is scrolled up from its end (ui_text_rows) */
    double last_frame;
    char status[256];
    bool status_error;
    /* output pane, and the log (F3 switches): stderr's lines, the stats line, flag changes */
    ui_text_t *text, *log_text;
    int scroll;
    bool show_reasoning, show_log;
    cli_stats_line_t stats_line; /* the log's line every 10 s, as tachyon serve's */
    int zoom;                    /* the chart F4 or a click zoomed (-1: none) */
    double idle_s;               /* --chat-idle: seconds without use before the chat pane shrinks */
    double last_activity;        /* engine_now() of the last key, reply or benchmark report */
    bool chat_idle;              /* the pane is shrunk: the charts have the rows */
    bool mouse;                  /* mouse events on (--no-mouse: off) */
    bool experts;                /* /experts: the live expert-load panel in the chat pane's place */
    int experts_top;             /* its first MoE layer shown (PgUp/PgDn, the wheel) */
    int experts_page;            /* layers it showed in the last frame: PgUp/PgDn's step */
    char last_bench[REPL_LINE_MAX]; /* the last /bench line: F5 runs it again */
    /* the requests table (console_reqs.c) */
    ui_reqs_t *reqs;   /* its settings and the rows built for the frame */
    bool reqs_focus;   /* F6: over the charts and the chat pane, keys select, sort, cancel */
    bool reqs_confirm; /* "cancel ID?" asked: the next key answers */
    /* REPL */
    le_t *le;
    char hist_path[4096];
    bool have_hist;
    repl_complete_ctx_t cc;
    repl_cmd_t cmd;
    flag_values_t cur_flags, def_flags;
    char flag_text[CON_MAX_FLAGS][CON_FLAG_VALUE];
    bool flag_changed[CON_MAX_FLAGS];
    int n_flags;
    double flags_read_at;
    input_t *in;
    /* chat */
    int format; /* chat_format_t, or -1: no chat */
    conversation_t conv;
    char *system;
    bool think;
    fe_reply_t *reply;        /* the reply in flight (front door); NULL: none */
    jbuf_t reply_text;        /* its raw text, for the conversation */
    atomic_bool wake_pending; /* set by the engine thread's wake hook */
    int chat_id, req_prompt, req_gen;
    char chat_rid[32]; /* "chat-<chat_id>": the request id of the reply in flight */
    double req_t0;
    bool req_started, reasoning_started, content_started;
    bool reply_stopping; /* Esc or Ctrl-C cancelled the reply; its finish is on the way */
    cJSON *tools;        /* the chat's tools (/tools FILE: an OpenAI tools array); NULL: none */
    char tools_file[1024];
    tc_format_t tool_format; /* how the calls in replies are found (--tool-call-parser) */
    int tool_calls;          /* calls the reply in flight has made */
    bool call_open;          /* the pane's last line is a call still receiving its arguments */
    /* benchmark */
    pthread_t bench_thread;
    bool bench_running;
    atomic_bool bench_stop;
    bench_options_t bopts;
    bench_progress_t prog;
    /* flag worker (rebuild flags drain the engine: not on the UI thread) */
    pthread_t flag_thread;
    bool flag_busy;
    char flag_name[64], flag_value[256];
    double flag_t0;
    /* quitting */
    ui_quit_t quit;
    bool quit_after_bench; /* /quit came while a benchmark ran: decide once it is done */
    double shutdown_s;     /* /quit --drain and SIGTERM: seconds to let requests finish */
} console_t;

// ---------------------------------------------------------------------------------------------
// console.c

/* The status line's message (error: drawn as one); also marks the frame dirty. */
void con_set_status(console_t *c, bool error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A problem: in the output pane and on the status line. */
void con_out_error(console_t *c, const char *msg);

/* pthread_create with the UI's signals blocked, so that only the UI thread takes them. */
int con_spawn(pthread_t *t, void *(*fn)(void *), void *arg);

/* /quit (drain false) or /quit --drain; true: leave the UI loop. */
bool con_quit_command(console_t *c, bool drain);

// ---------------------------------------------------------------------------------------------
// console_cmd.c

/* Adds a line to the log pane (F3), with the time since start. */
void con_log(console_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Handles every key waiting on stdin (and a lone Esc once it is one); true: quit. */
bool con_read_keys(console_t *c);

/* The charts' time window in seconds (+ and - switch it). */
double con_window_s(const console_t *c);

/* The chat was used (a key, a reply, a report): the pane gets its rows back. */
void con_chat_touch(console_t *c);

/* Shrinks the chat pane once it has not been used for --chat-idle seconds (no reply streaming,
 * an empty line, no help open). */
void con_chat_idle_check(console_t *c);

/* Lays the panels out for the terminal's size and marks the frame dirty. */
void con_relayout(console_t *c);

/* The help overlay's text: the keys, then the commands. */
void con_help_fill(console_t *c);

/* Reads every flag's value from the engine into the flags panel. */
void con_read_flags(console_t *c);
/* The header's backend and parallel layout (TP, EP, DP) and the GPU rows' devices, from the
 * engine: at start and after a reload flag changed them. */
void con_describe_layout(console_t *c);

/* After the first con_read_flags: flags the command line left at an automatic default read back
 * as what the engine chose, which then counts as their default (not shown as changed). */
void con_flags_baseline(console_t *c, const flag_values_t *cmdline);

/* The flag worker's UI_EV_FLAG_DONE. */
void con_flag_done(console_t *c, const ui_event_t *ev);

// ---------------------------------------------------------------------------------------------
// console_chat.c

/* Sends a user message; the reply streams into the pane. */
void con_chat_send(console_t *c, const char *text);

/* Takes what the reply's stream has (on wake-ups and each loop while a reply streams). */
void con_chat_pump(console_t *c);

/* Stops the reply (Esc, Ctrl-C, /new); its finish still comes through con_chat_pump. */
void con_chat_stop(console_t *c);

/* Starts the conversation over with the system message. */
void con_chat_reset(console_t *c);

/* /tools (list), /tools FILE (chat with the tools of an OpenAI tools array), /tools off. */
void con_chat_tools(console_t *c, const repl_cmd_t *cmd);

/* Teardown: drops a reply still in flight and the tools. */
void con_chat_free(console_t *c);

// ---------------------------------------------------------------------------------------------
// console_reqs.c

/* Builds the table's rows from the last snapshot (and the console's reply in flight). */
void con_reqs_build(console_t *c);

/* F6: focuses the table (on) or gives the keys back to the REPL line. */
void con_reqs_focus(console_t *c, bool on);

/* A key while the table is focused; false when it is not the table's (F-keys, the mouse...). */
bool con_reqs_key(console_t *c, const input_event_t *ev);

/* A mouse press or wheel (rows: +3 down, -3 up; 0: a press) at (y, x): false when not on the
 * table. A press on a row selects it and focuses the table. */
bool con_reqs_mouse(console_t *c, int y, int x, bool press, int wheel);

/* /requests [sort KEY [asc|desc] | filter [WHAT]] and /cancel [ID]. */
void con_reqs_command(console_t *c, const repl_cmd_t *cmd);
void con_cancel_command(console_t *c, const repl_cmd_t *cmd);

// ---------------------------------------------------------------------------------------------
// console_bench.c

/* /bench PROFILE [OPTIONS] (argv[0] the profile) on its own thread against the embedded server;
 * /bench stop (false when none runs); its UI_EV_BENCH_DONE event; /results; /compare. /sweep
 * (bench/sweep.h on the same thread: the flag set through the engine for each value) and its
 * UI_EV_SWEEP_DONE: the table and plot, each point kept as a run. */
void con_bench_start(console_t *c, int argc, char **argv);
void con_sweep_start(console_t *c, repl_cmd_t *cmd);
void con_sweep_done(console_t *c, const ui_event_t *ev);
bool con_bench_stop(console_t *c);
void con_bench_done(console_t *c, const ui_event_t *ev);
void con_results(console_t *c);
void con_compare(console_t *c, const repl_cmd_t *cmd);

#endif

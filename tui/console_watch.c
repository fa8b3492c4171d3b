/* `tachyon console --watch URL [URL...]`: the console watching a fleet of replicas
 * (server/scale-out.md) instead of running an engine: one row per replica from its /metrics
 * (ui_fleet.h: up or down and why, requests running and waiting, KV use, generation and prompt
 * tokens/s, requests done, the model), the fleet's total, and a chart of the fleet's generation
 * tokens/s. No model is opened and no server started.
 *
 * Threads: this (UI) thread is the only one that calls curses; the sampler (ui_fleet_http.c)
 * reads the replicas on its own thread, started with SIGINT, SIGTERM and SIGHUP blocked so that
 * only this thread takes them. The screen is drawn four times a second and whenever a key or a
 * new round arrives; its buffers are sized at start-up. q, F10, Esc or Ctrl-C quits, and so do
 * SIGTERM and SIGHUP. */
#include <getopt.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curses.h>

#include "chart.h"
#include "cli.h"
#include "engine.h"
#include "ui_fleet.h"

#define DRAW_MS     250 /* the screen's refresh when nothing else happens */
#define CHART_MAX_W 512 /* chart columns at most (2 samples each) */
#define CHART_ROWS  16  /* the chart's rows at most */
#define CHART_MIN_H 3

static const char watch_usage[] =
    "usage: tachyon console --watch URL [URL...] [options]\n"
    "\n"
    "Watches a fleet of replicas (tachyon serve, vLLM, anything that exports vLLM's metric\n"
    "names): each replica's /metrics read every interval, one row per replica (up or down and\n"
    "why, requests running and waiting, KV-cache use, generation and prompt tokens/s, requests\n"
    "done, the model), the fleet's total and a chart of its generation tokens/s. A URL is the\n"
    "replica's root (http://host:8000) or its metrics URL. No model is opened. q, F10 or Ctrl-C\n"
    "quits.\n"
    "\n"
    "  --watch URL [URL...]  the replicas (repeatable; up to 64)\n"
    "  --interval S          seconds between reads (default 1; a read times out after S, at\n"
    "                        least 1 s)\n"
    "  --no-color            no colours (also when NO_COLOR is set)\n"
    "  --ascii               ASCII chart (automatic when the locale is not UTF-8)\n";

static volatile sig_atomic_t got_quit;

static void on_quit_signal(int sig) {
    (void)sig;
    got_quit = 1;
}

typedef struct watch {
    const char *urls[UI_FLEET_MAX];
    int n;
    double interval; /* s */
    bool color, ascii;
    ui_fleet_row_t rows[UI_FLEET_MAX];
    ui_fleet_row_t total;
    bool have; /* a round has come */
    double t_start;
    double tps[2 * CHART_MAX_W]; /* the fleet's generation tok/s, one per round, oldest first */
    int n_tps;
    char line[UI_FLEET_LINE];
    char chart[CHART_BUF_SIZE(CHART_MAX_W, CHART_ROWS)];
} watch_t;

enum { PAIR_UP = 1, PAIR_DOWN, PAIR_HEAD, PAIR_CHART };

/* Takes --watch's URLs (the words after it up to the next option) and the other options out of
 * argv. -1 after printing the problem; 1 for --help. */
static int parse(watch_t *w, int argc, char **argv) {
    const char *no_color = getenv("NO_COLOR");
    w->color = !(no_color && *no_color);
    w->interval = 1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--watch") || !strncmp(a, "--watch=", 8)) {
            int before = w->n;
            if (a[7] == '=' && w->n < UI_FLEET_MAX) w->urls[w->n++] = a + 8;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) && w->n < UI_FLEET_MAX)
                w->urls[w->n++] = argv[++i];
            if (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
                fprintf(stderr, "tachyon: --watch takes at most %d replicas\n", UI_FLEET_MAX);
                return -1;
            }
            if (w->n == before || (a[7] == '=' && !a[8])) {
                fprintf(stderr, "tachyon: --watch needs at least one URL\n");
                return -1;
            }
        } else if (!strcmp(a, "--interval") && i + 1 < argc) {
            float v;
            if (cli_parse_float(argv[++i], 0.1f, 3600, &v) < 0) {
                fprintf(stderr, "tachyon: --interval must be seconds between 0.1 and 3600\n");
                return -1;
            }
            w->interval = v;
        } else if (!strcmp(a, "--no-color")) {
            w->color = false;
        } else if (!strcmp(a, "--ascii")) {
            w->ascii = true;
        } else {
            fprintf(stderr,
                    "tachyon: \"%s\" does not go with --watch, which opens no model "
                    "(tachyon console --watch --help)\n",
                    a);
            return -1;
        }
    }
    return 0;
}

static void put(int y, int x, int w, attr_t attr, const char *text) {
    if (w <= 0 || y < 0 || y >= LINES) return;
    attron(attr);
    mvaddnstr(y, x, text, w);
    attroff(attr);
}

static attr_t pair(const watch_t *w, int p) {
    return w->color ? COLOR_PAIR(p) : 0;
}

/* w->line padded with spaces to the screen's width (a bar). */
static void pad_line(watch_t *w) {
    int width = COLS < (int)sizeof w->line ? COLS : (int)sizeof w->line - 1;
    int n = (int)strlen(w->line);
    if (n < width) memset(w->line + n, ' ', (size_t)(width - n));
    w->line[width] = 0;
}

static void draw_header(watch_t *w, double now) {
    char up[64] = "reading...", age[32];
    if (w->have) snprintf(up, sizeof up, "%d of %d up", w->total.n_up, w->n);
    chart_format_window(w->interval, age, sizeof age);
    snprintf(w->line, sizeof w->line, " Tachyon fleet  %d replica%s, %s  every %s  watching %.0f s",
             w->n, w->n == 1 ? "" : "s", up, age, now - w->t_start);
    pad_line(w);
    put(0, 0, COLS, A_REVERSE | pair(w, PAIR_HEAD), w->line);
}

/* The fleet's generation tok/s over the rounds, in the rows [y, y + h). */
static void draw_chart(watch_t *w, int y, int h) {
    int width = COLS - 8;
    if (width > CHART_MAX_W) width = CHART_MAX_W;
    if (h < CHART_MIN_H || width < 10) return;
    int rows = h - 1 < CHART_ROWS ? h - 1 : CHART_ROWS;
    double now_v = w->n_tps ? w->tps[w->n_tps - 1] : NAN;
    chart_title(w->line, sizeof w->line, COLS - 1, "fleet gen tok/s", 2.0 * width * w->interval,
                now_v, "tok/s");
    put(y, 1, COLS - 1, A_BOLD, w->line);
    chart_opts_t o = {.width = width,
                      .height = rows,
                      .glyphs = w->ascii ? CHART_ASCII : CHART_BRAILLE,
                      .style = CHART_AREA,
                      .auto_range = true,
                      .auto_floor = 1};
    double top = chart_render(w->tps, w->n_tps, &o, w->chart, sizeof w->chart);
    if (isnan(top)) return;
    char labels[CHART_ROWS][8];
    chart_ylabels(0, top, rows, 6, labels[0], sizeof labels[0]);
    for (int r = 0; r < rows; r++) {
        put(y + 1 + r, 0, 6, A_DIM, labels[r]);
        put(y + 1 + r, 7, 1, A_DIM, w->ascii ? "|" : "\xe2\x94\x82");
        attron(pair(w, PAIR_CHART));
        mvaddstr(y + 1 + r, 8, chart_row(w->chart, width, r));
        attroff(pair(w, PAIR_CHART));
    }
}

static void draw(watch_t *w) {
    double now = engine_now();
    erase();
    if (COLS < 40 || LINES < 8) {
        put(0, 0, COLS, A_BOLD, "terminal too small for the fleet: 40x8 at least");
        refresh();
        return;
    }
    draw_header(w, now);
    ui_fleet_cols_t c;
    ui_fleet_columns(COLS < (int)sizeof w->line ? COLS : (int)sizeof w->line - 1, &c);
    ui_fleet_head_text(&c, w->line, sizeof w->line);
    put(2, 0, COLS, A_BOLD | A_UNDERLINE, w->line);
    /* the replicas, the total under them, the chart in what is left above the status line */
    int room = LINES - 2 - 4; /* header, blank, heads, total, status */
    int shown = w->n <= room ? w->n : room - 1;
    int y = 3;
    for (int i = 0; i < shown; i++, y++) {
        const ui_fleet_row_t *r = &w->rows[i];
        ui_fleet_row_text(&c, r, i + 1, now, w->line, sizeof w->line);
        attr_t a = !r->seen ? A_DIM : r->up ? pair(w, PAIR_UP) : pair(w, PAIR_DOWN) | A_BOLD;
        put(y, 0, COLS, a, w->line);
    }
    if (shown < w->n) {
        snprintf(w->line, sizeof w->line, "    ... and %d more (a taller terminal shows them)",
                 w->n - shown);
        put(y++, 0, COLS, A_DIM, w->line);
    }
    if (w->have) { /* the total of a round */
        ui_fleet_row_text(&c, &w->total, 0, now, w->line, sizeof w->line);
        put(y, 0, COLS, A_BOLD, w->line);
    }
    y++;
    draw_chart(w, y + 1, LINES - 1 - (y + 1));
    snprintf(w->line, sizeof w->line, "watching %d replica%s: q quits", w->n, w->n == 1 ? "" : "s");
    pad_line(w);
    put(LINES - 1, 0, COLS, A_REVERSE, w->line);
    refresh();
}

/* A new round: the rows, their total, the chart's next sample. */
static void take_round(watch_t *w) {
    ui_fleet_total(w->rows, w->n, &w->total);
    w->have = true;
    int cap = (int)(sizeof w->tps / sizeof w->tps[0]);
    if (w->n_tps == cap) {
        memmove(w->tps, w->tps + 1, sizeof w->tps[0] * (size_t)(cap - 1));
        w->n_tps--;
    }
    w->tps[w->n_tps++] = w->total.gen_tps;
}

int cmd_console_watch(int argc, char **argv) {
    watch_t *w = calloc(1, sizeof *w);
    if (!w) {
        fprintf(stderr, "tachyon: out of memory\n");
        return 1;
    }
    int rc = parse(w, argc, argv);
    if (rc != 0) {
        if (rc > 0) fputs(watch_usage, stdout);
        free(w);
        return rc > 0 ? 0 : 2;
    }
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        fprintf(stderr, "tachyon: the console needs a terminal; curl URL/metrics reads one "
                        "replica without one\n");
        free(w);
        return 2;
    }
    setlocale(LC_ALL, "");
    if (strcmp(nl_langinfo(CODESET), "UTF-8")) w->ascii = true;
    for (int i = 0; i < w->n; i++)
        ui_fleet_row_init(&w->rows[i], w->urls[i]);

    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    err_t err = {{0}};
    ui_fleet_sampler_t *sp = ui_fleet_sampler_start(w->urls, w->n, w->interval, &err);
    if (!sp) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        fprintf(stderr, "tachyon: %s\n", err.msg);
        free(w);
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_quit_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    SCREEN *screen = newterm(NULL, stdout, stdin);
    if (!screen) {
        ui_fleet_sampler_stop(sp);
        fprintf(stderr, "tachyon: cannot start curses on this terminal (TERM=%s)\n",
                getenv("TERM") ? getenv("TERM") : "");
        free(w);
        return 1;
    }
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    set_escdelay(25);
    timeout(DRAW_MS);
    if (w->color && has_colors()) {
        start_color();
        use_default_colors();
        init_pair(PAIR_UP, COLOR_GREEN, -1);
        init_pair(PAIR_DOWN, COLOR_RED, -1);
        init_pair(PAIR_HEAD, COLOR_CYAN, -1);
        init_pair(PAIR_CHART, COLOR_GREEN, -1);
    } else {
        w->color = false;
    }
    w->t_start = engine_now();
    unsigned seq = 0;
    while (!got_quit) {
        if (ui_fleet_sampler_latest(sp, w->rows, w->n, &seq)) take_round(w);
        draw(w);
        int ch = getch();
        if (ch == 'q' || ch == 'Q' || ch == 27 || ch == KEY_F(10)) break;
    }
    endwin();
    delscreen(screen);
    ui_fleet_sampler_stop(sp);
    free(w);
    return 0;
}

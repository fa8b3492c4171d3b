/* `tachyon serve`: the engine behind the OpenAI-compatible HTTP server, headless, with a
 * periodic stats line on stderr like vLLM's. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"
#include "engine.h"
#include "mdir.h"
#include "server.h"

static const char serve_usage[] =
    "usage: tachyon serve [options]\n"
    "\n"
    "Serves the model over an OpenAI-compatible HTTP API (/v1/chat/completions,\n"
    "/v1/completions, /v1/models, /tokenize, /detokenize, /metrics, /health, /admin/flags)\n"
    "until SIGINT or SIGTERM.\n"
    "\n"
    "  --shutdown-timeout S       on SIGTERM, seconds to let requests finish (default 30)\n"
    "  --stats-interval S         seconds between stats lines (default 5; 0 = none)\n";

static const char serve_usage_flags[] =
    "Engine flags also change at run time: POST /admin/flags/NAME {\"value\": ...}.\n";

static int wake_pipe[2] = {-1, -1};
static atomic_int signals;

static void on_signal(int sig) {
    atomic_fetch_add(&signals, 1);
    int saved = errno;
    ssize_t n = write(wake_pipe[1], "x", 1);
    (void)n;
    errno = saved;
}

static void print_usage(FILE *f) {
    fputs(serve_usage, f);
    fputs(CLI_SERVER_HELP, f);
    fputs(CLI_ENGINE_HELP, f);
    fputs(serve_usage_flags, f);
}

static int parse_double(const char *name, const char *text, double min, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= min) || v > 1e9) {
        fprintf(stderr, "tachyon: --%s must be a number >= %g\n", name, min);
        return -1;
    }
    *out = v;
    return 0;
}

/* Raises the open-file limit to its hard maximum: each connection is a descriptor. */
static void raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

typedef struct stats_state {
    stats_snapshot_t *snap;
    cli_stats_line_t line;
} stats_state_t;

/* One line like vLLM's LoggingStatLogger, when there was something to report since the last. */
static void stats_line(engine_t *eng, stats_state_t *st) {
    engine_stats(eng, st->snap);
    char buf[512];
    if (cli_stats_line(&st->line, st->snap, engine_now(), buf, sizeof buf))
        fprintf(stderr, "tachyon: %s\n", buf);
}

/* Waits up to ms for a signal; true when one arrived. */
static bool wait_signal(int ms) {
    struct pollfd p = {.fd = wake_pipe[0], .events = POLLIN};
    if (poll(&p, 1, ms) > 0) {
        char buf[16];
        ssize_t n = read(wake_pipe[0], buf, sizeof buf);
        (void)n;
        return true;
    }
    return false;
}

int cmd_serve(int argc, char **argv) {
    static const struct option longopts[] = {
        {"shutdown-timeout", required_argument, 0, 'S'},
        {"stats-interval", required_argument, 0, 'I'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    cli_engine_t ce;
    cli_server_t sv;
    if (cli_engine_args(&ce, &argc, argv) < 0 || cli_server_args(&sv, &argc, argv) < 0) return 2;
    int opt;
    double shutdown_s = 30, stats_s = 5;
    err_t err = {{0}};
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
            case 'S':
                if (parse_double("shutdown-timeout", optarg, 0, &shutdown_s) < 0) return 2;
                break;
            case 'I':
                if (parse_double("stats-interval", optarg, 0, &stats_s) < 0) return 2;
                break;
            case 'h':
                print_usage(stdout);
                return 0;
            default:
                fprintf(stderr, "(tachyon serve --help lists the options)\n");
                return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tachyon: unexpected argument \"%s\" (tachyon serve --help)\n",
                argv[optind]);
        return 2;
    }
    cli_server_finish(&sv, &ce);
    const http_opts_t *ho = &sv.ho;

    if (pipe(wake_pipe) < 0) {
        fprintf(stderr, "tachyon: pipe: %s\n", strerror(errno));
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();

    char busy[512];
    if (cli_server_check_port(&sv, busy, sizeof busy) < 0) {
        fprintf(stderr, "tachyon: %s\n", busy);
        return 1;
    }
    if (cli_engine_open(&ce) < 0) return 1;
    engine_t *eng = ce.eng;
    http_server_t *srv;
    if (http_start(eng, ho, &srv, &err) < 0) {
        fprintf(stderr, "tachyon: %s\n", err.msg);
        cli_engine_close(&ce);
        return 1;
    }
    char be[256];
    engine_describe_backend(eng, be, sizeof be);
    const char *host = ho->host;
    bool v6 = strchr(host, ':') != NULL;
    char warning[512];
    if (cli_server_warning(&sv, warning, sizeof warning)) fprintf(stderr, "tachyon: %s\n", warning);
    fprintf(stderr, "tachyon: serving %s (%s) on http://%s%s%s:%d\n", sv.names[0], be,
            v6 ? "[" : "", host, v6 ? "]" : "", http_port(srv));

    stats_state_t st = {.snap = malloc(sizeof(stats_snapshot_t)), .line = {.t = engine_now()}};
    int stats_ms = stats_s > 0 ? (int)(stats_s * 1000) : -1;
    while (atomic_load(&signals) == 0) {
        if (wait_signal(stats_ms)) break;
        if (st.snap) stats_line(eng, &st);
    }
    fprintf(stderr,
            "tachyon: shutting down: no new connections; waiting up to %.0f s for %d "
            "requests (signal again to abort them)\n",
            shutdown_s, http_in_flight(srv));
    http_drain(srv);
    int seen = atomic_load(&signals);
    double end = engine_now() + shutdown_s;
    while (http_wait_idle(srv, 0.05) > 0 && engine_now() < end && atomic_load(&signals) == seen)
        ;
    http_shutdown(srv, 0);
    http_destroy(srv);
    cli_engine_close(&ce);
    free(st.snap);
    close(wake_pipe[0]);
    close(wake_pipe[1]);
    fprintf(stderr, "tachyon: stopped\n");
    return 0;
}

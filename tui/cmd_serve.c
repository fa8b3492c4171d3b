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

#ifndef TACHYON_VERSION
#define TACHYON_VERSION "dev"
#endif

#define MAX_LIST 16 /* --api-key / --served-model-name given more than once */

static const char serve_usage[] =
    "usage: tachyon serve [options]\n"
    "\n"
    "Serves the model over an OpenAI-compatible HTTP API (/v1/chat/completions,\n"
    "/v1/completions, /v1/models, /tokenize, /detokenize, /metrics, /health, /admin/flags)\n"
    "until SIGINT or SIGTERM.\n"
    "\n"
    "  --host ADDR                listen address (default 127.0.0.1; 0.0.0.0 for all)\n"
    "  --port N                   port (default 8000; 0 = any free port)\n"
    "  --api-key KEY              require Authorization: Bearer KEY (repeatable; default\n"
    "                             $TACHYON_API_KEY)\n"
    "  --served-model-name NAME   the model's name in the API (repeatable; default the --model\n"
    "                             argument)\n"
    "  --reasoning-parser qwen3   split <think> output into reasoning and content\n"
    "  --http-threads N           HTTP threads (default: one per 4 cores, at least 1)\n"
    "  --max-connections N        open connections at most (default 4096)\n"
    "  --http-timeout S           idle connection timeout in seconds (default 60)\n"
    "  --sse-keepalive S          seconds without data before a stream gets a keep-alive\n"
    "                             comment (default 5)\n"
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

static int parse_uint(const char *name, const char *text, long min, long max, unsigned *out) {
    long v;
    if (cli_parse_long(text, min, max, &v) < 0) {
        fprintf(stderr, "tachyon: --%s must be an integer in [%ld, %ld]\n", name, min, max);
        return -1;
    }
    *out = (unsigned)v;
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
    double t;
    uint64_t prompt, gen, queries, hits;
    bool active;
} stats_state_t;

/* One line like vLLM's LoggingStatLogger, when there was something to report since the last. */
static void stats_line(engine_t *eng, stats_state_t *st) {
    engine_stats(eng, st->snap);
    const stats_snapshot_t *s = st->snap;
    double now = engine_now(), dt = now - st->t;
    if (dt <= 0) return;
    uint64_t dp = s->prompt_tokens - st->prompt, dg = s->generation_tokens - st->gen;
    uint64_t dq = s->prefix_queries - st->queries, dh = s->prefix_hits - st->hits;
    bool active = dp || dg || s->running || s->waiting;
    if (active || st->active)
        fprintf(stderr,
                "tachyon: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f "
                "tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, "
                "Prefix cache hit rate: %.1f%%\n",
                dp / dt, dg / dt, s->running, s->waiting,
                s->kv_total ? 100.0 * s->kv_used / s->kv_total : 0.0, dq ? 100.0 * dh / dq : 0.0);
    st->active = active;
    st->t = now;
    st->prompt = s->prompt_tokens;
    st->gen = s->generation_tokens;
    st->queries = s->prefix_queries;
    st->hits = s->prefix_hits;
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
        {"host", required_argument, 0, 'H'},
        {"port", required_argument, 0, 'p'},
        {"api-key", required_argument, 0, 'k'},
        {"served-model-name", required_argument, 0, 'n'},
        {"reasoning-parser", required_argument, 0, 'r'},
        {"http-threads", required_argument, 0, 'T'},
        {"max-connections", required_argument, 0, 'C'},
        {"http-timeout", required_argument, 0, 't'},
        {"sse-keepalive", required_argument, 0, 'K'},
        {"shutdown-timeout", required_argument, 0, 'S'},
        {"stats-interval", required_argument, 0, 'I'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    cli_engine_t ce;
    if (cli_engine_args(&ce, &argc, argv) < 0) return 2;
    http_opts_t ho;
    http_opts_init(&ho);
    const char *keys[MAX_LIST], *names[MAX_LIST];
    int n_keys = 0, n_names = 0, opt;
    double shutdown_s = 30, stats_s = 5;
    err_t err = {{0}};
    unsigned port;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
            case 'H':
                ho.host = optarg;
                break;
            case 'p':
                if (parse_uint("port", optarg, 0, 65535, &port) < 0) return 2;
                ho.port = (int)port;
                break;
            case 'k':
            case 'n': {
                int *n = opt == 'k' ? &n_keys : &n_names;
                if (*n == MAX_LIST || !*optarg) {
                    fprintf(stderr, "tachyon: --%s: at most %d non-empty values\n",
                            opt == 'k' ? "api-key" : "served-model-name", MAX_LIST);
                    return 2;
                }
                (opt == 'k' ? keys : names)[(*n)++] = optarg;
                break;
            }
            case 'r':
                if (strcmp(optarg, "qwen3")) {
                    fprintf(stderr, "tachyon: --reasoning-parser: only qwen3 is supported\n");
                    return 2;
                }
                ho.reasoning_qwen3 = true;
                break;
            case 'T':
                if (parse_uint("http-threads", optarg, 1, 256, &ho.threads) < 0) return 2;
                break;
            case 'C':
                if (parse_uint("max-connections", optarg, 1, 1 << 20, &ho.max_connections) < 0)
                    return 2;
                break;
            case 't':
                if (parse_uint("http-timeout", optarg, 1, 86400, &ho.timeout_s) < 0) return 2;
                break;
            case 'K':
                if (parse_double("sse-keepalive", optarg, 0.01, &ho.keepalive_s) < 0) return 2;
                break;
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
    const char *env_key = getenv("TACHYON_API_KEY");
    if (n_keys == 0 && env_key && *env_key) keys[n_keys++] = env_key;

    const char *model = ce.opts.model.model;
    if (n_names == 0) names[n_names++] = !strcmp(model, MDIR_EMBEDDED) ? "tiny-qwen3" : model;
    ho.api_keys = keys;
    ho.n_api_keys = n_keys;
    ho.model_names = names;
    ho.n_model_names = n_names;
    ho.model_root = model;
    ho.version = TACHYON_VERSION;

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

    if (cli_engine_open(&ce) < 0) return 1;
    engine_t *eng = ce.eng;
    http_server_t *srv;
    if (http_start(eng, &ho, &srv, &err) < 0) {
        fprintf(stderr, "tachyon: %s\n", err.msg);
        cli_engine_close(&ce);
        return 1;
    }
    char be[256];
    engine_describe_backend(eng, be, sizeof be);
    const char *host = ho.host;
    bool v6 = strchr(host, ':') != NULL;
    fprintf(stderr, "tachyon: serving %s (%s) on http://%s%s%s:%d\n", names[0], be, v6 ? "[" : "",
            host, v6 ? "]" : "", http_port(srv));

    stats_state_t st = {.snap = malloc(sizeof(stats_snapshot_t)), .t = engine_now()};
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
    while (http_in_flight(srv) > 0 && engine_now() < end && atomic_load(&signals) == seen)
        wait_signal(50);
    http_shutdown(srv, 0);
    http_destroy(srv);
    cli_engine_close(&ce);
    free(st.snap);
    close(wake_pipe[0]);
    close(wake_pipe[1]);
    fprintf(stderr, "tachyon: stopped\n");
    return 0;
}

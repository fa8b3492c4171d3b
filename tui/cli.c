#include "cli.h"

#include <errno.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mdir.h"
#include "toolcall.h"

#ifndef TACHYON_VERSION
#define TACHYON_VERSION "dev"
#endif
#ifdef TACHYON_HAVE_CUDA
#include "cuda_backend.h"
#endif

int cli_parse_long(const char *text, long min, long max, long *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int cli_parse_float(const char *text, float min, float max, float *out) {
    char *end;
    errno = 0;
    float v = strtof(text, &end);
    if (errno || end == text || *end || !(v >= min && v <= max)) return -1;
    *out = v;
    return 0;
}

/* One model option (with its value in `value`, or NULL when it takes none); 1 = handled,
 * 0 = not a model option, -1 = bad value (printed). */
static int model_option(cli_engine_t *ce, const char *name, const char *value) {
    engine_opts_t *o = &ce->opts;
    if (!strcmp(name, "model")) {
        o->model.model = value;
    } else if (!strcmp(name, "load-format")) {
        int f = load_format_parse(value);
        if (f < 0) {
            fprintf(stderr, "tachyon: --load-format must be auto, safetensors or dummy\n");
            return -1;
        }
        o->model.format = (load_format_t)f;
    } else if (!strcmp(name, "dtype")) {
        if (strcmp(value, "bf16") && strcmp(value, "fp8")) {
            fprintf(stderr, "tachyon: --dtype must be bf16 or fp8\n");
            return -1;
        }
        o->model.dummy_fp8 = !strcmp(value, "fp8");
    } else if (!strcmp(name, "tokenizer")) {
        o->tokenizer = value;
    } else if (!strcmp(name, "backend")) {
        o->backend = value;
        ce->backend_given = true;
    } else if (!strcmp(name, "threads")) {
        long v;
        if (cli_parse_long(value, 0, 1024, &v) < 0) {
            fprintf(stderr, "tachyon: --threads must be an integer in 0..1024\n");
            return -1;
        }
        o->backend_opts.n_threads = (int)v;
    } else {
        return 0;
    }
    return 1;
}

static bool model_option_takes_value(const char *name) {
    static const char *const with_value[] = {"model",     "load-format", "dtype",
                                             "tokenizer", "backend",     "threads"};
    for (size_t i = 0; i < sizeof with_value / sizeof with_value[0]; i++)
        if (!strcmp(name, with_value[i])) return true;
    return false;
}

int cli_engine_args(cli_engine_t *ce, int *argc, char **argv) {
    memset(ce, 0, sizeof *ce);
    engine_opts_init(&ce->opts);
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *arg = argv[i], *next = i + 1 < *argc ? argv[i + 1] : NULL;
        if (!strcmp(arg, "--")) { /* the rest is the subcommand's */
            while (i < *argc)
                argv[out++] = argv[i++];
            break;
        }
        if (!strcmp(arg, "--emulate-fp8-activations")) {
            ce->opts.backend_opts.emulate_fp8_activations = true;
            continue;
        }
        if (!strncmp(arg, "--", 2)) {
            char name[64];
            const char *eq = strchr(arg + 2, '=');
            size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
            if (len < sizeof name) {
                memcpy(name, arg + 2, len);
                name[len] = '\0';
                if (model_option_takes_value(name)) {
                    const char *value = eq ? eq + 1 : next;
                    if (!value) {
                        fprintf(stderr, "tachyon: --%s needs a value\n", name);
                        return -1;
                    }
                    if (model_option(ce, name, value) < 0) return -1;
                    if (!eq) i++;
                    continue;
                }
            }
            err_t err = {{0}};
            int used = 0;
            int rc = flags_parse_arg(arg, next, &ce->opts.flags, &used, &err);
            if (rc < 0) {
                fprintf(stderr, "tachyon: %s\n", err.msg);
                return -1;
            }
            if (rc > 0) {
                i += used - 1;
                continue;
            }
        }
        argv[out++] = argv[i];
    }
    *argc = out;
    argv[out] = NULL;
    ce->opts.model.seed = ce->opts.flags.seed;
#ifdef TACHYON_HAVE_CUDA
    /* the GPU when there is one, unless --backend says otherwise */
    if (!ce->backend_given && cuda_backend_available()) ce->opts.backend = "cuda";
#endif
    return 0;
}

/* One server option with its value; 0 = taken, -1 = bad value (printed). */
static int server_option(cli_server_t *sv, const char *name, const char *value) {
    http_opts_t *o = &sv->ho;
    long v;
    float f;
    if (!strcmp(name, "host")) {
        o->host = value;
    } else if (!strcmp(name, "port")) {
        if (cli_parse_long(value, 0, 65535, &v) < 0) goto bad_int;
        o->port = (int)v;
    } else if (!strcmp(name, "api-key") || !strcmp(name, "served-model-name")) {
        bool key = name[0] == 'a';
        int *n = key ? &sv->n_keys : &sv->n_names;
        if (*n == CLI_MAX_LIST || !*value) {
            fprintf(stderr, "tachyon: --%s: at most %d non-empty values\n", name, CLI_MAX_LIST);
            return -1;
        }
        (key ? sv->keys : sv->names)[(*n)++] = value;
    } else if (!strcmp(name, "reasoning-parser")) {
        if (strcmp(value, "qwen3")) {
            fprintf(stderr, "tachyon: --reasoning-parser: only qwen3 is supported\n");
            return -1;
        }
        o->reasoning_qwen3 = true;
        sv->reasoning_given = true;
    } else if (!strcmp(name, "tool-call-parser")) {
        tc_format_t fmt;
        if (tc_format_parse(value, &fmt) < 0) {
            fprintf(stderr, "tachyon: --tool-call-parser: hermes or qwen3_coder, got \"%s\"\n",
                    value);
            return -1;
        }
        o->tool_parser = value;
    } else if (!strcmp(name, "http-threads")) {
        if (cli_parse_long(value, 1, 256, &v) < 0) goto bad_int;
        o->threads = (unsigned)v;
    } else if (!strcmp(name, "max-connections")) {
        if (cli_parse_long(value, 1, 1 << 20, &v) < 0) goto bad_int;
        o->max_connections = (unsigned)v;
    } else if (!strcmp(name, "max-request-body")) {
        if (cli_parse_long(value, 1024, 1L << 32, &v) < 0) goto bad_int;
        o->max_body = (size_t)v;
    } else if (!strcmp(name, "http-timeout")) {
        if (cli_parse_long(value, 1, 86400, &v) < 0) goto bad_int;
        o->timeout_s = (unsigned)v;
    } else if (!strcmp(name, "sse-keepalive")) {
        if (cli_parse_float(value, 0.01f, 1e6f, &f) < 0) {
            fprintf(stderr, "tachyon: --sse-keepalive must be a number of seconds >= 0.01\n");
            return -1;
        }
        o->keepalive_s = f;
    }
    return 0;
bad_int:
    fprintf(stderr, "tachyon: --%s must be a whole number in range, got \"%s\"\n", name, value);
    return -1;
}

int cli_server_args(cli_server_t *sv, int *argc, char **argv) {
    static const char *const names[] = {"host",
                                        "port",
                                        "api-key",
                                        "served-model-name",
                                        "reasoning-parser",
                                        "tool-call-parser",
                                        "http-threads",
                                        "max-connections",
                                        "max-request-body",
                                        "http-timeout",
                                        "sse-keepalive"};
    memset(sv, 0, sizeof *sv);
    http_opts_init(&sv->ho);
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--")) {
            while (i < *argc)
                argv[out++] = argv[i++];
            break;
        }
        if (!strcmp(arg, "--enable-auto-tool-choice")) { /* a switch: no value */
            sv->ho.auto_tool_choice = true;
            continue;
        }
        const char *name = NULL;
        if (!strncmp(arg, "--", 2))
            for (size_t k = 0; k < sizeof names / sizeof names[0] && !name; k++) {
                size_t len = strlen(names[k]);
                if (!strncmp(arg + 2, names[k], len) &&
                    (arg[2 + len] == '\0' || arg[2 + len] == '='))
                    name = names[k];
            }
        if (!name) {
            argv[out++] = argv[i];
            continue;
        }
        const char *eq = strchr(arg, '=');
        const char *value = eq ? eq + 1 : i + 1 < *argc ? argv[++i] : NULL;
        if (!value) {
            fprintf(stderr, "tachyon: --%s needs a value\n", name);
            return -1;
        }
        if (server_option(sv, name, value) < 0) return -1;
        /* vLLM's --served-model-name takes one or more names: the words up to the next option */
        while (!eq && !strcmp(name, "served-model-name") && i + 1 < *argc && argv[i + 1][0] != '-')
            if (server_option(sv, name, argv[++i]) < 0) return -1;
    }
    *argc = out;
    argv[out] = NULL;
    return 0;
}

void cli_server_finish(cli_server_t *sv, const cli_engine_t *ce) {
    const char *env_key = getenv("TACHYON_API_KEY");
    if (sv->n_keys == 0 && env_key && *env_key) sv->keys[sv->n_keys++] = env_key;
    const char *model = ce->opts.model.model;
    if (sv->n_names == 0)
        sv->names[sv->n_names++] = !strcmp(model, MDIR_EMBEDDED) ? "tiny-qwen3" : model;
    sv->ho.api_keys = sv->keys;
    sv->ho.n_api_keys = sv->n_keys;
    sv->ho.model_names = sv->names;
    sv->ho.n_model_names = sv->n_names;
    sv->ho.model_root = model;
    sv->ho.version = TACHYON_VERSION;
}

bool cli_server_warning(const cli_server_t *sv, char *buf, size_t size) {
    buf[0] = '\0';
    if (sv->ho.n_api_keys > 0 || http_host_is_loopback(sv->ho.host)) return false;
    snprintf(buf, size,
             "warning: listening on %s without --api-key: anyone who can reach it may use the API "
             "(/admin answers this machine only)",
             sv->ho.host);
    return true;
}

int cli_engine_open(cli_engine_t *ce) {
    err_t err = {{0}};
    ce->opts.model.seed = ce->opts.flags.seed;
    if (engine_open(&ce->opts, &ce->eng, &err) < 0) {
        fprintf(stderr, "tachyon: %s\n", err.msg);
        return -1;
    }
    return 0;
}

void cli_engine_close(cli_engine_t *ce) {
    engine_close(ce->eng);
    ce->eng = NULL;
}

int cli_parse_ids(const char *text, int32_t **ids, int *n) {
    int cap = 16, count = 0;
    int32_t *out = malloc((size_t)cap * sizeof *out);
    if (!out) return -1;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(out);
            return -1;
        }
        if (count == cap) {
            int32_t *grown = realloc(out, (size_t)(cap *= 2) * sizeof *out);
            if (!grown) {
                free(out);
                return -1;
            }
            out = grown;
        }
        out[count++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (count == 0) {
        free(out);
        return -1;
    }
    *ids = out;
    *n = count;
    return 0;
}

bool cli_stats_line(cli_stats_line_t *st, const stats_snapshot_t *s, double now, char *buf,
                    size_t size) {
    double dt = now - st->t;
    if (dt <= 0) return false;
    uint64_t dp = s->prompt_tokens - st->prompt, dg = s->generation_tokens - st->gen;
    uint64_t dq = s->prefix_queries - st->queries, dh = s->prefix_hits - st->hits;
    bool active = dp || dg || s->running || s->waiting, report = active || st->active;
    if (report)
        snprintf(buf, size,
                 "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f "
                 "tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, "
                 "Prefix cache hit rate: %.1f%%",
                 dp / dt, dg / dt, s->running, s->waiting,
                 s->kv_total ? 100.0 * s->kv_used / s->kv_total : 0.0, dq ? 100.0 * dh / dq : 0.0);
    uint64_t dd = s->spec_draft_tokens - st->draft_tokens,
             da = s->spec_accepted_tokens - st->accepted;
    size_t len = strlen(buf);
    if (report && dd > 0 && len < size) /* as vLLM's SpecDecoding metrics line */
        snprintf(buf + len, size - len,
                 ", Spec decode: mean acceptance length %.2f, acceptance rate %.1f%%",
                 1.0 + (double)da / (double)(s->spec_drafts - st->drafts), 100.0 * da / dd);
    st->drafts = s->spec_drafts;
    st->draft_tokens = s->spec_draft_tokens;
    st->accepted = s->spec_accepted_tokens;
    st->active = active;
    st->t = now;
    st->prompt = s->prompt_tokens;
    st->gen = s->generation_tokens;
    st->queries = s->prefix_queries;
    st->hits = s->prefix_hits;
    return report;
}

int cli_server_check_port(const cli_server_t *sv, char *msg, size_t size) {
    const char *host = sv->ho.host ? sv->ho.host : "127.0.0.1";
    if (sv->ho.port == 0) return 0;
    char port[16];
    snprintf(port, sizeof port, "%d", sv->ho.port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai;
    if (getaddrinfo(host, port, &hints, &ai)) return 0; /* the server says why, later */
    int e = 0, ok = 0;
    for (struct addrinfo *a = ai; a && !ok; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int one = 1; /* as the server binds: a port in TIME_WAIT is free */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0)
            ok = 1;
        else
            e = errno;
        close(fd);
    }
    freeaddrinfo(ai);
    if (ok || e != EADDRINUSE) return 0;
    snprintf(msg, size,
             "cannot listen on %s:%d: %s (found before loading the model; --port 0 picks a free "
             "port)",
             host, sv->ho.port, strerror(e));
    return -1;
}

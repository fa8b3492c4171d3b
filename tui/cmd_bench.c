/* `tachyon bench`: the benchmark client (bench/bench.h) from the command line, with the flag
 * names of `vllm bench serve`, the bundled profiles, a progress bar and run comparison. */
#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "sweep.h"
#include "mdir.h"
#include "statedir.h"
#include "tokenizer.h"
#include "ui_fleet.h"

static const char bench_usage[] =
    "usage: tachyon bench [OPTIONS]\n"
    "       tachyon bench compare BASE.json RUN.json...\n"
    "       tachyon bench sweep FLAG V1,V2,... [OPTIONS]   (a live flag of a Tachyon server)\n"
    "       tachyon bench --list-profiles\n"
    "\n"
    "Benchmarks an OpenAI-compatible server with the semantics of `vllm bench serve`: the same\n"
    "flags, request bodies, per-request timing, metrics and report. Ctrl-C stops the run and\n"
    "prints the partial result.\n"
    "\n"
    "target:\n"
    "  --backend openai|openai-chat  /v1/completions (default; `vllm` is an alias) or chat\n"
    "  --base-url URL                server root (default http://HOST:PORT)\n"
    "  --host HOST --port PORT       default 127.0.0.1 and 8000\n"
    "  --endpoint PATH               default /v1/completions or /v1/chat/completions\n"
    "  --model NAME                  model name sent (default: the first of GET /v1/models)\n"
    "  --api-key KEY                 bearer token (default: $OPENAI_API_KEY)\n"
    "  --tokenizer DIR               measure prompts with this model directory's tokenizer\n"
    "                                (default: the server's /tokenize and /detokenize)\n"
    "workload:\n"
    "  --profile NAME                a bundled profile (--list-profiles); later flags override\n"
    "  --dataset-name NAME           random (default), sharegpt, sharegpt-synthetic\n"
    "  --dataset-path FILE           ShareGPT JSON (sharegpt without it is the synthetic one)\n"
    "  --num-prompts N               default 1000\n"
    "  --random-input-len N          also --input-len; default 1024\n"
    "  --random-output-len N         also --output-len; default 128\n"
    "  --random-range-ratio R        lengths uniform in [L*(1-R), L*(1+R)], 0 <= R < 1\n"
    "  --random-prefix-len N         tokens of a prefix shared by every prompt\n"
    "  --sharegpt-output-len N       fix ShareGPT output lengths\n"
    "  --ignore-eos                  generate max tokens (always on for random)\n"
    "  --temperature X  --top-p X  --top-k N  --min-p X  --frequency-penalty X\n"
    "  --presence-penalty X  --repetition-penalty X   sampling, sent in the request body\n"
    "  --extra-body JSON             object merged into every request body\n"
    "  --seed N                      dataset and arrival seed (default 0)\n"
    "load:\n"
    "  --request-rate R              requests/s, or inf (default) to send all at once\n"
    "  --burstiness B                gamma shape of the gaps: 1 Poisson (default), inf constant\n"
    "  --max-concurrency N           at most N requests in flight\n"
    "  --num-warmups N               requests sent before the timed run\n"
    "  --timeout S                   per-request timeout in seconds (default 6 hours)\n"
    "report:\n"
    "  --percentile-metrics LIST     of ttft,tpot,itl,e2el (default ttft,tpot,itl)\n"
    "  --metric-percentiles LIST     e.g. 50,90,99 (default 99)\n"
    "  --goodput SLO...              ttft:MS tpot:MS e2el:MS (request goodput)\n"
    "  --report-style STYLE          vllm (default), guidellm, gpustack\n"
    "  --save-result                 write the result JSON (vLLM's keys)\n"
    "  --result-dir DIR              where (default .)\n"
    "  --result-filename NAME        default LABEL-RATEqps[-concurrencyN]-MODEL-DATE.json\n"
    "  --label NAME                  result label (default: the backend)\n"
    "  --metrics URL                 a replica's /metrics (its root or metrics URL), read before\n"
    "                                and after the run: a row per replica with the requests it\n"
    "                                finished, the tokens it generated and its tok/s (repeatable:\n"
    "                                the replicas behind a load balancer)\n"
    "  --list-profiles               print the bundled profiles and exit\n";

static atomic_bool stop_flag;

static void on_sigint(int sig) {
    (void)sig;
    atomic_store(&stop_flag, true);
    /* A second Ctrl-C ends the process at once. */
    signal(SIGINT, SIG_DFL);
}

/* --- Tachyon's own tokenizer behind bench_tokenizer_t ------------------------------------ */

typedef struct local_tok {
    bench_tokenizer_t bt;
    mdir_t *dir;
    tokenizer_t *tok;
    int32_t *specials;
} local_tok_t;

static int lt_encode(void *ctx, const char *text, bool add_special, int32_t **ids, int *n,
                     bench_err_t *err) {
    (void)add_special; /* Qwen tokenizers add no BOS/EOS: both forms are the same */
    local_tok_t *t = ctx;
    err_t e;
    size_t k;
    if (tok_encode(t->tok, text, strlen(text), ids, &k, &e) < 0)
        return bench_err_set(err, "%s", e.msg);
    *n = (int)k;
    return 0;
}

static int lt_decode(void *ctx, const int32_t *ids, int n, char **text, bench_err_t *err) {
    local_tok_t *t = ctx;
    err_t e;
    size_t len;
    if (tok_decode(t->tok, ids, (size_t)n, false, text, &len, &e) < 0)
        return bench_err_set(err, "%s", e.msg);
    return 0;
}

static void lt_close(local_tok_t *t) {
    tok_destroy(t->tok);
    mdir_close(t->dir);
    free(t->specials);
    memset(t, 0, sizeof *t);
}

static int lt_open(local_tok_t *t, const char *path) {
    err_t e = {{0}};
    memset(t, 0, sizeof *t);
    if (mdir_open(path, &t->dir, &e) < 0 || tok_load(t->dir, &t->tok, &e) < 0) {
        fprintf(stderr, "tachyon: --tokenizer %s: %s\n", path, e.msg);
        lt_close(t);
        return -1;
    }
    int v = tok_vocab_size(t->tok), n = 0;
    if (!(t->specials = malloc((size_t)v * sizeof *t->specials))) {
        fprintf(stderr, "tachyon: out of memory\n");
        lt_close(t);
        return -1;
    }
    for (int32_t id = 0; id < v; id++)
        if (tok_is_special(t->tok, id)) t->specials[n++] = id;
    t->bt = (bench_tokenizer_t){.ctx = t,
                                .encode = lt_encode,
                                .decode = lt_decode,
                                .vocab_size = v,
                                .special_ids = t->specials,
                                .n_special = n,
                                .num_special_tokens_to_add = 0};
    return 0;
}

/* --- Progress bar -------------------------------------------------------------------------- */

static void on_progress(const bench_progress_t *p, void *user) {
    (void)user;
    int width = 30, fill = p->total > 0 ? (int)((long)width * p->done / p->total) : 0;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr,
            "\r[%s] %d/%d done, %d in flight, %d failed, %.1f s, %.2f req/s, %lld tok  \033[K", bar,
            p->done, p->total, p->in_flight, p->failed, p->elapsed, p->request_rate_observed,
            (long long)p->output_tokens);
    fflush(stderr);
}

/* --- Flag parsing ---------------------------------------------------------------------------- */

/* Why the last option was refused: `tachyon bench` prints it, the console's /bench shows it.
 * Both parse on the thread that reads it. */
static _Thread_local char flag_error[512];

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(flag_error, sizeof flag_error, fmt, ap);
    va_end(ap);
    return -1;
}

static int bad(const char *flag, const char *value, const char *want) {
    fail("%s %s: %s", flag, value ? value : "", want);
    return -1; /* visibly -1, so callers' out-parameters are known set on 0 */
}

static int parse_int(const char *flag, const char *v, long min, long max, int *out) {
    long x;
    if (cli_parse_long(v, min, max, &x) < 0) {
        char want[96];
        snprintf(want, sizeof want, "expected a whole number in [%ld, %ld]", min, max);
        return bad(flag, v, want);
    }
    *out = (int)x;
    return 0;
}

/* A float, or "inf" when inf_ok. */
static int parse_dbl(const char *flag, const char *v, double min, bool inf_ok, double *out) {
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || isnan(x) || x < min || (isinf(x) && !inf_ok))
        return bad(flag, v, inf_ok ? "expected a number or inf" : "expected a number");
    *out = x;
    return 0;
}

static int copy_str(const char *flag, const char *v, char *dst, size_t cap) {
    if (strlen(v) >= cap) return bad(flag, "", "value too long");
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

/* Adds "key": value to the extra body (value is JSON text: a number). */
static int add_extra(const char *flag, const char *key, const char *v, bool integer,
                     bench_options_t *o) {
    double x;
    if (parse_dbl(flag, v, -INFINITY, false, &x) < 0) return -1;
    if (integer && x != floor(x)) return bad(flag, v, "expected a whole number");
    char item[128];
    snprintf(item, sizeof item, "\"%s\":%.17g", key, x);
    size_t n = strlen(o->extra_body);
    if (n == 0) {
        snprintf(o->extra_body, sizeof o->extra_body, "{%s}", item);
    } else if (n + strlen(item) + 2 < sizeof o->extra_body && o->extra_body[n - 1] == '}') {
        snprintf(o->extra_body + n - 1, sizeof o->extra_body - (n - 1), "%s%s}", n > 2 ? "," : "",
                 item);
    } else {
        return bad(flag, v, "extra body too long");
    }
    return 0;
}

static int parse_list(const char *flag, const char *v, bench_options_t *o, bool metrics) {
    char buf[256];
    if (copy_str(flag, v, buf, sizeof buf) < 0) return -1;
    if (metrics)
        o->percentile_metrics = 0;
    else
        o->n_metric_percentiles = 0;
    for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*t))
            t++;
        if (metrics) {
            if (!strcmp(t, "ttft"))
                o->percentile_metrics |= BENCH_METRIC_TTFT;
            else if (!strcmp(t, "tpot"))
                o->percentile_metrics |= BENCH_METRIC_TPOT;
            else if (!strcmp(t, "itl"))
                o->percentile_metrics |= BENCH_METRIC_ITL;
            else if (!strcmp(t, "e2el"))
                o->percentile_metrics |= BENCH_METRIC_E2EL;
            else
                return bad(flag, t, "expected ttft, tpot, itl or e2el");
        } else {
            double p;
            if (o->n_metric_percentiles == BENCH_MAX_PERCENTILES)
                return bad(flag, v, "too many percentiles");
            if (parse_dbl(flag, t, 0, false, &p) < 0) return -1;
            if (p > 100) return bad(flag, t, "expected a percentile in [0, 100]");
            o->metric_percentiles[o->n_metric_percentiles++] = p;
        }
    }
    if (metrics ? o->percentile_metrics == 0 : o->n_metric_percentiles == 0)
        return bad(flag, v, "empty list");
    return 0;
}

static int parse_goodput(const char *v, bench_options_t *o) {
    const char *colon = strchr(v, ':');
    double ms;
    if (!colon || parse_dbl("--goodput", colon + 1, 0, false, &ms) < 0)
        return bad("--goodput", v, "expected ttft:MS, tpot:MS or e2el:MS");
    size_t k = (size_t)(colon - v);
    if (k == 4 && !strncmp(v, "ttft", 4))
        o->goodput_ttft_ms = ms;
    else if (k == 4 && !strncmp(v, "tpot", 4))
        o->goodput_tpot_ms = ms;
    else if (k == 4 && !strncmp(v, "e2el", 4))
        o->goodput_e2el_ms = ms;
    else
        return bad("--goodput", v, "expected ttft:MS, tpot:MS or e2el:MS");
    return 0;
}

typedef struct cli_bench {
    bench_options_t o;
    const char *host, *tokenizer, *result_dir, *result_filename;
    const char *metrics[UI_FLEET_MAX]; /* --metrics URLs */
    int n_metrics;
    int port;
    bool base_url_set, output_len_set, save, list_profiles, help;
    bench_report_style_t style;
} cli_bench_t;

/* Flags that take no value, and those that take one. */
static const char *const bool_flags[] = {
    "--ignore-eos", "--save-result", "--list-profiles", "--help", "-h", NULL};
static const char *const value_flags[] = {"--backend",
                                          "--base-url",
                                          "--host",
                                          "--port",
                                          "--endpoint",
                                          "--model",
                                          "--api-key",
                                          "--tokenizer",
                                          "--profile",
                                          "--dataset-name",
                                          "--dataset-path",
                                          "--num-prompts",
                                          "--random-input-len",
                                          "--input-len",
                                          "--random-output-len",
                                          "--output-len",
                                          "--sharegpt-output-len",
                                          "--random-range-ratio",
                                          "--range-ratio",
                                          "--random-prefix-len",
                                          "--prefix-len",
                                          "--seed",
                                          "--request-rate",
                                          "--burstiness",
                                          "--max-concurrency",
                                          "--num-warmups",
                                          "--timeout",
                                          "--percentile-metrics",
                                          "--metric-percentiles",
                                          "--goodput",
                                          "--report-style",
                                          "--result-dir",
                                          "--result-filename",
                                          "--label",
                                          "--metrics",
                                          "--extra-body",
                                          "--temperature",
                                          "--top-p",
                                          "--top-k",
                                          "--min-p",
                                          "--frequency-penalty",
                                          "--presence-penalty",
                                          "--repetition-penalty",
                                          NULL};

static bool in_list(const char *const *list, const char *name) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], name)) return true;
    return false;
}

static int apply_flag(cli_bench_t *c, const char *f, const char *v) {
    bench_options_t *o = &c->o;
    if (!strcmp(f, "--ignore-eos"))
        o->ignore_eos = true;
    else if (!strcmp(f, "--save-result"))
        c->save = true;
    else if (!strcmp(f, "--list-profiles"))
        c->list_profiles = true;
    else if (!strcmp(f, "--help") || !strcmp(f, "-h"))
        c->help = true;
    else if (!strcmp(f, "--backend")) {
        if (!strcmp(v, "openai") || !strcmp(v, "vllm"))
            o->backend = BENCH_BACKEND_OPENAI;
        else if (!strcmp(v, "openai-chat"))
            o->backend = BENCH_BACKEND_OPENAI_CHAT;
        else
            return bad(f, v, "expected openai, vllm or openai-chat");
    } else if (!strcmp(f, "--base-url")) {
        c->base_url_set = true;
        return copy_str(f, v, o->base_url, sizeof o->base_url);
    } else if (!strcmp(f, "--host"))
        c->host = v;
    else if (!strcmp(f, "--port"))
        return parse_int(f, v, 1, 65535, &c->port);
    else if (!strcmp(f, "--endpoint"))
        return copy_str(f, v, o->endpoint, sizeof o->endpoint);
    else if (!strcmp(f, "--model"))
        return copy_str(f, v, o->model, sizeof o->model);
    else if (!strcmp(f, "--api-key"))
        return copy_str(f, v, o->api_key, sizeof o->api_key);
    else if (!strcmp(f, "--tokenizer"))
        c->tokenizer = v;
    else if (!strcmp(f, "--profile")) {
        bench_err_t e;
        if (bench_profile_apply(v, o, &e) < 0) return bad(f, v, e.msg);
    } else if (!strcmp(f, "--dataset-name")) {
        if (!strcmp(v, "random"))
            o->dataset = BENCH_DATASET_RANDOM;
        else if (!strcmp(v, "sharegpt"))
            o->dataset = BENCH_DATASET_SHAREGPT;
        else if (!strcmp(v, "sharegpt-synthetic"))
            o->dataset = BENCH_DATASET_SHAREGPT_SYNTHETIC;
        else
            return bad(f, v, "expected random, sharegpt or sharegpt-synthetic");
    } else if (!strcmp(f, "--dataset-path"))
        return copy_str(f, v, o->dataset_path, sizeof o->dataset_path);
    else if (!strcmp(f, "--num-prompts"))
        return parse_int(f, v, 1, 100000000, &o->num_prompts);
    else if (!strcmp(f, "--random-input-len") || !strcmp(f, "--input-len"))
        return parse_int(f, v, 1, 100000000, &o->input_len);
    else if (!strcmp(f, "--random-output-len") || !strcmp(f, "--output-len") ||
             !strcmp(f, "--sharegpt-output-len")) {
        c->output_len_set = true;
        return parse_int(f, v, 1, 100000000, &o->output_len);
    } else if (!strcmp(f, "--random-range-ratio") || !strcmp(f, "--range-ratio")) {
        if (parse_dbl(f, v, 0, false, &o->range_ratio) < 0) return -1;
        if (o->range_ratio >= 1) return bad(f, v, "expected 0 <= R < 1");
    } else if (!strcmp(f, "--random-prefix-len") || !strcmp(f, "--prefix-len"))
        return parse_int(f, v, 0, 100000000, &o->prefix_len);
    else if (!strcmp(f, "--seed")) {
        int s;
        if (parse_int(f, v, 0, 2147483647, &s) < 0) return -1;
        o->seed = (uint64_t)s;
    } else if (!strcmp(f, "--request-rate")) {
        if (parse_dbl(f, v, 0, true, &o->request_rate) < 0) return -1;
        if (o->request_rate <= 0) return bad(f, v, "expected a rate > 0 or inf");
    } else if (!strcmp(f, "--burstiness")) {
        if (parse_dbl(f, v, 0, true, &o->burstiness) < 0) return -1;
        if (o->burstiness <= 0) return bad(f, v, "expected a burstiness > 0 or inf");
    } else if (!strcmp(f, "--max-concurrency"))
        return parse_int(f, v, 1, 10000000, &o->max_concurrency);
    else if (!strcmp(f, "--num-warmups"))
        return parse_int(f, v, 0, 10000000, &o->num_warmups);
    else if (!strcmp(f, "--timeout")) {
        if (parse_dbl(f, v, 0, false, &o->timeout_s) < 0) return -1;
        if (o->timeout_s <= 0) return bad(f, v, "expected seconds > 0");
    } else if (!strcmp(f, "--percentile-metrics"))
        return parse_list(f, v, o, true);
    else if (!strcmp(f, "--metric-percentiles"))
        return parse_list(f, v, o, false);
    else if (!strcmp(f, "--goodput"))
        return parse_goodput(v, o);
    else if (!strcmp(f, "--report-style")) {
        if (!strcmp(v, "vllm"))
            c->style = BENCH_REPORT_VLLM;
        else if (!strcmp(v, "guidellm"))
            c->style = BENCH_REPORT_GUIDELLM;
        else if (!strcmp(v, "gpustack"))
            c->style = BENCH_REPORT_GPUSTACK;
        else
            return bad(f, v, "expected vllm, guidellm or gpustack");
    } else if (!strcmp(f, "--result-dir"))
        c->result_dir = v;
    else if (!strcmp(f, "--result-filename"))
        c->result_filename = v;
    else if (!strcmp(f, "--label"))
        return copy_str(f, v, o->label, sizeof o->label);
    else if (!strcmp(f, "--metrics")) {
        if (c->n_metrics == UI_FLEET_MAX) return bad(f, v, "too many replicas");
        if (strlen(v) >= UI_FLEET_URL) return bad(f, v, "URL too long");
        c->metrics[c->n_metrics++] = v;
    } else if (!strcmp(f, "--extra-body")) {
        if (o->extra_body[0]) return bad(f, v, "give --extra-body before the sampling flags");
        return copy_str(f, v, o->extra_body, sizeof o->extra_body);
    } else if (!strcmp(f, "--temperature"))
        return add_extra(f, "temperature", v, false, o);
    else if (!strcmp(f, "--top-p"))
        return add_extra(f, "top_p", v, false, o);
    else if (!strcmp(f, "--top-k"))
        return add_extra(f, "top_k", v, true, o);
    else if (!strcmp(f, "--min-p"))
        return add_extra(f, "min_p", v, false, o);
    else if (!strcmp(f, "--frequency-penalty"))
        return add_extra(f, "frequency_penalty", v, false, o);
    else if (!strcmp(f, "--presence-penalty"))
        return add_extra(f, "presence_penalty", v, false, o);
    else if (!strcmp(f, "--repetition-penalty"))
        return add_extra(f, "repetition_penalty", v, false, o);
    else
        return bad(f, v, "unknown option");
    return 0;
}

/* vLLM-style argv: --flag VALUE or --flag=VALUE; --goodput takes every following name:value.
 * --profile is applied before every other flag, wherever it stands. */
static int parse_args(cli_bench_t *c, int argc, char **argv) {
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 1; i < argc; i++) {
            char name[64];
            const char *a = argv[i], *eq = strchr(a, '='), *v = NULL;
            if (a[0] != '-') return fail("unexpected argument %s", a);
            size_t k = eq && a[1] == '-' ? (size_t)(eq - a) : strlen(a);
            if (k >= sizeof name) return bad(a, "", "unknown option");
            memcpy(name, a, k);
            name[k] = '\0';
            bool is_bool = in_list(bool_flags, name);
            if (!is_bool && !in_list(value_flags, name)) return fail("unknown option %s", name);
            if (is_bool) {
                if (eq && name[1] == '-') return bad(name, eq + 1, "takes no value");
            } else if (eq && a[1] == '-') {
                v = eq + 1;
            } else if (i + 1 < argc) {
                v = argv[++i];
            } else {
                return bad(name, "", "needs a value");
            }
            bool profile = !strcmp(name, "--profile");
            if (pass == 0 && !profile) {
                if (!strcmp(name, "--goodput"))
                    while (i + 1 < argc && argv[i + 1][0] != '-')
                        i++;
                continue;
            }
            if (pass == 1 && profile) continue;
            if (apply_flag(c, name, v) < 0) return -1;
            if (pass == 1 && !strcmp(name, "--goodput"))
                while (i + 1 < argc && argv[i + 1][0] != '-')
                    if (parse_goodput(argv[++i], &c->o) < 0) return -1;
        }
    }
    return 0;
}

int cmd_bench_parse_workload(bench_options_t *o, int argc, char **argv, char *msg, size_t size) {
    cli_bench_t c = {.o = *o};
    int rc = parse_args(&c, argc, argv);
    if (rc == 0 && (c.base_url_set || c.host || c.port || c.o.model[0] || c.o.api_key[0] ||
                    c.tokenizer || c.save || c.list_profiles || c.help || c.result_dir ||
                    c.result_filename || c.style != BENCH_REPORT_VLLM || c.n_metrics))
        rc = fail("the target, tokenizer and output options are the console's own here");
    if (rc < 0) {
        snprintf(msg, size, "%s", flag_error);
        return -1;
    }
    *o = c.o;
    return 0;
}

/* --- Subcommands ------------------------------------------------------------------------------ */

static int list_profiles(void) {
    const bench_profile_t *p = bench_profiles();
    for (; p->name; p++)
        printf("%-18s %s\n%-18s source: %s\n", p->name, p->description, "", p->source);
    return 0;
}

static int compare(int argc, char **argv) {
    if (argc < 3 || !strcmp(argv[1], "--help")) {
        fputs("usage: tachyon bench compare BASE.json RUN.json...\n", argc < 3 ? stderr : stdout);
        return argc < 3 ? 2 : 0;
    }
    int n = argc - 2, rc = 1;
    bench_result_t *base = NULL;
    bench_result_t **runs = calloc((size_t)n, sizeof *runs);
    bench_err_t e;
    if (!runs) return 1;
    if (bench_result_load_json(argv[1], &base, &e) < 0) goto out;
    for (int i = 0; i < n; i++)
        if (bench_result_load_json(argv[i + 2], &runs[i], &e) < 0) goto out;
    bench_compare_print(stdout, base, (const bench_result_t *const *)runs, n);
    rc = 0;
out:
    if (rc) fprintf(stderr, "tachyon bench compare: %s\n", e.msg);
    bench_result_destroy(base);
    for (int i = 0; i < n; i++)
        bench_result_destroy(runs[i]);
    free(runs);
    return rc;
}

/* vLLM's file name: {label}-{rate}qps[-concurrency{N}]-{model}-{date}.json, with the rate as
 * Python prints a float ("inf", "10.0") and the model's last path component. */
static void result_name(const bench_result_t *r, char *out, size_t cap) {
    const bench_options_t *o = &r->options;
    char rate[32];
    if (isinf(o->request_rate))
        snprintf(rate, sizeof rate, "inf");
    else if (o->request_rate == floor(o->request_rate) && o->request_rate < 1e15)
        snprintf(rate, sizeof rate, "%.1f", o->request_rate);
    else
        snprintf(rate, sizeof rate, "%.17g", o->request_rate);
    char conc[32] = "";
    if (o->max_concurrency > 0) snprintf(conc, sizeof conc, "-concurrency%d", o->max_concurrency);
    const char *model = strrchr(o->model, '/') ? strrchr(o->model, '/') + 1 : o->model;
    const char *label = o->label[0]                          ? o->label
                        : o->backend == BENCH_BACKEND_OPENAI ? "openai"
                                                             : "openai-chat";
    snprintf(out, cap, "%s-%sqps%s-%s-%s.json", label, rate, conc, model, r->date);
}

/* Ctrl-C raises o's stop flag (the run stops and reports what it has); *old to restore. */
static void catch_sigint(bench_options_t *o, struct sigaction *old) {
    atomic_store(&stop_flag, false);
    o->stop = &stop_flag;
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, old);
}

/* The target and the dataset's defaults once the options are parsed. */
static void finish_options(cli_bench_t *cb) {
    cli_bench_t c = *cb;
    if (!c.base_url_set)
        snprintf(c.o.base_url, sizeof c.o.base_url, "http://%s:%d", c.host, c.port);
    if (c.o.dataset == BENCH_DATASET_SHAREGPT && !c.o.dataset_path[0])
        c.o.dataset = BENCH_DATASET_SHAREGPT_SYNTHETIC;
    /* 128 is the random dataset's default; ShareGPT keeps each conversation's own output length
     * unless one is given, as in vLLM. */
    if (c.o.dataset != BENCH_DATASET_RANDOM && !c.output_len_set && !c.o.profile[0])
        c.o.output_len = 0;
    *cb = c;
}

/* --save-result: mkdir -p the result directory, as vLLM does, so that one that cannot be made
 * fails before the run; -1 after saying why. */
static int make_result_dir(const cli_bench_t *c) {
    err_t de = {{0}};
    if (c->save && statedir_mkdirs(c->result_dir, &de) < 0) {
        fprintf(stderr, "tachyon bench: --result-dir %s: %s\n", c->result_dir, de.msg);
        return -1;
    }
    return 0;
}

/* Saves a result in the result directory: as named (--result-filename), else vLLM's name with
 * prefix before it. 0, or 1 after saying why not. */
static int save(const cli_bench_t *c, const bench_result_t *r, const char *prefix) {
    char name[512], path[1100];
    if (c->result_filename)
        snprintf(name, sizeof name, "%s%s", prefix, c->result_filename);
    else
        result_name(r, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s%s", c->result_dir, c->result_filename ? "" : prefix, name);
    bench_err_t e;
    if (bench_result_save_json(r, path, &e) < 0) {
        fprintf(stderr, "tachyon bench: %s\n", e.msg);
        return 1;
    }
    fprintf(stderr, "tachyon bench: result saved to %s\n", path);
    return 0;
}

/* tachyon bench sweep FLAG V1,V2,... [OPTIONS]: the workload once per value of a server flag
 * (Tachyon's /admin/flags), the table and the plot (bench/sweep.h); the flag keeps the last value.
 */
static int sweep(int argc, char **argv) {
    if (argc < 3 || !strcmp(argv[1], "--help")) {
        fputs("usage: tachyon bench sweep FLAG V1,V2,... [tachyon bench's options]\n"
              "Runs the workload once per value of a live server flag (set through Tachyon's\n"
              "/admin/flags; warm-up requests first), then prints a table and a plot of output\n"
              "throughput against mean TPOT with the Pareto front and the best point.\n",
              argc < 3 ? stderr : stdout);
        return argc < 3 ? 2 : 0;
    }
    cli_bench_t c = {.host = "127.0.0.1", .port = 8000, .result_dir = "."};
    bench_options_default(&c.o);
    if (parse_args(&c, argc - 2, argv + 2) < 0) {
        fprintf(stderr, "tachyon bench sweep: %s\n", flag_error);
        return 2;
    }
    finish_options(&c);
    if (make_result_dir(&c) < 0) return 1;
    static bench_sweep_t sw;
    bench_err_t e;
    if (bench_sweep_parse(argv[1], argv[2], &sw, &e) < 0) {
        fprintf(stderr, "tachyon bench sweep: %s\n", e.msg);
        return 2;
    }
    struct sigaction old;
    catch_sigint(&c.o, &old);
    bool tty = isatty(STDERR_FILENO);
    int rc =
        bench_sweep_run(&sw, &c.o, bench_sweep_set_http, &c.o, tty ? on_progress : NULL, NULL, &e);
    sigaction(SIGINT, &old, NULL);
    if (tty) fputc('\n', stderr);
    bench_sweep_print(stdout, &sw, 80);
    fflush(stdout);
    if (rc < 0) fprintf(stderr, "tachyon bench sweep: %s\n", e.msg);
    rc = rc < 0 ? 1 : sw.stopped ? 130 : 0;
    for (int i = 0; i < sw.n && c.save; i++) {
        char prefix[160];
        snprintf(prefix, sizeof prefix, "sweep-%s-%s-", sw.flag, sw.pts[i].value);
        if (sw.pts[i].result && save(&c, sw.pts[i].result, prefix)) rc = 1;
    }
    bench_sweep_free(&sw);
    return rc;
}

/* --metrics: the replicas' rows read before the run, and after it. */
typedef struct replicas {
    ui_fleet_row_t before[UI_FLEET_MAX], after[UI_FLEET_MAX];
    int n;
} replicas_t;

static int replicas_before(replicas_t *rp, const cli_bench_t *c) {
    rp->n = c->n_metrics;
    for (int i = 0; i < rp->n; i++)
        ui_fleet_row_init(&rp->before[i], c->metrics[i]);
    err_t err;
    if (ui_fleet_read(rp->before, rp->n, 5, &err) < 0) {
        fprintf(stderr, "tachyon bench: --metrics: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void replicas_after(replicas_t *rp, double duration) {
    memcpy(rp->after, rp->before, sizeof rp->after[0] * (size_t)rp->n);
    err_t err;
    if (ui_fleet_read(rp->after, rp->n, 5, &err) < 0) return; /* read before: cannot fail */
    char line[UI_FLEET_LINE];
    printf("Replicas (their /metrics before and after the run):\n");
    ui_fleet_run_head_text(line, sizeof line);
    printf("%s\n", line);
    for (int i = 0; i < rp->n; i++) {
        ui_fleet_run_text(&rp->before[i], &rp->after[i], i + 1, duration, line, sizeof line);
        printf("%s\n", line);
    }
}

int cmd_bench(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "compare")) return compare(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "sweep")) return sweep(argc - 1, argv + 1);
    cli_bench_t c = {.host = "127.0.0.1", .port = 8000, .result_dir = "."};
    bench_options_default(&c.o);
    if (parse_args(&c, argc, argv) < 0) {
        fprintf(stderr, "tachyon bench: %s (tachyon bench --help)\n", flag_error);
        return 2;
    }
    if (c.help) {
        fputs(bench_usage, stdout);
        return 0;
    }
    if (c.list_profiles) return list_profiles();
    finish_options(&c);

    if (make_result_dir(&c) < 0) return 1;
    local_tok_t lt = {0};
    if (c.tokenizer) {
        if (lt_open(&lt, c.tokenizer) < 0) return 1;
        c.o.tokenizer = &lt.bt;
    }
    struct sigaction old;
    catch_sigint(&c.o, &old);

    replicas_t reps = {0};
    if (c.n_metrics && replicas_before(&reps, &c) < 0) {
        lt_close(&lt);
        return 1;
    }
    bool tty = isatty(STDERR_FILENO);
    bench_result_t *r = NULL;
    bench_err_t e;
    int rc = bench_run(&c.o, tty ? on_progress : NULL, NULL, &r, &e);
    sigaction(SIGINT, &old, NULL);
    if (tty) fputc('\n', stderr);
    if (rc < 0) {
        fprintf(stderr, "tachyon bench: %s\n", e.msg);
        lt_close(&lt);
        return 1;
    }
    if (r->stopped) fprintf(stderr, "tachyon bench: stopped; partial result\n");
    bench_report_print(stdout, r, c.style);
    if (c.n_metrics) replicas_after(&reps, r->metrics.duration);
    fflush(stdout);
    rc = r->stopped ? 130 : 0;
    if (c.save && save(&c, r, "")) rc = 1;
    bench_result_destroy(r);
    lt_close(&lt);
    return rc;
}

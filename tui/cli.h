/*
 * cli: the subcommands of the `tachyon` binary and the options they share.
 *
 * main() picks the subcommand. A subcommand first lets cli_engine_args() take every engine flag
 * of the table (flags.h: `--max-num-seqs 512`, `--enable-prefix-caching=false`, ...) and the
 * model options (--model, --load-format, --dtype, --backend, --threads,
 * --emulate-fp8-activations) out of argv, then parses its own options with getopt_long.
 *
 *     cli_engine_t ce;
 *     if (cli_engine_args(&ce, &argc, argv) < 0) return 2;   // argv keeps the rest
 *     ... getopt_long over the rest ...
 *     if (cli_engine_open(&ce) < 0) return 1;                // prints the problem
 *     ... engine_submit(ce.eng, ...) ...
 *     cli_engine_close(&ce);
 */
#ifndef TACHYON_CLI_H
#define TACHYON_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "bench.h"
#include "engine.h"
#include "server.h"

typedef struct cli_engine {
    engine_opts_t opts;
    engine_t *eng;      /* after cli_engine_open */
    bool backend_given; /* --backend was on the command line (else: cuda when a GPU is there) */
} cli_engine_t;

#define CLI_ENGINE_HELP                                                                            \
    "model:\n"                                                                                     \
    "  --model DIR|PRESET         model directory (default: the embedded tiny-qwen3), or with\n"   \
    "                             --load-format dummy a preset: tiny, qwen3-0.6b, qwen3-8b,\n"     \
    "                             qwen3-14b, qwen3-32b, qwen3-30b-a3b, qwen3-235b-a22b\n"          \
    "  --load-format FMT          auto | safetensors | dummy (random weights, real shapes)\n"      \
    "  --dtype bf16|fp8           dummy weights' type (default bf16)\n"                            \
    "  --tokenizer DIR            tokenizer and chat template from DIR instead of the model's\n"   \
    "                             (a dummy preset has none; its ids must fit the vocabulary)\n"    \
    "  --backend NAME             cuda (the default on a Hopper GPU), cpu (elsewhere), or\n"       \
    "                             null (no model math)\n"                                          \
    "  --threads N                CPU backend threads (default: all cores)\n"                      \
    "  --emulate-fp8-activations  CPU: quantize FP8 GEMM inputs per token x 128 (W8A8)\n"          \
    "engine flags (tachyon flags lists them all): --max-num-seqs N, --max-num-batched-tokens N,\n" \
    "  --enable-prefix-caching BOOL, --block-size N, --max-model-len N, --kv-cache-memory SIZE,\n" \
    "  --seed N (dummy weights and unseeded requests), ...\n"

/* Defaults, then takes the model options and every engine flag out of argv (compacting it in
 * place and updating *argc; argv[0] stays). Prints the problem and returns -1 on a bad value. */
int cli_engine_args(cli_engine_t *ce, int *argc, char **argv);

#define CLI_MAX_LIST 16 /* --api-key / --served-model-name given more than once */

/* The HTTP server's options, shared by `tachyon serve` and the console. */
typedef struct cli_server {
    http_opts_t ho; /* complete after cli_server_finish */
    const char *keys[CLI_MAX_LIST], *names[CLI_MAX_LIST];
    int n_keys, n_names;
    bool reasoning_given; /* --reasoning-parser was on the command line */
} cli_server_t;

#define CLI_SERVER_HELP                                                                            \
    "server:\n"                                                                                    \
    "  --host ADDR                listen address (default 127.0.0.1; 0.0.0.0 for all)\n"           \
    "  --port N                   port (default 8000; 0 = any free port)\n"                        \
    "  --api-key KEY              require Authorization: Bearer KEY (repeatable; default\n"        \
    "                             $TACHYON_API_KEY)\n"                                             \
    "  --served-model-name NAME [NAME...]  the names clients send as \"model\" (/v1/models\n"      \
    "                             lists them, the console shows the first); default the\n"         \
    "                             --model argument as given\n"                                     \
    "  --reasoning-parser qwen3   split <think> output into reasoning and content\n"               \
    "  --enable-auto-tool-choice  tool_choice \"auto\" parses the model's tool calls\n"            \
    "  --tool-call-parser NAME    hermes (Qwen3) or qwen3_coder (Qwen3.5); default: the one the\n" \
    "                             model's chat template uses\n"                                    \
    "  --http-threads N           HTTP threads (default: one per 4 cores, at least 1)\n"           \
    "  --max-connections N        open connections at most (default 4096)\n"                       \
    "  --max-request-body BYTES   larger request bodies get 413 (default 33554432, 32 MiB)\n"      \
    "  --http-timeout S           idle connection timeout in seconds (default 60)\n"               \
    "  --sse-keepalive S          seconds without data before a stream gets a keep-alive\n"        \
    "                             comment (default 5)\n"

/* Defaults, then takes the server options above out of argv (compacting it like
 * cli_engine_args). Prints the problem and returns -1 on a bad value. */
int cli_server_args(cli_server_t *sv, int *argc, char **argv);

/* Completes sv->ho after cli_engine_args: the keys ($TACHYON_API_KEY when none was given), the
 * model names (the --model argument, "tiny-qwen3" for the embedded model), the version. */
void cli_server_finish(cli_server_t *sv, const cli_engine_t *ce);

/* The warning `tachyon serve` and the console give when the server listens on an address other
 * machines can reach (not http_host_is_loopback) without an API key: written into buf ("warning:
 * listening on ..."), true; false and buf empty when there is nothing to warn about. */
bool cli_server_warning(const cli_server_t *sv, char *buf, size_t size);

/* Whether the server's port is already taken (EADDRINUSE), before minutes of loading weights:
 * -1 with the message in msg; 0 otherwise (other problems are the server's to report). */
int cli_server_check_port(const cli_server_t *sv, char *msg, size_t size);

/* Opens the engine; prints the problem and returns -1 on failure. */
int cli_engine_open(cli_engine_t *ce);

void cli_engine_close(cli_engine_t *ce);

/* Parses "1,2,3" into a new array (caller frees); -1 on a bad list. */
int cli_parse_ids(const char *text, int32_t **ids, int *n);

/* Parses a whole decimal number in [min, max]; -1 when it is not one. */
int cli_parse_long(const char *text, long min, long max, long *out);

/* Parses a float in [min, max]; -1 when it is not one. */
int cli_parse_float(const char *text, float min, float max, float *out);

int cmd_complete(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_flags(int argc, char **argv);
int cmd_serve(int argc, char **argv);
/* `tachyon bench`: the benchmark client (bench/bench.h) from the command line. */
int cmd_bench(int argc, char **argv);
/* The console's /bench: applies `tachyon bench`'s workload options in argv[1..argc) to o (argv[0]
 * is skipped), with the same names, ranges and messages; the target, tokenizer and output options
 * are refused (the console sets those). -1 with the reason in msg, o unchanged. */
int cmd_bench_parse_workload(bench_options_t *o, int argc, char **argv, char *msg, size_t size);
/* `tachyon` / `tachyon console`: the ncurses console with the engine and server embedded. */
int cmd_console(int argc, char **argv);
/* `tachyon console --watch URL...` (console_watch.c): the fleet of replicas, no model. */
int cmd_console_watch(int argc, char **argv);

/* The periodic stats line of `tachyon serve` (and the console's log), as vLLM's
 * LoggingStatLogger writes it: throughputs since the previous line, running and waiting requests,
 * KV-cache use, prefix-cache hit rate. Set t to engine_now() at start; each call with a new
 * snapshot fills buf and returns true when there is something to report (work since the last
 * line, or the line after the last busy one). */
typedef struct cli_stats_line {
    double t;
    uint64_t prompt, gen, queries, hits;
    uint64_t drafts, draft_tokens, accepted; /* speculative decoding: its part of the line */
    bool active;
} cli_stats_line_t;

bool cli_stats_line(cli_stats_line_t *st, const stats_snapshot_t *s, double now, char *buf,
                    size_t size);

#endif

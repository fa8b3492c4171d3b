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

#include "engine.h"

typedef struct cli_engine {
    engine_opts_t opts;
    engine_t *eng; /* after cli_engine_open */
} cli_engine_t;

#define CLI_ENGINE_HELP                                                                            \
    "model:\n"                                                                                     \
    "  --model DIR|PRESET         model directory (default: the embedded tiny-qwen3), or with\n"  \
    "                             --load-format dummy a preset: tiny, qwen3-0.6b, qwen3-8b,\n"    \
    "                             qwen3-14b, qwen3-32b\n"                                         \
    "  --load-format FMT          auto | safetensors | dummy (random weights, real shapes)\n"     \
    "  --dtype bf16|fp8           dummy weights' type (default bf16)\n"                            \
    "  --backend NAME             cpu (default), cuda when built, or null (no model math)\n"      \
    "  --threads N                CPU backend threads (default: all cores)\n"                     \
    "  --emulate-fp8-activations  CPU: quantize FP8 GEMM inputs per token x 128 (W8A8)\n"         \
    "engine flags (tachyon flags lists them all): --max-num-seqs N, --max-num-batched-tokens N,\n" \
    "  --enable-prefix-caching BOOL, --block-size N, --max-model-len N, --kv-cache-memory SIZE,\n"  \
    "  --seed N (dummy weights and unseeded requests), ...\n"

/* Defaults, then takes the model options and every engine flag out of argv (compacting it in
 * place and updating *argc; argv[0] stays). Prints the problem and returns -1 on a bad value. */
int cli_engine_args(cli_engine_t *ce, int *argc, char **argv);

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

#endif

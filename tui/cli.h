/*
 * cli: the subcommands of the `tachyon` binary and the options they share.
 *
 * main() picks the subcommand; each cmd_* parses its own options with getopt_long, using
 * cli_model_* for the options that choose and open a model (--model, --load-format, --dtype,
 * --seed, --backend, --threads, ...).
 */
#ifndef TACHYON_CLI_H
#define TACHYON_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "chat.h"
#include "genconfig.h"
#include "tokenizer.h"
#include "weights.h"

typedef struct cli_model {
    model_source_t src;
    const char *backend; /* "cpu", "cuda" */
    backend_options_t be_opts;
    /* opened by cli_model_open */
    model_weights_t *weights;
    backend_t *be;
    /* opened by cli_model_open_text: the model directory's tokenizer, generation defaults and
     * chat format */
    tokenizer_t *tok;
    genconfig_t gen;
    chat_format_t chat_format;
    int32_t stop_ids[GENCONFIG_MAX_EOS + 1];
    int n_stop_ids;
} cli_model_t;

/* Long options for choosing a model; cli_model_option handles them. Ids start at 1000. */
#define CLI_MODEL_OPTIONS                                                                          \
    {"model", required_argument, 0, 1000}, {"load-format", required_argument, 0, 1001},          \
        {"dtype", required_argument, 0, 1002}, {"seed", required_argument, 0, 1003},              \
        {"backend", required_argument, 0, 1004}, {"threads", required_argument, 0, 1005},         \
        {"emulate-fp8-activations", no_argument, 0, 1006}

#define CLI_MODEL_HELP                                                                             \
    "  --model DIR|PRESET         model directory (default: the embedded tiny-qwen3), or with\n"  \
    "                             --load-format dummy a preset: tiny, qwen3-0.6b, qwen3-8b,\n"    \
    "                             qwen3-14b, qwen3-32b\n"                                         \
    "  --load-format FMT          auto | safetensors | dummy (random weights, real shapes)\n"     \
    "  --dtype bf16|fp8           dummy weights' type (default bf16)\n"                            \
    "  --seed N                   dummy weights' seed (default 0)\n"                              \
    "  --backend NAME             cpu (default) or cuda when built\n"                              \
    "  --threads N                CPU backend threads (default: all cores)\n"                     \
    "  --emulate-fp8-activations  CPU: quantize FP8 GEMM inputs per token x 128 (W8A8)\n"

void cli_model_init(cli_model_t *m);

/* Handles one of CLI_MODEL_OPTIONS; returns 1 when handled, 0 when `opt` is not one of them,
 * -1 with a message on stderr for a bad value. */
int cli_model_option(cli_model_t *m, int opt, const char *arg);

/* Opens the weights and creates the backend; prints the problem and returns -1 on failure. */
int cli_model_open(cli_model_t *m);

/* Loads the tokenizer, generation_config.json and (when `chat`) the chat format of the opened
 * model's directory; prints the problem and returns -1 on failure (a preset has no tokenizer). */
int cli_model_open_text(cli_model_t *m, bool chat);

void cli_model_close(cli_model_t *m);

/* Parses "1,2,3" into a new array (caller frees); -1 on a bad list. */
int cli_parse_ids(const char *text, int32_t **ids, int *n);

/* Parses a whole decimal number in [min, max]; -1 when it is not one. */
int cli_parse_long(const char *text, long min, long max, long *out);

int cmd_complete(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_chat(int argc, char **argv);

#endif

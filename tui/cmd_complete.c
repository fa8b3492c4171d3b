/* `tachyon complete`: one prompt in, one completion out, for scripts and tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"
#include "oneshot.h"
#include "textstream.h"

static const char complete_usage[] =
    "usage: tachyon complete [options] (--prompt TEXT | --prompt-ids 1,2,3)\n"
    "\n"
    "Generates a completion of the prompt and prints it as it comes (or its ids with\n"
    "--token-ids).\n"
    "\n"
    "  --prompt TEXT              the prompt, encoded with the model's tokenizer\n"
    "  --chat                     wrap --prompt as one user message in the model's chat format\n"
    "  --no-think                 with --chat: enable_thinking false\n"
    "  --prompt-ids LIST          the prompt as comma-separated token ids\n"
    "  -n, --max-tokens N         tokens to generate (default 16)\n"
    "  --temperature T            0 = greedy (default 0)\n"
    "  --sampling-seed N          seed for temperature sampling (default 0)\n"
    "  --ignore-eos               do not stop at the model's end-of-sequence token\n"
    "  --token-ids                print the generated ids, comma-separated\n"
    "  --max-num-batched-tokens N prefill chunk size in tokens (default 2048)\n"
    "  --block-size N             KV cache block size in tokens (default 16)\n"
    "  --stats                    print prefill and decode speed and peak memory to stderr\n" CLI_MODEL_HELP;

static void print_stats(const oneshot_result_t *r) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int n_decode = r->n_ids > 0 ? r->n_ids - 1 : 0;
    fprintf(stderr,
            "prefill: %d tokens in %.1f ms (%.1f tokens/s)\n"
            "decode: %d tokens in %.1f ms (%.1f tokens/s)\n"
            "peak memory: %.1f MiB\n",
            r->n_prompt, r->prefill_ms, r->prefill_ms > 0 ? r->n_prompt * 1e3 / r->prefill_ms : 0,
            n_decode, r->decode_ms, r->decode_ms > 0 ? n_decode * 1e3 / r->decode_ms : 0,
            ru.ru_maxrss / 1024.0);
}

static int print_token(void *ctx, int32_t id) {
    textstream_push(ctx, id);
    return 0;
}

/* Encodes the prompt text, as one user message in the chat format when `chat`. */
static int encode_prompt(cli_model_t *m, const char *text, bool chat, bool no_think, int32_t **ids,
                         int *n) {
    err_t err = {{0}};
    char *rendered = NULL;
    size_t len = strlen(text);
    if (chat) {
        chat_msg_t msg = {.role = CHAT_USER,
                          .role_name = "user",
                          .content_kind = CHAT_CONTENT_TEXT,
                          .content = text};
        chat_opts_t opts = {.add_generation_prompt = true,
                            .enable_thinking = no_think ? CHAT_THINK_OFF : CHAT_THINK_DEFAULT};
        if (chat_render(m->chat_format, &msg, 1, NULL, &opts, &rendered, &len, &err) < 0) {
            fprintf(stderr, "tachyon: %s\n", err.msg);
            return -1;
        }
        text = rendered;
    }
    size_t count;
    int rc = tok_encode(m->tok, text, len, ids, &count, &err);
    free(rendered);
    if (rc < 0) {
        fprintf(stderr, "tachyon: %s\n", err.msg);
        return -1;
    }
    *n = (int)count;
    return 0;
}

int cmd_complete(int argc, char **argv) {
    static const struct option longopts[] = {
        {"prompt-ids", required_argument, 0, 'p'},
        {"prompt", required_argument, 0, 'P'},
        {"chat", no_argument, 0, 'C'},
        {"no-think", no_argument, 0, 'T'},
        {"max-tokens", required_argument, 0, 'n'},
        {"temperature", required_argument, 0, 't'},
        {"sampling-seed", required_argument, 0, 's'},
        {"ignore-eos", no_argument, 0, 'e'},
        {"token-ids", no_argument, 0, 'i'},
        {"max-num-batched-tokens", required_argument, 0, 'c'},
        {"block-size", required_argument, 0, 'b'},
        {"stats", no_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},
        CLI_MODEL_OPTIONS,
        {0, 0, 0, 0},
    };
    cli_model_t m;
    cli_model_init(&m);
    oneshot_opts_t o = oneshot_defaults();
    const char *prompt_ids = NULL, *prompt_text = NULL;
    bool token_ids = false, stats = false, ignore_eos = false, chat = false, no_think = false;
    int opt;
    long v;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "n:h", longopts, NULL)) != -1) {
        int handled = cli_model_option(&m, opt, optarg);
        if (handled < 0) return 2;
        if (handled) continue;
        switch (opt) {
            case 'p': prompt_ids = optarg; break;
            case 'P': prompt_text = optarg; break;
            case 'C': chat = true; break;
            case 'T': no_think = true; break;
            case 'n':
                if (cli_parse_long(optarg, 0, 1 << 24, &v) < 0) {
                    fprintf(stderr, "tachyon: --max-tokens must be a non-negative integer\n");
                    return 2;
                }
                o.max_new_tokens = (int)v;
                break;
            case 't': {
                char *end;
                o.temperature = strtof(optarg, &end);
                if (*end || end == optarg || !(o.temperature >= 0)) {
                    fprintf(stderr, "tachyon: --temperature must be a number >= 0\n");
                    return 2;
                }
                break;
            }
            case 's':
                if (cli_parse_long(optarg, 0, __LONG_MAX__, &v) < 0) {
                    fprintf(stderr, "tachyon: --sampling-seed must be a non-negative integer\n");
                    return 2;
                }
                o.seed = (uint64_t)v;
                break;
            case 'e': ignore_eos = true; break;
            case 'i': token_ids = true; break;
            case 'c':
                if (cli_parse_long(optarg, 1, 1 << 20, &v) < 0) {
                    fprintf(stderr, "tachyon: --max-num-batched-tokens must be a positive integer\n");
                    return 2;
                }
                o.chunk_tokens = (int)v;
                break;
            case 'b':
                if (cli_parse_long(optarg, 1, 1024, &v) < 0) {
                    fprintf(stderr, "tachyon: --block-size must be in 1..1024\n");
                    return 2;
                }
                o.block_size = (int)v;
                break;
            case 'S': stats = true; break;
            case 'h': fputs(complete_usage, stdout); return 0;
            default: fputs(complete_usage, stderr); return 2;
        }
    }
    if (optind < argc || !prompt_ids == !prompt_text || (chat && !prompt_text)) {
        fputs(complete_usage, stderr);
        return 2;
    }
    int32_t *prompt = NULL;
    int n_prompt = 0;
    if (prompt_ids && cli_parse_ids(prompt_ids, &prompt, &n_prompt) < 0) {
        fprintf(stderr, "tachyon: --prompt-ids must be a comma-separated list of token ids\n");
        return 2;
    }
    if (cli_model_open(&m) < 0) {
        free(prompt);
        return 1;
    }
    const model_config_t *cfg = weights_config(m.weights);
    /* Text needs the directory's tokenizer; ids in and out work with any model. */
    bool text_out = !token_ids && weights_dir(m.weights);
    if ((prompt_text || text_out) && cli_model_open_text(&m, chat) < 0) {
        free(prompt);
        cli_model_close(&m);
        return 1;
    }
    if (prompt_text && encode_prompt(&m, prompt_text, chat, no_think, &prompt, &n_prompt) < 0) {
        cli_model_close(&m);
        return 1;
    }
    int32_t config_eos = cfg->eos_token_id;
    if (!ignore_eos) {
        o.stop_ids = m.tok ? m.stop_ids : &config_eos;
        o.n_stop_ids = m.tok ? m.n_stop_ids : (config_eos >= 0);
    }
    textstream_t ts;
    if (!token_ids && m.tok) {
        if (textstream_init(&ts, m.tok, stdout, TEXTSTREAM_RAW, false) < 0) {
            fprintf(stderr, "tachyon: out of memory\n");
            free(prompt);
            cli_model_close(&m);
            return 1;
        }
        o.on_token = print_token;
        o.ctx = &ts;
    }
    err_t err = {{0}};
    oneshot_result_t r;
    int rc = 0;
    if (oneshot_generate(m.be, cfg, prompt, n_prompt, &o, &r, &err) < 0) {
        fprintf(stderr, "tachyon: %s\n", err.msg);
        rc = 1;
    } else {
        if (o.on_token) {
            textstream_finish(&ts);
            printf("\n");
        } else {
            for (int i = 0; i < r.n_ids; i++) printf("%s%d", i ? "," : "", r.ids[i]);
            printf("\n");
        }
        if (stats) print_stats(&r);
        oneshot_result_free(&r);
    }
    if (o.on_token) textstream_free(&ts);
    free(prompt);
    cli_model_close(&m);
    return rc;
}

/* `tachyon complete`: one prompt in, one completion out, through the engine. For scripts and
 * tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"
#include "frontend.h"

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
    "  --top-k K, --top-p P, --min-p P\n"
    "  --sampling-seed N          the request's seed\n"
    "  --stop TEXT                stop string (repeatable)\n"
    "  --ignore-eos               do not stop at the model's end-of-sequence tokens\n"
    "  --token-ids                print the generated ids, comma-separated\n"
    "  --stats                    print prefill and decode speed and peak memory to stderr\n"
    "\n" CLI_ENGINE_HELP;

/* The prompt text through the front door, as one user message in the chat format when `chat`. */
static int encode_prompt(engine_t *eng, const char *text, bool chat, bool no_think, int32_t **ids,
                         int *n) {
    err_t err = {{0}};
    fe_prompt_t p;
    int rc;
    if (chat) {
        chat_msg_t msg = {.role = CHAT_USER,
                          .role_name = "user",
                          .content_kind = CHAT_CONTENT_TEXT,
                          .content = text};
        chat_opts_t opts = {.add_generation_prompt = true,
                            .enable_thinking = no_think ? CHAT_THINK_OFF : CHAT_THINK_DEFAULT};
        rc = fe_prompt_chat(eng, &msg, 1, NULL, &opts, NULL, &p, &err);
    } else {
        rc = fe_prompt_text(eng, text, strlen(text), &p, &err);
    }
    if (rc < 0) {
        if (rc == FE_E_UNSUPPORTED && !engine_tokenizer(eng))
            fprintf(stderr, "tachyon: this model has no tokenizer: give --prompt-ids\n");
        else if (rc == FE_E_UNSUPPORTED)
            fprintf(stderr, "tachyon: this model has no chat template\n");
        else
            fprintf(stderr, "tachyon: %s\n", err.msg);
        return -1;
    }
    *ids = p.ids;
    *n = p.n_ids;
    return 0;
}

static void print_stats(engine_t *eng, int n_prompt, int n_out, double ttft_s, double e2e_s) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int n_decode = n_out > 0 ? n_out - 1 : 0;
    double decode_s = e2e_s - ttft_s;
    fprintf(stderr,
            "prefill: %d tokens in %.1f ms (%.1f tokens/s)\n"
            "decode: %d tokens in %.1f ms (%.1f tokens/s)\n"
            "peak memory: %.1f MiB\n",
            n_prompt, ttft_s * 1e3, ttft_s > 0 ? n_prompt / ttft_s : 0, n_decode, decode_s * 1e3,
            decode_s > 0 ? n_decode / decode_s : 0, ru.ru_maxrss / 1024.0);
    static stats_snapshot_t snap;
    engine_stats(eng, &snap);
    if (snap.spec_drafts > 0)
        fprintf(stderr,
                "speculative: %llu drafts verified in %llu steps, %llu accepted (acceptance rate "
                "%.1f%%, mean acceptance length %.2f)\n",
                (unsigned long long)snap.spec_draft_tokens, (unsigned long long)snap.spec_drafts,
                (unsigned long long)snap.spec_accepted_tokens,
                100.0 * stats_spec_acceptance_rate(&snap), stats_spec_mean_length(&snap));
}

int cmd_complete(int argc, char **argv) {
    static const struct option longopts[] = {
        {"prompt-ids", required_argument, 0, 'p'},
        {"prompt", required_argument, 0, 'P'},
        {"chat", no_argument, 0, 'C'},
        {"no-think", no_argument, 0, 'T'},
        {"max-tokens", required_argument, 0, 'n'},
        {"temperature", required_argument, 0, 't'},
        {"top-k", required_argument, 0, 'k'},
        {"top-p", required_argument, 0, 'q'},
        {"min-p", required_argument, 0, 'm'},
        {"sampling-seed", required_argument, 0, 's'},
        {"stop", required_argument, 0, 'x'},
        {"ignore-eos", no_argument, 0, 'e'},
        {"token-ids", no_argument, 0, 'i'},
        {"stats", no_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    cli_engine_t ce;
    if (cli_engine_args(&ce, &argc, argv) < 0) return 2;
    engine_request_t req = {0};
    sampling_params_t *p = &req.sampling;
    sampling_params_init(p);
    p->max_tokens = 16;
    p->temperature = 0.0f;
    const char *prompt_ids = NULL, *prompt_text = NULL;
    bool token_ids = false, stats = false, chat = false, no_think = false;
    int opt, rc = 2;
    long v;
    err_t err = {{0}};
    optind = 1;
    while ((opt = getopt_long(argc, argv, "n:h", longopts, NULL)) != -1) {
        switch (opt) {
            case 'p':
                prompt_ids = optarg;
                break;
            case 'P':
                prompt_text = optarg;
                break;
            case 'C':
                chat = true;
                break;
            case 'T':
                no_think = true;
                break;
            case 'n':
                if (cli_parse_long(optarg, 1, 1 << 24, &v) < 0) {
                    fprintf(stderr, "tachyon: --max-tokens must be a positive integer\n");
                    goto out;
                }
                p->max_tokens = (int)v;
                break;
            case 't':
                if (cli_parse_float(optarg, 0, 2, &p->temperature) < 0) {
                    fprintf(stderr, "tachyon: --temperature must be a number in [0, 2]\n");
                    goto out;
                }
                break;
            case 'k':
                if (cli_parse_long(optarg, 0, 1 << 24, &v) < 0) {
                    fprintf(stderr, "tachyon: --top-k must be a non-negative integer\n");
                    goto out;
                }
                p->top_k = (int)v;
                break;
            case 'q':
                if (cli_parse_float(optarg, 1e-6f, 1, &p->top_p) < 0) {
                    fprintf(stderr, "tachyon: --top-p must be a number in (0, 1]\n");
                    goto out;
                }
                break;
            case 'm':
                if (cli_parse_float(optarg, 0, 1, &p->min_p) < 0) {
                    fprintf(stderr, "tachyon: --min-p must be a number in [0, 1]\n");
                    goto out;
                }
                break;
            case 's':
                if (cli_parse_long(optarg, 0, __LONG_MAX__, &v) < 0) {
                    fprintf(stderr, "tachyon: --sampling-seed must be a non-negative integer\n");
                    goto out;
                }
                p->has_seed = true;
                p->seed = (uint64_t)v;
                break;
            case 'x':
                if (sampling_params_add_stop(p, optarg, &err) < 0) {
                    fprintf(stderr, "tachyon: %s\n", err.msg);
                    goto out;
                }
                break;
            case 'e':
                p->ignore_eos = true;
                break;
            case 'i':
                token_ids = true;
                break;
            case 'S':
                stats = true;
                break;
            case 'h':
                fputs(complete_usage, stdout);
                rc = 0;
                goto out;
            default:
                fputs(complete_usage, stderr);
                goto out;
        }
    }
    if (optind < argc || !prompt_ids == !prompt_text || (chat && !prompt_text)) {
        fputs(complete_usage, stderr);
        goto out;
    }
    int32_t *prompt = NULL;
    if (prompt_ids && cli_parse_ids(prompt_ids, &prompt, &req.n_prompt) < 0) {
        fprintf(stderr, "tachyon: --prompt-ids must be a comma-separated list of token ids\n");
        goto out;
    }
    rc = 1;
    if (cli_engine_open(&ce) < 0) {
        free(prompt);
        goto out;
    }
    if (prompt_text &&
        encode_prompt(ce.eng, prompt_text, chat, no_think, &prompt, &req.n_prompt) < 0)
        goto close;
    req.prompt = prompt;
    bool text_out = !token_ids && engine_tokenizer(ce.eng);
    fe_reply_t *reply;
    fe_reply_opts_t ro = {.split_reasoning = false};
    if (fe_reply_submit(ce.eng, &req, &ro, &reply, &err) < 0) {
        fprintf(stderr, "tachyon: %s\n", err.msg);
        goto close;
    }
    fe_delta_t d;
    int n_out = 0, got;
    double ttft = 0, e2e = 0;
    bool failed = false;
    while ((got = fe_reply_wait(reply, &d, -1)) > 0) {
        const engine_event_t *ev = d.ev;
        if (text_out) {
            fwrite(d.content, 1, d.content_len, stdout);
            fflush(stdout);
        } else {
            for (int i = 0; i < ev->n_tokens; i++)
                printf("%s%d", n_out + i ? "," : "", ev->token_ids[i]);
        }
        n_out += ev->n_tokens;
        if (d.finished) {
            ttft = ev->ttft_s;
            e2e = ev->e2e_s;
            if (ev->reason == ENGINE_FINISH_ERROR) {
                fprintf(stderr, "tachyon: %s\n", ev->error ? ev->error : "generation failed");
                failed = true;
            }
        }
    }
    if (got == -2) {
        fprintf(stderr, "tachyon: out of memory\n");
        failed = true;
    }
    printf("\n");
    fe_reply_release(reply);
    if (stats) print_stats(ce.eng, req.n_prompt, n_out, ttft, e2e);
    rc = failed;
close:
    free(prompt);
    cli_engine_close(&ce);
out:
    sampling_params_free(p);
    return rc;
}

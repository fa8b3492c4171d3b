/* `tachyon chat`: a line-mode chat with the model, for terminals without the console and for
 * scripts (it reads lines from standard input). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "conversation.h"
#include "textstream.h"

static const char chat_usage[] =
    "usage: tachyon chat [options]\n"
    "\n"
    "Chats with the model line by line: each line of input is a user message, the reply\n"
    "streams back (reasoning dimmed). Commands: /new (forget the conversation), /system TEXT,\n"
    "/think on|off, /help, /quit.\n"
    "\n"
    "  --system TEXT        system message\n"
    "  --no-think           enable_thinking false\n"
    "  --hide-reasoning     print only the content of replies\n"
    "  -n, --max-tokens N   tokens per reply (default 512)\n"
    "  --temperature T      default: the model's generation_config.json\n"
    "  --sampling-seed N    first turn's seed (each turn adds 1; default: unseeded)\n"
    "\n" CLI_ENGINE_HELP;

static const char chat_help[] = "/new  /system TEXT  /think on|off  /help  /quit\n";

typedef struct chat_state {
    engine_t *eng;
    conversation_t history;
    char *system;
    bool think;
    textstream_mode_t mode;
    sampling_params_t sampling; /* per turn; unset fields: the model's defaults */
} chat_state_t;

/* One user turn: the prompt through the front door, the reply streamed while it prints,
 * remembered. Returns -1 only on a failure that ends the chat (out of memory). */
static int chat_turn(chat_state_t *st, const char *line) {
    err_t err = {{0}};
    if (conversation_add(&st->history, CHAT_USER, line) < 0) return -1;
    chat_opts_t copts = {.add_generation_prompt = true,
                         .enable_thinking = st->think ? CHAT_THINK_DEFAULT : CHAT_THINK_OFF};
    fe_prompt_t prompt;
    if (fe_prompt_chat(st->eng, st->history.msgs, st->history.n, NULL, &copts, NULL, &prompt,
                       &err) < 0) {
        fprintf(stderr, "tachyon: %s\n", err.msg);
        conversation_forget_last(&st->history);
        return 0;
    }
    engine_request_t req = {
        .prompt = prompt.ids, .n_prompt = prompt.n_ids, .sampling = st->sampling};
    fe_reply_opts_t ro = {.split_reasoning = st->mode != TEXTSTREAM_RAW,
                          .prompt_ends_reasoning = prompt.ends_reasoning};
    fe_reply_t *reply;
    int rc = fe_reply_submit(st->eng, &req, &ro, &reply, &err);
    fe_prompt_free(&prompt);
    if (rc < 0) { /* too long for the context, most likely: say so, keep the chat */
        fprintf(stderr, "tachyon: %s (/new starts over)\n", err.msg);
        conversation_forget_last(&st->history);
        return 0;
    }
    textstream_t ts;
    if (textstream_init(&ts, stdout, st->mode) < 0) {
        fe_reply_release(reply);
        return -1;
    }
    fe_delta_t d;
    bool ok = true;
    while ((rc = fe_reply_wait(reply, &d, -1)) > 0) {
        textstream_push(&ts, &d);
        if (d.finished && d.ev->reason == ENGINE_FINISH_ERROR) {
            fprintf(stderr, "\ntachyon: %s\n", d.ev->error ? d.ev->error : "generation failed");
            ok = false;
        }
    }
    ok &= rc == -1; /* -2: out of memory */
    fe_reply_release(reply);
    textstream_finish(&ts);
    printf("\n");
    rc = ok ? conversation_add(&st->history, CHAT_ASSISTANT, ts.reply) : 0;
    if (!ok) conversation_forget_last(&st->history);
    textstream_free(&ts);
    if (st->sampling.has_seed) st->sampling.seed++;
    return rc;
}

/* A slash command; returns 1 to quit. */
static int chat_command(chat_state_t *st, const char *line) {
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) return 1;
    if (!strcmp(line, "/help")) {
        fputs(chat_help, stdout);
    } else if (!strcmp(line, "/new")) {
        conversation_reset(&st->history, st->system);
        printf("(new conversation)\n");
    } else if (!strncmp(line, "/system", 7) && (line[7] == ' ' || !line[7])) {
        free(st->system);
        st->system = strdup(line[7] ? line + 8 : "");
        conversation_reset(&st->history, st->system);
        printf("(new conversation with %s)\n",
               *st->system ? "this system message" : "no system message");
    } else if (!strcmp(line, "/think on") || !strcmp(line, "/think off")) {
        st->think = !strcmp(line, "/think on");
        printf("(thinking %s)\n", st->think ? "on" : "off");
    } else {
        printf("unknown command %s; %s", line, chat_help);
    }
    return 0;
}

int cmd_chat(int argc, char **argv) {
    static const struct option longopts[] = {
        {"system", required_argument, 0, 's'},
        {"no-think", no_argument, 0, 'T'},
        {"hide-reasoning", no_argument, 0, 'H'},
        {"max-tokens", required_argument, 0, 'n'},
        {"temperature", required_argument, 0, 't'},
        {"sampling-seed", required_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    cli_engine_t ce;
    if (cli_engine_args(&ce, &argc, argv) < 0) return 2;
    chat_state_t st = {.think = true, .mode = TEXTSTREAM_SHOW_REASONING};
    sampling_params_init(&st.sampling);
    st.sampling.max_tokens = 512;
    const char *system = NULL;
    int opt;
    long v;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "n:h", longopts, NULL)) != -1) {
        switch (opt) {
            case 's':
                system = optarg;
                break;
            case 'T':
                st.think = false;
                break;
            case 'H':
                st.mode = TEXTSTREAM_HIDE_REASONING;
                break;
            case 'n':
                if (cli_parse_long(optarg, 1, 1 << 20, &v) < 0) {
                    fprintf(stderr, "tachyon: --max-tokens must be a positive integer\n");
                    return 2;
                }
                st.sampling.max_tokens = (int)v;
                break;
            case 't':
                if (cli_parse_float(optarg, 0, 2, &st.sampling.temperature) < 0) {
                    fprintf(stderr, "tachyon: --temperature must be a number in [0, 2]\n");
                    return 2;
                }
                break;
            case 'S':
                if (cli_parse_long(optarg, 0, __LONG_MAX__, &v) < 0) {
                    fprintf(stderr, "tachyon: --sampling-seed must be a non-negative integer\n");
                    return 2;
                }
                st.sampling.has_seed = true;
                st.sampling.seed = (uint64_t)v;
                break;
            case 'h':
                fputs(chat_usage, stdout);
                return 0;
            default:
                fputs(chat_usage, stderr);
                return 2;
        }
    }
    if (optind < argc) {
        fputs(chat_usage, stderr);
        return 2;
    }
    if (cli_engine_open(&ce) < 0) return 1;
    st.eng = ce.eng;
    if (!engine_tokenizer(ce.eng) || engine_chat_format(ce.eng) < 0) {
        fprintf(stderr, "tachyon: chat needs a model with a tokenizer and a chat template\n");
        cli_engine_close(&ce);
        return 1;
    }
    st.system = strdup(system ? system : "");
    conversation_reset(&st.history, st.system);

    bool tty = isatty(STDIN_FILENO);
    if (tty) {
        char desc[256];
        model_config_describe(engine_model_config(ce.eng), desc, sizeof desc);
        printf("tachyon chat: %s (%s)\n%s", ce.opts.model.model, desc, chat_help);
    }
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    for (;;) {
        if (tty) {
            printf("> ");
            fflush(stdout);
        }
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0) continue;
        if (line[0] == '/') {
            if (chat_command(&st, line)) break;
            continue;
        }
        if (chat_turn(&st, line) < 0) {
            rc = 1;
            break;
        }
    }
    free(line);
    free(st.system);
    conversation_free(&st.history);
    sampling_params_free(&st.sampling);
    cli_engine_close(&ce);
    return rc;
}

/*
 * openai_int: what the two halves of the OpenAI endpoints share (server-internal):
 * openai_request.c parses and validates a request into prompts (the task), openai_response.c
 * submits them through the engine's front door and writes the answer (the result).
 */
#ifndef TACHYON_OPENAI_INT_H
#define TACHYON_OPENAI_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend.h"
#include "openai.h"

#define MAX_PROMPTS       1024           /* prompts in one /v1/completions request */
#define COMPLETIONS_DEF_N 16             /* /v1/completions' schema default for max_tokens */
#define TOOL_CALL_CLOSE   "</tool_call>" /* a named tool choice stops here */

/* One choice of the answer: index = prompt * n + the engine's choice. */
typedef struct choice {
    bool role_sent, finished;
    int tokens;           /* completion tokens so far */
    int reasoning_tokens; /* of which before the end of the reasoning */
    jbuf_t text;          /* not streaming: the whole output */
    jbuf_t lp;            /* not streaming: chat logprobs entries / completions "tokens" */
    jbuf_t lp_vals, lp_top, lp_off; /* not streaming, completions: the other logprob arrays */
    size_t text_off;                /* completions logprobs: code points of output so far */
    engine_finish_reason_t reason;
    char *stop_str;
    int32_t stop_token;
    char *error;
    bool echoed;
    int tool_calls; /* calls this choice made (streaming: the reply's count) */
    jbuf_t calls;   /* not streaming: the message's ,"tool_calls":[...] */
} choice_t;

/* What tool_choice asks for (vLLM's ChatCompletionRequest). */
typedef enum tool_choice {
    TOOL_CHOICE_NONE,     /* tools rendered, no calls parsed */
    TOOL_CHOICE_AUTO,     /* calls parsed if the model makes them */
    TOOL_CHOICE_REQUIRED, /* the reply starts with a call (to any function) */
    TOOL_CHOICE_NAMED,    /* the reply is a call of the named function */
} tool_choice_t;

struct oai_req {
    oai_config_t *cfg;
    oai_endpoint_t ep;
    const tokenizer_t *tok;
    char id[48];
    long long created;
    const char *model; /* one of cfg->model_names */
    /* options */
    bool stream, include_usage, continuous_usage, include_reasoning, reasoning;
    bool chat_logprobs; /* chat: logprobs true */
    int logprobs;       /* top alternatives, or -1 */
    bool echo;
    bool thinking_disabled; /* the prompt leaves no think block (chat_prompt_ends_reasoning) */
    /* tools */
    tool_choice_t tool_choice;
    tc_format_t tool_parser; /* TC_NONE: no calls parsed */
    cJSON *tools;            /* the request's tools (a copy: the body is gone by then) */
    char *call_prefix;       /* required / named: what the prompt made the reply start with */
    int n;
    int max_tokens_param;    /* as given, or -1 */
    bool max_tokens_default; /* completions without the field: 16 (clamped to the context) */
    sampling_params_t sp;
    int priority;
    /* prompts */
    int n_prompts;
    int32_t **prompts;
    int *prompt_len;
    char **prompt_text;      /* echo: the prompt as text */
    size_t *prompt_text_len; /* bytes of each (a prompt may hold U+0000) */
    int prompt_tokens;       /* summed */
    /* the answer */
    fe_reply_t **replies; /* [n_prompts] */
    bool *over;           /* [n_prompts] the reply has no more deltas */
    choice_t *choices;    /* [n_prompts * n] */
    int n_over;
    bool done_sent, failed, recorded;
    bool oom;      /* not streaming: a reply ran out of memory */
    jbuf_t prefix; /* `data: {"id":..,"choices":[` of every chunk */
};

#endif

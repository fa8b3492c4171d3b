/*
 * frontend: the one front door to the engine, for the HTTP server and every CLI (vLLM's input
 * and output processors, llama.cpp's server_response_reader, in C).
 *
 * In: a conversation from an OpenAI "messages" array (fe_conv_from_json); a prompt from chat
 * messages (rendered with the model's chat format, then encoded) or from text (encoded), which
 * also says whether the prompt leaves the model past its reasoning.
 * Out: a reply over a submitted request, read delta by delta: the raw text, the reasoning and
 * the content split as vLLM's qwen3 reasoning parser splits them (incrementally, per choice),
 * token ids, logprobs and, last for each choice, its finish; with a tool-call parser, the calls
 * found in the content (after the reasoning split: reasoning before a call stays reasoning).
 *
 *     fe_conv_t *conv;
 *     fe_conv_from_json(messages, tools, FE_JSON_VLLM, &conv, &err);
 *     fe_prompt_t p;
 *     fe_prompt_chat(eng, conv->msgs, conv->n_msgs, conv->tools, &opts, NULL, &p, &err);
 *     engine_request_t req = {.prompt = p.ids, .n_prompt = p.n_ids};
 *     fe_reply_t *reply;
 *     fe_reply_submit(eng, &req, &(fe_reply_opts_t){.split_reasoning = true,
 *                                                   .prompt_ends_reasoning = p.ends_reasoning},
 *                     &reply, &err);
 *     fe_delta_t d;
 *     while (fe_reply_wait(reply, &d, -1) > 0) {
 *         fwrite(d.content, 1, d.content_len, stdout);
 *         if (d.finished) ... d.ev->reason ...
 *     }
 *     fe_reply_release(reply);
 *     fe_prompt_free(&p);
 *     fe_conv_free(conv);
 *
 * A reply is read by one thread at a time, like the stream under it.
 */
#ifndef TACHYON_FRONTEND_H
#define TACHYON_FRONTEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "chat.h"
#include "engine.h"
#include "toolcall.h"

// ---------------------------------------------------------------------------------------------
// Conversations from OpenAI JSON

/* A conversation built from an OpenAI "messages" array: the messages point into the JSON (which
 * must outlive the conversation) or into the conversation's own store. */
typedef struct fe_conv {
    chat_msg_t *msgs;
    size_t n_msgs;
    const cJSON *tools; /* the request's "tools" array, or NULL */
    struct fe_conv_store *store;
} fe_conv_t;

/* How a conversation is built from JSON. */
enum {
    FE_JSON_FLATTEN_PARTS = 1, /* text parts joined with "\n" into a string content */
    FE_JSON_PARSE_ARGS = 2,    /* string tool-call arguments parsed into JSON objects;
                                  missing or empty ones become {} */
    FE_JSON_VLLM = FE_JSON_FLATTEN_PARTS | FE_JSON_PARSE_ARGS, /* what vLLM's server does */
};

/* Builds a conversation from an OpenAI "messages" array and optional "tools" array (NULL or
 * JSON null for none). Without flags the messages reach the renderer as the client wrote them,
 * which is what transformers' apply_chat_template sees. reasoning_content, thinking and reasoning
 * are read in that order (transformers aliases them). Strings keep their length (U+0000 is
 * text). Fails with a message naming the offending message index for anything the format
 * cannot carry: a missing role, content that is not a string / null / array of text parts, a
 * tool call without a function name. The caller owns *out: fe_conv_free. */
int fe_conv_from_json(const cJSON *messages, const cJSON *tools, unsigned flags, fe_conv_t **out,
                      err_t *err);
void fe_conv_free(fe_conv_t *conv);

/* Checks an OpenAI "tools" array as vLLM's request model does: a non-empty list of
 * {"type": "function", "function": {"name": str, "description": str?, "parameters": object?,
 * "strict": bool?}} (JSON null counts as absent). -1 with vLLM's message for the first problem,
 * which names the item ("tools[1].function.name: Field required"). */
int fe_tools_check(const cJSON *tools, err_t *err);

// ---------------------------------------------------------------------------------------------
// Prompts

typedef struct fe_prompt {
    int32_t *ids; /* [n_ids], owned */
    int n_ids;
    bool ends_reasoning; /* the prompt leaves no think block to fill: all output is content */
} fe_prompt_t;

/* Why a prompt could not be made. */
enum {
    FE_E_INPUT = -1,       /* the conversation: the chat template refused it (its message) */
    FE_E_UNSUPPORTED = -2, /* the model has no chat template, or no tokenizer */
    FE_E_ENCODE = -3,      /* the tokenizer failed (the server's fault, not the request's) */
};

/* Renders msgs with the model's chat format, appends `then` (text the reply is made to start
 * with, such as a tool call's opening; NULL for none) and encodes the result. Returns 0 or
 * FE_E_*; on failure nothing is owned. */
int fe_prompt_chat(engine_t *eng, const chat_msg_t *msgs, size_t n_msgs, const cJSON *tools,
                   const chat_opts_t *opts, const char *then, fe_prompt_t *out, err_t *err);

/* Encodes len bytes of text (U+0000 included). Returns 0 or FE_E_*. */
int fe_prompt_text(engine_t *eng, const char *text, size_t len, fe_prompt_t *out, err_t *err);

void fe_prompt_free(fe_prompt_t *p);

// ---------------------------------------------------------------------------------------------
// Replies

typedef struct fe_reply fe_reply_t;

typedef struct fe_reply_opts {
    bool split_reasoning;       /* split reasoning from content (a chat with a reasoning model) */
    bool prompt_ends_reasoning; /* fe_prompt_t.ends_reasoning: all output is content */
    tc_format_t tool_calls;     /* parse tool calls out of the content (TC_NONE: do not) */
    const cJSON *tools;         /* the request's tools (names checked, parameter types) */
    /* What the prompt made the reply start with (tc_call_prefix), read by the tool-call parser
     * before the output; NULL for none. Copied. */
    const char *call_prefix;
} fe_reply_opts_t;

/* One event of a reply. Every pointer is valid until the next poll/wait or the release. */
typedef struct fe_delta {
    int choice;
    const engine_event_t *ev; /* token ids, logprobs; on the finish, its reason and counts */
    bool finished;            /* the choice's last delta */
    const char *text;         /* the raw text of the delta */
    size_t text_len;
    /* Without split_reasoning everything is content. NULL: no such part in this delta (vLLM
     * sends the field as null); a non-NULL part may still be empty. */
    const char *reasoning;
    size_t reasoning_len;
    const char *content;
    size_t content_len;
    int reasoning_tokens; /* the choice's reasoning tokens so far, as vLLM counts them: between
                             <think> (or the output's start when the prompt opened it) and
                             </think>, the tags excluded; 0 with thinking off */
    /* With a tool-call parser: the calls' pieces found in this delta's content (content above is
     * then what is not a call), and how many calls the choice has begun so far. */
    const tc_event_t *tool_events;
    int n_tool_events;
    int tool_calls;
} fe_delta_t;

/* Submits the request (engine_submit: its ENGINE_E_* codes and messages) and opens a reply on
 * its stream. The caller owns *out: fe_reply_release. */
int fe_reply_submit(engine_t *eng, const engine_request_t *req, const fe_reply_opts_t *opts,
                    fe_reply_t **out, err_t *err);

/* The next delta without blocking: 1 = got one, 0 = none yet, -1 = the reply is over (every
 * choice finished and was read), -2 = out of memory splitting it (the reply cannot go on). */
int fe_reply_poll(fe_reply_t *r, fe_delta_t *d);

/* As poll, waiting up to timeout_ms (-1 = forever). */
int fe_reply_wait(fe_reply_t *r, fe_delta_t *d, int timeout_ms);

/* Aborts the request (engine_stream_cancel); the reply still ends with a finish per choice. */
void fe_reply_cancel(fe_reply_t *r);

/* Done with the reply: cancels the request if unfinished and frees everything. */
void fe_reply_release(fe_reply_t *r);

#endif

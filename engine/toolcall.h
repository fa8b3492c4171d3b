/*
 * toolcall: tool calls in a model's output, found as vLLM's tool parsers find them.
 *
 *   hermes       (Qwen3)   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *   qwen3_coder  (Qwen3.5) <tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>\n
 *                          </function>\n</tool_call>
 *
 * A call's arguments come out as the JSON text vLLM returns: json.dumps(arguments,
 * ensure_ascii=False) of what the model wrote (hermes), or of the parameters converted by the
 * tool's JSON schema types (qwen3_coder: integer, number, boolean, object/array, null, else
 * string, as vLLM's _convert_param_value does). Several calls in one reply are found in order;
 * text before the first call is content; text between and after calls is dropped.
 *
 * Malformed calls degrade to content, never to an error: with tc_extract, a reply whose calls do
 * not all parse (bad JSON, no name, arguments missing, a function the request's tools do not
 * have, a qwen3_coder function never closed) is all content, as vLLM's parsers fall back. The
 * streaming parser gives the same calls as tc_extract for a well-formed reply; a call that turns
 * out malformed before its header went out is given back as content, after it stays as streamed
 * (the reply is then cut, typically at max_tokens).
 *
 *     tc_parser_t *p;
 *     tc_parser_create(TC_HERMES, tools, &p, &err);
 *     for each content delta:
 *         tc_parser_feed(p, text, len, &evs, &n);   // content, call headers, argument pieces
 *     tc_parser_finish(p, &evs, &n);
 *     tc_parser_destroy(p);
 *
 * Streamed, a call is a TC_EV_BEGIN (its index, id and name: vLLM's first tool_calls delta) and
 * then TC_EV_ARGS pieces whose concatenation is the arguments' JSON text (what the openai SDK
 * accumulates).
 */
#ifndef TACHYON_TOOLCALL_H
#define TACHYON_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "chat.h"
#include "err.h"

typedef enum tc_format {
    TC_NONE,
    TC_HERMES,      /* vLLM --tool-call-parser hermes */
    TC_QWEN3_CODER, /* vLLM --tool-call-parser qwen3_coder */
} tc_format_t;

/* "hermes", "qwen3_coder" ("none" for TC_NONE). */
const char *tc_format_name(tc_format_t fmt);
/* The format of a --tool-call-parser name; -1 when unknown. */
int tc_format_parse(const char *name, tc_format_t *out);
/* The format a chat format's template teaches the model: Qwen3's is hermes, Qwen3.5's
 * qwen3_coder. */
tc_format_t tc_format_for_chat(chat_format_t fmt);

/* The text a reply starts with when the prompt makes the model call a tool: any function
 * (name NULL: tool_choice "required") or the named one. Written into `buf` (NUL-terminated);
 * -1 when it does not fit. */
int tc_call_prefix(tc_format_t fmt, const char *name, char *buf, size_t size);

/* A new call id as vLLM makes them: "chatcmpl-tool-" + 32 hex digits (hermes) or "call_" + 24
 * (qwen3_coder). */
void tc_new_id(tc_format_t fmt, char *buf, size_t size);

// ---------------------------------------------------------------------------------------------
// Whole replies

typedef struct tc_call {
    char id[48];
    char *name;
    char *arguments; /* JSON text */
} tc_call_t;

typedef struct tc_result {
    tc_call_t *calls; /* [n_calls]; none: the whole text is content */
    int n_calls;
    size_t content_len; /* with calls: bytes of content before the first call (0: null) */
} tc_result_t;

/* Finds the calls in a whole reply's content. tools: the request's tools (NULL: any name). -1
 * only when out of memory. */
int tc_extract(tc_format_t fmt, const char *text, size_t len, const cJSON *tools, tc_result_t *out,
               err_t *err);
void tc_result_free(tc_result_t *r);

// ---------------------------------------------------------------------------------------------
// Streaming

typedef struct tc_parser tc_parser_t;

typedef enum tc_ev_kind {
    TC_EV_CONTENT, /* text that is content */
    TC_EV_BEGIN,   /* a call starts: index, id and name */
    TC_EV_ARGS,    /* the next piece of a call's arguments */
} tc_ev_kind_t;

typedef struct tc_event {
    tc_ev_kind_t kind;
    int index;        /* BEGIN, ARGS: the call's index in the reply */
    const char *text; /* CONTENT: the text; BEGIN: the function's name; ARGS: the piece */
    size_t len;
    const char *id; /* BEGIN: the call's id (NUL-terminated) */
} tc_event_t;

int tc_parser_create(tc_format_t fmt, const cJSON *tools, tc_parser_t **out, err_t *err);
void tc_parser_destroy(tc_parser_t *p);

/* Feeds a piece of content. *evs (valid until the next call) gets what it produced, in order.
 * -1 only when out of memory. */
int tc_parser_feed(tc_parser_t *p, const char *text, size_t len, const tc_event_t **evs, int *n);

/* The reply ended: text held back (a possible tag) and a call never completed come out. */
int tc_parser_finish(tc_parser_t *p, const tc_event_t **evs, int *n);

/* Calls whose header went out so far. */
int tc_parser_calls(const tc_parser_t *p);

#endif

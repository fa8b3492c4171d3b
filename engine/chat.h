/*
 * chat: the models' chat templates re-implemented in C, and the reasoning splitter.
 *
 * Rendering produces the prompt byte for byte as transformers' apply_chat_template renders the
 * model's Jinja template (tests/fixtures/chat/ holds the templates and golden renders). The
 * format is chosen once per model from its template text (chat_detect_dir). Messages are filled
 * as chat_msg_t, or come from an OpenAI request through fe_conv_from_json (frontend.h).
 *
 *     chat_format_t fmt;
 *     if (chat_detect_dir(dir, &fmt, &err) < 0) ...
 *     chat_msg_t msg = {.role = CHAT_USER, .content_kind = CHAT_CONTENT_TEXT, .content = "Hi"};
 *     chat_opts_t opts = {.add_generation_prompt = true};
 *     char *prompt; size_t len;
 *     chat_render(fmt, &msg, 1, NULL, &opts, &prompt, &len, &err);
 *
 * The reasoning splitter separates model output into reasoning and content the way vLLM's
 * `qwen3` reasoning parser does: chat_reasoning_split() on a whole text, chat_reasoning_feed()
 * on decoded text deltas while streaming.
 */
#ifndef TACHYON_CHAT_H
#define TACHYON_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "err.h"
#include "mdir.h"

// ---------------------------------------------------------------------------------------------
// Formats

typedef enum chat_format {
    CHAT_QWEN3,               /* hybrid thinking Qwen3 (0.6B..32B, 30B-A3B, 235B-A22B) */
    CHAT_QWEN3_INSTRUCT_2507, /* Qwen3-*-Instruct-2507: never thinks; plain generation prompt */
    CHAT_QWEN3_THINKING_2507, /* Qwen3-*-Thinking-2507: the generation prompt opens <think> */
    CHAT_QWEN3_5,             /* Qwen3.5 4B and larger: XML tool calls, <think> opened by default */
    CHAT_QWEN3_5_THINK_OFF,   /* Qwen3.5 0.8B/2B: thinks only when enable_thinking is true */
} chat_format_t;

/* "qwen3", "qwen3-instruct-2507", "qwen3-thinking-2507", "qwen3.5", "qwen3.5-think-off". */
const char *chat_format_name(chat_format_t fmt);

/* Chooses the format from a chat template's text (the Jinja source); `file` names where it came
 * from in the message when the template is not one of the supported families. */
int chat_detect(const char *template_text, const char *file, chat_format_t *fmt, err_t *err);

/* Reads the model's chat template, as transformers does: chat_template.jinja when the directory
 * has one, else tokenizer_config.json's "chat_template" (a string, or a list of {name, template}
 * where "default" is used), and detects its format. A missing template, invalid JSON or an
 * unknown template fails with a message naming the file. */
int chat_detect_dir(mdir_t *dir, chat_format_t *fmt, err_t *err);

// ---------------------------------------------------------------------------------------------
// Messages

typedef enum chat_role {
    CHAT_SYSTEM,
    CHAT_USER,
    CHAT_ASSISTANT,
    CHAT_TOOL,
    CHAT_OTHER
} chat_role_t;

typedef enum chat_content {
    CHAT_CONTENT_NONE,  /* null or absent */
    CHAT_CONTENT_TEXT,  /* a string */
    CHAT_CONTENT_PARTS, /* an array of {"type": "text", "text": ...} parts */
} chat_content_t;

typedef struct chat_tool_call {
    const char *id;   /* may be NULL; no template renders it */
    const char *name; /* function name */
    /* The arguments as the client sent them: a JSON string (OpenAI's wire form) in
     * arguments_text, or a JSON value in arguments_json; both NULL when absent. The templates
     * treat the two differently (Qwen3 copies a string verbatim, Qwen3.5 requires an object). */
    const char *arguments_text;
    size_t arguments_len; /* bytes of arguments_text; 0: up to its NUL */
    const cJSON *arguments_json;
} chat_tool_call_t;

typedef struct chat_msg {
    chat_role_t role;
    const char *role_name; /* the role as given; what CHAT_OTHER renders or rejects */
    chat_content_t content_kind;
    /* Texts are given with a length where they may hold U+0000 (a JSON "\u0000" is text like any
     * other); a length of 0 (or NULL lengths) means "up to the NUL". */
    const char *content; /* CHAT_CONTENT_TEXT */
    size_t content_len;
    const char *const *parts; /* CHAT_CONTENT_PARTS: the text of each part */
    const size_t *part_lens;  /* [n_parts] or NULL */
    size_t n_parts;
    const char *reasoning; /* assistant reasoning_content; NULL when not given as a string */
    size_t reasoning_len;
    const chat_tool_call_t *tool_calls; /* assistant */
    size_t n_tool_calls;
    const char *tool_call_id; /* tool; no template renders it */
} chat_msg_t;

// ---------------------------------------------------------------------------------------------
// Rendering

typedef enum chat_think {
    CHAT_THINK_DEFAULT, /* enable_thinking not passed: the template's default */
    CHAT_THINK_ON,
    CHAT_THINK_OFF,
} chat_think_t;

typedef struct chat_opts {
    bool add_generation_prompt;
    /* Leave the final message open for the model to continue, as transformers'
     * apply_chat_template(continue_final_message=True) does: the final message's text (its
     * content, or its last text part) is rendered with a marker after it and the prompt is cut
     * at the marker, right-stripped where the template trimmed the message. Incompatible with
     * add_generation_prompt. */
    bool continue_final_message;
    chat_think_t enable_thinking;
} chat_opts_t;

/* Renders the prompt into a new NUL-terminated string (*out, *out_len; the caller frees it).
 * `tools` is a JSON array of tool schemas or NULL; opts NULL means no generation prompt and the
 * default thinking mode. Where the Jinja template raises, the call
 * fails with "chat template: " and the template's message (e.g. "No user query found in
 * messages."); inputs the template cannot render at all (a system message whose content is not a
 * string under Qwen3, arguments that are not an object under Qwen3.5) fail likewise; so does a
 * final message that continue_final_message cannot continue (no content, or a template that
 * drops it), with transformers' message. */
int chat_render(chat_format_t fmt, const chat_msg_t *msgs, size_t n_msgs, const cJSON *tools,
                const chat_opts_t *opts, char **out, size_t *out_len, err_t *err);

/* True when the rendered generation prompt leaves no think block for the model to fill
 * (enable_thinking off, or a format that never thinks): the streaming splitter then routes all
 * output to content (vLLM's prompt_is_reasoning_end). */
bool chat_prompt_ends_reasoning(chat_format_t fmt, const chat_opts_t *opts);

// ---------------------------------------------------------------------------------------------
// Reasoning split (vLLM vllm/reasoning/qwen3_reasoning_parser.py)

/* A split of model output. NULL means vLLM returns None for that field; a non-NULL pointer with
 * length 0 is an empty string. Streaming deltas use NULL for "nothing in this delta". */
typedef struct chat_split {
    const char *reasoning;
    size_t reasoning_len;
    const char *content;
    size_t content_len;
} chat_split_t;

/* Splits a whole output (vLLM extract_reasoning): drop everything up to the first <think>; a
 * </think> splits reasoning from content; else thinking_disabled makes everything content; else
 * a <tool_call> followed by <function ends the reasoning; else everything is reasoning (the
 * output was truncated). The pieces point into `text`. */
void chat_reasoning_split(const char *text, size_t len, bool thinking_disabled, chat_split_t *out);

typedef struct chat_reasoning chat_reasoning_t;

/* A streaming splitter for one response. prompt_is_reasoning_end (chat_prompt_ends_reasoning):
 * all output is content. */
int chat_reasoning_create(bool prompt_is_reasoning_end, chat_reasoning_t **out, err_t *err);
void chat_reasoning_destroy(chat_reasoning_t *rs);

/* Feeds one decoded text delta. Text that may be the start of <think>, </think> or of a tool call
 * inside the think block is held back until the next delta decides it; everything else is
 * returned at once. The first <think> is dropped; after </think> (or a <tool_call> followed by
 * <function) everything is content. The slices in *out point into `delta` or into the splitter
 * and stay valid until the next call. Fails only when out of memory. */
int chat_reasoning_feed(chat_reasoning_t *rs, const char *delta, size_t len, chat_split_t *out,
                        err_t *err);

/* Ends the response: returns what was held back (as reasoning: an unfinished tag is text). */
void chat_reasoning_finish(chat_reasoning_t *rs, chat_split_t *out);

#endif

/*
 * openai: the OpenAI-compatible generation endpoints as vLLM answers them.
 *
 * POST /v1/chat/completions and /v1/completions: a request body is parsed and validated
 * (oai_parse: every sampling field of vLLM's schema, unknown fields ignored, errors in vLLM's
 * envelope), turned into prompts (chat template, tokenizer) and submitted to the engine
 * (oai_submit: one engine stream per prompt). The answer is then built from the streams' events
 * on the HTTP thread: SSE chunks for a streaming request (oai_pump), or the whole JSON once every
 * choice finished (oai_collect, oai_response). Also POST /tokenize and /detokenize.
 *
 *     oai_req_t *r;
 *     if (oai_parse(&cfg, OAI_CHAT, body, len, &r, &e) < 0) -> send e (oai_error_json)
 *     if (oai_submit(r, wake, ctx, &e) < 0) -> send e
 *     streaming:  on each wake, oai_pump(r, &buf, max) until it returns 1 ([DONE] written)
 *     otherwise:  on each wake, oai_collect(r) until it returns 1, then oai_response(r, &buf, &st)
 *     oai_destroy(r);   // releases the streams, cancelling unfinished ones
 *
 * A request is used by one thread at a time, except oai_cancel, which any thread may call.
 */
#ifndef TACHYON_OPENAI_H
#define TACHYON_OPENAI_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "toolcall.h"
#include "json.h"
#include "metrics.h"

/* What every request of one server shares. */
typedef struct oai_config {
    engine_t *eng;
    const char *const *model_names; /* accepted "model" values; [0] is the one reported */
    int n_model_names;
    bool reasoning_qwen3; /* --reasoning-parser qwen3 */
    /* tools: the parser of tool calls (--tool-call-parser, else the one the model's chat
     * template teaches it), and whether tool_choice "auto" parses calls
     * (--enable-auto-tool-choice; "required" and named choices always do) */
    tc_format_t tool_parser;
    bool auto_tool_choice;
    metrics_t *metrics; /* finished requests are recorded here (may be NULL) */
    uint64_t id_seed;   /* response ids are derived from it and a counter */
    atomic_uint_least64_t n_ids;
} oai_config_t;

/* An error as vLLM reports it: HTTP status, envelope type, the offending field (empty for
 * null) and the message. */
typedef struct oai_error {
    int status;
    char type[40];
    char param[64];
    char msg[1024];
} oai_error_t;

/* Fills e; type follows from status (400 BadRequestError, 404 NotFoundError, 413
 * RequestEntityTooLargeError, 501 NotImplementedError, 503 ServiceUnavailableError, others
 * InternalServerError). Returns -1. */
int oai_error_set(oai_error_t *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* {"error": {"message", "type", "param", "code"}} */
void oai_error_json(const oai_error_t *e, jbuf_t *out);

typedef enum oai_endpoint {
    OAI_CHAT,        /* /v1/chat/completions */
    OAI_COMPLETIONS, /* /v1/completions */
} oai_endpoint_t;

typedef struct oai_req oai_req_t;

/* Parses and validates a request body (any bytes: invalid UTF-8 and invalid JSON are 400s)
 * and prepares its prompts. The caller owns *out: oai_destroy. */
int oai_parse(oai_config_t *c, oai_endpoint_t ep, const char *body, size_t len, oai_req_t **out,
              oai_error_t *e);

bool oai_is_stream(const oai_req_t *r);

/* Submits the request's prompts to the engine; wake(ctx) is called from the engine thread
 * whenever one of its streams has news (engine_request_t.wake). A refusal (queue full: 503; a
 * prompt beyond the context: 400) submits nothing. */
int oai_submit(oai_req_t *r, void (*wake)(void *ctx), void *ctx, oai_error_t *e);

/* Streaming: turns the events available now into SSE bytes appended to out, stopping once out
 * holds at least `max` bytes. Returns 1 once the stream is complete (usage chunk if asked and
 * `data: [DONE]` written, or an error event and [DONE]), 0 while more is to come. */
int oai_pump(oai_req_t *r, jbuf_t *out, size_t max);

/* Not streaming: takes the events available now. Returns 1 once every choice finished. */
int oai_collect(oai_req_t *r);

/* Not streaming, after oai_collect returned 1: the response body and its status (200, or the
 * error envelope with 500 when the engine failed a choice). */
void oai_response(oai_req_t *r, jbuf_t *out, int *status);

/* Aborts the request's unfinished choices (their streams finish with reason abort). Any
 * thread; idempotent. */
void oai_cancel(oai_req_t *r);

/* Releases the streams (cancelling unfinished choices) and frees the request. NULL is a
 * no-op. */
void oai_destroy(oai_req_t *r);

/* POST /tokenize: {"prompt"} or the chat form {"messages", ...}; answers
 * {"count", "max_model_len", "tokens", "token_strs"}. 0 with the body in out, or -1 with e. */
int oai_tokenize(oai_config_t *c, const char *body, size_t len, jbuf_t *out, oai_error_t *e);

/* POST /detokenize: {"tokens"} -> {"prompt"}. */
int oai_detokenize(oai_config_t *c, const char *body, size_t len, jbuf_t *out, oai_error_t *e);

/* The engine's current max-model-len. */
int oai_max_model_len(engine_t *eng);

#endif

/*
 * The request JSON to engine request path (server/openai_request.c and openai_response.c):
 * every body goes through POST /v1/chat/completions and /v1/completions parsing and validation
 * (every field: sampling, stop strings, logprobs, tools and tool_choice, chat template options,
 * prompts as text, ids and lists of either), /tokenize and /detokenize. A request that parses is
 * submitted to an engine on the null backend with tiny-qwen3's tokenizer and chat template
 * (max-model-len 128, so that any request is a few hundred cheap steps) and answered, streamed
 * or whole. Properties: a refusal is a 4xx/5xx with a message; a whole answer is valid JSON with
 * status 200; every streamed event is valid JSON and the stream ends with [DONE]. Validity is
 * the benchmark client's strict syntax check (bench/sse.c), not the server's json_parse, which
 * refuses object keys holding U+0000 that a logprobs token may rightly be.
 */
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "fuzz_util.h"
#include "json.h"
#include "openai.h"
#include "openai_int.h"
#include "sse.h"

#define MAX_CHOICES 32 /* prompts x n submitted; larger requests are parsed only */

static engine_t *eng;
static oai_config_t cfg;
static sem_t woken;
static const char *const NAMES[] = {"tiny", "tiny-qwen3"};

static void wake(void *ctx) {
    sem_post(&woken);
}

static void open_engine(void) {
    engine_opts_t o;
    engine_opts_init(&o);
    o.model.model = fz_fixture("tiny-qwen3");
    o.backend = "null";
    err_t err;
    if (flags_set(flags_find("max-model-len"), "128", &o.flags, &err) < 0 ||
        engine_open(&o, &eng, &err) < 0) {
        fprintf(stderr, "fuzz_request: %s\n", err.msg);
        abort();
    }
    cfg.eng = eng;
    cfg.model_names = NAMES;
    cfg.n_model_names = 2;
    cfg.reasoning_qwen3 = true;
    cfg.tool_parser = TC_HERMES;
    cfg.auto_tool_choice = true;
    sem_init(&woken, 0, 0);
}

static void check_error(const oai_error_t *e) {
    FZ_CHECK(e->status >= 400 && e->status < 600 && e->msg[0], "error %d: %s", e->status, e->msg);
    jbuf_t b;
    jb_init(&b);
    oai_error_json(e, &b);
    FZ_CHECK(bench_sse_json_valid(b.p, b.len), "error envelope is not JSON: %.*s", (int)b.len, b.p);
    jb_free(&b);
}

/* Every `data: ` event of an SSE body is JSON, the last one [DONE]. */
static void check_sse(const jbuf_t *b) {
    const char *p = b->p, *end = b->p + b->len, *last = NULL;
    size_t last_len = 0;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        FZ_CHECK(eol, "an SSE line without its end");
        if (eol - p > 6 && !memcmp(p, "data: ", 6)) {
            last = p + 6;
            last_len = (size_t)(eol - last);
            if (!(last_len == 6 && !memcmp(last, "[DONE]", 6)))
                FZ_CHECK(bench_sse_json_valid(last, last_len), "an event is not JSON: %.*s",
                         (int)last_len, last);
        }
        p = eol + 1;
    }
    FZ_CHECK(last && last_len == 6 && !memcmp(last, "[DONE]", 6),
             "the stream did not end in [DONE]");
}

static void answer(oai_req_t *r) {
    oai_error_t e;
    if (oai_submit(r, wake, NULL, &e) < 0) {
        check_error(&e);
        return;
    }
    jbuf_t b;
    jb_init(&b);
    if (oai_is_stream(r)) {
        /* out keeps every event, so the pump's limit grows with it (the server drains it); a
         * pump that stopped at its limit has more to give without a wake */
        for (;;) {
            size_t limit = b.len + (1 << 16);
            if (oai_pump(r, &b, limit)) break;
            if (b.len < limit) sem_wait(&woken);
        }
        check_sse(&b);
    } else {
        while (!oai_collect(r))
            sem_wait(&woken);
        int status = 0;
        oai_response(r, &b, &status);
        FZ_CHECK(status == 200, "status %d: %.*s", status, (int)b.len, b.p);
        FZ_CHECK(bench_sse_json_valid(b.p, b.len), "the answer is not JSON: %.*s", (int)b.len, b.p);
    }
    jb_free(&b);
    while (sem_trywait(&woken) == 0) {
    }
}

/* The engine opens before the first input, outside libFuzzer's per-input timeout (opening it
 * took over 10 s on a loaded machine). */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    open_engine();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *body = (const char *)data; /* not NUL-terminated: ASan sees any overread */
    for (int ep = OAI_CHAT; ep <= OAI_COMPLETIONS; ep++) {
        oai_req_t *r = NULL;
        oai_error_t e;
        if (oai_parse(&cfg, (oai_endpoint_t)ep, body, size, &r, &e) < 0) {
            check_error(&e);
            continue;
        }
        if (r->n_prompts * r->n <= MAX_CHOICES) answer(r);
        oai_destroy(r);
    }
    jbuf_t out;
    jb_init(&out);
    oai_error_t e;
    if (oai_tokenize(&cfg, body, size, &out, &e) < 0) check_error(&e);
    jb_free(&out);
    jb_init(&out);
    if (oai_detokenize(&cfg, body, size, &out, &e) < 0) check_error(&e);
    jb_free(&out);
    return 0;
}

/*
 * The tool-call parsers (engine/toolcall.c: hermes and qwen3_coder, whole replies and streamed)
 * with the JSON normalizer they stream arguments through (engine/jnorm.c), and the reasoning
 * splitter that runs before them (engine/chat.c). The input is a model's reply, optionally
 * preceded by the request's tools: TOOLS_JSON "\n#reply\n" REPLY (without the separator, a
 * fixed tools array with every parameter type).
 *
 * Properties (those test_toolcall checks on its cases, for any reply): when the whole-reply
 * parser finds calls, the streamed form, fed in uneven pieces, adds up to the same content,
 * names and arguments; when the stream begins no call, its content is the whole reply. Every
 * call's arguments are valid JSON.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "fuzz_util.h"
#include "json.h"
#include "toolcall.h"

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": "
    "{\"type\": \"integer\"}, \"ratio\": {\"type\": \"number\"}, \"flag\": {\"type\": "
    "\"boolean\"}, \"tags\": {\"type\": \"array\"}, \"opts\": {\"type\": \"object\"}, \"any\": "
    "{\"type\": \"any\"}, \"none\": {\"type\": \"null\"}}}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"search\"}}]";

static cJSON *default_tools;

typedef struct streamed {
    jbuf_t content;
    jbuf_t names[8], args[8];
    int n_calls;
} streamed_t;

static void add_events(streamed_t *s, const tc_event_t *evs, int n) {
    for (int i = 0; i < n; i++) {
        const tc_event_t *e = &evs[i];
        if (e->kind == TC_EV_CONTENT) {
            jb_raw(&s->content, e->text, e->len);
        } else if (e->kind == TC_EV_BEGIN) {
            FZ_CHECK(e->index == s->n_calls, "call %d began as index %d", s->n_calls, e->index);
            FZ_CHECK(e->id && e->id[0], "call %d has no id", e->index);
            if (s->n_calls < 8) jb_raw(&s->names[s->n_calls], e->text, e->len);
            s->n_calls++;
        } else {
            FZ_CHECK(e->index == s->n_calls - 1, "arguments for call %d during call %d", e->index,
                     s->n_calls - 1);
            if (e->index < 8) jb_raw(&s->args[e->index], e->text, e->len);
        }
    }
}

/* Feeds the reply in pieces of 1, 2, 3, ... max_piece bytes, cycling. */
static void stream(tc_format_t fmt, const cJSON *tools, const char *text, size_t len,
                   size_t max_piece, streamed_t *s) {
    memset(s, 0, sizeof *s);
    tc_parser_t *p;
    err_t err;
    if (tc_parser_create(fmt, tools, &p, &err) < 0) abort();
    const tc_event_t *evs;
    int n;
    size_t piece = 1;
    for (size_t at = 0; at < len;) {
        size_t k = piece < len - at ? piece : len - at;
        FZ_CHECK(tc_parser_feed(p, text + at, k, &evs, &n) == 0, "feed failed");
        add_events(s, evs, n);
        at += k;
        piece = piece % max_piece + 1;
    }
    FZ_CHECK(tc_parser_finish(p, &evs, &n) == 0, "finish failed");
    add_events(s, evs, n);
    FZ_CHECK(tc_parser_calls(p) == s->n_calls, "parser counts %d calls, events %d",
             tc_parser_calls(p), s->n_calls);
    tc_parser_destroy(p);
}

static void streamed_free(streamed_t *s) {
    jb_free(&s->content);
    for (int i = 0; i < 8; i++) {
        jb_free(&s->names[i]);
        jb_free(&s->args[i]);
    }
}

static bool same(const jbuf_t *b, const char *p, size_t n) {
    return b->len == n && (n == 0 || memcmp(b->p, p, n) == 0);
}

static void check_format(tc_format_t fmt, const cJSON *tools, const char *text, size_t len) {
    tc_result_t r;
    err_t err;
    FZ_CHECK(tc_extract(fmt, text, len, tools, &r, &err) == 0, "extract failed: %s", err.msg);
    for (int i = 0; i < r.n_calls; i++) {
        cJSON *args = json_parse(r.calls[i].arguments, strlen(r.calls[i].arguments), &err);
        FZ_CHECK(args, "call %d's arguments are not JSON: %s", i, r.calls[i].arguments);
        cJSON_Delete(args);
    }
    FZ_CHECK(r.content_len <= len, "content of %zu bytes in a %zu-byte reply", r.content_len, len);
    for (size_t max_piece = 1; max_piece <= 7; max_piece += 6) {
        streamed_t s;
        stream(fmt, tools, text, len, max_piece, &s);
        if (r.n_calls > 0 && r.n_calls <= 8) {
            FZ_CHECK(s.n_calls == r.n_calls, "%s: streamed %d calls, whole %d", tc_format_name(fmt),
                     s.n_calls, r.n_calls);
            FZ_CHECK(same(&s.content, text, r.content_len), "%s: streamed content differs",
                     tc_format_name(fmt));
            for (int i = 0; i < r.n_calls; i++) {
                FZ_CHECK(same(&s.names[i], r.calls[i].name, strlen(r.calls[i].name)),
                         "%s: call %d's name differs", tc_format_name(fmt), i);
                FZ_CHECK(same(&s.args[i], r.calls[i].arguments, strlen(r.calls[i].arguments)),
                         "%s: call %d's arguments differ: streamed %.*s, whole %s",
                         tc_format_name(fmt), i, (int)s.args[i].len, s.args[i].p,
                         r.calls[i].arguments);
            }
        } else if (s.n_calls == 0) {
            FZ_CHECK(same(&s.content, text, len), "%s: no call, but the content is not the reply",
                     tc_format_name(fmt));
        }
        streamed_free(&s);
    }
    tc_result_free(&r);
}

/* The reasoning split, whole and streamed in pieces (no property: vLLM's two paths differ on
 * some inputs, and so do ours by design). */
static void reasoning(const char *text, size_t len, bool disabled) {
    chat_split_t sp;
    chat_reasoning_split(text, len, disabled, &sp);
    chat_reasoning_t *rs;
    err_t err;
    if (chat_reasoning_create(disabled, &rs, &err) < 0) abort();
    size_t piece = 1;
    for (size_t at = 0; at < len;) {
        size_t k = piece < len - at ? piece : len - at;
        FZ_CHECK(chat_reasoning_feed(rs, text + at, k, &sp, &err) == 0, "%s", err.msg);
        at += k;
        piece = piece % 5 + 1;
    }
    chat_reasoning_finish(rs, &sp);
    chat_reasoning_destroy(rs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!default_tools) {
        err_t err;
        default_tools = json_parse(TOOLS, strlen(TOOLS), &err);
        if (!default_tools) abort();
    }
    fz_part_t parts[2];
    int n = fz_split(data, size, "\n#reply\n", parts, 2);
    cJSON *tools = NULL;
    if (n == 2) {
        err_t err;
        tools = json_parse((const char *)parts[0].p, parts[0].n, &err);
    }
    const fz_part_t *reply = &parts[n - 1];
    const char *text = (const char *)reply->p; /* the input's tail: ASan sees any overread */
    const cJSON *t = n == 2 ? tools : default_tools;
    check_format(TC_HERMES, t, text, reply->n);
    check_format(TC_QWEN3_CODER, t, text, reply->n);
    reasoning(text, reply->n, false);
    reasoning(text, reply->n, true);
    cJSON_Delete(tools);
    return 0;
}

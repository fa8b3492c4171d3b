/*
 * toolcall: vLLM's hermes and qwen3_coder tool-call parsers. Whole replies against the calls and
 * arguments vLLM returns (expected values computed with Python's json.dumps and vLLM's parameter
 * conversion); the streamed form at every split point of every reply (and byte by byte) adds up
 * to the same content and calls; malformed calls degrade to content; the normalizer alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jnorm.h"
#include "json.h"
#include "toolcall.h"

static cJSON *tools_of(const char *text) {
    err_t err = {{0}};
    cJSON *j = json_parse(text, strlen(text), &err);
    if (!j) fail_msg("%s", err.msg);
    return j;
}

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": "
    "{\"type\": \"integer\"}, \"ratio\": {\"type\": \"number\"}, \"flag\": {\"type\": "
    "\"boolean\"}, \"tags\": {\"type\": \"array\"}, \"opts\": {\"type\": \"object\"}, \"any\": "
    "{\"type\": \"any\"}, \"big\": {\"type\": \"integer\"}, \"bad\": {\"type\": \"integer\"}}}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"search\"}}]";

typedef struct want_call {
    const char *name, *args;
} want_call_t;

typedef struct reply_case {
    tc_format_t fmt;
    const char *text;
    const char *content; /* NULL: none (the calls' content is null), with calls */
    int n_calls;         /* 0: all of text is content */
    want_call_t calls[3];
} reply_case_t;

static const reply_case_t CASES[] = {
    {TC_HERMES,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
     "</tool_call>",
     NULL,
     1,
     {{"get_weather", "{\"city\": \"Paris\", \"days\": 2}"}}},
    {TC_HERMES,
     "Let me look.\n\n<tool_call>\n{\"arguments\":{\"a\":1.0,\"b\":1e5,\"c\":12345678901234567890,"
     "\"d\":-0.0,\"e\":[1,2.50,true,null],\"f\":{\"x\":\"\\u00e9\\\"\\\\\\n\\t\\u0001\\/\"}},"
     "\"name\":\"search\"}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
     "{\"q\": \"emoji \\ud83d\\ude80 \xf0\x9f\x9a\x80\", \"n\": -12}}\n</tool_call>\nbye",
     "Let me look.\n\n",
     2,
     {{"search",
       "{\"a\": 1.0, \"b\": 100000.0, \"c\": 12345678901234567890, \"d\": -0.0, \"e\": [1, 2.5, "
       "true, null], \"f\": {\"x\": \"\xc3\xa9\\\"\\\\\\n\\t\\u0001/\"}}"},
      {"get_weather", "{\"q\": \"emoji \xf0\x9f\x9a\x80 \xf0\x9f\x9a\x80\", \"n\": -12}"}}},
    /* complete JSON without the closing tag (EOS right after): a call, as vLLM takes it */
    {TC_HERMES,
     "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}",
     NULL,
     1,
     {{"search", "{}"}}},
    /* malformed: the whole reply is content */
    {TC_HERMES,
     "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"unclosed",
     NULL,
     0,
     {{0}}},
    {TC_HERMES, "x<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>", NULL, 0, {{0}}},
    {TC_HERMES, "<tool_call>{\"name\": \"search\"}</tool_call>", NULL, 0, {{0}}},
    {TC_HERMES, "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>", NULL, 0, {{0}}},
    {TC_HERMES, "<tool_call>{'name': 'search', 'arguments': {}}</tool_call>", NULL, 0, {{0}}},
    {TC_HERMES,
     "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>"
     "<tool_call>{\"name\": \"search\", \"arguments\": {x}}</tool_call>",
     NULL,
     0,
     {{0}}},
    {TC_HERMES, "no call here, only <tool_ and text", NULL, 0, {{0}}},
    {TC_QWEN3_CODER,
     "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nZ\xc3\xbcrich "
     "\"old\"\n</parameter>\n<parameter=days>\n 3 \n</parameter>\n<parameter=ratio>\n2.0\n"
     "</parameter>\n<parameter=flag>\nTrue\n</parameter>\n<parameter=tags>\n[\"a\", 1]\n"
     "</parameter>\n<parameter=opts>\n{'k': 1}\n</parameter>\n<parameter=any>\nNone\n"
     "</parameter>\n<parameter=extra>\nfree text\n</parameter>\n<parameter=big>\n-0_07\n"
     "</parameter>\n<parameter=bad>\n1.5\n</parameter>\n</function>\n</tool_call>",
     "Let me check.\n",
     1,
     {{"get_weather",
       "{\"city\": \"Z\xc3\xbcrich \\\"old\\\"\", \"days\": 3, \"ratio\": 2, \"flag\": true, "
       "\"tags\": [\"a\", 1], \"opts\": {\"k\": 1}, \"any\": null, \"extra\": \"free text\", "
       "\"big\": -7, \"bad\": \"1.5\"}"}}},
    /* a value ended by the next parameter or by </function>; the call closed by </tool_call> */
    {TC_QWEN3_CODER,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n<parameter=ratio>\n0.25\n"
     "</function>\n</tool_call>\n<tool_call>\n<function=search>\n<parameter=q>\nnull\n"
     "</parameter>\n</tool_call>",
     NULL,
     2,
     {{"get_weather", "{\"city\": \"Oslo\", \"ratio\": 0.25}"}, {"search", "{\"q\": null}"}}},
    /* numbers past long long's range: integral doubles, written in full as Python's int(float(v))
     * (found by fuzz_toolcall: the range was checked after the conversion, undefined behaviour) */
    {TC_QWEN3_CODER,
     "<tool_call>\n<function=get_weather>\n<parameter=ratio>\n1e47\n</parameter>\n"
     "</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=ratio>\n"
     "-9.3e18\n</parameter>\n</function>\n</tool_call>",
     NULL,
     2,
     {{"get_weather", "{\"ratio\": 100000000000000004384584304507619735463404765184}"},
      {"get_weather", "{\"ratio\": -9300000000000000000}"}}},
    {TC_QWEN3_CODER, "<tool_call>\n<function=unknown>\n</function>\n</tool_call>", NULL, 0, {{0}}},
    {TC_QWEN3_CODER,
     "<tool_call>\n<function=search>\n<parameter=q>\ncut at max_tok",
     NULL,
     0,
     {{0}}},
};

static void check_whole(const reply_case_t *c, const cJSON *tools) {
    tc_result_t r;
    err_t err = {{0}};
    assert_int_equal(tc_extract(c->fmt, c->text, strlen(c->text), tools, &r, &err), 0);
    if (r.n_calls != c->n_calls) fail_msg("%s: %d calls, want %d", c->text, r.n_calls, c->n_calls);
    size_t want_content = c->content ? strlen(c->content) : 0;
    if (c->n_calls) {
        assert_int_equal(r.content_len, want_content);
        if (want_content) assert_memory_equal(c->text, c->content, want_content);
    }
    for (int i = 0; i < r.n_calls; i++) {
        assert_string_equal(r.calls[i].name, c->calls[i].name);
        assert_string_equal(r.calls[i].arguments, c->calls[i].args);
        assert_true(strlen(r.calls[i].id) > 8);
        if (i) assert_string_not_equal(r.calls[i].id, r.calls[i - 1].id);
    }
    tc_result_free(&r);
}

/* What a stream of events adds up to. */
typedef struct streamed {
    char content[4096];
    char names[4][64], args[4][1024];
    int n_calls;
} streamed_t;

static void add_events(streamed_t *s, const tc_event_t *evs, int n) {
    for (int i = 0; i < n; i++) {
        const tc_event_t *e = &evs[i];
        if (e->kind == TC_EV_CONTENT) {
            strncat(s->content, e->text, e->len);
        } else if (e->kind == TC_EV_BEGIN) {
            assert_int_equal(e->index, s->n_calls);
            assert_non_null(e->id);
            snprintf(s->names[s->n_calls++], 64, "%.*s", (int)e->len, e->text);
        } else {
            assert_true(e->index == s->n_calls - 1);
            strncat(s->args[e->index], e->text, e->len);
        }
    }
}

/* Feeds text in the given pieces; checks the sum against the whole-reply result. */
static void check_stream(const reply_case_t *c, const cJSON *tools, const size_t *cuts,
                         int n_cuts) {
    tc_parser_t *p;
    err_t err;
    assert_int_equal(tc_parser_create(c->fmt, tools, &p, &err), 0);
    streamed_t s;
    memset(&s, 0, sizeof s);
    const tc_event_t *evs;
    int n;
    size_t from = 0, len = strlen(c->text);
    for (int k = 0; k <= n_cuts; k++) {
        size_t to = k < n_cuts ? cuts[k] : len;
        assert_int_equal(tc_parser_feed(p, c->text + from, to - from, &evs, &n), 0);
        add_events(&s, evs, n);
        from = to;
    }
    assert_int_equal(tc_parser_finish(p, &evs, &n), 0);
    add_events(&s, evs, n);
    tc_parser_destroy(p);
    if (c->n_calls) {
        assert_int_equal(s.n_calls, c->n_calls);
        assert_string_equal(s.content, c->content ? c->content : "");
        for (int i = 0; i < c->n_calls; i++) {
            assert_string_equal(s.names[i], c->calls[i].name);
            assert_string_equal(s.args[i], c->calls[i].args);
        }
    } else if (s.n_calls == 0) {
        assert_string_equal(s.content, c->text); /* malformed before any header: all content */
    }
}

static void test_whole_replies(void **state) {
    cJSON *tools = tools_of(TOOLS);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        check_whole(&CASES[i], tools);
    cJSON_Delete(tools);
}

static void test_every_split_point(void **state) {
    cJSON *tools = tools_of(TOOLS);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const reply_case_t *c = &CASES[i];
        size_t len = strlen(c->text);
        check_stream(c, tools, NULL, 0);
        for (size_t k = 0; k <= len; k++) /* two pieces, cut anywhere */
            check_stream(c, tools, &k, 1);
        size_t *bytes = malloc(len * sizeof *bytes); /* one byte at a time */
        for (size_t k = 0; k < len; k++)
            bytes[k] = k;
        check_stream(c, tools, bytes, (int)len);
        free(bytes);
    }
    cJSON_Delete(tools);
}

/* Without tools any name is taken; the prefix the prompt forces is the start of a call. */
static void test_prefix_and_no_tools(void **state) {
    char prefix[128];
    assert_int_equal(tc_call_prefix(TC_HERMES, "get_weather", prefix, sizeof prefix), 0);
    assert_string_equal(prefix, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ");
    char text[256];
    snprintf(text, sizeof text, "%s{\"city\": \"Rome\"}}\n</tool_call>", prefix);
    tc_result_t r;
    err_t err;
    assert_int_equal(tc_extract(TC_HERMES, text, strlen(text), NULL, &r, &err), 0);
    assert_int_equal(r.n_calls, 1);
    assert_string_equal(r.calls[0].arguments, "{\"city\": \"Rome\"}");
    tc_result_free(&r);
    assert_int_equal(tc_call_prefix(TC_QWEN3_CODER, NULL, prefix, sizeof prefix), 0);
    assert_string_equal(prefix, "<tool_call>\n<function=");
    snprintf(text, sizeof text, "%sanything>\n<parameter=x>\n5\n</parameter>\n</function>", prefix);
    assert_int_equal(tc_extract(TC_QWEN3_CODER, text, strlen(text), NULL, &r, &err), 0);
    assert_int_equal(r.n_calls, 1);
    assert_string_equal(r.calls[0].name, "anything");
    assert_string_equal(r.calls[0].arguments, "{\"x\": \"5\"}"); /* no schema: a string */
    assert_true(!strncmp(r.calls[0].id, "call_", 5));
    tc_result_free(&r);
    assert_int_equal(tc_call_prefix(TC_HERMES, "x", prefix, 8), -1);
    /* a name holding a NUL byte is no call (found by fuzz_toolcall: the whole reply's name was
     * cut at the NUL, the streamed one was not) */
    static const char nul_name[] = "<tool_call>\n<function=f\0x>\n</function>\n</tool_call>";
    assert_int_equal(tc_extract(TC_QWEN3_CODER, nul_name, sizeof nul_name - 1, NULL, &r, &err), 0);
    assert_int_equal(r.n_calls, 0);
    tc_result_free(&r);
}

/* The normalizer alone: Python's json.dumps(json.loads(x), ensure_ascii=False). */
static void test_normalizer(void **state) {
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"{\"a\":[1,2,{\"b\":null}],\"c\":\"\\u0041\\n\"}",
         "{\"a\": [1, 2, {\"b\": null}], \"c\": \"A\\n\"}"},
        {" [ ] ", "[]"},
        {"{}", "{}"},
        {"1E+2", "100.0"},
        {"-0", "0"},
        {"0.1", "0.1"},
        {"\"\\ud83d\\ude80\"", "\"\xf0\x9f\x9a\x80\""},
        {"true", "true"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jnorm_t j;
        jnorm_init(&j);
        jbuf_t out;
        jb_init(&out);
        j.out = &out;
        for (const char *c = cases[i].in; *c; c++)
            jnorm_push(&j, *c);
        assert_int_equal(jnorm_end(&j), JN_DONE);
        assert_string_equal(out.p, cases[i].out);
        jb_free(&out);
        jnorm_free(&j);
    }
    static const char *const bad[] = {"[1,]",        "{\"a\" 1}", "01",         "\"\\x\"",
                                      "\"\\udc00\"", "tru",       "{\"a\":1}}", "\"a\nb\"",
                                      "[1 2]",       "1.",        "-"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        jnorm_t j;
        jnorm_init(&j);
        for (const char *c = bad[i]; *c; c++)
            jnorm_push(&j, *c);
        if (jnorm_end(&j) != JN_ERROR) fail_msg("accepted %s", bad[i]);
        jnorm_free(&j);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_replies),
        cmocka_unit_test(test_every_split_point),
        cmocka_unit_test(test_prefix_and_no_tools),
        cmocka_unit_test(test_normalizer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

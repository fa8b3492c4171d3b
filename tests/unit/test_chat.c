/* Chat formats: every golden render of tests/fixtures/chat (transformers' apply_chat_template
 * renderer, scripts/make_chat_golden.py) is reproduced byte for byte, template errors included;
 * formats are detected from template text; the reasoning splitter follows vLLM's qwen3 parser,
 * and the streaming form gives the whole-text result for every way of cutting the text. */
#include <cjson/cJSON.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chat.h"
#include "frontend.h"
#include "json.h"
#include "testutil.h"

// ---------------------------------------------------------------------------------------------
// Golden renders

static void show_diff(const char *name, const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "  %s: differs at byte %zu\n    want: \"%.80s\"\n    got:  \"%.80s\"\n", name,
            i, want + from, got + from);
}

/* Renders one golden line; returns true when the C side agrees with it. */
static bool check_line(chat_format_t fmt, const char *text, size_t len, int lineno) {
    err_t err = {{0}};
    cJSON *j = json_parse(text, len, &err);
    if (!j) fail_msg("line %d: %s", lineno, err.msg);
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(j, "name"));
    const cJSON *think = cJSON_GetObjectItem(j, "enable_thinking");
    chat_opts_t opts = {
        .add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItem(j, "add_generation_prompt")),
        .continue_final_message = cJSON_IsTrue(cJSON_GetObjectItem(j, "continue_final_message")),
        .enable_thinking = cJSON_IsNull(think)   ? CHAT_THINK_DEFAULT
                           : cJSON_IsTrue(think) ? CHAT_THINK_ON
                                                 : CHAT_THINK_OFF,
    };
    unsigned flags = cJSON_GetObjectItem(j, "json_flags") ? FE_JSON_VLLM : 0;
    const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(j, "rendered"));
    size_t want_len = json_strlen(cJSON_GetObjectItem(j, "rendered"));
    const char *want_err = cJSON_GetStringValue(cJSON_GetObjectItem(j, "error"));
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(j, "error_kind"));
    fe_conv_t *conv = NULL;
    char *got = NULL;
    size_t got_len = 0;
    int rc = fe_conv_from_json(cJSON_GetObjectItem(j, "messages"), cJSON_GetObjectItem(j, "tools"),
                               flags, &conv, &err);
    if (rc == 0)
        rc = chat_render(fmt, conv->msgs, conv->n_msgs, conv->tools, &opts, &got, &got_len, &err);
    bool ok;
    if (want) {
        ok = rc == 0 && got_len == want_len && memcmp(got, want, got_len) == 0;
        if (rc < 0)
            fprintf(stderr, "  line %d %s: failed: %s\n", lineno, name, err.msg);
        else if (!ok)
            show_diff(name, want, got);
    } else {
        /* Messages of raise_exception() must match; Python's own errors only need to fail. */
        ok = rc < 0 && (strcmp(kind, "raise") != 0 || strstr(err.msg, want_err));
        if (!ok)
            fprintf(stderr, "  line %d %s: want error \"%s\", got %s\n", lineno, name, want_err,
                    rc < 0 ? err.msg : "success");
    }
    free(got);
    fe_conv_free(conv);
    cJSON_Delete(j);
    return ok;
}

static void golden(const char *file, chat_format_t fmt) {
    char path[512];
    snprintf(path, sizeof path, "chat/%s", file);
    char *text = tu_read(tu_fixture(path), NULL);
    if (!text) fail_msg("missing fixture %s (scripts/make_chat_golden.py)", path);
    int lines = 0, bad = 0, errors = 0;
    for (char *p = text, *nl; *p; p = nl + 1) {
        nl = strchr(p, '\n');
        if (!nl) nl = p + strlen(p);
        lines++;
        if (strstr(p, "\"error_kind\"") && strstr(p, "\"error_kind\"") < nl) errors++;
        if (!check_line(fmt, p, (size_t)(nl - p), lines)) bad++;
        if (!*nl) break;
    }
    free(text);
    if (bad) fail_msg("%s: %d of %d golden renders differ", file, bad, lines);
    assert_true(lines >= 60);
    assert_true(errors > 0 && errors < lines / 2);
}

static void test_golden_qwen3(void **state) {
    golden("golden-qwen3.jsonl", CHAT_QWEN3);
}

static void test_golden_qwen3_instruct_2507(void **state) {
    golden("golden-qwen3-instruct-2507.jsonl", CHAT_QWEN3_INSTRUCT_2507);
}

static void test_golden_qwen3_thinking_2507(void **state) {
    golden("golden-qwen3-thinking-2507.jsonl", CHAT_QWEN3_THINKING_2507);
}

static void test_golden_qwen3_5(void **state) {
    golden("golden-qwen3.5.jsonl", CHAT_QWEN3_5);
}

// ---------------------------------------------------------------------------------------------
// Rendering from chat_msg_t directly

static char *render(chat_format_t fmt, const chat_msg_t *m, size_t n, chat_think_t think) {
    err_t err = {{0}};
    chat_opts_t opts = {.add_generation_prompt = true, .enable_thinking = think};
    char *out = NULL;
    size_t len = 0;
    if (chat_render(fmt, m, n, NULL, &opts, &out, &len, &err) < 0) fail_msg("%s", err.msg);
    assert_int_equal(len, strlen(out));
    return out;
}

static void test_render_structs(void **state) {
    const chat_msg_t msgs[] = {
        {.role = CHAT_SYSTEM, .content_kind = CHAT_CONTENT_TEXT, .content = "S"},
        {.role = CHAT_USER, .content_kind = CHAT_CONTENT_TEXT, .content = "Hi"},
    };
    char *out = render(CHAT_QWEN3, msgs, 2, CHAT_THINK_OFF);
    assert_string_equal(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                             "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(out);
    /* The 0.8B/2B Qwen3.5 template thinks only when asked to. */
    out = render(CHAT_QWEN3_5_THINK_OFF, msgs + 1, 1, CHAT_THINK_DEFAULT);
    assert_string_equal(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                             "</think>\n\n");
    free(out);
    out = render(CHAT_QWEN3_5_THINK_OFF, msgs + 1, 1, CHAT_THINK_ON);
    assert_string_equal(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
    free(out);
    out = render(CHAT_QWEN3_5, msgs + 1, 1, CHAT_THINK_DEFAULT);
    assert_string_equal(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
    free(out);

    const char *texts[] = {"a", "b"};
    const chat_tool_call_t call = {.name = "f", .arguments_text = "{\"x\": 1}"};
    const chat_msg_t agent[] = {
        {.role = CHAT_USER, .content_kind = CHAT_CONTENT_PARTS, .parts = texts, .n_parts = 2},
        {.role = CHAT_ASSISTANT, .reasoning = "r", .tool_calls = &call, .n_tool_calls = 1},
    };
    /* Parts are not a string to Qwen3: the user turn renders empty and is no query, so the
     * assistant turn after it keeps no think block. */
    out = render(CHAT_QWEN3_INSTRUCT_2507, agent, 2, CHAT_THINK_DEFAULT);
    assert_string_equal(out,
                        "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
                        "{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call><|im_end|>\n"
                        "<|im_start|>assistant\n");
    free(out);

    err_t err = {{0}};
    char *none = NULL;
    assert_int_equal(chat_render(CHAT_QWEN3_5, agent, 2, NULL, NULL, &none, NULL, &err), -1);
    assert_null(none);
    assert_non_null(strstr(err.msg, "mapping"));
}

static void test_conv_errors(void **state) {
    static const struct {
        const char *json, *phrase;
    } cases[] = {
        {"{\"role\": \"user\"}", "\"messages\" must be an array"},
        {"[{\"content\": \"x\"}]", "message 0 has no \"role\""},
        {"[{\"role\": \"user\", \"content\": 5}]", "content must be a string"},
        {"[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]", "image_url"},
        {"[{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]", "no \"text\""},
        {"[{\"role\": \"user\"}, {\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
         "{\"arguments\": \"{}\"}}]}]",
         "message 1: a tool call has no function name"},
        {"[{\"role\": \"assistant\", \"tool_calls\": {}}]", "must be an array"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err_t err = {{0}};
        cJSON *j = json_parse(cases[i].json, strlen(cases[i].json), &err);
        assert_non_null(j);
        fe_conv_t *conv = NULL;
        assert_int_equal(fe_conv_from_json(j, NULL, 0, &conv, &err), -1);
        assert_null(conv);
        if (!strstr(err.msg, cases[i].phrase))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err.msg, cases[i].phrase);
        cJSON_Delete(j);
    }
    /* vLLM mode parses string arguments, and reports ones that are not JSON. */
    const char *bad = "[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": "
                      "\"f\", \"arguments\": \"{oops\"}}]}]";
    err_t err = {{0}};
    cJSON *j = json_parse(bad, strlen(bad), &err);
    fe_conv_t *conv = NULL;
    assert_int_equal(fe_conv_from_json(j, NULL, 0, &conv, &err), 0);
    assert_string_equal(conv->msgs[0].tool_calls[0].arguments_text, "{oops");
    fe_conv_free(conv);
    assert_int_equal(fe_conv_from_json(j, NULL, FE_JSON_VLLM, &conv, &err), -1);
    assert_non_null(strstr(err.msg, "arguments of tool call \"f\""));
    cJSON_Delete(j);
}

static void test_json_parse(void **state) {
    err_t err = {{0}};
    const char *text = "{\"a\": [1.0, -0, 2e3, \"7\"], \"b\": 12345678901234567890}";
    cJSON *j = json_parse(text, strlen(text), &err);
    assert_non_null(j);
    const cJSON *a = cJSON_GetObjectItem(j, "a");
    assert_string_equal(cJSON_GetArrayItem(a, 0)->valuestring, "1.0");
    assert_string_equal(cJSON_GetArrayItem(a, 1)->valuestring, "-0");
    assert_string_equal(cJSON_GetArrayItem(a, 2)->valuestring, "2e3");
    assert_string_equal(cJSON_GetArrayItem(a, 3)->valuestring, "7");
    assert_string_equal(cJSON_GetObjectItem(j, "b")->valuestring, "12345678901234567890");
    assert_true(cJSON_GetArrayItem(a, 2)->valuedouble == 2000.0);
    cJSON_Delete(j);
    assert_null(json_parse("{\"a\": }", 7, &err));
    assert_non_null(strstr(err.msg, "invalid JSON"));
    assert_null(json_parse("{} x", 4, &err));
    assert_non_null(strstr(err.msg, "unexpected data"));
}

// ---------------------------------------------------------------------------------------------
// Detection

static void test_detect_templates(void **state) {
    static const struct {
        const char *file;
        chat_format_t fmt;
    } cases[] = {
        {"chat/qwen3.jinja", CHAT_QWEN3},
        {"chat/qwen3-instruct-2507.jinja", CHAT_QWEN3_INSTRUCT_2507},
        {"chat/qwen3-thinking-2507.jinja", CHAT_QWEN3_THINKING_2507},
        {"chat/qwen3.5.jinja", CHAT_QWEN3_5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = tu_read(tu_fixture(cases[i].file), NULL);
        assert_non_null(text);
        err_t err = {{0}};
        chat_format_t fmt = (chat_format_t)-1;
        assert_int_equal(chat_detect(text, cases[i].file, &fmt, &err), 0);
        assert_int_equal(fmt, cases[i].fmt);
        free(text);
    }
    err_t err = {{0}};
    chat_format_t fmt;
    const char *qwen25 = "{%- for message in messages %}{{'<|im_start|>' + message['role'] + "
                         "'\\n' + message['content'] + '<|im_end|>' + '\\n'}}{%- endfor %}";
    assert_int_equal(chat_detect(qwen25, "x/tokenizer_config.json", &fmt, &err), -1);
    assert_non_null(strstr(err.msg, "x/tokenizer_config.json: unknown chat template"));
    const char *small = "<|im_start|> last_query_index <function= <parameter= "
                        "{%- if enable_thinking is defined and enable_thinking is true %}";
    assert_int_equal(chat_detect(small, "t", &fmt, &err), 0);
    assert_int_equal(fmt, CHAT_QWEN3_5_THINK_OFF);
    assert_string_equal(chat_format_name(CHAT_QWEN3_5), "qwen3.5");
}

static void write_tokenizer_config(const char *dir, const cJSON *chat_template) {
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "eos_token", "<|im_end|>");
    if (chat_template)
        cJSON_AddItemToObject(cfg, "chat_template", cJSON_Duplicate(chat_template, 1));
    char *text = cJSON_Print(cfg);
    tu_write_text(dir, "tokenizer_config.json", text);
    free(text);
    cJSON_Delete(cfg);
}

static int detect_in(const char *dir, chat_format_t *fmt, err_t *err) {
    mdir_t *md;
    if (mdir_open(dir, &md, err) < 0) return -1;
    int rc = chat_detect_dir(md, fmt, err);
    mdir_close(md);
    return rc;
}

static void test_detect_dir(void **state) {
    char *qwen3 = tu_read(tu_fixture("chat/qwen3.jinja"), NULL);
    char *qwen35 = tu_read(tu_fixture("chat/qwen3.5.jinja"), NULL);
    char *dir = tu_tmpdir();
    err_t err = {{0}};
    chat_format_t fmt;

    assert_int_equal(detect_in(dir, &fmt, &err), -1);
    assert_non_null(strstr(err.msg, "tokenizer_config.json: missing"));

    cJSON *s = cJSON_CreateString(qwen3);
    write_tokenizer_config(dir, s);
    assert_int_equal(detect_in(dir, &fmt, &err), 0);
    assert_int_equal(fmt, CHAT_QWEN3);

    /* A list of named templates: "default" is the one rendered. */
    cJSON *list = cJSON_CreateArray();
    cJSON *tool_use = cJSON_CreateObject(), *def = cJSON_CreateObject();
    cJSON_AddStringToObject(tool_use, "name", "tool_use");
    cJSON_AddStringToObject(tool_use, "template", qwen3);
    cJSON_AddStringToObject(def, "name", "default");
    cJSON_AddStringToObject(def, "template", qwen35);
    cJSON_AddItemToArray(list, tool_use);
    cJSON_AddItemToArray(list, def);
    write_tokenizer_config(dir, list);
    assert_int_equal(detect_in(dir, &fmt, &err), 0);
    assert_int_equal(fmt, CHAT_QWEN3_5);

    /* chat_template.jinja wins over tokenizer_config.json, as in transformers. */
    tu_write_text(dir, "chat_template.jinja", qwen3);
    assert_int_equal(detect_in(dir, &fmt, &err), 0);
    assert_int_equal(fmt, CHAT_QWEN3);
    tu_write_text(dir, "chat_template.jinja", "{{ messages }}");
    assert_int_equal(detect_in(dir, &fmt, &err), -1);
    assert_non_null(strstr(err.msg, "chat_template.jinja: unknown chat template"));

    char *dir2 = tu_tmpdir();
    write_tokenizer_config(dir2, NULL);
    assert_int_equal(detect_in(dir2, &fmt, &err), -1);
    assert_non_null(strstr(err.msg, "tokenizer_config.json: no \"chat_template\""));
    tu_write_text(dir2, "tokenizer_config.json", "{\"chat_template\": ");
    assert_int_equal(detect_in(dir2, &fmt, &err), -1);
    assert_non_null(strstr(err.msg, "tokenizer_config.json: invalid JSON"));

    cJSON_Delete(s);
    cJSON_Delete(list);
    tu_rmrf(dir);
    tu_rmrf(dir2);
    free(dir);
    free(dir2);
    free(qwen3);
    free(qwen35);
}

/* The tiny fixture model ships the Qwen3 template. */
static void test_detect_fixture_model(void **state) {
    err_t err = {{0}};
    chat_format_t fmt;
    if (detect_in(tu_fixture("tiny-qwen3"), &fmt, &err) < 0) fail_msg("%s", err.msg);
    assert_int_equal(fmt, CHAT_QWEN3);
}

static void test_prompt_ends_reasoning(void **state) {
    chat_opts_t on = {.enable_thinking = CHAT_THINK_ON}, off = {.enable_thinking = CHAT_THINK_OFF},
                def = {0};
    assert_false(chat_prompt_ends_reasoning(CHAT_QWEN3, &def));
    assert_true(chat_prompt_ends_reasoning(CHAT_QWEN3, &off));
    assert_false(chat_prompt_ends_reasoning(CHAT_QWEN3_5, &def));
    assert_true(chat_prompt_ends_reasoning(CHAT_QWEN3_5, &off));
    assert_true(chat_prompt_ends_reasoning(CHAT_QWEN3_INSTRUCT_2507, &on));
    assert_false(chat_prompt_ends_reasoning(CHAT_QWEN3_THINKING_2507, &off));
    assert_true(chat_prompt_ends_reasoning(CHAT_QWEN3_5_THINK_OFF, &def));
    assert_false(chat_prompt_ends_reasoning(CHAT_QWEN3_5_THINK_OFF, &on));
}

// ---------------------------------------------------------------------------------------------
// Reasoning split

#define NONE ((const char *)0)

typedef struct split_case {
    const char *text;
    bool disabled;
    const char *reasoning, *content; /* NONE: vLLM returns None */
} split_case_t;

static const split_case_t SPLITS[] = {
    {"<think>\nplan\n</think>\n\nHello", false, "\nplan\n", "\n\nHello"},
    {"\nplan\n</think>\n\nHello", false, "\nplan\n", "\n\nHello"},
    {"plan</think>", false, "plan", NONE},
    {"</think>answer", false, "", "answer"},
    {"<think>truncated reasoning", false, "truncated reasoning", NONE},
    {"", false, "", NONE},
    {"just content", true, NONE, "just content"},
    {"", true, NONE, ""},
    {"<think>r</think>c", true, "r", "c"},
    {"pre<think>r</think>c", false, "r", "c"},
    {"a</think>b</think>c", false, "a", "b</think>c"},
    {"r <tool_call>\n<function=get>\n</function>\n</tool_call>", false, "r ",
     "<tool_call>\n<function=get>\n</function>\n</tool_call>"},
    {"<tool_call>\u3000<function get", false, NONE, "<tool_call>\u3000<function get"},
    {"r <tool_call> mentioned, no call", false, "r <tool_call> mentioned, no call", NONE},
    {"r <tool_call>\n<functional>", false, "r <tool_call>\n<functional>", NONE},
    {"r <tool_call>\n<function", false, "r <tool_call>\n<function", NONE},
    {"r <tool_call>x <tool_call>\n<function=f>", false, "r <tool_call>x <tool_call>\n<function=f>",
     NONE},
    {"r <tool_call>\n<function=f>", true, NONE, "r <tool_call>\n<function=f>"},
    {"thought 思考 </think>\n\n答案 🚀", false, "thought 思考 ", "\n\n答案 🚀"},
    {"r</thin k>still reasoning", false, "r</thin k>still reasoning", NONE},
};

static void expect_piece(const char *what, const char *text, const char *want, const char *got,
                         size_t got_len) {
    if (want == NONE) {
        if (got) fail_msg("\"%s\": %s should be None, got \"%.*s\"", text, what, (int)got_len, got);
        return;
    }
    if (!got) fail_msg("\"%s\": %s is None, want \"%s\"", text, what, want);
    if (got_len != strlen(want) || memcmp(got, want, got_len) != 0)
        fail_msg("\"%s\": %s is \"%.*s\", want \"%s\"", text, what, (int)got_len, got, want);
}

static void test_split_whole(void **state) {
    for (size_t i = 0; i < sizeof SPLITS / sizeof SPLITS[0]; i++) {
        const split_case_t *c = &SPLITS[i];
        chat_split_t s;
        chat_reasoning_split(c->text, strlen(c->text), c->disabled, &s);
        expect_piece("reasoning", c->text, c->reasoning, s.reasoning, s.reasoning_len);
        expect_piece("content", c->text, c->content, s.content, s.content_len);
    }
}

typedef struct acc {
    char r[512], c[512];
    size_t rn, cn;
} acc_t;

static void take(acc_t *a, const chat_split_t *s) {
    assert_true(!s->reasoning || s->reasoning_len > 0);
    assert_true(!s->content || s->content_len > 0);
    assert_true(a->rn + s->reasoning_len < sizeof a->r && a->cn + s->content_len < sizeof a->c);
    if (s->reasoning) memcpy(a->r + a->rn, s->reasoning, s->reasoning_len);
    a->rn += s->reasoning_len;
    if (s->content) memcpy(a->c + a->cn, s->content, s->content_len);
    a->cn += s->content_len;
    /* Once content started, no reasoning follows. */
    if (s->reasoning && a->cn > s->content_len) fail_msg("reasoning after content");
}

/* Streams `text` cut at the given positions, and returns the concatenated pieces. */
static acc_t stream(const char *text, bool ends, const size_t *cuts, int n_cuts) {
    acc_t a = {0};
    err_t err = {{0}};
    chat_reasoning_t *rs;
    assert_int_equal(chat_reasoning_create(ends, &rs, &err), 0);
    size_t prev = 0, len = strlen(text);
    for (int k = 0; k <= n_cuts; k++) {
        size_t to = k < n_cuts ? cuts[k] : len;
        chat_split_t s;
        assert_int_equal(chat_reasoning_feed(rs, text + prev, to - prev, &s, &err), 0);
        take(&a, &s);
        prev = to;
    }
    chat_split_t s;
    chat_reasoning_finish(rs, &s);
    take(&a, &s);
    chat_reasoning_destroy(rs);
    return a;
}

static void expect_stream(const split_case_t *c, const size_t *cuts, int n_cuts) {
    acc_t a = stream(c->text, c->disabled, cuts, n_cuts);
    const char *wr = c->reasoning ? c->reasoning : "", *wc = c->content ? c->content : "";
    if (a.rn != strlen(wr) || memcmp(a.r, wr, a.rn) != 0 || a.cn != strlen(wc) ||
        memcmp(a.c, wc, a.cn) != 0)
        fail_msg("\"%s\" cut at %zu,%zu: got (\"%.*s\", \"%.*s\"), want (\"%s\", \"%s\")", c->text,
                 n_cuts > 0 ? cuts[0] : 0, n_cuts > 1 ? cuts[1] : 0, (int)a.rn, a.r, (int)a.cn, a.c,
                 wr, wc);
}

/* Deltas are decoded text: they never cut a UTF-8 sequence. */
static bool boundary(const char *text, size_t i) {
    return ((unsigned char)text[i] & 0xc0) != 0x80;
}

/* The streaming form agrees with the whole-text form for every cut into 2 and 3 deltas
 * (cases where vLLM's own streaming and non-streaming parsers agree: thinking enabled, <think>
 * only at the start). */
static void test_split_streaming_all_cuts(void **state) {
    int checked = 0;
    for (size_t i = 0; i < sizeof SPLITS / sizeof SPLITS[0]; i++) {
        const split_case_t *c = &SPLITS[i];
        if (c->disabled || strncmp(c->text, "pre<think>", 10) == 0) continue;
        size_t len = strlen(c->text);
        expect_stream(c, NULL, 0);
        for (size_t a = 0; a <= len; a++) {
            if (!boundary(c->text, a)) continue;
            expect_stream(c, &a, 1);
            for (size_t b = a; b <= len; b++) {
                if (!boundary(c->text, b)) continue;
                size_t cuts[2] = {a, b};
                expect_stream(c, cuts, 2);
                checked++;
            }
        }
    }
    assert_true(checked > 5000);
}

static void test_split_streaming_holds_partial_tags(void **state) {
    err_t err = {{0}};
    chat_reasoning_t *rs;
    chat_split_t s;
    assert_int_equal(chat_reasoning_create(false, &rs, &err), 0);
    /* "</thi" could be the start of </think>: held back, nothing returned. */
    assert_int_equal(chat_reasoning_feed(rs, "abc</thi", 8, &s, &err), 0);
    expect_piece("reasoning", "abc</thi", "abc", s.reasoning, s.reasoning_len);
    assert_null(s.content);
    assert_int_equal(chat_reasoning_feed(rs, "nk>\n\nHello", 10, &s, &err), 0);
    assert_null(s.reasoning);
    expect_piece("content", "nk>", "\n\nHello", s.content, s.content_len);
    /* After </think> everything, tags included, is content as it comes. */
    assert_int_equal(chat_reasoning_feed(rs, "<think></thi", 12, &s, &err), 0);
    expect_piece("content", "<think>", "<think></thi", s.content, s.content_len);
    chat_reasoning_finish(rs, &s);
    assert_null(s.reasoning);
    assert_null(s.content);
    chat_reasoning_destroy(rs);

    /* The <think> opened by the model is dropped even when split; a partial tag that never
     * completes is reasoning text at the end. */
    assert_int_equal(chat_reasoning_create(false, &rs, &err), 0);
    assert_int_equal(chat_reasoning_feed(rs, "<thi", 4, &s, &err), 0);
    assert_null(s.reasoning);
    assert_int_equal(chat_reasoning_feed(rs, "nk>\nx</", 7, &s, &err), 0);
    expect_piece("reasoning", "nk>", "\nx", s.reasoning, s.reasoning_len);
    chat_reasoning_finish(rs, &s);
    expect_piece("reasoning", "</", "</", s.reasoning, s.reasoning_len);
    chat_reasoning_destroy(rs);

    /* A tool call inside the think block waits for <function to decide. */
    assert_int_equal(chat_reasoning_create(false, &rs, &err), 0);
    assert_int_equal(chat_reasoning_feed(rs, "I will call <tool_call>\n", 24, &s, &err), 0);
    expect_piece("reasoning", "call", "I will call ", s.reasoning, s.reasoning_len);
    assert_null(s.content);
    assert_int_equal(chat_reasoning_feed(rs, "<func", 5, &s, &err), 0);
    assert_null(s.reasoning);
    assert_null(s.content);
    assert_int_equal(chat_reasoning_feed(rs, "tion=f>", 7, &s, &err), 0);
    assert_null(s.reasoning);
    expect_piece("content", "tc", "<tool_call>\n<function=f>", s.content, s.content_len);
    chat_reasoning_destroy(rs);
}

static void test_split_streaming_prompt_ended(void **state) {
    err_t err = {{0}};
    chat_reasoning_t *rs;
    chat_split_t s;
    assert_int_equal(chat_reasoning_create(true, &rs, &err), 0);
    const char *deltas[] = {"Hello", " </thi", "nk> <think>", ""};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(chat_reasoning_feed(rs, deltas[i], strlen(deltas[i]), &s, &err), 0);
        assert_null(s.reasoning);
        if (*deltas[i])
            expect_piece("content", deltas[i], deltas[i], s.content, s.content_len);
        else
            assert_null(s.content);
    }
    chat_reasoning_finish(rs, &s);
    assert_null(s.reasoning);
    assert_null(s.content);
    chat_reasoning_destroy(rs);
    chat_reasoning_destroy(NULL);
    fe_conv_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_qwen3),
        cmocka_unit_test(test_golden_qwen3_instruct_2507),
        cmocka_unit_test(test_golden_qwen3_thinking_2507),
        cmocka_unit_test(test_golden_qwen3_5),
        cmocka_unit_test(test_render_structs),
        cmocka_unit_test(test_conv_errors),
        cmocka_unit_test(test_json_parse),
        cmocka_unit_test(test_detect_templates),
        cmocka_unit_test(test_detect_dir),
        cmocka_unit_test(test_detect_fixture_model),
        cmocka_unit_test(test_prompt_ends_reasoning),
        cmocka_unit_test(test_split_whole),
        cmocka_unit_test(test_split_streaming_all_cuts),
        cmocka_unit_test(test_split_streaming_holds_partial_tags),
        cmocka_unit_test(test_split_streaming_prompt_ended),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

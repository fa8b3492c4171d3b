/*
 * frontend: the front door on the embedded model (cpu backend, its tokenizer and Qwen3 chat
 * template). A chat prompt is the template's render encoded; a text prompt keeps U+0000; the
 * reply's incremental reasoning split, summed over a reply's deltas, equals the split of the
 * whole text (vLLM's streaming and whole parsers agree), per choice for n > 1, and a reply that
 * never reaches content counts every token as reasoning; a thinking-off prompt gives content
 * only; reasoning_tokens counts as vLLM does (scripted replies: the tags excluded, 0 with
 * thinking off); a cancel
 * still ends every choice; errors say what the request or the model lacks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_testutil.h"
#include "frontend.h"
#include "json.h"
#include "testutil.h"

static engine_t *open_embedded(void) {
    static const char *const flags[] = {"max-model-len", "512", "kv-cache-memory", "16MiB", NULL};
    return tu_open_engine(MDIR_EMBEDDED, "cpu", flags);
}

static void test_prompts(void **state) {
    engine_t *e = open_embedded();
    err_t err = {{0}};
    chat_msg_t msgs[] = {
        {.role = CHAT_SYSTEM, .content_kind = CHAT_CONTENT_TEXT, .content = "Be brief."},
        {.role = CHAT_USER, .content_kind = CHAT_CONTENT_TEXT, .content = "What is a list?"},
    };
    chat_opts_t opts = {.add_generation_prompt = true};
    fe_prompt_t p;
    assert_int_equal(fe_prompt_chat(e, msgs, 2, NULL, &opts, NULL, &p, &err), 0);
    char *text;
    size_t len;
    assert_int_equal(
        chat_render((chat_format_t)engine_chat_format(e), msgs, 2, NULL, &opts, &text, &len, &err),
        0);
    fe_prompt_t q;
    assert_int_equal(fe_prompt_text(e, text, len, &q, &err), 0);
    assert_int_equal(p.n_ids, q.n_ids);
    assert_memory_equal(p.ids, q.ids, (size_t)p.n_ids * sizeof(int32_t));
    assert_false(p.ends_reasoning);
    free(text);
    fe_prompt_free(&p);
    fe_prompt_free(&q);
    /* thinking off: the prompt closes the think block */
    opts.enable_thinking = CHAT_THINK_OFF;
    assert_int_equal(fe_prompt_chat(e, msgs, 2, NULL, &opts, NULL, &p, &err), 0);
    assert_true(p.ends_reasoning);
    fe_prompt_free(&p);
    /* U+0000 is text */
    assert_int_equal(fe_prompt_text(e, "a\0b c", 5, &p, &err), 0);
    assert_int_equal(fe_prompt_text(e, "a", 1, &q, &err), 0);
    assert_true(p.n_ids > q.n_ids);
    fe_prompt_free(&p);
    fe_prompt_free(&q);
    /* what the template refuses is the request's fault, with the template's words */
    opts.continue_final_message = true;
    opts.add_generation_prompt = false;
    chat_msg_t none = {.role = CHAT_ASSISTANT, .content_kind = CHAT_CONTENT_NONE};
    assert_int_equal(fe_prompt_chat(e, &none, 1, NULL, &opts, NULL, &p, &err), FE_E_INPUT);
    assert_non_null(strstr(err.msg, "continue_final_message"));
    assert_null(p.ids);
    engine_close(e);
}

/* What a reply's deltas add up to, per choice. */
typedef struct sums {
    char text[4][4096], reasoning[4][4096], content[4][4096];
    bool saw_reasoning[4], saw_content[4];
    int reasoning_tokens[4], tokens[4], finished[4];
} sums_t;

static void add(char *dst, const char *src, size_t n) {
    size_t l = strlen(dst);
    assert_true(l + n < 4096);
    memcpy(dst + l, src, n);
    dst[l + n] = '\0';
}

static int read_reply(fe_reply_t *r, sums_t *s) {
    memset(s, 0, sizeof *s);
    fe_delta_t d;
    int rc;
    while ((rc = fe_reply_wait(r, &d, 20000)) > 0) {
        int c = d.choice;
        assert_true(c >= 0 && c < 4);
        assert_int_equal(s->finished[c], 0);
        add(s->text[c], d.text, d.text_len);
        if (d.reasoning) {
            s->saw_reasoning[c] = true;
            add(s->reasoning[c], d.reasoning, d.reasoning_len);
        }
        if (d.content) {
            s->saw_content[c] = true;
            add(s->content[c], d.content, d.content_len);
        }
        s->reasoning_tokens[c] = d.reasoning_tokens;
        s->tokens[c] += d.ev->n_tokens;
        s->finished[c] += d.finished;
    }
    return rc;
}

/* Submits a request with the split and reads its reply whole into s. */
static void run_split(engine_t *e, const engine_request_t *req, bool ends_reasoning, sums_t *s) {
    err_t err = {{0}};
    fe_reply_opts_t ro = {.split_reasoning = true, .prompt_ends_reasoning = ends_reasoning};
    fe_reply_t *r;
    assert_int_equal(fe_reply_submit(e, req, &ro, &r, &err), 0);
    assert_int_equal(read_reply(r, s), -1);
    fe_reply_release(r);
}

static void test_reply_split(void **state) {
    engine_t *e = open_embedded();
    err_t err = {{0}};
    chat_msg_t msg = {.role = CHAT_USER, .content_kind = CHAT_CONTENT_TEXT, .content = "Hi"};
    chat_opts_t opts = {.add_generation_prompt = true};
    fe_prompt_t p;
    assert_int_equal(fe_prompt_chat(e, &msg, 1, NULL, &opts, NULL, &p, &err), 0);
    /* the split of each choice is checked against the whole-text split of what it wrote,
     * whatever the babbling tiny model writes (seeded sampling: three different answers) */
    engine_request_t req = {.prompt = p.ids, .n_prompt = p.n_ids};
    sampling_params_init(&req.sampling);
    req.sampling.n = 3;
    req.sampling.temperature = 1.0f;
    req.sampling.has_seed = true;
    req.sampling.seed = 7;
    req.sampling.max_tokens = 24;
    sums_t s;
    run_split(e, &req, p.ends_reasoning, &s);
    for (int c = 0; c < 3; c++) {
        assert_int_equal(s.finished[c], 1);
        chat_split_t whole;
        chat_reasoning_split(s.text[c], strlen(s.text[c]), false, &whole);
        assert_int_equal(s.saw_content[c], whole.content != NULL);
        if (whole.content) {
            assert_int_equal(strlen(s.content[c]), whole.content_len);
            assert_memory_equal(s.content[c], whole.content, whole.content_len);
        } else {
            assert_int_equal(s.reasoning_tokens[c], s.tokens[c]); /* all of it was reasoning */
        }
        if (whole.reasoning) {
            assert_int_equal(strlen(s.reasoning[c]), whole.reasoning_len);
            assert_memory_equal(s.reasoning[c], whole.reasoning, whole.reasoning_len);
        }
    }
    fe_prompt_free(&p);

    /* thinking off: content only */
    opts.enable_thinking = CHAT_THINK_OFF;
    assert_int_equal(fe_prompt_chat(e, &msg, 1, NULL, &opts, NULL, &p, &err), 0);
    req = (engine_request_t){.prompt = p.ids, .n_prompt = p.n_ids};
    sampling_params_init(&req.sampling);
    req.sampling.max_tokens = 12;
    req.sampling.temperature = 0;
    run_split(e, &req, p.ends_reasoning, &s);
    assert_false(s.saw_reasoning[0]);
    assert_string_equal(s.content[0], s.text[0]);
    fe_prompt_free(&p);

    /* without the split, content is the raw text */
    assert_int_equal(fe_prompt_text(e, "The", 3, &p, &err), 0);
    req = (engine_request_t){.prompt = p.ids, .n_prompt = p.n_ids};
    sampling_params_init(&req.sampling);
    req.sampling.max_tokens = 8;
    fe_reply_opts_t ro = {.split_reasoning = false};
    fe_reply_t *r;
    assert_int_equal(fe_reply_submit(e, &req, &ro, &r, &err), 0);
    assert_int_equal(read_reply(r, &s), -1);
    assert_string_equal(s.content[0], s.text[0]);
    assert_int_equal(s.tokens[0], 8);
    fe_reply_release(r);
    fe_prompt_free(&p);
    engine_close(e);
}

static void test_reply_cancel_and_errors(void **state) {
    engine_t *e = open_embedded();
    err_t err = {{0}};
    fe_prompt_t p;
    assert_int_equal(fe_prompt_text(e, "Once upon a time", 16, &p, &err), 0);
    engine_request_t req = {.prompt = p.ids, .n_prompt = p.n_ids};
    sampling_params_init(&req.sampling);
    req.sampling.max_tokens = 400;
    req.sampling.ignore_eos = true;
    fe_reply_opts_t ro = {.split_reasoning = true};
    fe_reply_t *r;
    assert_int_equal(fe_reply_submit(e, &req, &ro, &r, &err), 0);
    fe_reply_cancel(r);
    sums_t s;
    assert_int_equal(read_reply(r, &s), -1);
    assert_int_equal(s.finished[0], 1);
    fe_reply_release(r);
    /* released unread, mid-generation: nothing leaks (the sanitizer build checks) */
    assert_int_equal(fe_reply_submit(e, &req, &ro, &r, &err), 0);
    fe_reply_release(r);
    /* a prompt beyond the context is refused with the engine's code */
    int32_t *big = calloc(600, sizeof *big);
    engine_request_t too_long = {.prompt = big, .n_prompt = 600};
    sampling_params_init(&too_long.sampling);
    assert_int_equal(fe_reply_submit(e, &too_long, &ro, &r, &err), ENGINE_E_INVALID);
    assert_null(r);
    free(big);
    fe_prompt_free(&p);
    engine_close(e);
}

/* The reasoning tokens of one scripted reply, read whole. */
static int scripted_reasoning(engine_t *e, const char *user, chat_think_t think, int *tokens) {
    err_t err = {{0}};
    chat_msg_t msg = {.role = CHAT_USER, .content_kind = CHAT_CONTENT_TEXT, .content = user};
    chat_opts_t opts = {.add_generation_prompt = true, .enable_thinking = think};
    fe_prompt_t p;
    assert_int_equal(fe_prompt_chat(e, &msg, 1, NULL, &opts, NULL, &p, &err), 0);
    engine_request_t req = {.prompt = p.ids, .n_prompt = p.n_ids};
    sampling_params_init(&req.sampling);
    req.sampling.max_tokens = 64;
    sums_t s;
    run_split(e, &req, p.ends_reasoning, &s);
    fe_prompt_free(&p);
    *tokens = s.tokens[0];
    return s.reasoning_tokens[0];
}

/* vLLM's count (BaseThinkingReasoningParser.count_reasoning_tokens): the ids between <think>
 * and </think>, neither tag counted; from the first token when the prompt opened the block; 0
 * when thinking is off. The tiny model cannot be steered, so its replies are scripted. */
static void test_reasoning_tokens(void **state) {
    char *dir = tu_tmpdir();
    tu_write_text(dir, "rules.json",
                  "[{\"when\": \"tagged\", \"reply\": \"<think>\\nab cd\\n</think>\\n\\nxy\"},"
                  " {\"when\": \"open\", \"reply\": \"ab cd</think>xy\"},"
                  " {\"when\": \"plain\", \"reply\": \"hello there\"}]");
    char path[4096];
    snprintf(path, sizeof path, "%s/rules.json", dir);
    setenv("TACHYON_SCRIPTED_OUTPUTS", path, 1);
    engine_t *e = open_embedded();
    unsetenv("TACHYON_SCRIPTED_OUTPUTS");
    const tokenizer_t *tok = engine_tokenizer(e);
    int32_t *ids;
    size_t n_inner, n_ab;
    err_t err = {{0}};
    assert_int_equal(tok_encode(tok, "\nab cd\n", 7, &ids, &n_inner, &err), 0);
    free(ids);
    assert_int_equal(tok_encode(tok, "ab cd", 5, &ids, &n_ab, &err), 0);
    free(ids);
    int tokens;
    /* Qwen3 opens the block itself: the tags are not reasoning */
    assert_int_equal(scripted_reasoning(e, "tagged", CHAT_THINK_DEFAULT, &tokens), (int)n_inner);
    /* no <think> generated, thinking on: from the first token up to </think> */
    assert_int_equal(scripted_reasoning(e, "open", CHAT_THINK_DEFAULT, &tokens), (int)n_ab);
    /* thinking on and never closed: all of it */
    int all = scripted_reasoning(e, "plain", CHAT_THINK_DEFAULT, &tokens);
    assert_int_equal(all, tokens); /* every output id, the EOS included, as vLLM counts */
    /* thinking off: none (vLLM: 0), though content starts with the first token */
    assert_int_equal(scripted_reasoning(e, "plain", CHAT_THINK_OFF, &tokens), 0);
    /* thinking off but the model opens a block anyway: counted from the tag */
    assert_int_equal(scripted_reasoning(e, "tagged", CHAT_THINK_OFF, &tokens), (int)n_inner);
    engine_close(e);
    tu_rmrf(dir);
    free(dir);
}

/* A conversation from OpenAI JSON: strings keep U+0000, parts flatten as vLLM joins them. */
static void test_conv_from_json(void **state) {
    const char *doc =
        "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\\u0000b\"},"
        " {\"type\": \"text\", \"text\": \"c\"}]}, {\"role\": \"assistant\", "
        "\"content\": \"x\", \"reasoning_content\": \"r\\u0000\"}]";
    err_t err = {{0}};
    cJSON *j = json_parse(doc, strlen(doc), &err);
    assert_non_null(j);
    fe_conv_t *conv;
    assert_int_equal(fe_conv_from_json(j, NULL, FE_JSON_VLLM, &conv, &err), 0);
    assert_int_equal(conv->n_msgs, 2);
    assert_int_equal(conv->msgs[0].content_kind, CHAT_CONTENT_TEXT);
    assert_int_equal(conv->msgs[0].content_len, 5);
    assert_memory_equal(conv->msgs[0].content, "a\0b\nc", 5);
    assert_int_equal(conv->msgs[1].reasoning_len, 2);
    fe_conv_free(conv);
    assert_int_equal(fe_conv_from_json(j, NULL, 0, &conv, &err), 0);
    assert_int_equal(conv->msgs[0].content_kind, CHAT_CONTENT_PARTS);
    assert_int_equal(conv->msgs[0].n_parts, 2);
    assert_int_equal(conv->msgs[0].part_lens[0], 3);
    fe_conv_free(conv);
    fe_conv_free(NULL);
    cJSON_Delete(j);
}

/* A tools array is checked as vLLM checks it, the first problem named by its item. */
static void test_tools_check(void **state) {
    (void)state;
    static const struct {
        const char *tools, *msg; /* msg NULL: accepted */
    } cases[] = {
        {"[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\", "
         "\"parameters\": {\"type\": \"object\"}, \"strict\": true}}]",
         NULL},
        {"[{\"function\": {\"name\": \"f\", \"description\": null}}]", NULL},
        {"{}", "tools: Input should be a valid list"},
        {"[]", "tools must not be an empty list"},
        {"[{\"function\": {\"name\": \"f\"}}, 3]", "tools[1]: Input should be an object"},
        {"[{\"type\": \"x\", \"function\": {\"name\": \"f\"}}]",
         "tools[0].type: Input should be 'function'"},
        {"[{\"type\": \"function\"}]", "tools[0].function: Field required"},
        {"[{\"function\": []}]", "tools[0].function: Input should be an object"},
        {"[{\"function\": {\"description\": \"d\"}}]", "tools[0].function.name: Field required"},
        {"[{\"function\": {\"name\": \"a\\u0000b\"}}]",
         "tools[0].function.name: Input should be a valid string"},
        {"[{\"function\": {\"name\": \"f\", \"description\": 1}}]",
         "tools[0].function.description: Input should be a valid string"},
        {"[{\"function\": {\"name\": \"f\", \"parameters\": \"x\"}}]",
         "tools[0].function.parameters: Input should be an object"},
        {"[{\"function\": {\"name\": \"f\", \"strict\": 1}}]",
         "tools[0].function.strict: Input should be a valid boolean"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err_t err = {{0}};
        cJSON *j = json_parse(cases[i].tools, strlen(cases[i].tools), &err);
        assert_non_null(j);
        int rc = fe_tools_check(j, &err);
        if (cases[i].msg) {
            assert_int_equal(rc, -1);
            assert_string_equal(err.msg, cases[i].msg);
        } else {
            assert_int_equal(rc, 0);
        }
        cJSON_Delete(j);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompts),
        cmocka_unit_test(test_reply_split),
        cmocka_unit_test(test_reply_cancel_and_errors),
        cmocka_unit_test(test_reasoning_tokens),
        cmocka_unit_test(test_conv_from_json),
        cmocka_unit_test(test_tools_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

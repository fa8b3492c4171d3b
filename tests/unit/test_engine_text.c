/*
 * engine: the text side of requests end to end, with the embedded model and its real tokenizer
 * on the cpu backend (stop strings, logprobs) and the --tokenizer option on the null backend.
 * (test_engine_basic.c has the scheduling side on the null backend.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "engine_testutil.h"
#include "testutil.h"
#include "tokenizer.h"

enum { WAIT_MS = 20000 };

// ---------------------------------------------------------------------------------------------
// Stop strings with the embedded model and its tokenizer (cpu backend)

static engine_t *open_embedded(void) {
    static const char *const flags[] = {"max-model-len", "512", "kv-cache-memory", "16MiB", NULL};
    return tu_open_engine(MDIR_EMBEDDED, "cpu", flags);
}

static engine_stream_t *submit_text(engine_t *e, const int32_t *ids, int n, const char *stop,
                                    bool include) {
    engine_request_t req = {.prompt = ids, .n_prompt = n};
    sampling_params_init(&req.sampling);
    req.sampling.temperature = 0.0f;
    req.sampling.max_tokens = 40;
    req.sampling.ignore_eos = true;
    req.sampling.include_stop_str_in_output = include;
    err_t err;
    if (stop) assert_int_equal(sampling_params_add_stop(&req.sampling, stop, &err), 0);
    engine_stream_t *s;
    if (engine_submit(e, &req, &s, &err) < 0) fail_msg("engine_submit: %s", err.msg);
    sampling_params_free(&req.sampling);
    return s;
}

/* Text of token i of a continuation, as decoding adds it. */
static char *piece(const tokenizer_t *tok, const int32_t *ids, int i) {
    char *a, *b;
    size_t la, lb;
    err_t err;
    tok_decode(tok, ids, (size_t)i, true, &a, &la, &err);
    tok_decode(tok, ids, (size_t)i + 1, true, &b, &lb, &err);
    char *p = strdup(b + la);
    free(a);
    free(b);
    return p;
}

static bool ascii_word(const char *s, size_t n) {
    if (strlen(s) < n) return false;
    for (size_t i = 0; i < strlen(s); i++)
        if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

/* --tokenizer (engine_opts.tokenizer): a dummy preset without a tokenizer takes the fixture's,
 * chat template included, and its text decodes the preset's ids; a tokenizer whose ids do not fit
 * the model's vocabulary, or a directory without tokenizer.json, is refused naming the problem. */
static engine_t *open_with_tokenizer(const char *model, const char *tokenizer, err_t *err) {
    engine_opts_t o;
    engine_opts_init(&o);
    o.model.model = model;
    o.model.format = LOAD_DUMMY;
    o.backend = "null";
    o.tokenizer = tokenizer;
    engine_t *eng = NULL;
    return engine_open(&o, &eng, err) < 0 ? NULL : eng;
}

static void test_tokenizer_option(void **state) {
    err_t err = {{0}};
    engine_t *bare = open_with_tokenizer("tiny", NULL, &err);
    assert_non_null(bare);
    assert_null(engine_tokenizer(bare));
    assert_int_equal(engine_chat_format(bare), -1);
    engine_close(bare);

    engine_t *e = open_with_tokenizer("tiny", tu_fixture("tiny-qwen3"), &err);
    if (!e) fail_msg("%s", err.msg);
    const tokenizer_t *tok = engine_tokenizer(e);
    assert_non_null(tok);
    assert_true(engine_chat_format(e) >= 0);
    assert_int_equal(tok_token_to_id(tok, "<|im_end|>"), 2050);
    const char *text = "Hello there";
    int32_t *ids;
    size_t n;
    assert_int_equal(tok_encode(tok, text, strlen(text), &ids, &n, &err), 0);
    tu_got_t got = {0};
    engine_stream_t *s = submit_text(e, ids, (int)n, NULL, false);
    tu_got_collect(s, &got);
    engine_stream_release(s);
    char *whole;
    size_t whole_len;
    assert_int_equal(
        tok_decode(tok, got.ids[0], (size_t)got.n_ids[0], true, &whole, &whole_len, &err), 0);
    assert_string_equal(got.text[0], whole); /* the stream decodes with the given tokenizer */
    free(whole);
    free(ids);
    tu_got_free(&got);
    engine_close(e);

    /* ids beyond the model's vocabulary: 5,000 tokens against the preset's 4,096 */
    char *dir = tu_tmpdir();
    size_t cap = 5000 * 24 + 512, len = 0;
    char *json = malloc(cap);
    assert_non_null(json);
    len += (size_t)snprintf(json + len, cap - len,
                            "{\"normalizer\": {\"type\": \"NFC\"}, \"decoder\": {\"type\": "
                            "\"ByteLevel\"}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, "
                            "\"added_tokens\": [], \"model\": {\"type\": \"BPE\", \"merges\": [], "
                            "\"vocab\": {");
    for (int id = 0; id < 5000; id++)
        len += (size_t)snprintf(json + len, cap - len, "%s\"t%d\": %d", id ? ", " : "", id, id);
    snprintf(json + len, cap - len, "}}}");
    tu_write_text(dir, "tokenizer.json", json);
    free(json);
    assert_null(open_with_tokenizer("tiny", dir, &err));
    assert_non_null(strstr(err.msg, "--tokenizer: the tokenizer has 5000 ids but the model's "
                                    "vocab_size is 4096"));
    tu_rmrf(dir);
    free(dir);

    char *empty = tu_tmpdir();
    assert_null(open_with_tokenizer("tiny", empty, &err));
    assert_non_null(strstr(err.msg, "no tokenizer.json there"));
    tu_rmrf(empty);
    free(empty);
    assert_null(open_with_tokenizer("tiny", "/nonexistent/tokenizer-dir", &err));
    assert_non_null(strstr(err.msg, "--tokenizer"));
}

static void test_stop_string(void **state) {
    engine_t *e = open_embedded();
    const tokenizer_t *tok = engine_tokenizer(e);
    assert_non_null(tok);
    const char *text = "Once upon a time, there was a little";
    int32_t *ids;
    size_t n;
    err_t err;
    assert_int_equal(tok_encode(tok, text, strlen(text), &ids, &n, &err), 0);

    tu_got_t full = {0};
    engine_stream_t *s = submit_text(e, ids, (int)n, NULL, false);
    tu_got_collect(s, &full);
    engine_stream_release(s);
    assert_int_equal(full.n_ids[0], 40);
    char *whole;
    size_t whole_len;
    tok_decode(tok, full.ids[0], 40, true, &whole, &whole_len, &err);
    assert_string_equal(full.text[0], whole); /* the deltas add up to the decoded text */

    /* a stop string made of the end of one token and the start of the next, at its first
     * occurrence in the text */
    char stop[16] = "";
    int tok_i = -1;
    size_t at = 0;
    for (int i = 0; i + 1 < 40 && tok_i < 0; i++) {
        char *a = piece(tok, full.ids[0], i), *b = piece(tok, full.ids[0], i + 1);
        if (ascii_word(a, 2) && ascii_word(b, 2)) {
            snprintf(stop, sizeof stop, "%s%.2s", a + strlen(a) - 2, b);
            char *prefix;
            size_t plen;
            tok_decode(tok, full.ids[0], (size_t)i + 1, true, &prefix, &plen, &err);
            const char *first = strstr(whole, stop);
            if (first && (size_t)(first - whole) == plen - 2) {
                tok_i = i;
                at = plen - 2;
            }
            free(prefix);
        }
        free(a);
        free(b);
    }
    if (tok_i < 0) fail_msg("no stop string candidate in \"%s\"", whole);

    for (int include = 0; include < 2; include++) {
        s = submit_text(e, ids, (int)n, stop, include);
        tu_got_t g = {0};
        engine_event_t ev;
        int rc;
        size_t stop_len = strlen(stop);
        while ((rc = engine_stream_wait(s, &ev, WAIT_MS)) > 0) {
            bool delta = ev.type == ENGINE_EV_DELTA;
            tu_got_event(&g, &ev);
            engine_event_clear(&ev);
            if (!delta) continue;
            /* what was shown so far never ends with the start of the stop string */
            for (size_t k = 1; k < stop_len && k <= g.text_len[0]; k++)
                if (memcmp(g.text[0] + g.text_len[0] - k, stop, k) == 0)
                    fail_msg("delta shows \"%.*s\", a prefix of the stop \"%s\"", (int)k, stop,
                             stop);
        }
        engine_stream_release(s);
        assert_int_equal(rc, -1);
        assert_int_equal(g.reason[0], ENGINE_FINISH_STOP);
        assert_string_equal(g.stop_str[0], stop);
        assert_int_equal(g.stop_token[0], -1);
        assert_int_equal(g.completion[0], tok_i + 2);
        size_t want = at + (include ? stop_len : 0);
        assert_int_equal(g.text_len[0], want);
        assert_memory_equal(g.text[0], whole, want);
        tu_got_free(&g);
    }
    free(whole);
    free(ids);
    tu_got_free(&full);
    engine_close(e);
}

/* Host sampling (cpu backend): logprobs of the sampled token and the top alternatives. */
static void test_logprobs(void **state) {
    engine_t *e = open_embedded();
    int32_t prompt[4] = {100, 200, 300, 400};
    engine_request_t req = {.prompt = prompt, .n_prompt = 4};
    sampling_params_init(&req.sampling);
    req.sampling.temperature = 0.0f;
    req.sampling.max_tokens = 4;
    req.sampling.logprobs = 2;
    req.sampling.ignore_eos = true;
    engine_stream_t *s;
    err_t err;
    assert_int_equal(engine_submit(e, &req, &s, &err), 0);
    engine_event_t ev;
    int n = 0, rc;
    while ((rc = engine_stream_wait(s, &ev, WAIT_MS)) > 0) {
        assert_int_equal(ev.n_tokens, 1);
        assert_int_equal(ev.n_top, 2);
        assert_non_null(ev.logprobs);
        const engine_token_logprob_t *lp = ev.logprobs;
        assert_int_equal(lp[0].id, ev.token_ids[0]);
        assert_true(lp[0].logprob <= 0.0f && lp[0].logprob > -30.0f);
        assert_int_equal(lp[1].id, ev.token_ids[0]); /* greedy: the best one */
        assert_true(lp[1].logprob == lp[0].logprob);
        assert_true(lp[2].logprob <= lp[1].logprob);
        n++;
        engine_event_clear(&ev);
    }
    assert_int_equal(rc, -1);
    assert_int_equal(n, 4);
    engine_stream_release(s);
    engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_string),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_tokenizer_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * json: parsing what cJSON alone gets wrong for an OpenAI server: number spellings kept, the
 * length of strings that hold U+0000 (surrogate pairs and every escape counted right), control
 * characters inside strings and data after the document refused, keys holding U+0000 refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "testutil.h"

static cJSON *parse(const char *text) {
    err_t err = {{0}};
    return json_parse(text, strlen(text), &err);
}

static void test_nul_strings_keep_their_length(void **state) {
    /* "a\0b" + "\u00e9" (2 bytes) + "\u20ac" (3) + U+1F680 as a surrogate pair (4) + "\n\"" */
    const char *doc =
        "{\"x\": \"a\\u0000b\\u00e9\\u20ac\\ud83d\\ude80\\n\\\"\", \"y\": [\"\\u0000\", "
        "\"plain\", 5, {\"z\": \"q\\u0000\"}], \"w\": \"no nul\"}";
    cJSON *j = parse(doc);
    assert_non_null(j);
    const cJSON *x = cJSON_GetObjectItem(j, "x");
    assert_true(json_has_nul(x));
    assert_int_equal(json_strlen(x), 3 + 2 + 3 + 4 + 2);
    assert_memory_equal(x->valuestring, "a\0b\xc3\xa9\xe2\x82\xac\xf0\x9f\x9a\x80\n\"", 14);
    const cJSON *y = cJSON_GetObjectItem(j, "y");
    assert_int_equal(json_strlen(y->child), 1);
    assert_true(json_has_nul(y->child));
    assert_false(json_has_nul(y->child->next));
    assert_int_equal(json_strlen(y->child->next), 5);
    assert_int_equal(json_strlen(cJSON_GetObjectItem(y->child->next->next->next, "z")), 2);
    assert_false(json_has_nul(cJSON_GetObjectItem(j, "w")));
    assert_int_equal(json_strlen(cJSON_GetObjectItem(j, "w")), 6);
    assert_int_equal(json_strlen(y->child->next->next), 0); /* a number */
    cJSON_Delete(j);
    /* an escaped backslash before u0000 is text, not U+0000 */
    j = parse("{\"a\": \"\\\\u0000\"}");
    assert_non_null(j);
    assert_false(json_has_nul(cJSON_GetObjectItem(j, "a")));
    assert_string_equal(cJSON_GetObjectItem(j, "a")->valuestring, "\\u0000");
    cJSON_Delete(j);
}

static void test_number_spellings(void **state) {
    cJSON *j = parse("[1.0, 5, -0, 1e21, 123456789012345678901234567890]");
    assert_non_null(j);
    const char *want[] = {"1.0", "5", "-0", "1e21", "123456789012345678901234567890"};
    int i = 0;
    for (const cJSON *c = j->child; c; c = c->next, i++)
        assert_string_equal(c->valuestring, want[i]);
    cJSON_Delete(j);
}

static void test_refused(void **state) {
    const char *bad[] = {
        "{\"a\": \"x\ty\"}", /* raw tab in a string */
        "{\"a\": \"x\ny\"}", /* raw newline */
        "{\"a\": \"\x01\"}", /* raw control character */
        "{} x",              /* data after the document */
        "{\"k\\u0000\": 1}", /* a key holding U+0000 */
        "[\"\\ud800\"]",     /* a lone surrogate */
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err_t err = {{0}};
        cJSON *j = json_parse(bad[i], strlen(bad[i]), &err);
        if (j) fail_msg("accepted: %s", bad[i]);
        assert_true(err.msg[0] != '\0');
    }
    /* a NUL byte after the document, and after whitespace */
    err_t err = {{0}};
    assert_null(json_parse("{}\0x", 4, &err));
    assert_null(json_parse("{} \0", 4, &err));
    /* whitespace after the document is fine; so are control characters outside strings */
    cJSON *j = parse(" {\"a\":\n\t1} \r\n");
    assert_non_null(j);
    cJSON_Delete(j);
}

/* A file: parsed as json_parse parses text; a missing or invalid one says why. */
static void test_parse_file(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    tu_write_text(dir, "ok.json", "[{\"a\": \"x\\u0000y\"}]\n");
    tu_write_text(dir, "bad.json", "{\"a\": }");
    char path[4096];
    err_t err = {{0}};
    snprintf(path, sizeof path, "%s/ok.json", dir);
    cJSON *j = json_parse_file(path, &err);
    assert_non_null(j);
    assert_int_equal(json_strlen(cJSON_GetObjectItemCaseSensitive(j->child, "a")), 3);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/bad.json", dir);
    assert_null(json_parse_file(path, &err));
    assert_non_null(strstr(err.msg, "invalid JSON"));
    snprintf(path, sizeof path, "%s/none.json", dir);
    assert_null(json_parse_file(path, &err));
    assert_string_equal(err.msg, "cannot be read: No such file or directory");
    assert_null(json_parse_file(dir, &err)); /* a directory */
    assert_non_null(strstr(err.msg, "cannot be read"));
    tu_rmrf(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nul_strings_keep_their_length),
        cmocka_unit_test(test_number_spellings),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_parse_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

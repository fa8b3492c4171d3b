/* lineedit: every binding on ASCII, multi-byte and wide text; cursor columns and horizontal
 * scrolling; kill and yank; history navigation that keeps the edited line, limits, duplicates
 * and the save file under XDG_STATE_HOME; Tab completion (one candidate, several, common
 * prefix) and the inline suggestion. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <utf8proc.h>

#include "lineedit.h"
#include "testutil.h"

static le_t *make(size_t max_bytes, int history) {
    err_t err = {{0}};
    le_t *le = le_create(max_bytes, history, &err);
    if (!le) fail_msg("le_create: %s", err.msg);
    return le;
}

/* Feeds the code points of UTF-8 text as keys, expecting each to change the line. */
static void type(le_t *le, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int cp, n;
        if (*p < 0x80) {
            cp = *p;
            n = 1;
        } else if (*p < 0xE0) {
            cp = *p & 0x1F;
            n = 2;
        } else if (*p < 0xF0) {
            cp = *p & 0x0F;
            n = 3;
        } else {
            cp = *p & 0x07;
            n = 4;
        }
        for (int i = 1; i < n; i++)
            cp = (cp << 6) | (p[i] & 0x3F);
        p += n;
        assert_int_equal(le_key(le, cp), LE_CHANGED);
    }
}

static void key(le_t *le, int k, le_result_t want) {
    assert_int_equal(le_key(le, k), want);
}

static void test_create_errors(void **state) {
    (void)state;
    err_t err = {{0}};
    assert_null(le_create(4, 10, &err));
    assert_non_null(strstr(err.msg, "lineedit"));
    assert_null(le_create(64, 0, &err));
    le_destroy(NULL);
}

static void test_insert_and_cursor_ascii(void **state) {
    (void)state;
    le_t *le = make(64, 10);
    assert_string_equal(le_text(le), "");
    type(le, "hello");
    assert_string_equal(le_text(le), "hello");
    assert_int_equal(le_cursor(le), 5);
    key(le, LE_KEY_LEFT, LE_CHANGED);
    key(le, LE_KEY_CTRL_B, LE_CHANGED);
    assert_int_equal(le_cursor(le), 3);
    type(le, "X");
    assert_string_equal(le_text(le), "helXlo");
    assert_int_equal(le_cursor(le), 4);
    key(le, LE_KEY_CTRL_A, LE_CHANGED);
    assert_int_equal(le_cursor(le), 0);
    key(le, LE_KEY_CTRL_A, LE_IGNORED);
    key(le, LE_KEY_LEFT, LE_IGNORED);
    key(le, LE_KEY_RIGHT, LE_CHANGED);
    key(le, LE_KEY_CTRL_F, LE_CHANGED);
    assert_int_equal(le_cursor(le), 2);
    key(le, LE_KEY_CTRL_E, LE_CHANGED);
    assert_int_equal(le_cursor(le), 6);
    key(le, LE_KEY_HOME, LE_CHANGED);
    assert_int_equal(le_cursor(le), 0);
    key(le, LE_KEY_END, LE_CHANGED);
    assert_int_equal(le_cursor(le), 6);
    key(le, LE_KEY_RIGHT, LE_IGNORED); /* end of line, no suggestion */
    /* Control characters that are not bindings, and non-characters, are not inserted. */
    key(le, 0x1b, LE_IGNORED);
    key(le, 0x0c, LE_IGNORED);
    key(le, 0x85, LE_IGNORED);
    key(le, 0xD800, LE_IGNORED);
    key(le, -1, LE_IGNORED);
    key(le, LE_KEY_BASE + 100, LE_IGNORED);
    assert_string_equal(le_text(le), "helXlo");
    le_destroy(le);
}

static void test_utf8_multibyte_and_wide(void **state) {
    (void)state;
    le_t *le = make(64, 10);
    type(le, "h\xC3\xA9"
             "\xE4\xB8\xAD"
             "\xF0\x9F\x98\x80"
             "x"); /* h é 中 😀 x */
    assert_string_equal(le_text(le), "h\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80x");
    assert_int_equal(le_cursor(le), 1 + 2 + 3 + 4 + 1);
    assert_int_equal(le_text_width(le_text(le), strlen(le_text(le))), 1 + 1 + 2 + 2 + 1);
    key(le, LE_KEY_LEFT, LE_CHANGED);
    assert_int_equal(le_cursor(le), 10);
    key(le, LE_KEY_LEFT, LE_CHANGED); /* over the 4-byte emoji */
    assert_int_equal(le_cursor(le), 6);
    key(le, LE_KEY_LEFT, LE_CHANGED); /* over the 3-byte CJK */
    assert_int_equal(le_cursor(le), 3);
    le_view_t v;
    le_render(le, 40, &v);
    assert_int_equal(v.cursor_col, 2);
    key(le, LE_KEY_RIGHT, LE_CHANGED);
    le_render(le, 40, &v);
    assert_int_equal(v.cursor_col, 4); /* after one wide character */
    assert_int_equal(v.text_cols, 7);
    /* Backspace removes the whole CJK character, Delete the whole emoji. */
    key(le, LE_KEY_BACKSPACE, LE_CHANGED);
    assert_string_equal(le_text(le), "h\xC3\xA9\xF0\x9F\x98\x80x");
    key(le, LE_KEY_DELETE, LE_CHANGED);
    assert_string_equal(le_text(le), "h\xC3\xA9x");
    assert_int_equal(le_cursor(le), 3);
    le_destroy(le);
}

static void test_combining_marks(void **state) {
    (void)state;
    le_t *le = make(64, 10);
    type(le, "e\xCC\x81x"); /* e + U+0301 COMBINING ACUTE, x */
    assert_int_equal(le_text_width(le_text(le), strlen(le_text(le))), 2);
    key(le, LE_KEY_LEFT, LE_CHANGED);
    assert_int_equal(le_cursor(le), 3);
    key(le, LE_KEY_LEFT, LE_CHANGED); /* the mark goes with its letter */
    assert_int_equal(le_cursor(le), 0);
    key(le, LE_KEY_RIGHT, LE_CHANGED);
    assert_int_equal(le_cursor(le), 3);
    le_view_t v;
    le_render(le, 10, &v);
    assert_int_equal(v.cursor_col, 1);
    key(le, LE_KEY_BACKSPACE, LE_CHANGED);
    assert_string_equal(le_text(le), "x");
    /* A letter typed before a lone mark takes it: the cursor moves past the joined pair. */
    le_set_text(le, "\xCC\x81");
    key(le, LE_KEY_HOME, LE_CHANGED);
    type(le, "a");
    assert_string_equal(le_text(le), "a\xCC\x81");
    assert_int_equal(le_cursor(le), 3);
    le_destroy(le);
}

static void test_word_moves(void **state) {
    (void)state;
    le_t *le = make(64, 10);
    type(le, "foo bar-baz  qu\xC3\xA9x");
    /* Alt-B / Ctrl-Left go to the start of the previous word (letters and digits). */
    key(le, LE_KEY_ALT_B, LE_CHANGED);
    assert_int_equal(le_cursor(le), 13); /* "quéx": é is a letter */
    key(le, LE_KEY_CTRL_LEFT, LE_CHANGED);
    assert_int_equal(le_cursor(le), 8); /* "baz" */
    key(le, LE_KEY_ALT_B, LE_CHANGED);
    assert_int_equal(le_cursor(le), 4); /* "bar" */
    key(le, LE_KEY_ALT_B, LE_CHANGED);
    assert_int_equal(le_cursor(le), 0);
    key(le, LE_KEY_ALT_B, LE_IGNORED);
    /* Alt-F / Ctrl-Right go to the end of the next word. */
    key(le, LE_KEY_ALT_F, LE_CHANGED);
    assert_int_equal(le_cursor(le), 3);
    key(le, LE_KEY_CTRL_RIGHT, LE_CHANGED);
    assert_int_equal(le_cursor(le), 7);
    key(le, LE_KEY_ALT_F, LE_CHANGED);
    assert_int_equal(le_cursor(le), 11);
    key(le, LE_KEY_ALT_F, LE_CHANGED);
    assert_int_equal(le_cursor(le), strlen(le_text(le)));
    key(le, LE_KEY_CTRL_RIGHT, LE_IGNORED);
    le_destroy(le);
}

static void test_kill_and_yank(void **state) {
    (void)state;
    le_t *le = make(64, 10);
    type(le, "one two  three");
    key(le, LE_KEY_CTRL_W, LE_CHANGED); /* the word before the cursor */
    assert_string_equal(le_text(le), "one two  ");
    key(le, LE_KEY_CTRL_W, LE_CHANGED); /* blanks, then the word */
    assert_string_equal(le_text(le), "one ");
    key(le, LE_KEY_CTRL_Y, LE_CHANGED); /* yank the last kill */
    assert_string_equal(le_text(le), "one two  ");
    assert_int_equal(le_cursor(le), 9);
    key(le, LE_KEY_CTRL_A, LE_CHANGED);
    key(le, LE_KEY_ALT_F, LE_CHANGED);
    key(le, LE_KEY_CTRL_K, LE_CHANGED); /* kill to end */
    assert_string_equal(le_text(le), "one");
    key(le, LE_KEY_CTRL_K, LE_IGNORED);
    key(le, LE_KEY_CTRL_A, LE_CHANGED);
    key(le, LE_KEY_CTRL_Y, LE_CHANGED);
    assert_string_equal(le_text(le), " two  one");
    assert_int_equal(le_cursor(le), 6);
    key(le, LE_KEY_CTRL_U, LE_CHANGED); /* kill to start */
    assert_string_equal(le_text(le), "one");
    assert_int_equal(le_cursor(le), 0);
    key(le, LE_KEY_CTRL_U, LE_IGNORED);
    key(le, LE_KEY_CTRL_E, LE_CHANGED);
    key(le, LE_KEY_CTRL_Y, LE_CHANGED);
    assert_string_equal(le_text(le), "one two  ");
    /* Ctrl-W over multi-byte text kills whole characters. */
    le_set_text(le, "a \xE4\xB8\xAD\xE6\x96\x87");
    key(le, LE_KEY_CTRL_W, LE_CHANGED);
    assert_string_equal(le_text(le), "a ");
    key(le, LE_KEY_CTRL_Y, LE_CHANGED);
    assert_string_equal(le_text(le), "a \xE4\xB8\xAD\xE6\x96\x87");
    le_destroy(le);
}

static void test_delete_backspace_eof(void **state) {
    (void)state;
    le_t *le = make(64, 10);
    key(le, LE_KEY_CTRL_D, LE_EOF);     /* empty line: end of input */
    key(le, LE_KEY_DELETE, LE_IGNORED); /* the Delete key never ends the session */
    key(le, LE_KEY_BACKSPACE, LE_IGNORED);
    type(le, "abcd");
    key(le, LE_KEY_BACKSPACE, LE_CHANGED);
    key(le, LE_KEY_CTRL_H, LE_CHANGED);
    assert_string_equal(le_text(le), "ab");
    key(le, LE_KEY_CTRL_D, LE_IGNORED); /* at the end: nothing to delete, not EOF */
    key(le, LE_KEY_HOME, LE_CHANGED);
    key(le, LE_KEY_CTRL_D, LE_CHANGED);
    assert_string_equal(le_text(le), "b");
    key(le, LE_KEY_DELETE, LE_CHANGED);
    assert_string_equal(le_text(le), "");
    key(le, LE_KEY_CTRL_D, LE_EOF);
    le_destroy(le);
}

static void test_submit_and_history(void **state) {
    (void)state;
    le_t *le = make(64, 3);
    assert_string_equal(le_submitted(le), "");
    type(le, "first");
    key(le, LE_KEY_ENTER, LE_SUBMIT);
    assert_string_equal(le_submitted(le), "first");
    assert_string_equal(le_text(le), "");
    assert_int_equal(le_cursor(le), 0);
    type(le, "first");
    key(le, LE_KEY_CTRL_J, LE_SUBMIT); /* a repeat of the newest entry is not added */
    key(le, LE_KEY_ENTER, LE_SUBMIT);  /* a blank line submits but is not added */
    assert_string_equal(le_submitted(le), "");
    type(le, "   ");
    key(le, LE_KEY_ENTER, LE_SUBMIT);
    assert_string_equal(le_submitted(le), "   ");
    assert_int_equal(le_history_count(le), 1);
    type(le, "second");
    key(le, LE_KEY_ENTER, LE_SUBMIT);
    type(le, "third");
    key(le, LE_KEY_ENTER, LE_SUBMIT);
    type(le, "fourth");
    key(le, LE_KEY_ENTER, LE_SUBMIT);
    assert_int_equal(le_history_count(le), 3); /* bounded: the oldest dropped */
    assert_string_equal(le_history_at(le, 0), "second");
    assert_string_equal(le_history_at(le, 2), "fourth");
    assert_null(le_history_at(le, 3));
    assert_null(le_history_at(le, -1));

    /* Up/Down walk the history and give back the line being edited. */
    type(le, "draft");
    key(le, LE_KEY_LEFT, LE_CHANGED);
    key(le, LE_KEY_UP, LE_CHANGED);
    assert_string_equal(le_text(le), "fourth");
    assert_int_equal(le_cursor(le), 6);
    key(le, LE_KEY_CTRL_P, LE_CHANGED);
    assert_string_equal(le_text(le), "third");
    key(le, LE_KEY_UP, LE_CHANGED);
    assert_string_equal(le_text(le), "second");
    key(le, LE_KEY_UP, LE_IGNORED); /* the oldest */
    assert_string_equal(le_text(le), "second");
    key(le, LE_KEY_DOWN, LE_CHANGED);
    assert_string_equal(le_text(le), "third");
    key(le, LE_KEY_CTRL_N, LE_CHANGED);
    key(le, LE_KEY_DOWN, LE_CHANGED);
    assert_string_equal(le_text(le), "draft");
    key(le, LE_KEY_DOWN, LE_IGNORED);
    /* An entry edited and submitted becomes a new entry; the old one is unchanged. */
    key(le, LE_KEY_UP, LE_CHANGED);
    type(le, "!");
    key(le, LE_KEY_ENTER, LE_SUBMIT);
    assert_string_equal(le_submitted(le), "fourth!");
    assert_string_equal(le_history_at(le, 1), "fourth");
    assert_string_equal(le_history_at(le, 2), "fourth!");
    /* After a submit, Up starts again from the newest entry with an empty draft. */
    key(le, LE_KEY_UP, LE_CHANGED);
    assert_string_equal(le_text(le), "fourth!");
    key(le, LE_KEY_DOWN, LE_CHANGED);
    assert_string_equal(le_text(le), "");
    le_destroy(le);
}

static void test_history_file_round_trip(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char state_home[4096];
    snprintf(state_home, sizeof state_home, "%s/state", dir);
    setenv("XDG_STATE_HOME", state_home, 1);
    char path[4096];
    err_t err = {{0}};
    assert_int_equal(le_history_path(path, sizeof path, &err), 0);
    char want[4200];
    snprintf(want, sizeof want, "%s/tachyon/history", state_home);
    assert_string_equal(path, want);
    struct stat st;
    snprintf(want, sizeof want, "%s/tachyon", state_home);
    assert_int_equal(stat(want, &st), 0);
    assert_true(S_ISDIR(st.st_mode));

    le_t *le = make(64, 100);
    assert_int_equal(le_history_load(le, path, &err), 0); /* no file yet: fine */
    assert_int_equal(le_history_count(le), 0);
    le_history_add(le, "/set max-num-seqs 4");
    le_history_add(le, "h\xC3\xA9llo \xE4\xB8\xAD");
    le_history_add(le, "last");
    assert_int_equal(le_history_save(le, path, &err), 0);
    size_t n;
    char *text = tu_read(path, &n);
    assert_non_null(text);
    assert_string_equal(text, "/set max-num-seqs 4\nh\xC3\xA9llo \xE4\xB8\xAD\nlast\n");
    free(text);
    le_destroy(le);

    le = make(64, 100);
    assert_int_equal(le_history_load(le, path, &err), 0);
    assert_int_equal(le_history_count(le), 3);
    assert_string_equal(le_history_at(le, 1), "h\xC3\xA9llo \xE4\xB8\xAD");
    key(le, LE_KEY_UP, LE_CHANGED);
    assert_string_equal(le_text(le), "last");
    le_destroy(le);

    /* Invalid UTF-8, control characters and over-long lines are skipped; CRLF is accepted. */
    snprintf(want, sizeof want, "%s/tachyon", state_home);
    tu_write_text(want, "bad",
                  "ok\r\nbad \xFF byte\ntab\there\n"
                  "0123456789012345678901234567890123456789012345678901234567890123456789\n"
                  "fine\n");
    snprintf(want, sizeof want, "%s/tachyon/bad", state_home);
    le = make(64, 100);
    assert_int_equal(le_history_load(le, want, &err), 0);
    assert_int_equal(le_history_count(le), 2);
    assert_string_equal(le_history_at(le, 0), "ok");
    assert_string_equal(le_history_at(le, 1), "fine");
    /* A directory in the way of the save file is an error with the path in it. */
    assert_int_equal(le_history_save(le, state_home, &err), -1);
    assert_non_null(strstr(err.msg, state_home));
    le_destroy(le);

    /* Without XDG_STATE_HOME: ~/.local/state/tachyon; a relative XDG_STATE_HOME is ignored. */
    setenv("XDG_STATE_HOME", "relative/dir", 1);
    char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    setenv("HOME", dir, 1);
    assert_int_equal(le_history_path(path, sizeof path, &err), 0);
    snprintf(want, sizeof want, "%s/.local/state/tachyon/history", dir);
    assert_string_equal(path, want);
    assert_int_equal(le_history_path(path, 10, &err), -1); /* does not fit */
    unsetenv("XDG_STATE_HOME");
    unsetenv("HOME");
    assert_int_equal(le_history_path(path, sizeof path, &err), -1);
    if (old_home) setenv("HOME", old_home, 1);
    free(old_home);
    tu_rmrf(dir);
    free(dir);
}

/* A completer over a fixed word list for the last blank-separated word. */
static const char *const WORDS[] = {"/bench",
                                    "/help",
                                    "/set",
                                    "/system",
                                    "max-num-seqs",
                                    "max-num-batched-tokens",
                                    "\xE4\xB8\xAD\xE6\x96\x87"};
static int completer_calls;

static int word_completer(void *user, const char *line, size_t cursor, le_completion_t *out) {
    (void)user;
    completer_calls++;
    size_t s = cursor;
    while (s > 0 && line[s - 1] != ' ')
        s--;
    out->start = s;
    for (size_t i = 0; i < sizeof WORDS / sizeof WORDS[0]; i++)
        if (strncmp(WORDS[i], line + s, cursor - s) == 0) out->cand[out->n++] = WORDS[i];
    out->best = out->n > 0 ? 0 : -1;
    out->space_after = true;
    return out->n;
}

static void test_tab_completion(void **state) {
    (void)state;
    le_t *le = make(64, 10);
    key(le, LE_KEY_TAB, LE_IGNORED); /* no completer */
    le_set_completer(le, word_completer, NULL);
    type(le, "/he");
    key(le, LE_KEY_TAB, LE_CHANGED); /* one candidate: completed, space after */
    assert_string_equal(le_text(le), "/help ");
    assert_int_equal(le_cursor(le), 6);
    int n;
    assert_null(le_candidates(le, &n));
    assert_int_equal(n, 0);
    type(le, "max");
    key(le, LE_KEY_TAB, LE_CANDIDATES); /* several: their common prefix, and the list */
    assert_string_equal(le_text(le), "/help max-num-");
    const char *const *c = le_candidates(le, &n);
    assert_int_equal(n, 2);
    assert_string_equal(c[0], "max-num-seqs");
    assert_string_equal(c[1], "max-num-batched-tokens");
    key(le, LE_KEY_TAB, LE_CANDIDATES); /* again: nothing to add, the list again */
    assert_string_equal(le_text(le), "/help max-num-");
    type(le, "s");
    assert_null(le_candidates(le, &n)); /* the next key drops the list */
    key(le, LE_KEY_TAB, LE_CHANGED);
    assert_string_equal(le_text(le), "/help max-num-seqs ");
    type(le, "zz");
    key(le, LE_KEY_TAB, LE_IGNORED); /* no candidate */
    assert_string_equal(le_text(le), "/help max-num-seqs zz");
    /* Completion in the middle of the line keeps what follows the cursor. */
    le_set_text(le, "/sy tail");
    for (int i = 0; i < 5; i++)
        key(le, LE_KEY_LEFT, LE_CHANGED);
    key(le, LE_KEY_TAB, LE_CHANGED);
    assert_string_equal(le_text(le), "/system tail");
    assert_int_equal(le_cursor(le), 7);
    /* A multi-byte candidate. */
    le_set_text(le, "\xE4\xB8\xAD");
    key(le, LE_KEY_TAB, LE_CHANGED);
    assert_string_equal(le_text(le), "\xE4\xB8\xAD\xE6\x96\x87 ");
    le_destroy(le);
}

static void test_inline_suggestion(void **state) {
    (void)state;
    le_t *le = make(64, 10);
    le_set_completer(le, word_completer, NULL);
    assert_string_equal(le_suggestion(le), ""); /* nothing typed: no suggestion */
    type(le, "/s");
    assert_string_equal(le_suggestion(le), "et"); /* best candidate "/set" */
    le_view_t v;
    le_render(le, 20, &v);
    assert_int_equal(v.suggest_len, 2);
    assert_memory_equal(v.suggest, "et", 2);
    assert_int_equal(v.suggest_cols, 2);
    assert_int_equal(v.cursor_col, 2);
    key(le, LE_KEY_RIGHT, LE_CHANGED); /* Right at the end accepts */
    assert_string_equal(le_text(le), "/set");
    assert_string_equal(le_suggestion(le), ""); /* complete word: nothing left to suggest */
    le_set_text(le, "/b");
    key(le, LE_KEY_END, LE_CHANGED); /* End at the end accepts too */
    assert_string_equal(le_text(le), "/bench");
    le_set_text(le, "/h");
    key(le, LE_KEY_CTRL_E, LE_CHANGED);
    assert_string_equal(le_text(le), "/help");
    le_set_text(le, "/h");
    key(le, LE_KEY_CTRL_F, LE_CHANGED);
    assert_string_equal(le_text(le), "/help");
    /* No suggestion with the cursor inside the line. */
    le_set_text(le, "/s");
    key(le, LE_KEY_LEFT, LE_CHANGED);
    assert_string_equal(le_suggestion(le), "");
    le_render(le, 20, &v);
    assert_int_equal(v.suggest_len, 0);
    /* Only the part that fits the field is drawn. */
    le_set_text(le, "max-num-b");
    assert_string_equal(le_suggestion(le), "atched-tokens");
    le_render(le, 14, &v);
    assert_int_equal(v.text_cols, 9);
    assert_int_equal(v.suggest_cols, 5);
    assert_memory_equal(v.suggest, "atche", 5);
    le_destroy(le);
}

/* Enter submits the line and its suggestion goes with it: a stale one on the empty line would be
 * drawn, and Right would turn it into text (a rejected "/b" became the chat message "ench"). */
static void test_submit_clears_suggestion(void **state) {
    (void)state;
    le_t *le = make(64, 10);
    le_set_completer(le, word_completer, NULL);
    type(le, "/b");
    assert_string_equal(le_suggestion(le), "ench");
    key(le, LE_KEY_ENTER, LE_SUBMIT);
    assert_string_equal(le_submitted(le), "/b");
    assert_string_equal(le_suggestion(le), "");
    le_view_t v;
    le_render(le, 20, &v);
    assert_int_equal(v.suggest_len, 0);
    key(le, LE_KEY_RIGHT, LE_IGNORED);
    key(le, LE_KEY_END, LE_IGNORED);
    assert_string_equal(le_text(le), "");
    le_destroy(le);
}

static void test_horizontal_scroll(void **state) {
    (void)state;
    le_t *le = make(256, 10);
    type(le, "abcdefghijklmnopqrstuvwxyz0123");
    le_view_t v;
    le_render(le, 10, &v);
    /* The cursor at the end needs its own cell: the last 9 characters show. */
    assert_int_equal(v.cursor_col, 9);
    assert_int_equal(v.len, 9);
    assert_memory_equal(v.text, "vwxyz0123", 9);
    assert_true(v.more_left);
    assert_false(v.more_right);
    key(le, LE_KEY_HOME, LE_CHANGED);
    le_render(le, 10, &v);
    assert_int_equal(v.cursor_col, 0);
    assert_memory_equal(v.text, "abcdefghij", 10);
    assert_false(v.more_left);
    assert_true(v.more_right);
    /* Moving right keeps the slice until the cursor reaches the last column. */
    for (int i = 0; i < 9; i++)
        key(le, LE_KEY_RIGHT, LE_CHANGED);
    le_render(le, 10, &v);
    assert_int_equal(v.cursor_col, 9);
    assert_memory_equal(v.text, "abcdefghij", 10);
    key(le, LE_KEY_RIGHT, LE_CHANGED);
    le_render(le, 10, &v);
    assert_int_equal(v.cursor_col, 9);
    assert_memory_equal(v.text, "bcdefghijk", 10);
    /* When the line gets shorter the slice scrolls back to use the field. */
    key(le, LE_KEY_CTRL_K, LE_CHANGED);
    le_render(le, 10, &v);
    assert_int_equal(v.len, 9);
    assert_memory_equal(v.text, "bcdefghij", 9);
    for (int i = 0; i < 3; i++)
        key(le, LE_KEY_BACKSPACE, LE_CHANGED);
    le_render(le, 10, &v);
    assert_false(v.more_left);
    assert_int_equal(v.len, 7);
    assert_memory_equal(v.text, "abcdefg", 7);
    assert_int_equal(v.cursor_col, 7);

    /* Wide characters: a 2-column character never straddles the edge. */
    le_set_text(le, "\xE4\xB8\xAD\xE4\xB8\xAD\xE4\xB8\xAD\xE4\xB8\xAD\xE4\xB8\xAD"); /* 5 x 中 */
    le_render(le, 6, &v);
    assert_int_equal(v.cursor_col, 4); /* two wide characters before the cursor cell */
    assert_int_equal(v.len, 6);
    assert_int_equal(v.text_cols, 4);
    key(le, LE_KEY_HOME, LE_CHANGED);
    le_render(le, 5, &v);
    assert_int_equal(v.cursor_col, 0);
    assert_int_equal(v.text_cols, 4); /* the third would need columns 4-5 */
    assert_int_equal(v.len, 6);
    assert_true(v.more_right);
    /* Width 1 shows the cursor cell only. */
    le_set_text(le, "abc");
    le_render(le, 1, &v);
    assert_int_equal(v.cursor_col, 0);
    assert_int_equal(v.len, 0);
    key(le, LE_KEY_LEFT, LE_CHANGED);
    le_render(le, 1, &v);
    assert_int_equal(v.cursor_col, 0);
    assert_memory_equal(v.text, "c", 1);
    le_destroy(le);
}

static void test_capacity_and_paste(void **state) {
    (void)state;
    le_t *le = make(16, 10);
    type(le, "0123456789abcd");  /* 14 bytes */
    key(le, 0x4E2D, LE_IGNORED); /* 3 more bytes do not fit */
    type(le, "\xC3\xA9");        /* 2 do */
    key(le, 'x', LE_IGNORED);
    assert_int_equal(strlen(le_text(le)), 16);
    le_clear(le);
    /* A paste keeps line breaks, turns a tab into spaces, drops other control characters and
     * invalid bytes, and cuts at a character. */
    assert_int_equal(le_insert(le, "a\nb\t\xFF"
                                   "c\x01\xE4\xB8\xAD"),
                     LE_CHANGED);
    assert_string_equal(le_text(le), "a\nb    c\xE4\xB8\xAD");
    assert_int_equal(le_insert(le, "\x01\x02"), LE_IGNORED);
    assert_int_equal(le_insert(le, "012\xE4\xB8\xAD"), LE_CHANGED);
    assert_string_equal(le_text(le), "a\nb    c\xE4\xB8\xAD"
                                     "012");
    /* Yank that does not fit is cut the same way. */
    le_set_text(le, "0123456789abcdef");
    key(le, LE_KEY_HOME, LE_CHANGED);
    key(le, LE_KEY_CTRL_K, LE_CHANGED);
    type(le, "xy");
    key(le, LE_KEY_CTRL_Y, LE_CHANGED);
    assert_string_equal(le_text(le), "xy0123456789abcd");
    le_destroy(le);
}

/* A message of several lines: Alt-Enter and a paste put '\n' in the text (CR LF and CR from a
 * terminal's paste too); a newline is one column when rendered, so the cursor can stand on it;
 * moves, deletes and Ctrl-W treat it as a character and a blank; the submitted text keeps it and
 * the history file round-trips it (with backslashes) on one line. */
static void test_multiline(void **state) {
    (void)state;
    le_t *le = make(64, 10);
    type(le, "one");
    key(le, LE_KEY_NEWLINE, LE_CHANGED);
    type(le, "two");
    assert_string_equal(le_text(le), "one\ntwo");
    le_view_t v;
    le_render(le, 20, &v);
    assert_int_equal(v.len, 7);
    assert_int_equal(v.text_cols, 7);
    assert_int_equal(v.cursor_col, 7);
    for (int i = 0; i < 4; i++)
        key(le, LE_KEY_LEFT, LE_CHANGED);
    assert_int_equal(le_cursor(le), 3); /* on the newline */
    le_render(le, 20, &v);
    assert_int_equal(v.cursor_col, 3);
    key(le, LE_KEY_DELETE, LE_CHANGED);
    assert_string_equal(le_text(le), "onetwo");
    key(le, LE_KEY_NEWLINE, LE_CHANGED);
    key(le, LE_KEY_END, LE_CHANGED);
    key(le, LE_KEY_CTRL_W, LE_CHANGED); /* the word after the newline only */
    assert_string_equal(le_text(le), "one\n");
    key(le, LE_KEY_CTRL_W, LE_CHANGED);
    assert_string_equal(le_text(le), "");
    /* a terminal's paste: CR LF and CR are line breaks */
    assert_int_equal(le_insert(le, "first\r\nsecond\rthird \\ back"), LE_CHANGED);
    assert_string_equal(le_text(le), "first\nsecond\nthird \\ back");
    le_render(le, 10, &v); /* scrolled: the cursor at the end stays visible */
    assert_int_equal(v.cursor_col, 9);
    key(le, LE_KEY_ENTER, LE_SUBMIT);
    assert_string_equal(le_submitted(le), "first\nsecond\nthird \\ back");
    le_history_add(le, "single \\n line");

    char *dir = tu_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/history", dir);
    err_t err = {{0}};
    assert_int_equal(le_history_save(le, path, &err), 0);
    size_t n;
    char *text = tu_read(path, &n);
    assert_string_equal(text, "\x1e"
                              "first\\nsecond\\nthird \\\\ back\nsingle \\n line\n");
    free(text);
    le_t *back = make(64, 10);
    assert_int_equal(le_history_load(back, path, &err), 0);
    assert_int_equal(le_history_count(back), 2);
    assert_string_equal(le_history_at(back, 0), "first\nsecond\nthird \\ back");
    assert_string_equal(le_history_at(back, 1), "single \\n line");
    key(back, LE_KEY_UP, LE_CHANGED);
    key(back, LE_KEY_UP, LE_CHANGED);
    assert_string_equal(le_text(back), "first\nsecond\nthird \\ back");
    le_destroy(back);
    le_destroy(le);
    tu_rmrf(dir);
    free(dir);

    le = make(16, 10); /* no room: the newline is refused like any character */
    type(le, "0123456789abcdef");
    key(le, LE_KEY_NEWLINE, LE_IGNORED);
    le_destroy(le);
}

/* Random keys (ASCII, accents, combining marks, CJK, emoji and every binding) keep the line
 * valid UTF-8 with the cursor on a character boundary, and every rendering inside its field. */
static void test_random_keys_keep_invariants(void **state) {
    (void)state;
    static const int keys[] = {'a',
                               'b',
                               ' ',
                               '-',
                               0xE9,
                               0x301,
                               0x4E2D,
                               0x1F600,
                               0x200D,
                               LE_KEY_CTRL_A,
                               LE_KEY_CTRL_B,
                               LE_KEY_CTRL_D,
                               LE_KEY_CTRL_E,
                               LE_KEY_CTRL_F,
                               LE_KEY_CTRL_H,
                               LE_KEY_TAB,
                               LE_KEY_CTRL_K,
                               LE_KEY_ENTER,
                               LE_KEY_CTRL_N,
                               LE_KEY_CTRL_P,
                               LE_KEY_CTRL_U,
                               LE_KEY_CTRL_W,
                               LE_KEY_CTRL_Y,
                               LE_KEY_BACKSPACE,
                               LE_KEY_LEFT,
                               LE_KEY_RIGHT,
                               LE_KEY_UP,
                               LE_KEY_DOWN,
                               LE_KEY_HOME,
                               LE_KEY_END,
                               LE_KEY_DELETE,
                               LE_KEY_CTRL_LEFT,
                               LE_KEY_CTRL_RIGHT,
                               LE_KEY_ALT_B,
                               LE_KEY_ALT_F,
                               LE_KEY_NEWLINE};
    for (unsigned run = 0; run < 6; run++) {
        size_t cap = run % 2 ? 17 : 40;
        le_t *le = make(cap, 5);
        le_set_completer(le, word_completer, NULL);
        unsigned seed = 12345 + run;
        for (int step = 0; step < 20000; step++) {
            seed = seed * 1103515245u + 12345u;
            int k = keys[(seed >> 16) % (sizeof keys / sizeof keys[0])];
            le_result_t r = le_key(le, k);
            assert_true(r >= LE_IGNORED && r <= LE_CANDIDATES);
            const char *t = le_text(le);
            size_t len = strlen(t), cur = le_cursor(le);
            assert_true(len <= cap && cur <= len);
            assert_true(cur == len || ((unsigned char)t[cur] & 0xC0) != 0x80);
            utf8proc_int32_t cp;
            for (size_t i = 0; i < len;) {
                utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)t + i,
                                                      (utf8proc_ssize_t)(len - i), &cp);
                assert_true(n > 0 && (cp >= 0x20 || cp == '\n'));
                i += (size_t)n;
            }
            int width = 1 + (int)((seed >> 8) % 12);
            le_view_t v;
            le_render(le, width, &v);
            assert_true(v.text >= t && v.text + v.len <= t + len);
            assert_int_equal(v.text_cols, le_text_width(v.text, v.len));
            assert_true(v.cursor_col >= 0 && v.cursor_col <= width - 1);
            assert_true(v.text_cols <= width && v.text_cols + v.suggest_cols <= width);
            assert_true(v.text + v.len == t + len || v.more_right);
        }
        le_destroy(le);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_insert_and_cursor_ascii),
        cmocka_unit_test(test_utf8_multibyte_and_wide),
        cmocka_unit_test(test_combining_marks),
        cmocka_unit_test(test_word_moves),
        cmocka_unit_test(test_kill_and_yank),
        cmocka_unit_test(test_delete_backspace_eof),
        cmocka_unit_test(test_submit_and_history),
        cmocka_unit_test(test_history_file_round_trip),
        cmocka_unit_test(test_tab_completion),
        cmocka_unit_test(test_inline_suggestion),
        cmocka_unit_test(test_submit_clears_suggestion),
        cmocka_unit_test(test_horizontal_scroll),
        cmocka_unit_test(test_capacity_and_paste),
        cmocka_unit_test(test_multiline),
        cmocka_unit_test(test_random_keys_keep_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

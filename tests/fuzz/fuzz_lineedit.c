/*
 * The console's key input: the keyboard decoder (tui/input.c: bracketed paste, Alt- sequences,
 * curses keys) feeding the line editor (tui/lineedit.c: editing, history, completion, rendering)
 * as the console's UI loop does. The input is a key script, 3 bytes a key: a kind byte (bit 0:
 * a curses KEY_* code, bit 1: an idle gap after it, bits 3-7: the key's bits 16-20 when bit 2 is
 * set) and the key's low 16 bits, so any mix of code points (surrogates and beyond U+10FFFF
 * included), curses codes, paste markers and LE_KEY_* codes arrives. Properties (those lineedit.h
 * promises): the line is valid UTF-8 within max_bytes and without control characters other than
 * '\n', the cursor is on a character boundary inside it, and a rendered view fits its width.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "input.h"
#include "lineedit.h"

#define MAX_BYTES 64

static const char *const WORDS[] = {"/bench", "/flags", "/help", "/quit", "/set", "/settings"};

static int complete(void *user, const char *line, size_t cursor, le_completion_t *out) {
    size_t start = cursor;
    while (start > 0 && line[start - 1] != ' ')
        start--;
    out->start = start;
    for (size_t i = 0; i < sizeof WORDS / sizeof WORDS[0]; i++)
        if (!strncmp(WORDS[i], line + start, cursor - start)) out->cand[out->n++] = WORDS[i];
    out->best = out->n > 0 ? 0 : -1;
    out->space_after = true;
    return out->n;
}

static void check(le_t *le) {
    const char *t = le_text(le);
    size_t len = strlen(t), cur = le_cursor(le);
    FZ_CHECK(len <= MAX_BYTES, "line of %zu bytes", len);
    FZ_CHECK(fz_utf8_valid((const uint8_t *)t, len), "line not UTF-8");
    for (size_t i = 0; i < len; i++)
        FZ_CHECK((unsigned char)t[i] >= 0x20 || t[i] == '\n', "control byte %d", t[i]);
    FZ_CHECK(cur <= len && (cur == len || ((unsigned char)t[cur] & 0xC0) != 0x80),
             "cursor %zu in a %zu-byte line", cur, len);
    for (int width = 1; width <= 21; width += 10) {
        le_view_t v;
        le_render(le, width, &v);
        FZ_CHECK(v.text_cols + v.suggest_cols <= width && v.cursor_col < width,
                 "view of %d + %d columns, cursor %d, in %d", v.text_cols, v.suggest_cols,
                 v.cursor_col, width);
        FZ_CHECK(v.len == 0 || (v.text >= t && v.text + v.len <= t + len), "view outside");
    }
}

static void apply(le_t *le, const input_event_t *ev) {
    if (ev->kind == INPUT_PASTE) {
        char *s = fz_strndup((const uint8_t *)ev->text, ev->len);
        le_insert(le, s);
        free(s);
    } else if (ev->kind == INPUT_EDIT || (ev->kind == INPUT_KEY && !ev->curses_key)) {
        if (le_key(le, ev->key) == LE_SUBMIT) le_history_add(le, le_submitted(le));
    }
    check(le);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    err_t err;
    input_t *in = input_create(32, &err);
    le_t *le = le_create(MAX_BYTES, 4, &err);
    if (!in || !le) abort();
    le_set_completer(le, complete, NULL);
    double now = 0;
    for (size_t i = 0; i + 3 <= size; i += 3) {
        int key = data[i + 1] | data[i + 2] << 8;
        bool curses = data[i] & 1;
        if (curses)
            key = 0400 + key % 01700; /* KEY_MIN .. the paste markers */
        else if (data[i] & 4)
            key |= (data[i] >> 3) << 16;
        input_event_t ev[2];
        int n = input_feed(in, curses, key, now, ev);
        for (int k = 0; k < n; k++)
            apply(le, &ev[k]);
        now += data[i] & 2 ? 1.0 : 0.001;
        if (data[i] & 2) {
            n = input_idle(in, now, ev);
            for (int k = 0; k < n; k++)
                apply(le, &ev[k]);
        }
    }
    le_history_add(le, le_text(le));
    for (int i = 0; i < le_history_count(le); i++)
        FZ_CHECK(le_history_at(le, i) != NULL, "history entry %d missing", i);
    le_destroy(le);
    input_destroy(in);
    return 0;
}

/* input: see input.h. */
#include "input.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <curses.h>
#include <utf8proc.h>

#include "lineedit.h"

#define PASTE_TIMEOUT_S 1.0 /* a paste with no byte for this long has lost its end marker */

struct input {
    char *paste; /* [cap + 1] the paste being received */
    size_t len, cap;
    bool pasting, esc;
    double last;               /* s, when the last byte of the paste came */
    int ctrl_left, ctrl_right; /* the terminal's codes for them, 0 when it has none */
};

input_t *input_create(size_t max_paste, err_t *err) {
    input_t *in = calloc(1, sizeof *in);
    if (in) in->paste = malloc(max_paste + 1);
    if (!in || !in->paste || max_paste < 16) {
        input_destroy(in);
        err_set(err, "input: out of memory");
        return NULL;
    }
    in->cap = max_paste;
    return in;
}

void input_destroy(input_t *in) {
    if (!in) return;
    free(in->paste);
    free(in);
}

void input_start(input_t *in, FILE *out) {
    define_key("\033[200~", INPUT_KEY_PASTE_BEGIN);
    define_key("\033[201~", INPUT_KEY_PASTE_END);
    in->ctrl_left = key_defined("kLFT5");
    in->ctrl_right = key_defined("kRIT5");
    fputs("\033[?2004h", out);
    fflush(out);
}

void input_stop(input_t *in, FILE *out) {
    (void)in;
    fputs("\033[?2004l", out);
    fflush(out);
}

bool input_pasting(const input_t *in) {
    return in->pasting;
}

/* Appends code point cp to the paste (UTF-8), a line break for CR and LF; what does not fit is
 * dropped. */
static void paste_add(input_t *in, int cp) {
    if (cp == '\r') cp = '\n';
    utf8proc_uint8_t enc[4];
    utf8proc_ssize_t n = cp >= 0 && cp < 0x110000 ? utf8proc_encode_char(cp, enc) : 0;
    if (n <= 0) return;
    if (in->len + (size_t)n > in->cap) return;
    memcpy(in->paste + in->len, enc, (size_t)n);
    in->len += (size_t)n;
}

static int paste_end(input_t *in, input_event_t *ev) {
    in->pasting = false;
    in->paste[in->len] = '\0';
    *ev = (input_event_t){.kind = INPUT_PASTE, .text = in->paste, .len = in->len};
    return 1;
}

/* Curses' editing keys as the editor's codes; -1 for the console's own keys. */
static int edit_key(const input_t *in, int code) {
    switch (code) {
        case KEY_LEFT:
            return LE_KEY_LEFT;
        case KEY_RIGHT:
            return LE_KEY_RIGHT;
        case KEY_UP:
            return LE_KEY_UP;
        case KEY_DOWN:
            return LE_KEY_DOWN;
        case KEY_HOME:
            return LE_KEY_HOME;
        case KEY_END:
            return LE_KEY_END;
        case KEY_DC:
            return LE_KEY_DELETE;
        case KEY_BACKSPACE:
            return LE_KEY_BACKSPACE;
        case KEY_ENTER:
            return LE_KEY_ENTER;
        default:
            if (code == in->ctrl_left && code > 0) return LE_KEY_CTRL_LEFT;
            if (code == in->ctrl_right && code > 0) return LE_KEY_CTRL_RIGHT;
            return -1;
    }
}

/* One key with no ESC pending. */
static int key_event(input_t *in, bool is_key, int ch, input_event_t *ev) {
    if (is_key) {
        int k = edit_key(in, ch);
        *ev = (input_event_t){
            .kind = k >= 0 ? INPUT_EDIT : INPUT_KEY, .key = k >= 0 ? k : ch, .curses_key = k < 0};
        return 1;
    }
    if (ch == 27) {
        in->esc = true;
        return 0;
    }
    *ev = (input_event_t){.kind = INPUT_KEY, .key = ch};
    return 1;
}

int input_feed(input_t *in, bool is_key, int ch, double now, input_event_t ev[2]) {
    if (is_key && ch == INPUT_KEY_PASTE_BEGIN) {
        int n = 0;
        if (in->esc) ev[n++] = (input_event_t){.kind = INPUT_ESC};
        in->esc = false;
        in->pasting = true;
        in->len = 0;
        in->last = now;
        return n;
    }
    if (in->pasting) {
        in->last = now;
        if (is_key && ch == INPUT_KEY_PASTE_END) return paste_end(in, ev);
        if (!is_key) paste_add(in, ch); /* a curses key inside a paste is no text */
        return 0;
    }
    if (is_key && ch == INPUT_KEY_PASTE_END) return 0; /* an end without a start */
    if (!in->esc) return key_event(in, is_key, ch, ev);
    in->esc = false;
    if (!is_key) {
        int k = ch == '\r' || ch == '\n' ? LE_KEY_NEWLINE
                : ch == 'b'              ? LE_KEY_ALT_B
                : ch == 'f'              ? LE_KEY_ALT_F
                                         : -1;
        if (k >= 0) {
            ev[0] = (input_event_t){.kind = INPUT_EDIT, .key = k};
            return 1;
        }
    }
    ev[0] = (input_event_t){.kind = INPUT_ESC};
    return 1 + key_event(in, is_key, ch, ev + 1);
}

int input_idle(input_t *in, double now, input_event_t ev[1]) {
    if (in->pasting) return now - in->last >= PASTE_TIMEOUT_S ? paste_end(in, ev) : 0;
    if (!in->esc) return 0;
    in->esc = false;
    ev[0] = (input_event_t){.kind = INPUT_ESC};
    return 1;
}

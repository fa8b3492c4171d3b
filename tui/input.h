/*
 * input: the console's keyboard decoder, between curses' get_wch() and the line editor. It turns
 * what the terminal sends into input events:
 *
 *   - a bracketed paste (ESC [200~ text ESC [201~, which terminals send once the console asked
 *     for it with ESC [?2004h) becomes one INPUT_PASTE event with the whole text, line breaks
 *     included, so that a pasted multi-line prompt is one message and not one message per line;
 *   - ESC followed by Enter (Alt-Enter) is the editor's LE_KEY_NEWLINE, ESC b / ESC f (Alt-B,
 *     Alt-F) its word moves, a lone ESC is INPUT_ESC (stop the reply);
 *   - curses' cursor and editing keys become LE_KEY_* codes (INPUT_EDIT); every other key or
 *     code point is handed on as INPUT_KEY for the console (F1, PgUp, '?', Ctrl-L) or the editor.
 *
 *     input_t *in = input_create(REPL_LINE_MAX, &err);
 *     newterm(...); keypad(stdscr, TRUE);
 *     input_start(in, stdout);             // the paste markers as keys, paste mode on
 *     ... UI loop: for each get_wch() result
 *     input_event_t ev[2];
 *     int n = input_feed(in, rc == KEY_CODE_YES, ch, now, ev);   // 0, 1 or 2 events
 *     ... when get_wch() has nothing more:
 *     n = input_idle(in, now, ev);         // a lone ESC, or a paste whose end never came
 *     input_stop(in, stdout);              // paste mode off (before endwin)
 *     input_destroy(in);
 *
 * Only the UI thread uses it. The paste buffer is sized at input_create(); a longer paste is cut
 * at a character boundary (the editor would cut it anyway).
 */
#ifndef TACHYON_INPUT_H
#define TACHYON_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "err.h"

/* Key codes input_start() defines for the paste markers: far above curses' KEY_MAX (0777), past
 * the codes ncurses gives the terminal's extended keys (kLFT5, ...), counting up from it. */
#define INPUT_KEY_PASTE_BEGIN 02000
#define INPUT_KEY_PASTE_END   02001

typedef enum input_kind {
    INPUT_KEY,   /* key: a code point (curses_key false) or a curses KEY_* code (true) */
    INPUT_EDIT,  /* key: an LE_KEY_* code for the editor */
    INPUT_PASTE, /* text, len: the pasted text (owned by the decoder, valid until the next call) */
    INPUT_ESC,   /* a lone Esc */
} input_kind_t;

typedef struct input_event {
    input_kind_t kind;
    int key;
    bool curses_key;
    const char *text;
    size_t len;
} input_event_t;

typedef struct input input_t;

/* A decoder whose paste buffer holds max_paste bytes (>= 16). NULL with err set when out of
 * memory. The caller owns it (input_destroy). */
input_t *input_create(size_t max_paste, err_t *err);
void input_destroy(input_t *in); /* NULL is a no-op */

/* After newterm() and keypad(): defines the paste markers as keys (INPUT_KEY_PASTE_*), reads
 * the terminal's Ctrl-Left / Ctrl-Right codes, and writes ESC [?2004h to out (bracketed paste
 * on). */
void input_start(input_t *in, FILE *out);

/* Writes ESC [?2004l to out (bracketed paste off): before endwin(), so the shell gets its
 * terminal back as it was. */
void input_stop(input_t *in, FILE *out);

/* One get_wch() result (is_key: it returned KEY_CODE_YES) at time now (s). Fills ev[0..n) and
 * returns n (0 to 2: an ESC that turns out not to start an Alt key comes out before the key). */
int input_feed(input_t *in, bool is_key, int ch, double now, input_event_t ev[2]);

/* get_wch() has nothing more at time now: a pending ESC is a lone Esc, and a paste that has had
 * no byte for a second ends (its end marker was lost). Returns the events (0 or 1). */
int input_idle(input_t *in, double now, input_event_t ev[1]);

/* Whether a paste is being received (its end marker has not come yet). */
bool input_pasting(const input_t *in);

#endif

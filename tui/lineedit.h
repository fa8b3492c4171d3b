/*
 * lineedit: the console's REPL line editor. A pure state machine (no curses, no terminal): the
 * UI thread feeds it keys and draws what le_render() says. UTF-8 text with a cursor, display
 * widths from utf8proc (combining marks 0 columns, CJK and emoji 2), horizontal scrolling that
 * keeps the cursor visible, a kill buffer, bounded history with a save file, Tab completion
 * through a callback and a dimmed inline suggestion (the callback's best candidate).
 *
 * The text may span lines (a paste, Alt-Enter): it holds '\n', which is one column wide on the
 * one row the editor renders, where the caller draws a mark for it (the console draws "⏎"), so
 * a multi-line message stays one message with the cursor visible.
 *
 *     le_t *le = le_create(4096, 1000, &err);
 *     le_set_completer(le, repl_complete, &ctx);       // optional
 *     char path[4096];
 *     if (le_history_path(path, sizeof path, &err) == 0) le_history_load(le, path, &err);
 *     ...
 *     // UI thread, for each key from get_wch(): map curses keys to LE_KEY_*, pass text as is
 *     switch (le_key(le, key)) {
 *         case LE_SUBMIT: handle(le_submitted(le)); le_history_save(le, path, &err); break;
 *         case LE_EOF:    quit(); break;
 *         case LE_IGNORED: console_key(key); break;   // not an editor key: PgUp, F1, Esc, ...
 *         default: break;                            // LE_CHANGED, LE_CANDIDATES: redraw
 *     }
 *     le_view_t v;
 *     le_render(le, cols - prompt_cols, &v);
 *     // draw v.text (v.len bytes), then v.suggest dimmed, cursor at prompt_cols + v.cursor_col
 *     le_destroy(le);
 *
 * Keys. Printable text arrives as Unicode code points (what get_wch() returns with OK);
 * control characters are the ASCII codes (Ctrl-A = 1 ... Ctrl-Z = 26, Backspace 127), and
 * everything else (function and cursor keys, Alt combinations) uses the LE_KEY_* codes above
 * the Unicode range, which the console maps from curses' KEY_* values and ESC sequences.
 *
 * Bindings: Ctrl-A/Home, Ctrl-E/End; Ctrl-B/Left, Ctrl-F/Right (one character: a code point with
 * the zero-width marks that follow it); Alt-B/Ctrl-Left, Alt-F/Ctrl-Right (words: runs of
 * letters and digits); Ctrl-K kill to end; Ctrl-U kill to start; Ctrl-W kill the
 * whitespace-delimited word before the cursor; Ctrl-Y yank the last kill; Alt-Enter
 * (LE_KEY_NEWLINE) inserts a newline; Backspace/Ctrl-H;
 * Delete/Ctrl-D delete at the cursor (Ctrl-D on an empty line is LE_EOF; the Delete key never
 * is, so a stray Delete cannot end the session); Enter/Ctrl-J/Ctrl-M submit; Up/Ctrl-P and
 * Down/Ctrl-N walk the history (the line being edited is kept and comes back below the newest
 * entry); Tab completes; Right, Ctrl-F, End and Ctrl-E at the end of the line accept the inline
 * suggestion.
 *
 * Memory: the text, kill, saved-line and suggestion buffers are sized at le_create(); editing
 * and rendering never allocate. History entries are copied (one allocation per submitted line).
 * Not thread-safe: one thread (the UI thread) uses an editor.
 */
#ifndef TACHYON_LINEEDIT_H
#define TACHYON_LINEEDIT_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

/* Keys that are not text: control keys are their ASCII codes, the others sit above the Unicode
 * range, so that one int carries either a key or a code point. */
enum {
    LE_KEY_CTRL_A = 0x01,
    LE_KEY_CTRL_B = 0x02,
    LE_KEY_CTRL_D = 0x04,
    LE_KEY_CTRL_E = 0x05,
    LE_KEY_CTRL_F = 0x06,
    LE_KEY_CTRL_H = 0x08, /* Backspace on some terminals */
    LE_KEY_TAB = 0x09,
    LE_KEY_CTRL_J = 0x0a, /* Enter (newline) */
    LE_KEY_CTRL_K = 0x0b,
    LE_KEY_ENTER = 0x0d, /* Ctrl-M */
    LE_KEY_CTRL_N = 0x0e,
    LE_KEY_CTRL_P = 0x10,
    LE_KEY_CTRL_U = 0x15,
    LE_KEY_CTRL_W = 0x17,
    LE_KEY_CTRL_Y = 0x19,
    LE_KEY_BACKSPACE = 0x7f,

    LE_KEY_BASE = 0x110000,
    LE_KEY_LEFT = LE_KEY_BASE,
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
    LE_KEY_NEWLINE, /* Alt-Enter: a line break inside the message */
};

/* What a key did. */
typedef enum le_result {
    LE_IGNORED,    /* not an editor key (or nothing to do): the console may handle it */
    LE_CHANGED,    /* text, cursor or suggestion changed: redraw the line */
    LE_SUBMIT,     /* Enter: the line is in le_submitted(); the editor is empty again */
    LE_EOF,        /* Ctrl-D on an empty line */
    LE_CANDIDATES, /* Tab found several candidates: le_candidates() lists them */
} le_result_t;

#define LE_MAX_CANDIDATES 64

/* What a completion callback fills in. The candidates are whole replacements for the word
 * line[start, cursor) (not suffixes), sorted; they may point into static storage or into buf
 * (scratch space that belongs to this struct), never into the line itself. */
typedef struct le_completion {
    size_t start;                        /* byte offset where the word being completed begins */
    int n;                               /* candidates */
    const char *cand[LE_MAX_CANDIDATES]; /* sorted */
    int best;                            /* index of the inline suggestion, -1 = none */
    bool space_after;                    /* a unique completion is followed by a space */
    char buf[1024];                      /* storage the callback may point candidates into */
} le_completion_t;

/* Fills out for the text line[0, cursor) (line is NUL-terminated, cursor <= its length); out
 * arrives zeroed with best = -1. Returns the number of candidates (out->n), 0 for none. Called
 * on Tab and, for the suggestion, after every change that leaves the cursor at the end of a
 * non-empty line, so it must be quick and must not allocate. */
typedef int (*le_complete_fn)(void *user, const char *line, size_t cursor, le_completion_t *out);

/* What to draw for the line in a field of `width` columns. text/len is the visible slice of
 * the line (bytes, pointing into the editor: valid until the next call on it); each '\n' in it
 * takes one column, where the caller draws a newline mark. */
typedef struct le_view {
    const char *text;
    size_t len;
    int text_cols;       /* columns the slice takes (<= width) */
    int cursor_col;      /* cursor column in the field, 0 .. width-1 */
    const char *suggest; /* the part of the inline suggestion that fits after the text, */
    size_t suggest_len;  /* drawn dimmed; only when the cursor is at the end of the line */
    int suggest_cols;    /* columns it takes */
    bool more_left;      /* text is hidden left of the field (the console may mark it) */
    bool more_right;     /* text is hidden right of the field */
} le_view_t;

typedef struct le le_t;

/* A new empty editor whose line holds at most max_bytes bytes of UTF-8 (16 .. 16 MiB; longer
 * input is refused key by key) and whose history keeps the history_max most recent entries
 * (1 .. 1000000).
 * Returns NULL with err set on bad sizes or out of memory. The caller owns it (le_destroy). */
le_t *le_create(size_t max_bytes, int history_max, err_t *err);
void le_destroy(le_t *le); /* NULL is a no-op */

/* Sets the completion callback (NULL: none; Tab is then LE_IGNORED and there is no
 * suggestion). user is passed back to it. */
void le_set_completer(le_t *le, le_complete_fn fn, void *user);

/* Handles one key: a Unicode code point (printable: inserted at the cursor; other control
 * characters than the bound ones are LE_IGNORED) or an LE_KEY_* code. */
le_result_t le_key(le_t *le, int key);

/* Inserts UTF-8 text at the cursor as if typed (a paste): line breaks (LF, CR LF, CR) become
 * '\n', a tab four spaces, other control characters are dropped and invalid bytes skipped; what
 * does not fit in max_bytes is cut at a character boundary.
 * Returns LE_CHANGED, or LE_IGNORED when nothing was inserted. */
le_result_t le_insert(le_t *le, const char *text);

/* Replaces the line with text (sanitised as le_insert), cursor at its end. */
void le_set_text(le_t *le, const char *text);
void le_clear(le_t *le);

const char *le_text(const le_t *le); /* the current line, NUL-terminated, owned by le */
size_t le_cursor(const le_t *le);    /* cursor, byte offset into le_text() */

/* The line that the last LE_SUBMIT returned, NUL-terminated, owned by le, valid until the next
 * le_key that submits. "" before any. */
const char *le_submitted(const le_t *le);

/* The candidates of the last Tab that found several (sorted, owned by le), valid until the
 * next key; NULL with *n = 0 when the last key was not such a Tab. */
const char *const *le_candidates(const le_t *le, int *n);

/* The inline suggestion: the text that accepting it would insert at the end of the line ("" for
 * none). Owned by le, valid until the next key. */
const char *le_suggestion(const le_t *le);

/* Computes what to draw in a field of width columns (width >= 1; a width of 1 shows only the
 * cursor cell) and moves the horizontal scroll so that the cursor is visible. */
void le_render(le_t *le, int width, le_view_t *out);

/* Display columns of UTF-8 text (invalid bytes count 1 column each; control characters 0). */
int le_text_width(const char *s, size_t len);

/* History. le_key adds every submitted line except blank ones and a repeat of the newest entry;
 * le_history_add does the same for lines submitted some other way. The oldest entries drop out
 * beyond history_max. */
void le_history_add(le_t *le, const char *line);
int le_history_count(const le_t *le);
const char *le_history_at(const le_t *le, int i); /* 0 = oldest; NULL out of range */

/* Reads a history file (one entry per line, oldest first) into the history, after the entries
 * already there; lines that are not valid UTF-8 or hold control characters are skipped. A
 * multi-line entry is one line too: U+001E, then the text with '\\' written "\\\\" and '\n'
 * written "\\n" (older versions skip such lines). A file that does not exist is not an error
 * (returns 0). Returns -1 with err set on a read error. */
int le_history_load(le_t *le, const char *path, err_t *err);

/* Writes the history to path (replacing it through a temporary file and rename, so a crash
 * never leaves half a file). Returns -1 with err set on failure. */
int le_history_save(const le_t *le, const char *path, err_t *err);

/* The history file's path: $XDG_STATE_HOME/tachyon/history, or ~/.local/state/tachyon/history
 * when XDG_STATE_HOME is unset or empty (or not absolute, as the XDG spec says), creating the
 * directories (mode 0700). Returns -1 with err set when HOME is unknown, the path does not fit
 * in size, or a directory cannot be created. */
int le_history_path(char *buf, size_t size, err_t *err);

#endif

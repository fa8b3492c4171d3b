/*
 * ui_text: the console's chat and output pane as data: a bounded ring of styled logical lines
 * (the oldest drop out), appended to as replies stream in, and wrapped to the pane's width when
 * drawn. Pure: no curses; the console draws the rows ui_text_rows() yields.
 *
 *     ui_text_t *t = ui_text_create(5000, &err);
 *     ui_text_add(t, UI_TXT_USER, "> hello");             // a whole line
 *     ui_text_append(t, UI_TXT_REPLY, delta, len);        // streaming: '\n' starts a new line
 *     ui_text_end(t);                                      // the next append starts a new line
 *     ui_text_row_t rows[50];
 *     int n = ui_text_rows(t, width, 50, scroll, show_reasoning, rows);  // bottom-aligned
 *     ui_text_destroy(t);
 *
 * Memory: one allocation per line, grown while a line streams; drawing does not allocate.
 */
#ifndef TACHYON_UI_TEXT_H
#define TACHYON_UI_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

typedef enum ui_txt_style {
    UI_TXT_NORMAL,    /* command output */
    UI_TXT_USER,      /* the user's message */
    UI_TXT_REPLY,     /* the model's answer */
    UI_TXT_REASONING, /* the model's reasoning: dimmed, hidden when reasoning is collapsed */
    UI_TXT_FOLD,      /* stands for hidden reasoning: shown only when reasoning is collapsed */
    UI_TXT_INFO,      /* notes: dimmed */
    UI_TXT_ERROR,     /* problems */
    UI_TXT_PRE,       /* tables: wrapped at any character (not at spaces) when too wide */
    UI_TXT_TOOL,      /* a tool call the model made: its name and arguments */
    UI_TXT_BETTER,    /* a table row that is better (/compare): wrapped as UI_TXT_PRE */
    UI_TXT_WORSE,     /* a table row that is worse: wrapped as UI_TXT_PRE */
} ui_txt_style_t;

typedef struct ui_text ui_text_t;

/* One screen row: bytes [text, text + len) of a line, drawn in style. */
typedef struct ui_text_row {
    const char *text;
    size_t len;
    ui_txt_style_t style;
} ui_text_row_t;

/* A pane keeping the newest max_lines lines (>= 1). NULL with err set when out of memory. */
ui_text_t *ui_text_create(int max_lines, err_t *err);
void ui_text_destroy(ui_text_t *t); /* NULL is a no-op */

/* Appends text to the open line when it has this style, else opens a new line; each '\n' in
 * text ends the line (the rest goes on a new one of the same style). Returns -1 when out of
 * memory (what fitted is kept). */
int ui_text_append(ui_text_t *t, ui_txt_style_t style, const char *text, size_t len);

/* A whole line (or several, split at '\n'), closed after it. */
int ui_text_add(ui_text_t *t, ui_txt_style_t style, const char *text);
int ui_text_addf(ui_text_t *t, ui_txt_style_t style, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Closes the open line: the next append starts a new one even in the same style. */
void ui_text_end(ui_text_t *t);

void ui_text_clear(ui_text_t *t);
int ui_text_count(const ui_text_t *t); /* lines held */

/* The rows a pane of width columns and max_rows rows shows when scrolled up by `scroll` rows
 * (0 = the newest row at the bottom), oldest first in rows[0 .. return). Lines wrap at word
 * boundaries by display width (UI_TXT_PRE lines at any character); reasoning lines are left out
 * unless show_reasoning, fold lines unless not. *scroll is clamped so that the pane stays full
 * when there is enough text. */
int ui_text_rows(const ui_text_t *t, int width, int max_rows, int *scroll, bool show_reasoning,
                 ui_text_row_t *rows);

/* The byte length of the longest prefix of s[0, len) that fits in width columns and, when
 * wrapping, ends after a space where one exists (a word that is wider than the pane is cut).
 * Returns at least one character when len > 0 and width >= 1 (a wide character in a one-column
 * pane still takes a row). */
size_t ui_text_fit(const char *s, size_t len, int width, bool wrap_words);

#endif

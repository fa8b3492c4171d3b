/*
 * ui_header: the console's header row as data: its fields (served model name, server URL,
 * parallel layout, uptime, backend, model shape, ...) joined by " | ", fitted to the terminal's
 * width by leaving out the least important fields first, so that what a client needs (the URL
 * and the model name it must send) is the last to go. Pure: the console draws the text.
 *
 *     ui_header_field_t f[] = {
 *         {"Tachyon", 6, false, false}, {"qwen3-14b", 0, false, true},
 *         {"(dummy random weights)", 2, true, false}, {"http://127.0.0.1:8000", 0, false, false},
 *         {"Qwen3 14.8B, 40 layers", 9, false, false},
 *     };
 *     char line[512];
 *     ui_header_fit(f, 5, COLS - 1, false, line, sizeof line);
 *
 * Rank: rank-0 fields are always shown; then, lowest rank first, each other field that still
 * fits (so the highest ranks leave first, and a wide field left out does not keep a narrower,
 * less important one out). When the rank-0 fields alone are too wide, the one marked shorten
 * loses its beginning to an ellipsis ("…", "~" in ASCII), so the distinctive end of a long path
 * stays; past that the line is cut at the end.
 */
#ifndef TACHYON_UI_HEADER_H
#define TACHYON_UI_HEADER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ui_header_field {
    const char *text; /* UTF-8; NULL or "" is left out */
    int rank;         /* 0: never left out; higher: left out sooner */
    bool joined;      /* follows the previous field after a space instead of " | " */
    bool shorten;     /* may lose its beginning when the rank-0 fields do not fit */
} ui_header_field_t;

/* Writes the fields that fit in width columns (in their order) into out, NUL-terminated and cut
 * to size bytes at a character boundary. Returns the columns the text takes. */
int ui_header_fit(const ui_header_field_t *f, int n, int width, bool ascii, char *out, size_t size);

#endif

/*
 * textstream: a reply's deltas (engine/frontend.h) -> a terminal or a pipe, as they come.
 *
 * Prints the raw text, or the reasoning and the content the reply split (reasoning dimmed on a
 * terminal, or dropped), and keeps the whole raw reply for the conversation history.
 *
 *     textstream_t ts;
 *     textstream_init(&ts, stdout, TEXTSTREAM_SHOW_REASONING);
 *     while (fe_reply_wait(reply, &d, -1) > 0) textstream_push(&ts, &d);
 *     textstream_finish(&ts);      // ts.reply holds the whole reply
 *     textstream_free(&ts);
 */
#ifndef TACHYON_TEXTSTREAM_H
#define TACHYON_TEXTSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "frontend.h"

typedef enum textstream_mode {
    TEXTSTREAM_RAW,            /* print the raw text */
    TEXTSTREAM_SHOW_REASONING, /* reasoning dimmed when `out` is a terminal, then content */
    TEXTSTREAM_HIDE_REASONING, /* only the content */
} textstream_mode_t;

typedef struct textstream {
    FILE *out;
    textstream_mode_t mode;
    bool styled; /* out is a terminal and NO_COLOR is unset */
    bool dimmed; /* the dim attribute is on */
    char *reply; /* the whole reply, NUL-terminated */
    size_t reply_len, reply_cap;
} textstream_t;

/* Returns -1 when out of memory. */
int textstream_init(textstream_t *ts, FILE *out, textstream_mode_t mode);
int textstream_push(textstream_t *ts, const fe_delta_t *d);
int textstream_finish(textstream_t *ts);
void textstream_free(textstream_t *ts);

#endif

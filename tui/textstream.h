/*
 * textstream: a reply's text deltas -> a terminal or a pipe, as they come.
 *
 * Optionally splits reasoning from content (reasoning dimmed on a terminal, or dropped), and
 * keeps the whole reply for the conversation history.
 *
 *     textstream_t ts;
 *     textstream_init(&ts, stdout, TEXTSTREAM_SHOW_REASONING, prompt_ends_reasoning);
 *     for each delta: textstream_push(&ts, text, len);
 *     textstream_finish(&ts);      // ts.reply holds the whole reply
 *     textstream_free(&ts);
 */
#ifndef TACHYON_TEXTSTREAM_H
#define TACHYON_TEXTSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "chat.h"

typedef enum textstream_mode {
    TEXTSTREAM_RAW,            /* print the text as it is */
    TEXTSTREAM_SHOW_REASONING, /* split; reasoning dimmed when `out` is a terminal */
    TEXTSTREAM_HIDE_REASONING, /* split; print only content */
} textstream_mode_t;

typedef struct textstream {
    FILE *out;
    textstream_mode_t mode;
    bool styled; /* out is a terminal and NO_COLOR is unset */
    bool dimmed; /* the dim attribute is on */
    chat_reasoning_t *reasoning;
    char *reply; /* the whole reply, NUL-terminated */
    size_t reply_len, reply_cap;
} textstream_t;

/* Returns -1 when out of memory. */
int textstream_init(textstream_t *ts, FILE *out, textstream_mode_t mode, bool prompt_ends_reasoning);
int textstream_push(textstream_t *ts, const char *text, size_t len);
int textstream_finish(textstream_t *ts);
void textstream_free(textstream_t *ts);

#endif

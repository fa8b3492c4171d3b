/*
 * textstream: generated ids -> text on a terminal or a pipe, as they come.
 *
 * Decodes with the streaming detokenizer (never half a character), optionally splits reasoning
 * from content (shown dimmed on a terminal, or dropped), and keeps the whole decoded reply for
 * the conversation history.
 *
 *     textstream_t ts;
 *     textstream_init(&ts, tok, stdout, TEXTSTREAM_SHOW_REASONING, prompt_ends_reasoning);
 *     for each id: textstream_push(&ts, id);
 *     textstream_finish(&ts);      // ts.reply holds the whole decoded reply
 *     textstream_free(&ts);
 */
#ifndef TACHYON_TEXTSTREAM_H
#define TACHYON_TEXTSTREAM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "chat.h"
#include "tokenizer.h"

typedef enum textstream_mode {
    TEXTSTREAM_RAW,            /* print the decoded text as it is */
    TEXTSTREAM_SHOW_REASONING, /* split; reasoning dimmed when `out` is a terminal */
    TEXTSTREAM_HIDE_REASONING, /* split; print only content */
} textstream_mode_t;

typedef struct textstream {
    FILE *out;
    textstream_mode_t mode;
    bool styled; /* out is a terminal and NO_COLOR is unset */
    bool dimmed; /* the dim attribute is on */
    tok_stream_t *stream;
    chat_reasoning_t *reasoning;
    char *chunk; /* [tok_stream_max_chunk] */
    size_t chunk_cap;
    char *reply; /* the whole decoded reply, NUL-terminated */
    size_t reply_len, reply_cap;
} textstream_t;

/* Returns -1 when out of memory. */
int textstream_init(textstream_t *ts, const tokenizer_t *tok, FILE *out, textstream_mode_t mode,
                    bool prompt_ends_reasoning);
int textstream_push(textstream_t *ts, int32_t id);
int textstream_finish(textstream_t *ts);
void textstream_free(textstream_t *ts);

#endif

/*
 * conversation: the messages of one chat, owned, in the form engine/chat.h renders. The
 * line-mode chat and the console's chat both keep one.
 *
 *     conversation_t c = {0};
 *     conversation_reset(&c, system);             // the system message, when there is one
 *     conversation_add(&c, CHAT_USER, line);      // render c.msgs[0..c.n) with chat.h
 *     conversation_forget_last(&c);               // the turn failed: drop the user message
 *     conversation_free(&c);
 */
#ifndef TACHYON_CONVERSATION_H
#define TACHYON_CONVERSATION_H

#include <stddef.h>

#include "chat.h"

typedef struct conversation {
    chat_msg_t *msgs; /* [cap]; msgs[i].content points into texts[i] */
    char **texts;     /* [cap] owned copies of the contents */
    size_t n, cap;
} conversation_t;

/* Appends a message with a copy of text. -1 when out of memory (nothing added). */
int conversation_add(conversation_t *c, chat_role_t role, const char *text);

/* Drops the newest message (there must be one). */
void conversation_forget_last(conversation_t *c);

/* Empties the conversation, then adds the system message when system is not empty. -1 when out
 * of memory. */
int conversation_reset(conversation_t *c, const char *system);

/* Frees everything; the conversation is then empty and may be used again. */
void conversation_free(conversation_t *c);

#endif

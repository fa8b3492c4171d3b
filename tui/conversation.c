#include "conversation.h"

#include <stdlib.h>
#include <string.h>

int conversation_add(conversation_t *c, chat_role_t role, const char *text) {
    static const char *const names[] = {"system", "user", "assistant", "tool", "other"};
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        chat_msg_t *msgs = realloc(c->msgs, cap * sizeof *msgs);
        if (!msgs) return -1;
        c->msgs = msgs;
        char **texts = realloc(c->texts, cap * sizeof *texts);
        if (!texts) return -1;
        c->texts = texts;
        c->cap = cap;
    }
    char *copy = strdup(text);
    if (!copy) return -1;
    c->texts[c->n] = copy;
    c->msgs[c->n++] = (chat_msg_t){
        .role = role, .role_name = names[role], .content_kind = CHAT_CONTENT_TEXT, .content = copy};
    return 0;
}

void conversation_forget_last(conversation_t *c) {
    c->n--;
    free(c->texts[c->n]);
}

int conversation_reset(conversation_t *c, const char *system) {
    for (size_t i = 0; i < c->n; i++)
        free(c->texts[i]);
    c->n = 0;
    return system && *system ? conversation_add(c, CHAT_SYSTEM, system) : 0;
}

void conversation_free(conversation_t *c) {
    conversation_reset(c, NULL);
    free(c->msgs);
    free(c->texts);
    *c = (conversation_t){0};
}

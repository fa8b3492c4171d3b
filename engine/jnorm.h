/*
 * jnorm: an incremental JSON reader that writes what it reads as Python's json.dumps(json.loads(
 * text), ensure_ascii=False) would write it (separators ", " and ": ", strings re-escaped,
 * numbers as Python prints them back), as the bytes arrive. The tool-call parsers stream a call's
 * arguments through it, so that the pieces they send add up to the arguments vLLM returns.
 *
 *     jnorm_t j;
 *     jnorm_init(&j);
 *     j.out = &buf;                  // where normalized text goes (NULL: nowhere)
 *     for each byte c: if (jnorm_push(&j, c) == JN_ERROR) ... malformed ...
 *     if (j.state == JN_DONE) ...    // one whole value was read
 *
 * A reader owner may watch the state between bytes: at depth 1 of an object it learns each key
 * (key, complete once the state is JN_COLON) and can redirect `out` (or capture the decoded text
 * of a string value in `decoded`) before the value starts. Strings are written progressively
 * (their opening quote at once, their characters as escapes complete); numbers and literals when
 * complete. Duplicate keys are written as they come (json.loads would keep the last value).
 */
#ifndef TACHYON_JNORM_H
#define TACHYON_JNORM_H

#include <stdbool.h>
#include <stddef.h>

#include "json.h"

typedef enum jnorm_state {
    JN_VALUE,        /* a value is expected (skipping whitespace) */
    JN_VALUE_OR_END, /* after '[': a value or ']' */
    JN_KEY_OR_END,   /* after '{': a key or '}' */
    JN_KEY,          /* after ',' in an object: a key */
    JN_COLON,        /* after a key: ':' */
    JN_AFTER,        /* after a value inside a container: ',' or the closing bracket */
    JN_STRING,       /* inside a string */
    JN_ESCAPE,       /* after a backslash in a string */
    JN_UNICODE,      /* inside a \uXXXX escape */
    JN_NUMBER,       /* inside a number */
    JN_LITERAL,      /* inside true, false or null */
    JN_DONE,         /* one complete top-level value was read */
    JN_ERROR,        /* not JSON (stays so) */
} jnorm_state_t;

enum { JNORM_MAX_DEPTH = 64 };

typedef struct jnorm {
    jnorm_state_t state;
    int depth;                   /* open containers */
    char stack[JNORM_MAX_DEPTH]; /* '{' or '[' per level */
    bool in_key;                 /* the string being read is a key */
    char tok[64];                /* a number, literal or \u escape being read */
    int ntok;
    unsigned high;   /* a high surrogate waiting for its low half (0: none) */
    jbuf_t key;      /* the last key read at depth 1, decoded */
    jbuf_t *out;     /* normalized text goes here (NULL: discarded) */
    jbuf_t *decoded; /* the decoded characters of strings go here too (NULL: nowhere) */
} jnorm_t;

void jnorm_init(jnorm_t *j);
void jnorm_free(jnorm_t *j);

/* Reads one byte; returns the new state. */
jnorm_state_t jnorm_push(jnorm_t *j, char c);

/* The input ended: completes a top-level number (which only its end delimits). JN_DONE when a
 * whole value was read, else JN_ERROR. */
jnorm_state_t jnorm_end(jnorm_t *j);

/* True when no value is being read at depth <= 1 of a container: between members. */
static inline bool jnorm_between(const jnorm_t *j) {
    return j->state == JN_AFTER || j->state == JN_KEY || j->state == JN_KEY_OR_END ||
           j->state == JN_COLON;
}

#endif

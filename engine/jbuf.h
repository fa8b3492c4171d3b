/*
 * jbuf: a growable byte buffer with JSON writers, for responses, SSE chunks and rendered chat
 * prompts (engine/chat.c).
 *
 * The server writes every JSON document it sends with these appenders instead of building cJSON
 * trees, so that a streamed token costs a few appends into a buffer that is reused for the
 * whole request (it grows geometrically and is never shrunk). Running out of memory sets `oom`
 * and makes later appends no-ops: the writer checks it once at the end.
 *
 *     jbuf_t b;
 *     jb_init(&b);
 *     jb_lit(&b, "{\"text\":");
 *     jb_str(&b, text, len);          // quoted, escaped, invalid UTF-8 replaced by U+FFFD
 *     jb_lit(&b, "}");
 *     if (b.oom) ...
 *     jb_free(&b);
 */
#ifndef TACHYON_JBUF_H
#define TACHYON_JBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct jbuf {
    char *p;    /* [cap] bytes, NUL-terminated after len when not oom */
    size_t len; /* bytes written */
    size_t cap;
    bool oom;
} jbuf_t;

void jb_init(jbuf_t *b);
void jb_free(jbuf_t *b);

/* Forgets the contents (keeps the memory) and clears oom. */
void jb_reset(jbuf_t *b);

void jb_raw(jbuf_t *b, const char *s, size_t n);
/* A string literal or other NUL-terminated text, unescaped. */
void jb_lit(jbuf_t *b, const char *s);
void jb_printf(jbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The JSON escape of n bytes, without quotes: control characters as \uXXXX, and every maximal
 * invalid UTF-8 subpart as U+FFFD (Python's errors="replace"), so the output is always valid
 * JSON text whatever the input. */
void jb_esc(jbuf_t *b, const char *s, size_t n);
/* jb_esc between quotes. */
void jb_str(jbuf_t *b, const char *s, size_t n);
void jb_cstr(jbuf_t *b, const char *s); /* NULL writes null */

void jb_int(jbuf_t *b, long long v);
void jb_u64(jbuf_t *b, uint64_t v);
/* A finite double in the shortest %g form that reads back the same; -inf as -9999.0 (vLLM's
 * spelling of an impossible logprob), other non-finite values as null. */
void jb_double(jbuf_t *b, double v);

/* Writes the UTF-8 bytes of the U+FFFD-replaced form of s as a JSON array of integers
 * ("bytes" in OpenAI logprobs). */
void jb_bytes_array(jbuf_t *b, const char *s, size_t n);

/* True when s holds only valid UTF-8. */
bool jb_utf8_valid(const char *s, size_t n);

#endif

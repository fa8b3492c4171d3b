/*
 * sse: an incremental Server-Sent Events parser for streamed completions, fed the bytes of a
 * response as they arrive, cut anywhere (inside a line terminator, inside a UTF-8 sequence).
 *
 * Lines end in LF, CRLF or CR; a blank line ends a message. Comment lines (":" first) and fields
 * other than "data" are skipped; the "data" lines of a message are joined with "\n" and handed to
 * the callback once, without the "data:" prefix or its one optional space. "[DONE]" is handed on
 * like any other data (the caller ignores it). As vLLM's StreamedResponseHandler does, a message
 * whose terminating blank line has not arrived yet is handed on as soon as its single data line
 * holds "[DONE]" or a complete JSON object (the rest of that message is then dropped), and
 * bench_sse_finish applies the same rule to what is left at the end of the stream.
 *
 *     bench_sse_t s;
 *     if (bench_sse_init(&s, 4096) < 0) ...;
 *     for each received buffer: bench_sse_feed(&s, buf, len, on_message, user);
 *     bench_sse_finish(&s, on_message, user);
 *     bench_sse_free(&s);
 *
 * The buffer grows (doubling) only when a message is longer than its capacity, so a stream of
 * usual chunks allocates nothing after bench_sse_init.
 */
#ifndef TACHYON_BENCH_SSE_H
#define TACHYON_BENCH_SSE_H

#include <stdbool.h>
#include <stddef.h>

/* One message's data, NUL-terminated at data[len]; valid during the call only. A non-zero
 * return stops the feed and is returned by bench_sse_feed / bench_sse_finish. */
typedef int (*bench_sse_fn)(void *user, const char *data, size_t len);

typedef struct bench_sse {
    char *line; /* the current line, [line_len] bytes, capacity line_cap */
    size_t line_len, line_cap;
    char *data; /* the current message's joined data, [data_len] bytes, capacity data_cap */
    size_t data_len, data_cap;
    int n_data;    /* data lines in the current message */
    int n_lines;   /* non-blank lines in the current message */
    bool after_cr; /* the last byte was CR: an LF right after it ends nothing more */
    bool drop;     /* the message was handed on early: skip to its blank line */
    bool failed;   /* out of memory: everything after is dropped */
} bench_sse_t;

/* Sets up a parser whose buffers start at cap bytes each. 0, or -1 when out of memory. */
int bench_sse_init(bench_sse_t *s, size_t cap);

/* Frees the buffers; s may be zeroed or already freed. */
void bench_sse_free(bench_sse_t *s);

/* Forgets any partial message (for the next response on the same parser). */
void bench_sse_reset(bench_sse_t *s);

/* Parses n more bytes, calling fn for each complete message. Returns 0, fn's non-zero return,
 * or -1 when out of memory. */
int bench_sse_feed(bench_sse_t *s, const char *bytes, size_t n, bench_sse_fn fn, void *user);

/* End of stream: hands on the unterminated last message if it is "[DONE]" or a complete JSON
 * value (the trailing-buffer rule), drops anything else, and resets the parser. */
int bench_sse_finish(bench_sse_t *s, bench_sse_fn fn, void *user);

/* Small allocation-free JSON readers for the messages (the client reads a few fields of every
 * streamed chunk and must not build a tree per token). */

/* Whether text[0..len) is exactly one JSON value, optionally surrounded by whitespace; nesting
 * deeper than 64 counts as invalid. */
bool bench_sse_json_valid(const char *text, size_t len);

/* The value of key in the top-level JSON object text[0..len): returns its first byte and sets
 * *vlen, or NULL when text is not an object or has no such key (keys are compared byte for
 * byte, escapes are not decoded). */
const char *bench_sse_json_get(const char *text, size_t len, const char *key, size_t *vlen);

/* The first element of the JSON array v[0..vlen): returns its first byte and sets *elen, or NULL
 * when v is not an array or is empty. */
const char *bench_sse_json_first(const char *v, size_t vlen, size_t *elen);

/* Whether the value v[0..vlen) is a non-empty JSON array. */
bool bench_sse_json_nonempty_array(const char *v, size_t vlen);

/* The integer value v[0..vlen) into *out; false when it is not a whole number. */
bool bench_sse_json_int(const char *v, size_t vlen, long long *out);

#endif

/*
 * json: JSON in and out. In: json_parse, cJSON with what cJSON alone loses kept (the spelling of
 * every number, the length of every string that holds U+0000), and what it lets through refused
 * (control characters in strings, data after the document). Out: jbuf, a growable byte buffer
 * with JSON writers, for responses, SSE chunks and rendered chat prompts (engine/chat.c).
 *
 *     cJSON *req = json_parse(body, body_len, &err);   // NULL + err.msg on invalid JSON
 *     const cJSON *p = cJSON_GetObjectItemCaseSensitive(req, "prompt");
 *     size_t len = json_strlen(p);                      // bytes, U+0000 included
 *     cJSON_Delete(req);
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
#ifndef TACHYON_JSON_H
#define TACHYON_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "err.h"

// ---------------------------------------------------------------------------------------------
// Parsing

/* Parses one JSON document of len bytes (RFC 8259: only whitespace may follow it; a raw control
 * character inside a string is an error, as in Python's json.loads). Every number node keeps its
 * spelling in valuestring (so 5 and 5.0 stay apart and big integers exact); every string node
 * that holds U+0000 (written \u0000) keeps its byte length for json_strlen. An object key that
 * holds U+0000 is refused: cJSON would cut it and match it against another key. So is a \u
 * escape of an unpaired UTF-16 surrogate ("\ud800" alone), which RFC 8259's grammar and Python
 * take but which has no UTF-8: an invalid-JSON error at its byte. A key given twice keeps its last
 * value at its first place, as in Python. The caller frees the result with cJSON_Delete. */
cJSON *json_parse(const char *text, size_t len, err_t *err);

/* Reads the file at path and parses it as json_parse does. NULL with a message that does not
 * name the file (the caller adds what it is for): "cannot be read: <reason>" or json_parse's. */
cJSON *json_parse_file(const char *path, err_t *err);

/* The byte length of a string node's valuestring, U+0000 bytes included; 0 for NULL or a
 * node that is not a string. Strings made by cJSON_CreateString have no NUL inside: strlen. */
size_t json_strlen(const cJSON *item);

/* True when the string node holds U+0000 (its C string would cut the text short). */
bool json_has_nul(const cJSON *item);

// ---------------------------------------------------------------------------------------------
// Writing

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

// ---------------------------------------------------------------------------------------------
// Python's json.dumps(..., ensure_ascii=False) and str(), as transformers' tojson filter and
// vLLM's tool-call arguments write JSON: separators ", " and ": ", keys in document order with a
// Python dict's view of duplicates (the first key's position, the last key's value), numbers as
// Python reads and writes them back (json_parse keeps their spellings: 1.0 stays 1.0, 1e5 is
// 100000.0, big integers stay exact). Number conversions run under the C locale.

void jb_py_dumps(jbuf_t *b, const cJSON *item);
/* json.dumps of n bytes of text (U+0000 included): only " \ and control characters escaped. */
void jb_py_string(jbuf_t *b, const char *s, size_t n);
/* str() of a scalar (Jinja's `string` filter): strings as they are, True/False/None. */
void jb_py_str(jbuf_t *b, const cJSON *item);
/* json.dumps(json.loads(spelling)) of a valid JSON number's spelling. */
void jb_py_number_text(jbuf_t *b, const char *spelling, size_t n);
/* repr(float) as json.dumps writes it (Infinity, NaN), or as str() does (inf, nan). */
void jb_py_float(jbuf_t *b, double v, bool json);

/* Python dict semantics over a cJSON object's members. */
bool json_key_seen_before(const cJSON *obj, const cJSON *item);
const cJSON *json_key_last_value(const cJSON *item);

#endif /* TACHYON_JSON_H */

/*
 * The tokenizer's decoding half: tok_decode (token bytes concatenated, invalid UTF-8 replaced
 * as Python's errors="replace" does) and the streaming decoder, which gives the same text chunk
 * by chunk without ever ending a chunk inside a character.
 */
#include <stdlib.h>

#include "copy_small.h"
#include "tokenizer_internal.h"
#include "utf8.h"

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Appends s with each ill-formed subpart replaced by U+FFFD (an unfinished character at the
 * end included), as bytes.decode("utf-8", "replace") does. */
int tok_utf8_replace(const uint8_t *s, size_t n, jbuf_t *out) {
    size_t i = 0, len;
    while (i < n) {
        size_t start = i;
        while (i < n && s[i] < 0x80)
            i++;
        if (tok_put(out, s + start, i - start) < 0) return -1;
        if (i >= n) break;
        int k = utf8_class(s + i, n - i, &len);
        if (tok_put(out, k == U8_OK ? (const char *)s + i : REPLACEMENT, k == U8_OK ? len : 3) < 0)
            return -1;
        i += len;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding */

/* Whether a token with flags f is decoded to text. */
static bool decodes_flags(uint16_t f, bool skip_special) {
    return (f & TF_VALID) && !(skip_special && (f & TF_SPECIAL));
}

static bool decodes(const tokenizer_t *tok, int32_t id, bool skip_special) {
    return decodes_flags(id_flags(tok, id), skip_special);
}

int tok_decode(const tokenizer_t *tok, const int32_t *ids, size_t n, bool skip_special, char **text,
               size_t *len, err_t *err) {
    *text = NULL;
    *len = 0;
    jbuf_t raw = {0}, out = {0};
    for (size_t i = 0; i < n; i++) {
        if (!decodes(tok, ids[i], skip_special)) continue;
        span_t b = tok->bytes[ids[i]];
        if (tok_put(&raw, tstr(tok, b), b.len) < 0) goto oom;
    }
    if (tok_utf8_replace((const uint8_t *)raw.p, raw.len, &out) < 0 || tok_put(&out, "", 1) < 0)
        goto oom;
    free(raw.p);
    *text = out.p;
    *len = out.len - 1;
    return 0;
oom:
    free(raw.p);
    free(out.p);
    return err_set(err, "out of memory");
}

struct tok_stream {
    const tokenizer_t *tok;
    bool skip_special;
    uint8_t pending[4]; /* the start of an unfinished character */
    size_t n_pending;
};

tok_stream_t *tok_stream_create(const tokenizer_t *tok, bool skip_special) {
    tok_stream_t *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->tok = tok;
    st->skip_special = skip_special;
    return st;
}

void tok_stream_destroy(tok_stream_t *st) {
    free(st);
}

void tok_stream_reset(tok_stream_t *st) {
    st->n_pending = 0;
}

size_t tok_stream_max_chunk(const tokenizer_t *tok) {
    /* Every byte may become a 3-byte U+FFFD. */
    return 3 * (tok->max_token_bytes + 3) + 1;
}

/* Appends n bytes to out[*o..cap); false when they do not fit. */
static bool put_bytes(char *out, size_t cap, size_t *o, const void *src, size_t n) {
    if (n > cap - *o) return false;
    copy_small(out + *o, src, n);
    *o += n;
    return true;
}

/* Keeps the n <= 3 bytes that start an unfinished character (no library call). */
static void keep_start(uint8_t *dst, const uint8_t *src, size_t n) {
    for (size_t j = 0; j < 3; j++)
        if (j < n) dst[j] = src[j];
}

/* The text the pending bytes and the token s[0..n) make: first the characters that start in
 * the pending bytes (completed by at most the token's first three bytes, which is enough to
 * see how any character ends), then the token's own, classified in place and copied a run of
 * well-formed characters at a time. State changes only when everything fits. Kept out of line
 * so that the common case in tok_stream_push stays a few instructions. */
static __attribute__((noinline)) int push_joined(tok_stream_t *st, const uint8_t *s, size_t n,
                                                 uint16_t f, char *out, size_t cap,
                                                 size_t *out_len) {
    size_t o = 0, i = 0, len;
    /* pending + the token's start; what stays pending. Fixed-size copies of a few bytes: no
     * library call. */
    uint8_t joined[8] = {0}, left[4] = {0};
    size_t np = st->n_pending, n_left = 0;
    if (np > 0) {
        size_t k = n < 3 ? n : 3, at = 0;
        memcpy(joined, st->pending, 4);
        keep_start(joined + np, s, k); /* np <= 3: within the 8 bytes */
        while (at < np) {
            int cls = utf8_class(joined + at, np + k - at, &len);
            if (cls == U8_SHORT) { /* only when the whole token is in joined (n < 3) */
                n_left = np + k - at;
                keep_start(left, joined + at, n_left);
                goto done;
            }
            if (!put_bytes(out, cap, &o, cls == U8_OK ? joined + at : (const uint8_t *)REPLACEMENT,
                           cls == U8_OK ? len : 3))
                return -1;
            at += len;
        }
        i = at - np; /* within the token's leading continuation bytes */
    }
    if (f & TF_SHAPED) { /* stray continuation bytes, whole characters, a character's start */
        size_t head = (f >> TF_HEAD_SHIFT) & 3, tail = (f >> TF_TAIL_SHIFT) & 3;
        for (; i < head; i++)
            if (!put_bytes(out, cap, &o, REPLACEMENT, 3)) return -1;
        if (!put_bytes(out, cap, &o, s + i, n - tail - i)) return -1;
        n_left = tail;
        keep_start(left, s + n - tail, tail);
        goto done;
    }
    size_t run = i; /* the start of the well-formed characters not copied yet */
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int cls = utf8_class(s + i, n - i, &len);
        if (cls == U8_OK) {
            i += len;
            continue;
        }
        if (!put_bytes(out, cap, &o, s + run, i - run)) return -1;
        if (cls == U8_SHORT) {
            n_left = n - i;
            keep_start(left, s + i, n_left);
        } else if (!put_bytes(out, cap, &o, REPLACEMENT, 3)) {
            return -1;
        }
        i += len;
        run = i;
    }
    if (!put_bytes(out, cap, &o, s + run, i - run)) return -1;
done:
    memcpy(st->pending, left, 4);
    st->n_pending = n_left;
    *out_len = o;
    return 0;
}

int tok_stream_push(tok_stream_t *st, int32_t id, char *out, size_t cap, size_t *out_len) {
    const tokenizer_t *tok = st->tok;
    uint16_t f = id_flags(tok, id);
    *out_len = 0;
    if (!decodes_flags(f, st->skip_special)) return 0;
    span_t b = tok->bytes[id];
    if (st->n_pending == 0 && (f & TF_WHOLE_UTF8)) { /* the common case */
        if (b.len > cap) return -1;
        copy_small(out, tstr(tok, b), b.len);
        *out_len = b.len;
        return 0;
    }
    return push_joined(st, (const uint8_t *)tstr(tok, b), b.len, f, out, cap, out_len);
}

int tok_stream_finish(tok_stream_t *st, char *out, size_t cap, size_t *out_len) {
    *out_len = 0;
    if (!st->n_pending) return 0;
    if (cap < 3) return -1;
    memcpy(out, REPLACEMENT, 3);
    *out_len = 3;
    st->n_pending = 0;
    return 0;
}

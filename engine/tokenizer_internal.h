/*
 * tokenizer_internal: the tokenizer's tables and what its three files share. Private to the
 * tokenizer (engine/tokenizer.h is its interface):
 *
 *     tokenizer_load.c   tokenizer.json (+ tokenizer_config.json) -> these tables; the lookups
 *     tokenizer.c        encoding: added tokens cut out, NFC, the pre-tokenizer regexes, BPE
 *     tokenizer_detok.c  decoding: tok_decode and the streaming decoder (tok_stream_*)
 *
 * The helpers the encoder's and the streaming decoder's hot paths call (merge_get, strmap_get,
 * hash_bytes, id_flags, utf8_at) are inline here, so that the split costs those paths no call.
 */
#ifndef TACHYON_TOKENIZER_INTERNAL_H
#define TACHYON_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "json.h"
#include "tokenizer.h"

#define MAX_STAGES      8
#define CACHE_WORD_MAX  256 /* HF caches words shorter than 256 bytes */
#define CACHE_ENTRIES   16384
#define CACHE_KEY_BYTES (1u << 20)
#define CACHE_IDS       (1u << 18)

/* TF_WHOLE_UTF8: the token's bytes are whole, well-formed characters, so the streaming decoder
 * can copy them straight through when it holds nothing back (most tokens of any script).
 * Otherwise TF_SHAPED: the bytes are up to 3 continuation bytes (the end of a character begun
 * by earlier tokens), whole characters, then up to 3 bytes that begin a character; the two
 * counts are in the bits at TF_HEAD_SHIFT and TF_TAIL_SHIFT. Byte-level vocabularies split
 * multi-byte characters this way, and the decoder then classifies only the ends. */
enum { TF_VALID = 1, TF_ADDED = 2, TF_SPECIAL = 4, TF_WHOLE_UTF8 = 8, TF_SHAPED = 16 };
enum { TF_HEAD_SHIFT = 5, TF_TAIL_SHIFT = 7 }; /* 2 bits each */

typedef struct span {
    uint32_t off, len;
} span_t;

/* String -> value (an id, or an index into the added tokens). Slots hold value + 1, 0 = empty;
 * the keys live in the tokenizer and `key` finds the one of a value. */
typedef struct strmap {
    uint32_t *slots;
    uint32_t mask;
    span_t (*key)(const struct tokenizer *tok, uint32_t value);
} strmap_t;

typedef struct merge {
    uint64_t key; /* left id << 32 | right id; UINT64_MAX = empty */
    int32_t rank; /* line in merges: lower merges first */
    int32_t id;   /* the merged token */
} merge_t;

typedef struct added {
    int32_t id;
    span_t content; /* as written */
    span_t match;   /* what is searched: content, NFC-normalized for normalized tokens */
    bool single_word, lstrip, rstrip, normalized, special;
} added_t;

/* Added tokens searched in one pass, grouped by first byte, longest first in each group. */
typedef struct matcher {
    int *order; /* indices into tok->added */
    int n;
    int first[256], count[256];
} matcher_t;

typedef struct stage {
    pcre2_code *re; /* NULL: ByteLevel without regex (bytes are mapped in bpe_word) */
} stage_t;

typedef struct cache_entry {
    uint64_t hash;
    uint32_t key_off, key_len, ids_off, n_ids;
} cache_entry_t;

/* Words already merged, shared by all threads. Cleared when full. */
typedef struct cache {
    pthread_mutex_t mu;
    uint32_t *slots; /* entry index + 1, 0 = empty; 2 * CACHE_ENTRIES */
    cache_entry_t *entries;
    uint32_t n;
    uint8_t *keys;
    uint32_t keys_len;
    int32_t *ids;
    uint32_t ids_len;
} cache_t;

struct tokenizer {
    char *name;      /* tokenizer.json path, for messages */
    jbuf_t arena;    /* every string, NUL-terminated, addressed by span_t */
    int32_t n_ids;   /* 1 + largest id */
    span_t *str;     /* [n_ids] token as tokenizer.json spells it (normalized added tokens:
                        normalized, as HF prints them), NUL-terminated in arena */
    span_t *bytes;   /* [n_ids] bytes it decodes to */
    uint16_t *flags; /* [n_ids] TF_* */
    size_t max_token_bytes;
    int32_t n_model; /* entries in model.vocab */

    strmap_t vocab; /* model vocabulary */
    merge_t *merges;
    uint64_t merge_mask;
    uint16_t byte_cp[256]; /* GPT-2 byte-level character of each byte */
    int32_t byte_id[256];  /* vocab id of each byte's byte-level character; -1 if absent */
    int32_t unk_id;        /* -1: unknown characters are dropped, as HF does without unk */
    bool fuse_unk, ignore_merges;

    added_t *added;
    int n_added, cap_added;
    strmap_t added_map;
    matcher_t raw_match, norm_match;

    bool nfc;
    stage_t stages[MAX_STAGES];
    int n_stages;

    int32_t eos, bos, pad;
    cache_t *cache;
};

/* jb_raw with the error as a return value, for chains of `if (tok_put(...) < 0)`. Appends that
 * fit are done inline (as jb_raw does them: the bytes, then the NUL after len): the NFC loop
 * appends twice per chunk of text, and a call each would cost the encoder ~0.2%. */
static inline int tok_put(jbuf_t *b, const void *data, size_t n) {
    if (!b->oom && b->len + n < b->cap) {
        if (n) memcpy(b->p + b->len, data, n);
        b->len += n;
        b->p[b->len] = '\0';
        return 0;
    }
    jb_raw(b, (const char *)data, n);
    return b->oom ? -1 : 0;
}

static inline const char *tstr(const tokenizer_t *tok, span_t s) {
    return tok->arena.p + s.off;
}

static inline uint64_t hash_bytes(const void *data, size_t n) {
    const uint8_t *s = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return h;
}

static inline int32_t strmap_get(const tokenizer_t *tok, const strmap_t *m, const void *key,
                                 size_t n) {
    if (!m->slots) return -1;
    for (uint32_t i = (uint32_t)hash_bytes(key, n) & m->mask;; i = (i + 1) & m->mask) {
        uint32_t v = m->slots[i];
        if (!v) return -1;
        span_t s = m->key(tok, v - 1);
        if (s.len == n && memcmp(tstr(tok, s), key, n) == 0) return (int32_t)(v - 1);
    }
}

static inline uint64_t merge_slot(uint64_t key, uint64_t mask) {
    return ((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

static inline const merge_t *merge_get(const tokenizer_t *tok, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t i = merge_slot(key, tok->merge_mask);; i = (i + 1) & tok->merge_mask) {
        const merge_t *m = &tok->merges[i];
        if (m->key == key) return m;
        if (m->key == UINT64_MAX) return NULL;
    }
}

/* An id's flags; 0 (not even TF_VALID) for one that names no token. */
static inline uint16_t id_flags(const tokenizer_t *tok, int32_t id) {
    return (uint32_t)id < (uint32_t)tok->n_ids ? tok->flags[id] : 0;
}

/* The code point at s (valid UTF-8) and its length. */
static inline int32_t utf8_at(const uint8_t *s, size_t *len) {
    if (s[0] < 0x80) {
        *len = 1;
        return s[0];
    }
    if (s[0] < 0xE0) {
        *len = 2;
        return (s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    }
    if (s[0] < 0xF0) {
        *len = 3;
        return (s[0] & 0x0F) << 12 | (s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    }
    *len = 4;
    return (s[0] & 0x07) << 18 | (s[1] & 0x3F) << 12 | (s[2] & 0x3F) << 6 | (s[3] & 0x3F);
}

/* Writes code point cp (< U+10000) as UTF-8 to o; returns its length. */
static inline size_t utf8_put(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | cp >> 6);
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    o[0] = (uint8_t)(0xE0 | cp >> 12);
    o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (uint8_t)(0x80 | (cp & 0x3F));
    return 3;
}

/* tokenizer.c: NFC of valid UTF-8; *out is NULL when s is already NFC (nothing allocated). */
int tok_nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *out_len);
/* tokenizer.c: the encoder's word cache (shared by all threads). */
cache_t *tok_cache_create(void);
void tok_cache_destroy(cache_t *c);
/* tokenizer_detok.c: appends s with each ill-formed subpart replaced by U+FFFD. */
int tok_utf8_replace(const uint8_t *s, size_t n, jbuf_t *out);

#endif

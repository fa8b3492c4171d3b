/*
 * The tokenizer's encoding half, HF's pipeline (tokenizer.h): added tokens cut out of the raw
 * text, the rest NFC-normalized when the file says so and searched for normalized added tokens,
 * split by the pre-tokenizer regexes, and each piece merged by BPE rank (words shorter than
 * CACHE_WORD_MAX bytes cached, shared by all threads).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>

#include "tokenizer_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* Characters */

/* Rust's char::is_whitespace / regex \s: the White_Space property. */
static bool is_white_space(int32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* Rust regex's Unicode \w (Alphabetic, marks, decimal digits, connector punctuation,
 * Join_Control), which HF uses for single_word added tokens. Alphabetic is approximated by
 * letters, letter numbers and the Other_Alphabetic symbols (circled and squared letters). */
static bool is_word_char(int32_t c) {
    switch (utf8proc_category(c)) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO:
        case UTF8PROC_CATEGORY_NL:
        case UTF8PROC_CATEGORY_MN:
        case UTF8PROC_CATEGORY_MC:
        case UTF8PROC_CATEGORY_ME:
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_PC:
            return true;
        default:
            return c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) ||
                   (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
                   (c >= 0x1F170 && c <= 0x1F189);
    }
}

/* The code point that ends at s[n-1] (valid UTF-8, n >= 1). */
static int32_t utf8_before(const uint8_t *s, size_t n) {
    size_t i = n - 1, len;
    while (i > 0 && (s[i] & 0xC0) == 0x80)
        i--;
    return utf8_at(s + i, &len);
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding */

typedef struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
} sym_t;

typedef struct cand {
    int32_t rank, pos, id;
} cand_t;

/* Per-call scratch space. */
typedef struct enc {
    const tokenizer_t *tok;
    int32_t *ids;
    size_t n_ids, cap_ids;
    sym_t *syms;
    cand_t *heap;
    size_t cap_syms, cap_heap;
    pcre2_match_data *md;
    pcre2_match_context *mctx; /* the interpreter's limits for long subjects (made on demand) */
    jbuf_t mapped;             /* a word in byte-level form (ignore_merges) */
    bool failed;               /* out of memory or a regex error, message in msg */
    char msg[256];
} enc_t;

static int enc_fail(enc_t *e, const char *msg) {
    if (!e->failed) snprintf(e->msg, sizeof e->msg, "%s", msg);
    e->failed = true;
    return -1;
}

static int emit(enc_t *e, int32_t id) {
    if (e->n_ids == e->cap_ids) {
        size_t cap = e->cap_ids ? 2 * e->cap_ids : 256;
        int32_t *p = realloc(e->ids, cap * sizeof *p);
        if (!p) return enc_fail(e, "out of memory");
        e->ids = p;
        e->cap_ids = cap;
    }
    e->ids[e->n_ids++] = id;
    return 0;
}

static bool cand_less(cand_t a, cand_t b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void heap_push(cand_t *h, size_t *n, cand_t c) {
    size_t i = (*n)++;
    while (i > 0 && cand_less(c, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static cand_t heap_pop(cand_t *h, size_t *n) {
    cand_t top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(h[c + 1], h[c])) c++;
        if (!cand_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

static void push_pair(enc_t *e, size_t *nh, int32_t pos) {
    const sym_t *s = e->syms;
    if (pos < 0 || s[pos].next < 0) return;
    const merge_t *m = merge_get(e->tok, s[pos].id, s[s[pos].next].id);
    if (m) heap_push(e->heap, nh, (cand_t){m->rank, pos, m->id});
}

/* BPE of one pre-token (its raw bytes), appending the ids: lowest merge rank first, leftmost
 * first among equal ranks (HF Word::merge_all). O(n log n) in the word's length. */
static int bpe_merge(enc_t *e, const uint8_t *w, size_t n) {
    const tokenizer_t *tok = e->tok;
    if (n > e->cap_syms) {
        size_t cap = n < 64 ? 64 : n;
        sym_t *s = realloc(e->syms, cap * sizeof *s);
        if (s) e->syms = s;
        cand_t *h = realloc(e->heap, 3 * cap * sizeof *h);
        if (h) e->heap = h;
        if (!s || !h) return enc_fail(e, "out of memory");
        e->cap_syms = cap;
    }
    sym_t *s = e->syms;
    int32_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = tok->byte_id[w[i]];
        if (id < 0) {
            /* A byte missing from the vocabulary: unk (fused if asked) or nothing. */
            if (tok->unk_id < 0) continue;
            if (tok->fuse_unk && ns > 0 && s[ns - 1].id == tok->unk_id && i > 0 &&
                tok->byte_id[w[i - 1]] < 0)
                continue;
            id = tok->unk_id;
        }
        s[ns] = (sym_t){id, ns - 1, ns + 1};
        ns++;
    }
    if (ns == 0) return 0;
    s[ns - 1].next = -1;
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < ns; i++)
        push_pair(e, &nh, i);
    while (nh) {
        cand_t c = heap_pop(e->heap, &nh);
        sym_t *l = &s[c.pos];
        if (l->id < 0 || l->next < 0) continue;
        const merge_t *m = merge_get(tok, l->id, s[l->next].id);
        if (!m || m->id != c.id) continue;
        sym_t *r = &s[l->next];
        l->id = c.id;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = c.pos;
        r->id = -1;
        push_pair(e, &nh, l->prev);
        push_pair(e, &nh, c.pos);
    }
    for (int32_t i = 0; i >= 0; i = s[i].next)
        if (emit(e, s[i].id) < 0) return -1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The word cache */

void tok_cache_destroy(cache_t *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->mu);
    free(c->slots);
    free(c->entries);
    free(c->keys);
    free(c->ids);
    free(c);
}

cache_t *tok_cache_create(void) {
    cache_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->slots = calloc(2 * CACHE_ENTRIES, sizeof *c->slots);
    c->entries = malloc(CACHE_ENTRIES * sizeof *c->entries);
    c->keys = malloc(CACHE_KEY_BYTES);
    c->ids = malloc(CACHE_IDS * sizeof *c->ids);
    pthread_mutex_init(&c->mu, NULL);
    if (!c->slots || !c->entries || !c->keys || !c->ids) {
        tok_cache_destroy(c);
        return NULL;
    }
    return c;
}

static bool cache_get(cache_t *c, uint64_t h, const uint8_t *w, size_t n, enc_t *e) {
    bool hit = false;
    pthread_mutex_lock(&c->mu);
    for (uint32_t i = (uint32_t)h & (2 * CACHE_ENTRIES - 1);;
         i = (i + 1) & (2 * CACHE_ENTRIES - 1)) {
        uint32_t v = c->slots[i];
        if (!v) break;
        const cache_entry_t *en = &c->entries[v - 1];
        if (en->hash == h && en->key_len == n && memcmp(c->keys + en->key_off, w, n) == 0) {
            hit = true;
            for (uint32_t k = 0; k < en->n_ids; k++)
                if (emit(e, c->ids[en->ids_off + k]) < 0) break;
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return hit;
}

static void cache_put(cache_t *c, uint64_t h, const uint8_t *w, size_t n, const int32_t *ids,
                      size_t n_ids) {
    pthread_mutex_lock(&c->mu);
    if (c->n == CACHE_ENTRIES || c->keys_len + n > CACHE_KEY_BYTES ||
        c->ids_len + n_ids > CACHE_IDS) {
        memset(c->slots, 0, 2 * CACHE_ENTRIES * sizeof *c->slots);
        c->n = c->keys_len = c->ids_len = 0;
    }
    uint32_t i = (uint32_t)h & (2 * CACHE_ENTRIES - 1);
    for (;; i = (i + 1) & (2 * CACHE_ENTRIES - 1)) {
        uint32_t v = c->slots[i];
        if (!v) break;
        const cache_entry_t *en = &c->entries[v - 1];
        if (en->hash == h && en->key_len == n && memcmp(c->keys + en->key_off, w, n) == 0)
            goto done; /* another thread was first */
    }
    c->entries[c->n] = (cache_entry_t){h, c->keys_len, (uint32_t)n, c->ids_len, (uint32_t)n_ids};
    memcpy(c->keys + c->keys_len, w, n);
    memcpy(c->ids + c->ids_len, ids, n_ids * sizeof *ids);
    c->keys_len += (uint32_t)n;
    c->ids_len += (uint32_t)n_ids;
    c->slots[i] = ++c->n;
done:
    pthread_mutex_unlock(&c->mu);
}

static int bpe_word(enc_t *e, const uint8_t *w, size_t n) {
    const tokenizer_t *tok = e->tok;
    if (tok->ignore_merges) {
        /* The whole word, in byte-level form, when it is a token. */
        e->mapped.len = 0;
        for (size_t i = 0; i < n; i++) {
            uint8_t c[4];
            if (tok_put(&e->mapped, c, utf8_put(tok->byte_cp[w[i]], c)) < 0)
                return enc_fail(e, "out of memory");
        }
        int32_t id = strmap_get(tok, &tok->vocab, e->mapped.p, e->mapped.len);
        if (id >= 0) return emit(e, id);
    }
    if (n >= CACHE_WORD_MAX) return bpe_merge(e, w, n);
    uint64_t h = hash_bytes(w, n);
    if (cache_get(tok->cache, h, w, n, e)) return e->failed ? -1 : 0;
    size_t first = e->n_ids;
    if (bpe_merge(e, w, n) < 0) return -1;
    /* a word that gave no ids (a vocabulary without its bytes) is not cached: e->ids may still
     * be NULL, and NULL + 0 is undefined */
    if (e->n_ids > first) cache_put(tok->cache, h, w, n, e->ids + first, e->n_ids - first);
    return 0;
}

static size_t char_len(const uint8_t *s, size_t n, size_t at) {
    size_t len = 1;
    if (at < n) utf8_at(s + at, &len);
    return len;
}

/* A match PCRE2's defaults refused: the JIT ran out of stack, or the match limit (10 million
 * steps) stopped it, as a 10 MiB whitespace run does although the work is linear: `\s*[\r\n]+`
 * takes the whole run, then gives it back a character at a time. Retried with a limit that
 * grows with what is left of the subject (a few steps per byte), which still stops a pattern that
 * would backtrack without end; the interpreter when the JIT's stack is what ran out. */
static int match_long(enc_t *e, const pcre2_code *re, const uint8_t *s, size_t n, size_t at,
                      int rc) {
    if (!e->mctx && !(e->mctx = pcre2_match_context_create(NULL))) return PCRE2_ERROR_NOMEMORY;
    size_t steps = 10000000 + 16 * (n - at);
    pcre2_set_match_limit(e->mctx, steps > UINT32_MAX ? UINT32_MAX : (uint32_t)steps);
    if (rc == PCRE2_ERROR_MATCHLIMIT)
        rc = pcre2_match(re, s, n, at, PCRE2_NO_UTF_CHECK, e->md, e->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re, s, n, at, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md, e->mctx);
    return rc;
}

/* Runs pre-tokenizer stage k over s and hands each piece to the next stage, the last one to
 * BPE. Split "Isolated": every match and every gap between matches is a piece. Matches are
 * found as HF's regex iterator does: an empty match splits but is no piece, and an empty match
 * right where the previous match ended is skipped. */
static int pretok(enc_t *e, int k, const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    if (k == e->tok->n_stages) return bpe_word(e, s, n);
    const pcre2_code *re = e->tok->stages[k].re;
    if (!re) return pretok(e, k + 1, s, n);
    size_t prev = 0, at = 0, last_end = SIZE_MAX;
    while (at <= n) {
        int rc = pcre2_match(re, s, n, at, PCRE2_NO_UTF_CHECK, e->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_MATCHLIMIT)
            rc = match_long(e, re, s, n, at, rc);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[200];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return enc_fail(e, (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t ms = ov[0], me = ov[1];
        if (ms == me) {
            at = me + char_len(s, n, me);
            if (me == last_end) continue;
        } else {
            at = me;
        }
        last_end = me;
        if (pretok(e, k + 1, s + prev, ms - prev) < 0 || pretok(e, k + 1, s + ms, me - ms) < 0)
            return -1;
        prev = me;
    }
    return pretok(e, k + 1, s + prev, n - prev);
}

/* NFC of valid UTF-8. *out is NULL when s is already NFC (nothing was allocated).
 *
 * Characters below U+0300 are NFC-stable wherever they stand: none decomposes for good, none
 * has a non-zero combining class, none is the second half of a composition. So the text is cut
 * before each of them into chunks "one such character + the characters >= U+0300 after it",
 * and only chunks with characters >= U+0300 go through utf8proc (ASCII and Latin-1 cost
 * nothing; CJK runs go through in one piece). */
int tok_nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *out_len) {
    *out = NULL;
    size_t i = 0;
    while (i < n && s[i] < 0xCC)
        i++;
    if (i == n) return 0;
    jbuf_t b = {0};
    size_t done = 0; /* s[0..done) is in b */
    while (i < n) {
        /* s[i] starts a character >= U+0300; its chunk begins at the character before it. */
        size_t start = i;
        if (start > done) {
            start--;
            while (start > done && (s[start] & 0xC0) == 0x80)
                start--;
        }
        size_t end = i;
        while (end < n && !(s[end] < 0xCC && (s[end] & 0xC0) != 0x80))
            end++;
        utf8proc_uint8_t *r = NULL;
        utf8proc_ssize_t len = utf8proc_map(s + start, (utf8proc_ssize_t)(end - start), &r,
                                            UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (len < 0 || tok_put(&b, s + done, start - done) < 0 || tok_put(&b, r, (size_t)len) < 0) {
            free(r);
            free(b.p);
            return -1;
        }
        free(r);
        done = end;
        i = end;
        while (i < n && s[i] < 0xCC)
            i++;
    }
    if (tok_put(&b, s + done, n - done) < 0) {
        free(b.p);
        return -1;
    }
    *out = (uint8_t *)b.p;
    *out_len = b.len;
    return 0;
}

static size_t lead_space_len(const uint8_t *s, size_t n) {
    size_t i = 0, len;
    while (i < n && is_white_space(utf8_at(s + i, &len)))
        i += len;
    return i;
}

static size_t trail_space_start(const uint8_t *s, size_t n) {
    while (n > 0) {
        size_t i = n - 1, len;
        while (i > 0 && (s[i] & 0xC0) == 0x80)
            i--;
        if (!is_white_space(utf8_at(s + i, &len))) break;
        n = i;
    }
    return n;
}

static int encode_gap(enc_t *e, int pass, const uint8_t *s, size_t n);

/* Cuts the added tokens of one matcher out of s (HF AddedVocabulary::find_matches: leftmost,
 * then longest; single_word, lstrip and rstrip applied as HF does) and encodes the gaps. */
static int split_added(enc_t *e, int pass, const uint8_t *s, size_t n) {
    const tokenizer_t *tok = e->tok;
    const matcher_t *m = pass ? &tok->norm_match : &tok->raw_match;
    size_t start_off = 0, pos = 0;
    while (pos < n && m->n) {
        const added_t *a = NULL;
        size_t start = pos;
        for (; start < n; start++) {
            const int *cand = m->order + m->first[s[start]];
            for (int k = 0; k < m->count[s[start]] && !a; k++) {
                const added_t *t = &tok->added[cand[k]];
                if (t->match.len <= n - start &&
                    memcmp(tstr(tok, t->match), s + start, t->match.len) == 0)
                    a = t;
            }
            if (a) break;
        }
        if (!a) break;
        size_t stop = start + a->match.len;
        pos = stop;
        if (a->single_word) {
            bool word_before = start > 0 && is_word_char(utf8_before(s, start));
            size_t len;
            bool word_after = stop < n && is_word_char(utf8_at(s + stop, &len));
            if (word_before || word_after) continue;
        }
        if (a->lstrip) {
            size_t ns = trail_space_start(s, start);
            start = ns > start_off ? ns : start_off;
        }
        if (a->rstrip) stop += lead_space_len(s + stop, n - stop);
        if (start_off < start && encode_gap(e, pass, s + start_off, start - start_off) < 0)
            return -1;
        if (emit(e, a->id) < 0) return -1;
        start_off = stop;
    }
    if (start_off < n) return encode_gap(e, pass, s + start_off, n - start_off);
    return 0;
}

/* Text between added tokens: after the raw pass it is normalized and searched for normalized
 * tokens; after that pass it is pre-tokenized. */
static int encode_gap(enc_t *e, int pass, const uint8_t *s, size_t n) {
    if (pass == 1) return pretok(e, 0, s, n);
    uint8_t *norm = NULL;
    size_t len = n;
    if (e->tok->nfc && tok_nfc(s, n, &norm, &len) < 0) return enc_fail(e, "out of memory");
    int rc = split_added(e, 1, norm ? norm : s, len);
    free(norm);
    return rc;
}

int tok_encode(const tokenizer_t *tok, const char *text, size_t len, int32_t **ids, size_t *n,
               err_t *err) {
    *ids = NULL;
    *n = 0;
    enc_t e = {.tok = tok};
    jbuf_t clean = {0};
    const uint8_t *s = (const uint8_t *)text;
    if (!jb_utf8_valid(text, len)) {
        if (tok_utf8_replace(s, len, &clean) < 0) return err_set(err, "out of memory");
        s = (const uint8_t *)clean.p;
        len = clean.len;
    }
    e.md = pcre2_match_data_create(1, NULL);
    if (!e.md) enc_fail(&e, "out of memory");
    if (!e.failed) split_added(&e, 0, s, len);
    if (!e.failed && !e.ids && !(e.ids = malloc(sizeof *e.ids))) enc_fail(&e, "out of memory");
    pcre2_match_data_free(e.md);
    pcre2_match_context_free(e.mctx);
    free(clean.p);
    free(e.syms);
    free(e.heap);
    free(e.mapped.p);
    if (e.failed) {
        free(e.ids);
        return err_set(err, "%s: encoding failed: %s", tok->name, e.msg);
    }
    *ids = e.ids;
    *n = e.n_ids;
    return 0;
}

int tok_encode_to_string(const tokenizer_t *tok, const char *text, size_t len, char **out,
                         err_t *err) {
    *out = NULL;
    int32_t *ids;
    size_t n;
    if (tok_encode(tok, text, len, &ids, &n, err) < 0) return -1;
    jbuf_t b = {0};
    int rc = tok_put(&b, "[", 1);
    for (size_t i = 0; i < n && rc == 0; i++) {
        char num[16];
        int w = snprintf(num, sizeof num, "%s%" PRId32, i ? ", " : "", ids[i]);
        rc = tok_put(&b, num, (size_t)w);
    }
    if (rc == 0) rc = tok_put(&b, "]", 2);
    free(ids);
    if (rc < 0) {
        free(b.p);
        return err_set(err, "out of memory");
    }
    *out = b.p;
    return 0;
}

#include "tokenizer.h"
#include "copy_small.h"
#include "utf8.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "unicode.h"

/* GPT-2's pre-tokenizer regex, used by ByteLevel with use_regex (HF byte_level.rs). */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

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

/* ------------------------------------------------------------------------------------------ */
/* Growable byte buffer */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf_t;

static int buf_reserve(buf_t *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(buf_t *b, const void *data, size_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* UTF-8 */

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

static bool utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0, len;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if (utf8_class(s + i, n - i, &len) != U8_OK) return false;
        i += len;
    }
    return true;
}

/* Appends s with each ill-formed subpart replaced by U+FFFD (an unfinished character at the
 * end included), as bytes.decode("utf-8", "replace") does. */
static int utf8_replace(const uint8_t *s, size_t n, buf_t *out) {
    size_t i = 0, len;
    while (i < n) {
        size_t start = i;
        while (i < n && s[i] < 0x80)
            i++;
        if (buf_put(out, s + start, i - start) < 0) return -1;
        if (i >= n) break;
        int k = utf8_class(s + i, n - i, &len);
        if (buf_put(out, k == U8_OK ? (const char *)s + i : REPLACEMENT, k == U8_OK ? len : 3) < 0)
            return -1;
        i += len;
    }
    return 0;
}

/* The code point at s (valid UTF-8) and its length. */
static int32_t utf8_at(const uint8_t *s, size_t *len) {
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

/* The code point that ends at s[n-1] (valid UTF-8, n >= 1). */
static int32_t utf8_before(const uint8_t *s, size_t n) {
    size_t i = n - 1, len;
    while (i > 0 && (s[i] & 0xC0) == 0x80)
        i--;
    return utf8_at(s + i, &len);
}

static size_t utf8_put(uint32_t cp, uint8_t *o) {
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

/* GPT-2 bytes_to_unicode: printable bytes map to themselves, the other 68 to U+0100 + k in
 * increasing byte order. */
static uint32_t byte_to_cp(int b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        return (uint32_t)b;
    int k = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) k++;
    return 0x100 + (uint32_t)k;
}

/* ------------------------------------------------------------------------------------------ */
/* Hash maps */

static uint64_t hash_bytes(const void *data, size_t n) {
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

/* ------------------------------------------------------------------------------------------ */
/* The tokenizer */

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
    char *name; /* tokenizer.json path, for messages */
    buf_t arena;
    int32_t n_ids;  /* 1 + largest id */
    span_t *str;    /* [n_ids] token as tokenizer.json spells it (normalized added tokens:
                       normalized, as HF prints them), NUL-terminated in arena */
    span_t *bytes;  /* [n_ids] bytes it decodes to */
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

static const char *tstr(const tokenizer_t *tok, span_t s) {
    return tok->arena.p + s.off;
}

static int arena_add(tokenizer_t *tok, const void *data, size_t n, span_t *out) {
    if (tok->arena.len + n + 1 > UINT32_MAX) return -1;
    out->off = (uint32_t)tok->arena.len;
    out->len = (uint32_t)n;
    if (buf_put(&tok->arena, data, n) < 0 || buf_put(&tok->arena, "", 1) < 0) return -1;
    return 0;
}

static span_t key_str(const tokenizer_t *tok, uint32_t id) {
    return tok->str[id];
}

static span_t key_added(const tokenizer_t *tok, uint32_t index) {
    return tok->added[index].content;
}

static int strmap_init(strmap_t *m, size_t n, span_t (*key)(const tokenizer_t *, uint32_t)) {
    size_t size = 16;
    while (size < 2 * n)
        size *= 2;
    free(m->slots);
    m->slots = calloc(size, sizeof *m->slots);
    m->mask = (uint32_t)(size - 1);
    m->key = key;
    return m->slots ? 0 : -1;
}

static int32_t strmap_get(const tokenizer_t *tok, const strmap_t *m, const void *key, size_t n) {
    if (!m->slots) return -1;
    for (uint32_t i = (uint32_t)hash_bytes(key, n) & m->mask;; i = (i + 1) & m->mask) {
        uint32_t v = m->slots[i];
        if (!v) return -1;
        span_t s = m->key(tok, v - 1);
        if (s.len == n && memcmp(tstr(tok, s), key, n) == 0) return (int32_t)(v - 1);
    }
}

/* Inserts a value under its key, which must not be in the map yet. */
static void strmap_put(const tokenizer_t *tok, strmap_t *m, int32_t value) {
    span_t s = m->key(tok, (uint32_t)value);
    uint32_t i = (uint32_t)hash_bytes(tstr(tok, s), s.len) & m->mask;
    while (m->slots[i])
        i = (i + 1) & m->mask;
    m->slots[i] = (uint32_t)value + 1;
}

/* The id of an added token given its content; -1 when none. */
static int32_t added_get(const tokenizer_t *tok, const char *content, size_t n) {
    int32_t i = strmap_get(tok, &tok->added_map, content, n);
    return i < 0 ? -1 : tok->added[i].id;
}

static uint64_t merge_slot(uint64_t key, uint64_t mask) {
    return ((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

static const merge_t *merge_get(const tokenizer_t *tok, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t i = merge_slot(key, tok->merge_mask);; i = (i + 1) & tok->merge_mask) {
        const merge_t *m = &tok->merges[i];
        if (m->key == key) return m;
        if (m->key == UINT64_MAX) return NULL;
    }
}

/* A later line for the same pair replaces the earlier one, as in HF's HashMap. */
static void merge_put(tokenizer_t *tok, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t i = merge_slot(key, tok->merge_mask);
    while (tok->merges[i].key != UINT64_MAX && tok->merges[i].key != key)
        i = (i + 1) & tok->merge_mask;
    tok->merges[i] = (merge_t){key, rank, id};
}

/* ------------------------------------------------------------------------------------------ */
/* Pre-tokenizer regexes */

/* Rewrites an Oniguruma (Ruby syntax) pattern for PCRE2 so that both match the same text:
 * \s/\S become White_Space (PCRE2's \s adds U+180E and lacks U+0085), \h/\H are hex digits,
 * and \p{L}, \p{N}, \p{M} gain the code points Unicode assigned after PCRE2's tables. */
static int rewrite_pattern(const char *p, size_t n, buf_t *out) {
    bool in_class = false;
    size_t class_start = 0;
    for (size_t i = 0; i < n;) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            if (d == 'Q') {
                size_t j = i + 2;
                while (j < n && !(p[j] == '\\' && j + 1 < n && p[j + 1] == 'E'))
                    j++;
                j = j < n ? j + 2 : n;
                if (buf_put(out, p + i, j - i) < 0) return -1;
                i = j;
                continue;
            }
            const char *rep = NULL;
            if (d == 's') rep = "\\p{White_Space}";
            if (d == 'S') rep = "\\P{White_Space}";
            if (d == 'h') rep = in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
            if (d == 'H' && !in_class) rep = "[^0-9a-fA-F]";
            if (rep) {
                if (buf_put(out, rep, strlen(rep)) < 0) return -1;
                i += 2;
                continue;
            }
            if (d == 'p' || d == 'P') {
                char cls = 0;
                size_t end = i + 2;
                if (i + 4 < n && p[i + 2] == '{' && p[i + 4] == '}') {
                    cls = p[i + 3];
                    end = i + 5;
                } else if (i + 2 < n && p[i + 2] != '{') {
                    cls = p[i + 2];
                    end = i + 3;
                }
                const char *extra = cls ? uni_class_extra(cls) : "";
                if (*extra && (d == 'p' || !in_class)) {
                    char base[8] = {'\\', 'p', '{', cls, '}', 0};
                    const char *open = in_class ? "" : (d == 'p' ? "[" : "[^");
                    if (buf_put(out, open, strlen(open)) < 0 || buf_put(out, base, 5) < 0 ||
                        buf_put(out, extra, strlen(extra)) < 0 ||
                        buf_put(out, in_class ? "" : "]", in_class ? 0 : 1) < 0)
                        return -1;
                    i = end;
                    continue;
                }
            }
            if (buf_put(out, p + i, 2) < 0) return -1;
            i += 2;
            continue;
        }
        if (in_class) {
            if (c == '[' && i + 1 < n && p[i + 1] == ':') {
                size_t j = i + 2;
                while (j + 1 < n && !(p[j] == ':' && p[j + 1] == ']'))
                    j++;
                j = j + 1 < n ? j + 2 : n;
                if (buf_put(out, p + i, j - i) < 0) return -1;
                i = j;
                continue;
            }
            if (c == ']' && i != class_start) in_class = false;
        } else if (c == '[') {
            in_class = true;
            class_start = i + 1;
            if (class_start < n && p[class_start] == '^') class_start++;
            if (buf_put(out, p + i, class_start - i) < 0) return -1;
            i = class_start;
            continue;
        }
        if (buf_put(out, &c, 1) < 0) return -1;
        i++;
    }
    return 0;
}

static int compile_stage(tokenizer_t *tok, const char *pattern, size_t n, bool literal,
                         err_t *err) {
    if (tok->n_stages == MAX_STAGES)
        return err_set(err, "%s: more than %d pre-tokenizers", tok->name, MAX_STAGES);
    buf_t pat = {0};
    uint32_t opts = PCRE2_UTF;
    if (literal) {
        opts |= PCRE2_LITERAL;
        if (buf_put(&pat, pattern, n) < 0) goto oom;
    } else {
        /* As HF compiles with Oniguruma: ^ and $ anchor lines and . matches newlines. */
        opts |= PCRE2_UCP | PCRE2_MULTILINE | PCRE2_DOTALL;
        if (rewrite_pattern(pattern, n, &pat) < 0) goto oom;
    }
    int code = PCRE2_ERROR_NOMEMORY;
    PCRE2_SIZE at;
    pcre2_code *re = NULL;
    pcre2_compile_context *ctx = pcre2_compile_context_create(NULL);
    if (ctx) {
        pcre2_set_newline(ctx, PCRE2_NEWLINE_LF);
        re = pcre2_compile((PCRE2_SPTR)(pat.p ? pat.p : ""), pat.len, opts, &code, &at, ctx);
        pcre2_compile_context_free(ctx);
    }
    free(pat.p);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return err_set(err, "%s: pre-tokenizer regex \"%.*s\" does not compile: %s", tok->name,
                       (int)n, pattern, (const char *)msg);
    }
    /* Without JIT (unsupported CPU) PCRE2 interprets the pattern: slower, same matches. */
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    tok->stages[tok->n_stages++].re = re;
    return 0;
oom:
    free(pat.p);
    return err_set(err, "out of memory");
}

/* ------------------------------------------------------------------------------------------ */
/* Loading */

static const cJSON *jget(const cJSON *obj, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static bool jis_null(const cJSON *v) {
    return !v || cJSON_IsNull(v);
}

static bool jbool(const cJSON *obj, const char *key, bool dflt) {
    const cJSON *v = jget(obj, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static const char *jtype(const cJSON *obj) {
    const cJSON *t = jget(obj, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* Reads a JSON number that must be an integer id in [0, INT32_MAX). */
static bool jid(const cJSON *v, int32_t *id) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d < INT32_MAX) || d != (double)(int32_t)d) return false;
    *id = (int32_t)d;
    return true;
}

static int parse_normalizer(tokenizer_t *tok, const cJSON *n, err_t *err) {
    if (jis_null(n)) return 0;
    const char *type = jtype(n);
    if (type && strcmp(type, "NFC") == 0) {
        tok->nfc = true;
        return 0;
    }
    if (type && strcmp(type, "Sequence") == 0) {
        const cJSON *item;
        cJSON_ArrayForEach(item, jget(n, "normalizers")) {
            if (parse_normalizer(tok, item, err) < 0) return -1;
        }
        return 0;
    }
    return err_set(err, "%s: normalizer \"%s\" is not supported (only NFC or none)", tok->name,
                   type ? type : "?");
}

static int parse_byte_level(tokenizer_t *tok, const cJSON *p, err_t *err) {
    if (jbool(p, "add_prefix_space", false))
        return err_set(err, "%s: ByteLevel add_prefix_space=true is not supported", tok->name);
    if (jbool(p, "use_regex", true))
        return compile_stage(tok, GPT2_PATTERN, strlen(GPT2_PATTERN), false, err);
    if (tok->n_stages == MAX_STAGES)
        return err_set(err, "%s: more than %d pre-tokenizers", tok->name, MAX_STAGES);
    tok->stages[tok->n_stages++].re = NULL;
    return 0;
}

static int parse_split(tokenizer_t *tok, const cJSON *p, err_t *err) {
    const cJSON *behavior = jget(p, "behavior");
    if (!cJSON_IsString(behavior) || strcmp(behavior->valuestring, "Isolated") != 0)
        return err_set(err, "%s: Split behavior \"%s\" is not supported (only Isolated)", tok->name,
                       cJSON_IsString(behavior) ? behavior->valuestring : "?");
    if (jbool(p, "invert", false))
        return err_set(err, "%s: Split with invert=true is not supported", tok->name);
    const cJSON *pat = jget(p, "pattern");
    const cJSON *re = jget(pat, "Regex"), *lit = jget(pat, "String");
    if (cJSON_IsString(re))
        return compile_stage(tok, re->valuestring, strlen(re->valuestring), false, err);
    if (cJSON_IsString(lit))
        return compile_stage(tok, lit->valuestring, strlen(lit->valuestring), true, err);
    return err_set(err, "%s: Split pre-tokenizer without a Regex or String pattern", tok->name);
}

static int parse_pre_tokenizer(tokenizer_t *tok, const cJSON *p, err_t *err) {
    const char *type = jtype(p);
    const cJSON *list = NULL;
    if (type && strcmp(type, "Sequence") == 0) {
        list = jget(p, "pretokenizers");
        if (!cJSON_IsArray(list))
            return err_set(err, "%s: Sequence pre-tokenizer without a list", tok->name);
    }
    int count = list ? cJSON_GetArraySize(list) : 1;
    for (int i = 0; i < count; i++) {
        const cJSON *item = list ? cJSON_GetArrayItem(list, i) : p;
        const char *t = jis_null(item) ? NULL : jtype(item);
        bool last = i == count - 1;
        if (t && strcmp(t, "ByteLevel") == 0 && last) {
            if (parse_byte_level(tok, item, err) < 0) return -1;
        } else if (t && strcmp(t, "Split") == 0 && !last) {
            if (parse_split(tok, item, err) < 0) return -1;
        } else {
            return err_set(err,
                           "%s: pre-tokenizer \"%s\" is not supported (only Split(Regex, "
                           "Isolated) stages followed by ByteLevel)",
                           tok->name, t ? t : "null");
        }
    }
    return 0;
}

static int check_components(tokenizer_t *tok, const cJSON *root, err_t *err) {
    const cJSON *dec = jget(root, "decoder");
    const char *t = jis_null(dec) ? NULL : jtype(dec);
    if (!t || strcmp(t, "ByteLevel") != 0)
        return err_set(err, "%s: decoder \"%s\" is not supported (only ByteLevel)", tok->name,
                       t ? t : "null");
    const cJSON *post = jget(root, "post_processor");
    t = jis_null(post) ? NULL : jtype(post);
    if (t && strcmp(t, "ByteLevel") != 0)
        return err_set(err, "%s: post_processor \"%s\" is not supported (only ByteLevel or none)",
                       tok->name, t);
    return 0;
}

/* Grows the id-indexed arrays to hold id. */
static int grow_ids(tokenizer_t *tok, int32_t id) {
    if (id < tok->n_ids) return 0;
    int32_t n = id + 1;
    span_t *str = realloc(tok->str, (size_t)n * sizeof *str);
    if (str) tok->str = str;
    span_t *bytes = realloc(tok->bytes, (size_t)n * sizeof *bytes);
    if (bytes) tok->bytes = bytes;
    uint16_t *flags = realloc(tok->flags, (size_t)n * sizeof *flags);
    if (flags) tok->flags = flags;
    if (!str || !bytes || !flags) return -1;
    memset(tok->flags + tok->n_ids, 0, (size_t)(n - tok->n_ids) * sizeof *flags);
    tok->n_ids = n;
    return 0;
}

static int parse_vocab(tokenizer_t *tok, const cJSON *vocab, err_t *err) {
    int32_t count = 0, max_id = -1, id;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!jid(e, &id))
            return err_set(err, "%s: model.vocab entry \"%s\" has no valid id", tok->name,
                           e->string);
        if (id > max_id) max_id = id;
        count++;
    }
    if (count == 0) return err_set(err, "%s: model.vocab is empty", tok->name);
    /* Ids index arrays: refuse files whose ids are far sparser than a real vocabulary. */
    if (max_id > 2 * count + 65536)
        return err_set(err, "%s: model.vocab ids go up to %" PRId32 " for %" PRId32 " entries",
                       tok->name, max_id, count);
    if (grow_ids(tok, max_id) < 0 || strmap_init(&tok->vocab, (size_t)count, key_str) < 0)
        return err_set(err, "out of memory");
    cJSON_ArrayForEach(e, vocab) {
        jid(e, &id);
        if (tok->flags[id] & TF_VALID)
            return err_set(err, "%s: model.vocab gives id %" PRId32 " to two tokens", tok->name,
                           id);
        if (strmap_get(tok, &tok->vocab, e->string, strlen(e->string)) >= 0)
            return err_set(err, "%s: model.vocab lists \"%s\" twice", tok->name, e->string);
        if (arena_add(tok, e->string, strlen(e->string), &tok->str[id]) < 0)
            return err_set(err, "out of memory");
        tok->flags[id] = TF_VALID;
        strmap_put(tok, &tok->vocab, id);
    }
    tok->n_model = count;
    return 0;
}

/* Splits one merges entry ("a b" or ["a", "b"]) into its two tokens. */
static bool merge_parts(const cJSON *m, const char **a, size_t *na, const char **b, size_t *nb) {
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ')) return false;
        *a = s;
        *na = (size_t)(sp - s);
        *b = sp + 1;
        *nb = strlen(sp + 1);
        return true;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2) {
        const cJSON *x = cJSON_GetArrayItem(m, 0), *y = cJSON_GetArrayItem(m, 1);
        if (!cJSON_IsString(x) || !cJSON_IsString(y)) return false;
        *a = x->valuestring;
        *na = strlen(*a);
        *b = y->valuestring;
        *nb = strlen(*b);
        return true;
    }
    return false;
}

static int parse_merges(tokenizer_t *tok, const cJSON *merges, err_t *err) {
    int count = cJSON_GetArraySize(merges);
    size_t size = 16;
    while (size < 2 * (size_t)count)
        size *= 2;
    tok->merges = malloc(size * sizeof *tok->merges);
    if (!tok->merges) return err_set(err, "out of memory");
    for (size_t i = 0; i < size; i++)
        tok->merges[i].key = UINT64_MAX;
    tok->merge_mask = size - 1;
    buf_t both = {0};
    int32_t rank = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        if (cJSON_IsString(m) && strncmp(m->valuestring, "#version", 8) == 0) continue;
        const char *a, *b;
        size_t na, nb;
        if (!merge_parts(m, &a, &na, &b, &nb)) {
            free(both.p);
            return err_set(err, "%s: model.merges entry %" PRId32 " is not \"a b\" or [a, b]",
                           tok->name, rank);
        }
        both.len = 0;
        if (buf_put(&both, a, na) < 0 || buf_put(&both, b, nb) < 0) {
            free(both.p);
            return err_set(err, "out of memory");
        }
        int32_t ia = strmap_get(tok, &tok->vocab, a, na);
        int32_t ib = strmap_get(tok, &tok->vocab, b, nb);
        int32_t id = strmap_get(tok, &tok->vocab, both.p, both.len);
        if (ia < 0 || ib < 0 || id < 0) {
            int w = ia < 0 ? (int)na : ib < 0 ? (int)nb : (int)both.len;
            const char *s = ia < 0 ? a : ib < 0 ? b : both.p;
            err_set(err,
                    "%s: model.merges entry %" PRId32 " uses \"%.*s\", which is not in "
                    "model.vocab",
                    tok->name, rank, w, s);
            free(both.p);
            return -1;
        }
        merge_put(tok, ia, ib, rank, id);
        rank++;
    }
    free(both.p);
    return 0;
}

static int parse_model(tokenizer_t *tok, const cJSON *model, err_t *err) {
    if (!cJSON_IsObject(model)) return err_set(err, "%s: no \"model\" object", tok->name);
    const char *type = jtype(model);
    if (type && strcmp(type, "BPE") != 0)
        return err_set(err, "%s: model type \"%s\" is not supported (only BPE)", tok->name, type);
    const cJSON *vocab = jget(model, "vocab"), *merges = jget(model, "merges");
    if (!cJSON_IsObject(vocab))
        return err_set(err, "%s: model.vocab is missing or not an object", tok->name);
    if (!cJSON_IsArray(merges))
        return err_set(err, "%s: model.merges is missing or not a list", tok->name);
    const cJSON *dropout = jget(model, "dropout");
    if (!jis_null(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return err_set(err, "%s: BPE dropout is not supported", tok->name);
    if (jbool(model, "byte_fallback", false))
        return err_set(err, "%s: BPE byte_fallback is not supported", tok->name);
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = jget(model, affix[i]);
        if (!jis_null(v) && !(cJSON_IsString(v) && !*v->valuestring))
            return err_set(err, "%s: BPE %s is not supported", tok->name, affix[i]);
    }
    tok->fuse_unk = jbool(model, "fuse_unk", false);
    tok->ignore_merges = jbool(model, "ignore_merges", false);
    if (parse_vocab(tok, vocab, err) < 0 || parse_merges(tok, merges, err) < 0) return -1;
    tok->unk_id = -1;
    const cJSON *unk = jget(model, "unk_token");
    if (cJSON_IsString(unk)) {
        tok->unk_id = strmap_get(tok, &tok->vocab, unk->valuestring, strlen(unk->valuestring));
        if (tok->unk_id < 0)
            return err_set(err, "%s: unk_token \"%s\" is not in model.vocab", tok->name,
                           unk->valuestring);
    }
    for (int b = 0; b < 256; b++) {
        uint8_t s[4];
        tok->byte_cp[b] = (uint16_t)byte_to_cp(b);
        size_t n = utf8_put(tok->byte_cp[b], s);
        tok->byte_id[b] = strmap_get(tok, &tok->vocab, s, n);
    }
    return 0;
}

/* Adds one token the way HF's AddedVocabulary::add_tokens does: the id is the vocabulary's
 * when the content is already a token, else the next one after the vocabulary and the
 * tokens added so far. The id written in the file is not used, exactly as in HF. */
static int add_token(tokenizer_t *tok, const added_t *t, const char *content, size_t n,
                     err_t *err) {
    if (n == 0) return 0;
    int32_t known = strmap_get(tok, &tok->added_map, content, n);
    if (known >= 0) {
        /* A second entry for the same content updates its options; HF never forgets that a
         * content was special. */
        added_t *a = &tok->added[known];
        bool special = a->special || t->special;
        span_t c = a->content;
        int32_t id = a->id;
        *a = *t;
        a->id = id;
        a->content = c;
        a->special = special;
        return 0;
    }
    int32_t id = strmap_get(tok, &tok->vocab, content, n);
    bool in_vocab = id >= 0;
    if (!in_vocab) {
        id = tok->n_model;
        for (int i = 0; i < tok->n_added; i++)
            if (tok->added[i].id >= tok->n_model && tok->added[i].id + 1 > id)
                id = tok->added[i].id + 1;
        if (id < tok->n_ids && (tok->flags[id] & TF_VALID))
            return err_set(err,
                           "%s: added token \"%.*s\" would get id %" PRId32
                           ", which model.vocab already uses",
                           tok->name, (int)n, content, id);
    }
    if (tok->n_added == tok->cap_added) {
        int cap = tok->cap_added ? 2 * tok->cap_added : 64;
        added_t *p = realloc(tok->added, (size_t)cap * sizeof *p);
        if (!p) return err_set(err, "out of memory");
        tok->added = p;
        tok->cap_added = cap;
    }
    if (grow_ids(tok, id) < 0) return err_set(err, "out of memory");
    added_t *a = &tok->added[tok->n_added++];
    *a = *t;
    a->id = id;
    if (in_vocab) {
        a->content = tok->str[id];
    } else if (arena_add(tok, content, n, &a->content) < 0) {
        return err_set(err, "out of memory");
    }
    tok->str[id] = a->content;
    tok->flags[id] |= TF_VALID | TF_ADDED;
    if (2 * (size_t)tok->n_added > (size_t)tok->added_map.mask) {
        if (strmap_init(&tok->added_map, 2 * (size_t)tok->n_added, key_added) < 0)
            return err_set(err, "out of memory");
        for (int i = 0; i < tok->n_added; i++)
            strmap_put(tok, &tok->added_map, i);
    } else {
        strmap_put(tok, &tok->added_map, tok->n_added - 1);
    }
    return 0;
}

static added_t added_options(const cJSON *e) {
    added_t t = {0};
    t.special = jbool(e, "special", false);
    t.single_word = jbool(e, "single_word", false);
    t.lstrip = jbool(e, "lstrip", false);
    t.rstrip = jbool(e, "rstrip", false);
    t.normalized = jbool(e, "normalized", !t.special);
    return t;
}

static int parse_added(tokenizer_t *tok, const cJSON *list, err_t *err) {
    if (jis_null(list)) return 0;
    if (!cJSON_IsArray(list)) return err_set(err, "%s: added_tokens is not a list", tok->name);
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        const cJSON *content = jget(e, "content");
        if (!cJSON_IsString(content))
            return err_set(err, "%s: an added_tokens entry has no content", tok->name);
        added_t t = added_options(e);
        if (add_token(tok, &t, content->valuestring, strlen(content->valuestring), err) < 0)
            return -1;
    }
    return 0;
}

static const char *config_token(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    const cJSON *c = jget(v, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

/* tokenizer_config.json: what transformers adds on top of tokenizer.json (added tokens it
 * lacks, the special tokens named there) and the eos / bos / pad names. */
static int parse_config(tokenizer_t *tok, const char *text, err_t *err) {
    cJSON *root = cJSON_Parse(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return err_set(err, "%s: tokenizer_config.json next to it is not a JSON object", tok->name);
    }
    int rc = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, jget(root, "added_tokens_decoder")) {
        const char *content = config_token(e);
        if (!content) continue;
        added_t t = added_options(e);
        if (added_get(tok, content, strlen(content)) < 0 &&
            (rc = add_token(tok, &t, content, strlen(content), err)) < 0)
            goto done;
    }
    const char *names[] = {"eos_token", "bos_token", "pad_token"};
    int32_t *ids[] = {&tok->eos, &tok->bos, &tok->pad};
    for (int i = 0; i < 3; i++) {
        const char *content = config_token(jget(root, names[i]));
        if (!content || !*content) continue;
        /* transformers makes every named special token an added token. */
        if (added_get(tok, content, strlen(content)) < 0) {
            added_t t = {.special = true};
            if ((rc = add_token(tok, &t, content, strlen(content), err)) < 0) goto done;
        }
        *ids[i] = tok_token_to_id(tok, content);
    }
done:
    cJSON_Delete(root);
    return rc;
}

typedef struct match_key {
    uint8_t first;
    uint32_t len;
    int index;
} match_key_t;

/* By first byte, then longest first, so that the first hit at a position is the longest. */
static int cmp_match_key(const void *x, const void *y) {
    const match_key_t *a = x, *b = y;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->index - b->index;
}

static int nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *out_len);

/* Builds the two search sets: tokens matched on the raw text and (normalized: true) tokens
 * matched, in normalized form, on the normalized text. */
static int build_matchers(tokenizer_t *tok) {
    match_key_t *keys = malloc(((size_t)tok->n_added + 1) * sizeof *keys);
    if (!keys) return -1;
    for (int pass = 0; pass < 2; pass++) {
        matcher_t *m = pass ? &tok->norm_match : &tok->raw_match;
        m->order = malloc(((size_t)tok->n_added + 1) * sizeof *m->order);
        if (!m->order) goto fail;
        for (int i = 0; i < tok->n_added; i++) {
            added_t *a = &tok->added[i];
            if (a->normalized != (pass == 1)) continue;
            a->match = a->content;
            if (pass == 1 && tok->nfc) {
                uint8_t *norm;
                size_t len;
                if (nfc((const uint8_t *)tstr(tok, a->content), a->content.len, &norm, &len) < 0)
                    goto fail;
                int rc = 0;
                if (norm) {
                    rc = arena_add(tok, norm, len, &a->match);
                    free(norm);
                }
                if (rc < 0) goto fail;
            }
            keys[m->n++] = (match_key_t){(uint8_t)tok->arena.p[a->match.off], a->match.len, i};
        }
        qsort(keys, (size_t)m->n, sizeof *keys, cmp_match_key);
        for (int i = m->n - 1; i >= 0; i--) {
            m->order[i] = keys[i].index;
            m->first[keys[i].first] = i;
            m->count[keys[i].first]++;
        }
    }
    free(keys);
    return 0;
fail:
    free(keys);
    return -1;
}

/* TF_WHOLE_UTF8, or TF_SHAPED with the head and tail counts, or 0 for the bytes of a token. */
static uint16_t utf8_shape(const uint8_t *b, size_t n) {
    size_t head = 0, at, len;
    while (head < n && (b[head] & 0xC0) == 0x80)
        head++;
    for (at = head; at < n; at += len) {
        int cls = utf8_class(b + at, n - at, &len);
        if (cls == U8_BAD) return 0;
        if (cls == U8_SHORT) break;
    }
    size_t tail = n - at;
    if (head == 0 && tail == 0) return TF_WHOLE_UTF8;
    if (head > 3) return 0;
    return (uint16_t)(TF_SHAPED | head << TF_HEAD_SHIFT | tail << TF_TAIL_SHIFT);
}

/* The bytes each token decodes to, as HF's ByteLevel decoder gives them: a token made only
 * of byte-level characters maps back to its bytes; any other token is taken verbatim. */
static int build_bytes(tokenizer_t *tok) {
    int16_t inv[324];
    for (int i = 0; i < 324; i++)
        inv[i] = -1;
    for (int b = 0; b < 256; b++)
        inv[tok->byte_cp[b]] = (int16_t)b;
    buf_t tmp = {0};
    for (int32_t id = 0; id < tok->n_ids; id++) {
        tok->bytes[id] = (span_t){0, 0};
        if (!(tok->flags[id] & TF_VALID)) continue;
        const uint8_t *s = (const uint8_t *)tstr(tok, tok->str[id]);
        size_t n = tok->str[id].len, i = 0, len;
        tmp.len = 0;
        while (i < n) {
            int32_t cp = utf8_at(s + i, &len);
            if (cp >= 324 || inv[cp] < 0) break;
            char b = (char)inv[cp];
            if (buf_put(&tmp, &b, 1) < 0) goto oom;
            i += len;
        }
        if (i < n) {
            tok->bytes[id] = tok->str[id];
        } else if (arena_add(tok, tmp.p, tmp.len, &tok->bytes[id]) < 0) {
            goto oom;
        }
        if (tok->bytes[id].len > tok->max_token_bytes) tok->max_token_bytes = tok->bytes[id].len;
        tok->flags[id] |= utf8_shape((const uint8_t *)tstr(tok, tok->bytes[id]),
                                     tok->bytes[id].len);
    }
    free(tmp.p);
    return 0;
oom:
    free(tmp.p);
    return -1;
}

/* Normalized added tokens decode (and print) as their normalized form, as HF 0.23 does. Then
 * HF drops, with skip_special_tokens, every token whose text is the content of a special
 * added token. */
static int mark_special(tokenizer_t *tok) {
    for (int i = 0; i < tok->n_added; i++)
        tok->str[tok->added[i].id] = tok->added[i].match;
    strmap_t special = {0};
    if (strmap_init(&special, (size_t)tok->n_added, key_added) < 0) return -1;
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].special && strmap_get(tok, &special, tstr(tok, tok->added[i].content),
                                                tok->added[i].content.len) < 0)
            strmap_put(tok, &special, i);
    for (int32_t id = 0; id < tok->n_ids; id++)
        if ((tok->flags[id] & TF_VALID) &&
            strmap_get(tok, &special, tstr(tok, tok->str[id]), tok->str[id].len) >= 0)
            tok->flags[id] |= TF_SPECIAL;
    free(special.slots);
    return 0;
}

static cache_t *cache_create(void) {
    cache_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->slots = calloc(2 * CACHE_ENTRIES, sizeof *c->slots);
    c->entries = malloc(CACHE_ENTRIES * sizeof *c->entries);
    c->keys = malloc(CACHE_KEY_BYTES);
    c->ids = malloc(CACHE_IDS * sizeof *c->ids);
    pthread_mutex_init(&c->mu, NULL);
    if (!c->slots || !c->entries || !c->keys || !c->ids) {
        pthread_mutex_destroy(&c->mu);
        free(c->slots);
        free(c->entries);
        free(c->keys);
        free(c->ids);
        free(c);
        return NULL;
    }
    return c;
}

static void cache_destroy(cache_t *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->mu);
    free(c->slots);
    free(c->entries);
    free(c->keys);
    free(c->ids);
    free(c);
}

void tok_destroy(tokenizer_t *tok) {
    if (!tok) return;
    for (int i = 0; i < tok->n_stages; i++)
        pcre2_code_free(tok->stages[i].re);
    cache_destroy(tok->cache);
    free(tok->raw_match.order);
    free(tok->norm_match.order);
    free(tok->added_map.slots);
    free(tok->added);
    free(tok->merges);
    free(tok->vocab.slots);
    free(tok->str);
    free(tok->bytes);
    free(tok->flags);
    free(tok->arena.p);
    free(tok->name);
    free(tok);
}

int tok_load_json(const char *json, size_t len, const char *config_json, const char *name,
                  tokenizer_t **out, err_t *err) {
    *out = NULL;
    tokenizer_t *tok = calloc(1, sizeof *tok);
    if (!tok || !(tok->name = strdup(name))) {
        free(tok);
        return err_set(err, "out of memory");
    }
    tok->eos = tok->bos = tok->pad = tok->unk_id = -1;
    cJSON *root = NULL;
    if (len == 0) {
        err_set(err, "%s: empty file", name);
        goto fail;
    }
    /* Token strings are read as UTF-8 later on; serde_json refuses anything else too. */
    if (!utf8_valid((const uint8_t *)json, len) ||
        (config_json && !utf8_valid((const uint8_t *)config_json, strlen(config_json)))) {
        err_set(err, "%s: not valid UTF-8 (or its tokenizer_config.json)", name);
        goto fail;
    }
    root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= json && at <= json + len ? (size_t)(at - json) : 0;
        err_set(err, "%s: not valid JSON (near byte %zu)", name, off);
        goto fail;
    }
    if (!cJSON_IsObject(root)) {
        err_set(err, "%s: not a JSON object", name);
        goto fail;
    }
    if (parse_model(tok, jget(root, "model"), err) < 0 ||
        parse_normalizer(tok, jget(root, "normalizer"), err) < 0 ||
        check_components(tok, root, err) < 0)
        goto fail;
    const cJSON *pre = jget(root, "pre_tokenizer");
    if (jis_null(pre)) {
        err_set(err, "%s: no pre_tokenizer (a byte-level BPE needs ByteLevel)", name);
        goto fail;
    }
    if (parse_pre_tokenizer(tok, pre, err) < 0 ||
        parse_added(tok, jget(root, "added_tokens"), err) < 0)
        goto fail;
    if (config_json && parse_config(tok, config_json, err) < 0) goto fail;
    if (build_matchers(tok) < 0 || mark_special(tok) < 0 || build_bytes(tok) < 0 ||
        !(tok->cache = cache_create()))
        goto oom;
    cJSON_Delete(root);
    *out = tok;
    return 0;
oom:
    err_set(err, "out of memory");
fail:
    cJSON_Delete(root);
    tok_destroy(tok);
    return -1;
}

int tok_load(mdir_t *dir, tokenizer_t **out, err_t *err) {
    *out = NULL;
    char name[4096];
    snprintf(name, sizeof name, "%s/tokenizer.json", mdir_path(dir));
    char *json = NULL, *config = NULL;
    size_t len, config_len;
    if (mdir_read_text(dir, "tokenizer.json", &json, &len, err) < 0) return -1;
    if (mdir_has(dir, "tokenizer_config.json") &&
        mdir_read_text(dir, "tokenizer_config.json", &config, &config_len, err) < 0) {
        free(json);
        return -1;
    }
    int rc = tok_load_json(json, len, config && config_len ? config : NULL, name, out, err);
    free(json);
    free(config);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Lookups */

int32_t tok_vocab_size(const tokenizer_t *tok) {
    return tok->n_ids;
}

int32_t tok_token_to_id(const tokenizer_t *tok, const char *token) {
    size_t n = strlen(token);
    int32_t id = added_get(tok, token, n);
    return id >= 0 ? id : strmap_get(tok, &tok->vocab, token, n);
}

/* An id's flags; 0 (not even TF_VALID) for one that names no token. */
static uint16_t id_flags(const tokenizer_t *tok, int32_t id) {
    return (uint32_t)id < (uint32_t)tok->n_ids ? tok->flags[id] : 0;
}

static bool valid_id(const tokenizer_t *tok, int32_t id) {
    return id_flags(tok, id) & TF_VALID;
}

const char *tok_id_to_token(const tokenizer_t *tok, int32_t id) {
    return valid_id(tok, id) ? tstr(tok, tok->str[id]) : NULL;
}

const char *tok_id_to_bytes(const tokenizer_t *tok, int32_t id, size_t *len) {
    if (!valid_id(tok, id)) return NULL;
    *len = tok->bytes[id].len;
    return tstr(tok, tok->bytes[id]);
}

bool tok_is_special(const tokenizer_t *tok, int32_t id) {
    return valid_id(tok, id) && (tok->flags[id] & TF_SPECIAL);
}

bool tok_is_added(const tokenizer_t *tok, int32_t id) {
    return valid_id(tok, id) && (tok->flags[id] & TF_ADDED);
}

int32_t tok_eos_id(const tokenizer_t *tok) {
    return tok->eos;
}

int32_t tok_bos_id(const tokenizer_t *tok) {
    return tok->bos;
}

int32_t tok_pad_id(const tokenizer_t *tok) {
    return tok->pad;
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
    buf_t mapped; /* a word in byte-level form (ignore_merges) */
    bool failed;  /* out of memory or a regex error, message in msg */
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
            if (buf_put(&e->mapped, c, utf8_put(tok->byte_cp[w[i]], c)) < 0)
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
    cache_put(tok->cache, h, w, n, e->ids + first, e->n_ids - first);
    return 0;
}

static size_t char_len(const uint8_t *s, size_t n, size_t at) {
    size_t len = 1;
    if (at < n) utf8_at(s + at, &len);
    return len;
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
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, s, n, at, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md, NULL);
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
static int nfc(const uint8_t *s, size_t n, uint8_t **out, size_t *out_len) {
    *out = NULL;
    size_t i = 0;
    while (i < n && s[i] < 0xCC)
        i++;
    if (i == n) return 0;
    buf_t b = {0};
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
        if (len < 0 || buf_put(&b, s + done, start - done) < 0 || buf_put(&b, r, (size_t)len) < 0) {
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
    if (buf_put(&b, s + done, n - done) < 0) {
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
    if (e->tok->nfc && nfc(s, n, &norm, &len) < 0) return enc_fail(e, "out of memory");
    int rc = split_added(e, 1, norm ? norm : s, len);
    free(norm);
    return rc;
}

int tok_encode(const tokenizer_t *tok, const char *text, size_t len, int32_t **ids, size_t *n,
               err_t *err) {
    *ids = NULL;
    *n = 0;
    enc_t e = {.tok = tok};
    buf_t clean = {0};
    const uint8_t *s = (const uint8_t *)text;
    if (!utf8_valid(s, len)) {
        if (utf8_replace(s, len, &clean) < 0) return err_set(err, "out of memory");
        s = (const uint8_t *)clean.p;
        len = clean.len;
    }
    e.md = pcre2_match_data_create(1, NULL);
    if (!e.md) enc_fail(&e, "out of memory");
    if (!e.failed) split_added(&e, 0, s, len);
    if (!e.failed && !e.ids && !(e.ids = malloc(sizeof *e.ids))) enc_fail(&e, "out of memory");
    pcre2_match_data_free(e.md);
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
    buf_t b = {0};
    int rc = buf_put(&b, "[", 1);
    for (size_t i = 0; i < n && rc == 0; i++) {
        char num[16];
        int w = snprintf(num, sizeof num, "%s%" PRId32, i ? ", " : "", ids[i]);
        rc = buf_put(&b, num, (size_t)w);
    }
    if (rc == 0) rc = buf_put(&b, "]", 2);
    free(ids);
    if (rc < 0) {
        free(b.p);
        return err_set(err, "out of memory");
    }
    *out = b.p;
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
    buf_t raw = {0}, out = {0};
    for (size_t i = 0; i < n; i++) {
        if (!decodes(tok, ids[i], skip_special)) continue;
        span_t b = tok->bytes[ids[i]];
        if (buf_put(&raw, tstr(tok, b), b.len) < 0) goto oom;
    }
    if (utf8_replace((const uint8_t *)raw.p, raw.len, &out) < 0 || buf_put(&out, "", 1) < 0)
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

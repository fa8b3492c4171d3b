/*
 * The tokenizer's loading half: tokenizer.json (and tokenizer_config.json) read into the tables
 * of tokenizer_internal.h, refusing what the encoder could not reproduce exactly, and the
 * lookups over those tables.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "tokenizer_internal.h"
#include "unicode.h"
#include "utf8.h"

/* GPT-2's pre-tokenizer regex, used by ByteLevel with use_regex (HF byte_level.rs). */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

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
/* Tables */

static int arena_add(tokenizer_t *tok, const void *data, size_t n, span_t *out) {
    if (tok->arena.len + n + 1 > UINT32_MAX) return -1;
    out->off = (uint32_t)tok->arena.len;
    out->len = (uint32_t)n;
    if (tok_put(&tok->arena, data, n) < 0 || tok_put(&tok->arena, "", 1) < 0) return -1;
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
static int rewrite_pattern(const char *p, size_t n, jbuf_t *out) {
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
                if (tok_put(out, p + i, j - i) < 0) return -1;
                i = j;
                continue;
            }
            const char *rep = NULL;
            if (d == 's') rep = "\\p{White_Space}";
            if (d == 'S') rep = "\\P{White_Space}";
            if (d == 'h') rep = in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
            if (d == 'H' && !in_class) rep = "[^0-9a-fA-F]";
            if (rep) {
                if (tok_put(out, rep, strlen(rep)) < 0) return -1;
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
                    if (tok_put(out, open, strlen(open)) < 0 || tok_put(out, base, 5) < 0 ||
                        tok_put(out, extra, strlen(extra)) < 0 ||
                        tok_put(out, in_class ? "" : "]", in_class ? 0 : 1) < 0)
                        return -1;
                    i = end;
                    continue;
                }
            }
            if (tok_put(out, p + i, 2) < 0) return -1;
            i += 2;
            continue;
        }
        if (in_class) {
            if (c == '[' && i + 1 < n && p[i + 1] == ':') {
                size_t j = i + 2;
                while (j + 1 < n && !(p[j] == ':' && p[j + 1] == ']'))
                    j++;
                j = j + 1 < n ? j + 2 : n;
                if (tok_put(out, p + i, j - i) < 0) return -1;
                i = j;
                continue;
            }
            if (c == ']' && i != class_start) in_class = false;
        } else if (c == '[') {
            in_class = true;
            class_start = i + 1;
            if (class_start < n && p[class_start] == '^') class_start++;
            if (tok_put(out, p + i, class_start - i) < 0) return -1;
            i = class_start;
            continue;
        }
        if (tok_put(out, &c, 1) < 0) return -1;
        i++;
    }
    return 0;
}

static int compile_stage(tokenizer_t *tok, const char *pattern, size_t n, bool literal,
                         err_t *err) {
    if (tok->n_stages == MAX_STAGES)
        return err_set(err, "%s: more than %d pre-tokenizers", tok->name, MAX_STAGES);
    jbuf_t pat = {0};
    uint32_t opts = PCRE2_UTF;
    if (literal) {
        opts |= PCRE2_LITERAL;
        if (tok_put(&pat, pattern, n) < 0) goto oom;
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
    jbuf_t both = {0};
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
        if (tok_put(&both, a, na) < 0 || tok_put(&both, b, nb) < 0) {
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
                if (tok_nfc((const uint8_t *)tstr(tok, a->content), a->content.len, &norm, &len) <
                    0)
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
    jbuf_t tmp = {0};
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
            if (tok_put(&tmp, &b, 1) < 0) goto oom;
            i += len;
        }
        if (i < n) {
            tok->bytes[id] = tok->str[id];
        } else if (arena_add(tok, tmp.p, tmp.len, &tok->bytes[id]) < 0) {
            goto oom;
        }
        if (tok->bytes[id].len > tok->max_token_bytes) tok->max_token_bytes = tok->bytes[id].len;
        tok->flags[id] |=
            utf8_shape((const uint8_t *)tstr(tok, tok->bytes[id]), tok->bytes[id].len);
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

void tok_destroy(tokenizer_t *tok) {
    if (!tok) return;
    for (int i = 0; i < tok->n_stages; i++)
        pcre2_code_free(tok->stages[i].re);
    tok_cache_destroy(tok->cache);
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
    if (!jb_utf8_valid(json, len) ||
        (config_json && !jb_utf8_valid(config_json, strlen(config_json)))) {
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
        !(tok->cache = tok_cache_create()))
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

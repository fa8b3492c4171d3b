/*
 * bench dataset: random, ShareGPT and synthetic-ShareGPT prompts (see dataset.h for the
 * algorithms and the synthetic statistics). Everything is deterministic for o->seed.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dataset.h"
#include "bench_rng.h"

/* Stream tags so the lengths, the text and the shuffles of one seed are independent. */
#define STREAM_LENGTHS 0x5eed0001ULL
#define STREAM_TEXT    0x5eed0002ULL

/* ---- shared helpers ---- */

typedef struct vocab {
    int32_t *allowed; /* [n_allowed] vocabulary ids minus the special ids, ascending */
    int n_allowed;
} vocab_t;

static int vocab_init(vocab_t *v, const bench_tokenizer_t *tok, bench_err_t *err) {
    v->allowed = NULL;
    v->n_allowed = 0;
    if (tok->vocab_size <= 0) return bench_err_set(err, "dataset: tokenizer has no vocabulary");
    v->allowed = malloc((size_t)tok->vocab_size * sizeof *v->allowed);
    if (!v->allowed) return bench_err_set(err, "dataset: out of memory");
    for (int32_t id = 0; id < tok->vocab_size; id++) {
        bool special = false;
        for (int k = 0; k < tok->n_special && !special; k++)
            special = tok->special_ids[k] == id;
        if (!special) v->allowed[v->n_allowed++] = id;
    }
    if (v->n_allowed == 0) {
        free(v->allowed);
        v->allowed = NULL;
        return bench_err_set(err, "dataset: every token of the vocabulary is special");
    }
    return 0;
}

/* The growable token buffer of one prompt. */
typedef struct idbuf {
    int32_t *ids;
    int n, cap;
} idbuf_t;

static int idbuf_reserve(idbuf_t *b, int cap, bench_err_t *err) {
    if (cap <= b->cap) return 0;
    int32_t *p = realloc(b->ids, (size_t)cap * sizeof *p);
    if (!p) return bench_err_set(err, "dataset: out of memory");
    b->ids = p;
    b->cap = cap;
    return 0;
}

/* vLLM's gen_prompt_decode_to_target_len: decode, re-encode without special tokens; cut when
 * long, extend with random tokens when short; at most 10 adjustments. The extension draws from
 * the non-special ids (vLLM draws from the whole vocabulary, which can put a chat-control
 * token in a prompt); the length distribution is unchanged. On success *text (owned by the
 * caller) re-encodes to *n_out tokens, target unless it never converged. */
static int decode_to_target(const bench_tokenizer_t *tok, const vocab_t *v, bench_rng_t *rng,
                            idbuf_t *seq, int target, char **text, int *n_out, bench_err_t *err) {
    *text = NULL;
    for (int tries = 10;; tries--) {
        char *t = NULL;
        int32_t *ids = NULL;
        int n = 0;
        if (tok->decode(tok->ctx, seq->ids, seq->n, &t, err) < 0) return -1;
        if (tok->encode(tok->ctx, t, false, &ids, &n, err) < 0) {
            free(t);
            return -1;
        }
        if (tries <= 0 || n == target) {
            free(ids);
            *text = t;
            *n_out = n;
            return 0;
        }
        free(t);
        int keep = n > target ? target : n;
        if (idbuf_reserve(seq, target > 0 ? target : 1, err) < 0) {
            free(ids);
            return -1;
        }
        if (keep > 0) memcpy(seq->ids, ids, (size_t)keep * sizeof *ids);
        free(ids);
        seq->n = keep;
        while (seq->n < target)
            seq->ids[seq->n++] = v->allowed[bench_rng_below(rng, (uint64_t)v->n_allowed)];
    }
}

static void prompts_free(bench_prompt_t *p, int n) {
    if (!p) return;
    for (int i = 0; i < n; i++)
        free(p[i].text);
    free(p);
}

void bench_dataset_free(bench_prompt_t *p, int n) {
    prompts_free(p, n);
}

static int check_tok(const bench_tokenizer_t *tok, bench_err_t *err) {
    if (!tok || !tok->encode || !tok->decode)
        return bench_err_set(err, "dataset: a tokenizer with encode and decode is required");
    if (tok->n_special > 0 && !tok->special_ids)
        return bench_err_set(err, "dataset: tokenizer lists %d special ids but gives none",
                             tok->n_special);
    return 0;
}

/* ---- random (reference 3.6) ---- */

/* bench_options_t.stop raised while the prompts are made (/bench stop, Ctrl-C): -1 with the
 * message, so that a long preparation ends at once. */
static int check_stop(const bench_options_t *o, bench_err_t *err) {
    return o->stop && atomic_load(o->stop)
               ? bench_err_set(err, "stopped while preparing the prompts")
               : 0;
}

static int build_random(const bench_options_t *o, const bench_tokenizer_t *tok, int n,
                        bench_prompt_t *out, bench_err_t *err) {
    double r = o->range_ratio;
    if (!(r >= 0.0 && r < 1.0))
        return bench_err_set(err, "random dataset: range ratio %g must be in [0, 1)", r);
    if (o->input_len < 0 || o->output_len < 1 || o->prefix_len < 0)
        return bench_err_set(err, "random dataset: bad lengths (input %d, output %d, prefix %d)",
                             o->input_len, o->output_len, o->prefix_len);
    int real = o->input_len - tok->num_special_tokens_to_add;
    if (real < 0) real = 0;
    int64_t in_lo = (int64_t)floor(real * (1.0 - r)), in_hi = (int64_t)ceil(real * (1.0 + r));
    int64_t out_lo = (int64_t)floor(o->output_len * (1.0 - r));
    int64_t out_hi = (int64_t)ceil(o->output_len * (1.0 + r));
    if (out_lo < 1) out_lo = 1;
    if (out_hi < 1) out_hi = 1;

    vocab_t v;
    if (vocab_init(&v, tok, err) < 0) return -1;
    int *in_lens = malloc((size_t)n * sizeof *in_lens);
    int64_t *offsets = malloc((size_t)n * sizeof *offsets);
    idbuf_t seq = {0};
    int rc = 0;
    if (!in_lens || !offsets) {
        rc = bench_err_set(err, "random dataset: out of memory");
        goto done;
    }
    bench_rng_t rng;
    bench_rng_seed(&rng, o->seed);
    /* Same draw order as vLLM: every input length, every output length, every offset. */
    for (int i = 0; i < n; i++)
        in_lens[i] = (int)bench_rng_range(&rng, in_lo, in_hi);
    for (int i = 0; i < n; i++)
        out[i].output_len = (int)bench_rng_range(&rng, out_lo, out_hi);
    for (int i = 0; i < n; i++)
        offsets[i] = bench_rng_range(&rng, 0, tok->vocab_size - 1);
    int32_t *prefix = NULL;
    if (o->prefix_len > 0) {
        prefix = malloc((size_t)o->prefix_len * sizeof *prefix);
        if (!prefix) {
            rc = bench_err_set(err, "random dataset: out of memory");
            goto done;
        }
        for (int k = 0; k < o->prefix_len; k++)
            prefix[k] = v.allowed[bench_rng_below(&rng, (uint64_t)v.n_allowed)];
    }
    for (int i = 0; i < n && rc == 0; i++) {
        if ((rc = check_stop(o, err)) < 0) break;
        int target = o->prefix_len + in_lens[i];
        if ((rc = idbuf_reserve(&seq, target > 0 ? target : 1, err)) < 0) break;
        seq.n = 0;
        for (int k = 0; k < o->prefix_len; k++)
            seq.ids[seq.n++] = prefix[k];
        for (int k = 0; k < in_lens[i]; k++)
            seq.ids[seq.n++] = v.allowed[(offsets[i] + i + k) % v.n_allowed];
        rc = decode_to_target(tok, &v, &rng, &seq, target, &out[i].text, &out[i].prompt_len, err);
    }
    free(prefix);
done:
    free(seq.ids);
    free(in_lens);
    free(offsets);
    free(v.allowed);
    return rc;
}

/* ---- ShareGPT file (reference 3.7) ---- */

static char *read_file(const char *path, bench_err_t *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        bench_err_set(err, "%s: cannot open", path);
        return NULL;
    }
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        if (size >= 0 && fseek(f, 0, SEEK_SET) == 0) {
            buf = malloc((size_t)size + 1);
            if (buf && fread(buf, 1, (size_t)size, f) == (size_t)size) {
                buf[size] = '\0';
            } else {
                free(buf);
                buf = NULL;
            }
        }
    }
    fclose(f);
    if (!buf) bench_err_set(err, "%s: cannot read", path);
    return buf;
}

static const char *turn_text(const cJSON *conv, int k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(conv, k), "value");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int count_tokens(const bench_tokenizer_t *tok, const char *text, int *n, bench_err_t *err) {
    int32_t *ids = NULL;
    if (tok->encode(tok->ctx, text, true, &ids, n, err) < 0) return -1;
    free(ids);
    return 0;
}

static int build_sharegpt(const bench_options_t *o, const bench_tokenizer_t *tok, int n,
                          bench_prompt_t *out, bench_err_t *err) {
    char *json = read_file(o->dataset_path, err);
    if (!json) return -1;
    cJSON *root = cJSON_Parse(json);
    free(json);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return bench_err_set(err, "%s: not a JSON array of conversations", o->dataset_path);
    }
    int total = cJSON_GetArraySize(root);
    const cJSON **entries = malloc((size_t)(total > 0 ? total : 1) * sizeof *entries);
    if (!entries) {
        cJSON_Delete(root);
        return bench_err_set(err, "sharegpt: out of memory");
    }
    int m = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        const cJSON *conv = cJSON_GetObjectItemCaseSensitive(e, "conversations");
        if (cJSON_IsArray(conv) && cJSON_GetArraySize(conv) >= 2) entries[m++] = conv;
    }
    bench_rng_t rng;
    bench_rng_seed(&rng, o->seed);
    for (int i = m - 1; i > 0; i--) { /* random.shuffle's order of swaps */
        int j = (int)bench_rng_below(&rng, (uint64_t)i + 1);
        const cJSON *t = entries[i];
        entries[i] = entries[j];
        entries[j] = t;
    }
    bool fixed = o->output_len > 0;
    int got = 0, rc = 0;
    for (int i = 0; i < m && got < n; i++) {
        const char *prompt = turn_text(entries[i], 0), *completion = turn_text(entries[i], 1);
        if (!prompt || !completion) continue;
        int plen, olen = o->output_len;
        if ((rc = count_tokens(tok, prompt, &plen, err)) < 0) break;
        if (!fixed && (rc = count_tokens(tok, completion, &olen, err)) < 0) break;
        bool bad = plen < 4 || (!fixed && olen < 4) || plen > 1024 || plen + olen > 2048;
        if (bad) continue;
        out[got].text = strdup(prompt);
        if (!out[got].text) {
            rc = bench_err_set(err, "sharegpt: out of memory");
            break;
        }
        out[got].prompt_len = plen;
        out[got].output_len = olen;
        got++;
    }
    free(entries);
    cJSON_Delete(root);
    if (rc < 0) return -1;
    if (got == 0)
        return bench_err_set(err, "%s: no conversation passes vLLM's length filter",
                             o->dataset_path);
    for (int i = got; i < n; i++) { /* oversample as random.choice does */
        const bench_prompt_t *src = &out[bench_rng_below(&rng, (uint64_t)got)];
        out[i] = *src;
        out[i].text = strdup(src->text);
        if (!out[i].text) return bench_err_set(err, "sharegpt: out of memory");
    }
    return 0;
}

/* ---- synthetic ShareGPT ---- */

/* Log-normal parameters fitted (numpy, 2M draws) so that after vLLM's filter the means are
 * 208 prompt / 203 output tokens; see dataset.h for the sources. */
#define SYNTH_PROMPT_MU    4.96981 /* ln 144.0 */
#define SYNTH_PROMPT_SIGMA 1.2
#define SYNTH_OUTPUT_MU    4.93087 /* ln 138.5 */
#define SYNTH_OUTPUT_SIGMA 0.9

void bench_dataset_synthetic_lengths(uint64_t seed, int n, int *prompt_lens, int *output_lens) {
    bench_rng_t rng;
    bench_rng_seed(&rng, seed ^ STREAM_LENGTHS);
    for (int i = 0; i < n; i++) {
        for (;;) {
            /* Box-Muller: one pair of normals per candidate pair of lengths. */
            double u1 = bench_rng_uniform(&rng), u2 = bench_rng_uniform(&rng);
            double rad = sqrt(-2.0 * log(u1)), ang = 2.0 * M_PI * u2;
            double p = nearbyint(exp(SYNTH_PROMPT_MU + SYNTH_PROMPT_SIGMA * rad * cos(ang)));
            double o = nearbyint(exp(SYNTH_OUTPUT_MU + SYNTH_OUTPUT_SIGMA * rad * sin(ang)));
            if (p >= 4 && o >= 4 && p <= 1024 && p + o <= 2048) {
                prompt_lens[i] = (int)p;
                output_lens[i] = (int)o;
                break;
            }
        }
    }
}

/* Words for synthetic prompts: plain English so the tokenizer sees ordinary text. */
static const char *const k_words[] = {
    "the",        "model",     "explain",  "how",      "to",         "write",    "a",
    "function",   "that",      "returns",  "list",     "of",         "numbers",  "in",
    "python",     "and",       "what",     "is",       "difference", "between",  "two",
    "ways",       "please",    "give",     "me",       "an",         "example",  "story",
    "about",      "small",     "village",  "near",     "river",      "where",    "people",
    "work",       "together",  "every",    "morning",  "before",     "sunrise",  "can",
    "you",        "help",      "with",     "my",       "essay",      "on",       "history",
    "science",    "music",     "travel",   "food",     "health",     "business", "plan",
    "for",        "new",       "company",  "which",    "sells",      "coffee",   "online",
    "summarize",  "following", "text",     "into",     "three",      "short",    "points",
    "why",        "does",      "this",     "code",     "fail",       "when",     "input",
    "empty",      "translate", "sentence", "French",   "German",     "create",   "table",
    "showing",    "price",     "growth",   "over",     "last",       "ten",      "years",
    "describe",   "process",   "learning", "language", "quickly",    "best",     "practices",
    "design",     "simple",    "web",      "page",     "using",      "HTML",     "CSS",
    "JavaScript", "data",      "analysis", "report",   "customer",   "email",    "reply",
    "friendly",   "tone",      "under",    "words",    "compare",    "these",    "options",
    "carefully",
};

#define N_WORDS ((int)(sizeof k_words / sizeof k_words[0]))

/* Text of exactly body tokens under tok (no special tokens): words until the encoding is long
 * enough, cut to body tokens, then decode_to_target. */
static int synth_text(const bench_tokenizer_t *tok, const vocab_t *v, bench_rng_t *rng, int body,
                      char **text, int *n_tok, bench_err_t *err) {
    int n_words = body + 8;
    for (;;) {
        size_t cap = (size_t)n_words * 12 + 1, len = 0;
        char *s = malloc(cap);
        if (!s) return bench_err_set(err, "synthetic dataset: out of memory");
        for (int w = 0; w < n_words; w++) {
            const char *word = k_words[bench_rng_below(rng, N_WORDS)];
            size_t wl = strlen(word);
            if (len + wl + 2 > cap) break;
            if (w) s[len++] = ' ';
            memcpy(s + len, word, wl);
            len += wl;
        }
        s[len] = '\0';
        int32_t *ids = NULL;
        int n = 0;
        int rc = tok->encode(tok->ctx, s, false, &ids, &n, err);
        free(s);
        if (rc < 0) return -1;
        if (n >= body) {
            idbuf_t seq = {ids, body, n};
            rc = decode_to_target(tok, v, rng, &seq, body, text, n_tok, err);
            free(seq.ids);
            return rc;
        }
        free(ids);
        n_words *= 2;
    }
}

static int build_synthetic(const bench_options_t *o, const bench_tokenizer_t *tok, int n,
                           bench_prompt_t *out, bench_err_t *err) {
    int *plens = malloc((size_t)n * sizeof *plens), *olens = malloc((size_t)n * sizeof *olens);
    vocab_t v = {0};
    int rc = 0;
    if (!plens || !olens) {
        rc = bench_err_set(err, "synthetic dataset: out of memory");
        goto done;
    }
    if ((rc = vocab_init(&v, tok, err)) < 0) goto done;
    bench_dataset_synthetic_lengths(o->seed, n, plens, olens);
    bench_rng_t rng;
    bench_rng_seed(&rng, o->seed ^ STREAM_TEXT);
    int nspec = tok->num_special_tokens_to_add > 0 ? tok->num_special_tokens_to_add : 0;
    for (int i = 0; i < n; i++) {
        /* ShareGPT's prompt_len counts the tokens encode(add_special) adds, as vLLM does. */
        int body = plens[i] - nspec;
        if (body < 1) body = 1;
        int got;
        if ((rc = check_stop(o, err)) < 0) break;
        if ((rc = synth_text(tok, &v, &rng, body, &out[i].text, &got, err)) < 0) break;
        out[i].prompt_len = got + nspec;
        out[i].output_len = o->output_len > 0 ? o->output_len : olens[i];
    }
done:
    free(plens);
    free(olens);
    free(v.allowed);
    return rc;
}

int bench_dataset_build(const bench_options_t *o, const bench_tokenizer_t *tok, int n,
                        bench_prompt_t **out, bool *synthetic, bench_err_t *err) {
    if (out) *out = NULL;
    if (!o || !out || !synthetic) return bench_err_set(err, "bench_dataset_build: bad arguments");
    if (n < 1) return bench_err_set(err, "dataset: %d prompts requested (at least 1)", n);
    if (check_tok(tok, err) < 0) return -1;
    bench_prompt_t *p = calloc((size_t)n, sizeof *p);
    if (!p) return bench_err_set(err, "dataset: out of memory");
    int rc;
    *synthetic = false;
    switch (o->dataset) {
        case BENCH_DATASET_RANDOM:
            rc = build_random(o, tok, n, p, err);
            break;
        case BENCH_DATASET_SHAREGPT:
        case BENCH_DATASET_SHAREGPT_SYNTHETIC:
            /* ShareGPT without a file: the synthetic generator stands in. */
            if (o->dataset == BENCH_DATASET_SHAREGPT && o->dataset_path[0]) {
                rc = build_sharegpt(o, tok, n, p, err);
            } else {
                *synthetic = true;
                rc = build_synthetic(o, tok, n, p, err);
            }
            break;
        default:
            rc = bench_err_set(err, "dataset: unknown dataset %d", (int)o->dataset);
    }
    if (rc < 0) {
        prompts_free(p, n);
        return -1;
    }
    *out = p;
    return 0;
}

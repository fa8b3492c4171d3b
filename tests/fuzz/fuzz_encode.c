/*
 * Encoding and decoding arbitrary bytes (engine/tokenizer.c, tokenizer_detok.c) with each
 * fixture tokenizer (Qwen3, Qwen3.5, GPT-2, the edge cases file, tiny-qwen3): the first byte
 * picks the tokenizer, the rest is the text; the same bytes read as 16-bit ids (some beyond the
 * vocabulary) are decoded whole and streamed. Properties: encoding never fails and gives ids in
 * the vocabulary; decoding gives valid UTF-8; for valid UTF-8 text without the added tokens'
 * lstrip/rstrip, decode(encode(text)) gives the text back as the tokenizer normalized it
 * (checked where the file has no normalizer); streaming adds up to the whole decode.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "mdir.h"
#include "tokenizer.h"

static const struct {
    const char *dir;
    bool round_trip; /* no normalizer, no stripping added tokens */
} TOKENIZERS[] = {
    {"tokenizer/qwen3", false}, {"tokenizer/qwen35", false}, {"tokenizer/gpt2", true},
    {"tokenizer/edge", false},  {"tiny-qwen3", false},
};
#define N_TOK (sizeof TOKENIZERS / sizeof TOKENIZERS[0])

static tokenizer_t *toks[N_TOK];

static tokenizer_t *get(size_t i) {
    if (!toks[i]) {
        mdir_t *dir;
        err_t err;
        if (mdir_open(fz_fixture(TOKENIZERS[i].dir), &dir, &err) < 0 ||
            tok_load(dir, &toks[i], &err) < 0) {
            fprintf(stderr, "fuzz_encode: %s\n", err.msg);
            abort();
        }
        mdir_close(dir);
    }
    return toks[i];
}

static void stream_matches(tokenizer_t *tok, const int32_t *ids, size_t n, bool skip,
                           const char *whole, size_t whole_len) {
    tok_stream_t *st = tok_stream_create(tok, skip);
    if (!st) abort();
    size_t cap = tok_stream_max_chunk(tok), len, at = 0;
    char *buf = malloc(cap);
    if (!buf) abort();
    for (size_t i = 0; i < n; i++) {
        FZ_CHECK(tok_stream_push(st, ids[i], buf, cap, &len) == 0, "push failed");
        FZ_CHECK(at + len <= whole_len && !memcmp(whole + at, buf, len),
                 "streamed chunk %zu differs from the whole decode", i);
        at += len;
    }
    FZ_CHECK(tok_stream_finish(st, buf, cap, &len) == 0, "finish failed");
    FZ_CHECK(at + len == whole_len && !memcmp(whole + at, buf, len),
             "stream ends at %zu of %zu bytes", at + len, whole_len);
    free(buf);
    tok_stream_destroy(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t which = data[0] % N_TOK;
    tokenizer_t *tok = get(which);
    const char *text = (const char *)data + 1; /* the input's tail: ASan sees any overread */
    size_t len = size - 1;
    err_t err;
    int32_t *ids;
    size_t n;
    int32_t vocab = tok_vocab_size(tok);
    FZ_CHECK(tok_encode(tok, text, len, &ids, &n, &err) == 0, "%s", err.msg);
    for (size_t i = 0; i < n; i++)
        FZ_CHECK(ids[i] >= 0 && ids[i] < vocab, "id %d of %d", ids[i], vocab);
    char *back;
    size_t back_len;
    FZ_CHECK(tok_decode(tok, ids, n, false, &back, &back_len, &err) == 0, "%s", err.msg);
    FZ_CHECK(fz_utf8_valid((const uint8_t *)back, back_len), "decode gave invalid UTF-8");
    if (TOKENIZERS[which].round_trip && fz_utf8_valid((const uint8_t *)text, len))
        FZ_CHECK(back_len == len && !memcmp(back, text, len), "round trip of %zu bytes gave %zu",
                 len, back_len);
    stream_matches(tok, ids, n, false, back, back_len);
    free(back);
    free(ids);

    /* the same bytes as ids, a few beyond the vocabulary */
    size_t n_raw = len / 2;
    int32_t *raw = malloc((n_raw ? n_raw : 1) * sizeof *raw);
    if (!raw) abort();
    for (size_t i = 0; i < n_raw; i++)
        raw[i] =
            (int32_t)((uint32_t)(uint8_t)text[2 * i] | (uint32_t)(uint8_t)text[2 * i + 1] << 8) %
            (vocab + 8);
    for (int skip = 0; skip < 2; skip++) {
        FZ_CHECK(tok_decode(tok, raw, n_raw, skip, &back, &back_len, &err) == 0, "%s", err.msg);
        FZ_CHECK(fz_utf8_valid((const uint8_t *)back, back_len), "decode gave invalid UTF-8");
        stream_matches(tok, raw, n_raw, skip, back, back_len);
        free(back);
    }
    free(raw);
    return 0;
}

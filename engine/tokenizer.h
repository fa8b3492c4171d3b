/*
 * tokenizer: a Hugging Face tokenizer.json (byte-level BPE, as Qwen3 and Qwen3.5 ship it).
 *
 * Encoding gives the ids of HF `tokenizers` Tokenizer.encode(text) (transformers' default
 * for Qwen: no BOS, no EOS). The pipeline is HF's: added tokens are cut out of the raw text
 * (leftmost, longest first, honouring lstrip/rstrip/single_word/normalized); the rest is
 * NFC-normalized when the file says so, split by the file's pre-tokenizer regexes (PCRE2 with
 * the classes adjusted to HF's Oniguruma: \s is White_Space, \p{L}/\p{N}/\p{M} use Unicode
 * 16), mapped through GPT-2's byte-to-unicode table and merged by BPE rank. Decoding gives
 * Tokenizer.decode(ids, skip_special_tokens): token bytes concatenated, invalid UTF-8 replaced
 * by U+FFFD per maximal invalid subpart (Python's errors="replace", Rust's from_utf8_lossy).
 *
 * Input that is not valid UTF-8 is first decoded as Python's bytes.decode("utf-8",
 * "replace") would (each maximal invalid subpart becomes U+FFFD), so any byte string encodes;
 * HF itself only ever sees valid strings.
 *
 * A tokenizer_t does not change after tok_load and may be used by any number of threads at
 * once (its word cache takes a lock). A tok_stream_t belongs to one sequence.
 *
 *     tokenizer_t *tok;
 *     if (tok_load(dir, &tok, &err) < 0) ...
 *     int32_t *ids; size_t n;
 *     if (tok_encode(tok, text, strlen(text), &ids, &n, &err) < 0) ...
 *     free(ids);
 *
 *     tok_stream_t *st = tok_stream_create(tok, true);   // detokenize generated ids
 *     size_t cap = tok_stream_max_chunk(tok), len;        // sized once, no per-token malloc
 *     char *buf = malloc(cap);
 *     for each id: tok_stream_push(st, id, buf, cap, &len); emit(buf, len);
 *     tok_stream_finish(st, buf, cap, &len); emit(buf, len);
 *     tok_stream_destroy(st);
 */
#ifndef TACHYON_TOKENIZER_H
#define TACHYON_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "mdir.h"

typedef struct tokenizer tokenizer_t;
typedef struct tok_stream tok_stream_t;

/* Loads tokenizer.json of a model directory, and tokenizer_config.json when present (eos /
 * bos / pad tokens, and added_tokens_decoder entries tokenizer.json lacks). Refuses what it
 * cannot reproduce exactly (another model type, normalizer, pre-tokenizer or decoder, BPE
 * dropout, byte fallback) with a message naming tokenizer.json. The caller owns *out. */
int tok_load(mdir_t *dir, tokenizer_t **out, err_t *err);

/* The same from the texts of the two files; config_json may be NULL. `name` (the path of
 * tokenizer.json) prefixes every message. */
int tok_load_json(const char *json, size_t len, const char *config_json, const char *name,
                  tokenizer_t **out, err_t *err);

void tok_destroy(tokenizer_t *tok);

/* Encodes len bytes of text (any bytes; NULs are characters). *ids is a new array the caller
 * frees (non-NULL even when *n is 0). Fails only when out of memory. */
int tok_encode(const tokenizer_t *tok, const char *text, size_t len, int32_t **ids, size_t *n,
               err_t *err);

/* Encodes text and formats the ids as a JSON array, "[9707, 11, 1879]", for debugging and the
 * `tokenize` command. The caller frees *out (NUL-terminated). */
int tok_encode_to_string(const tokenizer_t *tok, const char *text, size_t len, char **out,
                         err_t *err);

/* Decodes ids to UTF-8 text. Ids that name no token are skipped, as HF does; with
 * skip_special, so are tokens whose added-token entry says "special": true (<|im_end|>), but
 * not non-special added tokens (<think>). *text is a new NUL-terminated string the caller
 * frees; *len excludes the NUL. Fails only when out of memory. */
int tok_decode(const tokenizer_t *tok, const int32_t *ids, size_t n, bool skip_special, char **text,
               size_t *len, err_t *err);

/* 1 + the largest id (vocabulary and added tokens): 151669 for Qwen3. */
int32_t tok_vocab_size(const tokenizer_t *tok);

/* The id of a token given as it appears in tokenizer.json (added-token content such as
 * "<|im_end|>", or a vocabulary entry in byte-level form such as "Ġthe"); -1 when none. */
int32_t tok_token_to_id(const tokenizer_t *tok, const char *token);

/* The token of an id as tokenizer.json spells it (NUL-terminated, owned by the tokenizer);
 * NULL when the id names no token. */
const char *tok_id_to_token(const tokenizer_t *tok, int32_t id);

/* The bytes an id decodes to (not NUL-terminated, may be part of a UTF-8 character; owned by
 * the tokenizer); NULL when the id names no token. */
const char *tok_id_to_bytes(const tokenizer_t *tok, int32_t id, size_t *len);

/* True for added tokens marked "special": true (dropped by skip_special decoding). */
bool tok_is_special(const tokenizer_t *tok, int32_t id);

/* True for every added token, special or not (<think> included). */
bool tok_is_added(const tokenizer_t *tok, int32_t id);

/* Ids of tokenizer_config.json's eos_token, bos_token and pad_token; -1 when absent. */
int32_t tok_eos_id(const tokenizer_t *tok);
int32_t tok_bos_id(const tokenizer_t *tok);
int32_t tok_pad_id(const tokenizer_t *tok);

/* Incremental detokenizer. Pushing ids one at a time yields, chunk by chunk, exactly the
 * text tok_decode gives for the whole sequence; no chunk ends inside a UTF-8 character
 * (bytes of an unfinished character wait for the next id). NULL when out of memory. */
tok_stream_t *tok_stream_create(const tokenizer_t *tok, bool skip_special);

void tok_stream_destroy(tok_stream_t *st);

/* Forgets pending bytes, to start a new sequence. */
void tok_stream_reset(tok_stream_t *st);

/* A capacity that always suffices for one tok_stream_push or tok_stream_finish. */
size_t tok_stream_max_chunk(const tokenizer_t *tok);

/* Adds one id and writes the newly completed text to out (not NUL-terminated), *out_len bytes,
 * possibly 0. Returns -1, consuming nothing, only when cap is smaller than the chunk (never
 * with cap >= tok_stream_max_chunk). */
int tok_stream_push(tok_stream_t *st, int32_t id, char *out, size_t cap, size_t *out_len);

/* Ends the sequence: bytes of an unfinished character become one U+FFFD, as Python's
 * errors="replace" would give. The stream is then empty, ready for a new sequence. Returns -1
 * only when cap < 3 and there is something to write. */
int tok_stream_finish(tok_stream_t *st, char *out, size_t cap, size_t *out_len);

#endif

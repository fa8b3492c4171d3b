/*
 * tokenizer.json loading (engine/tokenizer_load.c): the input is a tokenizer.json text,
 * optionally followed by "\n#config\n" and a tokenizer_config.json text. A tokenizer that loads
 * then encodes and decodes a fixed text with its special tokens. Properties: every id is inside
 * the vocabulary, and the vocabulary's own ids name tokens.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "tokenizer.h"

static const char TEXT[] = "Hello <|im_start|>user\n  wörld 123 \xe4\xbd\xa0\xe5\xa5\xbd!\n\n"
                           "<think>\n</think><|im_end|> \xf0\x9f\x98\x80\xff";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_part_t parts[2];
    int n = fz_split(data, size, "\n#config\n", parts, 2);
    char *json = fz_strndup(parts[0].p, parts[0].n);
    char *config = n == 2 ? fz_strndup(parts[1].p, parts[1].n) : NULL;
    tokenizer_t *tok;
    err_t err;
    if (tok_load_json(json, parts[0].n, config, "tokenizer.json", &tok, &err) == 0) {
        int32_t vocab = tok_vocab_size(tok);
        FZ_CHECK(vocab > 0, "vocabulary of %d", vocab);
        int32_t *ids;
        size_t n_ids;
        FZ_CHECK(tok_encode(tok, TEXT, sizeof TEXT - 1, &ids, &n_ids, &err) == 0, "%s", err.msg);
        for (size_t i = 0; i < n_ids; i++)
            FZ_CHECK(ids[i] >= 0 && ids[i] < vocab, "id %d outside a vocabulary of %d", ids[i],
                     vocab);
        char *text;
        size_t len;
        FZ_CHECK(tok_decode(tok, ids, n_ids, false, &text, &len, &err) == 0, "%s", err.msg);
        free(text);
        free(ids);
        for (int32_t id = 0; id < vocab && id < 64; id++)
            (void)tok_id_to_token(tok, id);
        (void)tok_token_to_id(tok, "<|im_end|>");
        tok_destroy(tok);
    } else {
        FZ_CHECK(err.msg[0], "refused without a message");
    }
    free(config);
    free(json);
    return 0;
}

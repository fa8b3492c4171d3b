/*
 * genconfig: a model's generation defaults (generation_config.json) and stop tokens.
 *
 * vLLM reads generation_config.json for two things: the eos ids, which join the tokenizer's own
 * eos id as stop tokens, and default sampling values that apply where a request sets none
 * (unless --generation-config vllm). A missing file means no defaults, not an error. Fields the
 * file does not set are flagged absent, so command-line flags and request fields can tell
 * "default" from "set to the default value".
 *
 *     genconfig_t gc;
 *     if (genconfig_load(dir, &gc, &err) < 0) ...
 *     int stop[GENCONFIG_MAX_EOS + 1];
 *     int n = genconfig_stop_ids(&gc, tokenizer_eos_id, stop, GENCONFIG_MAX_EOS + 1);
 *     double t = gc.has_temperature ? gc.temperature : 1.0;
 */
#ifndef TACHYON_GENCONFIG_H
#define TACHYON_GENCONFIG_H

#include <stdbool.h>

#include "err.h"
#include "mdir.h"

#define GENCONFIG_MAX_EOS 16

typedef struct genconfig {
    bool found;                     /* generation_config.json exists */
    int eos_ids[GENCONFIG_MAX_EOS]; /* eos_token_id (an int or a list), in file order */
    int n_eos;
    int bos_token_id; /* -1 when absent */
    int pad_token_id; /* -1 when absent */
    /* Sampling defaults; has_* is false when the field is absent or null. */
    bool has_temperature, has_top_k, has_top_p, has_min_p, has_repetition_penalty;
    bool has_do_sample, has_max_new_tokens;
    double temperature;
    int top_k;
    double top_p, min_p, repetition_penalty;
    bool do_sample; /* read for display; vLLM ignores it (temperature decides) */
    int max_new_tokens;
    /* tokenizer_config.json "eos_token" (a string, or an object's "content"); "" when absent.
     * vLLM's primary eos id is this token's id. */
    char eos_token[64];
} genconfig_t;

/* Parses generation_config.json text; `file` names it in messages. Fails on invalid JSON and on
 * fields of the wrong type or range (eos_token_id must be an id or a list of ids, top_p in
 * (0, 1], ...). */
int genconfig_parse(const char *text, const char *file, genconfig_t *out, err_t *err);

/* Reads generation_config.json (absent: all defaults absent, found = false) and the eos_token of
 * tokenizer_config.json (absent or unreadable fields: ""; invalid JSON fails). */
int genconfig_load(mdir_t *dir, genconfig_t *out, err_t *err);

/* The stop ids as vLLM merges them: primary_eos (the tokenizer's eos id; config.json's
 * eos_token_id when the tokenizer has none; -1 for none) first, then the generation config's eos
 * ids not already listed. Writes at most max ids to ids and returns how many it wrote. */
int genconfig_stop_ids(const genconfig_t *gc, int primary_eos, int *ids, int max);

#endif

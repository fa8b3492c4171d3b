/*
 * sampling: a request's sampling parameters and stop conditions, as the OpenAI API and vLLM
 * define them. Shared by the engine API, the sampler and the server.
 *
 * Fields left "unset" (sampling_params_init) take the engine's defaults, which come from the
 * model's generation_config.json and can be overridden by flags, as vLLM does.
 *
 *     sampling_params_t p;
 *     sampling_params_init(&p);
 *     p.max_tokens = 64;
 *     p.temperature = 0.0f;          // greedy
 *     sampling_params_add_stop(&p, "\n\n", &err);
 *     ...
 *     sampling_params_free(&p);
 */
#ifndef TACHYON_SAMPLING_H
#define TACHYON_SAMPLING_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "err.h"

#define SAMPLING_UNSET_F      NAN /* float fields: take the default */
#define SAMPLING_UNSET_I      -1  /* int fields: take the default */
#define SAMPLING_MAX_LOGPROBS 20
#define SAMPLING_MAX_STOP     16
#define SAMPLING_MAX_STOP_IDS 64
#define SAMPLING_MAX_N        16

typedef struct sampling_params {
    int n;                    /* choices, 1..SAMPLING_MAX_N */
    float temperature;        /* 0 = greedy; unset: default */
    int top_k;                /* 0 = off; -1 (SAMPLING_UNSET_I) = unset: default. An API's
                                 explicit -1 ("disabled" in vLLM) must be passed as 0. */
    float top_p;              /* (0, 1]; unset: default */
    float min_p;              /* [0, 1]; unset: default */
    float presence_penalty;   /* [-2, 2], 0 = off; unset: default */
    float frequency_penalty;  /* [-2, 2], 0 = off; unset: default */
    float repetition_penalty; /* > 0, 1 = off; unset: default */
    int max_tokens;           /* new tokens per choice; unset: default, else (-1 after
                                 resolution) up to the context limit */
    int min_tokens;           /* EOS and stop ids ignored before this many new tokens; unset:
                                 default */
    int logprobs;             /* -1 = none; 0..SAMPLING_MAX_LOGPROBS: the sampled token's
                                 logprob plus that many top alternatives */
    bool has_seed;
    uint64_t seed;
    bool ignore_eos;
    bool skip_special_tokens;        /* in the text (default true) */
    bool include_stop_str_in_output; /* default false */
    int32_t stop_token_ids[SAMPLING_MAX_STOP_IDS];
    int n_stop_token_ids;
    char *stop[SAMPLING_MAX_STOP]; /* owned, NUL-terminated, non-empty */
    int n_stop;
} sampling_params_t;

/* Everything unset, n = 1, no stops, skip_special_tokens true. */
void sampling_params_init(sampling_params_t *p);

/* Frees the stop strings (n_stop becomes 0; calling it twice is harmless). */
void sampling_params_free(sampling_params_t *p);

/* Deep copy (the stop strings are duplicated). dst is overwritten as if uninitialized (free it
 * first if it owned strings); on failure it owns nothing. */
int sampling_params_copy(sampling_params_t *dst, const sampling_params_t *src, err_t *err);

/* Adds a stop string (copied). Fails on an empty string or more than SAMPLING_MAX_STOP. */
int sampling_params_add_stop(sampling_params_t *p, const char *stop, err_t *err);

/* Fills unset fields from `defaults` (NULL: all unset), whose own unset fields mean:
 * temperature 1, top_k 0 (off), top_p 1, min_p 0, presence/frequency 0, repetition_penalty 1,
 * max_tokens -1 (context limit), min_tokens 0. Then applies vLLM's rules and checks every range,
 * the message naming the field as vLLM / the OpenAI API do ("temperature must be in [0, 2], got
 * 3"):
 *   n in [1, SAMPLING_MAX_N]; presence/frequency_penalty in [-2, 2]; repetition_penalty finite
 *   and > 0; temperature in [0, 2], and one in (0, 0.01) is raised to 0.01 (vLLM's _MAX_TEMP,
 *   against inf/nan in the softmax); top_p in (0, 1]; top_k 0 or >= 1; min_p in [0, 1];
 *   max_tokens >= 1 or -1; min_tokens >= 0 and <= max_tokens; logprobs in
 *   [-1, SAMPLING_MAX_LOGPROBS]; stop_token_ids >= 0 (duplicates removed, order kept); stop
 *   strings non-empty.
 * Greedy (temperature below 1e-5, i.e. 0) resets top_p 1, top_k 0, min_p 0 and requires n = 1,
 * as vLLM does. Resolving twice changes nothing. On failure p is partly filled but still only
 * needs sampling_params_free. */
int sampling_params_resolve(sampling_params_t *p, const sampling_params_t *defaults, err_t *err);

#endif

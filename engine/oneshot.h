/*
 * oneshot: one request generated start to finish on a backend, without the scheduler.
 *
 * The simplest driver of the backend interface: it lays a single sequence out in contiguous KV
 * blocks, prefills the prompt in chunks of at most `chunk_tokens` (chunked prefill reading the
 * cached prefix), then decodes one token per step. The golden tests use it to check the
 * backend against transformers without the scheduler in the way; the engine (scheduler + continuous batching) drives the same backend calls for many
 * sequences at once.
 *
 *     oneshot_opts_t o = oneshot_defaults();
 *     o.max_new_tokens = 32;
 *     oneshot_result_t r;
 *     if (oneshot_generate(be, cfg, prompt, n_prompt, &o, &r, &err) < 0) ...
 *     // r.ids[0 .. r.n_ids), r.prefill_ms, r.decode_ms
 *     oneshot_result_free(&r);
 */
#ifndef TACHYON_ONESHOT_H
#define TACHYON_ONESHOT_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "model.h"

typedef struct oneshot_opts {
    int max_new_tokens;
    float temperature;      /* 0 = greedy */
    uint64_t seed;          /* for temperature > 0 */
    int chunk_tokens;       /* prefill chunk size (tokens per step) */
    int block_size;         /* KV block size, tokens */
    const int32_t *stop_ids; /* stop when one of these is generated (kept in the output) */
    int n_stop_ids;
    /* Called with every new token as it is generated (may be NULL); a non-zero return stops. */
    int (*on_token)(void *ctx, int32_t id);
    void *ctx;
} oneshot_opts_t;

typedef struct oneshot_result {
    int32_t *ids; /* generated ids, owned: oneshot_result_free */
    int n_ids;
    int n_prompt;
    double prefill_ms; /* wall time of the prefill steps (first token included) */
    double decode_ms;  /* wall time of the decode steps */
    bool stopped;      /* ended on a stop id or by on_token, not by max_new_tokens */
} oneshot_result_t;

oneshot_opts_t oneshot_defaults(void);

/* Generates up to max_new_tokens after the prompt. Reserves the backend's KV pool for the
 * sequence (ceil((n_prompt + max_new_tokens) / block_size) blocks). Fails when the prompt is
 * empty, an id is outside the vocabulary, or the sequence would pass max_position_embeddings.
 * The caller owns r->ids. */
int oneshot_generate(backend_t *be, const model_config_t *cfg, const int32_t *prompt, int n_prompt,
                     const oneshot_opts_t *opts, oneshot_result_t *r, err_t *err);

void oneshot_result_free(oneshot_result_t *r);

/* Index of the largest logit (the first one on ties, as torch.argmax). */
int oneshot_argmax(const float *logits, int n);

#endif

/*
 * sampler: turns one row of logits into a token, as vLLM's sampler does: logprobs of the raw
 * distribution, then min_tokens (EOS and stop ids masked), penalties (repetition over prompt and
 * output, presence and frequency over output), temperature, min_p, top_k and top_p, and a draw.
 * Greedy (temperature below 1e-5) is the argmax, first index on ties.
 *
 * The random draw: min_p drops tokens whose probability is below min_p times the largest;
 * top_k keeps exactly the k best (ties: lower id first, where vLLM keeps every tie of the k-th
 * value); top_p then keeps the smallest best-first prefix of those whose renormalized mass
 * reaches top_p (at least one token). With the kept tokens in canonical order (descending
 * probability, ties lower id first) and u = (rng_bits(seed, choice, n_output) >> 11) * 2^-53,
 * the token is the first whose cumulative probability exceeds u (weights expf(logit - max) in
 * f32, sums in f64). Top-k is a heap selection and the top_p cut and the draw are a quickselect
 * on mass, so nothing sorts the vocabulary: a row costs expected O(V) plus O(prompt + output)
 * for penalties (about 0.3 ms for V = 151936 with top_k 20, 2 ms with no top_k, -O3).
 *
 * Randomness is counter-based (rng.h): the draw for output position i of choice c of a request
 * with seed s depends only on (s, c, i), so a seeded request gives the same tokens whatever else
 * is in the batch.
 *
 *     sampler_t *smp = sampler_create(vocab_size);
 *     sampler_row_t row = {.params = &p, .prompt = ids, .n_prompt = n, .output = out,
 *                          .n_output = n_out, .seed = seed, .choice = 0};
 *     sampler_result_t r;
 *     sampler_sample(smp, logits, &row, &r);      // logits are modified in place
 *     sampler_destroy(smp);
 *
 * Not thread-safe (scratch buffers); one per engine thread. No allocation per call.
 */
#ifndef TACHYON_SAMPLER_H
#define TACHYON_SAMPLER_H

#include <stdint.h>

#include "sampling.h"

typedef struct sampler sampler_t;

typedef struct sampler_row {
    const sampling_params_t *params; /* resolved (sampling_params_resolve) */
    const int32_t *prompt;           /* for the repetition penalty */
    int n_prompt;
    const int32_t *output; /* tokens generated so far by this choice */
    int n_output;
    const int32_t *eos_ids; /* masked, with params->stop_token_ids, while n_output <
                               min_tokens; also with ignore_eos, as vLLM's min-tokens processor
                               masks all_stop_token_ids, which always holds the EOS */
    int n_eos;
    uint64_t seed; /* the request's seed (its own, or one the engine drew) */
    int choice;
} sampler_row_t;

typedef struct sampler_result {
    int32_t token;
    float logprob; /* of the token under the raw distribution (log_softmax of the logits);
                      computed only when params->logprobs >= 0, else 0 */
    int n_top;     /* = params->logprobs when >= 0 (at most vocab_size), else 0 */
    int32_t top_ids[SAMPLING_MAX_LOGPROBS];
    float top_logprobs[SAMPLING_MAX_LOGPROBS]; /* raw distribution, descending */
} sampler_result_t;

sampler_t *sampler_create(int vocab_size); /* NULL when out of memory or vocab_size < 1 */
void sampler_destroy(sampler_t *smp);

/* Samples one token from logits[vocab_size] (modified in place). Token ids in prompt, output,
 * eos_ids and stop ids outside [0, vocab_size) are ignored. If every logit is -inf or NaN the
 * result is token 0. */
void sampler_sample(sampler_t *smp, float *logits, const sampler_row_t *row, sampler_result_t *out);

/* The index of x[0..n)'s largest entry, the first on a tie (greedy sampling's choice). */
int32_t sampler_argmax(const float *x, int n);

#endif

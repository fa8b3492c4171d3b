/*
 * spec: speculative decoding inside the engine step (vLLM's --speculative-config). Before the
 * scheduler plans a step, a drafter proposes up to k tokens to follow each decoding sequence;
 * they are appended to the sequence's tokens, so the plan computes them with its last sampled
 * token in one chunk (blocks for their K/V are allocated as for any token). The batch asks for
 * logits at all k+1 positions (batch.h); each row is sampled as usual, with the output count
 * (rng index, penalties, min_tokens) of the position it verifies. Draft j is accepted while the
 * token sampled at its position equals it; the first sampled token that differs (or, when all
 * k are accepted, the bonus token after the last draft) ends the run. So one step emits between
 * 1 and k+1 tokens per sequence.
 *
 * The acceptance rule. For a point-mass draft x (a drafter that proposes one token, as n-gram
 * lookup and greedy MTP do) the standard rule is: accept x with probability p(x) under the
 * target's processed distribution p; on rejection sample from p with x removed, renormalized.
 * Drawing y ~ p and accepting iff y == x is that rule exactly: P(accept) = p(x), and a rejected
 * y is distributed as p restricted to y != x, renormalized. Drawing y with the uniform the
 * sampler would have used at that output position without speculation (rng.h: seed, choice,
 * output index) couples the two runs: a seeded request gives the very tokens it gives without
 * speculation, greedy or sampled, as long as the logits are the same (the CPU backend is
 * batch-invariant, so they are, bit for bit).
 *
 * KV: a rejected draft's K/V stays in its slot but the sequence's computed count ends at the
 * last accepted position, so the next step overwrites it; blocks taken for drafts stay with the
 * sequence (it grows into them) and go back with the rest. Prefix caching only ever commits
 * computed, accepted positions. Recurrent state (Qwen3.5): the verify step advances the state
 * over every draft, so the sequence's state slot is first copied to a spare slot (state_copy);
 * if a draft is rejected the copy is put back and the whole step's tokens count as not
 * computed: the next step recomputes them, without drafts (with drafts on top, a run of
 * rejections would roll an ever longer tail back). A sequence drafts only when a spare slot is
 * free (at max-num-seqs running sequences with state, fewer draft).
 *
 * Drafters implement spec_drafter_t (n-gram prompt lookup); the MTP head (spec_mtp.h) drafts
 * after a step instead, from the hidden states the model computed in it (spec_mtp).
 *
 *     flags: --speculative-config '{"method":"ngram","num_speculative_tokens":3,
 *                                   "prompt_lookup_max":4,"prompt_lookup_min":2}'
 *     engine step:  spec_draft(e);  sched_schedule(...);  spec_plan(e, &out);
 *                   batch_build(...); forward; sample;  emit = spec_verify(e, &out, &b);
 *                   sched_advance(...);  emit[l]: output row l;  spec_mtp(e, &out, &b)
 *                   ...  spec_drop(e) on failure
 *
 * Engine thread only.
 */
#ifndef TACHYON_SPEC_H
#define TACHYON_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "err.h"

#define SPEC_MAX_TOKENS 16 /* num_speculative_tokens at most */
#define SPEC_MAX_NGRAM  32 /* prompt_lookup_max at most */

typedef enum spec_method {
    SPEC_NONE,
    SPEC_NGRAM,
    SPEC_MTP,
} spec_method_t;

struct flag_values;
struct core;
struct sched_out;
struct be_batch;

/* Parses vLLM's --speculative-config JSON into the speculative flags of v: "method" ("ngram";
 * "mtp", also as "qwen3_next_mtp" or "qwen3_5_mtp"; vLLM's other methods are refused: not
 * supported; prompt_lookup_* with mtp are refused), "num_speculative_tokens"
 * (1..SPEC_MAX_TOKENS), "prompt_lookup_max" / "prompt_lookup_min" (1..SPEC_MAX_NGRAM, min <=
 * max; one given sets both, neither gives 5 and 5 as vLLM does), "disable_by_batch_size" (0..65536:
 * no drafts in a step while that many sequences run; 0, the default, never). Unknown keys are
 * refused. On failure v is unchanged and the message says why. */
int spec_parse_config(const char *json, struct flag_values *v, err_t *err);

/* A drafter: proposes at most k tokens to follow tokens[0..n) (a sequence's prompt and output)
 * into out[0..k); returns how many (0: none this step). */
typedef struct spec_drafter {
    const char *name;
    int (*propose)(const struct flag_values *f, const int32_t *tokens, int n, int k, int32_t *out);
} spec_drafter_t;

/* The drafter of a method (NULL for SPEC_NONE). */
const spec_drafter_t *spec_drafter(spec_method_t m);

/* Prompt lookup: for g from nmax down to nmin, the most recent earlier occurrence of the last g
 * tokens in tokens[0..n) (one that ends before the last token), and the k tokens after it; where
 * those run past the end, the drafts themselves count as context, so a repeating tail goes on
 * repeating ("x y x y" proposes "x y x" for k = 3, where vLLM's lookup stops at the end with
 * "x"). Returns how many were written to out: k, or 0 when nothing matches. */
int spec_ngram_propose(const int32_t *tokens, int n, int nmin, int nmax, int k, int32_t *out);

/* The engine's speculative state (core_int.h holds a pointer). NULL when out of memory. */
typedef struct spec spec_t;
spec_t *spec_create(void);
void spec_destroy(spec_t *sp);

/* Before scheduling: appends drafts to the running sequences that decode (flags permitting). */
void spec_draft(struct core *e);

/* After scheduling: drops the drafts a sequence was not planned to compute (budget, preemption,
 * no spare state slot) and snapshots the state of sequences with state. Sets the batch's count
 * of draft rows. */
void spec_plan(struct core *e, struct sched_out *out);

/* After sampling, before sched_advance: accepts each sequence's drafts against the rows sampled
 * at their positions, takes the drafts back out of the tokens (the output appends what is
 * accepted), trims the plan to the accepted positions (or rolls recurrent state back) and
 * counts the stats. Returns which of the b->n_logits rows are output ([n_logits], valid until
 * the next step), or NULL when the step had no drafts (every row is). */
const bool *spec_verify(struct core *e, struct sched_out *out, const struct be_batch *b);

/* After the step's tokens are emitted (speculative method mtp): the model's MTP head over the
 * positions each sequence computed, and the drafts for the next step (spec_mtp.h). */
void spec_mtp(struct core *e, const struct sched_out *out, const struct be_batch *b);

/* Takes every draft still appended back out (a failed step) and frees snapshot slots. */
void spec_drop(struct core *e);

#endif

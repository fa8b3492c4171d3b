/*
 * scheduler: continuous batching under a token budget, vLLM V1 style (reference/kernels.md 4.1).
 *
 * There is no prefill or decode phase: a sequence has tokens (prompt, then output) and a count
 * of leading tokens whose K/V are in its blocks; every step computes some of the rest. Running
 * sequences go first, in admission order, each taking what it still needs (a decode: 1 token;
 * a prefill: the rest of its prompt, clamped to the budget with chunked prefill). When the KV
 * pool runs short, the newest running sequence is preempted: its blocks are freed and it goes
 * back to the front of the waiting queue keeping its tokens, to be recomputed later. Only in a
 * step without preemption are waiting sequences admitted, in policy order, after a prefix-cache
 * lookup, while the budget, max-num-seqs and the pool allow.
 *
 *     sched_t *s = sched_create(kv, &cfg);
 *     sched_seq_init(&seq, prompt, n_prompt, 64);      // the caller owns the sched_seq_t
 *     seq.arrival = now; seq.order = 1;
 *     sched_add(s, &seq);
 *     sched_out_t out;
 *     sched_schedule(s, &out, &failed);                // out.seqs[i] computes out.n_new[i]
 *     ... forward the batch ...
 *     sched_advance(s, &out);                           // the step's K/V now exist
 *     sched_seq_append(&seq, token);                    // when its last token got logits
 *     sched_remove(s, &seq);                            // finished: frees its blocks
 *     sched_seq_free(&seq);
 *     sched_destroy(s);
 *
 * Models with recurrent state (the pool has state slots, kvcache.h): a sequence takes a slot
 * when admitted and gives it back with its blocks (finish, preemption: recompute rebuilds the
 * state from position 0); admission waits for a free slot as it waits for blocks. A request
 * with n > 1 choices forks them where its state and its blocks agree: choice 0's computation
 * stops at sched_fork_point (the last block boundary before its prompt's last token) until the
 * engine forks there; each child copies the parent's state into a slot of its own, shares the
 * parent's full blocks and computes the rest of the prompt itself.
 *
 * Cost per step is O(running + scheduled tokens + admitted * log waiting); no allocation in
 * steady state (per-sequence arrays and the output arrays grow geometrically and stay).
 * Not thread-safe: the engine thread owns it, with the KV pool.
 */
#ifndef TACHYON_SCHEDULER_H
#define TACHYON_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "kvcache.h"

typedef enum sched_state {
    SCHED_SEQ_IDLE,    /* not in the scheduler (new, or removed) */
    SCHED_SEQ_WAITING, /* in the waiting queue */
    SCHED_SEQ_RUNNING, /* admitted: holds blocks, computed by every step until it ends */
} sched_state_t;

/* One sequence (one choice of a request). The caller allocates it and sets the ordering keys;
 * the token, block and hash arrays belong to it (sched_seq_init / sched_seq_free). */
typedef struct sched_seq {
    int32_t *tokens; /* [cap_tokens] prompt, then output */
    int n_tokens, n_prompt, cap_tokens;
    int n_computed;  /* leading tokens whose K/V are in the blocks */
    int32_t *blocks; /* [cap_blocks] block table */
    int n_blocks, cap_blocks;
    uint64_t *hashes; /* [cap_hashes] chained hashes of the leading full blocks (this pool) */
    int n_hashes, cap_hashes;
    int n_committed; /* leading blocks registered with the prefix cache */
    /* Waiting order: fcfs by (preempted first, arrival, order); priority by (priority,
     * arrival, order). `order` breaks ties (submission number, then choice). */
    int priority;
    double arrival;
    uint64_t order;
    bool front;         /* preempted: ahead of fresh arrivals under fcfs */
    bool admitted;      /* has been admitted at least once */
    int cached_tokens;  /* tokens the prefix cache served at the first admission */
    int prefix_queried; /* tokens looked up at the first admission (full blocks) */
    int n_preemptions;
    uint32_t blocks_gen; /* bumped whenever the block table is dropped (preemption, release) */
    bool has_state;      /* holds recurrent-state slot state_slot (models with state) */
    int32_t state_slot;
    bool fork_pending; /* choice 0 of a request with state and n > 1: its computation stops at
                          sched_fork_point until the engine forks the other choices there */
    /* scheduler bookkeeping */
    sched_state_t state;
    int index; /* in the heap or the running array */
} sched_seq_t;

typedef struct sched_config {
    int max_num_seqs;           /* running sequences at most */
    int max_num_batched_tokens; /* token budget of one step */
    bool chunked_prefill;       /* clamp prefills to the budget (else a prefill runs whole) */
    int policy;                 /* sched_policy_t (flags.h) */
} sched_config_t;

/* The plan of one step. The arrays belong to the scheduler and stay valid until the next
 * sched_schedule. */
typedef struct sched_out {
    int n;              /* sequences scheduled, in batch order */
    sched_seq_t **seqs; /* [n] */
    int *n_new;         /* [n] tokens each computes: tokens[n_computed .. n_computed + n_new) */
    int n_tokens;       /* sum of n_new */
    int max_blocks;     /* the most blocks a planned sequence holds (the block table's width) */
    int n_preempted;    /* sequences preempted while planning */
    int n_admitted;     /* sequences admitted from waiting */
} sched_out_t;

typedef struct sched sched_t;

/* A scheduler over the pool (which it does not own). NULL when out of memory. */
sched_t *sched_create(kv_pool_t *kv, const sched_config_t *cfg);
void sched_destroy(sched_t *s);

/* New limits or policy (live); a policy change re-orders the waiting queue. */
void sched_set_config(sched_t *s, const sched_config_t *cfg);

/* Every sequence gives back its blocks and forgets its hashes (running ones go back to the
 * waiting queue, keeping their tokens), so that the pool can be replaced: then sched_set_pool.
 * Returns how many running sequences were preempted. */
int sched_release_all(sched_t *s);
void sched_set_pool(sched_t *s, kv_pool_t *kv);

/* Allocates the token array with room for n_prompt + extra tokens and copies the prompt.
 * Returns -1 when out of memory (nothing to free then). */
int sched_seq_init(sched_seq_t *seq, const int32_t *prompt, int n_prompt, int extra);
/* Frees the arrays (the sequence must not be in the scheduler). */
void sched_seq_free(sched_seq_t *seq);
/* Makes room for n tokens in all (growing geometrically). -1 when out of memory. */
int sched_seq_reserve(sched_seq_t *seq, int n);
/* Appends a token. -1 when out of memory. */
static inline int sched_seq_append(sched_seq_t *seq, int32_t token) {
    if (seq->n_tokens == seq->cap_tokens && sched_seq_reserve(seq, seq->n_tokens + 1) < 0)
        return -1;
    seq->tokens[seq->n_tokens++] = token;
    return 0;
}

/* Gives a running sequence blocks so that they cover `upto` tokens, for K/V written ahead of
 * its tokens (the MTP head's drafts, spec.h), taking none that would leave fewer than keep_free
 * free. Returns the tokens its blocks cover then (less than upto when the pool cannot spare
 * them), -1 when out of memory. The blocks stay with the sequence, as a draft's do. */
int sched_seq_cover(sched_t *s, sched_seq_t *seq, int upto, int keep_free);

/* Queues a sequence (state SCHED_SEQ_IDLE, tokens set; it may already hold computed blocks, as a
 * fork does) in the waiting queue. -1 when out of memory. */
int sched_add(sched_t *s, sched_seq_t *seq);

/* Starts `child` as another choice of `parent`'s prompt: its tokens are the parent's prompt, and
 * its block table references the parent's blocks that hold only prompt tokens, fully
 * (positions [0, sched_fork_point)), so it computes the rest of the prompt itself, at least the
 * last token. The parent must have computed its prompt, or have been preempted since (then the
 * child shares the full blocks it still holds, none after a preemption, and computes the rest);
 * with recurrent state, exactly up to
 * the fork point: the child then also takes a state slot (has_state), into which the caller
 * copies the parent's state before the next step (when no slot is free, it shares nothing and
 * recomputes from the start). The child (initialised with sched_seq_init, ordering keys set)
 * is queued. -1 when out of memory or the parent is not at the fork point. */
int sched_fork(sched_t *s, const sched_seq_t *parent, sched_seq_t *child);

/* Where the choices of seq's prompt part: (n_prompt - 1) / block_size * block_size. */
static inline int sched_fork_point(const sched_seq_t *seq, int block_size) {
    return (seq->n_prompt - 1) / block_size * block_size;
}

/* Takes a sequence out of the scheduler (finished or cancelled) and frees its blocks. A no-op
 * for an idle sequence. */
void sched_remove(sched_t *s, sched_seq_t *seq);

/* Plans the next step and allocates the blocks it writes (see the top of this file). Returns 0,
 * or -1 when out of memory: *failed is a sequence to give up (one whose block array cannot
 * grow), which the caller removes before planning again (the plan so far is void; blocks stay
 * with their sequences). The plan stays valid through sched_advance, sched_add and sched_fork
 * until the next sched_schedule. */
int sched_schedule(sched_t *s, sched_out_t *out, sched_seq_t **failed);

/* Records that the planned tokens were computed, and registers the blocks that became full with
 * the prefix cache (when it is on); sequences no longer running (removed or preempted since the
 * plan: asynchronous scheduling advances a plan after emitting the previous step) are skipped. -1
 * when out of memory (a hash array could not grow: those blocks are simply not cached). */
int sched_advance(sched_t *s, const sched_out_t *out);

int sched_num_running(const sched_t *s);
/* The running sequences in admission order, *n of them; an entry may be NULL (a sequence removed
 * since the last sched_schedule). Valid until the scheduler is next changed. */
sched_seq_t *const *sched_running(const sched_t *s, int *n);
int sched_num_waiting(const sched_t *s);
/* Sequences in the scheduler (running + waiting). */
static inline bool sched_has_work(const sched_t *s) {
    return sched_num_running(s) + sched_num_waiting(s) > 0;
}

/* Preemptions since creation. */
uint64_t sched_preemptions(const sched_t *s);

#endif

/*
 * batch: the step's input batch (vLLM v1's InputBatch and _prepare_inputs). It lays the
 * scheduler's plan out as the backend's varlen batch (engine/backend.h: token ids, positions,
 * KV slot mapping, query starts, context lengths, block tables, the rows that need logits) and
 * the sampler rows of the rows that get logits.
 *
 * Both persist from step to step, so that a step costs O(scheduled sequences + new tokens + new
 * blocks): a sequence keeps its row of the block table while it stays in the batch and its
 * blocks are not dropped, and only appends the blocks it gained; a choice keeps its sampler row
 * while it owns it and only updates its output count.
 *
 *     step_batch_t sb;
 *     batch_init(&sb, block_size, eos_ids, n_eos, on_first, ctx);
 *     batch_seq_init(&seq, &params, seed, choice);   // the engine's choices start with one
 *     ... sched_schedule(sched, &plan, &failed) ...
 *     be_batch_t b;
 *     batch_counts_t counts;
 *     if (batch_build(&sb, &plan, now, &b, &counts) < 0) ...   // out of memory
 *     backend_forward(be, &b, logits, &err);
 *     // sb.rows[l] samples logits row l, which belongs to plan.seqs[sb.logit_seq[l]]
 *     batch_forget(&sb, &seq);                       // the choice ended
 *     batch_free(&sb);
 *
 * Engine thread only.
 */
#ifndef TACHYON_BATCH_H
#define TACHYON_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "sampler.h"
#include "scheduler.h"

/* What the batch keeps per sequence. The engine's choice starts with one, and it starts with the
 * scheduler's sequence, so that the plan's sched_seq_t pointers convert to it. */
typedef struct batch_seq {
    sched_seq_t s; /* first */
    /* Its row in the block table (-1: none) and how much of the row is written, for the table
     * generation and the block generation it was written under. */
    int row, row_blocks;
    uint32_t row_gen, row_bgen;
    int srow;       /* the sampler row last written for it (-1: none), valid while it owns it */
    double t_sched; /* when first scheduled; 0 = not yet */
    /* what its sampler row says */
    const sampling_params_t *sp;
    uint64_t seed;
    int choice;
    /* Speculative drafts (spec.h) at the end of s.tokens this step: the batch asks for logits at
     * the last n_draft + 1 positions, one sampler row each */
    int n_draft;
} batch_seq_t;

static inline batch_seq_t *batch_seq_of(sched_seq_t *s) {
    return (batch_seq_t *)s;
}

/* A step's counts for the stats. */
typedef struct batch_counts {
    int prefill, decode;     /* tokens of prompts (and recomputation), and decodes */
    int draft;               /* speculative drafts */
    uint64_t prefix_queried; /* prompt tokens looked up in the prefix cache this step */
    uint64_t prefix_hit;     /* of which found */
} batch_counts_t;

typedef struct step_batch {
    int block_size;
    const int32_t *eos; /* the sampler rows' EOS ids (the engine's, valid while it lives) */
    int n_eos;
    /* Called for a sequence's first scheduling (its t_sched is set): rare, so a call. */
    void (*on_first)(void *ctx, batch_seq_t *q);
    void *ctx;
    int n_drafts; /* the plan's drafts (sum of n_draft): logit rows beyond one per sequence */
    /* the varlen batch, grown geometrically and kept */
    int32_t *tokens, *pos;
    int64_t *slots;
    int cap_tok;
    int32_t *qstart, *ctx_len, *logit_rows;
    int32_t *state_slots; /* [cap_seq] each row's recurrent-state slot (-1: none) */
    int32_t *logit_seq;   /* [n_logits] the plan index each logits row belongs to */
    int cap_seq;
    /* The block table persists: row r holds row_seq[r]'s blocks. A new stride rewrites every
     * row (table_gen). */
    int32_t *tables; /* [cap_seq, stride] */
    size_t cap_tables;
    int stride;
    uint32_t table_gen;
    batch_seq_t **row_seq; /* [cap_seq] */
    int32_t *row_out;      /* [cap_seq] the plan index in each row this step */
    /* sampler rows, and the results the sampler writes for them */
    sampler_row_t *rows;
    batch_seq_t **rows_owner; /* [cap_rows] */
    sampler_result_t *results;
    int cap_rows;
} step_batch_t;

void batch_init(step_batch_t *sb, int block_size, const int32_t *eos, int n_eos,
                void (*on_first)(void *ctx, batch_seq_t *q), void *ctx);
void batch_free(step_batch_t *sb);

/* A sequence not yet in the batch, sampled with sp (kept by the caller) and seed. */
void batch_seq_init(batch_seq_t *q, const sampling_params_t *sp, uint64_t seed, int choice);

/* Lays the plan out in *b (valid until the next build), fills a sampler row for each row that
 * gets logits, and notes first schedulings at t0. A sequence with drafts gets n_draft + 1
 * consecutive logit rows, the j-th sampled with the output count of its position (n_output +
 * j: its rng index, and the drafts before it in the penalties' view); sb->n_drafts must be
 * their sum. -1 when out of memory. */
int batch_build(step_batch_t *sb, const sched_out_t *plan, double t0, be_batch_t *b,
                batch_counts_t *counts);

/* A sequence leaves the batch for good (its choice ended): it gives up its rows. */
void batch_forget(step_batch_t *sb, batch_seq_t *q);

#endif

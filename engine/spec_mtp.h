/*
 * spec_mtp: the MTP drafter of spec.h (speculative method mtp), spec.c's: after each step the
 * model's multi-token-prediction head (backend_ops_t.mtp_forward, models.md 4.8) reads the hidden
 * states of the positions each sequence computed and accepted, and each sequence that decodes
 * next gets k drafts made there; the next step's spec_draft takes them (mtp_take).
 *
 * The head's K/V. It attends over its own K/V at the model's slots, one entry per position t
 * (written from x_{t+1} and the model's h_t). Step 0 writes those of every position the model
 * computed this step, from the first the head has not read (mtp_done: a rolled-back verify,
 * spec.h, recomputes positions whose hidden states the head already read) up to the last
 * accepted one, and makes the first draft from the last; draft j (1..k-1) runs one more
 * position with the previous draft beside the head's own output (vLLM's proposer), writing K/V
 * ahead of the sequence's tokens: its blocks are taken first (sched_seq_cover, leaving one free
 * block per running sequence, as the n-gram drafts do; fewer drafts when the pool cannot), and
 * the next step's step 0 writes those positions again from the model's hidden states. Drafts
 * 1..k-1 come from one backend call where the backend chains the passes itself
 * (backend_ops_t.mtp_chain: the cuda backend on the device, from one graph), else one
 * mtp_forward a draft (a tensor-parallel instance). A
 * preempted sequence starts over (its blocks are gone: mtp_gen). Positions the head never read
 * (drafts off in a step, by num-speculative-tokens 0 or disable_by_batch_size, or skipped while
 * no state slot is spare for a draft's snapshot: max-num-seqs sequences running) keep stale K/V:
 * later drafts from them are accepted less often, the output is the same (the verify decides).
 *
 * Engine thread only.
 */
#ifndef TACHYON_SPEC_MTP_H
#define TACHYON_SPEC_MTP_H

#include <stdint.h>

#include "core_int.h"

/* A sequence the head runs for in a step (mtp_run's). */
typedef struct mtp_entry {
    eng_choice_t *q;
    int to;   /* positions [.., to) read this step; the draft positions follow */
    int want; /* drafts to make (0: none, the sequence does not decode next) */
    int row;  /* its last token's row in the head's previous batch */
} mtp_entry_t;

/* The head's batches and their buffers, grown and kept. */
typedef struct mtp_pass {
    mtp_entry_t *ent;
    int32_t *tokens, *pos, *rows, *qstart, *ctx, *tables, *logit_rows, *owner, *drafts, *last;
    int64_t *slots;
    int cap_ent, cap_tokens, cap_pos, cap_rows, cap_qstart, cap_ctx, cap_tables, cap_logit_rows,
        cap_owner, cap_slots, cap_drafts, cap_last;
} mtp_pass_t;

void mtp_pass_free(mtp_pass_t *mp);

/* spec.c: the drafts q may take, at most k: none past what its next step could output
 * (max_tokens, max-model-len). */
int spec_room(const core_t *e, const eng_choice_t *q, int k);

/* The head's drafts for q's current context, at most room, into out; how many (0: none made for
 * it, or made before its context changed). */
int mtp_take(const eng_choice_t *q, int room, int32_t *out);

/* After a step's tokens are emitted: the head over the step's sequences (b: the step's batch,
 * the backend's last forward; out: its plan; valid[i]: plan entry i's positions with the model's
 * hidden state, NULL: out->n_new), k drafts each. -1 with a message when the backend fails (no
 * drafts then; nothing else is lost). */
int mtp_run(core_t *e, mtp_pass_t *mp, const sched_out_t *out, const be_batch_t *b,
            const int *valid, err_t *err);

#endif

/*
 * spec_mtp: the MTP drafter (spec_mtp.h): the head's step-0 batch over the positions each
 * sequence computed, then one batch per further draft.
 */
#include "spec_mtp.h"

#include <string.h>

#include "grow.h"

void mtp_pass_free(mtp_pass_t *mp) {
    free(mp->ent);
    free(mp->tokens);
    free(mp->pos);
    free(mp->rows);
    free(mp->qstart);
    free(mp->ctx);
    free(mp->tables);
    free(mp->logit_rows);
    free(mp->owner);
    free(mp->slots);
    free(mp->drafts);
    free(mp->last);
    memset(mp, 0, sizeof *mp);
}

int mtp_take(const eng_choice_t *q, int room, int32_t *out) {
    const sched_seq_t *s = &q->b.s;
    if (q->n_mtp_draft == 0 || q->mtp_base != s->n_tokens || q->mtp_gen != s->blocks_gen) return 0;
    int n = q->n_mtp_draft < room ? q->n_mtp_draft : room;
    memcpy(out, q->mtp_draft, (size_t)(n > 0 ? n : 0) * sizeof *out);
    return n > 0 ? n : 0;
}

/* Room for n_tokens tokens of n_seqs sequences, k drafts each (the tables: fill_tables). */
static int reserve(mtp_pass_t *mp, int n_tokens, int n_seqs, int k) {
    return GROW(mp->ent, mp->cap_ent, n_seqs) < 0 ||
                   GROW(mp->tokens, mp->cap_tokens, n_tokens) < 0 ||
                   GROW(mp->pos, mp->cap_pos, n_tokens) < 0 ||
                   GROW(mp->rows, mp->cap_rows, n_tokens) < 0 ||
                   GROW(mp->slots, mp->cap_slots, n_tokens) < 0 ||
                   GROW(mp->logit_rows, mp->cap_logit_rows, n_tokens) < 0 ||
                   GROW(mp->owner, mp->cap_owner, n_tokens) < 0 ||
                   GROW(mp->qstart, mp->cap_qstart, n_seqs + 1) < 0 ||
                   GROW(mp->ctx, mp->cap_ctx, n_seqs) < 0 ||
                   GROW(mp->drafts, mp->cap_drafts, n_seqs * (k > 1 ? k : 1)) < 0 ||
                   GROW(mp->last, mp->cap_last, n_seqs) < 0
               ? -1
               : 0;
}

static int64_t slot_of(const sched_seq_t *s, int bs, int pos) {
    return (int64_t)s->blocks[pos / bs] * bs + pos % bs;
}

/* Drafts sequence q may use after this step (0: it does not decode next), its blocks taken for
 * the draft positions the head writes. */
static int drafts_wanted(core_t *e, eng_choice_t *q, int to) {
    sched_seq_t *s = &q->b.s;
    if (to != s->n_tokens - 1 || s->n_tokens <= s->n_prompt) return 0;
    int want = spec_room(e, q, e->f.num_speculative_tokens);
    if (want <= 1) return want;
    /* draft j writes position to - 1 + j: blocks up to to + want - 2 */
    int covered = sched_seq_cover(e->sched, s, to + want - 1, sched_num_running(e->sched));
    if (covered < 0) covered = s->n_blocks * kv_block_size(e->kv);
    return covered - to + 1 < want ? covered - to + 1 : want;
}

/* The batch over mp's token arrays: n_seq sequences, their tables at `stride`. */
static be_batch_t batch_of(const mtp_pass_t *mp, int n_tok, int n_seq, int stride, int n_logits) {
    return (be_batch_t){.n_tokens = n_tok,
                        .n_seqs = n_seq,
                        .token_ids = mp->tokens,
                        .positions = mp->pos,
                        .slot_mapping = mp->slots,
                        .query_start = mp->qstart,
                        .context_len = mp->ctx,
                        .block_tables = mp->tables,
                        .block_table_stride = stride,
                        .n_logits = n_logits,
                        .logit_rows = mp->logit_rows};
}

/* Fills the block tables of the entries owner[0..n_seq) (indices into mp->ent); the widest. */
static int fill_tables(mtp_pass_t *mp, int n_seq) {
    int stride = 1;
    for (int i = 0; i < n_seq; i++) {
        const sched_seq_t *s = &mp->ent[mp->owner[i]].q->b.s;
        if (s->n_blocks > stride) stride = s->n_blocks;
    }
    if (GROW(mp->tables, mp->cap_tables, n_seq * stride) < 0) return -1;
    for (int i = 0; i < n_seq; i++) {
        const sched_seq_t *s = &mp->ent[mp->owner[i]].q->b.s;
        memcpy(mp->tables + (size_t)i * (size_t)stride, s->blocks,
               (size_t)s->n_blocks * sizeof *s->blocks);
    }
    return stride;
}

static int mtp_chain_run(core_t *e, mtp_pass_t *mp, int n_ent, err_t *err);

int mtp_run(core_t *e, mtp_pass_t *mp, const sched_out_t *out, const be_batch_t *b,
            const int *valid, err_t *err) {
    int bs = kv_block_size(e->kv);
    if (reserve(mp, b->n_tokens, b->n_seqs, e->f.num_speculative_tokens) < 0)
        return err_set(err, "out of memory");
    /* step 0: x_{t+1} beside h_t for the positions read this step */
    int n_ent = 0, n_tok = 0, n_logits = 0;
    for (int r = 0; r < b->n_seqs; r++) {
        int i = e->batch.row_out[r];
        eng_choice_t *q = choice_of(out->seqs[i]);
        sched_seq_t *s = &q->b.s;
        q->n_mtp_draft = 0;
        if (q->mtp_gen != s->blocks_gen) { /* preempted: its K/V went with its blocks */
            q->mtp_done = 0;
            q->mtp_gen = s->blocks_gen;
        }
        if (q->finished || q->req->scripted) continue;
        int p0 = b->positions[b->query_start[r]];
        int to = p0 + (valid ? valid[i] : out->n_new[i]);
        if (to > s->n_tokens - 1) to = s->n_tokens - 1; /* x_{t+1} must be known */
        int from = q->mtp_done > p0 ? q->mtp_done : p0;
        if (from >= to) continue;
        mtp_entry_t *en = &mp->ent[n_ent];
        *en = (mtp_entry_t){.q = q, .to = to, .want = drafts_wanted(e, q, to)};
        mp->owner[n_ent] = n_ent;
        mp->qstart[n_ent] = n_tok;
        mp->ctx[n_ent] = to;
        for (int t = from; t < to; t++, n_tok++) {
            mp->tokens[n_tok] = s->tokens[t + 1];
            mp->pos[n_tok] = t;
            mp->slots[n_tok] = slot_of(s, bs, t);
            mp->rows[n_tok] = b->query_start[r] + (t - p0);
        }
        if (en->want > 0) {
            en->row = n_logits;
            mp->logit_rows[n_logits++] = n_tok - 1;
        }
        q->mtp_done = to;
        n_ent++;
    }
    if (n_ent == 0) return 0;
    mp->qstart[n_ent] = n_tok;
    int stride = fill_tables(mp, n_ent);
    if (stride < 0) return err_set(err, "out of memory");
    be_batch_t mb = batch_of(mp, n_tok, n_ent, stride, n_logits);
    /* the drafts come back as ids (argmax where the logits are), not as rows of logits */
    if (e->be->ops->mtp_forward(e->be, &mb, mp->rows, 0, NULL, mp->drafts, err) < 0) return -1;
    for (int i = 0; i < n_ent; i++) {
        mtp_entry_t *en = &mp->ent[i];
        if (en->want == 0) continue;
        en->q->mtp_draft[0] = mp->drafts[en->row];
        en->q->n_mtp_draft = 1;
        en->q->mtp_base = en->q->b.s.n_tokens;
        en->row = mp->logit_rows[en->row]; /* its output row, the next step's hidden */
    }

    return mtp_chain_run(e, mp, n_ent, err);
}

/* Draft j's batch: one token a sequence still drafting (want > j), the previous draft at the
 * position after the previous one, beside the head's output there (the entry's row); owner[]
 * maps its sequences to entries. Returns their number. */
static int draft_batch(core_t *e, mtp_pass_t *mp, int n_ent, int j) {
    int bs = kv_block_size(e->kv), n = 0;
    for (int i = 0; i < n_ent; i++) {
        mtp_entry_t *en = &mp->ent[i];
        if (en->want <= j) continue;
        const sched_seq_t *s = &en->q->b.s;
        int p = en->to - 1 + j;
        mp->owner[n] = i;
        mp->qstart[n] = n;
        mp->ctx[n] = p + 1;
        mp->tokens[n] = en->q->mtp_draft[j - 1];
        mp->pos[n] = p;
        mp->slots[n] = slot_of(s, bs, p);
        mp->rows[n] = en->row;
        mp->logit_rows[n] = n;
        mp->last[n] = en->to + en->want - 2; /* draft want - 1's position */
        n++;
    }
    mp->qstart[n] = n;
    return n;
}

/* Drafts 1..want-1 of the n_ent entries, from draft 0: in one backend call where it chains the
 * passes itself (backend_ops_t.mtp_chain: no round trip between them), else a call a draft. */
static int mtp_chain_run(core_t *e, mtp_pass_t *mp, int n_ent, err_t *err) {
    if (e->be->ops->mtp_chain) {
        int n = draft_batch(e, mp, n_ent, 1), steps = 0;
        if (n == 0) return 0;
        for (int l = 0; l < n; l++)
            if (mp->ent[mp->owner[l]].want - 1 > steps) steps = mp->ent[mp->owner[l]].want - 1;
        int stride = fill_tables(mp, n);
        if (stride < 0) return err_set(err, "out of memory");
        be_batch_t mb = batch_of(mp, n, n, stride, n);
        if (e->be->ops->mtp_chain(e->be, &mb, mp->rows, 1, steps, mp->last, mp->drafts, err) < 0)
            return -1;
        for (int l = 0; l < n; l++) {
            mtp_entry_t *en = &mp->ent[mp->owner[l]];
            for (int j = 1; j < en->want; j++)
                en->q->mtp_draft[j] = mp->drafts[(size_t)(j - 1) * (size_t)n + (size_t)l];
            en->q->n_mtp_draft = en->want;
        }
        return 0;
    }
    for (int j = 1; j < e->f.num_speculative_tokens; j++) {
        int n = draft_batch(e, mp, n_ent, j);
        if (n == 0) break;
        int stride = fill_tables(mp, n);
        if (stride < 0) return err_set(err, "out of memory");
        be_batch_t mb = batch_of(mp, n, n, stride, n);
        if (e->be->ops->mtp_forward(e->be, &mb, mp->rows, j, NULL, mp->drafts, err) < 0) return -1;
        for (int l = 0; l < n; l++) {
            mtp_entry_t *en = &mp->ent[mp->owner[l]];
            en->q->mtp_draft[j] = mp->drafts[l];
            en->q->n_mtp_draft = j + 1;
            en->row = l;
        }
    }
    return 0;
}

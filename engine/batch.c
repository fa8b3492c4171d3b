/*
 * batch: the step's varlen batch and sampler rows (batch.h). One pass over the plan; every
 * array persists and grows geometrically.
 */
#include "batch.h"

#include <string.h>

#include "grow.h"

void batch_init(step_batch_t *sb, int block_size, const int32_t *eos, int n_eos,
                void (*on_first)(void *ctx, batch_seq_t *q), void *ctx) {
    memset(sb, 0, sizeof *sb);
    sb->block_size = block_size;
    sb->eos = eos;
    sb->n_eos = n_eos;
    sb->on_first = on_first;
    sb->ctx = ctx;
}

void batch_free(step_batch_t *sb) {
    free(sb->tokens);
    free(sb->pos);
    free(sb->slots);
    free(sb->qstart);
    free(sb->ctx_len);
    free(sb->logit_rows);
    free(sb->logit_seq);
    free(sb->state_slots);
    free(sb->row_seq);
    free(sb->row_out);
    free(sb->tables);
    free(sb->rows);
    free(sb->rows_owner);
    free(sb->results);
    memset(sb, 0, sizeof *sb);
}

void batch_seq_init(batch_seq_t *q, const sampling_params_t *sp, uint64_t seed, int choice) {
    q->row = q->srow = -1;
    q->row_blocks = 0;
    q->row_gen = q->row_bgen = 0;
    q->t_sched = 0;
    q->sp = sp;
    q->seed = seed;
    q->choice = choice;
    q->n_draft = 0;
}

void batch_forget(step_batch_t *sb, batch_seq_t *q) {
    if (q->row >= 0 && q->row < sb->cap_seq && sb->row_seq[q->row] == q) sb->row_seq[q->row] = NULL;
    if (q->srow >= 0 && q->srow < sb->cap_rows && sb->rows_owner[q->srow] == q)
        sb->rows_owner[q->srow] = NULL;
}

/* Grows one array of a group that shares the capacity `cap` to hold `need`; *out is the new
 * capacity (the same for every array of the group, since they all start from cap). */
static int grow_to(void *arr, int cap, int need, size_t size, int *out) {
    *out = cap;
    return grow_array_int(arr, out, need, size);
}

static int reserve(step_batch_t *sb, int n_tokens, int n_seqs, int n_rows, size_t n_table) {
    int cap;
    if (n_tokens > sb->cap_tok) {
        int old = sb->cap_tok;
        if (grow_to(&sb->tokens, old, n_tokens, sizeof *sb->tokens, &cap) < 0 ||
            grow_to(&sb->pos, old, n_tokens, sizeof *sb->pos, &cap) < 0 ||
            grow_to(&sb->slots, old, n_tokens, sizeof *sb->slots, &cap) < 0)
            return -1;
        sb->cap_tok = cap;
    }
    if (n_seqs + 1 > sb->cap_seq) {
        int old = sb->cap_seq, need = n_seqs + 1;
        if (grow_to(&sb->qstart, old, need, sizeof *sb->qstart, &cap) < 0 ||
            grow_to(&sb->ctx_len, old, need, sizeof *sb->ctx_len, &cap) < 0 ||
            grow_to(&sb->state_slots, old, need, sizeof *sb->state_slots, &cap) < 0 ||
            grow_to(&sb->row_out, old, need, sizeof *sb->row_out, &cap) < 0 ||
            grow_to(&sb->row_seq, old, need, sizeof *sb->row_seq, &cap) < 0)
            return -1;
        for (int r = old; r < cap; r++)
            sb->row_seq[r] = NULL;
        sb->cap_seq = cap;
    }
    if (n_rows > sb->cap_rows) {
        int old = sb->cap_rows;
        if (grow_to(&sb->rows, old, n_rows, sizeof *sb->rows, &cap) < 0 ||
            grow_to(&sb->rows_owner, old, n_rows, sizeof *sb->rows_owner, &cap) < 0 ||
            grow_to(&sb->results, old, n_rows, sizeof *sb->results, &cap) < 0 ||
            grow_to(&sb->logit_rows, old, n_rows, sizeof *sb->logit_rows, &cap) < 0 ||
            grow_to(&sb->logit_seq, old, n_rows, sizeof *sb->logit_seq, &cap) < 0)
            return -1;
        for (int r = old; r < cap; r++)
            sb->rows_owner[r] = NULL;
        sb->cap_rows = cap;
    }
    /* rows keep their offsets when the table grows with an unchanged stride */
    return grow_array((void **)&sb->tables, &sb->cap_tables, n_table, sizeof *sb->tables);
}

/* Gives each planned sequence a row of the batch: the one it had last step when it is still
 * in range and its table there is still valid, else a free one (written from scratch). In a
 * steady batch every sequence keeps its row. Fills row_out. */
static void assign_rows(step_batch_t *sb, const sched_out_t *plan) {
    int n = plan->n;
    sched_seq_t *const *seqs = plan->seqs;
    int32_t *restrict row_out = sb->row_out;
    batch_seq_t **restrict row_seq = sb->row_seq;
    uint32_t table_gen = sb->table_gen;
    memset(row_out, 0xff, (size_t)n * sizeof *row_out); /* -1: free */
    int unplaced = 0;
    for (int i = 0; i < n; i++) {
        batch_seq_t *q = batch_seq_of(seqs[i]);
        int r = q->row;
        if (r >= 0 && r < n && row_seq[r] == q && q->row_gen == table_gen &&
            q->row_bgen == q->s.blocks_gen) {
            row_out[r] = i;
        } else {
            q->row = -1;
            unplaced++;
        }
    }
    for (int i = 0, free_row = 0; unplaced > 0; i++) {
        batch_seq_t *q = batch_seq_of(seqs[i]);
        if (q->row >= 0) continue;
        while (row_out[free_row] >= 0)
            free_row++;
        row_out[free_row] = i;
        row_seq[free_row] = q;
        q->row = free_row;
        q->row_blocks = 0;
        q->row_gen = table_gen;
        q->row_bgen = q->s.blocks_gen;
        unplaced--;
    }
}

/* The KV slot of position pos in a block table of nb blocks. Positions in the last block need
 * no division (a decode's always is). */
static inline int64_t slot_of(const int32_t *blocks, int nb, int bs, int pos) {
    int last = (nb - 1) * bs;
    return pos >= last ? (int64_t)blocks[nb - 1] * bs + (pos - last)
                       : (int64_t)blocks[pos / bs] * bs + pos % bs;
}

/* A sequence's first scheduling: its queue time ends, and choice 0 counts its prefix-cache
 * lookup. */
static void first_scheduled(step_batch_t *sb, batch_seq_t *q, double now, batch_counts_t *c) {
    q->t_sched = now;
    if (q->choice == 0) {
        c->prefix_queried += (uint64_t)q->s.prefix_queried;
        c->prefix_hit += (uint64_t)q->s.cached_tokens;
    }
    if (sb->on_first) sb->on_first(sb->ctx, q);
}

int batch_build(step_batch_t *sb, const sched_out_t *plan, double t0, be_batch_t *b,
                batch_counts_t *counts) {
    int bs = sb->block_size, n = plan->n;
    *counts = (batch_counts_t){0};
    if (plan->max_blocks > sb->stride) {
        int need = plan->max_blocks;
        sb->stride = need < 8 ? 16 : 2 * need; /* rarely: the longest sequence doubled */
        sb->table_gen++;
    }
    int rows = n + 1 > sb->cap_seq ? n + 1 : sb->cap_seq;
    if (reserve(sb, plan->n_tokens, n, n + sb->n_drafts, (size_t)rows * (size_t)sb->stride) < 0)
        return -1;
    assign_rows(sb, plan);
    /* Locals, restrict: the stores below alias nothing else, so nothing is reloaded per row. */
    sched_seq_t *const *seqs = plan->seqs;
    const int *n_new_of = plan->n_new;
    const int32_t *row_out = sb->row_out;
    int32_t *restrict tokens = sb->tokens, *restrict positions = sb->pos;
    int64_t *restrict slots = sb->slots;
    int32_t *restrict qstart = sb->qstart, *restrict ctx = sb->ctx_len;
    int32_t *restrict state_slots = sb->state_slots;
    bool any_state = false;
    int32_t *restrict logit_rows = sb->logit_rows, *restrict logit_seq = sb->logit_seq;
    int32_t *restrict tables = sb->tables;
    size_t stride = (size_t)sb->stride;
    sampler_row_t *restrict srows = sb->rows;
    batch_seq_t **restrict srows_owner = sb->rows_owner;
    const int32_t *eos = sb->eos;
    int n_eos = sb->n_eos;
    int t = 0, n_logits = 0, decode = 0, prefill = 0;
    for (int r = 0; r < n; r++) {
        int i = row_out[r];
        batch_seq_t *q = batch_seq_of(seqs[i]);
        const sched_seq_t *s = &q->s;
        if (q->t_sched == 0) first_scheduled(sb, q, t0, counts);
        int c0 = s->n_computed, n_new = n_new_of[i], nb = s->n_blocks;
        const int32_t *blocks = s->blocks, *seq_tokens = s->tokens;
        qstart[r] = t;
        state_slots[r] = s->has_state ? s->state_slot : -1;
        any_state |= s->has_state;
        if (n_new == 1) { /* a decode (or a prompt's last token): no loop to set up */
            tokens[t] = seq_tokens[c0];
            positions[t] = c0;
            slots[t++] = slot_of(blocks, nb, bs, c0);
            bool is_decode = c0 == s->n_tokens - 1 && c0 >= s->n_prompt;
            decode += is_decode;
            prefill += !is_decode;
        } else {
            int d = q->n_draft; /* drafts: neither prompt nor decode */
            prefill += n_new - (d > 0 ? d + 1 : 0);
            decode += d > 0;
            counts->draft += d;
            for (int pos = c0; pos < c0 + n_new; pos++, t++) {
                tokens[t] = seq_tokens[pos];
                positions[t] = pos;
                slots[t] = slot_of(blocks, nb, bs, pos);
            }
        }
        ctx[r] = c0 + n_new;
        int32_t *row = tables + (size_t)r * stride;
        for (int k = q->row_blocks; k < nb; k++) /* usually none, or one */
            row[k] = blocks[k];
        q->row_blocks = nb;
        if (c0 + n_new == s->n_tokens) {
            int l = n_logits++, d = q->n_draft;
            int n_out = s->n_tokens - d - s->n_prompt;
            logit_rows[l] = t - 1 - d;
            logit_seq[l] = i;
            /* q->srow first: a new choice may sit where a finished one was freed */
            if (q->srow == l && srows_owner[l] == q && srows[l].prompt == seq_tokens) {
                srows[l].n_output = n_out;
            } else {
                if (q->srow >= 0 && srows_owner[q->srow] == q)
                    srows_owner[q->srow] = NULL; /* one row per choice, cleared when it ends */
                srows[l] = (sampler_row_t){.params = q->sp,
                                           .prompt = seq_tokens,
                                           .n_prompt = s->n_prompt,
                                           .output = seq_tokens + s->n_prompt,
                                           .n_output = n_out,
                                           .eos_ids = eos,
                                           .n_eos = n_eos,
                                           .seed = q->seed,
                                           .choice = q->choice};
                srows_owner[l] = q;
                q->srow = l;
            }
            /* the drafts' rows: fresh each step, owned by none */
            for (int j = 1; j <= d; j++) {
                int lj = n_logits++;
                logit_rows[lj] = t - 1 - d + j;
                logit_seq[lj] = i;
                srows[lj] = srows[l];
                srows[lj].n_output = n_out + j;
                srows_owner[lj] = NULL;
            }
        }
    }
    qstart[n] = t;
    counts->decode = decode;
    counts->prefill = prefill;
    *b = (be_batch_t){.n_tokens = t,
                      .n_seqs = n,
                      .token_ids = tokens,
                      .positions = positions,
                      .slot_mapping = slots,
                      .query_start = qstart,
                      .context_len = ctx,
                      .block_tables = tables,
                      .block_table_stride = (int)stride,
                      .n_logits = n_logits,
                      .logit_rows = logit_rows,
                      .state_slots = any_state ? state_slots : NULL};
    return 0;
}

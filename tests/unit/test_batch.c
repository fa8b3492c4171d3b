/*
 * batch: the step's input batch alone, with no engine, scheduler run or model. Plans are made
 * by hand from sequences with hand-made block tables; every array of the varlen batch is
 * checked against what the plan says, and across steps the rows persist as they must (a
 * sequence keeps its block-table row and appends, keeps its sampler row and only updates the
 * output count; a finished one gives its rows up; a wider table rewrites every row).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "batch.h"

enum { BS = 4, MAXSEQ = 8 };

typedef struct fixture {
    step_batch_t sb;
    batch_seq_t seqs[MAXSEQ];
    sampling_params_t sp;
    int firsts;
    sched_seq_t *plan_seqs[MAXSEQ];
    int plan_new[MAXSEQ];
} fixture_t;

static const int32_t EOS[] = {2, 3};

static void on_first(void *ctx, batch_seq_t *q) {
    fixture_t *f = ctx;
    f->firsts++;
    assert_true(q->t_sched > 0);
}

/* Sequence i: n_tokens tokens (100*i + k), n_computed of them computed, blocks 10*i + b. */
static void make_seq(fixture_t *f, int i, int n_prompt, int n_tokens, int n_computed) {
    batch_seq_t *q = &f->seqs[i];
    int32_t toks[64];
    for (int k = 0; k < n_tokens; k++)
        toks[k] = 100 * i + k;
    assert_int_equal(sched_seq_init(&q->s, toks, n_tokens, 8), 0);
    q->s.n_prompt = n_prompt;
    q->s.n_computed = n_computed;
    batch_seq_init(q, &f->sp, 1000 + (uint64_t)i, i % 2);
    q->s.cap_blocks = 40;
    q->s.blocks = malloc(40 * sizeof(int32_t));
    q->s.n_blocks = (n_tokens + BS - 1) / BS;
    for (int b = 0; b < 40; b++)
        q->s.blocks[b] = 10 * i + b;
}

static void setup(fixture_t *f) {
    memset(f, 0, sizeof *f);
    sampling_params_init(&f->sp);
    batch_init(&f->sb, BS, EOS, 2, on_first, f);
}

static void teardown(fixture_t *f) {
    for (int i = 0; i < MAXSEQ; i++)
        if (f->seqs[i].s.tokens) sched_seq_free(&f->seqs[i].s);
    batch_free(&f->sb);
}

static sched_out_t plan_of(fixture_t *f, const int *which, const int *n_new, int n) {
    sched_out_t p = {.n = n, .seqs = f->plan_seqs, .n_new = f->plan_new};
    for (int k = 0; k < n; k++) {
        f->plan_seqs[k] = &f->seqs[which[k]].s;
        f->plan_new[k] = n_new[k];
        p.n_tokens += n_new[k];
        if (f->seqs[which[k]].s.n_blocks > p.max_blocks)
            p.max_blocks = f->seqs[which[k]].s.n_blocks;
    }
    return p;
}

/* Every array of b against the plan: tokens, positions, slots from the block tables, query
 * starts, context lengths, tables, logits rows and their sampler rows. */
static void check_batch(fixture_t *f, const sched_out_t *p, const be_batch_t *b) {
    assert_int_equal(b->n_seqs, p->n);
    assert_int_equal(b->n_tokens, p->n_tokens);
    assert_int_equal(b->query_start[0], 0);
    int n_logits = 0;
    for (int r = 0; r < p->n; r++) {
        int i = f->sb.row_out[r];
        const batch_seq_t *q = batch_seq_of(p->seqs[i]);
        const sched_seq_t *s = &q->s;
        assert_int_equal(q->row, r);
        int t0 = b->query_start[r], n_new = b->query_start[r + 1] - t0;
        assert_int_equal(n_new, p->n_new[i]);
        assert_int_equal(b->context_len[r], s->n_computed + n_new);
        for (int k = 0; k < n_new; k++) {
            int pos = s->n_computed + k;
            assert_int_equal(b->token_ids[t0 + k], s->tokens[pos]);
            assert_int_equal(b->positions[t0 + k], pos);
            assert_int_equal(b->slot_mapping[t0 + k], (int64_t)s->blocks[pos / BS] * BS + pos % BS);
        }
        const int32_t *row = b->block_tables + (size_t)r * (size_t)b->block_table_stride;
        for (int k = 0; k < s->n_blocks; k++)
            assert_int_equal(row[k], s->blocks[k]);
        /* the last sampled token's row, then one per draft, each counting the drafts before
         * it as output */
        for (int j = 0; s->n_computed + n_new == s->n_tokens && j <= q->n_draft; j++) {
            int l = n_logits++, d = q->n_draft;
            assert_int_equal(b->logit_rows[l], t0 + n_new - 1 - d + j);
            assert_int_equal(f->sb.logit_seq[l], i);
            const sampler_row_t *sr = &f->sb.rows[l];
            assert_ptr_equal(sr->params, &f->sp);
            assert_ptr_equal(sr->prompt, s->tokens);
            assert_int_equal(sr->n_prompt, s->n_prompt);
            assert_ptr_equal(sr->output, s->tokens + s->n_prompt);
            assert_int_equal(sr->n_output, s->n_tokens - d - s->n_prompt + j);
            assert_int_equal(sr->seed, q->seed);
            assert_int_equal(sr->choice, q->choice);
            assert_int_equal(sr->n_eos, 2);
            assert_ptr_equal(f->sb.rows_owner[l], j == 0 ? q : NULL);
        }
    }
    assert_int_equal(b->n_logits, n_logits);
}

/* Advances the plan as the scheduler would after the step: computed tokens, plus a new token
 * for the sequences that got logits (and a block when it starts one). */
static void advance(fixture_t *f, const sched_out_t *p) {
    for (int i = 0; i < p->n; i++) {
        sched_seq_t *s = p->seqs[i];
        s->n_computed += p->n_new[i];
        if (s->n_computed == s->n_tokens) {
            assert_int_equal(sched_seq_append(s, 7000 + s->n_tokens), 0);
            s->n_blocks = (s->n_tokens + BS - 1) / BS;
        }
    }
}

static void test_layout_and_persistence(void **state) {
    fixture_t *f = malloc(sizeof *f);
    setup(f);
    make_seq(f, 0, 9, 9, 0); /* a prompt in two chunks: 5 now, 4 next */
    make_seq(f, 1, 6, 8, 7); /* a decode */
    make_seq(f, 2, 3, 3, 2); /* a prompt's last token (the rest was cached) */
    f->seqs[2].s.prefix_queried = 2;
    f->seqs[2].s.cached_tokens = 2;
    int which[] = {0, 1, 2}, n_new[] = {5, 1, 1};
    sched_out_t p = plan_of(f, which, n_new, 3);
    be_batch_t b;
    batch_counts_t c;
    assert_int_equal(batch_build(&f->sb, &p, 1.0, &b, &c), 0);
    check_batch(f, &p, &b);
    assert_int_equal(f->firsts, 3);
    assert_int_equal(c.decode, 1);
    assert_int_equal(c.prefill, 6);
    assert_int_equal(c.prefix_queried, 2); /* seq 2 is choice 0: seq 1 is choice 1 */
    assert_int_equal(c.prefix_hit, 2);
    assert_int_equal(b.n_logits, 2);
    int rows_before[3] = {f->seqs[0].row, f->seqs[1].row, f->seqs[2].row};

    /* next step: the same sequences keep their rows; the decode keeps its sampler row */
    advance(f, &p);
    n_new[0] = 4;
    p = plan_of(f, which, n_new, 3);
    assert_int_equal(batch_build(&f->sb, &p, 2.0, &b, &c), 0);
    check_batch(f, &p, &b);
    assert_int_equal(f->firsts, 3); /* no new first scheduling */
    for (int k = 0; k < 3; k++)
        assert_int_equal(f->seqs[k].row, rows_before[k]);
    assert_int_equal(c.prefix_queried, 0);

    /* seq 1 finishes; seq 3 arrives and takes a free row, tables stay right */
    batch_forget(&f->sb, &f->seqs[1]);
    advance(f, &p);
    make_seq(f, 3, 5, 5, 0);
    int which2[] = {0, 2, 3}, n_new2[] = {1, 1, 5};
    p = plan_of(f, which2, n_new2, 3);
    assert_int_equal(batch_build(&f->sb, &p, 3.0, &b, &c), 0);
    check_batch(f, &p, &b);
    assert_int_equal(f->firsts, 4);

    /* a sequence much longer than the table is wide: the stride grows, every row rewritten */
    advance(f, &p);
    f->seqs[0].s.n_blocks = 20;
    int which3[] = {0, 2, 3}, n_new3[] = {1, 1, 1};
    p = plan_of(f, which3, n_new3, 3);
    int stride = f->sb.stride;
    assert_int_equal(batch_build(&f->sb, &p, 4.0, &b, &c), 0);
    assert_true(f->sb.stride > stride);
    check_batch(f, &p, &b);
    teardown(f);
    free(f);
}

/* A sequence whose blocks were dropped (preempted and re-admitted: blocks_gen moved) gets its
 * row written from scratch; and one that changed rows writes every block of the new one. */
static void test_rows_rewritten_after_preemption(void **state) {
    fixture_t *f = malloc(sizeof *f);
    setup(f);
    make_seq(f, 0, 4, 6, 5);
    make_seq(f, 1, 4, 6, 5);
    int which[] = {0, 1}, n_new[] = {1, 1};
    sched_out_t p = plan_of(f, which, n_new, 2);
    be_batch_t b;
    batch_counts_t c;
    assert_int_equal(batch_build(&f->sb, &p, 1.0, &b, &c), 0);
    advance(f, &p);
    /* a steady decode step keeps both sampler rows */
    int srows[2] = {f->seqs[0].srow, f->seqs[1].srow};
    p = plan_of(f, which, n_new, 2);
    assert_int_equal(batch_build(&f->sb, &p, 1.5, &b, &c), 0);
    check_batch(f, &p, &b);
    assert_int_equal(f->seqs[0].srow, srows[0]);
    assert_int_equal(f->seqs[1].srow, srows[1]);
    advance(f, &p);
    /* seq 0 is preempted: new blocks, new generation; seq 1 runs alone meanwhile */
    f->seqs[0].s.blocks_gen++;
    for (int k = 0; k < 16; k++)
        f->seqs[0].s.blocks[k] = 500 + k;
    int only1[] = {1}, one[] = {1};
    p = plan_of(f, only1, one, 1);
    assert_int_equal(batch_build(&f->sb, &p, 2.0, &b, &c), 0);
    check_batch(f, &p, &b);
    advance(f, &p);
    int both[] = {1, 0}, n2[] = {1, 1};
    p = plan_of(f, both, n2, 2);
    assert_int_equal(batch_build(&f->sb, &p, 3.0, &b, &c), 0);
    check_batch(f, &p, &b);
    teardown(f);
    free(f);
}

/* Speculative drafts (spec.h): a decode with 3 drafts computes 4 tokens and gets 4 logit rows,
 * the drafts counted apart from prompt and decode tokens; its neighbour's rows follow. The next
 * step, drafts gone, the rows are one per sequence again and the decode's sampler row is
 * rewritten where a draft row had been. */
static void test_draft_rows(void **state) {
    fixture_t *f = malloc(sizeof *f);
    setup(f);
    make_seq(f, 0, 4, 9, 5); /* a decode at 5, with drafts at 6, 7, 8 */
    f->seqs[0].n_draft = 3;
    make_seq(f, 1, 4, 6, 5); /* a plain decode */
    f->sb.n_drafts = 3;
    int which[] = {0, 1}, n_new[] = {4, 1};
    sched_out_t p = plan_of(f, which, n_new, 2);
    be_batch_t b;
    batch_counts_t c;
    assert_int_equal(batch_build(&f->sb, &p, 1.0, &b, &c), 0);
    check_batch(f, &p, &b);
    assert_int_equal(b.n_logits, 5);
    assert_int_equal(c.decode, 2);
    assert_int_equal(c.prefill, 0);
    assert_int_equal(c.draft, 3);
    /* two drafts accepted: the engine takes them out and appends the run */
    f->seqs[0].s.n_tokens -= 3;
    f->seqs[0].n_draft = 0;
    f->sb.n_drafts = 0;
    p.n_new[0] = 3;
    advance(f, &p);
    assert_int_equal(f->seqs[0].s.n_computed, 8);
    f->seqs[0].s.n_tokens = 9;
    int n_new2[] = {1, 1};
    p = plan_of(f, which, n_new2, 2);
    assert_int_equal(batch_build(&f->sb, &p, 2.0, &b, &c), 0);
    check_batch(f, &p, &b);
    assert_int_equal(b.n_logits, 2);
    teardown(f);
    free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_draft_rows),
        cmocka_unit_test(test_layout_and_persistence),
        cmocka_unit_test(test_rows_rewritten_after_preemption),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
